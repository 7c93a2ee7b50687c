//! The dump limit: one crc32c pass over the stream's bytes.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use btrfs_disk::csum::CsumType;

use crate::work::on_all_cores;

/// Bytes read and summed per work item.
const PIECE: u64 = 256 << 10;

/// What a pass summed.
#[derive(Default)]
pub struct Summed {
    bytes: u64,
    /// The pieces' checksums xored, so the work cannot be skipped.
    xor: u32,
    threads: usize,
}

impl Summed {
    fn add(&mut self, o: Summed) {
        self.bytes += o.bytes;
        self.xor ^= o.xor;
    }
}

impl fmt::Display for Summed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crc32c over {} bytes ({} threads): xor of the pieces' sums {:08x}",
            self.bytes, self.threads, self.xor
        )
    }
}

fn crc32c(data: &[u8]) -> u32 {
    let sum = CsumType::Crc32c.compute(data);
    u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]])
}

/// crc32c over the file at `path`, mapped into memory (no copy, as rdump
/// reads it), in pieces on `threads` threads.
pub fn file(path: &Path, threads: usize) -> anyhow::Result<Summed> {
    let f = File::open(path)?;
    if f.metadata()?.len() == 0 {
        return Ok(Summed {
            threads,
            ..Summed::default()
        });
    }
    // SAFETY: the stream file is not changed while the pass runs (the
    // benchmark writes it before and removes it after); a change would
    // only change the sums, which nothing relies on.
    let map = unsafe { memmap2::Mmap::map(&f)? };
    let pieces: Vec<&[u8]> = map.chunks(PIECE as usize).collect();
    let mut s = on_all_cores(
        pieces.len(),
        threads,
        |i| {
            Ok(Summed {
                bytes: pieces[i].len() as u64,
                xor: crc32c(pieces[i]),
                threads: 0,
            })
        },
        Summed::add,
    )?;
    s.threads = threads;
    Ok(s)
}

/// crc32c over standard input, read in order on one thread (a pipe has one reader).
pub fn stdin() -> anyhow::Result<Summed> {
    let mut input = std::io::stdin().lock();
    let mut buf = vec![0u8; PIECE as usize];
    let mut s = Summed {
        threads: 1,
        ..Summed::default()
    };
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            return Ok(s);
        }
        s.bytes += n as u64;
        s.xor ^= crc32c(&buf[..n]);
    }
}
