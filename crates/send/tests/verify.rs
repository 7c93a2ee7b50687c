//! `rsend --verify`: a snapshot made here by the kernel, received by
//! rreceive onto tmpfs, ext4, xfs and btrfs and by `btrfs receive` onto
//! btrfs, is identical to every copy; then each kind of damage done to a
//! copy (a flipped byte with size and mtime kept, in a plain, a compressed,
//! a NODATASUM and a sparse file and in a file's last partial sector; a
//! chmod, a chown, a removed file, an added directory, a broken hard link,
//! a changed symlink target, a changed xattr, a file turned into a
//! directory) is reported exactly, by what was done, and nothing else. The
//! copy is never changed by the verify (not even its atimes), a copy
//! without xattrs is said once, and a missing or wrong DIR is an error
//! naming it. Root, loop devices and the kernel are needed (one SKIP line
//! otherwise), but for the error tests, which read the scenario image.

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
    let mut fs = BtrfsImage::new(512, &[], "");
    sh(fs.mnt(), SOURCE);
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
        rsend()
            .arg("-d")
            .arg(self.fs.image())
            .arg("--verify")
            .arg(dir)
            .args(["snap", "--json"])
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
    let o = src.verify(copy);
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
    let btrfs = BtrfsImage::new(512, &[], "");
    assert_identical(
        &src,
        &src.receive(&btrfs.mnt().join("r")),
        "rreceive onto btrfs",
    );
    let dest = btrfs.mnt().join("k");
    std::fs::create_dir(&dest).unwrap();
    Receiver::BtrfsReceive
        .receive(&rreceive_bin(), &src.stream, &dest)
        .unwrap();
    assert_identical(&src, &dest.join("snap"), "btrfs receive onto btrfs");
    // The last line counts what was compared: every path, and the bytes
    // of every file (sizes from the copy).
    let o = src.verify(&dest.join("snap"));
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
