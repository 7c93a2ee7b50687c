//! The catalog's SQLite schema (documented in docs/catalog.md).
//!
//! Nights are stored as changes: a row of `inode`, `entry`, `xattr` or
//! `extent` belongs to the night (`snap`) that made it, and holds until a
//! later night of the same lineage has a row with the same key. The state
//! of a path in night N is the row of N's nearest ancestor (`ancestry`,
//! depth 0 being N itself). Unchanged paths cost nothing.

/// The schema version in `PRAGMA user_version`.
pub const VERSION: i64 = 1;

/// Creates the tables of an empty catalog.
pub const CREATE: &str = "
CREATE TABLE IF NOT EXISTS stream_file(
    id INTEGER PRIMARY KEY,
    path BLOB NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    compressed INTEGER NOT NULL,
    xxh3 INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshot(
    id INTEGER PRIMARY KEY,
    name BLOB NOT NULL,
    uuid BLOB NOT NULL,
    ctransid INTEGER NOT NULL,
    parent INTEGER REFERENCES snapshot(id),
    parent_uuid BLOB,
    parent_ctransid INTEGER,
    file INTEGER NOT NULL REFERENCES stream_file(id),
    stream_offset INTEGER NOT NULL,
    stream_len INTEGER NOT NULL,
    version INTEGER NOT NULL,
    commands INTEGER NOT NULL,
    data_bytes INTEGER NOT NULL,
    root INTEGER NOT NULL,
    added INTEGER NOT NULL,
    UNIQUE(uuid, ctransid)
);
CREATE INDEX IF NOT EXISTS snapshot_name ON snapshot(name);
CREATE TABLE IF NOT EXISTS ancestry(
    snap INTEGER NOT NULL,
    ancestor INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    PRIMARY KEY(snap, ancestor)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inode(
    id INTEGER NOT NULL,
    snap INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    size INTEGER NOT NULL,
    rdev INTEGER NOT NULL,
    nlink INTEGER NOT NULL,
    atime INTEGER NOT NULL,
    atime_ns INTEGER NOT NULL,
    mtime INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    fileattr INTEGER NOT NULL,
    target BLOB,
    PRIMARY KEY(id, snap)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entry(
    dir INTEGER NOT NULL,
    name BLOB NOT NULL,
    snap INTEGER NOT NULL,
    ino INTEGER,
    PRIMARY KEY(dir, name, snap)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS xattr(
    ino INTEGER NOT NULL,
    name BLOB NOT NULL,
    snap INTEGER NOT NULL,
    value BLOB,
    PRIMARY KEY(ino, name, snap)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS extent(
    ino INTEGER NOT NULL,
    snap INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    len INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    file INTEGER,
    cmd_start INTEGER,
    cmd_end INTEGER,
    src INTEGER,
    PRIMARY KEY(ino, snap, seq)
) WITHOUT ROWID;
";

/// `extent.kind`: the range reads as zeros (a hole, or past a truncate).
pub const KIND_HOLE: i64 = 0;
/// `extent.kind`: bytes written by the WRITE commands in
/// `[cmd_start, cmd_end)` of `file`, at their file offsets from `src`.
pub const KIND_WRITE: i64 = 1;
/// `extent.kind`: as [`KIND_WRITE`], where the commands include
/// ENCODED_WRITEs (compressed extents, decoded on restore).
pub const KIND_ENCODED: i64 = 2;
/// `extent.kind`: bytes a CLONE copied; the row points where the source's
/// bytes lie (a WRITE or encoded run of whichever night wrote them).
pub const KIND_CLONED_WRITE: i64 = 3;
/// As [`KIND_CLONED_WRITE`] for a source held in an encoded run.
pub const KIND_CLONED_ENCODED: i64 = 4;
