//! How far the subvolume being received is applied ([`Track`]), where a
//! stopped receive resumes ([`Resumable`]), and what a stop must apply
//! again or a resumed receive must not ([`Redo`], [`RecipeMark`]).
//!
//! Owns: the count and fingerprint of the commands applied, the new files'
//! recipes not known finished, and the window of commands a resumed
//! receive goes over again ([`Redo::stop`] computes it at a stop). May
//! call: the room's `journal` (what a killed receive's journal says).

use std::collections::VecDeque;

use btrfs_stream::resume::{Digest, Point};
use btrfs_stream::{Command, Position};

use super::journal;

/// How far an incomplete subvolume was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumable {
    /// The stream's protocol version.
    pub version: u32,
    /// The point reached.
    pub point: Point,
}

impl Resumable {
    /// As written in the state (`VERSION:COMMANDS:OFFSET:DIGEST`).
    pub(crate) fn to_field(self) -> String {
        format!(
            "{}:{}:{}:{:032x}",
            self.version, self.point.commands, self.point.offset, self.point.digest
        )
    }

    /// Parses [`Resumable::to_field`].
    pub(crate) fn from_field(s: &str) -> Option<Resumable> {
        let mut it = s.split(':');
        let r = Resumable {
            version: it.next()?.parse().ok()?,
            point: Point {
                commands: it.next()?.parse().ok()?,
                offset: it.next()?.parse().ok()?,
                digest: u128::from_str_radix(it.next()?, 16).ok()?,
            },
        };
        it.next().is_none().then_some(r)
    }
}

/// How far the current subvolume's stream is applied.
#[derive(Debug, Default)]
pub(crate) struct Track {
    /// Commands applied, the first (SUBVOL or SNAPSHOT) included; 0 before it.
    pub(crate) count: u64,
    /// Offset in the stream just after the last of them.
    pub(crate) offset: u64,
    digest: Digest,
    pub(crate) version: u32,
    /// False once the stream can no longer be resumed (a failed command).
    pub(crate) broken: bool,
    /// The count it was resumed at (0: received from its first command).
    pub(crate) resumed_at: u64,
}

impl Track {
    /// Counts `cmd`, found at `pos` and applied.
    pub(crate) fn add(&mut self, cmd: &Command<'_>, pos: Position) {
        if self.count == 0 {
            self.offset = btrfs_stream::STREAM_HEADER_LEN as u64;
            self.version = pos.version;
        }
        let data_len = match cmd {
            Command::Write { data, .. } | Command::EncodedWrite { data, .. } => data.len() as u64,
            _ => 0,
        };
        self.count += 1;
        self.offset += pos.len;
        if self.digest.add(cmd, data_len, self.version).is_err() {
            self.broken = true;
        }
    }

    /// The track of a stream resumed at `p` (protocol `version`): its
    /// SUBVOL or SNAPSHOT counted before `p`, not again.
    pub(crate) fn resumed(p: Point, version: u32) -> Track {
        Track {
            count: p.commands,
            offset: p.offset,
            digest: Digest::from_value(p.digest),
            version,
            broken: false,
            resumed_at: p.commands,
        }
    }

    /// Whether nothing but the first command of a receive started here
    /// (not resumed) was applied: the subvolume holds nothing of the stream.
    pub(crate) fn unstarted(&self) -> bool {
        self.resumed_at == 0 && self.count <= 1
    }

    /// Where the stream stands: after the last command counted.
    pub(crate) fn point(&self) -> Point {
        Point {
            commands: self.count,
            offset: self.offset,
            digest: self.digest.value(),
        }
    }
}

/// A new file's commands held back together (its recipe, contiguous in the
/// stream): the numbers of its first and last command (as in
/// [`Position::index`]) and where the subvolume's stream stood before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecipeMark {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) before: Point,
}

impl RecipeMark {
    /// Its commands, as counted in the subvolume's stream (1 = SUBVOL).
    pub(crate) fn counts(&self) -> (u64, u64) {
        let first = self.before.commands + 1;
        (first, first + self.last.saturating_sub(self.first))
    }
}

/// What a stop must apply again: new files finished on other threads (or
/// not created yet) when a command failed, so that every command before
/// the resume point is applied and the ones after it that were applied
/// too are known.
#[derive(Debug, Default)]
pub(crate) struct Redo {
    /// Recipes handed to the finishing thread, not known to be done:
    /// (job, recipe), oldest first.
    inflight: VecDeque<(u64, RecipeMark)>,
    /// Recipes whose files were not made, or not finished.
    again: Vec<RecipeMark>,
    /// Commands (by [`Position::index`]) that failed on other threads.
    failed: Vec<u64>,
    /// On a resumed receive: which of the next commands were applied
    /// before it stopped.
    replay: Option<Replay>,
    /// After a kill: the commands (counts, first and last) that may have
    /// been applied, in part or whole (see [`super::journal`]).
    maybe: Option<(u64, u64)>,
    /// After a kill: the RENAMEs among those whose directory times moved.
    renamed: Vec<u64>,
    /// No journal could be kept for this receive.
    pub(crate) no_journal: bool,
}

/// Commands after the resume point that the stopped receive had applied
/// already, except new files to make again.
#[derive(Debug)]
struct Replay {
    /// Commands up to this count were applied...
    until: u64,
    /// ... except these ranges of counts (first, last).
    again: Vec<(u64, u64)>,
}

impl Redo {
    /// A recipe handed to the finishing thread as job `seq`.
    pub(crate) fn handed(&mut self, seq: u64, mark: RecipeMark) {
        self.inflight.push_back((seq, mark));
    }

    /// Forgets recipes of jobs up to `done`, unless failures are waiting
    /// to be collected (they may be among them).
    pub(crate) fn prune(&mut self, done: u64, failures_waiting: bool) {
        if failures_waiting || !self.failed.is_empty() {
            return;
        }
        while self.inflight.front().is_some_and(|(s, _)| *s <= done) {
            self.inflight.pop_front();
        }
    }

    /// Whether something failed that a stop must apply again.
    pub(crate) fn failing(&self) -> bool {
        !self.failed.is_empty() || !self.again.is_empty()
    }

    /// A recipe to apply again.
    pub(crate) fn again(&mut self, mark: RecipeMark) {
        self.again.push(mark);
    }

    /// Command number `index` failed on another thread.
    pub(crate) fn failed(&mut self, index: u64) {
        self.failed.push(index);
    }

    /// On a resumed receive: commands up to `until` were applied before.
    pub(crate) fn replay_until(&mut self, until: u64) {
        self.replay = Some(Replay {
            until,
            again: Vec::new(),
        });
    }

    /// On a resumed receive: commands `first..=last` (counts) are applied
    /// again, though before `until`.
    pub(crate) fn replay_again(&mut self, first: u64, last: u64) {
        if let Some(r) = self.replay.as_mut() {
            r.again.push((first, last));
        }
    }

    /// Whether the command counted `n` (1 = SUBVOL) on a resumed receive
    /// was applied already: `None` once past what the stopped receive did.
    pub(crate) fn applied_before(&mut self, n: u64) -> Option<bool> {
        let r = self.replay.as_ref()?;
        if n > r.until {
            self.replay = None;
            return None;
        }
        Some(!r.again.iter().any(|&(a, b)| (a..=b).contains(&n)))
    }

    /// Whether a create counted `n` is made again on a resumed receive
    /// (what it makes may be there already, from the stopped receive).
    pub(crate) fn remakes(&self, n: u64) -> bool {
        self.maybe_done(n)
            || self
                .replay
                .as_ref()
                .is_some_and(|r| n <= r.until && r.again.iter().any(|&(a, b)| (a..=b).contains(&n)))
    }

    /// Whether command `n` may have been applied by a killed receive
    /// (then an entry it makes or removes may be there, or gone, already).
    pub(crate) fn maybe_done(&self, n: u64) -> bool {
        self.maybe.is_some_and(|(a, b)| (a..=b).contains(&n))
    }

    /// Whether RENAME `n` moved its directory times before a kill.
    pub(crate) fn renamed_already(&self, n: u64) -> bool {
        self.maybe_done(n) && self.renamed.contains(&n)
    }

    /// A receive resumed after a kill: what its journal says.
    pub(crate) fn recovered(&mut self, found: &journal::Found, renamed: Vec<u64>) {
        self.replay = Some(Replay {
            until: found.until,
            again: found.again.clone(),
        });
        self.maybe = (found.now > found.until).then_some((found.until + 1, found.now));
        self.renamed = renamed;
    }

    /// Whether a resumed receive is still going over what was applied.
    pub(crate) fn replaying(&self) -> bool {
        self.replay.is_some()
    }
}

/// Which commands after a resume point were applied already (written to
/// the side file at a stop).
pub(crate) struct Applied {
    /// Commands counted up to this were applied (none if `None`)...
    pub(crate) until: Option<u64>,
    /// ... except these (first, last), to apply again.
    pub(crate) again: Vec<(u64, u64)>,
}

impl Redo {
    /// At a stop, after everything held was applied or recorded to make
    /// again: where the resumed stream starts (before the first new file
    /// to make again, else after the last command counted by `track`) and
    /// which commands after it were applied already. `Err` when a command
    /// failed after later ones were applied.
    pub(crate) fn stop(self, track: &Track) -> Result<(Point, Applied), String> {
        let mut again = self.again;
        for idx in self.failed {
            if again.iter().any(|m| (m.first..=m.last).contains(&idx)) {
                continue;
            }
            match self
                .inflight
                .iter()
                .map(|(_, m)| m)
                .find(|m| (m.first..=m.last).contains(&idx))
            {
                Some(m) => again.push(*m),
                None => {
                    return Err(format!(
                        "command #{idx} failed after later commands were applied"
                    ))
                }
            }
        }
        let mut until = track.count;
        let mut ranges: Vec<(u64, u64)> = again.iter().map(RecipeMark::counts).collect();
        if let Some(r) = self.replay {
            // Stopped again before the end of what the first receive had
            // applied: that part still counts.
            until = until.max(r.until);
            ranges.extend(r.again.into_iter().filter(|&(a, _)| a > track.count));
        }
        let point = again
            .iter()
            .map(|m| m.before)
            .min_by_key(|p| p.commands)
            .unwrap_or_else(|| track.point());
        ranges.retain(|&(_, b)| b > point.commands);
        ranges.sort_unstable();
        ranges.dedup();
        let applied = Applied {
            until: (until > point.commands).then_some(until),
            again: ranges,
        };
        Ok((point, applied))
    }
}
