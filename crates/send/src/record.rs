//! What `rsend --changes` and `rsend --verify` report: one record per path,
//! sorted by the path's bytes, printed as tab-separated text (like `zfs diff
//! -H`) or as JSON lines.
//!
//! Text: `+ PATH`, `- PATH`, `R FROM TO`, `M PATH what,...`, `L PATH`, `U
//! PATH` (names escaped as `btrfs receive --dump` and `rdump` escape them,
//! [`btrfs_text::escape`], so a tab or newline in a name cannot split a
//! record). JSON: `change`, `path`, `from` (renamed), `type`, `what`
//! (modified, differs); a name that is not UTF-8 is `{"hex": ...}` as
//! `rdump --json` writes it ([`btrfs_text::json`]).

use std::io::{self, Write};

use btrfs_text::escape::escape_into;
use btrfs_text::json::bytes_value;
use serde_json::{Map, Value};

/// An inode's file type, as records name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A unix socket.
    Socket,
    /// A character device.
    CharDev,
    /// A block device.
    BlockDev,
}

impl FileType {
    /// The type of an `st_mode`; `None` for type bits no file has.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & 0o170000 {
            0o100000 => FileType::File,
            0o040000 => FileType::Dir,
            0o120000 => FileType::Symlink,
            0o010000 => FileType::Fifo,
            0o140000 => FileType::Socket,
            0o020000 => FileType::CharDev,
            0o060000 => FileType::BlockDev,
            _ => return None,
        })
    }

    /// Its name in records (`file`, `dir`, `symlink`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FileType::File => "file",
            FileType::Dir => "dir",
            FileType::Symlink => "symlink",
            FileType::Fifo => "fifo",
            FileType::Socket => "socket",
            FileType::CharDev => "chardev",
            FileType::BlockDev => "blockdev",
        }
    }
}

/// One attribute that differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// The file's bytes (or its size).
    Data,
    /// The file type (`--verify` only).
    Type,
    /// Permission bits (`st_mode & 07777`).
    Mode,
    /// uid or gid.
    Owner,
    /// Extended attributes (names or values).
    Xattrs,
    /// Inode flags (`chattr`: immutable, append-only, nodump, nocow,
    /// compression, ...).
    Flags,
    /// Modification time.
    Mtime,
    /// A symlink's target.
    Target,
    /// A device's number.
    Rdev,
    /// Hard links: the link count, or which paths share the inode (`--verify` only).
    Links,
}

impl What {
    /// Every attribute, in the order records list them.
    pub const ALL: [What; 10] = [
        What::Data,
        What::Type,
        What::Mode,
        What::Owner,
        What::Xattrs,
        What::Flags,
        What::Mtime,
        What::Target,
        What::Rdev,
        What::Links,
    ];

    /// Its name in records.
    pub fn name(self) -> &'static str {
        match self {
            What::Data => "data",
            What::Type => "type",
            What::Mode => "mode",
            What::Owner => "owner",
            What::Xattrs => "xattrs",
            What::Flags => "flags",
            What::Mtime => "mtime",
            What::Target => "target",
            What::Rdev => "rdev",
            What::Links => "links",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of [`What`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WhatSet(u16);

impl WhatSet {
    /// Adds `w`.
    pub fn add(&mut self, w: What) {
        self.0 |= w.bit();
    }
    /// Adds `w` when `cond` holds.
    pub fn add_if(&mut self, cond: bool, w: What) {
        if cond {
            self.add(w);
        }
    }
    /// Whether `w` is in the set.
    pub fn has(self, w: What) -> bool {
        self.0 & w.bit() != 0
    }
    /// The members not in `other`.
    pub fn without(self, other: WhatSet) -> WhatSet {
        WhatSet(self.0 & !other.0)
    }
    /// Whether nothing is.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The members, in [`What::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = What> {
        What::ALL.into_iter().filter(move |w| self.has(*w))
    }
}

/// What happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// `--changes`: an inode that is only in the parent, at one of its names there.
    Deleted,
    /// `--changes`: a name the inode lost (not a rename).
    Unlinked,
    /// `--changes`: the inode's one name moved (from another directory or name).
    Renamed,
    /// `--changes`: an inode that is only in the snapshot, at one of its names.
    Created,
    /// `--changes`: a name the inode gained (not a rename).
    Linked,
    /// `--changes`: attributes or data of an inode in both.
    Modified,
    /// `--verify`: in the snapshot, not in the copy.
    Missing,
    /// `--verify`: in the copy, not in the snapshot.
    Extra,
    /// `--verify`: in both, different.
    Differs,
}

impl Change {
    /// Its name in JSON records.
    pub fn name(self) -> &'static str {
        match self {
            Change::Deleted => "deleted",
            Change::Unlinked => "unlinked",
            Change::Renamed => "renamed",
            Change::Created => "created",
            Change::Linked => "linked",
            Change::Modified => "modified",
            Change::Missing => "missing",
            Change::Extra => "extra",
            Change::Differs => "differs",
        }
    }

    /// Its mark in text records.
    pub fn mark(self) -> &'static str {
        match self {
            Change::Created | Change::Extra => "+",
            Change::Deleted | Change::Missing => "-",
            Change::Renamed => "R",
            Change::Modified | Change::Differs => "M",
            Change::Linked => "L",
            Change::Unlinked => "U",
        }
    }
}

/// One line of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// What happened.
    pub change: Change,
    /// The path, relative to the snapshot root (`.` is the root itself).
    pub path: Vec<u8>,
    /// Where a renamed inode was.
    pub from: Option<Vec<u8>>,
    /// The inode's type (in the parent for deleted and unlinked, in the
    /// snapshot otherwise; for `--verify`, the snapshot's, or the copy's
    /// for an extra path).
    pub file_type: FileType,
    /// What differs (modified, differs).
    pub what: WhatSet,
}

impl Record {
    /// A record without `from` or `what`.
    pub fn new(change: Change, path: Vec<u8>, file_type: FileType) -> Record {
        Record {
            change,
            path,
            from: None,
            file_type,
            what: WhatSet::default(),
        }
    }
}

/// Sorts `records` by the bytes of the path as shown (the root is `.`),
/// then change, then `from`.
pub fn sort(records: &mut [Record]) {
    records.sort_unstable_by(|a, b| {
        shown(&a.path)
            .cmp(shown(&b.path))
            .then(a.change.cmp(&b.change))
            .then_with(|| a.from.cmp(&b.from))
    });
}

/// `a/b` from a directory path (`""` for the root) and a name.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    if !dir.is_empty() {
        p.extend_from_slice(dir);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// The path as records show it: `.` for the root (the empty path).
fn shown(path: &[u8]) -> &[u8] {
    if path.is_empty() {
        b"."
    } else {
        path
    }
}

/// Writes `records` as text or JSON lines.
pub fn write(out: &mut dyn Write, records: &[Record], json: bool) -> io::Result<()> {
    let mut line = Vec::with_capacity(256);
    for r in records {
        line.clear();
        if json {
            serde_json::to_writer(&mut line, &json_value(r))?;
        } else {
            text_line(&mut line, r);
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()
}

fn text_line(line: &mut Vec<u8>, r: &Record) {
    line.extend_from_slice(r.change.mark().as_bytes());
    line.push(b'\t');
    if let Some(from) = &r.from {
        escape_into(line, shown(from));
        line.push(b'\t');
    }
    escape_into(line, shown(&r.path));
    if !r.what.is_empty() {
        line.push(b'\t');
        for (i, w) in r.what.iter().enumerate() {
            if i > 0 {
                line.push(b',');
            }
            line.extend_from_slice(w.name().as_bytes());
        }
    }
}

/// The JSON object of one record.
pub fn json_value(r: &Record) -> Value {
    let mut m = Map::new();
    m.insert("change".into(), r.change.name().into());
    m.insert("path".into(), bytes_value(shown(&r.path)));
    if let Some(from) = &r.from {
        m.insert("from".into(), bytes_value(shown(from)));
    }
    m.insert("type".into(), r.file_type.name().into());
    if matches!(r.change, Change::Modified | Change::Differs) {
        m.insert(
            "what".into(),
            Value::Array(r.what.iter().map(|w| w.name().into()).collect()),
        );
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(records: &[Record], json: bool) -> String {
        let mut out = Vec::new();
        write(&mut out, records, json).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn text_records_escape_names_and_list_what_in_order() {
        let mut m = Record::new(Change::Modified, b"a b\tc".to_vec(), FileType::File);
        m.what.add(What::Mtime);
        m.what.add(What::Data);
        let mut r = Record::new(Change::Renamed, b"d/new".to_vec(), FileType::Dir);
        r.from = Some(b"old\n".to_vec());
        let root = Record::new(Change::Created, Vec::new(), FileType::Dir);
        assert_eq!(
            text(&[m, r, root], false),
            "M\ta\\ b\\tc\tdata,mtime\nR\told\\n\td/new\n+\t.\n"
        );
    }

    #[test]
    fn json_records_keep_every_byte() {
        let mut r = Record::new(Change::Renamed, b"x\xff".to_vec(), FileType::Symlink);
        r.from = Some(b"y".to_vec());
        let mut d = Record::new(Change::Differs, b"f".to_vec(), FileType::File);
        d.what.add(What::Links);
        assert_eq!(
            text(&[r, d], true),
            "{\"change\":\"renamed\",\"path\":{\"hex\":\"78ff\"},\"from\":\"y\",\"type\":\"symlink\"}\n\
             {\"change\":\"differs\",\"path\":\"f\",\"type\":\"file\",\"what\":[\"links\"]}\n"
        );
    }

    #[test]
    fn records_sort_by_path_bytes_then_change() {
        let mut v = vec![
            Record::new(Change::Created, b"a/b".to_vec(), FileType::File),
            Record::new(Change::Created, b"a-c".to_vec(), FileType::File),
            Record::new(Change::Created, b"a".to_vec(), FileType::Dir),
            Record::new(Change::Deleted, b"a".to_vec(), FileType::File),
        ];
        sort(&mut v);
        let got: Vec<(&[u8], Change)> = v.iter().map(|r| (&r.path[..], r.change)).collect();
        assert_eq!(
            got,
            vec![
                (&b"a"[..], Change::Deleted),
                (&b"a"[..], Change::Created),
                (&b"a-c"[..], Change::Created),
                (&b"a/b"[..], Change::Created),
            ]
        );
    }
}
