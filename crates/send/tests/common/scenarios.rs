//! testdata/incremental: the incremental-send scenarios of
//! testdata/incremental/scenarios.sh, and what testdata/make-incremental.sh
//! made of them with the real kernel (one image, the kernel's streams, a
//! manifest of every snapshot). See testdata/incremental/README.md.

use std::path::{Path, PathBuf};

use super::hex;

/// testdata/incremental of the workspace.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/incremental")
}

/// testdata/incremental/scenarios.sh.
pub fn script() -> PathBuf {
    dir().join("scenarios.sh")
}

/// The scenarios to check, in the order scenarios.sh registers them (its
/// `scenario NAME "..."` lines): all of them, or those named in
/// `$RSEND_SCENARIOS` (space separated; `chain` there selects the chain).
pub fn names() -> Vec<String> {
    let text = std::fs::read_to_string(script()).expect("testdata/incremental/scenarios.sh");
    let all: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("scenario "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(all.len() >= 45, "{} scenarios in scenarios.sh", all.len());
    match selected() {
        None => all,
        Some(want) => {
            for w in &want {
                assert!(
                    w == "chain" || all.contains(w),
                    "RSEND_SCENARIOS: no scenario {w}"
                );
            }
            all.into_iter().filter(|n| want.contains(n)).collect()
        }
    }
}

fn selected() -> Option<Vec<String>> {
    let v = std::env::var("RSEND_SCENARIOS").ok()?;
    let names: Vec<String> = v.split_whitespace().map(str::to_owned).collect();
    (!names.is_empty()).then_some(names)
}

/// The chain's snapshots, chain.0 ... chain.5 (none when `$RSEND_SCENARIOS`
/// names scenarios but not `chain`).
pub fn chain() -> Vec<String> {
    if selected().is_some_and(|s| !s.iter().any(|n| n == "chain")) {
        return Vec::new();
    }
    (0..=5).map(|k| format!("chain.{k}")).collect()
}

/// A testdata/manifest.py listing, as compared: data lines without the
/// path_repr column, the skipped-subvol paths, and the hard-link groups of
/// `--links` (paths as bytes, each group sorted, groups sorted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    pub rows: Vec<String>,
    pub skipped: Vec<String>,
    pub links: Vec<Vec<Vec<u8>>>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

impl Manifest {
    /// Parses manifest.py's output.
    pub fn parse(text: &str) -> Manifest {
        let mut m = Manifest::default();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# skipped-subvol ") {
                m.skipped
                    .push(rest.split(' ').next().unwrap_or("").to_owned());
            } else if let Some(rest) = l.strip_prefix("# hardlinks ") {
                let mut g: Vec<Vec<u8>> = rest.split(' ').map(unhex).collect();
                g.sort();
                m.links.push(g);
            } else if !l.starts_with('#') && !l.is_empty() {
                let cols: Vec<&str> = l.split('\t').collect();
                m.rows.push(cols[..cols.len().min(13)].join("\t"));
            }
        }
        m.rows.sort();
        m.skipped.sort();
        m.links.sort();
        m
    }

    /// The committed manifest of snapshot `snap` (`NAME.p`, `NAME.c`, `chain.N`).
    pub fn committed(snap: &str) -> Manifest {
        let p = dir().join("manifests").join(format!("{snap}.manifest"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (testdata/incremental is older than scenarios.sh? \
                 sudo testdata/make-incremental.sh regenerates it)",
                p.display()
            )
        });
        Manifest::parse(&text)
    }

    /// The first difference from `want`, or None.
    pub fn difference(want: &Manifest, got: &Manifest) -> Option<String> {
        for (i, (w, g)) in want.rows.iter().zip(&got.rows).enumerate() {
            if w != g {
                return Some(format!("line {i}:\n    want {w}\n    got  {g}"));
            }
        }
        if want.rows.len() != got.rows.len() {
            let extra = if want.rows.len() > got.rows.len() {
                format!("missing {}", want.rows[got.rows.len()])
            } else {
                format!("unexpected {}", got.rows[want.rows.len()])
            };
            return Some(format!(
                "{} lines wanted, {} got: {extra}",
                want.rows.len(),
                got.rows.len()
            ));
        }
        if want.links != got.links {
            let show = |g: &Vec<Vec<Vec<u8>>>| {
                g.iter()
                    .map(|p| p.iter().map(|x| hex(x)).collect::<Vec<_>>().join(" "))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            return Some(format!(
                "hard-link groups differ:\n    want {}\n    got  {}",
                show(&want.links),
                show(&got.links)
            ));
        }
        None
    }
}

/// The committed kernel stream `streams/<name>.stream.zst`, decoded
/// (`NAME.full`, `NAME.incr`, `chain.0.full`, `chain.N.incr`).
pub fn kernel_stream(name: &str) -> Vec<u8> {
    super::read_zst(&dir().join("streams").join(format!("{name}.stream.zst")))
}

/// Decompresses the scenario image into `into` (sparse); returns its path.
pub fn decompress_image(into: &Path) -> PathBuf {
    let dst = into.join("incremental.img");
    super::decompress_sparse(&dir().join("image/dev1.img.zst"), &dst);
    dst
}

/// How many commands of `kind` the first stream of `s` has.
pub fn count(s: &[u8], kind: btrfs_stream::CommandKind) -> usize {
    let mut r = btrfs_stream::Reader::new(s);
    let mut n = 0;
    while let Ok(Some(c)) = r.next_command() {
        n += usize::from(c.kind() == kind);
        if c.kind() == btrfs_stream::CommandKind::End {
            break;
        }
    }
    n
}

/// kernel-findings.tsv: snapshot -> what `btrfs receive` of the kernel's
/// own streams got wrong in it.
pub fn kernel_findings() -> std::collections::BTreeMap<String, String> {
    let p = dir().join("kernel-findings.tsv");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .map(|(s, what)| (s.to_owned(), what.to_owned()))
        .collect()
}

/// Whether `got` differs from `want` only in the root's mtime, and `got`'s
/// root mtime (manifest text, `SEC.NSEC`) passes `is_receive_time`.
pub fn only_root_mtime_differs(
    want: &Manifest,
    got: &Manifest,
    is_receive_time: impl Fn(&str) -> bool,
) -> bool {
    if want.rows.len() != got.rows.len() || want.links != got.links {
        return false;
    }
    let mut differs = false;
    for (w, g) in want.rows.iter().zip(&got.rows) {
        if w == g {
            continue;
        }
        let (wc, gc): (Vec<&str>, Vec<&str>) = (w.split('\t').collect(), g.split('\t').collect());
        let same_but_mtime = wc.len() == gc.len()
            && wc.len() > 7
            && wc
                .iter()
                .zip(&gc)
                .enumerate()
                .all(|(i, (a, b))| i == 7 || a == b);
        if wc[0] != "2e" || !same_but_mtime || !is_receive_time(gc[7]) {
            return false;
        }
        differs = true;
    }
    differs
}

/// The last command before END of the first stream of `s`, with its frame length.
fn last_before_end(s: &[u8]) -> Option<(btrfs_stream::CommandKind, Vec<u8>, usize)> {
    let mut r = btrfs_stream::Reader::new(s);
    let mut last = None;
    let mut pos = r.position();
    let info = |c: btrfs_stream::Command<'_>| {
        let path = match &c {
            btrfs_stream::Command::Utimes { path, .. } => path.to_vec(),
            _ => Vec::new(),
        };
        (c.kind(), path)
    };
    while let Some((kind, path)) = r.next_command().ok().flatten().map(info) {
        let end = r.position();
        if kind == btrfs_stream::CommandKind::End {
            break;
        }
        last = Some((kind, path, (end - pos) as usize));
        pos = end;
    }
    last
}

/// Whether `ours` is the kernel's stream `kernel` byte for byte, or that
/// stream with one more UTIMES of the subvolume root just before END (the
/// documented difference: the kernel leaves it out).
pub fn kernel_stream_but_root_utimes(ours: &[u8], kernel: &[u8]) -> bool {
    if ours == kernel {
        return true;
    }
    // END is the last frame: a header of 10 bytes.
    match last_before_end(ours) {
        Some((btrfs_stream::CommandKind::Utimes, p, n)) if p.is_empty() && ours.len() >= n + 10 => {
            let end = ours.len() - 10;
            [&ours[..end - n], &ours[end..]].concat() == kernel
        }
        _ => false,
    }
}

/// A sender's incremental streams against the kernel's, scenario by
/// scenario: bytes and TRUNCATEs must not be more than the kernel's. One
/// known exception is reported, not failed: one trailing UTIMES of the
/// subvolume root that the kernel leaves out (so `btrfs receive` keeps the
/// root's times; the rest of the stream must still be no larger).
#[derive(Default)]
pub struct SizeReport {
    rows: Vec<String>,
    identical: usize,
    root_times: Vec<String>,
    larger: Vec<String>,
}

impl SizeReport {
    /// Adds scenario `name`.
    pub fn add(&mut self, name: &str, ours: &[u8], kernel: &[u8]) {
        use btrfs_stream::CommandKind as K;
        let (t, kt) = (count(ours, K::Truncate), count(kernel, K::Truncate));
        let same = ours == kernel;
        self.identical += usize::from(same);
        self.rows.push(format!(
            "{name:<50} {:>10} {:>10} {t:>6} {kt:>6} {:>10}",
            ours.len(),
            kernel.len(),
            if same { "yes" } else { "no" }
        ));
        let root_utimes = |s: &[u8]| match last_before_end(s) {
            Some((K::Utimes, p, n)) if p.is_empty() => Some(n),
            _ => None,
        };
        let mut bytes = ours.len();
        let mut why = None;
        if let (Some(n), None) = (root_utimes(ours), root_utimes(kernel)) {
            bytes -= n;
            why = Some(&mut self.root_times);
        }
        if bytes <= kernel.len() && t <= kt {
            if let Some(list) = why {
                list.push(name.to_owned());
            }
            return;
        }
        let line = format!(
            "{name}: {} bytes and {t} TRUNCATEs, the kernel's stream {} and {kt}",
            ours.len(),
            kernel.len()
        );
        self.larger.push(line);
    }

    /// Prints the table and the exceptions; the scenarios that are larger
    /// than the kernel's for no known reason.
    pub fn finish(self, sender: &str) -> Vec<String> {
        println!(
            "sender: {sender}\n{:<50} {:>10} {:>10} {:>6} {:>6} {:>10}\n{}",
            "incremental",
            "sender",
            "kernel",
            "trunc",
            "k-trnc",
            "identical",
            self.rows.join("\n")
        );
        println!(
            "{} of {} incremental streams byte-identical to the kernel's",
            self.identical,
            self.rows.len()
        );
        println!(
            "{} larger only by a root UTIMES the kernel leaves out: {}",
            self.root_times.len(),
            self.root_times.join(", ")
        );
        self.larger
    }
}
