//! [`Strategy`]: the snapshot strategy of the subvolume being received,
//! its kind (btrfs, copy, link, in place) and what it holds for it (the
//! overlay, the work directory, the parent taken over); and [`Snapshot`],
//! the choice a caller makes.
//!
//! May call: its siblings `copy`, `overlay` and `workdir`, and `error`,
//! `subvol`; never the engine or the destination.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use uuid::Uuid;

use crate::error::CmdError;
use crate::subvol::{self, SubvolState};

use super::copy::{self, Id, Methods};
use super::overlay::Overlay;
use super::workdir::{Workdir, WriteAhead};

type R<T> = Result<T, CmdError>;

/// How an incremental stream's snapshot is made off btrfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Snapshot {
    /// A copy of the parent's tree (reflinks where the filesystem has
    /// them).
    #[default]
    Copy,
    /// The parent's tree itself, renamed and changed (`--in-place`).
    InPlace,
    /// New directories with hard links to the parent's files (`--link`).
    Link,
}

impl Snapshot {
    /// Whether the parent's tree itself becomes the snapshot.
    pub(crate) fn takes_over(self) -> bool {
        self == Snapshot::InPlace
    }

    /// How a tree copy shares the parent's files.
    pub(crate) fn share(self) -> copy::Share {
        if self == Snapshot::Link {
            copy::Share::Link
        } else {
            copy::Share::Copy
        }
    }

    /// Whether a tree made so needs a work directory.
    pub(crate) fn needs_work(self) -> bool {
        self != Snapshot::Copy
    }
}

/// The parent a subvolume took over in place, to give it back.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// The parent's name in DEST.
    pub parent: Vec<u8>,
    /// The state it had.
    pub state: Option<SubvolState>,
}

impl Taken {
    /// Parent `parent` of directory `dest`, about to be taken over.
    pub(crate) fn of(dest: BorrowedFd<'_>, parent: &[u8]) -> io::Result<Taken> {
        Ok(Taken {
            parent: parent.to_vec(),
            state: subvol::lookup(dest, parent)?,
        })
    }
}

/// How the subvolume being received relates to its parent's tree.
pub(super) enum Kind {
    /// A tree of its own: a new subvolume (SUBVOL).
    New,
    /// A btrfs snapshot of the parent.
    Btrfs,
    /// A copy of the parent's tree.
    Copy,
    /// Hard links to the parent's inodes: every file with two links or
    /// more, except these, which are the new tree's own (copies of the
    /// parent's hardlink groups, and targets of LINK).
    Link(HashSet<Id>),
    /// The parent's tree itself, changed in place.
    InPlace(Overlay),
}

/// A strategy reopened after a stop, with the flags due at END its work
/// directory recorded, by inode number.
pub(crate) type Reopened = (Strategy, Vec<(u64, u32)>);

/// The snapshot strategy of the subvolume being received.
pub(crate) struct Strategy {
    pub(super) kind: Kind,
    /// The parent taken over in place, until the first change.
    pub(super) taken: Option<Taken>,
    /// The work directory (`--in-place`, `--link`).
    pub(super) work: Option<Workdir>,
    /// How what a change of a linked or in-place tree needs first reaches
    /// the disk before it.
    pub(super) write_ahead: WriteAhead,
    /// Which ways of copying data work here (found on first use).
    pub(crate) copy: Methods,
}

impl Default for Strategy {
    fn default() -> Strategy {
        Strategy {
            kind: Kind::New,
            taken: None,
            work: None,
            write_ahead: WriteAhead::Off,
            copy: Methods::default(),
        }
    }
}

impl Strategy {
    /// A resumed subvolume's strategy, as its work directory in `dest`
    /// says (a snapshot linked to its parent's files stays so, whatever
    /// the options now), with the flags due at END it recorded; none
    /// (`None`) for a tree of its own. `root` is the subvolume's root,
    /// `parent` the parent it names, `ahead` how changes wait for what they
    /// need kept, and `refused` the error for a work directory that cannot
    /// be resumed from.
    pub(crate) fn reopen(
        dest: BorrowedFd<'_>,
        name: &[u8],
        root: BorrowedFd<'_>,
        parent: Option<Uuid>,
        ahead: impl FnOnce() -> WriteAhead,
        refused: impl Fn(&str) -> CmdError,
    ) -> R<Option<Reopened>> {
        let work = Workdir::open(dest, name).map_err(CmdError::io("open the work directory"))?;
        let Some(w) = work else {
            return Ok(None);
        };
        let write_ahead = ahead();
        let (kind, late) = match w.mode().map_err(CmdError::io("read the work directory"))? {
            Some(rec) if rec.mode == "link" => {
                let dev = nix::sys::stat::fstat(root.as_raw_fd())
                    .map_err(CmdError::os("stat"))?
                    .st_dev;
                (
                    Kind::Link(rec.own.into_iter().map(|i| (dev, i)).collect()),
                    rec.late,
                )
            }
            Some(rec) if rec.mode == "in-place" => {
                let Some(parent) = parent else {
                    return Err(refused("received in place, it names no parent"));
                };
                let o = Overlay::reopen(w.fd(), parent, root)
                    .map_err(CmdError::io("rebuild the parent's view"))?;
                let late = o.lifted.clone();
                (Kind::InPlace(o), late)
            }
            _ => {
                return Err(refused(
                    "its work directory says nothing of how it was received",
                ))
            }
        };
        let s = Strategy {
            kind,
            work: Some(w),
            write_ahead,
            ..Strategy::default()
        };
        Ok(Some((s, late)))
    }

    /// Gives back what it holds, after a failure or at an END that does
    /// not complete the subvolume: its work directory goes; a parent taken
    /// over in place and not changed yet is returned, to be given its name
    /// back.
    pub(crate) fn give_back(&mut self, dest: BorrowedFd<'_>) -> Option<Taken> {
        let kind = std::mem::replace(&mut self.kind, Kind::New);
        if let Some(w) = self.work.take() {
            let _ = w.remove(dest);
        }
        let Kind::InPlace(o) = kind else {
            return None;
        };
        let unchanged = !o.changed;
        let taken = self.taken.take()?;
        unchanged.then_some(taken)
    }

    /// Takes its work directory, to be removed once the subvolume is
    /// complete (or put back with [`Strategy::keep_work`]).
    pub(crate) fn take_work(&mut self) -> Option<Workdir> {
        self.work.take()
    }

    /// Puts back what [`Strategy::take_work`] took.
    pub(crate) fn keep_work(&mut self, work: Option<Workdir>) {
        self.work = work;
    }

    /// The parent taken over in place, while it can still be given back.
    pub(crate) fn taken_parent(&self) -> Option<&[u8]> {
        self.taken.as_ref().map(|t| t.parent.as_slice())
    }

    /// Whether the tree is the parent's, changed in place.
    pub(crate) fn in_place(&self) -> bool {
        matches!(self.kind, Kind::InPlace(_))
    }

    /// Whether the tree is the parent's, changed in place, and nothing was
    /// changed yet.
    pub(crate) fn in_place_unchanged(&self) -> bool {
        matches!(&self.kind, Kind::InPlace(o) if !o.changed)
    }

    /// Whether a CLONE from `uuid` reads the parent's tree as it was (in
    /// place, from the parent itself).
    pub(crate) fn clones_from_parent(&self, uuid: Uuid) -> bool {
        matches!(&self.kind, Kind::InPlace(o) if o.parent() == uuid)
    }

    /// In place: the parent's file at `path` as it was, beneath `root`.
    pub(crate) fn open_parent_file(&self, root: BorrowedFd<'_>, path: &[u8]) -> R<File> {
        let Kind::InPlace(o) = &self.kind else {
            return Err(CmdError::NoSubvol);
        };
        o.open(root, path)
            .map_err(CmdError::io("open the parent's file"))?
            .ok_or(CmdError::Os {
                op: "open the parent's file",
                errno: nix::errno::Errno::ENOENT,
            })
    }

    /// In place: copies `len` bytes of the parent's file `src` (opened by
    /// [`Strategy::open_parent_file`]) at `src_off`, as they were, to
    /// `dst` at `dst_off`.
    pub(crate) fn copy_from_parent(
        &mut self,
        dst: &File,
        dst_off: u64,
        src: &File,
        src_off: u64,
        len: u64,
    ) -> R<()> {
        let mut how = self.copy;
        if let Kind::InPlace(o) = &self.kind {
            if len > 0 {
                o.copy_from_parent(dst, dst_off, src, src_off, len, &mut how)
                    .map_err(CmdError::io("clone"))?;
            }
        }
        self.copy = how;
        Ok(())
    }
}
