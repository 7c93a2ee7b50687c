//! rreceive killed (SIGKILL) before each of its system calls, not only at
//! command boundaries: a full and an incremental receive (the parent
//! received first) in each mode off btrfs (a copy of the parent, `--link`,
//! `--in-place`) onto ext4, and a full receive and a snapshot onto btrfs.
//! A ptrace stepper ([`testkit::syscall_kill`]) counts the system calls of
//! all of rreceive's threads and kills it before the N-th: the same receive
//! is done again for N = 1, 2, ... to its end.
//!
//! After each kill the destination is taken up as the nightly job
//! (`rsend-nightly` in scripts/) does, unattended: listed complete by
//! `rreceive --list`, done (and the same stream received again, as when
//! the job runs twice, changes nothing); a token from `rreceive
//! --resume-token`, `rsend --resume` into rreceive; not listed, the same
//! stream received again. Listed but not resumable is a failure: the job
//! would stop there for someone to delete it. Then the subvolume must be
//! the snapshot exactly (its manifest) and complete, the parent as it was
//! (gone, in place), and nothing of rreceive's left in DEST or in the
//! journal directory.
//!
//! `KILL_SYSCALLS=all` kills before every system call (about 5,500
//! instants). By default (CI): before each system call of the set-up on
//! rreceive's main thread ([`setup_window`]), and every [`CI_STRIDE`]th of
//! all the others (from an offset that differs per case);
//! `KILL_SYSCALLS=N`: every N-th instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use common::receivers::{rreceive_bin, without_nlink, without_xattrs, ManifestServer, Receiver};
use common::scenarios::{self, Manifest};
use testkit::syscall_kill::{run_killed_at, At, Call, Stepped};

/// The scenario received: 21 inodes, hard links made and removed, files
/// written, directories moved beneath others (a small tree, so that each
/// of a few thousand instants costs little).
const SCENARIO: &str = "btrfs_030_dir_moved_under_child";

/// By default, one instant in so many (besides the set-up's).
const CI_STRIDE: u64 = 17;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// How a receive is made.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// The full stream of the parent.
    Full,
    /// The incremental stream, the parent received first; with these
    /// rreceive options.
    Incremental(&'static [&'static str]),
}

struct Case {
    label: &'static str,
    kind: Kind,
}

const PLAIN_CASES: [Case; 4] = [
    Case {
        label: "full",
        kind: Kind::Full,
    },
    Case {
        label: "incremental (a copy of the parent)",
        kind: Kind::Incremental(&[]),
    },
    Case {
        label: "incremental --link",
        kind: Kind::Incremental(&["--link"]),
    },
    Case {
        label: "incremental --in-place",
        kind: Kind::Incremental(&["--in-place"]),
    },
];

const BTRFS_CASES: [Case; 2] = [
    Case {
        label: "full",
        kind: Kind::Full,
    },
    Case {
        label: "incremental (a snapshot)",
        kind: Kind::Incremental(&[]),
    },
];

/// What the instants of one filesystem share.
struct Place<'a> {
    /// Where each instant's DEST is made (and removed).
    root: &'a Path,
    btrfs: bool,
    /// The journal directory (`RRECEIVE_JOURNAL_DIR`): looked at after
    /// each instant.
    journals: PathBuf,
    image: &'a Path,
    scratch: &'a Path,
}

/// How a killed receive was taken up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Complete already (killed after its END was recorded).
    Complete,
    /// Resumed with `rsend --resume`.
    Resumed,
    /// Nothing was left: received again.
    Again,
}

impl Place<'_> {
    fn rreceive(&self) -> Command {
        let mut c = Command::new(rreceive_bin());
        c.env("RRECEIVE_JOURNAL_DIR", &self.journals);
        c
    }

    fn run(&self, c: &mut Command) -> Output {
        c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"))
    }

    /// `rreceive --list DEST`: the status of `name` there, if listed.
    fn listed(&self, dest: &Path, name: &str) -> Result<Option<String>, String> {
        let o = self.run(self.rreceive().arg("--list").arg(dest));
        if !o.status.success() {
            return Err(format!("rreceive --list: {}", text(&o.stderr)));
        }
        Ok(text(&o.stdout)
            .lines()
            .find(|l| l.split('\t').next() == Some(name))
            .map(|l| l.rsplit('\t').next().unwrap_or("").to_owned()))
    }

    /// Removes `dest` and everything in it (its subvolumes on btrfs).
    fn clear(&self, dest: &Path) {
        if self.btrfs {
            if let Ok(rd) = std::fs::read_dir(dest) {
                for e in rd.flatten() {
                    use std::os::unix::fs::MetadataExt;
                    if e.metadata().is_ok_and(|m| m.is_dir() && m.ino() == 256) {
                        let _ = Command::new("btrfs")
                            .args(["-q", "subvolume", "delete"])
                            .arg(e.path())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status();
                    }
                }
            }
        }
        if dest.exists() {
            std::fs::remove_dir_all(dest)
                .unwrap_or_else(|e| panic!("rm -rf {}: {e}", dest.display()));
        }
        if let Ok(rd) = std::fs::read_dir(&self.journals) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// What rreceive left in DEST besides the subvolumes (and the state
    /// file), and in the journal directory.
    fn leftovers(&self, dest: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dest)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".rreceive") && n != ".rreceive-state")
            .collect();
        if let Ok(rd) = std::fs::read_dir(&self.journals) {
            v.extend(rd.flatten().map(|e| format!("journal {:?}", e.file_name())));
        }
        v.sort();
        v
    }
}

/// One case's streams and snapshots.
struct Streams {
    full: PathBuf,
    incr: PathBuf,
    p: String,
    c: String,
    want_p: Manifest,
    want_c: Manifest,
}

/// The tree at `got` against `want`, as rreceive onto ext4 is compared.
fn compare(m: &mut ManifestServer, want: &Manifest, got: &Path) -> Result<(), String> {
    if !got.is_dir() {
        return Err(format!("{} is not there", got.display()));
    }
    let have = m.of(got)?;
    let ignore = |x: &str| Receiver::RreceiveExt4.ignores_xattr(x);
    let have = if want.rows.iter().any(|r| r.split('\t').nth(5) == Some("*")) {
        without_nlink(&have)
    } else {
        have
    };
    Manifest::difference(
        &without_xattrs(want, ignore),
        &without_xattrs(&have, ignore),
    )
    .map_or(Ok(()), Err)
}

/// The receive of `case` into a new DEST, killed before system call `at`
/// (`None`: not killed), taken up as the nightly job does and checked:
/// how it was taken up, or `None` when it made fewer system calls than
/// `at` counts (it ran to its end); and what the stepper saw.
fn instant(
    place: &Place<'_>,
    s: &Streams,
    case: &Case,
    at: Option<At>,
    m: &mut ManifestServer,
) -> Result<(Option<How>, Stepped), String> {
    let dest = place.root.join("d");
    place.clear(&dest);
    std::fs::create_dir(&dest).unwrap();
    let (file, snap, want, rx) = match case.kind {
        Kind::Full => (&s.full, &s.p, s.want_p.clone(), &[][..]),
        Kind::Incremental(rx) => {
            let o = place.run(place.rreceive().arg("-q").arg("-f").arg(&s.full).arg(&dest));
            if !o.status.success() {
                return Err(format!("receiving the parent: {}", text(&o.stderr)));
            }
            // Linked, unchanged files share their link count with the
            // parent's (documented).
            let want = if rx.contains(&"--link") && !place.btrfs {
                without_nlink(&s.want_c)
            } else {
                s.want_c.clone()
            };
            (&s.incr, &s.c, want, rx)
        }
    };
    let mut cmd = place.rreceive();
    cmd.args(rx).arg("-q").arg("-f").arg(file).arg(&dest);
    let stepped = run_killed_at(&mut cmd, at).map_err(|e| format!("ptrace: {e}"))?;
    let how = if !stepped.killed {
        if !stepped.status.success() {
            return Err(format!(
                "not killed, and it failed: {}: {}",
                stepped.status,
                text(&stepped.stderr)
            ));
        }
        if at.is_some() {
            return Ok((None, stepped));
        }
        How::Complete
    } else {
        let (nr, name) = stepped.before.unwrap_or((-1, "?"));
        let why = |e: String| format!("({name}, number {nr}): {e}");
        take_up(place, &dest, snap, file, rx).map_err(why)?
    };
    let checked = check(place, s, case, &dest, snap, &want, m);
    match (checked, stepped.before) {
        (Ok(()), _) => Ok((Some(how), stepped)),
        (Err(e), Some((nr, name))) => Err(format!("({name}, number {nr}): {how:?}: {e}")),
        (Err(e), None) => Err(format!("{how:?}: {e}")),
    }
}

/// After a receive of `snap` into `dest` was taken up: it is the snapshot
/// `want`, complete, its parent as it was (gone in place), and nothing of
/// rreceive's is left.
fn check(
    place: &Place<'_>,
    s: &Streams,
    case: &Case,
    dest: &Path,
    snap: &str,
    want: &Manifest,
    m: &mut ManifestServer,
) -> Result<(), String> {
    compare(m, want, &dest.join(snap)).map_err(|e| format!("the subvolume differs: {e}"))?;
    match place.listed(dest, snap)?.as_deref() {
        Some("complete") => {}
        other => return Err(format!("--list says {other:?}")),
    }
    if let Kind::Incremental(rx) = case.kind {
        let in_place = rx.contains(&"--in-place") && !place.btrfs;
        let parent = place.listed(dest, &s.p)?;
        if in_place {
            if parent.is_some() || dest.join(&s.p).exists() {
                return Err("in place, the parent is still there".into());
            }
        } else {
            if parent.as_deref() != Some("complete") {
                return Err(format!("the parent is listed {parent:?}"));
            }
            let want_p = if rx.contains(&"--link") && !place.btrfs {
                without_nlink(&s.want_p)
            } else {
                s.want_p.clone()
            };
            compare(m, &want_p, &dest.join(&s.p))
                .map_err(|e| format!("the parent changed: {e}"))?;
        }
    }
    let left = place.leftovers(dest);
    if !left.is_empty() {
        return Err(format!("left behind: {left:?}"));
    }
    Ok(())
}

/// What the nightly job does after a receive of `snap` into `dest` was
/// killed: nothing when it is complete, a resume when it has a token, the
/// same stream again when it is not there; listed but not resumable, it
/// would stop (a failure).
fn take_up(
    place: &Place<'_>,
    dest: &Path,
    snap: &str,
    file: &Path,
    rx: &[&str],
) -> Result<How, String> {
    let listed = place.listed(dest, snap)?;
    let again = || {
        place.run(
            place
                .rreceive()
                .args(rx)
                .arg("-q")
                .arg("-f")
                .arg(file)
                .arg(dest),
        )
    };
    if listed.as_deref() == Some("complete") {
        // The job is done. The next receive into DEST (here the same
        // stream again: the nightly line run twice) finds it there and
        // changes nothing in it (checked after).
        again();
        return Ok(How::Complete);
    }
    let t = place.run(place.rreceive().arg("--resume-token").arg(dest.join(snap)));
    if t.status.success() {
        let token = text(&t.stdout).trim().to_owned();
        let resumed = place.scratch.join("resumed.stream");
        let o = place.run(
            Command::new(env!("CARGO_BIN_EXE_rsend"))
                .arg("-q")
                .arg("-d")
                .arg(place.image)
                .arg("-f")
                .arg(&resumed)
                .args(["--resume", &token, snap]),
        );
        if !o.status.success() {
            return Err(format!("rsend --resume {token}: {}", text(&o.stderr)));
        }
        let o = place.run(place.rreceive().arg("-q").arg("-f").arg(&resumed).arg(dest));
        if !o.status.success() {
            return Err(format!("the resumed receive: {}", text(&o.stderr)));
        }
        return Ok(How::Resumed);
    }
    if let Some(status) = listed {
        return Err(format!(
            "listed {status} and not resumable: {}",
            text(&t.stderr).trim()
        ));
    }
    let o = again();
    if !o.status.success() {
        return Err(format!("received again: {}", text(&o.stderr)));
    }
    Ok(How::Again)
}

/// The set-up of a receive that made `calls`: its main thread's system
/// calls (counted from 1) from 45 before its first `flock` (the journal's)
/// to 45 after it. That is the subvolume made under a reserved name with
/// its state, its side file, its journal with the first checkpoint, the
/// subvolume given its name, the first durable checkpoint. Empty where
/// system calls have no names here.
fn setup_window(calls: &[Call]) -> Option<std::ops::RangeInclusive<u64>> {
    let main: Vec<i64> = calls.iter().filter(|c| c.main).map(|c| c.nr).collect();
    let i = main
        .iter()
        .position(|&c| testkit::syscall_kill::syscall_name(c) == "flock")? as u64;
    Some((i + 1).saturating_sub(45).max(1)..=i + 1 + 45)
}

/// Every instant (or every `stride`-th) of each case onto the filesystem
/// mounted at `root`; prints what was tried, fails on what did not come
/// out exact.
fn every_instant(fs: &'static str, root: &Path, btrfs: bool, cases: &[Case]) {
    let tmp = tempfile::tempdir().unwrap();
    let image = scenarios::decompress_image(tmp.path());
    let stream = |args: &[&str], out: &str| {
        let out = tmp.path().join(out);
        let o = Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-q")
            .arg("-d")
            .arg(&image)
            .arg("-f")
            .arg(&out)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "rsend {args:?}: {}", text(&o.stderr));
        out
    };
    let (p, c) = (format!("{SCENARIO}.p"), format!("{SCENARIO}.c"));
    let s = Streams {
        full: stream(&[&p], "full.stream"),
        incr: stream(&["-p", &p, &c], "incr.stream"),
        want_p: Manifest::committed(&p),
        want_c: Manifest::committed(&c),
        p,
        c,
    };
    let journals = tmp.path().join("journals");
    std::fs::create_dir(&journals).unwrap();
    let place = Place {
        root,
        btrfs,
        journals,
        image: &image,
        scratch: tmp.path(),
    };
    let stride = match std::env::var("KILL_SYSCALLS").as_deref() {
        Ok("all") => 1,
        Ok(n) => n.parse().unwrap_or(CI_STRIDE).max(1),
        Err(_) => CI_STRIDE,
    };
    let mut m = ManifestServer::start();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let started = Instant::now();
        // Not killed: the system calls the receive makes.
        let calls = match instant(&place, &s, case, None, &mut m) {
            Ok((_, st)) => st.calls,
            Err(e) => panic!("{fs} {}: not killed: {e}", case.label),
        };
        let whole = calls.len() as u64;
        // Each of the set-up's on the main thread (by default), then every
        // `stride`-th of all, until one is not killed (a run can make a
        // few more than another).
        let window = setup_window(&calls).filter(|_| stride > 1);
        let offset = 1 + i as u64 % stride;
        let instants = window
            .clone()
            .into_iter()
            .flatten()
            .map(|n| At { n, main: true })
            .chain((0..).map(|k| At {
                n: offset + k * stride,
                main: false,
            }));
        let mut tried = 0;
        let mut failed = 0;
        let mut hows = std::collections::BTreeMap::new();
        for at in instants {
            match instant(&place, &s, case, Some(at), &mut m) {
                Ok((None, _)) if at.main => continue,
                Ok((None, _)) => break,
                Ok((Some(how), _)) => *hows.entry(format!("{how:?}")).or_insert(0) += 1,
                Err(e) => {
                    failed += 1;
                    let whose = if at.main { " of its main thread" } else { "" };
                    failures.push(format!(
                        "{fs} {}: killed before system call {}{whose} {e}",
                        case.label, at.n
                    ));
                }
            }
            tried += 1;
        }
        let which = match (&window, stride) {
            (_, 1) => "each".to_string(),
            (Some(w), _) => format!(
                "those of its main thread's set-up, {} to {}, and every {stride}th",
                w.start(),
                w.end()
            ),
            (None, _) => format!("every {stride}th"),
        };
        println!(
            "{fs} {}: killed before {tried} of its {whole} system calls ({which}): {failed} \
             failed; then {hows:?}; {:.0?}",
            case.label,
            started.elapsed()
        );
    }
    place.clear(&root.join("d"));
    assert!(
        failures.is_empty(),
        "{} instants failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Onto ext4: a full receive, and an incremental one as a copy of its
/// parent, with `--link` and with `--in-place`.
#[test]
fn a_receive_killed_before_any_system_call_onto_ext4_resumes_or_starts_again() {
    if !testkit::kernel_available("a_receive_killed_before_any_system_call_onto_ext4") {
        return;
    }
    let ext4 = testkit::ext4_image(256, &[], "noatime,nobarrier");
    every_instant("ext4", ext4.mnt(), false, &PLAIN_CASES);
}

/// Onto btrfs: a full receive (a subvolume) and an incremental one (a
/// snapshot of its parent).
#[test]
fn a_receive_killed_before_any_system_call_onto_btrfs_resumes_or_starts_again() {
    if !testkit::kernel_available("a_receive_killed_before_any_system_call_onto_btrfs") {
        return;
    }
    let btrfs = testkit::BtrfsImage::new(512, &[], "noatime");
    every_instant("btrfs", btrfs.mnt(), true, &BTRFS_CASES);
}
