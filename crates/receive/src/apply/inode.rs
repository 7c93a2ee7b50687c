//! CHOWN, CHMOD, UTIMES, SET_XATTR, REMOVE_XATTR and FILEATTR: an inode's
//! own metadata.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use btrfs_stream::{Position, Timespec};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{fchmod, fstat, futimens, Mode};
use nix::unistd::{fchown, Gid, Uid};

use crate::dest::Dest;
use crate::error::{escape, CmdError};
use crate::fake_super::{self, Stat};
use crate::ioctl;
use crate::meta::{self, At};
use crate::snapshot::copy;
use crate::subvol::XATTR_RESERVED_PREFIX;
use crate::xattr_limit;

use super::current::{is_kind, target, Current, Flow, Receiver, Target, R, RESOLVE};

pub(super) use crate::flags::{managed_flags, map_inode_flags, LATE_FLAGS, MAX_DEFERRED};

/// How GlusterFS keeps file capabilities: its FUSE client refuses
/// `security.capability` (EOPNOTSUPP) unless started with `--capability`,
/// which `mount -t glusterfs` has no option for.
const GLUSTER_CAPABILITY_FIX: &str = "GlusterFS keeps file capabilities only when its client \
     runs with --capability (glusterfs --capability --acl --volfile-server=HOST \
     --volfile-id=VOLUME DIR; mount -t glusterfs has no option for it)";

/// `r`, the result of setting the owner or times of `at`, with ENOENT
/// from a symlink (a filesystem that followed it to nothing: sshfs)
/// turned into ELOOP, the refusal to follow it.
fn symlink_refused(at: At<'_>, r: nix::Result<()>) -> nix::Result<()> {
    match r {
        Err(Errno::ENOENT) if at.stat().is_ok_and(|st| is_kind(st.st_mode, libc::S_IFLNK)) => {
            Err(Errno::ELOOP)
        }
        r => r,
    }
}

/// Sets the atime and mtime of `path`, through the open file when it is
/// that one.
pub(super) fn set_times(
    cur: &mut Current,
    dest: &Dest,
    path: &[u8],
    atime: Timespec,
    mtime: Timespec,
) -> R<()> {
    match target(cur, dest, path)? {
        Target::File(f) => {
            let a = meta::timespec(atime).map_err(CmdError::os("utimes"))?;
            let m = meta::timespec(mtime).map_err(CmdError::os("utimes"))?;
            futimens(f.as_raw_fd(), &a, &m)
        }
        Target::At(at) => symlink_refused(at, at.utimes(atime, mtime)),
    }
    .map_err(CmdError::os("utimes"))
}

impl Receiver<'_> {
    pub(super) fn chown(&mut self, path: &[u8], uid: u64, gid: u64) -> R<Flow> {
        let uid = u32::try_from(uid).map_err(|_| CmdError::OutOfRange("uid"))?;
        let gid = u32::try_from(gid).map_err(|_| CmdError::OutOfRange("gid"))?;
        if self.owners.recorded() {
            return self.fake_chown(path, uid, gid);
        }
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let caps = match &cur.later.caps {
            Some((p, v)) if p == path => Some(v.clone()),
            _ => None,
        };
        let same = matches!(&cur.file, Some(f) if f.path == path && f.owner == Some((uid, gid)));
        if same {
            // A file this receive created, already owned so: chown would
            // change nothing (no set-id bits or capabilities yet).
            self.stats.chowns_skipped += 1;
        } else {
            let done = match target(cur, &self.dest, path)? {
                Target::File(f) => fchown(
                    f.as_raw_fd(),
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                ),
                Target::At(at) => symlink_refused(at, at.chown(uid, gid)),
            };
            if done == Err(Errno::ELOOP) {
                self.symlink_skipped("owner", path);
                return Ok(Flow::Continue);
            }
            done.map_err(CmdError::chown(uid, gid))?;
            if let Some(f) = cur.file.as_mut().filter(|f| f.path == path) {
                f.owner = Some((uid, gid));
            }
        }
        if let Some(v) = caps {
            // chown drops file capabilities; btrfs-progs sets them again.
            let cur = self.cur()?;
            if let Some(j) = cur.later.dir_times.journal.as_mut() {
                j.caps(path, None);
            }
            cur.later.caps = None;
            self.xattr_op(path, b"security.capability", Some(&v))?;
        }
        Ok(Flow::Continue)
    }

    pub(super) fn chmod(&mut self, path: &[u8], mode: u64) -> R<Flow> {
        let mode = (mode & 0o7777) as u32;
        if self.owners.recorded() {
            return self.fake_chmod(path, mode);
        }
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        match target(cur, &self.dest, path)? {
            Target::File(f) => {
                fchmod(f.as_raw_fd(), Mode::from_bits_retain(mode)).map_err(CmdError::os("chmod"))
            }
            Target::At(at) => match at.chmod(mode) {
                Err(Errno::EOPNOTSUPP) => match at.stat() {
                    Ok(st) if is_kind(st.st_mode, libc::S_IFLNK) => Err(CmdError::Symlink),
                    _ => Err(CmdError::Os {
                        op: "chmod",
                        errno: Errno::EOPNOTSUPP,
                    }),
                },
                r => r.map_err(CmdError::os("chmod")),
            },
        }?;
        Ok(Flow::Continue)
    }

    pub(super) fn utimes(
        &mut self,
        pos: Position,
        path: &[u8],
        atime: Timespec,
        mtime: Timespec,
    ) -> R<Flow> {
        meta::timespec(atime).map_err(CmdError::os("utimes"))?;
        meta::timespec(mtime).map_err(CmdError::os("utimes"))?;
        if self.hold_dir_times(pos, path, atime, mtime)? {
            return Ok(Flow::Continue);
        }
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        match set_times(cur, &self.dest, path, atime, mtime) {
            Err(CmdError::Os {
                errno: Errno::ELOOP,
                ..
            }) => self.symlink_skipped("times", path),
            r => r?,
        }
        Ok(Flow::Continue)
    }

    /// The owner or times (`what`) of symlink `path` not set: the
    /// filesystem would set them on what it points to (sshfs), or
    /// followed it and found nothing there.
    fn symlink_skipped(&mut self, what: &str, path: &[u8]) {
        self.skip(
            &format!("symlink {what} (the filesystem would follow the link)"),
            1,
        );
        self.log.note(format_args!(
            "{what} of symlink '{}' not set: this filesystem would set it on what the link \
             points to; skipped",
            escape(path)
        ));
    }

    /// `--fake-super` CHOWN: records the owner (see [`fake_super`]).
    fn fake_chown(&mut self, path: &[u8], uid: u32, gid: u32) -> R<Flow> {
        if let Some(kind) = self.fake_record(path, |s| s.chown(uid, gid))? {
            self.skip("owners of symlinks and special files (--fake-super)", 1);
            self.log.note(format_args!(
                "owner {uid}:{gid} of {} '{}' not kept: only regular files and directories \
                 carry user.rreceive.stat",
                if kind == libc::S_IFLNK {
                    "symlink"
                } else {
                    "special file"
                },
                escape(path)
            ));
        }
        Ok(Flow::Continue)
    }

    /// `--fake-super` CHMOD: records the mode and applies what an ordinary
    /// user can (see [`fake_super`]).
    fn fake_chmod(&mut self, path: &[u8], mode: u32) -> R<Flow> {
        match self.fake_record(path, |s| s.chmod(mode))? {
            None => {}
            Some(libc::S_IFLNK) => return Err(CmdError::Symlink),
            Some(kind) => {
                // A real fifo, socket or device (from a tree received
                // without --fake-super): only its permission bits.
                let want = fake_super::applied_mode(kind | mode);
                let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
                let (dir, name) = cur.res.parent(path).map_err(CmdError::os(RESOLVE))?;
                At { dir, name }
                    .chmod(want)
                    .map_err(CmdError::os("chmod"))?;
                if want != mode {
                    self.skip("modes of special files (--fake-super)", 1);
                    self.log.note(format_args!(
                        "mode {mode:04o} of special file '{}' applied as {want:04o}: only \
                         regular files and directories carry user.rreceive.stat",
                        escape(path)
                    ));
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// Changes the record of `path` in its `user.rreceive.stat` (made from
    /// its own stat if it has none) and applies its mode. For an inode that
    /// cannot carry user xattrs (anything but a regular file or directory)
    /// nothing is done and its file type is returned.
    fn fake_record(&mut self, path: &[u8], change: impl FnOnce(&mut Stat)) -> R<Option<u32>> {
        use xattr::FileExt;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        match target(cur, &self.dest, path)? {
            Target::File(f) => {
                let st = fstat(f.as_raw_fd()).map_err(CmdError::os("stat"))?;
                let mut s = fake_super::parse(f.get_xattr(fake_super::XATTR))?
                    .unwrap_or_else(|| Stat::of(&st));
                change(&mut s);
                fake_super::write(f, &s)?;
                let want = fake_super::applied_mode(s.mode);
                if st.st_mode & 0o7777 != want {
                    fchmod(f.as_raw_fd(), Mode::from_bits_retain(want))
                        .map_err(CmdError::os("chmod"))?;
                }
            }
            Target::At(at) => {
                let h = at.handle().map_err(CmdError::os("open"))?;
                let st = fstat(h.fd().as_raw_fd()).map_err(CmdError::os("stat"))?;
                let kind = st.st_mode & libc::S_IFMT;
                if kind != libc::S_IFREG && kind != libc::S_IFDIR {
                    return Ok(Some(kind));
                }
                let name = fake_super::XATTR.as_bytes();
                let mut s = fake_super::parse(h.get_xattr(name))?.unwrap_or_else(|| Stat::of(&st));
                change(&mut s);
                h.set_xattr(name, &s.to_xattr())
                    .map_err(fake_super::xattr_error("set xattr user.rreceive.stat"))?;
                let want = fake_super::applied_mode(s.mode);
                if st.st_mode & 0o7777 != want {
                    at.chmod(want).map_err(CmdError::os("chmod"))?;
                }
            }
        }
        Ok(None)
    }

    fn check_xattr(name: &[u8]) -> R<()> {
        if name.is_empty() || name.contains(&0) {
            return Err(CmdError::BadXattrName);
        }
        if name.starts_with(XATTR_RESERVED_PREFIX) {
            return Err(CmdError::ReservedXattr(escape(name)));
        }
        Ok(())
    }

    pub(super) fn set_xattr(&mut self, path: &[u8], name: &[u8], data: &[u8]) -> R<Flow> {
        Self::check_xattr(name)?;
        if name == b"security.capability" {
            let cur = self.cur()?;
            if let Some(j) = cur.later.dir_times.journal.as_mut() {
                j.caps(path, Some(data));
            }
            cur.later.caps = Some((path.to_vec(), data.to_vec()));
        }
        self.xattr_op(path, name, Some(data))?;
        Ok(Flow::Continue)
    }

    pub(super) fn remove_xattr(&mut self, path: &[u8], name: &[u8]) -> R<Flow> {
        Self::check_xattr(name)?;
        self.xattr_op(path, name, None)?;
        Ok(Flow::Continue)
    }

    fn xattr_op(&mut self, path: &[u8], name: &[u8], value: Option<&[u8]>) -> R<()> {
        use std::os::unix::ffi::OsStrExt;
        use xattr::FileExt;
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        if name == b"system.posix_acl_default" {
            cur.res.forget_acl(path);
        }
        let os = std::ffi::OsStr::from_bytes(name);
        let res = match target(cur, &self.dest, path)? {
            Target::File(f) => match value {
                Some(v) => f.set_xattr(os, v),
                None => f.remove_xattr(os),
            },
            Target::At(at) => {
                let h = at.handle().map_err(CmdError::os("open"))?;
                match value {
                    Some(v) => h.set_xattr(name, v),
                    None => h.remove_xattr(name),
                }
            }
        };
        let op = if value.is_some() {
            "set xattr"
        } else {
            "remove xattr"
        };
        match res {
            Ok(()) => Ok(()),
            Err(e) if value.is_none() && meta::errno(&e) == Some(Errno::ENODATA) => {
                self.log.note(format_args!(
                    "xattr {} of '{}' was already gone",
                    escape(name),
                    escape(path)
                ));
                Ok(())
            }
            Err(e)
                if self.owners.recorded()
                    && meta::errno(&e) == Some(Errno::EPERM)
                    && !name.starts_with(b"user.") =>
            {
                self.skip(&format!("xattr {} (needs root)", escape(name)), 1);
                self.log.note(format_args!(
                    "xattr {} of '{}' needs root; skipped (--fake-super)",
                    escape(name),
                    escape(path)
                ));
                Ok(())
            }
            Err(e) if meta::errno(&e) == Some(Errno::EOPNOTSUPP) => {
                self.skip(&format!("xattr {}", escape(name)), 1);
                if name.starts_with(b"system.posix_acl_") {
                    self.skipped
                        .fix("ACLs need the mount option acl (mount -o acl)");
                }
                if name == b"security.capability"
                    && self.dest.caps().is_some_and(|c| c.fs == "fuse.glusterfs")
                {
                    self.skipped.fix(GLUSTER_CAPABILITY_FIX);
                }
                self.log.note(format_args!(
                    "xattr {} of '{}' not supported by this filesystem; skipped",
                    escape(name),
                    escape(path)
                ));
                Ok(())
            }
            Err(e) => {
                let too_large = match (value, meta::errno(&e)) {
                    (Some(v), Some(errno)) => {
                        xattr_limit::too_large(self.dest.fd(), name, v.len(), errno)
                    }
                    _ => None,
                };
                let Some(t) = too_large else {
                    return Err(CmdError::io(op)(e));
                };
                self.skip(
                    &format!("xattr {} (too large for this filesystem)", escape(name)),
                    1,
                );
                if let Some(fix) = &t.fix {
                    self.skipped.fix(fix);
                }
                self.log.note(format_args!(
                    "xattr {} of '{}' ({} bytes) is too large for this filesystem: {}; skipped",
                    escape(name),
                    escape(path),
                    value.map_or(0, <[u8]>::len),
                    t.why
                ));
                Ok(())
            }
        }
    }
    /// A real descriptor on a regular file or directory (never a device).
    pub(super) fn open_for_ioctl(&mut self, path: &[u8]) -> R<File> {
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let (dir, name): (BorrowedFd<'_>, &[u8]) = if path.is_empty() {
            (self.dest.fd(), &cur.name)
        } else {
            cur.res.parent(path).map_err(CmdError::os(RESOLVE))?
        };
        let at = At { dir, name };
        let st = at.stat().map_err(CmdError::os("stat"))?;
        let extra = if is_kind(st.st_mode, libc::S_IFDIR) {
            OFlag::O_DIRECTORY
        } else if is_kind(st.st_mode, libc::S_IFREG) {
            OFlag::empty()
        } else if is_kind(st.st_mode, libc::S_IFLNK) {
            return Err(CmdError::Symlink);
        } else {
            return Err(CmdError::NotRegular);
        };
        let f = copy::open_noatime(dir, name, extra | OFlag::O_NONBLOCK)
            .map_err(CmdError::os("open"))?;
        let st2 = fstat(f.as_raw_fd()).map_err(CmdError::os("stat"))?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(CmdError::Os {
                op: "open",
                errno: Errno::ESTALE,
            });
        }
        Ok(f)
    }

    pub(super) fn fileattr(&mut self, path: &[u8], attr: u64) -> R<Flow> {
        self.cur()?;
        let want = map_inode_flags(attr);
        let f = self.open_for_ioctl(path)?;
        let now = match ioctl::get_inode_flags(f.as_fd()) {
            Ok(n) => n,
            Err(e) => {
                self.skip("inode flags (chattr)", 1);
                self.log.note(format_args!(
                    "fileattr {attr:#x} of '{}' not applied: {e}",
                    escape(path)
                ));
                return Ok(Flow::Continue);
            }
        };
        // Immutable and append-only go at once when cleared (later commands
        // may need that) and at END when set.
        let early = (now & !managed_flags()) | (want & !LATE_FLAGS) | (now & want & LATE_FLAGS);
        if early != now {
            if let Err(e) = ioctl::set_inode_flags(f.as_fd(), early) {
                self.skip("inode flags (chattr)", 1);
                self.log.note(format_args!(
                    "fileattr {attr:#x} of '{}' not applied: {e}",
                    escape(path)
                ));
            }
        }
        let late = want & LATE_FLAGS;
        let cur = self.cur()?;
        if late != now & LATE_FLAGS || !cur.later.deferred.is_empty() {
            if cur.later.deferred.len() < MAX_DEFERRED {
                if let Some(j) = cur.later.dir_times.journal.as_mut() {
                    j.flags(path, late);
                }
                cur.later.deferred.push((f, late));
            } else {
                self.skip("immutable/append flags", 1);
                self.log.note(format_args!(
                    "too many immutable/append files; flags of '{}' not applied",
                    escape(path)
                ));
            }
        }
        Ok(Flow::Continue)
    }
}
