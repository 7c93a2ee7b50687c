//! The full-send walk: every item of the subvolume's fs tree in key order,
//! turned into commands in the order the kernel's send.c emits them.
//!
//! Per inode (ascending inode number), following `changed_cb` /
//! `finish_inode_if_needed` of a full send:
//!
//! 1. INODE_ITEM: nlink 0 → ignore the inode. Otherwise create it at its
//!    orphan name (MKFILE, MKDIR, MKNOD, MKFIFO, MKSOCK, SYMLINK), unless it
//!    is the root or a directory created earlier for a child.
//! 2. INODE_REF / INODE_EXTREF: record the names with their full paths.
//!    They are processed at the first later key: parents with higher
//!    numbers are created, the first name is a RENAME from the orphan name,
//!    the others LINKs to it, and every parent already sent gets its
//!    UTIMES queued (see [`super::utimes`]).
//! 3. XATTR_ITEM: SET_XATTR, except `security.capability` (sent after
//!    CHOWN, which clears it on the receiver); an empty POSIX ACL is sent as
//!    the 4-byte header, as the kernel does.
//! 4. EXTENT_DATA: holes and prealloc are skipped, anything else is cloned
//!    or written (up to i_size; in chunks of the protocol's size from the
//!    extent start), and the end of it remembered for truncate elision.
//! 5. When a key of another inode arrives (or the tree ends): TRUNCATE
//!    unless the last write or clone ended at i_size (regular files), CHOWN,
//!    CHMOD (not symlinks), `security.capability`, then UTIMES, deferred for
//!    non-empty directories.

use btrfs_stream::Uuid;

use super::clone::{CloneSearch, ExtentRef};
use super::cmd::{ts, Bytes, Cmd};
use super::path::{join, Paths};
use super::sink::{Emitter, Hangup};
use super::utimes::DirUtimes;
use btrfs_disk::data::Inode;
use btrfs_disk::error::Error;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{
    dir_entries, inode_extrefs, inode_refs, key_type, objectid, Compression, ExtentKind,
    FileExtentItem, InodeItem,
};
use btrfs_disk::tree::Item;
use btrfs_disk::{Key, Tree};

/// FREE_INO_OBJECTID and FREE_SPACE_OBJECTID (the old inode cache): not files.
const FREE_INO: u64 = -12i64 as u64;
const FREE_SPACE: u64 = -11i64 as u64;

const XATTR_CAPS: &[u8] = b"security.capability";
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
/// posix_acl_xattr_header with POSIX_ACL_XATTR_VERSION (2) and no entries.
const EMPTY_ACL: [u8; 4] = [2, 0, 0, 0];

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;
const S_IFBLK: u32 = 0o060000;
const S_IFIFO: u32 = 0o010000;
const S_IFSOCK: u32 = 0o140000;

/// Why the walk stopped.
pub(crate) enum Stop {
    /// The writer is gone.
    Hangup,
    /// Reading failed.
    Read(Error),
    /// The tree is not what a snapshot can look like.
    Bad(String),
}

impl From<Hangup> for Stop {
    fn from(_: Hangup) -> Stop {
        Stop::Hangup
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Read(e)
    }
}

type Result<T> = std::result::Result<T, Stop>;

/// The kernel's new_encode_dev of a dev_t stored as major << 20 | minor.
pub(crate) fn new_encode_dev(rdev: u64) -> u64 {
    let major = (rdev >> 20) & 0xfff;
    let minor = rdev & 0xfffff;
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// A name of the current inode, recorded until the refs are processed.
struct NewRef {
    dir: u64,
    dir_gen: u64,
    name: Bytes,
    full_path: Bytes,
}

/// The inode being sent.
struct Cur {
    inode: Inode,
    ignore: bool,
    new_refs: Vec<NewRef>,
    refs_done: bool,
    /// Where it is on the receiver: its orphan name until its names are in place.
    path: Bytes,
    /// End of the last extent written or cloned (cur_inode_next_write_offset).
    next_write_offset: u64,
    caps: Option<Vec<u8>>,
}

impl Cur {
    fn kind(&self) -> u32 {
        self.inode.mode & S_IFMT
    }
}

/// What a full send needs to know about the subvolume.
pub(crate) struct Root {
    pub(crate) uuid: Uuid,
    pub(crate) ctransid: u64,
}

/// One full send of one subvolume.
pub(crate) struct FullSend<'a, 'fs> {
    fs: &'fs Filesystem,
    tree: Tree<'fs>,
    out: &'a mut Emitter,
    clones: &'a mut dyn CloneSearch,
    root: Root,
    paths: Paths<'fs>,
    utimes: DirUtimes,
    /// Inodes below this have been processed (their names are in place).
    send_progress: u64,
    cur: Option<Cur>,
    /// Bytes read per WRITE batch: a multiple of the protocol's WRITE size,
    /// so the writer's cuts fall where the kernel's do.
    read_chunk: u64,
    sectorsize: u64,
}

impl<'a, 'fs> FullSend<'a, 'fs> {
    pub(crate) fn new(
        fs: &'fs Filesystem,
        tree: Tree<'fs>,
        root: Root,
        out: &'a mut Emitter,
        clones: &'a mut dyn CloneSearch,
        write_chunk: usize,
    ) -> FullSend<'a, 'fs> {
        let write_chunk = write_chunk.max(1) as u64;
        FullSend {
            fs,
            tree,
            out,
            clones,
            root,
            paths: Paths::new(tree),
            utimes: DirUtimes::default(),
            send_progress: objectid::FIRST_FREE,
            cur: None,
            read_chunk: write_chunk * (1u64 << 20).div_ceil(write_chunk),
            sectorsize: fs.sectorsize() as u64,
        }
    }

    /// The inode being processed and its current path, for error messages.
    pub(crate) fn position(&self) -> Option<(u64, Bytes)> {
        self.cur.as_ref().map(|c| (c.inode.ino, c.path.clone()))
    }

    /// Sends everything after the SUBVOL command: the inodes, the pending
    /// directory utimes, END.
    pub(crate) fn run(&mut self) -> Result<()> {
        let mut cursor = self.tree.cursor();
        let mut next = cursor.seek_ge(&Key::new(objectid::FIRST_FREE, key_type::INODE_ITEM, 0))?;
        match &next {
            Some(i) if i.key == Key::new(objectid::FIRST_FREE, key_type::INODE_ITEM, 0) => {}
            _ => {
                return Err(Stop::Bad(
                    "the subvolume has no root directory (no INODE_ITEM for inode 256)".into(),
                ))
            }
        }
        while let Some(item) = next {
            self.item(&item)?;
            next = cursor.next_item()?;
        }
        self.finish_if_needed(None)?;
        for (dir, gen) in self.utimes.drain_newest_first() {
            self.send_utimes(dir, gen)?;
        }
        self.out.push(Cmd::End)?;
        self.out.flush()?;
        Ok(())
    }

    fn push(&mut self, c: Cmd) -> Result<()> {
        Ok(self.out.push(c)?)
    }

    fn cur(&mut self) -> Result<&mut Cur> {
        self.cur
            .as_mut()
            .ok_or_else(|| Stop::Bad("an item comes before any inode item".into()))
    }

    fn item(&mut self, item: &Item) -> Result<()> {
        let key = item.key;
        self.finish_if_needed(Some(key))?;
        if key.objectid == FREE_INO || key.objectid == FREE_SPACE {
            return Ok(());
        }
        if key.item_type == key_type::INODE_ITEM {
            return self.changed_inode(key, item.data());
        }
        let cur = self.cur()?;
        if cur.ignore {
            return Ok(());
        }
        let cur_ino = cur.inode.ino;
        let same = key.objectid == cur_ino;
        match key.item_type {
            key_type::INODE_REF | key_type::INODE_EXTREF | key_type::XATTR_ITEM if !same => {
                Err(Stop::Bad(format!(
                    "item {key} has no inode item (inconsistent snapshot)"
                )))
            }
            key_type::INODE_REF | key_type::INODE_EXTREF => self.record_refs(item),
            key_type::XATTR_ITEM => self.xattrs(item),
            key_type::EXTENT_DATA if same => self.extent(item),
            key_type::DIR_ITEM if same && cur_ino == objectid::FIRST_FREE => {
                let entries = dir_entries(item.data()).map_err(|reason| Error::BadItem {
                    tree: self.tree.id,
                    key,
                    reason,
                })?;
                for e in entries {
                    self.paths.note_root_entry(e.name);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The kernel's finish_inode_if_needed, called before every item
    /// (`key`) and at the end (`None`).
    fn finish_if_needed(&mut self, key: Option<Key>) -> Result<()> {
        let Some(cur) = &self.cur else {
            return Ok(());
        };
        if cur.ignore {
            return Ok(());
        }
        let ino = cur.inode.ino;
        let refs_now = match key {
            None => true,
            Some(k) => !(k.objectid == ino && k.item_type <= key_type::INODE_EXTREF),
        };
        if refs_now && !cur.refs_done {
            if cur.new_refs.is_empty() {
                if ino != objectid::FIRST_FREE {
                    return Err(Stop::Bad(format!(
                        "inode {ino} has {} links but no INODE_REF or INODE_EXTREF",
                        cur.inode.nlink
                    )));
                }
            } else {
                self.process_recorded_refs()?;
                self.send_progress = ino + 1;
            }
        }
        if key.is_none_or(|k| k.objectid != ino) {
            self.finish_inode()?;
        }
        // Like the kernel, after every call that got this far (so right
        // after the refs too, before the inode's data).
        while let Some((dir, gen)) = self.utimes.pop_over_limit() {
            self.send_utimes(dir, gen)?;
        }
        Ok(())
    }

    fn changed_inode(&mut self, key: Key, data: &[u8]) -> Result<()> {
        let ii = InodeItem::parse(data).map_err(|reason| Error::BadItem {
            tree: self.tree.id,
            key,
            reason,
        })?;
        let ino = key.objectid;
        let inode = Inode::from_item(ino, &ii);
        self.send_progress = ino;
        let ignore = inode.nlink == 0;
        let path = if ino == objectid::FIRST_FREE {
            self.paths.root_generation(inode.generation);
            Bytes::from(&b""[..])
        } else {
            self.paths.orphan_name(ino, inode.generation)
        };
        self.cur = Some(Cur {
            inode,
            ignore,
            new_refs: Vec::new(),
            refs_done: ino == objectid::FIRST_FREE,
            path: path.clone(),
            next_write_offset: 0,
            caps: None,
        });
        if ignore || ino == objectid::FIRST_FREE {
            return Ok(());
        }
        if inode.mode & S_IFMT == S_IFDIR && self.paths.was_created_early(ino) {
            return Ok(());
        }
        self.create_inode(&inode, path)
    }

    /// The kernel's send_create_inode: the inode at `path` (its orphan name).
    fn create_inode(&mut self, inode: &Inode, path: Bytes) -> Result<()> {
        let ino = inode.ino;
        let mode = u64::from(inode.mode);
        let rdev = new_encode_dev(inode.rdev);
        let c = match inode.mode & S_IFMT {
            S_IFREG => Cmd::Mkfile { path, ino },
            S_IFDIR => Cmd::Mkdir { path, ino },
            S_IFLNK => Cmd::Symlink {
                path,
                ino,
                target: self.read_symlink(inode)?,
            },
            S_IFCHR | S_IFBLK => Cmd::Mknod {
                path,
                ino,
                rdev,
                mode,
            },
            S_IFIFO => Cmd::Mkfifo {
                path,
                ino,
                rdev,
                mode,
            },
            S_IFSOCK => Cmd::Mksock {
                path,
                ino,
                rdev,
                mode,
            },
            other => {
                return Err(Stop::Bad(format!(
                    "inode {ino} has unknown file type {other:o}"
                )))
            }
        };
        self.push(c)
    }

    /// A symlink's target: its inline extent at offset 0, bounded by i_size.
    fn read_symlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        let key = Key::new(inode.ino, key_type::EXTENT_DATA, 0);
        let Some(item) = self.tree.search(&key)? else {
            return Err(Stop::Bad(format!(
                "symlink inode {} has no target (no EXTENT_DATA item)",
                inode.ino
            )));
        };
        let fe = FileExtentItem::parse(item.data()).map_err(|reason| Error::BadItem {
            tree: self.tree.id,
            key,
            reason,
        })?;
        if fe.kind() != ExtentKind::Inline {
            return Err(Stop::Bad(format!(
                "symlink inode {} has a non-inline extent",
                inode.ino
            )));
        }
        let len = fe.ram_bytes().min(inode.size).min(1 << 16) as usize;
        if fe.compression() == Compression::None {
            let d = fe.inline_data();
            return Ok(d[..len.min(d.len())].to_vec());
        }
        let mut v = vec![0u8; len];
        self.fs
            .read_extent_piece(&self.tree, inode, 0, &fe, 0, &mut v)?;
        Ok(v)
    }

    fn record_refs(&mut self, item: &Item) -> Result<()> {
        let key = item.key;
        let ino = key.objectid;
        if ino == objectid::FIRST_FREE {
            // The root's ".." reference is never sent.
            return Ok(());
        }
        let bad = |reason| Error::BadItem {
            tree: self.tree.id,
            key,
            reason,
        };
        let refs = if key.item_type == key_type::INODE_REF {
            inode_refs(key.offset, item.data()).map_err(bad)?
        } else {
            inode_extrefs(item.data()).map_err(bad)?
        };
        for r in refs {
            let dir_gen = self.paths.generation(r.parent)?;
            let dir_path = self.paths.cur_path(r.parent, self.send_progress)?;
            let full_path = join(&dir_path, r.name);
            let name = Bytes::from(r.name);
            self.cur()?.new_refs.push(NewRef {
                dir: r.parent,
                dir_gen,
                name,
                full_path,
            });
        }
        Ok(())
    }

    /// The kernel's process_recorded_refs for a new inode.
    fn process_recorded_refs(&mut self) -> Result<()> {
        let (ino, gen, is_dir, refs, mut valid) = {
            let cur = self.cur()?;
            (
                cur.inode.ino,
                cur.inode.generation,
                cur.kind() == S_IFDIR,
                std::mem::take(&mut cur.new_refs),
                cur.path.clone(),
            )
        };
        let mut orphan = true;
        for (i, r) in refs.iter().enumerate() {
            if r.dir > ino {
                // The parent comes later in inode order: make it now, at its
                // orphan name (once).
                let done =
                    refs[..i].iter().any(|o| o.dir == r.dir) || self.paths.was_created_early(r.dir);
                if !done {
                    let parent = self.fs.inode_in(&self.tree, r.dir)?;
                    let path = self.paths.orphan_name(r.dir, parent.generation);
                    self.create_inode(&parent, path)?;
                    self.paths.created_early(r.dir, parent.generation);
                }
            }
            if orphan || is_dir {
                self.push(Cmd::Rename {
                    from: valid.clone(),
                    to: r.full_path.clone(),
                })?;
                orphan = false;
                valid = r.full_path.clone();
            } else {
                self.push(Cmd::Link {
                    path: r.full_path.clone(),
                    target: valid.clone(),
                })?;
            }
        }
        for r in &refs {
            if r.dir < ino {
                self.utimes.touch(r.dir, r.dir_gen);
            }
        }
        if is_dir {
            if let Some(first) = refs.first() {
                self.paths
                    .dir_in_place(ino, gen, first.dir, first.name.clone(), valid.clone());
            }
        }
        let cur = self.cur()?;
        cur.path = valid;
        cur.refs_done = true;
        Ok(())
    }

    fn xattrs(&mut self, item: &Item) -> Result<()> {
        let entries = dir_entries(item.data()).map_err(Error::bad_item(self.tree.id, item.key))?;
        let path = self.cur()?.path.clone();
        for e in entries {
            if e.name == XATTR_CAPS {
                self.cur()?.caps = Some(e.data.to_vec());
                continue;
            }
            let data = if e.data.is_empty() && (e.name == ACL_ACCESS || e.name == ACL_DEFAULT) {
                EMPTY_ACL.to_vec()
            } else {
                e.data.to_vec()
            };
            self.push(Cmd::SetXattr {
                path: path.clone(),
                name: e.name.to_vec(),
                data,
            })?;
        }
        Ok(())
    }

    /// The kernel's process_extent + send_write_or_clone for a new inode.
    fn extent(&mut self, item: &Item) -> Result<()> {
        let (inode, kind) = {
            let cur = self.cur()?;
            (cur.inode, cur.kind())
        };
        if kind == S_IFLNK {
            return Ok(());
        }
        let key = item.key;
        let fe = FileExtentItem::parse(item.data()).map_err(|reason| Error::BadItem {
            tree: self.tree.id,
            key,
            reason,
        })?;
        match fe.kind() {
            ExtentKind::Prealloc => return Ok(()),
            ExtentKind::Regular if fe.disk_bytenr() == 0 => return Ok(()),
            _ => {}
        }
        let offset = key.offset;
        // An inline extent ends at its sector's end (btrfs_file_extent_end);
        // what it does not hold reads as zeros, as through the page cache.
        let extent_end = if fe.kind() == ExtentKind::Inline {
            offset
                .saturating_add(fe.ram_bytes())
                .div_ceil(self.sectorsize)
                .saturating_mul(self.sectorsize)
        } else {
            offset.saturating_add(fe.num_bytes())
        };
        let end = extent_end.min(inode.size);
        if offset >= end {
            return Ok(());
        }
        let path = self.cur()?.path.clone();
        let mut sent = 0u64;
        if fe.kind() != ExtentKind::Inline {
            let found = self.clones.find(&ExtentRef {
                inode: &inode,
                file_offset: offset,
                len: end - offset,
                item: &fe,
            })?;
            if let Some(src) = found.filter(|s| s.len > 0) {
                let len = src.len.min(end - offset);
                let clone_path = self.paths.cur_path(src.ino, self.send_progress)?;
                self.push(Cmd::Clone {
                    offset,
                    len,
                    path: path.clone(),
                    clone_uuid: self.root.uuid,
                    clone_ctransid: self.root.ctransid,
                    clone_path,
                    clone_offset: src.offset,
                })?;
                sent = len;
            }
        }
        while offset + sent < end {
            let n = (end - offset - sent).min(self.read_chunk);
            let mut data = self.out.buffer(n as usize);
            self.fs
                .read_extent_piece(&self.tree, &inode, offset, &fe, sent, &mut data)?;
            self.push(Cmd::Write {
                path: path.clone(),
                offset: offset + sent,
                data,
            })?;
            sent += n;
        }
        self.cur()?.next_write_offset = end;
        Ok(())
    }

    /// The end of finish_inode_if_needed: truncate, owner, mode,
    /// capabilities, times.
    fn finish_inode(&mut self) -> Result<()> {
        let (inode, kind, path, next_write, caps) = {
            let cur = self.cur()?;
            (
                cur.inode,
                cur.kind(),
                cur.path.clone(),
                cur.next_write_offset,
                cur.caps.clone(),
            )
        };
        if kind == S_IFREG && next_write != inode.size {
            self.push(Cmd::Truncate {
                path: path.clone(),
                size: inode.size,
            })?;
        }
        self.push(Cmd::Chown {
            path: path.clone(),
            uid: u64::from(inode.uid),
            gid: u64::from(inode.gid),
        })?;
        if kind != S_IFLNK {
            self.push(Cmd::Chmod {
                path: path.clone(),
                mode: u64::from(inode.mode & 0o7777),
            })?;
        }
        if let Some(data) = caps {
            self.push(Cmd::SetXattr {
                path: path.clone(),
                name: XATTR_CAPS.to_vec(),
                data,
            })?;
        }
        self.send_progress = inode.ino + 1;
        if kind == S_IFDIR && inode.size > 0 {
            self.utimes.touch(inode.ino, inode.generation);
        } else {
            self.push(Cmd::Utimes {
                path,
                atime: ts(inode.atime),
                mtime: ts(inode.mtime),
                ctime: ts(inode.ctime),
            })?;
        }
        self.out.inode_done();
        Ok(())
    }

    /// UTIMES of a directory whose turn has come, from its inode item.
    fn send_utimes(&mut self, dir: u64, _gen: u64) -> Result<()> {
        let inode = self.fs.inode_in(&self.tree, dir)?;
        let path = self.paths.cur_path(dir, self.send_progress)?;
        self.push(Cmd::Utimes {
            path,
            atime: ts(inode.atime),
            mtime: ts(inode.mtime),
            ctime: ts(inode.ctime),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdev_is_encoded_as_the_kernel_does() {
        let dev = |ma: u64, mi: u64| (ma << 20) | mi;
        assert_eq!(new_encode_dev(dev(1, 3)), 0x103);
        assert_eq!(new_encode_dev(dev(7, 200)), 0x7c8);
        assert_eq!(new_encode_dev(dev(250, 300)), 0x10fa2c);
        assert_eq!(new_encode_dev(dev(259, 70000)), 0x11110370);
    }
}
