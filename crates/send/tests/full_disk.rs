//! A destination that fills up, every night of a chain: rreceive stops
//! under the command that met ENOSPC, exits 3, `--resume-token` gives a
//! token, and after room is made the resumed receive goes on, stops again
//! where the room ends, and so on until the subvolume is complete and
//! equal to its snapshot (testdata/manifest.py --links).
//!
//! Root, loop devices and the btrfs module (one SKIP line otherwise, a
//! failure under RSEND_REQUIRE_KERNEL=1). The source is a btrfs image
//! made here: 2,400 small files in 30 directories (so that new files are
//! created in batches and finished on other threads, where an ENOSPC
//! surfaces under a later command), a large file with a hard link and a
//! reflink, a sparse file, xattrs, a symlink, owners and a set-uid mode;
//! then renames of directories and files, a removed directory, new files
//! and a write into the large file. Destinations: tmpfs limited by size
//! and by inodes, ext4 and xfs filled by a filler file (or by empty files,
//! for inodes), each freed bit by bit.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::receivers::{manifest_of_tree, rreceive_bin, Receiver};
use common::scenarios::Manifest;
use testkit::{ext4_image, kernel_available, run, sh, xfs_image, BtrfsImage, LoopImage, Tmpfs};

/// The source: a btrfs image with snapshots `snaps/s1` and `snaps/s2` of
/// subvolume `data`, and their manifests.
struct Source {
    img: BtrfsImage,
    want: [Manifest; 2],
}

const TREE: &str = r#"
btrfs -q subvolume create data
mkdir snaps
cd data
for d in $(seq 1 30); do
    mkdir -p d$d/sub
    for f in $(seq 1 80); do
        head -c $(( (d * 131 + f * 977) % 6000 )) /dev/urandom > d$d/f$f
    done
    echo sub > d$d/sub/s
done
head -c 3M /dev/urandom > big
ln big big.link
cp --reflink=always big big.clone
truncate -s 40M sparse
echo x | dd of=sparse bs=1 seek=30M conv=notrunc status=none
setfattr -n user.a -v 1 d1/f1
ln -s d1/f1 sym
chown 1000:1000 d2/f2
chmod 4755 d3/f3
cd ..
btrfs -q subvolume snapshot -r data snaps/s1
cd data
mv d1 d1moved
mv d2/f1 d3/f1b
rm -r d4
for f in $(seq 1 60); do head -c 3000 /dev/urandom > d5/new$f; done
dd if=/dev/urandom of=big bs=1k count=200 seek=10 conv=notrunc status=none
mkdir d6/x
mv d7 d6/x/
cd ..
btrfs -q subvolume snapshot -r data snaps/s2
"#;

impl Source {
    fn new() -> Source {
        let img = BtrfsImage::new(512, &[], "");
        sh(img.mnt(), TREE);
        let want = [
            manifest_of_tree(&img.mnt().join("snaps/s1")),
            manifest_of_tree(&img.mnt().join("snaps/s2")),
        ];
        Source { img, want }
    }

    /// `rsend -q -d IMAGE ARGS -f OUT`.
    fn send(&self, args: &[&str], out: &Path) {
        run(Command::new(env!("CARGO_BIN_EXE_rsend"))
            .arg("-q")
            .arg("-d")
            .arg(self.img.image())
            .args(args)
            .arg("-f")
            .arg(out));
    }
}

/// How room is taken away from a destination and given back.
trait Room {
    /// The directory to receive into.
    fn dest(&self) -> &Path;
    /// Leaves about `bytes` free (or `inodes`, for an inode-limited one).
    fn squeeze(&mut self, bytes: u64, inodes: u64);
    /// Gives a step more room: `fine`, a small one.
    fn grow(&mut self, fine: bool);
    fn label(&self) -> String;
}

fn statvfs(p: &Path) -> nix::sys::statvfs::Statvfs {
    nix::sys::statvfs::statvfs(p).unwrap()
}

/// A tmpfs limited by size (`inodes`: false) or by inodes.
struct TmpfsRoom {
    fs: Tmpfs,
    dest: PathBuf,
    inodes: bool,
    limit: u64,
}

impl TmpfsRoom {
    fn new(inodes: bool) -> TmpfsRoom {
        let fs = Tmpfs::new(256, "");
        let dest = fs.mnt().join("backup");
        std::fs::create_dir(&dest).unwrap();
        TmpfsRoom {
            fs,
            dest,
            inodes,
            limit: 0,
        }
    }

    fn apply(&self) {
        let o = if self.inodes {
            format!("remount,nr_inodes={}", self.limit)
        } else {
            format!("remount,size={}k", self.limit / 1024)
        };
        run(Command::new("mount").args(["-o", &o]).arg(self.fs.mnt()));
    }
}

impl Room for TmpfsRoom {
    fn dest(&self) -> &Path {
        &self.dest
    }
    fn squeeze(&mut self, bytes: u64, inodes: u64) {
        let st = statvfs(self.fs.mnt());
        self.limit = if self.inodes {
            (st.files() - st.files_free()) + inodes
        } else {
            (st.blocks() - st.blocks_free()) * st.fragment_size() + bytes
        };
        self.apply();
    }
    fn grow(&mut self, fine: bool) {
        self.limit += match (self.inodes, fine) {
            (true, false) => 400,
            (true, true) => 40,
            (false, false) => 2 << 20,
            (false, true) => 256 << 10,
        };
        self.apply();
    }
    fn label(&self) -> String {
        format!("tmpfs {}", if self.inodes { "nr_inodes" } else { "size" })
    }
}

/// ext4 or xfs, filled by a filler file (`inodes`: by empty files).
struct FillerRoom {
    fs: LoopImage,
    fstype: &'static str,
    dest: PathBuf,
    inodes: bool,
    fillers: u64,
}

impl FillerRoom {
    fn new(fstype: &'static str, inodes: bool) -> FillerRoom {
        let fs = match fstype {
            // Few inodes: filling them takes a few thousand files.
            "ext4" if inodes => ext4_image(256, &["-N", "6000", "-m", "0"], ""),
            "ext4" => ext4_image(256, &["-m", "0"], ""),
            _ => xfs_image(300, ""),
        };
        let dest = fs.mnt().join("backup");
        std::fs::create_dir(&dest).unwrap();
        std::fs::create_dir(fs.mnt().join("filler")).unwrap();
        FillerRoom {
            fs,
            fstype,
            dest,
            inodes,
            fillers: 0,
        }
    }
    fn filler(&self) -> PathBuf {
        self.fs.mnt().join("filler")
    }
}

impl Room for FillerRoom {
    fn dest(&self) -> &Path {
        &self.dest
    }
    fn squeeze(&mut self, bytes: u64, inodes: u64) {
        // All room back first, then all but what is asked for taken.
        let _ = std::fs::remove_dir_all(self.filler());
        std::fs::create_dir(self.filler()).unwrap();
        self.fillers = 0;
        run(&mut Command::new("sync"));
        if self.inodes {
            let st = statvfs(self.fs.mnt());
            let take = st.files_free().saturating_sub(inodes);
            for i in self.fillers..self.fillers + take {
                std::fs::File::create(self.filler().join(i.to_string())).unwrap();
            }
            self.fillers += take;
        } else {
            run(&mut Command::new("sync"));
            let st = statvfs(self.fs.mnt());
            let free = st.blocks_available() * st.fragment_size();
            let n = self.fillers;
            self.fillers += 1;
            // xfs keeps some of what statfs calls free: take less until
            // it fits.
            let mut len = free.saturating_sub(bytes).max(4096);
            while !Command::new("fallocate")
                .args(["-l", &len.to_string()])
                .arg(self.filler().join(n.to_string()))
                .status()
                .unwrap()
                .success()
            {
                len = len.saturating_sub(64 << 10);
                assert!(len > 0, "fallocate of a filler failed");
            }
        }
        run(&mut Command::new("sync"));
    }
    fn grow(&mut self, fine: bool) {
        if self.inodes {
            for _ in 0..(if fine { 40 } else { 400 }).min(self.fillers) {
                self.fillers -= 1;
                let _ = std::fs::remove_file(self.filler().join(self.fillers.to_string()));
            }
        } else {
            // Give back some of the filler.
            let step: u64 = if fine { 256 << 10 } else { 2 << 20 };
            let f = self.filler().join((self.fillers.max(1) - 1).to_string());
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            run(Command::new("truncate")
                .args(["-s", &len.saturating_sub(step).to_string()])
                .arg(&f));
        }
        run(&mut Command::new("sync"));
    }
    fn label(&self) -> String {
        format!(
            "{} {}",
            self.fstype,
            if self.inodes { "inodes" } else { "space" }
        )
    }
}

/// A btrfs whose data (`metadata`: false) or metadata is filled by filler
/// files: fallocated ones of [`BtrfsRoom::DATA`] bytes for data, inline
/// ones of [`BtrfsRoom::INLINE`] bytes for metadata (with the data nearly
/// full first, so that no unallocated space is left to grow metadata
/// into). The profile of the filled kind is single or DUP.
struct BtrfsRoom {
    fs: BtrfsImage,
    dest: PathBuf,
    metadata: bool,
    dup: bool,
    /// Filler files of each kind: (data, metadata).
    fillers: (u64, u64),
}

impl BtrfsRoom {
    const DATA: u64 = 256 << 10;
    const INLINE: usize = 1800;

    fn new(metadata: bool, dup: bool) -> BtrfsRoom {
        let profile = if dup { "dup" } else { "single" };
        let args = if metadata {
            ["-m", profile, "-d", "single"]
        } else {
            ["-d", profile, "-m", "dup"]
        };
        let fs = BtrfsImage::new(if dup { 384 } else { 256 }, &args, "");
        let dest = fs.mnt().join("backup");
        std::fs::create_dir(&dest).unwrap();
        BtrfsRoom {
            fs,
            dest,
            metadata,
            dup,
            fillers: (0, 0),
        }
    }

    fn filler(&self, meta: bool, i: u64) -> PathBuf {
        self.fs
            .mnt()
            .join(if meta { "filler-m" } else { "filler-d" })
            .join(i.to_string())
    }

    /// Adds data fillers until the data is full.
    fn fill_data(&mut self) {
        loop {
            let f = self.filler(false, self.fillers.0);
            let ok = Command::new("fallocate")
                .args(["-l", &Self::DATA.to_string()])
                .arg(&f)
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
                .success();
            if !ok {
                let _ = std::fs::remove_file(&f);
                break;
            }
            self.fillers.0 += 1;
        }
    }

    /// Adds metadata fillers until the metadata is full.
    fn fill_metadata(&mut self) {
        let body = vec![b'm'; Self::INLINE];
        while std::fs::write(self.filler(true, self.fillers.1), &body).is_ok() {
            self.fillers.1 += 1;
        }
        let _ = std::fs::remove_file(self.filler(true, self.fillers.1));
    }

    /// Removes `n` fillers of a kind, every other one first (so that no
    /// block group empties and goes back to unallocated space), then
    /// commits.
    fn free(&mut self, meta: bool, n: u64) {
        let mut left = n;
        for pass in [1, 0] {
            let count = if meta { self.fillers.1 } else { self.fillers.0 };
            let mut i = pass;
            while left > 0 && i < count {
                if std::fs::remove_file(self.filler(meta, i)).is_ok() {
                    left -= 1;
                }
                i += 2;
            }
        }
        run(&mut Command::new("sync"));
    }
}

impl Room for BtrfsRoom {
    fn dest(&self) -> &Path {
        &self.dest
    }
    fn squeeze(&mut self, bytes: u64, _inodes: u64) {
        for meta in [false, true] {
            let dir = self.filler(meta, 0).parent().unwrap().to_owned();
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap();
        }
        self.fillers = (0, 0);
        run(&mut Command::new("sync"));
        self.fill_data();
        run(&mut Command::new("sync"));
        if self.metadata {
            // Room for the data of what is received (~20 MiB), then the
            // metadata filled but for about `bytes`.
            self.free(false, (48 << 20) / Self::DATA);
            self.fill_metadata();
            run(&mut Command::new("sync"));
            self.free(true, bytes / 2048);
        } else {
            self.free(false, bytes.div_ceil(Self::DATA));
        }
    }
    fn grow(&mut self, fine: bool) {
        if self.metadata {
            self.free(true, if fine { 250 } else { 600 });
        } else {
            self.free(false, if fine { 1 } else { 8 });
        }
    }
    fn label(&self) -> String {
        format!(
            "btrfs {} {}",
            if self.metadata { "metadata" } else { "data" },
            if self.dup { "DUP" } else { "single" }
        )
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Receives `stream` (a file) as `name` into `room`, growing it after each
/// stop and resuming, until the receive completes. Returns the number of
/// stops.
fn receive_through_stops(
    src: &Source,
    room: &mut dyn Room,
    send_args: &[&str],
    name: &str,
    scratch: &Path,
    fine: bool,
) -> Result<usize, String> {
    let file = scratch.join("stream");
    src.send(send_args, &file);
    let sv = room.dest().join(name);
    for stops in 0.. {
        let o = Command::new(rreceive_bin())
            .arg("-q")
            .arg("-f")
            .arg(&file)
            .arg(room.dest())
            .output()
            .unwrap();
        let err = text(&o.stderr);
        if o.status.success() {
            return Ok(stops);
        }
        if stops > 400 {
            return Err(format!("still stopping after {stops} stops: {err}"));
        }
        if o.status.code() != Some(3)
            || (sv.exists() && !err.contains("stopped after command"))
            || (!sv.exists() && !err.contains("receive the same stream again"))
        {
            return Err(format!(
                "stop {}: exit {:?}, not 3 (stopped, resumable): {err}",
                stops + 1,
                o.status.code()
            ));
        }
        if ![
            "ENOSPC",
            "No space left",
            "too little space",
            "too few inodes",
        ]
        .iter()
        .any(|w| err.contains(w))
        {
            return Err(format!("stop {}: not for ENOSPC: {err}", stops + 1));
        }
        room.grow(fine);
        if !sv.exists() {
            // A snapshot's copy of its parent did not fit, or the disk
            // was full before the first command was recorded: nothing is
            // left, and the same stream is received again.
            if !err.contains("SNAPSHOT") && !err.contains("SUBVOL") {
                return Err(format!("stop {}: no {name} left: {err}", stops + 1));
            }
            continue;
        }
        let t = Command::new(rreceive_bin())
            .arg("--resume-token")
            .arg(&sv)
            .output()
            .unwrap();
        if !t.status.success() {
            return Err(format!(
                "stop {}: {err}\n--resume-token: {}",
                stops + 1,
                text(&t.stderr)
            ));
        }
        let token = text(&t.stdout).trim().to_owned();
        let mut args = vec!["--resume", token.as_str()];
        args.extend_from_slice(send_args);
        src.send(&args, &file);
        // Where the stop left commands after its point applied, a receive
        // killed while going over them resumes the same way again.
        let side: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        let side = std::fs::read_to_string(room.dest().join(format!(".rreceive-resume-{side}")))
            .unwrap_or_default();
        let field = |key: &str| {
            side.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::to_owned)
        };
        let until = field("applied\t").and_then(|v| v.parse::<u64>().ok());
        let point = field("point\t").and_then(|v| v.split(':').nth(1)?.parse::<u64>().ok());
        if let (Some(until), Some(point)) = (until, point) {
            if until > point && REPLAY_KILLS.load(Ordering::Relaxed) < 6 {
                // RESUME and the SUBVOL or SNAPSHOT come first.
                let at = 3 + (until - point) / 2;
                let o = Command::new(rreceive_bin())
                    .arg("-q")
                    .arg("-f")
                    .arg(&file)
                    .arg(room.dest())
                    .env("RRECEIVE_TEST_KILL", format!("{at}:0"))
                    .output()
                    .unwrap();
                if o.status.code().is_some() {
                    return Err(format!(
                        "stop {}: the receive to kill at {at} ended: {}",
                        stops + 1,
                        text(&o.stderr)
                    ));
                }
                let t = Command::new(rreceive_bin())
                    .arg("--resume-token")
                    .arg(&sv)
                    .output()
                    .unwrap();
                if text(&t.stdout).trim() != token {
                    return Err(format!(
                        "stop {}: killed at {at}, inside what the stop had applied \
                         ({point}..{until}): --resume-token gives {:?} {}, not {token}",
                        stops + 1,
                        text(&t.stdout),
                        text(&t.stderr)
                    ));
                }
                REPLAY_KILLS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    unreachable!()
}

/// Receives killed while going over what a stop had applied.
static REPLAY_KILLS: AtomicUsize = AtomicUsize::new(0);

fn check(room: &dyn Room, name: &str, want: &Manifest) -> Result<(), String> {
    Receiver::RreceiveExt4
        .compare_received(want, &room.dest().join(name), false)
        .map(|_| ())
        .map_err(|d| format!("{name} differs from its snapshot: {d}"))
}

/// The chain s1 (full), s2 (incremental) into `room`, each receive
/// starting with little room; the number of stops of each.
fn chain(src: &Source, room: &mut dyn Room) -> Result<(usize, usize), String> {
    let scratch = tempfile::tempdir().unwrap();
    // The full tree needs ~20 MiB and ~2,500 inodes.
    room.squeeze(3 << 20, 300);
    let a = receive_through_stops(src, room, &["snaps/s1"], "s1", scratch.path(), false)?;
    // s1 is compared at the end: reading a directory sets its atime, which
    // the copy s2 starts from would carry.
    // Off btrfs a snapshot copies its parent: with no room left, the copy
    // does not fit at first, then the room grows in small steps, so that
    // the receive stops again after the copy.
    room.squeeze(0, 0);
    let b = receive_through_stops(
        src,
        room,
        &["-p", "snaps/s1", "snaps/s2"],
        "s2",
        scratch.path(),
        true,
    )?;
    check(room, "s2", &src.want[1])?;
    check(room, "s1", &src.want[0])?;
    Ok((a, b))
}

#[test]
fn a_destination_that_fills_up_stops_resumably_and_resumes_to_the_snapshot() {
    if !kernel_available("a_destination_that_fills_up_stops_resumably_and_resumes_to_the_snapshot")
    {
        return;
    }
    let src = Source::new();
    let mut rooms: Vec<Box<dyn Room>> = vec![
        Box::new(TmpfsRoom::new(false)),
        Box::new(TmpfsRoom::new(true)),
        Box::new(FillerRoom::new("ext4", false)),
        Box::new(FillerRoom::new("ext4", true)),
        Box::new(FillerRoom::new("xfs", false)),
    ];
    let failures = chains(&src, &mut rooms);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let kills = REPLAY_KILLS.load(Ordering::Relaxed);
    println!("{kills} resumed receives killed while going over what a stop had applied");
    assert!(kills > 0, "no stop left commands after its point applied");
}

/// On btrfs (copy on write: overwriting a file's blocks needs new ones),
/// with its data or its metadata full, single or DUP: where the stop
/// point is recorded needs no new space, so every stop resumes.
#[test]
fn a_full_btrfs_destination_stops_resumably_and_resumes_to_the_snapshot() {
    if !kernel_available("a_full_btrfs_destination_stops_resumably_and_resumes_to_the_snapshot") {
        return;
    }
    let src = Source::new();
    let mut rooms: Vec<Box<dyn Room>> = vec![
        Box::new(BtrfsRoom::new(false, false)),
        Box::new(BtrfsRoom::new(false, true)),
        Box::new(BtrfsRoom::new(true, false)),
        Box::new(BtrfsRoom::new(true, true)),
    ];
    let failures = chains(&src, &mut rooms);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs [`chain`] into each room; what failed.
fn chains(src: &Source, rooms: &mut [Box<dyn Room>]) -> Vec<String> {
    let mut failures = Vec::new();
    for room in rooms.iter_mut() {
        let label = room.label();
        match chain(src, room.as_mut()) {
            Ok((a, b)) => {
                println!("{label}: s1 stopped {a} time(s), s2 {b} time(s), both exact");
                if a < 2 {
                    failures.push(format!("{label}: s1 stopped only {a} time(s)"));
                }
            }
            Err(e) => failures.push(format!("{label}: {e}")),
        }
    }
    failures
}

/// A receive killed outright resumes from its journal, but not once its
/// destination was unmounted since: what the page cache held may not have
/// reached the disk (a power cut looks the same), so the journal is not
/// trusted: without durable checkpoints --resume-token says why, and
/// deleted, it is received again; with them it resumes from the last one.
#[test]
fn a_journal_is_not_trusted_once_the_destination_was_unmounted() {
    if !kernel_available("a_journal_is_not_trusted_once_the_destination_was_unmounted") {
        return;
    }
    let src = Source::new();
    let fs = ext4_image(256, &[], "noatime");
    let dest = fs.mnt().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let stream = fs.scratch().join("s1.stream");
    src.send(&["snaps/s1"], &stream);
    // Without durable checkpoints: only the journal could say where.
    let o = Command::new(rreceive_bin())
        .arg("-q")
        .arg("--no-durable")
        .arg("-f")
        .arg(&stream)
        .arg(&dest)
        .env("RRECEIVE_TEST_KILL", "2000:1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "not killed: {}", text(&o.stderr));
    let token = |what: &str| {
        let o = Command::new(rreceive_bin())
            .arg("--resume-token")
            .arg(dest.join("s1"))
            .output()
            .unwrap();
        println!("{what}: {}{}", text(&o.stdout), text(&o.stderr));
        o
    };
    assert!(token("killed").status.success());
    let dev = run(Command::new("findmnt")
        .args(["-n", "-o", "SOURCE"])
        .arg(fs.mnt()))
    .stdout;
    let dev = text(&dev).trim().to_owned();
    run(Command::new("umount").arg(fs.mnt()));
    run(Command::new("mount")
        .args(["-o", "noatime", &dev])
        .arg(fs.mnt()));
    let o = token("unmounted");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("not resumable: the destination was unmounted since"),
        "{}",
        text(&o.stderr)
    );
    run(Command::new(rreceive_bin())
        .arg("--delete-incomplete")
        .arg(dest.join("s1")));
    run(Command::new(rreceive_bin())
        .arg("-q")
        .arg("-f")
        .arg(&stream)
        .arg(&dest));
    Receiver::RreceiveExt4
        .compare_received(&src.want[0], &dest.join("s1"), false)
        .unwrap();

    // With them (the default), the last durable checkpoint says where, and
    // the receive resumed from it is exact.
    run(Command::new("rm").arg("-rf").arg(dest.join("s1")));
    let o = Command::new(rreceive_bin())
        .arg("-q")
        .arg("-f")
        .arg(&stream)
        .arg(&dest)
        .env("RRECEIVE_TEST_KILL", "2000:1")
        .env("RRECEIVE_TEST_WINDOW", "300")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), None, "not killed: {}", text(&o.stderr));
    assert!(token("killed").status.success());
    run(Command::new("umount").arg(fs.mnt()));
    run(Command::new("mount")
        .args(["-o", "noatime", &dev])
        .arg(fs.mnt()));
    let o = token("unmounted");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let now = text(&o.stdout);
    let rest = fs.scratch().join("rest.stream");
    src.send(&["--resume", now.trim(), "snaps/s1"], &rest);
    let o = Command::new(rreceive_bin())
        .arg("-v")
        .arg("-f")
        .arg(&rest)
        .arg(&dest)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("resuming after a power loss"),
        "{}",
        text(&o.stderr)
    );
    Receiver::RreceiveExt4
        .compare_received(&src.want[0], &dest.join("s1"), false)
        .unwrap();
}
