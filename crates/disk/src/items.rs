//! Typed views of tree items, decoded from little-endian fields on access.
//!
//! Each view's `parse` checks the item size; accessors then cannot fail.
//! Errors are [`ItemError`]s: the caller adds the tree and key.

use uuid::Uuid;

use crate::bytes::{slice_at, u16_at, u32_at, u64_at, u8_at, uuid_at};
use crate::key::Key;

pub use crate::key::{key_type, key_type_name, objectid};

fn need(data: &[u8], n: usize, what: Part) -> Result<(), ItemError> {
    if data.len() < n {
        Err(ItemError::TooShort {
            what,
            len: data.len(),
            need: n,
        })
    } else {
        Ok(())
    }
}

macro_rules! field {
    ($(#[$m:meta])* $name:ident, u64, $off:expr) => {
        $(#[$m])*
        #[inline]
        pub fn $name(&self) -> u64 { u64_at(self.0, $off).unwrap_or(0) }
    };
    ($(#[$m:meta])* $name:ident, u32, $off:expr) => {
        $(#[$m])*
        #[inline]
        pub fn $name(&self) -> u32 { u32_at(self.0, $off).unwrap_or(0) }
    };
    ($(#[$m:meta])* $name:ident, u8, $off:expr) => {
        $(#[$m])*
        #[inline]
        pub fn $name(&self) -> u8 { u8_at(self.0, $off).unwrap_or(0) }
    };
}

/// A `btrfs_timespec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timespec {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: u32,
}

impl Timespec {
    fn at(b: &[u8], off: usize) -> Timespec {
        Timespec {
            sec: u64_at(b, off).unwrap_or(0) as i64,
            nsec: u32_at(b, off + 8).unwrap_or(0),
        }
    }
}

/// Inode flags (low 32 bits of INODE_ITEM flags).
pub mod inode_flags {
    /// No data checksums.
    pub const NODATASUM: u64 = 1 << 0;
    /// No copy-on-write.
    pub const NODATACOW: u64 = 1 << 1;
    /// fs-verity enabled (first "ro flag", bit 32).
    pub const VERITY: u64 = 1 << 32;
}

/// INODE_ITEM `(ino, 1, 0)`, 160 bytes.
#[derive(Clone, Copy, Debug)]
pub struct InodeItem<'a>(&'a [u8]);

impl<'a> InodeItem<'a> {
    /// Size of an inode item.
    pub const SIZE: usize = 160;
    /// Checks the size.
    pub fn parse(data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, Self::SIZE, Part::InodeItem)?;
        Ok(InodeItem(data))
    }
    field!(/// Generation that created it.
        generation, u64, 0);
    field!(/// Transid of the last change.
        transid, u64, 8);
    field!(/// Size in bytes.
        size, u64, 16);
    field!(/// Allocated bytes.
        nbytes, u64, 24);
    field!(/// Link count.
        nlink, u32, 40);
    field!(/// Owner.
        uid, u32, 44);
    field!(/// Group.
        gid, u32, 48);
    field!(/// Type and permission bits.
        mode, u32, 52);
    field!(/// Device number for device nodes (kernel-internal major<<20 | minor).
        rdev, u64, 56);
    field!(/// Inode flags (low word) and ro flags (high word).
        flags, u64, 64);
    field!(/// Change sequence.
        sequence, u64, 72);
    /// Access time.
    pub fn atime(&self) -> Timespec {
        Timespec::at(self.0, 112)
    }
    /// Change time.
    pub fn ctime(&self) -> Timespec {
        Timespec::at(self.0, 124)
    }
    /// Modification time.
    pub fn mtime(&self) -> Timespec {
        Timespec::at(self.0, 136)
    }
    /// Birth time.
    pub fn otime(&self) -> Timespec {
        Timespec::at(self.0, 148)
    }
    /// rdev as (major, minor).
    pub fn rdev_major_minor(&self) -> (u32, u32) {
        let r = self.rdev();
        ((r >> 20) as u32, (r & 0xfffff) as u32)
    }
}

/// ROOT_ITEM `(tree_id, 132, offset)`.
#[derive(Clone, Copy, Debug)]
pub struct RootItem<'a>(&'a [u8]);

/// ROOT_ITEM flag: read-only subvolume.
pub const ROOT_SUBVOL_RDONLY: u64 = 1 << 0;
/// ROOT_ITEM flag: deletion in progress.
pub const ROOT_SUBVOL_DEAD: u64 = 1 << 48;

impl<'a> RootItem<'a> {
    /// Size of a legacy root item.
    pub const LEGACY_SIZE: usize = 239;
    /// Size of a current root item.
    pub const SIZE: usize = 439;
    /// Checks the size.
    pub fn parse(data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, Self::LEGACY_SIZE, Part::RootItem)?;
        Ok(RootItem(data))
    }
    /// The embedded (dummy) inode.
    pub fn inode(&self) -> InodeItem<'a> {
        InodeItem(self.0)
    }
    field!(/// Generation of the root block.
        generation, u64, 160);
    field!(/// Root directory inode (256).
        root_dirid, u64, 168);
    field!(/// Logical address of the root block.
        bytenr, u64, 176);
    field!(/// Bytes used.
        bytes_used, u64, 192);
    field!(/// Last snapshot transid.
        last_snapshot, u64, 200);
    field!(/// Flags (RDONLY, DEAD).
        flags, u64, 208);
    field!(/// Reference count (0 = being deleted).
        refs, u32, 216);
    field!(/// Level of the root block.
        level, u8, 238);

    /// Whether the fields after `level` are valid (current size and generation_v2 matches).
    pub fn has_v2(&self) -> bool {
        self.0.len() >= Self::SIZE && u64_at(self.0, 239) == Some(self.generation())
    }
    fn v2_u64(&self, off: usize) -> u64 {
        if self.has_v2() {
            u64_at(self.0, off).unwrap_or(0)
        } else {
            0
        }
    }
    fn v2_uuid(&self, off: usize) -> Uuid {
        if self.has_v2() {
            uuid_at(self.0, off).unwrap_or_default()
        } else {
            Uuid::nil()
        }
    }
    fn v2_time(&self, off: usize) -> Timespec {
        if self.has_v2() {
            Timespec::at(self.0, off)
        } else {
            Timespec::default()
        }
    }
    /// Subvolume uuid.
    pub fn uuid(&self) -> Uuid {
        self.v2_uuid(247)
    }
    /// uuid of the subvolume it was snapshotted from.
    pub fn parent_uuid(&self) -> Uuid {
        self.v2_uuid(263)
    }
    /// uuid of the subvolume it was received from.
    pub fn received_uuid(&self) -> Uuid {
        self.v2_uuid(279)
    }
    /// Transid of the last change.
    pub fn ctransid(&self) -> u64 {
        self.v2_u64(295)
    }
    /// Transid that created it.
    pub fn otransid(&self) -> u64 {
        self.v2_u64(303)
    }
    /// Transid of the send it was received from.
    pub fn stransid(&self) -> u64 {
        self.v2_u64(311)
    }
    /// Transid when it was received.
    pub fn rtransid(&self) -> u64 {
        self.v2_u64(319)
    }
    /// Change time.
    pub fn ctime(&self) -> Timespec {
        self.v2_time(327)
    }
    /// Creation time.
    pub fn otime(&self) -> Timespec {
        self.v2_time(339)
    }
    /// Send time.
    pub fn stime(&self) -> Timespec {
        self.v2_time(351)
    }
    /// Receive time.
    pub fn rtime(&self) -> Timespec {
        self.v2_time(363)
    }
}

/// ROOT_REF `(parent, 156, child)` or ROOT_BACKREF `(child, 144, parent)`.
#[derive(Clone, Copy, Debug)]
pub struct RootRef<'a>(&'a [u8]);

impl<'a> RootRef<'a> {
    /// Checks the size and name length.
    pub fn parse(data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, 18, Part::RootRef)?;
        let n = u16_at(data, 16).unwrap_or(0) as usize;
        need(data, 18 + n, Part::RootRefWithName)?;
        Ok(RootRef(data))
    }
    field!(/// Directory in the parent holding the entry.
        dirid, u64, 0);
    field!(/// DIR_INDEX of the entry.
        sequence, u64, 8);
    /// Entry name.
    pub fn name(&self) -> &'a [u8] {
        let n = u16_at(self.0, 16).unwrap_or(0) as usize;
        slice_at(self.0, 18, n).unwrap_or(&[])
    }
}

/// One name of an inode in a directory (INODE_REF or INODE_EXTREF entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeRef<'a> {
    /// The directory.
    pub parent: u64,
    /// The entry's DIR_INDEX.
    pub index: u64,
    /// The name.
    pub name: &'a [u8],
}

/// Parses INODE_REF `(ino, 12, parent)` data: packed {index u64, name_len u16, name}.
pub fn inode_refs(parent: u64, data: &[u8]) -> Result<Vec<InodeRef<'_>>, ItemError> {
    let mut out = Vec::new();
    let mut o = 0usize;
    while o < data.len() {
        let truncated = ItemError::Truncated {
            what: Part::InodeRef,
            offset: o,
        };
        let index = u64_at(data, o).ok_or(truncated)?;
        let n = u16_at(data, o + 8).ok_or(truncated)? as usize;
        let name = slice_at(data, o + 10, n).ok_or(ItemError::Overrun {
            what: Part::InodeRefName,
            offset: o + 10,
            len: n,
        })?;
        out.push(InodeRef {
            parent,
            index,
            name,
        });
        o += 10 + n;
    }
    Ok(out)
}

/// Parses INODE_EXTREF `(ino, 13, hash)` data: packed {parent u64, index u64, name_len u16, name}.
pub fn inode_extrefs(data: &[u8]) -> Result<Vec<InodeRef<'_>>, ItemError> {
    let mut out = Vec::new();
    let mut o = 0usize;
    while o < data.len() {
        let truncated = ItemError::Truncated {
            what: Part::InodeExtref,
            offset: o,
        };
        let parent = u64_at(data, o).ok_or(truncated)?;
        let index = u64_at(data, o + 8).ok_or(truncated)?;
        let n = u16_at(data, o + 16).ok_or(truncated)? as usize;
        let name = slice_at(data, o + 18, n).ok_or(ItemError::Overrun {
            what: Part::InodeExtrefName,
            offset: o + 18,
            len: n,
        })?;
        out.push(InodeRef {
            parent,
            index,
            name,
        });
        o += 18 + n;
    }
    Ok(out)
}

/// Directory entry type values.
pub mod file_type {
    /// Regular file.
    pub const REG: u8 = 1;
    /// Directory.
    pub const DIR: u8 = 2;
    /// Character device.
    pub const CHR: u8 = 3;
    /// Block device.
    pub const BLK: u8 = 4;
    /// FIFO.
    pub const FIFO: u8 = 5;
    /// Socket.
    pub const SOCK: u8 = 6;
    /// Symbolic link.
    pub const SYMLINK: u8 = 7;
    /// Extended attribute.
    pub const XATTR: u8 = 8;
}

/// One record of a DIR_ITEM, DIR_INDEX or XATTR_ITEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// What the entry points at: `(ino, INODE_ITEM, 0)` or `(subvol, ROOT_ITEM, u64::MAX)`.
    pub location: Key,
    /// Transid that made it.
    pub transid: u64,
    /// Entry type (see [`file_type`]).
    pub file_type: u8,
    /// The name.
    pub name: &'a [u8],
    /// The xattr value (empty for directory entries).
    pub data: &'a [u8],
}

/// Parses the records of a DIR_ITEM, DIR_INDEX or XATTR_ITEM (several on hash collisions).
pub fn dir_entries(data: &[u8]) -> Result<Vec<DirEntry<'_>>, ItemError> {
    let mut out = Vec::new();
    let mut o = 0usize;
    while o < data.len() {
        let truncated = ItemError::Truncated {
            what: Part::DirItem,
            offset: o,
        };
        let location = Key::parse(data, o).ok_or(truncated)?;
        let transid = u64_at(data, o + 17).ok_or(truncated)?;
        let data_len = u16_at(data, o + 25).ok_or(truncated)? as usize;
        let name_len = u16_at(data, o + 27).ok_or(truncated)? as usize;
        let file_type = u8_at(data, o + 29).ok_or(truncated)?;
        let name = slice_at(data, o + 30, name_len).ok_or(ItemError::Overrun {
            what: Part::DirItemName,
            offset: o + 30,
            len: name_len,
        })?;
        let value = slice_at(data, o + 30 + name_len, data_len).ok_or(ItemError::Overrun {
            what: Part::DirItemData,
            offset: o + 30 + name_len,
            len: data_len,
        })?;
        out.push(DirEntry {
            location,
            transid,
            file_type,
            name,
            data: value,
        });
        o += 30 + name_len + data_len;
    }
    Ok(out)
}

/// Compression of an extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is.
    None,
    /// zlib.
    Zlib,
    /// LZO1X in btrfs's per-sector framing.
    Lzo,
    /// zstd.
    Zstd,
}

/// File extent types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtentKind {
    /// Data stored in the item.
    Inline,
    /// Data in a disk extent (disk_bytenr 0 = hole).
    Regular,
    /// Preallocated, reads as zeros.
    Prealloc,
}

/// EXTENT_DATA `(ino, 108, file_offset)`.
#[derive(Clone, Copy, Debug)]
pub struct FileExtentItem<'a>(&'a [u8]);

impl<'a> FileExtentItem<'a> {
    /// Offset of inline data.
    pub const INLINE_OFFSET: usize = 21;
    /// Size of a regular/prealloc item.
    pub const SIZE: usize = 53;
    /// The item's bytes, as given to [`FileExtentItem::parse`].
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// Checks size, type, compression and encryption fields.
    pub fn parse(data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, Self::INLINE_OFFSET, Part::FileExtentItem)?;
        let fe = FileExtentItem(data);
        match u8_at(data, 20).unwrap_or(u8::MAX) {
            0 => {}
            1 | 2 => need(data, Self::SIZE, Part::RegularFileExtentItem)?,
            value => return Err(ItemError::UnknownExtentType { value }),
        }
        if fe.compression_raw() > 3 {
            return Err(ItemError::UnknownCompression {
                value: fe.compression_raw(),
            });
        }
        let other_encoding = u16_at(data, 18).unwrap_or(u16::MAX);
        if fe.encryption() != 0 || other_encoding != 0 {
            return Err(ItemError::Encoded {
                encryption: fe.encryption(),
                other_encoding,
            });
        }
        Ok(fe)
    }
    field!(/// Generation that wrote it.
        generation, u64, 0);
    field!(/// Decoded size of the whole extent.
        ram_bytes, u64, 8);
    field!(/// Raw compression value.
        compression_raw, u8, 16);
    field!(/// Encryption (always 0).
        encryption, u8, 17);
    /// The compression.
    pub fn compression(&self) -> Compression {
        match self.compression_raw() {
            1 => Compression::Zlib,
            2 => Compression::Lzo,
            3 => Compression::Zstd,
            _ => Compression::None,
        }
    }
    /// The extent type.
    pub fn kind(&self) -> ExtentKind {
        match u8_at(self.0, 20) {
            Some(0) => ExtentKind::Inline,
            Some(2) => ExtentKind::Prealloc,
            _ => ExtentKind::Regular,
        }
    }
    /// Inline payload (empty for other kinds).
    pub fn inline_data(&self) -> &'a [u8] {
        match self.kind() {
            ExtentKind::Inline => self.0.get(Self::INLINE_OFFSET..).unwrap_or(&[]),
            _ => &[],
        }
    }
    field!(/// Logical start of the disk extent (0 = hole).
        disk_bytenr, u64, 21);
    field!(/// Size of the disk extent.
        disk_num_bytes, u64, 29);
    field!(/// Offset into the decoded extent where this file range starts.
        offset, u64, 37);
    field!(/// Bytes of the file this item covers.
        num_bytes, u64, 45);
}

/// Extent item flags.
pub mod extent_flags {
    /// Data extent.
    pub const DATA: u64 = 1;
    /// Tree block.
    pub const TREE_BLOCK: u64 = 2;
    /// Full backrefs.
    pub const FULL_BACKREF: u64 = 0x100;
}

/// A backref of an extent, inline or keyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackRef {
    /// Tree block referenced by tree `root`.
    TreeBlock {
        /// The tree.
        root: u64,
    },
    /// Tree block referenced by parent block `parent`.
    SharedBlock {
        /// The parent block's logical address.
        parent: u64,
    },
    /// Data referenced by a file.
    ExtentData {
        /// The subvolume.
        root: u64,
        /// The inode.
        objectid: u64,
        /// File offset minus the extent offset.
        offset: u64,
        /// Number of references.
        count: u32,
    },
    /// Data referenced from parent block `parent`.
    SharedData {
        /// The parent block's logical address.
        parent: u64,
        /// Number of references.
        count: u32,
    },
    /// Simple-quota owner.
    Owner {
        /// The owning subvolume.
        root: u64,
    },
}

/// EXTENT_ITEM `(bytenr, 168, num_bytes)` or METADATA_ITEM `(bytenr, 169, level)`.
#[derive(Clone, Copy, Debug)]
pub struct ExtentItem<'a> {
    data: &'a [u8],
    skinny: bool,
}

impl<'a> ExtentItem<'a> {
    /// Checks the size; `item_type` says EXTENT_ITEM or METADATA_ITEM.
    pub fn parse(item_type: u8, data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, 24, Part::ExtentItem)?;
        Ok(ExtentItem {
            data,
            skinny: item_type == key_type::METADATA_ITEM,
        })
    }
    /// Reference count.
    pub fn refs(&self) -> u64 {
        u64_at(self.data, 0).unwrap_or(0)
    }
    /// Generation.
    pub fn generation(&self) -> u64 {
        u64_at(self.data, 8).unwrap_or(0)
    }
    /// Flags (see [`extent_flags`]).
    pub fn flags(&self) -> u64 {
        u64_at(self.data, 16).unwrap_or(0)
    }
    /// The inline backrefs.
    pub fn inline_refs(&self) -> Result<Vec<BackRef>, ItemError> {
        let mut o = 24;
        if self.flags() & extent_flags::TREE_BLOCK != 0 && !self.skinny {
            o += 18; // tree_block_info: key + level
        }
        let d = self.data;
        let mut out = Vec::new();
        while o < d.len() {
            let t = d[o];
            let truncated = ItemError::TruncatedInlineRef {
                ref_type: t,
                offset: o,
            };
            let r64 = |off: usize| u64_at(d, o + off).ok_or(truncated);
            let (r, size) = match t {
                key_type::TREE_BLOCK_REF => (BackRef::TreeBlock { root: r64(1)? }, 9),
                key_type::SHARED_BLOCK_REF => (BackRef::SharedBlock { parent: r64(1)? }, 9),
                key_type::EXTENT_OWNER_REF => (BackRef::Owner { root: r64(1)? }, 9),
                key_type::EXTENT_DATA_REF => (
                    BackRef::ExtentData {
                        root: r64(1)?,
                        objectid: r64(9)?,
                        offset: r64(17)?,
                        count: u32_at(d, o + 25).ok_or(ItemError::Truncated {
                            what: Part::ExtentDataRef,
                            offset: o,
                        })?,
                    },
                    29,
                ),
                key_type::SHARED_DATA_REF => (
                    BackRef::SharedData {
                        parent: r64(1)?,
                        count: u32_at(d, o + 9).ok_or(ItemError::Truncated {
                            what: Part::SharedDataRef,
                            offset: o,
                        })?,
                    },
                    13,
                ),
                _ => {
                    return Err(ItemError::UnknownInlineRef {
                        ref_type: t,
                        offset: o,
                    })
                }
            };
            out.push(r);
            o += size;
        }
        Ok(out)
    }
}

/// Decodes a keyed backref item of the extent tree, if `key` is one.
pub fn keyed_backref(key: &Key, data: &[u8]) -> Result<Option<BackRef>, ItemError> {
    Ok(Some(match key.item_type {
        key_type::TREE_BLOCK_REF => BackRef::TreeBlock { root: key.offset },
        key_type::SHARED_BLOCK_REF => BackRef::SharedBlock { parent: key.offset },
        key_type::EXTENT_DATA_REF => {
            need(data, 28, Part::ExtentDataRef)?;
            BackRef::ExtentData {
                root: u64_at(data, 0).unwrap_or(0),
                objectid: u64_at(data, 8).unwrap_or(0),
                offset: u64_at(data, 16).unwrap_or(0),
                count: u32_at(data, 24).unwrap_or(0),
            }
        }
        key_type::SHARED_DATA_REF => {
            need(data, 4, Part::SharedDataRef)?;
            BackRef::SharedData {
                parent: key.offset,
                count: u32_at(data, 0).unwrap_or(0),
            }
        }
        _ => return Ok(None),
    }))
}

/// The EXTENT_DATA_REF key offset (kernel `hash_extent_data_ref`).
pub fn extent_data_ref_hash(root: u64, ino: u64, offset: u64) -> u64 {
    use crate::csum::crc32c_raw;
    let high = crc32c_raw(!0, &root.to_le_bytes());
    let low = crc32c_raw(crc32c_raw(!0, &ino.to_le_bytes()), &offset.to_le_bytes());
    (u64::from(high) << 31) ^ u64::from(low)
}

/// VERITY_DESC_ITEM `(ino, 36, 0)`.
#[derive(Clone, Copy, Debug)]
pub struct VerityDescriptorItem<'a>(&'a [u8]);

impl<'a> VerityDescriptorItem<'a> {
    /// Checks the size.
    pub fn parse(data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, 25, Part::VerityDescriptorItem)?;
        Ok(VerityDescriptorItem(data))
    }
    field!(/// Size of the fs-verity descriptor.
        size, u64, 0);
    field!(/// Encryption (0).
        encryption, u8, 24);
}

/// The subvolume ids of a UUID tree item.
pub fn uuid_subvols(data: &[u8]) -> Result<Vec<u64>, ItemError> {
    if !data.len().is_multiple_of(8) {
        return Err(ItemError::UuidItemSize { len: data.len() });
    }
    Ok(data.chunks_exact(8).filter_map(|c| u64_at(c, 0)).collect())
}

/// The UUID tree key for `uuid` and `item_type` (251 or 252).
pub fn uuid_key(uuid: &Uuid, item_type: u8) -> Key {
    let b = uuid.as_bytes();
    Key::new(
        u64_at(b, 0).unwrap_or(0),
        item_type,
        u64_at(b, 8).unwrap_or(0),
    )
}

/// DEV_ITEM `(1, 216, devid)` in the chunk tree.
#[derive(Clone, Copy, Debug)]
pub struct DevItem<'a>(&'a [u8]);

impl<'a> DevItem<'a> {
    /// Checks the size.
    pub fn parse(data: &'a [u8]) -> Result<Self, ItemError> {
        need(data, 98, Part::DevItem)?;
        Ok(DevItem(data))
    }
    field!(/// devid.
        devid, u64, 0);
    field!(/// Size of the device.
        total_bytes, u64, 8);
    /// Device uuid.
    pub fn uuid(&self) -> Uuid {
        uuid_at(self.0, 0x42).unwrap_or_default()
    }
    /// Filesystem uuid.
    pub fn fsid(&self) -> Uuid {
        uuid_at(self.0, 0x52).unwrap_or_default()
    }
}

/// The on-disk structure, or part of one, that an [`ItemError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// An INODE_ITEM.
    InodeItem,
    /// A ROOT_ITEM.
    RootItem,
    /// A ROOT_REF or ROOT_BACKREF.
    RootRef,
    /// A ROOT_REF or ROOT_BACKREF with its name.
    RootRefWithName,
    /// An INODE_REF record.
    InodeRef,
    /// The name of an INODE_REF record.
    InodeRefName,
    /// An INODE_EXTREF record.
    InodeExtref,
    /// The name of an INODE_EXTREF record.
    InodeExtrefName,
    /// A DIR_ITEM, DIR_INDEX or XATTR_ITEM record.
    DirItem,
    /// The name of a dir item record.
    DirItemName,
    /// The data (xattr value) of a dir item record.
    DirItemData,
    /// An EXTENT_DATA item.
    FileExtentItem,
    /// A regular or prealloc EXTENT_DATA item.
    RegularFileExtentItem,
    /// An EXTENT_ITEM or METADATA_ITEM.
    ExtentItem,
    /// An EXTENT_DATA_REF, keyed or inline.
    ExtentDataRef,
    /// A SHARED_DATA_REF, keyed or inline.
    SharedDataRef,
    /// A VERITY_DESC_ITEM.
    VerityDescriptorItem,
    /// A DEV_ITEM.
    DevItem,
    /// An INODE_REF or INODE_EXTREF item.
    ReferenceItem,
}

impl Part {
    /// Its name in messages (`inode ref name`).
    pub fn name(self) -> &'static str {
        match self {
            Part::InodeItem => "inode item",
            Part::RootItem => "root item",
            Part::RootRef => "root ref",
            Part::RootRefWithName => "root ref with its name",
            Part::InodeRef => "inode ref",
            Part::InodeRefName => "inode ref name",
            Part::InodeExtref => "inode extref",
            Part::InodeExtrefName => "inode extref name",
            Part::DirItem => "dir item",
            Part::DirItemName => "dir item name",
            Part::DirItemData => "dir item data",
            Part::FileExtentItem => "file extent item",
            Part::RegularFileExtentItem => "regular file extent item",
            Part::ExtentItem => "extent item",
            Part::ExtentDataRef => "extent data ref",
            Part::SharedDataRef => "shared data ref",
            Part::VerityDescriptorItem => "verity descriptor item",
            Part::DevItem => "dev item",
            Part::ReferenceItem => "reference item",
        }
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A malformed tree item (see [`crate::items`]); the caller adds the tree and key.
///
/// Offsets are byte offsets into the item's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    /// The item is shorter than its fixed part.
    #[error("{what} of {len} bytes, at least {need} needed")]
    TooShort {
        /// The structure.
        what: Part,
        /// The item's size.
        len: usize,
        /// The size needed.
        need: usize,
    },
    /// A packed record's fixed fields run past the end of the item.
    #[error("truncated {what} at byte {offset}")]
    Truncated {
        /// The record.
        what: Part,
        /// Where the record starts.
        offset: usize,
    },
    /// A packed record's variable part (name or data) runs past the end of the item.
    #[error("{what} of {len} bytes at byte {offset} overruns the item")]
    Overrun {
        /// The field.
        what: Part,
        /// Where the field starts.
        offset: usize,
        /// Its length.
        len: usize,
    },
    /// An item with no record where at least one is needed.
    #[error("empty {what}")]
    Empty {
        /// The item.
        what: Part,
    },
    /// A file extent of unknown type.
    #[error("unknown file extent type {value}")]
    UnknownExtentType {
        /// The type byte.
        value: u8,
    },
    /// A file extent of unknown compression.
    #[error("unknown compression {value}")]
    UnknownCompression {
        /// The compression byte.
        value: u8,
    },
    /// A file extent with encryption or another encoding.
    #[error("encrypted or otherwise encoded extent")]
    Encoded {
        /// The encryption byte.
        encryption: u8,
        /// The other_encoding field.
        other_encoding: u16,
    },
    /// An inline backref of unknown type.
    #[error("unknown inline ref type {ref_type} at {offset}")]
    UnknownInlineRef {
        /// The ref type.
        ref_type: u8,
        /// Where it is.
        offset: usize,
    },
    /// An inline backref running past the end of its extent item.
    #[error("truncated inline ref type {ref_type} at {offset}")]
    TruncatedInlineRef {
        /// The ref type.
        ref_type: u8,
        /// Where it starts.
        offset: usize,
    },
    /// A UUID tree item whose size is not a multiple of 8.
    #[error("uuid item of {len} bytes")]
    UuidItemSize {
        /// Its size.
        len: usize,
    },
    /// A piece of a fs-verity descriptor out of sequence.
    #[error("descriptor piece at {at} after {have} bytes")]
    VerityGap {
        /// Its offset in the descriptor.
        at: u64,
        /// Descriptor bytes read before it.
        have: usize,
    },
    /// A fs-verity descriptor with pieces missing at the end.
    #[error("verity descriptor of {size} bytes has only {have}")]
    VerityShort {
        /// Its recorded size.
        size: usize,
        /// Bytes found.
        have: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_key_matches_kernel_example() {
        let u = Uuid::parse_str("8404cb7e-e179-420d-0000-000000000000").unwrap();
        assert_eq!(uuid_key(&u, 251).objectid, 0x0d4279e17ecb0484);
    }

    #[test]
    fn dir_entries_with_collisions_and_truncation() {
        let mut d = Vec::new();
        for name in [&b"a"[..], b"bc"] {
            d.extend_from_slice(&257u64.to_le_bytes());
            d.push(1);
            d.extend_from_slice(&0u64.to_le_bytes());
            d.extend_from_slice(&7u64.to_le_bytes());
            d.extend_from_slice(&0u16.to_le_bytes());
            d.extend_from_slice(&(name.len() as u16).to_le_bytes());
            d.push(file_type::REG);
            d.extend_from_slice(name);
        }
        let e = dir_entries(&d).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].name, b"bc");
        for n in 0..d.len() {
            let _ = dir_entries(&d[..n]);
        }
        assert_eq!(
            dir_entries(&d[..d.len() - 1]),
            Err(ItemError::Overrun {
                what: Part::DirItemName,
                offset: 31 + 30,
                len: 2
            })
        );
        assert_eq!(
            dir_entries(&d[..40]),
            Err(ItemError::Truncated {
                what: Part::DirItem,
                offset: 31
            })
        );
    }

    #[test]
    fn legacy_root_item_has_no_uuids() {
        let mut d = vec![0u8; RootItem::LEGACY_SIZE];
        d[160..168].copy_from_slice(&5u64.to_le_bytes());
        let r = RootItem::parse(&d).unwrap();
        assert_eq!(r.generation(), 5);
        assert!(r.uuid().is_nil());
        let e = RootItem::parse(&d[..100]).unwrap_err();
        assert_eq!(
            e,
            ItemError::TooShort {
                what: Part::RootItem,
                len: 100,
                need: 239
            }
        );
        assert_eq!(e.to_string(), "root item of 100 bytes, at least 239 needed");
    }

    #[test]
    fn inline_refs_decode() {
        let mut d = vec![0u8; 24];
        d[0] = 1;
        d[16] = extent_flags::DATA as u8;
        d.push(key_type::EXTENT_DATA_REF);
        d.extend_from_slice(&5u64.to_le_bytes());
        d.extend_from_slice(&257u64.to_le_bytes());
        d.extend_from_slice(&0u64.to_le_bytes());
        d.extend_from_slice(&1u32.to_le_bytes());
        let e = ExtentItem::parse(key_type::EXTENT_ITEM, &d).unwrap();
        assert_eq!(
            e.inline_refs().unwrap(),
            vec![BackRef::ExtentData {
                root: 5,
                objectid: 257,
                offset: 0,
                count: 1
            }]
        );
        d.push(99);
        assert_eq!(
            ExtentItem::parse(key_type::EXTENT_ITEM, &d)
                .unwrap()
                .inline_refs(),
            Err(ItemError::UnknownInlineRef {
                ref_type: 99,
                offset: 53
            })
        );
    }
}
