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

    #[test]
    fn chaining_equals_one_pass() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = update(0, &data);
        let parts = update(update(0, &data[..333]), &data[333..]);
        assert_eq!(whole, parts);
    }
}
