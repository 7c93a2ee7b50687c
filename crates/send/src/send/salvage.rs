//! What a rescue send (`rsend --rescue`) knows of a damaged snapshot while
//! it walks it: the directories that can be reached from the root and the
//! inodes left out (see [`super::omit`]).

use std::collections::{HashMap, HashSet};

/// What a rescue send knows of the snapshot's damage.
#[derive(Default)]
pub(super) struct Salvage {
    /// Directories known to be reachable from the root (true) or not.
    pub(super) reachable: HashMap<u64, bool>,
    /// Inodes left out.
    pub(super) dropped: HashSet<u64>,
}
