//! `rdump --chains` over piles of real kernel streams (testdata/incremental's
//! chain.0 ... chain.5 and testdata/kernel), and zstd-compressed input.
//!
//! What the nights are is read from the fixtures themselves, never from
//! `--chains`: uuids from `btrfs subvolume list` (image/subvolumes.txt) and
//! from `btrfs receive --dump` (testdata/kernel/*.dump), ctransids from the
//! first line of `rdump --json`, and command offsets, counts and data bytes
//! from a walk over the command headers here.

#[allow(dead_code)] // scratch() serves the other tests.
mod common;

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use btrfs_stream::{Command as Cmd, Uuid, Writer};
use serde_json::Value;

use common::{rdump, rdump_piped};

/// A file of the workspace's testdata.
fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

/// chain.N of testdata/incremental, decompressed.
fn chain_stream(n: u32) -> Vec<u8> {
    let kind = if n == 0 { "full" } else { "incr" };
    let path = testdata(&format!("incremental/streams/chain.{n}.{kind}.stream.zst"));
    zstd::decode_all(fs::File::open(&path).expect("open fixture")).expect("decompress fixture")
}

/// chain.N's compressed fixture.
fn chain_zst(n: u32) -> PathBuf {
    let kind = if n == 0 { "full" } else { "incr" };
    testdata(&format!("incremental/streams/chain.{n}.{kind}.stream.zst"))
}

/// The uuid of each snapshot of testdata/incremental's image, by path, as
/// `btrfs subvolume list -u` printed it.
fn listed_uuids() -> HashMap<String, String> {
    let text = fs::read_to_string(testdata("incremental/image/subvolumes.txt")).unwrap();
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = |k: &str| w.iter().position(|x| *x == k).map(|i| w[i + 1]);
            Some((at("path")?.to_owned(), at("uuid")?.to_owned()))
        })
        .collect()
}

/// The uuid of chain.N, from the listing.
fn chain_uuid(n: u32) -> String {
    listed_uuids()[&format!("chain.{n}")].clone()
}

/// The first command of a stream file, as `rdump --json` prints it.
fn first_command(path: &Path) -> Value {
    let out = rdump(&["--json", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// `field=value` of the first line of a `btrfs receive --dump` file.
fn dumped(dump: &str, field: &str) -> String {
    let text = fs::read_to_string(testdata(dump)).unwrap();
    let line = text.lines().next().unwrap();
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .to_owned()
}

/// One command as found by [`walk`].
#[derive(Debug)]
struct Found {
    offset: u64,
    /// WRITE's data bytes.
    data: u64,
}

/// The commands of a one-stream v1 file, from their headers: le32 payload
/// length, le16 command, le32 crc; attributes le16 type, le16 length.
fn walk(b: &[u8]) -> Vec<Found> {
    assert_eq!(&b[..13], b"btrfs-stream\0");
    assert_eq!(u32::from_le_bytes(b[13..17].try_into().unwrap()), 1);
    let mut at = 17;
    let mut found = Vec::new();
    while at < b.len() {
        let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let cmd = u16::from_le_bytes(b[at + 4..at + 6].try_into().unwrap());
        let mut data = 0;
        if cmd == 15 {
            // WRITE: sum its DATA (19) attribute.
            let mut a = at + 10;
            while a < at + 10 + len {
                let ty = u16::from_le_bytes(b[a..a + 2].try_into().unwrap());
                let alen = u16::from_le_bytes(b[a + 2..a + 4].try_into().unwrap()) as usize;
                if ty == 19 {
                    data += alen as u64;
                }
                a += 4 + alen;
            }
        }
        found.push(Found {
            offset: at as u64,
            data,
        });
        at += 10 + len;
    }
    assert_eq!(at, b.len());
    found
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `rdump --chains --json ARGS`: exit code and the document.
fn chains_json(args: &[&Path]) -> (Option<i32>, Value) {
    let mut a = vec!["--chains", "--json"];
    a.extend(args.iter().map(|p| p.to_str().unwrap()));
    let out = rdump(&a);
    let doc = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&out)));
    (out.status.code(), doc)
}

/// `rdump --chains ARGS` as text.
fn chains_text(args: &[&Path]) -> Output {
    let mut a = vec!["--chains"];
    a.extend(args.iter().map(|p| p.to_str().unwrap()));
    rdump(&a)
}

/// The night lines of the text (those starting with a tab) under the
/// header line `header`, split into fields.
fn night_lines<'a>(text: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(1)
        .take_while(|l| l.starts_with('\t'))
        .map(|l| l[1..].split('\t').collect())
        .collect()
}

/// A scratch directory holding chain.N as `names[N]`, decompressed except
/// those in `zst`.
fn pile(names: &[&str], zst: &[u32]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (n, name) in names.iter().enumerate() {
        let n = n as u32;
        let to = dir.path().join(name);
        if zst.contains(&n) {
            fs::copy(chain_zst(n), &to).unwrap();
        } else {
            fs::write(&to, chain_stream(n)).unwrap();
        }
    }
    dir
}

/// Names for chain.0 ... chain.5 whose order by name is another.
const SCRAMBLED: [&str; 6] = [
    "d-tuesday.stream",
    "b-wednesday.stream",
    "f-thursday.stream",
    "a-friday.stream",
    "e-saturday.stream",
    "c-sunday.stream",
];

#[test]
fn chain_of_six_nights_in_scrambled_names_comes_out_in_link_order() {
    let dir = pile(&SCRAMBLED, &[2]);
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.starts_with("chain 1: 6 nights, starts with a full stream\n"),
        "{text}"
    );
    let lines = night_lines(&text, "chain 1:");
    assert_eq!(lines.len(), 6, "{text}");
    for (n, f) in lines.iter().enumerate() {
        let n = n as u32;
        let file = dir.path().join(SCRAMBLED[n as usize]);
        let first = first_command(&file);
        let bytes = chain_stream(n);
        let cmds = walk(&bytes);
        assert_eq!(f[0], file.to_str().unwrap(), "{text}");
        assert_eq!(f[1], "1@0");
        assert_eq!(f[2], format!("chain.{n}"));
        assert_eq!(f[3], chain_uuid(n), "{text}");
        assert_eq!(f[4], first["ctransid"].to_string());
        if n == 0 {
            assert_eq!(first["command"], "subvol");
            assert_eq!((f[5], f[6]), ("-", "-"));
        } else {
            assert_eq!(f[5], chain_uuid(n - 1), "{text}");
            assert_eq!(f[6], first["clone_ctransid"].to_string());
        }
        assert_eq!(f[7], if n == 2 { "v1+zstd" } else { "v1" });
        assert_eq!(f[8], bytes.len().to_string());
        assert_eq!(f[9], cmds.len().to_string());
        assert_eq!(f[10], cmds.iter().map(|c| c.data).sum::<u64>().to_string());
        assert_eq!(f[11], "ok");
    }
    assert!(text.ends_with("6 nights in 6 files, 1 chain, 0 errors, 0 warnings\n"));
}

#[test]
fn chain_as_json_has_every_night_field() {
    let dir = pile(&SCRAMBLED, &[0]);
    let (code, doc) = chains_json(&[dir.path()]);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["problems"], Value::Array(vec![]));
    let chains = doc["chains"].as_array().unwrap();
    assert_eq!(chains.len(), 1, "{doc:#}");
    assert_eq!(chains[0]["start"], "full");
    assert_eq!(chains[0]["complete"], true);
    let nights = doc["nights"].as_array().unwrap();
    // Nights come in the order of the file names; the chain orders them.
    let order: Vec<usize> = chains[0]["nights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    for (n, &i) in order.iter().enumerate() {
        let night = &nights[i];
        let n = n as u32;
        let file = dir.path().join(SCRAMBLED[n as usize]);
        let first = first_command(&file);
        assert_eq!(night["file"], file.to_str().unwrap());
        assert_eq!(night["uuid"], chain_uuid(n));
        assert_eq!(night["ctransid"], first["ctransid"]);
        assert_eq!(night["name"], format!("chain.{n}"));
        assert_eq!(night["stream"], 1);
        assert_eq!(night["offset"], 0);
        assert_eq!(night["length"], chain_stream(n).len());
        assert_eq!(night["version"], 1);
        assert_eq!(night["compressed"], n == 0);
        assert_eq!(night["ended"], true);
        assert_eq!(night["error"], Value::Null);
        assert_eq!(night["chain"], 0);
        if n == 0 {
            assert_eq!(night["kind"], "full");
            assert_eq!(night["first_command"], "subvol");
            assert_eq!(night["parent_uuid"], Value::Null);
            assert_eq!(night["follows"], Value::Null);
        } else {
            assert_eq!(night["kind"], "incremental");
            assert_eq!(night["first_command"], "snapshot");
            assert_eq!(night["parent_uuid"], chain_uuid(n - 1));
            assert_eq!(night["parent_ctransid"], first["clone_ctransid"]);
            assert_eq!(night["follows"], order[n as usize - 1]);
        }
    }
}

#[test]
fn night_deleted_from_the_middle_is_a_missing_link_named_by_its_uuid() {
    let dir = pile(&SCRAMBLED, &[]);
    let gone = dir.path().join(SCRAMBLED[2]);
    let ctransid = first_command(&gone)["ctransid"].clone();
    fs::remove_file(&gone).unwrap();
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let missing = format!(
        "missing link: parent {} ctransid {ctransid} not among the files",
        chain_uuid(2)
    );
    // Chains come in the order of their first nights' file names: chain.3
    // is a-friday.stream.
    assert!(
        text.starts_with(&format!("chain 1: 3 nights, incomplete: {missing}\n")),
        "{text}"
    );
    assert!(
        text.contains("chain 2: 2 nights, starts with a full stream\n"),
        "{text}"
    );
    let uuids = |header| -> Vec<String> {
        night_lines(&text, header)
            .iter()
            .map(|f| f[3].to_owned())
            .collect()
    };
    assert_eq!(
        uuids("chain 1:"),
        [chain_uuid(3), chain_uuid(4), chain_uuid(5)]
    );
    assert_eq!(uuids("chain 2:"), [chain_uuid(0), chain_uuid(1)]);
    assert!(
        text.contains(&format!("\terror: {missing} (needed by chain.3 (")),
        "{text}"
    );
    assert!(
        stderr(&out).contains("rdump: error: 1 problem"),
        "{}",
        stderr(&out)
    );

    let (code, doc) = chains_json(&[dir.path()]);
    assert_eq!(code, Some(1));
    assert_eq!(doc["ok"], false);
    let p = &doc["problems"][0];
    assert_eq!(p["kind"], "missing_link", "{doc:#}");
    assert_eq!(p["error"], true);
    assert_eq!(p["parent_uuid"], chain_uuid(2));
    assert_eq!(p["parent_ctransid"], ctransid);
    assert_eq!(doc["chains"][0]["start"], "missing_parent");
    assert_eq!(doc["chains"][0]["complete"], false);
    assert_eq!(doc["chains"][0]["missing_parent"]["uuid"], chain_uuid(2));
    assert_eq!(doc["chains"][1]["complete"], true);
}

#[test]
fn same_night_in_two_files_is_a_duplicate_naming_both() {
    let dir = pile(&SCRAMBLED, &[]);
    let copy = dir.path().join("z-copy.stream");
    fs::copy(dir.path().join(SCRAMBLED[3]), &copy).unwrap();
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    // A duplicate is a warning: the chain is still whole.
    assert_eq!(out.status.code(), Some(0), "{text}");
    let ctransid = first_command(&copy)["ctransid"].clone();
    let a = dir.path().join(SCRAMBLED[3]);
    assert!(
        text.contains(&format!(
            "\twarning: duplicate: {} ctransid {ctransid} sent by chain.3 ({}), chain.3 ({})\n",
            chain_uuid(3),
            a.display(),
            copy.display()
        )),
        "{text}"
    );
    // In the chain the copy follows its twin.
    let lines = night_lines(&text, "chain 1:");
    let files: Vec<&str> = lines.iter().map(|f| f[0]).collect();
    let at = files
        .iter()
        .position(|f| *f == a.to_str().unwrap())
        .unwrap();
    assert_eq!(files[at + 1], copy.to_str().unwrap());
    assert!(lines[at + 1][11].contains("duplicate of "), "{text}");
    assert_eq!(lines.len(), 7);
}

#[test]
fn file_cut_short_is_named_with_the_offset_of_the_cut_command() {
    let dir = pile(&SCRAMBLED, &[]);
    let cut = dir.path().join(SCRAMBLED[4]);
    let bytes = fs::read(&cut).unwrap();
    let cmds = walk(&bytes);
    // Cut inside the header of the 8th command.
    let k = 8;
    let off = cmds[k - 1].offset;
    fs::write(&cut, &bytes[..off as usize + 4]).unwrap();
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let fault =
        format!("cut short: truncated command header (4 of 10 bytes) at byte {off} (command #{k})");
    assert!(
        text.contains(&format!(
            "\terror: broken stream: chain.4 ({}): {fault}\n",
            cut.display()
        )),
        "{text}"
    );
    // The night keeps its place in the chain, its status the fault.
    let lines = night_lines(&text, "chain 1:");
    assert_eq!(lines[4][3], chain_uuid(4));
    assert_eq!(lines[4][8], off.to_string());
    assert_eq!(lines[4][9], (k - 1).to_string());
    assert_eq!(lines[4][11], fault);

    let (_, doc) = chains_json(&[&cut]);
    let e = &doc["nights"][0]["error"];
    assert_eq!(e["kind"], "cut_short", "{doc:#}");
    assert_eq!(e["offset"], off);
    assert_eq!(e["command"], k);
    assert_eq!(doc["nights"][0]["ended"], false);
}

#[test]
fn flipped_byte_is_a_crc_error_at_its_command() {
    let dir = pile(&SCRAMBLED, &[]);
    let bad = dir.path().join(SCRAMBLED[1]);
    let cmds = walk(&fs::read(&bad).unwrap());
    let k = 5;
    let off = cmds[k - 1].offset;
    // A byte of the command's payload.
    testkit::xor_byte(&bad, off + 12, 0x01);
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("\terror: broken stream: chain.1 ("))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(": crc error: crc32c mismatch in command (stored ")
            && line.ends_with(&format!(" at byte {off} (command #{k})")),
        "{line}"
    );
    let (_, doc) = chains_json(&[&bad]);
    assert_eq!(doc["nights"][0]["error"]["kind"], "crc", "{doc:#}");
    assert_eq!(doc["nights"][0]["error"]["offset"], off);
}

#[test]
fn standard_input_holds_two_concatenated_nights() {
    let dir = pile(&SCRAMBLED, &[]);
    let (n0, n1) = (chain_stream(0), chain_stream(1));
    let both = [n0.clone(), n1.clone()].concat();
    let third = dir.path().join(SCRAMBLED[2]);
    let out = rdump_piped(&["--chains", "-", third.to_str().unwrap()], &both);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let lines = night_lines(&text, "chain 1:");
    let got: Vec<(&str, &str, &str)> = lines.iter().map(|f| (f[0], f[1], f[3])).collect();
    let second = format!("2@{}", n0.len());
    let u: Vec<String> = (0..3).map(chain_uuid).collect();
    assert_eq!(
        got,
        [
            ("-", "1@0", u[0].as_str()),
            ("-", second.as_str(), u[1].as_str()),
            (third.to_str().unwrap(), "1@0", u[2].as_str()),
        ]
    );
    assert_eq!(lines[1][8], n1.len().to_string());
}

#[test]
fn compressed_standard_input_is_decompressed() {
    let zst = fs::read(chain_zst(0)).unwrap();
    let out = rdump_piped(&["--chains", "--json", "-"], &zst);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let night = &doc["nights"][0];
    assert_eq!(night["file"], "-");
    assert_eq!(night["compressed"], true);
    assert_eq!(night["uuid"], chain_uuid(0));
    assert_eq!(night["length"], chain_stream(0).len());
}

/// The kernel's streams of testdata/kernel, in a scratch directory with a
/// file that is no stream.
fn kernel_pile(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        fs::copy(testdata(&format!("kernel/{name}")), dir.path().join(name)).unwrap();
    }
    fs::copy(testdata("kernel/README.md"), dir.path().join("README.md")).unwrap();
    dir
}

#[test]
fn kernel_streams_make_three_chains_and_notes_skip_the_readme() {
    let dir = kernel_pile(&[
        "full-v1.stream",
        "incr-v1.stream",
        "full-v2-compressed.stream",
        "incr-v2-compressed.stream",
        "full-v1-subvol.stream",
    ]);
    let (code, doc) = chains_json(&[dir.path()]);
    assert_eq!(code, Some(0), "{doc:#}");
    let uuids = |c: usize| -> Vec<Value> {
        doc["chains"][c]["nights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| doc["nights"][i.as_u64().unwrap() as usize]["uuid"].clone())
            .collect()
    };
    // Chains in the order of their first night's file name.
    assert_eq!(
        uuids(0),
        [
            dumped("kernel/full-v1-subvol.dump", "uuid"),
            // full-v1-subvol.stream sorts first.
        ]
    );
    assert_eq!(
        uuids(1),
        [
            dumped("kernel/full-v1.dump", "uuid"),
            dumped("kernel/incr-v1.dump", "uuid"),
        ]
    );
    assert_eq!(
        uuids(2),
        [
            dumped("kernel/full-v2-compressed.dump", "uuid"),
            dumped("kernel/incr-v2-compressed.dump", "uuid"),
        ]
    );
    let incr = doc["nights"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["file"].as_str().unwrap().ends_with("/incr-v1.stream"))
        .unwrap();
    assert_eq!(
        incr["parent_uuid"],
        dumped("kernel/incr-v1.dump", "parent_uuid")
    );
    assert_eq!(
        incr["parent_ctransid"].to_string(),
        dumped("kernel/incr-v1.dump", "parent_transid")
    );
    assert_eq!(incr["version"], 1);
    let skipped = &doc["skipped"][0];
    assert!(skipped["file"].as_str().unwrap().ends_with("/README.md"));
    assert_eq!(skipped["error"], false);
    assert!(skipped["why"].as_str().unwrap().starts_with("not a stream"));

    // Named itself, a file that is no stream is an error.
    let out = chains_text(&[&dir.path().join("README.md")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("error: ") && stdout(&out).contains("README.md: not a stream"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn concatenated_file_and_its_parts_are_duplicates() {
    // concat-v1.stream is `btrfs send s1 s2`: s1 again, and s2 as a full
    // stream; full-v1.stream is s1, incr-v1.stream s2 against s1.
    let dir = kernel_pile(&["concat-v1.stream", "full-v1.stream", "incr-v1.stream"]);
    let (code, doc) = chains_json(&[dir.path()]);
    assert_eq!(code, Some(0), "{doc:#}");
    let dups: Vec<&Value> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "duplicate")
        .collect();
    let ids: Vec<(String, String)> = dups
        .iter()
        .map(|p| {
            (
                p["uuid"].as_str().unwrap().to_owned(),
                p["ctransid"].to_string(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            (
                dumped("kernel/full-v1.dump", "uuid"),
                dumped("kernel/full-v1.dump", "transid")
            ),
            (
                dumped("kernel/incr-v1.dump", "uuid"),
                dumped("kernel/incr-v1.dump", "transid")
            ),
        ]
    );
    assert_eq!(dups[0]["error"], false);
    // The second night of the concatenation starts where the first ends:
    // full-v1.stream's length.
    let s2 = &doc["nights"][1];
    assert_eq!(s2["stream"], 2);
    let len = fs::metadata(testdata("kernel/full-v1.stream"))
        .unwrap()
        .len();
    assert_eq!(s2["offset"], len);
}

/// A stream holding only an incremental's SNAPSHOT and END.
fn snapshot_stream(name: &str, uuid: &str, ctransid: u64, parent: &str, pct: u64) -> Vec<u8> {
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::Snapshot {
        path: name.as_bytes(),
        uuid: Uuid::parse_str(uuid).unwrap(),
        ctransid,
        clone_uuid: Uuid::parse_str(parent).unwrap(),
        clone_ctransid: pct,
    })
    .unwrap();
    w.write_command(&Cmd::End {}).unwrap();
    w.into_inner()
}

#[test]
fn two_nights_on_one_parent_are_a_branch() {
    let dir = kernel_pile(&["full-v1.stream", "incr-v1.stream"]);
    let s1 = dumped("kernel/full-v1.dump", "uuid");
    let t1: u64 = dumped("kernel/full-v1.dump", "transid").parse().unwrap();
    let other = "0e0e0e0e-1111-4222-8333-444455556666";
    let path = dir.path().join("other-night.stream");
    fs::write(&path, snapshot_stream("s2b", other, t1 + 5, &s1, t1)).unwrap();
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let branch = text
        .lines()
        .find(|l| l.starts_with("\twarning: branch: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        branch.contains("s2 (") && branch.contains("s2b (") && branch.ends_with("full-v1.stream)"),
        "{branch}"
    );
    assert!(
        text.contains("chain 1: 3 nights, starts with a full stream"),
        "{text}"
    );
}

#[test]
fn parent_matched_on_uuid_alone_is_flagged_and_an_error() {
    let dir = kernel_pile(&["full-v1.stream"]);
    let s1 = dumped("kernel/full-v1.dump", "uuid");
    let t1: u64 = dumped("kernel/full-v1.dump", "transid").parse().unwrap();
    let path = dir.path().join("later.stream");
    let me = "0e0e0e0e-1111-4222-8333-444455556666";
    fs::write(&path, snapshot_stream("later", me, t1 + 9, &s1, t1 + 2)).unwrap();
    let (code, doc) = chains_json(&[dir.path()]);
    assert_eq!(code, Some(1), "{doc:#}");
    let later = doc["nights"]
        .as_array()
        .unwrap()
        .iter()
        .position(|n| n["uuid"] == me)
        .unwrap();
    assert_eq!(doc["nights"][later]["uuid_only"], true);
    assert_eq!(doc["problems"][0]["kind"], "uuid_only", "{doc:#}");
    assert_eq!(doc["chains"].as_array().unwrap().len(), 1);
}

#[test]
fn compressed_file_dumps_as_btrfs_receive_dumps_it_plain() {
    // full-v1.dump is `TZ=UTC btrfs receive --dump` of full-v1.stream.
    let dir = tempfile::tempdir().unwrap();
    let zst = dir.path().join("full-v1.stream.zst");
    let plain = fs::read(testdata("kernel/full-v1.stream")).unwrap();
    fs::write(&zst, zstd::encode_all(&plain[..], 3).unwrap()).unwrap();
    let want = fs::read(testdata("kernel/full-v1.dump")).unwrap();
    let out = rdump(&[zst.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout == want, "differs from full-v1.dump");
    // And from a pipe.
    let out = rdump_piped(&[], &fs::read(&zst).unwrap());
    assert!(out.stdout == want, "piped: differs from full-v1.dump");
    // A summary counts as many commands as COMMANDS.tsv says (352).
    let out = rdump_piped(&["--summary"], &fs::read(&zst).unwrap());
    assert!(
        stdout(&out).contains(&format!("\ntotal            {:>12}", 352)),
        "{}",
        stdout(&out)
    );
}

#[test]
fn two_zstd_frames_are_read_as_one_input() {
    // `zstd -c a >> x; zstd -c b >> x`: frames one after the other.
    let dir = tempfile::tempdir().unwrap();
    let zst = dir.path().join("two.zst");
    let mut f = fs::File::create(&zst).unwrap();
    for n in [0, 1] {
        f.write_all(&zstd::encode_all(&chain_stream(n)[..], 1).unwrap())
            .unwrap();
    }
    drop(f);
    let (code, doc) = chains_json(&[&zst]);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["nights"][1]["uuid"], chain_uuid(1));
    assert_eq!(doc["nights"][1]["offset"], chain_stream(0).len());
}

#[test]
fn open_stream_file_reads_compressed_and_plain_alike() {
    use std::io::Read;
    let mut got = Vec::new();
    let mut r = rdump::open_stream_file(&chain_zst(3)).unwrap();
    assert!(r.is_zstd());
    r.read_to_end(&mut got).unwrap();
    assert!(got == chain_stream(3));
    let mut plain = Vec::new();
    let mut r = rdump::open_stream_file(&testdata("kernel/incr-v1.stream")).unwrap();
    assert!(!r.is_zstd());
    r.read_to_end(&mut plain).unwrap();
    assert!(plain == fs::read(testdata("kernel/incr-v1.stream")).unwrap());
}

#[test]
fn usage_errors_exit_two() {
    let out = rdump(&["--chains"]);
    assert_eq!(out.status.code(), Some(2));
    let out = rdump(&["--chains", "-", "-"]);
    assert_eq!(out.status.code(), Some(2));
    let out = rdump(&["--chains", "--summary", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let f = testdata("kernel/full-v1.stream");
    let out = rdump(&[f.to_str().unwrap(), f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn scan_and_group_as_a_library() {
    use rdump::chains::{group, scan, Start};
    let nights: Vec<_> = [5u32, 4]
        .iter()
        .flat_map(|&n| {
            let input = rdump::Input::open(&chain_zst(n)).unwrap();
            scan(input, &chain_zst(n)).nights
        })
        .collect();
    assert_eq!(nights.len(), 2);
    assert!(nights.iter().all(|n| n.compressed && n.is_whole()));
    let g = group(&nights);
    assert_eq!(g.chains.len(), 1);
    assert_eq!(g.chains[0].nights, [1, 0]);
    let parent = nights[1].identity.as_ref().unwrap().parent.unwrap();
    assert_eq!(parent.uuid.to_string(), chain_uuid(3));
    assert_eq!(g.chains[0].start, Start::MissingParent(parent));
}

#[test]
fn two_nights_that_follow_each_other_are_a_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y) = (
        "0e0e0e0e-1111-4222-8333-444455556666",
        "0f0f0f0f-1111-4222-8333-444455556666",
    );
    fs::write(dir.path().join("x"), snapshot_stream("x", x, 10, y, 6)).unwrap();
    fs::write(dir.path().join("y"), snapshot_stream("y", y, 6, x, 10)).unwrap();
    let (code, doc) = chains_json(&[dir.path()]);
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(doc["chains"][0]["start"], "loop");
    // From the lower ctransid: y, then x.
    assert_eq!(doc["chains"][0]["nights"], serde_json::json!([1, 0]));
    assert_eq!(doc["problems"][0]["kind"], "loop");
}

#[test]
fn garbage_after_a_stream_and_an_empty_file_are_broken_nights_in_no_chain() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = chain_stream(0);
    let end = bytes.len();
    bytes.extend_from_slice(b"not a stream header at all");
    fs::write(dir.path().join("a.stream"), &bytes).unwrap();
    fs::write(dir.path().join("b.stream"), b"").unwrap();
    let out = chains_text(&[dir.path()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with("chain 1: 1 night, starts with a full stream\n"),
        "{text}"
    );
    let loose = night_lines(&text, "not in any chain:");
    assert_eq!(loose.len(), 2, "{text}");
    assert!(loose[0][0].ends_with("/a.stream"));
    assert_eq!(loose[0][1], format!("2@{end}"));
    assert_eq!(
        loose[0][11],
        format!(
            "malformed: bad stream magic (not a btrfs send stream) at byte {end} (command #{})",
            walk(&chain_stream(0)).len() + 1
        )
    );
    assert!(loose[1][0].ends_with("/b.stream"));
    assert_eq!(
        loose[1][11],
        "cut short: empty stream (no stream header) at byte 0 (command #1)"
    );
}
