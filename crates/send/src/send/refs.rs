//! Names: where every inode is on the receiver while the stream is being
//! replayed, and the renames, links, unlinks and rmdirs that move the tree
//! from the parent's names to the send snapshot's. Mirrors send.c's
//! get_cur_path, __get_cur_name_and_parent, get_cur_inode_state,
//! did_overwrite_ref, will_overwrite_ref, process_recorded_refs,
//! can_rmdir, add_pending_dir_move, apply_children_dir_moves,
//! apply_dir_move, path_loop, wait_for_dest_dir_move and
//! wait_for_parent_move: the work on [`Walk`] that needs several of its
//! parts at once (the caches of [`super::names`], the waits of
//! [`super::moves`], the current inode of [`super::current`]).
//!
//! Inodes are processed in ascending number. An inode not processed yet
//! (`ino >= send_progress`) is still where the parent had it, or at its
//! orphan name `o<ino>-<gen>-<n>` in the subvolume root when it is new or
//! a processed inode took its name; a processed one is at its first name
//! in the send snapshot. Directories that cannot move yet (an ancestor
//! with a higher number has to move first, or their new name is still
//! taken by a directory waiting too) wait, keyed by the directory they
//! wait for, and move when it has been processed. Directories to delete
//! that still hold entries of unprocessed inodes wait under their orphan
//! name until they are empty.

use std::collections::VecDeque;

use super::cmd::{Bytes, Cmd};
use super::current::{update_dirs, Ref, Side};
use super::inode::Walk;
use super::mode::{S_IFDIR, S_IFMT};
use super::moves::{PendingMove, WaitingMove};
use super::names::NameEntry;
use super::stop::{Result, Stop};
use btrfs_disk::items::{key_type, objectid};
use btrfs_disk::lookup::{item_refs, FirstRef};
use btrfs_disk::tree::Item;

/// Deepest directory nesting followed before calling it a loop (a path has
/// at most PATH_MAX = 4096 bytes, so at most 2048 components).
const MAX_DEPTH: usize = 4096;

/// Where an inode is in the replay (the kernel's inode_state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    NoChange,
    WillCreate,
    DidCreate,
    WillDelete,
    DidDelete,
}

/// An inode's state and its generations in the send and parent snapshots
/// (0 where it does not exist or has no links).
struct Seen {
    state: Option<State>,
    send_gen: u64,
    parent_gen: u64,
}

fn join(dir: &[u8], name: &[u8]) -> Bytes {
    if dir.is_empty() {
        return Bytes::from(name);
    }
    let mut v = Vec::with_capacity(dir.len() + 1 + name.len());
    v.extend_from_slice(dir);
    v.push(b'/');
    v.extend_from_slice(name);
    Bytes::from(v)
}

/// Where [`Walk::process_recorded_refs`] is in the current inode's name
/// changes.
struct Renaming {
    ino: u64,
    gen: u64,
    /// A path the inode has now.
    valid: Bytes,
    /// Whether that path is its orphan name.
    is_orphan: bool,
    /// A directory was moved to its orphan name to make room.
    orphanized_dir: bool,
    /// An ancestor of the inode was.
    orphanized_ancestor: bool,
    /// The directories it left or entered.
    check_dirs: Vec<(u64, u64)>,
}

/// Adds a directory the current inode left or entered, once.
fn add_check_dir(dirs: &mut Vec<(u64, u64)>, dir: u64, gen: u64) {
    if !dirs.contains(&(dir, gen)) {
        dirs.push((dir, gen));
    }
}

fn loop_error(ino: u64) -> Stop {
    Stop::Bad(format!(
        "inode {ino}: directory loop or nesting deeper than {MAX_DEPTH}"
    ))
}

impl<'fs> Walk<'_, 'fs> {
    /// gen_unique_name: `o<ino>-<gen>-<n>` with the smallest `n` no entry
    /// of either snapshot's root has.
    pub(super) fn orphan_name(&mut self, ino: u64, gen: u64) -> Result<Bytes> {
        let (send, parent) = (&self.send, &self.parent);
        self.names.orphan_name(ino, gen, |name| {
            Ok(send.dir_lookup(objectid::FIRST_FREE, name)?.is_some()
                || match parent {
                    Some(p) => p.dir_lookup(objectid::FIRST_FREE, name)?.is_some(),
                    None => false,
                })
        })
    }

    /// get_cur_inode_state.
    fn seen(&mut self, ino: u64, gen: u64) -> Result<Seen> {
        let left = self.send.inode(ino)?.filter(|i| i.nlink > 0);
        let right = match &mut self.parent {
            Some(p) => p.inode(ino)?.filter(|i| i.nlink > 0),
            None => None,
        };
        let done = ino < self.send_progress;
        let created = if done {
            State::DidCreate
        } else {
            State::WillCreate
        };
        let deleted = if done {
            State::DidDelete
        } else {
            State::WillDelete
        };
        let state = match (left, right) {
            (Some(l), Some(r)) => {
                if l.gen == gen && r.gen == gen {
                    Some(State::NoChange)
                } else if l.gen == gen {
                    Some(created)
                } else if r.gen == gen {
                    Some(deleted)
                } else {
                    None
                }
            }
            (Some(l), None) => (l.gen == gen).then_some(created),
            (None, Some(r)) => (r.gen == gen).then_some(deleted),
            (None, None) => None,
        };
        Ok(Seen {
            state,
            send_gen: left.map_or(0, |i| i.gen),
            parent_gen: right.map_or(0, |i| i.gen),
        })
    }

    fn state(&mut self, ino: u64, gen: u64) -> Result<State> {
        self.seen(ino, gen)?.state.ok_or_else(|| {
            Stop::Bad(format!(
                "inode {ino} generation {gen} is in neither snapshot"
            ))
        })
    }

    /// is_inode_existent: whether `ino` exists on the receiver right now.
    fn existent(&mut self, ino: u64, gen: u64) -> Result<(Option<bool>, Seen)> {
        if ino == objectid::FIRST_FREE {
            let s = Seen {
                state: Some(State::NoChange),
                send_gen: 0,
                parent_gen: 0,
            };
            return Ok((Some(true), s));
        }
        let s = self.seen(ino, gen)?;
        let e = s
            .state
            .map(|st| matches!(st, State::NoChange | State::DidCreate | State::WillDelete));
        Ok((e, s))
    }

    /// get_first_ref with the parent directory's generation.
    fn first_ref_in(&mut self, parent_root: bool, ino: u64) -> Result<(FirstRef, u64)> {
        let l = if parent_root {
            self.parent_mut()?
        } else {
            &mut self.send
        };
        let r = l.need_first_ref(ino)?;
        let g = l.gen(r.dir)?;
        Ok((r, g))
    }

    /// get_cur_path: where `ino` is on the receiver now.
    pub(super) fn cur_path(&mut self, mut ino: u64, mut gen: u64) -> Result<Bytes> {
        let start = (ino, gen);
        let is_cur = ino == self.cur.ino && gen == self.cur.gen;
        if is_cur {
            if let Some(p) = &self.cur.path {
                return Ok(p.clone());
            }
        } else if let Some(p) = self.names.path(ino, gen) {
            return Ok(p);
        }
        let mut parts: Vec<Bytes> = Vec::new();
        let mut depth = 0usize;
        while ino != objectid::FIRST_FREE {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(loop_error(start.0));
            }
            if self.moves.is_orphan_dir(ino, gen) {
                parts.push(self.orphan_name(ino, gen)?);
                break;
            }
            let mut stop = false;
            let (name, parent, parent_gen) = match self.moves.waiting(ino) {
                Some(w) if w.orphanized => {
                    stop = true;
                    (self.orphan_name(ino, gen)?, 0, 0)
                }
                Some(_) => {
                    let (r, g) = self.first_ref_in(true, ino)?;
                    (r.name, r.dir, g)
                }
                None => {
                    let e = self.name_and_parent(ino, gen)?;
                    stop = e.orphan;
                    (e.name, e.parent, e.parent_gen)
                }
            };
            parts.push(name);
            if stop {
                break;
            }
            ino = parent;
            gen = parent_gen;
        }
        let len = parts.iter().map(|p| p.len() + 1).sum::<usize>();
        let mut v = Vec::with_capacity(len);
        for p in parts.iter().rev() {
            if !v.is_empty() {
                v.push(b'/');
            }
            v.extend_from_slice(p);
        }
        let path = Bytes::from(v);
        if is_cur {
            self.cur.path = Some(path.clone());
        } else {
            self.names.put_path(start.0, start.1, path.clone());
        }
        Ok(path)
    }

    /// __get_cur_name_and_parent, through the name cache.
    fn name_and_parent(&mut self, ino: u64, gen: u64) -> Result<NameEntry> {
        if let Some(e) = self.names.name(ino, gen, self.send_progress) {
            return Ok(e);
        }
        let need_later_update = ino >= self.send_progress;
        let entry = match self.existent(ino, gen)?.0 {
            None => {
                return Err(Stop::Bad(format!(
                    "inode {ino} generation {gen} is in neither snapshot"
                )))
            }
            Some(false) => NameEntry {
                parent: 0,
                parent_gen: 0,
                name: self.orphan_name(ino, gen)?,
                orphan: true,
                need_later_update,
            },
            Some(true) => {
                let from_parent = ino >= self.send_progress;
                let (r, pgen) = self.first_ref_in(from_parent, ino)?;
                if self.did_overwrite_ref(r.dir, pgen, ino, gen, &r.name)? {
                    NameEntry {
                        parent: r.dir,
                        parent_gen: pgen,
                        name: self.orphan_name(ino, gen)?,
                        orphan: true,
                        need_later_update,
                    }
                } else {
                    NameEntry {
                        parent: r.dir,
                        parent_gen: pgen,
                        name: r.name,
                        orphan: false,
                        need_later_update,
                    }
                }
            }
        };
        self.names.put_name(ino, gen, entry.clone());
        Ok(entry)
    }

    /// did_overwrite_ref: whether a processed inode took the name `name`
    /// of `ino` in `dir`.
    fn did_overwrite_ref(
        &mut self,
        dir: u64,
        dir_gen: u64,
        ino: u64,
        ino_gen: u64,
        name: &[u8],
    ) -> Result<bool> {
        if self.parent.is_none() {
            return Ok(false);
        }
        let (e, s) = self.existent(dir, dir_gen)?;
        match e {
            None => {
                return Err(Stop::Bad(format!(
                    "directory inode {dir} generation {dir_gen} is in neither snapshot"
                )))
            }
            Some(false) => return Ok(false),
            Some(true) => {}
        }
        if dir != objectid::FIRST_FREE && s.send_gen != dir_gen {
            return Ok(false);
        }
        let Some(ow) = self.send.dir_lookup_inode(dir, name)? else {
            return Ok(false);
        };
        let mut ow_gen = 0;
        if ow == ino {
            ow_gen = self.send.gen(ow)?;
            if ow_gen == ino_gen {
                return Ok(false);
            }
        }
        if ow < self.send_progress {
            return Ok(true);
        }
        if ino != self.cur.ino && ow == self.cur.ino {
            if ow_gen == 0 {
                ow_gen = self.send.gen(ow)?;
            }
            if ow_gen == self.cur.gen {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// did_overwrite_first_ref.
    fn did_overwrite_first_ref(&mut self, ino: u64, gen: u64) -> Result<bool> {
        if self.parent.is_none() {
            return Ok(false);
        }
        let (r, dir_gen) = self.first_ref_in(true, ino)?;
        self.did_overwrite_ref(r.dir, dir_gen, ino, gen, &r.name)
    }

    /// will_overwrite_ref: the unprocessed inode (ino, gen, mode) whose
    /// name in the parent the new name `name` in `dir` takes.
    fn will_overwrite_ref(
        &mut self,
        dir: u64,
        dir_gen: u64,
        name: &[u8],
    ) -> Result<Option<(u64, u64, u32)>> {
        if self.parent.is_none() {
            return Ok(None);
        }
        let (e, s) = self.existent(dir, dir_gen)?;
        if e != Some(true) {
            return Ok(None);
        }
        if dir != objectid::FIRST_FREE && s.parent_gen != dir_gen {
            return Ok(None);
        }
        let Some(other) = self.parent_mut()?.dir_lookup_inode(dir, name)? else {
            return Ok(None);
        };
        if other > self.send_progress || self.moves.is_waiting(other) {
            let info = self.parent_mut()?.need_inode(other)?;
            return Ok(Some((other, info.gen, info.mode)));
        }
        Ok(None)
    }

    /// is_first_ref in the parent snapshot.
    fn is_first_ref(&mut self, ino: u64, dir: u64, name: &[u8]) -> Result<bool> {
        let r = self.parent_mut()?.need_first_ref(ino)?;
        Ok(r.dir == dir && *r.name == *name)
    }

    /// Records the names of one INODE_REF/EXTREF item of the send snapshot
    /// as gained, unless the parent had the same name (then neither).
    pub(super) fn record_new(&mut self, item: Option<&Item>) -> Result<()> {
        let Some(item) = item else { return Ok(()) };
        for (dir, name) in item_refs(self.send.id(), item)? {
            if self.salvage_keeps(dir, &name)? {
                self.record_ref(Side::Gained, dir, name)?;
            }
        }
        Ok(())
    }

    /// Records the names of one INODE_REF/EXTREF item of the parent as
    /// lost, unless the send snapshot has the same name.
    pub(super) fn record_deleted(&mut self, item: Option<&Item>) -> Result<()> {
        let Some(item) = item else { return Ok(()) };
        let id = self.parent_mut()?.id();
        for (dir, name) in item_refs(id, item)? {
            self.record_ref(Side::Lost, dir, name)?;
        }
        Ok(())
    }

    /// record_new_ref / record_deleted_ref: `name` in `dir` gained or
    /// lost, unless the other side has it too (then neither).
    fn record_ref(&mut self, side: Side, dir: u64, name: Bytes) -> Result<()> {
        let dir_gen = match side {
            Side::Gained => self.send.gen(dir)?,
            Side::Lost => self.parent_mut()?.gen(dir)?,
        };
        if self.recorded.cancel(side, dir, dir_gen, &name) {
            return Ok(());
        }
        let full_path = join(&self.cur_path(dir, dir_gen)?, &name);
        self.recorded.push(
            side,
            Ref {
                dir,
                dir_gen,
                name,
                full_path,
            },
        );
        Ok(())
    }

    /// process_all_refs: every name of the current inode as gained (`new`)
    /// or lost, then processed at once (a re-used inode number).
    pub(super) fn process_all_refs(&mut self, new: bool) -> Result<()> {
        let ino = self.cur.ino;
        let items = if new {
            self.send.all_refs(ino)?
        } else {
            self.parent_mut()?.all_refs(ino)?
        };
        let side = if new { Side::Gained } else { Side::Lost };
        for refs in items {
            for (dir, name) in refs {
                self.record_ref(side, dir, name)?;
            }
        }
        self.process_recorded_refs()?;
        Ok(())
    }

    /// The path of `r` recomputed now (update_ref_path / refresh_ref_path).
    fn refresh(&mut self, r: &mut Ref) -> Result<()> {
        r.full_path = join(&self.cur_path(r.dir, r.dir_gen)?, &r.name);
        Ok(())
    }

    /// process_recorded_refs: every rename, link, unlink and rmdir the
    /// current inode's name changes need. Returns whether its move waits.
    pub(super) fn process_recorded_refs(&mut self) -> Result<bool> {
        let ino = self.cur.ino;
        let gen = self.cur.gen;
        if ino <= objectid::FIRST_FREE {
            return Err(Stop::Bad(format!("inode {ino} cannot have names")));
        }
        let (mut new_refs, mut deleted_refs) = self.recorded.take();
        let did_overwrite = !self.cur.new && self.did_overwrite_first_ref(ino, gen)?;
        let is_orphan = self.cur.new || did_overwrite;
        let valid = if is_orphan {
            self.orphan_name(ino, gen)?
        } else {
            self.cur_path(ino, gen)?
        };
        if self.cur.new {
            self.cur.placed = true;
        }
        let mut st = Renaming {
            ino,
            gen,
            valid,
            is_orphan,
            orphanized_dir: false,
            orphanized_ancestor: false,
            check_dirs: Vec::new(),
        };
        self.make_room(&mut new_refs, &mut st)?;
        let pending_move = self.add_new_names(&mut new_refs, &deleted_refs, &mut st)?;
        self.drop_old_names(&mut deleted_refs, &mut st)?;
        self.check_dirs(ino, st.check_dirs)?;
        Ok(pending_move)
    }

    /// First pass: make room for the new names `new_refs` (orphanize or
    /// unlink what the parent had there).
    fn make_room(&mut self, new_refs: &mut [Ref], st: &mut Renaming) -> Result<()> {
        for r in new_refs.iter_mut() {
            let (dir, dir_gen) = (r.dir, r.dir_gen);
            if self.state(dir, dir_gen)? == State::WillCreate {
                continue;
            }
            let name = r.name.clone();
            let Some((ow, ow_gen, ow_mode)) = self.will_overwrite_ref(dir, dir_gen, &name)? else {
                continue;
            };
            if st.orphanized_dir {
                self.refresh(r)?;
            }
            if self.is_first_ref(ow, dir, &name)? {
                let orphan = self.orphan_name(ow, ow_gen)?;
                self.push(Cmd::Rename {
                    from: r.full_path.clone(),
                    to: orphan,
                })?;
                if ow_mode & S_IFMT == S_IFDIR {
                    st.orphanized_dir = true;
                }
                self.moves.orphanized(ow);
                self.names.forget_name(ow, ow_gen);
                if self.is_ancestor(true, ow, ow_gen, st.ino)? {
                    st.orphanized_ancestor = true;
                    self.cur.path = None;
                    st.valid = self.cur_path(st.ino, st.gen)?;
                }
            } else {
                self.push(Cmd::Unlink {
                    path: r.full_path.clone(),
                })?;
            }
        }
        Ok(())
    }

    /// Second pass: the new names `new_refs` (the names lost are
    /// `deleted_refs`). Returns whether the inode's move waits.
    fn add_new_names(
        &mut self,
        new_refs: &mut [Ref],
        deleted_refs: &[Ref],
        st: &mut Renaming,
    ) -> Result<bool> {
        let is_dir = self.cur.kind() == S_IFDIR;
        let has_parent = self.parent.is_some();
        let mut pending_move = false;
        let mut can_rename = true;
        for i in 0..new_refs.len() {
            let (dir, dir_gen) = (new_refs[i].dir, new_refs[i].dir_gen);
            if self.state(dir, dir_gen)? == State::WillCreate {
                let made =
                    new_refs[..i].iter().any(|r| r.dir == dir) || self.did_create_dir(dir)?;
                if !made {
                    let parent = self.fs.inode_in(&self.send.tree, dir)?;
                    self.send_create_inode(&parent)?;
                    self.moves.create_early(dir);
                }
            }
            if is_dir && has_parent {
                let refs = (&new_refs[..], deleted_refs);
                if self.wait_for_dest_dir_move(&new_refs[i], st.is_orphan, refs)? {
                    can_rename = false;
                    pending_move = true;
                }
                if can_rename && self.wait_for_parent_move(&new_refs[i], st.is_orphan, refs)? {
                    can_rename = false;
                    pending_move = true;
                }
            }
            if st.is_orphan && can_rename {
                st.valid = self.rename_current(st.valid.clone(), new_refs[i].full_path.clone())?;
                st.is_orphan = false;
            } else if can_rename {
                if is_dir {
                    st.valid =
                        self.rename_current(st.valid.clone(), new_refs[i].full_path.clone())?;
                } else {
                    if st.orphanized_dir {
                        let mut r = new_refs[i].clone();
                        self.refresh(&mut r)?;
                        new_refs[i] = r;
                    }
                    self.push(Cmd::Link {
                        path: new_refs[i].full_path.clone(),
                        target: st.valid.clone(),
                    })?;
                }
            }
            add_check_dir(&mut st.check_dirs, dir, dir_gen);
        }
        Ok(pending_move)
    }

    /// The names lost, `deleted_refs`: a deleted directory removed or
    /// orphanized, a file's old names unlinked.
    fn drop_old_names(&mut self, deleted_refs: &mut [Ref], st: &mut Renaming) -> Result<()> {
        let (ino, gen) = (st.ino, st.gen);
        let is_dir = self.cur.kind() == S_IFDIR;
        if is_dir && self.cur.deleted {
            if self.can_rmdir(ino, gen)? {
                self.push(Cmd::Rmdir {
                    path: st.valid.clone(),
                })?;
            } else if !st.is_orphan {
                let orphan = self.orphan_name(ino, gen)?;
                self.push(Cmd::Rename {
                    from: st.valid.clone(),
                    to: orphan.clone(),
                })?;
                self.cur.path = Some(orphan);
            }
            for r in deleted_refs.iter() {
                add_check_dir(&mut st.check_dirs, r.dir, r.dir_gen);
            }
        } else if is_dir {
            if let Some(r) = deleted_refs.first() {
                add_check_dir(&mut st.check_dirs, r.dir, r.dir_gen);
            }
        } else {
            for r in deleted_refs.iter_mut() {
                let (dir, dir_gen, name) = (r.dir, r.dir_gen, r.name.clone());
                if !self.did_overwrite_ref(dir, dir_gen, ino, gen, &name)? {
                    if st.orphanized_ancestor {
                        self.refresh(r)?;
                    }
                    self.push(Cmd::Unlink {
                        path: r.full_path.clone(),
                    })?;
                    // The cached path of the inode may be the name just removed.
                    if self
                        .cur
                        .path
                        .as_ref()
                        .is_none_or(|p| r.full_path.starts_with(p))
                    {
                        self.cur.path = None;
                    }
                }
                add_check_dir(&mut st.check_dirs, dir, dir_gen);
            }
            if st.is_orphan {
                self.push(Cmd::Unlink {
                    path: st.valid.clone(),
                })?;
            }
        }
        Ok(())
    }

    /// The directories inode `ino` left or entered (`check_dirs`): times,
    /// and rmdir of deleted ones that are now empty.
    fn check_dirs(&mut self, ino: u64, check_dirs: Vec<(u64, u64)>) -> Result<()> {
        for (dir, dir_gen) in check_dirs {
            if dir > ino {
                continue;
            }
            match self.state(dir, dir_gen)? {
                State::DidCreate | State::NoChange => self.cache_dir_utimes(dir, dir_gen),
                State::DidDelete if self.can_rmdir(dir, dir_gen)? => {
                    let path = self.cur_path(dir, dir_gen)?;
                    self.push(Cmd::Rmdir { path })?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// RENAME of the current inode from `from` to `to`; returns its new path.
    fn rename_current(&mut self, from: Bytes, to: Bytes) -> Result<Bytes> {
        self.names.renaming_file(!self.cur.is_dir());
        self.push(Cmd::Rename {
            from,
            to: to.clone(),
        })?;
        self.cur.path = Some(to.clone());
        Ok(to)
    }

    /// did_create_dir: whether directory `dir` was made early, for an
    /// entry of an inode processed before it.
    pub(super) fn did_create_dir(&mut self, dir: u64) -> Result<bool> {
        if self.moves.created_early(dir) {
            return Ok(true);
        }
        // Every early creation is recorded, so a full send need not look;
        // an incremental one checks the entries as the kernel does.
        if self.parent.is_none() {
            return Ok(false);
        }
        for e in self.send.dir_index_from(dir, 0) {
            let (_, loc) = e?;
            if loc.item_type != key_type::ROOT_ITEM && loc.objectid < self.send_progress {
                self.moves.create_early(dir);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// can_rmdir: whether directory `dir` (deleted) holds no entry of an
    /// unprocessed inode any more.
    fn can_rmdir(&mut self, dir: u64, dir_gen: u64) -> Result<bool> {
        if dir == objectid::FIRST_FREE {
            return Ok(false);
        }
        let cur_ino = self.cur.ino;
        let odi = self.moves.orphan_dir(dir, dir_gen);
        if let Some(o) = odi {
            if cur_ino < o.dir_high_seq_ino {
                return Ok(false);
            }
        }
        let mut high = 0u64;
        let mut last_offset = 0u64;
        let busy = 'scan: {
            if odi.is_none() {
                let last = self.parent_mut()?.last_dir_index(dir)?;
                let Some((_, loc)) = last else {
                    return Ok(true);
                };
                high = loc.objectid;
                if cur_ino < high {
                    break 'scan true;
                }
            }
            let from = odi.map_or(0, |o| o.last_dir_index_offset);
            let entries: Vec<_> = self.parent_mut()?.dir_index_from(dir, from).collect();
            for e in entries {
                let (idx, loc) = e?;
                high = high.max(loc.objectid);
                last_offset = idx;
                if self.moves.rmdir_after(loc.objectid, dir, dir_gen) {
                    break 'scan true;
                }
                if loc.objectid > cur_ino {
                    break 'scan true;
                }
            }
            false
        };
        if !busy {
            if self.moves.orphan_dir_done(dir, dir_gen) {
                self.names.moved();
            }
            return Ok(true);
        }
        self.names.moved();
        self.moves.orphan_dir_busy(dir, dir_gen, last_offset, high);
        Ok(false)
    }

    /// add_pending_dir_move: the move of (ino, gen) waits for `parent_ino`.
    fn add_pending_dir_move(
        &mut self,
        ino: u64,
        gen: u64,
        parent_ino: u64,
        update: Vec<(u64, u64)>,
        orphanized: bool,
    ) -> Result<()> {
        self.moves.wait(ino, gen, parent_ino, update, orphanized)?;
        self.names.moved();
        Ok(())
    }

    /// apply_children_dir_moves: the moves that waited for the current inode,
    /// and those that waited for them.
    pub(super) fn apply_children_dir_moves(&mut self) -> Result<()> {
        let Some(first) = self.moves.take_pending(self.cur.ino) else {
            return Ok(());
        };
        let mut stack: VecDeque<PendingMove> = first.into();
        // Each move either happens or waits again for an ancestor that
        // moves later; on a consistent tree this ends. A damaged one must
        // not make it loop forever.
        let mut budget = 1u64 << 24;
        while let Some(pm) = stack.pop_front() {
            budget = budget.checked_sub(1).ok_or_else(|| {
                Stop::Bad(format!(
                    "delayed directory moves under inode {} do not settle (directory loop?)",
                    self.cur.ino
                ))
            })?;
            let ino = pm.ino;
            self.apply_dir_move(pm)?;
            if let Some(more) = self.moves.take_pending(ino) {
                stack.extend(more);
            }
        }
        Ok(())
    }

    /// apply_dir_move.
    fn apply_dir_move(&mut self, pm: PendingMove) -> Result<()> {
        let w = self.moves.stop_waiting(pm.ino);
        self.names.moved();
        let from = if w.orphanized {
            self.orphan_name(pm.ino, pm.gen)?
        } else {
            let (r, g) = self.first_ref_in(true, pm.ino)?;
            join(&self.cur_path(r.dir, g)?, &r.name)
        };
        let orig = self.send_progress;
        self.send_progress = self.cur.ino + 1;
        let r = self.apply_dir_move_at(pm, w, from);
        self.send_progress = orig;
        r
    }

    fn apply_dir_move_at(&mut self, pm: PendingMove, w: WaitingMove, from: Bytes) -> Result<()> {
        if let Some(ancestor) = self.path_loop(pm.ino, pm.gen)? {
            self.add_pending_dir_move(pm.ino, pm.gen, ancestor, pm.update, w.orphanized)?;
            if let Some((rm, rm_gen)) = w.rmdir {
                self.moves.rmdir_after(pm.ino, rm, rm_gen);
            }
            return Ok(());
        }
        let to = self.cur_path(pm.ino, pm.gen)?;
        self.push(Cmd::Rename { from, to })?;
        if let Some((rm, rm_gen)) = w.rmdir {
            if self.moves.is_orphan_dir(rm, rm_gen) && self.can_rmdir(rm, rm_gen)? {
                let path = self.cur_path(rm, rm_gen)?;
                self.push(Cmd::Rmdir { path })?;
            }
        }
        self.cache_dir_utimes(pm.ino, pm.gen);
        for (dir, dir_gen) in pm.update {
            if self.send.inode(dir)?.is_some() {
                self.cache_dir_utimes(dir, dir_gen);
            }
        }
        Ok(())
    }

    /// path_loop: the first ancestor of (ino, gen) on the receiver that
    /// waits for a move, when the path leads back to `ino` itself.
    fn path_loop(&mut self, start: u64, gen: u64) -> Result<Option<u64>> {
        let mut ino = start;
        let mut gen = gen;
        let mut ancestor = 0u64;
        let mut depth = 0usize;
        while ino != objectid::FIRST_FREE {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(loop_error(start));
            }
            if self.moves.is_orphan_dir(ino, gen) {
                break;
            }
            let (parent, parent_gen) = if self.moves.is_waiting(ino) {
                if ancestor == 0 {
                    ancestor = ino;
                }
                let (r, g) = self.first_ref_in(true, ino)?;
                (r.dir, g)
            } else {
                let e = self.name_and_parent(ino, gen)?;
                if e.orphan {
                    break;
                }
                (e.parent, e.parent_gen)
            };
            if parent == start {
                if ancestor == 0 {
                    ancestor = ino;
                }
                return Ok(Some(ancestor));
            }
            ino = parent;
            gen = parent_gen;
        }
        Ok(None)
    }

    /// wait_for_dest_dir_move: the new name of the current directory is the
    /// parent's name of a directory whose move waits.
    /// (`refs`: the names the inode gained and lost.)
    fn wait_for_dest_dir_move(
        &mut self,
        r: &Ref,
        is_orphan: bool,
        refs: (&[Ref], &[Ref]),
    ) -> Result<bool> {
        if self.moves.none_waiting() {
            return Ok(false);
        }
        let Some(found) = self.parent_mut()?.dir_lookup(r.dir, &r.name)? else {
            return Ok(false);
        };
        if found.location.item_type != key_type::INODE_ITEM {
            return Ok(false);
        }
        let other = found.location.objectid;
        let left_gen = self.parent_mut()?.gen(other)?;
        let Some(right) = self.send.inode(other)? else {
            return Ok(false);
        };
        if right.gen != left_gen {
            return Ok(false);
        }
        match self.moves.waiting(other) {
            Some(w) if !w.orphanized => {
                let update = update_dirs(refs.1, refs.0);
                self.add_pending_dir_move(self.cur.ino, self.cur.gen, other, update, is_orphan)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// check_ino_in_path: whether `ino2` or an ancestor of it is `ino1`.
    fn in_path(
        &mut self,
        parent_root: bool,
        ino1: u64,
        gen1: u64,
        ino2: u64,
        gen2: u64,
    ) -> Result<bool> {
        if ino1 == ino2 {
            return Ok(gen1 == gen2);
        }
        let mut ino = ino2;
        let mut depth = 0usize;
        while ino > objectid::FIRST_FREE {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(loop_error(ino2));
            }
            let (r, g) = self.first_ref_in(parent_root, ino)?;
            if r.dir == ino1 {
                return Ok(g == gen1);
            }
            ino = r.dir;
        }
        Ok(false)
    }

    /// is_ancestor: whether `ino1` is an ancestor of `ino2` by any of its names.
    fn is_ancestor(&mut self, parent_root: bool, ino1: u64, gen1: u64, ino2: u64) -> Result<bool> {
        let items = if parent_root {
            self.parent_mut()?.all_refs(ino2)?
        } else {
            self.send.all_refs(ino2)?
        };
        for refs in items {
            let mut last = None;
            for (dir, _) in refs {
                if last == Some(dir) {
                    continue;
                }
                last = Some(dir);
                let g = if parent_root {
                    self.parent_mut()?.gen(dir)?
                } else {
                    self.send.gen(dir)?
                };
                if self.in_path(parent_root, ino1, gen1, dir, g)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// wait_for_parent_move: an ancestor with a higher number moves (or a
    /// waiting ancestor lies below the current directory in the parent).
    /// (`refs`: the names the inode gained and lost.)
    fn wait_for_parent_move(
        &mut self,
        r: &Ref,
        is_orphan: bool,
        refs: (&[Ref], &[Ref]),
    ) -> Result<bool> {
        let mut ino = r.dir;
        let mut ino_gen = r.dir_gen;
        let mut found = false;
        let mut depth = 0usize;
        while ino > objectid::FIRST_FREE {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(loop_error(r.dir));
            }
            if self.moves.is_waiting(ino)
                && self.is_ancestor(true, self.cur.ino, self.cur.gen, ino)?
            {
                found = true;
                break;
            }
            let (after, after_gen) = self.first_ref_in(false, ino)?;
            let Some(before) = self.parent_mut()?.first_ref(ino)? else {
                break;
            };
            if ino > self.cur.ino && (before.dir != after.dir || before.name != after.name) {
                let pgen = self.parent_mut()?.gen(ino)?;
                if ino_gen == pgen {
                    found = true;
                    break;
                }
            }
            ino = after.dir;
            ino_gen = after_gen;
        }
        if found {
            let update = update_dirs(refs.1, refs.0);
            self.add_pending_dir_move(self.cur.ino, self.cur.gen, ino, update, is_orphan)?;
        }
        Ok(found)
    }
}
