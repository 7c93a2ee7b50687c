//! For the bookmark tests: a mounted scratch btrfs whose deleted snapshots'
//! space is made to be used again -- fill files written and deleted,
//! balances -- and what shows that it was: the tree blocks and data extents
//! a snapshot had (`btrfs inspect-internal dump-tree`) against what holds
//! those addresses afterwards (dump-tree of every tree, FIEMAP of the fill
//! files).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::run;

/// The subvolume id of the subvolume at `path`.
pub fn rootid(path: &Path) -> u64 {
    let out = run(Command::new("btrfs")
        .args(["inspect-internal", "rootid"])
        .arg(path));
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("rootid {}: {text:?}", path.display()))
}

/// What `dump-tree` shows of a tree (or of every tree): its blocks
/// (address -> generation) and the data extents its file extent items
/// point to (address -> length, generation).
#[derive(Default, Debug, Clone)]
pub struct Trees {
    pub blocks: BTreeMap<u64, u64>,
    pub extents: BTreeMap<u64, (u64, u64)>,
}

/// `btrfs inspect-internal dump-tree [-t TREE] DEV`, read (run it after a
/// commit: it reads the device).
pub fn dump_tree(dev: &str, tree: Option<u64>) -> Trees {
    let mut cmd = Command::new("btrfs");
    cmd.args(["inspect-internal", "dump-tree"]);
    if let Some(t) = tree {
        cmd.arg("-t").arg(t.to_string());
    }
    let out = run(cmd.arg(dev));
    let mut t = Trees::default();
    let mut item_gen = 0;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        // "generation 7 type 1 (regular)": the file extent item's
        if w.len() > 3 && w[0] == "generation" && w[2] == "type" {
            item_gen = w[1].parse().unwrap_or(0);
        }
        // "leaf 30457856 items 101 free space 5181 generation 9 owner 256"
        // "node 30687232 level 1 items 2 free space 491 generation 9 owner 257"
        if matches!(w.first(), Some(&"leaf") | Some(&"node")) && w.len() > 3 && w[2] != "flags" {
            let gen = w.iter().position(|x| *x == "generation");
            if let (Ok(addr), Some(g)) = (w[1].parse::<u64>(), gen) {
                if let Some(Ok(g)) = w.get(g + 1).map(|x| x.parse::<u64>()) {
                    t.blocks.insert(addr, g);
                }
            }
        }
        // "extent data disk byte 13631488 nr 4096"
        if w.len() == 7 && w[..4] == ["extent", "data", "disk", "byte"] {
            if let (Ok(a), Ok(n)) = (w[4].parse::<u64>(), w[6].parse::<u64>()) {
                if a != 0 {
                    t.extents.insert(a, (n, item_gen));
                }
            }
        }
    }
    t
}

/// What is allocated now, from the extent tree (`dump-tree -t extent`,
/// cheaper than every tree): tree blocks (address -> generation) and data
/// extents (address -> length, generation).
pub fn allocated_blocks(dev: &str) -> Trees {
    let out = run(Command::new("btrfs")
        .args(["inspect-internal", "dump-tree", "-t", "extent"])
        .arg(dev));
    let mut t = Trees::default();
    let mut key: Option<(u64, u64)> = None;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        // "item 3 key (30441472 METADATA_ITEM 0) itemoff 16153 itemsize 33"
        // "refs 1 gen 7 flags TREE_BLOCK" (or "flags DATA")
        if w.first() == Some(&"item") && w.len() > 5 && w[2] == "key" {
            let addr = w[3].trim_start_matches('(').parse().ok();
            let len = w[5].trim_end_matches(')').parse().ok();
            key = match (addr, len, w[4]) {
                (Some(a), Some(n), "METADATA_ITEM" | "EXTENT_ITEM") => Some((a, n)),
                _ => None,
            };
        } else if w.first() == Some(&"refs") && w.len() >= 6 && w[2] == "gen" {
            let (Some((a, n)), Ok(g)) = (key.take(), w[3].parse()) else {
                continue;
            };
            if w[5..].contains(&"TREE_BLOCK") {
                t.blocks.insert(a, g);
            } else if w[5..].contains(&"DATA") {
                t.extents.insert(a, (n, g));
            }
        }
    }
    t
}

/// The writable subvolumes of the filesystem mounted at `mnt` (paths),
/// nested ones before those holding them.
pub fn writable_subvolumes(mnt: &Path) -> Vec<PathBuf> {
    let list = |ro: bool| -> Vec<String> {
        let mut cmd = Command::new("btrfs");
        cmd.args(["subvolume", "list"]);
        if ro {
            cmd.arg("-r");
        }
        let out = run(cmd.arg(mnt));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(" path ").map(|(_, p)| p.to_owned()))
            .collect()
    };
    let ro = list(true);
    let mut rw: Vec<String> = list(false)
        .into_iter()
        .filter(|p| !ro.contains(p))
        .collect();
    // Nested ones first: a subvolume holding one cannot be deleted.
    rw.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    rw.into_iter().map(|p| mnt.join(p)).collect()
}

/// Commits the filesystem at `mnt` (`btrfs filesystem sync`).
pub fn commit(mnt: &Path) {
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(mnt));
}

/// Deletes the subvolumes `paths` and waits until the cleaner freed them,
/// then commits: their space is free afterwards.
pub fn delete_subvolumes(mnt: &Path, paths: &[PathBuf]) {
    for chunk in paths.chunks(50) {
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "delete"])
            .args(chunk));
    }
    // The commit wakes the cleaner; else `subvolume sync` waits for the
    // transaction kthread's next round (30 s).
    commit(mnt);
    run(Command::new("btrfs").args(["subvolume", "sync"]).arg(mnt));
    commit(mnt);
    // Space freed in the last transaction is pinned until the next commit.
    commit(mnt);
}

/// Bytes free on the filesystem at `mnt` (df).
pub fn free_bytes(mnt: &Path) -> u64 {
    let out = run(Command::new("df").args(["-B1", "--output=avail"]).arg(mnt));
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("df {}: {text:?}", mnt.display()))
}

/// Writes about `bytes` of incompressible data in `dir` as files of at
/// most 32 MiB (names `PREFIX.N`), each flushed; stops early, without
/// failing, when the filesystem is full. Returns the files.
pub fn fill(dir: &Path, prefix: &str, bytes: u64, seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = testkit::Rng(seed | 1);
    let mut buf = vec![0u8; 1 << 20];
    let mut files = Vec::new();
    let mut left = bytes;
    let mut n = 0;
    'files: while left > 0 {
        let p = dir.join(format!("{prefix}.{n}"));
        n += 1;
        let mut f = std::fs::File::create(&p).unwrap();
        files.push(p);
        let mut in_file = 0u64;
        while left > 0 && in_file < 32 << 20 {
            for w in buf.chunks_mut(8) {
                w.copy_from_slice(&rng.next_u64().to_le_bytes());
            }
            let len = left.min(buf.len() as u64) as usize;
            if f.write_all(&buf[..len]).is_err() {
                break 'files;
            }
            left -= len as u64;
            in_file += len as u64;
        }
        if f.sync_all().is_err() {
            break;
        }
    }
    files
}

/// Preallocates (fallocate, no data written) all but about `margin`
/// bytes of the free space of the filesystem at `mnt` as the file `name`
/// at its top; commits. Less when that much does not fit (df's estimate
/// is not exact).
pub fn preallocate_free_space(mnt: &Path, name: &str, margin: u64) -> PathBuf {
    let p = mnt.join(name);
    let mut want = free_bytes(mnt).saturating_sub(margin);
    while want > 0 {
        let ok = Command::new("fallocate")
            .arg("-l")
            .arg(want.to_string())
            .arg(&p)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            break;
        }
        let _ = std::fs::remove_file(&p);
        want = want / 10 * 9;
    }
    commit(mnt);
    p
}

/// Removes `files`.
pub fn remove(files: &[PathBuf]) {
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}

/// `btrfs balance start ARGS MNT`; fails with the space usage before it
/// and the kernel's last words when it fails.
pub fn balance(mnt: &Path, args: &[&str]) {
    let usage = Command::new("btrfs")
        .args(["filesystem", "usage", "-T"])
        .arg(mnt)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let o = Command::new("btrfs")
        .args(["balance", "start"])
        .args(args)
        .arg(mnt)
        .output()
        .expect("btrfs balance");
    if !o.status.success() {
        let dmesg = Command::new("dmesg")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let tail: Vec<&str> = dmesg.lines().rev().take(8).collect();
        panic!(
            "btrfs balance start {} failed: {}\nspace before it:\n{usage}\nkernel:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim_end(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

/// What became of the tree blocks and data extents of deleted snapshots.
#[derive(Default, Debug)]
pub struct Reuse {
    /// Tree blocks that no tree has any more (freed).
    pub freed_blocks: usize,
    /// Of those, the ones whose address holds a block of another
    /// generation now.
    pub reused_blocks: usize,
    /// Data extents that are not allocated any more with their
    /// generation (freed).
    pub freed_extents: usize,
    /// Of those, the ones a fill file's data overlaps now.
    pub reused_extents: usize,
}

impl Reuse {
    /// `before` (trees of the deleted snapshots) against `now` (every tree
    /// of the filesystem now) and the fill files `fills`.
    pub fn measure(before: &Trees, now: &Trees, fills: &[PathBuf]) -> Reuse {
        let freed: Vec<u64> = before
            .blocks
            .iter()
            .filter(|(a, g)| now.blocks.get(a) != Some(g))
            .map(|(a, _)| *a)
            .collect();
        let mut filled: Vec<(u64, u64)> = Vec::new();
        for f in fills {
            if let Ok(ext) = testkit::fiemap::fiemap(f) {
                filled.extend(ext.iter().map(|e| (e.physical, e.physical + e.length)));
            }
        }
        filled.sort();
        let overlaps = |a: u64, n: u64| {
            let i = filled.partition_point(|&(_, e)| e <= a);
            filled.get(i).is_some_and(|&(s, _)| s < a + n)
        };
        let freed_extents: Vec<(u64, u64)> = before
            .extents
            .iter()
            .filter(|(a, (_, g))| now.extents.get(a).is_none_or(|(_, ng)| ng != g))
            .map(|(a, (n, _))| (*a, *n))
            .collect();
        Reuse {
            freed_blocks: freed.len(),
            reused_blocks: freed.iter().filter(|a| now.blocks.contains_key(a)).count(),
            freed_extents: freed_extents.len(),
            reused_extents: freed_extents
                .iter()
                .filter(|(a, n)| overlaps(*a, *n))
                .count(),
        }
    }
}

impl std::fmt::Display for Reuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} freed tree blocks hold another block now (same address, other generation), \
             {} of {} freed data extents hold fill data now",
            self.reused_blocks, self.freed_blocks, self.reused_extents, self.freed_extents
        )
    }
}

/// The union of `trees`.
pub fn union<'a>(trees: impl IntoIterator<Item = &'a Trees>) -> Trees {
    let mut u = Trees::default();
    for t in trees {
        u.blocks.extend(&t.blocks);
        u.extents.extend(&t.extents);
    }
    u
}
