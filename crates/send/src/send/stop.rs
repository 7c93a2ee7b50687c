//! Why a send walk stops early: the writer hung up, a read failed, the trees
//! are not what snapshots can look like, or a snapshot changed on disk.

use super::sink::Hangup;
use btrfs_disk::error::Error;

/// Why the walk stopped.
pub(crate) enum Stop {
    /// The writer is gone.
    Hangup,
    /// Reading failed.
    Read(Error),
    /// The trees are not what snapshots can look like.
    Bad(String),
    /// A subvolume read changed on disk.
    Changed(Box<super::SendError>),
}

impl From<Hangup> for Stop {
    fn from(_: Hangup) -> Stop {
        Stop::Hangup
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Read(e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Stop>;
