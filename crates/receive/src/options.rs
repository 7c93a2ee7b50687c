//! What a receive is asked to do ([`Options`]) and what it did ([`Stats`],
//! or on a failure [`Failure`]): plain data, calling nothing.

use std::path::PathBuf;

use crate::error::Error;
use crate::snapshot::Snapshot;
use crate::stop::StopFlag;
use crate::subvol::SubvolState;

/// How to receive.
#[derive(Debug, Clone)]
pub struct Options {
    /// The destination directory.
    pub dest: PathBuf,
    /// Stop after the first END (`-e`).
    pub stop_at_end: bool,
    /// Stop after this many failed commands; 0 = never (`-E`).
    pub max_errors: u64,
    /// Never use the encoded-write ioctl (`--force-decompress`).
    pub force_decompress: bool,
    /// Use incomplete subvolumes as parents and clone sources (`--force`).
    pub force: bool,
    /// Treat DEST as a plain directory even on btrfs (`--plain`).
    pub plain: bool,
    /// How a snapshot is made off btrfs (`--in-place`, `--link`).
    pub snapshot: Snapshot,
    /// What is reported (see [`receive_with`](crate::receive_with)): 0 errors only, 1 also the
    /// normal messages and progress, 2 details too (`-v`), 3 every
    /// command too (`-vv`).
    pub verbosity: u8,
    /// Most directories whose times are held at once until END (at least
    /// 16), with at most 128 bytes of path each on average. More are
    /// applied early, least recently used first, and read back if the
    /// directory changes again: the result is the same, only memory is
    /// bounded (about 300 bytes per directory).
    pub max_dir_times: usize,
    /// Receive as an ordinary user (`--fake-super`, as in rsync): owners,
    /// set-id bits and device numbers are recorded in the xattr
    /// `user.rreceive.stat` of each inode instead of applied; devices,
    /// fifos and sockets become empty regular files.
    pub fake_super: bool,
    /// Set (to the signal's number) when the receive must stop: it stops
    /// after the command being applied, as when the stream is cut off, so
    /// that it can be resumed.
    pub stop: Option<StopFlag>,
    /// `-m ROOTMOUNT`, as btrfs receive: the root mount point of DEST's
    /// btrfs filesystem, beneath which parents and clone sources not in
    /// DEST are searched (default: DEST's mount point, from
    /// /proc/self/mountinfo).
    pub root_mount: Option<PathBuf>,
    /// Durable checkpoints: the destination is synced now and then, with
    /// a record of where the stream stood, so that a receive cut by a
    /// power loss resumes (`--no-durable` turns them off).
    pub durable: bool,
    /// The stream is read from a stored file (`-f FILE`, or standard input
    /// redirected from one), which a resume would read again: a corrupt
    /// command in it stops the receive for good. From a pipe or socket it
    /// was corrupted on the way, and the stop is resumable.
    pub stored: bool,
    /// Wait for another rreceive receiving the same subvolume (or using
    /// the same parent) to finish, instead of stopping at once (`--wait`).
    pub wait: bool,
    /// Tell (as a notice) that the receive waits for another, whatever the
    /// verbosity (`--wait` on a terminal); with `-v` it is told anyway.
    pub tell_waiting: bool,
    /// Resume from the stream itself (`--resume`), as is done anyway when
    /// it is [`Options::stored`]: a subvolume of the stream that DEST holds
    /// incomplete, with a point to resume from, is not refused; the
    /// stream's commands up to that point are read without being applied
    /// and checked against what was applied (their byte offset and digest),
    /// and the rest applied. A stream that differs is refused
    /// ([`Error::NotTheStream`]) and the subvolume left as it was.
    pub resume: bool,
    /// The stream file's name, for messages (`None`: standard input).
    pub input: Option<PathBuf>,
}

/// The default [`Options::max_dir_times`]: about 5 MiB.
pub const MAX_DIR_TIMES: usize = 16_384;

impl Options {
    /// Defaults for `dest`: like `btrfs receive DEST`.
    pub fn new(dest: impl Into<PathBuf>) -> Options {
        Options {
            dest: dest.into(),
            stop_at_end: false,
            max_errors: 1,
            force_decompress: false,
            force: false,
            plain: false,
            snapshot: Snapshot::Copy,
            verbosity: 1,
            max_dir_times: MAX_DIR_TIMES,
            fake_super: false,
            stop: None,
            root_mount: None,
            durable: true,
            stored: false,
            wait: false,
            tell_waiting: false,
            resume: false,
            input: None,
        }
    }
}

/// What a receive did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Commands applied.
    pub commands: u64,
    /// Subvolumes finished and marked complete.
    pub subvols: u64,
    /// Inodes created.
    pub created: u64,
    /// Creates done at their final name (no rename needed).
    pub fused_renames: u64,
    /// Bytes written (WRITE and ENCODED_WRITE, unencoded).
    pub bytes_written: u64,
    /// Bytes cloned.
    pub bytes_cloned: u64,
    /// ENCODED_WRITEs done by the ioctl.
    pub encoded_ioctl: u64,
    /// ENCODED_WRITEs decoded here.
    pub encoded_decoded: u64,
    /// TRUNCATEs skipped because the size was already right.
    pub truncates_skipped: u64,
    /// CHOWNs skipped on files this receive created with that owner.
    pub chowns_skipped: u64,
    /// CHMODs folded into the create of a new file.
    pub chmods_skipped: u64,
    /// Directory UTIMES held back (only the last per directory is applied).
    pub dir_utimes_deferred: u64,
    /// Directories whose entries changed after their last UTIMES, which
    /// was applied again.
    pub dir_times_restored: u64,
    /// Directories the stream changed without sending times for them
    /// afterwards, given back the times they had before.
    pub dir_times_kept: u64,
    /// Directory times applied before END because more directories than
    /// [`Options::max_dir_times`] were held.
    pub dir_times_early: u64,
    /// Durable checkpoints taken (the destination synced, the resume
    /// record written), so that a power loss resumes.
    pub durable_checkpoints: u64,
    /// Bytes of the records those checkpoints wrote.
    pub durable_bytes: u64,
    /// Things this filesystem cannot store (xattrs, flags, verity), noted
    /// under `-v`.
    pub skipped: u64,
}

/// A failed receive.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong (the last error when several were allowed).
    pub error: Error,
    /// The subvolume left incomplete, if one was being received.
    pub incomplete: Option<PathBuf>,
    /// The parent it was applied to in place (`--in-place`), now gone.
    pub in_place_of: Option<Vec<u8>>,
    /// A parent taken over in place and given back unchanged.
    pub given_back: Option<Vec<u8>>,
    /// The incomplete subvolume's state, when it stopped cleanly and can
    /// be resumed (`rreceive --resume-token`, `rsend --resume`).
    pub resumable: Option<SubvolState>,
    /// Why the incomplete subvolume cannot be resumed, when it cannot.
    pub not_resumable: Option<String>,
    /// What was done before the failure.
    pub stats: Stats,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.error)
    }
}
