//! Two send streams of one snapshot compared command by command (the
//! bookmark tests: the stream from a snapshot against the stream from its
//! bookmark): every command as one line (the kind and every field, paths
//! escaped, file data as its length and a digest, so equal lines mean equal
//! commands), the longest common subsequence of the two lists, and each
//! stretch where they differ named by the kind of difference.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use btrfs_stream::{Command, CommandKind, FieldValue, Reader, Uuid};
use sha2::Digest;

/// What a CLONE from the parent sent as data instead is called: the one
/// difference a stream from a bookmark may have.
pub const CLONE_AS_DATA: &str = "clone from the parent sent as data";

/// The same where A also truncated the file to the clone's start first
/// (rsend's way to clone a file's unaligned tail): the TRUNCATE goes with
/// the CLONE.
pub const TAIL_CLONE_AS_DATA: &str =
    "clone from the parent of a file's tail (TRUNCATE to its start, CLONE) sent as data";

/// The same where A wrote data next to the CLONE and B writes it all,
/// cut into WRITEs anew (the bytes A wrote are checked to be B's).
pub const CLONE_AS_DATA_RECUT: &str =
    "clone from the parent sent as data, with the writes around it cut anew";

/// Whether a difference of `kind` is one a stream from a bookmark may have.
pub fn allowed(kind: &str) -> bool {
    kind == CLONE_AS_DATA || kind == TAIL_CLONE_AS_DATA || kind == CLONE_AS_DATA_RECUT
}

/// One command of a stream, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cmd {
    pub kind: CommandKind,
    /// The kind and every field; equal lines are equal commands.
    pub line: String,
    /// The PATH field ("" when it has none).
    pub path: Vec<u8>,
    /// The file bytes [start, end) a WRITE, ENCODED_WRITE or CLONE fills.
    pub range: Option<(u64, u64)>,
    /// A CLONE's source subvolume.
    pub clone_uuid: Option<Uuid>,
    /// A WRITE's data.
    pub data: Option<Vec<u8>>,
}

fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        if c.is_ascii_graphic() && c != b'\\' {
            s.push(c as char);
        } else {
            let _ = write!(s, "\\x{c:02x}");
        }
    }
    s
}

fn field_text(name: &str, v: FieldValue<'_>) -> Option<String> {
    Some(match v {
        FieldValue::Bytes(b) if name == "data" => {
            let d = sha2::Sha256::digest(b);
            let h: String = d[..6].iter().map(|x| format!("{x:02x}")).collect();
            format!("data=<{} bytes {h}>", b.len())
        }
        FieldValue::Bytes(b) => format!("{name}={}", escape(b)),
        FieldValue::U64(n) => format!("{name}={n}"),
        FieldValue::U32(n) => format!("{name}={n}"),
        FieldValue::U8(n) => format!("{name}={n}"),
        FieldValue::Uuid(u) => format!("{name}={u}"),
        FieldValue::Time(t) => format!("{name}={}.{:09}", t.sec, t.nsec),
        FieldValue::Absent => return None,
    })
}

fn owned(c: &Command<'_>) -> Cmd {
    let mut line = c.kind().dump_name().to_owned();
    c.for_each_field(|name, _, v| {
        if let Some(t) = field_text(name, v) {
            line.push(' ');
            line.push_str(&t);
        }
    });
    let (path, range, clone_uuid) = match *c {
        Command::Write { path, offset, data } => {
            (path, Some((offset, offset + data.len() as u64)), None)
        }
        Command::EncodedWrite {
            path,
            offset,
            unencoded_file_len,
            ..
        } => (path, Some((offset, offset + unencoded_file_len)), None),
        Command::Clone {
            path,
            offset,
            len,
            clone_uuid,
            ..
        } => (path, Some((offset, offset + len)), Some(clone_uuid)),
        _ => {
            let mut p: &[u8] = b"";
            c.for_each_field(|name, _, v| match (name, v) {
                ("path" | "from", FieldValue::Bytes(b)) if p.is_empty() => p = b,
                _ => {}
            });
            (p, None, None)
        }
    };
    let data = match *c {
        Command::Write { data, .. } => Some(data.to_vec()),
        _ => None,
    };
    Cmd {
        kind: c.kind(),
        line,
        path: path.to_vec(),
        range,
        clone_uuid,
        data,
    }
}

/// The commands of the first stream in `s`, END included.
pub fn commands(s: &[u8]) -> Result<Vec<Cmd>, String> {
    let mut r = Reader::new(s);
    let mut out = Vec::new();
    loop {
        match r.next_command() {
            Ok(Some(c)) => {
                let end = c.kind() == CommandKind::End;
                out.push(owned(&c));
                if end {
                    return Ok(out);
                }
            }
            Ok(None) => return Err(format!("stream ends after {} commands, no END", out.len())),
            Err(e) => return Err(format!("command {}: {e}", out.len())),
        }
    }
}

/// A stretch where the streams differ: commands `a` of the first stream
/// stand where the second has `b`.
#[derive(Clone, Debug)]
pub struct Hunk {
    pub kind: &'static str,
    pub a: Vec<Cmd>,
    pub b: Vec<Cmd>,
}

/// Positions of the longest common subsequence of `a` and `b` (pairs of
/// indexes), or None when the tables would be too large.
fn lcs(a: &[Cmd], b: &[Cmd]) -> Option<Vec<(usize, usize)>> {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > 40_000_000 {
        return None;
    }
    let w = m + 1;
    let mut t = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i * w + j] = if a[i].line == b[j].line {
                t[(i + 1) * w + j + 1] + 1
            } else {
                t[(i + 1) * w + j].max(t[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i].line == b[j].line {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[(i + 1) * w + j] >= t[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    Some(out)
}

/// The stretches where `a` and `b` differ (`parent`: the uuid the streams'
/// SNAPSHOT names, whose CLONEs may become data).
pub fn differences(a: &[Cmd], b: &[Cmd], parent: Uuid) -> Vec<Hunk> {
    let pairs = lcs(a, b).unwrap_or_else(|| {
        // Too large to align: only the common head and tail.
        let head = a
            .iter()
            .zip(b)
            .take_while(|(x, y)| x.line == y.line)
            .count();
        let tail = a[head..]
            .iter()
            .rev()
            .zip(b[head..].iter().rev())
            .take_while(|(x, y)| x.line == y.line)
            .count();
        let mut p: Vec<(usize, usize)> = (0..head).map(|i| (i, i)).collect();
        p.extend((0..tail).rev().map(|k| (a.len() - 1 - k, b.len() - 1 - k)));
        p
    });
    let mut hunks = Vec::new();
    let (mut i, mut j) = (0, 0);
    for (pi, pj) in pairs.into_iter().chain([(a.len(), b.len())]) {
        if pi > i || pj > j {
            let (ha, hb) = (a[i..pi].to_vec(), b[j..pj].to_vec());
            hunks.push(Hunk {
                kind: classify(&ha, &hb, parent),
                a: ha,
                b: hb,
            });
        }
        (i, j) = (pi + 1, pj + 1);
    }
    hunks
}

fn is_data(c: &Cmd) -> bool {
    matches!(c.kind, CommandKind::Write | CommandKind::EncodedWrite)
}

/// Per path, the byte ranges the commands fill, merged.
fn ranges(cmds: &[Cmd]) -> BTreeMap<Vec<u8>, Vec<(u64, u64)>> {
    let mut by_path: BTreeMap<Vec<u8>, Vec<(u64, u64)>> = BTreeMap::new();
    for c in cmds {
        if let Some(r) = c.range {
            by_path.entry(c.path.clone()).or_default().push(r);
        }
    }
    for v in by_path.values_mut() {
        v.sort();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for &(s, e) in v.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *v = merged;
    }
    by_path
}

/// What kind of difference `a` -> `b` is.
pub fn classify(a: &[Cmd], b: &[Cmd], parent: Uuid) -> &'static str {
    let from_parent = |c: &Cmd| c.kind == CommandKind::Clone && c.clone_uuid == Some(parent);
    let all_data = !b.is_empty() && b.iter().all(is_data);
    if a.is_empty() {
        return if all_data {
            "data only the second stream sends"
        } else {
            "commands only the second stream has"
        };
    }
    if b.is_empty() {
        return "commands only the first stream has";
    }
    // A TRUNCATE to where a CLONE from the parent starts on the same path.
    let tail_truncate = |c: &Cmd| {
        c.kind == CommandKind::Truncate
            && a.iter().any(|x| {
                from_parent(x)
                    && x.path == c.path
                    && x.range
                        .is_some_and(|r| c.line.ends_with(&format!(" size={}", r.0)))
            })
    };
    let truncates = a.iter().filter(|c| tail_truncate(c)).count();
    let clones = a.iter().filter(|c| from_parent(c)).count();
    let writes = a.iter().filter(|c| c.kind == CommandKind::Write).count();
    if clones == 0 || clones + truncates + writes != a.len() {
        return "commands changed";
    }
    if all_data && ranges(a) == ranges(b) && writes_agree(a, b) {
        if writes > 0 {
            CLONE_AS_DATA_RECUT
        } else if truncates > 0 {
            TAIL_CLONE_AS_DATA
        } else {
            CLONE_AS_DATA
        }
    } else if all_data {
        "clone from the parent sent as data of other ranges or bytes"
    } else {
        "clone from the parent replaced by other commands"
    }
}

/// Whether every byte a WRITE of `a` writes is written the same by the
/// WRITEs of `b` (on the same path).
fn writes_agree(a: &[Cmd], b: &[Cmd]) -> bool {
    a.iter().filter(|c| c.kind == CommandKind::Write).all(|w| {
        let (Some((start, end)), Some(data)) = (w.range, &w.data) else {
            return false;
        };
        let mut covered = 0u64;
        for x in b.iter().filter(|x| x.path == w.path) {
            let (Some((xs, xe)), Some(xd)) = (x.range, &x.data) else {
                continue;
            };
            let (s, e) = (start.max(xs), end.min(xe));
            if s >= e {
                continue;
            }
            let mine = &data[(s - start) as usize..(e - start) as usize];
            if mine != &xd[(s - xs) as usize..(e - xs) as usize] {
                return false;
            }
            covered += e - s;
        }
        covered == end - start
    })
}

/// Counts of `hunks` by kind, as `kind: N` lines.
pub fn summary(hunks: &[Hunk]) -> String {
    let mut by: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for h in hunks {
        let e = by.entry(h.kind).or_default();
        e.0 += 1;
        e.1 += h.a.len();
        e.2 += h.b.len();
    }
    by.iter()
        .map(|(k, (n, na, nb))| format!("{k}: {n} ({na} commands -> {nb})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `hunks` as text: of each kind the first `per_kind` stretches, at most
/// 12 commands of a side each.
pub fn render(hunks: &[Hunk], per_kind: usize) -> String {
    let mut out = String::new();
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    for h in hunks {
        let n = shown.entry(h.kind).or_default();
        *n += 1;
        if *n > per_kind {
            continue;
        }
        let _ = writeln!(out, "  [{}]", h.kind);
        for (sign, cmds) in [("-", &h.a), ("+", &h.b)] {
            for c in cmds.iter().take(12) {
                let _ = writeln!(out, "    {sign} {}", c.line);
            }
            if cmds.len() > 12 {
                let _ = writeln!(out, "    {sign} ... {} more", cmds.len() - 12);
            }
        }
    }
    for (kind, n) in shown {
        if n > per_kind {
            let _ = writeln!(out, "  [{kind}] ... {} more like these", n - per_kind);
        }
    }
    out
}

/// The uuid a stream's SNAPSHOT names its parent by.
pub fn parent_uuid(cmds: &[Cmd]) -> Option<Uuid> {
    let first = cmds.first()?;
    if first.kind != CommandKind::Snapshot {
        return None;
    }
    let text = first
        .line
        .split(' ')
        .find_map(|f| f.strip_prefix("clone_uuid="))?;
    text.parse().ok()
}
