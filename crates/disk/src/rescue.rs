//! What a rescue read lost: tree blocks no copy of which is valid, file
//! data no copy of which matches its checksum, and data read without a
//! checksum to check it against.
//!
//! A [`crate::Filesystem`] opened with [`crate::Options::rescue`] records
//! them in a [`Losses`] instead of failing: an unreadable tree block reads
//! as a block with no items (its siblings are still walked), unreadable
//! data reads as zeros.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use crate::key::Key;

/// A tree block that could not be read from any copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLoss {
    /// The tree it belongs to.
    pub tree: u64,
    /// Its logical address.
    pub logical: u64,
    /// The level its parent (or root item) says it has.
    pub level: u8,
    /// The generation its parent says it has.
    pub generation: u64,
    /// The lowest key under it, from its parent's pointer (none for a root).
    pub first_key: Option<Key>,
    /// How many copies were tried.
    pub mirrors: u32,
    /// Why each copy was refused.
    pub why: String,
}

/// What became of a range of file data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataFate {
    /// No copy matched its checksum (or none could be read): read as zeros.
    Zeroed,
    /// No checksum was found for it although its inode is checksummed: read
    /// as it is, unchecked.
    Unverified,
}

/// A range of one file's data that could not be read as it should.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataLoss {
    /// What was done instead.
    pub fate: DataFate,
    /// The fs tree (subvolume) the file is in.
    pub tree: u64,
    /// Its inode number.
    pub ino: u64,
    /// First file byte of the range.
    pub offset: u64,
    /// Length of the range in the file.
    pub len: u64,
    /// Logical address of the data (of the whole extent when compressed).
    pub logical: u64,
    /// Whether the range lies in a compressed extent (all of which is lost
    /// with any of its sectors).
    pub compressed: bool,
    /// How many copies were tried.
    pub mirrors: u32,
}

/// Why a reader's user left an inode out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InodeFault {
    /// Items of it were found but not its inode item.
    NoInodeItem,
    /// It has no name in a directory that could be reached from the
    /// subvolume's root (its references, or a directory above, were lost).
    NoName,
    /// Something it needs could not be read (a symlink's target).
    Unreadable(String),
}

/// An inode left out because items it needs were lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeLoss {
    /// The fs tree (subvolume).
    pub tree: u64,
    /// The inode number.
    pub ino: u64,
    /// Why it was left out.
    pub fault: InodeFault,
}

/// A name (hard link) of an inode that was not kept: the inode was left
/// out, or the directory holding the name cannot be reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameLoss {
    /// The fs tree (subvolume).
    pub tree: u64,
    /// The inode the name is of.
    pub ino: u64,
    /// The directory holding it.
    pub dir: u64,
    /// The name.
    pub name: Vec<u8>,
}

/// The log of what a rescue read lost, shared by every reader thread.
#[derive(Debug, Default)]
pub struct Losses {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    blocks: Vec<BlockLoss>,
    /// (tree, logical) of the blocks recorded.
    seen: HashSet<(u64, u64)>,
    data: Vec<DataLoss>,
    /// Logical ranges (start, end) whose data was zeroed.
    zeroed: Vec<(u64, u64)>,
    inodes: Vec<InodeLoss>,
    names: Vec<NameLoss>,
}

impl Losses {
    /// An empty log.
    pub fn new() -> Losses {
        Losses::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a lost tree block, once per tree and address (a block
    /// shared by snapshots is recorded for each tree read through it).
    pub(crate) fn add_block(&self, b: BlockLoss) {
        let mut s = self.lock();
        if s.seen.insert((b.tree, b.logical)) {
            s.blocks.push(b);
        }
    }

    /// Records lost data, merged with the last record when it continues it.
    pub(crate) fn add_data(&self, d: DataLoss) {
        let mut s = self.lock();
        if d.fate == DataFate::Zeroed {
            s.zeroed.push((d.logical, d.logical.saturating_add(d.len)));
        }
        if let Some(last) = s.data.last_mut() {
            let continues = last.fate == d.fate
                && last.tree == d.tree
                && last.ino == d.ino
                && !last.compressed
                && !d.compressed
                && last.offset.saturating_add(last.len) == d.offset
                && last.logical.saturating_add(last.len) == d.logical;
            if continues {
                last.len += d.len;
                return;
            }
        }
        if !s.data.contains(&d) {
            s.data.push(d);
        }
    }

    /// Records an inode left out, once.
    pub fn add_inode(&self, i: InodeLoss) {
        let mut s = self.lock();
        if !s.inodes.iter().any(|o| o.tree == i.tree && o.ino == i.ino) {
            s.inodes.push(i);
        }
    }

    /// Records a name not kept, once.
    pub fn add_name(&self, n: NameLoss) {
        let mut s = self.lock();
        if !s.names.contains(&n) {
            s.names.push(n);
        }
    }

    /// The inodes left out, by tree and inode number.
    pub fn inodes(&self) -> Vec<InodeLoss> {
        let mut v = self.lock().inodes.clone();
        v.sort_by_key(|i| (i.tree, i.ino));
        v
    }

    /// The names not kept, by tree, inode, directory and name.
    pub fn names(&self) -> Vec<NameLoss> {
        let mut v = self.lock().names.clone();
        v.sort_by(|a, b| (a.tree, a.ino, a.dir, &a.name).cmp(&(b.tree, b.ino, b.dir, &b.name)));
        v
    }

    /// The tree blocks lost, in the order they were met.
    pub fn blocks(&self) -> Vec<BlockLoss> {
        self.lock().blocks.clone()
    }

    /// The data lost, by tree, inode and offset, with touching ranges of
    /// the same kind merged.
    pub fn data(&self) -> Vec<DataLoss> {
        let mut v = self.lock().data.clone();
        v.sort_by_key(|d| (d.tree, d.ino, d.fate, d.offset));
        let mut out: Vec<DataLoss> = Vec::with_capacity(v.len());
        for d in v {
            if let Some(last) = out.last_mut() {
                let same = (last.tree, last.ino, last.fate) == (d.tree, d.ino, d.fate);
                if same && d.offset <= last.offset.saturating_add(last.len) {
                    let end = (d.offset + d.len).max(last.offset + last.len);
                    last.len = end - last.offset;
                    last.compressed |= d.compressed;
                    continue;
                }
            }
            out.push(d);
        }
        out
    }

    /// Whether any data in `[logical, logical + len)` was read as zeros.
    pub fn zeroed_in(&self, logical: u64, len: u64) -> bool {
        let end = logical.saturating_add(len);
        self.lock()
            .zeroed
            .iter()
            .any(|&(a, b)| a < end && logical < b)
    }

    /// Whether nothing was lost.
    pub fn is_empty(&self) -> bool {
        let s = self.lock();
        s.blocks.is_empty() && s.data.is_empty() && s.inodes.is_empty() && s.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed(ino: u64, offset: u64, len: u64, logical: u64) -> DataLoss {
        DataLoss {
            fate: DataFate::Zeroed,
            tree: 5,
            ino,
            offset,
            len,
            logical,
            compressed: false,
            mirrors: 1,
        }
    }

    #[test]
    fn touching_sectors_merge_and_blocks_count_once() {
        let l = Losses::new();
        assert!(l.is_empty());
        l.add_data(zeroed(257, 4096, 4096, 1 << 20));
        l.add_data(zeroed(257, 8192, 4096, (1 << 20) + 4096));
        l.add_data(zeroed(258, 0, 4096, 1 << 21));
        // Out of order, from another reader thread.
        l.add_data(zeroed(257, 0, 4096, (1 << 20) - 4096));
        let d = l.data();
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!((d[0].ino, d[0].offset, d[0].len), (257, 0, 12288));
        assert_eq!((d[1].ino, d[1].offset, d[1].len), (258, 0, 4096));
        assert!(l.zeroed_in((1 << 20) + 4000, 200));
        assert!(!l.zeroed_in(3 << 20, 4096));
        let b = BlockLoss {
            tree: 5,
            logical: 30 << 20,
            level: 0,
            generation: 9,
            first_key: None,
            mirrors: 1,
            why: "csum".into(),
        };
        l.add_block(b.clone());
        l.add_block(b);
        assert_eq!(l.blocks().len(), 1);
        assert!(!l.is_empty());
    }
}
