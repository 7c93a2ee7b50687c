//! Errors, each naming the command (number, kind, byte offset) and path.

use std::path::PathBuf;

use btrfs_stream::{Attr, Command, CommandKind, FieldValue, PathRole, Position};
use btrfs_text::plain_io;
use nix::errno::Errno;
use std::ops::Not;

use uuid::Uuid;

use crate::path::{PathError, Refused};

/// Why a receive stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stream itself is malformed or cut short.
    #[error(transparent)]
    Stream(#[from] btrfs_stream::Error),
    /// One command could not be applied or was refused.
    #[error("{kind}: {path} (command #{command} {cmd} at byte {offset})")]
    Command {
        /// 1-based command number across concatenated streams.
        command: u64,
        /// Byte offset of the command header.
        offset: u64,
        /// Which command.
        cmd: CommandKind,
        /// The path(s) the command names, escaped.
        path: String,
        /// What went wrong.
        kind: CmdError,
    },
    /// DEST cannot be used.
    #[error("destination {}: {}", path.display(), plain_io(source))]
    Dest {
        /// DEST as given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Earlier command errors were reported and skipped (`-E`).
    #[error("{0} command(s) failed")]
    Failed(u64),
    /// A signal asked the receive to stop.
    #[error("stopped by {0} after command #{1}")]
    Interrupted(&'static str, u64),
    /// A command came corrupt (its CRC, or a length no command has) through
    /// a pipe or socket: damaged on the way, which a stream sent again
    /// (resumed) does not repeat.
    #[error(
        "{0}: corrupted in transit (read from a pipe; the same stream sent again does not have it)"
    )]
    Transit(btrfs_stream::Error),
    /// Another rreceive holds the subvolume (or the parent) this stream
    /// needs: nothing was changed, and a later try can succeed.
    #[error(transparent)]
    Busy(Box<crate::lock::Busy>),
    /// A stream read again to resume a subvolume (a stored stream file, or
    /// `--resume`) is not the one it was being received from, or ends
    /// before where that receive stopped: nothing was changed.
    #[error(
        "cannot resume subvolume {name} in {dest} from {input}: {why}; the subvolume is left as \
         it was (the stream it was being received from resumes it)"
    )]
    NotTheStream {
        /// The subvolume's name, escaped.
        name: String,
        /// DEST.
        dest: String,
        /// The stream file's name, or "standard input".
        input: String,
        /// What differs.
        why: String,
    },
}

impl Error {
    /// The error for `e`, met reading a stream that is a stored file
    /// (`stored`: a resume reads the same bytes again) or comes through a
    /// pipe or socket.
    pub(crate) fn from_stream(e: btrfs_stream::Error, stored: bool) -> Error {
        use btrfs_stream::ErrorKind as K;
        match e.kind {
            K::CrcMismatch { .. } | K::TooLarge { .. } if !stored => Error::Transit(e),
            _ => Error::Stream(e),
        }
    }
}

/// What went wrong with one command.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    /// A path in the command is not allowed.
    #[error("refused {which}: {err}")]
    Path {
        /// Which field: "path", "destination", "link target", ...
        which: &'static str,
        /// What is wrong with it.
        err: PathError,
    },
    /// Resolving or changing the file system failed.
    #[error("{op}: {errno}")]
    Os {
        /// The operation.
        op: &'static str,
        /// The error.
        errno: Errno,
    },
    /// Resolving or changing the file system failed.
    #[error("{op}: {err}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The error.
        err: std::io::Error,
    },
    /// Changing DEST itself failed.
    #[error("{op} in {dest}: {}", plain_io(err))]
    InDest {
        /// The operation.
        op: &'static str,
        /// DEST.
        dest: String,
        /// The error.
        err: std::io::Error,
    },
    /// A command that needs a subvolume came before SUBVOL or SNAPSHOT.
    #[error("no subvolume is being received (missing SUBVOL or SNAPSHOT)")]
    NoSubvol,
    /// A resumed stream that does not continue what DEST holds.
    #[error("cannot resume: {0}")]
    Resume(String),
    /// SUBVOL or SNAPSHOT of a subvolume DEST already has.
    #[error("{0}")]
    Exists(String),
    /// SUBVOL or SNAPSHOT before the END of the previous one.
    #[error("a new subvolume starts before the END of the previous one")]
    NestedSubvol,
    /// The parent of a snapshot is not in DEST (nor, on btrfs, beneath
    /// its mount root); the text says where it was looked for.
    #[error("parent subvolume {0} not found {1}")]
    ParentNotFound(Uuid, String),
    /// `--link` onto a filesystem that does not show hard links.
    #[error(
        "--link into {dest} ({fs}): it does not show hard links (each name has a link count \
         of 1), so a file still shared with parent {parent} could not be told from the new \
         snapshot's own and a change would reach the parent; receive with --in-place, or \
         without --link"
    )]
    LinkUnseen {
        /// DEST.
        dest: String,
        /// Its filesystem type.
        fs: String,
        /// The parent's name in DEST.
        parent: String,
    },
    /// The parent exists but its receive did not finish.
    #[error("parent subvolume {name} ({uuid}) is incomplete (its receive did not finish); --force uses it anyway")]
    ParentIncomplete {
        /// Its name in DEST.
        name: String,
        /// The uuid the stream asked for.
        uuid: Uuid,
    },
    /// A clone source subvolume is not in DEST (nor, on btrfs, beneath
    /// its mount root); the text says where it was looked for.
    #[error("clone source subvolume {0} not found {1}")]
    CloneSourceNotFound(Uuid, String),
    /// A clone source exists but its receive did not finish.
    #[error("clone source subvolume {name} ({uuid}) is incomplete (its receive did not finish); --force uses it anyway")]
    CloneSourceIncomplete {
        /// Its name in DEST.
        name: String,
        /// The uuid the stream asked for.
        uuid: Uuid,
    },
    /// Applying a directory's held times early (rreceive holds only so
    /// many at once) failed.
    #[error("setting the times of directory '{path}' from command {command}: {err}")]
    DirTimes {
        /// The directory.
        path: String,
        /// The command the times came from.
        command: u64,
        /// What failed.
        err: Box<CmdError>,
    },
    /// Data commands work on regular files only.
    #[error("not a regular file")]
    NotRegular,
    /// The final component is a symlink and the operation would follow it.
    #[error("refusing to follow a symlink")]
    Symlink,
    /// An xattr name rreceive keeps for itself (`user.rreceive.*`, on
    /// every inode).
    #[error("refused xattr {0}: reserved by rreceive")]
    ReservedXattr(String),
    /// EPERM from an operation only root may do, as an ordinary user.
    #[error(
        "{what} needs root ({op}: EPERM as uid {euid}); --fake-super records owners, \
         set-id modes and device nodes in the xattr user.rreceive.stat instead"
    )]
    NeedsRoot {
        /// What was tried: "changing the owner to 0:0", ...
        what: String,
        /// The system call.
        op: &'static str,
        /// The effective uid.
        euid: u32,
    },
    /// `--fake-super` on a filesystem without user xattrs.
    #[error(
        "--fake-super keeps owners and modes in the xattr user.rreceive.stat, and this \
         filesystem does not support user xattrs ({op}: {errno})"
    )]
    NoUserXattrs {
        /// The operation.
        op: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// A `user.rreceive.stat` value that is not one rreceive writes.
    #[error("xattr user.rreceive.stat holds '{0}', which is not a mode, device and owner")]
    BadFakeStat(String),
    /// An empty or NUL-holding xattr name.
    #[error("invalid xattr name")]
    BadXattrName,
    /// A number outside what the operation takes.
    #[error("{0} out of range")]
    OutOfRange(&'static str),
    /// MKNOD with a mode that is not a device, fifo, socket or file.
    #[error("invalid file type in mode {0:#o}")]
    BadMode(u64),
    /// FALLOCATE with flags other than keep-size, punch-hole, zero-range.
    #[error("unsupported fallocate mode {0:#x}")]
    BadFallocateMode(u32),
    /// Encrypted ENCODED_WRITE.
    #[error("unsupported encryption {0}")]
    Encryption(u32),
    /// ENCODED_WRITE lengths that do not fit together.
    #[error("invalid encoded write: {0}")]
    BadEncoded(&'static str),
    /// ENCODED_WRITE data that does not decode.
    #[error(transparent)]
    Decode(#[from] btrfs_compress::Error),
    /// Another rreceive holds the subvolume (or parent) named (becomes
    /// [`Error::Busy`]).
    #[error(transparent)]
    Busy(Box<crate::lock::Busy>),
}

/// Errors a later try may not meet: the destination full, out of memory,
/// an I/O error, a busy or read-only filesystem.
const TRANSIENT: [Errno; 14] = [
    // A FUSE server gone (an sshfs connection dropped) or one that lost
    // an open file's state (GlusterFS's client, now and then).
    Errno::ENOTCONN,
    Errno::EBADFD,
    Errno::ENOSPC,
    Errno::EDQUOT,
    Errno::EIO,
    Errno::ENOMEM,
    Errno::EAGAIN,
    Errno::EINTR,
    Errno::ENFILE,
    Errno::EMFILE,
    Errno::ETIMEDOUT,
    Errno::EBUSY,
    Errno::ETXTBSY,
    Errno::EROFS,
];

impl Error {
    /// Why resuming after this error would only meet it again (a refused
    /// path, a file the stream needs that is not there, a malformed
    /// stream, a parent that is not the stream's); `None` when a later try
    /// can succeed (a full disk, a cut connection, a signal, EIO).
    pub fn permanent(&self) -> Option<String> {
        use btrfs_stream::ErrorKind as K;
        match self {
            Error::Stream(e) => match &e.kind {
                K::Io(_)
                | K::Empty
                | K::TruncatedStreamHeader { .. }
                | K::MissingEnd
                | K::TruncatedCommandHeader { .. }
                | K::TruncatedCommand { .. }
                | K::Failed => None,
                K::CrcMismatch { .. } => Some(format!(
                    "the stream file is corrupt ({e}), and a resume would read it again"
                )),
                _ => Some(format!("the stream is malformed ({e})")),
            },
            Error::Interrupted(..) | Error::Transit(_) | Error::Busy(_) => None,
            Error::NotTheStream { .. } => Some(self.to_string()),
            Error::Failed(n) => Some(format!("{n} command(s) failed")),
            Error::Dest { .. } => Some(self.to_string()),
            Error::Command {
                kind, command, cmd, ..
            } => kind
                .transient()
                .not()
                .then(|| format!("command #{command} {cmd} failed: {kind}")),
        }
    }
}

impl From<Refused> for CmdError {
    fn from(Refused { which, err }: Refused) -> CmdError {
        CmdError::Path { which, err }
    }
}

impl CmdError {
    /// Whether a later try of the command may succeed (see
    /// [`Error::permanent`]).
    pub fn transient(&self) -> bool {
        match self {
            CmdError::Os { errno, .. } => TRANSIENT.contains(errno),
            CmdError::Io { err, .. } | CmdError::InDest { err, .. } => {
                matches!(
                    err.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) || err
                    .raw_os_error()
                    .is_some_and(|n| TRANSIENT.contains(&Errno::from_raw(n)))
            }
            CmdError::DirTimes { err, .. } => err.transient(),
            CmdError::Busy(_) => true,
            _ => false,
        }
    }
}

impl Error {
    /// The command-level error inside, or this error as an I/O error.
    pub(crate) fn kind(self) -> CmdError {
        match self {
            Error::Command { kind, .. } => kind,
            e => CmdError::Io {
                op: "apply",
                err: std::io::Error::other(e.to_string()),
            },
        }
    }
}

impl CmdError {
    /// An OS error during `op`.
    pub(crate) fn os(op: &'static str) -> impl FnOnce(Errno) -> CmdError {
        move |errno| CmdError::Os { op, errno }
    }

    /// chown's error: EPERM as an ordinary user says that this needs root.
    pub(crate) fn chown(uid: u32, gid: u32) -> impl FnOnce(Errno) -> CmdError {
        move |errno| {
            CmdError::needs_root(errno, "chown", || {
                format!("changing the owner to {uid}:{gid}")
            })
        }
    }

    /// `op`'s error, or [`CmdError::NeedsRoot`] for EPERM as an ordinary
    /// user.
    pub(crate) fn needs_root(
        errno: Errno,
        op: &'static str,
        what: impl FnOnce() -> String,
    ) -> CmdError {
        let euid = nix::unistd::geteuid().as_raw();
        if errno == Errno::EPERM && euid != 0 {
            CmdError::NeedsRoot {
                what: what(),
                op,
                euid,
            }
        } else {
            CmdError::Os { op, errno }
        }
    }

    /// An I/O error during `op`.
    pub(crate) fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> CmdError {
        move |err| match err.raw_os_error() {
            Some(n) => CmdError::Os {
                op,
                errno: Errno::from_raw(n),
            },
            None => CmdError::Io { op, err },
        }
    }

    /// Attaches the command's identity (but to [`CmdError::Busy`], which
    /// is about no command's paths).
    pub(crate) fn at(self, cmd: &Command<'_>, pos: Position) -> Error {
        if let CmdError::Busy(b) = self {
            return Error::Busy(b);
        }
        Error::Command {
            command: pos.index,
            offset: pos.offset,
            cmd: cmd.kind(),
            path: describe(cmd),
            kind: self,
        }
    }
}

/// The error of command `cmd` at `pos` on `path`.
pub(crate) fn err_at(cmd: CommandKind, pos: Position, path: &[u8], kind: CmdError) -> Error {
    Error::Command {
        command: pos.index,
        offset: pos.offset,
        cmd,
        path: format!("'{}'", escape(path)),
        kind,
    }
}

/// Bytes as text with everything outside printable ASCII escaped.
pub(crate) fn escape(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}

fn quoted(b: &[u8]) -> String {
    format!("'{}'", escape(b))
}

/// The path(s) a command names, for messages: `'path'`, then its other
/// paths (`-> 'to'`, `(target 'contents')`, `(from 'source')`) and an
/// xattr's name (`(xattr 'name')`); `-` for a command without any. The
/// subvolume root (the empty path of a command changing an inode's own
/// metadata) is `'.'`.
pub(crate) fn describe(cmd: &Command<'_>) -> String {
    use std::fmt::Write;
    let mut head = String::new();
    let mut tail = String::new();
    let on_inode = matches!(
        cmd.kind(),
        CommandKind::Chown
            | CommandKind::Chmod
            | CommandKind::Utimes
            | CommandKind::SetXattr
            | CommandKind::RemoveXattr
            | CommandKind::Fileattr
    );
    for (role, p) in cmd.paths() {
        let _ = match role {
            PathRole::Path if p.is_empty() && on_inode => write!(head, "'.'"),
            PathRole::Path => write!(head, "{}", quoted(p)),
            PathRole::PathTo | PathRole::LinkTarget => write!(tail, " -> {}", quoted(p)),
            PathRole::SymlinkTarget => write!(tail, " (target {})", quoted(p)),
            PathRole::CloneSource => write!(tail, " (from {})", quoted(p)),
        };
    }
    cmd.for_each_field(|_, attr, value| {
        if let (Attr::XattrName, FieldValue::Bytes(name)) = (attr, value) {
            let _ = write!(tail, " (xattr {})", quoted(name));
        }
    });
    if head.is_empty() && tail.is_empty() {
        return "-".to_string();
    }
    head + &tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_names_every_path_of_a_command() {
        let t = btrfs_stream::Timespec::default();
        let cases: [(Command<'_>, &str); 10] = [
            (
                Command::Mkfile {
                    path: b"a/f",
                    ino: 257,
                },
                "'a/f'",
            ),
            (
                Command::Rename {
                    from: b"o257-5-0",
                    to: b"a/f",
                },
                "'o257-5-0' -> 'a/f'",
            ),
            (
                Command::Link {
                    path: b"h",
                    target: b"a/f",
                },
                "'h' -> 'a/f'",
            ),
            (
                Command::Symlink {
                    path: b"l",
                    ino: 258,
                    target: b"/etc",
                },
                "'l' (target '/etc')",
            ),
            (
                Command::Clone {
                    offset: 0,
                    len: 1,
                    path: b"f",
                    clone_uuid: Uuid::nil(),
                    clone_ctransid: 0,
                    clone_path: b"g",
                    clone_offset: 0,
                },
                "'f' (from 'g')",
            ),
            (
                Command::SetXattr {
                    path: b"f",
                    name: b"user.x",
                    data: b"v",
                },
                "'f' (xattr 'user.x')",
            ),
            (
                Command::RemoveXattr {
                    path: b"",
                    name: b"user.\xff",
                },
                "'.' (xattr 'user.\\xff')",
            ),
            // Only an inode's own metadata may name the root; elsewhere
            // the empty path is shown as it came (and refused).
            (Command::Mkfile { path: b"", ino: 1 }, "''"),
            (
                Command::Utimes {
                    path: b"d\n",
                    atime: t,
                    mtime: t,
                    ctime: t,
                    otime: None,
                },
                "'d\\n'",
            ),
            (Command::End {}, "-"),
        ];
        for (cmd, want) in cases {
            assert_eq!(describe(&cmd), want, "{}", cmd.kind());
        }
    }
}
