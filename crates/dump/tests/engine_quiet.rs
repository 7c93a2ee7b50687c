//! The dump library never prints to a terminal of its own and needs
//! nothing of the command line: outside the binary (`src/bin/`), no source
//! names `eprintln!`, `println!`, clap or anyhow, and the manifest makes
//! those crates optional, for the `cli` feature the binary requires.

#[test]
fn the_library_never_prints_and_the_command_line_crates_are_optional() {
    let deps = ["rsend-cli", "anyhow", "clap"];
    testkit::engine::assert_quiet_library(env!("CARGO_MANIFEST_DIR").as_ref(), &deps);
}
