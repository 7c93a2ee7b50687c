//! Stopping a receive so that it can go on later, and going on.
//!
//! Each command applied to the subvolume being received is counted and
//! fingerprinted ([`Track`], with [`btrfs_stream::resume::Digest`]). When
//! the stream stops early (cut off, a signal, a command that failed
//! cleanly), [`Receiver::suspend`] applies everything held back (batched
//! creates, directory times), syncs the filesystem and records the
//! [`Point`] reached in the subvolume's state. What only memory held and
//! END still needs (immutable and append-only flags, a capability to set
//! again after a chown) goes to the file `DEST/.rreceive-resume-<name as
//! hex>`.
//!
//! A resumed stream (RESUME, then the SUBVOL or SNAPSHOT, then the commands
//! after the point) is taken only for a subvolume whose state records that
//! same point, uuid, transids and protocol version. While a receive runs
//! its state records no point, so one killed without a chance to stop
//! cleanly (SIGKILL, a crash) is never resumed from a wrong place.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use btrfs_stream::resume::{Digest, Point};
use btrfs_stream::{Command, Position};
use btrfs_text::hex;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use uuid::Uuid;

use crate::error::{escape, CmdError, Error};
use crate::ioctl;
use crate::subvol::{Resumable, SubvolState};

use super::current::{Current, Flow, Receiver, R};
use super::journal;

impl Current {
    /// The paths (beneath the subvolume) of the files whose immutable or
    /// append-only flags wait for END, with those flags.
    pub(super) fn deferred_paths(&self) -> std::io::Result<Vec<(Vec<u8>, u32)>> {
        if self.deferred.is_empty() {
            return Ok(Vec::new());
        }
        let root = std::fs::read_link(format!("/proc/self/fd/{}", self.res.root().as_raw_fd()))?;
        let root = root.as_os_str().as_bytes();
        Ok(self
            .deferred
            .iter()
            .filter_map(|(f, bits)| {
                use std::os::fd::AsFd;
                path_beneath(root, f.as_fd()).map(|p| (p, *bits))
            })
            .collect())
    }
}

/// DEST's device and inode, which its journals are named by.
fn dest_id_of(dest: BorrowedFd<'_>) -> (u64, u64) {
    nix::sys::stat::fstat(dest.as_raw_fd()).map_or((0, 0), |st| (st.st_dev, st.st_ino))
}

/// How far the current subvolume's stream is applied.
#[derive(Debug, Default)]
pub(super) struct Track {
    /// Commands applied, the first (SUBVOL or SNAPSHOT) included; 0 before it.
    pub(super) count: u64,
    /// Offset in the stream just after the last of them.
    pub(super) offset: u64,
    digest: Digest,
    pub(super) version: u32,
    /// False once the stream can no longer be resumed (a failed command).
    pub(super) broken: bool,
    /// The count it was resumed at (0: received from its first command).
    pub(super) resumed_at: u64,
}

impl Track {
    /// Counts `cmd`, found at `pos` and applied.
    pub(super) fn add(&mut self, cmd: &Command<'_>, pos: Position) {
        if self.count == 0 {
            self.offset = btrfs_stream::STREAM_HEADER_LEN as u64;
            self.version = pos.version;
        }
        let data_len = match cmd {
            Command::Write { data, .. } | Command::EncodedWrite { data, .. } => data.len() as u64,
            _ => 0,
        };
        self.count += 1;
        self.offset += pos.len;
        if self.digest.add(cmd, data_len, self.version).is_err() {
            self.broken = true;
        }
    }

    /// The track of a stream resumed at `p` (protocol `version`): its
    /// SUBVOL or SNAPSHOT counted before `p`, not again.
    pub(super) fn resumed(p: Point, version: u32) -> Track {
        Track {
            count: p.commands,
            offset: p.offset,
            digest: Digest::from_value(p.digest),
            version,
            broken: false,
            resumed_at: p.commands,
        }
    }

    /// Whether nothing but the first command of a receive started here
    /// (not resumed) was applied: the subvolume holds nothing of the stream.
    pub(super) fn unstarted(&self) -> bool {
        self.resumed_at == 0 && self.count <= 1
    }

    /// Where the stream stands: after the last command counted.
    pub(super) fn point(&self) -> Point {
        Point {
            commands: self.count,
            offset: self.offset,
            digest: self.digest.value(),
        }
    }
}

/// A new file's commands held back together (its recipe, contiguous in the
/// stream): the numbers of its first and last command (as in
/// [`Position::index`]) and where the subvolume's stream stood before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecipeMark {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) before: Point,
}

impl RecipeMark {
    /// Its commands, as counted in the subvolume's stream (1 = SUBVOL).
    fn counts(&self) -> (u64, u64) {
        let first = self.before.commands + 1;
        (first, first + self.last.saturating_sub(self.first))
    }
}

/// What a stop must apply again: new files finished on other threads (or
/// not created yet) when a command failed, so that every command before
/// the resume point is applied and the ones after it that were applied
/// too are known.
#[derive(Debug, Default)]
pub(super) struct Redo {
    /// Recipes handed to the finishing thread, not known to be done:
    /// (job, recipe), oldest first.
    inflight: VecDeque<(u64, RecipeMark)>,
    /// Recipes whose files were not made, or not finished.
    again: Vec<RecipeMark>,
    /// Commands (by [`Position::index`]) that failed on other threads.
    failed: Vec<u64>,
    /// On a resumed receive: which of the next commands were applied
    /// before it stopped.
    replay: Option<Replay>,
    /// After a kill: the commands (counts, first and last) that may have
    /// been applied, in part or whole (see [`super::journal`]).
    maybe: Option<(u64, u64)>,
    /// After a kill: the RENAMEs among those whose directory times moved.
    renamed: Vec<u64>,
    /// No journal could be kept for this receive.
    pub(super) no_journal: bool,
}

/// Commands after the resume point that the stopped receive had applied
/// already, except new files to make again.
#[derive(Debug)]
struct Replay {
    /// Commands up to this count were applied...
    until: u64,
    /// ... except these ranges of counts (first, last).
    again: Vec<(u64, u64)>,
}

impl Redo {
    /// A recipe handed to the finishing thread as job `seq`.
    pub(super) fn handed(&mut self, seq: u64, mark: RecipeMark) {
        self.inflight.push_back((seq, mark));
    }

    /// Forgets recipes of jobs up to `done`, unless failures are waiting
    /// to be collected (they may be among them).
    pub(super) fn prune(&mut self, done: u64, failures_waiting: bool) {
        if failures_waiting || !self.failed.is_empty() {
            return;
        }
        while self.inflight.front().is_some_and(|(s, _)| *s <= done) {
            self.inflight.pop_front();
        }
    }

    /// Whether something failed that a stop must apply again.
    pub(super) fn failing(&self) -> bool {
        !self.failed.is_empty() || !self.again.is_empty()
    }

    /// A recipe to apply again.
    pub(super) fn again(&mut self, mark: RecipeMark) {
        self.again.push(mark);
    }

    /// Command number `index` failed on another thread.
    pub(super) fn failed(&mut self, index: u64) {
        self.failed.push(index);
    }

    /// On a resumed receive: commands up to `until` were applied before.
    fn replay_until(&mut self, until: u64) {
        self.replay = Some(Replay {
            until,
            again: Vec::new(),
        });
    }

    /// On a resumed receive: commands `first..=last` (counts) are applied
    /// again, though before `until`.
    fn replay_again(&mut self, first: u64, last: u64) {
        if let Some(r) = self.replay.as_mut() {
            r.again.push((first, last));
        }
    }

    /// Whether the command counted `n` (1 = SUBVOL) on a resumed receive
    /// was applied already: `None` once past what the stopped receive did.
    pub(super) fn applied_before(&mut self, n: u64) -> Option<bool> {
        let r = self.replay.as_ref()?;
        if n > r.until {
            self.replay = None;
            return None;
        }
        Some(!r.again.iter().any(|&(a, b)| (a..=b).contains(&n)))
    }

    /// Whether a create counted `n` is made again on a resumed receive
    /// (what it makes may be there already, from the stopped receive).
    pub(super) fn remakes(&self, n: u64) -> bool {
        self.maybe_done(n)
            || self
                .replay
                .as_ref()
                .is_some_and(|r| n <= r.until && r.again.iter().any(|&(a, b)| (a..=b).contains(&n)))
    }

    /// Whether command `n` may have been applied by a killed receive
    /// (then an entry it makes or removes may be there, or gone, already).
    pub(super) fn maybe_done(&self, n: u64) -> bool {
        self.maybe.is_some_and(|(a, b)| (a..=b).contains(&n))
    }

    /// Whether RENAME `n` moved its directory times before a kill.
    pub(super) fn renamed_already(&self, n: u64) -> bool {
        self.maybe_done(n) && self.renamed.contains(&n)
    }

    /// A receive resumed after a kill: what its journal says.
    fn recovered(&mut self, found: &journal::Found, renamed: Vec<u64>) {
        self.replay = Some(Replay {
            until: found.until,
            again: found.again.clone(),
        });
        self.maybe = (found.now > found.until).then_some((found.until + 1, found.now));
        self.renamed = renamed;
    }

    /// Whether a resumed receive is still going over what was applied.
    pub(super) fn replaying(&self) -> bool {
        self.replay.is_some()
    }
}

use crate::subvol::side_file;

/// Where `f` is, beneath the directory at `root` (`root/...`), if it still
/// has a name there.
fn path_beneath(root: &[u8], f: BorrowedFd<'_>) -> Option<Vec<u8>> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).ok()?;
    let p = link.as_os_str().as_bytes();
    if p == root {
        return Some(Vec::new());
    }
    let rest = p.strip_prefix(root)?.strip_prefix(b"/")?;
    (!rest.ends_with(b" (deleted)")).then(|| rest.to_vec())
}

impl Receiver<'_> {
    /// RESUME: the next SUBVOL or SNAPSHOT continues a receive that stopped.
    pub(super) fn resume_mark(&mut self, p: Point) -> R<Flow> {
        if self.cur.is_some() {
            return Err(CmdError::Resume(
                "RESUME must come before the SUBVOL or SNAPSHOT it continues".into(),
            ));
        }
        self.resume = Some(p);
        Ok(Flow::Continue)
    }

    /// The SUBVOL or SNAPSHOT after RESUME: opens the incomplete subvolume
    /// `name` again, after checking it stopped at `p` of this same stream.
    pub(super) fn resume_subvol(
        &mut self,
        name: &[u8],
        uuid: Uuid,
        ctransid: u64,
        parent: Option<(Uuid, u64)>,
        p: Point,
        pos: Position,
    ) -> R<Flow> {
        let shown = escape(name);
        let held = self.lock(name)?;
        let state = self
            .dest
            .state_of(name)
            .map_err(CmdError::io("read the subvolume's state"))?
            .ok_or_else(|| {
                CmdError::Resume(format!(
                    "{} holds no incomplete subvolume {shown} received by rreceive",
                    self.dest.path().display()
                ))
            })?;
        let wanted = Resumable {
            version: pos.version,
            point: p,
        };
        let why = if state.complete {
            Some("it is complete".to_string())
        } else if state.received_uuid != uuid || state.ctransid != ctransid {
            Some(format!(
                "it is being received from uuid {} (ctransid {}), and this stream is of uuid {uuid} (ctransid {ctransid})",
                state.received_uuid, state.ctransid
            ))
        } else if state.parent_uuid.map(|u| (u, state.parent_ctransid)) != parent {
            Some("this stream has another parent than the one it was received against".into())
        } else {
            match state.resume {
                None => Some(
                    "its receive did not stop cleanly (it was killed, or the system went down), \
                     so where it stopped is not known"
                        .into(),
                ),
                Some(r) if r != wanted => Some(format!(
                    "it stopped after command {} (byte {}, digest {:032x}, protocol {}), and this \
                     stream continues after command {} (byte {}, digest {:032x}, protocol {}): \
                     ask rreceive --resume-token again",
                    r.point.commands,
                    r.point.offset,
                    r.point.digest,
                    r.version,
                    p.commands,
                    p.offset,
                    p.digest,
                    pos.version
                )),
                Some(_) => None,
            }
        };
        if let Some(why) = why {
            return Err(CmdError::Resume(format!(
                "subvolume {shown} in {}: {why}",
                self.dest.path().display()
            )));
        }
        let root = self
            .dest
            .open_subvol(name)
            .map_err(CmdError::os("open the subvolume"))?;
        let mut running = state.clone();
        running.resume = None;
        self.dest
            .set_state(name, &running)
            .map_err(CmdError::io("record the subvolume's state"))?;
        let mut cur = Current::new(
            name,
            running,
            root,
            self.closer.clone(),
            self.opts.max_dir_times,
        );
        cur.track = Track::resumed(p, pos.version);
        // A snapshot linked to its parent's files stays so, whatever the
        // options now: its work directory says. Flags due at END that it
        // recorded (copies made, flags lifted): a power loss may have left
        // no other record.
        let mut late: Vec<(u64, u32)> = Vec::new();
        if let Some((snap, l)) = crate::snapshot::Strategy::reopen(
            self.dest.fd(),
            name,
            cur.res.root(),
            state.parent_uuid,
            || self.write_ahead(),
            |why| {
                CmdError::Resume(format!(
                    "subvolume {shown} in {}: {why}",
                    self.dest.path().display()
                ))
            },
        )? {
            cur.snap = snap;
            late = l;
        }
        self.log.info(format_args!(
            "At {} {shown} (resuming after command {})",
            if parent.is_some() {
                "snapshot"
            } else {
                "subvol"
            },
            p.commands
        ));
        self.say_dest();
        cur.locks.push(held);
        let side = side_file(name);
        self.cur = Some(cur);
        let stopped = crate::subvol::side_point(self.dest.fd(), name);
        if stopped.map(|r| r.point) != Some(p) {
            // Killed: what it held comes from its journal.
            let id = self.dest_id();
            let mount = self.dest_mount();
            let mut found = journal::find(id, name, uuid, ctransid, true, mount);
            if !matches!(&found, Ok(Some((f, Some(_)))) if f.point == p) {
                // Not from this boot and mount: a power loss, or the
                // destination's device went away. The last durable
                // checkpoint says where.
                if let Some(rec) =
                    super::durable::load(self.dest.fd(), name).filter(|r| r.at == Some(wanted))
                {
                    if rec.journal.is_none() {
                        self.recover_power(rec);
                        self.defer_by_inode(&late);
                        self.reserve_side(name);
                        return Ok(Flow::Continue);
                    }
                    // Cut while resumed after a kill: as after that kill.
                    if let Err(e) = self.journal_after_power(id, mount, name, &rec) {
                        return Err(CmdError::Resume(format!(
                            "subvolume {shown} in {}: the journal kept for a power loss: {e}",
                            self.dest.path().display()
                        )));
                    }
                    found = journal::find(id, name, uuid, ctransid, true, mount);
                }
            }
            match found {
                Ok(Some((found, Some(file)))) if found.point == p => {
                    // What is on disk moves past the durable record: the
                    // journal is kept beside it until the first durable
                    // checkpoint past what the killed receive applied.
                    self.keep_for_power(id, &found);
                    self.recover(id, name, found, file);
                    self.reserve_side(name);
                    return Ok(Flow::Continue);
                }
                Ok(_) => {
                    return Err(CmdError::Resume(format!(
                        "subvolume {shown} in {}: its journal does not say where it stopped",
                        self.dest.path().display()
                    )))
                }
                Err(why) => {
                    return Err(CmdError::Resume(format!(
                        "subvolume {shown} in {}: {why}",
                        self.dest.path().display()
                    )))
                }
            }
        }
        super::durable::invalidate(self.dest.fd(), name);
        self.load_side(&side)
            .map_err(CmdError::io("read what the stopped receive kept for END"))?;
        match self.cur.as_mut() {
            // Kept while what was applied is gone over again.
            Some(c) if c.redo.replaying() => c.side_kept = true,
            _ => self.reserve_side(name),
        }
        Ok(Flow::Continue)
    }

    /// The first command after what a stopped receive had applied: a
    /// durable checkpoint and the journal start here, then the side file
    /// that said where to resume goes (until then, it still does).
    pub(super) fn end_of_replay(&mut self, pos: Position) -> Result<(), Error> {
        self.journal_after(pos)?;
        if let Some(c) = self.cur.as_mut() {
            c.side_kept = false;
            let name = c.name.clone();
            self.reserve_side(&name);
        }
        Ok(())
    }

    /// Removes what describes subvolumes DEST no longer holds: the
    /// journals of those gone or complete (unless a running receive holds
    /// them), and the side files and durable records of those gone (removed
    /// with `rm -rf`, say). Called as a receive starts.
    pub(crate) fn sweep_orphans(&self) {
        let dest = self.dest.fd();
        // What a running receive (one holding its subvolume's lock) has is
        // never an orphan; lock files nobody holds are.
        let running = |name: &[u8]| crate::lock::holder(dest, name).is_some();
        journal::sweep(dest_id_of(dest), |name| {
            running(name)
                || match self.dest.existing(name) {
                    Ok(Some(crate::dest::Existing::Received(st))) => !st.complete,
                    Ok(_) => false,
                    Err(_) => true,
                }
        });
        crate::lock::sweep(dest);
        let mut orphans = Vec::new();
        for (file, kind) in crate::meta::entries(dest) {
            let Some(name) = side_owner(&file) else {
                continue;
            };
            let gone = matches!(
                nix::sys::stat::fstatat(
                    Some(dest.as_raw_fd()),
                    name.as_slice(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW
                ),
                Err(Errno::ENOENT)
            );
            if gone && kind == Some(nix::dir::Type::File) && !running(&name) {
                orphans.push(file);
            }
        }
        for f in orphans {
            let _ = nix::unistd::unlinkat(
                Some(dest.as_raw_fd()),
                f.as_slice(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }

    /// The mount DEST is on (see [`journal`]).
    pub(super) fn dest_mount(&self) -> u64 {
        ioctl::mount_id(self.dest.fd()).unwrap_or(0)
    }

    /// DEST's device and inode (what its journals are named by).
    pub(super) fn dest_id(&self) -> (u64, u64) {
        dest_id_of(self.dest.fd())
    }

    /// After a kill: rebuilds what the receive held from its journal, and
    /// says which commands it had applied (see [`journal`]).
    fn recover(
        &mut self,
        id: (u64, u64),
        name: &[u8],
        found: journal::Found,
        file: nix::fcntl::Flock<File>,
    ) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        let mut flags: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut caps: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut renamed = Vec::new();
        let moved = |p: &mut Vec<u8>, from: &[u8], to: &[u8]| {
            if crate::path::is_within(p, from) {
                let mut q = to.to_vec();
                q.extend_from_slice(&p[from.len()..]);
                *p = q;
            }
        };
        for (n, e) in &found.entries {
            c.dir_times.replay(e);
            match e {
                journal::Entry::Renamed(from, to) => {
                    for (p, _) in flags.iter_mut() {
                        moved(p, from, to);
                    }
                    if let Some((p, _)) = caps.as_mut() {
                        moved(p, from, to);
                    }
                    if *n > found.until {
                        renamed.push(*n);
                    }
                }
                journal::Entry::Flags(p, bits) => flags.push((p.clone(), *bits)),
                journal::Entry::Caps(p, v) => caps = v.clone().map(|v| (p.clone(), v)),
                _ => {}
            }
        }
        c.caps = caps;
        c.redo.recovered(&found, renamed);
        c.dir_times.journal = journal::reopen(id, name, file, &found);
        self.log.note(format_args!(
            "resuming after a kill: commands up to {} were applied{}; {} new file(s) to make again",
            found.until,
            if found.now > found.until {
                format!(", up to {} maybe", found.now)
            } else {
                String::new()
            },
            found.again.len()
        ));
        self.defer_flags(flags);
    }

    /// Flags due at END that a killed or cut receive recorded by path:
    /// held again by descriptor (one whose file is gone is noted, skipped).
    pub(super) fn defer_flags(&mut self, flags: Vec<(Vec<u8>, u32)>) {
        for (p, bits) in flags {
            match self.open_for_ioctl(&p) {
                Ok(f) => {
                    if let Some(c) = self.cur.as_mut() {
                        c.deferred.push((f, bits));
                    }
                }
                Err(e) => {
                    self.skip("immutable/append flags", 1);
                    self.log.note(format_args!(
                        "immutable/append flag of '{}' not applied: {e}",
                        escape(&p)
                    ));
                }
            }
        }
    }

    /// Flags due at END of the inodes numbered in `late` (found by a walk
    /// of the tree), but for inodes that have some already.
    fn defer_by_inode(&mut self, late: &[(u64, u32)]) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        let ino_of =
            |f: &std::fs::File| std::os::unix::fs::MetadataExt::ino(&f.metadata().ok()?).into();
        let have: std::collections::HashSet<u64> =
            c.deferred.iter().filter_map(|(f, _)| ino_of(f)).collect();
        let wanted: std::collections::HashSet<u64> = late
            .iter()
            .map(|&(ino, _)| ino)
            .filter(|i| !have.contains(i))
            .collect();
        match crate::snapshot::overlay::find_inodes(c.res.root(), &wanted) {
            Ok(mut found) => {
                for &(ino, bits) in late {
                    if let Some(f) = found.remove(&ino) {
                        c.deferred.push((f, bits));
                    }
                }
            }
            Err(e) => {
                self.skip("immutable/append flags", wanted.len() as u64);
                self.log.note(format_args!(
                    "immutable/append flags of {} file(s) not applied: {e}",
                    wanted.len()
                ));
            }
        }
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
        let Some(mut j) = journal::Journal::create(
            id,
            self.dest.fd(),
            &c.name,
            c.state.received_uuid,
            c.state.ctransid,
            version,
            mount,
        ) else {
            c.redo.no_journal = true;
            self.log.note(format_args!(
                "no journal can be kept: a receive killed outright cannot be resumed"
            ));
            return;
        };
        let flags = c.deferred_paths().unwrap_or_default();
        j.checkpoint(p, &flags, None);
        c.dir_times.journal = Some(j);
    }

    /// After each command applied: what the journal says is applied, and
    /// a checkpoint when one is due (the first right after SUBVOL or
    /// SNAPSHOT).
    pub(super) fn journal_after(&mut self, pos: Position) -> Result<(), Error> {
        let Some(c) = self.cur.as_ref() else {
            return Ok(());
        };
        if c.durable.is_none()
            && self.opts.durable
            && c.power.is_none()
            && !c.redo.replaying()
            && c.pending.is_none()
            && c.track.count > 0
        {
            let kind = self.now.0;
            self.durable_start()
                .map_err(|k| super::current::err_at(kind, pos, b"", k))?;
        }
        let done = self.closer.done();
        let Some(c) = self.cur.as_ref() else {
            return Ok(());
        };
        let starts = c.dir_times.journal.is_none()
            && !c.redo.no_journal
            && !c.redo.replaying()
            && c.power.is_none()
            && c.pending.is_none()
            && c.track.count > 0;
        // Only when one is made: two system calls.
        let (id, mount) = if starts {
            (self.dest_id(), self.dest_mount())
        } else {
            ((0, 0), 0)
        };
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        if c.track.count == 0 {
            return Ok(());
        }
        let pending = c.pending.as_ref().map(super::batch::Pending::before);
        // ENCODED_WRITEs still being decoded are not applied yet.
        if c.decoding.is_some() && c.closer.decoder().idle() {
            c.decoding = None;
        }
        let decoding = c.decoding.as_ref().map(|r| r.before);
        let Some(j) = c.dir_times.journal.as_mut() else {
            if !starts {
                return Ok(());
            }
            c.dir_times.journal = journal::Journal::create(
                id,
                self.dest.fd(),
                &c.name,
                c.state.received_uuid,
                c.state.ctransid,
                c.track.version,
                mount,
            );
            if c.dir_times.journal.is_none() {
                c.redo.no_journal = true;
                self.log.note(format_args!(
                    "no journal can be kept: a receive killed outright cannot be resumed"
                ));
                return Ok(());
            }
            return self.checkpoint().map(drop);
        };
        let until = pending.unwrap_or(c.track.count);
        j.applied(decoding.map_or(until, |d| d.min(until)), done);
        if pending.is_none()
            && !c.redo.replaying()
            && c.power.is_none()
            && j.due(pos.offset + pos.len)
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// A checkpoint: everything held back applied (but the flags and
    /// capability due at END, which the journal keeps), so that a killed
    /// receive resumes from here.
    pub(super) fn checkpoint(&mut self) -> Result<Vec<(Vec<u8>, super::dirtimes::Record)>, Error> {
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
        let p = c.track.point();
        let caps = c.caps.clone();
        if let Some(j) = c.dir_times.journal.as_mut() {
            j.checkpoint(p, &flags, caps.as_ref());
        }
        Ok(put)
    }

    /// Reads (and removes) the side file `name` of the subvolume resumed.
    fn load_side(&mut self, name: &[u8]) -> std::io::Result<()> {
        let fd = match ioctl::openat(
            Some(self.dest.fd().as_raw_fd()),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut text = String::new();
        File::from(fd).take(64 << 20).read_to_string(&mut text)?;
        let bad = || std::io::Error::other("the side file is malformed");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["flags", bits, path] => {
                    let bits: u32 = bits.parse().map_err(|_| bad())?;
                    let path = hex::decode(path).map_err(|_| bad())?;
                    if !path.is_empty() {
                        crate::path::check(&path).map_err(|_| bad())?;
                    }
                    let file = self
                        .open_for_ioctl(&path)
                        .map_err(|e| std::io::Error::other(format!("'{}': {e}", escape(&path))))?;
                    if let Some(c) = self.cur.as_mut() {
                        c.deferred.push((file, bits));
                    }
                }
                ["caps", path, value] => {
                    let caps = (
                        hex::decode(path).map_err(|_| bad())?,
                        hex::decode(value).map_err(|_| bad())?,
                    );
                    if let Some(c) = self.cur.as_mut() {
                        c.caps = Some(caps);
                    }
                }
                ["applied", until] => {
                    let until = until.parse().map_err(|_| bad())?;
                    if let Some(c) = self.cur.as_mut() {
                        c.redo.replay_until(until);
                    }
                }
                ["again", a, b] => {
                    let (a, b) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                    if a > b {
                        return Err(bad());
                    }
                    if let Some(c) = self.cur.as_mut() {
                        c.redo.replay_again(a, b);
                    }
                }
                ["why", _] | ["point", _] => {}
                _ => return Err(bad()),
            }
        }
        Ok(())
    }

    /// A command counted in the stream, which the stopped receive this one
    /// resumes had applied already: counted again, not applied again.
    pub(super) fn skip_applied(&mut self, cmd: &Command<'_>, pos: Position) -> Result<Flow, Error> {
        // What is held back comes first, as before any other command.
        if let Some(p) = self.cur.as_mut().and_then(|c| c.pending.take()) {
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
            c.track.add(cmd, pos);
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
        if let Some(at) = c.power.as_ref().map(|p| p.at) {
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
        if c.track.broken {
            return Err("the stream's fingerprint could not be taken".into());
        }
        if c.errors > 0 {
            return Err(
                "a command failed and later ones were applied after it (-E allowed more than one error)"
                    .into(),
            );
        }
        if c.track.count == 0 {
            return Err("not even its first command was applied".into());
        }
        if c.snap.in_place_unchanged() {
            // Nothing changed yet: the parent is given back instead.
            return Err("it was to be received in place and nothing was changed yet".into());
        }
        // What batches and the closing thread hold. What fails is recorded
        // to be made again; after a failure, nothing more is made.
        let failing = self.closer.has_errors() || c.redo.failing();
        if failing {
            if let Some(c) = self.cur.as_mut() {
                let held: Vec<_> = c.batch.drain(..).chain(c.pending.take()).collect();
                c.batch_bytes = 0;
                self.redo_all(held);
            }
        } else {
            let _ = self.flush_batch();
            if let Some(p) = self.cur.as_mut().and_then(|c| c.pending.take()) {
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
        c.sources.clear();
        let redo = std::mem::take(&mut c.redo);
        let mut again = redo.again;
        for idx in redo.failed {
            if again.iter().any(|m| (m.first..=m.last).contains(&idx)) {
                continue;
            }
            match redo
                .inflight
                .iter()
                .map(|(_, m)| m)
                .find(|m| (m.first..=m.last).contains(&idx))
            {
                Some(m) => again.push(*m),
                None => {
                    return Err(format!(
                        "command #{idx} failed after later commands were applied"
                    ))
                }
            }
        }
        let mut until = c.track.count;
        let mut ranges: Vec<(u64, u64)> = again.iter().map(RecipeMark::counts).collect();
        if let Some(r) = redo.replay {
            // Stopped again before the end of what the first receive had
            // applied: that part still counts.
            until = until.max(r.until);
            ranges.extend(r.again.into_iter().filter(|&(a, _)| a > c.track.count));
        }
        let point = again
            .iter()
            .map(|m| m.before)
            .min_by_key(|p| p.commands)
            .unwrap_or_else(|| c.track.point());
        ranges.retain(|&(_, b)| b > point.commands);
        ranges.sort_unstable();
        ranges.dedup();
        let window = Window {
            until: (until > point.commands).then_some(until),
            again: ranges,
        };
        let mut state = c.state.clone();
        let resumable = Resumable {
            version: c.track.version,
            point,
        };
        state.resume = Some(resumable);
        let Some(mut c) = self.cur.take() else {
            return Err("no subvolume was being received".into());
        };
        let journal = c.dir_times.journal.take();
        // The side file (written in room kept for it) holds the point;
        // the state too where it can still be written.
        let side = self
            .save_side(&c, &window, resumable)
            .and_then(|()| nix::unistd::syncfs(c.res.root().as_raw_fd()).map_err(Into::into));
        if let Err(e) = side {
            let why = format!("recording where it stopped failed: {e}");
            c.dir_times.journal = journal;
            self.cur = Some(c);
            return Err(why);
        }
        if let Some(j) = journal {
            j.remove();
        }
        // The side file's point is the one now.
        super::durable::invalidate(self.dest.fd(), &c.name);
        let _ = self.dest.set_state(&c.name, &state);
        // The state must be there when the token is asked for.
        let _ = nix::unistd::syncfs(self.dest.fd().as_raw_fd());
        Ok(state)
    }

    /// Records in the side file of the subvolume being received why it
    /// cannot be resumed (for `rreceive --resume-token`).
    pub(crate) fn record_refusal(&self, name: &[u8], why: &str) {
        let _ = self.write_side(name, &format!("why\t{}\n", hex::encode(why.as_bytes())));
    }

    /// Writes the side file of `c`: what END still needs and what the
    /// resumed receive must not apply again.
    fn save_side(&self, c: &Current, window: &Window, at: Resumable) -> std::io::Result<()> {
        let mut text = format!("point\t{}\n", at.to_field());
        for (p, bits) in c.deferred_paths()? {
            text.push_str(&format!("flags\t{bits}\t{}\n", hex::encode(&p)));
        }
        if let Some((p, v)) = &c.caps {
            text.push_str(&format!("caps\t{}\t{}\n", hex::encode(p), hex::encode(v)));
        }
        if let Some(until) = window.until {
            text.push_str(&format!("applied\t{until}\n"));
            for (a, b) in &window.again {
                text.push_str(&format!("again\t{a}\t{b}\n"));
            }
        }
        self.write_side(&c.name, &text)
    }

    /// Replaces the side file of subvolume `name` by `text` (removes it
    /// when `text` is empty). It is written over the room a reserved one
    /// holds ([`Receiver::reserve_side`]), padded with empty lines, so a
    /// full filesystem still takes it.
    fn write_side(&self, name: &[u8], text: &str) -> std::io::Result<()> {
        let name = side_file(name);
        let dir = self.dest.fd().as_raw_fd();
        if text.is_empty() {
            return match nix::unistd::unlinkat(
                Some(dir),
                name.as_slice(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            ) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(e.into()),
            };
        }
        let fd = ioctl::openat(
            Some(dir),
            name.as_slice(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        let f = File::from(fd);
        if f.metadata()?.len() == 0 {
            use std::os::fd::AsFd;
            crate::flags::overwrite_in_place(f.as_fd());
        }
        let mut body = format!(
            "# rreceive: where the receive stopped (point), what END still needs (flags BITS PATH, \
             caps PATH VALUE), which commands after the point were applied (applied UNTIL, again \
             FIRST LAST), why it cannot resume (why TEXT); hex\n{text}"
        )
        .into_bytes();
        let room = f.metadata()?.len() as usize;
        if body.len() < room {
            body.resize(room, b'\n');
        }
        use std::os::unix::fs::FileExt;
        f.write_all_at(&body, 0)?;
        f.sync_all()
    }

    /// Makes the side file of subvolume `name` (or blanks it) with room
    /// for what a stop writes, so that a stop on a full filesystem can
    /// still record where it stopped.
    pub(super) fn reserve_side(&self, name: &[u8]) {
        // Made anew, so that its room is overwritten in place on btrfs
        // (one made by an older rreceive may be copy-on-write).
        let _ = self.write_side(name, "");
        let _ = self.write_side(name, &"\n".repeat(SIDE_RESERVE));
    }
}

/// The subvolume a side file or durable record in DEST (named `file`)
/// belongs to.
fn side_owner(file: &[u8]) -> Option<Vec<u8>> {
    let side = side_file(b"");
    let record = super::durable::record_file(b"");
    let hexed = if let Some(h) = file.strip_prefix(side.as_slice()) {
        h
    } else {
        let h = file.strip_prefix(record.as_slice())?;
        [b".1".as_slice(), b".journal"]
            .iter()
            .find_map(|s| h.strip_suffix(*s))
            .unwrap_or(h)
    };
    let name = hex::decode(std::str::from_utf8(hexed).ok()?).ok()?;
    (!name.is_empty()).then_some(name)
}

/// Room kept for a side file (a stop then needs no new blocks).
const SIDE_RESERVE: usize = 128 << 10;

/// Which commands after a resume point were applied already.
struct Window {
    /// Commands counted up to this were applied (none if `None`)...
    until: Option<u64>,
    /// ... except these (first, last), to apply again.
    again: Vec<(u64, u64)>,
}

/// Why the incomplete subvolume `name` in `dest` cannot be resumed, as
/// recorded when its receive stopped.
pub(crate) fn refusal(dest: BorrowedFd<'_>, name: &[u8]) -> Option<String> {
    crate::subvol::side_text(dest, name)?
        .lines()
        .find_map(|l| l.strip_prefix("why\t"))
        .and_then(|h| hex::decode(h).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Removes the side file of `name` in `dest`, if any (at END).
pub(super) fn forget_side(dest: BorrowedFd<'_>, name: &[u8]) {
    let _ = nix::unistd::unlinkat(
        Some(dest.as_raw_fd()),
        side_file(name).as_slice(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
}

/// Where the receive of `name` in `dest` (with state `st`), killed
/// outright, can be resumed from its journal; or why not (`Err`), or
/// `Ok(None)` when it has none.
pub(crate) fn killed_point(
    dest: BorrowedFd<'_>,
    name: &[u8],
    st: &SubvolState,
) -> Result<Option<Resumable>, String> {
    let id = dest_id_of(dest);
    let mount = ioctl::mount_id(dest).unwrap_or(0);
    let found = journal::find(id, name, st.received_uuid, st.ctransid, false, mount);
    if let Ok(Some((f, _))) = found {
        return Ok(Some(Resumable {
            version: f.version,
            point: f.point,
        }));
    }
    // A power loss (or the destination unmounted): its last durable
    // checkpoint, unless the receive was refused since.
    if refusal(dest, name).is_none() {
        if let Some(at) = super::durable::load(dest, name).and_then(|r| r.at) {
            return Ok(Some(at));
        }
    }
    found.map(|_| None)
}

/// Removes the journal of subvolume `name` in `dest` (see
/// [`Dest::delete_incomplete`](crate::Dest::delete_incomplete)).
pub(crate) fn forget_journal(dest: BorrowedFd<'_>, name: &[u8]) {
    let id = dest_id_of(dest);
    journal::forget(id, name);
}
