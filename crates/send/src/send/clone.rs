//! Clone search: data the receiver already has that a range about to be
//! sent can be reflinked from (the kernel's find_extent_clone, without its
//! cap on references).
//!
//! The clone roots are the subvolumes the receiver has: the send snapshot
//! itself (only what is already sent), the parent and the `-c` sources.
//! For an extent about to be sent, the extent tree's backrefs name every
//! (inode, file offset minus extent offset) that references it, directly
//! or through a shared leaf; each is looked up in each clone root that can
//! hold the extent (one made before the extent was cannot). That happens
//! once per extent, not once per file extent item pointing into it: the
//! items found are kept, sorted by the part of the extent they cover, in a
//! cache bounded by the number of items, and every range of the extent is
//! answered from that list by a binary search. Backrefs are read in
//! batches, so an extent with any number of references costs bounded
//! memory. An extent with one reference is the sender's own: only a clone
//! root sharing the very leaf can hold it, and a full send without other
//! clone roots never looks for an extent it has not sent before.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;

use super::cmd::Bytes;
use crate::bookmark::Parent;
use btrfs_disk::block::{Expect, Generation};
use btrfs_disk::error::{Error, Result};
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{
    key_type, keyed_backref, objectid, BackRef, ExtentItem, ExtentKind, FileExtentItem,
};
use btrfs_disk::lookup::{InodeInfo, Lookup};
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::tree::Item;
use btrfs_disk::{Key, Tree};
use btrfs_stream::Uuid;

/// File extent items kept over all cached extents (each about 40 bytes).
const CACHE_ITEMS: usize = 1 << 19;
/// Backrefs resolved together: bounds the (inode, offset) set being looked up.
const REF_BATCH: usize = 1 << 16;
/// Bits of the filter of extents already sent (a full send without other
/// clone roots asks the extent tree only about extents it may have sent).
const SEEN_BITS: usize = 1 << 24;
/// Shared leaves kept indexed (a few hundred file extent items each).
const CACHE_LEAVES: usize = 1024;
/// Extent entries cached (the list of items of each).
const CACHE_EXTENTS: usize = 4096;
/// The largest sector size a receiving filesystem may have.
pub(crate) const MAX_SECTOR: u64 = 64 << 10;

/// A subvolume the receiver has, which ranges can be cloned from.
pub(crate) struct CloneRoot<'fs> {
    /// The receiver knows it by this uuid (received uuid preferred) and ctransid.
    pub(crate) uuid: Uuid,
    pub(crate) ctransid: u64,
    /// Transid of its last change: no extent made later is in it.
    generation: u64,
    /// Whether it is the snapshot being sent.
    pub(crate) is_send: bool,
    /// Lookups in it (not used for the send snapshot: the walk has its own).
    pub(crate) lookup: Lookup<'fs>,
}

/// (extent bytenr, inode, file offset minus extent offset) of every file
/// extent item of one leaf, sorted.
type LeafIndex = Arc<[(u64, u64, u64)]>;

/// A file extent item of a clone root that points into an extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cand {
    /// Offset into the extent of the item's first byte.
    data_off: u64,
    ino: u64,
    /// Key offset of the item.
    file_off: u64,
    /// Bytes of the extent it references.
    len: u64,
}

/// The items of one clone root pointing into one extent.
struct RootCands {
    root: usize,
    /// Sorted by (data_off, ino, file_off).
    cands: Vec<Cand>,
    /// `max_end[i]`: the largest `data_off + len` of `cands[..=i]`.
    max_end: Vec<u64>,
}

/// What is known of one extent.
struct Resolved {
    per_root: Vec<RootCands>,
}

impl Resolved {
    fn items(&self) -> usize {
        self.per_root.iter().map(|r| r.cands.len()).sum::<usize>() + 1
    }
}

/// The range about to be sent, as find_extent_clone is asked about it.
pub(crate) struct Query<'a, 'b> {
    pub(crate) ino: u64,
    /// Key offset of the EXTENT_DATA item.
    pub(crate) file_off: u64,
    pub(crate) fe: &'a FileExtentItem<'b>,
    /// The inode's size.
    pub(crate) size: u64,
    /// End of what was written or cloned of this inode so far.
    pub(crate) next_write: u64,
}

/// A source found: clone from `ino` at `offset` of clone root `root`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    /// Index into [`Clones::roots`].
    pub(crate) root: usize,
    pub(crate) ino: u64,
    /// Offset in the source file of the byte matching the range's first.
    pub(crate) offset: u64,
}

/// Counters for `-v`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneStats {
    /// Extents whose references were resolved.
    pub extents_resolved: u64,
    /// Backrefs read.
    pub backrefs: u64,
}

/// The clone roots of one send and what was learnt of extents so far.
pub(crate) struct Clones<'fs> {
    fs: &'fs Filesystem,
    /// Sorted by tree id (the kernel's order for equal candidates).
    pub(crate) roots: Vec<CloneRoot<'fs>>,
    cache: LruCache<u64, Arc<Resolved>>,
    cached_items: usize,
    /// Shared leaves read for SHARED_DATA_REFs: (extent, inode, base) of
    /// their file extent items, sorted.
    leaves: LruCache<u64, LeafIndex>,
    /// The filesystem's view ([`Filesystem::epoch`]) the leaves were read
    /// in: a newer commit may have put other leaves at their addresses.
    leaves_epoch: u64,
    /// The generation of the extent tree being read: a shared leaf it
    /// names cannot be newer.
    extent_generation: u64,
    sectorsize: u64,
    /// Extents sent so far (a Bloom-like bit filter), for full sends with
    /// no clone root but the send snapshot.
    seen: Option<Vec<u64>>,
    pub(crate) stats: CloneStats,
}

fn seen_bits(bytenr: u64) -> [usize; 2] {
    let h = bytenr.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    [
        (h >> 40) as usize % SEEN_BITS,
        (h.rotate_left(23) >> 40) as usize % SEEN_BITS,
    ]
}

impl<'fs> Clones<'fs> {
    /// The clone roots of a send of `send` (with `parent`, if incremental,
    /// and the `-c` `sources`); `search` false turns clone search off.
    pub(crate) fn new(
        fs: &'fs Filesystem,
        send: &Subvolume,
        parent: Option<Parent<'fs>>,
        sources: &[Subvolume],
        search: bool,
    ) -> Clones<'fs> {
        // (subvolume, its tree, whether it is the one sent)
        let mut svs: Vec<(&Subvolume, Tree<'fs>, bool)> = vec![(send, fs.fs_tree(send), true)];
        if search {
            svs.extend(parent.map(|p| (p.subvolume(), p.tree(fs), false)));
            svs.extend(sources.iter().map(|c| (c, fs.fs_tree(c), false)));
        }
        // A bookmark's snapshot may share its id with a later subvolume: its uuid tells.
        svs.sort_by_key(|s| (s.0.id, !s.2));
        svs.dedup_by_key(|s| (s.0.id, s.0.uuid));
        let roots: Vec<CloneRoot<'fs>> = svs
            .into_iter()
            .map(|(sv, tree, is_send)| CloneRoot {
                uuid: stream_uuid(sv),
                ctransid: sv.ctransid,
                generation: sv.generation(),
                is_send,
                lookup: Lookup::new(tree),
            })
            .collect();
        let only_send = roots.len() == 1;
        Clones {
            fs,
            cache: LruCache::new(NonZeroUsize::new(CACHE_EXTENTS).unwrap_or(NonZeroUsize::MIN)),
            cached_items: 0,
            leaves: LruCache::new(NonZeroUsize::new(CACHE_LEAVES).unwrap_or(NonZeroUsize::MIN)),
            leaves_epoch: fs.epoch(),
            extent_generation: 0,
            sectorsize: fs.sectorsize() as u64,
            seen: (search && only_send && parent.is_none()).then(|| vec![0u64; SEEN_BITS / 64]),
            roots: if search { roots } else { Vec::new() },
            stats: CloneStats::default(),
        }
    }

    /// Whether a clone can ever be found.
    pub(crate) fn enabled(&self) -> bool {
        !self.roots.is_empty()
    }

    /// The tree of clone root `i`.
    pub(crate) fn tree(&self, i: usize) -> Tree<'fs> {
        self.roots[i].lookup.tree
    }

    /// Records that the extent at `bytenr` was sent (written or cloned).
    pub(crate) fn sent(&mut self, bytenr: u64) {
        if let Some(bits) = self.seen.as_mut() {
            for b in seen_bits(bytenr) {
                bits[b / 64] |= 1 << (b % 64);
            }
        }
    }

    fn maybe_seen(&self, bytenr: u64) -> bool {
        match &self.seen {
            None => true,
            Some(bits) => seen_bits(bytenr)
                .iter()
                .all(|&b| bits[b / 64] & (1 << (b % 64)) != 0),
        }
    }

    /// find_extent_clone: the best source for the range `q`, or `None`.
    /// `send` answers questions about the send snapshot's inodes.
    pub(crate) fn find(
        &mut self,
        send: &mut Lookup<'fs>,
        q: &Query<'_, '_>,
    ) -> Result<Option<Source>> {
        let fe = q.fe;
        let bytenr = fe.disk_bytenr();
        if !self.enabled()
            || q.file_off >= q.size
            || bytenr == 0
            || fe.kind() == ExtentKind::Inline
            || !self.maybe_seen(bytenr)
        {
            return Ok(None);
        }
        // The last extent of a file may reach past i_size.
        let extent_len = if q.file_off.saturating_add(fe.num_bytes()) >= q.size {
            q.size - q.file_off
        } else {
            fe.num_bytes()
        };
        let Some(resolved) = self.resolve(q)? else {
            return Ok(None);
        };
        let want = fe.offset();
        let mut best: Option<(u64, Source)> = None;
        for rc in &resolved.per_root {
            let is_send = self.roots[rc.root].is_send;
            let hi = rc.cands.partition_point(|c| c.data_off <= want);
            let mut end = hi;
            // Groups of equal data_off, nearest first, while any reaches `want`.
            while end > 0 && rc.max_end[end - 1] > want {
                let d = rc.cands[end - 1].data_off;
                let start = rc.cands[..end].partition_point(|c| c.data_off < d);
                let group = &rc.cands[start..end];
                let group = if is_send {
                    &group[..group.partition_point(|c| c.ino <= q.ino)]
                } else {
                    group
                };
                for c in group {
                    let c_end = c.data_off.saturating_add(c.len);
                    if c_end <= want {
                        continue;
                    }
                    let Some(offset) = c.file_off.checked_add(want - c.data_off) else {
                        continue;
                    };
                    if is_send && c.ino == q.ino {
                        // Only from what the receiver already has of this file.
                        if offset.saturating_add(extent_len) > q.next_write {
                            break;
                        }
                    }
                    let info = if is_send {
                        if c.ino == q.ino {
                            Some(InodeInfo {
                                size: q.size,
                                nlink: 1,
                                ..InodeInfo::default()
                            })
                        } else {
                            send.inode(c.ino)?
                        }
                    } else {
                        self.roots[rc.root].lookup.inode(c.ino)?
                    };
                    let Some(info) = info.filter(|i| i.nlink > 0) else {
                        continue;
                    };
                    let range = Range {
                        file_off: q.file_off,
                        len: extent_len,
                        size: q.size,
                    };
                    let covers = usable(
                        &range,
                        self.sectorsize,
                        (c_end - want).min(extent_len),
                        offset,
                        info.size,
                    );
                    if covers == 0 || best.is_some_and(|(b, _)| b >= covers) {
                        continue;
                    }
                    best = Some((
                        covers,
                        Source {
                            root: rc.root,
                            ino: c.ino,
                            offset,
                        },
                    ));
                    if covers >= extent_len {
                        return Ok(best.map(|b| b.1));
                    }
                }
                end = start;
            }
        }
        Ok(best.map(|b| b.1))
    }

    /// The items of every clone root pointing into the extent of `q`.
    ///
    /// On a mounted filesystem the extent tree changes under us: a lookup
    /// that meets a block written over starts again from the newest commit.
    /// What it finds is checked against the clone roots, which are
    /// read-only and do not change, so any commit gives the same answer.
    fn resolve(&mut self, q: &Query<'_, '_>) -> Result<Option<Arc<Resolved>>> {
        let bytenr = q.fe.disk_bytenr();
        if let Some(r) = self.cache.get(&bytenr) {
            return Ok(Some(r.clone()));
        }
        let fs = self.fs;
        fs.with_retry(|| self.resolve_once(q))
    }

    fn resolve_once(&mut self, q: &Query<'_, '_>) -> Result<Option<Arc<Resolved>>> {
        let bytenr = q.fe.disk_bytenr();
        let epoch = self.fs.epoch();
        if epoch != self.leaves_epoch {
            self.leaves.clear();
            self.leaves_epoch = epoch;
        }
        let Some(extents) = self.fs.extent_tree() else {
            return Ok(None);
        };
        self.extent_generation = extents.generation;
        let mut cursor = extents.cursor();
        let head = Key::new(bytenr, key_type::EXTENT_ITEM, 0);
        let Some(item) = cursor
            .seek_ge(&head)?
            .filter(|i| i.key.objectid == bytenr && i.key.item_type == key_type::EXTENT_ITEM)
        else {
            return Ok(None);
        };
        let bad = |key: Key| Error::bad_item(objectid::EXTENT_TREE, key);
        let ei = ExtentItem::parse(item.key.item_type, item.data()).map_err(bad(item.key))?;
        let (refs, gen) = (ei.refs(), ei.generation());
        self.stats.extents_resolved += 1;
        let fit: Vec<usize> = (0..self.roots.len())
            .filter(|&i| self.roots[i].generation >= gen)
            .collect();
        let mut per_root: Vec<RootCands> = fit
            .iter()
            .map(|&root| RootCands {
                root,
                cands: Vec::new(),
                max_end: Vec::new(),
            })
            .collect();
        let span = q.fe.ram_bytes().max(q.fe.num_bytes());
        let mut budget = CACHE_ITEMS;
        if refs <= 1 {
            // The one reference is ours; other roots can hold it only
            // through the same leaf, at the same key.
            for rc in per_root
                .iter_mut()
                .filter(|rc| !self.roots[rc.root].is_send)
            {
                let tree = self.roots[rc.root].lookup.tree;
                let key = Key::new(q.ino, key_type::EXTENT_DATA, q.file_off);
                if let Some(item) = tree.search(&key)? {
                    push_if_ours(tree.id, &item, bytenr, q.fe.kind(), &mut rc.cands)?;
                }
            }
        } else {
            let mut pairs = BTreeSet::new();
            for r in ei.inline_refs().map_err(bad(item.key))? {
                self.add_ref(r, bytenr, &mut pairs)?;
            }
            loop {
                if pairs.len() >= REF_BATCH {
                    self.look_up(&pairs, span, bytenr, q, &mut per_root, &mut budget)?;
                    pairs.clear();
                    if budget == 0 {
                        break;
                    }
                }
                match cursor.next_item()? {
                    Some(k) if k.key.objectid == bytenr => {
                        if let Some(r) = keyed_backref(&k.key, k.data()).map_err(bad(k.key))? {
                            self.add_ref(r, bytenr, &mut pairs)?;
                        }
                    }
                    _ => break,
                }
            }
            if !pairs.is_empty() && budget > 0 {
                self.look_up(&pairs, span, bytenr, q, &mut per_root, &mut budget)?;
            }
        }
        per_root.retain(|rc| !rc.cands.is_empty());
        // The send snapshot first: among equal sources the kernel mostly
        // ends up with one of it.
        per_root.sort_by_key(|rc| !self.roots[rc.root].is_send);
        for rc in &mut per_root {
            rc.cands.sort_unstable();
            rc.cands.dedup();
            let mut m = 0;
            rc.max_end = rc
                .cands
                .iter()
                .map(|c| {
                    m = m.max(c.data_off.saturating_add(c.len));
                    m
                })
                .collect();
        }
        let r = Arc::new(Resolved { per_root });
        self.cached_items += r.items();
        while self.cached_items > CACHE_ITEMS {
            match self.cache.pop_lru() {
                Some((_, old)) => self.cached_items -= old.items(),
                None => break,
            }
        }
        if let Some((_, old)) = self.cache.push(bytenr, r.clone()) {
            self.cached_items -= old.items();
        }
        Ok(Some(r))
    }

    /// Adds what backref `r` of the extent at `bytenr` names to `pairs`.
    fn add_ref(&mut self, r: BackRef, bytenr: u64, pairs: &mut BTreeSet<(u64, u64)>) -> Result<()> {
        self.stats.backrefs += 1;
        match r {
            BackRef::ExtentData {
                objectid, offset, ..
            } => {
                pairs.insert((objectid, offset));
            }
            BackRef::SharedData { parent, .. } => self.leaf_pairs(parent, bytenr, pairs)?,
            _ => {}
        }
        Ok(())
    }

    /// The (inode, base) pairs of the items of the leaf at `leaf` that
    /// point into the extent at `bytenr` (a SHARED_DATA_REF). Each leaf is
    /// read and indexed by extent once while it stays in the cache: a leaf
    /// of an old snapshot is named by the backrefs of every extent in it.
    fn leaf_pairs(
        &mut self,
        leaf: u64,
        bytenr: u64,
        pairs: &mut BTreeSet<(u64, u64)>,
    ) -> Result<()> {
        let index = match self.leaves.get(&leaf) {
            Some(ix) => ix.clone(),
            None => {
                let block = self.fs.tree_block(&Expect {
                    logical: leaf,
                    generation: Generation::AtMost(self.extent_generation),
                    level: 0,
                    first_key: None,
                    tree: objectid::EXTENT_TREE,
                })?;
                let mut ix = Vec::new();
                for slot in 0..block.nritems() {
                    let Some((key, data)) = block.item(slot) else {
                        break;
                    };
                    if key.item_type != key_type::EXTENT_DATA {
                        continue;
                    }
                    let Ok(fe) = FileExtentItem::parse(data) else {
                        continue;
                    };
                    if fe.kind() != ExtentKind::Inline && fe.disk_bytenr() != 0 {
                        let base = key.offset.wrapping_sub(fe.offset());
                        ix.push((fe.disk_bytenr(), key.objectid, base));
                    }
                }
                ix.sort_unstable();
                let ix: LeafIndex = ix.into();
                self.leaves.put(leaf, ix.clone());
                ix
            }
        };
        let from = index.partition_point(|e| e.0 < bytenr);
        for &(_, ino, base) in index[from..].iter().take_while(|e| e.0 == bytenr) {
            pairs.insert((ino, base));
        }
        Ok(())
    }

    /// Looks the pairs up in every root of `per_root`: the items of each
    /// inode from each base over the extent's span that point into it.
    fn look_up(
        &self,
        pairs: &BTreeSet<(u64, u64)>,
        span: u64,
        bytenr: u64,
        q: &Query<'_, '_>,
        per_root: &mut [RootCands],
        budget: &mut usize,
    ) -> Result<()> {
        // Per inode, the union of [base, base + span): each item is read
        // once. A base is the item's offset minus its extent offset, which
        // wraps below zero for an item that starts before its extent would.
        let mut spans: Vec<(u64, u64, u64)> = Vec::with_capacity(pairs.len());
        for &(ino, base) in pairs {
            match base.checked_add(span) {
                Some(end) => spans.push((ino, base, end)),
                None => {
                    spans.push((ino, 0, base.wrapping_add(span)));
                    spans.push((ino, base, u64::MAX));
                }
            }
        }
        spans.sort_unstable();
        let mut ranges: Vec<(u64, u64, u64)> = Vec::new();
        for (ino, from, end) in spans {
            match ranges.last_mut() {
                Some((i, _, e)) if *i == ino && from <= *e => *e = (*e).max(end),
                _ => ranges.push((ino, from, end)),
            }
        }
        for rc in per_root.iter_mut() {
            let tree = self.roots[rc.root].lookup.tree;
            for &(ino, from, to) in &ranges {
                let mut cursor = tree.cursor();
                let mut next = cursor.seek_ge(&Key::new(ino, key_type::EXTENT_DATA, from))?;
                while let Some(item) = next {
                    let k = item.key;
                    if k.objectid != ino || k.item_type != key_type::EXTENT_DATA || k.offset >= to {
                        break;
                    }
                    if *budget == 0 {
                        return Ok(());
                    }
                    if push_if_ours(tree.id, &item, bytenr, q.fe.kind(), &mut rc.cands)? {
                        *budget -= 1;
                    }
                    next = cursor.next_item()?;
                }
            }
        }
        Ok(())
    }

    /// get_inode_path: the first path of `ino` in clone root `i` (not the
    /// send snapshot), from its root directory.
    pub(crate) fn root_path(&mut self, i: usize, ino: u64) -> Result<Bytes> {
        let lookup = &mut self.roots[i].lookup;
        let mut parts: Vec<Bytes> = Vec::new();
        let mut at = ino;
        while at != objectid::FIRST_FREE {
            if parts.len() > 4096 {
                return Err(Error::NoPath {
                    subvol: lookup.id(),
                    path: format!("(inode {ino}: its parent directories loop)"),
                });
            }
            let r = lookup.need_first_ref(at)?;
            parts.push(r.name);
            at = r.dir;
        }
        let mut out = Vec::new();
        for (k, p) in parts.iter().rev().enumerate() {
            if k > 0 {
                out.push(b'/');
            }
            out.extend_from_slice(p);
        }
        Ok(Bytes::from(out))
    }

    /// The inode facts of `ino` in clone root `i` (not the send snapshot).
    pub(crate) fn inode(&mut self, i: usize, ino: u64) -> Result<Option<InodeInfo>> {
        Ok(self.roots[i].lookup.inode(ino)?)
    }
}

/// A range of the file being sent: from `file_off`, `len` bytes, in a file of `size`.
struct Range {
    file_off: u64,
    len: u64,
    size: u64,
}

/// How many bytes of `r` a clone from `offset` of a file of `src_size`
/// bytes, whose extent item covers `covers` of them, really clones under
/// the rules of the kernel's send_write_or_clone and clone_range.
fn usable(r: &Range, sectorsize: u64, covers: u64, offset: u64, src_size: u64) -> u64 {
    if offset >= src_size {
        return 0;
    }
    let end = r.file_off + r.len;
    // An unaligned range end is cloned only when it is EOF in both files.
    let eof_in_both = end == r.size && offset.saturating_add(r.len) == src_size;
    if !end.is_multiple_of(sectorsize) && !eof_in_both {
        return 0;
    }
    // One sector from offset 0 may be inline at the receiver (fstests 149).
    if offset == 0 && r.len == sectorsize {
        return 0;
    }
    let covers = covers.min(src_size - offset);
    // The source's unaligned EOF block cannot go into the middle of a file.
    if offset + covers == src_size
        && !src_size.is_multiple_of(MAX_SECTOR)
        && r.file_off + covers < r.size
    {
        return covers / MAX_SECTOR * MAX_SECTOR;
    }
    covers
}

/// Adds `item` to `out` when it is a file extent item of the same kind
/// pointing into the extent at `bytenr`; says whether it was.
fn push_if_ours(
    tree: u64,
    item: &Item,
    bytenr: u64,
    kind: ExtentKind,
    out: &mut Vec<Cand>,
) -> Result<bool> {
    let fe = FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree, item.key))?;
    if fe.kind() == ExtentKind::Inline || fe.kind() != kind || fe.disk_bytenr() != bytenr {
        return Ok(false);
    }
    out.push(Cand {
        data_off: fe.offset(),
        ino: item.key.objectid,
        file_off: item.key.offset,
        len: fe.num_bytes(),
    });
    Ok(true)
}

/// The uuid a receiver knows a subvolume by: its received uuid when set.
pub(crate) fn stream_uuid(sv: &Subvolume) -> Uuid {
    let u = if sv.received_uuid.is_nil() {
        sv.uuid
    } else {
        sv.received_uuid
    };
    Uuid::from_bytes(*u.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::{usable, Range};

    const S: u64 = 4096;
    const K: u64 = 1024;

    fn r(file_off: u64, len: u64, size: u64) -> Range {
        Range {
            file_off,
            len,
            size,
        }
    }

    #[test]
    fn aligned_ranges_clone_what_the_source_item_covers() {
        assert_eq!(
            usable(&r(0, 128 * K, 1 << 20), S, 128 * K, 128 * K, 1 << 20),
            128 * K
        );
        assert_eq!(
            usable(&r(0, 128 * K, 1 << 20), S, 64 * K, 128 * K, 1 << 20),
            64 * K
        );
    }

    #[test]
    fn nothing_past_the_source_eof() {
        assert_eq!(
            usable(&r(0, 128 * K, 1 << 20), S, 128 * K, 512 * K, 512 * K),
            0
        );
        // Cut at the source's EOF (64 KiB aligned, so the cut part is cloned).
        assert_eq!(
            usable(&r(0, 128 * K, 1 << 20), S, 128 * K, 448 * K, 512 * K),
            64 * K
        );
    }

    #[test]
    fn an_unaligned_end_needs_eof_in_both_files() {
        // 10,000-byte files: the clone ends at both EOFs.
        assert_eq!(usable(&r(0, 10_000, 10_000), S, 10_000, 0, 10_000), 10_000);
        // The source is larger: its range does not end at its EOF.
        assert_eq!(usable(&r(0, 10_000, 10_000), S, 10_000, 0, 20_000), 0);
    }

    #[test]
    fn never_one_sector_from_offset_zero() {
        assert_eq!(usable(&r(8 * S, S, 1 << 20), S, S, 0, 1 << 20), 0);
        assert_eq!(usable(&r(8 * S, S, 1 << 20), S, S, S, 1 << 20), S);
    }

    #[test]
    fn the_unaligned_eof_block_of_the_source_stays_out_of_the_middle() {
        // Source of 100 KiB: cloning its last 60 KiB into the middle of a
        // 1 MiB file would end at its unaligned EOF; only whole 64 KiB pieces go.
        assert_eq!(
            usable(&r(0, 100 * K, 1 << 20), S, 100 * K, 0, 100 * K),
            64 * K
        );
        assert_eq!(
            usable(&r(0, 60 * K, 1 << 20), S, 60 * K, 40 * K, 100 * K),
            0
        );
        // At the destination's EOF it may.
        assert_eq!(
            usable(&r(0, 100 * K, 100 * K), S, 100 * K, 0, 100 * K),
            100 * K
        );
    }
}
