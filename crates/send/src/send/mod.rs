//! Send streams of read-only snapshots, made from the on-disk trees.
//!
//! [`send_subvolume`] writes a full stream (header, SUBVOL, every inode,
//! pending directory times, END) of a read-only subvolume, as `btrfs send`
//! does; [`send_incremental`] writes the difference from a parent snapshot
//! (header, SNAPSHOT, what changed, END), as `btrfs send -p`. One walk
//! (`inode`) serves both: a full send is an incremental one where every
//! item is new. The command order follows send.c, so streams of snapshots
//! without shared extents are the kernel's byte for byte. Rules:
//! `shared/reference/send-stream.md` §2, §3.
//!
//! Two threads: the walk reads the fs trees in key order (comparing them
//! for an incremental send, [`btrfs_disk::diff`]), reads, verifies and
//! decompresses file data and decides every command;
//! the caller's thread encodes them (CRC included) and writes. A bounded
//! channel between them keeps memory bounded; the order is the walk's, so
//! the same snapshot always gives the same bytes.
//!
//! When anything fails no END is written: what was sent before the failure
//! is flushed and the error names the subvolume, inode, path and what the
//! reader found wrong (with its logical address and tree), so a receiver
//! never sees a broken stream as complete.

mod ahead;
mod clone;
mod cmd;
mod current;
mod error;
mod extent;
mod flavor;
mod inode;
mod mode;
mod moves;
mod names;
mod omit;
mod refs;
mod salvage;
mod sink;
mod stop;
mod utimes;
mod verity;
mod xattr;

use std::io::Write;
use std::sync::{mpsc, Arc};

use btrfs_stream::{WriteError, Writer};

pub use crate::lineage::related;
pub use clone::CloneStats;
pub use error::{list_or_none, Change, SendError};
pub use flavor::{DEFAULT_HIGHEST_PROTO, MAX_PROTO, V1_WRITE_SIZE, V2_WRITE_SIZE};
pub use sink::StreamStats;

pub use crate::bookmark::Parent;
use crate::progress::{NoProgress, Progress};
use crate::snapshot_error::{Fault, SnapshotError};
use btrfs_disk::error::Error;
use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::{SubvolSelector, Subvolume};
use clone::{stream_uuid, Clones};
use cmd::{Bytes, Cmd};
use flavor::Flavor;
use inode::Walk;
use sink::{Emitter, Msg, Sink};
use stop::Stop;

/// The root blocks of the trees a send reads, kept in memory while it
/// runs (see [`Filesystem::pin_root`]) and let go when it ends.
struct Pins<'fs> {
    fs: &'fs Filesystem,
    trees: Vec<btrfs_disk::Tree<'fs>>,
}

impl Pins<'_> {
    /// Pins the roots of `subvols`; false when one was written over (it
    /// moved). A root that cannot be read otherwise is left to the walk,
    /// which reports it with context.
    fn pin<'a>(&mut self, subvols: impl IntoIterator<Item = &'a Subvolume>) -> bool {
        let mut moved = false;
        for s in subvols {
            let t = self.fs.fs_tree(s);
            match self.fs.pin_root(&t) {
                Ok(true) => self.trees.push(t),
                Ok(false) => {}
                Err(e) => moved |= e.is_overwritten(),
            }
        }
        !moved
    }

    /// Lets every pinned root go.
    fn release(&mut self) {
        for t in self.trees.drain(..) {
            self.fs.unpin(&t);
        }
    }
}

impl Drop for Pins<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// `sv` as the newest commit read has it, when only its root's place
/// changed; else `sv` as it is (a real change is found before END).
fn current(fs: &Filesystem, sv: &Subvolume) -> Subvolume {
    match fs.subvolume_item(sv.id) {
        Ok(Some(now))
            if now.uuid == sv.uuid
                && now.ctransid == sv.ctransid
                && now.flags == sv.flags
                && !now.is_dead() =>
        {
            Subvolume {
                root: now.root,
                ..sv.clone()
            }
        }
        _ => sv.clone(),
    }
}

/// How `sv` differs now, on disk, from when the send started, if it
/// does. `moved` also reports a tree that moved to other blocks with the
/// same contents (which only matters when reading it failed).
fn changed(fs: &Filesystem, sv: &Subvolume, moved: bool) -> Result<Option<Change>, Error> {
    // Deleting a subvolume unlinks it and sets its refs to 0 in one
    // commit; its ROOT_ITEM goes once the kernel has freed its tree.
    let Some(now) = fs.subvolume_item(sv.id)? else {
        return Ok(Some(Change::Deleted));
    };
    Ok(if now.uuid != sv.uuid {
        Some(Change::Deleted)
    } else if now.is_dead() {
        Some(Change::BeingDeleted)
    } else if !now.is_readonly() {
        Some(Change::Writable)
    } else if now.ctransid != sv.ctransid {
        Some(Change::Modified)
    } else if moved && now.root != sv.root {
        Some(Change::Moved)
    } else {
        None
    })
}

/// Checks, as of the newest commit, that the subvolumes read (`reads`:
/// role and subvolume) are as they were when the send began.
fn check_intact(fs: &Filesystem, reads: &[(&'static str, &Subvolume)]) -> Result<(), SendError> {
    fs.refresh()?;
    for (role, sv) in reads {
        if let Some(change) = changed(fs, sv, false)? {
            return Err(SendError::Changed {
                role,
                name: sv.path_lossy(),
                id: sv.id,
                change,
                cause: None,
            });
        }
    }
    Ok(())
}

/// For a rescue: an incremental send whose parent's tree lost blocks does
/// not end, because what the receiver has is not known to be what the
/// parent's lost items were: the stream gets no END.
fn rescued_parent_whole(fs: &Filesystem, parent: Option<&Subvolume>) -> Result<(), Stop> {
    let (Some(losses), Some(p)) = (fs.rescue(), parent) else {
        return Ok(());
    };
    match losses.blocks().iter().find(|b| b.tree == p.id) {
        None => Ok(()),
        Some(b) => Err(Stop::Bad(format!(
            "the parent {} lost the tree block at logical {} ({}): an incremental stream against it cannot be trusted; send in full, without -p",
            p.path_lossy(),
            b.logical,
            b.why
        ))),
    }
}

/// The error for `fault` in subvolume `subvol`, at the walk's position
/// `pos` (inode and path) if it had one.
fn placed(subvol: String, pos: Option<(u64, String)>, fault: Fault) -> SendError {
    let (ino, path) = pos.unzip();
    SendError::Snapshot(SnapshotError::new(subvol, ino, path, fault))
}

/// The error to report for `failed`, a failed read of `reads`: the change
/// of one of them that caused it, when one changed, else `failed` itself.
fn explain(fs: &Filesystem, reads: &[(&'static str, &Subvolume)], failed: SendError) -> SendError {
    if fs.refresh().is_err() {
        return failed;
    }
    for (role, sv) in reads {
        if let Ok(Some(change)) = changed(fs, sv, true) {
            return SendError::Changed {
                role,
                name: sv.path_lossy(),
                id: sv.id,
                change,
                cause: Some(Box::new(failed)),
            };
        }
    }
    failed
}

/// How to send; the default is what `btrfs send` does by default
/// (protocol 1, file data, clone search).
#[derive(Clone)]
pub struct SendOptions {
    /// Protocol version; 0 means [`DEFAULT_HIGHEST_PROTO`].
    pub proto: u32,
    /// Send compressed extents as stored (ENCODED_WRITE); needs v2 or later.
    pub compressed: bool,
    /// Send UPDATE_EXTENT (offset and length) instead of file data, as
    /// `btrfs send --no-data`; the stream only tells what changed.
    pub no_data: bool,
    /// Where to report progress (bytes and files sent).
    pub progress: Arc<dyn Progress>,
    /// Write every extent instead of cloning shared ones (as a stream
    /// without clone search looks; for comparisons).
    pub no_clones: bool,
    /// Write nothing and read no file data; [`StreamStats::bytes`] is the
    /// exact length the stream would have (`rsend -n`).
    pub dry_run: bool,
    /// Continue a stream that a receive applied up to this point (see
    /// [`btrfs_stream::resume`]): RESUME, the first command, then the
    /// commands after the point, whose data alone is read.
    pub resume: Option<btrfs_stream::resume::Point>,
    /// Write no stream header: the stream goes on after one written
    /// before with the same protocol version (`btrfs send -e`, every
    /// subvolume but the first).
    pub omit_header: bool,
    /// Write no END: another subvolume's commands follow in the same
    /// stream (`btrfs send -e`, every subvolume but the last).
    pub omit_end: bool,
}

impl Default for SendOptions {
    fn default() -> SendOptions {
        SendOptions {
            proto: 1,
            compressed: false,
            no_data: false,
            progress: Arc::new(NoProgress),
            no_clones: false,
            dry_run: false,
            resume: None,
            omit_header: false,
            omit_end: false,
        }
    }
}

/// The protocol and flags `opts` ask for, checked.
pub(crate) fn flavor(opts: &SendOptions) -> Result<Flavor, SendError> {
    let proto = match opts.proto {
        0 => DEFAULT_HIGHEST_PROTO,
        v @ 1..=MAX_PROTO => v,
        v => return Err(SendError::Proto(v)),
    };
    if opts.compressed && proto < 2 {
        return Err(SendError::CompressedNeedsV2(proto));
    }
    Ok(Flavor {
        proto,
        compressed: opts.compressed,
        no_data: opts.no_data,
    })
}

/// Checks the protocol and flags `opts` ask for (before anything is read).
pub fn check_flavor(opts: &SendOptions) -> Result<(), SendError> {
    flavor(opts).map(drop)
}

/// Finds the subvolume `sel` and checks that it can be sent (read-only,
/// named, alive). A subvolume that does not exist gets an error listing
/// the ones that do.
pub fn find_sendable(fs: &Filesystem, sel: &SubvolSelector) -> Result<Subvolume, SendError> {
    let sv = find_subvolume(fs, sel)?;
    check_sendable(&sv)?;
    Ok(sv)
}

/// Finds the subvolume `sel`, whatever it is; one that does not exist gets
/// an error listing the ones that do.
pub fn find_subvolume(fs: &Filesystem, sel: &SubvolSelector) -> Result<Subvolume, SendError> {
    match fs.find_subvolume(sel) {
        Ok(sv) => Ok(sv),
        Err(Error::NoSubvolume(asked)) => {
            let available = fs
                .subvolumes()?
                .iter()
                .map(|s| {
                    let ro = if s.is_readonly() { ", read-only" } else { "" };
                    format!("{} (id {}{ro})", s.path_lossy(), s.id)
                })
                .collect();
            Err(SendError::NoSubvolume { asked, available })
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether `sv` can be sent: read-only, alive, with a name.
pub fn check_sendable(sv: &Subvolume) -> Result<(), SendError> {
    if sv.id == btrfs_disk::items::objectid::FS_TREE {
        return Err(SendError::TopLevel);
    }
    let name = sv.path_lossy();
    if sv.is_dead() {
        return Err(SendError::Dead { name, id: sv.id });
    }
    if !sv.is_readonly() {
        return Err(SendError::NotReadOnly { name, id: sv.id });
    }
    if sv.link.is_none() {
        return Err(SendError::Unnamed { id: sv.id });
    }
    Ok(())
}

/// Writes a full stream of `sv` to `out` (header to END); shared extents
/// are cloned from what was sent before.
pub fn send_subvolume<W: Write>(
    fs: &Filesystem,
    sv: &Subvolume,
    out: &mut Writer<W>,
    opts: &SendOptions,
) -> Result<StreamStats, SendError> {
    send_with(fs, sv, None, &[], out, opts)
}

/// Writes an incremental stream of `sv` against `parent` to `out`: SNAPSHOT
/// of the parent, then what changed, then END (`btrfs send -p`).
pub fn send_incremental<W: Write>(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: &Subvolume,
    out: &mut Writer<W>,
    opts: &SendOptions,
) -> Result<StreamStats, SendError> {
    send_with(fs, sv, Some(parent), &[], out, opts)
}

/// The uuid a stream gives `sv` (its received uuid when set, else its
/// own): what a receiver knows it by.
pub fn stream_uuid_of(sv: &Subvolume) -> uuid::Uuid {
    uuid::Uuid::from_bytes(*stream_uuid(sv).as_bytes())
}

/// Whether `parent` can be the parent of an incremental send.
pub fn check_parent(parent: &Subvolume) -> Result<(), SendError> {
    if parent.is_dead() {
        return Err(SendError::Dead {
            name: parent.path_lossy(),
            id: parent.id,
        });
    }
    if !parent.is_readonly() {
        return Err(SendError::ParentNotReadOnly {
            name: parent.path_lossy(),
            id: parent.id,
        });
    }
    Ok(())
}

/// Whether `src` can be a clone source: alive and read-only.
pub fn check_clone_source(src: &Subvolume) -> Result<(), SendError> {
    if src.is_dead() {
        return Err(SendError::Dead {
            name: src.path_lossy(),
            id: src.id,
        });
    }
    if !src.is_readonly() {
        return Err(SendError::CloneSourceNotReadOnly {
            name: src.path_lossy(),
            id: src.id,
        });
    }
    Ok(())
}

/// A full (`parent` None) or incremental stream of `sv`. Shared extents
/// are cloned from what the receiver has: what was sent before, the parent
/// and the clone sources `sources` (`btrfs send -c`), which must be
/// read-only and received before this stream.
pub fn send_with<W: Write>(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<&Subvolume>,
    sources: &[Subvolume],
    out: &mut Writer<W>,
    opts: &SendOptions,
) -> Result<StreamStats, SendError> {
    send_against(fs, sv, parent.map(Parent::Snapshot), sources, out, opts)
}

/// [`send_with`] against a [`Parent`], which may be a bookmark.
pub fn send_against<W: Write>(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<Parent<'_>>,
    sources: &[Subvolume],
    out: &mut Writer<W>,
    opts: &SendOptions,
) -> Result<StreamStats, SendError> {
    let flavor = flavor(opts)?;
    // A bookmark's snapshot is a clone root as the parent, never read from the disk.
    let sources: Vec<Subvolume> = match parent {
        Some(Parent::Bookmark(b)) => sources
            .iter()
            .filter(|c| c.uuid != b.subvolume().uuid)
            .cloned()
            .collect(),
        _ => sources.to_vec(),
    };
    // Their root blocks stay in memory while the send runs.
    let (_pins, (sv_now, parent_now, sources_now)) =
        pin_current(fs, sv, parent.and_then(|p| p.on_disk()), &sources);
    let parent = match parent {
        Some(Parent::Snapshot(_)) => parent_now.as_ref().map(Parent::Snapshot),
        other => other,
    };
    let (sv, sources) = (&sv_now, &sources_now[..]);
    let name = checked_name(sv, parent.map(|p| p.subvolume()), sources)?;
    let subvol = sv.label();
    let before = out.bytes_written();
    start_stream(out, opts, flavor.proto, &subvol)?;
    let first = match parent {
        None => Cmd::Subvol {
            path: name,
            uuid: stream_uuid(sv),
            ctransid: sv.ctransid,
        },
        Some(p) => Cmd::Snapshot {
            path: name,
            uuid: stream_uuid(sv),
            ctransid: sv.ctransid,
            clone_uuid: stream_uuid(p.subvolume()),
            clone_ctransid: p.subvolume().ctransid,
        },
    };
    let on_disk = parent.and_then(|p| p.on_disk());
    let mut reads = vec![("", sv)];
    reads.extend(on_disk.map(|p| ("parent ", p)));
    reads.extend(
        sources
            .iter()
            .filter(|c| c.id != sv.id && on_disk.is_none_or(|p| p.id != c.id))
            .map(|c| ("clone source ", c)),
    );
    let job = Job {
        fs,
        sv,
        parent,
        sources,
        reads: &reads,
        subvol,
        flavor,
        opts,
    };
    let mut stats = job.run(out, first)?;
    if !opts.dry_run {
        stats.bytes = out.bytes_written() - before;
    }
    Ok(stats)
}

/// A send's subvolume, parent and clone sources, as pinned.
type Pinned = (Subvolume, Option<Subvolume>, Vec<Subvolume>);

/// The subvolumes of a send (`sv`, its parent and clone sources) as of
/// now, their root blocks pinned in memory while the pins live. On a
/// mounted filesystem a root may have moved since the caller looked it up
/// (a snapshot of a snapshot copies its root block, and the old one is
/// reused): then all are looked up again as of the newest commit.
fn pin_current<'fs>(
    fs: &'fs Filesystem,
    sv: &Subvolume,
    parent: Option<&Subvolume>,
    sources: &[Subvolume],
) -> (Pins<'fs>, Pinned) {
    let mut pins = Pins {
        fs,
        trees: Vec::new(),
    };
    let (mut sv_now, mut parent_now, mut sources_now) =
        (sv.clone(), parent.cloned(), sources.to_vec());
    if !pins.pin(
        std::iter::once(&sv_now)
            .chain(&parent_now)
            .chain(&sources_now),
    ) {
        pins.release();
        let _ = fs.refresh();
        sv_now = current(fs, &sv_now);
        parent_now = parent_now.map(|p| current(fs, &p));
        sources_now = sources_now.iter().map(|c| current(fs, c)).collect();
        pins.pin(
            std::iter::once(&sv_now)
                .chain(&parent_now)
                .chain(&sources_now),
        );
    }
    (pins, (sv_now, parent_now, sources_now))
}

/// The name `sv` is sent as, when it, its parent and its clone sources
/// can be sent, be a parent and be cloned from.
fn checked_name(
    sv: &Subvolume,
    parent: Option<&Subvolume>,
    sources: &[Subvolume],
) -> Result<Bytes, SendError> {
    check_sendable(sv)?;
    if let Some(p) = parent {
        check_parent(p)?;
    }
    let name: Bytes = sv
        .link
        .as_ref()
        .map(|l| Bytes::from(l.name.as_slice()))
        .ok_or(SendError::Unnamed { id: sv.id })?;
    for c in sources {
        check_clone_source(c)?;
    }
    Ok(name)
}

/// Writes the stream's header (of version `proto`), or a resumed
/// stream's, or with `opts.omit_header` checks that the stream started
/// before goes on in that version.
fn start_stream<W: Write>(
    out: &mut Writer<W>,
    opts: &SendOptions,
    proto: u32,
    subvol: &str,
) -> Result<(), SendError> {
    let started = if opts.omit_header {
        // The stream started before goes on, in its own version.
        match out.version() {
            Some(v) if v == proto => Ok(()),
            _ => Err(WriteError::NoStream),
        }
    } else if opts.resume.is_some() && !opts.dry_run {
        out.start_resumed_stream(proto)
    } else {
        out.start_stream(proto)
    };
    started.map_err(|e| match e {
        WriteError::Io(io) => SendError::Output(io),
        other => SendError::Encode {
            subvol: subvol.to_string(),
            path: String::new(),
            source: other,
        },
    })
}

/// One send: the subvolumes it reads, pinned, and how.
struct Job<'a> {
    fs: &'a Filesystem,
    sv: &'a Subvolume,
    parent: Option<Parent<'a>>,
    sources: &'a [Subvolume],
    /// Every subvolume read, with its role in messages.
    reads: &'a [(&'static str, &'a Subvolume)],
    /// The subvolume's label, for messages.
    subvol: String,
    flavor: Flavor,
    opts: &'a SendOptions,
}

impl Job<'_> {
    /// Walks the trees on threads of its own, from the command `first`,
    /// and writes the commands to `out` on this one.
    fn run<W: Write>(&self, out: &mut Writer<W>, first: Cmd) -> Result<StreamStats, SendError> {
        let opts = self.opts;
        let (mode, unread_until) = match (opts.dry_run, opts.resume) {
            (true, p) => (sink::Mode::Measure(p), u64::MAX),
            (false, Some(p)) => (sink::Mode::Resume(p), p.commands),
            (false, None) => (sink::Mode::Write, 0),
        };
        let (fs, reads) = (self.fs, self.reads);
        let read_failed = |pos: Option<(u64, String)>, e: Error| {
            explain(fs, reads, placed(self.subvol.clone(), pos, Fault::Read(e)))
        };
        let readers = Arc::new(ahead::Readers::default());
        let tree = fs.fs_tree(self.sv);
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::sync_channel(sink::CHANNEL_BATCHES);
            let (pool_tx, pool_rx) = mpsc::sync_channel(sink::POOL_BUFFERS);
            for _ in 0..ahead::Readers::threads() {
                let (readers, read_failed, tree) = (&readers, &read_failed, &tree);
                s.spawn(move || readers.serve(fs, tree, read_failed));
            }
            let walker = s.spawn(|| {
                let em = Emitter::new(
                    tx,
                    pool_rx,
                    self.flavor.write_size(),
                    unread_until,
                    readers.clone(),
                );
                self.walk(em, first, &readers, tree);
            });
            let mut sink = Sink::new(
                out,
                self.flavor.write_size(),
                pool_tx,
                &*opts.progress,
                mode,
                self.flavor.proto,
                sink::Framing {
                    header: !opts.omit_header,
                    end: !opts.omit_end,
                },
            );
            sink.sector = fs.sectorsize();
            let res = loop {
                match rx.recv() {
                    Ok(Msg::Batch(b)) => {
                        if let Err(e) = sink.write(b) {
                            break Err(e);
                        }
                    }
                    Ok(Msg::Failed(e)) => break Err(e),
                    Err(mpsc::RecvError) => break Ok(()),
                }
            };
            drop(rx);
            let panicked = walker.join().is_err();
            self.outcome(res, panicked, &sink, mode)?;
            let mut st = sink.stats;
            if opts.dry_run {
                st.bytes = sink.kept_len;
            }
            Ok(st)
        })
    }

    /// The walk, on its own thread: every command from `first` to END
    /// into `em`, or the failure that stopped it.
    fn walk(
        &self,
        mut em: Emitter,
        first: Cmd,
        readers: &ahead::Readers,
        tree: btrfs_disk::Tree<'_>,
    ) {
        let (fs, reads, parent) = (self.fs, self.reads, self.parent);
        if em.push(first).is_err() {
            return;
        }
        let (r, pos) = {
            let clones = Clones::new(fs, self.sv, parent, self.sources, !self.opts.no_clones);
            let parent_tree = parent.map(|p| p.tree(fs));
            let mut walk = Walk::new(fs, tree, parent_tree, &mut em, clones, self.flavor);
            walk.reuse = parent.and_then(|p| p.reuse(fs));
            // No END before the subvolumes read are known to be intact.
            let r = walk.run().and_then(|()| {
                // The data read ahead was read before the check too.
                readers.settle();
                rescued_parent_whole(fs, parent.and_then(|p| p.on_disk()))?;
                match check_intact(fs, reads) {
                    Ok(()) => walk.end(),
                    Err(e) => Err(Stop::Changed(Box::new(e))),
                }
            });
            (r, walk.position())
        };
        let pos = pos.map(|(ino, p)| (ino, String::from_utf8_lossy(&p).into_owned()));
        let label = self.subvol.clone();
        let e = match r {
            Ok(()) | Err(Stop::Hangup) => return,
            Err(Stop::Changed(e)) => *e,
            Err(Stop::Read(source)) => {
                // A failed read of a subvolume that changed is told as that change.
                explain(fs, reads, placed(label, pos, Fault::Read(source)))
            }
            Err(Stop::Bad(reason)) => explain(fs, reads, placed(label, pos, Fault::Bad(reason))),
        };
        em.fail(e);
    }

    /// How the send ended, from what the sink got (`res`), whether the
    /// walk `panicked`, and the `sink` that wrote in `mode`.
    fn outcome<W: Write>(
        &self,
        res: Result<(), SendError>,
        panicked: bool,
        sink: &Sink<'_, W>,
        mode: sink::Mode,
    ) -> Result<(), SendError> {
        match res {
            Err(SendError::Encode { path, source, .. }) => Err(SendError::Encode {
                subvol: self.subvol.clone(),
                path,
                source,
            }),
            Ok(()) if panicked || !sink.ended => Err(SendError::Walk {
                subvol: self.subvol.clone(),
            }),
            Ok(()) => match mode {
                sink::Mode::Resume(p) | sink::Mode::Measure(Some(p))
                    if sink.count <= p.commands =>
                {
                    // The token is only given for an incomplete subvolume, so
                    // the receive had fewer commands than it applied: another stream.
                    Err(SendError::Resume(format!(
                        "{}: it has {} commands and the receive applied {} of the first \
                         ({})",
                        sink::STREAM_DIFFERS,
                        sink.count,
                        p.commands,
                        sink::OTHER_OPTIONS
                    )))
                }
                _ => Ok(()),
            },
            other => other,
        }
    }
}
