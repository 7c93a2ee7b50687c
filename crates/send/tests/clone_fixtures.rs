//! The clone scenarios of testdata/clone, checked without root from what
//! testdata/make-clone.sh committed (one kernel-made image, the kernel's
//! stream of every send, manifests of every snapshot):
//!
//! - the reader sees every snapshot in the image as its manifest says;
//! - each scenario's kernel streams, replayed in order in memory
//!   ([`Model`], CLONEs reading from the subvolume being received, its
//!   parent, or any subvolume received before), give every manifest;
//! - rsend's streams of the same sends (the binary, on the image file)
//!   replay the same way to the same trees, and name the same parents.
//!
//! Sharing and stream sizes need a kernel: crates/send/tests/clone_kernel.rs.

mod common;

use std::collections::BTreeMap;

use btrfs_disk::{Filesystem, SubvolSelector};
use common::clone::{self, Send};
use common::model::{Model, Times};
use common::scenarios::Manifest;
use common::{manifest_of, source_link_groups};

/// Replays the streams of one scenario in order (`streams[i]` is the
/// stream of `sends[i]`); the first difference or error, per send.
fn replay_in_order(sends: &[Send], streams: &[Vec<u8>], failures: &mut Vec<String>) {
    // Every subvolume received so far, by uuid.
    let mut received: BTreeMap<btrfs_stream::Uuid, Model> = BTreeMap::new();
    for (s, stream) in sends.iter().zip(streams) {
        let what = format!("{} send {} ({})", s.scenario, s.index, s.args_line());
        let parent = match clone::stream_parent(stream) {
            None => None,
            Some((uuid, _)) => match received.get(&uuid) {
                Some(p) => Some(p),
                None => {
                    failures.push(format!("{what}: its parent {uuid} was not received before"));
                    return;
                }
            },
        };
        let sources: Vec<&Model> = received.values().collect();
        match Model::replay_with(stream, parent, &sources, Times::LikeAFilesystem) {
            Ok(m) => {
                if let Some(d) =
                    Manifest::difference(&clone::manifest(s.snapshot()), &m.as_manifest())
                {
                    failures.push(format!("{what}: {d}"));
                }
                received.insert(m.uuid, m);
            }
            Err(e) => {
                failures.push(format!("{what}: {e}"));
                return;
            }
        }
    }
}

#[test]
fn the_reader_sees_every_snapshot_as_its_manifest_says() {
    let tmp = tempfile::tempdir().unwrap();
    let fs =
        Filesystem::open(&[clone::decompress_image(tmp.path())]).expect("open the clone image");
    let mut failures = Vec::new();
    let mut checked = std::collections::BTreeSet::new();
    for s in clone::sends() {
        for snap in s.others().into_iter().chain([s.snapshot()]) {
            if !checked.insert(snap.to_owned()) {
                continue;
            }
            let sv = fs
                .find_subvolume(&SubvolSelector::Path(snap.into()))
                .unwrap_or_else(|e| panic!("{snap}: {e}"));
            assert!(sv.is_readonly(), "{snap} is read-only");
            match manifest_of(&fs, &sv) {
                Ok((mut rows, skipped)) => {
                    rows.sort();
                    let got = Manifest {
                        rows,
                        skipped,
                        links: source_link_groups(&fs, &sv),
                    };
                    if let Some(d) = Manifest::difference(&clone::manifest(snap), &got) {
                        failures.push(format!("{snap}: {d}"));
                    }
                }
                Err(e) => failures.push(format!("{snap}: {e}")),
            }
        }
    }
    println!("{} snapshots read", checked.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn kernel_streams_replayed_in_order_give_every_snapshot() {
    let mut failures = Vec::new();
    let scenarios = clone::by_scenario(&clone::sends());
    for (_, sends) in &scenarios {
        let streams: Vec<Vec<u8>> = sends.iter().map(clone::kernel_stream).collect();
        replay_in_order(sends, &streams, &mut failures);
    }
    println!("{} scenarios replayed", scenarios.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn rsend_streams_replayed_in_order_give_every_snapshot_with_the_kernels_parents() {
    let tmp = tempfile::tempdir().unwrap();
    let image = clone::decompress_image(tmp.path());
    let out = tmp.path().join("rsend.stream");
    let mut failures = Vec::new();
    for (_, sends) in clone::by_scenario(&clone::sends()) {
        let mut streams = Vec::new();
        for s in &sends {
            match clone::rsend_stream(&image, s, &out) {
                Ok(st) => {
                    let kernel = clone::kernel_stream(s);
                    if clone::stream_parent(&st) != clone::stream_parent(&kernel) {
                        failures.push(format!(
                            "rsend {}: SNAPSHOT of {:?}, the kernel's of {:?} ({})",
                            s.args_line(),
                            clone::stream_parent(&st),
                            clone::stream_parent(&kernel),
                            s.parent.as_deref().unwrap_or("full send")
                        ));
                    }
                    streams.push(st);
                }
                Err(e) => {
                    failures.push(e);
                    break;
                }
            }
        }
        replay_in_order(&sends[..streams.len()], &streams, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
