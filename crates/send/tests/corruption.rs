//! Damaged copies of kernel-made images: bad metadata on DUP and single,
//! bad data bytes on single and mirrored profiles, a zeroed RAID5 member,
//! and random byte flips, which must never panic.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use btrfs_disk::chunk::Profile;
use btrfs_disk::items::ExtentKind;
use btrfs_disk::{Error, Filesystem, NoticeKind, Subvolume};
use common::{fixtures, manifest_of, physical, read_manifest, recording_options, Fixture};

/// The first fixture (decompressed into `tmp`) for which `pred` holds on the opened filesystem.
///
/// Profiles are taken from the chunk map itself, not from INFO.
fn pick(
    tmp: &Path,
    pred: impl Fn(&Fixture, &Filesystem) -> bool,
) -> Option<(Fixture, Vec<PathBuf>)> {
    for f in fixtures() {
        let devs = f.decompress(tmp);
        let (opts, _) = recording_options();
        let ok = Filesystem::open_with(&devs, opts).is_ok_and(|fs| pred(&f, &fs));
        if ok {
            return Some((f, devs));
        }
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    None
}

fn profile_of(fs: &Filesystem, logical: u64) -> Option<Profile> {
    fs.chunks().lookup(logical).map(|c| c.profile)
}

/// The profile of the first fs-tree leaf of the first subvolume.
fn leaf_profile(f: &Fixture, fs: &Filesystem) -> Option<Profile> {
    let sv = a_subvolume_opt(fs, f)?;
    profile_of(fs, fs_tree_leaf(fs, &sv))
}

/// The profile of the first uncompressed data extent of the first subvolume.
fn data_profile(f: &Fixture, fs: &Filesystem) -> Option<Profile> {
    let sv = a_subvolume_opt(fs, f)?;
    profile_of(fs, a_data_extent(fs, &sv)?.2)
}

fn info<'a>(f: &'a Fixture, k: &str) -> &'a str {
    f.info.get(k).map(String::as_str).unwrap_or("")
}

fn xor_bytes(path: &Path, at: u64, len: usize, x: u8) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = vec![0u8; len];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    for v in &mut b {
        *v ^= x;
    }
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&b).unwrap();
}

/// The first subvolume with a manifest other than the top level.
fn a_subvolume(fs: &Filesystem, f: &Fixture) -> Subvolume {
    a_subvolume_opt(fs, f).expect("a subvolume with a manifest")
}

fn a_subvolume_opt(fs: &Filesystem, f: &Fixture) -> Option<Subvolume> {
    let id = fs
        .subvolumes()
        .ok()?
        .into_iter()
        .map(|s| s.id)
        .find(|id| f.dir.join(format!("subvol-{id}.manifest")).exists())?;
    fs.subvolume(id).ok()
}

fn matches_manifest(fs: &Filesystem, f: &Fixture, sv: &Subvolume) -> Result<(), String> {
    let (want, _) = read_manifest(&f.dir.join(format!("subvol-{}.manifest", sv.id)));
    let (got, _) = manifest_of(fs, sv)?;
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{}: subvolume {} differs from its manifest",
            f.name, sv.id
        ))
    }
}

/// A leaf of `sv`'s fs tree (the root when it is a leaf): (logical, tree id).
fn fs_tree_leaf(fs: &Filesystem, sv: &Subvolume) -> u64 {
    let t = fs.fs_tree(sv);
    let mut b = t.root_block().unwrap();
    while !b.is_leaf() {
        b = t.child(&b, 0).unwrap();
    }
    b.bytenr()
}

/// A regular uncompressed extent of some file: (ino, file offset, logical).
fn a_data_extent(fs: &Filesystem, sv: &Subvolume) -> Option<(u64, u64, u64)> {
    let mut stack = vec![256u64];
    while let Some(dir) = stack.pop() {
        for e in fs.read_dir(sv, dir).ok()? {
            if e.location.item_type != btrfs_disk::items::key_type::INODE_ITEM {
                continue;
            }
            let ino = e.location.objectid;
            let inode = fs.inode(sv, ino).ok()?;
            match inode.file_type() {
                0o040000 => stack.push(ino),
                0o100000 if !inode.nodatasum() => {
                    for x in fs.file_extents(sv, ino).ok()? {
                        if x.kind == ExtentKind::Regular
                            && x.disk_bytenr != 0
                            && x.compression == btrfs_disk::items::Compression::None
                            && x.num_bytes >= 4096
                            && x.file_offset + 4096 <= inode.size
                        {
                            return Some((ino, x.file_offset, x.disk_bytenr + x.offset));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    None
}

#[test]
fn bad_metadata_copy_on_dup_is_repaired_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |f, fs| {
        leaf_profile(f, fs) == Some(Profile::Dup)
    }) else {
        println!(
            "SKIP bad_metadata_copy_on_dup_is_repaired_and_reported: no DUP-metadata fixture yet"
        );
        return;
    };
    let (logical, sv_id) = {
        let fs = Filesystem::open(&devs).unwrap();
        let sv = a_subvolume(&fs, &f);
        let leaf = fs_tree_leaf(&fs, &sv);
        let (dev, phys) = physical(&fs, &devs, leaf, 1);
        xor_bytes(&dev, phys + 200, 16, 0x5a);
        (leaf, sv.id)
    };
    let (opts, seen) = recording_options();
    let fs = Filesystem::open_with(&devs, opts).unwrap();
    let sv = fs.subvolume(sv_id).unwrap();
    matches_manifest(&fs, &f, &sv).unwrap();
    let repairs: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n.kind == NoticeKind::Repair)
        .map(|n| n.message.clone())
        .collect();
    assert!(
        repairs
            .iter()
            .any(|m| m.contains(&format!("tree block at logical {logical} (tree {sv_id})"))),
        "{}: no repair reported for logical {logical}: {repairs:?}",
        f.name
    );
    // The binary says so on stderr.
    let path = fs.subvolume(sv_id).unwrap().path_lossy();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
    cmd.arg("--list");
    for d in &devs {
        cmd.arg("-d").arg(d);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    let _ = path;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
    cmd.args(["--subvolid", &sv_id.to_string(), "--cat-file", "-", "."]);
    for d in &devs {
        cmd.arg("-d").arg(d);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("rsend: repaired: tree block at logical {logical}")),
        "stderr: {err}"
    );
}

#[test]
fn bad_metadata_on_single_names_logical_address_and_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |f, fs| {
        leaf_profile(f, fs) == Some(Profile::Single)
    }) else {
        println!("SKIP bad_metadata_on_single_names_logical_address_and_tree: no single-metadata fixture yet");
        return;
    };
    let (logical, sv_id) = {
        let fs = Filesystem::open(&devs).unwrap();
        let sv = a_subvolume(&fs, &f);
        let leaf = fs_tree_leaf(&fs, &sv);
        let (dev, phys) = physical(&fs, &devs, leaf, 1);
        xor_bytes(&dev, phys + 300, 1, 0x01);
        (leaf, sv.id)
    };
    let fs = Filesystem::open(&devs).unwrap();
    let sv = fs.subvolume(sv_id).unwrap();
    let err = manifest_of(&fs, &sv).expect_err("a corrupt leaf must fail the read");
    assert!(
        err.contains(&format!("tree block at logical {logical} (tree {sv_id})"))
            && err.contains("checksum mismatch"),
        "{}: {err}",
        f.name
    );
}

#[test]
fn bad_data_byte_names_inode_and_offset_on_single() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |f, fs| {
        data_profile(f, fs) == Some(Profile::Single)
    }) else {
        println!("SKIP bad_data_byte_names_inode_and_offset_on_single: no single-data fixture yet");
        return;
    };
    let fs = Filesystem::open(&devs).unwrap();
    let sv = a_subvolume(&fs, &f);
    let (ino, off, logical) = a_data_extent(&fs, &sv).expect("an uncompressed data extent");
    let (dev, phys) = physical(&fs, &devs, logical, 1);
    drop(fs);
    xor_bytes(&dev, phys + 10, 1, 0x80);
    let fs = Filesystem::open(&devs).unwrap();
    let mut buf = vec![0u8; 4096];
    match fs.read_file(&sv, ino, off, &mut buf) {
        Err(Error::DataCsum {
            ino: i,
            offset,
            logical: l,
            subvol,
        }) => {
            assert_eq!((subvol, i, offset, l), (sv.id, ino, off, logical));
            let msg = fs
                .read_file(&sv, ino, off, &mut buf)
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains(&format!("inode {ino}"))
                    && msg.contains(&format!("file offset {off}")),
                "{msg}"
            );
        }
        other => panic!("{}: expected a data checksum error, got {other:?}", f.name),
    }
}

#[test]
fn bad_data_byte_on_a_mirrored_profile_is_repaired() {
    let mirrored = [
        Profile::Raid1,
        Profile::Raid1c3,
        Profile::Raid1c4,
        Profile::Raid10,
        Profile::Dup,
    ];
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |f, fs| {
        data_profile(f, fs).is_some_and(|p| mirrored.contains(&p))
    }) else {
        println!(
            "SKIP bad_data_byte_on_a_mirrored_profile_is_repaired: no mirrored-data fixture yet"
        );
        return;
    };
    let fs = Filesystem::open(&devs).unwrap();
    let sv = a_subvolume(&fs, &f);
    let (ino, off, logical) = a_data_extent(&fs, &sv).expect("an uncompressed data extent");
    let (dev, phys) = physical(&fs, &devs, logical, 1);
    drop(fs);
    xor_bytes(&dev, phys + 10, 1, 0x80);
    let (opts, seen) = recording_options();
    let fs = Filesystem::open_with(&devs, opts).unwrap();
    matches_manifest(&fs, &f, &sv).unwrap();
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter().any(|n| n.kind == NoticeKind::Repair
            && n.message
                .contains(&format!("inode {ino} file offset {off}"))),
        "{}: {seen:?}",
        f.name
    );
}

#[test]
fn zeroed_raid5_member_still_reads_correctly() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |_, fs| {
        fs.chunks()
            .iter()
            .any(|c| c.profile == Profile::Raid5 && c.flags & btrfs_disk::chunk::flags::DATA != 0)
    }) else {
        println!("SKIP zeroed_raid5_member_still_reads_correctly: no RAID5 fixture yet");
        return;
    };
    for victim in 0..devs.len() {
        let devs = f.decompress(tmp.path());
        let len = std::fs::metadata(&devs[victim]).unwrap().len();
        let file = std::fs::File::create(&devs[victim]).unwrap();
        file.set_len(len).unwrap();
        drop(file);
        let (opts, _seen) = recording_options();
        let fs = Filesystem::open_with(&devs, opts)
            .unwrap_or_else(|e| panic!("{} dev{}: {e}", f.name, victim + 1));
        for sv in fs.subvolumes().unwrap() {
            if f.dir.join(format!("subvol-{}.manifest", sv.id)).exists() {
                matches_manifest(&fs, &f, &sv)
                    .unwrap_or_else(|e| panic!("dev{} zeroed: {e}", victim + 1));
            }
        }
        // Leaving the member out entirely works too.
        let rest: Vec<_> = devs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != victim)
            .map(|(_, d)| d.clone())
            .collect();
        let (opts, seen) = recording_options();
        let fs = Filesystem::open_with(&rest, opts).unwrap();
        assert!(seen
            .lock()
            .unwrap()
            .iter()
            .any(|n| n.message.contains(&format!("devid {} ", victim + 1))));
        for sv in fs.subvolumes().unwrap() {
            if f.dir.join(format!("subvol-{}.manifest", sv.id)).exists() {
                matches_manifest(&fs, &f, &sv)
                    .unwrap_or_else(|e| panic!("dev{} missing: {e}", victim + 1));
            }
        }
    }
    drop(devs);
}

/// Every tree block reachable from the root tree, the chunk tree and every subvolume.
fn metadata_blocks(fs: &Filesystem) -> Vec<u64> {
    let mut roots = vec![fs.root_tree(), fs.chunk_tree()];
    roots.extend(fs.csum_tree());
    roots.extend(fs.extent_tree());
    for sv in fs.subvolumes().unwrap() {
        roots.push(fs.fs_tree(&sv));
    }
    let mut out = Vec::new();
    for t in roots {
        let mut stack = vec![t.root_block().unwrap()];
        while let Some(b) = stack.pop() {
            out.push(b.bytenr());
            for i in 0..if b.is_leaf() { 0 } else { b.nritems() } {
                stack.push(t.child(&b, i).unwrap());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn random_byte_flips_in_metadata_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |f, fs| {
        fs.devices().count() == 1 && leaf_profile(f, fs) == Some(Profile::Single)
    }) else {
        println!("SKIP random_byte_flips_in_metadata_never_panic: no single-metadata fixture yet");
        return;
    };
    let fs = Filesystem::open(&devs).unwrap();
    let nodesize = fs.nodesize() as u64;
    let targets: Vec<(PathBuf, u64)> = metadata_blocks(&fs)
        .into_iter()
        .map(|l| physical(&fs, &devs, l, 1))
        .collect();
    drop(fs);
    let pristine = std::fs::read(&devs[0]).unwrap();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let rounds = if cfg!(debug_assertions) { 40 } else { 150 };
    let (mut opened, mut failed) = (0, 0);
    for _ in 0..rounds {
        std::fs::write(&devs[0], &pristine).unwrap();
        // Flip a few bytes of one or two blocks, then re-seal the checksum half
        // the time, so the structural checks are reached too.
        for _ in 0..1 + rnd() % 2 {
            let (dev, phys) = &targets[(rnd() % targets.len() as u64) as usize];
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(dev)
                .unwrap();
            let mut block = vec![0u8; nodesize as usize];
            file.seek(SeekFrom::Start(*phys)).unwrap();
            file.read_exact(&mut block).unwrap();
            for _ in 0..1 + rnd() % 8 {
                let at = 32 + (rnd() % (nodesize - 32)) as usize;
                block[at] ^= 1 << (rnd() % 8);
            }
            if rnd() % 2 == 0 {
                let c = crc32c_like(&f, &block[32..]);
                block[..c.len()].copy_from_slice(&c);
            }
            file.seek(SeekFrom::Start(*phys)).unwrap();
            file.write_all(&block).unwrap();
        }
        let (opts, _seen) = recording_options();
        match Filesystem::open_with(&devs, opts) {
            Ok(fs) => {
                opened += 1;
                if let Ok(svs) = fs.subvolumes() {
                    for sv in svs {
                        if manifest_of(&fs, &sv).is_err() {
                            failed += 1;
                        }
                    }
                }
            }
            Err(_) => failed += 1,
        }
    }
    println!(
        "{}: {rounds} rounds, {opened} opened, {failed} reads failed cleanly",
        f.name
    );
}

/// The tree block checksum of the fixture's csum type.
fn crc32c_like(f: &Fixture, body: &[u8]) -> Vec<u8> {
    let t = match info(f, "csum") {
        "xxhash" => btrfs_disk::csum::CsumType::Xxhash64,
        "sha256" => btrfs_disk::csum::CsumType::Sha256,
        "blake2" => btrfs_disk::csum::CsumType::Blake2b,
        _ => btrfs_disk::csum::CsumType::Crc32c,
    };
    t.compute(body)[..t.size()].to_vec()
}

#[test]
fn raid6_reads_with_two_members_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |_, fs| {
        fs.chunks()
            .iter()
            .any(|c| c.profile == Profile::Raid6 && c.flags & btrfs_disk::chunk::flags::DATA != 0)
    }) else {
        println!("SKIP raid6_reads_with_two_members_missing: no RAID6 fixture yet");
        return;
    };
    for a in 0..devs.len() {
        for b in a + 1..devs.len() {
            let rest: Vec<_> = devs
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != a && *i != b)
                .map(|(_, d)| d.clone())
                .collect();
            let (opts, _) = recording_options();
            let fs = Filesystem::open_with(&rest, opts)
                .unwrap_or_else(|e| panic!("{} without dev{} dev{}: {e}", f.name, a + 1, b + 1));
            for sv in fs.subvolumes().unwrap() {
                if f.dir.join(format!("subvol-{}.manifest", sv.id)).exists() {
                    matches_manifest(&fs, &f, &sv)
                        .unwrap_or_else(|e| panic!("without dev{} dev{}: {e}", a + 1, b + 1));
                }
            }
        }
    }
}

/// Rewrites every superblock copy of `dev` through `edit` and re-seals its checksum.
fn edit_superblocks(dev: &Path, csum: btrfs_disk::csum::CsumType, edit: impl Fn(&mut [u8])) {
    let len = std::fs::metadata(dev).unwrap().len();
    for off in btrfs_disk::superblock::copy_offsets() {
        if off + 4096 > len {
            continue;
        }
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dev)
            .unwrap();
        let mut sb = vec![0u8; 4096];
        f.seek(SeekFrom::Start(off)).unwrap();
        f.read_exact(&mut sb).unwrap();
        edit(&mut sb);
        let c = csum.compute(&sb[32..]);
        sb[..csum.size()].copy_from_slice(&c[..csum.size()]);
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&sb).unwrap();
    }
}

#[test]
fn unknown_incompat_flag_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((_, devs)) = pick(tmp.path(), |_, fs| fs.devices().count() == 1) else {
        println!("SKIP unknown_incompat_flag_is_refused_by_name: no single-device fixture yet");
        return;
    };
    let csum = Filesystem::open(&devs).unwrap().csum_type();
    for (bit, name) in [
        (13u32, "incompat flag extent_tree_v2 (bit 13)"),
        (30, "unknown incompat flag bit 30"),
    ] {
        edit_superblocks(&devs[0], csum, |sb| {
            let mut v = u64::from_le_bytes(sb[0xbc..0xc4].try_into().unwrap());
            v |= 1 << bit;
            sb[0xbc..0xc4].copy_from_slice(&v.to_le_bytes());
        });
        let e = Filesystem::open(&devs).unwrap_err().to_string();
        assert!(e.contains(name), "{e}");
        edit_superblocks(&devs[0], csum, |sb| {
            let mut v = u64::from_le_bytes(sb[0xbc..0xc4].try_into().unwrap());
            v &= !(1 << bit);
            sb[0xbc..0xc4].copy_from_slice(&v.to_le_bytes());
        });
        assert!(Filesystem::open(&devs).is_ok());
    }
}

#[test]
fn damaged_primary_superblock_falls_back_to_a_mirror_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((f, devs)) = pick(tmp.path(), |_, fs| {
        fs.devices().count() == 1 && fs.devices().all(|(_, d)| d.size() > 0x400_0000 + 4096)
    }) else {
        println!(
            "SKIP damaged_primary_superblock_falls_back_to_a_mirror_copy: no fixture over 64 MiB"
        );
        return;
    };
    xor_bytes(&devs[0], 0x10000 + 0x100, 4, 0xff);
    let (opts, seen) = recording_options();
    let fs = Filesystem::open_with(&devs, opts).unwrap();
    assert_eq!(fs.superblock().bytenr(), 0x400_0000);
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|n| n.message.contains("primary superblock is bad")));
    let sv = a_subvolume(&fs, &f);
    matches_manifest(&fs, &f, &sv).unwrap();
    // With every copy damaged the error says why for each.
    xor_bytes(&devs[0], 0x400_0000 + 0x40, 1, 0xff);
    let e = Filesystem::open(&devs).unwrap_err().to_string();
    assert!(
        e.contains("no valid btrfs superblock") && e.contains("copy 0") && e.contains("copy 1"),
        "{e}"
    );
}

/// Every copy of the metadata chunk that holds the root tree's root
/// overwritten (the root tree, its backup roots and the fs trees with it):
/// the send fails naming the root tree's root block (the superblock's root
/// address, tree 1), and so do `--rescue` and `--rescue -n`, which said
/// only "no subvolume at path ..." before.
#[test]
fn an_overwritten_metadata_chunk_is_named_by_its_bad_tree_block_in_a_rescue_too() {
    let test = "an_overwritten_metadata_chunk_is_named_by_its_bad_tree_block_in_a_rescue_too";
    let tmp = tempfile::tempdir().unwrap();
    // A filesystem whose root tree root and backup roots all lie in one
    // metadata chunk, single or DUP, on one device, with a read-only
    // snapshot to send.
    let Some((f, devs)) = pick(tmp.path(), |_, fs| {
        let sb = fs.superblock();
        let chunks = fs.chunks();
        let Some(c) = chunks.lookup(sb.root()) else {
            return false;
        };
        matches!(c.profile, Profile::Single | Profile::Dup)
            && fs.devices().count() == 1
            && sb
                .backup_roots()
                .iter()
                .all(|b| (c.logical..c.end()).contains(&b.root))
            && fs
                .subvolumes()
                .is_ok_and(|l| l.iter().any(|s| s.is_readonly()))
    }) else {
        println!("SKIP {test}: no fixture with its root tree and backup roots in one chunk");
        return;
    };
    let (root, path) = {
        let fs = Filesystem::open(&devs).unwrap();
        let root = fs.superblock().root();
        let c = fs.chunks().lookup(root).expect("mapped").clone();
        let snap = fs
            .subvolumes()
            .unwrap()
            .into_iter()
            .find(|s| s.is_readonly());
        let path = snap.expect("a read-only snapshot").path_lossy();
        // Each copy of a single or DUP chunk is its whole length.
        for mirror in 1..=c.stripes.len() as u32 {
            let (dev, phys) = physical(&fs, &devs, c.logical, mirror);
            let mut file = std::fs::OpenOptions::new().write(true).open(&dev).unwrap();
            file.seek(SeekFrom::Start(phys)).unwrap();
            file.write_all(&vec![0x5a; c.length as usize]).unwrap();
        }
        (root, path)
    };
    // The exit code, the one error line (warnings aside) and the stream.
    let rsend = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
        for d in &devs {
            cmd.arg("-d").arg(d);
        }
        let out = cmd.args(extra).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("rsend: error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{} {extra:?}: {stderr}", f.name);
        (out.status.code(), errors[0].to_owned(), out.stdout)
    };
    let bad = format!("rsend: error: tree block at logical {root} (tree 1): ");
    let (code, plain, _) = rsend(&["-f", "/dev/null"]);
    assert_eq!(code, Some(1), "{}: {plain}", f.name);
    assert!(plain.starts_with(&bad), "{}: {plain}", f.name);
    for extra in [&["--rescue", "-n"][..], &["--rescue", "-f", "/dev/null"]] {
        let (code, err, out) = rsend(extra);
        assert_eq!(code, Some(1), "{} {extra:?}: {err}", f.name);
        assert!(out.is_empty(), "{} {extra:?}", f.name);
        assert!(
            err.starts_with(&plain)
                && err.contains("; tree 1 is the root tree, which lists the subvolumes; ")
                && err.contains(&format!("no subvolume at path {path} was found")),
            "{} {extra:?}: {err}\nplain: {plain}",
            f.name
        );
    }
}
