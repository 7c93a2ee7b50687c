//! Parents and clone sources anywhere on a btrfs destination's filesystem,
//! found as `btrfs receive` (btrfs-progs 6.14, `search_source_subvol`)
//! finds them: the filesystem's UUID tree by received uuid, then by uuid;
//! the subvolume id to its path from the top level (ROOT_BACKREF items
//! and BTRFS_IOC_INO_LOOKUP, as `btrfs_subvolid_resolve`); that path under
//! the mount root of DEST (from /proc/self/mountinfo, or `-m ROOTMOUNT`),
//! which it must be beneath. As btrfs-progs 6.14, the ctransid the stream
//! names is not compared.
//!
//! Only read here: the subvolume found is opened (beneath the mount root,
//! no symlinks, no other mount) to be snapshotted or cloned from.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use btrfs_text::mountinfo;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use uuid::Uuid;

use crate::ioctl;

/// `BTRFS_ROOT_TREE_OBJECTID`.
const ROOT_TREE: u64 = 1;
/// `BTRFS_FS_TREE_OBJECTID`: the top-level subvolume.
const FS_TREE: u64 = 5;
/// `BTRFS_UUID_TREE_OBJECTID`.
const UUID_TREE: u64 = 9;
/// `BTRFS_ROOT_BACKREF_KEY`.
const ROOT_BACKREF: u32 = 144;
/// `BTRFS_ROOT_ITEM_KEY`.
const ROOT_ITEM: u32 = 132;
/// Where a `btrfs_root_item` holds its uuid (its received uuid follows
/// its parent uuid, 32 bytes on).
const ROOT_ITEM_UUID: usize = 247;
/// `BTRFS_UUID_KEY_SUBVOL`.
const UUID_KEY_SUBVOL: u32 = 251;
/// `BTRFS_UUID_KEY_RECEIVED_SUBVOL`.
const UUID_KEY_RECEIVED_SUBVOL: u32 = 252;
/// Inode number of a subvolume's root directory.
const FIRST_FREE: u64 = 256;
/// Deepest nesting of subvolumes followed (a loop is corruption).
const MAX_DEPTH: usize = 4096;

/// The mount root of DEST: where subvolumes found are opened from.
#[derive(Debug, Clone)]
pub(crate) struct MountRoot {
    /// Its path.
    pub path: PathBuf,
    /// Its path from the filesystem's top level (empty: the top level).
    full: Vec<u8>,
}

/// A subvolume found elsewhere on the filesystem.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// Its id.
    pub id: u64,
    /// Its path beneath the mount root (empty: the mount root itself).
    pub rel: Vec<u8>,
    /// Whether it is usable without `--force`: anything but a subvolume
    /// whose receive by rreceive did not finish (writable, with
    /// rreceive's record). btrfs receive takes any subvolume it finds.
    pub complete: bool,
}

/// What [`MountRoot::search`] met.
#[derive(Debug, Default)]
pub(crate) struct Search {
    /// The subvolume that has the uuid and is beneath the mount root.
    pub found: Option<Found>,
    /// Paths from the top level of those that have it but are not
    /// beneath the mount root.
    pub unreachable: Vec<Vec<u8>>,
}

/// The ids of the subvolumes whose received uuid (`received`) or own uuid
/// is `uuid`, in the UUID tree's order (btrfs-progs takes the first).
fn subvol_ids(fd: BorrowedFd<'_>, uuid: Uuid, received: bool) -> nix::Result<Vec<u64>> {
    let b = uuid.as_bytes();
    let mut half = [0u8; 8];
    half.copy_from_slice(&b[..8]);
    let objectid = u64::from_le_bytes(half);
    half.copy_from_slice(&b[8..]);
    let offset = u64::from_le_bytes(half);
    let kind = if received {
        UUID_KEY_RECEIVED_SUBVOL
    } else {
        UUID_KEY_SUBVOL
    };
    let items = ioctl::tree_search(fd, UUID_TREE, objectid, kind, (offset, offset), 1)?;
    Ok(items
        .iter()
        .filter(|i| i.objectid == objectid && i.kind == kind && i.offset == offset)
        .flat_map(|i| {
            i.data.chunks_exact(8).map(|c| {
                let mut v = [0u8; 8];
                v.copy_from_slice(c);
                u64::from_le_bytes(v)
            })
        })
        .collect())
}

/// The received uuid and stransid (the ctransid it was sent at) of the
/// subvolume whose own uuid is `own`, wherever it is on the filesystem of
/// `fd` (the UUID tree, then its root item; the search needs
/// CAP_SYS_ADMIN). None when no subvolume has that uuid, it was not
/// received, or the search is not allowed.
pub(crate) fn received_uuid_of(fd: BorrowedFd<'_>, own: Uuid) -> Option<(Uuid, u64)> {
    let id = *subvol_ids(fd, own, false).ok()?.first()?;
    let item = ioctl::tree_search(fd, ROOT_TREE, id, ROOT_ITEM, (0, u64::MAX), 1)
        .ok()?
        .into_iter()
        .next()?;
    let uuid_at = |at: usize| -> Option<Uuid> {
        let b = item.data.get(at..at + 16)?;
        Some(Uuid::from_bytes(b.try_into().ok()?))
    };
    if uuid_at(ROOT_ITEM_UUID)? != own {
        return None;
    }
    let received = uuid_at(ROOT_ITEM_UUID + 32).filter(|u| !u.is_nil())?;
    // After the three uuids: ctransid, otransid, stransid.
    let at = ROOT_ITEM_UUID + 48 + 16;
    let stransid = u64::from_le_bytes(item.data.get(at..at + 8)?.try_into().ok()?);
    Some((received, stransid))
}

/// The path of subvolume `id` from the top level, as
/// `btrfs_subvolid_resolve` makes it (empty for the top level).
fn subvol_path(fd: BorrowedFd<'_>, id: u64) -> nix::Result<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut cur = id;
    while cur != FS_TREE {
        if parts.len() >= MAX_DEPTH {
            return Err(Errno::ELOOP);
        }
        let item = ioctl::tree_search(fd, ROOT_TREE, cur, ROOT_BACKREF, (0, u64::MAX), 1)?
            .into_iter()
            .next()
            .ok_or(Errno::ENOENT)?;
        // btrfs_root_ref: dirid, sequence, name_len, then the name.
        let d = &item.data;
        let dirid = d
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or(Errno::EIO)?;
        let name_len = d
            .get(16..18)
            .and_then(|b| <[u8; 2]>::try_from(b).ok())
            .map(u16::from_le_bytes)
            .ok_or(Errno::EIO)?;
        let name = d.get(18..18 + usize::from(name_len)).ok_or(Errno::EIO)?;
        let mut part = Vec::new();
        if dirid != FIRST_FREE {
            // The directory's path in the parent subvolume, ending in '/'.
            part = ioctl::ino_lookup(fd, item.offset, dirid)?.1;
        }
        part.extend_from_slice(name);
        parts.push(part);
        cur = item.offset;
    }
    parts.reverse();
    Ok(parts.join(&b'/'))
}

/// `path` beneath `root` (paths from the top level, no trailing '/'):
/// what follows it, empty when equal.
fn beneath<'a>(path: &'a [u8], root: &[u8]) -> Option<&'a [u8]> {
    if root.is_empty() {
        return Some(path);
    }
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() {
        return Some(rest);
    }
    rest.strip_prefix(b"/")
}

impl MountRoot {
    /// The mount root at `path` (`-m ROOTMOUNT`, or the mount point of
    /// DEST): its path from the filesystem's top level.
    pub(crate) fn at(path: &Path) -> std::io::Result<MountRoot> {
        let f = std::fs::File::open(path)?;
        let full = full_path(f.as_fd())?;
        Ok(MountRoot {
            path: path.to_path_buf(),
            full,
        })
    }

    /// The mount root of the mount `dest` is on, from /proc/self/mountinfo.
    pub(crate) fn of(dest: BorrowedFd<'_>, dest_path: &Path) -> std::io::Result<MountRoot> {
        let text = std::fs::read(mountinfo::PATH)?;
        let id = ioctl::mount_id_reusable(dest);
        let real = std::fs::canonicalize(dest_path)?;
        let point = mount_point(&text, id, &real).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no mount of {} in /proc/self/mountinfo (give -m ROOTMOUNT)",
                    real.display()
                ),
            )
        })?;
        MountRoot::at(&point)
    }

    /// Opens subvolume `found`, checking that it is that subvolume.
    pub(crate) fn open(&self, found: &Found) -> nix::Result<OwnedFd> {
        let root = ioctl::openat(
            None,
            self.path.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let rel: &[u8] = if found.rel.is_empty() {
            b"."
        } else {
            &found.rel
        };
        let fd = ioctl::openat2(
            root.as_raw_fd(),
            rel,
            OpenHow::new()
                .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
                .resolve(
                    ResolveFlag::RESOLVE_BENEATH
                        | ResolveFlag::RESOLVE_NO_SYMLINKS
                        | ResolveFlag::RESOLVE_NO_MAGICLINKS
                        | ResolveFlag::RESOLVE_NO_XDEV,
                ),
        )?;
        let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
        let info = ioctl::get_subvol_info(fd.as_fd())?;
        if st.st_ino != FIRST_FREE || info.treeid != found.id {
            return Err(Errno::ENOENT);
        }
        Ok(fd)
    }

    /// The subvolume beneath this mount root whose received uuid
    /// (`received`), or own uuid, is `uuid`, searched from `fd` (on the
    /// filesystem).
    pub(crate) fn search(
        &self,
        fd: BorrowedFd<'_>,
        uuid: Uuid,
        received: bool,
    ) -> nix::Result<Search> {
        let mut out = Search::default();
        {
            for id in subvol_ids(fd, uuid, received)? {
                let Ok(path) = subvol_path(fd, id) else {
                    continue;
                };
                let Some(rel) = beneath(&path, &self.full) else {
                    out.unreachable.push(path);
                    continue;
                };
                let found = Found {
                    id,
                    rel: rel.to_vec(),
                    complete: false,
                };
                let Ok(sub) = self.open(&found) else {
                    out.unreachable.push(path);
                    continue;
                };
                let info = ioctl::get_subvol_info(sub.as_fd())?;
                let has = if received {
                    info.received_uuid
                } else {
                    info.uuid
                };
                if has != *uuid.as_bytes() {
                    // Another filesystem mounted there (-m).
                    out.unreachable.push(path);
                    continue;
                }
                let read_only = info.flags & ioctl::ROOT_SUBVOL_RDONLY != 0;
                let recorded = {
                    use xattr::FileExt;
                    std::fs::File::from(sub)
                        .get_xattr(crate::subvol::XATTR_NAME)
                        .is_ok_and(|v| v.is_some())
                };
                out.found = Some(Found {
                    complete: read_only || !recorded,
                    ..found
                });
                return Ok(out);
            }
        }
        Ok(out)
    }

    /// The path of a subvolume found beneath this root, for messages.
    pub(crate) fn shown(&self, found: &Found) -> Vec<u8> {
        let mut p = self.path.as_os_str().as_bytes().to_vec();
        if !found.rel.is_empty() {
            if !p.ends_with(b"/") {
                p.push(b'/');
            }
            p.extend_from_slice(&found.rel);
        }
        p
    }
}

/// The path from the top level of the directory open at `fd`: its
/// subvolume's path, then the directory's path in it.
fn full_path(fd: BorrowedFd<'_>) -> nix::Result<Vec<u8>> {
    let (id, _) = ioctl::ino_lookup(fd, 0, FIRST_FREE)?;
    let mut path = subvol_path(fd, id)?;
    let ino = nix::sys::stat::fstat(fd.as_raw_fd())?.st_ino;
    if ino != FIRST_FREE {
        let mut dir = ioctl::ino_lookup(fd, id, ino)?.1;
        while dir.last() == Some(&b'/') {
            dir.pop();
        }
        if !path.is_empty() && !dir.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&dir);
    }
    Ok(path)
}

/// The mount point of the btrfs mount with id `id` in mountinfo `text`;
/// without an id (or when it is not listed), as btrfs-progs'
/// `find_mount_root`: the longest mount point `real` is beneath, the last
/// listed on a tie, if it is btrfs.
fn mount_point(text: &[u8], id: Option<u64>, real: &Path) -> Option<PathBuf> {
    let mut best: Option<(usize, PathBuf, bool)> = None;
    for m in mountinfo::parse(text) {
        let btrfs = m.fstype == "btrfs";
        if id.is_some() && m.id == id {
            return btrfs.then_some(m.mount_point);
        }
        if real.starts_with(&m.mount_point) {
            let len = m.mount_point.as_os_str().len();
            if best.as_ref().is_none_or(|(l, _, _)| *l <= len) {
                best = Some((len, m.mount_point, btrfs));
            }
        }
    }
    best.and_then(|(_, p, btrfs)| btrfs.then_some(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_takes_whole_components() {
        assert_eq!(beneath(b"a/b", b""), Some(&b"a/b"[..]));
        assert_eq!(beneath(b"a/b", b"a"), Some(&b"b"[..]));
        assert_eq!(beneath(b"a", b"a"), Some(&b""[..]));
        assert_eq!(beneath(b"ab/c", b"a"), None);
        assert_eq!(beneath(b"b", b"a"), None);
    }

    #[test]
    fn mount_points_by_id_then_by_longest_prefix() {
        let text = b"22 1 0:20 / / rw - ext4 /dev/sda rw\n\
            40 22 0:50 /@home /mnt/my\\040fs rw,relatime - btrfs /dev/loop0 rw\n\
            41 40 0:51 / /mnt/my\\040fs/x rw - tmpfs tmpfs rw\n";
        let real = Path::new("/mnt/my fs/d");
        assert_eq!(
            mount_point(text, Some(40), real),
            Some(PathBuf::from("/mnt/my fs"))
        );
        assert_eq!(
            mount_point(text, None, real),
            Some(PathBuf::from("/mnt/my fs"))
        );
        assert_eq!(mount_point(text, None, Path::new("/mnt/my fs/x/y")), None);
        assert_eq!(mount_point(text, Some(22), real), None);
    }
}
