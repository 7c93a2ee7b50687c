//! Writing a bookmark: the snapshot's fs tree walked depth first from its
//! root, every block as read (checksum checked), packed into compressed
//! frames (compressed on a thread per core), under a temporary name renamed into place once whole and
//! synced, so that a stop never leaves half a bookmark under its name.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};

use btrfs_disk::block::Block;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::Tree;

use super::error::BookmarkError;
use super::format::{Entry, Header, FRAME_BLOCKS, MAGIC, VERSION};

/// zstd's level for frames: level 1 compresses four times as fast as 6
/// for a file 5 % larger.
const LEVEL: i32 = 1;

/// What writing a bookmark made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Tree blocks kept.
    pub blocks: u64,
    /// Their bytes, uncompressed.
    pub tree_bytes: u64,
    /// The file's size.
    pub bytes: u64,
}

/// Writes a bookmark of the read-only snapshot `sv` of `fs` to `path`.
pub fn write(fs: &Filesystem, sv: &Subvolume, path: &Path) -> Result<Written, BookmarkError> {
    if !sv.is_readonly() {
        return Err(BookmarkError::NotReadOnly {
            snapshot: sv.label(),
        });
    }
    let io = |source| BookmarkError::Io {
        path: path.to_path_buf(),
        source,
    };
    remove_stale(path);
    let tmp = temp_name(path);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    let r = fill(fs, sv, &file, path);
    let done = r.and_then(|w| {
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename lasts once the directory does.
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(w)
    });
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// The start of the temporary names of bookmarks of `path`.
fn temp_prefix(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    format!(".{}.tmp-", name.unwrap_or_else(|| "bookmark".into()))
}

/// `path` with a hidden temporary name beside it.
fn temp_name(path: &Path) -> PathBuf {
    path.with_file_name(format!("{}{}", temp_prefix(path), std::process::id()))
}

/// Removes what killed writers of `path` left: temporary names whose
/// process is gone.
fn remove_stale(path: &Path) {
    let prefix = temp_prefix(path);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Writes the whole bookmark of `sv` into `file` (for `path`).
fn fill(
    fs: &Filesystem,
    sv: &Subvolume,
    file: &File,
    path: &Path,
) -> Result<Written, BookmarkError> {
    let io = |source| BookmarkError::Io {
        path: path.to_path_buf(),
        source,
    };
    let read = |source| BookmarkError::Read {
        snapshot: sv.label(),
        source,
    };
    let sb = fs.superblock();
    let header = Header {
        fsid: fs.fsid(),
        metadata_fsid: sb.metadata_fsid(),
        id: sv.id,
        flags: sv.flags,
        uuid: sv.uuid,
        parent_uuid: sv.parent_uuid,
        received_uuid: sv.received_uuid,
        ctransid: sv.ctransid,
        otransid: sv.otransid,
        stransid: sv.stransid,
        rtransid: sv.rtransid,
        times: [sv.ctime, sv.otime, sv.stime, sv.rtime],
        root: sv.root,
        csum: fs.csum_type(),
        nodesize: fs.nodesize() as u32,
        sectorsize: fs.sectorsize() as u32,
        fs_generation: fs.generation(),
        path: sv.path.clone().unwrap_or_default(),
    }
    .encode();
    let mut out = Summing {
        w: BufWriter::with_capacity(1 << 20, file),
        crc: 0,
        at: 0,
    };
    out.put(MAGIC).map_err(io)?;
    out.put(&VERSION.to_le_bytes()).map_err(io)?;
    out.put(&(header.len() as u32).to_le_bytes()).map_err(io)?;
    out.put(&header).map_err(io)?;
    let tree = fs.fs_tree(sv);
    let root = tree.root_block().map_err(read)?;
    let nodesize = fs.nodesize();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 8));
    let (job_tx, job_rx) = mpsc::sync_channel::<Job>(workers * 2);
    let job_rx = Mutex::new(job_rx);
    let (walked, written, tree_bytes) = std::thread::scope(|s| {
        let (done_tx, done_rx) = mpsc::sync_channel::<Done>(workers * 2);
        for _ in 0..workers {
            let (job_rx, done_tx) = (&job_rx, done_tx.clone());
            s.spawn(move || compress_frames(job_rx, done_tx));
        }
        drop(done_tx);
        let writer = s.spawn(move || write_frames(out, done_rx));
        let mut gather = Gather {
            tx: job_tx,
            raw: Vec::with_capacity(FRAME_BLOCKS * nodesize),
            logicals: Vec::with_capacity(FRAME_BLOCKS),
            seq: 0,
            tree_bytes: 0,
        };
        let walked = walk(&tree, root, &mut gather, &read).map(|()| gather.flush());
        let tree_bytes = gather.tree_bytes;
        drop(gather);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the bookmark's writer panicked")));
        (walked, written, tree_bytes)
    });
    walked?;
    let (mut out, mut index) = written.map_err(io)?;
    index.sort_unstable_by_key(|e| e.logical);
    let mut raw = Vec::with_capacity(index.len() * super::format::INDEX_ENTRY);
    for e in &index {
        e.encode(&mut raw);
    }
    let packed = zstd::bulk::compress(&raw, LEVEL).map_err(io)?;
    let index_at = out.at;
    out.put(&packed).map_err(io)?;
    out.put(&index_at.to_le_bytes()).map_err(io)?;
    out.put(&(packed.len() as u64).to_le_bytes()).map_err(io)?;
    out.put(&(index.len() as u64).to_le_bytes()).map_err(io)?;
    let crc = out.crc;
    out.put(&crc.to_le_bytes()).map_err(io)?;
    out.put(&0u32.to_le_bytes()).map_err(io)?;
    out.put(MAGIC).map_err(io)?;
    out.w.flush().map_err(io)?;
    Ok(Written {
        blocks: index.len() as u64,
        tree_bytes,
        bytes: out.at,
    })
}

/// A frame's blocks, numbered in the order they are to be written.
struct Job {
    seq: u64,
    raw: Vec<u8>,
    logicals: Vec<u64>,
}

/// A frame compressed.
struct Done {
    seq: u64,
    packed: std::io::Result<Vec<u8>>,
    logicals: Vec<u64>,
}

/// A worker: compresses the frames it takes until there are no more.
fn compress_frames(jobs: &Mutex<mpsc::Receiver<Job>>, done: mpsc::SyncSender<Done>) {
    let mut zip = zstd::bulk::Compressor::new(LEVEL);
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let packed = match zip.as_mut() {
            Ok(z) => z.compress(&job.raw),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        let d = Done {
            seq: job.seq,
            packed,
            logicals: job.logicals,
        };
        if done.send(d).is_err() {
            return;
        }
    }
}

/// The writer: the compressed frames in their order, and the index of
/// where each block went. After a failed write it still takes every frame
/// (so the walk never waits on it), and returns the failure at the end.
fn write_frames(
    mut out: Summing<'_>,
    done: mpsc::Receiver<Done>,
) -> std::io::Result<(Summing<'_>, Vec<Entry>)> {
    let mut index = Vec::new();
    let mut waiting: BTreeMap<u64, Done> = BTreeMap::new();
    let mut next = 0u64;
    let mut failed = None;
    for d in done {
        waiting.insert(d.seq, d);
        while let Some(d) = waiting.remove(&next) {
            next += 1;
            if failed.is_some() {
                continue;
            }
            let frame = out.at;
            let r = d.packed.and_then(|packed| {
                out.put(&packed)?;
                Ok(packed.len() as u32)
            });
            match r {
                Ok(frame_len) => {
                    for (slot, &logical) in d.logicals.iter().enumerate() {
                        index.push(Entry {
                            logical,
                            frame,
                            frame_len,
                            slot: slot as u32,
                        });
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((out, index)),
    }
}

/// Every block under `block` (itself first) into `frames`.
fn walk(
    tree: &Tree<'_>,
    block: Block,
    frames: &mut Gather,
    read: &dyn Fn(btrfs_disk::Error) -> BookmarkError,
) -> Result<(), BookmarkError> {
    frames.push(&block);
    if block.level() == 0 {
        return Ok(());
    }
    for slot in 0..block.nritems() {
        let child = tree.child(&block, slot).map_err(read)?;
        walk(tree, child, frames, read)?;
    }
    Ok(())
}

/// A writer that sums what it writes (crc32c) and counts it.
struct Summing<'f> {
    w: BufWriter<&'f File>,
    crc: u32,
    at: u64,
}

impl Summing<'_> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.w.write_all(b)?;
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.at += b.len() as u64;
        Ok(())
    }
}

/// Blocks gathered into frames as they come, handed to the compressors.
struct Gather {
    tx: mpsc::SyncSender<Job>,
    raw: Vec<u8>,
    logicals: Vec<u64>,
    seq: u64,
    tree_bytes: u64,
}

impl Gather {
    fn push(&mut self, b: &Block) {
        self.raw.extend_from_slice(b.bytes());
        self.logicals.push(b.bytenr());
        self.tree_bytes += b.bytes().len() as u64;
        if self.logicals.len() == FRAME_BLOCKS {
            self.flush();
        }
    }

    /// Hands the frame gathered so far on (the writer tells a failure).
    fn flush(&mut self) {
        if self.logicals.is_empty() {
            return;
        }
        let cap = self.raw.capacity();
        let job = Job {
            seq: self.seq,
            raw: std::mem::replace(&mut self.raw, Vec::with_capacity(cap)),
            logicals: std::mem::take(&mut self.logicals),
        };
        self.seq += 1;
        let _ = self.tx.send(job);
    }
}
