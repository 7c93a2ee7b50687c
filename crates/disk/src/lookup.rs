//! Lookups in one snapshot's fs tree, as a send asks them: inode facts,
//! first references, directory entries by name.
//!
//! A send's walk asks the same questions many times (the generation of a parent
//! directory, the first name of an inode on every path it builds), so the
//! answers are kept in small LRU caches. The trees are read-only, so an
//! answer never goes stale.

use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;

use crate::csum::name_hash;
use crate::error::Error;
use crate::items::{dir_entries, inode_extrefs, inode_refs, key_type, InodeItem, ItemError, Part};
use crate::tree::Item;
use crate::{Key, Tree};

/// Inode facts kept per lookup.
const INODE_CACHE: usize = 8192;
/// First references kept per lookup.
const REF_CACHE: usize = 8192;

/// A name: a path component, shared by the callers that keep it.
pub type Name = Arc<[u8]>;

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// Reading the tree failed, or an item in it does not decode.
    #[error(transparent)]
    Read(#[from] Error),
    /// An inode that must exist is not in the tree.
    #[error("subvolume {subvol}: no inode {ino}")]
    NoInode {
        /// The tree (subvolume) id.
        subvol: u64,
        /// The inode number.
        ino: u64,
    },
    /// An inode that must have a name has no INODE_REF or INODE_EXTREF.
    #[error("subvolume {subvol}: no such file {}", no_ref(*ino))]
    NoRef {
        /// The tree (subvolume) id.
        subvol: u64,
        /// The inode number.
        ino: u64,
    },
}

/// What [`LookupError::NoRef`] says in place of a path.
fn no_ref(ino: u64) -> String {
    format!("(inode {ino} has no INODE_REF or INODE_EXTREF)")
}

/// A lookup's failure as the reader reports it: a missing inode is
/// [`Error::NoInode`], a missing name [`Error::NoPath`] (same messages).
impl From<LookupError> for Error {
    fn from(e: LookupError) -> Error {
        match e {
            LookupError::Read(e) => e,
            LookupError::NoInode { subvol, ino } => Error::NoInode { subvol, ino },
            LookupError::NoRef { subvol, ino } => Error::NoPath {
                subvol,
                path: no_ref(ino),
            },
        }
    }
}

/// A lookup's result.
pub type Result<T, E = LookupError> = std::result::Result<T, E>;

/// What a send needs of an inode item (the kernel's btrfs_inode_info).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InodeInfo {
    /// Its generation.
    pub gen: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its mode (type and permission bits).
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// Its device number.
    pub rdev: u64,
    /// Its link count.
    pub nlink: u32,
    /// Its inode flags.
    pub flags: u64,
}

impl InodeInfo {
    /// The facts of a decoded inode.
    pub fn from_inode(i: &crate::data::Inode) -> InodeInfo {
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

    /// The facts of an INODE_ITEM.
    pub fn from_item(ii: &InodeItem<'_>) -> InodeInfo {
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
pub struct FirstRef {
    /// The parent directory's inode number.
    pub dir: u64,
    /// The name in it.
    pub name: Name,
}

/// A directory entry found by name.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    /// What the entry points at (an inode, or a subvolume's ROOT_ITEM).
    pub location: Key,
}

/// Cached lookups in one fs tree.
pub struct Lookup<'fs> {
    /// The tree looked in.
    pub tree: Tree<'fs>,
    inodes: LruCache<u64, Option<InodeInfo>>,
    first_refs: LruCache<u64, Option<FirstRef>>,
    /// Inode items taken as there when the tree has none (a rescue's
    /// stand-in for a root directory whose item was lost).
    assumed: Vec<(u64, InodeInfo)>,
}

fn cap(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// The names in one INODE_REF or INODE_EXTREF item of tree `tree`:
/// (parent, name).
pub fn item_refs(tree: u64, item: &Item) -> Result<Vec<(u64, Name)>, Error> {
    let key = item.key;
    let refs = if key.item_type == key_type::INODE_REF {
        inode_refs(key.offset, item.data()).map_err(Error::bad_item(tree, key))?
    } else {
        inode_extrefs(item.data()).map_err(Error::bad_item(tree, key))?
    };
    Ok(refs
        .into_iter()
        .map(|r| (r.parent, Name::from(r.name)))
        .collect())
}

impl<'fs> Lookup<'fs> {
    /// Lookups in `tree`, with empty caches.
    pub fn new(tree: Tree<'fs>) -> Lookup<'fs> {
        Lookup {
            tree,
            inodes: LruCache::new(cap(INODE_CACHE)),
            first_refs: LruCache::new(cap(REF_CACHE)),
            assumed: Vec::new(),
        }
    }

    /// From now on, takes `info` as the inode item of `ino` when the tree
    /// has none.
    pub fn assume(&mut self, ino: u64, info: InodeInfo) {
        self.assumed.push((ino, info));
        self.inodes.pop(&ino);
    }

    /// The tree id.
    pub fn id(&self) -> u64 {
        self.tree.id
    }

    /// The inode item of `ino`, if the tree has one.
    pub fn inode(&mut self, ino: u64) -> Result<Option<InodeInfo>> {
        if let Some(i) = self.inodes.get(&ino) {
            return Ok(*i);
        }
        let key = Key::new(ino, key_type::INODE_ITEM, 0);
        let info = match self.tree.search(&key)? {
            Some(item) => Some(InodeInfo::from_item(
                &InodeItem::parse(item.data()).map_err(Error::bad_item(self.tree.id, key))?,
            )),
            None => self
                .assumed
                .iter()
                .find(|(i, _)| *i == ino)
                .map(|(_, info)| *info),
        };
        self.inodes.put(ino, info);
        Ok(info)
    }

    /// The inode item of `ino`, which must exist.
    pub fn need_inode(&mut self, ino: u64) -> Result<InodeInfo> {
        self.inode(ino)?.ok_or(LookupError::NoInode {
            subvol: self.tree.id,
            ino,
        })
    }

    /// The generation of `ino`, which must exist (the kernel's get_inode_gen).
    pub fn gen(&mut self, ino: u64) -> Result<u64> {
        Ok(self.need_inode(ino)?.gen)
    }

    /// The first INODE_REF (else INODE_EXTREF) name of `ino`.
    pub fn first_ref(&mut self, ino: u64) -> Result<Option<FirstRef>> {
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
                    LookupError::from(Error::bad_item(self.tree.id, item.key)(ItemError::Empty {
                        what: Part::ReferenceItem,
                    }))
                })?;
                Some(FirstRef { dir, name })
            }
        };
        self.first_refs.put(ino, found.clone());
        Ok(found)
    }

    /// The first reference of `ino`, which must have one.
    pub fn need_first_ref(&mut self, ino: u64) -> Result<FirstRef> {
        self.first_ref(ino)?.ok_or(LookupError::NoRef {
            subvol: self.tree.id,
            ino,
        })
    }

    /// Every name of `ino`, item by item in key order: (parent, name).
    pub fn all_refs(&self, ino: u64) -> Result<Vec<Vec<(u64, Name)>>> {
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
    pub fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<Found>> {
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
    pub fn dir_lookup_inode(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self
            .dir_lookup(dir, name)?
            .filter(|f| f.location.item_type != key_type::ROOT_ITEM)
            .map(|f| f.location.objectid))
    }

    /// The DIR_INDEX entries of `dir` from index `from` on: (index, location).
    pub fn dir_index_from(&self, dir: u64, from: u64) -> DirIndexIter<'fs> {
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
    pub fn last_dir_index(&self, dir: u64) -> Result<Option<(u64, Key)>> {
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
pub struct DirIndexIter<'fs> {
    tree: u64,
    inner: crate::tree::RangeIter<'fs>,
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
            Err(e) => return Some(Err(e.into())),
        };
        match dir_entries(item.data()) {
            Ok(entries) => {
                let idx = item.key.offset;
                self.pending = entries.iter().rev().map(|e| (idx, e.location)).collect();
                self.pending.pop().map(Ok)
            }
            Err(r) => Some(Err(Error::bad_item(self.tree, item.key)(r).into())),
        }
    }
}
