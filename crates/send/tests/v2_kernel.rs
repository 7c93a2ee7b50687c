//! rsend's protocol v2 streams of testdata/v2 received for real (root, loop
//! devices, the btrfs module): every scenario's `--proto 2
//! --compressed-data` streams (full NAME.p, then `-p NAME.p NAME.c`), and
//! those of the mkfs-made LZO images at 8 to 64 KiB sectors, are received in
//! order by `btrfs receive` with and without `--force-decompress` and by
//! rreceive onto ext4 and onto btrfs, and every received snapshot must
//! equal its manifest. Also:
//!
//! - onto btrfs, `btrfs receive` and rreceive keep compressed extents
//!   compressed (FIEMAP_EXTENT_ENCODED, with the destination mounted
//!   without compression); `--force-decompress` does not;
//! - rreceive applies the FILEATTRs: every inode whose flags changed
//!   between the snapshots has the child's flags (those the destination
//!   filesystem has); `btrfs receive` ignores FILEATTR (btrfs-progs has it
//!   under `#if 0`), so it is not asked to.
//!
//! Without a kernel this prints one SKIP line (or fails under
//! `RSEND_REQUIRE_KERNEL=1`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::receivers::{listing, manifest_of_tree, rreceive_bin, without_xattrs, Receiver};
use common::scenarios::Manifest;
use common::v2;
use testkit::fiemap::{fiemap, FIEMAP_EXTENT_ENCODED};
use testkit::{ext4_image, kernel_available, BtrfsImage, LoopImage};

/// The ways a stream is received here.
const WAYS: [Receiver; 4] = [
    Receiver::BtrfsReceive,
    Receiver::BtrfsReceiveDecompressed,
    Receiver::RreceiveBtrfs,
    Receiver::RreceiveExt4,
];

/// Inode flags the destination keeps and the receiver applies: none for
/// btrfs receive; on btrfs also compress.
fn flag_mask(way: Receiver) -> u32 {
    // FS_SYNC_FL, FS_IMMUTABLE_FL, FS_APPEND_FL, FS_NODUMP_FL, FS_NOATIME_FL.
    let common = 0x8 | 0x10 | 0x20 | 0x40 | 0x80;
    match way {
        // FS_COMPR_FL. Not FS_NOCOW_FL: btrfs takes it only on an empty
        // file, and FILEATTR comes after the data.
        Receiver::RreceiveBtrfs => common | 0x4,
        Receiver::RreceiveExt4 => common,
        _ => 0,
    }
}

/// The destinations: two btrfs (one per btrfs receive mode, mounted
/// without compression) and an ext4; rreceive onto btrfs shares the first.
struct Dests {
    plain: BtrfsImage,
    decompressed: BtrfsImage,
    ext4: LoopImage,
}

impl Dests {
    fn new() -> Dests {
        Dests {
            plain: BtrfsImage::new(1024, &[], "noatime"),
            decompressed: BtrfsImage::new(1024, &[], "noatime"),
            ext4: ext4_image(1024, &[], "noatime"),
        }
    }

    /// A fresh directory for `what` received the way `way`.
    fn dir(&self, way: Receiver, what: &str) -> PathBuf {
        let root = match way {
            Receiver::BtrfsReceiveDecompressed => self.decompressed.mnt().to_path_buf(),
            Receiver::RreceiveExt4 => self.ext4.mnt().to_path_buf(),
            Receiver::RreceiveBtrfs => self.plain.mnt().join("rreceive"),
            _ => self.plain.mnt().join("btrfs-receive"),
        };
        let d = root.join(what);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

/// The flags of the inode at `path` (FS_IOC_GETFLAGS), if it has them.
fn flags_at(path: &Path) -> Option<u32> {
    let out = Command::new("lsattr").arg("-d").arg(path).output().ok()?;
    if !out.status.success() {
        return None;
    }
    // lsattr letters, in e2fsprogs' order, and their FS_*_FL values.
    const LETTERS: [(char, u32); 8] = [
        ('s', 0x1),
        ('u', 0x2),
        ('S', 0x8),
        ('i', 0x10),
        ('a', 0x20),
        ('d', 0x40),
        ('A', 0x80),
        ('c', 0x4),
    ];
    let text = String::from_utf8_lossy(&out.stdout);
    let letters = text.split_whitespace().next()?;
    let mut f = 0;
    for ch in letters.chars() {
        if let Some((_, v)) = LETTERS.iter().find(|(l, _)| *l == ch) {
            f |= v;
        }
        if ch == 'C' {
            f |= 0x80_0000;
        }
    }
    Some(f)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Inodes of `scenario` whose flags changed between the snapshots must
/// have the child's at `got` (within `mask`).
fn check_flags(scenario: &str, got: &Path, mask: u32) -> Result<usize, String> {
    let (p, c) = (
        v2::flags(&format!("{scenario}.p")),
        v2::flags(&format!("{scenario}.c")),
    );
    let mut checked = 0;
    for (path, want) in &c {
        let Some(want) = want else { continue };
        let before = p.get(path).copied().flatten();
        if before.map(|b| b & mask) == Some(want & mask) || mask == 0 {
            continue;
        }
        let rel = std::ffi::OsString::from(String::from_utf8_lossy(&unhex(path)).into_owned());
        let at = got.join(&rel);
        let have = flags_at(&at).map(|f| f & mask);
        if have != Some(want & mask) {
            return Err(format!(
                "{}: flags {have:x?}, the snapshot's {:x}",
                at.display(),
                want & mask
            ));
        }
        checked += 1;
    }
    Ok(checked)
}

/// Whether a regular file under `root` has a compressed extent as stored.
fn has_encoded_extent(root: &Path) -> bool {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file()
                && fiemap(&e.path())
                    .unwrap_or_default()
                    .iter()
                    .any(|x| x.flags & FIEMAP_EXTENT_ENCODED != 0)
            {
                return true;
            }
        }
    }
    false
}

/// Receives `streams` (file, snapshot name, manifest) in order the way
/// `way` into `dest`; the first failure. With `flag_not_property`, the
/// `btrfs.compression` property is not compared: mkfs.btrfs --compress
/// sets the inode's compress flag without it, and setting the flag
/// through the kernel (FILEATTR) adds it.
fn receive_all(
    way: Receiver,
    dest: &Path,
    streams: &[(PathBuf, String, Manifest)],
    flag_not_property: bool,
) -> Result<(), String> {
    for (file, snap, want) in streams {
        way.receive(&rreceive_bin(), file, dest)?;
        let got = dest.join(snap);
        let diff = if flag_not_property {
            let ignore = |x: &str| way.ignores_xattr(x) || x == "btrfs.compression";
            Manifest::difference(
                &without_xattrs(want, ignore),
                &without_xattrs(&manifest_of_tree(&got), ignore),
            )
            .map_or(Ok(None), Err)
        } else {
            way.compare_received(want, &got, false)
        };
        diff.map_err(|d| format!("{snap}: {d}\n{}", listing(&got)))?;
    }
    Ok(())
}

#[test]
fn compressed_data_streams_are_received_everywhere_as_sent() {
    if !kernel_available("compressed_data_streams_are_received_everywhere_as_sent") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let image = v2::decompress_image("dev1", tmp.path());
    let dests = Dests::new();
    let v2c = ["--proto", "2", "--compressed-data"];
    let mut failures = Vec::new();
    let mut flags_checked = 0;
    let mut compressed_kept = Vec::new();
    for n in v2::scenarios() {
        let mut streams = Vec::new();
        for (kind, snap) in [("full", format!("{n}.p")), ("incr", format!("{n}.c"))] {
            let file = tmp.path().join(format!("{n}.{kind}.stream"));
            let args = v2::send_args(&v2c, &n, kind);
            let o = Command::new(env!("CARGO_BIN_EXE_rsend"))
                .args(["-q", "-d"])
                .arg(&image)
                .args(&args)
                .arg("-f")
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "rsend {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let m = v2::manifest(&snap);
            streams.push((file, snap, m));
        }
        for way in WAYS {
            let dest = dests.dir(way, &n);
            if let Err(e) = receive_all(way, &dest, &streams, false) {
                failures.push(format!("{n} {}: {e}", way.label()));
                continue;
            }
            match check_flags(&n, &dest.join(format!("{n}.c")), flag_mask(way)) {
                Ok(k) => flags_checked += k,
                Err(e) => failures.push(format!("{n} {}: {e}", way.label())),
            }
            if n.ends_with("_extents") {
                let encoded = has_encoded_extent(&dest.join(format!("{n}.p")));
                let want = matches!(way, Receiver::BtrfsReceive | Receiver::RreceiveBtrfs);
                if encoded != want {
                    failures.push(format!(
                        "{n} {}: compressed extents {} at the destination",
                        way.label(),
                        if encoded { "found" } else { "not found" }
                    ));
                } else if want {
                    compressed_kept.push(format!("{n} {}", way.label()));
                }
            }
        }
    }
    println!(
        "{} scenarios received {} ways; {flags_checked} changed flags applied; compressed as sent: {}",
        v2::scenarios().len(),
        WAYS.len(),
        compressed_kept.join(", ")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        flags_checked >= 10,
        "only {flags_checked} flag changes checked"
    );
}

#[test]
fn lzo_of_every_sector_size_is_received_everywhere() {
    if !kernel_available("lzo_of_every_sector_size_is_received_everywhere") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dests = Dests::new();
    let mut failures = Vec::new();
    for sector in v2::LZO_SECTORS {
        let image = v2::decompress_image(&format!("lzo-{sector}"), tmp.path());
        let mut streams = Vec::new();
        for (snaps, snap) in [(vec!["a"], "a"), (vec!["-p", "a", "b"], "b")] {
            let file = tmp.path().join(format!("lzo-{sector}.{snap}.stream"));
            let o = Command::new(env!("CARGO_BIN_EXE_rsend"))
                .args(["-q", "-d"])
                .arg(&image)
                .args(["--proto", "2", "--compressed-data", "-f"])
                .arg(&file)
                .args(&snaps)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            streams.push((
                file,
                snap.to_string(),
                v2::manifest(&format!("lzo-{sector}.{snap}")),
            ));
        }
        for way in WAYS {
            let dest = dests.dir(way, &format!("lzo-{sector}"));
            if let Err(e) = receive_all(way, &dest, &streams, true) {
                failures.push(format!("lzo-{sector} {}: {e}", way.label()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
