//! zstd: exactly one frame, then zero padding to the sector.

use std::cell::RefCell;

use zstd::bulk::Decompressor;
use zstd::zstd_safe::get_error_name;

use crate::{corrupt, Error};

const NAME: &str = "zstd";

thread_local! {
    /// One decoder per thread.
    static ZSTD: RefCell<Option<Decompressor<'static>>> = const { RefCell::new(None) };
}

fn decoder() -> Result<Decompressor<'static>, Error> {
    Decompressor::new().map_err(|e| corrupt(NAME, 0, e.to_string()))
}

pub(crate) fn decompress(input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
    let n = zstd::zstd_safe::find_frame_compressed_size(input)
        .map_err(|c| corrupt(NAME, 0, get_error_name(c)))?;
    let frame = input
        .get(..n)
        .ok_or_else(|| corrupt(NAME, input.len(), "frame overruns the data"))?;
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(decoder()?);
        }
        let Some(d) = slot.as_mut() else {
            return Err(corrupt(NAME, 0, "no decoder"));
        };
        d.decompress_to_buffer(frame, out)
            .map_err(|e| corrupt(NAME, 0, e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample;

    #[test]
    fn one_frame_then_sector_padding() {
        let data = sample::bytes(100_000, 3);
        let mut c = zstd::bulk::compress(&data, 3).unwrap();
        c.resize(c.len().div_ceil(4096) * 4096 + 4096, 0);
        let mut out = vec![0u8; 131072];
        assert_eq!(decompress(&c, &mut out), Ok(data.len()));
        assert_eq!(&out[..data.len()], &data[..]);
    }

    #[test]
    fn a_frame_decoding_to_more_than_the_extent_is_corrupt() {
        let data = sample::bytes(20_000, 8);
        let c = zstd::bulk::compress(&data, 3).unwrap();
        let mut out = vec![0u8; 16384];
        assert!(decompress(&c, &mut out).is_err());
    }

    #[test]
    fn truncated_frame_is_corrupt() {
        let data = sample::bytes(10_000, 2);
        let c = zstd::bulk::compress(&data, 3).unwrap();
        let mut out = vec![0u8; 16384];
        assert!(decompress(&c[..c.len() / 2], &mut out).is_err());
    }
}
