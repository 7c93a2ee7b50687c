//! Resuming from the stream itself: a stored stream file read again (`-f
//! FILE`, or standard input redirected from one), or the same stream piped
//! again with `--resume` (`cat FILE |`, `zstd -dc FILE.zst |`).
//!
//! A SUBVOL or SNAPSHOT of a subvolume that DEST holds incomplete, with a
//! point to resume from (the one `rreceive --resume-token` gives), is not
//! refused: the commands up to that point are read and not applied, each
//! counted and fingerprinted by the same [`Track`] that counted them when
//! they were applied, and the byte offset and digest reached there must be
//! the recorded ones. Then the receive goes on as one resumed by `rsend
//! --resume` does (as if RESUME with that point had come before the SUBVOL
//! or SNAPSHOT). A stream that differs, or ends before the point, is
//! refused and the subvolume is left as it was.

use std::os::unix::ffi::OsStrExt;

use btrfs_stream::resume::Point;
use btrfs_stream::{Command, ErrorKind, Position, Reader, Source};
use uuid::Uuid;

use crate::dest::Existing;
use crate::error::{escape, Error};
use crate::options::Failure;
use crate::subvol::SubvolState;

use super::current::Receiver;
use crate::recovery::track::Track;

/// The SUBVOL or SNAPSHOT that starts a subvolume's stream, held while the
/// commands after it are read.
pub(crate) struct Start {
    name: Vec<u8>,
    uuid: Uuid,
    ctransid: u64,
    /// A snapshot's parent: its uuid and ctransid.
    parent: Option<(Uuid, u64)>,
    /// Where the command is in the stream.
    pub(crate) pos: Position,
}

impl Start {
    /// `cmd` (at `pos`), if it is a SUBVOL or SNAPSHOT.
    pub(crate) fn of(cmd: &Command<'_>, pos: Position) -> Option<Start> {
        let (name, uuid, ctransid, parent) = match *cmd {
            Command::Subvol {
                path,
                uuid,
                ctransid,
            } => (path, uuid, ctransid, None),
            Command::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => (path, uuid, ctransid, Some((clone_uuid, clone_ctransid))),
            _ => return None,
        };
        Some(Start {
            name: name.to_vec(),
            uuid,
            ctransid,
            parent,
            pos,
        })
    }

    /// The command again.
    pub(crate) fn command(&self) -> Command<'_> {
        match self.parent {
            None => Command::Subvol {
                path: &self.name,
                uuid: self.uuid,
                ctransid: self.ctransid,
            },
            Some((clone_uuid, clone_ctransid)) => Command::Snapshot {
                path: &self.name,
                uuid: self.uuid,
                ctransid: self.ctransid,
                clone_uuid,
                clone_ctransid,
            },
        }
    }
}

/// The stream's commands, from `start` on, are told as progress this often.
const PROGRESS_EVERY: u64 = 64;

impl Receiver<'_> {
    /// The name the stream is read from, for messages.
    fn input_name(&self) -> String {
        match &self.opts.input {
            Some(p) => p.display().to_string(),
            None => "standard input".into(),
        }
    }

    /// The error for a stream that does not continue subvolume `start`.
    fn not_the_stream(&self, start: &Start, why: String) -> Error {
        Error::NotTheStream {
            name: escape(&start.name),
            dest: self.dest.path().display().to_string(),
            input: self.input_name(),
            why,
        }
    }

    /// The state of the subvolume `start` begins, when the stream is read
    /// again ([`crate::Options::stored`], [`crate::Options::resume`]) and
    /// DEST holds it incomplete with a point to resume from, past where
    /// this stream starts: then the commands up to that point are to be
    /// read without being applied ([`Receiver::skip_to`]). `None` for a
    /// receive as usual (whatever is in the way is refused as usual), an
    /// error when the subvolume there was received from another stream.
    pub(crate) fn stored_point(&self, start: &Start) -> Result<Option<SubvolState>, Error> {
        let Ok(Some(Existing::Received(st))) = self.dest.existing(&start.name) else {
            return Ok(None);
        };
        let Some(at) = st.resume.filter(|_| !st.complete) else {
            return Ok(None);
        };
        // A stream from `rsend --resume` continues after its RESUME point:
        // from exactly there, it is received as such.
        let from = self.resume;
        if from.is_some_and(|p| p.commands >= at.point.commands) {
            return Ok(None);
        }
        let input = self.input_name();
        let why = if st.received_uuid != start.uuid || st.ctransid != start.ctransid {
            format!(
                "it is being received from the snapshot of uuid {} (ctransid {}), and {input} \
                 holds the stream of uuid {} (ctransid {})",
                st.received_uuid, st.ctransid, start.uuid, start.ctransid
            )
        } else if st.parent_uuid.map(|u| (u, st.parent_ctransid)) != start.parent {
            format!(
                "it is being received {}, and {input} holds {}",
                match st.parent_uuid {
                    Some(u) => format!("against the parent of uuid {u}"),
                    None => "from a full stream".into(),
                },
                match start.parent {
                    Some((u, _)) => format!("an incremental stream against the parent of uuid {u}"),
                    None => "a full stream".into(),
                }
            )
        } else if at.version != start.pos.version {
            format!(
                "it is being received from a stream of protocol {}, and {input} holds one of \
                 protocol {}",
                at.version, start.pos.version
            )
        } else {
            return Ok(Some(st));
        };
        Err(self.not_the_stream(start, why))
    }

    /// Reads the commands after `start` in `reader`, applying none, up to
    /// the point subvolume `start`'s receive stopped at (`st`, from
    /// [`Receiver::stored_point`]), checking that the stream reaches it at
    /// its byte offset with its digest; then the next SUBVOL or SNAPSHOT
    /// applied resumes from there.
    pub(crate) fn skip_to<R: Source>(
        &mut self,
        reader: &mut Reader<R>,
        start: &Start,
        st: &SubvolState,
    ) -> Result<(), Error> {
        let Some(at) = st.resume else {
            return Err(self.not_the_stream(start, "it has no point to resume from".into()));
        };
        let want = at.point;
        let version = start.pos.version;
        let mut track = match self.resume {
            Some(p) => Track::resumed(p, version),
            None => {
                let mut t = Track::default();
                t.add(&start.command(), start.pos);
                t
            }
        };
        self.log.note(format_args!(
            "resuming {} from command {} (byte {}) of {}",
            escape(&start.name),
            want.commands,
            want.offset,
            self.input_name()
        ));
        let signalled = |opts: &crate::options::Options| {
            let n = opts
                .stop
                .as_ref()?
                .load(std::sync::atomic::Ordering::Relaxed);
            (n != 0).then(|| crate::stop::signal_name(n))
        };
        while track.count < want.commands {
            if let Some(sig) = signalled(self.opts) {
                return Err(Error::Interrupted(sig, reader.commands()));
            }
            let (cmd, pos) = match reader.next_framed() {
                Ok(Some(c)) => c,
                Ok(None) => {
                    return Err(self.ends_early(start, &track, want, "the stream ends"));
                }
                Err(e) => {
                    if let Some(sig) = signalled(self.opts) {
                        return Err(Error::Interrupted(sig, e.command.saturating_sub(1)));
                    }
                    return Err(match e.kind {
                        // A stored file read again ends there again.
                        ErrorKind::MissingEnd | ErrorKind::Empty => {
                            self.ends_early(start, &track, want, "the stream ends")
                        }
                        ErrorKind::TruncatedCommand { .. }
                        | ErrorKind::TruncatedCommandHeader { .. }
                        | ErrorKind::TruncatedStreamHeader { .. }
                            if self.opts.stored =>
                        {
                            self.ends_early(start, &track, want, "the file is cut short")
                        }
                        _ => Error::from_stream(e, self.opts.stored),
                    });
                }
            };
            if matches!(
                cmd,
                Command::Subvol { .. }
                    | Command::Snapshot { .. }
                    | Command::Resume { .. }
                    | Command::End {}
            ) {
                let what = format!("its stream of {} ends", escape(&start.name));
                return Err(self.ends_early(start, &track, want, &what));
            }
            track.add(&cmd, pos);
            if track.broken {
                return Err(self.not_the_stream(
                    start,
                    format!(
                        "command #{} ({}) at byte {} cannot be fingerprinted",
                        pos.index,
                        cmd.kind(),
                        pos.offset
                    ),
                ));
            }
            if pos.index % PROGRESS_EVERY == 0 {
                self.log.progress(pos.offset + pos.len, pos.index);
            }
            if track.offset > want.offset {
                return Err(self.differs(start, &track, want));
            }
        }
        let got = track.point();
        if got.offset != want.offset || got.digest != want.digest {
            return Err(self.differs(start, &track, want));
        }
        self.resume = Some(want);
        Ok(())
    }

    /// The error for a stream that ends (`how`) before `want`.
    fn ends_early(&self, start: &Start, track: &Track, want: Point, how: &str) -> Error {
        self.not_the_stream(
            start,
            format!(
                "{how} after command {} of the subvolume (byte {}), before command {} (byte {}) \
                 where its receive stopped: a shorter stream, or one cut short",
                track.count, track.offset, want.commands, want.offset
            ),
        )
    }

    /// The error for a stream whose commands are not those applied.
    fn differs(&self, start: &Start, track: &Track, want: Point) -> Error {
        let got = track.point();
        let why = if got.offset != want.offset {
            format!(
                "at command {} of the subvolume it is at byte {}, and the receive stopped after \
                 command {} at byte {}: another stream",
                got.commands, got.offset, want.commands, want.offset
            )
        } else {
            format!(
                "at command {} (byte {}) its digest is {:032x}, and the receive stopped there \
                 with digest {:032x}: another stream of the same snapshot (made with other \
                 options, or by another sender)",
                got.commands, got.offset, got.digest, want.digest
            )
        };
        self.not_the_stream(start, why)
    }

    /// The failure of [`Receiver::skip_to`]: `error`, with subvolume
    /// `start` (state `st`) left as it was, still resumable.
    pub(crate) fn skip_failed(&self, error: Error, start: &Start, st: SubvolState) -> Box<Failure> {
        // Told as stopped, with how to go on, when it can go away (a
        // signal, the input cut off); else the error says it all.
        let stopped = error.permanent().is_none();
        let path = self
            .dest
            .path()
            .join(std::ffi::OsStr::from_bytes(&start.name));
        Box::new(Failure {
            error,
            incomplete: stopped.then_some(path),
            in_place_of: None,
            given_back: None,
            resumable: stopped.then_some(st),
            not_resumable: None,
            stats: self.stats,
        })
    }
}
