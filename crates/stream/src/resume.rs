//! Resuming a stream: where a receive stopped, and the token that tells a
//! sender to go on from there.
//!
//! A receive that stops early records a [`Point`]: how many commands of the
//! stream it applied, the byte offset in that stream just after the last
//! one, and a [`Digest`] of those commands. The digest covers every field
//! of every command except the bytes of file data (WRITE and ENCODED_WRITE
//! data count by their length only), so a sender can compute it again
//! without reading file data, and refuse to resume a stream that would not
//! be the same one.
//!
//! A resumed stream is a stream header with its own magic
//! ([`crate::RESUME_MAGIC`], so that `btrfs receive` refuses it at once), a
//! RESUME command carrying the point, the SUBVOL or SNAPSHOT command of the
//! stream it continues, then that stream's commands after the point.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use crate::command::Command;
use crate::error::WriteError;
use crate::writer::encode_command;

/// How far a receive applied a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Point {
    /// Commands applied, the first (SUBVOL or SNAPSHOT) included.
    pub commands: u64,
    /// Offset in the stream just after the last of them (the stream header
    /// counts: the first command starts at 17).
    pub offset: u64,
    /// Their [`Digest`].
    pub digest: u128,
}

impl Point {
    /// The RESUME command that starts a stream continuing from here.
    pub fn command(&self) -> Command<'static> {
        Command::Resume {
            commands: self.commands,
            offset: self.offset,
            digest: Uuid::from_u128(self.digest),
        }
    }
}

/// A running fingerprint of a stream's commands, file data left out.
#[derive(Debug, Clone, Default)]
pub struct Digest {
    value: u128,
    scratch: Vec<u8>,
}

impl Digest {
    /// A digest continuing from `value` (0 for a stream's start).
    pub fn from_value(value: u128) -> Digest {
        Digest {
            value,
            scratch: Vec::new(),
        }
    }

    /// The digest of the commands added so far.
    pub fn value(&self) -> u128 {
        self.value
    }

    /// Adds `cmd` as protocol `version` encodes it. Its file data (if any)
    /// counts as `data_len` bytes, whatever `cmd` holds; other commands
    /// ignore `data_len`.
    pub fn add(
        &mut self,
        cmd: &Command<'_>,
        data_len: u64,
        version: u32,
    ) -> Result<(), WriteError> {
        let (head, len) = without_data(cmd, data_len);
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.value.to_le_bytes());
        self.scratch.extend_from_slice(&len.to_le_bytes());
        encode_command(&head, version, &mut self.scratch)?;
        self.value = xxhash_rust::xxh3::xxh3_128(&self.scratch);
        Ok(())
    }
}

/// `cmd` with its file data emptied, and the length the data counts as.
pub fn without_data<'a>(cmd: &Command<'a>, data_len: u64) -> (Command<'a>, u64) {
    let mut head = cmd.clone();
    match &mut head {
        Command::Write { data, .. } | Command::EncodedWrite { data, .. } => {
            *data = &[];
            (head, data_len)
        }
        _ => (head, 0),
    }
}

/// What `rreceive --resume-token` prints and `rsend --resume` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The uuid the stream gives its subvolume (SUBVOL or SNAPSHOT).
    pub uuid: Uuid,
    /// Its ctransid.
    pub ctransid: u64,
    /// For an incremental stream, the parent's uuid and ctransid.
    pub parent: Option<(Uuid, u64)>,
    /// The stream's protocol version.
    pub version: u32,
    /// Where the receive stopped.
    pub point: Point,
}

const TOKEN_PREFIX: &str = "rsend1";

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pu, pc) = match self.parent {
            Some((u, c)) => (u.hyphenated().to_string(), c),
            None => ("-".to_string(), 0),
        };
        write!(
            f,
            "{TOKEN_PREFIX}:{}:{}:{pu}:{pc}:{}:{}:{}:{:032x}",
            self.uuid.hyphenated(),
            self.ctransid,
            self.version,
            self.point.commands,
            self.point.offset,
            self.point.digest
        )
    }
}

/// A resume token that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a resume token (rreceive --resume-token prints one): {0}")]
pub struct TokenError(&'static str);

impl FromStr for Token {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Token, TokenError> {
        let f: Vec<&str> = s.trim().split(':').collect();
        if f.first() != Some(&TOKEN_PREFIX) {
            return Err(TokenError("it does not start with rsend1:"));
        }
        if f.len() != 9 {
            return Err(TokenError("it does not have 9 fields"));
        }
        let uuid = |s: &str| Uuid::parse_str(s).map_err(|_| TokenError("a uuid is malformed"));
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| TokenError("a number is malformed"))
        };
        let parent = match f[3] {
            "-" => None,
            u => Some((uuid(u)?, num(f[4])?)),
        };
        let version = u32::try_from(num(f[5])?).map_err(|_| TokenError("bad version"))?;
        if f[8].len() != 32 {
            return Err(TokenError("the digest is not 32 hex digits"));
        }
        let digest =
            u128::from_str_radix(f[8], 16).map_err(|_| TokenError("the digest is not hex"))?;
        Ok(Token {
            uuid: uuid(f[1])?,
            ctransid: num(f[2])?,
            parent,
            version,
            point: Point {
                commands: num(f[6])?,
                offset: num(f[7])?,
                digest,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trips() {
        let t = Token {
            uuid: Uuid::from_u128(0x1234),
            ctransid: 99,
            parent: Some((Uuid::from_u128(7), 42)),
            version: 2,
            point: Point {
                commands: 1000,
                offset: 123_456,
                digest: 0xdead_beef_0000_0000_0000_0000_0000_0001,
            },
        };
        let s = t.to_string();
        assert!(!s.contains(char::is_whitespace), "{s}");
        assert_eq!(s.parse::<Token>(), Ok(t.clone()));
        let full = Token { parent: None, ..t };
        assert_eq!(full.to_string().parse::<Token>(), Ok(full));
        for bad in ["", "rsend1:x", "zfs:1", &s[..s.len() - 1]] {
            assert!(bad.parse::<Token>().is_err(), "{bad}");
        }
    }

    #[test]
    fn digest_ignores_data_bytes_but_not_their_length() {
        let w = |data: &'static [u8], offset| Command::Write {
            path: b"f",
            offset,
            data,
        };
        let value = |c: &Command<'_>, n| {
            let mut d = Digest::default();
            d.add(c, n, 1).unwrap();
            d.value()
        };
        assert_eq!(value(&w(b"abcd", 0), 4), value(&w(b"wxyz", 0), 4));
        assert_eq!(value(&w(b"abcd", 0), 4), value(&w(b"", 0), 4));
        assert_ne!(value(&w(b"abcd", 0), 4), value(&w(b"abcd", 0), 5));
        assert_ne!(value(&w(b"abcd", 0), 4), value(&w(b"abcd", 4096), 4));
        let t = |path: &'static [u8]| Command::Truncate { path, size: 1 };
        assert_ne!(value(&t(b"a"), 0), value(&t(b"b"), 0));
        // The order of commands counts.
        let mut ab = Digest::default();
        ab.add(&t(b"a"), 0, 1).unwrap();
        ab.add(&t(b"b"), 0, 1).unwrap();
        let mut ba = Digest::default();
        ba.add(&t(b"b"), 0, 1).unwrap();
        ba.add(&t(b"a"), 0, 1).unwrap();
        assert_ne!(ab.value(), ba.value());
    }
}
