//! Hostile streams: each tries to read, change or create something outside
//! DEST and must be refused with an error naming the command and path,
//! while a canary tree next to DEST stays exactly as it was (content,
//! mode, owner, times including ctime, xattrs, link counts, listing).

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command as Process;

use btrfs_stream::{Command, Timespec, Uuid, Writer};
use common::*;
use testkit::{kernel_available, BtrfsImage, Tmpfs};

const OWN: Uuid = Uuid::from_u128(0x1111_2222_3333_4444_5555_6666_7777_8888);

fn subvol(name: &[u8]) -> Command<'_> {
    Command::Subvol {
        path: name,
        uuid: OWN,
        ctransid: 7,
    }
}

/// A v2 stream of `cmds` (SUBVOL first unless given) and END.
fn stream(cmds: &[Command<'_>]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new());
    w.start_stream(2).unwrap();
    for c in cmds {
        w.write_command(c).unwrap();
    }
    w.write_command(&Command::End {}).unwrap();
    w.into_inner()
}

const T: Timespec = Timespec {
    sec: 1_000_000_000,
    nsec: 5,
};

/// The whole state of the canary tree: every inode field, ctime included.
fn canary_state(root: &Path) -> BTreeMap<Vec<u8>, (Entry, i64, i64)> {
    walk(root)
        .into_iter()
        .map(|(p, e)| {
            let full = if p.is_empty() {
                root.to_path_buf()
            } else {
                root.join(std::ffi::OsStr::from_bytes(&p))
            };
            let md = fs::symlink_metadata(&full).unwrap();
            (p, (e, md.ctime(), md.ctime_nsec()))
        })
        .collect()
}

/// Files, a directory, a symlink target and xattrs outside DEST.
fn make_canary(dir: &Path) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("secret.txt"), b"the canary's secret\n").unwrap();
    fs::write(dir.join("sub/inner.txt"), b"inner\n").unwrap();
    fs::set_permissions(dir.join("secret.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    xattr::set(dir.join("secret.txt"), "user.canary", b"1").unwrap();
    symlink("secret.txt", dir.join("link-to-secret")).unwrap();
}

fn mkfile(p: &[u8]) -> Command<'_> {
    Command::Mkfile { path: p, ino: 257 }
}

fn link_to(t: &[u8]) -> Command<'_> {
    Command::Symlink {
        path: b"l",
        ino: 258,
        target: t,
    }
}

fn clone<'a>(p: &'a [u8], uuid: Uuid, src: &'a [u8]) -> Command<'a> {
    Command::Clone {
        offset: 0,
        len: 4096,
        path: p,
        clone_uuid: uuid,
        clone_ctransid: 1,
        clone_path: src,
        clone_offset: 0,
    }
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    /// A fragment the error message must hold.
    expect: &'static str,
}

fn cases(canary: &Path) -> Vec<Case> {
    let abs = |rel: &str| canary.join(rel).as_os_str().as_bytes().to_vec();
    let secret = abs("secret.txt");
    let cdir = canary.as_os_str().as_bytes().to_vec();
    let up = b"../../canary/secret.txt".to_vec();
    let sv = |n: &'static str| n.as_bytes();
    let mut v = Vec::new();
    let mut add = |name: &'static str, expect: &'static str, bytes: Vec<u8>| {
        v.push(Case {
            name,
            bytes,
            expect,
        })
    };
    let dir_link = Command::Symlink {
        path: b"d",
        ino: 259,
        target: &cdir,
    };
    let setx = |p: &'static [u8]| Command::SetXattr {
        path: p,
        name: b"user.evil",
        data: b"x",
    };

    add(
        "mkfile_dotdot",
        "'..'",
        stream(&[subvol(sv("h01")), mkfile(b"../../canary/new")]),
    );
    add(
        "mkfile_absolute",
        "absolute",
        stream(&[subvol(sv("h02")), mkfile(&abs("new"))]),
    );
    add(
        "mkfile_through_symlinked_dir",
        "resolve",
        stream(&[subvol(sv("h03")), dir_link.clone(), mkfile(b"d/new")]),
    );
    add(
        "write_through_symlink",
        "symlink",
        stream(&[
            subvol(sv("h04")),
            link_to(&secret),
            Command::Write {
                path: b"l",
                offset: 0,
                data: b"pwned",
            },
        ]),
    );
    add(
        "truncate_through_symlink",
        "symlink",
        stream(&[
            subvol(sv("h05")),
            link_to(&secret),
            Command::Truncate {
                path: b"l",
                size: 0,
            },
        ]),
    );
    add(
        "write_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h06")),
            dir_link.clone(),
            Command::Write {
                path: b"d/secret.txt",
                offset: 0,
                data: b"pwned",
            },
        ]),
    );
    add(
        "truncate_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h07")),
            dir_link.clone(),
            Command::Truncate {
                path: b"d/secret.txt",
                size: 1,
            },
        ]),
    );
    add(
        "chmod_symlink_to_outside",
        "symlink",
        stream(&[
            subvol(sv("h08")),
            link_to(&secret),
            Command::Chmod {
                path: b"l",
                mode: 0o777,
            },
        ]),
    );
    add(
        "chmod_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h09")),
            dir_link.clone(),
            Command::Chmod {
                path: b"d/secret.txt",
                mode: 0o777,
            },
        ]),
    );
    add(
        "chown_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h10")),
            dir_link.clone(),
            Command::Chown {
                path: b"d/secret.txt",
                uid: 4321,
                gid: 4321,
            },
        ]),
    );
    add(
        "utimes_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h11")),
            dir_link.clone(),
            Command::Utimes {
                path: b"d/secret.txt",
                atime: T,
                mtime: T,
                ctime: T,
                otime: None,
            },
        ]),
    );
    add(
        "user_xattr_on_symlink_to_outside",
        "set xattr",
        stream(&[subvol(sv("h12")), link_to(&secret), setx(b"l")]),
    );
    add(
        "set_xattr_below_symlinked_dir",
        "resolve",
        stream(&[subvol(sv("h13")), dir_link.clone(), setx(b"d/secret.txt")]),
    );
    add(
        "remove_xattr_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h14")),
            dir_link.clone(),
            Command::RemoveXattr {
                path: b"d/secret.txt",
                name: b"user.canary",
            },
        ]),
    );
    add(
        "rename_out_with_dotdot",
        "'..'",
        stream(&[
            subvol(sv("h15")),
            mkfile(b"f"),
            Command::Rename {
                from: b"f",
                to: b"../../canary/planted",
            },
        ]),
    );
    add(
        "rename_in_through_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h16")),
            dir_link.clone(),
            Command::Rename {
                from: b"d/secret.txt",
                to: b"stolen",
            },
        ]),
    );
    add(
        "rename_out_through_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h17")),
            mkfile(b"f"),
            Command::Chmod {
                path: b"f",
                mode: 0o644,
            },
            dir_link.clone(),
            Command::Rename {
                from: b"f",
                to: b"d/planted",
            },
        ]),
    );
    add(
        "link_to_outside_with_dotdot",
        "'..'",
        stream(&[
            subvol(sv("h18")),
            Command::Link {
                path: b"hl",
                target: &up,
            },
        ]),
    );
    add(
        "link_to_outside_through_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h19")),
            dir_link.clone(),
            Command::Link {
                path: b"hl",
                target: b"d/secret.txt",
            },
        ]),
    );
    add(
        "link_to_absolute_path",
        "absolute",
        stream(&[
            subvol(sv("h20")),
            Command::Link {
                path: b"hl",
                target: &secret,
            },
        ]),
    );
    add(
        "clone_from_symlink_to_outside",
        "symlink",
        stream(&[
            subvol(sv("h21")),
            mkfile(b"f"),
            link_to(&secret),
            clone(b"f", OWN, b"l"),
        ]),
    );
    add(
        "clone_from_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h22")),
            mkfile(b"f"),
            dir_link.clone(),
            clone(b"f", OWN, b"d/secret.txt"),
        ]),
    );
    add(
        "clone_from_unknown_subvolume",
        "clone source subvolume",
        stream(&[
            subvol(sv("h23")),
            mkfile(b"f"),
            clone(b"f", Uuid::from_u128(99), b"secret.txt"),
        ]),
    );
    add(
        "clone_path_with_dotdot",
        "'..'",
        stream(&[subvol(sv("h24")), mkfile(b"f"), clone(b"f", OWN, &up)]),
    );
    add(
        "nul_byte_in_path",
        "NUL",
        stream(&[subvol(sv("h25")), mkfile(b"a\0b")]),
    );
    add(
        "empty_component",
        "empty component",
        stream(&[subvol(sv("h26")), mkfile(b"a//b")]),
    );
    add(
        "dot_component",
        "'.'",
        stream(&[subvol(sv("h27")), mkfile(b"./x")]),
    );
    add(
        "empty_path",
        "empty path",
        stream(&[subvol(sv("h28")), mkfile(b"")]),
    );
    add("subvol_name_dotdot", "'..'", stream(&[subvol(b"..")]));
    add(
        "subvol_name_two_components",
        "single component",
        stream(&[subvol(b"a/b")]),
    );
    add("subvol_name_absolute", "absolute", stream(&[subvol(&cdir)]));
    add(
        "snapshot_of_unknown_parent",
        "not found",
        stream(&[Command::Snapshot {
            path: b"h29",
            uuid: OWN,
            ctransid: 2,
            clone_uuid: Uuid::from_u128(42),
            clone_ctransid: 1,
        }]),
    );
    add(
        "mark_itself_complete",
        "reserved",
        stream(&[
            subvol(sv("h30")),
            Command::SetXattr {
                path: b"",
                name: b"user.rreceive.subvol",
                data: b"v1 received_uuid=11112222-3333-4444-5555-666677778888 ctransid=7 \
                        parent_uuid=- parent_ctransid=0 complete=1\n",
            },
        ]),
    );
    add(
        "write_to_device_node",
        "not a regular file",
        stream(&[
            subvol(sv("h31")),
            Command::Mknod {
                path: b"dev",
                ino: 257,
                rdev: 0x103,
                mode: 0o20644,
            },
            Command::Write {
                path: b"dev",
                offset: 0,
                data: b"x",
            },
        ]),
    );
    add(
        "symlink_to_dotdot_then_create_below",
        "resolve",
        stream(&[
            subvol(sv("h32")),
            Command::Symlink {
                path: b"up",
                ino: 257,
                target: b"..",
            },
            mkfile(b"up/escaped"),
        ]),
    );
    add(
        "unlink_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h33")),
            dir_link.clone(),
            Command::Unlink {
                path: b"d/secret.txt",
            },
        ]),
    );
    add(
        "rmdir_below_symlinked_dir",
        "resolve",
        stream(&[
            subvol(sv("h34")),
            dir_link,
            Command::Rmdir { path: b"d/sub" },
        ]),
    );
    // Broken framing.
    let mut bad_crc = stream(&[subvol(sv("h35")), mkfile(b"f")]);
    let n = bad_crc.len();
    bad_crc[n - 12] ^= 0x40;
    add("bad_crc", "crc32c mismatch", bad_crc);
    let mut huge = stream(&[subvol(sv("h36"))]);
    let at = huge.len() - 10;
    huge[at..at + 4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    huge.extend_from_slice(&[0u8; 4096]);
    add("huge_length_field", "exceeds the limit", huge);
    let mut rng = testkit::Rng(0x5eed);
    add(
        "garbage",
        "bad stream magic",
        (0..4096).map(|_| rng.next_u64() as u8).collect(),
    );
    v
}

fn run_suite(scratch: &Path) -> usize {
    let canary = scratch.join("canary");
    let dest = scratch.join("dest");
    make_canary(&canary);
    fs::create_dir(&dest).unwrap();
    // The first look updates atimes (relatime); compare from the second.
    canary_state(&canary);
    let before = canary_state(&canary);
    let listing = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let scratch_before = listing(scratch);
    let cs = cases(&canary);
    assert!(cs.len() >= 20);
    for case in &cs {
        let file = scratch.join(format!("{}.stream", case.name));
        fs::write(&file, &case.bytes).unwrap();
        let out = rreceive(&["-f".as_ref(), file.as_os_str(), dest.as_os_str()], &file);
        fs::remove_file(&file).unwrap();
        assert_no_panic(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: not refused:\n{err}",
            case.name
        );
        assert!(
            err.contains(case.expect) && err.contains("rreceive: error:"),
            "{}: message lacks {:?}:\n{err}",
            case.name,
            case.expect
        );
        assert!(
            err.contains("(command #") || err.contains("at byte"),
            "{}: message names no command:\n{err}",
            case.name
        );
        let after = canary_state(&canary);
        assert!(
            after == before,
            "{}: the canary outside DEST changed:\n{:?}",
            case.name,
            differences(
                &before
                    .iter()
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect(),
                &after
                    .iter()
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect(),
                Leeway::default()
            )
        );
        assert_eq!(
            listing(scratch),
            scratch_before,
            "{}: a new entry next to DEST",
            case.name
        );
        assert_no_secret_in(&dest, case.name);
    }
    cs.len()
}

/// No file under DEST holds the canary's data (nothing was read from it).
fn assert_no_secret_in(dest: &Path, case: &str) {
    for (p, e) in walk(dest) {
        if e.kind == "reg" {
            let data = fs::read(dest.join(std::ffi::OsStr::from_bytes(&p))).unwrap();
            assert!(
                !data.windows(6).any(|w| w == b"canary"),
                "{case}: {p:?} holds the canary's data"
            );
        }
    }
}

/// Commands on a symlink that points outside act on the symlink itself.
fn run_symlink_metadata(scratch: &Path) {
    let canary = scratch.join("canary");
    let dest = scratch.join("dest2");
    fs::create_dir(&dest).unwrap();
    canary_state(&canary);
    let before = canary_state(&canary);
    let secret = canary.join("secret.txt").as_os_str().as_bytes().to_vec();
    let bytes = stream(&[
        subvol(b"s"),
        Command::Symlink {
            path: b"l",
            ino: 257,
            target: &secret,
        },
        Command::Chown {
            path: b"l",
            uid: 4321,
            gid: 4321,
        },
        Command::SetXattr {
            path: b"l",
            name: b"trusted.on-the-link",
            data: b"1",
        },
        Command::Utimes {
            path: b"l",
            atime: T,
            mtime: T,
            ctime: T,
            otime: None,
        },
        Command::Link {
            path: b"hl",
            target: b"l",
        },
    ]);
    let file = scratch.join("meta.stream");
    fs::write(&file, bytes).unwrap();
    rreceive_ok(&dest, &file, &[]);
    let l = dest.join("s/l");
    let md = fs::symlink_metadata(&l).unwrap();
    assert!(md.file_type().is_symlink());
    assert_eq!(
        (md.uid(), md.gid(), md.mtime(), md.nlink()),
        (4321, 4321, T.sec, 2)
    );
    assert_eq!(
        xattr::get(&l, "trusted.on-the-link").unwrap(),
        Some(b"1".to_vec())
    );
    assert!(canary_state(&canary) == before, "the canary changed");
}

#[test]
fn hostile_streams_are_refused_onto_a_directory() {
    if !kernel_available("hostile_streams_are_refused_onto_a_directory") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = run_suite(tmp.path());
    run_symlink_metadata(tmp.path());
    println!("{n} hostile streams refused, canary unchanged");
}

#[test]
fn hostile_streams_are_refused_onto_tmpfs() {
    if !kernel_available("hostile_streams_are_refused_onto_tmpfs") {
        return;
    }
    let t = Tmpfs::new(64, "");
    run_suite(t.mnt());
    run_symlink_metadata(t.mnt());
}

#[test]
fn hostile_streams_are_refused_onto_btrfs() {
    if !kernel_available("hostile_streams_are_refused_onto_btrfs") {
        return;
    }
    let img = BtrfsImage::new(256, &[], "");
    let root = img.mnt();
    run_suite(root);

    // A subvolume on the same filesystem but outside DEST: found as a
    // parent and a clone source by its uuid, as btrfs receive finds it,
    // and only read.
    let outside = root.join("outside");
    testkit::run(
        Process::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(&outside),
    );
    fs::write(outside.join("data"), vec![7u8; 8192]).unwrap();
    testkit::run(
        Process::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(&outside)
            .arg(root.join("outside-ro")),
    );
    let show = testkit::run(
        Process::new("btrfs")
            .args(["subvolume", "show"])
            .arg(root.join("outside-ro")),
    );
    let text = String::from_utf8_lossy(&show.stdout);
    let uuid = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("UUID:"))
        .map(|u| Uuid::parse_str(u.trim()).unwrap())
        .unwrap();
    let dest = root.join("dest");
    canary_state(&root.join("outside-ro"));
    let before = canary_state(&root.join("outside-ro"));
    for (name, bytes, expect) in [
        (
            "snapshot_of_subvolume_outside_dest",
            stream(&[Command::Snapshot {
                path: b"x1",
                uuid: OWN,
                ctransid: 2,
                clone_uuid: uuid,
                clone_ctransid: 1,
            }]),
            "found outside DEST",
        ),
        (
            "clone_from_subvolume_outside_dest",
            stream(&[
                subvol(b"x2"),
                Command::Mkfile {
                    path: b"f",
                    ino: 257,
                },
                Command::Clone {
                    offset: 0,
                    len: 8192,
                    path: b"f",
                    clone_uuid: uuid,
                    clone_ctransid: 1,
                    clone_path: b"data",
                    clone_offset: 0,
                },
            ]),
            "At subvol x2",
        ),
    ] {
        let file = img.scratch().join("s");
        fs::write(&file, bytes).unwrap();
        let out = rreceive(
            &[
                "-v".as_ref(),
                "-f".as_ref(),
                file.as_os_str(),
                dest.as_os_str(),
            ],
            &file,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {err}");
        assert!(err.contains(expect), "{name}: {err}");
    }
    assert!(canary_state(&root.join("outside-ro")) == before);
    assert_eq!(fs::read(dest.join("x1/data")).unwrap(), vec![7u8; 8192]);
    assert_eq!(fs::read(dest.join("x2/f")).unwrap(), vec![7u8; 8192]);
}
