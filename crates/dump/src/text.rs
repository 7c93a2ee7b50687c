//! The `btrfs receive --dump` text format of current btrfs-progs.
//!
//! Each line is the operation name padded to 16 columns, the escaped full
//! path, and for operations with fields, padding to 32 columns (at least one
//! space) and `key=value` fields. Paths are joined to `./<subvol>` the way
//! btrfs-progs' `path_cat_out` joins them.

use std::io::{self, Write};

use btrfs_stream::{Command, Position, Timespec};

use crate::escape::{c_str, escape_into};
use crate::{Sink, SinkError};

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
}

impl<W: Write> TextDump<W> {
    /// A dumper writing to `out`.
    pub fn new(out: W) -> Self {
        TextDump {
            out,
            root: b".".to_vec(),
            subvol: b".".to_vec(),
            line: Vec::with_capacity(512),
        }
    }

    /// Returns the output writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Joins two paths as btrfs-progs' `path_cat_out`: one trailing '/' of each
/// part is dropped and a single '/' put between them.
fn path_cat(p1: &[u8], p2: &[u8]) -> Result<Vec<u8>, SinkError> {
    let (p1, p2) = (c_str(p1), c_str(p2));
    if p1.len() + p2.len() + 2 >= PATH_MAX {
        let shown = String::from_utf8_lossy(&p2[..p2.len().min(64)]).into_owned();
        return Err(SinkError::Format(format!("path too long: {shown}...")));
    }
    let strip = |p: &'_ [u8]| -> usize { p.len() - usize::from(p.last() == Some(&b'/')) };
    let mut out = Vec::with_capacity(p1.len() + p2.len() + 1);
    out.extend_from_slice(&p1[..strip(p1)]);
    out.push(b'/');
    out.extend_from_slice(&p2[..strip(p2)]);
    Ok(out)
}

/// Builds the fields part of one line.
struct Fields<'l>(&'l mut Vec<u8>);

impl Fields<'_> {
    fn raw(&mut self, s: &str) -> &mut Self {
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn num(&mut self, key: &str, v: impl std::fmt::Display) -> &mut Self {
        let _ = write!(self.0, "{key}={v}");
        self
    }
    fn esc(&mut self, key: &str, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(key.as_bytes());
        self.0.push(b'=');
        escape_into(self.0, c_str(v));
        self
    }
    fn time(&mut self, key: &str, t: Timespec) -> Result<&mut Self, SinkError> {
        self.0.extend_from_slice(key.as_bytes());
        self.0.push(b'=');
        crate::time::format_local(self.0, t.sec).ok_or_else(|| {
            SinkError::Format(format!(
                "failed to convert time {}.{:09} to local time",
                t.sec, t.nsec
            ))
        })?;
        Ok(self)
    }
}

impl<W: Write> TextDump<W> {
    /// Starts a line: name padded to 16 columns, then the escaped path.
    /// Returns the escaped path length.
    fn head(&mut self, op: &str, path: &[u8]) -> usize {
        self.line.clear();
        let _ = write!(self.line, "{op:<16}");
        escape_into(&mut self.line, path)
    }

    fn pad(&mut self, path_len: usize) {
        let n = 32usize.saturating_sub(path_len).max(1);
        self.line.extend(std::iter::repeat_n(b' ', n));
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
        fields: impl FnOnce(&mut Fields<'_>, &[u8]) -> Result<(), SinkError>,
    ) -> Result<(), SinkError> {
        let full = path_cat(&self.subvol, path)?;
        let n = self.head(op, &full);
        self.pad(n);
        let subvol = std::mem::take(&mut self.subvol);
        let res = fields(&mut Fields(&mut self.line), &subvol);
        self.subvol = subvol;
        res?;
        Ok(self.emit()?)
    }

    /// One line with no fields.
    fn bare(&mut self, op: &str, path: &[u8]) -> Result<(), SinkError> {
        let full = path_cat(&self.subvol, path)?;
        self.head(op, &full);
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
            } => {
                self.subvol = path_cat(&self.root, path)?;
                let full = self.subvol.clone();
                let n = self.head(op, &full);
                self.pad(n);
                let _ = write!(self.line, "uuid={uuid} transid={ctransid}");
                self.emit()?;
            }
            Command::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => {
                self.subvol = path_cat(&self.root, path)?;
                let full = self.subvol.clone();
                let n = self.head(op, &full);
                self.pad(n);
                let _ = write!(
                    self.line,
                    "uuid={uuid} transid={ctransid} parent_uuid={clone_uuid} parent_transid={clone_ctransid}"
                );
                self.emit()?;
            }
            Command::Mkfile { path, .. }
            | Command::Mkdir { path, .. }
            | Command::Mkfifo { path, .. }
            | Command::Mksock { path, .. }
            | Command::Unlink { path }
            | Command::Rmdir { path } => self.bare(op, path)?,
            Command::Mknod {
                path, mode, rdev, ..
            } => self.line(op, path, |f, _| {
                let _ = write!(f.0, "mode={mode:o} dev=0x{rdev:x}");
                Ok(())
            })?,
            Command::Symlink { path, target, .. } => self.line(op, path, |f, _| {
                f.esc("dest", target);
                Ok(())
            })?,
            Command::Rename { from, to } => self.line(op, from, |f, subvol| {
                f.esc("dest", &path_cat(subvol, to)?);
                Ok(())
            })?,
            Command::Link { path, target } => self.line(op, path, |f, _| {
                f.esc("dest", target);
                Ok(())
            })?,
            Command::SetXattr { path, name, data } => self.line(op, path, |f, _| {
                f.esc("name", name).raw(" ");
                escape_into(f.0, data);
                f.raw(" ").num("len", data.len());
                Ok(())
            })?,
            Command::RemoveXattr { path, name } => self.line(op, path, |f, _| {
                f.esc("name", name);
                Ok(())
            })?,
            Command::Write { path, offset, data } => self.line(op, path, |f, _| {
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
            } => self.line(op, path, |f, subvol| {
                f.num("offset", offset).raw(" ").num("len", len).raw(" ");
                f.esc("from", &path_cat(subvol, clone_path)?);
                f.raw(" ").num("clone_offset", clone_offset);
                Ok(())
            })?,
            Command::Truncate { path, size } => self.line(op, path, |f, _| {
                f.num("size", size);
                Ok(())
            })?,
            Command::Chmod { path, mode } => self.line(op, path, |f, _| {
                let _ = write!(f.0, "mode={mode:o}");
                Ok(())
            })?,
            Command::Chown { path, uid, gid } => self.line(op, path, |f, _| {
                f.num("gid", gid).raw(" ").num("uid", uid);
                Ok(())
            })?,
            Command::Utimes {
                path,
                atime,
                mtime,
                ctime,
                ..
            } => self.line(op, path, |f, _| {
                f.time("atime", atime)?.raw(" ");
                f.time("mtime", mtime)?.raw(" ");
                f.time("ctime", ctime)?;
                Ok(())
            })?,
            Command::End {} => {}
            Command::UpdateExtent { path, offset, len } => self.line(op, path, |f, _| {
                f.num("offset", offset).raw(" ").num("len", len);
                Ok(())
            })?,
            Command::Fallocate {
                path,
                mode,
                offset,
                len,
            } => self.line(op, path, |f, _| {
                f.num("mode", mode as i32).raw(" ");
                f.num("offset", offset).raw(" ").num("len", len);
                Ok(())
            })?,
            Command::Fileattr { path, attr } => self.line(op, path, |f, _| {
                // btrfs-progs prints this with "0x%llu": decimal after "0x".
                f.num("fileattr", format_args!("0x{attr}"));
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
            } => self.line(op, path, |f, _| {
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
            } => self.line(op, path, |f, _| {
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
