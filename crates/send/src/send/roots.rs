//! Lookups in one snapshot's fs tree, as the send walk asks them: inode
//! facts, first references, directory entries by name.
//!
//! The walk asks the same questions many times (the generation of a parent
//! directory, the first name of an inode on every path it builds), so the
//! answers are kept in small LRU caches. The trees are read-only, so an
//! answer never goes stale.

use std::num::NonZeroUsize;

use lru::LruCache;

use super::cmd::Bytes;
use btrfs_disk::csum::name_hash;
use btrfs_disk::error::{Error, Result};
use btrfs_disk::items::{
    dir_entries, inode_extrefs, inode_refs, key_type, InodeItem, ItemError, Part,
};
use btrfs_disk::tree::Item;
use btrfs_disk::{Key, Tree};

/// Inode facts kept per lookup.
const INODE_CACHE: usize = 8192;
/// First references kept per lookup.
const REF_CACHE: usize = 8192;

/// What the walk needs of an inode item (the kernel's btrfs_inode_info).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InodeInfo {
    pub(crate) gen: u64,
    pub(crate) size: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) rdev: u64,
    pub(crate) nlink: u32,
    pub(crate) flags: u64,
}

impl InodeInfo {
    pub(crate) fn from_inode(i: &btrfs_disk::data::Inode) -> InodeInfo {
        InodeInfo {
            gen: i.generation,
            size: i.size,
            mode: i.mode,
            uid: i.uid,
            gid: i.gid,
            rdev: i.rdev,
            nlink: i.nlink,
            flags: i.flags,
        }
    }

    pub(crate) fn from_item(ii: &InodeItem<'_>) -> InodeInfo {
        InodeInfo {
            gen: ii.generation(),
            size: ii.size(),
            mode: ii.mode(),
            uid: ii.uid(),
            gid: ii.gid(),
            rdev: ii.rdev(),
            nlink: ii.nlink(),
            flags: ii.flags(),
        }
    }
}

/// The first reference of an inode: its parent directory and name.
#[derive(Clone, Debug)]
pub(crate) struct FirstRef {
    pub(crate) dir: u64,
    pub(crate) name: Bytes,
}

/// A directory entry found by name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    /// What the entry points at (an inode, or a subvolume's ROOT_ITEM).
    pub(crate) location: Key,
}

/// Cached lookups in one fs tree.
pub(crate) struct Lookup<'fs> {
    pub(crate) tree: Tree<'fs>,
    inodes: LruCache<u64, Option<InodeInfo>>,
    first_refs: LruCache<u64, Option<FirstRef>>,
}

fn cap(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// The names in one INODE_REF or INODE_EXTREF item: (parent, name).
pub(crate) fn item_refs(tree: u64, item: &Item) -> Result<Vec<(u64, Bytes)>> {
    let key = item.key;
    let refs = if key.item_type == key_type::INODE_REF {
        inode_refs(key.offset, item.data()).map_err(Error::bad_item(tree, key))?
    } else {
        inode_extrefs(item.data()).map_err(Error::bad_item(tree, key))?
    };
    Ok(refs
        .into_iter()
        .map(|r| (r.parent, Bytes::from(r.name)))
        .collect())
}

impl<'fs> Lookup<'fs> {
    pub(crate) fn new(tree: Tree<'fs>) -> Lookup<'fs> {
        Lookup {
            tree,
            inodes: LruCache::new(cap(INODE_CACHE)),
            first_refs: LruCache::new(cap(REF_CACHE)),
        }
    }

    /// The tree id.
    pub(crate) fn id(&self) -> u64 {
        self.tree.id
    }

    /// The inode item of `ino`, if the tree has one.
    pub(crate) fn inode(&mut self, ino: u64) -> Result<Option<InodeInfo>> {
        if let Some(i) = self.inodes.get(&ino) {
            return Ok(*i);
        }
        let key = Key::new(ino, key_type::INODE_ITEM, 0);
        let info = match self.tree.search(&key)? {
            Some(item) => Some(InodeInfo::from_item(
                &InodeItem::parse(item.data()).map_err(Error::bad_item(self.tree.id, key))?,
            )),
            None => None,
        };
        self.inodes.put(ino, info);
        Ok(info)
    }

    /// The inode item of `ino`, which must exist.
    pub(crate) fn need_inode(&mut self, ino: u64) -> Result<InodeInfo> {
        self.inode(ino)?.ok_or(Error::NoInode {
            subvol: self.tree.id,
            ino,
        })
    }

    /// The generation of `ino`, which must exist (the kernel's get_inode_gen).
    pub(crate) fn gen(&mut self, ino: u64) -> Result<u64> {
        Ok(self.need_inode(ino)?.gen)
    }

    /// The first INODE_REF (else INODE_EXTREF) name of `ino`.
    pub(crate) fn first_ref(&mut self, ino: u64) -> Result<Option<FirstRef>> {
        if let Some(r) = self.first_refs.get(&ino) {
            return Ok(r.clone());
        }
        let mut c = self.tree.cursor();
        let item = c.seek_ge(&Key::new(ino, key_type::INODE_REF, 0))?;
        let found = match item.filter(|i| {
            i.key.objectid == ino
                && (i.key.item_type == key_type::INODE_REF
                    || i.key.item_type == key_type::INODE_EXTREF)
        }) {
            None => None,
            Some(item) => {
                let refs = item_refs(self.tree.id, &item)?;
                let (dir, name) = refs.into_iter().next().ok_or_else(|| {
                    Error::bad_item(self.tree.id, item.key)(ItemError::Empty {
                        what: Part::ReferenceItem,
                    })
                })?;
                Some(FirstRef { dir, name })
            }
        };
        self.first_refs.put(ino, found.clone());
        Ok(found)
    }

    /// The first reference of `ino`, which must have one.
    pub(crate) fn need_first_ref(&mut self, ino: u64) -> Result<FirstRef> {
        self.first_ref(ino)?.ok_or_else(|| Error::NoPath {
            subvol: self.tree.id,
            path: format!("(inode {ino} has no INODE_REF or INODE_EXTREF)"),
        })
    }

    /// Every name of `ino`, item by item in key order: (parent, name).
    pub(crate) fn all_refs(&self, ino: u64) -> Result<Vec<Vec<(u64, Bytes)>>> {
        let mut out = Vec::new();
        for item in self.tree.range(
            Key::new(ino, key_type::INODE_REF, 0),
            Key::new(ino, key_type::INODE_EXTREF, u64::MAX),
        ) {
            out.push(item_refs(self.tree.id, &item?)?);
        }
        Ok(out)
    }

    /// The entry `name` of directory `dir` (btrfs_lookup_dir_item).
    pub(crate) fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<Found>> {
        let key = Key::new(dir, key_type::DIR_ITEM, name_hash(name));
        let Some(item) = self.tree.search(&key)? else {
            return Ok(None);
        };
        let entries = dir_entries(item.data()).map_err(Error::bad_item(self.tree.id, key))?;
        Ok(entries.iter().find(|e| e.name == name).map(|e| Found {
            location: e.location,
        }))
    }

    /// The inode entry `name` of `dir` points at; subvolume entries do not
    /// count (the kernel's lookup_dir_item_inode).
    pub(crate) fn dir_lookup_inode(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self
            .dir_lookup(dir, name)?
            .filter(|f| f.location.item_type != key_type::ROOT_ITEM)
            .map(|f| f.location.objectid))
    }

    /// The DIR_INDEX entries of `dir` from index `from` on: (index, location).
    pub(crate) fn dir_index_from(&self, dir: u64, from: u64) -> DirIndexIter<'fs> {
        DirIndexIter {
            tree: self.tree.id,
            inner: self.tree.range(
                Key::new(dir, key_type::DIR_INDEX, from),
                Key::new(dir, key_type::DIR_INDEX, u64::MAX),
            ),
            pending: Vec::new(),
        }
    }

    /// The last DIR_INDEX entry of `dir`: (index, location).
    pub(crate) fn last_dir_index(&self, dir: u64) -> Result<Option<(u64, Key)>> {
        let Some(item) = self
            .tree
            .search_le(&Key::new(dir, key_type::DIR_INDEX, u64::MAX))?
        else {
            return Ok(None);
        };
        if item.key.objectid != dir || item.key.item_type != key_type::DIR_INDEX {
            return Ok(None);
        }
        let entries = dir_entries(item.data()).map_err(Error::bad_item(self.tree.id, item.key))?;
        Ok(entries.first().map(|e| (item.key.offset, e.location)))
    }
}

/// DIR_INDEX entries of one directory, in index order.
pub(crate) struct DirIndexIter<'fs> {
    tree: u64,
    inner: btrfs_disk::tree::RangeIter<'fs>,
    pending: Vec<(u64, Key)>,
}

impl Iterator for DirIndexIter<'_> {
    type Item = Result<(u64, Key)>;

    fn next(&mut self) -> Option<Result<(u64, Key)>> {
        if let Some(p) = self.pending.pop() {
            return Some(Ok(p));
        }
        let item = match self.inner.next()? {
            Ok(i) => i,
            Err(e) => return Some(Err(e)),
        };
        match dir_entries(item.data()) {
            Ok(entries) => {
                let idx = item.key.offset;
                self.pending = entries.iter().rev().map(|e| (idx, e.location)).collect();
                self.pending.pop().map(Ok)
            }
            Err(r) => Some(Err(Error::bad_item(self.tree, item.key)(r))),
        }
    }
}
