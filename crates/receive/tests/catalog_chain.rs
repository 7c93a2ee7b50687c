//! The catalog (`rreceive --catalog`) of a chain of ten nights of stream
//! files (testdata/make-catalog-chain.sh: kernel-made and rsend-made, v1 and
//! v2 with compressed data, one stream file zstd-compressed, night 10 cloning
//! from night 5) of a source with renames of files and directories, a file
//! deleted and recreated, hard links, reflinks, sparse files, xattrs, odd
//! names, devices and a large file changed in small pieces every night.
//!
//! Built night by night with `rreceive --catalog DB -f FILE`, then for 200
//! random (night, path) pairs (`RSEND_CATALOG_PAIRS` for more; a fixed seed)
//! `--restore` must give exactly what the snapshot held: content, type,
//! mode, owner (as root), times, xattrs, symlink targets, device numbers,
//! and the hard links within the restored subtree as one inode with the
//! link count of the links inside it. `--ls` and `--find` must list what the
//! snapshot held. The snapshots are known from the committed manifests
//! (testdata/catalog, no root needed) and, as root, from a chain generated
//! live with its snapshots kept mounted (also: every hole of a snapshot's
//! file is a hole in the restored file). A chain with a missing night, a
//! truncated stream and a flipped byte each give their error.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::{assert_no_panic, fs_specific_xattr, rreceive_bin, testdata, walk, Entry};
use testkit::{kernel_available, run, BtrfsImage, Rng};

const NIGHTS: usize = 10;
/// The night whose stream file stays zstd-compressed in the chain.
const ZSTD_NIGHT: usize = 7;
const SEED: u64 = 0x5eed_0050_ca7a_1065;

fn night_name(n: usize) -> String {
    format!("n{n:02}")
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

// ---------------------------------------------------------------------------
// What a snapshot holds

/// One path of a snapshot.
#[derive(Debug, Clone)]
struct Item {
    kind: String,
    /// Permission bits with setuid, setgid and sticky (st_mode & 07777).
    mode: u32,
    uid: u32,
    gid: u32,
    /// The link count in the snapshot (directories: 1, as --ls shows them).
    nlink: u64,
    /// st_size for regular files and symlinks, else 0.
    size: u64,
    mtime: (i64, i64),
    atime: (i64, i64),
    sha256: Option<String>,
    target: Option<Vec<u8>>,
    rdev: Option<(u64, u64)>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The holes of a regular file (start, end), when known (live only).
    holes: Option<Vec<(u64, u64)>>,
}

/// A snapshot: its paths ("" for the root) and its hard-link groups (every
/// group of two or more paths of one non-directory inode).
struct Snapshot {
    name: String,
    items: BTreeMap<Vec<u8>, Item>,
    groups: Vec<Vec<Vec<u8>>>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex in the manifest"))
        .collect()
}

fn parse_time(s: &str) -> (i64, i64) {
    let (sec, nsec) = s.split_once('.').expect("SEC.NSEC");
    (sec.parse().unwrap(), nsec.parse().unwrap())
}

/// A manifest of testdata/manifest.py --links.
fn parse_manifest(name: &str, text: &str) -> Snapshot {
    let mut items = BTreeMap::new();
    let mut groups = Vec::new();
    for line in text.lines() {
        if let Some(g) = line.strip_prefix("# hardlinks ") {
            groups.push(g.split(' ').map(unhex).collect());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert!(f.len() >= 13, "{name}: short manifest line {line:?}");
        let mut path = unhex(f[0]);
        if path == b"." {
            path.clear();
        }
        let kind = f[1].to_string();
        let dash = |s: &str| (s != "-").then(|| s.to_string());
        let xattrs = if f[12] == "-" {
            BTreeMap::new()
        } else {
            f[12]
                .split(';')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.as_bytes().to_vec(), unhex(v))
                })
                .collect()
        };
        let item = Item {
            nlink: if kind == "dir" {
                1
            } else {
                f[5].parse().unwrap()
            },
            size: dash(f[6]).map_or(0, |s| s.parse().unwrap()),
            mode: u32::from_str_radix(f[2], 8).unwrap(),
            uid: f[3].parse().unwrap(),
            gid: f[4].parse().unwrap(),
            mtime: parse_time(f[7]),
            atime: parse_time(f[8]),
            sha256: dash(f[9]),
            target: dash(f[10]).map(|t| unhex(&t)),
            rdev: dash(f[11]).map(|r| {
                let (a, b) = r.split_once(':').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            }),
            xattrs,
            holes: None,
            kind,
        };
        items.insert(path, item);
    }
    Snapshot {
        name: name.to_string(),
        items,
        groups,
    }
}

/// The (start, end) of each hole of the file at `p` (SEEK_DATA/SEEK_HOLE).
fn holes(p: &Path) -> Vec<(u64, u64)> {
    let data = data_runs(p);
    let size = fs::symlink_metadata(p).unwrap().len();
    let mut out = Vec::new();
    let mut pos = 0;
    for (s, e) in data {
        if s > pos {
            out.push((pos, s));
        }
        pos = e;
    }
    if pos < size {
        out.push((pos, size));
    }
    out
}

/// The (start, end) of each run of data of the file at `p`.
fn data_runs(p: &Path) -> Vec<(u64, u64)> {
    use nix::unistd::{lseek, Whence};
    use std::os::fd::AsRawFd;
    let f = fs::File::open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    let size = f.metadata().unwrap().len() as i64;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = 0i64;
    while pos < size {
        let Ok(start) = lseek(fd, pos, Whence::SeekData) else {
            break; // ENXIO: no data after pos
        };
        let end = lseek(fd, start, Whence::SeekHole).unwrap();
        out.push((start as u64, end as u64));
        pos = end;
    }
    out
}

fn item_of(e: &Entry) -> Item {
    let major_minor = |r: u64| (libc::major(r) as u64, libc::minor(r) as u64);
    Item {
        kind: e.kind.to_string(),
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        nlink: if e.kind == "dir" { 1 } else { e.nlink },
        size: e.size.unwrap_or(0),
        mtime: e.mtime,
        atime: e.atime,
        sha256: e.sha256.clone(),
        target: e.target.clone(),
        rdev: e.rdev.map(major_minor),
        xattrs: e
            .xattrs
            .iter()
            .filter(|(n, _)| !fs_specific_xattr(n))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
        holes: None,
    }
}

/// A mounted snapshot, walked with lstat and listxattr (and its files'
/// holes found with SEEK_HOLE).
fn walk_snapshot(name: &str, root: &Path) -> Snapshot {
    let tree = walk(root);
    let mut by_ino: BTreeMap<(u64, u64), Vec<Vec<u8>>> = BTreeMap::new();
    let mut items = BTreeMap::new();
    for (p, e) in &tree {
        let mut item = item_of(e);
        if e.kind == "reg" {
            item.holes = Some(holes(&root.join(OsStr::from_bytes(p))));
        }
        if e.kind != "dir" {
            by_ino.entry(e.ino).or_default().push(p.clone());
        }
        items.insert(p.clone(), item);
    }
    let mut groups: Vec<Vec<Vec<u8>>> = by_ino.into_values().filter(|g| g.len() > 1).collect();
    groups.sort();
    Snapshot {
        name: name.to_string(),
        items,
        groups,
    }
}

fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    if rel.is_empty() {
        name.to_vec()
    } else {
        [rel, b"/", name].concat()
    }
}

fn parent_and_name(p: &[u8]) -> (&[u8], &[u8]) {
    match p.iter().rposition(|&b| b == b'/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (b"", p),
    }
}

/// `rel` and everything beneath it, keyed by the path below `rel` ("" for
/// `rel` itself).
fn subtree<'a>(snap: &'a Snapshot, rel: &[u8]) -> BTreeMap<Vec<u8>, &'a Item> {
    let mut out = BTreeMap::new();
    for (p, item) in &snap.items {
        let below = if rel.is_empty() {
            Some(p.as_slice())
        } else if p == rel {
            Some(&b""[..])
        } else {
            p.strip_prefix(rel).and_then(|r| r.strip_prefix(b"/"))
        };
        if let Some(b) = below {
            out.insert(b.to_vec(), item);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The chain and the catalog

/// One night's stream file.
#[derive(Clone)]
struct Night {
    name: String,
    file: PathBuf,
}

/// The committed streams, uncompressed into `dir` (but night 7's, which is
/// copied as it is: the catalog takes zstd-compressed stream files too).
fn committed_chain(dir: &Path) -> Vec<Night> {
    fs::create_dir_all(dir).unwrap();
    (1..=NIGHTS)
        .map(|n| {
            let name = night_name(n);
            let zst = testdata()
                .join("catalog/streams")
                .join(format!("{name}.stream.zst"));
            let file = if n == ZSTD_NIGHT {
                let f = dir.join(format!("{name}.stream.zst"));
                fs::copy(&zst, &f).unwrap();
                f
            } else {
                let f = dir.join(format!("{name}.stream"));
                let out = Command::new("zstd")
                    .args(["-q", "-d", "-f"])
                    .arg(&zst)
                    .arg("-o")
                    .arg(&f)
                    .output()
                    .expect("zstd (apt-get install zstd) to uncompress testdata/catalog");
                assert!(out.status.success(), "zstd -d {}: {out:?}", zst.display());
                f
            };
            Night { name, file }
        })
        .collect()
}

fn committed_snapshots() -> Vec<Snapshot> {
    (1..=NIGHTS)
        .map(|n| {
            let name = night_name(n);
            let path = testdata()
                .join("catalog/manifests")
                .join(format!("{name}.manifest"));
            let text =
                fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            parse_manifest(&name, &text)
        })
        .collect()
}

/// `rreceive --catalog DB ARGS...`, killed after 2 minutes (exit code
/// 124: `timeout`).
fn catalog(db: &Path, args: &[&OsStr]) -> Output {
    let out = Command::new("timeout")
        .arg("120")
        .arg(rreceive_bin())
        .arg("--catalog")
        .arg(db)
        .args(args)
        .output()
        .expect("run rreceive");
    assert_no_panic(&out);
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn catalog_ok(db: &Path, args: &[&OsStr]) -> Output {
    let out = catalog(db, args);
    assert!(
        out.status.success(),
        "rreceive --catalog {} {args:?} failed ({}):\n{}",
        db.display(),
        out.status,
        text(&out.stderr)
    );
    out
}

fn add(db: &Path, file: &Path) -> Output {
    catalog(db, &[OsStr::new("-f"), file.as_os_str()])
}

fn add_ok(db: &Path, file: &Path) -> Output {
    catalog_ok(db, &[OsStr::new("-f"), file.as_os_str()])
}

/// `SNAP` for the root, else `SNAP/PATH`.
fn spec(snap: &str, rel: &[u8]) -> OsString {
    let mut s = snap.as_bytes().to_vec();
    if !rel.is_empty() {
        s.push(b'/');
        s.extend_from_slice(rel);
    }
    OsString::from_vec(s)
}

/// `--restore` of `path` of night `name` into a new directory in `work`,
/// which must fail (exit 1; the message naming the night when
/// `names_night`) and leave nothing under the final name: the message.
fn refused_restore(
    db: &Path,
    work: &Path,
    name: &str,
    path: &[u8],
    how: &str,
    names_night: bool,
) -> String {
    let dest = work.join("restore");
    fs::create_dir(&dest).unwrap();
    let what = spec(name, path);
    let out = catalog(db, &[OsStr::new("--restore"), &what, dest.as_os_str()]);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "--restore {what:?} {how} ({name}): {err}"
    );
    if names_night {
        assert!(
            err.contains(name),
            "--restore {what:?}: the message does not name {name}: {err}"
        );
    }
    let base = dest.join(OsStr::from_bytes(parent_and_name(path).1));
    assert!(
        fs::symlink_metadata(&base).is_err(),
        "--restore {what:?} failed but left {}",
        base.display()
    );
    err
}

// ---------------------------------------------------------------------------
// Comparing a restore with the snapshot

/// The differences between the restored `got` and `rel` of `snap`.
fn restore_differences(snap: &Snapshot, rel: &[u8], got: &Path, how: &Compare) -> Vec<String> {
    let want = subtree(snap, rel);
    let tree = walk(got);
    let show = |p: &[u8]| format!("'{}'", join(rel, p).escape_ascii());
    let mut d = Vec::new();
    for (p, w) in &want {
        let Some(e) = tree.get(p) else {
            d.push(format!("{} missing", show(p)));
            continue;
        };
        let g = item_of(e);
        let mut fields = Vec::new();
        macro_rules! cmp {
            ($f:ident) => {
                if w.$f != g.$f {
                    fields.push(format!("{}: {:?} != {:?}", stringify!($f), w.$f, g.$f));
                }
            };
        }
        cmp!(kind);
        cmp!(mode);
        if how.owners {
            cmp!(uid);
            cmp!(gid);
        }
        cmp!(size);
        cmp!(sha256);
        cmp!(target);
        cmp!(rdev);
        cmp!(mtime);
        cmp!(atime);
        if how.big_xattrs {
            cmp!(xattrs);
        } else {
            let small = |x: &BTreeMap<Vec<u8>, Vec<u8>>| -> BTreeMap<Vec<u8>, Vec<u8>> {
                x.iter()
                    .filter(|(_, v)| v.len() <= BIG_XATTR)
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect()
            };
            if small(&w.xattrs) != small(&g.xattrs) {
                fields.push(format!("xattrs: {:?} != {:?}", w.xattrs, g.xattrs));
            }
        }
        if let (Some(holes), "reg") = (&w.holes, g.kind.as_str()) {
            let file = if p.is_empty() {
                got.to_path_buf()
            } else {
                got.join(OsStr::from_bytes(p))
            };
            let data = data_runs(&file);
            for &(hs, he) in holes {
                // Every whole 4 KiB block of the hole.
                let (bs, be) = (hs.div_ceil(4096) * 4096, he / 4096 * 4096);
                if bs >= be {
                    continue;
                }
                if let Some(&(ds, de)) = data.iter().find(|&&(ds, de)| ds < be && de > bs) {
                    fields.push(format!(
                        "the hole {bs}..{be} of the snapshot's file is data {ds}..{de} in the restored file"
                    ));
                }
            }
        }
        if !fields.is_empty() {
            d.push(format!("{}: {}", show(p), fields.join("; ")));
        }
    }
    for p in tree.keys() {
        if !want.contains_key(p) {
            d.push(format!("{} unexpected", show(p)));
        }
    }
    // Hard links: the paths of each inode of the subtree, and its link count.
    let mut want_links: BTreeSet<Vec<Vec<u8>>> = BTreeSet::new();
    let mut grouped = BTreeSet::new();
    for g in &snap.groups {
        let inside: Vec<Vec<u8>> = g
            .iter()
            .filter_map(|p| {
                let sub = subtree_key(rel, p)?;
                grouped.insert(sub.clone());
                Some(sub)
            })
            .collect();
        if !inside.is_empty() {
            want_links.insert(inside);
        }
    }
    for (p, w) in &want {
        if w.kind != "dir" && !grouped.contains(p) {
            want_links.insert(vec![p.clone()]);
        }
    }
    let mut by_ino: BTreeMap<(u64, u64), Vec<Vec<u8>>> = BTreeMap::new();
    for (p, e) in &tree {
        if e.kind != "dir" {
            by_ino.entry(e.ino).or_default().push(p.clone());
        }
        if e.kind != "dir" {
            let links_inside = want_links
                .iter()
                .find(|g| g.contains(p))
                .map_or(1, |g| g.len() as u64);
            if e.nlink != links_inside {
                d.push(format!(
                    "{}: link count {} != {links_inside} (the links inside the restored subtree)",
                    show(p),
                    e.nlink
                ));
            }
        }
    }
    let got_links: BTreeSet<Vec<Vec<u8>>> = by_ino.into_values().collect();
    if got_links != want_links {
        let only_want: Vec<_> = want_links.difference(&got_links).collect();
        let only_got: Vec<_> = got_links.difference(&want_links).collect();
        d.push(format!(
            "hard links differ: the snapshot's {:?}, the restore's {:?}",
            only_want
                .iter()
                .map(|g| show_group(rel, g))
                .collect::<Vec<_>>(),
            only_got
                .iter()
                .map(|g| show_group(rel, g))
                .collect::<Vec<_>>()
        ));
    }
    d
}

fn show_group(rel: &[u8], g: &[Vec<u8>]) -> Vec<String> {
    g.iter()
        .map(|p| join(rel, p).escape_ascii().to_string())
        .collect()
}

/// `p` as a path below `rel` ("" for `rel` itself), if it is in it.
fn subtree_key(rel: &[u8], p: &[u8]) -> Option<Vec<u8>> {
    if rel.is_empty() {
        Some(p.to_vec())
    } else if p == rel {
        Some(Vec::new())
    } else {
        p.strip_prefix(rel)
            .and_then(|r| r.strip_prefix(b"/"))
            .map(<[u8]>::to_vec)
    }
}

/// What a comparison leaves out where the restore cannot hold it.
struct Compare {
    /// Owners (only root can set them).
    owners: bool,
    /// Xattr values over BIG_XATTR bytes (ext4 without ea_inode holds
    /// none of 4 KiB; rreceive skips them with a warning).
    big_xattrs: bool,
}

const BIG_XATTR: usize = 3000;

/// A directory below `base` (or else below /dev/shm) whose filesystem
/// holds a 4 KiB user xattr, and whether one was found.
fn restore_dir(base: &Path) -> (tempfile::TempDir, bool) {
    for dir in [base, Path::new("/dev/shm")] {
        let Ok(t) = tempfile::tempdir_in(dir) else {
            continue;
        };
        let probe = t.path().join("probe");
        fs::write(&probe, b"").unwrap();
        let ok = xattr::set(&probe, "user.probe", &[b'x'; 4096]).is_ok();
        fs::remove_file(&probe).unwrap();
        if ok {
            return (t, true);
        }
    }
    (tempfile::tempdir_in(base).unwrap(), false)
}

/// The numbers of `rreceive: restored F files, B bytes[ into DEST]; read R
/// bytes of stream files (S bytes in the chain)`.
fn restore_summary(stderr: &str) -> Option<[u64; 4]> {
    // From the last summary to the end: DEST may hold a newline.
    let line = &stderr[stderr.rfind("rreceive: restored ")?..];
    // The number before `word`.
    let before = |word: &str| -> Option<u64> {
        let at = line.find(word)?;
        line[..at]
            .split_whitespace()
            .last()?
            .trim_start_matches('(')
            .parse()
            .ok()
    };
    Some([
        before(" files, ")?,
        before(" bytes")?,
        before(" bytes of stream files")?,
        before(" bytes in the chain")?,
    ])
}

/// What the restores read, for the figures.
#[derive(Default)]
struct Figures {
    restores: usize,
    entries: usize,
    read: u64,
    chain: u64,
}

/// Restores `snap`'s `rel` into a fresh directory below `work` and compares it.
fn restore_and_compare(
    db: &Path,
    snap: &Snapshot,
    rel: &[u8],
    work: &Path,
    how: &Compare,
    figures: &mut Figures,
) -> Vec<String> {
    let dest = work.join(format!("restore-{}", figures.restores));
    fs::create_dir(&dest).unwrap();
    let what = spec(&snap.name, rel);
    let out = catalog(db, &[OsStr::new("--restore"), &what, dest.as_os_str()]);
    figures.restores += 1;
    let err = text(&out.stderr);
    let mut d = Vec::new();
    if !out.status.success() {
        d.push(format!("--restore {what:?} failed ({}): {err}", out.status));
    } else {
        let base = if rel.is_empty() {
            snap.name.as_bytes()
        } else {
            parent_and_name(rel).1
        };
        let got = dest.join(OsStr::from_bytes(base));
        if fs::symlink_metadata(&got).is_err() {
            d.push(format!("--restore {what:?} made no {}", got.display()));
        } else {
            d.extend(
                restore_differences(snap, rel, &got, how)
                    .into_iter()
                    .map(|x| format!("--restore {what:?}: {x}")),
            );
            figures.entries += subtree(snap, rel).len();
        }
        match restore_summary(&err) {
            Some([_, _, r, s]) => {
                figures.read += r;
                figures.chain += s;
                let item = &snap.items[rel];
                if item.kind == "reg" && r > 2 * item.size + (1 << 20) {
                    d.push(format!(
                        "--restore {what:?}: read {r} bytes of stream files for a file of {} bytes: {err}",
                        item.size
                    ));
                }
                if r > s {
                    d.push(format!(
                        "--restore {what:?}: read {r} bytes of a chain of {s}: {err}"
                    ));
                }
            }
            None => d.push(format!(
                "--restore {what:?}: no summary line on stderr: {err:?}"
            )),
        }
    }
    let _ = fs::remove_dir_all(&dest);
    d
}

/// The (night, path) pairs: a few fixed ones (the roots, the large and the
/// sparse file every night, directories renamed, every entry of misc/ and
/// odd/ of n01 and n10: each kind of file and the odd names on their
/// own), then `n` random ones.
/// Without root no device can be made: subtrees holding one are left out.
fn pairs(snaps: &[Snapshot], n: usize, owners: bool) -> Vec<(usize, Vec<u8>)> {
    let mut out = vec![(0, Vec::new()), (NIGHTS - 1, Vec::new())];
    for (i, s) in snaps.iter().enumerate() {
        for p in [&b"large.bin"[..], b"sparse.img", b"data", b"src"] {
            if s.items.contains_key(p) {
                out.push((i, p.to_vec()));
            }
        }
    }
    for i in [0, NIGHTS - 1] {
        for p in snaps[i].items.keys() {
            if p.starts_with(b"misc/") || p.starts_with(b"odd/") {
                out.push((i, p.clone()));
            }
        }
    }
    let fixed = out.len();
    let mut rng = Rng(SEED);
    while out.len() < fixed + n {
        let i = rng.below(NIGHTS as u64) as usize;
        let keys: Vec<&Vec<u8>> = snaps[i].items.keys().collect();
        out.push((i, keys[rng.below(keys.len() as u64) as usize].clone()));
    }
    if !owners {
        out.retain(|(i, p)| {
            !subtree(&snaps[*i], p)
                .values()
                .any(|it| it.kind == "chr" || it.kind == "blk")
        });
    }
    out
}

fn pair_count() -> usize {
    std::env::var("RSEND_CATALOG_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

// ---------------------------------------------------------------------------
// --ls and --find

/// The escaping of btrfs-progs' receive --dump (the catalog's NAME).
fn escape(s: &[u8]) -> String {
    let mut out = String::new();
    for &c in s {
        match c {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x1b => out.push_str("\\e"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x0b => out.push_str("\\v"),
            b' ' => out.push_str("\\ "),
            b'\\' => out.push_str("\\\\"),
            0x21..=0x5b | 0x5d..=0x7e => out.push(c as char),
            _ => out.push_str(&format!("\\{c:03o}")),
        }
    }
    out
}

/// `ls -l`'s mode column.
fn mode_string(kind: &str, mode: u32) -> String {
    let t = match kind {
        "dir" => 'd',
        "lnk" => 'l',
        "chr" => 'c',
        "blk" => 'b',
        "fifo" => 'p',
        "sock" => 's',
        _ => '-',
    };
    let mut s = String::from(t);
    let bit = |b: u32, c: char| if mode & b != 0 { c } else { '-' };
    let special = |x: u32, sp: u32, on: char, off: char| match (mode & x != 0, mode & sp != 0) {
        (true, true) => on,
        (false, true) => off,
        (true, false) => 'x',
        (false, false) => '-',
    };
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(special(0o100, 0o4000, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(special(0o010, 0o2000, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(special(0o001, 0o1000, 't', 'T'));
    s
}

/// One --ls / --find line: `MODE NLINK UID GID SIZE MTIME NAME`.
fn ls_line(item: &Item, name: &[u8]) -> String {
    format!(
        "{} {} {} {} {} {}.{:09} {}",
        mode_string(&item.kind, item.mode),
        item.nlink,
        item.uid,
        item.gid,
        item.size,
        item.mtime.0,
        item.mtime.1,
        escape(name)
    )
}

fn children<'a>(snap: &'a Snapshot, dir: &[u8]) -> Vec<(&'a [u8], &'a Item)> {
    snap.items
        .iter()
        .filter(|(p, _)| !p.is_empty() && parent_and_name(p).0 == dir)
        .map(|(p, i)| (parent_and_name(p).1, i))
        .collect()
}

fn lines(out: &[u8]) -> Vec<String> {
    text(out).lines().map(str::to_string).collect()
}

fn check_ls(db: &Path, snap: &Snapshot, rel: &[u8], count: &mut usize) -> Vec<String> {
    let what = spec(&snap.name, rel);
    let out = catalog(db, &[OsStr::new("--ls"), &what]);
    if !out.status.success() {
        return vec![format!(
            "--ls {what:?} failed ({}): {}",
            out.status,
            text(&out.stderr)
        )];
    }
    let got = lines(&out.stdout);
    *count += got.len();
    let item = &snap.items[rel];
    let want: Vec<String> = if item.kind == "dir" {
        let mut c = children(snap, rel);
        c.sort_by(|a, b| a.0.cmp(b.0));
        c.into_iter().map(|(n, i)| ls_line(i, n)).collect()
    } else {
        // The entry by its name (or by the path asked for).
        let by_name = vec![ls_line(item, parent_and_name(rel).1)];
        if got != by_name && got == vec![ls_line(item, rel)] {
            return Vec::new();
        }
        by_name
    };
    if got == want {
        return Vec::new();
    }
    let mut d = vec![format!("--ls {what:?} differs from the snapshot:")];
    for w in want.iter().filter(|w| !got.contains(w)) {
        d.push(format!("  want {w}"));
    }
    for g in got.iter().filter(|g| !want.contains(g)) {
        d.push(format!("  got  {g}"));
    }
    if d.len() == 1 {
        d.push(format!("  the order: want {want:?}\n  got {got:?}"));
    }
    d
}

fn kind_of_mode(mode: u64) -> &'static str {
    match mode as u32 & libc::S_IFMT {
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "lnk",
        libc::S_IFCHR => "chr",
        libc::S_IFBLK => "blk",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "sock",
        libc::S_IFREG => "reg",
        _ => "?",
    }
}

fn check_ls_json(db: &Path, snap: &Snapshot, rel: &[u8], count: &mut usize) -> Vec<String> {
    let what = spec(&snap.name, rel);
    let out = catalog(db, &[OsStr::new("--ls"), &what, OsStr::new("--json")]);
    if !out.status.success() {
        return vec![format!(
            "--ls {what:?} --json failed ({}): {}",
            out.status,
            text(&out.stderr)
        )];
    }
    let mut c = children(snap, rel);
    c.sort_by(|a, b| a.0.cmp(b.0));
    let got = lines(&out.stdout);
    *count += got.len();
    let mut d = Vec::new();
    if got.len() != c.len() {
        d.push(format!(
            "--ls {what:?} --json: {} lines for {} entries",
            got.len(),
            c.len()
        ));
    }
    for (line, (name, item)) in got.iter().zip(&c) {
        let v: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                d.push(format!("--ls {what:?} --json: not JSON ({e}): {line}"));
                continue;
            }
        };
        let mut f = Vec::new();
        if v["name"].as_str() != Some(escape(name).as_str()) {
            f.push("name");
        }
        if v["type"].as_str() != Some(item.kind.as_str()) {
            f.push("type");
        }
        let mode = v["mode"].as_u64().unwrap_or(u64::MAX);
        if mode & 0o7777 != item.mode as u64 || kind_of_mode(mode) != item.kind {
            f.push("mode");
        }
        if v["uid"].as_u64() != Some(item.uid as u64) {
            f.push("uid");
        }
        if v["gid"].as_u64() != Some(item.gid as u64) {
            f.push("gid");
        }
        if v["size"].as_u64() != Some(item.size) {
            f.push("size");
        }
        if v["nlink"].as_u64() != Some(item.nlink) {
            f.push("nlink");
        }
        if v["mtime"]["sec"].as_i64() != Some(item.mtime.0)
            || v["mtime"]["nsec"].as_i64() != Some(item.mtime.1)
        {
            f.push("mtime");
        }
        if let Some(t) = &item.target {
            if v["target"].as_str() != Some(escape(t).as_str()) {
                f.push("target");
            }
        }
        if let Some((ma, mi)) = item.rdev {
            let r = v["rdev"].as_u64().unwrap_or(u64::MAX);
            if (libc::major(r) as u64, libc::minor(r) as u64) != (ma, mi) {
                f.push("rdev");
            }
        }
        if !f.is_empty() {
            d.push(format!(
                "--ls {what:?} --json: {} differ for '{}': {line}",
                f.join(", "),
                name.escape_ascii()
            ));
        }
    }
    d
}

/// Whether `name` matches `glob` (`*` any bytes but '/', `**` any bytes,
/// `?` one byte but '/').
fn glob_match(glob: &[u8], name: &[u8]) -> bool {
    match glob {
        [] => name.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=name.len()).any(|i| glob_match(rest, &name[i..])),
        [b'*', rest @ ..] => {
            let stop = name.iter().position(|&b| b == b'/').unwrap_or(name.len());
            (0..=stop).any(|i| glob_match(rest, &name[i..]))
        }
        [b'?', rest @ ..] => !name.is_empty() && name[0] != b'/' && glob_match(rest, &name[1..]),
        [c, rest @ ..] => name.first() == Some(c) && glob_match(rest, &name[1..]),
    }
}

/// Globs for --find; none matches the root, and `**` is never used where
/// matching no directory at all would find more.
const GLOBS: &[&str] = &[
    "*.txt",
    "h1*",
    "data/*",
    "**/new-*",
    "src/**/f0*",
    "*link*",
    "sym-*",
    "*hidden*",
    "odd/*",
    "new-0?-1",
];

fn check_find(db: &Path, snaps: &[Snapshot], glob: &str, count: &mut usize) -> Vec<String> {
    let out = catalog(db, &[OsStr::new("--find"), OsStr::new(glob)]);
    if !out.status.success() {
        return vec![format!(
            "--find {glob:?} failed ({}): {}",
            out.status,
            text(&out.stderr)
        )];
    }
    let mut got = lines(&out.stdout);
    *count += got.len();
    let mut want = Vec::new();
    for s in snaps {
        for (p, item) in &s.items {
            if p.is_empty() {
                continue;
            }
            let subject = if glob.contains('/') {
                p.as_slice()
            } else {
                parent_and_name(p).1
            };
            if glob_match(glob.as_bytes(), subject) {
                want.push(ls_line(item, &spec(&s.name, p).into_vec()));
            }
        }
    }
    assert!(
        !want.is_empty(),
        "--find {glob:?}: the glob matches nothing"
    );
    got.sort();
    want.sort();
    if got == want {
        return Vec::new();
    }
    let mut d = vec![format!(
        "--find {glob:?} differs from the snapshots ({} lines, {} wanted):",
        got.len(),
        want.len()
    )];
    for w in want.iter().filter(|w| !got.contains(w)).take(20) {
        d.push(format!("  want {w}"));
    }
    for g in got.iter().filter(|g| !want.contains(g)).take(20) {
        d.push(format!("  got  {g}"));
    }
    d
}

/// --ls of every root, of random directories and entries, --ls --json of
/// random directories, and --find of each of GLOBS; the differences and
/// how many lines of --ls and of --find were compared.
fn check_listings(db: &Path, snaps: &[Snapshot]) -> (Vec<String>, usize, usize) {
    let mut d = Vec::new();
    let (mut ls, mut find) = (0, 0);
    for s in snaps {
        d.extend(check_ls(db, s, b"", &mut ls));
    }
    let mut rng = Rng(SEED ^ 0x15);
    for k in 0..40 {
        let s = &snaps[rng.below(NIGHTS as u64) as usize];
        let want_dir = k % 2 == 0;
        let cands: Vec<&Vec<u8>> = s
            .items
            .iter()
            .filter(|(p, i)| !p.is_empty() && (i.kind == "dir") == want_dir)
            .map(|(p, _)| p)
            .collect();
        let p = cands[rng.below(cands.len() as u64) as usize];
        d.extend(check_ls(db, s, p, &mut ls));
        if want_dir && k % 4 == 0 {
            d.extend(check_ls_json(db, s, p, &mut ls));
        }
    }
    d.extend(check_ls_json(db, &snaps[NIGHTS - 1], b"misc", &mut ls));
    for g in GLOBS {
        d.extend(check_find(db, snaps, g, &mut find));
    }
    (d, ls, find)
}

/// Catalogs `chain` night by night into `db` (in `work`) and checks
/// restores of the pairs (into `restores`) and the listings against `snaps`.
fn check_chain(
    work: &Path,
    restores: &Path,
    chain: &[Night],
    snaps: &[Snapshot],
    what: &str,
    big_xattrs: bool,
) {
    let owners = is_root();
    let how = Compare { owners, big_xattrs };
    let db = work.join("catalog.db");
    let t = Instant::now();
    for n in chain {
        add_ok(&db, &n.file);
    }
    let catalog_time = t.elapsed();
    let t = Instant::now();
    let mut figures = Figures::default();
    let mut d = Vec::new();
    let list = pairs(snaps, pair_count(), owners);
    for (i, rel) in &list {
        d.extend(restore_and_compare(
            &db,
            &snaps[*i],
            rel,
            restores,
            &how,
            &mut figures,
        ));
    }
    let restore_time = t.elapsed();
    let t = Instant::now();
    let (listed, ls_lines, find_lines) = check_listings(&db, snaps);
    d.extend(listed);
    let chain_bytes: u64 = chain
        .iter()
        .map(|n| fs::metadata(&n.file).unwrap().len())
        .sum();
    println!(
        "{what}: cataloged {} nights ({chain_bytes} bytes of stream files, catalog {} bytes) in {:.1?}; \
         {} restores ({} entries) in {:.1?}, reading {} bytes of stream files ({} summed over the chains); \
         {ls_lines} lines of --ls and {find_lines} of --find in {:.1?}{}",
        chain.len(),
        fs::metadata(&db).map_or(0, |m| m.len()),
        catalog_time,
        figures.restores,
        figures.entries,
        restore_time,
        figures.read,
        figures.chain,
        t.elapsed(),
        if owners { "" } else { " (owners not checked: not root)" }
    );
    if !big_xattrs {
        println!("{what}: restored where no 4 KiB xattr fits: xattrs over {BIG_XATTR} bytes not compared");
    }
    assert!(
        d.is_empty(),
        "{what}: {} differences:\n{}",
        d.len(),
        d.join("\n")
    );
}

#[test]
fn restores_from_the_committed_chain_equal_the_manifests() {
    let work = tempfile::tempdir().unwrap();
    let chain = committed_chain(&work.path().join("streams"));
    let snaps = committed_snapshots();
    let (restores, big_xattrs) = restore_dir(work.path());
    check_chain(
        work.path(),
        restores.path(),
        &chain,
        &snaps,
        "committed chain",
        big_xattrs,
    );
}

#[test]
fn restores_from_a_live_chain_equal_the_mounted_snapshots() {
    const TEST: &str = "restores_from_a_live_chain_equal_the_mounted_snapshots";
    if !kernel_available(TEST) {
        return;
    }
    let img = BtrfsImage::new(1024, &[], "noatime");
    let out = img.scratch().join("chain");
    let t = Instant::now();
    run(Command::new("bash")
        .arg(testdata().join("make-catalog-chain.sh"))
        .arg("--on")
        .arg(img.mnt())
        .arg(&out)
        .env("RSEND", testkit::rsend_bin()));
    println!("generated the live chain in {:.1?}", t.elapsed());
    let chain: Vec<Night> = (1..=NIGHTS)
        .map(|n| {
            let name = night_name(n);
            let plain = out.join("streams").join(format!("{name}.stream"));
            let file = if n == ZSTD_NIGHT {
                plain.with_extension("stream.zst")
            } else {
                plain
            };
            assert!(file.exists(), "{} missing", file.display());
            Night { name, file }
        })
        .collect();
    let snaps: Vec<Snapshot> = chain
        .iter()
        .map(|n| walk_snapshot(&n.name, &img.mnt().join(&n.name)))
        .collect();
    // Restored onto the btrfs itself, which holds 4 KiB xattrs and holes.
    let restores = img.mnt().join("restores");
    fs::create_dir(&restores).unwrap();
    check_chain(img.scratch(), &restores, &chain, &snaps, "live chain", true);
}

// ---------------------------------------------------------------------------
// Damaged chains

/// One command of a stream file: its byte offset, type, and attributes
/// (type, byte range of the value in the file).
struct Cmd {
    offset: usize,
    kind: u16,
    attrs: Vec<(u16, std::ops::Range<usize>)>,
}

const CMD_SNAPSHOT: u16 = 2;
const CMD_RENAME: u16 = 9;
const CMD_WRITE: u16 = 15;
const A_UUID: u16 = 1;
const A_PATH: u16 = 15;
const A_PATH_TO: u16 = 16;
const A_FILE_OFFSET: u16 = 18;
const A_DATA: u16 = 19;
const A_CLONE_UUID: u16 = 20;

/// The commands of the first stream of a stream file (btrfs-progs
/// send.h: a 17-byte header, then commands of a 10-byte header and TLVs;
/// from v2 on DATA runs to the end of its command).
fn commands(data: &[u8]) -> Vec<Cmd> {
    assert_eq!(&data[..13], b"btrfs-stream\0");
    let u16_at = |p: usize| u16::from_le_bytes([data[p], data[p + 1]]);
    let u32_at = |p: usize| u32::from_le_bytes(data[p..p + 4].try_into().unwrap());
    let version = u32_at(13);
    let mut pos = 17;
    let mut out = Vec::new();
    while pos + 10 <= data.len() {
        let len = u32_at(pos) as usize;
        let kind = u16_at(pos + 4);
        let end = pos + 10 + len;
        let mut a = pos + 10;
        let mut attrs = Vec::new();
        while a < end {
            let t = u16_at(a);
            if t == A_DATA && version >= 2 {
                attrs.push((t, a + 2..end));
                a = end;
            } else {
                let l = u16_at(a + 2) as usize;
                attrs.push((t, a + 4..a + 4 + l));
                a += 4 + l;
            }
        }
        out.push(Cmd {
            offset: pos,
            kind,
            attrs,
        });
        pos = end;
        if kind == 21 {
            break;
        }
    }
    out
}

fn attr<'a>(data: &'a [u8], c: &Cmd, t: u16) -> Option<&'a [u8]> {
    c.attrs
        .iter()
        .find(|(k, _)| *k == t)
        .map(|(_, r)| &data[r.clone()])
}

/// A WRITE whose data the snapshot's file holds at the end of the stream:
/// the last WRITE of at least 64 bytes, not all zeros, of a path no later
/// command writes, clones into, truncates or unlinks, that is a regular
/// file of the snapshot (after the renames that follow) at least as long
/// as the WRITE's end. Returns (command index, the path in the snapshot,
/// the byte range of the data in the stream file).
fn kept_write(
    data: &[u8],
    cmds: &[Cmd],
    snap: &Snapshot,
) -> (usize, Vec<u8>, std::ops::Range<usize>) {
    for i in (0..cmds.len()).rev() {
        let c = &cmds[i];
        if c.kind != CMD_WRITE {
            continue;
        }
        let range = c
            .attrs
            .iter()
            .find(|(k, _)| *k == A_DATA)
            .unwrap()
            .1
            .clone();
        if range.len() < 64 || data[range.clone()].iter().all(|&b| b == 0) {
            continue;
        }
        let off = u64::from_le_bytes(attr(data, c, A_FILE_OFFSET).unwrap().try_into().unwrap());
        let mut cur = attr(data, c, A_PATH).unwrap().to_vec();
        let mut kept = true;
        for later in &cmds[i + 1..] {
            let p = attr(data, later, A_PATH).unwrap_or_default();
            if later.kind == CMD_RENAME {
                let to = attr(data, later, A_PATH_TO).unwrap();
                if p == cur.as_slice() {
                    cur = to.to_vec();
                } else if let Some(rest) = cur.strip_prefix(p).filter(|r| r.first() == Some(&b'/'))
                {
                    cur = [to, rest].concat();
                }
            } else if p == cur.as_slice() && matches!(later.kind, 11 | 15 | 16 | 17 | 23 | 25) {
                kept = false;
                break;
            }
        }
        let fits = snap
            .items
            .get(&cur)
            .is_some_and(|it| it.kind == "reg" && it.size >= off + range.len() as u64);
        if kept && fits {
            return (i, cur, range);
        }
    }
    panic!("{}: no WRITE whose data the snapshot keeps", snap.name);
}

fn uuid_string(b: &[u8]) -> String {
    uuid::Uuid::from_slice(b).unwrap().hyphenated().to_string()
}

/// The catalog's view of everything: --find of every name (for comparing
/// before and after).
fn everything(db: &Path) -> Vec<u8> {
    catalog_ok(db, &[OsStr::new("--find"), OsStr::new("*")]).stdout
}

/// The committed chain in a scratch directory, with a catalog of its first
/// three nights.
fn first_three_nights() -> (tempfile::TempDir, Vec<Night>, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let chain = committed_chain(&work.path().join("streams"));
    let db = work.path().join("catalog.db");
    for n in &chain[..3] {
        add_ok(&db, &n.file);
    }
    (work, chain, db)
}

#[test]
fn a_chain_missing_a_night_is_refused_naming_the_parent() {
    let (work, chain, db) = first_three_nights();
    // Adding a night again (from a copy of its stream file) changes
    // nothing and says so; the same file again changes nothing either.
    let before = everything(&db);
    let copy = work.path().join("n01-again.stream");
    fs::copy(&chain[0].file, &copy).unwrap();
    let again = add_ok(&db, &copy);
    assert!(
        text(&again.stderr).contains("n01"),
        "adding n01 twice: no note naming it on stderr: {}",
        text(&again.stderr)
    );
    assert_eq!(
        everything(&db),
        before,
        "adding n01 twice changed the catalog"
    );
    let same = add(&db, &chain[0].file);
    assert!(
        text(&same.stderr).contains("n01"),
        "adding n01's file twice: nothing said naming it: {}",
        text(&same.stderr)
    );
    assert_eq!(
        everything(&db),
        before,
        "adding n01's file twice changed the catalog"
    );
    // n05 without n04: its parent is n04, which the catalog does not have.
    let n04 = fs::read(&chain[3].file).unwrap();
    let n05 = fs::read(&chain[4].file).unwrap();
    let (c04, c05) = (commands(&n04), commands(&n05));
    let snap04 = c04.iter().find(|c| c.kind == CMD_SNAPSHOT).unwrap();
    let snap05 = c05.iter().find(|c| c.kind == CMD_SNAPSHOT).unwrap();
    let parent = attr(&n05, snap05, A_CLONE_UUID).unwrap();
    assert_eq!(
        parent,
        attr(&n04, snap04, A_UUID).unwrap(),
        "n05's parent is n04"
    );
    let out = add(&db, &chain[4].file);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "adding n05 without n04: {err}");
    let uuid = uuid_string(parent);
    assert!(
        err.contains(&uuid),
        "adding n05 without n04: the message does not name the parent {uuid}: {err}"
    );
    assert_eq!(
        everything(&db),
        before,
        "the refused n05 changed the catalog"
    );
    // With n04 it goes in.
    add_ok(&db, &chain[3].file);
    add_ok(&db, &chain[4].file);
    catalog_ok(&db, &[OsStr::new("--ls"), OsStr::new("n05")]);
}

#[test]
fn a_truncated_stream_is_refused_and_leaves_the_catalog_unchanged() {
    let (work, chain, db) = first_three_nights();
    let before = everything(&db);
    let n04 = fs::read(&chain[3].file).unwrap();
    let cut = work.path().join("n04-cut.stream");
    fs::write(&cut, &n04[..n04.len() * 2 / 3]).unwrap();
    let out = add(&db, &cut);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "adding a truncated n04: {err}");
    assert_eq!(
        everything(&db),
        before,
        "the truncated n04 changed the catalog"
    );
    let ls = catalog(&db, &[OsStr::new("--ls"), OsStr::new("n04")]);
    assert_eq!(
        ls.status.code(),
        Some(1),
        "--ls n04 after the truncated n04 was refused: {}",
        text(&ls.stdout)
    );
    // The whole n04 is then added as new, not as a night already there.
    let out = add_ok(&db, &chain[3].file);
    assert_ne!(
        everything(&db),
        before,
        "n04 added: nothing new in the catalog"
    );
    catalog_ok(&db, &[OsStr::new("--ls"), OsStr::new("n04")]);
    let _ = out;
}

#[test]
fn a_stream_cut_after_cataloging_fails_restore_and_check_naming_the_night() {
    let work = tempfile::tempdir().unwrap();
    let chain = committed_chain(&work.path().join("streams"));
    let snaps = committed_snapshots();
    let db = work.path().join("catalog.db");
    for n in &chain {
        add_ok(&db, &n.file);
    }
    catalog_ok(&db, &[OsStr::new("--check")]);
    // n06 (rsend, v1) cut in the middle of the data of a WRITE n06 keeps.
    let night = 5;
    let data = fs::read(&chain[night].file).unwrap();
    let (_, path, range) = kept_write(&data, &commands(&data), &snaps[night]);
    let at = range.start + range.len() / 2;
    fs::write(&chain[night].file, &data[..at]).unwrap();
    let name = &snaps[night].name;

    refused_restore(&db, work.path(), name, &path, "from the cut night", true);

    let out = catalog(&db, &[OsStr::new("--check")]);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "--check with {name} cut at byte {at}: {err}"
    );
    assert!(
        err.contains(name.as_str()),
        "--check: the message does not name {name}: {err}"
    );
    println!(
        "cut {name} at byte {at} (in the WRITE of '{}'): {err}",
        path.escape_ascii()
    );
}

#[test]
fn a_flipped_byte_fails_check_and_restore_leaving_no_file() {
    let work = tempfile::tempdir().unwrap();
    let chain = committed_chain(&work.path().join("streams"));
    let snaps = committed_snapshots();
    let db = work.path().join("catalog.db");
    for n in &chain {
        add_ok(&db, &n.file);
    }
    // A byte in the data of a WRITE of n04 (kernel, v1) that n04 keeps.
    let night = 3;
    let data = fs::read(&chain[night].file).unwrap();
    let cmds = commands(&data);
    let (index, path, range) = kept_write(&data, &cmds, &snaps[night]);
    let at = range.start + range.len() / 2;
    testkit::xor_byte(&chain[night].file, at as u64, 0x20);
    let name = &snaps[night].name;

    let out = catalog(&db, &[OsStr::new("--check")]);
    let check_err = text(&out.stderr);
    let err = check_err.lines().last().unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(1),
        "--check with a byte of {name} flipped: {check_err}"
    );
    assert!(
        err.contains(name.as_str()),
        "--check: the message does not name {name}: {err}"
    );
    // The command: by its byte offset, its number (from 0 or from 1), or
    // the offset of the byte.
    let places = [cmds[index].offset, index, index + 1, at];
    let numbers: BTreeSet<usize> = err
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    assert!(
        places.iter().any(|p| numbers.contains(p)),
        "--check: the message names neither the command (#{index} at byte {}) nor the byte {at}: {err}",
        cmds[index].offset
    );

    let how = "with a byte of its data flipped";
    let err = refused_restore(&db, work.path(), name, &path, how, false);
    println!(
        "flipped byte {at} of {name} (WRITE #{index} at byte {} of '{}'): --check: {check_err}--restore: {err}",
        cmds[index].offset,
        path.escape_ascii()
    );
}

#[test]
fn the_glob_matcher_of_this_test_follows_find() {
    assert!(glob_match(b"*.txt", b"doc-01.txt"));
    assert!(glob_match(b"*hidden*", b".hidden2"));
    assert!(!glob_match(b"data/*", b"data/b2/x"));
    assert!(glob_match(b"**/new-*", b"data/b2/new-03-1"));
    assert!(!glob_match(b"**/new-*", b"data/b2/new-03/x"));
    assert!(glob_match(b"new-0?-1", b"new-05-1"));
    assert!(!glob_match(b"new-0?-1", b"new-05-2"));
    assert_eq!(escape(b"a b\xff\n\\"), "a\\ b\\377\\n\\\\");
    assert_eq!(mode_string("dir", 0o1777), "drwxrwxrwt");
    assert_eq!(mode_string("reg", 0o4644), "-rwSr--r--");
    assert_eq!(mode_string("reg", 0o2750), "-rwxr-s---");
}

#[test]
fn restore_into_a_new_name_refused_over_an_existing_one_and_nights_named_by_uuid() {
    let (work, chain, db) = first_three_nights();
    let snaps = committed_snapshots();
    let how = Compare {
        owners: is_root(),
        big_xattrs: true,
    };
    // DEST that does not exist is the restored file itself.
    let (restores, big) = restore_dir(work.path());
    let how = Compare {
        big_xattrs: big,
        ..how
    };
    let dest = restores.path().join("h1 as of n03");
    catalog_ok(
        &db,
        &[
            OsStr::new("--restore"),
            OsStr::new("n03/data/h1"),
            dest.as_os_str(),
        ],
    );
    let d = restore_differences(&snaps[2], b"data/h1", &dest, &how);
    assert!(
        d.is_empty(),
        "--restore n03/data/h1 to a new name:\n{}",
        d.join("\n")
    );
    // An existing target is refused and left as it was.
    fs::write(restores.path().join("h1"), b"mine").unwrap();
    let out = catalog(
        &db,
        &[
            OsStr::new("--restore"),
            OsStr::new("n03/data/h1"),
            restores.path().as_os_str(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "--restore over an existing h1: {}",
        text(&out.stderr)
    );
    assert_eq!(fs::read(restores.path().join("h1")).unwrap(), b"mine");
    let out = catalog(
        &db,
        &[
            OsStr::new("--restore"),
            OsStr::new("n03/data/h1"),
            dest.as_os_str(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "--restore onto the file it restored before: {}",
        text(&out.stderr)
    );
    // A night by its uuid (from its stream's SNAPSHOT command).
    let n03 = fs::read(&chain[2].file).unwrap();
    let cmds = commands(&n03);
    let snap = cmds.iter().find(|c| c.kind == CMD_SNAPSHOT).unwrap();
    let uuid = uuid_string(attr(&n03, snap, A_UUID).unwrap());
    for rel in ["", "/data"] {
        let by_name = catalog_ok(&db, &[OsStr::new("--ls"), OsStr::new(&format!("n03{rel}"))]);
        let by_uuid = catalog_ok(
            &db,
            &[OsStr::new("--ls"), OsStr::new(&format!("{uuid}{rel}"))],
        );
        assert_eq!(
            by_uuid.stdout, by_name.stdout,
            "--ls {uuid}{rel} differs from --ls n03{rel}"
        );
    }
    let mut count = 0;
    let d = check_ls(&db, &snaps[2], b"data", &mut count);
    assert!(d.is_empty(), "{}", d.join("\n"));
}
