//! The catalog on hand-made streams: file data laid night over night
//! (overwrites, truncates that shrink then grow, clones within a file,
//! across files and from an earlier night, holes punched) restores to what
//! a plain model of the same commands holds; hostile and broken streams are
//! refused with the catalog left as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use btrfs_catalog::restore::{restore, Hooks, Restored};
use btrfs_catalog::{add_file, Catalog, Error};
use btrfs_stream::{Command as C, Timespec, Uuid, Writer};

const U1: &str = "11111111-1111-4111-8111-111111111111";
const U2: &str = "22222222-2222-4222-8222-222222222222";
const U3: &str = "33333333-3333-4333-8333-333333333333";

fn uuid(s: &str) -> Uuid {
    Uuid::parse_str(s).unwrap()
}

/// Deterministic bytes.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The files' contents as the commands leave them, kept by hand.
#[derive(Default, Clone)]
struct Model {
    files: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Model {
    fn write(&mut self, path: &[u8], at: u64, data: &[u8]) {
        let f = self.files.entry(path.to_vec()).or_default();
        let end = at as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[at as usize..end].copy_from_slice(data);
    }

    fn truncate(&mut self, path: &[u8], size: u64) {
        self.files
            .entry(path.to_vec())
            .or_default()
            .resize(size as usize, 0);
    }

    /// A clone from `src`'s file `from` at `at` into `to` at `off`.
    fn clone_from(&mut self, src: &Model, from: &[u8], at: u64, len: u64, to: &[u8], off: u64) {
        let s = &src.files[from];
        let mut chunk = vec![0u8; len as usize];
        let have = s.len().saturating_sub(at as usize).min(len as usize);
        chunk[..have].copy_from_slice(&s[at as usize..at as usize + have]);
        self.write(to, off, &chunk);
    }
}

/// Writes a stream of `cmds` (protocol `version`) to `path`.
fn stream(path: &Path, version: u32, cmds: &[C<'_>]) {
    let mut w = Writer::new(Vec::new());
    w.start_stream(version).unwrap();
    for c in cmds {
        w.write_command(c).unwrap();
    }
    std::fs::write(path, w.into_inner()).unwrap();
}

/// This process's uid and gid: owners a restore can set without root.
fn ids() -> (u64, u64) {
    (
        nix::unistd::geteuid().as_raw() as u64,
        nix::unistd::getegid().as_raw() as u64,
    )
}

fn t(sec: i64) -> Timespec {
    Timespec { sec, nsec: 7 }
}

fn restore_to(cat: &Catalog, spec: &str, dest: &Path) -> Result<Restored, Error> {
    restore(
        cat,
        spec.as_bytes(),
        dest,
        &mut Hooks {
            progress: &mut |_| {},
            too_large: &|_, _, _, _| None,
        },
    )
}

fn snapshots(cat: &Catalog) -> usize {
    cat.snapshots().unwrap().len()
}

#[test]
fn data_laid_night_over_night_restores_as_the_commands_leave_it() {
    let dir = tempfile::tempdir().unwrap();
    let (uid, gid) = ids();
    let a = bytes(300_000, 1);
    let b = bytes(20_000, 2);
    let c = bytes(5_000, 3);
    let mut m1 = Model::default();
    // Night 1.
    let n1 = dir.path().join("n1.stream");
    let mut cmds = vec![
        C::Subvol {
            path: b"n1",
            uuid: uuid(U1),
            ctransid: 10,
        },
        C::Mkdir {
            path: b"o257-1-0",
            ino: 257,
        },
        C::Rename {
            from: b"o257-1-0",
            to: b"d",
        },
        C::Mkfile {
            path: b"d/f",
            ino: 258,
        },
    ];
    // Written in 48 KiB pieces, as the kernel does.
    for (i, piece) in a.chunks(49152).enumerate() {
        let at = (i * 49152) as u64;
        cmds.push(C::Write {
            path: b"d/f",
            offset: at,
            data: piece,
        });
        m1.write(b"d/f", at, piece);
    }
    cmds.push(C::Write {
        path: b"d/f",
        offset: 100_000,
        data: &b,
    });
    m1.write(b"d/f", 100_000, &b);
    // Shrink, then grow past the old end: the cut part reads as zeros.
    cmds.push(C::Truncate {
        path: b"d/f",
        size: 150_000,
    });
    m1.truncate(b"d/f", 150_000);
    cmds.push(C::Write {
        path: b"d/f",
        offset: 200_000,
        data: &c,
    });
    m1.write(b"d/f", 200_000, &c);
    cmds.push(C::Truncate {
        path: b"d/f",
        size: 260_000,
    });
    m1.truncate(b"d/f", 260_000);
    cmds.push(C::Mkfile {
        path: b"g",
        ino: 259,
    });
    // A clone across files, then one within the file over its own source.
    cmds.push(C::Clone {
        offset: 4096,
        len: 65536,
        path: b"g",
        clone_uuid: uuid(U1),
        clone_ctransid: 10,
        clone_path: b"d/f",
        clone_offset: 90_000,
    });
    let snap = m1.clone();
    m1.clone_from(&snap, b"d/f", 90_000, 65536, b"g", 4096);
    cmds.push(C::Clone {
        offset: 10_000,
        len: 30_000,
        path: b"g",
        clone_uuid: uuid(U1),
        clone_ctransid: 10,
        clone_path: b"g",
        clone_offset: 0,
    });
    let snap = m1.clone();
    m1.clone_from(&snap, b"g", 0, 30_000, b"g", 10_000);
    cmds.push(C::Link {
        path: b"d/f2",
        target: b"d/f",
    });
    for p in [&b""[..], b"d", b"d/f", b"g"] {
        cmds.push(C::Chown { path: p, uid, gid });
        cmds.push(C::Chmod {
            path: p,
            mode: if p == b"d/f" { 0o640 } else { 0o755 },
        });
        cmds.push(C::Utimes {
            path: p,
            atime: t(1000),
            mtime: t(2000),
            ctime: t(3000),
            otime: None,
        });
    }
    cmds.push(C::SetXattr {
        path: b"g",
        name: b"user.k",
        data: b"v1",
    });
    cmds.push(C::End {});
    stream(&n1, 1, &cmds);
    // Night 2 (v2): overwrite a little, punch a hole, clone from night 1's
    // g into a new file, remove a link, move g.
    let n2 = dir.path().join("n2.stream");
    let mut m2 = m1.clone();
    let small = bytes(3000, 4);
    let cmds2 = vec![
        C::Snapshot {
            path: b"n2",
            uuid: uuid(U2),
            ctransid: 20,
            clone_uuid: uuid(U1),
            clone_ctransid: 10,
        },
        C::Write {
            path: b"d/f",
            offset: 123_456,
            data: &small,
        },
        C::Fallocate {
            path: b"d/f",
            mode: 0x03,
            offset: 8192,
            len: 16384,
        },
        C::Mkfile {
            path: b"h",
            ino: 260,
        },
        C::Clone {
            offset: 0,
            len: 50_000,
            path: b"h",
            clone_uuid: uuid(U1),
            clone_ctransid: 10,
            clone_path: b"g",
            clone_offset: 1000,
        },
        C::Unlink { path: b"d/f2" },
        C::Rename {
            from: b"g",
            to: b"d/g",
        },
        C::RemoveXattr {
            path: b"d/g",
            name: b"user.k",
        },
        C::Chown {
            path: b"h",
            uid,
            gid,
        },
        C::Chmod {
            path: b"h",
            mode: 0o600,
        },
        C::Utimes {
            path: b"h",
            atime: t(5),
            mtime: t(6),
            ctime: t(7),
            otime: None,
        },
        C::End {},
    ];
    m2.write(b"d/f", 123_456, &small);
    m2.write(b"d/f", 8192, &[0u8; 16384]);
    m2.clone_from(&m1, b"g", 1000, 50_000, b"h", 0);
    let g = m2.files.remove(&b"g"[..]).unwrap();
    m2.files.insert(b"d/g".to_vec(), g);
    stream(&n2, 2, &cmds2);

    let db = dir.path().join("c.db");
    let mut cat = Catalog::create(&db).unwrap();
    add_file(&mut cat, &n1).unwrap();
    add_file(&mut cat, &n2).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for (night, model) in [("n1", &m1), ("n2", &m2)] {
        restore_to(&cat, night, &out).unwrap();
        for (path, want) in &model.files {
            let p = out.join(night).join(std::str::from_utf8(path).unwrap());
            let got = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(got == *want, "{}: content differs", p.display());
        }
    }
    use std::os::unix::fs::MetadataExt;
    // Metadata of files not read since (a read may set the atime).
    restore_to(&cat, "n1/d", &out.join("meta")).unwrap();
    let f1 = std::fs::metadata(out.join("meta/f")).unwrap();
    assert_eq!(
        (f1.nlink(), f1.mode() & 0o7777, f1.mtime(), f1.atime()),
        (2, 0o640, 2000, 1000)
    );
    assert_eq!(
        f1.ino(),
        std::fs::metadata(out.join("meta/f2")).unwrap().ino()
    );
    assert_eq!(std::fs::metadata(out.join("n2/d/f")).unwrap().nlink(), 1);
    assert_eq!(
        xattr::get(out.join("n1/g"), "user.k").unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    assert_eq!(xattr::get(out.join("n2/d/g"), "user.k").unwrap(), None);
    // One file of a night, read from its ranges only.
    let one = restore_to(&cat, "n2/h", &out.join("h-only")).unwrap();
    assert_eq!(
        std::fs::read(out.join("h-only")).unwrap(),
        m2.files[&b"h"[..]]
    );
    // Exactly the planned ranges; each a run of at most 256 KiB of data.
    assert_eq!(one.read, one.to_read);
    assert!(
        one.read <= 50_000 + 2 * 262_144 + 4096,
        "read {} bytes for a 50,000-byte file",
        one.read
    );
    // An existing target is refused, and nothing is left beside it.
    let again = restore_to(&cat, "n2/h", &out.join("h-only"));
    assert!(
        matches!(again, Err(Error::Restore(ref m)) if m.contains("exists")),
        "{again:?}"
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 4);
    // What a killed restore left (its pid gone) goes with the next one.
    let stale = out.join(".rreceive-restore-4194999-0");
    std::fs::create_dir_all(stale.join("half")).unwrap();
    restore_to(&cat, "n1/g", &out.join("g-again")).unwrap();
    assert!(!stale.exists());
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 5);
}

/// Adds `cmds` as a stream and expects a refusal whose text holds `what`,
/// with the catalog unchanged.
fn refused(cat: &mut Catalog, dir: &Path, name: &str, cmds: &[C<'_>], what: &str) {
    let before = snapshots(cat);
    let p: PathBuf = dir.join(name);
    stream(&p, 1, cmds);
    let e = add_file(cat, &p).expect_err(name);
    assert!(e.to_string().contains(what), "{name}: {e}");
    assert_eq!(snapshots(cat), before, "{name}: the catalog changed");
}

#[test]
fn hostile_and_broken_streams_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("c.db");
    let mut cat = Catalog::create(&db).unwrap();
    let full = || C::Subvol {
        path: b"n1",
        uuid: uuid(U1),
        ctransid: 10,
    };
    let mk = |p: &'static [u8]| C::Mkfile { path: p, ino: 257 };
    refused(
        &mut cat,
        d,
        "dotdot",
        &[full(), mk(b".."), C::End {}],
        "invalid name",
    );
    refused(
        &mut cat,
        d,
        "rename-dot",
        &[
            full(),
            mk(b"a"),
            C::Rename {
                from: b"a",
                to: b".",
            },
            C::End {},
        ],
        "invalid name",
    );
    refused(
        &mut cat,
        d,
        "missing-dir",
        &[full(), mk(b"x/y"), C::End {}],
        "no directory 'x'",
    );
    refused(
        &mut cat,
        d,
        "write-missing",
        &[
            full(),
            C::Write {
                path: b"nope",
                offset: 0,
                data: b"x",
            },
            C::End {},
        ],
        "no such path 'nope'",
    );
    refused(
        &mut cat,
        d,
        "clone-unknown",
        &[
            full(),
            mk(b"a"),
            C::Clone {
                offset: 0,
                len: 10,
                path: b"a",
                clone_uuid: uuid(U3),
                clone_ctransid: 1,
                clone_path: b"b",
                clone_offset: 0,
            },
            C::End {},
        ],
        U3,
    );
    refused(
        &mut cat,
        d,
        "no-data",
        &[
            full(),
            mk(b"a"),
            C::UpdateExtent {
                path: b"a",
                offset: 0,
                len: 4096,
            },
            C::End {},
        ],
        "--no-data",
    );
    refused(
        &mut cat,
        d,
        "missing-parent",
        &[
            C::Snapshot {
                path: b"n2",
                uuid: uuid(U2),
                ctransid: 20,
                clone_uuid: uuid(U1),
                clone_ctransid: 10,
            },
            C::End {},
        ],
        "(uuid 11111111-1111-4111-8111-111111111111, ctransid 10) is not in the catalog",
    );
    refused(&mut cat, d, "no-end", &[full(), mk(b"a")], "no END");
    refused(
        &mut cat,
        d,
        "headless",
        &[mk(b"a"), C::End {}],
        "must begin with SUBVOL or SNAPSHOT",
    );
    // Cut anywhere or flipped anywhere: refused, never a panic.
    let good = d.join("good");
    let data = bytes(70_000, 9);
    stream(
        &good,
        1,
        &[
            full(),
            mk(b"a"),
            C::Write {
                path: b"a",
                offset: 0,
                data: &data[..35_000],
            },
            C::Write {
                path: b"a",
                offset: 35_000,
                data: &data[35_000..],
            },
            C::End {},
        ],
    );
    let whole = std::fs::read(&good).unwrap();
    for cut in (0..whole.len()).step_by(997).chain([whole.len() - 1]) {
        let p = d.join(format!("cut{cut}"));
        std::fs::write(&p, &whole[..cut]).unwrap();
        assert!(add_file(&mut cat, &p).is_err(), "cut at {cut}");
    }
    for at in (0..whole.len()).step_by(1499) {
        let mut b = whole.clone();
        b[at] ^= 0x40;
        let p = d.join(format!("flip{at}"));
        std::fs::write(&p, &b).unwrap();
        let _ = add_file(&mut cat, &p);
    }
    assert_eq!(snapshots(&cat), 0);
    // The good one goes in; damaged after cataloging, restore and check
    // name the night, and nothing is left under the target's name.
    add_file(&mut cat, &good).unwrap();
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    restore_to(&cat, "n1/a", &out).unwrap();
    assert_eq!(std::fs::read(out.join("a")).unwrap(), data);
    btrfs_catalog::check::check(&cat, &mut |_| {}).unwrap();
    let mut b = whole.clone();
    let at = b.len() - 2000;
    b[at] ^= 1;
    std::fs::write(&good, &b).unwrap();
    let e = restore_to(&cat, "n1/a", &out.join("a2")).unwrap_err();
    assert!(
        e.to_string().contains("night n1") && e.to_string().to_lowercase().contains("crc"),
        "{e}"
    );
    assert!(!out.join("a2").exists());
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    let e = btrfs_catalog::check::check(&cat, &mut |_| {}).unwrap_err();
    assert!(
        e.to_string().contains("night n1") && e.to_string().to_lowercase().contains("crc"),
        "{e}"
    );
    std::fs::write(&good, &whole[..whole.len() - 100]).unwrap();
    let e = restore_to(&cat, "n1/a", &out.join("a3")).unwrap_err();
    assert!(e.to_string().contains("changed or was cut"), "{e}");
    let e = btrfs_catalog::check::check(&cat, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("night n1"), "{e}");
}

#[test]
fn two_nights_on_one_parent_keep_apart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (uid, gid) = ids();
    let base = bytes(10_000, 5);
    let one = bytes(100, 6);
    let other = bytes(200, 7);
    let meta = |p: &'static [u8]| {
        [
            C::Chown { path: p, uid, gid },
            C::Chmod {
                path: p,
                mode: 0o644,
            },
        ]
    };
    let mut cmds = vec![
        C::Subvol {
            path: b"n1",
            uuid: uuid(U1),
            ctransid: 10,
        },
        C::Mkfile {
            path: b"f",
            ino: 257,
        },
        C::Write {
            path: b"f",
            offset: 0,
            data: &base,
        },
    ];
    cmds.extend(meta(b""));
    cmds.extend(meta(b"f"));
    cmds.push(C::End {});
    stream(&d.join("n1"), 1, &cmds);
    // Two incrementals on n1: each changes f its own way and adds a name.
    for (name, u, data, extra) in [
        (&b"a"[..], U2, &one, &b"only-a"[..]),
        (b"b", U3, &other, b"only-b"),
    ] {
        let mut c = vec![
            C::Snapshot {
                path: name,
                uuid: uuid(u),
                ctransid: 20,
                clone_uuid: uuid(U1),
                clone_ctransid: 10,
            },
            C::Write {
                path: b"f",
                offset: 5000,
                data,
            },
            C::Mkfile {
                path: extra,
                ino: 258,
            },
            C::Chown {
                path: extra,
                uid,
                gid,
            },
        ];
        c.push(C::End {});
        stream(&d.join(std::str::from_utf8(name).unwrap()), 1, &c);
    }
    let mut cat = Catalog::create(&d.join("c.db")).unwrap();
    for n in ["n1", "a", "b"] {
        add_file(&mut cat, &d.join(n)).unwrap();
    }
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    for (night, data, extra, absent) in [
        ("a", &one, "only-a", "only-b"),
        ("b", &other, "only-b", "only-a"),
    ] {
        restore_to(&cat, night, &out).unwrap();
        let mut want = base.clone();
        want[5000..5000 + data.len()].copy_from_slice(data);
        assert_eq!(
            std::fs::read(out.join(night).join("f")).unwrap(),
            want,
            "{night}"
        );
        assert!(out.join(night).join(extra).exists(), "{night}");
        assert!(!out.join(night).join(absent).exists(), "{night}");
    }
    restore_to(&cat, "n1", &out).unwrap();
    assert_eq!(std::fs::read(out.join("n1/f")).unwrap(), base);
    assert_eq!(std::fs::read_dir(out.join("n1")).unwrap().count(), 1);
}
