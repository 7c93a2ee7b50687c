//! Opening the stream to dump: regular files are memory-mapped, so command
//! data is checked in place without being copied; pipes and other files are
//! read through a buffer. Input that begins with the zstd frame magic is
//! decompressed while it is read ([`Decompress`]), a file or a pipe alike;
//! byte offsets are then those of the decompressed stream.

use std::fs::File;
use std::io::{self, BufReader, Chain, Cursor, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use std::sync::Arc;

use btrfs_stream::{CrcAhead, Source};
use memmap2::{Advice, Mmap, UncheckedAdvice};

/// The first four bytes of a zstd frame (the magic number 0xFD2FB528,
/// little-endian).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// An opened input stream.
pub enum Input {
    /// A regular file, mapped read-only.
    Mapped(Mmap),
    /// Anything else, read sequentially.
    Stream(Box<dyn Read>),
    /// zstd-compressed input, decompressed while read.
    Zstd(Box<dyn Read>),
}

impl Input {
    /// Standard input; a pipe gets a 1 MiB buffer so each read moves more.
    /// Reads the first bytes (waiting for them on a pipe) to tell a
    /// zstd-compressed stream.
    pub fn stdin() -> io::Result<Input> {
        let stdin = io::stdin();
        // Fails harmlessly when stdin is not a pipe, or the size is above
        // /proc/sys/fs/pipe-max-size for an unprivileged user.
        let _ = nix::fcntl::fcntl(
            stdin.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20),
        );
        Input::sequential(stdin.lock())
    }

    /// Whether the input is zstd-compressed (and decompressed as read).
    pub fn is_compressed(&self) -> bool {
        matches!(self, Input::Zstd(_))
    }

    /// Input read in sequence from `r`, decompressed if it is zstd.
    fn sequential(r: impl Read + 'static) -> io::Result<Input> {
        let d = Decompress::new(r)?;
        Ok(if d.is_zstd() {
            Input::Zstd(Box::new(d))
        } else {
            Input::Stream(Box::new(d))
        })
    }

    /// Opens `path`, mapping it when it is a non-empty regular file that
    /// is not zstd-compressed.
    pub fn open(path: &Path) -> io::Result<Input> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.len() == 0 {
            return Input::sequential(file);
        }
        // The first bytes, read without moving the file position.
        let mut head = [0u8; ZSTD_MAGIC.len()];
        let mut got = 0;
        while got < head.len() {
            match file.read_at(&mut head[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if head[..got] == ZSTD_MAGIC {
            return Ok(Input::Zstd(Box::new(zstd::Decoder::new(file)?)));
        }
        // SAFETY: the map is read-only and private to this process. Should
        // another process truncate the file while it is being dumped, reads
        // past the new end fault (SIGBUS): the risk every reader that maps a
        // shared file takes, as ripgrep does.
        match unsafe { Mmap::map(&file) } {
            Ok(map) => {
                let _ = map.advise(Advice::Sequential);
                Ok(Input::Mapped(map))
            }
            // Not mappable: read it instead.
            Err(_) => Ok(Input::Stream(Box::new(file))),
        }
    }
}

/// Opens a stream file that may be zstd-compressed, to read the stream's
/// bytes in sequence: decompressed (streaming, in bounded memory) when the
/// file begins with [`ZSTD_MAGIC`], as they are otherwise.
pub fn open_stream_file(path: &Path) -> io::Result<Decompress<File>> {
    Decompress::new(File::open(path)?)
}

/// The first bytes of an input, read to tell its format, then handed on.
type Head<R> = Chain<Cursor<Vec<u8>>, R>;

/// A reader of a send stream that may be zstd-compressed: the first four
/// bytes of the input tell ([`ZSTD_MAGIC`]); compressed input is
/// decompressed while read (every frame, up to the end), and anything else
/// is passed through unchanged.
pub struct Decompress<R: Read> {
    inner: Decoded<R>,
}

/// What a [`Decompress`] reads through.
enum Decoded<R: Read> {
    Plain(Head<R>),
    Zstd(Box<zstd::Decoder<'static, BufReader<Head<R>>>>),
}

impl<R: Read> Decompress<R> {
    /// Reads the first bytes of `inner` (up to four; fewer at its end) to
    /// tell whether it is zstd-compressed.
    pub fn new(mut inner: R) -> io::Result<Self> {
        let mut head = [0u8; ZSTD_MAGIC.len()];
        let mut got = 0;
        while got < head.len() {
            match inner.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let zstd = head[..got] == ZSTD_MAGIC;
        let r = Cursor::new(head[..got].to_vec()).chain(inner);
        let inner = if zstd {
            Decoded::Zstd(Box::new(zstd::Decoder::new(r)?))
        } else {
            Decoded::Plain(r)
        };
        Ok(Decompress { inner })
    }

    /// Whether the input is zstd-compressed.
    pub fn is_zstd(&self) -> bool {
        matches!(self.inner, Decoded::Zstd(_))
    }
}

impl<R: Read> Read for Decompress<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.inner {
            Decoded::Plain(r) => r.read(buf),
            Decoded::Zstd(r) => r.read(buf),
        }
    }
}

/// Decoded bytes are handed back to the kernel in steps of this size.
const RELEASE: usize = 4 << 20;

/// A mapped stream file as a reader [`Source`]: commands are decoded in
/// place, and pages already decoded are released as the reader moves on, so
/// the resident set stays small however large the file.
pub struct MappedSource {
    map: Arc<Mmap>,
    pos: usize,
    released: usize,
    /// Command CRCs checked on another core, for a large file.
    ahead: Option<CrcAhead>,
}

/// Files at least this large have their CRCs checked ahead on another core.
const AHEAD_MIN: usize = 8 << 20;

/// How far ahead of the reader the CRC check may run (mapped pages it
/// touches stay resident until the reader releases them).
const AHEAD_LEAD: u64 = 2 * RELEASE as u64;

/// A checker waiting for the reader is woken in steps of this size.
const ADVANCE_STEP: usize = 1 << 20;

impl MappedSource {
    /// A source over all of `map`.
    pub fn new(map: Mmap) -> Self {
        let map = Arc::new(map);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ahead = (map.len() >= AHEAD_MIN && cores > 1)
            .then(|| CrcAhead::spawn(Arc::clone(&map), AHEAD_LEAD).ok())
            .flatten();
        MappedSource {
            map,
            pos: 0,
            released: 0,
            ahead,
        }
    }
}

impl Source for MappedSource {
    fn fill(&mut self, _need: usize) -> io::Result<()> {
        Ok(())
    }

    fn window(&self) -> &[u8] {
        &self.map[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        if let Some(a) = &self.ahead {
            let wake = (self.pos + n) / ADVANCE_STEP != self.pos / ADVANCE_STEP;
            a.advance((self.pos + n) as u64, wake);
        }
        self.pos += n;
        let done = self.pos & !(RELEASE - 1);
        if done > self.released {
            // SAFETY: nothing borrows bytes before `pos` any more (a command
            // borrows the window only until the reader's next call, which is
            // what consumes it), and this is a read-only file mapping: a
            // later access would fault the file's bytes in again.
            let _ = unsafe {
                self.map.unchecked_advise_range(
                    UncheckedAdvice::DontNeed,
                    self.released,
                    done - self.released,
                )
            };
            self.released = done;
        }
    }

    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn crc_checked(&mut self, len: usize) -> bool {
        self.ahead
            .as_ref()
            .is_some_and(|a| a.take(self.pos as u64, (self.pos + len) as u64))
    }
}
