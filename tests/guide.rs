//! The user guide (docs/TOOL.md) documents every flag of each tool's
//! `--help`, each under a heading of its own with an example that uses it,
//! and no flag the tool does not have; the README stays short and links the
//! guide.

use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::{rdump_bin, rreceive_bin, rsend_bin};

mod help;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every option `TOOL --help` lists, as the guide's heading names it:
/// `-d, --device PATH`, `-e`, `--ignore KIND[,KIND...]`, `-v, --verbose`.
fn help_options(bin: &PathBuf) -> Vec<String> {
    let out = Command::new(bin)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).expect("utf-8");
    help::options(&help).iter().map(|o| o.spec(", ")).collect()
}

/// The `### ` sections under `## Options` of a guide page: heading and body.
fn option_sections(page: &str) -> Vec<(String, String)> {
    let start = page.find("\n## Options\n").expect("a ## Options section");
    let rest = &page[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    let mut sections = Vec::new();
    for part in rest[..end].split("\n### ").skip(1) {
        let (heading, body) = part.split_once('\n').unwrap_or((part, ""));
        sections.push((heading.trim().to_owned(), body.to_owned()));
    }
    sections
}

/// The lines of the ```sh blocks in `body`.
fn sh_lines(body: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut inside = false;
    for l in body.lines() {
        if l.starts_with("```") {
            inside = l == "```sh";
            continue;
        }
        if inside {
            lines.push(l);
        }
    }
    lines
}

#[test]
fn every_flag_of_every_tool_has_a_section_with_an_example() {
    let mut problems = Vec::new();
    for (tool, bin) in [
        ("rsend", rsend_bin()),
        ("rreceive", rreceive_bin()),
        ("rdump", rdump_bin()),
    ] {
        let rel = format!("docs/{tool}.md");
        let page = read(&rel);
        let options = help_options(&bin);
        assert!(options.len() >= 7, "{tool} --help lists {options:?}");
        let sections = option_sections(&page);
        for opt in &options {
            let Some((_, body)) = sections.iter().find(|(h, _)| h == opt) else {
                problems.push(format!("{rel}: no section \"### {opt}\""));
                continue;
            };
            // The example uses the flag, by its short or its long name.
            let names: Vec<&str> = opt
                .split([',', ' '])
                .filter(|w| w.starts_with('-'))
                .collect();
            let used = sh_lines(body).iter().any(|l| {
                l.contains(tool)
                    && l.split([' ', '=', '|', '(', ')', '"', '\''])
                        .any(|w| names.contains(&w))
            });
            if !used {
                problems.push(format!(
                    "{rel}: the section of {opt} has no ```sh example running {tool} {}",
                    names.join(" or ")
                ));
            }
        }
        for (heading, _) in &sections {
            if !options.contains(heading) {
                problems.push(format!(
                    "{rel}: \"### {heading}\" is not an option of {tool} --help ({options:?})"
                ));
            }
        }
        for part in ["## Exit status", "## Errors and what to do"] {
            if !page.contains(&format!("\n{part}\n")) {
                problems.push(format!("{rel}: no \"{part}\" section"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_is_short_and_links_the_guide() {
    let readme = read("README.md");
    assert!(
        readme.len() < 8192,
        "README.md is {} bytes; the reference belongs in docs/",
        readme.len()
    );
    // Its two commands come first: the demo and the test suite .ci/run runs.
    let first_block = readme.split("```sh\n").nth(1).expect("a ```sh block");
    assert!(
        first_block.starts_with("bash testdata/demo.sh ")
            && first_block.contains("\ncargo test --workspace --release "),
        "{first_block}"
    );
    assert!(read(".ci/run").contains("\ncargo test --workspace --release\n"));
    for page in [
        "docs/rsend.md",
        "docs/rreceive.md",
        "docs/rdump.md",
        "docs/recipes.md",
        "docs/install.md",
        "docs/development.md",
    ] {
        assert!(repo().join(page).is_file(), "{page} is missing");
        assert!(
            readme.contains(&format!("]({page}")),
            "README.md does not link {page}"
        );
    }
}

/// The README says how long the test suite takes, beside its command.
#[test]
fn the_readme_gives_the_time_of_the_test_suite() {
    let readme = read("README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo test --workspace --release "))
        .expect("the test suite's command");
    let minutes = line
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .find(|w| w[1].trim_end_matches([',', ';', ')']) == "minutes")
        .and_then(|w| w[0].parse::<u32>().ok());
    assert!(
        minutes.is_some_and(|m| m > 0),
        "README.md: no time (\"N minutes\") for the test suite: {line}"
    );
}

/// Each relative link of the docs and the README names a file that exists,
/// and a `#fragment` a heading of it.
#[test]
fn links_between_the_pages_resolve() {
    let mut pages: Vec<String> = vec!["README.md".into()];
    for e in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    let anchor = |heading: &str| -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let mut broken = Vec::new();
    for page in &pages {
        let text = read(page);
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let link = &rest[..end];
            if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                continue;
            }
            let (file, frag) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file).to_string_lossy().into_owned()
            };
            if !repo().join(&target).exists() {
                broken.push(format!("{page}: {link}: no file {target}"));
                continue;
            }
            if !frag.is_empty() && target.ends_with(".md") {
                let body = read(&target);
                let found = body
                    .lines()
                    .filter_map(|l| l.trim_start_matches('#').strip_prefix(' '))
                    .any(|h| anchor(h) == frag);
                if !found {
                    broken.push(format!("{page}: {link}: no heading #{frag} in {target}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
