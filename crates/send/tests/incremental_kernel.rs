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
//!   every receiver, each snapshot equal to its source;
//! - the clone scenarios ([`CLONE_SCENARIOS`]) received onto btrfs by
//!   `btrfs receive` and rreceive: every pair of blocks that share an extent
//!   in the source (within NAME.p for the full stream; within NAME.c and
//!   across NAME.c and NAME.p for the incremental) must share one at the
//!   destination (common/sharing.rs), but for [`SHARING_EXCEPTIONS`].
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

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::receivers::{listing, manifest_of_tree, output_file, rreceive_bin, Receiver};
use common::scenarios::{self, Manifest, SizeReport};
use common::sharing::{self, Exception, Sharing, TreeBlocks, RULE_SAME_FILE, RULE_UNALIGNED_END};
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

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

// ---------------------------------------------------------------------------
// The receivers

const RECEIVERS: [Receiver; 4] = [
    Receiver::BtrfsReceive,
    Receiver::RreceiveExt4,
    Receiver::RreceiveBtrfs,
    Receiver::RreceiveBtrfsPlain,
];

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
        r.receive(&self.rreceive, file, dest)
    }
}

// ---------------------------------------------------------------------------
// Receiving and comparing trees

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
        match r.compare_received(
            &src.expected(snap),
            &dest.join(OsStr::from_bytes(snap.as_bytes())),
            sender() == Sender::Kernel,
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

// ---------------------------------------------------------------------------
// Extent sharing of the clone scenarios

/// The scenarios whose snapshots share extents (reflinks, clones within a
/// file, dedupe): their received snapshots must share them too.
const CLONE_SCENARIOS: &[&str] = &[
    "btrfs_094_clone_into_new_file",
    "btrfs_097_clone_to_lower_offset",
    "btrfs_108_reflink_then_overwrite_and_punch",
    "btrfs_109_compressed_reflink",
    "btrfs_117_reflink_deep_path",
    "btrfs_130_one_extent_many_refs",
    "btrfs_149_clone_one_sector",
    "btrfs_189_clone_unaligned_eof",
    "btrfs_200_intra_file_clone",
    "btrfs_203_self_clone_grown_file",
    "btrfs_229_overlapping_self_clones",
    "btrfs_283_reflinks_share_best_source",
    "btrfs_319_reflink_unaligned_eof",
    "btrfs_322_truncate_to_zero_then_reflink",
];

/// Blocks of those scenarios that share in the source but that the kernel
/// writes by its rules (see crates/send/tests/clone_kernel.rs for the
/// rules at work in testdata/clone).
const SHARING_EXCEPTIONS: &[Exception] = &[
    Exception {
        scenario: "btrfs_189_clone_unaligned_eof",
        snapshot: "btrfs_189_clone_unaligned_eof.c",
        path: "bar",
        start: 655360,
        end: 729088,
        rule: RULE_UNALIGNED_END,
    },
    Exception {
        scenario: "btrfs_203_self_clone_grown_file",
        snapshot: "btrfs_203_self_clone_grown_file.c",
        path: "foobar",
        start: 524288,
        end: 655360,
        rule: RULE_SAME_FILE,
    },
];

/// `sharing::check` of both sends of scenario `name` (full NAME.p, then
/// NAME.p -> NAME.c) received under `dest`.
fn scenario_sharing(
    src: &Source,
    dest: &Path,
    name: &str,
    exceptions: &[Exception],
) -> Result<Vec<Sharing>, String> {
    let (p, c) = (format!("{name}.p"), format!("{name}.c"));
    let maps = |root: &Path| -> Result<BTreeMap<String, TreeBlocks>, String> {
        [&p, &c]
            .into_iter()
            .map(|s| sharing::tree_blocks(&root.join(s)).map(|t| (s.clone(), t)))
            .collect()
    };
    let (src_blocks, dst_blocks) = (maps(&src.mnt)?, maps(dest)?);
    Ok(vec![
        sharing::check(&p, &[], &src_blocks, &dst_blocks, exceptions)?,
        sharing::check(&c, &[p.as_str()], &src_blocks, &dst_blocks, exceptions)?,
    ])
}

#[test]
fn clone_scenarios_received_onto_btrfs_keep_every_shared_extent_shared() {
    let test = "clone_scenarios_received_onto_btrfs_keep_every_shared_extent_shared";
    if !kernel_available(test) {
        return;
    }
    let _serial = one_at_a_time();
    let names: Vec<String> = scenarios::names()
        .into_iter()
        .filter(|n| CLONE_SCENARIOS.contains(&n.as_str()))
        .collect();
    if names.is_empty() {
        println!("RSEND_SCENARIOS leaves the clone scenarios out");
        return;
    }
    let src = Source::open();
    // btrfs receive finds parents by received uuid anywhere on its
    // filesystem: one of its own, so it cannot pick rreceive's copy.
    let btrfs_receive = Dests::new();
    let rreceive = Dests::new();
    let streams = tempfile::tempdir().unwrap();
    let mut table = Vec::new();
    let mut failures = Vec::new();
    let mut needed = std::collections::BTreeSet::new();
    for name in &names {
        let (p, c) = (format!("{name}.p"), format!("{name}.c"));
        let steps = match (full_stream(&src, &p), incremental_stream(&src, &p, &c)) {
            (Ok(f), Ok(i)) => [
                stream_file(streams.path(), &format!("{name}.full"), &f),
                stream_file(streams.path(), &format!("{name}.incr"), &i),
            ],
            (f, i) => {
                for e in [f.err(), i.err()].into_iter().flatten() {
                    failures.push(format!("{name}: send: {e}"));
                }
                continue;
            }
        };
        let exceptions: Vec<(usize, Exception)> = SHARING_EXCEPTIONS
            .iter()
            .enumerate()
            .filter(|(_, e)| e.scenario == name.as_str())
            .map(|(i, e)| (i, *e))
            .collect();
        let local: Vec<Exception> = exceptions.iter().map(|(_, e)| *e).collect();
        let mut row = format!("{name:<45}");
        for (r, dests) in [
            (Receiver::BtrfsReceive, &btrfs_receive),
            (Receiver::RreceiveBtrfs, &rreceive),
        ] {
            let dest = dests.dir(r, name);
            let received = steps
                .iter()
                .try_for_each(|f| dests.receive(r, f, &dest))
                .and_then(|()| scenario_sharing(&src, &dest, name, &local));
            match received {
                Ok(per_send) => {
                    let mut total = Sharing::default();
                    for (k, sh) in per_send.iter().enumerate() {
                        if !sh.lost.is_empty() {
                            failures.push(format!(
                                "{} {name} {}: {} kept; sharing lost at: {}",
                                r.label(),
                                ["full", "incremental"][k],
                                sh.summary(),
                                sh.lost.join("; ")
                            ));
                        }
                        needed.extend(sh.needed.iter().map(|&i| exceptions[i].0));
                        total.add(sh);
                    }
                    row.push_str(&format!(" {:<40}", total.summary()));
                }
                Err(e) => {
                    failures.push(format!("{} {name}: {e}", r.label()));
                    row.push_str(&format!(" {:<40}", "FAIL"));
                }
            }
        }
        table.push(row);
    }
    println!(
        "sender: {:?}; source-shared blocks of the sent snapshots still shared after the receive\n{:<45} {:<40} {:<40}\n{}",
        sender(),
        "scenario",
        "btrfs-receive",
        "rreceive-btrfs",
        table.join("\n")
    );
    for (i, e) in SHARING_EXCEPTIONS.iter().enumerate() {
        if !names.iter().any(|n| n == e.scenario) {
            continue;
        }
        if needed.contains(&i) {
            println!(
                "exception {}/{} [{}, {}): {}",
                e.snapshot, e.path, e.start, e.end, e.rule
            );
        } else if sender() == Sender::Kernel {
            failures.push(format!(
                "exception {}/{} [{}, {}) ({}) is stale: the kernel keeps those blocks shared",
                e.snapshot, e.path, e.start, e.end, e.rule
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "extent sharing lost (the kernel as the sender keeps all of it but the exceptions):\n{}",
        failures.join("\n")
    );
}
