//! Directory times when the stream changes a directory after its last
//! UTIMES: orphans made at the root and renamed away after the root's
//! times, a directory renamed (itself, then with an ancestor) and given new
//! entries after its times, a root an incremental stream sends no times
//! for, and more directories than rreceive holds times for at once.
//! Every directory must end with the atime and mtime of its last UTIMES,
//! to the nanosecond, following renames.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use btrfs_stream::{Command, Timespec, Uuid, Writer};

const FULL: Uuid = Uuid::from_u128(0x7157_0000_0000_0000_0000_0000_0000_0001);
const INCR: Uuid = Uuid::from_u128(0x7157_0000_0000_0000_0000_0000_0000_0002);

fn leak(b: impl Into<Vec<u8>>) -> &'static [u8] {
    Box::leak(b.into().into_boxed_slice())
}

/// Times with nanoseconds, atime and mtime different.
fn times(n: i64) -> (Timespec, Timespec) {
    (
        Timespec {
            sec: 1_000_000_000 + n * 1000,
            nsec: ((n as u64 * 7_919) % 1_000_000_000) as u32,
        },
        Timespec {
            sec: 1_100_000_000 + n * 1000,
            nsec: ((n as u64 * 104_729 + 1) % 1_000_000_000) as u32,
        },
    )
}

/// A stream being written, and the times each path must end with.
struct Script {
    cmds: Vec<Command<'static>>,
    want: BTreeMap<Vec<u8>, (Timespec, Timespec)>,
}

fn within(p: &[u8], dir: &[u8]) -> bool {
    p.starts_with(dir) && (p.len() == dir.len() || p[dir.len()] == b'/')
}

impl Script {
    fn new(first: Command<'static>) -> Script {
        Script {
            cmds: vec![first],
            want: BTreeMap::new(),
        }
    }

    fn push(&mut self, c: Command<'static>) {
        self.cmds.push(c);
    }

    fn utimes(&mut self, path: &str, n: i64) {
        let (atime, mtime) = times(n);
        let path = leak(path);
        self.push(Command::Utimes {
            path,
            atime,
            mtime,
            ctime: mtime,
            otime: None,
        });
        self.want.insert(path.to_vec(), (atime, mtime));
    }

    fn rename(&mut self, from: &str, to: &str) {
        let (from, to) = (leak(from), leak(to));
        self.push(Command::Rename { from, to });
        let moved: Vec<_> = self
            .want
            .keys()
            .filter(|k| within(k, from))
            .cloned()
            .collect();
        for k in moved {
            let v = self.want.remove(&k).unwrap();
            let mut n = to.to_vec();
            n.extend_from_slice(&k[from.len()..]);
            self.want.insert(n, v);
        }
    }

    /// A directory as the kernel makes it: at its orphan name, then renamed.
    fn mkdir(&mut self, ino: u64, path: &str) {
        let orphan = format!("o{ino}-1-0");
        self.push(Command::Mkdir {
            path: leak(orphan.clone()),
            ino,
        });
        self.rename(&orphan, path);
    }

    fn mkfile(&mut self, ino: u64, path: &str) {
        let orphan = format!("o{ino}-1-0");
        self.push(Command::Mkfile {
            path: leak(orphan.clone()),
            ino,
        });
        self.rename(&orphan, path);
    }

    fn rmdir(&mut self, path: &str) {
        let path = leak(path);
        self.push(Command::Rmdir { path });
        self.want.retain(|k, _| !within(k, path));
    }

    fn end(&mut self) -> Vec<u8> {
        self.push(Command::End {});
        let mut w = Writer::new(Vec::new());
        w.start_stream(1).unwrap();
        for c in &self.cmds {
            w.write_command(c).unwrap();
        }
        w.into_inner()
    }
}

/// Paths under `root` whose atime or mtime is not what `want` says.
fn wrong_times(root: &Path, want: &BTreeMap<Vec<u8>, (Timespec, Timespec)>) -> Vec<String> {
    let mut bad = Vec::new();
    for (p, (a, m)) in want {
        let full = root.join(std::str::from_utf8(p).unwrap());
        let md = std::fs::symlink_metadata(&full).unwrap();
        let got_a = (md.atime(), md.atime_nsec());
        let got_m = (md.mtime(), md.mtime_nsec());
        let want_a = (a.sec, i64::from(a.nsec));
        let want_m = (m.sec, i64::from(m.nsec));
        if got_a != want_a || got_m != want_m {
            bad.push(format!(
                "'{}': atime {got_a:?} mtime {got_m:?}, want {want_a:?} {want_m:?}",
                p.escape_ascii()
            ));
        }
    }
    bad
}

fn receive_with(dest: &Path, stream: &[u8], max_dir_times: Option<usize>) -> rreceive::Stats {
    let mut o = rreceive::Options::new(dest);
    o.verbosity = 0;
    // Checkpoints put directory times back early: the counts below are
    // those of a receive without them (times are exact either way, see
    // `durable_checkpoints_keep_every_directory_time`).
    o.durable = false;
    if let Some(n) = max_dir_times {
        o.max_dir_times = n;
    }
    rreceive::receive(stream, &o).unwrap_or_else(|f| panic!("receive failed: {f}"))
}

/// A full stream in the kernel's order where the root, `x/a`, `x/b` and
/// `x/a/s` (renamed to `x/b/s`, then with `x` to `y/b/s`) change after
/// their UTIMES, and `dirs` directories under `top` get times in between.
fn full_stream(dirs: usize) -> Script {
    let mut s = Script::new(Command::Subvol {
        path: b"full",
        uuid: FULL,
        ctransid: 7,
    });
    s.push(Command::Chmod {
        path: b"",
        mode: 0o755,
    });
    s.mkdir(257, "top");
    s.mkdir(258, "x");
    s.mkdir(259, "x/a");
    s.mkdir(260, "x/b");
    s.mkdir(261, "x/a/s");
    s.mkdir(262, "x/a/s/deep");
    s.utimes("x/a/s/deep", 10);
    // The root's times come early (the kernel's cache of 64 directory
    // times evicted it).
    s.utimes("", 1);
    for i in 0..dirs {
        let ino = 1000 + 2 * i as u64;
        s.mkdir(ino, &format!("top/d{i}"));
        s.mkfile(ino + 1, &format!("top/d{i}/f"));
        s.utimes(&format!("top/d{i}/f"), 100_000 + i as i64);
        s.utimes(&format!("top/d{i}"), 100 + i as i64);
    }
    s.utimes("top", 2);
    s.utimes("x/a/s", 3);
    s.utimes("x/a", 4);
    s.utimes("x/b", 5);
    s.utimes("x", 6);
    // A directory renamed after its times, then given an entry.
    s.rename("x/a/s", "x/b/s");
    s.mkfile(300_000, "x/b/s/f");
    s.utimes("x/b/s/f", 7);
    // Its ancestor renamed (at the root, after the root's times), then
    // another entry.
    s.rename("x", "y");
    s.mkdir(300_001, "y/b/s/g");
    s.utimes("y/b/s/g", 8);
    // An orphan at the root that gets an entry and is renamed away later.
    s.push(Command::Mkdir {
        path: b"o300002-1-0",
        ino: 300_002,
    });
    s.mkfile(300_003, "o300002-1-0/f");
    s.utimes("o300002-1-0/f", 9);
    s.rename("o300002-1-0", "top/late");
    s.utimes("top/late", 11);
    // A directory with times that goes away.
    s.mkdir(300_004, "top/gone");
    s.utimes("top/gone", 12);
    s.rmdir("top/gone");
    s
}

#[test]
fn root_and_renamed_dir_changed_after_their_utimes_keep_them() {
    let dest = tempfile::tempdir().unwrap();
    let mut s = full_stream(5000);
    let stream = s.end();
    let stats = receive_with(dest.path(), &stream, None);
    let bad = wrong_times(&dest.path().join("full"), &s.want);
    assert!(bad.is_empty(), "{} wrong:\n{}", bad.len(), bad.join("\n"));
    // The root, top, y/a, y/b and y/b/s changed after their last UTIMES.
    assert_eq!(stats.dir_times_restored, 5, "{stats:?}");
    assert_eq!(stats.dir_times_early, 0, "{stats:?}");
}

#[test]
fn more_directories_than_held_at_once_still_end_exact() {
    let dest = tempfile::tempdir().unwrap();
    let mut s = full_stream(3000);
    let stream = s.end();
    let stats = receive_with(dest.path(), &stream, Some(64));
    let bad = wrong_times(&dest.path().join("full"), &s.want);
    assert!(bad.is_empty(), "{} wrong:\n{}", bad.len(), bad.join("\n"));
    assert!(stats.dir_times_early > 2900, "{stats:?}");
    // The root's times were applied early, then it changed again: they
    // were read back from it and put back at END.
    assert!(stats.dir_times_kept > 0, "{stats:?}");
}

#[test]
fn incremental_root_without_utimes_keeps_its_times_through_orphan_renames() {
    let dest = tempfile::tempdir().unwrap();
    let mut p = Script::new(Command::Subvol {
        path: b"p",
        uuid: FULL,
        ctransid: 7,
    });
    p.mkdir(257, "top");
    p.mkdir(258, "top/x");
    p.mkdir(259, "top/y");
    p.mkfile(260, "top/x/f");
    p.utimes("top/x/f", 30);
    p.utimes("top/x", 31);
    p.utimes("top/y", 32);
    p.utimes("top", 33);
    p.utimes("", 34);
    let full = p.end();
    receive_with(dest.path(), &full, None);
    let bad = wrong_times(&dest.path().join("p"), &p.want);
    assert!(bad.is_empty(), "parent: {}", bad.join("\n"));

    // x and y swap names through an orphan at the root; the root itself is
    // unchanged, so the stream sends no times for it.
    let mut c = Script::new(Command::Snapshot {
        path: b"c",
        uuid: INCR,
        ctransid: 8,
        clone_uuid: FULL,
        clone_ctransid: 7,
    });
    c.want = p.want.clone();
    c.rename("top/y", "o259-1-0");
    c.rename("top/x", "top/y");
    c.utimes("top/y", 41);
    c.rename("o259-1-0", "top/x");
    c.utimes("top/x", 42);
    c.utimes("top", 43);
    // top/y changes after its times: a new directory in it.
    c.mkdir(270, "top/y/new");
    c.utimes("top/y/new", 44);
    let incr = c.end();
    let stats = receive_with(dest.path(), &incr, None);
    let bad = wrong_times(&dest.path().join("c"), &c.want);
    assert!(bad.is_empty(), "{} wrong:\n{}", bad.len(), bad.join("\n"));
    assert_eq!(stats.dir_times_restored, 1, "{stats:?}");
    assert_eq!(stats.dir_times_kept, 1, "{stats:?}");
}

#[test]
fn durable_checkpoints_keep_every_directory_time() {
    let mut s = full_stream(300);
    let stream = s.end();
    let dest = tempfile::tempdir().unwrap();
    let mut o = rreceive::Options::new(dest.path());
    o.verbosity = 0;
    let stats = rreceive::receive(stream.as_slice(), &o).unwrap_or_else(|f| panic!("{f}"));
    // The renames after UTIMES end windows: checkpoints apply times early.
    assert!(stats.durable_checkpoints >= 3, "{stats:?}");
    let bad = wrong_times(&dest.path().join("full"), &s.want);
    assert!(bad.is_empty(), "{} wrong:\n{}", bad.len(), bad.join("\n"));
}
