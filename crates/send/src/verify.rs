//! `rsend --verify`: compares a snapshot, read from the device, with a
//! copy of it in a directory on any filesystem (a receive, an rsync copy, a
//! restore), as records (see [`crate::record`]).
//!
//! Both trees are walked together, directory by directory. A path only in
//! the snapshot is missing, one only in the copy is extra (whole subtrees
//! are listed); a path in both is compared by type, permission bits,
//! owner, extended attributes, inode flags, mtime, symlink target, device
//! number, hard links (link count, and which paths share an inode) and
//! data. Kinds of difference a caller expects ([`Ignore`], such as the
//! link counts of a copy made with hard links to an older one) are neither
//! compared nor listed.
//!
//! Data is compared for real. Where the snapshot's checksum tree covers a
//! sector of an uncompressed extent, the copy's sector is hashed with the
//! filesystem's checksum and compared with the stored value, so only the
//! copy is read; a sector that does not match is then compared byte for
//! byte with the snapshot (a mismatch is never a guess). Elsewhere
//! (compressed or inline extents, NODATASUM files) both sides are read.
//! Holes and preallocated ranges must read as zeros in the copy.
//!
//! The copy is only read: files and directories are opened with
//! `O_NOFOLLOW` and, where allowed, `O_NOATIME`; each entry is looked up
//! in its directory, already open, so symlinks are never followed.
//! (Reading a symlink's target updates its atime on mounts without
//! `noatime`: readlink(2) has no flag against it.) rreceive's own state
//! (`user.rreceive.*` xattrs) on the copy's root is not content; `btrfs.*`
//! xattrs (btrfs properties) only count when the copy is on btrfs.
//!
//! Against a bookmark ([`verify_tree`] without a filesystem to read data
//! from: a bookmark holds the snapshot's tree and no file data), all but
//! the data is compared as above; a regular file's data is compared by its
//! size, and byte for byte only where it is uncompressed inline data (in
//! the tree); a note says so.
//!
//! Inode flags (`chattr`) are compared as `FS_IOC_GETFLAGS` shows them, on
//! files and directories, and only those the copy's filesystem can hold
//! (nocow, nocompress and compression only on btrfs; see `flags_held`).
//! On a filesystem without inode flags (the ioctl is not there) they are
//! not compared, and that is said once.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::changes::{pieces, Src};
use crate::progress::Progress;
use crate::record::{self, Change, FileType, Record, What, WhatSet};
use crate::snapshot_error::{Fault, SnapshotError};
use btrfs_disk::data::{dir_entries_of, inode_of, xattrs_of, Inode};
use btrfs_disk::error::Error;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{key_type, objectid, Compression, ExtentKind, FileExtentItem};
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::{Key, Tree};
use btrfs_stream::fileattr::{
    self, FS_APPEND_FL, FS_DIRSYNC_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL, FS_SYNC_FL,
};

/// File bytes compared per read.
const CHUNK: u64 = 1 << 20;
/// File range whose extents are looked up at once (bounds the memory per file).
const WINDOW: u64 = 64 << 20;
/// The names under which xfs also lists a file's POSIX ACLs.
const XFS_ACL_ALIASES: [&[u8]; 2] = [b"trusted.SGI_ACL_FILE", b"trusted.SGI_ACL_DEFAULT"];
/// rreceive's state on a received subvolume's root.
const RRECEIVE_PREFIX: &[u8] = b"user.rreceive.";
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
/// An empty POSIX ACL as getxattr returns it (header, version 2).
const EMPTY_ACL: [u8; 4] = [2, 0, 0, 0];

/// Kinds of difference a verify is told to leave out (`--ignore`): they
/// are neither compared nor listed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ignore {
    /// Attributes not compared.
    pub what: WhatSet,
    /// Paths missing from the copy are not listed.
    pub missing: bool,
    /// Paths extra in the copy are not listed.
    pub extra: bool,
}

impl Ignore {
    /// The names of the kinds: every WHAT of a record, `missing` and
    /// `extra`.
    pub const KINDS: [&'static str; 12] = [
        "data", "type", "mode", "owner", "xattrs", "flags", "mtime", "target", "rdev", "links",
        "missing", "extra",
    ];

    /// Adds the kind `name` (one of [`Ignore::KINDS`]); false for another
    /// name.
    pub fn add(&mut self, name: &str) -> bool {
        match name {
            "missing" => self.missing = true,
            "extra" => self.extra = true,
            _ => match What::ALL.into_iter().find(|w| w.name() == name) {
                Some(w) => self.what.add(w),
                None => return false,
            },
        }
        true
    }

    /// Whether `w` is compared.
    fn checks(self, w: What) -> bool {
        !self.what.has(w)
    }
}

/// Everything that can stop a verify (a difference does not).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The copy's directory cannot be compared at all.
    #[error("the copy {}: {reason}", .dir.display())]
    Dir {
        /// The directory given.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading the copy failed.
    #[error("reading the copy at {}: {}", .path.display(), btrfs_text::plain_io(.source))]
    Copy {
        /// The path in the copy.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Reading the snapshot failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// What a verify found.
#[derive(Debug, Default)]
pub struct Report {
    /// The differences, sorted by path.
    pub records: Vec<Record>,
    /// Paths compared (in the snapshot, and extra ones in the copy).
    pub paths: u64,
    /// Bytes of file data read from the copy.
    pub bytes: u64,
    /// Things said once (such as a copy without extended attributes).
    pub notes: Vec<String>,
}

/// The snapshot a verify compares a copy with: its fs tree, and the
/// filesystem its file data is read from.
#[derive(Clone, Copy)]
pub struct Snapshot<'a, 'fs> {
    /// The snapshot (as messages name it).
    pub sv: &'a Subvolume,
    /// Its fs tree (on the filesystem, or in a bookmark).
    pub tree: Tree<'fs>,
    /// The filesystem holding its file data; none for a bookmark, which
    /// holds no file data (files are then compared by size, and inline
    /// data byte for byte).
    pub data: Option<&'fs Filesystem>,
}

/// What a verify without file data says once.
pub const NO_DATA_NOTE: &str = "a bookmark holds no file data: regular files are compared by \
                                size, and by content only where their data is inline in the tree";

/// Compares snapshot `sv` with the copy in `dir`, leaving out what
/// `ignore` names.
pub fn verify(
    fs: &Filesystem,
    sv: &Subvolume,
    dir: &Path,
    ignore: Ignore,
    progress: &dyn Progress,
) -> Result<Report, VerifyError> {
    let snap = Snapshot {
        sv,
        tree: fs.fs_tree(sv),
        data: Some(fs),
    };
    verify_tree(snap, dir, ignore, progress)
}

/// Compares the snapshot `snap` with the copy in `dir`, leaving out what
/// `ignore` names; without a filesystem for the data (a bookmark's tree),
/// files' data by size and inline data only, as [`NO_DATA_NOTE`] says in
/// the report's notes.
pub fn verify_tree(
    snap: Snapshot<'_, '_>,
    dir: &Path,
    ignore: Ignore,
    progress: &dyn Progress,
) -> Result<Report, VerifyError> {
    let Snapshot { sv, tree, data } = snap;
    let bad_dir = |reason: String| VerifyError::Dir {
        dir: dir.to_path_buf(),
        reason,
    };
    let md = std::fs::metadata(dir).map_err(|e| bad_dir(btrfs_text::plain_io(&e)))?;
    if !md.is_dir() {
        return Err(bad_dir("not a directory".into()));
    }
    // DIR itself may be reached through a symlink; nothing below it is.
    let dir = &std::fs::canonicalize(dir).map_err(|e| bad_dir(btrfs_text::plain_io(&e)))?;
    let root_fd =
        open_copy(Place::path(dir), true).map_err(|e| bad_dir(btrfs_text::plain_io(&e)))?;
    let fs_type = nix::sys::statfs::statfs(dir).map(|s| s.filesystem_type());
    let on_btrfs = fs_type.is_ok_and(|t| t == nix::sys::statfs::BTRFS_SUPER_MAGIC);
    let on_xfs = fs_type.is_ok_and(|t| t == nix::sys::statfs::XFS_SUPER_MAGIC);
    let xattr_room = xattr_room(dir, on_btrfs);
    let mut v = Verifier {
        sv,
        tree,
        fs: data,
        root: dir.to_path_buf(),
        progress,
        report: Report::default(),
        on_btrfs,
        on_xfs,
        xattr_room,
        ignore,
        xattrs: ignore.checks(What::Xattrs),
        flags_held: if ignore.checks(What::Flags) {
            fs_type.map_or(0, flags_held)
        } else {
            0
        },
        snap_links: HashMap::new(),
        copy_links: HashMap::new(),
        ino: 0,
        at: Vec::new(),
        check: data.map(|fs| DataCheck {
            fs,
            sv,
            tree,
            root: dir,
            progress,
            bufs: Buffers::default(),
        }),
    };
    if data.is_none() && ignore.checks(What::Data) {
        v.report.notes.push(NO_DATA_NOTE.to_string());
    }
    // A filesystem without extended attributes lists none, so ask for one.
    if v.xattrs {
        if let Err(e) = xattr::get(dir, "user.rsend.probe") {
            if e.raw_os_error() == Some(libc::ENOTSUP) {
                v.no_xattrs();
            }
        }
    }
    if v.flags_held != 0 {
        if let Err(e) = rustix::fs::ioctl_getflags(&root_fd) {
            if no_flags(e) {
                v.no_flags();
            }
        }
    }
    drop(root_fd);
    v.run()?;
    let mut report = v.report;
    record::sort(&mut report.records);
    Ok(report)
}

struct Verifier<'a, 'fs> {
    sv: &'a Subvolume,
    /// The snapshot's fs tree: everything but file data is read from it.
    tree: Tree<'fs>,
    /// Where file data is read from (none for a bookmark).
    fs: Option<&'fs Filesystem>,
    root: PathBuf,
    progress: &'a dyn Progress,
    report: Report,
    on_btrfs: bool,
    on_xfs: bool,
    /// The size (name and value) above which an xattr may be too large for
    /// the copy's filesystem (see [`xattr_room`]).
    xattr_room: u64,
    /// What is not compared.
    ignore: Ignore,
    /// Whether extended attributes are compared (not ignored, and the
    /// copy's filesystem has them).
    xattrs: bool,
    /// The inode flags (`FS_*_FL`) compared: those the copy's filesystem
    /// holds, none when ignored.
    flags_held: u32,
    /// Hard-linked snapshot inodes: the copy's (dev, ino) first seen for each.
    snap_links: HashMap<u64, (u64, u64)>,
    /// Hard-linked copy inodes: the snapshot inode first seen for each.
    copy_links: HashMap<(u64, u64), u64>,
    /// The snapshot inode and path being compared, for errors.
    ino: u64,
    at: Vec<u8>,
    /// Compares files' data (none without a filesystem to read it from).
    check: Option<DataCheck<'a, 'fs>>,
}

/// The buffers one file's comparison reads into.
#[derive(Default)]
struct Buffers {
    copy: Vec<u8>,
    snap: Vec<u8>,
    sector: Vec<u8>,
}

/// What the compare needs of a copy's inode (its lstat).
struct CopyStat {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    rdev: u64,
    nlink: u64,
    /// Device and inode number: which paths share an inode.
    id: (u64, u64),
    size: u64,
}

impl From<&rustix::fs::Stat> for CopyStat {
    // The field types of `struct stat` differ between architectures.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from(st: &rustix::fs::Stat) -> CopyStat {
        CopyStat {
            mode: st.st_mode as u32,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            rdev: st.st_rdev as u64,
            nlink: st.st_nlink as u64,
            id: (st.st_dev as u64, st.st_ino as u64),
            size: st.st_size as u64,
        }
    }
}

impl CopyStat {
    fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }
    fn is_dir(&self) -> bool {
        self.file_type() == Some(FileType::Dir)
    }
}

/// Where a copy's entry is: its directory (open) and its name, or a whole
/// path (from the working directory).
#[derive(Clone, Copy)]
struct Place<'d> {
    dir: BorrowedFd<'d>,
    name: &'d [u8],
}

impl<'d> Place<'d> {
    fn path(path: &'d Path) -> Place<'d> {
        Place {
            dir: rustix::fs::CWD,
            name: path.as_os_str().as_bytes(),
        }
    }

    /// Its lstat.
    fn stat(self) -> io::Result<CopyStat> {
        rustix::fs::statat(self.dir, self.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| CopyStat::from(&st))
            .map_err(io::Error::from)
    }
}

/// Opens the copy's entry `at` (a directory, a file) for reading, without
/// following a symlink and, where allowed, without updating its atime.
fn open_copy(at: Place, dir: bool) -> io::Result<OwnedFd> {
    use rustix::fs::OFlags;
    // NONBLOCK: a fifo put in a file's place meanwhile must not hang the
    // open (it changes nothing for files and directories).
    let mut flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    if dir {
        flags |= OFlags::DIRECTORY;
    }
    let open = |flags| rustix::fs::openat(at.dir, at.name, flags, rustix::fs::Mode::empty());
    match open(flags | OFlags::NOATIME) {
        Err(rustix::io::Errno::PERM) => open(flags),
        r => r,
    }
    .map_err(io::Error::from)
}

/// Whether a failed `FS_IOC_GETFLAGS` means the filesystem has no inode
/// flags (ramfs, NFS, tmpfs before Linux 6.0, ...).
fn no_flags(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    e == Errno::NOTTY || e == Errno::OPNOTSUPP
}

/// The inode flags (`FS_*_FL`, of those a FILEATTR carries) a filesystem
/// of type `t` holds: all on btrfs; elsewhere not nocow, nocompress or
/// compression, which mean something else or nothing there.
fn flags_held(t: nix::sys::statfs::FsType) -> u32 {
    use nix::sys::statfs::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    let common = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL;
    if t == BTRFS_SUPER_MAGIC {
        fileattr::FS_FLAGS
    } else if t == EXT4_SUPER_MAGIC {
        // ext2 and ext3 too: they share the magic number.
        common | FS_SYNC_FL | FS_NOATIME_FL | FS_DIRSYNC_FL
    } else if t == XFS_SUPER_MAGIC {
        common | FS_SYNC_FL | FS_NOATIME_FL
    } else if t == TMPFS_MAGIC {
        common | FS_NOATIME_FL
    } else {
        common
    }
}

/// The copy's path for `rel` (relative to the snapshot root).
fn copy_path(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(OsStr::from_bytes(rel))
    }
}

/// The error for a failed read of the copy's `rel`.
fn copy_error(root: &Path, rel: &[u8]) -> impl FnOnce(io::Error) -> VerifyError {
    let path = copy_path(root, rel);
    move |source| VerifyError::Copy { path, source }
}

/// The error for a failed read of the snapshot's inode `ino` at `at`.
fn snap_error(sv: &Subvolume, ino: u64, at: &[u8], fault: Fault) -> VerifyError {
    let path = Some(String::from_utf8_lossy(at).into_owned());
    VerifyError::Snapshot(SnapshotError::new(sv.label(), Some(ino), path, fault))
}

impl Verifier<'_, '_> {
    fn copy_path(&self, rel: &[u8]) -> PathBuf {
        copy_path(&self.root, rel)
    }

    fn copy_err(&self, rel: &[u8]) -> impl FnOnce(io::Error) -> VerifyError {
        copy_error(&self.root, rel)
    }

    /// The error for a failed read of the snapshot.
    fn snap_err(&self, fault: impl Into<Fault>) -> VerifyError {
        snap_error(self.sv, self.ino, &self.at, fault.into())
    }

    fn inode(&mut self, ino: u64, rel: &[u8]) -> Result<Inode, VerifyError> {
        self.ino = ino;
        self.at = rel.to_vec();
        inode_of(&self.tree, ino).map_err(|e| self.snap_err(e))
    }

    /// Lists a difference, unless its kind is ignored.
    fn push(&mut self, change: Change, path: Vec<u8>, ft: FileType, what: WhatSet) {
        let what = what.without(self.ignore.what);
        let listed = match change {
            Change::Missing => !self.ignore.missing,
            Change::Extra => !self.ignore.extra,
            _ => !what.is_empty(),
        };
        if !listed {
            return;
        }
        self.report.records.push(Record {
            change,
            path,
            from: None,
            file_type: ft,
            what,
        });
    }

    fn run(&mut self) -> Result<(), VerifyError> {
        let root_path = self.root.clone();
        let root = Place::path(&root_path);
        let root_st = root.stat().map_err(self.copy_err(b""))?;
        self.entry(objectid::FIRST_FREE, b"", &root_st, root)?;
        let mut stack = vec![(objectid::FIRST_FREE, Vec::new())];
        while let Some((dir, rel)) = stack.pop() {
            self.ino = dir;
            self.at.clone_from(&rel);
            let entries = dir_entries_of(&self.tree, dir).map_err(|e| self.snap_err(e))?;
            // Its entries are looked up in it, not by their whole path.
            let fd = self.copy_dir(&rel)?;
            let mut copy_names = self.names(&fd, &rel)?;
            for e in entries {
                copy_names.remove(&e.name);
                if e.location.item_type != key_type::INODE_ITEM {
                    // A nested subvolume: not part of the snapshot (nor of a send).
                    continue;
                }
                let child = record::join(&rel, &e.name);
                let ino = e.location.objectid;
                let at = Place {
                    dir: fd.as_fd(),
                    name: &e.name,
                };
                match at.stat() {
                    Ok(st) => {
                        if self.entry(ino, &child, &st, at)? {
                            stack.push((ino, child));
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::NotFound => {
                        self.missing(ino, child)?;
                    }
                    Err(err) => return Err(self.copy_err(&child)(err)),
                }
            }
            for name in copy_names {
                self.extra(record::join(&rel, &name))?;
            }
        }
        Ok(())
    }

    /// Opens the copy's directory `rel` (without following a symlink and,
    /// where allowed, without updating its atime).
    fn copy_dir(&self, rel: &[u8]) -> Result<OwnedFd, VerifyError> {
        open_copy(Place::path(&self.copy_path(rel)), true).map_err(self.copy_err(rel))
    }

    /// The names in the copy's directory `rel`, open as `fd`.
    fn names(&self, fd: &OwnedFd, rel: &[u8]) -> Result<BTreeSet<Vec<u8>>, VerifyError> {
        let err = |e: rustix::io::Errno| self.copy_err(rel)(e.into());
        let mut out = BTreeSet::new();
        for e in rustix::fs::Dir::read_from(fd).map_err(err)? {
            let e = e.map_err(err)?;
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.insert(name.to_vec());
            }
        }
        Ok(out)
    }

    /// The names in the copy's directory `rel`.
    fn copy_names(&self, rel: &[u8]) -> Result<BTreeSet<Vec<u8>>, VerifyError> {
        self.names(&self.copy_dir(rel)?, rel)
    }

    /// The inodes in the snapshot's directory `ino` (at `rel`) and their
    /// paths; nested subvolumes left out.
    fn snap_children(&self, ino: u64, rel: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, VerifyError> {
        Ok(dir_entries_of(&self.tree, ino)
            .map_err(|e| self.snap_err(e))?
            .into_iter()
            .filter(|e| e.location.item_type == key_type::INODE_ITEM)
            .map(|e| (e.location.objectid, record::join(rel, &e.name)))
            .collect())
    }

    /// `rel` and everything below it, in the snapshot only.
    fn missing(&mut self, ino: u64, rel: Vec<u8>) -> Result<(), VerifyError> {
        let mut stack = vec![(ino, rel)];
        while let Some((ino, rel)) = stack.pop() {
            let inode = self.inode(ino, &rel)?;
            let ft = self.snap_type(&inode)?;
            self.report.paths += 1;
            if ft == FileType::Dir {
                stack.extend(self.snap_children(ino, &rel)?);
            }
            self.push(Change::Missing, rel, ft, WhatSet::default());
        }
        Ok(())
    }

    /// `rel` and everything below it, in the copy only (symlinks not followed).
    fn extra(&mut self, rel: Vec<u8>) -> Result<(), VerifyError> {
        let mut stack = vec![rel];
        while let Some(rel) = stack.pop() {
            let st = Place::path(&self.copy_path(&rel))
                .stat()
                .map_err(self.copy_err(&rel))?;
            let Some(ft) = st.file_type() else {
                continue;
            };
            self.report.paths += 1;
            if ft == FileType::Dir {
                for name in self.copy_names(&rel)? {
                    stack.push(record::join(&rel, &name));
                }
            }
            self.push(Change::Extra, rel, ft, WhatSet::default());
        }
        Ok(())
    }

    fn snap_type(&self, inode: &Inode) -> Result<FileType, VerifyError> {
        FileType::from_mode(inode.mode).ok_or_else(|| {
            self.snap_err(Fault::Bad(format!(
                "unknown file type {:o}",
                inode.mode & 0o170000
            )))
        })
    }

    /// Compares the snapshot's inode `ino` with the copy's `rel` (found
    /// `at`); true when both are directories (to be walked).
    fn entry(
        &mut self,
        ino: u64,
        rel: &[u8],
        md: &CopyStat,
        at: Place,
    ) -> Result<bool, VerifyError> {
        let inode = self.inode(ino, rel)?;
        let ft = self.snap_type(&inode)?;
        self.report.paths += 1;
        self.progress.advance(0, 1);
        let mut w = WhatSet::default();
        if md.file_type() != Some(ft) {
            w.add(What::Type);
            self.push(Change::Differs, rel.to_vec(), ft, w);
            // What is below either side is then missing or extra.
            if ft == FileType::Dir {
                for (child, path) in self.snap_children(ino, rel)? {
                    self.missing(child, path)?;
                }
            }
            if md.is_dir() {
                for name in self.copy_names(rel)? {
                    self.extra(record::join(rel, &name))?;
                }
            }
            return Ok(false);
        }
        w.add_if(
            ft != FileType::Symlink && inode.mode & 0o7777 != md.mode & 0o7777,
            What::Mode,
        );
        w.add_if(md.uid != inode.uid || md.gid != inode.gid, What::Owner);
        if self.xattrs && !self.same_xattrs(&inode, rel)? {
            w.add(What::Xattrs);
        }
        // The file, opened once for its flags and its data.
        let mut file = None;
        if self.flags_held != 0 && matches!(ft, FileType::File | FileType::Dir) {
            let (same, f) = self.same_flags(&inode, rel, at, ft)?;
            w.add_if(!same, What::Flags);
            file = f;
        }
        w.add_if(
            md.mtime != (inode.mtime.sec, i64::from(inode.mtime.nsec)),
            What::Mtime,
        );
        match ft {
            FileType::Symlink => {
                let snap = self.read_link(&inode).map_err(|e| self.snap_err(e))?;
                let copy = rustix::fs::readlinkat(at.dir, at.name, Vec::new())
                    .map_err(|e| self.copy_err(rel)(e.into()))?
                    .into_bytes();
                w.add_if(snap.is_some_and(|s| s != copy), What::Target);
            }
            FileType::CharDev | FileType::BlockDev => {
                let (ma, mi) = inode.rdev_major_minor();
                let rdev = md.rdev;
                w.add_if(
                    (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev))
                        != (u64::from(ma), u64::from(mi)),
                    What::Rdev,
                );
            }
            _ => {}
        }
        if ft != FileType::Dir && self.ignore.checks(What::Links) && !self.same_links(&inode, md) {
            w.add(What::Links);
        }
        if ft == FileType::File
            && self.ignore.checks(What::Data)
            && (md.size != inode.size
                || (inode.size > 0 && !self.same_data(&inode, rel, at, file)?))
        {
            w.add(What::Data);
        }
        self.push(Change::Differs, rel.to_vec(), ft, w);
        Ok(ft == FileType::Dir)
    }

    /// Whether the copy's file `rel` (of the same size, found `at`, or
    /// already open as `file`) holds the snapshot file's bytes: all of them
    /// read from the filesystem, or without one only inline data (a file
    /// whose data is elsewhere counts as the same).
    fn same_data(
        &mut self,
        inode: &Inode,
        rel: &[u8],
        at: Place,
        file: Option<File>,
    ) -> Result<bool, VerifyError> {
        if let Some(check) = &mut self.check {
            return check.same_data(inode, rel, at, file, &mut self.report.bytes);
        }
        let Some(snap) = inline_data(&self.tree, inode).map_err(|e| self.snap_err(e))? else {
            return Ok(true);
        };
        let file = match file {
            Some(f) => f,
            None => File::from(open_copy(at, false).map_err(self.copy_err(rel))?),
        };
        let mut copy = vec![0u8; snap.len()];
        let mut done = 0;
        while done < copy.len() {
            match file.read_at(&mut copy[done..], done as u64) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.copy_err(rel)(e)),
            }
        }
        self.report.bytes += done as u64;
        Ok(done == copy.len() && copy == snap)
    }

    /// The target of the symlink `inode`: read from the filesystem, or
    /// without one from its inline data (none when it is not there).
    fn read_link(&self, inode: &Inode) -> Result<Option<Vec<u8>>, Error> {
        let Some(fs) = self.fs else {
            return inline_data(&self.tree, inode);
        };
        let mut buf = vec![0u8; usize::try_from(inode.size.min(1 << 20)).unwrap_or(0)];
        let n = fs.read_file_in(&self.tree, inode, 0, &mut buf)?;
        buf.truncate(n);
        Ok(Some(buf))
    }

    /// Whether the copy's file or directory `rel` (found `at`) has the
    /// inode flags of the snapshot's, of those its filesystem holds; and a
    /// file, opened for that, to read its data from.
    fn same_flags(
        &mut self,
        inode: &Inode,
        rel: &[u8],
        at: Place,
        ft: FileType,
    ) -> Result<(bool, Option<File>), VerifyError> {
        let fd = match open_copy(at, ft == FileType::Dir) {
            Ok(fd) => fd,
            // Unreadable to this user: its flags cannot be asked for (its
            // data, if any, fails to be read on its own).
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok((true, None)),
            Err(e) => return Err(self.copy_err(rel)(e)),
        };
        let copy = match rustix::fs::ioctl_getflags(&fd) {
            Ok(f) => f.bits(),
            Err(e) if no_flags(e) => {
                self.no_flags();
                return Ok((true, None));
            }
            Err(e) => return Err(self.copy_err(rel)(e.into())),
        };
        let snap = fileattr::fs_flags(inode.flags);
        let same = (snap ^ copy) & self.flags_held == 0;
        Ok((same, (ft == FileType::File).then(|| File::from(fd))))
    }

    /// Stops comparing inode flags: the copy's filesystem has none.
    fn no_flags(&mut self) {
        if self.flags_held != 0 {
            self.flags_held = 0;
            self.report.notes.push(format!(
                "the copy's filesystem at {} has no inode flags; they are not compared",
                self.root.display()
            ));
        }
    }

    /// Whether the copy's link count and link groups match the snapshot's.
    fn same_links(&mut self, inode: &Inode, md: &CopyStat) -> bool {
        let mut same = md.nlink == u64::from(inode.nlink);
        if inode.nlink > 1 || md.nlink > 1 {
            let id = md.id;
            same &= *self.snap_links.entry(inode.ino).or_insert(id) == id;
            same &= *self.copy_links.entry(id).or_insert(inode.ino) == inode.ino;
        }
        same
    }

    /// Stops comparing extended attributes: the copy cannot hold them.
    fn no_xattrs(&mut self) {
        if self.xattrs {
            self.xattrs = false;
            self.report.notes.push(format!(
                "the copy's filesystem at {} has no extended attributes; they are not compared",
                self.root.display()
            ));
        }
    }

    /// Whether the extended attributes agree.
    fn same_xattrs(&mut self, inode: &Inode, rel: &[u8]) -> Result<bool, VerifyError> {
        let path = self.copy_path(rel);
        let names = match xattr::list(&path) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => {
                self.no_xattrs();
                return Ok(true);
            }
            Err(e) => return Err(self.copy_err(rel)(e)),
        };
        let counts = |name: &[u8]| {
            (self.on_btrfs || !name.starts_with(b"btrfs."))
                && !(rel.is_empty() && name.starts_with(RRECEIVE_PREFIX))
        };
        // xfs shows root its ACLs a second time, as stored.
        let alias = |name: &[u8]| self.on_xfs && XFS_ACL_ALIASES.contains(&name);
        let mut copy = Vec::new();
        for name in names {
            if !counts(name.as_bytes()) || alias(name.as_bytes()) {
                continue;
            }
            // A name that vanished meanwhile reads as absent.
            if let Some(v) = xattr::get(&path, &name).map_err(self.copy_err(rel))? {
                copy.push((name.as_bytes().to_vec(), v));
            }
        }
        let mut snap: Vec<Xattr> = xattrs_of(&self.tree, inode.ino)
            .map_err(|e| self.snap_err(e))?
            .into_iter()
            .filter(|(n, _)| counts(n))
            .map(|(n, v)| {
                if v.is_empty() && (n == ACL_ACCESS || n == ACL_DEFAULT) {
                    (n, EMPTY_ACL.to_vec())
                } else {
                    (n, v)
                }
            })
            .collect();
        copy.sort();
        snap.sort();
        if copy == snap {
            return Ok(true);
        }
        for (name, value) in &snap {
            let size = (name.len() + value.len()) as u64;
            if size > self.xattr_room && !copy.iter().any(|(n, _)| n == name) {
                self.report.notes.push(format!(
                    "xattr {} of {} ({} bytes) is not in the copy: it may be too large for the \
                     copy's filesystem, which rreceive then skips and names in its warning \
                     (on ext4: tune2fs -O ea_inode)",
                    btrfs_text::escape::escape(name),
                    btrfs_text::escape::escape(rel),
                    value.len()
                ));
            }
        }
        Ok(false)
    }
}

/// An extended attribute: its name and value.
type Xattr = (Vec<u8>, Vec<u8>);

/// The bytes of `inode` when its data is one uncompressed inline extent
/// at offset 0 of `tree` that covers its size; none when its data is
/// anywhere else.
fn inline_data(tree: &Tree<'_>, inode: &Inode) -> Result<Option<Vec<u8>>, Error> {
    let from = Key::new(inode.ino, key_type::EXTENT_DATA, 0);
    let to = Key::new(inode.ino, key_type::EXTENT_DATA, u64::MAX);
    let mut items = tree.range(from, to);
    let Some(item) = items.next().transpose()? else {
        return Ok(None);
    };
    if items.next().is_some() || item.key.offset != 0 {
        return Ok(None);
    }
    let fe = FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree.id, item.key))?;
    if fe.kind() != ExtentKind::Inline || fe.compression() != Compression::None {
        return Ok(None);
    }
    // Past its inline bytes a file reads as a hole: compared by size only.
    let Some(size) = usize::try_from(inode.size)
        .ok()
        .filter(|&n| n as u64 <= fe.ram_bytes())
    else {
        return Ok(None);
    };
    let mut data = fe.inline_data().to_vec();
    data.resize(size, 0);
    Ok(Some(data))
}

/// The size (name and value) above which an xattr may not fit on the
/// filesystem of `dir`: one block (as statvfs gives it, 4 KiB at least)
/// less the headers stored with it, 156 bytes on btrfs (a tree block is
/// at least that large), 64 elsewhere (ext4 without `ea_inode` keeps an
/// inode's xattrs in the inode and one block).
fn xattr_room(dir: &Path, on_btrfs: bool) -> u64 {
    let block = nix::sys::statvfs::statvfs(dir).map_or(4096, |v| v.block_size());
    block
        .max(4096)
        .saturating_sub(if on_btrfs { 156 } else { 64 })
}

/// Compares files' data.
struct DataCheck<'a, 'fs> {
    fs: &'fs Filesystem,
    sv: &'a Subvolume,
    tree: Tree<'fs>,
    root: &'a Path,
    progress: &'a dyn Progress,
    /// Read buffers kept across files (a fresh zeroed 1 MiB per file costs
    /// more than the comparison of most files).
    bufs: Buffers,
}

impl DataCheck<'_, '_> {
    /// Whether the copy's file `rel` (of the same size, found `at`, or
    /// already open as `file`) holds the snapshot file's bytes; adds the
    /// bytes read to `bytes`.
    fn same_data(
        &mut self,
        inode: &Inode,
        rel: &[u8],
        at: Place,
        file: Option<File>,
        bytes: &mut u64,
    ) -> Result<bool, VerifyError> {
        let file = match file {
            Some(f) => f,
            None => File::from(open_copy(at, false).map_err(copy_error(self.root, rel))?),
        };
        let mut bufs = std::mem::take(&mut self.bufs);
        bufs.copy.resize(CHUNK as usize, 0);
        let mut cmp = FileCompare {
            fs: self.fs,
            tree: self.tree,
            inode: *inode,
            file: &file,
            bufs,
            read: 0,
            all: 0,
        };
        let same = self.compare(&mut cmp, rel);
        self.bufs = cmp.bufs;
        *bytes += cmp.all;
        same
    }

    /// Compares the snapshot file's pieces with the copy, window by window.
    fn compare(&self, cmp: &mut FileCompare, rel: &[u8]) -> Result<bool, VerifyError> {
        let inode = cmp.inode;
        let snap_err = |e| snap_error(self.sv, inode.ino, rel, e);
        let mut lo = 0;
        while lo < inode.size {
            let hi = inode.size.min(lo + WINDOW);
            for p in pieces(&self.tree, inode.ino, lo, hi).map_err(snap_err)? {
                let r = cmp.piece(&p);
                self.progress.advance(std::mem::take(&mut cmp.read), 0);
                match r {
                    Ok(true) => {}
                    Ok(false) => return Ok(false),
                    Err(Side::Copy(e)) => return Err(copy_error(self.root, rel)(e)),
                    Err(Side::Snap(e)) => return Err(snap_err(e.into())),
                }
            }
            lo = hi;
        }
        Ok(true)
    }
}

/// Which side a read failed on.
enum Side {
    Copy(io::Error),
    Snap(Error),
}

/// One file's comparison.
struct FileCompare<'a, 'fs> {
    fs: &'fs Filesystem,
    tree: Tree<'fs>,
    inode: Inode,
    file: &'a File,
    bufs: Buffers,
    /// Copy bytes read since the progress bar was last told.
    read: u64,
    /// Copy bytes read in all.
    all: u64,
}

impl FileCompare<'_, '_> {
    /// Reads the copy's `[off, off + n)` into the buffer; false when the
    /// copy ends early (it changed size: it differs).
    fn read_copy(&mut self, off: u64, n: usize) -> Result<bool, Side> {
        let mut done = 0;
        while done < n {
            match self
                .file
                .read_at(&mut self.bufs.copy[done..n], off + done as u64)
            {
                Ok(0) => return Ok(false),
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Side::Copy(e)),
            }
        }
        self.read += n as u64;
        self.all += n as u64;
        Ok(true)
    }

    /// Whether the snapshot's bytes at `[off, off + n)` equal the copy
    /// buffer's `[at, at + n)`.
    fn same_as_snapshot(&mut self, off: u64, at: usize, n: usize) -> Result<bool, Side> {
        let b = &mut self.bufs;
        if b.snap.len() < n {
            b.snap.resize(n, 0);
        }
        let got = self
            .fs
            .read_file_in(&self.tree, &self.inode, off, &mut b.snap[..n])
            .map_err(Side::Snap)?;
        Ok(got == n && b.snap[..n] == b.copy[at..at + n])
    }

    /// Whether the copy holds the piece's bytes.
    fn piece(&mut self, p: &crate::changes::Piece) -> Result<bool, Side> {
        let ss = self.fs.sectorsize() as u64;
        let mut off = p.start;
        while off < p.end {
            let n = (p.end - off).min(CHUNK) as usize;
            if !self.read_copy(off, n)? {
                return Ok(false);
            }
            let same = match p.src {
                Src::Zero => self.bufs.copy[..n].iter().all(|b| *b == 0),
                Src::Disk {
                    compression: Compression::None,
                    ..
                } if !self.inode.nodatasum() => {
                    let disk = p.pos_at(off).map_or(1, |(bytenr, _, _, pos)| bytenr + pos);
                    if disk.is_multiple_of(ss) {
                        self.by_csums(off, disk, n)?
                    } else {
                        self.same_as_snapshot(off, 0, n)?
                    }
                }
                _ => self.same_as_snapshot(off, 0, n)?,
            };
            if !same {
                return Ok(false);
            }
            off += n as u64;
        }
        Ok(true)
    }

    /// Checks the `n` copy bytes at file offset `off` (disk address `disk`)
    /// against the stored checksums; sectors without one, or whose
    /// checksum does not match, are compared with the snapshot's bytes.
    fn by_csums(&mut self, off: u64, disk: u64, n: usize) -> Result<bool, Side> {
        let ss = self.fs.sectorsize();
        let csum = self.fs.csum_type();
        let cs = csum.size();
        let (sums, have) = self.fs.data_csums(disk, n as u64).map_err(Side::Snap)?;
        self.bufs.sector.resize(ss, 0);
        for (k, has) in have.iter().enumerate() {
            let at = k * ss;
            if at >= n {
                break;
            }
            let len = ss.min(n - at);
            let ok = *has && {
                // The last sector of a file is hashed zero-padded, as stored.
                let b = &mut self.bufs;
                let data = if len == ss {
                    &b.copy[at..at + ss]
                } else {
                    b.sector[..len].copy_from_slice(&b.copy[at..at + len]);
                    b.sector[len..].fill(0);
                    &b.sector[..]
                };
                csum.verify(data, &sums[k * cs..(k + 1) * cs])
            };
            if !ok && !self.same_as_snapshot(off + at as u64, at, len)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
