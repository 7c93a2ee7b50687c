//! Like `dump_text`, but first rewrites every command's CRC-32C so that
//! mutated inputs get past the checksum and reach payload decoding and the
//! formatters. Without this, almost every mutation of a valid stream stops
//! at `CrcMismatch`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut data = data.to_vec();
    rsend_fuzz_common::fix_crcs(&mut data);
    // Reader alone (also via next_command).
    let mut reader = btrfs_stream::Reader::new(&data[..]);
    while let Ok(Some(c)) = reader.next_command() {
        std::hint::black_box(&c);
    }
    rsend_fuzz_common::run_all_sinks(&data);
});

#[path = "common.rs"]
mod rsend_fuzz_common;
