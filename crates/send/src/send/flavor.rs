//! What a stream may carry: its protocol version, the send flags, and the
//! WRITE sizes that follow from them (send.c's send_ctx proto and flags,
//! BTRFS_SEND_BUF_SIZE_V1 and the v2 send buffer).

/// Largest WRITE payload of protocol v1 (BTRFS_SEND_BUF_SIZE_V1 - 16 KiB).
pub const V1_WRITE_SIZE: usize = 48 << 10;

/// Largest WRITE payload from protocol v2 on (the v2 send buffer, 16 KiB +
/// 128 KiB, less 16 KiB), as the kernel cuts its writes.
pub const V2_WRITE_SIZE: usize = 128 << 10;

/// The highest protocol version rsend writes.
pub const MAX_PROTO: u32 = 3;

/// The version `--proto 0` means: the highest a standard build of the
/// kernel sends and of btrfs-progs receives (v3 is experimental in both).
pub const DEFAULT_HIGHEST_PROTO: u32 = 2;

/// What a stream may carry: its protocol version and the send flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flavor {
    /// 1, 2 or 3.
    pub(crate) proto: u32,
    /// Compressed extents as ENCODED_WRITE (v2 and later).
    pub(crate) compressed: bool,
    /// UPDATE_EXTENT instead of file data.
    pub(crate) no_data: bool,
}

impl Flavor {
    /// The largest WRITE of the protocol.
    pub(crate) fn write_size(&self) -> usize {
        if self.proto >= 2 {
            V2_WRITE_SIZE
        } else {
            V1_WRITE_SIZE
        }
    }
}
