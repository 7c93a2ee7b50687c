//! rsend: btrfs send streams made straight from devices or image files,
//! without the kernel.
//!
//! [`send::send_subvolume`] turns a read-only snapshot, read by the on-disk
//! reader [`btrfs_disk`], into a full send stream as `btrfs send` does;
//! [`cli`] holds what the `rsend` binary does, and [`progress`] its
//! progress bar.

#![warn(missing_docs)]

pub mod changes;
pub mod cli;
pub mod lineage;
mod place;
pub mod progress;
pub mod record;
pub mod send;
pub mod verify;
