//! Shared by rreceive's integration tests: running rreceive and
//! `btrfs receive`, and walking two trees to compare them.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};

/// `testdata/` of the repository.
pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// The rreceive binary.
pub fn rreceive_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rreceive")
}

/// Runs rreceive with `args`, the stream on standard input from `stream`.
pub fn rreceive(args: &[&std::ffi::OsStr], stream: &Path) -> Output {
    Command::new(rreceive_bin())
        .args(args)
        .stdin(fs::File::open(stream).unwrap())
        .output()
        .expect("run rreceive")
}

/// Runs rreceive and panics unless it succeeds.
pub fn rreceive_ok(dest: &Path, stream: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = extra.iter().map(std::ffi::OsStr::new).collect();
    args.push(dest.as_os_str());
    let out = rreceive(&args, stream);
    assert!(
        out.status.success(),
        "rreceive {extra:?} {} < {} failed ({}):\n{}",
        dest.display(),
        stream.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_panic(&out);
    out
}

/// Panics if the process panicked.
pub fn assert_no_panic(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() != Some(101) && !err.contains("panicked"),
        "rreceive panicked:\n{err}"
    );
}

/// `btrfs receive -f stream dest`, panicking on failure.
pub fn btrfs_receive(dest: &Path, stream: &Path) {
    let out = Command::new("btrfs")
        .args(["receive", "-q", "-f"])
        .arg(stream)
        .arg(dest)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "btrfs receive {} failed: {}",
        stream.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One inode as seen from one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub mtime: (i64, i64),
    pub atime: (i64, i64),
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub target: Option<Vec<u8>>,
    pub rdev: Option<u64>,
    pub ino: (u64, u64),
    pub nlink: u64,
}

/// Xattrs that belong to one filesystem or to rreceive's bookkeeping.
pub fn fs_specific_xattr(name: &[u8]) -> bool {
    name.starts_with(b"btrfs.")
        || name.starts_with(b"user.rreceive.")
        // xfs also lists POSIX ACLs under these names to root.
        || name.starts_with(b"trusted.SGI_ACL_")
        || name.starts_with(b"security.selinux")
}

fn kind(ft: fs::FileType) -> &'static str {
    if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "lnk"
    } else if ft.is_file() {
        "reg"
    } else if ft.is_char_device() {
        "chr"
    } else if ft.is_block_device() {
        "blk"
    } else if ft.is_fifo() {
        "fifo"
    } else {
        "sock"
    }
}

fn sha256_noatime(p: &Path) -> String {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME | libc::O_NOFOLLOW)
        .open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Every path beneath `root` ("" is the root itself) with its inode. Stats
/// come before any read, and files are read with O_NOATIME.
pub fn walk(root: &Path) -> BTreeMap<Vec<u8>, Entry> {
    let mut out = BTreeMap::new();
    visit(root, b"", &mut out);
    out
}

fn visit(full: &Path, rel: &[u8], out: &mut BTreeMap<Vec<u8>, Entry>) {
    let md = fs::symlink_metadata(full).unwrap_or_else(|e| panic!("lstat {}: {e}", full.display()));
    let k = kind(md.file_type());
    let mut xattrs = BTreeMap::new();
    if let Ok(names) = xattr::list(full) {
        for n in names {
            if let Ok(Some(v)) = xattr::get(full, &n) {
                xattrs.insert(n.as_bytes().to_vec(), v);
            }
        }
    }
    let e = Entry {
        kind: k,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: (k == "reg" || k == "lnk").then(|| md.size()),
        sha256: None,
        mtime: (md.mtime(), md.mtime_nsec()),
        atime: (md.atime(), md.atime_nsec()),
        xattrs,
        target: (k == "lnk").then(|| fs::read_link(full).unwrap().as_os_str().as_bytes().to_vec()),
        rdev: (k == "chr" || k == "blk").then(|| md.rdev()),
        ino: (md.dev(), md.ino()),
        nlink: md.nlink(),
    };
    out.insert(rel.to_vec(), e);
    if k == "reg" {
        let digest = sha256_noatime(full);
        if let Some(e) = out.get_mut(rel) {
            e.sha256 = Some(digest);
        }
    }
    if k == "dir" {
        let mut names: Vec<_> = fs::read_dir(full)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let mut r = rel.to_vec();
            if !r.is_empty() {
                r.push(b'/');
            }
            r.extend_from_slice(n.as_bytes());
            visit(&full.join(&n), &r, out);
        }
    }
}

/// What to leave out of a comparison.
#[derive(Debug, Clone, Copy, Default)]
pub struct Leeway {
    /// The root's mtime and atime (see testdata/kernel/README.md on c2).
    pub root_times: bool,
    /// Atimes everywhere (a filesystem that keeps none).
    pub atimes: bool,
    /// Times the stream never set (the reference has the time of the
    /// receive, within the last hour).
    pub unset_times: bool,
}

fn recent(t: (i64, i64)) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    t.0 > now - 3600
}

fn groups(t: &BTreeMap<Vec<u8>, Entry>) -> BTreeSet<Vec<Vec<u8>>> {
    let mut by: BTreeMap<(u64, u64), Vec<Vec<u8>>> = BTreeMap::new();
    for (p, e) in t {
        if e.kind != "dir" && e.nlink > 1 {
            by.entry(e.ino).or_default().push(p.clone());
        }
    }
    by.into_values().filter(|v| v.len() > 1).collect()
}

/// Differences between `want` (what btrfs receive made) and `got`.
pub fn differences(
    want: &BTreeMap<Vec<u8>, Entry>,
    got: &BTreeMap<Vec<u8>, Entry>,
    leeway: Leeway,
) -> Vec<String> {
    let mut d = Vec::new();
    let show = |p: &[u8]| format!("'{}'", p.escape_ascii());
    for (p, w) in want {
        let Some(g) = got.get(p) else {
            d.push(format!("{} missing", show(p)));
            continue;
        };
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
        cmp!(uid);
        cmp!(gid);
        cmp!(size);
        cmp!(sha256);
        cmp!(target);
        cmp!(rdev);
        let root = p.is_empty();
        let unset = leeway.unset_times && recent(w.mtime) && recent(g.mtime);
        let skip = unset || (root && leeway.root_times);
        if !skip {
            cmp!(mtime);
            if !leeway.atimes {
                cmp!(atime);
            }
        }
        let wx: BTreeMap<_, _> = w
            .xattrs
            .iter()
            .filter(|(n, _)| !fs_specific_xattr(n))
            .collect();
        let gx: BTreeMap<_, _> = g
            .xattrs
            .iter()
            .filter(|(n, _)| !fs_specific_xattr(n))
            .collect();
        if wx != gx {
            fields.push(format!("xattrs: {wx:?} != {gx:?}"));
        }
        if !fields.is_empty() {
            d.push(format!("{}: {}", show(p), fields.join("; ")));
        }
    }
    for p in got.keys() {
        if !want.contains_key(p) {
            d.push(format!("{} unexpected", show(p)));
        }
    }
    let (gw, gg) = (groups(want), groups(got));
    if gw != gg {
        d.push(format!("hardlink groups differ: {gw:?} != {gg:?}"));
    }
    d
}

/// Panics with the differences between the trees at `want` and `got`.
pub fn assert_same_tree(what: &str, want: &Path, got: &Path, leeway: Leeway) -> usize {
    let (w, g) = (walk(want), walk(got));
    let d = differences(&w, &g, leeway);
    assert!(
        d.is_empty(),
        "{what}: {} differs from {}:\n{}",
        got.display(),
        want.display(),
        d.join("\n")
    );
    w.len()
}

/// `btrfs subvolume show` of `path`: (received uuid, read-only).
pub fn subvol_show(path: &Path) -> (String, bool) {
    let out = testkit::run(Command::new("btrfs").args(["subvolume", "show"]).arg(path));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    (
        field("Received UUID:"),
        field("Flags:").contains("readonly"),
    )
}

/// The uuid in the first SUBVOL/SNAPSHOT of a stream file.
pub fn stream_uuids(stream: &Path) -> Vec<uuid::Uuid> {
    let data = fs::read(stream).unwrap();
    let mut r = btrfs_stream::Reader::from_bytes(&data[..]);
    let mut v = Vec::new();
    while let Some(c) = r.next_command().unwrap() {
        match c {
            btrfs_stream::Command::Subvol { uuid, .. }
            | btrfs_stream::Command::Snapshot { uuid, .. } => v.push(uuid),
            _ => {}
        }
    }
    v
}

/// The `user.rreceive.subvol` state of a received directory.
pub fn plain_state(dir: &Path) -> Option<String> {
    xattr::get(dir, "user.rreceive.subvol")
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).to_string())
}

/// The kernel's streams of the read-only snapshots `snaps` at the top of
/// `img`: the first in full, each next one with the one before as parent,
/// with `args` (e.g. `--proto 2`); written to `<scratch>/<tag>-<snap>.stream`.
pub fn kernel_streams(
    img: &testkit::BtrfsImage,
    snaps: &[&str],
    tag: &str,
    args: &[&str],
) -> Vec<PathBuf> {
    let m = img.mnt();
    let mut out = Vec::new();
    for (i, s) in snaps.iter().enumerate() {
        let file = img.scratch().join(format!("{tag}-{s}.stream"));
        let mut a: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        let parent = (i > 0).then(|| m.join(snaps[i - 1]));
        if let Some(p) = &parent {
            a.push(std::ffi::OsStr::new("-p"));
            a.push(p.as_os_str());
        }
        let snap = m.join(s);
        a.push(snap.as_os_str());
        fs::write(&file, img.send(&a)).unwrap();
        out.push(file);
    }
    out
}
