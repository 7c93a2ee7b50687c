//! Why a bookmark could not be written, read or used.

use std::path::PathBuf;

/// A bookmark that could not be written, read or used as a parent.
#[derive(Debug, thiserror::Error)]
pub enum BookmarkError {
    /// Reading or writing the file failed.
    #[error("bookmark {}: {}", path.display(), btrfs_text::plain_io(source))]
    Io {
        /// The bookmark file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// It is a directory (a snapshot?), not a bookmark file.
    #[error("{} is a directory, not a bookmark (a snapshot is named with -p, a bookmark file with --parent-bookmark)", path.display())]
    IsDirectory {
        /// The path.
        path: PathBuf,
    },
    /// The file does not start with the bookmark magic.
    #[error("{} is not an rsend bookmark (it does not start with the bookmark magic RSENDBMK)", path.display())]
    NotABookmark {
        /// The file.
        path: PathBuf,
    },
    /// A format version this rsend does not read.
    #[error("bookmark {}: format version {found}; this rsend reads version {}", path.display(), super::format::VERSION)]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it has.
        found: u32,
    },
    /// The file ends before its end mark.
    #[error("bookmark {}: cut short ({len} bytes, no end mark): its writing was stopped, or the file was truncated", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The checksum does not match the contents.
    #[error("bookmark {}: damaged: the checksum (crc32c) in its trailer does not match its {len} bytes", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The checksum matches but a part does not decode.
    #[error("bookmark {}: damaged: {why}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What does not decode.
        why: String,
    },
    /// A bookmark of another filesystem.
    #[error("bookmark {}: it is of {snapshot} on filesystem {fsid}, not of this filesystem ({this})", path.display())]
    OtherFilesystem {
        /// The file.
        path: PathBuf,
        /// Its snapshot.
        snapshot: String,
        /// Its fsid.
        fsid: uuid::Uuid,
        /// The fsid of the filesystem read.
        this: uuid::Uuid,
    },
    /// Its snapshot is not of the lineage of the one sent.
    #[error("bookmark {}: its snapshot {snapshot} (uuid {uuid}) is not of the lineage of {sent} (neither is a snapshot of the other or of the same subvolume); --parent-any sends against it anyway", path.display())]
    Unrelated {
        /// The file.
        path: PathBuf,
        /// Its snapshot.
        snapshot: String,
        /// Its snapshot's uuid.
        uuid: uuid::Uuid,
        /// The snapshot sent.
        sent: String,
    },
    /// Its snapshot is newer than the one sent.
    #[error("bookmark {}: its snapshot {snapshot} (ctransid {ctransid}) is newer than {sent} (ctransid {sent_ctransid}): a parent must be older", path.display())]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its snapshot.
        snapshot: String,
        /// Its ctransid.
        ctransid: u64,
        /// The snapshot sent.
        sent: String,
        /// Its ctransid.
        sent_ctransid: u64,
    },
    /// Only a read-only snapshot can be bookmarked.
    #[error(
        "{snapshot} is not read-only: only a read-only snapshot can be a parent, and bookmarked"
    )]
    NotReadOnly {
        /// The subvolume.
        snapshot: String,
    },
    /// Reading the snapshot's tree failed.
    #[error("bookmarking {snapshot}: {source}")]
    Read {
        /// The snapshot.
        snapshot: String,
        /// What failed.
        source: btrfs_disk::Error,
    },
}
