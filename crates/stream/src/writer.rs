//! Encoder: commands to bytes for a chosen protocol version.

use std::io::Write;

use crate::command::{Command, Encoder};
use crate::error::WriteError;
use crate::header::{StreamHeader, MAX_VERSION};
use crate::{crc, COMMAND_HEADER_LEN};

/// Largest encoded command, header included, that `version` allows.
///
/// v1 receivers use a 64 KiB buffer. From v2 on the kernel's buffer is
/// 16 KiB plus the 128 KiB largest compressed extent.
pub fn max_command_len(version: u32) -> usize {
    if version <= 1 {
        64 << 10
    } else {
        (16 << 10) + (128 << 10)
    }
}

/// Appends `cmd` encoded for protocol `version` to `out`, CRC included.
///
/// On error `out` is left as it was.
pub fn encode_command(
    cmd: &Command<'_>,
    version: u32,
    out: &mut Vec<u8>,
) -> Result<(), WriteError> {
    if !(1..=MAX_VERSION).contains(&version) {
        return Err(WriteError::UnsupportedVersion(version));
    }
    let kind = cmd.kind();
    if kind.since() > version {
        return Err(WriteError::NotInVersion { cmd: kind, version });
    }
    let start = out.len();
    out.extend_from_slice(&[0u8; COMMAND_HEADER_LEN]);
    let attrs = cmd.encode_attrs(&mut Encoder { out, version });
    let total = out.len() - start;
    let limit = max_command_len(version);
    let res = match attrs {
        Ok(()) if total > limit => Err(WriteError::TooLarge {
            cmd: kind,
            len: total,
            limit,
            version,
        }),
        other => other,
    };
    if let Err(e) = res {
        out.truncate(start);
        return Err(e);
    }
    let payload_len = (total - COMMAND_HEADER_LEN) as u32;
    let mut header = [0u8; COMMAND_HEADER_LEN];
    header[..4].copy_from_slice(&payload_len.to_le_bytes());
    header[4..6].copy_from_slice(&(kind as u16).to_le_bytes());
    let crc = crc::command_crc(&header, &out[start + COMMAND_HEADER_LEN..]);
    header[6..].copy_from_slice(&crc.to_le_bytes());
    out[start..start + COMMAND_HEADER_LEN].copy_from_slice(&header);
    Ok(())
}

/// Writes one or more concatenated streams to `W`.
pub struct Writer<W> {
    inner: W,
    version: Option<u32>,
    buf: Vec<u8>,
    written: u64,
}

impl<W: Write> Writer<W> {
    /// A writer with no stream started yet.
    pub fn new(inner: W) -> Self {
        Writer {
            inner,
            version: None,
            buf: Vec::new(),
            written: 0,
        }
    }

    /// Writes a stream header for `version`; later commands use that version.
    pub fn start_stream(&mut self, version: u32) -> Result<(), WriteError> {
        if !(1..=MAX_VERSION).contains(&version) {
            return Err(WriteError::UnsupportedVersion(version));
        }
        self.inner.write_all(&StreamHeader { version }.to_bytes())?;
        self.written += crate::STREAM_HEADER_LEN as u64;
        self.version = Some(version);
        Ok(())
    }

    /// Encodes and writes one command.
    pub fn write_command(&mut self, cmd: &Command<'_>) -> Result<(), WriteError> {
        let version = self.version.ok_or(WriteError::NoStream)?;
        self.buf.clear();
        encode_command(cmd, version, &mut self.buf)?;
        self.inner.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        Ok(())
    }

    /// Protocol version of the current stream.
    pub fn version(&self) -> Option<u32> {
        self.version
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.inner.flush()?;
        Ok(())
    }

    /// Returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}
