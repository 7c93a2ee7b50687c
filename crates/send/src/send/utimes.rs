//! Pending directory utimes: the kernel's `dir_utimes_cache`.
//!
//! A non-empty directory gets its UTIMES only after its entries are in
//! place, because adding an entry on the receiver changes the directory's
//! mtime. Like the kernel (6.3, "cache directory utimes and only emit the
//! command when necessary") we keep the directories whose UTIMES is due in a
//! small LRU: every new entry in a directory touches it, and when more than
//! [`MAX_PENDING`] are pending the least recently touched one is sent. What
//! is left goes out at the end of the stream, most recently touched first.
//! The order matters only for byte-identical streams; memory stays bounded.

use std::collections::VecDeque;

/// The kernel's SEND_MAX_DIR_UTIMES_CACHE_SIZE.
pub(crate) const MAX_PENDING: usize = 64;

/// Directories (inode number, generation) waiting for their UTIMES, least
/// recently touched first.
#[derive(Debug, Default)]
pub(crate) struct DirUtimes {
    lru: VecDeque<(u64, u64)>,
}

impl DirUtimes {
    /// Marks `dir` as needing a UTIMES, or makes it the most recent if it
    /// already waits (btrfs_lru_cache_lookup + store).
    pub(crate) fn touch(&mut self, dir: u64, gen: u64) {
        if let Some(i) = self.lru.iter().rposition(|&e| e == (dir, gen)) {
            let e = self.lru.remove(i).unwrap_or((dir, gen));
            self.lru.push_back(e);
        } else {
            self.lru.push_back((dir, gen));
        }
    }

    /// The least recently touched directory, when more than
    /// [`MAX_PENDING`] wait; the caller sends its UTIMES.
    pub(crate) fn pop_over_limit(&mut self) -> Option<(u64, u64)> {
        if self.lru.len() > MAX_PENDING {
            self.lru.pop_front()
        } else {
            None
        }
    }

    /// Every pending directory, most recently touched first (the end-of-send flush).
    pub(crate) fn drain_newest_first(&mut self) -> Vec<(u64, u64)> {
        self.lru.drain(..).rev().collect()
    }

    /// How many wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lru.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_again_makes_a_directory_the_newest() {
        let mut u = DirUtimes::default();
        u.touch(256, 5);
        u.touch(257, 5);
        u.touch(258, 5);
        u.touch(256, 5);
        assert_eq!(u.len(), 3);
        assert_eq!(u.drain_newest_first(), vec![(256, 5), (258, 5), (257, 5)]);
    }

    #[test]
    fn only_the_least_recent_beyond_the_limit_is_sent_early() {
        let mut u = DirUtimes::default();
        for d in 0..MAX_PENDING as u64 {
            u.touch(1000 + d, 1);
        }
        assert_eq!(u.pop_over_limit(), None);
        u.touch(1000, 1);
        u.touch(5000, 1);
        assert_eq!(u.pop_over_limit(), Some((1001, 1)));
        assert_eq!(u.pop_over_limit(), None);
        assert_eq!(u.len(), MAX_PENDING);
    }
}
