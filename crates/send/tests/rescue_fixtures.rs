//! `rsend --rescue` on the damaged images of `testdata/rescue/` (made by
//! `testdata/make-rescue.py` from kernel-made filesystems, each with the
//! manifest of its intact snapshot and `truth.json`, what was destroyed and
//! which files it touched).
//!
//! For each case: the rescue stream replays; every file the damage did not
//! touch is received equal to the snapshot's (content, mode, owner, times,
//! xattrs, hard links); nothing else is missing; the loss report names
//! every touched file (with the exact byte ranges for data) and nothing
//! the damage did not touch; the cases with a good copy left are lossless
//! (exit code 0). As root the same streams go through the real `btrfs
//! receive` and through rreceive onto ext4.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use btrfs_disk::rescue::Losses;
use btrfs_disk::{Filesystem, Options, SubvolSelector};
use common::model::Model;
use common::receivers::{manifest_of_tree, without_xattrs, Receiver};
use common::scenarios::Manifest;
use common::{decompress_sparse, hex, read_manifest};
use serde_json::Value;

fn rescue_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rescue")
}

/// One damaged image: its directory and what `truth.json` says.
struct Case {
    name: String,
    dir: PathBuf,
    truth: Value,
}

fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = std::fs::read_dir(rescue_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("truth.json").exists())
        .map(|e| Case {
            name: e.file_name().to_string_lossy().into_owned(),
            truth: serde_json::from_str(
                &std::fs::read_to_string(e.path().join("truth.json")).unwrap(),
            )
            .unwrap(),
            dir: e.path(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

impl Case {
    /// Decompresses its devices into `into`.
    fn devices(&self, into: &Path) -> Vec<PathBuf> {
        let names: Vec<String> = self.truth["devices"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_else(|| vec!["image.img".into()]);
        names
            .iter()
            .map(|n| {
                let dst = into.join(format!("{}-{n}", self.name));
                decompress_sparse(&self.dir.join(format!("{n}.zst")), &dst);
                dst
            })
            .collect()
    }

    fn snapshot(&self) -> String {
        self.truth["snapshot"].as_str().unwrap_or("snap").to_owned()
    }

    /// The parent of an incremental case.
    fn parent(&self) -> Option<String> {
        self.truth["parent"].as_str().map(str::to_owned)
    }

    /// `-p PARENT` for an incremental case.
    fn parent_args(&self) -> Vec<String> {
        self.parent()
            .map(|p| vec!["-p".to_owned(), p])
            .unwrap_or_default()
    }

    fn lossless(&self) -> bool {
        self.truth["lossless"].as_bool().unwrap_or(false)
    }

    /// The manifest of the intact snapshot, by path (hex).
    fn manifest(&self) -> BTreeMap<String, String> {
        let (rows, _) = read_manifest(&self.dir.join("snap.manifest"));
        by_path(rows)
    }

    /// The files the damage touched: inode number to paths (hex).
    fn affected(&self) -> BTreeMap<u64, Vec<String>> {
        let mut out: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for a in self.truth["affected"].as_array().into_iter().flatten() {
            let ino = a["ino"].as_u64().unwrap();
            let e = out.entry(ino).or_default();
            let paths = a["paths"].as_array().cloned().unwrap_or_default();
            for p in paths.iter().chain(std::iter::once(&a["path"])) {
                if let Some(p) = p.as_str() {
                    let h = hex(p.as_bytes());
                    if !e.contains(&h) {
                        e.push(h);
                    }
                }
            }
        }
        out
    }

    /// The destroyed data ranges of each touched file: inode to ranges.
    fn data_ranges(&self) -> BTreeMap<u64, Vec<(u64, u64)>> {
        let mut out: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for a in self.truth["affected"].as_array().into_iter().flatten() {
            for r in a["data_ranges"].as_array().into_iter().flatten() {
                out.entry(a["ino"].as_u64().unwrap())
                    .or_default()
                    .push((r[0].as_u64().unwrap(), r[1].as_u64().unwrap()));
            }
        }
        out
    }
}

fn by_path(rows: Vec<String>) -> BTreeMap<String, String> {
    rows.into_iter()
        .map(|l| (l.split('\t').next().unwrap().to_owned(), l))
        .collect()
}

/// Whether `p` (hex) is one of `paths` or below one of them.
fn under(paths: &BTreeSet<String>, p: &str) -> bool {
    paths
        .iter()
        .any(|a| p == a || (p.starts_with(a.as_str()) && p[a.len()..].starts_with("2f")))
}

/// `ranges` merged where they touch, sorted.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, n) in ranges {
        match out.last_mut() {
            Some((b, m)) if a <= *b + *m => *m = (*m).max(a + n - *b),
            _ => out.push((a, n)),
        }
    }
    out
}

/// The rescue send of the case's snapshot by the library (incremental
/// from `parent` when given): the stream and the loss report.
fn rescue_send(
    devs: &[PathBuf],
    snap: &str,
    parent: Option<&str>,
    compressed: bool,
) -> Result<(Vec<u8>, Vec<Value>), String> {
    let losses = Arc::new(Losses::new());
    let opts = Options {
        rescue: Some(losses),
        ..Options::default()
    };
    let fs = Filesystem::open_with(devs, opts).map_err(|e| format!("open: {e}"))?;
    let sv = fs
        .find_subvolume(&SubvolSelector::Path(snap.into()))
        .map_err(|e| format!("find {snap}: {e}"))?;
    let mut w = btrfs_stream::Writer::new(Vec::new());
    let send_opts = rsend::send::SendOptions {
        proto: if compressed { 2 } else { 1 },
        compressed,
        ..Default::default()
    };
    let parent = match parent {
        Some(p) => Some(
            fs.find_subvolume(&SubvolSelector::Path(p.into()))
                .map_err(|e| format!("find {p}: {e}"))?,
        ),
        None => None,
    };
    rsend::send::send_with(&fs, &sv, parent.as_ref(), &[], &mut w, &send_opts)
        .map_err(|e| format!("send: {e:#}"))?;
    let report = rsend::rescue::report(&fs, std::slice::from_ref(&sv))
        .map_err(|e| format!("report: {e}"))?
        .into_iter()
        .map(|l| l.json)
        .collect();
    Ok((w.into_inner(), report))
}

/// Checks a received tree (`got`, by path) and the loss report against the
/// case; returns the failures and the number of files received whole.
fn judge(
    case: &Case,
    got: &BTreeMap<String, String>,
    report: &[Value],
    what: &str,
    ignore: &dyn Fn(&str) -> bool,
) -> (Vec<String>, usize) {
    let intact = Manifest {
        rows: case.manifest().into_values().collect(),
        skipped: Vec::new(),
        links: Vec::new(),
    };
    let want = by_path(without_xattrs(&intact, ignore).rows);
    let affected = case.affected();
    let touched: BTreeSet<String> = affected.values().flatten().cloned().collect();
    let mut failures = Vec::new();
    let mut whole = 0;
    for (p, line) in got {
        match want.get(p) {
            None => failures.push(format!("{what}: {p} was never in the snapshot")),
            Some(w) if w == line => whole += 1,
            Some(w) if !under(&touched, p) => failures.push(format!(
                "{what}: {p} differs though the damage did not touch it:\n  want {w}\n  got  {line}"
            )),
            Some(_) => {}
        }
    }
    for p in want.keys() {
        if !got.contains_key(p) && !under(&touched, p) {
            failures.push(format!(
                "{what}: {p} is missing though the damage did not touch it"
            ));
        }
    }
    // The report: every touched inode, nothing else (but what sits in a
    // touched directory), and the exact data ranges.
    let mut told: BTreeSet<u64> = BTreeSet::new();
    let mut spans = Vec::new();
    let mut zeroed: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for l in report {
        if l["kind"] == "tree_block" {
            if let (Some(a), Some(z)) = (l["inodes"][0].as_u64(), l["inodes"][1].as_u64()) {
                spans.push((a, z));
            }
            continue;
        }
        let Some(ino) = l["ino"].as_u64() else {
            continue;
        };
        told.insert(ino);
        if l["kind"] == "data" || l["kind"] == "unverified" {
            for r in l["ranges"].as_array().into_iter().flatten() {
                zeroed
                    .entry(ino)
                    .or_default()
                    .push((r[0].as_u64().unwrap(), r[1].as_u64().unwrap()));
            }
        }
    }
    for ino in affected.keys() {
        if !told.contains(ino) && !spans.iter().any(|(a, z)| (a..=z).contains(&ino)) {
            failures.push(format!(
                "{what}: inode {ino} ({:?}) was touched and is not reported",
                affected[ino]
            ));
        }
    }
    for l in report.iter().filter(|l| l["kind"] != "tree_block") {
        let ino = l["ino"].as_u64().unwrap_or(0);
        let path = l["path"].as_str().map(|p| hex(p.as_bytes()));
        let explained =
            affected.contains_key(&ino) || path.as_deref().is_some_and(|p| under(&touched, p));
        if !explained {
            failures.push(format!(
                "{what}: reported, but the damage did not touch it: {l}"
            ));
        }
    }
    for (ino, want_ranges) in case.data_ranges() {
        let have = merged(zeroed.get(&ino).cloned().unwrap_or_default());
        let unsent = report
            .iter()
            .any(|l| l["kind"] == "inode" && l["ino"] == ino && l["sent"] == false);
        if !unsent && have != merged(want_ranges.clone()) {
            failures.push(format!(
                "{what}: inode {ino}: data ranges reported {have:?}, destroyed {want_ranges:?}"
            ));
        }
    }
    if case.lossless() && !report.is_empty() {
        failures.push(format!(
            "{what}: a lossless case reported {} losses",
            report.len()
        ));
    }
    if !case.lossless() && report.is_empty() {
        failures.push(format!("{what}: nothing reported"));
    }
    (failures, whole)
}

#[test]
fn each_damaged_image_replays_to_what_survived_and_reports_exactly_the_rest() {
    let all = cases();
    if all.is_empty() {
        println!("SKIP each_damaged_image_replays_to_what_survived_and_reports_exactly_the_rest: no testdata/rescue cases");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in &all {
        let devs = case.devices(tmp.path());
        for compressed in [false, true] {
            let what = format!(
                "{}{}",
                case.name,
                if compressed {
                    " (v2, --compressed-data)"
                } else {
                    ""
                }
            );
            let parent = case.parent();
            let (stream, report) =
                match rescue_send(&devs, &case.snapshot(), parent.as_deref(), compressed) {
                    Ok(r) => r,
                    Err(e) => {
                        failures.push(format!("{what}: {e}"));
                        continue;
                    }
                };
            // An incremental goes onto the parent's full stream (intact).
            let base = match &parent {
                None => None,
                Some(p) => {
                    let (s, r) = rescue_send(&devs, p, None, compressed).unwrap();
                    assert!(r.is_empty(), "{what}: the parent lost {r:?}");
                    Some(Model::replay(&s).unwrap())
                }
            };
            let replayed = match &base {
                None => Model::replay(&stream),
                Some(b) => Model::replay_onto(b, &stream),
            };
            let model = match replayed {
                Ok(m) => m,
                Err(e) => {
                    failures.push(format!("{what}: replay: {e}"));
                    continue;
                }
            };
            let (f, whole) = judge(case, &by_path(model.manifest()), &report, &what, &|_| false);
            println!(
                "{what}: {whole} of {} paths received whole, {} losses reported",
                case.manifest().len(),
                report.len()
            );
            failures.extend(f);
        }
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn each_damaged_image_goes_through_btrfs_receive_and_rreceive_onto_ext4() {
    let all = cases();
    if all.is_empty() {
        println!("SKIP each_damaged_image_goes_through_btrfs_receive_and_rreceive_onto_ext4: no testdata/rescue cases");
        return;
    }
    if !testkit::kernel_available(
        "each_damaged_image_goes_through_btrfs_receive_and_rreceive_onto_ext4",
    ) {
        return;
    }
    let rsend = testkit::rsend_bin();
    let rreceive = common::receivers::rreceive_bin();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in &all {
        let devs = case.devices(tmp.path());
        let stream = tmp.path().join(format!("{}.stream", case.name));
        let report = tmp.path().join(format!("{}.jsonl", case.name));
        let parent_stream = tmp.path().join(format!("{}.parent.stream", case.name));
        if let Some(p) = case.parent() {
            let mut cmd = Command::new(&rsend);
            cmd.arg("-q");
            for d in &devs {
                cmd.arg("-d").arg(d);
            }
            let o = cmd.arg("-f").arg(&parent_stream).arg(&p).output().unwrap();
            assert!(
                o.status.success(),
                "{}: the parent's send failed",
                case.name
            );
        }
        let mut cmd = Command::new(&rsend);
        cmd.args(["--rescue", "-q", "--rescue-report"]).arg(&report);
        for d in &devs {
            cmd.arg("-d").arg(d);
        }
        cmd.args(case.parent_args());
        cmd.arg("-f").arg(&stream).arg(case.snapshot());
        let out = cmd.output().unwrap();
        let code = out.status.code();
        let want_code = if case.lossless() { 0 } else { 3 };
        if code != Some(want_code) {
            failures.push(format!(
                "{}: rsend --rescue exited {code:?}, not {want_code}: {}",
                case.name,
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let lines: Vec<Value> = std::fs::read_to_string(&report)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for rx in [Receiver::BtrfsReceive, Receiver::RreceiveExt4] {
            let what = format!("{} via {}", case.name, rx.label());
            let dest = match rx {
                Receiver::RreceiveExt4 => Dest::Ext4(testkit::ext4_image(256, &[], "")),
                _ => Dest::Btrfs(testkit::BtrfsImage::new(256, &[], "")),
            };
            if case.parent().is_some() {
                if let Err(e) = rx.receive(&rreceive, &parent_stream, dest.mnt()) {
                    failures.push(format!("{what}: the parent: {e}"));
                    continue;
                }
            }
            if let Err(e) = rx.receive(&rreceive, &stream, dest.mnt()) {
                failures.push(format!("{what}: {e}"));
                continue;
            }
            let got = dest.mnt().join(case.snapshot());
            let received = manifest_of_tree(&got);
            let ignore = |x: &str| rx.ignores_xattr(x);
            let rows = without_xattrs(&received, ignore).rows;
            let (f, whole) = judge(case, &by_path(rows), &lines, &what, &ignore);
            println!(
                "{what}: {whole} of {} paths received whole",
                case.manifest().len()
            );
            failures.extend(f);
        }
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A destination filesystem, unmounted when dropped.
enum Dest {
    Btrfs(testkit::BtrfsImage),
    Ext4(testkit::LoopImage),
}

impl Dest {
    fn mnt(&self) -> &Path {
        match self {
            Dest::Btrfs(b) => b.mnt(),
            Dest::Ext4(e) => e.mnt(),
        }
    }
}

#[test]
fn the_command_line_exit_codes_dry_run_and_a_send_without_rescue() {
    let all = cases();
    if all.is_empty() {
        println!("SKIP the_command_line_exit_codes_dry_run_and_a_send_without_rescue: no testdata/rescue cases");
        return;
    }
    let rsend = testkit::rsend_bin();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in &all {
        let devs = case.devices(tmp.path());
        let run = |args: &[&str]| {
            let mut cmd = Command::new(&rsend);
            for d in &devs {
                cmd.arg("-d").arg(d);
            }
            cmd.args(args).args(case.parent_args()).arg(case.snapshot());
            cmd.output().unwrap()
        };
        let lossy = !case.lossless();
        // -n: the files and bytes that can be recovered, no stream.
        let o = run(&["--rescue", "-n"]);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let want = if lossy { 3 } else { 0 };
        if o.status.code() != Some(want)
            || stdout.lines().count() != 1
            || !stdout.contains(" files\t")
            || !stderr.contains("rsend: rescue: ")
        {
            failures.push(format!(
                "{}: rsend --rescue -n: exit {:?} (want {want}), stdout {stdout:?}, stderr {stderr:?}",
                case.name,
                o.status.code()
            ));
        }
        if case.name == "root-tree" && !stderr.contains("backup root") {
            failures.push(format!(
                "{}: the backup root used is not said: {stderr}",
                case.name
            ));
        }
        // Without --rescue: as before, the first loss stops the send
        // (exit code 1, no END), except where a copy repairs it.
        let stream = tmp.path().join("plain.stream");
        let o = run(&["-q", "-f", stream.to_str().unwrap()]);
        let ended = std::fs::read(&stream)
            .ok()
            .map(|s| {
                let mut r = btrfs_stream::Reader::new(&s[..]);
                let mut last = None;
                while let Ok(Some(c)) = r.next_command() {
                    last = Some(c.kind());
                }
                last == Some(btrfs_stream::CommandKind::End)
            })
            .unwrap_or(false);
        // A bad primary superblock is replaced by a copy, rescue or not.
        let fine = if case.lossless() || case.name == "superblock" {
            o.status.code() == Some(0) && ended
        } else {
            o.status.code() == Some(1) && !ended
        };
        if !fine {
            failures.push(format!(
                "{}: rsend without --rescue: exit {:?}, END {ended}: {}",
                case.name,
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
