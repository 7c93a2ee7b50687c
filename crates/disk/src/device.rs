//! Devices and image files: opening, reading at physical offsets, and their superblocks.

use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{CopyFault, CopyRefusal, Error, NoSuperblockReason, Result};
use crate::superblock::{copy_offsets, Superblock, SUPER_INFO_SIZE};

/// Reads of at least this many bytes from a mapped file use `pread`: bulk
/// file data then never faults pages into the mapping (which would count
/// the whole image in our RSS) and costs one copy, as a memcpy would.
const PREAD_MIN: usize = 4 << 10;

/// Alignment of O_DIRECT reads (the logical block size of any device we meet).
const DIRECT_ALIGN: usize = 4096;

/// How a device's bytes are reached.
enum Source {
    /// Memory-mapped image file or unmounted block device; the file is kept
    /// for large reads, which `pread` serves without mapping pages into
    /// our address space.
    Mmap(memmap2::Mmap, File),
    /// A mounted block device, read with O_DIRECT so the page cache is bypassed.
    Direct(File),
    /// An image held in memory.
    Memory(Arc<[u8]>),
}

impl Source {
    /// The whole device as bytes in memory, unless it is read with O_DIRECT.
    fn mapped(&self) -> Option<&[u8]> {
        match self {
            Source::Mmap(m, _) => Some(m),
            Source::Memory(m) => Some(m),
            Source::Direct(_) => None,
        }
    }
}

/// The bytes of one device or image file.
struct DeviceIo {
    path: PathBuf,
    source: Source,
    size: u64,
}

/// One opened device or image file and the superblock copy chosen on it.
pub struct Device {
    io: DeviceIo,
    superblock: Superblock,
    notes: Vec<String>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("path", &self.io.path)
            .field("size", &self.io.size)
            .field("direct", &self.is_direct())
            .finish_non_exhaustive()
    }
}

/// The smallest file that can hold the first superblock.
const MIN_SIZE: u64 = (64 << 10) + 4096;

/// The error for a path that cannot be looked at or opened.
fn unreadable(path: &Path, e: std::io::Error) -> Error {
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or device".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            use std::os::unix::fs::MetadataExt;
            match std::fs::metadata(path) {
                Ok(m) if m.file_type().is_block_device() => "permission denied (reading a device needs root, or membership of its group, often disk)".to_string(),
                Ok(m) => format!(
                    "permission denied (owner uid {}, mode {:04o}: run as a user who may read it)",
                    m.uid(),
                    m.mode() & 0o7777
                ),
                Err(_) => "permission denied".to_string(),
            }
        }
        _ => {
            return Error::Io {
                path: path.to_owned(),
                source: e,
            }
        }
    };
    Error::NotAFilesystem {
        path: path.to_owned(),
        why,
    }
}

impl Device {
    /// Opens `path` and chooses its superblock copy.
    ///
    /// Image files are memory-mapped. Block devices are memory-mapped too unless
    /// their filesystem is mounted; then they are read with O_DIRECT and a note
    /// says so (see [`Device::notes`]).
    pub fn open(path: &Path) -> Result<Device> {
        let err = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(|e| unreadable(path, e))?;
        let is_block = meta.file_type().is_block_device();
        let not = |why: String| Error::NotAFilesystem {
            path: path.to_owned(),
            why,
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            return Err(not(
                "is a directory; give the block device or image file that holds the btrfs filesystem (for a mounted one, the device in the first column of findmnt PATH)".into(),
            ));
        }
        if !is_block && !ft.is_file() {
            let what = if ft.is_char_device() {
                "a character device"
            } else if ft.is_fifo() {
                "a pipe"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            return Err(not(format!(
                "is {what}, not a block device or an image file that could hold btrfs"
            )));
        }
        if !is_block && meta.len() < MIN_SIZE {
            return Err(not(format!(
                "is {} bytes, too small for btrfs (its first superblock is at 64 KiB)",
                meta.len()
            )));
        }
        let mut notes = Vec::new();
        let (source, size) = if is_block {
            let direct = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
                .open(path)
                .map_err(|e| unreadable(path, e))?;
            let size = device_size(&direct).map_err(err)?;
            (Source::Direct(direct), size)
        } else {
            let file = File::open(path).map_err(|e| unreadable(path, e))?;
            let size = meta.len();
            (map_file(file, size).map_err(err)?, size)
        };
        let mut io = DeviceIo {
            path: path.to_owned(),
            source,
            size,
        };
        let superblock = io.choose_superblock(&mut notes)?;
        if is_block {
            let fsid = superblock.fsid();
            let mounted =
                is_mounted(meta.rdev()) || Path::new(&format!("/sys/fs/btrfs/{fsid}")).exists();
            if mounted {
                notes.push(format!(
                    "{}: filesystem {fsid} is mounted; reading the device with O_DIRECT because the block device page cache can be stale",
                    path.display()
                ));
            } else {
                let file = File::open(path).map_err(err)?;
                io.source = map_file(file, size).map_err(err)?;
            }
        }
        Ok(Device {
            io,
            superblock,
            notes,
        })
    }

    /// A device whose bytes are `image`, held in memory; `name` stands for
    /// its path in messages.
    pub fn from_bytes(name: impl Into<PathBuf>, image: Arc<[u8]>) -> Result<Device> {
        let io = DeviceIo {
            path: name.into(),
            size: image.len() as u64,
            source: Source::Memory(image),
        };
        let mut notes = Vec::new();
        let superblock = io.choose_superblock(&mut notes)?;
        Ok(Device {
            io,
            superblock,
            notes,
        })
    }

    /// The path it was opened as.
    pub fn path(&self) -> &Path {
        &self.io.path
    }
    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.io.size
    }
    /// The chosen superblock copy.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }
    /// The superblock as the device holds it now: on a mounted filesystem,
    /// that of the newest commit (chosen as at open, without notes).
    pub fn read_superblock(&self) -> Result<Superblock> {
        self.io.choose_superblock(&mut Vec::new())
    }
    /// Every valid superblock copy on the device, as it holds them now.
    pub fn superblock_copies(&self) -> Vec<Superblock> {
        copy_offsets()
            .into_iter()
            .filter(|off| off + SUPER_INFO_SIZE as u64 <= self.io.size)
            .filter_map(|off| {
                let mut buf = vec![0u8; SUPER_INFO_SIZE];
                self.io.read_at(off, &mut buf).ok()?;
                Superblock::parse(&buf, off).ok()
            })
            .collect()
    }
    /// Whether reads bypass the page cache with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        matches!(self.io.source, Source::Direct(_))
    }
    /// Things worth telling the user about how this device is read.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Fills `buf` from physical offset `physical`.
    #[inline]
    pub fn read_at(&self, physical: u64, buf: &mut [u8]) -> Result<()> {
        self.io.read_at(physical, buf)
    }

    /// Borrows `len` bytes at `physical` without copying, when memory-mapped.
    #[inline]
    pub fn slice(&self, physical: u64, len: usize) -> Option<&[u8]> {
        self.io.slice(physical, len)
    }
}

impl DeviceIo {
    /// Picks the primary copy when valid, else the valid mirror with the highest generation.
    fn choose_superblock(&self, notes: &mut Vec<String>) -> Result<Superblock> {
        let refuse = |copy, reason| CopyRefusal { copy, reason };
        let mut why = Vec::new();
        let mut best: Option<Superblock> = None;
        for (i, off) in copy_offsets().into_iter().enumerate() {
            if off + SUPER_INFO_SIZE as u64 > self.size {
                break;
            }
            let mut buf = vec![0u8; SUPER_INFO_SIZE];
            if let Err(e) = self.read_at(off, &mut buf) {
                why.push(refuse(i, CopyFault::Read(Box::new(e))));
                continue;
            }
            match Superblock::parse(&buf, off) {
                Ok(sb) if i == 0 => return Ok(sb),
                Ok(sb) => {
                    let better = match &best {
                        None => true,
                        Some(b) => sb.fsid() == b.fsid() && sb.generation() > b.generation(),
                    };
                    if better {
                        best = Some(sb);
                    }
                }
                Err(e) => why.push(refuse(i, CopyFault::Invalid(e))),
            }
        }
        match best {
            Some(sb) => {
                notes.push(format!(
                    "{}: primary superblock is bad ({}); using the copy at physical {}",
                    self.path.display(),
                    why.first()
                        .map_or_else(|| "unreadable".to_owned(), ToString::to_string),
                    sb.bytenr()
                ));
                Ok(sb)
            }
            None => Err(Error::NoSuperblock {
                path: self.path.clone(),
                reason: if why.is_empty() {
                    NoSuperblockReason::DeviceTooSmall { size: self.size }
                } else {
                    NoSuperblockReason::Copies(why)
                },
            }),
        }
    }

    /// Fills `buf` from physical offset `physical`.
    pub fn read_at(&self, physical: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        let short = || Error::ShortDevice {
            path: self.path.clone(),
            physical,
            len,
        };
        let end = physical
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(short)?;
        match &self.source {
            Source::Mmap(_, f) if buf.len() >= PREAD_MIN => {
                f.read_exact_at(buf, physical).map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => short(),
                    _ => Error::Io {
                        path: self.path.clone(),
                        source: e,
                    },
                })
            }
            Source::Direct(f) => self.read_direct(f, physical, buf),
            Source::Mmap(..) | Source::Memory(_) => {
                let src = usize::try_from(physical)
                    .ok()
                    .zip(usize::try_from(end).ok())
                    .and_then(|(s, e)| self.source.mapped()?.get(s..e))
                    .ok_or_else(short)?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// Borrows `len` bytes at `physical` without copying, when memory-mapped.
    pub fn slice(&self, physical: u64, len: usize) -> Option<&[u8]> {
        let s = usize::try_from(physical).ok()?;
        self.source.mapped()?.get(s..s.checked_add(len)?)
    }

    fn read_direct(&self, f: &File, physical: u64, buf: &mut [u8]) -> Result<()> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let align = DIRECT_ALIGN as u64;
        let start = physical - physical % align;
        let end = (physical + buf.len() as u64).div_ceil(align) * align;
        let span = (end - start) as usize;
        // An aligned window inside an over-allocated vector.
        let mut raw = vec![0u8; span + DIRECT_ALIGN];
        let skew = raw.as_ptr().align_offset(DIRECT_ALIGN);
        let window = &mut raw[skew..skew + span];
        let mut done = 0usize;
        while done < span {
            let n = f
                .read_at(&mut window[done..], start + done as u64)
                .map_err(io)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        let head = (physical - start) as usize;
        if done < head + buf.len() {
            return Err(Error::ShortDevice {
                path: self.path.clone(),
                physical,
                len: buf.len(),
            });
        }
        buf.copy_from_slice(&window[head..head + buf.len()]);
        Ok(())
    }
}

fn map_file(file: File, size: u64) -> std::io::Result<Source> {
    let len = usize::try_from(size)
        .map_err(|_| std::io::Error::other("device too large to map on this platform"))?;
    // SAFETY: the mapping is read-only and private to us; btrfs images and
    // unmounted devices are not written while we read them (a concurrent writer
    // would at worst make checksums fail, which is reported as an error).
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file)? };
    Ok(Source::Mmap(map, file))
}

fn device_size(f: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::End(0))
}

/// Whether the block device `rdev` appears as a mount source in /proc/self/mountinfo.
fn is_mounted(rdev: u64) -> bool {
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let want = format!("{major}:{minor}");
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .any(|l| l.split(' ').nth(2) == Some(want.as_str()))
        })
        .unwrap_or(false)
}
