//! btrfs-progs receive semantics on the hand-made streams (every command of
//! v1 to v3) and on small streams written here, and the command line.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command as Process;

use btrfs_stream::{Command, Timespec, Uuid, Writer};
use common::*;
use testkit::{ext4_image, kernel_available, BtrfsImage, Tmpfs};

fn handmade(name: &str) -> std::path::PathBuf {
    testdata().join("handmade").join(format!("{name}.stream"))
}

fn write_stream(path: &Path, version: u32, cmds: &[Command<'_>]) {
    let mut w = Writer::new(Vec::new());
    w.start_stream(version).unwrap();
    for c in cmds {
        w.write_command(c).unwrap();
    }
    fs::write(path, w.into_inner()).unwrap();
}

const U: Uuid = Uuid::from_u128(0xabcdef);

#[test]
fn handmade_streams_of_every_command_match_btrfs_receive() {
    if !kernel_available("handmade_streams_of_every_command_match_btrfs_receive") {
        return;
    }
    let fs = Tmpfs::new(256, "noatime");
    // btrfs receive looks for a snapshot's parent anywhere on the
    // filesystem, and all-v1 and all-v2 use the same uuids: one
    // filesystem each.
    let mut refs = Vec::new();
    for (dir, stream) in [("v1", "all-v1"), ("v2", "all-v2"), ("e", "empty-subvol-v1")] {
        let reference = BtrfsImage::new(256, &[], "noatime");
        let (r, g) = (reference.mnt().join(dir), fs.mnt().join(dir));
        fs::create_dir(&r).unwrap();
        fs::create_dir(&g).unwrap();
        btrfs_receive(&r, &handmade(stream));
        rreceive_ok(&g, &handmade(stream), &[]);
        for sv in fs::read_dir(&r).unwrap() {
            let name = sv.unwrap().file_name();
            assert_same_tree(
                &format!("{stream} {}", name.to_string_lossy()),
                &r.join(&name),
                &g.join(&name),
                Leeway {
                    root_times: true,
                    unset_times: true,
                    ..Leeway::default()
                },
            );
        }
        refs.push(reference);
    }
    let reference = &refs[1];
    // v3 = v2 + ENABLE_VERITY (btrfs-progs release builds refuse v3).
    // Without fs-verity here, the command is noted under -v.
    let g3 = fs.mnt().join("v3");
    fs::create_dir(&g3).unwrap();
    let out = rreceive_ok(&g3, &handmade("all-v3"), &["-v"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("verity"), "{err}");
    for sv in fs::read_dir(reference.mnt().join("v2")).unwrap() {
        let name = sv.unwrap().file_name();
        assert_same_tree(
            "all-v3",
            &reference.mnt().join("v2").join(&name),
            &g3.join(&name),
            Leeway {
                root_times: true,
                unset_times: true,
                ..Leeway::default()
            },
        );
    }
}

#[test]
fn fileattr_flags_are_applied_off_btrfs() {
    if !kernel_available("fileattr_flags_are_applied_off_btrfs") {
        return;
    }
    let fs = ext4_image(256, &[], "noatime");
    for s in ["full-v2-compressed", "incr-v2-compressed"] {
        rreceive_ok(
            fs.mnt(),
            &testdata().join("kernel").join(format!("{s}.stream")),
            &[],
        );
    }
    let lsattr = |p: &str| {
        let out = testkit::run(Process::new("lsattr").arg("-d").arg(fs.mnt().join(p)));
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        lsattr("c2/zstd/attr-A").contains('A'),
        "{}",
        lsattr("c2/zstd/attr-A")
    );
    assert!(
        lsattr("c2/zstd/attr-d").contains('d'),
        "{}",
        lsattr("c2/zstd/attr-d")
    );
    assert!(!lsattr("c1/zstd/attr-A").contains('A'));
}

#[test]
fn nodata_stream_gives_the_tree_without_file_data() {
    if !kernel_available("nodata_stream_gives_the_tree_without_file_data") {
        return;
    }
    // btrfs receive itself fails on this stream (its CLONE reads beyond the
    // end of a file that got no data); rreceive clones what is there.
    let reference = BtrfsImage::new(256, &[], "noatime");
    btrfs_receive(reference.mnt(), &testdata().join("kernel/full-v1.stream"));
    let fs = Tmpfs::new(256, "noatime");
    rreceive_ok(fs.mnt(), &testdata().join("kernel/nodata-v1.stream"), &[]);
    let (w, g) = (
        walk(&reference.mnt().join("s1")),
        walk(&fs.mnt().join("s1")),
    );
    assert_eq!(w.keys().collect::<Vec<_>>(), g.keys().collect::<Vec<_>>());
    for (p, e) in &w {
        let h = &g[p];
        assert_eq!(
            (e.kind, e.mode, e.uid, e.gid, e.mtime, &e.target, e.rdev),
            (h.kind, h.mode, h.uid, h.gid, h.mtime, &h.target, h.rdev),
            "{p:?}"
        );
    }
}

#[test]
fn capabilities_survive_a_later_chown() {
    if !kernel_available("capabilities_survive_a_later_chown") {
        return;
    }
    let fs = Tmpfs::new(64, "");
    // vfs_cap_data v2, effective, cap_net_raw (13) permitted.
    let mut cap = Vec::new();
    for v in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        cap.extend_from_slice(&v.to_le_bytes());
    }
    let file = fs.scratch().join("caps.stream");
    // The order of kernels before 5.8: caps first, then chown (which drops
    // them on the receiver; btrfs-progs sets them again).
    write_stream(
        &file,
        1,
        &[
            Command::Subvol {
                path: b"c",
                uuid: U,
                ctransid: 1,
            },
            Command::Mkfile {
                path: b"o257-1-0",
                ino: 257,
            },
            Command::Rename {
                from: b"o257-1-0",
                to: b"ping",
            },
            Command::Write {
                path: b"ping",
                offset: 0,
                data: b"#!/bin/true\n",
            },
            Command::SetXattr {
                path: b"ping",
                name: b"security.capability",
                data: &cap,
            },
            Command::Chown {
                path: b"ping",
                uid: 1000,
                gid: 1000,
            },
            Command::Chmod {
                path: b"ping",
                mode: 0o755,
            },
            Command::RemoveXattr {
                path: b"ping",
                name: b"user.never-there",
            },
            Command::End {},
        ],
    );
    rreceive_ok(fs.mnt(), &file, &[]);
    let p = fs.mnt().join("c/ping");
    assert_eq!(xattr::get(&p, "security.capability").unwrap(), Some(cap));
    assert_eq!(fs::metadata(&p).unwrap().uid(), 1000);
}

fn library_receive(dest: &Path, stream: &[u8]) -> rreceive::Stats {
    let mut o = rreceive::Options::new(dest);
    o.verbosity = 0;
    rreceive::receive(stream, &o).unwrap_or_else(|f| panic!("receive failed: {f}"))
}

#[test]
fn truncate_elided_when_the_file_already_has_that_size() {
    if !kernel_available("truncate_elided_when_the_file_already_has_that_size") {
        return;
    }
    let fs = Tmpfs::new(64, "");
    let t = Timespec { sec: 5, nsec: 0 };
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    for c in [
        Command::Subvol {
            path: b"t",
            uuid: U,
            ctransid: 1,
        },
        Command::Mkfile {
            path: b"f",
            ino: 257,
        },
        Command::Write {
            path: b"f",
            offset: 0,
            data: &[1u8; 5000],
        },
        Command::Truncate {
            path: b"f",
            size: 5000,
        },
        Command::Truncate {
            path: b"f",
            size: 9000,
        },
        Command::Utimes {
            path: b"f",
            atime: t,
            mtime: t,
            ctime: t,
            otime: None,
        },
        Command::End {},
    ] {
        w.write_command(&c).unwrap();
    }
    let stats = library_receive(fs.mnt(), &w.into_inner());
    assert_eq!(stats.truncates_skipped, 1);
    assert_eq!(fs::metadata(fs.mnt().join("t/f")).unwrap().len(), 9000);
}

#[test]
fn command_line_options() {
    if !kernel_available("command_line_options") {
        return;
    }
    let fs = Tmpfs::new(256, "");
    let concat = testdata().join("kernel/concat-v1.stream");

    // -e: only the first of two concatenated streams.
    let d = fs.mnt().join("e");
    fs::create_dir(&d).unwrap();
    rreceive_ok(&d, &concat, &["-e"]);
    assert!(d.join("s1").is_dir() && !d.join("s2").exists());
    // Without -e: both.
    let d = fs.mnt().join("all");
    fs::create_dir(&d).unwrap();
    rreceive_ok(&d, &concat, &[]);
    assert!(d.join("s1").is_dir() && d.join("s2").is_dir());

    // --dump: the same bytes as btrfs receive --dump printed.
    let out = Process::new(rreceive_bin())
        .args(["--dump", "-f"])
        .arg(testdata().join("kernel/full-v1.stream"))
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        out.stdout,
        fs::read(testdata().join("kernel/full-v1.dump")).unwrap()
    );

    // Usage errors exit 2; a missing DEST is an error (1).
    let out = Process::new(rreceive_bin())
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Process::new(rreceive_bin()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Process::new(rreceive_bin())
        .args(["-f"])
        .arg(&concat)
        .arg(fs.mnt().join("no-such-dir"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));

    // -E 0: go on after a failed command, report it, exit 1, and leave the
    // subvolume incomplete.
    let file = fs.scratch().join("err.stream");
    write_stream(
        &file,
        1,
        &[
            Command::Subvol {
                path: b"x",
                uuid: U,
                ctransid: 1,
            },
            Command::Unlink { path: b"missing" },
            Command::Mkdir {
                path: b"after",
                ino: 257,
            },
            Command::End {},
        ],
    );
    let d = fs.mnt().join("errs");
    fs::create_dir(&d).unwrap();
    let out = rreceive(&["-E".as_ref(), "0".as_ref(), d.as_os_str()], &file);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'missing' (command #2 UNLINK at byte"),
        "{err}"
    );
    assert!(d.join("x/after").is_dir());
    assert!(plain_state(&d.join("x")).unwrap().contains("complete=0"));
}

/// ENCODED_WRITE onto a plain directory is decoded by btrfs_compress with
/// the kernel's checks: good zlib and LZO data lands in the file, a wrong
/// adler32 or bytes after an LZO block's end are errors naming the command.
#[test]
fn encoded_writes_decode_and_corrupt_ones_name_the_command() {
    use std::io::Write as _;
    let plain: Vec<u8> = (0..10_000u32)
        .map(|i| b"encoded "[i as usize % 8])
        .collect();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&plain).unwrap();
    let zlib = z.finish().unwrap();
    // btrfs LZO framing, 4 KiB sectors: total length, then per sector a
    // segment length and an LZO1X block (no header crosses a sector).
    let mut lzo = vec![0u8; 4];
    for chunk in plain.chunks(4096) {
        let left = 4096 - lzo.len() % 4096;
        if left < 4 {
            lzo.resize(lzo.len() + left, 0);
        }
        let seg = lzokay_native::compress(chunk).unwrap();
        lzo.extend_from_slice(&(seg.len() as u32).to_le_bytes());
        lzo.extend_from_slice(&seg);
    }
    let total = lzo.len() as u32;
    lzo[..4].copy_from_slice(&total.to_le_bytes());
    let write = |data: &'static [u8], compression: u32| Command::EncodedWrite {
        path: b"f",
        offset: 0,
        unencoded_file_len: plain.len() as u64,
        unencoded_len: plain.len() as u64,
        unencoded_offset: 0,
        compression: Some(compression),
        encryption: Some(0),
        data,
    };
    let zlib: &'static [u8] = Box::leak(zlib.into_boxed_slice());
    let lzo: &'static [u8] = Box::leak(lzo.into_boxed_slice());
    let receive = |data: &'static [u8], compression: u32| {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("s");
        write_stream(
            &file,
            2,
            &[
                Command::Subvol {
                    path: b"vol",
                    uuid: U,
                    ctransid: 1,
                },
                Command::Mkfile {
                    path: b"f",
                    ino: 257,
                },
                write(data, compression),
                Command::End {},
            ],
        );
        let dest = tmp.path().join("dest");
        fs::create_dir(&dest).unwrap();
        let out = rreceive(&[dest.as_os_str()], &file);
        assert_no_panic(&out);
        let got = fs::read(dest.join("vol/f")).ok();
        (out, got, tmp)
    };
    let zlib_n = btrfs_stream::command::compression::ZLIB;
    let lzo_n = btrfs_stream::command::compression::LZO_4K;
    for (data, c) in [(zlib, zlib_n), (lzo, lzo_n)] {
        let (out, got, _tmp) = receive(data, c);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(got.as_deref(), Some(&plain[..]));
    }
    let mut bad_zlib = zlib.to_vec();
    *bad_zlib.last_mut().unwrap() ^= 1;
    let mut bad_lzo = lzo.to_vec();
    let seg0 = u32::from_le_bytes(bad_lzo[4..8].try_into().unwrap()) as usize;
    // One more byte inside the first segment, after its end marker.
    bad_lzo.insert(8 + seg0, 0);
    bad_lzo[4..8].copy_from_slice(&((seg0 + 1) as u32).to_le_bytes());
    let t = bad_lzo.len() as u32;
    bad_lzo[..4].copy_from_slice(&t.to_le_bytes());
    for (data, c, why) in [
        (bad_zlib, zlib_n, "corrupt zlib data"),
        (bad_lzo, lzo_n, "bytes after the end marker"),
    ] {
        let (out, _, _tmp) = receive(Box::leak(data.into_boxed_slice()), c);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(why) && err.contains("command #3"), "{err}");
        println!(
            "{}",
            err.lines().find(|l| l.contains(why)).unwrap_or_default()
        );
    }
}
