//! The send crate reads well in pieces: its library's modules import each
//! other without a circle, and no function (the binary's included) is over
//! 150 lines but `send::cmd`'s `as_command`, one `match` over the stream's
//! command table (see `testkit::layers`).

use std::path::Path;

use testkit::layers;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn modules_import_each_other_without_a_circle() {
    layers::assert_no_circle(crate_dir(), MODULES);
}

#[test]
fn no_function_is_over_150_lines() {
    layers::assert_short_functions(crate_dir(), 150, COMMAND_TABLE);
}

/// At least this many modules (a scan that finds fewer is broken).
const MODULES: usize = 20;
/// The function that is one `match` over the stream's command table.
const COMMAND_TABLE: &[&str] = &["cmd.rs:as_command"];
