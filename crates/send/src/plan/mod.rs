//! The send plan: which parent and clone sources each subvolume sent
//! goes against, as `-p` names them, as `-c` offers them, as
//! `--parent-from` picks the parent from what the destination holds
//! ([`listing`]; a snapshot it holds and the source lost through its
//! bookmark, [`kept`]), or as `--resume` continues a stream.
//!
//! Owns the choice only: it prints nothing, and tells what it picked
//! through [`Notes`], which the binary implements. Calls [`crate::send`]
//! (the checks a parent or clone source must pass), [`crate::lineage`]
//! and the on-disk reader; nothing in the crate calls it.

mod error;
mod kept;
mod listing;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::SubvolSelector;
use btrfs_stream::resume::Token;

use crate::bookmark::{Bookmark, BookmarkError};
use crate::lineage::Lineage;
use crate::send::{
    check_clone_source, check_parent, related, stream_uuid_of, DEFAULT_HIGHEST_PROTO,
};

pub use error::{PlanError, TOP_LEVEL_HINT};
pub use listing::parse_list;

/// What a send asks of its parents and clone sources.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ask<'a> {
    /// The parent of every subvolume (`-p`).
    pub parent: Option<&'a SubvolSelector>,
    /// Clone sources (`-c`); without a parent they choose one.
    pub clone_srcs: &'a [SubvolSelector],
    /// The stream a resumed send continues (`--resume`).
    pub resume: Option<&'a Token>,
    /// What the destination holds, as `rreceive --list` prints it
    /// (`--parent-from`); not read when resuming.
    pub listing: Option<&'a str>,
    /// With `listing`: the newest snapshot the destination holds of any
    /// subvolume, not only of the one sent (`--parent-any`); with
    /// `bookmark`: a bookmark of another lineage is taken too.
    pub parent_any: bool,
    /// The parent of every subvolume, as a bookmark (`--parent-bookmark`,
    /// or `-p` naming a bookmark file).
    pub bookmark: Option<&'a Arc<Bookmark>>,
    /// With `listing`: where bookmarks are kept, named by the uuid the
    /// destination knows each snapshot by (`--bookmarks`); a snapshot the
    /// destination holds and the source no longer has can be the parent
    /// through its bookmark there.
    pub bookmarks: Option<&'a Path>,
}

/// What a send plan tells as it is made.
pub trait Notes {
    /// `--parent-from` picked `pick` for `sv`, among `listed` subvolumes
    /// the destination holds.
    fn picked(&mut self, sv: &Subvolume, pick: &Pick<'_>, listed: usize);
    /// The parent of `sv` is not related to it: the stream holds more
    /// than the change.
    fn unrelated(&mut self, sv: &Subvolume, parent: &Subvolume);
    /// `--parent-from` passed over a bookmark in the `--bookmarks`
    /// directory that could have been the parent of `sv`: it cannot be
    /// read, or is not of the snapshot its name and the destination say.
    fn bookmark_skipped(&mut self, sv: &Subvolume, why: &BookmarkError);
}

/// What `--parent-from` picked, and why.
#[derive(Clone, Copy, Debug)]
pub enum Pick<'a> {
    /// With `--parent-any`: the newest snapshot the destination holds
    /// complete, of any subvolume.
    NewestOfAny(&'a Subvolume),
    /// The newest older snapshot of the lineage of the one sent that the
    /// destination holds complete.
    NewestOlder {
        /// The parent.
        parent: &'a Subvolume,
        /// Whether it is of the same origin (a snapshot of the same
        /// subvolume), not only of the same lineage.
        same_origin: bool,
    },
    /// With `--parent-any`: as [`Pick::NewestOfAny`], a snapshot the
    /// source no longer has, read from its bookmark.
    BookmarkOfAny(&'a Bookmark),
    /// As [`Pick::NewestOlder`], a snapshot the source no longer has,
    /// read from its bookmark.
    BookmarkOlder {
        /// The bookmark of the parent.
        bookmark: &'a Bookmark,
        /// Whether its snapshot is of the same origin as the one sent.
        same_origin: bool,
    },
    /// A full send: the destination holds none of the filesystem's
    /// snapshots complete.
    NoneHeld,
    /// A full send: it holds `others`, none of the lineage of the one sent.
    NoKin {
        /// How many of other subvolumes it holds.
        others: usize,
    },
    /// A full send: it holds only `newer` ones of the lineage.
    NoneOlder {
        /// How many newer ones it holds.
        newer: usize,
    },
}

/// The parent and clone sources one subvolume is sent against.
#[derive(Clone, Debug, Default)]
pub struct Against {
    /// The parent; none for a full send, or one from a bookmark.
    pub parent: Option<Subvolume>,
    /// The parent as a bookmark (its tree read from the file).
    pub bookmark: Option<Arc<Bookmark>>,
    /// The clone sources (the parent among them).
    pub clone_srcs: Vec<Subvolume>,
}

/// The plan of a send.
#[derive(Clone, Debug)]
pub enum Plan {
    /// Send each subvolume (in order) against these.
    Send(Vec<Against>),
    /// `--parent-from`: the destination holds the one subvolume asked
    /// for complete already (its uuid as the destination knows it), so
    /// there is nothing to send.
    Held(uuid::Uuid),
}

/// The protocol version of a send of `subvols` subvolumes asked for
/// `proto` (0: the default; `given`: with `--proto`): a resumed one is the
/// token's, and continues one stream.
pub fn resume_version(
    proto: u32,
    given: bool,
    resume: Option<&Token>,
    subvols: usize,
) -> Result<u32, PlanError> {
    let Some(t) = resume else {
        return Ok(proto);
    };
    if subvols != 1 {
        return Err(PlanError::ResumeOneSubvol);
    }
    let asked = if proto == 0 {
        DEFAULT_HIGHEST_PROTO
    } else {
        proto
    };
    if given && asked != t.version {
        return Err(PlanError::ResumeProto {
            version: t.version,
            given: proto,
        });
    }
    Ok(t.version)
}

/// The parents and clone sources of `svs` (found already), as `ask` asks.
pub fn plan(
    fs: &Filesystem,
    svs: &[Subvolume],
    ask: &Ask<'_>,
    notes: &mut dyn Notes,
) -> Result<Plan, PlanError> {
    let mut parent = match ask.parent {
        Some(sel) => Some(find_parent(fs, sel)?),
        None => None,
    };
    if let Some(b) = ask.bookmark {
        for sv in svs {
            b.check_parent_of(fs, sv, ask.parent_any)?;
        }
    }
    // A bookmark `--parent-from` picked: the first subvolume's parent.
    let mut kept = None;
    if let Some(t) = ask.resume {
        let Some(sv) = svs.first() else {
            return Err(PlanError::ResumeOneSubvol);
        };
        match resumed_bookmark(fs, sv, parent.as_ref(), t, ask)? {
            Some(b) => kept = Some(b),
            None => parent = check_resume(fs, sv, parent, t)?,
        }
    } else if let (Some(list), Some(sv)) = (ask.listing, svs.first()) {
        match parent_from_list(fs, sv, list, ask, notes)? {
            FromList::Parent(p) => parent = p.map(|p| *p),
            FromList::Bookmark(b) => kept = Some(b),
            FromList::Held(own) if svs.len() == 1 => return Ok(Plan::Held(own)),
            FromList::Held(own) => {
                return Err(PlanError::AlreadyHeld {
                    label: sv.label(),
                    own,
                })
            }
        }
    }
    let mut sources = Vec::new();
    for sel in ask.clone_srcs {
        sources.push(find_source(fs, sel, "clone source")?);
    }
    let bookmark = ask.bookmark.cloned().or(kept);
    let policy = Policy {
        fixed: ask.parent.is_some() || ask.bookmark.is_some(),
        incremental: parent.is_some() || bookmark.is_some() || !ask.clone_srcs.is_empty(),
        parent,
        bookmark,
    };
    policy.against(fs, svs, sources, notes).map(Plan::Send)
}

/// How the parents of several subvolumes are chosen, as btrfs send does:
/// with -p every subvolume is sent against that parent, the parent and
/// the -c sources its clone sources; with -c alone each one's parent is
/// picked among the clone sources, which grow by each subvolume sent;
/// with neither all are full. A parent (or bookmark) that --parent-from
/// picked is the first subvolume's; the others' are picked as with -c.
struct Policy {
    /// The parent given or picked.
    parent: Option<Subvolume>,
    /// Whether it is every subvolume's (`-p`).
    fixed: bool,
    /// Whether the sends are incremental (a parent or clone sources).
    incremental: bool,
    /// The parent as a bookmark: of every subvolume (`fixed`), or of the
    /// first.
    bookmark: Option<Arc<Bookmark>>,
}

impl Policy {
    /// Each of `svs` with its parent and clone sources.
    fn against(
        &self,
        fs: &Filesystem,
        svs: &[Subvolume],
        mut sources: Vec<Subvolume>,
        notes: &mut dyn Notes,
    ) -> Result<Vec<Against>, PlanError> {
        if let Some(p) = &self.parent {
            sources.push(p.clone());
        }
        let mut out = Vec::new();
        for (i, sv) in svs.iter().enumerate() {
            let bookmark = self.bookmark.clone().filter(|_| self.fixed || i == 0);
            let p = match (&self.parent, i) {
                _ if bookmark.is_some() => None,
                (Some(p), _) if self.fixed => Some(p.clone()),
                (Some(p), 0) => Some(p.clone()),
                _ if self.incremental => Some(pick_parent(fs, sv, &sources)?.clone()),
                _ => None,
            };
            if let Some(p) = p.as_ref().filter(|p| !related(sv, p)) {
                notes.unrelated(sv, p);
            }
            let mut set = sources.clone();
            if let Some(p) = p.as_ref().filter(|p| !set.iter().any(|c| c.id == p.id)) {
                set.push(p.clone());
            }
            out.push(Against {
                parent: p,
                bookmark,
                clone_srcs: set,
            });
            if self.incremental && !self.fixed {
                sources.push(sv.clone());
            }
        }
        Ok(out)
    }
}

/// What `--parent-from` found in the destination's list.
enum FromList {
    /// The parent to send against; none for a full send.
    Parent(Option<Box<Subvolume>>),
    /// The bookmark of a snapshot the source no longer has, to send
    /// against.
    Bookmark(Arc<Bookmark>),
    /// The destination holds the snapshot sent complete already (its
    /// uuid as the destination knows it): there is nothing to send.
    Held(uuid::Uuid),
}

/// The parent `--parent-from` picks for `sv`: among the read-only
/// snapshots that the destination holds complete, other than `sv`, the
/// newest (by ctransid, then id) that is of `sv`'s lineage and older than
/// it; with `parent_any`, the newest of them all. With `bookmarks`, a
/// snapshot the destination holds complete and the source no longer has
/// counts too, through its bookmark there ([`kept`]). [`FromList::Held`]
/// when the destination holds `sv` itself complete.
fn parent_from_list(
    fs: &Filesystem,
    sv: &Subvolume,
    list: &str,
    ask: &Ask<'_>,
    notes: &mut dyn Notes,
) -> Result<FromList, PlanError> {
    let any = ask.parent_any;
    let held = parse_list(list)?;
    let complete: HashSet<uuid::Uuid> = held
        .iter()
        .filter(|h| h.complete())
        .map(|h| h.received_uuid)
        .collect();
    let own = stream_uuid_of(sv);
    if complete.contains(&own) {
        return Ok(FromList::Held(own));
    }
    let all = fs.subvolumes()?;
    let there: Vec<&Subvolume> = all
        .iter()
        .filter(|c| c.id != sv.id && c.is_readonly() && !c.is_dead())
        .filter(|c| complete.contains(&stream_uuid_of(c)))
        .collect();
    let newest = |c: &&&Subvolume| (c.ctransid, c.id);
    let lineage = Lineage::of(sv, &all);
    let kin: Vec<&&Subvolume> = there.iter().filter(|c| lineage.contains(c)).collect();
    let older = kin
        .iter()
        .filter(|c| (c.ctransid, c.id) < (sv.ctransid, sv.id))
        .max_by_key(|c| (c.ctransid, c.id));
    if let Some(dir) = ask.bookmarks {
        let best: Option<&Subvolume> = match any {
            true => there.iter().max_by_key(newest).copied(),
            false => older.map(|p| **p),
        };
        let gone = kept::Gone {
            sv,
            held: &held,
            all: &all,
            any,
        };
        let mut skipped = |e: BookmarkError| notes.bookmark_skipped(sv, &e);
        if let Some(b) = gone.newest_bookmark(fs, dir, best, &mut skipped) {
            let pick = match any {
                true => Pick::BookmarkOfAny(&b),
                false => Pick::BookmarkOlder {
                    bookmark: &b,
                    same_origin: same_origin(sv, b.subvolume()),
                },
            };
            notes.picked(sv, &pick, held.len());
            return Ok(FromList::Bookmark(Arc::new(b)));
        }
    }
    let mut tell = |pick: Pick<'_>| notes.picked(sv, &pick, held.len());
    if there.is_empty() {
        tell(Pick::NoneHeld);
        return Ok(FromList::Parent(None));
    }
    if any {
        let best = there.iter().max_by_key(newest).map(|p| (*p).clone());
        if let Some(p) = &best {
            tell(Pick::NewestOfAny(p));
        }
        return Ok(FromList::Parent(best.map(Box::new)));
    }
    match older {
        Some(p) => {
            tell(Pick::NewestOlder {
                parent: p,
                same_origin: same_origin(sv, p),
            });
            Ok(FromList::Parent(Some(Box::new((**p).clone()))))
        }
        None if kin.is_empty() => {
            tell(Pick::NoKin {
                others: there.len(),
            });
            Ok(FromList::Parent(None))
        }
        None => {
            tell(Pick::NoneOlder { newer: kin.len() });
            Ok(FromList::Parent(None))
        }
    }
}

/// Whether `p` is a snapshot of the same subvolume as `sv` (or that
/// subvolume itself), not only of its lineage.
fn same_origin(sv: &Subvolume, p: &Subvolume) -> bool {
    let origin = sv.parent_uuid;
    !origin.is_nil() && (p.parent_uuid == origin || p.uuid == origin)
}

/// The bookmark a resumed send continues against: the one given (it must
/// be the token's parent), or with `--bookmarks` the token's parent's when
/// the snapshot is gone from the source. None: the parent is a snapshot,
/// or there is none.
fn resumed_bookmark(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<&Subvolume>,
    t: &Token,
    ask: &Ask<'_>,
) -> Result<Option<Arc<Bookmark>>, PlanError> {
    if let Some(b) = ask.bookmark {
        check_resume(fs, sv, Some(b.subvolume().clone()), t)?;
        return Ok(Some(b.clone()));
    }
    let (Some(dir), None, Some((pu, _))) = (ask.bookmarks, parent, t.parent) else {
        return Ok(None);
    };
    if find_parent(fs, &SubvolSelector::Uuid(pu)).is_ok() {
        return Ok(None);
    }
    let path = dir.join(crate::bookmark::file_name(&pu));
    if !path.exists() {
        return Ok(None);
    }
    let b = Bookmark::open(&path)?;
    b.check_parent_of(fs, sv, ask.parent_any)?;
    check_resume(fs, sv, Some(b.subvolume().clone()), t)?;
    Ok(Some(Arc::new(b)))
}

/// The snapshot and parent a resumed send continues: `sv` must be the
/// token's, and so must the parent (found by its uuid when not given).
fn check_resume(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<Subvolume>,
    t: &Token,
) -> Result<Option<Subvolume>, PlanError> {
    let own = stream_uuid_of(sv);
    if own != t.uuid || sv.ctransid != t.ctransid {
        return Err(PlanError::ResumeOtherSnapshot {
            uuid: t.uuid,
            ctransid: t.ctransid,
            label: sv.label(),
            own,
            own_ctransid: sv.ctransid,
        });
    }
    match (t.parent, parent) {
        (None, None) => Ok(None),
        (None, Some(p)) => Err(PlanError::ResumeWasFull { parent: p.label() }),
        (Some((pu, pc)), Some(p)) => {
            let u = stream_uuid_of(&p);
            if u != pu || p.ctransid != pc {
                return Err(PlanError::ResumeOtherParent {
                    uuid: pu,
                    ctransid: pc,
                    parent: p.label(),
                    own: u,
                    own_ctransid: p.ctransid,
                });
            }
            Ok(Some(p))
        }
        (Some((pu, pc)), None) => {
            let p = find_parent(fs, &SubvolSelector::Uuid(pu)).map_err(|e| {
                PlanError::ResumeNoParent {
                    uuid: pu,
                    source: Box::new(e),
                }
            })?;
            if p.ctransid != pc {
                return Err(PlanError::ResumeParentChanged {
                    parent: p.label(),
                    own_ctransid: p.ctransid,
                    ctransid: pc,
                });
            }
            Ok(Some(p))
        }
    }
}

/// Finds the parent `sel` and checks that it can be one (read-only, alive).
fn find_parent(fs: &Filesystem, sel: &SubvolSelector) -> Result<Subvolume, PlanError> {
    find_source(fs, sel, "parent")
}

/// Finds `sel`, a parent or (`role`) clone source, and checks that it can
/// be one (read-only, alive, not the top level).
fn find_source(
    fs: &Filesystem,
    sel: &SubvolSelector,
    role: &'static str,
) -> Result<Subvolume, PlanError> {
    use btrfs_disk::error::Error::NoSubvolume;
    // A parent may be named by its uuid (or received uuid) too.
    let by_uuid = match sel {
        SubvolSelector::Path(p) => p.to_str().and_then(|s| uuid::Uuid::parse_str(s).ok()),
        _ => None,
    };
    if matches!(sel, SubvolSelector::Uuid(u) if u.is_nil()) {
        return Err(PlanError::NilUuid { role });
    }
    let found = match (fs.find_subvolume(sel), by_uuid) {
        (Err(NoSubvolume(_)), Some(u)) if u.is_nil() => {
            return Err(PlanError::NilUuid { role });
        }
        (Err(NoSubvolume(_)), Some(u)) => {
            fs.find_subvolume(&SubvolSelector::Uuid(u))
                .map_err(|e| match e {
                    NoSubvolume(_) => PlanError::NoSuchUuid {
                        fsid: fs.fsid(),
                        uuid: u,
                    },
                    other => other.into(),
                })?
        }
        (Ok(sv), _) => sv,
        (Err(e), _) => return Err(parent_missing(fs, e)),
    };
    if found.id == btrfs_disk::items::objectid::FS_TREE {
        return Err(PlanError::TopLevel { role });
    }
    if role == "parent" {
        check_parent(&found)?;
    } else {
        check_clone_source(&found)?;
    }
    Ok(found)
}

/// The error for a parent that is not there, listing the subvolumes that are.
fn parent_missing(fs: &Filesystem, e: btrfs_disk::error::Error) -> PlanError {
    let btrfs_disk::error::Error::NoSubvolume(asked) = e else {
        return e.into();
    };
    match fs.subvolumes() {
        Ok(list) => PlanError::NoParent {
            fsid: fs.fsid(),
            asked,
            available: list
                .iter()
                .map(|s| {
                    let ro = if s.is_readonly() { ", read-only" } else { "" };
                    format!("{} (id {}{ro})", s.path_lossy(), s.id)
                })
                .collect(),
        },
        Err(e) => e.into(),
    }
}

/// btrfs-progs' find_good_parent: among the clone sources, the send
/// root's origin (its parent_uuid), else the snapshot of the same origin
/// closest in ctransid to it; else (where btrfs-progs gives up) the one of
/// its lineage ([`crate::lineage`]: linked by snapshots and receives)
/// closest in ctransid to the send root. Never one of another lineage.
fn pick_parent<'a>(
    fs: &Filesystem,
    sv: &Subvolume,
    sources: &'a [Subvolume],
) -> Result<&'a Subvolume, PlanError> {
    let origin = sv.parent_uuid;
    if !origin.is_nil() {
        if let Some(p) = sources.iter().find(|c| c.uuid == origin) {
            return Ok(p);
        }
        let origin_ctransid = match fs.find_subvolume(&SubvolSelector::Uuid(origin)) {
            Ok(o) => o.ctransid,
            Err(btrfs_disk::error::Error::NoSubvolume(_)) => sv.ctransid,
            Err(e) => return Err(e.into()),
        };
        let sibling = sources
            .iter()
            .filter(|c| c.id != sv.id && c.parent_uuid == origin)
            .min_by_key(|c| c.ctransid.abs_diff(origin_ctransid));
        if let Some(p) = sibling {
            return Ok(p);
        }
    }
    let lineage = Lineage::of(sv, &fs.subvolumes()?);
    sources
        .iter()
        .filter(|c| c.id != sv.id && lineage.contains(c))
        .min_by_key(|c| c.ctransid.abs_diff(sv.ctransid))
        .ok_or_else(|| PlanError::NoParentAmongSources { label: sv.label() })
}
