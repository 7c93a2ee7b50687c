//! A send of a damaged snapshot (`rsend --rescue`): what the walk leaves
//! out so that the stream stays one a receiver accepts. The reader has
//! already replaced lost tree blocks by empty ones and lost data by zeros
//! (`btrfs_disk::rescue`); here the walk drops the items of inodes whose
//! inode item is lost, the names in directories it cannot reach, and
//! inodes left with no name, and records each in the reader's log (its
//! state is [`super::salvage::Salvage`]).

use btrfs_disk::data::Inode;
use btrfs_disk::items::{objectid, FileExtentItem};
use btrfs_disk::key::key_type;
use btrfs_disk::lookup::InodeInfo;
use btrfs_disk::rescue::{InodeFault, InodeLoss, Losses, NameLoss};
use btrfs_disk::Key;

use super::clone::Source;
use super::inode::Walk;
use super::mode::{S_IFDIR, S_IFLNK, S_IFMT};
use super::stop::{Result, Stop};

/// How deep a directory may sit below the root before it counts as lost
/// (a loop of references in a damaged tree).
const MAX_DEPTH: usize = 4096;

impl Walk<'_, '_> {
    fn losses(&self) -> Option<&Losses> {
        self.fs.rescue()
    }

    /// For a rescue: whether the item `key` belongs to no inode being sent
    /// because the snapshot has no inode item for it (lost), and so is
    /// passed over. The first such item of an inode records the loss.
    pub(super) fn salvage_skips(&mut self, key: Key) -> Result<bool> {
        if self.salvage.is_none()
            || key.item_type == key_type::INODE_ITEM
            || key.objectid == self.cur.ino
            || key.objectid < objectid::FIRST_FREE
            || key.objectid > objectid::LAST_FREE
        {
            return Ok(false);
        }
        // (An incremental send meets items of inodes it does not send.)
        if self.send.inode(key.objectid)?.is_some() {
            return Ok(false);
        }
        let Some(s) = self.salvage.as_mut() else {
            return Ok(false);
        };
        if s.dropped.insert(key.objectid) {
            self.lose_inode(key.objectid, InodeFault::NoInodeItem);
        }
        Ok(true)
    }

    /// For a rescue, before a new inode `ino` is created: whether it has a
    /// name in a directory reachable from the root. When it has none it is
    /// left out (recorded with the names it has) and the walk passes over
    /// its items.
    pub(super) fn salvage_placeable(&mut self, ino: u64) -> Result<bool> {
        if self.salvage.is_none() || ino == objectid::FIRST_FREE {
            return Ok(true);
        }
        let refs = self.send.all_refs(ino)?;
        let mut any = false;
        for (dir, _) in refs.iter().flatten() {
            if self.salvage_dir_ok(*dir)? {
                any = true;
                break;
            }
        }
        if any {
            return Ok(true);
        }
        self.salvage_drop(ino, InodeFault::NoName)?;
        Ok(false)
    }

    /// Leaves the current inode `ino` out for `fault`, recording it and the
    /// names it has.
    pub(super) fn salvage_drop(&mut self, ino: u64, fault: InodeFault) -> Result<()> {
        let tree = self.send.id();
        let refs = self.send.all_refs(ino)?;
        if let Some(s) = self.salvage.as_mut() {
            s.dropped.insert(ino);
            s.reachable.insert(ino, false);
        }
        self.lose_inode(ino, fault);
        if let Some(l) = self.losses() {
            for (dir, name) in refs.into_iter().flatten() {
                l.add_name(NameLoss {
                    tree,
                    ino,
                    dir,
                    name: name.to_vec(),
                });
            }
        }
        self.cur.ignore = true;
        Ok(())
    }

    /// For a rescue: whether the name `name` in `dir` of the current inode
    /// can be kept (the directory is reachable from the root); a name that
    /// cannot is recorded.
    pub(super) fn salvage_keeps(&mut self, dir: u64, name: &[u8]) -> Result<bool> {
        if self.salvage.is_none() || self.salvage_dir_ok(dir)? {
            return Ok(true);
        }
        let (tree, ino) = (self.send.id(), self.cur.ino);
        if let Some(l) = self.losses() {
            l.add_name(NameLoss {
                tree,
                ino,
                dir,
                name: name.to_vec(),
            });
        }
        Ok(false)
    }

    /// Whether directory `dir` can be reached from the root: it and every
    /// directory above it has its inode item and a name.
    fn salvage_dir_ok(&mut self, dir: u64) -> Result<bool> {
        let mut chain = Vec::new();
        let mut d = dir;
        let ok = loop {
            if d == objectid::FIRST_FREE {
                break true;
            }
            if let Some(&known) = self.salvage.as_ref().and_then(|s| s.reachable.get(&d)) {
                break known;
            }
            if chain.len() >= MAX_DEPTH || chain.contains(&d) {
                break false;
            }
            chain.push(d);
            match self.send.inode(d)? {
                Some(i) if i.mode & S_IFMT == S_IFDIR => {}
                _ => break false,
            }
            match self.send.first_ref(d)? {
                Some(r) => d = r.dir,
                None => break false,
            }
        };
        if let Some(s) = self.salvage.as_mut() {
            for c in chain {
                s.reachable.insert(c, ok);
            }
        }
        Ok(ok)
    }

    /// For a rescue, before a new inode is created: whether what its
    /// creation reads (a symlink's target) can be read; when not, the inode
    /// is left out.
    pub(super) fn salvage_readable(&mut self, inode: &Inode) -> Result<bool> {
        if self.salvage.is_none() || inode.mode & S_IFMT != S_IFLNK {
            return Ok(true);
        }
        match self.read_symlink(inode) {
            Ok(_) => Ok(true),
            Err(Stop::Read(e)) => {
                self.salvage_drop(inode.ino, InodeFault::Unreadable(e.to_string()))?;
                Ok(false)
            }
            Err(Stop::Bad(why)) => {
                self.salvage_drop(inode.ino, InodeFault::Unreadable(why))?;
                Ok(false)
            }
            Err(other) => Err(other),
        }
    }

    /// For a rescue: whether `src` must not be cloned from for extent
    /// `fe`: an inode of the send snapshot left out, or data of which some
    /// was read as zeros (the range is then read, and its loss recorded,
    /// for this file too).
    pub(super) fn salvage_bad_source(&self, src: &Source, fe: &FileExtentItem<'_>) -> bool {
        let (Some(s), Some(l)) = (self.salvage.as_ref(), self.losses()) else {
            return false;
        };
        let ours = self.clones.roots.get(src.root).is_some_and(|r| r.is_send);
        (ours && s.dropped.contains(&src.ino)) || l.zeroed_in(fe.disk_bytenr(), fe.disk_num_bytes())
    }

    /// For a rescue: whether inode `ino` was left out.
    pub(super) fn salvage_dropped(&self, ino: u64) -> bool {
        self.salvage
            .as_ref()
            .is_some_and(|s| s.dropped.contains(&ino))
    }

    /// For a rescue whose subvolume's root directory has no inode item:
    /// records it (the subvolume is still sent, its root without its
    /// owner, mode and times) and says so.
    pub(super) fn salvage_root_lost(&mut self) -> bool {
        let Some(s) = self.salvage.as_mut() else {
            return false;
        };
        s.dropped.insert(objectid::FIRST_FREE);
        // Paths below it still need its facts: a directory of the
        // subvolume's generation, owned by root.
        self.send.assume(
            objectid::FIRST_FREE,
            InodeInfo {
                gen: self.send.tree.generation,
                mode: S_IFDIR | 0o755,
                nlink: 1,
                ..InodeInfo::default()
            },
        );
        self.lose_inode(objectid::FIRST_FREE, InodeFault::NoInodeItem);
        true
    }

    /// Records inode `ino` of the send snapshot as left out for `fault`.
    fn lose_inode(&self, ino: u64, fault: InodeFault) {
        if let Some(l) = self.losses() {
            l.add_inode(InodeLoss {
                tree: self.send.id(),
                ino,
                fault,
            });
        }
    }
}
