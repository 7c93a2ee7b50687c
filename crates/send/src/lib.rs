//! rsend's on-disk reader: btrfs filesystems read straight from image files
//! and block devices, with no kernel, mount or ioctl.
//!
//! [`Filesystem::open`] takes the devices; from there you get subvolumes
//! ([`Filesystem::subvolumes`], [`Filesystem::find_subvolume`]), trees
//! ([`tree::Tree`] with point lookups, range iteration and node access),
//! typed item views ([`items`]) and file data ([`Filesystem::read_file`]),
//! checked against the checksum tree and repaired from other copies.
//!
//! [`send::send_subvolume`] turns a read-only snapshot into a full send
//! stream, as `btrfs send` does, without the kernel.

#![warn(missing_docs)]

pub mod chunk;
pub mod csum;
pub mod data;
pub mod device;
pub mod error;
pub mod fs;
pub mod items;
pub mod progress;
pub mod send;
pub mod subvol;
pub mod superblock;
pub mod tree;

mod bytes;
pub mod cli;

pub use data::{DirEntryInfo, FileExtent, Inode};
pub use error::{Error, Result};
pub use fs::{Filesystem, Notice, NoticeKind, Options, RootLocation};
pub use subvol::{SubvolSelector, Subvolume};
pub use tree::{Key, Tree};
