//! `rsend --rescue` on kernel-made images damaged at random: every copy of
//! a few blocks of a snapshot's fs tree destroyed, and sometimes a data
//! sector. The rescue send must succeed, its stream must replay, every file
//! it holds must equal the snapshot's unless the loss report names it, every
//! file it lacks must be named (or sit below a directory that is), and every
//! inode with items in a destroyed block must be in the report.
//!
//! `RSEND_RESCUE_ROUNDS` sets the number of rounds (default 24); the seed
//! is fixed (`RSEND_RESCUE_SEED` changes it).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use btrfs_disk::items::{key_type, objectid};
use btrfs_disk::rescue::Losses;
use btrfs_disk::{Filesystem, Options, Subvolume};
use common::model::Model;
use common::{fixtures, hex, physical, read_manifest};

fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

/// A block of the fs tree: its address and the inodes with items under it.
struct TreeBlock {
    logical: u64,
    inodes: BTreeSet<u64>,
}

/// Every block of `sv`'s fs tree but the root, with the inodes under each.
fn tree_blocks(fs: &Filesystem, sv: &Subvolume) -> Vec<TreeBlock> {
    let t = fs.fs_tree(sv);
    let mut out = Vec::new();
    fn under(
        t: &btrfs_disk::Tree<'_>,
        b: &btrfs_disk::Block,
        out: &mut Vec<TreeBlock>,
        root: bool,
    ) -> BTreeSet<u64> {
        let mut inodes = BTreeSet::new();
        if b.is_leaf() {
            for i in 0..b.nritems() {
                let k = b.key(i).unwrap();
                if (objectid::FIRST_FREE..objectid::LAST_FREE).contains(&k.objectid) {
                    inodes.insert(k.objectid);
                }
            }
        } else {
            for i in 0..b.nritems() {
                inodes.extend(under(t, &t.child(b, i).unwrap(), out, false));
            }
        }
        if !root {
            out.push(TreeBlock {
                logical: b.bytenr(),
                inodes: inodes.clone(),
            });
        }
        inodes
    }
    under(&t, &t.root_block().unwrap(), &mut out, true);
    out
}

/// A sector of a regular uncompressed extent of some file: (ino, file
/// offset, logical).
fn data_sectors(fs: &Filesystem, sv: &Subvolume) -> Vec<(u64, u64, u64)> {
    let t = fs.fs_tree(sv);
    let mut out = Vec::new();
    for item in t.range(btrfs_disk::Key::MIN, btrfs_disk::Key::MAX) {
        let item = item.unwrap();
        if item.key.item_type != key_type::EXTENT_DATA {
            continue;
        }
        let fe = btrfs_disk::items::FileExtentItem::parse(item.data()).unwrap();
        let regular = fe.kind() == btrfs_disk::items::ExtentKind::Regular;
        let summed = fs
            .inode_in(&t, item.key.objectid)
            .is_ok_and(|i| !i.nodatasum());
        if summed
            && regular
            && fe.disk_bytenr() != 0
            && fe.compression() == btrfs_disk::items::Compression::None
            && fe.num_bytes() >= 4096
        {
            out.push((
                item.key.objectid,
                item.key.offset,
                fe.disk_bytenr() + fe.offset(),
            ));
        }
    }
    out
}

/// The inode numbers above `ino` in `fs`'s intact snapshot `sv`.
fn ancestors(fs: &Filesystem, sv: &Subvolume, ino: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut d = ino;
    while d != objectid::FIRST_FREE && out.len() < 4096 {
        let Ok(names) = fs.inode_names(sv, d) else {
            break;
        };
        let Some((dir, _, _)) = names.first() else {
            break;
        };
        out.push(*dir);
        d = *dir;
    }
    out
}

/// The paths (hex of the bytes) and inode numbers a loss report names, and
/// the inode numbers its lost tree blocks cover.
fn reported(lines: &[serde_json::Value]) -> (BTreeSet<String>, BTreeSet<u64>, Vec<(u64, u64)>) {
    let as_hex = |v: &serde_json::Value| -> Option<String> {
        match v {
            serde_json::Value::String(s) => Some(hex(s.as_bytes())),
            serde_json::Value::Object(o) => {
                o.get("hex").and_then(|h| h.as_str()).map(str::to_owned)
            }
            _ => None,
        }
    };
    let (mut paths, mut inos, mut spans) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    for l in lines {
        if let Some(p) = l.get("path").and_then(as_hex) {
            paths.insert(p);
        }
        for p in l
            .get("paths")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            paths.extend(as_hex(p));
        }
        if l["kind"] != "tree_block" {
            inos.extend(l.get("ino").and_then(|i| i.as_u64()));
        } else if let (Some(a), Some(z)) = (l["inodes"][0].as_u64(), l["inodes"][1].as_u64()) {
            // Inodes of which nothing is left are told by the range alone.
            spans.push((a, z));
        }
    }
    (paths, inos, spans)
}

/// Whether `path_hex` or a directory above it is named by the report: by
/// its path, or by its inode number in the intact snapshot `sv` of `fs`.
fn covered(
    paths: &BTreeSet<String>,
    told: &dyn Fn(&u64) -> bool,
    fs: &Filesystem,
    sv: &Subvolume,
    path_hex: &str,
) -> bool {
    let bytes: Vec<u8> = (0..path_hex.len() / 2)
        .map(|i| u8::from_str_radix(&path_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut p: &[u8] = &bytes;
    loop {
        if paths.contains(&hex(p)) {
            return true;
        }
        if lookup(fs, sv, p).is_some_and(|ino| told(&ino)) {
            return true;
        }
        match p.iter().rposition(|&b| b == b'/') {
            Some(i) => p = &p[..i],
            None => return false,
        }
    }
}

/// Whether `report` says inode `ino` was written as zeros where its data
/// at `logical` was.
fn zeroed_at(report: &[serde_json::Value], ino: u64, logical: u64) -> bool {
    report.iter().any(|l| {
        let start = l["logical"].as_u64().unwrap_or(u64::MAX);
        let len = l["ranges"][0][1].as_u64().unwrap_or(0);
        l["kind"] == "data" && l["ino"] == ino && (start..start + len).contains(&logical)
    })
}

/// The inode at path `p` (bytes, "." for the root) of `sv`.
fn lookup(fs: &Filesystem, sv: &Subvolume, p: &[u8]) -> Option<u64> {
    let mut ino = objectid::FIRST_FREE;
    for comp in p
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        ino = fs.lookup_name(sv, ino, comp).ok()??.location.objectid;
    }
    Some(ino)
}

fn rounds() -> u64 {
    std::env::var("RSEND_RESCUE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

#[test]
fn random_damage_to_many_small_files_is_sent_around_and_reported() {
    damage_at_random("nodesize-4k");
}

#[test]
fn random_damage_to_files_and_data_is_sent_around_and_reported() {
    damage_at_random("csum-crc32c");
}

fn damage_at_random(name: &str) {
    let Some(f) = fixtures().into_iter().find(|f| f.name == name) else {
        println!("SKIP random damage: no {name} fixture");
        return;
    };
    // An intact copy to compare with, and one to damage.
    let (intact, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fs = Filesystem::open(&f.decompress(intact.path())).unwrap();
    let devs = f.decompress(tmp.path());
    // The snapshot with the most files.
    let id = *common::ro_snapshots(&f)
        .iter()
        .max_by_key(|id| {
            std::fs::metadata(f.dir.join(format!("subvol-{id}.manifest"))).map_or(0, |m| m.len())
        })
        .unwrap();
    let sv = fs.subvolume(id).unwrap();
    let blocks = tree_blocks(&fs, &sv);
    let sectors = data_sectors(&fs, &sv);
    assert!(!blocks.is_empty(), "{} blocks", blocks.len());
    let pristine: Vec<Vec<u8>> = devs.iter().map(|d| std::fs::read(d).unwrap()).collect();
    let (want, _) = read_manifest(&f.dir.join(format!("subvol-{id}.manifest")));
    let want: BTreeMap<String, String> = want
        .into_iter()
        .map(|l| (l.split('\t').next().unwrap().to_owned(), l))
        .collect();
    let mut x: u64 = std::env::var("RSEND_RESCUE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x2545f4914f6cdd1d);
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut failures = Vec::new();
    let (mut lost_files, mut kept_files) = (0, 0);
    for round in 0..rounds() {
        for (d, bytes) in devs.iter().zip(&pristine) {
            std::fs::write(d, bytes).unwrap();
        }
        // Destroy every copy of 1 to 3 blocks, and sometimes a data sector.
        let mut expect: BTreeSet<u64> = BTreeSet::new();
        let mut what = Vec::new();
        for _ in 0..1 + rnd() % 3 {
            let b = &blocks[(rnd() % blocks.len() as u64) as usize];
            // Random bytes, or (a misdirected write) another valid block of
            // the tree, whose checksum matches but whose address does not.
            let other = &blocks[(rnd() % blocks.len() as u64) as usize];
            let misdirected = rnd() % 3 == 0 && other.logical != b.logical;
            for m in 1..=fs.num_copies(b.logical) {
                let (dev, at) = physical(&fs, &devs, b.logical, m);
                let junk: Vec<u8> = if misdirected {
                    let (odev, oat) = physical(&fs, &devs, other.logical, 1);
                    let img = &pristine[devs.iter().position(|d| *d == odev).unwrap()];
                    img[oat as usize..oat as usize + fs.nodesize()].to_vec()
                } else {
                    (0..fs.nodesize()).map(|_| rnd() as u8).collect()
                };
                overwrite(&dev, at, &junk);
            }
            expect.extend(&b.inodes);
            what.push(format!("block {}", b.logical));
        }
        let mut data_hit = None;
        if rnd() % 2 == 0 && !sectors.is_empty() {
            let (ino, off, logical) = sectors[(rnd() % sectors.len() as u64) as usize];
            for m in 1..=fs.num_copies(logical) {
                let (dev, at) = physical(&fs, &devs, logical, m);
                overwrite(&dev, at, &[0x5a; 4096]);
            }
            data_hit = Some((ino, off, logical));
            what.push(format!("data of inode {ino} at {off}"));
        }
        let what = format!("round {round} ({})", what.join(", "));
        let losses = Arc::new(Losses::new());
        let opts = Options {
            rescue: Some(losses.clone()),
            ..Options::default()
        };
        let dfs = match Filesystem::open_with(&devs, opts) {
            Ok(fs) => fs,
            Err(e) => {
                failures.push(format!("{what}: open: {e}"));
                continue;
            }
        };
        let dsv = dfs.subvolume(id).unwrap();
        let mut w = btrfs_stream::Writer::new(Vec::new());
        let sent = rsend::send::send_subvolume(&dfs, &dsv, &mut w, &Default::default());
        if let Err(e) = sent {
            failures.push(format!("{what}: send: {e:#}"));
            continue;
        }
        let report: Vec<serde_json::Value> =
            rsend::rescue::report(&dfs, std::slice::from_ref(&dsv))
                .unwrap()
                .into_iter()
                .map(|l| l.json)
                .collect();
        let model = match Model::replay(&w.into_inner()) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{what}: replay: {e}"));
                continue;
            }
        };
        let (paths, inos, spans) = reported(&report);
        let told =
            |ino: &u64| inos.contains(ino) || spans.iter().any(|(a, z)| (a..=z).contains(&ino));
        let failed_before = failures.len();
        let got: BTreeMap<String, String> = model
            .manifest()
            .into_iter()
            .map(|l| (l.split('\t').next().unwrap().to_owned(), l))
            .collect();
        for (p, line) in &got {
            match want.get(p) {
                None => failures.push(format!("{what}: {p} was never in the snapshot")),
                Some(w) if w != line && !covered(&paths, &told, &fs, &sv, p) => failures.push(
                    format!("{what}: {p} differs and is not reported:\n  want {w}\n  got  {line}"),
                ),
                _ => {}
            }
        }
        for p in want.keys() {
            if got.contains_key(p) {
                kept_files += 1;
            } else {
                lost_files += 1;
                if !covered(&paths, &told, &fs, &sv, p) {
                    failures.push(format!("{what}: {p} is missing and not reported"));
                }
            }
        }
        // Every inode of a destroyed block is reported; any other inode
        // reported is below one of those, or lost data.
        for ino in &expect {
            if !told(ino) {
                failures.push(format!(
                    "{what}: inode {ino} had items in a destroyed block and is not reported"
                ));
            }
        }
        for ino in &inos {
            let explained = expect.contains(ino)
                || data_hit.is_some_and(|(_, _, hit)| zeroed_at(&report, *ino, hit))
                || ancestors(&fs, &sv, *ino).iter().any(|a| expect.contains(a));
            if !explained {
                failures.push(format!(
                    "{what}: inode {ino} is reported but nothing of it was destroyed"
                ));
            }
        }
        if let Some((ino, _, logical)) = data_hit {
            let unsent = report
                .iter()
                .any(|l| l["kind"] == "inode" && l["ino"] == ino && l["sent"] == false);
            if !zeroed_at(&report, ino, logical) && !expect.contains(&ino) && !unsent {
                failures.push(format!(
                    "{what}: the destroyed data of inode {ino} is not reported"
                ));
            }
        }
        if failures.len() > failed_before {
            let shown: Vec<String> = report.iter().take(30).map(|l| l.to_string()).collect();
            failures.push(format!("{what}: the report:\n{}", shown.join("\n")));
        }
    }
    println!(
        "{} subvolume {id} ({} tree blocks, {} data extents): {} rounds: {kept_files} paths received, {lost_files} lost and reported",
        f.name,
        blocks.len(),
        sectors.len(),
        rounds()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
