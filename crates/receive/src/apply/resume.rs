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

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use btrfs_stream::resume::{Digest, Point};
use btrfs_stream::{Command, Position};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use uuid::Uuid;

use crate::error::{escape, CmdError};
use crate::ioctl;
use crate::subvol::{Resumable, SubvolState, RESERVED_PREFIX};

use super::{Current, Flow, Receiver, R};

/// How far the current subvolume's stream is applied.
#[derive(Debug, Default)]
pub(super) struct Track {
    /// Commands applied, the first (SUBVOL or SNAPSHOT) included; 0 before it.
    pub(super) count: u64,
    /// Offset in the stream just after the last of them.
    pub(super) offset: u64,
    digest: Digest,
    version: u32,
    /// False once the stream can no longer be resumed (a failed command).
    pub(super) broken: bool,
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

    fn point(&self) -> Point {
        Point {
            commands: self.count,
            offset: self.offset,
            digest: self.digest.value(),
        }
    }
}

/// The side file of subvolume `name` in DEST.
fn side_file(name: &[u8]) -> Vec<u8> {
    let mut v = RESERVED_PREFIX.to_vec();
    v.extend_from_slice(b"-resume-");
    for b in name {
        v.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    v
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
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
        cur.track = Track {
            count: p.commands,
            offset: p.offset,
            digest: Digest::from_value(p.digest),
            version: pos.version,
            broken: false,
        };
        self.log.info(format_args!(
            "At {} {shown} (resuming after command {})",
            if parent.is_some() {
                "snapshot"
            } else {
                "subvol"
            },
            p.commands
        ));
        let side = side_file(name);
        self.cur = Some(cur);
        self.load_side(&side)
            .map_err(CmdError::io("read what the stopped receive kept for END"))?;
        Ok(Flow::Continue)
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
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["flags", bits, path] => {
                    let bits: u32 = bits.parse().map_err(|_| bad())?;
                    let path = unhex(path).ok_or_else(bad)?;
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
                    let caps = (unhex(path).ok_or_else(bad)?, unhex(value).ok_or_else(bad)?);
                    if let Some(c) = self.cur.as_mut() {
                        c.caps = Some(caps);
                    }
                }
                _ => return Err(bad()),
            }
        }
        let _ = nix::unistd::unlinkat(
            Some(self.dest.fd().as_raw_fd()),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        Ok(())
    }

    /// After the stream stopped early: applies what is held back, syncs,
    /// and records where the subvolume being received stopped, so that a
    /// resumed stream can complete it. Returns its state, or why it cannot
    /// be resumed. The subvolume is closed either way.
    pub fn suspend(&mut self) -> Result<SubvolState, String> {
        let Some(c) = self.cur.as_ref() else {
            return Err("no subvolume was being received".into());
        };
        if c.track.broken || c.errors > 0 {
            return Err("a command failed".into());
        }
        if !matches!(c.guard, super::guard::Guard::Own) {
            return Err("it was received with --in-place or --link, which cannot resume".into());
        }
        if c.track.count == 0 {
            return Err("not even its first command was applied".into());
        }
        // What batches and the closing thread hold, then directory times.
        let flushed = self.finish().and_then(|()| {
            if let Some(p) = self.cur.as_mut().and_then(|c| c.pending.take()) {
                self.materialize(p, false)?;
                self.finish()?;
            }
            self.apply_dir_times()
        });
        if let Err(e) = flushed {
            return Err(format!("applying what was held back failed: {e}"));
        }
        let Some(mut c) = self.cur.take() else {
            return Err("no subvolume was being received".into());
        };
        c.retire();
        c.sources.clear();
        self.closer.wait();
        if let Err(e) = self.collect() {
            return Err(format!("finishing the last files failed: {e}"));
        }
        let mut state = c.state.clone();
        state.resume = Some(Resumable {
            version: c.track.version,
            point: c.track.point(),
        });
        let res = self
            .save_side(&c)
            .and_then(|()| nix::unistd::syncfs(c.res.root().as_raw_fd()).map_err(Into::into))
            .and_then(|()| self.dest.set_state(&c.name, &state))
            .and_then(|()| {
                // The state must be there when the token is asked for.
                nix::unistd::syncfs(self.dest.fd().as_raw_fd()).map_err(Into::into)
            });
        match res {
            Ok(()) => Ok(state),
            Err(e) => Err(format!("recording where it stopped failed: {e}")),
        }
    }

    /// Writes the side file of `c`, or removes a stale one.
    fn save_side(&self, c: &Current) -> std::io::Result<()> {
        let name = side_file(&c.name);
        let dir = self.dest.fd().as_raw_fd();
        match nix::unistd::unlinkat(
            Some(dir),
            name.as_slice(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
        if c.deferred.is_empty() && c.caps.is_none() {
            return Ok(());
        }
        let root_link = std::fs::read_link(format!("/proc/self/fd/{}", c.res.root().as_raw_fd()))?;
        let root = root_link.as_os_str().as_bytes();
        let mut text = String::from(
            "# rreceive: what END still needs: flags BITS PATH | caps PATH VALUE (hex)\n",
        );
        for (f, bits) in &c.deferred {
            use std::os::fd::AsFd;
            if let Some(p) = path_beneath(root, f.as_fd()) {
                text.push_str(&format!("flags\t{bits}\t{}\n", hex(&p)));
            }
        }
        if let Some((p, v)) = &c.caps {
            text.push_str(&format!("caps\t{}\t{}\n", hex(p), hex(v)));
        }
        let fd = ioctl::openat(
            Some(dir),
            name.as_slice(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        let mut f = File::from(fd);
        f.write_all(text.as_bytes())?;
        f.sync_all()
    }
}

/// Removes the side file of `name` in `dest`, if any (at END).
pub(super) fn forget_side(dest: BorrowedFd<'_>, name: &[u8]) {
    let _ = nix::unistd::unlinkat(
        Some(dest.as_raw_fd()),
        side_file(name).as_slice(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
}
