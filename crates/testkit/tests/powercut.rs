//! The power-cut device: what a filesystem made durable with syncfs or
//! fsync survives a cut, what it did not flush is lost, and nothing (loop
//! device, FUSE mount, mount) is left behind, also when the test panics.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use testkit::powercut::{self, Mounted, PowerCut};
use testkit::{run, which, Rng};

const SIZE_MIB: u64 = 300;

struct Fs {
    name: &'static str,
    mkfs: &'static [&'static str],
    /// Mount options that keep the filesystem from committing on a timer
    /// between the writes and the cut.
    opts: &'static str,
    fsck: &'static [&'static str],
}

const EXT4: Fs = Fs {
    name: "ext4",
    mkfs: &["mkfs.ext4", "-q", "-F"],
    opts: "commit=300",
    fsck: &["e2fsck", "-fn"],
};
const XFS: Fs = Fs {
    name: "xfs",
    mkfs: &["mkfs.xfs", "-q", "-f"],
    opts: "",
    fsck: &["xfs_repair", "-n", "-f"],
};
const BTRFS: Fs = Fs {
    name: "btrfs",
    mkfs: &["mkfs.btrfs", "-q", "-f"],
    opts: "commit=300",
    fsck: &["btrfs", "check", "--readonly"],
};

fn usable(test: &str, fs: &Fs) -> bool {
    if !powercut::available(test) {
        return false;
    }
    if which(fs.mkfs[0]).is_none() || which(fs.fsck[0]).is_none() {
        println!(
            "SKIP {test}: {} or {} not installed",
            fs.mkfs[0], fs.fsck[0]
        );
        return false;
    }
    true
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

/// A fresh device with `fs` made on it and mounted.
fn fresh(fs: &Fs) -> (PowerCut, Mounted) {
    let pc = PowerCut::new(SIZE_MIB);
    run(Command::new(fs.mkfs[0])
        .args(&fs.mkfs[1..])
        .arg(pc.dev())
        .stdout(Stdio::null()));
    assert!(pc.flushes() > 0, "{}: mkfs sent no flush", fs.name);
    let m = Mounted::device(pc.dev(), fs.opts);
    (pc, m)
}

/// Cuts the power with `m` still mounted, unmounts it (the running kernel
/// sees no error), takes the device down and mounts the durable image.
fn cut_and_recover(fs: &Fs, pc: PowerCut, m: Mounted, check: impl FnOnce(&Path)) {
    pc.cut();
    // Flushes after the cut reach the device but change nothing durable.
    let before = pc.flushes();
    run(Command::new("sync").arg("-f").arg(m.mnt()));
    assert!(pc.flushes() > before, "{}: syncfs sent no flush", fs.name);
    drop(m);
    let file = pc.file();
    let durable = pc.into_durable();
    assert_gone(&file);
    let img = durable.path().to_owned();
    {
        let r = durable.mount("");
        check(&r.mnt());
        let mnt = r.mnt();
        drop(r);
        assert_gone(&img);
        assert!(!mounted_on(&mnt), "{} still mounted", mnt.display());
    }
    let out = Command::new(fs.fsck[0])
        .args(&fs.fsck[1..])
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {:?} found the recovered image damaged:\n{}{}",
        fs.name,
        fs.fsck,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// No loop device is attached to `file` and nothing is mounted from or
/// under its directory.
fn assert_gone(file: &Path) {
    let loops = String::from_utf8(run(Command::new("losetup").arg("-a")).stdout).unwrap();
    let f = file.to_string_lossy();
    assert!(
        !loops.contains(&*f),
        "a loop device is left on {f}:\n{loops}"
    );
    let dir = file.parent().unwrap();
    assert!(!mounted_on(dir), "{} is still mounted", dir.display());
}

fn mounted_on(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let d = dir.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1).is_some_and(|m| m.starts_with(&*d)))
}

fn absent_or_empty(p: &Path) -> bool {
    std::fs::metadata(p).map_or(true, |m| m.len() == 0)
}

/// A is written and syncfs'd, B only written: after the cut A is there
/// whole and B is not.
fn syncfs_survives(fs: &Fs) {
    let (pc, m) = fresh(fs);
    let a = data(1, 3 << 20);
    let b = data(2, 1 << 20);
    std::fs::create_dir(m.mnt().join("d")).unwrap();
    std::fs::write(m.mnt().join("d/A"), &a).unwrap();
    let before = pc.flushes();
    run(Command::new("sync").arg("-f").arg(m.mnt().join("d/A")));
    assert!(pc.flushes() > before, "{}: syncfs sent no flush", fs.name);
    std::fs::write(m.mnt().join("d/B"), &b).unwrap();
    assert_eq!(std::fs::read(m.mnt().join("d/B")).unwrap(), b);
    cut_and_recover(fs, pc, m, |mnt| {
        assert_eq!(std::fs::read(mnt.join("d/A")).unwrap(), a, "{}: A", fs.name);
        assert!(absent_or_empty(&mnt.join("d/B")), "{}: B survived", fs.name);
    });
}

/// No syncfs since mkfs and mount: A is fsync'd (the journal or log must
/// be replayed to find it), B only written.
fn fsync_replayed(fs: &Fs) {
    let (pc, m) = fresh(fs);
    let a = data(3, 1 << 20);
    let b = data(4, 1 << 20);
    let f = std::fs::File::create(m.mnt().join("A")).unwrap();
    std::io::Write::write_all(&mut &f, &a).unwrap();
    let before = pc.flushes();
    f.sync_all().unwrap();
    assert!(pc.flushes() > before, "{}: fsync sent no flush", fs.name);
    drop(f);
    std::fs::write(m.mnt().join("B"), &b).unwrap();
    cut_and_recover(fs, pc, m, |mnt| {
        assert_eq!(std::fs::read(mnt.join("A")).unwrap(), a, "{}: A", fs.name);
        assert!(absent_or_empty(&mnt.join("B")), "{}: B survived", fs.name);
    });
}

/// Nothing synced at all since mkfs and mount: the image still mounts.
fn nothing_synced(fs: &Fs) {
    let (pc, m) = fresh(fs);
    std::fs::write(m.mnt().join("C"), data(5, 1 << 20)).unwrap();
    cut_and_recover(fs, pc, m, |mnt| {
        assert!(absent_or_empty(&mnt.join("C")), "{}: C survived", fs.name);
    });
}

/// The control: with no cut, a clean unmount makes everything durable.
fn no_cut_keeps_all(fs: &Fs) {
    let (pc, m) = fresh(fs);
    let b = data(6, 1 << 20);
    std::fs::write(m.mnt().join("B"), &b).unwrap();
    drop(m);
    let durable = pc.into_durable();
    let r = durable.mount("");
    assert_eq!(
        std::fs::read(r.mnt().join("B")).unwrap(),
        b,
        "{}: B",
        fs.name
    );
}

fn all(test: &str, fs: &Fs) {
    if !usable(test, fs) {
        return;
    }
    no_cut_keeps_all(fs);
    syncfs_survives(fs);
    fsync_replayed(fs);
    nothing_synced(fs);
}

#[test]
fn powercut_ext4() {
    all("powercut_ext4", &EXT4);
}

#[test]
fn powercut_xfs() {
    all("powercut_xfs", &XFS);
}

#[test]
fn powercut_btrfs() {
    all("powercut_btrfs", &BTRFS);
}

/// A test that panics with the filesystem still mounted (by hand, with no
/// guard) leaves nothing behind.
#[test]
fn powercut_cleans_up_after_a_panic() {
    if !usable("powercut_cleans_up_after_a_panic", &EXT4) {
        return;
    }
    let seen = std::sync::Mutex::new(None::<(PathBuf, PathBuf)>);
    let r = std::panic::catch_unwind(|| {
        let pc = PowerCut::new(64);
        run(Command::new("mkfs.ext4").arg("-q").arg(pc.dev()));
        let mnt = pc.file().parent().unwrap().parent().unwrap().join("fs");
        std::fs::create_dir(&mnt).unwrap();
        run(Command::new("mount").arg(pc.dev()).arg(&mnt));
        std::fs::write(mnt.join("x"), b"x").unwrap();
        *seen.lock().unwrap() = Some((pc.file(), mnt));
        panic!("deliberate");
    });
    assert!(r.is_err());
    let (file, mnt) = seen.lock().unwrap().take().unwrap();
    assert_gone(&file);
    assert!(!mounted_on(&mnt), "{} still mounted", mnt.display());
    assert!(!file.parent().unwrap().exists(), "temporary files left");
}

/// Prints what one 4 KiB write and one flush cost on the device, against a
/// plain loop device. `cargo test -p testkit --release --test powercut --
/// --ignored --nocapture`
#[test]
#[ignore]
fn powercut_overhead() {
    if !powercut::available("powercut_overhead") {
        return;
    }
    const N: u64 = 20000;
    let dd = |dev: &Path, flag: &str| {
        let t = std::time::Instant::now();
        run(Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", dev.display()))
            .args(["bs=4k", &format!("count={N}"), flag])
            .stderr(Stdio::null()));
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    };
    let mib_s = |dev: &Path| {
        let t = std::time::Instant::now();
        run(Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", dev.display()))
            .args(["bs=1M", "count=256", "oflag=direct", "conv=fsync"])
            .stderr(Stdio::null()));
        256.0 / t.elapsed().as_secs_f64()
    };
    let pc = PowerCut::new(SIZE_MIB);
    let fuse = dd(pc.dev(), "oflag=direct");
    let fuse_sync = dd(pc.dev(), "oflag=dsync");
    let fuse_big = mib_s(pc.dev());
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("plain.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(SIZE_MIB << 20)
        .unwrap();
    let out = run(Command::new("losetup").args(["--find", "--show"]).arg(&img));
    let plain_dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let plain = dd(&plain_dev, "oflag=direct");
    let plain_sync = dd(&plain_dev, "oflag=dsync");
    let plain_big = mib_s(&plain_dev);
    run(Command::new("losetup").arg("-d").arg(&plain_dev));
    println!(
        "4 KiB O_DIRECT write: powercut {fuse:.1} us, plain loop {plain:.1} us; \
         4 KiB O_DSYNC write (write + flush): powercut {fuse_sync:.1} us, plain loop {plain_sync:.1} us; \
         1 MiB O_DIRECT writes and a flush: powercut {fuse_big:.0} MiB/s, plain loop {plain_big:.0} MiB/s"
    );
}
