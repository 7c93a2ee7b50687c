//! Subvolumes named as `btrfs send` names them, by where they are mounted
//! (`rsend -p /mnt/pool/snaps/mon /mnt/pool/snaps/tue`, no `-d`): rsend
//! finds the mount, the subvolume's path from the top level and the
//! filesystem's devices, and reads the devices. The streams must be the
//! ones `-d DEVICE` with paths from the top level gives.
//!
//! Those that mount need root, loop devices and the btrfs module (one SKIP
//! line otherwise, a failure under RSEND_REQUIRE_KERNEL=1); the usage
//! errors that need no mount always run.

mod common;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::scenarios;
use testkit::{kernel_available, run, Attached, BtrfsImage};

/// `rsend ARGS...` run in `cwd`.
fn rsend_in<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rsend"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run rsend")
}

/// `rsend -q ARGS...`'s stream, which must succeed.
fn stream<S: AsRef<OsStr>>(args: &[S]) -> Vec<u8> {
    let mut all: Vec<OsString> = vec!["-q".into()];
    all.extend(args.iter().map(|a| a.as_ref().to_owned()));
    let o = rsend_in(Path::new("/"), &all);
    assert!(
        o.status.success(),
        "rsend {all:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.starts_with(btrfs_stream::MAGIC), "rsend {all:?}");
    o.stdout
}

/// `p` joined to `dir`, as an argument.
fn at(dir: &Path, p: &str) -> OsString {
    dir.join(p).into_os_string()
}

/// Asserts that `o` failed with `code` and says `what` on standard error.
fn fails(o: &Output, code: i32, what: &str, case: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{case}: {err}");
    assert!(err.contains(what), "{case}: {err:?} lacks {what:?}");
    assert!(o.stdout.is_empty(), "{case}: wrote a stream");
}

#[test]
fn no_device_and_no_mounted_path_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let o = rsend_in(tmp.path(), &[] as &[&str]);
    fails(&o, 2, "give SUBVOL as a path on a mounted btrfs", "rsend");
    let o = rsend_in(tmp.path(), &["--subvolid", "256"]);
    fails(&o, 2, "-d DEVICE", "rsend --subvolid 256");
    // A path from the top level without -d is taken as a mounted path, and
    // there is none.
    let o = rsend_in(tmp.path(), &["-p", "snaps/mon", "snaps/tue"]);
    fails(
        &o,
        1,
        "snaps/tue: no such file or directory; without -d a subvolume is a path on a mounted btrfs",
        "rsend -p snaps/mon snaps/tue",
    );
    let o = rsend_in(tmp.path(), &["/proc"]);
    fails(&o, 1, "/proc: not on a btrfs filesystem", "rsend /proc");
}

#[test]
fn list_json_has_one_object_per_subvolume_as_the_text_listing() {
    let dir = tempfile::tempdir().unwrap();
    let image = scenarios::decompress_image(dir.path());
    let img = image.as_os_str();
    let text = stream_text(&[OsStr::new("--list"), OsStr::new("-d"), img]);
    let json = stream_text(&[
        OsStr::new("--list"),
        OsStr::new("--json"),
        OsStr::new("-d"),
        img,
    ]);
    let rows: Vec<&str> = text.lines().collect();
    let objects: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    assert_eq!(rows.len(), objects.len());
    for (row, o) in rows.iter().zip(&objects) {
        let uuid = |k: &str| o[k].as_str().unwrap_or("-").to_owned();
        let want = format!(
            "ID {} gen {} parent {} top level {} parent_uuid {:<36} received_uuid {:<36} uuid {} path {}",
            o["id"], o["gen"], o["parent"], o["top_level"],
            uuid("parent_uuid"), uuid("received_uuid"), uuid("uuid"),
            o["path"].as_str().expect("UTF-8 paths"),
        );
        assert_eq!(*row, want);
        assert!(o["cgen"].as_u64().is_some_and(|c| c > 0), "{o}");
        assert!(o["readonly"].is_boolean(), "{o}");
    }
    let o = rsend_in(
        dir.path(),
        &[
            OsStr::new("--json"),
            OsStr::new("-d"),
            img,
            OsStr::new("chain.0"),
        ],
    );
    fails(
        &o,
        2,
        "--json goes with --list, --changes or --verify",
        "--json with a send",
    );
}

/// `rsend ARGS...`'s standard output, which must succeed, as text.
fn stream_text(args: &[&OsStr]) -> String {
    let o = rsend_in(Path::new("/"), args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("UTF-8")
}

/// A fresh btrfs mounted at the top level for `test` when it can mount
/// (after its SKIP line when not).
fn btrfs_if_kernel(test: &str) -> Option<BtrfsImage> {
    kernel_available(test).then(|| BtrfsImage::new(256, &[], ""))
}

/// A scratch directory for `test` when it can mount (after its SKIP line
/// when not).
fn scratch_if_kernel(test: &str) -> Option<tempfile::TempDir> {
    kernel_available(test).then(|| tempfile::tempdir().unwrap())
}

#[test]
fn scenarios_sent_with_mounted_paths_give_the_streams_of_d() {
    let Some(dir) = scratch_if_kernel("scenarios_sent_with_mounted_paths_give_the_streams_of_d")
    else {
        return;
    };
    let image = scenarios::decompress_image(dir.path());
    let mnt = dir.path().join("mnt");
    let _attached = Attached::new(std::slice::from_ref(&image), &mnt, false, "");
    let img = image.as_os_str();
    let mut pairs: Vec<(String, String)> = scenarios::names()
        .into_iter()
        .map(|n| (format!("{n}.p"), format!("{n}.c")))
        .collect();
    let chain = scenarios::chain();
    pairs.extend(chain.windows(2).map(|w| (w[0].clone(), w[1].clone())));
    let mut checked = 0;
    for (parent, child) in &pairs {
        let full = stream(&[at(&mnt, parent)]);
        let by_d = stream(&["-d".into(), img.to_owned(), parent.into()] as &[OsString]);
        assert!(
            full == by_d,
            "full send of {parent}: mounted path and -d differ"
        );
        let incr = stream(&["-p".into(), at(&mnt, parent), at(&mnt, child)] as &[OsString]);
        let by_d = incremental_by_d(img, parent, child);
        assert!(
            incr == by_d,
            "{parent} -> {child}: mounted paths and -d differ"
        );
        checked += 1;
    }
    assert!(checked >= 45, "{checked} pairs");
    // Relative paths are from the current directory, as btrfs send takes them.
    let (parent, child) = &pairs[0];
    let o = rsend_in(&mnt, &["-q", "-p", parent, child]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stdout == incremental_by_d(img, parent, child),
        "relative paths in the mount"
    );
}

/// `rsend -q -d DEV -p PARENT CHILD`'s stream (paths from the top level).
fn incremental_by_d(dev: &OsStr, parent: &str, child: &str) -> Vec<u8> {
    stream(&[
        OsStr::new("-d"),
        dev,
        OsStr::new("-p"),
        OsStr::new(parent),
        OsStr::new(child),
    ])
}

/// Writes `n` pseudo-random bytes from `seed` to `path`.
fn write_data(path: &Path, seed: u64, n: usize) {
    let mut rng = testkit::Rng(seed | 1);
    let data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    std::fs::write(path, data).unwrap();
}

/// `btrfs subvolume snapshot -r FROM TO`, then a commit.
fn snapshot(from: &Path, to: &Path) {
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "snapshot", "-r"])
        .arg(from)
        .arg(to));
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(from));
}

#[test]
fn two_device_filesystem_sent_by_mounted_path_as_with_both_devices() {
    let Some(dir) =
        scratch_if_kernel("two_device_filesystem_sent_by_mounted_path_as_with_both_devices")
    else {
        return;
    };
    let devs: Vec<PathBuf> = ["d1.img", "d2.img"]
        .iter()
        .map(|n| dir.path().join(n))
        .collect();
    for d in &devs {
        std::fs::File::create(d)
            .unwrap()
            .set_len(300 << 20)
            .unwrap();
    }
    // Data striped over both devices: neither alone holds the files.
    run(Command::new("mkfs.btrfs")
        .args(["-q", "-d", "raid0", "-m", "raid1"])
        .args(&devs));
    let mnt = dir.path().join("mnt");
    let a = Attached::mount_with(&devs, &mnt, true, "");
    for i in 0..8 {
        write_data(&mnt.join(format!("f{i}")), i, 300_000);
    }
    snapshot(&mnt, &mnt.join("mon"));
    write_data(&mnt.join("f3"), 99, 500_000);
    std::fs::remove_file(mnt.join("f5")).unwrap();
    snapshot(&mnt, &mnt.join("tue"));
    let mounted = stream(&["-p".into(), at(&mnt, "mon"), at(&mnt, "tue")] as &[OsString]);
    let mut by_d: Vec<OsString> = Vec::new();
    for l in a.loops() {
        by_d.extend(["-d".into(), l.into()]);
    }
    by_d.extend(["-p".into(), "mon".into(), "tue".into()]);
    assert!(
        mounted == stream(&by_d),
        "mounted paths and -d with both devices differ"
    );
    let full = stream(&[at(&mnt, "tue")]);
    by_d.drain(by_d.len() - 3..);
    by_d.push("tue".into());
    assert!(
        full == stream(&by_d),
        "full send: mounted path and -d differ"
    );
    // One device alone is not the filesystem.
    let one = rsend_in(dir.path(), &["-q", "-d", &a.loops()[0], "tue"]);
    assert!(!one.status.success(), "one device of two sent a stream");
}

/// A btrfs with its subvolume `@` holding snapshots `@/snaps/mon` and
/// `@/snaps/tue` (and a plain directory `@/dir`), mounted at the top level.
fn pool(test: &str) -> Option<BtrfsImage> {
    let img = btrfs_if_kernel(test)?;
    let mnt = img.mnt();
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(mnt.join("@")));
    std::fs::create_dir_all(mnt.join("@/snaps")).unwrap();
    std::fs::create_dir_all(mnt.join("@/dir")).unwrap();
    write_data(&mnt.join("@/a"), 1, 200_000);
    snapshot(&mnt.join("@"), &mnt.join("@/snaps/mon"));
    write_data(&mnt.join("@/b"), 2, 100_000);
    snapshot(&mnt.join("@"), &mnt.join("@/snaps/tue"));
    Some(img)
}

/// The subvolume id of the subvolume mounted at (or holding) `path`.
fn rootid(path: &Path) -> String {
    let o = run(Command::new("btrfs")
        .args(["inspect-internal", "rootid"])
        .arg(path));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn subvolume_mounted_with_subvol_or_subvolid_is_found_from_its_root() {
    let Some(mut img) = pool("subvolume_mounted_with_subvol_or_subvolid_is_found_from_its_root")
    else {
        return;
    };
    let id = rootid(&img.mnt().join("@"));
    let dev = img.loop_device().to_owned();
    let want = incremental_by_d(OsStr::new(&dev), "@/snaps/mon", "@/snaps/tue");
    let full = stream(&["-d", &dev, "@/snaps/tue"]);
    // At the top level.
    let mnt = img.mnt().to_owned();
    let got = stream(&[
        "-p".into(),
        at(&mnt, "@/snaps/mon"),
        at(&mnt, "@/snaps/tue"),
    ] as &[OsString]);
    assert!(got == want, "top level mounted");
    for opts in [
        "subvol=@".to_owned(),
        "subvol=/@".to_owned(),
        format!("subvolid={id}"),
    ] {
        img.remount(&opts);
        let got =
            stream(&["-p".into(), at(&mnt, "snaps/mon"), at(&mnt, "snaps/tue")] as &[OsString]);
        assert!(got == want, "{opts}: mounted paths and -d differ");
        assert!(
            stream(&[at(&mnt, "snaps/tue")]) == full,
            "{opts}: full send"
        );
        // With -d, an absolute path on the mounted filesystem is a mounted
        // path too, and the others stay paths from the top level.
        let mixed = stream(&[
            "-d".into(),
            dev.clone().into(),
            "-p".into(),
            at(&mnt, "snaps/mon"),
            "@/snaps/tue".into(),
        ] as &[OsString]);
        assert!(mixed == want, "{opts}: -d with a mounted path");
        // "At subvol" and the -n table name the argument as given; -n
        // prints no "At subvol".
        let o = rsend_in(&mnt, &["-f", "/dev/null", "snaps/tue"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{opts}: {err}");
        assert!(err.contains("At subvol snaps/tue\n"), "{opts}: {err}");
        let o = rsend_in(&mnt, &["-n", "snaps/tue"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{opts}: {err}");
        assert!(!err.contains("At subvol"), "{opts}: {err}");
        let table = String::from_utf8_lossy(&o.stdout);
        assert!(table.starts_with("snaps/tue\t"), "{opts}: {table}");
    }
    // --changes takes mounted paths too.
    let listed = |args: &[&OsStr]| {
        let o = rsend_in(&mnt, args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let mounted = listed(&[
        OsStr::new("--changes"),
        OsStr::new("-p"),
        OsStr::new("snaps/mon"),
        OsStr::new("snaps/tue"),
    ]);
    let d = ["--changes", "-d", &dev, "-p", "@/snaps/mon", "@/snaps/tue"].map(OsStr::new);
    assert_eq!(mounted, listed(&d));
    assert!(mounted.starts_with(b"M\t.\tmtime\n"), "{mounted:?}");
}

#[test]
fn mounted_paths_that_name_no_subvolume_of_the_filesystem_are_refused() {
    let Some(img) = pool("mounted_paths_that_name_no_subvolume_of_the_filesystem_are_refused")
    else {
        return;
    };
    let mnt = img.mnt();
    let other = BtrfsImage::new(128, &[], "");
    let elsewhere = other.snapshot("snap");
    let o = rsend_in(mnt, &["@/dir"]);
    fails(&o, 1, "@/dir is not a subvolume", "a directory");
    let o = rsend_in(mnt, &["@/a"]);
    fails(&o, 1, "@/a is not a subvolume", "a file");
    let o = rsend_in(mnt, &[&at(mnt, "@/snaps/mon"), elsewhere.as_os_str()]);
    fails(
        &o,
        1,
        "all subvolumes must be from the same filesystem",
        "two filesystems",
    );
    let o = rsend_in(
        mnt,
        &[
            OsStr::new("-p"),
            elsewhere.as_os_str(),
            &at(mnt, "@/snaps/tue"),
        ],
    );
    fails(
        &o,
        1,
        "all subvolumes must be from the same filesystem",
        "a parent on another filesystem",
    );
    // -d of another filesystem with a mounted path.
    let o = rsend_in(
        mnt,
        &[
            OsStr::new("-d"),
            other.image().as_os_str(),
            &at(mnt, "@/snaps/tue"),
        ],
    );
    fails(&o, 1, "and -d ", "-d of another filesystem");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("without -d"), "{err}");
    // A path from the top level with -d that is not there says how paths
    // are taken.
    let o = rsend_in(mnt, &["-d", img.loop_device(), "snaps/tue"]);
    fails(
        &o,
        1,
        "paths given with -d are from the top level of the filesystem",
        "-d with a path beneath the mount",
    );
}

#[test]
fn subvolumes_named_in_bytes_that_are_not_utf8_are_sent() {
    let Some(img) = btrfs_if_kernel("subvolumes_named_in_bytes_that_are_not_utf8_are_sent") else {
        return;
    };
    let mnt = img.mnt();
    write_data(&mnt.join("a"), 7, 50_000);
    let mon = OsStr::from_bytes(b"mon\xff");
    let tue = OsStr::from_bytes(b"tu\xe9");
    snapshot(mnt, &mnt.join(mon));
    write_data(&mnt.join("b"), 8, 50_000);
    snapshot(mnt, &mnt.join(tue));
    let dev = OsString::from(img.loop_device());
    let want = stream(&[
        "-d".into(),
        dev.clone(),
        "-p".into(),
        mon.into(),
        tue.into(),
    ] as &[OsString]);
    let got = stream(&[
        "-p".into(),
        mnt.join(mon).into_os_string(),
        mnt.join(tue).into_os_string(),
    ] as &[OsString]);
    assert!(got == want, "mounted paths and -d differ");
    let c = stream(&[
        "-c".into(),
        mnt.join(mon).into_os_string(),
        mnt.join(tue).into_os_string(),
    ] as &[OsString]);
    assert!(c.starts_with(btrfs_stream::MAGIC));
    let list = rsend_in(mnt, &["--list", "--json", "-d", img.loop_device()]);
    assert!(list.status.success());
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains(r#""path":{"hex":"6d6f6eff"}"#), "{text}");
}
