//! Comparing the send snapshot's fs tree with the parent's, item by item
//! (the kernel's btrfs_compare_trees).
//!
//! Both trees are walked together from their roots. Where two node
//! pointers at the same level and key point at the same block of the same
//! generation, the subtrees are the same and are skipped without reading
//! them; that is what makes an incremental send cost what the change costs.
//! Every other leaf item is reported as new (only in the send tree),
//! deleted (only in the parent), changed (same key, other bytes) or same
//! (same key and bytes, in a leaf that had to be read).
//!
//! [`compare_trees`] hands each difference to one callback; the callback's
//! own errors and the walk's ([`DiffError`]) come back as one error type.

use crate::block::Block;
use crate::error::Error;
use crate::tree::{Item, Tree};
use crate::Key;

/// How an item differs between the two trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Only in the left tree (the send snapshot).
    New,
    /// Only in the right tree (the parent).
    Deleted,
    /// In both, with other bytes.
    Changed,
    /// In both, with the same bytes (reported for leaves that had to be read).
    Same,
}

/// An item and its slot in its leaf.
pub struct Side<'a> {
    /// The item.
    pub item: &'a Item,
    /// Its slot in its leaf.
    pub slot: usize,
}

/// Why a tree compare stopped.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// Reading a tree block failed.
    #[error(transparent)]
    Read(#[from] Error),
    /// The walk's position in a tree is gone (a node had no block at a level).
    #[error("tree compare lost its position")]
    Lost,
    /// A tree block has no key at a slot the walk reached.
    #[error("tree block {block} has no key {slot}")]
    NoKey {
        /// The block's logical address.
        block: u64,
        /// The slot.
        slot: usize,
    },
    /// A node has no pointer at a slot the walk reached.
    #[error("tree block {block} has no pointer {slot}")]
    NoPointer {
        /// The block's logical address.
        block: u64,
        /// The slot.
        slot: usize,
    },
    /// A leaf has no item at a slot the walk reached.
    #[error("leaf {block} has no item {slot}")]
    NoItem {
        /// The leaf's logical address.
        block: u64,
        /// The slot.
        slot: usize,
    },
}

/// One tree's position: a block and slot per level, root last.
struct Walker<'fs> {
    tree: Tree<'fs>,
    /// (block, slot) indexed by level.
    path: Vec<Option<(Block, usize)>>,
    level: usize,
    root_level: usize,
    key: Key,
    end: bool,
    /// Key ranges `[from, to)` (`to` none: to the end) under blocks a
    /// rescue read could not read (empty stand-ins): what the other tree
    /// has there is not known to differ.
    lost: Vec<(Key, Option<Key>)>,
}

/// What advancing a tree may do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Advance {
    None,
    /// Down when on a node, else next.
    Normal,
    /// Next at the same level or up (the subtree is shared).
    OnlyNext,
}

impl<'fs> Walker<'fs> {
    fn new(tree: Tree<'fs>) -> Result<Walker<'fs>, DiffError> {
        let root = tree.root_block()?;
        let level = usize::from(root.level());
        let mut path = vec![None; level + 1];
        let key = root.key(0);
        let empty = root.nritems() == 0;
        path[level] = Some((root, 0));
        Ok(Walker {
            tree,
            path,
            level,
            root_level: level,
            key: key.unwrap_or_default(),
            end: empty,
            lost: Vec::new(),
        })
    }

    fn at(&self, level: usize) -> Result<&(Block, usize), DiffError> {
        self.path
            .get(level)
            .and_then(Option::as_ref)
            .ok_or(DiffError::Lost)
    }

    fn update_key(&mut self) -> Result<(), DiffError> {
        let (b, slot) = self.at(self.level)?;
        self.key = b.key(*slot).ok_or(DiffError::NoKey {
            block: b.bytenr(),
            slot: *slot,
        })?;
        Ok(())
    }

    /// The node pointer at the current level and slot: (blockptr, generation).
    fn ptr(&self) -> Result<(u64, u64), DiffError> {
        let (b, slot) = self.at(self.level)?;
        let p = b.key_ptr(*slot).ok_or(DiffError::NoPointer {
            block: b.bytenr(),
            slot: *slot,
        })?;
        Ok((p.blockptr, p.generation))
    }

    /// tree_advance: down into the child, or to the next slot (up as needed).
    fn advance(&mut self, allow_down: bool) -> Result<(), DiffError> {
        if self.level == 0 || !allow_down {
            self.next_or_up()?;
        } else {
            let (b, slot) = self.at(self.level)?;
            let child = self.tree.child(b, *slot)?;
            let empty = child.is_empty();
            if empty {
                // A rescue's stand-in for a lost block: nothing under it,
                // and its key range is not known.
                let from = b.key(*slot).unwrap_or_default();
                let to = self.next_key_above(self.level, *slot + 1);
                self.lost.push((from, to));
            }
            self.level -= 1;
            self.path[self.level] = Some((child, 0));
            if empty {
                self.next_or_up()?;
            }
        }
        if !self.end {
            self.update_key()?;
        }
        Ok(())
    }

    /// The first key after the pointer before `slot` at `level`: the key at
    /// `slot` there, or the next one up the path (none at the end).
    fn next_key_above(&self, level: usize, slot: usize) -> Option<Key> {
        let (b, _) = self.path.get(level)?.as_ref()?;
        if let Some(k) = b.key(slot) {
            return Some(k);
        }
        (level + 1..=self.root_level).find_map(|l| {
            let (b, s) = self.path.get(l)?.as_ref()?;
            b.key(*s + 1)
        })
    }

    /// Whether `key` lies under a block this tree lost.
    fn lost_at(&self, key: &Key) -> bool {
        self.lost
            .iter()
            .any(|(from, to)| key >= from && to.is_none_or(|t| *key < t))
    }

    fn next_or_up(&mut self) -> Result<(), DiffError> {
        let level = self.level;
        let Some(Some((b, slot))) = self.path.get_mut(level) else {
            return Err(DiffError::Lost);
        };
        *slot += 1;
        let mut n = b.nritems();
        let mut cur = *slot;
        while cur >= n {
            if self.level == self.root_level {
                self.end = true;
                return Ok(());
            }
            self.path[self.level] = None;
            self.level += 1;
            let Some(Some((b, slot))) = self.path.get_mut(self.level) else {
                return Err(DiffError::Lost);
            };
            *slot += 1;
            n = b.nritems();
            cur = *slot;
        }
        Ok(())
    }

    fn item(&self) -> Result<(Item, usize), DiffError> {
        let (b, slot) = self.at(0)?;
        let item = Item::at(b, *slot).ok_or(DiffError::NoItem {
            block: b.bytenr(),
            slot: *slot,
        })?;
        Ok((item, *slot))
    }
}

/// Calls `f` for every item that differs between `left` (the send
/// snapshot) and `right` (the parent), and for the same items of leaves
/// it had to read, in key order. The first error of `f` stops the walk
/// and is returned; the walk's own errors become `E` through
/// [`From<DiffError>`].
pub fn compare_trees<E, F>(left: Tree<'_>, right: Tree<'_>, mut f: F) -> Result<(), E>
where
    E: From<DiffError>,
    F: FnMut(Key, Change, Option<Side<'_>>, Option<Side<'_>>) -> Result<(), E>,
{
    let mut l = Walker::new(left)?;
    let mut r = Walker::new(right)?;
    let mut adv_l = Advance::None;
    let mut adv_r = Advance::None;
    loop {
        if adv_l != Advance::None && !l.end {
            l.advance(adv_l == Advance::Normal)?;
        }
        adv_l = Advance::None;
        if adv_r != Advance::None && !r.end {
            r.advance(adv_r == Advance::Normal)?;
        }
        adv_r = Advance::None;

        if l.end && r.end {
            return Ok(());
        }
        if l.end {
            if r.level == 0 {
                let (item, slot) = r.item()?;
                if !l.lost_at(&item.key) {
                    f(
                        item.key,
                        Change::Deleted,
                        None,
                        Some(Side { item: &item, slot }),
                    )?;
                }
            }
            adv_r = Advance::Normal;
            continue;
        }
        if r.end {
            if l.level == 0 {
                let (item, slot) = l.item()?;
                f(
                    item.key,
                    Change::New,
                    Some(Side { item: &item, slot }),
                    None,
                )?;
            }
            adv_l = Advance::Normal;
            continue;
        }
        if l.level == 0 && r.level == 0 {
            let (li, ls) = l.item()?;
            let (ri, rs) = r.item()?;
            match li.key.cmp(&ri.key) {
                std::cmp::Ordering::Less => {
                    f(
                        li.key,
                        Change::New,
                        Some(Side {
                            item: &li,
                            slot: ls,
                        }),
                        None,
                    )?;
                    adv_l = Advance::Normal;
                }
                std::cmp::Ordering::Greater => {
                    if !l.lost_at(&ri.key) {
                        f(
                            ri.key,
                            Change::Deleted,
                            None,
                            Some(Side {
                                item: &ri,
                                slot: rs,
                            }),
                        )?;
                    }
                    adv_r = Advance::Normal;
                }
                std::cmp::Ordering::Equal => {
                    let c = if li.data() == ri.data() {
                        Change::Same
                    } else {
                        Change::Changed
                    };
                    f(
                        li.key,
                        c,
                        Some(Side {
                            item: &li,
                            slot: ls,
                        }),
                        Some(Side {
                            item: &ri,
                            slot: rs,
                        }),
                    )?;
                    adv_l = Advance::Normal;
                    adv_r = Advance::Normal;
                }
            }
        } else if l.level == r.level {
            match l.key.cmp(&r.key) {
                std::cmp::Ordering::Less => adv_l = Advance::Normal,
                std::cmp::Ordering::Greater => adv_r = Advance::Normal,
                std::cmp::Ordering::Equal => {
                    if l.ptr()? == r.ptr()? {
                        adv_l = Advance::OnlyNext;
                        adv_r = Advance::OnlyNext;
                    } else {
                        adv_l = Advance::Normal;
                        adv_r = Advance::Normal;
                    }
                }
            }
        } else if l.level < r.level {
            adv_r = Advance::Normal;
        } else {
            adv_l = Advance::Normal;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{Expect, KeyPtr};
    use crate::csum::CsumType;
    use crate::mem::MemBlocks;
    use crate::tree::BlockSource;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use uuid::Uuid;

    const NODESIZE: usize = 4096;
    const TREE: u64 = 5;

    /// Counts the blocks read, to show shared subtrees are skipped.
    struct Counting {
        inner: MemBlocks,
        reads: AtomicUsize,
    }

    impl BlockSource for Counting {
        fn tree_block(&self, e: &Expect) -> crate::Result<Block> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.inner.tree_block(e)
        }
    }

    /// Builds trees in memory; a node over the same children as an earlier
    /// one is that node, as copy-on-write leaves unchanged subtrees shared.
    struct Builder {
        m: MemBlocks,
        next: u64,
        nodes: std::collections::HashMap<Vec<u64>, KeyPtr>,
    }

    impl Builder {
        fn alloc(&mut self) -> u64 {
            self.next += NODESIZE as u64;
            self.next
        }
        fn leaf(&mut self, gen: u64, items: &[(Key, Vec<u8>)]) -> KeyPtr {
            let at = self.alloc();
            let refs: Vec<(Key, &[u8])> = items.iter().map(|(k, v)| (*k, &v[..])).collect();
            self.m.leaf(at, gen, TREE, &refs).unwrap()
        }
        /// Nodes above `leaves`, `fanout` pointers each; returns the root and its level.
        fn nodes(&mut self, gen: u64, mut ptrs: Vec<KeyPtr>, fanout: usize) -> (KeyPtr, u8) {
            let mut level = 0;
            while ptrs.len() > 1 {
                level += 1;
                ptrs = ptrs
                    .chunks(fanout)
                    .map(|c| {
                        let children: Vec<u64> = c.iter().map(|p| p.blockptr).collect();
                        if let Some(p) = self.nodes.get(&children) {
                            return *p;
                        }
                        let at = self.alloc();
                        let p = self.m.node(at, gen, TREE, level, c).unwrap();
                        self.nodes.insert(children, p);
                        p
                    })
                    .collect();
            }
            (ptrs[0], level)
        }
    }

    fn key(i: u64) -> Key {
        Key::new(256 + i, 1, 0)
    }

    #[test]
    fn reports_exactly_the_difference_and_skips_shared_subtrees() {
        let mut b = Builder {
            m: MemBlocks::new(NODESIZE, Uuid::from_u128(7), CsumType::Crc32c),
            next: 1 << 20,
            nodes: Default::default(),
        };
        let old: Vec<(Key, Vec<u8>)> = (0..400).map(|i| (key(i), vec![i as u8; 20])).collect();
        let chunks: Vec<Vec<(Key, Vec<u8>)>> = old.chunks(10).map(<[_]>::to_vec).collect();
        let old_leaves: Vec<KeyPtr> = chunks.iter().map(|c| b.leaf(1, c)).collect();
        // The new tree shares every leaf but two: one with a changed and a
        // deleted item, one with an item added.
        let mut new_leaves = old_leaves.clone();
        let mut changed = chunks[7].clone();
        changed[3].1 = vec![0xee; 20];
        changed.remove(5);
        new_leaves[7] = b.leaf(2, &changed);
        let mut grown = chunks[31].clone();
        grown.push((Key::new(256 + 319, 12, 0), b"new".to_vec()));
        new_leaves[31] = b.leaf(2, &grown);
        let (old_root, old_level) = b.nodes(1, old_leaves, 4);
        let (new_root, new_level) = b.nodes(2, new_leaves.clone(), 4);
        assert!(old_level >= 2 && new_level >= 2);
        let src = Counting {
            inner: b.m,
            reads: AtomicUsize::new(0),
        };
        let left = Tree::new(
            &src,
            TREE,
            new_root.blockptr,
            new_root.generation,
            new_level,
        );
        let right = Tree::new(
            &src,
            TREE,
            old_root.blockptr,
            old_root.generation,
            old_level,
        );

        let mut got = Vec::new();
        compare_trees::<DiffError, _>(left, right, |k, c, l, r| {
            got.push((k, c, l.map(|s| s.item.data().to_vec()), r.is_some()));
            Ok(())
        })
        .map_err(|_| "compare failed")
        .unwrap();

        let want_old: BTreeMap<Key, Vec<u8>> = old.iter().cloned().collect();
        let mut want_new = want_old.clone();
        want_new.insert(changed[3].0, vec![0xee; 20]);
        want_new.remove(&chunks[7][5].0);
        want_new.insert(Key::new(256 + 319, 12, 0), b"new".to_vec());
        let differing: Vec<(Key, Change)> = got
            .iter()
            .filter(|g| g.1 != Change::Same)
            .map(|g| (g.0, g.1))
            .collect();
        assert_eq!(
            differing,
            vec![
                (changed[3].0, Change::Changed),
                (chunks[7][5].0, Change::Deleted),
                (Key::new(256 + 319, 12, 0), Change::New),
            ]
        );
        // Same items come only from the leaves that had to be read: the two
        // changed ones, and the one after the grown leaf, which the walk
        // enters on one side while the other is still in the grown leaf
        // (as the kernel's walk does).
        let same = got.iter().filter(|g| g.1 == Change::Same).count();
        assert_eq!(same, (10 - 2) + 10 + 10);
        for (k, c, l, r) in &got {
            match c {
                Change::New => assert_eq!(l.as_ref(), want_new.get(k)),
                Change::Deleted => assert!(*r && l.is_none()),
                _ => assert_eq!(l.as_ref(), want_new.get(k)),
            }
        }
        // The roots, the nodes on the changed paths and those leaves on
        // each side: far fewer than the 40 leaves and 14 nodes of each tree.
        let reads = src.reads.load(Ordering::Relaxed);
        assert!(
            reads <= 2 * (1 + 3 * new_level as usize + 3),
            "{reads} blocks read"
        );
        assert!(reads < 40, "{reads} blocks read");
    }

    #[test]
    fn trees_of_different_heights_compare_item_by_item() {
        let mut b = Builder {
            m: MemBlocks::new(NODESIZE, Uuid::from_u128(7), CsumType::Crc32c),
            next: 1 << 20,
            nodes: Default::default(),
        };
        let small: Vec<(Key, Vec<u8>)> = (0..5).map(|i| (key(i * 2), vec![1])).collect();
        let big: Vec<(Key, Vec<u8>)> = (0..50).map(|i| (key(i), vec![1])).collect();
        let small_leaf = b.leaf(1, &small);
        let leaves: Vec<KeyPtr> = big.chunks(6).map(|c| b.leaf(2, c)).collect();
        let (big_root, big_level) = b.nodes(2, leaves, 3);
        let src = b.m;
        let left = Tree::new(
            &src,
            TREE,
            big_root.blockptr,
            big_root.generation,
            big_level,
        );
        let right = Tree::new(&src, TREE, small_leaf.blockptr, small_leaf.generation, 0);
        let mut got = Vec::new();
        compare_trees::<DiffError, _>(left, right, |k, c, _, _| {
            got.push((k, c));
            Ok(())
        })
        .map_err(|_| "compare failed")
        .unwrap();
        let want: Vec<(Key, Change)> = (0..50)
            .map(|i| {
                let c = if i % 2 == 0 && i < 10 {
                    Change::Same
                } else {
                    Change::New
                };
                (key(i), c)
            })
            .collect();
        assert_eq!(got, want);
    }
}
