//! Writing a bookmark: the snapshot's fs tree walked depth first from its
//! root, every block as read (checksum checked), packed into compressed
//! frames, under a temporary name renamed into place once whole and
//! synced, so that a stop never leaves half a bookmark under its name.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use btrfs_disk::block::Block;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::Tree;
use sha2::{Digest, Sha256};

use super::error::BookmarkError;
use super::format::{Entry, Header, FRAME_BLOCKS, MAGIC, VERSION};

/// zstd's level for frames: small files at a fraction of a send's time.
const LEVEL: i32 = 6;

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
    let mut out = Hashing {
        w: BufWriter::with_capacity(1 << 20, file),
        sum: Sha256::new(),
        at: 0,
    };
    out.put(MAGIC).map_err(io)?;
    out.put(&VERSION.to_le_bytes()).map_err(io)?;
    out.put(&(header.len() as u32).to_le_bytes()).map_err(io)?;
    out.put(&header).map_err(io)?;
    let tree = fs.fs_tree(sv);
    let mut frames = Frames {
        out,
        pending: Vec::with_capacity(FRAME_BLOCKS * fs.nodesize()),
        logicals: Vec::with_capacity(FRAME_BLOCKS),
        index: Vec::new(),
        tree_bytes: 0,
    };
    let root = tree.root_block().map_err(read)?;
    walk(&tree, root, &mut frames, &read, &io)?;
    frames.flush().map_err(io)?;
    let Frames {
        mut out,
        mut index,
        tree_bytes,
        ..
    } = frames;
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
    let sum = out.sum.clone().finalize();
    out.put(&sum).map_err(io)?;
    out.put(MAGIC).map_err(io)?;
    out.w.flush().map_err(io)?;
    Ok(Written {
        blocks: index.len() as u64,
        tree_bytes,
        bytes: out.at,
    })
}

/// Every block under `block` (itself first) into `frames`.
fn walk(
    tree: &Tree<'_>,
    block: Block,
    frames: &mut Frames<'_>,
    read: &dyn Fn(btrfs_disk::Error) -> BookmarkError,
    io: &dyn Fn(std::io::Error) -> BookmarkError,
) -> Result<(), BookmarkError> {
    frames.push(&block).map_err(io)?;
    if block.level() == 0 {
        return Ok(());
    }
    for slot in 0..block.nritems() {
        let child = tree.child(&block, slot).map_err(read)?;
        walk(tree, child, frames, read, io)?;
    }
    Ok(())
}

/// A writer that hashes what it writes and counts it.
struct Hashing<'f> {
    w: BufWriter<&'f File>,
    sum: Sha256,
    at: u64,
}

impl Hashing<'_> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.w.write_all(b)?;
        self.sum.update(b);
        self.at += b.len() as u64;
        Ok(())
    }
}

/// Blocks gathered into frames as they come.
struct Frames<'f> {
    out: Hashing<'f>,
    pending: Vec<u8>,
    logicals: Vec<u64>,
    index: Vec<Entry>,
    tree_bytes: u64,
}

impl Frames<'_> {
    fn push(&mut self, b: &Block) -> std::io::Result<()> {
        self.pending.extend_from_slice(b.bytes());
        self.logicals.push(b.bytenr());
        self.tree_bytes += b.bytes().len() as u64;
        if self.logicals.len() == FRAME_BLOCKS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.logicals.is_empty() {
            return Ok(());
        }
        let packed = zstd::bulk::compress(&self.pending, LEVEL)?;
        let frame = self.out.at;
        self.out.put(&packed)?;
        for (slot, &logical) in self.logicals.iter().enumerate() {
            self.index.push(Entry {
                logical,
                frame,
                frame_len: packed.len() as u32,
                slot: slot as u32,
            });
        }
        self.pending.clear();
        self.logicals.clear();
        Ok(())
    }
}
