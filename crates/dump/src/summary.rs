//! A short table describing a stream: per-command counts and bytes, what is
//! created and removed, data volume, versions and subvolume identities.

use std::io::{self, Write};

use btrfs_stream::{Command, CommandKind, Position};

use crate::{Ending, Sink, SinkError};
use btrfs_text::escape::escape_into;

/// One stream's identity: its SUBVOL or SNAPSHOT command.
#[derive(Debug, Clone, Default)]
pub struct StreamInfo {
    /// Protocol version.
    pub version: u32,
    /// "subvol" or "snapshot".
    pub kind: &'static str,
    /// Subvolume name.
    pub path: Vec<u8>,
    /// Subvolume uuid.
    pub uuid: String,
    /// Its ctransid.
    pub ctransid: u64,
    /// Parent uuid and ctransid, for incremental streams.
    pub parent: Option<(String, u64)>,
}

/// Adds a length taken from the stream; hostile lengths saturate.
fn add(total: &mut u64, n: u64) {
    *total = total.saturating_add(n);
}

/// Totals gathered over a whole input.
#[derive(Debug, Default)]
pub struct Totals {
    /// Count and encoded bytes, in the order of [`CommandKind::ALL`].
    pub per_command: [(u64, u64); CommandKind::ALL.len()],
    /// Streams seen.
    pub streams: Vec<StreamInfo>,
    /// Non-directory inodes created.
    pub files_created: u64,
    /// Directories created.
    pub dirs_created: u64,
    /// Names unlinked.
    pub files_removed: u64,
    /// Directories removed.
    pub dirs_removed: u64,
    /// File bytes written, WRITE data plus the unencoded length of ENCODED_WRITE.
    pub bytes_written: u64,
    /// Encoded bytes carried by ENCODED_WRITE.
    pub bytes_encoded: u64,
    /// Bytes reflinked by CLONE.
    pub bytes_cloned: u64,
}

impl Totals {
    /// Adds one command.
    pub fn add(&mut self, cmd: &Command<'_>, pos: Position) {
        let slot = &mut self.per_command[slot_of(cmd.kind())];
        slot.0 += 1;
        slot.1 += pos.len;
        if let Some(id) = crate::chains::Identity::of(cmd) {
            self.streams.push(StreamInfo {
                version: pos.version,
                kind: if id.is_full() { "subvol" } else { "snapshot" },
                path: id.name,
                uuid: id.id.uuid.to_string(),
                ctransid: id.id.ctransid,
                parent: id.parent.map(|p| (p.uuid.to_string(), p.ctransid)),
            });
        }
        match *cmd {
            Command::Mkfile { .. }
            | Command::Mknod { .. }
            | Command::Mkfifo { .. }
            | Command::Mksock { .. }
            | Command::Symlink { .. } => self.files_created += 1,
            Command::Mkdir { .. } => self.dirs_created += 1,
            Command::Unlink { .. } => self.files_removed += 1,
            Command::Rmdir { .. } => self.dirs_removed += 1,
            Command::Write { data, .. } => add(&mut self.bytes_written, data.len() as u64),
            Command::EncodedWrite {
                unencoded_file_len,
                data,
                ..
            } => {
                add(&mut self.bytes_written, unencoded_file_len);
                add(&mut self.bytes_encoded, data.len() as u64);
            }
            Command::Clone { len, .. } => add(&mut self.bytes_cloned, len),
            _ => {}
        }
    }

    /// Commands counted.
    pub fn commands(&self) -> u64 {
        self.per_command.iter().map(|(n, _)| n).sum()
    }

    /// Writes the table.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        self.write_streams(out)?;
        self.write_counts(out)
    }

    /// The stream rows.
    fn write_streams(&self, out: &mut impl Write) -> io::Result<()> {
        let versions: Vec<String> = {
            let mut v: Vec<u32> = self.streams.iter().map(|s| s.version).collect();
            v.dedup();
            v.iter().map(u32::to_string).collect()
        };
        writeln!(out, "streams              {}", self.streams.len())?;
        let shown = if versions.is_empty() {
            "-".to_owned()
        } else {
            versions.join(",")
        };
        writeln!(out, "protocol version     {shown}")?;
        for (i, s) in self.streams.iter().enumerate() {
            let mut name = Vec::new();
            escape_into(&mut name, &s.path);
            writeln!(
                out,
                "stream {}             {} {} uuid={} transid={}",
                i + 1,
                s.kind,
                String::from_utf8_lossy(&name),
                s.uuid,
                s.ctransid
            )?;
            match &s.parent {
                Some((u, t)) => writeln!(out, "  parent uuid        {u} transid={t}")?,
                None => writeln!(out, "  parent uuid        - (full stream)")?,
            }
        }
        Ok(())
    }

    /// The command counts and the totals.
    fn write_counts(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(out)?;
        writeln!(out, "{:<16} {:>12} {:>16}", "command", "count", "bytes")?;
        let (mut n, mut b) = (0u64, 0u64);
        for kind in CommandKind::ALL {
            let (count, bytes) = self.per_command[slot_of(*kind)];
            if count > 0 {
                writeln!(out, "{:<16} {:>12} {:>16}", kind.dump_name(), count, bytes)?;
                n += count;
                b += bytes;
            }
        }
        writeln!(out, "{:<16} {:>12} {:>16}", "total", n, b)?;
        writeln!(out)?;
        let rows = [
            ("files created", self.files_created),
            ("dirs created", self.dirs_created),
            ("files removed", self.files_removed),
            ("dirs removed", self.dirs_removed),
            ("bytes written", self.bytes_written),
            ("bytes encoded", self.bytes_encoded),
            ("bytes cloned", self.bytes_cloned),
        ];
        for (k, v) in rows {
            writeln!(out, "{k:<16} {v:>12}")?;
        }
        Ok(())
    }
}

/// Gathers [`Totals`] and prints them when the input ends.
///
/// The table says when it is not the whole input: a broken stream adds a
/// first row `incomplete` naming the fault and where it is, and data left
/// unread after the first END adds a row `more streams follow` (or `more
/// data follows`, when it is no valid stream) below the stream rows.
pub struct Summary<W: Write> {
    out: W,
    /// The totals so far.
    pub totals: Totals,
    /// What [`Sink::ended`] said about the input beyond the totals.
    note: Note,
}

/// How the input ended, as far as the table tells.
#[derive(Debug, Default)]
enum Note {
    /// Read to the end, or to the first END as asked.
    #[default]
    None,
    /// The input is broken: the error's text, offset and command included.
    Broken(String),
    /// Bytes follow the first END unread; true when they begin a valid stream.
    MoreFollows(bool),
}

impl<W: Write> Summary<W> {
    /// A summary printed to `out`.
    pub fn new(out: W) -> Self {
        Summary {
            out,
            totals: Totals::default(),
            note: Note::None,
        }
    }
}

impl<W: Write> Sink for Summary<W> {
    fn command(&mut self, cmd: &Command<'_>, pos: Position) -> Result<(), SinkError> {
        self.totals.add(cmd, pos);
        Ok(())
    }

    fn wants_trailing(&self) -> bool {
        true
    }

    fn ended(&mut self, how: &Ending<'_>) {
        self.note = match how {
            Ending::Complete | Ending::FirstStream => Note::None,
            Ending::MoreFollows { stream } => Note::MoreFollows(*stream),
            Ending::Broken(e) => Note::Broken(e.to_string()),
        };
    }

    fn finish(&mut self) -> io::Result<()> {
        let out = &mut self.out;
        if let Note::Broken(e) = &self.note {
            let n = self.totals.commands();
            let s = if n == 1 { "" } else { "s" };
            writeln!(
                out,
                "incomplete           broken stream: {e}; the counts cover the {n} command{s} before it"
            )?;
        }
        self.totals.write_streams(out)?;
        match self.note {
            Note::MoreFollows(true) => {
                writeln!(out, "more streams follow  not read (use -a/--all-streams)")?
            }
            Note::MoreFollows(false) => {
                writeln!(out, "more data follows    not read (use -a/--all-streams)")?
            }
            Note::None | Note::Broken(_) => {}
        }
        self.totals.write_counts(out)?;
        out.flush()
    }
}

/// Where `kind` is counted in [`Totals::per_command`].
fn slot_of(kind: CommandKind) -> usize {
    CommandKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or_default()
}
