//! What a held-back create is ([`Pending`]): the inode it makes
//! ([`Create`]) and the commands folded into it ([`Recipe`]). Plain data
//! the engine's state holds; `batch` decides when it is made, `create`
//! makes it.

use btrfs_stream::resume::Point;
use btrfs_stream::{CommandKind, Position, Timespec};

use crate::recovery::track::RecipeMark;

/// The inode a held-back create makes.
pub(super) enum Create {
    File,
    Dir,
    Nod { mode: u64, rdev: u64 },
    Fifo,
    Sock,
    Symlink(Vec<u8>),
}

impl Create {
    pub(super) fn kind(&self) -> CommandKind {
        match self {
            Create::File => CommandKind::Mkfile,
            Create::Dir => CommandKind::Mkdir,
            Create::Nod { .. } => CommandKind::Mknod,
            Create::Fifo => CommandKind::Mkfifo,
            Create::Sock => CommandKind::Mksock,
            Create::Symlink(_) => CommandKind::Symlink,
        }
    }
}

/// What a held-back new file gets before it is created, so that it is
/// created at its final name, with its final mode, in one call.
#[derive(Default)]
pub(super) struct Recipe {
    /// The orphan name, when the RENAME away from it was folded in.
    pub(super) orphan: Option<(Vec<u8>, Position)>,
    pub(super) writes: Vec<(u64, Vec<u8>, Position)>,
    pub(super) bytes: usize,
    pub(super) owner: Option<(u32, u32, Position)>,
    pub(super) mode: Option<(u32, Position)>,
    pub(super) times: Option<(Timespec, Timespec, Position)>,
}

/// A create held back until a command that does not fold into it.
pub(super) struct Pending {
    pub(super) cmd_pos: Position,
    pub(super) path: Vec<u8>,
    pub(super) what: Create,
    pub(super) recipe: Recipe,
    /// The number of the last command folded in.
    pub(super) last: u64,
    /// Where the subvolume's stream stood before the create.
    pub(super) before: Point,
    /// Made again on a resumed receive: it may be there already.
    pub(super) remake: bool,
    /// Where its recipe is in the journal, once batched.
    pub(super) logged: Option<usize>,
}

impl Pending {
    /// The count of the subvolume's commands before its create.
    pub(super) fn before(&self) -> u64 {
        self.before.commands
    }

    /// Its commands, for a stop that has to apply them again.
    pub(super) fn mark(&self) -> RecipeMark {
        RecipeMark {
            first: self.cmd_pos.index,
            last: self.last,
            before: self.before,
        }
    }
}
