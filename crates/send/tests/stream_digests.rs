//! rsend's output does not change by accident: the full stream of every
//! read-only snapshot of every fixture, as the `rsend` binary writes it,
//! has the sha256 that testdata/make-rsend-digests.sh recorded in
//! testdata/rsend-full.sha256 before the on-disk reader moved into its own
//! crate. Where those streams are right is checked elsewhere, against the
//! kernel's own `btrfs send` (send_kernel.rs) and the snapshot manifests
//! (send_fixtures.rs); this test only says that they stayed the same bytes.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{fixtures, ro_snapshots};
use sha2::Digest;

fn recorded() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rsend-full.sha256");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once("  "))
        .map(|(sum, what)| (what.to_string(), sum.to_string()))
        .collect()
}

#[test]
fn every_fixture_stream_keeps_its_recorded_bytes() {
    let want = recorded();
    let all = fixtures();
    assert!(!all.is_empty(), "no fixtures under testdata/images");
    let tmp = tempfile::tempdir().unwrap();
    let mut got = BTreeMap::new();
    for f in &all {
        let devs = f.decompress(tmp.path());
        for id in ro_snapshots(f) {
            let out = tmp.path().join("stream");
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsend"));
            for d in &devs {
                cmd.arg("-d").arg(d);
            }
            let r = cmd
                .args(["-q", "--subvolid", &id.to_string(), "-f"])
                .arg(&out)
                .output()
                .expect("run rsend");
            let what = format!("{}/subvol-{id}", f.name);
            assert!(
                r.status.success(),
                "{what}: rsend failed: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            let sum = sha2::Sha256::digest(std::fs::read(&out).unwrap());
            let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
            got.insert(what, hex);
        }
        for d in devs {
            let _ = std::fs::remove_file(d);
        }
    }
    let changed: Vec<String> = want
        .keys()
        .chain(got.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| format!("{k}: recorded {:?}, now {:?}", want.get(k), got.get(k)))
        .collect();
    println!("{} fixture streams compared", got.len());
    assert!(
        changed.is_empty(),
        "streams changed:\n{}",
        changed.join("\n")
    );
}
