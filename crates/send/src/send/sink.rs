//! The two ends between the walk and the stream writer.
//!
//! The walk (on its own thread) pushes [`Cmd`]s into an [`Emitter`], which
//! hands them over in batches through a bounded channel; the [`Sink`] (on
//! the caller's thread) encodes them with `btrfs_stream::Writer` and writes
//! them out. Data buffers come back to the walk through a second channel,
//! so steady-state sending allocates nothing per extent. Order is the
//! walk's, so the stream is the same whatever the timing.

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender, SyncSender};

use btrfs_stream::{Command, WriteError, Writer};

use super::cmd::Cmd;
use super::SendError;
use crate::progress::Progress;

/// Commands in a batch before it is handed over.
const BATCH_COMMANDS: usize = 256;
/// Data bytes (file data, xattr values, symlink targets) in a batch before it is handed over.
const BATCH_DATA: usize = 256 << 10;
/// Data buffers at least this large go back to the walk for reuse.
const POOLED: usize = 4 << 10;
/// Batches in flight between the walk and the writer (bounds memory).
pub(crate) const CHANNEL_BATCHES: usize = 8;

/// Commands on their way to the writer, and how many inodes they finish.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) cmds: Vec<Cmd>,
    pub(crate) files: u64,
}

/// What the walk sends.
pub(crate) enum Msg {
    Batch(Batch),
    /// The walk failed; nothing follows (in particular no END).
    Failed(SendError),
}

/// The writer went away (it failed); the walk stops quietly.
#[derive(Debug)]
pub(crate) struct Hangup;

/// The walk's end of the channel.
pub(crate) struct Emitter {
    tx: SyncSender<Msg>,
    pool: Receiver<Vec<u8>>,
    batch: Batch,
    data: usize,
}

impl Emitter {
    pub(crate) fn new(tx: SyncSender<Msg>, pool: Receiver<Vec<u8>>) -> Emitter {
        Emitter {
            tx,
            pool,
            batch: Batch::default(),
            data: 0,
        }
    }

    /// Queues one command.
    pub(crate) fn push(&mut self, c: Cmd) -> Result<(), Hangup> {
        self.data += match &c {
            Cmd::Write { data, .. }
            | Cmd::SetXattr { data, .. }
            | Cmd::EncodedWrite { data, .. } => data.len(),
            Cmd::Symlink { target, .. } => target.len(),
            _ => 0,
        };
        self.batch.cmds.push(c);
        if self.batch.cmds.len() >= BATCH_COMMANDS || self.data >= BATCH_DATA {
            self.flush()?;
        }
        Ok(())
    }

    /// Counts one finished inode (for the progress display).
    pub(crate) fn inode_done(&mut self) {
        self.batch.files += 1;
    }

    /// A data buffer of `len` bytes (contents unspecified); large ones are recycled.
    pub(crate) fn buffer(&mut self, len: usize) -> Vec<u8> {
        if len < POOLED {
            return vec![0u8; len];
        }
        let mut v = self.pool.try_recv().unwrap_or_default();
        v.resize(len, 0);
        v
    }

    /// Hands the current batch over.
    pub(crate) fn flush(&mut self) -> Result<(), Hangup> {
        if self.batch.cmds.is_empty() && self.batch.files == 0 {
            return Ok(());
        }
        let b = std::mem::take(&mut self.batch);
        self.data = 0;
        self.tx.send(Msg::Batch(b)).map_err(|_| Hangup)
    }

    /// Reports a failure; what was queued before it is still written.
    pub(crate) fn fail(mut self, e: SendError) {
        if self.flush().is_ok() {
            let _ = self.tx.send(Msg::Failed(e));
        }
    }
}

/// Counts of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Commands written, END included.
    pub commands: u64,
    /// Stream bytes, header included.
    pub bytes: u64,
    /// File data bytes in WRITE commands.
    pub data_bytes: u64,
    /// Inodes sent.
    pub files: u64,
    /// TRUNCATE commands.
    pub truncates: u64,
    /// CLONE commands.
    pub clones: u64,
    /// File data bytes in CLONE commands (sent as references, not data).
    pub cloned_bytes: u64,
    /// ENCODED_WRITE commands.
    pub encoded_writes: u64,
    /// File bytes they cover (decoded).
    pub encoded_file_bytes: u64,
    /// Their data as stored (compressed).
    pub encoded_bytes: u64,
}

/// The writer's end: encodes and writes what the walk sends.
pub(crate) struct Sink<'w, W: Write> {
    pub(crate) w: &'w mut Writer<W>,
    /// Largest WRITE payload (48 KiB in v1).
    pub(crate) chunk: usize,
    pub(crate) pool: Sender<Vec<u8>>,
    pub(crate) progress: Option<&'w Progress>,
    pub(crate) stats: StreamStats,
    pub(crate) ended: bool,
}

impl<W: Write> Sink<'_, W> {
    fn put(&mut self, c: &Command<'_>, what: &Cmd) -> Result<(), SendError> {
        self.w.write_command(c).map_err(|e| match e {
            WriteError::Io(io) => SendError::Output(io),
            other => SendError::Encode {
                subvol: String::new(),
                path: String::from_utf8_lossy(what.path()).into_owned(),
                source: other,
            },
        })?;
        self.stats.commands += 1;
        Ok(())
    }

    /// Writes one batch.
    pub(crate) fn write(&mut self, b: Batch) -> Result<(), SendError> {
        // Cloned bytes count as sent: the totals of a full send are file bytes.
        let sent = |s: &StreamStats| s.data_bytes + s.cloned_bytes + s.encoded_file_bytes;
        let before = sent(&self.stats);
        for c in b.cmds {
            match &c {
                Cmd::Write { path, offset, data } => {
                    for (k, piece) in data.chunks(self.chunk).enumerate() {
                        let cmd = Command::Write {
                            path,
                            offset: offset + (k * self.chunk) as u64,
                            data: piece,
                        };
                        self.put(&cmd, &c)?;
                    }
                    self.stats.data_bytes += data.len() as u64;
                }
                other => {
                    match other {
                        Cmd::Truncate { .. } => self.stats.truncates += 1,
                        Cmd::Clone { len, .. } => {
                            self.stats.clones += 1;
                            self.stats.cloned_bytes += len;
                        }
                        Cmd::EncodedWrite {
                            unencoded_file_len,
                            data,
                            ..
                        } => {
                            self.stats.encoded_writes += 1;
                            self.stats.encoded_file_bytes += unencoded_file_len;
                            self.stats.encoded_bytes += data.len() as u64;
                        }
                        _ => {}
                    }
                    self.put(&other.as_command(), other)?;
                    if matches!(other, Cmd::End) {
                        self.ended = true;
                    }
                }
            }
            if let Cmd::Write { data, .. } | Cmd::EncodedWrite { data, .. } = c {
                if data.capacity() >= POOLED {
                    let _ = self.pool.send(data);
                }
            }
        }
        self.stats.files += b.files;
        if let Some(p) = self.progress {
            p.advance(sent(&self.stats) - before, b.files);
        }
        Ok(())
    }
}
