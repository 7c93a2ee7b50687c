//! Decoding ENCODED_WRITE data: zlib, zstd and btrfs's framed LZO.
//!
//! The data is what btrfs stores on disk for one extent (send-stream.md
//! §1.6), possibly padded with zeros to a sector. Every decoder stops at
//! `unencoded_len` bytes of output and reports malformed input as an error;
//! none of them trusts a length in the data.

use btrfs_stream::command::compression;

/// Why encoded data could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The compression number is not one btrfs defines.
    #[error("unknown compression type {0}")]
    UnknownCompression(u32),
    /// The data is not valid for its compression.
    #[error("corrupt {what} data: {why}")]
    Corrupt {
        /// zlib, zstd or lzo.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
}

fn corrupt(what: &'static str, why: impl Into<String>) -> DecodeError {
    DecodeError::Corrupt {
        what,
        why: why.into(),
    }
}

/// Decodes `data` compressed with `compression` (`BTRFS_ENCODED_IO_*`) into
/// `out`, which receives at most `unencoded_len` bytes. Output shorter than
/// `unencoded_len` means the rest of the extent is zeros, as btrfs reads it.
pub fn decode(
    compression: u32,
    data: &[u8],
    unencoded_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    out.clear();
    match compression {
        compression::NONE => {
            out.extend_from_slice(&data[..data.len().min(unencoded_len)]);
            Ok(())
        }
        compression::ZLIB => zlib(data, unencoded_len, out),
        compression::ZSTD => zstd(data, unencoded_len, out),
        c @ compression::LZO_4K..=compression::LZO_64K => lzo_framed(
            data,
            1usize << (12 + (c - compression::LZO_4K)),
            unencoded_len,
            out,
        ),
        c => Err(DecodeError::UnknownCompression(c)),
    }
}

fn zlib(data: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    use flate2::{Decompress, FlushDecompress, Status};
    let mut d = Decompress::new(true);
    out.reserve_exact(limit);
    loop {
        let before_in = d.total_in();
        let before_out = out.len();
        let input = &data[(d.total_in() as usize).min(data.len())..];
        let status = d
            .decompress_vec(input, out, FlushDecompress::Finish)
            .map_err(|e| corrupt("zlib", e.to_string()))?;
        match status {
            Status::StreamEnd => return Ok(()),
            _ if out.len() >= limit => return Ok(()),
            _ if d.total_in() == before_in && out.len() == before_out => {
                // No progress: the input ended inside the stream.
                return Err(corrupt("zlib", "stream ends early"));
            }
            _ => {}
        }
    }
}

fn zstd(data: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    // One frame, followed by zero padding up to the sector size: decode
    // only the frame.
    let frame = zstd::zstd_safe::find_frame_compressed_size(data)
        .map_err(|e| corrupt("zstd", zstd::zstd_safe::get_error_name(e)))?;
    let frame = data
        .get(..frame)
        .ok_or_else(|| corrupt("zstd", "frame overruns data"))?;
    let mut dec = zstd::bulk::Decompressor::new().map_err(|e| corrupt("zstd", e.to_string()))?;
    out.reserve_exact(limit);
    dec.decompress_to_buffer(frame, out)
        .map_err(|e| corrupt("zstd", e.to_string()))?;
    Ok(())
}

/// btrfs LZO: le32 total length, then segments of le32 length + LZO1X data,
/// each decoding to at most one sector; a segment header never straddles a
/// sector boundary (fewer than 4 bytes left in a sector are padding).
fn lzo_framed(
    data: &[u8],
    sector: usize,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    let le32 = |at: usize| -> Result<usize, DecodeError> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| corrupt("lzo", format!("length field at {at} overruns the data")))
    };
    let total = le32(0)?;
    if total > data.len() || total < 4 {
        return Err(corrupt(
            "lzo",
            format!("total length {total} of {} bytes", data.len()),
        ));
    }
    let mut pos = 4;
    while pos < total && out.len() < limit {
        let left_in_sector = sector - pos % sector;
        if left_in_sector < 4 {
            pos += left_in_sector;
            if pos >= total {
                break;
            }
        }
        let seg_len = le32(pos)?;
        pos += 4;
        let seg = data
            .get(pos..pos.saturating_add(seg_len))
            .filter(|_| pos + seg_len <= total)
            .ok_or_else(|| corrupt("lzo", format!("segment of {seg_len} bytes overruns")))?;
        let room = sector.min(limit - out.len());
        lzo1x_decompress(seg, out, room)?;
        pos += seg_len;
    }
    Ok(())
}

/// Decodes one LZO1X block, appending at most `max` bytes to `out`.
pub fn lzo1x_decompress(src: &[u8], out: &mut Vec<u8>, max: usize) -> Result<(), DecodeError> {
    let base = out.len();
    let limit = base + max;
    let mut ip = 0usize;
    let err = |why: &str| corrupt("lzo", why.to_string());
    let byte = |ip: &mut usize| -> Result<usize, DecodeError> {
        let b = *src.get(*ip).ok_or_else(|| err("input ends early"))?;
        *ip += 1;
        Ok(usize::from(b))
    };
    let le16 = |ip: &mut usize| -> Result<usize, DecodeError> {
        let b = src
            .get(*ip..*ip + 2)
            .ok_or_else(|| err("input ends early"))?;
        *ip += 2;
        Ok(usize::from(u16::from_le_bytes([b[0], b[1]])))
    };
    // A run of zero bytes extends a length by 255 each, then one more byte.
    let long_len = |ip: &mut usize, extra: usize| -> Result<usize, DecodeError> {
        let mut n = 0usize;
        while *src.get(*ip).ok_or_else(|| err("input ends early"))? == 0 {
            *ip += 1;
            n += 255;
            if n > max + 255 {
                return Err(err("length too large"));
            }
        }
        Ok(n + extra + byte(ip)?)
    };
    let literals = |ip: &mut usize, n: usize, out: &mut Vec<u8>| -> Result<(), DecodeError> {
        let s = src
            .get(*ip..*ip + n)
            .ok_or_else(|| err("literal run overruns input"))?;
        if out.len() + n > limit {
            return Err(err("output exceeds the extent"));
        }
        out.extend_from_slice(s);
        *ip += n;
        Ok(())
    };

    let mut state = 0usize;
    let first = *src.first().ok_or_else(|| err("empty block"))? as usize;
    if first >= 22 {
        ip = 1;
        literals(&mut ip, first - 17, out)?;
        state = 4;
    } else if first >= 18 {
        ip = 1;
        state = first - 17;
        literals(&mut ip, state, out)?;
    }
    loop {
        let inst = byte(&mut ip)?;
        let (dist, len, next);
        if inst >= 64 {
            // M2: 3..8 bytes within 2 KiB.
            let h = byte(&mut ip)?;
            dist = (h << 3) + ((inst >> 2) & 7) + 1;
            len = (inst >> 5) + 1;
            next = inst & 3;
        } else if inst >= 32 {
            // M3: within 16 KiB.
            let mut l = (inst & 31) + 2;
            if l == 2 {
                l = long_len(&mut ip, 31 + 2)?;
            }
            let d = le16(&mut ip)?;
            dist = (d >> 2) + 1;
            len = l;
            next = d & 3;
        } else if inst >= 16 {
            // M4: 16..48 KiB away, or the end marker.
            let mut l = (inst & 7) + 2;
            if l == 2 {
                l = long_len(&mut ip, 7 + 2)?;
            }
            let d = le16(&mut ip)?;
            let far = ((inst & 8) << 11) + (d >> 2);
            if far == 0 {
                if ip != src.len() {
                    // btrfs pads nothing inside a segment.
                    return Err(err("bytes after the end marker"));
                }
                return Ok(());
            }
            dist = far + 16384;
            len = l;
            next = d & 3;
        } else if state == 0 {
            // Long literal run.
            let mut n = inst + 3;
            if n == 3 {
                n = long_len(&mut ip, 15 + 3)?;
            }
            literals(&mut ip, n, out)?;
            state = 4;
            continue;
        } else if state < 4 {
            let h = byte(&mut ip)?;
            dist = (inst >> 2) + (h << 2) + 1;
            len = 2;
            next = inst & 3;
        } else {
            let h = byte(&mut ip)?;
            dist = (inst >> 2) + (h << 2) + 2049;
            len = 3;
            next = inst & 3;
        }
        let have = out.len() - base;
        if dist > have {
            return Err(err("match reaches before the start"));
        }
        if out.len() + len > limit {
            return Err(err("output exceeds the extent"));
        }
        let from = out.len() - dist;
        if dist >= len {
            out.extend_from_within(from..from + len);
        } else {
            for i in 0..len {
                let b = out[from + i];
                out.push(b);
            }
        }
        state = next;
        literals(&mut ip, next, out)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_frame_followed_by_sector_padding() {
        let plain: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8).collect();
        let mut data = zstd::bulk::compress(&plain, 3).unwrap();
        data.resize(data.len().next_multiple_of(4096), 0);
        let mut out = Vec::new();
        decode(compression::ZSTD, &data, 20480, &mut out).unwrap();
        assert_eq!(out, plain);
    }

    #[test]
    fn zlib_with_padding_and_limit() {
        use std::io::Write;
        let plain: Vec<u8> = (0..9000u32).map(|i| (i * 7 % 13) as u8).collect();
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&plain).unwrap();
        let mut data = enc.finish().unwrap();
        data.resize(4096, 0);
        let mut out = Vec::new();
        decode(compression::ZLIB, &data, 12288, &mut out).unwrap();
        assert_eq!(out, plain);
        decode(compression::ZLIB, &data, 100, &mut out).unwrap();
        assert!(out.len() >= 100 && out[..100] == plain[..100]);
        assert!(decode(compression::ZLIB, &data[..20], 12288, &mut out).is_err());
    }

    /// Frames `plain` as btrfs does: one LZO1X block per sector.
    fn btrfs_lzo(plain: &[u8], sector: usize) -> Vec<u8> {
        let mut out = vec![0u8; 4];
        for chunk in plain.chunks(sector) {
            let left = sector - out.len() % sector;
            if left < 4 {
                out.resize(out.len() + left, 0);
            }
            let seg = lzokay_native::compress(chunk).unwrap();
            out.extend_from_slice(&(seg.len() as u32).to_le_bytes());
            out.extend_from_slice(&seg);
        }
        let total = out.len() as u32;
        out[..4].copy_from_slice(&total.to_le_bytes());
        out
    }

    #[test]
    fn lzo_per_sector_framing_round_trips() {
        let mut rng = 0x1234_5678u64;
        let mut plain = Vec::new();
        for i in 0..40000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            plain.push(if i % 3 == 0 {
                rng as u8
            } else {
                b'a' + (i % 7) as u8
            });
        }
        for sector in [4096, 8192, 65536] {
            let data = btrfs_lzo(&plain, sector);
            let c = compression::LZO_4K + (sector.trailing_zeros() - 12);
            let mut out = Vec::new();
            decode(c, &data, plain.len(), &mut out).unwrap();
            assert_eq!(out, plain, "sector {sector}");
        }
    }

    #[test]
    fn lzo_garbage_is_an_error_not_a_panic() {
        let mut rng = 99u64;
        let mut out = Vec::new();
        for len in 0..300usize {
            let mut data = vec![0u8; len];
            for b in data.iter_mut() {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (rng >> 56) as u8;
            }
            let _ = lzo1x_decompress(&data, &mut out, 4096);
            out.clear();
            if len >= 4 {
                data[..4].copy_from_slice(&(len as u32).to_le_bytes());
                let _ = decode(compression::LZO_4K, &data, 4096, &mut out);
            }
        }
        for c in [compression::ZLIB, compression::ZSTD] {
            let _ = decode(c, &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3], 4096, &mut out);
        }
        assert_eq!(
            decode(9, b"x", 1, &mut out),
            Err(DecodeError::UnknownCompression(9))
        );
    }
}
