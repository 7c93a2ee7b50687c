//! Errors of the on-disk reader. Each names what is wrong and where.
//!
//! [`Error`] is what the filesystem-level API returns. The decoders of
//! on-disk structures return typed errors of their own, defined beside them
//! ([`ItemError`] in [`crate::items`], [`ChunkError`] and
//! [`SysChunkArrayError`] in [`crate::chunk`], [`SuperblockError`] and
//! [`FeatureError`] in [`crate::superblock`], [`BlockError`] in
//! [`crate::block`]), which the variants of
//! [`Error`] carry in their `reason` (or `what`) field. Those fields are
//! part of the variant's message, so they are not reported again as its
//! `source()`.
//!
//! The reasons defined here are those of reads that fail in turn: a tree
//! block copy ([`MirrorFault`], [`TreeBlockError`]), a superblock copy
//! ([`CopyFault`], [`NoSuperblockReason`]) and file data ([`DataError`]).
//! A failed read of a copy is itself an [`Error`], so these hold an
//! [`Error`] that may hold them in turn, and they share this module with
//! it.

use std::path::PathBuf;

use uuid::Uuid;

use crate::block::BlockError;
use crate::chunk::{ChunkError, SysChunkArrayError};
use crate::items::ItemError;
use crate::key::Key;
use crate::superblock::{FeatureError, SuperblockError};

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
    /// The path cannot hold a btrfs filesystem (a directory, a character
    /// device, a file too small).
    #[error("{path}: {why}", path = path.display())]
    NotAFilesystem {
        /// The path as given.
        path: PathBuf,
        /// What it is instead, and what is expected.
        why: String,
    },
    /// None of the superblock copies of a device is usable.
    #[error("{path}: not a btrfs filesystem, or a damaged one: no valid btrfs superblock ({reason})", path = path.display())]
    NoSuperblock {
        /// The device or image.
        path: PathBuf,
        /// Why each copy was refused, or why the chosen one is unusable.
        reason: NoSuperblockReason,
    },
    /// The filesystem uses a feature this reader does not support.
    #[error("{path}: unsupported filesystem feature: {what}", path = path.display())]
    Unsupported {
        /// The device or image.
        path: PathBuf,
        /// The feature, by its btrfs name.
        what: FeatureError,
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
        reason: ChunkError,
    },
    /// No copy of a tree block passed validation.
    #[error("tree block at logical {logical} (tree {tree}): {reason}")]
    BadTreeBlock {
        /// The block's logical address.
        logical: u64,
        /// The tree it was read for.
        tree: u64,
        /// Why each copy was refused.
        reason: TreeBlockError,
    },
    /// An item is malformed.
    #[error("tree {tree}, item {key}: {reason}")]
    BadItem {
        /// The tree holding it.
        tree: u64,
        /// Its key.
        key: Key,
        /// What is wrong.
        reason: ItemError,
    },
    /// A tree that must exist has no ROOT_ITEM in the root tree.
    #[error("tree {tree}: no ROOT_ITEM in the root tree")]
    MissingTree {
        /// The tree id.
        tree: u64,
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
        reason: DataError,
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
    NoSubvolume(SubvolWanted),
    /// A path does not resolve inside a subvolume.
    #[error("subvolume {subvol}: no such file {path}")]
    NoPath {
        /// The subvolume id.
        subvol: u64,
        /// The path asked for.
        path: String,
    },
}

fn join<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why one copy of a tree block was not used.
#[derive(Debug, thiserror::Error)]
pub enum MirrorFault {
    /// It could not be read.
    #[error(transparent)]
    Read(Box<Error>),
    /// It was read but is invalid.
    #[error(transparent)]
    Invalid(BlockError),
}

/// One copy of a tree block and why it was refused.
#[derive(Debug, thiserror::Error)]
#[error("mirror {mirror}: {reason}")]
pub struct MirrorRefusal {
    /// The copy (1-based).
    pub mirror: u32,
    /// Why.
    pub reason: MirrorFault,
}

/// Why a tree block cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TreeBlockError {
    /// Its address is 0 or not sector-aligned.
    #[error("address is not sector-aligned")]
    Unaligned,
    /// A node has no pointer at the slot asked for.
    #[error("no pointer {slot}")]
    NoPointer {
        /// The slot.
        slot: usize,
    },
    /// Every copy was refused; why, copy by copy.
    #[error("{}", join(.0))]
    Mirrors(Vec<MirrorRefusal>),
    /// No block is stored at the address (a tree held in memory).
    #[error("no such block")]
    Missing,
    /// The only copy was refused.
    #[error(transparent)]
    Invalid(Box<BlockError>),
}

/// Why one superblock copy was not used.
#[derive(Debug, thiserror::Error)]
pub enum CopyFault {
    /// It could not be read.
    #[error(transparent)]
    Read(Box<Error>),
    /// It was read but is invalid.
    #[error(transparent)]
    Invalid(SuperblockError),
}

/// One superblock copy and why it was refused.
#[derive(Debug, thiserror::Error)]
#[error("copy {copy}: {reason}")]
pub struct CopyRefusal {
    /// The copy (0 = primary).
    pub copy: usize,
    /// Why.
    pub reason: CopyFault,
}

/// Why a device has no usable superblock.
#[derive(Debug, thiserror::Error)]
pub enum NoSuperblockReason {
    /// The device is too small for even the primary copy.
    #[error("device is only {size} bytes")]
    DeviceTooSmall {
        /// Its size.
        size: u64,
    },
    /// Every copy was refused; why, copy by copy.
    #[error("{}", join(.0))]
    Copies(Vec<CopyRefusal>),
    /// The chosen copy's sys_chunk_array is malformed.
    #[error(transparent)]
    SysChunkArray(SysChunkArrayError),
}

impl Error {
    /// What turns an item's decoding error into [`Error::BadItem`] for the
    /// item at `key` of tree `tree` (for `map_err`).
    pub fn bad_item(tree: u64, key: Key) -> impl FnOnce(ItemError) -> Error {
        move |reason| Error::BadItem { tree, key, reason }
    }

    /// Whether this is a tree block that a newer commit wrote over the one
    /// meant: a copy whose checksum holds but whose generation is newer than
    /// the parent pointer says. On a mounted filesystem that is a block its
    /// tree freed and the kernel reused; the tree must be read again from a
    /// newer commit.
    pub fn is_overwritten(&self) -> bool {
        matches!(self, Error::BadTreeBlock { reason, .. } if reason.is_overwritten())
    }
}

impl TreeBlockError {
    /// Whether some copy is a newer block written over the one meant.
    pub fn is_overwritten(&self) -> bool {
        match self {
            TreeBlockError::Mirrors(v) => v
                .iter()
                .any(|m| matches!(&m.reason, MirrorFault::Invalid(b) if b.is_overwritten())),
            TreeBlockError::Invalid(b) => b.is_overwritten(),
            _ => false,
        }
    }
}

/// Why file data could not be read or decoded.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// No copy of the extent's bytes could be read.
    #[error("cannot read logical {logical}: {}", source.as_deref().map(|e| e.to_string()).unwrap_or_default())]
    Unreadable {
        /// Where the read started.
        logical: u64,
        /// Why the last copy failed.
        source: Option<Box<Error>>,
    },
    /// The checksum tree has fewer sums than the read covers.
    #[error("checksum run does not cover the read")]
    CsumRunShort,
    /// An extent's address plus its offset overflows.
    #[error("extent address overflows")]
    AddressOverflow,
    /// A compressed extent larger than btrfs allows.
    #[error("compressed extent of {disk_bytes} bytes on disk and {ram_bytes} decoded (at most {max})", max = btrfs_compress::MAX_COMPRESSED)]
    CompressedSize {
        /// Its size on disk.
        disk_bytes: u64,
        /// Its decoded size.
        ram_bytes: u64,
    },
    /// An extent too large to read whole.
    #[error("disk extent of {bytes} bytes")]
    ExtentSize {
        /// Its size on disk.
        bytes: u64,
    },
    /// Inline data that does not decode.
    #[error("inline extent: {0}")]
    Inline(Box<btrfs_compress::Error>),
    /// A compressed extent that does not decode.
    #[error("extent at logical {logical}: {source}")]
    Decode {
        /// The extent's logical address.
        logical: u64,
        /// What the decoder said.
        source: Box<btrfs_compress::Error>,
    },
}

/// The subvolume a lookup asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubvolWanted {
    /// By id.
    Id(u64),
    /// By path from the top level.
    Path(std::path::PathBuf),
    /// By uuid or received uuid.
    Uuid(Uuid),
}

impl std::fmt::Display for SubvolWanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubvolWanted::Id(id) => write!(f, "id {id}"),
            SubvolWanted::Path(p) => write!(f, "at path {}", p.display()),
            SubvolWanted::Uuid(u) => write!(f, "with uuid {u}"),
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::RebuildError;
    use crate::items::Part;

    #[test]
    fn error_stays_small() {
        // Callers (rsend's SendError) embed it; keep it at most its size before typed reasons.
        assert!(size_of::<Error>() <= 64, "{}", size_of::<Error>());
    }

    #[test]
    fn joined_reasons_read_as_before() {
        let e = Error::BadTreeBlock {
            logical: 30408704,
            tree: 5,
            reason: TreeBlockError::Mirrors(vec![
                MirrorRefusal {
                    mirror: 1,
                    reason: MirrorFault::Invalid(BlockError::CsumMismatch { csum: "crc32c" }),
                },
                MirrorRefusal {
                    mirror: 2,
                    reason: MirrorFault::Invalid(BlockError::WrongGeneration {
                        found: 7,
                        expected: 8,
                    }),
                },
            ]),
        };
        assert_eq!(
            e.to_string(),
            "tree block at logical 30408704 (tree 5): mirror 1: crc32c checksum mismatch; \
             mirror 2: generation 7 where the parent says 8"
        );
        assert!(
            std::error::Error::source(&e).is_none(),
            "the reason is in the message"
        );
        let e = Error::NoSuperblock {
            path: "img".into(),
            reason: NoSuperblockReason::Copies(vec![
                CopyRefusal {
                    copy: 0,
                    reason: CopyFault::Invalid(SuperblockError::BadMagic { bytenr: 65536 }),
                },
                CopyRefusal {
                    copy: 1,
                    reason: CopyFault::Invalid(SuperblockError::Misplaced {
                        bytenr: 67108864,
                        recorded: 65536,
                    }),
                },
            ]),
        };
        assert_eq!(
            e.to_string(),
            "img: not a btrfs filesystem, or a damaged one: no valid btrfs superblock \
             (copy 0: bad magic at physical 65536; copy 1: copy at physical 67108864 says it is at 65536)"
        );
    }

    #[test]
    fn nested_reasons_read_in_one_line() {
        let e = Error::BadChunk {
            logical: 1 << 30,
            reason: ChunkError::Rebuild {
                logical: (1 << 30) + 4096,
                reason: RebuildError {
                    missing: 2,
                    p_present: true,
                    q_present: false,
                },
            },
        };
        assert_eq!(
            e.to_string(),
            "chunk at logical 1073741824: logical 1073745920: cannot rebuild: \
             2 data strips missing, P present, Q missing"
        );
        let e = SysChunkArrayError::UnexpectedKey {
            offset: 0,
            key: Key::new(256, 216, 1),
        };
        assert_eq!(
            e.to_string(),
            "sys_chunk_array: unexpected key (256, 216, 1)"
        );
        let e = Error::BadItem {
            tree: 5,
            key: Key::new(257, 12, 256),
            reason: ItemError::Overrun {
                what: Part::InodeRefName,
                offset: 10,
                len: 300,
            },
        };
        assert_eq!(
            e.to_string(),
            "tree 5, item (257 INODE_REF 256): inode ref name of 300 bytes at byte 10 overruns the item"
        );
    }
}
