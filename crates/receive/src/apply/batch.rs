//! Held-back creates: a create waits for the commands that fold into it
//! (its recipe), and new files whose commands all came wait in a batch,
//! created grouped by directory when it is full or before any other kind of
//! command.

use btrfs_stream::{Command, CommandKind, Position};
use nix::errno::Errno;

use crate::closer::{self, Finish, Job};
use crate::dest::Kind;
use crate::error::{CmdError, Error};
use crate::meta;
use crate::path;

use super::current::{err_at, Flow, Receiver, R};
use super::held::{Create, Pending, Recipe};
use crate::recovery::journal::{Record, Source};

/// Whether a command folded into the held-back create.
pub(super) enum Fold {
    /// Folded in; keep holding.
    Held,
    /// Folded in; create now.
    Now,
    /// Not part of it: create now, then apply the command.
    No,
}

/// Most write data held for a file not created yet.
const RECIPE_BYTES: usize = 1 << 20;
/// New files held back to be created together, grouped by directory.
const BATCH_FILES: usize = 4096;
/// Most write data held for them.
const BATCH_BYTES: usize = 16 << 20;

impl Receiver<'_> {
    /// Whether the new files held in the batch must be created before
    /// `cmd`: before anything but a create (itself held back) or a
    /// directory's UTIMES (held back until END).
    pub(super) fn needs_flush(&self, cmd: &Command<'_>) -> bool {
        let Some(c) = self.cur.as_ref() else {
            return false;
        };
        if c.held.batch.is_empty() {
            return false;
        }
        match *cmd {
            Command::Mkfile { .. }
            | Command::Mkdir { .. }
            | Command::Mknod { .. }
            | Command::Mkfifo { .. }
            | Command::Mksock { .. }
            | Command::Symlink { .. } => false,
            Command::Utimes { path, .. } => {
                !(c.res.is_cached_dir(path)
                    && !c.is_open(path)
                    && (c.later.dir_times.has_room(1) || c.later.dir_times.contains(path)))
            }
            _ => true,
        }
    }

    /// Holds a new file whose commands all came; creates the batch once it
    /// is full.
    pub(super) fn enqueue(&mut self, p: Pending) -> Result<(), Error> {
        let Some(cur) = self.cur.as_mut() else {
            return self.materialize_or_redo(p, true);
        };
        cur.held.bytes += p.recipe.bytes + p.path.len();
        let mut p = p;
        if let Some(j) = cur.later.dir_times.journal.as_mut() {
            p.logged = j.recipe(p.cmd_pos.index, p.last, p.before);
        }
        cur.held.batch.push(p);
        if cur.held.batch.len() >= BATCH_FILES || cur.held.bytes >= BATCH_BYTES {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// Creates the new files held in the batch, grouped by directory (in
    /// stream order within each directory, so each directory's entries come
    /// in the order the stream made them).
    pub(super) fn flush_batch(&mut self) -> Result<(), Error> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        if cur.held.batch.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut cur.held.batch);
        cur.held.bytes = 0;
        // Stable: files of one directory keep their order. Not with
        // durable checkpoints: names must change in the stream's order.
        if cur.recovery.durable.is_none() {
            batch.sort_by(|a, b| path::split(&a.path).0.cmp(path::split(&b.path).0));
        }
        let mut batch = batch.into_iter();
        while let Some(p) = batch.next() {
            if self.opts.max_errors == 1 && self.closer.has_errors() {
                // An earlier file failed on the finishing thread: stop
                // here; a resumed receive makes the rest.
                self.redo_all(std::iter::once(p).chain(batch));
                return self.collect();
            }
            if let Err(e) = self.materialize_or_redo(p, true) {
                if self.opts.max_errors == 1 {
                    self.redo_all(batch);
                    return Err(e);
                }
                self.log.error(&e);
                self.note_error();
                self.extra_errors += 1;
            }
        }
        Ok(())
    }
    /// Records held-back files that a stop has to make again.
    pub(super) fn redo_all(&mut self, held: impl IntoIterator<Item = Pending>) {
        if let Some(c) = self.cur.as_mut() {
            for p in held {
                c.recovery.redo.again(p.mark());
            }
        }
    }

    /// [`Receiver::materialize`], recording `p` to be made again if it
    /// fails.
    pub(super) fn materialize_or_redo(&mut self, p: Pending, complete: bool) -> Result<(), Error> {
        let mark = p.mark();
        let r = self.materialize(p, complete);
        if r.is_err() {
            if let Some(c) = self.cur.as_mut() {
                c.recovery.redo.again(mark);
            }
        }
        r
    }

    pub(super) fn defer(&mut self, pos: Position, path: &[u8], what: Create) -> R<Flow> {
        let cur = self.cur()?;
        let before = cur.recovery.track.point();
        let remake = cur.recovery.redo.remakes(before.commands + 1);
        cur.held.create = Some(Pending {
            cmd_pos: pos,
            path: path.to_vec(),
            what,
            recipe: Recipe::default(),
            last: pos.index,
            before,
            remake,
            logged: None,
        });
        Ok(Flow::Continue)
    }
    /// A held-back create whose next command renames it to `to`: create at
    /// `to` directly, unless something is there (then create and rename).
    /// Folds `cmd` into the held-back create `p` where the result is the
    /// same as applying it after the create.
    pub(super) fn fold(&mut self, p: &mut Pending, cmd: &Command<'_>, pos: Position) -> Fold {
        // A command with a path that is not allowed is never folded in:
        // applied on its own, it fails with its own error.
        if path::confine(cmd).is_err() {
            return Fold::No;
        }
        let is_file = matches!(p.what, Create::File);
        let r = &mut p.recipe;
        match *cmd {
            Command::Rename { from, to } if from == p.path.as_slice() && r.orphan.is_none() => {
                // Creating in the final directory is the same as creating
                // at the orphan name and renaming, unless that directory
                // has a default ACL, which the new inode would inherit.
                let ok = self.cur.as_mut().is_some_and(|c| {
                    let (parent, _) = path::split(to);
                    !c.res.has_default_acl(parent)
                });
                if !ok {
                    return Fold::No;
                }
                r.orphan = Some((std::mem::replace(&mut p.path, to.to_vec()), pos));
                if is_file {
                    Fold::Held
                } else {
                    Fold::Now
                }
            }
            _ if !is_file => Fold::No,
            Command::Write { path, offset, data }
                if path == p.path.as_slice()
                    && r.bytes + data.len() <= RECIPE_BYTES
                    && r.owner.is_none()
                    && r.mode.is_none()
                    && offset
                        .checked_add(data.len() as u64)
                        .is_some_and(|e| e <= i64::MAX as u64) =>
            {
                r.bytes += data.len();
                r.writes.push((offset, data.to_vec(), pos));
                Fold::Held
            }
            Command::Chown { path, uid, gid }
                if path == p.path.as_slice() && r.mode.is_none() && r.owner.is_none() =>
            {
                match (u32::try_from(uid), u32::try_from(gid)) {
                    (Ok(u), Ok(g)) => {
                        r.owner = Some((u, g, pos));
                        Fold::Held
                    }
                    _ => Fold::No,
                }
            }
            Command::Chmod { path, mode } if path == p.path.as_slice() && r.mode.is_none() => {
                r.mode = Some(((mode & 0o7777) as u32, pos));
                Fold::Held
            }
            Command::Utimes {
                path, atime, mtime, ..
            } if path == p.path.as_slice()
                && meta::timespec(atime).is_ok()
                && meta::timespec(mtime).is_ok() =>
            {
                r.times = Some((atime, mtime, pos));
                Fold::Now
            }
            // The kernel's directory-times cache may flush a directory's
            // UTIMES in the middle of a new file's commands. Directory
            // times are held back until END anyway, so it can be taken
            // now without creating the file first.
            Command::Utimes {
                path, atime, mtime, ..
            } if meta::timespec(atime).is_ok() && meta::timespec(mtime).is_ok() => {
                let Some(c) = self.cur.as_mut() else {
                    return Fold::No;
                };
                if !c.res.is_cached_dir(path) || c.is_open(path) {
                    return Fold::No;
                }
                let rec = Record::new(atime, mtime, Source::Utimes, CommandKind::Utimes, pos);
                if !c.later.dir_times.replace(path, rec) {
                    if !c.later.dir_times.has_room(1) {
                        // Making room can fail: not here.
                        return Fold::No;
                    }
                    c.later.dir_times.insert(path, rec);
                }
                self.stats.dir_utimes_deferred += 1;
                Fold::Held
            }
            _ => Fold::No,
        }
    }

    /// Creates a held-back inode and applies what was folded into it. A new
    /// file whose commands all came (`complete`: its UTIMES was folded in)
    /// is finished on the closing thread.
    pub(super) fn materialize(&mut self, p: Pending, complete: bool) -> Result<(), Error> {
        let mark = p.mark();
        let Pending {
            cmd_pos,
            path: at,
            what,
            recipe: r,
            remake,
            logged,
            ..
        } = p;
        let kind = what.kind();
        // The mode can be given at create time when no chown follows that
        // would clear set-id bits (the owner is then already right).
        let me = self.me;
        let chown_expected = r.owner.is_some_and(|(u, g, _)| (u, g) != me);
        let mode = self
            .owners
            .create_mode(r.mode.map(|(m, _)| m), chown_expected);
        let mut direct = true;
        let change = r.orphan.as_ref().map_or(cmd_pos, |o| o.1).index;
        match self.create(&what, &at, mode, change, remake) {
            Ok(()) => {
                if r.orphan.is_some() {
                    self.stats.fused_renames += 1;
                }
            }
            Err(CmdError::Os {
                errno: Errno::EEXIST,
                ..
            }) if r.orphan.is_some() => {
                // Something is at the final name: create at the orphan name
                // and rename over it, as the stream said.
                let Some((orphan, rpos)) = r.orphan.as_ref().map(|(o, p)| (o.clone(), *p)) else {
                    return Err(err_at(kind, cmd_pos, &at, CmdError::NoSubvol));
                };
                direct = false;
                self.create(&what, &orphan, mode, cmd_pos.index, remake)
                    .map_err(|e| err_at(kind, cmd_pos, &orphan, e))?;
                self.rename(&orphan, &at, rpos.index)
                    .map_err(|e| err_at(CommandKind::Rename, rpos, &at, e))?;
                if matches!(what, Create::File) {
                    // Reopen it under its final name.
                    let cur = self
                        .cur
                        .as_mut()
                        .ok_or_else(|| err_at(kind, cmd_pos, &at, CmdError::NoSubvol))?;
                    cur.file(&at).map_err(|e| err_at(kind, cmd_pos, &at, e))?;
                }
            }
            Err(e) => return Err(err_at(kind, cmd_pos, &at, e)),
        }
        if !matches!(what, Create::File) {
            return Ok(());
        }
        let cur = self
            .cur
            .as_mut()
            .ok_or_else(|| err_at(kind, cmd_pos, &at, CmdError::NoSubvol))?;
        let mut finish = Finish {
            path: at.clone(),
            create: cmd_pos,
            writes: r.writes,
            owner: r.owner,
            mode: r.mode,
            times: r.times,
            fake_super: self.owners.recorded(),
            flush: false,
        };
        if complete && direct {
            if let Some(f) = cur.file.take_if(|f| f.path == at) {
                // btrfs writes a new file's data back soon anyway.
                finish.flush = self.dest.kind() == Kind::Btrfs && !finish.writes.is_empty();
                self.stats.bytes_written +=
                    finish.writes.iter().map(|w| w.1.len() as u64).sum::<u64>();
                cur.prune();
                let seq = cur.away.closer.submit(Job {
                    file: f.file,
                    finish: Some(Box::new(finish)),
                });
                cur.recovery
                    .redo
                    .prune(self.closer.done(), self.closer.has_errors());
                cur.recovery.redo.handed(seq, mark);
                if let (Some(j), Some(place)) = (cur.later.dir_times.journal.as_mut(), logged) {
                    j.handed(place, seq);
                }
                cur.away.inflight.push_back((seq, at.clone()));
                cur.away.inflight_paths.insert(at, seq);
                return Ok(());
            }
        }
        let Some(f) = cur.file.as_mut().filter(|f| f.path == at) else {
            return Err(err_at(kind, cmd_pos, &at, CmdError::NotRegular));
        };
        let done = closer::finish_new(&f.file, &finish, true)?;
        for (off, data, _) in &finish.writes {
            let end = off + data.len() as u64;
            f.size = f.size.map(|s| s.max(end));
            self.stats.bytes_written += data.len() as u64;
        }
        f.owner = done.owner;
        self.stats.chowns_skipped += u64::from(done.chown_skipped);
        self.stats.chmods_skipped += u64::from(done.chmod_skipped);
        Ok(())
    }
}
