//! The engine library never prints and needs nothing of the command line:
//! outside the binary (`src/bin/`), no source names `eprintln!`,
//! `println!`, clap, anyhow or indicatif, and the manifest makes the
//! crates only the binary needs optional, for the `cli` feature it
//! requires.

#[test]
fn the_library_never_prints_and_the_command_line_crates_are_optional() {
    let deps = ["rsend-cli", "rdump", "clap", "indicatif", "signal-hook"];
    testkit::engine::assert_quiet_library(env!("CARGO_MANIFEST_DIR").as_ref(), &deps);
}
