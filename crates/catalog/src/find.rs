//! Walking nights: every path of a snapshot, and the paths of every night
//! that match a glob.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use globset::{GlobBuilder, GlobMatcher};

use crate::error::{Error, Result};
use crate::state::{Catalog, Inode, Snapshot};

/// A pattern for [`find`]: without '/' it matches a path's last name, with
/// '/' the whole path from the snapshot root (`*` does not cross '/', `**`
/// does).
pub struct Pattern {
    matcher: GlobMatcher,
    whole: bool,
}

impl Pattern {
    /// Parses `glob`.
    pub fn new(glob: &str) -> Result<Pattern> {
        let whole = glob.contains('/');
        let g = glob.trim_start_matches('/');
        let matcher = GlobBuilder::new(g)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::NotFound(format!("bad glob {glob:?}: {e}")))?
            .compile_matcher();
        Ok(Pattern { matcher, whole })
    }

    /// Whether `path` (from the snapshot root) matches.
    pub fn matches(&self, path: &[u8]) -> bool {
        let subject = if self.whole {
            path
        } else {
            path.rsplit(|&b| b == b'/').next().unwrap_or(path)
        };
        self.matcher.is_match(OsStr::from_bytes(subject))
    }
}

/// Calls `f` with every path below `dir` (inode `ino`) of `snap`, parents
/// before children, by name; `prefix` is `dir`'s path.
pub fn walk(
    cat: &Catalog,
    snap: &Snapshot,
    ino: i64,
    prefix: &[u8],
    f: &mut dyn FnMut(&[u8], &Inode) -> Result<()>,
) -> Result<()> {
    let mut stack: Vec<(Vec<u8>, i64)> = vec![(prefix.to_vec(), ino)];
    while let Some((path, dir)) = stack.pop() {
        let mut subdirs = Vec::new();
        for (name, child) in cat.list(snap.id, dir)? {
            let mut p = path.clone();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(&name);
            let inode = cat.inode(snap.id, child)?.ok_or_else(|| {
                Error::NotFound(format!("the catalog has no inode {child} (damaged)"))
            })?;
            f(&p, &inode)?;
            if inode.is_dir() {
                subdirs.push((p, child));
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// What [`find`] calls with each match.
pub type Found<'f> = dyn FnMut(&Snapshot, &[u8], &Inode) -> Result<()> + 'f;

/// Calls `f` with each (night, path, inode) whose path matches `pattern`,
/// night by night, oldest first.
pub fn find(cat: &Catalog, pattern: &Pattern, f: &mut Found<'_>) -> Result<()> {
    for snap in cat.snapshots()? {
        walk(cat, &snap, snap.root, b"", &mut |p, i| {
            if pattern.matches(p) {
                f(&snap, p, i)
            } else {
                Ok(())
            }
        })?;
    }
    Ok(())
}
