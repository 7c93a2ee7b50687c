//! `--fake-super` ([`Options::fake_super`](crate::Options::fake_super)):
//! receiving as an ordinary user, modelled on rsync's `--fake-super`.
//!
//! Without root, a receive cannot give files their owners, set-id bits or
//! device nodes (the first CHOWN fails with EPERM). With `--fake-super`,
//! rreceive keeps what it cannot apply in the xattr [`XATTR`]
//! (`user.rreceive.stat`) of each inode, and applies only what an ordinary
//! user can:
//!
//! - **CHOWN** records uid:gid; nothing is chowned, the inode stays the
//!   receiving user's. As a root chown does, it clears the recorded setuid
//!   bit of a non-directory, and its setgid bit when it is group-executable.
//! - **CHMOD** records the full mode and applies [`applied_mode`]: the
//!   permission and sticky bits without setuid and setgid, plus u+rw on
//!   anything but a directory and u+rwx on a directory, so that the user
//!   (and a later receive) can still write and enter it:
//!   `mode & 01777 | 0600`, or `| 0700` for a directory.
//! - **MKNOD, MKFIFO and MKSOCK** make an empty regular file of mode 0600
//!   whose xattr records the type, the mode MKNOD gives (0600 for MKFIFO and
//!   MKSOCK, which carry none) and the device number. Fifos and sockets are
//!   stand-ins too, as in rsync: Linux allows user xattrs on regular files
//!   and directories only, so a real fifo or socket could not keep its
//!   owner or mode.
//! - **Symlinks** cannot carry user xattrs either: a symlink's CHOWN is
//!   skipped, so its owner is lost (the receiving user owns it). Each is
//!   counted in [`Stats::skipped`](crate::Stats::skipped) and named under
//!   `-v`, as other things the destination cannot store are. So is an
//!   xattr outside `user.*` that an ordinary user may not set (EPERM:
//!   `security.capability`, `trusted.*`).
//!
//! The value is one line of text without a newline, rsync's format
//! `"%o %u,%u %u:%u"`: the mode in octal including the file type bits, the
//! device's major,minor (`0,0` for anything but a device), then uid:gid.
//! For example `100644 0,0 1000:100` (a file), `40755 0,0 0:0` (a
//! directory), `20644 1,3 0:0` (the character device 1:3).
//!
//! It is written at the first CHOWN or CHMOD of an inode (the subvolume
//! root included) and at the create of a stand-in. An inode without it is
//! what it looks like: one the stream never gave an owner or mode keeps the
//! receiving user's, as under root it keeps root's. A later CHOWN or CHMOD
//! (an incremental stream) reads it back and changes only its own part;
//! snapshot copies (default, `--link`, `--in-place`) keep it with the
//! other xattrs. Kernel streams CHOWN every inode they create, so in a
//! received tree every inode but a symlink has one.
//!
//! The stream itself never sets or removes it: an xattr name starting with
//! `user.rreceive.` is refused on every inode, with `--fake-super` or
//! without ([`crate::subvol::XATTR_RESERVED_PREFIX`]), so that a value in
//! the tree is always rreceive's own, also when a later `--fake-super`
//! receive continues a tree received without it.
//!
//! Where the filesystem has no user xattrs (tmpfs before Linux 6.6, some
//! network filesystems), the first inode that needs one fails the receive
//! with [`CmdError::NoUserXattrs`].

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use btrfs_stream::{CommandKind, Position};
use nix::errno::Errno;
use nix::sys::stat::{fchmod, FileStat, Mode};

use crate::error::{escape, CmdError};
use crate::meta;

/// The xattr holding an inode's owner, mode and device number.
pub(crate) const XATTR: &str = "user.rreceive.stat";

/// What a receive as root would have given an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// File type and mode bits (`st_mode`).
    pub mode: u32,
    /// The device's major number (0 for anything but a device).
    pub major: u64,
    /// The device's minor number.
    pub minor: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

impl Stat {
    /// What an inode without the xattr stands for: itself.
    pub(crate) fn of(st: &FileStat) -> Stat {
        let kind = st.st_mode & libc::S_IFMT;
        let dev = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
        Stat {
            mode: st.st_mode,
            major: if dev {
                libc::major(st.st_rdev).into()
            } else {
                0
            },
            minor: if dev {
                libc::minor(st.st_rdev).into()
            } else {
                0
            },
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }

    /// A device's, fifo's or socket's: `mode` with its type, device `rdev`
    /// as the stream encodes it (the kernel's `new_encode_dev`, which is
    /// glibc's `makedev` for 32-bit numbers).
    pub(crate) fn special(mode: u32, rdev: u64, uid: u32, gid: u32) -> Stat {
        let kind = mode & libc::S_IFMT;
        let dev = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
        Stat {
            mode: mode & (libc::S_IFMT | 0o7777),
            major: if dev { libc::major(rdev).into() } else { 0 },
            minor: if dev { libc::minor(rdev).into() } else { 0 },
            uid,
            gid,
        }
    }

    /// The file type bits.
    pub(crate) fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    /// CHOWN, as root would do it.
    pub(crate) fn chown(&mut self, uid: u32, gid: u32) {
        self.uid = uid;
        self.gid = gid;
        if self.kind() != libc::S_IFDIR {
            self.mode &= !libc::S_ISUID;
            if self.mode & libc::S_IXGRP != 0 {
                self.mode &= !libc::S_ISGID;
            }
        }
    }

    /// CHMOD to `perms` (the low 12 bits are kept).
    pub(crate) fn chmod(&mut self, perms: u32) {
        self.mode = self.kind() | (perms & 0o7777);
    }

    /// The xattr value.
    pub(crate) fn to_xattr(self) -> Vec<u8> {
        format!(
            "{:o} {},{} {}:{}",
            self.mode, self.major, self.minor, self.uid, self.gid
        )
        .into_bytes()
    }

    /// Parses an xattr value; `None` if it is not one rreceive writes.
    pub(crate) fn from_xattr(v: &[u8]) -> Option<Stat> {
        let s = std::str::from_utf8(v).ok()?;
        let mut it = s.split(' ');
        let mode = u32::from_str_radix(it.next()?, 8).ok()?;
        let (major, minor) = it.next()?.split_once(',')?;
        let (uid, gid) = it.next()?.split_once(':')?;
        if it.next().is_some() {
            return None;
        }
        let st = Stat {
            mode,
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            uid: uid.parse().ok()?,
            gid: gid.parse().ok()?,
        };
        (st.to_xattr() == v).then_some(st)
    }
}

/// How this receive gives inodes their owners, modes and special types,
/// decided once from [`Options::fake_super`](crate::Options::fake_super):
/// for real, or recorded in [`XATTR`]. The verbs ask it rather than the
/// option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owners {
    /// chown, chmod, mknod as the stream says.
    Real,
    /// `--fake-super`: recorded in the xattr, stand-ins for special files.
    Recorded,
}

impl Owners {
    /// The way `--fake-super` (`fake_super`) says.
    pub(crate) fn of(fake_super: bool) -> Owners {
        if fake_super {
            Owners::Recorded
        } else {
            Owners::Real
        }
    }

    /// Whether owners and modes are recorded in the xattr (never chowned;
    /// modes applied as [`applied_mode`]).
    pub(crate) fn recorded(self) -> bool {
        self == Owners::Recorded
    }

    /// Whether devices, fifos and sockets are made as such (else as
    /// stand-in files).
    pub(crate) fn real_specials(self) -> bool {
        self == Owners::Real
    }

    /// The mode a new regular file is created with, given the mode its
    /// stream gives it, if any, and whether a chown to another owner
    /// follows (which would clear set-id bits given at create).
    pub(crate) fn create_mode(self, mode: Option<u32>, chown_expected: bool) -> u32 {
        match mode {
            // --fake-super never chowns; the xattr keeps the rest.
            Some(m) if self == Owners::Recorded => applied_mode(libc::S_IFREG | m),
            Some(m) if !chown_expected => m,
            _ => 0o600,
        }
    }
}

/// The permission bits an inode recorded with `mode` gets on disk: no
/// setuid or setgid, and u+rw (u+rwx for a directory).
pub(crate) fn applied_mode(mode: u32) -> u32 {
    let perms = mode & 0o1777;
    if mode & libc::S_IFMT == libc::S_IFDIR {
        perms | 0o700
    } else {
        perms | 0o600
    }
}

/// Maps an xattr error: no user xattrs here is [`CmdError::NoUserXattrs`].
pub(crate) fn xattr_error(op: &'static str) -> impl FnOnce(io::Error) -> CmdError {
    move |e| match meta::errno(&e) {
        Some(Errno::EOPNOTSUPP) => CmdError::NoUserXattrs {
            op,
            errno: Errno::EOPNOTSUPP,
        },
        _ => CmdError::io(op)(e),
    }
}

/// The record read back (`get` is the xattr read of [`XATTR`]).
pub(crate) fn parse(got: io::Result<Option<Vec<u8>>>) -> Result<Option<Stat>, CmdError> {
    match got.map_err(xattr_error("get xattr user.rreceive.stat"))? {
        None => Ok(None),
        Some(v) => Stat::from_xattr(&v)
            .map(Some)
            .ok_or_else(|| CmdError::BadFakeStat(escape(&v))),
    }
}

/// Writes `st` into the xattr of `file`.
pub(crate) fn write(file: &File, st: &Stat) -> Result<(), CmdError> {
    use xattr::FileExt;
    file.set_xattr(XATTR, &st.to_xattr())
        .map_err(xattr_error("set xattr user.rreceive.stat"))
}

/// The CHOWN and CHMOD folded into a new regular file's create, which `st`
/// describes: records them in its xattr and applies [`applied_mode`].
/// On failure, the command that failed.
pub(crate) fn finish_new(
    file: &File,
    st: &FileStat,
    owner: Option<(u32, u32, Position)>,
    mode: Option<(u32, Position)>,
) -> Result<(), (CommandKind, Position, CmdError)> {
    let mut s = Stat::of(st);
    let mut first = None;
    if let Some((u, g, pos)) = owner {
        s.chown(u, g);
        first = Some((CommandKind::Chown, pos));
    }
    if let Some((m, pos)) = mode {
        s.chmod(m);
        first = first.or(Some((CommandKind::Chmod, pos)));
    }
    let Some((kind, pos)) = first else {
        return Ok(());
    };
    write(file, &s).map_err(|e| (kind, pos, e))?;
    let want = applied_mode(s.mode);
    if st.st_mode & 0o7777 != want {
        let (kind, pos) = mode.map_or((kind, pos), |(_, p)| (CommandKind::Chmod, p));
        fchmod(file.as_raw_fd(), Mode::from_bits_retain(want))
            .map_err(|e| (kind, pos, CmdError::os("chmod")(e)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_is_rsyncs_format_and_round_trips() {
        let dev = Stat::special(0o20644, 0x103, 0, 0);
        assert_eq!(dev.to_xattr(), b"20644 1,3 0:0");
        // The kernel's new_encode_dev(MKDEV(259, 70000)).
        let big = Stat::special(0o60644, 0x1111_0370, 1, 2);
        assert_eq!((big.major, big.minor), (259, 70000));
        for s in [dev, big] {
            assert_eq!(Stat::from_xattr(&s.to_xattr()), Some(s));
        }
        for bad in [
            &b""[..],
            b"100644 0,0 1:2\n",
            b"100644 0 1:2",
            b"1006448 0,0 1:2",
            b"100644 0,0 1:2 x",
            b"0100644 0,0 1:2",
        ] {
            assert_eq!(Stat::from_xattr(bad), None, "{}", escape(bad));
        }
    }

    #[test]
    fn chown_clears_set_id_bits_as_root_would() {
        let mut f = Stat::special(libc::S_IFREG | 0o6755, 0, 0, 0);
        f.chown(1, 2);
        assert_eq!(f.mode, libc::S_IFREG | 0o755);
        let mut g = Stat::special(libc::S_IFREG | 0o2740, 0, 0, 0);
        g.chown(1, 2);
        assert_eq!(g.mode, libc::S_IFREG | 0o2740, "setgid without g+x stays");
        let mut d = Stat::special(libc::S_IFDIR | 0o2755, 0, 0, 0);
        d.chown(1, 2);
        assert_eq!(d.mode, libc::S_IFDIR | 0o2755);
    }

    #[test]
    fn applied_mode_keeps_the_owner_able_to_write() {
        assert_eq!(applied_mode(libc::S_IFREG | 0o4755), 0o755);
        assert_eq!(applied_mode(libc::S_IFREG), 0o600);
        assert_eq!(applied_mode(libc::S_IFREG | 0o2444), 0o644);
        assert_eq!(applied_mode(libc::S_IFDIR | 0o1777), 0o1777);
        assert_eq!(applied_mode(libc::S_IFDIR | 0o0555), 0o755);
        assert_eq!(applied_mode(libc::S_IFCHR | 0o0640), 0o640);
    }
}
