//! A tiny in-memory receiver: replays a send stream into a tree of nodes
//! and lists it in testdata/manifest.py's format, so a stream can be
//! checked against a snapshot's manifest without root or a kernel.
//!
//! It applies each command the way btrfs receive's syscalls would
//! (rename, link, pwrite, truncate, ...) and fails on anything a receiver
//! would reject: a missing path, an existing target, a write to a
//! directory, rmdir of a directory that is not empty, unlink of a
//! directory, a directory renamed beneath itself. It is stricter than
//! rename(2) in one way: a rename onto an existing name is an error (the
//! kernel's streams never replace an entry by renaming over it).
//!
//! An incremental stream is replayed onto the model of its parent
//! ([`Model::replay_onto`]): its SNAPSHOT must name the parent's uuid and
//! ctransid, and CLONEs may read from either subvolume, or from other
//! subvolumes received before ([`Model::replay_with`], for `-c` sources).
//!
//! Times change only by UTIMES, unless replayed with
//! [`Times::LikeAFilesystem`]: then, as on a real filesystem, every entry
//! made, renamed or removed sets its directory's mtime, and every write,
//! clone or truncate its file's, to [`RECEIVE_TIME`], so a stream that
//! changes something after its last UTIMES for it shows.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use btrfs_stream::{Command, Reader, Timespec};
use sha2::Digest;

use super::hex;

#[derive(Clone, Debug)]
enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, usize>),
    Symlink(Vec<u8>),
    /// chr/blk/fifo/sock: the full st_mode type bits and the stream's rdev.
    Special {
        ftype: u64,
        rdev: u64,
    },
}

#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    perm: u64,
    uid: u64,
    gid: u64,
    atime: Timespec,
    mtime: Timespec,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    links: u32,
}

impl Node {
    fn new(kind: Kind, perm: u64) -> Node {
        Node {
            kind,
            perm,
            uid: 0,
            gid: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            xattrs: BTreeMap::new(),
            links: 0,
        }
    }
}

/// The replayed subvolume of one stream.
#[derive(Default, Clone)]
pub struct Model {
    nodes: Vec<Node>,
    /// The SUBVOL or SNAPSHOT command's path.
    pub subvol: Vec<u8>,
    /// The subvolume's uuid and ctransid, from SUBVOL or SNAPSHOT.
    pub uuid: btrfs_stream::Uuid,
    pub ctransid: u64,
    /// Commands by name (`write`, `truncate`, ...).
    pub counts: BTreeMap<&'static str, u64>,
    times: Times,
}

const ROOT: usize = 0;

/// The mtime a receiver's own changes leave, under [`Times::LikeAFilesystem`]
/// (far from any time a fixture sets).
pub const RECEIVE_TIME: Timespec = Timespec {
    sec: -9_999_999_999,
    nsec: 0,
};

/// What changes times in the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Times {
    /// UTIMES only.
    #[default]
    StreamOnly,
    /// UTIMES, and [`RECEIVE_TIME`] for what a receiver's syscalls change.
    LikeAFilesystem,
}

fn split(path: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let mut parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    let last = parts.pop().unwrap_or(b"");
    (parts, last)
}

impl Model {
    /// Replays the first stream of `stream` (up to its END): a full stream,
    /// which must start with SUBVOL.
    pub fn replay(stream: &[u8]) -> Result<Model, String> {
        Self::replay_as(stream, None, Times::StreamOnly)
    }

    /// Replays the incremental stream `stream` onto a copy of `parent`, the
    /// model of the subvolume it was made against: it must start with a
    /// SNAPSHOT of `parent` (its uuid and ctransid). Times, modes and
    /// everything else the stream does not touch stay as in `parent`.
    pub fn replay_onto(parent: &Model, stream: &[u8]) -> Result<Model, String> {
        Self::replay_as(stream, Some(parent), Times::StreamOnly)
    }

    /// Replays `stream`, a full stream when `parent` is None, else an
    /// incremental one onto `parent`, with times changing as `times` says.
    pub fn replay_as(stream: &[u8], parent: Option<&Model>, times: Times) -> Result<Model, String> {
        Self::replay_with(stream, parent, &[], times)
    }

    /// Like [`Model::replay_as`], and CLONEs may also read from `sources`
    /// (the other subvolumes the receiver has), found by their uuid.
    pub fn replay_with(
        stream: &[u8],
        parent: Option<&Model>,
        sources: &[&Model],
        times: Times,
    ) -> Result<Model, String> {
        let mut m = match parent {
            Some(p) => {
                let mut m = p.clone();
                m.counts.clear();
                m
            }
            None => Model::default(),
        };
        m.times = times;
        let mut r = Reader::new(stream);
        let mut ended = false;
        let mut n = 0u64;
        while let Some(c) = r.next_command().map_err(|e| format!("stream: {e}"))? {
            n += 1;
            let first = n == 1;
            *m.counts.entry(c.kind().dump_name()).or_default() += 1;
            if matches!(c, Command::End {}) {
                ended = true;
                break;
            }
            let starts = matches!(c, Command::Subvol { .. } | Command::Snapshot { .. });
            if first != starts {
                return Err(format!(
                    "command #{n} {:?}: a stream starts with SUBVOL or SNAPSHOT, and only there",
                    c.kind()
                ));
            }
            m.apply(&c, parent, sources)
                .map_err(|e| format!("command #{n} {:?}: {e}", c.kind()))?;
        }
        if !ended {
            return Err("stream has no END".into());
        }
        Ok(m)
    }

    fn lookup(&self, path: &[u8]) -> Result<usize, String> {
        if path.is_empty() {
            return Ok(ROOT);
        }
        let mut cur = ROOT;
        for comp in path.split(|&b| b == b'/') {
            match &self.nodes[cur].kind {
                Kind::Dir(e) => {
                    cur = *e.get(comp).ok_or_else(|| {
                        format!("{}: no such entry", String::from_utf8_lossy(path))
                    })?
                }
                _ => {
                    return Err(format!(
                        "{}: not a directory",
                        String::from_utf8_lossy(path)
                    ))
                }
            }
        }
        Ok(cur)
    }

    /// The directory holding `path` and the last component.
    fn parent<'p>(&self, path: &'p [u8]) -> Result<(usize, &'p [u8]), String> {
        let (dirs, name) = split(path);
        let dir = self.lookup(&dirs.join(&b'/'))?;
        if !matches!(self.nodes[dir].kind, Kind::Dir(_)) {
            return Err("parent is not a directory".into());
        }
        if name.is_empty() {
            return Err("empty name".into());
        }
        Ok((dir, name))
    }

    fn entries(&mut self, dir: usize) -> &mut BTreeMap<Vec<u8>, usize> {
        match &mut self.nodes[dir].kind {
            Kind::Dir(e) => e,
            _ => unreachable!("checked by parent()"),
        }
    }

    /// Sets node `id`'s mtime as a receiver's syscall would.
    fn touch(&mut self, id: usize) {
        if self.times == Times::LikeAFilesystem {
            self.nodes[id].mtime = RECEIVE_TIME;
        }
    }

    fn create(&mut self, path: &[u8], node: Node) -> Result<(), String> {
        let (dir, name) = self.parent(path)?;
        if self.entries(dir).contains_key(name) {
            return Err(format!("{}: exists", String::from_utf8_lossy(path)));
        }
        self.nodes.push(node);
        let id = self.nodes.len() - 1;
        self.nodes[id].links = 1;
        self.entries(dir).insert(name.to_vec(), id);
        self.touch(dir);
        Ok(())
    }

    fn file(&mut self, path: &[u8]) -> Result<&mut Vec<u8>, String> {
        let id = self.lookup(path)?;
        match &mut self.nodes[id].kind {
            Kind::File(d) => Ok(d),
            _ => Err(format!(
                "{}: not a regular file",
                String::from_utf8_lossy(path)
            )),
        }
    }

    /// Writes `data` at `offset` of the file at `path`, growing it.
    fn write_at(&mut self, path: &[u8], offset: u64, data: &[u8]) -> Result<(), String> {
        let f = self.file(path)?;
        let end = offset as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(data);
        let id = self.lookup(path)?;
        self.touch(id);
        Ok(())
    }

    /// Whether node `id` is `dir` or lies beneath it.
    fn is_within(&self, id: usize, dir: usize) -> bool {
        // Directories have one name, so walk down from `dir` instead of up.
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            if d == id {
                return true;
            }
            if let Kind::Dir(e) = &self.nodes[d].kind {
                stack.extend(
                    e.values()
                        .copied()
                        .filter(|&c| matches!(self.nodes[c].kind, Kind::Dir(_))),
                );
            }
        }
        false
    }

    fn apply(
        &mut self,
        c: &Command<'_>,
        parent: Option<&Model>,
        sources: &[&Model],
    ) -> Result<(), String> {
        match c {
            Command::Subvol {
                path,
                uuid,
                ctransid,
            } => {
                if parent.is_some() {
                    return Err("SUBVOL in an incremental stream".into());
                }
                self.subvol = path.to_vec();
                self.uuid = *uuid;
                self.ctransid = *ctransid;
                self.nodes = vec![Node::new(Kind::Dir(BTreeMap::new()), 0o700)];
            }
            Command::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => {
                let Some(p) = parent else {
                    return Err("SNAPSHOT without a parent to replay it onto".into());
                };
                if (*clone_uuid, *clone_ctransid) != (p.uuid, p.ctransid) {
                    return Err(format!(
                        "SNAPSHOT of {clone_uuid} ctransid {clone_ctransid}, but the parent is {} ctransid {}",
                        p.uuid, p.ctransid
                    ));
                }
                self.subvol = path.to_vec();
                self.uuid = *uuid;
                self.ctransid = *ctransid;
            }
            Command::Mkfile { path, .. } => {
                self.create(path, Node::new(Kind::File(vec![]), 0o600))?
            }
            Command::Mkdir { path, .. } => {
                self.create(path, Node::new(Kind::Dir(BTreeMap::new()), 0o700))?
            }
            Command::Mknod {
                path, rdev, mode, ..
            } => self.create(
                path,
                Node::new(
                    Kind::Special {
                        ftype: mode & 0o170000,
                        rdev: *rdev,
                    },
                    0o600,
                ),
            )?,
            Command::Mkfifo { path, .. } => self.create(
                path,
                Node::new(
                    Kind::Special {
                        ftype: 0o010000,
                        rdev: 0,
                    },
                    0o600,
                ),
            )?,
            Command::Mksock { path, .. } => self.create(
                path,
                Node::new(
                    Kind::Special {
                        ftype: 0o140000,
                        rdev: 0,
                    },
                    0o600,
                ),
            )?,
            Command::Symlink { path, target, .. } => {
                self.create(path, Node::new(Kind::Symlink(target.to_vec()), 0o777))?
            }
            Command::Rename { from, to } => {
                let (fd, fname) = self.parent(from)?;
                let id = *self
                    .entries(fd)
                    .get(fname)
                    .ok_or_else(|| format!("{}: no such entry", String::from_utf8_lossy(from)))?;
                let (td, tname) = self.parent(to)?;
                if self.entries(td).contains_key(tname) {
                    return Err(format!("{}: exists", String::from_utf8_lossy(to)));
                }
                if matches!(self.nodes[id].kind, Kind::Dir(_)) && self.is_within(td, id) {
                    return Err(format!(
                        "{} would be moved beneath itself",
                        String::from_utf8_lossy(from)
                    ));
                }
                self.entries(fd).remove(fname);
                self.entries(td).insert(tname.to_vec(), id);
                self.touch(fd);
                self.touch(td);
            }
            Command::Link { path, target } => {
                let id = self.lookup(target)?;
                if matches!(self.nodes[id].kind, Kind::Dir(_)) {
                    return Err("link to a directory".into());
                }
                let (dir, name) = self.parent(path)?;
                if self.entries(dir).contains_key(name) {
                    return Err(format!("{}: exists", String::from_utf8_lossy(path)));
                }
                self.entries(dir).insert(name.to_vec(), id);
                self.nodes[id].links += 1;
                self.touch(dir);
            }
            Command::Unlink { path } | Command::Rmdir { path } => {
                let rmdir = matches!(c, Command::Rmdir { .. });
                let (dir, name) = self.parent(path)?;
                let id = *self
                    .entries(dir)
                    .get(name)
                    .ok_or_else(|| "no such entry".to_string())?;
                match (&self.nodes[id].kind, rmdir) {
                    (Kind::Dir(e), true) if !e.is_empty() => {
                        return Err(format!(
                            "{}: directory not empty",
                            String::from_utf8_lossy(path)
                        ))
                    }
                    (Kind::Dir(_), false) => {
                        return Err(format!(
                            "{}: unlink of a directory",
                            String::from_utf8_lossy(path)
                        ))
                    }
                    (Kind::Dir(_), true) => {}
                    (_, true) => {
                        return Err(format!(
                            "{}: rmdir of a non-directory",
                            String::from_utf8_lossy(path)
                        ))
                    }
                    (_, false) => {}
                }
                self.entries(dir).remove(name);
                self.nodes[id].links -= 1;
                self.touch(dir);
            }
            Command::SetXattr { path, name, data } => {
                let id = self.lookup(path)?;
                self.nodes[id].xattrs.insert(name.to_vec(), data.to_vec());
            }
            Command::RemoveXattr { path, name } => {
                let id = self.lookup(path)?;
                self.nodes[id]
                    .xattrs
                    .remove(*name)
                    .ok_or_else(|| "no such xattr".to_string())?;
            }
            Command::Write { path, offset, data } => self.write_at(path, *offset, data)?,
            Command::Clone {
                offset,
                len,
                path,
                clone_uuid,
                clone_path,
                clone_offset,
                ..
            } => {
                // The source is this subvolume as received so far, or the
                // parent or another subvolume received before, as they were.
                let (s, n) = (*clone_offset as usize, *len as usize);
                let range = |src: &[u8]| {
                    src.get(s..s + n)
                        .map(<[u8]>::to_vec)
                        .ok_or_else(|| "clone source range beyond its end".to_string())
                };
                let other = parent
                    .into_iter()
                    .chain(sources.iter().copied())
                    .find(|p| p.uuid == *clone_uuid);
                let bytes = if *clone_uuid == self.uuid {
                    range(self.file(clone_path)?)?
                } else if let Some(p) = other {
                    match &p.nodes[p.lookup(clone_path)?].kind {
                        Kind::File(d) => range(d)?,
                        _ => return Err("clone source is not a regular file".into()),
                    }
                } else {
                    return Err(format!("clone from an unknown subvolume {clone_uuid}"));
                };
                let f = self.file(path)?;
                let end = *offset as usize + n;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[*offset as usize..end].copy_from_slice(&bytes);
                let id = self.lookup(path)?;
                self.touch(id);
            }
            Command::Truncate { path, size } => {
                self.file(path)?.resize(*size as usize, 0);
                let id = self.lookup(path)?;
                self.touch(id);
            }
            Command::Chmod { path, mode } => {
                let id = self.lookup(path)?;
                self.nodes[id].perm = mode & 0o7777;
            }
            Command::Chown { path, uid, gid } => {
                let id = self.lookup(path)?;
                self.nodes[id].uid = *uid;
                self.nodes[id].gid = *gid;
            }
            Command::Utimes {
                path, atime, mtime, ..
            } => {
                let id = self.lookup(path)?;
                self.nodes[id].atime = *atime;
                self.nodes[id].mtime = *mtime;
            }
            Command::UpdateExtent { .. } => {}
            Command::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                unencoded_len,
                unencoded_offset,
                compression,
                data,
                ..
            } => {
                let algo = btrfs_compress::Algorithm::from_encoded(compression.unwrap_or(0))
                    .map_err(|e| e.to_string())?;
                let mut plain = vec![0u8; *unencoded_len as usize];
                btrfs_compress::decompress(algo, data, &mut plain).map_err(|e| e.to_string())?;
                let (s, n) = (*unencoded_offset as usize, *unencoded_file_len as usize);
                let piece = plain
                    .get(s..s + n)
                    .ok_or("encoded write range beyond the decoded extent")?
                    .to_vec();
                self.write_at(path, *offset, &piece)?;
            }
            Command::Fallocate {
                path,
                mode,
                offset,
                len,
            } => {
                // The kernel sends only punched holes (PUNCH_HOLE | KEEP_SIZE).
                if *mode != 3 {
                    return Err(format!("fallocate mode {mode:#x} is not a punched hole"));
                }
                let f = self.file(path)?;
                let start = (*offset as usize).min(f.len());
                let end = ((*offset + *len) as usize).min(f.len());
                f[start..end].fill(0);
                let id = self.lookup(path)?;
                self.touch(id);
            }
            Command::Fileattr { path, .. } | Command::EnableVerity { path, .. } => {
                self.lookup(path)?;
            }
            other => return Err(format!("{:?} is not expected in a stream", other.kind())),
        }
        Ok(())
    }

    /// The tree as manifest lines (testdata/manifest.py columns without
    /// path_repr), sorted by path bytes.
    pub fn manifest(&self) -> Vec<String> {
        let mut rows: Vec<(Vec<u8>, String)> = Vec::new();
        let mut stack = vec![(b".".to_vec(), ROOT)];
        while let Some((rel, id)) = stack.pop() {
            let n = &self.nodes[id];
            let t = |s: &Timespec| format!("{}.{:09}", s.sec, s.nsec);
            let (ty, size, digest, target, rdev) = match &n.kind {
                Kind::File(d) => (
                    "reg",
                    d.len().to_string(),
                    hex(&sha2::Sha256::digest(d)),
                    "-".into(),
                    "-".into(),
                ),
                Kind::Dir(_) => ("dir", "-".into(), "-".into(), "-".into(), "-".into()),
                Kind::Symlink(tg) => ("lnk", tg.len().to_string(), "-".into(), hex(tg), "-".into()),
                Kind::Special { ftype, rdev } => {
                    let ty = match ftype {
                        0o020000 => "chr",
                        0o060000 => "blk",
                        0o010000 => "fifo",
                        _ => "sock",
                    };
                    let dev = if ty == "chr" || ty == "blk" {
                        // new_encode_dev, decoded.
                        let major = (rdev >> 8) & 0xfff;
                        let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
                        format!("{major}:{minor}")
                    } else {
                        "-".into()
                    };
                    (ty, "-".into(), "-".into(), "-".into(), dev)
                }
            };
            let nlink = if ty == "dir" {
                "-".to_string()
            } else {
                n.links.to_string()
            };
            let xattrs = if n.xattrs.is_empty() {
                "-".to_string()
            } else {
                let mut s = String::new();
                for (i, (k, v)) in n.xattrs.iter().enumerate() {
                    if i > 0 {
                        s.push(';');
                    }
                    let _ = write!(s, "{}={}", String::from_utf8_lossy(k), hex(v));
                }
                s
            };
            let line = [
                hex(&rel),
                ty.to_string(),
                format!("{:04o}", n.perm),
                n.uid.to_string(),
                n.gid.to_string(),
                nlink,
                size,
                t(&n.mtime),
                t(&n.atime),
                digest,
                target,
                rdev,
                xattrs,
            ]
            .join("\t");
            rows.push((rel.clone(), line));
            if let Kind::Dir(e) = &n.kind {
                for (name, child) in e {
                    let p = if rel == b"." {
                        name.clone()
                    } else {
                        let mut p = rel.clone();
                        p.push(b'/');
                        p.extend_from_slice(name);
                        p
                    };
                    stack.push((p, *child));
                }
            }
        }
        rows.sort();
        rows.into_iter().map(|(_, l)| l).collect()
    }

    /// What the model lists, as a manifest (rows sorted).
    pub fn as_manifest(&self) -> super::scenarios::Manifest {
        let mut rows = self.manifest();
        rows.sort();
        super::scenarios::Manifest {
            rows,
            skipped: Vec::new(),
            links: self.link_groups(),
        }
    }

    /// Hard-link groups: the sorted paths of every inode with several names.
    pub fn link_groups(&self) -> Vec<Vec<Vec<u8>>> {
        let mut by_node: BTreeMap<usize, Vec<Vec<u8>>> = BTreeMap::new();
        let mut stack = vec![(Vec::new(), ROOT)];
        while let Some((rel, id)) = stack.pop() {
            if let Kind::Dir(e) = &self.nodes[id].kind {
                for (name, child) in e {
                    let mut p = rel.clone();
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(name);
                    if matches!(self.nodes[*child].kind, Kind::Dir(_)) {
                        stack.push((p, *child));
                    } else {
                        by_node.entry(*child).or_default().push(p);
                    }
                }
            }
        }
        let mut groups: Vec<Vec<Vec<u8>>> = by_node
            .into_values()
            .filter(|g| g.len() > 1)
            .map(|mut g| {
                g.sort();
                g
            })
            .collect();
        groups.sort();
        groups
    }
}
