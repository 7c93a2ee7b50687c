//! Every kernel-made image of testdata/images: each file of each subvolume
//! must match the manifest taken from the mounted snapshot, and `rsend
//! --list` must print what `btrfs subvolume list -p -u -q -R` printed.

mod common;

use std::process::Command;

use btrfs_disk::{Filesystem, NoticeKind};
use common::{fixtures, manifest_of, read_manifest, recording_options};

fn diff(want: &[String], got: &[String]) -> String {
    let w: std::collections::BTreeSet<_> = want.iter().collect();
    let g: std::collections::BTreeSet<_> = got.iter().collect();
    let mut s = String::new();
    for l in w.difference(&g).take(5) {
        s.push_str(&format!("\n  - {l}"));
    }
    for l in g.difference(&w).take(5) {
        s.push_str(&format!("\n  + {l}"));
    }
    s
}

#[test]
fn every_file_of_every_subvolume_matches_its_manifest() {
    let all = fixtures();
    if all.is_empty() {
        println!("SKIP every_file_of_every_subvolume_matches_its_manifest: no fixtures in testdata/images");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for f in &all {
        let devs = f.decompress(tmp.path());
        let (opts, seen) = recording_options();
        let fs = match Filesystem::open_with(&devs, opts) {
            Ok(fs) => fs,
            Err(e) => {
                failures.push(format!("{}: open: {e}", f.name));
                continue;
            }
        };
        let mut checked = 0;
        let mut manifests: Vec<_> = std::fs::read_dir(&f.dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.starts_with("subvol-") && n.ends_with(".manifest") && !n.contains(".replayed.")
            })
            .collect();
        manifests.sort();
        for m in manifests {
            let id: u64 = m["subvol-".len()..m.len() - ".manifest".len()]
                .parse()
                .unwrap();
            let sv = match fs.subvolume(id) {
                Ok(sv) => sv,
                Err(e) => {
                    failures.push(format!("{} subvol {id}: {e}", f.name));
                    continue;
                }
            };
            let (want, want_skipped) = read_manifest(&f.dir.join(&m));
            match manifest_of(&fs, &sv) {
                Ok((got, got_skipped)) => {
                    if got != want {
                        failures.push(format!(
                            "{} subvol {id}: manifest differs:{}",
                            f.name,
                            diff(&want, &got)
                        ));
                    } else if got_skipped != want_skipped {
                        failures.push(format!(
                            "{} subvol {id}: skipped subvolumes {got_skipped:?}, manifest says {want_skipped:?}",
                            f.name
                        ));
                    } else {
                        checked += want.len();
                    }
                }
                Err(e) => failures.push(format!("{} subvol {id}: {e}", f.name)),
            }
        }
        let bad: Vec<_> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.kind == NoticeKind::Repair)
            .map(|n| n.to_string())
            .collect();
        if !bad.is_empty() {
            failures.push(format!(
                "{}: unexpected repairs on a clean image: {bad:?}",
                f.name
            ));
        }
        println!("fixture {}: {checked} manifest entries match", f.name);
        drop(fs);
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn list_prints_what_btrfs_subvolume_list_printed() {
    let all = fixtures();
    if all.is_empty() {
        println!(
            "SKIP list_prints_what_btrfs_subvolume_list_printed: no fixtures in testdata/images"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for f in &all {
        let devs = f.decompress(tmp.path());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
        cmd.arg("--list");
        for d in &devs {
            cmd.arg("-d").arg(d);
        }
        let out = cmd.output().unwrap();
        let want = std::fs::read(f.dir.join("subvolumes.txt")).unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{}: exit {}: {}",
                f.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        } else if out.stdout != want {
            failures.push(format!(
                "{}: got\n{}\nwant\n{}",
                f.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&want)
            ));
        } else {
            println!("fixture {}: --list matches", f.name);
        }
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Parses `ID n gen g ... uuid U path P` lines of subvolumes.txt: (id, uuid, path).
fn listed(text: &str) -> Vec<(u64, String, String)> {
    text.lines()
        .filter_map(|l| {
            let id = l.strip_prefix("ID ")?.split(' ').next()?.parse().ok()?;
            let (_, rest) = l.split_once(" uuid ")?;
            let (uuid, path) = rest.split_once(" path ")?;
            Some((id, uuid.trim().to_string(), path.to_string()))
        })
        .collect()
}

#[test]
fn subvolumes_are_found_by_path_id_and_uuid() {
    use btrfs_disk::SubvolSelector;
    let all = fixtures();
    if all.is_empty() {
        println!("SKIP subvolumes_are_found_by_path_id_and_uuid: no fixtures in testdata/images");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for f in &all {
        let devs = f.decompress(tmp.path());
        let (opts, seen) = recording_options();
        let fs = Filesystem::open_with(&devs, opts).unwrap();
        let text = std::fs::read_to_string(f.dir.join("subvolumes.txt")).unwrap();
        for (id, uuid, path) in listed(&text) {
            let by_id = fs.find_subvolume(&SubvolSelector::Id(id)).unwrap();
            assert_eq!(by_id.path_lossy(), path, "{}", f.name);
            let by_path = fs
                .find_subvolume(&SubvolSelector::Path((&path).into()))
                .unwrap();
            assert_eq!(by_path.id, id, "{} {path}", f.name);
            let slashed = fs
                .find_subvolume(&SubvolSelector::Path(format!("/{path}").into()))
                .unwrap();
            assert_eq!(slashed.id, id, "{} /{path}", f.name);
            let u = uuid::Uuid::parse_str(&uuid).unwrap();
            let by_uuid = fs.find_subvolume(&SubvolSelector::Uuid(u)).unwrap();
            assert_eq!(by_uuid.id, id, "{} {uuid}", f.name);
            assert_eq!(by_uuid.uuid, u);
        }
        let top = fs
            .find_subvolume(&SubvolSelector::Path("/".into()))
            .unwrap();
        assert_eq!(top.id, 5);
        assert!(fs
            .find_subvolume(&SubvolSelector::Path("no/such/subvol".into()))
            .is_err());
        // An unclean image warns about its log tree; clean ones do not.
        let log_root = f.info.get("log_root").map(String::as_str).unwrap_or("0");
        let warned = seen
            .lock()
            .unwrap()
            .iter()
            .any(|n| n.kind == NoticeKind::Warning && n.message.contains("log tree"));
        assert_eq!(warned, log_root != "0", "{}: log_root={log_root}", f.name);
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
}

#[test]
fn file_extents_and_backrefs_match_dump_tree() {
    use btrfs_disk::items::{BackRef, Compression, ExtentKind};
    let all = fixtures();
    if all.is_empty() {
        println!("SKIP file_extents_and_backrefs_match_dump_tree: no fixtures in testdata/images");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for f in &all {
        let Ok(tsv) = std::fs::read_to_string(f.dir.join("files.tsv")) else {
            continue;
        };
        let devs = f.decompress(tmp.path());
        let (opts, _) = recording_options();
        let fs = Filesystem::open_with(&devs, opts).unwrap();
        // (subvol, ino) -> rows
        let mut rows: std::collections::BTreeMap<(u64, u64), Vec<Vec<String>>> = Default::default();
        for l in tsv.lines().filter(|l| !l.starts_with('#')) {
            let c: Vec<String> = l.split('\t').map(str::to_string).collect();
            if c.len() < 14 || c[6] == "none" {
                continue;
            }
            rows.entry((c[0].parse().unwrap(), c[1].parse().unwrap()))
                .or_default()
                .push(c);
        }
        let mut n = 0;
        for ((subvol, ino), want) in &rows {
            let sv = fs.subvolume(*subvol).unwrap();
            let got = fs.file_extents(&sv, *ino).unwrap();
            let dash = |v: u64| v.to_string();
            let got_rows: Vec<Vec<String>> = got
                .iter()
                .map(|e| {
                    let inline = e.kind == ExtentKind::Inline;
                    let comp = match e.compression {
                        Compression::None => "none",
                        Compression::Zlib => "zlib",
                        Compression::Lzo => "lzo",
                        Compression::Zstd => "zstd",
                    };
                    let kind = match e.kind {
                        ExtentKind::Inline => "inline",
                        ExtentKind::Regular => "regular",
                        ExtentKind::Prealloc => "prealloc",
                    };
                    let opt = |v: u64| if inline { "-".to_string() } else { dash(v) };
                    vec![
                        e.file_offset.to_string(),
                        kind.to_string(),
                        comp.to_string(),
                        opt(e.disk_bytenr),
                        opt(e.disk_num_bytes),
                        opt(e.offset),
                        opt(e.num_bytes),
                        if e.kind == ExtentKind::Prealloc {
                            "-".into()
                        } else {
                            e.ram_bytes.to_string()
                        },
                        if inline {
                            e.inline.len().to_string()
                        } else {
                            "-".into()
                        },
                    ]
                })
                .collect();
            let want_rows: Vec<Vec<String>> = want.iter().map(|c| c[5..14].to_vec()).collect();
            if got_rows != want_rows {
                failures.push(format!(
                    "{} subvol {subvol} ino {ino}: extents {got_rows:?}, dump-tree {want_rows:?}",
                    f.name
                ));
                continue;
            }
            for e in got
                .iter()
                .filter(|e| e.kind != ExtentKind::Inline && e.disk_bytenr != 0)
            {
                match fs.extent_backrefs(e.disk_bytenr).unwrap() {
                    Some((_, refs))
                        if refs.iter().any(|r| {
                            matches!(r, BackRef::ExtentData { .. } | BackRef::SharedData { .. })
                        }) => {}
                    other => failures.push(format!(
                        "{} subvol {subvol} ino {ino} extent {}: backrefs {other:?}",
                        f.name, e.disk_bytenr
                    )),
                }
                n += 1;
            }
        }
        println!(
            "fixture {}: {} files' extents match, {n} extents have data backrefs",
            f.name,
            rows.len()
        );
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn unaligned_reads_match_whole_file_reads() {
    let all = fixtures();
    if all.is_empty() {
        println!("SKIP unaligned_reads_match_whole_file_reads: no fixtures in testdata/images");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for f in &all {
        let devs = f.decompress(tmp.path());
        let (opts, _) = recording_options();
        let fs = Filesystem::open_with(&devs, opts).unwrap();
        let mut files = 0;
        for sv in fs.subvolumes().unwrap() {
            let mut stack = vec![256u64];
            while let Some(dir) = stack.pop() {
                for e in fs.read_dir(&sv, dir).unwrap() {
                    if e.location.item_type != btrfs_disk::items::key_type::INODE_ITEM {
                        continue;
                    }
                    let ino = e.location.objectid;
                    let inode = fs.inode(&sv, ino).unwrap();
                    if inode.file_type() == 0o040000 {
                        stack.push(ino);
                        continue;
                    }
                    if inode.file_type() != 0o100000 || inode.size == 0 {
                        continue;
                    }
                    let mut whole = vec![0u8; inode.size as usize];
                    assert_eq!(fs.read_file(&sv, ino, 0, &mut whole).unwrap(), whole.len());
                    // Odd-sized pieces from odd offsets, and a read past the end.
                    let mut off = 0usize;
                    let mut step = 1usize;
                    while off < whole.len() {
                        let mut buf = vec![0xaau8; step];
                        let n = fs.read_file(&sv, ino, off as u64, &mut buf).unwrap();
                        let want = &whole[off..(off + step).min(whole.len())];
                        assert_eq!(
                            &buf[..n],
                            want,
                            "{} subvol {} ino {ino} at {off}+{step}",
                            f.name,
                            sv.id
                        );
                        off += n;
                        step = (step * 7 + 4093) % 70001 + 1;
                    }
                    let mut tail = [0u8; 10];
                    assert_eq!(fs.read_file(&sv, ino, inode.size, &mut tail).unwrap(), 0);
                    files += 1;
                }
            }
        }
        println!("fixture {}: {files} files read in odd pieces", f.name);
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
}
