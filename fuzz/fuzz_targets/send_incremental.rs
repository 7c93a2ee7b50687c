//! Full and incremental sends of a kernel-made image with mutated
//! metadata (the reflink-snapshots fixture: snapshots of one subvolume,
//! a snapshot of a snapshot, nested subvolumes). Every pair of read-only
//! snapshots is sent; no input may panic or hang, and an error must say
//! where (subvolume, inode, tree or block). The snapshots sent before
//! each one are its clone sources, so clone search reads mutated extent
//! trees and shared leaves too. Every other input is sent as
//! `rsend --rescue` sends, and its loss report made.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

#[path = "image_mut.rs"]
mod image_mut;

use btrfs_disk::device::Device;
use btrfs_disk::{Filesystem, Options};
use btrfs_stream::Writer;
use libfuzzer_sys::fuzz_target;

static IMAGE: OnceLock<Mutex<image_mut::Image>> = OnceLock::new();

fn names_where(msg: &str) -> bool {
    [
        "subvolume",
        "inode",
        "tree",
        "logical",
        "superblock",
        "device",
        "devid",
        "chunk",
        "fuzz.img",
    ]
    .iter()
    .any(|w| msg.contains(w))
}

fn run(bytes: Arc<[u8]>, flags: u8, _rest: &[u8]) {
    let Ok(dev) = Device::from_bytes("fuzz.img", bytes) else {
        return;
    };
    // Every other input reads as `rsend --rescue` does: lost blocks
    // walked past, lost data as zeros, and the loss report made.
    let rescue = flags & 2 != 0;
    let opts = Options {
        notice: Arc::new(|_| {}),
        rescue: rescue.then(|| Arc::new(btrfs_disk::rescue::Losses::new())),
        ..Options::default()
    };
    let Ok(fs) = Filesystem::from_devices(vec![dev], opts) else {
        return;
    };
    let Ok(subvols) = fs.subvolumes() else { return };
    let ro: Vec<_> = subvols.iter().filter(|s| s.is_readonly()).take(4).collect();
    let send_opts = rsend::send::SendOptions::default();
    for (i, sv) in ro.iter().enumerate() {
        let parents = std::iter::once(None).chain(ro[..i].iter().map(|p| Some(*p)));
        for parent in parents.take(3) {
            let mut w = Writer::new(std::io::sink());
            // The snapshots sent before are clone sources too (as `-c`).
            let sources: Vec<_> = ro[..i].iter().map(|s| (*s).clone()).collect();
            let r = rsend::send::send_with(&fs, sv, parent, &sources, &mut w, &send_opts);
            if let Err(e) = r {
                let msg = format!("{:#}", anyhow_chain(&e));
                assert!(names_where(&msg), "error without a place: {msg}");
            }
        }
    }
    if rescue {
        let svs: Vec<_> = ro.iter().map(|s| (*s).clone()).collect();
        if let Err(e) = rsend::rescue::report(&fs, &svs) {
            let msg = format!("{:#}", anyhow_chain(&e));
            assert!(names_where(&msg), "error without a place: {msg}");
        }
    }
}

fn anyhow_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

fuzz_target!(|data: &[u8]| {
    image_mut::mutate(&IMAGE, "reflink-snapshots", data, run);
});
