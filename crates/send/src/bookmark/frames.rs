//! The frames of an open bookmark: decompressed on demand into a bounded
//! cache, their blocks validated once.
//!
//! A send walks the parent's tree in key order, which is the order its
//! blocks were written in (depth first), and reads about a third of them
//! when a percent of the files changed: decompressing them is most of what
//! a send from a bookmark costs more than one from the snapshot (a thread
//! decompressing ahead did not help: a send keeps both cores of a small
//! machine busy). Calls only the on-disk reader's block checks and zstd.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use btrfs_disk::block::Block;
use btrfs_disk::csum::CsumType;
use lru::LruCache;
use uuid::Uuid;

use super::format::{FRAME_BLOCKS, MAX_FRAME_BLOCKS};

/// Bytes of decompressed frames kept.
const CACHE_BYTES: usize = 32 << 20;

/// One block of a frame: validated, or the bytes that failed (checked
/// again when asked for, to tell why).
pub(crate) type Slot = std::result::Result<Block, Arc<[u8]>>;

/// The blocks of one frame, decompressed.
pub(crate) type Frame = Arc<[Slot]>;

/// The frames of a bookmark file.
pub(crate) struct Frames {
    map: memmap2::Mmap,
    /// (offset, length) of every frame, in file order.
    list: Vec<(u64, u32)>,
    nodesize: usize,
    fsid: Uuid,
    csum: CsumType,
    cache: Mutex<LruCache<usize, Frame>>,
    unzip: Mutex<zstd::bulk::Decompressor<'static>>,
}

impl Frames {
    /// The frames at `list` (in file order) of the file mapped as `map`,
    /// holding blocks of `nodesize` of filesystem `fsid` checked with `csum`.
    pub(crate) fn new(
        map: memmap2::Mmap,
        list: Vec<(u64, u32)>,
        nodesize: usize,
        fsid: Uuid,
        csum: CsumType,
    ) -> std::io::Result<Frames> {
        let frames = CACHE_BYTES / (FRAME_BLOCKS * nodesize);
        Ok(Frames {
            map,
            list,
            nodesize,
            fsid,
            csum,
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(frames).unwrap_or(NonZeroUsize::MIN),
            )),
            unzip: Mutex::new(zstd::bulk::Decompressor::new()?),
        })
    }

    /// Which frame starts at byte `offset`.
    pub(crate) fn ordinal(&self, offset: u64) -> Option<usize> {
        self.list.binary_search_by_key(&offset, |f| f.0).ok()
    }

    /// The blocks of frame `n` (see [`Frames::ordinal`]).
    pub(crate) fn get(&self, n: usize) -> std::result::Result<Frame, String> {
        if let Some(f) = self.cached(n) {
            return Ok(f);
        }
        let mut unzip = self
            .unzip
            .lock()
            .map_err(|_| "a reader of the bookmark panicked".to_string())?;
        self.load(n, &mut unzip)
    }

    fn cached(&self, n: usize) -> Option<Frame> {
        self.cache.lock().ok().and_then(|mut c| c.get(&n).cloned())
    }

    /// Frame `n` decompressed with `unzip`, its blocks validated, and cached.
    fn load(
        &self,
        n: usize,
        unzip: &mut zstd::bulk::Decompressor<'static>,
    ) -> std::result::Result<Frame, String> {
        let &(offset, len) = self.list.get(n).ok_or("no such frame")?;
        let bad = |why: String| {
            format!("the bookmark's frame at byte {offset} does not decompress: {why}")
        };
        let raw = usize::try_from(offset)
            .ok()
            .and_then(|o| self.map.get(o..o.checked_add(len as usize)?))
            .ok_or_else(|| bad("it is outside the file".into()))?;
        let size = zstd::zstd_safe::get_frame_content_size(raw)
            .ok()
            .flatten()
            .filter(|&s| s <= (MAX_FRAME_BLOCKS * self.nodesize) as u64)
            .ok_or_else(|| bad("no size, or too large a one, in its header".into()))?;
        let data = unzip
            .decompress(raw, size as usize)
            .map_err(|e| bad(e.to_string()))?;
        if data.is_empty() || data.len() % self.nodesize != 0 {
            return Err(format!(
                "the bookmark's frame at byte {offset} holds {} bytes, not whole blocks",
                data.len()
            ));
        }
        let blocks: Frame = data
            .chunks(self.nodesize)
            .map(|b| {
                let raw: Arc<[u8]> = Arc::from(b);
                let at = b.get(0x30..0x38).and_then(|x| x.try_into().ok());
                let logical = at.map_or(0, u64::from_le_bytes);
                Block::validated(raw.clone(), logical, &self.fsid, self.csum).map_err(|_| raw)
            })
            .collect();
        if let Ok(mut c) = self.cache.lock() {
            c.put(n, blocks.clone());
        }
        Ok(blocks)
    }
}
