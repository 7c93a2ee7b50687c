//! What waits for what: files handed to the closing thread are waited for
//! only by the commands that touch them, ENCODED_WRITEs being decoded
//! ([`crate::decode`]) by every command but another one to the same file at
//! another range, and directory times are held back until the subvolume
//! ends ([`super::dirtimes`]).

use std::os::fd::AsRawFd;

use btrfs_stream::{Command, CommandKind, Position, Timespec};
use nix::sys::stat::{fstat, FileStat};

use crate::dest::Dest;
use crate::error::{escape, CmdError, Error};
use crate::options::Stats;
use crate::path;

use super::current::{Current, Receiver, R};
use super::inode::set_times;
use crate::recovery::journal::{Record, Source};

impl Current {
    /// Forgets handed-over files the closing thread is done with.
    pub(super) fn prune(&mut self) {
        if self.away.inflight.is_empty() {
            return;
        }
        let done = self.away.closer.done();
        while let Some((seq, _)) = self.away.inflight.front() {
            if *seq > done {
                break;
            }
            if let Some((seq, p)) = self.away.inflight.pop_front() {
                if self.away.inflight_paths.get(&p) == Some(&seq) {
                    self.away.inflight_paths.remove(&p);
                }
            }
        }
    }

    /// Waits until the closing thread is done with the file at `path`.
    fn settle(&mut self, path: &[u8]) {
        if self.away.inflight_paths.is_empty() {
            return;
        }
        self.prune();
        if let Some(&seq) = self.away.inflight_paths.get(path) {
            self.away.closer.wait_for(seq);
            self.prune();
        }
    }

    /// Waits until the closing thread is done with every file at or
    /// beneath `dir` (before `dir` is renamed: the files' paths change).
    fn settle_within(&mut self, dir: &[u8]) {
        if self.away.inflight.is_empty() {
            return;
        }
        self.prune();
        let last = self
            .away
            .inflight
            .iter()
            .rev()
            .find(|(_, p)| path::is_within(p, dir))
            .map(|(s, _)| *s);
        if let Some(seq) = last {
            self.away.closer.wait_for(seq);
            self.prune();
        }
    }

    /// Waits until the closing thread is done with everything.
    pub(super) fn settle_all(&mut self) {
        self.away.closer.wait();
        self.away.inflight.clear();
        self.away.inflight_paths.clear();
    }
}

impl Receiver<'_> {
    /// Waits for the ENCODED_WRITEs being decoded ([`crate::decode`])
    /// before `cmd`, unless it is one more to the same file at a range none
    /// of them writes: before anything else, which might read, change,
    /// rename or record as done what they write.
    pub(super) fn settle_decoding(&mut self, cmd: &Command<'_>) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        let Some(run) = &c.away.decoding else {
            return;
        };
        if let Command::EncodedWrite {
            path,
            offset,
            unencoded_file_len,
            ..
        } = *cmd
        {
            if run.admits(path, offset, unencoded_file_len) {
                return;
            }
        }
        c.away.closer.decoder().wait();
        c.away.decoding = None;
    }

    /// Waits for the closing thread where `cmd` touches a file handed to it
    /// (all its other work is on descriptors, so names may change freely).
    pub(super) fn settle_for(&mut self, cmd: &Command<'_>) {
        use Command as C;
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        if c.away.inflight.is_empty() {
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

    /// Holds back the UTIMES of a directory until END ([`super::dirtimes`]);
    /// whether `path` is one.
    pub(super) fn hold_dir_times(
        &mut self,
        pos: Position,
        path: &[u8],
        atime: Timespec,
        mtime: Timespec,
    ) -> R<bool> {
        let cur = self.cur()?;
        if cur.is_open(path) {
            return Ok(false);
        }
        let rec = Record::new(atime, mtime, Source::Utimes, CommandKind::Utimes, pos);
        // Only directories have records.
        if !cur.later.dir_times.replace(path, rec) {
            // Not a directory, or not there (applying it says so).
            if !cur.res.is_cached_dir(path) && cur.res.dir(path).is_err() {
                return Ok(false);
            }
            self.dir_room(1)?;
            self.cur()?.later.dir_times.insert(path, rec);
        }
        self.stats.dir_utimes_deferred += 1;
        Ok(true)
    }

    /// Before the entries of directories `dirs` (distinct) change for the
    /// command numbered `at`: marks their times changed, or records the
    /// times they have now, to be put back at END.
    pub(super) fn entries_change(&mut self, dirs: &[&[u8]], at: u64) -> R<()> {
        let cur = self.cur()?;
        let mut new = 0;
        for d in dirs {
            if !cur.later.dir_times.change(d, at) {
                new += 1;
            }
        }
        if new == 0 {
            return Ok(());
        }
        // Making room may apply some of `dirs`' times early: then they are
        // read back below, like those of directories without a record.
        self.dir_room(new)?;
        let (cmd, pos) = self.now;
        let cur = self.cur()?;
        for d in dirs {
            if cur.later.dir_times.contains(d) {
                continue;
            }
            // Where the directory cannot be looked at, the change itself
            // fails and says why.
            let Ok(st) = dir_stat(cur, d) else {
                continue;
            };
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                continue;
            }
            let rec = Record::new(
                stat_time(st.st_atime, st.st_atime_nsec),
                stat_time(st.st_mtime, st.st_mtime_nsec),
                Source::Before,
                cmd,
                pos,
            );
            cur.later.dir_times.insert(d, rec);
        }
        Ok(())
    }

    /// Directory `dir` was just made: it has no times to put back yet, and
    /// none need reading when its entries change.
    pub(super) fn dir_created(&mut self, dir: &[u8]) -> R<()> {
        self.dir_room(1)?;
        let (cmd, pos) = self.now;
        self.cur()?
            .later
            .dir_times
            .insert(dir, Record::created(cmd, pos));
        Ok(())
    }

    /// Makes room for `extra` more directory times by applying the least
    /// recently used ones now.
    fn dir_room(&mut self, extra: usize) -> R<()> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        while !cur.later.dir_times.has_room(extra) && !cur.later.dir_times.is_empty() {
            for (p, rec) in cur.later.dir_times.evict() {
                put_dir_times(cur, &self.dest, &mut self.stats, &p, &rec, true).map_err(|e| {
                    CmdError::DirTimes {
                        path: escape(&p),
                        command: rec.pos.index,
                        err: Box::new(e.kind()),
                    }
                })?;
                cur.later.dir_times.log_evicted(&p);
            }
        }
        Ok(())
    }

    /// Applies every directory's times (at END).
    pub(super) fn apply_dir_times(&mut self) -> Result<(), Error> {
        self.apply_dir_times_listed().map(drop)
    }

    /// [`Receiver::apply_dir_times`], returning the times put back (the
    /// stream's or the directories' own, not those of new directories).
    pub(super) fn apply_dir_times_listed(&mut self) -> Result<Vec<(Vec<u8>, Record)>, Error> {
        let Some(cur) = self.cur.as_mut() else {
            return Ok(Vec::new());
        };
        let mut put = Vec::new();
        for (p, rec) in cur.later.dir_times.take_all() {
            put_dir_times(cur, &self.dest, &mut self.stats, &p, &rec, false)?;
            if rec.source != Source::Created {
                put.push((p, rec));
            }
        }
        cur.later.dir_times.log_cleared();
        Ok(put)
    }
}

/// Sets directory `path`'s recorded times and counts what was done.
fn put_dir_times(
    cur: &mut Current,
    dest: &Dest,
    stats: &mut Stats,
    path: &[u8],
    rec: &Record,
    early: bool,
) -> Result<(), Error> {
    if rec.source == Source::Created {
        return Ok(());
    }
    set_times(cur, dest, path, rec.atime, rec.mtime).map_err(|kind| Error::Command {
        command: rec.pos.index,
        offset: rec.pos.offset,
        cmd: rec.cmd,
        path: format!("'{}'", escape(path)),
        kind,
    })?;
    match rec.source {
        Source::Utimes if rec.changed => stats.dir_times_restored += 1,
        Source::Before if !early => stats.dir_times_kept += 1,
        _ => {}
    }
    if early {
        stats.dir_times_early += 1;
    }
    Ok(())
}

/// The status of directory `dir` (checked; empty = the root).
fn dir_stat(cur: &mut Current, dir: &[u8]) -> nix::Result<FileStat> {
    let fd = cur.res.dir(dir)?;
    fstat(fd.as_raw_fd())
}

fn stat_time(sec: i64, nsec: i64) -> Timespec {
    Timespec {
        sec,
        nsec: u32::try_from(nsec).unwrap_or(0),
    }
}
