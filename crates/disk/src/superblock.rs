//! The superblock: its copies, validation and fields.

use uuid::Uuid;

use crate::bytes::{u16_at, u32_at, u64_at, u8_at, uuid_at};
use crate::csum::CsumType;

/// Size of one superblock copy.
pub const SUPER_INFO_SIZE: usize = 4096;
/// `_BHRfS_M`.
pub const MAGIC: u64 = 0x4D5F_5366_5248_425F;
/// Physical offset of the primary copy.
pub const PRIMARY_OFFSET: u64 = 0x10000;
/// Maximum size of the sys_chunk_array.
pub const SYS_CHUNK_ARRAY_MAX: usize = 2048;
const SYS_CHUNK_ARRAY_OFF: usize = 0x32b;

/// Physical offsets of the three superblock copies.
pub fn copy_offsets() -> [u64; 3] {
    [PRIMARY_OFFSET, 0x400_0000, 0x40_0000_0000]
}

/// Incompat feature bits this reader handles.
pub mod incompat {
    /// MIXED_BACKREF.
    pub const MIXED_BACKREF: u64 = 1 << 0;
    /// DEFAULT_SUBVOL.
    pub const DEFAULT_SUBVOL: u64 = 1 << 1;
    /// MIXED_GROUPS.
    pub const MIXED_GROUPS: u64 = 1 << 2;
    /// COMPRESS_LZO.
    pub const COMPRESS_LZO: u64 = 1 << 3;
    /// COMPRESS_ZSTD.
    pub const COMPRESS_ZSTD: u64 = 1 << 4;
    /// BIG_METADATA.
    pub const BIG_METADATA: u64 = 1 << 5;
    /// EXTENDED_IREF.
    pub const EXTENDED_IREF: u64 = 1 << 6;
    /// RAID56.
    pub const RAID56: u64 = 1 << 7;
    /// SKINNY_METADATA.
    pub const SKINNY_METADATA: u64 = 1 << 8;
    /// NO_HOLES.
    pub const NO_HOLES: u64 = 1 << 9;
    /// METADATA_UUID.
    pub const METADATA_UUID: u64 = 1 << 10;
    /// RAID1C34.
    pub const RAID1C34: u64 = 1 << 11;
    /// SIMPLE_QUOTA.
    pub const SIMPLE_QUOTA: u64 = 1 << 16;
    /// Every bit this reader supports.
    pub const SUPPORTED: u64 = MIXED_BACKREF
        | DEFAULT_SUBVOL
        | MIXED_GROUPS
        | COMPRESS_LZO
        | COMPRESS_ZSTD
        | BIG_METADATA
        | EXTENDED_IREF
        | RAID56
        | SKINNY_METADATA
        | NO_HOLES
        | METADATA_UUID
        | RAID1C34
        | SIMPLE_QUOTA;
}

/// The btrfs name of incompat bit `bit`, if it has one.
pub fn incompat_name(bit: u32) -> Option<&'static str> {
    Some(match bit {
        0 => "mixed_backref",
        1 => "default_subvol",
        2 => "mixed_groups",
        3 => "compress_lzo",
        4 => "compress_zstd",
        5 => "big_metadata",
        6 => "extended_iref",
        7 => "raid56",
        8 => "skinny_metadata",
        9 => "no_holes",
        10 => "metadata_uuid",
        11 => "raid1c34",
        12 => "zoned",
        13 => "extent_tree_v2",
        14 => "raid_stripe_tree",
        16 => "simple_quota",
        17 => "remap_tree",
        _ => return None,
    })
}

/// Superblock flags that mean an offline conversion is in progress.
const CHANGING_FLAGS: u64 = (1 << 35) | (1 << 36) | (1 << 38) | (1 << 39) | (1 << 40);

/// One validated superblock copy.
#[derive(Clone)]
pub struct Superblock {
    raw: Box<[u8; SUPER_INFO_SIZE]>,
    csum_type: CsumType,
}

/// Offset of the backup roots ring in the superblock.
const BACKUP_ROOTS_OFF: usize = 0xb2b;
/// Size of one backup root.
const BACKUP_ROOT_SIZE: usize = 168;
/// Slots in the ring.
const BACKUP_ROOTS: usize = 4;

/// One slot of the superblock's backup roots: where the root tree and the
/// chunk tree were at an earlier commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupRoot {
    /// Logical address of the root tree's root block.
    pub root: u64,
    /// Its generation (the commit's).
    pub root_generation: u64,
    /// Its level.
    pub root_level: u8,
    /// Logical address of the chunk tree's root block.
    pub chunk_root: u64,
    /// Its generation.
    pub chunk_root_generation: u64,
    /// Its level.
    pub chunk_root_level: u8,
}

impl std::fmt::Debug for Superblock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Superblock")
            .field("fsid", &self.fsid())
            .field("bytenr", &self.bytenr())
            .field("generation", &self.generation())
            .field("devid", &self.devid())
            .finish_non_exhaustive()
    }
}

impl Superblock {
    /// Validates the copy in `raw`, read from physical offset `bytenr`.
    ///
    /// Checks magic, checksum type, checksum, bytenr, sizes, levels and the
    /// sys_chunk_array bounds; it does not look at feature flags.
    pub fn parse(raw: &[u8], bytenr: u64) -> Result<Superblock, SuperblockError> {
        let raw: &[u8; SUPER_INFO_SIZE] = raw
            .first_chunk()
            .ok_or(SuperblockError::Short { len: raw.len() })?;
        let g64 = |o| u64_at(raw, o).unwrap_or(0);
        let g32 = |o| u32_at(raw, o).unwrap_or(0);
        if g64(0x40) != MAGIC {
            return Err(SuperblockError::BadMagic { bytenr });
        }
        let ct = u16_at(raw, 0xc4).unwrap_or(u16::MAX);
        let csum_type =
            CsumType::from_raw(ct).ok_or(SuperblockError::UnknownCsumType { value: ct })?;
        if !csum_type.verify(&raw[0x20..], &raw[..0x20]) {
            return Err(SuperblockError::CsumMismatch {
                csum: csum_type.name(),
                bytenr,
            });
        }
        if g64(0x30) != bytenr {
            return Err(SuperblockError::Misplaced {
                bytenr,
                recorded: g64(0x30),
            });
        }
        let sectorsize = g32(0x90);
        let nodesize = g32(0x94);
        if !sectorsize.is_power_of_two() || !(4096..=65536).contains(&sectorsize) {
            return Err(SuperblockError::BadSectorsize { value: sectorsize });
        }
        if !nodesize.is_power_of_two() || nodesize < sectorsize || nodesize > 65536 {
            return Err(SuperblockError::BadNodesize { value: nodesize });
        }
        for (field, off) in [("root", 0xc6), ("chunk_root", 0xc7), ("log_root", 0xc8)] {
            let level = u8_at(raw, off).unwrap_or(u8::MAX);
            if level >= 8 {
                return Err(SuperblockError::BadLevel { field, level });
            }
        }
        for (field, off) in [("root", 0x50), ("chunk_root", 0x58), ("log_root", 0x60)] {
            if g64(off) % u64::from(sectorsize) != 0 {
                return Err(SuperblockError::Unaligned {
                    field,
                    value: g64(off),
                });
            }
        }
        let sys = g32(0xa0) as usize;
        if sys > SYS_CHUNK_ARRAY_MAX {
            return Err(SuperblockError::SysChunkArrayTooLarge { size: sys });
        }
        if g64(0x88) == 0 {
            return Err(SuperblockError::NoDevices);
        }
        let sb = Superblock {
            raw: Box::new(*raw),
            csum_type,
        };
        if sb.dev_item_fsid() != sb.metadata_fsid() {
            return Err(SuperblockError::FsidMismatch {
                dev_item: sb.dev_item_fsid(),
                fsid: sb.metadata_fsid(),
            });
        }
        Ok(sb)
    }

    fn u64(&self, off: usize) -> u64 {
        u64_at(&self.raw[..], off).unwrap_or(0)
    }
    fn u32(&self, off: usize) -> u32 {
        u32_at(&self.raw[..], off).unwrap_or(0)
    }
    fn uuid(&self, off: usize) -> Uuid {
        uuid_at(&self.raw[..], off).unwrap_or_default()
    }

    /// The raw 4096 bytes.
    pub fn raw(&self) -> &[u8] {
        &self.raw[..]
    }
    /// The checksum algorithm of the filesystem.
    pub fn csum_type(&self) -> CsumType {
        self.csum_type
    }
    /// The user-visible fsid.
    pub fn fsid(&self) -> Uuid {
        self.uuid(0x20)
    }
    /// The fsid tree blocks carry: metadata_uuid with METADATA_UUID, else fsid.
    pub fn metadata_fsid(&self) -> Uuid {
        if self.incompat_flags() & incompat::METADATA_UUID != 0 {
            self.uuid(0x23b)
        } else {
            self.fsid()
        }
    }
    /// Physical offset of this copy.
    pub fn bytenr(&self) -> u64 {
        self.u64(0x30)
    }
    /// Superblock flags.
    pub fn flags(&self) -> u64 {
        self.u64(0x38)
    }
    /// Transid of the last commit.
    pub fn generation(&self) -> u64 {
        self.u64(0x48)
    }
    /// Logical address of the root tree's root.
    pub fn root(&self) -> u64 {
        self.u64(0x50)
    }
    /// Logical address of the chunk tree's root.
    pub fn chunk_root(&self) -> u64 {
        self.u64(0x58)
    }
    /// Logical address of the log tree's root, 0 when none.
    pub fn log_root(&self) -> u64 {
        self.u64(0x60)
    }
    /// Size of the filesystem.
    pub fn total_bytes(&self) -> u64 {
        self.u64(0x70)
    }
    /// Number of devices.
    pub fn num_devices(&self) -> u64 {
        self.u64(0x88)
    }
    /// Data sector size.
    pub fn sectorsize(&self) -> u32 {
        self.u32(0x90)
    }
    /// Tree block size.
    pub fn nodesize(&self) -> u32 {
        self.u32(0x94)
    }
    /// Generation of the chunk tree root.
    pub fn chunk_root_generation(&self) -> u64 {
        self.u64(0xa4)
    }
    /// compat_ro feature bits.
    pub fn compat_ro_flags(&self) -> u64 {
        self.u64(0xb4)
    }
    /// incompat feature bits.
    pub fn incompat_flags(&self) -> u64 {
        self.u64(0xbc)
    }
    /// Level of the root tree's root.
    pub fn root_level(&self) -> u8 {
        u8_at(&self.raw[..], 0xc6).unwrap_or(0)
    }
    /// Level of the chunk tree's root.
    pub fn chunk_root_level(&self) -> u8 {
        u8_at(&self.raw[..], 0xc7).unwrap_or(0)
    }
    /// This device's devid.
    pub fn devid(&self) -> u64 {
        self.u64(0xc9)
    }
    /// This device's total size as the filesystem knows it.
    pub fn dev_total_bytes(&self) -> u64 {
        self.u64(0xc9 + 8)
    }
    /// This device's uuid.
    pub fn dev_uuid(&self) -> Uuid {
        self.uuid(0x10b)
    }
    /// The fsid recorded in this device's dev_item.
    pub fn dev_item_fsid(&self) -> Uuid {
        self.uuid(0x11b)
    }
    /// The label.
    pub fn label(&self) -> &[u8] {
        let l = &self.raw[0x12b..0x12b + 256];
        let n = l.iter().position(|&b| b == 0).unwrap_or(l.len());
        &l[..n]
    }
    /// Generation of the UUID tree (0 or stale means: do not trust it).
    pub fn uuid_tree_generation(&self) -> u64 {
        self.u64(0x233)
    }
    /// The packed SYSTEM chunk items.
    pub fn sys_chunk_array(&self) -> &[u8] {
        let n = (self.u32(0xa0) as usize).min(SYS_CHUNK_ARRAY_MAX);
        &self.raw[SYS_CHUNK_ARRAY_OFF..SYS_CHUNK_ARRAY_OFF + n]
    }

    /// The backup roots ring: the root and chunk trees of the last
    /// commits, newest first, skipping empty slots and any slot whose
    /// levels are out of range.
    pub fn backup_roots(&self) -> Vec<BackupRoot> {
        let mut v: Vec<BackupRoot> = (0..BACKUP_ROOTS)
            .filter_map(|i| {
                let o = BACKUP_ROOTS_OFF + i * BACKUP_ROOT_SIZE;
                let r = BackupRoot {
                    root: self.u64(o),
                    root_generation: self.u64(o + 8),
                    chunk_root: self.u64(o + 16),
                    chunk_root_generation: self.u64(o + 24),
                    root_level: u8_at(&self.raw[..], o + 152).unwrap_or(u8::MAX),
                    chunk_root_level: u8_at(&self.raw[..], o + 153).unwrap_or(u8::MAX),
                };
                let usable = r.root != 0
                    && r.root_generation != 0
                    && r.root_level < 8
                    && r.chunk_root_level < 8;
                usable.then_some(r)
            })
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.root_generation));
        v
    }

    /// Refuses feature flags and states this reader cannot handle, naming them.
    pub fn check_features(&self) -> Result<(), FeatureError> {
        let unknown = self.incompat_flags() & !incompat::SUPPORTED;
        if unknown != 0 {
            let bit = unknown.trailing_zeros();
            return Err(match incompat_name(bit) {
                Some(name) => FeatureError::Incompat { name, bit },
                None => FeatureError::UnknownIncompat { bit },
            });
        }
        if self.flags() & CHANGING_FLAGS != 0 {
            return Err(FeatureError::Converting {
                flags: self.flags(),
            });
        }
        Ok(())
    }
}

/// Why a superblock copy is refused (see [`crate::superblock::Superblock::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    /// Fewer than 4096 bytes.
    #[error("short superblock ({len} bytes)")]
    Short {
        /// Bytes given.
        len: usize,
    },
    /// No `_BHRfS_M`.
    #[error("bad magic at physical {bytenr}")]
    BadMagic {
        /// Where the copy was read.
        bytenr: u64,
    },
    /// A checksum type this reader does not know.
    #[error("unknown checksum type {value}")]
    UnknownCsumType {
        /// csum_type.
        value: u16,
    },
    /// The checksum does not match.
    #[error("{csum} checksum mismatch at physical {bytenr}")]
    CsumMismatch {
        /// The checksum algorithm.
        csum: &'static str,
        /// Where the copy was read.
        bytenr: u64,
    },
    /// The copy records another offset than where it was read.
    #[error("copy at physical {bytenr} says it is at {recorded}")]
    Misplaced {
        /// Where the copy was read.
        bytenr: u64,
        /// Its bytenr field.
        recorded: u64,
    },
    /// sectorsize is not a power of two in 4 KiB..=64 KiB.
    #[error("bad sectorsize {value}")]
    BadSectorsize {
        /// sectorsize.
        value: u32,
    },
    /// nodesize is not a power of two in sectorsize..=64 KiB.
    #[error("bad nodesize {value}")]
    BadNodesize {
        /// nodesize.
        value: u32,
    },
    /// A root level of 8 or more.
    #[error("bad {field} level {level}")]
    BadLevel {
        /// `root`, `chunk_root` or `log_root`.
        field: &'static str,
        /// The level.
        level: u8,
    },
    /// A root address that is not sector-aligned.
    #[error("{field} {value} is not sector-aligned")]
    Unaligned {
        /// `root`, `chunk_root` or `log_root`.
        field: &'static str,
        /// The address.
        value: u64,
    },
    /// sys_chunk_array_size over 2048.
    #[error("sys_chunk_array_size {size} is too large")]
    SysChunkArrayTooLarge {
        /// sys_chunk_array_size.
        size: usize,
    },
    /// num_devices is 0.
    #[error("num_devices is 0")]
    NoDevices,
    /// The dev_item belongs to another filesystem.
    #[error("dev_item fsid {dev_item} differs from fsid {fsid}")]
    FsidMismatch {
        /// The dev_item's fsid.
        dev_item: Uuid,
        /// The (metadata) fsid.
        fsid: Uuid,
    },
}

/// A feature or state of the filesystem this reader does not handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FeatureError {
    /// A known incompat flag that is not supported.
    #[error("incompat flag {name} (bit {bit})")]
    Incompat {
        /// Its btrfs name.
        name: &'static str,
        /// Its bit.
        bit: u32,
    },
    /// An incompat flag without a name.
    #[error("unknown incompat flag bit {bit} (0x{mask:x})", mask = 1u64 << *bit)]
    UnknownIncompat {
        /// Its bit.
        bit: u32,
    },
    /// The superblock flags say an offline conversion is in progress.
    #[error("an offline conversion is in progress (superblock flags 0x{flags:x})")]
    Converting {
        /// The superblock flags.
        flags: u64,
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal valid superblock for `bytenr`, for unit tests.
    pub(crate) fn fake(bytenr: u64) -> Vec<u8> {
        let mut b = vec![0u8; SUPER_INFO_SIZE];
        b[0x30..0x38].copy_from_slice(&bytenr.to_le_bytes());
        b[0x40..0x48].copy_from_slice(&MAGIC.to_le_bytes());
        b[0x88..0x90].copy_from_slice(&1u64.to_le_bytes());
        b[0x90..0x94].copy_from_slice(&4096u32.to_le_bytes());
        b[0x94..0x98].copy_from_slice(&16384u32.to_le_bytes());
        let c = CsumType::Crc32c.compute(&b[0x20..]);
        b[..32].copy_from_slice(&c);
        b
    }

    fn reseal(b: &mut [u8]) {
        let c = CsumType::Crc32c.compute(&b[0x20..]);
        b[..32].copy_from_slice(&c);
    }

    #[test]
    fn valid_copy_parses() {
        let b = fake(PRIMARY_OFFSET);
        assert!(Superblock::parse(&b, PRIMARY_OFFSET).is_ok());
    }

    #[test]
    fn copy_read_from_the_wrong_place_is_refused() {
        let b = fake(PRIMARY_OFFSET);
        let e = Superblock::parse(&b, 0x400_0000).unwrap_err();
        assert_eq!(
            e,
            SuperblockError::Misplaced {
                bytenr: 0x400_0000,
                recorded: PRIMARY_OFFSET
            }
        );
        assert!(e.to_string().contains("says it is at"), "{e}");
    }

    #[test]
    fn flipped_byte_fails_checksum() {
        let mut b = fake(PRIMARY_OFFSET);
        b[0x200] ^= 1;
        let e = Superblock::parse(&b, PRIMARY_OFFSET).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("crc32c checksum mismatch at physical {PRIMARY_OFFSET}")
        );
    }

    #[test]
    fn unknown_incompat_flag_is_named() {
        let mut b = fake(PRIMARY_OFFSET);
        b[0xbc..0xc4].copy_from_slice(&(1u64 << 13).to_le_bytes());
        reseal(&mut b);
        let sb = Superblock::parse(&b, PRIMARY_OFFSET).unwrap();
        let e = sb.check_features().unwrap_err();
        assert_eq!(
            e,
            FeatureError::Incompat {
                name: "extent_tree_v2",
                bit: 13
            }
        );
        assert_eq!(e.to_string(), "incompat flag extent_tree_v2 (bit 13)");
        b[0xbc..0xc4].copy_from_slice(&(1u64 << 40).to_le_bytes());
        reseal(&mut b);
        let sb = Superblock::parse(&b, PRIMARY_OFFSET).unwrap();
        let e = sb.check_features().unwrap_err();
        assert_eq!(e, FeatureError::UnknownIncompat { bit: 40 });
        assert_eq!(
            e.to_string(),
            "unknown incompat flag bit 40 (0x10000000000)"
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut b = fake(PRIMARY_OFFSET);
        for i in 0..SUPER_INFO_SIZE {
            b[i] = b[i].wrapping_mul(31).wrapping_add(i as u8);
            let _ = Superblock::parse(&b, PRIMARY_OFFSET);
        }
        let _ = Superblock::parse(&b[..100], PRIMARY_OFFSET);
    }
}
