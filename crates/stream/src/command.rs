//! Commands: their numbers, protocol versions, and typed fields.
//!
//! One macro table lists every command with its fields in the order the
//! kernel emits them; decoding, encoding, [`Command::for_each_field`] and
//! [`Command::paths`] are all derived from it, so they can never disagree
//! about which attribute carries which field.

use crate::attr::{Attr, ValueType};
use crate::error::WriteError;

pub use uuid::Uuid;

/// A btrfs timestamp: le64 seconds and le32 nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Timespec {
    /// Seconds since the epoch (signed, as `time_t`).
    pub sec: i64,
    /// Nanoseconds, normally below 10^9 (not enforced on the wire).
    pub nsec: u32,
}

/// Attribute values of one command payload, indexed by attribute number.
///
/// When an attribute appears twice the last one wins, as in btrfs-progs.
pub(crate) struct Attrs<'a> {
    pub(crate) payload: &'a [u8],
    pub(crate) slots: [Option<(u32, u32)>; crate::attr::ATTR_MAX as usize + 1],
}

impl<'a> Attrs<'a> {
    fn get(&self, a: Attr) -> Option<&'a [u8]> {
        let (start, len) = self.slots[a as usize]?;
        self.payload
            .get(start as usize..start as usize + len as usize)
    }
}

/// Why one field could not be taken from a command's attributes.
pub(crate) enum FieldError {
    Missing(Attr),
    BadSize { attr: Attr, got: usize },
}

fn fixed<'a, const N: usize>(attrs: &Attrs<'a>, a: Attr) -> Result<Option<[u8; N]>, FieldError> {
    match attrs.get(a) {
        None => Ok(None),
        Some(v) => v.try_into().map(Some).map_err(|_| FieldError::BadSize {
            attr: a,
            got: v.len(),
        }),
    }
}

/// Serializes one attribute into a command payload under construction.
pub(crate) struct Encoder<'b> {
    pub(crate) out: &'b mut Vec<u8>,
    pub(crate) version: u32,
}

impl Encoder<'_> {
    fn put(&mut self, a: Attr, value: &[u8]) -> Result<(), WriteError> {
        self.out.extend_from_slice(&(a as u16).to_le_bytes());
        if a == Attr::Data && self.version >= 2 {
            // From v2 on, DATA has no length; it runs to the end of the command.
            self.out.extend_from_slice(value);
            return Ok(());
        }
        let len = u16::try_from(value.len()).map_err(|_| WriteError::AttrTooLong {
            attr: a,
            len: value.len(),
        })?;
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(value);
        Ok(())
    }
}

/// One field of a command, as [`Command::for_each_field`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// Raw bytes: a path, name, xattr value or data.
    Bytes(&'a [u8]),
    /// A 64-bit attribute.
    U64(u64),
    /// A 32-bit attribute.
    U32(u32),
    /// An 8-bit attribute.
    U8(u8),
    /// A uuid.
    Uuid(Uuid),
    /// A timestamp.
    Time(Timespec),
    /// An optional attribute the command does not carry.
    Absent,
}

/// A value that one attribute carries.
pub(crate) trait Field<'a>: Sized {
    fn decode(attrs: &Attrs<'a>, a: Attr) -> Result<Self, FieldError>;
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError>;
    fn value(&self) -> FieldValue<'a>;
}

macro_rules! required {
    () => {
        fn decode(attrs: &Attrs<'a>, a: Attr) -> Result<Self, FieldError> {
            <Option<Self> as Field<'a>>::decode(attrs, a)?.ok_or(FieldError::Missing(a))
        }
    };
}

impl<'a> Field<'a> for Option<&'a [u8]> {
    fn decode(attrs: &Attrs<'a>, a: Attr) -> Result<Self, FieldError> {
        debug_assert_eq!(a.value_type(), ValueType::Bytes);
        Ok(attrs.get(a))
    }
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
        self.map_or(Ok(()), |v| enc.put(a, v))
    }
    fn value(&self) -> FieldValue<'a> {
        self.map_or(FieldValue::Absent, FieldValue::Bytes)
    }
}
impl<'a> Field<'a> for &'a [u8] {
    required!();
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
        enc.put(a, self)
    }
    fn value(&self) -> FieldValue<'a> {
        FieldValue::Bytes(self)
    }
}

macro_rules! int_field {
    ($t:ty, $n:literal, $vt:ident) => {
        impl<'a> Field<'a> for Option<$t> {
            fn decode(attrs: &Attrs<'a>, a: Attr) -> Result<Self, FieldError> {
                debug_assert_eq!(a.value_type(), ValueType::$vt);
                Ok(fixed::<$n>(attrs, a)?.map(<$t>::from_le_bytes))
            }
            fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
                self.map_or(Ok(()), |v| enc.put(a, &v.to_le_bytes()))
            }
            fn value(&self) -> FieldValue<'a> {
                self.map_or(FieldValue::Absent, FieldValue::$vt)
            }
        }
        impl<'a> Field<'a> for $t {
            required!();
            fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
                enc.put(a, &self.to_le_bytes())
            }
            fn value(&self) -> FieldValue<'a> {
                FieldValue::$vt(*self)
            }
        }
    };
}
int_field!(u8, 1, U8);
int_field!(u32, 4, U32);
int_field!(u64, 8, U64);

impl<'a> Field<'a> for Option<Uuid> {
    fn decode(attrs: &Attrs<'a>, a: Attr) -> Result<Self, FieldError> {
        Ok(fixed::<16>(attrs, a)?.map(Uuid::from_bytes))
    }
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
        self.map_or(Ok(()), |v| enc.put(a, v.as_bytes()))
    }
    fn value(&self) -> FieldValue<'a> {
        self.map_or(FieldValue::Absent, FieldValue::Uuid)
    }
}
impl<'a> Field<'a> for Uuid {
    required!();
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
        enc.put(a, self.as_bytes())
    }
    fn value(&self) -> FieldValue<'a> {
        FieldValue::Uuid(*self)
    }
}

impl Timespec {
    fn from_bytes(b: [u8; 12]) -> Timespec {
        let mut sec = [0u8; 8];
        let mut nsec = [0u8; 4];
        sec.copy_from_slice(&b[..8]);
        nsec.copy_from_slice(&b[8..]);
        Timespec {
            sec: i64::from_le_bytes(sec),
            nsec: u32::from_le_bytes(nsec),
        }
    }
    fn to_bytes(self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&self.sec.to_le_bytes());
        b[8..].copy_from_slice(&self.nsec.to_le_bytes());
        b
    }
}
impl<'a> Field<'a> for Option<Timespec> {
    fn decode(attrs: &Attrs<'a>, a: Attr) -> Result<Self, FieldError> {
        Ok(fixed::<12>(attrs, a)?.map(Timespec::from_bytes))
    }
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
        self.map_or(Ok(()), |v| enc.put(a, &v.to_bytes()))
    }
    fn value(&self) -> FieldValue<'a> {
        self.map_or(FieldValue::Absent, FieldValue::Time)
    }
}
impl<'a> Field<'a> for Timespec {
    required!();
    fn encode(&self, a: Attr, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
        enc.put(a, &self.to_bytes())
    }
    fn value(&self) -> FieldValue<'a> {
        FieldValue::Time(*self)
    }
}

/// What a path-valued field of a command names.
///
/// The path attributes are PATH, PATH_TO, PATH_LINK and CLONE_PATH. PATH_LINK
/// means two things: in LINK it is a file in the subvolume, in SYMLINK it is
/// only the symlink's contents. The command table marks the latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathRole {
    /// PATH: what the command creates, changes or removes, relative to the
    /// subvolume being received; for SUBVOL and SNAPSHOT, that subvolume's
    /// own name.
    Path,
    /// PATH_TO: RENAME's new name, in the subvolume being received.
    PathTo,
    /// PATH_LINK of LINK: the existing file the new name links to, in the
    /// subvolume being received.
    LinkTarget,
    /// PATH_LINK of SYMLINK: the symlink's contents. Not a path in the
    /// destination; stored as given, never resolved.
    SymlinkTarget,
    /// CLONE_PATH: the file data is cloned from, in the subvolume that
    /// CLONE_UUID names (not necessarily the one being received).
    CloneSource,
}

impl PathRole {
    /// The attribute that carries a field of this role.
    pub fn attr(self) -> Attr {
        match self {
            PathRole::Path => Attr::Path,
            PathRole::PathTo => Attr::PathTo,
            PathRole::LinkTarget | PathRole::SymlinkTarget => Attr::PathLink,
            PathRole::CloneSource => Attr::ClonePath,
        }
    }

    /// The role of a field carried by `a`, unless the table says otherwise;
    /// `None` for attributes that are not paths.
    const fn of_attr(a: Attr) -> Option<PathRole> {
        match a {
            Attr::Path => Some(PathRole::Path),
            Attr::PathTo => Some(PathRole::PathTo),
            Attr::PathLink => Some(PathRole::LinkTarget),
            Attr::ClonePath => Some(PathRole::CloneSource),
            _ => None,
        }
    }
}

/// Most path fields one command can carry: one per path attribute.
const MAX_PATHS: usize = 4;

/// The path-valued fields of one command, as [`Command::paths`] yields them.
#[derive(Debug, Clone, Default)]
pub struct Paths<'a> {
    items: [Option<(PathRole, &'a [u8])>; MAX_PATHS],
    len: usize,
    next: usize,
}

impl<'a> Paths<'a> {
    fn push(&mut self, role: Option<PathRole>, value: FieldValue<'a>) {
        if let (Some(role), FieldValue::Bytes(path)) = (role, value) {
            // In bounds: the table is checked at compile time to give no
            // command more than MAX_PATHS path fields.
            self.items[self.len] = Some((role, path));
            self.len += 1;
        }
    }
}

impl<'a> Iterator for Paths<'a> {
    type Item = (PathRole, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let item = (*self.items.get(self.next)?)?;
        self.next += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.len - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Paths<'_> {}

/// The path role of one table field: the one written after `as`, else the
/// attribute's own.
macro_rules! path_role {
    ($attr:ident) => {
        PathRole::of_attr(Attr::$attr)
    };
    ($attr:ident as $role:ident) => {
        Some(PathRole::$role)
    };
}

macro_rules! commands {
    ($(
        $(#[$doc:meta])*
        $name:ident = $num:literal, $wire:literal, $dump:literal, since $ver:literal
            { $($field:ident : $fty:ty = $attr:ident $(as $role:ident)?),* $(,)? };
    )*) => {
        $(
            #[allow(unused_comparisons)] // `0 <= MAX_PATHS` for END
            const _: () = assert!(
                0 $(+ path_role!($attr $(as $role)?).is_some() as usize)* <= MAX_PATHS,
                concat!("BTRFS_SEND_C_", $wire, " has more path fields than MAX_PATHS"),
            );
        )*

        /// A command number (`BTRFS_SEND_C_*`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum CommandKind {
            $(
                #[doc = concat!("`BTRFS_SEND_C_", $wire, "`, since protocol v", $ver, ".")]
                $name = $num,
            )*
        }

        impl CommandKind {
            /// Every command, in number order.
            pub const ALL: &'static [CommandKind] = &[$(CommandKind::$name),*];

            /// Maps a command number to its command.
            pub fn from_u16(n: u16) -> Option<CommandKind> {
                match n {
                    $($num => Some(CommandKind::$name),)*
                    _ => None,
                }
            }

            /// The kernel's name without the `BTRFS_SEND_C_` prefix.
            pub fn name(self) -> &'static str {
                match self { $(CommandKind::$name => $wire,)* }
            }

            /// The operation name `btrfs receive --dump` prints.
            pub fn dump_name(self) -> &'static str {
                match self { $(CommandKind::$name => $dump,)* }
            }

            /// The first protocol version that has this command.
            pub fn since(self) -> u32 {
                match self { $(CommandKind::$name => $ver,)* }
            }
        }

        /// One decoded command. Byte fields borrow from the reader's buffer.
        ///
        /// Paths, names and xattr values stay raw bytes: btrfs names need not
        /// be UTF-8. `Option` fields are attributes the kernel sends but
        /// receivers do not require.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Command<'a> {
            $(
                $(#[$doc])*
                $name { $($field: $fty),* },
            )*
        }

        impl<'a> Command<'a> {
            /// This command's number.
            pub fn kind(&self) -> CommandKind {
                match self { $(Command::$name { .. } => CommandKind::$name,)* }
            }

            pub(crate) fn decode(kind: CommandKind, attrs: &Attrs<'a>) -> Result<Self, FieldError> {
                Ok(match kind {
                    $(CommandKind::$name => Command::$name {
                        $($field: <$fty as Field<'a>>::decode(attrs, Attr::$attr)?),*
                    },)*
                })
            }

            /// Calls `f` with each field's name, attribute and value, in the
            /// order the kernel emits them.
            pub fn for_each_field(&self, mut f: impl FnMut(&'static str, Attr, FieldValue<'a>)) {
                match self {
                    $(Command::$name { $($field),* } => {
                        $( f(stringify!($field), Attr::$attr, Field::value($field)); )*
                    })*
                }
            }

            /// The path-valued fields (PATH, PATH_TO, PATH_LINK, CLONE_PATH)
            /// the command carries, in the order the kernel emits them, each
            /// with what it names. Optional ones the command lacks are left
            /// out.
            pub fn paths(&self) -> Paths<'a> {
                let mut paths = Paths::default();
                match self {
                    $(Command::$name { $($field),* } => {
                        $( paths.push(path_role!($attr $(as $role)?), Field::value($field)); )*
                    })*
                }
                paths
            }

            pub(crate) fn encode_attrs(&self, enc: &mut Encoder<'_>) -> Result<(), WriteError> {
                match self {
                    $(Command::$name { $($field),* } => {
                        $( Field::encode($field, Attr::$attr, enc)?; )*
                    })*
                }
                Ok(())
            }
        }
    };
}

commands! {
    /// Start of a full stream: create subvolume `path`.
    Subvol = 1, "SUBVOL", "subvol", since 1 { path: &'a [u8] = Path, uuid: Uuid = Uuid, ctransid: u64 = Ctransid };
    /// Start of an incremental stream: snapshot the parent `clone_uuid` as `path`.
    Snapshot = 2, "SNAPSHOT", "snapshot", since 1 {
        path: &'a [u8] = Path, uuid: Uuid = Uuid, ctransid: u64 = Ctransid,
        clone_uuid: Uuid = CloneUuid, clone_ctransid: u64 = CloneCtransid };
    /// Create an empty regular file.
    Mkfile = 3, "MKFILE", "mkfile", since 1 { path: &'a [u8] = Path, ino: u64 = Ino };
    /// Create a directory.
    Mkdir = 4, "MKDIR", "mkdir", since 1 { path: &'a [u8] = Path, ino: u64 = Ino };
    /// Create a device node; `rdev` uses the kernel's new_encode_dev layout.
    Mknod = 5, "MKNOD", "mknod", since 1 {
        path: &'a [u8] = Path, ino: u64 = Ino, rdev: u64 = Rdev, mode: u64 = Mode };
    /// Create a fifo.
    Mkfifo = 6, "MKFIFO", "mkfifo", since 1 {
        path: &'a [u8] = Path, ino: u64 = Ino, rdev: Option<u64> = Rdev, mode: Option<u64> = Mode };
    /// Create a unix socket node.
    Mksock = 7, "MKSOCK", "mksock", since 1 {
        path: &'a [u8] = Path, ino: u64 = Ino, rdev: Option<u64> = Rdev, mode: Option<u64> = Mode };
    /// Create a symlink at `path` pointing to `target`.
    Symlink = 8, "SYMLINK", "symlink", since 1 {
        path: &'a [u8] = Path, ino: u64 = Ino, target: &'a [u8] = PathLink as SymlinkTarget };
    /// Rename `from` to `to`.
    Rename = 9, "RENAME", "rename", since 1 { from: &'a [u8] = Path, to: &'a [u8] = PathTo };
    /// Create hardlink `path` to the existing `target`.
    Link = 10, "LINK", "link", since 1 { path: &'a [u8] = Path, target: &'a [u8] = PathLink };
    /// Remove a non-directory name.
    Unlink = 11, "UNLINK", "unlink", since 1 { path: &'a [u8] = Path };
    /// Remove an empty directory.
    Rmdir = 12, "RMDIR", "rmdir", since 1 { path: &'a [u8] = Path };
    /// Set an extended attribute.
    SetXattr = 13, "SET_XATTR", "set_xattr", since 1 {
        path: &'a [u8] = Path, name: &'a [u8] = XattrName, data: &'a [u8] = XattrData };
    /// Remove an extended attribute.
    RemoveXattr = 14, "REMOVE_XATTR", "remove_xattr", since 1 {
        path: &'a [u8] = Path, name: &'a [u8] = XattrName };
    /// Write `data` at `offset`.
    Write = 15, "WRITE", "write", since 1 {
        path: &'a [u8] = Path, offset: u64 = FileOffset, data: &'a [u8] = Data };
    /// Reflink `len` bytes from `clone_path` at `clone_offset` in subvolume
    /// `clone_uuid` into `path` at `offset`.
    Clone = 16, "CLONE", "clone", since 1 {
        offset: u64 = FileOffset, len: u64 = CloneLen, path: &'a [u8] = Path,
        clone_uuid: Uuid = CloneUuid, clone_ctransid: u64 = CloneCtransid,
        clone_path: &'a [u8] = ClonePath, clone_offset: u64 = CloneOffset };
    /// Set the file size.
    Truncate = 17, "TRUNCATE", "truncate", since 1 { path: &'a [u8] = Path, size: u64 = Size };
    /// Set permission bits (`mode & 07777`).
    Chmod = 18, "CHMOD", "chmod", since 1 { path: &'a [u8] = Path, mode: u64 = Mode };
    /// Set owner and group.
    Chown = 19, "CHOWN", "chown", since 1 { path: &'a [u8] = Path, uid: u64 = Uid, gid: u64 = Gid };
    /// Set times; `otime` is sent from protocol v2 on.
    Utimes = 20, "UTIMES", "utimes", since 1 {
        path: &'a [u8] = Path, atime: Timespec = Atime, mtime: Timespec = Mtime,
        ctime: Timespec = Ctime, otime: Option<Timespec> = Otime };
    /// End of one stream.
    End = 21, "END", "end", since 1 {};
    /// A changed extent, sent instead of data under `--no-data`.
    UpdateExtent = 22, "UPDATE_EXTENT", "update_extent", since 1 {
        path: &'a [u8] = Path, offset: u64 = FileOffset, len: u64 = Size };
    /// fallocate(2) with `mode` flags over `[offset, offset + len)`.
    Fallocate = 23, "FALLOCATE", "fallocate", since 2 {
        path: &'a [u8] = Path, mode: u32 = FallocateMode, offset: u64 = FileOffset, len: u64 = Size };
    /// The raw btrfs inode flags.
    Fileattr = 24, "FILEATTR", "fileattr", since 2 { path: &'a [u8] = Path, attr: u64 = Fileattr };
    /// Write still-encoded (compressed) extent bytes.
    EncodedWrite = 25, "ENCODED_WRITE", "encoded_write", since 2 {
        path: &'a [u8] = Path, offset: u64 = FileOffset,
        unencoded_file_len: u64 = UnencodedFileLen, unencoded_len: u64 = UnencodedLen,
        unencoded_offset: u64 = UnencodedOffset, compression: Option<u32> = Compression,
        encryption: Option<u32> = Encryption, data: &'a [u8] = Data };
    /// Enable fs-verity on a file.
    EnableVerity = 26, "ENABLE_VERITY", "enable_verity", since 3 {
        path: &'a [u8] = Path, algorithm: u8 = VerityAlgorithm, block_size: u32 = VerityBlockSize,
        salt: &'a [u8] = VeritySaltData, sig: &'a [u8] = VeritySigData };
    /// rsend's own: this stream continues an earlier one that a receive
    /// applied up to command `commands` (byte `offset` of that stream, the
    /// commands so far fingerprinted as `digest`; see [`crate::resume`]).
    /// It comes first, before the SUBVOL or SNAPSHOT of the stream it
    /// continues; btrfs receive refuses it as an unknown command.
    Resume = 0x7273, "RESUME", "resume", since 1 {
        commands: u64 = Size, offset: u64 = FileOffset, digest: Uuid = Uuid };
}

impl std::fmt::Display for CommandKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `BTRFS_ENCODED_IO_COMPRESSION_*` values carried by ENCODED_WRITE.
pub mod compression {
    /// Not compressed.
    pub const NONE: u32 = 0;
    /// One zlib stream.
    pub const ZLIB: u32 = 1;
    /// One zstd frame.
    pub const ZSTD: u32 = 2;
    /// btrfs LZO framing with 4 KiB sectors; 4..=7 are 8 KiB to 64 KiB.
    pub const LZO_4K: u32 = 3;
    /// btrfs LZO framing with 64 KiB sectors.
    pub const LZO_64K: u32 = 7;
}

impl<'a> Command<'a> {
    /// The paths of the directory entries this command adds, removes or
    /// renames (each entry's parent directory changes): the new name of a
    /// created inode or link, the removed name, both names of a rename.
    pub fn entry_paths(&self) -> impl Iterator<Item = &'a [u8]> {
        let (a, b): (Option<&'a [u8]>, Option<&'a [u8]>) = match *self {
            Command::Mkfile { path, .. }
            | Command::Mkdir { path, .. }
            | Command::Mknod { path, .. }
            | Command::Mkfifo { path, .. }
            | Command::Mksock { path, .. }
            | Command::Symlink { path, .. }
            | Command::Link { path, .. }
            | Command::Unlink { path }
            | Command::Rmdir { path } => (Some(path), None),
            Command::Rename { from, to } => (Some(from), Some(to)),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths_are_the_names_added_removed_or_renamed() {
        let names = |c: Command<'_>| c.entry_paths().map(<[u8]>::to_vec).collect::<Vec<_>>();
        assert_eq!(
            names(Command::Mkdir {
                path: b"d",
                ino: 257
            }),
            vec![b"d".to_vec()]
        );
        assert_eq!(
            names(Command::Link {
                path: b"a/l",
                target: b"f"
            }),
            vec![b"a/l".to_vec()]
        );
        assert_eq!(
            names(Command::Rename {
                from: b"o257-5-0",
                to: b"a/f"
            }),
            vec![b"o257-5-0".to_vec(), b"a/f".to_vec()]
        );
        assert_eq!(names(Command::Rmdir { path: b"d" }), vec![b"d".to_vec()]);
        assert!(names(Command::Truncate {
            path: b"f",
            size: 0
        })
        .is_empty());
        assert!(names(Command::SetXattr {
            path: b"d",
            name: b"user.a",
            data: b""
        })
        .is_empty());
    }

    const T: Timespec = Timespec { sec: 1, nsec: 2 };
    const ID: Uuid = Uuid::from_bytes([7; 16]);

    /// One command of `kind` whose byte fields all differ.
    fn sample(kind: CommandKind) -> Command<'static> {
        use CommandKind as K;
        match kind {
            K::Subvol => Command::Subvol {
                path: b"sv",
                uuid: ID,
                ctransid: 1,
            },
            K::Resume => Command::Resume {
                commands: 3,
                offset: 200,
                digest: ID,
            },
            K::Snapshot => Command::Snapshot {
                path: b"snap",
                uuid: ID,
                ctransid: 1,
                clone_uuid: ID,
                clone_ctransid: 2,
            },
            K::Mkfile => Command::Mkfile {
                path: b"f",
                ino: 257,
            },
            K::Mkdir => Command::Mkdir {
                path: b"d",
                ino: 258,
            },
            K::Mknod => Command::Mknod {
                path: b"n",
                ino: 259,
                rdev: 1,
                mode: 0o20644,
            },
            K::Mkfifo => Command::Mkfifo {
                path: b"p",
                ino: 260,
                rdev: None,
                mode: None,
            },
            K::Mksock => Command::Mksock {
                path: b"s",
                ino: 261,
                rdev: Some(0),
                mode: Some(0),
            },
            K::Symlink => Command::Symlink {
                path: b"l",
                ino: 262,
                target: b"../t",
            },
            K::Rename => Command::Rename {
                from: b"o257-1-0",
                to: b"d/f",
            },
            K::Link => Command::Link {
                path: b"d/h",
                target: b"d/f",
            },
            K::Unlink => Command::Unlink { path: b"d/h" },
            K::Rmdir => Command::Rmdir { path: b"d" },
            K::SetXattr => Command::SetXattr {
                path: b"f",
                name: b"user.a",
                data: b"v",
            },
            K::RemoveXattr => Command::RemoveXattr {
                path: b"f",
                name: b"user.a",
            },
            K::Write => Command::Write {
                path: b"f",
                offset: 0,
                data: b"data",
            },
            K::Clone => Command::Clone {
                offset: 0,
                len: 4096,
                path: b"f",
                clone_uuid: ID,
                clone_ctransid: 3,
                clone_path: b"src",
                clone_offset: 0,
            },
            K::Truncate => Command::Truncate {
                path: b"f",
                size: 1,
            },
            K::Chmod => Command::Chmod {
                path: b"",
                mode: 0o755,
            },
            K::Chown => Command::Chown {
                path: b"f",
                uid: 0,
                gid: 0,
            },
            K::Utimes => Command::Utimes {
                path: b"f",
                atime: T,
                mtime: T,
                ctime: T,
                otime: None,
            },
            K::End => Command::End {},
            K::UpdateExtent => Command::UpdateExtent {
                path: b"f",
                offset: 0,
                len: 1,
            },
            K::Fallocate => Command::Fallocate {
                path: b"f",
                mode: 0,
                offset: 0,
                len: 1,
            },
            K::Fileattr => Command::Fileattr {
                path: b"f",
                attr: 0,
            },
            K::EncodedWrite => Command::EncodedWrite {
                path: b"f",
                offset: 0,
                unencoded_file_len: 1,
                unencoded_len: 1,
                unencoded_offset: 0,
                compression: None,
                encryption: None,
                data: b"z",
            },
            K::EnableVerity => Command::EnableVerity {
                path: b"f",
                algorithm: 1,
                block_size: 4096,
                salt: b"salt",
                sig: b"sig",
            },
        }
    }

    /// The paths `sample(kind)` names, written out by hand.
    fn expected(kind: CommandKind) -> Vec<(PathRole, &'static [u8])> {
        use CommandKind as K;
        use PathRole as P;
        match kind {
            K::Subvol => vec![(P::Path, b"sv")],
            K::Snapshot => vec![(P::Path, b"snap")],
            K::Mkfile | K::SetXattr | K::RemoveXattr | K::Write | K::Truncate | K::Chown => {
                vec![(P::Path, b"f")]
            }
            K::Utimes | K::UpdateExtent | K::Fallocate | K::Fileattr | K::EncodedWrite => {
                vec![(P::Path, b"f")]
            }
            K::EnableVerity => vec![(P::Path, b"f")],
            K::Mkdir | K::Rmdir => vec![(P::Path, b"d")],
            K::Mknod => vec![(P::Path, b"n")],
            K::Mkfifo => vec![(P::Path, b"p")],
            K::Mksock => vec![(P::Path, b"s")],
            K::Symlink => vec![(P::Path, b"l"), (P::SymlinkTarget, b"../t")],
            K::Rename => vec![(P::Path, b"o257-1-0"), (P::PathTo, b"d/f")],
            K::Link => vec![(P::Path, b"d/h"), (P::LinkTarget, b"d/f")],
            K::Unlink => vec![(P::Path, b"d/h")],
            K::Clone => vec![(P::Path, b"f"), (P::CloneSource, b"src")],
            K::Chmod => vec![(P::Path, b"")],
            K::End | K::Resume => vec![],
        }
    }

    #[test]
    fn paths_of_every_command_kind() {
        for &kind in CommandKind::ALL {
            let cmd = sample(kind);
            assert_eq!(cmd.kind(), kind);
            let got: Vec<_> = cmd.paths().collect();
            assert_eq!(got, expected(kind), "{kind}");
            assert_eq!(cmd.paths().len(), got.len(), "{kind}");
        }
    }

    #[test]
    fn paths_are_exactly_the_path_attributes() {
        let is_path = |a| {
            matches!(
                a,
                Attr::Path | Attr::PathTo | Attr::PathLink | Attr::ClonePath
            )
        };
        for &kind in CommandKind::ALL {
            let cmd = sample(kind);
            let mut fields = Vec::new();
            cmd.for_each_field(|_, attr, v| {
                if let (true, FieldValue::Bytes(b)) = (is_path(attr), v) {
                    fields.push((attr, b));
                }
            });
            let got: Vec<_> = cmd.paths().map(|(role, p)| (role.attr(), p)).collect();
            assert_eq!(got, fields, "{kind}");
        }
    }

    #[test]
    fn symlink_contents_are_told_apart_from_a_link_target() {
        let roles = |k| sample(k).paths().map(|(r, _)| r).collect::<Vec<_>>();
        assert_eq!(roles(CommandKind::Symlink)[1], PathRole::SymlinkTarget);
        assert_eq!(roles(CommandKind::Link)[1], PathRole::LinkTarget);
        assert_eq!(PathRole::SymlinkTarget.attr(), Attr::PathLink);
        assert_eq!(PathRole::LinkTarget.attr(), Attr::PathLink);
    }
}
