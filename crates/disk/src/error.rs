//! Errors of the on-disk reader. Each names what is wrong and where.

use std::path::PathBuf;

use uuid::Uuid;

use crate::key::Key;

/// Everything that can go wrong while reading a btrfs filesystem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system error on a device or image file.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The device or image.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// None of the superblock copies of a device is usable.
    #[error("{path}: no valid btrfs superblock ({reason})", path = path.display())]
    NoSuperblock {
        /// The device or image.
        path: PathBuf,
        /// Why each copy was refused.
        reason: String,
    },
    /// The filesystem uses a feature this reader does not support.
    #[error("{path}: unsupported filesystem feature: {what}", path = path.display())]
    Unsupported {
        /// The device or image.
        path: PathBuf,
        /// The feature, by its btrfs name.
        what: String,
    },
    /// No device was given.
    #[error("no device given")]
    NoDevices,
    /// A device belongs to another filesystem than the first one given.
    #[error("{path}: belongs to filesystem {found}, not {expected}", path = path.display())]
    OtherFilesystem {
        /// The device or image.
        path: PathBuf,
        /// Its fsid.
        found: Uuid,
        /// The fsid of the first device.
        expected: Uuid,
    },
    /// Two devices claim the same devid.
    #[error("{path} and {other}: both are devid {devid}", path = path.display(), other = other.display())]
    DuplicateDevice {
        /// One device.
        path: PathBuf,
        /// The other one.
        other: PathBuf,
        /// The devid both claim.
        devid: u64,
    },
    /// A read needs a device that was not given.
    #[error("device devid {devid} uuid {uuid} is missing")]
    MissingDevice {
        /// Its devid.
        devid: u64,
        /// Its device uuid.
        uuid: Uuid,
    },
    /// A read ran past the end of a device.
    #[error("{path}: read of {len} bytes at physical {physical} is past the end of the device", path = path.display())]
    ShortDevice {
        /// The device or image.
        path: PathBuf,
        /// Physical offset.
        physical: u64,
        /// Length.
        len: usize,
    },
    /// A logical address lies in no chunk.
    #[error("logical {logical}: not in any chunk")]
    Unmapped {
        /// The logical address.
        logical: u64,
    },
    /// A chunk item is malformed.
    #[error("chunk at logical {logical}: {reason}")]
    BadChunk {
        /// The chunk's logical start.
        logical: u64,
        /// What is wrong.
        reason: String,
    },
    /// No copy of a tree block passed validation.
    #[error("tree block at logical {logical} (tree {tree}): {reason}")]
    BadTreeBlock {
        /// The block's logical address.
        logical: u64,
        /// The tree it was read for.
        tree: u64,
        /// Why each copy was refused.
        reason: String,
    },
    /// An item is malformed.
    #[error("tree {tree}, item {key}: {reason}")]
    BadItem {
        /// The tree holding it.
        tree: u64,
        /// Its key.
        key: Key,
        /// What is wrong.
        reason: String,
    },
    /// A tree that must exist does not.
    #[error("tree {tree}: {reason}")]
    MissingTree {
        /// The tree id.
        tree: u64,
        /// What is missing.
        reason: String,
    },
    /// No copy of a data sector matches its checksum.
    #[error("subvolume {subvol} inode {ino}: data checksum mismatch at file offset {offset} (logical {logical}) on every copy")]
    DataCsum {
        /// The subvolume id.
        subvol: u64,
        /// The inode number.
        ino: u64,
        /// The file offset of the bad sector (or of the extent, for compressed data).
        offset: u64,
        /// The logical address of the bad sector.
        logical: u64,
    },
    /// File data cannot be read or decoded.
    #[error("subvolume {subvol} inode {ino} file offset {offset}: {reason}")]
    BadData {
        /// The subvolume id.
        subvol: u64,
        /// The inode number.
        ino: u64,
        /// The file offset of the extent.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// An inode does not exist.
    #[error("subvolume {subvol}: no inode {ino}")]
    NoInode {
        /// The subvolume id.
        subvol: u64,
        /// The inode number.
        ino: u64,
    },
    /// No subvolume matches.
    #[error("no subvolume {0}")]
    NoSubvolume(String),
    /// A path does not resolve inside a subvolume.
    #[error("subvolume {subvol}: no such file {path}")]
    NoPath {
        /// The subvolume id.
        subvol: u64,
        /// The path asked for.
        path: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
