//! Files: inodes, directory entries, xattrs, file extents, and reading file
//! data with checksum verification and mirror fallback.

use std::sync::Arc;

use crate::csum::CsumType;
use crate::error::{DataError, Error, Result};
use crate::fs::{CsumRun, Filesystem, NoticeKind};
use crate::items::{
    dir_entries, inode_extrefs, inode_flags, inode_refs, key_type, objectid, Compression,
    ExtentKind, FileExtentItem, InodeItem, InodeRef, ItemError, Timespec,
};
use crate::key::Key;
use crate::rescue::{DataFate, DataLoss};
use crate::subvol::Subvolume;
use crate::tree::Tree;

/// An inode's attributes (decoded INODE_ITEM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inode {
    /// Inode number.
    pub ino: u64,
    /// Generation that created it.
    pub generation: u64,
    /// Transid of the last change.
    pub transid: u64,
    /// Size in bytes.
    pub size: u64,
    /// Allocated bytes.
    pub nbytes: u64,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Type and permission bits.
    pub mode: u32,
    /// Device number (kernel-internal major<<20 | minor).
    pub rdev: u64,
    /// Inode flags (low word) and ro flags (high word).
    pub flags: u64,
    /// Change sequence.
    pub sequence: u64,
    /// Access time.
    pub atime: Timespec,
    /// Change time.
    pub ctime: Timespec,
    /// Modification time.
    pub mtime: Timespec,
    /// Birth time.
    pub otime: Timespec,
}

impl Inode {
    /// Decodes an INODE_ITEM view.
    pub fn from_item(ino: u64, i: &InodeItem<'_>) -> Inode {
        Inode {
            ino,
            generation: i.generation(),
            transid: i.transid(),
            size: i.size(),
            nbytes: i.nbytes(),
            nlink: i.nlink(),
            uid: i.uid(),
            gid: i.gid(),
            mode: i.mode(),
            rdev: i.rdev(),
            flags: i.flags(),
            sequence: i.sequence(),
            atime: i.atime(),
            ctime: i.ctime(),
            mtime: i.mtime(),
            otime: i.otime(),
        }
    }
    /// The file type bits of the mode.
    pub fn file_type(&self) -> u32 {
        self.mode & 0o170000
    }
    /// Whether data checksums are off (NODATASUM).
    pub fn nodatasum(&self) -> bool {
        self.flags & inode_flags::NODATASUM != 0
    }
    /// rdev as (major, minor).
    pub fn rdev_major_minor(&self) -> (u32, u32) {
        ((self.rdev >> 20) as u32, (self.rdev & 0xfffff) as u32)
    }
}

/// A directory entry (from DIR_INDEX), owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryInfo {
    /// Its DIR_INDEX.
    pub index: u64,
    /// Name.
    pub name: Vec<u8>,
    /// Target: `(ino, INODE_ITEM, 0)` or `(subvol, ROOT_ITEM, u64::MAX)` for a nested subvolume.
    pub location: Key,
    /// Entry type ([`crate::items::file_type`]).
    pub file_type: u8,
}

/// One EXTENT_DATA item of a file, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileExtent {
    /// File offset where it starts.
    pub file_offset: u64,
    /// Generation that wrote it.
    pub generation: u64,
    /// Decoded size of the whole extent.
    pub ram_bytes: u64,
    /// Compression.
    pub compression: Compression,
    /// Inline, regular or prealloc.
    pub kind: ExtentKind,
    /// Logical start of the disk extent (0 = hole; unused for inline).
    pub disk_bytenr: u64,
    /// Size of the disk extent.
    pub disk_num_bytes: u64,
    /// Offset into the decoded extent.
    pub offset: u64,
    /// File bytes covered (for inline: ram_bytes).
    pub num_bytes: u64,
    /// Raw inline payload (possibly compressed).
    pub inline: Vec<u8>,
}

impl FileExtent {
    /// Decodes an EXTENT_DATA view at `file_offset`.
    pub fn from_item(file_offset: u64, fe: &FileExtentItem<'_>) -> FileExtent {
        let inline = fe.kind() == ExtentKind::Inline;
        FileExtent {
            file_offset,
            generation: fe.generation(),
            ram_bytes: fe.ram_bytes(),
            compression: fe.compression(),
            kind: fe.kind(),
            disk_bytenr: if inline { 0 } else { fe.disk_bytenr() },
            disk_num_bytes: if inline { 0 } else { fe.disk_num_bytes() },
            offset: if inline { 0 } else { fe.offset() },
            num_bytes: if inline {
                fe.ram_bytes()
            } else {
                fe.num_bytes()
            },
            inline: fe.inline_data().to_vec(),
        }
    }
    /// Whether it reads as zeros without touching the disk (hole or prealloc).
    pub fn is_zero(&self) -> bool {
        self.kind == ExtentKind::Prealloc
            || (self.kind == ExtentKind::Regular && self.disk_bytenr == 0)
    }
    /// File offset just past it.
    pub fn end(&self) -> u64 {
        self.file_offset.saturating_add(self.num_bytes)
    }
}

#[derive(Clone, Copy)]
struct FileCtx<'a, 'fs> {
    fs: &'fs Filesystem,
    tree: &'a Tree<'fs>,
    ino: u64,
    nodatasum: bool,
    /// Reading for a rescue: data no copy gives is recorded and read as
    /// zeros instead of failing the read.
    salvage: bool,
    /// For a compressed extent: the file range it backs (offset, length),
    /// which is lost or unverified as a whole.
    whole: Option<(u64, u64)>,
}

impl FileCtx<'_, '_> {
    fn bad(&self, offset: u64, reason: DataError) -> Error {
        Error::BadData {
            subvol: self.tree.id,
            ino: self.ino,
            offset,
            reason,
        }
    }
}

impl Filesystem {
    /// The inode `ino` of subvolume `sv`.
    pub fn inode(&self, sv: &Subvolume, ino: u64) -> Result<Inode> {
        self.inode_in(&self.fs_tree(sv), ino)
    }

    /// The inode `ino` of the fs tree `tree`.
    pub fn inode_in(&self, tree: &Tree<'_>, ino: u64) -> Result<Inode> {
        inode_of(tree, ino)
    }

    /// The entries of directory `dir`, in DIR_INDEX order.
    pub fn read_dir(&self, sv: &Subvolume, dir: u64) -> Result<Vec<DirEntryInfo>> {
        dir_entries_of(&self.fs_tree(sv), dir)
    }

    /// Looks `name` up in directory `dir` through its DIR_ITEM (name hash).
    pub fn lookup_name(
        &self,
        sv: &Subvolume,
        dir: u64,
        name: &[u8],
    ) -> Result<Option<DirEntryInfo>> {
        let tree = self.fs_tree(sv);
        let key = Key::new(dir, key_type::DIR_ITEM, crate::csum::name_hash(name));
        let Some(item) = tree.search(&key)? else {
            return Ok(None);
        };
        let entries = dir_entries(item.data()).map_err(|reason| Error::BadItem {
            tree: tree.id,
            key,
            reason,
        })?;
        Ok(entries
            .into_iter()
            .find(|e| e.name == name)
            .map(|e| DirEntryInfo {
                index: 0,
                name: e.name.to_vec(),
                location: e.location,
                file_type: e.file_type,
            }))
    }

    /// The inode at `path` (relative to the subvolume root; `/` separated).
    pub fn lookup_path(&self, sv: &Subvolume, path: &str) -> Result<u64> {
        let mut ino = objectid::FIRST_FREE;
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            let e = self
                .lookup_name(sv, ino, comp.as_bytes())?
                .filter(|e| e.location.item_type == key_type::INODE_ITEM)
                .ok_or_else(|| Error::NoPath {
                    subvol: sv.id,
                    path: path.to_string(),
                })?;
            ino = e.location.objectid;
        }
        Ok(ino)
    }

    /// The names of inode `ino`: (parent dir, index, name) from INODE_REF and INODE_EXTREF.
    pub fn inode_names(&self, sv: &Subvolume, ino: u64) -> Result<Vec<(u64, u64, Vec<u8>)>> {
        let tree = self.fs_tree(sv);
        let mut out = Vec::new();
        let from = Key::new(ino, key_type::INODE_REF, 0);
        let to = Key::new(ino, key_type::INODE_EXTREF, u64::MAX);
        for item in tree.range(from, to) {
            let item = item?;
            let bad = |reason| Error::BadItem {
                tree: tree.id,
                key: item.key,
                reason,
            };
            let refs: Vec<InodeRef<'_>> = if item.key.item_type == key_type::INODE_REF {
                inode_refs(item.key.offset, item.data()).map_err(bad)?
            } else {
                inode_extrefs(item.data()).map_err(bad)?
            };
            out.extend(
                refs.into_iter()
                    .map(|r| (r.parent, r.index, r.name.to_vec())),
            );
        }
        Ok(out)
    }

    /// The xattrs of inode `ino`: (name, value), in key (name hash) order.
    pub fn xattrs(&self, sv: &Subvolume, ino: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        xattrs_of(&self.fs_tree(sv), ino)
    }

    /// The target of symlink `ino`.
    pub fn read_link(&self, sv: &Subvolume, ino: u64) -> Result<Vec<u8>> {
        let inode = self.inode(sv, ino)?;
        let len = usize::try_from(inode.size.min(1 << 20)).unwrap_or(0);
        let mut buf = vec![0u8; len];
        let n = self.read_file(sv, ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// The EXTENT_DATA items of `ino`, in file order.
    pub fn file_extents(&self, sv: &Subvolume, ino: u64) -> Result<Vec<FileExtent>> {
        let tree = self.fs_tree(sv);
        let mut out = Vec::new();
        let from = Key::new(ino, key_type::EXTENT_DATA, 0);
        let to = Key::new(ino, key_type::EXTENT_DATA, u64::MAX);
        for item in tree.range(from, to) {
            let item = item?;
            let fe =
                FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree.id, item.key))?;
            out.push(FileExtent::from_item(item.key.offset, &fe));
        }
        Ok(out)
    }

    /// Reads file `ino` of `sv` from `offset` into `buf`; returns bytes read
    /// (short only at end of file). Every sector is checked against the csum
    /// tree unless the inode is NODATASUM.
    pub fn read_file(
        &self,
        sv: &Subvolume,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let tree = self.fs_tree(sv);
        let inode = self.inode_in(&tree, ino)?;
        self.read_file_in(&tree, &inode, offset, buf)
    }

    /// [`Filesystem::read_file`] for an inode already looked up in `tree`.
    pub fn read_file_in(
        &self,
        tree: &Tree<'_>,
        inode: &Inode,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        if offset >= inode.size {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(inode.size - offset) as usize;
        let buf = &mut buf[..len];
        let end = offset + len as u64;
        let ctx = FileCtx {
            fs: self,
            tree,
            ino: inode.ino,
            nodatasum: inode.nodatasum(),
            salvage: self.rescue().is_some(),
            whole: None,
        };
        let mut pos = offset; // next file byte to fill
        let from = Key::new(inode.ino, key_type::EXTENT_DATA, offset);
        let to = Key::new(inode.ino, key_type::EXTENT_DATA, end - 1);
        for item in tree.range_from_le(from, to) {
            let item = item?;
            if item.key.objectid != inode.ino || item.key.item_type != key_type::EXTENT_DATA {
                continue;
            }
            let fe =
                FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree.id, item.key))?;
            let start = item.key.offset;
            let ext_len = if fe.kind() == ExtentKind::Inline {
                fe.ram_bytes()
            } else {
                fe.num_bytes()
            };
            let ext_end = start.saturating_add(ext_len);
            if ext_end <= pos {
                continue;
            }
            if start > pos {
                // A gap (NO_HOLES) reads as zeros.
                let z = start.min(end);
                buf[(pos - offset) as usize..(z - offset) as usize].fill(0);
                pos = z;
            }
            if pos >= end {
                break;
            }
            let stop = ext_end.min(end);
            let out = &mut buf[(pos - offset) as usize..(stop - offset) as usize];
            ctx.read_extent(&fe, start, pos - start, out, None)?;
            pos = stop;
        }
        if pos < end {
            buf[(pos - offset) as usize..].fill(0);
        }
        Ok(len)
    }

    /// Fills `out` with the file bytes from `file_offset + skip` on, read
    /// through the EXTENT_DATA item `fe` whose key offset is `file_offset`
    /// (verified and decompressed like [`Filesystem::read_file_in`]; bytes the
    /// extent does not cover, such as the rest of an inline extent's sector,
    /// read as zeros). Saves the tree search when the caller already holds
    /// the item, as a send walking the tree does.
    ///
    /// Returns the standard CRC-32C of each whole sector of `out` from its
    /// start (the `i`th of `out[i * sectorsize..][..sectorsize]`), matched
    /// against the bytes, when the filesystem sums data with crc32c and
    /// those sectors were read straight from an uncompressed extent through
    /// their checksums; else none. A sender's CRC over the same bytes can
    /// start from them (`btrfs_stream::crc::BlockCrc`).
    pub fn read_extent_piece(
        &self,
        tree: &Tree<'_>,
        inode: &Inode,
        file_offset: u64,
        fe: &FileExtentItem<'_>,
        skip: u64,
        out: &mut [u8],
    ) -> Result<Vec<u32>> {
        let ctx = FileCtx {
            fs: self,
            tree,
            ino: inode.ino,
            nodatasum: inode.nodatasum(),
            salvage: self.rescue().is_some(),
            whole: None,
        };
        let covered = if fe.kind() == ExtentKind::Inline {
            fe.ram_bytes()
        } else {
            fe.num_bytes()
        };
        let n = covered.saturating_sub(skip).min(out.len() as u64) as usize;
        let (data, rest) = out.split_at_mut(n);
        let mut sums = Vec::new();
        if !data.is_empty() {
            ctx.read_extent(fe, file_offset, skip, data, Some(&mut sums))?;
        }
        rest.fill(0);
        Ok(sums)
    }

    /// Checksums of the sectors in `[start, start+len)` from one csum-tree range search.
    ///
    /// Returns the csums back to back (csum_size each) and which sectors have one.
    pub fn data_csums(&self, start: u64, len: u64) -> Result<(Vec<u8>, Vec<bool>)> {
        self.with_retry(|| self.data_csums_once(start, len))
    }

    fn data_csums_once(&self, start: u64, len: u64) -> Result<(Vec<u8>, Vec<bool>)> {
        let ss = self.sectorsize() as u64;
        let cs = self.csum_type().size();
        let n = len.div_ceil(ss) as usize;
        let mut sums = vec![0u8; n * cs];
        let mut have = vec![false; n];
        let Some(tree) = self.csum_tree() else {
            return Ok((sums, have));
        };
        let end = start + n as u64 * ss;
        let from = Key::new(objectid::EXTENT_CSUM, key_type::EXTENT_CSUM, start);
        let to = Key::new(objectid::EXTENT_CSUM, key_type::EXTENT_CSUM, end - 1);
        for item in tree.range_from_le(from, to) {
            let item = item?;
            if item.key.objectid != objectid::EXTENT_CSUM
                || item.key.item_type != key_type::EXTENT_CSUM
            {
                continue;
            }
            let d = item.data();
            let item_start = item.key.offset;
            let count = (d.len() / cs) as u64;
            let item_end = item_start.saturating_add(count * ss);
            if item_end <= start || item_start >= end {
                continue;
            }
            let a = item_start.max(start);
            let b = item_end.min(end);
            let (si, di) = (
                ((a - item_start) / ss) as usize,
                ((a - start) / ss) as usize,
            );
            let k = ((b - a) / ss) as usize;
            sums[di * cs..(di + k) * cs].copy_from_slice(&d[si * cs..(si + k) * cs]);
            have[di..di + k].fill(true);
        }
        Ok((sums, have))
    }

    /// Checksums for reading `[logical, logical+len)` inside disk extent `extent`
    /// (start, length): the whole extent's, from one csum-tree range search
    /// that later reads of the same extent reuse. Returns the run and the
    /// sector index of `logical` in it.
    fn extent_csums(&self, extent: (u64, u64), logical: u64, len: u64) -> Result<(CsumRun, usize)> {
        /// BTRFS_MAX_EXTENT_SIZE: bounds the run's memory on corrupt input.
        const MAX_EXTENT: u64 = 128 << 20;
        let ss = self.sectorsize() as u64;
        let (es, el) = extent;
        let covers = logical >= es
            && es % ss == 0
            && el <= MAX_EXTENT
            && es
                .checked_add(el)
                .is_some_and(|e| logical.saturating_add(len) <= e);
        if !covers {
            let (sums, have) = self.data_csums(logical, len)?;
            let run = CsumRun {
                start: logical,
                len,
                sums: Arc::new(sums),
                have: Arc::new(have),
            };
            return Ok((run, 0));
        }
        let first = ((logical - es) / ss) as usize;
        if let Ok(c) = self.csum_run.lock() {
            if let Some(run) = c.as_ref().filter(|r| r.start == es && r.len == el) {
                return Ok((run.clone(), first));
            }
        }
        let (sums, have) = self.data_csums(es, el)?;
        let run = CsumRun {
            start: es,
            len: el,
            sums: Arc::new(sums),
            have: Arc::new(have),
        };
        if let Ok(mut c) = self.csum_run.lock() {
            *c = Some(run.clone());
        }
        Ok((run, first))
    }

    /// Reads `buf.len()` bytes of data at `logical` (sector aligned), verifying
    /// each sector against `sums` unless `nodatasum`, and repairing from
    /// other copies. `file_offset` and `tree`/`ino` only name errors.
    /// `crcs`, when given, gets the crc32c of each whole sector of `buf`
    /// when they are its checksums (all present, crc32c).
    fn read_verified(
        &self,
        ctx: &FileCtx<'_, '_>,
        extent: (u64, u64),
        logical: u64,
        file_offset: u64,
        buf: &mut [u8],
        crcs: Option<&mut Vec<u32>>,
    ) -> Result<()> {
        let copies = self.num_copies(logical);
        let mut used = 0;
        let mut last_err = None;
        for m in 1..=copies {
            match self.read_logical(logical, buf, m) {
                Ok(()) => {
                    used = m;
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        if used == 0 && ctx.salvage {
            buf.fill(0);
            self.lose(
                ctx,
                DataFate::Zeroed,
                file_offset,
                buf.len() as u64,
                logical,
            );
            return Ok(());
        }
        if used == 0 {
            return Err(ctx.bad(
                file_offset,
                DataError::Unreadable {
                    logical,
                    source: last_err.map(Box::new),
                },
            ));
        }
        if ctx.nodatasum {
            return Ok(());
        }
        let ss = self.sectorsize();
        let cs = self.csum_type().size();
        let ct = self.csum_type();
        let (run, first) = self.extent_csums(extent, logical, buf.len() as u64)?;
        let (Some(sums), Some(have)) = (run.sums.get(first * cs..), run.have.get(first..)) else {
            return Err(ctx.bad(file_offset, DataError::CsumRunShort));
        };
        if self.rescue().is_some() {
            self.lose_unsummed(ctx, have, buf.len(), logical, file_offset);
        }
        let mut zeroed = false;
        for i in bad_sectors(ct, buf, sums, have, ss) {
            let want = &sums[i * cs..(i + 1) * cs];
            let Some(sector) = buf.chunks_mut(ss).nth(i) else {
                continue;
            };
            let slogical = logical + (i * ss) as u64;
            let soff = file_offset + (i * ss) as u64;
            let mut fixed = false;
            let mut tmp = vec![0u8; ss];
            for m in (1..=copies).filter(|&m| m != used) {
                if self.read_logical(slogical, &mut tmp, m).is_ok() && ct.verify(&tmp, want) {
                    sector.copy_from_slice(&tmp[..sector.len()]);
                    self.say(
                        NoticeKind::Repair,
                        format!(
                            "subvolume {} inode {} file offset {soff}: data checksum mismatch at logical {slogical} on mirror {used}; used mirror {m}",
                            ctx.tree.id, ctx.ino
                        ),
                    );
                    fixed = true;
                    break;
                }
            }
            if !fixed && ctx.salvage {
                sector.fill(0);
                let n = sector.len() as u64;
                self.lose(ctx, DataFate::Zeroed, soff, n, slogical);
                zeroed = true;
                continue;
            }
            if !fixed {
                return Err(Error::DataCsum {
                    subvol: ctx.tree.id,
                    ino: ctx.ino,
                    offset: soff,
                    logical: slogical,
                });
            }
        }
        // Every sector that has a checksum matches it now.
        let whole = buf.len() / ss;
        if let Some(crcs) = crcs.filter(|_| ct == CsumType::Crc32c && !zeroed) {
            if have.get(..whole).is_some_and(|h| h.iter().all(|&h| h)) {
                crcs.extend(
                    sums.chunks_exact(4)
                        .take(whole)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
        }
        Ok(())
    }
}

impl Filesystem {
    /// Records `len` bytes of the file `ctx` reads, at `file_offset` and
    /// `logical`, as lost for a rescue.
    fn lose(
        &self,
        ctx: &FileCtx<'_, '_>,
        fate: DataFate,
        file_offset: u64,
        len: u64,
        logical: u64,
    ) {
        if let Some(l) = self.rescue() {
            let (offset, len, compressed) = match ctx.whole {
                Some((o, n)) => (o, n, true),
                None => (file_offset, len, false),
            };
            l.add_data(DataLoss {
                fate,
                tree: ctx.tree.id,
                ino: ctx.ino,
                offset,
                len,
                logical,
                compressed,
                mirrors: self.num_copies(logical),
            });
        }
    }

    /// Records the sectors of a `len`-byte read at `logical` that have no
    /// checksum (`have`) as read unverified.
    fn lose_unsummed(
        &self,
        ctx: &FileCtx<'_, '_>,
        have: &[bool],
        len: usize,
        logical: u64,
        file_offset: u64,
    ) {
        let ss = self.sectorsize();
        let n = len.div_ceil(ss).min(have.len());
        let mut i = 0;
        while i < n {
            if have[i] {
                i += 1;
                continue;
            }
            let j = (i..n).find(|&j| have[j]).unwrap_or(n);
            let at = (i * ss) as u64;
            let bytes = ((j * ss).min(len) - i * ss) as u64;
            self.lose(
                ctx,
                DataFate::Unverified,
                file_offset + at,
                bytes,
                logical + at,
            );
            i = j;
        }
    }
}

impl FileCtx<'_, '_> {
    /// Fills `out` with the bytes of extent `fe` (at file offset `start`)
    /// from `skip` on; `crcs` as [`Filesystem::read_extent_piece`] returns them.
    fn read_extent(
        &self,
        fe: &FileExtentItem<'_>,
        start: u64,
        skip: u64,
        out: &mut [u8],
        crcs: Option<&mut Vec<u32>>,
    ) -> Result<()> {
        let fs = self.fs;
        let file_pos = start + skip;
        match fe.kind() {
            ExtentKind::Prealloc => {
                out.fill(0);
                Ok(())
            }
            ExtentKind::Inline => {
                let raw = fe.inline_data();
                let ram = usize::try_from(fe.ram_bytes())
                    .unwrap_or(usize::MAX)
                    .min(1 << 20);
                let decoded;
                let data: &[u8] = if fe.compression() == Compression::None {
                    raw
                } else {
                    let mut v = vec![0u8; ram];
                    let n = decompress(fe, raw, &mut v, fs.sectorsize())
                        .map_err(|e| self.bad(start, DataError::Inline(Box::new(e))))?;
                    v[n..].fill(0);
                    decoded = v;
                    &decoded
                };
                copy_from(data, skip, out);
                Ok(())
            }
            ExtentKind::Regular if fe.disk_bytenr() == 0 => {
                out.fill(0);
                Ok(())
            }
            ExtentKind::Regular if fe.compression() == Compression::None => {
                let ss = fs.sectorsize() as u64;
                let logical = fe
                    .disk_bytenr()
                    .checked_add(fe.offset())
                    .and_then(|l| l.checked_add(skip))
                    .ok_or_else(|| self.bad(start, DataError::AddressOverflow))?;
                let extent = (fe.disk_bytenr(), fe.disk_num_bytes());
                let a0 = logical - logical % ss;
                let end = logical.checked_add(out.len() as u64);
                let a1 = end
                    .and_then(|e| e.checked_next_multiple_of(ss))
                    .ok_or_else(|| self.bad(start, DataError::AddressOverflow))?;
                if a0 == logical && Some(a1) == end {
                    fs.read_verified(self, extent, logical, file_pos, out, crcs)
                } else if a0 == logical {
                    // Whole sectors straight into `out`, the last part through a sector.
                    let ss = ss as usize;
                    let (head, tail) = out.split_at_mut(out.len() / ss * ss);
                    if !head.is_empty() {
                        fs.read_verified(self, extent, logical, file_pos, head, crcs)?;
                    }
                    let mut tmp = vec![0u8; ss];
                    let h = head.len() as u64;
                    fs.read_verified(self, extent, logical + h, file_pos + h, &mut tmp, None)?;
                    tail.copy_from_slice(&tmp[..tail.len()]);
                    Ok(())
                } else {
                    let mut tmp = vec![0u8; (a1 - a0) as usize];
                    // The file offset of the first sector read, for messages.
                    let at = file_pos.saturating_sub(logical - a0);
                    fs.read_verified(self, extent, a0, at, &mut tmp, None)?;
                    let h = (logical - a0) as usize;
                    out.copy_from_slice(&tmp[h..h + out.len()]);
                    Ok(())
                }
            }
            ExtentKind::Regular => {
                let decoded = self.decoded_extent(fe, start)?;
                copy_from(&decoded, fe.offset().saturating_add(skip), out);
                Ok(())
            }
        }
    }

    /// The whole decoded (decompressed) extent, verified; the last one is cached.
    fn decoded_extent(&self, fe: &FileExtentItem<'_>, start: u64) -> Result<Arc<Vec<u8>>> {
        let fs = self.fs;
        let bytenr = fe.disk_bytenr();
        if let Ok(c) = fs.decoded.lock() {
            if let Some((b, v)) = c.as_ref() {
                if *b == bytenr && v.len() as u64 == fe.ram_bytes() {
                    return Ok(v.clone());
                }
            }
        }
        const MAX: u64 = btrfs_compress::MAX_COMPRESSED as u64;
        if fe.disk_num_bytes() == 0 || fe.disk_num_bytes() > MAX || fe.ram_bytes() > MAX {
            return Err(self.bad(
                start,
                DataError::CompressedSize {
                    disk_bytes: fe.disk_num_bytes(),
                    ram_bytes: fe.ram_bytes(),
                },
            ));
        }
        let out = match self.decode(fe, start) {
            Ok(out) => out,
            Err(_) if self.salvage => {
                // Any bad sector loses the whole extent: all the file
                // range it backs reads as zeros.
                let whole = FileCtx {
                    whole: Some((start, fe.num_bytes())),
                    ..*self
                };
                fs.lose(&whole, DataFate::Zeroed, start, fe.num_bytes(), bytenr);
                return Ok(Arc::new(vec![0u8; fe.ram_bytes() as usize]));
            }
            Err(e) => return Err(e),
        };
        let out = Arc::new(out);
        if let Ok(mut c) = fs.decoded.lock() {
            *c = Some((bytenr, out.clone()));
        }
        Ok(out)
    }
}

impl FileCtx<'_, '_> {
    /// Reads and decompresses the compressed extent `fe` (at file offset
    /// `start`), whose size is checked.
    fn decode(&self, fe: &FileExtentItem<'_>, start: u64) -> Result<Vec<u8>> {
        let fs = self.fs;
        let bytenr = fe.disk_bytenr();
        let mut raw = vec![0u8; fe.disk_num_bytes() as usize];
        // Compressed extents are summed over their on-disk sectors; offsets
        // name the extent start. A bad one is lost whole, never in part.
        let extent = (bytenr, fe.disk_num_bytes());
        let strict = FileCtx {
            salvage: false,
            whole: Some((start, fe.num_bytes())),
            ..*self
        };
        fs.read_verified(
            &strict,
            extent,
            bytenr,
            start.saturating_sub(fe.offset()),
            &mut raw,
            None,
        )?;
        let mut out = vec![0u8; fe.ram_bytes() as usize];
        let n = decompress(fe, &raw, &mut out, fs.sectorsize()).map_err(|e| {
            self.bad(
                start,
                DataError::Decode {
                    logical: bytenr,
                    source: Box::new(e),
                },
            )
        })?;
        out[n..].fill(0);
        Ok(out)
    }
}

/// Decodes the data of extent `fe` (stored as `raw`) into `out`; returns the
/// bytes produced.
fn decompress(
    fe: &FileExtentItem<'_>,
    raw: &[u8],
    out: &mut [u8],
    sectorsize: usize,
) -> std::result::Result<usize, btrfs_compress::Error> {
    let sectorsize = u32::try_from(sectorsize).unwrap_or(u32::MAX);
    let algorithm = btrfs_compress::Algorithm::from_extent(fe.compression_raw(), sectorsize)?;
    btrfs_compress::decompress(algorithm, raw, out)
}

/// Indexes of the sectors of `buf` that have a checksum and do not match it.
///
/// The costly hashes (sha256, blake2b) of large reads are spread over the CPUs.
fn bad_sectors(ct: CsumType, buf: &[u8], sums: &[u8], have: &[bool], ss: usize) -> Vec<usize> {
    let cs = ct.size();
    let check = |first: usize, part: &[u8]| -> Vec<usize> {
        part.chunks(ss)
            .enumerate()
            .map(|(k, sector)| (first + k, sector))
            .filter(|&(i, sector)| {
                have.get(i).copied().unwrap_or(false)
                    && !(sector.len() == ss
                        && sums
                            .get(i * cs..(i + 1) * cs)
                            .is_some_and(|w| ct.verify(sector, w)))
            })
            .map(|(i, _)| i)
            .collect()
    };
    let cheap = matches!(ct, CsumType::Crc32c | CsumType::Xxhash64);
    if cheap || buf.len() < (512 << 10) {
        return check(0, buf);
    }
    let threads = worker_threads();
    if threads < 2 {
        return check(0, buf);
    }
    let per = buf.len().div_ceil(ss).div_ceil(threads) * ss;
    std::thread::scope(|scope| {
        let handles: Vec<_> = buf
            .chunks(per)
            .enumerate()
            .map(|(t, part)| scope.spawn(move || check(t * per / ss, part)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|_| (0..have.len()).collect()))
            .collect()
    })
}

/// Copies `data[skip..]` into `out`, zero-filling what `data` lacks.
fn copy_from(data: &[u8], skip: u64, out: &mut [u8]) {
    let s = usize::try_from(skip).unwrap_or(usize::MAX).min(data.len());
    let n = (data.len() - s).min(out.len());
    out[..n].copy_from_slice(&data[s..s + n]);
    out[n..].fill(0);
}

impl Filesystem {
    /// The fs-verity descriptor of `ino` (VERITY_DESC_ITEM bytes), if verity is enabled on it.
    pub fn verity_descriptor(&self, sv: &Subvolume, ino: u64) -> Result<Option<Vec<u8>>> {
        self.verity_descriptor_in(&self.fs_tree(sv), ino)
    }

    /// [`Filesystem::verity_descriptor`] of `ino` in `tree`.
    pub fn verity_descriptor_in(&self, tree: &Tree<'_>, ino: u64) -> Result<Option<Vec<u8>>> {
        let key = Key::new(ino, key_type::VERITY_DESC_ITEM, 0);
        let Some(head) = tree.search(&key)? else {
            return Ok(None);
        };
        let d = crate::items::VerityDescriptorItem::parse(head.data()).map_err(|reason| {
            Error::BadItem {
                tree: tree.id,
                key,
                reason,
            }
        })?;
        let size = usize::try_from(d.size()).unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let from = Key::new(ino, key_type::VERITY_DESC_ITEM, 1);
        let to = Key::new(ino, key_type::VERITY_DESC_ITEM, u64::MAX);
        for item in tree.range(from, to) {
            let item = item?;
            if item.key.offset - 1 != out.len() as u64 {
                return Err(Error::BadItem {
                    tree: tree.id,
                    key: item.key,
                    reason: ItemError::VerityGap {
                        at: item.key.offset - 1,
                        have: out.len(),
                    },
                });
            }
            out.extend_from_slice(item.data());
            if out.len() >= size {
                break;
            }
        }
        if out.len() < size {
            return Err(Error::BadItem {
                tree: tree.id,
                key,
                reason: ItemError::VerityShort {
                    size,
                    have: out.len(),
                },
            });
        }
        out.truncate(size);
        Ok(Some(out))
    }

    /// The bytes of the EXTENT_DATA item `fe` (key offset `file_offset`) of
    /// `inode` as stored, into `out` (which must be [`encoded_len`] long):
    /// the inline payload, or the whole on-disk extent, checksum-verified and
    /// read from another copy when one is bad. For a compressed extent this is
    /// the compressed stream send v2's ENCODED_WRITE carries.
    pub fn read_extent_encoded(
        &self,
        tree: &Tree<'_>,
        inode: &Inode,
        file_offset: u64,
        fe: &FileExtentItem<'_>,
        out: &mut [u8],
    ) -> Result<()> {
        let ctx = FileCtx {
            fs: self,
            tree,
            ino: inode.ino,
            nodatasum: inode.nodatasum(),
            salvage: false,
            whole: None,
        };
        let want = encoded_len(fe);
        if out.len() as u64 != want {
            return Err(ctx.bad(file_offset, DataError::ExtentSize { bytes: want }));
        }
        if fe.kind() == ExtentKind::Inline {
            out.copy_from_slice(fe.inline_data());
            return Ok(());
        }
        if fe.disk_bytenr() == 0 {
            return Ok(());
        }
        self.read_verified(
            &ctx,
            (fe.disk_bytenr(), fe.disk_num_bytes()),
            fe.disk_bytenr(),
            file_offset.saturating_sub(fe.offset()),
            out,
            None,
        )
    }
}

/// How many bytes [`Filesystem::read_extent_encoded`] gives for `fe`: the
/// inline payload's size, or the on-disk extent's (0 for a hole).
pub fn encoded_len(fe: &FileExtentItem<'_>) -> u64 {
    match fe.kind() {
        ExtentKind::Inline => fe.inline_data().len() as u64,
        _ if fe.disk_bytenr() == 0 => 0,
        _ => fe.disk_num_bytes(),
    }
}

/// Threads for work on file data (checking sectors, reading extents): one
/// per core, at most 8.
pub fn worker_threads() -> usize {
    // available_parallelism reads cgroup files on every call: ask once.
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(8)))
}

/// The inode `ino` of the fs tree `tree` (any tree: a bookmark's too).
pub fn inode_of(tree: &Tree<'_>, ino: u64) -> Result<Inode> {
    let key = Key::new(ino, key_type::INODE_ITEM, 0);
    let item = tree.search(&key)?.ok_or(Error::NoInode {
        subvol: tree.id,
        ino,
    })?;
    let ii = InodeItem::parse(item.data()).map_err(|reason| Error::BadItem {
        tree: tree.id,
        key,
        reason,
    })?;
    Ok(Inode::from_item(ino, &ii))
}

/// The entries of directory `dir` of `tree`, in DIR_INDEX order.
pub fn dir_entries_of(tree: &Tree<'_>, dir: u64) -> Result<Vec<DirEntryInfo>> {
    let mut out = Vec::new();
    let from = Key::new(dir, key_type::DIR_INDEX, 0);
    let to = Key::new(dir, key_type::DIR_INDEX, u64::MAX);
    for item in tree.range(from, to) {
        let item = item?;
        let entries = dir_entries(item.data()).map_err(Error::bad_item(tree.id, item.key))?;
        for e in entries {
            out.push(DirEntryInfo {
                index: item.key.offset,
                name: e.name.to_vec(),
                location: e.location,
                file_type: e.file_type,
            });
        }
    }
    Ok(out)
}

/// The xattrs of inode `ino` of `tree`: (name, value), in key (name hash) order.
pub fn xattrs_of(tree: &Tree<'_>, ino: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let from = Key::new(ino, key_type::XATTR_ITEM, 0);
    let to = Key::new(ino, key_type::XATTR_ITEM, u64::MAX);
    for item in tree.range(from, to) {
        let item = item?;
        let entries = dir_entries(item.data()).map_err(Error::bad_item(tree.id, item.key))?;
        out.extend(
            entries
                .into_iter()
                .map(|e| (e.name.to_vec(), e.data.to_vec())),
        );
    }
    Ok(out)
}
