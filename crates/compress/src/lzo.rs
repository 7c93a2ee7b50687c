//! LZO1X in btrfs's framing: a le32 total length, then one segment per
//! sector of decoded data, each a le32 length and an LZO1X block. A segment
//! header never straddles a sector boundary of the compressed data: when
//! fewer than 4 bytes are left in a sector they are padding.

use crate::{corrupt, Error};

const NAME: &str = "lzo";

/// The largest LZO1X block for `n` input bytes (`lzo1x_worst_compress`).
fn worst_compress(n: usize) -> usize {
    n + n / 16 + 64 + 3
}

fn le32(input: &[u8], at: usize) -> Result<usize, Error> {
    input
        .get(at..at.saturating_add(4))
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| corrupt(NAME, at, "length field overruns the data"))
}

pub(crate) fn decompress_framed(
    input: &[u8],
    out: &mut [u8],
    sector: usize,
) -> Result<usize, Error> {
    let total = le32(input, 0)?;
    if total < 4 || total > input.len() {
        return Err(corrupt(
            NAME,
            0,
            format!("total length {total} with {} bytes of data", input.len()),
        ));
    }
    let mut cur = 4usize;
    let mut produced = 0usize;
    let mut scratch = Vec::new();
    while cur < total && produced < out.len() {
        let left_in_sector = sector - cur % sector;
        if left_in_sector < 4 {
            cur += left_in_sector;
            if cur >= total {
                break;
            }
        }
        let seg_len = le32(input, cur)?;
        if seg_len > worst_compress(sector) {
            return Err(corrupt(
                NAME,
                cur,
                format!("segment of {seg_len} bytes, more than one sector can need"),
            ));
        }
        cur += 4;
        let end = cur
            .checked_add(seg_len)
            .filter(|&e| e <= total)
            .ok_or_else(|| {
                corrupt(
                    NAME,
                    cur,
                    format!("segment of {seg_len} bytes overruns total {total}"),
                )
            })?;
        let seg = &input[cur..end];
        let room = out.len() - produced;
        let at = |e: Error| match e {
            Error::Corrupt { offset, why, .. } => corrupt(NAME, cur + offset, why),
            e => e,
        };
        let n = if room >= sector {
            lzo1x_decompress(seg, &mut out[produced..produced + sector]).map_err(at)?
        } else {
            // The last, partial sector: decode it whole, keep what fits.
            scratch.resize(sector, 0);
            let n = lzo1x_decompress(seg, &mut scratch).map_err(at)?;
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
/// The checks of the kernel's `lzo1x_decompress_safe`: every input read,
/// output write and back-reference is bounds-checked, the block must end
/// with the end marker and nothing may follow it. Errors name the offset in
/// `src`.
pub fn lzo1x_decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, Error> {
    let mut d = Lzo1x {
        src,
        ip: 0,
        dst,
        op: 0,
    };
    d.run()
}

struct Lzo1x<'a, 'b> {
    src: &'a [u8],
    ip: usize,
    dst: &'b mut [u8],
    op: usize,
}

impl Lzo1x<'_, '_> {
    fn err(&self, why: &'static str) -> Error {
        corrupt(NAME, self.ip, why)
    }

    #[inline]
    fn byte(&mut self) -> Result<usize, Error> {
        let b = *self
            .src
            .get(self.ip)
            .ok_or_else(|| self.err("input ends early"))?;
        self.ip += 1;
        Ok(usize::from(b))
    }

    #[inline]
    fn le16(&mut self) -> Result<usize, Error> {
        Ok(self.byte()? | self.byte()? << 8)
    }

    /// A run length: each zero byte adds 255, then the first non-zero byte.
    #[inline]
    fn ext_len(&mut self, base: usize) -> Result<usize, Error> {
        let mut n = 0usize;
        loop {
            let b = self.byte()?;
            if b != 0 {
                return Ok(n + base + b);
            }
            n += 255;
            if n > self.dst.len() + 255 {
                return Err(self.err("length longer than the output"));
            }
        }
    }

    fn literals(&mut self, n: usize) -> Result<(), Error> {
        let s = self
            .src
            .get(self.ip..self.ip.saturating_add(n))
            .ok_or_else(|| self.err("literal run overruns the input"))?;
        let d = self
            .dst
            .get_mut(self.op..self.op + n)
            .ok_or_else(|| corrupt(NAME, self.ip, "output overrun"))?;
        d.copy_from_slice(s);
        self.ip += n;
        self.op += n;
        Ok(())
    }

    fn back(&mut self, dist: usize, n: usize) -> Result<(), Error> {
        if dist == 0 || dist > self.op {
            return Err(self.err("back-reference before the start"));
        }
        if self.op + n > self.dst.len() {
            return Err(self.err("output overrun"));
        }
        let from = self.op - dist;
        if dist >= n {
            self.dst.copy_within(from..from + n, self.op);
        } else {
            for k in 0..n {
                self.dst[self.op + k] = self.dst[from + k];
            }
        }
        self.op += n;
        Ok(())
    }

    fn run(&mut self) -> Result<usize, Error> {
        let mut state = 0usize;
        let first = *self.src.first().ok_or_else(|| self.err("empty block"))? as usize;
        if first >= 22 {
            self.ip = 1;
            self.literals(first - 17)?;
            state = 4;
        } else if first >= 18 {
            self.ip = 1;
            state = first - 17;
            self.literals(state)?;
        }
        loop {
            let inst = self.byte()?;
            let (dist, len, next);
            if inst >= 64 {
                // M2: LLLDDDSS HHHHHHHH, 3..8 bytes within 2 KiB.
                let h = self.byte()?;
                dist = (h << 3) + ((inst >> 2) & 7) + 1;
                len = (inst >> 5) + 1;
                next = inst & 3;
            } else if inst >= 32 {
                // M3: 001LLLLL [len ext] DDDDDDSS DDDDDDDD, within 16 KiB.
                let mut l = (inst & 31) + 2;
                if l == 2 {
                    l = self.ext_len(31 + 2)?;
                }
                let v = self.le16()?;
                dist = (v >> 2) + 1;
                len = l;
                next = v & 3;
            } else if inst >= 16 {
                // M4: 0001HLLL [len ext] DDDDDDSS DDDDDDDD, 16..48 KiB away,
                // or the end marker (distance 0, length 3).
                let mut l = (inst & 7) + 2;
                if l == 2 {
                    l = self.ext_len(7 + 2)?;
                }
                let v = self.le16()?;
                let far = ((inst & 8) << 11) + (v >> 2);
                if far == 0 {
                    if l != 3 {
                        return Err(self.err("malformed end marker"));
                    }
                    if self.ip != self.src.len() {
                        return Err(self.err("bytes after the end marker"));
                    }
                    return Ok(self.op);
                }
                dist = far + 16384;
                len = l;
                next = v & 3;
            } else if state == 0 {
                // Literal run: 0000LLLL [len ext].
                let n = if inst == 0 {
                    self.ext_len(15 + 3)?
                } else {
                    inst + 3
                };
                self.literals(n)?;
                state = 4;
                continue;
            } else if state < 4 {
                // M1 after a short literal run: 2 bytes within 1 KiB.
                let h = self.byte()?;
                dist = (inst >> 2) + (h << 2) + 1;
                len = 2;
                next = inst & 3;
            } else {
                // M1 after a long literal run: 3 bytes from 2049 back.
                let h = self.byte()?;
                dist = (inst >> 2) + (h << 2) + 2049;
                len = 3;
                next = inst & 3;
            }
            self.back(dist, len)?;
            state = next;
            if next > 0 {
                self.literals(next)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample;

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
    fn lzo1x_round_trips_against_lzokay() {
        for (n, seed) in [(1, 1), (17, 2), (300, 3), (4096, 4), (4096, 5), (70000, 6)] {
            let data = sample::bytes(n, seed);
            let c = lzokay_native::compress(&data).unwrap();
            let mut out = vec![0u8; n];
            assert_eq!(lzo1x_decompress(&c, &mut out), Ok(n));
            assert_eq!(out, data);
        }
        let zeros = vec![0u8; 4096];
        let c = lzokay_native::compress(&zeros).unwrap();
        let mut out = vec![1u8; 4096];
        assert_eq!(lzo1x_decompress(&c, &mut out), Ok(4096));
        assert_eq!(out, zeros);
    }

    #[test]
    fn framing_round_trips_for_every_sector_size_and_skips_padding() {
        for sector in [4096usize, 8192, 65536] {
            let data = sample::bytes(3 * sector + 100, 9);
            let mut framed = btrfs_lzo(&data, sector);
            framed.resize(framed.len().div_ceil(sector) * sector, 0);
            let mut out = vec![0u8; 4 * sector];
            let n = decompress_framed(&framed, &mut out, sector).unwrap();
            assert_eq!(n, data.len());
            assert_eq!(&out[..n], &data[..]);
            // Asking for less output stops early.
            let mut small = vec![0u8; sector + 904];
            assert_eq!(
                decompress_framed(&framed, &mut small, sector),
                Ok(small.len())
            );
            assert_eq!(&small[..], &data[..small.len()]);
        }
    }

    #[test]
    fn bytes_after_the_end_marker_are_corrupt() {
        let c = lzokay_native::compress(&sample::bytes(3000, 7)).unwrap();
        let mut out = vec![0u8; 4096];
        let mut longer = c.clone();
        longer.push(0);
        let e = lzo1x_decompress(&longer, &mut out).unwrap_err();
        assert_eq!(e, corrupt(NAME, c.len(), "bytes after the end marker"));
    }

    #[test]
    fn a_segment_overrunning_the_total_names_its_offset() {
        let data = sample::bytes(5000, 1);
        let mut framed = btrfs_lzo(&data, 4096);
        framed[4..8].copy_from_slice(&9000u32.to_le_bytes());
        let mut out = vec![0u8; 8192];
        let e = decompress_framed(&framed, &mut out, 4096).unwrap_err();
        assert!(e.to_string().contains("at byte 4"), "{e}");
    }
}
