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

use super::inode::Stop;
use btrfs_disk::block::Block;
use btrfs_disk::tree::Item;
use btrfs_disk::{Key, Tree};

/// How an item differs between the two trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    New,
    Deleted,
    Changed,
    Same,
}

/// An item and its slot in its leaf.
pub(crate) struct Side<'a> {
    pub(crate) item: &'a Item,
    pub(crate) slot: usize,
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
    fn new(tree: Tree<'fs>) -> Result<Walker<'fs>, Stop> {
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
        })
    }

    fn at(&self, level: usize) -> Result<&(Block, usize), Stop> {
        self.path
            .get(level)
            .and_then(Option::as_ref)
            .ok_or_else(|| Stop::Bad("tree compare lost its position".into()))
    }

    fn update_key(&mut self) -> Result<(), Stop> {
        let (b, slot) = self.at(self.level)?;
        self.key = b
            .key(*slot)
            .ok_or_else(|| Stop::Bad(format!("tree block {} has no key {slot}", b.bytenr())))?;
        Ok(())
    }

    /// The node pointer at the current level and slot: (blockptr, generation).
    fn ptr(&self) -> Result<(u64, u64), Stop> {
        let (b, slot) = self.at(self.level)?;
        let p = b
            .key_ptr(*slot)
            .ok_or_else(|| Stop::Bad(format!("tree block {} has no pointer {slot}", b.bytenr())))?;
        Ok((p.blockptr, p.generation))
    }

    /// tree_advance: down into the child, or to the next slot (up as needed).
    fn advance(&mut self, allow_down: bool) -> Result<(), Stop> {
        if self.level == 0 || !allow_down {
            self.next_or_up()?;
        } else {
            let (b, slot) = self.at(self.level)?;
            let child = self.tree.child(b, *slot)?;
            self.level -= 1;
            self.path[self.level] = Some((child, 0));
        }
        if !self.end {
            self.update_key()?;
        }
        Ok(())
    }

    fn next_or_up(&mut self) -> Result<(), Stop> {
        let level = self.level;
        let Some(Some((b, slot))) = self.path.get_mut(level) else {
            return Err(Stop::Bad("tree compare lost its position".into()));
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
                return Err(Stop::Bad("tree compare lost its position".into()));
            };
            *slot += 1;
            n = b.nritems();
            cur = *slot;
        }
        Ok(())
    }

    fn item(&self) -> Result<(Item, usize), Stop> {
        let (b, slot) = self.at(0)?;
        let item = Item::at(b, *slot)
            .ok_or_else(|| Stop::Bad(format!("leaf {} has no item {slot}", b.bytenr())))?;
        Ok((item, *slot))
    }
}

/// Calls `f` for every item that differs between `left` (the send
/// snapshot) and `right` (the parent), and for the same items of leaves
/// it had to read, in key order.
pub(crate) fn compare_trees<F>(left: Tree<'_>, right: Tree<'_>, mut f: F) -> Result<(), Stop>
where
    F: FnMut(Key, Change, Option<Side<'_>>, Option<Side<'_>>) -> Result<(), Stop>,
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
                f(
                    item.key,
                    Change::Deleted,
                    None,
                    Some(Side { item: &item, slot }),
                )?;
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
                    f(
                        ri.key,
                        Change::Deleted,
                        None,
                        Some(Side {
                            item: &ri,
                            slot: rs,
                        }),
                    )?;
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
