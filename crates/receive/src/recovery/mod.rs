//! Recovery: everything a stopped, killed or cut receive leaves behind so
//! that a later one resumes it, and what a resumed receive reads back.
//!
//! - [`track`]: how far the stream is applied ([`Track`]), where a receive
//!   resumes ([`Resumable`]), and which commands a stop must apply again
//!   or a resumed receive must not ([`Redo`], [`RecipeMark`](track::RecipeMark));
//! - [`side`]: the side file a clean stop writes, and the refusal record;
//! - [`journal`]: the kill journal in `/dev/shm`;
//! - [`durable`]: durable checkpoints and the replay after a power loss;
//! - [`names`]: the `.rreceive-*` names of all of these in DEST.
//!
//! [`Recovery`] is the state the engine keeps of them for the subvolume
//! being received. The engine (`apply`) calls the room once before each
//! command and once after it (`Receiver::recovery_before`,
//! `Receiver::recovery_after` in `apply::recover`); the verbs that apply a
//! command only ask it whether what they make may be there already. A
//! destination (`dest`, `subvol`) asks it where a stopped receive can
//! resume ([`killed_point`], [`side::point`], [`side::refusal`]) and
//! removes its records ([`forget_journal`], [`names::record_files`]).
//!
//! Owns: every record on disk a resume reads, and their formats. May call:
//! `ioctl`, `flags` and `path::bytes` only: nothing of the engine, the
//! destination or the errors, which all sit above it.

pub(crate) mod durable;
pub(crate) mod journal;
pub(crate) mod names;
pub(crate) mod side;
pub(crate) mod track;

use std::os::fd::{AsRawFd, BorrowedFd};

use uuid::Uuid;

pub use track::Resumable;
use track::{Redo, Track};

/// What recovery keeps for the subvolume being received.
#[derive(Default)]
pub(crate) struct Recovery {
    /// How far its stream is applied.
    pub(crate) track: Track,
    /// Which applied commands a stop would have to apply again.
    pub(crate) redo: Redo,
    /// Durable checkpoints, so that a power loss resumes.
    pub(crate) durable: Option<durable::Durable>,
    /// After a power loss: the window read again.
    pub(crate) power: Option<durable::Power>,
    /// Resumed after a kill: the record that says so, until the first
    /// durable checkpoint.
    pub(crate) marker: Option<durable::Marker>,
    /// A resumed receive going over what the stopped one applied keeps its
    /// side file until that is done (a stop or kill then resumes the same).
    pub(crate) side_kept: bool,
}

/// What the engine does with a command, as recovery says before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Apply it.
    Apply,
    /// Not applied now: held in a window read again after a power loss, or
    /// applied already by the receive this one resumes (counted only).
    Skip,
}

impl Recovery {
    /// Recovery for a subvolume resumed at `track`.
    pub(crate) fn resumed(track: Track) -> Recovery {
        Recovery {
            track,
            ..Recovery::default()
        }
    }

    /// The count the next command gets in the subvolume's stream (1 =
    /// SUBVOL).
    pub(crate) fn next(&self) -> u64 {
        self.track.count + 1
    }

    /// Whether the next command may have been applied by a killed receive
    /// (then an entry it makes or removes may be there, or gone, already).
    pub(crate) fn next_maybe_done(&self) -> bool {
        self.redo.maybe_done(self.next())
    }
}

/// DEST's device and inode, which its journals are named by.
pub(crate) fn dest_id(dest: BorrowedFd<'_>) -> (u64, u64) {
    nix::sys::stat::fstat(dest.as_raw_fd()).map_or((0, 0), |st| (st.st_dev, st.st_ino))
}

/// Where the receive of `name` in `dest` (received as `uuid` at
/// `ctransid`), killed outright, can be resumed from its journal; or why
/// not (`Err`), or `Ok(None)` when it has none.
pub(crate) fn killed_point(
    dest: BorrowedFd<'_>,
    name: &[u8],
    uuid: Uuid,
    ctransid: u64,
) -> Result<Option<Resumable>, String> {
    let id = dest_id(dest);
    let mount = crate::ioctl::mount_id(dest).unwrap_or(0);
    let found = journal::find(id, name, uuid, ctransid, false, mount);
    if let Ok(Some((f, _))) = found {
        return Ok(Some(Resumable {
            version: f.version,
            point: f.point,
        }));
    }
    // A power loss (or the destination unmounted): its last durable
    // checkpoint, unless the receive was refused since.
    if side::refusal(dest, name).is_none() {
        if let Some(at) = durable::load(dest, name).and_then(|r| r.at) {
            return Ok(Some(at));
        }
    }
    found.map(|_| None)
}

/// Removes the journal of subvolume `name` in `dest` (see
/// [`Dest::delete_incomplete`](crate::Dest::delete_incomplete)).
pub(crate) fn forget_journal(dest: BorrowedFd<'_>, name: &[u8]) {
    journal::forget(dest_id(dest), name);
}
