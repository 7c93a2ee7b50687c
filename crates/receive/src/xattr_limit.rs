//! Whether an xattr the filesystem refused with ENOSPC, E2BIG or ERANGE is
//! too large for it (a limit, met again by every resume: the receive skips
//! it) or met a full filesystem (transient: the receive stops, to be
//! resumed once there is room).
//!
//! The rule:
//!
//! - E2BIG and ERANGE always mean too large. The kernel refuses a value
//!   over 64 KiB with E2BIG before any filesystem sees it, f2fs and network
//!   filesystems say E2BIG or ERANGE for values over their own limit, and
//!   no filesystem says either when it is full.
//! - ENOSPC means either. ext2/3/4 without the `ea_inode` feature keep an
//!   inode's xattrs in the inode and one block and say ENOSPC when they do
//!   not fit, however much room is free; so do overlayfs and GlusterFS
//!   bricks over such an ext4. btrfs says ENOSPC for an xattr larger than a
//!   tree block holds. So:
//!   - on btrfs, whose statfs counts data space but not the metadata an
//!     xattr goes in (a filesystem with full metadata shows plenty free),
//!     too large exactly when name and value exceed what its nodesize
//!     allows (`BTRFS_MAX_XATTR_SIZE`, nodesize - 156 bytes);
//!   - elsewhere, too large when statvfs shows the filesystem far from
//!     full: more than [`FREE_MARGIN`] bytes beyond the value free to this
//!     user and, where inodes are counted, more than [`FREE_INODES`] free
//!     (ext4's `ea_inode` and tmpfs's xattr space take inodes). A full
//!     filesystem has neither. A filesystem short of room but refusing for
//!     size is called full: the receive stops resumable, and once room is
//!     made the next try skips the xattr.
//!   - When statfs or statvfs fail, ENOSPC is a full filesystem, as before.
//!
//! Skipping, rather than stopping with a permanent error, is the choice:
//! the rest of the subvolume is still received, the end of the receive
//! names what was skipped and how to make room for it, and `rsend
//! --verify` names the same xattrs as too large for the copy's filesystem.

use std::os::fd::BorrowedFd;

use nix::errno::Errno;
use nix::sys::statfs::{
    fstatfs, BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, FUSE_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC,
};
use nix::sys::statvfs::fstatvfs;

/// Free bytes beyond the value above which ENOSPC is not a full filesystem.
pub(crate) const FREE_MARGIN: u64 = 8 << 20;
/// Free inodes above which ENOSPC is not a filesystem out of inodes.
pub(crate) const FREE_INODES: u64 = 128;
/// What btrfs takes from a tree block for an xattr item: the block header
/// (101), the item header (25) and the dir item (30).
const BTRFS_XATTR_OVERHEAD: u32 = 156;
/// The fix for ext4 without `ea_inode`.
pub(crate) const EXT4_FIX: &str = "tune2fs -O ea_inode DEVICE enables large xattrs on ext4";

/// An xattr too large for the filesystem.
#[derive(Debug)]
pub struct TooLarge {
    /// Why, with the filesystem's limit: `ext4 without ea_inode keeps an
    /// inode's xattrs in the inode and one 4096-byte block (ENOSPC with 57
    /// MiB free)`.
    pub why: String,
    /// How to make room for it, when there is a way.
    pub fix: Option<String>,
}

/// Whether setting xattr `name` with a value of `len` bytes, refused with
/// `errno`, on the filesystem `fs` is on, is too large for that filesystem
/// (see the module's rule); `None` for any other error, and for a full
/// filesystem.
pub fn too_large(fs: BorrowedFd<'_>, name: &[u8], len: usize, errno: Errno) -> Option<TooLarge> {
    if !matches!(errno, Errno::ENOSPC | Errno::E2BIG | Errno::ERANGE) {
        return None;
    }
    let kind = fstatfs(fs).ok().map(|s| s.filesystem_type());
    let need = name.len() as u64 + len as u64;
    let (limit, fix) = if kind == Some(BTRFS_SUPER_MAGIC) {
        let nodesize = crate::ioctl::btrfs_nodesize(fs).ok();
        let max = nodesize.map(|n| u64::from(n.saturating_sub(BTRFS_XATTR_OVERHEAD)));
        if errno == Errno::ENOSPC && max.is_none_or(|m| need <= m) {
            return None;
        }
        (
            match (nodesize, max) {
                (Some(n), Some(m)) => format!(
                    "btrfs with nodesize {n} holds an xattr of at most {m} bytes, name included"
                ),
                _ => "btrfs refused it".to_string(),
            },
            Some("a btrfs made with a larger nodesize (mkfs.btrfs -n 65536) holds it".to_string()),
        )
    } else {
        let vfs = fstatvfs(fs).ok();
        let free = if errno == Errno::ENOSPC {
            let vfs = vfs.as_ref()?;
            let bytes = (vfs.blocks_available() as u64).saturating_mul(vfs.fragment_size() as u64);
            let inodes_short = vfs.files() > 0 && (vfs.files_available() as u64) <= FREE_INODES;
            if inodes_short || bytes <= need.saturating_add(FREE_MARGIN) {
                return None;
            }
            format!(" (ENOSPC with {} MiB free)", bytes >> 20)
        } else {
            format!(" ({errno})")
        };
        let block = vfs.map_or(0, |v| v.block_size());
        let (what, fix) = if kind == Some(EXT4_SUPER_MAGIC) {
            (
                format!(
                    "ext4 without ea_inode keeps an inode's xattrs in the inode and one \
                     {block}-byte block"
                ),
                Some(EXT4_FIX.to_string()),
            )
        } else if kind == Some(OVERLAYFS_SUPER_MAGIC) {
            (
                "overlayfs keeps xattrs on its upper filesystem, which holds none this large"
                    .to_string(),
                Some(format!("on an ext4 upper filesystem, {EXT4_FIX}")),
            )
        } else if kind == Some(FUSE_SUPER_MAGIC) {
            (
                "this FUSE filesystem (a GlusterFS volume keeps xattrs on its bricks) holds none \
                 this large"
                    .to_string(),
                Some(format!("on ext4 bricks, {EXT4_FIX}")),
            )
        } else {
            (
                format!(
                    "this filesystem (type {:#x}) holds no xattr this large",
                    kind.map_or(0, |k| k.0 as u64)
                ),
                None,
            )
        };
        (what + &free, fix)
    };
    Some(TooLarge { why: limit, fix })
}
