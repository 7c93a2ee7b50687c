//! Little-endian field access over byte slices; every read is bounds-checked.

/// The `u8` at `off`, if in bounds.
#[inline]
pub(crate) fn u8_at(b: &[u8], off: usize) -> Option<u8> {
    b.get(off).copied()
}

/// The little-endian `u16` at `off`, if in bounds.
#[inline]
pub(crate) fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..)?
        .first_chunk::<2>()
        .map(|a| u16::from_le_bytes(*a))
}

/// The little-endian `u32` at `off`, if in bounds.
#[inline]
pub(crate) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..)?
        .first_chunk::<4>()
        .map(|a| u32::from_le_bytes(*a))
}

/// The little-endian `u64` at `off`, if in bounds.
#[inline]
pub(crate) fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..)?
        .first_chunk::<8>()
        .map(|a| u64::from_le_bytes(*a))
}

/// The 16 bytes at `off` as a UUID, if in bounds.
#[inline]
pub(crate) fn uuid_at(b: &[u8], off: usize) -> Option<uuid::Uuid> {
    b.get(off..)?
        .first_chunk::<16>()
        .map(|a| uuid::Uuid::from_bytes(*a))
}

/// `len` bytes at `off`, if in bounds.
#[inline]
pub(crate) fn slice_at(b: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    b.get(off..off.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_are_none() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u64_at(&b, 0), Some(0x0807060504030201));
        assert_eq!(u64_at(&b, 1), None);
        assert_eq!(u32_at(&b, usize::MAX), None);
        assert_eq!(slice_at(&b, 7, usize::MAX), None);
        assert_eq!(u16_at(&b, 6), Some(0x0807));
    }
}
