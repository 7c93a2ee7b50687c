//! The engine's state: the subvolume being received ([`Current`]), the
//! [`Receiver`] that holds it, and the small helpers every verb uses
//! (resolving a target, opening a regular file, naming an error's place).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use btrfs_stream::{CommandKind, Position};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, Mode};
use uuid::Uuid;

use crate::closer::Closer;
use crate::dest::Dest;
pub(super) use crate::error::err_at;
use crate::error::CmdError;
use crate::ioctl;
use crate::meta::At;
use crate::options::{Options, Stats};
use crate::path::Resolver;
use crate::report::Log;
use crate::snapshot::copy;
use crate::snapshot::Strategy;
use crate::subvol::SubvolState;

use super::dirtimes::DirTimes;
use super::held::Pending;
use crate::recovery::Recovery;

/// The operation named when a path does not resolve beneath the subvolume.
pub(super) const RESOLVE: &str = "resolve beneath the subvolume (no symlink is followed)";

/// What to do after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on.
    Continue,
    /// An END was applied.
    End,
}

/// The regular file kept open.
pub(super) struct OpenFile {
    pub(super) path: Vec<u8>,
    pub(super) file: File,
    /// Its size, when known without asking.
    pub(super) size: Option<u64>,
    /// Its owner, when this receive created it (a chown to the same owner
    /// is then a no-op and skipped).
    pub(super) owner: Option<(u32, u32)>,
}

/// The subvolume being received.
pub(crate) struct Current {
    /// Its name in DEST.
    pub(super) name: Vec<u8>,
    /// Its state as recorded (received uuid, parent, complete).
    pub(super) state: SubvolState,
    /// Paths beneath its root, resolved and confined.
    pub(super) res: Resolver,
    /// The regular file kept open.
    pub(super) file: Option<OpenFile>,
    /// Failed commands counted against it.
    pub(super) errors: u64,
    /// Creates held back, one folding its recipe and a batch.
    pub(super) held: Held,
    /// Work handed to other threads and not known done.
    pub(super) away: Away,
    /// What clones and writes read besides the stream.
    pub(super) data: Data,
    /// What is applied again or later: directory times, flags, a
    /// capability after a chown.
    pub(super) later: Later,
    /// How this tree was made from its parent's, and what a change must
    /// do first ([`crate::snapshot`]).
    pub(super) snap: Strategy,
    /// What recovery keeps of it: how far its stream is applied, what a
    /// stop would apply again, durable checkpoints (see [`crate::recovery`]).
    pub(super) recovery: Recovery,
    /// The locks of this subvolume and of the parent it copies, links or
    /// changes (see [`crate::lock`]), released when it is done with.
    pub(super) locks: Vec<crate::lock::Held>,
}

/// Creates held back ([`Pending`]): made together, grouped by directory
/// (see `batch`).
#[derive(Default)]
pub(super) struct Held {
    /// The create whose recipe is still folding in commands.
    pub(super) create: Option<Pending>,
    /// New files whose commands all came, not created yet.
    pub(super) batch: Vec<Pending>,
    /// The bytes of data the batch holds.
    pub(super) bytes: usize,
}

/// Work handed to other threads: new files to finish and close
/// ([`Closer`]), ENCODED_WRITEs to decode.
pub(super) struct Away {
    /// The closing thread.
    pub(super) closer: Arc<Closer>,
    /// ENCODED_WRITEs handed to the decoding threads, not waited for yet.
    pub(super) decoding: Option<crate::decode::Run>,
    /// New files handed to the closing thread and not known to be done:
    /// (job, path), oldest first, and the newest job of each path.
    pub(super) inflight: VecDeque<(u64, Vec<u8>)>,
    pub(super) inflight_paths: HashMap<Vec<u8>, u64>,
}

/// What data commands read besides the stream.
#[derive(Default)]
pub(super) struct Data {
    /// Other subvolumes opened as clone sources.
    pub(super) sources: HashMap<Uuid, Resolver>,
    /// A buffer for copies.
    pub(super) scratch: Vec<u8>,
}

/// What is applied again or later.
pub(super) struct Later {
    /// The times directories must end with, applied at END.
    pub(super) dir_times: DirTimes,
    /// Descriptors whose immutable/append flags wait for END.
    pub(super) deferred: Vec<(File, u32)>,
    /// The last security.capability set, to set again after a chown.
    pub(super) caps: Option<(Vec<u8>, Vec<u8>)>,
}

/// Applies commands to a destination.
pub(crate) struct Receiver<'o> {
    pub(super) opts: &'o Options,
    pub(super) dest: Dest,
    pub(super) cur: Option<Current>,
    /// Messages.
    pub log: Log<'o>,
    /// Counters.
    pub stats: Stats,
    /// What was skipped ([`Stats::skipped`]), by kind.
    pub skipped: crate::report::Skipped,
    /// Failed commands already reported while applying a later one.
    pub extra_errors: u64,
    pub(super) closer: Arc<Closer>,
    /// Effective uid and gid: the owner new files get.
    pub(super) me: (u32, u32),
    /// How owners and modes are given (`--fake-super`), decided once.
    pub(super) owners: crate::fake_super::Owners,
    /// The command being applied.
    pub(super) now: (CommandKind, Position),
    /// Whether the note that a parent is copied was given.
    pub(super) told_copy: bool,
    /// Whether the note that DEST has no file locks was given.
    pub(super) told_no_locks: bool,
    /// Whether what DEST can do was said ([`Receiver::say_dest`]).
    pub(super) told_dest: bool,
    /// The point a RESUME gave, for the SUBVOL or SNAPSHOT after it.
    pub(super) resume: Option<btrfs_stream::resume::Point>,
    /// The point after the SUBVOL or SNAPSHOT being applied, and its
    /// protocol version (see [`Receiver::start_journal`]).
    pub(super) first: Option<(btrfs_stream::resume::Point, u32)>,
    /// The lock of the subvolume the next SUBVOL or SNAPSHOT names, taken
    /// before anything looks at it ([`Receiver::lock_next`]).
    pub(super) next_lock: Option<(Vec<u8>, crate::lock::Held)>,
}

pub(super) type R<T> = Result<T, CmdError>;

pub(super) fn is_kind(mode: u32, kind: u32) -> bool {
    mode & libc::S_IFMT == kind
}

pub(super) fn to_i64(v: u64, what: &'static str) -> R<i64> {
    i64::try_from(v).map_err(|_| CmdError::OutOfRange(what))
}

impl Current {
    pub(super) fn new(
        name: &[u8],
        state: SubvolState,
        root: OwnedFd,
        closer: Arc<Closer>,
        max_dir_times: usize,
    ) -> Current {
        Current {
            name: name.to_vec(),
            state,
            res: Resolver::new(root),
            file: None,
            errors: 0,
            held: Held::default(),
            away: Away {
                closer,
                decoding: None,
                inflight: VecDeque::new(),
                inflight_paths: HashMap::new(),
            },
            data: Data::default(),
            later: Later {
                dir_times: DirTimes::new(max_dir_times),
                deferred: Vec::new(),
                caps: None,
            },
            snap: Strategy::default(),
            recovery: Recovery::default(),
            locks: Vec::new(),
        }
    }

    /// Closes the open file (on the closing thread).
    pub(super) fn retire(&mut self) {
        if let Some(f) = self.file.take() {
            self.away.closer.close(f.file);
        }
    }

    /// The open file for `path`, opening (and checking) it if needed.
    pub(super) fn file(&mut self, path: &[u8]) -> R<&mut OpenFile> {
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

    pub(super) fn is_open(&self, path: &[u8]) -> bool {
        matches!(&self.file, Some(f) if f.path == path)
    }
}

/// Opens regular file `path` beneath `res`: checks the type before opening
/// (a device must never be opened) and that the same inode was opened.
pub(super) fn open_regular(res: &mut Resolver, path: &[u8], flags: OFlag) -> R<File> {
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
        let fd = ioctl::openat(
            Some(dir.as_raw_fd()),
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(CmdError::os("open"))?;
        File::from(fd)
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
pub(super) enum Target<'a> {
    File(&'a File),
    At(At<'a>),
}

pub(super) fn target<'a>(cur: &'a mut Current, dest: &'a Dest, path: &'a [u8]) -> R<Target<'a>> {
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
