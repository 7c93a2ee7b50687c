//! One receive from start to end: opens DEST, reads the stream's commands
//! and hands each to the engine ([`crate::apply`]); on a failure decides
//! what is left behind (resumable, refused, discarded) and says it in a
//! [`Failure`].

use std::io::Read;
use std::path::PathBuf;

use btrfs_stream::{Command, Reader};

use crate::apply::{self, Receiver};
use crate::dest::Dest;
use crate::error::Error;
use crate::options::{Options, Stats};
use crate::report::{Log, Report};
use crate::stop::signal_name;
use crate::subvol;

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
