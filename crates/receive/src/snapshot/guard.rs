//! What must happen before a command changes something the parent has,
//! when the snapshot is not a copy of it (`--in-place`, `--link`).
//!
//! - In place, the parent's tree is the new subvolume: what a clone from
//!   the parent could still need is kept first ([`Overlay`](super::overlay::Overlay)).
//! - Linked, files the stream has not touched are hard links to the
//!   parent's: any change to one (data, owner, mode, times, xattrs, flags,
//!   a new hard link) first replaces it with a copy of its own, so that the
//!   parent never sees it. Removing or renaming one of the new tree's names
//!   leaves the parent's alone and needs no copy. No set of shared files is
//!   kept: a file with one link is the new tree's alone, and the new tree's
//!   own files with several (copies of hardlink groups, LINK targets) are
//!   few and listed.
//!
//! May call: its siblings `copy`, `overlay`, `workdir` and `strategy`, and
//! `error`, `ioctl`, `flags`, `path`; what it needs of the tree being
//! received (its paths, its open file, the flags due at END) comes through
//! [`Tree`], which the engine implements.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;

use btrfs_stream::Command;
use nix::fcntl::{AtFlags, FallocateFlags, OFlag};
use nix::sys::stat::fstatat;

use crate::error::CmdError;
use crate::flags::{LATE_FLAGS, MAX_DEFERRED};
use crate::ioctl;

use super::copy::{self, open_noatime, Id};
use super::strategy::{Kind, Strategy};
use super::workdir::WriteAhead;

type R<T> = Result<T, CmdError>;

/// What the guard needs of the tree being received.
pub(crate) trait Tree {
    /// The directory holding `path` and its last name, resolved beneath
    /// the subvolume.
    fn parent<'p>(&mut self, path: &'p [u8]) -> R<(BorrowedFd<'_>, &'p [u8])>;
    /// The subvolume's root directory.
    fn root(&self) -> BorrowedFd<'_>;
    /// A descriptor of regular file `path`, the one kept open.
    fn open_file(&mut self, path: &[u8]) -> R<File>;
    /// Closes the file kept open if it is `path`'s.
    fn close(&mut self, path: &[u8]);
    /// The descriptors whose immutable/append flags wait for END.
    fn deferred(&mut self) -> &mut Vec<(File, u32)>;
    /// Records in the journal that `path`'s flags `bits` wait for END.
    fn journal_flags(&mut self, path: &[u8], bits: u32);
}

impl Strategy {
    /// Replaces `path`, if it is still a hard link to the parent's inode,
    /// with a copy of its own. Returns the identity of the file now at
    /// `path` (`None` for a directory).
    fn unshare(&mut self, path: &[u8], t: &mut dyn Tree) -> R<Option<Id>> {
        let Kind::Link(own) = &self.kind else {
            return Ok(None);
        };
        if path.is_empty() {
            return Ok(None);
        }
        let (dir, name) = t.parent(path)?;
        let stat = |dir: BorrowedFd<'_>| {
            fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(CmdError::os("stat"))
        };
        let st = stat(dir)?;
        let id = (st.st_dev, st.st_ino);
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Ok(None);
        }
        if st.st_nlink < 2 || own.contains(&id) {
            return Ok(Some(id));
        }
        let work = self.work.as_ref().ok_or(CmdError::NoSubvol)?;
        let mut how = self.copy;
        let ahead = self.write_ahead;
        // With durable checkpoints the copy's data, and the flags due to
        // it at END, are on disk before it replaces the link.
        let mut before = |ino: u64, data: Option<&std::fs::File>, late: Option<u32>| {
            if let Some(bits) = late.filter(|_| ahead != WriteAhead::Off) {
                work.record_late(ino, bits, WriteAhead::Off)?;
            }
            let mode = match late {
                Some(_) if ahead != WriteAhead::Off => Some(work.mode_file()?),
                _ => None,
            };
            // Data copied (not reflinked) reaches the disk before the
            // rename, unless the filesystem sees to that itself.
            let data = data.filter(|_| {
                !matches!(
                    ahead,
                    WriteAhead::Flush {
                        renames_keep_data: true
                    }
                )
            });
            let files: Vec<&std::fs::File> = data.into_iter().chain(mode.as_ref()).collect();
            ahead.barrier(&files)
        };
        let late = copy::replace_with_copy(dir, name, work.fd(), &mut how, &mut before)
            .map_err(CmdError::io("copy a linked file before it changes"))?;
        let st = stat(dir)?;
        self.copy = how;
        if let Some(l) = late {
            if t.deferred().len() < MAX_DEFERRED {
                t.journal_flags(path, l.1);
                t.deferred().push(l);
            }
        }
        t.close(path);
        Ok(Some((st.st_dev, st.st_ino)))
    }

    /// In place: keeps the parent's entry at `path` before it is taken away.
    fn displace(&mut self, path: &[u8], rmdir: bool, t: &mut dyn Tree) -> R<()> {
        let Kind::InPlace(o) = &mut self.kind else {
            return Ok(());
        };
        let (dir, name) = t.parent(path)?;
        o.displace(dir, name, rmdir)
            .map_err(CmdError::io("keep the parent's entry"))
    }

    /// In place: keeps the parent's bytes of `path` in `off..off + len`.
    fn before_data(&mut self, path: &[u8], off: u64, len: u64, t: &mut dyn Tree) -> R<()> {
        if !matches!(self.kind, Kind::InPlace(_)) {
            return Ok(());
        }
        let file = t.open_file(path)?;
        if let Kind::InPlace(o) = &mut self.kind {
            o.before_data(&file, off, len)
                .map_err(CmdError::io("keep the parent's data"))?;
        }
        Ok(())
    }
}

/// The paths whose inodes `cmd` changes, for the commands applied when
/// they come (creates are held back and made in batches).
fn paths<'c>(cmd: &Command<'c>) -> Vec<&'c [u8]> {
    use Command as C;
    match *cmd {
        C::Rename { from, to } => vec![from, to],
        C::Link { path, target } => vec![path, target],
        C::Unlink { path }
        | C::Rmdir { path }
        | C::SetXattr { path, .. }
        | C::RemoveXattr { path, .. }
        | C::Write { path, .. }
        | C::Clone { path, .. }
        | C::Truncate { path, .. }
        | C::Chmod { path, .. }
        | C::Chown { path, .. }
        | C::Utimes { path, .. }
        | C::Fallocate { path, .. }
        | C::EncodedWrite { path, .. } => vec![path],
        _ => Vec::new(),
    }
}

impl Strategy {
    /// In place: lifts the immutable and append-only flags from the inodes
    /// at `paths` and their directories, to be given back at END (unless
    /// the stream sets others). The kernel sends a flag change after the
    /// changes it allows, so a parent's file made immutable by an earlier
    /// stream refuses them. Returns whether any flag was lifted.
    fn unlock(&mut self, paths: &[&[u8]], t: &mut dyn Tree) -> bool {
        if !matches!(self.kind, Kind::InPlace(_)) {
            return false;
        }
        let mut lifted = false;
        for p in paths {
            let (parent, _) = crate::path::split(p);
            for q in [*p, parent] {
                let f = if q.is_empty() {
                    t.root().try_clone_to_owned().ok().and_then(|d| {
                        open_noatime(d.as_fd(), b".", OFlag::O_DIRECTORY | OFlag::O_NONBLOCK).ok()
                    })
                } else {
                    match t.parent(q) {
                        Ok((dir, name)) => open_noatime(dir, name, OFlag::O_NONBLOCK).ok(),
                        Err(_) => None,
                    }
                };
                let Some(f) = f else { continue };
                let Ok(flags) = ioctl::get_inode_flags(f.as_fd()) else {
                    continue;
                };
                if flags & LATE_FLAGS == 0 || t.deferred().len() >= MAX_DEFERRED {
                    continue;
                }
                // Logged, and durable, before it is lifted.
                let ino = f.metadata().map(|m| m.ino());
                if let (Kind::InPlace(o), Ok(ino)) = (&mut self.kind, ino) {
                    let logged = o
                        .lifting(ino, flags & LATE_FLAGS)
                        .and_then(|()| o.barrier(self.write_ahead));
                    if logged.is_err() {
                        continue;
                    }
                }
                if ioctl::set_inode_flags(f.as_fd(), flags & !LATE_FLAGS).is_err() {
                    continue;
                }
                lifted = true;
                // Flags the stream already set for this inode are what END
                // applies; only otherwise are the lifted ones given back.
                let id = |f: &std::fs::File| f.metadata().ok().map(|m| (m.dev(), m.ino()));
                let mine = id(&f);
                if !t.deferred().iter().any(|(g, _)| id(g) == mine) {
                    t.journal_flags(q, flags & LATE_FLAGS);
                    t.deferred().push((f, flags & LATE_FLAGS));
                }
            }
        }
        lifted
    }

    /// After an EPERM from applying `cmd`: in place, lifts the flags that
    /// may have refused it (see [`Strategy::unlock`]); whether any was, so
    /// that `cmd` is applied again.
    pub(crate) fn lift(&mut self, cmd: &Command<'_>, t: &mut dyn Tree) -> bool {
        self.unlock(&paths(cmd), t)
    }

    /// Before `cmd` is applied: keeps or unshares what it would change of
    /// the parent's.
    pub(crate) fn guard(&mut self, cmd: &Command<'_>, t: &mut dyn Tree) -> R<()> {
        match &mut self.kind {
            Kind::New | Kind::Btrfs | Kind::Copy => Ok(()),
            Kind::InPlace(o) => {
                if !matches!(
                    cmd,
                    Command::Subvol { .. } | Command::Snapshot { .. } | Command::End {}
                ) {
                    o.changed = true;
                }
                self.keep_for_parent(cmd, t)?;
                // What was kept reaches the disk before the change.
                let ahead = self.write_ahead;
                match &mut self.kind {
                    Kind::InPlace(o) => o
                        .barrier(ahead)
                        .map_err(CmdError::io("flush what was kept of the parent's")),
                    _ => Ok(()),
                }
            }
            Kind::Link(_) => self.unshare_for(cmd, t),
        }
    }

    /// In place: what `cmd` takes away or replaces of the parent's is kept.
    fn keep_for_parent(&mut self, cmd: &Command<'_>, t: &mut dyn Tree) -> R<()> {
        use Command as C;
        match *cmd {
            C::Rename { from, to } => {
                self.displace(from, false, t)?;
                self.displace(to, false, t)
            }
            C::Unlink { path } => self.displace(path, false, t),
            C::Rmdir { path } => self.displace(path, true, t),
            C::Write { path, offset, data } => self.before_data(path, offset, data.len() as u64, t),
            C::Clone {
                path, offset, len, ..
            } => self.before_data(path, offset, len, t),
            C::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                ..
            } => self.before_data(path, offset, unencoded_file_len, t),
            C::Truncate { path, size } => self.before_data(path, size, u64::MAX, t),
            C::Fallocate {
                path,
                mode,
                offset,
                len,
            } => {
                let changes = (FallocateFlags::FALLOC_FL_PUNCH_HOLE
                    | FallocateFlags::FALLOC_FL_ZERO_RANGE)
                    .bits() as u32;
                if mode & changes != 0 {
                    self.before_data(path, offset, len, t)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Linked: a file `cmd` changes gets a copy of its own first.
    fn unshare_for(&mut self, cmd: &Command<'_>, t: &mut dyn Tree) -> R<()> {
        use Command as C;
        match *cmd {
            C::Write { path, .. }
            | C::Clone { path, .. }
            | C::Truncate { path, .. }
            | C::Fallocate { path, .. }
            | C::EncodedWrite { path, .. }
            | C::Chmod { path, .. }
            | C::Chown { path, .. }
            | C::Utimes { path, .. }
            | C::SetXattr { path, .. }
            | C::RemoveXattr { path, .. }
            | C::Fileattr { path, .. }
            | C::EnableVerity { path, .. } => self.unshare(path, t).map(drop),
            C::Link { target, .. } => {
                // The target gains a name: it is the new tree's own now,
                // recorded before the name is made (a resumed receive
                // must not take it for the parent's).
                if let Some(id) = self.unshare(target, t)? {
                    if let Kind::Link(own) = &mut self.kind {
                        if own.insert(id) {
                            if let Some(w) = &self.work {
                                w.record_own(id.1, self.write_ahead)
                                    .map_err(CmdError::io("record a file of the new tree's own"))?;
                            }
                        }
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
