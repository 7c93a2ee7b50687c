//! The `rsend -p` command line on the reflink-snapshots fixture image (no
//! root needed): the SNAPSHOT command names the parent as the kernel does,
//! `--parent-id`, a uuid and `-c` pick the same parent, and bad parents
//! (missing, writable, on another filesystem) are clear errors with exit
//! code 1 and no stream at all; an unrelated parent is a warning.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use btrfs_disk::{Filesystem, SubvolSelector};
use btrfs_stream::{Command as Cmd, Reader};
use common::fixtures;

fn rsend(img: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rsend"))
        .arg("-d")
        .arg(img)
        .args(args.iter().map(OsStr::new))
        .output()
        .expect("run rsend")
}

/// The image of the reflink-snapshots fixture, decompressed into `dir`.
fn image(dir: &Path) -> Option<PathBuf> {
    let f = fixtures()
        .into_iter()
        .find(|f| f.name == "reflink-snapshots")?;
    f.decompress(dir).into_iter().next()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn snapshot_command_names_the_parent_and_every_way_to_pick_it_agrees() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path()) else {
        println!("SKIP snapshot_command_names_the_parent: no reflink-snapshots fixture");
        return;
    };
    let fs = Filesystem::open(std::slice::from_ref(&img)).unwrap();
    let snap1 = fs
        .find_subvolume(&SubvolSelector::Path("snap1".into()))
        .unwrap();
    let snap2 = fs
        .find_subvolume(&SubvolSelector::Path("snap2".into()))
        .unwrap();

    let out = tmp.path().join("by-path");
    let o = rsend(
        &img,
        &["-q", "-p", "snap1", "-f", out.to_str().unwrap(), "snap2"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    let mut r = Reader::new(&bytes[..]);
    match r.next_command().unwrap() {
        Some(Cmd::Snapshot {
            path,
            uuid,
            ctransid,
            clone_uuid,
            clone_ctransid,
        }) => {
            assert_eq!(path, b"snap2");
            assert_eq!(uuid.as_bytes(), snap2.uuid.as_bytes());
            assert_eq!(ctransid, snap2.ctransid);
            assert_eq!(clone_uuid.as_bytes(), snap1.uuid.as_bytes());
            assert_eq!(clone_ctransid, snap1.ctransid);
        }
        other => panic!("first command is {other:?}, not SNAPSHOT"),
    }
    let mut last = None;
    while let Some(c) = r.next_command().unwrap() {
        last = Some(c.kind());
    }
    assert_eq!(last, Some(btrfs_stream::CommandKind::End));

    let id = snap1.id.to_string();
    let uuid = snap1.uuid.to_string();
    for (what, args) in [
        ("--parent-id", vec!["--parent-id", id.as_str()]),
        ("-p UUID", vec!["-p", uuid.as_str()]),
        // snap2's origin (vol) is not a clone source: its sibling snap1 is.
        ("-c", vec!["-c", "snap1"]),
    ] {
        let f = tmp.path().join("other");
        let mut a = vec!["-q"];
        a.extend(args);
        a.extend(["-f", f.to_str().unwrap(), "snap2"]);
        let o = rsend(&img, &a);
        assert!(o.status.success(), "{what}: {}", stderr(&o));
        assert_eq!(
            std::fs::read(&f).unwrap(),
            bytes,
            "{what} picks another parent"
        );
    }
}

#[test]
fn bad_parents_are_clear_errors_without_a_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path()) else {
        println!("SKIP bad_parents_are_clear_errors: no reflink-snapshots fixture");
        return;
    };
    let cases: [(&str, Vec<&str>, &str); 5] = [
        ("missing", vec!["-p", "nosuch"], "parent not found"),
        ("writable", vec!["-p", "snap2-rw"], "is not read-only"),
        (
            "another filesystem",
            vec!["-p", "11111111-2222-3333-4444-555555555555"],
            "another filesystem",
        ),
        ("missing id", vec!["--parent-id", "999"], "parent not found"),
        (
            "no parent among clone sources",
            vec!["-c", "nested-snap"],
            "parent determination failed",
        ),
    ];
    for (what, args, msg) in cases {
        let out = tmp.path().join(format!("out-{}", what.replace(' ', "-")));
        let mut a = args.clone();
        a.extend(["-f", out.to_str().unwrap(), "snap2"]);
        let o = rsend(&img, &a);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(msg), "{what}: {e}");
        assert!(
            !out.exists(),
            "{what}: a stream was written before the parent was checked"
        );
        // The same to standard output: nothing at all.
        let mut a = args.clone();
        a.push("snap2");
        let o = rsend(&img, &a);
        assert_eq!(o.status.code(), Some(1), "{what}");
        assert!(
            o.stdout.is_empty(),
            "{what}: {} bytes on stdout",
            o.stdout.len()
        );
    }
}

#[test]
fn an_unrelated_parent_is_allowed_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path()) else {
        println!("SKIP an_unrelated_parent_is_allowed: no reflink-snapshots fixture");
        return;
    };
    let out = tmp.path().join("s");
    let o = rsend(
        &img,
        &["-p", "nested-snap", "-f", out.to_str().unwrap(), "snap2"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("is not related"), "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    let mut r = Reader::new(&bytes[..]);
    assert!(matches!(
        r.next_command().unwrap(),
        Some(Cmd::Snapshot { .. })
    ));
}
