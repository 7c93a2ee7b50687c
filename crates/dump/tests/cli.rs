//! rdump's command line itself: the examples in `--help`, the man page and
//! the shell completions it prints for installing.

use std::process::{Command, Output};

fn rdump(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdump"))
        .args(args)
        .output()
        .expect("run rdump")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

#[test]
fn man_page_is_roff_naming_rdump_and_its_options() {
    // No FILE: rdump prints the page and exits without reading a stream.
    let out = rdump(&["--man"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    let page = stdout(&out);
    assert!(page.contains("\n.TH rdump 1 "), "{page}");
    assert!(page.contains("\n.SH NAME\nrdump \\- "), "{page}");
    for flag in ["summary", "json", "all\\-streams", "completions", "man"] {
        assert!(
            page.contains(&format!("\\fB\\-\\-{flag}\\fR")),
            "no --{flag}: {page}"
        );
    }
    // The --help examples, as an EXAMPLES section kept as laid out.
    assert!(
        page.contains("\n.SH EXAMPLES\n.nf\n"),
        "no EXAMPLES section: {page}"
    );
    assert!(page.contains("| rdump \\-\\-summary\n"), "{page}");
}

#[test]
fn bash_completion_offers_summary() {
    let out = rdump(&["--completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    let script = stdout(&out);
    assert!(script.contains("complete -F _rdump"), "{script}");
    assert!(script.contains("--summary"), "{script}");
    assert!(script.contains("--all-streams"), "{script}");
}

#[test]
fn every_supported_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = rdump(&["--completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        assert!(stdout(&out).contains("summary"), "{shell}");
    }
}

#[test]
fn unknown_shell_is_a_usage_error() {
    let out = rdump(&["--completions", "nosuchshell"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nosuchshell"), "{err}");
    assert!(err.contains("bash"), "{err}");
}

#[test]
fn long_help_ends_with_examples_of_real_jobs() {
    let out = rdump(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    let examples = help
        .find("\nExamples:\n")
        .map(|at| &help[at..])
        .unwrap_or_else(|| panic!("no examples: {help}"));
    for line in [
        "    rdump backup.stream\n",
        "    rsend -d /dev/sdb -p snaps/mon snaps/tue | rdump --summary\n",
        "    rdump --json backup.stream | jq ",
    ] {
        assert!(examples.contains(line), "no {line:?} in {examples}");
    }
    // The completion and man flags are documented in --help only.
    assert!(help.contains("--completions <SHELL>"), "{help}");
    assert!(help.contains("--man"), "{help}");
    let short = stdout(&rdump(&["-h"]));
    assert!(!short.contains("--completions"), "{short}");
    assert!(!short.contains("--man"), "{short}");
}
