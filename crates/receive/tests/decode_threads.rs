//! ENCODED_WRITEs decompressed on worker threads give what decompressing
//! them in place (`RRECEIVE_SYNC_DECODE`) gives: the same files, the same
//! errors naming the same commands, later commands over the same bytes
//! winning.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command as Process, Output};

use btrfs_stream::command::compression::ZLIB;
use btrfs_stream::{Command, Timespec, Uuid, Writer};
use common::*;

const U: Uuid = Uuid::from_u128(0xdec0de);
const EXTENT: usize = 128 << 10;

/// 128 KiB of text naming its file and extent.
fn text(file: &str, extent: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(EXTENT);
    let mut n = 0;
    while v.len() < EXTENT {
        v.extend_from_slice(format!("{file} extent {extent} line {n}\n").as_bytes());
        n += 1;
    }
    v.truncate(EXTENT);
    v
}

fn zlib(plain: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(plain).unwrap();
    z.finish().unwrap()
}

fn encoded<'a>(path: &'a [u8], offset: u64, plain_len: usize, data: &'a [u8]) -> Command<'a> {
    Command::EncodedWrite {
        path,
        offset,
        unencoded_file_len: plain_len as u64,
        unencoded_len: plain_len as u64,
        unencoded_offset: 0,
        compression: Some(ZLIB),
        encryption: Some(0),
        data,
    }
}

/// SUBVOL vol, then MKFILE `file`.
fn subvol_with(file: &[u8]) -> Vec<Command<'_>> {
    vec![
        Command::Subvol {
            path: b"vol",
            uuid: U,
            ctransid: 1,
        },
        Command::Mkfile {
            path: file,
            ino: 257,
        },
    ]
}

fn write_stream(path: &Path, cmds: &[Command<'_>]) {
    let mut w = Writer::new(Vec::new());
    w.start_stream(2).unwrap();
    for c in cmds {
        w.write_command(c).unwrap();
    }
    fs::write(path, w.into_inner()).unwrap();
}

/// rreceive --force-decompress (so that any filesystem decodes), decoding
/// on threads or, with `in_place`, on the main thread.
fn receive(dest: &Path, stream: &Path, in_place: bool, extra: &[&str]) -> Output {
    let mut p = Process::new(rreceive_bin());
    if in_place {
        p.env("RRECEIVE_SYNC_DECODE", "1");
    }
    let out = p
        .arg("--force-decompress")
        .args(extra)
        .arg(dest)
        .stdin(fs::File::open(stream).unwrap())
        .output()
        .expect("run rreceive");
    assert_no_panic(&out);
    out
}

fn set(file: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    if file.len() < at + bytes.len() {
        file.resize(at + bytes.len(), 0);
    }
    file[at..at + bytes.len()].copy_from_slice(bytes);
}

#[test]
fn runs_of_encoded_writes_decode_on_threads_as_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let plain: BTreeMap<(&str, usize), Vec<u8>> = [("a", 8), ("b", 5), ("b2", 1)]
        .iter()
        .flat_map(|&(f, n)| (0..n).map(move |k| ((f, k), text(f, k))))
        .collect();
    let packed: BTreeMap<_, _> = plain.iter().map(|(k, v)| (*k, zlib(v))).collect();
    let small = b"a small file's only extent, decoded on the main thread\n".repeat(20);
    let small_z = zlib(&small);
    let over = vec![b'W'; 10_000];
    let t = Timespec {
        sec: 1_600_000_000,
        nsec: 0,
    };
    let mut cmds = subvol_with(b"a");
    // a: eight extents, written last to first.
    for k in (0..8).rev() {
        cmds.push(encoded(
            b"a",
            (k * EXTENT) as u64,
            EXTENT,
            &packed[&("a", k)],
        ));
    }
    cmds.push(Command::Utimes {
        path: b"a",
        atime: t,
        mtime: t,
        ctime: t,
        otime: None,
    });
    cmds.push(Command::Mkfile {
        path: b"b",
        ino: 258,
    });
    for k in 0..5 {
        cmds.push(encoded(
            b"b",
            (k * EXTENT) as u64,
            EXTENT,
            &packed[&("b", k)],
        ));
    }
    // Over the second extent again (while the first may still be
    // decoding), then a WRITE over the third, a TRUNCATE inside the
    // fourth and an ENCODED_WRITE past the end.
    cmds.push(encoded(b"b", EXTENT as u64, EXTENT, &packed[&("b2", 0)]));
    cmds.push(Command::Write {
        path: b"b",
        offset: (2 * EXTENT + 100) as u64,
        data: &over,
    });
    cmds.push(Command::Truncate {
        path: b"b",
        size: (3 * EXTENT + 5) as u64,
    });
    cmds.push(encoded(
        b"b",
        (6 * EXTENT) as u64,
        EXTENT,
        &packed[&("b", 4)],
    ));
    cmds.push(Command::Truncate {
        path: b"b",
        size: (7 * EXTENT) as u64,
    });
    cmds.push(Command::Mkfile {
        path: b"c",
        ino: 259,
    });
    cmds.push(encoded(b"c", 0, small.len(), &small_z));
    cmds.push(Command::End {});
    let stream = tmp.path().join("s");
    write_stream(&stream, &cmds);

    let mut a = Vec::new();
    for k in 0..8 {
        set(&mut a, k * EXTENT, &plain[&("a", k)]);
    }
    let mut b = Vec::new();
    for k in 0..5 {
        set(&mut b, k * EXTENT, &plain[&("b", k)]);
    }
    set(&mut b, EXTENT, &plain[&("b2", 0)]);
    set(&mut b, 2 * EXTENT + 100, &over);
    b.truncate(3 * EXTENT + 5);
    set(&mut b, 6 * EXTENT, &plain[&("b", 4)]);
    b.resize(7 * EXTENT, 0);

    let mut trees = Vec::new();
    for in_place in [false, true] {
        let dest = tmp
            .path()
            .join(if in_place { "in-place" } else { "threads" });
        fs::create_dir(&dest).unwrap();
        let out = receive(&dest, &stream, in_place, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vol = dest.join("vol");
        assert!(fs::read(vol.join("a")).unwrap() == a, "a ({in_place})");
        assert!(fs::read(vol.join("b")).unwrap() == b, "b ({in_place})");
        assert_eq!(fs::read(vol.join("c")).unwrap(), small);
        let mtime = fs::metadata(vol.join("a")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(mtime.mtime(), t.sec, "a's UTIMES comes after its data");
        trees.push(vol);
    }
    assert_same_tree(
        "threads against in place",
        &trees[1],
        &trees[0],
        Leeway {
            root_times: true,
            atimes: true,
            unset_times: true,
        },
    );
}

/// The error lines of a receive naming a command.
fn errors(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("error:") && l.contains("command #"))
        .map(str::to_string)
        .collect()
}

#[test]
fn corrupt_extents_in_a_run_name_their_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let mut packed: Vec<Vec<u8>> = (0..6).map(|k| zlib(&text("d", k))).collect();
    // Wrong adler32 in the fourth and sixth extents (commands #6 and #8).
    for k in [3, 5] {
        *packed[k].last_mut().unwrap() ^= 1;
    }
    let mut cmds = subvol_with(b"d");
    for (k, p) in packed.iter().enumerate() {
        cmds.push(encoded(b"d", (k * EXTENT) as u64, EXTENT, p));
    }
    cmds.push(Command::End {});
    let stream = tmp.path().join("s");
    write_stream(&stream, &cmds);

    for (extra, want) in [(&[][..], 1), (&["-E", "0"][..], 2)] {
        let mut seen = Vec::new();
        for in_place in [false, true] {
            let dest = tmp.path().join(format!("{}-{in_place}", extra.len()));
            fs::create_dir(&dest).unwrap();
            let out = receive(&dest, &stream, in_place, extra);
            assert_eq!(out.status.code(), Some(1), "{out:?}");
            let errs = errors(&out);
            assert_eq!(errs.len(), want, "{errs:?}");
            assert!(
                errs[0].contains("corrupt zlib data")
                    && errs[0].contains("'d' (command #6 ENCODED_WRITE at byte"),
                "{errs:?}"
            );
            if want == 2 {
                assert!(errs[1].contains("command #8 ENCODED_WRITE"), "{errs:?}");
                // The good extents around the bad ones were written.
                let d = fs::read(dest.join("vol/d")).unwrap();
                assert!(d[4 * EXTENT..5 * EXTENT] == text("d", 4)[..]);
                assert!(d[..EXTENT] == text("d", 0)[..]);
            }
            let all = String::from_utf8_lossy(&out.stderr);
            seen.push(all.replace(dest.to_str().unwrap(), "DEST"));
        }
        assert_eq!(seen[0], seen[1], "threads against in place");
    }
}
