//! Every flag of the installed `btrfs send` and `btrfs receive` (read from
//! their own `--help`) is a flag of rsend or rreceive and has a row in the
//! drop-in table (docs/recipes.md) of what each means there.

use std::process::Command;

use testkit::{rreceive_bin, rsend_bin, which};

/// The flags a `--help` text of btrfs-progs lists: the first words of its
/// option lines (`-C|--chroot`, `-E|--max-errors NERR`, `--proto N`),
/// each alternative alone, in order, once.
fn btrfs_flags(help: &str) -> Vec<String> {
    let mut flags: Vec<String> = Vec::new();
    for line in help.lines() {
        let Some(rest) = line.strip_prefix("    ") else {
            continue;
        };
        if !rest.starts_with('-') {
            continue;
        }
        // The option ends where two spaces start its description.
        let option = rest.split("  ").next().unwrap_or("");
        let spelled = option.split_whitespace().next().unwrap_or("");
        for f in spelled.split('|') {
            let f = f.split('=').next().unwrap_or(f);
            if f.starts_with('-') && !flags.iter().any(|g| g == f) {
                flags.push(f.to_owned());
            }
        }
    }
    flags
}

/// Whether clap's `--help` text `help` defines `flag` (`-e` as `-e,` or
/// `-e ` at a line's start; `--chroot` as `--chroot` or `, --chroot`).
fn clap_defines(help: &str, flag: &str) -> bool {
    help.lines().any(|l| {
        let t = l.trim_start();
        // A flag that counts (`-v, --verbose...`) ends in dots.
        let name = |s: &str| {
            s.split([',', ' ', '=', '<'])
                .next()
                .map(|n| n.trim_end_matches('.').to_owned())
        };
        name(t).as_deref() == Some(flag)
            || t.split(", ").nth(1).and_then(name).as_deref() == Some(flag)
    })
}

/// The recipes' table rows under the heading that names `btrfs send` and
/// `btrfs receive` as what the tools replace.
fn dropin_table() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/recipes.md");
    let text = std::fs::read_to_string(path).expect("docs/recipes.md");
    let start = text
        .find("\n## Drop-in for `btrfs send` and `btrfs receive`")
        .expect(
            "docs/recipes.md has a section \"## Drop-in for `btrfs send` and `btrfs receive`\"",
        );
    let section = &text[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    section[..end]
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(str::to_owned)
        .collect()
}

fn help(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run --help");
    // btrfs-progs prints usage on stdout or stderr depending on version.
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

/// Where the real btrfs is missing, says so in one line (and fails under
/// `RSEND_REQUIRE_KERNEL=1`, where it must be installed).
fn real_btrfs(test: &str) -> bool {
    if which("btrfs").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("RSEND_REQUIRE_KERNEL").is_none_or(|v| v != "1"),
        "{test}: btrfs-progs must be installed"
    );
    println!("SKIP {test}: needs btrfs-progs (btrfs send --help)");
    false
}

fn check(sub: &str, ours: &str, our_help: &str) {
    let theirs = help(Command::new("btrfs").args([sub, "--help"]));
    let flags = btrfs_flags(&theirs);
    assert!(
        flags.len() >= 8,
        "btrfs {sub} --help lists only {flags:?}:\n{theirs}"
    );
    let rows = dropin_table();
    let mut missing = Vec::new();
    for f in &flags {
        if !clap_defines(our_help, f) {
            missing.push(format!("{ours} --help has no {f}"));
        }
        let cell = format!("`{f}");
        // | btrfs | flag | what rsend or rreceive does |
        let named = rows.iter().any(|r| {
            let cells: Vec<&str> = r.split('|').collect();
            cells.len() > 3 && cells[1].trim() == sub && cells[2].contains(&cell)
        });
        if !named {
            missing.push(format!(
                "the drop-in table of docs/recipes.md has no row for `btrfs {sub} {f}`"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn every_btrfs_send_flag_is_an_rsend_flag_in_the_dropin_table() {
    if !real_btrfs("every_btrfs_send_flag_is_an_rsend_flag_in_the_dropin_table") {
        return;
    }
    check(
        "send",
        "rsend",
        &help(Command::new(rsend_bin()).arg("--help")),
    );
}

#[test]
fn every_btrfs_receive_flag_is_an_rreceive_flag_in_the_dropin_table() {
    if !real_btrfs("every_btrfs_receive_flag_is_an_rreceive_flag_in_the_dropin_table") {
        return;
    }
    check(
        "receive",
        "rreceive",
        &help(Command::new(rreceive_bin()).arg("--help")),
    );
}

#[test]
fn the_flag_parser_reads_btrfs_progs_help_lines() {
    let text = "usage: btrfs receive [options] <mount>\n\n    -q|--quiet                suppress\n    -E|--max-errors NERR      terminate\n    -m ROOTMOUNT              the root\n    --dump                    dump\n    Global options:\n    -v|--verbose              more\n";
    assert_eq!(
        btrfs_flags(text),
        [
            "-q",
            "--quiet",
            "-E",
            "--max-errors",
            "-m",
            "--dump",
            "-v",
            "--verbose"
        ]
    );
    let clap = "  -v, --verbose...\n  -E, --max-errors <N>\n          Stop\n  -e\n          Stop after\n      --dump\n";
    for f in ["-v", "--verbose", "-E", "--max-errors", "-e", "--dump"] {
        assert!(clap_defines(clap, f), "{f}");
    }
    for f in ["-m", "--chroot", "-N", "--max"] {
        assert!(!clap_defines(clap, f), "{f}");
    }
}
