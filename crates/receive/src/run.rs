//! One receive from start to end: opens DEST, reads the stream's commands
//! and hands each to the engine ([`crate::apply`]); on a failure decides
//! what is left behind (resumable, refused, discarded) and says it in a
//! [`Failure`].

use std::io::Read;

use btrfs_stream::{Command, Reader, Source};

use crate::apply::{self, Receiver};
use crate::dest::Dest;
use crate::error::Error;
use crate::options::{Failure, Options, Stats};
use crate::report::{Log, Report};
use crate::stop::signal_name;
use crate::subvol::SubvolState;

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
    let mut run = Run {
        rx,
        opts,
        failed: 0,
    };
    let mut reader = Reader::new(input);
    while run.step(&mut reader)? {}
    run.finish()
}

/// A receive under way: the engine, and the failed commands counted.
struct Run<'o> {
    rx: Receiver<'o>,
    opts: &'o Options,
    failed: u64,
}

impl Run<'_> {
    /// A failure: the subvolume stays incomplete (or, taken over in place
    /// and unchanged, is given back).
    fn fail(&mut self, error: Error) -> Box<Failure> {
        let rx = &mut self.rx;
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
    }

    /// A failure that leaves the subvolume incomplete and not resumable,
    /// recording why for `--resume-token`.
    fn refuse(&mut self, error: Error, why: String) -> Box<Failure> {
        let name = self.rx.current_name();
        let mut f = self.fail(error);
        if let (Some(_), Some(name)) = (&f.incomplete, name) {
            self.rx.record_refusal(&name, &why);
            f.not_resumable = Some(why);
        }
        f
    }

    /// A stream that stops early: what was applied is kept, and where it
    /// stopped is recorded to resume from, unless resuming would only meet
    /// the same error again.
    fn stop(&mut self, error: Error) -> Box<Failure> {
        if let Some(why) = error.permanent() {
            let why = format!("{why}; resuming would stop there again");
            return self.refuse(error, why);
        }
        let path = self.rx.current_path();
        match self.rx.suspend() {
            Ok(state) => Box::new(Failure {
                error,
                incomplete: path,
                in_place_of: None,
                given_back: None,
                resumable: Some(state),
                not_resumable: None,
                stats: self.rx.stats,
            }),
            Err(why) if self.rx.unstarted() => {
                // Nothing of the stream is in it yet (the disk was full
                // from the start, say): it goes, and the same stream
                // received again starts over.
                let mut f = self.fail(error);
                if f.incomplete.is_some() {
                    if self.rx.discard() {
                        f.incomplete = None;
                    } else if let Some(name) = self.rx.current_name() {
                        self.rx.record_refusal(&name, &why);
                        f.not_resumable = Some(why);
                    }
                }
                f
            }
            Err(why) => self.refuse(error, why),
        }
    }

    /// The signal that asked to stop, if one did.
    fn signalled(&self) -> Option<&'static str> {
        let n = self
            .opts
            .stop
            .as_ref()?
            .load(std::sync::atomic::Ordering::Relaxed);
        (n != 0).then(|| signal_name(n))
    }

    /// Reads and applies the next command: whether to go on.
    fn step<S: Source>(&mut self, reader: &mut Reader<S>) -> Result<bool, Box<Failure>> {
        if let Some(sig) = self.signalled() {
            let e = Error::Interrupted(sig, reader.commands());
            return Err(self.stop(e));
        }
        let (cmd, pos) = match reader.next_framed() {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(false),
            Err(e) => {
                let e = match self.signalled() {
                    Some(sig) => Error::Interrupted(sig, e.command.saturating_sub(1)),
                    None => Error::from_stream(e, self.opts.stored),
                };
                return Err(self.stop(e));
            }
        };
        let end = matches!(cmd, Command::End {});
        if pos.index % 64 == 0 {
            self.rx.log.progress(pos.offset + pos.len, pos.index);
        }
        // A stream of several subvolumes made by `btrfs send -e` has no END
        // between them: the next one's start ends the one before, as for
        // btrfs receive.
        let starts = matches!(cmd, Command::Subvol { .. } | Command::Snapshot { .. });
        let mut res = Ok(apply::Flow::End);
        if starts && self.rx.in_subvol() {
            res = self.rx.apply(&Command::End {}, pos);
        }
        if res.is_ok() && starts {
            if let Some((start, st)) = self.start(&cmd, pos)? {
                self.skip_applied(reader, start, st)?;
                return Ok(true);
            }
        }
        if res.is_ok() {
            res = self.rx.apply(&cmd, pos);
        }
        self.counted(res)?;
        Ok(!(end && self.opts.stop_at_end))
    }

    /// Before a SUBVOL or SNAPSHOT: its lock, and in a stream read again
    /// the point a stopped receive of it reached, if one did.
    fn start(
        &mut self,
        cmd: &Command<'_>,
        pos: btrfs_stream::Position,
    ) -> Result<Option<(apply::Start, SubvolState)>, Box<Failure>> {
        // One writer per subvolume: its lock comes before anything looks
        // at what DEST holds of it (another receive holding it stops this
        // one, which changed nothing: exit 3).
        if let Err(e) = self.rx.lock_next(cmd, pos) {
            return Err(self.stop(e));
        }
        if !(self.opts.stored || self.opts.resume) {
            return Ok(None);
        }
        let Some(start) = apply::Start::of(cmd, pos) else {
            return Ok(None);
        };
        match self.rx.stored_point(&start) {
            Err(e) => Err(self.fail(e)),
            Ok(None) => Ok(None),
            Ok(Some(st)) => Ok(Some((start, st))),
        }
    }

    /// Reads the commands a stopped receive applied, without applying
    /// them again, and applies the subvolume's start.
    fn skip_applied<S: Source>(
        &mut self,
        reader: &mut Reader<S>,
        start: apply::Start,
        st: SubvolState,
    ) -> Result<(), Box<Failure>> {
        if let Err(e) = self.rx.skip_to(reader, &start, &st) {
            return Err(self.rx.skip_failed(e, &start, st));
        }
        if let Err(e) = self.rx.apply(&start.command(), start.pos) {
            return Err(self.stop(e));
        }
        Ok(())
    }

    /// Counts a command's failure against `-E` (`max_errors`).
    fn counted(&mut self, res: Result<apply::Flow, Error>) -> Result<(), Box<Failure>> {
        let max = self.opts.max_errors;
        self.failed += std::mem::take(&mut self.rx.extra_errors);
        if max != 0 && self.failed >= max && res.is_ok() {
            let why = format!("{} command(s) failed", self.failed);
            return Err(self.refuse(Error::Failed(self.failed), why));
        }
        if let Err(e) = res {
            self.failed += 1;
            if max == 1 {
                // Everything before the failed command is applied (or
                // recorded to be applied again): resumable from there
                // when the cause can go away (ENOSPC, say).
                return Err(self.stop(e));
            }
            self.rx.note_error();
            if max != 0 && self.failed >= max {
                return Err(self.fail(e));
            }
            self.rx.log.error(&e);
        }
        Ok(())
    }

    /// After the last command: the end of the last subvolume, and what was
    /// done said.
    fn finish(mut self) -> Result<Stats, Box<Failure>> {
        let res = self.rx.finish();
        self.failed += std::mem::take(&mut self.rx.extra_errors);
        if let Err(e) = res {
            if self.opts.max_errors == 1 {
                return Err(self.stop(e));
            }
            return Err(self.fail(e));
        }
        if self.failed > 0 {
            let why = format!("{} command(s) failed", self.failed);
            return Err(self.refuse(Error::Failed(self.failed), why));
        }
        let rx = &mut self.rx;
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
