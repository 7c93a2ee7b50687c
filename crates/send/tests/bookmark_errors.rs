//! Bookmarks that cannot be used, and what a bookmark can be used for
//! besides a send (issue #49).
//!
//! Damaged, truncated, foreign and out-of-lineage bookmarks each give
//! their error: a bookmark of another filesystem (fsid), of a snapshot not
//! of SUBVOL's lineage (taken with `--parent-any`), of a snapshot newer
//! than SUBVOL, cut at several points (inside the magic, the prefix, the
//! header, the frames, the index, the trailer, one byte short), with a
//! byte flipped in the header, a frame, the index or the trailer's
//! checksum, of an unknown format version (with the checksum left or made to
//! match), a file that is not a bookmark, a directory as
//! `--parent-bookmark`, and a bookmark given as SUBVOL. Each exits with
//! code 1, writes nothing on standard output and no `-f` file, and says
//! on standard error which file and what is wrong; the same for `-p FILE`
//! and `--changes -p FILE`.
//!
//! A `--write-bookmark` killed (SIGKILL) before any of its system calls
//! leaves the bookmark whole under its name or not there at all. A
//! bookmark read back through the library holds every block of the
//! snapshot's fs tree as the filesystem has it. `--changes -p BOOKMARK`
//! lists what `--changes -p SNAPSHOT` does, while the snapshot exists, and
//! after it is deleted and its space reused but for data it can no
//! longer prove unchanged. `--verify DIR BOOKMARK` compares a received
//! copy with the bookmarked snapshot (files' data by size, inline data
//! byte for byte) and lists what was changed in it.
//!
//! Most cases read the committed fixture images (no root); the kill
//! cases need ptrace, the verify cases root (a receive makes devices and
//! sets owners), the deleted-parent case the kernel (one SKIP line each
//! otherwise).

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use btrfs_disk::block::Block;
use btrfs_disk::{Filesystem, Subvolume, Tree};
use btrfs_stream::{Command as Cmd, CommandKind, Reader};
use common::receivers::Receiver;
use rsend::bookmark::Bookmark;
use testkit::syscall_kill::{run_killed_at, At};
use testkit::{kernel_available, run, sh, BtrfsImage};

fn rsend() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rsend"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fixture image decompressed into a scratch directory.
struct Image {
    dir: tempfile::TempDir,
    devices: Vec<PathBuf>,
}

impl Image {
    /// The fixture `name`; none (and a SKIP line) when it is not there.
    fn new(test: &str, name: &str) -> Option<Image> {
        let Some(f) = common::fixtures().into_iter().find(|f| f.name == name) else {
            println!("SKIP {test}: fixture image {name} not found");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("rsend-bm-")
            .tempdir()
            .unwrap();
        let devices = f.decompress(dir.path());
        Some(Image { dir, devices })
    }

    fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// `rsend -d DEV... ARGS`.
    fn rsend(&self, args: &[&OsStr]) -> Output {
        let mut cmd = rsend();
        for d in &self.devices {
            cmd.arg("-d").arg(d);
        }
        cmd.args(args).output().unwrap()
    }

    /// Writes a bookmark of `snap` to `path` (`-n --write-bookmark`).
    fn bookmark(&self, snap: &str, path: &Path) {
        let o = self.rsend(&[
            "-q".as_ref(),
            "-n".as_ref(),
            "--write-bookmark".as_ref(),
            path.as_os_str(),
            snap.as_ref(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }

    fn open(&self) -> Filesystem {
        Filesystem::open(&self.devices).unwrap()
    }
}

/// The reflink-snapshots fixture, its fsid, and bookmarks of snap1 and
/// snap2 (snapshots of `vol`, ctransids 11 and 12).
struct Setup {
    img: Image,
    fsid: String,
    s1: PathBuf,
    s2: PathBuf,
}

fn setup(test: &str) -> Option<Setup> {
    let img = Image::new(test, "reflink-snapshots")?;
    let fsid = img.open().fsid().to_string();
    let s1 = img.scratch().join("s1.bm");
    let s2 = img.scratch().join("s2.bm");
    img.bookmark("snap1", &s1);
    img.bookmark("snap2", &s2);
    Some(Setup { img, fsid, s1, s2 })
}

/// Layout of a bookmark (crates/send/src/bookmark/format.rs): magic,
/// version, header length, header, frames, index, trailer (index offset,
/// index length, blocks, crc32c of all before it, zero, magic).
struct Layout {
    header_end: usize,
    index: usize,
    trailer: usize,
    sum: usize,
    len: usize,
}

const TRAILER: usize = 8 + 8 + 8 + 4 + 4 + 8;

fn layout(b: &[u8]) -> Layout {
    let header_len = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let trailer = b.len() - TRAILER;
    let index = u64::from_le_bytes(b[trailer..trailer + 8].try_into().unwrap()) as usize;
    Layout {
        header_end: 16 + header_len,
        index,
        trailer,
        sum: b.len() - 16,
        len: b.len(),
    }
}

/// `b` with its checksum made to match its bytes again.
fn resum(mut b: Vec<u8>) -> Vec<u8> {
    let at = b.len() - 16;
    let sum = crc32c::crc32c(&b[..at]);
    b[at..at + 4].copy_from_slice(&sum.to_le_bytes());
    b
}

fn flipped(b: &[u8], at: usize) -> Vec<u8> {
    let mut b = b.to_vec();
    b[at] ^= 0x20;
    b
}

/// A bad parent, and what its error must say (besides the file's name).
struct Case {
    name: String,
    /// The parent given (a bookmark file, or not one).
    parent: PathBuf,
    /// The image read (its devices), when not the fixture's own.
    devices: Option<Vec<PathBuf>>,
    subvol: &'static str,
    /// How the message names the file (its path, as given).
    names: String,
    want: Vec<String>,
}

/// The words a message must hold.
fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// Runs `case` as `--parent-bookmark FILE SUBVOL -f OUT`, `-p FILE SUBVOL`
/// (standard output) and `--changes -p FILE SUBVOL`; what went wrong.
fn refused(s: &Setup, case: &Case) -> Vec<String> {
    let out = s.img.scratch().join("out.stream");
    let p = case.parent.as_os_str();
    let forms: [(&str, Vec<&OsStr>); 3] = [
        (
            "--parent-bookmark -f",
            vec![
                "--parent-bookmark".as_ref(),
                p,
                case.subvol.as_ref(),
                "-f".as_ref(),
                out.as_os_str(),
            ],
        ),
        ("-p", vec!["-p".as_ref(), p, case.subvol.as_ref()]),
        (
            "--changes -p",
            vec!["--changes".as_ref(), "-p".as_ref(), p, case.subvol.as_ref()],
        ),
    ];
    let mut bad = Vec::new();
    for (form, args) in forms {
        let _ = std::fs::remove_file(&out);
        let mut cmd = rsend();
        for d in case.devices.as_ref().unwrap_or(&s.img.devices) {
            cmd.arg("-d").arg(d);
        }
        let o = cmd.args(&args).output().unwrap();
        let err = text(&o.stderr);
        let mut wrong = Vec::new();
        if o.status.code() != Some(1) {
            wrong.push(format!("exit {:?}", o.status.code()));
        }
        if !o.stdout.is_empty() {
            wrong.push(format!("{} bytes on standard output", o.stdout.len()));
        }
        if out.exists() {
            wrong.push("the -f file was made".into());
        }
        if !err.contains(&case.names) {
            wrong.push(format!("the message does not name {}", case.names));
        }
        for w in &case.want {
            if !err.contains(w) {
                wrong.push(format!("the message lacks {w:?}"));
            }
        }
        if err.lines().count() != 1 {
            wrong.push("not one line on standard error".into());
        }
        if !wrong.is_empty() {
            bad.push(format!(
                "{} ({form}): {}: {err}",
                case.name,
                wrong.join(", ")
            ));
        }
    }
    bad
}

#[test]
fn bad_bookmarks_each_give_their_error_and_no_stream() {
    let test = "bad_bookmarks_each_give_their_error_and_no_stream";
    let Some(s) = setup(test) else { return };
    let Some(other) = Image::new(test, "csum-crc32c") else {
        return;
    };
    let dir = s.img.scratch();
    let good = std::fs::read(&s.s1).unwrap();
    let l = layout(&good);
    assert!(
        l.header_end < l.index && l.index < l.trailer,
        "frames and index"
    );
    let s1 = s.s1.display().to_string();
    let mut cases = vec![
        Case {
            name: "a bookmark of another filesystem".into(),
            parent: s.s1.clone(),
            devices: Some(other.devices.clone()),
            subvol: "snap2",
            names: s1.clone(),
            want: words(&["not of this filesystem", &s.fsid]),
        },
        Case {
            name: "a bookmark of another lineage".into(),
            parent: s.s1.clone(),
            devices: None,
            subvol: "nested-snap",
            names: s1.clone(),
            want: words(&[
                "snap1",
                "is not of the lineage of nested-snap",
                "--parent-any",
            ]),
        },
        Case {
            name: "a bookmark of a newer snapshot".into(),
            parent: s.s2.clone(),
            devices: None,
            subvol: "snap1",
            names: s.s2.display().to_string(),
            want: words(&["snap2", "ctransid 12", "is newer than snap1", "ctransid 11"]),
        },
    ];
    // Damaged copies of s1.bm, and what their errors say.
    let mut damaged: Vec<(String, Vec<u8>, Vec<String>)> = Vec::new();
    let cut_short = words(&["cut short", "no end mark"]);
    for (at, what) in [
        (9, "inside the version"),
        (16, "after the prefix"),
        (16 + 50, "inside the header"),
        (l.header_end, "at the end of the header"),
        (l.header_end + 7, "inside the first frame"),
        (l.index + 3, "inside the index"),
        (l.trailer + 20, "inside the trailer"),
        (l.sum + 2, "inside the checksum"),
        (l.len - 1, "one byte before the end"),
    ] {
        damaged.push((
            format!("cut {what} (at byte {at} of {})", l.len),
            good[..at].to_vec(),
            cut_short.clone(),
        ));
    }
    // Cut inside its magic, it starts as no bookmark does.
    for at in [0, 5] {
        damaged.push((
            format!("cut at byte {at}, inside the magic"),
            good[..at].to_vec(),
            words(&["is not an rsend bookmark", "RSENDBMK"]),
        ));
    }
    let sha = words(&["damaged", "checksum"]);
    for (at, what) in [
        (16 + 40, "the header (the snapshot's uuid)"),
        (16 + 180, "the header (the root's address)"),
        (l.header_end + 5, "a frame"),
        (l.index + 2, "the index"),
        (l.trailer + 2, "the trailer's index offset"),
        (l.sum, "the trailer's checksum (first byte)"),
        (l.sum + 3, "the trailer's checksum (last byte)"),
    ] {
        damaged.push((
            format!("a byte flipped in {what}"),
            flipped(&good, at),
            sha.clone(),
        ));
    }
    // Its end mark damaged, it reads as cut short.
    damaged.push((
        "a byte flipped in the end mark".into(),
        flipped(&good, l.len - 3),
        cut_short.clone(),
    ));
    // The version is read before the sum is checked: a later format is
    // named as such whether its sum matches (as a newer rsend writes it)
    // or not.
    let mut v2 = good.clone();
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    let version = words(&["format version 2", "this rsend reads version 1"]);
    damaged.push((
        "format version 2, its checksum as it was".into(),
        v2.clone(),
        version.clone(),
    ));
    damaged.push((
        "format version 2, its checksum made to match".into(),
        resum(v2),
        version,
    ));
    damaged.push((
        "a text file".into(),
        b"snap1\n".to_vec(),
        words(&["is not an rsend bookmark"]),
    ));
    damaged.push((
        "a send stream".into(),
        {
            let o = s.img.rsend(&["-q".as_ref(), "snap1".as_ref()]);
            assert!(o.status.success());
            o.stdout
        },
        words(&["is not an rsend bookmark"]),
    ));
    for (i, (name, bytes, want)) in damaged.into_iter().enumerate() {
        let path = dir.join(format!("damaged-{i}.bm"));
        std::fs::write(&path, bytes).unwrap();
        cases.push(Case {
            name,
            names: path.display().to_string(),
            parent: path,
            devices: None,
            subvol: "snap2",
            want,
        });
    }
    // The image itself: a file, so -p takes it for a bookmark.
    cases.push(Case {
        name: "the image file".into(),
        parent: s.img.devices[0].clone(),
        devices: None,
        subvol: "snap2",
        names: s.img.devices[0].display().to_string(),
        want: words(&["is not an rsend bookmark"]),
    });
    let mut bad = Vec::new();
    for case in &cases {
        bad.extend(refused(&s, case));
    }
    assert!(
        bad.is_empty(),
        "{} of {} cases:\n{}",
        bad.len(),
        cases.len() * 3,
        bad.join("\n")
    );
}

#[test]
fn a_directory_or_a_bookmark_in_the_wrong_place_is_refused() {
    let test = "a_directory_or_a_bookmark_in_the_wrong_place_is_refused";
    let Some(s) = setup(test) else { return };
    let out = s.img.scratch().join("out.stream");
    let s1 = s.s1.as_os_str();
    let dir = s.img.scratch().as_os_str();
    let f = out.as_os_str();
    let cases: [(&str, Vec<&OsStr>, &[&str]); 4] = [
        (
            "a directory as --parent-bookmark",
            vec!["--parent-bookmark".as_ref(), dir, "snap2".as_ref()],
            &["is a directory, not a bookmark"],
        ),
        (
            "a bookmark as SUBVOL",
            vec![s1],
            &["is a bookmark, not a snapshot"],
        ),
        (
            "a bookmark as SUBVOL beside a parent",
            vec!["-p".as_ref(), "snap1".as_ref(), s1],
            &["is a bookmark, not a snapshot"],
        ),
        (
            "a bookmark as SUBVOL and as parent",
            vec!["-p".as_ref(), s1, s1],
            &["is a bookmark, not a snapshot"],
        ),
    ];
    let mut bad = Vec::new();
    for (name, args, want) in cases {
        let _ = std::fs::remove_file(&out);
        let mut args = args;
        args.extend(["-f".as_ref(), f]);
        let o = s.img.rsend(&args);
        let err = text(&o.stderr);
        let named = if name.starts_with("a directory") {
            s.img.scratch().display().to_string()
        } else {
            s.s1.display().to_string()
        };
        if o.status.code() != Some(1)
            || !o.stdout.is_empty()
            || out.exists()
            || !err.contains(&named)
            || want.iter().any(|w| !err.contains(w))
        {
            bad.push(format!(
                "{name}: exit {:?}, -f file made: {}: {err}",
                o.status.code(),
                out.exists()
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Whether a stream ends with END (read whole, command by command).
fn ends(stream: &[u8]) -> bool {
    let mut r = Reader::new(stream);
    loop {
        match r.next_command() {
            Ok(Some(c)) if c.kind() == CommandKind::End => return true,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return false,
        }
    }
}

#[test]
fn a_bookmark_of_another_lineage_is_taken_with_parent_any() {
    let Some(s) = setup("a_bookmark_of_another_lineage_is_taken_with_parent_any") else {
        return;
    };
    let fs = s.img.open();
    let snap1 = fs
        .find_subvolume(&btrfs_disk::SubvolSelector::Path("snap1".into()))
        .unwrap();
    let o = s.img.rsend(&[
        "-p".as_ref(),
        s.s1.as_os_str(),
        "--parent-any".as_ref(),
        "nested-snap".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(ends(&o.stdout), "the stream ends with END");
    match Reader::new(&o.stdout[..]).next_command().unwrap() {
        Some(Cmd::Snapshot {
            path,
            clone_uuid,
            clone_ctransid,
            ..
        }) => {
            assert_eq!(path, b"nested-snap");
            assert_eq!(clone_uuid.as_bytes(), snap1.uuid.as_bytes());
            assert_eq!(clone_ctransid, snap1.ctransid);
        }
        other => panic!("first command {other:?}, not SNAPSHOT"),
    }
    let o = s.img.rsend(&[
        "--changes".as_ref(),
        "-p".as_ref(),
        s.s1.as_os_str(),
        "--parent-any".as_ref(),
        "nested-snap".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!o.stdout.is_empty());
}

/// A bookmark whose checksum was made to match damaged contents (not what a
/// disk or a cut does; someone rewrote it): the send fails where the
/// damage is read, and the stream it began has no END, so no receiver
/// takes it.
#[test]
fn a_forged_bookmark_fails_the_send_before_its_end() {
    let Some(s) = setup("a_forged_bookmark_fails_the_send_before_its_end") else {
        return;
    };
    let good = std::fs::read(&s.s1).unwrap();
    let l = layout(&good);
    let out = s.img.scratch().join("out.stream");
    for (what, at) in [
        ("a frame's first bytes", l.header_end + 1),
        ("inside a frame", l.header_end + 100),
        ("the tree blocks' fsid in the header", 16 + 30),
    ] {
        let path = s.img.scratch().join("forged.bm");
        std::fs::write(&path, resum(flipped(&good, at))).unwrap();
        let _ = std::fs::remove_file(&out);
        let o = s.img.rsend(&[
            "-p".as_ref(),
            path.as_os_str(),
            "snap2".as_ref(),
            "-f".as_ref(),
            out.as_os_str(),
        ]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("rsend: error:"), "{what}: {err}");
        let stream = std::fs::read(&out).unwrap_or_default();
        assert!(!ends(&stream), "{what}: the stream has its END");
    }
}

/// `rsend -n --write-bookmark BM snap` killed before each of its system
/// calls: the bookmark is then whole (the one a whole run writes) or not
/// there; only a hidden temporary file may be left beside it.
#[test]
fn a_killed_write_bookmark_leaves_it_whole_or_absent() {
    let test = "a_killed_write_bookmark_leaves_it_whole_or_absent";
    let Some(img) = Image::new(test, "nodesize-4k") else {
        return;
    };
    let want = img.scratch().join("whole.bm");
    img.bookmark("many-snap", &want);
    let want = std::fs::read(&want).unwrap();
    let dir = img.scratch().join("bm");
    std::fs::create_dir(&dir).unwrap();
    let bm = dir.join("many.bm");
    let cmd = || {
        let mut c = rsend();
        c.arg("-q").arg("-d").arg(&img.devices[0]);
        c.arg("-n")
            .arg("--write-bookmark")
            .arg(&bm)
            .arg("many-snap");
        c
    };
    let whole = match run_killed_at(&mut cmd(), None) {
        Ok(r) => r,
        Err(e) => {
            println!("SKIP {test}: cannot trace rsend: {e}");
            return;
        }
    };
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    assert_eq!(
        std::fs::read(&bm).unwrap(),
        want,
        "the bookmark of a whole run"
    );
    let calls = whole.calls.len() as u64;
    let (mut absent, mut present, mut left) = (0, 0, 0);
    for n in 1..=calls {
        for e in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        let r = run_killed_at(&mut cmd(), Some(At { n, main: false })).unwrap();
        match std::fs::read(&bm) {
            Ok(b) => {
                assert_eq!(b, want, "killed before call {n} ({:?})", r.before);
                Bookmark::open(&bm).unwrap();
                present += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => absent += 1,
            Err(e) => panic!("{e}"),
        }
        let mut tmp = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name != "many.bm" {
                assert!(
                    name.starts_with(".many.bm.tmp-"),
                    "killed before call {n}: {name} left"
                );
                tmp.push(name);
                left += 1;
            }
        }
        if !tmp.is_empty() {
            // The next run removes what the killed one left, and writes it whole.
            let again = cmd().output().unwrap();
            assert!(again.status.success(), "{}", text(&again.stderr));
            assert_eq!(std::fs::read(&bm).unwrap(), want);
            let names: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(
                names,
                ["many.bm"],
                "after killed before call {n}, then a whole run"
            );
        }
    }
    println!(
        "{test}: {calls} system calls; killed before each: bookmark absent {absent}, whole {present}; a temporary file left {left} times"
    );
    assert!(absent > 0 && present > 0);
}

/// Every block under `a` (of the filesystem's tree) equals the block of
/// `b` (the bookmark's) at the same place; how many there were.
fn same_blocks(fs_tree: &Tree<'_>, bm_tree: &Tree<'_>, a: Block, b: Block) -> usize {
    assert_eq!(a.bytenr(), b.bytenr());
    assert!(a.bytes() == b.bytes(), "block {} differs", a.bytenr());
    let mut n = 1;
    if a.level() > 0 {
        for slot in 0..a.nritems() {
            n += same_blocks(
                fs_tree,
                bm_tree,
                fs_tree.child(&a, slot).unwrap(),
                bm_tree.child(&b, slot).unwrap(),
            );
        }
    }
    n
}

#[test]
fn a_bookmark_holds_every_block_of_the_snapshot_tree() {
    let test = "a_bookmark_holds_every_block_of_the_snapshot_tree";
    let mut done = Vec::new();
    for name in [
        "nodesize-4k",
        "nodesize-64k",
        "csum-sha256",
        "csum-blake2",
        "csum-xxhash",
        "raid5",
        "reflink-snapshots",
    ] {
        let Some(img) = Image::new(test, name) else {
            continue;
        };
        let fs = img.open();
        let svs: Vec<Subvolume> = fs
            .subvolumes()
            .unwrap()
            .into_iter()
            .filter(|s| s.is_readonly())
            .collect();
        for sv in &svs {
            let path = img.scratch().join(format!("{}.bm", sv.id));
            let w = rsend::bookmark::write(&fs, sv, &path).unwrap();
            let bm = Bookmark::open(&path).unwrap();
            let h = bm.header();
            assert_eq!(
                (h.fsid, h.uuid, h.parent_uuid, h.ctransid, h.root),
                (fs.fsid(), sv.uuid, sv.parent_uuid, sv.ctransid, sv.root),
                "{name} {}",
                sv.label()
            );
            assert_eq!(bm.subvolume().ctransid, sv.ctransid);
            let (ft, bt) = (fs.fs_tree(sv), bm.tree());
            let n = same_blocks(&ft, &bt, ft.root_block().unwrap(), bt.root_block().unwrap());
            assert_eq!(n, bm.blocks(), "{name} {}: blocks kept", sv.label());
            assert_eq!(n as u64, w.blocks);
            assert_eq!(w.bytes, std::fs::metadata(&path).unwrap().len());
            // Every item as a range over the whole tree reads it.
            let all = |t: &Tree<'_>| -> Vec<(btrfs_disk::Key, Vec<u8>)> {
                t.range(btrfs_disk::Key::new(0, 0, 0), btrfs_disk::Key::MAX)
                    .map(|i| i.map(|i| (i.key, i.data().to_vec())).unwrap())
                    .collect()
            };
            assert!(all(&ft) == all(&bt), "{name} {}: items", sv.label());
            done.push(format!("{name} {} ({n} blocks)", sv.path_lossy()));
        }
    }
    println!("{test}: {}", done.join(", "));
}

/// `--changes -p PARENT SUBVOL`'s lines on image `img`.
fn changes(img: &Image, parent: &OsStr, subvol: &str) -> String {
    let o = img.rsend(&["--changes".as_ref(), "-p".as_ref(), parent, subvol.as_ref()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

#[test]
fn changes_against_a_bookmark_are_those_against_its_snapshot() {
    let test = "changes_against_a_bookmark_are_those_against_its_snapshot";
    for (name, pairs) in [
        (
            "reflink-snapshots",
            &[
                ("snap1", "snap2"),
                ("snap2", "snap3"),
                ("snap1", "snap3"),
                ("snap1", "snap1-again"),
            ][..],
        ),
        ("csum-crc32c", &[("snap1", "snap2")][..]),
        ("compress-zstd", &[("snap1", "snap2")][..]),
    ] {
        let Some(img) = Image::new(test, name) else {
            continue;
        };
        for (p, s) in pairs {
            let bm = img.scratch().join(format!("{p}.bm"));
            if !bm.exists() {
                img.bookmark(p, &bm);
            }
            let want = changes(&img, p.as_ref(), s);
            assert!(!want.is_empty() || *s == "snap1-again", "{name} {p} {s}");
            assert_eq!(
                changes(&img, bm.as_os_str(), s),
                want,
                "{name}: -p {p}.bm {s}"
            );
        }
    }
}

/// `--changes` against a bookmark of a snapshot that is then deleted,
/// and its space reused (a balance moves every extent): each line it adds
/// to those against the snapshot, while it existed, is data it can no
/// longer prove unchanged.
#[test]
fn changes_against_a_bookmark_after_its_snapshot_is_deleted() {
    if !kernel_available("changes_against_a_bookmark_after_its_snapshot_is_deleted") {
        return;
    }
    let fs = BtrfsImage::new(512, &[], "");
    let mnt = fs.mnt();
    sh(
        mnt,
        "head -c 1048576 /dev/urandom > big
         head -c 262144 /dev/urandom > keep
         head -c 131072 /dev/urandom > grows
         head -c 65536 /dev/urandom > rewritten
         head -c 100000 /dev/urandom > gone
         printf 'inline\\n' > small
         mkdir d; printf 'x\\n' > d/x
         sync",
    );
    fs.snapshot("s1");
    sh(mnt, "sync");
    let bm = fs.scratch().join("s1.bm");
    run(rsend()
        .args(["-q", "-n", "--write-bookmark"])
        .arg(&bm)
        .arg(mnt.join("s1")));
    let keep_bytes = fs.scratch().join("rewritten.bak");
    sh(
        mnt,
        &format!(
            "head -c 4096 /dev/urandom >> grows
             chmod 600 keep
             rm gone
             printf 'new\\n' > new
             cp rewritten {bak}
             dd if={bak} of=rewritten conv=notrunc status=none
             printf 'y\\n' > d/x
             sync",
            bak = keep_bytes.display()
        ),
    );
    fs.snapshot("s2");
    sh(mnt, "sync");
    let s1 = mnt.join("s1");
    let s2 = mnt.join("s2");
    let list = |parent: &Path| {
        let o = rsend()
            .args(["--changes", "-p"])
            .arg(parent)
            .arg(&s2)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let a = list(&s1);
    assert_eq!(
        a,
        "M\t.\tmtime\nM\td/x\tdata,mtime\n-\tgone\nM\tgrows\tdata,mtime\n\
         M\tkeep\tmode\n+\tnew\nM\trewritten\tmtime\n",
        "against the snapshot"
    );
    // `rewritten` holds its bytes in new extents: the snapshot's bytes
    // are read and found equal, the bookmark holds none and cannot tell.
    let b = a.replace("M\trewritten\tmtime", "M\trewritten\tdata,mtime");
    assert_eq!(list(&bm), b, "against the bookmark, the snapshot there");
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "delete"])
        .arg(&s1));
    run(Command::new("btrfs").args(["subvolume", "sync"]).arg(mnt));
    sh(mnt, "sync");
    assert_eq!(list(&bm), b, "against the bookmark, the snapshot deleted");
    // Its space reused: every data extent moved, so every file whose data
    // is in an extent (not inline) and was kept can no longer be proven
    // the same: `big` and `keep` now differ in data too.
    sh(
        mnt,
        "head -c 100M /dev/urandom > fill; sync; rm fill; sync
         btrfs -q balance start -dusage=100 -musage=100 . >/dev/null
         sync",
    );
    let c = b
        .replace("M\tkeep\tmode", "M\tkeep\tdata,mode")
        .replace("-\tgone\n", "-\tgone\nM\tbig\tdata\n");
    let c = {
        let mut lines: Vec<&str> = c.lines().collect();
        lines.sort_by_key(|l| l.split('\t').nth(1).unwrap_or_default().to_owned());
        lines.join("\n") + "\n"
    };
    assert_eq!(list(&bm), c, "against the bookmark, its space reused");
}

/// `--verify DIR BOOKMARK`: a received copy of the bookmarked snapshot is
/// identical; then a chmod, a chown, a rename and a size change are each
/// listed, and a content change is listed where the data is inline.
#[test]
fn verify_against_a_bookmark() {
    let test = "verify_against_a_bookmark";
    if !nix::unistd::geteuid().is_root() {
        println!("SKIP {test}: needs root (the copy has devices and other owners)");
        return;
    }
    let Some(img) = Image::new(test, "csum-crc32c") else {
        return;
    };
    let bm = img.scratch().join("snap1.bm");
    img.bookmark("snap1", &bm);
    let stream = img.scratch().join("snap1.stream");
    let o = img.rsend(&[
        "-q".as_ref(),
        "-f".as_ref(),
        stream.as_os_str(),
        "snap1".as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let receive = |n: usize| {
        let dest = img.scratch().join(format!("r{n}"));
        std::fs::create_dir(&dest).unwrap();
        Receiver::RreceiveExt4
            .receive(&testkit::rreceive_bin(), &stream, &dest)
            .unwrap();
        dest.join("snap1")
    };
    let verify = |copy: &Path, by: &[&OsStr]| {
        let mut cmd = rsend();
        cmd.args(by);
        cmd.arg("--verify").arg(copy).arg("--ignore").arg("flags");
        cmd.output().unwrap()
    };
    let by_bookmark = [bm.as_os_str()];
    let copy = receive(0);
    let o = verify(&copy, &by_bookmark);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("rsend: note: a bookmark holds no file data"),
        "{err}"
    );
    assert!(err.ends_with("identical\n"), "{err}");
    // Each damage keeps the times of what it did not mean to change
    // (a directory's mtime after a rename, a file's after a truncate).
    let damages: [(&str, &str, bool); 7] = [
        ("chmod 644 d1/random64k", "M\td1/random64k\tmode\n", true),
        ("chown 1:1 sparse", "M\tsparse\towner\n", true),
        (
            "touch -r . ../t; mv empty renamed; touch -r ../t .",
            "-\tempty\n+\trenamed\n",
            true,
        ),
        (
            "touch -r repeat200k ../t; truncate -s 1000 repeat200k; touch -r ../t repeat200k",
            "M\trepeat200k\tdata\n",
            true,
        ),
        // 40 bytes inline in the tree: compared byte for byte.
        (
            "touch -r d1/d2/d3/deep.txt ../t; printf X | dd of=d1/d2/d3/deep.txt bs=1 seek=3 conv=notrunc status=none; touch -r ../t d1/d2/d3/deep.txt",
            "M\td1/d2/d3/deep.txt\tdata\n",
            true,
        ),
        // 64 KiB in an extent, size kept: the bookmark cannot see it (the
        // note says so); a verify against the snapshot does.
        (
            "touch -r d1/random64k ../t; printf X | dd of=d1/random64k bs=1 seek=3 conv=notrunc status=none; touch -r ../t d1/random64k",
            "M\td1/random64k\tdata\n",
            false,
        ),
        (
            "touch -r . ../d; touch ../t; touch -h -r dangling ../t; rm dangling; ln -s other dangling; touch -h -r ../t dangling; touch -r ../d .",
            "M\tdangling\ttarget\n",
            true,
        ),
    ];
    let by_snapshot: Vec<&OsStr> = img
        .devices
        .iter()
        .flat_map(|d| ["-d".as_ref(), d.as_os_str()])
        .chain(["snap1".as_ref()])
        .collect();
    let mut bad = Vec::new();
    for (i, (script, want, seen)) in damages.iter().enumerate() {
        let copy = receive(i + 1);
        sh(&copy, script);
        let o = verify(&copy, &by_bookmark);
        let (code, got) = (o.status.code(), text(&o.stdout));
        let by_snap = verify(&copy, &by_snapshot);
        let (want_code, want_out) = if *seen { (1, *want) } else { (0, "") };
        if code != Some(want_code) || got != want_out {
            bad.push(format!(
                "{script}: exit {code:?}, listed {got:?}; {}",
                text(&o.stderr)
            ));
        }
        // Against the snapshot itself, every damage shows.
        if by_snap.status.code() != Some(1) || text(&by_snap.stdout) != *want {
            bad.push(format!(
                "{script} (against the snapshot): {:?}",
                text(&by_snap.stdout)
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
