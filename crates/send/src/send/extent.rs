//! File data: which extents to send, and holes (the kernel's
//! process_extent, is_extent_unchanged, maybe_send_hole, send_hole).
//!
//! A full send writes every extent with data. An incremental send skips an
//! extent the parent has too (same disk bytenr, offset into it and
//! generation, over the whole range), and writes zeros where the new
//! version has a hole the parent had data in (protocol v1 has no hole
//! punching), within i_size.

use super::ahead::{DataRead, AHEAD_MIN};
use super::clone::{Query, Source, MAX_SECTOR};
use super::cmd::Cmd;
use super::inode::Walk;
use super::mode::{S_IFLNK, S_IFREG};
use super::stop::{Result, Stop};
use btrfs_disk::data::encoded_len;
use btrfs_disk::error::Error;
use btrfs_disk::items::{key_type, Compression, ExtentKind, FileExtentItem};
use btrfs_disk::tree::Item;
use btrfs_disk::Key;
use btrfs_stream::command::compression;

/// The page size the kernel aligns inline extents to in its comparisons.
const PAGE: u64 = 4096;

/// Largest compressed extent btrfs writes (BTRFS_MAX_COMPRESSED), and so the
/// largest ENCODED_WRITE payload.
const MAX_COMPRESSED: u64 = 128 << 10;

/// fallocate(2) mode of a punched hole: FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE.
const PUNCH_HOLE: u32 = 0x2 | 0x1;

impl Walk<'_, '_> {
    fn parse_extent<'i>(&self, tree: u64, item: &'i Item) -> Result<FileExtentItem<'i>> {
        Ok(FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree, item.key))?)
    }

    /// btrfs_file_extent_end: inline extents end at their sector's end.
    fn extent_end(&self, key: Key, fe: &FileExtentItem<'_>) -> u64 {
        if fe.kind() == ExtentKind::Inline {
            key.offset
                .saturating_add(fe.ram_bytes())
                .div_ceil(self.sectorsize)
                .saturating_mul(self.sectorsize)
        } else {
            key.offset.saturating_add(fe.num_bytes())
        }
    }

    /// need_send_hole.
    pub(super) fn need_send_hole(&self) -> bool {
        self.parent.is_some()
            && !self.cur.new
            && !self.cur.new_gen
            && !self.cur.deleted
            && self.cur.kind() == S_IFREG
    }

    /// process_extent for the EXTENT_DATA `item` (at `slot` of its leaf).
    pub(super) fn process_extent(&mut self, item: &Item, slot: usize) -> Result<()> {
        if self.cur.kind() == S_IFLNK {
            return Ok(());
        }
        let fe = self.parse_extent(self.send.id(), item)?;
        if self.parent.is_some() && !self.cur.new {
            if !self.is_extent_unchanged(item.key, &fe)? {
                self.write_extent(item.key, &fe)?;
            }
        } else {
            match fe.kind() {
                ExtentKind::Prealloc => return Ok(()),
                ExtentKind::Regular if fe.disk_bytenr() == 0 => return Ok(()),
                _ => {}
            }
            self.write_extent(item.key, &fe)?;
        }
        self.maybe_send_hole(item, slot)
    }

    /// send_write_or_clone: the extent's bytes up to i_size, cloned where
    /// the clone search finds a source, written otherwise.
    fn write_extent(&mut self, key: Key, fe: &FileExtentItem<'_>) -> Result<()> {
        let offset = key.offset;
        let end = self.extent_end(key, fe).min(self.cur.size);
        if offset >= end {
            return Ok(());
        }
        let found = self.clones.find(
            &mut self.send,
            &Query {
                ino: self.cur.ino,
                file_off: offset,
                fe,
                size: self.cur.size,
                next_write: self.cur.next_write_offset,
            },
        )?;
        let found = found.filter(|src| !self.salvage_bad_source(src, fe));
        let len = end - offset;
        let clone = match found {
            Some(src) if end.is_multiple_of(self.sectorsize) => Some(src),
            // An unaligned clone is valid when it ends at i_size in both files;
            // a larger destination is cut first so the clone ends at its EOF.
            Some(src)
                if end == self.cur.size
                    && src.offset.saturating_add(len) == self.source_size(&src)? =>
            {
                if self.parent.is_some() {
                    let path = self.cur_path(self.cur.ino, self.cur.gen)?;
                    self.push(Cmd::Truncate { path, size: offset })?;
                }
                Some(src)
            }
            _ => None,
        };
        match clone {
            Some(src) => self.clone_range(src, fe, offset, len)?,
            None => self.send_data(key.offset, fe, offset, len)?,
        }
        if fe.kind() == ExtentKind::Regular && fe.disk_bytenr() != 0 {
            self.clones.sent(fe.disk_bytenr());
        }
        self.cur.next_write_offset = end;
        Ok(())
    }

    /// The i_size of a clone source.
    fn source_size(&mut self, src: &Source) -> Result<u64> {
        let info = if self.clones.roots[src.root].is_send {
            self.send.inode(src.ino)?
        } else {
            self.clones.inode(src.root, src.ino)?
        };
        Ok(info.map_or(0, |i| i.size))
    }

    /// send_extent_data: WRITEs of `[offset, offset + len)` of the current
    /// inode, read through `fe` (whose key offset is `item_off`).
    fn send_data(
        &mut self,
        item_off: u64,
        fe: &FileExtentItem<'_>,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let Some(inode) = self.cur.inode else {
            return Ok(());
        };
        let path = self.cur_path(self.cur.ino, self.cur.gen)?;
        if self.flavor.no_data {
            self.push(Cmd::UpdateExtent { path, offset, len })?;
            return Ok(());
        }
        // The whole extent as stored, unless that is more than the range
        // needs (a partly referenced extent, or the rest of one a clone
        // could not cover).
        if self.flavor.compressed && fe.compression() != Compression::None && encoded_len(fe) <= len
        {
            match self.send_encoded(&inode, item_off, fe, offset, len, path.clone()) {
                // A rescue: an extent no copy gives goes as a WRITE of
                // zeros, read (and recorded) below.
                Err(Stop::Read(_)) if self.salvage.is_some() => {}
                r => return r,
            }
        }
        let tree = self.send.tree;
        let zero = fe.kind() == ExtentKind::Prealloc
            || (fe.kind() == ExtentKind::Regular && fe.disk_bytenr() == 0);
        let mut sent = 0u64;
        while sent < len {
            let n = (len - sent).min(self.read_chunk);
            if !self.out.wants_data(n, true) {
                self.push(Cmd::Unread {
                    cmd: Box::new(Cmd::Write {
                        path: path.clone(),
                        offset: offset + sent,
                        data: Vec::new(),
                        sums: Vec::new(),
                    }),
                    len: n,
                })?;
                sent += n;
                continue;
            }
            let mut data = self.out.buffer(n as usize);
            let skip = offset - item_off + sent;
            let mut sums = Vec::new();
            if zero {
                data.fill(0);
            } else if n >= AHEAD_MIN && fe.kind() == ExtentKind::Regular && self.salvage.is_none() {
                // (A rescue reads here, so that what a read lost is known
                // before a later extent may clone from it.)
                // Read on a reader thread; a WRITE adds no directory entry
                // (what `Walk::push` looks for).
                let read = DataRead {
                    inode,
                    item_off,
                    item: fe.as_bytes().to_vec(),
                    skip,
                    pos: self
                        .position()
                        .map(|(ino, p)| (ino, String::from_utf8_lossy(&p).into_owned())),
                };
                self.out
                    .push_read(path.clone(), offset + sent, read, data)?;
                sent += n;
                continue;
            } else {
                sums = self
                    .fs
                    .read_extent_piece(&tree, &inode, item_off, fe, skip, &mut data)?;
            }
            self.push(Cmd::Write {
                path: path.clone(),
                offset: offset + sent,
                data,
                sums,
            })?;
            sent += n;
        }
        Ok(())
    }

    /// send_encoded_extent and send_encoded_inline_extent: one
    /// ENCODED_WRITE of the extent's stored bytes, of which the file gets
    /// `[offset, offset + len)` (the item's key offset is `item_off`).
    fn send_encoded(
        &mut self,
        inode: &btrfs_disk::data::Inode,
        item_off: u64,
        fe: &FileExtentItem<'_>,
        offset: u64,
        len: u64,
        path: super::cmd::Bytes,
    ) -> Result<()> {
        let stored = encoded_len(fe);
        if stored > MAX_COMPRESSED || fe.ram_bytes() > MAX_COMPRESSED {
            return Err(super::stop::Stop::Bad(format!(
                "the compressed extent at file offset {item_off} has {stored} bytes on disk for {} decoded; btrfs compresses at most 128 KiB into one extent",
                fe.ram_bytes()
            )));
        }
        let inline = fe.kind() == ExtentKind::Inline;
        let (covered, skip) = if inline {
            (fe.ram_bytes(), 0)
        } else {
            (fe.num_bytes(), fe.offset())
        };
        let compression = match fe.compression() {
            Compression::Zlib => compression::ZLIB,
            Compression::Zstd => compression::ZSTD,
            Compression::Lzo => {
                compression::LZO_4K + self.sectorsize.trailing_zeros().saturating_sub(12)
            }
            Compression::None => compression::NONE,
        };
        let read = self.out.wants_data(stored, false);
        let mut data = if read {
            self.out.buffer(stored as usize)
        } else {
            Vec::new()
        };
        if read {
            let tree = self.send.tree;
            self.fs
                .read_extent_encoded(&tree, inode, item_off, fe, &mut data)?;
        }
        let cmd = Cmd::EncodedWrite {
            path,
            offset,
            unencoded_file_len: item_off
                .saturating_add(covered)
                .saturating_sub(offset)
                .min(len),
            unencoded_len: fe.ram_bytes(),
            unencoded_offset: offset.saturating_sub(item_off).saturating_add(skip),
            compression,
            encryption: (!inline).then_some(0),
            data,
        };
        self.push(if read {
            cmd
        } else {
            Cmd::Unread {
                cmd: Box::new(cmd),
                len: stored,
            }
        })?;
        Ok(())
    }

    /// send_clone: CLONE of `len` bytes at `offset` from `src`.
    fn send_clone(&mut self, offset: u64, len: u64, src: &Source) -> Result<()> {
        let path = self.cur_path(self.cur.ino, self.cur.gen)?;
        let root = &self.clones.roots[src.root];
        let (clone_uuid, clone_ctransid) = (root.uuid, root.ctransid);
        let clone_path = if root.is_send {
            let gen = self.send.gen(src.ino)?;
            self.cur_path(src.ino, gen)?
        } else {
            self.clones.root_path(src.root, src.ino)?
        };
        self.push(Cmd::Clone {
            offset,
            len,
            path,
            clone_uuid,
            clone_ctransid,
            clone_path,
            clone_offset: src.offset,
        })?;
        Ok(())
    }

    /// clone_range: `[offset, offset + len)` of the current inode (item
    /// `fe`) from `src`, split where the source's extents change: CLONE
    /// where the source points at the same bytes of the same extent, WRITE
    /// where it has a hole or other data, never past the source's i_size.
    fn clone_range(
        &mut self,
        mut src: Source,
        fe: &FileExtentItem<'_>,
        mut offset: u64,
        mut len: u64,
    ) -> Result<()> {
        let item_off = offset;
        let disk = fe.disk_bytenr();
        let mut data_offset = fe.offset();
        // One sector from offset 0 may be inline at the receiver (fstests 149).
        if src.offset == 0 && len == self.sectorsize {
            return self.send_data(item_off, fe, offset, len);
        }
        let src_size = self.source_size(&src)?;
        let src_is_cur = self.clones.roots[src.root].is_send && src.ino == self.cur.ino;
        let tree = self.clones.tree(src.root);
        let key = Key::new(src.ino, key_type::EXTENT_DATA, src.offset);
        let mut cursor = tree.cursor();
        let mut next = match cursor.seek_le(&key)? {
            Some(i) if i.key.objectid == src.ino && i.key.item_type == key_type::EXTENT_DATA => {
                Some(i)
            }
            _ => cursor.seek_ge(&key)?,
        };
        while let Some(item) = next.take() {
            let k = item.key;
            if k.objectid != src.ino || k.item_type != key_type::EXTENT_DATA {
                break;
            }
            let sfe = self.parse_extent(tree.id, &item)?;
            let inline = sfe.kind() == ExtentKind::Inline;
            let mut ext_len = if inline {
                sfe.ram_bytes().div_ceil(PAGE).saturating_mul(PAGE)
            } else {
                sfe.num_bytes()
            };
            if k.offset.saturating_add(ext_len) > src.offset {
                if k.offset > src.offset {
                    // A hole in the source (NO_HOLES): written.
                    let hole = (k.offset - src.offset).min(len);
                    self.send_data(item_off, fe, offset, hole)?;
                    len -= hole;
                    if len == 0 {
                        break;
                    }
                    offset += hole;
                    src.offset += hole;
                    data_offset += hole;
                }
                if k.offset >= src.offset.saturating_add(len) || k.offset >= src_size {
                    break;
                }
                let mut crossed = false;
                if k.offset.saturating_add(ext_len) > src_size {
                    ext_len = src_size - k.offset;
                    crossed = true;
                }
                let same = !inline && sfe.disk_bytenr() == disk;
                let mut src_data = sfe.offset();
                if same {
                    src.offset = k.offset;
                    if src_data < data_offset && src_data.saturating_add(ext_len) > data_offset {
                        let d = data_offset - src_data;
                        ext_len -= d;
                        src_data += d;
                        src.offset += d;
                    }
                }
                let n = ext_len.min(len);
                if same && src_data == data_offset {
                    let src_end = src.offset + n;
                    // The source's unaligned EOF block cannot go into the
                    // middle of a file: clone the aligned part (64 KiB, the
                    // largest sector a receiver may have), write the rest.
                    if src_end == src_size
                        && !src_end.is_multiple_of(MAX_SECTOR)
                        && offset + n < self.cur.size
                    {
                        let aligned = (src_end - src.offset) / MAX_SECTOR * MAX_SECTOR;
                        if aligned > 0 {
                            self.send_clone(offset, aligned, &src)?;
                        }
                        self.send_data(item_off, fe, offset + aligned, n - aligned)?;
                    } else {
                        self.send_clone(offset, n, &src)?;
                    }
                } else if crossed && n < len {
                    break;
                } else {
                    self.send_data(item_off, fe, offset, n)?;
                }
                len -= n;
                if len == 0 {
                    break;
                }
                offset += n;
                src.offset += n;
                // Within one file only from what the receiver has already.
                if src_is_cur && src.offset >= self.cur.next_write_offset {
                    break;
                }
                data_offset += n;
            }
            next = cursor.next_item()?;
        }
        if len > 0 {
            self.send_data(item_off, fe, offset, len)?;
        }
        Ok(())
    }

    /// is_extent_unchanged: whether the parent's extents over the range of
    /// `fe` (at `key`) are the same extent, piece by piece.
    fn is_extent_unchanged(&mut self, key: Key, fe: &FileExtentItem<'_>) -> Result<bool> {
        if fe.kind() != ExtentKind::Regular {
            return Ok(false);
        }
        let left_disknr = fe.disk_bytenr();
        let left_len = fe.num_bytes();
        let left_offset = fe.offset();
        let left_gen = fe.generation();
        let Some(parent) = self.parent.as_ref() else {
            return Ok(false);
        };
        if let Some(reuse) = self.reuse {
            // Against a bookmark, only an extent older than it is the one it names.
            if left_disknr != 0 && !reuse.extent_is_older(left_disknr)? {
                return Ok(false);
            }
        }
        let pid = parent.id();
        let mut cursor = parent.tree.cursor();
        let Some(mut item) = cursor.seek_le(&key)? else {
            return Ok(false);
        };
        if item.key.objectid != key.objectid || item.key.item_type != key_type::EXTENT_DATA {
            return Ok(left_disknr == 0);
        }
        let end = key.offset.saturating_add(left_len);
        let mut at = item.key;
        while at.offset < end {
            let rfe = self.parse_extent(pid, &item)?;
            let right_len = match rfe.kind() {
                ExtentKind::Regular => rfe.num_bytes(),
                ExtentKind::Inline => rfe.ram_bytes().div_ceil(PAGE).saturating_mul(PAGE),
                ExtentKind::Prealloc => return Ok(false),
            };
            if item.key.offset.saturating_add(right_len) <= key.offset {
                return Ok(left_disknr == 0);
            }
            if rfe.kind() == ExtentKind::Inline {
                return Ok(false);
            }
            let mut right_offset = rfe.offset();
            let mut left_fixed = left_offset;
            if at.offset < key.offset {
                right_offset = right_offset.wrapping_add(key.offset - at.offset);
            } else {
                left_fixed = left_fixed.wrapping_add(at.offset - key.offset);
            }
            if left_disknr != rfe.disk_bytenr()
                || left_fixed != right_offset
                || left_gen != rfe.generation()
            {
                return Ok(false);
            }
            match cursor.next_item()? {
                Some(next)
                    if next.key.objectid == at.objectid && next.key.item_type == at.item_type =>
                {
                    if next.key.offset != at.offset.saturating_add(right_len) {
                        return Ok(false);
                    }
                    at = next.key;
                    item = next;
                }
                _ => {
                    at.offset = at.offset.saturating_add(right_len);
                    break;
                }
            }
        }
        Ok(at.offset >= end)
    }

    /// get_last_extent: the end of the current inode's last extent at or
    /// before `offset` in the send snapshot (0 when there is none).
    pub(super) fn get_last_extent(&mut self, offset: u64) -> Result<()> {
        self.cur.last_extent = 0;
        let ino = self.cur.ino;
        let key = Key::new(ino, key_type::EXTENT_DATA, offset);
        let tree = self.send.tree;
        let mut cursor = tree.cursor();
        let found = match cursor.seek_le(&key)? {
            Some(i) => Some(i),
            None => cursor.seek_ge(&key)?,
        };
        if let Some(item) = found {
            if item.key.objectid == ino && item.key.item_type == key_type::EXTENT_DATA {
                let fe = self.parse_extent(tree.id, &item)?;
                self.cur.last_extent = self.extent_end(item.key, &fe);
            }
        }
        Ok(())
    }

    /// range_is_hole_in_parent: whether the parent has no data in `[start, end)`.
    pub(super) fn range_is_hole_in_parent(&mut self, start: u64, end: u64) -> Result<bool> {
        let ino = self.cur.ino;
        let Some(parent) = self.parent.as_ref() else {
            return Ok(true);
        };
        let tree = parent.tree;
        let key = Key::new(ino, key_type::EXTENT_DATA, start);
        let mut cursor = tree.cursor();
        let mut next = match cursor.seek_le(&key)? {
            Some(i) => Some(i),
            None => cursor.seek_ge(&key)?,
        };
        let mut search_start = start;
        while search_start < end {
            let Some(item) = next else { break };
            let k = item.key;
            if k.objectid < ino || (k.objectid == ino && k.item_type < key_type::EXTENT_DATA) {
                next = cursor.next_item()?;
                continue;
            }
            if k.objectid > ino || k.item_type > key_type::EXTENT_DATA || k.offset >= end {
                break;
            }
            let fe = self.parse_extent(tree.id, &item)?;
            let extent_end = self.extent_end(k, &fe);
            if extent_end > start {
                if fe.disk_bytenr() != 0 {
                    return Ok(false);
                }
                search_start = extent_end;
            }
            next = cursor.next_item()?;
        }
        Ok(true)
    }

    /// maybe_send_hole: zeros for a gap before this extent where the parent had data.
    pub(super) fn maybe_send_hole(&mut self, item: &Item, slot: usize) -> Result<()> {
        let key = item.key;
        if self.cur.ino != key.objectid || !self.need_send_hole() {
            return Ok(());
        }
        if self.cur.last_extent == u64::MAX {
            self.get_last_extent(key.offset.wrapping_sub(1))?;
        }
        if slot == 0 && self.cur.last_extent < key.offset {
            self.get_last_extent(key.offset.wrapping_sub(1))?;
        }
        if self.cur.last_extent < key.offset
            && !self.range_is_hole_in_parent(self.cur.last_extent, key.offset)?
        {
            self.send_hole(key.offset)?;
        }
        let fe = self.parse_extent(self.send.id(), item)?;
        self.cur.last_extent = self.extent_end(key, &fe);
        Ok(())
    }

    /// send_hole: from the last extent's end to `end`, a punched hole from
    /// v2 on (one FALLOCATE, as the kernel sends it: neither cut at i_size
    /// nor counted as written, `--no-data` or not); in v1 zeros within
    /// i_size, or UPDATE_EXTENT under `--no-data`.
    pub(super) fn send_hole(&mut self, end: u64) -> Result<()> {
        let mut offset = self.cur.last_extent;
        if self.flavor.proto >= 2 {
            let path = self.cur_path(self.cur.ino, self.cur.gen)?;
            self.push(Cmd::Fallocate {
                path,
                mode: PUNCH_HOLE,
                offset,
                len: end.saturating_sub(offset),
            })?;
            return Ok(());
        }
        if offset >= self.cur.size {
            return Ok(());
        }
        let end = end.min(self.cur.size);
        let path = self.cur_path(self.cur.ino, self.cur.gen)?;
        if self.flavor.no_data {
            self.push(Cmd::UpdateExtent {
                path,
                offset,
                len: end - offset,
            })?;
            return Ok(());
        }
        // Cut where the kernel cuts: WRITE-size pieces from `offset`.
        let batch = self.read_chunk.max(self.write_size);
        while offset < end {
            let n = (end - offset).min(batch);
            let mut data = self.out.buffer(n as usize);
            data.fill(0);
            self.push(Cmd::Write {
                path: path.clone(),
                offset,
                data,
                sums: Vec::new(),
            })?;
            offset += n;
        }
        self.cur.next_write_offset = offset;
        Ok(())
    }
}
