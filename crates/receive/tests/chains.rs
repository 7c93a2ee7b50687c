//! Chains of incremental streams made live by the kernel: a full stream of
//! s0 and incrementals s0→s1→s2→s3 (renames, moves across directories,
//! hardlinks gained and lost, overwrites, deletes, xattrs, modes, owners,
//! reflinks within and across snapshots, holes, truncation), in protocol v1
//! and v2 with compressed data. rreceive onto ext4, tmpfs and btrfs must
//! give the same trees as `btrfs receive` onto btrfs. Then the subvolumes
//! rreceive made on btrfs are sent again, as fstests btrfs/110 and 111 do,
//! and received elsewhere: their received_uuid carries the chain.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use testkit::{ext4_image, kernel_available, run, sh, BtrfsImage, Tmpfs};

const SNAPS: [&str; 4] = ["s0", "s1", "s2", "s3"];

fn write(p: &Path, len: usize, seed: u8) {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    fs::write(p, data).unwrap();
}

fn snapshot(img: &BtrfsImage, name: &str) {
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "snapshot", "-r"])
        .arg(img.mnt().join("vol"))
        .arg(img.mnt().join(name)));
}

/// Builds vol and its read-only snapshots s0..s3 on `img`.
fn make_snapshots(img: &BtrfsImage) {
    let m = img.mnt();
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(m.join("vol")));
    let v = m.join("vol");
    // s0
    fs::create_dir_all(v.join("a/b/c")).unwrap();
    fs::create_dir_all(v.join("d/e")).unwrap();
    write(&v.join("a/big"), 300_000, 1);
    write(&v.join("a/b/small"), 100, 2);
    write(&v.join("d/e/mid"), 70_000, 3);
    write(&v.join("hl1"), 5000, 4);
    fs::hard_link(v.join("hl1"), v.join("a/hl2")).unwrap();
    symlink("a/big", v.join("sym")).unwrap();
    xattr::set(v.join("a/b/small"), "user.one", b"1").unwrap();
    fs::set_permissions(v.join("d/e"), fs::Permissions::from_mode(0o750)).unwrap();
    sh(
        &v,
        "cp --reflink=always a/big a/b/c/big-clone
         mkfifo d/fifo
         chown 1000:1000 d/e/mid
         truncate -s 1M sparse && printf x | dd of=sparse bs=1 seek=500000 conv=notrunc status=none
         touch -h -d '2020-02-02 02:02:02.5' sym a/big",
    );
    snapshot(img, "s0");
    // s1: renames, moves, overwrite, new hardlink, xattr change, append.
    sh(
        &v,
        "mv a/b d/b-moved
         mv d/e/mid a/mid-moved
         ln a/mid-moved d/mid-link
         printf 'appended' >> hl1
         setfattr -n user.one -v changed d/b-moved/small
         setfattr -n user.two -v new d/b-moved/small
         echo new > d/new-file
         mv d/new-file hl1-over
         chmod 4755 a/mid-moved
         cp --reflink=always a/big d/from-parent
         dd if=/dev/urandom of=a/big bs=4096 seek=10 count=3 conv=notrunc status=none",
    );
    snapshot(img, "s1");
    // s2: deletes, rmdir, dir swap, hardlink loss, truncate, recreate.
    sh(
        &v,
        "rm a/hl2
         rm -r d/b-moved/c
         mv a d/x && mv d/e a && mv d/x a/x
         truncate -s 1000 a/x/big
         rm sym && ln -s elsewhere sym
         setfattr -x user.two d/b-moved/small
         rm d/mid-link
         printf again > recreated
         chown 1234:5678 recreated
         mkdir d/will-be-file
         fallocate -p -o 65536 -l 65536 a/x/mid-moved",
    );
    snapshot(img, "s2");
    // s3: many small changes and a file that replaces a directory.
    sh(
        &v,
        "rmdir d/will-be-file
         printf z > d/will-be-file
         for i in $(seq 1 40); do echo $i > d/f$i; done
         for i in $(seq 1 20); do mv d/f$i d/g$i; done
         touch -d '1999-09-09' d/g3
         mkdir -p deep/1/2/3/4/5 && mv d/g4 deep/1/2/3/4/5/",
    );
    snapshot(img, "s3");
}

/// Full and incremental streams of s0..s3 with `args` (e.g. --proto 2).
fn streams(img: &BtrfsImage, tag: &str, args: &[&str]) -> Vec<PathBuf> {
    kernel_streams(img, &SNAPS, tag, args)
}

fn receive_chain(dest: &Path, streams: &[PathBuf], extra: &[&str]) {
    for s in streams {
        rreceive_ok(dest, s, extra);
    }
}

fn compare_chain(what: &str, want: &Path, got: &Path) {
    let mut n = 0;
    for s in SNAPS {
        // An incremental stream may rename in a root it sends no times for.
        n += assert_same_tree(
            &format!("{what} {s}"),
            &want.join(s),
            &got.join(s),
            Leeway {
                root_times: true,
                ..Leeway::default()
            },
        );
    }
    println!("{what}: {n} paths identical");
    assert!(n > 100);
}

#[test]
fn chain_of_three_incrementals_onto_ext4_tmpfs_and_btrfs() {
    if !kernel_available("chain_of_three_incrementals_onto_ext4_tmpfs_and_btrfs") {
        return;
    }
    let src = BtrfsImage::new(512, &[], "compress=zstd");
    make_snapshots(&src);
    for (tag, args) in [
        ("v1", &[][..]),
        ("v2", &["--proto", "2", "--compressed-data"][..]),
    ] {
        let chain = streams(&src, tag, args);
        let reference = BtrfsImage::new(512, &[], "noatime");
        for s in &chain {
            btrfs_receive(reference.mnt(), s);
        }
        let ext4 = ext4_image(512, &[], "noatime");
        receive_chain(ext4.mnt(), &chain, &[]);
        compare_chain(&format!("{tag} ext4"), reference.mnt(), ext4.mnt());
        for s in SNAPS {
            assert!(plain_state(&ext4.mnt().join(s))
                .unwrap()
                .contains("complete=1"));
        }
        let tmpfs = Tmpfs::new(512, "noatime");
        receive_chain(tmpfs.mnt(), &chain, &[]);
        compare_chain(&format!("{tag} tmpfs"), reference.mnt(), tmpfs.mnt());
        let btrfs = BtrfsImage::new(512, &[], "noatime");
        receive_chain(btrfs.mnt(), &chain, &[]);
        compare_chain(&format!("{tag} btrfs"), reference.mnt(), btrfs.mnt());
        for s in SNAPS {
            let (want, _) = subvol_show(&reference.mnt().join(s));
            let (got, ro) = subvol_show(&btrfs.mnt().join(s));
            assert!(
                ro && got == want,
                "{tag} {s}: received uuid {got} vs {want}, ro {ro}"
            );
        }
    }
}

/// fstests btrfs/110 and 111: what rreceive received on btrfs is sent
/// again (full and incremental) and received on a third filesystem.
#[test]
fn received_subvolumes_can_be_sent_again_and_serve_as_parents() {
    if !kernel_available("received_subvolumes_can_be_sent_again_and_serve_as_parents") {
        return;
    }
    let src = BtrfsImage::new(512, &[], "");
    make_snapshots(&src);
    let chain = streams(&src, "v1", &[]);
    let middle = BtrfsImage::new(512, &[], "noatime");
    receive_chain(middle.mnt(), &chain, &[]);
    // Send from the received copies: the kernel puts their received_uuid in
    // the stream, so parents are found by it on the next hop.
    let mut again = Vec::new();
    for (i, s) in SNAPS.iter().enumerate() {
        let file = middle.scratch().join(format!("again-{s}.stream"));
        let mut a: Vec<PathBuf> = Vec::new();
        if i > 0 {
            a.push("-p".into());
            a.push(middle.mnt().join(SNAPS[i - 1]));
        }
        a.push(middle.mnt().join(s));
        let args: Vec<&OsStr> = a.iter().map(|p| p.as_os_str()).collect();
        fs::write(&file, middle.send(&args)).unwrap();
        again.push(file);
    }
    let uuids: Vec<_> = chain.iter().map(|s| stream_uuids(s)[0]).collect();
    let uuids_again: Vec<_> = again.iter().map(|s| stream_uuids(s)[0]).collect();
    assert_eq!(
        uuids, uuids_again,
        "re-sent streams carry the original uuids"
    );

    // Third hop: onto ext4 with rreceive and onto btrfs with btrfs receive.
    let third = ext4_image(512, &[], "noatime");
    receive_chain(third.mnt(), &again, &[]);
    let progs = BtrfsImage::new(512, &[], "noatime");
    for s in &again {
        btrfs_receive(progs.mnt(), s);
    }
    compare_chain("third hop", progs.mnt(), third.mnt());
    // And the original chain received by btrfs receive matches too.
    let direct = BtrfsImage::new(512, &[], "noatime");
    for s in &chain {
        btrfs_receive(direct.mnt(), s);
    }
    compare_chain("direct vs third hop", direct.mnt(), third.mnt());
}
