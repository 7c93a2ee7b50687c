//! Why a send walk stops early: the writer hung up, a read failed, the trees
//! are not what snapshots can look like, or a snapshot changed on disk.

use super::sink::Hangup;
use btrfs_disk::diff::DiffError;
use btrfs_disk::error::Error;
use btrfs_disk::lookup::LookupError;

/// Why the walk stopped.
pub(crate) enum Stop {
    /// The writer is gone.
    Hangup,
    /// Reading failed.
    Read(Error),
    /// The trees are not what snapshots can look like.
    Bad(String),
    /// A subvolume read changed on disk.
    Changed(Box<super::error::SendError>),
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

/// A tree compare that cannot go on: its reads fail as reads do, and a
/// tree it cannot walk is one snapshots cannot have.
impl From<DiffError> for Stop {
    fn from(e: DiffError) -> Stop {
        match e {
            DiffError::Read(e) => Stop::Read(e),
            bad => Stop::Bad(bad.to_string()),
        }
    }
}

/// A failed lookup is a failed read, reported as the reader reports it.
impl From<LookupError> for Stop {
    fn from(e: LookupError) -> Stop {
        Stop::Read(e.into())
    }
}

pub(crate) type Result<T> = std::result::Result<T, Stop>;
