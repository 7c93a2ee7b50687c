//! rsend next to the real kernel and btrfs-progs (root, loop devices, the
//! btrfs module; one SKIP line otherwise, a failure under
//! RSEND_REQUIRE_KERNEL=1):
//!
//! - every read-only snapshot of every fixture image: rsend's stream,
//!   received by `btrfs receive` on a fresh btrfs, gives the snapshot's
//!   tree (testdata/manifest.py on the received subvolume equals the
//!   fixture's manifest, hard-link groups equal); the kernel's own `btrfs
//!   send` of the snapshot (image mounted read-only) has the same TRUNCATE
//!   count, the same commands apart from data (WRITE/CLONE), and where it
//!   clones nothing it is byte for byte rsend's stream;
//! - a tree made live for this test (thousands of files, odd names, sparse
//!   files, 40 xattrs and a big one, ACLs, hard links across directories,
//!   directories moved under later-made ones, special files, setuid and a
//!   capability): the same checks against its own manifest.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use btrfs_disk::Filesystem;
use btrfs_stream::{Command as Cmd, CommandKind, Reader};
use common::{fixtures, ro_snapshots, rsend_stream, source_link_groups};
use testkit::{kernel_available, run, sh, Attached, BtrfsImage};

fn manifest_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/manifest.py")
}

/// testdata/manifest.py of `dir`: its data lines (comments dropped).
fn manifest_lines(dir: &Path) -> Vec<String> {
    let out = run(Command::new("python3").arg(manifest_py()).arg(dir));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

fn manifest_file_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Hard-link groups of a mounted tree: sorted relative paths per inode.
fn link_groups(root: &Path) -> Vec<Vec<Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let mut by_ino: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec();
                by_ino.entry(md.ino()).or_default().push(rel);
            }
        }
    }
    let mut g: Vec<Vec<Vec<u8>>> = by_ino
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    g.sort();
    g
}

/// Every command of the first stream of `s`, printed; data commands as
/// their kind only when `drop_data`.
fn commands(s: &[u8], drop_data: bool) -> Vec<String> {
    let mut r = Reader::new(s);
    let mut out = Vec::new();
    while let Some(c) = r.next_command().unwrap() {
        let k = c.kind();
        if drop_data && matches!(k, CommandKind::Write | CommandKind::Clone) {
            continue;
        }
        let text = match &c {
            Cmd::Write { path, offset, data } => format!(
                "write {} offset={offset} len={}",
                String::from_utf8_lossy(path),
                data.len()
            ),
            other => format!("{other:?}"),
        };
        out.push(text);
        if k == CommandKind::End {
            break;
        }
    }
    out
}

fn count(s: &[u8], kind: CommandKind) -> usize {
    let mut r = Reader::new(s);
    let mut n = 0;
    while let Some(c) = r.next_command().unwrap() {
        n += usize::from(c.kind() == kind);
    }
    n
}

fn first_difference(a: &[String], b: &[String]) -> String {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            return format!("command {i}: kernel {x}\n             rsend  {y}");
        }
    }
    format!("kernel has {} commands, rsend {}", a.len(), b.len())
}

/// Receives `stream` with btrfs receive into `dest`; returns the subvolume path.
fn receive(stream: &[u8], dest: &Path, name: &[u8], scratch: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::fs::create_dir_all(dest).unwrap();
    let file = scratch.join("received.stream");
    std::fs::write(&file, stream).unwrap();
    run(Command::new("btrfs")
        .args(["receive", "-q", "-f"])
        .arg(&file)
        .arg(dest));
    dest.join(OsStr::from_bytes(name))
}

/// What the kernel's stream must share with rsend's; failures are pushed.
/// Returns whether the two are byte for byte the same.
fn compare_with_kernel(what: &str, kernel: &[u8], ours: &[u8], failures: &mut Vec<String>) -> bool {
    let (kt, rt) = (
        count(kernel, CommandKind::Truncate),
        count(ours, CommandKind::Truncate),
    );
    if kt != rt {
        failures.push(format!("{what}: {rt} TRUNCATEs, the kernel sent {kt}"));
    }
    if ours.len() > kernel.len() {
        failures.push(format!(
            "{what}: stream of {} bytes, the kernel's has {}",
            ours.len(),
            kernel.len()
        ));
    }
    if count(kernel, CommandKind::Clone) == 0 {
        if ours != kernel {
            failures.push(format!(
                "{what}: stream differs from the kernel's: {}",
                first_difference(&commands(kernel, false), &commands(ours, false))
            ));
        }
    } else {
        let (k, r) = (commands(kernel, true), commands(ours, true));
        if k != r {
            failures.push(format!(
                "{what}: commands other than WRITE/CLONE differ from the kernel's: {}",
                first_difference(&k, &r)
            ));
        }
        // The kernel gives up on extents of many references and picks
        // among equal sources in backref order: rsend may clone more, or
        // from another file, never send more bytes.
        println!(
            "{what}: the kernel clones {} times in {} bytes, rsend {} times in {} bytes{}",
            count(kernel, CommandKind::Clone),
            kernel.len(),
            count(ours, CommandKind::Clone),
            ours.len(),
            if ours == kernel { " (identical)" } else { "" }
        );
    }
    ours == kernel
}

#[test]
fn every_fixture_snapshot_received_by_btrfs_receive_is_the_snapshot() {
    if !kernel_available("every_fixture_snapshot_received_by_btrfs_receive_is_the_snapshot") {
        return;
    }
    let all = fixtures();
    assert!(!all.is_empty(), "no fixtures in testdata/images");
    let dest = BtrfsImage::new(1024, &[], "noatime");
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let (mut checked, mut identical) = (0, 0);
    for f in &all {
        let devs = f.decompress(tmp.path());
        // rsend reads the images before the kernel sees them (mounting
        // the log-tree image replays its log).
        let mut snaps = Vec::new();
        {
            let fs = Filesystem::open(&devs).unwrap();
            for id in ro_snapshots(f) {
                let sv = fs.subvolume(id).unwrap();
                let stream = rsend_stream(&fs, &sv).unwrap();
                snaps.push((
                    id,
                    sv.path.clone().unwrap(),
                    sv.link.as_ref().unwrap().name.clone(),
                    stream,
                    source_link_groups(&fs, &sv),
                ));
            }
        }
        let log = f.info.get("log_root").is_some_and(|v| v != "0");
        let mnt = tmp.path().join(format!("{}-mnt", f.name));
        let attached = Attached::new(&devs, &mnt, log, "");
        for (id, path, name, ours, groups) in &snaps {
            use std::os::unix::ffi::OsStrExt;
            let what = format!("{} subvol {id}", f.name);
            let kernel = run(Command::new("btrfs")
                .args(["-q", "send"])
                .arg(mnt.join(OsStr::from_bytes(path))))
            .stdout;
            identical += usize::from(compare_with_kernel(&what, &kernel, ours, &mut failures));
            let got = receive(
                ours,
                &dest.mnt().join(&f.name).join(id.to_string()),
                name,
                tmp.path(),
            );
            let want = manifest_file_lines(&f.dir.join(format!("subvol-{id}.manifest")));
            let have = manifest_lines(&got);
            if have != want {
                let d = want
                    .iter()
                    .zip(&have)
                    .find(|(a, b)| a != b)
                    .map(|(a, b)| format!("\n  want {a}\n  got  {b}"))
                    .unwrap_or_else(|| format!("{} vs {} lines", want.len(), have.len()));
                failures.push(format!("{what}: received tree differs: {d}"));
            }
            if link_groups(&got) != *groups {
                failures.push(format!("{what}: received hard-link groups differ"));
            }
            checked += 1;
        }
        drop(attached);
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    println!("{checked} snapshots received and compared, {identical} streams byte-identical to the kernel's");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Populates the live test tree at the current directory.
const LIVE_TREE: &str = r#"
python3 - <<'PY'
import os, random, socket
r = random.Random(4)
for i in range(3000):
    d = "tree/d%02d/e%02d" % (i % 30, (i // 30) % 10)
    os.makedirs(d, exist_ok=True)
    with open("%s/f%05d" % (d, i), "wb") as f:
        f.write(r.randbytes(r.choice([0, 1, 100, 3000, 4096, 5000, 20000, 70000])))
os.mkdir(b"names")
odd = [b"with space", b"new\nline", b"tab\there", b"L" * 255, b"\xff\xfe not utf-8",
       "\u00e9".encode() * 127 + b"x", b"-dash", b"back\\slash", b"q\"uote's"]
for n in odd:
    with open(b"names/" + n, "wb") as f:
        f.write(n)
os.mkdir(b"names/dir with space")
with open(b"names/dir with space/\x01ctl", "wb") as f:
    f.write(b"ctl")
# sparse: data at 1 MiB and at 5 MiB + 123, a hole up to 10 MiB
with open("sparse", "wb") as f:
    f.seek(1 << 20); f.write(r.randbytes(5000))
    f.seek((5 << 20) + 123); f.write(r.randbytes(7000))
    f.truncate(10 << 20)
with open("sparse-only-hole", "wb") as f:
    f.truncate(3 << 20)
with open("ends-with-data", "wb") as f:
    f.seek(2 << 20); f.write(b"tail")
s = socket.socket(socket.AF_UNIX); s.bind("sock"); s.close()
os.symlink("tree/d00/e00/f00000", "link")
os.symlink("x" * 1000, "long-link")
os.symlink("/nonexistent", "dangling")
PY
: > empty
head -c 100 /dev/urandom > inline
fallocate -l 1M prealloc
fallocate -n -o 1M -l 256K prealloc
touch xattrs40
for i in $(seq 1 40); do setfattr -n "user.attr$i" -v "value-$i-with-some-length" xattrs40; done
setfattr -n user.big -v "0s$(head -c 12000 /dev/urandom | base64 -w0)" xattrs40
setfattr -n user.empty -v "" xattrs40
setfattr -h -n trusted.on-link -v yes link
echo acl > acl-file
setfacl -m u:1000:rw,g:100:r,m::rw acl-file
mkdir acl-dir
setfacl -m u:1001:rx acl-dir
setfacl -d -m u:1000:rwx acl-dir
echo inherits > acl-dir/inherited
mkdir minimal-default-acl
setfacl -d -m u::rwx,g::rx,o::rx minimal-default-acl
echo linked > tree/d00/e00/hl
ln tree/d00/e00/hl tree/d01/e00/hl2
ln tree/d00/e00/hl names/hl3
ln tree/d00/e00/hl hl4
mkdir -p a/inner
echo x > a/inner/file
mkdir b
mv a b/
mkdir -p x/y
echo z > x/y/z
mkdir zz
mv x zz/
mkdir w
mv zz w/
mkfifo fifo
mknod chr c 1 3
mknod blk b 7 200
mknod bigminor c 250 300
echo '#!/bin/sh' > capfile
chown 1000:1000 capfile
chmod 4755 capfile
setcap cap_net_raw+ep capfile
echo owned > owned
chown 1234:5678 owned
chmod 0640 owned
mkdir sticky
chmod 1777 sticky
touch -h -d '1965-06-15 12:00:00' names/with\ space
touch -h -d '2100-01-01 00:00:00' link
# An entry of the root that has the name victim's orphan name would have.
echo victim > victim
echo taken > "o$(stat -c %i victim)-$(lsattr -vd victim | awk '{print $1}')-0"
"#;

#[test]
fn live_tree_with_odd_names_acls_and_moved_dirs_is_received_exactly() {
    if !kernel_available("live_tree_with_odd_names_acls_and_moved_dirs_is_received_exactly") {
        return;
    }
    let mut src = BtrfsImage::new(512, &[], "noatime");
    sh(src.mnt(), LIVE_TREE);
    run(&mut Command::new("sync"));
    let snap = src.snapshot("snap");
    // Mounted read-only from now on: the image file holds exactly the committed state.
    src.remount("ro,noatime");
    let out = src.scratch().join("rsend.stream");
    let o = Command::new(env!("CARGO_BIN_EXE_rsend"))
        .arg("-d")
        .arg(src.image())
        .arg("-f")
        .arg(&out)
        .arg("snap")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "At subvol snap\n");
    let ours = std::fs::read(&out).unwrap();
    let kernel = src.send(&[snap.as_os_str()]);
    assert_eq!(
        count(&kernel, CommandKind::Clone),
        0,
        "no shared extents here, so the streams must be equal byte for byte"
    );
    // `mv a b/` put a under a directory made later: it is created early
    // at its orphan name and a is renamed into it.
    let mut into_orphan = 0;
    let mut r = Reader::new(&ours[..]);
    while let Some(c) = r.next_command().unwrap() {
        if let Cmd::Rename { to, .. } = c {
            let first = to.split(|&b| b == b'/').next().unwrap_or(b"");
            let orphan = first.len() > 1
                && first[0] == b'o'
                && first[1..].split(|&b| b == b'-').count() == 3
                && first[1..].iter().all(|&b| b == b'-' || b.is_ascii_digit());
            into_orphan += usize::from(orphan && to.contains(&b'/'));
        }
    }
    assert!(
        into_orphan >= 2,
        "renames into early-made directories: {into_orphan}"
    );
    // The orphan name taken by a real entry is skipped: the next number is used.
    let mut r = Reader::new(&ours[..]);
    let mut second_orphan_name = false;
    while let Some(c) = r.next_command().unwrap() {
        if let Cmd::Mkfile { path, .. } = c {
            second_orphan_name |= path.starts_with(b"o") && path.ends_with(b"-1");
        }
    }
    assert!(second_orphan_name, "victim is created at o<ino>-<gen>-1");
    let mut failures = Vec::new();
    compare_with_kernel("live tree", &kernel, &ours, &mut failures);
    assert!(
        count(&ours, CommandKind::Truncate) >= 2,
        "the sparse files need TRUNCATEs"
    );
    let dest = BtrfsImage::new(512, &[], "noatime");
    let got = receive(&ours, dest.mnt(), b"snap", dest.scratch());
    let want = manifest_lines(&snap);
    let have = manifest_lines(&got);
    assert!(want.len() > 3000, "{} manifest lines", want.len());
    if have != want {
        let d = want
            .iter()
            .zip(&have)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("\n  want {a}\n  got  {b}"))
            .unwrap_or_else(|| format!("{} vs {} lines", want.len(), have.len()));
        failures.push(format!("received tree differs: {d}"));
    }
    let groups = link_groups(&snap);
    assert_eq!(groups.len(), 1, "one hard-link group");
    if link_groups(&got) != groups {
        failures.push("received hard-link groups differ".into());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
