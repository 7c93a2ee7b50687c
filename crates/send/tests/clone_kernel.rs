//! Clone search against the real kernel (root, loop devices, the btrfs
//! module; one SKIP line otherwise, a failure under RSEND_REQUIRE_KERNEL=1):
//! the scenarios of testdata/clone (testdata/make-clone.sh made them from
//! testdata/clone/scenarios.sh: one image, the kernel's stream of every
//! send, a manifest of every snapshot).
//!
//! The image is attached and mounted read-only. For each sender -- the
//! committed kernel streams, and rsend run now on the image file with the
//! same arguments (`rsend -d IMG [-p P] [-c C]... SNAP`) -- every
//! scenario's sends are replayed in order onto fresh filesystems by
//! `btrfs receive` (btrfs), rreceive (btrfs) and rreceive (ext4), and:
//!
//! - every received snapshot must equal its manifest (testdata/manifest.py
//!   --links; off btrfs without the `btrfs.*` xattrs);
//! - on the two btrfs destinations, SHARING: every pair of file blocks that
//!   share an extent in the snapshots a send can see (the one sent, its
//!   parent, its -c sources) must share one after the receive
//!   (common/sharing.rs, FIEMAP on both sides), except for the blocks of
//!   [`EXCEPTIONS`], which the kernel writes by its rules; each exception
//!   must be needed by the kernel's streams (else it is stale);
//! - rsend's stream of each send may not be larger than the kernel's;
//! - rsend's SNAPSHOT must name the parent the kernel's does (for `-c`
//!   without `-p`, btrfs-progs' find_good_parent).
//!
//! Everything is sent and received once, by whichever test asks first; the
//! tests then check their part. `RSEND_SCENARIO_SENDER=kernel` (or `rsend`)
//! runs one sender only; `RSEND_CLONE_SCENARIOS="name ..."` some
//! scenarios only.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use common::clone::{self, received_name, Send};
use common::receivers::{listing, rreceive_bin, Receiver};
use common::sharing::{
    self, Exception, Sharing, TreeBlocks, RULE_149, RULE_COMPRESSED, RULE_EOF, RULE_ITEM_START,
};
use testkit::{ext4_image, kernel_available, Attached, BtrfsImage, LoopImage};

// ---------------------------------------------------------------------------
// What the kernel's rules make it write

/// Blocks that share an extent in the source but that the kernel writes
/// (or clones from a copy that does not share with all of them).
const EXCEPTIONS: &[Exception] = &[
    Exception {
        scenario: "reflink_within_one_file",
        snapshot: "reflink_within_one_file.s",
        path: "a",
        start: 196608,
        end: 262144,
        rule: RULE_ITEM_START,
    },
    Exception {
        scenario: "clone_ends_at_unaligned_eof",
        snapshot: "clone_ends_at_unaligned_eof.s",
        path: "mid",
        start: 131072,
        end: 167936,
        rule: RULE_EOF,
    },
    Exception {
        scenario: "one_sector_clone_from_offset_zero",
        snapshot: "one_sector_clone_from_offset_zero.s",
        path: "f",
        start: 0,
        end: 4096,
        rule: RULE_149,
    },
    Exception {
        scenario: "btrfs_038_clone_source_compressed_offset",
        snapshot: "btrfs_038_clone_source_compressed_offset.s2",
        path: "foo",
        start: 262144,
        end: 278528,
        rule: RULE_COMPRESSED,
    },
    Exception {
        scenario: "btrfs_191_dedupe_into_both_snapshots",
        snapshot: "btrfs_191_dedupe_into_both_snapshots.s2",
        path: "bar",
        start: 524288,
        end: 1048576,
        rule: RULE_ITEM_START,
    },
];

// ---------------------------------------------------------------------------
// Senders and receivers

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Sender {
    /// The committed streams `btrfs send` made.
    Kernel,
    /// `rsend -d IMG` of the image file, now.
    Rsend,
}

/// The senders to check: both, or the one `RSEND_SCENARIO_SENDER` names.
fn senders() -> Vec<Sender> {
    match std::env::var("RSEND_SCENARIO_SENDER").as_deref() {
        Ok("kernel") => vec![Sender::Kernel],
        Ok("rsend") => vec![Sender::Rsend],
        Ok("") | Err(_) => vec![Sender::Kernel, Sender::Rsend],
        Ok(other) => panic!("RSEND_SCENARIO_SENDER={other}: kernel or rsend"),
    }
}

const RECEIVERS: [Receiver; 3] = [
    Receiver::BtrfsReceive,
    Receiver::RreceiveBtrfs,
    Receiver::RreceiveExt4,
];

/// Whether `r` keeps extents shared (so sharing is checked).
fn shares(r: Receiver) -> bool {
    r != Receiver::RreceiveExt4
}

/// Fresh destinations for one sender. `btrfs receive` finds parents and
/// clone sources by received uuid anywhere on its filesystem, so it gets
/// one of its own; rreceive looks only in its destination directory.
struct Dests {
    btrfs_receive: BtrfsImage,
    rreceive_btrfs: BtrfsImage,
    ext4: LoopImage,
    rreceive: PathBuf,
}

impl Dests {
    fn new() -> Dests {
        Dests {
            btrfs_receive: BtrfsImage::new(1024, &[], "noatime"),
            rreceive_btrfs: BtrfsImage::new(1024, &[], "noatime"),
            ext4: ext4_image(1024, &["-O", "ea_inode"], "noatime"),
            rreceive: rreceive_bin(),
        }
    }

    fn dir(&self, r: Receiver, scenario: &str) -> PathBuf {
        let root = match r {
            Receiver::BtrfsReceive | Receiver::BtrfsReceiveDecompressed => self.btrfs_receive.mnt(),
            Receiver::RreceiveBtrfs | Receiver::RreceiveBtrfsPlain => self.rreceive_btrfs.mnt(),
            Receiver::RreceiveExt4 => self.ext4.mnt(),
        };
        let d = root.join(scenario);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn receive(&self, r: Receiver, file: &Path, dest: &Path) -> Result<(), String> {
        r.receive(&self.rreceive, file, dest)
    }
}

// ---------------------------------------------------------------------------
// One run of everything

/// What one scenario gave with one sender.
#[derive(Default)]
struct Outcome {
    scenario: String,
    /// Per receiver: "ok", "FAIL", or "note" (a known kernel fault).
    status: Vec<&'static str>,
    /// Per btrfs receiver (label), the scenario's sharing.
    sharing: Vec<(&'static str, Sharing)>,
    /// Wrong trees, failed sends and receives, a wrong parent.
    tree_failures: Vec<String>,
    /// Lost sharing.
    sharing_failures: Vec<String>,
    /// Known kernel faults forgiven.
    notes: Vec<String>,
    /// (send, sender bytes, kernel bytes).
    sizes: Vec<(Send, usize, u64)>,
    /// Indices into EXCEPTIONS needed by some btrfs receiver.
    needed: BTreeSet<usize>,
}

struct Results {
    by_sender: BTreeMap<Sender, Vec<Outcome>>,
    checked: Vec<usize>,
}

/// The source: the image file (what rsend reads), attached and mounted
/// read-only (where the source's extents are mapped).
struct Source {
    image: PathBuf,
    mnt: PathBuf,
    // Unmounted before the directory holding the image goes.
    _attached: Attached,
    _dir: tempfile::TempDir,
}

impl Source {
    fn open() -> Source {
        let dir = tempfile::Builder::new()
            .prefix("rsend-clone-img-")
            .tempdir()
            .unwrap();
        let image = clone::decompress_image(dir.path());
        let mnt = dir.path().join("mnt");
        let attached = Attached::new(std::slice::from_ref(&image), &mnt, false, "noatime");
        Source {
            image,
            mnt,
            _attached: attached,
            _dir: dir,
        }
    }
}

/// Every snapshot the sends of a scenario name.
fn snapshots_of(sends: &[Send]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in sends {
        for x in s.others().into_iter().chain([s.snapshot()]) {
            if !v.iter().any(|y| y == x) {
                v.push(x.to_owned());
            }
        }
    }
    v
}

/// The block maps of `snaps` under `root` (received names under a
/// destination when `received`).
fn block_maps(
    root: &Path,
    snaps: &[String],
    received: bool,
) -> Result<BTreeMap<String, TreeBlocks>, String> {
    snaps
        .iter()
        .map(|s| {
            let dir = if received {
                root.join(received_name(s))
            } else {
                root.join(s)
            };
            sharing::tree_blocks(&dir).map(|t| (s.clone(), t))
        })
        .collect()
}

/// Sends scenario `name` with `sender`, receives it with every receiver,
/// checks trees and sharing.
fn check_scenario(
    sender: Sender,
    src: &Source,
    src_blocks: &BTreeMap<String, TreeBlocks>,
    dests: &Dests,
    scratch: &Path,
    name: &str,
    sends: &[Send],
) -> Outcome {
    let mut out = Outcome {
        scenario: name.to_owned(),
        ..Outcome::default()
    };
    let label = format!("{sender:?}").to_lowercase();
    let mut files = Vec::new();
    for s in sends {
        let kernel = clone::kernel_stream(s);
        let stream = match sender {
            Sender::Kernel => kernel.clone(),
            Sender::Rsend => {
                let tmp = scratch.join(format!("{}.rsend.tmp", s.name()));
                match clone::rsend_stream(&src.image, s, &tmp) {
                    Ok(st) => st,
                    Err(e) => {
                        out.tree_failures
                            .push(format!("{name} send {}: {e}", s.index));
                        out.status = vec!["SEND FAILED"; RECEIVERS.len()];
                        return out;
                    }
                }
            }
        };
        if clone::stream_parent(&stream) != clone::stream_parent(&kernel) {
            out.tree_failures.push(format!(
                "{name} send {} ({}): the stream's parent is {:?}, the kernel's {:?} ({})",
                s.index,
                s.args_line(),
                clone::stream_parent(&stream),
                clone::stream_parent(&kernel),
                s.parent.as_deref().unwrap_or("full send")
            ));
        }
        out.sizes.push((s.clone(), stream.len(), s.kernel_bytes));
        let f = scratch.join(format!("{}.{label}.stream", s.name()));
        std::fs::write(&f, &stream).unwrap();
        files.push(f);
    }
    let exceptions: Vec<(usize, Exception)> = EXCEPTIONS
        .iter()
        .enumerate()
        .filter(|(_, e)| e.scenario == name)
        .map(|(i, e)| (i, *e))
        .collect();
    let local: Vec<Exception> = exceptions.iter().map(|(_, e)| *e).collect();
    let snaps = snapshots_of(sends);
    for r in RECEIVERS {
        let dest = dests.dir(r, name);
        let mut status = "ok";
        for (s, f) in sends.iter().zip(&files) {
            let what = format!(
                "{label} -> {} {name} send {} ({})",
                r.label(),
                s.index,
                s.args_line()
            );
            if let Err(e) = dests.receive(r, f, &dest) {
                out.tree_failures.push(format!("{what}: {e}"));
                status = "FAIL";
                break;
            }
            let got = dest.join(received_name(s.snapshot()));
            match r.compare_received(
                &clone::manifest(s.snapshot()),
                &got,
                sender == Sender::Kernel,
            ) {
                Ok(None) => {}
                Ok(Some(note)) => {
                    out.notes.push(format!("{what}: {note}"));
                    status = "note";
                }
                Err(d) => {
                    out.tree_failures.push(format!(
                        "{what}: received tree differs from the snapshot: {d}\n  {} holds:\n{}",
                        dest.display(),
                        listing(&dest)
                    ));
                    status = "FAIL";
                    break;
                }
            }
        }
        out.status.push(status);
        if !shares(r) || status == "FAIL" {
            continue;
        }
        let dst_blocks = match block_maps(&dest, &snaps, true) {
            Ok(m) => m,
            Err(e) => {
                out.sharing_failures
                    .push(format!("{label} -> {}: {e}", r.label()));
                continue;
            }
        };
        let mut total = Sharing::default();
        for s in sends {
            match sharing::check(s.snapshot(), &s.others(), src_blocks, &dst_blocks, &local) {
                Ok(sh) => {
                    if !sh.lost.is_empty() {
                        out.sharing_failures.push(format!(
                            "{label} -> {} {name} send {} ({}): {} kept; sharing lost at: {}",
                            r.label(),
                            s.index,
                            s.args_line(),
                            sh.summary(),
                            sh.lost.join("; ")
                        ));
                    }
                    out.needed
                        .extend(sh.needed.iter().map(|&i| exceptions[i].0));
                    total.add(&sh);
                }
                Err(e) => out
                    .sharing_failures
                    .push(format!("{label} -> {}: {e}", r.label())),
            }
        }
        out.sharing.push((r.label(), total));
    }
    out
}

fn run_all() -> Results {
    let sends = clone::sends();
    let scenarios = clone::by_scenario(&sends);
    let src = Source::open();
    let src_blocks: Vec<BTreeMap<String, TreeBlocks>> = scenarios
        .iter()
        .map(|(n, s)| {
            block_maps(&src.mnt, &snapshots_of(s), false)
                .unwrap_or_else(|e| panic!("{n}: source block maps: {e}"))
        })
        .collect();
    let checked: Vec<usize> = EXCEPTIONS
        .iter()
        .enumerate()
        .filter(|(_, e)| scenarios.iter().any(|(n, _)| *n == e.scenario))
        .map(|(i, _)| i)
        .collect();
    let mut by_sender = BTreeMap::new();
    for sender in senders() {
        let dests = Dests::new();
        let scratch = tempfile::tempdir().unwrap();
        let next = AtomicUsize::new(0);
        let done = Mutex::new(Vec::new());
        // Two workers: most of the time goes to waiting for processes.
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((name, sends)) = scenarios.get(i) else {
                        break;
                    };
                    let o = check_scenario(
                        sender,
                        &src,
                        &src_blocks[i],
                        &dests,
                        scratch.path(),
                        name,
                        sends,
                    );
                    done.lock().unwrap().push((i, o));
                });
            }
        });
        let mut done = done.into_inner().unwrap();
        done.sort_by_key(|(i, _)| *i);
        by_sender.insert(sender, done.into_iter().map(|(_, o)| o).collect());
    }
    Results { by_sender, checked }
}

static RESULTS: OnceLock<Result<Results, String>> = OnceLock::new();

/// Everything sent and received once (the first test to ask runs it).
fn results() -> &'static Results {
    let r = RESULTS.get_or_init(|| {
        let started = std::time::Instant::now();
        let r = std::panic::catch_unwind(run_all).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".into())
        });
        println!(
            "clone scenarios sent and received in {:.0?}",
            started.elapsed()
        );
        r
    });
    match r {
        Ok(r) => r,
        Err(e) => panic!("the clone scenario run failed: {e}"),
    }
}

/// The outcomes of `sender` for test `test`, or None (with a line saying
/// so) when the kernel cannot run the test or RSEND_SCENARIO_SENDER leaves
/// the sender out.
fn outcomes(test: &str, sender: Sender) -> Option<&'static [Outcome]> {
    if !kernel_available(test) {
        return None;
    }
    let r = results().by_sender.get(&sender).map(Vec::as_slice);
    if r.is_none() {
        println!("RSEND_SCENARIO_SENDER leaves {sender:?} out");
    }
    r
}

/// The table of trees and sharing of one sender.
fn print_table(sender: Sender, outs: &[Outcome]) {
    println!("sender: {sender:?}");
    println!(
        "{:<42} {:>14} {:>14} {:>14}   sharing kept (btrfs-receive | rreceive-btrfs)",
        "scenario",
        RECEIVERS[0].label(),
        RECEIVERS[1].label(),
        RECEIVERS[2].label()
    );
    for o in outs {
        let sh: Vec<String> = o.sharing.iter().map(|(_, s)| s.summary()).collect();
        println!(
            "{:<42} {:>14} {:>14} {:>14}   {}",
            o.scenario,
            o.status.first().copied().unwrap_or("-"),
            o.status.get(1).copied().unwrap_or("-"),
            o.status.get(2).copied().unwrap_or("-"),
            sh.join(" | ")
        );
    }
    let notes: Vec<&String> = outs.iter().flat_map(|o| &o.notes).collect();
    if !notes.is_empty() {
        println!("known kernel faults (forgiven for the kernel's streams only):");
        for n in notes {
            println!("  {n}");
        }
    }
}

// ---------------------------------------------------------------------------
// The tests

#[test]
fn kernel_streams_received_in_order_give_every_snapshot_and_keep_every_shared_extent_shared() {
    let Some(outs) = outcomes(
        "kernel_streams_received_in_order_give_every_snapshot_and_keep_every_shared_extent_shared",
        Sender::Kernel,
    ) else {
        return;
    };
    print_table(Sender::Kernel, outs);
    let mut failures: Vec<String> = Vec::new();
    for o in outs {
        failures.extend(o.tree_failures.iter().cloned());
        failures.extend(o.sharing_failures.iter().cloned());
        let shared: usize = o.sharing.iter().map(|(_, s)| s.blocks + s.excepted).sum();
        if shared == 0 && o.tree_failures.is_empty() {
            failures.push(format!(
                "{}: no block of any sent snapshot shares an extent in the source (the fixture lost its point)",
                o.scenario
            ));
        }
    }
    let needed: BTreeSet<usize> = outs.iter().flat_map(|o| o.needed.iter().copied()).collect();
    for &i in &results().checked {
        let e = &EXCEPTIONS[i];
        if needed.contains(&i) {
            println!(
                "exception {}/{} [{}, {}): {}",
                e.snapshot, e.path, e.start, e.end, e.rule
            );
        } else {
            failures.push(format!(
                "exception {}/{} [{}, {}) ({}) is stale: the kernel's streams keep those blocks shared",
                e.snapshot, e.path, e.start, e.end, e.rule
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn rsend_streams_received_in_order_give_every_snapshot() {
    let Some(outs) = outcomes(
        "rsend_streams_received_in_order_give_every_snapshot",
        Sender::Rsend,
    ) else {
        return;
    };
    print_table(Sender::Rsend, outs);
    let failures: Vec<&str> = outs
        .iter()
        .flat_map(|o| &o.tree_failures)
        .map(String::as_str)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn rsend_streams_keep_every_shared_extent_shared() {
    let Some(outs) = outcomes(
        "rsend_streams_keep_every_shared_extent_shared",
        Sender::Rsend,
    ) else {
        return;
    };
    let mut lines = Vec::new();
    let (mut blocks, mut kept) = (0, 0);
    for o in outs {
        for (r, s) in &o.sharing {
            blocks += s.blocks;
            kept += s.kept;
            lines.push(format!("{:<42} {:<15} {}", o.scenario, r, s.summary()));
        }
    }
    println!(
        "rsend: source-shared blocks still shared after the receive\n{}",
        lines.join("\n")
    );
    let failures: Vec<&str> = outs
        .iter()
        .flat_map(|o| &o.sharing_failures)
        .map(String::as_str)
        .collect();
    assert!(
        failures.is_empty(),
        "rsend's streams lose extent sharing the kernel's keep ({kept} of {blocks} source-shared \
         blocks kept over all scenarios and both btrfs receivers):\n{}",
        failures.join("\n")
    );
}

#[test]
fn rsend_streams_are_no_larger_than_the_kernels() {
    let Some(outs) = outcomes(
        "rsend_streams_are_no_larger_than_the_kernels",
        Sender::Rsend,
    ) else {
        return;
    };
    let mut rows = vec![format!(
        "{:<46} {:>10} {:>10} {:>7}  args",
        "send", "rsend", "kernel", "ratio"
    )];
    let mut larger = Vec::new();
    let (mut ours_total, mut kernel_total) = (0u64, 0u64);
    for o in outs {
        for (s, ours, kernel) in &o.sizes {
            ours_total += *ours as u64;
            kernel_total += kernel;
            rows.push(format!(
                "{:<46} {:>10} {:>10} {:>7.2}  {}",
                s.name(),
                ours,
                kernel,
                *ours as f64 / *kernel as f64,
                s.args_line()
            ));
            if *ours as u64 > *kernel {
                larger.push(format!(
                    "{} ({}): {ours} bytes, the kernel's {kernel}",
                    s.name(),
                    s.args_line()
                ));
            }
        }
    }
    rows.push(format!(
        "{:<46} {ours_total:>10} {kernel_total:>10}",
        "total"
    ));
    println!("{}", rows.join("\n"));
    assert!(
        larger.is_empty(),
        "rsend's streams are larger than the kernel's:\n{}",
        larger.join("\n")
    );
}
