//! Taking one command through its steps ([`Receiver::apply`]): recovery
//! before it (what a resumed receive already applied), the held-back create, the batch, the
//! closing thread, then the verb; and the receiver's life around them
//! (locks, the end, an abort).

use std::sync::Arc;

use btrfs_stream::{Command, CommandKind, Position};

use crate::closer::Closer;
use crate::dest::{Dest, Kind};
use crate::error::{escape, CmdError, Error};
use crate::ioctl;
use crate::options::{Options, Stats};
use crate::path::{self};
use crate::report::Log;

use super::batch::Fold;
use super::current::{Current, Flow, Receiver, R};
use super::held::Create;
use crate::recovery::{self, Step};

impl<'o> Receiver<'o> {
    /// A receiver writing into `dest`.
    pub(crate) fn new(opts: &'o Options, dest: Dest, log: Log<'o>) -> Receiver<'o> {
        // Off btrfs, data is synced in the background (see crate::closer).
        let background_sync = dest.kind() != Kind::Btrfs;
        Receiver {
            opts,
            dest,
            cur: None,
            log,
            stats: Stats::default(),
            skipped: Default::default(),
            extra_errors: 0,
            closer: Arc::new(Closer::new(background_sync)),
            me: (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            ),
            owners: crate::fake_super::Owners::of(opts.fake_super),
            now: (
                CommandKind::End,
                Position {
                    index: 0,
                    offset: 0,
                    len: 0,
                    version: 0,
                },
            ),
            told_copy: false,
            told_no_locks: false,
            told_dest: false,
            resume: None,
            first: None,
            next_lock: None,
        }
    }

    /// `DEST/<name>` of the subvolume being received, if any.
    pub(crate) fn current_path(&self) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        self.cur
            .as_ref()
            .map(|c| self.dest.path().join(std::ffi::OsStr::from_bytes(&c.name)))
    }

    /// The name in DEST of the subvolume being received, if any.
    pub(crate) fn current_name(&self) -> Option<Vec<u8>> {
        self.cur.as_ref().map(|c| c.name.clone())
    }

    /// Counts a failed command against the current subvolume.
    pub(crate) fn note_error(&mut self) {
        if let Some(c) = self.cur.as_mut() {
            c.errors += 1;
        }
    }

    /// Whether the subvolume being received holds nothing of its stream
    /// yet: made by this receive (not resumed), only its first command
    /// applied.
    pub(crate) fn unstarted(&self) -> bool {
        self.cur
            .as_ref()
            .is_some_and(|c| c.recovery.track.unstarted())
    }

    /// After [`Receiver::abort`]: removes the subvolume being received
    /// with its side files and journal, so that receiving the same stream
    /// again starts it over (`false` when it could not be removed).
    pub(crate) fn discard(&mut self) -> bool {
        let Some(name) = self.current_name() else {
            return false;
        };
        if self.dest.delete_incomplete_held(&name).is_err() {
            return false;
        }
        self.cur = None;
        true
    }

    /// Closes everything after a failure; the subvolume stays incomplete.
    /// A parent taken over in place and not changed yet is given back:
    /// then its name in DEST is returned.
    pub(crate) fn abort(&mut self) -> Option<Vec<u8>> {
        if let Some(c) = self.cur.as_mut() {
            c.retire();
            c.held.create = None;
            c.held.batch.clear();
            if let Some(j) = c.later.dir_times.journal.take() {
                j.remove();
            }
            recovery::durable::forget(self.dest.fd(), &c.name);
            c.recovery.durable = None;
            c.recovery.power = None;
            c.later.dir_times.clear();
            c.settle_all();
        }
        // Later failures of files handed over are not reported: applying
        // the commands one by one would have stopped before them.
        self.closer.wait();
        let _ = self.closer.take_errors();
        self.merge_counts();
        let c = self.cur.as_mut()?;
        let taken = c.snap.give_back(self.dest.fd())?;
        let name = c.name.clone();
        // Held until the parent is back under its name.
        let _locks = std::mem::take(&mut c.locks);
        self.cur = None;
        if self.dest.give_back(&name, &taken).is_ok() {
            recovery::side::forget(self.dest.fd(), &name);
            return Some(taken.parent);
        }
        None
    }

    /// The parent the subvolume being received took over in place.
    pub(crate) fn in_place_of(&self) -> Option<&[u8]> {
        self.cur.as_ref()?.snap.taken_parent()
    }

    /// Finds what DEST's filesystem can do, and says it with `-v`.
    pub(crate) fn probe_dest(&mut self) {
        self.dest.probe();
    }

    /// Says what DEST's filesystem can do ([`Receiver::probe_dest`]) once,
    /// after the first `At subvol` line (which comes first, as from btrfs
    /// receive).
    pub(crate) fn say_dest(&mut self) {
        if self.told_dest {
            return;
        }
        self.told_dest = true;
        let Some(caps) = self.dest.caps().cloned() else {
            return;
        };
        self.log.note(format_args!("DEST is {caps}"));
        if !caps.time_ns {
            self.log.warning(format_args!(
                "{} ({}) keeps times to the second only: the nanoseconds of every time are lost",
                self.dest.path().display(),
                caps.fs
            ));
        }
        if !caps.time_pre_1970 {
            self.log.warning(format_args!(
                "{} ({}) cannot keep times before 1970 (SFTP carries them as unsigned 32-bit \
                 seconds): such times come out wrong",
                self.dest.path().display(),
                caps.fs
            ));
        }
        if !caps.links_shown {
            self.log.warning(format_args!(
                "{} ({}) does not show hard links (each name has a link count of 1): a parent \
                 copied through it keeps each name of a file as a file of its own, and --link \
                 is refused; --in-place keeps them",
                self.dest.path().display(),
                caps.fs
            ));
        }
        if !caps.names_fresh {
            self.log.warning(format_args!(
                "{} ({}) shows a change made through one name of a file under its other names \
                 only later (attributes cached by name): a parent copied through it may copy \
                 stale sizes and modes; mount sshfs with -o {}",
                self.dest.path().display(),
                caps.fs,
                crate::probe::SSHFS_FRESH
            ));
        }
    }

    /// Waits for the files handed to the closing thread and reports their
    /// failures (call after the last command).
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        self.flush_batch()?;
        if let Some(c) = self.cur.as_mut() {
            c.settle_all();
        }
        self.closer.wait();
        self.collect()
    }

    /// Counts `n` items of `kind` this destination cannot store.
    pub(super) fn skip(&mut self, kind: &str, n: u64) {
        self.stats.skipped += n;
        self.skipped.add(kind, n);
    }

    pub(super) fn merge_counts(&mut self) {
        let c = self.closer.take_counts();
        self.stats.chowns_skipped += c.chowns_skipped;
        self.stats.chmods_skipped += c.chmods_skipped;
        self.stats.encoded_decoded += c.encoded_decoded;
        self.stats.bytes_written += c.bytes_decoded;
    }

    /// Takes the failures of files the closing thread finished. Each counts
    /// as a failed command; with `-E 1` the first one stops the receive.
    pub(super) fn collect(&mut self) -> Result<(), Error> {
        self.merge_counts();
        let errs = self.closer.take_errors();
        if let Some(c) = self.cur.as_mut() {
            if !errs.is_empty() {
                // A failed write (say an ENCODED_WRITE decoded on another
                // thread) did not make the file as large as counted.
                if let Some(f) = c.file.as_mut() {
                    f.size = None;
                }
            }
            for e in &errs {
                if let Error::Command { command, .. } = e {
                    c.recovery.redo.failed(*command);
                }
            }
        }
        let mut errs = errs.into_iter();
        if self.opts.max_errors == 1 {
            if let Some(e) = errs.next() {
                return Err(e);
            }
        }
        for e in errs {
            self.log.error(&e);
            self.note_error();
            self.extra_errors += 1;
        }
        Ok(())
    }

    /// Takes the lock of the subvolume `cmd` starts (SUBVOL or SNAPSHOT),
    /// before anything looks at what DEST holds of it: another rreceive
    /// receiving it stops this receive ([`Error::Busy`]) or, with
    /// [`Options::wait`], is waited for.
    pub(crate) fn lock_next(&mut self, cmd: &Command<'_>, pos: Position) -> Result<(), Error> {
        let (Command::Subvol { path, .. } | Command::Snapshot { path, .. }) = *cmd else {
            return Ok(());
        };
        // A name that is refused is refused by the command itself.
        if path::confine(cmd).is_err() {
            return Ok(());
        }
        let held = self.lock(path).map_err(|e| e.at(cmd, pos))?;
        self.next_lock = Some((path.to_vec(), held));
        Ok(())
    }

    /// The lock of subvolume `name` in DEST: the one [`Receiver::lock_next`]
    /// took for it, or taken now.
    pub(super) fn lock(&mut self, name: &[u8]) -> R<crate::lock::Held> {
        if self.next_lock.as_ref().is_some_and(|(n, _)| n == name) {
            if let Some((_, held)) = self.next_lock.take() {
                return Ok(held);
            }
        }
        let log = &self.log;
        let tell = self.opts.tell_waiting;
        let waiting = |h: &crate::lock::Holder| {
            let args = format_args!("waiting for rreceive ({h}) receiving {}", escape(name));
            if tell && log.level < 2 {
                log.report.message(crate::report::Level::Notice, args);
            } else {
                log.note(args);
            }
        };
        let wait = if self.opts.wait {
            crate::lock::Wait::Yes {
                stop: self.opts.stop.as_ref(),
                waiting: &waiting,
            }
        } else {
            crate::lock::Wait::No
        };
        let held = crate::lock::acquire(self.dest.fd(), self.dest.path(), name, wait).map_err(
            |e| match e {
                crate::lock::LockError::Busy(b) => CmdError::Busy(Box::new(b)),
                crate::lock::LockError::Io(err) => CmdError::InDest {
                    op: "lock the subvolume",
                    dest: self.dest.path().display().to_string(),
                    err,
                },
            },
        )?;
        if !held.locked() && !self.told_no_locks {
            self.told_no_locks = true;
            self.log.note(format_args!(
                "{} has no file locks: a second rreceive of the same subvolume is not kept out",
                self.dest.path().display()
            ));
        }
        Ok(held)
    }

    /// Whether a subvolume is being received (after its SUBVOL or
    /// SNAPSHOT, before its END).
    pub(crate) fn in_subvol(&self) -> bool {
        self.cur.is_some()
    }

    /// Applies one command.
    pub(crate) fn apply(&mut self, cmd: &Command<'_>, pos: Position) -> Result<Flow, Error> {
        self.settle_decoding(cmd);
        // Failures of earlier commands, finished on the closing thread,
        // come first.
        if self.closer.has_errors() {
            self.collect()?;
        }
        if self.recovery_before(cmd, pos)? == Step::Skip {
            return Ok(Flow::Continue);
        }
        test_kill(pos.index, 0);
        let res = self.apply_one(cmd, pos);
        test_kill(pos.index, 1);
        if res.is_err() {
            self.closer.wait();
            self.collect()?;
        }
        self.recovery_after(cmd, pos, &res)?;
        res
    }

    pub(super) fn apply_one(&mut self, cmd: &Command<'_>, pos: Position) -> Result<Flow, Error> {
        self.stats.commands += 1;
        self.now = (cmd.kind(), pos);
        self.log.command(cmd, pos);
        // A create held back from earlier commands comes first.
        if let Some(mut p) = self.cur.as_mut().and_then(|c| c.held.create.take()) {
            let fold = self.fold(&mut p, cmd, pos);
            if !matches!(fold, Fold::No) {
                p.last = pos.index;
            }
            match fold {
                Fold::Held => {
                    if let Some(c) = self.cur.as_mut() {
                        c.held.create = Some(p);
                    }
                    return Ok(Flow::Continue);
                }
                Fold::Now if matches!(p.what, Create::File) => {
                    self.enqueue(p)?;
                    return Ok(Flow::Continue);
                }
                Fold::Now => {
                    if let Err(e) = self.flush_batch() {
                        self.redo_all([p]);
                        return Err(e);
                    }
                    self.materialize_or_redo(p, true)?;
                    return Ok(Flow::Continue);
                }
                Fold::No => {
                    if let Err(e) = self.flush_batch() {
                        self.redo_all([p]);
                        return Err(e);
                    }
                    if let Err(e) = self.materialize_or_redo(p, false) {
                        if self.opts.max_errors == 1 {
                            return Err(e);
                        }
                        // Report the held-back command's error and still
                        // apply this one, as if they had come one by one.
                        self.log.error(&e);
                        self.note_error();
                        self.extra_errors += 1;
                    }
                }
            }
        }
        if self.needs_flush(cmd) {
            self.flush_batch()?;
        }
        self.settle_for(cmd);
        // A file this command waited for may have failed: then it is not
        // applied (a resumed receive makes that file again first).
        if self.opts.max_errors == 1 && self.closer.has_errors() {
            self.collect()?;
        }
        let done = self.closer.done();
        if let Some(j) = self
            .cur
            .as_mut()
            .and_then(|c| c.later.dir_times.journal.as_mut())
        {
            j.finished(done);
        }
        if let Command::End {} = cmd {
            // Failed files keep the subvolume from being marked complete.
            self.closer.wait();
            self.collect()?;
            self.apply_dir_times()?;
        }
        self.dispatch(cmd, pos).map_err(|e| e.at(cmd, pos))
    }

    pub(super) fn cur(&mut self) -> R<&mut Current> {
        self.cur.as_mut().ok_or(CmdError::NoSubvol)
    }

    /// Applies one command. Every path it carries is checked first
    /// ([`path::confine`]); the functions below take checked paths.
    pub(super) fn dispatch(&mut self, cmd: &Command<'_>, pos: Position) -> R<Flow> {
        path::confine(cmd)?;
        // What the guard keeps is kept once, so both may run again.
        match self
            .guard(cmd)
            .and_then(|()| self.dispatch_checked(cmd, pos))
        {
            Err(e) if self.lifted_for(cmd, &e) => {
                self.guard(cmd)?;
                self.dispatch_checked(cmd, pos)
            }
            r => r,
        }
    }

    pub(super) fn dispatch_checked(&mut self, cmd: &Command<'_>, pos: Position) -> R<Flow> {
        use Command as C;
        match *cmd {
            C::Subvol {
                path,
                uuid,
                ctransid,
            } => match self.resume.take() {
                Some(p) => self.resume_subvol(path, uuid, ctransid, None, p, pos),
                None => self.subvol(path, uuid, ctransid),
            },
            C::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => match self.resume.take() {
                Some(p) => self.resume_subvol(
                    path,
                    uuid,
                    ctransid,
                    Some((clone_uuid, clone_ctransid)),
                    p,
                    pos,
                ),
                None => self.snapshot(path, uuid, ctransid, clone_uuid, clone_ctransid),
            },
            C::Resume {
                commands,
                offset,
                digest,
            } => self.resume_mark(btrfs_stream::resume::Point {
                commands,
                offset,
                digest: digest.as_u128(),
            }),
            C::End {} => self.end(),
            C::Mkfile { path, .. } => self.defer(pos, path, Create::File),
            C::Mkdir { path, .. } => self.defer(pos, path, Create::Dir),
            C::Mknod {
                path, rdev, mode, ..
            } => self.defer(pos, path, Create::Nod { mode, rdev }),
            C::Mkfifo { path, .. } => self.defer(pos, path, Create::Fifo),
            C::Mksock { path, .. } => self.defer(pos, path, Create::Sock),
            C::Symlink { path, target, .. } => {
                self.defer(pos, path, Create::Symlink(target.to_vec()))
            }
            C::Rename { from, to } => self.rename(from, to, pos.index),
            C::Link { path, target } => self.link(path, target),
            C::Unlink { path } => self.unlink(path, false),
            C::Rmdir { path } => self.unlink(path, true),
            C::SetXattr { path, name, data } => self.set_xattr(path, name, data),
            C::RemoveXattr { path, name } => self.remove_xattr(path, name),
            C::Write { path, offset, data } => self.write(path, offset, data),
            C::Clone {
                offset,
                len,
                path,
                clone_uuid,
                clone_path,
                clone_offset,
                ..
            } => self.clone_range(path, offset, len, clone_uuid, clone_path, clone_offset),
            C::Truncate { path, size } => self.truncate(path, size),
            C::Chmod { path, mode } => self.chmod(path, mode),
            C::Chown { path, uid, gid } => self.chown(path, uid, gid),
            C::Utimes {
                path, atime, mtime, ..
            } => self.utimes(pos, path, atime, mtime),
            C::UpdateExtent { .. } => self.update_extent(),
            C::Fallocate {
                path,
                mode,
                offset,
                len,
            } => self.fallocate(path, mode, offset, len),
            C::Fileattr { path, attr } => self.fileattr(path, attr),
            C::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                unencoded_len,
                unencoded_offset,
                compression,
                encryption,
                data,
            } => self.encoded_write(
                path,
                offset,
                ioctl::EncodedWrite {
                    offset,
                    len: unencoded_file_len,
                    unencoded_len,
                    unencoded_offset,
                    compression: compression.unwrap_or(0),
                    encryption: encryption.unwrap_or(0),
                    data,
                },
            ),
            C::EnableVerity {
                path,
                algorithm,
                block_size,
                salt,
                sig,
            } => self.enable_verity(path, algorithm, block_size, salt, sig),
        }
    }
}

/// Fault injection for the tests of resuming after a kill:
/// `RRECEIVE_TEST_KILL=N:PHASE` makes the receive kill itself (SIGKILL)
/// at command number N, before applying it (PHASE 0) or after, before it
/// is recorded as applied (PHASE 1). For the power-cut tests,
/// `RRECEIVE_TEST_STOP=N,M,...` (ascending) stops it (SIGSTOP) before the
/// first command applied at or past each of those (a resumed receive does
/// not apply what the stopped one did), so that a test can sync or cut the
/// power there.
pub(super) fn test_kill(index: u64, phase: u8) {
    static STOPS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let stops = STOPS.get_or_init(|| {
        std::env::var("RRECEIVE_TEST_STOP")
            .map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default()
    });
    let next = NEXT.load(std::sync::atomic::Ordering::Relaxed);
    if phase == 0 && stops.get(next).is_some_and(|&n| index >= n) {
        NEXT.store(next + 1, std::sync::atomic::Ordering::Relaxed);
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
    static AT: std::sync::OnceLock<Option<(u64, u8)>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| {
        let v = std::env::var("RRECEIVE_TEST_KILL").ok()?;
        let (n, p) = v.split_once(':')?;
        Some((n.parse().ok()?, p.parse().ok()?))
    });
    if *at == Some((index, phase)) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
