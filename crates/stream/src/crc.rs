//! The stream's checksum: CRC-32C (Castagnoli) with seed 0 and no final xor.
//!
//! This differs from the standard CRC-32C, which starts from and ends with
//! `0xFFFF_FFFF`. `crc-fast` (CLMUL/AVX-512 folding) computes it from any
//! starting state; its final xor is undone here.

use crc_fast::{CrcAlgorithm, Digest};

/// Extends a send-stream CRC `crc` over `data`.
///
/// Start from 0. Chaining calls over consecutive slices gives the same value
/// as one call over their concatenation.
#[inline]
pub fn update(crc: u32, data: &[u8]) -> u32 {
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(crc));
    d.update(data);
    (d.finalize() as u32) ^ 0xFFFF_FFFF
}

/// Extends send-stream CRCs over blocks of one length, each given by its
/// standard CRC-32C (as btrfs stores it for a data sector) instead of its
/// bytes: the CRC of the data comes from checksums already computed.
///
/// With `Z` the CRC register after the block's length in zero bytes (linear
/// in the register), `update(c, block) = Z(!c) ^ !crc32c(block)`; `Z` is
/// applied with four byte tables.
pub struct BlockCrc {
    len: usize,
    table: Box<[[u32; 256]; 4]>,
}

impl BlockCrc {
    /// The extension over blocks of `len` bytes.
    pub fn new(len: usize) -> BlockCrc {
        let zeros = vec![0u8; len];
        let column: Vec<u32> = (0..32).map(|k| update(1 << k, &zeros)).collect();
        let mut table = Box::new([[0u32; 256]; 4]);
        for (j, t) in table.iter_mut().enumerate() {
            for b in 1..256usize {
                let low = b.trailing_zeros() as usize;
                t[b] = t[b & (b - 1)] ^ column[8 * j + low];
            }
        }
        BlockCrc { len, table }
    }

    /// The length of a block.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether blocks are empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `update(crc, block)` for a block whose standard CRC-32C is `block_crc32c`.
    #[inline]
    pub fn update(&self, crc: u32, block_crc32c: u32) -> u32 {
        let r = !crc;
        let t = &self.table;
        t[0][(r & 0xff) as usize]
            ^ t[1][((r >> 8) & 0xff) as usize]
            ^ t[2][((r >> 16) & 0xff) as usize]
            ^ t[3][(r >> 24) as usize]
            ^ !block_crc32c
    }
}

/// The CRC of one encoded command: header with its crc field zeroed, then payload.
#[inline]
pub fn command_crc(header: &[u8; 10], payload: &[u8]) -> u32 {
    let mut h = *header;
    h[6..10].fill(0);
    update(update(0, &h), payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_crc32c_check_value_is_recovered() {
        // The standard CRC-32C of "123456789" is 0xE3069283. The stream variant
        // differs only by the seed and final inversion.
        let raw = update(0xFFFF_FFFF, b"123456789");
        assert_eq!(!raw, 0xE306_9283);
    }

    #[test]
    fn matches_the_crc32c_crate_on_every_length() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 131 + 7) as u8).collect();
        for len in (0..200).chain([1023, 1024, 4095, 4096, 4097, 5000]) {
            let want = !crc32c::crc32c_append(0xFFFF_FFFF, &data[..len]);
            assert_eq!(update(0, &data[..len]), want, "len {len}");
            let seeded = !crc32c::crc32c_append(!0x1234_5678, &data[..len]);
            assert_eq!(update(0x1234_5678, &data[..len]), seeded, "len {len}");
        }
    }

    /// The standard CRC-32C, as btrfs sums a sector.
    fn crc32c(data: &[u8]) -> u32 {
        crc32c::crc32c(data)
    }

    #[test]
    fn blocks_given_by_their_crc32c_extend_as_their_bytes_do() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for len in [1, 2, 3, 7, 64, 512, 4096, 8192, 16384, 65536] {
            let b = BlockCrc::new(len);
            assert_eq!(b.len(), len);
            for seed in [0, 1, 0xFFFF_FFFF, 0x1234_5678, 0x8000_0000] {
                let mut c = seed;
                for block in data.chunks_exact(len).take(9) {
                    let want = update(c, block);
                    c = b.update(c, crc32c(block));
                    assert_eq!(c, want, "block of {len}, seed {seed:#x}");
                }
            }
        }
        // Every starting bit and every byte value of the block's sum.
        let b = BlockCrc::new(4096);
        let mut block = vec![0u8; 4096];
        for bit in 0..32 {
            block[bit * 97 % 4096] ^= 1 << (bit % 8);
            assert_eq!(b.update(1 << bit, crc32c(&block)), update(1 << bit, &block));
        }
    }

    #[test]
    fn chaining_equals_one_pass() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = update(0, &data);
        let parts = update(update(0, &data[..333]), &data[333..]);
        assert_eq!(whole, parts);
    }
}
