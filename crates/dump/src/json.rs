//! One JSON object per command per line.
//!
//! Every field is present, named as in [`btrfs_stream::Command`]; optional
//! attributes the stream lacks are `null`. Byte strings (paths, names, xattr values) are a
//! JSON string when they are valid UTF-8, and otherwise an object
//! `{"hex": "<lowercase hex of the raw bytes>"}`, so no byte is lost. WRITE
//! and ENCODED_WRITE data appear only as `data_len`.

use std::io::{self, Write};

use btrfs_stream::{Attr, Command, FieldValue, Position, Timespec};
use btrfs_text::json::bytes_value;
use serde_json::{json, Map, Value};

use crate::{Sink, SinkError};

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
    m.insert("stream_offset".into(), pos.offset.into());
    m.insert("version".into(), pos.version.into());
    m.insert("command".into(), cmd.kind().dump_name().into());
    cmd.for_each_field(|name, attr, value| {
        let (key, v) = match value {
            // File data is reported by size only.
            FieldValue::Bytes(b) if attr == Attr::Data => ("data_len", b.len().into()),
            FieldValue::Bytes(b) => (name, bytes_value(b)),
            FieldValue::U64(n) => (name, n.into()),
            FieldValue::U32(n) => (name, n.into()),
            FieldValue::U8(n) => (name, n.into()),
            FieldValue::Uuid(u) => (name, u.to_string().into()),
            FieldValue::Time(t) => (name, time_value(t)),
            FieldValue::Absent => (name, Value::Null),
        };
        let clash = m.insert(key.to_owned(), v);
        debug_assert!(clash.is_none(), "JSON key {key} used twice");
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_gets_its_own_key() {
        let pos = Position {
            index: 7,
            offset: 1234,
            len: 60,
            version: 2,
        };
        let cmd = Command::Write {
            path: b"a\xff",
            offset: 4096,
            data: &[1, 2, 3],
        };
        let v = command_value(&cmd, pos);
        assert_eq!(v["stream_offset"], 1234);
        assert_eq!(v["offset"], 4096);
        assert_eq!(v["data_len"], 3);
        assert_eq!(v["path"]["hex"], "61ff");
        assert_eq!(v.as_object().unwrap().len(), 7);
    }
}
