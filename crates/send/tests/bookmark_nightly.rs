//! Bookmarks in the nightly backup: `rsend --parent-from LIST --bookmarks
//! DIR` sends a night incrementally against the bookmark of the newest
//! snapshot the destination holds when that snapshot was deleted from the
//! source, and says so; a damaged bookmark is said and passed over (an
//! older parent, or a full send), never used and never the night's
//! failure; scripts/rsend-nightly --bookmarks DIR does the same from cron.
//!
//! Against the real kernel (root, loop devices, the btrfs module; one SKIP
//! line otherwise): the source is a btrfs in an image file, mounted, sent
//! from the image (`-d IMAGE`); the destination a directory on a loop
//! ext4 received by rreceive. Each received night is compared with its
//! source snapshot (testdata/manifest.py --links).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::receivers::{listing, manifest_of_tree, rreceive_bin, Receiver};
use common::scenarios::Manifest;
use testkit::{ext4_image, kernel_available, run, BtrfsImage, LoopImage};

/// Night 1 of subvolume `data`: 8 MiB in large files, 300 small ones
/// (inline), a hard link, a symlink, an xattr.
const NIGHT1: &str = r#"
mkdir big small
for i in 1 2 3 4; do head -c 2M /dev/urandom > big/b$i; done
for i in $(seq 1 300); do echo "small $i" > small/s$i; done
ln small/s1 small/s1-link
ln -s big/b1 link
setfattr -n user.night -v 1 small/s2
"#;

/// The changes of the nights after: a few hundred KiB each.
const NIGHTS: [&str; 4] = [
    r#"
head -c 200000 /dev/urandom >> big/b1
echo new > small/new2
mv small/s3 small/s3-renamed
rm small/s4
setfattr -n user.night -v 2 small/s2
"#,
    r#"
dd if=/dev/urandom of=big/b2 bs=4096 seek=10 count=8 conv=notrunc status=none
echo changed > small/s5
mkdir small/sub
mv small/s6 small/sub/
rm big/b4
"#,
    r#"
head -c 100000 /dev/urandom > small/night4
truncate -s 1M big/b3
rm small/s7 small/s8
"#,
    r#"
echo five > small/night5
mv small/sub small/sub5
chmod 0600 small/s9
"#,
];

/// The source: subvolume `data`, snapshots `snaps/nightN`.
struct Source {
    fs: BtrfsImage,
}

impl Source {
    fn new() -> Source {
        let fs = BtrfsImage::new(512, &[], "");
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(fs.mnt().join("data")));
        std::fs::create_dir(fs.mnt().join("snaps")).unwrap();
        Source { fs }
    }

    fn image(&self) -> &Path {
        self.fs.image()
    }

    /// Night `n`'s changes (1-based) and its snapshot `snaps/nightN`,
    /// synced to the image; the snapshot's path from the top level.
    fn night(&self, n: usize) -> String {
        let script = if n == 1 { NIGHT1 } else { NIGHTS[n - 2] };
        testkit::sh(&self.fs.mnt().join("data"), script);
        let snap = format!("snaps/night{n}");
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(self.fs.mnt().join("data"))
            .arg(self.fs.mnt().join(&snap)));
        run(&mut Command::new("sync"));
        snap
    }

    /// What `snap` holds, to compare a received copy with.
    fn manifest(&self, snap: &str) -> Manifest {
        manifest_of_tree(&self.fs.mnt().join(snap))
    }

    /// Deletes `snap` on the mounted source and commits, as retention does.
    fn delete(&self, snap: &str) {
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "delete"])
            .arg(self.fs.mnt().join(snap)));
        run(&mut Command::new("sync"));
    }

    /// The uuid of `snap` (from the top level).
    fn uuid(&self, snap: &str) -> String {
        let out = run(Command::new("btrfs")
            .args(["subvolume", "show"])
            .arg(self.fs.mnt().join(snap)));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("UUID:"))
            .map(|u| u.trim().to_owned())
            .unwrap_or_else(|| panic!("btrfs subvolume show {snap}: no UUID line"))
    }

    /// The subvolume id of `snap` (from the top level).
    fn subvol_id(&self, snap: &str) -> u64 {
        let out = run(Command::new("btrfs")
            .args(["subvolume", "show"])
            .arg(self.fs.mnt().join(snap)));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("Subvolume ID:"))
            .and_then(|u| u.trim().parse().ok())
            .unwrap_or_else(|| panic!("btrfs subvolume show {snap}: no Subvolume ID line"))
    }

    /// `rsend -d IMAGE ARGS...` with `input` on standard input.
    fn rsend(&self, args: &[&str], input: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-d")
            .arg(self.image())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // rsend may not read it all (the list is refused, say).
        let _ = child.stdin.take().unwrap().write_all(input);
        child.wait_with_output().unwrap()
    }
}

/// The backup: `DEST` on a loop ext4, received by rreceive.
struct Dest {
    dir: PathBuf,
    rreceive: PathBuf,
    _fs: LoopImage,
}

impl Dest {
    fn new() -> Dest {
        let fs = ext4_image(512, &[], "noatime");
        let dir = fs.mnt().join("backup");
        std::fs::create_dir(&dir).unwrap();
        Dest {
            dir,
            rreceive: rreceive_bin(),
            _fs: fs,
        }
    }

    /// `rreceive --list DEST`.
    fn list(&self) -> String {
        let out = run(Command::new(&self.rreceive).arg("--list").arg(&self.dir));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `rreceive -q DEST` of `stream`.
    fn receive(&self, stream: &[u8], what: &str) {
        use std::io::Write;
        let mut child = Command::new(&self.rreceive)
            .arg("-q")
            .arg(&self.dir)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stream).unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "{what}: rreceive: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Panics unless `DEST/name` equals `want`.
    fn check(&self, name: &str, want: &Manifest, what: &str) {
        let got = self.dir.join(name);
        if let Err(d) = Receiver::RreceiveExt4.compare_received(want, &got, false) {
            panic!(
                "{what}: {name} differs from its source snapshot: {d}\n  it holds:\n{}",
                listing(&got)
            );
        }
    }
}

/// What one night sent: rsend's standard error and the stream.
struct Night {
    stderr: String,
    stream: Vec<u8>,
}

impl Night {
    /// Panics unless rsend said `line` (a whole line).
    fn said(&self, line: &str, what: &str) {
        assert!(
            self.stderr.lines().any(|l| l == line),
            "{what}: rsend did not say\n  {line}\nit said:\n{}",
            self.stderr
        );
    }
}

/// `rreceive --list DEST | rsend --parent-from - --bookmarks DIR SNAP |
/// rreceive DEST`, checking that rsend exits 0 and that the stream is
/// received.
fn nightly(src: &Source, dest: &Dest, bookmarks: &Path, snap: &str) -> Night {
    let list = dest.list();
    let dir = bookmarks.to_str().unwrap();
    let o = src.rsend(
        &["--parent-from", "-", "--bookmarks", dir, snap],
        list.as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{snap}: rsend failed:\n{stderr}");
    dest.receive(&o.stdout, snap);
    Night {
        stderr,
        stream: o.stdout,
    }
}

/// The parent a stream names in its SNAPSHOT (None: a full stream).
fn stream_parent(stream: &[u8]) -> Option<String> {
    let mut r = btrfs_stream::Reader::from_bytes(stream);
    match r.next_command() {
        Ok(Some(btrfs_stream::Command::Snapshot { clone_uuid, .. })) => {
            Some(clone_uuid.hyphenated().to_string())
        }
        Ok(Some(btrfs_stream::Command::Subvol { .. })) => None,
        other => panic!("a stream starts with SUBVOL or SNAPSHOT, not {other:?}"),
    }
}

/// Flips a byte in the middle of `path`.
fn flip_byte(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0xff;
    std::fs::write(path, b).unwrap();
}

/// The bookmark of the snapshot with uuid `uuid` in `dir`.
fn bookmark(dir: &Path, uuid: &str) -> PathBuf {
    dir.join(format!("{uuid}.bookmark"))
}

/// What rsend says when it picks the bookmark of `snap` (uuid `uuid`) in
/// `dir` as the parent of `sent`, `listed` snapshots at the destination.
fn from_bookmark(snap: &str, uuid: &str, dir: &Path, sent: &str, listed: usize) -> String {
    format!(
        "rsend: parent {snap} (uuid {uuid}) from its bookmark {} (the snapshot is gone from \
         the source): of the same subvolume as {sent}, the newest older snapshot the \
         destination holds complete ({listed} listed there)",
        bookmark(dir, uuid).display()
    )
}

/// Five nights by hand (`rreceive --list DEST | rsend --parent-from -
/// --bookmarks DIR SNAP | rreceive DEST`), DIR made by the first:
///
/// - night 1 is full, night 2 against night 1, each leaving its bookmark;
/// - night 2's snapshot is deleted on the source: night 3 goes against its
///   bookmark (said on stderr), a stream with SNAPSHOT naming night 2,
///   the same bytes as `--parent-bookmark` gives and far smaller than a
///   full one, received equal to its source;
/// - night 3 deleted too and its bookmark damaged: night 4 says so and
///   goes against night 2's bookmark (`-n`); with night 2's bookmark cut
///   short too, against night 1, still on the source;
/// - night 4 and night 1 deleted, night 4's bookmark gone and night 1's
///   not a bookmark at all: night 5 says each and is sent in full, exit 0.
#[test]
fn a_night_whose_parent_was_deleted_goes_against_its_bookmark() {
    let test = "a_night_whose_parent_was_deleted_goes_against_its_bookmark";
    if !kernel_available(test) {
        return;
    }
    let src = Source::new();
    let dest = Dest::new();
    let bms = src.fs.scratch().join("kept/bookmarks");
    let mut summary = Vec::new();

    let s1 = src.night(1);
    let n1 = nightly(&src, &dest, &bms, &s1);
    let u1 = src.uuid(&s1);
    n1.said(
        &format!(
            "rsend: the destination holds none of this filesystem's snapshots complete \
             (0 listed there): sending {s1} (subvolume {}) in full",
            src.subvol_id(&s1)
        ),
        "night 1",
    );
    assert_eq!(stream_parent(&n1.stream), None, "night 1");
    dest.check("night1", &src.manifest(&s1), "night 1");
    let mode = std::fs::metadata(&bms).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "--bookmarks made {}", bms.display());
    assert!(bookmark(&bms, &u1).is_file(), "night 1 left no bookmark");

    let s2 = src.night(2);
    let n2 = nightly(&src, &dest, &bms, &s2);
    let u2 = src.uuid(&s2);
    assert!(
        n2.stderr.starts_with(&format!(
            "rsend: parent {s1} (subvolume {}",
            src.subvol_id(&s1)
        )),
        "night 2: {}",
        n2.stderr
    );
    assert_eq!(stream_parent(&n2.stream).as_deref(), Some(u1.as_str()));
    dest.check("night2", &src.manifest(&s2), "night 2");
    assert!(bookmark(&bms, &u2).is_file(), "night 2 left no bookmark");

    // Night 2 deleted on the source: night 3 against its bookmark.
    src.delete(&s2);
    let s3 = src.night(3);
    let want3 = src.manifest(&s3);
    let full3 = src.rsend(&["-q", &s3], b"").stdout;
    let by_hand = src.rsend(
        &[
            "-q",
            "--parent-bookmark",
            bookmark(&bms, &u2).to_str().unwrap(),
            &s3,
        ],
        b"",
    );
    assert!(
        by_hand.status.success(),
        "{}",
        String::from_utf8_lossy(&by_hand.stderr)
    );
    let n3 = nightly(&src, &dest, &bms, &s3);
    let u3 = src.uuid(&s3);
    n3.said(&from_bookmark(&s2, &u2, &bms, &s3, 2), "night 3");
    assert_eq!(
        stream_parent(&n3.stream).as_deref(),
        Some(u2.as_str()),
        "night 3: the stream's SNAPSHOT"
    );
    assert!(
        n3.stream == by_hand.stdout,
        "night 3: not the stream of --parent-bookmark ({} bytes against {})",
        n3.stream.len(),
        by_hand.stdout.len()
    );
    assert!(
        n3.stream.len() * 10 < full3.len(),
        "night 3: {} bytes, a full send {}",
        n3.stream.len(),
        full3.len()
    );
    dest.check("night3", &want3, "night 3");
    summary.push(format!(
        "night 3 from night 2's bookmark: {} bytes (full send {} bytes, bookmark {} bytes)",
        n3.stream.len(),
        full3.len(),
        std::fs::metadata(bookmark(&bms, &u2)).unwrap().len()
    ));
    for line in n3.stderr.lines() {
        summary.push(format!("  night 3 stderr: {line}"));
    }
    assert!(bookmark(&bms, &u3).is_file(), "night 3 left no bookmark");

    // Night 3 deleted and its bookmark damaged: the one before, then the
    // snapshot before that.
    src.delete(&s3);
    let s4 = src.night(4);
    let id4 = src.subvol_id(&s4);
    flip_byte(&bookmark(&bms, &u3));
    let dry = |what: &str| {
        let dir = bms.to_str().unwrap();
        let args = ["-n", "--parent-from", "-", "--bookmarks", dir, &s4];
        let o = src.rsend(&args, dest.list().as_bytes());
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{what}: exit {:?}: {err}", o.status);
        err
    };
    let damaged = |uuid: &str, why: String| {
        format!(
            "rsend: warning: bookmark {}: {why}; not using it as the parent of {s4} \
             (subvolume {})",
            bookmark(&bms, uuid).display(),
            id4
        )
    };
    let len3 = std::fs::metadata(bookmark(&bms, &u3)).unwrap().len();
    let sum3 = damaged(
        &u3,
        format!("damaged: the checksum (crc32c) in its trailer does not match its {len3} bytes"),
    );
    let err = dry("night 4, night 3's bookmark damaged");
    let said: Vec<&str> = err.lines().collect();
    assert_eq!(
        said,
        [sum3.clone(), from_bookmark(&s2, &u2, &bms, &s4, 3)],
        "night 4 -n, night 3's bookmark damaged"
    );
    summary.extend(said.iter().map(|l| format!("  night 4 -n: {l}")));
    let len2 = std::fs::metadata(bookmark(&bms, &u2)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(bookmark(&bms, &u2))
        .unwrap()
        .set_len(len2 / 2)
        .unwrap();
    let cut2 = damaged(
        &u2,
        format!(
            "cut short ({} bytes, no end mark): its writing was stopped, or the file was \
             truncated",
            len2 / 2
        ),
    );
    let n4 = nightly(&src, &dest, &bms, &s4);
    let u4 = src.uuid(&s4);
    let said: Vec<&str> = n4.stderr.lines().take(3).collect();
    assert_eq!(said[..2], [sum3.clone(), cut2.clone()], "night 4");
    assert!(
        said[2].starts_with(&format!(
            "rsend: parent {s1} (subvolume {}, uuid {u1}): of the same subvolume as {s4}",
            src.subvol_id(&s1)
        )),
        "night 4: {}",
        n4.stderr
    );
    summary.extend(said.iter().map(|l| format!("  night 4: {l}")));
    assert_eq!(stream_parent(&n4.stream).as_deref(), Some(u1.as_str()));
    dest.check("night4", &src.manifest(&s4), "night 4");

    // Nothing usable left: a full send, and the night goes through.
    src.delete(&s4);
    src.delete(&s1);
    std::fs::remove_file(bookmark(&bms, &u4)).unwrap();
    std::fs::write(bookmark(&bms, &u1), b"not a bookmark\n").unwrap();
    let s5 = src.night(5);
    let n5 = nightly(&src, &dest, &bms, &s5);
    let said: Vec<&str> = n5.stderr.lines().take(4).collect();
    let of5 = |l: String| {
        l.replace(&s4, &s5).replace(
            &format!("(subvolume {id4})"),
            &format!("(subvolume {})", src.subvol_id(&s5)),
        )
    };
    assert_eq!(
        said,
        [
            of5(sum3),
            of5(cut2),
            format!(
                "rsend: warning: {} is not an rsend bookmark (it does not start with the \
                 bookmark magic RSENDBMK); not using it as the parent of {s5} (subvolume {})",
                bookmark(&bms, &u1).display(),
                src.subvol_id(&s5)
            ),
            format!(
                "rsend: the destination holds none of this filesystem's snapshots complete \
                 (4 listed there): sending {s5} (subvolume {}) in full",
                src.subvol_id(&s5)
            ),
        ],
        "night 5:\n{}",
        n5.stderr
    );
    summary.extend(said.iter().map(|l| format!("  night 5: {l}")));
    assert_eq!(stream_parent(&n5.stream), None, "night 5");
    dest.check("night5", &src.manifest(&s5), "night 5");
    println!("{}", summary.join("\n"));
}

/// What one run of scripts/rsend-nightly did.
struct Job {
    code: Option<i32>,
    log: String,
}

impl Job {
    /// Panics, showing the log, unless the job exited 0 and its log has a
    /// line containing each of `what`.
    fn says(&self, what: &[&str], context: &str) {
        assert_eq!(
            self.code,
            Some(0),
            "{context}: the job failed:\n{}",
            self.log
        );
        for w in what {
            assert!(
                self.log.lines().any(|l| l.contains(w)),
                "{context}: the job's log has no line with {w:?}:\n{}",
                self.log
            );
        }
    }
}

/// `scripts/rsend-nightly -w 0 --bookmarks DIR -d IMAGE SNAP DEST`, with
/// the rsend of this build and rreceive, as cron runs it.
fn job(src: &Source, dest: &Dest, bookmarks: &Path, snap: &str) -> Job {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rsend-nightly");
    let out = Command::new(script)
        .args(["-w", "0", "--bookmarks"])
        .arg(bookmarks)
        .arg("-d")
        .arg(src.image())
        .arg(snap)
        .arg(&dest.dir)
        .env("RSEND", env!("CARGO_BIN_EXE_rsend"))
        .env("RRECEIVE", &dest.rreceive)
        .env_remove("SSH")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Job {
        code: out.status.code(),
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The nightly job with `--bookmarks DIR`, keeping only the newest
/// snapshot on the source:
///
/// - nights 1 and 2 are sent as without it (full, then against night 1),
///   each leaving its bookmark in DIR (made by the first);
/// - night 3, with nights 1 and 2 deleted on the source, goes against
///   night 2's bookmark, which the job's log says; DEST lists night 3 as
///   received against night 2 and it equals its source;
/// - night 3's bookmark lost, the job run again for night 3 sends nothing
///   and writes it; night 4, night 3 deleted, goes against that bookmark.
#[test]
fn the_nightly_job_keeps_bookmarks_and_sends_against_a_deleted_parents() {
    let test = "the_nightly_job_keeps_bookmarks_and_sends_against_a_deleted_parents";
    if !kernel_available(test) {
        return;
    }
    let src = Source::new();
    let dest = Dest::new();
    let bms = src.fs.scratch().join("job/bookmarks");
    let mut summary = Vec::new();

    let s1 = src.night(1);
    let u1 = src.uuid(&s1);
    let j = job(&src, &dest, &bms, &s1);
    j.says(
        &[
            "attempt 1: sending night1",
            &format!("sending {s1} (subvolume {}) in full", src.subvol_id(&s1)),
            "night1 is complete in",
        ],
        "night 1",
    );
    dest.check("night1", &src.manifest(&s1), "night 1");
    assert!(bookmark(&bms, &u1).is_file(), "night 1 left no bookmark");

    let s2 = src.night(2);
    let u2 = src.uuid(&s2);
    let j = job(&src, &dest, &bms, &s2);
    j.says(
        &[
            &format!("rsend: parent {s1} (subvolume {}", src.subvol_id(&s1)),
            "night2 is complete in",
        ],
        "night 2",
    );
    dest.check("night2", &src.manifest(&s2), "night 2");
    assert!(bookmark(&bms, &u2).is_file(), "night 2 left no bookmark");

    // Only the newest snapshot kept on the source.
    src.delete(&s1);
    src.delete(&s2);
    let s3 = src.night(3);
    let u3 = src.uuid(&s3);
    let j = job(&src, &dest, &bms, &s3);
    let picked = from_bookmark(&s2, &u2, &bms, &s3, 2);
    j.says(&[&picked, "night3 is complete in"], "night 3");
    summary.extend(j.log.lines().map(|l| format!("night 3: {l}")));
    dest.check("night3", &src.manifest(&s3), "night 3");
    let list = dest.list();
    let row = list
        .lines()
        .find(|l| l.starts_with("night3\t"))
        .unwrap_or_else(|| panic!("night 3 not listed:\n{list}"));
    assert_eq!(
        row,
        format!(
            "night3\t{u3}\t{}\t{u2}\tcomplete",
            row.split('\t').nth(2).unwrap()
        ),
        "night 3 as DEST lists it"
    );
    assert!(bookmark(&bms, &u3).is_file(), "night 3 left no bookmark");

    // A night complete in DEST whose bookmark is missing: written by the
    // next run, and good for the night after.
    std::fs::remove_file(bookmark(&bms, &u3)).unwrap();
    let j = job(&src, &dest, &bms, &s3);
    j.says(
        &[
            "night3 is complete in",
            &format!(
                "wrote the bookmark of night3 missing from {}",
                bms.display()
            ),
        ],
        "night 3 again",
    );
    assert!(
        !j.log.contains("attempt"),
        "night 3 again sent something:\n{}",
        j.log
    );
    assert!(
        bookmark(&bms, &u3).is_file(),
        "night 3 again wrote no bookmark"
    );
    summary.extend(j.log.lines().map(|l| format!("night 3 again: {l}")));
    src.delete(&s3);
    let s4 = src.night(4);
    let j = job(&src, &dest, &bms, &s4);
    let picked = from_bookmark(&s3, &u3, &bms, &s4, 3);
    j.says(&[&picked, "night4 is complete in"], "night 4");
    summary.push(format!("night 4: {picked}"));
    dest.check("night4", &src.manifest(&s4), "night 4");
    println!("{}", summary.join("\n"));
}
