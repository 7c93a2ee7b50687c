//! What stops a send, as the caller is told: [`SendError`], and how a
//! subvolume read changed under the send ([`Change`]). send.c returns
//! errnos; these name the subvolume, inode and path instead.

use btrfs_disk::error::Error;
use btrfs_stream::WriteError;

use crate::snapshot_error::SnapshotError;

/// Everything that can stop a send.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Reading the filesystem failed before any inode was involved.
    #[error(transparent)]
    Read(#[from] Error),
    /// No subvolume matches what was asked for.
    #[error(
        "no subvolume {asked}; the filesystem has: {}",
        list_or_none(available)
    )]
    NoSubvolume {
        /// What was asked for (`at path X`, `id N`).
        asked: btrfs_disk::error::SubvolWanted,
        /// The subvolumes there are, as `path (id N[, read-only])`.
        available: Vec<String>,
    },
    /// The subvolume is writable; only read-only snapshots can be sent.
    #[error("subvolume {name} (id {id}) is not read-only; send needs a read-only snapshot (btrfs subvolume snapshot -r, or btrfs property set ro true)")]
    NotReadOnly {
        /// Its path.
        name: String,
        /// Its id.
        id: u64,
    },
    /// The subvolume is being deleted.
    #[error("subvolume {name} (id {id}) is being deleted")]
    Dead {
        /// Its path.
        name: String,
        /// Its id.
        id: u64,
    },
    /// The top level (subvolume 5) was asked for.
    #[error("the top level (subvolume 5) cannot be sent: it has no name to receive it as, and it is not a read-only snapshot; send a read-only snapshot of it (btrfs subvolume snapshot -r MNT MNT/snap) instead")]
    TopLevel,
    /// The subvolume has no ROOT_BACKREF (the top level), so SUBVOL has no name.
    #[error("subvolume id {id} has no name in a parent (the top level cannot be sent)")]
    Unnamed {
        /// Its id.
        id: u64,
    },
    /// The parent snapshot is not one the receiver can start from.
    #[error("parent {name} (id {id}) is not read-only; an incremental send needs a read-only parent snapshot")]
    ParentNotReadOnly {
        /// Its path.
        name: String,
        /// Its id.
        id: u64,
    },
    /// A clone source that could change under the send.
    #[error(
        "clone source {name} (id {id}) is not read-only; clone sources must be read-only snapshots"
    )]
    CloneSourceNotReadOnly {
        /// Its path.
        name: String,
        /// Its id.
        id: u64,
    },
    /// A parent chosen by `-c` that is not in this filesystem.
    #[error("no parent: {0}")]
    NoParent(String),
    /// A protocol version this build does not send.
    #[error("protocol version {0} is not supported (rsend sends versions 1 to 3; 0 means 2, the highest btrfs-progs receives without experimental features)")]
    Proto(u32),
    /// Compressed data asked for in a protocol that cannot carry it.
    #[error("--compressed-data needs protocol version 2 or later (asked for version {0}); use --proto 2")]
    CompressedNeedsV2(u32),
    /// Reading the subvolume failed, or its fs tree holds something a
    /// snapshot cannot (with the inode and its path in the stream so far:
    /// an orphan name until it is placed).
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// A command cannot be encoded (too large for the protocol version).
    #[error("{subvol}: {path}: cannot encode the command")]
    Encode {
        /// The subvolume, as `path (subvolume id)`.
        subvol: String,
        /// The path the command acts on.
        path: String,
        /// Why.
        #[source]
        source: WriteError,
    },
    /// A subvolume being read changed on disk during the send.
    #[error("{role}{name} (subvolume {id}) {change} during the send; the stream stops without END, so no receiver takes it as complete")]
    Changed {
        /// `""`, `"parent "` or `"clone source "`.
        role: &'static str,
        /// Its path.
        name: String,
        /// Its id.
        id: u64,
        /// What happened to it.
        change: Change,
        /// The read error it caused, if it caused one.
        #[source]
        cause: Option<Box<SendError>>,
    },
    /// Writing the stream failed.
    #[error("writing the stream")]
    Output(#[source] std::io::Error),
    /// A resumed send cannot go on from the point its token gives.
    #[error("cannot resume: {0}")]
    Resume(String),
    /// The walk thread died.
    #[error("{subvol}: the walk stopped unexpectedly")]
    Walk {
        /// The subvolume, as `path (subvolume id)`.
        subvol: String,
    },
}

/// How a read-only subvolume changed while it was being sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// It is gone, or it was unlinked.
    Deleted,
    /// It is being deleted (the kernel is freeing its tree).
    BeingDeleted,
    /// It is writable now.
    Writable,
    /// Its contents changed (it was made writable, changed, and made read-only again).
    Modified,
    /// Its tree moved to other blocks (a balance, or a snapshot taken of it).
    Moved,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Change::Deleted => "was deleted",
            Change::BeingDeleted => "was deleted (the kernel is freeing it)",
            Change::Writable => "was made writable",
            Change::Modified => "was changed (made writable, modified and made read-only again)",
            Change::Moved => {
                "moved to other blocks (relocated by a balance, or its root copied by a snapshot of it)"
            }
        })
    }
}

/// The subvolumes of a message: "no subvolumes", or the first 20 of
/// them and how many more there are.
pub fn list_or_none(v: &[String]) -> String {
    const SHOWN: usize = 20;
    match v.len() {
        0 => "no subvolumes".into(),
        n if n <= SHOWN => v.join(", "),
        n => format!(
            "{}, and {} more (rsend --list shows them all)",
            v[..SHOWN].join(", "),
            n - SHOWN
        ),
    }
}
