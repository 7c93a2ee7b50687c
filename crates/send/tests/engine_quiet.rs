//! The engine library never prints and needs nothing of the command line:
//! outside the binary (`src/bin/`), no source names `eprintln!`,
//! `println!`, clap, anyhow or indicatif, and the manifest makes those
//! crates optional, for the `cli` feature the binary requires.

use std::path::Path;

#[test]
fn the_library_never_prints_nor_names_the_command_line_crates() {
    testkit::engine::assert_never_prints(Path::new(env!("CARGO_MANIFEST_DIR")));
}

#[test]
fn the_command_line_crates_are_optional() {
    testkit::engine::assert_cli_optional(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &["rsend-cli", "anyhow", "clap", "indicatif"],
    );
}
