//! A subvolume's work directory in DEST, `DEST/.rreceive-work-<name in
//! hex>`: the in-place stash ([`super::overlay`]) and copies made before
//! they replace a hard link (`--link`) live there, outside the tree being
//! received, so no name of the stream's is ever touched. It is removed when
//! the receive of that subvolume ends, whether it succeeded or not.
//!
//! Part of the snapshot room ([`crate::snapshot`]). May call: `ioctl`,
//! `meta`, `flags`; nothing above them (`overlay` calls it, not the
//! reverse).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::ioctl;
use crate::meta::open_dir;

/// The file in it recording the mode (see [`Workdir::record_mode`]).
const MODE: &str = "mode";

/// What the mode file of a work directory says.
pub(crate) struct Recorded {
    /// `link` or `in-place`.
    pub mode: String,
    /// Linked: inode numbers of the new tree's own files with several names.
    pub own: Vec<u64>,
    /// Linked: inode numbers of copies and the flags due to them at END.
    pub late: Vec<(u64, u32)>,
}

/// How what a change to a linked or in-place tree needs first (a copy's
/// data, the overlay's log and saved bytes, the mode file) reaches the
/// disk before the change can: with durable checkpoints, a receive cut by
/// a power loss must find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteAhead {
    /// No durable checkpoints: nothing is flushed.
    Off,
    /// Each file flushed (`fdatasync`; ext4 and xfs commit the changes to
    /// names made before it with it). `renames_keep_data`: the filesystem
    /// writes a file's data before a rename over another file is committed
    /// (ext4's `auto_da_alloc` in `data=ordered`), so a copy that replaces
    /// a link needs no flush of its own.
    Flush { renames_keep_data: bool },
    /// The whole filesystem synced (btrfs: an fsync goes to its log tree,
    /// which keeps no order with other changes).
    Sync,
}

impl WriteAhead {
    /// Makes what was written to `files` durable. Flushed, all but the
    /// last are written out and the last flushed: ext4 and xfs commit the
    /// sizes and extents of the others with the journal that flush commits
    /// (one journal commit, not one per file), and flush the disk's cache
    /// after their data.
    pub(crate) fn barrier(self, files: &[&std::fs::File]) -> io::Result<()> {
        match self {
            WriteAhead::Off => Ok(()),
            WriteAhead::Flush { .. } => {
                let Some((last, others)) = files.split_last() else {
                    return Ok(());
                };
                for f in others {
                    ioctl::write_out(f.as_fd())?;
                }
                last.sync_data()
            }
            WriteAhead::Sync => match files.first() {
                Some(f) => Ok(nix::unistd::syncfs(f.as_raw_fd())?),
                None => Ok(()),
            },
        }
    }
}

/// Whether the ext4 filesystem of `fd` keeps a file's data before a rename
/// over another file is committed: `auto_da_alloc` (the default) and
/// ordered (or journalled) data, as its mount's super options say.
pub(crate) fn ext4_renames_keep_data(fd: BorrowedFd<'_>) -> bool {
    let Ok(st) = nix::sys::stat::fstat(fd.as_raw_fd()) else {
        return false;
    };
    let dev = format!(
        "{}:{}",
        nix::sys::stat::major(st.st_dev),
        nix::sys::stat::minor(st.st_dev)
    );
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines()
        .filter(|l| l.split(' ').nth(2) == Some(dev.as_str()))
        .filter_map(|l| l.split(" - ").nth(1))
        .filter_map(|tail| {
            let mut f = tail.split(' ');
            (f.next() == Some("ext4")).then(|| f.nth(1).unwrap_or("").to_string())
        })
        .next()
        .is_some_and(|opts| {
            !opts
                .split(',')
                .any(|o| o == "noauto_da_alloc" || o == "data=writeback")
        })
}

/// The lines of `text` that end with a newline: one cut short by a power
/// loss, or the zeros a filesystem may show past the last flush, are not.
pub(crate) fn whole_lines(text: &str) -> impl Iterator<Item = &str> {
    let end = text.rfind('\n').map_or(0, |i| i + 1);
    text[..end].lines().take_while(|l| !l.contains('\0'))
}

/// The work directory of one subvolume.
pub(crate) struct Workdir {
    fd: OwnedFd,
    name: Vec<u8>,
}

/// Its name in DEST for subvolume `name`.
pub(crate) fn name_for(name: &[u8]) -> Vec<u8> {
    let mut s = b".rreceive-work-".to_vec();
    s.extend_from_slice(btrfs_text::hex::encode(name).as_bytes());
    s
}

impl Workdir {
    /// Makes the work directory of subvolume `name` in `dest` (one left
    /// by an earlier run is removed first: nothing in it is needed now).
    pub(crate) fn create(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<Workdir> {
        let name = name_for(name);
        remove(dest, &name)?;
        nix::sys::stat::mkdirat(
            Some(dest.as_raw_fd()),
            name.as_slice(),
            Mode::from_bits_retain(0o700),
        )?;
        Ok(Workdir {
            fd: open_dir(dest, &name).map(OwnedFd::from)?,
            name,
        })
    }

    /// Its descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The work directory of subvolume `name` left by a receive that
    /// stopped, if any.
    pub(crate) fn open(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<Workdir>> {
        let name = name_for(name);
        match open_dir(dest, &name).map(OwnedFd::from) {
            Ok(fd) => Ok(Some(Workdir { fd, name })),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Records how the subvolume relates to its parent's tree (`link` or
    /// `in-place`), so that a resumed receive keeps to it whatever its
    /// options; and, linked, the inodes with several names that are the
    /// new tree's own.
    pub(crate) fn record_mode(
        &self,
        mode: &str,
        own: impl IntoIterator<Item = u64>,
    ) -> io::Result<()> {
        let mut body = format!("{mode}\n");
        for ino in own {
            body.push_str(&format!("{ino}\n"));
        }
        let fd = ioctl::openat(
            Some(self.fd.as_raw_fd()),
            MODE,
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_TRUNC
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC,
            Mode::from_bits_retain(0o600),
        )?;
        std::io::Write::write_all(&mut std::fs::File::from(fd), body.as_bytes())
    }

    /// One more line of the mode file, made to reach the disk as `ahead`
    /// says before what it describes is done.
    fn append_mode(&self, line: &str, ahead: WriteAhead) -> io::Result<()> {
        let fd = ioctl::openat(
            Some(self.fd.as_raw_fd()),
            MODE,
            OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, line.as_bytes())?;
        ahead.barrier(&[&f])
    }

    /// The mode file, to be flushed.
    pub(crate) fn mode_file(&self) -> io::Result<std::fs::File> {
        let fd = ioctl::openat(
            Some(self.fd.as_raw_fd()),
            MODE,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(fd.into())
    }

    /// One more inode of the new tree's own (linked): recorded before the
    /// name that gives it a second link is made.
    pub(crate) fn record_own(&self, ino: u64, ahead: WriteAhead) -> io::Result<()> {
        self.append_mode(&format!("{ino}\n"), ahead)
    }

    /// A copy of the new tree's own (linked) whose immutable or
    /// append-only flags `bits` are due at END: recorded before it replaces
    /// the parent's link, so that a receive cut by a power loss still sets
    /// them.
    pub(crate) fn record_late(&self, ino: u64, bits: u32, ahead: WriteAhead) -> io::Result<()> {
        self.append_mode(&format!("late {ino} {bits}\n"), ahead)
    }

    /// What [`Workdir::record_mode`], [`Workdir::record_own`] and
    /// [`Workdir::record_late`] recorded. A last line cut short (a power
    /// loss while it was written) is not read.
    pub(crate) fn mode(&self) -> io::Result<Option<Recorded>> {
        let fd = match ioctl::openat(
            Some(self.fd.as_raw_fd()),
            MODE,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text)?;
        let mut lines = whole_lines(&text);
        let Some(mode) = lines.next() else {
            return Ok(None);
        };
        let bad = || io::Error::other("the work directory's mode file is malformed");
        let mut rec = Recorded {
            mode: mode.to_string(),
            own: Vec::new(),
            late: Vec::new(),
        };
        for l in lines {
            match l.strip_prefix("late ") {
                Some(rest) => {
                    let (ino, bits) = rest.split_once(' ').ok_or_else(bad)?;
                    rec.late.push((
                        ino.parse().map_err(|_| bad())?,
                        bits.parse().map_err(|_| bad())?,
                    ));
                }
                None => rec.own.push(l.parse().map_err(|_| bad())?),
            }
        }
        Ok(Some(rec))
    }

    /// Removes it and what it holds.
    pub(crate) fn remove(self, dest: BorrowedFd<'_>) -> io::Result<()> {
        drop(self.fd);
        remove(dest, &self.name)
    }
}

fn remove(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    remove_tree(dest, name)
}

/// Removes `name` in directory `dir` and everything beneath it, following
/// no symlink; immutable and append-only flags in the way are cleared.
/// Nothing there is not an error.
pub(crate) fn remove_tree(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let sub = match open_dir(dir, name).map(OwnedFd::from) {
        Ok(d) => d,
        Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::ENOTDIR) => {
            return match unlinkat(Some(dir.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    };
    unlock(sub.as_fd());
    let mut d = nix::dir::Dir::from_fd(sub.try_clone()?.into_raw_fd())?;
    let mut entries = Vec::new();
    for e in d.iter() {
        let e = e?;
        let n = e.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            entries.push((n, e.file_type() == Some(nix::dir::Type::Directory)));
        }
    }
    drop(d);
    let raw = sub.as_raw_fd();
    for (n, is_dir) in entries {
        if is_dir {
            remove_tree(sub.as_fd(), &n)?;
        } else {
            // Opened (to clear its flags) only when they are in the way: on
            // FUSE a file closed just before its unlink stays hidden
            // (`.fuse_hidden*`) until the server has seen it closed.
            let unlink = || unlinkat(Some(raw), n.as_slice(), UnlinkatFlags::NoRemoveDir);
            let mut r = unlink();
            if r == Err(Errno::EPERM) {
                if let Ok(f) = ioctl::openat(
                    Some(raw),
                    n.as_slice(),
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    let regular = nix::sys::stat::fstat(f.as_raw_fd())
                        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG);
                    if regular {
                        unlock(f.as_fd());
                    }
                }
                r = unlink();
            }
            match r {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    drop(sub);
    match crate::meta::rmdir(dir, name) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Clears the immutable and append-only flags of `f`, where set.
fn unlock(f: BorrowedFd<'_>) {
    if let Ok(flags) = ioctl::get_inode_flags(f) {
        if flags & crate::flags::LATE_FLAGS != 0 {
            let _ = ioctl::set_inode_flags(f, flags & !crate::flags::LATE_FLAGS);
        }
    }
}
