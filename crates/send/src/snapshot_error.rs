//! Why reading a snapshot failed, told where it happened: the subvolume,
//! and the inode and path being read. A send, `--changes` and `--verify`
//! all report their failed reads (and trees no snapshot can have) so.

use btrfs_disk::diff::DiffError;
use btrfs_disk::error::Error;
use btrfs_disk::lookup::LookupError;

/// A failed read of a snapshot, or what no snapshot can hold, with the
/// subvolume, inode and path it was at.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading failed while an inode was being read.
    #[error("{subvol}: inode {ino}{}", at(path))]
    Inode {
        /// The subvolume, as `path (subvolume id)`.
        subvol: String,
        /// The inode number.
        ino: u64,
        /// Its path (for a send, in the stream so far: an orphan name
        /// until it is placed).
        path: Option<String>,
        /// What the reader found.
        #[source]
        source: Error,
    },
    /// Reading failed outside any inode.
    #[error("{subvol}")]
    Subvol {
        /// The subvolume, as `path (subvolume id)`.
        subvol: String,
        /// What the reader found.
        #[source]
        source: Error,
    },
    /// The fs tree holds something a snapshot cannot.
    #[error("{subvol}: {}{reason}", inode_at(*ino, path))]
    Corrupt {
        /// The subvolume, as `path (subvolume id)`.
        subvol: String,
        /// The inode, when one was being read.
        ino: Option<u64>,
        /// Its path.
        path: Option<String>,
        /// What is wrong.
        reason: String,
    },
}

impl SnapshotError {
    /// The error for `fault` in the subvolume labelled `subvol`, at inode
    /// `ino` (if any) and `path`.
    pub(crate) fn new(
        subvol: String,
        ino: Option<u64>,
        path: Option<String>,
        fault: Fault,
    ) -> SnapshotError {
        match (fault, ino) {
            (Fault::Read(source), Some(ino)) => SnapshotError::Inode {
                subvol,
                ino,
                path,
                source,
            },
            (Fault::Read(source), None) => SnapshotError::Subvol { subvol, source },
            (Fault::Bad(reason), ino) => SnapshotError::Corrupt {
                subvol,
                ino,
                path,
                reason,
            },
        }
    }
}

/// What went wrong, before it is told where.
#[derive(Debug)]
pub(crate) enum Fault {
    /// Reading failed.
    Read(Error),
    /// The tree holds what no snapshot can.
    Bad(String),
}

impl From<Error> for Fault {
    fn from(e: Error) -> Fault {
        Fault::Read(e)
    }
}

/// A failed lookup is a failed read, reported as the reader reports it.
impl From<LookupError> for Fault {
    fn from(e: LookupError) -> Fault {
        Fault::Read(e.into())
    }
}

/// A tree compare's reads fail as reads do; a tree it cannot walk is one
/// no snapshot can have.
impl From<DiffError> for Fault {
    fn from(e: DiffError) -> Fault {
        match e {
            DiffError::Read(e) => Fault::Read(e),
            bad => Fault::Bad(bad.to_string()),
        }
    }
}

/// ` at PATH` (` (the subvolume root)` for an empty path), or nothing.
fn at(path: &Option<String>) -> String {
    match path {
        Some(p) if !p.is_empty() => format!(" at {p}"),
        Some(_) => " (the subvolume root)".into(),
        None => String::new(),
    }
}

/// `inode N at PATH: ` when there is an inode, else nothing.
fn inode_at(ino: Option<u64>, path: &Option<String>) -> String {
    match ino {
        Some(i) => format!("inode {i}{}: ", at(path)),
        None => String::new(),
    }
}
