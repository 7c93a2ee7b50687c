//! The btrfs on-disk reader: filesystems read straight from image files and
//! block devices, with no kernel, mount or ioctl.
//!
//! [`Filesystem::open`] takes the devices; from there you get subvolumes
//! ([`Filesystem::subvolumes`], [`Filesystem::find_subvolume`]), trees
//! ([`tree::Tree`] with point lookups, range iteration and cursors), typed
//! item views ([`items`]) and file data ([`Filesystem::read_file`]), checked
//! against the checksum tree and repaired from other copies. Above them sit
//! what a send and its tools share: the comparison of two trees ([`diff`])
//! and cached lookups in a snapshot ([`lookup`]).
//!
//! The modules form layers, each importing only those below it:
//!
//! 1. [`key`], [`csum`]: keys and key types, checksums;
//! 2. [`superblock`], [`items`], [`chunk`], [`block`]: decoding and
//!    validation of on-disk structures (tree blocks with their cache), each
//!    with its own error ([`superblock::SuperblockError`],
//!    [`items::ItemError`], [`chunk::ChunkError`], [`block::BlockError`],
//!    ...); beside them [`rescue`], the log of what a rescue read lost;
//! 3. [`error`]: the reader's [`Error`], which carries those as reasons,
//!    and the errors of reads that fail in turn (tree block and superblock
//!    copies, file data): they hold an [`Error`] of their own, so they live
//!    beside it;
//! 4. [`device`]: reading devices and image files;
//! 5. [`tree`]: the [`BlockSource`] trait through which trees read blocks,
//!    and searching and walking any tree over one; [`mem`] holds trees in
//!    memory, for tests and fuzzing;
//! 6. [`diff`]: two trees compared item by item, shared subtrees skipped
//!    unread (the kernel's btrfs_compare_trees), with [`diff::DiffError`];
//! 7. [`fs`]: the [`Filesystem`] (devices, chunk map, RAID, the root trees),
//!    itself a [`BlockSource`];
//! 8. [`subvol`], [`data`]: subvolumes, inodes, directories and file data;
//! 9. [`lookup`]: cached lookups in one snapshot's fs tree (inode facts,
//!    first references, directory entries), with [`lookup::LookupError`].
//!
//! Beside them, above [`device`] (whose superblock gives the fsid), [`mount`]
//! turns a path on a mounted btrfs into its subvolume's path from the top
//! level and the filesystem's devices.
//!
//! The only `unsafe` code is the memory map of an image file in [`device`].

#![warn(missing_docs)]

pub mod block;
pub mod chunk;
pub mod csum;
pub mod data;
pub mod device;
pub mod diff;
pub mod error;
pub mod fs;
pub mod items;
pub mod key;
pub mod lookup;
pub mod mem;
pub mod mount;
pub mod rescue;
pub mod subvol;
pub mod superblock;
pub mod tree;

mod bytes;

pub use block::{Block, Expect};
pub use data::{DirEntryInfo, FileExtent, Inode};
pub use error::{Error, Result};
pub use fs::{Filesystem, Notice, NoticeKind, Options, RootLocation};
pub use key::Key;
pub use subvol::{SubvolSelector, Subvolume};
pub use tree::{BlockSource, Tree};
