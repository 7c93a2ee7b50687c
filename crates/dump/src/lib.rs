//! Formatting of btrfs send streams: the `btrfs receive --dump` text, JSON
//! lines, and a summary table; and [`chains`]: which streams of a pile of
//! files follow which. Names and byte strings in them take their
//! text form from [`btrfs_text`] (escaped, JSON), as rreceive's and rsend's
//! listings do.
//!
//! [`dump`] drives a [`btrfs_stream::Reader`] and hands each command to a
//! [`Sink`]. On a broken stream everything valid before the fault has been
//! written when the error is returned.

pub mod chains;
pub mod input;
pub mod json;
pub mod summary;
pub mod text;
pub mod time;

use std::io::{Read, Write};

use btrfs_stream::{Command, Reader, Source};

pub use input::{open_stream_file, Decompress, Input};
pub use json::JsonDump;
pub use summary::Summary;
pub use text::TextDump;

/// Why a dump stopped.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The input stream is malformed.
    #[error(transparent)]
    Stream(#[from] btrfs_stream::Error),
    /// A command could not be formatted, as btrfs-progs also refuses it.
    #[error("{what} at byte {offset} (command #{command})")]
    Format {
        /// What is wrong.
        what: String,
        /// Offset of the command.
        offset: u64,
        /// 1-based command number.
        command: u64,
    },
    /// Writing the output failed.
    #[error("write error: {0}")]
    Output(#[from] std::io::Error),
}

pub use btrfs_stream::Position;

/// A refusal to format one command; [`dump`] adds the position.
#[derive(Debug)]
pub enum SinkError {
    /// The command cannot be shown (btrfs-progs refuses it too).
    Format(String),
    /// Output failed.
    Io(std::io::Error),
}

impl From<std::io::Error> for SinkError {
    fn from(e: std::io::Error) -> Self {
        SinkError::Io(e)
    }
}

/// Consumes decoded commands.
pub trait Sink {
    /// Handles one command.
    fn command(&mut self, cmd: &Command<'_>, pos: Position) -> Result<(), SinkError>;
    /// Called once after the last command, also after a stream error.
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    /// Whether [`Sink::ended`] should be told if more data follows the first
    /// END under [`Streams::First`]. Finding out reads the next stream's
    /// header and first command, and on a pipe waits for them or for EOF, so
    /// only sinks that report it ask.
    fn wants_trailing(&self) -> bool {
        false
    }
    /// Called once just before [`Sink::finish`] with how the input ended;
    /// not called when writing the output failed.
    fn ended(&mut self, _how: &Ending<'_>) {}
}

/// How the input ended, as told to [`Sink::ended`].
#[derive(Debug)]
pub enum Ending<'a> {
    /// Every byte of the input was read.
    Complete,
    /// Reading stopped at the first END ([`Streams::First`]); what follows
    /// was not looked at ([`Sink::wants_trailing`] is false).
    FirstStream,
    /// Reading stopped at the first END ([`Streams::First`]) and more bytes
    /// follow, unread.
    MoreFollows {
        /// They begin with a valid stream header and command.
        stream: bool,
    },
    /// The input is broken; everything before the fault was handed over.
    Broken(&'a DumpError),
}

/// Which part of a concatenated input to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Streams {
    /// Stop after the first END, as `btrfs receive --dump` does; later bytes
    /// are not decoded (only peeked at, for a sink that
    /// [`Sink::wants_trailing`]).
    #[default]
    First,
    /// Read every concatenated stream up to EOF.
    All,
}

/// Reads the commands of `input` into `sink`.
pub fn dump<R: Read, S: Sink>(input: R, sink: &mut S, streams: Streams) -> Result<(), DumpError> {
    dump_from(Reader::new(input), sink, streams)
}

/// Reads the commands of an opened [`Input`] into `sink`; a mapped file is
/// decoded in place.
pub fn dump_input<S: Sink>(input: Input, sink: &mut S, streams: Streams) -> Result<(), DumpError> {
    match input {
        Input::Mapped(map) => dump_from(
            Reader::with_source(input::MappedSource::new(map)),
            sink,
            streams,
        ),
        Input::Stream(r) | Input::Zstd(r) => dump(r, sink, streams),
    }
}

/// Reads the commands of `reader` into `sink`.
pub fn dump_from<Src: Source, S: Sink>(
    mut reader: Reader<Src>,
    sink: &mut S,
    streams: Streams,
) -> Result<(), DumpError> {
    let res = feed(&mut reader, sink, streams);
    match &res {
        Ok(false) => sink.ended(&Ending::Complete),
        Ok(true) if !sink.wants_trailing() => sink.ended(&Ending::FirstStream),
        // Peek: past an END the reader reads the next stream header, so a
        // clean EOF is the only answer that means nothing follows.
        Ok(true) => sink.ended(&match reader.next_framed() {
            Ok(None) => Ending::Complete,
            Ok(Some(_)) => Ending::MoreFollows { stream: true },
            Err(_) => Ending::MoreFollows { stream: false },
        }),
        Err(DumpError::Output(_)) => {}
        Err(e) => sink.ended(&Ending::Broken(e)),
    }
    let fin = sink.finish();
    res?;
    fin?;
    Ok(())
}

/// Feeds commands to `sink`; true when it stopped at the first END as
/// [`Streams::First`] asks.
fn feed<Src: Source, S: Sink>(
    reader: &mut Reader<Src>,
    sink: &mut S,
    streams: Streams,
) -> Result<bool, DumpError> {
    while let Some((cmd, pos)) = reader.next_framed()? {
        let end = matches!(cmd, Command::End {});
        sink.command(&cmd, pos).map_err(|e| match e {
            SinkError::Io(e) => DumpError::Output(e),
            SinkError::Format(what) => DumpError::Format {
                what,
                offset: pos.offset,
                command: pos.index,
            },
        })?;
        if end && streams == Streams::First {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes to `out` through a large buffer.
pub fn buffered<W: Write>(out: W) -> std::io::BufWriter<W> {
    std::io::BufWriter::with_capacity(256 << 10, out)
}
