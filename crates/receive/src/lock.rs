//! One writer per received subvolume.
//!
//! While a receive makes, resumes or finishes subvolume NAME in DEST (and
//! while it copies, links or takes over the parent of an incremental), it
//! holds an exclusive `flock(2)` on the file `DEST/.rreceive-lock-<NAME in
//! hex>` (a digest of NAME where that name would be too long), which dies
//! with the process. A second receive of NAME stops, saying who holds it
//! ([`Busy`]: exit 3), or waits (`--wait`); `--list` shows NAME as
//! `receiving`, `--resume-token` and `--delete-incomplete` refuse it, and
//! the sweep of orphans leaves what belongs to it alone.
//!
//! The file holds `PID HOST` of its holder. The holder removes it while
//! still holding the lock, so a receive that opened it before and locks it
//! after finds it gone from its name (or another file there) and opens the
//! name again: one name never has two holders. A lock file a killed holder
//! left is taken over by the next receive of NAME, or removed by the sweep
//! ([`sweep`]), which also removes it only while holding it.
//!
//! Whoever only looks ([`holder`], the sweep) takes the lock for an instant.
//! A receive that finds it taken by a process that is not running (or
//! whose file says nothing yet) therefore tries again for a moment before
//! it calls it taken.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};

use crate::ioctl;

/// How long a lock taken by a process that is not running (or that has not
/// written its pid yet) is tried again before it counts as taken.
const SETTLE: Duration = Duration::from_secs(2);
/// How often `--wait` tries the lock again.
const POLL: Duration = Duration::from_millis(200);

/// The name in DEST of the lock file of subvolume `name`.
pub(crate) fn file_name(name: &[u8]) -> Vec<u8> {
    crate::subvol::reserved_name(b"-lock-", name)
}

/// Who holds a lock, as its file says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// Its process id, when the file says it.
    pub pid: Option<u32>,
    /// The host it runs on (DEST may be shared by several), when said.
    pub host: Option<String>,
}

/// This host's name, as lock files record it.
fn host_name() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    (!h.is_empty() && !h.contains(char::is_whitespace)).then(|| h.to_string())
}

impl Holder {
    /// What the lock file `f` says of its holder.
    fn read(f: &File) -> Holder {
        let mut buf = [0u8; 300];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        let mut words = text.split_whitespace();
        Holder {
            pid: words.next().and_then(|p| p.parse().ok()),
            host: words.next().map(str::to_string),
        }
    }

    /// Whether it is another host's (then whether it runs is not known).
    fn elsewhere(&self) -> bool {
        self.host
            .as_ref()
            .is_some_and(|h| Some(h) != host_name().as_ref())
    }

    /// Whether it may be running: its pid is known, and on this host a
    /// process of that pid exists.
    fn running(&self) -> bool {
        let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) else {
            return false;
        };
        self.elsewhere()
            || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) != Err(Errno::ESRCH)
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            Some(p) => write!(f, "pid {p}")?,
            None => write!(f, "pid unknown")?,
        }
        match &self.host {
            Some(h) if self.elsewhere() => write!(f, " on {h}"),
            _ => Ok(()),
        }
    }
}

/// Another rreceive is receiving subvolume `name` into `dest` (or using it
/// as the parent it copies, links or changes): a later try can succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// Who holds it.
    pub holder: Holder,
    /// The subvolume's name in DEST.
    pub name: Vec<u8>,
    /// DEST, as given.
    pub dest: PathBuf,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "another rreceive ({}) is receiving {} into {}",
            self.holder,
            self.name.escape_ascii(),
            self.dest.display()
        )
    }
}

impl std::error::Error for Busy {}

/// Why a lock was not taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another receive holds it.
    Busy(Busy),
    /// The lock file could not be made or read.
    Io(io::Error),
}

/// Whether to wait for a lock another receive holds.
pub(crate) enum Wait<'a> {
    /// No: [`LockError::Busy`] at once.
    No,
    /// Yes, telling `waiting` once, until the lock is free or `stop` is
    /// set (then [`LockError::Busy`]).
    Yes {
        /// Set when the receive must stop.
        stop: Option<&'a crate::stop::StopFlag>,
        /// Told who holds it, once, as the wait begins.
        waiting: &'a dyn Fn(&Holder),
    },
}

/// The lock of one subvolume, held until dropped: then its file is
/// removed, and the lock released.
#[derive(Debug)]
pub(crate) struct Held {
    /// The lock file, locked; `None` where DEST has no file locks.
    file: Option<Flock<File>>,
    /// DEST (the lock file's directory).
    dest: OwnedFd,
    /// The lock file's name.
    name: Vec<u8>,
}

impl Held {
    /// Whether a lock is really held (DEST has file locks).
    pub(crate) fn locked(&self) -> bool {
        self.file.is_some()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Removed while still locked: a receive that opened it meanwhile
        // finds it gone once it has the lock, and opens the name again.
        if let Some(f) = &self.file {
            if same_file(self.dest.as_fd(), &self.name, f).unwrap_or(false) {
                let _ = nix::unistd::unlinkat(
                    Some(self.dest.as_raw_fd()),
                    self.name.as_slice(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                );
            }
        }
    }
}

/// Whether `f` is the file named `name` in `dest` (not removed, nor
/// replaced, since it was opened).
fn same_file(dest: BorrowedFd<'_>, name: &[u8], f: &File) -> nix::Result<bool> {
    let open = fstat(f.as_raw_fd())?;
    match fstatat(Some(dest.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok((st.st_dev, st.st_ino) == (open.st_dev, open.st_ino)),
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `e` from flock says the filesystem has no file locks.
fn no_locks(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOLCK | Errno::EOPNOTSUPP | Errno::EINVAL | Errno::ENOSYS
    )
}

/// Takes the lock of subvolume `name` in `dest` (DEST, shown as
/// `dest_path` in messages), or says who holds it.
pub(crate) fn acquire(
    dest: BorrowedFd<'_>,
    dest_path: &Path,
    name: &[u8],
    wait: Wait<'_>,
) -> Result<Held, LockError> {
    let file = file_name(name);
    let started = Instant::now();
    let mut told = false;
    let busy = |holder: Holder| {
        LockError::Busy(Busy {
            holder,
            name: name.to_vec(),
            dest: dest_path.to_path_buf(),
        })
    };
    loop {
        let fd = ioctl::openat(
            Some(dest.as_raw_fd()),
            file.as_slice(),
            OFlag::O_CREAT | OFlag::O_RDWR | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| LockError::Io(e.into()))?;
        let held = match Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, e)) if no_locks(e) => {
                return Ok(Held {
                    file: None,
                    dest: dest.try_clone_to_owned().map_err(LockError::Io)?,
                    name: file,
                })
            }
            Err((f, Errno::EWOULDBLOCK)) => {
                let holder = Holder::read(&f);
                drop(f);
                if !holder.running() && started.elapsed() < SETTLE {
                    // Looked at for an instant, or its holder just went.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                match &wait {
                    Wait::No => return Err(busy(holder)),
                    Wait::Yes { stop, waiting } => {
                        if stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed) != 0) {
                            return Err(busy(holder));
                        }
                        if !told {
                            told = true;
                            waiting(&holder);
                        }
                        std::thread::sleep(POLL);
                        continue;
                    }
                }
            }
            Err((_, e)) => return Err(LockError::Io(e.into())),
        };
        // Removed or replaced by a holder that let go in between: the name
        // is opened again.
        if !same_file(dest, &file, &held).map_err(|e| LockError::Io(e.into()))? {
            continue;
        }
        let me = format!(
            "{} {}\n",
            std::process::id(),
            host_name().unwrap_or_else(|| "-".into())
        );
        held.set_len(0)
            .and_then(|()| held.write_all_at(me.as_bytes(), 0))
            .map_err(LockError::Io)?;
        return Ok(Held {
            file: Some(held),
            dest: dest.try_clone_to_owned().map_err(LockError::Io)?,
            name: file,
        });
    }
}

/// Who holds the lock of subvolume `name` in `dest`, if anyone.
pub(crate) fn holder(dest: BorrowedFd<'_>, name: &[u8]) -> Option<Holder> {
    holder_of(dest, &file_name(name))
}

/// Who holds the lock file `file` in `dest`, if anyone.
fn holder_of(dest: BorrowedFd<'_>, file: &[u8]) -> Option<Holder> {
    let started = Instant::now();
    loop {
        let fd = ioctl::openat(
            Some(dest.as_raw_fd()),
            file,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let f = File::from(fd);
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return None;
        }
        // Shared: others looking at once do not count as holders.
        match Flock::lock(f, FlockArg::LockSharedNonblock) {
            Ok(_) => return None,
            Err((f, Errno::EWOULDBLOCK)) => {
                let holder = Holder::read(&f);
                if holder.running() || started.elapsed() >= SETTLE {
                    return Some(holder);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => return None,
        }
    }
}

/// Removes the lock files in `dest` that nobody holds (left by receives
/// that were killed), each while holding it.
pub(crate) fn sweep(dest: BorrowedFd<'_>) {
    let prefix = file_name(b"");
    let stale = crate::meta::entries(dest)
        .into_iter()
        .filter(|(n, t)| *t == Some(nix::dir::Type::File) && n.starts_with(&prefix))
        .map(|(n, _)| n);
    for file in stale {
        let Ok(fd) = ioctl::openat(
            Some(dest.as_raw_fd()),
            file.as_slice(),
            OFlag::O_RDWR | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK,
            Mode::empty(),
        ) else {
            continue;
        };
        let Ok(held) = Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        if same_file(dest, &file, &held).unwrap_or(false) {
            let _ = nix::unistd::unlinkat(
                Some(dest.as_raw_fd()),
                file.as_slice(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> (tempfile::TempDir, File) {
        let tmp = tempfile::tempdir().unwrap();
        let d = File::open(tmp.path()).unwrap();
        (tmp, d)
    }

    #[test]
    fn a_second_lock_of_the_same_name_is_busy_and_says_who() {
        let (tmp, d) = dest();
        let held = acquire(d.as_fd(), tmp.path(), b"s1", Wait::No).unwrap();
        assert!(held.locked());
        let text = std::fs::read_to_string(tmp.path().join(".rreceive-lock-7331")).unwrap();
        assert!(
            text.starts_with(&format!("{} ", std::process::id())),
            "{text}"
        );
        match acquire(d.as_fd(), tmp.path(), b"s1", Wait::No) {
            Err(LockError::Busy(b)) => {
                assert_eq!(b.holder.pid, Some(std::process::id()));
                assert_eq!(
                    b.to_string(),
                    format!(
                        "another rreceive (pid {}) is receiving s1 into {}",
                        std::process::id(),
                        tmp.path().display()
                    )
                );
            }
            r => panic!("not busy: {r:?}"),
        }
        assert_eq!(
            holder(d.as_fd(), b"s1").and_then(|h| h.pid),
            Some(std::process::id())
        );
        // Another name is free.
        let other = acquire(d.as_fd(), tmp.path(), b"s2", Wait::No).unwrap();
        drop(other);
        drop(held);
        assert!(holder(d.as_fd(), b"s1").is_none());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        drop(acquire(d.as_fd(), tmp.path(), b"s1", Wait::No).unwrap());
    }

    #[test]
    fn a_lock_file_left_by_a_dead_holder_is_taken_and_swept() {
        let (tmp, d) = dest();
        let left = tmp.path().join(".rreceive-lock-7331");
        std::fs::write(&left, "999999999 nowhere\n").unwrap();
        assert!(holder(d.as_fd(), b"s1").is_none());
        sweep(d.as_fd());
        assert!(!left.exists());
        std::fs::write(&left, "999999999 nowhere\n").unwrap();
        let held = acquire(d.as_fd(), tmp.path(), b"s1", Wait::No).unwrap();
        // The sweep leaves a held one alone.
        sweep(d.as_fd());
        assert!(left.exists());
        drop(held);
        assert!(!left.exists());
    }

    #[test]
    fn a_waiting_lock_is_taken_once_the_holder_lets_go() {
        let (tmp, d) = dest();
        let held = acquire(d.as_fd(), tmp.path(), b"s1", Wait::No).unwrap();
        let told = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(500));
                drop(held);
            });
            let waiting = |h: &Holder| {
                assert_eq!(h.pid, Some(std::process::id()));
                told.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            };
            let got = acquire(
                d.as_fd(),
                tmp.path(),
                b"s1",
                Wait::Yes {
                    stop: None,
                    waiting: &waiting,
                },
            );
            assert!(got.is_ok_and(|h| h.locked()));
        });
        assert_eq!(told.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_long_name_has_a_lock_file_of_its_own() {
        let (tmp, d) = dest();
        let long = vec![b'n'; 255];
        let held = acquire(d.as_fd(), tmp.path(), &long, Wait::No).unwrap();
        assert!(file_name(&long).len() <= 255);
        assert!(matches!(
            acquire(d.as_fd(), tmp.path(), &long, Wait::No),
            Err(LockError::Busy(_))
        ));
        drop(held);
    }
}
