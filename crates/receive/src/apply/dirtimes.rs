//! The times each directory must end with.
//!
//! The kernel's command order can change a directory after the last UTIMES
//! it sends for it: orphans are made at the subvolume root and renamed away
//! long after the root's times, and incremental streams add, remove and
//! move entries in directories whose times came earlier. Each change to a
//! directory's entries sets its mtime to the time of the receive, so a
//! directory's times are kept here, by its current path, and applied when
//! the subvolume ends:
//!
//! - a UTIMES of a directory is recorded (not applied); a later one
//!   replaces it;
//! - before the entries of a directory change, its record is marked
//!   changed; a directory without a record gets one with the times it has
//!   now (read back from the directory), so that they are put back: those
//!   are the times of an earlier UTIMES applied already, or, when the
//!   stream never sends times for it, the times it had before the stream
//!   changed it;
//! - a directory this receive makes is recorded as such, with no times to
//!   put back (until its UTIMES comes);
//! - a RENAME moves the records at and beneath its source to its
//!   destination (a directory renamed, or beneath an ancestor renamed, is
//!   still the same directory); an RMDIR drops them.
//!
//! Memory is bounded: at most `limit` records
//! ([`crate::Options::max_dir_times`], 16,384 by default) and `limit` × 128
//! bytes of their paths (plus the two paths of the command at hand).
//! When a new record would not fit, the least recently used quarter is
//! applied early and dropped; should one of those directories change
//! again, its times are read back from it first, as above, so the result
//! stays exact. ctime cannot be set and is ignored.

use std::collections::BTreeMap;

use crate::recovery::journal::{Entry, Journal, Record};

/// The fewest records held (so that a command's own directories fit).
const MIN_LIMIT: usize = 16;
/// Path bytes allowed per record, on average.
const BYTES_PER_RECORD: usize = 128;

/// Directory times by current path (see the module documentation).
pub(super) struct DirTimes {
    records: BTreeMap<Vec<u8>, Record>,
    /// Bytes of the paths in `records`.
    bytes: usize,
    clock: u64,
    limit: usize,
    /// Where each change is logged, so that a killed receive's records can
    /// be rebuilt ([`crate::recovery::journal`]).
    pub(super) journal: Option<Journal>,
}

impl DirTimes {
    /// Holds at most `limit` records (at least 16).
    pub(super) fn new(limit: usize) -> DirTimes {
        DirTimes {
            records: BTreeMap::new(),
            bytes: 0,
            clock: 0,
            limit: limit.max(MIN_LIMIT),
            journal: None,
        }
    }

    /// Rebuilds the records from a journal's log (see [`crate::recovery::journal`]).
    pub(super) fn replay(&mut self, e: &Entry) {
        use Entry as E;
        match e {
            E::Insert(d, r) => self.insert(d, *r),
            E::Replace(d, r) => {
                if !self.replace(d, *r) {
                    self.insert(d, *r);
                }
            }
            E::Change(d, at) => {
                self.change(d, *at);
            }
            E::Renamed(f, t) => self.renamed(f, t),
            E::Removed(d) => self.removed(d),
            E::Evicted(d) => {
                self.take_within_exact(d);
            }
            E::Cleared => self.clear(),
            E::Flags(..) | E::Caps(..) => {}
        }
    }

    fn take_within_exact(&mut self, dir: &[u8]) {
        if self.records.remove(dir).is_some() {
            self.bytes -= dir.len();
        }
    }

    /// Logs that `dir`'s record, evicted, was applied.
    pub(super) fn log_evicted(&mut self, dir: &[u8]) {
        if let Some(j) = self.journal.as_mut() {
            j.evicted(dir);
        }
    }

    /// Logs that every record taken was applied.
    pub(super) fn log_cleared(&mut self) {
        if let Some(j) = self.journal.as_mut() {
            j.cleared();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.records.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(super) fn contains(&self, dir: &[u8]) -> bool {
        self.records.contains_key(dir)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Whether `extra` new records fit without applying others early.
    pub(super) fn has_room(&self, extra: usize) -> bool {
        self.records.len() + extra <= self.limit
            && self.bytes <= self.limit.saturating_mul(BYTES_PER_RECORD)
    }

    /// Records `dir`'s times, replacing what was recorded. Make room first
    /// ([`DirTimes::has_room`], [`DirTimes::evict`]).
    #[cfg(test)]
    fn record(&mut self, dir: &[u8], rec: Record) {
        if !self.replace(dir, rec) {
            self.insert(dir, rec);
        }
    }

    /// Replaces `dir`'s record, if it has one; whether it had.
    pub(super) fn replace(&mut self, dir: &[u8], mut rec: Record) -> bool {
        rec.last = self.tick();
        match self.records.get_mut(dir) {
            Some(r) => {
                // The same times again (the kernel sends a directory's after
                // each entry it adds) need no record in the journal: only
                // the command they came from differs, which counts nothing
                // but statistics.
                let same = (r.atime, r.mtime, r.source) == (rec.atime, rec.mtime, rec.source);
                *r = rec;
                if let (false, Some(j)) = (same, self.journal.as_mut()) {
                    j.replace(dir, &rec);
                }
                true
            }
            None => false,
        }
    }

    /// Records `dir`, which has no record. Make room first.
    pub(super) fn insert(&mut self, dir: &[u8], mut rec: Record) {
        rec.last = self.tick();
        if let Some(j) = self.journal.as_mut() {
            j.insert(dir, &rec);
        }
        self.bytes += dir.len();
        if let Some(old) = self.records.insert(dir.to_vec(), rec) {
            // It had one after all: its path was counted already.
            let _ = old;
            self.bytes -= dir.len();
        }
    }

    /// Marks `dir`'s entries changed for command number `at`; whether it
    /// has a record. (Creates held back in a batch change a directory
    /// later than their command: that is no change after its times.)
    pub(super) fn change(&mut self, dir: &[u8], at: u64) -> bool {
        let t = self.tick();
        match self.records.get_mut(dir) {
            Some(r) => {
                let was = r.changed;
                r.changed |= at > r.pos.index;
                r.last = t;
                if r.changed != was {
                    if let Some(j) = self.journal.as_mut() {
                        j.change(dir, at);
                    }
                }
                true
            }
            None => false,
        }
    }

    /// Takes the records at and beneath `dir`.
    fn take_within(&mut self, dir: &[u8]) -> Vec<(Vec<u8>, Record)> {
        let mut out = Vec::new();
        if let Some(r) = self.records.remove(dir) {
            out.push((dir.to_vec(), r));
        }
        // Beneath `dir`: the keys from "dir/" up to "dir0" ('0' follows '/').
        let mut lo = dir.to_vec();
        lo.push(b'/');
        let mut hi = dir.to_vec();
        hi.push(b'/' + 1);
        let beneath: Vec<Vec<u8>> = self.records.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in beneath {
            if let Some(r) = self.records.remove(&k) {
                out.push((k, r));
            }
        }
        for (k, _) in &out {
            self.bytes -= k.len();
        }
        out
    }

    /// `from` was renamed to `to`: what was beneath `to` is gone, what was
    /// beneath `from` is beneath `to` now.
    pub(super) fn renamed(&mut self, from: &[u8], to: &[u8]) {
        if let Some(j) = self.journal.as_mut() {
            j.renamed(from, to);
        }
        self.take_within(to);
        for (k, r) in self.take_within(from) {
            let mut p = Vec::with_capacity(to.len() + k.len() - from.len());
            p.extend_from_slice(to);
            p.extend_from_slice(&k[from.len()..]);
            self.bytes += p.len();
            self.records.insert(p, r);
        }
    }

    /// Directory `dir` was removed.
    pub(super) fn removed(&mut self, dir: &[u8]) {
        if let Some(j) = self.journal.as_mut() {
            j.removed(dir);
        }
        self.take_within(dir);
    }

    /// Takes the least recently used quarter of the records (at least one),
    /// to be applied now.
    pub(super) fn evict(&mut self) -> Vec<(Vec<u8>, Record)> {
        let n = (self.records.len() / 4).max(1).min(self.records.len());
        if n == 0 {
            return Vec::new();
        }
        let mut lasts: Vec<u64> = self.records.values().map(|r| r.last).collect();
        let (_, &mut threshold, _) = lasts.select_nth_unstable(n - 1);
        let mut out = Vec::with_capacity(n);
        self.records.retain(|k, r| {
            if r.last <= threshold {
                out.push((k.clone(), *r));
                false
            } else {
                true
            }
        });
        for (k, _) in &out {
            self.bytes -= k.len();
        }
        out
    }

    /// Takes every record.
    pub(super) fn take_all(&mut self) -> Vec<(Vec<u8>, Record)> {
        self.bytes = 0;
        std::mem::take(&mut self.records).into_iter().collect()
    }

    pub(super) fn clear(&mut self) {
        self.records.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::journal::Source;
    use btrfs_stream::{CommandKind, Position, Timespec};

    fn ts(sec: i64) -> Timespec {
        Timespec { sec, nsec: 1 }
    }

    fn rec(sec: i64) -> Record {
        let pos = Position {
            index: sec as u64,
            offset: 0,
            len: 0,
            version: 1,
        };
        Record::new(
            ts(sec),
            ts(sec + 1),
            Source::Utimes,
            CommandKind::Utimes,
            pos,
        )
    }

    fn keys(d: &DirTimes) -> Vec<String> {
        d.records
            .keys()
            .map(|k| String::from_utf8(k.clone()).unwrap())
            .collect()
    }

    #[test]
    fn records_follow_renames_of_the_directory_and_its_ancestors() {
        let mut d = DirTimes::new(100);
        for (i, p) in ["a", "a/b", "a/b/c", "a-b", "ab", "a0", "x"]
            .iter()
            .enumerate()
        {
            d.record(p.as_bytes(), rec(i as i64));
        }
        d.renamed(b"a", b"x/y");
        assert_eq!(
            keys(&d),
            ["a-b", "a0", "ab", "x", "x/y", "x/y/b", "x/y/b/c"]
        );
        assert_eq!(d.records[&b"x/y/b/c"[..]].atime, ts(2));
        d.renamed(b"x/y/b", b"a0");
        assert_eq!(keys(&d), ["a-b", "a0", "a0/c", "ab", "x", "x/y"]);
        d.removed(b"a0");
        assert_eq!(keys(&d), ["a-b", "ab", "x", "x/y"]);
        assert_eq!(d.bytes, 3 + 2 + 1 + 3);
    }

    #[test]
    fn eviction_takes_the_least_recently_changed_quarter() {
        let mut d = DirTimes::new(16);
        for i in 0..16 {
            d.record(format!("d{i:02}").as_bytes(), rec(i));
        }
        assert!(!d.has_room(1));
        // d00 and d01 are changed again: they are recent now.
        assert!(d.change(b"d00", 100));
        assert!(d.change(b"d01", 0));
        assert!(!d.change(b"nope", 100));
        let out: Vec<String> = d
            .evict()
            .into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect();
        assert_eq!(out, ["d02", "d03", "d04", "d05"]);
        assert_eq!(d.len(), 12);
        assert!(d.records[&b"d00"[..]].changed);
        // Changed for a command before the UTIMES: not after it.
        assert!(!d.records[&b"d01"[..]].changed);
        assert!(d.has_room(4) && !d.has_room(5));
        assert_eq!(d.take_all().len(), 12);
        assert!(d.is_empty() && d.bytes == 0);
    }
}
