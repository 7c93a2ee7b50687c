//! Encoder: commands to bytes for a chosen protocol version.

use std::io::Write;

use crate::command::{Command, Encoder};
use crate::error::WriteError;
use crate::header::{StreamHeader, MAX_VERSION};
use crate::{crc, COMMAND_HEADER_LEN};

/// File data at least this long is written straight from the caller's
/// buffer (see [`Writer::write_command`]).
const DIRECT_DATA: usize = 4096;

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

/// The encoded length, header included, of `head` (a command whose file
/// data is left out, see [`crate::resume::without_data`]) carrying
/// `data_len` bytes of data, as protocol `version` encodes it.
pub fn encoded_len(
    head: &Command<'_>,
    data_len: u64,
    version: u32,
    scratch: &mut Vec<u8>,
) -> Result<u64, WriteError> {
    scratch.clear();
    encode_command(head, version, scratch)?;
    let total = scratch.len() as u64 + data_len;
    let limit = max_command_len(version);
    if total > limit as u64 {
        return Err(WriteError::TooLarge {
            cmd: head.kind(),
            len: usize::try_from(total).unwrap_or(usize::MAX),
            limit,
            version,
        });
    }
    Ok(total)
}

/// Writes one or more concatenated streams to `W`.
pub struct Writer<W> {
    inner: W,
    version: Option<u32>,
    buf: Vec<u8>,
    written: u64,
    /// For [`Writer::write_command_summed`]'s last block length.
    blocks: Option<crc::BlockCrc>,
}

impl<W: Write> Writer<W> {
    /// A writer with no stream started yet.
    pub fn new(inner: W) -> Self {
        Writer {
            inner,
            version: None,
            buf: Vec::new(),
            written: 0,
            blocks: None,
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

    /// Writes the header of a resumed stream ([`crate::RESUME_MAGIC`]) for
    /// `version`; its first command should be RESUME.
    pub fn start_resumed_stream(&mut self, version: u32) -> Result<(), WriteError> {
        if !(1..=MAX_VERSION).contains(&version) {
            return Err(WriteError::UnsupportedVersion(version));
        }
        let mut h = StreamHeader { version }.to_bytes();
        h[..13].copy_from_slice(crate::RESUME_MAGIC);
        self.inner.write_all(&h)?;
        self.written += crate::STREAM_HEADER_LEN as u64;
        self.version = Some(version);
        Ok(())
    }

    /// Encodes and writes one command.
    ///
    /// File data of WRITE and ENCODED_WRITE (always their last attribute)
    /// goes to the inner writer as it is, after the rest of the command,
    /// instead of being copied into the encoding buffer first.
    pub fn write_command(&mut self, cmd: &Command<'_>) -> Result<(), WriteError> {
        self.write_command_summed(cmd, &[], 0)
    }

    /// [`Writer::write_command`] for a command whose file data's first
    /// `sums.len()` blocks of `block` bytes have the standard CRC-32C
    /// `sums` (as btrfs sums data sectors): the command's CRC takes them
    /// instead of hashing those bytes again. Blocks past the data's whole
    /// ones, and the sums of commands without file data, are not used.
    ///
    /// The caller vouches for the sums (they were checked against the
    /// bytes, as a data read checks each sector); a wrong one makes a
    /// command whose CRC is wrong.
    pub fn write_command_summed(
        &mut self,
        cmd: &Command<'_>,
        sums: &[u32],
        block: usize,
    ) -> Result<(), WriteError> {
        let version = self.version.ok_or(WriteError::NoStream)?;
        self.buf.clear();
        // The command without its data, and the data.
        let mut head = cmd.clone();
        let data = match &mut head {
            Command::Write { data, .. } | Command::EncodedWrite { data, .. }
                if data.len() >= DIRECT_DATA =>
            {
                std::mem::take(data)
            }
            _ => {
                encode_command(cmd, version, &mut self.buf)?;
                self.inner.write_all(&self.buf)?;
                self.written += self.buf.len() as u64;
                return Ok(());
            }
        };
        encode_command(&head, version, &mut self.buf)?;
        let n = self.buf.len();
        if version == 1 {
            // The empty DATA's length field ends the buffer.
            let len = u16::try_from(data.len()).map_err(|_| WriteError::AttrTooLong {
                attr: crate::Attr::Data,
                len: data.len(),
            })?;
            self.buf[n - 2..].copy_from_slice(&len.to_le_bytes());
        }
        let total = n + data.len();
        let limit = max_command_len(version);
        if total > limit {
            return Err(WriteError::TooLarge {
                cmd: cmd.kind(),
                len: total,
                limit,
                version,
            });
        }
        self.buf[..4].copy_from_slice(&((total - COMMAND_HEADER_LEN) as u32).to_le_bytes());
        let mut header = [0u8; COMMAND_HEADER_LEN];
        header[..6].copy_from_slice(&self.buf[..6]);
        let mut c = crc::update(crc::update(0, &header), &self.buf[COMMAND_HEADER_LEN..]);
        let whole = match block {
            0 => 0,
            b => sums.len().min(data.len() / b),
        };
        if whole > 0 {
            let blocks = match self.blocks.take() {
                Some(b) if b.len() == block => b,
                _ => crc::BlockCrc::new(block),
            };
            for &s in &sums[..whole] {
                c = blocks.update(c, s);
            }
            self.blocks = Some(blocks);
        }
        let c = crc::update(c, &data[whole * block..]);
        self.buf[6..COMMAND_HEADER_LEN].copy_from_slice(&c.to_le_bytes());
        self.inner.write_all(&self.buf)?;
        self.inner.write_all(data)?;
        self.written += total as u64;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream `Writer` makes of `cmd`, and the one made by encoding
    /// the whole command into one buffer.
    fn both(version: u32, cmd: &Command<'_>) -> (Result<Vec<u8>, String>, Result<Vec<u8>, String>) {
        let mut w = Writer::new(Vec::new());
        w.start_stream(version).unwrap();
        let direct = w
            .write_command(cmd)
            .map(|()| w.into_inner())
            .map_err(|e| e.to_string());
        let mut whole = StreamHeader { version }.to_bytes().to_vec();
        let copied = encode_command(cmd, version, &mut whole)
            .map(|()| whole)
            .map_err(|e| e.to_string());
        (direct, copied)
    }

    #[test]
    fn data_written_straight_gives_the_same_bytes() {
        let data: Vec<u8> = (0..140_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (version, len) in [(1, 49152), (1, 4096), (2, 131072), (2, 5000), (3, 100)] {
            let d = &data[..len];
            let write = Command::Write {
                path: b"dir/file",
                offset: 1 << 20,
                data: d,
            };
            let (a, b) = both(version, &write);
            assert_eq!(a, b, "WRITE of {len} bytes in v{version}");
            assert!(a.is_ok(), "{a:?}");
            if version >= 2 {
                let enc = Command::EncodedWrite {
                    path: b"f",
                    offset: 0,
                    unencoded_file_len: 131072,
                    unencoded_len: 131072,
                    unencoded_offset: 0,
                    compression: Some(2),
                    encryption: Some(0),
                    data: d,
                };
                let (a, b) = both(version, &enc);
                assert_eq!(a, b, "ENCODED_WRITE of {len} bytes in v{version}");
            }
        }
    }

    #[test]
    fn summed_data_gives_the_same_bytes() {
        let data: Vec<u8> = (0..140_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (version, len, block) in [
            (1, 49152, 4096),
            (1, 49000, 4096),
            (2, 131072, 4096),
            (2, 5000, 4096),
            (1, 40000, 16384),
        ] {
            let d = &data[..len];
            let sums: Vec<u32> = d.chunks_exact(block).map(crc32c::crc32c).collect();
            for take in [0, 1, sums.len()] {
                let write = Command::Write {
                    path: b"dir/file",
                    offset: 4096,
                    data: d,
                };
                let mut w = Writer::new(Vec::new());
                w.start_stream(version).unwrap();
                w.write_command_summed(&write, &sums[..take], block)
                    .unwrap();
                let (plain, _) = both(version, &write);
                assert_eq!(
                    Ok(w.into_inner()),
                    plain,
                    "{len} bytes, {take} sums of {block}"
                );
            }
        }
    }

    #[test]
    fn data_too_large_is_refused_either_way() {
        // v1: DATA's u16 length; v2: the 144 KiB command.
        for (version, len) in [(1, 70_000), (2, 150_000)] {
            let data = vec![1u8; len];
            let write = Command::Write {
                path: b"f",
                offset: 0,
                data: &data,
            };
            let (a, b) = both(version, &write);
            assert_eq!(a, b, "{len} bytes in v{version}");
            assert!(a.is_err(), "{len} bytes in v{version}");
        }
    }
}
