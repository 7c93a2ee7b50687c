//! The reader's modules import each other without a circle, in the layers
//! the crate documentation gives: each module names (`crate::m`) only
//! modules of lower layers, or its own.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers of lib.rs's documentation, bottom first.
const LAYERS: &[&[&str]] = &[
    &["bytes"],
    &["key", "csum"],
    &["superblock", "items", "chunk", "block", "rescue"],
    &["error"],
    &["device"],
    &["mount"],
    &["tree"],
    &["mem"],
    &["diff"],
    &["fs"],
    &["subvol"],
    &["data"],
    &["lookup"],
];

fn layer_of(m: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&m))
}

/// The `crate::x` modules a source file's code names (comments and doc
/// links, which may point anywhere, left out).
fn imports(src: &str) -> Vec<String> {
    let code: String = src
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let src = code.as_str();
    let mut out = Vec::new();
    for (i, _) in src.match_indices("crate::") {
        let rest = &src[i + 7..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

#[test]
fn modules_import_only_lower_layers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let m = p.file_stem().unwrap().to_string_lossy().into_owned();
        if m == "lib" {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        // Unit tests may reach anywhere below or beside them.
        let body = src.split("#[cfg(test)]").next().unwrap_or("");
        graph.insert(m, imports(body));
    }
    let mut wrong = Vec::new();
    for (m, deps) in &graph {
        let Some(lm) = layer_of(m) else {
            wrong.push(format!("{m}: not in any layer of this test or lib.rs"));
            continue;
        };
        for d in deps.iter().filter(|d| *d != m) {
            match layer_of(d) {
                Some(ld) if ld < lm => {}
                _ => wrong.push(format!("{m} imports {d}")),
            }
        }
    }
    assert!(graph.len() >= 12, "found only {:?}", graph.keys());
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn modules_import_each_other_without_a_circle() {
    testkit::layers::assert_no_circle(Path::new(env!("CARGO_MANIFEST_DIR")), 20);
}
