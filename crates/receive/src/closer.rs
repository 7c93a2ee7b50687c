//! Finishing and closing new files on other threads.
//!
//! On btrfs, creating a file (directory entry, inode item) serialises on
//! the subvolume's tree locks, while writing its data into the page cache,
//! setting its times and closing it mostly do not. So the main thread only
//! resolves paths and creates files; a new file whose commands all came
//! (MKFILE, RENAME, WRITE, CHOWN, CHMOD, UTIMES, folded into one recipe) is
//! handed over with its descriptor as a [`Job`], and the finishing thread
//! writes the data, fixes owner and mode (or, with `--fake-super`, records
//! them: [`crate::fake_super`]) and sets the times, in the order the jobs
//! were handed over. A third thread then closes each file, first
//! starting the writeback of its data where [`Finish::flush`] asks for it:
//! btrfs has to write a new file's data back soon anyway (each dirty inode
//! holds a large metadata reservation, and once those fill up, creates
//! wait for the kernel's single flushing worker), and starting it here
//! keeps the second CPU busy instead. Everything these threads do goes
//! through descriptors: they never resolve a path.
//!
//! Off btrfs, the finishing thread also starts a `syncfs` on a fourth
//! thread after every [`SYNC_EVERY`] bytes of data, unless one is still
//! running: the data goes to disk while later files are created, so the
//! syncs that must wait for it (a durable checkpoint's, and END's before a
//! subvolume is recorded complete) find little left. On btrfs a sync is a
//! transaction commit, which holds up the creates: not there.
//!
//! The main thread waits for a job ([`Closer::wait_for`]) before any later
//! command touches the same file, and for every file to be closed
//! ([`Closer::wait`]) before END, fs-verity (which needs every writer gone)
//! and after a failure. A job's failure is kept, with the number of the
//! command that failed, until the main thread collects it
//! ([`Closer::take_errors`]).
//!
//! The closer also owns the threads that decompress ENCODED_WRITE data
//! ([`crate::decode`]): [`Closer::wait`] waits for them as well, and their
//! failures and counters come with the closer's.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use btrfs_stream::{CommandKind, Position, Timespec};
use nix::sys::stat::{fchmod, fstat, futimens, Mode};
use nix::unistd::{fchown, Gid, Uid};

use crate::decode::{self, Decoder};
use crate::error::{err_at, CmdError, Error};
use crate::fake_super;
use crate::meta;

/// Jobs are handed over in batches: one wake-up of the thread per batch.
const BATCH: usize = 64;
/// A batch is handed over early once it holds this much data.
const BATCH_BYTES: usize = 1 << 20;
/// Batches waiting for the thread (bounds memory to a few MiB).
const QUEUE: usize = 4;
/// Data written between the background syncs of [`Closer::new`]'s
/// `background_sync`.
pub(crate) const SYNC_EVERY: usize = 4 << 20;

/// What is left to do to a new file after its create.
pub(crate) struct Finish {
    /// Its path (for error messages).
    pub path: Vec<u8>,
    /// The MKFILE.
    pub create: Position,
    /// Data to write: offset, bytes, the WRITE.
    pub writes: Vec<(u64, Vec<u8>, Position)>,
    /// CHOWN to this owner.
    pub owner: Option<(u32, u32, Position)>,
    /// CHMOD to this mode.
    pub mode: Option<(u32, Position)>,
    /// UTIMES: atime, mtime.
    pub times: Option<(Timespec, Timespec, Position)>,
    /// Record owner and mode in the xattr instead ([`crate::fake_super`]).
    pub fake_super: bool,
    /// Start writing the data back before closing (sync_file_range).
    pub flush: bool,
}

/// A descriptor to close, maybe with a new file's remaining commands.
pub(crate) struct Job {
    /// The file.
    pub file: File,
    /// What to do before closing it.
    pub finish: Option<Box<Finish>>,
}

impl Job {
    fn bytes(&self) -> usize {
        self.finish
            .as_ref()
            .map_or(0, |f| f.writes.iter().map(|w| w.1.len()).sum())
    }
}

#[derive(Default)]
struct Shared {
    /// Sequence number of the last job done: its commands are applied.
    done: AtomicU64,
    /// Sequence number of the last job whose file is closed.
    closed: AtomicU64,
    /// Whether `errors` holds anything.
    failed: AtomicBool,
    /// Failed jobs, in the order they were handed over.
    errors: Mutex<Vec<Error>>,
    /// Signalled after each batch, by either thread.
    cv: Condvar,
    chowns_skipped: AtomicU64,
    chmods_skipped: AtomicU64,
}

/// Counters kept by the closing thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    /// CHOWNs skipped because the new file already had that owner.
    pub chowns_skipped: u64,
    /// CHMODs skipped because the new file already had that mode.
    pub chmods_skipped: u64,
    /// ENCODED_WRITEs decoded and written on the decoding threads.
    pub encoded_decoded: u64,
    /// Bytes they wrote.
    pub bytes_decoded: u64,
}

struct Batch {
    jobs: Vec<Job>,
    bytes: usize,
    /// Sequence number of the last job handed over (sent or batched).
    last: u64,
    /// Sequence number of the last job sent to the thread.
    sent: u64,
}

/// Finishes and closes files in the background.
pub(crate) struct Closer {
    tx: Option<SyncSender<Vec<Job>>>,
    batch: Mutex<Batch>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    decoder: Decoder,
}

impl Closer {
    /// Starts the closing thread; without one (or with `RRECEIVE_SYNC_CLOSE`
    /// set), jobs run in place when handed over. With `background_sync`,
    /// the filesystem is synced in the background after every
    /// [`SYNC_EVERY`] bytes of data (a hint: failure is ignored).
    pub(crate) fn new(background_sync: bool) -> Closer {
        let shared = Arc::new(Shared::default());
        let batch = Mutex::new(Batch {
            jobs: Vec::with_capacity(BATCH),
            bytes: 0,
            last: 0,
            sent: 0,
        });
        let inline = || Closer {
            tx: None,
            batch: Mutex::new(Batch {
                jobs: Vec::new(),
                bytes: 0,
                last: 0,
                sent: 0,
            }),
            shared: Arc::new(Shared::default()),
            thread: None,
            decoder: Decoder::new(true),
        };
        if std::env::var_os("RRECEIVE_SYNC_CLOSE").is_some() {
            return inline();
        }
        let (tx, rx) = sync_channel::<Vec<Job>>(QUEUE);
        let sh = shared.clone();
        match std::thread::Builder::new()
            .name("rreceive-finish".into())
            .spawn(move || finisher(rx, &sh, background_sync))
        {
            Ok(t) => Closer {
                tx: Some(tx),
                batch,
                shared,
                thread: Some(t),
                decoder: Decoder::new(false),
            },
            Err(_) => inline(),
        }
    }

    /// Closes `f`, later.
    pub(crate) fn close(&self, f: File) {
        self.submit(Job {
            file: f,
            finish: None,
        });
    }

    /// Hands `job` over; returns its sequence number (see [`Closer::wait_for`]).
    pub(crate) fn submit(&self, job: Job) -> u64 {
        let Ok(mut b) = self.batch.lock() else {
            // Poisoned: nothing sensible is left to do but run it here.
            run_job(&job, &self.shared);
            return 0;
        };
        b.last += 1;
        let seq = b.last;
        let Some(tx) = &self.tx else {
            run_job(&job, &self.shared);
            drop(job);
            self.shared.done.store(seq, Ordering::Release);
            self.shared.closed.store(seq, Ordering::Release);
            return seq;
        };
        b.bytes += job.bytes();
        b.jobs.push(job);
        if b.jobs.len() >= BATCH || b.bytes >= BATCH_BYTES {
            send(&mut b, tx, &self.shared);
        }
        seq
    }

    /// Sequence number of the last job done: every job up to it is done.
    pub(crate) fn done(&self) -> u64 {
        self.shared.done.load(Ordering::Acquire)
    }

    /// Waits until job `seq` and all before it are done (their files may
    /// still be open).
    pub(crate) fn wait_for(&self, seq: u64) {
        self.wait_until(seq, &self.shared.done);
    }

    /// The threads that decode ENCODED_WRITEs.
    pub(crate) fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// Waits until every job handed over so far is done and its file
    /// closed, ENCODED_WRITEs being decoded included.
    pub(crate) fn wait(&self) {
        self.decoder.wait();
        let last = self.batch.lock().map(|b| b.last).unwrap_or(0);
        self.wait_until(last, &self.shared.closed);
    }

    fn wait_until(&self, seq: u64, counter: &AtomicU64) {
        if counter.load(Ordering::Acquire) >= seq {
            return;
        }
        if let (Some(tx), Ok(mut b)) = (&self.tx, self.batch.lock()) {
            if b.sent < seq {
                send(&mut b, tx, &self.shared);
            }
        }
        let Ok(mut g) = self.shared.errors.lock() else {
            return;
        };
        while counter.load(Ordering::Acquire) < seq {
            match &self.thread {
                Some(t) if !t.is_finished() => {}
                // The threads are gone (they do not fail, but never hang).
                _ => return,
            }
            g = match self.shared.cv.wait_timeout(g, Duration::from_millis(100)) {
                Ok((g, _)) => g,
                Err(_) => return,
            };
        }
    }

    /// Whether a job failed since the last [`Closer::take_errors`].
    pub(crate) fn has_errors(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire) || self.decoder.has_errors()
    }

    /// The failures of jobs done so far, in the order they were handed
    /// over; those of decoded ENCODED_WRITEs go in by command number.
    pub(crate) fn take_errors(&self) -> Vec<Error> {
        let mut errs = if self.shared.failed.load(Ordering::Acquire) {
            match self.shared.errors.lock() {
                Ok(mut g) => {
                    self.shared.failed.store(false, Ordering::Release);
                    std::mem::take(&mut *g)
                }
                Err(_) => Vec::new(),
            }
        } else {
            Vec::new()
        };
        for e in self.decoder.take_errors() {
            let n = decode::command_number(&e);
            let at = errs
                .iter()
                .position(|x| decode::command_number(x) > n)
                .unwrap_or(errs.len());
            errs.insert(at, e);
        }
        errs
    }

    /// The counters since the last call.
    pub(crate) fn take_counts(&self) -> Counts {
        let d = self.decoder.take_counts();
        Counts {
            chowns_skipped: self.shared.chowns_skipped.swap(0, Ordering::Relaxed),
            chmods_skipped: self.shared.chmods_skipped.swap(0, Ordering::Relaxed),
            encoded_decoded: d.decoded,
            bytes_decoded: d.bytes,
        }
    }
}

fn send(b: &mut Batch, tx: &SyncSender<Vec<Job>>, shared: &Shared) {
    if b.jobs.is_empty() {
        return;
    }
    let jobs = std::mem::replace(&mut b.jobs, Vec::with_capacity(BATCH));
    b.bytes = 0;
    b.sent = b.last;
    if let Err(std::sync::mpsc::SendError(jobs)) = tx.send(jobs) {
        // The thread is gone: do them here.
        for j in jobs {
            run_job(&j, shared);
        }
        shared.done.store(b.last, Ordering::Release);
        shared.closed.store(b.last, Ordering::Release);
    }
}

impl Default for Closer {
    fn default() -> Self {
        Closer::new(false)
    }
}

fn notify(shared: &Shared) {
    // Taking the lock orders this after a waiter's check of the counters.
    drop(shared.errors.lock());
    shared.cv.notify_all();
}

/// The finishing thread: applies each job's commands, then hands the file
/// to the closing thread (or closes it, if that thread could not start).
fn finisher(rx: Receiver<Vec<Job>>, shared: &Arc<Shared>, background_sync: bool) {
    let (ctx, crx) = sync_channel::<Vec<(File, bool)>>(QUEUE);
    let sh = shared.clone();
    let closing = std::thread::Builder::new()
        .name("rreceive-close".into())
        .spawn(move || closer(crx, &sh))
        .ok();
    let ctx = closing.as_ref().map(|_| ctx);
    let mut syncer = background_sync.then(Syncer::start).flatten();
    let mut seq = 0u64;
    for jobs in rx {
        let mut files = Vec::with_capacity(jobs.len());
        for j in jobs {
            let flush = run_job(&j, shared);
            if let Some(s) = syncer.as_mut() {
                s.written(&j);
            }
            seq += 1;
            shared.done.store(seq, Ordering::Release);
            if ctx.is_some() {
                files.push((j.file, flush));
            } else {
                drop(j);
                shared.closed.store(seq, Ordering::Release);
            }
        }
        if let Some(tx) = &ctx {
            if let Err(std::sync::mpsc::SendError(files)) = tx.send(files) {
                drop(files);
                shared.closed.store(seq, Ordering::Release);
            }
        }
        notify(shared);
    }
    drop(ctx);
    drop(syncer);
    if let Some(t) = closing {
        let _ = t.join();
    }
}

/// Syncs the filesystem on its own thread after every [`SYNC_EVERY`] bytes
/// written, when no sync is running.
struct Syncer {
    /// A rendezvous channel: a send succeeds only while the thread waits.
    tx: Option<SyncSender<File>>,
    thread: Option<JoinHandle<()>>,
    written: usize,
}

impl Syncer {
    fn start() -> Option<Syncer> {
        let (tx, rx) = sync_channel::<File>(0);
        let thread = std::thread::Builder::new()
            .name("rreceive-sync".into())
            .spawn(move || {
                for f in rx {
                    let _ = nix::unistd::syncfs(f.as_raw_fd());
                }
            })
            .ok()?;
        Some(Syncer {
            tx: Some(tx),
            thread: Some(thread),
            written: 0,
        })
    }

    /// Counts `job`'s data; starts a sync through its file when due.
    fn written(&mut self, job: &Job) {
        self.written += job.bytes();
        if self.written < SYNC_EVERY {
            return;
        }
        if let (Some(tx), Ok(f)) = (&self.tx, job.file.try_clone()) {
            if tx.try_send(f).is_ok() {
                self.written = 0;
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The closing thread: starts writeback where asked, closes.
fn closer(rx: Receiver<Vec<(File, bool)>>, shared: &Shared) {
    let mut seq = 0u64;
    for files in rx {
        for (f, flush) in files {
            if flush {
                start_writeback(&f);
            }
            drop(f);
            seq += 1;
            shared.closed.store(seq, Ordering::Release);
        }
        notify(shared);
    }
}

/// Starts writeback of the file's dirty pages (a hint: failure is ignored).
fn start_writeback(f: &File) {
    let _ = crate::ioctl::start_writeback(f.as_fd());
}

/// Applies a job's commands; whether its writeback should be started.
fn run_job(job: &Job, shared: &Shared) -> bool {
    let Some(f) = &job.finish else {
        return false;
    };
    match finish_new(&job.file, f, false) {
        Ok(done) => {
            if done.chown_skipped {
                shared.chowns_skipped.fetch_add(1, Ordering::Relaxed);
            }
            if done.chmod_skipped {
                shared.chmods_skipped.fetch_add(1, Ordering::Relaxed);
            }
            f.flush
        }
        Err(e) => {
            if let Ok(mut g) = shared.errors.lock() {
                g.push(e);
                shared.failed.store(true, Ordering::Release);
            }
            false
        }
    }
}

/// What finishing a new file did ([`finish_new`]).
#[derive(Debug, Default)]
pub(crate) struct Finished {
    /// Its owner, when known: the one it was created with, or the CHOWN's.
    pub owner: Option<(u32, u32)>,
    /// The CHOWN was skipped: the file had that owner already.
    pub chown_skipped: bool,
    /// The CHMOD was skipped: the file had that mode already.
    pub chmod_skipped: bool,
}

/// Applies the rest of a new file's commands `f` to it, in stream order
/// (data, owner or the fake-super record, mode, times); stops at the first
/// that fails, as applying them one by one would. With `owner` its owner
/// is learnt (with a stat) even when no CHOWN or CHMOD asks for one.
pub(crate) fn finish_new(file: &File, f: &Finish, owner: bool) -> Result<Finished, Error> {
    let path = &f.path;
    let mut done = Finished::default();
    for (off, data, pos) in &f.writes {
        file.write_all_at(data, *off)
            .map_err(|e| err_at(CommandKind::Write, *pos, path, CmdError::io("write")(e)))?;
    }
    if owner || f.owner.is_some() || f.mode.is_some() {
        let st = fstat(file.as_raw_fd())
            .map_err(|e| err_at(CommandKind::Mkfile, f.create, path, CmdError::os("stat")(e)))?;
        done.owner = Some((st.st_uid, st.st_gid));
        let mut chowned = false;
        if f.fake_super {
            fake_super::finish_new(file, &st, f.owner, f.mode)
                .map_err(|(k, p, e)| err_at(k, p, path, e))?;
        } else if let Some((u, g, pos)) = f.owner {
            if (st.st_uid, st.st_gid) != (u, g) {
                fchown(
                    file.as_raw_fd(),
                    Some(Uid::from_raw(u)),
                    Some(Gid::from_raw(g)),
                )
                .map_err(|e| err_at(CommandKind::Chown, pos, path, CmdError::chown(u, g)(e)))?;
                chowned = true;
            } else {
                done.chown_skipped = true;
            }
            done.owner = Some((u, g));
        }
        if let Some((m, pos)) = f.mode.filter(|_| !f.fake_super) {
            // chown clears set-id bits: the mode goes on again after it.
            if chowned || st.st_mode & 0o7777 != m {
                fchmod(file.as_raw_fd(), Mode::from_bits_retain(m))
                    .map_err(|e| err_at(CommandKind::Chmod, pos, path, CmdError::os("chmod")(e)))?;
            } else {
                done.chmod_skipped = true;
            }
        }
    }
    if let Some((a, m, pos)) = f.times {
        let ts = |t| {
            meta::timespec(t)
                .map_err(|e| err_at(CommandKind::Utimes, pos, path, CmdError::os("utimes")(e)))
        };
        futimens(file.as_raw_fd(), &ts(a)?, &ts(m)?)
            .map_err(|e| err_at(CommandKind::Utimes, pos, path, CmdError::os("utimes")(e)))?;
    }
    Ok(done)
}

impl Drop for Closer {
    fn drop(&mut self) {
        if let (Some(tx), Ok(mut b)) = (&self.tx, self.batch.lock()) {
            send(&mut b, tx, &self.shared);
        }
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
