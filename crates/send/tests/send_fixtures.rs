//! Full sends of every read-only snapshot of testdata/images, checked
//! without root: each stream parses, is the same on every run, and, replayed
//! into an in-memory receiver, gives exactly the tree of the snapshot's
//! manifest (taken by the kernel-side testdata/manifest.py), with its
//! hard-link groups and the number of TRUNCATEs the kernel's rule predicts.
//! Also the command-line contract: concatenated streams, bad input, exit
//! codes.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use btrfs_disk::chunk::Profile;
use btrfs_disk::Filesystem;
use btrfs_stream::Reader;
use common::model::Model;
use common::{
    expected_truncates, fixtures, read_manifest, ro_snapshots, rsend_stream, source_link_groups,
    Fixture,
};

fn rsend(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rsend"))
        .args(args)
        .output()
        .expect("run rsend")
}

fn dev_args(devs: &[PathBuf]) -> Vec<std::ffi::OsString> {
    devs.iter()
        .flat_map(|d| ["-d".into(), d.clone().into_os_string()])
        .collect()
}

fn first_diff(want: &[String], got: &[String]) -> String {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w != g {
            return format!("line {i}:\n  want {w}\n  got  {g}");
        }
    }
    format!("{} lines wanted, {} got", want.len(), got.len())
}

#[test]
fn every_read_only_snapshot_replays_to_its_manifest() {
    let all = fixtures();
    if all.is_empty() {
        println!("SKIP every_read_only_snapshot_replays_to_its_manifest: no fixtures");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for f in &all {
        let devs = f.decompress(tmp.path());
        let fs = Filesystem::open(&devs).unwrap();
        for id in ro_snapshots(f) {
            let what = format!("{} subvol {id}", f.name);
            let sv = fs.subvolume(id).unwrap();
            let stream = match rsend_stream(&fs, &sv) {
                Ok(s) => s,
                Err(e) => {
                    failures.push(format!("{what}: send failed: {e}"));
                    continue;
                }
            };
            if rsend_stream(&fs, &sv).as_ref() != Ok(&stream) {
                failures.push(format!("{what}: a second send gave other bytes"));
            }
            // One stream, clean EOF right after its END.
            let mut r = Reader::new(&stream[..]);
            let mut last = None;
            loop {
                match r.next_command() {
                    Ok(Some(c)) => last = Some(c.kind()),
                    Ok(None) => break,
                    Err(e) => {
                        failures.push(format!("{what}: stream does not parse: {e}"));
                        break;
                    }
                }
            }
            if r.streams() != 1 || last != Some(btrfs_stream::CommandKind::End) {
                failures.push(format!("{what}: {} streams, last {last:?}", r.streams()));
            }
            let model = match Model::replay(&stream) {
                Ok(m) => m,
                Err(e) => {
                    failures.push(format!("{what}: replay: {e}"));
                    continue;
                }
            };
            let name = sv.link.as_ref().unwrap().name.clone();
            if model.subvol != name {
                failures.push(format!("{what}: SUBVOL path {:?}", model.subvol));
            }
            let (want, _) = read_manifest(&f.dir.join(format!("subvol-{id}.manifest")));
            let got = model.manifest();
            if got != want {
                failures.push(format!(
                    "{what}: replayed tree differs from the manifest: {}",
                    first_diff(&want, &got)
                ));
            }
            if model.link_groups() != source_link_groups(&fs, &sv) {
                failures.push(format!("{what}: hard-link groups differ"));
            }
            let truncates = model.counts.get("truncate").copied().unwrap_or(0) as usize;
            let expect = expected_truncates(f, id);
            if truncates != expect {
                failures.push(format!(
                    "{what}: {truncates} TRUNCATEs, the kernel's rule gives {expect}"
                ));
            }
            checked += 1;
        }
        drop(fs);
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    println!("{checked} snapshots replayed");
    assert!(checked > 0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The first fixture that is a single image with `pred`, decompressed.
fn one_fixture(tmp: &Path, pred: impl Fn(&Fixture) -> bool) -> Option<(Fixture, Vec<PathBuf>)> {
    let f = fixtures().into_iter().find(|f| pred(f))?;
    let devs = f.decompress(tmp);
    Some((f, devs))
}

#[test]
fn several_subvolumes_give_concatenated_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_, devs)) = one_fixture(tmp.path(), |f| f.name == "csum-crc32c") else {
        println!("SKIP several_subvolumes_give_concatenated_streams: no csum-crc32c fixture");
        return;
    };
    let out = tmp.path().join("two.stream");
    let mut args = dev_args(&devs);
    args.extend(["-q".into(), "-f".into(), out.clone().into_os_string()]);
    args.extend(["snap1".into(), "--subvolid".into(), "258".into()]);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = rsend(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "-q prints nothing");
    let bytes = std::fs::read(&out).unwrap();
    let fs = Filesystem::open(&devs).unwrap();
    let one = rsend_stream(&fs, &fs.subvolume(257).unwrap()).unwrap();
    let two = rsend_stream(&fs, &fs.subvolume(258).unwrap()).unwrap();
    assert_eq!(bytes, [one, two].concat(), "stream of snap1, then of snap2");
    let mut r = Reader::new(&bytes[..]);
    let mut ends = 0;
    while let Some(c) = r.next_command().unwrap() {
        ends += usize::from(c.kind() == btrfs_stream::CommandKind::End);
    }
    assert_eq!((r.streams(), ends), (2, 2));
}

#[test]
fn a_missing_subvolume_is_named_with_the_ones_that_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_, devs)) = one_fixture(tmp.path(), |f| f.name == "csum-crc32c") else {
        println!("SKIP a_missing_subvolume_is_named_with_the_ones_that_exist: no fixture");
        return;
    };
    let out = tmp.path().join("none.stream");
    let mut args = dev_args(&devs);
    args.extend([
        "-f".into(),
        out.clone().into_os_string(),
        "no-such-snap".into(),
    ]);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = rsend(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no subvolume at path no-such-snap"), "{err}");
    for s in [
        "vol (id 256)",
        "snap1 (id 257, read-only)",
        "snap2 (id 258, read-only)",
    ] {
        assert!(err.contains(s), "{s} missing from: {err}");
    }
    assert!(!out.exists(), "nothing is written for a bad SUBVOL");
    // A writable subvolume is refused as the kernel refuses it.
    let mut args = dev_args(&devs);
    args.extend(["-f".into(), out.clone().into_os_string(), "vol".into()]);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = rsend(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("vol (id 256) is not read-only"), "{err}");
    // Versions 1 to 3 are sent.
    let mut args = dev_args(&devs);
    args.extend([
        "--proto".into(),
        "4".into(),
        "-f".into(),
        out.into_os_string(),
    ]);
    args.push("snap1".into());
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = rsend(&args);
    // A usage error (exit 2), as any other bad value of a flag.
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("protocol version 4 is not supported"));
    // No SUBVOL at all is a usage error.
    let args = dev_args(&devs);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    assert_eq!(rsend(&args).status.code(), Some(2));
}

/// The fs-tree leaves of subvolume `id`, in key order.
fn leaves(fs: &Filesystem, id: u64) -> Vec<u64> {
    let sv = fs.subvolume(id).unwrap();
    let t = fs.fs_tree(&sv);
    let mut out = Vec::new();
    let mut stack = vec![t.root_block().unwrap()];
    while let Some(b) = stack.pop() {
        if b.is_leaf() {
            out.push(b.bytenr());
            continue;
        }
        for slot in (0..b.nritems()).rev() {
            stack.push(t.child(&b, slot).unwrap());
        }
    }
    out
}

#[test]
fn a_damaged_leaf_ends_the_stream_without_end_and_says_where() {
    let tmp = tempfile::tempdir().unwrap();
    // Metadata without a second copy, so the damage cannot be repaired.
    let mut found = None;
    for f in fixtures().into_iter().filter(|f| f.devices() == 1) {
        let devs = f.decompress(tmp.path());
        let fs = Filesystem::open(&devs).unwrap();
        let Some(&id) = ro_snapshots(&f).first() else {
            continue;
        };
        let l = leaves(&fs, id);
        let single = l
            .iter()
            .all(|&b| fs.chunks().lookup(b).map(|c| c.profile) == Some(Profile::Single));
        if single && l.len() >= 4 {
            found = Some((f, devs, id, l));
            break;
        }
    }
    let Some((f, devs, id, l)) = found else {
        println!("SKIP a_damaged_leaf_ends_the_stream_without_end_and_says_where: no fixture with single metadata and several leaves");
        return;
    };
    let leaf = l[l.len() / 2];
    let phys = {
        let fs = Filesystem::open(&devs).unwrap();
        let chunks = fs.chunks();
        let c = chunks.lookup(leaf).unwrap();
        c.map_mirror(leaf, 1, 1).unwrap().physical
    };
    testkit::xor_byte(&devs[0], phys + 300, 0x5a);
    let out = tmp.path().join("broken.stream");
    let mut args = dev_args(&devs);
    args.extend(["-q".into(), "-f".into(), out.clone().into_os_string()]);
    args.extend(["--subvolid".into(), id.to_string().into()]);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let o = rsend(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}: {err}", f.name);
    println!("{}: {err}", f.name);
    assert!(err.starts_with("rsend: error: "), "{err}");
    assert!(
        err.contains(&format!("tree block at logical {leaf} (tree {id})"))
            && err.contains("checksum mismatch")
            && err.contains(&format!("(subvolume {id})")),
        "{err}"
    );
    let bytes = std::fs::read(&out).unwrap();
    let mut r = Reader::new(&bytes[..]);
    let mut n = 0;
    let end = loop {
        match r.next_command() {
            Ok(Some(c)) => {
                assert_ne!(
                    c.kind(),
                    btrfs_stream::CommandKind::End,
                    "no END after an error"
                );
                n += 1;
            }
            Ok(None) => panic!("a broken stream must not end cleanly"),
            Err(e) => break e,
        }
    };
    assert!(
        n > 3,
        "what came before the damage is flushed ({n} commands)"
    );
    assert!(
        matches!(end.kind, btrfs_stream::ErrorKind::MissingEnd),
        "{end}"
    );
}

#[test]
fn a_terminal_is_refused() {
    // The check itself: a file is fine.
    let f = tempfile::tempfile().unwrap();
    assert!(rsend::output::refuse_terminal(&f, "x").is_ok());
    // The binary under a pseudo-terminal (script(1) gives it one).
    let Some(script) = testkit::which("script") else {
        println!("SKIP a_terminal_is_refused: script(1) not installed");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let Some((_, devs)) = one_fixture(tmp.path(), |f| f.name == "csum-crc32c") else {
        println!("SKIP a_terminal_is_refused: no fixture");
        return;
    };
    let cmd = format!(
        "{} -d {} snap1",
        env!("CARGO_BIN_EXE_rsend"),
        devs[0].display()
    );
    let o = Command::new(script)
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("standard output is a terminal"), "{text}");
    assert!(
        !text.contains("btrfs-stream"),
        "no stream bytes on the terminal"
    );
}

#[test]
fn a_reader_that_goes_away_makes_a_write_error() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_, devs)) = one_fixture(tmp.path(), |f| f.name == "raid1") else {
        println!("SKIP a_reader_that_goes_away_makes_a_write_error: no raid1 fixture");
        return;
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
    cmd.args(dev_args(&devs)).args(["-q", "snap1"]);
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 17];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    assert_eq!(&head[..13], b"btrfs-stream\0");
    // The pipe is closed now; the stream (3 MiB) cannot all go out.
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rsend: error: writing the stream: Broken pipe"),
        "{err}"
    );
}
