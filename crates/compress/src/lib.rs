//! btrfs's compression formats, decoded once for the whole workspace: zlib,
//! zstd, and LZO1X in btrfs's per-sector framing.
//!
//! The same bytes reach us two ways: as a compressed file extent read from
//! disk (rsend) and as the data of an ENCODED_WRITE command (rreceive). Both
//! go through [`decompress`], which applies the kernel's checks: a zlib
//! stream needs its header and a matching adler32 trailer, an LZO segment
//! must end exactly at its end marker, a zstd frame must be the only one and
//! fit the extent, and no extent holds more than
//! [`MAX_COMPRESSED`] bytes on disk or [`MAX_UNCOMPRESSED`] decoded.

#![warn(missing_docs)]

mod lzo;
mod zlib;
mod zstd;

pub use lzo::lzo1x_decompress;

/// Largest compressed extent btrfs writes (`BTRFS_MAX_COMPRESSED`).
pub const MAX_COMPRESSED: usize = 128 * 1024;
/// Largest decoded size of a compressed extent (`BTRFS_MAX_UNCOMPRESSED`).
pub const MAX_UNCOMPRESSED: usize = 128 * 1024;

/// A compression format as btrfs stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Stored as is.
    None,
    /// One zlib stream (header, deflate data, adler32).
    Zlib,
    /// LZO1X segments framed per `sector` bytes of compressed data.
    Lzo {
        /// The framing's sector size: 4 KiB to 64 KiB.
        sector: u32,
    },
    /// One zstd frame.
    Zstd,
}

impl Algorithm {
    /// The compression of a file extent item (`BTRFS_COMPRESS_*`: 0 none,
    /// 1 zlib, 2 lzo, 3 zstd) on a filesystem of `sectorsize`.
    pub fn from_extent(compression: u8, sectorsize: u32) -> Result<Algorithm, Error> {
        match compression {
            0 => Ok(Algorithm::None),
            1 => Ok(Algorithm::Zlib),
            2 => Algorithm::lzo(sectorsize),
            3 => Ok(Algorithm::Zstd),
            c => Err(Error::UnknownExtentCompression(c)),
        }
    }

    /// The compression of an encoded write (`BTRFS_ENCODED_IO_COMPRESSION_*`:
    /// 0 none, 1 zlib, 2 zstd, 3..=7 LZO with 4 KiB..64 KiB sectors).
    pub fn from_encoded(compression: u32) -> Result<Algorithm, Error> {
        match compression {
            0 => Ok(Algorithm::None),
            1 => Ok(Algorithm::Zlib),
            2 => Ok(Algorithm::Zstd),
            c @ 3..=7 => Ok(Algorithm::Lzo {
                sector: 4096 << (c - 3),
            }),
            c => Err(Error::UnknownEncodedCompression(c)),
        }
    }

    fn lzo(sector: u32) -> Result<Algorithm, Error> {
        if sector.is_power_of_two() && (4096..=65536).contains(&sector) {
            Ok(Algorithm::Lzo { sector })
        } else {
            Err(Error::LzoSector(sector))
        }
    }

    /// The format's name: "none", "zlib", "lzo" or "zstd".
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::None => "none",
            Algorithm::Zlib => "zlib",
            Algorithm::Lzo { .. } => "lzo",
            Algorithm::Zstd => "zstd",
        }
    }
}

/// Why compressed data could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A file extent's compression byte is not one btrfs defines.
    #[error("unknown extent compression {0}")]
    UnknownExtentCompression(u8),
    /// An encoded write's compression number is not one btrfs defines.
    #[error("unknown compression type {0}")]
    UnknownEncodedCompression(u32),
    /// LZO framing needs a power-of-two sector of 4 KiB to 64 KiB.
    #[error("lzo: no framing for sector size {0}")]
    LzoSector(u32),
    /// More compressed bytes than one btrfs extent holds.
    #[error("{algorithm}: {len} bytes of compressed data, more than btrfs's {MAX_COMPRESSED}")]
    InputTooLarge {
        /// The format.
        algorithm: &'static str,
        /// Bytes given.
        len: usize,
    },
    /// More decoded bytes asked for than one btrfs extent holds.
    #[error("{algorithm}: {len} decoded bytes asked for, more than btrfs's {MAX_UNCOMPRESSED}")]
    OutputTooLarge {
        /// The format.
        algorithm: &'static str,
        /// Bytes asked for.
        len: usize,
    },
    /// An ENCODED_WRITE's lengths do not fit together.
    #[error("invalid encoded write: {0}")]
    BadEncoded(&'static str),
    /// The data is not valid in its format.
    #[error("corrupt {algorithm} data at byte {offset}: {why}")]
    Corrupt {
        /// The format.
        algorithm: &'static str,
        /// Offset in the compressed data where decoding failed.
        offset: usize,
        /// What is wrong.
        why: String,
    },
}

/// Largest decoded extent an ENCODED_WRITE is taken to carry (btrfs
/// itself never exceeds [`MAX_UNCOMPRESSED`]; uncompressed ones may be
/// longer).
pub const MAX_UNENCODED: u64 = 16 << 20;

/// The extent an ENCODED_WRITE carries, its lengths checked: how its data
/// is stored, how long it decodes to, and which of those bytes the file
/// gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// How its data is compressed.
    pub algorithm: Algorithm,
    /// Length of the whole decoded extent.
    pub unencoded_len: u64,
    /// Where in the decoded extent the file's bytes start...
    pub unencoded_offset: u64,
    /// ... and how many there are.
    pub len: u64,
}

impl Encoded {
    /// The extent of an ENCODED_WRITE with these fields (`len` is its
    /// `unencoded_file_len`), or why they do not fit together.
    pub fn new(
        compression: u32,
        unencoded_len: u64,
        unencoded_offset: u64,
        len: u64,
    ) -> Result<Encoded, Error> {
        if unencoded_len > MAX_UNENCODED {
            return Err(Error::BadEncoded("unencoded length too large"));
        }
        unencoded_offset
            .checked_add(len)
            .filter(|&e| e <= unencoded_len)
            .ok_or(Error::BadEncoded("file range beyond the unencoded data"))?;
        Ok(Encoded {
            algorithm: Algorithm::from_encoded(compression)?,
            unencoded_len,
            unencoded_offset,
            len,
        })
    }

    /// Decodes `data` into `buf` (reused); returns the bytes the file gets.
    pub fn decode<'b>(&self, data: &[u8], buf: &'b mut Vec<u8>) -> Result<&'b [u8], Error> {
        let bad = || Error::BadEncoded("file range beyond the unencoded data");
        let whole = usize::try_from(self.unencoded_len).map_err(|_| bad())?;
        buf.clear();
        buf.resize(whole, 0);
        let n = decompress(self.algorithm, data, buf)?;
        if let Some(rest) = buf.get_mut(n..) {
            rest.fill(0);
        }
        let start = usize::try_from(self.unencoded_offset).map_err(|_| bad())?;
        let end = self
            .unencoded_offset
            .checked_add(self.len)
            .and_then(|e| usize::try_from(e).ok())
            .ok_or_else(bad)?;
        buf.get(start..end).ok_or_else(bad)
    }
}

pub(crate) fn corrupt(algorithm: &'static str, offset: usize, why: impl Into<String>) -> Error {
    Error::Corrupt {
        algorithm,
        offset,
        why: why.into(),
    }
}

/// Decodes `input`, stored with `algorithm`, into `out`; returns how many
/// bytes it produced.
///
/// At most `out.len()` bytes are written: decoded data past that is cut off,
/// as the kernel cuts it off at the extent's size. Output shorter than `out`
/// means the rest of the extent reads as zeros; the caller fills them.
/// `input` may carry zero padding up to its sector after the compressed data.
pub fn decompress(algorithm: Algorithm, input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
    if algorithm != Algorithm::None {
        if input.len() > MAX_COMPRESSED {
            return Err(Error::InputTooLarge {
                algorithm: algorithm.name(),
                len: input.len(),
            });
        }
        if out.len() > MAX_UNCOMPRESSED {
            return Err(Error::OutputTooLarge {
                algorithm: algorithm.name(),
                len: out.len(),
            });
        }
    }
    match algorithm {
        Algorithm::None => {
            let n = input.len().min(out.len());
            out[..n].copy_from_slice(&input[..n]);
            Ok(n)
        }
        Algorithm::Zlib => zlib::decompress(input, out),
        Algorithm::Lzo { sector } => lzo::decompress_framed(input, out, sector as usize),
        Algorithm::Zstd => zstd::decompress(input, out),
    }
}

#[cfg(test)]
pub(crate) mod sample {
    /// Deterministic text-like bytes with some noise.
    pub fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(1103515245).wrapping_add(12345);
                if i % 97 < 60 {
                    b"the quick brown fox "[i % 20]
                } else {
                    (x >> 16) as u8
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ENCODED_WRITE's lengths are checked as they come, and only the
    /// file's part of the decoded extent is given, past a short decode
    /// as zeros.
    #[test]
    fn an_encoded_extent_gives_the_file_its_range() {
        let plain = sample::bytes(10_000, 7);
        let z = ::zstd::bulk::compress(&plain, 3).unwrap();
        let x = Encoded::new(2, 12_288, 100, 10_000).unwrap();
        let mut buf = Vec::new();
        let got = x.decode(&z, &mut buf).unwrap();
        assert_eq!(&got[..9_900], &plain[100..]);
        assert!(got[9_900..].iter().all(|&b| b == 0));
        let range = Error::BadEncoded("file range beyond the unencoded data");
        assert_eq!(Encoded::new(2, 4096, 1, 4096), Err(range.clone()));
        assert_eq!(Encoded::new(2, 4096, u64::MAX, 2), Err(range));
        assert_eq!(
            Encoded::new(0, MAX_UNENCODED + 1, 0, 1),
            Err(Error::BadEncoded("unencoded length too large"))
        );
        assert_eq!(
            Encoded::new(9, 4096, 0, 4096),
            Err(Error::UnknownEncodedCompression(9))
        );
        assert_eq!(
            Encoded::new(0, 4096, 0, 10)
                .unwrap()
                .decode(b"abc", &mut buf),
            Ok(&b"abc\0\0\0\0\0\0\0"[..])
        );
    }

    #[test]
    fn numbers_map_as_the_kernel_defines_them() {
        assert_eq!(
            Algorithm::from_extent(2, 4096),
            Ok(Algorithm::Lzo { sector: 4096 })
        );
        assert_eq!(Algorithm::from_extent(3, 4096), Ok(Algorithm::Zstd));
        assert_eq!(
            Algorithm::from_extent(4, 4096),
            Err(Error::UnknownExtentCompression(4))
        );
        assert_eq!(Algorithm::from_extent(2, 1000), Err(Error::LzoSector(1000)));
        assert_eq!(Algorithm::from_encoded(2), Ok(Algorithm::Zstd));
        assert_eq!(
            Algorithm::from_encoded(3),
            Ok(Algorithm::Lzo { sector: 4096 })
        );
        assert_eq!(
            Algorithm::from_encoded(7),
            Ok(Algorithm::Lzo { sector: 65536 })
        );
        assert_eq!(
            Algorithm::from_encoded(8),
            Err(Error::UnknownEncodedCompression(8))
        );
    }

    #[test]
    fn extents_larger_than_btrfs_allows_are_refused() {
        let big = vec![0u8; MAX_COMPRESSED + 1];
        let mut out = vec![0u8; 4096];
        for a in [
            Algorithm::Zlib,
            Algorithm::Zstd,
            Algorithm::Lzo { sector: 4096 },
        ] {
            assert!(matches!(
                decompress(a, &big, &mut out),
                Err(Error::InputTooLarge { .. })
            ));
            let mut huge = vec![0u8; MAX_UNCOMPRESSED + 1];
            assert!(matches!(
                decompress(a, &big[..10], &mut huge),
                Err(Error::OutputTooLarge { .. })
            ));
        }
        // Uncompressed data has no such limit.
        assert_eq!(decompress(Algorithm::None, &big, &mut out), Ok(4096));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = vec![0u8; 8192];
        let mut x = 7u32;
        for n in [0usize, 1, 2, 3, 4, 5, 16, 100, 1000, 5000] {
            for _ in 0..50 {
                let mut g: Vec<u8> = (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                        (x >> 24) as u8
                    })
                    .collect();
                for a in [
                    Algorithm::Zlib,
                    Algorithm::Zstd,
                    Algorithm::Lzo { sector: 4096 },
                ] {
                    let _ = decompress(a, &g, &mut out);
                }
                let _ = lzo1x_decompress(&g, &mut out);
                if n >= 4 {
                    g[..4].copy_from_slice(&(n as u32).to_le_bytes());
                    let _ = decompress(Algorithm::Lzo { sector: 4096 }, &g, &mut out);
                }
            }
        }
    }
}
