//! Bookmarks: what an incremental send needs of a snapshot as its
//! parent, kept in a file, so that the snapshot itself may be deleted.
//!
//! A bookmark holds the snapshot's identity (uuids, transids, the
//! filesystem's fsid) and every block of its fs tree as read (inline
//! data included, no other file data), compressed, checked by a crc32c of the whole file
//! and the blocks' own checksums ([`format`]). [`write`] makes one of a
//! read-only snapshot, atomically; [`Bookmark::open`] reads one back as a
//! [`BlockSource`](btrfs_disk::BlockSource), so the send's tree compare
//! walks the parent's tree from the file as it would from the disk.
//!
//! Why a send against a bookmark is exact after the snapshot is gone and
//! its space reused: a tree block counts as shared only when address and
//! generation both match, and a block written at a reused address has a
//! newer generation; a data extent counts as unchanged or clonable only
//! when its file extent item matches byte for byte (the item holds the
//! extent's generation) or the extent is no newer than the snapshot, and
//! an extent allocated at a freed address is newer than the bookmark.
//!
//! Layer: above the on-disk reader, below [`crate::send`] and
//! [`crate::plan`], which take a bookmark as the parent.

mod error;
pub mod format;
mod frames;
mod read;
mod reuse;
mod write;

pub use error::BookmarkError;
pub use format::{Header, VERSION};
pub use read::Bookmark;
pub use reuse::Reuse;
pub use write::{write, Written};

use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;

/// The file name of the bookmark of a snapshot known to a receiver as
/// `uuid` (its received uuid, or its own), in a `--bookmarks` directory.
pub fn file_name(uuid: &uuid::Uuid) -> String {
    format!("{uuid}.bookmark")
}

/// The parent of an incremental send: a snapshot of the filesystem, or a
/// bookmark of one, whose tree is read from the bookmark (the snapshot
/// may be gone).
#[derive(Clone, Copy, Debug)]
pub enum Parent<'a> {
    /// A read-only snapshot of the filesystem sent from.
    Snapshot(&'a Subvolume),
    /// A bookmark of one (`--parent-bookmark`).
    Bookmark(&'a Bookmark),
}

impl<'a> Parent<'a> {
    /// The parent snapshot (as the bookmark recorded it, for a bookmark).
    pub fn subvolume(&self) -> &'a Subvolume {
        match self {
            Parent::Snapshot(s) => s,
            Parent::Bookmark(b) => b.subvolume(),
        }
    }

    /// Its fs tree: on the filesystem, or in the bookmark.
    pub fn tree(&self, fs: &'a Filesystem) -> btrfs_disk::Tree<'a> {
        match self {
            Parent::Snapshot(s) => fs.fs_tree(s),
            Parent::Bookmark(b) => b.tree(),
        }
    }

    /// For a bookmark: what may have been reused since it was written.
    pub fn reuse(&self, fs: &'a Filesystem) -> Option<Reuse<'a>> {
        match self {
            Parent::Snapshot(_) => None,
            Parent::Bookmark(b) => Some(Reuse::new(fs, b.header().fs_generation)),
        }
    }

    /// The snapshot, when it is one of the filesystem.
    pub fn on_disk(&self) -> Option<&'a Subvolume> {
        match self {
            Parent::Snapshot(s) => Some(s),
            Parent::Bookmark(_) => None,
        }
    }
}
