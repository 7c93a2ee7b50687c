//! The system calls that need `unsafe`: the ioctls rreceive issues (btrfs
//! subvolume management and encoded writes, reflinks with FICLONE and
//! FICLONERANGE, inode flags, fs-verity, the tree search and inode lookup
//! that find a parent elsewhere on the filesystem), `sync_file_range`, and [`openat`]
//! and [`openat2`], which return the new descriptor as an `OwnedFd` (nix
//! 0.29's functions of the same names return a bare `RawFd`).
//!
//! This is the only module of the crate with `unsafe`. Every wrapper takes
//! borrowed file descriptors and plain Rust values, builds the kernel's
//! argument struct on the stack and returns `nix::Result`.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow};
use nix::sys::stat::Mode;
use nix::NixPath;

/// `openat(2)` as [`nix::fcntl::openat`] makes it, owning what it returns.
pub(crate) fn openat<P: ?Sized + NixPath>(
    dir: Option<RawFd>,
    path: &P,
    flags: OFlag,
    mode: Mode,
) -> nix::Result<OwnedFd> {
    let fd = nix::fcntl::openat(dir, path, flags, mode)?;
    // SAFETY: a successful openat returns a new descriptor, open and owned
    // by nothing else; it is closed only through the OwnedFd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(2)` as [`nix::fcntl::openat2`] makes it, owning what it returns.
pub(crate) fn openat2<P: ?Sized + NixPath>(
    dir: RawFd,
    path: &P,
    how: OpenHow,
) -> nix::Result<OwnedFd> {
    let fd = nix::fcntl::openat2(dir, path, how)?;
    // SAFETY: a successful openat2 returns a new descriptor, open and owned
    // by nothing else; it is closed only through the OwnedFd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `sync_file_range(SYNC_FILE_RANGE_WRITE)` of the whole file: starts
/// writeback of its dirty pages, waits for nothing, changes nothing.
pub(crate) fn start_writeback(fd: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: a plain system call on an open descriptor, no memory passed.
    let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    Errno::result(r).map(drop)
}

/// `sync_file_range` of the whole file, waiting: its dirty pages written
/// (not its metadata, not the disk's cache: a journal commit after it does
/// that, see [`crate::snapshot::workdir::WriteAhead::barrier`]).
pub(crate) fn write_out(fd: BorrowedFd<'_>) -> nix::Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain system call on an open descriptor, no memory passed.
    let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, flags) };
    Errno::result(r).map(drop)
}

const BTRFS_IOCTL_MAGIC: u8 = 0x94;
/// `BTRFS_PATH_NAME_MAX`.
const PATH_NAME_MAX: usize = 4087;
const SUBVOL_NAME_MAX: usize = 4039;

/// `BTRFS_SUBVOL_RDONLY`, for SUBVOL_GETFLAGS/SETFLAGS.
pub(crate) const SUBVOL_RDONLY: u64 = 1 << 1;
/// `BTRFS_ROOT_SUBVOL_RDONLY`, in [`SubvolInfo::flags`] (the root item's).
pub(crate) const ROOT_SUBVOL_RDONLY: u64 = 1 << 0;

#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; PATH_NAME_MAX + 1],
}

#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; SUBVOL_NAME_MAX + 1],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoctlTimespec {
    sec: u64,
    nsec: u32,
}

#[repr(C)]
struct ReceivedSubvolArgs {
    uuid: [u8; 16],
    stransid: u64,
    rtransid: u64,
    stime: IoctlTimespec,
    rtime: IoctlTimespec,
    flags: u64,
    reserved: [u64; 16],
}

#[repr(C)]
struct GetSubvolInfoArgs {
    treeid: u64,
    name: [u8; 256],
    parent_id: u64,
    dirid: u64,
    generation: u64,
    flags: u64,
    uuid: [u8; 16],
    parent_uuid: [u8; 16],
    received_uuid: [u8; 16],
    ctransid: u64,
    otransid: u64,
    stransid: u64,
    rtransid: u64,
    ctime: IoctlTimespec,
    otime: IoctlTimespec,
    stime: IoctlTimespec,
    rtime: IoctlTimespec,
    reserved: [u64; 8],
}

/// `btrfs_ioctl_fs_info_args` (1024 bytes; `flags` 0 asks for nothing
/// more).
#[repr(C)]
struct FsInfoArgs {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    nodesize: u32,
    sectorsize: u32,
    clone_alignment: u32,
    csum_type: u16,
    csum_size: u16,
    flags: u64,
    generation: u64,
    metadata_uuid: [u8; 16],
    reserved: [u8; 944],
}

/// `btrfs_ioctl_search_key`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SearchKey {
    tree_id: u64,
    min_objectid: u64,
    max_objectid: u64,
    min_offset: u64,
    max_offset: u64,
    min_transid: u64,
    max_transid: u64,
    min_type: u32,
    max_type: u32,
    nr_items: u32,
    unused: u32,
    unused1: u64,
    unused2: u64,
    unused3: u64,
    unused4: u64,
}

/// Bytes of items BTRFS_IOC_TREE_SEARCH returns at once.
const SEARCH_BUF: usize = 4096 - std::mem::size_of::<SearchKey>();

/// `btrfs_ioctl_search_args`.
#[repr(C)]
struct SearchArgs {
    key: SearchKey,
    buf: [u8; SEARCH_BUF],
}

/// `btrfs_ioctl_ino_lookup_args`.
#[repr(C)]
struct InoLookupArgs {
    treeid: u64,
    objectid: u64,
    name: [u8; 4080],
}

#[repr(C)]
struct EncodedIoArgs {
    iov: *const libc::iovec,
    iovcnt: libc::c_ulong,
    offset: i64,
    flags: u64,
    len: u64,
    unencoded_len: u64,
    unencoded_offset: u64,
    compression: u32,
    encryption: u32,
    reserved: [u8; 64],
}

#[repr(C)]
struct FileCloneRange {
    src_fd: i64,
    src_offset: u64,
    src_length: u64,
    dest_offset: u64,
}

#[repr(C)]
struct FsverityEnableArg {
    version: u32,
    hash_algorithm: u32,
    block_size: u32,
    salt_size: u32,
    salt_ptr: u64,
    sig_size: u32,
    reserved1: u32,
    sig_ptr: u64,
    reserved2: [u64; 11],
}

nix::ioctl_write_ptr!(btrfs_subvol_create, BTRFS_IOCTL_MAGIC, 14, VolArgs);
nix::ioctl_write_ptr!(btrfs_snap_destroy, BTRFS_IOCTL_MAGIC, 15, VolArgs);
nix::ioctl_write_ptr!(btrfs_snap_create_v2, BTRFS_IOCTL_MAGIC, 23, VolArgsV2);
nix::ioctl_read!(btrfs_subvol_getflags, BTRFS_IOCTL_MAGIC, 25, u64);
nix::ioctl_write_ptr!(btrfs_subvol_setflags, BTRFS_IOCTL_MAGIC, 26, u64);
nix::ioctl_readwrite!(btrfs_tree_search, BTRFS_IOCTL_MAGIC, 17, SearchArgs);
nix::ioctl_readwrite!(btrfs_ino_lookup, BTRFS_IOCTL_MAGIC, 18, InoLookupArgs);
nix::ioctl_readwrite!(
    btrfs_set_received_subvol,
    BTRFS_IOCTL_MAGIC,
    37,
    ReceivedSubvolArgs
);
nix::ioctl_read!(
    btrfs_get_subvol_info,
    BTRFS_IOCTL_MAGIC,
    60,
    GetSubvolInfoArgs
);
nix::ioctl_read!(btrfs_fs_info, BTRFS_IOCTL_MAGIC, 31, FsInfoArgs);
nix::ioctl_write_ptr!(btrfs_encoded_write, BTRFS_IOCTL_MAGIC, 64, EncodedIoArgs);
nix::ioctl_write_int!(ficlone, BTRFS_IOCTL_MAGIC, 9);
nix::ioctl_write_ptr!(ficlonerange, BTRFS_IOCTL_MAGIC, 13, FileCloneRange);
nix::ioctl_write_ptr!(fs_ioc_enable_verity, b'f', 133, FsverityEnableArg);
// FS_IOC_GETFLAGS/SETFLAGS are numbered with sizeof(long) but move an int.
nix::ioctl_read_bad!(
    fs_ioc_getflags,
    nix::request_code_read!(b'f', 1, std::mem::size_of::<libc::c_long>()),
    libc::c_int
);
nix::ioctl_write_ptr_bad!(
    fs_ioc_setflags,
    nix::request_code_write!(b'f', 2, std::mem::size_of::<libc::c_long>()),
    libc::c_int
);

fn name_buf<const N: usize>(name: &[u8]) -> nix::Result<[u8; N]> {
    if name.len() >= N || name.contains(&0) {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut buf = [0u8; N];
    buf[..name.len()].copy_from_slice(name);
    Ok(buf)
}

/// Creates subvolume `name` in directory `dir` (BTRFS_IOC_SUBVOL_CREATE).
pub(crate) fn subvol_create(dir: BorrowedFd<'_>, name: &[u8]) -> nix::Result<()> {
    let args = VolArgs {
        fd: 0,
        name: name_buf(name)?,
    };
    // SAFETY: `args` is a live, fully initialised BTRFS_IOC_SUBVOL_CREATE
    // argument with a NUL-terminated name; `dir` is an open descriptor.
    unsafe { btrfs_subvol_create(dir.as_raw_fd(), &args) }.map(drop)
}

/// Deletes subvolume `name` in directory `dir` (BTRFS_IOC_SNAP_DESTROY;
/// without root, only where the mount allows users to).
pub(crate) fn subvol_destroy(dir: BorrowedFd<'_>, name: &[u8]) -> nix::Result<()> {
    let args = VolArgs {
        fd: 0,
        name: name_buf(name)?,
    };
    // SAFETY: `args` is a live, fully initialised BTRFS_IOC_SNAP_DESTROY
    // argument with a NUL-terminated name; `dir` is an open descriptor.
    unsafe { btrfs_snap_destroy(dir.as_raw_fd(), &args) }.map(drop)
}

/// Creates a writable snapshot of subvolume `src` as `name` in `dir`
/// (BTRFS_IOC_SNAP_CREATE_V2).
pub(crate) fn snap_create(
    src: BorrowedFd<'_>,
    dir: BorrowedFd<'_>,
    name: &[u8],
) -> nix::Result<()> {
    let args = VolArgsV2 {
        fd: i64::from(src.as_raw_fd()),
        transid: 0,
        flags: 0,
        unused: [0; 4],
        name: name_buf(name)?,
    };
    // SAFETY: `args` is a live, fully initialised vol_args_v2 naming open `src`.
    unsafe { btrfs_snap_create_v2(dir.as_raw_fd(), &args) }.map(drop)
}

/// The subvolume flags of the subvolume containing `fd`.
pub(crate) fn subvol_getflags(fd: BorrowedFd<'_>) -> nix::Result<u64> {
    let mut flags = 0u64;
    // SAFETY: the kernel writes one u64 into `flags`, which outlives the call.
    unsafe { btrfs_subvol_getflags(fd.as_raw_fd(), &mut flags) }?;
    Ok(flags)
}

/// Sets the subvolume flags of the subvolume whose root is `fd`.
pub(crate) fn subvol_setflags(fd: BorrowedFd<'_>, flags: u64) -> nix::Result<()> {
    // SAFETY: the kernel reads one u64 from `flags`, which outlives the call.
    unsafe { btrfs_subvol_setflags(fd.as_raw_fd(), &flags) }.map(drop)
}

/// Records that the subvolume at `fd` was received from `uuid` at `stransid`
/// (BTRFS_IOC_SET_RECEIVED_SUBVOL).
pub(crate) fn set_received_subvol(
    fd: BorrowedFd<'_>,
    uuid: [u8; 16],
    stransid: u64,
) -> nix::Result<()> {
    let mut args = ReceivedSubvolArgs {
        uuid,
        stransid,
        rtransid: 0,
        stime: IoctlTimespec::default(),
        rtime: IoctlTimespec::default(),
        flags: 0,
        reserved: [0; 16],
    };
    // SAFETY: `args` is a live, fully initialised received_subvol_args.
    unsafe { btrfs_set_received_subvol(fd.as_raw_fd(), &mut args) }.map(drop)
}

/// Identity of one btrfs subvolume.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SubvolInfo {
    /// The subvolume's id (its tree's objectid).
    pub treeid: u64,
    /// The subvolume's own uuid.
    pub uuid: [u8; 16],
    /// The uuid it was received from, all zero when not received.
    pub received_uuid: [u8; 16],
    /// The uuid of the subvolume it is a snapshot of, all zero if none.
    pub parent_uuid: [u8; 16],
    /// Root item flags (`ROOT_SUBVOL_RDONLY`).
    pub flags: u64,
    /// Transid of the received subvolume on the sending side.
    pub stransid: u64,
}

/// Identity of the subvolume containing `fd` (BTRFS_IOC_GET_SUBVOL_INFO).
pub(crate) fn get_subvol_info(fd: BorrowedFd<'_>) -> nix::Result<SubvolInfo> {
    let mut args = std::mem::MaybeUninit::<GetSubvolInfoArgs>::zeroed();
    // SAFETY: the kernel fills the whole struct; zeroed is a valid bit
    // pattern for it (integers and byte arrays only).
    unsafe { btrfs_get_subvol_info(fd.as_raw_fd(), args.as_mut_ptr()) }?;
    // SAFETY: zero-initialised above and written by the kernel.
    let args = unsafe { args.assume_init() };
    Ok(SubvolInfo {
        treeid: args.treeid,
        uuid: args.uuid,
        received_uuid: args.received_uuid,
        parent_uuid: args.parent_uuid,
        flags: args.flags,
        stransid: args.stransid,
    })
}

/// One item found by [`tree_search`]: its key's objectid, type and
/// offset, and its bytes.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// The key's objectid.
    pub objectid: u64,
    /// The key's type.
    pub kind: u32,
    /// The key's offset.
    pub offset: u64,
    /// The item.
    pub data: Vec<u8>,
}

/// Every item of tree `tree` with a key between (`objectid`, `kind`,
/// `min_offset`) and (`objectid`, `kind`, `max_offset`), in key order
/// (BTRFS_IOC_TREE_SEARCH, which needs CAP_SYS_ADMIN), at most `limit`.
pub(crate) fn tree_search(
    fd: BorrowedFd<'_>,
    tree: u64,
    objectid: u64,
    kind: u32,
    (min_offset, max_offset): (u64, u64),
    limit: usize,
) -> nix::Result<Vec<Item>> {
    const HEADER: usize = 32;
    let mut out = Vec::new();
    let mut from = min_offset;
    loop {
        let mut args = SearchArgs {
            key: SearchKey {
                tree_id: tree,
                min_objectid: objectid,
                max_objectid: objectid,
                min_offset: from,
                max_offset,
                max_transid: u64::MAX,
                min_type: kind,
                max_type: kind,
                nr_items: 4096,
                ..SearchKey::default()
            },
            buf: [0; SEARCH_BUF],
        };
        // SAFETY: `args` is a live, fully initialised search_args; the
        // kernel writes at most its buffer's size into it.
        unsafe { btrfs_tree_search(fd.as_raw_fd(), &mut args) }?;
        let n = args.key.nr_items;
        if n == 0 {
            return Ok(out);
        }
        let mut at = 0usize;
        let mut last = None;
        for _ in 0..n {
            let head = args.buf.get(at..at + HEADER).ok_or(Errno::EIO)?;
            let u64_at = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&head[i..i + 8]);
                u64::from_ne_bytes(b)
            };
            let u32_at = |i: usize| {
                let mut b = [0u8; 4];
                b.copy_from_slice(&head[i..i + 4]);
                u32::from_ne_bytes(b)
            };
            let (objectid, offset, kind, len) = (u64_at(8), u64_at(16), u32_at(24), u32_at(28));
            let start = at + HEADER;
            let data = args
                .buf
                .get(start..start + len as usize)
                .ok_or(Errno::EIO)?;
            at = start + len as usize;
            last = Some(offset);
            out.push(Item {
                objectid,
                kind,
                offset,
                data: data.to_vec(),
            });
            if out.len() >= limit {
                return Ok(out);
            }
        }
        match last {
            Some(o) if o < max_offset => from = o + 1,
            _ => return Ok(out),
        }
    }
}

/// BTRFS_IOC_INO_LOOKUP: the path of directory `objectid` of subvolume
/// `tree` from that subvolume's root (with a trailing `/`, empty for the
/// root), and the subvolume's id (`tree` 0: the one `fd` is in).
pub(crate) fn ino_lookup(
    fd: BorrowedFd<'_>,
    tree: u64,
    objectid: u64,
) -> nix::Result<(u64, Vec<u8>)> {
    let mut args = InoLookupArgs {
        treeid: tree,
        objectid,
        name: [0; 4080],
    };
    // SAFETY: `args` is a live, fully initialised ino_lookup_args; the
    // kernel writes a NUL-terminated name into its buffer.
    unsafe { btrfs_ino_lookup(fd.as_raw_fd(), &mut args) }?;
    let len = args
        .name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(args.name.len());
    Ok((args.treeid, args.name[..len].to_vec()))
}

/// Parameters of one encoded (compressed) write.
pub(crate) struct EncodedWrite<'a> {
    /// File offset.
    pub offset: u64,
    /// Bytes of file the write covers.
    pub len: u64,
    /// Length of the data once decoded.
    pub unencoded_len: u64,
    /// Offset into the decoded data where the file range starts.
    pub unencoded_offset: u64,
    /// `BTRFS_ENCODED_IO_COMPRESSION_*`.
    pub compression: u32,
    /// `BTRFS_ENCODED_IO_ENCRYPTION_*`.
    pub encryption: u32,
    /// The encoded bytes.
    pub data: &'a [u8],
}

/// Writes still-compressed data (BTRFS_IOC_ENCODED_WRITE).
pub(crate) fn encoded_write(fd: BorrowedFd<'_>, w: &EncodedWrite<'_>) -> nix::Result<()> {
    let offset = i64::try_from(w.offset).map_err(|_| Errno::EINVAL)?;
    let iov = libc::iovec {
        iov_base: w.data.as_ptr() as *mut libc::c_void,
        iov_len: w.data.len(),
    };
    let args = EncodedIoArgs {
        iov: &iov,
        iovcnt: 1,
        offset,
        flags: 0,
        len: w.len,
        unencoded_len: w.unencoded_len,
        unencoded_offset: w.unencoded_offset,
        compression: w.compression,
        encryption: w.encryption,
        reserved: [0; 64],
    };
    // SAFETY: `args` and the iovec it points to live across the call; the
    // kernel only reads `w.data.len()` bytes from `w.data`.
    // It returns the encoded bytes consumed; any success is all of them.
    unsafe { btrfs_encoded_write(fd.as_raw_fd(), &args) }.map(drop)
}

/// Shares all of `src`'s data with `dst` (FICLONE).
pub(crate) fn clone_file(dst: BorrowedFd<'_>, src: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: FICLONE takes the source descriptor by value.
    unsafe { ficlone(dst.as_raw_fd(), src.as_raw_fd() as libc::c_ulong) }.map(drop)
}

/// Shares `len` bytes of `src` at `src_offset` with `dst` at `dst_offset`
/// (FICLONERANGE, the same number as BTRFS_IOC_CLONE_RANGE).
pub(crate) fn clone_range(
    dst: BorrowedFd<'_>,
    dst_offset: u64,
    src: BorrowedFd<'_>,
    src_offset: u64,
    len: u64,
) -> nix::Result<()> {
    let args = FileCloneRange {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset,
        src_length: len,
        dest_offset: dst_offset,
    };
    // SAFETY: `args` is a live, fully initialised file_clone_range.
    unsafe { ficlonerange(dst.as_raw_fd(), &args) }.map(drop)
}

/// Turns on fs-verity for the file open (read-only) at `fd`.
pub(crate) fn enable_verity(
    fd: BorrowedFd<'_>,
    algorithm: u8,
    block_size: u32,
    salt: &[u8],
    sig: &[u8],
) -> nix::Result<()> {
    let args = FsverityEnableArg {
        version: 1,
        hash_algorithm: u32::from(algorithm),
        block_size,
        salt_size: u32::try_from(salt.len()).map_err(|_| Errno::EINVAL)?,
        salt_ptr: if salt.is_empty() {
            0
        } else {
            salt.as_ptr() as u64
        },
        sig_size: u32::try_from(sig.len()).map_err(|_| Errno::EINVAL)?,
        reserved1: 0,
        sig_ptr: if sig.is_empty() {
            0
        } else {
            sig.as_ptr() as u64
        },
        reserved2: [0; 11],
    };
    // SAFETY: `args` lives across the call and points at `salt` and `sig`,
    // which the kernel only reads for their stated lengths.
    unsafe { fs_ioc_enable_verity(fd.as_raw_fd(), &args) }.map(drop)
}

/// The node (tree block) size of the btrfs filesystem `fd` is on
/// (BTRFS_IOC_FS_INFO).
pub(crate) fn btrfs_nodesize(fd: BorrowedFd<'_>) -> nix::Result<u32> {
    let mut args = std::mem::MaybeUninit::<FsInfoArgs>::zeroed();
    // SAFETY: the kernel fills the struct, which outlives the call; zeroed
    // is a valid bit pattern for it (integers and byte arrays only), and
    // `flags` 0 asks for no optional field.
    unsafe { btrfs_fs_info(fd.as_raw_fd(), args.as_mut_ptr()) }?;
    // SAFETY: zero-initialised above and written by the kernel.
    Ok(unsafe { args.assume_init() }.nodesize)
}

/// The inode flags (`FS_*_FL`) of the file open at `fd`.
pub(crate) fn get_inode_flags(fd: BorrowedFd<'_>) -> nix::Result<u32> {
    let mut flags: libc::c_int = 0;
    // SAFETY: the kernel writes one int into `flags`, which outlives the call.
    unsafe { fs_ioc_getflags(fd.as_raw_fd(), &mut flags) }?;
    Ok(flags as u32)
}

/// Sets the inode flags (`FS_*_FL`) of the file open at `fd`.
pub(crate) fn set_inode_flags(fd: BorrowedFd<'_>, flags: u32) -> nix::Result<()> {
    let v = flags as libc::c_int;
    // SAFETY: the kernel reads one int from `v`, which outlives the call.
    unsafe { fs_ioc_setflags(fd.as_raw_fd(), &v) }.map(drop)
}

/// Maps `file` shared, to read and write (the journal of a receive).
pub(crate) fn map_shared(file: &std::fs::File) -> std::io::Result<memmap2::MmapMut> {
    // SAFETY: the journal is this receive's own file, locked with flock;
    // another process writing it would only change what is read back.
    unsafe { memmap2::MmapMut::map_mut(file) }
}

/// The mount `fd` is on, by a number the kernel never gives another mount
/// (STATX_MNT_ID_UNIQUE; the reusable STATX_MNT_ID on kernels before 6.8).
pub(crate) fn mount_id(fd: BorrowedFd<'_>) -> Option<u64> {
    mount_id_of(fd, &[STATX_MNT_ID_UNIQUE, STATX_MNT_ID])
}

/// The mount `fd` is on by the number /proc/self/mountinfo shows first
/// (STATX_MNT_ID).
pub(crate) fn mount_id_reusable(fd: BorrowedFd<'_>) -> Option<u64> {
    mount_id_of(fd, &[STATX_MNT_ID])
}

const STATX_MNT_ID: u32 = 0x1000;
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

fn mount_id_of(fd: BorrowedFd<'_>, masks: &[u32]) -> Option<u64> {
    for &mask in masks {
        // SAFETY: statx writes only into `buf`, which is a valid statx
        // struct; the path is a NUL-terminated empty string.
        let mut buf: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `fd` is a valid descriptor for the call.
        let r = unsafe {
            libc::statx(
                fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH,
                mask,
                &mut buf,
            )
        };
        if r == 0 && buf.stx_mask & mask != 0 {
            return Some(buf.stx_mnt_id);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_structs_have_the_kernel_sizes() {
        use std::mem::size_of;
        assert_eq!(size_of::<VolArgs>(), 4096);
        assert_eq!(size_of::<VolArgsV2>(), 4096);
        assert_eq!(size_of::<ReceivedSubvolArgs>(), 200);
        assert_eq!(size_of::<GetSubvolInfoArgs>(), 504);
        assert_eq!(size_of::<FsInfoArgs>(), 1024);
        assert_eq!(size_of::<SearchKey>(), 104);
        assert_eq!(size_of::<SearchArgs>(), 4096);
        assert_eq!(size_of::<InoLookupArgs>(), 4096);
        assert_eq!(size_of::<EncodedIoArgs>(), 128);
        assert_eq!(size_of::<FileCloneRange>(), 32);
        assert_eq!(size_of::<FsverityEnableArg>(), 128);
    }

    #[test]
    fn request_numbers_match_the_kernel_headers() {
        // Values from linux/btrfs.h and linux/fs.h on x86_64.
        assert_eq!(nix::request_code_write!(0x94, 14, 4096), 0x5000_940e);
        assert_eq!(nix::request_code_write!(0x94, 13, 32), 0x4020_940d);
        assert_eq!(nix::request_code_write!(0x94, 9, 4), 0x4004_9409);
        assert_eq!(nix::request_code_readwrite!(0x94, 37, 200), 0xc0c8_9425);
        assert_eq!(nix::request_code_readwrite!(0x94, 17, 4096), 0xd000_9411);
        assert_eq!(nix::request_code_readwrite!(0x94, 18, 4096), 0xd000_9412);
        assert_eq!(nix::request_code_write!(0x94, 64, 128), 0x4080_9440);
        assert_eq!(nix::request_code_write!(b'f', 133, 128), 0x4080_6685);
    }
}
