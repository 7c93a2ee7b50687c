//! Which subvolumes of a filesystem descend from the same subvolume: the
//! lineage `--parent-from` and the parent picked among clone sources keep
//! to, so that an incremental send is never made against a snapshot of
//! something else (correct, but as large as a full send).
//!
//! Two subvolumes are of one lineage when a chain of uuids links them: a
//! snapshot's parent uuid names what it is a snapshot of (snapshots of one
//! subvolume share it, and a snapshot of a snapshot links to the first),
//! and a received subvolume's received uuid names the subvolume it was
//! sent from (two receives of one snapshot share it). The subvolume a
//! parent uuid names need not exist any more: its snapshots stay linked
//! through its uuid.

use std::collections::{HashMap, HashSet};

use btrfs_disk::Subvolume;
use uuid::Uuid;

/// The lineage of one subvolume: the uuids linked to its own.
#[derive(Clone, Debug)]
pub struct Lineage {
    uuids: HashSet<Uuid>,
}

impl Lineage {
    /// The lineage of `sv` among `all` (the filesystem's subvolumes; `sv`
    /// may be among them).
    pub fn of(sv: &Subvolume, all: &[Subvolume]) -> Lineage {
        let mut sets = UnionFind::default();
        for s in all.iter().chain(std::iter::once(sv)) {
            let own = sets.index(s.uuid);
            for other in [s.parent_uuid, s.received_uuid] {
                if !other.is_nil() {
                    let o = sets.index(other);
                    sets.union(own, o);
                }
            }
        }
        let uuids = if sv.uuid.is_nil() {
            // A filesystem from before subvolumes had uuids: nothing links.
            HashSet::new()
        } else {
            let own = sets.index(sv.uuid);
            let root = sets.find(own);
            let mut uuids = HashSet::new();
            for (u, i) in sets.ids.clone() {
                if sets.find(i) == root {
                    uuids.insert(u);
                }
            }
            uuids
        };
        Lineage { uuids }
    }

    /// Whether `c` is of this lineage.
    pub fn contains(&self, c: &Subvolume) -> bool {
        !c.uuid.is_nil() && self.uuids.contains(&c.uuid)
    }
}

/// Disjoint sets of uuids (the nil uuid never joins any).
#[derive(Default)]
struct UnionFind {
    ids: HashMap<Uuid, usize>,
    parent: Vec<usize>,
}

impl UnionFind {
    /// The index of `u`, a set of its own the first time.
    fn index(&mut self, u: Uuid) -> usize {
        if u.is_nil() {
            // Each nil uuid stands alone.
            self.parent.push(self.parent.len());
            return self.parent.len() - 1;
        }
        let next = self.parent.len();
        let i = *self.ids.entry(u).or_insert(next);
        if i == next {
            self.parent.push(next);
        }
        i
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra] = rb;
        }
    }
}

/// Whether `sv` and `parent` share an origin (one is a snapshot of the
/// other, or both of the same subvolume); an unrelated parent still gives
/// a correct stream, only a larger one.
pub fn related(sv: &Subvolume, parent: &Subvolume) -> bool {
    let nil = |u: &uuid::Uuid| u.is_nil();
    (!nil(&sv.parent_uuid)
        && (sv.parent_uuid == parent.uuid || sv.parent_uuid == parent.parent_uuid))
        || (!nil(&parent.parent_uuid) && parent.parent_uuid == sv.uuid)
        || sv.uuid == parent.uuid
}

/// Whether `other`, which may be gone from `all` (a bookmark's snapshot),
/// is of `sv`'s lineage: related to it, or linked to it through `all` by
/// its uuid, parent uuid or received uuid.
pub fn joins(sv: &Subvolume, all: &[Subvolume], other: &Subvolume) -> bool {
    if related(sv, other) {
        return true;
    }
    let mut with: Vec<Subvolume> = all.to_vec();
    with.push(other.clone());
    Lineage::of(sv, &with).contains(other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use btrfs_disk::fs::RootLocation;

    fn sv(id: u64, uuid: u128, parent: u128, received: u128) -> Subvolume {
        Subvolume {
            id,
            key_offset: 0,
            root: RootLocation {
                bytenr: 0,
                generation: 0,
                level: 0,
            },
            flags: 0,
            refs: 1,
            uuid: Uuid::from_u128(uuid),
            parent_uuid: Uuid::from_u128(parent),
            received_uuid: Uuid::from_u128(received),
            ctransid: 0,
            otransid: 0,
            stransid: 0,
            rtransid: 0,
            ctime: Default::default(),
            otime: Default::default(),
            stime: Default::default(),
            rtime: Default::default(),
            link: None,
            path: None,
        }
    }

    #[test]
    fn snapshots_of_one_subvolume_and_their_snapshots_and_receives() {
        let all = [
            sv(256, 1, 0, 0),     // data
            sv(257, 2, 0, 0),     // other
            sv(258, 3, 1, 0),     // data.1
            sv(259, 4, 1, 0),     // data.2
            sv(260, 5, 2, 0),     // other.1
            sv(261, 6, 3, 0),     // a snapshot of data.1
            sv(262, 7, 0, 4),     // data.2 received back (full)
            sv(263, 8, 7, 0),     // a snapshot of that
            sv(264, 9, 100, 0),   // a snapshot of a deleted subvolume
            sv(265, 10, 100, 0),  // another one
            sv(266, 11, 0, 0),    // unrelated, no parent
            sv(267, 12, 13, 200), // received incremental: parent 13 gone
        ];
        let ids = |l: &Lineage| -> Vec<u64> {
            all.iter().filter(|s| l.contains(s)).map(|s| s.id).collect()
        };
        let data = Lineage::of(&all[3], &all);
        assert_eq!(ids(&data), [256, 258, 259, 261, 262, 263]);
        assert_eq!(ids(&Lineage::of(&all[4], &all)), [257, 260]);
        assert_eq!(ids(&Lineage::of(&all[8], &all)), [264, 265]);
        assert_eq!(ids(&Lineage::of(&all[10], &all)), [266]);
        assert_eq!(ids(&Lineage::of(&all[11], &all)), [267]);
    }

    #[test]
    fn nil_uuids_link_nothing() {
        let all = [sv(256, 0, 0, 0), sv(257, 0, 0, 0), sv(258, 1, 0, 0)];
        let l = Lineage::of(&all[0], &all);
        assert!(all.iter().all(|s| !l.contains(s)));
        let l = Lineage::of(&all[2], &all);
        assert_eq!(all.iter().filter(|s| l.contains(s)).count(), 1);
    }
}
