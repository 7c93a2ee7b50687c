//! Incremental sends from a bookmark after the parent snapshot is gone and
//! its space was used again (issue #49's "Done when"), on the real kernel
//! (root, loop devices, the btrfs module; one SKIP line otherwise, a
//! failure under RSEND_REQUIRE_KERNEL=1).
//!
//! [`every_scenario_from_a_bookmark_after_the_parent_is_deleted_and_its_space_reused`]:
//! the scenarios of testdata/incremental/scenarios.sh (NAME.p -> NAME.c),
//! the incremental sends of testdata/clone/scenarios.sh (the last send of
//! each scenario that has a parent, with its `-c` sources) and one case of
//! this test's own (`bookmark_many_files`: thousands of small extents and
//! a tree of many leaves, rewritten) are built on a fresh 2 GiB loop
//! btrfs. For each: the bookmark of the parent (with its full send, or
//! `-n --write-bookmark` for the clone cases and the own case), stream A
//! = `rsend -d IMG -p PARENT CHILD`. Then every parent is deleted (with
//! the writable subvolumes: `btrfs subvolume delete`, commit, `btrfs
//! subvolume sync`, commits) and its space used again, twice:
//!
//! - "reuse": the free data space preallocated (fallocate), so that fill1
//!   (small files, some data) can only go where the parents' extents were;
//!   fill1 and the preallocation deleted, fill2 written and small files
//!   made, committed round by round, until one of the parents' freed tree
//!   block addresses holds another block. It prints how many of the
//!   parents' freed tree blocks and data extents hold something else now,
//!   and fails unless both some blocks and some extents do. Stream B1 =
//!   `rsend -p PARENT.bm CHILD` then, and after `btrfs balance start
//!   -musage=100` (metadata only) B2 = `--parent-bookmark PARENT.bm
//!   CHILD`: each must be A byte for byte, or differ from it only where A
//!   CLONEd from the parent and B sends those bytes as data (a TRUNCATE to
//!   the clone's start going with a clone of a file's tail, the WRITEs
//!   next to it cut anew: checked byte for byte); every difference is
//!   listed, any other kind fails;
//! - "balance": the issue's recipe, fill data written and deleted, then
//!   `btrfs balance start -dusage=100 -musage=100`: every extent and tree
//!   block moves, so B3 (`--parent-bookmark`) may send data A did not (a
//!   moved extent cannot be proven the same); its differences from A are
//!   counted by kind on stderr, not failed.
//!
//! Every B is received by `btrfs receive` onto a btrfs and by rreceive onto
//! an ext4, each holding the parent (its full stream, and the clone case's
//! earlier sends, received before the delete), and the received child must
//! equal the child snapshot (testdata/manifest.py --links; off btrfs
//! without `btrfs.*` xattrs).
//!
//! [`five_nights_each_from_the_bookmark_of_a_deleted_snapshot`]: night 1
//! sends snap1 in full with `--write-bookmark`; each later night deletes
//! the previous snapshot, changes the source (the chain steps of
//! scenarios.sh, reflinks, appends, holes, renames, deletes, every file's
//! times), churns with fill data and small files until a freed tree block
//! address of the deleted snapshot holds another block, changes the source
//! again (so the new snapshot's blocks take the deleted one's addresses:
//! the test prints how many do), takes snapK and sends `--parent-bookmark
//! bm(K-1) --write-bookmark bmK snapK` (mounted paths, no -d). Each night
//! is received by `btrfs receive` and rreceive (ext4) and compared with its
//! snapshot; its header must name the previous snapshot as parent.
//!
//! Time: every scenario and clone case by default (120 cases); the whole
//! file took 63 s in release and 77 s in debug on 2 cores.
//! `BOOKMARK_QUICK=1` runs [`QUICK_SCENARIOS`] only, `RSEND_SCENARIOS="name
//! ..."` and `RSEND_CLONE_SCENARIOS="name ..."` those named.
//! `BOOKMARK_KEEP=DIR` keeps every stream A and B in DIR.

mod common;
#[path = "common/reuse.rs"]
mod reuse;
#[path = "common/stream_diff.rs"]
mod stream_diff;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::clone::{self, received_name};
use common::receivers::{listing, rreceive_bin, without_xattrs, ManifestServer, Receiver};
use common::scenarios::{self, Manifest};
use reuse::{Reuse, Trees};
use testkit::{ext4_image, kernel_available, run, BtrfsImage, LoopImage};

/// The scenarios checked with `BOOKMARK_QUICK=1` (a quick run while
/// working on bookmarks): renames, orphans, inode reuse, hard links,
/// clones from the parent, compression.
const QUICK_SCENARIOS: &[&str] = &[
    "new_files",
    "deleted_files",
    "changed_files",
    "everything_deleted",
    "inode_reuse_file_becomes_dir",
    "dir_swap",
    "rename_cycle_dirs",
    "hardlinks_renamed_across_dirs",
    "btrfs_094_clone_into_new_file",
    "btrfs_108_reflink_then_overwrite_and_punch",
    "btrfs_109_compressed_reflink",
    "btrfs_130_one_extent_many_refs",
    "btrfs_283_reflinks_share_best_source",
    "btrfs_322_truncate_to_zero_then_reflink",
];

/// The source's mount options: without async discard (the default where
/// the device can discard, as a loop device can), freed space is free at
/// once.
const SOURCE_MOUNT_OPTS: &str = "noatime,nodiscard";

/// The size of the scenario test's source (sparse). A metadata balance of
/// a filesystem of a few hundred snapshots sharing blocks reserves about
/// 100 MiB for delayed refs while it merges the relocated trees; on 1 GiB
/// (51 MiB metadata chunks) it ended in ENOSPC in merge_reloc_roots about
/// every third run, the filesystem forced read-only. 2 GiB has 102 MiB
/// metadata chunks, 204 MiB new ones.
const SOURCE_MIB: u64 = 2048;

/// The receivers every stream from a bookmark goes through.
const RECEIVERS: [Receiver; 2] = [Receiver::BtrfsReceive, Receiver::RreceiveExt4];

// ---------------------------------------------------------------------------
// The source filesystem

/// A fresh loop btrfs the snapshots are built on, and a scratch directory
/// (outside it) for streams and bookmarks.
struct Source {
    fs: BtrfsImage,
    scratch: tempfile::TempDir,
}

impl Source {
    fn new(size_mib: u64) -> Source {
        Source {
            fs: BtrfsImage::new(size_mib, &[], SOURCE_MOUNT_OPTS),
            scratch: tempfile::Builder::new()
                .prefix("rsend-bookmarks-")
                .tempdir()
                .unwrap(),
        }
    }

    fn mnt(&self) -> &Path {
        self.fs.mnt()
    }

    /// A path in the scratch directory.
    fn file(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// `bash -euo pipefail -c SCRIPT` with testdata/clone/scenarios.sh
    /// (and so the incremental one) sourced, at the top level.
    fn bash(&self, script: &str) {
        let full = format!(
            "source {}; {script}",
            sh_quote(&clone::dir().join("scenarios.sh"))
        );
        run(Command::new("bash")
            .args(["-euo", "pipefail", "-c", &full])
            .env("SCENARIO_MOUNT_OPTS", SOURCE_MOUNT_OPTS)
            .current_dir(self.mnt()));
    }

    /// `rsend -q -d IMG ARGS`; stdout and stderr, or the failure.
    fn rsend_d(&self, args: &[OsString]) -> Result<(String, String), String> {
        let mut all: Vec<OsString> = vec!["-d".into(), self.fs.image().into()];
        all.extend_from_slice(args);
        rsend(&all)
    }

    /// `rsend -q -d IMG ARGS -f FILE`: the stream in FILE.
    fn stream_d(&self, args: &[OsString], file: &Path) -> Result<Vec<u8>, String> {
        let mut all = args.to_vec();
        all.extend(["-f".into(), file.into()]);
        self.rsend_d(&all)?;
        std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))
    }
}

/// `rsend -q ARGS`: stdout and stderr, or what failed.
fn rsend(args: &[OsString]) -> Result<(String, String), String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
    cmd.arg("-q").args(args);
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    if o.status.success() {
        Ok((out, err))
    } else {
        Err(format!(
            "rsend {} failed with {}: {}",
            show_args(args),
            o.status,
            err.trim_end()
        ))
    }
}

fn show_args(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

// ---------------------------------------------------------------------------
// The destinations

/// `btrfs receive` onto a btrfs, rreceive onto an ext4 (ea_inode: xattr
/// values up to 64 KiB); one python for the manifests.
struct Dests {
    btrfs: BtrfsImage,
    ext4: LoopImage,
    rreceive: PathBuf,
    manifests: ManifestServer,
}

impl Dests {
    fn new() -> Dests {
        Dests {
            btrfs: BtrfsImage::new(1024, &[], "noatime"),
            ext4: ext4_image(1024, &["-O", "ea_inode"], "noatime"),
            rreceive: rreceive_bin(),
            manifests: ManifestServer::start(),
        }
    }

    /// A fresh directory `what` for receiver `r`.
    fn dir(&self, r: Receiver, what: &str) -> PathBuf {
        let root = match r {
            Receiver::RreceiveExt4 => self.ext4.mnt(),
            _ => self.btrfs.mnt(),
        };
        let d = root.join(r.label()).join(what);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Receives `file` into `dest` with `r`, then compares the subvolume
    /// `name` it made with `want`.
    fn receive_and_compare(
        &mut self,
        r: Receiver,
        file: &Path,
        dest: &Path,
        name: &str,
        want: &Manifest,
    ) -> Result<(), String> {
        r.receive(&self.rreceive, file, dest)?;
        let got = dest.join(name);
        let have = self.manifests.of(&got)?;
        let ignore = |x: &str| r.ignores_xattr(x);
        match Manifest::difference(
            &without_xattrs(want, ignore),
            &without_xattrs(&have, ignore),
        ) {
            None => Ok(()),
            Some(d) => Err(format!(
                "{name} received by {} differs from the snapshot: {d}\n  {} holds:\n{}",
                r.label(),
                dest.display(),
                listing(dest)
            )),
        }
    }
}

// ---------------------------------------------------------------------------
// The cases

/// One parent -> child send checked from a bookmark.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    /// Sends received before the parent is deleted (the parent's full
    /// stream among them): rsend arguments, paths from the top level.
    before: Vec<Vec<String>>,
    /// The parent and the child (paths from the top level).
    parent: String,
    child: String,
    /// The `-c` sources besides the parent.
    clone_sources: Vec<String>,
    /// rsend's arguments for stream A.
    a_args: Vec<String>,
    /// Whether the bookmark is written by the parent's full send in
    /// `before` (else by `-n --write-bookmark` on its own).
    bookmark_with_full_send: bool,
}

/// The scenarios of testdata/incremental to check: all of them (or those
/// `RSEND_SCENARIOS` names), [`QUICK_SCENARIOS`] with `BOOKMARK_QUICK=1`.
fn incremental_names() -> Vec<String> {
    let all = scenarios::names();
    let quick = std::env::var("BOOKMARK_QUICK").is_ok_and(|v| v == "1");
    if !quick {
        return all;
    }
    for d in QUICK_SCENARIOS {
        assert!(
            all.iter().any(|n| n == d),
            "no scenario {d} in scenarios.sh"
        );
    }
    all.into_iter()
        .filter(|n| QUICK_SCENARIOS.contains(&n.as_str()))
        .collect()
}

fn incremental_case(name: &str) -> Case {
    let (p, c) = (format!("{name}.p"), format!("{name}.c"));
    Case {
        name: name.to_owned(),
        before: vec![vec![p.clone()]],
        a_args: vec!["-p".into(), p.clone(), c.clone()],
        parent: p,
        child: c,
        clone_sources: Vec::new(),
        bookmark_with_full_send: true,
    }
}

/// The clone cases: of each scenario of testdata/clone with an incremental
/// send, its last such send (the ones before it are received first).
fn clone_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (scenario, sends) in clone::by_scenario(&clone::sends()) {
        let Some(k) = sends.iter().rposition(|s| s.parent.is_some()) else {
            continue;
        };
        let last = &sends[k];
        let parent = last.parent.clone().unwrap();
        out.push(Case {
            name: scenario,
            before: sends[..k].iter().map(|s| s.args.clone()).collect(),
            clone_sources: last
                .clone_sources()
                .into_iter()
                .filter(|c| *c != parent)
                .map(str::to_owned)
                .collect(),
            child: last.snapshot().to_owned(),
            a_args: last.args.clone(),
            parent,
            bookmark_with_full_send: false,
        });
    }
    out
}

/// This test's own case, built by [`MANY_FILES_BUILD`]: a parent with a
/// tree of many leaves and thousands of small data extents that the child
/// rewrote, so that deleting the parent frees plenty to be used again.
const MANY_FILES: &str = "bookmark_many_files";

/// Builds `bookmark_many_files`, `.p` and `.c` at the top level: 3000
/// files of 5000 bytes (one extent each); then half of them rewritten,
/// 300 deleted, 300 renamed, one reflinked from the parent snapshot.
const MANY_FILES_BUILD: &str = r#"
n=bookmark_many_files
btrfs -q subvolume create $n
many_files $n/d 3000 f 5000
btrfs filesystem sync $n >/dev/null
btrfs -q subvolume snapshot -r $n $n.p
python3 -c '
import os, sys
d = sys.argv[1]
for i in range(0, 3000, 2):
    with open(os.path.join(d, "f%05d" % i), "r+b") as f:
        f.write(b"rewritten %05d\n" % i * 300)
for i in range(1, 600, 2):
    os.unlink(os.path.join(d, "f%05d" % i))
for i in range(601, 1200, 2):
    os.rename(os.path.join(d, "f%05d" % i), os.path.join(d, "g%05d" % i))
' $n/d
cp --reflink=always $n.p/d/f00003 $n/from-parent
btrfs filesystem sync $n >/dev/null
btrfs -q subvolume snapshot -r $n $n.c
"#;

/// What was made of a case before its parent was deleted.
struct Prepared {
    case: Case,
    bookmark: PathBuf,
    /// Stream files of `before`, with the snapshot each makes.
    before: Vec<(PathBuf, String)>,
    a: Vec<u8>,
    /// The manifests of the snapshots received.
    manifests: BTreeMap<String, Manifest>,
    parent_tree: Trees,
}

fn prepare(src: &Source, ms: &mut ManifestServer, case: &Case) -> Result<Prepared, String> {
    let bookmark = src.file(&format!("{}.bm", case.name));
    let mut before = Vec::new();
    for (i, args) in case.before.iter().enumerate() {
        let file = src.file(&format!("{}.before{i}.stream", case.name));
        let mut a: Vec<OsString> = args.iter().map(OsString::from).collect();
        let snap = args.last().unwrap().clone();
        if case.bookmark_with_full_send && snap == case.parent {
            a.splice(0..0, ["--write-bookmark".into(), bookmark.clone().into()]);
        }
        src.stream_d(&a, &file)?;
        before.push((file, snap));
    }
    if !case.bookmark_with_full_send {
        src.rsend_d(&[
            "-n".into(),
            "--write-bookmark".into(),
            bookmark.clone().into(),
            case.parent.clone().into(),
        ])?;
    }
    if !bookmark.is_file() {
        return Err(format!("{}: no bookmark {}", case.name, bookmark.display()));
    }
    let a_file = src.file(&format!("{}.A.stream", case.name));
    let a_args: Vec<OsString> = case.a_args.iter().map(OsString::from).collect();
    let a = src.stream_d(&a_args, &a_file)?;
    let mut manifests = BTreeMap::new();
    for snap in before.iter().map(|(_, s)| s).chain([&case.child]) {
        manifests.insert(snap.clone(), ms.of(&src.mnt().join(snap))?);
    }
    let loopdev = src.fs.loop_device().to_owned();
    let parent_tree =
        reuse::dump_tree(&loopdev, Some(reuse::rootid(&src.mnt().join(&case.parent))));
    Ok(Prepared {
        case: case.clone(),
        bookmark,
        before,
        a,
        manifests,
        parent_tree,
    })
}

/// One stream from the bookmark: its label, the stream, the arguments.
struct FromBookmark {
    label: &'static str,
    stream: Vec<u8>,
    /// Whether only CLONE-from-parent -> data differences are allowed.
    strict: bool,
}

/// `rsend -d IMG [-p BM | --parent-bookmark BM] [-c SRC]... CHILD`.
fn send_from_bookmark(
    src: &Source,
    p: &Prepared,
    flag: &str,
    tag: &str,
) -> Result<Vec<u8>, String> {
    let mut args: Vec<OsString> = vec![flag.into(), p.bookmark.clone().into()];
    for c in &p.case.clone_sources {
        args.extend(["-c".into(), c.into()]);
    }
    args.push(p.case.child.clone().into());
    let file = src.file(&format!("{}.{tag}.stream", p.case.name));
    src.stream_d(&args, &file)
}

/// The differences of `b` from `a` (command lists); Err when a stream
/// cannot be read or the headers differ.
fn compare_streams(a: &[u8], b: &[u8]) -> Result<Vec<stream_diff::Hunk>, String> {
    let ca = stream_diff::commands(a).map_err(|e| format!("stream A: {e}"))?;
    let cb = stream_diff::commands(b).map_err(|e| format!("stream B: {e}"))?;
    if ca.first().map(|c| &c.line) != cb.first().map(|c| &c.line) {
        return Err(format!(
            "the headers differ:\n    A {}\n    B {}",
            ca.first().map(|c| c.line.as_str()).unwrap_or("-"),
            cb.first().map(|c| c.line.as_str()).unwrap_or("-")
        ));
    }
    let parent = stream_diff::parent_uuid(&ca).ok_or("stream A is not incremental")?;
    Ok(stream_diff::differences(&ca, &cb, parent))
}

/// Receives the case's earlier streams into a fresh `dest`, then `b`.
fn receive_case(
    dests: &mut Dests,
    r: Receiver,
    p: &Prepared,
    b_file: &Path,
    dest: &Path,
    check_before: bool,
) -> Result<(), String> {
    for (file, snap) in &p.before {
        let name = received_name(snap);
        if check_before {
            dests.receive_and_compare(r, file, dest, name, &p.manifests[snap])?;
        } else {
            r.receive(&dests.rreceive, file, dest)?;
        }
    }
    let child = &p.case.child;
    dests.receive_and_compare(r, b_file, dest, received_name(child), &p.manifests[child])
}

// ---------------------------------------------------------------------------
// Building the scenarios

/// Builds the incremental scenarios `names` and the clone scenarios of
/// `clones` on `src`; releases the files the snapshot hooks hold and commits.
fn build(src: &Source, names: &[String], clones: &[Case]) {
    if !names.is_empty() {
        src.bash(&format!(
            "scenario_build_all {} {} >/dev/null; release_held",
            sh_quote(src.mnt()),
            names.join(" ")
        ));
    }
    src.bash(MANY_FILES_BUILD);
    for c in clones {
        src.bash(&format!(
            "top=$PWD; opts=${{CLONE_MOUNT_OPTS[{n}]:-}}; \
             [[ -z $opts ]] || mount -o \"remount,$opts\" \"$top\"; \
             build_{n} >/dev/null; cd \"$top\"; btrfs filesystem sync \"$top\" >/dev/null; \
             [[ -z $opts ]] || mount -o remount,compress=no \"$top\"",
            n = c.name
        ));
    }
    run(Command::new("btrfs")
        .args(["subvolume", "sync"])
        .arg(src.mnt()));
    reuse::commit(src.mnt());
}

/// Writes `mib` MiB (at most 90 % of the free space) of incompressible
/// files and `small` small files (metadata) to the directory `dir` at the
/// top level of `src`.
fn fill(src: &Source, dir: &str, mib: u64, small: usize, seed: u64) -> Vec<PathBuf> {
    let d = src.mnt().join(dir);
    let bytes = (mib << 20).min(reuse::free_bytes(src.mnt()) / 10 * 9);
    let mut files = reuse::fill(&d, "big", bytes, seed);
    let sd = d.join("small");
    std::fs::create_dir_all(&sd).unwrap();
    for i in 0..small {
        let p = sd.join(format!("s{seed}-{i:06}"));
        // Inline (up to 2 KiB) and small extents (up to 12 KiB): the
        // sizes of the freed leaves' items and of the freed data extents.
        let body = format!("{seed} {i:06} ").repeat(1 + (i * 37) % 1200);
        if std::fs::write(&p, body).is_err() {
            break;
        }
        files.push(p);
    }
    reuse::commit(src.mnt());
    files
}

/// Small files made in rounds of `per_round` (each committed) in `dir` until one
/// of the tree block addresses `before` had that are free now holds
/// another block, or 300 rounds: the metadata allocator goes on from where
/// it last allocated, so freed blocks behind it are used again only when it
/// comes round (and then the next allocations go to the others). Returns
/// the measure and the rounds; the files join `files`.
fn churn_until_reused(
    src: &Source,
    dir: &str,
    before: &Trees,
    files: &mut Vec<PathBuf>,
    per_round: usize,
) -> (Reuse, usize) {
    let d = src.mnt().join(dir);
    std::fs::create_dir_all(&d).unwrap();
    let mut round = 0;
    loop {
        let now = reuse::allocated_blocks(src.fs.loop_device());
        let r = Reuse::measure(before, &now, files);
        if r.reused_blocks > 0 || round == 300 {
            return (r, round);
        }
        round += 1;
        for i in 0..per_round {
            let p = d.join(format!("r{round:03}-{i:04}"));
            let body = format!("{round} {i:03} ").repeat(1 + (i * 37) % 150);
            std::fs::write(&p, body).unwrap();
            files.push(p);
        }
        reuse::commit(src.mnt());
    }
}

/// Streams from the bookmarks, one per case.
type Streams = Vec<Result<Vec<u8>, String>>;

fn send_all(src: &Source, prepared: &[Prepared], flag: &str, tag: &str) -> Streams {
    prepared
        .iter()
        .map(|p| send_from_bookmark(src, p, flag, tag))
        .collect()
}

/// "reuse", after the parents (their trees `before`) were deleted: all
/// the free data space taken by a preallocated file (fallocate: no data
/// written), so that fill1 (small files and some data) can only go where
/// the parents' extents were; fill1 and the preallocation deleted, fill2
/// written and small files made until a freed tree block address holds
/// another block. B1 (`-p BOOKMARK`) then, B2 (`--parent-bookmark`)
/// after a metadata balance. Returns what was found used again (text,
/// and whether both data and tree blocks were), B1 and B2.
fn reuse_variant(
    src: &Source,
    prepared: &[Prepared],
    before: &Trees,
) -> ((String, bool), Streams, Streams) {
    let prefill = reuse::preallocate_free_space(src.mnt(), "prefill", 48 << 20);
    let first = fill(src, "fill1", 16, 4000, 1);
    let r1 = Reuse::measure(
        before,
        &reuse::allocated_blocks(src.fs.loop_device()),
        &first,
    );
    reuse::remove(&first);
    reuse::remove(&[prefill]);
    reuse::commit(src.mnt());
    // The chunks emptied go (no extent moves): room for the balance.
    reuse::balance(src.mnt(), &["-dusage=0"]);
    let mut second = fill(src, "fill2", 64, 4000, 2);
    let (r2, rounds) = churn_until_reused(src, "churn", before, &mut second, 1000);
    let b1 = send_all(src, prepared, "-p", "B1");
    reuse::balance(src.mnt(), &["-musage=100"]);
    reuse::commit(src.mnt());
    let b2 = send_all(src, prepared, "--parent-bookmark", "B2");
    reuse::remove(&second);
    reuse::commit(src.mnt());
    let text = format!(
        "with the free data space preallocated, fill1: {r1}; fill2 and {rounds} rounds of \
         small files: {r2}"
    );
    let found = (r1.reused_blocks > 0 || r2.reused_blocks > 0)
        && (r1.reused_extents > 0 || r2.reused_extents > 0);
    ((text, found), b1, b2)
}

/// "balance": fill data written and deleted, then a full balance
/// (`-dusage=100 -musage=100`); B3 (`--parent-bookmark`).
fn balance_variant(src: &Source, prepared: &[Prepared]) -> Streams {
    let third = fill(src, "fill3", 128, 2000, 3);
    reuse::remove(&third);
    reuse::commit(src.mnt());
    reuse::balance(src.mnt(), &["-dusage=0"]);
    reuse::balance(src.mnt(), &["-dusage=100", "-musage=100"]);
    reuse::commit(src.mnt());
    send_all(src, prepared, "--parent-bookmark", "B3")
}

// ---------------------------------------------------------------------------
// The scenario test

/// What one case gave, per stream from the bookmark.
#[derive(Default)]
struct Outcome {
    rows: Vec<String>,
    failures: Vec<String>,
    notes: Vec<String>,
}

fn check_stream(
    dests: &mut Dests,
    p: &Prepared,
    fb: &FromBookmark,
    out: &mut Outcome,
    first: bool,
) -> String {
    let name = &p.case.name;
    let mut status = String::new();
    match compare_streams(&p.a, &fb.stream) {
        Err(e) => {
            out.failures.push(format!("{name} {}: {e}", fb.label));
            status.push_str("BAD-STREAM");
        }
        Ok(hunks) if hunks.is_empty() => status.push_str("identical"),
        Ok(hunks) => {
            let bad = hunks.iter().any(|h| !stream_diff::allowed(h.kind));
            let text = format!(
                "{name} {}: B differs from A: {}\n{}",
                fb.label,
                stream_diff::summary(&hunks),
                stream_diff::render(&hunks, 3)
            );
            if bad && fb.strict {
                out.failures.push(text);
                status.push_str("DIFFERS");
            } else {
                eprintln!("{text}");
                out.notes.push(format!(
                    "{name} {}: {}",
                    fb.label,
                    stream_diff::summary(&hunks)
                ));
                status.push_str(if bad { "differs" } else { "clone->data" });
            }
        }
    }
    let b_file = dests
        .btrfs
        .scratch()
        .join(format!("{name}.{}.stream", fb.label));
    std::fs::write(&b_file, &fb.stream).unwrap();
    if let Some(keep) = std::env::var_os("BOOKMARK_KEEP") {
        let keep = PathBuf::from(keep);
        let _ = std::fs::create_dir_all(&keep);
        let _ = std::fs::write(keep.join(format!("{name}.A.stream")), &p.a);
        let _ = std::fs::write(keep.join(format!("{name}.{}.stream", fb.label)), &fb.stream);
    }
    for r in RECEIVERS {
        let dest = dests.dir(r, &format!("{name}/{}", fb.label));
        match receive_case(dests, r, p, &b_file, &dest, first) {
            Ok(()) => status.push_str(" ok"),
            Err(e) => {
                out.failures
                    .push(format!("{name} {} {}: {e}", fb.label, r.label()));
                status.push_str(" FAIL");
            }
        }
    }
    let _ = std::fs::remove_file(&b_file);
    status
}

/// Compares B1, B2 and B3 of case `p` with its stream A and receives
/// them; one table row.
fn check_case(dests: &mut Dests, p: &Prepared, b: [&Result<Vec<u8>, String>; 3]) -> Outcome {
    let mut out = Outcome::default();
    let mut row = format!("{:<48}", p.case.name);
    for (k, (label, b, strict)) in [("B1", b[0], true), ("B2", b[1], true), ("B3", b[2], false)]
        .into_iter()
        .enumerate()
    {
        let status = match b {
            Ok(stream) => {
                let fb = FromBookmark {
                    label,
                    stream: stream.clone(),
                    strict,
                };
                check_stream(dests, p, &fb, &mut out, k == 0)
            }
            Err(e) => {
                out.failures.push(format!("{} {label}: {e}", p.case.name));
                "SEND FAILED".to_owned()
            }
        };
        row.push_str(&format!(" {status:<28}"));
    }
    out.rows.push(row);
    out
}

#[test]
fn every_scenario_from_a_bookmark_after_the_parent_is_deleted_and_its_space_reused() {
    let test = "every_scenario_from_a_bookmark_after_the_parent_is_deleted_and_its_space_reused";
    if !kernel_available(test) {
        return;
    }
    let started = Instant::now();
    let names = incremental_names();
    let clones = clone_cases();
    let src = Source::new(SOURCE_MIB);
    build(&src, &names, &clones);
    let built = started.elapsed();
    let mut dests = Dests::new();
    let cases: Vec<Case> = names
        .iter()
        .map(|n| incremental_case(n))
        .chain([Case {
            bookmark_with_full_send: false,
            ..incremental_case(MANY_FILES)
        }])
        .chain(clones.iter().cloned())
        .collect();

    // Bookmarks and streams A while the parents exist.
    let mut failures = Vec::new();
    let mut prepared = Vec::new();
    for c in &cases {
        match prepare(&src, &mut dests.manifests, c) {
            Ok(p) => prepared.push(p),
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    // The parents go, and the writable subvolumes the snapshots were taken
    // of (nothing sends them; fewer subvolumes for the balances to carry:
    // with all of them a metadata balance ended in ENOSPC now and then).
    let mut parents: Vec<PathBuf> = prepared
        .iter()
        .map(|p| src.mnt().join(&p.case.parent))
        .collect();
    let mut doomed = reuse::writable_subvolumes(src.mnt());
    doomed.append(&mut parents);
    let before = reuse::union(prepared.iter().map(|p| &p.parent_tree));
    reuse::delete_subvolumes(src.mnt(), &doomed);

    let (reuse_found, b1, b2) = reuse_variant(&src, &prepared, &before);
    let b3 = balance_variant(&src, &prepared);
    let sent = started.elapsed();

    // Compare and receive.
    let mut table = vec![format!(
        "{:<48} {:<28} {:<28} {:<28}",
        "case (A vs B, btrfs-receive, rreceive-ext4)",
        "B1 reuse",
        "B2 reuse+balance -m",
        "B3 balance -d -m"
    )];
    let mut notes = Vec::new();
    for (i, p) in prepared.iter().enumerate() {
        let out = check_case(&mut dests, p, [&b1[i], &b2[i], &b3[i]]);
        table.extend(out.rows);
        failures.extend(out.failures);
        notes.extend(out.notes);
    }
    println!("{}", table.join("\n"));
    if !notes.is_empty() {
        eprintln!(
            "differences from A (counted by kind):\n{}",
            notes.join("\n")
        );
    }
    eprintln!(
        "{} cases; built in {built:.0?}, sent (deletes, fills, balances) in {:.0?}, \
         all in {:.0?}; {}",
        prepared.len(),
        sent - built,
        started.elapsed(),
        reuse_found.0
    );
    if !prepared.is_empty() && !reuse_found.1 {
        failures.push(format!(
            "the parents' tree blocks and data extents were not both used again: {}",
            reuse_found.0
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Five nights

/// What each night does to the source subvolume (run in it, scenarios.sh
/// sourced, `$TOP` the top level): the chain steps of scenarios.sh, and
/// reflinks, appends, overwrites, holes, renames and deletes of its own.
const NIGHTS: [&str; 5] = [
    "chain_0; fill large 0 3000000 large; mkdir refl; \
     cp --reflink=always src/main refl/main-copy; many_files many 300 f 2000",
    "chain_1; fill large 3000000 500000 app2; cp --reflink=always large refl/large-copy; \
     rm many/f0001*; mv many many-renamed",
    "chain_2; cd /; remount \"$TOP\"; cd \"$TOP/data\"; chain_2_after_remount; \
     xfs_io -c 'reflink large 0 1048576 1048576' refl/large-copy >/dev/null; \
     truncate -s 2500000 large",
    "chain_3; fill refl/main-copy 100 20000 new4; rm -r many-renamed/f0002*; \
     fallocate -p -o 65536 -l 131072 large; ln large many-renamed/large-link",
    "chain_4; cp --reflink=always large large-again; rm refl/large-copy; \
     fill large 4000000 100000 app5; setfattr -n user.n5 -v five large; \
     mv many-renamed/f00100 refl/moved",
];

/// The SNAPSHOT or SUBVOL uuid of a stream, and the parent's uuid it names.
fn header_uuids(stream: &[u8]) -> (Option<btrfs_stream::Uuid>, Option<btrfs_stream::Uuid>) {
    let mut r = btrfs_stream::Reader::new(stream);
    match r.next_command() {
        Ok(Some(btrfs_stream::Command::Subvol { uuid, .. })) => (Some(uuid), None),
        Ok(Some(btrfs_stream::Command::Snapshot {
            uuid, clone_uuid, ..
        })) => (Some(uuid), Some(clone_uuid)),
        _ => (None, None),
    }
}

/// The source, the destinations and what the nights found so far.
struct Nights {
    src: Source,
    dests: Dests,
    /// Where each receiver receives the nights.
    dest: Vec<(Receiver, PathBuf)>,
    failures: Vec<String>,
    lines: Vec<String>,
    /// Tree block addresses of deleted snapshots used again by any tree,
    /// and by the next snapshot's own tree.
    any_tree_reuse: usize,
    same_tree_reuse: usize,
    previous_uuid: Option<btrfs_stream::Uuid>,
}

impl Nights {
    fn new() -> Nights {
        let src = Source::new(512);
        let dests = Dests::new();
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(src.mnt().join("data")));
        let dest = RECEIVERS
            .iter()
            .map(|&r| (r, dests.dir(r, "nights")))
            .collect();
        Nights {
            src,
            dests,
            dest,
            failures: Vec::new(),
            lines: Vec::new(),
            any_tree_reuse: 0,
            same_tree_reuse: 0,
            previous_uuid: None,
        }
    }

    /// Night `k`'s changes and snapshot; a note on the reuse.
    fn change(&mut self, k: usize) -> String {
        let src = &self.src;
        let snap = src.mnt().join(format!("snap{k}"));
        let mut note = String::new();
        if k == 1 {
            src.bash(&format!("TOP=$PWD; cd data; {}", NIGHTS[0]));
        }
        let mut parent_tree = None;
        if k > 1 {
            // The previous night's snapshot goes, the source changes (the
            // blocks that snapshot shared with it are freed), churn until a
            // freed address holds another block, then more changes (new
            // leaves and small extents, where the allocator is now).
            let prev = src.mnt().join(format!("snap{}", k - 1));
            let t = reuse::dump_tree(src.fs.loop_device(), Some(reuse::rootid(&prev)));
            reuse::delete_subvolumes(src.mnt(), &[prev]);
            src.bash(&format!(
                "TOP=$PWD; cd data; {}; cd \"$TOP/data\"; \
                 find . -type f -name '[fn]0*' -exec touch -d @$((1500000000 + {k})) {{}} +",
                NIGHTS[k - 1]
            ));
            reuse::commit(src.mnt());
            let mut churn = fill(src, &format!("churn{k}"), 64, 500, k as u64);
            let (r, rounds) = churn_until_reused(src, &format!("churn{k}"), &t, &mut churn, 200);
            self.any_tree_reuse += r.reused_blocks;
            note = format!("; snap{} deleted, {rounds} rounds of churn: {r}", k - 1);
            src.bash(&format!(
                "cd data; many_files night{k} 400 n 3000; \
                 find . -type f -name '[fn]0*' -exec touch -d @$((1600000000 + {k})) {{}} +"
            ));
            reuse::remove(&churn);
            reuse::commit(src.mnt());
            parent_tree = Some(t);
        }
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(src.mnt().join("data"))
            .arg(&snap));
        reuse::commit(src.mnt());
        if let Some(t) = &parent_tree {
            let own = reuse::dump_tree(src.fs.loop_device(), Some(reuse::rootid(&snap)));
            let r = Reuse::measure(t, &own, &[]);
            self.same_tree_reuse += r.reused_blocks;
            note.push_str(&format!(
                "; snap{k} has {} blocks at addresses snap{} had (other generation)",
                r.reused_blocks,
                k - 1
            ));
        }
        note
    }

    /// Sends night `k` (`--parent-bookmark bm(k-1)` after the first),
    /// writing bm(k); the stream, or None after a failure.
    fn send(&mut self, k: usize, note: &mut String) -> Option<Vec<u8>> {
        let stream_file = self.src.file(&format!("night{k}.stream"));
        let mut args: Vec<OsString> = Vec::new();
        if k > 1 {
            let bm = self.src.file(&format!("bm{}", k - 1));
            args.extend(["--parent-bookmark".into(), bm.into()]);
        }
        let bm = self.src.file(&format!("bm{k}"));
        args.extend([
            "--write-bookmark".into(),
            bm.clone().into(),
            "-f".into(),
            stream_file.clone().into(),
            self.src.mnt().join(format!("snap{k}")).into(),
        ]);
        let sent = rsend(&args).and_then(|(_, err)| {
            std::fs::read(&stream_file)
                .map(|s| (s, err))
                .map_err(|e| format!("{}: {e}", stream_file.display()))
        });
        let stream = match sent {
            Ok((s, err)) => {
                if !err.trim().is_empty() {
                    note.push_str(&format!("; rsend said: {}", err.trim()));
                }
                s
            }
            Err(e) => {
                self.failures.push(format!("night {k}: {e}"));
                return None;
            }
        };
        let (uuid, parent) = header_uuids(&stream);
        if k > 1 && parent != self.previous_uuid {
            self.failures.push(format!(
                "night {k}: the stream names parent {parent:?}, snap{} was {:?}",
                k - 1,
                self.previous_uuid
            ));
        }
        self.previous_uuid = uuid;
        if !bm.is_file() {
            self.failures
                .push(format!("night {k}: no bookmark {}", bm.display()));
        }
        Some(stream)
    }

    /// Receives night `k`'s stream with every receiver and compares it
    /// with `want`; one word per receiver.
    fn receive(&mut self, k: usize, want: &Manifest) -> Vec<String> {
        let stream_file = self.src.file(&format!("night{k}.stream"));
        let mut status = Vec::new();
        for (r, d) in self.dest.clone() {
            let got =
                self.dests
                    .receive_and_compare(r, &stream_file, &d, &format!("snap{k}"), want);
            match got {
                Ok(()) => status.push(format!("{} ok", r.label())),
                Err(e) => {
                    status.push(format!("{} FAIL", r.label()));
                    self.failures.push(format!("night {k}: {e}"));
                }
            }
        }
        status
    }

    /// Night `k`: change, snapshot, send, receive; false after a failure.
    fn night(&mut self, k: usize) -> bool {
        let started = Instant::now();
        let mut note = self.change(k);
        let snap = self.src.mnt().join(format!("snap{k}"));
        let want = self
            .dests
            .manifests
            .of(&snap)
            .expect("manifest of the snapshot");
        let Some(stream) = self.send(k, &mut note) else {
            return false;
        };
        let status = self.receive(k, &want);
        let bm_size = std::fs::metadata(self.src.file(&format!("bm{k}")))
            .map(|m| m.len())
            .unwrap_or(0);
        self.lines.push(format!(
            "night {k}: stream {} bytes, bookmark {bm_size} bytes, {}{note}; night in {:.1?}",
            stream.len(),
            status.join(", "),
            started.elapsed()
        ));
        !self
            .failures
            .iter()
            .any(|f| f.starts_with(&format!("night {k}:")))
    }
}

#[test]
fn five_nights_each_from_the_bookmark_of_a_deleted_snapshot() {
    let test = "five_nights_each_from_the_bookmark_of_a_deleted_snapshot";
    if !kernel_available(test) {
        return;
    }
    let started = Instant::now();
    let mut n = Nights::new();
    for k in 1..=5 {
        if !n.night(k) {
            break;
        }
    }
    println!(
        "{}\nfive nights in {:.0?}; deleted snapshots' tree block addresses used again: \
         {} (by any tree), {} (by the next snapshot itself)",
        n.lines.join("\n"),
        started.elapsed(),
        n.any_tree_reuse,
        n.same_tree_reuse
    );
    if n.failures.is_empty() && n.any_tree_reuse == 0 {
        n.failures
            .push("no night used a deleted snapshot's tree block addresses again".into());
    }
    assert!(n.failures.is_empty(), "{}", n.failures.join("\n"));
}
