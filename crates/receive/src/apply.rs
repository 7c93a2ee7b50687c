//! Applying each command to the subvolume being received, with btrfs-progs
//! receive semantics (send-stream.md §6.1), confined beneath that subvolume.
//!
//! Speed: the file last created or written stays open, and WRITE, CLONE,
//! TRUNCATE, CHOWN, CHMOD, UTIMES and xattrs on it use that descriptor.
//! Directory descriptors are cached by path ([`Resolver`]). A MKFILE, MKDIR
//! or other create at an orphan name that the very next command renames is
//! done at the final name directly: one directory operation instead of two.
//! A TRUNCATE to the size the file already has is skipped.
//!
//! A new file whose commands all came (create, rename, data, owner, mode,
//! times: a "recipe") waits in a batch with the following ones; the batch is
//! created grouped by directory, in stream order within each directory, when
//! it is full or before any other kind of command. After its create, such a
//! file is finished (data, owner, mode, times) and closed on other threads
//! ([`Closer`]), through its descriptor. A later command naming it waits
//! for that first; a RENAME waits for the files beneath what it moves, END
//! and failures for everything. All path resolution stays on this thread.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use btrfs_stream::{Command, CommandKind, Position, Timespec};
use nix::errno::Errno;
use nix::fcntl::{renameat, FallocateFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, futimens, mkdirat, mknodat, Mode, SFlag};
use nix::unistd::{fchown, linkat, mkfifoat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};
use uuid::Uuid;

use crate::closer::{Closer, Finish, Job};
use crate::copy::{self, Methods};
use crate::decompress;
use crate::dest::{self, Dest, Kind};
use crate::error::{escape, CmdError, Error};
use crate::ioctl;
use crate::meta::{self, At};
use crate::path::{self, Resolver};
use crate::subvol::{SubvolState, XATTR_RESERVED_PREFIX};
use crate::{Log, Options, Stats};

/// The operation named when a path does not resolve beneath the subvolume.
const RESOLVE: &str = "resolve beneath the subvolume (no symlink is followed)";

/// Largest decoded extent accepted from ENCODED_WRITE (btrfs itself never
/// exceeds 128 KiB).
pub const MAX_UNENCODED: u64 = 16 << 20;
/// Inode flags set only at the subvolume's END (they would block the
/// stream's own later changes).
const LATE_FLAGS: u32 = FS_IMMUTABLE_FL | FS_APPEND_FL;
const MAX_DEFERRED: usize = 4096;
const MAX_DIR_TIMES: usize = 4096;

const FS_SYNC_FL: u32 = 0x8;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;
const FS_NODUMP_FL: u32 = 0x40;
const FS_NOATIME_FL: u32 = 0x80;
const FS_COMPR_FL: u32 = 0x4;
const FS_NOCOMP_FL: u32 = 0x400;
const FS_DIRSYNC_FL: u32 = 0x10000;
const FS_NOCOW_FL: u32 = 0x0080_0000;

/// btrfs inode flags (FILEATTR) → FS_*_FL.
const FLAG_MAP: &[(u64, u32)] = &[
    (1 << 1, FS_NOCOW_FL),
    (1 << 3, FS_NOCOMP_FL),
    (1 << 5, FS_SYNC_FL),
    (1 << 6, FS_IMMUTABLE_FL),
    (1 << 7, FS_APPEND_FL),
    (1 << 8, FS_NODUMP_FL),
    (1 << 9, FS_NOATIME_FL),
    (1 << 10, FS_DIRSYNC_FL),
    (1 << 11, FS_COMPR_FL),
];

/// FS_*_FL bits for btrfs inode flags.
pub fn map_inode_flags(btrfs: u64) -> u32 {
    FLAG_MAP
        .iter()
        .filter(|(b, _)| btrfs & b != 0)
        .fold(0, |acc, (_, f)| acc | f)
}

fn managed_flags() -> u32 {
    FLAG_MAP.iter().fold(0, |acc, (_, f)| acc | f)
}

/// What to do after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// An END was applied.
    End,
}

/// The regular file kept open.
struct OpenFile {
    path: Vec<u8>,
    file: File,
    /// Its size, when known without asking.
    size: Option<u64>,
    /// Its owner, when this receive created it (a chown to the same owner
    /// is then a no-op and skipped).
    owner: Option<(u32, u32)>,
}

enum Create {
    File,
    Dir,
    Nod { mode: u64, rdev: u64 },
    Fifo,
    Sock,
    Symlink(Vec<u8>),
}

impl Create {
    fn kind(&self) -> CommandKind {
        match self {
            Create::File => CommandKind::Mkfile,
            Create::Dir => CommandKind::Mkdir,
            Create::Nod { .. } => CommandKind::Mknod,
            Create::Fifo => CommandKind::Mkfifo,
            Create::Sock => CommandKind::Mksock,
            Create::Symlink(_) => CommandKind::Symlink,
        }
    }
}

/// What a held-back new file gets before it is created, so that it is
/// created at its final name, with its final mode, in one call.
#[derive(Default)]
struct Recipe {
    /// The orphan name, when the RENAME away from it was folded in.
    orphan: Option<(Vec<u8>, Position)>,
    writes: Vec<(u64, Vec<u8>, Position)>,
    bytes: usize,
    owner: Option<(u32, u32, Position)>,
    mode: Option<(u32, Position)>,
    times: Option<(Timespec, Timespec, Position)>,
}

/// A create held back until a command that does not fold into it.
struct Pending {
    cmd_pos: Position,
    path: Vec<u8>,
    what: Create,
    recipe: Recipe,
}

/// Whether a command folded into the held-back create.
enum Fold {
    /// Folded in; keep holding.
    Held,
    /// Folded in; create now.
    Now,
    /// Not part of it: create now, then apply the command.
    No,
}

/// Most write data held for a file not created yet.
const RECIPE_BYTES: usize = 1 << 20;
/// New files held back to be created together, grouped by directory.
const BATCH_FILES: usize = 4096;
/// Most write data held for them.
const BATCH_BYTES: usize = 16 << 20;

fn err_at(cmd: CommandKind, pos: Position, path: &[u8], kind: CmdError) -> Error {
    Error::Command {
        command: pos.index,
        offset: pos.offset,
        cmd,
        path: format!("'{}'", escape(path)),
        kind,
    }
}

/// The subvolume being received.
pub struct Current {
    name: Vec<u8>,
    state: SubvolState,
    res: Resolver,
    file: Option<OpenFile>,
    pending: Option<Pending>,
    /// The last security.capability set, to set again after a chown.
    caps: Option<(Vec<u8>, Vec<u8>)>,
    /// Descriptors whose immutable/append flags wait for END.
    deferred: Vec<(File, u32)>,
    /// Other subvolumes opened as clone sources.
    sources: HashMap<Uuid, Resolver>,
    /// UTIMES of directories, applied when the directory is renamed or
    /// at END: only the last one of each directory counts.
    dir_times: HashMap<Vec<u8>, (Timespec, Timespec, Position)>,
    errors: u64,
    copy: Methods,
    scratch: Vec<u8>,
    closer: Arc<Closer>,
    /// New files handed to the closing thread and not known to be done:
    /// (job, path), oldest first, and the newest job of each path.
    inflight: VecDeque<(u64, Vec<u8>)>,
    inflight_paths: HashMap<Vec<u8>, u64>,
    /// New files whose commands all came, not created yet.
    batch: Vec<Pending>,
    batch_bytes: usize,
}

/// Applies commands to a destination.
pub struct Receiver<'o> {
    opts: &'o Options,
    dest: Dest,
    cur: Option<Current>,
    /// Messages.
    pub log: Log,
    /// Counters.
    pub stats: Stats,
    /// Failed commands already reported while applying a later one.
    pub extra_errors: u64,
    closer: Arc<Closer>,
    /// Effective uid and gid: the owner new files get.
    me: (u32, u32),
}

type R<T> = Result<T, CmdError>;

fn file_from(fd: std::os::fd::RawFd) -> File {
    File::from(ioctl::owned(fd))
}

fn is_kind(mode: u32, kind: u32) -> bool {
    mode & libc::S_IFMT == kind
}

fn to_i64(v: u64, what: &'static str) -> R<i64> {
    i64::try_from(v).map_err(|_| CmdError::OutOfRange(what))
}

impl Current {
    fn new(name: &[u8], state: SubvolState, root: OwnedFd, closer: Arc<Closer>) -> Current {
        Current {
            name: name.to_vec(),
            state,
            res: Resolver::new(root),
            file: None,
            pending: None,
            caps: None,
            deferred: Vec::new(),
            sources: HashMap::new(),
            dir_times: HashMap::new(),
            errors: 0,
            copy: Methods::default(),
            scratch: Vec::new(),
            closer,
            inflight: VecDeque::new(),
            inflight_paths: HashMap::new(),
            batch: Vec::new(),
            batch_bytes: 0,
        }
    }

    /// Forgets handed-over files the closing thread is done with.
    fn prune(&mut self) {
        if self.inflight.is_empty() {
            return;
        }
        let done = self.closer.done();
        while let Some((seq, _)) = self.inflight.front() {
            if *seq > done {
                break;
            }
            if let Some((seq, p)) = self.inflight.pop_front() {
                if self.inflight_paths.get(&p) == Some(&seq) {
                    self.inflight_paths.remove(&p);
                }
            }
        }
    }

    /// Waits until the closing thread is done with the file at `path`.
    fn settle(&mut self, path: &[u8]) {
        if self.inflight_paths.is_empty() {
            return;
        }
        self.prune();
        if let Some(&seq) = self.inflight_paths.get(path) {
            self.closer.wait_for(seq);
            self.prune();
        }
    }

    /// Waits until the closing thread is done with every file at or
    /// beneath `dir` (before `dir` is renamed: the files' paths change).
    fn settle_within(&mut self, dir: &[u8]) {
        if self.inflight.is_empty() {
            return;
        }
        self.prune();
        let last = self
            .inflight
            .iter()
            .rev()
            .find(|(_, p)| path::is_within(p, dir))
            .map(|(s, _)| *s);
        if let Some(seq) = last {
            self.closer.wait_for(seq);
            self.prune();
        }
    }

    /// Waits until the closing thread is done with everything.
    fn settle_all(&mut self) {
        self.closer.wait();
        self.inflight.clear();
        self.inflight_paths.clear();
    }

    /// Closes the open file (on the closing thread).
    fn retire(&mut self) {
        if let Some(f) = self.file.take() {
            self.closer.close(f.file);
        }
    }

    /// The open file for `path`, opening (and checking) it if needed.
    fn file(&mut self, path: &[u8]) -> R<&mut OpenFile> {
        let cached = matches!(&self.file, Some(f) if f.path == path);
        if !cached {
            self.retire();
            let file = open_regular(&mut self.res, path, OFlag::O_RDWR)?;
            let size = file.metadata().map_err(CmdError::io("stat"))?.len();
            self.file = Some(OpenFile {
                path: path.to_vec(),
                file,
                size: Some(size),
                owner: None,
            });
        }
        self.file.as_mut().ok_or(CmdError::NotRegular)
    }

    fn is_open(&self, path: &[u8]) -> bool {
        matches!(&self.file, Some(f) if f.path == path)
    }
}

/// Opens regular file `path` beneath `res`: checks the type before opening
/// (a device must never be opened) and that the same inode was opened.
fn open_regular(res: &mut Resolver, path: &[u8], flags: OFlag) -> R<File> {
    let (dir, name) = res.parent(path).map_err(CmdError::os(RESOLVE))?;
    let at = At { dir, name };
    let st = at.stat().map_err(CmdError::os("stat"))?;
    if is_kind(st.st_mode, libc::S_IFLNK) {
        return Err(CmdError::Symlink);
    }
    if !is_kind(st.st_mode, libc::S_IFREG) {
        return Err(CmdError::NotRegular);
    }
    let f = if flags == OFlag::O_RDONLY {
        copy::open_noatime(dir, name, OFlag::O_NONBLOCK).map_err(CmdError::os("open"))?
    } else {
        let fd = nix::fcntl::openat(
            Some(dir.as_raw_fd()),
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(CmdError::os("open"))?;
        file_from(fd)
    };
    let st2 = fstat(f.as_raw_fd()).map_err(CmdError::os("stat"))?;
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) || !is_kind(st2.st_mode, libc::S_IFREG) {
        return Err(CmdError::Os {
            op: "open",
            errno: Errno::ESTALE,
        });
    }
    Ok(f)
}

/// Where a metadata command lands: the open file, or a name in a directory.
enum Target<'a> {
    File(&'a File),
    At(At<'a>),
}

fn target<'a>(cur: &'a mut Current, dest: &'a Dest, path: &'a [u8]) -> R<Target<'a>> {
    if path.is_empty() {
        return Ok(Target::At(At {
            dir: dest.fd(),
            name: &cur.name,
        }));
    }
    if cur.is_open(path) {
        if let Some(f) = &cur.file {
            return Ok(Target::File(&f.file));
        }
    }
    let (dir, name) = cur.res.parent(path).map_err(CmdError::os(RESOLVE))?;
    Ok(Target::At(At { dir, name }))
}

impl<'o> Receiver<'o> {
    /// A receiver writing into `dest`.
    pub fn new(opts: &'o Options, dest: Dest, log: Log) -> Receiver<'o> {
        Receiver {
            opts,
            dest,
            cur: None,
            log,
            stats: Stats::default(),
            extra_errors: 0,
            closer: Arc::new(Closer::new()),
            me: (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            ),
        }
    }

    /// DEST/<name> of the subvolume being received, if any.
    pub fn current_path(&self) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        self.cur
            .as_ref()
            .map(|c| self.dest.path().join(std::ffi::OsStr::from_bytes(&c.name)))
    }

    /// Counts a failed command against the current subvolume.
    pub fn note_error(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.errors += 1;
        }
    }

    /// Closes everything after a failure; the subvolume stays incomplete.
    pub fn abort(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.retire();
            c.pending = None;
            c.batch.clear();
            c.dir_times.clear();
            c.settle_all();
        }
        // Later failures of files handed over are not reported: applying
        // the commands one by one would have stopped before them.
        self.closer.wait();
        let _ = self.closer.take_errors();
        self.merge_counts();
    }

    /// Waits for the files handed to the closing thread and reports their
    /// failures (call after the last command).
    pub fn finish(&mut self) -> Result<(), Error> {
        self.flush_batch()?;
        if let Some(c) = self.cur.as_mut() {
            c.settle_all();
        }
        self.closer.wait();
        self.collect()
    }

    fn merge_counts(&mut self) {
        let c = self.closer.take_counts();
        self.stats.chowns_skipped += c.chowns_skipped;
        self.stats.chmods_skipped += c.chmods_skipped;
    }

    /// Takes the failures of files the closing thread finished. Each counts
    /// as a failed command; with `-E 1` the first one stops the receive.
    fn collect(&mut self) -> Result<(), Error> {
        self.merge_counts();
        let mut errs = self.closer.take_errors().into_iter();
        if self.opts.max_errors == 1 {
            if let Some(e) = errs.next() {
                return Err(e);
            }
        }
        for e in errs {
            self.log.error(&e);
            self.note_error();
            self.extra_errors += 1;
        }
        Ok(())
    }

    /// Applies one command.
    pub fn apply(&mut self, cmd: &Command<'_>, pos: Position) -> Result<Flow, Error> {
        // Failures of earlier commands, finished on the closing thread,
        // come first.
        if self.closer.has_errors() {
            self.collect()?;
        }
        let res = self.apply_one(cmd, pos);
        if res.is_err() {
            self.closer.wait();
            self.collect()?;
        }
        res
    }

    /// Waits for the closing thread where `cmd` touches a file handed to it
    /// (all its other work is on descriptors, so names may change freely).
    fn settle_for(&mut self, cmd: &Command<'_>) {
        use Command as C;
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        if c.inflight.is_empty() {
            return;
        }
        match *cmd {
            // New names; removing a name leaves the open file alone.
            C::Mkfile { .. }
            | C::Mkdir { .. }
            | C::Mknod { .. }
            | C::Mkfifo { .. }
            | C::Mksock { .. }
            | C::Symlink { .. }
            | C::Unlink { .. }
            | C::Rmdir { .. } => {}
            // The paths of the files beneath change.
            C::Rename { from, .. } => c.settle_within(from),
            // The file gets a second name.
            C::Link { target, .. } => c.settle(target),
            C::Clone {
                path,
                clone_uuid,
                clone_path,
                ..
            } => {
                c.settle(path);
                if clone_uuid == c.state.received_uuid {
                    c.settle(clone_path);
                }
            }
            C::SetXattr { path, .. }
            | C::RemoveXattr { path, .. }
            | C::Write { path, .. }
            | C::Truncate { path, .. }
            | C::Chmod { path, .. }
            | C::Chown { path, .. }
            | C::Utimes { path, .. }
            | C::UpdateExtent { path, .. }
            | C::Fallocate { path, .. }
            | C::Fileattr { path, .. }
            | C::EncodedWrite { path, .. }
            | C::EnableVerity { path, .. } => c.settle(path),
            _ => c.settle_all(),
        }
    }

    fn apply_one(&mut self, cmd: &Command<'_>, pos: Position) -> Result<Flow, Error> {
        self.stats.commands += 1;
        if self.log.level >= 3 {
            self.log.trace(cmd, pos);
        }
        // A create held back from earlier commands comes first.
        if let Some(mut p) = self.cur.as_mut().and_then(|c| c.pending.take()) {
            match self.fold(&mut p, cmd, pos) {
                Fold::Held => {
                    if let Some(c) = self.cur.as_mut() {
                        c.pending = Some(p);
                    }
                    return Ok(Flow::Continue);
                }
                Fold::Now if matches!(p.what, Create::File) => {
                    self.enqueue(p)?;
                    return Ok(Flow::Continue);
                }
                Fold::Now => {
                    self.flush_batch()?;
                    self.materialize(p, true)?;
                    return Ok(Flow::Continue);
                }
                Fold::No => {
                    self.flush_batch()?;
                    if let Err(e) = self.materialize(p, false) {
                        if self.opts.max_errors == 1 {
                            return Err(e);
                        }
                        // Report the held-back command's error and still
                        // apply this one, as if they had come one by one.
                        self.log.error(&e);
                        self.note_error();
                        self.extra_errors += 1;
                    }
                }
            }
        }
        if self.needs_flush(cmd) {
            self.flush_batch()?;
        }
        self.settle_for(cmd);
        match cmd {
            Command::Rename { from, to } => {
                self.flush_dir_times(|p| path::is_within(p, from) || path::is_within(p, to))?
            }
            Command::Rmdir { path } => {
                if let Some(c) = self.cur.as_mut() {
                    c.dir_times.retain(|p, _| !path::is_within(p, path));
                }
            }
            Command::End {} => {
                // Failed files keep the subvolume from being marked complete.
                self.closer.wait();
                self.collect()?;
                self.flush_dir_times(|_| true)?
            }
            _ => {}
        }
        self.dispatch(cmd, pos).map_err(|e| e.at(cmd, pos))
    }

    /// Whether the new files held in the batch must be created before
    /// `cmd`: before anything but a create (itself held back) or a
    /// directory's UTIMES (held back until END).
    fn needs_flush(&self, cmd: &Command<'_>) -> bool {
        let Some(c) = self.cur.as_ref() else {
            return false;
        };
        if c.batch.is_empty() {
            return false;
        }
        match *cmd {
            Command::Mkfile { .. }
            | Command::Mkdir { .. }
            | Command::Mknod { .. }
            | Command::Mkfifo { .. }
            | Command::Mksock { .. }
            | Command::Symlink { .. } => false,
            Command::Utimes { path, .. } => {
                !(c.res.is_cached_dir(path)
                    && !c.is_open(path)
                    && c.dir_times.len() < MAX_DIR_TIMES)
            }
            _ => true,
        }
    }

    /// Holds a new file whose commands all came; creates the batch once it
    /// is full.
    fn enqueue(&mut self, p: Pending) -> Result<(), Error> {
        let Some(cur) = self.cur.as_mut() else {
            return self.materialize(p, true);
        };
        cur.batch_bytes += p.recipe.bytes + p.path.len();
        cur.batch.push(p);
        if cur.batch.len() >= BATCH_FILES || cur.batch_bytes >= BATCH_BYTES {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// Creates the new files held in the batch, grouped by directory (in
    /// stream order within each directory, so each directory's entries come
    /// in the order the stream made them).
    fn flush_batch(&mut self) -> Result<(), Error> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        if cur.batch.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut cur.batch);
        cur.batch_bytes = 0;
        // Stable: files of one directory keep their order.
        batch.sort_by(|a, b| path::split(&a.path).0.cmp(path::split(&b.path).0));
        for p in batch {
            if self.opts.max_errors == 1 && self.closer.has_errors() {
                // An earlier file failed on the finishing thread: stop here.
                return self.collect();
            }
            if let Err(e) = self.materialize(p, true) {
                if self.opts.max_errors == 1 {
                    return Err(e);
                }
                self.log.error(&e);
                self.note_error();
                self.extra_errors += 1;
            }
        }
        Ok(())
    }

    /// Applies the held-back directory times of the paths `which` selects.
    fn flush_dir_times(&mut self, which: impl Fn(&[u8]) -> bool) -> Result<(), Error> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        if cur.dir_times.is_empty() {
            return Ok(());
        }
        let mut due: Vec<(Vec<u8>, (Timespec, Timespec, Position))> = Vec::new();
        cur.dir_times.retain(|p, v| {
            if which(p) {
                due.push((p.clone(), *v));
                false
            } else {
                true
            }
        });
        for (p, (a, m, pos)) in due {
            let res = match target(cur, &self.dest, &p) {
                Ok(Target::At(at)) => at.utimes(a, m).map_err(CmdError::os("utimes")),
                Ok(Target::File(f)) => {
                    let (ta, tm) = (meta::timespec(a), meta::timespec(m));
                    match (ta, tm) {
                        (Ok(ta), Ok(tm)) => futimens(f.as_raw_fd(), &ta, &tm),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    }
                    .map_err(CmdError::os("utimes"))
                }
                Err(e) => Err(e),
            };
            if let Err(kind) = res {
                return Err(Error::Command {
                    command: pos.index,
                    offset: pos.offset,
                    cmd: CommandKind::Utimes,
                    path: format!("'{}'", escape(&p)),
                    kind,
                });
            }
        }
        Ok(())
    }

    fn cur(&mut self) -> R<&mut Current> {
        self.cur.as_mut().ok_or(CmdError::NoSubvol)
    }

    fn defer(&mut self, pos: Position, path: &[u8], what: Create) -> R<Flow> {
        let cur = self.cur()?;
        cur.pending = Some(Pending {
            cmd_pos: pos,
            path: path.to_vec(),
            what,
            recipe: Recipe::default(),
        });
        Ok(Flow::Continue)
    }

    /// Applies one command. Every path it carries is checked first
    /// ([`path::confine`]); the functions below take checked paths.
    fn dispatch(&mut self, cmd: &Command<'_>, pos: Position) -> R<Flow> {
        use Command as C;
        path::confine(cmd)?;
        match *cmd {
            C::Subvol {
                path,
                uuid,
                ctransid,
            } => self.subvol(path, uuid, ctransid),
            C::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => self.snapshot(path, uuid, ctransid, clone_uuid, clone_ctransid),
            C::End {} => self.end(),
            C::Mkfile { path, .. } => self.defer(pos, path, Create::File),
            C::Mkdir { path, .. } => self.defer(pos, path, Create::Dir),
            C::Mknod {
                path, rdev, mode, ..
            } => self.defer(pos, path, Create::Nod { mode, rdev }),
            C::Mkfifo { path, .. } => self.defer(pos, path, Create::Fifo),
            C::Mksock { path, .. } => self.defer(pos, path, Create::Sock),
            C::Symlink { path, target, .. } => {
                self.defer(pos, path, Create::Symlink(target.to_vec()))
            }
            C::Rename { from, to } => self.rename(from, to),
            C::Link { path, target } => self.link(path, target),
            C::Unlink { path } => self.unlink(path, false),
            C::Rmdir { path } => self.unlink(path, true),
            C::SetXattr { path, name, data } => self.set_xattr(path, name, data),
            C::RemoveXattr { path, name } => self.remove_xattr(path, name),
            C::Write { path, offset, data } => self.write(path, offset, data),
            C::Clone {
                offset,
                len,
                path,
                clone_uuid,
                clone_path,
                clone_offset,
                ..
            } => self.clone_range(path, offset, len, clone_uuid, clone_path, clone_offset),
            C::Truncate { path, size } => self.truncate(path, size),
            C::Chmod { path, mode } => self.chmod(path, mode),
            C::Chown { path, uid, gid } => self.chown(path, uid, gid),
            C::Utimes {
                path, atime, mtime, ..
            } => self.utimes(pos, path, atime, mtime),
            C::UpdateExtent { .. } => {
                self.cur()?;
                Ok(Flow::Continue)
            }
            C::Fallocate {
                path,
                mode,
                offset,
                len,
            } => self.fallocate(path, mode, offset, len),
            C::Fileattr { path, attr } => self.fileattr(path, attr),
            C::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                unencoded_len,
                unencoded_offset,
                compression,
                encryption,
                data,
            } => self.encoded_write(
                path,
                offset,
                ioctl::EncodedWrite {
                    offset,
                    len: unencoded_file_len,
                    unencoded_len,
                    unencoded_offset,
                    compression: compression.unwrap_or(0),
                    encryption: encryption.unwrap_or(0),
                    data,
                },
            ),
            C::EnableVerity {
                path,
                algorithm,
                block_size,
                salt,
                sig,
            } => self.enable_verity(path, algorithm, block_size, salt, sig),
        }
    }

    // --- subvolumes -------------------------------------------------------

    fn subvol(&mut self, name: &[u8], uuid: Uuid, ctransid: u64) -> R<Flow> {
        if self.cur.is_some() {
            return Err(CmdError::NestedSubvol);
        }
        let state = SubvolState {
            received_uuid: uuid,
            ctransid,
            parent_uuid: None,
            parent_ctransid: 0,
            complete: false,
        };
        let root = self
            .dest
            .create_subvol(name, &state)
            .map_err(CmdError::io("create subvolume"))?;
        self.log.info(format_args!("At subvol {}", escape(name)));
        self.cur = Some(Current::new(name, state, root, self.closer.clone()));
        Ok(Flow::Continue)
    }

    fn snapshot(
        &mut self,
        name: &[u8],
        uuid: Uuid,
        ctransid: u64,
        parent_uuid: Uuid,
        parent_ctransid: u64,
    ) -> R<Flow> {
        if self.cur.is_some() {
            return Err(CmdError::NestedSubvol);
        }
        let parent = self
            .dest
            .find(parent_uuid)
            .map_err(CmdError::io("look up parent"))?
            .ok_or(CmdError::ParentNotFound(parent_uuid))?;
        if !parent.complete {
            if !self.opts.force {
                return Err(CmdError::ParentIncomplete {
                    name: escape(&parent.name),
                    uuid: parent_uuid,
                });
            }
            self.log.note(format_args!(
                "using incomplete parent {} because of --force",
                escape(&parent.name)
            ));
        }
        let state = SubvolState {
            received_uuid: uuid,
            ctransid,
            parent_uuid: Some(parent_uuid),
            parent_ctransid,
            complete: false,
        };
        let (root, stats) = self
            .dest
            .snapshot(name, &parent, &state)
            .map_err(CmdError::io("create snapshot"))?;
        if let Some(s) = stats {
            self.log.note(format_args!(
                "copied parent {}: {} inodes, {} hardlinks, {} files reflinked",
                escape(&parent.name),
                s.inodes,
                s.links,
                s.reflinked
            ));
        }
        self.log.info(format_args!("At snapshot {}", escape(name)));
        self.cur = Some(Current::new(name, state, root, self.closer.clone()));
        Ok(Flow::Continue)
    }

    fn end(&mut self) -> R<Flow> {
        let Some(mut cur) = self.cur.take() else {
            return Ok(Flow::End);
        };
        cur.retire();
        cur.sources.clear();
        cur.closer.wait();
        for (f, bits) in std::mem::take(&mut cur.deferred) {
            match ioctl::get_inode_flags(f.as_fd())
                .and_then(|now| ioctl::set_inode_flags(f.as_fd(), (now & !LATE_FLAGS) | bits))
            {
                Ok(()) => {}
                Err(e) => {
                    self.stats.skipped += 1;
                    self.log
                        .note(format_args!("immutable/append flag not applied: {e}"));
                }
            }
        }
        let name = cur.name.clone();
        if cur.errors > 0 {
            self.log.info(format_args!(
                "subvolume {} not marked complete: {} command(s) failed",
                escape(&name),
                cur.errors
            ));
            return Ok(Flow::End);
        }
        let mut state = cur.state.clone();
        state.complete = true;
        let root = cur
            .res
            .root()
            .try_clone_to_owned()
            .map_err(CmdError::io("dup"))?;
        drop(cur);
        self.dest
            .finish(&name, root.as_fd(), &state)
            .map_err(CmdError::io("mark subvolume received"))?;
        self.stats.subvols += 1;
        Ok(Flow::End)
    }

    // --- creating ---------------------------------------------------------

    /// A held-back create whose next command renames it to `to`: create at
    /// `to` directly, unless something is there (then create and rename).
    /// Folds `cmd` into the held-back create `p` where the result is the
    /// same as applying it after the create.
    fn fold(&mut self, p: &mut Pending, cmd: &Command<'_>, pos: Position) -> Fold {
        // A command with a path that is not allowed is never folded in:
        // applied on its own, it fails with its own error.
        if path::confine(cmd).is_err() {
            return Fold::No;
        }
        let is_file = matches!(p.what, Create::File);
        let r = &mut p.recipe;
        match *cmd {
            Command::Rename { from, to } if from == p.path.as_slice() && r.orphan.is_none() => {
                // Creating in the final directory is the same as creating
                // at the orphan name and renaming, unless that directory
                // has a default ACL, which the new inode would inherit.
                let ok = self.cur.as_mut().is_some_and(|c| {
                    let (parent, _) = path::split(to);
                    !c.res.has_default_acl(parent)
                });
                if !ok {
                    return Fold::No;
                }
                r.orphan = Some((std::mem::replace(&mut p.path, to.to_vec()), pos));
                if is_file {
                    Fold::Held
                } else {
                    Fold::Now
                }
            }
            _ if !is_file => Fold::No,
            Command::Write { path, offset, data }
                if path == p.path.as_slice()
                    && r.bytes + data.len() <= RECIPE_BYTES
                    && r.owner.is_none()
                    && r.mode.is_none()
                    && offset
                        .checked_add(data.len() as u64)
                        .is_some_and(|e| e <= i64::MAX as u64) =>
            {
                r.bytes += data.len();
                r.writes.push((offset, data.to_vec(), pos));
                Fold::Held
            }
            Command::Chown { path, uid, gid }
                if path == p.path.as_slice() && r.mode.is_none() && r.owner.is_none() =>
            {
                match (u32::try_from(uid), u32::try_from(gid)) {
                    (Ok(u), Ok(g)) => {
                        r.owner = Some((u, g, pos));
                        Fold::Held
                    }
                    _ => Fold::No,
                }
            }
            Command::Chmod { path, mode } if path == p.path.as_slice() && r.mode.is_none() => {
                r.mode = Some(((mode & 0o7777) as u32, pos));
                Fold::Held
            }
            Command::Utimes {
                path, atime, mtime, ..
            } if path == p.path.as_slice()
                && meta::timespec(atime).is_ok()
                && meta::timespec(mtime).is_ok() =>
            {
                r.times = Some((atime, mtime, pos));
                Fold::Now
            }
            // The kernel's directory-times cache may flush a directory's
            // UTIMES in the middle of a new file's commands. Directory
            // times are held back until END anyway, so it can be taken
            // now without creating the file first.
            Command::Utimes {
                path, atime, mtime, ..
            } if meta::timespec(atime).is_ok() && meta::timespec(mtime).is_ok() => {
                match self.cur.as_mut() {
                    Some(c)
                        if c.res.is_cached_dir(path)
                            && !c.is_open(path)
                            && c.dir_times.len() < MAX_DIR_TIMES =>
                    {
                        c.dir_times.insert(path.to_vec(), (atime, mtime, pos));
                        self.stats.dir_utimes_deferred += 1;
                        Fold::Held
                    }
                    _ => Fold::No,
                }
            }
            _ => Fold::No,
        }
    }

    /// Creates a held-back inode and applies what was folded into it. A new
    /// file whose commands all came (`complete`: its UTIMES was folded in)
    /// is finished on the closing thread.
    fn materialize(&mut self, p: Pending, complete: bool) -> Result<(), Error> {
        let Pending {
            cmd_pos,
            path: at,
            what,
            recipe: r,
        } = p;
        let kind = what.kind();
        // The mode can be given at create time when no chown follows that
        // would clear set-id bits (the owner is then already right).
        let me = self.me;
        let chown_expected = r.owner.is_some_and(|(u, g, _)| (u, g) != me);
        let mode = match r.mode {
            Some((m, _)) if !chown_expected => m,
            _ => 0o600,
        };
        let mut direct = true;
        match self.create(&what, &at, mode) {
            Ok(()) => {
                if r.orphan.is_some() {
                    self.stats.fused_renames += 1;
                }
            }
            Err(CmdError::Os {
                errno: Errno::EEXIST,
                ..
            }) if r.orphan.is_some() => {
                // Something is at the final name: create at the orphan name
                // and rename over it, as the stream said.
                let Some((orphan, rpos)) = r.orphan.as_ref().map(|(o, p)| (o.clone(), *p)) else {
                    return Err(err_at(kind, cmd_pos, &at, CmdError::NoSubvol));
                };
                direct = false;
                self.create(&what, &orphan, mode)
                    .map_err(|e| err_at(kind, cmd_pos, &orphan, e))?;
                self.flush_dir_times(|d| path::is_within(d, &at))?;
                self.rename(&orphan, &at)
                    .map_err(|e| err_at(CommandKind::Rename, rpos, &at, e))?;
                if matches!(what, Create::File) {
                    // Reopen it under its final name.
                    let cur = self
                        .cur
                        .as_mut()
                        .ok_or_else(|| err_at(kind, cmd_pos, &at, CmdError::NoSubvol))?;
                    cur.file(&at).map_err(|e| err_at(kind, cmd_pos, &at, e))?;
                }
            }
            Err(e) => return Err(err_at(kind, cmd_pos, &at, e)),
        }
        if !matches!(what, Create::File) {
            return Ok(());
        }
        let cur = self
            .cur
            .as_mut()
            .ok_or_else(|| err_at(kind, cmd_pos, &at, CmdError::NoSubvol))?;
        if complete && direct {
            if let Some(f) = cur.file.take_if(|f| f.path == at) {
                // btrfs writes a new file's data back soon anyway.
                let flush = self.dest.kind() == Kind::Btrfs && !r.writes.is_empty();
                self.stats.bytes_written += r.writes.iter().map(|w| w.1.len() as u64).sum::<u64>();
                cur.prune();
                let seq = cur.closer.submit(Job {
                    file: f.file,
                    finish: Some(Box::new(Finish {
                        path: at.clone(),
                        create: cmd_pos,
                        writes: r.writes,
                        owner: r.owner,
                        mode: r.mode,
                        times: r.times,
                        flush,
                    })),
                });
                cur.inflight.push_back((seq, at.clone()));
                cur.inflight_paths.insert(at, seq);
                return Ok(());
            }
        }
        let Some(f) = cur.file.as_mut().filter(|f| f.path == at) else {
            return Err(err_at(kind, cmd_pos, &at, CmdError::NotRegular));
        };
        for (off, data, wpos) in &r.writes {
            f.file
                .write_all_at(data, *off)
                .map_err(|e| err_at(CommandKind::Write, *wpos, &at, CmdError::io("write")(e)))?;
            let end = off + data.len() as u64;
            f.size = f.size.map(|s| s.max(end));
            self.stats.bytes_written += data.len() as u64;
        }
        let st = fstat(f.file.as_raw_fd())
            .map_err(|e| err_at(kind, cmd_pos, &at, CmdError::os("stat")(e)))?;
        let mut chowned = false;
        f.owner = Some((st.st_uid, st.st_gid));
        if let Some((u, g, opos)) = r.owner {
            if (st.st_uid, st.st_gid) != (u, g) {
                fchown(
                    f.file.as_raw_fd(),
                    Some(Uid::from_raw(u)),
                    Some(Gid::from_raw(g)),
                )
                .map_err(|e| err_at(CommandKind::Chown, opos, &at, CmdError::os("chown")(e)))?;
                chowned = true;
            } else {
                self.stats.chowns_skipped += 1;
            }
            f.owner = Some((u, g));
        }
        if let Some((m, mpos)) = r.mode {
            if chowned || st.st_mode & 0o7777 != m {
                fchmod(f.file.as_raw_fd(), Mode::from_bits_retain(m))
                    .map_err(|e| err_at(CommandKind::Chmod, mpos, &at, CmdError::os("chmod")(e)))?;
            } else {
                self.stats.chmods_skipped += 1;
            }
        }
        if let Some((a, m, tpos)) = r.times {
            let ts = |t| {
                meta::timespec(t)
                    .map_err(|e| err_at(CommandKind::Utimes, tpos, &at, CmdError::os("utimes")(e)))
            };
            futimens(f.file.as_raw_fd(), &ts(a)?, &ts(m)?)
                .map_err(|e| err_at(CommandKind::Utimes, tpos, &at, CmdError::os("utimes")(e)))?;
        }
        Ok(())
    }

    fn create(&mut self, what: &Create, at: &[u8], file_mode: u32) -> R<()> {
        let cur = self.cur()?;
        let (dir, name) = cur.res.parent(at).map_err(CmdError::os(RESOLVE))?;
        let raw = Some(dir.as_raw_fd());
        match what {
            Create::File => {
                let open = || {
                    nix::fcntl::openat(
                        raw,
                        name,
                        OFlag::O_RDWR
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        Mode::from_bits_retain(file_mode),
                    )
                };
                let fd = match open() {
                    // Out of descriptors: let the other threads close theirs.
                    Err(Errno::EMFILE | Errno::ENFILE) => {
                        cur.closer.wait();
                        open()
                    }
                    r => r,
                }
                .map_err(CmdError::os("create file"))?;
                let file = file_from(fd);
                cur.retire();
                cur.file = Some(OpenFile {
                    path: at.to_vec(),
                    file,
                    size: Some(0),
                    // Set by `materialize`, which looks at the new file.
                    owner: None,
                });
            }
            Create::Dir => {
                mkdirat(raw, name, Mode::from_bits_retain(0o700)).map_err(CmdError::os("mkdir"))?
            }
            Create::Nod { mode, rdev } => {
                let kind = (*mode as u32) & libc::S_IFMT;
                if *mode > u64::from(u32::MAX)
                    || ![
                        libc::S_IFCHR,
                        libc::S_IFBLK,
                        libc::S_IFIFO,
                        libc::S_IFSOCK,
                        libc::S_IFREG,
                    ]
                    .contains(&kind)
                {
                    return Err(CmdError::BadMode(*mode));
                }
                mknodat(
                    raw,
                    name,
                    SFlag::from_bits_truncate(kind),
                    Mode::empty(),
                    *rdev,
                )
                .map_err(CmdError::os("mknod"))?
            }
            Create::Fifo => mkfifoat(raw, name, Mode::from_bits_retain(0o600))
                .map_err(CmdError::os("mkfifo"))?,
            Create::Sock => mknodat(raw, name, SFlag::S_IFSOCK, Mode::from_bits_retain(0o600), 0)
                .map_err(CmdError::os("mksock"))?,
            Create::Symlink(target) => {
                symlinkat(target.as_slice(), raw, name).map_err(CmdError::os("symlink"))?
            }
        }
        self.stats.created += 1;
        Ok(())
    }

    // --- names ------------------------------------------------------------

    fn rename(&mut self, from: &[u8], to: &[u8]) -> R<Flow> {
        let cur = self.cur()?;
        let (fp, fname) = path::split(from);
        let (tp, tname) = path::split(to);
        let (fdir, tdir) = cur.res.dirs2(fp, tp).map_err(CmdError::os(RESOLVE))?;
        // The descriptors stay valid: nothing touches the cache in between.
        renameat(Some(fdir), fname, Some(tdir), tname).map_err(CmdError::os("rename"))?;
        cur.res.forget(from);
        cur.res.forget(to);
        if let Some(f) = cur.file.as_mut() {
            if f.path == to {
                cur.retire();
            } else if path::is_within(&f.path, from) {
                let mut p = to.to_vec();
                p.extend_from_slice(&f.path[from.len()..]);
                f.path = p;
            }
        }
        Ok(Flow::Continue)
    }

    fn link(&mut self, path: &[u8], target: &[u8]) -> R<Flow> {
        let cur = self.cur()?;
        let (np, nname) = path::split(path);
        let (tp, tname) = path::split(target);
        let (tdir, ndir) = cur.res.dirs2(tp, np).map_err(CmdError::os(RESOLVE))?;
        // No AT_SYMLINK_FOLLOW: a symlink target is linked, not followed.
        linkat(
            Some(tdir),
            tname,
            Some(ndir),
            nname,
            nix::fcntl::AtFlags::empty(),
        )
        .map_err(CmdError::os("link"))?;
        Ok(Flow::Continue)
    }

    fn unlink(&mut self, path: &[u8], dir: bool) -> R<Flow> {
        let cur = self.cur()?;
        if cur.is_open(path) {
            cur.retire();
        }
        let (d, name) = cur.res.parent(path).map_err(CmdError::os(RESOLVE))?;
        let (flag, op) = if dir {
            (UnlinkatFlags::RemoveDir, "rmdir")
        } else {
            (UnlinkatFlags::NoRemoveDir, "unlink")
        };
        unlinkat(Some(d.as_raw_fd()), name, flag).map_err(CmdError::os(op))?;
        if dir {
            cur.res.forget(path);
        }
        Ok(Flow::Continue)
    }

    // --- metadata ---------------------------------------------------------

    fn chown(&mut self, path: &[u8], uid: u64, gid: u64) -> R<Flow> {
        let uid = u32::try_from(uid).map_err(|_| CmdError::OutOfRange("uid"))?;
        let gid = u32::try_from(gid).map_err(|_| CmdError::OutOfRange("gid"))?;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let caps = match &cur.caps {
            Some((p, v)) if p == path => Some(v.clone()),
            _ => None,
        };
        let same = matches!(&cur.file, Some(f) if f.path == path && f.owner == Some((uid, gid)));
        if same {
            // A file this receive created, already owned so: chown would
            // change nothing (no set-id bits or capabilities yet).
            self.stats.chowns_skipped += 1;
        } else {
            match target(cur, &self.dest, path)? {
                Target::File(f) => fchown(
                    f.as_raw_fd(),
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                ),
                Target::At(at) => at.chown(uid, gid),
            }
            .map_err(CmdError::os("chown"))?;
            if let Some(f) = cur.file.as_mut().filter(|f| f.path == path) {
                f.owner = Some((uid, gid));
            }
        }
        if let Some(v) = caps {
            // chown drops file capabilities; btrfs-progs sets them again.
            self.cur()?.caps = None;
            self.xattr_op(path, b"security.capability", Some(&v))?;
        }
        Ok(Flow::Continue)
    }

    fn chmod(&mut self, path: &[u8], mode: u64) -> R<Flow> {
        let mode = (mode & 0o7777) as u32;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        match target(cur, &self.dest, path)? {
            Target::File(f) => {
                fchmod(f.as_raw_fd(), Mode::from_bits_retain(mode)).map_err(CmdError::os("chmod"))
            }
            Target::At(at) => match at.chmod(mode) {
                Err(Errno::EOPNOTSUPP) => match at.stat() {
                    Ok(st) if is_kind(st.st_mode, libc::S_IFLNK) => Err(CmdError::Symlink),
                    _ => Err(CmdError::Os {
                        op: "chmod",
                        errno: Errno::EOPNOTSUPP,
                    }),
                },
                r => r.map_err(CmdError::os("chmod")),
            },
        }?;
        Ok(Flow::Continue)
    }

    fn utimes(&mut self, pos: Position, path: &[u8], atime: Timespec, mtime: Timespec) -> R<Flow> {
        meta::timespec(atime).map_err(CmdError::os("utimes"))?;
        meta::timespec(mtime).map_err(CmdError::os("utimes"))?;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        if !cur.is_open(path) && cur.res.is_cached_dir(path) {
            // The kernel sends a directory's times again after each change
            // to its entries; only the last ones matter.
            if cur.dir_times.len() >= MAX_DIR_TIMES {
                self.flush_dir_times(|_| true).map_err(|e| e.kind())?;
            }
            let cur = self.cur()?;
            cur.dir_times.insert(path.to_vec(), (atime, mtime, pos));
            self.stats.dir_utimes_deferred += 1;
            return Ok(Flow::Continue);
        }
        match target(cur, &self.dest, path)? {
            Target::File(f) => {
                let a = meta::timespec(atime).map_err(CmdError::os("utimes"))?;
                let m = meta::timespec(mtime).map_err(CmdError::os("utimes"))?;
                futimens(f.as_raw_fd(), &a, &m)
            }
            Target::At(at) => at.utimes(atime, mtime),
        }
        .map_err(CmdError::os("utimes"))?;
        Ok(Flow::Continue)
    }

    fn check_xattr(path: &[u8], name: &[u8]) -> R<()> {
        if name.is_empty() || name.contains(&0) {
            return Err(CmdError::BadXattrName);
        }
        if path.is_empty() && name.starts_with(XATTR_RESERVED_PREFIX) {
            return Err(CmdError::ReservedXattr(escape(name)));
        }
        Ok(())
    }

    fn set_xattr(&mut self, path: &[u8], name: &[u8], data: &[u8]) -> R<Flow> {
        Self::check_xattr(path, name)?;
        if name == b"security.capability" {
            self.cur()?.caps = Some((path.to_vec(), data.to_vec()));
        }
        self.xattr_op(path, name, Some(data))?;
        Ok(Flow::Continue)
    }

    fn remove_xattr(&mut self, path: &[u8], name: &[u8]) -> R<Flow> {
        Self::check_xattr(path, name)?;
        self.xattr_op(path, name, None)?;
        Ok(Flow::Continue)
    }

    fn xattr_op(&mut self, path: &[u8], name: &[u8], value: Option<&[u8]>) -> R<()> {
        use std::os::unix::ffi::OsStrExt;
        use xattr::FileExt;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        if name == b"system.posix_acl_default" {
            cur.res.forget_acl(path);
        }
        let os = std::ffi::OsStr::from_bytes(name);
        let res = match target(cur, &self.dest, path)? {
            Target::File(f) => match value {
                Some(v) => f.set_xattr(os, v),
                None => f.remove_xattr(os),
            },
            Target::At(at) => {
                let h = at.handle().map_err(CmdError::os("open"))?;
                match value {
                    Some(v) => h.set_xattr(name, v),
                    None => h.remove_xattr(name),
                }
            }
        };
        let op = if value.is_some() {
            "set xattr"
        } else {
            "remove xattr"
        };
        match res {
            Ok(()) => Ok(()),
            Err(e) if value.is_none() && meta::errno(&e) == Some(Errno::ENODATA) => {
                self.log.note(format_args!(
                    "xattr {} of '{}' was already gone",
                    escape(name),
                    escape(path)
                ));
                Ok(())
            }
            Err(e) if meta::errno(&e) == Some(Errno::EOPNOTSUPP) => {
                self.stats.skipped += 1;
                self.log.note(format_args!(
                    "xattr {} of '{}' not supported by this filesystem; skipped",
                    escape(name),
                    escape(path)
                ));
                Ok(())
            }
            Err(e) => Err(CmdError::io(op)(e)),
        }
    }

    // --- data -------------------------------------------------------------

    fn write(&mut self, path: &[u8], offset: u64, data: &[u8]) -> R<Flow> {
        to_i64(offset.saturating_add(data.len() as u64), "offset")?;
        let f = self.cur()?.file(path)?;
        f.file
            .write_all_at(data, offset)
            .map_err(CmdError::io("write"))?;
        let end = offset + data.len() as u64;
        f.size = f.size.map(|s| s.max(end));
        self.stats.bytes_written += data.len() as u64;
        Ok(Flow::Continue)
    }

    fn truncate(&mut self, path: &[u8], size: u64) -> R<Flow> {
        let size_i = to_i64(size, "size")?;
        let f = self.cur()?.file(path)?;
        let now = match f.size {
            Some(s) => s,
            None => f.file.metadata().map_err(CmdError::io("stat"))?.len(),
        };
        if now == size {
            self.stats.truncates_skipped += 1;
            return Ok(Flow::Continue);
        }
        nix::unistd::ftruncate(&f.file, size_i).map_err(CmdError::os("truncate"))?;
        f.size = Some(size);
        Ok(Flow::Continue)
    }

    fn clone_range(
        &mut self,
        path: &[u8],
        offset: u64,
        len: u64,
        clone_uuid: Uuid,
        clone_path: &[u8],
        clone_offset: u64,
    ) -> R<Flow> {
        to_i64(offset.saturating_add(len), "offset")?;
        to_i64(clone_offset.saturating_add(len), "clone offset")?;
        let force = self.opts.force;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let own = clone_uuid == cur.state.received_uuid;
        if !own && !cur.sources.contains_key(&clone_uuid) {
            let known = self
                .dest
                .find(clone_uuid)
                .map_err(CmdError::io("look up clone source"))?
                .ok_or(CmdError::CloneSourceNotFound(clone_uuid))?;
            if !known.complete && !force {
                return Err(CmdError::CloneSourceIncomplete {
                    name: escape(&known.name),
                    uuid: clone_uuid,
                });
            }
            if known.name == cur.name {
                return Err(CmdError::CloneSourceNotFound(clone_uuid));
            }
            let root = self
                .dest
                .open_subvol(&known.name)
                .map_err(CmdError::os("open clone source subvolume"))?;
            cur.sources.insert(clone_uuid, Resolver::new(root));
        }
        let same_file = own && clone_path == path;
        let src = if same_file {
            None
        } else {
            let res = if own {
                &mut cur.res
            } else {
                cur.sources
                    .get_mut(&clone_uuid)
                    .ok_or(CmdError::CloneSourceNotFound(clone_uuid))?
            };
            Some(open_regular(res, clone_path, OFlag::O_RDONLY)?)
        };
        let mut how = cur.copy;
        let f = cur.file(path)?;
        let src_file = src.as_ref().unwrap_or(&f.file);
        if len > 0 {
            copy::copy_range(&f.file, offset, src_file, clone_offset, len, &mut how)
                .map_err(CmdError::io("clone"))?;
        }
        // A clone past the source's end copies less than asked: ask later.
        f.size = None;
        cur.copy = how;
        self.stats.bytes_cloned += len;
        Ok(Flow::Continue)
    }

    fn encoded_write(&mut self, path: &[u8], offset: u64, w: ioctl::EncodedWrite<'_>) -> R<Flow> {
        if w.encryption != 0 {
            return Err(CmdError::Encryption(w.encryption));
        }
        to_i64(offset.saturating_add(w.len), "offset")?;
        let try_ioctl = self.dest.kind() == Kind::Btrfs && !self.opts.force_decompress;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let f = cur.file(path)?;
        if try_ioctl {
            match ioctl::encoded_write(f.file.as_fd(), &w) {
                Ok(()) => {
                    f.size = f.size.map(|s| s.max(offset + w.len));
                    self.stats.bytes_written += w.len;
                    self.stats.encoded_ioctl += 1;
                    return Ok(Flow::Continue);
                }
                Err(e) if dest::encoded_write_unsupported(e) => {}
                Err(e) => {
                    return Err(CmdError::Os {
                        op: "encoded write",
                        errno: e,
                    })
                }
            }
        }
        if w.unencoded_len > MAX_UNENCODED {
            return Err(CmdError::BadEncoded("unencoded length too large"));
        }
        let end = w
            .unencoded_offset
            .checked_add(w.len)
            .filter(|&e| e <= w.unencoded_len)
            .ok_or(CmdError::BadEncoded("file range beyond the unencoded data"))?;
        let buf = &mut cur.scratch;
        decompress::decode(w.compression, w.data, w.unencoded_len as usize, buf)?;
        buf.resize(w.unencoded_len as usize, 0);
        let piece = &buf[w.unencoded_offset as usize..end as usize];
        let f = cur.file.as_mut().ok_or(CmdError::NotRegular)?;
        f.file
            .write_all_at(piece, offset)
            .map_err(CmdError::io("write"))?;
        f.size = f.size.map(|s| s.max(offset + w.len));
        self.stats.bytes_written += w.len;
        self.stats.encoded_decoded += 1;
        if buf.capacity() > (1 << 20) {
            *buf = Vec::new();
        }
        Ok(Flow::Continue)
    }

    fn fallocate(&mut self, path: &[u8], mode: u32, offset: u64, len: u64) -> R<Flow> {
        let keep = FallocateFlags::FALLOC_FL_KEEP_SIZE.bits() as u32;
        let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE.bits() as u32;
        let zero = FallocateFlags::FALLOC_FL_ZERO_RANGE.bits() as u32;
        if mode & !(keep | punch | zero) != 0
            || (mode & punch != 0 && mode & keep == 0)
            || (mode & punch != 0 && mode & zero != 0)
        {
            return Err(CmdError::BadFallocateMode(mode));
        }
        let off = to_i64(offset, "offset")?;
        let l = to_i64(len, "length")?;
        to_i64(offset.saturating_add(len), "offset")?;
        let f = self.cur.as_mut().ok_or(CmdError::NoSubvol)?.file(path)?;
        let flags = FallocateFlags::from_bits_truncate(mode as i32);
        match nix::fcntl::fallocate(f.file.as_raw_fd(), flags, off, l) {
            Ok(()) => {}
            Err(Errno::EOPNOTSUPP) if mode & (punch | zero) != 0 => {
                // No hole punching here: write zeros over what exists.
                let size = f.file.metadata().map_err(CmdError::io("stat"))?.len();
                let end = if mode & keep != 0 {
                    (offset + len).min(size)
                } else {
                    offset + len
                };
                let zeros = vec![0u8; (end.saturating_sub(offset)).min(1 << 20) as usize];
                let mut at = offset;
                while at < end {
                    let n = ((end - at) as usize).min(zeros.len());
                    f.file
                        .write_all_at(&zeros[..n], at)
                        .map_err(CmdError::io("write zeros"))?;
                    at += n as u64;
                }
                self.log.note(format_args!(
                    "fallocate mode {mode:#x} not supported; wrote zeros to '{}'",
                    escape(path)
                ));
            }
            Err(Errno::EOPNOTSUPP) => {
                self.stats.skipped += 1;
                self.log.note(format_args!(
                    "fallocate mode {mode:#x} not supported by this filesystem; skipped for '{}'",
                    escape(path)
                ));
            }
            Err(e) => {
                return Err(CmdError::Os {
                    op: "fallocate",
                    errno: e,
                })
            }
        }
        if mode & keep == 0 {
            f.size = None;
        }
        Ok(Flow::Continue)
    }

    /// A real descriptor on a regular file or directory (never a device).
    fn open_for_ioctl(&mut self, path: &[u8]) -> R<File> {
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let (dir, name): (BorrowedFd<'_>, &[u8]) = if path.is_empty() {
            (self.dest.fd(), &cur.name)
        } else {
            cur.res.parent(path).map_err(CmdError::os(RESOLVE))?
        };
        let at = At { dir, name };
        let st = at.stat().map_err(CmdError::os("stat"))?;
        let extra = if is_kind(st.st_mode, libc::S_IFDIR) {
            OFlag::O_DIRECTORY
        } else if is_kind(st.st_mode, libc::S_IFREG) {
            OFlag::empty()
        } else if is_kind(st.st_mode, libc::S_IFLNK) {
            return Err(CmdError::Symlink);
        } else {
            return Err(CmdError::NotRegular);
        };
        let f = copy::open_noatime(dir, name, extra | OFlag::O_NONBLOCK)
            .map_err(CmdError::os("open"))?;
        let st2 = fstat(f.as_raw_fd()).map_err(CmdError::os("stat"))?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(CmdError::Os {
                op: "open",
                errno: Errno::ESTALE,
            });
        }
        Ok(f)
    }

    fn fileattr(&mut self, path: &[u8], attr: u64) -> R<Flow> {
        self.cur()?;
        let want = map_inode_flags(attr);
        let f = self.open_for_ioctl(path)?;
        let now = match ioctl::get_inode_flags(f.as_fd()) {
            Ok(n) => n,
            Err(e) => {
                self.stats.skipped += 1;
                self.log.note(format_args!(
                    "fileattr {attr:#x} of '{}' not applied: {e}",
                    escape(path)
                ));
                return Ok(Flow::Continue);
            }
        };
        let early = (now & !managed_flags()) | (want & !LATE_FLAGS) | (now & LATE_FLAGS);
        if early != now {
            if let Err(e) = ioctl::set_inode_flags(f.as_fd(), early) {
                self.stats.skipped += 1;
                self.log.note(format_args!(
                    "fileattr {attr:#x} of '{}' not applied: {e}",
                    escape(path)
                ));
            }
        }
        let late = want & LATE_FLAGS;
        let cur = self.cur()?;
        if late != now & LATE_FLAGS || !cur.deferred.is_empty() {
            if cur.deferred.len() < MAX_DEFERRED {
                cur.deferred.push((f, late));
            } else {
                self.stats.skipped += 1;
                self.log.note(format_args!(
                    "too many immutable/append files; flags of '{}' not applied",
                    escape(path)
                ));
            }
        }
        Ok(Flow::Continue)
    }

    fn enable_verity(
        &mut self,
        path: &[u8],
        algorithm: u8,
        block_size: u32,
        salt: &[u8],
        sig: &[u8],
    ) -> R<Flow> {
        let cur = self.cur()?;
        // fs-verity needs every writable descriptor closed.
        cur.file = None;
        cur.closer.wait();
        let f = open_regular(&mut cur.res, path, OFlag::O_RDONLY)?;
        match ioctl::enable_verity(f.as_fd(), algorithm, block_size, salt, sig) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e @ (Errno::ENOTTY | Errno::EOPNOTSUPP)) => {
                self.stats.skipped += 1;
                self.log.note(format_args!(
                    "fs-verity not available here ({e}); not enabled on '{}'",
                    escape(path)
                ));
            }
            Err(e) => {
                return Err(CmdError::Os {
                    op: "enable verity",
                    errno: e,
                })
            }
        }
        Ok(Flow::Continue)
    }
}

impl Log {
    fn trace(&mut self, cmd: &Command<'_>, pos: Position) {
        use rdump::Sink;
        let mut t = rdump::TextDump::new(Vec::new());
        if t.command(cmd, pos).is_ok() {
            let _ = t.finish();
            let line = t.into_inner();
            let _ = std::io::stderr().write_all(&line);
        }
    }
}
