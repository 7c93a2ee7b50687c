//! Streams cut short: every cut gives exit code 1, never a panic, and
//! leaves the subvolume marked incomplete, which is then refused as a
//! parent or clone source unless --force is given.

mod common;

use std::fs;
use std::path::Path;

use btrfs_stream::{Command, Reader, Writer};
use common::*;
use testkit::{kernel_available, BtrfsImage, Rng, Tmpfs};

/// Offsets to cut `data` at: every command boundary, the middle of every
/// command, and inside the stream header.
fn cut_points(data: &[u8]) -> Vec<usize> {
    let mut v = vec![0, 5, 16];
    let mut r = Reader::from_bytes(data);
    while let Some((_, pos)) = r.next_framed().unwrap() {
        v.push(pos.offset as usize);
        v.push((pos.offset + pos.len / 2) as usize);
        v.push((pos.offset + 3) as usize);
    }
    v.retain(|&c| c < data.len());
    v.sort();
    v.dedup();
    v
}

/// A cut stream stops rreceive with exit 3 (resumable, or nothing kept),
/// or exit 1 saying why what is left cannot be resumed.
fn assert_stopped(out: &std::process::Output, sv: &Path, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(3) if sv.exists() => assert!(err.contains("stopped after command"), "{what}: {err}"),
        // Cut at byte 0: no input at all, the sender failed.
        Some(3) => assert!(
            err.contains("receive the same stream again")
                || err.contains("nothing was sent: the input is empty"),
            "{what}: {err}"
        ),
        Some(1) => assert!(err.contains("cannot be resumed"), "{what}: {err}"),
        c => panic!("{what}: exit {c:?}: {err}"),
    }
}

fn cut_and_receive(root: &Path, name: &str, subvol: &str, every: usize) -> usize {
    let data = fs::read(testdata().join("kernel").join(format!("{name}.stream"))).unwrap();
    let mut n = 0;
    let mut rng = Rng(7);
    for (i, cut) in cut_points(&data).into_iter().enumerate() {
        if every > 1 && i % every != rng.below(every as u64) as usize {
            continue;
        }
        let dest = root.join(format!("{name}-{cut}"));
        fs::create_dir(&dest).unwrap();
        let file = root.join("cut.stream");
        fs::write(&file, &data[..cut]).unwrap();
        let out = rreceive(&[dest.as_os_str()], &file);
        assert_no_panic(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        let sv = dest.join(subvol);
        assert_stopped(&out, &sv, &format!("{name} cut at {cut}"));
        if sv.exists() {
            let st = plain_state(&sv).unwrap_or_default();
            assert!(
                st.contains("complete=0"),
                "{name} cut at {cut}: state {st:?}"
            );
            assert!(
                err.contains("left incomplete"),
                "{name} cut at {cut}: {err}"
            );
        }
        fs::remove_dir_all(&dest).unwrap();
        n += 1;
    }
    n
}

#[test]
fn streams_cut_at_any_offset_fail_cleanly_and_stay_incomplete() {
    if !kernel_available("streams_cut_at_any_offset_fail_cleanly_and_stay_incomplete") {
        return;
    }
    let t = Tmpfs::new(256, "");
    let mut n = cut_and_receive(t.mnt(), "full-v1", "s1", 1);
    n += cut_and_receive(t.mnt(), "full-v2-compressed", "c1", 1);
    n += cut_and_receive(t.mnt(), "full-v1-subvol", "s3", 1);
    println!("{n} cut streams: exit 3 or 1, no panic, subvolume incomplete");
    assert!(n > 500);
}

/// A stream whose END is missing.
fn without_end(name: &str) -> Vec<u8> {
    let data = fs::read(testdata().join("kernel").join(format!("{name}.stream"))).unwrap();
    let mut r = Reader::from_bytes(&data[..]);
    let mut end = data.len();
    while let Some((c, pos)) = r.next_framed().unwrap() {
        if matches!(c, Command::End {}) {
            end = pos.offset as usize;
        }
    }
    data[..end].to_vec()
}

fn incomplete_parent_is_refused(dest: &Path, scratch: &Path, plain: bool) {
    let cut = scratch.join("no-end.stream");
    fs::write(&cut, without_end("full-v1")).unwrap();
    let out = rreceive(&[dest.as_os_str()], &cut);
    assert_stopped(&out, &dest.join("s1"), "without END");
    if plain {
        assert!(plain_state(&dest.join("s1"))
            .unwrap()
            .contains("complete=0"));
    } else {
        let (ruuid, ro) = subvol_show(&dest.join("s1"));
        assert_eq!((ruuid.as_str(), ro), ("-", false), "btrfs: incomplete s1");
    }

    // As a parent.
    let incr = testdata().join("kernel/incr-v1.stream");
    let out = rreceive(&[dest.as_os_str()], &incr);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is incomplete") && err.contains("--force"),
        "{err}"
    );
    assert!(!dest.join("s2").exists());

    // As a clone source.
    let s1_uuid = stream_uuids(&testdata().join("kernel/full-v1.stream"))[0];
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    for c in [
        Command::Subvol {
            path: b"cl",
            uuid: uuid::Uuid::from_u128(5),
            ctransid: 1,
        },
        Command::Mkfile {
            path: b"f",
            ino: 257,
        },
        Command::Clone {
            offset: 0,
            len: 16384,
            path: b"f",
            clone_uuid: s1_uuid,
            clone_ctransid: 9,
            clone_path: b"clone-src.bin",
            clone_offset: 0,
        },
        Command::End {},
    ] {
        w.write_command(&c).unwrap();
    }
    let clone_stream = scratch.join("clone.stream");
    fs::write(&clone_stream, w.into_inner()).unwrap();
    let out = rreceive(&[dest.as_os_str()], &clone_stream);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("clone source") && err.contains("incomplete"),
        "{err}"
    );

    // --force takes both (rmdir removes an empty btrfs subvolume too).
    fs::remove_dir_all(dest.join("cl")).unwrap();
    rreceive_ok(dest, &clone_stream, &["--force"]);
    assert_eq!(fs::metadata(dest.join("cl/f")).unwrap().len(), 16384);
    rreceive_ok(dest, &incr, &["--force"]);
    assert!(dest.join("s2").is_dir());
}

#[test]
fn incomplete_subvolume_is_refused_as_parent_and_clone_source_on_tmpfs() {
    if !kernel_available("incomplete_subvolume_is_refused_as_parent_and_clone_source_on_tmpfs") {
        return;
    }
    let t = Tmpfs::new(128, "");
    let dest = t.mnt().join("dest");
    fs::create_dir(&dest).unwrap();
    incomplete_parent_is_refused(&dest, t.mnt(), true);
}

#[test]
fn incomplete_subvolume_is_refused_as_parent_and_clone_source_on_btrfs() {
    if !kernel_available("incomplete_subvolume_is_refused_as_parent_and_clone_source_on_btrfs") {
        return;
    }
    let img = BtrfsImage::new(256, &[], "");
    let dest = img.mnt().join("dest");
    fs::create_dir(&dest).unwrap();
    incomplete_parent_is_refused(&dest, img.scratch(), false);
}

#[test]
fn streams_cut_short_onto_btrfs_leave_a_writable_unreceived_subvolume() {
    if !kernel_available("streams_cut_short_onto_btrfs_leave_a_writable_unreceived_subvolume") {
        return;
    }
    let img = BtrfsImage::new(256, &[], "");
    let data = fs::read(testdata().join("kernel/full-v2-compressed.stream")).unwrap();
    let cuts = cut_points(&data);
    for (i, &cut) in cuts.iter().enumerate().filter(|(i, _)| i % 37 == 5) {
        let dest = img.mnt().join(format!("d{i}"));
        fs::create_dir(&dest).unwrap();
        let file = img.scratch().join("cut.stream");
        fs::write(&file, &data[..cut]).unwrap();
        let out = rreceive(&[dest.as_os_str()], &file);
        assert_no_panic(&out);
        assert_stopped(&out, &dest.join("c1"), &format!("cut at {cut}"));
        if dest.join("c1").exists() {
            let (ruuid, ro) = subvol_show(&dest.join("c1"));
            assert_eq!((ruuid.as_str(), ro), ("-", false), "cut at {cut}");
            assert!(plain_state(&dest.join("c1"))
                .unwrap()
                .contains("complete=0"));
        }
    }
}
