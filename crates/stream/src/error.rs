//! Errors from reading and writing streams.

use crate::attr::Attr;
use crate::command::CommandKind;

/// A fault in an input stream, with where it happened.
///
/// Displays as `<what> at byte N (command #K)`: `offset` is where the faulty
/// unit (stream header, command or attribute) begins in the input, and
/// `command` counts commands from 1 across concatenated streams.
#[derive(Debug, thiserror::Error)]
#[error("{kind} at byte {offset} (command #{command})")]
pub struct Error {
    /// Byte offset in the input of the faulty unit.
    pub offset: u64,
    /// 1-based number of the command being read.
    pub command: u64,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// What is wrong with an input stream.
#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    /// Reading the input failed.
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
    /// The input holds no bytes at all.
    #[error("empty stream (no stream header)")]
    Empty,
    /// The input ended inside the 17-byte stream header.
    #[error("truncated stream header ({got} of 17 bytes)")]
    TruncatedStreamHeader {
        /// Bytes present.
        got: usize,
    },
    /// The stream header does not start with `btrfs-stream\0`.
    #[error("bad stream magic (not a btrfs send stream)")]
    BadMagic,
    /// The stream header names a protocol version this crate lacks.
    #[error("unsupported stream version {0} (supported: 1 to 3)")]
    UnsupportedVersion(u32),
    /// The input ended at a command boundary before an END command.
    #[error("unexpected end of stream: no END command")]
    MissingEnd,
    /// The input ended inside a 10-byte command header.
    #[error("truncated command header ({got} of 10 bytes)")]
    TruncatedCommandHeader {
        /// Bytes present.
        got: usize,
    },
    /// The input ended inside a command payload.
    #[error("truncated command: payload of {need} bytes, only {got} present")]
    TruncatedCommand {
        /// Payload length the header declares.
        need: u64,
        /// Payload bytes present.
        got: u64,
    },
    /// The declared payload length exceeds the reader's limit.
    #[error("command length {len} exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Declared payload length.
        len: u64,
        /// The reader's limit.
        limit: u64,
    },
    /// The command's CRC does not match its bytes.
    #[error("crc32c mismatch in command (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC of the bytes read.
        computed: u32,
    },
    /// The command number is not defined by any protocol version.
    #[error("unknown command {0}")]
    UnknownCommand(u16),
    /// The command exists, but not in this stream's protocol version.
    #[error("command {cmd} is not part of protocol version {version}")]
    NotInVersion {
        /// The command.
        cmd: CommandKind,
        /// The stream's version.
        version: u32,
    },
    /// An attribute number that no protocol version defines.
    #[error("invalid attribute type {ty} in {cmd} (attribute at byte {at})")]
    InvalidAttr {
        /// The command.
        cmd: CommandKind,
        /// Attribute number.
        ty: u16,
        /// Offset of the attribute.
        at: u64,
    },
    /// Fewer than 4 bytes remain for an attribute header.
    #[error("truncated attribute header in {cmd} (attribute at byte {at})")]
    TruncatedAttr {
        /// The command.
        cmd: CommandKind,
        /// Offset of the attribute.
        at: u64,
    },
    /// An attribute's length runs past the end of its command.
    #[error("attribute {ty} of {len} bytes overruns the end of {cmd} (attribute at byte {at})")]
    AttrOverrun {
        /// The command.
        cmd: CommandKind,
        /// Attribute number.
        ty: u16,
        /// Declared value length.
        len: u16,
        /// Offset of the attribute.
        at: u64,
    },
    /// A required attribute is absent.
    #[error("{cmd} is missing required attribute {attr}")]
    MissingAttr {
        /// The command.
        cmd: CommandKind,
        /// The absent attribute.
        attr: Attr,
    },
    /// A fixed-size attribute has the wrong size.
    #[error("attribute {attr} of {cmd} has {got} bytes, expected {expected}")]
    BadAttrSize {
        /// The command.
        cmd: CommandKind,
        /// The attribute.
        attr: Attr,
        /// Required size.
        expected: usize,
        /// Actual size.
        got: usize,
    },
    /// A previous call already failed; the reader does not resynchronize.
    #[error("stream reader already failed")]
    Failed,
}

/// Why a command could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Writing the output failed.
    #[error("write error: {0}")]
    Io(#[from] std::io::Error),
    /// The protocol version is outside 1 to 3.
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u32),
    /// The command does not exist in this protocol version.
    #[error("command {cmd} is not part of protocol version {version}")]
    NotInVersion {
        /// The command.
        cmd: CommandKind,
        /// Target version.
        version: u32,
    },
    /// The encoded command is larger than the version allows.
    #[error("{cmd} of {len} bytes exceeds the protocol v{version} limit of {limit} bytes")]
    TooLarge {
        /// The command.
        cmd: CommandKind,
        /// Encoded length including the header.
        len: usize,
        /// The limit.
        limit: usize,
        /// Target version.
        version: u32,
    },
    /// An attribute value does not fit its u16 length field.
    #[error("attribute {attr} of {len} bytes does not fit a 16-bit length")]
    AttrTooLong {
        /// The attribute.
        attr: Attr,
        /// Value length.
        len: usize,
    },
    /// A command was written before `start_stream`.
    #[error("no stream started")]
    NoStream,
}
