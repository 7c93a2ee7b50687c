//! Every kernel-made fixture stream (testdata/kernel), received by rreceive
//! onto ext4, tmpfs, xfs and btrfs, gives the same tree as real
//! `btrfs receive` onto btrfs: type, mode, owner, times, xattrs, hardlinks,
//! content, symlink targets and device numbers.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use testkit::{ext4_image, kernel_available, xfs_image, BtrfsImage, Tmpfs};

/// (directory in DEST, streams received into it in order).
const LAYOUT: &[(&str, &[&str])] = &[
    (
        "a",
        &[
            "full-v1",
            "incr-v1",
            "full-v2-compressed",
            "incr-v2-compressed",
            "full-v1-subvol",
        ],
    ),
    ("c", &["concat-v1"]),
];

/// Received subvolumes to compare, with the leeway each needs.
fn subvols() -> Vec<(&'static str, Leeway)> {
    let exact = Leeway::default();
    vec![
        ("a/s1", exact),
        ("a/s2", exact),
        ("a/c1", exact),
        // incr-v2-compressed renames in c2's root but sends no utimes for
        // it: the receiving side's root mtime is the time of the receive.
        (
            "a/c2",
            Leeway {
                root_times: true,
                ..exact
            },
        ),
        ("a/s3", exact),
        ("c/s1", exact),
        ("c/s2", exact),
    ]
}

fn stream(name: &str) -> std::path::PathBuf {
    testdata().join("kernel").join(format!("{name}.stream"))
}

/// What real `btrfs receive` makes of the fixtures.
fn reference() -> BtrfsImage {
    let img = BtrfsImage::new(512, &[], "noatime");
    for (dir, streams) in LAYOUT {
        let d = img.mnt().join(dir);
        fs::create_dir(&d).unwrap();
        for s in *streams {
            btrfs_receive(&d, &stream(s));
        }
    }
    img
}

fn receive_all(dest: &Path, extra: &[&str]) {
    for (dir, streams) in LAYOUT {
        let d = dest.join(dir);
        fs::create_dir(&d).unwrap();
        for s in *streams {
            rreceive_ok(&d, &stream(s), extra);
        }
    }
}

fn compare_all(what: &str, reference: &Path, got: &Path) {
    let mut paths = 0;
    for (sv, leeway) in subvols() {
        paths += assert_same_tree(
            &format!("{what} {sv}"),
            &reference.join(sv),
            &got.join(sv),
            leeway,
        );
    }
    println!("{what}: {paths} paths identical to btrfs receive");
}

fn check_plain_states(dest: &Path) {
    for (sv, _) in subvols() {
        let st = plain_state(&dest.join(sv)).unwrap_or_default();
        assert!(st.contains("complete=1"), "{sv}: state {st:?}");
    }
}

#[test]
fn fixtures_onto_ext4_match_btrfs_receive() {
    if !kernel_available("fixtures_onto_ext4_match_btrfs_receive") {
        return;
    }
    let r = reference();
    let fs = ext4_image(512, &[], "noatime");
    receive_all(fs.mnt(), &[]);
    compare_all("ext4", r.mnt(), fs.mnt());
    check_plain_states(fs.mnt());
}

#[test]
fn fixtures_onto_tmpfs_match_btrfs_receive() {
    if !kernel_available("fixtures_onto_tmpfs_match_btrfs_receive") {
        return;
    }
    let r = reference();
    let fs = Tmpfs::new(512, "noatime");
    receive_all(fs.mnt(), &[]);
    compare_all("tmpfs", r.mnt(), fs.mnt());
    check_plain_states(fs.mnt());
}

#[test]
fn fixtures_onto_xfs_match_btrfs_receive() {
    if !kernel_available("fixtures_onto_xfs_match_btrfs_receive") {
        return;
    }
    if testkit::which("mkfs.xfs").is_none() {
        println!("SKIP fixtures_onto_xfs_match_btrfs_receive: no mkfs.xfs");
        return;
    }
    let r = reference();
    let fs = xfs_image(400, "noatime");
    receive_all(fs.mnt(), &[]);
    compare_all("xfs", r.mnt(), fs.mnt());
    check_plain_states(fs.mnt());
}

fn check_btrfs_received(reference: &Path, got: &Path) {
    for (sv, _) in subvols() {
        let (want_uuid, want_ro) = subvol_show(&reference.join(sv));
        let (got_uuid, got_ro) = subvol_show(&got.join(sv));
        assert!(
            want_ro && got_ro,
            "{sv}: read-only: progs {want_ro}, rreceive {got_ro}"
        );
        assert_eq!(got_uuid, want_uuid, "{sv}: received uuid");
        assert!(got_uuid.len() == 36 && got_uuid != "-", "{sv}: {got_uuid}");
        assert_eq!(
            plain_state(&got.join(sv)),
            None,
            "{sv}: no rreceive xattr left"
        );
    }
}

#[test]
fn fixtures_onto_btrfs_are_read_only_with_received_uuid() {
    if !kernel_available("fixtures_onto_btrfs_are_read_only_with_received_uuid") {
        return;
    }
    let r = reference();
    let fs = BtrfsImage::new(512, &[], "noatime");
    receive_all(fs.mnt(), &[]);
    compare_all("btrfs", r.mnt(), fs.mnt());
    check_btrfs_received(r.mnt(), fs.mnt());

    // The same with every ENCODED_WRITE decoded here instead of the ioctl.
    let fs2 = BtrfsImage::new(512, &[], "noatime");
    receive_all(fs2.mnt(), &["--force-decompress"]);
    compare_all("btrfs --force-decompress", r.mnt(), fs2.mnt());
    check_btrfs_received(r.mnt(), fs2.mnt());
}

#[test]
fn fixtures_onto_btrfs_as_plain_directories() {
    if !kernel_available("fixtures_onto_btrfs_as_plain_directories") {
        return;
    }
    let r = reference();
    let fs = BtrfsImage::new(512, &[], "noatime");
    // Directory mode on btrfs: snapshots are reflink copies.
    receive_all(fs.mnt(), &["--plain"]);
    compare_all("btrfs --plain", r.mnt(), fs.mnt());
    check_plain_states(fs.mnt());
}
