//! The cron job, rsend-nightly (scripts/rsend-nightly), run the way cron
//! runs it, for five nights, against the real kernel (root, loop devices, the btrfs
//! module; one SKIP line otherwise, a failure under RSEND_REQUIRE_KERNEL=1).
//!
//! The source is a btrfs in an image file, mounted; subvolume `data`
//! changes every night ([`NIGHTS`]: a tree of directories, files of many
//! sizes, hard links, symlinks, xattrs and ACLs; then renames and moves of
//! files and directories, deletions, new files, writes into the middle of
//! files, truncations, a directory replaced by a file of the same name and
//! inode numbers freed and, after a remount, taken by new files of other
//! names), and then gets its read-only snapshot `snaps/nightN`. Each night
//! the job sends that snapshot from the image file (`-d IMAGE`, the
//! filesystem still mounted) into a directory on ext4 and one on btrfs,
//! and:
//!
//! - each received `DEST/nightN` equals its source snapshot
//!   (testdata/manifest.py --links: type, mode, owner, size, content,
//!   mtime and atime of every inode including the root, xattrs, symlink
//!   targets, rdev, nlink, hard-link groups; only rreceive's own
//!   `user.rreceive.*` and, on ext4, `btrfs.*` left out), right after its
//!   night and again after the fifth;
//! - night 1 is sent in full, nights 2 to 5 incrementally from the night
//!   before (rsend's `parent` line in the job's log);
//! - on night 3 the job reaches DEST over "ssh" (a fake one, [`FAKE_SSH`],
//!   that runs the command here), and the connection is cut halfway
//!   through the first stream: the job's first attempt fails, the list the
//!   second attempt reads shows night3 `resumable`, the second attempt
//!   resumes it from the point the receive recorded (the resumed stream is
//!   the rest of the stream the first attempt sent, after a short
//!   preamble, so much smaller than the whole) and the job exits 0;
//! - after night 5 `rreceive --list DEST` holds night1 to night5 complete,
//!   each with the source snapshot's uuid and its parent's, and running
//!   the job for night 5 again sends nothing.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::receivers::{listing, manifest_of_tree, rreceive_bin, Receiver};
use common::scenarios::Manifest;
use testkit::{ext4_image, kernel_available, run, BtrfsImage, LoopImage, Tmpfs};

// ---------------------------------------------------------------------------
// The nights

/// What happens to subvolume `data` on one night: `before_remount` (if
/// any), an unmount and mount of the source, then `changes`. Both run
/// with bash in `data`; `$SCRATCH` is a directory outside the filesystem,
/// where a night that frees inode numbers writes them (`freed`) and the
/// inode numbers of the new files that should take them (`taken`).
struct Night {
    before_remount: Option<&'static str>,
    changes: &'static str,
}

const NIGHTS: [Night; 5] = [
    Night {
        before_remount: None,
        changes: r#"
RANDOM=1
mkdir -p docs/a/b/c src/lib src/bin photos/2024 photos/2025 music empty-dir
for d in docs docs/a docs/a/b docs/a/b/c src/lib src/bin music; do
  for i in $(seq 1 30); do head -c $((RANDOM % 12000 + 1)) /dev/urandom > $d/f$i; done
done
for i in $(seq 1 8); do head -c $((RANDOM * 8 + 65536)) /dev/urandom > photos/2024/img$i.jpg; done
head -c 3M /dev/urandom > photos/2025/big.raw
truncate -s 5M sparse
printf 'in the middle' | dd of=sparse bs=1 seek=2097152 conv=notrunc status=none
echo tiny > tiny
: > empty-file
ln docs/f1 docs/a/hard1
ln docs/f1 src/hard2
ln -s ../docs/f2 src/link-rel
ln -s /nonexistent/target dangling
ln -s docs/a dirlink
setfattr -n user.comment -v 'night one' docs/f3
setfattr -n user.bin -v 0x00ff00 docs/a/f4
setfattr -n user.dir -v tagged docs/a
setfattr -n user.empty docs/f5
setfacl -m u:1234:rw docs/f6
setfacl -d -m u:1234:rx src
chmod 0750 src/bin
chmod 4755 src/bin/f1
chmod 0600 docs/f7
chown 1000:1000 docs/a/b/f2
chown -h 1001:1001 dangling
mkfifo music/fifo
mknod music/null c 1 3
touch -d '2001-02-03 04:05:06.123456789' docs/old
touch -h -d '1999-12-31 23:59:59' dirlink
# Made last, so they have the highest inode numbers: night 2 deletes them.
mkdir tail
for i in $(seq 1 12); do head -c $((RANDOM % 5000 + 1)) /dev/urandom > tail/t$i; done
"#,
    },
    Night {
        before_remount: Some(
            r#"
stat -c %i tail tail/* > "$SCRATCH/freed"
rm -r tail
"#,
        ),
        changes: r#"
RANDOM=2
# New names take the numbers tail/ left: a directory's goes to a file, a
# file's to a directory.
for i in $(seq 1 12); do echo "reused $i" > reused-$i; done
mkdir fresh
stat -c %i reused-* fresh > "$SCRATCH/taken"
echo 'in a reused directory' > fresh/inside
mv docs/a/b docs/b-moved
mv src/lib/f1 src/bin/f1-moved
mv src/lib/f2 src/lib/f2.renamed
mv music/f3 music/swap; mv music/f4 music/f3; mv music/swap music/f4
mv docs/a/hard1 docs/a/hard1-renamed
rm docs/b-moved/c/f1 docs/b-moved/c/f2 docs/b-moved/c/f3 music/f20 src/lib/f30
rm docs/f1
rmdir empty-dir
dd if=/dev/urandom of=photos/2025/big.raw bs=4096 seek=300 count=16 conv=notrunc status=none
truncate -s 50000 photos/2024/img1.jpg
truncate -s +1M photos/2024/img2.jpg
head -c 7000 /dev/urandom >> src/lib/f5
cp --reflink=always photos/2025/big.raw photos/big-copy
mkdir new
for i in $(seq 1 20); do head -c $((RANDOM % 20000 + 1)) /dev/urandom > new/n$i; done
setfattr -n user.comment -v 'night two' docs/f3
setfattr -x user.bin docs/a/f4
chmod 0644 docs/f7
chown 2000:2000 src/lib/f6
touch -d '2010-01-01 00:00:00' music/f10
"#,
    },
    Night {
        before_remount: None,
        changes: r#"
RANDOM=3
head -c 3M /dev/urandom > photos/2025/big-night3.raw
dd if=/dev/urandom of=photos/2025/big.raw bs=65536 seek=10 count=8 conv=notrunc status=none
# A directory replaced by a file of the same name, and a file by a directory.
rm -r photos/2024
head -c 40000 /dev/urandom > photos/2024
rm tiny
mkdir tiny
echo inner > tiny/inner
# A directory renamed, and a file (with src's default ACL) takes its name.
mv src/lib src/library
echo 'not a directory' > src/lib
# Names moved round a cycle.
mv music/f5 music/cycle; mv music/f6 music/f5; mv music/f7 music/f6; mv music/cycle music/f7
# A directory moved under its former sibling.
mv docs/b-moved docs/a/b-back
mv new/n1 new/n1.bak
rm music/f8 music/f9 docs/a/f10 docs/a/f11 docs/a/f12
truncate -s 0 docs/f8
head -c 100 /dev/urandom >> docs/a/f13
# Made last, so they have the highest inode numbers: night 4 deletes them.
mkdir late
for i in $(seq 1 10); do head -c $((RANDOM % 3000 + 1)) /dev/urandom > late/l$i; done
ln late/l1 late/l1-link
"#,
    },
    Night {
        before_remount: Some(
            r#"
stat -c %i late late/* | sort -u > "$SCRATCH/freed"
rm -r late
rm docs/f9 docs/f10
"#,
        ),
        changes: r#"
RANDOM=4
# New names elsewhere take the numbers late/ left: a symlink the
# directory's, a directory a file's.
ln -s photos/2024 reborn-link
for i in 1 2 3 4 5; do head -c $((RANDOM % 9000 + 1)) /dev/urandom > docs/a/r$i; done
mkdir music/sub
for i in 1 2 3 4; do echo "sub $i" > music/sub/s$i; done
ln docs/a/r1 music/sub/r1-link
stat -c %i reborn-link docs/a/r* music/sub music/sub/s* > "$SCRATCH/taken"
mv docs/a/b-back/c docs/c-up
mv src/bin src/library/bin
mv photos/2024 photos/2024.jpg
mv new music/new
dd if=/dev/urandom of=photos/2025/big-night3.raw bs=4096 seek=100 count=3 conv=notrunc status=none
truncate -s 1234567 photos/2025/big-night3.raw
head -c 3000 /dev/urandom | dd of=sparse bs=1 seek=4000000 conv=notrunc status=none
setfattr -n user.moved -v yes src/library/bin
rm photos/big-copy
for i in $(seq 1 15); do head -c $((RANDOM % 4000 + 1)) /dev/urandom > docs/c-up/g$i; done
"#,
    },
    Night {
        before_remount: None,
        changes: r#"
RANDOM=5
rm -r docs/a/b-back
rm src/library/f3 src/library/f4 music/new/n2 music/new/n3
# A file replaced by a symlink of the same name, a symlink by a file.
rm docs/f11
ln -s f12 docs/f11
rm dangling
echo 'was a symlink' > dangling
# A directory renamed and a new one of its old name holding some of it.
mv music music-old
mkdir music
mv music-old/f1 music-old/sub music/
truncate -s 0 photos/2025/big.raw
head -c 100000 /dev/urandom > photos/2025/big.raw
truncate -s 1M sparse
setfattr -x user.comment docs/f3
setfacl -b docs/f6
chmod 0700 docs/c-up
for i in $(seq 1 10); do head -c $((RANDOM % 6000 + 1)) /dev/urandom > music/m$i; done
"#,
    },
];

// ---------------------------------------------------------------------------
// The source

/// The source filesystem: subvolume `data`, snapshots in `snaps/`.
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

    fn mnt(&self) -> &Path {
        self.fs.mnt()
    }

    /// Night `n`'s changes (1-based); the inode numbers it freed and the
    /// ones its new files took, when it frees some.
    fn change(&mut self, n: usize) -> Option<(BTreeSet<u64>, BTreeSet<u64>)> {
        let night = &NIGHTS[n - 1];
        let scratch = self.fs.scratch().join(format!("night{n}"));
        std::fs::create_dir_all(&scratch).unwrap();
        let data = self.fs.mnt().join("data");
        let bash = |script: &str| {
            run(Command::new("bash")
                .args(["-euo", "pipefail", "-c", script])
                .current_dir(&data)
                .env("SCRATCH", &scratch));
        };
        if let Some(script) = night.before_remount {
            bash(script);
            self.fs.remount("");
        }
        bash(night.changes);
        let numbers = |f: &str| -> BTreeSet<u64> {
            std::fs::read_to_string(scratch.join(f))
                .unwrap()
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect()
        };
        night
            .before_remount
            .map(|_| (numbers("freed"), numbers("taken")))
    }

    /// Takes the read-only snapshot `snaps/nightN` of `data` and syncs, so
    /// that the image file holds it; its path from the top level.
    fn snapshot(&self, n: usize) -> String {
        let snap = format!("snaps/night{n}");
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(self.mnt().join("data"))
            .arg(self.mnt().join(&snap)));
        run(&mut Command::new("sync"));
        snap
    }

    /// The uuid of the subvolume at `path` (from the top level).
    fn uuid(&self, path: &str) -> String {
        let out = run(Command::new("btrfs")
            .args(["subvolume", "show"])
            .arg(self.mnt().join(path)));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("UUID:"))
            .map(|u| u.trim().to_owned())
            .unwrap_or_else(|| panic!("btrfs subvolume show {path}: no UUID line"))
    }

    /// The subvolume id of the subvolume at `path` (from the top level).
    fn subvol_id(&self, path: &str) -> u64 {
        let out = run(Command::new("btrfs")
            .args(["subvolume", "show"])
            .arg(self.mnt().join(path)));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("Subvolume ID:"))
            .and_then(|u| u.trim().parse().ok())
            .unwrap_or_else(|| panic!("btrfs subvolume show {path}: no Subvolume ID line"))
    }

    /// rsend's stream of `snap` with parent `parent`, written to a file.
    fn stream(&self, parent: &str, snap: &str) -> Vec<u8> {
        let file = self.fs.scratch().join("stream");
        run(Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-q")
            .arg("-d")
            .arg(self.image())
            .args(["-p", parent, "-f"])
            .arg(&file)
            .arg(snap));
        let s = std::fs::read(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        s
    }

    /// The size `rsend -n --parent-from -` gives for `snap` with `list`
    /// (`rreceive --list` output) on its standard input, and its stderr.
    fn dry_run(&self, list: &str, snap: &str) -> (u64, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-d")
            .arg(self.image())
            .args(["-n", "--parent-from", "-", snap])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(list.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "rsend -n failed: {stderr}");
        let size = stdout
            .lines()
            .find_map(|l| l.strip_prefix("size\t"))
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("rsend -n printed no size line:\n{stdout}"));
        (size, stderr)
    }
}

// ---------------------------------------------------------------------------
// The destinations and the fake ssh

/// The filesystem a destination is on, unmounted when dropped.
enum DestFs {
    Ext4(LoopImage),
    Btrfs(BtrfsImage),
}

/// A backup destination: `DEST` on its own filesystem, and a fake ssh
/// that reaches it.
struct Destination {
    receiver: Receiver,
    dir: PathBuf,
    ssh: FakeSsh,
    _fs: DestFs,
}

impl Destination {
    fn new(receiver: Receiver) -> Destination {
        let fs = match receiver {
            Receiver::RreceiveExt4 => DestFs::Ext4(ext4_image(512, &[], "noatime")),
            _ => DestFs::Btrfs(BtrfsImage::new(512, &[], "noatime")),
        };
        let mnt = match &fs {
            DestFs::Ext4(f) => f.mnt(),
            DestFs::Btrfs(f) => f.mnt(),
        };
        let dir = mnt.join("backup");
        std::fs::create_dir(&dir).unwrap();
        Destination {
            receiver,
            dir,
            ssh: FakeSsh::new(),
            _fs: fs,
        }
    }

    fn label(&self) -> &'static str {
        self.receiver.label()
    }

    /// `rreceive --list DEST`.
    fn list(&self, rreceive: &Path) -> String {
        let out = run(Command::new(rreceive).arg("--list").arg(&self.dir));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Panics unless `DEST/<name>` equals the snapshot `want` describes.
    fn check_tree(&self, name: &str, want: &Manifest, when: &str) {
        let got = self.dir.join(name);
        if let Err(d) = self.receiver.compare_received(want, &got, false) {
            panic!(
                "{} {when}: {name} differs from its source snapshot: {d}\n  {} holds:\n{}",
                self.label(),
                got.display(),
                listing(&got)
            );
        }
    }
}

/// `ssh HOST COMMAND` as far as the job needs it: runs COMMAND with bash
/// here. It numbers and keeps every command (N.cmd), what `--list` and
/// `--resume-token` printed (N.out, exit code in N.rc) and the stream
/// each receive got (N.stream); when the file `cut` exists it removes it
/// and cuts that receive's stream after the number of bytes it holds, as a
/// dropped connection would (the sender gets EPIPE, the receiver EOF).
const FAKE_SSH: &str = r#"#!/bin/bash
set -u
dir=$(cd "$(dirname "$0")" && pwd)
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$dir/count"
printf '%s\n' "$2" > "$dir/$n.cmd"
case $2 in
    *--list*|*--resume-token*|*--delete-incomplete*)
        bash -c "$2" > "$dir/$n.out"
        rc=$?
        echo $rc > "$dir/$n.rc"
        cat "$dir/$n.out"
        exit $rc
        ;;
esac
if [ -e "$dir/cut" ]; then
    limit=$(cat "$dir/cut")
    rm "$dir/cut"
    head -c "$limit" | tee "$dir/$n.stream" | bash -c "$2"
elif [ -e "$dir/corrupt" ]; then
    read -r at stored < "$dir/corrupt"
    rm "$dir/corrupt"
    perl -e 'binmode STDIN; binmode STDOUT; my ($at, $n) = (shift, 0);
        while (my $got = read(STDIN, my $b, 65536)) {
            if ($at >= $n && $at < $n + $got) {
                substr($b, $at - $n, 1) = chr(ord(substr($b, $at - $n, 1)) ^ 0xff);
            }
            $n += $got; print $b;
        }' "$at" > "$dir/$n.flipped"
    if [ "$stored" = stored ]; then
        # Stored on the host first, then received from the file.
        cp "$dir/$n.flipped" "$dir/$n.stream"
        bash -c "$2 -f $dir/$n.stream" < /dev/null
    else
        tee "$dir/$n.stream" < "$dir/$n.flipped" | bash -c "$2"
    fi
else
    tee "$dir/$n.stream" | bash -c "$2"
fi
"#;

struct FakeSsh {
    dir: tempfile::TempDir,
}

/// One command the fake ssh ran.
struct Call {
    command: String,
    output: Option<(String, i32)>,
    stream: Option<Vec<u8>>,
}

impl FakeSsh {
    fn new() -> FakeSsh {
        let dir = tempfile::Builder::new()
            .prefix("rsend-fake-ssh-")
            .tempdir()
            .unwrap();
        let prog = dir.path().join("fake-ssh");
        std::fs::write(&prog, FAKE_SSH).unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeSsh { dir }
    }

    fn program(&self) -> PathBuf {
        self.dir.path().join("fake-ssh")
    }

    /// Flips the byte at `at` of the next receive's stream.
    /// Flips the byte at `at` of the next receive's stream, on the way
    /// (`stored`: false) or in a stream file the host stored and then
    /// receives with `-f`.
    fn corrupt_next_receive(&self, at: u64, stored: bool) {
        let how = if stored { "stored" } else { "pipe" };
        std::fs::write(self.dir.path().join("corrupt"), format!("{at} {how}\n")).unwrap();
    }

    /// Cuts the next receive's stream after `bytes`.
    fn cut_next_receive(&self, bytes: u64) {
        std::fs::write(self.dir.path().join("cut"), bytes.to_string()).unwrap();
    }

    /// Every command it ran, in order.
    fn calls(&self) -> Vec<Call> {
        let p = |n: usize, ext: &str| self.dir.path().join(format!("{n}.{ext}"));
        let count: usize = std::fs::read_to_string(self.dir.path().join("count"))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0);
        (1..=count)
            .map(|n| Call {
                command: std::fs::read_to_string(p(n, "cmd")).unwrap(),
                output: std::fs::read_to_string(p(n, "out")).ok().map(|o| {
                    let rc = std::fs::read_to_string(p(n, "rc")).unwrap();
                    (o, rc.trim().parse().unwrap())
                }),
                stream: std::fs::read(p(n, "stream")).ok(),
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// The job

/// What one run of rsend-nightly did.
struct Job {
    code: Option<i32>,
    log: String,
}

impl Job {
    /// Panics, showing the log, unless the log has a line containing `what`.
    fn says(&self, what: &str, context: &str) {
        assert!(
            self.log.lines().any(|l| l.contains(what)),
            "{context}: the job's log has no line with {what:?}:\n{}",
            self.log
        );
    }

    fn never_says(&self, what: &str, context: &str) {
        assert!(
            !self.log.contains(what),
            "{context}: the job's log says {what:?}:\n{}",
            self.log
        );
    }
}

/// scripts/rsend-nightly -w 0 -d IMAGE SNAP DEST [HOST], with the
/// rsend of this build and `rreceive`; over the destination's fake ssh
/// when `over_ssh`.
fn nightly_backup(
    src: &Source,
    snap: &str,
    dest: &Destination,
    rreceive: &Path,
    over_ssh: bool,
) -> Job {
    let ssh = over_ssh.then_some(&dest.ssh);
    run_job(src.image(), snap, &dest.dir, rreceive, ssh, &[])
}

/// scripts/rsend-nightly -w 0 EXTRA -d IMAGE SNAP DIR [HOST], HOST
/// reached with `ssh`.
fn run_job(
    image: &Path,
    snap: &str,
    dir: &Path,
    rreceive: &Path,
    ssh: Option<&FakeSsh>,
    extra: &[&str],
) -> Job {
    let mut cmd = Command::new(nightly_script());
    cmd.args(["-w", "0"])
        .args(extra)
        .arg("-d")
        .arg(image)
        .arg(snap)
        .arg(dir)
        .env("RSEND", env!("CARGO_BIN_EXE_rsend"))
        .env("RRECEIVE", rreceive)
        .env_remove("SSH")
        .current_dir("/")
        .stdin(Stdio::null());
    if let Some(ssh) = ssh {
        cmd.arg("backup-host").env("SSH", ssh.program());
    }
    let out = cmd.output().unwrap();
    Job {
        code: out.status.code(),
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Night 3 onto `dest`: the job over the fake ssh, the first stream cut
/// after half its bytes; checks the job resumed it. Returns a summary.
fn night_with_a_cut(src: &Source, dest: &Destination, rreceive: &Path) -> String {
    let what = format!("{} night3", dest.label());
    // What the job's first attempt will send: rsend -n with the list it
    // will read, and the stream itself.
    let (size, dry_log) = src.dry_run(&dest.list(rreceive), "snaps/night3");
    assert!(
        dry_log.contains("rsend: parent snaps/night2 (subvolume"),
        "{what}: rsend -n --parent-from picked another parent: {dry_log}"
    );
    let full = src.stream("snaps/night2", "snaps/night3");
    assert_eq!(
        full.len() as u64,
        size,
        "{what}: rsend -n said {size} bytes, the stream has {}",
        full.len()
    );
    let cut = size / 2;
    dest.ssh.cut_next_receive(cut);

    let job = nightly_backup(src, "snaps/night3", dest, rreceive, true);
    assert_eq!(job.code, Some(0), "{what}: the job failed:\n{}", job.log);
    job.says("attempt 1: sending night3", &what);
    job.says("rsend: parent snaps/night2 (subvolume", &what);
    job.says(
        "attempt 1 stopped (rreceive exit 3): it can go on later",
        &what,
    );
    job.says("stopped after command", &what);
    job.says("attempt 2: resuming night3", &what);
    job.says("night3 is complete in", &what);
    job.never_says("attempt 3", &what);

    let calls = dest.ssh.calls();
    let show = || {
        calls
            .iter()
            .map(|c| format!("  {}", c.command.trim_end()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let streams: Vec<&Vec<u8>> = calls.iter().filter_map(|c| c.stream.as_ref()).collect();
    assert_eq!(
        streams.len(),
        2,
        "{what}: two receives wanted, the fake ssh ran:\n{}",
        show()
    );
    let (first, resumed) = (streams[0], streams[1]);
    assert!(
        first.len() as u64 == cut && first[..] == full[..cut as usize],
        "{what}: the cut receive got {} bytes, not the first {cut} of rsend -p snaps/night2",
        first.len()
    );

    // The list the second attempt read: night3 there, resumable.
    let lists: Vec<&str> = calls
        .iter()
        .filter(|c| c.command.contains("--list"))
        .filter_map(|c| c.output.as_ref().map(|(o, _)| o.as_str()))
        .collect();
    assert_eq!(lists.len(), 2, "{what}: two lists wanted:\n{}", show());
    let status = |list: &str| {
        list.lines()
            .find(|l| l.split('\t').next() == Some("night3"))
            .and_then(|l| l.split('\t').nth(4))
            .map(str::to_owned)
    };
    assert_eq!(status(lists[0]), None, "{what}: first list:\n{}", lists[0]);
    assert_eq!(
        status(lists[1]).as_deref(),
        Some("resumable"),
        "{what}: the list after the cut:\n{}",
        lists[1]
    );

    // The token the resume used, and the resumed stream: the rest of the
    // first attempt's stream from the token's offset.
    let token = calls
        .iter()
        .filter(|c| c.command.contains("--resume-token"))
        .filter_map(|c| c.output.as_ref())
        .find(|(_, rc)| *rc == 0)
        .map(|(o, _)| o.trim().to_owned())
        .unwrap_or_else(|| panic!("{what}: no --resume-token succeeded:\n{}", show()));
    let fields: Vec<&str> = token.split(':').collect();
    assert!(
        fields.len() == 9 && fields[0] == "rsend1",
        "{what}: resume token {token:?}"
    );
    assert_eq!(fields[1], src.uuid("snaps/night3"), "{what}: token {token}");
    assert_eq!(fields[3], src.uuid("snaps/night2"), "{what}: token {token}");
    let offset: u64 = fields[7].parse().unwrap();
    assert!(
        offset <= cut && cut - offset < 1 << 20,
        "{what}: the receive stopped at byte {offset} of the {cut} it got"
    );
    assert!(
        resumed.starts_with(b"rsend-resume\0"),
        "{what}: the resumed stream starts {:?}",
        &resumed[..resumed.len().min(16)]
    );
    let rest = &full[offset as usize..];
    let preamble = resumed.len() as i64 - rest.len() as i64;
    assert!(
        resumed.ends_with(rest) && (0..4096).contains(&preamble),
        "{what}: the resumed stream ({} bytes) is not a short preamble and the {} bytes of \
         the stream after byte {offset}",
        resumed.len(),
        rest.len()
    );
    assert!(resumed.len() < full.len() * 3 / 4);
    format!(
        "{}: night3 stream {size} bytes, cut after {cut}, receive stopped at byte {offset}, \
         resumed with {} bytes",
        dest.label(),
        resumed.len()
    )
}

/// Panics unless `rreceive --list` of `dest` names night1 to night5
/// complete, each with its source snapshot's uuid and its parent's.
fn check_list(src: &Source, dest: &Destination, rreceive: &Path) {
    let list = dest.list(rreceive);
    assert!(
        list.ends_with("\n# end of list: 5 subvolumes\n"),
        "{}: rreceive --list ends with its end line:\n{list}",
        dest.label()
    );
    let rows: Vec<Vec<&str>> = list
        .lines()
        .filter(|l| l.contains('\t'))
        .map(|l| l.split('\t').collect())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        ["night1", "night2", "night3", "night4", "night5"],
        "{}: rreceive --list:\n{list}",
        dest.label()
    );
    for (k, row) in rows.iter().enumerate() {
        let n = k + 1;
        let parent = match n {
            1 => "-".to_owned(),
            _ => src.uuid(&format!("snaps/night{}", n - 1)),
        };
        assert!(
            row.len() == 5
                && row[1] == src.uuid(&format!("snaps/night{n}"))
                && row[3] == parent
                && row[4] == "complete",
            "{}: rreceive --list line {n} wants received uuid {}, parent {parent}, complete:\n{list}",
            dest.label(),
            src.uuid(&format!("snaps/night{n}"))
        );
    }
}

// ---------------------------------------------------------------------------
// The test

#[test]
fn five_nights_of_the_cron_job_onto_ext4_and_btrfs_resume_a_cut_connection() {
    let test = "five_nights_of_the_cron_job_onto_ext4_and_btrfs_resume_a_cut_connection";
    if !kernel_available(test) {
        return;
    }
    let started = Instant::now();
    let rreceive = rreceive_bin();
    let mut src = Source::new();
    let dests = [
        Destination::new(Receiver::RreceiveExt4),
        Destination::new(Receiver::RreceiveBtrfs),
    ];
    let mut wants: Vec<Manifest> = Vec::new();
    let mut summary = Vec::new();
    for n in 1..=NIGHTS.len() {
        if let Some((freed, taken)) = src.change(n) {
            let reused = freed.intersection(&taken).count();
            assert!(
                reused * 2 >= freed.len(),
                "night {n}: new files took {reused} of the {} inode numbers freed \
                 (freed {freed:?}, new {taken:?})",
                freed.len()
            );
            summary.push(format!(
                "night{n}: new files took {reused} of {} freed inode numbers",
                freed.len()
            ));
        }
        let snap = src.snapshot(n);
        let name = format!("night{n}");
        wants.push(manifest_of_tree(&src.mnt().join(&snap)));
        for dest in &dests {
            let what = format!("{} {name}", dest.label());
            if n == 3 {
                summary.push(night_with_a_cut(&src, dest, &rreceive));
            } else {
                let job = nightly_backup(&src, &snap, dest, &rreceive, false);
                assert_eq!(job.code, Some(0), "{what}: the job failed:\n{}", job.log);
                job.says(&format!("attempt 1: sending {name}"), &what);
                job.says(&format!("{name} is complete in"), &what);
                job.never_says("failed", &what);
                if n == 1 {
                    job.says(
                        "rsend: the destination holds none of this filesystem's snapshots \
                         complete (0 listed there): sending snaps/night1 (subvolume",
                        &what,
                    );
                } else {
                    job.says(
                        &format!("rsend: parent snaps/night{} (subvolume", n - 1),
                        &what,
                    );
                }
            }
            dest.check_tree(&name, &wants[n - 1], &format!("after night {n}"));
        }
    }
    for dest in &dests {
        for (k, want) in wants.iter().enumerate() {
            dest.check_tree(&format!("night{}", k + 1), want, "after night 5");
        }
        check_list(&src, dest, &rreceive);
        let what = format!("{} night5 again", dest.label());
        let job = nightly_backup(&src, "snaps/night5", dest, &rreceive, false);
        assert_eq!(job.code, Some(0), "{what}: the job failed:\n{}", job.log);
        job.says("night5 is complete in", &what);
        job.never_says("attempt", &what);
    }
    println!(
        "{}\nfive nights onto ext4 and btrfs in {:.1?}",
        summary.join("\n"),
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------
// A full disk and a stream that would fail again

/// A destination on a tmpfs whose size a test sets, reached over a fake ssh.
struct SmallDest {
    fs: Tmpfs,
    dir: PathBuf,
    ssh: FakeSsh,
}

impl SmallDest {
    fn new() -> SmallDest {
        // As the other destinations: reading a tree to compare it must not
        // change its atimes.
        let fs = Tmpfs::new(512, "noatime");
        let dir = fs.mnt().join("backup");
        std::fs::create_dir(&dir).unwrap();
        SmallDest {
            fs,
            dir,
            ssh: FakeSsh::new(),
        }
    }

    /// Limits the tmpfs to twice what it holds (room for a copy of the
    /// one subvolume it holds) and `spare` KiB.
    fn squeeze(&self, spare: u64) {
        let st = nix::sys::statvfs::statvfs(self.fs.mnt()).unwrap();
        let used = (st.blocks() - st.blocks_free()) * st.fragment_size() / 1024;
        run(Command::new("mount")
            .args(["-o", &format!("remount,size={}k", 2 * used + spare)])
            .arg(self.fs.mnt()));
    }

    fn grow(&self) {
        run(Command::new("mount")
            .args(["-o", "remount,size=512m"])
            .arg(self.fs.mnt()));
    }

    fn check_tree(&self, name: &str, want: &Manifest, when: &str) {
        let got = self.dir.join(name);
        if let Err(d) = Receiver::RreceiveExt4.compare_received(want, &got, false) {
            panic!("{when}: {name} differs from its source snapshot: {d}");
        }
    }

    /// The receives (commands with a stream) the fake ssh ran so far.
    fn receives(&self) -> usize {
        self.ssh
            .calls()
            .iter()
            .filter(|c| c.stream.is_some())
            .count()
    }
}

/// Five nights of the job over ssh onto two small destinations, one run
/// with --delete-incomplete: night 2 meets a full disk (a stop that can go
/// on, but not within minutes: no retry within the run though the default
/// 3 attempts are allowed, and the next run resumes it once there is
/// room), night 4 a byte corrupted on the way (a stop the resume does not
/// meet again: the next run resumes it), night 5 a corrupt stream file
/// stored on the host (a stop that would happen again: never retried;
/// with --delete-incomplete the partial subvolume is deleted and sent
/// again at once, without it the log says what to delete, and after that
/// the next run sends it again). Every night ends with each snapshot equal
/// to its source.
#[test]
fn the_job_resumes_a_full_disk_and_never_retries_what_would_fail_again() {
    let test = "the_job_resumes_a_full_disk_and_never_retries_what_would_fail_again";
    if !kernel_available(test) {
        return;
    }
    let rreceive = rreceive_bin();
    let mut src = Source::new();
    let dests = [(SmallDest::new(), true), (SmallDest::new(), false)];
    let mut wants: Vec<Manifest> = Vec::new();
    for n in 1..=NIGHTS.len() {
        src.change(n);
        let snap = src.snapshot(n);
        let name = format!("night{n}");
        wants.push(manifest_of_tree(&src.mnt().join(&snap)));
        for (dest, delete) in &dests {
            let what = format!("night {n}, --delete-incomplete {delete}");
            let extra: &[&str] = if *delete {
                &["-r", "1", "--delete-incomplete"]
            } else {
                &["-r", "1"]
            };
            let job = |extra: &[&str]| {
                run_job(
                    src.image(),
                    &snap,
                    &dest.dir,
                    &rreceive,
                    Some(&dest.ssh),
                    extra,
                )
            };
            match n {
                2 => {
                    // The parent's copy fits, the night's changes do not:
                    // the disk is full, which the minutes to a retry do
                    // not mend, so one attempt though 3 are allowed.
                    dest.squeeze(16);
                    let before = dest.receives();
                    let j = job(&extra[2..]);
                    assert_eq!(j.code, Some(1), "{what}: {}", j.log);
                    j.says("No space left on device", &what);
                    j.says("attempt 1 stopped (rreceive exit 3): ", &what);
                    j.says(
                        "is full; not retried in this run: make room, and the next run resumes it",
                        &what,
                    );
                    j.never_says("attempt 2", &what);
                    j.never_says("cannot be resumed", &what);
                    assert_eq!(dest.receives(), before + 1, "{what}: {}", j.log);
                    dest.grow();
                    let j = job(extra);
                    assert_eq!(j.code, Some(0), "{what}: {}", j.log);
                    j.says(&format!("attempt 1: resuming {name}"), &what);
                }
                4 => {
                    dest.ssh.corrupt_next_receive(40_000, false);
                    let before = dest.receives();
                    let j = job(extra);
                    assert_eq!(j.code, Some(1), "{what}: {}", j.log);
                    j.says("corrupted in transit", &what);
                    j.says("attempt 1 stopped (rreceive exit 3): ", &what);
                    j.never_says("cannot be resumed", &what);
                    j.never_says("deleting it", &what);
                    assert_eq!(dest.receives(), before + 1, "{what}: {}", j.log);
                    // The next run resumes it.
                    let j = job(extra);
                    assert_eq!(j.code, Some(0), "{what}: {}", j.log);
                    j.says(&format!("attempt 1: resuming {name}"), &what);
                }
                5 => {
                    dest.ssh.corrupt_next_receive(40_000, true);
                    let before = dest.receives();
                    let j = job(extra);
                    j.says("retrying would fail the same way", &what);
                    j.says("the stream file is corrupt", &what);
                    if *delete {
                        assert_eq!(j.code, Some(0), "{what}: {}", j.log);
                        j.says("deleting it (--delete-incomplete) to send it again", &what);
                        assert_eq!(dest.receives(), before + 2, "{what}: {}", j.log);
                    } else {
                        assert_eq!(j.code, Some(1), "{what}: {}", j.log);
                        j.says(
                            &format!(
                                "cannot be resumed (rreceive exit 1): delete it (ssh backup-host \
                                 rreceive --delete-incomplete {}/{name})",
                                dest.dir.display()
                            ),
                            &what,
                        );
                        assert_eq!(dest.receives(), before + 1, "{what}: {}", j.log);
                        // The next run, before anyone deleted it, sends
                        // nothing and says the same.
                        let j = job(extra);
                        assert_eq!(j.code, Some(1), "{what}: {}", j.log);
                        j.says("cannot be resumed (", &what);
                        j.says("the stream file is corrupt", &what);
                        assert_eq!(dest.receives(), before + 1, "{what}: {}", j.log);
                        // What the log said to run, then the next run.
                        run(Command::new(&rreceive)
                            .arg("--delete-incomplete")
                            .arg(dest.dir.join(&name)));
                        let j = job(extra);
                        assert_eq!(j.code, Some(0), "{what}: {}", j.log);
                    }
                }
                _ => {
                    let j = job(extra);
                    assert_eq!(j.code, Some(0), "{what}: {}", j.log);
                }
            }
            dest.check_tree(&name, &wants[n - 1], &what);
        }
    }
    for (dest, delete) in &dests {
        for (k, want) in wants.iter().enumerate() {
            dest.check_tree(
                &format!("night{}", k + 1),
                want,
                &format!("after night 5, --delete-incomplete {delete}"),
            );
        }
    }
}

// ---------------------------------------------------------------------------
// What the job passes to rsend and rreceive, and a copy that cannot fit

/// scripts/rsend-nightly in this checkout.
fn nightly_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rsend-nightly")
}

/// Bytes in use on the filesystem that holds `path`.
fn used_bytes(path: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(path).unwrap();
    (st.blocks() - st.blocks_free()) * st.fragment_size()
}

/// The inode number of `path`.
fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

/// Panics unless `rsend -d IMAGE --verify DIR --ignore IGNORE SNAP` finds
/// the copy in DIR equal to the snapshot.
fn verify(image: &Path, dir: &Path, ignore: &str, snap: &str, what: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_rsend"))
        .arg("-d")
        .arg(image)
        .arg("--verify")
        .arg(dir)
        .args(["--ignore", ignore, snap])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{what}: rsend --verify {} {snap}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The lines of a job's log that start an attempt.
fn attempts(job: &Job) -> usize {
    job.log
        .lines()
        .filter(|l| l.contains(" attempt "))
        .filter(|l| l.contains(": sending ") || l.contains(": resuming "))
        .count()
}

/// 36 MiB in 18 files of 2 MiB, and 200 small ones (one with a second
/// name).
const LARGE_TREE: &str = r#"
mkdir big small
for i in $(seq 1 18); do head -c 2M /dev/urandom > big/b$i; done
for i in $(seq 1 200); do echo "small $i" > small/s$i; done
ln small/s1 small/s1-link
"#;

/// Nights 2 and 3 of [`LARGE_TREE`]: a few hundred KiB of changes each.
const LARGE_TREE_NIGHTS: [&str; 2] = [
    r#"
head -c 300000 /dev/urandom >> big/b1
echo new > small/new
mv small/s2 small/s2-renamed
rm small/s3
"#,
    r#"
dd if=/dev/urandom of=big/b2 bs=4096 seek=10 count=4 conv=notrunc status=none
echo changed > small/s4
mkdir small/sub
mv small/s5 small/sub/
"#,
];

/// Onto ext4 (no reflinks) an incremental receive without --link or
/// --in-place starts from a whole copy of its parent. A 64 MiB ext4 holds
/// night 1 (36 MiB) but not a copy of it:
///
/// - without either flag the job meets rreceive's refusal ("a copy of
///   parent night1 needs ...: too little space", exit 3) once, though 3
///   attempts are allowed (a retry minutes later could not fit either),
///   exits 1, says to pass --link or --in-place, and leaves nothing; the
///   same night with --link then goes through;
/// - with --link (over ssh: the receive's command line holds it) nights 2
///   and 3 each take a few MiB, not the 36 a copy takes, their unchanged
///   files are the parent's inodes, and each equals its snapshot (but for
///   link counts);
/// - with --in-place the parent's directory becomes the new snapshot (the
///   parent is gone, its unchanged files keep their inodes), a few MiB
///   each night, and each equals its snapshot.
#[test]
fn link_and_in_place_go_to_rreceive_and_a_copy_that_cannot_fit_is_tried_once() {
    let test = "link_and_in_place_go_to_rreceive_and_a_copy_that_cannot_fit_is_tried_once";
    if !kernel_available(test) {
        return;
    }
    let rreceive = rreceive_bin();
    let src = Source::new();
    let data = src.mnt().join("data");
    testkit::sh(&data, LARGE_TREE);
    let mut snaps = vec![src.snapshot(1)];
    for (k, night) in LARGE_TREE_NIGHTS.iter().enumerate() {
        testkit::sh(&data, night);
        snaps.push(src.snapshot(k + 2));
    }
    let parent_bytes = 36 << 20;
    let copy = ext4_image(64, &[], "noatime");
    let linked = ext4_image(64, &[], "noatime");
    let in_place = ext4_image(64, &[], "noatime");
    let ssh = FakeSsh::new();
    let dir = |fs: &LoopImage| fs.mnt().join("backup");
    for fs in [&copy, &linked, &in_place] {
        std::fs::create_dir(dir(fs)).unwrap();
    }
    let job = |fs: &LoopImage, n: usize, ssh: Option<&FakeSsh>, extra: &[&str]| {
        let j = run_job(src.image(), &snaps[n - 1], &dir(fs), &rreceive, ssh, extra);
        (j, format!("night{n} {extra:?}"))
    };

    // Night 1 in full, then night 2 without --link or --in-place: refused
    // once, nothing left.
    let (j, what) = job(&copy, 1, None, &[]);
    assert_eq!(j.code, Some(0), "{what}: {}", j.log);
    let before = used_bytes(copy.mnt());
    let (j, what) = job(&copy, 2, None, &[]);
    assert_eq!(j.code, Some(1), "{what}: {}", j.log);
    assert_eq!(attempts(&j), 1, "{what}: one attempt wanted:\n{}", j.log);
    j.says("a copy of parent night1 needs", &what);
    j.says("too little space", &what);
    j.says("attempt 1: the copy of the parent does not fit in", &what);
    j.says("not retried in this run: pass --link or --in-place", &what);
    j.never_says("after 3 attempts", &what);
    assert!(!dir(&copy).join("night2").exists(), "{what}: {}", j.log);
    assert!(
        used_bytes(copy.mnt()) < before + (1 << 20),
        "{what}: {} bytes more in use",
        used_bytes(copy.mnt()) - before
    );
    // Night 1, in full, onto the others, with their flag.
    for (fs, ssh, extra) in [
        (&linked, Some(&ssh), &["--link"][..]),
        (&in_place, None, &["--in-place"][..]),
    ] {
        let (j, what) = job(fs, 1, ssh, extra);
        assert_eq!(j.code, Some(0), "{what}: {}", j.log);
    }
    for fs in [&copy, &linked, &in_place] {
        verify(
            src.image(),
            &dir(fs).join("night1"),
            "flags",
            "snaps/night1",
            "night1",
        );
    }
    // What the log says to do.
    let (j, what) = job(&copy, 2, None, &["--link"]);
    assert_eq!(j.code, Some(0), "{what}: {}", j.log);
    verify(
        src.image(),
        &dir(&copy).join("night2"),
        "flags,links",
        "snaps/night2",
        &what,
    );

    for n in 2..=3 {
        let parent = format!("night{}", n - 1);
        let name = format!("night{n}");
        let snap = format!("snaps/{name}");

        // --link, over ssh.
        let before = used_bytes(linked.mnt());
        let calls_before = ssh.calls().len();
        let (j, what) = job(&linked, n, Some(&ssh), &["--link"]);
        assert_eq!(j.code, Some(0), "{what}: {}", j.log);
        assert_eq!(attempts(&j), 1, "{what}: {}", j.log);
        j.says(&format!("rsend: parent snaps/{parent} (subvolume"), &what);
        let calls = ssh.calls();
        let receive = calls[calls_before..]
            .iter()
            .find(|c| c.stream.is_some())
            .unwrap_or_else(|| panic!("{what}: no receive over ssh"));
        assert!(
            receive.command.split_whitespace().any(|w| w == "--link"),
            "{what}: the receive ran {}",
            receive.command
        );
        let grew = used_bytes(linked.mnt()) - before;
        assert!(
            grew < 8 << 20 && grew * 4 < parent_bytes,
            "{what}: {grew} bytes more in use, as for a copy of the {parent_bytes} of {parent}"
        );
        println!("{what}: {grew} bytes more in use");
        // (A file with two names is copied, to keep its names a group of
        // their own.)
        for f in ["big/b10", "small/s100"] {
            assert_eq!(
                inode(&dir(&linked).join(&name).join(f)),
                inode(&dir(&linked).join(&parent).join(f)),
                "{what}: {f} is not {parent}'s {f} linked"
            );
        }
        verify(
            src.image(),
            &dir(&linked).join(&name),
            "flags,links",
            &snap,
            &what,
        );
        verify(
            src.image(),
            &dir(&linked).join(&parent),
            "flags,links",
            &format!("snaps/{parent}"),
            &what,
        );

        // --in-place.
        let before = used_bytes(in_place.mnt());
        let inodes: Vec<u64> = ["big/b10", "small/s100"]
            .iter()
            .map(|f| inode(&dir(&in_place).join(&parent).join(f)))
            .collect();
        let (j, what) = job(&in_place, n, None, &["--in-place"]);
        assert_eq!(j.code, Some(0), "{what}: {}", j.log);
        assert_eq!(attempts(&j), 1, "{what}: {}", j.log);
        assert!(
            !dir(&in_place).join(&parent).exists(),
            "{what}: {parent} is still there: not received in place"
        );
        for (f, ino) in ["big/b10", "small/s100"].iter().zip(inodes) {
            assert_eq!(
                inode(&dir(&in_place).join(&name).join(f)),
                ino,
                "{what}: {f} is not {parent}'s"
            );
        }
        let grew = used_bytes(in_place.mnt()).saturating_sub(before);
        assert!(
            grew < 8 << 20 && grew * 4 < parent_bytes,
            "{what}: {grew} bytes more in use, as for a copy of the {parent_bytes} of {parent}"
        );
        println!("{what}: {grew} bytes more in use");
        verify(
            src.image(),
            &dir(&in_place).join(&name),
            "flags",
            &snap,
            &what,
        );
    }
}

/// The other flags a backup host may need go through as well, over ssh:
/// --proto 2 and --compressed-data to rsend (the stream the receive got
/// is of version 2), --fake-super, --force-decompress and --plain to
/// rreceive (the owner the stream gives a file is recorded in
/// user.rreceive.stat, not applied), --plain to rreceive --list too.
#[test]
fn the_send_and_receive_flags_go_through() {
    let test = "the_send_and_receive_flags_go_through";
    if !kernel_available(test) {
        return;
    }
    let rreceive = rreceive_bin();
    let src = Source::new();
    let data = src.mnt().join("data");
    testkit::sh(
        &data,
        "echo hello > owned && chown 1234:2345 owned && head -c 100000 /dev/urandom > data",
    );
    let snap = src.snapshot(1);
    let dest = SmallDest::new();
    let flags = [
        "--proto",
        "2",
        "--compressed-data",
        "--fake-super",
        "--force-decompress",
        "--plain",
    ];
    let j = run_job(
        src.image(),
        &snap,
        &dest.dir,
        &rreceive,
        Some(&dest.ssh),
        &flags,
    );
    assert_eq!(j.code, Some(0), "{}", j.log);
    let calls = dest.ssh.calls();
    let words =
        |c: &Call| -> Vec<String> { c.command.split_whitespace().map(str::to_owned).collect() };
    let receive = calls
        .iter()
        .find(|c| c.stream.is_some())
        .expect("a receive over ssh");
    for flag in ["--fake-super", "--force-decompress", "--plain"] {
        assert!(
            words(receive).iter().any(|w| w == flag),
            "no {flag} in the receive: {}",
            receive.command
        );
    }
    let list = calls
        .iter()
        .find(|c| c.command.contains("--list"))
        .expect("a --list over ssh");
    assert!(
        words(list).iter().any(|w| w == "--plain"),
        "{}",
        list.command
    );
    let stream = receive.stream.as_ref().unwrap();
    assert!(
        stream.len() > 17 && stream.starts_with(b"btrfs-stream\0"),
        "the stream starts {:?}",
        &stream[..stream.len().min(17)]
    );
    assert_eq!(
        u32::from_le_bytes(stream[13..17].try_into().unwrap()),
        2,
        "the stream's version"
    );
    let owned = dest.dir.join("night1/owned");
    let o = run(Command::new("getfattr")
        .args(["--only-values", "-n", "user.rreceive.stat"])
        .arg(&owned));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "100644 0,0 1234:2345",
        "user.rreceive.stat of {}",
        owned.display()
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&owned).unwrap().uid(), 0);
}

// ---------------------------------------------------------------------------
// The installed command

/// scripts/install.sh installs rsend-nightly beside rsend and rreceive,
/// with its man page. Under cron's environment (`env -i
/// PATH=/usr/bin:/bin`: neither PREFIX/bin nor the tools on PATH) the
/// installed command, run by its full path, prints its help on standard
/// output (exit 0) and refuses a wrong command line (exit 2); where the
/// kernel is usable it backs up a snapshot in full and then incrementally
/// into a directory, with the rsend and rreceive installed beside it.
#[test]
fn install_sh_installs_rsend_nightly_which_runs_under_crons_path() {
    let test = "install_sh_installs_rsend_nightly_which_runs_under_crons_path";
    let dir = tempfile::Builder::new()
        .prefix("rsend-nightly-install-")
        .tempdir()
        .unwrap();
    let prefix = common::receivers::install_sh_into(dir.path());
    let bin = prefix.join("bin");
    let nightly = bin.join("rsend-nightly");
    assert!(
        std::fs::read(&nightly).ok() == std::fs::read(nightly_script()).ok(),
        "{} is missing, or is not scripts/rsend-nightly",
        nightly.display()
    );
    let mode = std::fs::metadata(&nightly).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "{}", nightly.display());

    // As cron runs it.
    let cron = |args: &[&std::ffi::OsStr]| {
        Command::new("env")
            .args(["-i", "PATH=/usr/bin:/bin"])
            .arg(&nightly)
            .args(args)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let help = cron(&["--help".as_ref()]);
    assert_eq!(help.status.code(), Some(0), "--help: {help:?}");
    assert!(help.stderr.is_empty(), "--help: {}", text(&help.stderr));
    let help = text(&help.stdout);
    assert!(
        help.contains(
            "\nUsage: rsend-nightly [OPTIONS] -d DEVICE [-d DEVICE...] SNAPSHOT DEST [HOST]\n"
        ) && help.contains("\nExit status:\n  0  "),
        "--help:\n{help}"
    );
    let short = cron(&["-h".as_ref()]);
    assert_eq!(short.status.code(), Some(0));
    assert_eq!(text(&short.stdout), help, "-h and --help differ");
    for args in [
        &[][..],
        &["--bogus".as_ref()][..],
        &["snaps/x".as_ref(), "/tmp".as_ref()][..],
    ] {
        let o = cron(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
        assert!(
            text(&o.stderr).contains("\nusage: rsend-nightly [OPTIONS] -d DEVICE"),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }

    // Its man page: each option of --help in OPTIONS, the sections man
    // pages have, rendered by man without a warning.
    let page = prefix.join("share/man/man1/rsend-nightly.1");
    let roff = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    assert_eq!(roff, text(&cron(&["--man".as_ref()]).stdout));
    let options = help
        .split_once("\nOptions:\n")
        .and_then(|(_, rest)| rest.split_once("\n\n"))
        .map(|(o, _)| o)
        .unwrap_or_else(|| panic!("no Options in --help:\n{help}"));
    let mut flags = 0;
    for line in options.lines().filter(|l| l.starts_with("  -")) {
        // The option and its value, before the description.
        let spec = line[2..].split("  ").next().unwrap();
        for flag in spec.split_whitespace().filter(|w| w.starts_with('-')) {
            flags += 1;
            let flag = flag.trim_end_matches(',');
            let roffed = format!("\\fB{}\\fR", flag.replace('-', "\\-"));
            assert!(roff.contains(&roffed), "the man page has no {roffed}");
        }
    }
    assert!(flags >= 14, "{flags} flags in --help's Options:\n{options}");
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "EXAMPLES",
        "\"EXIT STATUS\"",
        "\"SEE ALSO\"",
    ] {
        assert!(
            roff.contains(&format!("\n.SH {section}\n")),
            "the man page has no {section}"
        );
    }
    if Command::new("man").arg("--version").output().is_ok() {
        let out = testkit::man_render(&page);
        assert!(out.status.success(), "man -l: {out:?}");
        assert!(out.stderr.is_empty(), "man -l: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("\nEXIT STATUS\n"));
    }

    if !kernel_available(test) {
        return;
    }
    // The installed rsend and rreceive leave a mark, to show that they are
    // the ones the command ran.
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    for tool in ["rsend", "rreceive"] {
        std::fs::rename(bin.join(tool), bin.join(format!("{tool}.real"))).unwrap();
        let wrapper = format!(
            "#!/bin/sh\n: > '{}/{tool}'\nexec \"$(dirname \"$0\")/{tool}.real\" \"$@\"\n",
            marks.display()
        );
        std::fs::write(bin.join(tool), wrapper).unwrap();
        std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let src = Source::new();
    let data = src.mnt().join("data");
    testkit::sh(&data, "echo one > a && mkdir d && echo two > d/b");
    let night1 = src.snapshot(1);
    testkit::sh(&data, "echo three > c && rm a && mv d/b d/b2");
    let night2 = src.snapshot(2);
    let dest = dir.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    for (n, snap) in [(1, &night1), (2, &night2)] {
        let o = cron(&[
            "-w".as_ref(),
            "0".as_ref(),
            "-d".as_ref(),
            src.image().as_os_str(),
            snap.as_ref(),
            dest.as_os_str(),
        ]);
        let log = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "night{n}: {log}");
        assert!(
            log.contains(&format!("night{n} is complete in")),
            "night{n}: {log}"
        );
        if n == 2 {
            assert!(
                log.contains("rsend: parent snaps/night1 (subvolume"),
                "night{n}: {log}"
            );
        }
        verify(
            src.image(),
            &dest.join(format!("night{n}")),
            "flags",
            snap,
            &format!("night{n}"),
        );
    }
    for tool in ["rsend", "rreceive"] {
        assert!(
            marks.join(tool).exists(),
            "the installed {tool} did not run"
        );
    }
    let list = text(&run(Command::new(rreceive_bin()).arg("--list").arg(&dest)).stdout);
    let complete: Vec<&str> = list
        .lines()
        .filter(|l| l.ends_with("\tcomplete"))
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(complete, ["night1", "night2"], "{list}");
}

// ---------------------------------------------------------------------------
// Which parent, with two subvolumes

/// `RSEND -d IMAGE ARGS...` with `input` on standard input.
fn rsend_with(image: &Path, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rsend"))
        .arg("-d")
        .arg(image)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
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

/// Two subvolumes, `data` and `other`, snapshotted in turns into `snaps/`
/// (data.1, other.1, data.2, other.2, data.3, other.3: the newest snapshot
/// of the filesystem is never of the subvolume sent), and `restore`, a
/// writable snapshot of snaps/data.1 changed and snapshotted as
/// snaps/restore.1: of data's lineage through data.1, though no snapshot
/// of data itself. The destination (on btrfs) holds data.1, other.1,
/// data.2 and other.2, received by rreceive.
///
/// - `--parent-from` sends data.3 against data.2, other.3 against other.2
///   and restore.1 against data.2 (its lineage), as `-p` would, each stream
///   received; `--parent-any` sends all three against other.2, the newest;
/// - `-c` without `-p` picks the parent among the clone sources within the
///   lineage too: restore.1 against data.1 (btrfs send gives up there), and
///   a clone source of another subvolume only is refused;
/// - `rreceive --list` shows an incremental whose parent is gone from the
///   destination with `?` as its parent (JSON: `"incremental": true`,
///   `"parent_uuid": null`), and a full one with `-`.
#[test]
fn parent_from_keeps_each_subvolume_to_its_own_snapshots() {
    let test = "parent_from_keeps_each_subvolume_to_its_own_snapshots";
    if !kernel_available(test) {
        return;
    }
    let rreceive = rreceive_bin();
    let src = Source::new();
    testkit::sh(
        src.mnt(),
        r#"
btrfs -q subvolume create other
for n in 1 2 3; do
    head -c 200000 /dev/urandom > data/file$n
    btrfs -q subvolume snapshot -r data snaps/data.$n
    head -c 200000 /dev/urandom > other/file$n
    btrfs -q subvolume snapshot -r other snaps/other.$n
done
btrfs -q subvolume snapshot snaps/data.1 restore
echo restored > restore/note
btrfs -q subvolume snapshot -r restore snaps/restore.1
sync
"#,
    );
    let dest = Destination::new(Receiver::RreceiveBtrfs);
    let receive = |stream: &[u8], what: &str| {
        use std::io::Write;
        let mut child = Command::new(&rreceive)
            .arg("-q")
            .arg(&dest.dir)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stream).unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "receiving {what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let send = |args: &[&str]| {
        let o = rsend_with(src.image(), args, b"");
        assert!(
            o.status.success(),
            "rsend {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    };
    for (parent, snap) in [
        (None, "data.1"),
        (None, "other.1"),
        (Some("data.1"), "data.2"),
        (Some("other.1"), "other.2"),
    ] {
        let snap = format!("snaps/{snap}");
        let stream = match parent {
            Some(p) => send(&["-q", "-p", &format!("snaps/{p}"), &snap]),
            None => send(&["-q", &snap]),
        };
        receive(&stream, &snap);
    }
    let list = dest.list(&rreceive);
    assert!(
        list.ends_with("\n# end of list: 4 subvolumes\n"),
        "rreceive --list:\n{list}"
    );
    let uuid = |snap: &str| src.uuid(&format!("snaps/{snap}"));
    let newest = "the newest of this filesystem's snapshots the destination holds complete, \
                  of any subvolume (4 listed there; --parent-any)";
    let same = |snap: &str| {
        format!(
            "of the same subvolume as snaps/{snap}, the newest older snapshot the destination \
             holds complete (4 listed there)"
        )
    };
    let lineage = "of the same lineage (linked by snapshots and receives) as snaps/restore.1, \
                   the newest older snapshot the destination holds complete (4 listed there)";
    // snapshot, --parent-any, the parent wanted, why
    let cases = [
        ("data.3", false, "data.2", same("data.3")),
        ("other.3", false, "other.2", same("other.3")),
        ("restore.1", false, "data.2", lineage.to_string()),
        ("data.3", true, "other.2", newest.to_string()),
        ("other.3", true, "other.2", newest.to_string()),
        ("restore.1", true, "other.2", newest.to_string()),
    ];
    let mut summary = Vec::new();
    for (snap, any, want, why) in cases {
        let what = format!("{snap}{}", if any { " --parent-any" } else { "" });
        let mut args = vec!["--parent-from", "-"];
        if any {
            args.push("--parent-any");
        }
        let path = format!("snaps/{snap}");
        args.push(&path);
        let o = rsend_with(src.image(), &args, list.as_bytes());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{what}: {err}");
        let said = format!(
            "rsend: parent snaps/{want} (subvolume {}",
            src.subvol_id(&format!("snaps/{want}"))
        );
        assert!(
            err.starts_with(&said) && err.lines().next().is_some_and(|l| l.ends_with(&why)),
            "{what}: wants {said}...: {why}, said:\n{err}"
        );
        assert_eq!(
            stream_parent(&o.stdout).as_deref(),
            Some(uuid(want).as_str()),
            "{what}: the stream's SNAPSHOT"
        );
        let by_hand = send(&["-q", "-p", &format!("snaps/{want}"), &path]);
        assert!(
            o.stdout == by_hand,
            "{what}: not the stream of -p snaps/{want}"
        );
        if !any {
            receive(&o.stdout, &what);
        }
        summary.push(format!("{what}: parent {want}, {} bytes", o.stdout.len()));
    }

    // -c without -p: within the lineage as well.
    let o = rsend_with(
        src.image(),
        &[
            "-q",
            "-c",
            "snaps/other.2",
            "-c",
            "snaps/data.1",
            "snaps/restore.1",
        ],
        b"",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stream_parent(&o.stdout).as_deref(),
        Some(uuid("data.1").as_str()),
        "-c other.2 -c data.1 restore.1: the parent picked"
    );
    let o = rsend_with(
        src.image(),
        &["-q", "-c", "snaps/other.2", "snaps/data.3"],
        b"",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "-c other.2 data.3: {err}");
    assert!(
        err.contains("parent determination failed for snaps/data.3"),
        "-c other.2 data.3: {err}"
    );
    assert!(o.stdout.is_empty());

    // data.2's parent gone from the destination: its parent is unknown,
    // not none.
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "delete"])
        .arg(dest.dir.join("data.1")));
    let list = dest.list(&rreceive);
    let parent_of = |name: &str| {
        list.lines()
            .find(|l| l.split('\t').next() == Some(name))
            .and_then(|l| l.split('\t').nth(3))
            .map(str::to_owned)
    };
    assert_eq!(parent_of("data.2").as_deref(), Some("?"), "{list}");
    assert_eq!(parent_of("other.1").as_deref(), Some("-"), "{list}");
    assert_eq!(parent_of("other.2"), Some(uuid("other.1")), "{list}");
    let json = run(Command::new(&rreceive)
        .args(["--list", "--json"])
        .arg(&dest.dir))
    .stdout;
    let json = String::from_utf8_lossy(&json);
    let objects: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let by_name = |name: &str| {
        objects
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {json}"))
    };
    let data2 = by_name("data.2");
    assert!(
        data2["incremental"] == true && data2["parent_uuid"].is_null(),
        "{data2}"
    );
    let other1 = by_name("other.1");
    assert!(
        other1["incremental"] == false && other1["parent_uuid"].is_null(),
        "{other1}"
    );
    assert_eq!(
        objects.last(),
        Some(&serde_json::json!({"end": true, "subvolumes": objects.len() - 1})),
        "{json}"
    );
    println!("{}", summary.join("\n"));
}
