//! Owner, mode, times and xattrs of one object, named by its parent
//! directory and final component, without ever following a symlink there.
//!
//! chown and utimes have `AT_SYMLINK_NOFOLLOW` forms. chmod uses glibc's
//! `fchmodat(AT_SYMLINK_NOFOLLOW)`, which refuses symlinks. Xattrs are set
//! through an `O_PATH | O_NOFOLLOW` descriptor and its `/proc/self/fd`
//! entry, which names the object itself, symlink or not; regular files and
//! directories fall back to a real descriptor where /proc is missing.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use btrfs_stream::Timespec;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fchmodat, fstatat, utimensat, FchmodatFlags, FileStat, Mode, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchownat, Gid, Uid};

use crate::ioctl;

/// An object in a directory: `dir` + single-component `name`.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    /// The parent directory.
    pub dir: BorrowedFd<'a>,
    /// The final component.
    pub name: &'a [u8],
}

impl At<'_> {
    fn raw(&self) -> Option<std::os::fd::RawFd> {
        Some(self.dir.as_raw_fd())
    }

    /// lstat.
    pub(crate) fn stat(&self) -> nix::Result<FileStat> {
        fstatat(self.raw(), self.name, AtFlags::AT_SYMLINK_NOFOLLOW)
    }

    /// lchown; `ELOOP` for a symlink where the filesystem would follow
    /// it (see [`symlink_followed`]).
    pub(crate) fn chown(&self, uid: u32, gid: u32) -> nix::Result<()> {
        if symlink_followed(self.dir, self.name) {
            return Err(nix::errno::Errno::ELOOP);
        }
        fchownat(
            self.raw(),
            self.name,
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
    }

    /// chmod that refuses a symlink (`EOPNOTSUPP`).
    pub(crate) fn chmod(&self, mode: u32) -> nix::Result<()> {
        fchmodat(
            self.raw(),
            self.name,
            Mode::from_bits_retain(mode & 0o7777),
            FchmodatFlags::NoFollowSymlink,
        )
    }

    /// utimensat(AT_SYMLINK_NOFOLLOW) of atime and mtime; `ELOOP` for a
    /// symlink where the filesystem would follow it.
    pub(crate) fn utimes(&self, atime: Timespec, mtime: Timespec) -> nix::Result<()> {
        if symlink_followed(self.dir, self.name) {
            return Err(nix::errno::Errno::ELOOP);
        }
        utimensat(
            self.raw(),
            self.name,
            &timespec(atime)?,
            &timespec(mtime)?,
            UtimensatFlags::NoFollowSymlink,
        )
    }

    /// An `O_PATH` handle on the object itself.
    pub(crate) fn handle(&self) -> nix::Result<Handle> {
        let fd = ioctl::openat(
            self.raw(),
            self.name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Handle {
            at_dir: self.dir.try_clone_to_owned().ok(),
            name: self.name.to_vec(),
            fd,
        })
    }
}

/// A kernel-valid timespec (nanoseconds below 10^9; UTIME_NOW/OMIT refused).
pub(crate) fn timespec(t: Timespec) -> nix::Result<TimeSpec> {
    if t.nsec >= 1_000_000_000 {
        return Err(Errno::EINVAL);
    }
    Ok(TimeSpec::new(t.sec, i64::from(t.nsec)))
}

/// An `O_PATH` descriptor on one object, for its xattrs.
pub(crate) struct Handle {
    at_dir: Option<OwnedFd>,
    name: Vec<u8>,
    fd: OwnedFd,
}

fn proc_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn proc_available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| std::path::Path::new("/proc/self/fd").is_dir())
}

fn name_os(n: &[u8]) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(n)
}

impl Handle {
    /// The descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A real (not O_PATH) descriptor, for regular files and directories
    /// only: opening anything else could have side effects.
    fn real(&self) -> io::Result<File> {
        let st = nix::sys::stat::fstat(self.fd.as_raw_fd())?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFREG && kind != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let dir = self.at_dir.as_ref().ok_or(io::ErrorKind::NotFound)?;
        let fd = ioctl::openat(
            Some(dir.as_raw_fd()),
            self.name.as_slice(),
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let f = File::from(fd);
        let st2 = nix::sys::stat::fstat(f.as_raw_fd())?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        Ok(f)
    }

    /// Sets xattr `name`.
    pub(crate) fn set_xattr(&self, name: &[u8], value: &[u8]) -> io::Result<()> {
        if proc_available() {
            xattr::set_deref(proc_path(self.fd()), name_os(name), value)
        } else {
            use xattr::FileExt;
            self.real()?.set_xattr(name_os(name), value)
        }
    }

    /// Xattr `name`, if it is set.
    pub(crate) fn get_xattr(&self, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
        if proc_available() {
            xattr::get_deref(proc_path(self.fd()), name_os(name))
        } else {
            use xattr::FileExt;
            self.real()?.get_xattr(name_os(name))
        }
    }

    /// Removes xattr `name`.
    pub(crate) fn remove_xattr(&self, name: &[u8]) -> io::Result<()> {
        if proc_available() {
            xattr::remove_deref(proc_path(self.fd()), name_os(name))
        } else {
            use xattr::FileExt;
            self.real()?.remove_xattr(name_os(name))
        }
    }

    /// Every xattr name and value.
    pub(crate) fn xattrs(&self) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::new();
        if proc_available() {
            let p = proc_path(self.fd());
            for n in xattr::list_deref(&p)? {
                if let Some(v) = xattr::get_deref(&p, &n)? {
                    out.push((n.as_bytes().to_vec(), v));
                }
            }
        } else {
            use xattr::FileExt;
            let f = match self.real() {
                Ok(f) => f,
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(out),
                Err(e) => return Err(e),
            };
            for n in f.list_xattr()? {
                if let Some(v) = f.get_xattr(&n)? {
                    out.push((n.as_bytes().to_vec(), v));
                }
            }
        }
        Ok(out)
    }
}

/// How long [`rmdir`] waits for hidden FUSE files to go.
const HIDDEN_GO: std::time::Duration = std::time::Duration::from_secs(10);

/// Removes the empty directory `name` in `dir`. On a FUSE filesystem
/// served by libfuse (sshfs) a file unlinked before the server saw it
/// closed is only hidden (`.fuse_hidden*`) until then: while the directory
/// holds nothing else, this waits for them to go ([`HIDDEN_GO`] at most:
/// a loaded server takes its time).
pub(crate) fn rmdir(dir: BorrowedFd<'_>, name: &[u8]) -> nix::Result<()> {
    let rm = || {
        nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            name,
            nix::unistd::UnlinkatFlags::RemoveDir,
        )
    };
    let started = std::time::Instant::now();
    while started.elapsed() < HIDDEN_GO {
        match rm() {
            Err(Errno::ENOTEMPTY) => {}
            r => return r,
        }
        let Ok(sub) = ioctl::openat(
            Some(dir.as_raw_fd()),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            break;
        };
        let hidden = entries(sub.as_fd())
            .iter()
            .all(|(n, _)| n.starts_with(b".fuse_hidden"));
        if !hidden {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    rm()
}

/// The entries of directory `dir` (`.` and `..` left out): name, and type
/// when the filesystem gives it; empty when it cannot be read.
pub(crate) fn entries(dir: BorrowedFd<'_>) -> Vec<(Vec<u8>, Option<nix::dir::Type>)> {
    let Ok(mut d) = nix::dir::Dir::openat(
        Some(dir.as_raw_fd()),
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    d.iter()
        .flatten()
        .map(|e| (e.file_name().to_bytes().to_vec(), e.file_type()))
        .filter(|(n, _)| n != b"." && n != b"..")
        .collect()
}

/// The errno of an io::Error, if it has one.
pub(crate) fn errno(e: &io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw)
}

/// Opens directory `name` in `dir` to read, following no symlink.
pub(crate) fn open_dir(dir: BorrowedFd<'_>, name: &[u8]) -> nix::Result<File> {
    let fd = ioctl::openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// The filesystems (by device) where `probe::Caps::symlinks_followed`: a
/// symlink's owner and times are never set there.
static FOLLOWING: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
/// Whether [`FOLLOWING`] holds any (read without the lock).
static ANY_FOLLOWING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that the filesystem of device `dev` follows symlinks when
/// their owner or times are set (found by [`crate::probe`]).
pub(crate) fn guard_symlinks(dev: u64) {
    let mut f = FOLLOWING.lock().unwrap_or_else(|e| e.into_inner());
    if !f.contains(&dev) {
        f.push(dev);
    }
    ANY_FOLLOWING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `name` in `dir` is a symlink on a filesystem that would follow
/// it when its owner or times are set (`probe::Caps::symlinks_followed`): then
/// they must not be, or a file it points to (anywhere on that server)
/// would change.
pub(crate) fn symlink_followed(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    if !ANY_FOLLOWING.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    let Ok(st) = fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return false;
    };
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
        && FOLLOWING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&st.st_dev)
}
