//! What DEST's filesystem can do, found when a receive starts by trying
//! each thing once in a scratch directory (`.rreceive-probe-PID`, removed
//! after), and the fallbacks for what it cannot:
//!
//! - [`rename_noreplace`]: a rename that never replaces a name that
//!   exists, where the filesystem refuses `RENAME_NOREPLACE` (FUSE
//!   filesystems without rename2, such as GlusterFS and sshfs).
//! - The order in which a power cut leaves name changes ([`Order`]): the
//!   durable checkpoints' replay reads what is on disk after a power cut
//!   as a prefix of the changes made since the last checkpoint, as ext4,
//!   xfs and btrfs commit them; elsewhere a power cut resumes from the
//!   last checkpoint only as far as the filesystem kept what the
//!   checkpoint's `syncfs` sent it (said in `-v`, `--help` and the guide).
//!
//! A receive killed between the two steps of an emulated rename of a
//! directory leaves an empty directory of mode 000 at the new name (a
//! [placeholder](is_placeholder)); [`clear_placeholders`], run whenever
//! DEST is opened, removes it, which leaves what a kill just before the
//! rename leaves.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode};
use nix::unistd::UnlinkatFlags;

use crate::ioctl;

/// How a power cut leaves the changes to names made after the last
/// `syncfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// In the order they were made (ext4, xfs, btrfs; overlayfs over
    /// them): a power cut resumes from the last checkpoint and replays
    /// what came after it.
    Known,
    /// Nothing survives a power cut (tmpfs).
    Volatile,
    /// Not known (FUSE, network and other filesystems): a power cut
    /// resumes from the last checkpoint only as far as the filesystem
    /// kept what that checkpoint's `syncfs` sent it.
    Unknown,
}

/// The sshfs mount options under which a change made through one name
/// of a file shows under its other names at once (sshfs's own cache of
/// attributes by path and the kernel's off).
pub const SSHFS_FRESH: &str = "dir_cache=no,attr_timeout=0,entry_timeout=0";

/// What DEST's filesystem can do.
#[derive(Debug, Clone)]
pub struct Caps {
    /// Its type: `ext4`, `xfs`, `fuse.glusterfs`, `overlay over ext4`...
    pub fs: String,
    /// FUSE (whose `syncfs` reaches the FUSE server, not its disk).
    pub fuse: bool,
    /// `renameat2(RENAME_NOREPLACE)` works.
    pub rename_noreplace: bool,
    /// `open(O_TMPFILE)` works.
    pub tmpfile: bool,
    /// `FICLONE` works (reflinks).
    pub reflink: bool,
    /// The largest `user.` xattr value tried that it took: 0 (none), 1,
    /// 4000 or 65536 bytes.
    pub xattr_max: usize,
    /// POSIX ACLs (`system.posix_acl_access`) are kept.
    pub acl: bool,
    /// Inode flags can be read (`FS_IOC_GETFLAGS`).
    pub inode_flags: bool,
    /// Fifos can be made.
    pub fifos: bool,
    /// Times are kept to the nanosecond (SFTP keeps whole seconds).
    pub time_ns: bool,
    /// Times before 1970 are kept (SFTP carries unsigned 32-bit seconds).
    pub time_pre_1970: bool,
    /// Setting a symlink's owner or times changes what it points to
    /// instead (sshfs: SFTP follows links): never done there.
    pub symlinks_followed: bool,
    /// A hard link shows as one file: both names with a link count of 2
    /// and one inode number (sshfs: every name has a link count of 1 and
    /// an inode number of its own).
    pub links_shown: bool,
    /// A change made through one name of a file shows under its other
    /// names at once (sshfs with its attribute caches on: only after a
    /// while, each name's attributes cached apart).
    pub names_fresh: bool,
    /// How a power cut leaves name changes.
    pub order: Order,
}

impl Caps {
    /// What is assumed of a filesystem not probed: everything the kernel
    /// filesystems have, rename2 included (a refusal falls back).
    pub fn assumed(fs: String) -> Caps {
        Caps {
            fs,
            fuse: false,
            rename_noreplace: true,
            tmpfile: true,
            reflink: false,
            xattr_max: 1,
            acl: true,
            inode_flags: true,
            fifos: true,
            time_ns: true,
            time_pre_1970: true,
            symlinks_followed: false,
            links_shown: true,
            names_fresh: true,
            order: Order::Unknown,
        }
    }
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yn = |b: bool| if b { "yes" } else { "no" };
        let xattrs = match self.xattr_max {
            0 => "no".to_string(),
            65536 => "yes (64 KiB)".to_string(),
            4000 => "yes (4000 bytes, not 64 KiB)".to_string(),
            n => format!("yes ({n} byte(s), not 4000)"),
        };
        write!(
            f,
            "{} (rename2 noreplace: {}{}, O_TMPFILE: {}, reflink: {}, user xattrs: {xattrs}, \
             acl: {}, inode flags: {}, fifos: {}, times: {}, symlink owner and times: {}, \
             hard links: {}, power-loss order: {})",
            self.fs,
            yn(self.rename_noreplace),
            if self.rename_noreplace {
                ""
            } else {
                " (emulated: an exclusive mkdir or link, then rename)"
            },
            yn(self.tmpfile),
            yn(self.reflink),
            yn(self.acl),
            yn(self.inode_flags),
            yn(self.fifos),
            if self.time_ns {
                "to the nanosecond"
            } else {
                "whole seconds only"
            },
            if self.symlinks_followed {
                "no (the filesystem would follow the link)"
            } else {
                "yes"
            },
            match (self.links_shown, self.names_fresh) {
                (true, true) => "yes",
                (true, false) => "yes (a change shows under a file's other names only later)",
                (false, true) => "not shown (each name has a link count of 1)",
                (false, false) =>
                    "not shown (each name has a link count of 1 and its own \
                     attributes, which show a change made through another name only later)",
            },
            match self.order {
                Order::Known => "known",
                Order::Volatile => "none kept (tmpfs)",
                Order::Unknown if self.fuse =>
                    "unknown: a power cut resumes only from the last checkpoint, as far as the \
                     FUSE server had written out what its syncfs sent",
                Order::Unknown =>
                    "unknown: a power cut resumes only from the last checkpoint, as far as the \
                     filesystem kept what its syncfs sent",
            }
        )
    }
}

/// The name of the mount `fd` is on as /proc/self/mountinfo gives it
/// (`fuse.glusterfs`, `overlay`), with its super options.
fn mount_type(fd: BorrowedFd<'_>) -> Option<(String, String)> {
    let id = ioctl::mount_id_reusable(fd)?;
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    for line in text.lines() {
        let mut fields = line.split(' ');
        if fields.next()?.parse::<u64>().ok() != Some(id) {
            continue;
        }
        let rest = line.split(" - ").nth(1)?;
        let mut r = rest.split(' ');
        let fstype = r.next()?.to_string();
        let _source = r.next();
        let opts = r.next().unwrap_or("").to_string();
        return Some((fstype, opts));
    }
    None
}

/// A name for a statfs magic.
fn magic_name(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x9123_683e => "btrfs",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlay",
        0x6573_5546 => "fuse",
        0x6969 => "nfs",
        0x2fc1_2fc1 => "zfs",
        0xf2f5_2010 => "f2fs",
        0xff53_4d42 => "cifs",
        0xfe53_4d42 => "smb2",
        0x00c3_6400 => "ceph",
        _ => return None,
    })
}

fn fs_magic(fd: BorrowedFd<'_>) -> Option<i64> {
    nix::sys::statfs::fstatfs(fd)
        .ok()
        .map(|s| s.filesystem_type().0)
}

/// The filesystem type of DEST (`fd`), whether FUSE, and the order a
/// power cut leaves its name changes in.
fn kind(fd: BorrowedFd<'_>) -> (String, bool, Order) {
    let magic = fs_magic(fd).unwrap_or(0);
    let mounted = mount_type(fd);
    let base = magic_name(magic)
        .map(str::to_string)
        .unwrap_or_else(|| format!("filesystem {magic:#x}"));
    let fuse = magic == 0x6573_5546 || mounted.as_ref().is_some_and(|(t, _)| t.starts_with("fuse"));
    let order_of = |name: &str| match name {
        "btrfs" | "ext4" | "xfs" => Order::Known,
        "tmpfs" => Order::Volatile,
        _ => Order::Unknown,
    };
    if fuse {
        let t = mounted.map_or(base, |(t, _)| t);
        return (t, true, Order::Unknown);
    }
    if base == "overlay" {
        // Changes go to the upper directory's filesystem in the order
        // made (copy-ups are synced before they are renamed into place,
        // unless mounted `volatile`).
        let Some((_, opts)) = mounted else {
            return (base, false, Order::Unknown);
        };
        let upper = opts
            .split(',')
            .find_map(|o| o.strip_prefix("upperdir="))
            .map(str::to_string);
        let volatile = opts.split(',').any(|o| o == "volatile");
        let upper_fs = upper
            .and_then(|u| std::fs::File::open(u).ok())
            .and_then(|f| fs_magic(f.as_fd()))
            .and_then(magic_name);
        return match upper_fs {
            Some(u) => (
                format!("overlay over {u}"),
                false,
                if volatile {
                    Order::Unknown
                } else {
                    order_of(u)
                },
            ),
            None => (base, false, Order::Unknown),
        };
    }
    let order = order_of(&base);
    (base, false, order)
}

/// The scratch directory's name for this process.
fn probe_name() -> Vec<u8> {
    let mut v = crate::subvol::RESERVED_PREFIX.to_vec();
    v.extend_from_slice(format!("-probe-{}", std::process::id()).as_bytes());
    v
}

/// Removes probe directories of processes no longer running (a receive
/// killed while probing).
fn clear_stale_probes(dest: BorrowedFd<'_>) {
    let mut stale = Vec::new();
    let mut prefix = crate::subvol::RESERVED_PREFIX.to_vec();
    prefix.extend_from_slice(b"-probe-");
    for (n, _) in crate::meta::entries(dest) {
        let Some(pid) = n.strip_prefix(prefix.as_slice()) else {
            continue;
        };
        let Some(pid) = std::str::from_utf8(pid)
            .ok()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
            stale.push(n);
        }
    }
    for n in stale {
        let _ = crate::snapshot::workdir::remove_tree(dest, &n);
    }
}

/// A minimal access ACL (user::rw-, group::r--, other::r--), as the
/// `system.posix_acl_access` xattr holds it.
const ACL: [u8; 28] = [
    2, 0, 0, 0, // version
    1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, // ACL_USER_OBJ rw-
    4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, // ACL_GROUP_OBJ r--
    0x20, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, // ACL_OTHER r--
];

/// Tries what DEST (`dest`) can do, in a scratch directory removed after.
/// Whatever cannot be tried (DEST read-only, say) is taken as missing,
/// but rename2, which a refusal falls back from anyway.
pub fn probe(dest: BorrowedFd<'_>) -> Caps {
    let (fs, fuse, order) = kind(dest);
    clear_stale_probes(dest);
    let name = probe_name();
    let _ = crate::snapshot::workdir::remove_tree(dest, &name);
    if mkdirat(
        Some(dest.as_raw_fd()),
        name.as_slice(),
        Mode::from_bits_retain(0o700),
    )
    .is_err()
    {
        let mut c = Caps::assumed(fs);
        c.fuse = fuse;
        c.order = order;
        return c;
    }
    let caps = match ioctl::openat(
        Some(dest.as_raw_fd()),
        name.as_slice(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => probe_in(dir.as_fd(), fs.clone(), fuse, order),
        Err(_) => {
            let mut c = Caps::assumed(fs);
            c.fuse = fuse;
            c.order = order;
            c
        }
    };
    let _ = crate::snapshot::workdir::remove_tree(dest, &name);
    caps
}

fn probe_in(dir: BorrowedFd<'_>, fs: String, fuse: bool, order: Order) -> Caps {
    let raw = dir.as_raw_fd();
    // rename2: a directory renamed to a name that is free.
    let rename_noreplace = mkdirat(Some(raw), "a", Mode::from_bits_retain(0o700)).is_ok()
        && !matches!(
            nix::fcntl::renameat2(
                Some(raw),
                "a",
                Some(raw),
                "b",
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            ),
            Err(e) if refused(e)
        );
    let tmpfile = ioctl::openat(
        Some(raw),
        ".",
        OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(0o600),
    )
    .is_ok();
    let reflink = crate::snapshot::copy::reflinks_work(dir).unwrap_or(false);
    let file = ioctl::openat(
        Some(raw),
        "f",
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(0o644),
    )
    .ok();
    let (xattr_max, acl, inode_flags) = match file {
        Some(f) => {
            let f = std::fs::File::from(f);
            use xattr::FileExt;
            let mut max = 0;
            for size in [1usize, 4000, 65536] {
                if f.set_xattr("user.rreceive.probe", &vec![b'x'; size])
                    .is_err()
                {
                    break;
                }
                max = size;
            }
            let acl = f.set_xattr("system.posix_acl_access", &ACL).is_ok();
            let flags = ioctl::get_inode_flags(f.as_fd()).is_ok();
            (max, acl, flags)
        }
        None => (0, false, false),
    };
    let fifos = nix::unistd::mkfifoat(Some(raw), "p", Mode::from_bits_retain(0o600)).is_ok();
    let (time_ns, time_pre_1970) = keeps_times(dir);
    let symlinks_followed = follows_symlinks(dir);
    let (links_shown, names_fresh) = hard_links(dir);
    if symlinks_followed {
        if let Ok(st) = nix::sys::stat::fstat(raw) {
            crate::meta::guard_symlinks(st.st_dev);
        }
    }
    Caps {
        fs,
        fuse,
        rename_noreplace,
        tmpfile,
        reflink,
        xattr_max,
        acl,
        inode_flags,
        fifos,
        time_ns,
        time_pre_1970,
        symlinks_followed,
        links_shown,
        names_fresh,
        order,
    }
}

/// A new file `name` in `dir` (the probe's scratch directory), to write.
fn new_file(dir: BorrowedFd<'_>, name: &str) -> Option<std::os::fd::OwnedFd> {
    ioctl::openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(0o600),
    )
    .ok()
}

/// Whether a hard link shows as one file in `dir` (a link count of 2 and
/// one inode number under both names), and whether a change made through
/// one name shows at once under the other: tried on new files "h" and
/// "h2". What cannot be tried is taken as shown.
fn hard_links(dir: BorrowedFd<'_>) -> (bool, bool) {
    let raw = dir.as_raw_fd();
    let Some(f) = new_file(dir, "h") else {
        return (true, true);
    };
    if nix::unistd::linkat(Some(raw), "h", Some(raw), "h2", AtFlags::empty()).is_err() {
        return (true, true);
    }
    let stat = |n: &str| fstatat(Some(raw), n, AtFlags::AT_SYMLINK_NOFOLLOW);
    let (Ok(a), Ok(b)) = (stat("h"), stat("h2")) else {
        return (true, true);
    };
    let shown = a.st_nlink == 2 && b.st_nlink == 2 && a.st_ino == b.st_ino;
    // One byte through "h" (closed, so that it reached the filesystem),
    // then "h2" looked at again.
    let mut f = std::fs::File::from(f);
    let written = std::io::Write::write_all(&mut f, b"x").is_ok();
    drop(f);
    let fresh = !written || stat("h2").map_or(true, |st| st.st_size == 1);
    (shown, fresh)
}

/// Whether a file's mtime keeps its nanoseconds in `dir`, and a time
/// before 1970 (tried on a new file "n").
fn keeps_times(dir: BorrowedFd<'_>) -> (bool, bool) {
    let raw = dir.as_raw_fd();
    let Some(f) = new_file(dir, "n") else {
        return (true, true);
    };
    drop(f);
    let t = nix::sys::time::TimeSpec::new(1_000_000_000, 123_456_789);
    if nix::sys::stat::utimensat(
        Some(raw),
        "n",
        &t,
        &t,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .is_err()
    {
        return (true, true);
    }
    let ns = fstatat(Some(raw), "n", AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_or(true, |st| st.st_mtime_nsec == 123_456_789);
    // 1969-01-01.
    let old = nix::sys::time::TimeSpec::new(-31_536_000, 0);
    let pre_1970 = nix::sys::stat::utimensat(
        Some(raw),
        "n",
        &old,
        &old,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .is_err()
        || fstatat(Some(raw), "n", AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_or(true, |st| st.st_mtime == -31_536_000);
    (ns, pre_1970)
}

/// Whether setting the times of a symlink (`utimensat` with
/// `AT_SYMLINK_NOFOLLOW`) in `dir` follows it: tried on a link to nothing,
/// which such a filesystem refuses with ENOENT (what it found at the
/// target; a file there would be changed instead, whose cached times would
/// not show it).
fn follows_symlinks(dir: BorrowedFd<'_>) -> bool {
    let raw = dir.as_raw_fd();
    if nix::unistd::symlinkat("nothing-here", Some(raw), "l").is_err() {
        return false;
    }
    let t = nix::sys::time::TimeSpec::new(1_000_000_000, 0);
    nix::sys::stat::utimensat(
        Some(raw),
        "l",
        &t,
        &t,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    ) == Err(Errno::ENOENT)
}

/// Whether a `renameat2` error says the flag is not supported there (not
/// that the rename itself is wrong).
pub(crate) fn refused(e: Errno) -> bool {
    matches!(
        e,
        Errno::EINVAL | Errno::ENOTSUP | Errno::ENOSYS | Errno::ENOTTY
    )
}

/// The mode that marks an emulated rename's placeholder: an empty
/// directory no one can enter.
const PLACEHOLDER_MODE: u32 = 0;

/// Renames `from` to `to` in directory `dir` unless a name `to` exists
/// (EEXIST then): `renameat2(RENAME_NOREPLACE)` where `native` (cleared
/// when the filesystem refuses the flag), else emulated without ever
/// replacing anything that exists: for a directory, `to` made by an
/// exclusive `mkdir` (mode 000, a [placeholder](is_placeholder)) and
/// `from` renamed over that empty directory; for anything else, `to` made
/// by `linkat` (exclusive), then `from` unlinked.
pub(crate) fn rename_noreplace(
    dir: BorrowedFd<'_>,
    from: &[u8],
    to: &[u8],
    native: &std::cell::Cell<bool>,
) -> nix::Result<()> {
    let raw = dir.as_raw_fd();
    if native.get() {
        match nix::fcntl::renameat2(
            Some(raw),
            from,
            Some(raw),
            to,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Err(e) if refused(e) => native.set(false),
            r => return r,
        }
    }
    let st = fstatat(Some(raw), from, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        nix::unistd::linkat(Some(raw), from, Some(raw), to, AtFlags::empty())?;
        return nix::unistd::unlinkat(Some(raw), from, UnlinkatFlags::NoRemoveDir);
    }
    mkdirat(Some(raw), to, Mode::from_bits_retain(PLACEHOLDER_MODE))?;
    match nix::fcntl::renameat(Some(raw), from, Some(raw), to) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = nix::unistd::unlinkat(Some(raw), to, UnlinkatFlags::RemoveDir);
            Err(e)
        }
    }
}

/// Whether `name` in `dir` is what an emulated rename killed between its
/// two steps left: an empty directory of mode 000, named as no reserved
/// name is.
pub(crate) fn is_placeholder(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    if name.starts_with(crate::subvol::RESERVED_PREFIX) {
        return false;
    }
    let Ok(st) = fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return false;
    };
    st.st_mode == (libc::S_IFDIR | PLACEHOLDER_MODE) && st.st_nlink <= 2
}

/// Removes the placeholders an emulated rename killed between its two
/// steps left in DEST (`dest`): an empty directory goes with `rmdir`,
/// which refuses any other.
pub(crate) fn clear_placeholders(dest: BorrowedFd<'_>) {
    let names = crate::meta::entries(dest)
        .into_iter()
        .filter(|(_, t)| matches!(t, Some(nix::dir::Type::Directory) | None))
        .map(|(n, _)| n);
    for n in names {
        if is_placeholder(dest, &n) {
            let _ = nix::unistd::unlinkat(
                Some(dest.as_raw_fd()),
                n.as_slice(),
                UnlinkatFlags::RemoveDir,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::os::fd::OwnedFd;

    fn dir(p: &std::path::Path) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(p).unwrap())
    }

    /// The emulation renames a directory and a file to free names and
    /// refuses taken ones, changing nothing then.
    #[test]
    fn emulated_noreplace_never_replaces() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        let d = dir(p);
        let native = Cell::new(false);
        std::fs::create_dir(p.join("a")).unwrap();
        std::fs::write(p.join("a/x"), b"1").unwrap();
        std::fs::create_dir(p.join("taken")).unwrap();
        std::fs::write(p.join("f"), b"2").unwrap();
        std::fs::write(p.join("g"), b"3").unwrap();
        assert_eq!(
            rename_noreplace(d.as_fd(), b"a", b"taken", &native),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            rename_noreplace(d.as_fd(), b"f", b"g", &native),
            Err(Errno::EEXIST)
        );
        assert_eq!(std::fs::read(p.join("g")).unwrap(), b"3");
        rename_noreplace(d.as_fd(), b"a", b"b", &native).unwrap();
        rename_noreplace(d.as_fd(), b"f", b"h", &native).unwrap();
        assert_eq!(std::fs::read(p.join("b/x")).unwrap(), b"1");
        assert_eq!(std::fs::read(p.join("h")).unwrap(), b"2");
        assert!(!p.join("a").exists() && !p.join("f").exists());
        use std::os::unix::fs::PermissionsExt;
        assert_ne!(
            std::fs::metadata(p.join("b")).unwrap().permissions().mode() & 0o777,
            0,
            "the directory keeps its mode"
        );
    }

    /// What a kill between the emulation's two steps leaves goes when DEST
    /// is opened; an empty directory of another mode, or one not empty,
    /// stays.
    #[test]
    fn a_placeholder_left_by_a_kill_is_cleared() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o0)
            .create(p.join("s1"))
            .unwrap();
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(p.join("empty"))
            .unwrap();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(p.join("full"))
            .unwrap();
        std::fs::write(p.join("full/x"), b"").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p.join("full"), std::fs::Permissions::from_mode(0o0)).unwrap();
        clear_placeholders(dir(p).as_fd());
        assert!(!p.join("s1").exists());
        assert!(p.join("empty").is_dir());
        assert!(p.join("full").is_dir());
    }

    /// The probe leaves nothing behind and says what a local filesystem
    /// has.
    #[test]
    fn the_probe_cleans_up() {
        let t = tempfile::tempdir().unwrap();
        let c = probe(dir(t.path()).as_fd());
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
        assert!(c.rename_noreplace, "{c}");
        assert!(c.to_string().contains("power-loss order"), "{c}");
        assert!(c.links_shown && c.names_fresh, "{c}");
    }
}
