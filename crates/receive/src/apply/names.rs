//! RENAME, LINK, UNLINK and RMDIR: directory entries.

use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::fcntl::{renameat, AtFlags};
use nix::sys::stat::fstatat;
use nix::unistd::{linkat, unlinkat, UnlinkatFlags};

use crate::error::CmdError;
use crate::path;

use super::current::{Flow, Receiver, R, RESOLVE};

impl Receiver<'_> {
    /// Renames `from` to `to` for command number `at`.
    pub(super) fn rename(&mut self, from: &[u8], to: &[u8], at: u64) -> R<Flow> {
        let (fp, fname) = path::split(from);
        let (tp, tname) = path::split(to);
        if fp == tp {
            self.entries_change(&[fp], at)?;
        } else {
            self.entries_change(&[fp, tp], at)?;
        }
        let cur = self.cur()?;
        let n = cur.recovery.next();
        let (fdir, tdir) = cur.res.dirs2(fp, tp).map_err(CmdError::os(RESOLVE))?;
        // The descriptors stay valid: nothing touches the cache in between.
        match renameat(Some(fdir), fname, Some(tdir), tname) {
            // A killed receive may have done it (see `journal`).
            Err(Errno::ENOENT)
                if cur.recovery.redo.maybe_done(n)
                    && fstatat(Some(tdir), tname, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok() => {}
            r => r.map_err(CmdError::os("rename"))?,
        }
        cur.res.forget(from);
        cur.res.forget(to);
        // A directory renamed is still the same directory.
        if !cur.recovery.redo.renamed_already(n) {
            cur.later.dir_times.renamed(from, to);
        }
        if let Some(f) = cur.file.as_mut() {
            if f.path == to {
                cur.retire();
            } else if path::is_within(&f.path, from) {
                let mut p = to.to_vec();
                p.extend_from_slice(&f.path[from.len()..]);
                f.path = p;
            }
        }
        Ok(Flow::Continue)
    }

    pub(super) fn link(&mut self, path: &[u8], target: &[u8]) -> R<Flow> {
        let (np, nname) = path::split(path);
        self.entries_change(&[np], self.now.1.index)?;
        let cur = self.cur()?;
        let (tp, tname) = path::split(target);
        let (tdir, ndir) = cur.res.dirs2(tp, np).map_err(CmdError::os(RESOLVE))?;
        // No AT_SYMLINK_FOLLOW: a symlink target is linked, not followed.
        match linkat(
            Some(tdir),
            tname,
            Some(ndir),
            nname,
            nix::fcntl::AtFlags::empty(),
        ) {
            Err(Errno::EEXIST) if cur.recovery.next_maybe_done() => {}
            r => r.map_err(CmdError::os("link"))?,
        }
        Ok(Flow::Continue)
    }

    pub(super) fn unlink(&mut self, path: &[u8], dir: bool) -> R<Flow> {
        self.entries_change(&[path::split(path).0], self.now.1.index)?;
        let cur = self.cur()?;
        if cur.is_open(path) {
            cur.retire();
        }
        let (d, name) = cur.res.parent(path).map_err(CmdError::os(RESOLVE))?;
        let (flag, op) = if dir {
            (UnlinkatFlags::RemoveDir, "rmdir")
        } else {
            (UnlinkatFlags::NoRemoveDir, "unlink")
        };
        let done = if dir {
            crate::meta::rmdir(d, name)
        } else {
            unlinkat(Some(d.as_raw_fd()), name, flag)
        };
        match done {
            Err(Errno::ENOENT) if cur.recovery.next_maybe_done() => {}
            r => r.map_err(CmdError::os(op))?,
        }
        if dir {
            cur.res.forget(path);
            cur.later.dir_times.removed(path);
        }
        Ok(Flow::Continue)
    }
}
