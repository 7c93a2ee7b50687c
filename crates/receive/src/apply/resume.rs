//! Going on with a receive that stopped, was killed or was cut: RESUME,
//! then the SUBVOL or SNAPSHOT it continues ([`Receiver::resume_subvol`]),
//! what the stopped receive held rebuilt from its side file, journal or
//! durable record (all kept by [`crate::recovery`]).
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
//!
//! Owns: reopening a subvolume to resume it. May call: `crate::recovery`,
//! the engine's own steps, the destination.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use btrfs_stream::resume::Point;
use btrfs_stream::Position;
use nix::errno::Errno;
use uuid::Uuid;

use crate::error::{escape, CmdError, Error};
use crate::recovery::names::{self, side_file};
use crate::recovery::side::{self, Line};
use crate::recovery::track::Track;
use crate::recovery::{durable, journal, Recovery, Resumable};
use crate::subvol::SubvolState;

use super::current::{Current, Flow, Receiver, R};

impl Current {
    /// The paths (beneath the subvolume) of the files whose immutable or
    /// append-only flags wait for END, with those flags.
    pub(super) fn deferred_paths(&self) -> std::io::Result<Vec<(Vec<u8>, u32)>> {
        if self.later.deferred.is_empty() {
            return Ok(Vec::new());
        }
        let root = std::fs::read_link(format!("/proc/self/fd/{}", self.res.root().as_raw_fd()))?;
        let root = root.as_os_str().as_bytes();
        Ok(self
            .later
            .deferred
            .iter()
            .filter_map(|(f, bits)| {
                use std::os::fd::AsFd;
                path_beneath(root, f.as_fd()).map(|p| (p, *bits))
            })
            .collect())
    }
}

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
        if let Some(why) = not_resumable(&state, uuid, ctransid, parent, wanted) {
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
        cur.recovery = Recovery::resumed(Track::resumed(p, pos.version));
        let late = self.reopen_work(&mut cur, name, &state)?;
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
        self.cur = Some(cur);
        let stopped = side::point(self.dest.fd(), name);
        if stopped.map(|r| r.point) != Some(p) {
            return self.resume_killed(name, uuid, ctransid, wanted, &late);
        }
        self.resume_stopped(name)
    }

    /// Reopens the work directory of subvolume `name` (with `state`), if
    /// it has one: a snapshot linked to its parent's files stays so,
    /// whatever the options now. Returns the flags due at END that it
    /// recorded (copies made, flags lifted), by inode: a power loss may
    /// have left no other record.
    fn reopen_work(
        &self,
        cur: &mut Current,
        name: &[u8],
        state: &SubvolState,
    ) -> R<Vec<(u64, u32)>> {
        let shown = escape(name);
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
        Ok(late)
    }

    /// Resumes subvolume `name` (received as `uuid` at `ctransid`) that was
    /// killed, or cut by a power loss, at `wanted`: what it held comes from
    /// its journal, or its last durable checkpoint. `late`: flags due at
    /// END that its work directory recorded, by inode.
    fn resume_killed(
        &mut self,
        name: &[u8],
        uuid: Uuid,
        ctransid: u64,
        wanted: Resumable,
        late: &[(u64, u32)],
    ) -> R<Flow> {
        let shown = escape(name);
        let p = wanted.point;
        let id = self.dest_id();
        let mount = self.dest_mount();
        let mut found = journal::find(id, name, uuid, ctransid, true, mount);
        if !matches!(&found, Ok(Some((f, Some(_)))) if f.point == p) {
            // Not from this boot and mount: a power loss, or the
            // destination's device went away. The last durable
            // checkpoint says where.
            if let Some(rec) = durable::load(self.dest.fd(), name).filter(|r| r.at == Some(wanted))
            {
                if rec.journal.is_none() {
                    self.recover_power(rec);
                    self.defer_by_inode(late);
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
                Ok(Flow::Continue)
            }
            Ok(_) => Err(CmdError::Resume(format!(
                "subvolume {shown} in {}: its journal does not say where it stopped",
                self.dest.path().display()
            ))),
            Err(why) => Err(CmdError::Resume(format!(
                "subvolume {shown} in {}: {why}",
                self.dest.path().display()
            ))),
        }
    }

    /// Resumes subvolume `name`, stopped cleanly: from its side file.
    fn resume_stopped(&mut self, name: &[u8]) -> R<Flow> {
        durable::invalidate(self.dest.fd(), name);
        self.load_side(&side_file(name))
            .map_err(CmdError::io("read what the stopped receive kept for END"))?;
        match self.cur.as_mut() {
            // Kept while what was applied is gone over again.
            Some(c) if c.recovery.redo.replaying() => c.recovery.side_kept = true,
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
            c.recovery.side_kept = false;
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
        journal::sweep(crate::recovery::dest_id(dest), |name| {
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
            let Some(name) = names::side_owner(&file) else {
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
            c.later.dir_times.replay(e);
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
        c.later.caps = caps;
        c.recovery.redo.recovered(&found, renamed);
        c.later.dir_times.journal = journal::reopen(id, name, file, &found);
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
                        c.later.deferred.push((f, bits));
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
        let have: std::collections::HashSet<u64> = c
            .later
            .deferred
            .iter()
            .filter_map(|(f, _)| ino_of(f))
            .collect();
        let wanted: std::collections::HashSet<u64> = late
            .iter()
            .map(|&(ino, _)| ino)
            .filter(|i| !have.contains(i))
            .collect();
        match crate::snapshot::overlay::find_inodes(c.res.root(), &wanted) {
            Ok(mut found) => {
                for &(ino, bits) in late {
                    if let Some(f) = found.remove(&ino) {
                        c.later.deferred.push((f, bits));
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

    /// Reads the side file `name` of the subvolume resumed: what END
    /// still needs, and which commands the stopped receive applied.
    fn load_side(&mut self, name: &[u8]) -> std::io::Result<()> {
        let dest = self.dest.fd().try_clone_to_owned()?;
        side::load(dest.as_fd(), name, |line| {
            match line {
                Line::Flags(path, bits) => {
                    if !path.is_empty() {
                        crate::path::check(&path)
                            .map_err(|_| std::io::Error::other("the side file is malformed"))?;
                    }
                    let file = self
                        .open_for_ioctl(&path)
                        .map_err(|e| std::io::Error::other(format!("'{}': {e}", escape(&path))))?;
                    if let Some(c) = self.cur.as_mut() {
                        c.later.deferred.push((file, bits));
                    }
                }
                Line::Caps(path, value) => {
                    if let Some(c) = self.cur.as_mut() {
                        c.later.caps = Some((path, value));
                    }
                }
                Line::Applied(until) => {
                    if let Some(c) = self.cur.as_mut() {
                        c.recovery.redo.replay_until(until);
                    }
                }
                Line::Again(a, b) => {
                    if let Some(c) = self.cur.as_mut() {
                        c.recovery.redo.replay_again(a, b);
                    }
                }
            }
            Ok(())
        })
    }

    /// Records in the side file of the subvolume being received why it
    /// cannot be resumed (for `rreceive --resume-token`).
    pub(crate) fn record_refusal(&self, name: &[u8], why: &str) {
        side::record_refusal(self.dest.fd(), name, why);
    }

    /// Makes the side file of subvolume `name` (or blanks it) with room
    /// for what a stop writes, so that a stop on a full filesystem can
    /// still record where it stopped.
    pub(super) fn reserve_side(&self, name: &[u8]) {
        side::reserve(self.dest.fd(), name);
    }
}

/// Why the incomplete subvolume with `state` cannot be resumed at `wanted`
/// by a stream of `uuid` at `ctransid` (against `parent`), if it cannot.
fn not_resumable(
    state: &SubvolState,
    uuid: Uuid,
    ctransid: u64,
    parent: Option<(Uuid, u64)>,
    wanted: Resumable,
) -> Option<String> {
    if state.complete {
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
                wanted.point.commands,
                wanted.point.offset,
                wanted.point.digest,
                wanted.version
            )),
            Some(_) => None,
        }
    }
}
