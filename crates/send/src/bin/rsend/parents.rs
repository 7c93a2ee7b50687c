//! Choosing the parent of an incremental send: as `-p` names it, as
//! `--parent-from` picks it from what the destination holds, as
//! `--resume` continues it, or among the clone sources (`-c`).

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::SubvolSelector;
use btrfs_stream::resume::Token;
use btrfs_text::plain_io;
use rsend::lineage::Lineage;
use rsend::send::{check_clone_source, check_parent, list_or_none, stream_uuid_of};

use crate::held::parse_list;
use crate::named::TOP_LEVEL_HINT;

/// How a parent `--parent-from` picked is related to the snapshot sent.
fn kinship(sv: &Subvolume, p: &Subvolume) -> &'static str {
    let origin = sv.parent_uuid;
    if !origin.is_nil() && (p.parent_uuid == origin || p.uuid == origin) {
        "of the same subvolume"
    } else {
        "of the same lineage (linked by snapshots and receives)"
    }
}

/// What `--parent-from` found in the destination's list.
pub(crate) enum FromList {
    /// The parent to send against; none for a full send.
    Parent(Option<Box<Subvolume>>),
    /// The destination holds the snapshot sent complete already (its
    /// uuid as the destination knows it): there is nothing to send.
    Held(uuid::Uuid),
}

/// The parent `--parent-from` picks for `sv`: among the read-only
/// snapshots that the destination holds complete, other than `sv`, the
/// newest (by ctransid, then id) that is of `sv`'s lineage and older than
/// it; with `any`, the newest of them all. [`FromList::Held`] when the
/// destination holds `sv` itself complete.
pub(crate) fn parent_from_list(
    fs: &Filesystem,
    sv: &Subvolume,
    path: &Path,
    any: bool,
    quiet: bool,
) -> anyhow::Result<FromList> {
    let held = parse_list(&read_list(path)?)?;
    let complete: HashSet<uuid::Uuid> =
        held.iter().filter(|h| h.complete).map(|h| h.uuid).collect();
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
    let listed = held.len();
    // What is said: why this parent, or why a full send, and "(N listed
    // there; more)".
    let said = |p: &Subvolume, why: String, more: &str| {
        if !quiet {
            eprintln!(
                "rsend: parent {} (subvolume {}, uuid {}): {why} ({listed} listed there{more})",
                p.path_lossy(),
                p.id,
                stream_uuid_of(p),
            );
        }
    };
    let full = |why: String, more: String| {
        if !quiet {
            eprintln!(
                "rsend: {why} ({listed} listed there{more}): sending {} in full",
                sv.label()
            );
        }
    };
    if there.is_empty() {
        full(
            "the destination holds none of this filesystem's snapshots complete".into(),
            String::new(),
        );
        return Ok(FromList::Parent(None));
    }
    if any {
        let best = there.iter().max_by_key(newest).map(|p| (*p).clone());
        if let Some(p) = &best {
            said(
                p,
                "the newest of this filesystem's snapshots the destination holds complete, \
                 of any subvolume"
                    .into(),
                "; --parent-any",
            );
        }
        return Ok(FromList::Parent(best.map(Box::new)));
    }
    let lineage = Lineage::of(sv, &all);
    let kin: Vec<&&Subvolume> = there.iter().filter(|c| lineage.contains(c)).collect();
    let older = kin
        .iter()
        .filter(|c| (c.ctransid, c.id) < (sv.ctransid, sv.id))
        .max_by_key(|c| (c.ctransid, c.id));
    match older {
        Some(p) => {
            said(
                p,
                format!(
                    "{} as {}, the newest older snapshot the destination holds complete",
                    kinship(sv, p),
                    sv.path_lossy()
                ),
                "",
            );
            Ok(FromList::Parent(Some(Box::new((**p).clone()))))
        }
        None if kin.is_empty() => {
            full(
                format!(
                    "the destination holds no snapshot of the same subvolume as {} complete",
                    sv.path_lossy()
                ),
                format!(
                    "; {} of other subvolumes, which --parent-any would take",
                    there.len()
                ),
            );
            Ok(FromList::Parent(None))
        }
        None => {
            full(
                format!(
                    "the destination holds no older snapshot of the same subvolume as {} complete",
                    sv.path_lossy()
                ),
                format!("; {} newer ones", kin.len()),
            );
            Ok(FromList::Parent(None))
        }
    }
}

/// The text of `--parent-from FILE` (`-`: standard input).
fn read_list(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut s)
            .context("reading the destination's list from standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "--parent-from {}: {} (give the output of rreceive --list DEST, or - for standard input)",
            path.display(),
            plain_io(&e)
        )
    })
}

/// The snapshot and parent a resumed send continues: `sv` must be the
/// token's, and so must the parent (found by its uuid when not given).
pub(crate) fn check_resume(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<Subvolume>,
    t: &Token,
) -> anyhow::Result<Option<Subvolume>> {
    let own = stream_uuid_of(sv);
    if own != t.uuid || sv.ctransid != t.ctransid {
        anyhow::bail!(
            "cannot resume: the token is for the snapshot with uuid {} (ctransid {}), and {} has uuid {own} (ctransid {})",
            t.uuid,
            t.ctransid,
            sv.label(),
            sv.ctransid
        );
    }
    match (t.parent, parent) {
        (None, None) => Ok(None),
        (None, Some(p)) => anyhow::bail!(
            "cannot resume: the stream received before was a full one, and -p {} asks for an incremental one",
            p.label()
        ),
        (Some((pu, pc)), Some(p)) => {
            let u = stream_uuid_of(&p);
            if u != pu || p.ctransid != pc {
                anyhow::bail!(
                    "cannot resume: the stream received before was against the parent with uuid {pu} (ctransid {pc}), and -p {} has uuid {u} (ctransid {})",
                    p.label(),
                    p.ctransid
                );
            }
            Ok(Some(p))
        }
        (Some((pu, pc)), None) => {
            let p = find_parent(fs, &SubvolSelector::Uuid(pu)).with_context(|| {
                format!("cannot resume: the parent of the stream received before (uuid {pu})")
            })?;
            if p.ctransid != pc {
                anyhow::bail!(
                    "cannot resume: the parent {} has ctransid {}, and the stream received before had {pc}",
                    p.label(),
                    p.ctransid
                );
            }
            Ok(Some(p))
        }
    }
}

/// Finds the parent `sel` and checks that it can be one (read-only, alive).
pub(crate) fn find_parent(fs: &Filesystem, sel: &SubvolSelector) -> anyhow::Result<Subvolume> {
    find_source(fs, sel, "parent")
}

/// Finds `sel`, a parent or (`role`) clone source, and checks that it can
/// be one (read-only, alive, not the top level).
pub(crate) fn find_source(
    fs: &Filesystem,
    sel: &SubvolSelector,
    role: &str,
) -> anyhow::Result<Subvolume> {
    // A parent may be named by its uuid (or received uuid) too.
    let by_uuid = match sel {
        SubvolSelector::Path(p) => p.to_str().and_then(|s| uuid::Uuid::parse_str(s).ok()),
        _ => None,
    };
    let nil_asked = match sel {
        SubvolSelector::Uuid(u) => u.is_nil(),
        _ => false,
    };
    if nil_asked {
        return Err(nil_uuid(role));
    }
    let found = match (fs.find_subvolume(sel), by_uuid) {
        (Err(btrfs_disk::error::Error::NoSubvolume(_)), Some(u)) if u.is_nil() => {
            return Err(nil_uuid(role));
        }
        (Err(btrfs_disk::error::Error::NoSubvolume(_)), Some(u)) => {
            fs.find_subvolume(&SubvolSelector::Uuid(u)).map_err(|e| match e {
                btrfs_disk::error::Error::NoSubvolume(_) => anyhow::anyhow!(
                    "parent not found: no subvolume of this filesystem (fsid {}) has uuid or received uuid {u}; is the parent on another filesystem?",
                    fs.fsid()
                ),
                other => other.into(),
            })?
        }
        (r, _) => match r {
            Ok(sv) => sv,
            Err(e) => return Err(parent_missing(fs, e)),
        },
    };
    if found.id == btrfs_disk::items::objectid::FS_TREE {
        anyhow::bail!(
            "the top level (subvolume 5) cannot be a {role}: it is not a read-only snapshot; give a read-only snapshot of it (btrfs subvolume snapshot -r MNT MNT/snap)"
        );
    }
    if role == "parent" {
        check_parent(&found)?;
    } else {
        check_clone_source(&found)?;
    }
    Ok(found)
}

/// The error for a parent or clone source (`role`) given as the nil uuid,
/// which every subvolume never received has as its received uuid.
fn nil_uuid(role: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{role} {}: the nil uuid names no subvolume (it is the received uuid of every subvolume that was never received); give the {role}'s path, id or uuid",
        uuid::Uuid::nil()
    )
}

/// The error for a parent that is not there, listing the subvolumes that are.
fn parent_missing(fs: &Filesystem, e: btrfs_disk::error::Error) -> anyhow::Error {
    let btrfs_disk::error::Error::NoSubvolume(asked) = e else {
        return e.into();
    };
    let available = match fs.subvolumes() {
        Ok(list) => list
            .iter()
            .map(|s| {
                let ro = if s.is_readonly() { ", read-only" } else { "" };
                format!("{} (id {}{ro})", s.path_lossy(), s.id)
            })
            .collect::<Vec<_>>(),
        Err(e) => return e.into(),
    };
    let hint = match asked {
        btrfs_disk::error::SubvolWanted::Path(_) => format!(" ({TOP_LEVEL_HINT})"),
        _ => String::new(),
    };
    anyhow::anyhow!(
        "parent not found: this filesystem (fsid {}) has no subvolume {asked}{hint}; it has: {}",
        fs.fsid(),
        list_or_none(&available)
    )
}

/// btrfs-progs' find_good_parent: among the clone sources, the send
/// root's origin (its parent_uuid), else the snapshot of the same origin
/// closest in ctransid to it; else (where btrfs-progs gives up) the one of
/// its lineage ([`crate::lineage`]: linked by snapshots and receives)
/// closest in ctransid to the send root. Never one of another lineage.
pub(crate) fn pick_parent<'a>(
    fs: &Filesystem,
    sv: &Subvolume,
    sources: &'a [Subvolume],
) -> anyhow::Result<&'a Subvolume> {
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
        .ok_or_else(|| {
            anyhow::anyhow!(
                "parent determination failed for {}: no clone source is its origin, a snapshot of it or of its lineage (give the parent with -p)",
                sv.label()
            )
        })
}
