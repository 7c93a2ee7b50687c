//! Adding stream files to the catalog: each stream in a file is one night,
//! replayed onto the catalog's model of its parent night, so only what the
//! stream changes gets rows.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use btrfs_stream::{Command, Position, Reader, Uuid};
use rdump::chains::Identity;
use rusqlite::params;

use crate::error::{Error, Result};
use crate::layout::Piece;
use crate::schema::{KIND_CLONED_ENCODED, KIND_CLONED_WRITE, KIND_ENCODED, KIND_HOLE, KIND_WRITE};
use crate::state::{uuid_text, Catalog, Inode, Snapshot, Time};

/// A run of data commands becomes one `extent` row while it grows by at
/// most this many data bytes: a restore reads a whole run for any part of
/// it (a clone of a small range, say), and a row costs some 40 bytes.
const RUN_CAP: u64 = 256 << 10;

/// Dirty inodes kept before they are written out mid-night.
const DIRTY_CAP: usize = 100_000;

/// What adding a file did with one of its streams.
#[derive(Debug, Clone)]
pub struct Added {
    /// The snapshot's name (last component of its path).
    pub name: Vec<u8>,
    /// Its uuid.
    pub uuid: [u8; 16],
    /// Already in the catalog: nothing was added for it.
    pub already: bool,
    /// Commands in the stream.
    pub commands: u64,
    /// Rows the night added.
    pub rows: u64,
}

/// Counts and hashes the bytes of a stream file as stored.
pub(crate) struct Tap<R> {
    pub(crate) inner: R,
    pub(crate) hash: xxhash_rust::xxh3::Xxh3,
    pub(crate) bytes: u64,
}

impl<R> Tap<R> {
    /// Nothing read yet.
    pub(crate) fn new(inner: R) -> Tap<R> {
        Tap {
            inner,
            hash: xxhash_rust::xxh3::Xxh3::new(),
            bytes: 0,
        }
    }
}

impl<R: Read> Read for Tap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

impl Catalog {
    /// Adds every stream of the stream file at `path`, read whole from
    /// `raw` (its bytes as stored: zstd-compressed or not). All its nights
    /// are added, or none.
    pub fn add(&mut self, path: &Path, raw: impl Read) -> Result<Vec<Added>> {
        let abs = std::path::absolute(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut tap = Tap::new(raw);
        self.db(self.conn.execute_batch("BEGIN IMMEDIATE"))?;
        let res = match rdump::Decompress::new(&mut tap) {
            Ok(input) => {
                let compressed = input.is_zstd();
                self.add_streams(path, &abs, input, compressed)
            }
            Err(source) => Err(Error::Io {
                path: path.to_owned(),
                source,
            }),
        };
        let res = res.and_then(|(added, file_id)| {
            // Whatever follows the last stream is read too, so the hash and
            // size cover the whole file.
            std::io::copy(&mut tap, &mut std::io::sink()).map_err(|source| Error::Io {
                path: path.to_owned(),
                source,
            })?;
            self.db(self.conn.execute(
                "UPDATE stream_file SET size = ?1, xxh3 = ?2 WHERE id = ?3",
                params![tap.bytes as i64, tap.hash.digest() as i64, file_id],
            ))?;
            Ok(added)
        });
        match res {
            Ok(added) if added.iter().any(|a| !a.already) => {
                self.db(self.conn.execute_batch("COMMIT"))?;
                Ok(added)
            }
            other => {
                let _ = self.conn.execute_batch("ROLLBACK");
                other
            }
        }
    }

    /// Reads the streams of one file into nights.
    fn add_streams(
        &mut self,
        path: &Path,
        abs: &Path,
        input: impl Read,
        compressed: bool,
    ) -> Result<(Vec<Added>, i64)> {
        use std::os::unix::ffi::OsStrExt;
        let key = abs.as_os_str().as_bytes();
        let old: Option<i64> = self
            .db(self
                .conn
                .query_row("SELECT id FROM stream_file WHERE path = ?1", [key], |r| {
                    r.get(0)
                }))
            .ok();
        let file_id = match old {
            Some(id) => {
                let n: i64 = self.db(self.conn.query_row(
                    "SELECT count(*) FROM snapshot WHERE file = ?1",
                    [id],
                    |r| r.get(0),
                ))?;
                if n > 0 {
                    return Err(Error::Refused {
                        path: path.to_owned(),
                        what: "this stream file is already in the catalog (its nights are cataloged); \
                               a changed file must get a new name"
                            .into(),
                        command: 0,
                        offset: 0,
                    });
                }
                id
            }
            None => {
                self.db(self.conn.execute(
                    "INSERT INTO stream_file(path, size, compressed, xxh3) VALUES(?1, 0, ?2, 0)",
                    params![key, compressed as i64],
                ))?;
                self.conn.last_insert_rowid()
            }
        };
        let mut reader = Reader::new(input);
        let mut night: Option<Night> = None;
        let mut added = Vec::new();
        let mut next_ino: i64 =
            self.db(self
                .conn
                .query_row("SELECT coalesce(max(id), 0) + 1 FROM inode", [], |r| {
                    r.get(0)
                }))?;
        let stream_err = |source| Error::Stream {
            path: path.to_owned(),
            source,
        };
        loop {
            let Some((cmd, pos)) = reader.next_framed().map_err(stream_err)? else {
                break;
            };
            let refuse = |what: String| Error::Refused {
                path: path.to_owned(),
                what,
                command: pos.index,
                offset: pos.offset,
            };
            if matches!(cmd, Command::End {}) {
                if let Some(n) = night.take() {
                    added.push(n.end(self, pos)?);
                    continue;
                }
            }
            if let (None, Some(id)) = (&night, Identity::of(&cmd)) {
                night = Some(Night::begin(
                    self,
                    Begin {
                        file_id,
                        id: &id,
                        pos,
                    },
                    &mut next_ino,
                    path,
                )?);
                continue;
            }
            match (&mut night, &cmd) {
                (None, Command::Resume { .. }) => {
                    return Err(refuse(
                        "the stream continues an earlier one (RESUME): catalog the stream whole"
                            .into(),
                    ))
                }
                (None, c) => {
                    return Err(refuse(format!(
                        "a stream must begin with SUBVOL or SNAPSHOT, not {}",
                        c.kind().name()
                    )))
                }
                (Some(n), _) => {
                    n.commands += 1;
                    if !n.already {
                        n.apply(self, &cmd, pos, &mut next_ino).map_err(refuse)?;
                    }
                }
            }
        }
        if let Some(n) = night {
            return Err(Error::Refused {
                path: path.to_owned(),
                what: format!(
                    "the stream of {} ends without END: it is cut short",
                    btrfs_text::escape::escape(&n.name)
                ),
                command: reader.commands(),
                offset: reader.position(),
            });
        }
        if added.is_empty() {
            return Err(Error::Refused {
                path: path.to_owned(),
                what: "no stream in the file".into(),
                command: 0,
                offset: 0,
            });
        }
        Ok((added, file_id))
    }
}

/// What a night begins with.
struct Begin<'a> {
    file_id: i64,
    id: &'a Identity,
    pos: Position,
}

/// An open run of data commands to one inode.
#[derive(Debug, Clone, Copy)]
struct Run {
    ino: i64,
    start: u64,
    end: u64,
    cmd_start: u64,
    cmd_end: u64,
    kind: i64,
}

/// One stream being added.
struct Night {
    id: i64,
    name: Vec<u8>,
    uuid: [u8; 16],
    file_id: i64,
    root: i64,
    stream_offset: u64,
    /// Already cataloged: its commands are read and skipped.
    already: bool,
    commands: u64,
    data_bytes: u64,
    rows: u64,
    seq: i64,
    run: Option<Run>,
    dirty: HashMap<i64, Inode>,
    dirs: HashMap<Vec<u8>, i64>,
}

type Step = std::result::Result<(), String>;

impl Night {
    fn begin(cat: &mut Catalog, b: Begin<'_>, next_ino: &mut i64, path: &Path) -> Result<Night> {
        let id = b.id;
        let uuid = *id.id.uuid.as_bytes();
        let parent_id = id.parent.map(|p| (*p.uuid.as_bytes(), p.ctransid));
        let name = id
            .name
            .rsplit(|&c| c == b'/')
            .find(|p| !p.is_empty())
            .unwrap_or(&id.name)
            .to_vec();
        let stream_offset = b
            .pos
            .offset
            .saturating_sub(btrfs_stream::STREAM_HEADER_LEN as u64);
        let mut night = Night {
            id: 0,
            name,
            uuid,
            file_id: b.file_id,
            root: 0,
            stream_offset,
            already: false,
            commands: 1,
            data_bytes: 0,
            rows: 0,
            seq: 0,
            run: None,
            dirty: HashMap::new(),
            dirs: HashMap::new(),
        };
        if cat.by_uuid(&uuid, Some(id.id.ctransid))?.is_some() {
            night.already = true;
            return Ok(night);
        }
        let parent: Option<Snapshot> = match parent_id {
            None => None,
            Some((pu, pc)) => match cat.by_uuid(&pu, Some(pc))? {
                Some(s) => Some(s),
                None => {
                    return Err(Error::MissingParent {
                        path: path.to_owned(),
                        name: btrfs_text::escape::escape(&night.name),
                        parent: uuid_text(&pu),
                        ctransid: pc,
                    })
                }
            },
        };
        let root = match &parent {
            Some(p) => p.root,
            None => {
                let r = *next_ino;
                *next_ino += 1;
                r
            }
        };
        cat.db(cat.conn.execute(
            "INSERT INTO snapshot(name, uuid, ctransid, parent, parent_uuid, parent_ctransid, file, \
             stream_offset, stream_len, version, commands, data_bytes, root, added) \
             VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, 0, 0, ?10, strftime('%s','now'))",
            params![
                night.name,
                &uuid[..],
                id.id.ctransid as i64,
                parent.as_ref().map(|p| p.id),
                parent_id.map(|p| p.0.to_vec()),
                parent_id.map(|p| p.1 as i64),
                b.file_id,
                stream_offset as i64,
                b.pos.version as i64,
                root,
            ],
        ))?;
        night.id = cat.conn.last_insert_rowid();
        night.root = root;
        cat.db(cat.conn.execute(
            "INSERT INTO ancestry(snap, ancestor, depth) VALUES(?1, ?1, 0)",
            [night.id],
        ))?;
        if let Some(p) = &parent {
            cat.db(cat.conn.execute(
                "INSERT INTO ancestry(snap, ancestor, depth) \
                 SELECT ?1, ancestor, depth + 1 FROM ancestry WHERE snap = ?2",
                params![night.id, p.id],
            ))?;
        } else {
            night.dirty.insert(
                root,
                Inode {
                    mode: libc::S_IFDIR | 0o755,
                    nlink: 1,
                    ..Inode::default()
                },
            );
        }
        Ok(night)
    }

    fn end(mut self, cat: &mut Catalog, pos: Position) -> Result<Added> {
        let stream_len = pos.offset + pos.len - self.stream_offset;
        if !self.already {
            self.flush_run(cat).map_err(|what| Error::Changed {
                night: btrfs_text::escape::escape(&self.name),
                what,
            })?;
            self.flush_inodes(cat)?;
            cat.db(cat.conn.execute(
                "UPDATE snapshot SET stream_len = ?1, commands = ?2, data_bytes = ?3 WHERE id = ?4",
                params![
                    stream_len as i64,
                    (self.commands + 1) as i64,
                    self.data_bytes as i64,
                    self.id
                ],
            ))?;
        }
        Ok(Added {
            name: self.name,
            uuid: self.uuid,
            already: self.already,
            commands: self.commands + 1,
            rows: self.rows,
        })
    }

    fn sql<T>(cat: &Catalog, r: rusqlite::Result<T>) -> std::result::Result<T, String> {
        r.map_err(|e| format!("catalog {}: {e}", cat.path.display()))
    }

    fn lift<T>(r: Result<T>) -> std::result::Result<T, String> {
        r.map_err(|e| e.to_string())
    }

    fn flush_inodes(&mut self, cat: &Catalog) -> Result<()> {
        let mut st = cat.db(cat.conn.prepare_cached(
            "INSERT OR REPLACE INTO inode(id, snap, mode, uid, gid, size, rdev, nlink, atime, \
             atime_ns, mtime, mtime_ns, ctime, ctime_ns, fileattr, target) \
             VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        ))?;
        for (ino, i) in self.dirty.drain() {
            cat.db(st.execute(params![
                ino,
                self.id,
                i.mode as i64,
                i.uid as i64,
                i.gid as i64,
                i.size as i64,
                i.rdev as i64,
                i.nlink as i64,
                i.atime.sec,
                i.atime.nsec as i64,
                i.mtime.sec,
                i.mtime.nsec as i64,
                i.ctime.sec,
                i.ctime.nsec as i64,
                i.fileattr as i64,
                i.target,
            ]))?;
            self.rows += 1;
        }
        Ok(())
    }

    /// The inode as it stands in this night so far.
    fn inode(&self, cat: &Catalog, ino: i64) -> std::result::Result<Inode, String> {
        if let Some(i) = self.dirty.get(&ino) {
            return Ok(i.clone());
        }
        Self::lift(cat.inode(self.id, ino))?
            .ok_or_else(|| format!("the catalog has no inode {ino} (damaged catalog)"))
    }

    /// Changes inode `ino` with `f`.
    fn change(&mut self, cat: &Catalog, ino: i64, f: impl FnOnce(&mut Inode)) -> Step {
        let mut i = self.inode(cat, ino)?;
        let before = i.clone();
        f(&mut i);
        // A command that sets what is there already (the kernel sends
        // UTIMES for every directory whose entries changed) costs no row.
        if i == before && !self.dirty.contains_key(&ino) {
            return Ok(());
        }
        self.dirty.insert(ino, i);
        if self.dirty.len() >= DIRTY_CAP {
            Self::lift(self.flush_inodes(cat))?;
        }
        Ok(())
    }

    /// The directory at `path`, from the walk's cache.
    fn dir(&mut self, cat: &Catalog, path: &[u8]) -> std::result::Result<i64, String> {
        if path.is_empty() {
            return Ok(self.root);
        }
        if let Some(&d) = self.dirs.get(path) {
            return Ok(d);
        }
        let (parent, name) = split(path);
        let p = self.dir(cat, parent)?;
        let d = Self::lift(cat.lookup(self.id, p, name))?
            .ok_or_else(|| format!("no directory '{}'", btrfs_text::escape::escape(path)))?;
        if self.dirs.len() >= DIRTY_CAP {
            self.dirs.clear();
        }
        self.dirs.insert(path.to_vec(), d);
        Ok(d)
    }

    /// The directory holding `path`, its last name, and what that names.
    fn locate<'p>(
        &mut self,
        cat: &Catalog,
        path: &'p [u8],
    ) -> std::result::Result<(i64, &'p [u8], Option<i64>), String> {
        if path.is_empty() {
            return Ok((self.root, path, Some(self.root)));
        }
        let (parent, name) = split(path);
        let dir = self.dir(cat, parent)?;
        let ino = Self::lift(cat.lookup(self.id, dir, name))?;
        Ok((dir, name, ino))
    }

    /// The inode `path` names; an error if none.
    fn existing(&mut self, cat: &Catalog, path: &[u8]) -> std::result::Result<i64, String> {
        self.locate(cat, path)?
            .2
            .ok_or_else(|| format!("no such path '{}'", btrfs_text::escape::escape(path)))
    }

    fn set_entry(&mut self, cat: &Catalog, dir: i64, name: &[u8], ino: Option<i64>) -> Step {
        match ino {
            Some(_) if !valid_name(name) => {
                return Err(format!(
                    "invalid name '{}' (empty, . or ..)",
                    btrfs_text::escape::escape(name)
                ))
            }
            Some(i) => {
                let mut st = Self::sql(
                    cat,
                    cat.conn.prepare_cached(
                        "INSERT OR REPLACE INTO entry(dir, name, snap, ino) VALUES(?1, ?2, ?3, ?4)",
                    ),
                )?;
                Self::sql(cat, st.execute(params![dir, name, self.id, i]))?;
                self.rows += 1;
            }
            None => {
                let mut del = Self::sql(
                    cat,
                    cat.conn.prepare_cached(
                        "DELETE FROM entry WHERE dir = ?1 AND name = ?2 AND snap = ?3",
                    ),
                )?;
                Self::sql(cat, del.execute(params![dir, name, self.id]))?;
                // A tombstone only where an older night has the name.
                if Self::lift(cat.lookup(self.id, dir, name))?.is_some() {
                    let mut st = Self::sql(
                        cat,
                        cat.conn.prepare_cached(
                            "INSERT INTO entry(dir, name, snap, ino) VALUES(?1, ?2, ?3, NULL)",
                        ),
                    )?;
                    Self::sql(cat, st.execute(params![dir, name, self.id]))?;
                    self.rows += 1;
                }
            }
        }
        Ok(())
    }

    fn set_xattr(&mut self, cat: &Catalog, ino: i64, name: &[u8], value: Option<&[u8]>) -> Step {
        let mut del = Self::sql(
            cat,
            cat.conn
                .prepare_cached("DELETE FROM xattr WHERE ino = ?1 AND name = ?2 AND snap = ?3"),
        )?;
        Self::sql(cat, del.execute(params![ino, name, self.id]))?;
        let older = {
            let all = Self::lift(cat.xattrs(self.id, ino))?;
            all.iter().any(|(n, _)| n == name)
        };
        if value.is_some() || older {
            let mut st = Self::sql(
                cat,
                cat.conn.prepare_cached(
                    "INSERT INTO xattr(ino, name, snap, value) VALUES(?1, ?2, ?3, ?4)",
                ),
            )?;
            Self::sql(cat, st.execute(params![ino, name, self.id, value]))?;
            self.rows += 1;
        }
        Ok(())
    }

    fn extent_row(&mut self, cat: &Catalog, ino: i64, p: Piece) -> Step {
        let mut st = Self::sql(
            cat,
            cat.conn.prepare_cached(
                "INSERT INTO extent(ino, snap, seq, offset, len, kind, file, cmd_start, cmd_end, src) \
                 VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            ),
        )?;
        let data = p.kind != KIND_HOLE;
        let len = p.end.saturating_sub(p.start).min(i64::MAX as u64);
        Self::sql(
            cat,
            st.execute(params![
                ino,
                self.id,
                self.seq,
                p.start as i64,
                len as i64,
                p.kind,
                data.then_some(p.file),
                data.then_some(p.cmd_start as i64),
                data.then_some(p.cmd_end as i64),
                data.then_some(p.src as i64),
            ]),
        )?;
        self.seq += 1;
        self.rows += 1;
        Ok(())
    }

    fn hole(&mut self, cat: &Catalog, ino: i64, start: u64, end: u64) -> Step {
        if start >= end {
            return Ok(());
        }
        self.flush_run_of(cat, ino)?;
        self.extent_row(
            cat,
            ino,
            Piece {
                start,
                end,
                kind: KIND_HOLE,
                file: 0,
                cmd_start: 0,
                cmd_end: 0,
                src: 0,
            },
        )
    }

    fn flush_run(&mut self, cat: &Catalog) -> Step {
        if let Some(r) = self.run.take() {
            self.extent_row(
                cat,
                r.ino,
                Piece {
                    start: r.start,
                    end: r.end,
                    kind: r.kind,
                    file: self.file_id,
                    cmd_start: r.cmd_start,
                    cmd_end: r.cmd_end,
                    src: r.start,
                },
            )?;
        }
        Ok(())
    }

    fn flush_run_of(&mut self, cat: &Catalog, ino: i64) -> Step {
        if self.run.is_some_and(|r| r.ino == ino) {
            self.flush_run(cat)?;
        }
        Ok(())
    }

    /// Records data written at `[start, end)` of `ino` by the command at `pos`.
    fn data(
        &mut self,
        cat: &Catalog,
        ino: i64,
        start: u64,
        end: u64,
        pos: Position,
        kind: i64,
    ) -> Step {
        self.data_bytes += end - start;
        if start == end {
            return Ok(());
        }
        let cmd_end = pos.offset + pos.len;
        match &mut self.run {
            Some(r)
                if r.ino == ino
                    && r.end == start
                    && r.cmd_end == pos.offset
                    && r.end - r.start + (end - start) <= RUN_CAP =>
            {
                r.end = end;
                r.cmd_end = cmd_end;
                r.kind = r.kind.max(kind);
            }
            _ => {
                self.flush_run(cat)?;
                self.run = Some(Run {
                    ino,
                    start,
                    end,
                    cmd_start: pos.offset,
                    cmd_end,
                    kind,
                });
            }
        }
        self.change(cat, ino, |i| i.size = i.size.max(end))
    }

    fn create(&mut self, cat: &Catalog, path: &[u8], inode: Inode, next_ino: &mut i64) -> Step {
        let (dir, name, old) = self.locate(cat, path)?;
        if old.is_some() {
            return Err(format!(
                "'{}' exists already",
                btrfs_text::escape::escape(path)
            ));
        }
        let ino = *next_ino;
        *next_ino += 1;
        self.dirty.insert(ino, inode);
        self.set_entry(cat, dir, name, Some(ino))
    }

    /// Drops one name of `ino`.
    fn unlinked(&mut self, cat: &Catalog, ino: i64) -> Step {
        self.change(cat, ino, |i| {
            if !i.is_dir() {
                i.nlink = i.nlink.saturating_sub(1)
            }
        })
    }

    fn apply(
        &mut self,
        cat: &Catalog,
        cmd: &Command<'_>,
        pos: Position,
        next_ino: &mut i64,
    ) -> Step {
        let new = |mode: u32| Inode {
            mode,
            nlink: 1,
            ..Inode::default()
        };
        match *cmd {
            Command::Mkfile { path, .. } => self.create(cat, path, new(libc::S_IFREG | 0o600), next_ino),
            Command::Mkdir { path, .. } => self.create(cat, path, new(libc::S_IFDIR | 0o700), next_ino),
            Command::Mknod { path, rdev, mode, .. } => {
                let mut i = new(mode as u32);
                i.rdev = rdev;
                self.create(cat, path, i, next_ino)
            }
            Command::Mkfifo { path, mode, .. } => self.create(
                cat,
                path,
                new(mode.map_or(libc::S_IFIFO | 0o600, |m| m as u32)),
                next_ino,
            ),
            Command::Mksock { path, mode, .. } => self.create(
                cat,
                path,
                new(mode.map_or(libc::S_IFSOCK | 0o600, |m| m as u32)),
                next_ino,
            ),
            Command::Symlink { path, target, .. } => {
                let mut i = new(libc::S_IFLNK | 0o777);
                i.size = target.len() as u64;
                i.target = Some(target.to_vec());
                self.create(cat, path, i, next_ino)
            }
            Command::Rename { from, to } => {
                let (fdir, fname, ino) = self.locate(cat, from)?;
                let ino = ino.ok_or_else(|| format!("no such path '{}'", btrfs_text::escape::escape(from)))?;
                let (tdir, tname, old) = self.locate(cat, to)?;
                if old == Some(ino) {
                    return Ok(());
                }
                if let Some(o) = old {
                    self.unlinked(cat, o)?;
                }
                self.set_entry(cat, fdir, fname, None)?;
                self.set_entry(cat, tdir, tname, Some(ino))?;
                if self.inode(cat, ino)?.is_dir() || old.is_some() {
                    self.dirs.clear();
                }
                Ok(())
            }
            Command::Link { path, target } => {
                let ino = self.existing(cat, target)?;
                let (dir, name, old) = self.locate(cat, path)?;
                if old.is_some() {
                    return Err(format!("'{}' exists already", btrfs_text::escape::escape(path)));
                }
                self.set_entry(cat, dir, name, Some(ino))?;
                self.change(cat, ino, |i| i.nlink += 1)
            }
            Command::Unlink { path } | Command::Rmdir { path } => {
                let (dir, name, ino) = self.locate(cat, path)?;
                let ino = ino.ok_or_else(|| format!("no such path '{}'", btrfs_text::escape::escape(path)))?;
                self.set_entry(cat, dir, name, None)?;
                if matches!(cmd, Command::Rmdir { .. }) {
                    self.dirs.clear();
                }
                self.unlinked(cat, ino)
            }
            Command::SetXattr { path, name, data } => {
                let ino = self.existing(cat, path)?;
                self.set_xattr(cat, ino, name, Some(data))
            }
            Command::RemoveXattr { path, name } => {
                let ino = self.existing(cat, path)?;
                self.set_xattr(cat, ino, name, None)
            }
            Command::Write { path, offset, data } => {
                let ino = self.existing(cat, path)?;
                let end = offset
                    .checked_add(data.len() as u64)
                    .ok_or("write past the largest file offset")?;
                self.data(cat, ino, offset, end, pos, KIND_WRITE)
            }
            Command::EncodedWrite {
                path,
                offset,
                unencoded_file_len,
                ..
            } => {
                let ino = self.existing(cat, path)?;
                let end = offset
                    .checked_add(unencoded_file_len)
                    .ok_or("encoded write past the largest file offset")?;
                self.data(cat, ino, offset, end, pos, KIND_ENCODED)
            }
            Command::Clone {
                offset,
                len,
                path,
                clone_uuid,
                clone_ctransid,
                clone_path,
                clone_offset,
            } => self.clone_range(cat, offset, len, path, clone_uuid, clone_ctransid, clone_path, clone_offset),
            Command::Truncate { path, size } => {
                let ino = self.existing(cat, path)?;
                let old = self.inode(cat, ino)?.size;
                if size < old {
                    self.hole(cat, ino, size, i64::MAX as u64)?;
                }
                self.change(cat, ino, |i| i.size = size)
            }
            Command::Chmod { path, mode } => {
                let ino = self.existing(cat, path)?;
                self.change(cat, ino, |i| {
                    i.mode = (i.mode & libc::S_IFMT) | (mode as u32 & 0o7777)
                })
            }
            Command::Chown { path, uid, gid } => {
                let ino = self.existing(cat, path)?;
                self.change(cat, ino, |i| {
                    i.uid = uid;
                    i.gid = gid;
                })
            }
            Command::Utimes {
                path,
                atime,
                mtime,
                ctime,
                ..
            } => {
                let ino = self.existing(cat, path)?;
                let t = |t: btrfs_stream::Timespec| Time {
                    sec: t.sec,
                    nsec: t.nsec,
                };
                self.change(cat, ino, |i| {
                    i.atime = t(atime);
                    i.mtime = t(mtime);
                    i.ctime = t(ctime);
                })
            }
            Command::Fallocate {
                path,
                mode,
                offset,
                len,
            } => {
                let ino = self.existing(cat, path)?;
                let end = offset.saturating_add(len);
                let keep = mode & libc::FALLOC_FL_KEEP_SIZE as u32 != 0;
                let punch = mode & libc::FALLOC_FL_PUNCH_HOLE as u32 != 0;
                let zero = mode & libc::FALLOC_FL_ZERO_RANGE as u32 != 0;
                if punch || zero {
                    let size = self.inode(cat, ino)?.size;
                    let upto = if keep { end.min(size) } else { end };
                    self.hole(cat, ino, offset, upto)?;
                }
                if !keep {
                    self.change(cat, ino, |i| i.size = i.size.max(end))?;
                }
                Ok(())
            }
            Command::Fileattr { path, attr } => {
                let ino = self.existing(cat, path)?;
                self.change(cat, ino, |i| i.fileattr = attr)
            }
            Command::UpdateExtent { .. } => Err(
                "the stream carries no file data (sent with --no-data): it cannot be cataloged for restore"
                    .into(),
            ),
            Command::EnableVerity { .. } => Ok(()),
            Command::Subvol { .. } | Command::Snapshot { .. } | Command::Resume { .. } => Err(format!(
                "{} inside a stream (before its END)",
                cmd.kind().name()
            )),
            Command::End {} => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn clone_range(
        &mut self,
        cat: &Catalog,
        offset: u64,
        len: u64,
        path: &[u8],
        clone_uuid: Uuid,
        clone_ctransid: u64,
        clone_path: &[u8],
        clone_offset: u64,
    ) -> Step {
        let ino = self.existing(cat, path)?;
        let end = offset
            .checked_add(len)
            .ok_or("clone past the largest file offset")?;
        let src_end = clone_offset
            .checked_add(len)
            .ok_or("clone source past the largest file offset")?;
        self.flush_run(cat)?;
        let (src_snap, src_ino, src_size) = if clone_uuid.as_bytes() == &self.uuid {
            let s = self.existing(cat, clone_path)?;
            (self.id, s, self.inode(cat, s)?.size)
        } else {
            let snap = Self::lift(cat.by_uuid(clone_uuid.as_bytes(), Some(clone_ctransid)))?
                .or(Self::lift(cat.by_uuid(clone_uuid.as_bytes(), None))?)
                .ok_or_else(|| {
                    format!(
                        "clone source subvolume {} (ctransid {clone_ctransid}) is not in the catalog",
                        uuid_text(clone_uuid.as_bytes())
                    )
                })?;
            let s = Self::lift(cat.resolve(&snap, clone_path))?.ok_or_else(|| {
                format!(
                    "clone source '{}' is not in {} in the catalog",
                    btrfs_text::escape::escape(clone_path),
                    snap.label()
                )
            })?;
            let size = Self::lift(cat.inode(snap.id, s))?
                .ok_or("clone source inode missing from the catalog")?
                .size;
            (snap.id, s, size)
        };
        let layout = Self::lift(cat.layout(src_snap, src_ino, src_size))?;
        let pieces: Vec<Piece> = layout.range(clone_offset, src_end).collect();
        self.hole(cat, ino, offset, end)?;
        for p in pieces {
            let kind = if p.kind == KIND_ENCODED || p.kind == KIND_CLONED_ENCODED {
                KIND_CLONED_ENCODED
            } else {
                KIND_CLONED_WRITE
            };
            self.extent_row(
                cat,
                ino,
                Piece {
                    start: offset + (p.start - clone_offset),
                    end: offset + (p.end - clone_offset),
                    kind,
                    ..p
                },
            )?;
        }
        self.change(cat, ino, |i| i.size = i.size.max(end))
    }
}

/// Whether `name` can be a directory entry: not empty, `.` or `..` (a
/// name cannot hold '/': paths are split at it).
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !matches!(name, b"" | b"." | b"..")
}

/// `path` split at its last '/': the parent (empty for the root) and name.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    }
}

/// The nights of the stream file at `path` when it was cataloged before
/// under that path with its size now; an error when its size changed;
/// `None` when it is not in the catalog.
pub fn cataloged(cat: &Catalog, path: &Path) -> Result<Option<Vec<Added>>> {
    use std::os::unix::ffi::OsStrExt;
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    let abs = std::path::absolute(path).map_err(io)?;
    let old: Option<(i64, i64)> = cat
        .conn
        .query_row(
            "SELECT id, size FROM stream_file WHERE path = ?1",
            [abs.as_os_str().as_bytes()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok();
    let Some((id, old_size)) = old else {
        return Ok(None);
    };
    let nights: Vec<Snapshot> = cat
        .snapshots()?
        .into_iter()
        .filter(|s| s.file_id == id)
        .collect();
    if nights.is_empty() {
        return Ok(None);
    }
    if old_size as u64 != size {
        return Err(Error::Refused {
            path: path.to_owned(),
            what: format!(
                "this stream file was cataloged with {old_size} bytes and has {size} now: \
                 a changed file must get a new name"
            ),
            command: 0,
            offset: 0,
        });
    }
    Ok(Some(
        nights
            .into_iter()
            .map(|s| Added {
                name: s.name,
                uuid: s.uuid,
                already: true,
                commands: s.commands,
                rows: 0,
            })
            .collect(),
    ))
}

/// Opens the stream file at `path` and adds it. A file cataloged before
/// under the same path and with the same size adds nothing (its nights are
/// told as already there); one whose size changed is refused.
pub fn add_file(cat: &mut Catalog, path: &Path) -> Result<Vec<Added>> {
    if let Some(nights) = cataloged(cat, path)? {
        return Ok(nights);
    }
    let f = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    cat.add(path, f)
}
