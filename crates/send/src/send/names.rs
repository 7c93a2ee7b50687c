//! Where inodes are on the receiver, remembered: send.c's name cache
//! (name_cache_entry: one path component of an inode, with
//! need_later_update), its orphan names (gen_unique_name), and rsend's own
//! cache of whole paths (get_cur_path's result), valid until a directory
//! may have moved.

use std::collections::HashSet;
use std::num::NonZeroUsize;

use lru::LruCache;

use super::cmd::{Bytes, Cmd};
use super::stop::Result;

/// Names kept in the name cache (the kernel keeps 256; more only saves lookups).
const NAME_CACHE: usize = 16384;
/// Whole paths kept (mostly directories, asked for every entry they get).
const PATH_CACHE: usize = 4096;

/// A name cache entry: one path component of an inode.
#[derive(Clone, Debug)]
pub(super) struct NameEntry {
    pub(super) parent: u64,
    pub(super) parent_gen: u64,
    pub(super) name: Bytes,
    /// The name is an orphan name (the path stops here).
    pub(super) orphan: bool,
    /// Computed before the inode was processed: invalid once it is.
    pub(super) need_later_update: bool,
}

/// The caches of names and paths, and the orphan names given out.
pub(super) struct Names {
    names: LruCache<(u64, u64), NameEntry>,
    /// Whole paths of inodes other than the current one, valid while
    /// `version` stays what it was when they were made.
    paths: LruCache<(u64, u64), (u64, Bytes)>,
    /// Advances whenever a directory may have moved (a rename of anything
    /// but the current file, an rmdir, a move put off or done).
    version: u64,
    /// The next RENAME moves the current file only: no other path changes.
    file_rename: bool,
    unique: LruCache<(u64, u64), Bytes>,
    /// In a full send, the orphan-shaped names of the root (seen while
    /// walking its entries); an incremental send looks names up instead.
    root_orphans: Option<HashSet<Vec<u8>>>,
}

fn cap(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

impl Names {
    /// Empty caches for a full (`full`) or incremental send.
    pub(super) fn new(full: bool) -> Names {
        Names {
            names: LruCache::new(cap(NAME_CACHE)),
            paths: LruCache::new(cap(PATH_CACHE)),
            version: 0,
            file_rename: false,
            unique: LruCache::new(cap(NAME_CACHE)),
            root_orphans: full.then(HashSet::new),
        }
    }

    /// The cached name of (`ino`, `gen`), unless it was computed before
    /// the inode was processed and it is now (`ino < send_progress`): then
    /// it is dropped.
    pub(super) fn name(&mut self, ino: u64, gen: u64, send_progress: u64) -> Option<NameEntry> {
        let e = self.names.get(&(ino, gen))?;
        if !(ino < send_progress && e.need_later_update) {
            return Some(e.clone());
        }
        self.forget_name(ino, gen);
        None
    }

    /// Caches the name of (`ino`, `gen`).
    pub(super) fn put_name(&mut self, ino: u64, gen: u64, e: NameEntry) {
        self.names.put((ino, gen), e);
    }

    /// Drops the cached name of (`ino`, `gen`), which moved.
    pub(super) fn forget_name(&mut self, ino: u64, gen: u64) {
        self.names.pop(&(ino, gen));
        self.moved();
    }

    /// The cached whole path of (`ino`, `gen`), if no directory moved since.
    pub(super) fn path(&mut self, ino: u64, gen: u64) -> Option<Bytes> {
        match self.paths.get(&(ino, gen)) {
            Some((v, p)) if *v == self.version => Some(p.clone()),
            _ => None,
        }
    }

    /// Caches the whole path of (`ino`, `gen`).
    pub(super) fn put_path(&mut self, ino: u64, gen: u64, path: Bytes) {
        self.paths.put((ino, gen), (self.version, path));
    }

    /// A directory may have moved: no cached whole path holds any more.
    pub(super) fn moved(&mut self) {
        self.version += 1;
    }

    /// Whether the next RENAME moves a file only (`file`: no other path
    /// changes with it).
    pub(super) fn renaming_file(&mut self, file: bool) {
        self.file_rename = file;
    }

    /// Takes note of a command about to be sent: a RENAME (but of a file
    /// alone) or an RMDIR may move paths.
    pub(super) fn sending(&mut self, c: &Cmd) {
        match c {
            Cmd::Rename { .. } if std::mem::take(&mut self.file_rename) => {}
            Cmd::Rename { .. } | Cmd::Rmdir { .. } => self.moved(),
            _ => {}
        }
    }

    /// Whether the root's entries are wanted ([`Names::root_entries`]): a
    /// full send keeps its orphan-shaped names.
    pub(super) fn wants_root_entries(&self) -> bool {
        self.root_orphans.is_some()
    }

    /// Takes note of names in the root directory, of which the orphan-shaped
    /// ones cannot be orphan names.
    pub(super) fn root_entries<'n>(&mut self, names: impl IntoIterator<Item = &'n [u8]>) {
        if let Some(set) = self.root_orphans.as_mut() {
            set.extend(
                names
                    .into_iter()
                    .filter(|n| looks_orphan(n))
                    .map(<[u8]>::to_vec),
            );
        }
    }

    /// gen_unique_name: `o<ino>-<gen>-<n>` with the smallest `n` no entry
    /// of either snapshot's root has (`taken` looks a name up).
    pub(super) fn orphan_name(
        &mut self,
        ino: u64,
        gen: u64,
        mut taken: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<Bytes> {
        if let Some(set) = &self.root_orphans {
            // A full send knows the root's orphan-shaped names: no lookups to save.
            let mut n = 0u64;
            loop {
                let name = format!("o{ino}-{gen}-{n}").into_bytes();
                if !set.contains(&name) {
                    return Ok(Bytes::from(name));
                }
                n += 1;
            }
        }
        if let Some(n) = self.unique.get(&(ino, gen)) {
            return Ok(n.clone());
        }
        let mut n = 0u64;
        let name = loop {
            let name = format!("o{ino}-{gen}-{n}").into_bytes();
            if !taken(&name)? {
                break Bytes::from(name);
            }
            n += 1;
        };
        self.unique.put((ino, gen), name.clone());
        Ok(name)
    }
}

/// Whether `name` has the shape of an orphan name (`o<digits>-<digits>-<digits>`).
fn looks_orphan(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b"o") else {
        return false;
    };
    let mut parts = 0;
    for p in rest.split(|&b| b == b'-') {
        if p.is_empty() || !p.iter().all(u8::is_ascii_digit) {
            return false;
        }
        parts += 1;
    }
    parts == 3
}
