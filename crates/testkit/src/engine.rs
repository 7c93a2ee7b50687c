//! What an engine library (a crate's `src/` but the binary's `src/bin/`)
//! may not do: print, or name the command-line crates, which its manifest
//! makes optional for the `cli` feature the binary requires. Each crate
//! with such a binary checks itself in a test of its own.

use std::path::{Path, PathBuf};

/// The `.rs` files below `dir`, the binary's directory left out.
fn library_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            library_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Panics, naming each place, unless the engine library of the crate at
/// `manifest_dir` never prints nor names clap, anyhow or indicatif outside
/// a comment, and each of `cli_deps` is an optional dependency, for the
/// `cli` feature its binary requires.
pub fn assert_quiet_library(manifest_dir: &Path, cli_deps: &[&str]) {
    assert_never_prints(manifest_dir);
    assert_cli_optional(manifest_dir, cli_deps);
}

/// Panics, naming each place, when a library source of the crate at
/// `manifest_dir` prints or names clap, anyhow or indicatif outside a
/// comment. For a library without a binary (the on-disk reader); one with
/// a binary calls [`assert_quiet_library`].
pub fn assert_never_prints(manifest_dir: &Path) {
    let mut files = Vec::new();
    library_sources(&manifest_dir.join("src"), &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("lib.rs")),
        "no lib.rs among {files:?}"
    );
    let mut found = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("read source");
        for (n, line) in src.lines().enumerate() {
            // Comments may say what they like.
            if line.trim_start().starts_with("//") {
                continue;
            }
            for word in [
                "eprintln!",
                "println!",
                "print!(",
                "clap",
                "anyhow",
                "indicatif",
            ] {
                if line.contains(word) {
                    found.push(format!("{}:{}: {word}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Panics unless each of `deps` is an optional dependency of the crate at
/// `manifest_dir`, whose binary requires the `cli` feature.
fn assert_cli_optional(manifest_dir: &Path, deps: &[&str]) {
    let manifest = manifest_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).expect("read Cargo.toml");
    for dep in deps {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{dep} ")))
            .unwrap_or_else(|| panic!("no {dep} dependency"));
        assert!(line.contains("optional = true"), "{line}");
    }
    assert!(text.contains("required-features = [\"cli\"]"), "{text}");
}
