//! Making a SNAPSHOT's tree off its parent: the strategy chosen
//! ([`Making`]), the copy planned and made, or the parent taken over
//! ([`Taken`]), and the [`Strategy`] that results.
//!
//! May call: its siblings `copy`, `overlay`, `workdir` and `strategy`, and
//! `error`, `report`, `subvol`, `fake_super`; never the engine or the
//! destination (which calls [`copy_parent`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use uuid::Uuid;

use crate::error::{escape, CmdError};
use crate::report::{Copying, Log};
use crate::subvol;

use super::copy;
use super::overlay::Overlay;
use super::strategy::{Kind, Snapshot, Strategy, Taken};
use super::workdir::{Workdir, WriteAhead};
use crate::report::Tick;

type R<T> = Result<T, CmdError>;

/// How a snapshot was made.
pub(crate) enum Made {
    /// A btrfs snapshot.
    Snapshot,
    /// A tree copied or linked (see [`copy::copy_tree`]).
    Tree(copy::Tree),
    /// The parent's tree taken over.
    InPlace(Taken),
}

/// What [`plan_copy`] found.
#[derive(Debug, Clone, Copy)]
struct CopyPlan {
    /// What the parent's tree holds.
    usage: copy::Usage,
    /// Whether data is shared by reflink.
    reflink: bool,
}

/// Checks that a copy of the parent's tree `src` (named `parent`) fits in
/// DEST (`dest`, at `path`): inodes, and bytes where the filesystem cannot
/// reflink, before any is made.
fn plan_copy(
    dest: BorrowedFd<'_>,
    path: &Path,
    src: BorrowedFd<'_>,
    parent: &[u8],
) -> io::Result<CopyPlan> {
    let reflink = copy::reflinks_work(dest)?;
    let vfs = nix::sys::statvfs::fstatvfs(dest)?;
    let free_inodes = vfs.files_available() as u64;
    let free_bytes = (vfs.blocks_available() as u64).saturating_mul(vfs.fragment_size() as u64);
    let short = |u: &copy::Usage| {
        (
            vfs.files() > 0 && u.inodes + 1 > free_inodes,
            !reflink && u.bytes > free_bytes,
        )
    };
    // Names first (constant memory); inodes exactly only if that
    // bound does not fit.
    let mut usage = copy::usage(src, false)?;
    if short(&usage) != (false, false) && usage.multi > 0 {
        usage = copy::usage(src, true)?;
    }
    let (inodes_short, bytes_short) = short(&usage);
    if inodes_short || bytes_short {
        let why = match (inodes_short, bytes_short) {
            (true, true) => "too few inodes and too little space",
            (true, false) => "too few inodes",
            _ => "too little space",
        };
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "a copy of parent {} needs {} inodes and {} bytes{}, and {} has {} inodes and \
             {} bytes free: {why}; nothing was copied (--in-place or --link need no copy)",
                escape(parent),
                usage.inodes + 1,
                usage.bytes,
                if reflink { " (data by reflink)" } else { "" },
                path.display(),
                free_inodes,
                free_bytes
            ),
        ));
    }
    Ok(CopyPlan { usage, reflink })
}

/// Copies (or, `--link`, links) the parent's tree `src` into the new
/// directory `dst`, as `how` says; `work` is the work directory.
pub(crate) fn copy_parent(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    how: Snapshot,
    work: Option<BorrowedFd<'_>>,
    tick: &dyn Tick,
) -> io::Result<copy::Tree> {
    copy::copy_tree(
        src,
        dst,
        how.share(),
        work,
        // The root's --fake-super record goes with the tree.
        &|n| {
            n.starts_with(subvol::XATTR_RESERVED_PREFIX) && n != crate::fake_super::XATTR.as_bytes()
        },
        tick,
    )
}

/// Counts what a snapshot's copy made; for the tests of a receive killed
/// while copying, `RRECEIVE_TEST_KILL=copy:N` kills it (SIGKILL) after N.
struct KillAfter<'a> {
    inner: &'a dyn Tick,
    made: std::cell::Cell<u64>,
    at: Option<u64>,
}

impl<'a> KillAfter<'a> {
    fn new(inner: &'a dyn Tick) -> KillAfter<'a> {
        let at = std::env::var("RRECEIVE_TEST_KILL")
            .ok()
            .and_then(|v| v.strip_prefix("copy:")?.parse().ok());
        KillAfter {
            inner,
            made: std::cell::Cell::new(0),
            at,
        }
    }
}

impl Tick for KillAfter<'_> {
    fn tick(&self) {
        self.inner.tick();
        let n = self.made.get() + 1;
        self.made.set(n);
        if self.at == Some(n) {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// A tree made, with its strategy ([`Making::strategy`]).
pub(crate) struct Started {
    /// Its strategy.
    pub snap: Strategy,
    /// The copies' immutable and append-only flags, due at END.
    pub late: Vec<(File, u32)>,
    /// How many copies' flags could not be kept (too many).
    pub flags_dropped: u64,
}

/// DEST, as making a snapshot in it sees it.
pub(crate) struct Site<'a> {
    /// Its directory.
    pub fd: BorrowedFd<'a>,
    /// Its path (for messages).
    pub path: &'a Path,
    /// On btrfs.
    pub btrfs: bool,
    /// Its filesystem's type, when hard links were not seen to work there.
    pub links_unseen: Option<&'a str>,
}

/// A SNAPSHOT's tree being made: how, with its work directory and the
/// copy's progress.
pub(crate) struct Making<'r> {
    how: Snapshot,
    work: Option<Workdir>,
    copying: Option<Copying<'r>>,
}

impl<'r> Making<'r> {
    /// Chooses how subvolume `name` is made from parent `parent` (`asked`
    /// off btrfs, a snapshot on btrfs), and checks and prepares what that
    /// needs: that hard links work (`--link`), that a copy fits (the parent
    /// opened by `open_parent`), the work directory.
    pub(crate) fn begin(
        asked: Snapshot,
        site: &Site<'_>,
        name: &[u8],
        parent: &[u8],
        log: &Log<'r>,
        told_copy: &mut bool,
        open_parent: impl FnOnce() -> nix::Result<OwnedFd>,
    ) -> R<Making<'r>> {
        let mut how = asked;
        if site.btrfs && how != Snapshot::Copy {
            log.note(format_args!(
                "DEST is on btrfs: {} is a snapshot of {} (--plain to use {} instead)",
                escape(name),
                escape(parent),
                if how == Snapshot::InPlace {
                    "--in-place"
                } else {
                    "--link"
                }
            ));
            how = Snapshot::Copy;
        }
        if how == Snapshot::Link {
            if let Some(fs) = site.links_unseen {
                return Err(CmdError::LinkUnseen {
                    dest: site.path.display().to_string(),
                    fs: fs.to_string(),
                    parent: escape(parent),
                });
            }
        }
        let copying = if !site.btrfs && how == Snapshot::Copy {
            let plan = open_parent()
                .map_err(io::Error::from)
                .and_then(|src| plan_copy(site.fd, site.path, src.as_fd(), parent))
                .map_err(CmdError::io("create snapshot"))?;
            if !plan.reflink && !*told_copy {
                *told_copy = true;
                log.notice(format_args!(
                    "copying parent {} ({} inodes, {} bytes): this filesystem has no \
                     snapshots or reflinks; --in-place or --link avoid the copy",
                    escape(parent),
                    plan.usage.inodes,
                    plan.usage.bytes
                ));
            }
            Some(log.copying(plan.usage.inodes))
        } else {
            None
        };
        let work = if !site.btrfs && how.needs_work() {
            let w =
                Workdir::create(site.fd, name).map_err(CmdError::io("make the work directory"))?;
            Some(w)
        } else {
            None
        };
        Ok(Making { how, work, copying })
    }

    /// Makes the tree with `make` (the destination's, given how, the work
    /// directory and what counts the copy); the copy's progress ends then.
    pub(crate) fn make<T>(
        &mut self,
        make: impl FnOnce(Snapshot, Option<BorrowedFd<'_>>, &dyn Tick) -> io::Result<T>,
    ) -> io::Result<T> {
        let made = {
            let tick = KillAfter::new(
                self.copying
                    .as_ref()
                    .map_or(&() as &dyn Tick, |b| b as &dyn Tick),
            );
            make(self.how, self.work.as_ref().map(Workdir::fd), &tick)
        };
        self.copying = None;
        made
    }

    /// Undoes what [`Making::begin`] made in `dest` (the tree was not made).
    pub(crate) fn abandon(self, dest: BorrowedFd<'_>) {
        if let Some(w) = self.work {
            let _ = w.remove(dest);
        }
    }

    /// The strategy of the tree `made` of parent `parent` (uuid
    /// `parent_uuid`) for subvolume `name`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn strategy(
        self,
        made: Made,
        name: &[u8],
        parent: &[u8],
        parent_uuid: Uuid,
        log: &Log<'_>,
        write_ahead: WriteAhead,
        dest: BorrowedFd<'_>,
    ) -> R<Started> {
        let how = self.how;
        let work = self.work;
        let mut late = Vec::new();
        let mut dropped = 0;
        let (kind, taken) = match made {
            Made::Snapshot => (Kind::Btrfs, None),
            Made::Tree(tree) => {
                let s = tree.stats;
                log.note(format_args!(
                    "{} parent {}: {} inodes, {} hardlinks, {} files reflinked, {} linked",
                    if how == Snapshot::Link {
                        "linked"
                    } else {
                        "copied"
                    },
                    escape(parent),
                    s.inodes,
                    s.links,
                    s.reflinked,
                    s.shared
                ));
                if s.flags_dropped > 0 {
                    dropped = s.flags_dropped;
                    log.note(format_args!(
                        "immutable/append flags of {} copied files not kept (too many)",
                        s.flags_dropped
                    ));
                }
                late = tree.late;
                if how == Snapshot::Link {
                    (Kind::Link(tree.own), None)
                } else {
                    (Kind::Copy, None)
                }
            }
            Made::InPlace(t) => {
                let made = work.as_ref().map(|w| Overlay::new(w.fd(), parent_uuid));
                let overlay = match made {
                    Some(Ok(o)) => o,
                    Some(Err(e)) => {
                        // Not placed: the parent was not touched.
                        if let Some(w) = work {
                            let _ = w.remove(dest);
                        }
                        return Err(CmdError::io("keep the parent's view")(e));
                    }
                    None => return Err(CmdError::NoSubvol),
                };
                log.note(format_args!(
                    "applying {} in place onto parent {}",
                    escape(name),
                    escape(parent)
                ));
                (Kind::InPlace(overlay), Some(t))
            }
        };
        let s = Strategy {
            kind,
            taken,
            work,
            write_ahead,
            ..Strategy::default()
        };
        Ok(Started {
            snap: s,
            late,
            flags_dropped: dropped,
        })
    }
}

impl Strategy {
    /// Records in the work directory, if there is one, how the tree was
    /// made and the files of its own: a resumed receive needs it, before
    /// the snapshot has its name.
    pub(crate) fn record_mode(&self) -> io::Result<()> {
        let Some(w) = &self.work else {
            return Ok(());
        };
        let own: Vec<u64> = match &self.kind {
            Kind::Link(own) => own.iter().map(|&(_, ino)| ino).collect(),
            _ => Vec::new(),
        };
        let mode = if matches!(self.kind, Kind::Link(_)) {
            "link"
        } else {
            "in-place"
        };
        w.record_mode(mode, own)
    }
}
