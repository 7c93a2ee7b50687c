//! Where in a snapshot an error points, as messages say it: ` at PATH`,
//! ` (the subvolume root)`, `inode N at PATH: `.

/// ` at PATH` (` (the subvolume root)` for an empty path), or nothing.
pub(crate) fn at(path: &Option<String>) -> String {
    match path {
        Some(p) if !p.is_empty() => format!(" at {p}"),
        Some(_) => " (the subvolume root)".into(),
        None => String::new(),
    }
}

/// `inode N at PATH: ` when there is an inode, else nothing.
pub(crate) fn inode_at(ino: Option<u64>, path: &Option<String>) -> String {
    match ino {
        Some(i) => format!("inode {i}{}: ", at(path)),
        None => String::new(),
    }
}
