//! Opening the stream to dump: regular files are memory-mapped, so command
//! data is checked in place without being copied; pipes and other files are
//! read through a buffer.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;

use btrfs_stream::Source;
use memmap2::{Advice, Mmap, UncheckedAdvice};

/// An opened input stream.
pub enum Input {
    /// A regular file, mapped read-only.
    Mapped(Mmap),
    /// Anything else, read sequentially.
    Stream(Box<dyn Read>),
}

impl Input {
    /// Standard input; a pipe gets a 1 MiB buffer so each read moves more.
    pub fn stdin() -> Input {
        let stdin = io::stdin();
        // Fails harmlessly when stdin is not a pipe, or the size is above
        // /proc/sys/fs/pipe-max-size for an unprivileged user.
        let _ = nix::fcntl::fcntl(
            stdin.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20),
        );
        Input::Stream(Box::new(stdin.lock()))
    }

    /// Opens `path`, mapping it when it is a non-empty regular file.
    pub fn open(path: &Path) -> io::Result<Input> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.len() == 0 {
            return Ok(Input::Stream(Box::new(file)));
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

/// Decoded bytes are handed back to the kernel in steps of this size.
const RELEASE: usize = 16 << 20;

/// A mapped stream file as a reader [`Source`]: commands are decoded in
/// place, and pages already decoded are released as the reader moves on, so
/// the resident set stays small however large the file.
pub struct MappedSource {
    map: Mmap,
    pos: usize,
    released: usize,
}

impl MappedSource {
    /// A source over all of `map`.
    pub fn new(map: Mmap) -> Self {
        MappedSource {
            map,
            pos: 0,
            released: 0,
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
}
