//! Reading byte ranges of cataloged stream files: a plain file is read at
//! the range (pread); a zstd-compressed one is decompressed from its start,
//! forward only. The data commands in a range are framed and CRC-checked
//! here.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use btrfs_stream::{decode_payload, Command};

use crate::error::{Error, Result};
use crate::state::Catalog;

/// Counts the bytes read from a file.
struct Counted {
    file: File,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

enum Open {
    Plain(File),
    Zstd {
        decoder: Box<rdump::Decompress<Counted>>,
        at: u64,
    },
}

/// The cataloged stream files, opened as needed.
pub struct StreamFiles<'c> {
    cat: &'c Catalog,
    open: HashMap<i64, (PathBuf, Open)>,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<'c> StreamFiles<'c> {
    /// Nothing opened yet.
    pub fn new(cat: &'c Catalog) -> Self {
        StreamFiles {
            cat,
            open: HashMap::new(),
            read: Default::default(),
        }
    }

    /// Bytes read from stream files so far, as stored (compressed bytes
    /// for a zstd file).
    pub fn bytes_read(&self) -> u64 {
        self.read.get()
    }

    fn open_file(&self, id: i64) -> Result<(PathBuf, Open)> {
        let (path, size, compressed) = self.cat.stream_file(id)?;
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let f = File::open(&path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        if len != size {
            return Err(Error::Restore(format!(
                "{}: {len} bytes, the catalog recorded {size}: the file changed or was cut \
                 since it was cataloged (rreceive --catalog DB --check)",
                path.display()
            )));
        }
        let open = if compressed {
            let counted = Counted {
                file: f,
                read: self.read.clone(),
            };
            let decoder = rdump::Decompress::new(counted).map_err(io)?;
            Open::Zstd {
                decoder: Box::new(decoder),
                at: 0,
            }
        } else {
            Open::Plain(f)
        };
        Ok((path, open))
    }

    /// The bytes `[start, end)` of stream file `id` (decompressed).
    pub fn read(&mut self, id: i64, start: u64, end: u64) -> Result<(PathBuf, Vec<u8>)> {
        let rewind = matches!(self.open.get(&id), Some((_, Open::Zstd { at, .. })) if *at > start);
        if rewind || !self.open.contains_key(&id) {
            let o = self.open_file(id)?;
            self.open.insert(id, o);
        }
        let Some((path, open)) = self.open.get_mut(&id) else {
            return Err(Error::Restore(format!("stream file {id} not opened")));
        };
        let len = usize::try_from(end.saturating_sub(start))
            .map_err(|_| Error::Restore("range too large".into()))?;
        let mut buf = vec![0u8; len];
        let cut = |path: &PathBuf, e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::Restore(format!(
                    "{}: ends before byte {end}: cut short since it was cataloged",
                    path.display()
                ))
            } else {
                Error::Io {
                    path: path.clone(),
                    source: e,
                }
            }
        };
        match open {
            Open::Plain(f) => {
                f.read_exact_at(&mut buf, start).map_err(|e| cut(path, e))?;
                self.read.set(self.read.get() + len as u64);
            }
            Open::Zstd { decoder, at } => {
                let skip = start - *at;
                std::io::copy(&mut decoder.by_ref().take(skip), &mut std::io::sink())
                    .map_err(|e| cut(path, e))
                    .and_then(|n| {
                        if n == skip {
                            Ok(())
                        } else {
                            Err(cut(path, std::io::ErrorKind::UnexpectedEof.into()))
                        }
                    })?;
                decoder.read_exact(&mut buf).map_err(|e| cut(path, e))?;
                *at = end;
            }
        }
        Ok((path.clone(), buf))
    }
}

/// A data command found in a range.
pub enum Data<'a> {
    /// WRITE: `data` at `offset`.
    Write {
        /// File offset.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
    /// ENCODED_WRITE, decoded: `data` at `offset`.
    Decoded {
        /// File offset.
        offset: u64,
        /// The decoded bytes for the file range.
        data: &'a [u8],
    },
}

/// Calls `f` with each data command of `buf`, the commands of a protocol
/// `version` stream starting at byte `base`; each command's CRC is checked.
/// An error names the byte offset.
pub fn data_commands(
    buf: &[u8],
    base: u64,
    version: u32,
    mut f: impl FnMut(Data<'_>) -> Result<()>,
) -> std::result::Result<Result<()>, String> {
    let mut at = 0usize;
    // Decoded extents, one after another.
    let mut scratch = Vec::new();
    while at < buf.len() {
        let off = base + at as u64;
        let Some(h) = buf.get(at..at + 10) else {
            return Err(format!("a command header cut at byte {off}"));
        };
        let mut header = [0u8; 10];
        header.copy_from_slice(h);
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let cmd = u16::from_le_bytes([h[4], h[5]]);
        let crc = u32::from_le_bytes([h[6], h[7], h[8], h[9]]);
        let Some(payload) = buf.get(at + 10..at + 10 + len) else {
            return Err(format!("the command at byte {off} runs past its range"));
        };
        if btrfs_stream::crc::command_crc(&header, payload) != crc {
            return Err(format!("CRC mismatch in the command at byte {off}"));
        }
        let c = decode_payload(version, cmd, payload)
            .map_err(|(k, _)| format!("the command at byte {off}: {k}"))?;
        let r = match c {
            Command::Write { offset, data, .. } => f(Data::Write { offset, data }),
            Command::EncodedWrite {
                offset,
                unencoded_file_len,
                unencoded_len,
                unencoded_offset,
                compression,
                encryption,
                data,
                ..
            } => {
                if encryption.unwrap_or(0) != 0 {
                    return Err(format!("the encoded write at byte {off} is encrypted"));
                }
                let data = btrfs_compress::Encoded::new(
                    compression.unwrap_or(0),
                    unencoded_len,
                    unencoded_offset,
                    unencoded_file_len,
                )
                .and_then(|x| x.decode(data, &mut scratch))
                .map_err(|e| format!("the encoded write at byte {off}: {e}"))?;
                f(Data::Decoded { offset, data })
            }
            other => {
                return Err(format!(
                    "the catalog points at a {} at byte {off}, not a data command",
                    other.kind().name()
                ))
            }
        };
        if r.is_err() {
            return Ok(r);
        }
        at += 10 + len;
    }
    Ok(Ok(()))
}
