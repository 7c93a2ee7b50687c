//! Durable checkpoints as the engine takes them (see
//! [`crate::recovery::durable`] for what they are): applying what is held
//! back, syncing DEST, recording through the room's types; and applying a
//! window read again after a power loss.
//!
//! Owns: the steps that need the whole [`Receiver`] (the batch, the
//! closing thread, DEST). May call: `crate::recovery`, and the engine's
//! own steps.

use std::io;
use std::os::fd::AsRawFd;

use btrfs_stream::{Command, Position, Timespec};
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat};

use crate::error::{CmdError, Error};
use crate::path::Resolver;
use crate::recovery::durable::{
    self, drop_kept_journal, invalidate, plan, Durable, Held, Hold, Power, Record, RecordFile, Seen,
};
use crate::recovery::Resumable;

use super::current::{err_at, Receiver, R};

impl Receiver<'_> {
    /// Before counted command `cmd` (or END): while a window is read again
    /// after a power loss, holds it (`true`), or at the window's end
    /// applies the window; otherwise takes a durable checkpoint when the
    /// window ends before `cmd`.
    pub(super) fn durable_before(
        &mut self,
        cmd: &Command<'_>,
        pos: Position,
    ) -> Result<bool, Error> {
        let at = |kind: CmdError| err_at(cmd.kind(), pos, b"", kind);
        let Some(c) = self.cur.as_mut() else {
            return Ok(false);
        };
        let own = c.state.received_uuid;
        if let Some(p) = c.recovery.power.as_mut() {
            match p.hold(cmd, pos, own).map_err(|e| at(CmdError::Resume(e)))? {
                Hold::Kept => return Ok(true),
                Hold::Through => return Ok(false),
                Hold::Ends(h) => {
                    self.feed(*h, cmd, pos)?;
                    if let Some(c) = self.cur.as_mut() {
                        c.recovery.power = None;
                    }
                    if !matches!(cmd, Command::End {}) {
                        self.durable_start().map_err(at)?;
                    }
                    return Ok(false);
                }
            }
        }
        if c.recovery
            .durable
            .as_ref()
            .is_some_and(|d| d.due(cmd, pos.len, own))
        {
            self.durable_checkpoint().map_err(|e| match e {
                Cp::Stream(e) => e,
                Cp::Cmd(k) => at(k),
            })?;
        }
        Ok(false)
    }

    /// After `cmd` was applied: counts it in the window.
    pub(super) fn durable_after(&mut self, cmd: &Command<'_>, pos: Position) {
        if let Some(c) = self.cur.as_mut() {
            let own = c.state.received_uuid;
            let r = &mut c.recovery;
            if let (Some(d), None) = (r.durable.as_mut(), r.power.as_ref()) {
                d.note(cmd, pos.len, own);
            }
        }
    }

    /// How a linked or in-place tree's changes wait for what they need
    /// kept: with durable checkpoints, flushed first.
    pub(super) fn write_ahead(&self) -> crate::snapshot::workdir::WriteAhead {
        use crate::snapshot::workdir::WriteAhead;
        // RRECEIVE_TEST_NO_WRITE_AHEAD: for the test that shows a power
        // cut going wrong without it.
        if !self.opts.durable || std::env::var_os("RRECEIVE_TEST_NO_WRITE_AHEAD").is_some() {
            return WriteAhead::Off;
        }
        match nix::sys::statfs::fstatfs(self.dest.fd()) {
            Ok(fs) if fs.filesystem_type() == nix::sys::statfs::BTRFS_SUPER_MAGIC => {
                WriteAhead::Sync
            }
            Ok(fs) if fs.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC => {
                WriteAhead::Flush {
                    renames_keep_data: crate::snapshot::workdir::ext4_renames_keep_data(
                        self.dest.fd(),
                    ),
                }
            }
            _ => WriteAhead::Flush {
                renames_keep_data: false,
            },
        }
    }

    /// Starts durable checkpoints of the subvolume being received with a
    /// first one.
    pub(super) fn durable_start(&mut self) -> R<()> {
        let dest = self.dest.fd();
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        if c.recovery.durable.is_some() {
            return Ok(());
        }
        if !self.opts.durable {
            // No new record: an older one would name a point passed.
            invalidate(dest, &c.name);
            return Ok(());
        }
        let file = match c.recovery.marker.take() {
            Some(m) => m.into_file(),
            None => {
                RecordFile::open(dest, &c.name).map_err(CmdError::io("make the resume record"))?
            }
        };
        c.recovery.durable = Some(Durable::new(file));
        match self.durable_checkpoint() {
            Ok(()) => {
                if let Some(c) = self.cur.as_ref() {
                    drop_kept_journal(self.dest.fd(), &c.name);
                }
                Ok(())
            }
            Err(Cp::Cmd(k)) => Err(k),
            Err(Cp::Stream(e)) => Err(CmdError::Resume(e.to_string())),
        }
    }

    /// A durable checkpoint: what is held back applied, the destination
    /// synced, then the record written and flushed.
    fn durable_checkpoint(&mut self) -> Result<(), Cp> {
        if let Some(p) = self.cur.as_mut().and_then(|c| c.held.create.take()) {
            if let Err(e) = self.flush_batch() {
                self.redo_all([p]);
                return Err(Cp::Stream(e));
            }
            self.materialize_or_redo(p, false).map_err(Cp::Stream)?;
        }
        let put = self.checkpoint().map_err(Cp::Stream)?;
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        let root = c.res.root().as_raw_fd();
        nix::unistd::syncfs(root).map_err(|e| Cp::Cmd(CmdError::os("sync the destination")(e)))?;
        let st = fstat(root).map_err(|e| Cp::Cmd(CmdError::os("stat")(e)))?;
        let mut times: Vec<(Vec<u8>, Timespec, Timespec)> = put
            .into_iter()
            .map(|(p, r)| (p, r.atime, r.mtime))
            .collect();
        if !times.iter().any(|(p, _, _)| p.is_empty()) {
            let ts = |sec: i64, nsec: i64| Timespec {
                sec,
                nsec: u32::try_from(nsec).unwrap_or(0),
            };
            times.push((
                Vec::new(),
                ts(st.st_atime, st.st_atime_nsec),
                ts(st.st_mtime, st.st_mtime_nsec),
            ));
        }
        let rec = Record {
            at: Some(Resumable {
                version: c.recovery.track.version,
                point: c.recovery.track.point(),
            }),
            flags: c.deferred_paths().unwrap_or_default(),
            caps: c.later.caps.clone(),
            times,
            window: c.recovery.durable.as_ref().map(Durable::window_limit),
            journal: None,
        };
        let Some(d) = c.recovery.durable.as_mut() else {
            return Ok(());
        };
        let bytes = d
            .checkpoint(&rec)
            .map_err(|e| Cp::Cmd(CmdError::io("write the resume record")(e)))?;
        self.stats.durable_checkpoints += 1;
        self.stats.durable_bytes += bytes;
        Ok(())
    }

    /// A receive resumed after a kill, before it goes over what the killed
    /// one applied (`found`, from the journal of DEST `id`): the
    /// destination synced, that journal kept beside the record, and the
    /// record saying to resume from it, so that a power loss in between
    /// resumes the same way ([`Receiver::journal_after_power`]).
    pub(super) fn keep_for_power(
        &mut self,
        id: (u64, u64),
        found: &crate::recovery::journal::Found,
    ) {
        let dest = self.dest.fd();
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        if !self.opts.durable {
            invalidate(dest, &c.name);
            return;
        }
        match durable::keep_for_power(dest, c.res.root(), id, &c.name, found) {
            Ok(m) => c.recovery.marker = Some(m),
            Err(e) => {
                invalidate(dest, &c.name);
                self.log.note(format_args!(
                    "a power loss before this receive is past what the killed one applied \
                     would leave it not resumable: {e}"
                ));
            }
        }
    }

    /// Before counted command `n` of a receive resumed after a kill, until
    /// its first durable checkpoint: the record says it may be applied.
    pub(super) fn marker_before(&mut self, n: u64) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        let Some(m) = c.recovery.marker.as_mut() else {
            return;
        };
        if let Err(e) = m.before(n) {
            c.recovery.marker = None;
            invalidate(self.dest.fd(), &c.name);
            self.log.note(format_args!(
                "the resume record could not be written ({e}): a power loss now would leave \
                 this receive not resumable"
            ));
        }
    }

    /// After a power loss cut a receive that had resumed after a kill
    /// (`rec` says so): the killed receive's journal, kept in DEST, is put
    /// back for this boot and mount, to be found as after a kill.
    pub(super) fn journal_after_power(
        &mut self,
        id: (u64, u64),
        mount: u64,
        name: &[u8],
        rec: &Record,
    ) -> io::Result<()> {
        let now = rec.journal.unwrap_or(0);
        durable::restore_kept_journal(self.dest.fd(), id, mount, name, now)?;
        self.log.note(format_args!(
            "resuming after a power loss that cut a receive resumed after a kill: from the \
             killed receive's journal kept in DEST (commands up to {now} maybe applied)"
        ));
        Ok(())
    }

    /// After a power loss: the subvolume resumed at `rec`'s point reads
    /// its window again before applying it.
    pub(super) fn recover_power(&mut self, rec: Record) {
        let Some(at) = rec.at else {
            return;
        };
        let mut flags = Vec::new();
        if let Some(c) = self.cur.as_mut() {
            c.later.caps = rec.caps.clone();
            for (p, a, m) in &rec.times {
                let pos = Position {
                    index: 0,
                    offset: 0,
                    len: 0,
                    version: at.version,
                };
                c.later.dir_times.insert(
                    p,
                    crate::recovery::journal::Record::new(
                        *a,
                        *m,
                        crate::recovery::journal::Source::Before,
                        btrfs_stream::CommandKind::Utimes,
                        pos,
                    ),
                );
            }
            c.recovery.power = Some(Power::new(&rec, at));
            flags = rec.flags.clone();
        }
        self.log.note(format_args!(
            "resuming after a power loss (or the destination's unmount): from the checkpoint \
             after command {}",
            at.point.commands
        ));
        self.defer_flags(flags);
    }

    /// Applies a window read again: what names show was done is not done
    /// again (see [`plan`]). `cmd` at `pos` is where it ended.
    fn feed(&mut self, h: Held, cmd: &Command<'_>, pos: Position) -> Result<(), Error> {
        let at = |why: String| err_at(cmd.kind(), pos, b"", CmdError::Resume(why));
        let (cmds, places) = h.commands().map_err(at)?;
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        let own = c.state.received_uuid;
        let res = &mut c.res;
        let plan = plan(&cmds, own, |p| observe(res, p)).map_err(|why| {
            at(format!(
                "after a power loss: {why} (the destination's filesystem did not keep its \
                 changes in order, or was changed by something else)"
            ))
        })?;
        self.log.note(format_args!(
            "after the checkpoint, {} of {} command(s) had changed the destination's names",
            plan.done,
            cmds.len()
        ));
        for (i, (c, &p)) in cmds.iter().zip(&places).enumerate() {
            if plan.skip[i] {
                if let Some(cur) = self.cur.as_mut() {
                    match *c {
                        Command::Rename { from, to } => cur.later.dir_times.renamed(from, to),
                        Command::Rmdir { path } => cur.later.dir_times.removed(path),
                        _ => {}
                    }
                }
                self.skip_applied(c, p)?;
            } else {
                self.apply(c, p)?;
            }
        }
        Ok(())
    }
}

/// Why a durable checkpoint failed.
enum Cp {
    /// Applying what was held back.
    Stream(Error),
    /// Syncing or recording.
    Cmd(CmdError),
}

/// Whether `path` of the subvolume at `res` is there.
fn observe(res: &mut Resolver, path: &[u8]) -> Seen {
    let Ok((dir, name)) = res.parent(path) else {
        return Seen::Unknown;
    };
    match fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => Seen::Present,
        Err(Errno::ENOENT) => Seen::Absent,
        Err(_) => Seen::Unknown,
    }
}
