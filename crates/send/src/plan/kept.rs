//! `--parent-from` with `--bookmarks DIR`: a snapshot the destination
//! holds complete and the source no longer has can still be the parent,
//! through its bookmark `DIR/<UUID>.bookmark` (the uuid the destination
//! lists it by). Only bookmarks that could beat the parent found among the
//! snapshots still there are opened (newest first, by the ctransid the
//! list gives), so a night reads one bookmark, not every one kept. A
//! bookmark that cannot be read, or is not of the snapshot its name and
//! the list say, is told to the plan (which tells its notes) and passed
//! over, never used and never the night's failure. Calls
//! [`crate::bookmark`] and [`crate::lineage`].

use std::cmp::Reverse;
use std::collections::HashSet;
use std::path::Path;

use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
use btrfs_text::list::Line;

use crate::bookmark::{file_name, Bookmark, BookmarkError};
use crate::send::stream_uuid_of;

/// The snapshots a destination holds that the source lost, for the send
/// of one subvolume.
pub(super) struct Gone<'a> {
    /// The snapshot sent.
    pub(super) sv: &'a Subvolume,
    /// What the destination holds (`rreceive --list`).
    pub(super) held: &'a [Line],
    /// The source's subvolumes.
    pub(super) all: &'a [Subvolume],
    /// Any snapshot of the filesystem, not only of `sv`'s lineage
    /// (`--parent-any`).
    pub(super) any: bool,
}

impl Gone<'_> {
    /// The bookmark in `dir` of the newest snapshot the destination holds
    /// complete and the source no longer has, that can be the parent of
    /// `sv` (of this filesystem, of its lineage unless `any`, older than
    /// it) and is newer than `best`, the parent found among the snapshots
    /// still there; `None` when there is none. Each bookmark passed over
    /// for what is wrong with it goes to `skipped`.
    pub(super) fn newest_bookmark(
        &self,
        fs: &Filesystem,
        dir: &Path,
        best: Option<&Subvolume>,
        skipped: &mut dyn FnMut(BookmarkError),
    ) -> Option<Bookmark> {
        let sv = self.sv;
        let floor = best.map(|p| (p.ctransid, p.id));
        let mut found: Option<Bookmark> = None;
        for h in self.candidates(floor) {
            if found
                .as_ref()
                .is_some_and(|b| h.ctransid < b.subvolume().ctransid)
            {
                break;
            }
            let path = dir.join(file_name(&h.received_uuid));
            // Not kept: nothing to say. Unreadable: said as it is opened.
            if path.try_exists().is_ok_and(|there| !there) {
                continue;
            }
            let b = match self.open(&path, h) {
                Ok(b) => b,
                Err(e) => {
                    skipped(e);
                    continue;
                }
            };
            let key = (b.subvolume().ctransid, b.subvolume().id);
            let can = key < (sv.ctransid, sv.id)
                && floor.is_none_or(|f| key > f)
                && found
                    .as_ref()
                    .is_none_or(|f| key > (f.subvolume().ctransid, f.subvolume().id))
                && (self.any || self.of_lineage(b.subvolume()))
                // Of another filesystem (a DIR kept for several): not a
                // fault of the bookmark, and not a parent here.
                && b.check_parent_of(fs, sv, true).is_ok();
            if can {
                found = Some(b);
            }
        }
        found
    }

    /// The listed snapshots, held complete, that no subvolume of the
    /// source is any more (by the uuid the destination knows it by), no
    /// newer than `sv` and not older than `floor`: newest first by the
    /// ctransid the list gives, each uuid once.
    fn candidates(&self, floor: Option<(u64, u64)>) -> Vec<&Line> {
        let on_source: HashSet<uuid::Uuid> = self
            .all
            .iter()
            .filter(|c| !c.is_dead())
            .map(stream_uuid_of)
            .collect();
        let mut seen = HashSet::new();
        let mut gone: Vec<&Line> = self
            .held
            .iter()
            .filter(|h| h.complete() && !h.received_uuid.is_nil())
            .filter(|h| !on_source.contains(&h.received_uuid))
            .filter(|h| h.ctransid <= self.sv.ctransid)
            .filter(|h| floor.is_none_or(|(c, _)| h.ctransid >= c))
            .filter(|h| seen.insert(h.received_uuid))
            .collect();
        gone.sort_by_key(|h| Reverse(h.ctransid));
        gone
    }

    /// Opens the bookmark at `path` of the listed snapshot `h`, checking
    /// that it is of that snapshot (the uuid and ctransid the destination
    /// holds it with).
    fn open(&self, path: &Path, h: &Line) -> Result<Bookmark, BookmarkError> {
        let b = Bookmark::open(path)?;
        let s = b.subvolume();
        let uuid = stream_uuid_of(s);
        if uuid != h.received_uuid || s.ctransid != h.ctransid {
            return Err(BookmarkError::Malformed {
                path: path.to_path_buf(),
                why: format!(
                    "it is of {} (uuid {uuid}, ctransid {}), not of the snapshot its name \
                     and the destination's list say (uuid {}, ctransid {})",
                    s.label(),
                    s.ctransid,
                    h.received_uuid,
                    h.ctransid
                ),
            });
        }
        Ok(b)
    }

    /// Whether the bookmarked snapshot `b` is of `sv`'s lineage: related
    /// to it, or linked to it through the source's subvolumes by its uuid,
    /// parent uuid or received uuid (it is gone, its links are not).
    fn of_lineage(&self, b: &Subvolume) -> bool {
        crate::lineage::joins(self.sv, self.all, b)
    }
}
