//! `rsend --verify`: a snapshot made here by the kernel, received by
//! rreceive onto tmpfs, ext4, xfs and btrfs and by `btrfs receive` onto
//! btrfs, is identical to every copy; then each kind of damage done to a
//! copy (a flipped byte with size and mtime kept, in a plain, a compressed,
//! a NODATASUM and a sparse file and in a file's last partial sector; a
//! chmod, a chown, a removed file, an added directory, a broken hard link,
//! a changed symlink target, a changed xattr, a file turned into a
//! directory, an inode flag added) is reported exactly, by what was done,
//! and nothing else. The copy is never changed by the verify (not even its
//! atimes), a copy without xattrs or inode flags is said once, and a
//! missing or wrong DIR is an error naming it. Inode flags (chattr) the
//! snapshot has and a copy lacks are reported where the copy's filesystem
//! can hold them, and only there; a chain received with `rreceive --link`
//! differs only in link counts, and `--ignore links` (and only that)
//! leaves them out. Root, loop devices and the kernel are needed (one SKIP
//! line otherwise), but for the error tests, which read the scenario image.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::receivers::{rreceive_bin, Receiver};
use common::scenarios;
use testkit::{ext4_image, kernel_available, run, sh, xfs_image, BtrfsImage, Tmpfs};

fn rsend() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rsend"))
}

/// What the source snapshot holds: every file type, hard links, inline,
/// compressed, sparse, preallocated and NODATASUM data, xattrs, an ACL,
/// odd owners and modes, odd names.
const SOURCE: &str = r#"
head -c 3145728 /dev/urandom > big
printf 'small inline file\n' > small
head -c 10000 /dev/urandom > tail
mkdir comp
btrfs property set comp compression zstd
python3 -c "open('comp/text', 'w').write('compressible line of text\n' * 60000)"
truncate -s 4M sparse
printf 'data in the middle' | dd of=sparse bs=1 seek=1048576 conv=notrunc status=none
fallocate -l 1M prealloc
printf 'written' | dd of=prealloc conv=notrunc status=none
touch nodatasum
chattr +C nodatasum
head -c 200000 /dev/urandom > nodatasum
mkdir -p d/e
printf 'deep\n' > d/e/f
printf 'linked\n' > h1
ln h1 d/h2
ln -s target/one sl
mkfifo fifo
mknod chr c 1 3
python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock')"
printf 'x\n' > x
setfattr -n user.k -v value x
setfacl -m u:1234:rw x
printf 'f\n' > f
chown 1234:5678 f
chmod 640 f
printf 's\n' > setuid
chmod 4755 setuid
printf 'odd\n' > 'name with space'
printf 'odd\n' > "$(printf 'new\nline')"
touch -h -d '2021-01-02 03:04:05.123456789' big small tail comp/text comp sparse prealloc nodatasum d/e/f d/e d h1 sl fifo chr sock x f setuid 'name with space' "$(printf 'new\nline')" . 
"#;

/// The source snapshot, in a btrfs image file that is no longer mounted,
/// and its stream from rsend.
struct Source {
    fs: BtrfsImage,
    stream: PathBuf,
}

fn source() -> Source {
    source_of(SOURCE)
}

/// A snapshot `snap` of what `script` makes, and its stream.
fn source_of(script: &str) -> Source {
    let mut fs = BtrfsImage::new(512, &[], "");
    sh(fs.mnt(), script);
    sh(fs.mnt(), "sync");
    fs.snapshot("snap");
    fs.unmount();
    let stream = fs.scratch().join("snap.stream");
    run(rsend()
        .arg("-q")
        .arg("-d")
        .arg(fs.image())
        .arg("-f")
        .arg(&stream)
        .arg("snap"));
    Source { fs, stream }
}

impl Source {
    /// `rsend --verify DIR snap --json`.
    fn verify(&self, dir: &Path) -> Output {
        self.verify_as(dir, "snap", &[])
    }

    /// `rsend --verify DIR SNAP --json ARGS`.
    fn verify_as(&self, dir: &Path, snap: &str, args: &[&str]) -> Output {
        rsend()
            .arg("-d")
            .arg(self.fs.image())
            .arg("--verify")
            .arg(dir)
            .args([snap, "--json"])
            .args(args)
            .output()
            .unwrap()
    }

    /// Receives the snapshot with rreceive into `dest` (a fresh directory);
    /// returns the copy.
    fn receive(&self, dest: &Path) -> PathBuf {
        std::fs::create_dir_all(dest).unwrap();
        Receiver::RreceiveExt4
            .receive(&rreceive_bin(), &self.stream, dest)
            .unwrap();
        dest.join("snap")
    }
}

/// The records of a verify's JSON output as (change, path, what).
fn records(o: &Output) -> Vec<(String, String, Vec<String>)> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let what = v["what"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default();
            (
                v["change"].as_str().unwrap().to_owned(),
                v["path"].as_str().unwrap().to_owned(),
                what,
            )
        })
        .collect()
}

fn last_stderr_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

fn assert_identical(src: &Source, copy: &Path, what: &str) {
    assert_identical_with(src, copy, what, &[]);
}

/// The copy is identical, told `args` (such as `--ignore flags`).
fn assert_identical_with(src: &Source, copy: &Path, what: &str, args: &[&str]) {
    let o = src.verify_as(copy, "snap", args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}: {:?}\n{}",
        records(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    let last = last_stderr_line(&o);
    assert!(
        last.contains("paths and") && last.ends_with("identical"),
        "{what}: {last}"
    );
}

#[test]
fn received_copies_on_every_filesystem_are_identical() {
    if !kernel_available("received_copies_on_every_filesystem_are_identical") {
        return;
    }
    let src = source();
    let tmpfs = Tmpfs::new(256, "");
    assert_identical(
        &src,
        &src.receive(&tmpfs.mnt().join("r")),
        "rreceive onto tmpfs",
    );
    let ext4 = ext4_image(256, &[], "");
    assert_identical(
        &src,
        &src.receive(&ext4.mnt().join("r")),
        "rreceive onto ext4",
    );
    let xfs = xfs_image(300, "");
    assert_identical(
        &src,
        &src.receive(&xfs.mnt().join("r")),
        "rreceive onto xfs",
    );
    // On btrfs the copies lack the NOCOW flag of `nodatasum`: a stream
    // carries no inode flags of the files it creates (only a change of
    // them, in an incremental one), and a file with data cannot get NOCOW.
    // Elsewhere NOCOW means nothing and is not compared.
    let btrfs = BtrfsImage::new(512, &[], "");
    let nocow_lost = [("differs".into(), "nodatasum".into(), vec!["flags".into()])];
    let copy = src.receive(&btrfs.mnt().join("r"));
    let o = src.verify(&copy);
    assert_eq!(records(&o), nocow_lost, "rreceive onto btrfs");
    assert_identical_with(&src, &copy, "rreceive onto btrfs", &["--ignore", "flags"]);
    let dest = btrfs.mnt().join("k");
    std::fs::create_dir(&dest).unwrap();
    Receiver::BtrfsReceive
        .receive(&rreceive_bin(), &src.stream, &dest)
        .unwrap();
    let o = src.verify(&dest.join("snap"));
    assert_eq!(records(&o), nocow_lost, "btrfs receive onto btrfs");
    assert_identical_with(
        &src,
        &dest.join("snap"),
        "btrfs receive onto btrfs",
        &["--ignore", "flags"],
    );
    // The last line counts what was compared: every path, and the bytes
    // of every file (sizes from the copy).
    let o = src.verify_as(&dest.join("snap"), "snap", &["--ignore", "flags"]);
    let last = last_stderr_line(&o);
    let paths = walk(&dest.join("snap")).len();
    assert!(last.contains(&format!(": {paths} paths and ")), "{last}");
}

/// Every path under `root` (not following symlinks), `root` included.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let p = out[i].clone();
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                out.push(e.unwrap().path());
            }
        }
        i += 1;
    }
    out
}

/// (atime, mtime, ctime) of every path of the copy; a symlink's atime is
/// left out (readlink(2) updates it, and has no flag against that).
fn times(paths: &[PathBuf]) -> Vec<(PathBuf, i64, i64, i64, i64, i64, i64)> {
    paths
        .iter()
        .cloned()
        .map(|p| {
            let m = std::fs::symlink_metadata(&p).unwrap();
            let link = m.file_type().is_symlink();
            (
                p,
                if link { 0 } else { m.atime() },
                if link { 0 } else { m.atime_nsec() },
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
        })
        .collect()
}

/// A damage to a copy: a shell script run in it, and the records it must
/// give (change, path, what).
struct Damage {
    name: &'static str,
    script: &'static str,
    want: &'static [(&'static str, &'static str, &'static [&'static str])],
}

/// Each script keeps the times of what it did not mean to change (a
/// directory's mtime after removing or adding an entry), so that what it
/// meant is the whole difference.
const DAMAGES: &[Damage] = &[
    Damage {
        name: "flipped byte in a plain file, size and mtime kept",
        script: "python3 -c \"f = open('big', 'r+b'); f.seek(1048593); b = f.read(1); f.seek(1048593); f.write(bytes([b[0] ^ 1]))\"; touch -d '2021-01-02 03:04:05.123456789' big",
        want: &[("differs", "big", &["data"])],
    },
    Damage {
        name: "flipped byte in the last partial sector",
        script: "python3 -c \"f = open('tail', 'r+b'); f.seek(9999); b = f.read(1); f.seek(9999); f.write(bytes([b[0] ^ 0x80]))\"; touch -d '2021-01-02 03:04:05.123456789' tail",
        want: &[("differs", "tail", &["data"])],
    },
    Damage {
        name: "flipped byte in a compressed file",
        script: "python3 -c \"f = open('comp/text', 'r+b'); f.seek(777777); b = f.read(1); f.seek(777777); f.write(bytes([b[0] ^ 2]))\"; touch -d '2021-01-02 03:04:05.123456789' comp/text",
        want: &[("differs", "comp/text", &["data"])],
    },
    Damage {
        name: "flipped byte in a NODATASUM file",
        script: "python3 -c \"f = open('nodatasum', 'r+b'); f.seek(4096); b = f.read(1); f.seek(4096); f.write(bytes([b[0] ^ 4]))\"; touch -d '2021-01-02 03:04:05.123456789' nodatasum",
        want: &[("differs", "nodatasum", &["data"])],
    },
    Damage {
        name: "a byte written into a hole",
        script: "printf 'Z' | dd of=sparse bs=1 seek=3000000 conv=notrunc status=none; touch -d '2021-01-02 03:04:05.123456789' sparse",
        want: &[("differs", "sparse", &["data"])],
    },
    Damage {
        name: "flipped byte and chmod in one file (data found apart from the rest)",
        script: "python3 -c \"f = open('big', 'r+b'); f.seek(5); b = f.read(1); f.seek(5); f.write(bytes([b[0] ^ 1]))\"; chmod 640 big; touch -d '2021-01-02 03:04:05.123456789' big",
        want: &[("differs", "big", &["data", "mode"])],
    },
    Damage {
        name: "chmod",
        script: "chmod 600 f",
        want: &[("differs", "f", &["mode"])],
    },
    Damage {
        name: "chown",
        script: "chown 1:1 small",
        want: &[("differs", "small", &["owner"])],
    },
    Damage {
        name: "removed file",
        script: "rm d/e/f; touch -d '2021-01-02 03:04:05.123456789' d/e",
        want: &[("missing", "d/e/f", &[])],
    },
    Damage {
        name: "added directory",
        script: "mkdir -p newdir/sub; printf 'n' > newdir/sub/x; touch -d '2021-01-02 03:04:05.123456789' .",
        want: &[
            ("extra", "newdir", &[]),
            ("extra", "newdir/sub", &[]),
            ("extra", "newdir/sub/x", &[]),
        ],
    },
    Damage {
        name: "broken hard link",
        script: "cp -p d/h2 d/h2.tmp; mv d/h2.tmp d/h2; touch -d '2021-01-02 03:04:05.123456789' d",
        want: &[("differs", "d/h2", &["links"]), ("differs", "h1", &["links"])],
    },
    Damage {
        name: "changed symlink target",
        script: "rm sl; ln -s target/two sl; touch -h -d '2021-01-02 03:04:05.123456789' sl .",
        want: &[("differs", "sl", &["target"])],
    },
    Damage {
        name: "changed xattr",
        script: "setfattr -n user.k -v other x",
        want: &[("differs", "x", &["xattrs"])],
    },
    Damage {
        name: "an inode flag added (nodump)",
        script: "chattr +d small",
        want: &[("differs", "small", &["flags"])],
    },
    Damage {
        name: "file turned into a directory",
        script: "rm small; mkdir small; printf 'y' > small/y; touch -d '2021-01-02 03:04:05.123456789' small .",
        want: &[("differs", "small", &["type"]), ("extra", "small/y", &[])],
    },
];

#[test]
fn each_damage_to_a_copy_is_reported_exactly() {
    if !kernel_available("each_damage_to_a_copy_is_reported_exactly") {
        return;
    }
    let src = source();
    // strictatime: a read that updated an atime would show.
    let tmpfs = Tmpfs::new(512, "strictatime");
    let mut failures = Vec::new();
    for (i, d) in DAMAGES.iter().enumerate() {
        let copy = src.receive(&tmpfs.mnt().join(format!("r{i}")));
        sh(&copy, d.script);
        // Listed first: reading a directory sets its atime.
        let paths = walk(&copy);
        let before = times(&paths);
        let o = src.verify(&copy);
        let got = records(&o);
        let want: Vec<(String, String, Vec<String>)> = d
            .want
            .iter()
            .map(|(c, p, w)| {
                (
                    c.to_string(),
                    p.to_string(),
                    w.iter().map(|s| s.to_string()).collect(),
                )
            })
            .collect();
        if got != want || o.status.code() != Some(1) {
            failures.push(format!(
                "{}: exit {:?}, want {want:?}, got {got:?}; {}",
                d.name,
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let differ = format!("{} path", want.len());
        let last = last_stderr_line(&o);
        if !last.contains(&differ) {
            failures.push(format!("{}: last line {last:?}", d.name));
        }
        let after = times(&paths);
        if after != before {
            let changed: Vec<_> = before.iter().zip(&after).filter(|(a, b)| a != b).collect();
            failures.push(format!(
                "{}: the verify changed the copy's times: {changed:?}",
                d.name
            ));
        }
        std::fs::remove_dir_all(&copy).unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_copy_without_xattrs_is_said_once_and_the_rest_compared() {
    if !kernel_available("a_copy_without_xattrs_is_said_once_and_the_rest_compared") {
        return;
    }
    let src = source();
    let tmpfs = Tmpfs::new(256, "");
    let copy = src.receive(&tmpfs.mnt().join("r"));
    // ramfs has no xattrs at all; cp -a keeps the rest (and complains).
    let ram = tmpfs.scratch().join("ram");
    std::fs::create_dir(&ram).unwrap();
    run(Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&ram));
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(ram.clone());
    let _ = Command::new("cp")
        .arg("-a")
        .arg(&copy)
        .arg(&ram)
        .output()
        .unwrap();
    let o = src.verify(&ram.join("snap"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("no extended attributes").count(), 1, "{err}");
    assert_eq!(err.matches("has no inode flags").count(), 1, "{err}");
    assert_eq!(o.status.code(), Some(0), "{:?} {err}", records(&o));
    // Data is still compared there.
    sh(&ram.join("snap"), DAMAGES[0].script);
    let o = src.verify(&ram.join("snap"));
    assert_eq!(
        records(&o),
        vec![("differs".into(), "big".into(), vec!["data".into()])]
    );
}

#[test]
fn missing_or_wrong_copy_directory_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let img = scenarios::decompress_image(tmp.path());
    let verify = |dir: &Path| {
        rsend()
            .arg("-d")
            .arg(&img)
            .arg("--verify")
            .arg(dir)
            .arg("new_files.c")
            .output()
            .unwrap()
    };
    let missing = tmp.path().join("no such dir");
    let o = verify(&missing);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no such dir") && err.contains("no such file or directory"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    let o = verify(&img);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&*img.to_string_lossy()) && err.contains("not a directory"),
        "{err}"
    );
    // An empty directory: everything is missing, and it says so.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = verify(&empty);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines().count() > 1 && text.lines().skip(1).all(|l| l.starts_with("-\t")),
        "{text}"
    );
    // Usage errors.
    for usage in [&[][..], &["-p", "new_files.p", "new_files.c"], &["a", "b"]] {
        let o = rsend()
            .arg("-d")
            .arg(&img)
            .args(usage)
            .arg("--verify")
            .arg(&empty)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{usage:?}: {err}");
    }
}

#[test]
fn a_terminal_shows_a_progress_bar_and_a_pipe_gets_none() {
    if !kernel_available("a_terminal_shows_a_progress_bar_and_a_pipe_gets_none") {
        return;
    }
    let src = source();
    let tmpfs = Tmpfs::new(256, "");
    let copy = src.receive(&tmpfs.mnt().join("r"));
    let cmd = format!(
        "{} -d {} --verify {} snap",
        env!("CARGO_BIN_EXE_rsend"),
        testkit::sh_quote(src.fs.image().as_os_str()),
        testkit::sh_quote(copy.as_os_str())
    );
    let Some((code, shown)) = testkit::on_terminal(&cmd) else {
        testkit::no_script("a_terminal_shows_a_progress_bar_and_a_pipe_gets_none");
        return;
    };
    let shown = String::from_utf8_lossy(&shown);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains("verify snap") && shown.contains("MiB"),
        "{shown}"
    );
    let o = src.verify(&copy);
    assert!(
        !o.stderr.contains(&0x1b),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Files with every inode flag chattr sets on btrfs (before the snapshot),
/// and one without.
const FLAGS_SOURCE: &str = r#"
printf 'i\n' > immutable
printf 'a\n' > append
printf 'd\n' > nodump
printf 'A\n' > noatime
printf 'S\n' > sync
mkdir dirsync nocow
touch nocow/file
chattr +C nocow nocow/file
printf 'nocow data\n' > nocow/file
printf 'c\n' > compress
chattr +c compress
printf 'p\n' > plain
chattr +a append
chattr +d nodump
chattr +A noatime
chattr +S sync
chattr +D dirsync
chattr +i immutable
"#;

/// The records of `o` as `CHANGE<TAB>PATH[<TAB>WHAT]`.
fn differs(o: &Output) -> Vec<String> {
    records(o)
        .into_iter()
        .map(|(c, p, w)| match &w[..] {
            [] => format!("{c}\t{p}"),
            w => format!("{c}\t{p}\t{}", w.join(",")),
        })
        .collect()
}

#[test]
fn inode_flags_a_copy_lacks_are_reported_where_its_filesystem_holds_them() {
    if !kernel_available("inode_flags_a_copy_lacks_are_reported_where_its_filesystem_holds_them") {
        return;
    }
    let src = source_of(FLAGS_SOURCE);
    let ext4 = ext4_image(128, &[], "");
    let xfs = xfs_image(300, "");
    let tmpfs = Tmpfs::new(64, "");
    let btrfs = BtrfsImage::new(512, &[], "");
    // What each filesystem holds of the snapshot's flags, and the chattr
    // that gives a copy the same (the stream gave it none). `compress` is
    // a btrfs property too: on btrfs the copy has it already.
    let d = |p: &str| format!("differs\t{p}\tflags");
    let cases = [
        (
            "ext4",
            ext4.mnt(),
            vec![
                d("append"),
                d("dirsync"),
                d("immutable"),
                d("noatime"),
                d("nodump"),
                d("sync"),
            ],
            "chattr +a append; chattr +D dirsync; chattr +A noatime; chattr +d nodump; chattr +S sync; chattr +i immutable",
        ),
        (
            "xfs",
            xfs.mnt(),
            vec![
                d("append"),
                d("immutable"),
                d("noatime"),
                d("nodump"),
                d("sync"),
            ],
            "chattr +a append; chattr +A noatime; chattr +d nodump; chattr +S sync; chattr +i immutable",
        ),
        (
            "tmpfs",
            tmpfs.mnt(),
            vec![d("append"), d("immutable"), d("noatime"), d("nodump")],
            "chattr +a append; chattr +A noatime; chattr +d nodump; chattr +i immutable",
        ),
        (
            "btrfs",
            btrfs.mnt(),
            vec![
                d("append"),
                d("dirsync"),
                d("immutable"),
                d("noatime"),
                d("nocow"),
                d("nocow/file"),
                d("nodump"),
                d("sync"),
            ],
            // The file under `nocow` has data: it cannot become NOCOW.
            "chattr +a append; chattr +D dirsync; chattr +A noatime; chattr +C nocow; chattr +d nodump; chattr +S sync; chattr +i immutable",
        ),
    ];
    let mut failures = Vec::new();
    for (name, mnt, want, chattr) in cases {
        let copy = src.receive(&mnt.join("r"));
        if name == "btrfs" {
            // rreceive made a read-only subvolume there.
            run(Command::new("btrfs")
                .args(["property", "set", "-f", "-ts"])
                .arg(&copy)
                .args(["ro", "false"]));
        }
        let o = src.verify(&copy);
        if differs(&o) != want || o.status.code() != Some(1) {
            failures.push(format!(
                "{name}: exit {:?}, want {want:?}, got {:?}",
                o.status.code(),
                differs(&o)
            ));
        }
        let o = src.verify_as(&copy, "snap", &["--ignore", "flags"]);
        if o.status.code() != Some(0) {
            failures.push(format!("{name} --ignore flags: {:?}", differs(&o)));
        }
        sh(&copy, chattr);
        let o = src.verify(&copy);
        let left: Vec<String> = if name == "btrfs" {
            vec![d("nocow/file")]
        } else {
            Vec::new()
        };
        if differs(&o) != left {
            failures.push(format!("{name} after `{chattr}`: {:?}", differs(&o)));
        }
        // The immutable flag lost again (the flag ext4, xfs, btrfs and
        // tmpfs all hold) is found.
        sh(&copy, "chattr -i immutable");
        let mut want = left.clone();
        want.insert(0, d("immutable"));
        let o = src.verify(&copy);
        if differs(&o) != want || o.status.code() != Some(1) {
            failures.push(format!(
                "{name} after chattr -i: want {want:?}, got {:?}",
                differs(&o)
            ));
        }
        // Lift what would keep the copy from being removed.
        sh(&copy, "chattr -a append");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A snapshot chain s0, s1 (a file changed, one added, one directory
/// renamed) on btrfs, received onto ext4 in full, then with `--link`.
const LINK_S0: &str = r#"
btrfs -q subvolume create data
cd data
head -c 100000 /dev/urandom > big
printf 'a\n' > a
mkdir -p d/e
printf 'c\n' > d/e/c
printf 'changed later\n' > chg
ln -s a sl
mkfifo fifo
cd ..
btrfs -q subvolume snapshot -r data s0
"#;

const LINK_S1: &str = r#"
printf 'more\n' >> data/chg
printf 'new\n' > data/d/new
mv data/d/e data/e
btrfs -q subvolume snapshot -r data s1
"#;

#[test]
fn a_chain_received_with_link_verifies_clean_only_with_ignore_links() {
    if !kernel_available("a_chain_received_with_link_verifies_clean_only_with_ignore_links") {
        return;
    }
    let mut fs = BtrfsImage::new(512, &[], "");
    sh(fs.mnt(), LINK_S0);
    sh(fs.mnt(), LINK_S1);
    sh(fs.mnt(), "sync");
    fs.unmount();
    let full = fs.scratch().join("s0.stream");
    let inc = fs.scratch().join("s1.stream");
    run(rsend()
        .arg("-q")
        .arg("-d")
        .arg(fs.image())
        .arg("-f")
        .arg(&full)
        .arg("s0"));
    run(rsend()
        .arg("-q")
        .arg("-d")
        .arg(fs.image())
        .args(["-p", "s0", "-f"])
        .arg(&inc)
        .arg("s1"));
    let ext4 = ext4_image(128, &[], "");
    let dest = ext4.mnt().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let rreceive = rreceive_bin();
    run(Command::new(&rreceive)
        .arg("-q")
        .arg("-f")
        .arg(&full)
        .arg(&dest));
    run(Command::new(&rreceive)
        .args(["-q", "--link", "-f"])
        .arg(&inc)
        .arg(&dest));
    // The files s1 did not change are hard links to s0's: one more link
    // each, on both sides; the directories, `chg` and `d/new` are s1's own.
    let shared = ["a", "big", "e/c", "fifo", "sl"];
    let ino = |p: PathBuf| std::fs::symlink_metadata(p).unwrap().ino();
    for f in shared {
        assert_eq!(
            ino(dest.join("s1").join(f)),
            ino(dest.join("s0").join(f.replace("e/c", "d/e/c"))),
            "{f} is not shared"
        );
    }
    let src = Source { fs, stream: full };
    for (snap, shared) in [
        ("s1", shared.to_vec()),
        ("s0", vec!["a", "big", "d/e/c", "fifo", "sl"]),
    ] {
        let copy = dest.join(snap);
        let o = src.verify_as(&copy, snap, &[]);
        let want: Vec<String> = shared
            .iter()
            .map(|p| format!("differs\t{p}\tlinks"))
            .collect();
        assert_eq!(differs(&o), want, "{snap} without --ignore");
        assert_eq!(o.status.code(), Some(1));
        let o = src.verify_as(&copy, snap, &["--ignore", "links"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{snap} --ignore links: {:?} {}",
            differs(&o),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.stdout.is_empty());
        assert!(last_stderr_line(&o).ends_with("identical"));
    }
    // Ignoring links hides nothing else: a chmod of s1's own copy of `chg`
    // and a file gone are still found, and the others ignored with them.
    let s1 = dest.join("s1");
    sh(&s1, "chmod 600 chg; rm d/new; touch -d @0 d");
    let o = src.verify_as(&s1, "s1", &["--ignore", "links"]);
    assert_eq!(
        differs(&o),
        ["differs\tchg\tmode", "differs\td\tmtime", "missing\td/new"],
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = src.verify_as(
        &s1,
        "s1",
        &["--ignore", "links,missing", "--ignore", "mtime"],
    );
    assert_eq!(differs(&o), ["differs\tchg\tmode"]);
    let o = src.verify_as(&s1, "s1", &["--ignore", "links,mode,mtime,missing"]);
    assert_eq!(o.status.code(), Some(0), "{:?}", differs(&o));
}

#[test]
fn ignore_takes_only_the_kinds_verify_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let img = scenarios::decompress_image(tmp.path());
    let o = rsend()
        .arg("-d")
        .arg(&img)
        .args([
            "--verify",
            "/",
            "--ignore",
            "links,hardlinks",
            "new_files.c",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("hardlinks") && err.contains("links, missing, extra"),
        "{err}"
    );
    // Only with --verify.
    let o = rsend()
        .arg("-d")
        .arg(&img)
        .args(["--changes", "--ignore", "links", "new_files.c"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
