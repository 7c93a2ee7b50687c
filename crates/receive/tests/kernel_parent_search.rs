//! On btrfs, rreceive finds an incremental stream's parent (and clone
//! sources) as `btrfs receive` does: in DEST, then anywhere beneath the
//! mount root of DEST, by received uuid and then by uuid; `-m ROOTMOUNT`
//! names another mount root. Streams from the kernel's `btrfs send`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use testkit::{kernel_available, run, sh, BtrfsImage};

/// A source filesystem with read-only snapshots `snaps/s1` and `snaps/s2`
/// of subvolume `src` (s2 changes, renames and clones s1's files), and
/// the streams `full` (s1) and `incr` (s2 against s1) in its scratch
/// directory.
fn source() -> (BtrfsImage, PathBuf, PathBuf) {
    let img = BtrfsImage::new(256, &[], "noatime");
    sh(
        img.mnt(),
        "btrfs -q subvolume create src && mkdir snaps && cd src && mkdir -p d/e && \
         head -c 300000 /dev/urandom > big && echo one > d/f && ln -s d/f link && \
         cd .. && btrfs -q subvolume snapshot -r src snaps/s1 && cd src && \
         echo two >> d/f && mv d/e d/g && cp --reflink=always big big2 && rm link && \
         touch -d @1000000000 d && cd .. && btrfs -q subvolume snapshot -r src snaps/s2",
    );
    let full = img.scratch().join("full.stream");
    let incr = img.scratch().join("incr.stream");
    let m = img.mnt();
    let s1 = m.join("snaps/s1");
    let s2 = m.join("snaps/s2");
    fs::write(&full, img.send(&[s1.as_os_str()])).unwrap();
    fs::write(
        &incr,
        img.send(&["-p".as_ref(), s1.as_os_str(), s2.as_os_str()]),
    )
    .unwrap();
    (img, full, incr)
}

/// `btrfs subvolume show`'s field `name` of `path`.
fn show(path: &Path, name: &str) -> String {
    let out = run(Command::new("btrfs").args(["subvolume", "show"]).arg(path));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

/// A second mount of a filesystem, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn new(dev: &str, opts: &str, at: PathBuf) -> Mount {
        fs::create_dir_all(&at).unwrap();
        run(Command::new("mount").args(["-o", opts, dev]).arg(&at));
        Mount(at)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        testkit::unmount(&self.0);
    }
}

/// The source (see [`source`]) and an empty destination filesystem, or
/// None when `test` cannot run here.
fn start(test: &str) -> Option<(BtrfsImage, PathBuf, PathBuf, BtrfsImage)> {
    if !kernel_available(test) {
        return None;
    }
    let (src, full, incr) = source();
    Some((src, full, incr, BtrfsImage::new(256, &[], "noatime")))
}

#[test]
fn the_parent_is_found_beside_dest_by_received_uuid_as_btrfs_receive_finds_it() {
    let Some((_src, full, incr, got)) =
        start("the_parent_is_found_beside_dest_by_received_uuid_as_btrfs_receive_finds_it")
    else {
        return;
    };
    // What btrfs receive makes of DEST/a then DEST/b.
    let want = BtrfsImage::new(256, &[], "noatime");
    for img in [&want, &got] {
        fs::create_dir_all(img.mnt().join("dest/a")).unwrap();
        fs::create_dir_all(img.mnt().join("dest/b")).unwrap();
    }
    btrfs_receive(&want.mnt().join("dest/a"), &full);
    btrfs_receive(&want.mnt().join("dest/b"), &incr);
    rreceive_ok(&got.mnt().join("dest/a"), &full, &["-q"]);
    let out = rreceive_ok(&got.mnt().join("dest/b"), &incr, &[]);
    assert_no_panic(&out);
    for s in ["dest/a/s1", "dest/b/s2"] {
        assert_same_tree(
            s,
            &want.mnt().join(s),
            &got.mnt().join(s),
            Leeway::default(),
        );
    }
    // b/s2 is a snapshot of a/s1, as btrfs receive makes it.
    let a = show(&got.mnt().join("dest/a/s1"), "UUID:");
    assert_eq!(show(&got.mnt().join("dest/b/s2"), "Parent UUID:"), a);
    let (received, ro) = subvol_show(&got.mnt().join("dest/b/s2"));
    assert!(ro);
    assert_eq!(
        received,
        show(&want.mnt().join("dest/b/s2"), "Received UUID:")
    );
    // `rreceive --list` of DEST/b names s2's parent by the uuid the stream
    // named it by (a/s1's received uuid), whichever receive filled it.
    let parent = stream_uuids(&full)[0].hyphenated().to_string();
    for (tag, img) in [("btrfs receive", &want), ("rreceive", &got)] {
        let dest = img.mnt().join("dest/b");
        let list = run(Command::new(rreceive_bin()).arg("--list").arg(&dest)).stdout;
        let list = String::from_utf8_lossy(&list);
        let s2: Vec<&str> = list.lines().next().unwrap_or("").split('\t').collect();
        assert_eq!(s2.first(), Some(&"s2"), "{tag}: {list}");
        assert_eq!(s2.get(3), Some(&parent.as_str()), "{tag}: {list}");
        let json = run(Command::new(rreceive_bin())
            .args(["--list", "--json"])
            .arg(&dest))
        .stdout;
        let json = String::from_utf8_lossy(&json);
        assert!(
            json.contains(&format!(
                "\"incremental\":true,\"parent_uuid\":\"{parent}\""
            )),
            "{tag}: {json}"
        );
    }
}

/// The parent an incremental stream's SNAPSHOT names: its uuid and
/// ctransid at the sender.
fn snapshot_parent(stream: &Path) -> (uuid::Uuid, u64) {
    let data = fs::read(stream).unwrap();
    let mut r = btrfs_stream::Reader::from_bytes(&data[..]);
    while let Some(c) = r.next_command().unwrap() {
        if let btrfs_stream::Command::Snapshot {
            clone_uuid,
            clone_ctransid,
            ..
        } = c
        {
            return (clone_uuid, clone_ctransid);
        }
    }
    panic!("{}: no SNAPSHOT", stream.display());
}

/// `rreceive --list --json` of a btrfs DEST gives an incremental's
/// `parent_ctransid`: the ctransid its stream named the parent by, as off
/// btrfs, whether the parent is in DEST or elsewhere on the filesystem,
/// received by rreceive or by btrfs receive. It was 0 on btrfs.
#[test]
fn list_json_gives_an_incrementals_parent_ctransid_on_btrfs() {
    let Some((_src, full, incr, got)) =
        start("list_json_gives_an_incrementals_parent_ctransid_on_btrfs")
    else {
        return;
    };
    let (parent_uuid, parent_ctransid) = snapshot_parent(&incr);
    assert_eq!(parent_uuid, stream_uuids(&full)[0]);
    assert_ne!(parent_ctransid, 0);
    let want = format!(
        "\"incremental\":true,\"parent_uuid\":\"{parent_uuid}\",\"parent_ctransid\":{parent_ctransid},\"complete\":true"
    );
    let s2_of = |dest: &Path| -> String {
        let out = run(Command::new(rreceive_bin())
            .args(["--list", "--json"])
            .arg(dest));
        let json = String::from_utf8_lossy(&out.stdout).into_owned();
        json.lines()
            .find(|l| l.starts_with("{\"name\":\"s2\","))
            .unwrap_or_else(|| panic!("no s2 in {json}"))
            .to_owned()
    };
    // Off btrfs (tmpfs), from what the receive recorded.
    let tmpfs = testkit::Tmpfs::new(64, "");
    rreceive_ok(tmpfs.mnt(), &full, &["-q"]);
    rreceive_ok(tmpfs.mnt(), &incr, &["-q"]);
    let s2 = s2_of(tmpfs.mnt());
    assert!(s2.contains(&want), "tmpfs: {s2}");
    // On btrfs: the parent in DEST (same) and beside it (a, b).
    let by_btrfs = BtrfsImage::new(256, &[], "noatime");
    for img in [&by_btrfs, &got] {
        for d in ["same", "a", "b"] {
            fs::create_dir_all(img.mnt().join(d)).unwrap();
        }
    }
    for (dest, stream) in [("same", &full), ("same", &incr), ("a", &full), ("b", &incr)] {
        btrfs_receive(&by_btrfs.mnt().join(dest), stream);
        rreceive_ok(&got.mnt().join(dest), stream, &["-q"]);
    }
    for (tag, img) in [("btrfs receive", &by_btrfs), ("rreceive", &got)] {
        for dest in ["same", "b"] {
            let s2 = s2_of(&img.mnt().join(dest));
            assert!(s2.contains(&want), "{tag} into {dest}: {s2}");
        }
    }
}

#[test]
fn the_parent_is_found_by_its_own_uuid_on_the_sending_filesystem() {
    if !kernel_available("the_parent_is_found_by_its_own_uuid_on_the_sending_filesystem") {
        return;
    }
    let (img, _full, incr) = source();
    // snaps/s1 was never received: it is found by its own uuid.
    let got = both_receive(img.mnt(), "", &incr);
    assert_same_tree(
        "s2 as sent",
        &img.mnt().join("snaps/s2"),
        &got,
        Leeway::default(),
    );
    let s1 = show(&img.mnt().join("snaps/s1"), "UUID:");
    assert_eq!(show(&got, "Parent UUID:"), s1);
    // Writable now: btrfs receive takes it all the same, and so does
    // rreceive (it is no unfinished receive of its own).
    run(Command::new("btrfs")
        .args(["property", "set", "-ts"])
        .arg(img.mnt().join("snaps/s1"))
        .args(["ro", "false"]));
    both_receive(img.mnt(), "-rw", &incr);
}

/// Receives `stream` (of s2) with btrfs receive into `<mnt>/ref<tag>` and
/// with rreceive into `<mnt>/got<tag>`, checks that both made the same
/// s2 and returns rreceive's.
fn both_receive(mnt: &Path, tag: &str, stream: &Path) -> PathBuf {
    let (want, got) = (mnt.join(format!("ref{tag}")), mnt.join(format!("got{tag}")));
    fs::create_dir(&want).unwrap();
    fs::create_dir(&got).unwrap();
    btrfs_receive(&want, stream);
    rreceive_ok(&got, stream, &["-q"]);
    assert_same_tree(
        &format!("s2 in got{tag}"),
        &want.join("s2"),
        &got.join("s2"),
        Leeway::default(),
    );
    got.join("s2")
}

#[test]
fn a_parent_outside_the_mount_is_found_with_m_rootmount_and_named_without() {
    let Some((src, full, incr, img)) =
        start("a_parent_outside_the_mount_is_found_with_m_rootmount_and_named_without")
    else {
        return;
    };
    sh(
        img.mnt(),
        "btrfs -q subvolume create @data && btrfs -q subvolume create @dest && mkdir @data/a",
    );
    rreceive_ok(&img.mnt().join("@data/a"), &full, &["-q"]);
    // DEST on a mount of @dest only: @data/a/s1 is not beneath its root.
    let m2 = Mount::new(
        img.loop_device(),
        "subvol=@dest,noatime",
        img.scratch().join("m2"),
    );
    let dest = m2.0.as_path();
    let out = rreceive(&[dest.as_os_str()], &incr);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let parent = stream_uuids(&full)[0];
    assert!(
        err.contains(&format!("parent subvolume {parent} not found"))
            && err.contains("<FS_TREE>/@data/a/s1")
            && err.contains("not reachable"),
        "{err}"
    );
    assert!(!dest.join("s2").exists());
    // -m: the top level, mounted elsewhere.
    let m = img.mnt().as_os_str();
    let out = rreceive(&["-m".as_ref(), m, "-v".as_ref(), dest.as_os_str()], &incr);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "parent {parent} found outside DEST: {}",
            img.mnt().join("@data/a/s1").display()
        )),
        "{err}"
    );
    assert_same_tree(
        "s2",
        &src.mnt().join("snaps/s2"),
        &dest.join("s2"),
        Leeway::default(),
    );
    let a = show(&img.mnt().join("@data/a/s1"), "UUID:");
    assert_eq!(show(&dest.join("s2"), "Parent UUID:"), a);
}

#[test]
fn a_parent_nowhere_on_the_filesystem_is_named_by_its_uuid() {
    let Some((_src, full, incr, img)) =
        start("a_parent_nowhere_on_the_filesystem_is_named_by_its_uuid")
    else {
        return;
    };
    let dest = img.mnt().join("dest");
    fs::create_dir(&dest).unwrap();
    let out = rreceive(&["-C".as_ref(), "-v".as_ref(), dest.as_os_str()], &incr);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-C: no chroot needed"), "{err}");
    let parent = stream_uuids(&full)[0];
    assert!(
        err.contains(&format!(
            "parent subvolume {parent} not found in {}",
            dest.display()
        )) && err.contains("by received uuid, then by uuid"),
        "{err}"
    );
    // btrfs receive fails too.
    let out = Command::new("btrfs")
        .args(["receive", "-f"])
        .arg(&incr)
        .arg(&dest)
        .output()
        .unwrap();
    assert!(!out.status.success());
}
