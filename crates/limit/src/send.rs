//! The send limit: every data extent a full send of a snapshot reads, read
//! from the image and checked against the checksum tree on all cores.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use btrfs_disk::items::{Compression, ExtentKind, FileExtentItem};
use btrfs_disk::key::key_type;
use btrfs_disk::{Filesystem, Key, SubvolSelector};

use crate::work::on_all_cores;

/// Bytes read per work item: small enough to stay in a core's cache
/// between the copy and the checksum.
const PIECE: u64 = 256 << 10;

/// What a pass verified.
#[derive(Default)]
pub struct Verified {
    /// Data bytes read from the image.
    bytes: u64,
    /// Sectors whose checksum matched.
    sectors: u64,
    /// Sectors read that have no checksum (nodatasum files).
    unsummed: u64,
    /// Distinct extent ranges read.
    ranges: usize,
    threads: usize,
}

impl Verified {
    fn add(&mut self, o: Verified) {
        self.bytes += o.bytes;
        self.sectors += o.sectors;
        self.unsummed += o.unsummed;
    }
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verified {} bytes: {} sectors matched their checksums, {} without one, \
             {} extent ranges, {} threads",
            self.bytes, self.sectors, self.unsummed, self.ranges, self.threads
        )
    }
}

/// Reads the data of every regular extent of `snapshot` in `img`, as a
/// full send reads it (the referenced part of each uncompressed extent,
/// whole sectors; the whole of each compressed one; each range once), and
/// checks each sector against its checksum on `threads` threads.
pub fn verify_snapshot(img: &Path, snapshot: &str, threads: usize) -> anyhow::Result<Verified> {
    let fs = Filesystem::open(&[img])?;
    let sv = fs.find_subvolume(&SubvolSelector::Path(PathBuf::from(snapshot)))?;
    let ranges = data_ranges(&fs, &fs.fs_tree(&sv))?;
    let pieces: Vec<(u64, u64)> = ranges
        .iter()
        .flat_map(|&(start, len)| {
            (0..len.div_ceil(PIECE)).map(move |i| (start + i * PIECE, (len - i * PIECE).min(PIECE)))
        })
        .collect();
    let ss = fs.sectorsize();
    let ct = fs.csum_type();
    let cs = ct.size();
    let mut v = on_all_cores(
        pieces.len(),
        threads,
        |i| {
            let (start, len) = pieces[i];
            let mut buf = vec![0u8; len as usize];
            fs.read_logical(start, &mut buf, 1)?;
            let (sums, have) = fs.data_csums(start, len)?;
            let mut v = Verified {
                bytes: len,
                ..Verified::default()
            };
            for (k, sector) in buf.chunks(ss).enumerate() {
                if !have.get(k).copied().unwrap_or(false) {
                    v.unsummed += 1;
                } else if sums
                    .get(k * cs..(k + 1) * cs)
                    .is_some_and(|w| ct.verify(sector, w))
                {
                    v.sectors += 1;
                } else {
                    bail!("checksum mismatch at logical {}", start + (k * ss) as u64);
                }
            }
            Ok(v)
        },
        Verified::add,
    )?;
    v.ranges = ranges.len();
    v.threads = threads;
    Ok(v)
}

/// The logical ranges `(start, len)` of the data the fs tree's regular
/// extents reference, sector-aligned, sorted, each once.
fn data_ranges(fs: &Filesystem, tree: &btrfs_disk::Tree<'_>) -> anyhow::Result<Vec<(u64, u64)>> {
    let ss = fs.sectorsize() as u64;
    let mut out = Vec::new();
    for item in tree.range(Key::MIN, Key::MAX) {
        let item = item?;
        if item.key.item_type != key_type::EXTENT_DATA {
            continue;
        }
        let fe = FileExtentItem::parse(item.data()).with_context(|| format!("{:?}", item.key))?;
        if fe.kind() != ExtentKind::Regular || fe.disk_bytenr() == 0 {
            continue;
        }
        if fe.compression() != Compression::None {
            out.push((fe.disk_bytenr(), fe.disk_num_bytes()));
            continue;
        }
        let start = fe.disk_bytenr() + fe.offset();
        let a0 = start - start % ss;
        let a1 = (start + fe.num_bytes()).next_multiple_of(ss);
        out.push((a0, a1 - a0));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
