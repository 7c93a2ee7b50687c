//! `rsend --changes`: what changed between a parent snapshot and a
//! snapshot, as records (see [`crate::record`]).
//!
//! The differences come from the tree compare an incremental send uses
//! ([`btrfs_disk::diff`]): subtrees both snapshots share are skipped
//! unread, so the cost follows the change. Items arrive in key order,
//! grouped by inode; when an inode's items are done it is judged:
//!
//! - only in one snapshot (or its number reused with another generation):
//!   deleted at every old name, created at every new one;
//! - in both: its names (parent directory, that directory's generation,
//!   name) lost and gained are one rename when exactly one went and one
//!   came, else unlinks and links; its attributes (inode flags as `chattr`
//!   shows them among them) are compared, and its data only where an
//!   EXTENT_DATA item differs. Bytes are proven equal
//!   the cheap way first: the same extent at the same place, then equal
//!   data checksums when the filesystem's checksum is collision-resistant
//!   (sha256, blake2b), else by reading both. A dedupe, defrag, reflink of
//!   equal data or recompression is therefore not a data change.
//!
//! Inodes without links (orphans kept by a read-only snapshot) are not files.

use std::num::NonZeroUsize;

use lru::LruCache;

use crate::bookmark::{Parent, Reuse};
use crate::record::{self, Change, FileType, Record, What, WhatSet};
use crate::snapshot_error::{Fault, SnapshotError};
use btrfs_disk::csum::CsumType;
use btrfs_disk::data::Inode;
use btrfs_disk::diff::{compare_trees, Change as ItemChange, Side};
use btrfs_disk::error::Error;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{key_type, objectid, Compression, ExtentKind, FileExtentItem, InodeItem};
use btrfs_disk::lookup::Lookup;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::{Key, Tree};
use btrfs_stream::fileattr;

pub(crate) type Result<T> = std::result::Result<T, Fault>;

/// Directory paths kept per snapshot.
const DIR_PATHS: usize = 65536;
/// Bytes compared per read when data must be read.
const READ_CHUNK: usize = 1 << 20;
/// Sectors whose checksums are fetched per csum-tree search.
const CSUM_CHUNK: u64 = 64 << 20;
/// Deeper than any path can be (PATH_MAX / 2): a loop in a corrupt tree.
const MAX_DEPTH: usize = 4096;

/// Lists what changed from `parent` to `sv`, sorted by path; without a
/// parent every inode of `sv` is created. Against a bookmark the parent's
/// file data is gone: a range whose extent was rewritten counts as
/// changed data unless it is still the same extent.
pub fn list_changes(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<Parent<'_>>,
) -> std::result::Result<Vec<Record>, SnapshotError> {
    let mut l = Lister {
        fs,
        new: Snap::new(sv, fs.fs_tree(sv)),
        old: parent.map(|p| Snap::new(p.subvolume(), p.tree(fs))),
        reuse: parent.and_then(|p| p.reuse(fs)),
        records: Vec::new(),
        cur: Touched::default(),
    };
    l.run().map_err(|fault| l.error(fault))?;
    let mut records = l.records;
    record::sort(&mut records);
    Ok(records)
}

/// One snapshot's lookups.
struct Snap<'a, 'fs> {
    sv: &'a Subvolume,
    look: Lookup<'fs>,
    /// Paths of directories (the root is `""`).
    dirs: LruCache<u64, Vec<u8>>,
}

/// A name of an inode: parent directory, its generation, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Name {
    dir: u64,
    dir_gen: u64,
    name: Vec<u8>,
}

impl<'a, 'fs> Snap<'a, 'fs> {
    fn new(sv: &'a Subvolume, tree: Tree<'fs>) -> Snap<'a, 'fs> {
        Snap {
            sv,
            look: Lookup::new(tree),
            dirs: LruCache::new(NonZeroUsize::new(DIR_PATHS).unwrap_or(NonZeroUsize::MIN)),
        }
    }

    fn tree(&self) -> Tree<'fs> {
        self.look.tree
    }

    /// The inode item of `ino`, if there is one.
    fn inode(&self, ino: u64) -> Result<Option<Inode>> {
        let tree = self.tree();
        let key = Key::new(ino, key_type::INODE_ITEM, 0);
        match tree.search(&key)? {
            None => Ok(None),
            Some(item) => Ok(Some(parse_inode(tree.id, &item)?)),
        }
    }

    /// The path of directory `dir` (`""` for the root).
    fn dir_path(&mut self, dir: u64) -> Result<Vec<u8>> {
        let mut parts: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut at = dir;
        let mut base = loop {
            if at == objectid::FIRST_FREE {
                break Vec::new();
            }
            if let Some(p) = self.dirs.get(&at) {
                break p.clone();
            }
            if parts.len() > MAX_DEPTH {
                return Err(Fault::Bad(format!(
                    "directory inode {dir} is more than {MAX_DEPTH} levels deep (a loop of references?)"
                )));
            }
            let r = self.look.need_first_ref(at)?;
            parts.push((at, r.name.to_vec()));
            at = r.dir;
        };
        for (ino, name) in parts.into_iter().rev() {
            base = record::join(&base, &name);
            self.dirs.put(ino, base.clone());
        }
        Ok(base)
    }

    /// Every name of `ino`, sorted.
    fn names(&mut self, ino: u64) -> Result<Vec<Name>> {
        let mut out = Vec::new();
        for item in self.look.all_refs(ino)? {
            for (dir, name) in item {
                let dir_gen = self.look.gen(dir)?;
                out.push(Name {
                    dir,
                    dir_gen,
                    name: name.to_vec(),
                });
            }
        }
        out.sort();
        Ok(out)
    }

    fn path(&mut self, n: &Name) -> Result<Vec<u8>> {
        Ok(record::join(&self.dir_path(n.dir)?, &n.name))
    }

    /// Every path of `ino` (the root's is empty).
    fn paths(&mut self, ino: u64) -> Result<Vec<Vec<u8>>> {
        if ino == objectid::FIRST_FREE {
            return Ok(vec![Vec::new()]);
        }
        let names = self.names(ino)?;
        if names.is_empty() {
            return Err(Fault::Bad(format!(
                "inode {ino} has links but no INODE_REF or INODE_EXTREF"
            )));
        }
        names.iter().map(|n| self.path(n)).collect()
    }
}

fn parse_inode(tree: u64, item: &btrfs_disk::tree::Item) -> Result<Inode> {
    let ii = InodeItem::parse(item.data()).map_err(Error::bad_item(tree, item.key))?;
    Ok(Inode::from_item(item.key.objectid, &ii))
}

fn file_type(i: &Inode) -> Result<FileType> {
    FileType::from_mode(i.mode).ok_or_else(|| {
        Fault::Bad(format!(
            "inode {} has unknown file type {:o}",
            i.ino,
            i.mode & 0o170000
        ))
    })
}

/// What the compare reported of the inode being gathered.
#[derive(Default)]
struct Touched {
    ino: u64,
    /// Its INODE_ITEM in (the snapshot, the parent), when that differed.
    items: Option<(Option<Inode>, Option<Inode>)>,
    /// An XATTR_ITEM differed.
    xattrs: bool,
    /// File ranges of EXTENT_DATA items that differ, on either side.
    extents: Vec<(u64, u64)>,
}

struct Lister<'a, 'fs> {
    fs: &'fs Filesystem,
    new: Snap<'a, 'fs>,
    old: Option<Snap<'a, 'fs>>,
    /// With a bookmark as the parent: what may have been reused since.
    reuse: Option<Reuse<'fs>>,
    records: Vec<Record>,
    cur: Touched,
}

/// Whether `ino` can be a file (not the free-space cache, orphan items, ...).
fn is_file_ino(ino: u64) -> bool {
    (objectid::FIRST_FREE..objectid::LAST_FREE).contains(&ino)
}

/// The file range an EXTENT_DATA item covers.
fn extent_range(tree: u64, item: &btrfs_disk::tree::Item) -> Result<(u64, u64)> {
    let fe = FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree, item.key))?;
    let len = if fe.kind() == ExtentKind::Inline {
        fe.ram_bytes()
    } else {
        fe.num_bytes()
    };
    let s = item.key.offset;
    Ok((s, s.saturating_add(len)))
}

impl<'fs> Lister<'_, 'fs> {
    fn run(&mut self) -> Result<()> {
        let first = Key::new(objectid::FIRST_FREE, key_type::INODE_ITEM, 0);
        let new_tree = self.new.tree();
        let Some(old_tree) = self.old.as_ref().map(Snap::tree) else {
            let mut c = new_tree.cursor();
            let mut next = c.seek_ge(&first)?;
            while let Some(item) = next {
                let ino = item.key.objectid;
                if item.key.item_type == key_type::INODE_ITEM && is_file_ino(ino) {
                    let i = parse_inode(new_tree.id, &item)?;
                    self.cur.ino = ino;
                    if i.nlink > 0 {
                        self.born(&i)?;
                    }
                }
                next = c.next_item()?;
            }
            self.cur.ino = 0;
            return Ok(());
        };
        compare_trees(new_tree, old_tree, |key, change, l, r| {
            self.item(key, change, l, r)
        })?;
        self.finish()
    }

    /// Whether an item equal in both trees (`l` of the new one) is the
    /// same: against a bookmark, a file extent item must name the same extent.
    fn same(&self, key: Key, l: &Option<Side<'_>>) -> Result<bool> {
        match (self.reuse, l) {
            (Some(reuse), Some(s)) if key.item_type == key_type::EXTENT_DATA => {
                Ok(reuse.same_extent(s.item)?)
            }
            _ => Ok(true),
        }
    }

    fn item(
        &mut self,
        key: Key,
        change: ItemChange,
        l: Option<Side<'_>>,
        r: Option<Side<'_>>,
    ) -> Result<()> {
        if !is_file_ino(key.objectid) || (change == ItemChange::Same && self.same(key, &l)?) {
            return Ok(());
        }
        if key.objectid != self.cur.ino {
            self.finish()?;
            self.cur.ino = key.objectid;
        }
        let new_id = self.new.tree().id;
        let old_id = self.old.as_ref().map_or(0, |o| o.tree().id);
        match key.item_type {
            key_type::INODE_ITEM => {
                let n = l.map(|s| parse_inode(new_id, s.item)).transpose()?;
                let o = r.map(|s| parse_inode(old_id, s.item)).transpose()?;
                self.cur.items = Some((n, o));
            }
            key_type::XATTR_ITEM => self.cur.xattrs = true,
            key_type::EXTENT_DATA => {
                if let Some(s) = l {
                    self.cur.extents.push(extent_range(new_id, s.item)?);
                }
                if let Some(s) = r {
                    self.cur.extents.push(extent_range(old_id, s.item)?);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Judges the inode whose items are all in.
    fn finish(&mut self) -> Result<()> {
        let t = std::mem::take(&mut self.cur);
        if t.ino == 0 {
            return Ok(());
        }
        self.cur.ino = t.ino;
        let (new, old) = match t.items {
            Some(pair) => pair,
            None => (
                self.new.inode(t.ino)?,
                match &self.old {
                    Some(o) => o.inode(t.ino)?,
                    None => None,
                },
            ),
        };
        let new = new.filter(|i| i.nlink > 0);
        let old = old.filter(|i| i.nlink > 0);
        match (old, new) {
            (Some(o), Some(n))
                if o.generation == n.generation && o.file_type() == n.file_type() =>
            {
                self.changed(&o, &n, &t)?;
            }
            (o, n) => {
                if let Some(o) = o {
                    self.gone(&o)?;
                }
                if let Some(n) = n {
                    self.born(&n)?;
                }
            }
        }
        self.cur.ino = 0;
        Ok(())
    }

    fn born(&mut self, n: &Inode) -> Result<()> {
        let ft = file_type(n)?;
        for path in self.new.paths(n.ino)? {
            self.records.push(Record::new(Change::Created, path, ft));
        }
        Ok(())
    }

    fn gone(&mut self, o: &Inode) -> Result<()> {
        let ft = file_type(o)?;
        let Some(old) = self.old.as_mut() else {
            return Ok(());
        };
        for path in old.paths(o.ino)? {
            self.records.push(Record::new(Change::Deleted, path, ft));
        }
        Ok(())
    }

    fn changed(&mut self, o: &Inode, n: &Inode, t: &Touched) -> Result<()> {
        let ino = n.ino;
        let ft = file_type(n)?;
        let Some(old) = self.old.as_mut() else {
            return Ok(());
        };
        if ino != objectid::FIRST_FREE {
            let was = old.names(ino)?;
            let is = self.new.names(ino)?;
            let lost: Vec<&Name> = was.iter().filter(|x| !is.contains(x)).collect();
            let gained: Vec<&Name> = is.iter().filter(|x| !was.contains(x)).collect();
            if let ([from], [to]) = (&lost[..], &gained[..]) {
                let mut r = Record::new(Change::Renamed, self.new.path(to)?, ft);
                r.from = Some(old.path(from)?);
                self.records.push(r);
            } else {
                for x in lost {
                    let p = old.path(x)?;
                    self.records.push(Record::new(Change::Unlinked, p, ft));
                }
                for x in gained {
                    let p = self.new.path(x)?;
                    self.records.push(Record::new(Change::Linked, p, ft));
                }
            }
        }
        let what = self.what(o, n, t)?;
        if !what.is_empty() {
            for path in self.new.paths(ino)? {
                let mut r = Record::new(Change::Modified, path, ft);
                r.what = what;
                self.records.push(r);
            }
        }
        Ok(())
    }

    /// The attributes of an inode in both snapshots that differ.
    fn what(&mut self, o: &Inode, n: &Inode, t: &Touched) -> Result<WhatSet> {
        let mut w = WhatSet::default();
        let ft = file_type(n)?;
        if ft == FileType::File {
            w.add_if(
                o.size != n.size || !self.same_data(o, n, &t.extents)?,
                What::Data,
            );
        }
        w.add_if(
            ft != FileType::Symlink && o.mode & 0o7777 != n.mode & 0o7777,
            What::Mode,
        );
        w.add_if(o.uid != n.uid || o.gid != n.gid, What::Owner);
        if t.xattrs {
            let (Some(old), new) = (self.old.as_ref(), &self.new) else {
                return Ok(w);
            };
            let mut a = self.fs.xattrs(old.sv, o.ino)?;
            let mut b = self.fs.xattrs(new.sv, n.ino)?;
            a.sort();
            b.sort();
            w.add_if(a != b, What::Xattrs);
        }
        // Only files and directories can have inode flags set (chattr
        // refuses the rest); the bits compared are those chattr shows.
        w.add_if(
            matches!(ft, FileType::File | FileType::Dir)
                && fileattr::fs_flags(o.flags) != fileattr::fs_flags(n.flags),
            What::Flags,
        );
        w.add_if(
            (o.mtime.sec, o.mtime.nsec) != (n.mtime.sec, n.mtime.nsec),
            What::Mtime,
        );
        if ft == FileType::Symlink && (o.size != n.size || !t.extents.is_empty()) {
            if let Some(old) = self.old.as_ref() {
                let a = self.fs.read_link(old.sv, o.ino)?;
                let b = self.fs.read_link(self.new.sv, n.ino)?;
                w.add_if(a != b, What::Target);
            }
        }
        w.add_if(
            matches!(ft, FileType::CharDev | FileType::BlockDev) && o.rdev != n.rdev,
            What::Rdev,
        );
        Ok(w)
    }

    /// Whether the bytes of a file of equal size are the same in both
    /// snapshots, given the ranges whose extent items differ.
    fn same_data(&mut self, o: &Inode, n: &Inode, ranges: &[(u64, u64)]) -> Result<bool> {
        let Some(old) = self.old.as_ref() else {
            return Ok(false);
        };
        let mut rs: Vec<(u64, u64)> = ranges
            .iter()
            .map(|&(s, e)| (s, e.min(n.size)))
            .filter(|(s, e)| s < e)
            .collect();
        rs.sort_unstable();
        let cmp = DataCompare {
            fs: self.fs,
            reuse: self.reuse,
            old: (old.tree(), *o),
            new: (self.new.tree(), *n),
        };
        let mut done = 0u64;
        for (s, e) in rs {
            let s = s.max(done);
            if s >= e {
                continue;
            }
            if !cmp.same_range(s, e)? {
                return Ok(false);
            }
            done = e;
        }
        Ok(true)
    }

    /// The error for `fault`, naming the inode being judged.
    fn error(&mut self, fault: Fault) -> SnapshotError {
        let ino = self.cur.ino;
        let path = if ino == 0 {
            None
        } else {
            self.new
                .paths(ino)
                .ok()
                .and_then(|p| p.into_iter().next())
                .map(|p| String::from_utf8_lossy(&p).into_owned())
        };
        SnapshotError::new(self.new.sv.label(), (ino != 0).then_some(ino), path, fault)
    }
}

/// Where a stretch of a file's bytes comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Src {
    /// A hole or preallocated space: zeros.
    Zero,
    /// An inline extent.
    Inline,
    /// A disk extent, `pos` bytes into its decoded data at the piece's start.
    Disk {
        bytenr: u64,
        disk_len: u64,
        compression: Compression,
        pos: u64,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) src: Src,
}

impl Piece {
    /// The decoded position in its extent of file offset `at`.
    pub(crate) fn pos_at(&self, at: u64) -> Option<(u64, u64, Compression, u64)> {
        match self.src {
            Src::Disk {
                bytenr,
                disk_len,
                compression,
                pos,
            } => Some((bytenr, disk_len, compression, pos + (at - self.start))),
            _ => None,
        }
    }
}

/// The pieces of file `ino` in `[lo, hi)`, holes included.
pub(crate) fn pieces(tree: &Tree<'_>, ino: u64, lo: u64, hi: u64) -> Result<Vec<Piece>> {
    let mut out = Vec::new();
    let mut pos = lo;
    let from = Key::new(ino, key_type::EXTENT_DATA, lo);
    let to = Key::new(ino, key_type::EXTENT_DATA, hi - 1);
    for item in tree.range_from_le(from, to) {
        let item = item?;
        if item.key.objectid != ino || item.key.item_type != key_type::EXTENT_DATA {
            continue;
        }
        let (s, e) = extent_range(tree.id, &item)?;
        let e = e.min(hi);
        if e <= pos {
            continue;
        }
        if s > pos {
            out.push(Piece {
                start: pos,
                end: s.min(hi),
                src: Src::Zero,
            });
            pos = s.min(hi);
        }
        if pos >= hi {
            break;
        }
        let fe = FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree.id, item.key))?;
        let src = match fe.kind() {
            ExtentKind::Inline => Src::Inline,
            ExtentKind::Prealloc => Src::Zero,
            ExtentKind::Regular if fe.disk_bytenr() == 0 => Src::Zero,
            ExtentKind::Regular => Src::Disk {
                bytenr: fe.disk_bytenr(),
                disk_len: fe.disk_num_bytes(),
                compression: fe.compression(),
                pos: fe.offset().saturating_add(pos - s),
            },
        };
        out.push(Piece {
            start: pos,
            end: e,
            src,
        });
        pos = e;
    }
    if pos < hi {
        out.push(Piece {
            start: pos,
            end: hi,
            src: Src::Zero,
        });
    }
    Ok(out)
}

/// Compares one file's bytes in the parent and the snapshot.
struct DataCompare<'fs> {
    fs: &'fs Filesystem,
    /// The parent is a bookmark: its disk extents can be neither read nor
    /// trusted unless still the same.
    reuse: Option<Reuse<'fs>>,
    old: (Tree<'fs>, Inode),
    new: (Tree<'fs>, Inode),
}

impl DataCompare<'_> {
    fn same_range(&self, lo: u64, hi: u64) -> Result<bool> {
        let a = pieces(&self.old.0, self.old.1.ino, lo, hi)?;
        let b = pieces(&self.new.0, self.new.1.ino, lo, hi)?;
        let (mut i, mut j, mut x) = (0, 0, lo);
        while x < hi {
            while a.get(i).is_some_and(|p| p.end <= x) {
                i += 1;
            }
            while b.get(j).is_some_and(|p| p.end <= x) {
                j += 1;
            }
            let (Some(pa), Some(pb)) = (a.get(i), b.get(j)) else {
                return Err(Fault::Bad(format!(
                    "file inode {} has no extent piece at offset {x}",
                    self.new.1.ino
                )));
            };
            let y = pa.end.min(pb.end).min(hi);
            if !self.same_piece(pa, pb, x, y)? {
                return Ok(false);
            }
            x = y;
        }
        Ok(true)
    }

    /// Whether `[x, y)` reads the same through piece `a` (parent) and `b`.
    fn same_piece(&self, a: &Piece, b: &Piece, x: u64, y: u64) -> Result<bool> {
        if a.src == Src::Zero && b.src == Src::Zero {
            return Ok(true);
        }
        if let (Some(reuse), Src::Disk { bytenr, .. }) = (self.reuse, a.src) {
            // Only the same extent, never freed since, reads the same.
            return Ok(a.pos_at(x) == b.pos_at(x) && reuse.extent_is_older(bytenr)?);
        }
        if let (Some(pa), Some(pb)) = (a.pos_at(x), b.pos_at(x)) {
            if pa == pb {
                return Ok(true);
            }
            if pa.2 == Compression::None
                && pb.2 == Compression::None
                && self.same_csums(pa.0 + pa.3, pb.0 + pb.3, y - x)?
            {
                return Ok(true);
            }
        }
        self.same_bytes(x, y)
    }

    /// Whether the data checksums of two uncompressed disk ranges prove
    /// them equal (only for a collision-resistant checksum).
    fn same_csums(&self, da: u64, db: u64, len: u64) -> Result<bool> {
        let strong = matches!(self.fs.csum_type(), CsumType::Sha256 | CsumType::Blake2b);
        let ss = self.fs.sectorsize() as u64;
        if !strong
            || self.old.1.nodatasum()
            || self.new.1.nodatasum()
            || !da.is_multiple_of(ss)
            || !db.is_multiple_of(ss)
        {
            return Ok(false);
        }
        let len = len.div_ceil(ss) * ss;
        let mut off = 0;
        while off < len {
            let n = (len - off).min(CSUM_CHUNK);
            let (sa, ha) = self.fs.data_csums(da + off, n)?;
            let (sb, hb) = self.fs.data_csums(db + off, n)?;
            if !(ha.iter().all(|h| *h) && hb.iter().all(|h| *h) && sa == sb) {
                return Ok(false);
            }
            off += n;
        }
        Ok(true)
    }

    fn same_bytes(&self, x: u64, y: u64) -> Result<bool> {
        let chunk = READ_CHUNK.min(usize::try_from(y - x).unwrap_or(READ_CHUNK));
        let mut ba = vec![0u8; chunk];
        let mut bb = vec![0u8; chunk];
        let mut off = x;
        while off < y {
            let n = (y - off).min(chunk as u64) as usize;
            let ra = self
                .fs
                .read_file_in(&self.old.0, &self.old.1, off, &mut ba[..n])?;
            let rb = self
                .fs
                .read_file_in(&self.new.0, &self.new.1, off, &mut bb[..n])?;
            if ra != rb || ba[..ra] != bb[..rb] {
                return Ok(false);
            }
            if ra == 0 {
                break;
            }
            off += ra as u64;
        }
        Ok(true)
    }
}
