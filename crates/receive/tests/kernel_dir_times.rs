//! Directory times from the real kernel's streams. The kernel's command
//! order changes directories after the last UTIMES it sends for them: in a
//! full stream of a tree whose files are older (lower inode numbers) than
//! their directories, the directories are made at orphan names in the root
//! and renamed into place long after the root's times went out (its cache
//! of 64 directory times evicted the root); in an incremental stream,
//! swapped names go through orphans in a root it sends no times for. Each
//! test first checks in the stream that this happens, then that every
//! directory rreceive makes (onto ext4 and onto btrfs, and with room for
//! only 16 directory times at once) has the source's atime and mtime to the
//! nanosecond. `btrfs receive` gets these wrong; the tests print how many.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use btrfs_stream::{Command as Cmd, Reader};
use common::*;
use testkit::{ext4_image, kernel_available, run, sh, BtrfsImage};

/// What a stream does to directories after their times.
#[derive(Debug, Default)]
struct Late {
    /// The number of the root's last UTIMES (0: none).
    root_utimes: u64,
    /// Commands after it (or in all, without one) that make, rename or
    /// remove an entry of the root.
    root_after: u64,
    /// Directories whose entries change after their last UTIMES.
    changed_after: usize,
    /// Directories whose entries change and that get no UTIMES.
    changed_without: usize,
}

fn parent(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&b| b == b'/') {
        Some(i) => &p[..i],
        None => b"",
    }
}

fn within(p: &[u8], dir: &[u8]) -> bool {
    p.starts_with(dir) && (p.len() == dir.len() || p[dir.len()] == b'/')
}

/// Follows every path of the stream (renames move what is beneath) and
/// notes, per directory, its last UTIMES and its last entry change.
fn late_changes(stream: &[u8]) -> Late {
    // Current path -> directory number; per number (last utimes, last change).
    let mut ids: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut last: Vec<(u64, u64)> = Vec::new();
    let mut late = Late::default();
    fn id(ids: &mut HashMap<Vec<u8>, usize>, last: &mut Vec<(u64, u64)>, p: &[u8]) -> usize {
        *ids.entry(p.to_vec()).or_insert_with(|| {
            last.push((0, 0));
            last.len() - 1
        })
    }
    let mut r = Reader::from_bytes(stream);
    let mut n = 0u64;
    while let Some(c) = r.next_command().unwrap() {
        n += 1;
        let changed: Vec<&[u8]> = c.entry_paths().map(parent).collect();
        if changed.iter().any(|d| d.is_empty()) {
            late.root_after += 1;
        }
        for d in changed {
            let i = id(&mut ids, &mut last, d);
            last[i].1 = n;
        }
        match c {
            Cmd::Utimes { path, .. } => {
                let i = id(&mut ids, &mut last, path);
                last[i].0 = n;
                if path.is_empty() {
                    late.root_utimes = n;
                    late.root_after = 0;
                }
            }
            Cmd::Rename { from, to } => {
                ids.retain(|k, _| !within(k, to));
                let moved: Vec<_> = ids.keys().filter(|k| within(k, from)).cloned().collect();
                for k in moved {
                    let v = ids.remove(&k).unwrap();
                    let mut p = to.to_vec();
                    p.extend_from_slice(&k[from.len()..]);
                    ids.insert(p, v);
                }
            }
            Cmd::Rmdir { path } | Cmd::Unlink { path } => ids.retain(|k, _| !within(k, path)),
            _ => {}
        }
    }
    for &i in ids.values() {
        let (utimes, change) = last[i];
        if change > 0 && utimes == 0 {
            late.changed_without += 1;
        } else if change > utimes {
            late.changed_after += 1;
        }
    }
    late
}

type Times = BTreeMap<Vec<u8>, ((i64, i64), (i64, i64))>;

/// The atime and mtime of every directory beneath `root` ("" = itself),
/// each taken before the directory is read.
fn dir_times(root: &Path) -> Times {
    fn visit(full: &Path, rel: &str, out: &mut Times) {
        let md = fs::symlink_metadata(full).unwrap();
        let t = ((md.atime(), md.atime_nsec()), (md.mtime(), md.mtime_nsec()));
        out.insert(rel.as_bytes().to_vec(), t);
        for e in fs::read_dir(full).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                let name = e.file_name().into_string().unwrap();
                let r = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                visit(&e.path(), &r, out);
            }
        }
    }
    let mut out = Times::new();
    visit(root, "", &mut out);
    out
}

/// Directories of `got` whose times differ from `want`'s.
fn wrong(want: &Times, got: &Times) -> Vec<String> {
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>()
    );
    want.iter()
        .filter(|(p, t)| got[*p] != **t)
        .map(|(p, t)| {
            format!(
                "'{}': (atime, mtime) {:?}, want {t:?}",
                p.escape_ascii(),
                got[p]
            )
        })
        .collect()
}

/// Gives every directory beneath `root` its own atime and mtime, with
/// nanoseconds (the root itself too, unless `skip_root`).
fn set_dir_times(root: &Path, base: u64, skip_root: bool) {
    let dirs: Vec<_> = dir_times(root)
        .into_keys()
        .filter(|p| !(skip_root && p.is_empty()))
        .collect();
    for (k, p) in dirs.iter().enumerate() {
        let k = k as u64;
        let at = |s: u64, ns: u64| {
            SystemTime::UNIX_EPOCH + Duration::new(s, (ns % 1_000_000_000) as u32)
        };
        let times = fs::FileTimes::new()
            .set_accessed(at(base + k * 3600, k * 7_919 + 11))
            .set_modified(at(base + 500_000_000 + k * 60, k * 104_729 + 3));
        let path = root.join(std::str::from_utf8(p).unwrap());
        fs::File::open(&path).unwrap().set_times(times).unwrap();
    }
}

fn subvolume(img: &BtrfsImage, name: &str) -> std::path::PathBuf {
    let p = img.mnt().join(name);
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(&p));
    p
}

fn snapshot(img: &BtrfsImage, vol: &Path, name: &str) {
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "snapshot", "-r"])
        .arg(vol)
        .arg(img.mnt().join(name)));
}

fn library_receive(dest: &Path, stream: &[u8], max_dir_times: usize) -> rreceive::Stats {
    let mut o = rreceive::Options::new(dest);
    o.verbosity = 0;
    o.max_dir_times = max_dir_times;
    rreceive::receive(stream, &o).unwrap_or_else(|f| panic!("receive failed: {f}"))
}

/// Receives `streams` with rreceive into `dest` and checks the directory
/// times of each snapshot against the source. The stats of each stream.
/// rreceive of `snaps` onto ext4, onto btrfs, and holding only 16
/// directories (onto btrfs when `small_on_btrfs`, else ext4), each exact
/// (see [`rreceive_exact`]); their stats in that order.
fn exact_everywhere(
    src: &Path,
    snaps: &[(&str, &[u8])],
    small_on_btrfs: bool,
) -> [Vec<rreceive::Stats>; 3] {
    let ext4 = ext4_image(512, &[], "noatime");
    let a = rreceive_exact("ext4", ext4.mnt(), src, snaps, rreceive::MAX_DIR_TIMES);
    let btrfs = BtrfsImage::new(512, &[], "noatime");
    let b = rreceive_exact("btrfs", btrfs.mnt(), src, snaps, rreceive::MAX_DIR_TIMES);
    let c = if small_on_btrfs {
        let small = BtrfsImage::new(512, &[], "noatime");
        rreceive_exact("btrfs, 16 held", small.mnt(), src, snaps, 16)
    } else {
        let small = ext4_image(512, &[], "noatime");
        rreceive_exact("ext4, 16 held", small.mnt(), src, snaps, 16)
    };
    [a, b, c]
}

fn rreceive_exact(
    what: &str,
    dest: &Path,
    src: &Path,
    snaps: &[(&str, &[u8])],
    max_dir_times: usize,
) -> Vec<rreceive::Stats> {
    let mut all = Vec::new();
    for (name, stream) in snaps {
        let stats = library_receive(dest, stream, max_dir_times);
        let bad = wrong(&dir_times(&src.join(name)), &dir_times(&dest.join(name)));
        assert!(
            bad.is_empty(),
            "{what} {name}: {} directories with wrong times:\n{}",
            bad.len(),
            bad.join("\n")
        );
        // And the rest of the tree too.
        assert_same_tree(
            &format!("{what} {name}"),
            &src.join(name),
            &dest.join(name),
            Leeway::default(),
        );
        println!(
            "{what} {name}: all directory times exact; restored {} from UTIMES, kept {} from before, {} applied early",
            stats.dir_times_restored, stats.dir_times_kept, stats.dir_times_early
        );
        all.push(stats);
    }
    all
}

/// `btrfs receive` of `snaps` onto a new btrfs: directories with times
/// other than the source's, per snapshot.
fn btrfs_receive_wrong(scratch: &Path, src: &Path, snaps: &[(&str, &[u8])]) -> Vec<usize> {
    let fs = BtrfsImage::new(512, &[], "noatime");
    let mut out = Vec::new();
    for (i, (name, stream)) in snaps.iter().enumerate() {
        let file = scratch.join(format!("progs-{i}.stream"));
        fs::write(&file, stream).unwrap();
        btrfs_receive(fs.mnt(), &file);
        let bad = wrong(
            &dir_times(&src.join(name)),
            &dir_times(&fs.mnt().join(name)),
        );
        println!(
            "btrfs receive {name}: {} of {} directories with wrong times{}",
            bad.len(),
            dir_times(&src.join(name)).len(),
            bad.first()
                .map(|b| format!(", e.g. {b}"))
                .unwrap_or_default()
        );
        out.push(bad.len());
    }
    out
}

/// Directories beneath `plain`, each made before its file as in most
/// trees: more than 4,096, as in the reported copy of /usr.
const PLAIN: usize = 4200;
/// Directories beneath `top`, each made after its files.
const DIRS: usize = 400;

/// The root's entries first (the kernel's cache of 64 directory times then
/// evicts the root's soon), then `plain`, then beneath `top` files made
/// before their directories (higher inode numbers) and moved in: the
/// kernel's full stream makes those directories at orphan names in the
/// root and renames them into place long after the root's UTIMES.
fn make_full_tree(vol: &Path) {
    let (top, plain, lower) = (vol.join("top"), vol.join("plain"), vol.join("lower"));
    for d in [&top, &plain, &lower] {
        fs::create_dir(d).unwrap();
    }
    for j in 0..PLAIN {
        let d = plain.join(format!("g{}/p{j}", j % 64));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("f"), format!("plain {j}\n")).unwrap();
    }
    for i in 0..2 * DIRS {
        fs::write(top.join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    for j in 0..DIRS {
        fs::create_dir(top.join(format!("d{j}"))).unwrap();
    }
    for i in 0..2 * DIRS {
        let d = format!("d{}", i % DIRS);
        fs::rename(
            top.join(format!("f{i}")),
            top.join(&d).join(format!("f{i}")),
        )
        .unwrap();
    }
    // Deeper directories, newer still, taking files from others.
    for j in 0..DIRS / 10 {
        fs::create_dir(top.join(format!("d{j}/sub"))).unwrap();
    }
    for i in 0..DIRS / 5 {
        let from = top.join(format!("d{}/f{i}", i % DIRS));
        fs::rename(from, top.join(format!("d{}/sub/f{i}", i % (DIRS / 10)))).unwrap();
    }
    fs::create_dir_all(lower.join("a")).unwrap();
    fs::create_dir_all(lower.join("b")).unwrap();
    for i in 0..20 {
        fs::write(lower.join(format!("g{i}")), format!("{i}\n")).unwrap();
    }
    fs::create_dir(lower.join("late")).unwrap();
    for i in 0..20 {
        fs::rename(
            lower.join(format!("g{i}")),
            lower.join(format!("late/g{i}")),
        )
        .unwrap();
    }
    set_dir_times(vol, 1_000_000_000, false);
}

#[test]
fn full_stream_with_orphans_after_the_root_utimes_gives_exact_directory_times() {
    if !kernel_available(
        "full_stream_with_orphans_after_the_root_utimes_gives_exact_directory_times",
    ) {
        return;
    }
    let src = BtrfsImage::new(512, &[], "");
    let vol = subvolume(&src, "vol");
    make_full_tree(&vol);
    snapshot(&src, &vol, "full");
    let stream = src.send(&[src.mnt().join("full").as_os_str()]);

    let late = late_changes(&stream);
    println!("kernel full stream: {late:?}");
    assert!(
        late.root_utimes > 0 && late.root_after as usize > DIRS / 2,
        "the root's times should come before orphans at the root: {late:?}"
    );
    assert!(late.changed_after >= 1, "{late:?}");

    let snaps: &[(&str, &[u8])] = &[("full", &stream)];
    let progs = btrfs_receive_wrong(src.scratch(), src.mnt(), snaps);

    let [ext4, _, small] = exact_everywhere(src.mnt(), snaps, false);
    assert!(ext4[0].dir_times_restored >= 1, "{:?}", ext4[0]);
    assert!(small[0].dir_times_early as usize > PLAIN, "{:?}", small[0]);
    println!("btrfs receive: {progs:?} directories wrong; rreceive: none");
}

#[test]
fn incremental_stream_with_orphans_and_moves_gives_exact_directory_times() {
    if !kernel_available("incremental_stream_with_orphans_and_moves_gives_exact_directory_times") {
        return;
    }
    // noatime: nothing but the changes below touches the root, so the
    // kernel sends no times for it.
    let src = BtrfsImage::new(512, &[], "noatime");
    let vol = subvolume(&src, "vol");
    make_full_tree(&vol);
    snapshot(&src, &vol, "parent");
    sh(
        &vol,
        "# names swapped: the kernel moves one of each pair to an orphan
         # name in the root (and sends no times for the unchanged root)
         for j in $(seq 0 9); do
           mv top/d$j top/tmp && mv top/d$((j + 100)) top/d$j && mv top/tmp top/d$((j + 100))
         done
         # new directories (higher inode numbers) taking older files
         for k in $(seq 0 29); do mkdir top/new$k; mv top/d$((k + 120))/f* top/new$k/; done
         # moves between existing directories, both ways
         for i in $(seq 250 279); do mv top/d$i/f$((i + 400)) top/d$(( (i + 37) % 400 ))/; done
         for j in $(seq 0 9); do mv plain/g$j/p$j/f plain/g$((j + 1))/p$((j + 1))/f$j; done
         mv lower/late/g3 lower/a/ && mv lower/b lower/a/b-moved
         # a directory removed with its entries, one moved under a new one
         rm -r top/d199 && mkdir lower/c && mv top/d198 lower/c/
         mv top/d20/sub lower/sub-from-d20",
    );
    set_dir_times(&vol, 1_200_000_000, true);
    snapshot(&src, &vol, "child");
    let parent = src.mnt().join("parent");
    let child = src.mnt().join("child");
    let full = src.send(&[parent.as_os_str()]);
    let incr = src.send(&[OsStr::new("-p"), parent.as_os_str(), child.as_os_str()]);

    let late = late_changes(&incr);
    println!("kernel incremental stream: {late:?}");
    assert!(
        late.root_utimes == 0 && late.root_after > 20 && late.changed_without >= 1,
        "the incremental should rename orphans in a root it sends no times for: {late:?}"
    );

    let snaps: &[(&str, &[u8])] = &[("parent", &full), ("child", &incr)];
    let progs = btrfs_receive_wrong(src.scratch(), src.mnt(), snaps);

    let [ext4, _, small] = exact_everywhere(src.mnt(), snaps, true);
    assert!(ext4[1].dir_times_kept >= 1, "{:?}", ext4[1]);
    assert!(small[1].dir_times_early > 0, "{:?}", small[1]);
    println!("btrfs receive: {progs:?} directories wrong; rreceive: none");
}
