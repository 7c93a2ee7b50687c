//! The btrfs send stream wire format, protocol versions 1, 2 and 3.
//!
//! A stream is a 17-byte [`header`] followed by commands. Each command is a
//! 10-byte header (payload length, command number, CRC-32C) and a payload of
//! type-length-value attributes ([`attr`]). [`Reader`] decodes commands one at
//! a time from any [`std::io::Read`] with bounded memory; [`Writer`] encodes
//! them for a chosen protocol version.

pub mod ahead;
pub mod attr;
pub mod command;
pub mod crc;
pub mod error;
pub mod fileattr;
pub mod header;
pub mod reader;
pub mod resume;
pub mod source;
pub mod writer;

pub use ahead::CrcAhead;
pub use attr::Attr;
pub use command::{Command, CommandKind, FieldValue, PathRole, Paths, Timespec, Uuid};
pub use error::{Error, ErrorKind, WriteError};
pub use header::{StreamHeader, MAGIC, MAX_VERSION, RESUME_MAGIC, STREAM_HEADER_LEN};
pub use reader::{decode_payload, Position, Reader, DEFAULT_MAX_COMMAND_LEN};
pub use source::{ReadSource, SliceSource, Source};
pub use writer::{encode_command, encoded_len, max_command_len, Writer};

/// Length of a command header: le32 payload length, le16 command, le32 crc.
pub const COMMAND_HEADER_LEN: usize = 10;
