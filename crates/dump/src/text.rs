//! The `btrfs receive --dump` text format of current btrfs-progs.
//!
//! Each line is the operation name padded to 16 columns, the escaped full
//! path, and for operations with fields, padding to 32 columns (at least one
//! space) and `key=value` fields. Paths are joined to `./<subvol>` the way
//! btrfs-progs' `path_cat_out` joins them.

use std::io::{self, Write};

use btrfs_stream::{Command, Position, Timespec};

use crate::time::LocalTime;
use crate::{Sink, SinkError};
use btrfs_text::escape::{c_str, escape_into};

/// btrfs-progs refuses joined paths of PATH_MAX or more.
const PATH_MAX: usize = 4096;

/// Writes commands in `btrfs receive --dump` format.
pub struct TextDump<W: Write> {
    out: W,
    /// The receive root, always ".".
    root: Vec<u8>,
    /// `./<subvol>` of the current stream.
    subvol: Vec<u8>,
    line: Vec<u8>,
    time: LocalTime,
}

impl<W: Write> TextDump<W> {
    /// A dumper writing to `out`, with times in the zone `TZ` names.
    pub fn new(out: W) -> Self {
        TextDump {
            out,
            root: b".".to_vec(),
            subvol: b".".to_vec(),
            line: Vec::with_capacity(512),
            time: LocalTime::from_env(),
        }
    }

    /// Returns the output writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// btrfs-progs' `path_cat_out` check: the joined parts must stay below PATH_MAX.
fn check_len(p1: &[u8], p2: &[u8]) -> Result<(), SinkError> {
    if p1.len() + p2.len() + 2 >= PATH_MAX {
        let shown = String::from_utf8_lossy(&p2[..p2.len().min(64)]).into_owned();
        return Err(SinkError::Format(format!("path too long: {shown}...")));
    }
    Ok(())
}

/// `p` without one trailing '/'.
fn strip_slash(p: &[u8]) -> &[u8] {
    p.strip_suffix(b"/").unwrap_or(p)
}

/// Joins two paths as btrfs-progs' `path_cat_out`: one trailing '/' of each
/// part is dropped and a single '/' put between them.
fn path_cat(p1: &[u8], p2: &[u8]) -> Result<Vec<u8>, SinkError> {
    let (p1, p2) = (c_str(p1), c_str(p2));
    check_len(p1, p2)?;
    let mut out = Vec::with_capacity(p1.len() + p2.len() + 1);
    out.extend_from_slice(strip_slash(p1));
    out.push(b'/');
    out.extend_from_slice(strip_slash(p2));
    Ok(out)
}

/// Appends the escaped `path_cat(p1, p2)`; returns its escaped length.
fn escape_cat(out: &mut Vec<u8>, p1: &[u8], p2: &[u8]) -> Result<usize, SinkError> {
    let (p1, p2) = (c_str(p1), c_str(p2));
    check_len(p1, p2)?;
    let n = escape_into(out, strip_slash(p1));
    out.push(b'/');
    Ok(n + 1 + escape_into(out, strip_slash(p2)))
}

const SPACES: [u8; 32] = [b' '; 32];

/// Builds the fields part of one line.
struct Fields<'l> {
    line: &'l mut Vec<u8>,
    time: &'l mut LocalTime,
    subvol: &'l [u8],
}

impl Fields<'_> {
    fn raw(&mut self, s: &str) -> &mut Self {
        self.line.extend_from_slice(s.as_bytes());
        self
    }
    fn key(&mut self, key: &str) -> &mut Self {
        self.line.extend_from_slice(key.as_bytes());
        self.line.push(b'=');
        self
    }
    fn num(&mut self, key: &str, v: impl itoa::Integer) -> &mut Self {
        self.key(key);
        self.line
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        self
    }
    fn esc(&mut self, key: &str, v: &[u8]) -> &mut Self {
        self.key(key);
        escape_into(self.line, c_str(v));
        self
    }
    /// `key=<escaped ./subvol/path>`.
    fn esc_in_subvol(&mut self, key: &str, path: &[u8]) -> Result<&mut Self, SinkError> {
        self.key(key);
        escape_cat(self.line, self.subvol, path)?;
        Ok(self)
    }
    fn time(&mut self, key: &str, t: Timespec) -> Result<&mut Self, SinkError> {
        self.key(key);
        self.time.format(self.line, t.sec).ok_or_else(|| {
            SinkError::Format(format!(
                "failed to convert time {}.{:09} to local time",
                t.sec, t.nsec
            ))
        })?;
        Ok(self)
    }
}

impl<W: Write> TextDump<W> {
    /// Starts a line: the name padded to 16 columns, then the escaped path
    /// inside `base`. Returns the escaped path length.
    fn head(&mut self, op: &str, base: &[u8], path: &[u8]) -> Result<usize, SinkError> {
        self.line.clear();
        self.line.extend_from_slice(op.as_bytes());
        self.line
            .extend_from_slice(&SPACES[..16usize.saturating_sub(op.len())]);
        escape_cat(&mut self.line, base, path)
    }

    fn pad(&mut self, path_len: usize) {
        let n = 32usize.saturating_sub(path_len).max(1);
        self.line.extend_from_slice(&SPACES[..n]);
    }

    fn emit(&mut self) -> io::Result<()> {
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    /// One line for `path` inside the current subvolume, with fields.
    fn line(
        &mut self,
        op: &str,
        path: &[u8],
        fields: impl FnOnce(&mut Fields<'_>) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        let subvol = std::mem::take(&mut self.subvol);
        let res = self.line_in(op, &subvol, path, fields);
        self.subvol = subvol;
        res
    }

    fn line_in(
        &mut self,
        op: &str,
        subvol: &[u8],
        path: &[u8],
        fields: impl FnOnce(&mut Fields<'_>) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        let n = self.head(op, subvol, path)?;
        self.pad(n);
        fields(&mut Fields {
            line: &mut self.line,
            time: &mut self.time,
            subvol,
        })?;
        Ok(self.emit()?)
    }

    /// One line with no fields.
    fn bare(&mut self, op: &str, path: &[u8]) -> Result<(), SinkError> {
        let subvol = std::mem::take(&mut self.subvol);
        let res = self.head(op, &subvol, path);
        self.subvol = subvol;
        res?;
        Ok(self.emit()?)
    }

    /// A subvol or snapshot line: sets the current subvolume first.
    fn subvol_line(
        &mut self,
        op: &str,
        path: &[u8],
        fields: impl FnOnce(&mut Fields<'_>) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        self.subvol = path_cat(&self.root, path)?;
        let full = std::mem::take(&mut self.subvol);
        self.line.clear();
        self.line.extend_from_slice(op.as_bytes());
        self.line
            .extend_from_slice(&SPACES[..16usize.saturating_sub(op.len())]);
        let n = escape_into(&mut self.line, &full);
        self.pad(n);
        let res = fields(&mut Fields {
            line: &mut self.line,
            time: &mut self.time,
            subvol: &full,
        });
        self.subvol = full;
        res?;
        Ok(self.emit()?)
    }
}

impl<W: Write> Sink for TextDump<W> {
    fn command(&mut self, cmd: &Command<'_>, _pos: Position) -> Result<(), SinkError> {
        let op = cmd.kind().dump_name();
        match *cmd {
            Command::Subvol {
                path,
                uuid,
                ctransid,
            } => self.subvol_line(op, path, |f| {
                f.key("uuid");
                push_uuid(f.line, &uuid);
                f.raw(" ").num("transid", ctransid);
                Ok(())
            })?,
            Command::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => self.subvol_line(op, path, |f| {
                f.key("uuid");
                push_uuid(f.line, &uuid);
                f.raw(" ")
                    .num("transid", ctransid)
                    .raw(" ")
                    .key("parent_uuid");
                push_uuid(f.line, &clone_uuid);
                f.raw(" ").num("parent_transid", clone_ctransid);
                Ok(())
            })?,
            Command::Mkfile { path, .. }
            | Command::Mkdir { path, .. }
            | Command::Mkfifo { path, .. }
            | Command::Mksock { path, .. }
            | Command::Unlink { path }
            | Command::Rmdir { path } => self.bare(op, path)?,
            Command::Mknod {
                path, mode, rdev, ..
            } => self.line(op, path, |f| {
                let _ = write!(f.line, "mode={mode:o} dev=0x{rdev:x}");
                Ok(())
            })?,
            Command::Symlink { path, target, .. } => self.line(op, path, |f| {
                f.esc("dest", target);
                Ok(())
            })?,
            Command::Rename { from, to } => self.line(op, from, |f| {
                f.esc_in_subvol("dest", to)?;
                Ok(())
            })?,
            Command::Link { path, target } => self.line(op, path, |f| {
                f.esc("dest", target);
                Ok(())
            })?,
            Command::SetXattr { path, name, data } => self.line(op, path, |f| {
                f.esc("name", name).raw(" ");
                escape_into(f.line, data);
                f.raw(" ").num("len", data.len());
                Ok(())
            })?,
            Command::RemoveXattr { path, name } => self.line(op, path, |f| {
                f.esc("name", name);
                Ok(())
            })?,
            Command::Write { path, offset, data } => self.line(op, path, |f| {
                f.num("offset", offset).raw(" ").num("len", data.len());
                Ok(())
            })?,
            Command::Clone {
                offset,
                len,
                path,
                clone_path,
                clone_offset,
                ..
            } => self.line(op, path, |f| {
                // progs passes the clone length through a C int and prints it
                // with "%llu": it is truncated to 32 bits and sign-extended.
                let shown = len as i32 as i64 as u64;
                f.num("offset", offset).raw(" ").num("len", shown).raw(" ");
                f.esc_in_subvol("from", clone_path)?;
                f.raw(" ").num("clone_offset", clone_offset);
                Ok(())
            })?,
            Command::Truncate { path, size } => self.line(op, path, |f| {
                f.num("size", size);
                Ok(())
            })?,
            Command::Chmod { path, mode } => self.line(op, path, |f| {
                let _ = write!(f.line, "mode={mode:o}");
                Ok(())
            })?,
            Command::Chown { path, uid, gid } => self.line(op, path, |f| {
                f.num("gid", gid).raw(" ").num("uid", uid);
                Ok(())
            })?,
            Command::Utimes {
                path,
                atime,
                mtime,
                ctime,
                ..
            } => self.line(op, path, |f| {
                f.time("atime", atime)?.raw(" ");
                f.time("mtime", mtime)?.raw(" ");
                f.time("ctime", ctime)?;
                Ok(())
            })?,
            Command::End {} => {}
            Command::Resume {
                commands,
                offset,
                digest,
            } => self.line(op, b"", |f| {
                f.num("commands", commands).raw(" ").num("offset", offset);
                f.raw(" ").key("digest");
                push_uuid(f.line, &digest);
                Ok(())
            })?,
            Command::UpdateExtent { path, offset, len } => self.line(op, path, |f| {
                f.num("offset", offset).raw(" ").num("len", len);
                Ok(())
            })?,
            Command::Fallocate {
                path,
                mode,
                offset,
                len,
            } => self.line(op, path, |f| {
                // progs prints the mode with "%d".
                f.num("mode", mode as i32).raw(" ");
                f.num("offset", offset).raw(" ").num("len", len);
                Ok(())
            })?,
            Command::Fileattr { path, attr } => self.line(op, path, |f| {
                // btrfs-progs prints this with "0x%llu": decimal after "0x".
                f.key("fileattr").raw("0x");
                f.line
                    .extend_from_slice(itoa::Buffer::new().format(attr).as_bytes());
                Ok(())
            })?,
            Command::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                unencoded_len,
                unencoded_offset,
                compression,
                encryption,
                data,
            } => self.line(op, path, |f| {
                f.num("offset", offset)
                    .raw(" ")
                    .num("len", data.len())
                    .raw(" ");
                f.num("unencoded_file_len", unencoded_file_len).raw(" ");
                f.num("unencoded_len", unencoded_len).raw(" ");
                f.num("unencoded_offset", unencoded_offset).raw(" ");
                f.num("compression", compression.unwrap_or(0)).raw(" ");
                f.num("encryption", encryption.unwrap_or(0));
                Ok(())
            })?,
            Command::EnableVerity {
                path,
                algorithm,
                block_size,
                salt,
                sig,
            } => self.line(op, path, |f| {
                f.num("algorithm", algorithm).raw(" ");
                f.num("block_size", block_size).raw(" ");
                f.num("salt_len", salt.len()).raw(" ");
                f.num("sig_len", sig.len());
                Ok(())
            })?,
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Appends a uuid in its 36-character lowercase form.
fn push_uuid(out: &mut Vec<u8>, uuid: &btrfs_stream::Uuid) {
    let mut buf = [0u8; 36];
    out.extend_from_slice(uuid.hyphenated().encode_lower(&mut buf).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_cat_drops_one_trailing_slash_per_part() {
        assert_eq!(path_cat(b".", b"snap").unwrap(), b"./snap");
        assert_eq!(path_cat(b"./snap", b"").unwrap(), b"./snap/");
        assert_eq!(path_cat(b"./snap/", b"a/").unwrap(), b"./snap/a");
        assert!(path_cat(b".", &[b'a'; 4094]).is_err());
    }
}
