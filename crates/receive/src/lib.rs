//! Replaying btrfs send streams onto any filesystem, confined to the
//! destination: the engine of the `rreceive` tool, as a library.
//!
//! # Public API
//!
//! - [`receive`] reads a stream (several concatenated ones included) and
//!   applies each command beneath `DEST/<subvolume>`, as [`Options`] say;
//!   [`receive_with`] does the same, telling a [`Report`] its messages
//!   ([`Level`]), the commands it applies and its progress. It returns
//!   [`Stats`], or a [`Failure`] that holds the [`Error`] (a [`CmdError`]
//!   for a command, a [`PathError`] for a path refused) and what was left
//!   behind. A [`StopFlag`] set by signal handlers stops it cleanly, so
//!   that it can be resumed; [`interruptible`] reads a pipe so that the
//!   flag is seen while the sender is silent.
//! - [`Dest`] is a destination directory, on btrfs or not ([`Kind`];
//!   [`Snapshot`] says how snapshots are made off btrfs). Beside the
//!   receive it offers what a caller asks of a destination: the subvolumes
//!   received there ([`Dest::list`], each [`Listed`] with its
//!   [`SubvolState`]), the token that resumes a stopped receive
//!   ([`Dest::resume_token`], else [`NoToken`] says why) and the deletion
//!   of an incomplete one ([`Dest::delete_incomplete`], else
//!   [`NotDeleted`]).
//!
//! # Layers
//!
//! On btrfs a receive makes real subvolumes and snapshots, finished with
//! `received_uuid` and the read-only flag as `btrfs receive` does;
//! anywhere else directories, tree copies for snapshots, and the state kept
//! in an xattr or a state file. The crate's private modules: `apply` takes
//! each command through its steps (the subvolume's lifecycle, creates,
//! names, inode metadata, data; durable checkpoints, the journal a resume
//! reads); `dest` and `subvol` keep the destination and what is known of
//! each subvolume; `path` confines every path; `copy`, `overlay` and
//! `workdir` make snapshots off btrfs; `closer` finishes files on other
//! threads; `report` and `stop` are the ways out to the caller.
//!
//! A stream is untrusted input: every path is checked and resolved beneath
//! the subvolume without following symlinks, parents and clone sources
//! must be subvolumes received in DEST, and a subvolume whose stream did
//! not reach its END is never used as either unless [`Options::force`] is
//! set.
//!
//! The engine never prints and holds no terminal code: the `rreceive`
//! binary (`src/bin/rreceive/`, behind the default feature `cli` with the
//! dependencies only it needs) parses the command line and implements
//! [`Report`] with a progress bar and messages on standard error. A
//! library user takes `default-features = false` and gets none of them.
//!
//! All `unsafe` code is in the private module `ioctl`, each block with a
//! `SAFETY:` comment; the lints below keep it there.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod apply;
mod closer;
mod copy;
mod decode;
mod dest;
mod elsewhere;
mod error;
mod fake_super;
mod flags;
#[allow(unsafe_code)]
mod ioctl;
mod lock;
mod meta;
mod overlay;
mod path;
mod probe;
mod report;
mod stop;
mod subvol;
mod workdir;
mod xattr_limit;

use std::io::Read;
use std::path::PathBuf;

use btrfs_stream::{Command, Reader};

use apply::Receiver;
use report::Log;
use stop::signal_name;

pub use dest::{Dest, Kind, Listed, NoToken, NotDeleted, Snapshot};
pub use error::{CmdError, Error};
pub use lock::{Busy, Holder};
pub use path::PathError;
pub use report::{Level, Report};
pub use stop::{interruptible, StopFlag};
pub use subvol::{Resumable, SubvolState};

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
    /// What is reported (see [`receive_with`]): 0 errors only, 1 also the
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
    pub resumable: Option<subvol::SubvolState>,
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

/// Receives the streams in `input` into `opts.dest`, reporting nothing.
pub fn receive<R: Read>(input: R, opts: &Options) -> Result<Stats, Box<Failure>> {
    receive_with(input, opts, &())
}

/// Receives the streams in `input` into `opts.dest`, telling `report` what
/// [`Options::verbosity`] asks for and every error.
pub fn receive_with<R: Read>(
    input: R,
    opts: &Options,
    report: &dyn Report,
) -> Result<Stats, Box<Failure>> {
    let log = Log {
        level: opts.verbosity,
        report,
    };
    let dest = match Dest::open(&opts.dest, opts.plain) {
        Ok(mut d) => {
            d.set_root_mount(opts.root_mount.clone());
            d
        }
        Err(source) => {
            return Err(Box::new(Failure {
                error: Error::Dest {
                    path: opts.dest.clone(),
                    source,
                },
                incomplete: None,
                in_place_of: None,
                given_back: None,
                resumable: None,
                not_resumable: None,
                stats: Stats::default(),
            }))
        }
    };
    raise_fd_limit();
    let mut rx = Receiver::new(opts, dest, log);
    rx.probe_dest();
    rx.sweep_orphans();
    let mut reader = Reader::new(input);
    let mut failed = 0u64;
    let fail = |rx: &mut Receiver<'_>, error: Error| {
        let mut incomplete = rx.current_path();
        let in_place_of = rx.in_place_of().map(<[u8]>::to_vec);
        let given_back = rx.abort();
        if given_back.is_some() {
            incomplete = None;
        }
        Box::new(Failure {
            error,
            incomplete,
            in_place_of: in_place_of.filter(|_| given_back.is_none()),
            given_back,
            resumable: None,
            not_resumable: None,
            stats: rx.stats,
        })
    };
    // A failure that leaves the subvolume incomplete and not resumable,
    // recording why for `--resume-token`.
    let refuse = |rx: &mut Receiver<'_>, error: Error, why: String| {
        let name = rx.current_name();
        let mut f = fail(rx, error);
        if let (Some(_), Some(name)) = (&f.incomplete, name) {
            rx.record_refusal(&name, &why);
            f.not_resumable = Some(why);
        }
        f
    };
    // A stream that stops early: what was applied is kept, and where it
    // stopped is recorded to resume from, unless resuming would only meet
    // the same error again.
    let stop = |rx: &mut Receiver<'_>, error: Error| {
        if let Some(why) = error.permanent() {
            let why = format!("{why}; resuming would stop there again");
            return refuse(rx, error, why);
        }
        let path = rx.current_path();
        match rx.suspend() {
            Ok(state) => Box::new(Failure {
                error,
                incomplete: path,
                in_place_of: None,
                given_back: None,
                resumable: Some(state),
                not_resumable: None,
                stats: rx.stats,
            }),
            Err(why) if rx.unstarted() => {
                // Nothing of the stream is in it yet (the disk was full
                // from the start, say): it goes, and the same stream
                // received again starts over.
                let mut f = fail(rx, error);
                if f.incomplete.is_some() {
                    if rx.discard() {
                        f.incomplete = None;
                    } else if let Some(name) = rx.current_name() {
                        rx.record_refusal(&name, &why);
                        f.not_resumable = Some(why);
                    }
                }
                f
            }
            Err(why) => refuse(rx, error, why),
        }
    };
    let signalled = || {
        let n = opts
            .stop
            .as_ref()?
            .load(std::sync::atomic::Ordering::Relaxed);
        (n != 0).then(|| signal_name(n))
    };
    loop {
        if let Some(sig) = signalled() {
            let e = Error::Interrupted(sig, reader.commands());
            return Err(stop(&mut rx, e));
        }
        let (cmd, pos) = match reader.next_framed() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                let e = match signalled() {
                    Some(sig) => Error::Interrupted(sig, e.command.saturating_sub(1)),
                    None => Error::from_stream(e, opts.stored),
                };
                return Err(stop(&mut rx, e));
            }
        };
        let end = matches!(cmd, Command::End {});
        if pos.index % 64 == 0 {
            rx.log.progress(pos.offset + pos.len, pos.index);
        }
        // A stream of several subvolumes made by `btrfs send -e` has no END
        // between them: the next one's start ends the one before, as for
        // btrfs receive.
        let starts = matches!(cmd, Command::Subvol { .. } | Command::Snapshot { .. });
        let mut res = Ok(apply::Flow::End);
        if starts && rx.in_subvol() {
            res = rx.apply(&Command::End {}, pos);
        }
        // One writer per subvolume: its lock comes before anything looks
        // at what DEST holds of it (another receive holding it stops this
        // one, which changed nothing: exit 3).
        if res.is_ok() && starts {
            if let Err(e) = rx.lock_next(&cmd, pos) {
                return Err(stop(&mut rx, e));
            }
        }
        // A stream read again: what a stopped receive applied is read, not
        // applied again.
        if res.is_ok() && starts && (opts.stored || opts.resume) {
            if let Some(start) = apply::Start::of(&cmd, pos) {
                match rx.stored_point(&start) {
                    Err(e) => return Err(fail(&mut rx, e)),
                    Ok(None) => {}
                    Ok(Some(st)) => {
                        if let Err(e) = rx.skip_to(&mut reader, &start, &st) {
                            return Err(rx.skip_failed(e, &start, st));
                        }
                        if let Err(e) = rx.apply(&start.command(), start.pos) {
                            return Err(stop(&mut rx, e));
                        }
                        continue;
                    }
                }
            }
        }
        if res.is_ok() {
            res = rx.apply(&cmd, pos);
        }
        failed += std::mem::take(&mut rx.extra_errors);
        if opts.max_errors != 0 && failed >= opts.max_errors && res.is_ok() {
            let why = format!("{failed} command(s) failed");
            return Err(refuse(&mut rx, Error::Failed(failed), why));
        }
        match res {
            Ok(_) => {}
            Err(e) => {
                failed += 1;
                if opts.max_errors == 1 {
                    // Everything before the failed command is applied (or
                    // recorded to be applied again): resumable from there
                    // when the cause can go away (ENOSPC, say).
                    return Err(stop(&mut rx, e));
                }
                rx.note_error();
                if opts.max_errors != 0 && failed >= opts.max_errors {
                    return Err(fail(&mut rx, e));
                }
                rx.log.error(&e);
            }
        }
        if end && opts.stop_at_end {
            break;
        }
    }
    let res = rx.finish();
    failed += std::mem::take(&mut rx.extra_errors);
    if let Err(e) = res {
        if opts.max_errors == 1 {
            return Err(stop(&mut rx, e));
        }
        return Err(fail(&mut rx, e));
    }
    if failed > 0 {
        let why = format!("{failed} command(s) failed");
        return Err(refuse(&mut rx, Error::Failed(failed), why));
    }
    let s = rx.stats;
    rx.log.note(format_args!(
        "{} commands, {} subvolume(s); {} inodes created ({} at their final name); \
         {} bytes written, {} cloned; encoded writes: {} by ioctl, {} decoded; \
         {} truncates, {} chowns and {} chmods skipped; {} directory utimes held back; \
         directories changed after their times: {} given their UTIMES again, {} their \
         earlier times; {} directory times applied early; {} durable checkpoint(s) ({} bytes recorded)",
        s.commands,
        s.subvols,
        s.created,
        s.fused_renames,
        s.bytes_written,
        s.bytes_cloned,
        s.encoded_ioctl,
        s.encoded_decoded,
        s.truncates_skipped,
        s.chowns_skipped,
        s.chmods_skipped,
        s.dir_utimes_deferred,
        s.dir_times_restored,
        s.dir_times_kept,
        s.dir_times_early,
        s.durable_checkpoints,
        s.durable_bytes
    ));
    if rx.stats.skipped > 0 {
        rx.log.warning(format_args!(
            "{} item(s) this filesystem cannot store were skipped: {} (-v lists them){}",
            rx.stats.skipped,
            rx.skipped.said(),
            rx.skipped.fixes()
        ));
    }
    Ok(rx.stats)
}

/// Raises the soft limit on open files to the hard limit (tree copies of
/// deep directories hold two descriptors per level).
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
