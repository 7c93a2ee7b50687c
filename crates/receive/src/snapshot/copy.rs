//! Copying file data, and whole trees for snapshots on filesystems that
//! have none.
//!
//! Data goes by reflink (FICLONERANGE / FICLONE) where the filesystem
//! shares extents, else by `copy_file_range`, else by read and write through
//! a bounded buffer. A tree copy keeps hardlinks as hardlinks, holes as
//! holes, and copies type, owner, mode, xattrs, atime and mtime; it reads
//! with `O_NOATIME` so the source tree is left as it was.
//!
//! Part of the snapshot room ([`crate::snapshot`]), used also by the engine
//! for CLONE. May call: `ioctl`, `meta`, `flags`, and `report` (the
//! progress of a tree copy); nothing above them.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;

use nix::errno::Errno;
use nix::fcntl::{readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstatat, futimens, mkdirat, mknodat, FileStat, Mode, SFlag};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, linkat, symlinkat, Gid, Uid};

use crate::meta::At;
use crate::report::Tick;

const BUF: usize = 1 << 20;

/// Which ways of copying data still look possible on this destination.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Methods {
    /// Reflinks have not failed yet.
    pub reflink: bool,
    /// copy_file_range has not failed yet.
    pub copy_file_range: bool,
    /// Bytes copied otherwise than by a reflink (in the page cache until
    /// written back, where a reflink shares what is on disk already).
    pub copied: u64,
}

impl Default for Methods {
    fn default() -> Self {
        Methods {
            reflink: true,
            copy_file_range: true,
            copied: 0,
        }
    }
}

fn reflink_unsupported(e: Errno) -> bool {
    matches!(
        e,
        Errno::EOPNOTSUPP
            | Errno::ENOTTY
            | Errno::EXDEV
            | Errno::EINVAL
            | Errno::ENOSYS
            | Errno::EPERM
    )
}

/// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off`.
pub(crate) fn copy_range(
    dst: &File,
    dst_off: u64,
    src: &File,
    src_off: u64,
    len: u64,
    how: &mut Methods,
) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    check_off(dst_off, len)?;
    check_off(src_off, len)?;
    let same = same_file(dst, src)?;
    if same && src_off < dst_off + len && dst_off < src_off + len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "source and destination ranges overlap",
        ));
    }
    if how.reflink {
        match crate::ioctl::clone_range(dst.as_fd(), dst_off, src.as_fd(), src_off, len) {
            Ok(()) => return Ok(()),
            // Unaligned ranges are EINVAL on one call and fine on the next;
            // keep trying reflinks, but only give up on "not supported".
            Err(Errno::EOPNOTSUPP | Errno::ENOTTY | Errno::ENOSYS) => how.reflink = false,
            Err(e) if reflink_unsupported(e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    how.copied += len;
    let mut done = 0u64;
    if how.copy_file_range {
        while done < len {
            let mut si = (src_off + done) as i64;
            let mut di = (dst_off + done) as i64;
            let want = (len - done).min(1 << 30) as usize;
            match nix::fcntl::copy_file_range(src, Some(&mut si), dst, Some(&mut di), want) {
                Ok(0) => break, // source EOF: the rest reads as zeros below
                Ok(n) => done += n as u64,
                Err(Errno::EINTR) => {}
                Err(e)
                    if matches!(
                        e,
                        Errno::EXDEV | Errno::EINVAL | Errno::EOPNOTSUPP | Errno::ENOSYS
                    ) && done == 0 =>
                {
                    if e != Errno::EINVAL {
                        how.copy_file_range = false;
                    }
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    read_write(dst, dst_off + done, src, src_off + done, len - done)
}

fn check_off(off: u64, len: u64) -> io::Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EFBIG)),
    }
}

fn same_file(a: &File, b: &File) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (x, y) = (a.metadata()?, b.metadata()?);
    Ok(x.dev() == y.dev() && x.ino() == y.ino())
}

/// Copies by pread/pwrite; past the source's end the clone reads zeros, as
/// btrfs would refuse it.
fn read_write(dst: &File, dst_off: u64, src: &File, src_off: u64, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; (len.min(BUF as u64)) as usize];
    let mut done = 0u64;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = src.read_at(&mut buf[..want], src_off + done)?;
        if n == 0 {
            break;
        }
        dst.write_all_at(&buf[..n], dst_off + done)?;
        done += n as u64;
    }
    Ok(())
}

/// Copies all data of `src` into the empty file `dst` of the same size or
/// less, keeping holes.
pub(crate) fn copy_file_data(
    dst: &File,
    src: &File,
    size: u64,
    how: &mut Methods,
) -> io::Result<()> {
    if how.reflink {
        match crate::ioctl::clone_file(dst.as_fd(), src.as_fd()) {
            Ok(()) => return Ok(()),
            Err(Errno::EOPNOTSUPP | Errno::ENOTTY | Errno::ENOSYS) => how.reflink = false,
            Err(e) if reflink_unsupported(e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut off = 0u64;
    while off < size {
        let data =
            match nix::unistd::lseek(src.as_raw_fd(), off as i64, nix::unistd::Whence::SeekData) {
                Ok(d) => d as u64,
                Err(Errno::ENXIO) => break,
                Err(Errno::EINVAL) | Err(Errno::EOPNOTSUPP) => off,
                Err(e) => return Err(e.into()),
            };
        if data >= size {
            break;
        }
        let hole =
            match nix::unistd::lseek(src.as_raw_fd(), data as i64, nix::unistd::Whence::SeekHole) {
                Ok(h) => (h as u64).min(size),
                Err(_) => size,
            };
        let mut m = Methods {
            reflink: false,
            ..*how
        };
        copy_range(dst, data, src, data, hole - data, &mut m)?;
        how.copy_file_range = m.copy_file_range;
        how.copied = m.copied;
        off = hole;
    }
    dst.set_len(size)
}

fn open_at(dir: BorrowedFd<'_>, name: &[u8], flags: OFlag, mode: Mode) -> nix::Result<File> {
    let fd = crate::ioctl::openat(
        Some(dir.as_raw_fd()),
        name,
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        mode,
    )?;
    Ok(File::from(fd))
}

/// Opens a file for reading without updating its atime where allowed.
pub(crate) fn open_noatime(dir: BorrowedFd<'_>, name: &[u8], extra: OFlag) -> nix::Result<File> {
    match open_at(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOATIME | extra,
        Mode::empty(),
    ) {
        Err(Errno::EPERM) => open_at(dir, name, OFlag::O_RDONLY | extra, Mode::empty()),
        r => r,
    }
}

fn times(st: &FileStat) -> (TimeSpec, TimeSpec) {
    (
        TimeSpec::new(st.st_atime, st.st_atime_nsec),
        TimeSpec::new(st.st_mtime, st.st_mtime_nsec),
    )
}

/// Counts of what a tree copy made.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TreeStats {
    /// Inodes created.
    pub inodes: u64,
    /// Extra hardlinks made.
    pub links: u64,
    /// Regular files whose data was shared by reflink.
    pub reflinked: u64,
    /// Files hard-linked to the source's (`--link`).
    pub shared: u64,
    /// Copies whose immutable or append-only flag was not kept (more than
    /// half of [`crate::flags::MAX_DEFERRED`]).
    pub flags_dropped: u64,
}

/// How a tree copy makes files other than directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// Copies (reflinks where the filesystem has them).
    Copy,
    /// Hard links to the source's inodes, except those with several names
    /// in the tree: their names must stay a group of their own, so they
    /// are copied.
    Link,
}

/// A file or directory by device and inode number.
pub(crate) type Id = (u64, u64);

/// What a tree holds, for a copy to check it fits.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Usage {
    /// Inodes (each hardlinked one once).
    pub inodes: u64,
    /// Bytes allocated to them.
    pub bytes: u64,
    /// Names of files with several links (0: the count is exact either
    /// way).
    pub multi: u64,
}

/// Counts the inodes and allocated bytes beneath directory `src`. With
/// `exact`, a file with several names counts once (which takes a set of
/// every file with several links); otherwise once per name, an upper bound
/// in constant memory.
pub(crate) fn usage(src: BorrowedFd<'_>, exact: bool) -> io::Result<Usage> {
    let mut u = Usage::default();
    let mut seen = exact.then(std::collections::HashSet::new);
    usage_of(src, &mut u, &mut seen)?;
    Ok(u)
}

fn usage_of(
    dir: BorrowedFd<'_>,
    u: &mut Usage,
    seen: &mut Option<std::collections::HashSet<Id>>,
) -> io::Result<()> {
    for name in entries(dir)? {
        let st = fstatat(
            Some(dir.as_raw_fd()),
            name.as_slice(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFDIR && st.st_nlink > 1 {
            u.multi += 1;
        }
        if let Some(seen) = seen.as_mut() {
            if kind != libc::S_IFDIR && st.st_nlink > 1 && !seen.insert((st.st_dev, st.st_ino)) {
                continue;
            }
        }
        u.inodes += 1;
        u.bytes += st.st_blocks as u64 * 512;
        if kind == libc::S_IFDIR {
            let d = open_at(
                dir,
                &name,
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                Mode::empty(),
            )?;
            usage_of(d.as_fd(), u, seen)?;
        }
    }
    Ok(())
}

/// Whether files in directory `dir` can share data by reflink: tries it
/// on two scratch files named `.rreceive-probe-*`, removed again.
pub(crate) fn reflinks_work(dir: BorrowedFd<'_>) -> io::Result<bool> {
    let names = [&b".rreceive-probe-a"[..], b".rreceive-probe-b"];
    for n in names {
        let _ = nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            n,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL;
    let a = open_at(dir, names[0], flags, Mode::from_bits_retain(0o600))?;
    let b = open_at(dir, names[1], flags, Mode::from_bits_retain(0o600));
    let r = b.and_then(|b| {
        a.write_all_at(&[0x5a; 4096], 0)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        Ok(crate::ioctl::clone_file(b.as_fd(), a.as_fd()).is_ok())
    });
    for n in names {
        let _ = nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            n,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    Ok(r?)
}

/// Copies everything beneath directory `src` into the empty directory
/// `dst` (both on the same filesystem), then the root's own owner, mode,
/// xattrs (except those `skip_root_xattr` names) and times. With
/// [`Share::Link`], `scratch` is a directory outside both trees where
/// copies are made before they take a name in `dst`, and the second value
/// the inodes with several names in `dst` that are its own, not `src`'s.
/// Inode flags are copied; immutable and append-only ones are returned with
/// the copies they belong to, to be set at END.
pub(crate) fn copy_tree(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    share: Share,
    scratch: Option<BorrowedFd<'_>>,
    skip_root_xattr: &dyn Fn(&[u8]) -> bool,
    tick: &dyn Tick,
) -> io::Result<Tree> {
    let mut c = TreeCopy::new(src, dst, share, Methods::default(), scratch, tick)?;
    c.dir_contents(src, dst)?;
    let st = nix::sys::stat::fstat(src.as_raw_fd())?;
    let src_root = open_at(
        src,
        b".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )?;
    let dst_root = open_at(
        dst,
        b".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )?;
    fchown(
        dst_root.as_raw_fd(),
        Some(Uid::from_raw(st.st_uid)),
        Some(Gid::from_raw(st.st_gid)),
    )?;
    fchmod(
        dst_root.as_raw_fd(),
        Mode::from_bits_retain(st.st_mode & 0o7777),
    )?;
    {
        use std::os::unix::ffi::OsStrExt;
        use xattr::FileExt;
        // A filesystem without xattrs (sshfs) has none to copy.
        let names = match src_root.list_xattr() {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Vec::new(),
            r => r?.collect(),
        };
        for n in names {
            if skip_root_xattr(n.as_bytes()) {
                continue;
            }
            if let Some(v) = src_root.get_xattr(&n)? {
                dst_root.set_xattr(&n, &v)?;
            }
        }
    }
    let (a, m) = times(&st);
    futimens(dst_root.as_raw_fd(), &a, &m)?;
    Ok(Tree {
        stats: c.stats,
        own: c.own,
        late: c.late,
    })
}

/// What [`copy_tree`] made.
pub(crate) struct Tree {
    /// Counts.
    pub stats: TreeStats,
    /// Inodes with several names that are the copy's own (`--link`).
    pub own: std::collections::HashSet<Id>,
    /// Copies and the immutable or append-only flags they get at END.
    pub late: Vec<(File, u32)>,
}

/// Called with a copy before it replaces a hard link: its inode number, the
/// file if its data was copied (not reflinked), its flags due at END.
pub(crate) type BeforeReplace<'a> =
    dyn FnMut(u64, Option<&File>, Option<u32>) -> io::Result<()> + 'a;

/// Replaces the file at `name` in `dir` with a copy of itself: same data,
/// type, owner, mode, xattrs, times and flags, another inode. The copy is
/// made in `scratch` (on the same filesystem, outside the tree) and renamed
/// over `name`; `dir` keeps its times. For a hard link to be broken before
/// the file changes. `before` is called with the copy (its inode number,
/// the file if regular, its flags due at END) before it replaces the link.
/// Returns the copy's immutable or append-only flags, to be set at END.
pub(crate) fn replace_with_copy(
    dir: BorrowedFd<'_>,
    name: &[u8],
    scratch: BorrowedFd<'_>,
    how: &mut Methods,
    before: &mut BeforeReplace<'_>,
) -> io::Result<Option<(File, u32)>> {
    const TMP: &[u8] = b"copy";
    let st = fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        return Err(Errno::EISDIR.into());
    }
    let dst = nix::sys::stat::fstat(dir.as_raw_fd())?;
    match nix::unistd::unlinkat(
        Some(scratch.as_raw_fd()),
        TMP,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let mut c = TreeCopy::new(dir, dir, Share::Copy, *how, None, &())?;
    c.make(dir, name, scratch, TMP, &st)?;
    let copied = c.how.copied > how.copied;
    *how = c.how;
    let late = c.late.pop();
    let copy = fstatat(Some(scratch.as_raw_fd()), TMP, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    let data = if copied && copy.st_mode & libc::S_IFMT == libc::S_IFREG {
        Some(open_noatime(scratch, TMP, OFlag::O_NONBLOCK)?)
    } else {
        None
    };
    before(copy.st_ino, data.as_ref(), late.as_ref().map(|l| l.1))?;
    nix::fcntl::renameat(Some(scratch.as_raw_fd()), TMP, Some(dir.as_raw_fd()), name)?;
    let (a, m) = times(&dst);
    // `dir` may be an O_PATH descriptor, which futimens refuses.
    nix::sys::stat::utimensat(
        Some(dir.as_raw_fd()),
        ".",
        &a,
        &m,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )?;
    Ok(late)
}

struct TreeCopy<'t> {
    /// A source inode with several links met once → the index in `dirs` of
    /// the directory holding it. Its name there is found again only if a
    /// second name turns up, so a file costs about 30 bytes here, not its
    /// path (in a `--link` chain every file has several links).
    seen: HashMap<Id, u32>,
    /// Paths of the directories copied, relative to the roots.
    dirs: Vec<Vec<u8>>,
    /// The index of the directory being copied.
    dir: u32,
    /// Source inodes met twice → the path of their first name in the copy.
    groups: HashMap<Id, Vec<u8>>,
    /// The last directory looked through for a first name: inode → name.
    names: Option<(u32, HashMap<u64, Vec<u8>>)>,
    /// Inodes of the copy with several names made by the copy (`--link`:
    /// the copies of groups), which are not the source's.
    own: std::collections::HashSet<Id>,
    /// Copies whose immutable or append-only flag waits for END.
    late: Vec<(File, u32)>,
    how: Methods,
    stats: TreeStats,
    /// Path of the directory being copied, relative to the roots.
    path: Vec<u8>,
    src_root: std::os::fd::OwnedFd,
    dst_root: std::os::fd::OwnedFd,
    share: Share,
    scratch: Option<BorrowedFd<'t>>,
    tick: &'t dyn Tick,
}

impl<'t> TreeCopy<'t> {
    fn new(
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        share: Share,
        how: Methods,
        scratch: Option<BorrowedFd<'t>>,
        tick: &'t dyn Tick,
    ) -> io::Result<TreeCopy<'t>> {
        Ok(TreeCopy {
            seen: HashMap::new(),
            dirs: vec![Vec::new()],
            dir: 0,
            groups: HashMap::new(),
            names: None,
            own: std::collections::HashSet::new(),
            late: Vec::new(),
            how,
            stats: TreeStats::default(),
            path: Vec::new(),
            src_root: src.try_clone_to_owned()?,
            dst_root: dst.try_clone_to_owned()?,
            share,
            scratch,
            tick,
        })
    }
}

fn entries(dir: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut d = nix::dir::Dir::openat(
        Some(dir.as_raw_fd()),
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOATIME | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .or_else(|_| {
        nix::dir::Dir::openat(
            Some(dir.as_raw_fd()),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    })?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(n.to_vec());
        }
    }
    out.sort();
    Ok(out)
}

/// Splits a relative path into its directory (maybe empty) and last name.
fn split_rel(p: &[u8]) -> (&[u8], &[u8]) {
    match p.iter().rposition(|&b| b == b'/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (&[], p),
    }
}

fn open_rel_dir(root: BorrowedFd<'_>, rel: &[u8]) -> io::Result<File> {
    let rel = if rel.is_empty() { &b"."[..] } else { rel };
    Ok(open_at(
        root,
        rel,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )?)
}

impl TreeCopy<'_> {
    fn child_path(&self, name: &[u8]) -> Vec<u8> {
        let mut p = self.path.clone();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    fn dir_contents(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> io::Result<()> {
        for name in entries(src)? {
            let st = fstatat(
                Some(src.as_raw_fd()),
                name.as_slice(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?;
            self.entry(src, dst, &name, &st)?;
            self.tick.tick();
        }
        Ok(())
    }

    fn entry(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &[u8],
        st: &FileStat,
    ) -> io::Result<()> {
        let kind = st.st_mode & libc::S_IFMT;
        let key = (st.st_dev, st.st_ino);
        if kind != libc::S_IFDIR && st.st_nlink > 1 {
            let first = if let Some(p) = self.groups.get(&key) {
                Some(p.clone())
            } else if let Some(di) = self.seen.remove(&key) {
                let p = self.first_name(di, st.st_ino)?;
                if self.share == Share::Link {
                    self.ungroup(&p)?;
                }
                self.groups.insert(key, p.clone());
                Some(p)
            } else {
                self.seen.insert(key, self.dir);
                None
            };
            if let Some(first) = first {
                linkat(
                    Some(self.dst_root.as_raw_fd()),
                    first.as_slice(),
                    Some(dst.as_raw_fd()),
                    name,
                    AtFlags::empty(),
                )?;
                self.stats.links += 1;
                return Ok(());
            }
        }
        if kind != libc::S_IFDIR && self.share == Share::Link {
            match linkat(
                Some(src.as_raw_fd()),
                name,
                Some(dst.as_raw_fd()),
                name,
                AtFlags::empty(),
            ) {
                Ok(()) => {
                    self.stats.shared += 1;
                    return Ok(());
                }
                // As many links as the filesystem allows (ext4: 65,000
                // snapshots of a chain), or immutable or append-only (no
                // link may be made): this one gets a copy.
                Err(Errno::EMLINK | Errno::EPERM) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.make(src, name, dst, name, st)
    }

    /// The second name of a source inode came: the first, a hard link to
    /// the source, becomes a copy, and the group links to that. Its
    /// directory keeps the times it was given.
    fn ungroup(&mut self, first: &[u8]) -> io::Result<()> {
        let (dir, name) = split_rel(first);
        let d = open_rel_dir(self.dst_root.as_fd(), dir)?;
        let scratch = self.scratch.ok_or(Errno::EINVAL)?;
        // Made before the tree is in place: the first checkpoint syncs it.
        let mut nothing = |_: u64, _: Option<&File>, _: Option<u32>| Ok(());
        if let Some(late) =
            replace_with_copy(d.as_fd(), name, scratch, &mut self.how, &mut nothing)?
        {
            self.late.push(late);
        }
        let st = fstatat(Some(d.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        self.own.insert((st.st_dev, st.st_ino));
        self.stats.inodes += 1;
        self.stats.shared -= 1;
        Ok(())
    }

    /// The path of the first name of source inode `ino`, met in directory
    /// `dirs[di]`: that directory is read again (once for all the groups it
    /// starts).
    fn first_name(&mut self, di: u32, ino: u64) -> io::Result<Vec<u8>> {
        let rel = self.dirs.get(di as usize).ok_or(Errno::EINVAL)?.clone();
        if !matches!(&self.names, Some((d, _)) if *d == di) {
            let dir = open_rel_dir(self.src_root.as_fd(), &rel)?;
            let mut names = HashMap::new();
            for n in entries(dir.as_fd())? {
                let st = fstatat(
                    Some(dir.as_raw_fd()),
                    n.as_slice(),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1 {
                    names.entry(st.st_ino).or_insert(n);
                }
            }
            self.names = Some((di, names));
        }
        let name = self
            .names
            .as_ref()
            .and_then(|(_, m)| m.get(&ino))
            .ok_or(Errno::ESTALE)?;
        let mut p = rel;
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        Ok(p)
    }

    /// Makes a new inode at `dname` in `dst` like `sname` in `src`
    /// (a directory with all it holds).
    fn make(
        &mut self,
        src: BorrowedFd<'_>,
        sname: &[u8],
        dst: BorrowedFd<'_>,
        dname: &[u8],
        st: &FileStat,
    ) -> io::Result<()> {
        let kind = st.st_mode & libc::S_IFMT;
        self.stats.inodes += 1;
        let (atime, mtime) = times(st);
        let s_at = At {
            dir: src,
            name: sname,
        };
        let d_at = At {
            dir: dst,
            name: dname,
        };
        match kind {
            libc::S_IFDIR => {
                mkdirat(Some(dst.as_raw_fd()), dname, Mode::from_bits_retain(0o700))?;
                let s = open_at(
                    src,
                    sname,
                    OFlag::O_PATH | OFlag::O_DIRECTORY,
                    Mode::empty(),
                )?;
                let d = open_at(
                    dst,
                    dname,
                    OFlag::O_PATH | OFlag::O_DIRECTORY,
                    Mode::empty(),
                )?;
                let child = self.child_path(dname);
                let index = u32::try_from(self.dirs.len()).map_err(|_| Errno::EOVERFLOW)?;
                self.dirs.push(child.clone());
                let saved = std::mem::replace(&mut self.path, child);
                let saved_dir = std::mem::replace(&mut self.dir, index);
                let r = self.dir_contents(s.as_fd(), d.as_fd());
                self.path = saved;
                self.dir = saved_dir;
                r?;
                let sd = open_at(
                    src,
                    sname,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                    Mode::empty(),
                )?;
                let dd = open_at(
                    dst,
                    dname,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                    Mode::empty(),
                )?;
                let late = early_flags(&sd, &dd);
                self.finish(&s_at, &d_at, st, true)?;
                self.keep_late(dd, late);
            }
            libc::S_IFREG => {
                let s = open_noatime(src, sname, OFlag::empty())?;
                let d = open_at(
                    dst,
                    dname,
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
                    Mode::from_bits_retain(0o600),
                )?;
                let before = self.how.reflink;
                copy_file_data(&d, &s, st.st_size as u64, &mut self.how)?;
                if before && self.how.reflink {
                    self.stats.reflinked += 1;
                }
                fchown(
                    d.as_raw_fd(),
                    Some(Uid::from_raw(st.st_uid)),
                    Some(Gid::from_raw(st.st_gid)),
                )?;
                fchmod(d.as_raw_fd(), Mode::from_bits_retain(st.st_mode & 0o7777))?;
                let late = early_flags(&s, &d);
                copy_xattrs(&s_at, &d_at)?;
                futimens(d.as_raw_fd(), &atime, &mtime)?;
                self.keep_late(d, late);
            }
            libc::S_IFLNK => {
                let target = match readlinkat(Some(src.as_raw_fd()), sname) {
                    // sshfs cannot read back an absolute link it made: the
                    // copy is the same link (its owner and times too).
                    Err(Errno::EPERM) => {
                        nix::unistd::linkat(
                            Some(src.as_raw_fd()),
                            sname,
                            Some(dst.as_raw_fd()),
                            dname,
                            nix::fcntl::AtFlags::empty(),
                        )?;
                        return Ok(());
                    }
                    r => r?,
                };
                // readlink may have touched the source's atime: put it back.
                let _ = s_at.utimes(
                    btrfs_stream::Timespec {
                        sec: st.st_atime,
                        nsec: st.st_atime_nsec as u32,
                    },
                    btrfs_stream::Timespec {
                        sec: st.st_mtime,
                        nsec: st.st_mtime_nsec as u32,
                    },
                );
                symlinkat(target.as_os_str(), Some(dst.as_raw_fd()), dname)?;
                self.finish(&s_at, &d_at, st, false)?;
            }
            _ => {
                let sflag = SFlag::from_bits_truncate(kind);
                mknodat(
                    Some(dst.as_raw_fd()),
                    dname,
                    sflag,
                    Mode::from_bits_retain(0o600),
                    st.st_rdev,
                )?;
                self.finish(&s_at, &d_at, st, true)?;
            }
        }
        Ok(())
    }

    /// Keeps `dst` and its immutable or append-only flags `late` for END.
    fn keep_late(&mut self, dst: File, late: u32) {
        if late == 0 {
            return;
        }
        // Half the room at most: the stream's own FILEATTRs come first.
        if self.late.len() < crate::flags::MAX_DEFERRED / 2 {
            self.late.push((dst, late));
        } else {
            self.stats.flags_dropped += 1;
        }
    }

    /// Owner, mode (not for symlinks), xattrs, then times.
    fn finish(&mut self, s: &At<'_>, d: &At<'_>, st: &FileStat, chmod: bool) -> io::Result<()> {
        // ELOOP: a symlink whose owner and times the filesystem would set
        // on what it points to; they were not kept in the parent either.
        let kept = |r: nix::Result<()>| match r {
            Err(Errno::ELOOP) => Ok(()),
            r => r,
        };
        kept(d.chown(st.st_uid, st.st_gid))?;
        if chmod {
            d.chmod(st.st_mode & 0o7777)?;
        }
        copy_xattrs(s, d)?;
        let t = |s: i64, n: i64| btrfs_stream::Timespec {
            sec: s,
            nsec: n as u32,
        };
        kept(d.utimes(
            t(st.st_atime, st.st_atime_nsec),
            t(st.st_mtime, st.st_mtime_nsec),
        ))?;
        Ok(())
    }
}

/// Gives `dst` the inode flags of `src` that rreceive manages and `dst`
/// lacks, except immutable and append-only, which are returned (they wait
/// for END). Call before the xattrs are copied: on btrfs, setting the
/// compression flag sets the `btrfs.compression` property to the mount's
/// default, and the copied property must win. Flags the filesystem lacks
/// are left out, as FILEATTR does.
fn early_flags(src: &File, dst: &File) -> u32 {
    use crate::flags::{managed_flags, LATE_FLAGS};
    let Ok(flags) = crate::ioctl::get_inode_flags(src.as_fd()) else {
        return 0;
    };
    let flags = flags & managed_flags();
    if flags & !LATE_FLAGS != 0 {
        if let Ok(now) = crate::ioctl::get_inode_flags(dst.as_fd()) {
            if flags & !LATE_FLAGS & !now != 0 {
                let _ = crate::ioctl::set_inode_flags(dst.as_fd(), now | (flags & !LATE_FLAGS));
            }
        }
    }
    flags & LATE_FLAGS
}

fn copy_xattrs(s: &At<'_>, d: &At<'_>) -> io::Result<()> {
    let sh = s.handle()?;
    let list = match sh.xattrs() {
        Ok(l) => l,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(()),
        Err(e) => return Err(e),
    };
    if list.is_empty() {
        return Ok(());
    }
    let dh = d.handle()?;
    for (n, v) in list {
        dh.set_xattr(&n, &v)?;
    }
    Ok(())
}
