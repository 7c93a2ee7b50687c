//! The engine library never prints and needs nothing of the command line:
//! outside the binary (`src/bin/`), no source names `eprintln!`,
//! `println!`, clap, anyhow or indicatif, and the manifest makes those
//! crates optional, for the `cli` feature the binary requires.

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

#[test]
fn the_library_never_prints_nor_names_the_command_line_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    library_sources(&root.join("src"), &mut files);
    assert!(files.len() >= 10, "found only {files:?}");
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

#[test]
fn the_command_line_crates_are_optional() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).expect("read Cargo.toml");
    for dep in ["rsend-cli", "anyhow", "clap", "indicatif"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{dep} ")))
            .unwrap_or_else(|| panic!("no {dep} dependency"));
        assert!(line.contains("optional = true"), "{line}");
    }
    assert!(text.contains("required-features = [\"cli\"]"), "{text}");
}
