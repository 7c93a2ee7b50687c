//! Searching and iterating a tree: point lookups, ranges and cursors over
//! blocks read through a [`BlockSource`].

use crate::block::{Block, BlockSource, Expect};
use crate::error::{Error, Result, TreeBlockError};
use crate::key::Key;

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
            generation: self.generation,
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
            generation: ptr.generation,
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
            if b.is_leaf() {
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
            if b.is_leaf() {
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
            while !b.is_leaf() {
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
