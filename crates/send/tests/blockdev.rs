//! Reading a block device: while its filesystem is mounted (O_DIRECT, and
//! the note saying so) and after it is unmounted (memory-mapped).
//! Needs root, loop devices and btrfs; prints one SKIP line otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

fn skip_reason() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not running as root");
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control");
    }
    let has = |p: &str| Command::new(p).arg("--version").output().is_ok();
    if !has("mkfs.btrfs") || !has("btrfs") || !has("losetup") {
        return Some("btrfs-progs or util-linux missing");
    }
    None
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A loop device with a mounted btrfs; unmounted and detached on drop.
struct Mounted {
    _dir: tempfile::TempDir,
    loopdev: String,
    mnt: PathBuf,
    mounted: bool,
}

impl Mounted {
    fn new() -> Mounted {
        let dir = tempfile::Builder::new()
            .prefix("rsend-blockdev-")
            .tempdir()
            .unwrap();
        let img = dir.path().join("fs.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(300 << 20)
            .unwrap();
        let out = run(Command::new("losetup").args(["--find", "--show"]).arg(&img));
        let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut me = Mounted {
            _dir: dir,
            loopdev,
            mnt,
            mounted: false,
        };
        run(Command::new("mkfs.btrfs").args(["-q", "-f", &me.loopdev]));
        run(Command::new("mount").arg(&me.loopdev).arg(&me.mnt));
        me.mounted = true;
        me
    }

    fn umount(&mut self) {
        if self.mounted {
            run(Command::new("umount").arg(&self.mnt));
            self.mounted = false;
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.mnt).status();
        }
        let _ = Command::new("losetup").args(["-d", &self.loopdev]).status();
    }
}

fn rsend(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rsend"))
        .args(args)
        .output()
        .unwrap()
}

fn progs_list(mnt: &Path) -> Vec<u8> {
    run(Command::new("btrfs")
        .args(["subvolume", "list", "-p", "-u", "-q", "-R"])
        .arg(mnt))
    .stdout
}

#[test]
fn mounted_block_device_is_read_with_o_direct_and_stays_fresh() {
    if let Some(why) = skip_reason() {
        if std::env::var_os("RSEND_REQUIRE_KERNEL").is_some_and(|v| v == "1") {
            panic!("needs root, loop devices and btrfs: {why}");
        }
        println!("SKIP mounted_block_device_is_read_with_o_direct_and_stays_fresh: {why}");
        return;
    }
    let mut m = Mounted::new();
    let vol = m.mnt.join("vol");
    run(Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(&vol));
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(vol.join("file"), &data).unwrap();
    run(Command::new("btrfs")
        .args(["subvolume", "snapshot", "-r"])
        .arg(&vol)
        .arg(m.mnt.join("snap")));
    run(&mut Command::new("sync"));

    let out = rsend(&["--list", "-d", &m.loopdev]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, progs_list(&m.mnt));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is mounted; reading the device with O_DIRECT"),
        "stderr: {err}"
    );

    let out = rsend(&["--cat-file", "snap", "file", "-d", &m.loopdev]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == data, "cat-file of the mounted device differs");

    // Changes committed after the first read are seen by the next one.
    std::fs::write(vol.join("second"), b"later").unwrap();
    run(Command::new("btrfs")
        .args(["subvolume", "snapshot", "-r"])
        .arg(&vol)
        .arg(m.mnt.join("snap2")));
    run(&mut Command::new("sync"));
    let out = rsend(&["--list", "-d", &m.loopdev]);
    assert_eq!(out.stdout, progs_list(&m.mnt));
    let out = rsend(&["--cat-file", "snap2", "second", "-d", &m.loopdev]);
    assert_eq!(out.stdout, b"later");

    let want = progs_list(&m.mnt);
    m.umount();
    let out = rsend(&["--list", "-d", &m.loopdev]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, want);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("O_DIRECT"));
}

#[test]
fn usage_errors_exit_2_and_missing_images_exit_1() {
    let out = rsend(&["--list"]);
    assert_eq!(out.status.code(), Some(2), "missing -d is a usage error");
    let out = rsend(&["-d", "/nonexistent/image"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "nothing to send is a usage error"
    );
    let out = rsend(&["-d", "/nonexistent/image", "-f", "/dev/null", "snap"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/image"));
    let out = rsend(&["--list", "-d", "/nonexistent/image"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/image"));
}
