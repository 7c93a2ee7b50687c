//! File data: which extents to send, and holes (the kernel's
//! process_extent, is_extent_unchanged, maybe_send_hole, send_hole).
//!
//! A full send writes every extent with data. An incremental send skips an
//! extent the parent has too (same disk bytenr, offset into it and
//! generation, over the whole range), and writes zeros where the new
//! version has a hole the parent had data in (protocol v1 has no hole
//! punching), within i_size.

use super::clone::ExtentRef;
use super::cmd::Cmd;
use super::inode::{Result, Walk, S_IFLNK, S_IFREG};
use btrfs_disk::error::Error;
use btrfs_disk::items::{key_type, ExtentKind, FileExtentItem};
use btrfs_disk::tree::Item;
use btrfs_disk::Key;

/// The page size the kernel aligns inline extents to in its comparisons.
const PAGE: u64 = 4096;

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
    pub(crate) fn need_send_hole(&self) -> bool {
        self.parent.is_some()
            && !self.cur.new
            && !self.cur.new_gen
            && !self.cur.deleted
            && self.cur.kind() == S_IFREG
    }

    /// process_extent for the EXTENT_DATA `item` (at `slot` of its leaf).
    pub(crate) fn process_extent(&mut self, item: &Item, slot: usize) -> Result<()> {
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
        let Some(inode) = self.cur.inode else {
            return Ok(());
        };
        let ino = self.cur.ino;
        let gen = self.cur.gen;
        let mut sent = 0u64;
        let clonable = fe.kind() != ExtentKind::Inline && fe.disk_bytenr() != 0;
        if clonable {
            let found = self.clones.find(&ExtentRef {
                inode: &inode,
                file_offset: offset,
                len: end - offset,
                item: fe,
            })?;
            if let Some(src) = found.filter(|s| s.len > 0) {
                let len = src.len.min(end - offset);
                let src_gen = self.send.gen(src.ino)?;
                let clone_path = self.cur_path(src.ino, src_gen)?;
                let path = self.cur_path(ino, gen)?;
                self.push(Cmd::Clone {
                    offset,
                    len,
                    path,
                    clone_uuid: self.root.uuid,
                    clone_ctransid: self.root.ctransid,
                    clone_path,
                    clone_offset: src.offset,
                })?;
                sent = len;
            }
        }
        if offset + sent < end {
            let path = self.cur_path(ino, gen)?;
            let tree = self.send.tree;
            while offset + sent < end {
                let n = (end - offset - sent).min(self.read_chunk);
                let mut data = self.out.buffer(n as usize);
                let zero = fe.kind() == ExtentKind::Prealloc
                    || (fe.kind() == ExtentKind::Regular && fe.disk_bytenr() == 0);
                if zero {
                    data.fill(0);
                } else {
                    self.fs
                        .read_extent_piece(&tree, &inode, offset, fe, sent, &mut data)?;
                }
                self.push(Cmd::Write {
                    path: path.clone(),
                    offset: offset + sent,
                    data,
                })?;
                sent += n;
            }
        }
        self.cur.next_write_offset = end;
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
    pub(crate) fn get_last_extent(&mut self, offset: u64) -> Result<()> {
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
    pub(crate) fn range_is_hole_in_parent(&mut self, start: u64, end: u64) -> Result<bool> {
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
    pub(crate) fn maybe_send_hole(&mut self, item: &Item, slot: usize) -> Result<()> {
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

    /// send_hole: zeros from the last extent's end to `end` (within i_size).
    pub(crate) fn send_hole(&mut self, end: u64) -> Result<()> {
        let mut offset = self.cur.last_extent;
        if offset >= self.cur.size {
            return Ok(());
        }
        let end = end.min(self.cur.size);
        let path = self.cur_path(self.cur.ino, self.cur.gen)?;
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
            })?;
            offset += n;
        }
        self.cur.next_write_offset = offset;
        Ok(())
    }
}
