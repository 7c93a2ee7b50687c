//! Several subvolumes in one send, as `btrfs send` sends them (root, loop
//! devices, the btrfs module): `-p P A B` sends every one against P, `-c`
//! alone picks each one's parent among the clone sources (which grow by
//! each one sent), `-e` makes one stream of them all. rsend's stream must
//! be the kernel's for the same mounted snapshots, but for the documented
//! root UTIMES before each subvolume's end; `btrfs receive` and rreceive
//! take it, and every received subvolume equals its snapshot.
//!
//! Without a kernel this prints one SKIP line (or fails under
//! `RSEND_REQUIRE_KERNEL=1`).

mod common;

use std::path::Path;
use std::process::Command;

use btrfs_stream::{Command as Cmd, Reader};
use common::receivers::{manifest_of_tree, rreceive_bin};
use testkit::{kernel_available, run, sh, BtrfsImage};

/// One frame of a stream: its header, or one command (kind, root-UTIMES
/// flag, bytes).
#[derive(Debug, PartialEq)]
enum Frame {
    Header(Vec<u8>),
    Command {
        kind: btrfs_stream::CommandKind,
        root_utimes: bool,
        bytes: Vec<u8>,
    },
}

/// The frames of the (possibly concatenated) streams in `s`.
fn frames(s: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < s.len() {
        let header = btrfs_stream::STREAM_HEADER_LEN;
        out.push(Frame::Header(s[at..at + header].to_vec()));
        let mut r = Reader::new(&s[at..]);
        let mut pos = r.position();
        while let Some(c) = r.next_command().expect("a well-formed stream") {
            let (kind, root_utimes) = (
                c.kind(),
                matches!(&c, Cmd::Utimes { path, .. } if path.is_empty()),
            );
            let end = r.position();
            out.push(Frame::Command {
                kind,
                root_utimes,
                bytes: s[at + pos as usize..at + end as usize].to_vec(),
            });
            pos = end;
            if kind == btrfs_stream::CommandKind::End {
                break;
            }
        }
        at += pos as usize;
    }
    out
}

/// Whether `ours` is `kernel`, frame for frame, but for UTIMES of a
/// subvolume's root that the kernel leaves out: each just before an END,
/// the next subvolume's first command or the end of the stream.
fn same_but_root_utimes(ours: &[u8], kernel: &[u8]) -> Result<(), String> {
    use btrfs_stream::CommandKind as K;
    let (ours, kernel) = (frames(ours), frames(kernel));
    let boundary = |f: Option<&Frame>| match f {
        None | Some(Frame::Header(_)) => true,
        Some(Frame::Command { kind, .. }) => matches!(kind, K::End | K::Subvol | K::Snapshot),
    };
    let (mut i, mut j) = (0, 0);
    while i < ours.len() {
        if j < kernel.len() && ours[i] == kernel[j] {
            i += 1;
            j += 1;
            continue;
        }
        match &ours[i] {
            Frame::Command {
                root_utimes: true, ..
            } if boundary(ours.get(i + 1)) => i += 1,
            f => {
                return Err(format!(
                    "frame {i} of ours ({f:?}) differs from the kernel's frame {j} ({:?})",
                    kernel.get(j).map(|k| match k {
                        Frame::Header(_) => "header".to_owned(),
                        Frame::Command { kind, .. } => format!("{kind:?}"),
                    })
                ))
            }
        }
    }
    if j != kernel.len() {
        return Err(format!("the kernel's has {} more frames", kernel.len() - j));
    }
    Ok(())
}

/// Snapshots P, A and B of one subvolume with changes between them (new,
/// edited, renamed, deleted and hard-linked files, a directory tree moved),
/// and X, a snapshot of another subvolume.
fn populate(mnt: &Path) {
    sh(
        mnt,
        "btrfs -q subvolume create vol
         btrfs -q subvolume create other
         mkdir -p vol/d/e vol/keep
         head -c 300000 /dev/urandom > vol/d/big
         for i in $(seq 1 40); do echo file $i > vol/d/e/f$i; done
         echo kept > vol/keep/k
         echo other > other/o
         btrfs -q subvolume snapshot -r vol P
         btrfs -q subvolume snapshot -r other X
         echo more >> vol/d/e/f3
         mv vol/d/e/f4 vol/keep/moved
         rm vol/d/e/f5
         ln vol/keep/k vol/d/link
         head -c 200000 /dev/urandom > vol/new
         btrfs -q subvolume snapshot -r vol A
         mv vol/d vol/keep/d2
         dd if=/dev/urandom of=vol/keep/d2/big bs=4096 count=3 seek=10 conv=notrunc status=none
         rm vol/new
         mkdir vol/late && echo late > vol/late/x
         btrfs -q subvolume snapshot -r vol B
         sync",
    );
}

/// The kernel's `btrfs send ARGS` of the mounted snapshots.
fn kernel_send(mnt: &Path, args: &[&str]) -> Vec<u8> {
    let out = mnt.join("../kernel.stream");
    run(Command::new("btrfs")
        .arg("-q")
        .arg("send")
        .args(args)
        .arg("-f")
        .arg(&out)
        .current_dir(mnt));
    std::fs::read(&out).unwrap()
}

/// rsend's stream with the same ARGS (mounted paths, no -d).
fn rsend(mnt: &Path, args: &[&str]) -> Vec<u8> {
    let out = run(Command::new(env!("CARGO_BIN_EXE_rsend"))
        .arg("-q")
        .args(args)
        .current_dir(mnt));
    out.stdout
}

/// Receives `stream` with `btrfs receive` into a fresh directory of `dest`
/// and with rreceive into another, then compares each received subvolume
/// in `names` with its snapshot in `mnt`.
fn receive_both(stream: &[u8], mnt: &Path, dest: &Path, case: &str, names: &[&str]) {
    let file = dest.join(format!("{case}.stream"));
    std::fs::write(&file, stream).unwrap();
    for (who, how) in [("btrfs", 0), ("rreceive", 1)] {
        let into = dest.join(format!("{case}-{who}"));
        std::fs::create_dir(&into).unwrap();
        // The parents a stream names, received first from full sends.
        sh(
            dest,
            &format!(
                "{} -q {}/P | {} {}",
                env!("CARGO_BIN_EXE_rsend"),
                mnt.display(),
                if how == 0 {
                    "btrfs receive -q".to_owned()
                } else {
                    format!("{} -q", rreceive_bin().display())
                },
                into.display()
            ),
        );
        let mut cmd = if how == 0 {
            let mut c = Command::new("btrfs");
            c.args(["receive", "-q"]);
            c
        } else {
            let mut c = Command::new(rreceive_bin());
            c.arg("-q");
            c
        };
        let out = cmd.arg("-f").arg(&file).arg(&into).output().unwrap();
        assert!(
            out.status.success(),
            "{case}: {who} receive failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for n in names {
            let want = manifest_of_tree(&mnt.join(n));
            let got = manifest_of_tree(&into.join(n));
            assert!(
                want.rows == got.rows && want.links == got.links,
                "{case}: {n} received by {who} differs from the snapshot"
            );
        }
    }
}

#[test]
fn several_subvolumes_are_sent_as_btrfs_send_sends_them() {
    if !kernel_available("several_subvolumes_are_sent_as_btrfs_send_sends_them") {
        return;
    }
    let src = BtrfsImage::new(512, &[], "");
    let dst = BtrfsImage::new(512, &[], "");
    let mnt = src.mnt();
    populate(mnt);
    // (name, args, the subvolumes each stream makes, received after a full P)
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("parent-two", &["-p", "P", "A", "B"], &["A", "B"]),
        ("parent-two-e", &["-e", "-p", "P", "A", "B"], &["A", "B"]),
        ("clone-only", &["-c", "P", "A", "B"], &["A", "B"]),
        ("clones-two", &["-c", "P", "-c", "A", "B"], &["B"]),
        ("full-two", &["A", "X"], &["A", "X"]),
        ("full-two-e", &["-e", "A", "X"], &["A", "X"]),
        ("no-data", &["--no-data", "-p", "P", "A"], &[]),
        ("v2", &["--proto", "2", "-p", "P", "A", "B"], &["A", "B"]),
    ];
    // What is said on standard error: the same lines as btrfs send's.
    let said = |prog: &Path| {
        let out = run(Command::new(prog)
            .args(["send", "-p", "P", "A", "B", "-f", "/dev/null"])
            .current_dir(mnt));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let front = dst.mnt().join("as-btrfs");
    std::fs::write(
        &front,
        format!(
            "#!/bin/sh\nshift\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_rsend")
        ),
    )
    .unwrap();
    run(Command::new("chmod").arg("+x").arg(&front));
    let btrfs = testkit::which("btrfs").expect("btrfs");
    assert_eq!(
        said(&front),
        said(&btrfs),
        "rsend's messages against btrfs send's"
    );
    for (case, args, names) in cases {
        let kernel = kernel_send(mnt, args);
        let ours = rsend(mnt, args);
        if let Err(e) = same_but_root_utimes(&ours, &kernel) {
            panic!(
                "{case} (rsend {}): {e}; {} bytes against the kernel's {}",
                args.join(" "),
                ours.len(),
                kernel.len()
            );
        }
        if !names.is_empty() {
            receive_both(&ours, mnt, dst.mnt(), case, names);
        }
    }
}

#[test]
fn compressed_data_of_several_subvolumes_is_the_kernels() {
    if !kernel_available("compressed_data_of_several_subvolumes_is_the_kernels") {
        return;
    }
    let src = BtrfsImage::new(512, &[], "compress=zstd");
    let mnt = src.mnt();
    populate(mnt);
    sh(
        mnt,
        "btrfs -q subvolume snapshot vol vol2
         (yes compressible || true) | head -c 2000000 > vol2/text
         btrfs -q subvolume snapshot -r vol2 C
         sync",
    );
    for args in [
        &["--compressed-data", "-p", "P", "A", "C"][..],
        &["--compressed-data", "-e", "A", "C"][..],
    ] {
        let kernel = kernel_send(mnt, args);
        let ours = rsend(mnt, args);
        if let Err(e) = same_but_root_utimes(&ours, &kernel) {
            panic!("rsend {}: {e}", args.join(" "));
        }
    }
}

#[test]
fn the_frame_comparison_allows_only_root_utimes_at_a_boundary() {
    let a = frames_fixture(false);
    let b = frames_fixture(true);
    assert!(same_but_root_utimes(&a, &a).is_ok());
    assert!(same_but_root_utimes(&b, &a).is_ok());
    assert!(same_but_root_utimes(&a, &b).is_err());
}

/// A small v1 stream: SUBVOL, MKFILE, (a root UTIMES,) END.
fn frames_fixture(root_utimes: bool) -> Vec<u8> {
    let mut w = btrfs_stream::Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::Subvol {
        path: b"s",
        uuid: uuid::Uuid::from_bytes([1; 16]),
        ctransid: 7,
    })
    .unwrap();
    w.write_command(&Cmd::Mkfile {
        path: b"f",
        ino: 257,
    })
    .unwrap();
    if root_utimes {
        let t = btrfs_stream::Timespec { sec: 1, nsec: 2 };
        w.write_command(&Cmd::Utimes {
            path: b"",
            atime: t,
            mtime: t,
            ctime: t,
            otime: None,
        })
        .unwrap();
    }
    w.write_command(&Cmd::End {}).unwrap();
    w.into_inner()
}
