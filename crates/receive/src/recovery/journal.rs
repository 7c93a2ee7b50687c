//! The journal of a running receive: what only its memory holds, kept
//! where a killed process leaves it, so that a receive killed outright
//! (SIGKILL, the OOM killer, a crash of rreceive) can be resumed.
//!
//! Everything a command does to the destination is in the page cache once
//! its system call returns, and survives the process. What does not is
//! what rreceive holds back: directory times (the engine's `dirtimes`), new
//! files handed to other threads, immutable flags and capabilities due at
//! END. The journal is a file in `/dev/shm` (memory: it survives the
//! process, not the machine; `RRECEIVE_JOURNAL_DIR` names another place),
//! mapped shared, in which the receiving thread records, as it goes:
//!
//! - a **checkpoint**: a point of the stream where nothing was held back
//!   (directory times applied), with the immutable flags and capabilities
//!   still due, from which `rsend --resume` can send;
//! - how far the commands after it are **applied** (`until`), and which
//!   one was being applied (`now`);
//! - a **log** of every change to what is held: directory-time records,
//!   new files handed over (by their commands, with the job number the
//!   finishing thread reports done), flags and capabilities due.
//!
//! Each record is complete in the mapping before its length is published,
//! so a killed process leaves a whole log. A resumed receive rebuilds what
//! was held from it, skips the commands applied already, makes again the
//! new files not known finished, and applies the one command that may have
//! been under way with care (it may be done already). A machine that went
//! down loses the journal with the page cache: that subvolume is not
//! resumable, and says so; so does one whose destination was unmounted
//! since (the journal records the mount, by the kernel's unique mount id):
//! a power cut on the destination's device alone looks like that.
//!
//! Two log areas take turns: a checkpoint writes the other one, then
//! switches, so a kill at any moment leaves one whole.
//!
//! Owns: the journal's file and format, the directory-time [`Record`] it
//! logs, and reading a killed receive's journal back ([`find`]). May call:
//! `ioctl` (the shared mapping); nothing of the engine, which calls it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{compiler_fence, Ordering};

use btrfs_stream::resume::Point;
use btrfs_stream::{CommandKind, Position, Timespec};
use memmap2::MmapMut;
use nix::fcntl::Flock;
use uuid::Uuid;

/// Where a directory's recorded times came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A UTIMES of the stream.
    Utimes,
    /// The directory itself, before the stream changed its entries.
    Before,
    /// None: this receive made the directory and no UTIMES came yet (its
    /// times are the receive's, nothing to put back). Saves reading them.
    Created,
}

/// The times one directory must end with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    pub(crate) atime: Timespec,
    pub(crate) mtime: Timespec,
    pub(crate) source: Source,
    /// The command named if applying the times fails.
    pub(crate) cmd: CommandKind,
    pub(crate) pos: Position,
    /// Whether the directory's entries changed for a command after the one
    /// the times came from.
    pub(crate) changed: bool,
    /// When it was last recorded or changed (a counter, the directory
    /// times' own).
    pub(crate) last: u64,
}

impl Record {
    pub(crate) fn new(
        atime: Timespec,
        mtime: Timespec,
        source: Source,
        cmd: CommandKind,
        pos: Position,
    ) -> Record {
        Record {
            atime,
            mtime,
            source,
            cmd,
            pos,
            changed: source == Source::Before,
            last: 0,
        }
    }

    /// The record of a directory this receive just made.
    pub(crate) fn created(cmd: CommandKind, pos: Position) -> Record {
        let zero = Timespec::default();
        Record::new(zero, zero, Source::Created, cmd, pos)
    }
}

const MAGIC: &[u8; 8] = b"RRJRNL01";
const HEADER: usize = 4096;
/// Bytes of each log area; a checkpoint comes when one is 3/4 full.
const AREA: usize = 4 << 20;
/// A checkpoint comes at least every so many bytes of stream.
const CHECKPOINT_BYTES: u64 = 1 << 30;

// Header fields (little endian).
const H_BOOT: usize = 8;
const H_UUID: usize = 24;
const H_CTRANSID: usize = 40;
const H_VERSION: usize = 48;
const H_ACTIVE: usize = 52;
const H_AREA: [usize; 2] = [64, 128];
const A_COUNT: usize = 0;
const A_OFFSET: usize = 8;
const A_DIGEST: usize = 16;
const A_LEN: usize = 32;
const H_UNTIL: usize = 192;
const H_NOW: usize = 200;
const H_DONE: usize = 208;
const H_MOUNT: usize = 216;
/// DEST's absolute path: its length (u16), then its bytes.
const H_PATH: usize = 256;

// Log record tags.
const T_INSERT: u8 = 1;
const T_REPLACE: u8 = 2;
const T_CHANGE: u8 = 3;
const T_RENAMED: u8 = 4;
const T_REMOVED: u8 = 5;
const T_EVICTED: u8 = 6;
const T_CLEARED: u8 = 7;
const T_RECIPE: u8 = 8;
const T_FLAGS: u8 = 9;
const T_CAPS: u8 = 10;

/// A recipe's job number meaning "finished" (rewritten when resumed).
const JOB_DONE: u64 = 0;
/// A recipe's job number meaning "not known finished".
const JOB_OPEN: u64 = u64::MAX;

/// Where the journal of subvolume `name` in the directory with device and
/// inode `dest` lives.
fn path_for(dest: (u64, u64), name: &[u8]) -> PathBuf {
    let dir = std::env::var_os("RRECEIVE_JOURNAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(format!(
                "/dev/shm/rreceive-{}",
                nix::unistd::geteuid().as_raw()
            ))
        });
    let hex = btrfs_text::hex::encode(name);
    dir.join(format!("{:x}-{:x}-{hex}", dest.0, dest.1))
}

/// The bytes of the journal of subvolume `name` in `dest` (to be kept on
/// the destination while a receive resumed after a kill goes over what the
/// killed one applied: see [`restore`]).
pub(crate) fn bytes(dest: (u64, u64), name: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(path_for(dest, name))?
        .take((HEADER + 2 * AREA) as u64)
        .read_to_end(&mut v)?;
    if v.get(..8) != Some(MAGIC.as_slice()) {
        return Err(io::Error::other("the journal is not whole"));
    }
    Ok(v)
}

/// Puts back a journal from its `bytes` kept on the destination, after a
/// power loss cut the receive that had resumed from it: as if from this
/// boot and `mount`, with commands up to `now` maybe applied (those that
/// receive applied past the killed one's). [`find`] then reads it.
pub(crate) fn restore(
    dest: (u64, u64),
    dest_fd: std::os::fd::BorrowedFd<'_>,
    name: &[u8],
    bytes: &[u8],
    mount: u64,
    now: u64,
) -> io::Result<()> {
    if bytes.len() < HEADER || bytes.get(..8) != Some(MAGIC.as_slice()) {
        return Err(io::Error::other("the journal kept is not whole"));
    }
    let path = path_for(dest, name);
    let dir = path.parent().ok_or(io::ErrorKind::InvalidInput)?;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o077 != 0 {
        return Err(io::Error::other(
            "the journal directory is not this user's alone",
        ));
    }
    let mut b = bytes.to_vec();
    put(&mut b, H_BOOT, &boot_id());
    put(&mut b, H_MOUNT, &mount.to_le_bytes());
    put_dest(&mut b, dest_fd);
    let was = get8(&b, H_NOW);
    put(&mut b, H_NOW, &was.max(now).to_le_bytes());
    b.resize(HEADER + 2 * AREA, 0);
    // Whole under its name at once: another receive's sweep never sees
    // part of it.
    let mut tmp = path.clone().into_os_string();
    tmp.push(".new");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    io::Write::write_all(&mut f, &b)?;
    std::fs::rename(&tmp, &path)
}

/// Removes the journal of subvolume `name` in `dest`, if any: before a new
/// receive of that name makes it, and when it is deleted, so that an old
/// journal never speaks for a new receive.
pub(crate) fn forget(dest: (u64, u64), name: &[u8]) {
    let _ = std::fs::remove_file(path_for(dest, name));
}

/// Removes the journals that describe nothing any more, unless a running
/// receive holds them: those of another boot, those whose DEST is gone (or
/// is now another directory), and those of subvolumes `dest` (device and
/// inode) no longer holds as incomplete (`incomplete(name)` false): deleted
/// with `rm -rf`, say.
pub(crate) fn sweep(dest: (u64, u64), incomplete: impl Fn(&[u8]) -> bool) {
    let Some(dir) = path_for(dest, b"").parent().map(PathBuf::from) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    let boot = boot_id();
    for e in entries.flatten() {
        let file_name = e.file_name();
        let Some((id, name)) = parse_name(file_name.as_encoded_bytes()) else {
            continue;
        };
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(e.path())
        else {
            continue;
        };
        if !f.metadata().is_ok_and(|m| m.is_file() && m.uid() == me) {
            continue;
        }
        // Locked: a receive is running with it. Looked at under a shared
        // lock, so that others reading it (`--list`) are not turned away.
        let Ok(f) = Flock::lock(f, nix::fcntl::FlockArg::LockSharedNonblock) else {
            continue;
        };
        let mut head = vec![0u8; HEADER];
        let whole = std::os::unix::fs::FileExt::read_exact_at(&*f, &mut head, 0).is_ok()
            && head.get(..8) == Some(MAGIC.as_slice());
        // One not whole yet may be being made (created, or put back after a
        // power loss) by a receive that has not locked it yet.
        let young = f
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().map_or(true, |a| a < MAKING));
        let Ok(f) = f.unlock() else {
            continue;
        };
        if !whole && young {
            continue;
        }
        // Decided unlocked: DEST may be on a filesystem slow to answer.
        let stale = !whole
            || head.get(H_BOOT..H_BOOT + 16) != Some(boot.as_slice())
            || match recorded_dest(&head) {
                // Its DEST is gone, or another directory now.
                Some(p) => !std::fs::metadata(&p).is_ok_and(|m| (m.dev(), m.ino()) == id),
                None => false,
            }
            || (id == dest && !incomplete(&name));
        if stale {
            remove_unchanged(f, &e.path(), &head);
        }
    }
}

/// Removes the journal `f` (at `path`) if nobody holds it, it is still
/// the file at `path` and its header is still `head`: a receive may have
/// taken it up since it was found stale. Locked only for that instant.
fn remove_unchanged(f: File, path: &std::path::Path, head: &[u8]) {
    use std::os::unix::fs::MetadataExt;
    let Ok(f) = Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) else {
        return;
    };
    let mut now = vec![0u8; HEADER];
    let same_header = std::os::unix::fs::FileExt::read_exact_at(&*f, &mut now, 0)
        .map_or(head.len() < HEADER, |()| now == head);
    let same_file = match (f.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    };
    if same_header && same_file {
        let _ = std::fs::remove_file(path);
    }
}

/// How long a journal that is not whole is taken to be being made.
const MAKING: std::time::Duration = std::time::Duration::from_secs(600);

/// The DEST and subvolume name a journal's file name gives.
fn parse_name(n: &[u8]) -> Option<((u64, u64), Vec<u8>)> {
    let s = std::str::from_utf8(n).ok()?;
    let mut it = s.splitn(3, '-');
    let dev = u64::from_str_radix(it.next()?, 16).ok()?;
    let ino = u64::from_str_radix(it.next()?, 16).ok()?;
    let name = btrfs_text::hex::decode(it.next()?).ok()?;
    (!name.is_empty()).then_some(((dev, ino), name))
}

/// Records in the journal header `m` where DEST (open at `dest_fd`) is now,
/// so that a journal whose DEST is gone is known (see [`sweep`]).
fn put_dest(m: &mut [u8], dest_fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::unix::ffi::OsStrExt;
    let p = std::fs::read_link(format!("/proc/self/fd/{}", dest_fd.as_raw_fd()));
    let b = p.as_ref().map_or(&[][..], |p| p.as_os_str().as_bytes());
    let fits = p.as_ref().is_ok_and(|p| p.is_absolute()) && H_PATH + 2 + b.len() <= HEADER;
    let b = if fits { b } else { &[] };
    if let Ok(len) = u16::try_from(b.len()) {
        put(m, H_PATH, &len.to_le_bytes());
        put(m, H_PATH + 2, b);
    }
}

/// The DEST path a journal header records, if any.
fn recorded_dest(head: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let len = usize::from(u16::from_le_bytes(
        head.get(H_PATH..H_PATH + 2)?.try_into().ok()?,
    ));
    let p = head.get(H_PATH + 2..H_PATH + 2 + len)?;
    (len > 0).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
}

/// This boot's id: a journal from another boot describes a page cache that
/// is gone.
fn boot_id() -> [u8; 16] {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| Uuid::parse_str(s.trim()).ok())
        .map_or([0; 16], |u| *u.as_bytes())
}

/// The journal of the subvolume being received.
pub(crate) struct Journal {
    map: MmapMut,
    /// Holds the lock that says a receive is running.
    _file: Flock<File>,
    path: PathBuf,
    area: usize,
    len: usize,
    /// The count of the command being applied: records are tagged with it.
    tag: u64,
    /// Stream bytes at the last checkpoint.
    since: u64,
    /// Resumed after a kill: until the next checkpoint, `until` and `now`
    /// never go below what the killed receive had reached.
    floor: (u64, u64),
}

fn put(m: &mut [u8], at: usize, b: &[u8]) {
    if let Some(d) = m.get_mut(at..at + b.len()) {
        d.copy_from_slice(b);
    }
}

fn get8(m: &[u8], at: usize) -> u64 {
    m.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

impl Journal {
    /// Starts the journal of subvolume `name` (received as `uuid` at
    /// `ctransid`, protocol `version`) in the directory `dest`; `None`
    /// where none can be kept (the receive then cannot be resumed after a
    /// kill, as before).
    pub(crate) fn create(
        dest: (u64, u64),
        dest_fd: std::os::fd::BorrowedFd<'_>,
        name: &[u8],
        uuid: Uuid,
        ctransid: u64,
        version: u32,
        mount: u64,
    ) -> Option<Journal> {
        let path = path_for(dest, name);
        let dir = path.parent()?;
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
        let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
        // Only a directory of this user's that nobody else can write: no
        // one else may put a journal (or a symlink) where rreceive reads.
        let meta = std::fs::symlink_metadata(dir).ok()?;
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return None;
        }
        if meta.mode() & 0o077 != 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).ok()?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .ok()?;
        if file.metadata().ok()?.uid() != nix::unistd::geteuid().as_raw() {
            return None;
        }
        let file = lock_settled(file, nix::fcntl::FlockArg::LockExclusiveNonblock).ok()?;
        let size = HEADER + 2 * AREA;
        // Room taken now: a store into the mapping must never find none.
        let made = file.set_len(0).ok().and_then(|()| {
            nix::fcntl::fallocate(
                file.as_raw_fd(),
                nix::fcntl::FallocateFlags::empty(),
                0,
                size as i64,
            )
            .ok()?;
            crate::ioctl::map_shared(&file).ok()
        });
        let Some(mut map) = made else {
            let _ = std::fs::remove_file(&path);
            return None;
        };
        put(&mut map, H_BOOT, &boot_id());
        put(&mut map, H_UUID, uuid.as_bytes());
        put(&mut map, H_CTRANSID, &ctransid.to_le_bytes());
        put(&mut map, H_VERSION, &version.to_le_bytes());
        put(&mut map, H_MOUNT, &mount.to_le_bytes());
        put_dest(&mut map, dest_fd);
        compiler_fence(Ordering::Release);
        put(&mut map, 0, MAGIC);
        Some(Journal {
            map,
            _file: file,
            path,
            area: 0,
            len: 0,
            tag: 0,
            since: 0,
            floor: (0, 0),
        })
    }

    /// Removes the journal (the receive ended, or stopped and recorded
    /// where in its side file).
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Records that command `n` is being applied; its records are tagged so.
    pub(crate) fn now(&mut self, n: u64) {
        self.tag = n;
        put(&mut self.map, H_NOW, &n.max(self.floor.1).to_le_bytes());
    }

    /// Commands up to `until` are applied (but for the new files logged),
    /// and jobs up to `done` finished.
    pub(crate) fn applied(&mut self, until: u64, done: u64) {
        put(&mut self.map, H_DONE, &done.to_le_bytes());
        compiler_fence(Ordering::Release);
        put(
            &mut self.map,
            H_UNTIL,
            &until.max(self.floor.0).to_le_bytes(),
        );
    }

    /// Jobs up to `done` are finished (before a command that waited for one
    /// of them).
    pub(crate) fn finished(&mut self, done: u64) {
        put(&mut self.map, H_DONE, &done.to_le_bytes());
    }

    /// Whether a checkpoint is due (the log area filling up, or much of the
    /// stream since the last one), at stream byte `offset`.
    pub(crate) fn due(&self, offset: u64) -> bool {
        self.len > AREA / 4 * 3 || offset.saturating_sub(self.since) > CHECKPOINT_BYTES
    }

    /// A checkpoint at `p` (nothing held back but `flags` and `caps`, which
    /// are logged again in the new area).
    pub(crate) fn checkpoint(
        &mut self,
        p: Point,
        flags: &[(Vec<u8>, u32)],
        caps: Option<&(Vec<u8>, Vec<u8>)>,
    ) {
        let other = 1 - self.area;
        self.area = other;
        self.len = 0;
        for (path, bits) in flags {
            self.flags(path, *bits);
        }
        if let Some((path, value)) = caps {
            self.caps(path, Some(value));
        }
        let meta = H_AREA[other];
        put(&mut self.map, meta + A_COUNT, &p.commands.to_le_bytes());
        put(&mut self.map, meta + A_OFFSET, &p.offset.to_le_bytes());
        put(&mut self.map, meta + A_DIGEST, &p.digest.to_le_bytes());
        put(&mut self.map, H_UNTIL, &p.commands.to_le_bytes());
        compiler_fence(Ordering::Release);
        put(&mut self.map, H_NOW, &p.commands.to_le_bytes());
        put(&mut self.map, H_ACTIVE, &(other as u32).to_le_bytes());
        self.since = p.offset;
        self.floor = (0, 0);
        // Whole again, should an area have overflowed before.
        compiler_fence(Ordering::Release);
        put(&mut self.map, 0, MAGIC);
    }

    /// Appends one record; returns where it starts in the area.
    fn append(&mut self, tag: u8, body: &[u8]) -> Option<usize> {
        let total = 4 + 1 + 8 + body.len();
        if self.len + total > AREA {
            // Full (a checkpoint was not possible in time): the journal
            // stops here and the receive is no longer resumable after a
            // kill; say so by making it unreadable.
            put(&mut self.map, 0, b"RRJRNLxx");
            return None;
        }
        let base = HEADER + self.area * AREA + self.len;
        put(&mut self.map, base, &(total as u32).to_le_bytes());
        put(&mut self.map, base + 4, &[tag]);
        put(&mut self.map, base + 5, &self.tag.to_le_bytes());
        put(&mut self.map, base + 13, body);
        let at = self.len;
        self.len += total;
        compiler_fence(Ordering::Release);
        let meta = H_AREA[self.area];
        put(
            &mut self.map,
            meta + A_LEN,
            &(self.len as u64).to_le_bytes(),
        );
        Some(at)
    }

    pub(crate) fn insert(&mut self, dir: &[u8], rec: &Record) {
        let mut b = bytes_path(dir);
        b.extend(bytes_record(rec));
        self.append(T_INSERT, &b);
    }

    pub(crate) fn replace(&mut self, dir: &[u8], rec: &Record) {
        let mut b = bytes_path(dir);
        b.extend(bytes_record(rec));
        self.append(T_REPLACE, &b);
    }

    pub(crate) fn change(&mut self, dir: &[u8], at: u64) {
        let mut b = bytes_path(dir);
        b.extend(at.to_le_bytes());
        self.append(T_CHANGE, &b);
    }

    pub(crate) fn renamed(&mut self, from: &[u8], to: &[u8]) {
        let mut b = bytes_path(from);
        b.extend(bytes_path(to));
        self.append(T_RENAMED, &b);
    }

    pub(crate) fn removed(&mut self, dir: &[u8]) {
        self.append(T_REMOVED, &bytes_path(dir));
    }

    pub(crate) fn evicted(&mut self, dir: &[u8]) {
        self.append(T_EVICTED, &bytes_path(dir));
    }

    pub(crate) fn cleared(&mut self) {
        self.append(T_CLEARED, &[]);
    }

    /// A new file's recipe (commands `first..=last` by number, `before` the
    /// point before it) held back or handed over; returns the record's
    /// place, to give its job number later ([`Journal::handed`]).
    pub(crate) fn recipe(&mut self, first: u64, last: u64, before: Point) -> Option<usize> {
        let mut b = Vec::with_capacity(64);
        b.extend(first.to_le_bytes());
        b.extend(last.to_le_bytes());
        b.extend(before.commands.to_le_bytes());
        b.extend(before.offset.to_le_bytes());
        b.extend(before.digest.to_le_bytes());
        b.extend(JOB_OPEN.to_le_bytes());
        self.append(T_RECIPE, &b).map(|at| (self.area << 32) | at)
    }

    /// The recipe recorded at `place` went to the finishing thread as `job`.
    pub(crate) fn handed(&mut self, place: usize, job: u64) {
        let (area, at) = (place >> 32, place & 0xffff_ffff);
        if area != self.area {
            return;
        }
        let base = HEADER + area * AREA + at + 13 + 48;
        put(&mut self.map, base, &job.to_le_bytes());
    }

    /// Immutable/append flags `bits` due at END for `path`.
    pub(crate) fn flags(&mut self, path: &[u8], bits: u32) {
        let mut b = bytes_path(path);
        b.extend(bits.to_le_bytes());
        self.append(T_FLAGS, &b);
    }

    /// The capability to set again after a chown of `path` (none: `None`).
    pub(crate) fn caps(&mut self, path: &[u8], value: Option<&[u8]>) {
        let mut b = bytes_path(path);
        b.extend(bytes_path(value.unwrap_or_default()));
        b.push(u8::from(value.is_some()));
        self.append(T_CAPS, &b);
    }
}

fn bytes_path(p: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + p.len());
    b.extend((p.len() as u32).to_le_bytes());
    b.extend_from_slice(p);
    b
}

fn bytes_record(r: &Record) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    for t in [r.atime, r.mtime] {
        b.extend(t.sec.to_le_bytes());
        b.extend(t.nsec.to_le_bytes());
    }
    b.push(match r.source {
        Source::Utimes => 0,
        Source::Before => 1,
        Source::Created => 2,
    });
    b.extend((r.cmd as u16).to_le_bytes());
    b.extend(r.pos.index.to_le_bytes());
    b.extend(r.pos.offset.to_le_bytes());
    b.extend(r.pos.len.to_le_bytes());
    b.extend(r.pos.version.to_le_bytes());
    b.push(u8::from(r.changed));
    b
}

/// Reads a journal's bytes.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2)?.try_into().ok().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take(8)?.try_into().ok().map(i64::from_le_bytes)
    }
    fn u128(&mut self) -> Option<u128> {
        self.take(16)?.try_into().ok().map(u128::from_le_bytes)
    }
    fn path(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        self.take(n).map(<[u8]>::to_vec)
    }
    fn time(&mut self) -> Option<Timespec> {
        Some(Timespec {
            sec: self.i64()?,
            nsec: self.u32()?,
        })
    }
    fn record(&mut self) -> Option<Record> {
        let atime = self.time()?;
        let mtime = self.time()?;
        let source = match self.u8()? {
            0 => Source::Utimes,
            1 => Source::Before,
            2 => Source::Created,
            _ => return None,
        };
        let cmd = CommandKind::from_u16(self.u16()?)?;
        let pos = Position {
            index: self.u64()?,
            offset: self.u64()?,
            len: self.u64()?,
            version: self.u32()?,
        };
        let changed = self.u8()? != 0;
        let mut r = Record::new(atime, mtime, source, cmd, pos);
        r.changed = changed;
        Some(r)
    }
}

/// One change to what was held, as logged.
pub(crate) enum Entry {
    Insert(Vec<u8>, Record),
    Replace(Vec<u8>, Record),
    Change(Vec<u8>, u64),
    Renamed(Vec<u8>, Vec<u8>),
    Removed(Vec<u8>),
    Evicted(Vec<u8>),
    Cleared,
    Flags(Vec<u8>, u32),
    Caps(Vec<u8>, Option<Vec<u8>>),
}

/// What a killed receive's journal says.
pub(crate) struct Found {
    /// The checkpoint: where a resumed stream starts.
    pub(crate) point: Point,
    /// Its protocol version.
    pub(crate) version: u32,
    /// Commands up to this were applied...
    pub(crate) until: u64,
    /// ... and this one may have been, in part.
    pub(crate) now: u64,
    /// The changes to what was held, in order, each with its command.
    pub(crate) entries: Vec<(u64, Entry)>,
    /// New files' commands (counts, first and last) not known finished.
    pub(crate) again: Vec<(u64, u64)>,
}

/// A journal file, locked.
pub(crate) type Locked = Flock<File>;

/// Why the journal of `name` in `dest` gives no resume point, or what it
/// says (with the file, locked, when `lock`). `Ok(None)`: there is none.
pub(crate) fn find(
    dest: (u64, u64),
    name: &[u8],
    uuid: Uuid,
    ctransid: u64,
    lock: bool,
    mount: u64,
) -> Result<Option<(Found, Option<Locked>)>, String> {
    let path = path_for(dest, name);
    let Some((file, bytes)) = read_locked(&path, lock)? else {
        return Ok(None);
    };
    let bad = || format!("its journal {} is damaged", path.display());
    let head = check_header(&bytes, uuid, ctransid, mount, &path)?;
    let (point, log) = active_area(&bytes, head.area).ok_or_else(bad)?;
    let (until, now, done) = (
        get8(&bytes, H_UNTIL),
        get8(&bytes, H_NOW),
        get8(&bytes, H_DONE),
    );
    let (entries, again) = read_log(log, done).ok_or_else(bad)?;
    let found = Found {
        point,
        version: head.version,
        until: until.max(point.commands),
        now,
        entries,
        again,
    };
    Ok(Some((found, lock.then_some(file))))
}

/// Opens the journal at `path`, this user's, locked (exclusively when
/// `lock`, else shared), and reads it; `None` when there is none.
fn read_locked(path: &std::path::Path, lock: bool) -> Result<Option<(Locked, Vec<u8>)>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("its journal {}: {e}", path.display())),
    };
    let how = if lock {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    } else {
        nix::fcntl::FlockArg::LockSharedNonblock
    };
    use std::os::unix::fs::MetadataExt;
    if file
        .metadata()
        .map_or(true, |m| m.uid() != nix::unistd::geteuid().as_raw())
    {
        return Err(format!("its journal {} is not this user's", path.display()));
    }
    let Ok(file) = lock_settled(file, how) else {
        return Err("a receive of it is running".into());
    };
    let mut bytes = Vec::new();
    use std::io::Read;
    (&*file)
        .take((HEADER + 2 * AREA) as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("its journal {}: {e}", path.display()))?;
    Ok(Some((file, bytes)))
}

/// Locks a journal (`how`, not blocking), trying again for a moment: a
/// receive sweeping the journals of other destinations holds each for
/// an instant, a running receive holds its own throughout.
fn lock_settled(mut file: File, how: nix::fcntl::FlockArg) -> Result<Flock<File>, File> {
    let started = std::time::Instant::now();
    loop {
        match Flock::lock(file, how) {
            Ok(held) => return Ok(held),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) if started.elapsed() < SETTLE => {
                file = f;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err((f, _)) => return Err(f),
        }
    }
}

/// How long [`lock_settled`] tries a journal's lock again.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(300);

/// What a journal's header says, once checked.
struct Header {
    version: u32,
    /// The active log area (0 or 1).
    area: usize,
}

/// Checks that the journal `bytes` (at `path`) is whole, of this boot,
/// `mount` and stream (`uuid`, `ctransid`); or says why it does not count.
fn check_header(
    bytes: &[u8],
    uuid: Uuid,
    ctransid: u64,
    mount: u64,
    path: &std::path::Path,
) -> Result<Header, String> {
    let bad = || format!("its journal {} is damaged", path.display());
    if bytes.get(..8) != Some(MAGIC.as_slice()) {
        return Err(bad());
    }
    if bytes.get(H_BOOT..H_BOOT + 16) != Some(boot_id().as_slice()) {
        return Err("the system went down since (its journal is from another boot)".into());
    }
    if get8(bytes, H_MOUNT) != mount {
        // Its page cache went with the mount: writes may be lost.
        return Err(
            "the destination was unmounted since (its journal is from another mount)".into(),
        );
    }
    if bytes.get(H_UUID..H_UUID + 16) != Some(uuid.as_bytes().as_slice())
        || get8(bytes, H_CTRANSID) != ctransid
    {
        return Err(format!(
            "its journal {} is of another stream",
            path.display()
        ));
    }
    let mut c = Cursor {
        b: bytes,
        at: H_VERSION,
    };
    let version = c.u32().ok_or_else(bad)?;
    let area = c.u32().ok_or_else(bad)? as usize;
    if area > 1 {
        return Err(bad());
    }
    Ok(Header { version, area })
}

/// The checkpoint of log area `area` of the journal `bytes`, and its log;
/// `None` when damaged.
fn active_area(bytes: &[u8], area: usize) -> Option<(Point, &[u8])> {
    let mut m = Cursor {
        b: bytes,
        at: H_AREA[area],
    };
    let point = Point {
        commands: m.u64()?,
        offset: m.u64()?,
        digest: m.u128()?,
    };
    let len = m.u64()? as usize;
    if point.commands == 0 || len > AREA {
        return None;
    }
    let base = HEADER + area * AREA;
    Some((point, bytes.get(base..base + len)?))
}

/// The entries of a log, each with its command, and the new files' commands
/// (counts, first and last) not known finished (jobs up to `done` are);
/// `None` when damaged.
#[allow(clippy::type_complexity)]
fn read_log(log: &[u8], done: u64) -> Option<(Vec<(u64, Entry)>, Vec<(u64, u64)>)> {
    let mut entries = Vec::new();
    let mut recipes: Vec<(u64, u64, bool)> = Vec::new();
    let mut c = Cursor { b: log, at: 0 };
    while c.at < log.len() {
        let start = c.at;
        let total = c.u32()? as usize;
        let tag = c.u8()?;
        let n = c.u64()?;
        let e = match tag {
            T_INSERT => Entry::Insert(c.path()?, c.record()?),
            T_REPLACE => Entry::Replace(c.path()?, c.record()?),
            T_CHANGE => Entry::Change(c.path()?, c.u64()?),
            T_RENAMED => Entry::Renamed(c.path()?, c.path()?),
            T_REMOVED => Entry::Removed(c.path()?),
            T_EVICTED => Entry::Evicted(c.path()?),
            T_CLEARED => Entry::Cleared,
            T_FLAGS => Entry::Flags(c.path()?, c.u32()?),
            T_CAPS => {
                let p = c.path()?;
                let v = c.path()?;
                let some = c.u8()? != 0;
                Entry::Caps(p, some.then_some(v))
            }
            T_RECIPE => {
                let first = c.u64()?;
                let last = c.u64()?;
                let before = c.u64()?;
                c.u64()?;
                c.u128()?;
                let job = c.u64()?;
                let finished = job == JOB_DONE || (job != JOB_OPEN && job <= done);
                let counts = (before + 1, before + 1 + last.saturating_sub(first));
                // A later record of the same file (made again) counts.
                recipes.retain(|r| r.0 != counts.0);
                recipes.push((counts.0, counts.1, finished));
                c.at = start + total;
                continue;
            }
            _ => return None,
        };
        if c.at != start + total {
            return None;
        }
        entries.push((n, e));
    }
    let again = recipes
        .into_iter()
        .filter(|r| !r.2)
        .map(|r| (r.0, r.1))
        .collect();
    Some((entries, again))
}

/// Opens the journal `found` came from to go on with it: what is logged
/// stays (the recipes made again are logged anew), and new records follow.
pub(crate) fn reopen(
    dest: (u64, u64),
    name: &[u8],
    file: Flock<File>,
    found: &Found,
) -> Option<Journal> {
    let path = path_for(dest, name);
    let map = crate::ioctl::map_shared(&file).ok()?;
    let area = (get8(&map, H_ACTIVE) & 0xffff_ffff) as usize;
    let len = get8(&map, H_AREA[area.min(1)] + A_LEN) as usize;
    let mut j = Journal {
        map,
        _file: file,
        path,
        area: area.min(1),
        len,
        tag: 0,
        since: found.point.offset,
        floor: (found.until, found.now),
    };
    // Job numbers are this process's from now on: the recipes logged are
    // marked finished or not, once and for all (one made again is logged
    // anew, and its new record counts).
    let done = get8(&j.map, H_DONE);
    j.settle_recipes(done);
    put(&mut j.map, H_DONE, &0u64.to_le_bytes());
    Some(j)
}

impl Journal {
    /// Marks every recipe in the active area finished or open, by `done`
    /// (see [`reopen`]).
    fn settle_recipes(&mut self, done: u64) {
        let base = HEADER + self.area * AREA;
        let mut at = 0;
        while at < self.len {
            let total = self
                .map
                .get(base + at..base + at + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes) as usize;
            if total == 0 {
                break;
            }
            if self.map.get(base + at + 4) == Some(&T_RECIPE) {
                let job = get8(&self.map, base + at + 13 + 48);
                let finished = job == JOB_DONE || (job != JOB_OPEN && job <= done);
                let mark = if finished { JOB_DONE } else { JOB_OPEN };
                put(&mut self.map, base + at + 13 + 48, &mark.to_le_bytes());
            }
            at += total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::FlockArg;

    /// A journal file held exclusively by another open file for `hold`,
    /// then read shared as `rreceive --list` reads it: what it says.
    fn read_while_held(hold: std::time::Duration) -> Result<bool, String> {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("journal");
        std::fs::write(&path, b"journal bytes").unwrap();
        let other = Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusive).unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(hold);
            drop(other);
        });
        let read = read_locked(&path, false).map(|r| r.is_some());
        holder.join().unwrap();
        read
    }

    /// Another receive's sweep holds each journal for an instant: a
    /// reader waits that out instead of taking the journal's receive to
    /// be running (a killed receive was once listed as not resumable).
    #[test]
    fn an_instant_lock_does_not_count_as_a_running_receive() {
        assert_eq!(read_while_held(SETTLE / 10), Ok(true));
    }

    /// A lock held longer is a receive running with the journal.
    #[test]
    fn a_lock_held_throughout_is_a_running_receive() {
        assert_eq!(
            read_while_held(SETTLE * 2),
            Err("a receive of it is running".to_string())
        );
    }
}
