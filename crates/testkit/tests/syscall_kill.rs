//! The ptrace stepper: a shell writing two lines to a file, killed before
//! each of its system calls in turn, leaves the file as it was at that
//! instant (nothing, the first line, both), never more than what the
//! calls before made; past its last call it runs to its end.

use std::process::Command;

use testkit::syscall_kill::{run_killed_at, At};

fn shell(file: &std::path::Path) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("printf 'a\\n' > \"$1\"; printf 'b\\n' >> \"$1\"")
        .arg("sh")
        .arg(file);
    c
}

#[test]
fn a_program_killed_before_each_system_call_did_only_what_came_before() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    let whole = run_killed_at(&mut shell(&file), None).unwrap();
    assert!(whole.status.success() && !whole.killed, "{whole:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"a\nb\n");
    let total = whole.calls.len() as u64;
    assert!(total > 10, "{total} system calls");
    let mut seen = Vec::new();
    for n in 1..=total + 5 {
        let _ = std::fs::remove_file(&file);
        let st = run_killed_at(&mut shell(&file), Some(At { n, main: false })).unwrap();
        let got = std::fs::read(&file).unwrap_or_default();
        if !st.killed {
            assert!(n > total - 5, "not killed before call {n} of {total}");
            assert!(st.status.success(), "{st:?}");
            assert_eq!(got, b"a\nb\n");
            break;
        }
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.status.signal(), Some(9), "call {n}: {st:?}");
        assert_eq!(st.calls.len() as u64, n, "call {n}");
        // What a kill left: a prefix of the whole, and it never shrinks
        // as the kill comes later (a single-threaded program).
        assert!(
            [&b""[..], b"a\n", b"a\nb\n"].contains(&got.as_slice()),
            "call {n}: {got:?}"
        );
        if let Some(last) = seen.last() {
            assert!(got.len() >= *last, "call {n}: {got:?} after {last} bytes");
        }
        seen.push(got.len());
    }
    // Every state was reached: before the file, after the first line, and
    // (before its last calls) after both.
    for len in [0, 2, 4] {
        assert!(seen.contains(&len), "no kill left {len} bytes: {seen:?}");
    }
    // Counting the first thread only gives the same instants here.
    let st = run_killed_at(&mut shell(&file), Some(At { n: 3, main: true })).unwrap();
    assert!(st.killed && st.calls.iter().all(|c| c.main), "{st:?}");
}
