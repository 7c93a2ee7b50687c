//! The 17-byte stream header: magic `btrfs-stream\0` and a le32 version.

/// The 13 magic bytes that open every stream, NUL included.
pub const MAGIC: &[u8; 13] = b"btrfs-stream\0";
/// The magic of a resumed stream (rsend's own, see [`crate::resume`]):
/// receivers that do not know it refuse the stream at once instead of
/// applying its second half on its own.
pub const RESUME_MAGIC: &[u8; 13] = b"rsend-resume\0";
/// Total length of the stream header.
pub const STREAM_HEADER_LEN: usize = 17;
/// The highest protocol version this crate reads and writes.
pub const MAX_VERSION: u32 = 3;

/// A decoded stream header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHeader {
    /// Protocol version, 1 to [`MAX_VERSION`].
    pub version: u32,
}

impl StreamHeader {
    /// Encodes the header.
    pub fn to_bytes(self) -> [u8; STREAM_HEADER_LEN] {
        let mut out = [0u8; STREAM_HEADER_LEN];
        out[..13].copy_from_slice(MAGIC);
        out[13..].copy_from_slice(&self.version.to_le_bytes());
        out
    }
}

/// The fields of a command header: payload length, command number and CRC.
pub(crate) fn command_fields(h: &[u8; crate::COMMAND_HEADER_LEN]) -> (u32, u16, u32) {
    (
        u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
        u16::from_le_bytes([h[4], h[5]]),
        u32::from_le_bytes([h[6], h[7], h[8], h[9]]),
    )
}
