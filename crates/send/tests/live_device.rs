//! rsend on a filesystem the kernel changes while rsend reads it.
//!
//! The trees of read-only snapshots stay put, but the root, checksum and
//! extent trees are copied on write at every commit and the kernel reuses
//! the blocks they leave. These tests read snapshots while that happens:
//!
//! - from the block device of a mounted filesystem under a writer that
//!   commits about ten times a second and makes and deletes snapshots,
//!   with the stream read slowly, so that each send spans ten commits or
//!   more: every stream equals the kernel's byte for byte;
//! - from an image opened before the kernel rewrote it (deterministic: the
//!   view rsend opened is many commits old, so its lookups must be read
//!   again from a newer commit), equal to the kernel's too;
//! - of a snapshot deleted, or made writable and changed, mid-send: exit
//!   code 1, a message saying so, and no END.
//!
//! Needs root, loop devices and btrfs; prints one SKIP line otherwise.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use btrfs_disk::{Filesystem, SubvolSelector, Subvolume};
use btrfs_stream::{Command as Cmd, Reader};
use rsend::send::{send_with, Change, SendError, SendOptions};
use testkit::{kernel_available, run, sh, BtrfsImage};

/// Fills subvolume `live` with `$DIRS` directories of `$FILES` files of
/// 1 to 32 KiB (unaligned sizes), two large files and a reflinked copy.
/// Between directories it writes 3 MiB into subvolume `fill`, which the
/// caller deletes after taking its snapshots: the space it frees lies
/// between the snapshot's extents, so what the writer writes later lands
/// there and rewrites the checksum and extent tree leaves a send reads.
const POPULATE: &str = r#"
btrfs -q subvolume create live
btrfs -q subvolume create fill
for d in $(seq 1 $DIRS); do
  mkdir live/d$d
  for f in $(seq 1 $FILES); do
    head -c $(( (RANDOM % 8 + 1) * 4096 - RANDOM % 3000 )) /dev/urandom > live/d$d/f$f
  done
  sync
  head -c 3M /dev/urandom > fill/x$d
  sync
done
head -c 6M /dev/urandom > live/big1
head -c 2M /dev/urandom > live/d3/big2
cp --reflink=always live/big1 live/d5/big1.copy
sync
"#;

/// What changes in `live` between the two snapshots: appends, deletions,
/// renames, a moved directory, new files and a reflinked copy.
const CHANGE: &str = r#"
for d in 2 4 6 8 10; do
  for f in 1 2 3 4 5; do head -c 5000 /dev/urandom >> live/d$d/f$f; done
  rm live/d$d/f9; mv live/d$d/f10 live/d$d/g10
done
mv live/d7 live/d7moved
mkdir live/newdir
for f in $(seq 1 40); do head -c 9000 /dev/urandom > live/newdir/n$f; done
cp --reflink=always live/d3/big2 live/newdir/big2.copy
sync
"#;

/// One round (number `$i`) of the writer: rewrites and deletes files in
/// `live` (of `DIRS` directories), replaces `SMALL` small files, then
/// commits. The small files' metadata moves the kernel's allocator on, so
/// that it soon comes round to the blocks older commits' trees used.
const ROUND: &str = r#"
  for k in 1 2 3 4 5 6 7 8; do
    d=live/d$((RANDOM % DIRS + 1))
    [ -d $d ] || continue
    head -c $(( (RANDOM % 8 + 1) * 4096 )) /dev/urandom > $d/w$((RANDOM % 100))
    rm -f $d/w$((RANDOM % 100))
  done
  mkdir -p live/many; rm -f live/many/*
  for j in $(seq 1 SMALL); do echo $i.$j > live/many/m$j; done
  btrfs filesystem sync . >/dev/null
"#;

/// Churns `live` until killed: a [`ROUND`] about ten times a second, and
/// every tenth round a snapshot taken and the one from thirty rounds
/// before deleted.
const WRITER: &str = r#"
i=0
while :; do
  i=$((i+1))
  ROUND
  if [ $((i % 10)) = 0 ]; then
    btrfs -q subvolume snapshot live w$i
    if [ -e w$((i-30)) ]; then btrfs -q subvolume delete w$((i-30)); fi
  fi
  sleep 0.05
done
"#;

/// A writer round for a `live` of `dirs` directories.
fn round(dirs: u32, small: u32) -> String {
    ROUND
        .replace("DIRS", &dirs.to_string())
        .replace("SMALL", &small.to_string())
}

/// The writer's script for a `live` of `dirs` directories.
fn writer(dirs: u32) -> String {
    WRITER.replace("ROUND", &round(dirs, 300))
}

/// The writer, killed (and waited for) when dropped, before the
/// filesystem's own guard unmounts it.
struct Busy(Child);

impl Busy {
    fn start(mnt: &Path, dirs: u32) -> Busy {
        let child = Command::new("bash")
            .process_group(0)
            .arg("-c")
            .arg(writer(dirs))
            .current_dir(mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the writer");
        // Let it get going.
        std::thread::sleep(Duration::from_millis(500));
        Busy(child)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The whole group: a `btrfs` or `head` it runs keeps the mount busy.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A filesystem holding `live` with the snapshots `snaps` taken in turn
/// (with [`CHANGE`] between the first and the second), `fill` deleted and
/// the kernel's cleaner done.
fn filesystem(size_mib: u64, dirs: u32, files: u32, snaps: &[&str]) -> BtrfsImage {
    // sha256 checksums fill eight times the leaves crc32c does: a send
    // reads more checksum tree blocks, later, from the commit it started at.
    let img = BtrfsImage::new(size_mib, &["--csum", "sha256"], "commit=1");
    let vars = format!("DIRS={dirs}; FILES={files}\n");
    sh(img.mnt(), &format!("{vars}{POPULATE}"));
    for (i, s) in snaps.iter().enumerate() {
        if i == 1 {
            sh(img.mnt(), CHANGE);
        }
        sh(
            img.mnt(),
            &format!("btrfs -q subvolume snapshot -r live {s}"),
        );
    }
    sh(
        img.mnt(),
        "btrfs -q subvolume delete fill; btrfs -q subvolume sync .",
    );
    img
}

/// The superblock generation on `dev` now: counts the commits.
fn generation(dev: &str) -> u64 {
    btrfs_disk::device::Device::open(Path::new(dev))
        .expect("read the superblock")
        .superblock()
        .generation()
}

/// What one rsend run gave.
struct Sent {
    ok: bool,
    code: Option<i32>,
    stream: Vec<u8>,
    stderr: String,
    commits: u64,
}

/// Runs `rsend -v -d DEV ARGS`, reading its stream at `rate` bytes a
/// second (as a slow link would); `during` runs once `at` bytes are read.
fn rsend_slowly(dev: &str, args: &[&str], rate: f64, at: usize, during: &mut dyn FnMut()) -> Sent {
    let g0 = generation(dev);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rsend"))
        .args(["-v", "-d", dev])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rsend");
    let mut err = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = child.stdout.take().expect("stdout");
    let (start, mut stream, mut buf) = (Instant::now(), Vec::new(), vec![0u8; 64 << 10]);
    let mut done_during = false;
    loop {
        let n = out.read(&mut buf).expect("read the stream");
        if n == 0 {
            break;
        }
        stream.extend_from_slice(&buf[..n]);
        if !done_during && stream.len() >= at {
            done_during = true;
            during();
        }
        let ahead = stream.len() as f64 / rate - start.elapsed().as_secs_f64();
        if ahead > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(ahead));
        }
    }
    let status = child.wait().expect("wait for rsend");
    Sent {
        ok: status.success(),
        code: status.code(),
        stream,
        stderr: err.join().unwrap_or_default(),
        commits: generation(dev) - g0,
    }
}

/// The retries `rsend -v` reports.
fn retries(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter_map(|l| {
            l.split(" retries in ")
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Whether the stream's last command is END.
fn ends(stream: &[u8]) -> bool {
    let mut r = Reader::from_bytes(stream);
    let mut last_end = false;
    while let Ok(Some(c)) = r.next_command() {
        last_end = matches!(c, Cmd::End {});
    }
    last_end
}

fn kernel_send(img: &BtrfsImage, args: &[&str]) -> Vec<u8> {
    run(Command::new("btrfs")
        .args(["-q", "send"])
        .args(args)
        .current_dir(img.mnt()))
    .stdout
}

#[test]
fn sends_from_a_busy_mounted_device_equal_the_kernels() {
    if !kernel_available("sends_from_a_busy_mounted_device_equal_the_kernels") {
        return;
    }
    const DIRS: u32 = 30;
    const RUNS: usize = 20;
    let img = filesystem(1024, DIRS, 100, &["s1", "s2"]);
    let dev = img.loop_device().to_owned();
    let full = kernel_send(&img, &["s1"]);
    let incr = kernel_send(&img, &["-p", "s1", "s2"]);
    let quiet = |args: &[&str]| {
        run(Command::new(env!("CARGO_BIN_EXE_rsend"))
            .args(["-q", "-d", &dev])
            .args(args))
        .stdout
    };
    // Without a writer, the streams are the kernel's: what the runs below must keep.
    assert!(
        quiet(&["s1"]) == full,
        "quiet full send differs from the kernel's"
    );
    assert!(
        quiet(&["-p", "s1", "s2"]) == incr,
        "quiet incremental send differs from the kernel's"
    );
    let _busy = Busy::start(img.mnt(), DIRS);
    let (mut total_retries, mut min_commits) = (0, u64::MAX);
    for run in 0..RUNS {
        for (args, want, secs) in [
            (&["s1"][..], &full, 5.0),
            (&["-p", "s1", "s2"][..], &incr, 3.0),
        ] {
            let rate = want.len() as f64 / secs;
            let got = rsend_slowly(&dev, args, rate, usize::MAX, &mut || {});
            assert!(got.ok, "run {run} {args:?}: rsend failed:\n{}", got.stderr);
            assert!(
                got.stream == *want,
                "run {run} {args:?}: the stream ({} bytes) differs from the kernel's ({} bytes)\n{}",
                got.stream.len(),
                want.len(),
                got.stderr
            );
            assert!(
                got.commits >= 10,
                "run {run} {args:?}: the send spanned only {} commits",
                got.commits
            );
            total_retries += retries(&got.stderr);
            min_commits = min_commits.min(got.commits);
        }
    }
    println!(
        "{} sends from the mounted device under the writer: all equal to the kernel's; each spanned {min_commits} commits or more; {total_retries} lookups read again from newer commits",
        2 * RUNS
    );
}

#[test]
fn a_snapshot_deleted_or_made_writable_mid_send_ends_without_end() {
    if !kernel_available("a_snapshot_deleted_or_made_writable_mid_send_ends_without_end") {
        return;
    }
    const DIRS: u32 = 10;
    let img = filesystem(1024, DIRS, 100, &["gone", "rw"]);
    let dev = img.loop_device().to_owned();
    let size = kernel_send(&img, &["gone"]).len();
    let _busy = Busy::start(img.mnt(), DIRS);
    let mnt = img.mnt().to_owned();
    let cases: [(&str, &str, &str); 2] = [
        (
            "gone",
            "btrfs -q subvolume delete gone; btrfs -q subvolume sync .",
            "gone (subvolume 258) was deleted",
        ),
        (
            "rw",
            "btrfs property set rw ro false; echo changed > rw/new-file; sync",
            "rw (subvolume 259) was made writable",
        ),
    ];
    for (snap, act, says) in cases {
        let got = rsend_slowly(&dev, &[snap], size as f64 / 4.0, size / 4, &mut || {
            sh(&mnt, act)
        });
        assert_eq!(got.code, Some(1), "{snap}: exit code\n{}", got.stderr);
        assert!(
            got.stderr.contains(says) && got.stderr.contains("without END"),
            "{snap}: the message does not say what happened:\n{}",
            got.stderr
        );
        assert!(!ends(&got.stream), "{snap}: the stream has an END");
        println!(
            "{snap}: exit 1 after {} of {size} bytes: {}",
            got.stream.len(),
            got.stderr.lines().last().unwrap_or_default()
        );
        assert!(
            got.stream.len() >= size / 4,
            "{snap}: the send stopped before the change"
        );
    }
}

/// Opens `img` while it is unmounted and looks up `s1` and `s2`, lets the
/// kernel rewrite it (`first`, then the writer's rounds), and returns the
/// filesystem and the snapshots as found then, many commits old.
fn open_then_churn(img: &mut BtrfsImage, first: &str) -> (Filesystem, Subvolume, Subvolume) {
    img.unmount();
    let fs = Filesystem::open(&[img.image()]).expect("open the image");
    let sel = |p: &str| {
        fs.find_subvolume(&SubvolSelector::Path(p.into()))
            .expect("find the snapshot")
    };
    let (s1, s2) = (sel("s1"), sel("s2"));
    img.mount("commit=1");
    let round = round(10, 1000);
    sh(
        img.mnt(),
        &format!("{first}; for i in $(seq 1 80); do {round} done"),
    );
    img.unmount();
    (fs, s1, s2)
}

#[test]
fn a_send_from_an_old_commit_reads_the_rewritten_trees_again() {
    if !kernel_available("a_send_from_an_old_commit_reads_the_rewritten_trees_again") {
        return;
    }
    let mut img = filesystem(512, 10, 100, &["s1", "s2"]);
    let full = kernel_send(&img, &["s1"]);
    let incr = kernel_send(&img, &["-p", "s1", "s2"]);
    // The snapshots are looked up as of the old commit; the send reads
    // their trees as they are and the global trees through the old view.
    let (fs, s1, s2) = open_then_churn(&mut img, "true");
    let opened = fs.generation();
    let send = |fs, sv, parent: Option<&_>| {
        let mut w = btrfs_stream::Writer::new(Vec::new());
        let r = send_with(fs, sv, parent, &[], &mut w, &SendOptions::default());
        (r, w.into_inner())
    };
    let (r, got) = send(&fs, &s1, None);
    r.expect("full send");
    assert!(got == full, "the full stream differs from the kernel's");
    let (r, got) = send(&fs, &s2, Some(&s1));
    r.expect("incremental send");
    assert!(
        got == incr,
        "the incremental stream differs from the kernel's"
    );
    assert!(
        fs.retries() > 0,
        "no lookup was read again, so the old view was never hit"
    );
    assert!(fs.generation() > opened, "the view never moved on");
    println!(
        "opened at generation {opened}, read as of {} at the end; {} lookups read again",
        fs.generation(),
        fs.retries()
    );
    // A snapshot of s1 copies its root block elsewhere, and the old block
    // is reused: the send finds s1's root again as of the newest commit.
    img.mount("commit=1");
    let (fs, s1, _) = open_then_churn(&mut img, "btrfs -q subvolume snapshot -r s1 s1-copy");
    // When the allocator comes round to the old block depends on the run:
    // more of the writer's rounds until it has (at most 5 x 80).
    let mut old_root = Ok(None);
    for more in 0..=5 {
        if more > 0 {
            img.mount("commit=1");
            let round = round(10, 1000);
            sh(img.mnt(), &format!("for i in $(seq 1 80); do {round} done"));
            img.unmount();
        }
        let now = Filesystem::open(&[img.image()]).expect("open the image");
        let moved = now.subvolume(s1.id).expect("s1 now").root;
        assert_ne!(moved, s1.root, "the snapshot of s1 did not move its root");
        old_root = now.tree_at(s1.id, s1.root).root_block().map(Some);
        if old_root.as_ref().is_err_and(|e| e.is_overwritten()) {
            println!("s1's old root block reused after {more} more x 80 rounds");
            break;
        }
    }
    assert!(
        old_root.as_ref().is_err_and(|e| e.is_overwritten()),
        "s1's old root block was not reused: {old_root:?}"
    );
    let (r, got) = send(&fs, &s1, None);
    r.expect("full send of s1 after its root moved");
    assert!(
        got == full,
        "the full stream of s1 after its root moved differs from the kernel's"
    );
}

#[test]
fn sending_a_snapshot_deleted_since_open_fails_without_end() {
    if !kernel_available("sending_a_snapshot_deleted_since_open_fails_without_end") {
        return;
    }
    let mut img = filesystem(512, 10, 30, &["doomed"]);
    img.unmount();
    let fs = Filesystem::open(&[img.image()]).expect("open the image");
    let doomed = fs
        .find_subvolume(&SubvolSelector::Path("doomed".into()))
        .expect("find the snapshot");
    img.mount("commit=1");
    sh(
        img.mnt(),
        "btrfs -q subvolume delete doomed; btrfs -q subvolume sync .; for i in $(seq 1 20); do head -c 1M /dev/urandom > live/x$i; sync; done",
    );
    img.unmount();
    let mut w = btrfs_stream::Writer::new(Vec::new());
    let r = send_with(&fs, &doomed, None, &[], &mut w, &SendOptions::default());
    let stream = w.into_inner();
    match r {
        Err(SendError::Changed { change, .. }) => assert!(
            matches!(change, Change::Deleted | Change::BeingDeleted),
            "{change}"
        ),
        other => panic!("expected a deleted-snapshot error, got {other:?}"),
    }
    assert!(!ends(&stream), "the stream has an END");
}
