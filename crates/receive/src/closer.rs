//! Closing written files on a second thread.
//!
//! On btrfs, `close` of a freshly written file costs as much as the write
//! (release, delalloc and inode bookkeeping). A receive closes one file per
//! file it creates, so [`Closer`] hands finished descriptors to a thread
//! and the main thread goes on. [`Closer::wait`] returns once every
//! descriptor handed over so far is closed (before fs-verity, which needs
//! all writers gone, and before a subvolume is marked received).

use std::fs::File;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Files are handed over in batches: one wake-up of the thread per batch.
const BATCH: usize = 128;

enum Msg {
    Close(Vec<File>),
    Barrier(SyncSender<()>),
}

/// Closes files in the background.
pub struct Closer {
    tx: Option<SyncSender<Msg>>,
    batch: Mutex<Vec<File>>,
    thread: Option<JoinHandle<()>>,
}

impl Closer {
    /// Starts the closing thread; without one, files close in place.
    pub fn new() -> Closer {
        if std::env::var_os("RRECEIVE_SYNC_CLOSE").is_some() {
            return Closer {
                tx: None,
                batch: Mutex::new(Vec::new()),
                thread: None,
            };
        }
        let (tx, rx) = sync_channel::<Msg>(64);
        match std::thread::Builder::new()
            .name("rreceive-close".into())
            .spawn(move || run(rx))
        {
            Ok(t) => Closer {
                tx: Some(tx),
                batch: Mutex::new(Vec::with_capacity(BATCH)),
                thread: Some(t),
            },
            Err(_) => Closer {
                tx: None,
                batch: Mutex::new(Vec::new()),
                thread: None,
            },
        }
    }

    /// Closes `f`, later.
    pub fn close(&self, f: File) {
        let Some(tx) = &self.tx else { return };
        let Ok(mut b) = self.batch.lock() else { return };
        b.push(f);
        if b.len() >= BATCH {
            let full = std::mem::replace(&mut *b, Vec::with_capacity(BATCH));
            // If the thread is gone the files come back and close here.
            let _ = tx.send(Msg::Close(full));
        }
    }

    fn send_batch(&self) {
        let Some(tx) = &self.tx else { return };
        if let Ok(mut b) = self.batch.lock() {
            if !b.is_empty() {
                let _ = tx.send(Msg::Close(std::mem::take(&mut *b)));
            }
        }
    }

    /// Waits until every file handed over so far is closed.
    pub fn wait(&self) {
        self.send_batch();
        if let Some(tx) = &self.tx {
            let (done_tx, done_rx) = sync_channel(1);
            if tx.send(Msg::Barrier(done_tx)).is_ok() {
                let _ = done_rx.recv();
            }
        }
    }
}

impl Default for Closer {
    fn default() -> Self {
        Closer::new()
    }
}

fn run(rx: Receiver<Msg>) {
    for m in rx {
        match m {
            Msg::Close(f) => drop(f),
            Msg::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.send_batch();
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
