//! MKFILE, MKDIR, MKNOD, MKFIFO, MKSOCK, SYMLINK: making the inode, once
//! its create is no longer held back.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, mkdirat, mknodat, Mode, SFlag};
use nix::unistd::{mkfifoat, symlinkat};

use crate::error::CmdError;
use crate::fake_super;
use crate::ioctl;

use super::current::{OpenFile, Receiver, R, RESOLVE};
use super::held::Create;

impl Receiver<'_> {
    /// Makes `what` at `at` for command number `change` (the create, or
    /// the RENAME folded into it). With `remake` (a resumed receive making
    /// again what a stopped one may have made), what is at `at` already is
    /// replaced, or kept if it is a directory.
    pub(super) fn create(
        &mut self,
        what: &Create,
        at: &[u8],
        file_mode: u32,
        change: u64,
        remake: bool,
    ) -> R<()> {
        match self.create_once(what, at, file_mode, change) {
            Err(CmdError::Os {
                errno: Errno::EEXIST,
                ..
            }) if remake => {}
            r => return r,
        }
        // The directory's times are read (if need be) before it changes.
        self.entries_change(&[crate::path::split(at).0], change)?;
        let real = self.owners.real_specials();
        let cur = self.cur.as_mut().ok_or(CmdError::NoSubvol)?;
        let (dir, name) = cur.res.parent(at).map_err(CmdError::os(RESOLVE))?;
        let there = crate::meta::At { dir, name }
            .stat()
            .map_err(CmdError::os("stat"))?;
        let kind = there.st_mode & libc::S_IFMT;
        let raw = dir.as_raw_fd();
        let name = name.to_vec();
        // What is there is kept where it may already have other names (a
        // LINK the stopped receive applied): the same inode, made anew.
        let keep = match what {
            Create::Dir => kind == libc::S_IFDIR,
            Create::File => kind == libc::S_IFREG,
            Create::Symlink(t) => {
                kind == libc::S_IFLNK
                    && nix::fcntl::readlinkat(Some(raw), name.as_slice())
                        .is_ok_and(|l| l.as_bytes() == t.as_slice())
            }
            Create::Fifo => real && kind == libc::S_IFIFO,
            Create::Sock => real && kind == libc::S_IFSOCK,
            Create::Nod { mode, rdev } => {
                real && kind == (*mode as u32) & libc::S_IFMT && there.st_rdev == *rdev
            }
        };
        match (what, keep) {
            (Create::Dir, true) => {
                self.dir_created(at)?;
                return Ok(());
            }
            (Create::File, true) => {
                if cur.is_open(at) {
                    cur.retire();
                }
                let fd = ioctl::openat(
                    Some(raw),
                    name.as_slice(),
                    OFlag::O_RDWR | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(CmdError::os("open what a stopped receive made"))?;
                let file = File::from(fd);
                nix::sys::stat::fchmod(file.as_raw_fd(), Mode::from_bits_retain(file_mode))
                    .map_err(CmdError::os("chmod"))?;
                cur.file = Some(OpenFile {
                    path: at.to_vec(),
                    file,
                    size: Some(0),
                    owner: None,
                });
                self.stats.created += 1;
                return Ok(());
            }
            (_, true) => return Ok(()),
            (_, false) if kind == libc::S_IFDIR => {
                return Err(CmdError::Os {
                    op: "create",
                    errno: Errno::EEXIST,
                })
            }
            (_, false) => {
                if cur.is_open(at) {
                    cur.retire();
                }
                nix::unistd::unlinkat(
                    Some(raw),
                    name.as_slice(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )
                .map_err(CmdError::os("unlink what a stopped receive made"))?;
            }
        }
        self.create_once(what, at, file_mode, change)
    }

    fn create_once(&mut self, what: &Create, at: &[u8], file_mode: u32, change: u64) -> R<()> {
        self.entries_change(&[crate::path::split(at).0], change)?;
        let real = self.owners.real_specials();
        let cur = self.cur()?;
        let (dir, name) = cur.res.parent(at).map_err(CmdError::os(RESOLVE))?;
        let raw = Some(dir.as_raw_fd());
        // A special file this filesystem cannot make: what stands in.
        let mut stood_in: Option<(&'static str, Errno)> = None;
        match what {
            Create::File => {
                let open = || {
                    ioctl::openat(
                        raw,
                        name,
                        OFlag::O_RDWR
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        Mode::from_bits_retain(file_mode),
                    )
                };
                let fd = match open() {
                    // Out of descriptors: let the other threads close theirs.
                    Err(Errno::EMFILE | Errno::ENFILE) => {
                        cur.away.closer.wait();
                        open()
                    }
                    r => r,
                }
                .map_err(CmdError::os("create file"))?;
                let file = File::from(fd);
                cur.retire();
                cur.file = Some(OpenFile {
                    path: at.to_vec(),
                    file,
                    size: Some(0),
                    // Set by `materialize`, which looks at the new file.
                    owner: None,
                });
            }
            Create::Dir => {
                mkdirat(raw, name, Mode::from_bits_retain(0o700)).map_err(CmdError::os("mkdir"))?
            }
            Create::Nod { mode, rdev } => {
                let kind = (*mode as u32) & libc::S_IFMT;
                if *mode > u64::from(u32::MAX)
                    || ![
                        libc::S_IFCHR,
                        libc::S_IFBLK,
                        libc::S_IFIFO,
                        libc::S_IFSOCK,
                        libc::S_IFREG,
                    ]
                    .contains(&kind)
                {
                    return Err(CmdError::BadMode(*mode));
                }
                if !real {
                    stand_in(raw, name, *mode as u32, *rdev)?;
                } else {
                    let device = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
                    match mknodat(
                        raw,
                        name,
                        SFlag::from_bits_truncate(kind),
                        Mode::empty(),
                        *rdev,
                    ) {
                        Err(e) if cannot_make(e, device) => {
                            stand_in_empty(raw, name)?;
                            stood_in = Some((special_kind(kind), e));
                            Ok(())
                        }
                        r => r,
                    }
                    .map_err(|e| {
                        if device {
                            CmdError::needs_root(e, "mknod", || "creating a device node".into())
                        } else {
                            CmdError::Os {
                                op: "mknod",
                                errno: e,
                            }
                        }
                    })?
                }
            }
            Create::Fifo | Create::Sock if !real => {
                let kind = if matches!(what, Create::Fifo) {
                    libc::S_IFIFO
                } else {
                    libc::S_IFSOCK
                };
                stand_in(raw, name, kind | 0o600, 0)?;
            }
            Create::Fifo => match mkfifoat(raw, name, Mode::from_bits_retain(0o600)) {
                Err(e) if cannot_make(e, false) => {
                    stand_in_empty(raw, name)?;
                    stood_in = Some((special_kind(libc::S_IFIFO), e));
                }
                r => r.map_err(CmdError::os("mkfifo"))?,
            },
            Create::Sock => {
                match mknodat(raw, name, SFlag::S_IFSOCK, Mode::from_bits_retain(0o600), 0) {
                    Err(e) if cannot_make(e, false) => {
                        stand_in_empty(raw, name)?;
                        stood_in = Some((special_kind(libc::S_IFSOCK), e));
                    }
                    r => r.map_err(CmdError::os("mksock"))?,
                }
            }
            Create::Symlink(target) => {
                symlinkat(target.as_slice(), raw, name).map_err(CmdError::os("symlink"))?
            }
        }
        self.stats.created += 1;
        if let Some((kind, e)) = stood_in {
            self.skip(kind, 1);
            self.log.note(format_args!(
                "{} '{}' cannot be made on this filesystem ({}): an empty file stands in; skipped",
                kind.split(' ').next().unwrap_or(kind),
                crate::error::escape(at),
                e.desc()
            ));
        }
        if matches!(what, Create::Dir) {
            self.dir_created(at)?;
        }
        Ok(())
    }
}

/// Whether `e`, from making a fifo, socket or (`device`) device node, says
/// this filesystem cannot hold one (sshfs: EPERM, as SFTP has no mknod),
/// not that this user may not (EPERM for a device node made without root).
fn cannot_make(e: Errno, device: bool) -> bool {
    match e {
        Errno::EOPNOTSUPP | Errno::ENOSYS => true,
        Errno::EPERM => !device || nix::unistd::geteuid().is_root(),
        _ => false,
    }
}

/// The kind said in the skip warning for a special file of type `kind`
/// (`S_IFMT` bits) that an empty file stands in for.
fn special_kind(kind: u32) -> &'static str {
    match kind {
        libc::S_IFIFO => "fifo (an empty file stands in)",
        libc::S_IFSOCK => "socket (an empty file stands in)",
        libc::S_IFCHR => "character device (an empty file stands in)",
        libc::S_IFBLK => "block device (an empty file stands in)",
        _ => "special file (an empty file stands in)",
    }
}

/// An empty regular file of mode 0600 where a special file this
/// filesystem cannot make was to be, so that what the stream does to it
/// after (owner, mode, times, renames, links, removal) applies.
fn stand_in_empty(dir: Option<std::os::fd::RawFd>, name: &[u8]) -> R<()> {
    ioctl::openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(0o600),
    )
    .map(drop)
    .map_err(CmdError::os("create file"))
}

/// `--fake-super`: an empty regular file of mode 0600 in place of a device,
/// fifo or socket of `mode` (with its type) and device number `rdev`,
/// recorded in its xattr ([`fake_super`]).
fn stand_in(dir: Option<std::os::fd::RawFd>, name: &[u8], mode: u32, rdev: u64) -> R<()> {
    let fd = ioctl::openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(0o600),
    )
    .map_err(CmdError::os("create file"))?;
    let file = File::from(fd);
    let st = fstat(file.as_raw_fd()).map_err(CmdError::os("stat"))?;
    let rec = fake_super::Stat::special(mode, rdev, st.st_uid, st.st_gid);
    fake_super::write(&file, &rec)
}
