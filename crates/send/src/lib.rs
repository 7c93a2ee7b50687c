//! rsend: btrfs send streams made straight from devices or image files,
//! without the kernel.
//!
//! Two layers. This library is the engine: it reads a filesystem through
//! the on-disk reader [`btrfs_disk`] and never prints or touches the
//! terminal. Each engine returns what it found (stream statistics,
//! records, a report) or a typed error, and reports how far it got
//! through a [`progress::Progress`]:
//!
//! - [`send`]: full and incremental streams of read-only snapshots, as
//!   `btrfs send` makes them ([`send::send_subvolume`],
//!   [`send::send_incremental`], [`send::send_with`]);
//! - [`changes`]: what changed between two snapshots, as [`record`]s;
//! - [`verify`]: how a copy on any filesystem differs from a snapshot;
//! - [`record`]: the records both list, as text or JSON lines;
//! - [`lineage`]: which subvolumes descend from the same one (the
//!   parents an incremental send may use);
//! - [`plan`]: the parent and clone sources of each subvolume sent, as
//!   `-p`, `-c`, `--parent-from` (reading `rreceive --list`) and
//!   `--resume` ask;
//! - [`bookmark`]: a snapshot's tree kept in a file, the parent of
//!   incremental sends after the snapshot is deleted;
//! - [`snapshot_error`]: a failed read of a snapshot, told at the inode
//!   and path it happened, as all three report it;
//! - [`progress`], [`output`]: the small pieces the binary shares with
//!   the engines (progress reports, where a stream may go); I/O errors
//!   in words come from `btrfs_text::plain_io`.
//!
//! The `rsend` binary (`src/bin/rsend/`, built with the default `cli`
//! feature) is the command line: flags, the progress bar, the dry run's
//! table, and every line on standard error. A library user takes
//! `default-features = false` and gets none of the command line's
//! dependencies (its parser, its error reporting, its progress bar).

#![warn(missing_docs)]

pub mod bookmark;
pub mod changes;
pub mod lineage;
pub mod output;
pub mod plan;
pub mod progress;
pub mod record;
pub mod rescue;
pub mod send;
pub mod snapshot_error;
pub mod verify;
