//! The bookmark file's layout (version 1), every integer little-endian:
//!
//! ```text
//! magic "RSENDBMK" | version u32 | header length u32 | header
//! frames: zstd frames, each up to FRAME_BLOCKS tree blocks back to back
//! index: one zstd frame of INDEX_ENTRY-byte entries, sorted by address:
//!        logical u64 | frame offset u64 | frame length u32 | slot u32
//! trailer: index offset u64 | index length u64 | blocks u64 |
//!          crc32c of every byte before it u32 | zero u32 | magic "RSENDBMK"
//! ```
//!
//! The header ([`Header`]) holds the snapshot's identity and where its
//! tree's root is; the frames hold every block of its fs tree as read
//! from the device (checksums included), in depth-first order. Owns only
//! encoding and decoding; calls nothing above the standard library.

use btrfs_disk::csum::CsumType;
use btrfs_disk::fs::RootLocation;
use btrfs_disk::items::Timespec;
use uuid::Uuid;

/// The first and last eight bytes of a bookmark.
pub(crate) const MAGIC: &[u8; 8] = b"RSENDBMK";
/// The format version this rsend writes and reads.
pub const VERSION: u32 = 1;
/// Magic, version and header length.
pub(crate) const PREFIX: usize = 16;
/// Index offset, index length, blocks, crc32c, zero, magic.
pub(crate) const TRAILER: usize = 8 + 8 + 8 + 4 + 4 + 8;
/// Where the crc32c starts, counted back from the end.
pub(crate) const SUM_FROM_END: usize = 4 + 4 + 8;
/// Tree blocks per compressed frame: a send reads a third of a parent's
/// blocks when a percent of its files changed, and decompresses whole
/// frames; two blocks cost 9 % in size against sixteen, and decompress
/// half of what four do in such a send.
pub(crate) const FRAME_BLOCKS: usize = 2;
/// The most blocks a frame may hold when read.
pub(crate) const MAX_FRAME_BLOCKS: usize = 64;
/// Bytes per index entry.
pub(crate) const INDEX_ENTRY: usize = 24;
/// The header's fixed part; the path follows.
const FIXED: usize = 214;
/// The longest path kept.
pub(crate) const MAX_PATH: usize = 4096;

/// What a bookmark records of its snapshot and filesystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The filesystem's fsid (as users see it).
    pub fsid: Uuid,
    /// The fsid its tree blocks carry (the metadata uuid, when set).
    pub metadata_fsid: Uuid,
    /// The snapshot's subvolume id.
    pub id: u64,
    /// Its root item flags (read-only).
    pub flags: u64,
    /// Its uuid, the uuid it is a snapshot of, and the uuid it was received as.
    pub uuid: Uuid,
    /// See [`Header::uuid`].
    pub parent_uuid: Uuid,
    /// See [`Header::uuid`].
    pub received_uuid: Uuid,
    /// Transids: last change, creation, send, receive.
    pub ctransid: u64,
    /// See [`Header::ctransid`].
    pub otransid: u64,
    /// See [`Header::ctransid`].
    pub stransid: u64,
    /// See [`Header::ctransid`].
    pub rtransid: u64,
    /// Change, creation, send and receive times.
    pub times: [Timespec; 4],
    /// Where its fs tree's root block is.
    pub root: RootLocation,
    /// The filesystem's checksum type, node size and sector size.
    pub csum: CsumType,
    /// See [`Header::csum`].
    pub nodesize: u32,
    /// See [`Header::csum`].
    pub sectorsize: u32,
    /// The filesystem's generation when the bookmark was written: no
    /// block or extent it names was freed before it.
    pub fs_generation: u64,
    /// The snapshot's path from the top level, as it was.
    pub path: Vec<u8>,
}

/// Why a header does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeaderFault {
    /// Shorter than its fixed part or its path.
    Short,
    /// A checksum type this reader does not know.
    Csum(u16),
    /// A node size that is not a power of two from 4 to 64 KiB.
    Nodesize(u32),
    /// A root level past the deepest tree.
    Level(u8),
}

impl std::fmt::Display for HeaderFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderFault::Short => write!(f, "its header is cut short"),
            HeaderFault::Csum(t) => write!(f, "unknown checksum type {t}"),
            HeaderFault::Nodesize(n) => write!(f, "node size {n} is not a btrfs node size"),
            HeaderFault::Level(l) => write!(f, "root level {l} is past the deepest tree"),
        }
    }
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_le_bytes)
}

fn uuid_at(b: &[u8], o: usize) -> Uuid {
    b.get(o..o + 16)
        .and_then(|s| s.try_into().ok())
        .map_or(Uuid::nil(), Uuid::from_bytes)
}

impl Header {
    /// The header as stored.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FIXED + self.path.len());
        b.extend_from_slice(self.fsid.as_bytes());
        b.extend_from_slice(self.metadata_fsid.as_bytes());
        b.extend_from_slice(self.uuid.as_bytes());
        b.extend_from_slice(self.parent_uuid.as_bytes());
        b.extend_from_slice(self.received_uuid.as_bytes());
        for v in [
            self.id,
            self.flags,
            self.ctransid,
            self.otransid,
            self.stransid,
            self.rtransid,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for t in &self.times {
            b.extend_from_slice(&t.sec.to_le_bytes());
            b.extend_from_slice(&t.nsec.to_le_bytes());
        }
        b.extend_from_slice(&self.root.bytenr.to_le_bytes());
        b.extend_from_slice(&self.root.generation.to_le_bytes());
        b.push(self.root.level);
        b.push(0);
        b.extend_from_slice(&(self.csum as u16).to_le_bytes());
        b.extend_from_slice(&self.nodesize.to_le_bytes());
        b.extend_from_slice(&self.sectorsize.to_le_bytes());
        b.extend_from_slice(&self.fs_generation.to_le_bytes());
        let path = &self.path[..self.path.len().min(MAX_PATH)];
        b.extend_from_slice(&(path.len() as u16).to_le_bytes());
        debug_assert_eq!(b.len(), FIXED);
        b.extend_from_slice(path);
        b
    }

    /// The header stored as `b`.
    pub(crate) fn decode(b: &[u8]) -> Result<Header, HeaderFault> {
        if b.len() < FIXED {
            return Err(HeaderFault::Short);
        }
        let time = |o: usize| Timespec {
            sec: u64_at(b, o) as i64,
            nsec: u32_at(b, o + 8),
        };
        let raw_csum = u16_at(b, 194);
        let csum = CsumType::from_raw(raw_csum).ok_or(HeaderFault::Csum(raw_csum))?;
        let nodesize = u32_at(b, 196);
        if !nodesize.is_power_of_two() || !(4096..=65536).contains(&nodesize) {
            return Err(HeaderFault::Nodesize(nodesize));
        }
        let level = b[192];
        if level >= 8 {
            return Err(HeaderFault::Level(level));
        }
        let path_len = usize::from(u16_at(b, FIXED - 2));
        let path = b
            .get(FIXED..FIXED + path_len)
            .ok_or(HeaderFault::Short)?
            .to_vec();
        Ok(Header {
            fsid: uuid_at(b, 0),
            metadata_fsid: uuid_at(b, 16),
            uuid: uuid_at(b, 32),
            parent_uuid: uuid_at(b, 48),
            received_uuid: uuid_at(b, 64),
            id: u64_at(b, 80),
            flags: u64_at(b, 88),
            ctransid: u64_at(b, 96),
            otransid: u64_at(b, 104),
            stransid: u64_at(b, 112),
            rtransid: u64_at(b, 120),
            times: [time(128), time(140), time(152), time(164)],
            root: RootLocation {
                bytenr: u64_at(b, 176),
                generation: u64_at(b, 184),
                level,
            },
            csum,
            nodesize,
            sectorsize: u32_at(b, 200),
            fs_generation: u64_at(b, 204),
            path,
        })
    }
}

/// Where one tree block is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its logical address.
    pub(crate) logical: u64,
    /// The offset and length of its frame.
    pub(crate) frame: u64,
    pub(crate) frame_len: u32,
    /// Its place in the frame.
    pub(crate) slot: u32,
}

impl Entry {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.logical.to_le_bytes());
        out.extend_from_slice(&self.frame.to_le_bytes());
        out.extend_from_slice(&self.frame_len.to_le_bytes());
        out.extend_from_slice(&self.slot.to_le_bytes());
    }

    pub(crate) fn decode(b: &[u8]) -> Entry {
        Entry {
            logical: u64_at(b, 0),
            frame: u64_at(b, 8),
            frame_len: u32_at(b, 16),
            slot: u32_at(b, 20),
        }
    }
}

/// The trailer's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub(crate) index: u64,
    pub(crate) index_len: u64,
    pub(crate) blocks: u64,
    /// The crc32c of every byte before it.
    pub(crate) crc: u32,
}

impl Trailer {
    /// The numbers `b` (the trailer) holds, if it ends with the magic.
    pub(crate) fn decode(b: &[u8]) -> Option<Trailer> {
        if b.len() != TRAILER || &b[TRAILER - 8..] != MAGIC {
            return None;
        }
        Some(Trailer {
            index: u64_at(b, 0),
            index_len: u64_at(b, 8),
            blocks: u64_at(b, 16),
            crc: u32_at(b, 24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_decodes_as_it_was_encoded() {
        let h = Header {
            fsid: Uuid::from_bytes([1; 16]),
            metadata_fsid: Uuid::from_bytes([2; 16]),
            id: 257,
            flags: 1,
            uuid: Uuid::from_bytes([3; 16]),
            parent_uuid: Uuid::from_bytes([4; 16]),
            received_uuid: Uuid::from_bytes([5; 16]),
            ctransid: 10,
            otransid: 11,
            stransid: 12,
            rtransid: 13,
            times: [
                Timespec { sec: -1, nsec: 2 },
                Timespec { sec: 3, nsec: 4 },
                Timespec { sec: 5, nsec: 6 },
                Timespec { sec: 7, nsec: 8 },
            ],
            root: RootLocation {
                bytenr: 30408704,
                generation: 9,
                level: 2,
            },
            csum: CsumType::Xxhash64,
            nodesize: 16384,
            sectorsize: 4096,
            fs_generation: 99,
            path: b"snaps/mon".to_vec(),
        };
        let b = h.encode();
        assert_eq!(Header::decode(&b), Ok(h.clone()));
        assert_eq!(Header::decode(&b[..b.len() - 1]), Err(HeaderFault::Short));
        let mut bad = b.clone();
        bad[196..200].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(Header::decode(&bad), Err(HeaderFault::Nodesize(5000)));
    }
}
