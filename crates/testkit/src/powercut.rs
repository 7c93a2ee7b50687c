//! A block device that loses, at a power cut, everything not yet flushed.
//!
//! The kernel here has no device-mapper (no dm-flakey, no dm-log-writes),
//! so [`PowerCut`] builds the device from pieces that are there: a FUSE
//! filesystem served by a thread of the test process exposes one regular
//! file, `disk.img`, and a buffered loop device is attached to it. Two
//! sparse files back it in a temporary directory:
//!
//! * `volatile`, what the running system sees: every FUSE `WRITE` (and
//!   discard or zeroing `FALLOCATE`) lands there and every `READ` is served
//!   from there;
//! * `durable`, what the disk holds: on each FUSE `FSYNC`, which is what a
//!   flush (`REQ_PREFLUSH`, and `REQ_FUA` that the block layer turns into a
//!   flush) on the loop device becomes, the byte ranges written since the
//!   previous `FSYNC` are copied from `volatile` to `durable`.
//!
//! FUSE runs without a writeback cache, so every write the loop device
//! completes has reached the server before it completes, and a flush covers
//! all writes that completed before it was issued, as on a disk with a
//! volatile write cache. [`PowerCut::cut`] freezes `durable`: later flushes
//! are counted but copy nothing, while the running kernel goes on reading
//! and writing `volatile` without errors. [`PowerCut::into_durable`] then
//! takes the device down and hands over the durable image, the disk as
//! found when power returns, which [`Mounted::image`] mounts.
//!
//! That is the image dm-log-writes gives when its log is replayed up to the
//! last flush before the cut: every write that completed before a flush
//! was issued is there, nothing written after the last flush is (not even
//! part of it), and a write in flight while a flush was issued may go
//! either way. Discards and write-zeroes count as writes of zeros. Unlike
//! dm-log-writes there is one crash point per run (the cut), and unflushed
//! writes are never kept in part or out of order.
//!
//! Everything (mounts on the device, the loop device, the FUSE mount, the
//! server thread, the files) goes away on drop, also when a test panics.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use nix::fcntl::{fallocate, FallocateFlags};

use crate::run;

const DISK: &str = "disk.img";
const DISK_INO: INodeNo = INodeNo(2);
const TTL: Duration = Duration::from_secs(3600);
/// How much of a dirty range one flush step reads and writes at a time.
const CHUNK: u64 = 1 << 20;

/// Whether a [`PowerCut`] can be made here: what [`crate::kernel_available`]
/// asks, and FUSE. When not, prints one `SKIP <test>: ...` line and returns
/// false, or panics under `RSEND_REQUIRE_KERNEL=1` as that does.
pub fn available(test: &str) -> bool {
    if !crate::kernel_available(test) {
        return false;
    }
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    if std::env::var_os("RSEND_REQUIRE_KERNEL").is_some_and(|v| v == "1") {
        panic!("{test}: needs FUSE (/dev/fuse)");
    }
    println!("SKIP {test}: needs FUSE (no /dev/fuse)");
    false
}

/// A loop device over a FUSE file whose unflushed writes a power cut loses.
pub struct PowerCut {
    dir: Option<tempfile::TempDir>,
    fuse_mnt: PathBuf,
    session: Option<fuser::BackgroundSession>,
    shared: Arc<Shared>,
    loopdev: Option<PathBuf>,
}

impl PowerCut {
    /// A device of `size_mib` MiB, all zeros and all durable, attached to a
    /// loop device ([`PowerCut::dev`]) ready for `mkfs`.
    pub fn new(size_mib: u64) -> PowerCut {
        let size = size_mib << 20;
        let dir = tempfile::Builder::new()
            .prefix("rsend-powercut-")
            .tempdir()
            .unwrap();
        let fuse_mnt = dir.path().join("mnt");
        std::fs::create_dir(&fuse_mnt).unwrap();
        let fuse_mnt = fuse_mnt.canonicalize().unwrap();
        let backing = |name: &str| {
            let f = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(dir.path().join(name))
                .unwrap();
            f.set_len(size).unwrap();
            f
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                volatile: backing("volatile"),
                durable: backing("durable"),
                dirty: BTreeMap::new(),
                cut: false,
            }),
            flushes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        let mut me = PowerCut {
            dir: Some(dir),
            fuse_mnt,
            session: None,
            shared: shared.clone(),
            loopdev: None,
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("powercut".into()),
            MountOption::Subtype("powercut".into()),
            MountOption::NoDev,
            MountOption::NoSuid,
            MountOption::NoExec,
        ];
        let disk = Disk { size, shared };
        me.session = Some(
            fuser::spawn_mount(disk, &me.fuse_mnt, &config)
                .unwrap_or_else(|e| panic!("cannot mount FUSE on {}: {e}", me.fuse_mnt.display())),
        );
        let out = run(Command::new("losetup")
            .args(["--find", "--show", "--direct-io=off"])
            .arg(me.file()));
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        me.loopdev = Some(dev.clone());
        // A loop device that claims to have no volatile cache is never sent
        // a flush, so nothing would ever become durable.
        let name = dev.file_name().unwrap().to_string_lossy().into_owned();
        let cache = std::fs::read_to_string(format!("/sys/block/{name}/queue/write_cache"))
            .unwrap_or_default();
        assert_eq!(
            cache.trim(),
            "write back",
            "{} does not pass flushes on",
            dev.display()
        );
        me
    }

    /// The loop device (`/dev/loopN`).
    pub fn dev(&self) -> &Path {
        self.loopdev.as_deref().expect("the device was taken down")
    }

    /// The FUSE file the loop device is attached to.
    pub fn file(&self) -> PathBuf {
        self.fuse_mnt.join(DISK)
    }

    /// How many flushes (FUSE `FSYNC`s) have reached the device, also after
    /// the cut.
    pub fn flushes(&self) -> u64 {
        self.shared.flushes.load(Ordering::SeqCst)
    }

    /// How many writes (FUSE `WRITE`s and zeroing `FALLOCATE`s) have
    /// reached the device, also after the cut.
    pub fn writes(&self) -> u64 {
        self.shared.writes.load(Ordering::SeqCst)
    }

    /// The power cut: the durable image keeps what the last completed flush
    /// made durable and never changes again. A flush in progress finishes
    /// first. The device goes on working for the running kernel.
    pub fn cut(&self) {
        let mut inner = self.shared.lock();
        inner.cut = true;
        inner.dirty.clear();
    }

    /// Whether [`PowerCut::cut`] has happened.
    pub fn is_cut(&self) -> bool {
        self.shared.lock().cut
    }

    /// Takes the device down (whatever is still mounted on it is unmounted,
    /// lazily if busy; the loop device is detached; FUSE is unmounted) and
    /// returns the durable image: the disk after a power cut at
    /// [`PowerCut::cut`], or, without a cut, now. Unmount your filesystem
    /// first if it should be unmounted cleanly (as it was not cut off).
    pub fn into_durable(mut self) -> Durable {
        self.teardown();
        let dir = self.dir.take().unwrap();
        let _ = std::fs::remove_file(dir.path().join("volatile"));
        let path = dir.path().join("durable");
        Durable { _dir: dir, path }
    }

    fn teardown(&mut self) {
        if let Some(dev) = self.loopdev.take() {
            for mnt in mounts_of(&dev) {
                crate::unmount(&mnt);
            }
            detach(&dev, &self.fuse_mnt.join(DISK));
        }
        if let Some(session) = self.session.take() {
            use nix::mount::{umount2, MntFlags};
            if umount2(&self.fuse_mnt, MntFlags::empty()).is_err() {
                // Still busy (a loop device that would not let go): abort
                // the connection so the server thread ends, then detach.
                let _ = umount2(&self.fuse_mnt, MntFlags::MNT_FORCE);
                let _ = umount2(&self.fuse_mnt, MntFlags::MNT_DETACH);
            }
            let _ = session.join();
        }
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The durable image of a [`PowerCut`], deleted when dropped.
pub struct Durable {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Durable {
    /// The image file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Attaches the image to a writable loop device and mounts it (so a
    /// journal or log can be replayed) with `-o <opts>`.
    pub fn mount(&self, opts: &str) -> Mounted {
        Mounted::image(&self.path, opts)
    }
}

/// A filesystem mounted on a scratch directory, from a block device or from
/// an image file on a writable loop device; unmounted (and detached) when
/// dropped, also when a test fails.
pub struct Mounted {
    dir: tempfile::TempDir,
    /// The loop device and its backing file.
    loopdev: Option<(PathBuf, PathBuf)>,
    mounted: bool,
}

impl Mounted {
    /// Mounts block device `dev` with `-o <opts>`.
    pub fn device(dev: &Path, opts: &str) -> Mounted {
        let mut me = Mounted::empty();
        me.mount(dev, opts);
        me
    }

    /// Attaches image file `image` to a writable loop device and mounts it
    /// with `-o <opts>`.
    pub fn image(image: &Path, opts: &str) -> Mounted {
        let mut me = Mounted::empty();
        let image = image
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", image.display()));
        let out = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image));
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        me.loopdev = Some((dev.clone(), image));
        me.mount(&dev, opts);
        me
    }

    fn empty() -> Mounted {
        let dir = tempfile::Builder::new()
            .prefix("rsend-mounted-")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        Mounted {
            dir,
            loopdev: None,
            mounted: false,
        }
    }

    fn mount(&mut self, dev: &Path, opts: &str) {
        let mut cmd = Command::new("mount");
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        run(cmd.arg(dev).arg(self.mnt()));
        self.mounted = true;
    }

    /// The mount point.
    pub fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// The loop device, when [`Mounted::image`] made one.
    pub fn loop_device(&self) -> Option<&Path> {
        self.loopdev.as_ref().map(|(dev, _)| dev.as_path())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted {
            crate::unmount(&self.mnt());
        }
        if let Some((dev, image)) = self.loopdev.take() {
            detach(&dev, &image);
        }
    }
}

/// Detaches loop device `dev` from `backing` and waits (up to 10 s) until
/// it is: `losetup -d` only marks a device still open (as just after an
/// unmount) to be detached at its last close.
fn detach(dev: &Path, backing: &Path) {
    let _ = Command::new("losetup")
        .arg("-d")
        .arg(dev)
        .stderr(Stdio::null())
        .status();
    let name = dev.file_name().unwrap_or_default().to_string_lossy();
    let attached = format!("/sys/block/{name}/loop/backing_file");
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until
        && std::fs::read_to_string(&attached).is_ok_and(|b| Path::new(b.trim_end()) == backing)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The mount points of `dev` in /proc/mounts, the latest first.
fn mounts_of(dev: &Path) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut found: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let src = f.next()?;
            let mnt = f.next()?;
            (Path::new(src) == dev).then(|| PathBuf::from(unescape(mnt)))
        })
        .collect();
    found.reverse();
    found
}

/// A /proc/mounts field with its `\ooo` escapes decoded.
fn unescape(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(o)) => {
                out.push(o.iter().fold(0u8, |v, c| (v << 3) | (c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

struct Shared {
    inner: Mutex<Inner>,
    flushes: AtomicU64,
    writes: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Inner {
    volatile: File,
    durable: File,
    /// Byte ranges written since the last flush: start -> end, disjoint and
    /// not touching.
    dirty: BTreeMap<u64, u64>,
    cut: bool,
}

impl Inner {
    fn dirty(&mut self, start: u64, end: u64) {
        if self.cut || start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        while let Some((&a, &b)) = self.dirty.range(..=e).next_back() {
            if b < s {
                break;
            }
            self.dirty.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.dirty.insert(s, e);
    }

    /// Copies the dirty ranges to the durable image, keeping it sparse.
    fn flush(&mut self) -> std::io::Result<()> {
        if self.cut {
            return Ok(());
        }
        let mut buf = vec![0u8; CHUNK as usize];
        while let Some((s, e)) = self.dirty.pop_first() {
            let mut at = s;
            while at < e {
                let n = (e - at).min(CHUNK) as usize;
                let b = &mut buf[..n];
                self.volatile.read_exact_at(b, at)?;
                if b.iter().all(|&x| x == 0) {
                    fallocate(
                        self.durable.as_raw_fd(),
                        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
                        at as i64,
                        n as i64,
                    )?;
                } else {
                    self.durable.write_all_at(b, at)?;
                }
                at += n as u64;
            }
        }
        Ok(())
    }
}

/// The FUSE filesystem: a root directory holding `disk.img`.
struct Disk {
    size: u64,
    shared: Arc<Shared>,
}

fn errno(e: std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EIO, Errno::from_i32)
}

impl Disk {
    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            INodeNo::ROOT => (FileType::Directory, 0o700, 0, 2),
            DISK_INO => (FileType::RegularFile, 0o600, self.size, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// `len` bytes at `offset`, or the error for an access past the end.
    fn span(&self, offset: u64, len: u64) -> Result<(u64, u64), Errno> {
        let end = offset.checked_add(len).ok_or(Errno::EINVAL)?;
        if end > self.size {
            return Err(Errno::ENOSPC);
        }
        Ok((offset, end))
    }
}

impl Filesystem for Disk {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match (parent, name == DISK) {
            (INodeNo::ROOT, true) => {
                reply.entry(&TTL, &self.attr(DISK_INO).unwrap(), Generation(0));
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.attr(ino) {
            Some(a) if size.is_none_or(|s| s == a.size) => reply.attr(&TTL, &a),
            Some(_) => reply.error(Errno::EPERM),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino {
            DISK_INO => reply.opened(FileHandle(0), FopenFlags::empty()),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let end = offset.saturating_add(size.into()).min(self.size);
        let mut buf = vec![0u8; end.saturating_sub(offset) as usize];
        let inner = self.shared.lock();
        match inner.volatile.read_exact_at(&mut buf, offset) {
            Ok(()) => reply.data(&buf),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let (s, e) = match self.span(offset, data.len() as u64) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let mut inner = self.shared.lock();
        self.shared.writes.fetch_add(1, Ordering::SeqCst);
        match inner.volatile.write_all_at(data, offset) {
            Ok(()) => {
                inner.dirty(s, e);
                reply.written(data.len() as u32)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let Some(mode) = FallocateFlags::from_bits(mode) else {
            return reply.error(Errno::EOPNOTSUPP);
        };
        let (s, e) = match self.span(offset, length) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let mut inner = self.shared.lock();
        let zeroes = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_ZERO_RANGE;
        if mode.intersects(zeroes) {
            self.shared.writes.fetch_add(1, Ordering::SeqCst);
        }
        match fallocate(inner.volatile.as_raw_fd(), mode, s as i64, (e - s) as i64) {
            Ok(()) => {
                if mode.intersects(zeroes) {
                    inner.dirty(s, e);
                }
                reply.ok()
            }
            Err(e) => reply.error(Errno::from_i32(e as i32)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2), not a cache flush.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.shared.lock();
        self.shared.flushes.fetch_add(1, Ordering::SeqCst);
        match inner.flush() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.size / 4096;
        reply.statfs(blocks, 0, 0, 2, 0, 4096, 255, 4096);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_ranges_merge() {
        let f = || tempfile::tempfile().unwrap();
        let mut i = Inner {
            volatile: f(),
            durable: f(),
            dirty: BTreeMap::new(),
            cut: false,
        };
        for (s, e) in [
            (10, 20),
            (30, 40),
            (50, 60),
            (20, 25),
            (35, 52),
            (0, 5),
            (100, 100),
        ] {
            i.dirty(s, e);
        }
        assert_eq!(
            i.dirty.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>(),
            [(0, 5), (10, 25), (30, 60)]
        );
        i.dirty(0, 70);
        assert_eq!(i.dirty.len(), 1);
        i.cut = true;
        i.dirty.clear();
        i.dirty(0, 10);
        assert!(i.dirty.is_empty());
    }

    #[test]
    fn flush_copies_dirty_ranges_and_keeps_holes() {
        let f = || tempfile::tempfile().unwrap();
        let mut i = Inner {
            volatile: f(),
            durable: f(),
            dirty: BTreeMap::new(),
            cut: false,
        };
        let size = 4 * CHUNK;
        i.volatile.set_len(size).unwrap();
        i.durable.set_len(size).unwrap();
        i.durable.write_all_at(&[7u8; 4096], CHUNK).unwrap();
        i.volatile.write_all_at(b"hello", 3).unwrap();
        i.dirty(3, 8);
        i.dirty(CHUNK, CHUNK + 4096); // zeros in volatile: a hole again
        i.volatile.write_all_at(b"late", 2 * CHUNK).unwrap();
        i.flush().unwrap();
        assert!(i.dirty.is_empty());
        let mut b = vec![0u8; 8];
        i.durable.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"\0\0\0hello");
        let mut z = vec![1u8; 4096];
        i.durable.read_exact_at(&mut z, CHUNK).unwrap();
        assert!(z.iter().all(|&x| x == 0));
        // Written but never marked dirty: not copied.
        let mut l = [0u8; 4];
        i.durable.read_exact_at(&mut l, 2 * CHUNK).unwrap();
        assert_eq!(&l, &[0; 4]);
    }
}
