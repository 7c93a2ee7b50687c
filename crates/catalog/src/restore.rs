//! Restoring one path (a file or a whole subtree) as of one night: the
//! tree is built under a temporary name beside the target, each file's
//! data read from the byte ranges of the stream files that hold it, and
//! renamed to the target only when everything, metadata included, is in
//! place.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::{utimensat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;

use crate::error::{Error, Result};
use crate::layout::Piece;
use crate::source::{data_commands, Data, StreamFiles};
use crate::state::{Catalog, Inode, Snapshot};

/// Blocks of zeros at this alignment are left as holes.
const BLOCK: u64 = 4096;

/// Open files kept while data is written.
const OPEN_FILES: usize = 128;

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// Where it was written.
    pub target: PathBuf,
    /// Inodes written (a file with several names counts once).
    pub files: u64,
    /// Data bytes written.
    pub bytes: u64,
    /// Bytes read from stream files.
    pub read: u64,
    /// Bytes the ranges to read add up to.
    pub to_read: u64,
    /// Bytes of every stream file of the night's chain, for comparison.
    pub chain: u64,
    /// btrfs properties (`btrfs.*` xattrs) the destination cannot hold,
    /// skipped as rreceive skips them off btrfs.
    pub skipped_properties: u64,
    /// Inodes whose owner could not be set because the restore does not
    /// run as root (they belong to the user who restored them).
    pub owners_kept: u64,
    /// Xattrs too large for the destination's filesystem, skipped as
    /// rreceive skips them: what and why, one each.
    pub skipped_xattrs: Vec<String>,
}

/// Progress told while data is read.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Range bytes read so far.
    pub done: u64,
    /// Range bytes to read in all.
    pub total: u64,
}

/// One inode of the subtree, at its (first) path.
struct Node {
    rel: PathBuf,
    ino: i64,
    inode: Inode,
    /// A further name of an earlier node's inode.
    link_of: Option<usize>,
}

/// Splits `SNAPSHOT/PATH` into the night and the path within it.
pub fn split_spec<'a>(cat: &Catalog, spec: &'a [u8]) -> Result<(Snapshot, &'a [u8])> {
    let (name, path) = match spec.iter().position(|&b| b == b'/') {
        Some(i) => (&spec[..i], &spec[i + 1..]),
        None => (spec, &spec[..0]),
    };
    Ok((cat.find_snapshot(name)?, path))
}

/// Judges an xattr the destination refused (`name`, a value of `len`
/// bytes, the errno) on the filesystem of the descriptor: why it is too
/// large for that filesystem, or `None` when the refusal is an error (a
/// full filesystem, say).
pub type TooLarge<'a> =
    &'a dyn Fn(std::os::fd::BorrowedFd<'_>, &[u8], usize, nix::errno::Errno) -> Option<String>;

/// What a restore is told and asks.
pub struct Hooks<'a> {
    /// Told as data is read.
    pub progress: &'a mut dyn FnMut(Progress),
    /// Asked about an xattr the destination refused: one too large for
    /// its filesystem is skipped and named, as rreceive skips it.
    pub too_large: TooLarge<'a>,
}

/// Restores `spec` (`SNAPSHOT/PATH`) to `dest`: into `dest/<name>` when
/// `dest` is a directory, else as `dest`.
pub fn restore(cat: &Catalog, spec: &[u8], dest: &Path, hooks: &mut Hooks<'_>) -> Result<Restored> {
    let (snap, path) = split_spec(cat, spec)?;
    let ino = cat.resolve(&snap, path)?.ok_or_else(|| {
        Error::NotFound(format!(
            "no path '{}' in snapshot {}",
            btrfs_text::escape::escape(path),
            snap.label()
        ))
    })?;
    let base: Vec<u8> = path
        .rsplit(|&b| b == b'/')
        .find(|p| !p.is_empty() && *p != b".")
        .unwrap_or(&snap.name)
        .to_vec();
    let target = if dest.is_dir() {
        dest.join(OsStr::from_bytes(&base))
    } else {
        dest.to_owned()
    };
    if target.symlink_metadata().is_ok() {
        return Err(Error::Restore(format!(
            "{} exists: restore refuses to replace it (remove it or name another DEST)",
            target.display()
        )));
    }
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(Error::Restore(format!(
            "{}: no such directory to restore into",
            parent.display()
        )));
    }
    let tmp = temp_name(&parent);
    let nodes = walk(cat, &snap, ino)?;
    let mut done = Restored {
        target: target.clone(),
        chain: chain_bytes(cat, &snap)?,
        ..Restored::default()
    };
    let res = build(cat, &snap, &nodes, &tmp, &mut done, hooks).and_then(|()| {
        sync_dir(&parent)?;
        std::fs::rename(&tmp, &target).map_err(|source| Error::Io {
            path: target.clone(),
            source,
        })?;
        sync_dir(&parent)
    });
    if let Err(e) = res {
        let _ = if tmp.is_dir() && !tmp.is_symlink() {
            std::fs::remove_dir_all(&tmp)
        } else {
            std::fs::remove_file(&tmp)
        };
        return Err(e);
    }
    Ok(done)
}

/// The prefix of a restore's temporary name, before its pid.
const TEMP_PREFIX: &str = ".rreceive-restore-";

/// Removes what restores killed before they were done left in `dir`: the
/// temporary trees of processes that are gone.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let p = e.path();
            let _ = if p.is_dir() && !p.is_symlink() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

/// A name beside the target that no one else uses.
fn temp_name(parent: &Path) -> PathBuf {
    remove_stale(parent);
    let pid = std::process::id();
    let mut n = 0u32;
    loop {
        let p = parent.join(format!("{TEMP_PREFIX}{pid}-{n}"));
        if p.symlink_metadata().is_err() {
            return p;
        }
        n += 1;
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)).map_err(|e| Error::Io {
        path: dir.to_owned(),
        source: e.into(),
    })
}

/// Bytes of the stream files of `snap` and its ancestors.
fn chain_bytes(cat: &Catalog, snap: &Snapshot) -> Result<u64> {
    cat.db(cat.conn.query_row(
        "SELECT coalesce(sum(size), 0) FROM stream_file WHERE id IN \
         (SELECT s.file FROM ancestry a JOIN snapshot s ON s.id = a.ancestor WHERE a.snap = ?1)",
        [snap.id],
        |r| r.get::<_, i64>(0),
    ))
    .map(|n| n as u64)
}

/// The subtree under `ino`, parents before children, by name.
fn walk(cat: &Catalog, snap: &Snapshot, ino: i64) -> Result<Vec<Node>> {
    let inode = |i: i64| -> Result<Inode> {
        cat.inode(snap.id, i)?
            .ok_or_else(|| Error::Restore(format!("the catalog has no inode {i} (damaged)")))
    };
    let mut nodes = vec![Node {
        rel: PathBuf::new(),
        ino,
        inode: inode(ino)?,
        link_of: None,
    }];
    let mut first: HashMap<i64, usize> = HashMap::new();
    first.insert(ino, 0);
    let mut stack = vec![0usize];
    while let Some(n) = stack.pop() {
        if !nodes[n].inode.is_dir() {
            continue;
        }
        let dir = nodes[n].ino;
        let mut kids = Vec::new();
        for (name, child) in cat.list(snap.id, dir)? {
            if !crate::night::valid_name(&name) || name.contains(&b'/') {
                return Err(Error::Restore(format!(
                    "the catalog holds an invalid name '{}' in {} (damaged)",
                    btrfs_text::escape::escape(&name),
                    nodes[n].rel.display()
                )));
            }
            let rel = nodes[n].rel.join(OsStr::from_bytes(&name));
            let link_of = first.get(&child).copied();
            let idx = nodes.len();
            nodes.push(Node {
                rel,
                ino: child,
                inode: match link_of {
                    Some(f) => nodes[f].inode.clone(),
                    None => inode(child)?,
                },
                link_of,
            });
            if link_of.is_none() {
                first.insert(child, idx);
            }
            kids.push(idx);
        }
        stack.extend(kids.into_iter().rev());
    }
    Ok(nodes)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_owned(),
        source,
    }
}

fn nix_io(path: &Path) -> impl Fn(nix::errno::Errno) -> Error + '_ {
    move |e| Error::Io {
        path: path.to_owned(),
        source: e.into(),
    }
}

/// Writes the nodes under `tmp`.
fn build(
    cat: &Catalog,
    snap: &Snapshot,
    nodes: &[Node],
    tmp: &Path,
    done: &mut Restored,
    hooks: &mut Hooks<'_>,
) -> Result<()> {
    let at = |n: &Node| at_rel(tmp, &n.rel);
    for n in nodes {
        let p = at(n);
        if let Some(f) = n.link_of {
            std::fs::hard_link(at(&nodes[f]), &p).map_err(io(&p))?;
            continue;
        }
        let kind = n.inode.mode & libc::S_IFMT;
        let perm = Mode::from_bits_truncate(0o600);
        match kind {
            libc::S_IFDIR => std::fs::create_dir(&p).map_err(io(&p))?,
            libc::S_IFREG => {
                let f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&p)
                    .map_err(io(&p))?;
                f.set_len(n.inode.size).map_err(io(&p))?;
            }
            libc::S_IFLNK => {
                let t = n.inode.target.as_deref().unwrap_or_default();
                std::os::unix::fs::symlink(OsStr::from_bytes(t), &p).map_err(io(&p))?
            }
            libc::S_IFIFO => nix::unistd::mkfifo(&p, perm).map_err(nix_io(&p))?,
            libc::S_IFCHR | libc::S_IFBLK | libc::S_IFSOCK => {
                let (major, minor) = decode_dev(n.inode.rdev);
                nix::sys::stat::mknod(
                    &p,
                    SFlag::from_bits_truncate(kind),
                    perm,
                    libc::makedev(major, minor),
                )
                .map_err(nix_io(&p))?
            }
            other => {
                return Err(Error::Restore(format!(
                    "{}: unknown file type {other:o}",
                    n.rel.display()
                )))
            }
        }
        done.files += 1;
    }
    write_data(cat, snap, nodes, tmp, done, hooks.progress)?;
    // The directory the restore is made in: on the same filesystem, and
    // opening it never follows a restored symlink nor blocks on a fifo.
    let beside = tmp.parent().unwrap_or(Path::new("."));
    let root = File::open(beside).map_err(io(beside))?;
    for n in nodes.iter().rev().filter(|n| n.link_of.is_none()) {
        set_meta(cat, snap, n, &at(n), done, &root, hooks.too_large)?;
    }
    Ok(())
}

/// Where `rel` goes under `tmp` (the root is `tmp` itself, with no
/// trailing '/', which would not name a file).
fn at_rel(tmp: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        tmp.to_owned()
    } else {
        tmp.join(rel)
    }
}

/// The kernel's new_encode_dev layout.
fn decode_dev(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 8) & 0xfff) as u32;
    let minor = ((rdev & 0xff) | ((rdev >> 12) & 0xfff00)) as u32;
    (major, minor)
}

/// Reads every range the files need, in stream order, and writes them.
fn write_data(
    cat: &Catalog,
    snap: &Snapshot,
    nodes: &[Node],
    tmp: &Path,
    done: &mut Restored,
    progress: &mut dyn FnMut(Progress),
) -> Result<()> {
    let mut runs: HashMap<(i64, u64, u64), Vec<(usize, Piece)>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.link_of.is_some() || !n.inode.is_file() {
            continue;
        }
        for p in cat.layout(snap.id, n.ino, n.inode.size)?.pieces() {
            runs.entry((p.file, p.cmd_start, p.cmd_end))
                .or_default()
                .push((i, *p));
        }
    }
    let mut order: Vec<(i64, u64, u64)> = runs.keys().copied().collect();
    order.sort_unstable();
    let total: u64 = order.iter().map(|k| k.2 - k.1).sum();
    done.to_read = total;
    let mut files = StreamFiles::new(cat);
    let mut open: HashMap<usize, File> = HashMap::new();
    let mut so_far = 0u64;
    progress(Progress { done: 0, total });
    let nights = cat.snapshots()?;
    for key in order {
        let (file, start, end) = key;
        let wanted = &runs[&key];
        let (spath, buf) = files.read(file, start, end)?;
        let night = night_containing(&nights, file, start);
        let version = night.map_or(1, |s| s.version);
        let res = data_commands(&buf, start, version, |d| {
            let (offset, data): (u64, &[u8]) = match &d {
                Data::Write { offset, data } => (*offset, data),
                Data::Decoded { offset, data } => (*offset, data),
            };
            let cend = offset + data.len() as u64;
            for (i, p) in wanted {
                let s = p.src.max(offset);
                let e = (p.src + p.len()).min(cend);
                if s >= e {
                    continue;
                }
                let bytes = &data[(s - offset) as usize..(e - offset) as usize];
                let at = p.start + (s - p.src);
                if open.len() >= OPEN_FILES && !open.contains_key(i) {
                    open.clear();
                }
                let f = match open.entry(*i) {
                    std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        let fp = at_rel(tmp, &nodes[*i].rel);
                        v.insert(OpenOptions::new().write(true).open(&fp).map_err(io(&fp))?)
                    }
                };
                write_sparse(f, bytes, at).map_err(io(&nodes[*i].rel))?;
                done.bytes += bytes.len() as u64;
            }
            Ok(())
        });
        match res {
            Ok(r) => r?,
            Err(what) => {
                return Err(Error::Changed {
                    night: night.map_or_else(|| "?".to_string(), Snapshot::label),
                    what: format!(
                        "{}: {what} (the catalog points there: the file changed since it was cataloged)",
                        spath.display()
                    ),
                })
            }
        }
        so_far += end - start;
        progress(Progress {
            done: so_far,
            total,
        });
    }
    done.read = files.bytes_read();
    Ok(())
}

/// Writes `data` at `at`, leaving aligned blocks of zeros as holes.
fn write_sparse(f: &File, data: &[u8], at: u64) -> std::io::Result<()> {
    let mut i = 0usize;
    while i < data.len() {
        let pos = at + i as u64;
        let next = ((pos / BLOCK + 1) * BLOCK - at) as usize;
        let e = next.min(data.len());
        let chunk = &data[i..e];
        let whole = pos.is_multiple_of(BLOCK) && chunk.len() as u64 == BLOCK;
        if !(whole && chunk.iter().all(|&b| b == 0)) {
            f.write_all_at(chunk, pos)?;
        }
        i = e;
    }
    Ok(())
}

/// The night whose stream holds byte `at` of stream file `file`.
pub(crate) fn night_containing(nights: &[Snapshot], file: i64, at: u64) -> Option<&Snapshot> {
    nights
        .iter()
        .filter(|s| s.file_id == file && s.stream_offset <= at)
        .max_by_key(|s| s.stream_offset)
}

/// Sets owner, mode, xattrs and times, in that order (a chown clears
/// set-id bits and capabilities).
fn set_meta(
    cat: &Catalog,
    snap: &Snapshot,
    n: &Node,
    p: &Path,
    done: &mut Restored,
    fs: &File,
    too_large: TooLarge<'_>,
) -> Result<()> {
    let i = &n.inode;
    let link = i.mode & libc::S_IFMT == libc::S_IFLNK;
    let shown = || {
        if n.rel.as_os_str().is_empty() {
            done.target.display().to_string()
        } else {
            n.rel.display().to_string()
        }
    };
    match std::os::unix::fs::lchown(p, Some(i.uid as u32), Some(i.gid as u32)) {
        Ok(()) => {}
        // Not root: owners stay this user's, as tar and rsync do for an
        // ordinary user; counted and told.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && !nix::unistd::geteuid().is_root() => {
            done.owners_kept += 1;
        }
        Err(e) => {
            return Err(Error::Restore(format!(
                "{}: cannot set owner {}:{}: {e}",
                shown(),
                i.uid,
                i.gid
            )))
        }
    }
    if !link {
        nix::sys::stat::fchmodat(
            None,
            p,
            Mode::from_bits_truncate(i.mode & 0o7777),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(nix_io(p))?;
    }
    for (name, value) in cat.xattrs(snap.id, n.ino)? {
        let Err(e) = xattr::set(p, OsStr::from_bytes(&name), &value) else {
            continue;
        };
        let errno = nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0));
        // A btrfs property (btrfs.compression) off btrfs: skipped, as
        // rreceive skips it.
        if name.starts_with(b"btrfs.") && errno == nix::errno::Errno::EOPNOTSUPP {
            done.skipped_properties += 1;
            continue;
        }
        if let Some(why) = too_large(std::os::fd::AsFd::as_fd(fs), &name, value.len(), errno) {
            done.skipped_xattrs.push(format!(
                "xattr {} of {} ({} bytes): {why}",
                btrfs_text::escape::escape(&name),
                shown(),
                value.len()
            ));
            continue;
        }
        return Err(Error::Restore(format!(
            "{}: cannot set xattr {}: {e}",
            shown(),
            btrfs_text::escape::escape(&name)
        )));
    }
    let ts = |t: crate::state::Time| TimeSpec::new(t.sec, t.nsec as i64);
    utimensat(
        None,
        p,
        &ts(i.atime),
        &ts(i.mtime),
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(nix_io(p))?;
    Ok(())
}
