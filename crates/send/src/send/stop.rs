//! Why a send walk stops early: the writer hung up, a read failed, the trees
//! are not what snapshots can look like, or a snapshot changed on disk.

use super::sink::Hangup;
use btrfs_disk::diff::DiffError;
use btrfs_disk::error::Error;
use btrfs_disk::lookup::LookupError;

use crate::snapshot_error::Fault;

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

/// A read that failed, or a tree no snapshot can have, as the walk stops
/// for it.
impl From<Fault> for Stop {
    fn from(f: Fault) -> Stop {
        match f {
            Fault::Read(e) => Stop::Read(e),
            Fault::Bad(reason) => Stop::Bad(reason),
        }
    }
}

/// A tree compare that cannot go on (see [`Fault`]'s conversion).
impl From<DiffError> for Stop {
    fn from(e: DiffError) -> Stop {
        Fault::from(e).into()
    }
}

/// A failed lookup is a failed read (see [`Fault`]'s conversion).
impl From<LookupError> for Stop {
    fn from(e: LookupError) -> Stop {
        Fault::from(e).into()
    }
}

pub(crate) type Result<T> = std::result::Result<T, Stop>;
