//! Resuming a receive that stopped (no root, no mounts: rreceive into plain
//! directories of the normal filesystem, rsend reading the committed fixture
//! images):
//!
//! - every scenario of testdata/incremental, its full stream (NAME.p) and
//!   its incremental one (NAME.c against NAME.p), cut right after the first
//!   command, at a command boundary, inside a command at about 1/3 and 2/3
//!   of its commands and inside END: rreceive stops (exit 3, "stopped after
//!   command N"), `--resume-token` gives the point, `rsend --resume TOKEN
//!   NAME` writes the rest (RESUME, the first command, then the original
//!   stream's bytes after the point, byte for byte), and receiving that
//!   gives the snapshot's manifest exactly, `--list` saying complete;
//! - streams cut twice (a resumed stream cut again), and an old token after
//!   the second stop;
//! - `--proto 2 --compressed-data` on every v2 scenario;
//! - what must be refused, with its exit code and message;
//! - SIGTERM and SIGINT stop a receive from a pipe cleanly and it resumes;
//!   after SIGKILL it resumes from its journal, at any command of many
//!   scenarios, on every kind of filesystem (as root);
//! - a resumed stream after a cut at 90% is a small part of the whole.
//!
//! As root rreceive applies owners, devices and capabilities; as an
//! ordinary user it runs with --fake-super and the manifests are compared
//! through what user.rreceive.stat records.

mod common;

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use btrfs_stream::resume::{Digest, Token};
use btrfs_stream::{Command as Cmd, Reader, Writer};
use common::receivers::{manifest_of_tree, rreceive_bin, wait_for, without_xattrs, Receiver};
use common::receivers::{without_nlink, ManifestServer};
use common::scenarios::{self, Manifest};
use common::v2;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `s` with every run of whitespace made one space (messages are matched
/// by their words).
fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The fixture image a test sends from, and a scratch directory beside it.
struct Setup {
    tmp: tempfile::TempDir,
    image: PathBuf,
}

impl Setup {
    fn incremental() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let image = scenarios::decompress_image(tmp.path());
        Setup { tmp, image }
    }

    fn v2() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let image = v2::decompress_image("dev1", tmp.path());
        Setup { tmp, image }
    }

    /// A new empty directory `name` in the scratch directory.
    fn dir(&self, name: &str) -> PathBuf {
        let d = self.tmp.path().join(name);
        std::fs::create_dir(&d).unwrap();
        d
    }

    fn file(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `rsend -d IMAGE ARGS`.
    fn rsend<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-d")
            .arg(&self.image)
            .args(args)
            .output()
            .expect("run rsend")
    }

    /// `rsend -q -d IMAGE -f OUT ARGS`: the stream it wrote.
    fn stream<S: AsRef<OsStr>>(&self, args: &[S], out: &Path) -> Result<Vec<u8>, String> {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rsend"));
        c.arg("-q").arg("-d").arg(&self.image).arg("-f").arg(out);
        c.args(args);
        common::receivers::output_file(&mut c, out)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Immutable and append-only files (chattr_flags) keep the scratch
        // directory from being removed.
        unflag(self.tmp.path());
    }
}

/// Clears the immutable and append-only flags under `p`.
fn unflag(p: &Path) {
    let _ = Command::new("chattr")
        .args(["-R", "-f", "-i", "-a"])
        .arg(p)
        .stderr(Stdio::null())
        .status();
}

/// Removes `p` (a received subvolume) if it is there.
fn remove_tree(p: &Path) {
    if std::fs::symlink_metadata(p).is_ok() {
        unflag(p);
        std::fs::remove_dir_all(p).unwrap_or_else(|e| panic!("rm -rf {}: {e}", p.display()));
    }
}

/// rreceive ARGS, with --fake-super when not root.
fn rreceive<S: AsRef<OsStr>>(args: &[S]) -> Output {
    rreceive_cmd(args).output().expect("run rreceive")
}

thread_local! {
    /// This test's receives go with --fake-super also as root.
    static FAKE_SUPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The number in environment variable `name` (a count or a seed for a
/// longer run by hand), or `default`.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether receives go with --fake-super: as an ordinary user, or when the
/// test asks for it.
fn fake_super() -> bool {
    !is_root() || FAKE_SUPER.with(std::cell::Cell::get)
}

thread_local! {
    /// Receives on this thread flush nothing before a change of a linked or
    /// in-place tree (`RRECEIVE_TEST_NO_WRITE_AHEAD`).
    static NO_WRITE_AHEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Receives on this thread go with --plain (on btrfs: directories, so
    /// that --link and --in-place apply there too).
    static PLAIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// rreceive for `--list` and `--resume-token` (with --plain when this
/// thread's receives go so).
fn rreceive_admin() -> Command {
    let mut c = Command::new(rreceive_bin());
    if PLAIN.with(std::cell::Cell::get) {
        c.arg("--plain");
    }
    c
}

fn rreceive_cmd<S: AsRef<OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(rreceive_bin());
    if fake_super() {
        c.arg("--fake-super");
    }
    if NO_WRITE_AHEAD.with(std::cell::Cell::get) {
        c.env("RRECEIVE_TEST_NO_WRITE_AHEAD", "1");
    }
    if PLAIN.with(std::cell::Cell::get) {
        c.arg("--plain");
    }
    c.args(args);
    c
}

/// `rreceive -f FILE DEST`.
fn receive_file(file: &Path, dest: &Path) -> Output {
    rreceive(&[OsStr::new("-f"), file.as_os_str(), dest.as_os_str()])
}

/// `rreceive --resume-token DEST/NAME`: exit code, stdout (trimmed), stderr.
fn resume_token(sv: &Path) -> (Option<i32>, String, String) {
    let o = rreceive_admin()
        .arg("--resume-token")
        .arg(sv)
        .output()
        .unwrap();
    (
        o.status.code(),
        text(&o.stdout).trim().to_owned(),
        text(&o.stderr),
    )
}

/// The token of `sv`, which must have one.
fn token_of(sv: &Path) -> Result<(String, Token), String> {
    let (code, out, err) = resume_token(sv);
    if code != Some(0) {
        return Err(format!(
            "rreceive --resume-token {}: exit {code:?}: {err}",
            sv.display()
        ));
    }
    let t = out
        .parse::<Token>()
        .map_err(|e| format!("--resume-token printed {out:?}: {e}"))?;
    Ok((out, t))
}

/// The status `rreceive --list DEST` gives `name` (complete, resumable,
/// incomplete), and whether `--list --json` agrees.
fn status_of(dest: &Path, name: &str) -> Result<String, String> {
    let o = rreceive_admin().arg("--list").arg(dest).output().unwrap();
    if !o.status.success() {
        return Err(format!("rreceive --list: {}", text(&o.stderr)));
    }
    let out = text(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.split('\t').next() == Some(name))
        .ok_or_else(|| format!("rreceive --list {} has no {name}: {out:?}", dest.display()))?;
    let status = line.rsplit('\t').next().unwrap_or("").to_owned();
    let o = rreceive_admin()
        .args(["--list", "--json"])
        .arg(dest)
        .output()
        .unwrap();
    let json = text(&o.stdout);
    let v: serde_json::Value = json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["name"] == name)
        .ok_or_else(|| format!("--list --json has no {name}: {json:?}"))?;
    let agrees = match status.as_str() {
        "complete" => v["complete"] == true && v["resumable"] == false,
        "resumable" => v["complete"] == false && v["resumable"] == true,
        "incomplete" => v["complete"] == false && v["resumable"] == false,
        _ => false,
    };
    if !agrees {
        return Err(format!("--list says {status}, --list --json {v}"));
    }
    Ok(status)
}

thread_local! {
    static MANIFESTS: std::cell::RefCell<Option<ManifestServer>> =
        const { std::cell::RefCell::new(None) };
}

/// manifest.py --links of the tree at `dir` (see [`ManifestServer`]).
fn manifest_here(dir: &Path) -> Result<Manifest, String> {
    MANIFESTS.with(|m| {
        m.borrow_mut()
            .get_or_insert_with(ManifestServer::start)
            .of(dir)
    })
}

/// The received tree at `got` against the manifest `want`, as
/// `Receiver::RreceiveExt4.compare_received(want, got, false)` compares an
/// rreceive-ext4 receive (rsend being the sender), with the manifest from
/// [`manifest_here`]; as an ordinary user through what --fake-super
/// recorded.
fn compare(want: &Manifest, got: &Path) -> Result<(), String> {
    if !got.is_dir() {
        return Err(format!("{} was not made", got.display()));
    }
    let have = manifest_here(got)?;
    let (want, have) = if !fake_super() {
        (want.clone(), have)
    } else {
        let user = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        fake_super_view(want, &have, user)
    };
    // A want without link counts (see `without_nlink`) is compared so.
    let have = if want.rows.iter().any(|r| r.split('\t').nth(5) == Some("*")) {
        without_nlink(&have)
    } else {
        have
    };
    let ignore = |x: &str| Receiver::RreceiveExt4.ignores_xattr(x);
    let r = Manifest::difference(
        &without_xattrs(&want, ignore),
        &without_xattrs(&have, ignore),
    );
    r.map_or(Ok(()), Err)
}

/// What an ordinary user's --fake-super receive can give of `want`
/// (symlinks owned by the user, no security.* or trusted.* xattrs), and the
/// tree `have` with the type, mode, owner and device number of each inode
/// taken from its user.rreceive.stat.
fn fake_super_view(want: &Manifest, have: &Manifest, user: (u32, u32)) -> (Manifest, Manifest) {
    let settable = |x: &str| !x.starts_with("security.") && !x.starts_with("trusted.");
    let map = |m: &Manifest, f: &dyn Fn(&mut Vec<String>)| {
        let mut rows: Vec<String> = m
            .rows
            .iter()
            .map(|r| {
                let mut c: Vec<String> = r.split('\t').map(str::to_owned).collect();
                if c.len() >= 13 {
                    f(&mut c);
                }
                c.join("\t")
            })
            .collect();
        rows.sort();
        Manifest {
            rows,
            skipped: m.skipped.clone(),
            links: m.links.clone(),
        }
    };
    let keep_xattrs = |c: &mut Vec<String>| {
        if c[12] != "-" {
            let kept: Vec<&str> = c[12]
                .split(';')
                .filter(|x| settable(x.split('=').next().unwrap_or("")))
                .collect();
            c[12] = if kept.is_empty() {
                "-".into()
            } else {
                kept.join(";")
            };
        }
    };
    let want = map(want, &|c| {
        if c[1] == "lnk" {
            c[3] = user.0.to_string();
            c[4] = user.1.to_string();
        }
        keep_xattrs(c);
    });
    let have = map(have, &|c| {
        let stat = c[12]
            .split(';')
            .find_map(|x| x.strip_prefix("user.rreceive.stat="))
            .map(unhex);
        if let Some(v) = stat {
            let s = text(&v);
            let f: Vec<&str> = s.split(' ').collect();
            if let [mode, dev, owner] = f[..] {
                let mode = u32::from_str_radix(mode, 8).unwrap_or(0);
                let kind = match mode & 0o170000 {
                    0o100000 => "reg",
                    0o040000 => "dir",
                    0o020000 => "chr",
                    0o060000 => "blk",
                    0o010000 => "fifo",
                    0o140000 => "sock",
                    _ => "?",
                };
                c[1] = kind.into();
                c[2] = format!("{:04o}", mode & 0o7777);
                if let Some((u, g)) = owner.split_once(':') {
                    c[3] = u.into();
                    c[4] = g.into();
                }
                if kind != "reg" {
                    c[6] = "-".into();
                    c[9] = "-".into();
                }
                if kind == "chr" || kind == "blk" {
                    c[11] = dev.replace(',', ":");
                }
            }
        }
        keep_xattrs(c);
    });
    (want, have)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}

/// The commands of a stream: where each begins and how long it is.
fn frames(stream: &[u8]) -> Vec<(usize, usize)> {
    let mut r = Reader::from_bytes(stream);
    let mut v = Vec::new();
    while let Some((_, pos)) = r.next_framed().expect("a valid stream") {
        v.push((pos.offset as usize, pos.len as usize));
    }
    v
}

/// The digest a receive that applied the first `n` commands of `stream`
/// records.
fn digest_of(stream: &[u8], n: usize) -> u128 {
    let mut r = Reader::from_bytes(stream);
    let mut d = Digest::default();
    for _ in 0..n {
        let (c, pos) = r.next_framed().unwrap().unwrap();
        let len = match &c {
            Cmd::Write { data, .. } | Cmd::EncodedWrite { data, .. } => data.len() as u64,
            _ => 0,
        };
        d.add(&c, len, pos.version).unwrap();
    }
    d.value()
}

/// What `rsend --resume` must write for `stream` stopped after command `n`
/// (byte `offset`): a resumed stream header, RESUME, the first command,
/// then the stream from `offset` on.
fn expected_resumed(stream: &[u8], n: u64, offset: usize, digest: u128) -> Vec<u8> {
    let version = u32::from_le_bytes(stream[13..17].try_into().unwrap());
    let mut w = Writer::new(Vec::new());
    w.start_resumed_stream(version).unwrap();
    let p = btrfs_stream::resume::Point {
        commands: n,
        offset: offset as u64,
        digest,
    };
    w.write_command(&p.command()).unwrap();
    let mut out = w.into_inner();
    let f = frames(stream);
    out.extend_from_slice(&stream[f[0].0..f[0].0 + f[0].1]);
    out.extend_from_slice(&stream[offset..]);
    out
}

/// One place to cut a stream at: what it is, the byte, and the commands a
/// receive of the cut stream applies.
#[derive(Clone, Debug)]
struct Cut {
    what: &'static str,
    at: usize,
    applied: u64,
}

/// Right after the first command, at a boundary in the middle, inside a
/// command at about 1/3 and 2/3 of the commands, and with `in_end` inside
/// END (those that fall on the same byte once).
fn cuts(stream: &[u8], in_end: bool) -> Vec<Cut> {
    let f = frames(stream);
    let n = f.len();
    assert!(n >= 2, "a stream of {n} commands");
    let inside = |what, i: usize| Cut {
        what,
        at: f[i].0 + f[i].1 / 2,
        applied: i as u64,
    };
    let mut v = vec![
        Cut {
            what: "right after the first command",
            at: f[1].0,
            applied: 1,
        },
        Cut {
            what: "at a command boundary",
            at: f[(n / 2).max(1)].0,
            applied: (n / 2).max(1) as u64,
        },
        inside("inside a command at 1/3", (n / 3).max(1)),
        inside("inside a command at 2/3", (2 * n / 3).max(1)),
    ];
    if in_end {
        v.push(inside("inside END", n - 1));
    }
    // RSEND_RESUME_EVERY_CUT=1: also at and inside every command (at most
    // 200 of them, evenly spread), for hunting.
    if std::env::var_os("RSEND_RESUME_EVERY_CUT").is_some() {
        let step = (n / 200).max(1);
        for i in (1..n).step_by(step) {
            v.push(Cut {
                what: "at a command boundary",
                at: f[i].0,
                applied: i as u64,
            });
            v.push(inside("inside a command", i));
        }
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|c| seen.insert(c.at));
    v
}

/// What a resume needs to know of the send: the snapshot, its manifest and
/// rsend's flags besides `--resume`.
struct Send<'a> {
    snap: &'a str,
    want: &'a Manifest,
    flags: &'a [&'a str],
}

/// Receives `stream` cut at `cut` into `dest`, then resumes it and checks
/// that the result is the snapshot; `scratch` names the stream files.
fn cut_and_resume(
    s: &Setup,
    send: &Send<'_>,
    stream: &[u8],
    cut: &Cut,
    dest: &Path,
    scratch: &str,
) -> Result<u64, String> {
    cut_and_resume_rx(s, send, stream, cut, dest, scratch, &[])
}

/// [`cut_and_resume`] with rreceive options `rx` for the cut stream (the
/// resumed one goes without them).
fn cut_and_resume_with(
    s: &Setup,
    send: &Send<'_>,
    stream: &[u8],
    cut: &Cut,
    dest: &Path,
    scratch: &str,
    rx: &[&str],
) -> Result<(), String> {
    cut_and_resume_rx(s, send, stream, cut, dest, scratch, rx).map(drop)
}

fn cut_and_resume_rx(
    s: &Setup,
    send: &Send<'_>,
    stream: &[u8],
    cut: &Cut,
    dest: &Path,
    scratch: &str,
    rx: &[&str],
) -> Result<u64, String> {
    let name = send.snap;
    let sv = dest.join(name);
    remove_tree(&sv);
    let cut_file = s.file(&format!("{scratch}.cut"));
    std::fs::write(&cut_file, &stream[..cut.at]).unwrap();
    let mut args: Vec<&OsStr> = rx.iter().map(OsStr::new).collect();
    args.extend([OsStr::new("-f"), cut_file.as_os_str(), dest.as_os_str()]);
    let o = rreceive(&args);
    let err = text(&o.stderr);
    if o.status.code() != Some(3) {
        return Err(format!("the cut stream: exit {:?}, not 3: {err}", o.status));
    }
    let said = format!(
        "rreceive: subvolume {} stopped after command {};",
        sv.display(),
        cut.applied
    );
    let how = format!("--resume \"$(rreceive --resume-token {})\"", sv.display());
    if !err.contains(&said) || !err.contains(&how) {
        return Err(format!("the cut stream: no {said:?} ... {how:?} in: {err}"));
    }
    match status_of(dest, name)?.as_str() {
        "resumable" => {}
        st => return Err(format!("after the cut, --list says {st}")),
    }
    let (token, t) = token_of(&sv)?;
    let offset = frames(stream)
        .get(cut.applied as usize)
        .map_or(stream.len(), |f| f.0);
    let digest = digest_of(stream, cut.applied as usize);
    if t.point.commands != cut.applied
        || t.point.offset != offset as u64
        || t.point.digest != digest
    {
        return Err(format!(
            "token {token}: want command {} byte {offset} digest {digest:032x}",
            cut.applied
        ));
    }
    let resumed = s.file(&format!("{scratch}.resumed"));
    let _ = std::fs::remove_file(&resumed);
    let mut args: Vec<&OsStr> = send.flags.iter().map(OsStr::new).collect();
    args.extend([
        OsStr::new("--resume"),
        OsStr::new(&token),
        OsStr::new("-f"),
        resumed.as_os_str(),
        OsStr::new(name),
    ]);
    let o = s.rsend(&args);
    let err = text(&o.stderr);
    if !o.status.success() {
        return Err(format!("rsend --resume {token}: {}: {err}", o.status));
    }
    let bytes = std::fs::read(&resumed).unwrap();
    let said = format!(
        "after command {} (byte {offset}): {} bytes written",
        cut.applied,
        bytes.len()
    );
    if !err.contains(&format!("rsend: resumed {name} (subvolume ")) || !err.contains(&said) {
        return Err(format!("rsend --resume: no {said:?} in: {err}"));
    }
    if bytes != expected_resumed(stream, cut.applied, offset, digest) {
        return Err(format!(
            "the resumed stream ({} bytes) is not RESUME, the first command and bytes {offset}.. \
             of the stream ({} bytes)",
            bytes.len(),
            stream.len()
        ));
    }
    receive_to_the_end(&resumed, dest, send, "the resumed stream")?;
    let (code, _, why) = resume_token(&sv);
    if code != Some(1) || !why.contains("is complete: there is nothing to resume") {
        return Err(format!(
            "--resume-token of the completed one: {code:?} {why}"
        ));
    }
    let left: Vec<String> = std::fs::read_dir(dest)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".rreceive-resume"))
        .collect();
    if !left.is_empty() {
        return Err(format!("left in DEST after END: {left:?}"));
    }
    Ok(bytes.len() as u64)
}

/// Receives the resumed stream in `file` into `dest`: it must complete
/// `send`'s snapshot exactly, and `--list` say so.
fn receive_to_the_end(file: &Path, dest: &Path, send: &Send<'_>, what: &str) -> Result<(), String> {
    let o = receive_file(file, dest);
    if !o.status.success() {
        return Err(format!(
            "receiving {what}: {}: {}",
            o.status,
            text(&o.stderr)
        ));
    }
    compare(send.want, &dest.join(send.snap))?;
    match status_of(dest, send.snap)?.as_str() {
        "complete" => Ok(()),
        st => Err(format!("after {what}, --list says {st}")),
    }
}

/// Receives the whole `stream` of `name` into `dest` afresh. A parent is
/// received so before its incrementals and not read afterwards: reading a
/// directory (manifest.py) sets its atime on a relatime mount, and a copy
/// of the parent would carry that time into the snapshot.
fn receive_whole(s: &Setup, stream: &[u8], dest: &Path, name: &str) -> Result<(), String> {
    remove_tree(&dest.join(name));
    let file = s.file(&format!("whole-{name}.stream"));
    std::fs::write(&file, stream).unwrap();
    let o = receive_file(&file, dest);
    let _ = std::fs::remove_file(&file);
    // An xattr this filesystem cannot hold is skipped (and named): the
    // copy cannot equal the snapshot here.
    if o.status.success() && !xattr_too_large(&text(&o.stderr)) {
        Ok(())
    } else {
        Err(format!("receiving {name} whole: {}", text(&o.stderr)))
    }
}

/// Runs `job` on each of `items` on two threads; the failures.
fn on_two_threads<T: Sync>(
    items: &[T],
    job: impl Fn(usize, &T) -> Vec<String> + Sync,
) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for worker in 0..2 {
            let (next, failures, job) = (&next, &failures, &job);
            sc.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let f = job(worker, item);
                failures.lock().unwrap().extend(f);
            });
        }
    });
    failures.into_inner().unwrap()
}

/// [`compare`] is `compare_received`: on two receives of the same stream
/// (a tree is read once: reading a directory sets its atime), the
/// manifest driver gives what manifest.py gives, and both comparisons
/// agree, on a match and on a difference.
#[test]
fn the_manifest_driver_gives_what_manifest_py_gives() {
    let s = Setup::incremental();
    for snap in [
        "special_files_replaced.c",
        "hardlinks_added.c",
        "xattrs_set_changed_removed.c",
    ] {
        let stream = s.stream(&[snap], &s.file("m.stream")).unwrap();
        let dests: Vec<PathBuf> = (0..4).map(|i| s.dir(&format!("{i}-{snap}"))).collect();
        for d in &dests {
            receive_whole(&s, &stream, d, snap).unwrap();
        }
        let want = Manifest::committed(snap);
        let a = &dests[0];
        let (c, d) = (dests[2].join(snap), dests[3].join(snap));
        assert_eq!(manifest_here(&c).unwrap(), manifest_of_tree(&d), "{snap}");
        assert_eq!(compare(&want, &a.join(snap)), Ok(()), "{snap}");
        if is_root() {
            // As an ordinary user compare_received cannot match (owners,
            // devices): compare goes through --fake-super's records.
            let theirs =
                Receiver::RreceiveExt4.compare_received(&want, &dests[1].join(snap), false);
            assert_eq!(theirs, Ok(None), "{snap}");
        }
        // Another snapshot's manifest differs both ways.
        let other = Manifest::committed("new_files.c");
        assert!(compare(&other, &a.join(snap)).is_err());
    }
}

/// Whether the receive skipped an xattr this filesystem cannot hold at
/// that size (ext4 without ea_inode: btrfs_053's xattrs).
fn xattr_too_large(e: &str) -> bool {
    e.contains("(too large for this filesystem)")
}

#[test]
fn every_scenario_cut_anywhere_resumes_to_the_snapshot() {
    let s = Setup::incremental();
    let names = scenarios::names();
    let cuts_done = AtomicUsize::new(0);
    let resumed_bytes = AtomicUsize::new(0);
    let skipped = Mutex::new(Vec::new());
    let failures = on_two_threads(&names, |worker, n| {
        let mut failures = Vec::new();
        let scratch = format!("w{worker}");
        let out = s.file(&format!("{scratch}.stream"));
        let (p, c) = (format!("{n}.p"), format!("{n}.c"));
        let full = s.stream(&[&p], &out);
        let incr = s.stream(&["-p", &p, &c], &out);
        let (full, incr) = match (full, incr) {
            (Ok(f), Ok(i)) => (f, i),
            (Err(e), _) | (_, Err(e)) => return vec![format!("{n}: {e}")],
        };
        // The parent, received whole and never read (see receive_whole),
        // and the child once whole: a receive that cannot be done here at
        // all is no test of resuming.
        let dest = s.dir(&format!("incr-{n}"));
        let whole =
            receive_whole(&s, &full, &dest, &p).and_then(|()| receive_whole(&s, &incr, &dest, &c));
        match whole {
            Err(e) if xattr_too_large(&e) => {
                skipped.lock().unwrap().push(n.clone());
                unflag(&dest);
                let _ = std::fs::remove_dir_all(&dest);
                return Vec::new();
            }
            Err(e) => return vec![format!("{n}: {e}")],
            Ok(()) => remove_tree(&dest.join(&c)),
        }
        let full_dest = s.dir(&format!("full-{n}"));
        let (want_p, want_c) = (Manifest::committed(&p), Manifest::committed(&c));
        let sends = [
            (
                vec![p.as_str()],
                &full,
                &full_dest,
                Send {
                    snap: &p,
                    want: &want_p,
                    flags: &[],
                },
            ),
            (
                vec!["-p", &p, &c],
                &incr,
                &dest,
                Send {
                    snap: &c,
                    want: &want_c,
                    flags: &[],
                },
            ),
        ];
        // Every fourth scenario is also cut inside END.
        let in_end = names.iter().position(|x| x == n).unwrap_or(0) % 4 == 0;
        for (args, stream, dest, send) in &sends {
            for cut in cuts(stream, in_end) {
                match cut_and_resume(&s, send, stream, &cut, dest, &scratch) {
                    Ok(b) => {
                        cuts_done.fetch_add(1, Ordering::Relaxed);
                        resumed_bytes.fetch_add(b as usize, Ordering::Relaxed);
                    }
                    Err(e) => failures.push(format!(
                        "rsend {} cut {} (byte {} of {}, after command {}): {e}",
                        args.join(" "),
                        cut.what,
                        cut.at,
                        stream.len(),
                        cut.applied
                    )),
                }
            }
        }
        for d in [&dest, &full_dest] {
            unflag(d);
            let _ = std::fs::remove_dir_all(d);
        }
        failures
    });
    let skipped = skipped.into_inner().unwrap();
    println!(
        "{} scenarios: {} cut streams resumed ({} bytes of resumed streams); skipped, as \
         this filesystem cannot hold their xattrs: {skipped:?}",
        names.len() - skipped.len(),
        cuts_done.load(Ordering::Relaxed),
        resumed_bytes.load(Ordering::Relaxed)
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(skipped.len() <= 1, "skipped {skipped:?}");
}

/// A resumed stream cut again: the second stop is resumed with the second
/// token; the first one is refused by then.
fn cut_twice(s: &Setup, args: &[&str], send: &Send<'_>, dest: &Path) -> Result<(), String> {
    if let Some(p) = args.iter().position(|a| *a == "-p").map(|i| args[i + 1]) {
        let whole = s.stream(&[p], &s.file("twice.parent"))?;
        receive_whole(s, &whole, dest, p)?;
    }
    let name = send.snap;
    let sv = dest.join(name);
    remove_tree(&sv);
    let out = s.file("twice.stream");
    let stream = s.stream(args, &out)?;
    let f = frames(&stream);
    let first = (f.len() / 3).max(1);
    let cut_file = s.file("twice.cut");
    std::fs::write(&cut_file, &stream[..f[first].0 + f[first].1 / 2]).unwrap();
    let o = receive_file(&cut_file, dest);
    if o.status.code() != Some(3) {
        return Err(format!("first cut: {}: {}", o.status, text(&o.stderr)));
    }
    let (t1, p1) = token_of(&sv)?;
    let mut resume_args: Vec<&str> = send.flags.to_vec();
    resume_args.extend(["--resume", &t1, name]);
    let r1 = s.stream(&resume_args, &out)?;
    // Cut the resumed stream inside a command halfway through what it adds.
    let rf = frames(&r1);
    if rf.len() < 4 {
        return Err(format!("the resumed stream has only {} commands", rf.len()));
    }
    let k = 2 + (rf.len() - 2) / 2;
    std::fs::write(&cut_file, &r1[..rf[k].0 + rf[k].1 / 2]).unwrap();
    let o = receive_file(&cut_file, dest);
    let second = p1.point.commands + (k as u64 - 2);
    let said = format!("stopped after command {second};");
    if o.status.code() != Some(3) || !text(&o.stderr).contains(&said) {
        return Err(format!(
            "second cut: {}: no {said:?} in: {}",
            o.status,
            text(&o.stderr)
        ));
    }
    let (t2, p2) = token_of(&sv)?;
    if p2.point.commands != second || p2.point.offset != f[second as usize].0 as u64 {
        return Err(format!("second token {t2}: want command {second}"));
    }
    // The first token's stream, from a pipe, now continues from the wrong
    // place (a stream file read again goes on from itself:
    // stream_resume.rs).
    let mut child = piped_receive(dest);
    match child.stdin.take().unwrap().write_all(&r1) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.unwrap(),
    }
    let o = child.wait_with_output().unwrap();
    let err = words(&text(&o.stderr));
    let why = format!(
        "cannot resume: subvolume {name} in {}: it stopped after command {second}",
        dest.display()
    );
    if o.status.code() != Some(1)
        || !err.contains(&why)
        || !err.contains("ask rreceive --resume-token again")
    {
        return Err(format!("the old token's stream: {}: {err}", o.status));
    }
    if token_of(&sv)?.0 != t2 {
        return Err("refusing the old token's stream changed the token".into());
    }
    let mut resume_args: Vec<&str> = send.flags.to_vec();
    resume_args.extend(["--resume", &t2, name]);
    let r2 = s.stream(&resume_args, &out)?;
    let want = expected_resumed(&stream, second, f[second as usize].0, p2.point.digest);
    if r2 != want {
        return Err("the second resumed stream is not the original's rest".into());
    }
    let stale = s.file("twice.stale");
    std::fs::write(&stale, &r2).unwrap();
    receive_to_the_end(&stale, dest, send, "the second resumed stream")
}

#[test]
fn a_resumed_stream_cut_again_resumes_with_the_new_token_only() {
    let s = Setup::incremental();
    let mut failures = Vec::new();
    let mut done = 0;
    for n in [
        "btrfs_007_seeded_random_ops",
        "many_files_one_dir",
        "rename_cycle_dirs",
        "hardlinks_renamed_across_dirs",
        "btrfs_033_backwards_direct_writes",
    ] {
        if !scenarios::names().iter().any(|x| x == n) {
            continue;
        }
        let dest = s.dir(&format!("twice-{n}"));
        let (p, c) = (format!("{n}.p"), format!("{n}.c"));
        let (wp, wc) = (Manifest::committed(&p), Manifest::committed(&c));
        let full = Send {
            snap: &p,
            want: &wp,
            flags: &[],
        };
        let incr = Send {
            snap: &c,
            want: &wc,
            flags: &[],
        };
        for (args, send) in [(vec![p.as_str()], &full), (vec!["-p", &p, &c], &incr)] {
            match cut_twice(&s, &args, send, &dest) {
                Ok(()) => done += 1,
                Err(e) => failures.push(format!("{n}: rsend {}: {e}", args.join(" "))),
            }
        }
    }
    println!("{done} streams cut twice and resumed twice");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Inode flags rreceive keeps on ext4 (sync, immutable, append, nodump,
/// noatime).
const EXT4_FLAGS: u32 = 0x8 | 0x10 | 0x20 | 0x40 | 0x80;

/// The flags of `path` within [`EXT4_FLAGS`] (lsattr).
fn flags_at(path: &Path) -> Option<u32> {
    let out = Command::new("lsattr").arg("-d").arg(path).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let letters = [
        ('S', 0x8),
        ('i', 0x10),
        ('a', 0x20),
        ('d', 0x40),
        ('A', 0x80),
    ];
    let t = text(&out.stdout);
    let field = t.split_whitespace().next()?;
    Some(
        letters
            .iter()
            .filter(|(l, _)| field.contains(*l))
            .map(|(_, v)| v)
            .sum(),
    )
}

/// Inodes of `scenario` whose flags (within [`EXT4_FLAGS`]) changed
/// between the snapshots must have the child's at `got`, as v2_kernel.rs
/// checks them.
fn check_flags(scenario: &str, got: &Path) -> Result<usize, String> {
    let (p, c) = (
        v2::flags(&format!("{scenario}.p")),
        v2::flags(&format!("{scenario}.c")),
    );
    let mut n = 0;
    for (path, want) in &c {
        let Some(want) = want.map(|w| w & EXT4_FLAGS) else {
            continue;
        };
        if p.get(path).copied().flatten().map(|b| b & EXT4_FLAGS) == Some(want) {
            continue;
        }
        let rel = text(&unhex(path));
        let at = if rel == "." {
            got.to_path_buf()
        } else {
            got.join(&rel)
        };
        let have = flags_at(&at);
        if have != Some(want) {
            return Err(format!(
                "{}: flags {have:x?}, the snapshot's {want:x}",
                at.display()
            ));
        }
        n += 1;
    }
    Ok(n)
}

#[test]
fn compressed_data_streams_of_every_v2_scenario_resume() {
    let s = Setup::v2();
    let flags = ["--proto", "2", "--compressed-data"];
    let mut failures = Vec::new();
    let mut done = 0;
    let mut flags_checked = 0;
    for n in v2::scenarios() {
        let dest = s.dir(&format!("v2-{n}"));
        let (p, c) = (format!("{n}.p"), format!("{n}.c"));
        let (wp, wc) = (v2::manifest(&p), v2::manifest(&c));
        for (kind, snap, want) in [("full", &p, &wp), ("incr", &c, &wc)] {
            let args = v2::send_args(&flags, &n, kind);
            let out = s.file("v2.stream");
            let stream = match s.stream(&args, &out) {
                Ok(st) => st,
                Err(e) => {
                    failures.push(format!("{n} {kind}: {e}"));
                    continue;
                }
            };
            let send = Send {
                snap,
                want,
                flags: &flags,
            };
            if kind == "incr" {
                let whole = s
                    .stream(&[&p], &out)
                    .and_then(|w| receive_whole(&s, &w, &dest, &p));
                if let Err(e) = whole {
                    failures.push(format!("{n}: {e}"));
                    continue;
                }
            }
            let f = frames(&stream);
            // Inside a command halfway, and inside the first ENCODED_WRITE.
            let mut at = vec![f.len() / 2];
            let mut r = Reader::from_bytes(&stream[..]);
            let mut i = 0;
            while let Some((c, _)) = r.next_framed().unwrap() {
                if matches!(c, Cmd::EncodedWrite { .. }) {
                    at.push(i);
                    break;
                }
                i += 1;
            }
            at.sort();
            at.dedup();
            for i in at.into_iter().filter(|&i| i >= 1) {
                let cut = Cut {
                    what: "inside a command",
                    at: f[i].0 + f[i].1 / 2,
                    applied: i as u64,
                };
                let r = cut_and_resume(&s, &send, &stream, &cut, &dest, "v2").and_then(|_| {
                    if is_root() && kind == "incr" {
                        flags_checked += check_flags(&n, &dest.join(snap))?;
                    }
                    Ok(())
                });
                match r {
                    Ok(()) => done += 1,
                    Err(e) => failures.push(format!(
                        "{n}: rsend {} cut inside command {i} of {}: {e}",
                        args.join(" "),
                        f.len()
                    )),
                }
            }
        }
        unflag(&dest);
    }
    println!(
        "{done} --compressed-data streams cut and resumed; flags of {flags_checked} inodes checked"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// SIGKILL of rreceive right after an ENCODED_WRITE that joined a run of
/// them decompressed on other threads (off btrfs), before the ones before
/// it may be written: the journal counts none of a run applied until it
/// is waited for, so each receive resumes to the exact snapshot.
#[test]
fn compressed_data_streams_killed_inside_a_run_of_encoded_writes_resume() {
    let s = Setup::v2();
    let flags = ["--proto", "2", "--compressed-data"];
    let mut failures = Vec::new();
    let mut done = 0;
    for n in v2::scenarios() {
        let p = format!("{n}.p");
        let wp = v2::manifest(&p);
        let args = v2::send_args(&flags, &n, "full");
        let stream = match s.stream(&args, &s.file("v2.stream")) {
            Ok(st) => st,
            Err(e) => {
                failures.push(format!("{n}: {e}"));
                continue;
            }
        };
        // Commands (1 = SUBVOL) that are an ENCODED_WRITE to the same file
        // as the one before.
        let mut at = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        let mut r = Reader::from_bytes(&stream[..]);
        let mut i = 0;
        while let Some((c, _)) = r.next_framed().unwrap() {
            i += 1;
            last = match c {
                Cmd::EncodedWrite { path, .. } => {
                    if last.as_deref() == Some(path) {
                        at.push(i);
                    }
                    Some(path.to_vec())
                }
                _ => None,
            };
        }
        let send = Send {
            snap: &p,
            want: &wp,
            flags: &flags,
        };
        for (k, &a) in at.iter().take(2).enumerate() {
            let dest = s.dir(&format!("v2-run-{n}-{k}"));
            match kill_and_resume(&s, &send, &stream, &dest, a, 1) {
                Ok(()) => done += 1,
                Err(e) => failures.push(format!("{n}: killed after command {a}: {e}")),
            }
            unflag(&dest);
            remove_tree(&dest);
        }
    }
    println!("{done} receives killed inside a run of ENCODED_WRITEs and resumed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(done > 0, "no scenario has a run of ENCODED_WRITEs");
}

/// A receive of `snap`'s stream stopped in the middle, in `dest`: the
/// stream, and the token.
fn stopped(s: &Setup, args: &[&str], snap: &str, dest: &Path) -> (Vec<u8>, String) {
    let stream = s.stream(args, &s.file("stopped.stream")).unwrap();
    let f = frames(&stream);
    let i = f.len() / 2;
    let cut = s.file("stopped.cut");
    std::fs::write(&cut, &stream[..f[i].0 + f[i].1 / 2]).unwrap();
    let o = receive_file(&cut, dest);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let (token, _) = token_of(&dest.join(snap)).unwrap();
    (stream, token)
}

/// `o` failed with exit code `code` and said `what` (words compared).
fn assert_fails(o: &Output, code: i32, what: &str, context: &str) {
    let err = words(&text(&o.stderr));
    assert_eq!(o.status.code(), Some(code), "{context}: {err}");
    assert!(err.contains(what), "{context}: {what:?} not in: {err}");
}

#[test]
fn rsend_refuses_a_resume_that_would_not_continue_the_stream() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let snap = "changed_files.c";
    let (_, token) = stopped(&s, &[snap], snap, &dest);
    let out = s.file("out.stream");
    let run = |args: &[&str]| {
        let _ = std::fs::remove_file(&out);
        let mut a = vec!["-q", "-f", out.to_str().unwrap()];
        a.extend_from_slice(args);
        s.rsend(&a)
    };
    let o = run(&["--resume", &token, "--proto", "2", snap]);
    assert_fails(
        &o,
        1,
        "cannot resume: the stream received before is protocol version 1, and --proto 2 was given",
        "a v1 token with --proto 2",
    );
    assert!(
        !out.exists(),
        "--proto 2 with a v1 token wrote {}",
        out.display()
    );
    let mismatch = "cannot resume: the stream this send makes is not the one received before";
    let o = run(&["--resume", &token, "--no-data", snap]);
    assert_fails(&o, 1, mismatch, "--resume with --no-data");
    // -c makes the full send an incremental one against changed_files.p;
    // how the refusal explains it: dry_run_... below.
    let o = run(&["--resume", &token, "-c", "changed_files.p", snap]);
    assert_fails(&o, 1, "cannot resume: ", "--resume with -c");
    let o = run(&["--resume", &token, "new_files.c"]);
    assert_fails(
        &o,
        1,
        "cannot resume: the token is for the snapshot with uuid",
        "the token of another snapshot",
    );
    let o = run(&["--resume", &token, "-p", "changed_files.p", snap]);
    assert_fails(
        &o,
        1,
        "cannot resume: the stream received before was a full one, and -p changed_files.p",
        "-p with a full stream's token",
    );
    let o = run(&["--resume", &token, snap, "new_files.c"]);
    assert_fails(
        &o,
        1,
        "--resume continues one stream: give exactly one SUBVOL",
        "two subvolumes",
    );
    // A token whose digest was changed.
    let mut t: Token = token.parse().unwrap();
    t.point.digest ^= 1;
    let o = run(&["--resume", &t.to_string(), snap]);
    assert_fails(&o, 1, mismatch, "a token with another digest");
    // Malformed tokens are usage errors.
    for bad in [
        "garbage",
        "rsend1:x",
        &token[..token.len() - 1],
        &token.replace(":1:", ":x:"),
    ] {
        let o = run(&["--resume", bad, snap]);
        assert_fails(
            &o,
            2,
            "--resume: not a resume token",
            &format!("token {bad:?}"),
        );
        assert!(!out.exists());
    }
    // The same token still resumes.
    let o = run(&["--resume", &token, snap]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn an_incremental_token_names_its_parent() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let n = "changed_files";
    let full = s.stream(&[format!("{n}.p")], &s.file("p.stream")).unwrap();
    std::fs::write(s.file("p.stream"), &full).unwrap();
    let o = receive_file(&s.file("p.stream"), &dest);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (p, c) = (format!("{n}.p"), format!("{n}.c"));
    let (stream, token) = stopped(&s, &["-p", &p, &c], &c, &dest);
    let t: Token = token.parse().unwrap();
    let parent = t.parent.expect("an incremental token names the parent");
    match Reader::from_bytes(&stream[..]).next_command().unwrap() {
        Some(Cmd::Snapshot {
            clone_uuid,
            clone_ctransid,
            ..
        }) => assert_eq!((clone_uuid, clone_ctransid), parent),
        other => panic!("first command {other:?}"),
    }
    let out = s.file("out.stream");
    let without = s.stream(&["--resume", &token, &c], &out).unwrap();
    let with = s.stream(&["--resume", &token, "-p", &p, &c], &out).unwrap();
    assert_eq!(without, with, "-p of the token's parent changes nothing");
    let o = s.rsend(&["-q", "--resume", &token, "-p", "new_files.p", &c]);
    assert_fails(
        &o,
        1,
        "cannot resume: the stream received before was against the parent with uuid",
        "-p of another parent",
    );
    std::fs::write(&out, &without).unwrap();
    let o = receive_file(&out, &dest);
    assert!(o.status.success(), "{}", text(&o.stderr));
    compare(&Manifest::committed(&c), &dest.join(&c)).unwrap();
}

#[test]
fn rreceive_refuses_what_does_not_continue_the_subvolume() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let snap = "changed_files.c";
    let sv = dest.join(snap);
    let (stream, token) = stopped(&s, &[snap], snap, &dest);
    let t: Token = token.parse().unwrap();
    let resumed = s.file("resumed.stream");
    let r = s.stream(&["--resume", &token, snap], &resumed).unwrap();
    std::fs::write(&resumed, &r).unwrap();

    // Into a fresh DEST: nothing to continue, nothing made.
    let fresh = s.dir("fresh");
    let o = receive_file(&resumed, &fresh);
    assert_fails(
        &o,
        1,
        &format!(
            "cannot resume: {} holds no incomplete subvolume {snap} received by rreceive",
            fresh.display()
        ),
        "a resumed stream into a fresh DEST",
    );
    assert_eq!(
        std::fs::read_dir(&fresh).unwrap().count(),
        0,
        "fresh DEST changed"
    );

    // The whole stream again from a pipe onto the stopped one: refused,
    // still resumable (a stream file read again resumes from itself:
    // stream_resume.rs).
    let mut child = piped_receive(&dest);
    match child.stdin.take().unwrap().write_all(&stream) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.unwrap(),
    }
    let o = child.wait_with_output().unwrap();
    assert_fails(
        &o,
        1,
        &format!(
            "subvolume {snap} in {} is incomplete: an earlier receive stopped after command {} (byte {}). Resume it with rsend --resume",
            dest.display(),
            t.point.commands,
            t.point.offset
        ),
        "the whole stream onto a stopped receive",
    );
    assert_eq!(
        token_of(&sv).unwrap().0,
        token,
        "the refusal changed the token"
    );

    // --resume-token of what is not there or not received.
    let (code, _, err) = resume_token(&dest.join("missing"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    std::fs::create_dir(dest.join("plain")).unwrap();
    let (code, _, err) = resume_token(&dest.join("plain"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is not a subvolume rreceive received"),
        "{err}"
    );

    // Completed: the resumed stream again, and --resume-token.
    let o = receive_file(&resumed, &dest);
    assert!(o.status.success(), "{}", text(&o.stderr));
    compare(&Manifest::committed(snap), &sv).unwrap();
    let o = receive_file(&resumed, &dest);
    assert_fails(
        &o,
        1,
        &format!(
            "cannot resume: subvolume {snap} in {}: it is complete",
            dest.display()
        ),
        "a resumed stream onto a complete subvolume",
    );
    let (code, _, err) = resume_token(&sv);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is complete: there is nothing to resume"),
        "{err}"
    );
    assert_eq!(status_of(&dest, snap).unwrap(), "complete");
}

#[test]
fn what_cannot_be_resumed_says_why() {
    let s = Setup::incremental();
    let n = "changed_files";
    let p = format!("{n}.p");
    let stream = s.stream(&[&p], &s.file("p.stream")).unwrap();
    // Cut inside the first command: no subvolume at all.
    let dest = s.dir("dest");
    let cut = s.file("cut.stream");
    let first = frames(&stream)[0];
    std::fs::write(&cut, &stream[..first.0 + first.1 / 2]).unwrap();
    let o = receive_file(&cut, &dest);
    // A cut can be mended: exit 3, though with nothing to resume.
    assert_fails(
        &o,
        3,
        "nothing of it was kept; this can succeed later: receive the same stream again",
        "a cut in the first command",
    );
    assert!(
        !text(&o.stderr).contains("stopped after"),
        "{}",
        text(&o.stderr)
    );
    let (code, _, err) = resume_token(&dest.join(&p));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("does not exist"), "{err}");
}

/// rreceive into `dest` reading a pipe (its stdin) and its stderr piped.
fn piped_receive(dest: &Path) -> Child {
    rreceive_cmd(&[dest.as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// rreceive into `dest` from a pipe fed the first half of `stream`; once
/// it holds the subvolume `name`, signal `sig` (a `kill` option); its exit
/// status, stderr and the commands it was given whole.
fn signalled_receive(
    stream: &[u8],
    dest: &Path,
    name: &str,
    sig: &str,
) -> (std::process::ExitStatus, String, u64) {
    let mut child = piped_receive(dest);
    let half = stream.len() / 2;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&stream[..half]).unwrap();
    stdin.flush().unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !dest.join(name).exists() {
        assert!(Instant::now() < until, "rreceive made no {name} in 20s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let it apply what it was given; it then waits for more.
    std::thread::sleep(Duration::from_millis(500));
    let st = Command::new("kill")
        .arg(sig)
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill {sig}");
    let status = wait_for(&mut child, 30);
    drop(stdin);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let whole = frames(stream).iter().filter(|(o, l)| o + l <= half).count() as u64;
    (status, err, whole)
}

/// The scenario whose full stream the signal tests receive (about 1 MB).
const BIG: &str = "btrfs_007_seeded_random_ops.p";

#[test]
fn sigterm_and_sigint_stop_a_piped_receive_cleanly_and_it_resumes() {
    let s = Setup::incremental();
    let stream = s.stream(&[BIG], &s.file("big.stream")).unwrap();
    for (sig, name) in [("-TERM", "SIGTERM"), ("-INT", "SIGINT")] {
        let dest = s.dir(&format!("dest{sig}"));
        let (status, err, whole) = signalled_receive(&stream, &dest, BIG, sig);
        assert_eq!(status.code(), Some(3), "{name}: {status}: {err}");
        assert!(err.contains(&format!("stopped by {name}")), "{name}: {err}");
        assert_eq!(status_of(&dest, BIG).unwrap(), "resumable", "{name}");
        let (token, t) = token_of(&dest.join(BIG)).unwrap();
        assert!(
            t.point.commands >= 1 && t.point.commands <= whole,
            "{name}: stopped after command {}, {whole} were given whole",
            t.point.commands
        );
        assert!(
            err.contains(&format!("stopped after command {};", t.point.commands)),
            "{name}: {err}"
        );
        let resumed = s.file("big.resumed");
        let r = s.stream(&["--resume", &token, BIG], &resumed).unwrap();
        let offset = t.point.offset as usize;
        assert_eq!(
            r,
            expected_resumed(&stream, t.point.commands, offset, t.point.digest),
            "{name}: the resumed stream"
        );
        std::fs::write(&resumed, &r).unwrap();
        let o = receive_file(&resumed, &dest);
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        compare(&Manifest::committed(BIG), &dest.join(BIG)).unwrap();
        assert_eq!(status_of(&dest, BIG).unwrap(), "complete");
        println!(
            "{name} after {} of {} commands; resumed with {} of {} bytes",
            t.point.commands,
            frames(&stream).len(),
            r.len(),
            stream.len()
        );
    }
}

#[test]
fn after_sigkill_the_receive_resumes_from_its_journal() {
    use std::os::unix::process::ExitStatusExt;
    let s = Setup::incremental();
    let stream = s.stream(&[BIG], &s.file("big.stream")).unwrap();
    let dest = s.dir("dest");
    let (status, err, whole) = signalled_receive(&stream, &dest, BIG, "-KILL");
    assert_eq!(status.signal(), Some(9), "{status}: {err}");
    assert_eq!(status_of(&dest, BIG).unwrap(), "resumable");
    let (token, t) = token_of(&dest.join(BIG)).unwrap();
    assert!(
        t.point.commands >= 1 && t.point.commands <= whole,
        "the journal's point {} is past the {whole} commands given whole",
        t.point.commands
    );
    let resumed = s.file("big.resumed");
    let r = s.stream(&["--resume", &token, BIG], &resumed).unwrap();
    std::fs::write(&resumed, &r).unwrap();
    let o = rreceive(&[
        OsStr::new("-v"),
        OsStr::new("-f"),
        resumed.as_os_str(),
        dest.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("resuming after a kill: commands up to"),
        "{}",
        text(&o.stderr)
    );
    compare(&Manifest::committed(BIG), &dest.join(BIG)).unwrap();
    assert_eq!(status_of(&dest, BIG).unwrap(), "complete");
}

/// A journal only holds for this boot's page cache: one from another boot
/// (a power cut, a reboot) is refused, and says why.
#[test]
fn a_journal_from_another_boot_is_not_resumed() {
    let s = Setup::incremental();
    let stream = s.stream(&[BIG], &s.file("big.stream")).unwrap();
    let dest = s.dir("dest");
    let file = s.file("big.whole");
    std::fs::write(&file, &stream).unwrap();
    let jdir = s.dir("journals");
    let n = frames(&stream).len() / 2;
    // No durable checkpoint either (with one, a receive whose journal is
    // refused resumes from it: see the power-cut test).
    let o = rreceive_cmd(&[
        OsStr::new("--no-durable"),
        OsStr::new("-f"),
        file.as_os_str(),
        dest.as_os_str(),
    ])
    .env("RRECEIVE_TEST_KILL", format!("{n}:0"))
    .env("RRECEIVE_JOURNAL_DIR", &jdir)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), None, "{}", text(&o.stderr));
    let journal = std::fs::read_dir(&jdir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut j = std::fs::read(&journal).unwrap();
    j[8] ^= 0xff; // the boot id
    std::fs::write(&journal, &j).unwrap();
    let o = Command::new(rreceive_bin())
        .arg("--resume-token")
        .arg(dest.join(BIG))
        .env("RRECEIVE_JOURNAL_DIR", &jdir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        words(&text(&o.stderr)).contains(
            "is incomplete and not resumable: the system went down since (its journal is from another boot)"
        ),
        "{}",
        text(&o.stderr)
    );
}

/// A journal directory is this user's alone: one others can write is
/// closed first, and one of another user's is not used (the receive goes
/// on without a journal).
#[test]
fn a_journal_directory_is_this_users_alone() {
    use std::os::unix::fs::PermissionsExt;
    let s = Setup::incremental();
    let stream = s.stream(&[BIG], &s.file("big.stream")).unwrap();
    let dest = s.dir("dest");
    let file = s.file("big.whole");
    std::fs::write(&file, &stream).unwrap();
    let jdir = s.dir("journals");
    std::fs::set_permissions(&jdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let n = frames(&stream).len() / 2;
    let o = rreceive_cmd(&[OsStr::new("-f"), file.as_os_str(), dest.as_os_str()])
        .env("RRECEIVE_TEST_KILL", format!("{n}:0"))
        .env("RRECEIVE_JOURNAL_DIR", &jdir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "{}", text(&o.stderr));
    let mode = std::fs::metadata(&jdir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(std::fs::read_dir(&jdir).unwrap().count(), 1);
    if is_root() {
        // Another user's: not used.
        remove_tree(&dest.join(BIG));
        let theirs = s.dir("theirs");
        nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let o = rreceive_cmd(&[
            OsStr::new("--no-durable"),
            OsStr::new("-f"),
            file.as_os_str(),
            dest.as_os_str(),
        ])
        .env("RRECEIVE_TEST_KILL", format!("{n}:0"))
        .env("RRECEIVE_JOURNAL_DIR", &theirs)
        .output()
        .unwrap();
        assert_eq!(o.status.code(), None, "{}", text(&o.stderr));
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
        assert_eq!(status_of(&dest, BIG).unwrap(), "incomplete");
    }
}

/// `--delete-incomplete` takes a killed receive's journal with it, so that
/// it never speaks for the next receive of that name; a complete
/// subvolume is never deleted.
#[test]
fn delete_incomplete_removes_the_subvolume_and_its_journal() {
    let s = Setup::incremental();
    let stream = s.stream(&[BIG], &s.file("big.stream")).unwrap();
    let dest = s.dir("dest");
    let file = s.file("big.whole");
    std::fs::write(&file, &stream).unwrap();
    let jdir = s.dir("journals");
    let n = frames(&stream).len() / 2;
    let with_journals = |c: &mut Command| {
        c.env("RRECEIVE_JOURNAL_DIR", &jdir);
    };
    let mut c = rreceive_cmd(&[OsStr::new("-f"), file.as_os_str(), dest.as_os_str()]);
    with_journals(&mut c);
    let o = c
        .env("RRECEIVE_TEST_KILL", format!("{n}:1"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "{}", text(&o.stderr));
    assert_eq!(std::fs::read_dir(&jdir).unwrap().count(), 1);
    let mut c = Command::new(rreceive_bin());
    with_journals(&mut c);
    let o = c
        .arg("--delete-incomplete")
        .arg(dest.join(BIG))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!dest.join(BIG).exists());
    assert_eq!(std::fs::read_dir(&jdir).unwrap().count(), 0);
    let left: Vec<_> = std::fs::read_dir(&dest).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // Received whole, it is kept.
    let o = receive_file(&file, &dest);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = Command::new(rreceive_bin())
        .arg("--delete-incomplete")
        .arg(dest.join(BIG))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("is complete: it is kept"),
        "{}",
        text(&o.stderr)
    );
    compare(&Manifest::committed(BIG), &dest.join(BIG)).unwrap();
}

/// A byte flipped on the way (a flaky link) stops a piped receive
/// resumably: the resumed stream, sent again, does not have it. The same
/// byte in a stream file is for good: a resume would read it again.
#[test]
fn a_stream_corrupted_in_transit_resumes_and_a_corrupt_file_does_not() {
    let s = Setup::incremental();
    let file = s.file("big.whole");
    let mut stream = s.stream(&[BIG], &file).unwrap();
    let (at, len) = frames(&stream)[frames(&stream).len() / 2];
    stream[at + len / 2] ^= 0x20;
    // Through a pipe.
    let dest = s.dir("piped");
    let mut child = piped_receive(&dest);
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(&stream);
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("crc32c mismatch") && err.contains("corrupted in transit"),
        "{err}"
    );
    assert_eq!(status_of(&dest, BIG).unwrap(), "resumable");
    let (token, _) = token_of(&dest.join(BIG)).unwrap();
    let resumed = s.file("big.resumed");
    let r = s.stream(&["--resume", &token, BIG], &resumed).unwrap();
    std::fs::write(&resumed, &r).unwrap();
    let o = receive_file(&resumed, &dest);
    assert!(o.status.success(), "{}", text(&o.stderr));
    compare(&Manifest::committed(BIG), &dest.join(BIG)).unwrap();
    // From a stream file.
    std::fs::write(&file, &stream).unwrap();
    let dest = s.dir("stored");
    let o = receive_file(&file, &dest);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the stream file is corrupt")
            && err.contains("resuming would stop there again"),
        "{err}"
    );
}

/// A subvolume removed by hand (`rm -rf`, as rreceive's message says off
/// btrfs) after its receive was killed leaves its journal in memory and
/// its side files in DEST: the next receive into DEST removes them, and
/// the journal of a DEST that is gone, but not the journal of a receive
/// that is still running.
#[test]
fn the_next_receive_removes_journals_and_side_files_of_subvolumes_gone() {
    const OTHER: &str = "btrfs_016_punch_hole.p";
    let s = Setup::incremental();
    let big = s.file("big.whole");
    let stream = s.stream(&[BIG], &big).unwrap();
    std::fs::write(&big, &stream).unwrap();
    let other = s.file("other.whole");
    let o = s.stream(&[OTHER], &other).unwrap();
    std::fs::write(&other, &o).unwrap();
    let jdir = s.dir("journals");
    let journals = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&jdir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let receive = |file: &Path, dest: &Path| {
        let mut c = rreceive_cmd(&[OsStr::new("-q"), OsStr::new("-f"), file.as_os_str()]);
        c.arg(dest).env("RRECEIVE_JOURNAL_DIR", &jdir);
        c
    };
    let n = frames(&stream).len() / 2;
    let killed = |dest: &Path| {
        let o = receive(&big, dest)
            .env("RRECEIVE_TEST_KILL", format!("{n}:1"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), None, "not killed: {}", text(&o.stderr));
    };
    // Killed, then removed by hand.
    let dest = s.dir("dest");
    killed(&dest);
    remove_tree(&dest.join(BIG));
    let sides: Vec<_> = std::fs::read_dir(&dest).unwrap().collect();
    assert!(!sides.is_empty(), "no side files to remove");
    // Killed, then its whole DEST removed.
    let gone = s.dir("gone");
    killed(&gone);
    remove_tree(&gone);
    // Running: stopped (SIGSTOP) in the middle of its stream.
    let live = s.dir("live");
    let mut running = receive(&big, &live)
        .env("RRECEIVE_TEST_STOP", n.to_string())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::os::unix::fs::MetadataExt;
    let prefix = |d: &Path| {
        let m = std::fs::metadata(d).unwrap();
        format!("{:x}-{:x}-", m.dev(), m.ino())
    };
    let (dest_journal, live_journal) = (prefix(&dest), prefix(&live));
    // Stopped where RRECEIVE_TEST_STOP says, its journal made.
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{}/stat", running.id()))
            .ok()
            .and_then(|st| st.rsplit_once(") ").map(|(_, r)| r.starts_with('T')))
            .unwrap_or(false)
    };
    let until = Instant::now() + Duration::from_secs(60);
    while !stopped() || !journals().iter().any(|j| j.starts_with(&live_journal)) {
        assert!(Instant::now() < until, "the running receive did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The running receive removed the journal of the DEST that is gone as
    // it started.
    let both = journals();
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(
        both.iter().any(|j| j.starts_with(&dest_journal)),
        "{both:?}"
    );
    let o = receive(&other, &dest).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // Only the running receive's journal is left; DEST holds OTHER only.
    let left = journals();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(&live_journal), "{left:?}");
    let in_dest: Vec<_> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".rreceive-state")
        .collect();
    assert_eq!(in_dest, [OTHER], "side files left in DEST");
    // The running receive goes on and ends with its journal gone.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running.id() as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let st = wait_for(&mut running, 60);
    assert!(st.success(), "the running receive failed: {st}");
    compare(&Manifest::committed(BIG), &live.join(BIG)).unwrap();
    assert!(journals().is_empty(), "{:?}", journals());
}

/// Off btrfs a snapshot first copies its parent, under a reserved name:
/// a receive killed while copying leaves no subvolume (nothing to resume
/// or delete), and the same stream received again removes what is left.
#[test]
fn a_receive_killed_while_copying_its_parent_leaves_no_subvolume() {
    let s = Setup::incremental();
    let n = "many_files_one_dir";
    let (p, c) = (format!("{n}.p"), format!("{n}.c"));
    let full = s.stream(&[&p], &s.file("p.stream")).unwrap();
    let incr = s.stream(&["-p", &p, &c], &s.file("c.stream")).unwrap();
    let dest = s.dir("dest");
    receive_whole(&s, &full, &dest, &p).unwrap();
    let file = s.file("incr.stream");
    std::fs::write(&file, &incr).unwrap();
    let args = [
        OsStr::new("--plain"),
        OsStr::new("-f"),
        file.as_os_str(),
        dest.as_os_str(),
    ];
    let o = rreceive_cmd(&args)
        .env("RRECEIVE_TEST_KILL", "copy:20")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "not killed: {}", text(&o.stderr));
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let left = names();
    assert!(!dest.join(&c).exists(), "{left:?}");
    assert!(
        left.iter().any(|n| n.starts_with(".rreceive-copy-")),
        "{left:?}"
    );
    assert!(status_of(&dest, &c).is_err(), "listed after the kill");
    let o = rreceive(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    compare(&Manifest::committed(&c), &dest.join(&c)).unwrap();
    assert!(
        !names().iter().any(|n| n.starts_with(".rreceive-copy-")),
        "{:?}",
        names()
    );
}

/// The scenarios the kill test goes through: a spread of testdata's, with
/// renamed directories, hard links, clones and large files among them.
fn kill_scenarios() -> Vec<String> {
    let names = scenarios::names();
    let step = (names.len() / 12).max(1);
    let mut v: Vec<String> = names.iter().step_by(step).cloned().collect();
    for must in [
        "btrfs_007_seeded_random_ops",
        "btrfs_045_nested_moves_many_subtrees",
        "btrfs_084_subtree_swap",
        "hardlinks_renamed_across_dirs",
        "btrfs_094_clone_into_new_file",
        "btrfs_283_reflinks_share_best_source",
        "large_dir_renamed",
        "many_files_one_dir",
        "btrfs_214_capability_after_chgrp",
    ] {
        if let Some(n) = names.iter().find(|n| n.contains(must)) {
            if !v.contains(n) {
                v.push(n.clone());
            }
        }
    }
    v
}

/// One receive killed (SIGKILL, by rreceive's fault injection) at command
/// `at`, before applying it (`phase` 0) or after, before its journal says
/// so (1); then resumed with the token `--resume-token` gives, and
/// compared with the snapshot.
fn kill_and_resume(
    s: &Setup,
    send: &Send<'_>,
    stream: &[u8],
    dest: &Path,
    at: usize,
    phase: u64,
) -> Result<(), String> {
    kill_and_resume_with(s, send, stream, dest, at, phase, &[])
}

/// [`kill_and_resume`] with rreceive options `rx` (the resumed receive
/// goes without them: what the subvolume needs, its work directory says).
fn kill_and_resume_with(
    s: &Setup,
    send: &Send<'_>,
    stream: &[u8],
    dest: &Path,
    at: usize,
    phase: u64,
    rx: &[&str],
) -> Result<(), String> {
    let name = send.snap;
    let sv = dest.join(name);
    let file = dest.with_extension("stream");
    std::fs::write(&file, stream).unwrap();
    let mut args: Vec<&OsStr> = rx.iter().map(OsStr::new).collect();
    args.extend([
        OsStr::new("-q"),
        OsStr::new("-f"),
        file.as_os_str(),
        dest.as_os_str(),
    ]);
    let o = rreceive_cmd(&args)
        .env("RRECEIVE_TEST_KILL", format!("{at}:{phase}"))
        .output()
        .unwrap();
    if o.status.code().is_some() {
        return Err(format!("not killed: {:?}: {}", o.status, text(&o.stderr)));
    }
    if !sv.exists() {
        // Killed before SUBVOL made anything: received again.
        let o = receive_file(&file, dest);
        return if o.status.success() {
            compare(send.want, &sv)
        } else {
            Err(format!("received again: {}", text(&o.stderr)))
        };
    }
    if status_of(dest, name)? == "complete" {
        // Killed after END was applied.
        return compare(send.want, &sv);
    }
    let (token, t) = token_of(&sv)?;
    if t.point.commands as usize > at {
        return Err(format!(
            "the token's point {} is past the kill",
            t.point.commands
        ));
    }
    let mut args: Vec<&OsStr> = send.flags.iter().map(OsStr::new).collect();
    args.extend([
        OsStr::new("--resume"),
        OsStr::new(&token),
        OsStr::new("-f"),
        file.as_os_str(),
        OsStr::new(name),
    ]);
    let o = s.rsend(&args);
    if !o.status.success() {
        return Err(format!("rsend --resume: {}", text(&o.stderr)));
    }
    receive_to_the_end(&file, dest, send, "the resumed stream")
}

/// One receive into a new `dest` of the full stream of scenario `p`, or
/// (`incremental`) of its incremental to `c` after the full one was
/// received whole, killed at a random command and resumed: what failed.
fn kill_one(
    s: &Setup,
    rng: &mut testkit::Rng,
    (p, c, full, incr): (&str, &str, &[u8], &[u8]),
    incremental: bool,
    dest: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dest).unwrap();
    let (wp, wc) = (Manifest::committed(p), Manifest::committed(c));
    let (stream, send) = if incremental {
        receive_whole(s, full, dest, p).map_err(|e| format!("{p}: {e}"))?;
        (
            incr,
            Send {
                snap: c,
                want: &wc,
                flags: &[],
            },
        )
    } else {
        (
            full,
            Send {
                snap: p,
                want: &wp,
                flags: &[],
            },
        )
    };
    let commands = frames(stream).len();
    let at = 1 + rng.below(commands as u64) as usize;
    let phase = rng.below(2);
    let args = if incremental {
        format!("-p {p} {c}")
    } else {
        p.to_string()
    };
    kill_and_resume(s, &send, stream, dest, at, phase).map_err(|e| {
        format!("rsend {args}, killed at command {at} of {commands} (phase {phase}): {e}")
    })
}

/// SIGKILL of rreceive at random commands of full and incremental streams
/// of many scenarios, onto each kind of filesystem (as root: tmpfs, ext4,
/// xfs and btrfs; else a plain directory): every receive resumes from its
/// journal to the exact snapshot. `KILL_COUNT` kills per filesystem (50),
/// `KILL_SEED` the seed.
#[test]
fn a_receive_killed_at_any_command_resumes_to_the_snapshot() {
    let s = Setup::incremental();
    let count: usize = env_or("KILL_COUNT", 50) as usize;
    let seed: u64 = env_or("KILL_SEED", 0x5eed_0030);
    let names = kill_scenarios();
    assert!(names.len() >= 10, "{names:?}");
    let mut streams = Vec::new();
    for n in &names {
        let (p, c) = (format!("{n}.p"), format!("{n}.c"));
        let full = s.stream(&[&p], &s.file("k.stream")).unwrap();
        let incr = s.stream(&["-p", &p, &c], &s.file("k.stream")).unwrap();
        streams.push((p, c, full, incr));
    }
    // Where to receive: every kind of filesystem, as root.
    let tmpfs;
    let (ext4, xfs, btrfs);
    let mut places: Vec<(&str, PathBuf)> = vec![("dir", s.dir("kill-dir"))];
    if is_root() && testkit::kernel_available("a_receive_killed_at_any_command") {
        tmpfs = testkit::Tmpfs::new(512, "noatime");
        ext4 = testkit::ext4_image(512, &[], "noatime");
        xfs = testkit::xfs_image(512, "noatime");
        btrfs = testkit::BtrfsImage::new(512, &[], "noatime");
        places = vec![
            ("tmpfs", tmpfs.mnt().to_path_buf()),
            ("ext4", ext4.mnt().to_path_buf()),
            ("xfs", xfs.mnt().to_path_buf()),
            ("btrfs", btrfs.mnt().to_path_buf()),
        ];
    }
    let mut rng = testkit::Rng(seed);
    let mut failures = Vec::new();
    for (fs, root) in &places {
        for i in 0..count {
            let (p, c, full, incr) = &streams[i % streams.len()];
            let incremental = rng.below(2) == 1;
            let dest = root.join(format!("k{i}"));
            let streams = (p.as_str(), c.as_str(), full.as_slice(), incr.as_slice());
            if let Err(e) = kill_one(&s, &mut rng, streams, incremental, &dest) {
                failures.push(format!("{fs}: {e}"));
            }
            unflag(&dest);
            let _ = std::fs::remove_dir_all(&dest);
        }
        println!("{fs}: {count} receives killed and resumed");
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        count * places.len(),
        failures.join("\n")
    );
}

#[test]
fn a_resume_after_90_percent_sends_a_small_part_of_the_stream() {
    let s = Setup::incremental();
    let n = "btrfs_007_seeded_random_ops";
    let (p, c) = (format!("{n}.p"), format!("{n}.c"));
    let dest = s.dir("dest");
    let (wp, wc) = (Manifest::committed(&p), Manifest::committed(&c));
    for (args, send) in [
        (
            vec![p.as_str()],
            Send {
                snap: &p,
                want: &wp,
                flags: &[],
            },
        ),
        (
            vec!["-p", &p, &c],
            Send {
                snap: &c,
                want: &wc,
                flags: &[],
            },
        ),
    ] {
        let stream = s.stream(&args, &s.file("cost.stream")).unwrap();
        assert!(stream.len() > 300 << 10, "{} bytes", stream.len());
        if args[0] == "-p" {
            let whole = s.stream(&[&p], &s.file("cost.parent")).unwrap();
            receive_whole(&s, &whole, &dest, &p).unwrap();
        }
        let f = frames(&stream);
        let at = stream.len() * 9 / 10;
        let i = f.iter().position(|(o, l)| o + l > at).unwrap();
        let cut = Cut {
            what: "at 90%",
            at,
            applied: i as u64,
        };
        let resumed = cut_and_resume(&s, &send, &stream, &cut, &dest, "cost").unwrap();
        println!(
            "rsend {}: {} bytes; resumed after 90% with {resumed} bytes",
            args.join(" "),
            stream.len()
        );
        assert!(
            resumed * 5 < stream.len() as u64,
            "rsend {}: the resumed stream has {resumed} of {} bytes",
            args.join(" "),
            stream.len()
        );
    }
}

#[test]
fn btrfs_receive_refuses_a_resumed_stream() {
    if Command::new("btrfs").arg("--version").output().is_err() {
        println!("skipped: no btrfs command");
        return;
    }
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let snap = "changed_files.c";
    let (_, token) = stopped(&s, &[snap], snap, &dest);
    let resumed = s.file("resumed.stream");
    let r = s.stream(&["--resume", &token, snap], &resumed).unwrap();
    std::fs::write(&resumed, &r).unwrap();
    let o = Command::new("btrfs")
        .args(["receive", "--dump", "-f"])
        .arg(&resumed)
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "btrfs receive --dump took a resumed stream"
    );
}

#[test]

fn dry_run_of_a_resumed_send_is_the_resumed_stream() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let snap = "changed_files.c";
    let (_, token) = stopped(&s, &[snap], snap, &dest);
    let resumed = s
        .stream(&["--resume", &token, snap], &s.file("resumed.stream"))
        .unwrap();
    let o = s.rsend(&["-q", "-n", "--resume", &token, snap]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout).lines().last(),
        Some(format!("size\t{}", resumed.len()).as_str()),
        "rsend -n --resume"
    );
    // And it checks the token as the send does.
    let o = s.rsend(&["-q", "-n", "--no-data", "--resume", &token, snap]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "rsend -n --no-data --resume: {}",
        text(&o.stdout)
    );
}

#[test]
fn refusal_messages_have_no_runs_of_spaces() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let snap = "changed_files.c";
    let (stream, _) = stopped(&s, &[snap], snap, &dest);
    let whole = s.file("whole.stream");
    std::fs::write(&whole, &stream).unwrap();
    let o = receive_file(&whole, &dest);
    let err = text(&o.stderr);
    assert!(!err.contains("   "), "{err}");
}

#[test]

fn a_resume_with_another_clone_source_says_the_stream_differs() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let snap = "changed_files.c";
    let (_, token) = stopped(&s, &[snap], snap, &dest);
    let o = s.rsend(&[
        "-q",
        "-f",
        "/dev/null",
        "--resume",
        &token,
        "-c",
        "changed_files.p",
        snap,
    ]);
    assert_fails(
        &o,
        1,
        "cannot resume: the stream this send makes is not the one received before",
        "--resume with -c",
    );
}

#[test]
fn proto_0_resumes_a_protocol_2_stream() {
    let s = Setup::v2();
    let dest = s.dir("dest");
    let snap = "zlib_extents.p";
    let flags = ["--proto", "2", "--compressed-data"];
    let (_, token) = stopped(&s, &[&flags[..], &[snap]].concat(), snap, &dest);
    let o = s.rsend(&[
        "-q",
        "-f",
        "/dev/null",
        "--proto",
        "0",
        "--compressed-data",
        "--resume",
        &token,
        snap,
    ]);
    assert!(
        o.status.success(),
        "--proto 0 with a v2 token: {}",
        text(&o.stderr)
    );
}

/// `rsend A B` cut in B's stream: A is complete, B resumable from a point
/// counted from B's own stream header, and resuming B alone completes it.
#[test]
fn a_cut_in_the_second_of_two_streams_resumes_the_second() {
    let s = Setup::incremental();
    let dest = s.dir("dest");
    let (a, b) = ("new_files.p", "changed_files.c");
    let both = s.stream(&[a, b], &s.file("both.stream")).unwrap();
    let first = s.stream(&[a], &s.file("a.stream")).unwrap();
    let second = s.stream(&[b], &s.file("b.stream")).unwrap();
    assert_eq!(
        both,
        [&first[..], &second[..]].concat(),
        "rsend A B is A's stream then B's"
    );
    let f = frames(&second);
    let i = f.len() / 2;
    let cut = s.file("both.cut");
    std::fs::write(&cut, &both[..first.len() + f[i].0 + f[i].1 / 2]).unwrap();
    let o = receive_file(&cut, &dest);
    assert_fails(
        &o,
        3,
        &format!("stopped after command {i};"),
        "the cut concatenation",
    );
    assert_eq!(status_of(&dest, a).unwrap(), "complete");
    assert_eq!(status_of(&dest, b).unwrap(), "resumable");
    let (token, t) = token_of(&dest.join(b)).unwrap();
    assert_eq!(t.point.commands, i as u64);
    assert_eq!(
        t.point.offset, f[i].0 as u64,
        "the offset counts from B's stream header"
    );
    let r = s
        .stream(&["--resume", &token, b], &s.file("b.resumed"))
        .unwrap();
    assert_eq!(
        r,
        expected_resumed(&second, t.point.commands, f[i].0, t.point.digest)
    );
    std::fs::write(&cut, &r).unwrap();
    let o = receive_file(&cut, &dest);
    assert!(o.status.success(), "{}", text(&o.stderr));
    compare(&Manifest::committed(a), &dest.join(a)).unwrap();
    compare(&Manifest::committed(b), &dest.join(b)).unwrap();
    assert_eq!(status_of(&dest, b).unwrap(), "complete");
}

/// Whether process `pid` is stopped (SIGSTOP), from /proc; `None` once it
/// is gone.
fn stopped_state(pid: u32) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit(')').next()?.split_whitespace().next()?;
    Some(state == "T" || state == "t")
}

/// Waits until `child` stops (true) or exits (false).
fn wait_stopped(child: &mut Child) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if stopped_state(child.id()) == Some(true) {
            return true;
        }
        assert!(Instant::now() < until, "rreceive neither stopped nor ended");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A filesystem the power-cut test receives onto.
#[derive(Clone, Copy)]
struct CutFs {
    name: &'static str,
    mkfs: &'static [&'static str],
    /// No commit on a timer between the test's syncs and its cut.
    opts: &'static str,
}

/// Where linked and in-place receives are cut: copies are real copies on
/// the xfs without reflinks; btrfs with --plain (directories, not
/// snapshots).
const MODE_CUT_FILESYSTEMS: [CutFs; 4] = [
    CUT_FILESYSTEMS[0],
    CUT_FILESYSTEMS[1],
    CutFs {
        name: "xfs without reflinks",
        mkfs: &["mkfs.xfs", "-q", "-f", "-m", "reflink=0"],
        opts: "noatime",
    },
    CutFs {
        name: "btrfs --plain",
        mkfs: &["mkfs.btrfs", "-q", "-f"],
        opts: "noatime,commit=300",
    },
];

const CUT_FILESYSTEMS: [CutFs; 3] = [
    CutFs {
        name: "ext4",
        mkfs: &["mkfs.ext4", "-q", "-F"],
        opts: "noatime,commit=300",
    },
    CutFs {
        name: "xfs",
        mkfs: &["mkfs.xfs", "-q", "-f"],
        opts: "noatime",
    },
    CutFs {
        name: "btrfs",
        mkfs: &["mkfs.btrfs", "-q", "-f"],
        opts: "noatime,commit=300",
    },
];

/// What the test has reach the disk at the first stop: what a filesystem
/// may write on its own at any moment between checkpoints.
#[derive(Clone, Copy, Debug)]
enum Flush {
    /// Everything (`syncfs`).
    All,
    /// The filesystem's journal only (an fsync of each directory):
    /// changes to names and inodes, not data still in the page cache.
    Journal,
    /// The data of the tree's regular files (and the journal with it),
    /// not that of the work directory: writeback of some files only.
    Tree,
}

/// Flushes every directory beneath `dir` (`files`: every regular file
/// instead).
fn fsync_tree(dir: &Path, files: bool) {
    if !files {
        if let Ok(f) = std::fs::File::open(dir) {
            let _ = f.sync_all();
        }
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            fsync_tree(&e.path(), files);
        } else if t.is_file() && files {
            if let Ok(f) = std::fs::File::open(e.path()) {
                let _ = f.sync_data();
            }
        }
    }
}

/// One power cut: `stream` (of `send`; its parent `parent`, received whole
/// and synced first) is received onto a fresh `fs` on a power-cut device
/// with windows of `window` commands; before command `synced` the test
/// syncs the filesystem (what came since the last checkpoint is then on
/// disk too), before command `at` it cuts the power. The disk as found is
/// mounted again and the receive resumed with the token: the snapshot,
/// exactly.
#[allow(clippy::too_many_arguments)]
fn power_cut_and_resume(
    s: &Setup,
    fs: &CutFs,
    parent: Option<&[u8]>,
    send: &Send<'_>,
    stream: &[u8],
    window: u64,
    synced: u64,
    at: u64,
) -> Result<String, String> {
    let cut = (window, synced, at, Flush::All);
    power_cut_and_resume_with(s, fs, parent, send, stream, cut, &[], None, None)
}

/// [`power_cut_and_resume`] with rreceive options `rx` for the receive cut
/// (`--link`, `--in-place`: the resumed one goes without, its work
/// directory says); with `kept`, the parent (name, manifest) must be as it
/// was after the resume.
#[allow(clippy::too_many_arguments)]
fn power_cut_and_resume_with(
    s: &Setup,
    fs: &CutFs,
    parent: Option<&[u8]>,
    send: &Send<'_>,
    stream: &[u8],
    (window, synced, at, flush): (u64, u64, u64, Flush),
    rx: &[&str],
    kept: Option<(&str, &Manifest)>,
    killed: Option<(u64, u64)>,
) -> Result<String, String> {
    use testkit::powercut::{Mounted, PowerCut};
    let pc = PowerCut::new(300);
    testkit::run(Command::new(fs.mkfs[0]).args(&fs.mkfs[1..]).arg(pc.dev()));
    let m = Mounted::device(pc.dev(), fs.opts);
    let dest = m.mnt().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let file = s.file("power.stream");
    if let Some(full) = parent {
        std::fs::write(&file, full).unwrap();
        let o = receive_file(&file, &dest);
        if !o.status.success() {
            return Err(format!("the parent: {}", text(&o.stderr)));
        }
    }
    std::fs::write(&file, stream).unwrap();
    nix::unistd::sync();
    let (mut synced, mut at) = (synced, at);
    if let Some((k, phase)) = killed {
        // First killed at command k; the receive cut is the resumed one
        // (its stops counted in the resumed stream).
        let mut args: Vec<&OsStr> = rx.iter().map(OsStr::new).collect();
        args.extend([
            OsStr::new("-q"),
            OsStr::new("-f"),
            file.as_os_str(),
            dest.as_os_str(),
        ]);
        let o = rreceive_cmd(&args)
            .env("RRECEIVE_TEST_KILL", format!("{k}:{phase}"))
            .output()
            .unwrap();
        if o.status.code().is_some() {
            return Err(format!("not killed: {:?}: {}", o.status, text(&o.stderr)));
        }
        let sv = dest.join(send.snap);
        if !sv.exists() || status_of(&dest, send.snap)? == "complete" {
            return Ok("killed before SUBVOL or after END".into());
        }
        let (token, _) = token_of(&sv)?;
        let mut args: Vec<&OsStr> = send.flags.iter().map(OsStr::new).collect();
        args.extend([
            OsStr::new("--resume"),
            OsStr::new(&token),
            OsStr::new("-f"),
            file.as_os_str(),
            OsStr::new(send.snap),
        ]);
        let o = s.rsend(&args);
        if !o.status.success() {
            return Err(format!(
                "rsend --resume after the kill: {}",
                text(&o.stderr)
            ));
        }
        let n = frames(&std::fs::read(&file).unwrap()).len() as u64;
        at = 1 + (at - 1) % n.max(1);
        synced = 1 + (synced - 1) % at;
        nix::unistd::sync();
    }
    let mut args: Vec<&OsStr> = rx.iter().map(OsStr::new).collect();
    args.extend([
        OsStr::new("-q"),
        OsStr::new("-f"),
        file.as_os_str(),
        dest.as_os_str(),
    ]);
    let mut child = rreceive_cmd(&args)
        .env("RRECEIVE_TEST_STOP", format!("{synced},{at}"))
        .env("RRECEIVE_TEST_WINDOW", window.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = synced < at;
    while wait_stopped(&mut child) {
        if !first {
            break;
        }
        // The first stop: what the receive did so far goes to disk.
        first = false;
        let d = std::fs::File::open(&dest).unwrap();
        match flush {
            Flush::All => nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)).unwrap(),
            Flush::Journal => fsync_tree(&dest, false),
            Flush::Tree => {
                fsync_tree(&dest.join(send.snap), true);
                d.sync_all().unwrap();
            }
        }
        let st = Command::new("kill")
            .arg("-CONT")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(st.success(), "kill -CONT");
    }
    pc.cut();
    let _ = child.kill();
    let _ = child.wait();
    drop(m);
    let durable = pc.into_durable();
    let m = durable.mount(fs.opts);
    let dest = m.mnt().join("backup");
    let sv = dest.join(send.snap);
    let how = if !sv.exists() {
        // Cut before its SUBVOL reached the disk: received again.
        std::fs::write(&file, stream).unwrap();
        receive_to_the_end(&file, &dest, send, "the stream again")?;
        "received again"
    } else if status_of(&dest, send.snap)? == "complete" {
        compare(send.want, &sv)?;
        "complete before the cut"
    } else {
        let (token, _) = token_of(&sv)?;
        let mut args: Vec<&OsStr> = send.flags.iter().map(OsStr::new).collect();
        args.extend([
            OsStr::new("--resume"),
            OsStr::new(&token),
            OsStr::new("-f"),
            file.as_os_str(),
            OsStr::new(send.snap),
        ]);
        let o = s.rsend(&args);
        if !o.status.success() {
            return Err(format!("rsend --resume: {}", text(&o.stderr)));
        }
        let o = rreceive(&[
            OsStr::new("-v"),
            OsStr::new("-f"),
            file.as_os_str(),
            dest.as_os_str(),
        ]);
        let err = text(&o.stderr);
        if !o.status.success() {
            return Err(format!("receiving the resumed stream: {}: {err}", o.status));
        }
        compare(send.want, &sv)?;
        if status_of(&dest, send.snap)? != "complete" {
            return Err("the resumed receive left it incomplete".into());
        }
        if err.contains("cut a receive resumed after a kill") {
            "resumed from the killed receive's journal kept in DEST"
        } else {
            // How many of the window's changes of names the disk had kept.
            let kept = err
                .lines()
                .find_map(|l| l.split("after the checkpoint, ").nth(1))
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            match kept {
                Some(0) => "resumed, no change after the checkpoint kept",
                Some(_) => "resumed, changes after the checkpoint kept",
                None => return Err(format!("no power-loss replay: {err}")),
            }
        }
    };
    if let Some((name, want)) = kept {
        compare(want, &dest.join(name)).map_err(|e| format!("the parent changed: {e}"))?;
    }
    unflag(&dest);
    Ok(how.to_string())
}

/// The power cut at random moments of full and incremental receives onto
/// ext4, xfs and btrfs (a device that loses all it was not told to flush,
/// testkit::powercut): mounted again, each resumes to the exact snapshot.
/// `POWER_COUNT` cuts per filesystem (4), `POWER_SEED` the seed.
#[test]
fn a_receive_cut_by_a_power_loss_resumes_to_the_snapshot() {
    if !testkit::powercut::available("a_receive_cut_by_a_power_loss_resumes") {
        return;
    }
    let s = Setup::incremental();
    let count: usize = env_or("POWER_COUNT", 4) as usize;
    let seed: u64 = env_or("POWER_SEED", 0x5eed_0031);
    let names = kill_scenarios();
    let mut rng = testkit::Rng(seed);
    let mut failures = Vec::new();
    let mut done = 0;
    let mut how = std::collections::BTreeMap::new();
    for fs in &CUT_FILESYSTEMS {
        for i in 0..count {
            let n = &names[rng.below(names.len() as u64) as usize];
            let (p, c) = (format!("{n}.p"), format!("{n}.c"));
            let full = s.stream(&[&p], &s.file("k.stream")).unwrap();
            let incremental = i % 2 == 1;
            let (wp, wc) = (Manifest::committed(&p), Manifest::committed(&c));
            let (stream, parent, send) = if incremental {
                let incr = s.stream(&["-p", &p, &c], &s.file("k.stream")).unwrap();
                let send = Send {
                    snap: &c,
                    want: &wc,
                    flags: &[],
                };
                (incr, Some(full.as_slice()), send)
            } else {
                let send = Send {
                    snap: &p,
                    want: &wp,
                    flags: &[],
                };
                (full.clone(), None, send)
            };
            let commands = frames(&stream).len() as u64;
            // After the SUBVOL or SNAPSHOT and its first checkpoint.
            let at = 3 + rng.below(commands.saturating_sub(2).max(1));
            let synced = 1 + rng.below(at);
            let window = [4, 16, 256][rng.below(3) as usize];
            let what = format!(
                "{}: {} {}, {commands} commands, window {window}, synced before {synced}, cut \
                 before {at}",
                fs.name,
                if incremental { "incremental" } else { "full" },
                send.snap
            );
            match power_cut_and_resume(
                &s,
                fs,
                parent.filter(|_| incremental),
                &send,
                &stream,
                window,
                synced,
                at,
            ) {
                Ok(h) => {
                    *how.entry(h).or_insert(0) += 1;
                    done += 1;
                }
                Err(e) => failures.push(format!("{what}: {e}")),
            }
        }
    }
    println!("{done} receives cut by a power loss: {how:?}");
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        count * CUT_FILESYSTEMS.len(),
        failures.join("\n")
    );
}

/// A receive killed at a random command, resumed, and the resumed one cut
/// by a power loss at a random command soon after (mostly while it goes
/// over what the killed one applied), full and incremental, onto ext4, xfs
/// and btrfs: mounted again, each resumes (from the killed receive's
/// journal kept in DEST, or from a later checkpoint) to the exact
/// snapshot. `POWER_COUNT` per filesystem (4), `POWER_SEED`.
#[test]
fn a_receive_resumed_after_a_kill_and_cut_by_a_power_loss_resumes() {
    if !testkit::powercut::available("a_receive_resumed_after_a_kill_and_cut_by_a_power_loss") {
        return;
    }
    let s = Setup::incremental();
    let count: usize = env_or("POWER_COUNT", 4) as usize;
    let seed: u64 = env_or("POWER_SEED", 0x5eed_0037);
    let names = kill_scenarios();
    let mut rng = testkit::Rng(seed);
    let mut failures = Vec::new();
    let mut how = std::collections::BTreeMap::new();
    for fs in &CUT_FILESYSTEMS {
        for i in 0..count {
            let n = &names[rng.below(names.len() as u64) as usize];
            let (p, c) = (format!("{n}.p"), format!("{n}.c"));
            let full = s.stream(&[&p], &s.file("kp.stream")).unwrap();
            let incremental = i % 2 == 1;
            let (wp, wc) = (Manifest::committed(&p), Manifest::committed(&c));
            let (stream, send) = if incremental {
                let incr = s.stream(&["-p", &p, &c], &s.file("kp.stream")).unwrap();
                let send = Send {
                    snap: &c,
                    want: &wc,
                    flags: &[],
                };
                (incr, send)
            } else {
                let send = Send {
                    snap: &p,
                    want: &wp,
                    flags: &[],
                };
                (full.clone(), send)
            };
            let commands = frames(&stream).len() as u64;
            // Killed after its SUBVOL or SNAPSHOT; cut early in the resumed
            // stream, where it goes over what the killed one applied.
            let k = 2 + rng.below(commands.saturating_sub(1).max(1));
            let phase = rng.below(2);
            let at = 1 + rng.below(k.min(8));
            let synced = 1 + rng.below(at);
            let what = format!(
                "{}: {} {}, {commands} commands, killed at {k} (phase {phase}), the resumed \
                 one synced before {synced}, cut before {at}",
                fs.name,
                if incremental { "incremental" } else { "full" },
                send.snap
            );
            match power_cut_and_resume_with(
                &s,
                fs,
                incremental.then_some(full.as_slice()),
                &send,
                &stream,
                (256, synced, at, Flush::All),
                &[],
                None,
                Some((k, phase)),
            ) {
                Ok(h) => *how.entry(h).or_insert(0) += 1,
                Err(e) => failures.push(format!("{what}: {e}")),
            }
        }
    }
    println!("receives killed, resumed and cut by a power loss: {how:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A receive mode, a filesystem, a scenario, and where to cut (random when
/// `None`): window, first stop, cut, and what the first stop flushes.
type ModeCut<'a> = (&'a str, &'a CutFs, String, Option<(u64, u64, u64, Flush)>);

/// The power cut at random moments of incrementals received `--link`
/// (the parent's files shared by hard links until changed) and
/// `--in-place` (the parent's tree itself changed) onto ext4, xfs (with and
/// without reflinks) and btrfs (--plain): each resumes to the exact
/// snapshot, and a linked one's parent is left as it was. `POWER_COUNT` cuts per mode and filesystem (4), `POWER_SEED`.
#[test]
fn a_linked_or_in_place_receive_cut_by_a_power_loss_resumes() {
    if !testkit::powercut::available("a_linked_or_in_place_receive_cut_by_a_power_loss") {
        return;
    }
    let s = Setup::incremental();
    let count: usize = env_or("POWER_COUNT", 4) as usize;
    let seed: u64 = env_or("POWER_SEED", 0x5eed_0036);
    let names = kill_scenarios();
    let mut rng = testkit::Rng(seed);
    let mut failures = Vec::new();
    let mut how = std::collections::BTreeMap::new();
    let mut done = 0;
    // First two cuts known to go wrong when what a change needs is not
    // flushed before it: in place, the overlay's log and saved bytes (the
    // tree's data written back, the work directory's not: a clone from
    // the parent then reads the new bytes); linked, a LINK target's entry
    // in the list of the tree's own files (xfs commits the LINK with its
    // journal: the resume breaks the hard-link group).
    let mut cases: Vec<ModeCut<'_>> = Vec::new();
    let fixed = [
        (
            "--in-place",
            0,
            "btrfs_283_reflinks_share_best_source",
            (256, 16, 18, Flush::Tree),
        ),
        (
            "--link",
            2,
            "btrfs_221_orphan_refresh",
            (256, 7, 8, Flush::Journal),
        ),
    ];
    for (mode, fs, name, cut) in fixed {
        let n = scenarios::names().into_iter().find(|n| n.contains(name));
        let n = n.unwrap_or_else(|| panic!("no scenario {name}"));
        cases.push((mode, &MODE_CUT_FILESYSTEMS[fs], n, Some(cut)));
    }
    // Without the flushes they go wrong (the test can fail).
    let controls: Vec<_> = cases.clone();
    for mode in ["--link", "--in-place"] {
        for fs in &MODE_CUT_FILESYSTEMS {
            for _ in 0..count {
                let n = &names[rng.below(names.len() as u64) as usize];
                cases.push((mode, fs, n.clone(), None));
            }
        }
    }
    let cases = controls
        .into_iter()
        .map(|c| (c, true))
        .chain(cases.into_iter().map(|c| (c, false)));
    for ((mode, fs, n, cut), control) in cases {
        NO_WRITE_AHEAD.with(|w| w.set(control));
        PLAIN.with(|p| p.set(fs.name.starts_with("btrfs")));
        let (p, c) = (format!("{n}.p"), format!("{n}.c"));
        let full = s.stream(&[&p], &s.file("m.stream")).unwrap();
        let incr = s.stream(&["-p", &p, &c], &s.file("m.stream")).unwrap();
        let (wp, wc) = if mode == "--link" {
            (
                without_nlink(&Manifest::committed(&p)),
                without_nlink(&Manifest::committed(&c)),
            )
        } else {
            (Manifest::committed(&p), Manifest::committed(&c))
        };
        let send = Send {
            snap: &c,
            want: &wc,
            flags: &[],
        };
        let commands = frames(&incr).len() as u64;
        let (window, synced, at, flush) = cut.unwrap_or_else(|| {
            let at = 3 + rng.below(commands.saturating_sub(2).max(1));
            let synced = 1 + rng.below(at);
            let window = [4, 16, 256][rng.below(3) as usize];
            let flush = [Flush::All, Flush::Journal, Flush::Tree][rng.below(3) as usize];
            (window, synced, at, flush)
        });
        let what = format!(
            "{} {mode}: rsend -p {p} {c}, {commands} commands, window {window}, {flush:?} \
             flushed before {synced}, cut before {at}",
            fs.name
        );
        let kept = (mode == "--link").then_some((p.as_str(), &wp));
        match power_cut_and_resume_with(
            &s,
            fs,
            Some(&full),
            &send,
            &incr,
            (window, synced, at, flush),
            &[mode],
            kept,
            None,
        ) {
            Ok(_) if control => failures.push(format!("{what}: exact without flushes")),
            Err(_) if control => {}
            Ok(h) => {
                *how.entry(h).or_insert(0) += 1;
                done += 1;
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    NO_WRITE_AHEAD.with(|w| w.set(false));
    PLAIN.with(|p| p.set(false));
    println!("{done} linked or in-place receives cut by a power loss: {how:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same for every protocol-2 scenario sent with --compressed-data
/// (encoded writes, fallocate, file attributes): one cut each, full or
/// incremental in turn, across ext4, xfs and btrfs.
#[test]
fn compressed_data_streams_cut_by_a_power_loss_resume() {
    if !testkit::powercut::available("compressed_data_streams_cut_by_a_power_loss_resume") {
        return;
    }
    let s = Setup::v2();
    let flags = ["--proto", "2", "--compressed-data"];
    let mut rng = testkit::Rng(0x5eed_0032);
    let mut failures = Vec::new();
    let mut how = std::collections::BTreeMap::new();
    for (i, n) in v2::scenarios().into_iter().enumerate() {
        let fs = &CUT_FILESYSTEMS[i % CUT_FILESYSTEMS.len()];
        let (p, c) = (format!("{n}.p"), format!("{n}.c"));
        let (wp, wc) = (v2::manifest(&p), v2::manifest(&c));
        let kind = if i % 2 == 0 { "full" } else { "incr" };
        let out = s.file("v2.stream");
        let stream = match s.stream(&v2::send_args(&flags, &n, kind), &out) {
            Ok(st) => st,
            Err(e) => {
                failures.push(format!("{n} {kind}: {e}"));
                continue;
            }
        };
        let parent = if kind == "incr" {
            match s.stream(&[&p], &out) {
                Ok(w) => Some(w),
                Err(e) => {
                    failures.push(format!("{n}: {e}"));
                    continue;
                }
            }
        } else {
            None
        };
        let send = if kind == "incr" {
            Send {
                snap: &c,
                want: &wc,
                flags: &flags,
            }
        } else {
            Send {
                snap: &p,
                want: &wp,
                flags: &flags,
            }
        };
        let commands = frames(&stream).len() as u64;
        let at = 3 + rng.below(commands.saturating_sub(2).max(1));
        let synced = 1 + rng.below(at);
        match power_cut_and_resume(&s, fs, parent.as_deref(), &send, &stream, 8, synced, at) {
            Ok(h) => *how.entry(h).or_insert(0) += 1,
            Err(e) => failures.push(format!(
                "{}: {n} {kind}, {commands} commands, synced before {synced}, cut before {at}: {e}",
                fs.name
            )),
        }
    }
    println!("--compressed-data streams cut by a power loss: {how:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// SIGKILL of `rreceive --link` (a snapshot made of hard links to its
/// parent's files, off btrfs) at random commands of incremental streams,
/// and a stream cut in the middle: each resumes to the exact snapshot, and
/// the parent is left exactly as it was. `KILL_COUNT` receives per
/// filesystem (22: 88 as root, over a relatime tmpfs, ext4, xfs and
/// btrfs --plain; three in four killed).
#[test]
fn a_linked_receive_killed_or_cut_resumes_and_leaves_its_parent_alone() {
    killed_or_cut_in_mode("--link", 0x5eed_0033);
}

/// The same for `rreceive --in-place` (the parent's tree itself changed,
/// with what clones from the parent need kept aside): each resumes to the
/// exact snapshot.
#[test]
fn an_in_place_receive_killed_or_cut_resumes() {
    killed_or_cut_in_mode("--in-place", 0x5eed_0034);
}

/// Kills and cuts of incremental receives in `mode` (`--link` or
/// `--in-place`), each resumed and compared.
fn killed_or_cut_in_mode(mode: &str, seed: u64) {
    let linked = mode == "--link";
    let s = Setup::incremental();
    let count: usize = env_or("KILL_COUNT", 22) as usize;
    let mut rng = testkit::Rng(seed);
    let names = kill_scenarios();
    let tmpfs;
    let (ext4, xfs, btrfs);
    let mut places: Vec<(&str, PathBuf)> = vec![("dir", s.dir("mode-dir"))];
    if is_root() && testkit::kernel_available("a_receive_killed_or_cut_in_a_mode_resumes") {
        // relatime: a resume must not read the tree's directories'
        // atimes away (it once did, walking the tree for inodes).
        tmpfs = testkit::Tmpfs::new(512, "relatime");
        ext4 = testkit::ext4_image(512, &[], "noatime");
        xfs = testkit::xfs_image(512, "noatime");
        btrfs = testkit::BtrfsImage::new(512, &[], "noatime");
        places = vec![
            ("tmpfs relatime", tmpfs.mnt().to_path_buf()),
            ("ext4", ext4.mnt().to_path_buf()),
            ("xfs", xfs.mnt().to_path_buf()),
            // --plain: directories on btrfs, which --link and --in-place
            // then change (otherwise a real snapshot is taken).
            ("btrfs --plain", btrfs.mnt().to_path_buf()),
        ];
    }
    let mut failures = Vec::new();
    let mut done = 0;
    for (fs, root) in &places {
        PLAIN.with(|p| p.set(fs.starts_with("btrfs")));
        for i in 0..count {
            let n = &names[rng.below(names.len() as u64) as usize];
            let (p, c) = (format!("{n}.p"), format!("{n}.c"));
            let full = s.stream(&[&p], &s.file("l.stream")).unwrap();
            let incr = s.stream(&["-p", &p, &c], &s.file("l.stream")).unwrap();
            let (wp, wc) = if linked {
                (
                    without_nlink(&Manifest::committed(&p)),
                    without_nlink(&Manifest::committed(&c)),
                )
            } else {
                (Manifest::committed(&p), Manifest::committed(&c))
            };
            let dest = root.join(format!("l{i}"));
            std::fs::create_dir_all(&dest).unwrap();
            if let Err(e) = receive_whole(&s, &full, &dest, &p) {
                failures.push(format!("{fs} {p}: {e}"));
                continue;
            }
            let send = Send {
                snap: &c,
                want: &wc,
                flags: &[],
            };
            let f = frames(&incr);
            let r = if i % 4 == 3 {
                // Cut in the middle of a command after the first change (in
                // place, a cut before it gives the parent back): a stop.
                let at = (2 + rng.below(f.len().saturating_sub(2).max(1) as u64) as usize)
                    .min(f.len() - 1);
                let cut = Cut {
                    what: "inside a command",
                    at: f[at].0 + f[at].1 / 2,
                    applied: at as u64,
                };
                cut_and_resume_with(&s, &send, &incr, &cut, &dest, "mode", &[mode])
                    .map(|()| format!("cut in command {at}"))
            } else {
                let at = 1 + rng.below(f.len() as u64) as usize;
                let phase = rng.below(2);
                kill_and_resume_with(&s, &send, &incr, &dest, at, phase, &[mode])
                    .map(|()| format!("killed at command {at} (phase {phase})"))
            };
            // In place, the parent's tree became the snapshot.
            let parent_kept = |what: String| {
                if linked {
                    compare(&wp, &dest.join(&p))
                        .map_err(|e| format!("{what}: the parent changed: {e}"))
                } else {
                    Ok(())
                }
            };
            match r.and_then(parent_kept) {
                Ok(()) => done += 1,
                Err(e) => failures.push(format!(
                    "{fs}: rsend -p {p} {c} into rreceive {mode} ({} commands): {e}",
                    f.len()
                )),
            }
            unflag(&dest);
            let _ = std::fs::remove_dir_all(&dest);
        }
    }
    PLAIN.with(|p| p.set(false));
    println!("{done} {mode} receives killed or cut and resumed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// SIGKILL of `rreceive --fake-super` (owners, set-id bits and devices
/// recorded in an xattr) at random commands of full and incremental
/// streams onto tmpfs and ext4: each resumes to the snapshot as
/// --fake-super records it.
#[test]
fn a_fake_super_receive_killed_at_any_command_resumes() {
    FAKE_SUPER.with(|f| f.set(true));
    let s = Setup::incremental();
    let count: usize = std::env::var("KILL_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(13, |n: usize| n.div_ceil(4));
    let mut rng = testkit::Rng(0x5eed_0035);
    let names = kill_scenarios();
    let tmpfs;
    let ext4;
    let mut places: Vec<(&str, PathBuf)> = vec![("dir", s.dir("fake-dir"))];
    if is_root() && testkit::kernel_available("a_fake_super_receive_killed_at_any_command") {
        tmpfs = testkit::Tmpfs::new(512, "noatime");
        ext4 = testkit::ext4_image(512, &[], "noatime");
        places = vec![
            ("tmpfs", tmpfs.mnt().to_path_buf()),
            ("ext4", ext4.mnt().to_path_buf()),
        ];
    }
    let mut failures = Vec::new();
    let mut done = 0;
    for (fs, root) in &places {
        for i in 0..count * 2 {
            let n = &names[rng.below(names.len() as u64) as usize];
            let (p, c) = (format!("{n}.p"), format!("{n}.c"));
            let full = s.stream(&[&p], &s.file("f.stream")).unwrap();
            let incremental = i % 2 == 1;
            let incr = if incremental {
                s.stream(&["-p", &p, &c], &s.file("f.stream")).unwrap()
            } else {
                Vec::new()
            };
            let dest = root.join(format!("f{i}"));
            let streams = (p.as_str(), c.as_str(), full.as_slice(), incr.as_slice());
            match kill_one(&s, &mut rng, streams, incremental, &dest) {
                Ok(()) => done += 1,
                Err(e) => failures.push(format!("{fs}: {e}")),
            }
            unflag(&dest);
            let _ = std::fs::remove_dir_all(&dest);
        }
    }
    println!("{done} --fake-super receives killed and resumed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
