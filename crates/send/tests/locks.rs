//! One writer per received subvolume (issue #48): a receive holds a lock
//! on the subvolume it receives for its whole life.
//!
//! Every test receives onto ext4 in a loop image (root and loop devices;
//! one SKIP line otherwise, a failure under RSEND_REQUIRE_KERNEL=1), from
//! streams rsend makes of testdata/incremental's image, and stalls a
//! receive by holding its input pipe open after part of the stream:
//!
//! - two receives of the same stream at once: the second exits 3 with
//!   "another rreceive (pid N) is receiving NAME into DEST" and changes
//!   nothing (DEST's entries, the subvolume's tree, the first receive's
//!   journal in /dev/shm); the first then completes equal to the snapshot;
//! - during a stalled receive, `--list` says `receiving (pid N)` (JSON:
//!   `"receiving": true, "pid": N`), `--resume-token` exits 3 and prints no
//!   token, `--delete-incomplete` exits 3 and deletes nothing;
//! - rsend-nightly started twice at once (the second with
//!   --delete-incomplete): the second says another rreceive is receiving,
//!   exits 1 and deletes nothing; the first completes, and the next run
//!   finds the snapshot complete;
//! - eight receives of eight snapshots into one DEST at once, three of them
//!   killed (SIGKILL) half-way and resumed (`--resume-token`, `rsend
//!   --resume`) while the other five are still stalled: all eight equal to
//!   their snapshots.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::receivers::{rreceive_bin, Receiver};
use common::scenarios::{self, Manifest};
use testkit::{ext4_image, kernel_available, LoopImage};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The scenario image (rsend's source) and an ext4 DEST.
struct Setup {
    tmp: tempfile::TempDir,
    image: PathBuf,
    ext4: LoopImage,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::Builder::new()
            .prefix("rsend-locks-")
            .tempdir()
            .unwrap();
        let image = scenarios::decompress_image(tmp.path());
        // noatime: the trees are read (find, manifests) more than once.
        let ext4 = ext4_image(256, &["-q"], "noatime");
        Setup { tmp, image, ext4 }
    }

    /// A new directory in the ext4 image.
    fn dest(&self, name: &str) -> PathBuf {
        let d = self.ext4.mnt().join(name);
        std::fs::create_dir(&d).unwrap();
        d
    }

    /// rsend's full stream of snapshot `snap`, in a file.
    fn stream(&self, snap: &str) -> PathBuf {
        let out = self.tmp.path().join(format!("{snap}.stream"));
        let o = Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-q")
            .arg("-d")
            .arg(&self.image)
            .arg("-f")
            .arg(&out)
            .arg(snap)
            .output()
            .unwrap();
        assert!(o.status.success(), "rsend {snap}: {}", text(&o.stderr));
        out
    }
}

/// `rreceive ARGS`.
fn rreceive(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(rreceive_bin()).args(args).output().unwrap()
}

/// A receive whose input is a pipe this test writes.
struct Stalled {
    child: Child,
    input: Option<ChildStdin>,
    stream: Vec<u8>,
    sent: usize,
}

impl Stalled {
    /// `rreceive -q DEST`, given the first `part` bytes of `stream`.
    fn start(dest: &Path, stream: &Path, part: usize) -> Stalled {
        let mut child = Command::new(rreceive_bin())
            .arg("-q")
            .arg(dest)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take();
        let mut s = Stalled {
            child,
            input,
            stream: std::fs::read(stream).unwrap(),
            sent: 0,
        };
        s.send(part);
        s
    }

    fn send(&mut self, n: usize) {
        let end = (self.sent + n).min(self.stream.len());
        if let Some(i) = self.input.as_mut() {
            i.write_all(&self.stream[self.sent..end]).unwrap();
        }
        self.sent = end;
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The rest of the stream, then its end: the exit status and stderr.
    fn finish(mut self) -> (Option<i32>, String) {
        let rest = self.stream.len() - self.sent;
        self.send(rest);
        drop(self.input.take());
        let mut err = Vec::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_end(&mut e, &mut err);
        }
        let status = self.child.wait().unwrap();
        (status.code(), text(&err))
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        // A test that failed leaves no receive behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `--list DEST` line of `name`, if any.
fn listed(dest: &Path, name: &str) -> Option<String> {
    let o = rreceive(&["--list".as_ref(), dest.as_os_str()]);
    assert!(o.status.success(), "--list: {}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .find(|l| l.split('\t').next() == Some(name))
        .map(str::to_string)
}

/// Waits until `--list DEST` shows `name` as being received by `pid`.
fn wait_receiving(dest: &Path, name: &str, pid: u32) {
    let want = format!("\treceiving (pid {pid})");
    let t = Instant::now();
    loop {
        if listed(dest, name).is_some_and(|l| l.ends_with(&want)) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{name} never listed as receiving (pid {pid}): {:?}",
            listed(dest, name)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every entry beneath `dir` (hidden ones too): path, type, inode, size,
/// mtime, so that any change shows.
fn state_of(dir: &Path) -> String {
    let o = Command::new("find")
        .arg(dir)
        .args(["-mindepth", "1", "-printf", "%P %y %i %s %T@ %m\\n"])
        .output()
        .unwrap();
    let mut lines: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    lines.sort();
    lines.join("\n")
}

/// The journals in /dev/shm of subvolume `name` in `dest`: file, size,
/// and content digest.
fn journals_of(dest: &Path, name: &str) -> Vec<(String, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let dir = format!("/dev/shm/rreceive-{}", nix::unistd::geteuid().as_raw());
    let m = std::fs::metadata(dest).unwrap();
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    let hex = format!("{:x}-{:x}-{hex}", m.dev(), m.ino());
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        if f == hex {
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            let digest = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            out.push((f, bytes.len() as u64, digest));
        }
    }
    out.sort();
    out
}

/// What `f` gives once it gives the same twice, 300 ms apart: a stalled
/// receive has applied what it read.
fn settled<T: PartialEq>(f: impl Fn() -> T) -> T {
    let mut last = f();
    let t = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = f();
        if now == last || t.elapsed() > Duration::from_secs(30) {
            return now;
        }
        last = now;
    }
}

/// DEST/`name` against the snapshot's committed manifest.
fn check_exact(dest: &Path, name: &str) {
    let want = Manifest::committed(name);
    if let Err(d) = Receiver::RreceiveExt4.compare_received(&want, &dest.join(name), false) {
        panic!("{name} in {}: {d}", dest.display());
    }
}

#[test]
fn two_receives_of_one_stream_at_once_the_second_says_who_and_touches_nothing() {
    let test = "two_receives_of_one_stream_at_once_the_second_says_who_and_touches_nothing";
    if !kernel_available(test) {
        return;
    }
    let t0 = Instant::now();
    let s = Setup::new();
    let snap = "many_files_one_dir.p";
    let stream = s.stream(snap);
    let dest = s.dest("a");
    let len = std::fs::metadata(&stream).unwrap().len() as usize;
    let first = Stalled::start(&dest, &stream, len / 2);
    wait_receiving(&dest, snap, first.pid());
    let before = settled(|| (state_of(&dest), journals_of(&dest, snap)));
    assert!(!before.1.is_empty(), "no journal of the first receive");
    let o = rreceive(&["-f".as_ref(), stream.as_os_str(), dest.as_os_str()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "the second receive: {err}");
    let said = format!(
        "rreceive: error: another rreceive (pid {}) is receiving {snap} into {}",
        first.pid(),
        dest.display()
    );
    assert!(err.contains(&said), "no {said:?} in: {err}");
    assert!(!err.contains("incomplete"), "{err}");
    assert_eq!(
        (state_of(&dest), journals_of(&dest, snap)),
        before,
        "the second receive changed DEST"
    );
    // The same with a stream from a pipe and -v.
    let o = Command::new("sh")
        .arg("-c")
        .arg("cat \"$1\" | \"$2\" -v \"$3\"")
        .arg("sh")
        .arg(&stream)
        .arg(rreceive_bin())
        .arg(&dest)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(&said), "{}", text(&o.stderr));
    assert_eq!(
        (state_of(&dest), journals_of(&dest, snap)),
        before,
        "the third receive changed DEST"
    );
    let (code, err) = first.finish();
    assert_eq!(code, Some(0), "the first receive: {err}");
    check_exact(&dest, snap);
    assert!(
        !state_of(&dest).contains(".rreceive-lock-"),
        "a lock file is left: {}",
        state_of(&dest)
    );
    println!("{test}: {:.1}s", t0.elapsed().as_secs_f64());
}

#[test]
fn a_stalled_receive_is_listed_receiving_and_neither_resumed_nor_deleted() {
    let test = "a_stalled_receive_is_listed_receiving_and_neither_resumed_nor_deleted";
    if !kernel_available(test) {
        return;
    }
    let t0 = Instant::now();
    let s = Setup::new();
    let snap = "large_dir_renamed.p";
    let stream = s.stream(snap);
    let dest = s.dest("b");
    let len = std::fs::metadata(&stream).unwrap().len() as usize;
    let rx = Stalled::start(&dest, &stream, len / 3);
    let pid = rx.pid();
    wait_receiving(&dest, snap, pid);
    let before = settled(|| (state_of(&dest), journals_of(&dest, snap)));
    let o = rreceive(&["--list".as_ref(), "--json".as_ref(), dest.as_os_str()]);
    let json = text(&o.stdout);
    let line = json
        .lines()
        .find(|l| l.contains(&format!("\"name\":\"{snap}\"")))
        .unwrap_or_else(|| panic!("{snap} not in --list --json: {json}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["receiving"], true, "{line}");
    assert_eq!(v["pid"], pid, "{line}");
    assert_eq!(v["complete"], false, "{line}");
    assert_eq!(v["resumable"], false, "{line}");
    let sv = dest.join(snap);
    let said = format!(
        "another rreceive (pid {pid}) is receiving {snap} into {}",
        dest.display()
    );
    let o = rreceive(&["--resume-token".as_ref(), sv.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "--resume-token: {}",
        text(&o.stderr)
    );
    assert!(o.stdout.is_empty(), "a token: {}", text(&o.stdout));
    assert!(text(&o.stderr).contains(&said), "{}", text(&o.stderr));
    let o = rreceive(&["--delete-incomplete".as_ref(), sv.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "--delete-incomplete: {}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains(&format!("not deleted: {said}")),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        (state_of(&dest), journals_of(&dest, snap)),
        before,
        "DEST changed"
    );
    let (code, err) = rx.finish();
    assert_eq!(code, Some(0), "the receive: {err}");
    check_exact(&dest, snap);
    assert!(listed(&dest, snap).is_some_and(|l| l.ends_with("\tcomplete")));
    println!("{test}: {:.1}s", t0.elapsed().as_secs_f64());
}

/// A stand-in for rreceive that, when `$LOCKS_STALL` names a file, gives
/// the receive (not `--list` and the like) the first `$LOCKS_PART` bytes of
/// its input, then the rest once that file is gone.
const STALLING_RRECEIVE: &str = r#"#!/bin/bash
real=$LOCKS_RREAL
case " $* " in
*" --list "* | *" --resume-token "* | *" --delete-incomplete "*) exec "$real" "$@" ;;
esac
if [ -z "${LOCKS_STALL:-}" ]; then exec "$real" "$@"; fi
{
    dd bs=4096 count=$((LOCKS_PART / 4096)) iflag=fullblock status=none
    while [ -e "$LOCKS_STALL" ]; do sleep 0.05; done
    cat
} | "$real" "$@"
"#;

#[test]
fn the_nightly_job_started_twice_says_try_later_and_deletes_nothing() {
    let test = "the_nightly_job_started_twice_says_try_later_and_deletes_nothing";
    if !kernel_available(test) {
        return;
    }
    let t0 = Instant::now();
    let s = Setup::new();
    let snap = "many_files_one_dir.p";
    let len = std::fs::metadata(s.stream(snap)).unwrap().len();
    let dest = s.dest("c");
    let wrapper = s.tmp.path().join("rreceive");
    std::fs::write(&wrapper, STALLING_RRECEIVE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let stall = s.tmp.path().join("stall");
    std::fs::write(&stall, "").unwrap();
    let job = |stalled: bool, extra: &[&str]| {
        let mut c =
            Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rsend-nightly"));
        c.env("RSEND", env!("CARGO_BIN_EXE_rsend"))
            .env("RRECEIVE", &wrapper)
            .env("LOCKS_RREAL", rreceive_bin())
            .env("LOCKS_PART", (len / 2).to_string())
            .env_remove("LOCKS_STALL")
            .args(["-w", "0"])
            .args(extra)
            .arg("-d")
            .arg(&s.image)
            .arg(snap)
            .arg(&dest)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if stalled {
            c.env("LOCKS_STALL", &stall);
        }
        c
    };
    let first = job(true, &[]).spawn().unwrap();
    // The receive of the first job, as --list shows it.
    let t = Instant::now();
    let pid = loop {
        let line = listed(&dest, snap).unwrap_or_default();
        if let Some(p) = line
            .rsplit('\t')
            .next()
            .and_then(|st| st.strip_prefix("receiving (pid "))
            .and_then(|p| p.strip_suffix(')'))
        {
            break p.to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never receiving: {line:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let before = settled(|| (state_of(&dest), journals_of(&dest, snap)));
    let second = job(false, &["--delete-incomplete"]).output().unwrap();
    let log = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "the second job: {log}");
    assert!(
        log.contains(&format!(
            "another rreceive is receiving {snap} into {}",
            dest.display()
        )) && log.contains(&format!("(pid {pid})"))
            && log.contains("nothing deleted"),
        "the second job: {log}"
    );
    assert!(!log.contains("deleting"), "the second job: {log}");
    assert_eq!(
        (state_of(&dest), journals_of(&dest, snap)),
        before,
        "the second job changed DEST"
    );
    std::fs::remove_file(&stall).unwrap();
    let o = first.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "the first job: {}",
        text(&o.stderr)
    );
    check_exact(&dest, snap);
    let third = job(false, &["--delete-incomplete"]).output().unwrap();
    let log = text(&third.stderr);
    assert_eq!(third.status.code(), Some(0), "the next job: {log}");
    assert!(log.contains(&format!("{snap} is complete in")), "{log}");
    check_exact(&dest, snap);
    println!("{test}: {:.1}s", t0.elapsed().as_secs_f64());
}

/// The snapshots the eight receives get, and whether each is killed.
const EIGHT: [(&str, bool); 8] = [
    ("many_files_one_dir.p", true),
    ("btrfs_016_punch_hole.p", false),
    ("large_dir_renamed.p", false),
    ("punch_holes_where_parent_had_data.p", true),
    ("changed_files.p", false),
    ("truncate_shrink.p", false),
    ("deleted_files.p", true),
    ("btrfs_034_holes_across_leaves.p", false),
];

#[test]
fn eight_receives_into_one_dest_at_once_with_kills_all_complete_exact() {
    let test = "eight_receives_into_one_dest_at_once_with_kills_all_complete_exact";
    if !kernel_available(test) {
        return;
    }
    let t0 = Instant::now();
    let s = Setup::new();
    let dest = s.dest("d");
    let streams: Vec<PathBuf> = EIGHT.iter().map(|(snap, _)| s.stream(snap)).collect();
    // All eight started and fed part of their stream (none complete).
    let mut rxs: Vec<Option<Stalled>> = EIGHT
        .iter()
        .zip(&streams)
        .map(|(_, st)| {
            let len = std::fs::metadata(st).unwrap().len() as usize;
            Some(Stalled::start(&dest, st, len / 2))
        })
        .collect();
    for ((snap, _), rx) in EIGHT.iter().zip(&rxs) {
        let pid = rx.as_ref().map(Stalled::pid).unwrap();
        wait_receiving(&dest, snap, pid);
    }
    // Three killed outright.
    for ((_, kill), rx) in EIGHT.iter().zip(rxs.iter_mut()) {
        if *kill {
            rx.take().unwrap().kill();
        }
    }
    // Resumed while the other five are still stalled: what those hold
    // (journals, side files, locks) must stay theirs.
    let held: Vec<(String, String)> = settled(|| {
        EIGHT
            .iter()
            .filter(|(_, kill)| !kill)
            .map(|(snap, _)| (snap.to_string(), format!("{:?}", journals_of(&dest, snap))))
            .collect()
    });
    let mut resumed = Vec::new();
    for (snap, kill) in EIGHT {
        if !kill {
            continue;
        }
        let sv = dest.join(snap);
        let o = rreceive(&["--resume-token".as_ref(), sv.as_os_str()]);
        let token = text(&o.stdout).trim().to_string();
        let how = if o.status.success() {
            let sh = Command::new("sh")
                .arg("-c")
                .arg("\"$1\" -q -d \"$2\" --resume \"$3\" \"$4\" | \"$5\" -q \"$6\"")
                .arg("sh")
                .arg(env!("CARGO_BIN_EXE_rsend"))
                .arg(&s.image)
                .arg(&token)
                .arg(snap)
                .arg(rreceive_bin())
                .arg(&dest)
                .output()
                .unwrap();
            assert!(sh.status.success(), "resuming {snap}: {}", text(&sh.stderr));
            "resumed"
        } else {
            // Killed before its journal's first checkpoint: received again.
            assert_eq!(o.status.code(), Some(1), "{snap}: {}", text(&o.stderr));
            let d = rreceive(&["--delete-incomplete".as_ref(), sv.as_os_str()]);
            assert!(d.status.success(), "{snap}: {}", text(&d.stderr));
            let st = &streams[EIGHT.iter().position(|(n, _)| *n == snap).unwrap()];
            let r = rreceive(&[
                "-q".as_ref(),
                "-f".as_ref(),
                st.as_os_str(),
                dest.as_os_str(),
            ]);
            assert!(r.status.success(), "{snap}: {}", text(&r.stderr));
            "received again"
        };
        resumed.push(format!("{snap} {how}"));
        check_exact(&dest, snap);
    }
    for (snap, journals) in &held {
        assert_eq!(
            &format!("{:?}", journals_of(&dest, snap)),
            journals,
            "the journal of {snap}, still receiving, changed"
        );
    }
    for ((snap, _), rx) in EIGHT.iter().zip(rxs) {
        if let Some(rx) = rx {
            let (code, err) = rx.finish();
            assert_eq!(code, Some(0), "{snap}: {err}");
        }
    }
    for (snap, _) in EIGHT {
        check_exact(&dest, snap);
        assert!(
            listed(&dest, snap).is_some_and(|l| l.ends_with("\tcomplete")),
            "{snap}: {:?}",
            listed(&dest, snap)
        );
    }
    let left: Vec<String> = std::fs::read_dir(&dest)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".rreceive-lock-"))
        .collect();
    assert!(left.is_empty(), "lock files left: {left:?}");
    println!(
        "{test}: {}; {:.1}s",
        resumed.join(", "),
        t0.elapsed().as_secs_f64()
    );
}
