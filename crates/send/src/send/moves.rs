//! What waits for its turn: directory moves put off until an ancestor has
//! moved (send.c's pending_dir_moves and waiting_dir_moves), directories
//! to delete that still hold entries (orphan_dirs, orphan_dir_info), and
//! directories created ahead of their turn (what did_create_dir finds,
//! remembered).

use std::collections::{BTreeMap, HashSet};

use super::stop::{Result, Stop};

/// A directory whose move waits (the kernel's waiting_dir_move).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WaitingMove {
    /// A directory to remove once this one has moved out of it.
    pub(super) rmdir: Option<(u64, u64)>,
    /// It was renamed to its orphan name meanwhile.
    pub(super) orphanized: bool,
}

/// A delayed move (the kernel's pending_dir_move).
#[derive(Clone, Debug)]
pub(super) struct PendingMove {
    pub(super) ino: u64,
    pub(super) gen: u64,
    /// Directories (dir, gen) whose times change with the move.
    pub(super) update: Vec<(u64, u64)>,
}

/// A directory to delete that still has entries (the kernel's orphan_dir_info).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OrphanDir {
    pub(super) last_dir_index_offset: u64,
    pub(super) dir_high_seq_ino: u64,
}

/// The moves, removals and creations put off.
#[derive(Default)]
pub(super) struct Moves {
    waiting: BTreeMap<u64, WaitingMove>,
    /// The moves waiting, by the directory they wait for.
    pending: BTreeMap<u64, Vec<PendingMove>>,
    orphan_dirs: BTreeMap<(u64, u64), OrphanDir>,
    /// Directories created ahead of their turn, until their turn comes.
    created_dirs: HashSet<u64>,
}

impl Moves {
    /// Whether no move waits.
    pub(super) fn none_waiting(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The lowest directory whose move waits.
    pub(super) fn first_waiting(&self) -> Option<u64> {
        self.waiting.keys().next().copied()
    }

    /// Whether the move of directory `ino` waits.
    pub(super) fn is_waiting(&self, ino: u64) -> bool {
        self.waiting.contains_key(&ino)
    }

    /// The waiting move of directory `ino`.
    pub(super) fn waiting(&self, ino: u64) -> Option<WaitingMove> {
        self.waiting.get(&ino).copied()
    }

    /// Directory `ino`, if its move waits, was renamed to its orphan name.
    pub(super) fn orphanized(&mut self, ino: u64) {
        if let Some(w) = self.waiting.get_mut(&ino) {
            w.orphanized = true;
        }
    }

    /// Directory (`dir`, `dir_gen`) is to be removed once `ino` moved out
    /// of it; false when the move of `ino` does not wait.
    pub(super) fn rmdir_after(&mut self, ino: u64, dir: u64, dir_gen: u64) -> bool {
        match self.waiting.get_mut(&ino) {
            Some(w) => {
                w.rmdir = Some((dir, dir_gen));
                true
            }
            None => false,
        }
    }

    /// add_pending_dir_move, without the path cache: the move of (`ino`,
    /// `gen`) waits for `parent`.
    pub(super) fn wait(
        &mut self,
        ino: u64,
        gen: u64,
        parent: u64,
        update: Vec<(u64, u64)>,
        orphanized: bool,
    ) -> Result<()> {
        if self.waiting.contains_key(&ino) {
            return Err(Stop::Bad(format!(
                "directory inode {ino} already waits for a move"
            )));
        }
        self.waiting.insert(
            ino,
            WaitingMove {
                rmdir: None,
                orphanized,
            },
        );
        self.pending
            .entry(parent)
            .or_default()
            .push(PendingMove { ino, gen, update });
        Ok(())
    }

    /// The moves that waited for `parent`, which may happen now.
    pub(super) fn take_pending(&mut self, parent: u64) -> Option<Vec<PendingMove>> {
        self.pending.remove(&parent)
    }

    /// Ends the wait of directory `ino`: what its waiting move held.
    pub(super) fn stop_waiting(&mut self, ino: u64) -> WaitingMove {
        self.waiting.remove(&ino).unwrap_or_default()
    }

    /// Whether (`dir`, `gen`) is a deleted directory that still has entries.
    pub(super) fn is_orphan_dir(&self, dir: u64, gen: u64) -> bool {
        self.orphan_dirs.contains_key(&(dir, gen))
    }

    /// What is known of (`dir`, `gen`) as a deleted directory with entries.
    pub(super) fn orphan_dir(&self, dir: u64, gen: u64) -> Option<OrphanDir> {
        self.orphan_dirs.get(&(dir, gen)).copied()
    }

    /// (`dir`, `gen`) is empty now; whether it was an orphan directory.
    pub(super) fn orphan_dir_done(&mut self, dir: u64, gen: u64) -> bool {
        self.orphan_dirs.remove(&(dir, gen)).is_some()
    }

    /// (`dir`, `gen`) still has entries: of its index scanned up to
    /// `last_offset`, the highest inode `high`.
    pub(super) fn orphan_dir_busy(&mut self, dir: u64, gen: u64, last_offset: u64, high: u64) {
        let o = self.orphan_dirs.entry((dir, gen)).or_default();
        o.last_dir_index_offset = last_offset;
        o.dir_high_seq_ino = o.dir_high_seq_ino.max(high);
    }

    /// Whether directory `dir` was created ahead of its turn.
    pub(super) fn created_early(&self, dir: u64) -> bool {
        self.created_dirs.contains(&dir)
    }

    /// Directory `dir` was created ahead of its turn.
    pub(super) fn create_early(&mut self, dir: u64) {
        self.created_dirs.insert(dir);
    }

    /// The turn of directory `dir` came: nobody asks again.
    pub(super) fn turn_came(&mut self, dir: u64) {
        self.created_dirs.remove(&dir);
    }
}
