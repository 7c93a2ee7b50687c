//! The two ends between the walk and the stream writer.
//!
//! The walk (on its own thread) pushes [`Cmd`]s into an [`Emitter`], which
//! hands them over in batches through a bounded channel; the [`Sink`] (on
//! the caller's thread) encodes them with `btrfs_stream::Writer` and writes
//! them out. Data buffers come back to the walk through a second channel,
//! so steady-state sending allocates nothing per extent. Order is the
//! walk's, so the stream is the same whatever the timing.

use std::io::Write;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use btrfs_stream::resume::{without_data, Digest, Point};
use btrfs_stream::{encoded_len, Command, WriteError, Writer};

use super::ahead::{DataRead, Pending, Readers};
use super::cmd::{Bytes, Cmd};
use super::error::SendError;
use crate::progress::Progress;

/// Commands in a batch before it is handed over.
const BATCH_COMMANDS: usize = 256;
/// Data bytes (file data, xattr values, symlink targets) in a batch before it is handed over.
const BATCH_DATA: usize = 256 << 10;
/// Data buffers at least this large go back to the walk for reuse; smaller
/// ones are allocated each time, so a recycled buffer never holds much more
/// than the data in it.
const POOLED: usize = 256 << 10;
/// Batches in flight between the walk and the writer (bounds memory).
/// Few, so that the data buffers in flight stay in the CPU's caches: 8
/// made the large-file send 15 % slower.
pub(crate) const CHANNEL_BATCHES: usize = 3;
/// Recycled data buffers kept waiting for the walk; the writer frees the rest.
///
/// With [`CHANNEL_BATCHES`] and [`BATCH_DATA`], this bounds the data a send
/// holds: every batch in flight holds less than `BATCH_DATA` plus one
/// command's data (at most a read chunk of about 1 MiB), and the pool at
/// most this many buffers of about one read chunk each.
pub(crate) const POOL_BUFFERS: usize = 3;

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
    /// Largest WRITE payload: how the writer cuts [`Cmd::Write`].
    chunk: u64,
    /// Wire commands queued so far.
    count: u64,
    /// Wire commands up to this one need no file data (a dry run: all).
    unread_until: u64,
    /// Where large reads go.
    readers: Arc<Readers>,
}

/// No more reads come once the walk is done.
impl Drop for Emitter {
    fn drop(&mut self) {
        self.readers.close();
    }
}

impl Emitter {
    /// An emitter for a stream whose WRITEs are cut at `chunk` bytes and
    /// whose first `unread_until` commands are not written (their data need
    /// not be read).
    pub(crate) fn new(
        tx: SyncSender<Msg>,
        pool: Receiver<Vec<u8>>,
        chunk: usize,
        unread_until: u64,
        readers: Arc<Readers>,
    ) -> Emitter {
        Emitter {
            readers,
            tx,
            pool,
            batch: Batch::default(),
            data: 0,
            chunk: chunk.max(1) as u64,
            count: 0,
            unread_until,
        }
    }

    /// Whether the next command, a WRITE of `len` bytes of file data when
    /// `write` (else an ENCODED_WRITE), needs its data read.
    pub(crate) fn wants_data(&self, len: u64, write: bool) -> bool {
        let pieces = if write { len.div_ceil(self.chunk) } else { 1 };
        self.count + pieces > self.unread_until
    }

    /// Queues one command.
    pub(crate) fn push(&mut self, c: Cmd) -> Result<(), Hangup> {
        self.data += match &c {
            Cmd::Write { data, .. }
            | Cmd::SetXattr { data, .. }
            | Cmd::EncodedWrite { data, .. } => data.len(),
            Cmd::Symlink { target, .. } => target.len(),
            Cmd::Ahead(p) => p.len as usize,
            _ => 0,
        };
        self.count += match &c {
            Cmd::Write { data, .. } => (data.len() as u64).div_ceil(self.chunk),
            Cmd::Ahead(p) => p.len.div_ceil(self.chunk),
            Cmd::Unread { cmd, len } if matches!(**cmd, Cmd::Write { .. }) => {
                len.div_ceil(self.chunk)
            }
            _ => 1,
        };
        self.batch.cmds.push(c);
        if self.batch.cmds.len() >= BATCH_COMMANDS || self.data >= BATCH_DATA {
            self.flush()?;
        }
        Ok(())
    }

    /// Queues the WRITE of `buf.len()` bytes at `offset` of `path`, whose
    /// data `read` fills on a reader thread.
    pub(crate) fn push_read(
        &mut self,
        path: Bytes,
        offset: u64,
        read: DataRead,
        buf: Vec<u8>,
    ) -> Result<(), Hangup> {
        let p = Arc::new(Pending::new(path, offset, read, buf));
        self.readers.queue(p.clone());
        self.push(Cmd::Ahead(p))
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
        match self.pool.try_recv() {
            Ok(mut v) if v.capacity() >= len => {
                // Only the part not written before is zeroed.
                if v.len() >= len {
                    v.truncate(len);
                } else {
                    v.resize(len, 0);
                }
                v
            }
            _ => vec![0u8; len],
        }
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

/// Why a resumed send's stream is not the interrupted one.
pub(crate) const STREAM_DIFFERS: &str = "the stream this send makes is not the one received before";

/// What usually makes a stream differ from the first send's.
pub(crate) const OTHER_OPTIONS: &str = "other options than the first send's, such as --proto, \
     --compressed-data, --no-data or -c, or another rsend version";

/// What the sink does with the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Writes them.
    Write,
    /// Writes nothing and measures the stream (a dry run), or the
    /// stream a resume from the point would write.
    Measure(Option<Point>),
    /// Writes RESUME, the first command, and those after the point; the
    /// ones up to it are measured and fingerprinted, and must match it.
    Resume(Point),
}

/// Which of a stream's framing a send writes: both, unless it is one of
/// several subvolumes in one stream (`btrfs send -e`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Framing {
    /// The stream header (written before the sink starts, counted here).
    pub(crate) header: bool,
    /// The END command.
    pub(crate) end: bool,
}

/// The writer's end: encodes and writes what the walk sends.
pub(crate) struct Sink<'w, W: Write> {
    pub(crate) w: &'w mut Writer<W>,
    /// Largest WRITE payload (48 KiB in v1).
    pub(crate) chunk: usize,
    /// The filesystem's sector size: what the sums of [`Cmd::Write`] cover.
    pub(crate) sector: usize,
    pub(crate) pool: SyncSender<Vec<u8>>,
    pub(crate) progress: &'w dyn Progress,
    pub(crate) stats: StreamStats,
    pub(crate) ended: bool,
    pub(crate) mode: Mode,
    /// The stream's protocol version.
    pub(crate) version: u32,
    /// Commands of the stream so far, written or not.
    pub(crate) count: u64,
    /// The stream's length so far, written or not, header included.
    pub(crate) offset: u64,
    /// The length so far of what is written, or would be without a dry run.
    pub(crate) kept_len: u64,
    digest: Digest,
    scratch: Vec<u8>,
    framing: Framing,
}

impl<'w, W: Write> Sink<'w, W> {
    /// A sink writing to `w` (whose stream header is written) as `mode` says.
    pub(crate) fn new(
        w: &'w mut Writer<W>,
        chunk: usize,
        pool: SyncSender<Vec<u8>>,
        progress: &'w dyn Progress,
        mode: Mode,
        version: u32,
        framing: Framing,
    ) -> Sink<'w, W> {
        let header = if framing.header {
            btrfs_stream::STREAM_HEADER_LEN as u64
        } else {
            0
        };
        Sink {
            w,
            chunk,
            sector: 0,
            pool,
            progress,
            stats: StreamStats::default(),
            ended: false,
            mode,
            version,
            count: 0,
            offset: header,
            kept_len: header,
            digest: Digest::default(),
            scratch: Vec::new(),
            framing,
        }
    }

    fn put(&mut self, c: &Command<'_>, what: &Cmd, sums: &[u32]) -> Result<(), SendError> {
        self.w
            .write_command_summed(c, sums, self.sector)
            .map_err(|e| encode_error(e, what))?;
        Ok(())
    }

    /// One wire command, with `data_len` bytes of file data (which `c`
    /// holds unless `unread`).
    fn emit(
        &mut self,
        c: &Command<'_>,
        data_len: u64,
        unread: bool,
        what: &Cmd,
    ) -> Result<(), SendError> {
        self.emit_summed(c, data_len, unread, what, &[])
    }

    /// [`Sink::emit`] of a WRITE whose data's first sectors have the crc32c `sums`.
    fn emit_summed(
        &mut self,
        c: &Command<'_>,
        data_len: u64,
        unread: bool,
        what: &Cmd,
        sums: &[u32],
    ) -> Result<(), SendError> {
        self.count += 1;
        let (measure, point) = match self.mode {
            Mode::Write => (false, None),
            Mode::Measure(p) => (true, p),
            Mode::Resume(p) => (false, Some(p)),
        };
        // Whether the stream written (or measured) holds this command.
        let kept = point.is_none_or(|p| self.count == 1 || self.count > p.commands);
        if self.mode != Mode::Write {
            let (head, len) = without_data(c, data_len);
            let n = encoded_len(&head, len, self.version, &mut self.scratch)
                .map_err(|e| encode_error(e, what))?;
            self.offset += n;
            if kept {
                self.kept_len += n;
            }
            if point.is_some_and(|p| self.count <= p.commands) {
                self.digest
                    .add(&head, len, self.version)
                    .map_err(|e| encode_error(e, what))?;
            }
        }
        if let Some(p) = point.filter(|_| self.count == 1) {
            let resume = p.command();
            if measure {
                self.kept_len += encoded_len(&resume, 0, self.version, &mut self.scratch)
                    .map_err(|e| encode_error(e, what))?;
            } else {
                self.put(&resume, what, &[])?;
            }
            self.stats.commands += 1;
        }
        if kept {
            if !measure {
                if unread {
                    return Err(SendError::Resume(format!(
                        "command {} was to be written without its data having been read (a bug)",
                        self.count
                    )));
                }
                self.put(c, what, sums)?;
            }
            self.stats.commands += 1;
        }
        if let Some(p) = point.filter(|p| self.count == p.commands) {
            if self.offset != p.offset || self.digest.value() != p.digest {
                return Err(SendError::Resume(format!(
                    "{STREAM_DIFFERS}: at command {} it is at byte {} with digest {:032x}, the \
                     token says byte {} with digest {:032x} ({OTHER_OPTIONS})",
                    p.commands,
                    self.offset,
                    self.digest.value(),
                    p.offset,
                    p.digest
                )));
            }
        }
        Ok(())
    }

    /// Writes one batch.
    pub(crate) fn write(&mut self, b: Batch) -> Result<(), SendError> {
        // Cloned bytes count as sent: the totals of a full send are file bytes.
        let sent = |s: &StreamStats| s.data_bytes + s.cloned_bytes + s.encoded_file_bytes;
        let before = sent(&self.stats);
        for c in b.cmds {
            let c = match c {
                Cmd::Ahead(p) => {
                    let (data, sums) = p.wait()?;
                    Cmd::Write {
                        path: p.path.clone(),
                        offset: p.offset,
                        data,
                        sums,
                    }
                }
                other => other,
            };
            let (inner, unread) = match &c {
                Cmd::Unread { cmd, len } => (&**cmd, Some(*len)),
                other => (other, None),
            };
            match inner {
                Cmd::Write {
                    path,
                    offset,
                    data,
                    sums,
                } => {
                    let total = unread.unwrap_or(data.len() as u64);
                    let chunk = self.chunk as u64;
                    for k in 0..total.div_ceil(chunk) {
                        let at = k * chunk;
                        let n = chunk.min(total - at);
                        let piece = match unread {
                            Some(_) => &[][..],
                            None => &data[at as usize..(at + n) as usize],
                        };
                        let cmd = Command::Write {
                            path,
                            offset: offset + at,
                            data: piece,
                        };
                        // The sums of the piece's sectors, when it starts at one.
                        let piece_sums = match self.sector as u64 {
                            s if s > 0 && at.is_multiple_of(s) => {
                                sums.get((at / s) as usize..).unwrap_or(&[])
                            }
                            _ => &[],
                        };
                        self.emit_summed(&cmd, n, unread.is_some(), &c, piece_sums)?;
                    }
                    self.stats.data_bytes += total;
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
                            self.stats.encoded_bytes += unread.unwrap_or(data.len() as u64);
                        }
                        _ => {}
                    }
                    let len = match other {
                        Cmd::EncodedWrite { data, .. } => unread.unwrap_or(data.len() as u64),
                        _ => 0,
                    };
                    if matches!(other, Cmd::End) {
                        if self.framing.end {
                            self.emit(&other.as_command(), len, unread.is_some(), other)?;
                        }
                        self.ended = true;
                    } else {
                        self.emit(&other.as_command(), len, unread.is_some(), other)?;
                    }
                }
            }
            if let Cmd::Write { data, .. } | Cmd::EncodedWrite { data, .. } = c {
                if data.capacity() >= POOLED {
                    // A full pool, or a walk that is gone, frees it.
                    let _ = self.pool.try_send(data);
                }
            }
        }
        self.stats.files += b.files;
        self.progress.advance(sent(&self.stats) - before, b.files);
        Ok(())
    }
}

fn encode_error(e: WriteError, what: &Cmd) -> SendError {
    match e {
        WriteError::Io(io) => SendError::Output(io),
        other => SendError::Encode {
            subvol: String::new(),
            path: String::from_utf8_lossy(what.path()).into_owned(),
            source: other,
        },
    }
}
