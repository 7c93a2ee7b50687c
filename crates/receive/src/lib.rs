//! Replaying btrfs send streams onto any filesystem, confined to the
//! destination: the engine of the `rreceive` tool, as a library.
//!
//! # Public API
//!
//! - [`receive`] reads a stream (several concatenated ones included) and
//!   applies each command beneath `DEST/<subvolume>`, as [`Options`] say;
//!   [`receive_with`] does the same, telling a [`Report`] its messages
//!   ([`Level`]), the commands it applies and its progress. It returns
//!   [`Stats`], or a [`Failure`] that holds the [`Error`] (a [`CmdError`]
//!   for a command, a [`PathError`] for a path refused) and what was left
//!   behind. A [`StopFlag`] set by signal handlers stops it cleanly, so
//!   that it can be resumed; [`interruptible`] reads a pipe so that the
//!   flag is seen while the sender is silent.
//! - [`Dest`] is a destination directory, on btrfs or not ([`Kind`];
//!   [`Snapshot`] says how snapshots are made off btrfs). Beside the
//!   receive it offers what a caller asks of a destination: the subvolumes
//!   received there ([`Dest::list`], each [`Listed`] with its
//!   [`SubvolState`]), the token that resumes a stopped receive
//!   ([`Dest::resume_token`], else [`NoToken`] says why) and the deletion
//!   of an incomplete one ([`Dest::delete_incomplete`], else
//!   [`NotDeleted`]).
//!
//! # Layers
//!
//! On btrfs a receive makes real subvolumes and snapshots, finished with
//! `received_uuid` and the read-only flag as `btrfs receive` does;
//! anywhere else directories, tree copies for snapshots, and the state kept
//! in an xattr or a state file. The crate's private modules, bottom first
//! (a module calls only those of lower layers; `tests/layers.rs` checks
//! it, and docs/internals.md says what each owns):
//!
//! 1. `ioctl` (all unsafe code), `stop`, `path::bytes`; `flags`, `meta`
//!    (one name in one directory), `xattr_limit`;
//! 2. `recovery`, a room: what a stopped, killed or cut receive leaves so
//!    that a later one resumes (journal, durable records, side files);
//! 3. `subvol` (the state of a received subvolume), then `path` (every
//!    path confined), `lock` (one writer per subvolume), `elsewhere`, then
//!    `error`;
//! 4. `decode`, `fake_super`, `report` (the way out to the caller), then
//!    `closer` (files finished on other threads) and `snapshot`, a room:
//!    how a snapshot is made (a btrfs snapshot, or off btrfs a copy, hard
//!    links or the parent changed in place) and guarded;
//! 5. `probe` (what DEST can do), `dest` (the destination), `options`;
//! 6. `apply`, the engine: each command through its steps, calling the
//!    rooms once around each; `run`, the receive from start to end.
//!
//! A stream is untrusted input: every path is checked and resolved beneath
//! the subvolume without following symlinks, parents and clone sources
//! must be subvolumes received in DEST, and a subvolume whose stream did
//! not reach its END is never used as either unless [`Options::force`] is
//! set.
//!
//! The engine never prints and holds no terminal code: the `rreceive`
//! binary (`src/bin/rreceive/`, behind the default feature `cli` with the
//! dependencies only it needs) parses the command line and implements
//! [`Report`] with a progress bar and messages on standard error. A
//! library user takes `default-features = false` and gets none of them.
//!
//! All `unsafe` code is in the private module `ioctl`, each block with a
//! `SAFETY:` comment; the lints below keep it there.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod apply;
mod closer;
mod decode;
mod dest;
mod elsewhere;
mod error;
mod fake_super;
mod flags;
#[allow(unsafe_code)]
mod ioctl;
mod lock;
mod meta;
mod options;
mod path;
mod probe;
mod recovery;
mod report;
mod run;
mod snapshot;
mod stop;
mod subvol;
mod xattr_limit;
pub use xattr_limit::{too_large as xattr_too_large, TooLarge as XattrTooLarge};

pub use dest::{Dest, Kind, Listed, NoToken, NotDeleted};
pub use error::{CmdError, Error};
pub use lock::{Busy, Holder};
pub use options::{Failure, Options, Stats, MAX_DIR_TIMES};
pub use path::PathError;
pub use recovery::Resumable;
pub use report::{Level, Report};
pub use run::{receive, receive_with};
pub use snapshot::Snapshot;
pub use stop::{interruptible, StopFlag};
pub use subvol::SubvolState;
