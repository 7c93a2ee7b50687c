//! Runs `rdump::dump` over arbitrary bytes with every sink.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rsend_fuzz_common::run_all_sinks(data);
});

#[path = "common.rs"]
mod rsend_fuzz_common;
