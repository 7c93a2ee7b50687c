//! Streaming decoder: one command at a time from any `io::Read`.

use std::io::{self, Read};

use crate::attr::{Attr, ATTR_MAX};
use crate::command::{Attrs, Command, CommandKind, FieldError};
use crate::error::{Error, ErrorKind};
use crate::header::{MAGIC, MAX_VERSION, RESUME_MAGIC, STREAM_HEADER_LEN};
use crate::source::{ReadSource, SliceSource, Source};
use crate::{crc, COMMAND_HEADER_LEN};

/// Default limit on one command's payload length: 64 MiB.
pub const DEFAULT_MAX_COMMAND_LEN: u32 = 64 << 20;

/// Where one command was found in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based command number across concatenated streams.
    pub index: u64,
    /// Byte offset of the command header.
    pub offset: u64,
    /// Encoded length, header included.
    pub len: u64,
    /// Protocol version of the stream holding the command.
    pub version: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing read yet: EOF here is an empty stream.
    Start,
    /// After an END: a new stream header or a clean EOF may follow.
    BetweenStreams,
    /// Inside a stream, expecting a command.
    InStream,
    /// Clean end of input.
    Done,
    /// A previous call failed.
    Failed,
}

/// Reads commands from a send stream, several concatenated streams included.
///
/// Memory stays bounded by the largest command (itself bounded by
/// [`Reader::with_max_command_len`]). Commands borrow the reader's bytes, so
/// each must be dropped before the next call.
pub struct Reader<S> {
    src: S,
    /// Bytes of the last returned command, dropped on the next call.
    consume: usize,
    state: State,
    version: u32,
    commands: u64,
    streams: u64,
    max_len: u32,
    last_offset: u64,
    resumed: bool,
}

impl<R: Read> Reader<ReadSource<R>> {
    /// A reader over `inner` (a file, a pipe, a byte slice) through a
    /// bounded buffer, with the default command length limit.
    pub fn new(inner: R) -> Self {
        Reader::with_source(ReadSource::new(inner))
    }
}

impl<T: AsRef<[u8]>> Reader<SliceSource<T>> {
    /// A reader over bytes already in memory, such as a mapped file; command
    /// fields borrow them directly.
    pub fn from_bytes(data: T) -> Self {
        Reader::with_source(SliceSource::new(data))
    }
}

impl<S: Source> Reader<S> {
    /// A reader over any [`Source`].
    pub fn with_source(src: S) -> Self {
        Reader {
            src,
            consume: 0,
            state: State::Start,
            version: 0,
            commands: 0,
            streams: 0,
            max_len: DEFAULT_MAX_COMMAND_LEN,
            last_offset: 0,
            resumed: false,
        }
    }

    /// Sets the largest payload length accepted; longer commands are an error.
    pub fn with_max_command_len(mut self, max: u32) -> Self {
        self.max_len = max;
        self
    }

    /// Protocol version of the current stream (0 before the first header).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether the current stream is a resumed one ([`RESUME_MAGIC`]).
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// Number of stream headers read so far.
    pub fn streams(&self) -> u64 {
        self.streams
    }

    /// Number of commands returned so far.
    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// Input offset where the last returned command begins.
    pub fn command_offset(&self) -> u64 {
        self.last_offset
    }

    /// Input bytes consumed, including the last returned command.
    pub fn position(&self) -> u64 {
        self.src.offset() + self.consume as u64
    }

    fn avail(&self) -> usize {
        self.src.window().len()
    }

    fn here(&self) -> u64 {
        self.src.offset()
    }

    fn fail(&mut self, offset: u64, kind: ErrorKind) -> Error {
        self.state = State::Failed;
        Error {
            offset,
            command: self.commands + 1,
            kind,
        }
    }

    fn fill(&mut self, need: usize) -> io::Result<()> {
        self.src.fill(need)
    }

    /// Reads a stream header; returns false on clean EOF between streams.
    fn read_stream_header(&mut self) -> Result<bool, Error> {
        let at = self.here();
        if let Err(e) = self.fill(STREAM_HEADER_LEN) {
            return Err(self.fail(at, e.into()));
        }
        let got = self.avail();
        if got == 0 {
            if self.state == State::Start {
                return Err(self.fail(at, ErrorKind::Empty));
            }
            self.state = State::Done;
            return Ok(false);
        }
        let h = &self.src.window()[..got.min(STREAM_HEADER_LEN)];
        let resumed = h.len() >= MAGIC.len() && &h[..MAGIC.len()] == RESUME_MAGIC;
        if h.len() >= MAGIC.len() && &h[..MAGIC.len()] != MAGIC && !resumed {
            return Err(self.fail(at, ErrorKind::BadMagic));
        }
        self.resumed = resumed;
        if got < STREAM_HEADER_LEN {
            return Err(self.fail(at, ErrorKind::TruncatedStreamHeader { got }));
        }
        let version = u32::from_le_bytes([h[13], h[14], h[15], h[16]]);
        if !(1..=MAX_VERSION).contains(&version) {
            return Err(self.fail(at, ErrorKind::UnsupportedVersion(version)));
        }
        self.version = version;
        self.streams += 1;
        self.src.consume(STREAM_HEADER_LEN);
        self.state = State::InStream;
        Ok(true)
    }

    /// Returns the next command, or `None` at a clean end of input.
    ///
    /// A clean end is EOF right after an END command. Once an error is
    /// returned the reader is spent.
    pub fn next_command(&mut self) -> Result<Option<Command<'_>>, Error> {
        Ok(self.next_framed()?.map(|(c, _)| c))
    }

    /// Like [`Reader::next_command`], also telling where the command was.
    pub fn next_framed(&mut self) -> Result<Option<(Command<'_>, Position)>, Error> {
        self.src.consume(std::mem::take(&mut self.consume));
        loop {
            match self.state {
                State::Failed => return Err(self.fail(self.here(), ErrorKind::Failed)),
                State::Done => return Ok(None),
                State::Start | State::BetweenStreams => {
                    if !self.read_stream_header()? {
                        return Ok(None);
                    }
                }
                State::InStream => break,
            }
        }

        let at = self.here();
        if let Err(e) = self.fill(COMMAND_HEADER_LEN) {
            return Err(self.fail(at, e.into()));
        }
        match self.avail() {
            0 => return Err(self.fail(at, ErrorKind::MissingEnd)),
            got if got < COMMAND_HEADER_LEN => {
                return Err(self.fail(at, ErrorKind::TruncatedCommandHeader { got }))
            }
            _ => {}
        }
        let mut header = [0u8; COMMAND_HEADER_LEN];
        header.copy_from_slice(&self.src.window()[..COMMAND_HEADER_LEN]);
        let (len, cmd, stored) = crate::header::command_fields(&header);
        if len > self.max_len {
            let limit = u64::from(self.max_len);
            return Err(self.fail(
                at,
                ErrorKind::TooLarge {
                    len: len.into(),
                    limit,
                },
            ));
        }
        let total = COMMAND_HEADER_LEN + len as usize;
        if let Err(e) = self.fill(total) {
            return Err(self.fail(at, e.into()));
        }
        if self.avail() < total {
            let got = (self.avail() - COMMAND_HEADER_LEN) as u64;
            return Err(self.fail(
                at,
                ErrorKind::TruncatedCommand {
                    need: len.into(),
                    got,
                },
            ));
        }
        let body = COMMAND_HEADER_LEN..total;
        if !self.src.crc_checked(total) {
            let computed = crc::command_crc(&header, &self.src.window()[body.clone()]);
            if computed != stored {
                return Err(self.fail(at, ErrorKind::CrcMismatch { stored, computed }));
            }
        }

        self.commands += 1;
        self.last_offset = at;
        self.consume = total;
        let version = self.version;
        let pos = Position {
            index: self.commands,
            offset: at,
            len: total as u64,
            version,
        };
        match decode_payload(version, cmd, &self.src.window()[body]) {
            Ok(c) => {
                if c.kind() == CommandKind::End {
                    self.state = State::BetweenStreams;
                }
                Ok(Some((c, pos)))
            }
            Err((kind, rel)) => {
                self.state = State::Failed;
                let kind = relocate(kind, at + COMMAND_HEADER_LEN as u64 + rel);
                Err(Error {
                    offset: at,
                    command: self.commands,
                    kind,
                })
            }
        }
    }
}

/// Gives attribute-level errors their absolute input offset.
fn relocate(kind: ErrorKind, abs: u64) -> ErrorKind {
    match kind {
        ErrorKind::InvalidAttr { cmd, ty, .. } => ErrorKind::InvalidAttr { cmd, ty, at: abs },
        ErrorKind::TruncatedAttr { cmd, .. } => ErrorKind::TruncatedAttr { cmd, at: abs },
        ErrorKind::AttrOverrun { cmd, ty, len, .. } => ErrorKind::AttrOverrun {
            cmd,
            ty,
            len,
            at: abs,
        },
        k => k,
    }
}

/// Decodes one command payload of protocol `version`.
///
/// On failure returns what is wrong and the offset within `payload` where
/// the faulty attribute begins (0 for command-level faults).
pub fn decode_payload(
    version: u32,
    cmd: u16,
    payload: &[u8],
) -> Result<Command<'_>, (ErrorKind, u64)> {
    let kind = CommandKind::from_u16(cmd).ok_or((ErrorKind::UnknownCommand(cmd), 0))?;
    if kind.since() > version {
        return Err((ErrorKind::NotInVersion { cmd: kind, version }, 0));
    }
    let mut attrs = Attrs {
        payload,
        slots: [None; ATTR_MAX as usize + 1],
    };
    let mut pos = 0usize;
    while pos < payload.len() {
        let rest = &payload[pos..];
        if rest.len() < 2 {
            return Err((ErrorKind::TruncatedAttr { cmd: kind, at: 0 }, pos as u64));
        }
        let ty = u16::from_le_bytes([rest[0], rest[1]]);
        if ty == 0 || ty > ATTR_MAX {
            return Err((
                ErrorKind::InvalidAttr {
                    cmd: kind,
                    ty,
                    at: 0,
                },
                pos as u64,
            ));
        }
        if ty == Attr::Data as u16 && version >= 2 {
            // v2+: DATA has no length and takes the rest of the command.
            attrs.slots[ty as usize] = Some(((pos + 2) as u32, (rest.len() - 2) as u32));
            break;
        }
        if rest.len() < 4 {
            return Err((ErrorKind::TruncatedAttr { cmd: kind, at: 0 }, pos as u64));
        }
        let len = u16::from_le_bytes([rest[2], rest[3]]);
        if usize::from(len) > rest.len() - 4 {
            let e = ErrorKind::AttrOverrun {
                cmd: kind,
                ty,
                len,
                at: 0,
            };
            return Err((e, pos as u64));
        }
        attrs.slots[ty as usize] = Some(((pos + 4) as u32, u32::from(len)));
        pos += 4 + usize::from(len);
    }
    Command::decode(kind, &attrs).map_err(|e| {
        let kind = match e {
            FieldError::Missing(attr) => ErrorKind::MissingAttr { cmd: kind, attr },
            FieldError::BadSize { attr, got } => ErrorKind::BadAttrSize {
                cmd: kind,
                attr,
                expected: attr.value_type().fixed_len().unwrap_or(0),
                got,
            },
        };
        (kind, 0)
    })
}
