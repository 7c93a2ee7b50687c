//! The inode being sent and the names it gained and lost: send.c's
//! send_ctx cur_ino, cur_inode_gen, cur_inode_new, cur_inode_new_gen,
//! cur_inode_deleted, cur_inode_size, cur_inode_mode, cur_inode_rdev,
//! cur_inode_last_extent, cur_inode_next_write_offset, ignore_cur_inode
//! and its new_refs / deleted_refs lists (record_new_ref,
//! record_deleted_ref and their "same name in both" check).

use super::cmd::Bytes;
use super::mode::{S_IFDIR, S_IFMT};
use btrfs_disk::data::Inode;

/// The inode being processed (for a deleted inode, the parent's facts).
#[derive(Default)]
pub(super) struct Cur {
    pub(super) ino: u64,
    pub(super) gen: u64,
    pub(super) new: bool,
    pub(super) new_gen: bool,
    pub(super) deleted: bool,
    pub(super) size: u64,
    pub(super) mode: u32,
    /// End of the last extent seen (u64::MAX: not known yet).
    pub(super) last_extent: u64,
    /// End of the last extent written or cloned.
    pub(super) next_write_offset: u64,
    pub(super) ignore: bool,
    /// The send snapshot's inode item (not for a deleted inode).
    pub(super) inode: Option<Inode>,
    /// Its `security.capability`, when every xattr of the inode is walked.
    pub(super) caps: Option<Vec<u8>>,
    /// Whether its names were processed (a new inode must get one).
    pub(super) placed: bool,
    /// Its last path, for error messages.
    pub(super) path: Option<Bytes>,
    /// Its fs-verity descriptor is new or changed (ENABLE_VERITY in v3).
    pub(super) needs_verity: bool,
}

impl Cur {
    /// The state at the start of inode `ino`, before its item is read.
    pub(super) fn start(ino: u64) -> Cur {
        Cur {
            ino,
            last_extent: u64::MAX,
            ..Cur::default()
        }
    }

    /// Takes the send snapshot's inode item: the inode is new (or changed).
    pub(super) fn set_left(&mut self, inode: Inode) {
        self.gen = inode.generation;
        self.new = true;
        self.deleted = false;
        self.size = inode.size;
        self.mode = inode.mode;
        self.inode = Some(inode);
    }

    /// Takes the parent's inode item: the inode is deleted.
    pub(super) fn set_right(&mut self, inode: &Inode) {
        self.gen = inode.generation;
        self.new = false;
        self.deleted = true;
        self.size = inode.size;
        self.mode = inode.mode;
        self.inode = None;
    }

    /// Its file type (`S_IF*`).
    pub(super) fn kind(&self) -> u32 {
        self.mode & S_IFMT
    }

    /// Whether it is a directory.
    pub(super) fn is_dir(&self) -> bool {
        self.kind() == S_IFDIR
    }
}

/// A name gained or lost by the current inode.
#[derive(Clone, Debug)]
pub(super) struct Ref {
    pub(super) dir: u64,
    pub(super) dir_gen: u64,
    pub(super) name: Bytes,
    /// Its path on the receiver when it was recorded.
    pub(super) full_path: Bytes,
}

impl Ref {
    /// Whether it is the name `name` in directory (`dir`, `dir_gen`).
    fn is(&self, dir: u64, dir_gen: u64, name: &[u8]) -> bool {
        self.dir == dir && self.dir_gen == dir_gen && *self.name == *name
    }
}

/// The names the current inode gained and lost, recorded until they are
/// processed (send.c's new_refs and deleted_refs).
#[derive(Default)]
pub(super) struct Recorded {
    new: Vec<Ref>,
    deleted: Vec<Ref>,
}

/// Which list of [`Recorded`] a name goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// A name of the send snapshot the parent lacks.
    Gained,
    /// A name of the parent the send snapshot lacks.
    Lost,
}

impl Recorded {
    /// Whether no name is recorded.
    pub(super) fn is_empty(&self) -> bool {
        self.new.is_empty() && self.deleted.is_empty()
    }

    /// Drops the name (`dir`, `dir_gen`, `name`) from the other side's list,
    /// where it is when both snapshots have it; whether it was there.
    pub(super) fn cancel(&mut self, side: Side, dir: u64, dir_gen: u64, name: &[u8]) -> bool {
        let other = match side {
            Side::Gained => &mut self.deleted,
            Side::Lost => &mut self.new,
        };
        match other.iter().position(|r| r.is(dir, dir_gen, name)) {
            Some(i) => {
                other.remove(i);
                true
            }
            None => false,
        }
    }

    /// Records `r` on `side`.
    pub(super) fn push(&mut self, side: Side, r: Ref) {
        match side {
            Side::Gained => self.new.push(r),
            Side::Lost => self.deleted.push(r),
        }
    }

    /// The names gained and lost, leaving none recorded.
    pub(super) fn take(&mut self) -> (Vec<Ref>, Vec<Ref>) {
        (
            std::mem::take(&mut self.new),
            std::mem::take(&mut self.deleted),
        )
    }
}

/// The directories (dir, gen) of lost, then gained names: those whose
/// times change with a move of the inode.
pub(super) fn update_dirs(deleted: &[Ref], new: &[Ref]) -> Vec<(u64, u64)> {
    deleted
        .iter()
        .chain(new)
        .map(|r| (r.dir, r.dir_gen))
        .collect()
}
