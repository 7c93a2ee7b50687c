//! FS_IOC_GETFLAGS: a file's inode flags (`FS_*_FL`, what `lsattr` shows),
//! for tests that check what a receive set.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

nix::ioctl_read_bad!(
    fs_ioc_getflags,
    nix::request_code_read!(b'f', 1, std::mem::size_of::<std::ffi::c_long>()),
    std::ffi::c_int
);

/// The inode flags of `path` (followed if a symlink).
pub fn inode_flags(path: &Path) -> std::io::Result<u32> {
    let file = File::open(path)?;
    let mut flags: std::ffi::c_int = 0;
    // SAFETY: the kernel writes one int into `flags`, which outlives the call.
    unsafe { fs_ioc_getflags(file.as_raw_fd(), &mut flags) }?;
    Ok(flags as u32)
}
