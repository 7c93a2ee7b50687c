//! `rsend -n` on every fixture image of testdata (no root needed): for
//! every send the fixture tests make (each read-only subvolume in full,
//! each incremental pair, the clone fixture's `-p`/`-c` sends, the v2
//! flavors, several subvolumes in one command), the `size` total of the dry
//! run is the byte size of the stream the same command then writes, and
//! each subvolume's line (bytes, commands, files, file data, cloned,
//! compressed) is what that stream holds, as `btrfs_stream::Reader` reads it
//! back and as `rsend -v` counted it while writing. A dry run writes
//! nothing to `-f` and reads no file data.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use btrfs_disk::Filesystem;
use btrfs_stream::{Command as Cmd, Reader};
use common::{clone, scenarios, v2};

/// The devices of one filesystem image, decompressed, and its name.
struct Image {
    name: String,
    devices: Vec<PathBuf>,
}

impl Image {
    /// The read-only subvolumes a send accepts (alive, named), by id.
    fn sendable(&self) -> Vec<(u64, String)> {
        let fs = Filesystem::open(&self.devices)
            .unwrap_or_else(|e| panic!("{}: cannot open: {e}", self.name));
        fs.subvolumes()
            .unwrap()
            .into_iter()
            .filter(|s| s.id != 5 && s.is_readonly() && !s.is_dead() && s.link.is_some())
            .map(|s| (s.id, s.path_lossy()))
            .collect()
    }
}

/// `rsend -d DEV... ARGS`.
fn rsend<S: AsRef<std::ffi::OsStr>>(img: &Image, args: &[S]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rsend"));
    for d in &img.devices {
        c.arg("-d").arg(d);
    }
    c.args(args).output().expect("run rsend")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The counts of one stream, as `rsend -n` prints them (and as `-v` and
/// the stream itself give them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Counts {
    bytes: u64,
    commands: u64,
    files: Option<u64>,
    data: u64,
    cloned: u64,
    compressed: u64,
}

/// One line of `rsend -n`: the subvolume's path and its counts.
fn parse_dry_line(line: &str) -> Option<(String, Counts)> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != 7 {
        return None;
    }
    let n = |i: usize, unit: &str| f[i].strip_suffix(unit)?.parse::<u64>().ok();
    Some((
        f[0].to_owned(),
        Counts {
            bytes: n(1, " bytes")?,
            commands: n(2, " commands")?,
            files: Some(n(3, " files")?),
            data: n(4, " bytes of file data")?,
            cloned: n(5, " cloned")?,
            compressed: n(6, " compressed")?,
        },
    ))
}

/// `rsend -n`'s standard output: its lines and the total; every line must
/// be one of those, the total last.
fn parse_dry_run(out: &str) -> Result<(Vec<(String, Counts)>, u64), String> {
    let mut lines: Vec<&str> = out.lines().collect();
    let total = lines
        .pop()
        .and_then(|l| l.strip_prefix("size\t"))
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| format!("no `size\\tN` last line in {out:?}"))?;
    let subvols = lines
        .iter()
        .map(|l| parse_dry_line(l).ok_or_else(|| format!("not a dry-run line: {l:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((subvols, total))
}

/// What `rsend -v` says of one stream on standard error: `LABEL: C
/// commands, B bytes (D of file data in WRITEs; K cloned in N CLONEs[; E of
/// file data sent compressed as Z bytes in M ENCODED_WRITEs]), I inodes,
/// ...`.
fn parse_verbose(stderr: &str) -> Vec<Counts> {
    let mut out = Vec::new();
    for l in stderr.lines() {
        let Some(at) = l.find(" commands, ") else {
            continue;
        };
        let num_before = |s: &str, end: usize| -> Option<u64> {
            let head = &s[..end];
            let start = head.rfind([' ', '(']).map_or(0, |i| i + 1);
            head[start..].parse().ok()
        };
        let num_at = |what: &str| l.find(what).and_then(|e| num_before(l, e));
        let commands = num_before(l, at);
        let parsed = (|| {
            let encoded = num_at(" of file data sent compressed as ").unwrap_or(0);
            Some(Counts {
                commands: commands?,
                bytes: num_at(" bytes (")?,
                data: num_at(" of file data in WRITEs")? + encoded,
                cloned: num_at(" cloned in ")?,
                compressed: num_at(" bytes in ").unwrap_or(0),
                files: Some(num_at(" inodes, ")?),
            })
        })();
        match parsed {
            Some(c) => out.push(c),
            None => panic!("not an rsend -v line: {l:?}"),
        }
    }
    out
}

/// Each stream of `bytes` (concatenated streams): the name its SUBVOL or
/// SNAPSHOT gives, and what it holds; files are not counted (None).
fn streams_in(bytes: &[u8]) -> Result<Vec<(String, Counts)>, String> {
    let mut r = Reader::from_bytes(bytes);
    let mut out = Vec::new();
    let mut start = 0u64;
    let mut cur: Option<(String, Counts)> = None;
    loop {
        let (cmd, pos) = match r.next_framed() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return Err(format!("the stream written does not read back: {e}")),
        };
        let (_, c) = cur.get_or_insert_with(Default::default);
        c.commands += 1;
        match &cmd {
            Cmd::Subvol { path, .. } | Cmd::Snapshot { path, .. } => {
                cur.as_mut().unwrap().0 = text(path);
            }
            Cmd::Write { data, .. } => c.data += data.len() as u64,
            Cmd::EncodedWrite {
                data,
                unencoded_file_len,
                ..
            } => {
                c.data += unencoded_file_len;
                c.compressed += data.len() as u64;
            }
            Cmd::Clone { len, .. } => c.cloned += len,
            _ => {}
        }
        if matches!(cmd, Cmd::End {}) {
            let end = pos.offset + pos.len;
            let (name, mut c) = cur.take().unwrap();
            c.bytes = end - start;
            c.files = None;
            out.push((name, c));
            start = end;
        }
    }
    if cur.is_some() || start != bytes.len() as u64 {
        return Err(format!(
            "{} bytes after the last END (of {})",
            bytes.len() as u64 - start,
            bytes.len()
        ));
    }
    Ok(out)
}

/// Runs `rsend -n ARGS` and `rsend -v -f OUT ARGS` on `img` and compares
/// what the dry run says with the stream written; a failure is pushed onto
/// `failures`. Returns the stream's size (0 on failure).
fn check(img: &Image, args: &[String], out: &Path, failures: &mut Vec<String>) -> u64 {
    let what = format!("{}: rsend {}", img.name, args.join(" "));
    match compare(img, args, out) {
        Ok(n) => n,
        Err(e) => {
            failures.push(format!("{what}: {e}"));
            0
        }
    }
}

fn compare(img: &Image, args: &[String], out: &Path) -> Result<u64, String> {
    let dry = rsend(img, &[&["-n".to_string()], args].concat());
    if !dry.status.success() {
        return Err(format!("-n failed ({}): {}", dry.status, text(&dry.stderr)));
    }
    let (lines, total) = parse_dry_run(&text(&dry.stdout))?;
    let _ = std::fs::remove_file(out);
    let mut real_args = vec!["-v".to_string(), "-f".into(), out.display().to_string()];
    real_args.extend_from_slice(args);
    let real = rsend(img, &real_args);
    if !real.status.success() {
        return Err(format!(
            "the send failed ({}): {}",
            real.status,
            text(&real.stderr)
        ));
    }
    let bytes = std::fs::read(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let _ = std::fs::remove_file(out);
    if total != bytes.len() as u64 {
        return Err(format!(
            "-n says size {total}, the stream written has {} bytes",
            bytes.len()
        ));
    }
    let sum: u64 = lines.iter().map(|(_, c)| c.bytes).sum();
    if sum != total {
        return Err(format!(
            "the lines of -n add up to {sum}, its size is {total}"
        ));
    }
    let held = streams_in(&bytes)?;
    let verbose = parse_verbose(&text(&real.stderr));
    if lines.len() != held.len() || verbose.len() != held.len() {
        return Err(format!(
            "-n has {} lines, the file {} streams, -v {} lines",
            lines.len(),
            held.len(),
            verbose.len()
        ));
    }
    for (i, (((path, dry), (name, stream)), v)) in lines.iter().zip(&held).zip(&verbose).enumerate()
    {
        if path.rsplit('/').next() != Some(name.as_str()) {
            return Err(format!("line {i} of -n is of {path}, stream {i} of {name}"));
        }
        let without_files = Counts {
            files: None,
            ..dry.clone()
        };
        if &without_files != stream {
            return Err(format!(
                "{path}: -n says {dry:?}, the stream holds {stream:?}"
            ));
        }
        if dry != v {
            return Err(format!("{path}: -n says {dry:?}, -v of the send {v:?}"));
        }
    }
    Ok(total)
}

/// Every fixture of testdata/images, decompressed into `dir`.
fn image_fixtures(dir: &Path) -> Vec<Image> {
    common::fixtures()
        .into_iter()
        .map(|f| Image {
            devices: f.decompress(dir),
            name: format!("images/{}", f.name),
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Every read-only subvolume of `img` sent in full (by id), then all of
/// them in one command; the bytes checked.
fn each_subvolume_then_all(img: &Image, out: &Path, failures: &mut Vec<String>) -> (usize, u64) {
    let subvols = img.sendable();
    let mut bytes = 0;
    for (id, _) in &subvols {
        bytes += check(
            img,
            &strings(&["--subvolid", &id.to_string()]),
            out,
            failures,
        );
    }
    let all: Vec<String> = subvols
        .iter()
        .flat_map(|(id, _)| ["--subvolid".to_string(), id.to_string()])
        .collect();
    if subvols.len() > 1 {
        let together = check(img, &all, out, failures);
        if together != bytes && failures.is_empty() {
            failures.push(format!(
                "{}: the streams sent one by one have {bytes} bytes, all in one command {together}",
                img.name
            ));
        }
    }
    (subvols.len() + 1, bytes)
}

#[test]
fn dry_run_size_is_the_stream_of_every_image_fixture_subvolume() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.stream");
    let mut failures = Vec::new();
    let images = image_fixtures(tmp.path());
    assert!(!images.is_empty(), "no fixture in testdata/images");
    let mut multi = 0;
    let (mut sends, mut bytes) = (0, 0);
    for img in &images {
        multi += usize::from(img.devices.len() > 1);
        let (n, b) = each_subvolume_then_all(img, &out, &mut failures);
        sends += n;
        bytes += b;
    }
    println!(
        "{} images ({multi} multi-device): {sends} sends, {bytes} bytes, -n exact",
        images.len()
    );
    assert!(multi > 0, "no multi-device fixture among testdata/images");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dry_run_size_is_the_stream_of_every_incremental_fixture_send() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.stream");
    let img = Image {
        name: "incremental".into(),
        devices: vec![scenarios::decompress_image(tmp.path())],
    };
    let mut failures = Vec::new();
    let (mut sends, mut bytes) = each_subvolume_then_all(&img, &out, &mut failures);
    for n in scenarios::names() {
        let args = strings(&["-p", &format!("{n}.p"), &format!("{n}.c")]);
        bytes += check(&img, &args, &out, &mut failures);
        sends += 1;
    }
    // The chain step by step, then as one command (each later step against
    // the one before, picked among the streams sent before it).
    let chain = scenarios::chain();
    for w in chain.windows(2) {
        check(&img, &strings(&["-p", &w[0], &w[1]]), &out, &mut failures);
        sends += 1;
    }
    if chain.len() > 2 {
        let mut args = strings(&["-p", &chain[0]]);
        args.extend(chain[1..].iter().cloned());
        check(&img, &args, &out, &mut failures);
        sends += 1;
    }
    println!("incremental image: {sends} sends, {bytes} bytes, -n exact");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dry_run_size_is_the_stream_of_every_clone_fixture_send() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.stream");
    let img = Image {
        name: "clone".into(),
        devices: vec![clone::decompress_image(tmp.path())],
    };
    let mut failures = Vec::new();
    let (mut sends, _) = each_subvolume_then_all(&img, &out, &mut failures);
    // The sends of kernel.tsv, with their -p and -c.
    for s in clone::sends() {
        check(&img, &s.args, &out, &mut failures);
        sends += 1;
    }
    println!("clone image: {sends} sends, -n exact");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dry_run_size_is_the_stream_of_every_v2_flavor() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.stream");
    let mut failures = Vec::new();
    let mut sends = 0;
    let dev1 = Image {
        name: "v2/dev1".into(),
        devices: vec![v2::decompress_image("dev1", tmp.path())],
    };
    sends += each_subvolume_then_all(&dev1, &out, &mut failures).0;
    for (_, flags) in v2::FLAVORS {
        for n in v2::scenarios() {
            for kind in ["full", "incr"] {
                check(&dev1, &v2::send_args(flags, &n, kind), &out, &mut failures);
                sends += 1;
            }
        }
        // Every snapshot of the image in one command, in this flavor.
        let mut all = strings(flags);
        all.extend(dev1.sendable().into_iter().map(|(_, p)| p));
        check(&dev1, &all, &out, &mut failures);
        sends += 1;
    }
    // The mkfs-made LZO images and the fs-verity one, in every flavor and
    // protocol version 3.
    let mut others: Vec<(Image, [&str; 2])> = v2::LZO_SECTORS
        .iter()
        .map(|s| {
            let name = format!("lzo-{s}");
            let devices = vec![v2::decompress_image(&name, tmp.path())];
            (
                Image {
                    name: format!("v2/{name}"),
                    devices,
                },
                ["a", "b"],
            )
        })
        .collect();
    others.push((
        Image {
            name: "v2/verity".into(),
            devices: vec![v2::decompress_image("verity", tmp.path())],
        },
        ["verity.p", "verity.c"],
    ));
    let v3: &[&str] = &["--proto", "3"];
    let v3c: &[&str] = &["--proto", "3", "--compressed-data"];
    for (img, [p, c]) in &others {
        sends += each_subvolume_then_all(img, &out, &mut failures).0;
        for flags in v2::FLAVORS.iter().map(|(_, f)| *f).chain([v3, v3c]) {
            let mut full = strings(flags);
            full.push(p.to_string());
            check(img, &full, &out, &mut failures);
            let mut incr = strings(flags);
            incr.extend(strings(&["-p", p, c]));
            check(img, &incr, &out, &mut failures);
            sends += 2;
        }
    }
    println!("v2 images: {sends} sends, -n exact");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `rsend -n -f OUT`: OUT is never opened; not made when missing, left as
/// it was when there, and a directory that does not exist is no error.
#[test]
fn dry_run_never_opens_the_output_file() {
    let tmp = tempfile::tempdir().unwrap();
    let img = Image {
        name: "incremental".into(),
        devices: vec![scenarios::decompress_image(tmp.path())],
    };
    let snap = "changed_files.c";
    let base = rsend(&img, &["-n", snap]);
    assert!(base.status.success(), "{}", text(&base.stderr));
    // Quiet: the table names the subvolume, no "At subvol" line.
    assert_eq!(text(&base.stderr), "", "rsend -n says nothing more");
    let missing = tmp.path().join("missing.stream");
    let o = rsend(&img, &["-n", "-f", missing.to_str().unwrap(), snap]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(o.stdout, base.stdout, "-n -f MISSING prints what -n prints");
    assert!(!missing.exists(), "rsend -n made {}", missing.display());

    let there = tmp.path().join("there.stream");
    std::fs::write(&there, b"keep me").unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(&there)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let o = rsend(&img, &["-n", "-f", there.to_str().unwrap(), snap]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&there).unwrap(), b"keep me");
    assert_eq!(std::fs::metadata(&there).unwrap().modified().unwrap(), old);

    let nodir = tmp.path().join("no/such/dir/out.stream");
    let o = rsend(&img, &["-n", "-f", nodir.to_str().unwrap(), snap]);
    assert!(
        o.status.success(),
        "-n -f in a missing directory: {}",
        text(&o.stderr)
    );
    assert!(!tmp.path().join("no").exists());

    // `-f -` and no -f: the table alone on standard output.
    for args in [&["-n", "-f", "-", snap][..], &["-n", snap]] {
        let o = rsend(&img, args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(o.stdout, base.stdout, "rsend {args:?}");
    }
    let (lines, total) = parse_dry_run(&text(&base.stdout)).unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].0, snap);
    assert!(total > 0);
}

/// `-n --parent-from LIST` picks the parent as the send does and measures
/// the stream that send writes; the choice is said on stderr either way.
#[test]
fn dry_run_with_parent_from_measures_the_stream_of_the_parent_it_picks() {
    let tmp = tempfile::tempdir().unwrap();
    let img = Image {
        name: "incremental".into(),
        devices: vec![scenarios::decompress_image(tmp.path())],
    };
    let fs = Filesystem::open(&img.devices).unwrap();
    let uuid_of = |p: &str| {
        if p == "elsewhere" {
            return uuid::Uuid::from_u128(0x1234_5678);
        }
        let sv = fs
            .find_subvolume(&btrfs_disk::SubvolSelector::Path(p.into()))
            .unwrap();
        rsend::send::stream_uuid_of(&sv)
    };
    let list = tmp.path().join("list");
    let out = tmp.path().join("out.stream");
    let mut failures = Vec::new();
    for (held, parent) in [
        (vec!["chain.0", "chain.1", "chain.2"], Some("chain.2")),
        (vec!["elsewhere"], None),
    ] {
        let mut text_list: String = held
            .iter()
            .map(|h| format!("{h}\t{}\t1\t-\tcomplete\n", uuid_of(h)))
            .collect();
        text_list.push_str(&format!("# end of list: {} subvolumes\n", held.len()));
        std::fs::write(&list, text_list).unwrap();
        let args = strings(&["--parent-from", list.to_str().unwrap(), "chain.3"]);
        let n = check(&img, &args, &out, &mut failures);
        let dry = rsend(&img, &[&["-n".to_string()], &args[..]].concat());
        let said = text(&dry.stderr);
        match parent {
            Some(p) => {
                assert!(
                    said.contains(&format!("rsend: parent {p} (subvolume ")),
                    "{said}"
                );
                let pick = strings(&["-p", p, "chain.3"]);
                let by_p = check(&img, &pick, &out, &mut failures);
                assert_eq!(n, by_p, "--parent-from and -p {p}");
            }
            None => {
                assert!(said.contains("sending chain.3 (subvolume"), "{said}");
                let full = check(&img, &strings(&["chain.3"]), &out, &mut failures);
                assert_eq!(n, full, "--parent-from with no parent held and a full send");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A dry run reads no file data: with a compressed extent damaged on disk,
/// the send fails on its checksum and `-n` still gives the size the
/// undamaged stream has.
#[test]
fn dry_run_reads_no_file_data() {
    let tmp = tempfile::tempdir().unwrap();
    let image = v2::decompress_image("dev1", tmp.path());
    let img = Image {
        name: "v2/dev1".into(),
        devices: vec![image.clone()],
    };
    let args = ["--proto", "2", "--compressed-data", "zstd_extents.p"];
    let plain = ["zstd_extents.p"];
    let before = rsend(&img, &[&["-n"][..], &args].concat());
    let before_plain = rsend(&img, &[&["-n"][..], &plain].concat());
    assert!(before.status.success() && before_plain.status.success());
    let (_, _, phys) = v2::compressed_extent_of_b(&image);
    testkit::xor_byte(&image, phys + 100, 0x40);
    let out = tmp.path().join("out.stream");
    let real = rsend(
        &img,
        &[&["-q", "-f", out.to_str().unwrap()][..], &args].concat(),
    );
    assert_eq!(real.status.code(), Some(1), "{}", text(&real.stderr));
    assert!(
        text(&real.stderr).contains("checksum"),
        "{}",
        text(&real.stderr)
    );
    for (args, before) in [(&args[..], &before), (&plain[..], &before_plain)] {
        let after = rsend(&img, &[&["-n"][..], args].concat());
        assert!(
            after.status.success(),
            "rsend -n {args:?} with damaged data: {}",
            text(&after.stderr)
        );
        assert_eq!(
            text(&after.stdout),
            text(&before.stdout),
            "rsend -n {args:?}"
        );
    }
}

/// `rsend -n ... | head -0`: standard output closed before the table is
/// printed ends the dry run quietly, as `rreceive --list` does, not with a
/// panic.
#[test]
fn dry_run_into_a_closed_pipe_does_not_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let img = scenarios::decompress_image(tmp.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rsend"))
        .arg("-d")
        .arg(&img)
        .args(["-q", "-n", "new_files.p", "new_files.c"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(o.status.code(), Some(101), "{err}");
}
