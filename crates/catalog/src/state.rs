//! Opening a catalog and reading one night's state from it: snapshots,
//! directory entries, inodes, xattrs and a file's [`Layout`].

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Error, Result};
use crate::layout::{Layout, Piece};
use crate::schema;

/// An open catalog file.
pub struct Catalog {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

/// A time as the stream carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: u32,
}

/// An inode as of one night.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inode {
    /// st_mode, file type bits included.
    pub mode: u32,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// st_size (regular files and symlinks).
    pub size: u64,
    /// Device number (the kernel's new_encode_dev layout), devices only.
    pub rdev: u64,
    /// Names the inode has (directories: 1).
    pub nlink: u64,
    /// Access time.
    pub atime: Time,
    /// Modification time.
    pub mtime: Time,
    /// Change time (as sent; a restore cannot set it).
    pub ctime: Time,
    /// The btrfs inode flags a FILEATTR set (0 if none).
    pub fileattr: u64,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
}

impl Inode {
    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// One cataloged night: a snapshot and the stream that made it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its row id.
    pub id: i64,
    /// Its name: the last component of the stream's SUBVOL/SNAPSHOT path.
    pub name: Vec<u8>,
    /// Its uuid as the stream names it.
    pub uuid: [u8; 16],
    /// Its ctransid.
    pub ctransid: u64,
    /// The parent night, for an incremental stream.
    pub parent: Option<i64>,
    /// The stream file holding it.
    pub file: PathBuf,
    /// That file's row id.
    pub file_id: i64,
    /// Where its stream starts in the file (decompressed, for zstd).
    pub stream_offset: u64,
    /// Its stream's length.
    pub stream_len: u64,
    /// Protocol version.
    pub version: u32,
    /// Commands in the stream.
    pub commands: u64,
    /// Data bytes its WRITEs and ENCODED_WRITEs carry.
    pub data_bytes: u64,
    /// The catalog's id of its root directory.
    pub root: i64,
}

impl Snapshot {
    /// Its name, escaped as rdump escapes names.
    pub fn label(&self) -> String {
        btrfs_text::escape::escape(&self.name)
    }

    /// Its uuid in the usual text form.
    pub fn uuid_text(&self) -> String {
        uuid_text(&self.uuid)
    }
}

/// A uuid in the usual text form.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h = btrfs_text::hex::encode(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

const SNAPSHOT_COLS: &str =
    "s.id, s.name, s.uuid, s.ctransid, s.parent, f.path, s.file, s.stream_offset, \
     s.stream_len, s.version, s.commands, s.data_bytes, s.root";

fn snapshot_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Snapshot> {
    use std::os::unix::ffi::OsStringExt;
    let uuid: Vec<u8> = r.get(2)?;
    let mut u = [0u8; 16];
    if uuid.len() == 16 {
        u.copy_from_slice(&uuid);
    }
    Ok(Snapshot {
        id: r.get(0)?,
        name: r.get(1)?,
        uuid: u,
        ctransid: r.get::<_, i64>(3)? as u64,
        parent: r.get(4)?,
        file: PathBuf::from(std::ffi::OsString::from_vec(r.get(5)?)),
        file_id: r.get(6)?,
        stream_offset: r.get::<_, i64>(7)? as u64,
        stream_len: r.get::<_, i64>(8)? as u64,
        version: r.get::<_, i64>(9)? as u32,
        commands: r.get::<_, i64>(10)? as u64,
        data_bytes: r.get::<_, i64>(11)? as u64,
        root: r.get(12)?,
    })
}

fn inode_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Inode> {
    let t = |s: usize| -> rusqlite::Result<Time> {
        Ok(Time {
            sec: r.get(s)?,
            nsec: r.get::<_, i64>(s + 1)? as u32,
        })
    };
    Ok(Inode {
        mode: r.get::<_, i64>(0)? as u32,
        uid: r.get::<_, i64>(1)? as u64,
        gid: r.get::<_, i64>(2)? as u64,
        size: r.get::<_, i64>(3)? as u64,
        rdev: r.get::<_, i64>(4)? as u64,
        nlink: r.get::<_, i64>(5)? as u64,
        atime: t(6)?,
        mtime: t(8)?,
        ctime: t(10)?,
        fileattr: r.get::<_, i64>(12)? as u64,
        target: r.get(13)?,
    })
}

impl Catalog {
    /// Opens the catalog at `path`, creating an empty one if it does not
    /// exist.
    pub fn create(path: &Path) -> Result<Catalog> {
        let (cat, version) = Catalog::connect(path, rusqlite::OpenFlags::default())?;
        if version > schema::VERSION {
            return Err(cat.too_new(version));
        }
        cat.db(cat.conn.execute_batch(schema::CREATE))?;
        cat.db(cat
            .conn
            .execute_batch(&format!("PRAGMA user_version = {}", schema::VERSION)))?;
        Ok(cat)
    }

    /// Opens an existing catalog.
    pub fn open(path: &Path) -> Result<Catalog> {
        if !path.exists() {
            return Err(Error::NotFound(format!(
                "catalog {}: no such file (rreceive --catalog DB -f FILE makes one)",
                path.display()
            )));
        }
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let (cat, version) = Catalog::connect(path, flags)?;
        if version != schema::VERSION {
            return Err(cat.too_new(version));
        }
        Ok(cat)
    }

    /// Opens the SQLite file; with its schema version.
    fn connect(path: &Path, flags: rusqlite::OpenFlags) -> Result<(Catalog, i64)> {
        let conn = Connection::open_with_flags(path, flags).map_err(|source| Error::Db {
            path: path.to_owned(),
            source,
        })?;
        let cat = Catalog {
            conn,
            path: path.to_owned(),
        };
        cat.tune()?;
        let version: i64 = cat.db(cat.conn.query_row("PRAGMA user_version", [], |r| r.get(0)))?;
        Ok((cat, version))
    }

    fn too_new(&self, found: i64) -> Error {
        Error::Version {
            path: self.path.clone(),
            found,
            known: schema::VERSION,
        }
    }

    fn tune(&self) -> Result<()> {
        // A second job adding a night at the same time waits for the first.
        self.db(self.conn.busy_timeout(std::time::Duration::from_secs(600)))?;
        self.db(self
            .conn
            .execute_batch("PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY;"))
    }

    /// The catalog file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wraps SQLite's error with the catalog's name.
    pub(crate) fn db<T>(&self, r: rusqlite::Result<T>) -> Result<T> {
        r.map_err(|source| Error::Db {
            path: self.path.clone(),
            source,
        })
    }

    /// Every night, oldest first.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>> {
        let mut st = self.db(self.conn.prepare_cached(&format!(
            "SELECT {SNAPSHOT_COLS} FROM snapshot s JOIN stream_file f ON f.id = s.file ORDER BY s.id"
        )))?;
        let rows = self.db(st.query_map([], snapshot_row))?;
        self.db(rows.collect())
    }

    /// The night with row id `id`.
    pub fn snapshot(&self, id: i64) -> Result<Snapshot> {
        let mut st = self.db(self.conn.prepare_cached(&format!(
            "SELECT {SNAPSHOT_COLS} FROM snapshot s JOIN stream_file f ON f.id = s.file WHERE s.id = ?1"
        )))?;
        self.db(st.query_row([id], snapshot_row))
    }

    /// The night with this uuid and ctransid, if cataloged.
    pub fn by_uuid(&self, uuid: &[u8; 16], ctransid: Option<u64>) -> Result<Option<Snapshot>> {
        let mut st = self.db(self.conn.prepare_cached(&format!(
            "SELECT {SNAPSHOT_COLS} FROM snapshot s JOIN stream_file f ON f.id = s.file \
             WHERE s.uuid = ?1 AND (?2 IS NULL OR s.ctransid = ?2) ORDER BY s.id DESC LIMIT 1"
        )))?;
        self.db(st
            .query_row(params![&uuid[..], ctransid.map(|c| c as i64)], snapshot_row)
            .optional())
    }

    /// The night a user names: by name (the last component of its stream's
    /// path) or by uuid.
    pub fn find_snapshot(&self, name: &[u8]) -> Result<Snapshot> {
        let all = self.snapshots()?;
        let by_name: Vec<&Snapshot> = all.iter().filter(|s| s.name == name).collect();
        match by_name.as_slice() {
            [one] => return Ok((*one).clone()),
            [] => {}
            many => {
                let uuids: Vec<String> = many.iter().map(|s| s.uuid_text()).collect();
                return Err(Error::NotFound(format!(
                    "{} names {} snapshots in the catalog; name one by uuid: {}",
                    btrfs_text::escape::escape(name),
                    many.len(),
                    uuids.join(", ")
                )));
            }
        }
        let text = String::from_utf8_lossy(name).to_ascii_lowercase();
        if let Some(s) = all.iter().find(|s| s.uuid_text() == text) {
            return Ok(s.clone());
        }
        let known: Vec<String> = all.iter().map(Snapshot::label).collect();
        Err(Error::NotFound(format!(
            "no snapshot {} in catalog {} (it has: {})",
            btrfs_text::escape::escape(name),
            self.path.display(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(" ")
            }
        )))
    }

    /// The inode `ino` as of night `snap`.
    pub fn inode(&self, snap: i64, ino: i64) -> Result<Option<Inode>> {
        let mut st = self.db(self.conn.prepare_cached(
            "SELECT i.mode, i.uid, i.gid, i.size, i.rdev, i.nlink, i.atime, i.atime_ns, i.mtime, \
             i.mtime_ns, i.ctime, i.ctime_ns, i.fileattr, i.target \
             FROM inode i CROSS JOIN ancestry a \
             WHERE i.id = ?1 AND a.snap = ?2 AND a.ancestor = i.snap ORDER BY a.depth LIMIT 1",
        ))?;
        self.db(st.query_row(params![ino, snap], inode_row).optional())
    }

    /// The inode `name` in directory `dir` names as of night `snap`.
    pub fn lookup(&self, snap: i64, dir: i64, name: &[u8]) -> Result<Option<i64>> {
        let mut st = self.db(self.conn.prepare_cached(
            "SELECT e.ino FROM entry e CROSS JOIN ancestry a \
             WHERE e.dir = ?1 AND e.name = ?2 AND a.snap = ?3 AND a.ancestor = e.snap \
             ORDER BY a.depth LIMIT 1",
        ))?;
        let found: Option<Option<i64>> = self.db(st
            .query_row(params![dir, name, snap], |r| r.get(0))
            .optional())?;
        Ok(found.flatten())
    }

    /// Directory `dir`'s entries as of night `snap`, by name.
    pub fn list(&self, snap: i64, dir: i64) -> Result<Vec<(Vec<u8>, i64)>> {
        let mut st = self.db(self.conn.prepare_cached(
            "SELECT e.name, e.ino FROM entry e CROSS JOIN ancestry a \
             WHERE e.dir = ?1 AND a.snap = ?2 AND a.ancestor = e.snap ORDER BY e.name, a.depth",
        ))?;
        let rows = self.db(st.query(params![dir, snap]))?;
        let named: Vec<(Vec<u8>, Option<i64>)> = self.nearest_by_name(rows)?;
        Ok(named
            .into_iter()
            .filter_map(|(n, ino)| ino.map(|i| (n, i)))
            .collect())
    }

    /// Rows of (name, value or NULL) ordered by name and then depth: the
    /// nearest night's row of each name.
    fn nearest_by_name<T: rusqlite::types::FromSql>(
        &self,
        mut rows: rusqlite::Rows<'_>,
    ) -> Result<Vec<(Vec<u8>, Option<T>)>> {
        let mut out = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        while let Some(r) = self.db(rows.next())? {
            let name: Vec<u8> = self.db(r.get(0))?;
            if last.as_deref() == Some(&name[..]) {
                continue;
            }
            out.push((name.clone(), self.db(r.get(1))?));
            last = Some(name);
        }
        Ok(out)
    }

    /// The inode at `path` (relative to the snapshot root; empty for the
    /// root) as of night `snap`.
    pub fn resolve(&self, snap: &Snapshot, path: &[u8]) -> Result<Option<i64>> {
        let mut ino = snap.root;
        for part in path
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty() && *p != b".")
        {
            match self.lookup(snap.id, ino, part)? {
                Some(i) => ino = i,
                None => return Ok(None),
            }
        }
        Ok(Some(ino))
    }

    /// Inode `ino`'s xattrs as of night `snap`, by name.
    pub fn xattrs(&self, snap: i64, ino: i64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut st = self.db(self.conn.prepare_cached(
            "SELECT x.name, x.value FROM xattr x CROSS JOIN ancestry a \
             WHERE x.ino = ?1 AND a.snap = ?2 AND a.ancestor = x.snap ORDER BY x.name, a.depth",
        ))?;
        let rows = self.db(st.query(params![ino, snap]))?;
        let named: Vec<(Vec<u8>, Option<Vec<u8>>)> = self.nearest_by_name(rows)?;
        Ok(named
            .into_iter()
            .filter_map(|(n, v)| v.map(|v| (n, v)))
            .collect())
    }

    /// Where inode `ino`'s data lies as of night `snap`, up to `size`.
    pub fn layout(&self, snap: i64, ino: i64, size: u64) -> Result<Layout> {
        let mut st = self.db(self.conn.prepare_cached(
            "SELECT e.offset, e.len, e.kind, e.file, e.cmd_start, e.cmd_end, e.src \
             FROM extent e CROSS JOIN ancestry a \
             WHERE e.ino = ?1 AND a.snap = ?2 AND a.ancestor = e.snap ORDER BY a.depth DESC, e.seq",
        ))?;
        let mut rows = self.db(st.query(params![ino, snap]))?;
        let mut layout = Layout::new();
        while let Some(r) = self.db(rows.next())? {
            let start = self.db(r.get::<_, i64>(0))? as u64;
            let len = self.db(r.get::<_, i64>(1))? as u64;
            let opt = |i: usize| -> Result<u64> {
                Ok(self.db(r.get::<_, Option<i64>>(i))?.unwrap_or(0) as u64)
            };
            layout.lay(Piece {
                start,
                end: start.saturating_add(len),
                kind: self.db(r.get(2))?,
                file: self.db(r.get::<_, Option<i64>>(3))?.unwrap_or(0),
                cmd_start: opt(4)?,
                cmd_end: opt(5)?,
                src: opt(6)?,
            });
        }
        layout.cut(size, u64::MAX);
        Ok(layout)
    }

    /// The path of stream file `id` and the size and compression it had
    /// when cataloged.
    pub fn stream_file(&self, id: i64) -> Result<(PathBuf, u64, bool)> {
        use std::os::unix::ffi::OsStringExt;
        let mut st = self.db(self
            .conn
            .prepare_cached("SELECT path, size, compressed FROM stream_file WHERE id = ?1"))?;
        self.db(st.query_row([id], |r| {
            Ok((
                PathBuf::from(std::ffi::OsString::from_vec(r.get(0)?)),
                r.get::<_, i64>(1)? as u64,
                r.get::<_, i64>(2)? != 0,
            ))
        }))
    }
}
