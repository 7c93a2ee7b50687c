//! testdata/clone: the clone scenarios of testdata/clone/scenarios.sh and
//! what testdata/make-clone.sh made of them with the real kernel (one image,
//! the kernel's stream of every send, a manifest of every snapshot,
//! kernel.tsv). See testdata/clone/README.md.

use std::path::{Path, PathBuf};

use super::scenarios::Manifest;

/// testdata/clone of the workspace.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/clone")
}

/// One send of a scenario, as kernel.tsv lists it.
#[derive(Clone, Debug)]
pub struct Send {
    pub scenario: String,
    /// From 1, in replay order.
    pub index: usize,
    /// `[-p P] [-c C]... SNAP`, as btrfs send took them.
    pub args: Vec<String>,
    /// The parent the kernel sent against (picked by btrfs-progs for -c
    /// without -p); None for a full send.
    pub parent: Option<String>,
    /// The kernel stream's size.
    pub kernel_bytes: u64,
}

impl Send {
    /// The snapshot sent.
    pub fn snapshot(&self) -> &str {
        self.args.last().expect("a send names its snapshot")
    }

    /// The `-c` sources.
    pub fn clone_sources(&self) -> Vec<&str> {
        self.args
            .windows(2)
            .filter(|w| w[0] == "-c")
            .map(|w| w[1].as_str())
            .collect()
    }

    /// The snapshots besides the one sent that the receiver has and the
    /// stream may clone from: the parent and the -c sources.
    pub fn others(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.parent.iter().map(String::as_str).collect();
        for c in self.clone_sources() {
            if !v.contains(&c) {
                v.push(c);
            }
        }
        v
    }

    /// `NAME.K`, the stream's file name stem.
    pub fn name(&self) -> String {
        format!("{}.{}", self.scenario, self.index)
    }

    /// The arguments as one string.
    pub fn args_line(&self) -> String {
        self.args.join(" ")
    }
}

/// The name a received snapshot gets: the last component of its path.
pub fn received_name(snap: &str) -> &str {
    snap.rsplit('/').next().unwrap_or(snap)
}

/// Every send of kernel.tsv, in order; only those of the scenarios named in
/// `$RSEND_CLONE_SCENARIOS` (space separated) when it is set.
pub fn sends() -> Vec<Send> {
    let p = dir().join("kernel.tsv");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let all: Vec<Send> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert!(c.len() >= 5, "kernel.tsv: short line {l:?}");
            Send {
                scenario: c[0].to_owned(),
                index: c[1].parse().expect("send index"),
                args: c[2].split_whitespace().map(str::to_owned).collect(),
                parent: (c[3] != "-").then(|| c[3].to_owned()),
                kernel_bytes: c[4].parse().expect("stream bytes"),
            }
        })
        .collect();
    assert!(all.len() >= 20, "{} sends in kernel.tsv", all.len());
    let Some(want) = std::env::var("RSEND_CLONE_SCENARIOS")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return all;
    };
    let want: Vec<&str> = want.split_whitespace().collect();
    for w in &want {
        assert!(
            all.iter().any(|s| s.scenario == *w),
            "RSEND_CLONE_SCENARIOS: no scenario {w}"
        );
    }
    all.into_iter()
        .filter(|s| want.contains(&s.scenario.as_str()))
        .collect()
}

/// The scenarios of `sends`, in order, each with its sends.
pub fn by_scenario(sends: &[Send]) -> Vec<(String, Vec<Send>)> {
    let mut out: Vec<(String, Vec<Send>)> = Vec::new();
    for s in sends {
        match out.last_mut() {
            Some((n, v)) if *n == s.scenario => v.push(s.clone()),
            _ => out.push((s.scenario.clone(), vec![s.clone()])),
        }
    }
    out
}

/// The committed manifest of snapshot `snap`.
pub fn manifest(snap: &str) -> Manifest {
    let p = dir()
        .join("manifests")
        .join(format!("{}.manifest", received_name(snap)));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (testdata/clone is older than scenarios.sh? \
             sudo testdata/make-clone.sh regenerates it)",
            p.display()
        )
    });
    Manifest::parse(&text)
}

/// The kernel's stream of `send`, decoded.
pub fn kernel_stream(send: &Send) -> Vec<u8> {
    super::read_zst(
        &dir()
            .join("streams")
            .join(format!("{}.stream.zst", send.name())),
    )
}

/// Decompresses the clone image into `into` (sparse); returns its path.
pub fn decompress_image(into: &Path) -> PathBuf {
    let dst = into.join("clone.img");
    super::decompress_sparse(&dir().join("image/dev1.img.zst"), &dst);
    dst
}

/// `rsend -q -d IMAGE ARGS... -f OUT`: rsend's stream of `send`, written
/// to `out` (removed afterwards).
pub fn rsend_stream(image: &Path, send: &Send, out: &Path) -> Result<Vec<u8>, String> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rsend"));
    cmd.args(["-q", "-d"]).arg(image).arg("-f").arg(out);
    cmd.args(&send.args);
    super::receivers::output_file(&mut cmd, out)
}

/// The uuid and ctransid the first command of `stream` (SNAPSHOT) names
/// its parent by, or None for a full stream.
pub fn stream_parent(stream: &[u8]) -> Option<(btrfs_stream::Uuid, u64)> {
    let mut r = btrfs_stream::Reader::new(stream);
    match r.next_command().ok().flatten()? {
        btrfs_stream::Command::Snapshot {
            clone_uuid,
            clone_ctransid,
            ..
        } => Some((clone_uuid, clone_ctransid)),
        _ => None,
    }
}
