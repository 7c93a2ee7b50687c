//! `rdump --summary` says when its table is not the whole input: more
//! streams left unread after the first END, or a stream that breaks off.
//! The inputs are kernel fixture streams, concatenated or cut; the counts
//! expected come from the btrfs-progs dumps made with them.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{rdump, rdump_piped, scratch};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn text(out: &[u8]) -> String {
    String::from_utf8(out.to_vec()).expect("utf-8 output")
}

/// The count column of the summary row for `op`.
fn count(summary: &str, op: &str) -> Option<u64> {
    let row = summary
        .lines()
        .find(|l| l.split_whitespace().next() == Some(op))?;
    row.split_whitespace().nth(1)?.parse().ok()
}

/// Command lines of a progs dump: one per command but END.
fn progs_lines(name: &str) -> Vec<String> {
    fs::read_to_string(testdata().join("kernel").join(name))
        .expect("progs dump")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// (offset, payload length) of every command, read from the framing: a
/// 17-byte stream header, then 10-byte command headers `len, cmd, crc`.
fn command_frames(stream: &[u8]) -> Vec<(usize, usize)> {
    let mut frames = Vec::new();
    let mut at = 17;
    while at + 10 <= stream.len() {
        let len = u32::from_le_bytes(stream[at..at + 4].try_into().unwrap()) as usize;
        frames.push((at, len));
        at += 10 + len;
    }
    assert_eq!(at, stream.len(), "fixture framing");
    frames
}

#[test]
fn two_concatenated_streams_summary_says_the_second_was_not_read() {
    let full = fs::read(testdata().join("kernel/full-v1.stream")).unwrap();
    let incr = fs::read(testdata().join("kernel/incr-v1.stream")).unwrap();
    let both = [full.as_slice(), &incr].concat();
    let path = scratch("full-then-incr-v1.stream", &both);
    let s = path.to_str().unwrap();

    let out = rdump(&["--summary", s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert_eq!(count(&table, "streams"), Some(1), "{table}");
    let note = table
        .lines()
        .find(|l| l.starts_with("more streams follow"))
        .unwrap_or_else(|| panic!("no note of the unread stream:\n{table}"));
    assert!(note.contains("not read (use -a/--all-streams)"), "{note}");
    // Only the first stream is counted: progs' dump of it, plus its END.
    let first = progs_lines("full-v1.dump").len() as u64;
    assert_eq!(count(&table, "total"), Some(first + 1), "{table}");
    assert!(!table.contains("incomplete"), "{table}");

    // The same from a pipe, where rdump has to read on to find out.
    let piped = rdump_piped(&["--summary"], &both);
    assert_eq!(piped.status.code(), Some(0));
    assert_eq!(text(&piped.stdout), table);

    // With -a both are read, and nothing is left to mention.
    let out = rdump(&["--summary", "--all-streams", s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let all = text(&out.stdout);
    assert_eq!(count(&all, "streams"), Some(2), "{all}");
    assert!(all.contains("\nstream 2             snapshot s2 "), "{all}");
    assert!(!all.contains("more streams follow"), "{all}");
    let second = progs_lines("incr-v1.dump").len() as u64;
    assert_eq!(count(&all, "total"), Some(first + second + 2), "{all}");

    // The text dump stays what `btrfs receive --dump` prints: the first
    // stream, not a line more.
    let out = rdump(&[s]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        out.stdout,
        fs::read(testdata().join("kernel/full-v1.dump")).unwrap()
    );
}

#[test]
fn single_stream_summary_has_no_note() {
    let path = testdata().join("kernel/full-v1.stream");
    let out = rdump(&["--summary", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let table = text(&out.stdout);
    assert!(table.starts_with("streams              1\n"), "{table}");
    assert!(!table.contains("follow"), "{table}");
    assert!(!table.contains("incomplete"), "{table}");
}

#[test]
fn garbage_after_the_first_end_is_noted_as_unread_data() {
    // A valid stream, then 17 pseudo-random bytes where a header belongs.
    let path = testdata().join("handmade/broken-concat-garbage-header.stream");
    let out = rdump(&["--summary", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l == "more data follows    not read (use -a/--all-streams)"),
        "{table}"
    );
    assert!(!table.contains("more streams follow"), "{table}");
}

#[test]
fn stream_cut_mid_write_summary_says_incomplete_and_where() {
    let full = fs::read(testdata().join("kernel/full-v1.stream")).unwrap();
    let frames = command_frames(&full);
    // The largest command (a 48 KiB WRITE of big.bin), cut half way into it.
    let (k, &(offset, len)) = frames
        .iter()
        .enumerate()
        .max_by_key(|(_, (_, len))| *len)
        .unwrap();
    let index = k + 1;
    let kept = len / 2;
    let cut = scratch("full-v1-cut.stream", &full[..offset + 10 + kept]);
    let s = cut.to_str().unwrap();
    let where_ = format!("at byte {offset} (command #{index})");
    let fault = format!("truncated command: payload of {len} bytes, only {kept} present {where_}");

    let out = rdump(&["--summary", s]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), format!("rdump: error: {fault}\n"));
    let table = text(&out.stdout);
    let first = table.lines().next().unwrap();
    assert!(first.starts_with("incomplete "), "{table}");
    assert!(first.contains(&fault), "{first}");
    let before = index - 1;
    assert!(
        first.ends_with(&format!("the counts cover the {before} commands before it")),
        "{first}"
    );

    // The table itself counts exactly the commands progs dumped before the
    // cut (its dump has one line per command; END comes last, after it).
    let progs = progs_lines("full-v1.dump");
    assert_eq!(count(&table, "total"), Some(before as u64), "{table}");
    for line in &progs[..before] {
        let op = line[..16].trim_end();
        let want = progs[..before]
            .iter()
            .filter(|l| l[..16].trim_end() == op)
            .count() as u64;
        assert_eq!(count(&table, op), Some(want), "{op}\n{table}");
    }
    assert!(table.contains("\nbytes written "), "{table}");

    // Text mode: the prefix progs printed, no line added; the error only
    // on stderr.
    let out = rdump(&[s]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), progs[..before].join("\n") + "\n");
    assert_eq!(text(&out.stderr), format!("rdump: error: {fault}\n"));

    // JSON mode: one whole object per command before the fault, nothing
    // half-written, the error only on stderr.
    let out = rdump(&["--json", s]);
    assert_eq!(out.status.code(), Some(1));
    let objs: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("whole JSON line"))
        .collect();
    assert_eq!(objs.len(), before);
    assert_eq!(objs[before - 1]["index"], before as u64);
    assert_eq!(text(&out.stderr), format!("rdump: error: {fault}\n"));
}

#[test]
fn stream_cut_in_a_command_header_summary_says_incomplete() {
    let full = fs::read(testdata().join("kernel/full-v1.stream")).unwrap();
    let frames = command_frames(&full);
    let (offset, _) = frames[frames.len() / 2];
    let index = frames.len() / 2 + 1;
    let cut = scratch("full-v1-cut-header.stream", &full[..offset + 4]);
    let out = rdump_piped(&["--summary"], &fs::read(cut).unwrap());
    assert_eq!(out.status.code(), Some(1));
    let fault =
        format!("truncated command header (4 of 10 bytes) at byte {offset} (command #{index})");
    assert_eq!(text(&out.stderr), format!("rdump: error: {fault}\n"));
    let table = text(&out.stdout);
    assert!(
        table.starts_with(&format!("incomplete           broken stream: {fault};")),
        "{table}"
    );
    assert_eq!(count(&table, "total"), Some(index as u64 - 1), "{table}");
}
