//! zlib: a two-byte header, deflate data and an adler32 trailer, as the
//! kernel writes it; zero padding may follow.

use std::cell::RefCell;

use flate2::{Decompress, FlushDecompress, Status};

use crate::{corrupt, Error};

thread_local! {
    /// One inflate state per thread, reset for every extent.
    static INFLATE: RefCell<Option<Decompress>> = const { RefCell::new(None) };
}

const NAME: &str = "zlib";

/// Whether `input` opens with a zlib header for deflate (the kernel's test).
fn has_header(input: &[u8]) -> bool {
    input.len() >= 2
        && input[0] & 0x0f == 8
        && input[1] & 0x20 == 0
        && (u16::from(input[0]) << 8 | u16::from(input[1])) % 31 == 0
}

pub(crate) fn decompress(input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
    if !has_header(input) {
        return Err(corrupt(NAME, 0, "no zlib header"));
    }
    INFLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = slot.get_or_insert_with(|| Decompress::new(true));
        d.reset(true);
        let failed = |d: &Decompress, e: flate2::DecompressError| {
            corrupt(NAME, d.total_in() as usize, e.to_string())
        };
        loop {
            let (i, o) = (d.total_in() as usize, d.total_out() as usize);
            let rest = input.get(i..).unwrap_or_default();
            if o == out.len() {
                // Full: one more step reads the adler32 trailer if the stream
                // ends here. Data past the extent's size is cut off.
                let mut probe = [0u8; 1];
                let st = d
                    .decompress(rest, &mut probe, FlushDecompress::None)
                    .map_err(|e| failed(d, e))?;
                let stalled = d.total_in() as usize == i && d.total_out() as usize == o;
                if st != Status::StreamEnd && stalled && i >= input.len() {
                    return Err(corrupt(NAME, i, "stream ends early"));
                }
                return Ok(o);
            }
            let st = d
                .decompress(rest, &mut out[o..], FlushDecompress::None)
                .map_err(|e| failed(d, e))?;
            if st == Status::StreamEnd {
                return Ok(d.total_out() as usize);
            }
            if d.total_in() as usize == i && d.total_out() as usize == o {
                return Err(corrupt(NAME, i, "stream ends early"));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample;
    use std::io::Write;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn stream_with_padding_and_a_short_output() {
        let data = sample::bytes(50_000, 4);
        let mut c = zlib(&data);
        c.resize(c.len() + 3000, 0);
        let mut out = vec![0u8; 65536];
        assert_eq!(decompress(&c, &mut out), Ok(data.len()));
        assert_eq!(&out[..data.len()], &data[..]);
        // An exact fit reads the trailer too.
        let mut exact = vec![0u8; data.len()];
        assert_eq!(decompress(&c, &mut exact), Ok(data.len()));
        // Output smaller than the stream: fills it and stops.
        let mut small = vec![0u8; 1000];
        assert_eq!(decompress(&c, &mut small), Ok(1000));
        assert_eq!(&small[..], &data[..1000]);
    }

    #[test]
    fn a_wrong_adler32_is_corrupt() {
        let data = sample::bytes(9000, 5);
        let mut c = zlib(&data);
        let n = c.len();
        c[n - 1] ^= 1;
        let mut out = vec![0u8; 12288];
        assert!(matches!(
            decompress(&c, &mut out),
            Err(Error::Corrupt { .. })
        ));
        let mut exact = vec![0u8; data.len()];
        assert!(matches!(
            decompress(&c, &mut exact),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn raw_deflate_without_header_and_truncation_are_corrupt() {
        let data = sample::bytes(9000, 6);
        let c = zlib(&data);
        let mut out = vec![0u8; 12288];
        assert!(decompress(&c[2..], &mut out).is_err());
        let e = decompress(&c[..20], &mut out).unwrap_err();
        assert!(e.to_string().contains("ends early"), "{e}");
        // Missing trailer only.
        let mut exact = vec![0u8; data.len()];
        assert!(decompress(&c[..c.len() - 4], &mut exact).is_err());
    }
}
