//! The stream's checksum: CRC-32C (Castagnoli) with seed 0 and no final xor.
//!
//! This differs from the standard CRC-32C, which starts from and ends with
//! `0xFFFF_FFFF`. The `crc32c` crate computes the standard form, so the seed
//! and result are inverted around it.

/// Extends a send-stream CRC `crc` over `data`.
///
/// Start from 0. Chaining calls over consecutive slices gives the same value
/// as one call over their concatenation.
#[inline]
pub fn update(crc: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!crc, data)
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
    fn chaining_equals_one_pass() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = update(0, &data);
        let parts = update(update(0, &data[..333]), &data[333..]);
        assert_eq!(whole, parts);
    }
}
