//! WRITE, CLONE, TRUNCATE, ENCODED_WRITE, FALLOCATE, UPDATE_EXTENT and
//! ENABLE_VERITY: a regular file's contents.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, OFlag};
use uuid::Uuid;

use crate::decode::{Job, Run, HAND_OVER_FROM};
use crate::dest::{self, Kind};
use crate::error::{escape, CmdError};
use crate::ioctl;
use crate::path::Resolver;
use crate::snapshot::copy;

use super::current::{open_regular, to_i64, Flow, Receiver, R};

impl Receiver<'_> {
    /// UPDATE_EXTENT, a `--no-data` stream's stand-in for data, changes
    /// nothing; it only needs a subvolume.
    pub(super) fn update_extent(&mut self) -> R<Flow> {
        self.cur()?;
        Ok(Flow::Continue)
    }

    pub(super) fn write(&mut self, path: &[u8], offset: u64, data: &[u8]) -> R<Flow> {
        to_i64(offset.saturating_add(data.len() as u64), "offset")?;
        let f = self.cur()?.file(path)?;
        f.file
            .write_all_at(data, offset)
            .map_err(CmdError::io("write"))?;
        let end = offset + data.len() as u64;
        f.size = f.size.map(|s| s.max(end));
        self.stats.bytes_written += data.len() as u64;
        Ok(Flow::Continue)
    }

    pub(super) fn truncate(&mut self, path: &[u8], size: u64) -> R<Flow> {
        let size_i = to_i64(size, "size")?;
        let f = self.cur()?.file(path)?;
        let now = match f.size {
            Some(s) => s,
            None => f.file.metadata().map_err(CmdError::io("stat"))?.len(),
        };
        if now == size {
            self.stats.truncates_skipped += 1;
            return Ok(Flow::Continue);
        }
        nix::unistd::ftruncate(&f.file, size_i).map_err(CmdError::os("truncate"))?;
        f.size = Some(size);
        Ok(Flow::Continue)
    }

    pub(super) fn clone_range(
        &mut self,
        path: &[u8],
        offset: u64,
        len: u64,
        clone_uuid: Uuid,
        clone_path: &[u8],
        clone_offset: u64,
    ) -> R<Flow> {
        to_i64(offset.saturating_add(len), "offset")?;
        to_i64(clone_offset.saturating_add(len), "clone offset")?;
        let force = self.opts.force;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        if cur.snap.clones_from_parent(clone_uuid) {
            return self.clone_from_parent(path, offset, len, clone_path, clone_offset);
        }
        let own = clone_uuid == cur.state.received_uuid;
        if !own && !cur.data.sources.contains_key(&clone_uuid) {
            let known = self
                .dest
                .find(clone_uuid)
                .map_err(CmdError::io("look up clone source"))?
                .ok_or_else(|| {
                    CmdError::CloneSourceNotFound(clone_uuid, self.dest.searched(clone_uuid))
                })?;
            if !known.complete && !force {
                return Err(CmdError::CloneSourceIncomplete {
                    name: escape(&known.name),
                    uuid: clone_uuid,
                });
            }
            if known.elsewhere.is_none() && known.name == cur.name {
                return Err(CmdError::CloneSourceNotFound(
                    clone_uuid,
                    self.dest.searched(clone_uuid),
                ));
            }
            let root = self
                .dest
                .open_known(&known)
                .map_err(CmdError::os("open clone source subvolume"))?;
            cur.data.sources.insert(clone_uuid, Resolver::new(root));
        }
        let same_file = own && clone_path == path;
        let src = if same_file {
            None
        } else {
            let res = if own {
                &mut cur.res
            } else {
                cur.data.sources.get_mut(&clone_uuid).ok_or_else(|| {
                    CmdError::CloneSourceNotFound(clone_uuid, self.dest.searched(clone_uuid))
                })?
            };
            Some(open_regular(res, clone_path, OFlag::O_RDONLY)?)
        };
        let mut how = cur.snap.copy;
        let f = cur.file(path)?;
        let src_file = src.as_ref().unwrap_or(&f.file);
        if len > 0 {
            copy::copy_range(&f.file, offset, src_file, clone_offset, len, &mut how)
                .map_err(CmdError::io("clone"))?;
        }
        // A clone past the source's end copies less than asked: ask later.
        f.size = None;
        cur.snap.copy = how;
        self.stats.bytes_cloned += len;
        Ok(Flow::Continue)
    }

    /// CLONE from the parent this subvolume was its tree before: the
    /// parent's file and bytes as they were ([`crate::snapshot::overlay`]).
    fn clone_from_parent(
        &mut self,
        path: &[u8],
        offset: u64,
        len: u64,
        clone_path: &[u8],
        clone_offset: u64,
    ) -> R<Flow> {
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let src = cur.snap.open_parent_file(cur.res.root(), clone_path)?;
        let dst = cur
            .file(path)?
            .file
            .try_clone()
            .map_err(CmdError::io("dup"))?;
        cur.snap
            .copy_from_parent(&dst, offset, &src, clone_offset, len)?;
        if let Some(f) = cur.file.as_mut() {
            f.size = None;
        }
        self.stats.bytes_cloned += len;
        Ok(Flow::Continue)
    }

    pub(super) fn encoded_write(
        &mut self,
        path: &[u8],
        offset: u64,
        w: ioctl::EncodedWrite<'_>,
    ) -> R<Flow> {
        if w.encryption != 0 {
            return Err(CmdError::Encryption(w.encryption));
        }
        to_i64(offset.saturating_add(w.len), "offset")?;
        let try_ioctl = self.dest.kind() == Kind::Btrfs && !self.opts.force_decompress;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let f = cur.file(path)?;
        if try_ioctl {
            match ioctl::encoded_write(f.file.as_fd(), &w) {
                Ok(()) => {
                    f.size = f.size.map(|s| s.max(offset + w.len));
                    self.stats.bytes_written += w.len;
                    self.stats.encoded_ioctl += 1;
                    return Ok(Flow::Continue);
                }
                Err(e) if dest::encoded_write_unsupported(e) => {}
                Err(e) => {
                    return Err(CmdError::Os {
                        op: "encoded write",
                        errno: e,
                    })
                }
            }
        }
        let extent = btrfs_compress::Encoded::new(
            w.compression,
            w.unencoded_len,
            w.unencoded_offset,
            w.len,
        )?;
        // A lone extent (a small file's) is decoded here: the next command
        // would wait for it at once. In place, what is kept of the
        // parent's is read around each write: all decoded here, in order.
        if !cur.away.closer.decoder().in_place()
            && !cur.snap.in_place()
            && (cur.away.decoding.is_some() || w.unencoded_len >= HAND_OVER_FROM)
        {
            return self.hand_over(path, offset, extent, w.data);
        }
        let piece = extent.decode(w.data, &mut cur.data.scratch)?;
        let f = cur.file.as_mut().ok_or(CmdError::NotRegular)?;
        f.file
            .write_all_at(piece, offset)
            .map_err(CmdError::io("write"))?;
        f.size = f.size.map(|s| s.max(offset + w.len));
        self.stats.bytes_written += w.len;
        self.stats.encoded_decoded += 1;
        if cur.data.scratch.capacity() > (1 << 20) {
            cur.data.scratch = Vec::new();
        }
        Ok(Flow::Continue)
    }

    /// Hands an ENCODED_WRITE to the decoding threads ([`crate::decode`]);
    /// the file at `path` is open. Its bytes are counted as written once
    /// written there.
    fn hand_over(
        &mut self,
        path: &[u8],
        offset: u64,
        extent: btrfs_compress::Encoded,
        data: &[u8],
    ) -> R<Flow> {
        let pos = self.now.1;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let f = cur.file.as_mut().ok_or(CmdError::NotRegular)?;
        let mut run = match cur.away.decoding.take() {
            Some(r) if r.admits(path, offset, extent.len) => r,
            other => {
                // Not so after settle_decoding; should it be, wait.
                if other.is_some() {
                    cur.away.closer.decoder().wait();
                }
                let file = f.file.try_clone().map_err(CmdError::io("dup"))?;
                Run::new(path, file, cur.recovery.track.count)
            }
        };
        run.add(offset, extent.len);
        f.size = f.size.map(|s| s.max(offset + extent.len));
        let job = Job {
            file: run.file.clone(),
            path: run.path.clone(),
            offset,
            extent,
            data: data.to_vec(),
            pos,
        };
        cur.away.decoding = Some(run);
        cur.away.closer.decoder().submit(job);
        Ok(Flow::Continue)
    }

    pub(super) fn fallocate(&mut self, path: &[u8], mode: u32, offset: u64, len: u64) -> R<Flow> {
        let keep = FallocateFlags::FALLOC_FL_KEEP_SIZE.bits() as u32;
        let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE.bits() as u32;
        let zero = FallocateFlags::FALLOC_FL_ZERO_RANGE.bits() as u32;
        if mode & !(keep | punch | zero) != 0
            || (mode & punch != 0 && mode & keep == 0)
            || (mode & punch != 0 && mode & zero != 0)
        {
            return Err(CmdError::BadFallocateMode(mode));
        }
        let off = to_i64(offset, "offset")?;
        let l = to_i64(len, "length")?;
        to_i64(offset.saturating_add(len), "offset")?;
        let f = self.cur.as_mut().ok_or(CmdError::NoSubvol)?.file(path)?;
        let flags = FallocateFlags::from_bits_truncate(mode as i32);
        match nix::fcntl::fallocate(f.file.as_raw_fd(), flags, off, l) {
            Ok(()) => {}
            Err(Errno::EOPNOTSUPP) if mode & (punch | zero) != 0 => {
                // No hole punching here: write zeros over what exists.
                let size = f.file.metadata().map_err(CmdError::io("stat"))?.len();
                let end = if mode & keep != 0 {
                    (offset + len).min(size)
                } else {
                    offset + len
                };
                let zeros = vec![0u8; (end.saturating_sub(offset)).min(1 << 20) as usize];
                let mut at = offset;
                while at < end {
                    let n = ((end - at) as usize).min(zeros.len());
                    f.file
                        .write_all_at(&zeros[..n], at)
                        .map_err(CmdError::io("write zeros"))?;
                    at += n as u64;
                }
                self.log.note(format_args!(
                    "fallocate mode {mode:#x} not supported; wrote zeros to '{}'",
                    escape(path)
                ));
            }
            Err(Errno::EOPNOTSUPP) => {
                // `f` borrows the current subvolume: not through self.skip().
                self.stats.skipped += 1;
                self.skipped.add(&format!("fallocate mode {mode:#x}"), 1);
                self.log.note(format_args!(
                    "fallocate mode {mode:#x} not supported by this filesystem; skipped for '{}'",
                    escape(path)
                ));
            }
            Err(e) => {
                return Err(CmdError::Os {
                    op: "fallocate",
                    errno: e,
                })
            }
        }
        if mode & keep == 0 {
            f.size = None;
        }
        Ok(Flow::Continue)
    }

    pub(super) fn enable_verity(
        &mut self,
        path: &[u8],
        algorithm: u8,
        block_size: u32,
        salt: &[u8],
        sig: &[u8],
    ) -> R<Flow> {
        let cur = self.cur()?;
        // fs-verity needs every writable descriptor closed.
        cur.file = None;
        cur.away.closer.wait();
        let f = open_regular(&mut cur.res, path, OFlag::O_RDONLY)?;
        match ioctl::enable_verity(f.as_fd(), algorithm, block_size, salt, sig) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e @ (Errno::ENOTTY | Errno::EOPNOTSUPP)) => {
                self.skip("fs-verity", 1);
                self.log.note(format_args!(
                    "fs-verity not available here ({e}); not enabled on '{}'",
                    escape(path)
                ));
            }
            Err(e) => {
                return Err(CmdError::Os {
                    op: "enable verity",
                    errno: e,
                })
            }
        }
        Ok(Flow::Continue)
    }
}
