//! Searching and iterating a tree: point lookups, ranges and cursors over
//! blocks read through a [`BlockSource`].

use crate::block::{Block, Expect, Generation};
use crate::error::{Error, Result, TreeBlockError};
use crate::key::Key;

/// Where tree blocks come from: a filesystem on its devices, or blocks held
/// in memory. Returns the block at `e.logical`, validated and matching `e`.
pub trait BlockSource: Sync {
    /// The validated block that `e` points to.
    fn tree_block(&self, e: &Expect) -> Result<Block>;
}

/// One item found in a leaf: its key and a view of its data.
#[derive(Clone)]
pub struct Item {
    /// The item's key.
    pub key: Key,
    block: Block,
    start: u32,
    len: u32,
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Item({}, {} bytes)", self.key, self.len)
    }
}

impl Item {
    /// Item `slot` of the leaf `block`.
    pub fn at(block: &Block, slot: usize) -> Option<Item> {
        let (key, start, len) = block.item_span(slot)?;
        Some(Item {
            key,
            block: block.clone(),
            start: start as u32,
            len: len as u32,
        })
    }
    /// The item's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        self.block
            .bytes()
            .get(self.start as usize..self.start as usize + self.len as usize)
            .unwrap_or(&[])
    }
    /// The leaf holding it.
    pub fn leaf(&self) -> &Block {
        &self.block
    }
}

/// A tree: where its root is and what to expect of it.
#[derive(Clone, Copy)]
pub struct Tree<'fs> {
    src: &'fs dyn BlockSource,
    /// The tree id.
    pub id: u64,
    /// Logical address of the root block.
    pub root: u64,
    /// Generation of the root block.
    pub generation: u64,
    /// Level of the root block.
    pub level: u8,
}

impl std::fmt::Debug for Tree<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree")
            .field("id", &self.id)
            .field("root", &self.root)
            .field("generation", &self.generation)
            .field("level", &self.level)
            .finish()
    }
}

impl<'fs> Tree<'fs> {
    /// The tree whose root block is `root` (of `generation` and `level`),
    /// read from `src`.
    pub fn new(src: &'fs dyn BlockSource, id: u64, root: u64, generation: u64, level: u8) -> Self {
        Tree {
            src,
            id,
            root,
            generation,
            level,
        }
    }

    /// The root block.
    pub fn root_block(&self) -> Result<Block> {
        self.src.tree_block(&Expect {
            logical: self.root,
            generation: Generation::Exactly(self.generation),
            level: self.level,
            first_key: None,
            tree: self.id,
        })
    }

    /// Child `slot` of `node`, validated against the node's pointer.
    pub fn child(&self, node: &Block, slot: usize) -> Result<Block> {
        let ptr = node.key_ptr(slot).ok_or_else(|| Error::BadTreeBlock {
            logical: node.bytenr(),
            tree: self.id,
            reason: TreeBlockError::NoPointer { slot },
        })?;
        self.src.tree_block(&Expect {
            logical: ptr.blockptr,
            generation: Generation::Exactly(ptr.generation),
            level: node.level() - 1,
            first_key: Some(ptr.key),
            tree: self.id,
        })
    }

    /// The item with exactly `key`.
    pub fn search(&self, key: &Key) -> Result<Option<Item>> {
        let mut c = self.cursor();
        Ok(c.seek_ge(key)?.filter(|i| i.key == *key))
    }

    /// The last item with key ≤ `key`.
    pub fn search_le(&self, key: &Key) -> Result<Option<Item>> {
        self.cursor().seek_le(key)
    }

    /// Items with keys in `from..=to`, in key order.
    pub fn range(&self, from: Key, to: Key) -> RangeIter<'fs> {
        RangeIter {
            cursor: self.cursor(),
            start: Start::Ge(from),
            to,
        }
    }

    /// Items from the last one with key ≤ `from` (or the first after it when none) up to `to`.
    pub fn range_from_le(&self, from: Key, to: Key) -> RangeIter<'fs> {
        RangeIter {
            cursor: self.cursor(),
            start: Start::Le(from),
            to,
        }
    }

    /// A cursor for walking items.
    pub fn cursor(&self) -> Cursor<'fs> {
        Cursor {
            tree: *self,
            path: Vec::with_capacity(usize::from(self.level) + 1),
        }
    }
}

/// A position in a tree: the path of blocks from the root to one leaf item.
pub struct Cursor<'fs> {
    tree: Tree<'fs>,
    path: Vec<(Block, usize)>,
}

impl<'fs> Cursor<'fs> {
    /// Moves to the first item with key ≥ `key`.
    pub fn seek_ge(&mut self, key: &Key) -> Result<Option<Item>> {
        self.path.clear();
        let mut b = self.tree.root_block()?;
        loop {
            // A node with no pointers is a rescue's stand-in for a lost
            // block: an empty subtree.
            if b.is_leaf() || b.is_empty() {
                let slot = b.lower_bound(key);
                let n = b.nritems();
                self.path.push((b, slot));
                if slot >= n {
                    return self.next_leaf();
                }
                return Ok(self.current());
            }
            let slot = b.last_le(key).unwrap_or(0);
            let child = self.tree.child(&b, slot)?;
            self.path.push((b, slot));
            b = child;
        }
    }

    /// Moves to the last item with key ≤ `key`; when there is none, to the first item.
    ///
    /// Returns the item only when its key is ≤ `key`.
    pub fn seek_le(&mut self, key: &Key) -> Result<Option<Item>> {
        self.path.clear();
        let mut b = self.tree.root_block()?;
        loop {
            // A node with no pointers is a rescue's stand-in for a lost
            // block: an empty subtree.
            if b.is_leaf() || b.is_empty() {
                match b.last_le(key) {
                    Some(slot) => {
                        self.path.push((b, slot));
                        return Ok(self.current());
                    }
                    None => {
                        let empty = b.nritems() == 0;
                        self.path.push((b, 0));
                        if empty {
                            self.next_leaf()?;
                        }
                        return Ok(None);
                    }
                }
            }
            let slot = b.last_le(key).unwrap_or(0);
            let child = self.tree.child(&b, slot)?;
            self.path.push((b, slot));
            b = child;
        }
    }

    /// The item at the cursor.
    pub fn current(&self) -> Option<Item> {
        let (b, slot) = self.path.last()?;
        let (key, start, len) = b.item_span(*slot)?;
        Some(Item {
            key,
            block: b.clone(),
            start: start as u32,
            len: len as u32,
        })
    }

    /// Advances to the next item.
    pub fn next_item(&mut self) -> Result<Option<Item>> {
        match self.path.last_mut() {
            None => Ok(None),
            Some((b, slot)) => {
                *slot += 1;
                if *slot < b.nritems() {
                    Ok(self.current())
                } else {
                    self.next_leaf()
                }
            }
        }
    }

    /// Moves to the first item of the next non-empty leaf.
    fn next_leaf(&mut self) -> Result<Option<Item>> {
        loop {
            self.path.pop();
            let Some((node, slot)) = self.path.last_mut() else {
                return Ok(None);
            };
            if *slot + 1 >= node.nritems() {
                continue;
            }
            *slot += 1;
            let mut b = self.tree.child(node, *slot)?;
            while !b.is_leaf() && !b.is_empty() {
                let child = self.tree.child(&b, 0)?;
                self.path.push((b, 0));
                b = child;
            }
            let empty = b.nritems() == 0;
            self.path.push((b, 0));
            if !empty {
                return Ok(self.current());
            }
        }
    }
}

enum Start {
    Ge(Key),
    Le(Key),
    Started,
    Done,
}

/// Iterator over the items of a key range.
pub struct RangeIter<'fs> {
    cursor: Cursor<'fs>,
    start: Start,
    to: Key,
}

impl Iterator for RangeIter<'_> {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        let r = match std::mem::replace(&mut self.start, Start::Started) {
            Start::Ge(k) => self.cursor.seek_ge(&k),
            Start::Le(k) => match self.cursor.seek_le(&k) {
                Ok(None) => self.cursor.current_or_next(),
                other => other,
            },
            Start::Started => self.cursor.next_item(),
            Start::Done => {
                self.start = Start::Done;
                return None;
            }
        };
        match r {
            Ok(Some(item)) if item.key <= self.to => Some(Ok(item)),
            Ok(_) => {
                self.start = Start::Done;
                None
            }
            Err(e) => {
                self.start = Start::Done;
                Some(Err(e))
            }
        }
    }
}

impl Cursor<'_> {
    /// The item at the cursor, or the next one when the cursor is before the first.
    fn current_or_next(&mut self) -> Result<Option<Item>> {
        match self.current() {
            Some(i) => Ok(Some(i)),
            None => self.next_item(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::KeyPtr;
    use crate::csum::CsumType;
    use crate::mem::MemBlocks;
    use uuid::Uuid;

    const NODESIZE: usize = 4096;
    const GEN: u64 = 7;
    const TREE: u64 = 5;

    /// Items (k, 0, k * 10) with k = 0, 3, 6, ...: a value names its key.
    fn items(n: u64) -> Vec<(Key, Vec<u8>)> {
        (0..n)
            .map(|i| (Key::new(i * 3, 0, i * 10), (i * 3).to_le_bytes().to_vec()))
            .collect()
    }

    /// A tree of `items`, `per_leaf` items per leaf and `fanout` pointers
    /// per node, in memory; returns the blocks and the root pointer and level.
    fn build(items: &[(Key, Vec<u8>)], per_leaf: usize, fanout: usize) -> (MemBlocks, KeyPtr, u8) {
        let mut m = MemBlocks::new(NODESIZE, Uuid::from_u128(1), CsumType::Crc32c);
        let mut next = 1u64 << 20;
        let mut alloc = || {
            next += NODESIZE as u64;
            next
        };
        let mut level = 0u8;
        let mut ptrs: Vec<KeyPtr> = items
            .chunks(per_leaf)
            .map(|c| {
                let refs: Vec<(Key, &[u8])> = c.iter().map(|(k, v)| (*k, &v[..])).collect();
                m.leaf(alloc(), GEN, TREE, &refs).unwrap()
            })
            .collect();
        while ptrs.len() > 1 {
            level += 1;
            ptrs = ptrs
                .chunks(fanout)
                .map(|c| m.node(alloc(), GEN, TREE, level, c).unwrap())
                .collect();
        }
        (m, ptrs[0], level)
    }

    fn tree(m: &MemBlocks, root: KeyPtr, level: u8) -> Tree<'_> {
        Tree::new(m, TREE, root.blockptr, root.generation, level)
    }

    #[test]
    fn three_level_tree_answers_like_a_sorted_map() {
        let all = items(500);
        let (m, root, level) = build(&all, 7, 4);
        assert!(level >= 3);
        let t = tree(&m, root, level);
        let model: std::collections::BTreeMap<Key, Vec<u8>> = all.iter().cloned().collect();
        for probe in (0..1600).step_by(1) {
            let k = Key::new(probe, 0, (probe / 3) * 10);
            assert_eq!(
                t.search(&k).unwrap().map(|i| i.data().to_vec()),
                model.get(&k).cloned(),
                "search {k}"
            );
            let le = t.search_le(&Key::new(probe, 0, u64::MAX)).unwrap();
            let want = model.range(..=Key::new(probe, 0, u64::MAX)).next_back();
            assert_eq!(
                le.map(|i| i.key),
                want.map(|(k, _)| *k),
                "search_le {probe}"
            );
        }
        let got: Vec<Key> = t
            .range(Key::new(100, 0, 0), Key::new(1000, 0, 0))
            .map(|i| i.unwrap().key)
            .collect();
        let want: Vec<Key> = model
            .range(Key::new(100, 0, 0)..=Key::new(1000, 0, 0))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(got, want);
        let all_keys: Vec<Key> = t
            .range(Key::MIN, Key::MAX)
            .map(|i| i.unwrap().key)
            .collect();
        assert_eq!(all_keys.len(), 500);
    }

    #[test]
    fn cursor_walks_across_leaves_and_stops_at_the_end() {
        let all = items(40);
        let (m, root, level) = build(&all, 3, 3);
        let t = tree(&m, root, level);
        let mut c = t.cursor();
        let first = c.seek_ge(&Key::new(10, 0, 0)).unwrap().unwrap();
        assert_eq!(first.key.objectid, 12);
        let mut seen = vec![first.key.objectid];
        while let Some(i) = c.next_item().unwrap() {
            seen.push(i.key.objectid);
        }
        assert_eq!(seen, (4..40).map(|i| i * 3).collect::<Vec<_>>());
        assert!(t.cursor().seek_ge(&Key::new(1000, 0, 0)).unwrap().is_none());
        // Before the first key: seek_le finds nothing, the range starts at the first.
        assert!(t.search_le(&Key::MIN).unwrap().is_none() || all[0].0 == Key::MIN);
        let from_le: Vec<u64> = t
            .range_from_le(Key::new(7, 0, 0), Key::new(12, 0, u64::MAX))
            .map(|i| i.unwrap().key.objectid)
            .collect();
        assert_eq!(from_le, vec![6, 9, 12]);
    }

    #[test]
    fn a_corrupt_child_is_an_error_naming_the_block_and_tree() {
        let all = items(60);
        let (mut m, root, level) = build(&all, 5, 4);
        let t = tree(&m, root, level);
        // The leaf holding key 90 (item 30).
        let leaf = t
            .search(&Key::new(90, 0, 300))
            .unwrap()
            .unwrap()
            .leaf()
            .bytenr();
        let mut raw = t
            .search(&Key::new(90, 0, 300))
            .unwrap()
            .unwrap()
            .leaf()
            .bytes()
            .to_vec();
        raw[200] ^= 0xff;
        m.insert_raw(leaf, raw);
        let t = tree(&m, root, level);
        let e = t.search(&Key::new(90, 0, 300)).unwrap_err().to_string();
        assert!(
            e.contains(&format!("logical {leaf}")) && e.contains("tree 5"),
            "{e}"
        );
        assert!(e.contains("checksum mismatch"), "{e}");
        // Items in other leaves still read.
        assert!(t.search(&Key::new(0, 0, 0)).unwrap().is_some());
        let errors = t.range(Key::MIN, Key::MAX).filter(|r| r.is_err()).count();
        assert_eq!(errors, 1, "a range stops at the first error");
    }

    /// Reads from `inner`, except the blocks at `lost`, for which it gives
    /// a rescue's empty stand-in (as [`crate::Filesystem`] does with
    /// [`crate::Options::rescue`]).
    struct Lossy<'a> {
        inner: &'a MemBlocks,
        lost: Vec<u64>,
    }

    impl BlockSource for Lossy<'_> {
        fn tree_block(&self, e: &Expect) -> Result<Block> {
            if self.lost.contains(&e.logical) {
                return Ok(Block::stand_in(e, GEN, NODESIZE, &Uuid::from_u128(1)));
            }
            self.inner.tree_block(e)
        }
    }

    /// The keys under the block at `logical` of tree `t`, and that block's level.
    fn keys_under(t: &Tree<'_>, b: &Block, logical: u64, inside: bool) -> Vec<Key> {
        let inside = inside || b.bytenr() == logical;
        if b.is_leaf() {
            return if inside {
                (0..b.nritems()).filter_map(|i| b.key(i)).collect()
            } else {
                Vec::new()
            };
        }
        (0..b.nritems())
            .flat_map(|i| keys_under(t, &t.child(b, i).unwrap(), logical, inside))
            .collect()
    }

    #[test]
    fn a_lost_leaf_or_node_is_walked_past_as_an_empty_subtree() {
        let all = items(500);
        let (m, root, level) = build(&all, 7, 4);
        let whole = tree(&m, root, level);
        let leaf = whole
            .search(&Key::new(90, 0, 300))
            .unwrap()
            .unwrap()
            .leaf()
            .bytenr();
        // The level-1 node above the item with key 900.
        let mut c = whole.cursor();
        c.seek_ge(&Key::new(900, 0, 3000)).unwrap();
        let node = c.path[c.path.len() - 2].0.bytenr();
        for lost in [leaf, node] {
            let gone = keys_under(&whole, &whole.root_block().unwrap(), lost, false);
            assert!(!gone.is_empty());
            let src = Lossy {
                inner: &m,
                lost: vec![lost],
            };
            let t = Tree::new(&src, TREE, root.blockptr, root.generation, level);
            let got: Vec<Key> = t
                .range(Key::MIN, Key::MAX)
                .map(|i| i.unwrap().key)
                .collect();
            let want: Vec<Key> = all
                .iter()
                .map(|(k, _)| *k)
                .filter(|k| !gone.contains(k))
                .collect();
            assert_eq!(got, want, "lost block {lost}");
            // A search into the lost range finds the first key after it.
            let after = t.cursor().seek_ge(&gone[0]).unwrap().map(|i| i.key);
            assert_eq!(after, want.iter().find(|k| **k > gone[0]).copied());
            assert!(t.search(&gone[0]).unwrap().is_none());
        }
    }

    #[test]
    fn a_parent_pointer_that_disagrees_with_the_child_is_an_error() {
        let all = items(20);
        let mut m = MemBlocks::new(NODESIZE, Uuid::from_u128(1), CsumType::Crc32c);
        let refs: Vec<(Key, &[u8])> = all[..10].iter().map(|(k, v)| (*k, &v[..])).collect();
        let a = m.leaf(8192, GEN, TREE, &refs).unwrap();
        let refs: Vec<(Key, &[u8])> = all[10..].iter().map(|(k, v)| (*k, &v[..])).collect();
        let b = m.leaf(12288, GEN, TREE, &refs).unwrap();
        let stale = KeyPtr {
            generation: GEN + 1,
            ..b
        };
        let root = m.node(16384, GEN + 1, TREE, 1, &[a, stale]).unwrap();
        let t = tree(&m, root, 1);
        let e = t.search(&all[15].0).unwrap_err().to_string();
        assert!(e.contains("generation 7 where the parent says 8"), "{e}");
        let moved = KeyPtr {
            key: Key::new(31, 0, 0),
            ..b
        };
        let root = m.node(20480, GEN, TREE, 1, &[a, moved]).unwrap();
        let e = tree(&m, root, 1)
            .search(&all[15].0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("first key"), "{e}");
        // A block from another filesystem.
        let mut other = MemBlocks::new(NODESIZE, Uuid::from_u128(2), CsumType::Crc32c);
        let refs: Vec<(Key, &[u8])> = all.iter().map(|(k, v)| (*k, &v[..])).collect();
        let p = other.leaf(8192, GEN, TREE, &refs).unwrap();
        let raw = Tree::new(&other, TREE, p.blockptr, GEN, 0)
            .root_block()
            .unwrap()
            .bytes()
            .to_vec();
        m.insert_raw(24576, raw);
        let e = Tree::new(&m, TREE, 24576, GEN, 0)
            .root_block()
            .unwrap_err()
            .to_string();
        assert!(e.contains("header"), "{e}");
    }
}
