//! What waits for what: files handed to the closing thread are waited for
//! only by the commands that touch them, and directory UTIMES are held back
//! until the directory is renamed or the subvolume ends.

use btrfs_stream::{Command, CommandKind, Position, Timespec};

use crate::error::{escape, CmdError, Error};
use crate::path;

use super::inode::set_times;
use super::{Current, Receiver, R};

/// Most directory UTIMES held back at once.
pub(super) const MAX_DIR_TIMES: usize = 4096;

impl Current {
    /// Forgets handed-over files the closing thread is done with.
    pub(super) fn prune(&mut self) {
        if self.inflight.is_empty() {
            return;
        }
        let done = self.closer.done();
        while let Some((seq, _)) = self.inflight.front() {
            if *seq > done {
                break;
            }
            if let Some((seq, p)) = self.inflight.pop_front() {
                if self.inflight_paths.get(&p) == Some(&seq) {
                    self.inflight_paths.remove(&p);
                }
            }
        }
    }

    /// Waits until the closing thread is done with the file at `path`.
    fn settle(&mut self, path: &[u8]) {
        if self.inflight_paths.is_empty() {
            return;
        }
        self.prune();
        if let Some(&seq) = self.inflight_paths.get(path) {
            self.closer.wait_for(seq);
            self.prune();
        }
    }

    /// Waits until the closing thread is done with every file at or
    /// beneath `dir` (before `dir` is renamed: the files' paths change).
    fn settle_within(&mut self, dir: &[u8]) {
        if self.inflight.is_empty() {
            return;
        }
        self.prune();
        let last = self
            .inflight
            .iter()
            .rev()
            .find(|(_, p)| path::is_within(p, dir))
            .map(|(s, _)| *s);
        if let Some(seq) = last {
            self.closer.wait_for(seq);
            self.prune();
        }
    }

    /// Waits until the closing thread is done with everything.
    pub(super) fn settle_all(&mut self) {
        self.closer.wait();
        self.inflight.clear();
        self.inflight_paths.clear();
    }
}

impl Receiver<'_> {
    /// Waits for the closing thread where `cmd` touches a file handed to it
    /// (all its other work is on descriptors, so names may change freely).
    pub(super) fn settle_for(&mut self, cmd: &Command<'_>) {
        use Command as C;
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        if c.inflight.is_empty() {
            return;
        }
        match *cmd {
            // New names; removing a name leaves the open file alone.
            C::Mkfile { .. }
            | C::Mkdir { .. }
            | C::Mknod { .. }
            | C::Mkfifo { .. }
            | C::Mksock { .. }
            | C::Symlink { .. }
            | C::Unlink { .. }
            | C::Rmdir { .. } => {}
            // The paths of the files beneath change.
            C::Rename { from, .. } => c.settle_within(from),
            // The file gets a second name.
            C::Link { target, .. } => c.settle(target),
            C::Clone {
                path,
                clone_uuid,
                clone_path,
                ..
            } => {
                c.settle(path);
                if clone_uuid == c.state.received_uuid {
                    c.settle(clone_path);
                }
            }
            C::SetXattr { path, .. }
            | C::RemoveXattr { path, .. }
            | C::Write { path, .. }
            | C::Truncate { path, .. }
            | C::Chmod { path, .. }
            | C::Chown { path, .. }
            | C::Utimes { path, .. }
            | C::UpdateExtent { path, .. }
            | C::Fallocate { path, .. }
            | C::Fileattr { path, .. }
            | C::EncodedWrite { path, .. }
            | C::EnableVerity { path, .. } => c.settle(path),
            _ => c.settle_all(),
        }
    }

    /// Holds back a directory's UTIMES: the kernel sends a directory's
    /// times again after each change to its entries; only the last ones
    /// matter. Whether it was held back.
    pub(super) fn hold_dir_times(
        &mut self,
        pos: Position,
        path: &[u8],
        atime: Timespec,
        mtime: Timespec,
    ) -> R<bool> {
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        if cur.is_open(path) || !cur.res.is_cached_dir(path) {
            return Ok(false);
        }
        if cur.dir_times.len() >= MAX_DIR_TIMES {
            self.flush_dir_times(|_| true).map_err(|e| e.kind())?;
        }
        let cur = self.cur()?;
        cur.dir_times.insert(path.to_vec(), (atime, mtime, pos));
        self.stats.dir_utimes_deferred += 1;
        Ok(true)
    }

    /// Applies the held-back directory times of the paths `which` selects.
    pub(super) fn flush_dir_times(&mut self, which: impl Fn(&[u8]) -> bool) -> Result<(), Error> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        if cur.dir_times.is_empty() {
            return Ok(());
        }
        let mut due: Vec<(Vec<u8>, (Timespec, Timespec, Position))> = Vec::new();
        cur.dir_times.retain(|p, v| {
            if which(p) {
                due.push((p.clone(), *v));
                false
            } else {
                true
            }
        });
        for (p, (a, m, pos)) in due {
            if let Err(kind) = set_times(cur, &self.dest, &p, a, m) {
                return Err(Error::Command {
                    command: pos.index,
                    offset: pos.offset,
                    cmd: CommandKind::Utimes,
                    path: format!("'{}'", escape(&p)),
                    kind,
                });
            }
        }
        Ok(())
    }
}
