//! The send walk: changes between the parent and the send snapshot, turned
//! into commands in the order the kernel's send.c emits them. Mirrors
//! send.c's send_ctx (as [`Walk`], which owns the parts: [`super::names`],
//! [`super::moves`], [`super::current`]), changed_cb, changed_inode,
//! finish_inode_if_needed, send_create_inode, process_verity and
//! send_utimes.
//!
//! A full send is the case without a parent, where every item of the send
//! snapshot is new. An incremental send consumes the output of
//! [`compare_trees`]: per item new, deleted, changed (or same, which
//! matters for references into re-created directories and for holes). In
//! both, items arrive in key order, so inodes are processed in ascending
//! number:
//!
//! 1. INODE_ITEM ([`Walk::changed_inode`]): new → created at its orphan
//!    name; deleted → its names are removed; changed with another
//!    generation (the number was reused) → the old one is deleted and the
//!    new one created with everything it holds.
//! 2. INODE_REF / INODE_EXTREF: names gained and lost are recorded and
//!    processed at the first later key ([`super::refs`]): renames, links,
//!    unlinks, orphanizing, delayed directory moves, rmdir.
//! 3. XATTR_ITEM: set, changed and removed xattrs ([`super::xattr`]).
//! 4. EXTENT_DATA: data of new and changed extents, holes ([`super::extent`]).
//! 5. When a key of another inode arrives: TRUNCATE if needed, CHOWN and
//!    CHMOD when they differ, `security.capability`, pending moves of
//!    directories that waited for this one, then UTIMES (deferred for
//!    non-empty directories, see [`super::utimes`]).

use super::clone::Clones;
use super::cmd::{ts, Bytes, Cmd};
use super::current::{Cur, Recorded};
use super::flavor::Flavor;
use super::mode::{
    new_encode_dev, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};
use super::moves::Moves;
use super::names::Names;
use super::sink::Emitter;
use super::stop::{Result, Stop};
use super::utimes::DirUtimes;
use crate::bookmark::Reuse;
use btrfs_disk::data::Inode;
use btrfs_disk::diff::{compare_trees, Change, Side};
use btrfs_disk::error::Error;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{
    dir_entries, key_type, objectid, Compression, ExtentKind, FileExtentItem, InodeItem,
};
use btrfs_disk::lookup::{item_refs, InodeInfo, Lookup};
use btrfs_disk::tree::Item;
use btrfs_disk::{Key, Tree};

/// FREE_INO_OBJECTID and FREE_SPACE_OBJECTID (the old inode cache): not files.
const FREE_INO: u64 = -12i64 as u64;
const FREE_SPACE: u64 = -11i64 as u64;

/// One send of one subvolume, full or incremental.
pub(super) struct Walk<'a, 'fs> {
    pub(super) fs: &'fs Filesystem,
    pub(super) send: Lookup<'fs>,
    pub(super) parent: Option<Lookup<'fs>>,
    pub(super) out: &'a mut Emitter,
    pub(super) clones: Clones<'fs>,
    utimes: DirUtimes,
    /// Inodes below this have their names in place.
    pub(super) send_progress: u64,
    pub(super) cur: Cur,
    pub(super) recorded: Recorded,
    pub(super) names: Names,
    pub(super) moves: Moves,
    /// Bytes read per WRITE batch: a multiple of the protocol's WRITE size,
    /// so the writer's cuts fall where the kernel's do, of about 1 MiB.
    /// With few buffers in flight (see `sink`) they stay in the CPU's
    /// caches; reads of 256 KiB made four times the hand-overs between the
    /// threads, and the large-file send about 12 % slower.
    pub(super) read_chunk: u64,
    pub(super) write_size: u64,
    /// The stream's protocol version and flags.
    pub(super) flavor: Flavor,
    pub(super) sectorsize: u64,
    /// What a rescue send leaves out (`None` unless the filesystem is read
    /// for a rescue).
    pub(super) salvage: Option<super::salvage::Salvage>,
    /// Whether the root directory changed after its last UTIMES.
    root_dirty: bool,
    /// With a bookmark as the parent: what may have been reused since it
    /// was written (an equal file extent item proves nothing alone).
    pub(super) reuse: Option<Reuse<'fs>>,
}

impl<'a, 'fs> Walk<'a, 'fs> {
    /// A walk of `send` (against `parent` for an incremental send) that
    /// gives its commands to `out`.
    pub(super) fn new(
        fs: &'fs Filesystem,
        send: Tree<'fs>,
        parent: Option<Tree<'fs>>,
        out: &'a mut Emitter,
        clones: Clones<'fs>,
        flavor: Flavor,
    ) -> Walk<'a, 'fs> {
        let write_chunk = flavor.write_size().max(1) as u64;
        let full = parent.is_none();
        Walk {
            fs,
            send: Lookup::new(send),
            parent: parent.map(Lookup::new),
            out,
            clones,
            utimes: DirUtimes::default(),
            send_progress: objectid::FIRST_FREE,
            cur: Cur::default(),
            recorded: Recorded::default(),
            names: Names::new(full),
            moves: Moves::default(),
            read_chunk: write_chunk * (1u64 << 20).div_ceil(write_chunk),
            write_size: write_chunk,
            flavor,
            sectorsize: fs.sectorsize() as u64,
            salvage: fs.rescue().map(|_| super::salvage::Salvage::default()),
            root_dirty: false,
            reuse: None,
        }
    }

    /// The inode being processed and its last known path, for error messages.
    pub(super) fn position(&self) -> Option<(u64, Bytes)> {
        (self.cur.ino != 0).then(|| {
            (
                self.cur.ino,
                self.cur
                    .path
                    .clone()
                    .unwrap_or_else(|| Bytes::from(&b"?"[..])),
            )
        })
    }

    /// Sends everything after the SUBVOL or SNAPSHOT command: the changed
    /// inodes, the pending directory times, END.
    pub(super) fn run(&mut self) -> Result<()> {
        let first = Key::new(objectid::FIRST_FREE, key_type::INODE_ITEM, 0);
        if self.send.tree.search(&first)?.is_none() && !self.salvage_root_lost() {
            return Err(Stop::Bad(
                "the subvolume has no root directory (no INODE_ITEM for inode 256)".into(),
            ));
        }
        match self.parent.as_ref().map(|p| p.tree) {
            None => {
                let mut cursor = self.send.tree.cursor();
                let mut next = cursor.seek_ge(&first)?;
                while let Some(item) = next {
                    let side = Side {
                        item: &item,
                        slot: 1,
                    };
                    self.changed(item.key, Change::New, Some(side), None)?;
                    next = cursor.next_item()?;
                }
            }
            Some(parent) => {
                let send = self.send.tree;
                compare_trees(send, parent, |key, change, l, r| {
                    self.changed(key, change, l, r)
                })?;
            }
        }
        self.finish_if_needed(None)?;
        if let Some(dir) = self.moves.first_waiting() {
            return Err(Stop::Bad(format!(
                "directory inode {dir} still waits for its move at the end of the send"
            )));
        }
        for (dir, gen) in self.utimes.drain_newest_first() {
            self.send_utimes(dir, gen)?;
        }
        self.root_times_if_needed()?;
        Ok(())
    }

    /// Ends the stream (after [`Walk::run`], once the subvolumes read are
    /// known to be intact).
    pub(super) fn end(&mut self) -> Result<()> {
        self.out.push(Cmd::End)?;
        self.out.flush()?;
        Ok(())
    }

    pub(super) fn push(&mut self, c: Cmd) -> Result<()> {
        if !self.root_dirty && changes_root_entries(&c) {
            self.root_dirty = true;
        }
        self.names.sending(&c);
        Ok(self.out.push(c)?)
    }

    /// The kernel's changed_cb.
    fn changed(
        &mut self,
        key: Key,
        mut change: Change,
        left: Option<Side<'_>>,
        right: Option<Side<'_>>,
    ) -> Result<()> {
        if self.salvage_skips(key)? {
            // A rescue: items whose inode item was lost go nowhere; the
            // inode before them still finishes.
            self.finish_if_needed(Some(key))?;
            self.start(key.objectid);
            self.cur.ignore = true;
            return Ok(());
        }
        if change == Change::Same {
            match key.item_type {
                key_type::INODE_REF | key_type::INODE_EXTREF => {
                    let Some(l) = &left else { return Ok(()) };
                    if !self.refs_dir_changed(l.item)? {
                        return Ok(());
                    }
                    change = Change::Changed;
                }
                key_type::EXTENT_DATA => {
                    let Some(l) = &left else { return Ok(()) };
                    // An inode whose item is the same has the same data
                    // (its item changes with its data), as send.c's
                    // changed_extent also holds.
                    match self.reuse {
                        Some(reuse)
                            if self.cur.ino == key.objectid && !reuse.same_extent(l.item)? =>
                        {
                            change = Change::Changed
                        }
                        _ => return self.maybe_send_hole(l.item, l.slot),
                    }
                }
                _ => return Ok(()),
            }
        }
        self.finish_if_needed(Some(key))?;
        if key.objectid == FREE_INO || key.objectid == FREE_SPACE {
            return Ok(());
        }
        if key.item_type == key_type::INODE_ITEM {
            return self.changed_inode(key, change, left, right);
        }
        if self.cur.ignore {
            return Ok(());
        }
        if key.objectid == objectid::FIRST_FREE && key.item_type == key_type::DIR_ITEM {
            if let (true, Some(s)) = (self.names.wants_root_entries(), &left) {
                let entries =
                    dir_entries(s.item.data()).map_err(Error::bad_item(self.send.tree.id, key))?;
                self.names.root_entries(entries.iter().map(|e| e.name));
            }
        }
        let l = left.as_ref().map(|s| s.item);
        let r = right.as_ref().map(|s| s.item);
        match key.item_type {
            key_type::INODE_REF | key_type::INODE_EXTREF => {
                self.need_cur(key, "reference")?;
                if !self.cur.new_gen && self.cur.ino != objectid::FIRST_FREE {
                    match change {
                        Change::New => self.record_new(l)?,
                        Change::Deleted => self.record_deleted(r)?,
                        _ => {
                            self.record_new(l)?;
                            self.record_deleted(r)?;
                        }
                    }
                }
                Ok(())
            }
            key_type::XATTR_ITEM => {
                self.need_cur(key, "xattr")?;
                if !self.cur.new_gen && !self.cur.deleted {
                    match change {
                        Change::New => self.new_xattrs(l)?,
                        Change::Deleted => self.deleted_xattrs(r)?,
                        _ => self.changed_xattrs(l, r)?,
                    }
                }
                Ok(())
            }
            key_type::VERITY_DESC_ITEM if key.offset == 0 => {
                // changed_verity: a descriptor is only ever added.
                if !self.cur.new_gen && !self.cur.deleted && change == Change::New {
                    self.cur.needs_verity = true;
                }
                Ok(())
            }
            key_type::EXTENT_DATA => {
                if key.objectid != self.cur.ino {
                    return Ok(());
                }
                if !self.cur.new_gen && !self.cur.deleted && change != Change::Deleted {
                    if let Some(s) = left {
                        self.process_extent(s.item, s.slot)?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn need_cur(&self, key: Key, what: &str) -> Result<()> {
        if self.cur.ino != key.objectid {
            return Err(Stop::Bad(format!(
                "inconsistent snapshot: {what} item {key} has no inode item before it"
            )));
        }
        Ok(())
    }

    /// compare_refs: a reference that is the same in both trees still
    /// changed when its directory was deleted and re-created.
    fn refs_dir_changed(&mut self, item: &Item) -> Result<bool> {
        let refs = item_refs(self.send.id(), item)?;
        let mut last = 0;
        for (dir, _) in refs {
            if dir == last {
                continue;
            }
            let new_gen = self.send.gen(dir)?;
            let old_gen = self.parent_mut()?.gen(dir)?;
            if new_gen != old_gen {
                return Ok(true);
            }
            last = dir;
        }
        Ok(false)
    }

    pub(super) fn parent_mut(&mut self) -> Result<&mut Lookup<'fs>> {
        self.parent
            .as_mut()
            .ok_or_else(|| Stop::Bad("no parent snapshot".into()))
    }

    /// The kernel's finish_inode_if_needed, called before every item
    /// (`key`) and at the end (`None`).
    fn finish_if_needed(&mut self, key: Option<Key>) -> Result<()> {
        if self.cur.ignore {
            return Ok(());
        }
        let mut pending_move = false;
        let mut refs_processed = false;
        let ino = self.cur.ino;
        let refs_now = match key {
            None => true,
            Some(k) => !(k.objectid == ino && k.item_type <= key_type::INODE_EXTREF),
        };
        if ino != 0 && refs_now && !self.recorded.is_empty() {
            pending_move = self.process_recorded_refs()?;
            refs_processed = true;
        }
        if refs_processed && !pending_move {
            self.send_progress = ino + 1;
        }
        let finishing = ino != 0 && !self.cur.deleted && key.is_none_or(|k| k.objectid != ino);
        if finishing {
            self.finish_inode()?;
        }
        while let Some((dir, gen)) = self.utimes.pop_over_limit() {
            self.send_utimes(dir, gen)?;
        }
        Ok(())
    }

    /// The end of finish_inode_if_needed: holes to i_size, truncate, owner,
    /// mode, capabilities, delayed moves, times.
    fn finish_inode(&mut self) -> Result<()> {
        let ino = self.cur.ino;
        let gen = self.cur.gen;
        if self.cur.new && !self.cur.placed && ino != objectid::FIRST_FREE {
            let nlink = self.cur.inode.map_or(0, |i| i.nlink);
            return Err(Stop::Bad(format!(
                "inode {ino} has {nlink} links but no INODE_REF or INODE_EXTREF"
            )));
        }
        let left = match &self.cur.inode {
            Some(i) => InodeInfo::from_inode(i),
            None => self.send.need_inode(ino)?,
        };
        let kind = self.cur.kind();
        let (need_chown, need_chmod, need_truncate, need_fileattr) =
            match self.parent.as_mut().filter(|_| !self.cur.new) {
                None => (
                    true,
                    kind != S_IFLNK,
                    self.cur.next_write_offset != self.cur.size,
                    false,
                ),
                Some(p) => {
                    let right = p.need_inode(ino)?;
                    let same_size = right.size == self.cur.size
                        || (self.cur.size > right.size
                            && self.cur.next_write_offset == self.cur.size);
                    (
                        left.uid != right.uid || left.gid != right.gid,
                        kind != S_IFLNK && left.mode != right.mode,
                        !same_size,
                        kind != S_IFLNK && left.flags != right.flags,
                    )
                }
            };
        if kind == S_IFREG {
            if self.need_send_hole() {
                if self.cur.last_extent == u64::MAX || self.cur.last_extent < self.cur.size {
                    self.get_last_extent(u64::MAX)?;
                }
                if self.cur.last_extent < self.cur.size
                    && !self.range_is_hole_in_parent(self.cur.last_extent, self.cur.size)?
                {
                    self.send_hole(self.cur.size)?;
                }
            }
            if need_truncate {
                let path = self.cur_path(ino, gen)?;
                self.push(Cmd::Truncate {
                    path,
                    size: self.cur.size,
                })?;
            }
        }
        if need_chown {
            let path = self.cur_path(ino, gen)?;
            self.push(Cmd::Chown {
                path,
                uid: u64::from(left.uid),
                gid: u64::from(left.gid),
            })?;
        }
        if need_chmod {
            let path = self.cur_path(ino, gen)?;
            self.push(Cmd::Chmod {
                path,
                mode: u64::from(left.mode & 0o7777),
            })?;
        }
        if need_fileattr && self.flavor.proto >= 2 {
            let path = self.cur_path(ino, gen)?;
            self.push(Cmd::Fileattr {
                path,
                attr: left.flags,
            })?;
        }
        // The kernel leaves out the descriptor of a re-created inode (a new
        // generation); its receiver would lose fs-verity, so it is looked up.
        if self.flavor.proto >= 3 && (self.cur.needs_verity || self.cur.new_gen) {
            self.send_verity()?;
        }
        self.send_capabilities()?;
        if !self.moves.is_waiting(ino) {
            self.apply_children_dir_moves()?;
            self.send_progress = ino + 1;
            if kind == S_IFDIR && self.cur.size > 0 {
                self.cache_dir_utimes(ino, gen);
            } else {
                self.send_utimes(ino, gen)?;
            }
        }
        self.out.inode_done();
        Ok(())
    }

    /// process_verity: ENABLE_VERITY from the file's fs-verity descriptor.
    fn send_verity(&mut self) -> Result<()> {
        let ino = self.cur.ino;
        let tree = self.send.tree;
        let Some(desc) = self.fs.verity_descriptor_in(&tree, ino)? else {
            return Ok(());
        };
        let v = super::verity::Descriptor::parse(&desc).map_err(|why| {
            Stop::Bad(format!(
                "fs-verity descriptor of {} bytes: {why}",
                desc.len()
            ))
        })?;
        let path = self.cur_path(ino, self.cur.gen)?;
        self.push(Cmd::EnableVerity {
            path,
            algorithm: v.algorithm,
            block_size: v.block_size,
            salt: v.salt.to_vec(),
            sig: v.signature.to_vec(),
        })?;
        Ok(())
    }

    /// Starts a new current inode.
    fn start(&mut self, ino: u64) {
        self.cur = Cur::start(ino);
        self.send_progress = ino;
    }

    fn parse_inode(&self, tree: u64, item: &Item) -> Result<Inode> {
        let ii = InodeItem::parse(item.data()).map_err(Error::bad_item(tree, item.key))?;
        Ok(Inode::from_item(item.key.objectid, &ii))
    }

    /// The kernel's changed_inode.
    fn changed_inode(
        &mut self,
        key: Key,
        change: Change,
        left: Option<Side<'_>>,
        right: Option<Side<'_>>,
    ) -> Result<()> {
        let ino = key.objectid;
        self.start(ino);
        let l = match &left {
            Some(s) => Some(self.parse_inode(self.send.id(), s.item)?),
            None => None,
        };
        let parent_id = self.parent.as_ref().map_or(0, |p| p.id());
        let r = match &right {
            Some(s) => Some(self.parse_inode(parent_id, s.item)?),
            None => None,
        };
        match (change, l, r) {
            (Change::New, Some(l), _) => {
                if l.nlink == 0 {
                    self.cur.ignore = true;
                    return Ok(());
                }
                self.cur.set_left(l);
                if !self.salvage_placeable(ino)? || !self.salvage_readable(&l)? {
                    return Ok(());
                }
                if ino != objectid::FIRST_FREE {
                    self.create_if_needed()?;
                }
            }
            (Change::Deleted, _, Some(r)) => self.cur.set_right(&r),
            (Change::Changed, Some(l), Some(r)) => {
                let mut new_gen = l.generation != r.generation && ino != objectid::FIRST_FREE;
                if l.nlink == 0 && r.nlink == 0 {
                    self.cur.ignore = true;
                    return Ok(());
                } else if l.nlink == 0 || r.nlink == 0 {
                    new_gen = true;
                }
                self.cur.new_gen = new_gen;
                if !new_gen {
                    self.cur.set_left(l);
                    self.cur.new = false;
                    return Ok(());
                }
                if r.nlink > 0 {
                    self.cur.set_right(&r);
                    self.process_all_refs(false)?;
                }
                if l.nlink > 0 {
                    self.cur.set_left(l);
                    self.create_if_needed()?;
                    self.process_all_refs(true)?;
                    self.send_progress = ino + 1;
                    self.process_all_extents()?;
                    self.process_all_new_xattrs()?;
                }
            }
            _ => {
                return Err(Stop::Bad(format!(
                    "tree compare gave an inode item {key} without its data"
                )))
            }
        }
        Ok(())
    }

    /// send_create_inode_if_needed: a directory may exist already, made
    /// early for a child with a lower number.
    fn create_if_needed(&mut self) -> Result<()> {
        let ino = self.cur.ino;
        if self.cur.is_dir() && self.did_create_dir(ino)? {
            // Its turn has come: nobody asks again.
            self.moves.turn_came(ino);
            return Ok(());
        }
        let Some(inode) = self.cur.inode else {
            return Ok(());
        };
        self.send_create_inode(&inode)
    }

    /// The kernel's send_create_inode: the inode at its orphan name.
    pub(super) fn send_create_inode(&mut self, inode: &Inode) -> Result<()> {
        let ino = inode.ino;
        let path = self.orphan_name(ino, inode.generation)?;
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
    pub(super) fn read_symlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        let tree = self.send.tree;
        let key = Key::new(inode.ino, key_type::EXTENT_DATA, 0);
        let Some(item) = tree.search(&key)? else {
            return Err(Stop::Bad(format!(
                "symlink inode {} has no target (no EXTENT_DATA item)",
                inode.ino
            )));
        };
        let fe = FileExtentItem::parse(item.data()).map_err(Error::bad_item(tree.id, key))?;
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
        self.fs.read_extent_piece(&tree, inode, 0, &fe, 0, &mut v)?;
        Ok(v)
    }

    /// Every extent of the current inode as new (a re-used inode number).
    fn process_all_extents(&mut self) -> Result<()> {
        let ino = self.cur.ino;
        let tree = self.send.tree;
        for item in tree.range(
            Key::new(ino, key_type::EXTENT_DATA, 0),
            Key::new(ino, key_type::EXTENT_DATA, u64::MAX),
        ) {
            let item = item?;
            self.process_extent(&item, 1)?;
        }
        Ok(())
    }

    /// The kernel's cache_dir_utimes.
    pub(super) fn cache_dir_utimes(&mut self, dir: u64, gen: u64) {
        self.utimes.touch(dir, gen);
    }

    /// UTIMES of `ino` from the send snapshot's inode item.
    fn send_utimes(&mut self, ino: u64, gen: u64) -> Result<()> {
        if self.salvage_dropped(ino) {
            // A rescue: its inode item (with its times) was lost.
            return Ok(());
        }
        let inode = match self.cur.inode {
            Some(i) if i.ino == ino && i.generation == gen => i,
            _ => self.fs.inode_in(&self.send.tree, ino)?,
        };
        let path = self.cur_path(ino, gen)?;
        if ino == objectid::FIRST_FREE {
            self.root_dirty = false;
        }
        self.out.push(Cmd::Utimes {
            path,
            atime: ts(inode.atime),
            mtime: ts(inode.mtime),
            ctime: ts(inode.ctime),
            otime: (self.flavor.proto >= 2).then(|| ts(inode.otime)),
        })?;
        Ok(())
    }

    /// The UTIMES a receiver needs for the root directory's times when the
    /// stream changed the root after its last UTIMES (orphans come and go
    /// there); sent just before END.
    fn root_times_if_needed(&mut self) -> Result<()> {
        if self.root_dirty {
            let gen = self.send.gen(objectid::FIRST_FREE)?;
            self.send_utimes(objectid::FIRST_FREE, gen)?;
        }
        Ok(())
    }
}

/// Whether `c` adds, removes or renames an entry of the subvolume root.
fn changes_root_entries(c: &Cmd) -> bool {
    c.as_command()
        .entry_paths()
        .any(|p| !p.is_empty() && !p.contains(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_entries_are_recognised() {
        let b = |s: &str| Bytes::from(s.as_bytes());
        assert!(changes_root_entries(&Cmd::Mkfile {
            path: b("o257-5-0"),
            ino: 257
        }));
        assert!(changes_root_entries(&Cmd::Rename {
            from: b("o257-5-0"),
            to: b("d/f")
        }));
        assert!(!changes_root_entries(&Cmd::Rename {
            from: b("d/a"),
            to: b("d/f")
        }));
        assert!(!changes_root_entries(&Cmd::Truncate {
            path: b("f"),
            size: 0
        }));
    }
}
