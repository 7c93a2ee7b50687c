//! testdata/demo.sh, the README's first command, on a machine that lacks
//! what it needs: it says what is missing and how to get it (cargo, a new
//! enough Rust, a C compiler) instead of failing on the way, and shows its
//! build rather than running it quietly.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Tools the demo runs before its build, linked into a directory that is
/// then the whole PATH.
const TOOLS: [&str; 9] = [
    "zstd", "getfattr", "setfattr", "python3", "dirname", "sed", "awk", "sort", "head",
];

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A PATH of the demo's tools (None, with a SKIP line, where one is not
/// installed), plus `extra` scripts (name, body).
fn path_with(test: &str, extra: &[(&str, &str)]) -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().unwrap();
    for tool in TOOLS {
        let Some(p) = which(tool) else {
            println!("SKIP {test}: {tool} is not installed (the demo needs it first)");
            return None;
        };
        std::os::unix::fs::symlink(p, dir.path().join(tool)).unwrap();
    }
    for (name, body) in extra {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Some(dir)
}

fn demo(path: &Path) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/demo.sh");
    Command::new("/bin/bash")
        .arg(script)
        .env_clear()
        .env("PATH", path)
        .output()
        .expect("run demo.sh")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn without_cargo_the_demo_says_how_to_get_rust() {
    let Some(dir) = path_with("without_cargo_the_demo_says_how_to_get_rust", &[]) else {
        return;
    };
    let o = demo(dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "demo.sh: needs cargo, from Rust 1.89 or newer (https://rustup.rs, or Debian's \
         cargo where it is new enough)\n"
    );
}

#[test]
fn an_old_rust_is_named_with_the_version_needed() {
    let cargo = ("cargo", "echo 'cargo 1.63.0'");
    let Some(dir) = path_with("an_old_rust_is_named_with_the_version_needed", &[cargo]) else {
        return;
    };
    let o = demo(dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "demo.sh: needs Rust 1.89 or newer; cargo is 1.63.0 (rustup update, or https://rustup.rs)\n"
    );
}

#[test]
fn without_a_c_compiler_the_demo_says_so_before_building() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let body = format!(
        "case \"$1\" in --version) echo 'cargo 1.95.0 (f2932b8 2026-10-01)' ;; \
         *) echo \"$*\" >> '{}'; exit 1 ;; esac",
        log.path().display()
    );
    let test = "without_a_c_compiler_the_demo_says_so_before_building";
    let Some(dir) = path_with(test, &[("cargo", &body)]) else {
        return;
    };
    let o = demo(dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "demo.sh: needs a C compiler to build zstd (Debian: apt-get install build-essential)\n"
    );
    assert_eq!(
        std::fs::read_to_string(log.path()).unwrap(),
        "",
        "no build ran"
    );

    // With one, the build runs where it shows its progress (no -q).
    let Some(dir) = path_with(test, &[("cargo", &body), ("cc", "exit 0")]) else {
        return;
    };
    let o = demo(dir.path());
    assert_eq!(
        o.status.code(),
        Some(1),
        "the fake build fails: {}",
        stderr(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("== cargo build --release"), "{out}");
    assert_eq!(
        std::fs::read_to_string(log.path()).unwrap(),
        "build --release\n"
    );
}
