//! The import graph of a crate's modules, and the length of its
//! functions: what the `layers` tests of the workspace's crates check (no
//! import circle; no function too long to read at once).
//!
//! An edge of the graph is a module a module names (in `use` items, and in
//! paths of its code from `crate::`, `super::`, `self::` or a child).
//! Declaring a module (`mod m;`) is not an edge; naming it is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path below the crate root (`send::inode`); the root is empty.
pub type Module = Vec<String>;

/// `src` without comments, string literals and char literals (which may
/// hold anything, `::` and quotes included).
fn code_of(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            i = src[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '"'); else a lifetime.
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if let Some(c) = rest[1..].chars().next() {
                if rest[1 + c.len_utf8()..].starts_with('\'') {
                    i += 2 + c.len_utf8();
                    out.push_str("' '");
                } else {
                    out.push('\'');
                    i += 1;
                }
            } else {
                i += 1;
            }
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The number of `#` of a raw string starting `s` (`r"`, `r#"`, `br#"`).
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            out.push(code[i..end].to_string());
        } else if c == ':' && chars.peek().map(|p| p.1) == Some(':') {
            chars.next();
            out.push("::".into());
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

/// The paths a use tree (the tokens between `use` and `;`) brings in,
/// each as its segments (`*`, `self` and renames dropped).
fn use_paths(t: &[String]) -> Vec<Vec<String>> {
    fn tree(t: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        while *i < t.len() {
            match t[*i].as_str() {
                "::" => *i += 1,
                "{" => {
                    *i += 1;
                    while *i < t.len() && t[*i] != "}" {
                        tree(t, i, &path, out);
                        if *i < t.len() && t[*i] == "," {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                "," | "}" => break,
                "as" => *i += 2,
                "*" | "self" if !path.is_empty() => *i += 1,
                s => {
                    path.push(s.to_string());
                    *i += 1;
                }
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    let mut i = 0;
    tree(t, &mut i, &[], &mut out);
    out
}

/// The module a path names from module `at`: the deepest module of
/// `known` it reaches; None for a path into another crate.
fn resolve(at: &Module, path: &[String], known: &BTreeSet<Module>) -> Option<Module> {
    let mut segs = path.iter().peekable();
    let mut base: Module = match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            Vec::new()
        }
        Some("self") => {
            segs.next();
            at.clone()
        }
        Some("super") => {
            let mut b = at.clone();
            while segs.peek().map(|s| s.as_str()) == Some("super") {
                segs.next();
                b.pop()?;
            }
            b
        }
        Some(first) => {
            let mut child = at.clone();
            child.push(first.to_string());
            if !known.contains(&child) {
                return None;
            }
            at.clone()
        }
        None => return None,
    };
    for s in segs {
        let mut next = base.clone();
        next.push(s.clone());
        if !known.contains(&next) {
            break;
        }
        base = next;
    }
    Some(base)
}

/// What one source file holds: per module it defines (itself and inline
/// ones), the paths its code names.
fn scan(file_module: &Module, src: &str) -> BTreeMap<Module, Vec<Vec<String>>> {
    let t = tokens(&code_of(src));
    let mut out: BTreeMap<Module, Vec<Vec<String>>> = BTreeMap::new();
    out.insert(file_module.clone(), Vec::new());
    // The inline modules open at the current point, with the brace depth
    // at which each closes.
    let mut stack: Vec<(Module, usize)> = vec![(file_module.clone(), 0)];
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let at = stack.last().map(|s| s.0.clone()).unwrap_or_default();
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if stack.len() > 1 && stack.last().is_some_and(|s| s.1 == depth) {
                    stack.pop();
                }
            }
            "mod" if t.get(i + 2).map(String::as_str) == Some("{") => {
                let mut m = at.clone();
                m.push(t[i + 1].clone());
                out.entry(m.clone()).or_default();
                stack.push((m, depth));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let end = t[i..]
                    .iter()
                    .position(|s| s == ";")
                    .map_or(t.len(), |n| i + n);
                let paths = use_paths(&t[i + 1..end]);
                out.entry(at).or_default().extend(paths);
                i = end + 1;
                continue;
            }
            s if t.get(i + 1).map(String::as_str) == Some("::")
                && (i == 0 || t[i - 1] != "::")
                && s.chars().all(|c| c.is_alphanumeric() || c == '_') =>
            {
                let mut path = vec![t[i].clone()];
                let mut j = i + 1;
                while t.get(j).map(String::as_str) == Some("::")
                    && t.get(j + 1)
                        .is_some_and(|s| s.chars().all(|c| c.is_alphanumeric() || c == '_'))
                {
                    path.push(t[j + 1].clone());
                    j += 2;
                }
                out.entry(at).or_default().push(path);
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The library's source files below `crate_dir/src` (the binary's, under
/// `src/bin`, are another crate) with their modules.
pub fn sources(crate_dir: &Path) -> Vec<(Module, String)> {
    fn walk(dir: &Path, prefix: &Module, out: &mut Vec<(Module, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("source directory")
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p
                .file_stem()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            if p.is_dir() {
                if prefix.is_empty() && name == "bin" {
                    continue;
                }
                let mut m = prefix.clone();
                m.push(name);
                walk(&p, &m, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let mut m = prefix.clone();
                if !(name == "mod" || (prefix.is_empty() && name == "lib")) {
                    m.push(name);
                }
                out.push((m, std::fs::read_to_string(&p).expect("source file")));
            }
        }
    }
    let mut out = Vec::new();
    walk(&crate_dir.join("src"), &Vec::new(), &mut out);
    out
}

/// `a::b`, or `crate` for the root.
pub fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// A cycle of `graph`, as the modules along it, first repeated at the end.
pub fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        path: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|p| p == m).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(m.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(m.clone(), Mark::Open);
        path.push(m.clone());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut marks, &mut Vec::new()))
}

/// The import graph of modules given as (module, source).
pub fn graph_of(files: &[(Module, String)]) -> BTreeMap<Module, BTreeSet<Module>> {
    let scanned: Vec<_> = files.iter().map(|(m, src)| scan(m, src)).collect();
    let known: BTreeSet<Module> = scanned.iter().flat_map(|s| s.keys().cloned()).collect();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for s in &scanned {
        for (m, paths) in s {
            let deps = graph.entry(m.clone()).or_default();
            for p in paths {
                if let Some(d) = resolve(m, p, &known).filter(|d| d != m) {
                    deps.insert(d);
                }
            }
        }
    }
    graph
}

/// Panics naming a circle if the library of the crate at `crate_dir`
/// (its `CARGO_MANIFEST_DIR`) has one; `at_least` modules must be seen (a
/// scan that finds too little is a broken test, not a clean crate).
pub fn assert_no_circle(crate_dir: &Path, at_least: usize) {
    let graph = graph_of(&sources(crate_dir));
    assert!(
        graph.len() >= at_least && graph.values().any(|d| !d.is_empty()),
        "the scan found too little: {:?}",
        graph.keys().map(name).collect::<Vec<_>>()
    );
    if let Some(cycle) = find_cycle(&graph) {
        let groups: Vec<String> = circles(&graph)
            .iter()
            .map(|g| g.iter().map(name).collect::<Vec<_>>().join(", "))
            .collect();
        panic!(
            "modules import each other in a circle: {}\nmodules in circles, by group:\n{}",
            cycle.iter().map(name).collect::<Vec<_>>().join(" -> "),
            groups.join("\n")
        );
    }
}

/// The groups of modules that each reach all the others of their group
/// (the graph's strongly connected components of more than one module).
pub fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    let reach = |from: &Module| -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&Module, BTreeSet<Module>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<Module>> = Vec::new();
    for (m, r) in &reached {
        if out.iter().any(|g| g.contains(*m)) {
            continue;
        }
        let group: BTreeSet<Module> = r
            .iter()
            .filter(|d| reached.get(d).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        if group.len() > 1 {
            out.push(group);
        }
    }
    out
}

/// The imports of the crate at `crate_dir` against `layers` (bottom
/// first; each a list of modules, `room` or `room::part`): a module
/// belongs to the longest entry it is or lies beneath, and every import
/// between entries goes down, never up or sideways. Each line says one
/// that does not, or a module no layer holds.
pub fn against_layers(crate_dir: &Path, layers: &[&[&str]]) -> Vec<String> {
    let graph = graph_of(&sources(crate_dir));
    // The entry a module belongs to, and its layer.
    let place = |m: &Module| -> Option<(String, usize)> {
        (1..=m.len()).rev().find_map(|n| {
            let e = m[..n].join("::");
            layers
                .iter()
                .position(|l| l.contains(&e.as_str()))
                .map(|i| (e, i))
        })
    };
    let mut wrong = BTreeSet::new();
    for (m, deps) in &graph {
        if m.is_empty() {
            continue;
        }
        let Some((em, lm)) = place(m) else {
            wrong.insert(format!("{}: in no layer", name(m)));
            continue;
        };
        for d in deps {
            match place(d) {
                Some((ed, _)) if ed == em => {}
                Some((_, ld)) if ld < lm => {}
                _ => {
                    wrong.insert(format!("{} imports {}", name(m), name(d)));
                }
            }
        }
    }
    wrong.into_iter().collect()
}

/// Every function of `src` (a file's text) without its unit tests, as
/// (name, first line, number of lines from `fn` to the closing brace);
/// a declaration without a body is left out.
pub fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let product = src.split("#[cfg(test)]\nmod tests").next().unwrap_or(src);
    let code = code_of(product);
    let b = code.as_bytes();
    let line_at = |i: usize| code[..i].bytes().filter(|&c| c == b'\n').count() + 1;
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(n) = code[i..].find("fn ") {
        let at = i + n;
        i = at + 3;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let name: String = code[i..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's
        // brackets; a `;` first means none.
        let (mut depth, mut j, mut open) = (0i32, i, None);
        while j < b.len() {
            match b[j] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(j);
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let Some(open) = open else { continue };
        let mut depth = 0usize;
        let mut k = open;
        while k < b.len() {
            match b[k] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        let first = line_at(at);
        out.push((name, first, line_at(k.min(b.len())) - first + 1));
    }
    out
}

/// Panics naming every function of the crate at `crate_dir` (binaries
/// included) longer than `max` lines, but those `allowed` (`file.rs:name`).
pub fn assert_short_functions(crate_dir: &Path, max: usize, allowed: &[&str]) {
    let long = long_functions(crate_dir, max, allowed);
    assert!(
        long.is_empty(),
        "functions over {max} lines:\n{}",
        long.join("\n")
    );
}

/// The functions of every `.rs` file below `crate_dir/src` (binaries
/// included) longer than `max` lines, as `path:line name (N lines)`, but
/// for those `allowed` names (`file.rs:name`).
pub fn long_functions(crate_dir: &Path, max: usize, allowed: &[&str]) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("source directory") {
            let p = e.expect("directory entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&crate_dir.join("src"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for p in files {
        let src = std::fs::read_to_string(&p).expect("source file");
        let rel = p
            .strip_prefix(crate_dir)
            .unwrap_or(&p)
            .display()
            .to_string();
        for (f, line, len) in functions(&src) {
            let key = format!(
                "{}:{f}",
                p.file_name().unwrap_or_default().to_string_lossy()
            );
            if len > max && !allowed.contains(&key.as_str()) {
                out.push(format!("{rel}:{line} {f} ({len} lines)"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_sees_use_trees_paths_and_inline_modules() {
        let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
        let files = vec![
            (Vec::new(), "mod a; mod b;".to_string()),
            (
                m("a"),
                "mod c; mod d; use d::X; fn f() { crate::b::g(); }".into(),
            ),
            (
                m("a::c"),
                "use super::{d::{self, Y}, Z as W}; // use crate::b;\n\
                 const S: &str = \"crate::b\"; const Q: char = '\"';\n\
                 #[cfg(test)] mod tests { use super::*; }"
                    .into(),
            ),
            (m("a::d"), "fn h<'x>(_: &'x u8) {}".into()),
            (m("b"), "pub fn g() { let _ = super::a::d::h; }".into()),
        ];
        let g = graph_of(&files);
        let deps = |s: &str| -> Vec<String> {
            g.get(&m(s))
                .into_iter()
                .flatten()
                .map(name)
                .collect::<Vec<_>>()
        };
        assert_eq!(deps("a"), ["a::d", "b"]);
        assert_eq!(deps("a::c"), ["a", "a::d"]);
        assert_eq!(deps("a::c::tests"), ["a::c"]);
        assert_eq!(deps("b"), ["a::d"]);
        assert!(find_cycle(&g).is_none());
        let with_cycle = [files, vec![(m("a::d"), "use crate::a::c::X;".into())]].concat();
        let cycle = find_cycle(&graph_of(&with_cycle)).unwrap_or_default();
        let cycle: Vec<String> = cycle.iter().map(name).collect();
        assert!(
            cycle.contains(&"a::c".into()) && cycle.contains(&"a::d".into()),
            "{cycle:?}"
        );
    }

    #[test]
    fn functions_are_measured_from_fn_to_their_closing_brace() {
        let src = "trait T { fn decl(&self); }\n\
                   fn one() { let s = \"}\"; }\n\
                   fn two<F: Fn()>(\n    f: F,\n) -> [u8; 2]\nwhere F: Copy {\n    f();\n    [0; 2]\n}\n\
                   #[cfg(test)]\nmod tests {\n    fn hidden() {}\n}\n";
        assert_eq!(
            functions(src),
            [("one".to_string(), 2, 1), ("two".to_string(), 3, 7)]
        );
    }
}
