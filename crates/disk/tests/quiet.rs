//! The reader never prints: no source names `eprintln!` or `println!`
//! (its notices go to the sink a caller gives), nor any command-line crate.

use std::path::Path;

#[test]
fn the_reader_never_prints() {
    testkit::engine::assert_never_prints(Path::new(env!("CARGO_MANIFEST_DIR")));
}
