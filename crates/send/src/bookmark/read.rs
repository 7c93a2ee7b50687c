//! Reading a bookmark: checked whole when opened (magic, version, end
//! mark, crc32c, header, index), then its tree blocks read on demand
//! through [`BlockSource`] from its frames ([`super::frames`]).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use btrfs_disk::block::{Block, Expect};
use btrfs_disk::error::{Error, Result, TreeBlockError};
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::objectid;
use btrfs_disk::subvol::{SubvolLink, Subvolume};
use btrfs_disk::{BlockSource, Tree};

use super::error::BookmarkError;
use super::format::{
    Entry, Header, Trailer, INDEX_ENTRY, MAGIC, PREFIX, SUM_FROM_END, TRAILER, VERSION,
};
use super::frames::Frames;

/// A bookmark, checked and open: its snapshot's identity, and its fs tree
/// as a [`BlockSource`].
pub struct Bookmark {
    path: PathBuf,
    header: Header,
    /// The snapshot as the filesystem had it.
    subvol: Subvolume,
    /// Sorted by address.
    index: Vec<Entry>,
    frames: Frames,
    /// The file's length.
    len: u64,
}

impl std::fmt::Debug for Bookmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bookmark")
            .field("path", &self.path)
            .field("uuid", &self.header.uuid)
            .finish()
    }
}

impl Bookmark {
    /// Opens the bookmark at `path` and checks it whole.
    pub fn open(path: &Path) -> std::result::Result<Bookmark, BookmarkError> {
        let io = |source| BookmarkError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.is_dir() {
            return Err(BookmarkError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut prefix = [0u8; PREFIX];
        let got = read_up_to(&mut file, &mut prefix).map_err(io)?;
        if got < MAGIC.len() || &prefix[..8] != MAGIC {
            return Err(BookmarkError::NotABookmark {
                path: path.to_path_buf(),
            });
        }
        let truncated = || BookmarkError::Truncated {
            path: path.to_path_buf(),
            len,
        };
        if got < PREFIX {
            return Err(truncated());
        }
        let version = u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        if version != VERSION {
            return Err(BookmarkError::Version {
                path: path.to_path_buf(),
                found: version,
            });
        }
        let header_len = u64::from(u32::from_le_bytes([
            prefix[12], prefix[13], prefix[14], prefix[15],
        ]));
        if len < PREFIX as u64 + header_len + TRAILER as u64 {
            return Err(truncated());
        }
        let mut tail = [0u8; TRAILER];
        file.read_exact_at(&mut tail, len - TRAILER as u64)
            .map_err(io)?;
        let trailer = Trailer::decode(&tail).ok_or_else(truncated)?;
        // SAFETY: bookmarks are replaced by rename, never changed in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let body = usize::try_from(len - SUM_FROM_END as u64)
            .ok()
            .and_then(|end| map.get(..end))
            .ok_or_else(truncated)?;
        if crc32c::crc32c(body) != trailer.crc {
            return Err(BookmarkError::Corrupt {
                path: path.to_path_buf(),
                len,
            });
        }
        let malformed = |why: String| BookmarkError::Malformed {
            path: path.to_path_buf(),
            why,
        };
        let mut hb = vec![0u8; header_len as usize];
        file.read_exact_at(&mut hb, PREFIX as u64).map_err(io)?;
        let header = Header::decode(&hb).map_err(|f| malformed(f.to_string()))?;
        let index = read_index(&file, len, &trailer).map_err(malformed)?;
        let subvol = subvolume_of(&header);
        let mut list: Vec<(u64, u32)> = index.iter().map(|e| (e.frame, e.frame_len)).collect();
        list.sort_unstable();
        list.dedup();
        if list.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(malformed("two frames start at one byte".into()));
        }
        let frames = Frames::new(
            map,
            list,
            header.nodesize as usize,
            header.metadata_fsid,
            header.csum,
        )
        .map_err(io)?;
        Ok(Bookmark {
            path: path.to_path_buf(),
            header,
            subvol,
            index,
            frames,
            len,
        })
    }

    /// Whether `path` is a file that starts as a bookmark does (a quick
    /// look, to tell a bookmark given where a snapshot is asked for).
    pub fn sniff(path: &Path) -> bool {
        let mut magic = [0u8; 8];
        std::fs::metadata(path).is_ok_and(|m| m.is_file())
            && File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
            && &magic == MAGIC
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What it records of its snapshot and filesystem.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Its snapshot, as the filesystem had it when the bookmark was
    /// written (its tree read through the bookmark, see [`Bookmark::tree`]).
    pub fn subvolume(&self) -> &Subvolume {
        &self.subvol
    }

    /// The size of the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no tree block (never: a tree has a root).
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// How many tree blocks it holds.
    pub fn blocks(&self) -> usize {
        self.index.len()
    }

    /// The snapshot's fs tree, read from the bookmark.
    pub fn tree(&self) -> Tree<'_> {
        let r = self.header.root;
        Tree::new(self, self.subvol.id, r.bytenr, r.generation, r.level)
    }

    /// How messages name it: the file and its snapshot.
    pub fn label(&self) -> String {
        format!(
            "bookmark {} of {}",
            self.path.display(),
            self.subvol.label()
        )
    }

    /// Whether it can be the parent of a send of `sv` from `fs`: of the
    /// same filesystem, of `sv`'s lineage (unless `any`), and not newer.
    pub fn check_parent_of(
        &self,
        fs: &Filesystem,
        sv: &Subvolume,
        any: bool,
    ) -> std::result::Result<(), BookmarkError> {
        let path = self.path.clone();
        let snapshot = self.subvol.label();
        if self.header.fsid != fs.fsid() {
            return Err(BookmarkError::OtherFilesystem {
                path,
                snapshot,
                fsid: self.header.fsid,
                this: fs.fsid(),
            });
        }
        // The source's subvolumes are read only when a chain must link them.
        let of_lineage = || {
            crate::lineage::related(sv, &self.subvol)
                || crate::lineage::joins(sv, &fs.subvolumes().unwrap_or_default(), &self.subvol)
        };
        if !any && !of_lineage() {
            return Err(BookmarkError::Unrelated {
                path,
                snapshot,
                uuid: self.header.uuid,
                sent: sv.label(),
            });
        }
        if self.header.uuid != sv.uuid && self.subvol.ctransid > sv.ctransid {
            return Err(BookmarkError::Newer {
                path,
                snapshot,
                ctransid: self.subvol.ctransid,
                sent: sv.label(),
                sent_ctransid: sv.ctransid,
            });
        }
        Ok(())
    }
}

impl Bookmark {
    /// The block `e` asks for, checked.
    fn block(&self, e: &Expect) -> Result<Block> {
        let bad = |reason: TreeBlockError| Error::BadTreeBlock {
            logical: e.logical,
            tree: e.tree,
            reason,
        };
        let at = self
            .index
            .binary_search_by_key(&e.logical, |x| x.logical)
            .map_err(|_| bad(TreeBlockError::Missing))?;
        let entry = self.index[at];
        let n = self
            .frames
            .ordinal(entry.frame)
            .ok_or_else(|| bad(TreeBlockError::Missing))?;
        let frame = self.frames.get(n).map_err(|why| Error::Io {
            path: self.path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
        })?;
        let invalid = |r| bad(TreeBlockError::Invalid(Box::new(r)));
        match frame.get(entry.slot as usize) {
            Some(Ok(b)) if b.bytenr() == e.logical => {
                b.expect(e).map(|()| b.clone()).map_err(invalid)
            }
            Some(Ok(b)) => Block::check(
                b.bytes_arc(),
                e,
                &self.header.metadata_fsid,
                self.header.csum,
            )
            .map_err(invalid),
            Some(Err(raw)) => {
                Block::check(raw.clone(), e, &self.header.metadata_fsid, self.header.csum)
                    .map_err(invalid)
            }
            None => Err(bad(TreeBlockError::Missing)),
        }
    }
}

impl BlockSource for Bookmark {
    fn tree_block(&self, e: &Expect) -> Result<Block> {
        // What went wrong is in the file: its name goes with the error.
        self.block(e).map_err(|err| match err {
            Error::Io { .. } => err,
            other => Error::Io {
                path: self.path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the bookmark's {other}"),
                ),
            },
        })
    }
}

/// Reads into `buf` until it is full or the file ends; how much was read.
fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The index the trailer points at, checked: in the file, whole entries
/// as many as the trailer says, sorted by address.
fn read_index(f: &File, len: u64, t: &Trailer) -> std::result::Result<Vec<Entry>, String> {
    let end = t.index.checked_add(t.index_len);
    if t.index < PREFIX as u64 || end.is_none_or(|e| e > len - TRAILER as u64) {
        return Err(format!(
            "its index ({} bytes at byte {}) is not inside the file",
            t.index_len, t.index
        ));
    }
    let want = usize::try_from(t.blocks)
        .ok()
        .and_then(|b| b.checked_mul(INDEX_ENTRY))
        .filter(|&n| n <= 1 << 34)
        .ok_or_else(|| format!("it claims {} tree blocks", t.blocks))?;
    let mut raw = vec![0u8; t.index_len as usize];
    f.read_exact_at(&mut raw, t.index)
        .map_err(|e| btrfs_text::plain_io(&e))?;
    let data = zstd::bulk::decompress(&raw, want).map_err(|e| format!("its index: {e}"))?;
    if data.len() != want || want == 0 {
        return Err(format!(
            "its index holds {} bytes for {} tree blocks",
            data.len(),
            t.blocks
        ));
    }
    let index: Vec<Entry> = data.chunks(INDEX_ENTRY).map(Entry::decode).collect();
    if index.windows(2).any(|w| w[0].logical >= w[1].logical) {
        return Err("its index is not sorted by address".into());
    }
    for e in &index {
        let frame_end = e.frame.checked_add(u64::from(e.frame_len));
        if e.frame < PREFIX as u64 || frame_end.is_none_or(|x| x > t.index) {
            return Err(format!("block {} points outside the frames", e.logical));
        }
    }
    Ok(index)
}

/// The snapshot a bookmark describes, as a subvolume of the filesystem.
fn subvolume_of(h: &Header) -> Subvolume {
    let name = h
        .path
        .rsplit(|&c| c == b'/')
        .next()
        .unwrap_or_default()
        .to_vec();
    Subvolume {
        id: h.id,
        key_offset: h.otransid,
        root: h.root,
        flags: h.flags,
        refs: 1,
        uuid: h.uuid,
        parent_uuid: h.parent_uuid,
        received_uuid: h.received_uuid,
        ctransid: h.ctransid,
        otransid: h.otransid,
        stransid: h.stransid,
        rtransid: h.rtransid,
        ctime: h.times[0],
        otime: h.times[1],
        stime: h.times[2],
        rtime: h.times[3],
        link: Some(SubvolLink {
            parent: objectid::FS_TREE,
            dirid: 0,
            sequence: 0,
            name,
        }),
        path: Some(h.path.clone()),
    }
}
