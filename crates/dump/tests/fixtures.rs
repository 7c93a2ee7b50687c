//! rdump against the outputs real btrfs-progs (v6.14) printed for the same
//! streams when the fixtures were made (`testdata/make-*-streams.*`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn rdump(args: &[&str], tz: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdump"))
        .args(args)
        .env("TZ", tz)
        .output()
        .expect("run rdump")
}

/// Every fixture stream in `testdata/<dir>/`.
fn streams(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(testdata().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "stream"))
        .collect();
    v.sort();
    v
}

/// Expected-output suffixes: (suffix after ".dump", rdump flags, TZ).
const VARIANTS: &[(&str, &[&str], &str)] = &[
    ("", &[], "UTC"),
    (".kolkata", &[], "Asia/Kolkata"),
    (".ny", &[], "America/New_York"),
    (".all-streams", &["--all-streams"], "UTC"),
    (".all-streams.kolkata", &["--all-streams"], "Asia/Kolkata"),
];

fn show_diff(want: &[u8], got: &[u8]) -> String {
    let (w, g) = (String::from_utf8_lossy(want), String::from_utf8_lossy(got));
    for (i, (a, b)) in w.lines().zip(g.lines()).enumerate() {
        if a != b {
            return format!("line {}:\n  progs: {a:?}\n  rdump: {b:?}", i + 1);
        }
    }
    format!(
        "lengths differ: progs {} lines, rdump {} lines",
        w.lines().count(),
        g.lines().count()
    )
}

fn check_against_progs(dir: &str) -> usize {
    let mut compared = 0;
    for stream in streams(dir) {
        let s = stream.to_str().unwrap();
        if s.contains("/broken-") {
            continue;
        }
        for (suffix, flags, tz) in VARIANTS {
            let want_path =
                PathBuf::from(format!("{}.dump{suffix}", s.trim_end_matches(".stream")));
            let Ok(want) = fs::read(&want_path) else {
                continue;
            };
            let mut args: Vec<&str> = flags.to_vec();
            args.push(s);
            let out = rdump(&args, tz);
            assert!(
                out.status.success(),
                "{s}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stdout == want,
                "{} differs from btrfs-progs: {}",
                want_path.display(),
                show_diff(&want, &out.stdout)
            );
            compared += 1;
        }
        // The kernel fixtures keep each later stream of a concatenation in
        // `.dump.second`, as progs printed it alone.
        let base = s.trim_end_matches(".stream");
        if let (Ok(first), Ok(second)) = (
            fs::read(format!("{base}.dump")),
            fs::read(format!("{base}.dump.second")),
        ) {
            let out = rdump(&["--all-streams", s], "UTC");
            assert!(out.status.success());
            let want = [first, second].concat();
            assert!(
                out.stdout == want,
                "{s} --all-streams: {}",
                show_diff(&want, &out.stdout)
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn dump_matches_btrfs_progs_on_kernel_streams() {
    let n = check_against_progs("kernel");
    assert!(n >= 8, "only {n} kernel dumps compared");
}

#[test]
fn dump_matches_btrfs_progs_on_handmade_streams() {
    let n = check_against_progs("handmade");
    assert!(n >= 12, "only {n} handmade dumps compared");
}

#[test]
fn stdin_and_dash_read_the_same_stream() {
    let path = testdata().join("kernel/full-v1.stream");
    let want = rdump(&[path.to_str().unwrap()], "UTC").stdout;
    for args in [&[][..], &["-"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_rdump"))
            .args(args)
            .env("TZ", "UTC")
            .stdin(fs::File::open(&path).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, want);
    }
}

struct Broken {
    file: String,
    offset: u64,
    command: u64,
    valid_commands: u64,
    progs_rc: i32,
}

fn broken_cases() -> Vec<Broken> {
    let tsv = fs::read_to_string(testdata().join("handmade/broken.tsv")).unwrap();
    let mut lines = tsv.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (f, o, c, p) = (col("file"), col("offset"), col("command"), col("progs_rc"));
    let n = col("valid_commands");
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: Vec<&str> = l.split('\t').collect();
            Broken {
                file: v[f].to_owned(),
                offset: v[o].parse().unwrap(),
                command: v[c].parse().unwrap(),
                valid_commands: v[n].parse().unwrap(),
                progs_rc: v[p].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn broken_streams_fail_with_offset_and_keep_the_valid_prefix() {
    let cases = broken_cases();
    assert!(cases.len() >= 15);
    for case in &cases {
        let path = testdata().join("handmade").join(&case.file);
        let out = rdump(&["--all-streams", path.to_str().unwrap()], "UTC");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", case.file);
        let where_ = format!("at byte {} (command #{})", case.offset, case.command);
        assert!(
            stderr.starts_with("rdump: error: "),
            "{}: {stderr}",
            case.file
        );
        assert!(
            stderr.trim_end().ends_with(&where_),
            "{}: want {where_:?}, got {stderr}",
            case.file
        );
        assert!(!stderr.contains("panicked"), "{}: {stderr}", case.file);

        // What btrfs-progs printed before failing is exactly what rdump
        // printed; where progs went on (it ignores unknown commands and does
        // not check versions) rdump's output is a prefix of it.
        let progs = fs::read(path.with_extension("stream.progs.out")).unwrap();
        if case.progs_rc != 0 {
            assert!(
                out.stdout == progs,
                "{}: {}",
                case.file,
                show_diff(&progs, &out.stdout)
            );
        } else {
            assert!(progs.starts_with(&out.stdout), "{}", case.file);
        }
        for mode in ["--json", "--summary"] {
            let o = rdump(&["--all-streams", mode, path.to_str().unwrap()], "UTC");
            let e = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{} {mode}: {e}", case.file);
            assert!(e.trim_end().ends_with(&where_), "{} {mode}: {e}", case.file);
            if mode == "--summary" {
                // The table says on stdout that it stops at the fault.
                let table = String::from_utf8_lossy(&o.stdout);
                let first = table.lines().next().unwrap_or("");
                assert!(first.starts_with("incomplete "), "{}: {table}", case.file);
                assert!(first.contains(&where_), "{}: {first}", case.file);
                let counted = format!("the {} command", case.valid_commands);
                assert!(first.contains(&counted), "{}: {first}", case.file);
            }
        }
    }
}

#[test]
fn garbage_after_the_first_stream_is_ignored_like_btrfs_progs() {
    // `btrfs receive --dump` stops at the first END; so does rdump by default.
    let path = testdata().join("handmade/broken-concat-garbage-header.stream");
    let out = rdump(&[path.to_str().unwrap()], "UTC");
    assert!(out.status.success());
    let progs = fs::read(path.with_extension("stream.progs.out")).unwrap();
    assert_eq!(out.stdout, progs);
}

#[test]
fn usage_errors_exit_2() {
    let out = rdump(&["--no-such-flag"], "UTC");
    assert_eq!(out.status.code(), Some(2));
    let out = rdump(&["/nonexistent/stream"], "UTC");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/stream"));
}

/// Undoes the `--dump` escaping of one path column.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] != b'\\' {
            out.push(s[i]);
            i += 1;
            continue;
        }
        let c = s[i + 1];
        let byte = match c {
            b'a' => 7,
            b'b' => 8,
            b'e' => 0x1b,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            b'0'..=b'3' => {
                let v = (c - b'0') * 64 + (s[i + 2] - b'0') * 8 + (s[i + 3] - b'0');
                i += 2;
                v
            }
            other => other,
        };
        out.push(byte);
        i += 2;
    }
    out
}

/// Splits a progs dump line into (op, raw path).
fn op_and_path(line: &[u8]) -> (String, Vec<u8>) {
    let op = String::from_utf8_lossy(&line[..16]).trim_end().to_owned();
    let rest = &line[16..];
    let mut end = 0;
    while end < rest.len() && rest[end] != b' ' {
        end += if rest[end] == b'\\' { 2 } else { 1 };
    }
    (op, unescape(&rest[..end.min(rest.len())]))
}

fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        serde_json::Value::Object(m) => {
            let hex = m["hex"].as_str().unwrap();
            (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        }
        other => panic!("not a byte string: {other}"),
    }
}

#[test]
fn json_lists_every_command_with_lossless_paths() {
    for dir in ["kernel", "handmade"] {
        for stream in streams(dir) {
            let s = stream.to_str().unwrap();
            let Ok(progs) = fs::read(format!("{}.dump", s.trim_end_matches(".stream"))) else {
                continue;
            };
            let out = rdump(&["--json", s], "UTC");
            assert!(out.status.success(), "{s}");
            let objs: Vec<serde_json::Value> = out
                .stdout
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).expect("valid JSON line"))
                .collect();
            let cmds: Vec<&serde_json::Value> =
                objs.iter().filter(|o| o["command"] != "end").collect();
            let lines: Vec<&[u8]> = progs
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            assert_eq!(
                cmds.len(),
                lines.len(),
                "{s}: one JSON object per dumped command"
            );
            let mut subvol = Vec::new();
            for (o, line) in cmds.iter().zip(&lines) {
                let (op, path) = op_and_path(line);
                assert_eq!(o["command"], op.as_str(), "{s}");
                let key = if op == "rename" { "from" } else { "path" };
                let raw = json_bytes(&o[key]);
                let raw = raw.split(|&b| b == 0).next().unwrap().to_vec();
                if op == "subvol" || op == "snapshot" {
                    subvol = raw.clone();
                    assert_eq!(path, [b"./".as_slice(), &raw].concat(), "{s}");
                } else {
                    let mut want = [b"./".as_slice(), &subvol, b"/", &raw].concat();
                    if want.ends_with(b"/") && !raw.is_empty() {
                        want.pop();
                    }
                    assert_eq!(path, want, "{s}: {op}");
                }
            }
        }
    }
}

#[test]
fn summary_counts_match_the_progs_dump() {
    for stream in streams("kernel") {
        let s = stream.to_str().unwrap();
        let Ok(progs) = fs::read_to_string(format!("{}.dump", s.trim_end_matches(".stream")))
        else {
            continue;
        };
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        let mut written = 0u64;
        for line in progs.lines() {
            let op = line[..16].trim_end().to_owned();
            if op == "write" {
                let len = line.rsplit("len=").next().unwrap();
                written += len.parse::<u64>().unwrap();
            }
            *want.entry(op).or_default() += 1;
        }
        let out = rdump(&["--summary", s], "UTC");
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        for (op, n) in &want {
            let row = text
                .lines()
                .find(|l| l.split_whitespace().next() == Some(op))
                .unwrap_or_else(|| panic!("{s}: no row for {op}\n{text}"));
            let count: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert_eq!(count, *n, "{s}: {op}");
        }
        if !want.contains_key("encoded_write") {
            let row = text
                .lines()
                .find(|l| l.starts_with("bytes written"))
                .unwrap();
            let got: u64 = row.split_whitespace().last().unwrap().parse().unwrap();
            assert_eq!(got, written, "{s}");
        }
    }
}

#[test]
fn summary_of_hostile_lengths_saturates_instead_of_overflowing() {
    // Found by the fuzzer: two CLONEs / ENCODED_WRITEs of length u64::MAX.
    for name in [
        "summary-clone-len-overflow.bin",
        "summary-encoded-write-len-overflow.bin",
    ] {
        let path = testdata().join("../fuzz/regressions").join(name);
        let out = rdump(&["--summary", path.to_str().unwrap()], "UTC");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(&u64::MAX.to_string()), "{name}: {text}");
    }
}
