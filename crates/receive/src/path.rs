//! Confinement: checking stream paths and resolving them beneath a subvolume.
//!
//! A stream path is relative to the subvolume being received. It may be
//! empty (the subvolume root) only where the kernel sends that. Otherwise it
//! is one or more `/`-separated components, none of them empty, `.` or `..`,
//! with no NUL byte and no leading `/`.
//!
//! [`confine`] checks every path a command carries, by what it names.
//! [`Resolver`] turns a checked path into a directory descriptor and a final
//! name. Directories are opened with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)` from the
//! subvolume root, or, where the kernel lacks openat2, one component at a
//! time with `O_NOFOLLOW | O_DIRECTORY`. No symlink is ever followed, and the
//! final component is handled by the caller with `*at` calls that do not
//! follow it either.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use btrfs_stream::{Command, CommandKind, PathRole};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

use crate::ioctl::{openat, openat2};

/// Longest path the kernel sends (PATH_MAX).
pub(crate) const PATH_MAX: usize = 4096;

/// What is wrong with a path from the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// An empty path where a file name is needed.
    #[error("empty path")]
    Empty,
    /// Starts with `/`.
    #[error("absolute path")]
    Absolute,
    /// Holds a NUL byte.
    #[error("path contains a NUL byte")]
    Nul,
    /// Two `/` in a row or a trailing `/`.
    #[error("path has an empty component")]
    EmptyComponent,
    /// A `.` component.
    #[error("path has a '.' component")]
    Dot,
    /// A `..` component.
    #[error("path has a '..' component")]
    DotDot,
    /// Longer than PATH_MAX.
    #[error("path longer than {PATH_MAX} bytes")]
    TooLong,
    /// A subvolume name with a `/`.
    #[error("subvolume name must be a single component")]
    NotSingle,
    /// A name rreceive keeps for itself.
    #[error("name is reserved by rreceive")]
    Reserved,
}

/// Checks a path naming a file inside the subvolume (never the root).
pub(crate) fn check(path: &[u8]) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    check_root_or(path)
}

/// Checks a path that may also be empty, meaning the subvolume root.
pub(crate) fn check_root_or(path: &[u8]) -> Result<(), PathError> {
    if path.is_empty() {
        return Ok(());
    }
    if path.len() > PATH_MAX {
        return Err(PathError::TooLong);
    }
    if path[0] == b'/' {
        return Err(PathError::Absolute);
    }
    if path.contains(&0) {
        return Err(PathError::Nul);
    }
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" => return Err(PathError::EmptyComponent),
            b"." => return Err(PathError::Dot),
            b".." => return Err(PathError::DotDot),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a subvolume name: exactly one component.
pub(crate) fn check_subvol_name(name: &[u8]) -> Result<(), PathError> {
    check(name)?;
    if name.contains(&b'/') {
        return Err(PathError::NotSingle);
    }
    if name.starts_with(crate::subvol::RESERVED_PREFIX) {
        return Err(PathError::Reserved);
    }
    Ok(())
}

/// Checks a symlink's contents: stored as given, never resolved, so only
/// empty and NUL-holding ones are refused.
pub(crate) fn check_symlink_target(target: &[u8]) -> Result<(), PathError> {
    if target.is_empty() {
        return Err(PathError::Empty);
    }
    if target.contains(&0) {
        return Err(PathError::Nul);
    }
    Ok(())
}

/// Checks every path `cmd` carries ([`Command::paths`]), in stream order,
/// before anything is done with it:
///
/// - PATH names a file beneath the subvolume root. The commands that change
///   an inode's own metadata (CHOWN, CHMOD, UTIMES, SET_XATTR, REMOVE_XATTR,
///   FILEATTR) may also name the root itself, as the kernel sends for inode
///   256. For SUBVOL and SNAPSHOT it is the new subvolume's name in DEST.
/// - PATH_TO, LINK's PATH_LINK and CLONE_PATH name files beneath a
///   subvolume root.
/// - SYMLINK's PATH_LINK is only the symlink's contents.
///
/// A command added to the stream crate later gets its paths checked here
/// the strict way without being listed.
pub(crate) fn confine(cmd: &Command<'_>) -> Result<(), Refused> {
    let refused = |which| move |err| Refused { which, err };
    for (role, p) in cmd.paths() {
        match role {
            PathRole::Path => match cmd.kind() {
                CommandKind::Subvol | CommandKind::Snapshot => {
                    check_subvol_name(p).map_err(refused("subvolume name"))
                }
                CommandKind::Chown
                | CommandKind::Chmod
                | CommandKind::Utimes
                | CommandKind::SetXattr
                | CommandKind::RemoveXattr
                | CommandKind::Fileattr => check_root_or(p).map_err(refused("path")),
                _ => check(p).map_err(refused("path")),
            },
            PathRole::PathTo => check(p).map_err(refused("destination")),
            PathRole::LinkTarget => check(p).map_err(refused("link target")),
            PathRole::CloneSource => check(p).map_err(refused("clone source")),
            PathRole::SymlinkTarget => check_symlink_target(p).map_err(refused("symlink target")),
        }?;
    }
    Ok(())
}

/// A path [`confine`] refuses: which field of the command, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The field ("path", "destination", "clone source", ...).
    pub which: &'static str,
    /// Why it is refused.
    pub err: PathError,
}

pub(crate) use bytes::{is_within, split};

/// Paths as bytes: no I/O and nothing else of the crate, so that the
/// modules below this one (`crate::recovery`) may use it.
pub(crate) mod bytes {
    /// Splits a checked, non-empty path into its parent (maybe empty) and
    /// final component.
    pub(crate) fn split(path: &[u8]) -> (&[u8], &[u8]) {
        match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (b"", path),
        }
    }

    /// Whether `path` is `dir` or lies beneath it.
    pub(crate) fn is_within(path: &[u8], dir: &[u8]) -> bool {
        path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
    }
}

const MAX_CACHED_DIRS: usize = 4096;

/// Opens paths beneath one directory without following symlinks, keeping
/// descriptors of the directories it has opened.
pub(crate) struct Resolver {
    root: OwnedFd,
    dirs: HashMap<Vec<u8>, OwnedFd>,
    /// Whether a directory has a default ACL (new entries inherit it).
    acl: HashMap<Vec<u8>, bool>,
    openat2: bool,
}

fn dir_flags() -> OFlag {
    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

fn beneath() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH
        | ResolveFlag::RESOLVE_NO_SYMLINKS
        | ResolveFlag::RESOLVE_NO_MAGICLINKS
        | ResolveFlag::RESOLVE_NO_XDEV
}

/// Opens `path` (checked, non-empty) beneath `base` with `flags`, following
/// no symlink on the way or at the end.
pub(crate) fn open_beneath(
    base: BorrowedFd<'_>,
    path: &[u8],
    flags: OFlag,
    mode: Mode,
    use_openat2: &mut bool,
) -> nix::Result<OwnedFd> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if *use_openat2 {
        let how = OpenHow::new().flags(flags).mode(mode).resolve(beneath());
        match openat2(base_raw(base), path, how) {
            Ok(fd) => return Ok(fd),
            Err(Errno::ENOSYS) | Err(Errno::EPERM) if !kernel_has_openat2() => {
                *use_openat2 = false;
            }
            Err(e) => return Err(e),
        }
    }
    // Component-wise walk: every intermediate component must be a real
    // directory (O_NOFOLLOW | O_DIRECTORY fails with ENOTDIR or ELOOP on a
    // symlink), and the last one is opened with O_NOFOLLOW.
    let (parent, name) = split(path);
    let mut cur: Option<OwnedFd> = None;
    if !parent.is_empty() {
        for c in parent.split(|&b| b == b'/') {
            let at = cur.as_ref().map_or(base, |f| f.as_fd());
            let next = openat(
                Some(base_raw(at)),
                c,
                dir_flags() | OFlag::O_NOFOLLOW,
                Mode::empty(),
            )?;
            cur = Some(next);
        }
    }
    let at = cur.as_ref().map_or(base, |f| f.as_fd());
    openat(Some(base_raw(at)), name, flags, mode)
}

fn kernel_has_openat2() -> bool {
    // openat2 exists since Linux 5.6; a seccomp filter may still refuse it.
    // A probe on "/" with an empty resolve set tells the two apart.
    let how = OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC);
    match openat2(libc::AT_FDCWD, "/", how) {
        Ok(fd) => {
            drop(fd);
            true
        }
        Err(_) => false,
    }
}

fn base_raw(fd: BorrowedFd<'_>) -> RawFd {
    fd.as_raw_fd()
}

impl Resolver {
    /// A resolver for paths beneath `root` (a directory descriptor).
    pub(crate) fn new(root: OwnedFd) -> Resolver {
        Resolver {
            root,
            dirs: HashMap::new(),
            acl: HashMap::new(),
            openat2: true,
        }
    }

    /// The root directory.
    pub(crate) fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// A descriptor of directory `path` (checked; empty = root).
    pub(crate) fn dir(&mut self, path: &[u8]) -> nix::Result<BorrowedFd<'_>> {
        if path.is_empty() {
            return Ok(self.root.as_fd());
        }
        if !self.dirs.contains_key(path) {
            if self.dirs.len() >= MAX_CACHED_DIRS {
                self.dirs.clear();
            }
            let fd = open_beneath(
                self.root.as_fd(),
                path,
                dir_flags(),
                Mode::empty(),
                &mut self.openat2,
            )?;
            self.dirs.insert(path.to_vec(), fd);
        }
        Ok(self.dirs[path].as_fd())
    }

    /// Raw descriptors of two directories at once (for rename and link);
    /// valid until the resolver is next used.
    pub(crate) fn dirs2(&mut self, a: &[u8], b: &[u8]) -> nix::Result<(RawFd, RawFd)> {
        self.dir(a)?;
        self.dir(b)?;
        // Opening `b` may have emptied a full cache: open `a` again.
        let ra = self.dir(a)?.as_raw_fd();
        let rb = match b.is_empty() {
            true => self.root.as_raw_fd(),
            false => match self.dirs.get(b) {
                Some(fd) => fd.as_raw_fd(),
                None => return Err(Errno::ENOENT),
            },
        };
        Ok((ra, rb))
    }

    /// Whether `path` is known to be a directory (the root, or cached).
    pub(crate) fn is_cached_dir(&self, path: &[u8]) -> bool {
        path.is_empty() || self.dirs.contains_key(path)
    }

    /// The parent directory of checked, non-empty `path` and its final name.
    pub(crate) fn parent<'p>(&mut self, path: &'p [u8]) -> nix::Result<(BorrowedFd<'_>, &'p [u8])> {
        let (parent, name) = split(path);
        Ok((self.dir(parent)?, name))
    }

    /// Forgets cached directories at or beneath `path` (after it was renamed
    /// or removed).
    pub(crate) fn forget(&mut self, path: &[u8]) {
        if !self.dirs.is_empty() {
            self.dirs.retain(|k, _| !is_within(k, path));
        }
        if !self.acl.is_empty() {
            self.acl.retain(|k, _| !is_within(k, path));
        }
    }

    /// Whether entries created in directory `path` inherit a default ACL
    /// (assumed yes when that cannot be told).
    pub(crate) fn has_default_acl(&mut self, path: &[u8]) -> bool {
        if let Some(&b) = self.acl.get(path) {
            return b;
        }
        let b = match self.dir(path) {
            Ok(fd) => {
                let p = format!("/proc/self/fd/{}", fd.as_raw_fd());
                match xattr::get_deref(&p, "system.posix_acl_default") {
                    Ok(v) => v.is_some(),
                    Err(e) => e.raw_os_error() != Some(libc::EOPNOTSUPP),
                }
            }
            Err(_) => true,
        };
        if self.acl.len() >= MAX_CACHED_DIRS {
            self.acl.clear();
        }
        self.acl.insert(path.to_vec(), b);
        b
    }

    /// Forgets what is known about the default ACL of directory `path`.
    pub(crate) fn forget_acl(&mut self, path: &[u8]) {
        self.acl.remove(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_paths_are_refused() {
        assert_eq!(check(b""), Err(PathError::Empty));
        assert_eq!(check(b"/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(check(b".."), Err(PathError::DotDot));
        assert_eq!(check(b"a/../../b"), Err(PathError::DotDot));
        assert_eq!(check(b"a/./b"), Err(PathError::Dot));
        assert_eq!(check(b"."), Err(PathError::Dot));
        assert_eq!(check(b"a//b"), Err(PathError::EmptyComponent));
        assert_eq!(check(b"a/"), Err(PathError::EmptyComponent));
        assert_eq!(check(b"a\0b"), Err(PathError::Nul));
        assert_eq!(check(&[b'a'; 5000]), Err(PathError::TooLong));
        assert_eq!(check_subvol_name(b"a/b"), Err(PathError::NotSingle));
        assert_eq!(
            check_subvol_name(b".rreceive-state"),
            Err(PathError::Reserved)
        );
        assert_eq!(check_root_or(b""), Ok(()));
    }

    /// The field `confine` refuses in `cmd`, and why.
    fn refused(cmd: Command<'_>) -> Option<(&'static str, PathError)> {
        confine(&cmd)
            .err()
            .map(|Refused { which, err }| (which, err))
    }

    #[test]
    fn confine_checks_each_path_by_what_it_names() {
        use btrfs_stream::Uuid;
        let t = btrfs_stream::Timespec::default();
        // The subvolume root: only for an inode's own metadata.
        assert_eq!(
            refused(Command::Chmod {
                path: b"",
                mode: 0o755
            }),
            None
        );
        assert_eq!(
            refused(Command::Utimes {
                path: b"",
                atime: t,
                mtime: t,
                ctime: t,
                otime: None
            }),
            None
        );
        assert_eq!(
            refused(Command::Write {
                path: b"",
                offset: 0,
                data: b"x"
            }),
            Some(("path", PathError::Empty))
        );
        assert_eq!(
            refused(Command::Subvol {
                path: b"a/b",
                uuid: Uuid::nil(),
                ctransid: 0
            }),
            Some(("subvolume name", PathError::NotSingle))
        );
        assert_eq!(
            refused(Command::Rename {
                from: b"a",
                to: b"../a"
            }),
            Some(("destination", PathError::DotDot))
        );
        assert_eq!(
            refused(Command::Link {
                path: b"h",
                target: b"/etc/passwd"
            }),
            Some(("link target", PathError::Absolute))
        );
        // Where a symlink points is its contents, not a path to resolve.
        assert_eq!(
            refused(Command::Symlink {
                path: b"l",
                ino: 257,
                target: b"/etc/../.."
            }),
            None
        );
        assert_eq!(
            refused(Command::Symlink {
                path: b"l",
                ino: 257,
                target: b""
            }),
            Some(("symlink target", PathError::Empty))
        );
        assert_eq!(
            refused(Command::Clone {
                offset: 0,
                len: 1,
                path: b"f",
                clone_uuid: Uuid::nil(),
                clone_ctransid: 0,
                clone_path: b"a//b",
                clone_offset: 0,
            }),
            Some(("clone source", PathError::EmptyComponent))
        );
        // The first bad path in stream order is the one reported.
        assert_eq!(
            refused(Command::Rename {
                from: b"..",
                to: b"/x"
            }),
            Some(("path", PathError::DotDot))
        );
        assert_eq!(refused(Command::End {}), None);
    }

    #[test]
    fn odd_but_valid_names_pass() {
        for p in [
            &b"..."[..],
            b"a..",
            b"..a/.b",
            b"\xff\xfe/x y\n",
            b"o257-9-0",
        ] {
            assert_eq!(check(p), Ok(()), "{p:?}");
        }
    }

    #[test]
    fn split_and_within() {
        assert_eq!(split(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split(b"c"), (&b""[..], &b"c"[..]));
        assert!(is_within(b"a/b", b"a"));
        assert!(is_within(b"a", b"a"));
        assert!(!is_within(b"ab", b"a"));
    }
}
