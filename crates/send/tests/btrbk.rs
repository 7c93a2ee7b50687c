//! The real btrbk (Debian's, a perl script) through the btrfs front,
//! scripts/btrfs-rsend, for five nights (root, loop devices, the btrfs
//! module and btrbk; one SKIP line otherwise, a failure under
//! RSEND_REQUIRE_KERNEL=1).
//!
//! scripts/install.sh installs rsend, rreceive and the front into a
//! scratch PREFIX; rsend and rreceive there are then wrapped so that each
//! call's arguments are kept (the front finds them next to itself). btrbk
//! runs with PREFIX/lib/rsend first in PATH, so its `btrfs send` is rsend
//! reading the source's device and its `btrfs receive` is rreceive; every
//! other btrfs command it runs goes to btrfs-progs.
//!
//! The source is a btrfs (subvolume `data`, btrbk's snapshots in `snaps/`);
//! btrbk sends to a second btrfs (`target`) and to a `raw` target (stream
//! files) on ext4, keeping only the latest snapshot and backup
//! (`*_preserve_min latest`). Between nights `data` changes ([`NIGHTS`]:
//! renames, moves, deletions, edits, hard links, reflinks, xattrs, modes).
//! Each night:
//!
//! - `btrbk run` exits 0 with nothing on standard error; rsend got the snapshot as a
//!   mounted path, with `-p` the night before from night 2 on;
//! - every subvolume on the btrfs target equals its source snapshot
//!   (testdata/manifest.py --links);
//! - the raw file's .info names the snapshot's uuid and its parent's, the
//!   file replayed with rreceive onto ext4 (onto the nights before) equals
//!   the snapshot, and it is the kernel's `btrfs send` with the same
//!   arguments byte for byte, but for the documented root UTIMES before END;
//! - from night 3 on btrbk's retention has deleted old snapshots on the
//!   source, old backups on the target and old raw files.
//!
//! [`the_front_sends_receives_and_passes_the_rest_to_btrfs`] (no root)
//! holds the front's routing to fake tools: arguments kept word for word,
//! global options, abbreviations, `btrfs-send`/`btrfs-receive` names, the
//! real btrfs found past the front and copies of it, `$RSEND_REAL_BTRFS`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use common::receivers::{listing, manifest_of_tree, rreceive_bin, Receiver};
use common::scenarios::{kernel_stream_but_root_utimes, Manifest};
use testkit::{ext4_image, kernel_available, run, which, BtrfsImage};

/// What happens to subvolume `data` before each night's run (bash, in
/// `data`).
const NIGHTS: [&str; 5] = [
    r#"
RANDOM=11
mkdir -p docs/a/b src music empty
for d in docs docs/a docs/a/b src music; do
  for i in $(seq 1 20); do head -c $((RANDOM % 9000 + 1)) /dev/urandom > $d/f$i; done
done
head -c 2M /dev/urandom > big
truncate -s 3M sparse
printf 'in the middle' | dd of=sparse bs=1 seek=1048576 conv=notrunc status=none
ln docs/f1 docs/a/hard1
ln docs/f1 src/hard2
ln -s ../docs/f2 src/link
cp --reflink=always big big-reflink
setfattr -n user.comment -v 'night one' docs/f3
chmod 0750 src
chown 1000:1000 docs/a/f2
touch -d '2001-02-03 04:05:06.123456789' docs/old
"#,
    r#"
RANDOM=12
mv docs/a/b docs/b-moved
mv src/f1 src/f1.renamed
mv music/f3 music/swap; mv music/f4 music/f3; mv music/swap music/f4
rm docs/f1 music/f20 docs/b-moved/f5
rmdir empty
dd if=/dev/urandom of=big bs=4096 seek=100 count=8 conv=notrunc status=none
head -c 5000 /dev/urandom >> src/f2
ln src/f3 music/hard3
cp --reflink=always big docs/big-copy
setfattr -n user.comment -v 'night two' docs/f3
chmod 0600 docs/f7
"#,
    r#"
RANDOM=13
rm -r docs/b-moved
head -c 30000 /dev/urandom > docs/b-moved
rm src/hard2
mv music music-old
mkdir music
mv music-old/f1 music-old/hard3 music/
cp --reflink=always docs/big-copy music/big-again
dd if=/dev/urandom of=docs/big-copy bs=4096 seek=10 count=2 conv=notrunc status=none
truncate -s 1000 docs/f8
for i in $(seq 1 10); do head -c $((RANDOM % 4000 + 1)) /dev/urandom > src/new$i; done
"#,
    r#"
RANDOM=14
mv docs/a src/a-under-src
rm -r music-old
rm big-reflink
ln src/new1 docs/new1-link
cp --reflink=always sparse sparse-copy
printf 'changed' | dd of=sparse-copy bs=1 seek=2000000 conv=notrunc status=none
setfattr -x user.comment docs/f3
setfattr -n user.other -v x src/new2
touch -d '2010-01-01 00:00:00' src/new3
"#,
    r#"
RANDOM=15
mv src/new4 src/cycle; mv src/new5 src/new4; mv src/new6 src/new5; mv src/cycle src/new6
rm src/link
echo 'was a symlink' > src/link
rm docs/new1-link src/new1
cp --reflink=always music/big-again final-copy
head -c 100 /dev/urandom >> final-copy
truncate -s 0 big
head -c 70000 /dev/urandom > big
chmod 0700 src/a-under-src
"#,
];

/// A wrapper of an installed tool: keeps its arguments (NUL-separated) in
/// a file of LOG, named by the time of the call and the tool, then runs the
/// tool.
const WRAPPER: &str = r#"#!/bin/sh
f=$(mktemp "LOG/$(date +%s%N)-TOOL.XXXXXX")
printf '%s\0' "$@" > "$f"
exec "$(dirname "$0")/TOOL.real" "$@"
"#;

/// rsend, rreceive and the front installed by scripts/install.sh in a
/// scratch PREFIX, the tools wrapped to keep their arguments.
struct Front {
    dir: tempfile::TempDir,
}

impl Front {
    fn install() -> Front {
        let dir = tempfile::Builder::new()
            .prefix("rsend-front-")
            .tempdir()
            .unwrap();
        common::receivers::install_sh_into(dir.path());
        let me = Front { dir };
        std::fs::create_dir(me.log()).unwrap();
        let bin = me.dir.path().join("prefix/bin");
        for tool in ["rsend", "rreceive"] {
            std::fs::rename(bin.join(tool), bin.join(format!("{tool}.real"))).unwrap();
            let text = WRAPPER
                .replace("LOG", &me.log().to_string_lossy())
                .replace("TOOL", tool);
            std::fs::write(bin.join(tool), text).unwrap();
            std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let link = me.path_dir().join("btrfs");
        assert_eq!(
            std::fs::read_link(&link).ok(),
            Some(PathBuf::from("../../bin/btrfs-rsend")),
            "install.sh did not make {} a link to the front",
            link.display()
        );
        me
    }

    /// PREFIX/lib/rsend: the directory to put first in PATH.
    fn path_dir(&self) -> PathBuf {
        self.dir.path().join("prefix/lib/rsend")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// The calls since the last time, in order: the tool and its arguments.
    fn take_calls(&self) -> Vec<(String, Vec<String>)> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.log())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                let tool = name.split('-').nth(1).unwrap().split('.').next().unwrap();
                let args = std::fs::read(f).unwrap();
                std::fs::remove_file(f).unwrap();
                let args = args
                    .split(|&b| b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                (tool.to_owned(), args)
            })
            .collect()
    }
}

/// The names in `dir` (sorted).
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The uuid of the subvolume at `path`.
fn uuid(path: &Path) -> String {
    let out = run(Command::new("btrfs").args(["subvolume", "show"]).arg(path));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("UUID:"))
        .map(|u| u.trim().to_owned())
        .unwrap_or_else(|| panic!("btrfs subvolume show {}: no UUID line", path.display()))
}

/// The KEY=VALUE lines of a raw target's .info file (the last wins).
fn info(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Whether rsend's stream `ours` is the kernel's `kernel` but for the two
/// documented differences (docs/rsend.md, docs/PERFORMANCE-extra.md): one more
/// UTIMES of the subvolume root before END, and CLONEs of the same range
/// from another source (the kernel takes the first its backref walk finds,
/// rsend weighs them). Compared as `btrfs receive --dump` prints them: Ok
/// with the number of CLONEs from another source, or the first lines that
/// differ.
fn kernel_stream_but_documented(
    ours: &[u8],
    kernel: &[u8],
    scratch: &Path,
) -> Result<usize, String> {
    if kernel_stream_but_root_utimes(ours, kernel) {
        return Ok(0);
    }
    let dump = |s: &[u8], name: &str| {
        let f = scratch.join(name);
        std::fs::write(&f, s).unwrap();
        let out = run(Command::new("btrfs")
            .args(["receive", "--dump", "-f"])
            .arg(&f));
        std::fs::remove_file(&f).unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (a, b) = (dump(ours, "ours.stream"), dump(kernel, "kernel.stream"));
    let (mut a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // The root's path ends with `/`, the dump's name column padded.
    let root_utimes = |l: &str| {
        l.starts_with("utimes")
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.ends_with('/'))
    };
    if a.len() == b.len() + 1 && a.last().is_some_and(|l| root_utimes(l)) {
        a.pop();
    }
    let clone_range = |l: &str| -> Option<Vec<String>> {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&"clone")).then(|| {
            f.iter()
                .filter(|x| !x.starts_with("from=") && !x.starts_with("clone_offset="))
                .map(|x| x.to_string())
                .collect()
        })
    };
    let mut other_sources = 0;
    let first_difference = a.iter().zip(&b).position(|(x, y)| {
        if x == y {
            return false;
        }
        match (clone_range(x), clone_range(y)) {
            (Some(p), Some(q)) if p == q => {
                other_sources += 1;
                false
            }
            _ => true,
        }
    });
    match first_difference {
        None if a.len() == b.len() => Ok(other_sources),
        d => {
            let first = d.unwrap_or(a.len().min(b.len()));
            let from = first.saturating_sub(3);
            Err(format!(
                "  rsend, from line {}:\n{}\n  kernel:\n{}",
                from + 1,
                a[from..a.len().min(first + 8)].join("\n"),
                b[from..b.len().min(first + 8)].join("\n")
            ))
        }
    }
}

fn secs_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn five_nights_of_btrbk_through_the_front_to_btrfs_and_raw_targets() {
    let test = "five_nights_of_btrbk_through_the_front_to_btrfs_and_raw_targets";
    if !kernel_available(test) {
        return;
    }
    if which("btrbk").is_none() {
        if std::env::var_os("RSEND_REQUIRE_KERNEL").is_some_and(|v| v == "1") {
            panic!("{test}: btrbk is not installed");
        }
        println!("SKIP {test}: btrbk is not installed");
        return;
    }
    let started = Instant::now();
    let rreceive = rreceive_bin();
    let front = Front::install();

    let src = BtrfsImage::new(512, &[], "");
    run(Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(src.mnt().join("data")));
    let snaps = src.mnt().join("snaps");
    std::fs::create_dir(&snaps).unwrap();
    let tgt = BtrfsImage::new(512, &[], "noatime");
    let backup = tgt.mnt().join("backup");
    std::fs::create_dir(&backup).unwrap();
    let ext4 = ext4_image(512, &[], "noatime");
    let raw = ext4.mnt().join("raw");
    let replay = ext4.mnt().join("replay");
    std::fs::create_dir(&raw).unwrap();
    std::fs::create_dir(&replay).unwrap();

    let conf = front.dir.path().join("btrbk.conf");
    std::fs::write(
        &conf,
        format!(
            "timestamp_format long-iso\n\
             snapshot_preserve_min latest\n\
             snapshot_preserve no\n\
             target_preserve_min latest\n\
             target_preserve no\n\
             volume {}\n  \
               snapshot_dir snaps\n  \
               subvolume data\n    \
                 target {}\n    \
                 target raw {}\n",
            src.mnt().display(),
            backup.display(),
            raw.display()
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        front.path_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // Each night's snapshot: its manifest and uuid.
    let mut wants: BTreeMap<String, (Manifest, String)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut last_run = 0;
    let mut report = Vec::new();
    let mut other_clone_sources = 0;
    for (i, churn) in NIGHTS.iter().enumerate() {
        let n = i + 1;
        run(Command::new("bash")
            .args(["-euo", "pipefail", "-c", churn])
            .current_dir(src.mnt().join("data")));
        // btrbk names snapshots by the second (long-iso).
        while secs_now() <= last_run {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        last_run = secs_now();
        let out = Command::new("btrbk")
            .arg("-c")
            .arg(&conf)
            .arg("run")
            .env("PATH", &path)
            .current_dir("/")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "night {n}: btrbk run failed ({}):\n{stderr}\n{stdout}",
            out.status
        );

        // The new snapshot.
        let new: Vec<String> = names(&snaps)
            .into_iter()
            .filter(|s| !wants.contains_key(s))
            .collect();
        assert_eq!(new.len(), 1, "night {n}: snaps/ holds {new:?} new");
        let name = new[0].clone();
        let snap = snaps.join(&name);
        wants.insert(name.clone(), (manifest_of_tree(&snap), uuid(&snap)));
        order.push(name.clone());
        let prev = (n > 1).then(|| order[n - 2].clone());

        // What reached rsend and rreceive.
        let calls = front.take_calls();
        let shown: Vec<String> = calls
            .iter()
            .map(|(t, a)| format!("  {t} {}", a.join(" ")))
            .collect();
        if n <= 2 {
            report.push(format!("night {n}: btrbk ran\n{}", shown.join("\n")));
        }
        let sends: Vec<&Vec<String>> = calls
            .iter()
            .filter(|(t, _)| t == "rsend")
            .map(|(_, a)| a)
            .collect();
        let receives = calls.iter().filter(|(t, _)| t == "rreceive").count();
        assert!(
            sends.len() == 2 && receives == 1,
            "night {n}: two rsend calls and one rreceive wanted:\n{}",
            shown.join("\n")
        );
        for a in &sends {
            let snap_arg = snap.to_string_lossy();
            assert_eq!(
                a.last().map(String::as_str),
                Some(&*snap_arg),
                "night {n}: rsend {a:?}"
            );
            if let Some(p) = &prev {
                let parent = snaps.join(p).to_string_lossy().into_owned();
                assert!(
                    a.windows(2).any(|w| w[0] == "-p" && w[1] == parent),
                    "night {n}: rsend {a:?}, not -p {parent}"
                );
            }
        }

        // The btrfs target: each backup equals its source snapshot.
        let backups = names(&backup);
        assert!(
            backups.contains(&name),
            "night {n}: {name} not in the target: {backups:?}"
        );
        for b in &backups {
            let (want, _) = wants
                .get(b)
                .unwrap_or_else(|| panic!("night {n}: target holds {b}, not a snapshot"));
            let got = backup.join(b);
            if let Err(d) = Receiver::RreceiveBtrfs.compare_received(want, &got, false) {
                panic!(
                    "night {n}: target {b} differs from its snapshot: {d}\n{}",
                    listing(&got)
                );
            }
        }

        // The raw target: the .info, the replay onto ext4, the kernel's stream.
        let file = raw.join(format!("{name}.btrfs"));
        let meta = info(&raw.join(format!("{name}.btrfs.info")));
        let (want, snap_uuid) = &wants[&name];
        assert_eq!(
            meta.get("RECEIVED_UUID"),
            Some(snap_uuid),
            "night {n}: .info {meta:?}"
        );
        assert_eq!(
            meta.get("RECEIVED_PARENT_UUID"),
            prev.as_ref().map(|p| &wants[p].1),
            "night {n}: .info {meta:?}"
        );
        assert_eq!(
            meta.get("INCOMPLETE").map(String::as_str),
            Some("0"),
            "night {n}"
        );
        run(Command::new(&rreceive)
            .arg("-q")
            .arg("-f")
            .arg(&file)
            .arg(&replay));
        let got = replay.join(&name);
        if let Err(d) = Receiver::RreceiveExt4.compare_received(want, &got, false) {
            panic!(
                "night {n}: {name}.btrfs replayed onto ext4 differs from its snapshot: {d}\n{}",
                listing(&got)
            );
        }
        let ours = std::fs::read(&file).unwrap();
        let distinct: BTreeSet<&Vec<String>> = sends.iter().copied().collect();
        let mut differences = Vec::new();
        let mut matched = false;
        for args in &distinct {
            let kernel = run(Command::new("btrfs").arg("-q").arg("send").args(*args)).stdout;
            match kernel_stream_but_documented(&ours, &kernel, front.dir.path()) {
                Ok(clones) => {
                    other_clone_sources += clones;
                    matched = true;
                    break;
                }
                Err(d) => differences.push(format!("{args:?} ({} bytes):\n{d}", kernel.len())),
            }
        }
        assert!(
            matched,
            "night {n}: {name}.btrfs ({} bytes) is not the kernel's btrfs send with {}",
            ours.len(),
            differences.join("\n")
        );
    }

    // Retention deleted on every side; the last night is everywhere.
    let last = order.last().unwrap();
    for (side, held) in [
        ("source snaps/", names(&snaps)),
        ("btrfs target", names(&backup)),
        ("raw target", names(&raw)),
    ] {
        assert!(
            held.iter().any(|h| h.starts_with(last.as_str())),
            "{side}: {last} missing: {held:?}"
        );
        for old in &order[..2] {
            assert!(
                !held.iter().any(|h| h.starts_with(old.as_str())),
                "{side}: btrbk's retention kept {old}: {held:?}"
            );
        }
    }
    println!("{}", report.join("\n"));
    println!(
        "5 nights of btrbk through the front: every run exit 0, targets and ext4 replays equal \
         their snapshots, raw streams the kernel's ({other_clone_sources} CLONEs from another \
         source of the same range; {:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

/// A fake tool: prints its name and each argument in brackets.
const FAKE_TOOL: &str =
    "#!/bin/sh\nprintf NAME; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo\n";

#[test]
fn the_front_sends_receives_and_passes_the_rest_to_btrfs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let front = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/btrfs-rsend");
    let write = |path: &Path, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let front_text = std::fs::read_to_string(&front).unwrap();
    write(&d.join("bin/btrfs-rsend"), &front_text);
    write(&d.join("bin/rsend"), &FAKE_TOOL.replace("NAME", "rsend"));
    write(
        &d.join("bin/rreceive"),
        &FAKE_TOOL.replace("NAME", "rreceive"),
    );
    // A copy of the front named btrfs, then the "real" one.
    write(&d.join("copy/btrfs"), &front_text);
    write(&d.join("real/btrfs"), &FAKE_TOOL.replace("NAME", "btrfs"));
    write(&d.join("other/btrfs"), &FAKE_TOOL.replace("NAME", "other"));
    std::fs::create_dir_all(d.join("lib/rsend")).unwrap();
    for name in ["btrfs", "btrfs-send", "btrfs-receive"] {
        std::os::unix::fs::symlink("../../bin/btrfs-rsend", d.join("lib/rsend").join(name))
            .unwrap();
    }
    let path = format!(
        "{}:{}:{}:/usr/bin:/bin",
        d.join("lib/rsend").display(),
        d.join("copy").display(),
        d.join("real").display()
    );
    let call = |prog: &str, args: &[&str], env: &[(&str, &Path)]| {
        let mut cmd = Command::new(d.join("lib/rsend").join(prog));
        cmd.args(args)
            .env("PATH", &path)
            .env_remove("RSEND_REAL_BTRFS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim_end().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let cases: [(&str, &[&str], &str); 13] = [
        ("btrfs", &["send", "-p", "a b", "c"], "rsend [-p] [a b] [c]"),
        ("btrfs", &["-q", "send", "x"], "rsend [-q] [x]"),
        ("btrfs", &["--log", "quiet", "sen", "x"], "rsend [-q] [x]"),
        (
            "btrfs",
            &["-v", "se", "-c", "y", "x"],
            "rsend [-v] [-c] [y] [x]",
        ),
        (
            "btrfs",
            &["receive", "--max-errors=0", "/t/"],
            "rreceive [--max-errors=0] [/t/]",
        ),
        (
            "btrfs",
            &["--quiet", "rec", "-f", "s"],
            "rreceive [-q] [-f] [s]",
        ),
        (
            "btrfs",
            &["subvolume", "show", "/x y"],
            "btrfs [subvolume] [show] [/x y]",
        ),
        (
            "btrfs",
            &["-q", "subvolume", "delete", "z"],
            "btrfs [-q] [subvolume] [delete] [z]",
        ),
        (
            "btrfs",
            &["--format", "json", "filesystem", "usage", "/"],
            "btrfs [--format] [json] [filesystem] [usage] [/]",
        ),
        ("btrfs", &["--version"], "btrfs [--version]"),
        ("btrfs", &[], "btrfs"),
        ("btrfs-send", &["-p", "p", "s"], "rsend [-p] [p] [s]"),
        ("btrfs-receive", &["-e", "/t"], "rreceive [-e] [/t]"),
    ];
    for (prog, args, want) in cases {
        let (code, out, err) = call(prog, args, &[]);
        assert_eq!(
            (code, out.as_str()),
            (Some(0), want),
            "{prog} {args:?}: {err}"
        );
    }
    let (code, out, _) = call(
        "btrfs",
        &["version"],
        &[("RSEND_REAL_BTRFS", &d.join("other/btrfs"))],
    );
    assert_eq!((code, out.as_str()), (Some(0), "other [version]"));
    // Other global options are refused before send and receive, as btrbk
    // reads a receive's errors: a line starting `ERROR: `.
    for args in [
        &["--format", "json", "send", "x"][..],
        &["--dry-run", "receive", "x"],
    ] {
        let (code, out, err) = call("btrfs", args, &[]);
        assert!(
            code == Some(2) && out.is_empty() && err.starts_with("ERROR: "),
            "{args:?}: exit {code:?}, {out:?}, {err:?}"
        );
    }
}
