//! Owned commands: what the walk produces and the stream writer encodes
//! (what send.c builds with begin_cmd, the TLV_PUT macros and send_cmd, as
//! data).
//!
//! The walk runs on one thread and the encoder on another, so commands
//! travel between them owned. Paths are shared (`Arc<[u8]>`): one inode's
//! commands mostly repeat its path.

use std::sync::Arc;

use btrfs_stream::{Command, PathRole, Timespec, Uuid};

use super::ahead::Pending;

/// A path or name, shared between the commands that repeat it.
pub(crate) type Bytes = Arc<[u8]>;

/// One send command, owning its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cmd {
    Subvol {
        path: Bytes,
        uuid: Uuid,
        ctransid: u64,
    },
    Snapshot {
        path: Bytes,
        uuid: Uuid,
        ctransid: u64,
        clone_uuid: Uuid,
        clone_ctransid: u64,
    },
    Mkfile {
        path: Bytes,
        ino: u64,
    },
    Mkdir {
        path: Bytes,
        ino: u64,
    },
    Mknod {
        path: Bytes,
        ino: u64,
        rdev: u64,
        mode: u64,
    },
    Mkfifo {
        path: Bytes,
        ino: u64,
        rdev: u64,
        mode: u64,
    },
    Mksock {
        path: Bytes,
        ino: u64,
        rdev: u64,
        mode: u64,
    },
    Symlink {
        path: Bytes,
        ino: u64,
        target: Vec<u8>,
    },
    Rename {
        from: Bytes,
        to: Bytes,
    },
    Link {
        path: Bytes,
        target: Bytes,
    },
    Unlink {
        path: Bytes,
    },
    Rmdir {
        path: Bytes,
    },
    SetXattr {
        path: Bytes,
        name: Vec<u8>,
        data: Vec<u8>,
    },
    RemoveXattr {
        path: Bytes,
        name: Vec<u8>,
    },
    /// File data from `offset`; the writer cuts it into WRITE commands of
    /// the protocol's chunk size, counted from `offset`.
    Write {
        path: Bytes,
        offset: u64,
        data: Vec<u8>,
        /// The crc32c of each whole sector of `data` from its start, as
        /// the read checked them; possibly none (see
        /// `btrfs_disk::Filesystem::read_extent_piece`).
        sums: Vec<u32>,
    },
    Clone {
        offset: u64,
        len: u64,
        path: Bytes,
        clone_uuid: Uuid,
        clone_ctransid: u64,
        clone_path: Bytes,
        clone_offset: u64,
    },
    Truncate {
        path: Bytes,
        size: u64,
    },
    Chmod {
        path: Bytes,
        mode: u64,
    },
    Chown {
        path: Bytes,
        uid: u64,
        gid: u64,
    },
    Utimes {
        path: Bytes,
        atime: Timespec,
        mtime: Timespec,
        ctime: Timespec,
        /// Sent from protocol v2 on.
        otime: Option<Timespec>,
    },
    /// A changed range, sent instead of its data (`--no-data`).
    UpdateExtent {
        path: Bytes,
        offset: u64,
        len: u64,
    },
    /// fallocate(2) of `[offset, offset + len)` with `mode` (v2: holes).
    Fallocate {
        path: Bytes,
        mode: u32,
        offset: u64,
        len: u64,
    },
    /// The raw btrfs inode flags (v2).
    Fileattr {
        path: Bytes,
        attr: u64,
    },
    /// An extent's bytes as stored (v2 `--compressed-data`).
    EncodedWrite {
        path: Bytes,
        offset: u64,
        unencoded_file_len: u64,
        unencoded_len: u64,
        unencoded_offset: u64,
        compression: u32,
        /// None for inline extents, as the kernel omits it there.
        encryption: Option<u32>,
        data: Vec<u8>,
    },
    /// fs-verity from the file's descriptor (v3).
    EnableVerity {
        path: Bytes,
        algorithm: u8,
        block_size: u32,
        salt: Vec<u8>,
        sig: Vec<u8>,
    },
    End,
    /// A WRITE or ENCODED_WRITE whose data was not read (a dry run, or
    /// commands a resumed send skips): `cmd` holds no data, `len` is how
    /// long it is.
    Unread {
        cmd: Box<Cmd>,
        len: u64,
    },
    /// A WRITE whose data is being read on another thread.
    Ahead(Arc<Pending>),
}

impl Cmd {
    /// The wire command; for [`Cmd::Write`] one WRITE of `data[range]`.
    pub(crate) fn as_command(&self) -> Command<'_> {
        match self {
            Cmd::Subvol {
                path,
                uuid,
                ctransid,
            } => Command::Subvol {
                path,
                uuid: *uuid,
                ctransid: *ctransid,
            },
            Cmd::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => Command::Snapshot {
                path,
                uuid: *uuid,
                ctransid: *ctransid,
                clone_uuid: *clone_uuid,
                clone_ctransid: *clone_ctransid,
            },
            Cmd::Mkfile { path, ino } => Command::Mkfile { path, ino: *ino },
            Cmd::Mkdir { path, ino } => Command::Mkdir { path, ino: *ino },
            Cmd::Mknod {
                path,
                ino,
                rdev,
                mode,
            } => Command::Mknod {
                path,
                ino: *ino,
                rdev: *rdev,
                mode: *mode,
            },
            Cmd::Mkfifo {
                path,
                ino,
                rdev,
                mode,
            } => Command::Mkfifo {
                path,
                ino: *ino,
                rdev: Some(*rdev),
                mode: Some(*mode),
            },
            Cmd::Mksock {
                path,
                ino,
                rdev,
                mode,
            } => Command::Mksock {
                path,
                ino: *ino,
                rdev: Some(*rdev),
                mode: Some(*mode),
            },
            Cmd::Symlink { path, ino, target } => Command::Symlink {
                path,
                ino: *ino,
                target,
            },
            Cmd::Rename { from, to } => Command::Rename { from, to },
            Cmd::Link { path, target } => Command::Link { path, target },
            Cmd::Unlink { path } => Command::Unlink { path },
            Cmd::Rmdir { path } => Command::Rmdir { path },
            Cmd::SetXattr { path, name, data } => Command::SetXattr { path, name, data },
            Cmd::RemoveXattr { path, name } => Command::RemoveXattr { path, name },
            Cmd::Write {
                path, offset, data, ..
            } => Command::Write {
                path,
                offset: *offset,
                data,
            },
            Cmd::Clone {
                offset,
                len,
                path,
                clone_uuid,
                clone_ctransid,
                clone_path,
                clone_offset,
            } => Command::Clone {
                offset: *offset,
                len: *len,
                path,
                clone_uuid: *clone_uuid,
                clone_ctransid: *clone_ctransid,
                clone_path,
                clone_offset: *clone_offset,
            },
            Cmd::Truncate { path, size } => Command::Truncate { path, size: *size },
            Cmd::Chmod { path, mode } => Command::Chmod { path, mode: *mode },
            Cmd::Chown { path, uid, gid } => Command::Chown {
                path,
                uid: *uid,
                gid: *gid,
            },
            Cmd::Utimes {
                path,
                atime,
                mtime,
                ctime,
                otime,
            } => Command::Utimes {
                path,
                atime: *atime,
                mtime: *mtime,
                ctime: *ctime,
                otime: *otime,
            },
            Cmd::UpdateExtent { path, offset, len } => Command::UpdateExtent {
                path,
                offset: *offset,
                len: *len,
            },
            Cmd::Fallocate {
                path,
                mode,
                offset,
                len,
            } => Command::Fallocate {
                path,
                mode: *mode,
                offset: *offset,
                len: *len,
            },
            Cmd::Fileattr { path, attr } => Command::Fileattr { path, attr: *attr },
            Cmd::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                unencoded_len,
                unencoded_offset,
                compression,
                encryption,
                data,
            } => Command::EncodedWrite {
                path,
                offset: *offset,
                unencoded_file_len: *unencoded_file_len,
                unencoded_len: *unencoded_len,
                unencoded_offset: *unencoded_offset,
                compression: Some(*compression),
                encryption: *encryption,
                data,
            },
            Cmd::EnableVerity {
                path,
                algorithm,
                block_size,
                salt,
                sig,
            } => Command::EnableVerity {
                path,
                algorithm: *algorithm,
                block_size: *block_size,
                salt,
                sig,
            },
            Cmd::End => Command::End {},
            Cmd::Unread { cmd, .. } => cmd.as_command(),
            Cmd::Ahead(p) => Command::Write {
                path: &p.path,
                offset: p.offset,
                data: &[],
            },
        }
    }

    /// The path the command acts on, for error messages.
    pub(crate) fn path(&self) -> &[u8] {
        self.as_command()
            .paths()
            .find(|(role, _)| *role == PathRole::Path)
            .map_or(&[], |(_, p)| p)
    }
}

/// Converts an on-disk timestamp to the stream's.
pub(crate) fn ts(t: btrfs_disk::items::Timespec) -> Timespec {
    Timespec {
        sec: t.sec,
        nsec: t.nsec,
    }
}
