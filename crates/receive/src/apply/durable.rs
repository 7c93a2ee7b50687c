//! Durable checkpoints: a receive cut by a power loss resumes.
//!
//! The journal ([`super::journal`]) lives in memory and is gone when the
//! machine goes down. What the destination's disk holds then is everything
//! up to the last flush, and of what came after, some of the changes to
//! names (the filesystem's own journal keeps them in the order they were
//! made: ext4, xfs and btrfs commit whole transactions, one after the
//! other) and any part of the data. So:
//!
//! - **Checkpoint.** Every so often (a number of commands, bytes of
//!   stream), and whenever the rules below say so, the receive applies
//!   what it holds back, syncs the destination's filesystem (`syncfs`) and
//!   then writes a record beside the subvolume, `DEST/.rreceive-durable-
//!   <name hex>` or its `.1` in turn, and flushes it: the point of the
//!   stream, the flags and capability due at END and the directory times
//!   put back. Each has a generation and a CRC32C, so a cut while writing
//!   one leaves the other.
//! - **Window.** The commands after a checkpoint form its window. Within
//!   one, a name changes in one direction only (no name taken away and
//!   then given again), no name a command other than a create or a rename
//!   used is renamed or unlinked, no directory above a name the window
//!   touched is renamed, and no file that was a clone source is written.
//!   A command that would break one of these ends the window: a checkpoint
//!   comes before it. These are what a kernel stream needs rarely (a
//!   directory that moves after its new entries were made, a swap of two
//!   names), so checkpoints stay few.
//! - **Replay.** A receive resumed from a record (when no journal of this
//!   boot and mount says more) reads the window again from the resumed
//!   stream, held in memory (a window is at most [`MAX_BYTES`] of stream),
//!   up to where the stopped receive would have taken its next checkpoint.
//!   It looks at each name the window's creates, renames, links and
//!   removals touch: present, absent, or under a directory that is not
//!   there. Because the names changed in order, the changes found on disk
//!   are the first M of the window's, and under the rules exactly one
//!   largest M agrees with everything seen. The changes to names up to M
//!   are not made again; every other command of the window is applied
//!   again (data, owners, modes, times, xattrs: applying them again gives
//!   the same result, and their paths still name the same inodes), but
//!   for those on a directory removed later in it; the rest of the window
//!   is applied as usual. The record's directory times are put back at END
//!   unless the stream sends others.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;

use btrfs_stream::{Command, Position, Timespec};
use btrfs_text::hex;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};
use uuid::Uuid;

use crate::error::{CmdError, Error};
use crate::ioctl;
use crate::path::Resolver;
use crate::subvol::Resumable;

use super::current::{err_at, Receiver, R};

/// A window ends after this many commands...
pub(super) const MAX_COMMANDS: u64 = 1 << 20;
/// ... or this many bytes of stream (what a replay holds in memory).
pub(super) const MAX_BYTES: u64 = 64 << 20;
/// A checkpoint comes at least every so many seconds (looked at every 64
/// commands), so that a slow stream loses little to a power cut.
const MAX_SECONDS: u64 = 30;

/// The name of the record of subvolume `name` in DEST.
pub(crate) fn record_file(name: &[u8]) -> Vec<u8> {
    let mut v = crate::subvol::RESERVED_PREFIX.to_vec();
    v.extend_from_slice(b"-durable-");
    v.extend_from_slice(hex::encode(name).as_bytes());
    v
}

/// What a command does to names, and which paths it uses.
enum Op<'a> {
    /// Makes a new entry.
    Make(&'a [u8]),
    Rename(&'a [u8], &'a [u8]),
    /// A new name for an existing inode.
    Link(&'a [u8]),
    Unlink(&'a [u8]),
    Rmdir(&'a [u8]),
    /// Changes the inode at `path` (its data when `writes`), reading
    /// `source` of this subvolume (a clone).
    Uses {
        path: &'a [u8],
        source: Option<&'a [u8]>,
        writes: bool,
    },
    /// SUBVOL, SNAPSHOT, RESUME, END, UPDATE_EXTENT.
    Other,
}

fn op<'a>(cmd: &Command<'a>, own: Uuid) -> Op<'a> {
    use Command as C;
    let uses = |path, writes| Op::Uses {
        path,
        source: None,
        writes,
    };
    match *cmd {
        C::Mkfile { path, .. }
        | C::Mkdir { path, .. }
        | C::Mknod { path, .. }
        | C::Mkfifo { path, .. }
        | C::Mksock { path, .. }
        | C::Symlink { path, .. } => Op::Make(path),
        C::Rename { from, to } => Op::Rename(from, to),
        C::Link { path, .. } => Op::Link(path),
        C::Unlink { path } => Op::Unlink(path),
        C::Rmdir { path } => Op::Rmdir(path),
        C::Write { path, .. }
        | C::Truncate { path, .. }
        | C::Fallocate { path, .. }
        | C::EncodedWrite { path, .. }
        | C::EnableVerity { path, .. } => uses(path, true),
        C::Clone {
            path,
            clone_uuid,
            clone_path,
            ..
        } => Op::Uses {
            path,
            source: (clone_uuid == own).then_some(clone_path),
            writes: true,
        },
        C::SetXattr { path, .. }
        | C::RemoveXattr { path, .. }
        | C::Chmod { path, .. }
        | C::Chown { path, .. }
        | C::Utimes { path, .. }
        | C::Fileattr { path, .. } => uses(path, false),
        C::Subvol { .. }
        | C::Snapshot { .. }
        | C::Resume { .. }
        | C::End {}
        | C::UpdateExtent { .. } => Op::Other,
    }
}

/// Whether `cmd` changes names (and is then not applied again by a
/// replay that found it done).
fn changes_names(cmd: &Command<'_>) -> bool {
    matches!(
        op(cmd, Uuid::nil()),
        Op::Make(_) | Op::Rename(..) | Op::Link(_) | Op::Unlink(_) | Op::Rmdir(_)
    )
}

/// What the commands since the last checkpoint touched (see the module
/// documentation for the rules). Paths are kept by a 64-bit hash: two
/// paths that share one end a window early, never late, and a replay
/// hashes them alike.
#[derive(Debug, Default)]
pub(super) struct Window {
    /// Paths commands other than name changes used (and clone sources).
    used: Keys,
    /// The last of them (commands on one file come together).
    last_used: u64,
    /// Directories above a used or changed name.
    held: Keys,
    /// Names taken away.
    removed: Keys,
    /// Clone sources in this subvolume.
    sources: Keys,
    /// Commands and stream bytes in it.
    pub(super) commands: u64,
    pub(super) bytes: u64,
    /// Its limits ([`MAX_COMMANDS`], [`MAX_BYTES`] unless tests say less).
    max_commands: u64,
    max_bytes: u64,
}

/// A path's hash, eight bytes at a time (the same in every run).
fn key(path: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = path.len() as u64;
    let mut words = path.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let mut b = [0u8; 8];
    b[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// Hashes that are their own hash in a set.
#[derive(Default, Clone, Copy)]
struct Same(u64);

impl std::hash::Hasher for Same {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A set of path hashes.
type Keys = HashSet<u64, std::hash::BuildHasherDefault<Same>>;

fn hold_above(held: &mut Keys, path: &[u8]) {
    let mut p = path;
    loop {
        let (parent, _) = crate::path::split(p);
        if !held.insert(key(parent)) || parent.is_empty() {
            return;
        }
        p = parent;
    }
}

impl Window {
    /// An empty window whose commands must leave `kept` alone (paths that
    /// flags or a capability due at END name).
    pub(super) fn new<'p>(kept: impl IntoIterator<Item = &'p [u8]>) -> Window {
        let max_commands = std::env::var("RRECEIVE_TEST_WINDOW")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(MAX_COMMANDS);
        Window::limited(kept, max_commands)
    }

    /// [`Window::new`] ending after `max_commands` commands.
    fn limited<'p>(kept: impl IntoIterator<Item = &'p [u8]>, max_commands: u64) -> Window {
        let mut w = Window {
            max_commands,
            max_bytes: MAX_BYTES,
            ..Window::default()
        };
        for p in kept {
            w.used.insert(key(p));
            hold_above(&mut w.held, p);
        }
        w
    }

    /// Whether a checkpoint must come before `cmd` (`len` bytes of
    /// stream) of subvolume `own`.
    pub(super) fn ends_before(&self, cmd: &Command<'_>, len: u64, own: Uuid) -> bool {
        if self.commands == 0 {
            return false;
        }
        if self.commands >= self.max_commands || self.bytes + len > self.max_bytes {
            return true;
        }
        let gone = |p: u64| self.removed.contains(&p) || self.used.contains(&p);
        match op(cmd, own) {
            Op::Make(p) | Op::Link(p) => gone(key(p)),
            Op::Rename(from, to) => {
                let (from, to) = (key(from), key(to));
                self.used.contains(&from)
                    || self.held.contains(&from)
                    || gone(to)
                    || self.held.contains(&to)
            }
            Op::Unlink(p) => self.used.contains(&key(p)),
            Op::Uses {
                path, writes: true, ..
            } => !self.sources.is_empty() && self.sources.contains(&key(path)),
            Op::Rmdir(_) | Op::Uses { .. } | Op::Other => false,
        }
    }

    /// Counts `cmd` in.
    pub(super) fn note(&mut self, cmd: &Command<'_>, len: u64, own: Uuid) {
        self.commands += 1;
        self.bytes += len;
        match op(cmd, own) {
            Op::Make(p) | Op::Link(p) => hold_above(&mut self.held, p),
            Op::Rename(from, to) => {
                self.removed.insert(key(from));
                hold_above(&mut self.held, from);
                hold_above(&mut self.held, to);
            }
            Op::Unlink(p) | Op::Rmdir(p) => {
                self.removed.insert(key(p));
                hold_above(&mut self.held, p);
            }
            Op::Uses { path, source, .. } => {
                let k = key(path);
                if k != self.last_used && self.used.insert(k) {
                    hold_above(&mut self.held, path);
                }
                self.last_used = k;
                if let Some(s) = source {
                    self.sources.insert(key(s));
                    self.used.insert(key(s));
                    hold_above(&mut self.held, s);
                }
            }
            Op::Other => {}
        }
    }
}

/// What a name was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    Absent,
    Present,
    /// Its directory is not there: says nothing.
    Unknown,
}

/// How a window is applied again after a power loss.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// How many of its commands were applied as far as names go.
    pub(super) done: usize,
    /// For each command, whether it is skipped (not applied again).
    pub(super) skip: Vec<bool>,
}

/// Plans the replay of `cmds`, a window (of subvolume `own`), from what
/// `look` finds at each name; `Err` when nothing agrees with it.
pub(super) fn plan(
    cmds: &[Command<'_>],
    own: Uuid,
    mut look: impl FnMut(&[u8]) -> Seen,
) -> Result<Plan, String> {
    let n = cmds.len();
    // Each name's changes: (command count after which it holds, state).
    let mut names: HashMap<&[u8], Vec<(usize, Seen)>> = HashMap::new();
    let mut order: Vec<&[u8]> = Vec::new();
    let mut event = |name, at, s| {
        let e = names.entry(name).or_insert_with(|| {
            order.push(name);
            Vec::new()
        });
        e.push((at, s));
    };
    for (i, c) in cmds.iter().enumerate() {
        let at = i + 1;
        match op(c, own) {
            Op::Make(p) | Op::Link(p) => event(p, at, Seen::Present),
            Op::Rename(from, to) => {
                event(from, at, Seen::Absent);
                event(to, at, Seen::Present);
            }
            Op::Unlink(p) | Op::Rmdir(p) => event(p, at, Seen::Absent),
            Op::Uses { .. } | Op::Other => {}
        }
    }
    // forbid[m] > 0: m commands done disagrees with something seen.
    let mut forbid = vec![0i64; n + 2];
    let mut ban = |from: usize, to: usize| {
        forbid[from] += 1;
        forbid[to + 1] -= 1;
    };
    for name in &order {
        let ev = &names[name];
        let seen = look(name);
        if seen == Seen::Unknown {
            continue;
        }
        let before = match ev[0].1 {
            Seen::Present => Seen::Absent,
            _ => Seen::Present,
        };
        if before != seen {
            ban(0, ev[0].0 - 1);
        }
        for (j, &(at, s)) in ev.iter().enumerate() {
            let end = ev.get(j + 1).map_or(n, |&(next, _)| next - 1);
            if s != seen && at <= end {
                ban(at, end);
            }
        }
    }
    let mut sum = 0;
    let mut done = None;
    for (m, f) in forbid.iter().enumerate().take(n + 1) {
        sum += f;
        if sum == 0 {
            done = Some(m);
        }
    }
    let done = done.ok_or_else(|| {
        "what its destination holds agrees with no command after its last checkpoint".to_string()
    })?;
    // Skipped: name changes done; other commands done on a directory
    // removed later (by a command done).
    let mut skip = vec![false; n];
    let mut gone: Vec<&[u8]> = Vec::new();
    for i in (0..done).rev() {
        let c = &cmds[i];
        if changes_names(c) {
            skip[i] = true;
            if let Op::Rmdir(p) = op(c, own) {
                gone.push(p);
            }
        } else if let Op::Uses { path, .. } = op(c, own) {
            skip[i] = gone.iter().any(|d| crate::path::is_within(path, d));
        }
    }
    Ok(Plan { done, skip })
}

/// What a checkpoint leaves on disk.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Record {
    /// Where the stream stood.
    pub(super) at: Option<Resumable>,
    /// Flags due at END: (path, bits).
    pub(super) flags: Vec<(Vec<u8>, u32)>,
    /// The capability to set again after a chown: (path, value).
    pub(super) caps: Option<(Vec<u8>, Vec<u8>)>,
    /// Directory times to put back unless the stream sends others.
    pub(super) times: Vec<(Vec<u8>, Timespec, Timespec)>,
    /// The window's limit of commands after it (a replay holds as many).
    pub(super) window: Option<u64>,
    /// Not a checkpoint: a receive resumed after a kill is going over what
    /// the killed one applied, from the killed one's journal kept beside
    /// this record; commands up to this one may have been applied.
    pub(super) journal: Option<u64>,
}

const MAGIC: &[u8; 8] = b"RRDURA01";
const HEAD: usize = 32;
/// The largest record (flags of many files due at END, say).
const MAX_RECORD: u64 = 64 << 20;

impl Record {
    fn to_text(&self) -> String {
        let mut t = String::new();
        if let Some(at) = self.at {
            t.push_str(&format!("point\t{}\n", at.to_field()));
        }
        for (p, bits) in &self.flags {
            t.push_str(&format!("flags\t{bits}\t{}\n", hex::encode(p)));
        }
        if let Some((p, v)) = &self.caps {
            t.push_str(&format!("caps\t{}\t{}\n", hex::encode(p), hex::encode(v)));
        }
        if let Some(n) = self.window {
            t.push_str(&format!("window\t{n}\n"));
        }
        if let Some(n) = self.journal {
            t.push_str(&format!("journal\t{n}\n"));
        }
        for (p, a, m) in &self.times {
            t.push_str(&format!(
                "times\t{}\t{}\t{}\t{}\t{}\n",
                hex::encode(p),
                a.sec,
                a.nsec,
                m.sec,
                m.nsec
            ));
        }
        t
    }

    fn from_text(text: &str) -> Option<Record> {
        let mut r = Record::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["point", at] => r.at = Some(Resumable::from_field(at)?),
                ["flags", bits, p] => r.flags.push((hex::decode(p).ok()?, bits.parse().ok()?)),
                ["caps", p, v] => {
                    r.caps = Some((hex::decode(p).ok()?, hex::decode(v).ok()?));
                }
                ["window", n] => r.window = Some(n.parse().ok()?),
                ["journal", n] => r.journal = Some(n.parse().ok()?),
                ["times", p, a, an, m, mn] => r.times.push((
                    hex::decode(p).ok()?,
                    Timespec {
                        sec: a.parse().ok()?,
                        nsec: an.parse().ok()?,
                    },
                    Timespec {
                        sec: m.parse().ok()?,
                        nsec: mn.parse().ok()?,
                    },
                )),
                _ => return None,
            }
        }
        Some(r)
    }
}

/// The record files of one subvolume (one per slot), open.
pub(super) struct RecordFile {
    files: [File; 2],
    generation: u64,
}

/// The name of slot `i`'s file.
fn slot_file(name: &[u8], i: usize) -> Vec<u8> {
    let mut n = record_file(name);
    if i == 1 {
        n.extend_from_slice(b".1");
    }
    n
}

/// The name of the copy of a killed receive's journal kept beside the
/// record (see [`Record::journal`]).
fn journal_file(name: &[u8]) -> Vec<u8> {
    let mut n = record_file(name);
    n.extend_from_slice(b".journal");
    n
}

/// The names of the record files of subvolume `name` in DEST.
pub(crate) fn record_files(name: &[u8]) -> [Vec<u8>; 3] {
    [slot_file(name, 0), slot_file(name, 1), journal_file(name)]
}

/// Keeps `bytes` (a journal) in DEST beside the record, flushed.
fn keep_journal(dest: BorrowedFd<'_>, name: &[u8], bytes: &[u8]) -> io::Result<()> {
    let fd = ioctl::openat(
        Some(dest.as_raw_fd()),
        journal_file(name).as_slice(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let f = File::from(fd);
    f.write_all_at(bytes, 0)?;
    f.sync_data()
}

/// The journal kept in DEST beside the record.
fn kept_journal(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<Vec<u8>> {
    let fd = ioctl::openat(
        Some(dest.as_raw_fd()),
        journal_file(name).as_slice(),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut v = Vec::new();
    io::Read::read_to_end(&mut File::from(fd), &mut v)?;
    Ok(v)
}

fn drop_kept_journal(dest: BorrowedFd<'_>, name: &[u8]) {
    let _ = nix::unistd::unlinkat(
        Some(dest.as_raw_fd()),
        journal_file(name).as_slice(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
}

fn open_slot(dest: BorrowedFd<'_>, name: &[u8], i: usize, create: bool) -> nix::Result<File> {
    let mut flags = OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if create {
        flags |= OFlag::O_CREAT;
    }
    let fd = ioctl::openat(
        Some(dest.as_raw_fd()),
        slot_file(name, i).as_slice(),
        flags,
        Mode::from_bits_truncate(0o600),
    )?;
    Ok(File::from(fd))
}

/// Reads a slot: its generation and record, if whole.
fn read_slot(f: &File) -> Option<(u64, Record)> {
    let mut head = [0u8; HEAD];
    f.read_exact_at(&mut head, 0).ok()?;
    if &head[..8] != MAGIC {
        return None;
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let (generation, len) = (word(8), word(16));
    let crc = u32::from_le_bytes([head[24], head[25], head[26], head[27]]);
    if len == 0 || len > MAX_RECORD {
        return None;
    }
    let mut body = vec![0u8; usize::try_from(len).ok()?];
    f.read_exact_at(&mut body, HEAD as u64).ok()?;
    if btrfs_stream::crc::update(0, &body) != crc {
        return None;
    }
    Some((
        generation,
        Record::from_text(std::str::from_utf8(&body).ok()?)?,
    ))
}

/// The newest whole record of subvolume `name` in `dest`, if any.
pub(super) fn load(dest: BorrowedFd<'_>, name: &[u8]) -> Option<Record> {
    (0..2)
        .filter_map(|i| open_slot(dest, name, i, false).ok())
        .filter_map(|f| read_slot(&f))
        .max_by_key(|(g, _)| *g)
        .map(|(_, r)| r)
}

/// Removes the record of subvolume `name` in `dest`.
pub(crate) fn forget(dest: BorrowedFd<'_>, name: &[u8]) {
    for n in record_files(name) {
        let _ = nix::unistd::unlinkat(
            Some(dest.as_raw_fd()),
            n.as_slice(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
}

impl RecordFile {
    /// Opens (or makes) the record files of subvolume `name` in `dest`.
    pub(super) fn open(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<RecordFile> {
        let files = [
            open_slot(dest, name, 0, true)?,
            open_slot(dest, name, 1, true)?,
        ];
        let generation = files
            .iter()
            .filter_map(read_slot)
            .map(|(g, _)| g)
            .max()
            .unwrap_or(0);
        // Room for a usual record in each, so that a full disk still takes
        // a checkpoint (overwritten in place, also on btrfs).
        for f in &files {
            if f.metadata().is_ok_and(|m| m.len() == 0) {
                use std::os::fd::AsFd;
                crate::flags::overwrite_in_place(f.as_fd());
            }
            let _ = nix::fcntl::fallocate(
                f.as_raw_fd(),
                nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
                0,
                64 << 10,
            );
        }
        Ok(RecordFile { files, generation })
    }

    /// Writes `rec` durably: call after the destination was synced. A
    /// record too large leaves none (the older one would be wrong now).
    pub(super) fn write(&mut self, rec: &Record) -> io::Result<u64> {
        let body = rec.to_text().into_bytes();
        self.generation += 1;
        let slot = (self.generation % 2) as usize;
        if body.len() as u64 > MAX_RECORD {
            self.invalidate()?;
            return Err(io::Error::from(Errno::EFBIG));
        }
        let mut head = [0u8; HEAD];
        head[..8].copy_from_slice(MAGIC);
        head[8..16].copy_from_slice(&self.generation.to_le_bytes());
        head[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
        head[24..28].copy_from_slice(&btrfs_stream::crc::update(0, &body).to_le_bytes());
        let mut buf = head.to_vec();
        buf.extend_from_slice(&body);
        let f = &self.files[slot];
        f.write_all_at(&buf, 0)?;
        f.sync_data()?;
        Ok(buf.len() as u64)
    }

    /// Leaves no whole record.
    pub(super) fn invalidate(&mut self) -> io::Result<()> {
        for f in &self.files {
            f.write_all_at(&[0u8; 8], 0)?;
            f.sync_data()?;
        }
        Ok(())
    }
}

/// The record of a receive resumed after a kill, while it goes over what
/// the killed one applied (see [`Record::journal`]).
pub(super) struct Marker {
    file: RecordFile,
    rec: Record,
}

/// Durable checkpoints of the subvolume being received.
pub(super) struct Durable {
    file: RecordFile,
    window: Window,
    /// When the last checkpoint was taken.
    at: std::time::Instant,
}

/// A window read again after a power loss (see the module documentation).
pub(super) struct Power {
    /// The record's point, where the resumed stream began.
    pub(super) at: Resumable,
    /// Its commands while they are read, encoded; `None` once they are
    /// being applied.
    held: Option<Held>,
}

struct Held {
    buf: Vec<u8>,
    frames: Vec<(Position, std::ops::Range<usize>)>,
    window: Window,
}

/// Paths the next window must leave alone: those `rec` names.
fn kept(rec: &Record) -> impl Iterator<Item = &[u8]> {
    rec.flags
        .iter()
        .map(|(p, _)| p.as_slice())
        .chain(rec.caps.iter().map(|(p, _)| p.as_slice()))
        .chain(rec.times.iter().map(|(p, _, _)| p.as_slice()))
}

/// Whether `path` of the subvolume at `res` is there.
fn observe(res: &mut Resolver, path: &[u8]) -> Seen {
    let Ok((dir, name)) = res.parent(path) else {
        return Seen::Unknown;
    };
    match fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => Seen::Present,
        Err(Errno::ENOENT) => Seen::Absent,
        Err(_) => Seen::Unknown,
    }
}

/// Leaves no whole record for subvolume `name` in `dest` (what is on disk
/// is about to move past it).
pub(super) fn invalidate(dest: BorrowedFd<'_>, name: &[u8]) {
    for i in 0..2 {
        if let Ok(f) = open_slot(dest, name, i, false) {
            let _ = f.write_all_at(&[0u8; 8], 0).and_then(|()| f.sync_data());
        }
    }
}

impl Receiver<'_> {
    /// Before counted command `cmd` (or END): while a window is read again
    /// after a power loss, holds it (`true`), or at the window's end
    /// applies the window; otherwise takes a durable checkpoint when the
    /// window ends before `cmd`.
    pub(super) fn durable_before(
        &mut self,
        cmd: &Command<'_>,
        pos: Position,
    ) -> Result<bool, Error> {
        let at = |kind: CmdError| err_at(cmd.kind(), pos, b"", kind);
        let Some(c) = self.cur.as_mut() else {
            return Ok(false);
        };
        let own = c.state.received_uuid;
        if let Some(h) = c.power.as_mut().and_then(|p| p.held.as_mut()) {
            let end = matches!(cmd, Command::End {});
            if !end && !h.window.ends_before(cmd, pos.len, own) {
                let start = h.buf.len();
                btrfs_stream::encode_command(cmd, pos.version, &mut h.buf)
                    .map_err(|e| at(CmdError::Resume(format!("holding the command: {e}"))))?;
                h.frames.push((pos, start..h.buf.len()));
                h.window.note(cmd, pos.len, own);
                return Ok(true);
            }
            let held = c.power.as_mut().and_then(|p| p.held.take());
            if let Some(h) = held {
                self.feed(h, cmd, pos)?;
            }
            if let Some(c) = self.cur.as_mut() {
                c.power = None;
            }
            if !end {
                self.durable_start().map_err(at)?;
            }
            return Ok(false);
        }
        if c.power.is_some() {
            return Ok(false);
        }
        // Also every MAX_SECONDS (a slow stream): an earlier end than the
        // rules' only makes a window shorter, which a replay finds on disk.
        if c.durable.as_ref().is_some_and(|d| {
            d.window.ends_before(cmd, pos.len, own)
                || (d.window.commands > 0
                    && d.window.commands % 64 == 0
                    && d.at.elapsed().as_secs() >= MAX_SECONDS)
        }) {
            self.durable_checkpoint().map_err(|e| match e {
                Cp::Stream(e) => e,
                Cp::Cmd(k) => at(k),
            })?;
        }
        Ok(false)
    }

    /// After `cmd` was applied: counts it in the window.
    pub(super) fn durable_after(&mut self, cmd: &Command<'_>, pos: Position) {
        if let Some(c) = self.cur.as_mut() {
            let own = c.state.received_uuid;
            if let (Some(d), None) = (c.durable.as_mut(), c.power.as_ref()) {
                d.window.note(cmd, pos.len, own);
            }
        }
    }

    /// How a linked or in-place tree's changes wait for what they need
    /// kept: with durable checkpoints, flushed first.
    pub(super) fn write_ahead(&self) -> crate::snapshot::workdir::WriteAhead {
        use crate::snapshot::workdir::WriteAhead;
        // RRECEIVE_TEST_NO_WRITE_AHEAD: for the test that shows a power
        // cut going wrong without it.
        if !self.opts.durable || std::env::var_os("RRECEIVE_TEST_NO_WRITE_AHEAD").is_some() {
            return WriteAhead::Off;
        }
        match nix::sys::statfs::fstatfs(self.dest.fd()) {
            Ok(fs) if fs.filesystem_type() == nix::sys::statfs::BTRFS_SUPER_MAGIC => {
                WriteAhead::Sync
            }
            Ok(fs) if fs.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC => {
                WriteAhead::Flush {
                    renames_keep_data: crate::snapshot::workdir::ext4_renames_keep_data(
                        self.dest.fd(),
                    ),
                }
            }
            _ => WriteAhead::Flush {
                renames_keep_data: false,
            },
        }
    }

    /// Starts durable checkpoints of the subvolume being received with a
    /// first one.
    pub(super) fn durable_start(&mut self) -> R<()> {
        let dest = self.dest.fd();
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        if c.durable.is_some() {
            return Ok(());
        }
        if !self.opts.durable {
            // No new record: an older one would name a point passed.
            invalidate(dest, &c.name);
            return Ok(());
        }
        let file = match c.marker.take() {
            Some(m) => m.file,
            None => {
                RecordFile::open(dest, &c.name).map_err(CmdError::io("make the resume record"))?
            }
        };
        c.durable = Some(Durable {
            file,
            window: Window::new([]),
            at: std::time::Instant::now(),
        });
        match self.durable_checkpoint() {
            Ok(()) => {
                if let Some(c) = self.cur.as_ref() {
                    drop_kept_journal(self.dest.fd(), &c.name);
                }
                Ok(())
            }
            Err(Cp::Cmd(k)) => Err(k),
            Err(Cp::Stream(e)) => Err(CmdError::Resume(e.to_string())),
        }
    }

    /// A durable checkpoint: what is held back applied, the destination
    /// synced, then the record written and flushed.
    fn durable_checkpoint(&mut self) -> Result<(), Cp> {
        if let Some(p) = self.cur.as_mut().and_then(|c| c.pending.take()) {
            if let Err(e) = self.flush_batch() {
                self.redo_all([p]);
                return Err(Cp::Stream(e));
            }
            self.materialize_or_redo(p, false).map_err(Cp::Stream)?;
        }
        let put = self.checkpoint().map_err(Cp::Stream)?;
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        let root = c.res.root().as_raw_fd();
        nix::unistd::syncfs(root).map_err(|e| Cp::Cmd(CmdError::os("sync the destination")(e)))?;
        let st = fstat(root).map_err(|e| Cp::Cmd(CmdError::os("stat")(e)))?;
        let mut times: Vec<(Vec<u8>, Timespec, Timespec)> = put
            .into_iter()
            .map(|(p, r)| (p, r.atime, r.mtime))
            .collect();
        if !times.iter().any(|(p, _, _)| p.is_empty()) {
            let ts = |sec: i64, nsec: i64| Timespec {
                sec,
                nsec: u32::try_from(nsec).unwrap_or(0),
            };
            times.push((
                Vec::new(),
                ts(st.st_atime, st.st_atime_nsec),
                ts(st.st_mtime, st.st_mtime_nsec),
            ));
        }
        let rec = Record {
            at: Some(Resumable {
                version: c.track.version,
                point: c.track.point(),
            }),
            flags: c.deferred_paths().unwrap_or_default(),
            caps: c.caps.clone(),
            times,
            window: c.durable.as_ref().map(|d| d.window.max_commands),
            journal: None,
        };
        let Some(d) = c.durable.as_mut() else {
            return Ok(());
        };
        let bytes = d
            .file
            .write(&rec)
            .map_err(|e| Cp::Cmd(CmdError::io("write the resume record")(e)))?;
        d.window = Window::new(kept(&rec));
        d.at = std::time::Instant::now();
        self.stats.durable_checkpoints += 1;
        self.stats.durable_bytes += bytes;
        Ok(())
    }

    /// A receive resumed after a kill, before it goes over what the killed
    /// one applied (`found`, from the journal of DEST `id`): the
    /// destination synced, that journal kept beside the record, and the
    /// record saying to resume from it, so that a power loss in between
    /// resumes the same way ([`Receiver::journal_after_power`]).
    pub(super) fn keep_for_power(&mut self, id: (u64, u64), found: &super::journal::Found) {
        let dest = self.dest.fd();
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        if !self.opts.durable {
            invalidate(dest, &c.name);
            return;
        }
        let rec = Record {
            at: Some(Resumable {
                version: found.version,
                point: found.point,
            }),
            journal: Some(found.now.max(found.until)),
            ..Record::default()
        };
        let kept = nix::unistd::syncfs(c.res.root().as_raw_fd())
            .map_err(io::Error::from)
            .and_then(|()| super::journal::bytes(id, &c.name))
            .and_then(|b| keep_journal(dest, &c.name, &b))
            .and_then(|()| RecordFile::open(dest, &c.name))
            .and_then(|mut file| file.write(&rec).map(|_| file));
        match kept {
            Ok(file) => c.marker = Some(Marker { file, rec }),
            Err(e) => {
                invalidate(dest, &c.name);
                self.log.note(format_args!(
                    "a power loss before this receive is past what the killed one applied \
                     would leave it not resumable: {e}"
                ));
            }
        }
    }

    /// Before counted command `n` of a receive resumed after a kill, until
    /// its first durable checkpoint: the record says it may be applied.
    pub(super) fn marker_before(&mut self, n: u64) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        let Some(m) = c.marker.as_mut() else {
            return;
        };
        if m.rec.journal.is_some_and(|j| j >= n) {
            return;
        }
        m.rec.journal = Some(n);
        if let Err(e) = m.file.write(&m.rec) {
            c.marker = None;
            invalidate(self.dest.fd(), &c.name);
            self.log.note(format_args!(
                "the resume record could not be written ({e}): a power loss now would leave \
                 this receive not resumable"
            ));
        }
    }

    /// After a power loss cut a receive that had resumed after a kill
    /// (`rec` says so): the killed receive's journal, kept in DEST, is put
    /// back for this boot and mount, to be found as after a kill.
    pub(super) fn journal_after_power(
        &mut self,
        id: (u64, u64),
        mount: u64,
        name: &[u8],
        rec: &Record,
    ) -> io::Result<()> {
        let now = rec.journal.unwrap_or(0);
        let bytes = kept_journal(self.dest.fd(), name)?;
        super::journal::restore(id, self.dest.fd(), name, &bytes, mount, now)?;
        self.log.note(format_args!(
            "resuming after a power loss that cut a receive resumed after a kill: from the \
             killed receive's journal kept in DEST (commands up to {now} maybe applied)"
        ));
        Ok(())
    }

    /// After a power loss: the subvolume resumed at `rec`'s point reads
    /// its window again before applying it.
    pub(super) fn recover_power(&mut self, rec: Record) {
        let Some(at) = rec.at else {
            return;
        };
        let mut flags = Vec::new();
        if let Some(c) = self.cur.as_mut() {
            c.caps = rec.caps.clone();
            for (p, a, m) in &rec.times {
                let pos = Position {
                    index: 0,
                    offset: 0,
                    len: 0,
                    version: at.version,
                };
                c.dir_times.insert(
                    p,
                    super::dirtimes::Record::new(
                        *a,
                        *m,
                        super::dirtimes::Source::Before,
                        btrfs_stream::CommandKind::Utimes,
                        pos,
                    ),
                );
            }
            c.power = Some(Power {
                at,
                held: Some(Held {
                    buf: Vec::new(),
                    frames: Vec::new(),
                    // As long as the stopped receive's windows were.
                    window: match rec.window {
                        Some(n) => Window::limited(kept(&rec), n.max(1)),
                        None => Window::new(kept(&rec)),
                    },
                }),
            });
            flags = rec.flags.clone();
        }
        self.log.note(format_args!(
            "resuming after a power loss (or the destination's unmount): from the checkpoint \
             after command {}",
            at.point.commands
        ));
        self.defer_flags(flags);
    }

    /// Applies a window read again: what names show was done is not done
    /// again (see [`plan`]). `cmd` at `pos` is where it ended.
    fn feed(&mut self, h: Held, cmd: &Command<'_>, pos: Position) -> Result<(), Error> {
        let at = |why: String| err_at(cmd.kind(), pos, b"", CmdError::Resume(why));
        let mut cmds = Vec::with_capacity(h.frames.len());
        for (p, r) in &h.frames {
            let b = &h.buf[r.clone()];
            let kind = u16::from_le_bytes([b[4], b[5]]);
            let c = btrfs_stream::decode_payload(p.version, kind, &b[10..])
                .map_err(|(k, _)| at(format!("a held command does not decode: {k}")))?;
            cmds.push(c);
        }
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        let own = c.state.received_uuid;
        let res = &mut c.res;
        let plan = plan(&cmds, own, |p| observe(res, p)).map_err(|why| {
            at(format!(
                "after a power loss: {why} (the destination's filesystem did not keep its \
                 changes in order, or was changed by something else)"
            ))
        })?;
        self.log.note(format_args!(
            "after the checkpoint, {} of {} command(s) had changed the destination's names",
            plan.done,
            cmds.len()
        ));
        for (i, c) in cmds.iter().enumerate() {
            let p = h.frames[i].0;
            if plan.skip[i] {
                if let Some(cur) = self.cur.as_mut() {
                    match *c {
                        Command::Rename { from, to } => cur.dir_times.renamed(from, to),
                        Command::Rmdir { path } => cur.dir_times.removed(path),
                        _ => {}
                    }
                }
                self.skip_applied(c, p)?;
            } else {
                self.apply(c, p)?;
            }
        }
        Ok(())
    }
}

/// Why a durable checkpoint failed.
enum Cp {
    /// Applying what was held back.
    Stream(Error),
    /// Syncing or recording.
    Cmd(CmdError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use btrfs_stream::resume::Point;

    fn own() -> Uuid {
        Uuid::from_u128(7)
    }

    fn mkfile(p: &'static [u8]) -> Command<'static> {
        Command::Mkfile { path: p, ino: 1 }
    }

    fn rename(a: &'static [u8], b: &'static [u8]) -> Command<'static> {
        Command::Rename { from: a, to: b }
    }

    fn chmod(p: &'static [u8]) -> Command<'static> {
        Command::Chmod {
            path: p,
            mode: 0o644,
        }
    }

    /// Applies `cmds[..m]` to a set of names, as the disk would hold them.
    fn after(start: &[&[u8]], cmds: &[Command<'_>], m: usize) -> HashSet<Vec<u8>> {
        let mut s: HashSet<Vec<u8>> = start.iter().map(|p| p.to_vec()).collect();
        for c in &cmds[..m] {
            match op(c, own()) {
                Op::Make(p) | Op::Link(p) => {
                    s.insert(p.to_vec());
                }
                Op::Rename(a, b) => {
                    let moved: Vec<Vec<u8>> = s
                        .iter()
                        .filter(|q| crate::path::is_within(q, a))
                        .cloned()
                        .collect();
                    for q in moved {
                        s.remove(&q);
                        let mut r = b.to_vec();
                        r.extend_from_slice(&q[a.len()..]);
                        s.insert(r);
                    }
                }
                Op::Unlink(p) | Op::Rmdir(p) => {
                    s.remove(p);
                }
                _ => {}
            }
        }
        s
    }

    fn look(s: &HashSet<Vec<u8>>) -> impl FnMut(&[u8]) -> Seen + '_ {
        |p: &[u8]| {
            let (parent, _) = crate::path::split(p);
            if !parent.is_empty() && !s.contains(parent) {
                Seen::Unknown
            } else if s.contains(p) {
                Seen::Present
            } else {
                Seen::Absent
            }
        }
    }

    #[test]
    fn a_full_streams_orphans_are_found_at_every_cut() {
        let cmds = [
            Command::Mkdir {
                path: b"o257-5-0",
                ino: 257,
            },
            rename(b"o257-5-0", b"d"),
            chmod(b"d"),
            mkfile(b"o258-5-0"),
            rename(b"o258-5-0", b"d/f"),
            chmod(b"d/f"),
            mkfile(b"o259-5-0"),
            rename(b"o259-5-0", b"g"),
        ];
        let mut w = Window::new([]);
        for c in &cmds {
            assert!(!w.ends_before(c, 10, own()), "{c:?}");
            w.note(c, 10, own());
        }
        for m in 0..=cmds.len() {
            let disk = after(&[], &cmds, m);
            let p = plan(&cmds, own(), look(&disk)).unwrap();
            // Name changes after `done` are applied again (the others are
            // skipped): that must give the whole window's names.
            let mut again = disk.clone();
            for (i, c) in cmds.iter().enumerate() {
                if i >= p.done {
                    let now: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
                    again = after(&now, std::slice::from_ref(c), 1);
                }
            }
            assert_eq!(again, after(&[], &cmds, cmds.len()), "cut after {m}: {p:?}");
        }
    }

    #[test]
    fn a_swap_ends_the_window_and_a_used_name_is_not_moved() {
        let mut w = Window::new([]);
        w.note(&rename(b"a", b"o300-1-0"), 1, own());
        // a was taken away: giving it again ends the window.
        assert!(w.ends_before(&rename(b"b", b"a"), 1, own()));
        assert!(w.ends_before(&mkfile(b"a"), 1, own()));
        assert!(!w.ends_before(&rename(b"b", b"c"), 1, own()));
        let mut w = Window::new([]);
        w.note(&chmod(b"d/f"), 1, own());
        assert!(w.ends_before(&rename(b"d/f", b"e"), 1, own()));
        assert!(w.ends_before(&rename(b"d", b"e"), 1, own()));
        assert!(w.ends_before(&Command::Unlink { path: b"d/f" }, 1, own()));
        assert!(!w.ends_before(&rename(b"x", b"y"), 1, own()));
        // Flags due at END keep their path.
        let w = Window::new([b"k/l".as_slice()]);
        let mut w2 = w;
        w2.note(&chmod(b"z"), 1, own());
        assert!(w2.ends_before(&rename(b"k", b"m"), 1, own()));
    }

    #[test]
    fn a_written_clone_source_ends_the_window() {
        let mut w = Window::new([]);
        let clone = Command::Clone {
            offset: 0,
            len: 4096,
            path: b"b",
            clone_uuid: own(),
            clone_ctransid: 1,
            clone_path: b"a",
            clone_offset: 0,
        };
        w.note(&clone, 1, own());
        let write = Command::Write {
            path: b"a",
            offset: 0,
            data: b"x",
        };
        assert!(w.ends_before(&write, 1, own()));
        let other = Command::Write {
            path: b"b",
            offset: 0,
            data: b"x",
        };
        assert!(!w.ends_before(&other, 1, own()));
    }

    #[test]
    fn removals_of_an_incremental_are_found() {
        let start: &[&[u8]] = &[b"d", b"d/x", b"d/y", b"k", b"n"];
        let cmds = [
            Command::Unlink { path: b"d/x" },
            Command::Unlink { path: b"d/y" },
            Command::Utimes {
                path: b"d",
                atime: Timespec::default(),
                mtime: Timespec::default(),
                ctime: Timespec::default(),
                otime: None,
            },
            Command::Rmdir { path: b"d" },
            rename(b"k", b"k2"),
            Command::Link {
                path: b"n2",
                target: b"n",
            },
        ];
        let mut w = Window::new([]);
        for c in &cmds {
            assert!(!w.ends_before(c, 1, own()), "{c:?}");
            w.note(c, 1, own());
        }
        for m in 0..=cmds.len() {
            let disk = after(start, &cmds, m);
            let p = plan(&cmds, own(), look(&disk)).unwrap();
            // The name changes done are the ones skipped.
            for (i, c) in cmds.iter().enumerate() {
                if changes_names(c) {
                    assert_eq!(p.skip[i], i < m, "cut after {m}: {c:?}");
                }
            }
            // The UTIMES of a directory removed later is not applied again.
            assert_eq!(p.skip[2], m >= 4, "cut after {m}");
        }
        // Nothing agrees: a name that cannot be there.
        let mut disk = after(start, &cmds, 6);
        disk.insert(b"k".to_vec());
        assert!(plan(&cmds, own(), look(&disk)).is_err());
    }

    #[test]
    fn records_round_trip_and_the_newest_whole_slot_wins() {
        let dir = tempfile::tempdir().unwrap();
        let d = File::open(dir.path()).unwrap();
        use std::os::fd::AsFd;
        let mut f = RecordFile::open(d.as_fd(), b"s").unwrap();
        let mut r = Record {
            at: Some(Resumable {
                version: 1,
                point: Point {
                    commands: 3,
                    offset: 99,
                    digest: 5,
                },
            }),
            flags: vec![(b"a/b".to_vec(), 16)],
            caps: Some((b"c".to_vec(), vec![1, 2, 0])),
            times: vec![(
                Vec::new(),
                Timespec { sec: 1, nsec: 2 },
                Timespec { sec: 3, nsec: 4 },
            )],
            window: Some(16),
            journal: Some(7),
        };
        f.write(&r).unwrap();
        assert_eq!(load(d.as_fd(), b"s"), Some(r.clone_for_test()));
        r.flags.clear();
        f.write(&r).unwrap();
        assert_eq!(load(d.as_fd(), b"s").unwrap().flags, vec![]);
        // A torn newest slot: the older one is used.
        let newest = if f.generation % 2 == 1 {
            ".rreceive-durable-73.1"
        } else {
            ".rreceive-durable-73"
        };
        let raw = File::options()
            .write(true)
            .open(dir.path().join(newest))
            .unwrap();
        raw.write_all_at(b"zz", HEAD as u64).unwrap();
        assert_eq!(load(d.as_fd(), b"s").unwrap().flags.len(), 1);
        f.invalidate().unwrap();
        assert_eq!(load(d.as_fd(), b"s"), None);
    }

    impl Record {
        fn clone_for_test(&self) -> Record {
            Record {
                at: self.at,
                flags: self.flags.clone(),
                caps: self.caps.clone(),
                times: self.times.clone(),
                window: self.window,
                journal: self.journal,
            }
        }
    }
}
