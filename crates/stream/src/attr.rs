//! Command attributes: their numbers, value types and TLV framing.
//!
//! Each attribute is `le16 type, le16 len, value`. From protocol version 2 on,
//! [`Attr::Data`] carries only its type; its value runs to the end of the
//! command and it must come last.

/// Largest attribute number defined by any protocol version.
pub const ATTR_MAX: u16 = 35;

/// The value type an attribute carries on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// One byte.
    U8,
    /// le32.
    U32,
    /// le64.
    U64,
    /// 16 raw bytes.
    Uuid,
    /// le64 seconds then le32 nanoseconds.
    Timespec,
    /// Raw bytes of any length (paths, names, data); not NUL-terminated.
    Bytes,
}

impl ValueType {
    /// The exact value size for fixed-size types.
    pub fn fixed_len(self) -> Option<usize> {
        match self {
            ValueType::U8 => Some(1),
            ValueType::U32 => Some(4),
            ValueType::U64 => Some(8),
            ValueType::Uuid => Some(16),
            ValueType::Timespec => Some(12),
            ValueType::Bytes => None,
        }
    }
}

macro_rules! attrs {
    ($($name:ident = $num:expr, $wire:literal, $ty:ident;)*) => {
        /// A send stream attribute (`BTRFS_SEND_A_*`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Attr {
            $(
                #[doc = concat!("`BTRFS_SEND_A_", $wire, "`")]
                $name = $num,
            )*
        }

        impl Attr {
            /// Every attribute, in number order.
            pub const ALL: &'static [Attr] = &[$(Attr::$name),*];

            /// Maps an attribute number to its attribute.
            pub fn from_u16(n: u16) -> Option<Attr> {
                match n {
                    $($num => Some(Attr::$name),)*
                    _ => None,
                }
            }

            /// The kernel's name without the `BTRFS_SEND_A_` prefix.
            pub fn name(self) -> &'static str {
                match self {
                    $(Attr::$name => $wire,)*
                }
            }

            /// The value type this attribute carries.
            pub fn value_type(self) -> ValueType {
                match self {
                    $(Attr::$name => ValueType::$ty,)*
                }
            }
        }
    };
}

attrs! {
    Uuid = 1, "UUID", Uuid;
    Ctransid = 2, "CTRANSID", U64;
    Ino = 3, "INO", U64;
    Size = 4, "SIZE", U64;
    Mode = 5, "MODE", U64;
    Uid = 6, "UID", U64;
    Gid = 7, "GID", U64;
    Rdev = 8, "RDEV", U64;
    Ctime = 9, "CTIME", Timespec;
    Mtime = 10, "MTIME", Timespec;
    Atime = 11, "ATIME", Timespec;
    Otime = 12, "OTIME", Timespec;
    XattrName = 13, "XATTR_NAME", Bytes;
    XattrData = 14, "XATTR_DATA", Bytes;
    Path = 15, "PATH", Bytes;
    PathTo = 16, "PATH_TO", Bytes;
    PathLink = 17, "PATH_LINK", Bytes;
    FileOffset = 18, "FILE_OFFSET", U64;
    Data = 19, "DATA", Bytes;
    CloneUuid = 20, "CLONE_UUID", Uuid;
    CloneCtransid = 21, "CLONE_CTRANSID", U64;
    ClonePath = 22, "CLONE_PATH", Bytes;
    CloneOffset = 23, "CLONE_OFFSET", U64;
    CloneLen = 24, "CLONE_LEN", U64;
    FallocateMode = 25, "FALLOCATE_MODE", U32;
    Fileattr = 26, "FILEATTR", U64;
    UnencodedFileLen = 27, "UNENCODED_FILE_LEN", U64;
    UnencodedLen = 28, "UNENCODED_LEN", U64;
    UnencodedOffset = 29, "UNENCODED_OFFSET", U64;
    Compression = 30, "COMPRESSION", U32;
    Encryption = 31, "ENCRYPTION", U32;
    VerityAlgorithm = 32, "VERITY_ALGORITHM", U8;
    VerityBlockSize = 33, "VERITY_BLOCK_SIZE", U32;
    VeritySaltData = 34, "VERITY_SALT_DATA", Bytes;
    VeritySigData = 35, "VERITY_SIG_DATA", Bytes;
}

impl std::fmt::Display for Attr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_dense_and_round_trip() {
        assert_eq!(Attr::ALL.len(), ATTR_MAX as usize);
        for (i, a) in Attr::ALL.iter().enumerate() {
            assert_eq!(*a as u16, i as u16 + 1);
            assert_eq!(Attr::from_u16(*a as u16), Some(*a));
        }
        assert_eq!(Attr::from_u16(0), None);
        assert_eq!(Attr::from_u16(ATTR_MAX + 1), None);
    }
}
