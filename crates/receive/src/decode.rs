//! Decompressing ENCODED_WRITE data on worker threads.
//!
//! Where an ENCODED_WRITE cannot go to the filesystem as it is (the
//! destination is not btrfs, `--force-decompress`, or the encoded-write
//! ioctl is not supported), its data is decompressed and then written. The
//! main thread checks the command, opens the file and hands the compressed
//! bytes over as a [`Job`]; worker threads, one per core
//! ([`std::thread::available_parallelism`], started at the first job),
//! decompress each and write it with `pwrite` through a descriptor of the
//! file shared by the jobs of a [`Run`]. So a compressed stream received
//! onto ext4, xfs or tmpfs decompresses on every core.
//!
//! Jobs run in any order, so the main thread hands over only
//! ENCODED_WRITEs to one file at ranges that do not overlap (a [`Run`]),
//! and waits for all of them ([`Decoder::wait`]) before any other command,
//! before a checkpoint, at END and after a failure (see
//! `apply::schedule`; [`crate::closer::Closer::wait`] waits for them too).
//! The journal does not record a run's commands as applied before they
//! are waited for. In flight are at most [`JOBS_PER_THREAD`] jobs per
//! thread and [`MAX_BYTES`] of compressed data.
//!
//! A failed job is kept, with the number of its command, until the main
//! thread collects it ([`Decoder::take_errors`]); the counters of the jobs
//! done likewise ([`Decoder::take_counts`]).
//!
//! A file's first ENCODED_WRITE is handed over only if its extent is a
//! full one ([`HAND_OVER_FROM`]): a small file's single extent is decoded
//! on the main thread, as waiting for it right away would cost more than
//! it saves.
//!
//! With one core, or `RRECEIVE_SYNC_CLOSE` or `RRECEIVE_SYNC_DECODE` set,
//! no thread is started and the main thread decodes each ENCODED_WRITE in
//! place ([`Decoder::in_place`]).

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use btrfs_compress::Encoded;
use btrfs_stream::{CommandKind, Position};

use crate::error::{escape, CmdError, Error};

/// A file's first ENCODED_WRITE is handed over when its extent decodes to
/// this much (btrfs's largest compressed extent, which a file with more
/// data continues); a smaller one is a small file's only extent, which
/// the next command would wait for at once. Later ones of the same run
/// are handed over whatever their size.
pub(crate) const HAND_OVER_FROM: u64 = 128 << 10;
/// Jobs in flight (queued or being decoded) per worker thread.
const JOBS_PER_THREAD: usize = 4;
/// Compressed bytes in flight (one job is always let in).
const MAX_BYTES: usize = 32 << 20;
/// A worker's buffer larger than this is given back after its job.
const KEEP_BUFFER: usize = 1 << 20;

/// One ENCODED_WRITE to decode and write.
pub(crate) struct Job {
    /// The file (shared by its run's jobs).
    pub file: Arc<File>,
    /// Its path (for error messages).
    pub path: Arc<[u8]>,
    /// Where in the file the bytes go.
    pub offset: u64,
    /// What the data is.
    pub extent: Encoded,
    /// The compressed data.
    pub data: Vec<u8>,
    /// The command.
    pub pos: Position,
}

/// The ENCODED_WRITEs handed over since the decoder was last waited for:
/// all to one file, at ranges that do not overlap.
pub(crate) struct Run {
    /// The file's path.
    pub path: Arc<[u8]>,
    /// A descriptor of it for the jobs.
    pub file: Arc<File>,
    /// Commands of the subvolume's stream applied before the run's first
    /// (the journal records no more as applied while the run is pending).
    pub before: u64,
    /// The ranges written: start to end.
    ranges: BTreeMap<u64, u64>,
}

impl Run {
    /// A run of ENCODED_WRITEs to `file` at `path`, after `before` commands.
    pub(crate) fn new(path: &[u8], file: File, before: u64) -> Run {
        Run {
            path: path.into(),
            file: Arc::new(file),
            before,
            ranges: BTreeMap::new(),
        }
    }

    /// Whether an ENCODED_WRITE of `len` bytes to `path` at `offset` may
    /// join the run: the same file, a range none of the run writes.
    pub(crate) fn admits(&self, path: &[u8], offset: u64, len: u64) -> bool {
        if *self.path != *path {
            return false;
        }
        let end = offset.saturating_add(len);
        let before = self
            .ranges
            .range(..=offset)
            .next_back()
            .is_some_and(|(_, &e)| e > offset);
        let after = self
            .ranges
            .range(offset..)
            .next()
            .is_some_and(|(&s, _)| s < end && len > 0);
        !before && !after
    }

    /// Notes that `len` bytes at `offset` are written by the run.
    pub(crate) fn add(&mut self, offset: u64, len: u64) {
        if len > 0 {
            self.ranges.insert(offset, offset.saturating_add(len));
        }
    }
}

/// Counters of the jobs done.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    /// ENCODED_WRITEs decoded and written.
    pub decoded: u64,
    /// Bytes they wrote.
    pub bytes: u64,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Jobs handed over and not done.
    jobs: usize,
    /// Their compressed bytes.
    bytes: usize,
    /// Failed jobs.
    errors: Vec<Error>,
    counts: Counts,
    /// The workers are to end once the queue is empty.
    closing: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// A job was queued (or the workers are to end).
    work: Condvar,
    /// A job was done.
    done: Condvar,
    /// Whether `errors` holds anything.
    failed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker never panics holding the lock: poison means nothing.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Decodes ENCODED_WRITEs on worker threads.
pub(crate) struct Decoder {
    shared: Arc<Shared>,
    /// Workers to start at the first job; 0: decode in place.
    want: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Decoder {
    /// A decoder with a thread per core, or none (`sync`, one core).
    pub(crate) fn new(sync: bool) -> Decoder {
        let sync = sync || std::env::var_os("RRECEIVE_SYNC_DECODE").is_some();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Decoder {
            shared: Arc::default(),
            want: if sync || cores < 2 { 0 } else { cores },
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Whether ENCODED_WRITEs are decoded in place, on the main thread.
    pub(crate) fn in_place(&self) -> bool {
        self.want == 0
    }

    /// Hands `job` over, first waiting while too much is in flight. Where
    /// no thread can be started, it runs here (its failure is kept all
    /// the same).
    pub(crate) fn submit(&self, job: Job) {
        let workers = self.start();
        if workers == 0 {
            let bytes = job.data.len();
            let mut st = self.shared.lock();
            st.jobs += 1;
            st.bytes += bytes;
            drop(st);
            finish(&self.shared, job, &mut Vec::new());
            return;
        }
        let mut st = self.shared.lock();
        let bytes = job.data.len();
        while st.jobs > 0 && (st.jobs >= workers * JOBS_PER_THREAD || st.bytes + bytes > MAX_BYTES)
        {
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.jobs += 1;
        st.bytes += bytes;
        st.queue.push_back(job);
        drop(st);
        self.shared.work.notify_one();
    }

    /// Starts the workers if not yet; how many there are.
    fn start(&self) -> usize {
        let Ok(mut threads) = self.threads.lock() else {
            return 0;
        };
        if threads.is_empty() {
            for i in 0..self.want {
                let sh = self.shared.clone();
                match std::thread::Builder::new()
                    .name(format!("rreceive-decode-{i}"))
                    .spawn(move || worker(&sh))
                {
                    Ok(t) => threads.push(t),
                    Err(_) => break,
                }
            }
        }
        threads.len()
    }

    /// Whether no job is in flight.
    pub(crate) fn idle(&self) -> bool {
        self.shared.lock().jobs == 0
    }

    /// Waits until every job handed over is done (its descriptor closed).
    pub(crate) fn wait(&self) {
        let mut st = self.shared.lock();
        while st.jobs > 0 {
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether a job failed since the last [`Decoder::take_errors`].
    pub(crate) fn has_errors(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// The failures of jobs done so far, in stream order.
    pub(crate) fn take_errors(&self) -> Vec<Error> {
        if !self.has_errors() {
            return Vec::new();
        }
        let mut st = self.shared.lock();
        self.shared.failed.store(false, Ordering::Release);
        let mut errs = std::mem::take(&mut st.errors);
        errs.sort_by_key(command_number);
        errs
    }

    /// The counters since the last call.
    pub(crate) fn take_counts(&self) -> Counts {
        std::mem::take(&mut self.shared.lock().counts)
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.work.notify_all();
        if let Ok(threads) = self.threads.get_mut() {
            for t in threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

/// The number of the command an error names (last if none).
pub(crate) fn command_number(e: &Error) -> u64 {
    match e {
        Error::Command { command, .. } => *command,
        _ => u64::MAX,
    }
}

/// A worker: decodes and writes jobs until the decoder is dropped.
fn worker(shared: &Shared) {
    let mut buf = Vec::new();
    loop {
        let mut st = shared.lock();
        let job = loop {
            if let Some(j) = st.queue.pop_front() {
                break j;
            }
            if st.closing {
                return;
            }
            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
        };
        drop(st);
        finish(shared, job, &mut buf);
    }
}

/// Runs `job` and records the outcome; its descriptor is closed before
/// the job counts as done.
fn finish(shared: &Shared, job: Job, buf: &mut Vec<u8>) {
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| run(&job, buf)))
        .unwrap_or(Err(CmdError::BadEncoded("decoding failed unexpectedly")));
    if buf.capacity() > KEEP_BUFFER {
        *buf = Vec::new();
    }
    let (bytes, len, pos) = (job.data.len(), job.extent.len, job.pos);
    let r = r.map_err(|kind| Error::Command {
        command: pos.index,
        offset: pos.offset,
        cmd: CommandKind::EncodedWrite,
        path: format!("'{}'", escape(&job.path)),
        kind,
    });
    drop(job);
    let mut st = shared.lock();
    st.jobs -= 1;
    st.bytes -= bytes;
    match r {
        Ok(()) => {
            st.counts.decoded += 1;
            st.counts.bytes += len;
        }
        Err(e) => {
            st.errors.push(e);
            shared.failed.store(true, Ordering::Release);
        }
    }
    drop(st);
    shared.done.notify_all();
}

fn run(job: &Job, buf: &mut Vec<u8>) -> Result<(), CmdError> {
    let piece = job.extent.decode(&job.data, buf)?;
    job.file
        .write_all_at(piece, job.offset)
        .map_err(CmdError::io("write"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_over(ranges: &[(u64, u64)]) -> Run {
        let f = File::open("/dev/null").expect("open /dev/null");
        let mut r = Run::new(b"f", f, 0);
        for &(o, l) in ranges {
            r.add(o, l);
        }
        r
    }

    #[test]
    fn run_admits_only_disjoint_ranges_of_its_file() {
        let r = run_over(&[(0, 4096), (8192, 4096)]);
        assert!(r.admits(b"f", 4096, 4096));
        assert!(r.admits(b"f", 12288, 10));
        assert!(!r.admits(b"g", 4096, 4096));
        assert!(!r.admits(b"f", 0, 1));
        assert!(!r.admits(b"f", 4095, 2));
        assert!(!r.admits(b"f", 4096, 4097));
        assert!(!r.admits(b"f", 100, 10));
        assert!(!r.admits(b"f", 0, 1 << 20));
    }
}
