//! Destinations: a directory on btrfs, where subvolumes are real, or a
//! directory on any other filesystem, where a subvolume is a directory and
//! its identity is kept by [`crate::subvol`].
//!
//! Parents and clone sources are looked up among the direct children of
//! DEST first; on btrfs then anywhere beneath the mount root of DEST, as
//! `btrfs receive` finds them (see [`crate::elsewhere`]). Nothing is ever
//! written outside DEST.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use btrfs_stream::resume::Token;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{mkdirat, Mode};
use uuid::Uuid;

use crate::elsewhere::{self, MountRoot};
use crate::ioctl;
use crate::meta::open_dir;
use crate::probe;
use crate::report::Tick;
use crate::snapshot::workdir;
use crate::snapshot::{self, Made, Snapshot, Taken};
use crate::subvol::{self, Store, SubvolState};

/// Inode number of a btrfs subvolume root directory.
const BTRFS_FIRST_FREE_OBJECTID: u64 = 256;

/// Which kind of destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// btrfs: SUBVOL_CREATE, SNAP_CREATE_V2, SET_RECEIVED_SUBVOL.
    Btrfs,
    /// Anything else: directories plus recorded state.
    Plain,
}

/// A subvolume under DEST that a stream may use as parent or clone source.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    /// Its name in DEST; for one found elsewhere, its path under the
    /// mount root (for messages).
    pub name: Vec<u8>,
    /// Whether its receive finished (for btrfs: read-only).
    pub complete: bool,
    /// Found elsewhere on DEST's btrfs filesystem, not in DEST.
    pub elsewhere: Option<elsewhere::Found>,
}

/// Where a new subvolume is made, and the copy of a snapshot's parent, before
/// it takes its name `name` (reserved: never listed, never a stream's):
/// `name` in hex, or where that would be longer than a name can be, a
/// digest of it (the same name always gives the same one, so the next
/// receive of that name finds what a killed one left there).
fn copy_name(name: &[u8]) -> Vec<u8> {
    subvol::reserved_name(b"-copy-", name)
}

/// One subvolume received in DEST, as `rreceive --list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its name in DEST.
    pub name: Vec<u8>,
    /// What rreceive (or, on btrfs, the kernel) knows of it.
    pub state: SubvolState,
    /// An incremental whose parent's received uuid is not known: on
    /// btrfs, a snapshot of a subvolume no longer in DEST (its
    /// `state.parent_uuid` is then `None`, as for a full receive).
    pub parent_unknown: bool,
    /// Incomplete, and another rreceive is receiving it now: who.
    pub receiving: Option<crate::lock::Holder>,
}

impl Listed {
    /// `complete`, `receiving` (incomplete, and a receive of it is
    /// running), `resumable` (incomplete, stopped cleanly) or `incomplete`.
    pub fn status(&self) -> &'static str {
        if self.state.complete {
            "complete"
        } else if self.receiving.is_some() {
            "receiving"
        } else if self.state.resume.is_some() {
            "resumable"
        } else {
            "incomplete"
        }
    }
}

/// Why [`Dest::resume_token`] gives no token; said of the subvolume
/// (`DEST/NAME {self}`), except [`NoToken::Io`], said of DEST.
#[derive(Debug, thiserror::Error)]
pub enum NoToken {
    /// DEST could not be read.
    #[error("{}", btrfs_text::plain_io(.0))]
    Io(#[from] io::Error),
    /// There is nothing at that name.
    #[error("does not exist")]
    Missing,
    /// Something rreceive did not receive.
    #[error("is not a subvolume rreceive received")]
    NotReceived,
    /// Its receive finished.
    #[error("is complete: there is nothing to resume")]
    Complete,
    /// Its receive stopped for this reason, which a resume would meet
    /// again.
    #[error("is incomplete and not resumable: {0}. Delete it and receive the stream again")]
    NotResumable(String),
    /// Another rreceive is receiving it now.
    #[error("{0}")]
    Receiving(crate::lock::Busy),
    /// Its receive was killed or the system went down, and left nothing to
    /// resume from.
    #[error(
        "is incomplete, and its receive did not stop cleanly (killed, or the system went \
         down): it cannot be resumed; delete it and receive the stream again"
    )]
    Unclean,
}

/// Why [`Dest::delete_incomplete`] deleted nothing (the names escaped).
#[derive(Debug, thiserror::Error)]
pub enum NotDeleted {
    /// DEST could not be read or changed.
    #[error("{}", btrfs_text::plain_io(.0))]
    Io(#[from] io::Error),
    /// There is nothing at that name.
    #[error("{0} does not exist")]
    Missing(String),
    /// Something rreceive did not receive.
    #[error("{0} is not a subvolume rreceive received")]
    NotReceived(String),
    /// A complete subvolume, never deleted.
    #[error("{0} is complete: it is kept")]
    Complete(String),
    /// Another rreceive is receiving it (or using it as a parent) now.
    #[error("{0}")]
    Receiving(crate::lock::Busy),
}

/// What is already at a name a stream wants to create.
#[derive(Debug, Clone)]
pub(crate) enum Existing {
    /// A subvolume received before.
    Received(SubvolState),
    /// Something else.
    Other,
}

/// A new subvolume made, with its state, but not yet under its name: a
/// receive killed before [`Dest::place`] leaves no subvolume (only what the
/// next receive of that name removes or replaces), so what makes a killed
/// receive resumable (its journal with a first checkpoint, its side file,
/// its work directory's record) is made in between.
#[must_use]
pub(crate) enum Staged {
    /// Made at the reserved name `tmp`, which becomes `name`.
    Made { tmp: Vec<u8>, name: Vec<u8> },
    /// `--in-place`: the parent `from` becomes `name`, with `state`.
    Move {
        from: Vec<u8>,
        name: Vec<u8>,
        state: SubvolState,
    },
}

/// The destination directory.
pub struct Dest {
    fd: OwnedFd,
    path: PathBuf,
    kind: Kind,
    store: Option<Store>,
    /// uuid → subvolume, filled on first lookup.
    index: Option<HashMap<Uuid, Known>>,
    /// Same, by the subvolume's own btrfs uuid (second choice).
    by_own_uuid: HashMap<Uuid, Known>,
    /// `-m ROOTMOUNT`: the mount root to search beneath on btrfs.
    root_mount: Option<PathBuf>,
    /// The mount root, once looked up (or why it could not be).
    mount: Option<Result<MountRoot, String>>,
    /// What the last search of the filesystem for a uuid met that did not
    /// do (subvolumes not beneath the mount root, an error).
    missed: HashMap<Uuid, String>,
    /// Whether `renameat2(RENAME_NOREPLACE)` is tried (cleared when the
    /// filesystem refuses it: see [`probe::rename_noreplace`]).
    native_rename: std::cell::Cell<bool>,
    /// What the filesystem can do, once probed ([`Dest::probe`]).
    caps: Option<probe::Caps>,
}

impl Dest {
    /// Opens DEST (following symlinks: the path is the user's, not the
    /// stream's). `plain` forces directory mode on btrfs.
    pub fn open(path: &Path, plain: bool) -> io::Result<Dest> {
        let f = File::open(path)?;
        if !f.metadata()?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        let fs = nix::sys::statfs::fstatfs(&f)?;
        let kind = if !plain && fs.filesystem_type() == nix::sys::statfs::BTRFS_SUPER_MAGIC {
            Kind::Btrfs
        } else {
            Kind::Plain
        };
        // What a rename emulated where rename2 is missing left when it was
        // killed half-way.
        probe::clear_placeholders(f.as_fd());
        Ok(Dest {
            fd: f.into(),
            path: path.to_path_buf(),
            kind,
            store: None,
            index: None,
            by_own_uuid: HashMap::new(),
            root_mount: None,
            mount: None,
            missed: HashMap::new(),
            native_rename: std::cell::Cell::new(true),
            caps: None,
        })
    }

    /// Finds what DEST's filesystem can do (see [`probe::probe`]); the
    /// renames that must not replace a name use the fallback from then on
    /// where rename2 is missing.
    pub(crate) fn probe(&mut self) -> &probe::Caps {
        let caps = probe::probe(self.fd());
        self.native_rename.set(caps.rename_noreplace);
        self.caps.insert(caps)
    }

    /// What the filesystem can do, once probed ([`Dest::probe`]).
    pub(crate) fn caps(&self) -> Option<&probe::Caps> {
        self.caps.as_ref()
    }

    /// Renames `from` to `to` in DEST, never over a name that exists
    /// (EEXIST): see [`probe::rename_noreplace`].
    fn rename_noreplace(&self, from: &[u8], to: &[u8]) -> nix::Result<()> {
        probe::rename_noreplace(self.fd(), from, to, &self.native_rename)
    }

    /// `-m ROOTMOUNT`: search for parents and clone sources beneath this
    /// mount root instead of the one /proc/self/mountinfo gives for DEST.
    pub(crate) fn set_root_mount(&mut self, path: Option<PathBuf>) {
        self.root_mount = path;
        self.mount = None;
    }

    /// The mount root searched beneath (btrfs only), or why there is none.
    pub(crate) fn mount_root(&mut self) -> Result<&MountRoot, String> {
        if self.mount.is_none() {
            let m = match &self.root_mount {
                Some(p) => MountRoot::at(p)
                    .map_err(|e| format!("-m {}: {}", p.display(), btrfs_text::plain_io(&e))),
                None => MountRoot::of(self.fd(), &self.path).map_err(|e| {
                    format!(
                        "the mount root of {}: {}",
                        self.path.display(),
                        btrfs_text::plain_io(&e)
                    )
                }),
            };
            self.mount = Some(m);
        }
        match &self.mount {
            Some(Ok(m)) => Ok(m),
            Some(Err(e)) => Err(e.clone()),
            None => Err(String::new()),
        }
    }

    /// Opens subvolume `known`'s root directory, in DEST or elsewhere.
    pub(crate) fn open_known(&mut self, known: &Known) -> nix::Result<OwnedFd> {
        match &known.elsewhere {
            None => self.open_subvol(&known.name),
            Some(found) => match self.mount_root() {
                Ok(m) => m.open(found),
                Err(_) => Err(Errno::ENOENT),
            },
        }
    }

    /// Where a uuid [`Dest::find`] did not find was looked for, and what
    /// was met: "not found {this}".
    pub(crate) fn searched(&self, uuid: Uuid) -> String {
        let dest = self.path.display();
        if self.kind == Kind::Plain {
            return format!("among the subvolumes received in {dest}");
        }
        let root = match &self.mount {
            Some(Ok(m)) => format!(" beneath mount root {}", m.path.display()),
            _ => String::new(),
        };
        let mut s = format!(
            "in {dest} nor on its btrfs filesystem{root} (searched as btrfs receive does: by \
             received uuid, then by uuid)"
        );
        if let Some(m) = self.missed.get(&uuid) {
            s.push_str(": ");
            s.push_str(m);
        }
        s
    }

    /// The kind of destination.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// DEST as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The DEST directory descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens subvolume `name`'s root directory.
    pub(crate) fn open_subvol(&self, name: &[u8]) -> nix::Result<OwnedFd> {
        open_dir(self.fd(), name).map(OwnedFd::from)
    }

    /// Creates subvolume `name` for a full stream, with `state`, under a
    /// reserved name until [`Dest::place`].
    pub(crate) fn create_subvol(
        &mut self,
        name: &[u8],
        state: &SubvolState,
    ) -> io::Result<(OwnedFd, Staged)> {
        let tmp = copy_name(name);
        self.remove_staged(&tmp)?;
        match self.kind {
            Kind::Btrfs => ioctl::subvol_create(self.fd(), &tmp)?,
            // The mode BTRFS_IOC_SUBVOL_CREATE gives a new subvolume root.
            Kind::Plain => mkdirat(
                Some(self.fd.as_raw_fd()),
                tmp.as_slice(),
                Mode::from_bits_retain(0o755),
            )?,
        }
        self.stage(tmp, name, state)
    }

    /// Records `state` for the subvolume made at the reserved name `tmp`
    /// (removed if that fails), to become `name`: in its xattr, which goes
    /// with it; in the state file under `name` already, where that is
    /// where states are kept (a line for a name that does not exist speaks
    /// for nothing, and the next receive of that name replaces it).
    fn stage(
        &mut self,
        tmp: Vec<u8>,
        name: &[u8],
        state: &SubvolState,
    ) -> io::Result<(OwnedFd, Staged)> {
        let recorded = match self.kind {
            Kind::Btrfs => self.record(&tmp, state),
            Kind::Plain => subvol::record(self.fd(), &tmp, state, self.store).and_then(|store| {
                if store == Store::File {
                    subvol::set_lines(self.fd(), &[(&tmp, None), (name, Some(state))])?;
                }
                self.store = Some(store);
                Ok(())
            }),
        };
        let root = recorded.and_then(|()| Ok(self.open_subvol(&tmp)?));
        let staged = Staged::Made {
            tmp,
            name: name.to_vec(),
        };
        match root {
            Ok(root) => Ok((root, staged)),
            Err(e) => {
                self.unstage(&staged);
                Err(e)
            }
        }
    }

    /// Gives the subvolume `staged` its name: from then on it is listed
    /// (incomplete), and a receive killed is resumed.
    pub(crate) fn place(&mut self, staged: &Staged) -> io::Result<()> {
        match staged {
            Staged::Made { tmp, name } => Ok(self.rename_noreplace(tmp, name)?),
            Staged::Move { from, name, state } => {
                self.move_recorded(from, name, state)?;
                if let Some(ix) = self.index.as_mut() {
                    ix.retain(|_, k| k.name != *from);
                }
                Ok(())
            }
        }
    }

    /// Undoes what made `staged`, which was not placed: the subvolume made
    /// goes (a parent to take over in place was not touched).
    pub(crate) fn unstage(&mut self, staged: &Staged) {
        if let Staged::Made { tmp, name } = staged {
            let _ = self.remove_staged(tmp);
            if self.store == Some(Store::File) {
                let _ = subvol::set_lines(self.fd(), &[(name, None)]);
            }
        }
    }

    /// Removes what is at the reserved name `tmp` (a subvolume made, or a
    /// copy, by a receive that was killed or failed before placing it).
    fn remove_staged(&self, tmp: &[u8]) -> io::Result<()> {
        if self.kind == Kind::Btrfs && ioctl::subvol_destroy(self.fd(), tmp).is_ok() {
            return Ok(());
        }
        workdir::remove_tree(self.fd(), tmp)
    }

    /// Renames directory `from` to `to` (over nothing), which then has the
    /// state `to_state`, so that neither name ever shows the other's state
    /// (a kill between a rename and a new xattr would leave `to` with the
    /// state `from` had, a complete subvolume): an xattr moves with the
    /// directory, a state-file line stays with its name. So both names'
    /// states go to the state file first, then the xattr is taken off,
    /// then the rename; then `to` gets its xattr and the lines go.
    fn move_recorded(&mut self, from: &[u8], to: &[u8], to_state: &SubvolState) -> io::Result<()> {
        let raw = self.fd();
        let had = subvol::in_xattr(raw, from);
        let mut lines: Vec<(&[u8], Option<&SubvolState>)> = vec![(to, Some(to_state))];
        if let Some(st) = &had {
            lines.push((from, Some(st)));
        }
        subvol::set_lines(raw, &lines)?;
        let moved = if had.is_some() {
            subvol::drop_xattr(raw, from)
        } else {
            Ok(())
        }
        .and_then(|()| Ok(self.rename_noreplace(from, to)?));
        if let Err(e) = moved {
            if let Some(st) = &had {
                let _ = subvol::record(raw, from, st, Some(Store::Xattr));
                let _ = subvol::set_lines(raw, &[(from, None), (to, None)]);
            } else {
                let _ = subvol::set_lines(raw, &[(to, None)]);
            }
            return Err(e);
        }
        let store = if had.is_some() {
            subvol::record(raw, to, to_state, Some(Store::Xattr))?
        } else {
            Store::File
        };
        if store == Store::Xattr {
            subvol::set_lines(raw, &[(from, None), (to, None)])?;
        } else {
            subvol::set_lines(raw, &[(from, None)])?;
        }
        if self.kind == Kind::Plain {
            self.store = Some(store);
        }
        Ok(())
    }

    /// Creates `name` as a writable snapshot of `parent` for an incremental
    /// stream: on btrfs a snapshot, elsewhere as `how` says.
    pub(crate) fn snapshot(
        &mut self,
        name: &[u8],
        parent: &Known,
        state: &SubvolState,
        how: Snapshot,
        work: Option<BorrowedFd<'_>>,
        tick: &dyn Tick,
    ) -> io::Result<(OwnedFd, Made, Staged)> {
        let src = self.open_known(parent)?;
        // Made under a reserved name and renamed into place whole (by
        // `place`): a receive killed before leaves no subvolume, only
        // that, which the next receive of the name removes.
        let tmp = copy_name(name);
        if self.kind == Kind::Btrfs {
            self.remove_staged(&tmp)?;
            ioctl::snap_create(src.as_fd(), self.fd(), &tmp)?;
            let (root, staged) = self.stage(tmp, name, state)?;
            return Ok((root, Made::Snapshot, staged));
        }
        if how.takes_over() {
            drop(src);
            return self.take_over(name, parent, state);
        }
        self.remove_staged(&tmp)?;
        mkdirat(
            Some(self.fd.as_raw_fd()),
            tmp.as_slice(),
            Mode::from_bits_retain(0o700),
        )?;
        let dst = self.open_subvol(&tmp)?;
        let tree = snapshot::copy_parent(src.as_fd(), dst.as_fd(), how, work, tick);
        match tree {
            Ok(tree) => {
                drop(dst);
                let (root, staged) = self.stage(tmp, name, state)?;
                Ok((root, Made::Tree(tree), staged))
            }
            Err(e) => {
                // A part of a copy is nothing to resume: it goes, so that
                // the same stream can be received again (a full disk).
                drop(dst);
                let _ = workdir::remove_tree(self.fd(), &tmp);
                Err(e)
            }
        }
    }

    /// `--in-place`: the parent, to be renamed to `name` and recorded as
    /// the incomplete new subvolume by [`Dest::place`].
    fn take_over(
        &mut self,
        name: &[u8],
        parent: &Known,
        state: &SubvolState,
    ) -> io::Result<(OwnedFd, Made, Staged)> {
        let taken = Taken::of(self.fd(), &parent.name)?;
        Ok((
            self.open_subvol(&parent.name)?,
            Made::InPlace(taken),
            Staged::Move {
                from: parent.name.clone(),
                name: name.to_vec(),
                state: state.clone(),
            },
        ))
    }

    /// Undoes [`Dest::snapshot`] in place before anything was changed:
    /// `name` is the parent again, with the state it had.
    pub(crate) fn give_back(&mut self, name: &[u8], taken: &Taken) -> io::Result<()> {
        match &taken.state {
            Some(st) => self.move_recorded(name, &taken.parent, st)?,
            None => {
                self.rename_noreplace(name, &taken.parent)?;
                subvol::forget(self.fd(), name)?;
            }
        }
        if let Some(st) = &taken.state {
            if let Some(ix) = self.index.as_mut() {
                ix.insert(
                    st.received_uuid,
                    Known {
                        elsewhere: None,
                        name: taken.parent.clone(),
                        complete: st.complete,
                    },
                );
            }
        }
        Ok(())
    }

    /// Removes subvolume `name`, which rreceive received and did not
    /// complete, with what rreceive keeps beside it (its side file, work
    /// directory and state-file line). A complete subvolume, anything
    /// rreceive did not receive, and one another rreceive is receiving are
    /// refused; no receive of it starts until this is done.
    pub fn delete_incomplete(&self, name: &[u8]) -> Result<(), NotDeleted> {
        let _held = match crate::lock::acquire(self.fd(), &self.path, name, crate::lock::Wait::No) {
            Ok(h) => h,
            Err(crate::lock::LockError::Busy(b)) => return Err(NotDeleted::Receiving(b)),
            Err(crate::lock::LockError::Io(e)) => return Err(NotDeleted::Io(e)),
        };
        self.delete_incomplete_held(name)
    }

    /// [`Dest::delete_incomplete`] by the holder of `name`'s lock.
    pub(crate) fn delete_incomplete_held(&self, name: &[u8]) -> Result<(), NotDeleted> {
        let shown = || crate::error::escape(name);
        match self.existing(name)? {
            None => return Err(NotDeleted::Missing(shown())),
            Some(Existing::Other) => return Err(NotDeleted::NotReceived(shown())),
            Some(Existing::Received(st)) if st.complete => {
                return Err(NotDeleted::Complete(shown()))
            }
            Some(Existing::Received(_)) => {}
        }
        // On btrfs the subvolume, emptied, goes with rmdir.
        workdir::remove_tree(self.fd(), name)?;
        let [rec0, rec1, kept] = crate::recovery::names::record_files(name);
        for side in [
            crate::recovery::names::side_file(name),
            workdir::name_for(name),
            rec0,
            rec1,
            kept,
        ] {
            let _ = workdir::remove_tree(self.fd(), &side);
        }
        crate::recovery::forget_journal(self.fd(), name);
        Ok(subvol::forget(self.fd(), name)?)
    }

    /// The token that resumes the receive of subvolume `name` where it
    /// stopped (for `rsend --resume`), or why there is none.
    pub fn resume_token(&self, name: &[u8]) -> Result<Token, NoToken> {
        let st = match self.existing(name)? {
            None => return Err(NoToken::Missing),
            Some(Existing::Other) => return Err(NoToken::NotReceived),
            Some(Existing::Received(st)) => st,
        };
        if st.complete {
            return Err(NoToken::Complete);
        }
        if let Some(holder) = crate::lock::holder(self.fd(), name) {
            return Err(NoToken::Receiving(crate::lock::Busy {
                holder,
                name: name.to_vec(),
                dest: self.path.clone(),
            }));
        }
        if let Some(t) = st.token() {
            return Ok(t);
        }
        match crate::recovery::side::refusal(self.fd(), name).or_else(|| {
            crate::recovery::killed_point(self.fd(), name, st.received_uuid, st.ctransid).err()
        }) {
            Some(reason) => Err(NoToken::NotResumable(reason)),
            None => Err(NoToken::Unclean),
        }
    }

    /// What is at `name` in DEST already, if anything.
    pub(crate) fn existing(&self, name: &[u8]) -> io::Result<Option<Existing>> {
        match nix::sys::stat::fstatat(
            Some(self.fd.as_raw_fd()),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
            Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                return Ok(Some(Existing::Other))
            }
            Ok(_) => {}
        }
        Ok(Some(match self.received(name)? {
            Some(st) => Existing::Received(st),
            None => Existing::Other,
        }))
    }

    /// The state of directory `name` as a received subvolume: rreceive's
    /// record, or on btrfs the kernel's for a read-only received one.
    fn received(&self, name: &[u8]) -> io::Result<Option<SubvolState>> {
        Ok(self.received_listed(name)?.map(|(st, _)| st))
    }

    /// [`Dest::received`], and whether it is an incremental whose parent's
    /// received uuid is not known (on btrfs: its parent is gone from DEST).
    fn received_listed(&self, name: &[u8]) -> io::Result<Option<(SubvolState, bool)>> {
        let recorded = |st: Option<SubvolState>| st.map(|st| (st, false));
        if self.kind == Kind::Btrfs {
            let Ok(f) = open_dir(self.fd(), name) else {
                return Ok(None);
            };
            use std::os::unix::fs::MetadataExt;
            if f.metadata()?.ino() != BTRFS_FIRST_FREE_OBJECTID {
                return Ok(None);
            }
            let info = ioctl::get_subvol_info(f.as_fd())?;
            let ro = info.flags & ioctl::ROOT_SUBVOL_RDONLY != 0;
            if !ro {
                return subvol::lookup(self.fd(), name).map(recorded);
            }
            let ru = Uuid::from_bytes(info.received_uuid);
            if ru.is_nil() {
                return Ok(None);
            }
            let own_parent = Uuid::from_bytes(info.parent_uuid);
            // The stream named the parent by its received uuid and the
            // ctransid it was sent at: the parent's stransid.
            let parent = self.received_uuid_of_own(own_parent);
            let parent_uuid = parent.map(|(u, _)| u);
            let state = SubvolState {
                received_uuid: ru,
                ctransid: info.stransid,
                parent_uuid,
                parent_ctransid: parent.map_or(0, |(_, stransid)| stransid),
                complete: true,
                resume: None,
            };
            return Ok(Some((state, parent_uuid.is_none() && !own_parent.is_nil())));
        }
        subvol::lookup(self.fd(), name).map(recorded)
    }

    /// The received uuid and stransid (the ctransid it was sent at) of the
    /// subvolume whose own uuid is `own`: one in DEST, else one anywhere on
    /// its filesystem (as `btrfs receive` finds parents anywhere; that
    /// search needs root).
    fn received_uuid_of_own(&self, own: Uuid) -> Option<(Uuid, u64)> {
        if own.is_nil() {
            return None;
        }
        let names = self.child_dirs().ok()?;
        names
            .into_iter()
            .find_map(|n| {
                let f = open_dir(self.fd(), &n).ok()?;
                let info = ioctl::get_subvol_info(f.as_fd()).ok()?;
                let ru = Uuid::from_bytes(info.received_uuid);
                (Uuid::from_bytes(info.uuid) == own && !ru.is_nil()).then_some((ru, info.stransid))
            })
            .or_else(|| crate::elsewhere::received_uuid_of(self.fd(), own))
    }

    /// The directories in DEST (and entries of unknown type), by name,
    /// sorted.
    fn subdirs(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut d = nix::dir::Dir::openat(
            Some(self.fd.as_raw_fd()),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Vec::new();
        for e in d.iter() {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            if matches!(e.file_type(), Some(nix::dir::Type::Directory) | None) {
                names.push(n.to_vec());
            }
        }
        names.sort();
        Ok(names)
    }

    /// [`Dest::subdirs`] but the reserved names (`.rreceive-*`).
    fn child_dirs(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut names = self.subdirs()?;
        names.retain(|n| !n.starts_with(subvol::RESERVED_PREFIX));
        Ok(names)
    }

    /// Every subvolume received in DEST, by name.
    pub fn list(&self) -> io::Result<Vec<Listed>> {
        let mut out = Vec::new();
        for name in self.child_dirs()? {
            if let Some((state, parent_unknown)) = self.received_listed(&name)? {
                let receiving = if state.complete {
                    None
                } else {
                    crate::lock::holder(self.fd(), &name)
                };
                out.push(Listed {
                    name,
                    state,
                    parent_unknown,
                    receiving,
                });
            }
        }
        Ok(out)
    }

    /// Records the state of subvolume `name` (incomplete: on btrfs a
    /// complete one is marked by [`Dest::finish`]).
    pub(crate) fn set_state(&mut self, name: &[u8], state: &SubvolState) -> io::Result<()> {
        self.record(name, state)
    }

    /// The state rreceive recorded for `name`, if any.
    pub(crate) fn state_of(&self, name: &[u8]) -> io::Result<Option<SubvolState>> {
        subvol::lookup(self.fd(), name)
    }

    /// Records the state of `name`. On btrfs only an incomplete state is
    /// kept this way (in the xattr, where allowed): a complete one is the
    /// kernel's received_uuid on a read-only subvolume.
    fn record(&mut self, name: &[u8], state: &SubvolState) -> io::Result<()> {
        if self.kind == Kind::Btrfs {
            return match subvol::record(self.fd(), name, state, Some(Store::Xattr)) {
                Err(e) if crate::meta::errno(&e) == Some(Errno::EOPNOTSUPP) => Ok(()),
                r => r.map(drop),
            };
        }
        let store = subvol::record(self.fd(), name, state, self.store)?;
        self.store = Some(store);
        Ok(())
    }

    /// Marks subvolume `name` (root `root`) as completely received.
    pub(crate) fn finish(
        &mut self,
        name: &[u8],
        root: BorrowedFd<'_>,
        state: &SubvolState,
    ) -> io::Result<()> {
        match self.kind {
            Kind::Btrfs => {
                use xattr::FileExt;
                // The xattr goes before the subvolume is read-only, and
                // only read-only is it received: in between, a line of the
                // state file says what the xattr said, so that a kill
                // there leaves it incomplete (resumable), not unknown.
                let running = subvol::in_xattr(self.fd(), name);
                if let Some(st) = &running {
                    subvol::set_lines(self.fd(), &[(name, Some(st))])?;
                }
                let dir = open_dir(self.fd(), name)?;
                match dir.remove_xattr(subvol::XATTR_NAME) {
                    Err(e)
                        if crate::meta::errno(&e) != Some(Errno::ENODATA)
                            && crate::meta::errno(&e) != Some(Errno::EOPNOTSUPP) =>
                    {
                        return Err(e)
                    }
                    _ => {}
                }
                ioctl::set_received_subvol(root, *state.received_uuid.as_bytes(), state.ctransid)?;
                let flags = ioctl::subvol_getflags(root)?;
                ioctl::subvol_setflags(root, flags | ioctl::SUBVOL_RDONLY)?;
                if running.is_some() {
                    // Read-only, the kernel's record is the one read.
                    let _ = subvol::set_lines(self.fd(), &[(name, None)]);
                }
            }
            Kind::Plain => {
                // Data first, then the flag that says it is all there.
                nix::unistd::syncfs(root.as_raw_fd())?;
                self.record(name, state)?;
            }
        }
        if let Some(ix) = self.index.as_mut() {
            ix.insert(
                state.received_uuid,
                Known {
                    name: name.to_vec(),
                    complete: true,
                    elsewhere: None,
                },
            );
        }
        Ok(())
    }

    /// The subvolume that `uuid` names: by received uuid first (in DEST,
    /// then on btrfs anywhere beneath the mount root), then on btrfs by
    /// its own uuid (in DEST, then beneath the mount root).
    pub(crate) fn find(&mut self, uuid: Uuid) -> io::Result<Option<Known>> {
        if self.index.is_none() {
            self.build_index()?;
        }
        if let Some(k) = self.index.as_ref().and_then(|ix| ix.get(&uuid)) {
            return Ok(Some(k.clone()));
        }
        if self.kind == Kind::Plain {
            return Ok(None);
        }
        self.missed.remove(&uuid);
        if let Some(k) = self.find_elsewhere(uuid, true) {
            return Ok(Some(k));
        }
        if let Some(k) = self.by_own_uuid.get(&uuid) {
            return Ok(Some(k.clone()));
        }
        Ok(self.find_elsewhere(uuid, false))
    }

    /// The subvolume beneath the mount root whose received uuid
    /// (`received`) or own uuid is `uuid`; what stood in the way is kept
    /// for [`Dest::searched`].
    fn find_elsewhere(&mut self, uuid: Uuid, received: bool) -> Option<Known> {
        let fd = self.fd.try_clone().ok()?;
        let search = match self.mount_root() {
            Ok(m) => m.search(fd.as_fd(), uuid, received).map(|s| {
                let shown = s.found.as_ref().map(|f| m.shown(f));
                (s, shown)
            }),
            Err(why) => {
                self.missed.insert(uuid, why);
                return None;
            }
        };
        match search {
            Ok((s, shown)) => {
                if !s.unreachable.is_empty() {
                    let paths: Vec<String> = s
                        .unreachable
                        .iter()
                        .map(|p| format!("<FS_TREE>/{}", crate::error::escape(p)))
                        .collect();
                    self.missed.insert(
                        uuid,
                        format!(
                            "{} has it but is not reachable from the mount root (-m ROOTMOUNT \
                             names another)",
                            paths.join(", ")
                        ),
                    );
                }
                let found = s.found?;
                Some(Known {
                    name: shown.unwrap_or_default(),
                    complete: found.complete,
                    elsewhere: Some(found),
                })
            }
            Err(e) => {
                self.missed.insert(
                    uuid,
                    format!("searching the filesystem's UUID tree: {}", e.desc()),
                );
                None
            }
        }
    }

    fn build_index(&mut self) -> io::Result<()> {
        let mut ix = HashMap::new();
        match self.kind {
            Kind::Plain => {
                for (name, st) in subvol::scan(self.fd())? {
                    // The first complete one wins over incomplete duplicates.
                    let k = Known {
                        name,
                        complete: st.complete,
                        elsewhere: None,
                    };
                    match ix.get(&st.received_uuid) {
                        Some(Known { complete: true, .. }) => {}
                        _ => {
                            ix.insert(st.received_uuid, k);
                        }
                    }
                }
            }
            Kind::Btrfs => {
                for name in self.subdirs()? {
                    let Ok(f) = open_dir(self.fd(), &name) else {
                        continue;
                    };
                    let Ok(md) = f.metadata() else { continue };
                    use std::os::unix::fs::MetadataExt;
                    if md.ino() != BTRFS_FIRST_FREE_OBJECTID {
                        continue;
                    }
                    let Ok(info) = ioctl::get_subvol_info(f.as_fd()) else {
                        continue;
                    };
                    let complete = info.flags & ioctl::ROOT_SUBVOL_RDONLY != 0;
                    if let Ok(Some(st)) = subvol::lookup(self.fd(), &name) {
                        // An rreceive that did not finish: known by the
                        // uuid of its stream, but incomplete.
                        if !st.complete && !complete {
                            ix.entry(st.received_uuid).or_insert(Known {
                                name: name.clone(),
                                complete: false,
                                elsewhere: None,
                            });
                            continue;
                        }
                    }
                    let k = Known {
                        name: name.clone(),
                        complete,
                        elsewhere: None,
                    };
                    let ru = Uuid::from_bytes(info.received_uuid);
                    if !ru.is_nil() && !matches!(ix.get(&ru), Some(Known { complete: true, .. })) {
                        ix.insert(ru, k.clone());
                    }
                    // No unfinished receive of rreceive's: btrfs receive
                    // takes a subvolume found by its own uuid, writable or
                    // not.
                    self.by_own_uuid
                        .entry(Uuid::from_bytes(info.uuid))
                        .or_insert(Known {
                            complete: true,
                            ..k
                        });
                }
            }
        }
        self.index = Some(ix);
        Ok(())
    }
}

/// Whether an errno from the encoded-write ioctl means "decode instead".
pub(crate) fn encoded_write_unsupported(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOTTY
            | Errno::EINVAL
            | Errno::ENOSPC
            | Errno::EOPNOTSUPP
            | Errno::EPERM
            | Errno::ENOSYS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(uuid: u128, complete: bool) -> SubvolState {
        SubvolState {
            received_uuid: Uuid::from_u128(uuid),
            ctransid: 7,
            parent_uuid: None,
            parent_ctransid: 0,
            complete,
            resume: None,
        }
    }

    #[test]
    fn in_place_take_over_and_give_back_with_the_state_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut d = Dest::open(tmp.path(), true).unwrap();
        d.store = Some(Store::File);
        let s0 = state(1, true);
        let (root, staged) = d.create_subvol(b"s0", &s0).unwrap();
        assert!(!tmp.path().join("s0").exists(), "placed before place");
        d.place(&staged).unwrap();
        d.finish(b"s0", root.as_fd(), &s0).unwrap();
        std::fs::write(tmp.path().join("s0/f"), b"x").unwrap();
        let parent = d.find(s0.received_uuid).unwrap().unwrap();
        let mut s1 = state(2, false);
        s1.parent_uuid = Some(s0.received_uuid);
        let (_fd, made, staged) = d
            .snapshot(b"s1", &parent, &s1, Snapshot::InPlace, None, &())
            .unwrap();
        let Made::InPlace(taken) = made else {
            panic!("not in place")
        };
        assert!(tmp.path().join("s0").exists(), "taken before place");
        d.place(&staged).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(subvol::STATE_FILE)).unwrap();
        assert!(!tmp.path().join("s0").exists());
        assert_eq!(std::fs::read(tmp.path().join("s1/f")).unwrap(), b"x");
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("\tincomplete\t7331\n"), "{text}");
        assert!(d.find(s0.received_uuid).unwrap().is_none());
        d.give_back(b"s1", &taken).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(subvol::STATE_FILE)).unwrap();
        assert!(!tmp.path().join("s1").exists());
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("\tcomplete\t7330\n"), "{text}");
        assert!(d.find(s0.received_uuid).unwrap().unwrap().complete);
    }

    /// A subvolume of a name too long to be made under its hex is made
    /// under a digest of it, and placed.
    #[test]
    fn a_long_name_is_staged_under_a_digest() {
        let tmp = tempfile::tempdir().unwrap();
        let mut d = Dest::open(tmp.path(), true).unwrap();
        let name = vec![b'n'; 250];
        let staging = copy_name(&name);
        assert!(staging.len() <= 255 && staging[15] == b'h', "{staging:?}");
        assert_eq!(copy_name(&name), staging);
        assert_ne!(copy_name(&[b'm'; 250]), staging);
        let (_root, staged) = d.create_subvol(&name, &state(3, false)).unwrap();
        d.place(&staged).unwrap();
        assert!(tmp
            .path()
            .join(std::str::from_utf8(&name).unwrap())
            .is_dir());
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            usize::from(d.store == Some(Store::File)) + 1
        );
    }

    /// Where states are xattrs, taking a parent over in place and giving it
    /// back leave each name with its own state and no state-file line.
    #[test]
    fn in_place_take_over_and_give_back_with_xattrs() {
        let tmp = tempfile::tempdir().unwrap();
        let mut d = Dest::open(tmp.path(), true).unwrap();
        let s0 = state(1, true);
        let (root, staged) = d.create_subvol(b"s0", &s0).unwrap();
        d.place(&staged).unwrap();
        d.finish(b"s0", root.as_fd(), &s0).unwrap();
        if d.store != Some(Store::Xattr) {
            // A temporary directory without user xattrs (tmpfs before
            // Linux 6.6): the test above covers the state file, and
            // kill_syscalls.rs this onto ext4.
            return;
        }
        let parent = d.find(s0.received_uuid).unwrap().unwrap();
        let mut s1 = state(2, false);
        s1.parent_uuid = Some(s0.received_uuid);
        let (_fd, made, staged) = d
            .snapshot(b"s1", &parent, &s1, Snapshot::InPlace, None, &())
            .unwrap();
        let Made::InPlace(taken) = made else {
            panic!("not in place")
        };
        d.place(&staged).unwrap();
        assert_eq!(subvol::in_xattr(d.fd(), b"s1"), Some(s1.clone()));
        let file = tmp.path().join(subvol::STATE_FILE);
        assert!(!file.exists(), "the lines that stood in for a moment stay");
        d.give_back(b"s1", &taken).unwrap();
        assert_eq!(subvol::in_xattr(d.fd(), b"s0"), Some(s0.clone()));
        assert!(!file.exists(), "the lines that stood in for a moment stay");
        assert!(!tmp.path().join("s1").exists());
    }
}
