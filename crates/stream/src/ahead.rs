//! Command CRCs checked on two cores.
//!
//! Checking a large stream's CRCs costs more than decoding it: every data
//! byte is read once for the CRC and never again. [`CrcAhead`] runs a
//! helper thread that walks the same framing as the
//! [`Reader`](crate::Reader) over bytes in memory (a mapped file), at most a
//! bounded distance ahead of it. The commands are shared by the MiB they
//! start in: the helper takes a MiB when it gets there at least two MiB
//! ahead of the reader, and leaves it to the reader otherwise; a MiB the
//! reader gets to first is the reader's. So the helper takes almost
//! everything while the reader is busy printing, and about every other MiB
//! when the reader only decodes. Whoever decides first, the other abides by
//! it (a small ring of decisions, tagged with the MiB). For one of the helper's the reader
//! waits, spinning, until the helper is past it (microseconds: sleeping and
//! waking would cost more). Where the helper meets anything it
//! does not take as a good command (a bad CRC, a bad header, the end) it
//! stops, and the reader checks the rest itself, with its usual errors.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::command::CommandKind;
use crate::header::{command_fields, MAGIC, RESUME_MAGIC, STREAM_HEADER_LEN};
use crate::{crc, COMMAND_HEADER_LEN};

/// How long the helper sleeps, when it is far enough ahead, before it looks again.
const NAP: Duration = Duration::from_millis(5);

/// Commands are shared by where they start, in steps of this size (1 MiB).
const SHARE_STEP: u32 = 20;

/// The helper takes a step only this many steps ahead of the reader.
const GAP: u64 = 2;

/// Decisions kept: a step's slot is reused 64 steps later.
const RING: usize = 64;

/// Who checks a step's commands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Owner {
    Helper = 1,
    Reader = 2,
}

struct Shared {
    /// Who checks each step: `(step + 1) << 2 | owner`, 0 for none yet.
    owners: [AtomicU64; RING],
    /// End offset of the last command the helper found good (it checks its
    /// share in order).
    progress: AtomicU64,
    /// The helper has stopped: `progress` grows no more.
    done: AtomicBool,
    /// The reader's position: the helper stays at most `lead` bytes ahead.
    reader_pos: AtomicU64,
    /// The reader is gone: the helper stops.
    stop: AtomicBool,
}

impl Shared {
    /// Who checks step `step`: what was decided, else `want`. A step whose
    /// decision is gone (its slot reused, by a helper far ahead or a
    /// reader far ahead) is the reader's: the helper skips it and the
    /// reader checks it, so nothing is passed unchecked.
    fn owner(&self, step: u64, want: Owner) -> Owner {
        let slot = &self.owners[step as usize % RING];
        let tag = step + 1;
        let mut cur = slot.load(Ordering::Acquire);
        loop {
            let cur_tag = cur >> 2;
            if cur_tag == tag {
                return if cur & 3 == Owner::Helper as u64 {
                    Owner::Helper
                } else {
                    Owner::Reader
                };
            }
            if cur_tag > tag {
                return Owner::Reader;
            }
            match slot.compare_exchange_weak(
                cur,
                tag << 2 | want as u64,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return want,
                Err(now) => cur = now,
            }
        }
    }

    fn new() -> Shared {
        Shared {
            owners: std::array::from_fn(|_| AtomicU64::new(0)),
            progress: AtomicU64::new(0),
            done: AtomicBool::new(false),
            reader_pos: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }
}

/// A helper thread that shares the checking of command CRCs with a reader.
pub struct CrcAhead {
    shared: Arc<Shared>,
    helper: Option<JoinHandle<()>>,
}

impl CrcAhead {
    /// Starts checking the stream in `data` (from its first stream header),
    /// at most `lead` bytes ahead of the position given to [`advance`](Self::advance).
    pub fn spawn<T>(data: Arc<T>, lead: u64) -> std::io::Result<CrcAhead>
    where
        T: AsRef<[u8]> + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared::new());
        let sh = Arc::clone(&shared);
        let helper = thread::Builder::new()
            .name("crc-ahead".into())
            .spawn(move || {
                walk((*data).as_ref(), &sh, lead);
                sh.done.store(true, Ordering::Release);
            })?;
        Ok(CrcAhead {
            shared,
            helper: Some(helper),
        })
    }

    /// For the reader's command at `at..end`: true when the helper has
    /// checked it and found it good; false when the reader must check it
    /// itself (it is the reader's share, or the helper stopped short of it).
    pub fn take(&self, at: u64, end: u64) -> bool {
        let sh = &*self.shared;
        if sh.owner(at >> SHARE_STEP, Owner::Reader) == Owner::Reader {
            return false;
        }
        let mut spins = 0u32;
        loop {
            if sh.progress.load(Ordering::Acquire) >= end {
                return true;
            }
            if sh.done.load(Ordering::Acquire) {
                return sh.progress.load(Ordering::Acquire) >= end;
            }
            spins += 1;
            if spins & 255 == 0 {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Tells the helper that the reader is at offset `pos`, a command or
    /// stream boundary; with `wake`, a helper waiting for the reader to
    /// catch up looks again.
    pub fn advance(&self, pos: u64, wake: bool) {
        self.shared.reader_pos.store(pos, Ordering::Release);
        if wake {
            if let Some(h) = &self.helper {
                h.thread().unpark();
            }
        }
    }
}

impl Drop for CrcAhead {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.helper.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// The helper's loop: stream headers and commands, as the reader frames them.
fn walk(data: &[u8], sh: &Shared, lead: u64) {
    let mut off = 0usize;
    // The step the helper is in, and whether it is the helper's.
    let mut step = u64::MAX;
    let mut mine = false;
    loop {
        // A stream header (or the clean end between streams).
        let Some(h) = data.get(off..off + STREAM_HEADER_LEN) else {
            return;
        };
        if &h[..MAGIC.len()] != MAGIC && &h[..MAGIC.len()] != RESUME_MAGIC {
            return;
        }
        off += STREAM_HEADER_LEN;
        loop {
            // Behind the reader: go to where it is, without touching (and
            // mapping again) the bytes it has passed and released.
            let reader = sh.reader_pos.load(Ordering::Acquire) as usize;
            if off < reader {
                off = reader;
                let at = data.get(off..).unwrap_or_default();
                if at.starts_with(MAGIC) || at.starts_with(RESUME_MAGIC) {
                    break;
                }
            }
            let Some(hdr) = data.get(off..off + COMMAND_HEADER_LEN) else {
                return;
            };
            let mut header = [0u8; COMMAND_HEADER_LEN];
            header.copy_from_slice(hdr);
            let (len, cmd, stored) = command_fields(&header);
            let end = off + COMMAND_HEADER_LEN + len as usize;
            let Some(payload) = data.get(off + COMMAND_HEADER_LEN..end) else {
                return;
            };
            while end as u64 > sh.reader_pos.load(Ordering::Acquire).saturating_add(lead) {
                if sh.stop.load(Ordering::Acquire) {
                    return;
                }
                thread::park_timeout(NAP);
            }
            if sh.stop.load(Ordering::Acquire) {
                return;
            }
            if (off as u64) >> SHARE_STEP != step {
                step = (off as u64) >> SHARE_STEP;
                let reader = sh.reader_pos.load(Ordering::Acquire) >> SHARE_STEP;
                let want = if step >= reader + GAP {
                    Owner::Helper
                } else {
                    Owner::Reader
                };
                mine = sh.owner(step, want) == Owner::Helper;
            }
            if mine {
                if crc::command_crc(&header, payload) != stored {
                    return;
                }
                sh.progress.store(end as u64, Ordering::Release);
            }
            off = end;
            if cmd == CommandKind::End as u16 {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_command, Command, StreamHeader};

    fn stream(commands: usize) -> Vec<u8> {
        let mut out = StreamHeader { version: 1 }.to_bytes().to_vec();
        let data = vec![7u8; 1000];
        for i in 0..commands {
            let c = Command::Write {
                path: b"f",
                offset: (i * 1000) as u64,
                data: &data,
            };
            encode_command(&c, 1, &mut out).unwrap();
        }
        encode_command(&Command::End {}, 1, &mut out).unwrap();
        out
    }

    /// The end offset of each command.
    fn ends(s: &[u8]) -> Vec<u64> {
        let mut off = STREAM_HEADER_LEN;
        let mut out = vec![];
        while off < s.len() {
            let len = u32::from_le_bytes(s[off..off + 4].try_into().unwrap()) as usize;
            off += COMMAND_HEADER_LEN + len;
            out.push(off as u64);
        }
        out
    }

    fn wait_done(a: &CrcAhead) {
        while !a.shared.done.load(Ordering::Acquire) {
            thread::yield_now();
        }
    }

    /// Whether a finished helper, with the reader still at 0, took the command at `at`.
    fn helpers(at: u64) -> bool {
        at >> SHARE_STEP >= GAP
    }

    #[test]
    fn a_good_stream_is_checked_to_its_end() {
        let s = Arc::new(stream(3000)); // about 3 MiB: both shares
        let a = CrcAhead::spawn(Arc::clone(&s), u64::MAX).unwrap();
        wait_done(&a);
        let mut at = STREAM_HEADER_LEN as u64;
        for &end in &ends(&s) {
            assert_eq!(a.take(at, end), helpers(at), "command at {at}");
            at = end;
        }
    }

    #[test]
    fn a_bad_command_in_the_helpers_share_is_left_to_the_reader() {
        let mut s = stream(3000);
        let e = ends(&s);
        let k = e.iter().position(|&x| helpers(x) && x > 5 << 19).unwrap();
        let bad = (e[k] + 20) as usize; // in command k + 1, the helper's
        s[bad] ^= 1;
        let a = CrcAhead::spawn(Arc::new(s), u64::MAX).unwrap();
        wait_done(&a);
        assert!(a.take(e[k - 1], e[k]));
        assert!(
            !a.take(e[k], e[k + 1]),
            "the bad command is the reader's to check"
        );
        assert!(!a.take(e[k + 1], e[k + 2]), "and so is every one after it");
    }

    #[test]
    fn the_helper_keeps_its_lead() {
        let s = stream(6000); // about 6 MiB
        let lead = 3 << 20;
        let a = CrcAhead::spawn(Arc::new(s), lead).unwrap();
        let progress = || a.shared.progress.load(Ordering::Acquire);
        let start = std::time::Instant::now();
        while progress() <= 2 << 20 && start.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(5));
        }
        assert!(progress() > 2 << 20, "the helper checks from the third MiB");
        thread::sleep(Duration::from_millis(20));
        assert!(progress() <= lead, "and not past its lead");
        a.advance(u64::MAX / 2, true);
        wait_done(&a);
    }

    #[test]
    fn racing_for_steps_never_passes_a_bad_command() {
        let mut s = stream(20000); // about 20 MiB
        let e = ends(&s);
        let bad = e.len() / 2;
        s[(e[bad - 1] + 20) as usize] ^= 1;
        let s = Arc::new(s);
        for round in 0..20 {
            let a = CrcAhead::spawn(Arc::clone(&s), 4 << 20).unwrap();
            let mut at = STREAM_HEADER_LEN as u64;
            for (i, &end) in e.iter().enumerate() {
                a.advance(at, i % 64 == 0);
                let taken = a.take(at, end);
                if i == bad {
                    assert!(!taken, "round {round}: the bad command {i} passed");
                    // A reader stops at a bad command. (One that went on
                    // could meet good commands after it taken: where the
                    // bad one's MiB fell to the reader, the helper walked
                    // past it unchecked, as the reader's share.)
                    break;
                }
                at = end;
            }
        }
    }
}
