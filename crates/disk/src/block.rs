//! Tree blocks (nodes and leaves): their layout, their validation (with
//! [`BlockError`], why a copy is refused) and the block cache. Tree code
//! reads them through [`crate::tree::BlockSource`].

use std::sync::Arc;

use uuid::Uuid;

use crate::bytes::{u32_at, u64_at, u8_at, uuid_at};
use crate::csum::CsumType;
use crate::key::Key;

/// Size of a tree block header.
pub const HEADER_SIZE: usize = 0x65;
/// Size of a leaf item record.
pub const ITEM_SIZE: usize = 25;
/// Size of a node key pointer.
pub const KEY_PTR_SIZE: usize = 33;
/// Tree levels go from 0 (leaf) to 7.
pub const MAX_LEVEL: u8 = 8;

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

    pub(crate) fn item_span(&self, i: usize) -> Option<(Key, usize, usize)> {
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
    pub(crate) fn lower_bound(&self, key: &Key) -> usize {
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
    pub(crate) fn last_le(&self, key: &Key) -> Option<usize> {
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

/// The generation a block must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// Exactly this one: what a parent pointer or root item records.
    Exactly(u64),
    /// At most this one: a block reached through an extent backref (no
    /// parent records its generation) of a tree read as of this generation.
    /// A newer block was written after that commit, over the one meant.
    AtMost(u64),
}

/// What a block read from a parent pointer (or a root) must look like.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Logical address.
    pub logical: u64,
    /// The generation it must have.
    pub generation: Generation,
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
) -> std::result::Result<(), BlockError> {
    let nodesize = data.len();
    let too_small = BlockError::TooSmall { len: nodesize };
    if nodesize < HEADER_SIZE + ITEM_SIZE {
        return Err(too_small);
    }
    let (Some(stored), Some(body)) = (data.get(..32), data.get(32..)) else {
        return Err(too_small);
    };
    if !csum.verify(body, stored) {
        return Err(BlockError::CsumMismatch { csum: csum.name() });
    }
    let bytenr = u64_at(data, 0x30).unwrap_or(0);
    if bytenr != logical {
        return Err(BlockError::WrongBytenr { found: bytenr });
    }
    let hfsid = uuid_at(data, 0x20).unwrap_or_default();
    if hfsid != *fsid {
        return Err(BlockError::WrongFsid {
            found: hfsid,
            expected: *fsid,
        });
    }
    let level = u8_at(data, 0x64).unwrap_or(u8::MAX);
    if level >= MAX_LEVEL {
        return Err(BlockError::BadLevel { level });
    }
    let n = u32_at(data, 0x60).unwrap_or(u32::MAX) as usize;
    if level == 0 {
        if n > (nodesize - HEADER_SIZE) / ITEM_SIZE {
            return Err(BlockError::TooManyItems { nritems: n });
        }
        // Item data is packed from the end backwards, each item right before the previous.
        let mut end = nodesize - HEADER_SIZE;
        let mut prev: Option<Key> = None;
        let items_end = HEADER_SIZE + ITEM_SIZE * n;
        for i in 0..n {
            let o = HEADER_SIZE + ITEM_SIZE * i;
            let key = Key::parse(data, o).ok_or(BlockError::TruncatedItem { index: i })?;
            let off = u32_at(data, o + 17).unwrap_or(u32::MAX) as usize;
            let len = u32_at(data, o + 21).unwrap_or(u32::MAX) as usize;
            if off.checked_add(len) != Some(end) {
                return Err(BlockError::MisplacedData {
                    index: i,
                    key,
                    offset: off,
                    len,
                    end,
                });
            }
            if HEADER_SIZE + off < items_end {
                return Err(BlockError::DataOverlapsItems { index: i, key });
            }
            if prev.is_some_and(|p| p >= key) {
                return Err(BlockError::ItemOutOfOrder { index: i, key });
            }
            prev = Some(key);
            end = off;
        }
    } else {
        if n == 0 || n > (nodesize - HEADER_SIZE) / KEY_PTR_SIZE {
            return Err(BlockError::BadPointerCount { nritems: n });
        }
        let mut prev: Option<Key> = None;
        for i in 0..n {
            let key = Key::parse(data, HEADER_SIZE + KEY_PTR_SIZE * i)
                .ok_or(BlockError::TruncatedPointer { index: i })?;
            if prev.is_some_and(|p| p >= key) {
                return Err(BlockError::PointerOutOfOrder { index: i, key });
            }
            prev = Some(key);
        }
    }
    Ok(())
}

/// Checks what the parent says about a validated block.
pub(crate) fn check_expect(b: &Block, e: &Expect) -> std::result::Result<(), BlockError> {
    match e.generation {
        Generation::Exactly(expected) if expected != b.generation() => {
            return Err(BlockError::WrongGeneration {
                found: b.generation(),
                expected,
            });
        }
        Generation::AtMost(newest) if b.generation() > newest => {
            return Err(BlockError::NewerThanCommit {
                found: b.generation(),
                newest,
            });
        }
        _ => {}
    }
    if b.level() != e.level {
        return Err(BlockError::WrongLevel {
            found: b.level(),
            expected: e.level,
        });
    }
    if let Some(expected) = e.first_key {
        match b.key(0) {
            Some(first) if first == expected => {}
            Some(found) => return Err(BlockError::WrongFirstKey { found, expected }),
            None => return Err(BlockError::Empty { expected }),
        }
    }
    Ok(())
}

impl Block {
    /// What a rescue read gives for a block no copy of which is valid: a
    /// block at `logical` of `level` with no items or pointers, which
    /// walks pass over as an empty subtree.
    pub(crate) fn stand_in(e: &Expect, generation: u64, nodesize: usize, fsid: &Uuid) -> Block {
        let mut raw = vec![0u8; nodesize.max(HEADER_SIZE)];
        raw[0x20..0x30].copy_from_slice(fsid.as_bytes());
        raw[0x30..0x38].copy_from_slice(&e.logical.to_le_bytes());
        raw[0x50..0x58].copy_from_slice(&generation.to_le_bytes());
        raw[0x58..0x60].copy_from_slice(&e.tree.to_le_bytes());
        raw[0x64] = e.level;
        Block { data: raw.into() }
    }

    /// Whether it holds nothing: an empty leaf, or a rescue's stand-in.
    pub fn is_empty(&self) -> bool {
        self.nritems() == 0
    }
}

impl Block {
    /// The block `data` held at `e.logical` of filesystem `fsid` (checksums
    /// of type `csum`), validated as a block read from a device is and
    /// matching what `e` expects of it: for blocks kept outside the
    /// filesystem (in memory, in a file).
    pub fn check(
        data: Arc<[u8]>,
        e: &Expect,
        fsid: &Uuid,
        csum: CsumType,
    ) -> std::result::Result<Block, BlockError> {
        let b = Block::validated(data, e.logical, fsid, csum)?;
        b.expect(e)?;
        Ok(b)
    }

    /// The block `data` held at `logical`, validated (checksum, bytenr,
    /// fsid, layout), to be matched later against what a pointer expects
    /// ([`Block::expect`]).
    pub fn validated(
        data: Arc<[u8]>,
        logical: u64,
        fsid: &Uuid,
        csum: CsumType,
    ) -> std::result::Result<Block, BlockError> {
        validate(&data, logical, fsid, csum)?;
        Ok(Block { data })
    }

    /// Whether it is the block `e` expects (generation, level, first key).
    pub fn expect(&self, e: &Expect) -> std::result::Result<(), BlockError> {
        check_expect(self, e)
    }

    pub(crate) fn from_validated(data: Arc<[u8]>) -> Block {
        Block { data }
    }
    /// Its bytes, shared.
    pub fn bytes_arc(&self) -> Arc<[u8]> {
        self.data.clone()
    }
}

/// An LRU cache of tree blocks bounded in bytes.
///
/// The most recent hit is remembered for a fast repeat lookup; evicting or
/// removing another entry keeps it, only removing that very entry drops it.
pub(crate) struct BlockCache {
    /// Blocks kept whatever the bound (the root blocks of trees being read).
    pinned: std::collections::HashMap<u64, Arc<[u8]>>,
    lru: lru::LruCache<u64, Arc<[u8]>>,
    bytes: usize,
    cap: usize,
    last: Option<(u64, Arc<[u8]>)>,
}

impl BlockCache {
    pub(crate) fn new(cap_bytes: usize) -> BlockCache {
        BlockCache {
            pinned: std::collections::HashMap::new(),
            lru: lru::LruCache::unbounded(),
            bytes: 0,
            cap: cap_bytes,
            last: None,
        }
    }

    /// Keeps `data` at `logical` until [`BlockCache::unpin`]; returns
    /// whether it was not pinned already.
    pub(crate) fn pin(&mut self, logical: u64, data: Arc<[u8]>) -> bool {
        self.pinned.insert(logical, data).is_none()
    }

    /// Stops keeping the block at `logical`.
    pub(crate) fn unpin(&mut self, logical: u64) {
        self.pinned.remove(&logical);
    }

    pub(crate) fn get(&mut self, logical: u64) -> Option<Arc<[u8]>> {
        if let Some(v) = self.pinned.get(&logical) {
            return Some(v.clone());
        }
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

/// Why a tree block copy is refused (see [`crate::block`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// Smaller than a header and one item.
    #[error("block too small")]
    TooSmall {
        /// Its size.
        len: usize,
    },
    /// The checksum does not match.
    #[error("{csum} checksum mismatch")]
    CsumMismatch {
        /// The checksum algorithm.
        csum: &'static str,
    },
    /// The header records another address.
    #[error("header bytenr is {found}")]
    WrongBytenr {
        /// The header's bytenr.
        found: u64,
    },
    /// The header belongs to another filesystem.
    #[error("header fsid {found} is not {expected}")]
    WrongFsid {
        /// The header's fsid.
        found: Uuid,
        /// The filesystem's metadata fsid.
        expected: Uuid,
    },
    /// A level of 8 or more.
    #[error("level {level}")]
    BadLevel {
        /// The level.
        level: u8,
    },
    /// A leaf with more items than fit.
    #[error("leaf has {nritems} items")]
    TooManyItems {
        /// nritems.
        nritems: usize,
    },
    /// An item header past the end.
    #[error("item {index} is truncated")]
    TruncatedItem {
        /// The item's index.
        index: usize,
    },
    /// Item data not packed right before the previous item's.
    #[error("item {index} {key} data at {offset}+{len} does not end at {end}")]
    MisplacedData {
        /// The item's index.
        index: usize,
        /// Its key.
        key: Key,
        /// Its data offset.
        offset: usize,
        /// Its data size.
        len: usize,
        /// Where its data should end.
        end: usize,
    },
    /// Item data overlapping the item headers.
    #[error("item {index} {key} data overlaps the item array")]
    DataOverlapsItems {
        /// The item's index.
        index: usize,
        /// Its key.
        key: Key,
    },
    /// An item key not above the previous one.
    #[error("item {index} {key} is out of order")]
    ItemOutOfOrder {
        /// The item's index.
        index: usize,
        /// Its key.
        key: Key,
    },
    /// A node with no pointers or more than fit.
    #[error("node has {nritems} pointers")]
    BadPointerCount {
        /// nritems.
        nritems: usize,
    },
    /// A key pointer past the end.
    #[error("pointer {index} is truncated")]
    TruncatedPointer {
        /// The pointer's index.
        index: usize,
    },
    /// A pointer key not above the previous one.
    #[error("pointer {index} {key} is out of order")]
    PointerOutOfOrder {
        /// The pointer's index.
        index: usize,
        /// Its key.
        key: Key,
    },
    /// Another generation than the parent records.
    #[error("generation {found} where the parent says {expected}")]
    WrongGeneration {
        /// The block's generation.
        found: u64,
        /// The parent's.
        expected: u64,
    },
    /// Newer than the commit its tree is read as of (see
    /// [`crate::block::Generation::AtMost`]).
    #[error("generation {found}, newer than the commit {newest} its tree is read at")]
    NewerThanCommit {
        /// The block's generation.
        found: u64,
        /// The newest it may have.
        newest: u64,
    },
    /// Another level than the parent implies.
    #[error("level {found} where {expected} was expected")]
    WrongLevel {
        /// The block's level.
        found: u8,
        /// The expected one.
        expected: u8,
    },
    /// Another first key than the parent's.
    #[error("first key {found} where the parent says {expected}")]
    WrongFirstKey {
        /// The block's first key.
        found: Key,
        /// The parent's key.
        expected: Key,
    },
    /// No key where the parent has one.
    #[error("empty block where the parent says first key {expected}")]
    Empty {
        /// The parent's key.
        expected: Key,
    },
}

impl BlockError {
    /// Whether the block is valid but newer than the one meant.
    pub fn is_overwritten(&self) -> bool {
        match *self {
            BlockError::WrongGeneration { found, expected } => found > expected,
            BlockError::NewerThanCommit { .. } => true,
            _ => false,
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
    fn a_newer_block_than_expected_is_told_apart_from_a_stale_or_damaged_one() {
        use crate::error::{MirrorFault, MirrorRefusal, TreeBlockError};
        let mut data = vec![0u8; 4096];
        data[0x50..0x58].copy_from_slice(&9u64.to_le_bytes());
        let b = Block::from_validated(Arc::from(data));
        let e = |generation| Expect {
            logical: 4096,
            generation,
            level: 0,
            first_key: None,
            tree: 7,
        };
        let check = |g| check_expect(&b, &e(g));
        assert!(check(Generation::Exactly(9)).is_ok());
        assert!(check(Generation::AtMost(9)).is_ok());
        assert!(check(Generation::AtMost(12)).is_ok());
        let newer = check(Generation::Exactly(5)).unwrap_err();
        assert!(newer.is_overwritten(), "{newer}");
        let newer = check(Generation::AtMost(8)).unwrap_err();
        assert!(newer.is_overwritten(), "{newer}");
        let older = check(Generation::Exactly(12)).unwrap_err();
        assert!(!older.is_overwritten(), "a lost write is damage: {older}");
        let csum = BlockError::CsumMismatch { csum: "crc32c" };
        assert!(!csum.is_overwritten());
        // One copy written over is enough; the error says where.
        let refuse = |mirror, b| MirrorRefusal {
            mirror,
            reason: MirrorFault::Invalid(b),
        };
        let err = |v| crate::Error::BadTreeBlock {
            logical: 4096,
            tree: 7,
            reason: TreeBlockError::Mirrors(v),
        };
        assert!(err(vec![refuse(1, csum), refuse(2, newer)]).is_overwritten());
        assert!(!err(vec![refuse(1, csum), refuse(2, older)]).is_overwritten());
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
}
