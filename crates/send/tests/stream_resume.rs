//! Resuming from a stream file: `rreceive -f FILE DEST` killed (SIGKILL)
//! or stopped (SIGTERM) at random commands of a kernel-made full stream
//! file and of an incremental one (its parent received first; in each
//! snapshot mode off btrfs), then the same command run again, to the
//! snapshot exactly (its committed manifest), listed complete, nothing of
//! rreceive's left behind. The same stream piped again with `--resume`
//! (`cat FILE |`, `zstd -dc FILE.zst |`) resumes too; a pipe without it is
//! refused with how to resume; another stream for the same name (another
//! file, one cut short, one with a command changed) is refused by name and
//! the subvolume stays resumable; a stored stream made by `rsend --resume`
//! resumes again from itself.
//!
//! Onto ext4 in a loop image (as root). By default (CI) [`CI_STOPS`]
//! random points per stream from a fixed seed; `STREAM_RESUME_STOPS=N`
//! tries N, `STREAM_RESUME_SEED=S` another seed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use btrfs_stream::{Command as Cmd, Reader, Writer};
use common::receivers::{
    rreceive_bin, wait_for, without_nlink, without_xattrs, ManifestServer, Receiver,
};
use common::scenarios::{self, Manifest};

/// The scenario received: files written at random offsets, renamed,
/// linked, removed (343 commands in full, 531 in the incremental).
const SCENARIO: &str = "btrfs_007_seeded_random_ops";

/// Random points per stream by default.
const CI_STOPS: u64 = 12;

/// The default seed of the random points.
const SEED: u64 = 0x5eed_0048;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `s` with every run of whitespace made one space.
fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The ext4 DEST's filesystem, the stream files and the journal directory.
struct Place {
    ext4: testkit::LoopImage,
    tmp: tempfile::TempDir,
    journals: PathBuf,
    /// The kernel's full stream of `NAME.p` and incremental of `NAME.c`.
    full: PathBuf,
    incr: PathBuf,
    p: String,
    c: String,
    want_p: Manifest,
    want_c: Manifest,
    m: ManifestServer,
}

/// How a receive is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Full,
    /// The parent received first; with these rreceive options.
    Incremental(&'static [&'static str]),
}

impl Place {
    /// `None` (after a SKIP line) without root and loop devices.
    fn new(test: &str) -> Option<Place> {
        if !testkit::kernel_available(test) {
            return None;
        }
        let ext4 = testkit::ext4_image(256, &[], "noatime");
        let tmp = tempfile::Builder::new()
            .prefix("stream-resume-")
            .tempdir()
            .unwrap();
        let journals = tmp.path().join("journals");
        std::fs::create_dir(&journals).unwrap();
        let write = |name: &str| {
            let path = tmp.path().join(format!("{name}.stream"));
            std::fs::write(
                &path,
                scenarios::kernel_stream(&format!("{SCENARIO}.{name}")),
            )
            .unwrap();
            path
        };
        let (p, c) = (format!("{SCENARIO}.p"), format!("{SCENARIO}.c"));
        Some(Place {
            full: write("full"),
            incr: write("incr"),
            want_p: Manifest::committed(&p),
            want_c: Manifest::committed(&c),
            p,
            c,
            ext4,
            tmp,
            journals,
            m: ManifestServer::start(),
        })
    }

    fn rreceive(&self) -> Command {
        let mut c = Command::new(rreceive_bin());
        c.env("RRECEIVE_JOURNAL_DIR", &self.journals);
        c
    }

    /// `rreceive -q ARGS -f FILE DEST`.
    fn receive_file(&self, args: &[&str], file: &Path, dest: &Path) -> Command {
        let mut c = self.rreceive();
        c.arg("-q").args(args).arg("-f").arg(file).arg(dest);
        c
    }

    /// A new, empty DEST (and no journals).
    fn fresh_dest(&self) -> PathBuf {
        let dest = self.ext4.mnt().join("d");
        if dest.exists() {
            std::fs::remove_dir_all(&dest).unwrap();
        }
        std::fs::create_dir(&dest).unwrap();
        for e in std::fs::read_dir(&self.journals).unwrap().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        dest
    }

    /// The status `rreceive --list` gives `name` in `dest`, if listed.
    fn listed(&self, dest: &Path, name: &str) -> Option<String> {
        let o = run(self.rreceive().arg("--list").arg(dest));
        assert!(o.status.success(), "--list: {}", text(&o.stderr));
        text(&o.stdout)
            .lines()
            .find(|l| l.split('\t').next() == Some(name))
            .map(|l| l.rsplit('\t').next().unwrap_or("").to_owned())
    }

    /// `rreceive --resume-token DEST/NAME`, if it gives one.
    fn token(&self, sv: &Path) -> Option<String> {
        let o = run(self.rreceive().arg("--resume-token").arg(sv));
        o.status
            .success()
            .then(|| text(&o.stdout).trim().to_owned())
    }

    /// The stream file, snapshot and manifest of `kind`; its parent
    /// received into `dest` first for an incremental.
    fn prepare(&self, kind: Kind, dest: &Path) -> (PathBuf, String, Manifest) {
        match kind {
            Kind::Full => (self.full.clone(), self.p.clone(), self.want_p.clone()),
            Kind::Incremental(rx) => {
                let o = run(&mut self.receive_file(&[], &self.full, dest));
                assert!(o.status.success(), "the parent: {}", text(&o.stderr));
                let want = if rx.contains(&"--link") {
                    without_nlink(&self.want_c)
                } else {
                    self.want_c.clone()
                };
                (self.incr.clone(), self.c.clone(), want)
            }
        }
    }

    /// After the receive of `kind` into `dest` was completed: the snapshot
    /// is `want` exactly, listed complete, its parent as it was (gone in
    /// place), and nothing of rreceive's is left.
    fn check(
        &mut self,
        kind: Kind,
        dest: &Path,
        snap: &str,
        want: &Manifest,
    ) -> Result<(), String> {
        compare(&mut self.m, want, &dest.join(snap))
            .map_err(|e| format!("the subvolume differs: {e}"))?;
        match self.listed(dest, snap).as_deref() {
            Some("complete") => {}
            other => return Err(format!("--list says {other:?}")),
        }
        if let Kind::Incremental(rx) = kind {
            if rx.contains(&"--in-place") {
                if dest.join(&self.p).exists() {
                    return Err("in place, the parent is still there".into());
                }
            } else {
                let want_p = if rx.contains(&"--link") {
                    without_nlink(&self.want_p)
                } else {
                    self.want_p.clone()
                };
                let p = dest.join(&self.p);
                compare(&mut self.m, &want_p, &p)
                    .map_err(|e| format!("the parent changed: {e}"))?;
            }
        }
        let mut left: Vec<String> = std::fs::read_dir(dest)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".rreceive") && n != ".rreceive-state")
            .collect();
        left.extend(
            std::fs::read_dir(&self.journals)
                .unwrap()
                .flatten()
                .map(|e| format!("journal {:?}", e.file_name())),
        );
        if !left.is_empty() {
            return Err(format!("left behind: {left:?}"));
        }
        Ok(())
    }
}

fn run(c: &mut Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"))
}

/// The tree at `got` against `want`, as rreceive onto ext4 is compared.
fn compare(m: &mut ManifestServer, want: &Manifest, got: &Path) -> Result<(), String> {
    if !got.is_dir() {
        return Err(format!("{} is not there", got.display()));
    }
    let have = m.of(got)?;
    let have = if want.rows.iter().any(|r| r.split('\t').nth(5) == Some("*")) {
        without_nlink(&have)
    } else {
        have
    };
    let ignore = |x: &str| Receiver::RreceiveExt4.ignores_xattr(x);
    Manifest::difference(
        &without_xattrs(want, ignore),
        &without_xattrs(&have, ignore),
    )
    .map_or(Ok(()), Err)
}

/// How many commands the stream in `file` has.
fn commands(file: &Path) -> u64 {
    let data = std::fs::read(file).unwrap();
    let mut r = Reader::from_bytes(&data[..]);
    let mut n = 0;
    while r.next_command().unwrap().is_some() {
        n += 1;
    }
    n
}

/// Runs `cmd` until it stops itself (`RRECEIVE_TEST_STOP=n`: SIGSTOP
/// before the first command applied at or past `n`), then SIGTERM: it
/// stops cleanly after that command. Its output.
fn terminated_at(mut cmd: Command, n: u64) -> Output {
    let mut child = cmd
        .env("RRECEIVE_TEST_STOP", n.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| st.rsplit_once(") ").map(|(_, r)| r.starts_with('T')))
            .unwrap_or(false)
    };
    let until = Instant::now() + Duration::from_secs(60);
    while !stopped() {
        if child.try_wait().unwrap().is_some() {
            // Ran to its end (or failed) before reaching `n`.
            return child.wait_with_output().unwrap();
        }
        assert!(Instant::now() < until, "rreceive did not stop at {n}");
        std::thread::sleep(Duration::from_millis(2));
    }
    use nix::sys::signal::{kill, Signal};
    kill(pid, Signal::SIGTERM).unwrap();
    kill(pid, Signal::SIGCONT).unwrap();
    wait_for(&mut child, 60);
    child.wait_with_output().unwrap()
}

/// How a receive was interrupted.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGKILL at command N, before (0) or after (1) applying it.
    Kill(u64, u8),
    /// SIGTERM at command N: a clean stop, exit 3.
    Term(u64),
}

/// Runs `cmd` interrupted as `stop` says; `Err` when it did not end as
/// such an interruption ends (a kill, exit 3) or by completing.
fn interrupted(cmd: Command, stop: Stop) -> Result<(), String> {
    use std::os::unix::process::ExitStatusExt;
    match stop {
        Stop::Kill(n, phase) => {
            let mut cmd = cmd;
            let o = run(cmd.env("RRECEIVE_TEST_KILL", format!("{n}:{phase}")));
            match (o.status.signal(), o.status.code()) {
                (Some(9), _) | (None, Some(0)) => Ok(()),
                _ => Err(format!("{}: {}", o.status, text(&o.stderr))),
            }
        }
        Stop::Term(n) => {
            let o = terminated_at(cmd, n);
            match o.status.code() {
                Some(0) | Some(3) => Ok(()),
                _ => Err(format!("{}: {}", o.status, text(&o.stderr))),
            }
        }
    }
}

/// Each stop of `stops` (one or two in a row, as given) of the receive of
/// `kind` into a new DEST, then the same command again: exact.
fn stopped_and_run_again(
    place: &mut Place,
    kind: Kind,
    stops: &[Stop],
) -> Result<&'static str, String> {
    let dest = place.fresh_dest();
    let (file, snap, want) = place.prepare(kind, &dest);
    let rx = match kind {
        Kind::Full => &[][..],
        Kind::Incremental(rx) => rx,
    };
    for (i, &stop) in stops.iter().enumerate() {
        if i > 0 && place.listed(&dest, &snap).as_deref() == Some("complete") {
            break;
        }
        interrupted(place.receive_file(rx, &file, &dest), stop)?;
    }
    // Where it was left; then the same command line again.
    let how = match place.listed(&dest, &snap).as_deref() {
        Some("complete") => "complete",
        Some("resumable") => "resumed",
        None => "started again",
        Some(other) => return Err(format!("left {other}")),
    };
    if how != "complete" {
        let o = run(&mut place.receive_file(rx, &file, &dest));
        if !o.status.success() {
            return Err(format!(
                "{how}: the same command again: {}",
                text(&o.stderr)
            ));
        }
    }
    place
        .check(kind, &dest, &snap, &want)
        .map_err(|e| format!("{how}: {e}"))?;
    Ok(how)
}

/// Killed or stopped at random commands of the full and the incremental
/// stream file (in each snapshot mode), twice in a row now and then: the
/// same `rreceive -f FILE DEST` again completes it exactly.
#[test]
fn a_stream_file_stopped_anywhere_resumes_from_the_same_file() {
    let Some(mut place) = Place::new("a_stream_file_stopped_anywhere_resumes_from_the_same_file")
    else {
        return;
    };
    let stops: u64 = std::env::var("STREAM_RESUME_STOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_STOPS);
    let seed = std::env::var("STREAM_RESUME_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEED);
    let mut rng = testkit::Rng(seed);
    let mut failures = Vec::new();
    let modes: [&'static [&'static str]; 3] = [&[], &["--link"], &["--in-place"]];
    for (label, file) in [
        ("full", place.full.clone()),
        ("incremental", place.incr.clone()),
    ] {
        let started = Instant::now();
        let n = commands(&file);
        let mut hows = std::collections::BTreeMap::new();
        for k in 0..stops {
            let kind = match label {
                "full" => Kind::Full,
                _ => Kind::Incremental(modes[(k % 3) as usize]),
            };
            let mut pick = |from: u64| {
                let at = from + rng.below(n + 1 - from);
                if rng.below(2) == 0 {
                    Stop::Kill(at, rng.below(2) as u8)
                } else {
                    Stop::Term(at)
                }
            };
            let first = pick(1);
            let mut stops = vec![first];
            // Now and then stopped again while resuming, further on.
            if k % 3 == 2 {
                let (Stop::Kill(at, _) | Stop::Term(at)) = first;
                stops.push(pick(at.min(n)));
            }
            match stopped_and_run_again(&mut place, kind, &stops) {
                Ok(how) => *hows.entry(how).or_insert(0) += 1,
                Err(e) => failures.push(format!("{label} {kind:?} {stops:?}: {e}")),
            }
        }
        println!(
            "{label} stream file ({n} commands): stopped at {stops} random points (seed {seed:#x}); \
             then {hows:?}; {:.1?}",
            started.elapsed()
        );
    }
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The full stream file cut at 2/3 of its bytes: received, it stops
/// (exit 3) with its point deep in the stream.
fn stopped_by_a_cut(place: &Place, dest: &Path) -> (String, PathBuf) {
    let data = std::fs::read(&place.full).unwrap();
    let cut = place.tmp.path().join("cut.stream");
    std::fs::write(&cut, &data[..data.len() * 2 / 3]).unwrap();
    let o = run(&mut place.receive_file(&[], &cut, dest));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let sv = dest.join(&place.p);
    let token = place.token(&sv).expect("a token after the cut");
    (token, cut)
}

/// Another stream of the same snapshot for the same name: the full stream
/// with the first CHMOD before `before` given another mode (as long, same
/// offsets, another digest).
fn changed_stream(place: &Place, before: u64) -> PathBuf {
    let data = std::fs::read(&place.full).unwrap();
    let mut r = Reader::from_bytes(&data[..]);
    let mut w = Writer::new(Vec::new());
    let mut changed = false;
    let mut version = None;
    while let Some((cmd, pos)) = r.next_framed().unwrap() {
        if version.is_none() {
            w.start_stream(pos.version).unwrap();
            version = Some(pos.version);
        }
        match cmd {
            Cmd::Chmod { path, mode } if !changed && pos.index < before => {
                changed = true;
                w.write_command(&Cmd::Chmod {
                    path,
                    mode: mode ^ 0o001,
                })
                .unwrap();
            }
            c => w.write_command(&c).unwrap(),
        }
    }
    assert!(changed, "no CHMOD before command {before}");
    let out = place.tmp.path().join("changed.stream");
    std::fs::write(&out, w.into_inner()).unwrap();
    assert_eq!(std::fs::metadata(&out).unwrap().len(), data.len() as u64);
    out
}

/// Other streams for the same name are refused by name, exit 1, and the
/// subvolume stays as it was (the same token); a pipe without --resume is
/// refused with both ways to resume; the stream piped again with --resume
/// completes it exactly.
#[test]
fn another_stream_is_refused_by_name_and_the_right_one_resumes() {
    let Some(mut place) = Place::new("another_stream_is_refused_by_name_and_the_right_one_resumes")
    else {
        return;
    };
    let dest = place.fresh_dest();
    let (token, cut) = stopped_by_a_cut(&place, &dest);
    let sv = dest.join(&place.p);
    let point: u64 = token.split(':').nth(6).unwrap().parse().unwrap();
    assert!(point > 10, "stopped at command {point}");
    let unchanged = |place: &Place, what: &str| {
        assert_eq!(
            place.token(&sv).as_deref(),
            Some(token.as_str()),
            "{what} changed the subvolume's token"
        );
    };
    let refused = |o: &Output, file: &str, what: &str| {
        let err = words(&text(&o.stderr));
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        let head = format!(
            "rreceive: error: cannot resume subvolume {} in {} from {file}: ",
            place.p,
            dest.display()
        );
        assert!(err.starts_with(&head), "{what}: {err}");
        assert!(
            err.contains("the subvolume is left as it was"),
            "{what}: {err}"
        );
        err
    };

    // The same file cut short again: ends before the point.
    let shorter = place.tmp.path().join("shorter.stream");
    let data = std::fs::read(&place.full).unwrap();
    std::fs::write(&shorter, &data[..data.len() / 3]).unwrap();
    let o = run(&mut place.receive_file(&[], &shorter, &dest));
    let err = refused(&o, &shorter.display().to_string(), "a shorter file");
    assert!(err.contains("the file is cut short after command"), "{err}");
    unchanged(&place, "a shorter file");

    // A command changed before the point: the same length, another digest.
    let changed = changed_stream(&place, point);
    let o = run(&mut place.receive_file(&[], &changed, &dest));
    let err = refused(&o, &changed.display().to_string(), "a changed stream");
    assert!(err.contains(&format!("at command {point} (byte ")), "{err}");
    assert!(err.contains("its digest is"), "{err}");
    unchanged(&place, "a changed stream");

    // Another snapshot's stream under the same name, piped with --resume.
    let other = {
        let data = std::fs::read(&place.incr).unwrap();
        let mut r = Reader::from_bytes(&data[..]);
        let mut w = Writer::new(Vec::new());
        while let Some((cmd, pos)) = r.next_framed().unwrap() {
            if pos.index == 1 {
                w.start_stream(pos.version).unwrap();
            }
            match cmd {
                Cmd::Snapshot { uuid, ctransid, .. } => w
                    .write_command(&Cmd::Subvol {
                        path: place.p.as_bytes(),
                        uuid,
                        ctransid,
                    })
                    .unwrap(),
                c => w.write_command(&c).unwrap(),
            }
        }
        w.into_inner()
    };
    let o = piped(&place, &["--resume"], &dest, &other);
    let err = refused(&o, "standard input", "another snapshot's stream");
    assert!(err.contains("holds the stream of uuid"), "{err}");
    unchanged(&place, "another snapshot's stream");

    // A pipe without --resume: refused as before, saying both ways.
    let o = piped(&place, &[], &dest, &data);
    let err = words(&text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{err}");
    for said in [
        format!(
            "Resume it with rsend --resume \"$(rreceive --resume-token {})\"",
            sv.display()
        ),
        format!(
            "from a stored stream file, with the same rreceive -f FILE {} again",
            dest.display()
        ),
        format!("| rreceive --resume {})", dest.display()),
    ] {
        assert!(err.contains(&said), "{said:?} not in {err}");
    }
    unchanged(&place, "a pipe without --resume");

    // The cut file again stops again where it stopped, having changed
    // nothing, and says to run it again once whole.
    let o = run(&mut place.receive_file(&[], &cut, &dest));
    let err = words(&text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "To complete it, run the same rreceive -f {} {} again once the file is whole",
            cut.display(),
            dest.display()
        )),
        "{err}"
    );
    unchanged(&place, "the cut file again");

    // `cat FILE | rreceive --resume DEST`.
    let mut cat = Command::new("cat")
        .arg(&place.full)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let o = run(place
        .rreceive()
        .args(["-v", "--resume"])
        .arg(&dest)
        .stdin(Stdio::from(cat.stdout.take().unwrap())));
    assert!(cat.wait().unwrap().success());
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("resuming {} from command {point} (byte ", place.p)),
        "{}",
        text(&o.stderr)
    );
    let want = place.want_p.clone();
    let p = place.p.clone();
    place.check(Kind::Full, &dest, &p, &want).unwrap();
}

/// `rreceive ARGS DEST` reading `data` from a pipe.
fn piped(place: &Place, args: &[&str], dest: &Path, data: &[u8]) -> Output {
    use std::io::Write;
    let mut child = place
        .rreceive()
        .arg("-q")
        .args(args)
        .arg(dest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || {
        // A refusal stops reading: a broken pipe is expected then.
        let _ = stdin.write_all(&data);
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    o
}

/// An incremental stream file stopped by SIGTERM in the middle: exit 3,
/// saying to run the same command again; then the committed `.zst` piped
/// through `zstd -dc` with --resume completes it exactly, in each mode.
#[test]
fn a_stream_stopped_by_sigterm_resumes_from_zstd_through_a_pipe() {
    let Some(mut place) =
        Place::new("a_stream_stopped_by_sigterm_resumes_from_zstd_through_a_pipe")
    else {
        return;
    };
    if testkit::which("zstd").is_none() {
        println!("SKIP a_stream_stopped_by_sigterm_resumes_from_zstd_through_a_pipe: no zstd");
        return;
    }
    let zst = scenarios::dir()
        .join("streams")
        .join(format!("{SCENARIO}.incr.stream.zst"));
    let n = commands(&place.incr);
    let modes: [&'static [&'static str]; 3] = [&[], &["--link"], &["--in-place"]];
    for rx in modes {
        let kind = Kind::Incremental(rx);
        let dest = place.fresh_dest();
        let (file, snap, want) = place.prepare(kind, &dest);
        let o = terminated_at(place.receive_file(rx, &file, &dest), n / 2);
        let err = words(&text(&o.stderr));
        assert_eq!(o.status.code(), Some(3), "{rx:?}: {err}");
        assert!(
            err.contains(&format!(
                "To complete it, run the same rreceive -f {} {} again: it checks the stream",
                file.display(),
                dest.display()
            )),
            "{rx:?}: {err}"
        );
        let mut zstd = Command::new("zstd")
            .arg("-dc")
            .arg(&zst)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let o = run(place
            .rreceive()
            .arg("-q")
            .arg("--resume")
            .args(rx)
            .arg(&dest)
            .stdin(Stdio::from(zstd.stdout.take().unwrap())));
        assert!(zstd.wait().unwrap().success());
        assert!(o.status.success(), "{rx:?}: {}", text(&o.stderr));
        place
            .check(kind, &dest, &snap, &want)
            .unwrap_or_else(|e| panic!("{rx:?}: {e}"));
    }
}

/// A stream made by `rsend --resume` and stored, stopped in its turn:
/// the same file again goes on from where that receive stopped (its RESUME
/// point, then the commands after it up to the new point, read again).
/// And an rsend-made full stream file, killed, resumes from itself too.
#[test]
fn a_stored_resumed_stream_and_an_rsend_stream_resume_from_themselves() {
    let Some(mut place) =
        Place::new("a_stored_resumed_stream_and_an_rsend_stream_resume_from_themselves")
    else {
        return;
    };
    let image = scenarios::decompress_image(place.tmp.path());
    let rsend = |args: &[&str], out: &Path| {
        let o = run(Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-q")
            .arg("-d")
            .arg(&image)
            .arg("-f")
            .arg(out)
            .args(args));
        assert!(o.status.success(), "rsend {args:?}: {}", text(&o.stderr));
    };
    let dest = place.fresh_dest();
    let (token, _) = stopped_by_a_cut(&place, &dest);
    let p = place.p.clone();
    let resumed = place.tmp.path().join("resumed.stream");
    rsend(&["--resume", &token, &p], &resumed);
    let n = commands(&resumed);
    let o = terminated_at(place.receive_file(&[], &resumed, &dest), n / 2);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let again = place.token(&dest.join(&p)).expect("a token");
    assert_ne!(again, token, "the resumed receive did not go on");
    let o = run(place
        .rreceive()
        .arg("-v")
        .arg("-f")
        .arg(&resumed)
        .arg(&dest));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let point = again.split(':').nth(6).unwrap();
    assert!(
        text(&o.stderr).contains(&format!("resuming {p} from command {point} (byte ")),
        "{}",
        text(&o.stderr)
    );
    let want = place.want_p.clone();
    place.check(Kind::Full, &dest, &p, &want).unwrap();

    // rsend's own full stream of the same snapshot, killed and stopped.
    let ours = place.tmp.path().join("rsend-full.stream");
    rsend(&[&p], &ours);
    let n = commands(&ours);
    for stop in [Stop::Term(n / 3), Stop::Kill(2 * n / 3, 1)] {
        let dest = place.fresh_dest();
        interrupted(place.receive_file(&[], &ours, &dest), stop).unwrap();
        assert_eq!(place.listed(&dest, &p).as_deref(), Some("resumable"));
        let o = run(&mut place.receive_file(&[], &ours, &dest));
        assert!(o.status.success(), "{stop:?}: {}", text(&o.stderr));
        place
            .check(Kind::Full, &dest, &p, &want)
            .unwrap_or_else(|e| panic!("{stop:?}: {e}"));
    }
}
