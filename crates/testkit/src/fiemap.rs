//! FS_IOC_FIEMAP: where a file's data lies on its device, for tests that
//! check which blocks of which files share extents.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The extent's data is compressed (btrfs: `fe_physical` is where the
/// compressed extent starts, whatever part of it the file refers to).
pub const FIEMAP_EXTENT_ENCODED: u32 = 0x0008;
/// Location unknown (also set for delalloc).
pub const FIEMAP_EXTENT_UNKNOWN: u32 = 0x0002;
/// Not allocated yet.
pub const FIEMAP_EXTENT_DELALLOC: u32 = 0x0004;
/// Data not aligned to blocks (btrfs: inline).
pub const FIEMAP_EXTENT_NOT_ALIGNED: u32 = 0x0100;
/// Data inline in metadata.
pub const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x0200;
/// Allocated but unwritten (btrfs: preallocated), reads as zeros.
pub const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x0800;
/// Shared with another file or snapshot.
pub const FIEMAP_EXTENT_SHARED: u32 = 0x2000;
/// The file's last extent.
pub const FIEMAP_EXTENT_LAST: u32 = 0x0001;

/// One extent as FIEMAP reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// File offset.
    pub logical: u64,
    /// Device offset.
    pub physical: u64,
    /// Length in the file.
    pub length: u64,
    /// `FIEMAP_EXTENT_*`.
    pub flags: u32,
}

/// struct fiemap_extent.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

/// struct fiemap (the header the ioctl number is made from).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Header {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
}

const BATCH: usize = 256;

/// The header followed by room for BATCH extents, as the ioctl wants it.
#[repr(C)]
struct Request {
    header: Header,
    extents: [RawExtent; BATCH],
}

nix::ioctl_readwrite_bad!(
    fs_ioc_fiemap,
    nix::request_code_readwrite!(b'f', 11, std::mem::size_of::<Header>()),
    Request
);

/// Every extent of `path` (holes are absent), in file order.
pub fn fiemap(path: &Path) -> std::io::Result<Vec<Extent>> {
    let file = File::open(path)?;
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut req = Request {
            header: Header {
                fm_start: start,
                fm_length: u64::MAX - start,
                fm_extent_count: BATCH as u32,
                ..Header::default()
            },
            extents: [RawExtent::default(); BATCH],
        };
        // SAFETY: `req` is a struct fiemap with room for fm_extent_count extents, alive for the call.
        unsafe { fs_ioc_fiemap(file.as_raw_fd(), &mut req) }?;
        let n = req.header.fm_mapped_extents as usize;
        let got = &req.extents[..n.min(BATCH)];
        out.extend(got.iter().map(|e| Extent {
            logical: e.fe_logical,
            physical: e.fe_physical,
            length: e.fe_length,
            flags: e.fe_flags,
        }));
        match got.last() {
            Some(e) if e.fe_flags & FIEMAP_EXTENT_LAST == 0 && n == BATCH => {
                start = e.fe_logical + e.fe_length;
            }
            _ => return Ok(out),
        }
    }
}
