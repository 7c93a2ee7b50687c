//! A file's data as of one night: which byte ranges lie where, built by
//! laying each night's `extent` rows over the older ones.

use std::collections::BTreeMap;

use crate::schema::KIND_HOLE;

/// One byte range `[start, end)` of a file that is not a hole: it holds
/// the bytes the data commands in `[cmd_start, cmd_end)` of stream file
/// `file` wrote at file offsets `src..src + (end - start)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// First byte of the range in the file.
    pub start: u64,
    /// End of the range (exclusive).
    pub end: u64,
    /// `extent.kind` (a `schema::KIND_*` other than a hole).
    pub kind: i64,
    /// `stream_file.id`.
    pub file: i64,
    /// Byte offset of the first command of the run in the stream file.
    pub cmd_start: u64,
    /// End of the run's last command.
    pub cmd_end: u64,
    /// The file offset the commands wrote for `start`.
    pub src: u64,
}

impl Piece {
    /// The part of `self` within `[start, end)`, if any.
    pub fn within(&self, start: u64, end: u64) -> Option<Piece> {
        let s = self.start.max(start);
        let e = self.end.min(end);
        (s < e).then(|| Piece {
            start: s,
            end: e,
            src: self.src + (s - self.start),
            ..*self
        })
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// A file's non-hole ranges, non-overlapping, by start.
#[derive(Debug, Default, Clone)]
pub struct Layout {
    pieces: BTreeMap<u64, Piece>,
}

impl Layout {
    /// An empty layout: every byte a hole.
    pub fn new() -> Layout {
        Layout::default()
    }

    /// Lays `piece` over what is there; a piece of kind hole leaves
    /// `[start, end)` empty.
    pub fn lay(&mut self, piece: Piece) {
        if piece.is_empty() {
            return;
        }
        self.cut(piece.start, piece.end);
        if piece.kind != KIND_HOLE {
            self.pieces.insert(piece.start, piece);
        }
    }

    /// Makes `[start, end)` a hole.
    pub fn cut(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        if let Some((_, &p)) = self.pieces.range(..start).next_back() {
            if p.end > start {
                self.pieces.remove(&p.start);
                if let Some(head) = p.within(p.start, start) {
                    self.pieces.insert(head.start, head);
                }
                if let Some(tail) = p.within(end, p.end) {
                    self.pieces.insert(tail.start, tail);
                }
            }
        }
        let inside: Vec<u64> = self.pieces.range(start..end).map(|(&k, _)| k).collect();
        for k in inside {
            if let Some(p) = self.pieces.remove(&k) {
                if let Some(tail) = p.within(end, p.end) {
                    self.pieces.insert(tail.start, tail);
                }
            }
        }
    }

    /// The pieces within `[start, end)`, clipped to it, in order.
    pub fn range(&self, start: u64, end: u64) -> impl Iterator<Item = Piece> + '_ {
        let first = self
            .pieces
            .range(..start)
            .next_back()
            .filter(|(_, p)| p.end > start)
            .map(|(_, p)| *p);
        first
            .into_iter()
            .chain(self.pieces.range(start..end).map(|(_, p)| *p))
            .filter_map(move |p| p.within(start, end))
    }

    /// Every piece, in order.
    pub fn pieces(&self) -> impl Iterator<Item = &Piece> {
        self.pieces.values()
    }

    /// Bytes held in pieces.
    pub fn data_bytes(&self) -> u64 {
        self.pieces.values().map(Piece::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::KIND_WRITE;

    fn w(start: u64, end: u64, src: u64) -> Piece {
        Piece {
            start,
            end,
            kind: KIND_WRITE,
            file: 1,
            cmd_start: 0,
            cmd_end: 1,
            src,
        }
    }

    /// Reads a layout back as (start, end, src) triples.
    fn spans(l: &Layout) -> Vec<(u64, u64, u64)> {
        l.pieces().map(|p| (p.start, p.end, p.src)).collect()
    }

    #[test]
    fn later_pieces_cover_earlier_ones_and_holes_cut() {
        let mut l = Layout::new();
        l.lay(w(0, 100, 0));
        l.lay(w(40, 60, 1000));
        assert_eq!(spans(&l), vec![(0, 40, 0), (40, 60, 1000), (60, 100, 60)]);
        l.lay(Piece {
            kind: KIND_HOLE,
            ..w(30, 70, 0)
        });
        assert_eq!(spans(&l), vec![(0, 30, 0), (70, 100, 70)]);
        let r: Vec<_> = l.range(20, 80).map(|p| (p.start, p.end, p.src)).collect();
        assert_eq!(r, vec![(20, 30, 20), (70, 80, 70)]);
        l.cut(0, 1000);
        assert!(spans(&l).is_empty());
    }

    #[test]
    fn a_piece_inside_one_splits_it() {
        let mut l = Layout::new();
        l.lay(w(0, 10, 100));
        l.lay(w(3, 4, 7));
        assert_eq!(spans(&l), vec![(0, 3, 100), (3, 4, 7), (4, 10, 104)]);
        assert_eq!(l.data_bytes(), 10);
    }
}
