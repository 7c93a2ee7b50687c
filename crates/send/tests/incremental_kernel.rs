//! Incremental sends of every scenario of testdata/incremental next to the
//! real kernel and btrfs-progs (root, loop devices, the btrfs module; one
//! SKIP line otherwise, a failure under RSEND_REQUIRE_KERNEL=1).
//!
//! The scenario image (testdata/make-incremental.sh made it from
//! testdata/incremental/scenarios.sh) is attached read-only and mounted
//! read-only; with `RSEND_SCENARIO_LIVE=1` it is built afresh from
//! scenarios.sh on this kernel instead, and the snapshots' manifests are
//! taken from it. `RSEND_SCENARIOS="name ..."` checks only those scenarios
//! (`chain` names the chain). For every scenario the sender under test
//! makes the full stream of NAME.p and the incremental stream NAME.p ->
//! NAME.c, and:
//!
//! - `btrfs receive` onto a fresh btrfs, rreceive onto ext4, rreceive onto
//!   btrfs (subvolumes) and rreceive `--plain` onto btrfs each give both
//!   snapshots exactly (testdata/manifest.py --links: type, mode, owner,
//!   size, content, mtime and atime, xattrs, symlink target, rdev, nlink and
//!   hard-link groups; off btrfs the `btrfs.*` xattrs are left out, and
//!   rreceive's own `user.rreceive.*` everywhere);
//! - a separate test compares the sender's incremental streams with the
//!   kernel's `btrfs send -p`: bytes, TRUNCATE count, byte-identical or not,
//!   printed as a table; the sender may not need more bytes or TRUNCATEs;
//! - the chain: chain.0 in full and five incrementals in a row, received by
//!   every receiver, each snapshot equal to its source.
//!
//! THE SENDER is [`full_stream`] and [`incremental_stream`]:
//! `RSEND_SCENARIO_SENDER=kernel` makes them run `btrfs send` on the
//! read-only mount; by default (or `=rsend`) they run `rsend -d IMG [-p
//! PARENT] SUBVOL` on the image file. With the kernel as the sender the
//! suite checks itself (harness, fixture, receivers); the one thing it then
//! forgives is the kernel's known fault of leaving the root's mtime at the
//! time of the receive (testdata/incremental/kernel-findings.tsv), which
//! rsend must not have.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::scenarios::{self, only_root_mtime_differs, Manifest, SizeReport};
use testkit::{ext4_image, kernel_available, run, Attached, BtrfsImage, LoopImage};

// ---------------------------------------------------------------------------
// The sender under test

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sender {
    /// `btrfs send` of the read-only mount.
    Kernel,
    /// `rsend -d IMG` of the image file.
    Rsend,
}

/// `RSEND_SCENARIO_SENDER`: `kernel`, or `rsend` (the default).
fn sender() -> Sender {
    match std::env::var("RSEND_SCENARIO_SENDER").as_deref() {
        Ok("kernel") => Sender::Kernel,
        Ok("rsend") | Ok("") | Err(_) => Sender::Rsend,
        Ok(other) => panic!("RSEND_SCENARIO_SENDER={other}: kernel or rsend"),
    }
}

/// The full stream of snapshot `snap` (a path from the top level) by the
/// sender under test.
fn full_stream(src: &Source, snap: &str) -> Result<Vec<u8>, String> {
    match sender() {
        Sender::Kernel => src.kernel_send(None, snap),
        Sender::Rsend => src.rsend(None, snap),
    }
}

/// The incremental stream `parent` -> `child` by the sender under test:
/// `btrfs send -p` with RSEND_SCENARIO_SENDER=kernel, otherwise
/// `rsend -d IMG -p PARENT CHILD`.
fn incremental_stream(src: &Source, parent: &str, child: &str) -> Result<Vec<u8>, String> {
    match sender() {
        Sender::Kernel => src.kernel_send(Some(parent), child),
        Sender::Rsend => src.rsend(Some(parent), child),
    }
}

// ---------------------------------------------------------------------------
// The source filesystem

/// The scenario snapshots: an image file (what rsend reads) whose
/// filesystem is mounted read-only (what the kernel sends from).
struct Source {
    image: PathBuf,
    mnt: PathBuf,
    scratch: tempfile::TempDir,
    live: bool,
    /// Live mode: the manifests taken so far.
    manifests: Mutex<std::collections::BTreeMap<String, Manifest>>,
    // Unmounted before the directory holding the image goes.
    _attached: Attached,
    _dir: tempfile::TempDir,
}

impl Source {
    /// The committed scenario image, or with RSEND_SCENARIO_LIVE=1 one
    /// built now from scenarios.sh (as testdata/make-incremental.sh does:
    /// built, then copied frozen while the snapshot hooks hold their files).
    fn open() -> Source {
        let scratch = tempfile::Builder::new()
            .prefix("rsend-scenarios-")
            .tempdir()
            .unwrap();
        let dir = tempfile::Builder::new()
            .prefix("rsend-scenarios-img-")
            .tempdir()
            .unwrap();
        let live = std::env::var_os("RSEND_SCENARIO_LIVE").is_some_and(|v| v == "1");
        let image = if live {
            let img = BtrfsImage::new(512, &[], "noatime");
            let copy = dir.path().join("live.img");
            // Only the scenarios asked for, unless the chain is wanted too.
            let names = if scenarios::chain().is_empty() {
                scenarios::names().join(" ")
            } else {
                String::new()
            };
            let script = format!(
                "source {}; scenario_build_all {mnt} {names} >/dev/null; \
                 scenario_image_copy {mnt} {} {}",
                shell_quote(&scenarios::script()),
                shell_quote(img.image()),
                shell_quote(&copy),
                mnt = shell_quote(img.mnt()),
            );
            run(Command::new("bash")
                .args(["-euo", "pipefail", "-c", &script])
                .current_dir("/"));
            copy
        } else {
            scenarios::decompress_image(dir.path())
        };
        let mnt = dir.path().join("mnt");
        let attached = Attached::new(std::slice::from_ref(&image), &mnt, false, "noatime");
        Source {
            image,
            mnt,
            scratch,
            live,
            manifests: Mutex::default(),
            _attached: attached,
            _dir: dir,
        }
    }

    /// What `snap` holds: its committed manifest, or in live mode
    /// manifest.py of the snapshot just made.
    fn expected(&self, snap: &str) -> Manifest {
        if !self.live {
            return Manifest::committed(snap);
        }
        if let Some(m) = self.manifests.lock().unwrap().get(snap) {
            return m.clone();
        }
        let m = manifest_of_tree(&self.mnt.join(snap));
        self.manifests
            .lock()
            .unwrap()
            .insert(snap.to_owned(), m.clone());
        m
    }

    /// A file name in the scratch directory no other call uses (the
    /// scenarios run on several threads).
    fn scratch_file(&self, what: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        self.scratch.path().join(format!("{what}-{n}.stream"))
    }

    /// `btrfs send [-p PARENT] SNAP` on the read-only mount.
    fn kernel_send(&self, parent: Option<&str>, snap: &str) -> Result<Vec<u8>, String> {
        let out = self.scratch_file("kernel");
        let mut cmd = Command::new("btrfs");
        cmd.args(["-q", "send", "-f"]).arg(&out);
        if let Some(p) = parent {
            cmd.arg("-p").arg(self.mnt.join(p));
        }
        cmd.arg(self.mnt.join(snap));
        output_file(&mut cmd, &out)
    }

    /// `rsend -q -d IMG [-p PARENT] -f OUT SNAP` on the image file.
    fn rsend(&self, parent: Option<&str>, snap: &str) -> Result<Vec<u8>, String> {
        let out = self.scratch_file("rsend");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
        cmd.args(["-q", "-d"]).arg(&self.image);
        if let Some(p) = parent {
            cmd.args(["-p", p]);
        }
        cmd.arg("-f").arg(&out).arg(snap);
        output_file(&mut cmd, &out)
    }
}

/// Runs `cmd`, which writes the file `out`; its contents, or the failure.
fn output_file(cmd: &mut Command, out: &Path) -> Result<Vec<u8>, String> {
    let _ = std::fs::remove_file(out);
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd:?} failed with {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim_end()
        ));
    }
    let data = std::fs::read(out).map_err(|e| format!("{}: {e}", out.display()));
    let _ = std::fs::remove_file(out);
    data
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

fn manifest_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/manifest.py")
}

/// testdata/manifest.py --links of the tree at `dir`.
fn manifest_of_tree(dir: &Path) -> Manifest {
    let out = run(Command::new("python3")
        .arg(manifest_py())
        .arg("--links")
        .arg(dir));
    Manifest::parse(&String::from_utf8_lossy(&out.stdout))
}

// ---------------------------------------------------------------------------
// The receivers

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Receiver {
    /// `btrfs receive` onto btrfs.
    BtrfsReceive,
    /// rreceive onto ext4 (directories).
    RreceiveExt4,
    /// rreceive onto btrfs (subvolumes and snapshots).
    RreceiveBtrfs,
    /// `rreceive --plain` onto btrfs (directories).
    RreceiveBtrfsPlain,
}

const RECEIVERS: [Receiver; 4] = [
    Receiver::BtrfsReceive,
    Receiver::RreceiveExt4,
    Receiver::RreceiveBtrfs,
    Receiver::RreceiveBtrfsPlain,
];

impl Receiver {
    fn label(self) -> &'static str {
        match self {
            Receiver::BtrfsReceive => "btrfs-receive",
            Receiver::RreceiveExt4 => "rreceive-ext4",
            Receiver::RreceiveBtrfs => "rreceive-btrfs",
            Receiver::RreceiveBtrfsPlain => "rreceive-plain",
        }
    }

    /// Whether xattr `name` is one the receiver cannot or need not keep.
    fn ignores_xattr(self, name: &str) -> bool {
        name.starts_with("user.rreceive.")
            || (self == Receiver::RreceiveExt4 && name.starts_with("btrfs."))
    }
}

/// The destination filesystems: one btrfs for the three btrfs receivers
/// (a directory each), one ext4 (ea_inode: xattr values up to 64 KiB).
struct Dests {
    btrfs: BtrfsImage,
    ext4: LoopImage,
    rreceive: PathBuf,
}

impl Dests {
    fn new() -> Dests {
        Dests {
            btrfs: BtrfsImage::new(2048, &[], "noatime"),
            ext4: ext4_image(2048, &["-O", "ea_inode"], "noatime"),
            rreceive: rreceive_bin(),
        }
    }

    /// A fresh directory for receiving `what` with `r`.
    fn dir(&self, r: Receiver, what: &str) -> PathBuf {
        let root = match r {
            Receiver::RreceiveExt4 => self.ext4.mnt(),
            _ => self.btrfs.mnt(),
        };
        let d = root.join(r.label()).join(what);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Receives the stream in `file` into `dest` with `r`.
    fn receive(&self, r: Receiver, file: &Path, dest: &Path) -> Result<(), String> {
        let mut cmd = match r {
            Receiver::BtrfsReceive => {
                let mut c = Command::new("btrfs");
                c.args(["receive", "-q"]);
                c
            }
            _ => {
                let mut c = Command::new(&self.rreceive);
                c.arg("-q");
                if r == Receiver::RreceiveBtrfsPlain {
                    c.arg("--plain");
                }
                c
            }
        };
        cmd.arg("-f").arg(file).arg(dest);
        let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed with {}: {}",
                r.label(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim_end()
            ))
        }
    }
}

/// The rreceive binary: `$RRECEIVE_BIN`, else the workspace's
/// target/<profile>/rreceive next to this test's own directory, built
/// first with this test's cargo and profile when it is missing or older
/// than the sources it is made of.
fn rreceive_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RRECEIVE_BIN") {
        return PathBuf::from(p);
    }
    // This test runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in <target>/<profile>/deps")
        .to_owned();
    let bin = profile_dir.join("rreceive");
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let newest_source = [
        "crates/receive",
        "crates/stream",
        "crates/compress",
        "crates/dump",
    ]
    .iter()
    .map(|c| newest_mtime(&ws.join(c)))
    .chain([newest_mtime(&ws.join("Cargo.lock"))])
    .max()
    .flatten();
    if built.is_none() || newest_source > built {
        let cargo = std::env::var_os("CARGO")
            .or_else(|| option_env!("CARGO").map(Into::into))
            .unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "rreceive", "--bin", "rreceive"])
            .current_dir(&ws)
            .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap());
        if profile_dir.file_name() == Some(OsStr::new("release")) {
            cmd.arg("--release");
        }
        let ok = cmd.status().is_ok_and(|s| s.success());
        assert!(
            ok && bin.exists(),
            "cannot build {} ({cmd:?}); build it with `cargo build --release -p rreceive` \
             or point RRECEIVE_BIN at one",
            bin.display()
        );
    }
    bin
}

/// The newest modification time of any file under `p`.
fn newest_mtime(p: &Path) -> Option<std::time::SystemTime> {
    let md = std::fs::symlink_metadata(p).ok()?;
    if !md.is_dir() {
        return md.modified().ok();
    }
    std::fs::read_dir(p)
        .ok()?
        .flatten()
        .filter(|e| e.file_name() != "target")
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

// ---------------------------------------------------------------------------
// Comparing trees

/// `m` without the xattrs `r` cannot keep.
fn without_ignored_xattrs(m: &Manifest, r: Receiver) -> Manifest {
    let rows = m
        .rows
        .iter()
        .map(|row| {
            let mut cols: Vec<&str> = row.split('\t').collect();
            if cols.len() < 13 || cols[12] == "-" {
                return row.clone();
            }
            let kept: Vec<&str> = cols[12]
                .split(';')
                .filter(|x| !r.ignores_xattr(x.split('=').next().unwrap_or("")))
                .collect();
            let joined = if kept.is_empty() {
                "-".to_owned()
            } else {
                kept.join(";")
            };
            cols[12] = &joined;
            cols.join("\t")
        })
        .collect();
    Manifest {
        rows,
        skipped: m.skipped.clone(),
        links: m.links.clone(),
    }
}

/// Whether a manifest time (`SEC.NSEC`) is within the last hour: the time
/// of the receive.
fn recent(t: &str) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    t.parse::<f64>().is_ok_and(|t| (now - t).abs() < 3600.0)
}

/// The tree `r` made at `got` against snapshot `want`: Ok(None) when equal,
/// Ok(Some(note)) for the kernel's known root-mtime fault (only forgiven
/// when the kernel is the sender), Err(first difference) otherwise.
fn compare_received(want: &Manifest, got: &Path, r: Receiver) -> Result<Option<String>, String> {
    if !got.is_dir() {
        return Err(format!("{} was not made", got.display()));
    }
    let want = without_ignored_xattrs(want, r);
    let have = without_ignored_xattrs(&manifest_of_tree(got), r);
    match Manifest::difference(&want, &have) {
        None => Ok(None),
        Some(_) if sender() == Sender::Kernel && only_root_mtime_differs(&want, &have, recent) => {
            Ok(Some("root mtime = time of the receive".into()))
        }
        Some(d) => Err(d),
    }
}

/// `find DIR` (at most 40 lines), for failure messages.
fn listing(dir: &Path) -> String {
    let out = Command::new("find")
        .arg(dir)
        .args(["-printf", "    %y %m %P\\n"])
        .output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let text = text.unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut s = lines[..lines.len().min(40)].join("\n");
    if lines.len() > 40 {
        s.push_str(&format!("\n    ... {} more", lines.len() - 40));
    }
    s
}

/// Writes `stream` to a file in `dir` for the receivers to read.
fn stream_file(dir: &Path, name: &str, stream: &[u8]) -> PathBuf {
    let p = dir.join(format!("{name}.stream"));
    std::fs::write(&p, stream).unwrap();
    p
}

/// Receives the streams (file, snapshot it must give) in order with `r`
/// into `dest`; one status word, failures and notes pushed.
fn receive_and_compare(
    src: &Source,
    dests: &Dests,
    r: Receiver,
    dest: &Path,
    steps: &[(PathBuf, String)],
    failures: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> &'static str {
    let mut status = "ok";
    for (file, snap) in steps {
        let what = format!("{} {snap}", r.label());
        if let Err(e) = dests.receive(r, file, dest) {
            failures.push(format!("{what}: {e}"));
            return "FAIL";
        }
        match compare_received(
            &src.expected(snap),
            &dest.join(OsStr::from_bytes(snap.as_bytes())),
            r,
        ) {
            Ok(None) => {}
            Ok(Some(note)) => {
                notes.push(format!("{what}: {note}"));
                status = "note";
            }
            Err(d) => {
                failures.push(format!(
                    "{what}: received tree differs from the snapshot: {d}\n  {} holds:\n{}",
                    dest.display(),
                    listing(dest)
                ));
                return "FAIL";
            }
        }
    }
    status
}

// ---------------------------------------------------------------------------
// The tests

/// Held by each test for its whole run: two copies of the scenario image
/// (one fsid) attached and mounted at once, next to fresh loop devices
/// being set up, made the kernel find the wrong filesystem on a loop
/// device now and then ("belongs to fsid ..., and the fs is already
/// mounted").
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one scenario gave: its table row, failures and notes.
#[derive(Default)]
struct Outcome {
    row: String,
    failures: Vec<String>,
    notes: Vec<String>,
}

/// Sends scenario `name` with the sender under test and receives it with
/// every receiver.
fn check_scenario(src: &Source, dests: &Dests, streams: &Path, name: &str) -> Outcome {
    let mut out = Outcome::default();
    let (p, c) = (format!("{name}.p"), format!("{name}.c"));
    let (full, incr) = match (full_stream(src, &p), incremental_stream(src, &p, &c)) {
        (Ok(f), Ok(i)) => (f, i),
        (f, i) => {
            for e in [f.err(), i.err()].into_iter().flatten() {
                out.failures.push(format!("{name}: send: {e}"));
            }
            out.row = format!("{name:<50} {:>15}", "SEND FAILED");
            return out;
        }
    };
    let steps = [
        (stream_file(streams, &format!("{name}.full"), &full), p),
        (stream_file(streams, &format!("{name}.incr"), &incr), c),
    ];
    out.row = format!("{name:<50} ");
    for r in RECEIVERS {
        let dest = dests.dir(r, name);
        let status = receive_and_compare(
            src,
            dests,
            r,
            &dest,
            &steps,
            &mut out.failures,
            &mut out.notes,
        );
        out.row.push_str(&format!("{status:>15}"));
    }
    for (f, _) in &steps {
        let _ = std::fs::remove_file(f);
    }
    out
}

#[test]
fn every_scenario_received_by_btrfs_receive_and_rreceive_gives_parent_and_child() {
    let test = "every_scenario_received_by_btrfs_receive_and_rreceive_gives_parent_and_child";
    if !kernel_available(test) {
        return;
    }
    let _serial = one_at_a_time();
    let started = std::time::Instant::now();
    let src = Source::open();
    let dests = Dests::new();
    let streams = tempfile::tempdir().unwrap();
    let names = scenarios::names();
    // Two workers: most of the time goes to waiting for processes.
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get(i) else { break };
                let o = check_scenario(&src, &dests, streams.path(), name);
                done.lock().unwrap().push((i, o));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _)| *i);
    let mut table = vec![format!(
        "{:<50} {}",
        "scenario",
        RECEIVERS.map(|r| format!("{:>15}", r.label())).join("")
    )];
    let (mut failures, mut notes) = (Vec::new(), Vec::new());
    for (_, o) in done {
        table.push(o.row);
        failures.extend(o.failures);
        notes.extend(o.notes);
    }
    println!("sender: {:?}\n{}", sender(), table.join("\n"));
    if !notes.is_empty() {
        println!(
            "known kernel faults (forgiven only with the kernel as the sender):\n{}",
            notes.join("\n")
        );
    }
    println!("{} scenarios in {:.0?}", names.len(), started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sender_streams_have_no_more_bytes_or_truncates_than_the_kernels() {
    let test = "sender_streams_have_no_more_bytes_or_truncates_than_the_kernels";
    if !kernel_available(test) {
        return;
    }
    let _serial = one_at_a_time();
    let src = Source::open();
    let mut pairs: Vec<(String, String, String)> = scenarios::names()
        .into_iter()
        .map(|n| (format!("{n}.p"), format!("{n}.c"), n))
        .collect();
    for w in scenarios::chain().windows(2) {
        pairs.push((w[0].clone(), w[1].clone(), w[1].clone()));
    }
    let mut errors = Vec::new();
    let mut sizes = SizeReport::default();
    for (p, c, name) in &pairs {
        let (ours, kernel) = match (incremental_stream(&src, p, c), src.kernel_send(Some(p), c)) {
            (Ok(o), Ok(k)) => (o, k),
            (o, k) => {
                for e in [o.err(), k.err()].into_iter().flatten() {
                    errors.push(format!("{name}: {e}"));
                }
                continue;
            }
        };
        sizes.add(name, &ours, &kernel);
    }
    let larger = sizes.finish(&format!("{:?}", sender()));
    assert!(errors.is_empty(), "sends failed:\n{}", errors.join("\n"));
    assert!(
        larger.is_empty(),
        "more bytes or TRUNCATEs than the kernel's btrfs send -p:\n{}",
        larger.join("\n")
    );
}

#[test]
fn five_incrementals_in_a_row_received_onto_btrfs_and_ext4_give_every_snapshot() {
    let test = "five_incrementals_in_a_row_received_onto_btrfs_and_ext4_give_every_snapshot";
    if !kernel_available(test) {
        return;
    }
    let _serial = one_at_a_time();
    let chain = scenarios::chain();
    if chain.is_empty() {
        println!("RSEND_SCENARIOS leaves the chain out");
        return;
    }
    let src = Source::open();
    let dests = Dests::new();
    let streams = tempfile::tempdir().unwrap();
    let mut steps = Vec::new();
    let mut failures = Vec::new();
    for (k, snap) in chain.iter().enumerate() {
        let stream = if k == 0 {
            full_stream(&src, snap)
        } else {
            incremental_stream(&src, &chain[k - 1], snap)
        };
        match stream {
            Ok(s) => steps.push((stream_file(streams.path(), snap, &s), snap.clone())),
            Err(e) => failures.push(format!("{snap}: send: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let mut notes = Vec::new();
    let mut table = Vec::new();
    for r in RECEIVERS {
        let dest = dests.dir(r, "chain");
        let status = receive_and_compare(&src, &dests, r, &dest, &steps, &mut failures, &mut notes);
        table.push(format!("{:<16} {status}", r.label()));
    }
    println!(
        "sender: {:?}, chain.0 .. chain.5\n{}",
        sender(),
        table.join("\n")
    );
    if !notes.is_empty() {
        println!("known kernel faults:\n{}", notes.join("\n"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
