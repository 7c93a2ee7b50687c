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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture image `name` (testdata/images), decoded into a directory
    /// of `test`'s own.
    fn fixture(name: &str, test: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new(&format!("{test}-{name}"));
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/images")
            .join(name)
            .join("dev1.img.zst");
        let bytes = zstd::decode_all(std::fs::File::open(src).unwrap()).unwrap();
        let img = dir.0.join("dev1.img");
        std::fs::write(&img, bytes).unwrap();
        (dir, img)
    }

    mod tempdir {
        /// A directory removed on drop.
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new(name: &str) -> Dir {
                let p =
                    std::env::temp_dir().join(format!("bench-limit-{name}-{}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn every_checksum_type_is_verified() {
        for name in [
            "csum-crc32c",
            "csum-xxhash",
            "csum-sha256",
            "csum-blake2",
            "compress-zstd",
        ] {
            let (_dir, img) = fixture(name, "every");
            let v = verify_snapshot(&img, "snap1", 2).unwrap();
            assert!(v.sectors > 0, "{name}: {v}");
            assert_eq!(v.bytes, (v.sectors + v.unsummed) * 4096, "{name}: {v}");
        }
    }

    #[test]
    fn a_flipped_data_byte_fails_the_pass() {
        let (_dir, img) = fixture("csum-crc32c", "flipped");
        let fs = Filesystem::open(&[&img]).unwrap();
        let sv = fs
            .find_subvolume(&SubvolSelector::Path("snap1".into()))
            .unwrap();
        let ranges = data_ranges(&fs, &fs.fs_tree(&sv)).unwrap();
        let (sums, have) = fs.data_csums(ranges[0].0, 4096).unwrap();
        assert!(
            have[0],
            "the first range's first sector has a checksum: {sums:?}"
        );
        let mut sector = vec![0u8; 4096];
        fs.read_logical(ranges[0].0, &mut sector, 1).unwrap();
        drop(fs);
        // The sector's one copy in the image (single data profile).
        let mut bytes = std::fs::read(&img).unwrap();
        let at = bytes
            .chunks(4096)
            .position(|c| c == &sector[..])
            .expect("the sector in the image")
            * 4096;
        bytes[at + 100] ^= 1;
        std::fs::write(&img, bytes).unwrap();
        let e = verify_snapshot(&img, "snap1", 2).err().expect("a mismatch");
        assert!(format!("{e:#}").contains("checksum mismatch"), "{e:#}");
    }
}
