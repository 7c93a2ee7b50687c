//! What may have been freed and reused since a bookmark was written: the
//! proof that a file extent item equal to the bookmark's still names the
//! same data.
//!
//! A bookmark's item and the send snapshot's can be byte for byte equal
//! and name different data: a reflink copies an item's generation, and a
//! balance moves an extent to a new address, which may be one the
//! bookmarked snapshot used before it was deleted. An extent made at or
//! before the bookmark's generation has lived since then at its address,
//! so it is the one the bookmark names there; and an item in a leaf no
//! newer than the bookmark was in the tree then, naming a live extent.

use btrfs_disk::error::{Error, Result};
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{key_type, objectid, ExtentItem, ExtentKind, FileExtentItem};
use btrfs_disk::tree::Item;
use btrfs_disk::Key;

/// The extents of a filesystem as against a bookmark written at a generation.
#[derive(Clone, Copy)]
pub struct Reuse<'fs> {
    fs: &'fs Filesystem,
    /// The filesystem's generation when the bookmark was written.
    generation: u64,
}

impl<'fs> Reuse<'fs> {
    /// Against a bookmark written at `generation` of `fs`.
    pub fn new(fs: &'fs Filesystem, generation: u64) -> Reuse<'fs> {
        Reuse { fs, generation }
    }

    /// Whether the data extent at `bytenr` was made at the bookmark's
    /// generation or before (false when it has no extent item).
    pub fn extent_is_older(&self, bytenr: u64) -> Result<bool> {
        let Some(extents) = self.fs.extent_tree() else {
            return Ok(false);
        };
        let key = Key::new(bytenr, key_type::EXTENT_ITEM, 0);
        let mut cursor = extents.cursor();
        let Some(item) = cursor
            .seek_ge(&key)?
            .filter(|i| i.key.objectid == bytenr && i.key.item_type == key_type::EXTENT_ITEM)
        else {
            return Ok(false);
        };
        let ei = ExtentItem::parse(item.key.item_type, item.data())
            .map_err(Error::bad_item(objectid::EXTENT_TREE, item.key))?;
        Ok(ei.generation() <= self.generation)
    }

    /// Whether the file extent item `item` of the send snapshot, equal to
    /// the bookmark's, names the data the bookmark's names.
    pub fn same_extent(&self, item: &Item) -> Result<bool> {
        if item.leaf().generation() <= self.generation {
            return Ok(true);
        }
        let tree = item.leaf().owner();
        let fe = FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree, item.key))?;
        if fe.kind() == ExtentKind::Inline || fe.disk_bytenr() == 0 {
            return Ok(true);
        }
        self.extent_is_older(fe.disk_bytenr())
    }
}
