//! Decoding compressed extents: zlib, LZO (btrfs per-sector framing) and zstd.
//!
//! Every decoder writes at most `out.len()` bytes, stops at the end of its
//! stream, ignores trailing padding and returns how many bytes it produced.
//! Callers zero-fill the rest (short output reads as zeros).

use std::cell::RefCell;

use crate::bytes::u32_at;
use crate::items::Compression;

/// Decodes `input` compressed with `kind` into `out`; returns the bytes produced.
pub fn decompress(
    kind: Compression,
    input: &[u8],
    out: &mut [u8],
    sectorsize: usize,
) -> Result<usize, String> {
    match kind {
        Compression::None => {
            let n = input.len().min(out.len());
            out[..n].copy_from_slice(&input[..n]);
            Ok(n)
        }
        Compression::Zlib => zlib(input, out),
        Compression::Lzo => lzo_btrfs(input, out, sectorsize),
        Compression::Zstd => zstd(input, out),
    }
}

thread_local! {
    static INFLATE: RefCell<Option<flate2::Decompress>> = const { RefCell::new(None) };
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// One zlib stream. Like the kernel, a valid zlib header is skipped and the
/// deflate data inflated raw (the adler32 trailer is not checked).
fn zlib(input: &[u8], out: &mut [u8]) -> Result<usize, String> {
    let has_header = input.len() > 2
        && input[1] & 0x20 == 0
        && input[0] & 0x0f == 8
        && (u16::from(input[0]) << 8 | u16::from(input[1])) % 31 == 0;
    let data = if has_header { &input[2..] } else { input };
    INFLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        // Raw inflate in both cases: a header was skipped above.
        let d = slot.get_or_insert_with(|| flate2::Decompress::new(false));
        d.reset(false);
        loop {
            let (i, o) = (d.total_in() as usize, d.total_out() as usize);
            if o >= out.len() {
                return Ok(o);
            }
            let st = d
                .decompress(
                    &data[i.min(data.len())..],
                    &mut out[o..],
                    flate2::FlushDecompress::None,
                )
                .map_err(|e| format!("zlib: {e}"))?;
            match st {
                flate2::Status::StreamEnd => return Ok(d.total_out() as usize),
                _ if d.total_in() as usize == i && d.total_out() as usize == o => {
                    return Err(format!(
                        "zlib: stream ends early after {} of {} input bytes, {o} bytes out",
                        i,
                        data.len()
                    ))
                }
                _ => {}
            }
        }
    })
}

/// Exactly one zstd frame; the zero padding after it is ignored.
fn zstd(input: &[u8], out: &mut [u8]) -> Result<usize, String> {
    let n = zstd::zstd_safe::find_frame_compressed_size(input)
        .map_err(|c| format!("zstd: {}", zstd::zstd_safe::get_error_name(c)))?;
    let frame = input.get(..n).ok_or("zstd: frame size past the input")?;
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let d = slot.as_mut().ok_or("zstd: no decoder")?;
        d.decompress_to_buffer(frame, out)
            .map_err(|e| format!("zstd: {e}"))
    })
}

/// btrfs LZO framing: `[total_len u32][seg_len u32][LZO1X data]...`, one
/// segment per sector of input, and no segment header crossing a sector.
fn lzo_btrfs(input: &[u8], out: &mut [u8], sectorsize: usize) -> Result<usize, String> {
    let total = u32_at(input, 0).ok_or("lzo: no header")? as usize;
    if total < 4 || total > input.len() {
        return Err(format!(
            "lzo: total length {total} with {} bytes of input",
            input.len()
        ));
    }
    let mut cur = 4usize;
    let mut produced = 0usize;
    let mut scratch = Vec::new();
    while cur < total && produced < out.len() {
        let left_in_sector = sectorsize - cur % sectorsize;
        if left_in_sector < 4 {
            cur += left_in_sector;
            if cur >= total {
                break;
            }
        }
        let seg_len = u32_at(input, cur).ok_or("lzo: truncated segment header")? as usize;
        cur += 4;
        let end = cur
            .checked_add(seg_len)
            .filter(|&e| e <= total)
            .ok_or_else(|| {
                format!("lzo: segment of {seg_len} bytes at {cur} overruns total {total}")
            })?;
        let seg = &input[cur..end];
        let room = out.len() - produced;
        let n = if room >= sectorsize {
            lzo1x_decompress(seg, &mut out[produced..produced + sectorsize])?
        } else {
            scratch.resize(sectorsize, 0);
            let n = lzo1x_decompress(seg, &mut scratch)?;
            let k = n.min(room);
            out[produced..produced + k].copy_from_slice(&scratch[..k]);
            k
        };
        produced += n;
        cur = end;
    }
    Ok(produced)
}

/// Decodes one LZO1X block into `dst`; returns the bytes written.
///
/// A small safe decoder (the format of lzo1x_decompress_safe): every input
/// read, output write and back-reference is checked, so corrupt data gives an
/// error, never a panic or an overrun.
pub fn lzo1x_decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, String> {
    struct In<'a> {
        s: &'a [u8],
        i: usize,
    }
    impl In<'_> {
        #[inline]
        fn byte(&mut self) -> Result<usize, String> {
            let b = *self.s.get(self.i).ok_or("lzo1x: input overrun")?;
            self.i += 1;
            Ok(usize::from(b))
        }
        #[inline]
        fn le16(&mut self) -> Result<usize, String> {
            Ok(self.byte()? | self.byte()? << 8)
        }
        /// A run length: zero bytes add 255 each, then the first non-zero byte.
        #[inline]
        fn ext_len(&mut self, base: usize) -> Result<usize, String> {
            let mut n = 0usize;
            loop {
                let b = self.byte()?;
                if b != 0 {
                    return n
                        .checked_mul(255)
                        .and_then(|v| v.checked_add(base + b))
                        .ok_or_else(|| "lzo1x: length overflow".to_string());
                }
                n += 1;
            }
        }
    }
    fn literals(inp: &mut In, dst: &mut [u8], op: &mut usize, n: usize) -> Result<(), String> {
        let s = inp
            .s
            .get(inp.i..inp.i.checked_add(n).ok_or("lzo1x: input overrun")?)
            .ok_or("lzo1x: input overrun")?;
        let d = dst.get_mut(*op..*op + n).ok_or("lzo1x: output overrun")?;
        d.copy_from_slice(s);
        inp.i += n;
        *op += n;
        Ok(())
    }
    fn back(dst: &mut [u8], op: &mut usize, dist: usize, n: usize) -> Result<(), String> {
        if dist == 0 || dist > *op {
            return Err(format!("lzo1x: back-reference {dist} before the start"));
        }
        if *op + n > dst.len() {
            return Err("lzo1x: output overrun".into());
        }
        let from = *op - dist;
        if dist >= n {
            dst.copy_within(from..from + n, *op);
        } else {
            for k in 0..n {
                dst[*op + k] = dst[from + k];
            }
        }
        *op += n;
        Ok(())
    }

    let mut inp = In { s: src, i: 0 };
    let mut op = 0usize;
    let mut state = 0usize;
    let first = *src.first().ok_or("lzo1x: empty input")? as usize;
    if first >= 22 {
        inp.i = 1;
        literals(&mut inp, dst, &mut op, first - 17)?;
        state = 4;
    } else if first >= 18 {
        inp.i = 1;
        state = first - 17;
        literals(&mut inp, dst, &mut op, state)?;
    }
    loop {
        let inst = inp.byte()?;
        let (dist, len, next);
        if inst >= 64 {
            // M2: LLLDDDSS HHHHHHHH
            let h = inp.byte()?;
            dist = (h << 3) + ((inst >> 2) & 7) + 1;
            len = (inst >> 5) + 1;
            next = inst & 3;
        } else if inst >= 32 {
            // M3: 001LLLLL [len ext] DDDDDDSS DDDDDDDD
            let mut l = (inst & 31) + 2;
            if l == 2 {
                l = inp.ext_len(31 + 2)?;
            }
            let v = inp.le16()?;
            dist = (v >> 2) + 1;
            len = l;
            next = v & 3;
        } else if inst >= 16 {
            // M4: 0001HLLL [len ext] DDDDDDSS DDDDDDDD
            let mut l = (inst & 7) + 2;
            if l == 2 {
                l = inp.ext_len(7 + 2)?;
            }
            let v = inp.le16()?;
            let d = ((inst & 8) << 11) + (v >> 2);
            if d == 0 {
                // End of stream.
                return Ok(op);
            }
            dist = d + 16384;
            len = l;
            next = v & 3;
        } else if state == 0 {
            // Literal run: 0000LLLL [len ext]
            let n = if inst == 0 {
                inp.ext_len(15 + 3)?
            } else {
                inst + 3
            };
            literals(&mut inp, dst, &mut op, n)?;
            state = 4;
            continue;
        } else if state < 4 {
            // M1 after a short literal run: 0000DDSS HHHHHHHH, 2 bytes.
            let h = inp.byte()?;
            dist = (inst >> 2) + (h << 2) + 1;
            len = 2;
            next = inst & 3;
        } else {
            // M1 after a long literal run: 3 bytes from 2049+ back.
            let h = inp.byte()?;
            dist = (inst >> 2) + (h << 2) + 2049;
            len = 3;
            next = inst & 3;
        }
        back(dst, &mut op, dist, len)?;
        state = next;
        if next > 0 {
            literals(&mut inp, dst, &mut op, next)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize, seed: u32) -> Vec<u8> {
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

    #[test]
    fn lzo1x_round_trips_against_lzokay() {
        for (n, seed) in [(1, 1), (17, 2), (300, 3), (4096, 4), (4096, 5), (70000, 6)] {
            let data = sample(n, seed);
            let c = lzokay_native::compress(&data).unwrap();
            let mut out = vec![0u8; n];
            assert_eq!(lzo1x_decompress(&c, &mut out).unwrap(), n);
            assert_eq!(out, data);
        }
        let zeros = vec![0u8; 4096];
        let c = lzokay_native::compress(&zeros).unwrap();
        let mut out = vec![1u8; 4096];
        assert_eq!(lzo1x_decompress(&c, &mut out).unwrap(), 4096);
        assert_eq!(out, zeros);
    }

    #[test]
    fn lzo_btrfs_framing_skips_sector_padding() {
        let sectorsize = 4096;
        let data = sample(3 * 4096 + 100, 9);
        let mut framed = vec![0u8; 4];
        for chunk in data.chunks(sectorsize) {
            let left = sectorsize - framed.len() % sectorsize;
            if left < 4 {
                framed.resize(framed.len() + left, 0);
            }
            let c = lzokay_native::compress(chunk).unwrap();
            framed.extend_from_slice(&(c.len() as u32).to_le_bytes());
            framed.extend_from_slice(&c);
        }
        let total = framed.len() as u32;
        framed[..4].copy_from_slice(&total.to_le_bytes());
        framed.resize(framed.len().div_ceil(sectorsize) * sectorsize, 0);
        let mut out = vec![0u8; 4 * 4096];
        let n = lzo_btrfs(&framed, &mut out, sectorsize).unwrap();
        assert_eq!(n, data.len());
        assert_eq!(&out[..n], &data[..]);
        // Asking for less output stops early.
        let mut small = vec![0u8; 5000];
        assert_eq!(lzo_btrfs(&framed, &mut small, sectorsize).unwrap(), 5000);
        assert_eq!(&small[..], &data[..5000]);
    }

    #[test]
    fn zstd_ignores_padding_after_the_frame() {
        let data = sample(100_000, 3);
        let mut c = zstd::bulk::compress(&data, 3).unwrap();
        c.resize(c.len().div_ceil(4096) * 4096 + 4096, 0);
        let mut out = vec![0u8; 131072];
        assert_eq!(zstd(&c, &mut out).unwrap(), data.len());
        assert_eq!(&out[..data.len()], &data[..]);
    }

    #[test]
    fn zlib_with_header_and_padding() {
        use std::io::Write;
        let data = sample(50_000, 4);
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&data).unwrap();
        let mut c = e.finish().unwrap();
        c.resize(c.len() + 3000, 0);
        let mut out = vec![0u8; 65536];
        assert_eq!(zlib(&c, &mut out).unwrap(), data.len());
        assert_eq!(&out[..data.len()], &data[..]);
        // Output smaller than the stream: fills it and stops.
        let mut small = vec![0u8; 1000];
        assert_eq!(zlib(&c, &mut small).unwrap(), 1000);
    }

    #[test]
    fn garbage_input_is_an_error_not_a_panic() {
        let mut out = vec![0u8; 8192];
        let mut x = 7u32;
        for n in [0usize, 1, 2, 3, 5, 16, 100, 1000, 5000] {
            for _ in 0..50 {
                let g: Vec<u8> = (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                        (x >> 24) as u8
                    })
                    .collect();
                let _ = lzo1x_decompress(&g, &mut out);
                let _ = lzo_btrfs(&g, &mut out, 4096);
                let _ = zlib(&g, &mut out);
                let _ = zstd(&g, &mut out);
            }
        }
    }
}
