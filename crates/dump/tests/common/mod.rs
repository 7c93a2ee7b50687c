//! Running the rdump binary in the integration tests.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// rdump with `args`, in UTC.
pub fn rdump(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdump"))
        .args(args)
        .env("TZ", "UTC")
        .output()
        .expect("run rdump")
}

/// rdump reading `input` from a pipe, as after `rsend ... |`.
pub fn rdump_piped(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdump"))
        .args(args)
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rdump");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        // rdump may stop reading early; a closed pipe is fine.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for rdump");
    writer.join().expect("writer thread");
    out
}

/// Writes `bytes` to a fresh file of this test run and returns its path.
pub fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    fs::write(&path, bytes).expect("write scratch file");
    path
}
