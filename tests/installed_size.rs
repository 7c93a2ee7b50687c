//! What `scripts/install.sh` installs is small: each tool at most 10 MB
//! (release builds carry no debug info; `cargo build --profile profiling`
//! keeps it for profilers).

use std::path::Path;
use std::process::Command;

use testkit::{rdump_bin, rreceive_bin, rsend_bin};

/// The bound docs/development.md gives for each installed binary.
const MAX_BYTES: u64 = 10_000_000;

#[test]
fn installed_binaries_are_at_most_10_mb() {
    let bins = [rsend_bin(), rreceive_bin(), rdump_bin()];
    let profile = bins[0].parent().expect("profile dir");
    if profile.file_name() != Some(std::ffi::OsStr::new("release")) {
        println!("SKIP installed_binaries_are_at_most_10_mb: not a release build");
        return;
    }
    let target = profile.parent().expect("target dir");
    let dest = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install.sh");
    let out = Command::new("sh")
        .arg(&script)
        .args(["--no-build", "/usr"])
        .env("DESTDIR", dest.path())
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for tool in ["rsend", "rreceive", "rdump"] {
        let installed = dest.path().join("usr/bin").join(tool);
        let bytes = std::fs::read(&installed).unwrap();
        println!("{tool}: {} bytes installed", bytes.len());
        assert!(
            bytes.len() as u64 <= MAX_BYTES,
            "{tool} is {} bytes installed, over {MAX_BYTES}",
            bytes.len()
        );
        let sections = section_names(&bytes);
        assert!(
            sections.iter().any(|s| s == ".text"),
            "{tool}: {sections:?}"
        );
        assert!(
            !sections.iter().any(|s| s.starts_with(".debug_")),
            "{tool} carries debug info: {sections:?}"
        );
        let v = Command::new(&installed).arg("--version").output().unwrap();
        assert!(v.status.success(), "{tool} --version failed");
    }
}

/// The section names of a little-endian ELF64 file.
fn section_names(elf: &[u8]) -> Vec<String> {
    assert_eq!(
        &elf[..6],
        b"\x7fELF\x02\x01",
        "not a little-endian ELF64 file"
    );
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let name = &elf[strtab + u32_at(header(i))..];
            let end = name.iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&name[..end]).into_owned()
        })
        .collect()
}
