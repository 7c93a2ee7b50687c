//! The engine's side of recovery: the one call before each command and
//! the one after it ([`Receiver::recovery_before`],
//! [`Receiver::recovery_after`]), and what needs the whole receiver: the
//! journal's checkpoints (everything held back applied first), a clean
//! stop ([`Receiver::suspend`]), counting what a resumed receive applied
//! already ([`Receiver::skip_applied`]).
//!
//! Owns: when recovery is asked, in the engine. May call: `crate::recovery`
//! (which holds the state and the records), the engine's own steps.

use std::os::fd::AsRawFd;

use btrfs_stream::{Command, Position};

use crate::error::Error;
use crate::recovery::journal::{Journal, Record};
use crate::recovery::track::Track;
use crate::recovery::{durable, side, Resumable, Step};
use crate::subvol::SubvolState;

use super::current::{Flow, Receiver};

impl Receiver<'_> {
    /// Before `cmd` at `pos`: what a resumed receive applied already is
    /// counted, not applied again ([`Step::Skip`]), a window read again
    /// after a power loss holds it ([`Step::Skip`]); a durable checkpoint
    /// comes first when one is due, and the journal and resume record say
    /// which command is being applied.
    pub(super) fn recovery_before(
        &mut self,
        cmd: &Command<'_>,
        pos: Position,
    ) -> Result<Step, Error> {
        let counted = !matches!(
            cmd,
            Command::Subvol { .. }
                | Command::Snapshot { .. }
                | Command::Resume { .. }
                | Command::End {}
        );
        // Whether a resumed receive applied this command already.
        let before = self.cur.as_mut().map(|c| {
            let n = c.recovery.next();
            c.recovery.redo.applied_before(n)
        });
        if let Some(before) = before {
            if before.is_none() && self.cur.as_ref().is_some_and(|c| c.recovery.side_kept) {
                self.end_of_replay(pos)?;
            }
            let end = matches!(cmd, Command::End {});
            if (counted || end) && before.is_none() && self.durable_before(cmd, pos)? {
                return Ok(Step::Skip);
            }
            if counted && before == Some(true) {
                self.skip_applied(cmd, pos)?;
                self.journal_after(pos)?;
                return Ok(Step::Skip);
            }
            if let Some(c) = self.cur.as_mut().filter(|_| counted) {
                let n = c.recovery.next();
                if let Some(j) = c.later.dir_times.journal.as_mut() {
                    j.now(n);
                }
                if c.recovery.marker.is_some() {
                    self.marker_before(n);
                }
            }
        }
        if matches!(cmd, Command::Subvol { .. } | Command::Snapshot { .. }) && self.resume.is_none()
        {
            // Where a resumed stream would start once this is applied: the
            // journal's first checkpoint, written as the subvolume is made.
            let mut t = Track::default();
            t.add(cmd, pos);
            self.first = Some((t.point(), pos.version));
        }
        Ok(Step::Apply)
    }

    /// After `cmd` at `pos` was applied (`res` says how it went): counts
    /// it, in the window of durable checkpoints too, and tells the journal
    /// (a checkpoint when one is due).
    pub(super) fn recovery_after(
        &mut self,
        cmd: &Command<'_>,
        pos: Position,
        res: &Result<Flow, Error>,
    ) -> Result<(), Error> {
        if res.is_err() {
            return Ok(());
        }
        if let Some(c) = self.cur.as_mut() {
            match cmd {
                Command::Subvol { .. } | Command::Snapshot { .. } if c.recovery.track.count > 0 => {
                }
                Command::Resume { .. } | Command::End {} => {}
                _ => c.recovery.track.add(cmd, pos),
            }
        }
        self.durable_after(cmd, pos);
        self.journal_after(pos)
    }

    /// The mount DEST is on (see [`crate::recovery::journal`]).
    pub(super) fn dest_mount(&self) -> u64 {
        crate::ioctl::mount_id(self.dest.fd()).unwrap_or(0)
    }

    /// DEST's device and inode (what its journals are named by).
    pub(super) fn dest_id(&self) -> (u64, u64) {
        crate::recovery::dest_id(self.dest.fd())
    }

    /// Starts the journal of the subvolume just made, with its first
    /// checkpoint: right after its SUBVOL or SNAPSHOT (a snapshot's copy of
    /// its parent made), so that a receive killed from then on resumes.
    pub(super) fn start_journal(&mut self) {
        let Some((p, version)) = self.first.take() else {
            return;
        };
        let (id, mount) = (self.dest_id(), self.dest_mount());
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        let Some(mut j) = Journal::create(
            id,
            self.dest.fd(),
            &c.name,
            c.state.received_uuid,
            c.state.ctransid,
            version,
            mount,
        ) else {
            c.recovery.redo.no_journal = true;
            self.log.note(format_args!(
                "no journal can be kept: a receive killed outright cannot be resumed"
            ));
            return;
        };
        let flags = c.deferred_paths().unwrap_or_default();
        j.checkpoint(p, &flags, None);
        c.later.dir_times.journal = Some(j);
    }

    /// After each command applied: what the journal says is applied, and
    /// a checkpoint when one is due (the first right after SUBVOL or
    /// SNAPSHOT).
    pub(super) fn journal_after(&mut self, pos: Position) -> Result<(), Error> {
        let Some(c) = self.cur.as_ref() else {
            return Ok(());
        };
        if c.recovery.durable.is_none()
            && self.opts.durable
            && c.recovery.power.is_none()
            && !c.recovery.redo.replaying()
            && c.held.create.is_none()
            && c.recovery.track.count > 0
        {
            let kind = self.now.0;
            self.durable_start()
                .map_err(|k| super::current::err_at(kind, pos, b"", k))?;
        }
        let done = self.closer.done();
        let Some(c) = self.cur.as_ref() else {
            return Ok(());
        };
        let starts = c.later.dir_times.journal.is_none()
            && !c.recovery.redo.no_journal
            && !c.recovery.redo.replaying()
            && c.recovery.power.is_none()
            && c.held.create.is_none()
            && c.recovery.track.count > 0;
        // Only when one is made: two system calls.
        let (id, mount) = if starts {
            (self.dest_id(), self.dest_mount())
        } else {
            ((0, 0), 0)
        };
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        if c.recovery.track.count == 0 {
            return Ok(());
        }
        let pending = c.held.create.as_ref().map(super::held::Pending::before);
        // ENCODED_WRITEs still being decoded are not applied yet.
        if c.away.decoding.is_some() && c.away.closer.decoder().idle() {
            c.away.decoding = None;
        }
        let decoding = c.away.decoding.as_ref().map(|r| r.before);
        let Some(j) = c.later.dir_times.journal.as_mut() else {
            if !starts {
                return Ok(());
            }
            c.later.dir_times.journal = Journal::create(
                id,
                self.dest.fd(),
                &c.name,
                c.state.received_uuid,
                c.state.ctransid,
                c.recovery.track.version,
                mount,
            );
            if c.later.dir_times.journal.is_none() {
                c.recovery.redo.no_journal = true;
                self.log.note(format_args!(
                    "no journal can be kept: a receive killed outright cannot be resumed"
                ));
                return Ok(());
            }
            return self.checkpoint().map(drop);
        };
        let until = pending.unwrap_or(c.recovery.track.count);
        j.applied(decoding.map_or(until, |d| d.min(until)), done);
        if pending.is_none()
            && !c.recovery.redo.replaying()
            && c.recovery.power.is_none()
            && j.due(pos.offset + pos.len)
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// A checkpoint: everything held back applied (but the flags and
    /// capability due at END, which the journal keeps), so that a killed
    /// receive resumes from here.
    pub(super) fn checkpoint(&mut self) -> Result<Vec<(Vec<u8>, Record)>, Error> {
        self.flush_batch()?;
        if let Some(c) = self.cur.as_mut() {
            c.settle_all();
        }
        self.closer.wait();
        self.collect()?;
        let put = self.apply_dir_times_listed()?;
        let Some(c) = self.cur.as_mut() else {
            return Ok(put);
        };
        let flags = c.deferred_paths().unwrap_or_default();
        let p = c.recovery.track.point();
        let caps = c.later.caps.clone();
        if let Some(j) = c.later.dir_times.journal.as_mut() {
            j.checkpoint(p, &flags, caps.as_ref());
        }
        Ok(put)
    }

    /// A command counted in the stream, which the stopped receive this one
    /// resumes had applied already: counted again, not applied again.
    pub(super) fn skip_applied(&mut self, cmd: &Command<'_>, pos: Position) -> Result<Flow, Error> {
        // What is held back comes first, as before any other command.
        if let Some(p) = self.cur.as_mut().and_then(|c| c.held.create.take()) {
            if let Err(e) = self.flush_batch() {
                self.redo_all([p]);
                return Err(e);
            }
            self.materialize_or_redo(p, false)?;
        }
        self.flush_batch()?;
        self.stats.commands += 1;
        self.now = (cmd.kind(), pos);
        if let Some(c) = self.cur.as_mut() {
            c.recovery.track.add(cmd, pos);
        }
        Ok(Flow::Continue)
    }

    /// After the stream stopped early: applies what is held back, syncs,
    /// and records where the subvolume being received stopped, so that a
    /// resumed stream can complete it. Returns its state, or why it cannot
    /// be resumed. The subvolume is closed either way.
    ///
    /// New files whose making failed (on this thread or another, say for
    /// ENOSPC) are made again by the resumed receive: it resumes before the
    /// first of them, and the side file says which of the commands after
    /// that were applied.
    pub(crate) fn suspend(&mut self) -> Result<SubvolState, String> {
        let Some(c) = self.cur.as_ref() else {
            return Err("no subvolume was being received".into());
        };
        if let Some(at) = c.recovery.power.as_ref().map(|p| p.at) {
            // Stopped while a window after a power loss was read again or
            // applied: its durable record still says where to resume.
            self.closer.wait();
            let _ = self.collect();
            let Some(c) = self.cur.take() else {
                return Err("no subvolume was being received".into());
            };
            let mut state = c.state.clone();
            state.resume = Some(at);
            let _ = nix::unistd::syncfs(self.dest.fd().as_raw_fd());
            return Ok(state);
        }
        if c.recovery.track.broken {
            return Err("the stream's fingerprint could not be taken".into());
        }
        if c.errors > 0 {
            return Err(
                "a command failed and later ones were applied after it (-E allowed more than one error)"
                    .into(),
            );
        }
        if c.recovery.track.count == 0 {
            return Err("not even its first command was applied".into());
        }
        if c.snap.in_place_unchanged() {
            // Nothing changed yet: the parent is given back instead.
            return Err("it was to be received in place and nothing was changed yet".into());
        }
        // What batches and the closing thread hold. What fails is recorded
        // to be made again; after a failure, nothing more is made.
        let failing = self.closer.has_errors() || c.recovery.redo.failing();
        if failing {
            if let Some(c) = self.cur.as_mut() {
                let held: Vec<_> = c.held.batch.drain(..).chain(c.held.create.take()).collect();
                c.held.bytes = 0;
                self.redo_all(held);
            }
        } else {
            let _ = self.flush_batch();
            if let Some(p) = self.cur.as_mut().and_then(|c| c.held.create.take()) {
                let _ = self.materialize_or_redo(p, false);
            }
        }
        if let Some(c) = self.cur.as_mut() {
            c.retire();
            c.settle_all();
        }
        self.closer.wait();
        let _ = self.collect();
        if let Err(e) = self.apply_dir_times() {
            return Err(format!("applying the directories' times failed: {e}"));
        }
        self.closer.wait();
        let _ = self.collect();
        let Some(c) = self.cur.as_mut() else {
            return Err("no subvolume was being received".into());
        };
        c.data.sources.clear();
        let redo = std::mem::take(&mut c.recovery.redo);
        let (point, applied) = redo.stop(&c.recovery.track)?;
        let mut state = c.state.clone();
        let resumable = Resumable {
            version: c.recovery.track.version,
            point,
        };
        state.resume = Some(resumable);
        let Some(mut c) = self.cur.take() else {
            return Err("no subvolume was being received".into());
        };
        let journal = c.later.dir_times.journal.take();
        // The side file (written in room kept for it) holds the point;
        // the state too where it can still be written.
        let side = c
            .deferred_paths()
            .and_then(|flags| {
                let stop = side::Stop {
                    at: resumable,
                    flags: &flags,
                    caps: c.later.caps.as_ref(),
                    applied: &applied,
                };
                side::save(self.dest.fd(), &c.name, &stop)
            })
            .and_then(|()| nix::unistd::syncfs(c.res.root().as_raw_fd()).map_err(Into::into));
        if let Err(e) = side {
            let why = format!("recording where it stopped failed: {e}");
            c.later.dir_times.journal = journal;
            self.cur = Some(c);
            return Err(why);
        }
        if let Some(j) = journal {
            j.remove();
        }
        // The side file's point is the one now.
        durable::invalidate(self.dest.fd(), &c.name);
        let _ = self.dest.set_state(&c.name, &state);
        // The state must be there when the token is asked for.
        let _ = nix::unistd::syncfs(self.dest.fd().as_raw_fd());
        Ok(state)
    }
}
