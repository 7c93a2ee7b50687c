//! File data read ahead on other threads, written in the walk's order.
//!
//! Reading a large extent's data out of the image and checking its sectors
//! is most of a data-heavy send. The walk queues such a read as a
//! [`Pending`] WRITE instead of doing it; [`Readers`] (one thread per core)
//! take the reads in order, and the writer waits for each one when its turn
//! in the stream comes. The commands and their order are the walk's, so the
//! stream is the same whatever the timing. Reads in flight are bounded by
//! what the channel to the writer holds (bytes, see `sink`).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use btrfs_disk::data::Inode;
use btrfs_disk::error::Error;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::FileExtentItem;
use btrfs_disk::Tree;

use super::error::SendError;

/// Reads at least this long go to the readers; shorter ones cost less
/// than handing them over.
pub(crate) const AHEAD_MIN: u64 = 128 << 10;

/// One read of file data through an EXTENT_DATA item of the send snapshot.
pub(crate) struct DataRead {
    pub(crate) inode: Inode,
    /// The item's key offset.
    pub(crate) item_off: u64,
    /// The item's bytes.
    pub(crate) item: Vec<u8>,
    /// Bytes of the item's range before the first one read.
    pub(crate) skip: u64,
    /// The inode and path the walk was at, for the error.
    pub(crate) pos: Option<(u64, String)>,
}

/// How a failed read is reported, with the walk's position at the time.
pub(crate) type Explain<'a> = dyn Fn(Option<(u64, String)>, Error) -> SendError + Sync + 'a;

enum Slot {
    Queued(DataRead, Vec<u8>),
    Reading,
    Done(Result<(Vec<u8>, Vec<u32>), SendError>),
    Taken,
}

/// A WRITE whose data is being read (see the module).
pub(crate) struct Pending {
    pub(crate) path: Arc<[u8]>,
    pub(crate) offset: u64,
    /// Bytes of data.
    pub(crate) len: u64,
    slot: Mutex<Slot>,
    done: Condvar,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Two pending WRITEs are the same one.
impl PartialEq for Pending {
    fn eq(&self, other: &Pending) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Pending {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pending {
    /// The WRITE of `buf.len()` bytes at `offset` of `path`, once `read` fills `buf`.
    pub(crate) fn new(path: Arc<[u8]>, offset: u64, read: DataRead, buf: Vec<u8>) -> Pending {
        Pending {
            path,
            offset,
            len: buf.len() as u64,
            slot: Mutex::new(Slot::Queued(read, buf)),
            done: Condvar::new(),
        }
    }

    /// The data and its sectors' crc32c, once read (waits for them).
    pub(crate) fn wait(&self) -> Result<(Vec<u8>, Vec<u32>), SendError> {
        let mut s = lock(&self.slot);
        loop {
            match std::mem::replace(&mut *s, Slot::Taken) {
                Slot::Done(r) => return r,
                Slot::Taken => {
                    return Err(SendError::Walk {
                        subvol: String::new(),
                    })
                }
                other => {
                    *s = other;
                    s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }

    fn finish(&self, r: Result<(Vec<u8>, Vec<u32>), SendError>) {
        *lock(&self.slot) = Slot::Done(r);
        self.done.notify_all();
    }
}

/// A read taken by a reader: when it is dropped, the read is no longer
/// busy, and if it was left unfinished (the reader panicked) it is failed,
/// so that the writer does not wait for it forever.
struct Taken<'r> {
    readers: &'r Readers,
    read: Arc<Pending>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.read.slot);
        if matches!(*s, Slot::Reading) {
            *s = Slot::Done(Err(SendError::Walk {
                subvol: String::new(),
            }));
            self.read.done.notify_all();
        }
        drop(s);
        let mut q = lock(&self.readers.queue);
        q.busy -= 1;
        if q.busy == 0 {
            self.readers.idle.notify_all();
        }
    }
}

#[derive(Default)]
struct Queue {
    reads: VecDeque<Arc<Pending>>,
    /// Reads queued or being read.
    busy: usize,
    closed: bool,
}

/// The reads queued for the reader threads.
#[derive(Default)]
pub(crate) struct Readers {
    queue: Mutex<Queue>,
    more: Condvar,
    idle: Condvar,
}

impl Readers {
    /// The number of reader threads: one per core, at most 8.
    pub(crate) fn threads() -> usize {
        btrfs_disk::data::worker_threads()
    }

    /// Queues `p` for a reader.
    pub(crate) fn queue(&self, p: Arc<Pending>) {
        let mut q = lock(&self.queue);
        q.reads.push_back(p);
        q.busy += 1;
        drop(q);
        self.more.notify_one();
    }

    /// Waits until every read queued so far is done.
    pub(crate) fn settle(&self) {
        let mut q = lock(&self.queue);
        while q.busy > 0 {
            q = self.idle.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// No more reads come; the readers end once the queue is empty.
    pub(crate) fn close(&self) {
        lock(&self.queue).closed = true;
        self.more.notify_all();
    }

    /// One reader: reads from `tree` of `fs` what is queued, in order,
    /// until the queue is closed and empty.
    pub(crate) fn serve(&self, fs: &Filesystem, tree: &Tree<'_>, explain: &Explain<'_>) {
        while let Some(read) = self.next() {
            let p = Taken {
                readers: self,
                read,
            };
            let slot = std::mem::replace(&mut *lock(&p.read.slot), Slot::Reading);
            let Slot::Queued(read, mut buf) = slot else {
                continue;
            };
            let r = FileExtentItem::parse(&read.item)
                .map_err(Error::bad_item(tree.id, extent_key(&read)))
                .and_then(|fe| {
                    fs.read_extent_piece(tree, &read.inode, read.item_off, &fe, read.skip, &mut buf)
                });
            p.read
                .finish(r.map(|sums| (buf, sums)).map_err(|e| explain(read.pos, e)));
        }
    }

    fn next(&self) -> Option<Arc<Pending>> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(p) = q.reads.pop_front() {
                return Some(p);
            }
            if q.closed {
                return None;
            }
            q = self.more.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn extent_key(read: &DataRead) -> btrfs_disk::Key {
    btrfs_disk::Key::new(
        read.inode.ino,
        btrfs_disk::items::key_type::EXTENT_DATA,
        read.item_off,
    )
}
