//! Protocol v2 and v3 sends, checked without root from what
//! testdata/make-v2.sh committed (see testdata/v2/README.md):
//!
//! - rsend's stream of every send of every scenario, as `--proto 2
//!   --compressed-data`, `--no-data` and `--proto 2 --no-data`, against the
//!   kernel's: no larger, the same ENCODED_WRITEs, FALLOCATEs and FILEATTRs,
//!   and `--no-data` byte-identical;
//! - rsend's and the kernel's `--compressed-data` streams replayed in memory
//!   ([`Model`], which decodes ENCODED_WRITE) give every manifest;
//! - LZO at 8 to 64 KiB sectors (images mkfs.btrfs made): encoded writes
//!   with the sector's LZO type, full and incremental, give the source trees;
//! - fs-verity (items written by hand): ENABLE_VERITY in v3 only, with the
//!   descriptor's fields; FILEATTR with the verity bit in incrementals.
//!
//! Receiving with the real `btrfs receive` and rreceive: v2_kernel.rs.

mod common;

use btrfs_stream::{Command, CommandKind, Reader};
use common::model::{Model, Times};
use common::scenarios::{count, Manifest, SizeReport};
use common::v2;

/// Every command of the first stream in `s`: its kind and path.
fn commands(s: &[u8]) -> Vec<(CommandKind, Vec<u8>)> {
    let mut r = Reader::new(s);
    let mut out = Vec::new();
    while let Some(c) = r.next_command().expect("a valid stream") {
        let kind = c.kind();
        let path = c
            .paths()
            .find(|(role, _)| *role == btrfs_stream::PathRole::Path)
            .map_or(Vec::new(), |(_, p)| p.to_vec());
        out.push((kind, path));
        if kind == CommandKind::End {
            break;
        }
    }
    out
}

/// What `pick` takes from each command of the first stream in `s`.
fn each<T>(s: &[u8], mut pick: impl FnMut(&Command<'_>) -> Option<T>) -> Vec<T> {
    let mut r = Reader::new(s);
    let mut out = Vec::new();
    while let Some(c) = r.next_command().expect("a valid stream") {
        out.extend(pick(&c));
        if matches!(c, Command::End {}) {
            break;
        }
    }
    out
}

/// Where `ours` differs from `kernel` other than in which of several
/// equal sources a CLONE names (the kernel takes the first its backref walk
/// finds; rsend does not reproduce that order).
fn difference_beyond_clone_sources(ours: &[u8], kernel: &[u8]) -> Option<String> {
    if ours == kernel {
        return None;
    }
    let show = |s: &[u8]| {
        each(s, |c| {
            Some(match c {
                Command::Clone {
                    offset, len, path, ..
                } => format!("clone {} {offset} {len}", String::from_utf8_lossy(path)),
                other => format!("{other:?}"),
            })
        })
    };
    let (a, b) = (show(ours), show(kernel));
    let at = a.iter().zip(&b).position(|(x, y)| x != y);
    match at {
        None if a.len() == b.len() => None,
        None => Some(format!("{} commands, the kernel {}", a.len(), b.len())),
        Some(i) => Some(format!("command {i}: {}, the kernel {}", a[i], b[i])),
    }
}

/// Replays a full stream and an incremental one in order; the difference
/// from the manifests `p` and `c`, or the replay's error.
fn replay_pair(full: &[u8], incr: &[u8], p: &Manifest, c: &Manifest) -> Result<(), String> {
    let mp =
        Model::replay_as(full, None, Times::LikeAFilesystem).map_err(|e| format!("full: {e}"))?;
    if let Some(d) = Manifest::difference(p, &mp.as_manifest()) {
        return Err(format!("full: {d}"));
    }
    let mc = Model::replay_as(incr, Some(&mp), Times::LikeAFilesystem)
        .map_err(|e| format!("incremental: {e}"))?;
    if let Some(d) = Manifest::difference(c, &mc.as_manifest()) {
        return Err(format!("incremental: {d}"));
    }
    Ok(())
}

#[test]
fn rsend_streams_are_the_kernels_or_smaller() {
    let tmp = tempfile::tempdir().unwrap();
    let image = v2::decompress_image("dev1", tmp.path());
    let out = tmp.path().join("out.stream");
    let mut failures = Vec::new();
    for (flavor, flags) in v2::FLAVORS {
        let mut report = SizeReport::default();
        for n in v2::scenarios() {
            for kind in ["full", "incr"] {
                let ours = match v2::rsend(&image, &v2::send_args(flags, &n, kind), &out) {
                    Ok(s) => s,
                    Err(e) => {
                        failures.push(format!("{n} {flavor} {kind}: {e}"));
                        continue;
                    }
                };
                let kernel = v2::kernel_stream(&n, flavor, kind);
                report.add(&format!("{n}.{flavor}.{kind}"), &ours, &kernel);
                if flavor != "v2c" {
                    if let Some(d) = difference_beyond_clone_sources(&ours, &kernel) {
                        failures.push(format!("{n} {flavor} {kind}: {d}"));
                    }
                }
                // What v2 adds is sent where and as the kernel sends it.
                for k in [
                    CommandKind::EncodedWrite,
                    CommandKind::Fallocate,
                    CommandKind::Fileattr,
                    CommandKind::UpdateExtent,
                ] {
                    let (a, b) = (count(&ours, k), count(&kernel, k));
                    if a != b {
                        failures.push(format!("{n} {flavor} {kind}: {a} {k}, the kernel {b}"));
                    }
                }
            }
        }
        failures.extend(report.finish(&format!("rsend {}", flags.join(" "))));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn compressed_data_streams_replay_to_every_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let image = v2::decompress_image("dev1", tmp.path());
    let out = tmp.path().join("out.stream");
    let mut failures = Vec::new();
    let mut encoded = 0;
    for n in v2::scenarios() {
        let (p, c) = (
            v2::manifest(&format!("{n}.p")),
            v2::manifest(&format!("{n}.c")),
        );
        let flags = ["--proto", "2", "--compressed-data"];
        let ours: Vec<Vec<u8>> = ["full", "incr"]
            .iter()
            .map(|kind| {
                v2::rsend(&image, &v2::send_args(&flags, &n, kind), &out)
                    .unwrap_or_else(|e| panic!("{n} {kind}: {e}"))
            })
            .collect();
        encoded +=
            count(&ours[0], CommandKind::EncodedWrite) + count(&ours[1], CommandKind::EncodedWrite);
        if let Err(e) = replay_pair(&ours[0], &ours[1], &p, &c) {
            failures.push(format!("{n}, rsend's streams: {e}"));
        }
        let kfull = v2::kernel_stream(&n, "v2c", "full");
        let kincr = v2::kernel_stream(&n, "v2c", "incr");
        if let Err(e) = replay_pair(&kfull, &kincr, &p, &c) {
            failures.push(format!("{n}, the kernel's streams: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        encoded > 30,
        "only {encoded} ENCODED_WRITEs in all scenarios"
    );
}

#[test]
fn lzo_at_every_sector_size_goes_encoded_with_its_framing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.stream");
    let mut failures = Vec::new();
    for sector in v2::LZO_SECTORS {
        let image = v2::decompress_image(&format!("lzo-{sector}"), tmp.path());
        let bits = match sector {
            "8k" => 13,
            "16k" => 14,
            "32k" => 15,
            _ => 16,
        };
        let v2c = ["--proto", "2", "--compressed-data"];
        let full = v2::rsend(&image, &[&v2c[..], &["a"]].concat(), &out).unwrap();
        let incr = v2::rsend(&image, &[&v2c[..], &["-p", "a", "b"]].concat(), &out).unwrap();
        for (what, s) in [("full", &full), ("incremental", &incr)] {
            let types: Vec<u32> = each(s, |c| match c {
                Command::EncodedWrite { compression, .. } => *compression,
                _ => None,
            });
            if types.is_empty() || types.iter().any(|&t| t != 3 + bits - 12) {
                failures.push(format!(
                    "lzo-{sector} {what}: ENCODED_WRITE compression types {types:?}, want all {}",
                    3 + bits - 12
                ));
            }
        }
        let (a, b) = (
            v2::manifest(&format!("lzo-{sector}.a")),
            v2::manifest(&format!("lzo-{sector}.b")),
        );
        if let Err(e) = replay_pair(&full, &incr, &a, &b) {
            failures.push(format!("lzo-{sector}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn verity_is_enabled_in_v3_from_the_descriptor() {
    let tmp = tempfile::tempdir().unwrap();
    let image = v2::decompress_image("verity", tmp.path());
    let out = tmp.path().join("out.stream");
    let want = v2::verity_files();
    assert_eq!(want.len(), 2, "verity.tsv lists two files");
    let send = |args: &[&str]| v2::rsend(&image, args, &out).unwrap();
    let v3_full = send(&["--proto", "3", "verity.c"]);
    let v3_incr = send(&["--proto", "3", "-p", "verity.p", "verity.c"]);
    for (what, s) in [("full", &v3_full), ("incremental", &v3_incr)] {
        let got: Vec<v2::Verity> = each(s, |c| match c {
            Command::EnableVerity {
                path,
                algorithm,
                block_size,
                salt,
                sig,
            } => Some(v2::Verity {
                path: String::from_utf8_lossy(path)
                    .rsplit('/')
                    .next()?
                    .to_string(),
                algorithm: *algorithm,
                block_size: *block_size,
                salt: salt.to_vec(),
                sig: sig.to_vec(),
            }),
            _ => None,
        });
        assert_eq!(got, want, "ENABLE_VERITY of the v3 {what} stream");
        // After the data and the mode, as the kernel's finish_inode orders them.
        let cmds = commands(s);
        for v in &want {
            let at = |k: CommandKind| {
                cmds.iter()
                    .rposition(|(kind, p)| *kind == k && p.ends_with(v.path.as_bytes()))
            };
            if let (Some(e), Some(u)) = (at(CommandKind::EnableVerity), at(CommandKind::Utimes)) {
                assert!(
                    e < u,
                    "{what}: ENABLE_VERITY of {} after its UTIMES",
                    v.path
                );
            }
        }
    }
    let m = Model::replay_as(&v3_full, None, Times::LikeAFilesystem).unwrap();
    assert_eq!(
        Manifest::difference(&v2::manifest("verity.c"), &m.as_manifest()),
        None
    );
    // v2 has no ENABLE_VERITY; its incremental stream has the verity bit in FILEATTR.
    let v2_full = send(&["--proto", "2", "verity.c"]);
    let v2_incr = send(&["--proto", "2", "-p", "verity.p", "verity.c"]);
    assert_eq!(count(&v2_full, CommandKind::EnableVerity), 0);
    assert_eq!(count(&v2_incr, CommandKind::EnableVerity), 0);
    let attrs: Vec<u64> = each(&v2_incr, |c| match c {
        Command::Fileattr { attr, .. } => Some(*attr),
        _ => None,
    });
    assert_eq!(
        attrs,
        vec![1u64 << 32; 2],
        "FILEATTR of the two verity files"
    );
}

#[test]
fn protocol_flags_are_checked_before_anything_is_read() {
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_rsend"))
            .args(["-d", "/nonexistent/device"])
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--proto", "1", "--compressed-data", "s"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--compressed-data needs protocol version 2"),
        "{err}"
    );
    // A usage error, as any other bad value of a flag.
    let (code, err) = run(&["--proto", "4", "s"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("protocol version 4 is not supported"), "{err}");
}

#[test]
fn a_damaged_compressed_extent_fails_the_encoded_send_with_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let image = v2::decompress_image("dev1", tmp.path());
    let (ino, logical, phys) = v2::compressed_extent_of_b(&image);
    testkit::xor_byte(&image, phys + 100, 0x40);
    let out = tmp.path().join("out.stream");
    let err = v2::rsend(
        &image,
        &["--proto", "2", "--compressed-data", "zstd_extents.p"],
        &out,
    )
    .unwrap_err();
    for want in [
        format!("inode {ino}"),
        "at b:".to_string(),
        format!("{logical}"),
        "checksum".to_string(),
    ] {
        assert!(err.contains(&want), "{want} missing from: {err}");
    }
    assert!(err.contains("exit status: 1"), "{err}");
}
