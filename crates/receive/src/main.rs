//! `rreceive`: not implemented yet; see the project's issue tracker.

fn main() {
    eprintln!("rreceive: not implemented yet (this build only provides rdump)");
    std::process::exit(1);
}
