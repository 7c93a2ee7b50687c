//! Saying what the send plan ([`rsend::plan`]) picked: the parent
//! `--parent-from` chose and why (from its bookmark when the source lost
//! it), a bookmark it passed over, a parent unrelated to the snapshot
//! sent; and reading the list `--parent-from` names.

use std::path::Path;

use anyhow::Context;
use btrfs_disk::subvol::Subvolume;
use btrfs_text::plain_io;
use rsend::bookmark::{Bookmark, BookmarkError};
use rsend::plan::{Notes, Pick, PlanError};
use rsend::send::stream_uuid_of;

/// What the plan tells, on standard error unless `-q`.
pub(crate) struct Said {
    /// Print nothing.
    pub(crate) quiet: bool,
}

impl Notes for Said {
    fn picked(&mut self, sv: &Subvolume, pick: &Pick<'_>, listed: usize) {
        if self.quiet {
            return;
        }
        // Why this parent, or why a full send, and "(N listed there; more)".
        let said = |p: &Subvolume, why: String, more: &str| {
            eprintln!(
                "rsend: parent {} (subvolume {}, uuid {}): {why} ({listed} listed there{more})",
                p.path_lossy(),
                p.id,
                stream_uuid_of(p),
            );
        };
        // The same from a bookmark of a snapshot the source lost.
        let kept = |b: &Bookmark, why: String, more: &str| {
            let p = b.subvolume();
            eprintln!(
                "rsend: parent {} (uuid {}) from its bookmark {} (the snapshot is gone from the \
                 source): {why} ({listed} listed there{more})",
                p.path_lossy(),
                stream_uuid_of(p),
                b.path().display(),
            );
        };
        let full = |why: String, more: String| {
            eprintln!(
                "rsend: {why} ({listed} listed there{more}): sending {} in full",
                sv.label()
            );
        };
        match *pick {
            Pick::NewestOfAny(p) => said(
                p,
                "the newest of this filesystem's snapshots the destination holds complete, \
                 of any subvolume"
                    .into(),
                "; --parent-any",
            ),
            Pick::NewestOlder {
                parent,
                same_origin,
            } => said(
                parent,
                format!(
                    "{} as {}, the newest older snapshot the destination holds complete",
                    kinship(same_origin),
                    sv.path_lossy()
                ),
                "",
            ),
            Pick::BookmarkOfAny(b) => kept(
                b,
                "the newest of this filesystem's snapshots the destination holds complete, \
                 of any subvolume"
                    .into(),
                "; --parent-any",
            ),
            Pick::BookmarkOlder {
                bookmark,
                same_origin,
            } => kept(
                bookmark,
                format!(
                    "{} as {}, the newest older snapshot the destination holds complete",
                    kinship(same_origin),
                    sv.path_lossy()
                ),
                "",
            ),
            Pick::NoneHeld => full(
                "the destination holds none of this filesystem's snapshots complete".into(),
                String::new(),
            ),
            Pick::NoKin { others } => full(
                format!(
                    "the destination holds no snapshot of the same subvolume as {} complete",
                    sv.path_lossy()
                ),
                format!("; {others} of other subvolumes, which --parent-any would take"),
            ),
            Pick::NoneOlder { newer } => full(
                format!(
                    "the destination holds no older snapshot of the same subvolume as {} complete",
                    sv.path_lossy()
                ),
                format!("; {newer} newer ones"),
            ),
        }
    }

    fn bookmark_skipped(&mut self, sv: &Subvolume, why: &BookmarkError) {
        if !self.quiet {
            eprintln!(
                "rsend: warning: {why}; not using it as the parent of {}",
                sv.label()
            );
        }
    }

    fn unrelated(&mut self, sv: &Subvolume, p: &Subvolume) {
        if !self.quiet {
            eprintln!(
                "rsend: warning: parent {} is not related to {} (neither is a snapshot of the other or of the same subvolume); the stream is correct but holds more than the change",
                p.label(),
                sv.label()
            );
        }
    }
}

/// How a parent `--parent-from` picked is related to the snapshot sent.
fn kinship(same_origin: bool) -> &'static str {
    if same_origin {
        "of the same subvolume"
    } else {
        "of the same lineage (linked by snapshots and receives)"
    }
}

/// `e` as the command line reports it; a send's own error stays one
/// (see [`crate::named::hint_top_level`]).
pub(crate) fn plan_error(e: PlanError) -> anyhow::Error {
    match e {
        PlanError::Send(e) => e.into(),
        e => e.into(),
    }
}

/// The text of `--parent-from FILE` (`-`: standard input).
pub(crate) fn read_list(path: &Path) -> anyhow::Result<String> {
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
