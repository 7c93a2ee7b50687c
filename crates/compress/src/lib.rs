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
