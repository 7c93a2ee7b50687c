//! Trees held in memory: valid blocks built from items or key pointers, and
//! a [`BlockSource`] over any blocks, so tree code can be tested and fuzzed
//! without an image.

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::block::{Block, Expect, KeyPtr, HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use crate::csum::CsumType;
use crate::error::{Error, Result, TreeBlockError};
use crate::key::Key;
use crate::tree::BlockSource;

/// Tree blocks in memory, by logical address, validated when read as a
/// filesystem's blocks are.
pub struct MemBlocks {
    nodesize: usize,
    fsid: Uuid,
    csum: CsumType,
    blocks: HashMap<u64, Arc<[u8]>>,
}

impl MemBlocks {
    /// No blocks yet, of `nodesize` bytes, for filesystem `fsid` with `csum`.
    pub fn new(nodesize: usize, fsid: Uuid, csum: CsumType) -> MemBlocks {
        MemBlocks {
            nodesize,
            fsid,
            csum,
            blocks: HashMap::new(),
        }
    }

    /// Stores `bytes` as the block at `logical`, as they are (they may be invalid).
    pub fn insert_raw(&mut self, logical: u64, bytes: Vec<u8>) {
        self.blocks.insert(logical, Arc::from(bytes));
    }

    /// Builds a leaf at `logical` holding `items` (in the order given) and
    /// returns the pointer a parent would hold to it; `None` when they do
    /// not fit in one block.
    pub fn leaf(
        &mut self,
        logical: u64,
        generation: u64,
        owner: u64,
        items: &[(Key, &[u8])],
    ) -> Option<KeyPtr> {
        let mut b = self.header(logical, generation, owner, 0, items.len())?;
        let mut end = self.nodesize - HEADER_SIZE;
        for (i, (key, data)) in items.iter().enumerate() {
            let o = HEADER_SIZE + ITEM_SIZE * i;
            end = end.checked_sub(data.len())?;
            if HEADER_SIZE + end < HEADER_SIZE + ITEM_SIZE * items.len() {
                return None;
            }
            put_key(&mut b, o, key);
            b[o + 17..o + 21].copy_from_slice(&(end as u32).to_le_bytes());
            b[o + 21..o + 25].copy_from_slice(&(data.len() as u32).to_le_bytes());
            b[HEADER_SIZE + end..HEADER_SIZE + end + data.len()].copy_from_slice(data);
        }
        let first = items.first().map(|(k, _)| *k).unwrap_or_default();
        Some(self.seal(logical, generation, first, b))
    }

    /// Builds a node of `level` at `logical` pointing to `children`; `None`
    /// when they do not fit.
    pub fn node(
        &mut self,
        logical: u64,
        generation: u64,
        owner: u64,
        level: u8,
        children: &[KeyPtr],
    ) -> Option<KeyPtr> {
        let mut b = self.header(logical, generation, owner, level, children.len())?;
        if HEADER_SIZE + KEY_PTR_SIZE * children.len() > self.nodesize {
            return None;
        }
        for (i, p) in children.iter().enumerate() {
            let o = HEADER_SIZE + KEY_PTR_SIZE * i;
            put_key(&mut b, o, &p.key);
            b[o + 17..o + 25].copy_from_slice(&p.blockptr.to_le_bytes());
            b[o + 25..o + 33].copy_from_slice(&p.generation.to_le_bytes());
        }
        let first = children.first().map(|p| p.key).unwrap_or_default();
        Some(self.seal(logical, generation, first, b))
    }

    fn header(
        &self,
        logical: u64,
        generation: u64,
        owner: u64,
        level: u8,
        n: usize,
    ) -> Option<Vec<u8>> {
        let mut b = vec![0u8; self.nodesize];
        if self.nodesize < HEADER_SIZE {
            return None;
        }
        b[0x20..0x30].copy_from_slice(self.fsid.as_bytes());
        b[0x30..0x38].copy_from_slice(&logical.to_le_bytes());
        b[0x50..0x58].copy_from_slice(&generation.to_le_bytes());
        b[0x58..0x60].copy_from_slice(&owner.to_le_bytes());
        b[0x60..0x64].copy_from_slice(&u32::try_from(n).ok()?.to_le_bytes());
        b[0x64] = level;
        Some(b)
    }

    fn seal(&mut self, logical: u64, generation: u64, first: Key, mut b: Vec<u8>) -> KeyPtr {
        set_csum(self.csum, &mut b);
        self.insert_raw(logical, b);
        KeyPtr {
            key: first,
            blockptr: logical,
            generation,
        }
    }
}

/// Writes the checksum of a block (of everything after its 32-byte
/// checksum field) into that field.
pub fn set_csum(csum: CsumType, block: &mut [u8]) {
    if block.len() < 32 {
        return;
    }
    let sum = csum.compute(&block[32..]);
    block[..32].copy_from_slice(&sum);
}

fn put_key(b: &mut [u8], o: usize, key: &Key) {
    b[o..o + 8].copy_from_slice(&key.objectid.to_le_bytes());
    b[o + 8] = key.item_type;
    b[o + 9..o + 17].copy_from_slice(&key.offset.to_le_bytes());
}

impl BlockSource for MemBlocks {
    fn tree_block(&self, e: &Expect) -> Result<Block> {
        let bad = |reason: TreeBlockError| Error::BadTreeBlock {
            logical: e.logical,
            tree: e.tree,
            reason,
        };
        let data = self
            .blocks
            .get(&e.logical)
            .ok_or_else(|| bad(TreeBlockError::Missing))?;
        Block::check(data.clone(), e, &self.fsid, self.csum)
            .map_err(|r| bad(TreeBlockError::Invalid(Box::new(r))))
    }
}
