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

/// `scripts/install.sh --no-build` (the documented install command) puts
/// the binary, its completions and its man page where shells and man look.
#[test]
fn install_script_installs_the_tool_its_completions_and_man_page() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_rdump"));
    // target/<profile>/rdump: the script looks in $CARGO_TARGET_DIR/release.
    let profile = bin.parent().expect("profile dir");
    if profile.file_name() != Some(std::ffi::OsStr::new("release")) {
        println!("SKIP install_script: rdump is not a release build");
        return;
    }
    let target = profile.parent().expect("target dir");
    let dest = std::env::temp_dir().join(format!("rdump-install-{}", std::process::id()));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh");
    let out = Command::new("sh")
        .arg(&script)
        .args(["--no-build", "/usr"])
        .env("DESTDIR", &dest)
        .env("TOOLS", "rdump")
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("run install.sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "install.sh failed: {err}");
    let root = dest.join("usr");
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert!(read("share/bash-completion/completions/rdump").contains("--summary"));
    assert!(read("share/zsh/site-functions/_rdump").contains("--summary"));
    assert!(read("share/fish/vendor_completions.d/rdump.fish").contains("summary"));
    assert!(read("share/man/man1/rdump.1").contains(".TH rdump 1"));
    // The guide --help and the man page point to.
    assert!(read("share/doc/rdump/rdump.md").starts_with("# rdump\n"));
    assert!(read("share/doc/rdump/recipes.md").starts_with("# Recipes\n"));
    assert!(
        !root.join("bin/btrfs-rsend").exists(),
        "the front comes with rsend"
    );
    let v = Command::new(root.join("bin/rdump"))
        .arg("--version")
        .output()
        .expect("run the installed rdump");
    assert!(stdout(&v).starts_with("rdump "), "{}", stdout(&v));
    // A PREFIX that is not absolute is a usage error, and installs nothing.
    let bad = Command::new("sh")
        .arg(&script)
        .args(["--no-build", "usr"])
        .env("DESTDIR", dest.join("bad"))
        .output()
        .expect("run install.sh");
    assert_eq!(bad.status.code(), Some(2));
    assert!(!dest.join("bad").exists());
    std::fs::remove_dir_all(&dest).unwrap();
}

/// A terminal on standard input cannot give a stream: rdump says how to
/// give one (exit code 2) instead of waiting.
#[test]
fn a_terminal_on_standard_input_is_refused_with_a_hint() {
    let bin = std::ffi::OsStr::new(env!("CARGO_BIN_EXE_rdump"));
    for args in ["", "-", "--summary"] {
        let cmd = format!("{} {args}", testkit::sh_quote(bin));
        let Some((code, out)) = testkit::on_terminal(&cmd) else {
            return testkit::no_script("a_terminal_on_standard_input_is_refused_with_a_hint");
        };
        let shown = String::from_utf8_lossy(&out);
        assert_eq!(code, Some(2), "rdump {args}: {shown}");
        assert!(
            shown.starts_with(
                "rdump: error: standard input is a terminal, not a send stream: pipe one in \
                 (rsend ... | rdump) or name a stream file (rdump FILE)"
            ),
            "rdump {args}: {shown}"
        );
    }
}
