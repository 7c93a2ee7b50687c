//! How an engine tells how far it got: the [`Progress`] a send or a
//! verify reports to (the `rsend` binary draws it as a progress bar on a
//! terminal), and the [`totals`] a full send will reach.

use btrfs_disk::error::{Error, Result};
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{key_type, objectid, ExtentKind, FileExtentItem, InodeItem};
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::Key;

/// Where a send or a verify reports its progress: bytes of file data and
/// files done, against totals that may come later (from another thread).
/// Engines call it on the thread that runs them, once per batch of work,
/// and never print; what to show is the implementation's business.
pub trait Progress: Send + Sync {
    /// The work will cover `bytes` of file data in `files` files (see
    /// [`totals`]).
    fn set_totals(&self, bytes: u64, files: u64);
    /// `bytes` more of file data and `files` more files are done.
    fn advance(&self, bytes: u64, files: u64);
}

/// Progress told to no one: for callers that show none.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn set_totals(&self, _bytes: u64, _files: u64) {}
    fn advance(&self, _bytes: u64, _files: u64) {}
}

/// What a full send of `sv` will carry: (file data bytes, inodes), from its
/// INODE_ITEMs and EXTENT_DATA items alone.
pub fn totals(fs: &Filesystem, sv: &Subvolume) -> Result<(u64, u64)> {
    let tree = fs.fs_tree(sv);
    let sectorsize = fs.sectorsize() as u64;
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut cur: Option<(u64, u64)> = None; // (ino, size) of the current regular file
    let from = Key::new(objectid::FIRST_FREE, key_type::INODE_ITEM, 0);
    for item in tree.range(from, Key::MAX) {
        let item = item?;
        let k = item.key;
        match k.item_type {
            key_type::INODE_ITEM => {
                let ii = InodeItem::parse(item.data()).map_err(Error::bad_item(tree.id, k))?;
                cur = None;
                if ii.nlink() > 0 {
                    files += 1;
                    if ii.mode() & 0o170000 == 0o100000 {
                        cur = Some((k.objectid, ii.size()));
                    }
                }
            }
            key_type::EXTENT_DATA => {
                let Some((ino, size)) = cur.filter(|c| c.0 == k.objectid) else {
                    continue;
                };
                let _ = ino;
                let Ok(fe) = FileExtentItem::parse(item.data()) else {
                    continue;
                };
                let end = match fe.kind() {
                    ExtentKind::Prealloc => continue,
                    ExtentKind::Regular if fe.disk_bytenr() == 0 => continue,
                    ExtentKind::Regular => k.offset.saturating_add(fe.num_bytes()),
                    ExtentKind::Inline => k
                        .offset
                        .saturating_add(fe.ram_bytes())
                        .div_ceil(sectorsize)
                        .saturating_mul(sectorsize),
                };
                bytes += end.min(size).saturating_sub(k.offset);
            }
            _ => {}
        }
    }
    Ok((bytes, files))
}
