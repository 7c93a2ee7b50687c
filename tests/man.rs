//! Each tool's man page (`TOOL --man`): a SYNOPSIS that names every option
//! of `--help` with its argument, and the EXAMPLES, EXIT STATUS and SEE
//! ALSO sections; where man is installed, it renders without a warning.

use std::path::PathBuf;
use std::process::Command;

use testkit::{rdump_bin, rreceive_bin, rsend_bin};

mod help;

fn tools() -> [(&'static str, PathBuf); 3] {
    [
        ("rsend", rsend_bin()),
        ("rreceive", rreceive_bin()),
        ("rdump", rdump_bin()),
    ]
}

fn stdout(bin: &PathBuf, arg: &str) -> String {
    let out = Command::new(bin).arg(arg).output().expect("run the tool");
    assert!(out.status.success(), "{} {arg}: {:?}", bin.display(), out);
    String::from_utf8(out.stdout).expect("utf-8")
}

/// roff's escapes undone for the few characters the pages use.
fn plain(roff: &str) -> String {
    roff.replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\-", "-")
        .replace("\\ ", " ")
        .replace("\\&", "")
}

#[test]
fn synopsis_names_every_option_with_its_argument() {
    for (tool, bin) in tools() {
        let help = stdout(&bin, "-h");
        let roff = stdout(&bin, "--man");
        let synopsis = roff
            .split_once("\n.SH SYNOPSIS\n")
            .and_then(|(_, rest)| rest.split_once("\n.SH ").map(|(s, _)| plain(s)))
            .unwrap_or_else(|| panic!("{tool}: no SYNOPSIS: {roff}"));
        let opts = help::options(&help);
        assert!(opts.len() >= 5, "{tool}: options of -h: {opts:?}");
        for opt in opts {
            let want = format!("[{}]", opt.spec("|"));
            assert!(
                synopsis.contains(&want),
                "{tool}: SYNOPSIS has no {want}: {synopsis}"
            );
        }
    }
}

#[test]
fn sections_examples_exit_status_and_see_also() {
    for (tool, bin) in tools() {
        let roff = stdout(&bin, "--man");
        let headings: Vec<&str> = roff
            .lines()
            .filter_map(|l| l.strip_prefix(".SH "))
            .collect();
        let order = [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "EXAMPLES",
            "\"EXIT STATUS\"",
            "\"SEE ALSO\"",
        ];
        let mut at = 0;
        for want in order {
            let Some(i) = headings[at..].iter().position(|h| *h == want) else {
                panic!("{tool}: no {want} after {:?}: {headings:?}", &order[..at]);
            };
            at += i + 1;
        }
        let section = |name: &str| {
            let start = roff.find(&format!("\n.SH {name}\n")).expect("section") + 1;
            let body = &roff[start..];
            let end = body[4..].find("\n.SH ").map_or(body.len(), |e| e + 4);
            plain(&body[..end])
        };
        let status = section("\"EXIT STATUS\"");
        for code in ["0", "1", "2"] {
            assert!(
                status
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code}  "))),
                "{tool}: exit code {code} not explained: {status}"
            );
        }
        let see = section("\"SEE ALSO\"");
        assert!(see.contains(&format!("docs/{tool}.md")), "{see}");
        assert!(see.contains("(1)") && see.contains("(8)"), "{see}");
        // The same text ends --help, and -h points to it.
        let help = stdout(&bin, "--help");
        assert!(help.contains("\nExit status:\n  0  "), "{help}");
        let short = stdout(&bin, "-h");
        assert!(short.contains(&format!("`man {tool}`")), "{short}");
        assert!(short.contains(&format!("docs/{tool}.md")), "{short}");
    }
}

#[test]
fn man_renders_each_page_without_warnings() {
    if Command::new("man").arg("--version").output().is_err() {
        println!("SKIP man_renders_each_page_without_warnings: man is not installed");
        return;
    }
    for (tool, bin) in tools() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join(format!("{tool}.1"));
        std::fs::write(&page, stdout(&bin, "--man")).unwrap();
        let out = testkit::man_render(&page);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{tool}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "{tool}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for heading in ["SYNOPSIS", "EXIT STATUS", "EXAMPLES", "SEE ALSO"] {
            assert!(text.contains(&format!("\n{heading}\n")), "{tool}: {text}");
        }
    }
}

/// `--help` and the man page name the files the packages
/// (`packaging/build-debs`, under /usr) and `scripts/install.sh` (under
/// /usr/local) install for the tool: its man page and its bash, zsh and
/// fish completions, not placeholders such as `share/man/man1/TOOL.1`.
#[test]
fn help_and_man_name_the_tools_installed_files() {
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let read = |rel: &str| std::fs::read_to_string(repo.join(rel)).expect(rel);
    // Where the scripts put them, as their text says.
    let install = read("scripts/install.sh");
    for part in [
        "\"$root/share/bash-completion/completions/$tool\"",
        "zsh_dir=${ZSH_DIR:-share/zsh/site-functions}",
        "\"$root/$zsh_dir/_$tool\"",
        "\"$root/share/fish/vendor_completions.d/$tool.fish\"",
        "\"$root/share/man/man1/$tool.1\"",
    ] {
        assert!(install.contains(part), "scripts/install.sh: {part}");
    }
    let debs = read("packaging/build-debs");
    for part in [
        "ZSH_DIR=share/zsh/vendor-completions",
        "scripts/install.sh --no-build /usr",
        "gzip -9n \"$root/usr/share/man/man1/",
    ] {
        assert!(debs.contains(part), "packaging/build-debs: {part}");
    }
    for (tool, bin) in tools() {
        let help = stdout(&bin, "--help");
        let man = plain(&stdout(&bin, "--man"));
        // Each path a line of its own, in both.
        let lines =
            |text: &str| -> Vec<String> { text.lines().map(|l| l.trim().to_owned()).collect() };
        let (help_lines, man_lines) = (lines(&help), lines(&man));
        for want in [
            format!("/usr/share/man/man1/{tool}.1.gz"),
            format!("/usr/local/share/man/man1/{tool}.1"),
            format!("/usr/share/bash-completion/completions/{tool}"),
            format!("/usr/share/zsh/vendor-completions/_{tool}"),
            format!("/usr/share/fish/vendor_completions.d/{tool}.fish"),
            format!("/usr/local/share/bash-completion/completions/{tool}"),
            format!("/usr/local/share/zsh/site-functions/_{tool}"),
            format!("/usr/local/share/fish/vendor_completions.d/{tool}.fish"),
        ] {
            assert!(
                help_lines.contains(&want),
                "{tool} --help: no {want}: {help}"
            );
            assert!(man_lines.contains(&want), "{tool} --man: no {want}: {man}");
        }
        let read_it = format!("`{tool} --man | man -l -`");
        assert!(
            help.contains(&read_it) && man.contains(&read_it),
            "{tool}: {help}"
        );
        assert!(!help.contains("TOOL"), "{tool} --help: {help}");
        assert!(!man.contains("TOOL"), "{tool} --man: {man}");
    }
}
