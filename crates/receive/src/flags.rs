//! Inode flags (FS_IOC_GETFLAGS / FS_IOC_SETFLAGS): which btrfs inode
//! flags a FILEATTR maps to, which of them rreceive applies, and which wait
//! until a subvolume's END.

/// Inode flags set only at the subvolume's END (they would block the
/// stream's own later changes).
pub(crate) const LATE_FLAGS: u32 = FS_IMMUTABLE_FL | FS_APPEND_FL;
/// Most descriptors held for flags applied at END.
pub(crate) const MAX_DEFERRED: usize = 4096;

const FS_SYNC_FL: u32 = 0x8;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;
const FS_NODUMP_FL: u32 = 0x40;
const FS_NOATIME_FL: u32 = 0x80;
const FS_COMPR_FL: u32 = 0x4;
const FS_NOCOMP_FL: u32 = 0x400;
const FS_DIRSYNC_FL: u32 = 0x10000;
const FS_NOCOW_FL: u32 = 0x0080_0000;

/// btrfs inode flags (FILEATTR) → FS_*_FL.
const FLAG_MAP: &[(u64, u32)] = &[
    (1 << 1, FS_NOCOW_FL),
    (1 << 3, FS_NOCOMP_FL),
    (1 << 5, FS_SYNC_FL),
    (1 << 6, FS_IMMUTABLE_FL),
    (1 << 7, FS_APPEND_FL),
    (1 << 8, FS_NODUMP_FL),
    (1 << 9, FS_NOATIME_FL),
    (1 << 10, FS_DIRSYNC_FL),
    (1 << 11, FS_COMPR_FL),
];

/// Makes the empty file open at `fd` one whose blocks are overwritten in
/// place (FS_NOCOW_FL on btrfs), so that rewriting room it already holds
/// needs no new space on a full copy-on-write filesystem. Filesystems
/// without the flag (and non-empty files) are left as they are.
pub(crate) fn overwrite_in_place(fd: std::os::fd::BorrowedFd<'_>) {
    if let Ok(f) = crate::ioctl::get_inode_flags(fd) {
        if f & FS_NOCOW_FL == 0 {
            let _ = crate::ioctl::set_inode_flags(fd, f | FS_NOCOW_FL);
        }
    }
}

/// FS_*_FL bits for btrfs inode flags.
pub(crate) fn map_inode_flags(btrfs: u64) -> u32 {
    FLAG_MAP
        .iter()
        .filter(|(b, _)| btrfs & b != 0)
        .fold(0, |acc, (_, f)| acc | f)
}

/// The FS_*_FL bits rreceive sets (those a FILEATTR can carry).
pub(crate) fn managed_flags() -> u32 {
    FLAG_MAP.iter().fold(0, |acc, (_, f)| acc | f)
}
