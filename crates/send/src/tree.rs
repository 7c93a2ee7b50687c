//! B-tree blocks (nodes and leaves), their validation, the block cache, and
//! searching and iterating a tree.

use std::sync::Arc;

use uuid::Uuid;

use crate::bytes::{u32_at, u64_at, u8_at, uuid_at};
use crate::csum::CsumType;
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// Size of a tree block header.
pub const HEADER_SIZE: usize = 0x65;
/// Size of a leaf item record.
pub const ITEM_SIZE: usize = 25;
/// Size of a node key pointer.
pub const KEY_PTR_SIZE: usize = 33;
/// Size of an on-disk key.
pub const DISK_KEY_SIZE: usize = 17;
/// Tree levels go from 0 (leaf) to 7.
pub const MAX_LEVEL: u8 = 8;

/// A btrfs key: items sort by (objectid, item_type, offset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Object id (inode number, tree id, logical address, ...).
    pub objectid: u64,
    /// Item type.
    pub item_type: u8,
    /// Type-specific offset.
    pub offset: u64,
}

impl Key {
    /// A key from its three parts.
    pub const fn new(objectid: u64, item_type: u8, offset: u64) -> Key {
        Key {
            objectid,
            item_type,
            offset,
        }
    }

    /// The smallest key.
    pub const MIN: Key = Key::new(0, 0, 0);
    /// The largest key.
    pub const MAX: Key = Key::new(u64::MAX, u8::MAX, u64::MAX);

    /// Decodes a 17-byte disk key at `off`.
    #[inline]
    pub fn parse(b: &[u8], off: usize) -> Option<Key> {
        Some(Key {
            objectid: u64_at(b, off)?,
            item_type: u8_at(b, off + 8)?,
            offset: u64_at(b, off + 9)?,
        })
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let obj = self.objectid as i64;
        // Negative ids print as progs does for the well-known ones.
        if (-256..0).contains(&obj) {
            write!(f, "({obj} ")?;
        } else {
            write!(f, "({} ", self.objectid)?;
        }
        match crate::items::key_type_name(self.item_type) {
            Some(n) => write!(f, "{n} ")?,
            None => write!(f, "UNKNOWN.{} ", self.item_type)?,
        }
        write!(f, "{})", self.offset)
    }
}

/// A node's pointer to a child block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPtr {
    /// The lowest key in the child.
    pub key: Key,
    /// The child's logical address.
    pub blockptr: u64,
    /// The child's generation.
    pub generation: u64,
}

/// A validated tree block (node or leaf), shared with the cache.
#[derive(Clone)]
pub struct Block {
    data: Arc<[u8]>,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("bytenr", &self.bytenr())
            .field("level", &self.level())
            .field("nritems", &self.nritems())
            .field("generation", &self.generation())
            .field("owner", &self.owner())
            .finish()
    }
}

impl Block {
    fn h64(&self, off: usize) -> u64 {
        u64_at(&self.data, off).unwrap_or(0)
    }
    /// The raw block.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
    /// The fsid in the header.
    pub fn fsid(&self) -> Uuid {
        uuid_at(&self.data, 0x20).unwrap_or_default()
    }
    /// The logical address recorded in the header.
    pub fn bytenr(&self) -> u64 {
        self.h64(0x30)
    }
    /// Header flags.
    pub fn flags(&self) -> u64 {
        self.h64(0x38)
    }
    /// The transid that wrote it.
    pub fn generation(&self) -> u64 {
        self.h64(0x50)
    }
    /// The tree that created it.
    pub fn owner(&self) -> u64 {
        self.h64(0x58)
    }
    /// Number of items or key pointers.
    pub fn nritems(&self) -> usize {
        u32_at(&self.data, 0x60).unwrap_or(0) as usize
    }
    /// 0 for a leaf.
    pub fn level(&self) -> u8 {
        u8_at(&self.data, 0x64).unwrap_or(0)
    }
    /// Whether it is a leaf.
    pub fn is_leaf(&self) -> bool {
        self.level() == 0
    }

    /// The key of item or pointer `i`.
    #[inline]
    pub fn key(&self, i: usize) -> Option<Key> {
        if i >= self.nritems() {
            return None;
        }
        let rec = if self.is_leaf() {
            ITEM_SIZE
        } else {
            KEY_PTR_SIZE
        };
        Key::parse(&self.data, HEADER_SIZE + rec * i)
    }

    /// Leaf item `i`: its key and data.
    #[inline]
    pub fn item(&self, i: usize) -> Option<(Key, &[u8])> {
        let (key, start, len) = self.item_span(i)?;
        Some((key, self.data.get(start..start + len)?))
    }

    fn item_span(&self, i: usize) -> Option<(Key, usize, usize)> {
        if !self.is_leaf() || i >= self.nritems() {
            return None;
        }
        let o = HEADER_SIZE + ITEM_SIZE * i;
        let key = Key::parse(&self.data, o)?;
        let off = u32_at(&self.data, o + 17)? as usize;
        let len = u32_at(&self.data, o + 21)? as usize;
        Some((key, HEADER_SIZE.checked_add(off)?, len))
    }

    /// Node pointer `i`.
    #[inline]
    pub fn key_ptr(&self, i: usize) -> Option<KeyPtr> {
        if self.is_leaf() || i >= self.nritems() {
            return None;
        }
        let o = HEADER_SIZE + KEY_PTR_SIZE * i;
        Some(KeyPtr {
            key: Key::parse(&self.data, o)?,
            blockptr: u64_at(&self.data, o + 17)?,
            generation: u64_at(&self.data, o + 25)?,
        })
    }

    /// Every key pointer of a node (empty for a leaf).
    pub fn key_ptrs(&self) -> impl Iterator<Item = KeyPtr> + '_ {
        (0..if self.is_leaf() { 0 } else { self.nritems() }).filter_map(|i| self.key_ptr(i))
    }

    /// Index of the first item with key ≥ `key` (nritems if none).
    fn lower_bound(&self, key: &Key) -> usize {
        let (mut lo, mut hi) = (0, self.nritems());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid) {
                Some(k) if k < *key => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// Index of the last key ≤ `key`, if any.
    fn last_le(&self, key: &Key) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.nritems());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid) {
                Some(k) if k <= *key => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo.checked_sub(1)
    }
}

/// What a block read from a parent pointer (or a root) must look like.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Logical address.
    pub logical: u64,
    /// Generation the parent records.
    pub generation: u64,
    /// Level the parent implies.
    pub level: u8,
    /// The parent's key for it (none for a root).
    pub first_key: Option<Key>,
    /// The tree being read (for messages).
    pub tree: u64,
}

/// Checks a freshly read block: checksum, bytenr, fsid, level, item layout and key order.
pub(crate) fn validate(
    data: &[u8],
    logical: u64,
    fsid: &Uuid,
    csum: CsumType,
) -> std::result::Result<(), String> {
    let nodesize = data.len();
    if nodesize < HEADER_SIZE + ITEM_SIZE {
        return Err("block too small".into());
    }
    let (Some(stored), Some(body)) = (data.get(..32), data.get(32..)) else {
        return Err("block too small".into());
    };
    if !csum.verify(body, stored) {
        return Err(format!("{} checksum mismatch", csum.name()));
    }
    let bytenr = u64_at(data, 0x30).unwrap_or(0);
    if bytenr != logical {
        return Err(format!("header bytenr is {bytenr}"));
    }
    let hfsid = uuid_at(data, 0x20).unwrap_or_default();
    if hfsid != *fsid {
        return Err(format!("header fsid {hfsid} is not {fsid}"));
    }
    let level = u8_at(data, 0x64).unwrap_or(u8::MAX);
    if level >= MAX_LEVEL {
        return Err(format!("level {level}"));
    }
    let n = u32_at(data, 0x60).unwrap_or(u32::MAX) as usize;
    if level == 0 {
        if n > (nodesize - HEADER_SIZE) / ITEM_SIZE {
            return Err(format!("leaf has {n} items"));
        }
        // Item data is packed from the end backwards, each item right before the previous.
        let mut end = nodesize - HEADER_SIZE;
        let mut prev: Option<Key> = None;
        let items_end = HEADER_SIZE + ITEM_SIZE * n;
        for i in 0..n {
            let o = HEADER_SIZE + ITEM_SIZE * i;
            let key = Key::parse(data, o).ok_or("truncated item")?;
            let off = u32_at(data, o + 17).unwrap_or(u32::MAX) as usize;
            let len = u32_at(data, o + 21).unwrap_or(u32::MAX) as usize;
            if off.checked_add(len) != Some(end) {
                return Err(format!(
                    "item {i} {key} data at {off}+{len} does not end at {end}"
                ));
            }
            if HEADER_SIZE + off < items_end {
                return Err(format!("item {i} {key} data overlaps the item array"));
            }
            if prev.is_some_and(|p| p >= key) {
                return Err(format!("item {i} {key} is out of order"));
            }
            prev = Some(key);
            end = off;
        }
    } else {
        if n == 0 || n > (nodesize - HEADER_SIZE) / KEY_PTR_SIZE {
            return Err(format!("node has {n} pointers"));
        }
        let mut prev: Option<Key> = None;
        for i in 0..n {
            let key =
                Key::parse(data, HEADER_SIZE + KEY_PTR_SIZE * i).ok_or("truncated pointer")?;
            if prev.is_some_and(|p| p >= key) {
                return Err(format!("pointer {i} {key} is out of order"));
            }
            prev = Some(key);
        }
    }
    Ok(())
}

/// Checks what the parent says about a validated block.
pub(crate) fn check_expect(b: &Block, e: &Expect) -> std::result::Result<(), String> {
    if b.generation() != e.generation {
        return Err(format!(
            "generation {} where the parent says {}",
            b.generation(),
            e.generation
        ));
    }
    if b.level() != e.level {
        return Err(format!(
            "level {} where {} was expected",
            b.level(),
            e.level
        ));
    }
    if let Some(k) = e.first_key {
        match b.key(0) {
            Some(first) if first == k => {}
            Some(first) => return Err(format!("first key {first} where the parent says {k}")),
            None => return Err(format!("empty block where the parent says first key {k}")),
        }
    }
    Ok(())
}

impl Block {
    pub(crate) fn from_validated(data: Arc<[u8]>) -> Block {
        Block { data }
    }
    pub(crate) fn bytes_arc(&self) -> Arc<[u8]> {
        self.data.clone()
    }
}

/// An LRU cache of tree blocks bounded in bytes.
///
/// The most recent hit is remembered for a fast repeat lookup; evicting or
/// removing another entry keeps it, only removing that very entry drops it.
pub(crate) struct BlockCache {
    lru: lru::LruCache<u64, Arc<[u8]>>,
    bytes: usize,
    cap: usize,
    last: Option<(u64, Arc<[u8]>)>,
}

impl BlockCache {
    pub(crate) fn new(cap_bytes: usize) -> BlockCache {
        BlockCache {
            lru: lru::LruCache::unbounded(),
            bytes: 0,
            cap: cap_bytes,
            last: None,
        }
    }

    pub(crate) fn get(&mut self, logical: u64) -> Option<Arc<[u8]>> {
        if let Some((k, v)) = &self.last {
            if *k == logical {
                return Some(v.clone());
            }
        }
        let v = self.lru.get(&logical)?.clone();
        self.last = Some((logical, v.clone()));
        Some(v)
    }

    pub(crate) fn insert(&mut self, logical: u64, data: Arc<[u8]>) {
        if let Some(old) = self.lru.put(logical, data.clone()) {
            self.bytes -= old.len();
        }
        self.bytes += data.len();
        if matches!(&self.last, Some((k, _)) if *k == logical) {
            self.last = Some((logical, data));
        }
        while self.bytes > self.cap {
            match self.lru.pop_lru() {
                Some((k, v)) => self.forget(k, &v),
                None => break,
            }
        }
    }

    pub(crate) fn remove(&mut self, logical: u64) {
        if let Some(v) = self.lru.pop(&logical) {
            self.forget(logical, &v);
        } else if matches!(&self.last, Some((k, _)) if *k == logical) {
            self.last = None;
        }
    }

    fn forget(&mut self, logical: u64, v: &Arc<[u8]>) {
        self.bytes -= v.len();
        if matches!(&self.last, Some((k, _)) if *k == logical) {
            self.last = None;
        }
    }

    #[cfg(test)]
    fn last_key(&self) -> Option<u64> {
        self.last.as_ref().map(|(k, _)| *k)
    }
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
    /// The item's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        self.block
            .data
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
    fs: &'fs Filesystem,
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
    pub(crate) fn new(fs: &'fs Filesystem, id: u64, root: u64, generation: u64, level: u8) -> Self {
        Tree {
            fs,
            id,
            root,
            generation,
            level,
        }
    }

    /// The filesystem it belongs to.
    pub fn fs(&self) -> &'fs Filesystem {
        self.fs
    }

    /// The root block.
    pub fn root_block(&self) -> Result<Block> {
        self.fs.tree_block(&Expect {
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
            reason: format!("no pointer {slot}"),
        })?;
        self.fs.tree_block(&Expect {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn arc(n: usize) -> Arc<[u8]> {
        Arc::from(vec![0u8; n])
    }

    #[test]
    fn cache_stays_within_its_byte_bound() {
        let mut c = BlockCache::new(3 * 4096);
        for i in 0..10 {
            c.insert(i, arc(4096));
            assert!(c.bytes <= 3 * 4096);
        }
        assert!(c.get(9).is_some());
        assert!(c.get(0).is_none());
    }

    #[test]
    fn cache_keeps_last_when_another_entry_goes() {
        let mut c = BlockCache::new(3 * 4096);
        c.insert(1, arc(4096));
        c.insert(2, arc(4096));
        c.insert(3, arc(4096));
        assert!(c.get(3).is_some());
        assert_eq!(c.last_key(), Some(3));
        c.remove(1);
        assert_eq!(c.last_key(), Some(3), "removing another entry keeps last");
        c.insert(4, arc(4096));
        c.insert(5, arc(4096));
        assert!(c.bytes <= 3 * 4096);
        c.remove(3);
        assert_eq!(c.last_key(), None, "removing last drops it");
        assert!(c.get(3).is_none());
    }

    #[test]
    fn keys_order_by_objectid_then_type_then_offset() {
        let a = Key::new(1, 200, 0);
        let b = Key::new(2, 1, 0);
        let c = Key::new(2, 1, 5);
        assert!(a < b && b < c);
        assert_eq!(Key::new(256, 1, 0).to_string(), "(256 INODE_ITEM 0)");
        assert_eq!(
            Key::new(-10i64 as u64, 128, 4096).to_string(),
            "(-10 EXTENT_CSUM 4096)"
        );
    }
}
