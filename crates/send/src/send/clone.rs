//! Where clone search plugs in.
//!
//! For every extent it is about to send, the walk asks a [`CloneSearch`]
//! whether the bytes can be reflinked from data the receiver already has
//! (the kernel's find_extent_clone). A [`CloneSource`] turns into a CLONE
//! command; `None` into WRITE commands. Either way the extent counts as
//! sent for truncate elision. [`NoClones`] answers `None` always: every
//! extent is written, which is what a stream without clone search looks
//! like.

use btrfs_disk::data::Inode;
use btrfs_disk::error::Result;
use btrfs_disk::items::FileExtentItem;

/// An extent about to be sent: inode, file range and the EXTENT_DATA item.
pub struct ExtentRef<'a, 'b> {
    /// The file's inode.
    pub inode: &'a Inode,
    /// Key offset of the EXTENT_DATA item (where the extent starts in the file).
    pub file_offset: u64,
    /// Bytes to send from `file_offset` (already clipped to i_size).
    pub len: u64,
    /// The item itself (disk_bytenr, offset, num_bytes, compression...).
    pub item: &'a FileExtentItem<'b>,
}

/// Data the receiver already has that a range can be cloned from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneSource {
    /// Subvolume (tree id) holding the source; the send root itself or a
    /// clone root the receiver has.
    pub root: u64,
    /// Source inode; when it is in the send root it has been sent already.
    pub ino: u64,
    /// Offset in the source file.
    pub offset: u64,
    /// Bytes to clone; the rest of the range is written.
    pub len: u64,
}

/// Finds clone sources for extents (the kernel's find_extent_clone).
pub trait CloneSearch: Send {
    /// A source for the start of `extent`, or `None` to write it.
    fn find(&mut self, extent: &ExtentRef<'_, '_>) -> Result<Option<CloneSource>>;
}

/// Never clones: every extent is written.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoClones;

impl CloneSearch for NoClones {
    fn find(&mut self, _extent: &ExtentRef<'_, '_>) -> Result<Option<CloneSource>> {
        Ok(None)
    }
}
