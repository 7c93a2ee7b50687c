//! Extent sharing, source against destination: every pair of file blocks
//! that share an extent in the snapshots a send can see (the snapshot sent,
//! its parent, its clone sources) must share one after the receive, except
//! for blocks the kernel's rules make it write ([`Exception`]).
//!
//! Blocks are 4 KiB pieces of regular files (one path per inode), placed
//! with FIEMAP ([`testkit::fiemap`]). A block of an uncompressed extent is
//! its device address. FIEMAP gives a compressed extent's start only, not
//! where in it a file's part begins, so a block of a compressed extent is
//! (the extent's start, the digest of its 4 KiB of data, zero-padded at
//! EOF): right for data whose blocks all differ (the fixtures' `fill`); a
//! digest seen twice within one FIEMAP extent makes that block unplaceable.
//! Holes, inline, preallocated, delayed and unknown extents are left out:
//! send never clones them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use sha2::Digest;
use testkit::fiemap::{self, fiemap};

/// The block size the check works in.
pub const BLOCK: u64 = 4096;

/// Where a block's data lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    /// Device address of the block (uncompressed extent).
    Block(u64),
    /// A block of the compressed extent starting at `extent`, told by its data.
    Encoded { extent: u64, digest: [u8; 32] },
}

/// The placed blocks of the regular files of one tree.
#[derive(Default, Debug)]
pub struct TreeBlocks {
    /// Path (relative, bytes) -> block index -> place.
    pub files: BTreeMap<Vec<u8>, BTreeMap<u64, Place>>,
    /// Places that cannot be told apart (compressed blocks with equal data).
    ambiguous: HashSet<Place>,
}

impl TreeBlocks {
    fn place(&self, path: &[u8], block: u64) -> Option<Place> {
        let p = *self.files.get(path)?.get(&block)?;
        (!self.ambiguous.contains(&p)).then_some(p)
    }
}

/// Maps every regular file of the tree at `root` (nested subvolumes left
/// out; a hard-linked inode once, under its smallest path).
pub fn tree_blocks(root: &Path) -> Result<TreeBlocks, String> {
    let dev = std::fs::metadata(root)
        .map_err(|e| format!("{}: {e}", root.display()))?
        .dev();
    let mut by_ino: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut stack = vec![Vec::<u8>::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(std::ffi::OsStr::from_bytes(&rel));
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for e in rd {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            let md = e
                .metadata()
                .map_err(|err| format!("{}: {err}", e.path().display()))?;
            let mut p = rel.clone();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(e.file_name().as_bytes());
            if md.is_dir() && md.dev() == dev {
                stack.push(p);
            } else if md.is_file() {
                let slot = by_ino.entry(md.ino()).or_insert_with(|| p.clone());
                if p < *slot {
                    *slot = p;
                }
            }
        }
    }
    let mut t = TreeBlocks::default();
    for path in by_ino.into_values() {
        let full = root.join(std::ffi::OsStr::from_bytes(&path));
        let blocks = file_blocks(&full, &mut t.ambiguous)?;
        t.files.insert(path, blocks);
    }
    Ok(t)
}

/// The placed blocks of one file.
fn file_blocks(
    path: &Path,
    ambiguous: &mut HashSet<Place>,
) -> Result<BTreeMap<u64, Place>, String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let size = std::fs::metadata(path).map_err(err)?.len();
    let skip = fiemap::FIEMAP_EXTENT_UNKNOWN
        | fiemap::FIEMAP_EXTENT_DELALLOC
        | fiemap::FIEMAP_EXTENT_NOT_ALIGNED
        | fiemap::FIEMAP_EXTENT_DATA_INLINE
        | fiemap::FIEMAP_EXTENT_UNWRITTEN;
    let file = std::fs::File::open(path).map_err(err)?;
    let mut out = BTreeMap::new();
    for e in fiemap(path).map_err(err)? {
        if e.flags & skip != 0 || e.logical % BLOCK != 0 {
            continue;
        }
        let end = (e.logical + e.length).min(size);
        let mut seen = HashSet::new();
        let mut off = e.logical;
        while off < end {
            let place = if e.flags & fiemap::FIEMAP_EXTENT_ENCODED != 0 {
                let mut buf = vec![0u8; BLOCK as usize];
                let mut got = 0;
                while got < buf.len() {
                    match file
                        .read_at(&mut buf[got..], off + got as u64)
                        .map_err(err)?
                    {
                        0 => break,
                        n => got += n,
                    }
                }
                let p = Place::Encoded {
                    extent: e.physical,
                    digest: sha2::Sha256::digest(&buf).into(),
                };
                if !seen.insert(p) {
                    ambiguous.insert(p);
                }
                p
            } else {
                Place::Block(e.physical + (off - e.logical))
            };
            out.insert(off / BLOCK, place);
            off += BLOCK;
        }
    }
    Ok(out)
}

// The kernel's rules (fs/btrfs/send.c, 6.18) that make it write blocks that
// share an extent in the source; [`Exception::rule`] names one.

/// clone_range.
pub const RULE_149: &str = "one sector is never cloned from file offset 0 (fstests 149: the receiver may have made it inline)";
/// clone_range.
pub const RULE_EOF: &str = "a clone whose source range ends at the source's i_size, not 64 KiB aligned, into the middle of a file: the part after the last 64 KiB boundary is written (fstests 189)";
/// send_write_or_clone (46a6e10a1ab1, 6.11).
pub const RULE_UNALIGNED_END: &str = "an item ending at an unaligned i_size is cloned only from a range ending at its source's i_size too; the only sources are longer, so it is written";
/// find_extent_clone.
pub const RULE_ITEM_START: &str = "the backref walk returns only references covering the first byte of the item's data (extent_item_pos): a later part of the item shared only with other references is written";
/// find_extent_clone.
pub const RULE_COMPRESSED: &str = "compressed extents get no offset filter in the backref walk: the reference with the most bytes wins even when it holds another part of the extent, and this part is written";
/// iterate_backrefs.
pub const RULE_SAME_FILE: &str = "a reference in the file being sent is a source only if its offset plus the length of the whole item being sent lies within what was sent already: a shorter earlier reference does not count, the item is written";

/// Blocks the kernel's rules let a send write although they share an
/// extent in the source: `path`'s bytes `[start, end)` in `snapshot` may
/// end up sharing nothing. `rule` says which rule (shown in reports).
#[derive(Clone, Copy, Debug)]
pub struct Exception {
    pub scenario: &'static str,
    pub snapshot: &'static str,
    pub path: &'static str,
    pub start: u64,
    pub end: u64,
    pub rule: &'static str,
}

impl Exception {
    fn covers(&self, snapshot: &str, path: &[u8], block: u64) -> bool {
        self.snapshot == snapshot
            && self.path.as_bytes() == path
            && (self.start..self.end).contains(&(block * BLOCK))
    }
}

/// What one send kept.
#[derive(Debug, Default, Clone)]
pub struct Sharing {
    /// Blocks of the sent snapshot that share an extent with another block
    /// the send can see, in the source (exceptions left out).
    pub blocks: usize,
    /// Of those, the ones sharing with every such block at the destination.
    pub kept: usize,
    /// Pairs of blocks sharing an extent in the source, in the groups of
    /// blocks sharing one that hold a block of the sent snapshot; and of
    /// those, the pairs still sharing one at the destination.
    pub pairs: u64,
    pub pairs_kept: u64,
    /// Blocks left out as exceptions.
    pub excepted: usize,
    /// Indices (into the exceptions given) of the exceptions some block of
    /// which really lost its sharing.
    pub needed: Vec<usize>,
    /// Where sharing was lost: `SNAPSHOT/PATH [a, b) ...` of the blocks
    /// outside the largest class of their group at the destination.
    pub lost: Vec<String>,
}

impl Sharing {
    /// `kept/blocks` and pairs, one line.
    pub fn summary(&self) -> String {
        format!(
            "{}/{} blocks ({}/{} pairs){}",
            self.kept,
            self.blocks,
            self.pairs_kept,
            self.pairs,
            if self.excepted > 0 {
                format!(", {} excepted", self.excepted)
            } else {
                String::new()
            }
        )
    }

    /// Adds `o` (several sends of one scenario).
    pub fn add(&mut self, o: &Sharing) {
        self.blocks += o.blocks;
        self.kept += o.kept;
        self.pairs += o.pairs;
        self.pairs_kept += o.pairs_kept;
        self.excepted += o.excepted;
        self.needed.extend(&o.needed);
        self.lost.extend(o.lost.iter().cloned());
    }
}

/// One block of one visible snapshot.
#[derive(Clone, Copy)]
struct Member<'a> {
    snap: usize,
    path: &'a [u8],
    block: u64,
}

/// The sharing check of one send: `sent` and `others` (its parent and clone
/// sources) name snapshots; `src` and `dst` hold their blocks in the source
/// and at the destination.
pub fn check(
    sent: &str,
    others: &[&str],
    src: &BTreeMap<String, TreeBlocks>,
    dst: &BTreeMap<String, TreeBlocks>,
    exceptions: &[Exception],
) -> Result<Sharing, String> {
    let mut snaps = vec![sent];
    for o in others {
        if !snaps.contains(o) {
            snaps.push(o);
        }
    }
    for s in &snaps {
        for (m, side) in [(src, "source"), (dst, "destination")] {
            if !m.contains_key(*s) {
                return Err(format!("no {side} block map of {s}"));
            }
        }
    }
    let mut groups: HashMap<Place, Vec<Member<'_>>> = HashMap::new();
    for (i, s) in snaps.iter().enumerate() {
        let t = &src[*s];
        for (path, blocks) in &t.files {
            for (&block, &place) in blocks {
                if t.ambiguous.contains(&place) {
                    continue;
                }
                groups.entry(place).or_default().push(Member {
                    snap: i,
                    path,
                    block,
                });
            }
        }
    }
    let mut out = Sharing::default();
    let mut lost: BTreeMap<(usize, &[u8]), Vec<u64>> = BTreeMap::new();
    let mut needed = HashSet::new();
    let dest_place = |m: &Member<'_>| dst[snaps[m.snap]].place(m.path, m.block);
    let mut places: Vec<&Place> = groups.keys().collect();
    places.sort();
    for place in places {
        let all = &groups[place];
        if all.len() < 2 || !all.iter().any(|m| m.snap == 0) {
            continue;
        }
        let dplaces: Vec<Option<Place>> = all.iter().map(dest_place).collect();
        let mut members = Vec::new();
        for (k, m) in all.iter().enumerate() {
            let exc = exceptions
                .iter()
                .position(|e| e.covers(snaps[m.snap], m.path, m.block));
            match exc {
                Some(x) => {
                    if m.snap == 0 {
                        out.excepted += 1;
                    }
                    let split = dplaces
                        .iter()
                        .enumerate()
                        .any(|(j, d)| j != k && (d.is_none() || *d != dplaces[k]));
                    if split {
                        needed.insert(x);
                    }
                }
                None => members.push((m, dplaces[k])),
            }
        }
        if members.len() < 2 {
            continue;
        }
        // Classes by destination place; an unplaced block is a class of its own.
        let mut classes: HashMap<Place, usize> = HashMap::new();
        let mut unplaced = 0u64;
        for (_, d) in &members {
            match d {
                Some(p) => *classes.entry(*p).or_default() += 1,
                None => unplaced += 1,
            }
        }
        let n = members.len() as u64;
        out.pairs += n * (n - 1) / 2;
        out.pairs_kept += classes
            .values()
            .map(|&c| (c as u64) * (c as u64 - 1) / 2)
            .sum::<u64>();
        let whole = unplaced == 0 && classes.len() == 1;
        let in_sent = members.iter().filter(|(m, _)| m.snap == 0).count();
        out.blocks += in_sent;
        if whole {
            out.kept += in_sent;
            continue;
        }
        let biggest = classes
            .iter()
            .filter(|(_, &c)| c >= 2)
            .max_by_key(|(p, &c)| (c, std::cmp::Reverse(**p)))
            .map(|(p, _)| *p);
        for (m, d) in &members {
            if d.is_none() || *d != biggest {
                lost.entry((m.snap, m.path)).or_default().push(m.block);
            }
        }
    }
    for ((snap, path), mut blocks) in lost {
        blocks.sort_unstable();
        blocks.dedup();
        out.lost.push(format!(
            "{}/{} {}",
            snaps[snap],
            String::from_utf8_lossy(path),
            ranges(&blocks)
        ));
    }
    let mut needed: Vec<usize> = needed.into_iter().collect();
    needed.sort_unstable();
    out.needed = needed;
    Ok(out)
}

/// Block indices as byte ranges: `[0, 8192) [12288, 16384)`.
fn ranges(blocks: &[u64]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let mut j = i;
        while j + 1 < blocks.len() && blocks[j + 1] == blocks[j] + 1 {
            j += 1;
        }
        out.push(format!(
            "[{}, {})",
            blocks[i] * BLOCK,
            (blocks[j] + 1) * BLOCK
        ));
        i = j + 1;
    }
    if out.len() > 6 {
        let n = out.len() - 6;
        out.truncate(6);
        out.push(format!("and {n} more ranges"));
    }
    out.join(" ")
}
