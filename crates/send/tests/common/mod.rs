//! Shared helpers of the fixture tests: finding and decompressing the
//! kernel-made images of testdata/images, and rebuilding a snapshot manifest
//! (testdata/manifest.py format) from what the reader sees.

#![allow(dead_code)]

pub mod clone;
pub mod model;
pub mod receivers;
pub mod scenarios;
pub mod sharing;
pub mod v2;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use btrfs_disk::items::{file_type, key_type, objectid};
use btrfs_disk::{Filesystem, Subvolume};
use sha2::Digest;

/// testdata/images of the workspace, or `$RSEND_IMAGES` when set (for scratch fixtures).
pub fn images_dir() -> PathBuf {
    match std::env::var_os("RSEND_IMAGES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/images"),
    }
}

/// One fixture image directory.
pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub info: BTreeMap<String, String>,
}

impl Fixture {
    pub fn devices(&self) -> usize {
        self.info
            .get("devices")
            .and_then(|d| d.parse().ok())
            .unwrap_or(1)
    }

    /// Decompresses every device image into `into`; returns their paths.
    pub fn decompress(&self, into: &Path) -> Vec<PathBuf> {
        (1..=self.devices())
            .map(|n| {
                let src = self.dir.join(format!("dev{n}.img.zst"));
                let dst = into.join(format!("{}-dev{n}.img", self.name));
                decompress_sparse(&src, &dst);
                dst
            })
            .collect()
    }
}

/// Every complete fixture (INFO and all device images present), by name.
pub fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(images_dir()) else {
        return out;
    };
    for e in rd.flatten() {
        let dir = e.path();
        let Ok(text) = std::fs::read_to_string(dir.join("INFO")) else {
            continue;
        };
        let info: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let f = Fixture {
            name: e.file_name().to_string_lossy().into_owned(),
            dir,
            info,
        };
        let complete = (1..=f.devices()).all(|n| f.dir.join(format!("dev{n}.img.zst")).exists())
            && f.dir.join("subvolumes.txt").exists();
        if complete {
            out.push(f);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The whole of the zstd file `p`, decoded.
pub fn read_zst(p: &Path) -> Vec<u8> {
    let f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(f)
        .expect("zstd decoder")
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    out
}

/// Decompresses a .zst image, leaving runs of zero blocks as holes.
pub fn decompress_sparse(src: &Path, dst: &Path) {
    let input = std::fs::File::open(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut dec = zstd::stream::read::Decoder::new(input).expect("zstd decoder");
    let mut out = std::fs::File::create(dst).expect("create image");
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            let n = dec.read(&mut buf[filled..]).expect("zstd decode");
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        for block in buf[..filled].chunks(4096) {
            if block.iter().any(|&b| b != 0) {
                out.seek(SeekFrom::Start(pos)).unwrap();
                out.write_all(block).unwrap();
            }
            pos += block.len() as u64;
        }
    }
    out.set_len(pos).unwrap();
}

fn ts(t: btrfs_disk::items::Timespec) -> String {
    format!("{}.{:09}", t.sec, t.nsec)
}

/// The manifest of subvolume `sv` as the reader sees it: sorted lines
/// without the human-only path_repr column, and the skipped-subvol paths.
pub fn manifest_of(fs: &Filesystem, sv: &Subvolume) -> Result<(Vec<String>, Vec<String>), String> {
    let mut rows: Vec<(Vec<u8>, String)> = Vec::new();
    let mut skipped = Vec::new();
    let mut stack: Vec<(Vec<u8>, u64)> = vec![(b".".to_vec(), objectid::FIRST_FREE)];
    let mut dirs_seen = std::collections::HashSet::new();
    while let Some((rel, ino)) = stack.pop() {
        let inode = fs
            .inode(sv, ino)
            .map_err(|e| format!("{}: {e}", hex(&rel)))?;
        let t = match inode.file_type() {
            0o100000 => "reg",
            0o040000 => "dir",
            0o120000 => "lnk",
            0o020000 => "chr",
            0o060000 => "blk",
            0o010000 => "fifo",
            0o140000 => "sock",
            other => return Err(format!("{}: mode {other:o}", hex(&rel))),
        };
        let show = |s: &str| s.to_string();
        let size = if t == "reg" || t == "lnk" {
            inode.size.to_string()
        } else {
            show("-")
        };
        let nlink = if t == "dir" {
            show("-")
        } else {
            inode.nlink.to_string()
        };
        // Fixture files are small; a huge size means a corrupted inode (fuzzing), and
        // hashing terabytes of holes would only waste time.
        if t == "reg" && inode.size > 1 << 30 {
            return Err(format!("{}: implausible size {}", hex(&rel), inode.size));
        }
        let digest = if t == "reg" {
            let mut h = sha2::Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0;
            loop {
                let n = fs
                    .read_file(sv, ino, off, &mut buf)
                    .map_err(|e| format!("{}: {e}", hex(&rel)))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                off += n as u64;
            }
            if off != inode.size {
                return Err(format!("{}: read {off} of {} bytes", hex(&rel), inode.size));
            }
            hex(&h.finalize())
        } else {
            show("-")
        };
        let target = if t == "lnk" {
            hex(&fs
                .read_link(sv, ino)
                .map_err(|e| format!("{}: {e}", hex(&rel)))?)
        } else {
            show("-")
        };
        let rdev = if t == "chr" || t == "blk" {
            let (ma, mi) = inode.rdev_major_minor();
            format!("{ma}:{mi}")
        } else {
            show("-")
        };
        let mut xs = fs
            .xattrs(sv, ino)
            .map_err(|e| format!("{}: {e}", hex(&rel)))?;
        xs.sort();
        let xattrs = if xs.is_empty() {
            show("-")
        } else {
            xs.iter()
                .map(|(n, v)| format!("{}={}", String::from_utf8_lossy(n), hex(v)))
                .collect::<Vec<_>>()
                .join(";")
        };
        let line = [
            hex(&rel),
            t.to_string(),
            format!("{:04o}", inode.mode & 0o7777),
            inode.uid.to_string(),
            inode.gid.to_string(),
            nlink,
            size,
            ts(inode.mtime),
            ts(inode.atime),
            digest,
            target,
            rdev,
            xattrs,
        ]
        .join("\t");
        rows.push((rel.clone(), line));
        if t == "dir" && !dirs_seen.insert(ino) {
            return Err(format!(
                "{}: directory inode {ino} reached twice",
                hex(&rel)
            ));
        }
        if t == "dir" {
            for e in fs
                .read_dir(sv, ino)
                .map_err(|e| format!("{}: {e}", hex(&rel)))?
            {
                let child = if rel == b"." {
                    e.name.clone()
                } else {
                    let mut c = rel.clone();
                    c.push(b'/');
                    c.extend_from_slice(&e.name);
                    c
                };
                if e.location.item_type == key_type::ROOT_ITEM
                    || e.location.objectid == objectid::EMPTY_SUBVOL_DIR
                {
                    skipped.push(hex(&child));
                    continue;
                }
                if e.file_type == file_type::XATTR {
                    return Err(format!("{}: xattr entry in a directory", hex(&child)));
                }
                stack.push((child, e.location.objectid));
            }
        }
    }
    rows.sort();
    skipped.sort();
    Ok((rows.into_iter().map(|(_, l)| l).collect(), skipped))
}

/// A manifest file's lines without path_repr, and its skipped-subvol paths.
pub fn read_manifest(path: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# skipped-subvol ") {
            skipped.push(rest.split(' ').next().unwrap_or("").to_string());
        } else if !l.starts_with('#') && !l.is_empty() {
            let cols: Vec<&str> = l.split('\t').collect();
            rows.push(cols[..cols.len().min(13)].join("\t"));
        }
    }
    skipped.sort();
    (rows, skipped)
}

pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// A notice sink that records every notice.
pub fn recording_options() -> (
    btrfs_disk::Options,
    std::sync::Arc<std::sync::Mutex<Vec<btrfs_disk::Notice>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let opts = btrfs_disk::Options {
        notice: std::sync::Arc::new(move |n: &btrfs_disk::Notice| {
            s2.lock().unwrap().push(n.clone())
        }),
        ..btrfs_disk::Options::default()
    };
    (opts, seen)
}

/// The read-only subvolumes of a fixture (INFO `ro_subvolumes`).
pub fn ro_snapshots(f: &Fixture) -> Vec<u64> {
    f.info
        .get("ro_subvolumes")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

/// rsend's full stream of `sv` (library call, clone search within `sv`).
pub fn rsend_stream(fs: &Filesystem, sv: &Subvolume) -> Result<Vec<u8>, String> {
    let mut w = btrfs_stream::Writer::new(Vec::new());
    rsend::send::send_subvolume(fs, sv, &mut w, &rsend::send::SendOptions::default())
        .map_err(|e| format!("{e:#}"))?;
    Ok(w.into_inner())
}

/// Hard-link groups of `sv` as the reader sees them: sorted paths of every
/// non-directory inode with several names (nested subvolumes skipped).
pub fn source_link_groups(fs: &Filesystem, sv: &Subvolume) -> Vec<Vec<Vec<u8>>> {
    let mut by_ino: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    let mut stack: Vec<(Vec<u8>, u64)> = vec![(Vec::new(), objectid::FIRST_FREE)];
    while let Some((rel, dir)) = stack.pop() {
        for e in fs.read_dir(sv, dir).unwrap() {
            if e.location.item_type != key_type::INODE_ITEM {
                continue;
            }
            let mut p = rel.clone();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(&e.name);
            if e.file_type == file_type::DIR {
                stack.push((p, e.location.objectid));
            } else {
                by_ino.entry(e.location.objectid).or_default().push(p);
            }
        }
    }
    let mut groups: Vec<Vec<Vec<u8>>> = by_ino
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    groups.sort();
    groups
}

/// How many TRUNCATE commands a full send of subvolume `id` must have,
/// by the kernel's rule (send-stream.md §3) applied to files.tsv and the
/// manifest's sizes: a regular file gets one unless the last extent that is
/// written (not a hole, not prealloc, starting below i_size) ends at i_size,
/// where an inline extent ends at its sector's end and every end is clipped
/// to i_size.
pub fn expected_truncates(f: &Fixture, id: u64) -> usize {
    let sectorsize: u64 = f
        .info
        .get("sectorsize")
        .and_then(|s| s.parse().ok())
        .unwrap_or(4096);
    let manifest = std::fs::read_to_string(f.dir.join(format!("subvol-{id}.manifest"))).unwrap();
    let sizes: BTreeMap<&str, u64> = manifest
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            (c.len() > 6 && c[1] == "reg").then(|| (c[0], c[6].parse().unwrap_or(0)))
        })
        .collect();
    let tsv = std::fs::read_to_string(f.dir.join("files.tsv")).unwrap();
    // ino -> (size, end of the last written extent)
    let mut files: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for l in tsv.lines().filter(|l| !l.starts_with('#')) {
        let c: Vec<&str> = l.split('\t').collect();
        if c[0].parse::<u64>().ok() != Some(id) || c[2] == "0" {
            continue;
        }
        let ino: u64 = c[1].parse().unwrap();
        let Some(&size) = sizes.get(c[3]) else {
            continue;
        };
        let e = files.entry(ino).or_insert((size, 0));
        let off: u64 = c[5].parse().unwrap_or(0);
        let num = |i: usize| c[i].parse::<u64>().unwrap_or(0);
        let extent_end = match c[6] {
            "inline" => (off + num(12)).div_ceil(sectorsize) * sectorsize,
            "regular" if num(8) != 0 => off + num(11),
            _ => continue,
        };
        let end = extent_end.min(size);
        if off < end {
            e.1 = end;
        }
    }
    files.values().filter(|(size, last)| last != size).count()
}

/// Device path and physical offset of copy `mirror` (1-based) of `logical`
/// (profiles without parity), `devs` in devid order.
pub fn physical(fs: &Filesystem, devs: &[PathBuf], logical: u64, mirror: u32) -> (PathBuf, u64) {
    let chunks = fs.chunks();
    let c = chunks.lookup(logical).expect("mapped");
    let m = c.map_mirror(logical, 1, mirror).expect("mirror");
    let devid = c.stripes[m.stripe].devid;
    (devs[(devid - 1) as usize].clone(), m.physical)
}
