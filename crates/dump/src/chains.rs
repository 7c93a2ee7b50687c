//! Chains of nightly streams from a pile of files: which stream follows
//! which, and what is missing, doubled or broken.
//!
//! A *night* is one stream of a file; a file may hold several, concatenated.
//! [`scan`] reads one file whole, once, checking every command (CRCs
//! included), and records each of its nights ([`Night`]): where it is, its
//! identity (its first command: SUBVOL for a full stream, SNAPSHOT for an
//! incremental one, which names its parent), its size, and how it ended.
//! Only these few fields are kept; the stream's data passes through.
//!
//! [`group`] links each incremental night to the night that sent its parent
//! (the same uuid and ctransid; failing that the same uuid alone, flagged)
//! and orders the nights into [`Chain`]s, each starting at a full stream or
//! at an incremental whose parent is not among the nights. What is wrong
//! comes as [`Problem`]s: missing links, duplicates, branches, loops, broken
//! streams. [`Report`] writes it all as text or JSON, as `rdump --chains`
//! prints it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use btrfs_stream::{
    Command, CommandKind, Error, ErrorKind, ReadSource, Reader, Source, Uuid, MAGIC, RESUME_MAGIC,
    STREAM_HEADER_LEN,
};
use btrfs_text::escape::escape;
use btrfs_text::json::bytes_value;
use serde_json::{json, Map, Value};

use crate::input::{Input, MappedSource};

/// A subvolume as a send stream names it: its uuid and ctransid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubvolId {
    /// The subvolume's uuid.
    pub uuid: Uuid,
    /// Its ctransid when it was sent.
    pub ctransid: u64,
}

impl fmt::Display for SubvolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ctransid {}", self.uuid, self.ctransid)
    }
}

/// What a night sends, from its first command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The subvolume's name (the command's path).
    pub name: Vec<u8>,
    /// The subvolume sent.
    pub id: SubvolId,
    /// The parent of an incremental stream (SNAPSHOT's `clone_uuid` and
    /// `clone_ctransid`); `None` for a full stream (SUBVOL).
    pub parent: Option<SubvolId>,
}

impl Identity {
    /// The identity a SUBVOL or SNAPSHOT command gives; `None` for any
    /// other command.
    pub fn of(cmd: &Command<'_>) -> Option<Identity> {
        match *cmd {
            Command::Subvol {
                path,
                uuid,
                ctransid,
            } => Some(Identity {
                name: path.to_vec(),
                id: SubvolId { uuid, ctransid },
                parent: None,
            }),
            Command::Snapshot {
                path,
                uuid,
                ctransid,
                clone_uuid,
                clone_ctransid,
            } => Some(Identity {
                name: path.to_vec(),
                id: SubvolId { uuid, ctransid },
                parent: Some(SubvolId {
                    uuid: clone_uuid,
                    ctransid: clone_ctransid,
                }),
            }),
            _ => None,
        }
    }

    /// Whether it is a full stream (SUBVOL).
    pub fn is_full(&self) -> bool {
        self.parent.is_none()
    }
}

/// What kind of fault stopped reading a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The input ends before the stream's END: inside a header or a
    /// command, or between commands.
    CutShort,
    /// A command's CRC does not match its bytes.
    Crc,
    /// Anything else the stream format forbids (bad magic after an END,
    /// unknown command or attribute, wrong sizes, too long a command).
    Malformed,
    /// Reading the file failed, or its zstd compression is corrupt.
    Read,
}

impl FaultKind {
    /// Its name in words: `cut short`, `crc error`, `malformed`, `read error`.
    pub fn words(self) -> &'static str {
        match self {
            FaultKind::CutShort => "cut short",
            FaultKind::Crc => "crc error",
            FaultKind::Malformed => "malformed",
            FaultKind::Read => "read error",
        }
    }

    /// Its name in JSON: `cut_short`, `crc`, `malformed`, `read`.
    pub fn key(self) -> &'static str {
        match self {
            FaultKind::CutShort => "cut_short",
            FaultKind::Crc => "crc",
            FaultKind::Malformed => "malformed",
            FaultKind::Read => "read",
        }
    }
}

/// Where and why reading a night stopped: a [`btrfs_stream::Error`] kept
/// as words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What kind of fault.
    pub kind: FaultKind,
    /// Byte offset in the file where the faulty unit (stream header,
    /// command) begins; in the decompressed bytes of a zstd file.
    pub offset: u64,
    /// Number of the command being read, from 1, counted across the file's
    /// streams (as [`btrfs_stream::Error`] counts).
    pub command: u64,
    /// What is wrong, without the position.
    pub what: String,
}

impl Fault {
    /// The fault a reader's error tells.
    pub fn of(e: &Error) -> Fault {
        let kind = match &e.kind {
            ErrorKind::Empty
            | ErrorKind::TruncatedStreamHeader { .. }
            | ErrorKind::MissingEnd
            | ErrorKind::TruncatedCommandHeader { .. }
            | ErrorKind::TruncatedCommand { .. } => FaultKind::CutShort,
            // zstd says so of a compressed file that ends inside a frame.
            ErrorKind::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => FaultKind::CutShort,
            ErrorKind::Io(_) => FaultKind::Read,
            ErrorKind::CrcMismatch { .. } => FaultKind::Crc,
            _ => FaultKind::Malformed,
        };
        Fault {
            kind,
            offset: e.offset,
            command: e.command,
            what: e.kind.to_string(),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} at byte {} (command #{})",
            self.kind.words(),
            self.what,
            self.offset,
            self.command
        )
    }
}

/// One stream of a file: a night's backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Night {
    /// The file (`-` for standard input).
    pub file: PathBuf,
    /// Which stream of the file, from 1.
    pub stream: u32,
    /// Byte offset of its stream header in the file (decompressed bytes for
    /// a zstd file).
    pub offset: u64,
    /// Its length in bytes, header and END included; for a broken stream,
    /// up to the last whole command.
    pub len: u64,
    /// Protocol version (0 when its header could not be read).
    pub version: u32,
    /// Whether the file is zstd-compressed.
    pub compressed: bool,
    /// Its first command.
    pub first: Option<CommandKind>,
    /// What it sends; `None` when its first command is missing or is no
    /// SUBVOL or SNAPSHOT.
    pub identity: Option<Identity>,
    /// Commands read whole, END included.
    pub commands: u64,
    /// File data bytes it carries: WRITE data and ENCODED_WRITE's encoded
    /// bytes.
    pub data_bytes: u64,
    /// Whether it ended with END.
    pub ended: bool,
    /// Why reading it stopped, when it is broken.
    pub fault: Option<Fault>,
}

impl Night {
    /// A night whose header begins at `offset`, nothing read of it yet.
    fn new(file: &Path, stream: u32, offset: u64, compressed: bool) -> Night {
        Night {
            file: file.to_path_buf(),
            stream,
            offset,
            len: 0,
            version: 0,
            compressed,
            first: None,
            identity: None,
            commands: 0,
            data_bytes: 0,
            ended: false,
            fault: None,
        }
    }

    /// Whether it was read whole: to its END, without a fault.
    pub fn is_whole(&self) -> bool {
        self.ended && self.fault.is_none()
    }

    /// Its name (escaped) and where it is, for messages: `NAME (FILE)`, or
    /// `NAME (FILE stream N)` past a file's first stream.
    pub fn describe(&self) -> String {
        let name = match &self.identity {
            Some(i) => escape(&i.name),
            None => "(no subvolume)".to_owned(),
        };
        format!("{name} ({})", self.place())
    }

    /// The file (escaped), and which stream when not its first.
    fn place(&self) -> String {
        let file = escape(self.file.as_os_str().as_bytes());
        if self.stream == 1 {
            file
        } else {
            format!("{file} stream {}", self.stream)
        }
    }
}

/// What [`scan`] found in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileScan {
    /// Its streams, in order.
    pub nights: Vec<Night>,
    /// Set when the file is no send stream at all (it does not begin with
    /// a stream header): why. It then has no nights.
    pub not_stream: Option<String>,
}

/// Reads `input`, the file `file`, whole, and records its nights. Never
/// fails: a fault ends the night it is in ([`Night::fault`]), and input
/// that is no stream at all is told in [`FileScan::not_stream`].
pub fn scan(input: Input, file: &Path) -> FileScan {
    let compressed = input.is_compressed();
    match input {
        Input::Mapped(map) => scan_source(MappedSource::new(map), file, compressed),
        Input::Stream(r) | Input::Zstd(r) => scan_source(ReadSource::new(r), file, compressed),
    }
}

/// Like [`scan`], over any [`Source`] of a stream's bytes; `compressed`
/// says whether they were zstd-compressed in the file.
pub fn scan_source<S: Source>(src: S, file: &Path, compressed: bool) -> FileScan {
    let mut head = Vec::with_capacity(MAGIC.len());
    let mut nights: Vec<Night> = Vec::new();
    let mut cur: Option<Night> = None;
    // Where the next stream header begins.
    let mut next = 0u64;
    let mut reader = Reader::with_source(Sniff {
        src,
        head: &mut head,
    });
    let failed = loop {
        match reader.next_framed() {
            Ok(None) => break None,
            Ok(Some((cmd, pos))) => {
                let night = cur.get_or_insert_with(|| {
                    let mut n = Night::new(file, nights.len() as u32 + 1, next, compressed);
                    n.version = pos.version;
                    n
                });
                night.commands += 1;
                if night.first.is_none() {
                    night.first = Some(cmd.kind());
                    night.identity = Identity::of(&cmd);
                }
                let end = pos.offset.saturating_add(pos.len);
                night.len = end.saturating_sub(night.offset);
                match cmd {
                    Command::Write { data, .. } | Command::EncodedWrite { data, .. } => {
                        night.data_bytes = night.data_bytes.saturating_add(data.len() as u64)
                    }
                    Command::End {} => {
                        night.ended = true;
                        next = end;
                        nights.extend(cur.take());
                    }
                    _ => {}
                }
            }
            Err(e) => break Some((e, reader.streams(), reader.version())),
        }
    };
    drop(reader);
    let mut not_stream = None;
    if let Some((e, headers, version)) = failed {
        let fault = Fault::of(&e);
        let night = match cur.take() {
            Some(mut n) => {
                n.fault = Some(fault);
                n
            }
            None => {
                let mut n = Night::new(file, nights.len() as u32 + 1, next, compressed);
                if headers > nights.len() as u64 {
                    // Its header was read, and nothing after it.
                    n.version = version;
                    n.len = STREAM_HEADER_LEN as u64;
                }
                n.fault = Some(fault);
                n
            }
        };
        if headers == 0 && !head.is_empty() && !is_magic_prefix(&head) {
            not_stream = Some("no btrfs-stream header".to_owned());
        } else {
            nights.push(night);
        }
    }
    FileScan { nights, not_stream }
}

/// Whether `head` is how a stream (or a resumed one) begins, cut or not.
fn is_magic_prefix(head: &[u8]) -> bool {
    let n = head.len().min(MAGIC.len());
    head[..n] == MAGIC[..n] || head[..n] == RESUME_MAGIC[..n]
}

/// A source that keeps a copy of the input's first bytes (as many as the
/// stream magic), to tell a file that is no stream from a stream cut short.
struct Sniff<'a, S> {
    src: S,
    head: &'a mut Vec<u8>,
}

impl<S: Source> Source for Sniff<'_, S> {
    fn fill(&mut self, need: usize) -> io::Result<()> {
        self.src.fill(need)?;
        if self.head.len() < MAGIC.len() && self.src.offset() == 0 {
            let w = self.src.window();
            self.head.clear();
            self.head.extend_from_slice(&w[..w.len().min(MAGIC.len())]);
        }
        Ok(())
    }

    fn window(&self) -> &[u8] {
        self.src.window()
    }

    fn consume(&mut self, n: usize) {
        self.src.consume(n)
    }

    fn offset(&self) -> u64 {
        self.src.offset()
    }

    fn crc_checked(&mut self, len: usize) -> bool {
        self.src.crc_checked(len)
    }
}

/// How a night was found to follow another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The night that sent its parent (an index into the nights).
    pub parent: usize,
    /// Matched on the parent's uuid alone: its ctransid differs, so the
    /// parent changed between the two sends.
    pub uuid_only: bool,
}

/// Where a chain starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At a full stream: the chain is complete.
    Full,
    /// At an incremental stream whose parent is not among the nights.
    MissingParent(SubvolId),
    /// Nowhere: its nights follow each other in a loop.
    Loop,
}

/// Nights that follow each other, from where they start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Indices into the nights, in order: each night comes after the one it
    /// follows; among nights ready at the same point, lower ctransid first.
    /// A duplicate comes right after the night it duplicates.
    pub nights: Vec<usize>,
    /// Where it starts.
    pub start: Start,
}

impl Chain {
    /// Whether it starts with a full stream.
    pub fn is_complete(&self) -> bool {
        self.start == Start::Full
    }
}

/// Something wrong with the nights, found by [`group`]. Nights are indices
/// into the nights grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A stream that is cut short, fails its CRC, is malformed or could not
    /// be read ([`Night::fault`]).
    Broken {
        /// The night.
        night: usize,
    },
    /// A whole stream whose first command is no SUBVOL or SNAPSHOT.
    NoIdentity {
        /// The night.
        night: usize,
    },
    /// An incremental stream whose parent is not among the nights: its
    /// chain starts there.
    MissingLink {
        /// The night.
        night: usize,
        /// Its parent.
        parent: SubvolId,
    },
    /// A night linked to its parent on the uuid alone.
    UuidOnly {
        /// The night.
        night: usize,
        /// The night taken as its parent.
        parent: usize,
    },
    /// Nights that follow each other in a loop.
    Loop {
        /// The nights, in chain order.
        nights: Vec<usize>,
    },
    /// Nights that send the same subvolume, uuid and ctransid.
    Duplicate {
        /// The subvolume.
        id: SubvolId,
        /// The nights, in input order; the first whole one stands in the
        /// chain for all.
        nights: Vec<usize>,
    },
    /// Nights with the same parent.
    Branch {
        /// The parent night.
        parent: usize,
        /// The nights following it.
        nights: Vec<usize>,
    },
}

impl Problem {
    /// Whether it makes the pile unusable as it is (an error), rather than
    /// worth knowing (a warning: duplicates and branches).
    pub fn is_error(&self) -> bool {
        !matches!(self, Problem::Duplicate { .. } | Problem::Branch { .. })
    }

    /// Its name in JSON.
    pub fn key(&self) -> &'static str {
        match self {
            Problem::Broken { .. } => "broken",
            Problem::NoIdentity { .. } => "no_identity",
            Problem::MissingLink { .. } => "missing_link",
            Problem::UuidOnly { .. } => "uuid_only",
            Problem::Loop { .. } => "loop",
            Problem::Duplicate { .. } => "duplicate",
            Problem::Branch { .. } => "branch",
        }
    }

    /// The nights it is about.
    pub fn nights(&self) -> Vec<usize> {
        match self {
            Problem::Broken { night }
            | Problem::NoIdentity { night }
            | Problem::MissingLink { night, .. } => vec![*night],
            Problem::UuidOnly { night, parent } => vec![*parent, *night],
            Problem::Loop { nights } | Problem::Duplicate { nights, .. } => nights.clone(),
            Problem::Branch { parent, nights } => {
                let mut v = vec![*parent];
                v.extend(nights);
                v
            }
        }
    }

    /// It in words, naming the nights of `nights`.
    pub fn describe(&self, nights: &[Night]) -> String {
        let list = |ix: &[usize]| {
            ix.iter()
                .map(|&i| nights[i].describe())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Problem::Broken { night } => {
                let n = &nights[*night];
                match &n.fault {
                    Some(f) => format!("broken stream: {}: {f}", n.describe()),
                    None => format!("broken stream: {}", n.describe()),
                }
            }
            Problem::NoIdentity { night } => {
                let n = &nights[*night];
                let first = n.first.map_or("nothing", |k| k.dump_name());
                format!(
                    "no subvolume: {}: the first command is {first}, not subvol or snapshot",
                    n.describe()
                )
            }
            Problem::MissingLink { night, parent } => format!(
                "missing link: parent {} ctransid {} not among the files (needed by {})",
                parent.uuid,
                parent.ctransid,
                nights[*night].describe()
            ),
            Problem::UuidOnly { night, parent } => {
                let want = nights[*night]
                    .identity
                    .as_ref()
                    .and_then(|i| i.parent)
                    .map_or(0, |p| p.ctransid);
                let got = nights[*parent]
                    .identity
                    .as_ref()
                    .map_or(0, |i| i.id.ctransid);
                format!(
                    "linked on uuid alone: {} wants its parent at ctransid {want}, {} sent it at ctransid {got}",
                    nights[*night].describe(),
                    nights[*parent].describe()
                )
            }
            Problem::Loop { nights: ix } => {
                format!("loop: these follow each other in a circle: {}", list(ix))
            }
            Problem::Duplicate { id, nights: ix } => {
                format!("duplicate: {id} sent by {}", list(ix))
            }
            Problem::Branch { parent, nights: ix } => format!(
                "branch: {} all follow {}",
                list(ix),
                nights[*parent].describe()
            ),
        }
    }
}

/// The nights grouped into chains, by [`group`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grouping {
    /// The chains: those starting at a night, in the input order of that
    /// night, then loops.
    pub chains: Vec<Chain>,
    /// For each night, the chain holding it; `None` for a night without
    /// identity.
    pub chain_of: Vec<Option<usize>>,
    /// For each night, the night it follows.
    pub links: Vec<Option<Link>>,
    /// For each night, the night it duplicates (which stands for it).
    pub duplicate_of: Vec<Option<usize>>,
    /// What is wrong: broken streams and nights without identity first (in
    /// input order), then missing links, links on uuid alone, loops,
    /// duplicates and branches.
    pub problems: Vec<Problem>,
}

/// Links the nights to their parents and orders them into chains.
pub fn group(nights: &[Night]) -> Grouping {
    let n = nights.len();
    let id = |i: usize| nights[i].identity.as_ref();
    let mut g = Grouping {
        chains: Vec::new(),
        chain_of: vec![None; n],
        links: vec![None; n],
        duplicate_of: vec![None; n],
        problems: Vec::new(),
    };
    for (i, night) in nights.iter().enumerate() {
        if night.fault.is_some() {
            g.problems.push(Problem::Broken { night: i });
        } else if night.identity.is_none() {
            g.problems.push(Problem::NoIdentity { night: i });
        }
    }

    // Nights by what they send; the first whole one of each stands for all.
    let mut by_id: HashMap<SubvolId, Vec<usize>> = HashMap::new();
    let mut ids = Vec::new();
    for i in 0..n {
        if let Some(ident) = id(i) {
            let v = by_id.entry(ident.id).or_default();
            if v.is_empty() {
                ids.push(ident.id);
            }
            v.push(i);
        }
    }
    let mut canon: HashMap<SubvolId, usize> = HashMap::new();
    let mut dups: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut duplicates = Vec::new();
    for key in &ids {
        let v = &by_id[key];
        let first = v
            .iter()
            .copied()
            .find(|&i| nights[i].is_whole())
            .unwrap_or(v[0]);
        canon.insert(*key, first);
        for &i in v.iter().filter(|&&i| i != first) {
            g.duplicate_of[i] = Some(first);
            dups[first].push(i);
        }
        if v.len() > 1 {
            duplicates.push(Problem::Duplicate {
                id: *key,
                nights: v.clone(),
            });
        }
    }
    let mut by_uuid: HashMap<Uuid, Vec<usize>> = HashMap::new();
    for key in &ids {
        by_uuid.entry(key.uuid).or_default().push(canon[key]);
    }

    // Each standing night's parent.
    let standing: Vec<usize> = ids.iter().map(|k| canon[k]).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut missing = Vec::new();
    let mut uuid_only = Vec::new();
    for &i in &standing {
        let Some(p) = id(i).and_then(|x| x.parent) else {
            continue;
        };
        let link = match canon.get(&p) {
            Some(&c) if c != i => Some(Link {
                parent: c,
                uuid_only: false,
            }),
            _ => nearest(nights, by_uuid.get(&p.uuid), i, p.ctransid).map(|c| Link {
                parent: c,
                uuid_only: true,
            }),
        };
        match link {
            Some(l) => {
                g.links[i] = Some(l);
                children[l.parent].push(i);
                if l.uuid_only {
                    uuid_only.push(Problem::UuidOnly {
                        night: i,
                        parent: l.parent,
                    });
                }
            }
            None => missing.push(Problem::MissingLink {
                night: i,
                parent: p,
            }),
        }
    }

    // Chains from each night that follows none, in input order.
    let mut roots: Vec<usize> = standing
        .iter()
        .copied()
        .filter(|&i| g.links[i].is_none())
        .collect();
    roots.sort_unstable();
    let ctransid = |i: usize| id(i).map_or(0, |x| x.id.ctransid);
    let mut seen = vec![false; n];
    let mut walk = |root: usize, start: Start, g: &mut Grouping| {
        let c = g.chains.len();
        let mut order = Vec::new();
        let mut ready = BinaryHeap::new();
        ready.push(Reverse((ctransid(root), root)));
        while let Some(Reverse((_, i))) = ready.pop() {
            if seen[i] {
                continue;
            }
            seen[i] = true;
            order.push(i);
            order.extend(&dups[i]);
            for &k in &children[i] {
                if !seen[k] {
                    ready.push(Reverse((ctransid(k), k)));
                }
            }
        }
        for &i in &order {
            g.chain_of[i] = Some(c);
        }
        g.chains.push(Chain {
            nights: order,
            start,
        });
    };
    for &r in &roots {
        let start = match id(r).and_then(|x| x.parent) {
            None => Start::Full,
            Some(p) => Start::MissingParent(p),
        };
        walk(r, start, &mut g);
    }
    // What is left follows itself round: start each loop at its lowest
    // ctransid.
    let mut loops = Vec::new();
    let mut rest: Vec<usize> = standing.clone();
    rest.sort_unstable();
    for i in rest {
        if g.chain_of[i].is_some() {
            continue;
        }
        // Walk up to a night met twice: it is on the loop.
        let mut on = vec![false; n];
        let mut at = i;
        while !on[at] {
            on[at] = true;
            match g.links[at] {
                Some(l) => at = l.parent,
                None => break,
            }
        }
        let mut cycle = vec![at];
        let mut k = g.links[at].map(|l| l.parent);
        while let Some(x) = k.filter(|&x| x != at) {
            cycle.push(x);
            k = g.links[x].map(|l| l.parent);
        }
        let start = cycle
            .iter()
            .copied()
            .min_by_key(|&x| (ctransid(x), x))
            .unwrap_or(at);
        walk(start, Start::Loop, &mut g);
        let c = g.chains.len() - 1;
        loops.push(Problem::Loop {
            nights: g.chains[c]
                .nights
                .iter()
                .copied()
                .filter(|x| cycle.contains(x))
                .collect(),
        });
    }

    let mut branches = Vec::new();
    for (p, kids) in children.iter().enumerate() {
        if kids.len() > 1 {
            let mut kids = kids.clone();
            kids.sort_unstable_by_key(|&k| (ctransid(k), k));
            branches.push(Problem::Branch {
                parent: p,
                nights: kids,
            });
        }
    }
    missing.sort_by_key(|p| p.nights());
    g.problems.extend(missing);
    g.problems.extend(uuid_only);
    g.problems.extend(loops);
    g.problems.extend(duplicates);
    g.problems.extend(branches);
    g
}

/// `n` and `what`, plural unless `n` is 1.
fn counted(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Of the `candidates` sending the uuid `night` wants as parent, the one
/// nearest to the ctransid `want`: the latest at or before it, else the
/// earliest after it.
fn nearest(
    nights: &[Night],
    candidates: Option<&Vec<usize>>,
    night: usize,
    want: u64,
) -> Option<usize> {
    let ctransid = |i: usize| nights[i].identity.as_ref().map_or(0, |x| x.id.ctransid);
    let c: Vec<usize> = candidates?
        .iter()
        .copied()
        .filter(|&i| i != night)
        .collect();
    c.iter()
        .copied()
        .filter(|&i| ctransid(i) <= want)
        .max_by_key(|&i| (ctransid(i), Reverse(i)))
        .or_else(|| c.iter().copied().min_by_key(|&i| (ctransid(i), i)))
}

/// A file left out of the nights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub file: PathBuf,
    /// Why: it cannot be read, or is no stream.
    pub why: String,
    /// Whether that is an error (a file named itself that is no stream, or
    /// a file that cannot be read), not only a note (a file in a named
    /// directory that is no stream).
    pub error: bool,
}

/// Everything `rdump --chains` tells: the nights, the files left out, and
/// the chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every night of every file read, in input order.
    pub nights: Vec<Night>,
    /// Files left out.
    pub skipped: Vec<Skipped>,
    /// The nights in chains, and the problems.
    pub grouping: Grouping,
}

impl Report {
    /// Groups `nights` ([`group`]).
    pub fn new(nights: Vec<Night>, skipped: Vec<Skipped>) -> Report {
        let grouping = group(&nights);
        Report {
            nights,
            skipped,
            grouping,
        }
    }

    /// Whether every file is a whole stream and every chain complete: no
    /// error among the problems or the files left out.
    pub fn is_ok(&self) -> bool {
        self.errors() == 0
    }

    /// How many errors: problems that are errors and files left out in error.
    pub fn errors(&self) -> usize {
        self.grouping
            .problems
            .iter()
            .filter(|p| p.is_error())
            .count()
            + self.skipped.iter().filter(|s| s.error).count()
    }

    /// How many warnings: problems that are not errors.
    pub fn warnings(&self) -> usize {
        self.grouping.problems.len()
            - self
                .grouping
                .problems
                .iter()
                .filter(|p| p.is_error())
                .count()
    }

    /// The text form: per chain a header line and one line per night (tab
    /// before each field), the nights in no chain, the files left out, the
    /// problems, and a closing count.
    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        let g = &self.grouping;
        for (c, chain) in g.chains.iter().enumerate() {
            let k = counted(chain.nights.len(), "night");
            let how = match chain.start {
                Start::Full => "starts with a full stream".to_owned(),
                Start::MissingParent(p) => format!(
                    "incomplete: missing link: parent {} ctransid {} not among the files",
                    p.uuid, p.ctransid
                ),
                Start::Loop => "incomplete: its nights follow each other in a loop".to_owned(),
            };
            writeln!(out, "chain {}: {k}, {how}", c + 1)?;
            for &i in &chain.nights {
                self.write_night(out, i)?;
            }
        }
        let loose: Vec<usize> = (0..self.nights.len())
            .filter(|&i| g.chain_of[i].is_none())
            .collect();
        if !loose.is_empty() {
            writeln!(out, "not in any chain:")?;
            for i in loose {
                self.write_night(out, i)?;
            }
        }
        for s in &self.skipped {
            let file = escape(s.file.as_os_str().as_bytes());
            let what = if s.error { "error" } else { "skipped" };
            writeln!(out, "{what}: {file}: {}", s.why)?;
        }
        if !g.problems.is_empty() {
            writeln!(out, "problems:")?;
            for p in &g.problems {
                let what = if p.is_error() { "error" } else { "warning" };
                writeln!(out, "\t{what}: {}", p.describe(&self.nights))?;
            }
        }
        let files = {
            let mut f: Vec<&Path> = self.nights.iter().map(|n| n.file.as_path()).collect();
            f.dedup();
            f.len()
        };
        writeln!(
            out,
            "{} in {}, {}, {}, {}",
            counted(self.nights.len(), "night"),
            counted(files, "file"),
            counted(g.chains.len(), "chain"),
            counted(self.errors(), "error"),
            counted(self.warnings(), "warning"),
        )
    }

    /// One night's line: file, stream@offset, name, uuid, ctransid, parent
    /// uuid, parent ctransid, version (`+zstd` when compressed), bytes,
    /// commands, data bytes, status.
    fn write_night(&self, out: &mut impl Write, i: usize) -> io::Result<()> {
        let n = &self.nights[i];
        let file = escape(n.file.as_os_str().as_bytes());
        let (name, uuid, ctransid, puuid, pctransid) = match &n.identity {
            Some(x) => (
                escape(&x.name),
                x.id.uuid.to_string(),
                x.id.ctransid.to_string(),
                x.parent.map_or("-".to_owned(), |p| p.uuid.to_string()),
                x.parent.map_or("-".to_owned(), |p| p.ctransid.to_string()),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        let zstd = if n.compressed { "+zstd" } else { "" };
        writeln!(
            out,
            "\t{file}\t{}@{}\t{name}\t{uuid}\t{ctransid}\t{puuid}\t{pctransid}\tv{}{zstd}\t{}\t{}\t{}\t{}",
            n.stream,
            n.offset,
            n.version,
            n.len,
            n.commands,
            n.data_bytes,
            self.status(i)
        )
    }

    /// A night's status in words: `ok`, or its fault, then notes on its link
    /// and duplicates.
    fn status(&self, i: usize) -> String {
        let n = &self.nights[i];
        let g = &self.grouping;
        let mut s = match (&n.fault, &n.identity) {
            (Some(f), _) => f.to_string(),
            (None, None) => format!(
                "no subvolume: the first command is {}",
                n.first.map_or("nothing", |k| k.dump_name())
            ),
            (None, Some(_)) => "ok".to_owned(),
        };
        if let Some(l) = g.links[i].filter(|l| l.uuid_only) {
            let got = self.nights[l.parent]
                .identity
                .as_ref()
                .map_or(0, |x| x.id.ctransid);
            s.push_str(&format!(
                "; parent matched on uuid alone (sent at ctransid {got})"
            ));
        }
        if let Some(d) = g.duplicate_of[i] {
            s.push_str(&format!("; duplicate of {}", self.nights[d].place()));
        }
        s
    }

    /// The JSON form: one object with `nights`, `chains`, `problems`,
    /// `skipped`, `errors`, `warnings` and `ok`. Nights are referred to by
    /// their index in `nights`.
    pub fn to_json(&self) -> Value {
        let g = &self.grouping;
        let nights: Vec<Value> = self
            .nights
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut m = Map::new();
                m.insert("file".into(), bytes_value(n.file.as_os_str().as_bytes()));
                m.insert("stream".into(), n.stream.into());
                m.insert("offset".into(), n.offset.into());
                m.insert("length".into(), n.len.into());
                m.insert("version".into(), n.version.into());
                m.insert("compressed".into(), n.compressed.into());
                m.insert(
                    "first_command".into(),
                    n.first.map_or(Value::Null, |k| k.dump_name().into()),
                );
                let x = n.identity.as_ref();
                m.insert(
                    "kind".into(),
                    x.map_or(Value::Null, |x| {
                        if x.is_full() { "full" } else { "incremental" }.into()
                    }),
                );
                m.insert(
                    "name".into(),
                    x.map_or(Value::Null, |x| bytes_value(&x.name)),
                );
                m.insert(
                    "uuid".into(),
                    x.map_or(Value::Null, |x| x.id.uuid.to_string().into()),
                );
                m.insert(
                    "ctransid".into(),
                    x.map_or(Value::Null, |x| x.id.ctransid.into()),
                );
                let p = x.and_then(|x| x.parent);
                m.insert(
                    "parent_uuid".into(),
                    p.map_or(Value::Null, |p| p.uuid.to_string().into()),
                );
                m.insert(
                    "parent_ctransid".into(),
                    p.map_or(Value::Null, |p| p.ctransid.into()),
                );
                m.insert("commands".into(), n.commands.into());
                m.insert("data_bytes".into(), n.data_bytes.into());
                m.insert("ended".into(), n.ended.into());
                m.insert(
                    "error".into(),
                    n.fault.as_ref().map_or(Value::Null, |f| {
                        json!({
                            "kind": f.kind.key(),
                            "offset": f.offset,
                            "command": f.command,
                            "message": f.to_string(),
                        })
                    }),
                );
                m.insert("chain".into(), g.chain_of[i].into());
                m.insert("follows".into(), g.links[i].map(|l| l.parent).into());
                m.insert(
                    "uuid_only".into(),
                    g.links[i].is_some_and(|l| l.uuid_only).into(),
                );
                m.insert("duplicate_of".into(), g.duplicate_of[i].into());
                Value::Object(m)
            })
            .collect();
        let chains: Vec<Value> = g
            .chains
            .iter()
            .map(|c| {
                let (start, missing) = match c.start {
                    Start::Full => ("full", Value::Null),
                    Start::MissingParent(p) => (
                        "missing_parent",
                        json!({ "uuid": p.uuid.to_string(), "ctransid": p.ctransid }),
                    ),
                    Start::Loop => ("loop", Value::Null),
                };
                json!({
                    "nights": c.nights,
                    "start": start,
                    "missing_parent": missing,
                    "complete": c.is_complete(),
                })
            })
            .collect();
        let problems: Vec<Value> = g
            .problems
            .iter()
            .map(|p| {
                let mut v = json!({
                    "kind": p.key(),
                    "error": p.is_error(),
                    "nights": p.nights(),
                    "message": p.describe(&self.nights),
                });
                match p {
                    Problem::MissingLink { parent, .. } => {
                        v["parent_uuid"] = parent.uuid.to_string().into();
                        v["parent_ctransid"] = parent.ctransid.into();
                    }
                    Problem::Duplicate { id, .. } => {
                        v["uuid"] = id.uuid.to_string().into();
                        v["ctransid"] = id.ctransid.into();
                    }
                    _ => {}
                }
                v
            })
            .collect();
        let skipped: Vec<Value> = self
            .skipped
            .iter()
            .map(|s| {
                json!({
                    "file": bytes_value(s.file.as_os_str().as_bytes()),
                    "why": s.why,
                    "error": s.error,
                })
            })
            .collect();
        json!({
            "nights": nights,
            "chains": chains,
            "problems": problems,
            "skipped": skipped,
            "errors": self.errors(),
            "warnings": self.warnings(),
            "ok": self.is_ok(),
        })
    }
}
