//! A short table describing a stream: per-command counts and bytes, what is
//! created and removed, data volume, versions and subvolume identities.

use std::io::{self, Write};

use btrfs_stream::{Command, CommandKind, Position};

use crate::escape::escape_into;
use crate::{Sink, SinkError};

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
    /// Count and encoded bytes, indexed by command number.
    pub per_command: [(u64, u64); 27],
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
        let slot = &mut self.per_command[cmd.kind() as usize];
        slot.0 += 1;
        slot.1 += pos.len;
        match *cmd {
            Command::Subvol {
                path,
                uuid,
                ctransid,
            } => self.streams.push(StreamInfo {
                version: pos.version,
                kind: "subvol",
                path: path.to_vec(),
                uuid: uuid.to_string(),
                ctransid,
                parent: None,
            }),
            Command::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => self.streams.push(StreamInfo {
                version: pos.version,
                kind: "snapshot",
                path: path.to_vec(),
                uuid: uuid.to_string(),
                ctransid,
                parent: Some((clone_uuid.to_string(), clone_ctransid)),
            }),
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

    /// Writes the table.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
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
        writeln!(out)?;
        writeln!(out, "{:<16} {:>12} {:>16}", "command", "count", "bytes")?;
        let (mut n, mut b) = (0u64, 0u64);
        for kind in CommandKind::ALL {
            let (count, bytes) = self.per_command[*kind as usize];
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
pub struct Summary<W: Write> {
    out: W,
    /// The totals so far.
    pub totals: Totals,
}

impl<W: Write> Summary<W> {
    /// A summary printed to `out`.
    pub fn new(out: W) -> Self {
        Summary {
            out,
            totals: Totals::default(),
        }
    }
}

impl<W: Write> Sink for Summary<W> {
    fn command(&mut self, cmd: &Command<'_>, pos: Position) -> Result<(), SinkError> {
        self.totals.add(cmd, pos);
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.totals.write_to(&mut self.out)?;
        self.out.flush()
    }
}
