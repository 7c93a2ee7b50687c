//! Where inodes are on the receiving side while the stream is replayed: the
//! kernel's `get_cur_path` for a full send, orphan names, and directories
//! created ahead of their turn.
//!
//! Inodes are sent in inode-number order. An inode not processed yet
//! (`ino >= send_progress`) lives at its orphan name `o<ino>-<gen>-<n>` in
//! the subvolume root, if it exists at all; a processed one sits at its
//! first reference (INODE_REF, else INODE_EXTREF) below its parent's current
//! path. A directory with a higher number than one of its children is made
//! early at its orphan name when that child needs it, and renamed into place
//! when its own turn comes; that rename moves everything below it, so cached
//! paths carry an epoch that such a rename advances.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;

use btrfs_disk::error::{Error, Result};
use btrfs_disk::items::{inode_extrefs, inode_refs, key_type, objectid, InodeItem};
use btrfs_disk::{Key, Tree};

use super::cmd::Bytes;

/// Deepest directory nesting followed before calling it a loop (a path has
/// at most PATH_MAX = 4096 bytes, so at most 2048 components).
const MAX_DEPTH: usize = 4096;

/// How many processed directories keep their name and path in memory.
const LOCATED_CAPACITY: usize = 16384;

/// A processed directory's first reference, and its path when known.
#[derive(Clone)]
struct Located {
    gen: u64,
    parent: u64,
    name: Bytes,
    /// The path and the epoch it was computed in.
    path: Option<(u64, Bytes)>,
}

/// Paths of the receiving side during a full send.
pub(crate) struct Paths<'fs> {
    tree: Tree<'fs>,
    /// Entries of the subvolume root that look like orphan names
    /// (`o<digits>-<digits>-<digits>`): a generated name must avoid them.
    taken: HashSet<Vec<u8>>,
    /// Directories created ahead of their turn: inode number → generation.
    created: HashMap<u64, u64>,
    located: lru::LruCache<u64, Located>,
    epoch: u64,
    root_gen: Option<u64>,
}

/// Whether `name` has the shape of an orphan name.
pub(crate) fn looks_orphan(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b"o") else {
        return false;
    };
    let parts: Vec<&[u8]> = rest.split(|&b| b == b'-').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
}

/// `a/b`, or `b` when `a` is the root's empty path.
pub(crate) fn join(dir: &[u8], name: &[u8]) -> Bytes {
    if dir.is_empty() {
        return Bytes::from(name);
    }
    let mut v = Vec::with_capacity(dir.len() + 1 + name.len());
    v.extend_from_slice(dir);
    v.push(b'/');
    v.extend_from_slice(name);
    Bytes::from(v)
}

impl<'fs> Paths<'fs> {
    pub(crate) fn new(tree: Tree<'fs>) -> Paths<'fs> {
        Paths {
            tree,
            taken: HashSet::new(),
            created: HashMap::new(),
            located: lru::LruCache::new(
                NonZeroUsize::new(LOCATED_CAPACITY).unwrap_or(NonZeroUsize::MIN),
            ),
            epoch: 0,
            root_gen: None,
        }
    }

    /// Remembers an entry name of the subvolume root (only orphan-shaped
    /// names are kept).
    pub(crate) fn note_root_entry(&mut self, name: &[u8]) {
        if looks_orphan(name) {
            self.taken.insert(name.to_vec());
        }
    }

    /// The kernel's gen_unique_name: `o<ino>-<gen>-<n>` with the smallest
    /// `n` that no entry of the subvolume root already has.
    pub(crate) fn orphan_name(&self, ino: u64, gen: u64) -> Bytes {
        let mut n = 0u64;
        loop {
            let name = format!("o{ino}-{gen}-{n}").into_bytes();
            if !self.taken.contains(&name) {
                return Bytes::from(name);
            }
            n += 1;
        }
    }

    /// Whether directory `ino` was created ahead of its turn.
    pub(crate) fn was_created_early(&self, ino: u64) -> bool {
        self.created.contains_key(&ino)
    }

    /// Records that directory `ino` was created ahead of its turn.
    pub(crate) fn created_early(&mut self, ino: u64, gen: u64) {
        self.created.insert(ino, gen);
    }

    /// Records that inode `ino`, a directory, now sits at its first
    /// reference `name` in `parent`, with path `path`. When it had been
    /// created early, everything below it just moved: cached paths expire.
    pub(crate) fn dir_in_place(
        &mut self,
        ino: u64,
        gen: u64,
        parent: u64,
        name: Bytes,
        path: Bytes,
    ) {
        if self.created.remove(&ino).is_some() {
            self.epoch += 1;
        }
        self.located.put(
            ino,
            Located {
                gen,
                parent,
                name,
                path: Some((self.epoch, path)),
            },
        );
    }

    /// Records the root directory's generation (asked for by every entry in it).
    pub(crate) fn root_generation(&mut self, gen: u64) {
        self.root_gen = Some(gen);
    }

    /// The generation of inode `ino`.
    pub(crate) fn generation(&mut self, ino: u64) -> Result<u64> {
        if ino == objectid::FIRST_FREE {
            if let Some(g) = self.root_gen {
                return Ok(g);
            }
        }
        if let Some(g) = self.created.get(&ino) {
            return Ok(*g);
        }
        if let Some(l) = self.located.peek(&ino) {
            return Ok(l.gen);
        }
        self.inode_item_gen(ino)
    }

    fn inode_item_gen(&self, ino: u64) -> Result<u64> {
        let key = Key::new(ino, key_type::INODE_ITEM, 0);
        let item = self.tree.search(&key)?.ok_or(Error::NoInode {
            subvol: self.tree.id,
            ino,
        })?;
        let ii = InodeItem::parse(item.data()).map_err(|reason| Error::BadItem {
            tree: self.tree.id,
            key,
            reason,
        })?;
        Ok(ii.generation())
    }

    /// The first reference of `ino` from the tree: (parent, name).
    fn first_ref(&self, ino: u64) -> Result<(u64, Bytes)> {
        let mut c = self.tree.cursor();
        let item = c.seek_ge(&Key::new(ino, key_type::INODE_REF, 0))?;
        let Some(item) = item.filter(|i| {
            i.key.objectid == ino
                && (i.key.item_type == key_type::INODE_REF
                    || i.key.item_type == key_type::INODE_EXTREF)
        }) else {
            return Err(Error::NoPath {
                subvol: self.tree.id,
                path: format!("(inode {ino} has no INODE_REF or INODE_EXTREF)"),
            });
        };
        let bad = |reason| Error::BadItem {
            tree: self.tree.id,
            key: item.key,
            reason,
        };
        let refs = if item.key.item_type == key_type::INODE_REF {
            inode_refs(item.key.offset, item.data()).map_err(bad)?
        } else {
            inode_extrefs(item.data()).map_err(bad)?
        };
        let r = refs.first().ok_or_else(|| {
            bad(btrfs_disk::items::ItemError::Empty {
                what: btrfs_disk::items::Part::ReferenceItem,
            })
        })?;
        Ok((r.parent, Bytes::from(r.name)))
    }

    /// The kernel's get_cur_path: where `ino` is on the receiver right now,
    /// given that inodes below `send_progress` have been processed.
    pub(crate) fn cur_path(&mut self, ino: u64, send_progress: u64) -> Result<Bytes> {
        self.cur_path_depth(ino, send_progress, 0)
    }

    fn cur_path_depth(&mut self, ino: u64, send_progress: u64, depth: usize) -> Result<Bytes> {
        if ino == objectid::FIRST_FREE {
            return Ok(Bytes::from(&b""[..]));
        }
        if ino >= send_progress {
            let gen = self.generation(ino)?;
            return Ok(self.orphan_name(ino, gen));
        }
        if depth > MAX_DEPTH {
            return Err(Error::NoPath {
                subvol: self.tree.id,
                path: format!("(inode {ino}: directory loop or nesting deeper than {MAX_DEPTH})"),
            });
        }
        let loc = match self.located.get(&ino) {
            Some(l) => l.clone(),
            None => {
                let (parent, name) = self.first_ref(ino)?;
                let gen = self.inode_item_gen(ino)?;
                Located {
                    gen,
                    parent,
                    name,
                    path: None,
                }
            }
        };
        if let Some((e, p)) = &loc.path {
            if *e == self.epoch {
                return Ok(p.clone());
            }
        }
        let dir = self.cur_path_depth(loc.parent, send_progress, depth + 1)?;
        let path = join(&dir, &loc.name);
        // Stable until a directory created early is renamed into place.
        self.located.put(
            ino,
            Located {
                path: Some((self.epoch, path.clone())),
                ..loc
            },
        );
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphan_shaped_names_are_recognised() {
        assert!(looks_orphan(b"o257-9-0"));
        assert!(looks_orphan(b"o1-2-33"));
        assert!(!looks_orphan(b"o257-9"));
        assert!(!looks_orphan(b"o257-9-0-1"));
        assert!(!looks_orphan(b"o257-x-0"));
        assert!(!looks_orphan(b"257-9-0"));
        assert!(!looks_orphan(b"o-9-0"));
    }

    #[test]
    fn join_puts_root_entries_at_the_top() {
        assert_eq!(&*join(b"", b"a"), b"a");
        assert_eq!(&*join(b"a/b", b"c d"), b"a/b/c d");
    }
}
