//! Where a [`Reader`](crate::Reader) gets its bytes: any `io::Read` through
//! a bounded buffer, or bytes already in memory (such as a mapped file)
//! without any copy.

use std::io::{self, Read};

/// Bytes for a reader, seen through a window at the current position.
pub trait Source {
    /// Makes at least `need` bytes available at the current position, unless
    /// the input ends first.
    fn fill(&mut self, need: usize) -> io::Result<()>;
    /// The bytes available at the current position.
    fn window(&self) -> &[u8];
    /// Moves the current position forward by `n <= window().len()` bytes.
    fn consume(&mut self, n: usize);
    /// Input offset of the current position.
    fn offset(&self) -> u64;
    /// Whether the next `len` bytes, one whole command, are known to carry
    /// a good CRC (checked ahead, see [`CrcAhead`](crate::CrcAhead)); the
    /// reader then does not compute it again.
    fn crc_checked(&mut self, _len: usize) -> bool {
        false
    }
}

const INITIAL_BUF: usize = 1 << 20;
const MIN_READ: usize = 128 << 10;
const PAGE: usize = 4096;

/// Reads from an `io::Read` into a buffer that grows only to the largest
/// unit requested.
pub struct ReadSource<R> {
    inner: R,
    buf: Vec<u8>,
    /// Valid bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Input offset of `buf[0]`.
    base: u64,
    eof: bool,
}

impl<R: Read> ReadSource<R> {
    /// A source over `inner`.
    pub fn new(inner: R) -> Self {
        ReadSource {
            inner,
            buf: Vec::new(),
            start: 0,
            end: 0,
            base: 0,
            eof: false,
        }
    }
}

impl<R: Read> ReadSource<R> {
    /// The buffer index whose address is congruent to input offset `off`
    /// modulo the page size. Reading there keeps the kernel's page-cache copy
    /// on its fast path; a small skew between source and destination
    /// addresses (4K aliasing) makes it several times slower.
    fn aligned_index(&self, off: u64) -> usize {
        (off as usize).wrapping_sub(self.buf.as_ptr() as usize) % PAGE
    }
}

impl<R: Read> Source for ReadSource<R> {
    fn fill(&mut self, need: usize) -> io::Result<()> {
        while self.end - self.start < need && !self.eof {
            if self.buf.is_empty() {
                self.buf = vec![0; INITIAL_BUF + PAGE];
                let at = self.aligned_index(self.base);
                // The input offset of buf[0]: below 0 before the first byte,
                // so it wraps (only base + index is ever an offset).
                self.base = self.base.wrapping_sub(at as u64);
                (self.start, self.end) = (at, at);
            }
            if self.start >= PAGE && self.buf.len() - self.end < MIN_READ {
                // Move the partial unit to the front to make room.
                let off = self.base.wrapping_add(self.start as u64);
                let at = self.aligned_index(off);
                self.buf.copy_within(self.start..self.end, at);
                self.base = off.wrapping_sub(at as u64);
                self.end = at + (self.end - self.start);
                self.start = at;
            }
            if self.end == self.buf.len() {
                // Grow only as data arrives, so a huge declared length in a
                // short input never allocates the whole length.
                let cap = (self.start + need).max(INITIAL_BUF + PAGE);
                self.buf
                    .resize((self.buf.len() * 2).min(cap).max(self.end + 1), 0);
            }
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn window(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
    }

    fn offset(&self) -> u64 {
        self.base.wrapping_add(self.start as u64)
    }
}

/// Bytes already in memory: a slice, a vector or a memory map.
pub struct SliceSource<T> {
    data: T,
    pos: usize,
}

impl<T: AsRef<[u8]>> SliceSource<T> {
    /// A source over all of `data`.
    pub fn new(data: T) -> Self {
        SliceSource { data, pos: 0 }
    }
}

impl<T: AsRef<[u8]>> Source for SliceSource<T> {
    fn fill(&mut self, _need: usize) -> io::Result<()> {
        Ok(())
    }

    fn window(&self) -> &[u8] {
        &self.data.as_ref()[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
    }

    fn offset(&self) -> u64 {
        self.pos as u64
    }
}
