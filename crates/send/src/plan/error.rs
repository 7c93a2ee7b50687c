//! Why a send plan could not be made: the errors of [`crate::plan`].

use btrfs_disk::error::SubvolWanted;

use crate::send::{list_or_none, SendError};

/// What `--parent-from` says when the list does not end with the end
/// line `rreceive --list` prints last.
const CUT_LIST: &str = "the destination's listing is missing or cut short (no end line from \
     rreceive --list";
/// ... and what it does then.
const NOT_SENDING: &str = "not sending, to avoid a full send by mistake";

/// What a path not found with `-d` is taken as, and what else could be meant.
pub const TOP_LEVEL_HINT: &str = "paths given with -d are from the top level of the filesystem; \
     a path on a mounted btrfs can be given without -d";

/// Why the parents and clone sources of a send could not be chosen.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The bookmark asked for cannot be the parent.
    #[error(transparent)]
    Bookmark(#[from] crate::bookmark::BookmarkError),
    /// A resumed send was given more than one subvolume.
    #[error("--resume continues one stream: give exactly one SUBVOL")]
    ResumeOneSubvol,
    /// The protocol version asked for is not the resumed stream's.
    #[error(
        "cannot resume: the stream received before is protocol version {version}, and --proto \
         {given} was given"
    )]
    ResumeProto {
        /// The resumed stream's version.
        version: u32,
        /// The version given.
        given: u32,
    },
    /// The snapshot is not the one the resume token is for.
    #[error(
        "cannot resume: the token is for the snapshot with uuid {uuid} (ctransid {ctransid}), \
         and {label} has uuid {own} (ctransid {own_ctransid})"
    )]
    ResumeOtherSnapshot {
        /// The token's snapshot uuid.
        uuid: uuid::Uuid,
        /// The token's snapshot ctransid.
        ctransid: u64,
        /// The snapshot given.
        label: String,
        /// Its stream uuid.
        own: uuid::Uuid,
        /// Its ctransid.
        own_ctransid: u64,
    },
    /// A parent was given to resume a full stream.
    #[error(
        "cannot resume: the stream received before was a full one, and -p {parent} asks for an \
         incremental one"
    )]
    ResumeWasFull {
        /// The parent given.
        parent: String,
    },
    /// The parent given is not the resumed stream's.
    #[error(
        "cannot resume: the stream received before was against the parent with uuid {uuid} \
         (ctransid {ctransid}), and -p {parent} has uuid {own} (ctransid {own_ctransid})"
    )]
    ResumeOtherParent {
        /// The token's parent uuid.
        uuid: uuid::Uuid,
        /// The token's parent ctransid.
        ctransid: u64,
        /// The parent given.
        parent: String,
        /// Its stream uuid.
        own: uuid::Uuid,
        /// Its ctransid.
        own_ctransid: u64,
    },
    /// The resumed stream's parent could not be found.
    #[error("cannot resume: the parent of the stream received before (uuid {uuid})")]
    ResumeNoParent {
        /// The token's parent uuid.
        uuid: uuid::Uuid,
        /// Why it was not found.
        #[source]
        source: Box<PlanError>,
    },
    /// The resumed stream's parent changed since.
    #[error(
        "cannot resume: the parent {parent} has ctransid {own_ctransid}, and the stream received \
         before had {ctransid}"
    )]
    ResumeParentChanged {
        /// The parent.
        parent: String,
        /// Its ctransid now.
        own_ctransid: u64,
        /// The token's.
        ctransid: u64,
    },
    /// A parent or clone source (`role`) was given as the nil uuid.
    #[error(
        "{role} {}: the nil uuid names no subvolume (it is the received uuid of every subvolume \
         that was never received); give the {role}'s path, id or uuid",
        uuid::Uuid::nil()
    )]
    NilUuid {
        /// `parent` or `clone source`.
        role: &'static str,
    },
    /// No subvolume has the uuid given as a parent.
    #[error(
        "parent not found: no subvolume of this filesystem (fsid {fsid}) has uuid or received \
         uuid {uuid}; is the parent on another filesystem?"
    )]
    NoSuchUuid {
        /// The filesystem's fsid.
        fsid: uuid::Uuid,
        /// The uuid given.
        uuid: uuid::Uuid,
    },
    /// No subvolume is the parent asked for.
    #[error(
        "parent not found: this filesystem (fsid {fsid}) has no subvolume {asked}{}; it has: {}",
        match asked {
            SubvolWanted::Path(_) => format!(" ({TOP_LEVEL_HINT})"),
            _ => String::new(),
        },
        list_or_none(available)
    )]
    NoParent {
        /// The filesystem's fsid.
        fsid: uuid::Uuid,
        /// What was asked for.
        asked: SubvolWanted,
        /// The subvolumes there are, with their ids.
        available: Vec<String>,
    },
    /// The top level was given as a parent or clone source (`role`).
    #[error(
        "the top level (subvolume 5) cannot be a {role}: it is not a read-only snapshot; give a \
         read-only snapshot of it (btrfs subvolume snapshot -r MNT MNT/snap)"
    )]
    TopLevel {
        /// `parent` or `clone source`.
        role: &'static str,
    },
    /// No clone source can be the parent of a subvolume.
    #[error(
        "parent determination failed for {label}: no clone source is its origin, a snapshot of \
         it or of its lineage (give the parent with -p)"
    )]
    NoParentAmongSources {
        /// The subvolume.
        label: String,
    },
    /// The destination holds one of several subvolumes to send already.
    #[error(
        "the destination already holds {label} complete (received uuid {own}): leave it out of \
         the SUBVOLs to send"
    )]
    AlreadyHeld {
        /// The subvolume.
        label: String,
        /// Its uuid as the destination knows it.
        own: uuid::Uuid,
    },
    /// The destination's listing is empty.
    #[error("{CUT_LIST}; the list is empty): {NOT_SENDING}")]
    ListEmpty,
    /// The destination's listing has no end line.
    #[error("{CUT_LIST}; it stops at line {line}): {NOT_SENDING}")]
    ListCut {
        /// Its last line (from 1).
        line: usize,
    },
    /// The destination's listing has an end line before its last.
    #[error(
        "the destination's listing goes on after its end line (line {line} of {of}): \
         {NOT_SENDING}"
    )]
    ListAfterEnd {
        /// The end line (from 1).
        line: usize,
        /// The lines there are.
        of: usize,
    },
    /// A line of the destination's listing is not one `rreceive --list` prints.
    #[error("line {line} of the list is not what rreceive --list prints: {text:?}")]
    ListLine {
        /// The line (from 1).
        line: usize,
        /// What it says.
        text: String,
    },
    /// The destination's end line counts other than the lines listed.
    #[error(
        "the destination's listing is cut short: its end line (line {line}) counts {count} \
         subvolumes and {listed} are listed: {NOT_SENDING}"
    )]
    ListCount {
        /// The end line (from 1).
        line: usize,
        /// What it counts.
        count: u64,
        /// The subvolume lines there are.
        listed: usize,
    },
    /// A parent or clone source cannot be one.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The filesystem could not be read.
    #[error(transparent)]
    Disk(#[from] btrfs_disk::error::Error),
}
