//! New files are created in batches grouped by directory and finished
//! (data, owner, mode, times) and closed on other threads. These streams
//! check that later commands still see each file complete, that every
//! directory lists its entries in stream order, and that a command failing
//! on the finishing thread is reported with its own number.

mod common;

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command as Process, Output};

use btrfs_stream::{Command, Timespec, Uuid, Writer};
use common::*;
use testkit::{kernel_available, BtrfsImage, Tmpfs};

const U: Uuid = Uuid::from_u128(0x5151_0000_0000_0000_0000_0000_0000_0001);

fn leak(b: impl Into<Vec<u8>>) -> &'static [u8] {
    Box::leak(b.into().into_boxed_slice())
}

fn t(sec: i64) -> Timespec {
    Timespec {
        sec,
        nsec: 123_456_789,
    }
}

fn utimes(path: &'static [u8], sec: i64) -> Command<'static> {
    Command::Utimes {
        path,
        atime: t(sec),
        mtime: t(sec + 1),
        ctime: t(sec + 2),
        otime: None,
    }
}

fn data(i: usize) -> Vec<u8> {
    let len = 100 + (i * 977) % 3900;
    (0..len).map(|k| (k * 31 + i * 7) as u8).collect()
}

/// A new file as the kernel sends it: orphan, rename, data, owner, mode,
/// times (with the parent directory's times in between).
fn new_file(cmds: &mut Vec<Command<'static>>, ino: u64, path: &'static [u8], body: &[u8]) {
    let orphan = leak(format!("o{ino}-1-0"));
    cmds.push(Command::Mkfile { path: orphan, ino });
    cmds.push(Command::Rename {
        from: orphan,
        to: path,
    });
    let parent = leak(path.rsplit_once_slash());
    if !parent.is_empty() {
        cmds.push(utimes(parent, 1_000));
    }
    cmds.push(Command::Write {
        path,
        offset: 0,
        data: leak(body),
    });
    cmds.push(Command::Chown {
        path,
        uid: 0,
        gid: 0,
    });
    cmds.push(Command::Chmod { path, mode: 0o644 });
    cmds.push(utimes(path, 2_000 + ino as i64));
}

trait Parent {
    fn rsplit_once_slash(&self) -> Vec<u8>;
}

impl Parent for [u8] {
    fn rsplit_once_slash(&self) -> Vec<u8> {
        match self.iter().rposition(|&b| b == b'/') {
            Some(i) => self[..i].to_vec(),
            None => Vec::new(),
        }
    }
}

fn stream(cmds: &[Command<'_>]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    for c in cmds {
        w.write_command(c).unwrap();
    }
    w.into_inner()
}

/// 300 files alternating between two directories, then commands that touch
/// some of them again (by their own name, through a renamed directory, as
/// link or clone source), then more files.
fn busy_stream() -> Vec<u8> {
    let mut c = vec![
        Command::Subvol {
            path: b"p",
            uuid: U,
            ctransid: 1,
        },
        Command::Chown {
            path: b"",
            uid: 0,
            gid: 0,
        },
        Command::Chmod {
            path: b"",
            mode: 0o755,
        },
    ];
    for (ino, d) in [(257u64, &b"a"[..]), (258, b"b")] {
        let orphan = leak(format!("o{ino}-1-0"));
        c.push(Command::Mkdir { path: orphan, ino });
        c.push(Command::Rename {
            from: orphan,
            to: leak(d),
        });
        c.push(Command::Chown {
            path: leak(d),
            uid: 0,
            gid: 0,
        });
        c.push(Command::Chmod {
            path: leak(d),
            mode: 0o755,
        });
    }
    for i in 0..300usize {
        let dir = if i % 2 == 0 { "a" } else { "b" };
        new_file(
            &mut c,
            300 + i as u64,
            leak(format!("{dir}/f{i:03}")),
            &data(i),
        );
    }
    // A file the size of two blocks, to clone from.
    let two_blocks: Vec<u8> = (0..8192u32).map(|k| (k % 251) as u8).collect();
    new_file(&mut c, 700, b"b/src", &two_blocks);
    c.extend([
        Command::Write {
            path: b"a/f000",
            offset: data(0).len() as u64,
            data: b"tail",
        },
        utimes(b"a/f000", 5_000),
        Command::Link {
            path: b"b/hard",
            target: b"a/f002",
        },
        utimes(b"b", 1_100),
        Command::Rename {
            from: b"a",
            to: b"c",
        },
        Command::Chmod {
            path: b"c/f004",
            mode: 0o600,
        },
        Command::Truncate {
            path: b"b/f001",
            size: 1,
        },
        utimes(b"b/f001", 6_000),
        Command::Unlink { path: b"b/f003" },
        Command::Clone {
            offset: 0,
            len: 8192,
            path: b"c/f008",
            clone_uuid: U,
            clone_ctransid: 1,
            clone_path: b"b/src",
            clone_offset: 0,
        },
        utimes(b"c/f008", 7_000),
        Command::SetXattr {
            path: b"b/f005",
            name: b"user.x",
            data: b"1",
        },
    ]);
    for i in 300..320usize {
        let dir = if i % 2 == 0 { "c" } else { "b" };
        new_file(
            &mut c,
            400 + i as u64,
            leak(format!("{dir}/f{i:03}")),
            &data(i),
        );
    }
    c.extend([utimes(b"c", 8_000), utimes(b"b", 8_100), Command::End {}]);
    stream(&c)
}

fn mtime(p: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

/// What busy_stream() must leave, checked without any reference receive.
fn check_busy(root: &Path) {
    let f = |p: &str| root.join(p);
    for i in (0..320usize).filter(|i| ![0, 1, 3, 8].contains(i)) {
        let dir = match (i < 300, i % 2 == 0) {
            (_, true) => "c",
            (_, false) => "b",
        };
        let p = f(&format!("{dir}/f{i:03}"));
        let ino = if i < 300 { 300 + i } else { 400 + i } as i64;
        assert_eq!(fs::read(&p).unwrap(), data(i), "{}", p.display());
        assert_eq!(mtime(&p), (2_001 + ino, 123_456_789), "{}", p.display());
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, if i == 4 { 0o600 } else { 0o644 }, "{}", p.display());
    }
    let mut f0 = data(0);
    f0.extend_from_slice(b"tail");
    assert_eq!(fs::read(f("c/f000")).unwrap(), f0);
    assert_eq!(mtime(&f("c/f000")), (5_001, 123_456_789));
    assert_eq!(fs::read(f("b/f001")).unwrap(), &data(1)[..1]);
    assert_eq!(mtime(&f("b/f001")), (6_001, 123_456_789));
    assert!(!f("b/f003").exists());
    assert_eq!(
        fs::metadata(f("b/hard")).unwrap().ino(),
        fs::metadata(f("c/f002")).unwrap().ino()
    );
    assert_eq!(fs::metadata(f("b/hard")).unwrap().nlink(), 2);
    assert_eq!(
        fs::read(f("c/f008")).unwrap(),
        fs::read(f("b/src")).unwrap()
    );
    assert_eq!(mtime(&f("c/f008")), (7_001, 123_456_789));
    assert_eq!(
        xattr::get(f("b/f005"), "user.x").unwrap(),
        Some(b"1".to_vec())
    );
    assert!(!f("a").exists());
    assert_eq!(mtime(&f("c")), (8_001, 123_456_789));
    assert_eq!(mtime(&f("b")), (8_101, 123_456_789));
}

/// Entry names in the order the directory lists them.
fn listing(d: &Path) -> Vec<std::ffi::OsString> {
    fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect()
}

#[test]
fn later_commands_see_new_files_complete_on_tmpfs() {
    if !kernel_available("later_commands_see_new_files_complete_on_tmpfs") {
        return;
    }
    let fs = Tmpfs::new(64, "");
    let file = fs.scratch().join("busy.stream");
    fs::write(&file, busy_stream()).unwrap();
    for (dir, env) in [("threads", None), ("inline", Some("RRECEIVE_SYNC_CLOSE"))] {
        let dest = fs.mnt().join(dir);
        fs::create_dir(&dest).unwrap();
        let mut cmd = Process::new(rreceive_bin());
        cmd.arg("-f").arg(&file).arg(&dest);
        if let Some(e) = env {
            cmd.env(e, "1");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_busy(&dest.join("p"));
        assert!(plain_state(&dest.join("p")).unwrap().contains("complete=1"));
    }
}

#[test]
fn later_commands_see_new_files_complete_on_btrfs_in_stream_order() {
    if !kernel_available("later_commands_see_new_files_complete_on_btrfs_in_stream_order") {
        return;
    }
    let img = BtrfsImage::new(256, &[], "");
    let file = img.scratch().join("busy.stream");
    fs::write(&file, busy_stream()).unwrap();
    let (want, got) = (img.mnt().join("progs"), img.mnt().join("rreceive"));
    fs::create_dir(&want).unwrap();
    fs::create_dir(&got).unwrap();
    btrfs_receive(&want, &file);
    rreceive_ok(&got, &file, &[]);
    check_busy(&got.join("p"));
    assert_same_tree(
        "busy stream",
        &want.join("p"),
        &got.join("p"),
        Leeway {
            root_times: true,
            ..Leeway::default()
        },
    );
    // btrfs lists a directory in the order its entries were made: files
    // created in batches grouped by directory keep the stream's order.
    for d in ["", "b", "c"] {
        assert_eq!(
            listing(&got.join("p").join(d)),
            listing(&want.join("p").join(d)),
            "order of entries in '{d}'"
        );
    }
}

/// rreceive with resource limit `which` set to `limit` (for RLIMIT_FSIZE
/// with SIGXFSZ ignored, so a write past it fails with EFBIG).
fn rreceive_limited(
    args: &[&std::ffi::OsStr],
    which: libc::__rlimit_resource_t,
    limit: u64,
) -> Output {
    let mut cmd = Process::new(rreceive_bin());
    cmd.args(args);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let r = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(which, &r) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

#[test]
fn few_descriptors_are_enough() {
    if !kernel_available("few_descriptors_are_enough") {
        return;
    }
    // Files waiting to be finished or closed hold descriptors; with few to
    // spare, creating waits for them instead of failing.
    let fs = Tmpfs::new(64, "");
    let mut c = vec![Command::Subvol {
        path: b"n",
        uuid: U,
        ctransid: 1,
    }];
    for i in 0..1000u64 {
        new_file(&mut c, 300 + i, leak(format!("f{i:04}")), &data(i as usize));
    }
    c.push(Command::End {});
    let file = fs.scratch().join("many.stream");
    fs::write(&file, stream(&c)).unwrap();
    let dest = fs.mnt();
    let out = rreceive_limited(
        &["-f".as_ref(), file.as_os_str(), dest.as_os_str()],
        libc::RLIMIT_NOFILE,
        40,
    );
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..1000usize {
        let p = dest.join(format!("n/f{i:04}"));
        assert_eq!(fs::read(&p).unwrap(), data(i));
        assert_eq!(mtime(&p), (2_301 + i as i64, 123_456_789));
    }
}

#[test]
fn a_write_failing_on_the_finishing_thread_names_its_command() {
    if !kernel_available("a_write_failing_on_the_finishing_thread_names_its_command") {
        return;
    }
    let fs = Tmpfs::new(64, "");
    let mut c = vec![Command::Subvol {
        path: b"e",
        uuid: U,
        ctransid: 1,
    }];
    new_file(&mut c, 257, b"one", b"first");
    new_file(&mut c, 258, b"two", b"second");
    let bad = c
        .iter()
        .rposition(|x| matches!(x, Command::Write { .. }))
        .unwrap();
    // Past the 1 MiB limit.
    c[bad] = Command::Write {
        path: b"two",
        offset: 2 << 20,
        data: b"second",
    };
    new_file(&mut c, 259, b"three", b"third");
    c.push(Command::End {});
    let file = fs.scratch().join("efbig.stream");
    fs::write(&file, stream(&c)).unwrap();
    // Commands are numbered from 1.
    let want = format!("'two' (command #{} WRITE at byte", bad + 1);
    for (dir, extra) in [("stop", None), ("go-on", Some("-E0"))] {
        let dest = fs.mnt().join(dir);
        fs::create_dir(&dest).unwrap();
        let mut args: Vec<&std::ffi::OsStr> = vec!["-f".as_ref(), file.as_os_str()];
        if let Some(e) = extra {
            args.push(e.as_ref());
        }
        args.push(dest.as_os_str());
        let out = rreceive_limited(&args, libc::RLIMIT_FSIZE, 1 << 20);
        assert_no_panic(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{dir}: {err}");
        assert!(err.contains(&want), "{dir}: {want:?} not in:\n{err}");
        assert_eq!(err.matches(&want).count(), 1, "{dir}: {err}");
        let sv = dest.join("e");
        assert!(
            plain_state(&sv).unwrap().contains("complete=0"),
            "{dir}: marked complete"
        );
        assert_eq!(fs::read(sv.join("one")).unwrap(), b"first");
        if extra.is_some() {
            // The other files are whole.
            assert_eq!(fs::read(sv.join("three")).unwrap(), b"third");
            assert_eq!(mtime(&sv.join("three")), (2_260, 123_456_789));
        }
    }
}
