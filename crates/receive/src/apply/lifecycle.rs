//! SUBVOL, SNAPSHOT and END: where a subvolume's receive begins, and how it
//! is finished and marked received.

use std::os::fd::AsFd;

use uuid::Uuid;

use crate::error::{escape, CmdError};
use crate::ioctl;
use crate::subvol::SubvolState;

use super::inode::LATE_FLAGS;
use super::{Current, Flow, Receiver, R};

impl Receiver<'_> {
    pub(super) fn subvol(&mut self, name: &[u8], uuid: Uuid, ctransid: u64) -> R<Flow> {
        if self.cur.is_some() {
            return Err(CmdError::NestedSubvol);
        }
        let state = SubvolState {
            received_uuid: uuid,
            ctransid,
            parent_uuid: None,
            parent_ctransid: 0,
            complete: false,
        };
        let root = self
            .dest
            .create_subvol(name, &state)
            .map_err(CmdError::io("create subvolume"))?;
        self.log.info(format_args!("At subvol {}", escape(name)));
        self.cur = Some(Current::new(
            name,
            state,
            root,
            self.closer.clone(),
            self.opts.max_dir_times,
        ));
        Ok(Flow::Continue)
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
        let parent = self
            .dest
            .find(parent_uuid)
            .map_err(CmdError::io("look up parent"))?
            .ok_or(CmdError::ParentNotFound(parent_uuid))?;
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
        let state = SubvolState {
            received_uuid: uuid,
            ctransid,
            parent_uuid: Some(parent_uuid),
            parent_ctransid,
            complete: false,
        };
        let (root, stats) = self
            .dest
            .snapshot(name, &parent, &state)
            .map_err(CmdError::io("create snapshot"))?;
        if let Some(s) = stats {
            self.log.note(format_args!(
                "copied parent {}: {} inodes, {} hardlinks, {} files reflinked",
                escape(&parent.name),
                s.inodes,
                s.links,
                s.reflinked
            ));
        }
        self.log.info(format_args!("At snapshot {}", escape(name)));
        self.cur = Some(Current::new(
            name,
            state,
            root,
            self.closer.clone(),
            self.opts.max_dir_times,
        ));
        Ok(Flow::Continue)
    }

    pub(super) fn end(&mut self) -> R<Flow> {
        let Some(mut cur) = self.cur.take() else {
            return Ok(Flow::End);
        };
        cur.retire();
        cur.sources.clear();
        cur.closer.wait();
        for (f, bits) in std::mem::take(&mut cur.deferred) {
            match ioctl::get_inode_flags(f.as_fd())
                .and_then(|now| ioctl::set_inode_flags(f.as_fd(), (now & !LATE_FLAGS) | bits))
            {
                Ok(()) => {}
                Err(e) => {
                    self.stats.skipped += 1;
                    self.log
                        .note(format_args!("immutable/append flag not applied: {e}"));
                }
            }
        }
        let name = cur.name.clone();
        if cur.errors > 0 {
            self.log.info(format_args!(
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
        drop(cur);
        self.dest
            .finish(&name, root.as_fd(), &state)
            .map_err(CmdError::io("mark subvolume received"))?;
        self.stats.subvols += 1;
        Ok(Flow::End)
    }
}
