//! rreceive as an ordinary user: without `--fake-super` the first CHOWN
//! fails and says why; with it, the kernel's streams of s1 and s2
//! (testdata/kernel, made by testdata/make-kernel-streams.sh: several
//! owners, setuid/setgid/sticky modes, devices, a fifo and a socket) are
//! received by uid 65534, and `user.rreceive.stat` plus the applied mode
//! give back every owner, mode and device number of the snapshots'
//! manifests.
//!
//! Run as root, the tests drop to uid/gid 65534 (and no supplementary
//! groups) for rreceive; run as another user, they receive as that user.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output};

use btrfs_stream::{Command, Uuid, Writer};
use common::*;

const STAT: &str = "user.rreceive.stat";
const NOBODY: u32 = 65534;

/// A destination owned by the user rreceive runs as, on the normal
/// filesystem; `None` (said in one line) where it has no user xattrs.
struct Scratch {
    dir: tempfile::TempDir,
    dest: PathBuf,
    /// The uid and gid rreceive runs as.
    user: (u32, u32),
}

fn scratch() -> Option<Scratch> {
    let dir = tempfile::Builder::new()
        .prefix("rreceive-fake-super-")
        .tempdir()
        .unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dest = dir.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let probe = dest.join("probe");
    fs::write(&probe, b"").unwrap();
    if let Err(e) = xattr::set(&probe, "user.probe", b"1") {
        println!("skipped: {} has no user xattrs ({e})", dir.path().display());
        return None;
    }
    fs::remove_file(&probe).unwrap();
    let root = nix::unistd::geteuid().is_root();
    let user = if root {
        (NOBODY, NOBODY)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    std::os::unix::fs::chown(&dest, Some(user.0), Some(user.1)).unwrap();
    Some(Scratch { dir, dest, user })
}

impl Scratch {
    /// rreceive `args` DEST < `stream`, as the ordinary user.
    fn receive(&self, args: &[&str], stream: &Path) -> Output {
        let mut c = Process::new(rreceive_bin());
        c.args(args)
            .arg(&self.dest)
            .stdin(fs::File::open(stream).unwrap());
        if nix::unistd::geteuid().is_root() {
            // std drops the supplementary groups too.
            c.gid(self.user.1).uid(self.user.0);
            // Its journals in the scratch directory, not in a directory of
            // /dev/shm that would outlive the test.
            let journals = self.dir.path().join("journals");
            if !journals.exists() {
                fs::set_permissions(self.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
                fs::create_dir(&journals).unwrap();
                fs::set_permissions(&journals, fs::Permissions::from_mode(0o700)).unwrap();
                std::os::unix::fs::chown(&journals, Some(self.user.0), Some(self.user.1)).unwrap();
            }
            c.env("RRECEIVE_JOURNAL_DIR", &journals);
        }
        let out = c.output().expect("run rreceive");
        assert_no_panic(&out);
        out
    }

    fn receive_ok(&self, args: &[&str], stream: &Path) -> String {
        let out = self.receive(args, stream);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "rreceive {args:?} < {} failed ({}):\n{err}",
            stream.display(),
            out.status
        );
        err
    }
}

fn kernel(name: &str) -> PathBuf {
    testdata().join("kernel").join(name)
}

/// One line of a testdata manifest (format: testdata/manifest.py).
struct Want {
    kind: String,
    mode: u32,
    uid: u32,
    gid: u32,
    size: Option<u64>,
    sha256: Option<String>,
    mtime: (i64, i64),
    target: Option<Vec<u8>>,
    rdev: Option<(u64, u64)>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn dash<T>(s: &str, f: impl FnOnce(&str) -> T) -> Option<T> {
    (s != "-").then(|| f(s))
}

/// The manifest by path as `walk` names them ("" for the root).
fn manifest(name: &str) -> BTreeMap<Vec<u8>, Want> {
    let text = fs::read_to_string(kernel(name)).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        let mut path = unhex(f[0]);
        if path == b"." {
            path.clear();
        }
        let (sec, nsec) = f[7].split_once('.').unwrap();
        let w = Want {
            kind: f[1].to_string(),
            mode: u32::from_str_radix(f[2], 8).unwrap(),
            uid: f[3].parse().unwrap(),
            gid: f[4].parse().unwrap(),
            size: dash(f[6], |s| s.parse().unwrap()),
            sha256: dash(f[9], str::to_string),
            mtime: (sec.parse().unwrap(), nsec.parse().unwrap()),
            target: dash(f[10], unhex),
            rdev: dash(f[11], |s| {
                let (a, b) = s.split_once(':').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            }),
            xattrs: dash(f[12], |s| {
                s.split(';')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap();
                        (k.as_bytes().to_vec(), unhex(v))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        };
        out.insert(path, w);
    }
    out
}

fn type_bits(kind: &str) -> u32 {
    match kind {
        "reg" => libc::S_IFREG,
        "dir" => libc::S_IFDIR,
        "chr" => libc::S_IFCHR,
        "blk" => libc::S_IFBLK,
        "fifo" => libc::S_IFIFO,
        "sock" => libc::S_IFSOCK,
        k => panic!("no user.rreceive.stat expected on a {k}"),
    }
}

/// `"%o %u,%u %u:%u"`: mode with type, (major, minor), (uid, gid).
fn parse_stat(v: &[u8]) -> (u32, (u64, u64), (u32, u32)) {
    let s = std::str::from_utf8(v).unwrap();
    let f: Vec<&str> = s.split(' ').collect();
    assert_eq!(f.len(), 3, "{s:?}");
    let (ma, mi) = f[1].split_once(',').unwrap();
    let (u, g) = f[2].split_once(':').unwrap();
    (
        u32::from_str_radix(f[0], 8).unwrap(),
        (ma.parse().unwrap(), mi.parse().unwrap()),
        (u.parse().unwrap(), g.parse().unwrap()),
    )
}

/// Xattrs an ordinary user may set (security.* and trusted.* need root).
fn settable(name: &[u8]) -> bool {
    name.starts_with(b"user.") || name.starts_with(b"system.")
}

/// Checks the tree at `root`, received by `user` with --fake-super,
/// against manifest `name`; returns how many items it could not keep
/// (symlink owners, root-only xattrs).
fn check_tree(root: &Path, name: &str, user: (u32, u32)) -> usize {
    let want = manifest(name);
    let got = walk(root);
    let mut d = Vec::new();
    let mut lost = 0;
    for p in want.keys().filter(|p| !got.contains_key(*p)) {
        d.push(format!("'{}' missing", p.escape_ascii()));
    }
    for p in got.keys().filter(|p| !want.contains_key(*p)) {
        d.push(format!("'{}' unexpected", p.escape_ascii()));
    }
    for (p, w) in &want {
        let Some(g) = got.get(p) else { continue };
        let mut f = Vec::new();
        let stat = g.xattrs.get(STAT.as_bytes());
        if (g.uid, g.gid) != user {
            f.push(format!("owned by {}:{}", g.uid, g.gid));
        }
        if w.kind == "lnk" {
            lost += 1;
            if g.kind != "lnk" || g.target != w.target {
                f.push(format!("{} with target {:?}", g.kind, g.target));
            }
            if stat.is_some() {
                f.push("a symlink with user.rreceive.stat".into());
            }
        } else if let Some(v) = stat {
            let (mode, rdev, owner) = parse_stat(v);
            if mode != type_bits(&w.kind) | w.mode {
                f.push(format!("recorded mode {mode:o}, want {:04o}", w.mode));
            }
            if owner != (w.uid, w.gid) {
                f.push(format!(
                    "recorded owner {owner:?}, want {}:{}",
                    w.uid, w.gid
                ));
            }
            if rdev != w.rdev.unwrap_or((0, 0)) {
                f.push(format!("recorded device {rdev:?}, want {:?}", w.rdev));
            }
            let applied = if w.kind == "dir" {
                w.mode & 0o1777 | 0o700
            } else {
                w.mode & 0o1777 | 0o600
            };
            if g.mode != applied {
                f.push(format!("mode {:04o} on disk, want {applied:04o}", g.mode));
            }
            let stand_in = ["chr", "blk", "fifo", "sock"].contains(&w.kind.as_str());
            let kind_on_disk = if stand_in { "reg" } else { w.kind.as_str() };
            if g.kind != kind_on_disk {
                f.push(format!("a {} on disk, want {kind_on_disk}", g.kind));
            }
            if stand_in && g.size != Some(0) {
                f.push(format!("stand-in of size {:?}", g.size));
            }
            if !stand_in && (g.size != w.size || g.sha256 != w.sha256) {
                f.push(format!("content {:?} {:?}", g.size, g.sha256));
            }
        } else {
            f.push("no user.rreceive.stat".into());
        }
        if g.mtime != w.mtime {
            f.push(format!("mtime {:?} != {:?}", g.mtime, w.mtime));
        }
        let wx: BTreeMap<_, _> = w.xattrs.iter().filter(|(n, _)| settable(n)).collect();
        lost += w.xattrs.len() - wx.len();
        let gx: BTreeMap<_, _> = g
            .xattrs
            .iter()
            .filter(|(n, _)| !n.starts_with(b"user.rreceive."))
            .collect();
        if wx != gx {
            f.push(format!("xattrs {gx:?}, want {wx:?}"));
        }
        if !f.is_empty() {
            d.push(format!("'{}': {}", p.escape_ascii(), f.join("; ")));
        }
    }
    assert!(
        d.is_empty(),
        "{} differs from {name}:\n{}",
        root.display(),
        d.join("\n")
    );
    lost
}

#[test]
fn receive_without_root_fails_at_the_first_chown_saying_why() {
    let Some(s) = scratch() else { return };
    let out = s.receive(&[], &kernel("full-v1.stream"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // SUBVOL is command #1; #2 is the CHOWN of the subvolume root.
    let want = format!(
        "rreceive: error: changing the owner to 0:0 needs root (chown: EPERM as uid {}); \
         --fake-super records owners, set-id modes and device nodes in the xattr \
         user.rreceive.stat instead: '.' (command #2 CHOWN at byte ",
        s.user.0
    );
    assert!(err.contains(&want), "want {want:?} in:\n{err}");
}

#[test]
fn fake_super_full_stream_keeps_every_owner_mode_and_device() {
    let Some(s) = scratch() else { return };
    let err = s.receive_ok(&["--fake-super", "-v"], &kernel("full-v1.stream"));
    let lost = check_tree(&s.dest.join("s1"), "s1.manifest", s.user);
    assert!(
        err.contains(&format!(
            "warning: {lost} item(s) this filesystem cannot store"
        )),
        "{lost} skipped items expected:\n{err}"
    );
    assert!(
        err.contains("owner 1234:5678 of symlink 'link-to-small' not kept"),
        "{err}"
    );
    assert!(
        err.contains("xattr security.capability of 'capfile' needs root; skipped"),
        "{err}"
    );
}

#[test]
fn fake_super_incremental_changes_only_its_part_in_each_mode() {
    for mode in [&[][..], &["--link"], &["--in-place"]] {
        let Some(s) = scratch() else { return };
        s.receive_ok(&["--fake-super"], &kernel("full-v1.stream"));
        let mut args = vec!["--fake-super"];
        args.extend_from_slice(mode);
        s.receive_ok(&args, &kernel("incr-v1.stream"));
        check_tree(&s.dest.join("s2"), "s2.manifest", s.user);
        if mode.is_empty() || mode == ["--link"] {
            // Owners and modes s2 changed did not change s1's records.
            check_tree(&s.dest.join("s1"), "s1.manifest", s.user);
        }
    }
}

#[test]
fn stream_cannot_set_or_remove_the_stat_xattr() {
    let Some(s) = scratch() else { return };
    let attempts = [
        Command::SetXattr {
            path: b"f",
            name: STAT.as_bytes(),
            data: b"104755 0,0 0:0",
        },
        Command::RemoveXattr {
            path: b"f",
            name: STAT.as_bytes(),
        },
    ];
    for (i, attempt) in attempts.iter().enumerate() {
        for fake in [true, false] {
            let name = format!("h{i}{}", u8::from(fake));
            let mut w = Writer::new(Vec::new());
            w.start_stream(2).unwrap();
            for c in [
                Command::Subvol {
                    path: name.as_bytes(),
                    uuid: Uuid::from_u128(0x5eed_0000 + (i as u128) * 2 + u128::from(fake)),
                    ctransid: 1,
                },
                Command::Mkfile {
                    path: b"f",
                    ino: 257,
                },
                Command::Chown {
                    path: b"f",
                    uid: u64::from(s.user.0),
                    gid: u64::from(s.user.1),
                },
                attempt.clone(),
                Command::End {},
            ] {
                w.write_command(&c).unwrap();
            }
            let file = s.dir.path().join(format!("{name}.stream"));
            fs::write(&file, w.into_inner()).unwrap();
            let args: &[&str] = if fake { &["--fake-super"] } else { &[] };
            let out = s.receive(args, &file);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {err}");
            assert!(
                err.contains(
                    "refused xattr user.rreceive.stat: reserved by rreceive: \
                     'f' (xattr 'user.rreceive.stat') (command #4"
                ),
                "{name}: {err}"
            );
            let f = s.dest.join(&name).join("f");
            let v = xattr::get(&f, STAT).unwrap();
            if fake {
                // rreceive's own record of the CHOWN, not the stream's.
                let own = format!("100600 0,0 {}:{}", s.user.0, s.user.1);
                assert_eq!(v.as_deref(), Some(own.as_bytes()), "{name}");
            } else {
                assert_eq!(v, None, "{name}");
            }
        }
    }
}

/// A ramfs (which has no xattrs at all) mounted in a temporary directory.
struct Ramfs {
    dir: tempfile::TempDir,
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = Process::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn fake_super_onto_a_filesystem_without_user_xattrs_says_so() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: mounting a ramfs needs root");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("rreceive-ramfs-")
        .tempdir()
        .unwrap();
    let mounted = Process::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        println!("skipped: cannot mount a ramfs");
        return;
    }
    let fs = Ramfs { dir };
    fs::set_permissions(fs.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let s = Scratch {
        dest: fs.dir.path().join("dest"),
        dir: tempfile::tempdir().unwrap(),
        user: (NOBODY, NOBODY),
    };
    fs::create_dir(&s.dest).unwrap();
    std::os::unix::fs::chown(&s.dest, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = s.receive(&["--fake-super"], &kernel("full-v1.stream"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "rreceive: error: --fake-super keeps owners and modes in the xattr \
             user.rreceive.stat, and this filesystem does not support user xattrs \
             (get xattr user.rreceive.stat: EOPNOTSUPP"
        ) && err.contains("'.' (command #2 CHOWN at byte "),
        "{err}"
    );
    drop(s);
    drop(fs);
}
