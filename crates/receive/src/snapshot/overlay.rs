//! The parent's tree as it was, while an incremental stream is applied to
//! that tree itself (`--in-place`).
//!
//! A stream may clone from its parent at any point: the kernel names the
//! parent's path and offset, as they are in the parent snapshot. Applied in
//! place, that path may have been renamed, unlinked or written over by
//! earlier commands. So before a command changes what the parent had, the
//! overlay keeps what a clone from the parent would need:
//!
//! - a name taken away from a directory (RENAME away or over, UNLINK,
//!   RMDIR) is recorded once, by the directory's identity (device, inode)
//!   and the name: a regular file that stood there gets a hard link in the
//!   subvolume's work directory ([`crate::snapshot::workdir`]), a directory is held
//!   open;
//! - bytes a WRITE, CLONE, ENCODED_WRITE, FALLOCATE or TRUNCATE is about to
//!   replace are copied once into the work directory's `undo` file, by the file's
//!   identity and range, but only within the size the file had when first
//!   changed.
//!
//! A path in the parent then resolves component by component: a recorded
//! name gives what stood there, any other name is still the parent's own.
//! Bytes come from the undo file where they were saved and from the file
//! itself elsewhere. Time and space follow what the stream changes, not the
//! tree. The work directory goes when the receive ends.
//!
//! Part of the snapshot room ([`crate::snapshot`]). May call: its siblings
//! `copy` and `workdir`, and `ioctl`; nothing above them.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};
use nix::unistd::linkat;
use uuid::Uuid;

use super::copy::{self, Methods};
use crate::ioctl;

/// A file or directory by device and inode number.
type Id = (u64, u64);

/// What stood at a name before the receive took it away.
enum Was {
    /// A directory: its identity, and a descriptor while it still exists.
    Dir(Id, Option<OwnedFd>),
    /// A regular file, linked into the stash under this number.
    File(u64),
    /// Anything else (never a clone source).
    Other,
}

/// Bytes of one file saved before they were replaced.
struct Saved {
    /// Its size when first changed.
    size: u64,
    /// Start in the file → (length, offset in the undo file).
    ranges: BTreeMap<u64, (u64, u64)>,
}

impl Saved {
    /// Splits `off..end` into pieces, in order: `(start, length, Some(offset
    /// in undo))` where the bytes were saved, `(start, length, None)` where
    /// the file still has them.
    fn pieces(&self, off: u64, end: u64) -> Vec<(u64, u64, Option<u64>)> {
        let mut out = Vec::new();
        let mut at = off;
        // Saved ranges never overlap: start from the last one before `off`.
        let first = self
            .ranges
            .range(..=off)
            .next_back()
            .map_or(off, |(&s, _)| s);
        for (&s, &(l, u)) in self.ranges.range(first..end) {
            if s + l <= at {
                continue;
            }
            if s > at {
                out.push((at, s - at, None));
                at = s;
            }
            let stop = (s + l).min(end);
            out.push((at, stop - at, Some(u + (at - s))));
            at = stop;
        }
        if at < end {
            out.push((at, end - at, None));
        }
        out
    }
}

/// The parent's view while it is changed in place.
pub(crate) struct Overlay {
    parent: Uuid,
    stash: OwnedFd,
    next: u64,
    displaced: HashMap<(Id, Vec<u8>), Was>,
    undo: Option<File>,
    undo_len: u64,
    files: HashMap<Id, Saved>,
    /// Whether any command after the SNAPSHOT was applied.
    pub changed: bool,
    /// The log of what is kept, in the work directory, from which a
    /// resumed receive rebuilds the overlay ([`Overlay::reopen`]).
    log: File,
    /// Whether the log, the undo file or a stashed copy got bytes since
    /// the last [`Overlay::barrier`].
    dirty: bool,
    /// Whether the undo file got bytes copied, not reflinked, since then
    /// (reflinked bytes are on disk already, and a change to the file
    /// they came from is written elsewhere and committed after them).
    undo_copied: bool,
    /// Copies made in the stash since then (no link was left).
    copies: Vec<File>,
    /// Flags lifted before a change (inode number, bits), as the log had
    /// them when reopened: due at END.
    pub lifted: Vec<(u64, u32)>,
}

/// The overlay's log in the work directory: one line per name kept
/// (`d DIR_INO NAME_HEX f STASH_NUMBER | d INO | o`), per file first
/// changed (`s INO SIZE`) and per range of bytes saved (`r INO START LEN
/// UNDO_OFFSET`), written after what it describes is kept and before the
/// change; and per inode whose immutable or append-only flags are lifted
/// (`l INO BITS`), before they are.
const LOG: &str = "overlay";

fn id_of(fd: BorrowedFd<'_>) -> nix::Result<Id> {
    let st = fstat(fd.as_raw_fd())?;
    Ok((st.st_dev, st.st_ino))
}

fn open_at(dir: BorrowedFd<'_>, name: &[u8], flags: OFlag) -> nix::Result<OwnedFd> {
    ioctl::openat(
        Some(dir.as_raw_fd()),
        name,
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Opens the files and directories beneath `root` whose inode numbers are
/// in `wanted` (for their flags: not symlinks), walking the whole tree.
pub(crate) fn find_inodes(
    root: BorrowedFd<'_>,
    wanted: &std::collections::HashSet<u64>,
) -> io::Result<HashMap<u64, File>> {
    let mut found = HashMap::new();
    if wanted.is_empty() {
        return Ok(found);
    }
    // Read with O_NOATIME where allowed: the tree is the snapshot, whose
    // directories' atimes a walk must not change (on a relatime mount).
    let mut stack = vec![OwnedFd::from(copy::open_noatime(
        root,
        b".",
        OFlag::O_DIRECTORY,
    )?)];
    while let Some(dir) = stack.pop() {
        let mut entries = Vec::new();
        let mut d = nix::dir::Dir::from_fd(dir.try_clone()?.into_raw_fd())?;
        for e in d.iter().flatten() {
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            let is_dir = e.file_type() == Some(nix::dir::Type::Directory);
            if is_dir || wanted.contains(&e.ino()) {
                entries.push((n.to_vec(), is_dir, e.ino()));
            }
        }
        for (n, is_dir, ino) in entries {
            let Ok(f) = copy::open_noatime(dir.as_fd(), &n, OFlag::O_NONBLOCK) else {
                continue;
            };
            let f = OwnedFd::from(f);
            let ino = if is_dir {
                fstat(f.as_raw_fd())?.st_ino
            } else {
                ino
            };
            if wanted.contains(&ino) {
                found.insert(ino, File::from(f.try_clone()?));
                if found.len() == wanted.len() {
                    return Ok(found);
                }
            }
            if is_dir {
                stack.push(f);
            }
        }
    }
    Ok(found)
}

impl Overlay {
    /// An overlay for parent `parent`, keeping what it needs in `work`.
    pub(crate) fn new(work: BorrowedFd<'_>, parent: Uuid) -> io::Result<Overlay> {
        let log = File::from(ioctl::openat(
            Some(work.as_raw_fd()),
            LOG,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_APPEND | OFlag::O_CLOEXEC,
            Mode::from_bits_retain(0o600),
        )?);
        Ok(Overlay {
            log,
            parent,
            stash: work.try_clone_to_owned()?,
            next: 0,
            displaced: HashMap::new(),
            undo: None,
            undo_len: 0,
            files: HashMap::new(),
            changed: false,
            dirty: false,
            undo_copied: false,
            copies: Vec::new(),
            lifted: Vec::new(),
        })
    }

    /// The overlay a stopped receive kept in `work` for the subvolume at
    /// `root` (changed in place from parent `parent`), rebuilt from its
    /// log: what was kept is found again; directories displaced by a
    /// rename, by their inode number beneath `root`.
    pub(crate) fn reopen(
        work: BorrowedFd<'_>,
        parent: Uuid,
        root: BorrowedFd<'_>,
    ) -> io::Result<Overlay> {
        let bad = || io::Error::other("the work directory's overlay log is malformed");
        let dev = fstat(root.as_raw_fd())?.st_dev;
        let mut text = String::new();
        io::Read::read_to_string(
            &mut File::from(open_at(work, LOG.as_bytes(), OFlag::O_RDONLY)?),
            &mut text,
        )?;
        let mut names: Vec<((Id, Vec<u8>), char, u64)> = Vec::new();
        let mut files: HashMap<Id, Saved> = HashMap::new();
        let mut undo_len = 0u64;
        let mut next = 0u64;
        let mut lifted = Vec::new();
        // A line cut short by a power loss described nothing done yet: the
        // change it was for waits for the log to be flushed.
        for line in crate::snapshot::workdir::whole_lines(&text) {
            let f: Vec<&str> = line.split(' ').collect();
            let num = |i: usize| -> io::Result<u64> {
                f.get(i).and_then(|v| v.parse().ok()).ok_or_else(bad)
            };
            match f.first().copied() {
                Some("d") => {
                    let hex = f.get(2).ok_or_else(bad)?;
                    let name = btrfs_text::hex::decode(hex).map_err(|_| bad())?;
                    let kind = f.get(3).and_then(|k| k.chars().next()).ok_or_else(bad)?;
                    let v = if kind == 'o' { 0 } else { num(4)? };
                    if kind == 'f' {
                        next = next.max(v + 1);
                    }
                    names.push((((dev, num(1)?), name), kind, v));
                }
                Some("s") => {
                    files.entry((dev, num(1)?)).or_insert(Saved {
                        size: num(2)?,
                        ranges: BTreeMap::new(),
                    });
                }
                Some("l") => lifted.push((num(1)?, u32::try_from(num(2)?).map_err(|_| bad())?)),
                Some("r") => {
                    let (start, len, at) = (num(2)?, num(3)?, num(4)?);
                    undo_len = undo_len.max(at + len);
                    files
                        .get_mut(&(dev, num(1)?))
                        .ok_or_else(bad)?
                        .ranges
                        .insert(start, (len, at));
                }
                _ => return Err(bad()),
            }
        }
        // Stash numbers linked but not logged are not used again.
        let mut d = nix::dir::Dir::from_fd(
            open_at(work, b".", OFlag::O_RDONLY | OFlag::O_DIRECTORY)?.into_raw_fd(),
        )?;
        for e in d.iter().flatten() {
            if let Some(n) = e
                .file_name()
                .to_str()
                .ok()
                .and_then(|n| n.parse::<u64>().ok())
            {
                next = next.max(n + 1);
            }
        }
        // Directories renamed away, found again by inode number.
        let wanted: std::collections::HashSet<u64> = names
            .iter()
            .filter(|(_, k, _)| *k == 'd')
            .map(|(_, _, ino)| *ino)
            .collect();
        let found = find_inodes(root, &wanted)?;
        let mut displaced = HashMap::new();
        for (key, kind, v) in names {
            let was = match kind {
                'f' => Was::File(v),
                'd' => Was::Dir(
                    (dev, v),
                    match found.get(&v) {
                        Some(f) => Some(OwnedFd::from(f.try_clone()?)),
                        None => None,
                    },
                ),
                _ => Was::Other,
            };
            displaced.insert(key, was);
        }
        let undo = match open_at(work, b"undo", OFlag::O_RDWR) {
            Ok(fd) => Some(File::from(fd)),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(e.into()),
        };
        let log = File::from(ioctl::openat(
            Some(work.as_raw_fd()),
            LOG,
            OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?);
        Ok(Overlay {
            parent,
            stash: work.try_clone_to_owned()?,
            next,
            displaced,
            undo,
            undo_len,
            files,
            changed: true,
            log,
            dirty: false,
            undo_copied: false,
            copies: Vec::new(),
            lifted,
        })
    }

    /// The parent's uuid: clones from it are served here.
    pub(crate) fn parent(&self) -> Uuid {
        self.parent
    }

    /// Before `name` in `dir` is taken away: keeps what stands there.
    pub(crate) fn displace(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        rmdir: bool,
    ) -> io::Result<()> {
        let key = (id_of(dir)?, name.to_vec());
        if self.displaced.contains_key(&key) {
            return Ok(());
        }
        let st = match fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let was = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let fd = if rmdir {
                    None
                } else {
                    Some(open_at(dir, name, OFlag::O_PATH | OFlag::O_DIRECTORY)?)
                };
                Was::Dir((st.st_dev, st.st_ino), fd)
            }
            libc::S_IFREG => {
                let n = self.next;
                self.next += 1;
                let stash_name = n.to_string();
                match linkat(
                    Some(dir.as_raw_fd()),
                    name,
                    Some(self.stash.as_raw_fd()),
                    stash_name.as_bytes(),
                    AtFlags::empty(),
                ) {
                    Ok(()) => {}
                    // No link left for this inode: keep a copy of its data.
                    Err(Errno::EMLINK) => {
                        let src = copy::open_noatime(dir, name, OFlag::O_NONBLOCK)?;
                        let fd = ioctl::openat(
                            Some(self.stash.as_raw_fd()),
                            stash_name.as_str(),
                            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
                            Mode::from_bits_retain(0o600),
                        )?;
                        let dst = File::from(fd);
                        // As the parent had it: bytes replaced already come
                        // from `undo`.
                        let size = self
                            .files
                            .get(&(st.st_dev, st.st_ino))
                            .map_or(st.st_size as u64, |s| s.size);
                        self.copy_from_parent(&dst, 0, &src, 0, size, &mut Methods::default())?;
                        dst.set_len(size)?;
                        self.copies.push(dst);
                    }
                    Err(e) => return Err(e.into()),
                }
                Was::File(n)
            }
            _ => Was::Other,
        };
        let what = match &was {
            Was::Dir((_, ino), _) => format!("d {ino}"),
            Was::File(n) => format!("f {n}"),
            Was::Other => "o".to_string(),
        };
        let hex = btrfs_text::hex::encode(name);
        (&self.log).write_all(format!("d {} {hex} {what}\n", key.0 .1).as_bytes())?;
        self.dirty = true;
        self.displaced.insert(key, was);
        Ok(())
    }

    /// Before bytes `off..off + len` of `file` are replaced (`len` of
    /// `u64::MAX`: everything from `off`, for a truncate): saves those the
    /// file had when first changed and that are not saved yet.
    pub(crate) fn before_data(&mut self, file: &File, off: u64, len: u64) -> io::Result<()> {
        let st = fstat(file.as_raw_fd())?;
        let saved = self.files.entry((st.st_dev, st.st_ino)).or_insert_with(|| {
            let _ = (&self.log).write_all(format!("s {} {}\n", st.st_ino, st.st_size).as_bytes());
            self.dirty = true;
            Saved {
                size: st.st_size as u64,
                ranges: BTreeMap::new(),
            }
        });
        let end = off.saturating_add(len).min(saved.size);
        if off >= end {
            return Ok(());
        }
        let gaps: Vec<(u64, u64)> = saved
            .pieces(off, end)
            .into_iter()
            .filter(|p| p.2.is_none())
            .map(|(s, l, _)| (s, l))
            .collect();
        if gaps.is_empty() {
            return Ok(());
        }
        if self.undo.is_none() {
            let fd = ioctl::openat(
                Some(self.stash.as_raw_fd()),
                "undo",
                OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
                Mode::from_bits_retain(0o600),
            )?;
            self.undo = Some(File::from(fd));
        }
        let undo = self.undo.as_ref().ok_or(io::ErrorKind::Other)?;
        for (s, l) in gaps {
            // Packed: at block boundaries xfs would reflink small ranges,
            // which costs more than it saves.
            let at = self.undo_len;
            let mut how = Methods::default();
            copy::copy_range(undo, at, file, s, l, &mut how)?;
            self.undo_copied |= how.copied > 0;
            self.undo_len += l;
            (&self.log).write_all(format!("r {} {s} {l} {at}\n", st.st_ino).as_bytes())?;
            self.dirty = true;
            saved.ranges.insert(s, (l, at));
        }
        Ok(())
    }

    /// Before the immutable or append-only flags `bits` of inode `ino` are
    /// lifted: logs them, to be given back at END.
    pub(crate) fn lifting(&mut self, ino: u64, bits: u32) -> io::Result<()> {
        (&self.log).write_all(format!("l {ino} {bits}\n").as_bytes())?;
        self.dirty = true;
        Ok(())
    }

    /// Before the change what was kept is for: makes what was kept since
    /// the last barrier durable as `ahead` says (the saved bytes and copies
    /// before the log that describes them).
    pub(crate) fn barrier(
        &mut self,
        ahead: crate::snapshot::workdir::WriteAhead,
    ) -> io::Result<()> {
        if !self.dirty || ahead == crate::snapshot::workdir::WriteAhead::Off {
            return Ok(());
        }
        let mut files: Vec<&File> = self.copies.iter().collect();
        files.extend(self.undo.as_ref().filter(|_| self.undo_copied));
        files.push(&self.log);
        ahead.barrier(&files)?;
        self.copies.clear();
        self.dirty = false;
        self.undo_copied = false;
        Ok(())
    }

    /// Opens regular file `path` as it was in the parent, beneath `root`
    /// (the subvolume being changed); `None` if the parent had no regular
    /// file there.
    pub(crate) fn open(&self, root: BorrowedFd<'_>, path: &[u8]) -> io::Result<Option<File>> {
        let comps: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
        let mut dir: Option<OwnedFd> = Some(root.try_clone_to_owned()?);
        let mut id = id_of(root)?;
        for (i, c) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            match self.displaced.get(&(id, c.to_vec())) {
                Some(Was::Dir(d, fd)) if !last => {
                    id = *d;
                    dir = match fd {
                        Some(f) => Some(f.try_clone()?),
                        None => None,
                    };
                }
                Some(Was::File(n)) if last => {
                    let f = copy::open_noatime(
                        self.stash.as_fd(),
                        n.to_string().as_bytes(),
                        OFlag::empty(),
                    )?;
                    return Ok(Some(f));
                }
                Some(_) => return Ok(None),
                None => {
                    let Some(d) = dir.as_ref() else {
                        return Ok(None);
                    };
                    if last {
                        let st =
                            match fstatat(Some(d.as_raw_fd()), *c, AtFlags::AT_SYMLINK_NOFOLLOW) {
                                Ok(st) => st,
                                Err(Errno::ENOENT) => return Ok(None),
                                Err(e) => return Err(e.into()),
                            };
                        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                            return Ok(None);
                        }
                        return Ok(Some(copy::open_noatime(d.as_fd(), c, OFlag::O_NONBLOCK)?));
                    }
                    let next = match open_at(d.as_fd(), c, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                        Ok(f) => f,
                        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(None),
                        Err(e) => return Err(e.into()),
                    };
                    id = id_of(next.as_fd())?;
                    dir = Some(next);
                }
            }
        }
        Ok(None)
    }

    /// Copies `len` bytes at `src_off` of `src` as the parent had them
    /// into `dst` at `dst_off`. Call [`Overlay::before_data`] for the
    /// destination range first.
    pub(crate) fn copy_from_parent(
        &self,
        dst: &File,
        dst_off: u64,
        src: &File,
        src_off: u64,
        len: u64,
        how: &mut Methods,
    ) -> io::Result<()> {
        let st = fstat(src.as_raw_fd())?;
        let saved = self.files.get(&(st.st_dev, st.st_ino));
        let end = src_off.saturating_add(len);
        let undo = self.undo.as_ref();
        let pieces = match saved {
            Some(saved) if undo.is_some() => saved.pieces(src_off, end),
            _ => vec![(src_off, len, None)],
        };
        for (at, l, saved_at) in pieces {
            let (from, from_off) = match (saved_at, undo) {
                (Some(u), Some(undo)) => (undo, u),
                _ => (src, at),
            };
            copy::copy_range(dst, dst_off + (at - src_off), from, from_off, l, how)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;

    fn write(p: &std::path::Path, data: &[u8]) {
        std::fs::write(p, data).unwrap();
    }

    #[test]
    fn parent_view_survives_renames_unlinks_and_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("sub");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        write(&root.join("d/e/f"), b"0123456789");
        write(&root.join("g"), b"abcdefghij");
        let dest = File::open(tmp.path()).unwrap();
        let rootf = File::open(&root).unwrap();
        let work = crate::snapshot::workdir::Workdir::create(dest.as_fd(), b"sub").unwrap();
        let mut o = Overlay::new(work.fd(), Uuid::nil()).unwrap();
        // Overwrite part of d/e/f, rename d to x, unlink g.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .open(root.join("d/e/f"))
            .unwrap();
        o.before_data(&f, 2, 3).unwrap();
        o.before_data(&f, 3, 4).unwrap();
        f.write_all_at(b"XXXXX", 2).unwrap();
        o.before_data(&f, 8, u64::MAX).unwrap();
        f.set_len(8).unwrap();
        let d = File::open(&root).unwrap();
        o.displace(d.as_fd(), b"d", false).unwrap();
        std::fs::rename(root.join("d"), root.join("x")).unwrap();
        o.displace(d.as_fd(), b"g", false).unwrap();
        std::fs::remove_file(root.join("g")).unwrap();
        write(&root.join("d"), b"new");

        let read = |p: &[u8], off: u64, len: u64| {
            let src = o.open(rootf.as_fd(), p).unwrap()?;
            let out = tempfile::tempfile().unwrap();
            o.copy_from_parent(&out, 0, &src, off, len, &mut Methods::default())
                .unwrap();
            Some(std::fs::read(format!("/proc/self/fd/{}", out.as_raw_fd())).unwrap())
        };
        assert_eq!(read(b"d/e/f", 0, 10).unwrap(), b"0123456789");
        assert_eq!(read(b"d/e/f", 4, 5).unwrap(), b"45678");
        assert_eq!(read(b"g", 1, 3).unwrap(), b"bcd");
        assert_eq!(read(b"d", 0, 2), None);
        assert_eq!(
            std::fs::read(root.join("x/e/f")).unwrap(),
            b"01XXXXX7",
            "the tree itself has the changes"
        );
        drop(o);
        work.remove(dest.as_fd()).unwrap();
        assert!(!tmp.path().join(".rreceive-work-737562").exists());
    }
}
