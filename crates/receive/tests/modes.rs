//! Incremental chains off btrfs in each way of making the snapshot: a copy
//! of the parent (the default), `--in-place` and `--link`. The kernel sends
//! a full stream and five incrementals with renames, moved and swapped
//! directories, deletions, inode numbers reused, hardlinks gained and lost,
//! xattr, owner, mode and time changes alone, and clones from the parent
//! whose source was renamed, deleted, truncated or overwritten earlier in
//! the same stream. rreceive onto ext4 and tmpfs must give, for each
//! snapshot, the tree `btrfs receive` gives onto btrfs; with `--link`, no
//! later change may show in an earlier snapshot.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use btrfs_stream::{Command as Cmd, Reader};
use common::*;
use testkit::{ext4_image, kernel_available, run, sh, xfs_image, BtrfsImage, Tmpfs};

const SNAPS: [&str; 6] = ["n0", "n1", "n2", "n3", "n4", "n5"];

fn snapshot(img: &BtrfsImage, name: &str) {
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "snapshot", "-r"])
        .arg(img.mnt().join("vol"))
        .arg(img.mnt().join(name)));
}

/// vol and its read-only snapshots n0..n5 on `img`.
fn make_snapshots(img: &mut BtrfsImage) {
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(img.mnt().join("vol")));
    let v = img.mnt().join("vol");
    sh(
        &v,
        "mkdir -p a/b/c d/e keep/k1 keep/k2 keep/k3
         head -c 300000 /dev/urandom > a/big
         head -c 100 /dev/urandom > a/b/small
         head -c 70000 /dev/urandom > d/e/mid
         head -c 5000 /dev/urandom > hl1
         ln hl1 a/hl2
         ln -s a/big sym
         mkfifo d/fifo
         for i in $(seq 1 200); do head -c $((i * 37 % 3000)) /dev/urandom > keep/k$((i % 2 + 1))/f$i; done
         for i in $(seq 1 50); do echo $i > keep/k3/u$i; done
         setfattr -n user.one -v 1 a/b/small
         chown 1000:1000 d/e/mid
         chmod 750 d/e
         truncate -s 1M sparse && printf x | dd of=sparse bs=1 seek=500000 conv=notrunc status=none
         cp --reflink=always a/big a/b/c/big-clone
         echo 1 > late1; echo 2 > late2; echo 3 > late3",
    );
    snapshot(img, "n0");
    // Clone from the parent after its source was overwritten; metadata,
    // xattr and time changes alone; a new hardlink.
    sh(
        &v,
        "mv a/b d/b-moved
         cp --reflink=always a/big d/from-parent
         dd if=/dev/urandom of=a/big bs=4096 seek=10 count=3 conv=notrunc status=none
         ln hl1 d/hl3
         printf appended >> hl1
         setfattr -n user.one -v changed d/b-moved/small
         chmod 600 keep/k1/f2
         touch -d '2001-01-01 01:01:01.25' keep/k2/f1
         setfattr -n user.x -v y keep/k1/f4
         chown 123:456 keep/k2/f3",
    );
    snapshot(img, "n1");
    // Deletions, a hardlink lost, inode numbers reused (the newest inodes
    // go, and after a mount their numbers are given out again), a clone
    // from the parent's name of a file renamed in the same stream.
    sh(
        &v,
        "rm late1 late2 late3
         rm -r d/e
         rm a/hl2",
    );
    img.unmount();
    img.mount("");
    sh(
        &v,
        "echo reused > reused-file
         mkdir reused-dir && echo inner > reused-dir/inner
         mv a/big a/big-renamed
         cp --reflink=always a/big-renamed a/big-copy",
    );
    snapshot(img, "n2");
    // Clones from the parent's files deleted or truncated in the same
    // stream; a directory moved; a file rewritten whole.
    sh(
        &v,
        "cp --reflink=always d/from-parent d/fp2 && rm d/from-parent
         cp --reflink=always hl1 hl1-copy && truncate -s 1000 hl1
         setfattr -x user.one d/b-moved/small
         mv d/b-moved/c d/c-moved
         echo new > keep/k1/f6",
    );
    snapshot(img, "n3");
    // Directories swapped, a hole punched, many new files, renames.
    sh(
        &v,
        "mv a tmp && mv d a && mv tmp d
         fallocate -p -o 65536 -l 65536 d/big-renamed
         mkdir dirfile
         for i in $(seq 1 30); do echo $i > a/new$i; done
         for i in $(seq 1 10); do mv a/new$i a/renamed$i; done",
    );
    snapshot(img, "n4");
    // Metadata-only changes on many files, a directory replaced by a file,
    // a new hardlink to an untouched file, a clone source overwritten.
    sh(
        &v,
        "rmdir dirfile && printf z > dirfile
         chown -R 2000:2000 keep/k2
         chmod -R g+w keep/k1
         touch -d '1999-09-09' keep/k1/f8
         ln keep/k1/f10 keep/k1/f10-link
         cp --reflink=always d/big-copy big-copy2
         dd if=/dev/urandom of=d/big-copy bs=4096 count=2 conv=notrunc status=none",
    );
    snapshot(img, "n5");
}

/// The kernel's full stream of n0 and incrementals n0→n1→…→n5.
fn streams(img: &BtrfsImage) -> Vec<PathBuf> {
    kernel_streams(img, &SNAPS, "v1", &[])
}

/// The source filesystem with n0..n5 and the kernel's streams of them, or
/// `None` (with a line saying why) where the test cannot run.
fn kernel_chain(test: &str) -> Option<(BtrfsImage, Vec<PathBuf>)> {
    if !kernel_available(test) {
        return None;
    }
    let mut src = BtrfsImage::new(512, &[], "");
    make_snapshots(&mut src);
    let chain = streams(&src);
    Some((src, chain))
}

/// CLONE commands in `stream` whose source is the stream's parent.
fn clones_from_parent(stream: &Path) -> usize {
    let data = fs::read(stream).unwrap();
    let mut r = Reader::new(&data[..]);
    let mut parent = None;
    let mut n = 0;
    while let Some((cmd, _)) = r.next_framed().unwrap() {
        match cmd {
            Cmd::Snapshot { clone_uuid, .. } => parent = Some(clone_uuid),
            Cmd::Clone { clone_uuid, .. } if Some(clone_uuid) == parent => n += 1,
            _ => {}
        }
    }
    n
}

fn leeway() -> Leeway {
    Leeway {
        root_times: true,
        ..Leeway::default()
    }
}

fn inode_of(root: &Path, p: &str) -> u64 {
    fs::symlink_metadata(root.join(p)).unwrap().ino()
}

/// What DEST holds besides the snapshots (a stash or probe left behind).
fn leftovers(dest: &Path) -> Vec<String> {
    fs::read_dir(dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !SNAPS.contains(&n.as_str()) && n != "lost+found")
        .collect()
}

/// Receives the chain into `dest` with `mode` and checks each snapshot
/// against `want` right after its receive.
fn receive_chain(what: &str, want: &Path, dest: &Path, chain: &[PathBuf], mode: &[&str]) -> usize {
    let mut n = 0;
    let mut untouched = None;
    for (s, stream) in SNAPS.iter().zip(chain) {
        let out = rreceive_ok(dest, stream, mode);
        let err = String::from_utf8_lossy(&out.stderr);
        if mode.is_empty() && *s != "n0" {
            assert!(
                err.contains("--in-place or --link avoid the copy"),
                "{what} {s}: the copy is announced: {err}"
            );
        }
        n += assert_same_tree(
            &format!("{what} {s}"),
            &want.join(s),
            &dest.join(s),
            leeway(),
        );
        assert!(
            plain_state(&dest.join(s)).unwrap().contains("complete=1"),
            "{what} {s} complete"
        );
        let ino = inode_of(&dest.join(s), "keep/k3/u7");
        match (untouched, mode) {
            (None, _) => untouched = Some(ino),
            // Untouched files keep their inode: the same tree, or a link.
            (Some(i), ["--in-place"] | ["--link"]) => {
                assert_eq!(i, ino, "{what} {s}: keep/k3/u7 is not a new inode")
            }
            (Some(i), _) => assert_ne!(i, ino, "{what} {s}: keep/k3/u7 was copied"),
        }
        assert!(
            leftovers(dest).is_empty(),
            "{what} {s}: {:?}",
            leftovers(dest)
        );
    }
    n
}

#[test]
fn five_incrementals_in_each_mode_onto_ext4_and_tmpfs() {
    let Some((_src, chain)) = kernel_chain("five_incrementals_in_each_mode_onto_ext4_and_tmpfs")
    else {
        return;
    };
    let from_parent: usize = chain.iter().map(|s| clones_from_parent(s)).sum();
    assert!(
        from_parent >= 3,
        "the kernel clones from the parent {from_parent} times"
    );
    let reference = BtrfsImage::new(512, &[], "noatime");
    for s in &chain {
        btrfs_receive(reference.mnt(), s);
    }
    let want = reference.mnt();
    let mut total = 0;
    for fs_name in ["ext4", "tmpfs"] {
        for mode in [&[][..], &["--in-place"][..], &["--link"][..]] {
            let what = format!("{fs_name} {}", mode.first().unwrap_or(&"copy"));
            let (_ext4, _tmpfs, dest);
            if fs_name == "ext4" {
                let img = ext4_image(512, &[], "noatime");
                dest = img.mnt().to_path_buf();
                _ext4 = Some(img);
                _tmpfs = None;
            } else {
                let t = Tmpfs::new(512, "noatime");
                dest = t.mnt().to_path_buf();
                _tmpfs = Some(t);
                _ext4 = None;
            }
            total += receive_chain(&what, want, &dest, &chain, mode);
            match mode {
                ["--in-place"] => {
                    for s in &SNAPS[..5] {
                        assert!(!dest.join(s).exists(), "{what}: {s} is gone");
                    }
                }
                _ => {
                    // Nothing a later stream changed shows in an earlier
                    // snapshot.
                    for s in SNAPS {
                        total += assert_same_tree(
                            &format!("{what} {s} at the end"),
                            &want.join(s),
                            &dest.join(s),
                            leeway(),
                        );
                    }
                }
            }
            if mode == ["--link"] {
                // A file changed in n1 and not after is its own inode in n1
                // and linked from then on.
                let n: BTreeMap<_, _> = SNAPS
                    .iter()
                    .map(|s| (*s, inode_of(&dest.join(s), "keep/k1/f2")))
                    .collect();
                assert_ne!(n["n0"], n["n1"], "{what}: keep/k1/f2 unshared in n1");
                assert_eq!(n["n1"], n["n4"], "{what}: keep/k1/f2 linked n1..n4");
                assert_ne!(n["n4"], n["n5"], "{what}: chmod -R unshares it in n5");
            }
        }
    }
    // The whole chain as one stream, in one receive.
    let all = reference.scratch().join("chain.stream");
    let mut cat = Vec::new();
    for s in &chain {
        cat.extend(fs::read(s).unwrap());
    }
    fs::write(&all, cat).unwrap();
    for mode in ["--in-place", "--link"] {
        let t = Tmpfs::new(512, "noatime");
        rreceive_ok(t.mnt(), &all, &[mode]);
        total += assert_same_tree(
            &format!("one stream {mode} n5"),
            &want.join("n5"),
            &t.mnt().join("n5"),
            leeway(),
        );
        assert!(leftovers(t.mnt()).is_empty());
    }
    println!("{total} paths identical");
}

/// The state line rreceive keeps for `dir`.
fn state(dir: &Path) -> String {
    plain_state(dir).unwrap_or_default()
}

/// The first `n` commands of `stream` (with its header), as a new file.
fn cut_after(stream: &Path, n: u64, out: &Path) -> PathBuf {
    let data = fs::read(stream).unwrap();
    let mut r = Reader::new(&data[..]);
    let mut end = 0;
    while let Some((_, pos)) = r.next_framed().unwrap() {
        if pos.index == n {
            end = (pos.offset + pos.len) as usize;
            break;
        }
    }
    assert!(end > 0);
    fs::write(out, &data[..end]).unwrap();
    out.to_path_buf()
}

#[test]
fn in_place_receive_that_fails_gives_back_or_names_what_to_do() {
    let Some((src, chain)) =
        kernel_chain("in_place_receive_that_fails_gives_back_or_names_what_to_do")
    else {
        return;
    };
    let reference = BtrfsImage::new(512, &[], "noatime");
    for s in &chain[..2] {
        btrfs_receive(reference.mnt(), s);
    }
    let ext4 = ext4_image(256, &[], "noatime");
    let dest = ext4.mnt();
    rreceive_ok(dest, &chain[0], &[]);
    // Cut right after SNAPSHOT: nothing changed, n0 comes back.
    let cut = cut_after(&chain[1], 1, &src.scratch().join("cut1.stream"));
    let out = rreceive(&[OsStr::new("--in-place"), dest.as_os_str()], &cut);
    let err = String::from_utf8_lossy(&out.stderr);
    // A cut stream can go on later (exit 3); nothing is left to resume.
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("parent n0 is back as it was"), "{err}");
    assert!(!dest.join("n1").exists());
    assert!(state(&dest.join("n0")).contains("complete=1"), "{err}");
    assert!(leftovers(dest).is_empty(), "{:?}", leftovers(dest));
    assert_same_tree(
        "n0 given back",
        &reference.mnt().join("n0"),
        &dest.join("n0"),
        leeway(),
    );
    // Cut halfway: n1 stays incomplete and resumable (exit 3), n0 is gone.
    let total = {
        let data = fs::read(&chain[1]).unwrap();
        let mut r = Reader::new(&data[..]);
        let mut n = 0;
        while r.next_framed().unwrap().is_some() {
            n += 1;
        }
        n
    };
    let half = cut_after(&chain[1], total / 2, &src.scratch().join("cut2.stream"));
    let out = rreceive(&[OsStr::new("--in-place"), dest.as_os_str()], &half);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("stopped after command"), "{err}");
    assert!(!err.contains("which is gone"), "{err}");
    assert!(!dest.join("n0").exists());
    assert!(state(&dest.join("n1")).contains("complete=0"));
    // Beside n1: its durable record (in two slots; invalidated at a clean
    // stop), where it stopped, and its work directory (what clones from n0
    // need, and the log a resumed receive rebuilds them from).
    let mut left = leftovers(dest);
    left.sort();
    assert_eq!(
        left,
        [
            ".rreceive-durable-6e31",
            ".rreceive-durable-6e31.1",
            ".rreceive-resume-6e31",
            ".rreceive-work-6e31"
        ]
    );
    let work = dest.join(".rreceive-work-6e31");
    assert!(fs::read_to_string(work.join("mode"))
        .unwrap()
        .starts_with("in-place\n"));
    assert!(work.join("overlay").exists());
    // And it is refused as a parent.
    let out = rreceive(&[OsStr::new("--in-place"), dest.as_os_str()], &chain[2]);
    assert_eq!(out.status.code(), Some(1));
}

/// Bytes used on the filesystem holding `p`.
fn used(p: &Path) -> u64 {
    let v = nix::sys::statvfs::statvfs(p).unwrap();
    (v.blocks() - v.blocks_free()) * v.fragment_size()
}

#[test]
fn a_copy_that_cannot_fit_fails_at_once_and_link_needs_no_room() {
    if !kernel_available("a_copy_that_cannot_fit_fails_at_once_and_link_needs_no_room") {
        return;
    }
    let src = BtrfsImage::new(512, &[], "");
    sh(
        src.mnt(),
        "mkdir t && for i in $(seq 1 6); do head -c 20M /dev/urandom > t/big$i; done
         mkdir t/many && for i in $(seq 1 300); do echo $i > t/many/$i; done",
    );
    src.snapshot("p0");
    sh(
        src.mnt(),
        "echo changed > t/many/7 && mv t/big1 t/big1-renamed",
    );
    src.snapshot("p1");
    let m = src.mnt();
    let full = src.scratch().join("p0.stream");
    fs::write(&full, src.send(&[m.join("p0").as_os_str()])).unwrap();
    let inc = src.scratch().join("p1.stream");
    fs::write(
        &inc,
        src.send(&[
            OsStr::new("-p"),
            m.join("p0").as_os_str(),
            m.join("p1").as_os_str(),
        ]),
    )
    .unwrap();
    let reference = BtrfsImage::new(512, &[], "noatime");
    btrfs_receive(reference.mnt(), &full);
    btrfs_receive(reference.mnt(), &inc);
    // 200 MiB holds one copy of the 120 MiB, not two.
    let ext4 = ext4_image(200, &[], "noatime");
    let dest = ext4.mnt();
    rreceive_ok(dest, &full, &[]);
    let before = used(dest);
    let out = rreceive(&[dest.as_os_str()], &inc);
    let err = String::from_utf8_lossy(&out.stderr);
    // Too little room can be mended: exit 3, and nothing is left.
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("a copy of parent p0 needs")
            && err.contains("too little space")
            && err.contains("nothing was copied"),
        "{err}"
    );
    assert!(!dest.join("p1").exists(), "{err}");
    assert!(
        used(dest) <= before + (1 << 20),
        "{} > {before}",
        used(dest)
    );
    // Too few inodes: 300 files, and an ext4 with about 400 inodes.
    let small = ext4_image(400, &["-N", "400"], "noatime");
    let dest2 = small.mnt();
    rreceive_ok(dest2, &full, &[]);
    let out = rreceive(&[dest2.as_os_str()], &inc);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("too few inodes") && !err.contains("too little space"),
        "{err}"
    );
    // --link needs an inode per directory only, and no data.
    for d in [dest, dest2] {
        rreceive_ok(d, &inc, &["--link"]);
        assert_same_tree(
            "p1 linked",
            &reference.mnt().join("p1"),
            &d.join("p1"),
            leeway(),
        );
        assert_same_tree(
            "p0 kept",
            &reference.mnt().join("p0"),
            &d.join("p0"),
            leeway(),
        );
    }
}

#[test]
fn on_btrfs_both_modes_still_take_snapshots() {
    let Some((_src, chain)) = kernel_chain("on_btrfs_both_modes_still_take_snapshots") else {
        return;
    };
    for mode in ["--in-place", "--link"] {
        let btrfs = BtrfsImage::new(512, &[], "noatime");
        let dest = btrfs.mnt();
        rreceive_ok(dest, &chain[0], &[]);
        let out = rreceive_ok(dest, &chain[1], &[mode, "-v"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("DEST is on btrfs: n1 is a snapshot of n0"),
            "{mode}: {err}"
        );
        for s in ["n0", "n1"] {
            let (uuid, ro) = subvol_show(&dest.join(s));
            assert!(ro && uuid != "-", "{mode} {s}: {uuid} ro {ro}");
        }
    }
}

/// Regular files and directories beneath `root` (relative paths; "" is
/// the root), in byte order.
fn tree(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut files, mut dirs) = (Vec::new(), vec![PathBuf::new()]);
    let mut todo = vec![PathBuf::new()];
    while let Some(d) = todo.pop() {
        let mut names: Vec<_> = fs::read_dir(root.join(&d))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let p = d.join(n);
            let md = fs::symlink_metadata(root.join(&p)).unwrap();
            if md.is_dir() {
                dirs.push(p.clone());
                todo.push(p);
            } else if md.is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    dirs.sort();
    (files, dirs)
}

fn pick<'a, T>(rng: &mut testkit::Rng, v: &'a [T]) -> Option<&'a T> {
    (!v.is_empty()).then(|| &v[rng.below(v.len() as u64) as usize])
}

fn bytes(rng: &mut testkit::Rng, len: usize) -> Vec<u8> {
    let seed = rng.next_u64();
    (0..len)
        .map(|i| (seed.rotate_left((i % 61) as u32) ^ i as u64) as u8)
        .collect()
}

/// One random change to the tree at `v`: what a night of use does, with
/// reflinks of whole files and of ranges, so that the kernel clones from
/// the parent at paths and offsets the same stream changes.
fn random_change(rng: &mut testkit::Rng, v: &Path, n: &mut u64) {
    use std::os::unix::fs::FileExt;
    let (files, dirs) = tree(v);
    let file = pick(rng, &files).cloned();
    let dir = pick(rng, &dirs).cloned().unwrap_or_default();
    *n += 1;
    let fresh = dir.join(format!("x{n}"));
    let size = |p: &Path| fs::metadata(v.join(p)).unwrap().len();
    match (rng.below(16), file) {
        (0..=2, _) | (_, None) => {
            let len = [0, 100, 3000, 70_000, 300_000][rng.below(5) as usize];
            fs::write(v.join(&fresh), bytes(rng, len)).unwrap();
        }
        (3, Some(f)) => {
            // A reflink of the whole file.
            run(Command::new("cp")
                .arg("--reflink=always")
                .arg(v.join(&f))
                .arg(v.join(&fresh)));
        }
        (4, Some(f)) => {
            // A reflink of a range into another file.
            let Some(g) = pick(rng, &files).cloned() else {
                return;
            };
            let blocks = size(&f) / 4096;
            if blocks == 0 {
                return;
            }
            let so = rng.below(blocks) * 4096;
            let len = (rng.below(blocks - so / 4096) + 1) * 4096;
            let doff = rng.below(size(&g) / 4096 + 2) * 4096;
            if f == g && so < doff + len && doff < so + len {
                return;
            }
            run(Command::new("xfs_io")
                .arg("-c")
                .arg(format!(
                    "reflink {} {so} {doff} {len}",
                    v.join(&f).display()
                ))
                .arg(v.join(&g)));
        }
        (5 | 6, Some(f)) => {
            let off = rng.below(size(&f) + 4096);
            let len = 1 + rng.below(20_000) as usize;
            let data = bytes(rng, len);
            fs::OpenOptions::new()
                .write(true)
                .open(v.join(&f))
                .unwrap()
                .write_all_at(&data, off)
                .unwrap();
        }
        (7, Some(f)) => {
            let to = rng.below(size(&f) + 10_000);
            fs::OpenOptions::new()
                .write(true)
                .open(v.join(&f))
                .unwrap()
                .set_len(to)
                .unwrap();
        }
        (8, Some(f)) => {
            // Rename, maybe over another file.
            let to = match pick(rng, &files) {
                Some(g) if rng.below(3) == 0 => g.clone(),
                _ => fresh,
            };
            if to != f {
                fs::rename(v.join(&f), v.join(&to)).unwrap();
            }
        }
        (9, Some(f)) => fs::remove_file(v.join(&f)).unwrap(),
        (10, Some(f)) => fs::hard_link(v.join(&f), v.join(&fresh)).unwrap(),
        (11, Some(f)) => {
            let p = v.join(&f);
            match rng.below(4) {
                0 => run(Command::new("chmod")
                    .arg(format!("{:o}", 0o600 + rng.below(0o177)))
                    .arg(&p)),
                1 => run(Command::new("chown")
                    .arg(format!("{}:{}", rng.below(3000), rng.below(3000)))
                    .arg(&p)),
                2 => run(Command::new("setfattr")
                    .args(["-n", &format!("user.a{}", rng.below(3)), "-v"])
                    .arg(format!("v{}", rng.below(100)))
                    .arg(&p)),
                _ => run(Command::new("touch")
                    .args(["-d", &format!("@{}", 1_000_000_000 + rng.below(1 << 28))])
                    .arg(&p)),
            };
        }
        (12, Some(f)) => {
            let sz = size(&f);
            if sz > 8192 {
                let off = rng.below(sz / 4096) * 4096;
                run(Command::new("fallocate")
                    .args(["-p", "-o", &off.to_string(), "-l", "4096"])
                    .arg(v.join(&f)));
            }
        }
        (13, _) => fs::create_dir(v.join(&fresh)).unwrap(),
        (14, _) => {
            // Move a directory somewhere outside itself.
            let Some(d) = pick(rng, &dirs[1..]).cloned() else {
                return;
            };
            let Some(t) = pick(rng, &dirs).cloned() else {
                return;
            };
            if !t.starts_with(&d) {
                fs::rename(v.join(&d), v.join(t.join(format!("m{n}")))).unwrap();
            }
        }
        _ => {
            let Some(d) = pick(rng, &dirs[1..]).cloned() else {
                return;
            };
            if rng.below(3) == 0 {
                fs::remove_dir_all(v.join(&d)).unwrap();
            }
        }
    }
}

#[test]
fn random_chains_in_each_mode_match_btrfs_receive() {
    if !kernel_available("random_chains_in_each_mode_match_btrfs_receive") {
        return;
    }
    let seeds: u64 = std::env::var("RANDOM_CHAIN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut total = 0;
    for seed in 1..=seeds {
        let mut src = BtrfsImage::new(512, &[], "");
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(src.mnt().join("vol")));
        let v = src.mnt().join("vol");
        let mut rng = testkit::Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut n = 0;
        for (i, s) in SNAPS.iter().enumerate() {
            for _ in 0..if i == 0 { 60 } else { 40 } {
                random_change(&mut rng, &v, &mut n);
            }
            if i == 2 {
                // Inode numbers freed above are given out again.
                src.unmount();
                src.mount("");
            }
            snapshot(&src, s);
        }
        let chain = streams(&src);
        let reference = BtrfsImage::new(512, &[], "noatime");
        for s in &chain {
            btrfs_receive(reference.mnt(), s);
        }
        for mode in [&[][..], &["--in-place"][..], &["--link"][..]] {
            // In turn onto tmpfs, ext4 and xfs (whose copies are reflinks).
            let fs_name = ["tmpfs", "ext4", "xfs"][(seed % 3) as usize];
            let (_t, _e, dest);
            if fs_name == "tmpfs" {
                let t = Tmpfs::new(512, "noatime");
                dest = t.mnt().to_path_buf();
                (_t, _e) = (Some(t), None);
            } else {
                let e = if fs_name == "ext4" {
                    ext4_image(512, &[], "noatime")
                } else {
                    xfs_image(512, "noatime")
                };
                dest = e.mnt().to_path_buf();
                (_t, _e) = (None, Some(e));
            }
            let what = format!("seed {seed} {fs_name} {}", mode.first().unwrap_or(&"copy"));
            for (s, stream) in SNAPS.iter().zip(&chain) {
                rreceive_ok(&dest, stream, mode);
                total += assert_same_tree(
                    &format!("{what} {s}"),
                    &reference.mnt().join(s),
                    &dest.join(s),
                    leeway(),
                );
            }
            if mode != ["--in-place"] {
                for s in SNAPS {
                    assert_same_tree(
                        &format!("{what} {s} at the end"),
                        &reference.mnt().join(s),
                        &dest.join(s),
                        leeway(),
                    );
                }
            }
            assert!(
                leftovers(&dest).is_empty(),
                "{what}: {:?}",
                leftovers(&dest)
            );
        }
        let from_parent: usize = chain.iter().map(|s| clones_from_parent(s)).sum();
        println!("seed {seed}: {from_parent} clones from the parent");
    }
    println!("{total} paths identical");
}

/// The inode flags of `p` (FS_IOC_GETFLAGS).
fn flags(p: &Path) -> u32 {
    testkit::inode_flags(p).unwrap()
}

/// Its immutable and append-only flags.
fn late_flags(p: &Path) -> u32 {
    flags(p) & 0x30
}

#[test]
fn immutable_and_append_only_files_changed_later_in_each_mode() {
    if !kernel_available("immutable_and_append_only_files_changed_later_in_each_mode") {
        return;
    }
    // The kernel sends FILEATTR (v2, incrementals only) after the changes
    // it allows: a write to a file made immutable by the last stream comes
    // before the flag is cleared.
    let src = BtrfsImage::new(512, &[], "");
    let v = src.mnt().join("vol");
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(&v));
    // The kernel sends no FILEATTR for an inode new in an incremental:
    // the flagged files are there from the start.
    sh(
        &v,
        "echo hello > f && mkdir d && echo x > d/g && echo y > d/h
         echo k > keep && echo n > nodump",
    );
    snapshot(&src, "n0");
    sh(
        &v,
        "chattr +i f && chattr +a d && chattr +i keep && chattr +d nodump",
    );
    snapshot(&src, "n1");
    sh(&v, "chattr -i f && echo more >> f && chattr -a d && rm d/g");
    snapshot(&src, "n2");
    let chain = kernel_streams(&src, &SNAPS[..3], "fa", &["--proto", "2"]);
    let reference = BtrfsImage::new(512, &[], "noatime");
    for s in &chain {
        btrfs_receive(reference.mnt(), s);
    }
    for mode in [&[][..], &["--in-place"][..], &["--link"][..]] {
        let what = mode.first().unwrap_or(&"copy");
        let ext4 = ext4_image(256, &[], "noatime");
        let dest = ext4.mnt();
        for (i, s) in chain.iter().enumerate() {
            rreceive_ok(dest, s, mode);
            let name = SNAPS[i];
            assert_same_tree(
                &format!("{what} {name}"),
                &reference.mnt().join(name),
                &dest.join(name),
                leeway(),
            );
            if name == "n1" {
                assert_eq!(late_flags(&dest.join("n1/f")), 0x10, "{what}: n1/f +i");
                assert_eq!(late_flags(&dest.join("n1/d")), 0x20, "{what}: n1/d +a");
            }
        }
        assert_eq!(late_flags(&dest.join("n2/f")), 0, "{what}: n2/f");
        assert_eq!(late_flags(&dest.join("n2/d")), 0, "{what}: n2/d");
        // Files the stream leaves alone keep their flags, copied or not.
        assert_eq!(late_flags(&dest.join("n2/keep")), 0x10, "{what}: n2/keep");
        assert_eq!(
            flags(&dest.join("n2/nodump")) & 0x40,
            0x40,
            "{what}: n2/nodump"
        );
        if mode != ["--in-place"] {
            // The older snapshot keeps its flags.
            assert_eq!(late_flags(&dest.join("n1/f")), 0x10, "{what}: n1/f kept");
        }
        // Immutable files stay in DEST: lift the flags so it can go.
        for s in ["n1/f", "n1/d", "n1/keep", "n2/f", "n2/d", "n2/keep"] {
            let _ = Command::new("chattr")
                .args(["-i", "-a"])
                .arg(dest.join(s))
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}
