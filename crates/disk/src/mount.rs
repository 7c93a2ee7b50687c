//! Mounted paths: from a path on a mounted btrfs to the subvolume's path
//! from the top level and the filesystem's devices, as `btrfs send` takes
//! its arguments.
//!
//! Only the mount table (`/proc/self/mountinfo`) and sysfs
//! (`/sys/fs/btrfs/FSID/devices/`) are read, and the path itself is
//! stat'ed; the trees are then read from the devices, never through the
//! mount.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use btrfs_text::mountinfo::{self, Mount};
use uuid::Uuid;

use crate::device::Device;

/// Where the kernel lists each mounted btrfs, by fsid.
const SYSFS_BTRFS: &str = "/sys/fs/btrfs";
/// The inode number of every subvolume's root directory.
const SUBVOL_ROOT_INO: u64 = 256;

/// Why a path could not be taken as a subvolume on a mounted btrfs.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The path could not be resolved or stat'ed.
    #[error("{}: {source}", path.display())]
    Path {
        /// The path as given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The mount table or sysfs could not be read.
    #[error("reading {}: {source}", path.display())]
    System {
        /// The file or directory read.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The path is on no mount of the table.
    #[error("{}: on no mounted filesystem", path.display())]
    NotMounted {
        /// The path as given.
        path: PathBuf,
    },
    /// The path is on a mounted filesystem that is not btrfs.
    #[error("{}: not on a btrfs filesystem (it is on {fstype} mounted at {})", path.display(), mount_point.display())]
    NotBtrfs {
        /// The path as given.
        path: PathBuf,
        /// The type of the filesystem it is on.
        fstype: String,
        /// Where that filesystem is mounted.
        mount_point: PathBuf,
    },
    /// The path is on btrfs but not the root of a subvolume.
    #[error("{} is not a subvolume", path.display())]
    NotSubvolume {
        /// The path as given.
        path: PathBuf,
    },
    /// The superblock of the mount's device could not be read.
    #[error("{}: reading the superblock of {}: {source}", path.display(), device.display())]
    Superblock {
        /// The path as given.
        path: PathBuf,
        /// The device.
        device: PathBuf,
        /// Why.
        source: Box<crate::Error>,
    },
    /// No `/sys/fs/btrfs/FSID/devices/` lists the mount's device.
    #[error("{}: the btrfs mounted at {} from {} is not listed in {SYSFS_BTRFS}", path.display(), mount_point.display(), source_dev.display())]
    NoDevices {
        /// The path as given.
        path: PathBuf,
        /// Where the filesystem is mounted.
        mount_point: PathBuf,
        /// The mount's source device.
        source_dev: PathBuf,
    },
}

/// A subvolume named by a path on a mounted btrfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountedSubvol {
    /// The filesystem's fsid (from its superblock).
    pub fsid: Uuid,
    /// Every device of the filesystem (`/dev/NAME`), sorted: the same
    /// for every path on the same mounted filesystem.
    pub devices: Vec<PathBuf>,
    /// The subvolume's path from the top level (`snaps/tue`; empty for
    /// the top level itself).
    pub path: PathBuf,
    /// Where the filesystem holding it is mounted.
    pub mount_point: PathBuf,
}

/// Resolves `path` (absolute, or relative to the current directory) as a
/// subvolume on a mounted btrfs: its path from the top level and the
/// filesystem's fsid and devices.
pub fn resolve(path: &Path) -> Result<MountedSubvol, MountError> {
    let given = || path.to_path_buf();
    let real = std::fs::canonicalize(path).map_err(|source| MountError::Path {
        path: given(),
        source,
    })?;
    let table = std::fs::read(mountinfo::PATH).map_err(|source| MountError::System {
        path: mountinfo::PATH.into(),
        source,
    })?;
    let entries = mountinfo::parse(&table);
    let Some((m, beneath)) = mount_of(&entries, &real) else {
        return Err(MountError::NotMounted { path: given() });
    };
    if m.fstype != "btrfs" {
        return Err(MountError::NotBtrfs {
            path: given(),
            fstype: m.fstype.clone(),
            mount_point: m.mount_point.clone(),
        });
    }
    let meta = std::fs::metadata(&real).map_err(|source| MountError::Path {
        path: given(),
        source,
    })?;
    if !meta.is_dir() || meta.ino() != SUBVOL_ROOT_INO {
        return Err(MountError::NotSubvolume { path: given() });
    }
    let devices = devices_of(&m.source).ok_or_else(|| MountError::NoDevices {
        path: given(),
        mount_point: m.mount_point.clone(),
        source_dev: m.source.clone(),
    })?;
    // sysfs names a filesystem mounted with a temporary fsid (a cloned
    // image) by that; the superblock holds the one -d's devices have.
    let sb = Device::open(&m.source).map_err(|e| MountError::Superblock {
        path: given(),
        device: m.source.clone(),
        source: Box::new(e),
    })?;
    Ok(MountedSubvol {
        fsid: sb.superblock().fsid(),
        devices,
        path: top_level_path(&m.root, &beneath),
        mount_point: m.mount_point.clone(),
    })
}

/// The path from the top level of `beneath` (relative to a mount point)
/// when the mount's root is `root`: `/@` and `snaps/tue` give `@/snaps/tue`.
fn top_level_path(root: &Path, beneath: &Path) -> PathBuf {
    let mut p = PathBuf::new();
    for c in root.components().chain(beneath.components()) {
        if let std::path::Component::Normal(n) = c {
            p.push(n);
        }
    }
    p
}

/// The mount `real` (canonical) is on, the last one mounted at the longest
/// mount point that is a prefix of it, and the path beneath it.
fn mount_of<'a>(entries: &'a [Mount], real: &Path) -> Option<(&'a Mount, PathBuf)> {
    let mut best: Option<(&Mount, PathBuf)> = None;
    for e in entries {
        let Ok(rest) = real.strip_prefix(&e.mount_point) else {
            continue;
        };
        let longer = best.as_ref().is_none_or(|(b, _)| {
            e.mount_point.components().count() >= b.mount_point.components().count()
        });
        if longer {
            best = Some((e, rest.to_path_buf()));
        }
    }
    best
}

/// The devices of the mounted btrfs whose device `source` is: those the
/// directory of `/sys/fs/btrfs/` that lists it lists.
fn devices_of(source: &Path) -> Option<Vec<PathBuf>> {
    let dev = std::fs::canonicalize(source).ok()?;
    let name = dev.file_name()?;
    for dir in std::fs::read_dir(SYSFS_BTRFS).ok()?.flatten() {
        // Its entries are fsids, and `features` beside them.
        let fsid_named = dir
            .file_name()
            .to_str()
            .is_some_and(|s| Uuid::parse_str(s).is_ok());
        if !fsid_named {
            continue;
        }
        let Ok(list) = std::fs::read_dir(dir.path().join("devices")) else {
            continue;
        };
        let mut names: Vec<PathBuf> = list
            .flatten()
            .map(|d| Path::new("/dev").join(d.file_name()))
            .collect();
        if names.iter().any(|d| d.file_name() == Some(name)) {
            names.sort();
            return Some(names);
        }
    }
    None
}

/// Whether `path` names something on a mounted btrfs (it exists and the
/// mount it is on is btrfs).
pub fn is_on_btrfs(path: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(path) else {
        return false;
    };
    let Ok(table) = std::fs::read(mountinfo::PATH) else {
        return false;
    };
    let entries = mountinfo::parse(&table);
    mount_of(&entries, &real).is_some_and(|(m, _)| m.fstype == "btrfs")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[u8] = b"\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 27 0:45 /@ /mnt/pool rw,relatime shared:20 - btrfs /dev/loop0 rw,space_cache=v2,subvolid=256,subvol=/@
41 40 0:45 /snaps /mnt/pool/my\\040snaps rw - btrfs /dev/loop0 rw
42 27 0:50 / /mnt/pool rw - btrfs /dev/loop1 rw
";

    #[test]
    fn longest_then_last_mount_point_wins() {
        let e = mountinfo::parse(TABLE);
        let (m, rest) = mount_of(&e, Path::new("/mnt/pool/my snaps/tue")).expect("mounted");
        assert_eq!(m.root, Path::new("/snaps"));
        assert_eq!(top_level_path(&m.root, &rest), Path::new("snaps/tue"));
        // Mounted over: the later mount at the same point hides the earlier.
        let (m, rest) = mount_of(&e, Path::new("/mnt/pool/x")).expect("mounted");
        assert_eq!(m.source, Path::new("/dev/loop1"));
        assert_eq!(top_level_path(&m.root, &rest), Path::new("x"));
        let (m, _) = mount_of(&e, Path::new("/home")).expect("mounted");
        assert_eq!(m.fstype, "ext4");
    }

    #[test]
    fn subvol_mount_root_prefixes_the_path() {
        assert_eq!(
            top_level_path(Path::new("/@"), Path::new("snaps/mon")),
            Path::new("@/snaps/mon")
        );
        assert_eq!(top_level_path(Path::new("/"), Path::new("")), Path::new(""));
    }
}
