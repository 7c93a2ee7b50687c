//! One JSON object per command per line.
//!
//! Every field is present. Byte strings (paths, names, xattr values) are a
//! JSON string when they are valid UTF-8, and otherwise an object
//! `{"hex": "<lowercase hex of the raw bytes>"}`, so no byte is lost. WRITE
//! and ENCODED_WRITE data appear only as `data_len`.

use std::io::{self, Write};

use btrfs_stream::{Command, Position, Timespec};
use serde_json::{json, Map, Value};

use crate::{Sink, SinkError};

/// Lossless JSON form of a byte string.
pub fn bytes_value(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => {
            let mut hex = String::with_capacity(b.len() * 2);
            for byte in b {
                hex.push_str(&format!("{byte:02x}"));
            }
            json!({ "hex": hex })
        }
    }
}

fn time_value(t: Timespec) -> Value {
    json!({ "sec": t.sec, "nsec": t.nsec })
}

/// Writes commands as JSON lines.
pub struct JsonDump<W: Write> {
    out: W,
}

impl<W: Write> JsonDump<W> {
    /// A dumper writing to `out`.
    pub fn new(out: W) -> Self {
        JsonDump { out }
    }
}

/// The JSON object for one command, position included.
pub fn command_value(cmd: &Command<'_>, pos: Position) -> Value {
    let mut m = Map::new();
    m.insert("index".into(), pos.index.into());
    m.insert("offset".into(), pos.offset.into());
    m.insert("version".into(), pos.version.into());
    m.insert("command".into(), cmd.kind().dump_name().into());
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_owned(), v);
    };
    let b = bytes_value;
    let opt = |v: Option<u64>| v.map_or(Value::Null, Value::from);
    match *cmd {
        Command::Subvol {
            path,
            uuid,
            ctransid,
        } => {
            put("path", b(path));
            put("uuid", uuid.to_string().into());
            put("ctransid", ctransid.into());
        }
        Command::Snapshot {
            path,
            uuid,
            ctransid,
            clone_uuid,
            clone_ctransid,
        } => {
            put("path", b(path));
            put("uuid", uuid.to_string().into());
            put("ctransid", ctransid.into());
            put("clone_uuid", clone_uuid.to_string().into());
            put("clone_ctransid", clone_ctransid.into());
        }
        Command::Mkfile { path, ino } | Command::Mkdir { path, ino } => {
            put("path", b(path));
            put("ino", ino.into());
        }
        Command::Mknod {
            path,
            ino,
            rdev,
            mode,
        } => {
            put("path", b(path));
            put("ino", ino.into());
            put("rdev", rdev.into());
            put("mode", mode.into());
        }
        Command::Mkfifo {
            path,
            ino,
            rdev,
            mode,
        }
        | Command::Mksock {
            path,
            ino,
            rdev,
            mode,
        } => {
            put("path", b(path));
            put("ino", ino.into());
            put("rdev", opt(rdev));
            put("mode", opt(mode));
        }
        Command::Symlink { path, ino, target } => {
            put("path", b(path));
            put("ino", ino.into());
            put("target", b(target));
        }
        Command::Rename { from, to } => {
            put("from", b(from));
            put("to", b(to));
        }
        Command::Link { path, target } => {
            put("path", b(path));
            put("target", b(target));
        }
        Command::Unlink { path } | Command::Rmdir { path } => put("path", b(path)),
        Command::SetXattr { path, name, data } => {
            put("path", b(path));
            put("name", b(name));
            put("data", b(data));
            put("data_len", data.len().into());
        }
        Command::RemoveXattr { path, name } => {
            put("path", b(path));
            put("name", b(name));
        }
        Command::Write { path, offset, data } => {
            put("path", b(path));
            put("offset", offset.into());
            put("data_len", data.len().into());
        }
        Command::Clone {
            offset,
            len,
            path,
            clone_uuid,
            clone_ctransid,
            clone_path,
            clone_offset,
        } => {
            put("path", b(path));
            put("offset", offset.into());
            put("len", len.into());
            put("clone_uuid", clone_uuid.to_string().into());
            put("clone_ctransid", clone_ctransid.into());
            put("clone_path", b(clone_path));
            put("clone_offset", clone_offset.into());
        }
        Command::Truncate { path, size } => {
            put("path", b(path));
            put("size", size.into());
        }
        Command::Chmod { path, mode } => {
            put("path", b(path));
            put("mode", mode.into());
        }
        Command::Chown { path, uid, gid } => {
            put("path", b(path));
            put("uid", uid.into());
            put("gid", gid.into());
        }
        Command::Utimes {
            path,
            atime,
            mtime,
            ctime,
            otime,
        } => {
            put("path", b(path));
            put("atime", time_value(atime));
            put("mtime", time_value(mtime));
            put("ctime", time_value(ctime));
            put("otime", otime.map_or(Value::Null, time_value));
        }
        Command::End {} => {}
        Command::UpdateExtent { path, offset, len } => {
            put("path", b(path));
            put("offset", offset.into());
            put("len", len.into());
        }
        Command::Fallocate {
            path,
            mode,
            offset,
            len,
        } => {
            put("path", b(path));
            put("mode", mode.into());
            put("offset", offset.into());
            put("len", len.into());
        }
        Command::Fileattr { path, attr } => {
            put("path", b(path));
            put("fileattr", attr.into());
        }
        Command::EncodedWrite {
            path,
            offset,
            unencoded_file_len,
            unencoded_len,
            unencoded_offset,
            compression,
            encryption,
            data,
        } => {
            put("path", b(path));
            put("offset", offset.into());
            put("unencoded_file_len", unencoded_file_len.into());
            put("unencoded_len", unencoded_len.into());
            put("unencoded_offset", unencoded_offset.into());
            put("compression", compression.unwrap_or(0).into());
            put("encryption", encryption.unwrap_or(0).into());
            put("data_len", data.len().into());
        }
        Command::EnableVerity {
            path,
            algorithm,
            block_size,
            salt,
            sig,
        } => {
            put("path", b(path));
            put("algorithm", algorithm.into());
            put("block_size", block_size.into());
            put("salt", b(salt));
            put("sig", b(sig));
        }
    }
    Value::Object(m)
}

impl<W: Write> Sink for JsonDump<W> {
    fn command(&mut self, cmd: &Command<'_>, pos: Position) -> Result<(), SinkError> {
        serde_json::to_writer(&mut self.out, &command_value(cmd, pos)).map_err(io::Error::from)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
