//! The engine's side of the snapshot strategy ([`crate::snapshot`]): the
//! subvolume being received as the strategy's [`Tree`], and the calls
//! before a command changes anything (the guard) and after an in-place
//! flag refused it.
//!
//! May call: `current` (the state), `crate::snapshot`, `crate::error`.

use std::fs::File;
use std::os::fd::BorrowedFd;

use btrfs_stream::Command;

use crate::error::CmdError;
use crate::snapshot::{Strategy, Tree};

use super::current::{Current, Receiver, R, RESOLVE};

impl Tree for Current {
    fn parent<'p>(&mut self, path: &'p [u8]) -> R<(BorrowedFd<'_>, &'p [u8])> {
        self.res.parent(path).map_err(CmdError::os(RESOLVE))
    }

    fn root(&self) -> BorrowedFd<'_> {
        self.res.root()
    }

    fn open_file(&mut self, path: &[u8]) -> R<File> {
        let f = self.file(path)?;
        f.file.try_clone().map_err(CmdError::io("dup"))
    }

    fn close(&mut self, path: &[u8]) {
        if self.is_open(path) {
            self.retire();
        }
    }

    fn deferred(&mut self) -> &mut Vec<(File, u32)> {
        &mut self.later.deferred
    }

    fn journal_flags(&mut self, path: &[u8], bits: u32) {
        if let Some(j) = self.later.dir_times.journal.as_mut() {
            j.flags(path, bits);
        }
    }
}

impl Current {
    /// Runs `f` with the snapshot strategy and the rest of the state apart.
    fn with_snap<T>(&mut self, f: impl FnOnce(&mut Strategy, &mut Current) -> T) -> T {
        let mut snap = std::mem::take(&mut self.snap);
        let r = f(&mut snap, self);
        self.snap = snap;
        r
    }
}

impl Receiver<'_> {
    /// Whether `e`, from applying `cmd`, is an in-place subvolume's flag
    /// refusing the change, now lifted: then `cmd` is applied again.
    pub(super) fn lifted_for(&mut self, cmd: &Command<'_>, e: &CmdError) -> bool {
        if !matches!(
            e,
            CmdError::Os {
                errno: nix::errno::Errno::EPERM,
                ..
            }
        ) {
            return false;
        }
        let Some(cur) = self.cur.as_mut() else {
            return false;
        };
        cur.retire();
        cur.with_snap(|s, t| s.lift(cmd, t))
    }

    /// Before `cmd` is applied: keeps or unshares what it would change of
    /// the parent's.
    pub(super) fn guard(&mut self, cmd: &Command<'_>) -> R<()> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        cur.with_snap(|s, t| s.guard(cmd, t))
    }
}
