//! What a FILEATTR's value means: the btrfs inode flags (`BTRFS_INODE_*`,
//! as the inode item stores them), and the `FS_*_FL` inode flags
//! (`FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS`, what `chattr` and `lsattr` show)
//! they stand for, as the kernel's `btrfs_inode_flags_to_fsflags` maps
//! them. The senders of FILEATTR, its receivers, and whatever compares a
//! btrfs inode with a file elsewhere share this one table.

/// `FS_COMPR_FL` (`chattr +c`).
pub const FS_COMPR_FL: u32 = 0x4;
/// `FS_SYNC_FL` (`chattr +S`).
pub const FS_SYNC_FL: u32 = 0x8;
/// `FS_IMMUTABLE_FL` (`chattr +i`).
pub const FS_IMMUTABLE_FL: u32 = 0x10;
/// `FS_APPEND_FL` (`chattr +a`).
pub const FS_APPEND_FL: u32 = 0x20;
/// `FS_NODUMP_FL` (`chattr +d`).
pub const FS_NODUMP_FL: u32 = 0x40;
/// `FS_NOATIME_FL` (`chattr +A`).
pub const FS_NOATIME_FL: u32 = 0x80;
/// `FS_NOCOMP_FL` (`chattr +m`).
pub const FS_NOCOMP_FL: u32 = 0x400;
/// `FS_DIRSYNC_FL` (`chattr +D`).
pub const FS_DIRSYNC_FL: u32 = 0x10000;
/// `FS_NOCOW_FL` (`chattr +C`).
pub const FS_NOCOW_FL: u32 = 0x0080_0000;

/// `BTRFS_INODE_NODATACOW`.
pub const BTRFS_INODE_NODATACOW: u64 = 1 << 1;
/// `BTRFS_INODE_NOCOMPRESS`.
pub const BTRFS_INODE_NOCOMPRESS: u64 = 1 << 3;
/// `BTRFS_INODE_SYNC`.
pub const BTRFS_INODE_SYNC: u64 = 1 << 5;
/// `BTRFS_INODE_IMMUTABLE`.
pub const BTRFS_INODE_IMMUTABLE: u64 = 1 << 6;
/// `BTRFS_INODE_APPEND`.
pub const BTRFS_INODE_APPEND: u64 = 1 << 7;
/// `BTRFS_INODE_NODUMP`.
pub const BTRFS_INODE_NODUMP: u64 = 1 << 8;
/// `BTRFS_INODE_NOATIME`.
pub const BTRFS_INODE_NOATIME: u64 = 1 << 9;
/// `BTRFS_INODE_DIRSYNC`.
pub const BTRFS_INODE_DIRSYNC: u64 = 1 << 10;
/// `BTRFS_INODE_COMPRESS`.
pub const BTRFS_INODE_COMPRESS: u64 = 1 << 11;

/// btrfs inode flag → `FS_*_FL`, for every flag `chattr` can set.
const MAP: [(u64, u32); 9] = [
    (BTRFS_INODE_NODATACOW, FS_NOCOW_FL),
    (BTRFS_INODE_NOCOMPRESS, FS_NOCOMP_FL),
    (BTRFS_INODE_SYNC, FS_SYNC_FL),
    (BTRFS_INODE_IMMUTABLE, FS_IMMUTABLE_FL),
    (BTRFS_INODE_APPEND, FS_APPEND_FL),
    (BTRFS_INODE_NODUMP, FS_NODUMP_FL),
    (BTRFS_INODE_NOATIME, FS_NOATIME_FL),
    (BTRFS_INODE_DIRSYNC, FS_DIRSYNC_FL),
    (BTRFS_INODE_COMPRESS, FS_COMPR_FL),
];

/// Every `FS_*_FL` bit a FILEATTR can carry.
pub const FS_FLAGS: u32 = {
    let mut all = 0;
    let mut i = 0;
    while i < MAP.len() {
        all |= MAP[i].1;
        i += 1;
    }
    all
};

/// The `FS_*_FL` bits of btrfs inode flags `btrfs` (a FILEATTR's value, or
/// an inode item's flags); bits without one (NODATASUM, the read-only
/// flags such as fs-verity's) are left out.
pub fn fs_flags(btrfs: u64) -> u32 {
    MAP.iter()
        .filter(|(b, _)| btrfs & b != 0)
        .fold(0, |acc, (_, f)| acc | f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btrfs_flags_map_to_what_chattr_shows() {
        // chattr +i +d on a NOCOW file, as an inode item stores it
        // (NODATASUM comes with NODATACOW and has no FS_*_FL).
        let item = BTRFS_INODE_IMMUTABLE | BTRFS_INODE_NODUMP | BTRFS_INODE_NODATACOW | 1;
        assert_eq!(fs_flags(item), FS_IMMUTABLE_FL | FS_NODUMP_FL | FS_NOCOW_FL);
        // fs-verity is a read-only flag (bit 32): not a chattr flag.
        assert_eq!(fs_flags(1 << 32), 0);
        assert_eq!(FS_FLAGS, 0x0081_04fc);
    }
}
