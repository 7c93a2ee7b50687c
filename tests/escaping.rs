//! One escaping for names in every tool's text: a snapshot and a file both
//! named `a b\xff` (a space and a byte that is not UTF-8) are `a\ b\377` in
//! `btrfs receive --dump` (the oracle), in rdump (all of its output equals
//! the oracle's), in `rreceive --list` and in `rsend --changes`.
//!
//! Needs root, loop devices and btrfs-progs (one SKIP line otherwise).

use std::ffi::OsStr;
use std::fs;
use std::process::Command;

use testkit::{kernel_available, os, rdump_bin, rreceive_bin, rsend_bin, run, BtrfsImage};

/// The name of the snapshot and of the file in it.
const NAME: &[u8] = b"a b\xff";
/// `NAME` as `btrfs receive --dump` prints it.
const ESCAPED: &str = r"a\ b\377";

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("escaped output is ASCII")
}

#[test]
fn rdump_rreceive_list_and_rsend_changes_escape_names_as_btrfs_receive_dump() {
    if !kernel_available("rdump_rreceive_list_and_rsend_changes_escape_names_as_btrfs_receive_dump")
    {
        return;
    }
    let fs = BtrfsImage::new(512, &[], "");
    let src = fs.mnt().join("src");
    let snap = fs.mnt().join(os(NAME));
    let btrfs = |args: &[&OsStr]| run(Command::new("btrfs").arg("-q").args(args));
    btrfs(&["subvolume".as_ref(), "create".as_ref(), src.as_os_str()]);
    btrfs(&[
        "subvolume".as_ref(),
        "snapshot".as_ref(),
        "-r".as_ref(),
        src.as_os_str(),
        fs.mnt().join("p").as_os_str(),
    ]);
    fs::write(src.join(os(NAME)), b"data\n").unwrap();
    btrfs(&[
        "subvolume".as_ref(),
        "snapshot".as_ref(),
        "-r".as_ref(),
        src.as_os_str(),
        snap.as_os_str(),
    ]);
    btrfs(&["filesystem".as_ref(), "sync".as_ref(), fs.mnt().as_os_str()]);
    // rsend takes SUBVOL as UTF-8; the snapshot goes by its id.
    let out = run(Command::new("btrfs")
        .args(["inspect-internal", "rootid"])
        .arg(&snap));
    let id = text(&out.stdout).trim().to_owned();
    let dev = fs.loop_device();

    let stream = fs.scratch().join("stream");
    run(Command::new(rsend_bin())
        .args(["-q", "-d", dev, "--subvolid", &id, "-f"])
        .arg(&stream));

    // The oracle, and rdump equal to it.
    let progs = text(
        &run(Command::new("btrfs")
            .args(["receive", "--dump", "-f"])
            .arg(&stream))
        .stdout,
    );
    // The snapshot's own line, and the file's path inside it.
    let subvol = format!("./{ESCAPED} ");
    let file = format!("./{ESCAPED}/{ESCAPED} ");
    assert!(
        progs
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("subvol"))
            .is_some_and(|l| l.trim_start().starts_with(&subvol))
            && progs.lines().any(|l| l.contains(&file)),
        "btrfs receive --dump does not show {subvol:?} and {file:?}:\n{progs}"
    );
    let ours = text(&run(Command::new(rdump_bin()).arg(&stream)).stdout);
    assert_eq!(ours, progs, "rdump differs from btrfs receive --dump");

    // rreceive --list: the name is the first field.
    let dest = fs.scratch().join("dest");
    fs::create_dir(&dest).unwrap();
    run(Command::new(rreceive_bin())
        .arg("-q")
        .arg(&dest)
        .stdin(fs::File::open(&stream).unwrap()));
    let list = text(&run(Command::new(rreceive_bin()).arg("--list").arg(&dest)).stdout);
    let names: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(names, [ESCAPED], "rreceive --list:\n{list}");

    // rsend --changes: the file created since the parent.
    let changes = text(
        &run(Command::new(rsend_bin()).args([
            "-q",
            "-d",
            dev,
            "--changes",
            "-p",
            "p",
            "--subvolid",
            &id,
        ]))
        .stdout,
    );
    assert!(
        changes.lines().any(|l| l == format!("+\t{ESCAPED}")),
        "rsend --changes does not list +\t{ESCAPED}:\n{changes}"
    );
}
