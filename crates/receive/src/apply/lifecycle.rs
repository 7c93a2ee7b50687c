//! SUBVOL, SNAPSHOT and END: where a subvolume's receive begins, and how it
//! is finished and marked received.

use std::os::fd::{AsFd, OwnedFd};

use uuid::Uuid;

use crate::dest::{Existing, Kind, Known, Staged};
use crate::error::{escape, CmdError};
use crate::ioctl;
use crate::snapshot::{self, Making, Site};
use crate::subvol::SubvolState;

use super::current::{Current, Flow, Receiver, R};
use super::inode::LATE_FLAGS;

/// The name `staged` is to have.
fn staged_name(staged: &Staged) -> &[u8] {
    match staged {
        Staged::Made { name, .. } | Staged::Move { name, .. } => name,
    }
}

impl Receiver<'_> {
    /// Says that subvolume `name` (a "subvol" or a "snapshot") is being
    /// received, and gives its state, rooted at `root`.
    fn enter(&mut self, what: &str, name: &[u8], state: SubvolState, root: OwnedFd) -> Current {
        self.log.info(format_args!("At {what} {}", escape(name)));
        self.say_dest();
        Current::new(
            name,
            state,
            root,
            self.closer.clone(),
            self.opts.max_dir_times,
        )
    }

    /// The error for a stream whose subvolume `name` is in DEST already.
    fn refuse_existing(&self, name: &[u8], uuid: Uuid) -> R<()> {
        let Some(there) = self
            .dest
            .existing(name)
            .map_err(CmdError::io("look at the destination"))?
        else {
            return Ok(());
        };
        if let Existing::Received(st) = &there {
            if st.complete {
                self.forget_aids(name);
            }
        }
        let dest = self.dest.path().display();
        let shown = escape(name);
        let again = "delete it (btrfs subvolume delete on btrfs, else rm -rf) to receive it again";
        Err(CmdError::Exists(match there {
            Existing::Received(st) if st.received_uuid != uuid => format!(
                "{dest}/{shown} exists: a subvolume received from another snapshot (uuid {}, {}); delete or rename it to receive this one (uuid {uuid})",
                st.received_uuid,
                if st.complete { "complete" } else { "incomplete" }
            ),
            Existing::Received(st) if st.complete => format!(
                "subvolume {shown} was already received in {dest} (complete, received uuid {uuid}): nothing was changed; {again}"
            ),
            Existing::Received(st) => match st.resume {
                Some(r) => format!(
                    "subvolume {shown} in {dest} is incomplete: an earlier receive stopped after command {} (byte {}). Resume it with rsend --resume \"$(rreceive --resume-token {dest}/{shown})\" and the same rsend arguments as before; from a stored stream file, with the same rreceive -f FILE {dest} again (or ... | rreceive --resume {dest}); or {again}",
                    r.point.commands, r.point.offset
                ),
                None => match crate::recovery::side::refusal(self.dest.fd(), name) {
                    Some(why) => format!(
                        "subvolume {shown} in {dest} is incomplete from an earlier receive that cannot be resumed ({why}): {again}"
                    ),
                    None => format!(
                        "subvolume {shown} in {dest} is incomplete from an earlier receive that did not stop cleanly (killed, or the system went down), so it cannot be resumed: {again}"
                    ),
                },
            },
            Existing::Other => format!(
                "{dest}/{shown} exists and is not a subvolume rreceive received: move it away, or receive into another directory"
            ),
        }))
    }

    /// Removes what rreceive keeps beside subvolume `name` while it is
    /// received (its side file, durable records, journal and work
    /// directory), which of a complete subvolume describe nothing: END
    /// removes them after marking it complete, so a receive killed in
    /// between leaves them. A linked or in-place work directory holds
    /// links to the tree's files, which would count in their link counts
    /// and go on into a snapshot of it: so they go before `name` is used
    /// as a parent, and when its stream comes again.
    fn forget_aids(&self, name: &[u8]) {
        let dest = self.dest.fd();
        crate::recovery::side::forget(dest, name);
        crate::recovery::durable::forget(dest, name);
        crate::recovery::forget_journal(dest, name);
        let _ = snapshot::workdir::remove_tree(dest, &snapshot::workdir::name_for(name));
    }

    pub(super) fn subvol(&mut self, name: &[u8], uuid: Uuid, ctransid: u64) -> R<Flow> {
        if self.cur.is_some() {
            return Err(CmdError::NestedSubvol);
        }
        let held = self.lock(name)?;
        self.refuse_existing(name, uuid)?;
        let state = SubvolState {
            received_uuid: uuid,
            ctransid,
            parent_uuid: None,
            parent_ctransid: 0,
            complete: false,
            resume: None,
        };
        // What an earlier receive of this name left speaks for nothing now.
        crate::recovery::forget_journal(self.dest.fd(), name);
        crate::recovery::durable::forget(self.dest.fd(), name);
        let (root, staged) =
            self.dest
                .create_subvol(name, &state)
                .map_err(|err| CmdError::InDest {
                    op: "create subvolume",
                    dest: self.dest.path().display().to_string(),
                    err,
                })?;
        let mut cur = self.enter("subvol", name, state, root);
        cur.locks.push(held);
        self.cur = Some(cur);
        self.place(staged, "create subvolume")?;
        Ok(Flow::Continue)
    }

    /// Gives the subvolume just made (the current one) its name, once what
    /// resumes it after a kill is there: the journal with its first
    /// checkpoint (and a work directory's record, made before). Killed
    /// before, the receive leaves no subvolume, and the same stream
    /// received again starts over; killed after, it resumes after its
    /// first command. The side file's room is kept after (a kill needs
    /// none; a receive starting meanwhile would take it for an orphan).
    fn place(&mut self, staged: Staged, op: &'static str) -> R<()> {
        let name = staged_name(&staged).to_vec();
        self.start_journal();
        if let Err(err) = self.dest.place(&staged) {
            self.unplaced(&staged);
            return Err(CmdError::InDest {
                op,
                dest: self.dest.path().display().to_string(),
                err,
            });
        }
        self.reserve_side(&name);
        Ok(())
    }

    /// Undoes the subvolume `staged`, made and not placed, and what was
    /// made for it (its journal and work directory).
    fn unplaced(&mut self, staged: &Staged) {
        if let Some(mut c) = self.cur.take() {
            c.retire();
            if let Some(j) = c.later.dir_times.journal.take() {
                j.remove();
            }
            c.snap.give_back(self.dest.fd());
        }
        self.dest.unstage(staged);
    }

    pub(super) fn snapshot(
        &mut self,
        name: &[u8],
        uuid: Uuid,
        ctransid: u64,
        parent_uuid: Uuid,
        parent_ctransid: u64,
    ) -> R<Flow> {
        if self.cur.is_some() {
            return Err(CmdError::NestedSubvol);
        }
        let mut locks = vec![self.lock(name)?];
        self.refuse_existing(name, uuid)?;
        let parent = self.parent_of(parent_uuid, &mut locks)?;
        let state = SubvolState {
            received_uuid: uuid,
            ctransid,
            parent_uuid: Some(parent_uuid),
            parent_ctransid,
            complete: false,
            resume: None,
        };
        let site = Site {
            fd: self.dest.fd(),
            path: self.dest.path(),
            btrfs: self.dest.kind() == Kind::Btrfs,
            links_unseen: self
                .dest
                .caps()
                .filter(|c| !c.links_shown)
                .map(|c| c.fs.as_str()),
        };
        let mut making = Making::begin(
            self.opts.snapshot,
            &site,
            name,
            &parent.name,
            &self.log,
            &mut self.told_copy,
            || self.dest.open_subvol(&parent.name),
        )?;
        // What an earlier receive of this name left speaks for nothing now.
        crate::recovery::forget_journal(self.dest.fd(), name);
        crate::recovery::durable::forget(self.dest.fd(), name);
        let made = making
            .make(|how, work, tick| self.dest.snapshot(name, &parent, &state, how, work, tick));
        let (root, made, staged) = match made {
            Ok(m) => m,
            Err(e) => {
                making.abandon(self.dest.fd());
                return Err(CmdError::InDest {
                    op: "create snapshot",
                    dest: self.dest.path().display().to_string(),
                    err: e,
                });
            }
        };
        let started = making.strategy(
            made,
            name,
            &parent.name,
            parent_uuid,
            &self.log,
            self.write_ahead(),
            self.dest.fd(),
        )?;
        let mut snap = started.snap;
        if started.flags_dropped > 0 {
            self.skip("immutable/append flags", started.flags_dropped);
        }
        let mut cur = self.enter("snapshot", name, state, root);
        // Before the snapshot has its name: a resumed receive needs it.
        if let Err(e) = snap.record_mode() {
            snap.give_back(self.dest.fd());
            self.dest.unstage(&staged);
            return Err(CmdError::io("record the work directory's mode")(e));
        }
        cur.snap = snap;
        cur.locks = locks;
        // The copies' immutable and append-only flags come at END, before
        // any the stream sets.
        cur.later.deferred = started.late;
        self.cur = Some(cur);
        self.place(staged, "create snapshot")?;
        Ok(Flow::Continue)
    }

    /// The parent a SNAPSHOT names, found in DEST (or elsewhere on its
    /// btrfs filesystem) and locked into `locks`; a complete one loses what
    /// an earlier receive kept beside it, an incomplete one is refused
    /// unless [`crate::Options::force`].
    fn parent_of(&mut self, parent_uuid: Uuid, locks: &mut Vec<crate::lock::Held>) -> R<Known> {
        let parent = self
            .dest
            .find(parent_uuid)
            .map_err(CmdError::io("look up parent"))?
            .ok_or_else(|| {
                CmdError::ParentNotFound(parent_uuid, self.dest.searched(parent_uuid))
            })?;
        if parent.elsewhere.is_none() {
            // Copied, linked or changed in place while this receive runs;
            // one being received (incomplete) is waited for or said busy.
            locks.push(self.lock(&parent.name)?);
        }
        if parent.elsewhere.is_some() {
            self.log.note(format_args!(
                "parent {parent_uuid} found outside DEST: {}",
                escape(&parent.name)
            ));
        }
        if parent.complete && parent.elsewhere.is_none() {
            self.forget_aids(&parent.name);
        }
        if !parent.complete {
            if !self.opts.force {
                return Err(CmdError::ParentIncomplete {
                    name: escape(&parent.name),
                    uuid: parent_uuid,
                });
            }
            self.log.note(format_args!(
                "using incomplete parent {} because of --force",
                escape(&parent.name)
            ));
        }
        Ok(parent)
    }

    pub(super) fn end(&mut self) -> R<Flow> {
        let Some(mut cur) = self.cur.take() else {
            return Ok(Flow::End);
        };
        cur.retire();
        cur.data.sources.clear();
        cur.away.closer.wait();
        for (f, bits) in std::mem::take(&mut cur.later.deferred) {
            match ioctl::get_inode_flags(f.as_fd())
                .and_then(|now| ioctl::set_inode_flags(f.as_fd(), (now & !LATE_FLAGS) | bits))
            {
                Ok(()) => {}
                Err(e) => {
                    self.skip("immutable/append flags", 1);
                    self.log
                        .note(format_args!("immutable/append flag not applied: {e}"));
                }
            }
        }
        let name = cur.name.clone();
        let journal = cur.later.dir_times.journal.take();
        if cur.errors > 0 {
            if let Some(j) = journal {
                j.remove();
            }
            cur.snap.give_back(self.dest.fd());
            self.log.notice(format_args!(
                "subvolume {} not marked complete: {} command(s) failed",
                escape(&name),
                cur.errors
            ));
            return Ok(Flow::End);
        }
        let mut state = cur.state.clone();
        state.complete = true;
        let root = cur
            .res
            .root()
            .try_clone_to_owned()
            .map_err(CmdError::io("dup"))?;
        let work = cur.snap.take_work();
        if let Err(e) = self.dest.finish(&name, root.as_fd(), &state) {
            // Still incomplete (a full disk, say): a stop before END, which
            // a resumed stream applies again.
            cur.later.dir_times.journal = journal;
            cur.snap.keep_work(work);
            self.cur = Some(cur);
            return Err(CmdError::io("mark subvolume received")(e));
        }
        // Released once what END removes is gone.
        let _locks = std::mem::take(&mut cur.locks);
        drop(cur);
        crate::recovery::side::forget(self.dest.fd(), &name);
        crate::recovery::durable::forget(self.dest.fd(), &name);
        if let Some(j) = journal {
            j.remove();
        }
        if let Some(w) = work {
            w.remove(self.dest.fd())
                .map_err(CmdError::io("remove the work directory"))?;
        }
        self.stats.subvols += 1;
        Ok(Flow::End)
    }
}
