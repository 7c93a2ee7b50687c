//! The receive crate's structure: no import circle among its modules, its
//! layers in order (a module calls lower layers only), no function over
//! 150 lines (the binary's included), and the subvolume being received
//! kept to 12 fields (see `testkit::layers`).

use std::path::Path;

use testkit::layers;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn modules_import_each_other_without_a_circle() {
    layers::assert_no_circle(crate_dir(), MODULES);
}

#[test]
fn no_function_is_over_150_lines() {
    layers::assert_short_functions(crate_dir(), 150, COMMAND_TABLE);
}

/// At least this many modules (a scan that finds fewer is broken).
const MODULES: usize = 30;
/// The function that is one `match` over the stream's command table.
const COMMAND_TABLE: &[&str] = &[];

/// The state of the subvolume being received (`apply::current::Current`)
/// holds each concern as one value: at most 12 fields.
#[test]
fn the_subvolume_being_received_has_at_most_12_fields() {
    let src = std::fs::read_to_string(crate_dir().join("src/apply/current.rs")).unwrap();
    let body = src
        .split("pub(crate) struct Current {")
        .nth(1)
        .and_then(|s| s.split("\n}\n").next())
        .expect("struct Current in src/apply/current.rs");
    let fields: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.ends_with(',') && l.contains(": "))
        .collect();
    assert!(!fields.is_empty(), "no fields found");
    assert!(fields.len() <= 12, "{} fields: {fields:#?}", fields.len());
}

/// The crate's layers, bottom first (docs/internals.md, "rreceive"): a
/// module may call those of lower layers only. The rooms (`recovery`,
/// `snapshot`, `apply`) count as one module each.
const LAYERS: &[&[&str]] = &[
    &["ioctl", "stop", "path::bytes"],
    &["flags", "meta", "xattr_limit"],
    &["recovery"],
    &["subvol"],
    &["path", "lock", "elsewhere"],
    &["error"],
    &["decode", "fake_super", "report"],
    &["closer", "snapshot"],
    &["probe"],
    &["dest"],
    &["options"],
    &["apply"],
    &["run"],
];

#[test]
fn modules_call_only_lower_layers() {
    let wrong = layers::against_layers(crate_dir(), LAYERS);
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}
