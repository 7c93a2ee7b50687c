//! Why a catalog operation failed.

use std::path::PathBuf;

/// A failed catalog operation; each names the file, night, path or command
/// it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SQLite database failed or is not a catalog.
    #[error("catalog {path}: {source}")]
    Db {
        /// The catalog file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The catalog was written by a newer rreceive.
    #[error("catalog {path}: schema version {found}, this rreceive reads version {known}")]
    Version {
        /// The catalog file.
        path: PathBuf,
        /// The version it holds.
        found: i64,
        /// The version this build knows.
        known: i64,
    },
    /// A stream file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The stream or destination file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A stream file is malformed, cut short or damaged.
    #[error("{path}: {source}")]
    Stream {
        /// The stream file.
        path: PathBuf,
        /// What the reader found, with its byte offset and command number.
        source: btrfs_stream::Error,
    },
    /// A stream cannot be cataloged (a command names a path that does not
    /// exist, a parent that is not in the catalog, ...).
    #[error("{path}: {what} (command #{command} at byte {offset})")]
    Refused {
        /// The stream file.
        path: PathBuf,
        /// What is wrong.
        what: String,
        /// The command's number in the file.
        command: u64,
        /// Its byte offset.
        offset: u64,
    },
    /// An incremental stream's parent is not in the catalog.
    #[error("{path}: the parent of {name} (uuid {parent}, ctransid {ctransid}) is not in the catalog: add its night first")]
    MissingParent {
        /// The stream file.
        path: PathBuf,
        /// The snapshot the stream makes (escaped).
        name: String,
        /// The parent's uuid.
        parent: String,
        /// The parent's ctransid.
        ctransid: u64,
    },
    /// A snapshot or path asked for is not in the catalog.
    #[error("{0}")]
    NotFound(String),
    /// What the catalog points at no longer matches the stream file.
    #[error("night {night}: {what}")]
    Changed {
        /// The night (snapshot name, escaped).
        night: String,
        /// What differs.
        what: String,
    },
    /// A restore cannot be done exactly.
    #[error("{0}")]
    Restore(String),
}

/// The result of a catalog operation.
pub type Result<T> = std::result::Result<T, Error>;
