//! Extended attributes: send.c's process_new_xattr,
//! process_deleted_xattr, process_changed_xattr (with
//! process_all_new_xattrs for a re-created inode) and send_capabilities,
//! which sends `security.capability` last, after CHOWN cleared it.

use super::cmd::Cmd;
use super::inode::Walk;
use super::stop::Result;
use btrfs_disk::csum::name_hash;
use btrfs_disk::error::Error;
use btrfs_disk::items::{dir_entries, key_type};
use btrfs_disk::tree::Item;
use btrfs_disk::Key;

const XATTR_CAPS: &[u8] = b"security.capability";
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
/// posix_acl_xattr_header with POSIX_ACL_XATTR_VERSION (2) and no entries.
const EMPTY_ACL: [u8; 4] = [2, 0, 0, 0];

impl Walk<'_, '_> {
    /// The kernel's send_capabilities: `security.capability` after CHOWN,
    /// which clears it on the receiver.
    pub(super) fn send_capabilities(&mut self) -> Result<()> {
        let data = match self.cur.caps.take() {
            Some(d) => Some(d),
            None if self.cur.new && !self.cur.new_gen => None,
            None => {
                let key = Key::new(self.cur.ino, key_type::XATTR_ITEM, name_hash(XATTR_CAPS));
                match self.send.tree.search(&key)? {
                    None => None,
                    Some(item) => dir_entries(item.data())
                        .map_err(Error::bad_item(self.send.id(), key))?
                        .iter()
                        .find(|e| e.name == XATTR_CAPS)
                        .map(|e| e.data.to_vec()),
                }
            }
        };
        if let Some(data) = data {
            let path = self.cur_path(self.cur.ino, self.cur.gen)?;
            self.push(Cmd::SetXattr {
                path,
                name: XATTR_CAPS.to_vec(),
                data,
            })?;
        }
        Ok(())
    }

    /// The new xattrs of one XATTR_ITEM (`security.capability` waits for
    /// the end of the inode; an empty POSIX ACL goes as its 4-byte header).
    pub(super) fn new_xattrs(&mut self, item: Option<&Item>) -> Result<()> {
        let Some(item) = item else { return Ok(()) };
        let entries =
            dir_entries(item.data()).map_err(Error::bad_item(self.send.id(), item.key))?;
        for e in entries {
            self.set_xattr(e.name, e.data)?;
        }
        Ok(())
    }

    /// SET_XATTR of one xattr of the current inode.
    fn set_xattr(&mut self, name: &[u8], data: &[u8]) -> Result<()> {
        if name == XATTR_CAPS {
            if self.cur.new {
                self.cur.caps = Some(data.to_vec());
            }
            return Ok(());
        }
        let data = if data.is_empty() && (name == ACL_ACCESS || name == ACL_DEFAULT) {
            EMPTY_ACL.to_vec()
        } else {
            data.to_vec()
        };
        let path = self.cur_path(self.cur.ino, self.cur.gen)?;
        self.push(Cmd::SetXattr {
            path,
            name: name.to_vec(),
            data,
        })
    }

    /// process_deleted_xattr: the xattrs of one XATTR_ITEM of the parent removed.
    pub(super) fn deleted_xattrs(&mut self, item: Option<&Item>) -> Result<()> {
        let Some(item) = item else { return Ok(()) };
        let id = self.parent.as_ref().map_or(0, |p| p.id());
        let entries = dir_entries(item.data()).map_err(Error::bad_item(id, item.key))?;
        for e in entries {
            let path = self.cur_path(self.cur.ino, self.cur.gen)?;
            self.push(Cmd::RemoveXattr {
                path,
                name: e.name.to_vec(),
            })?;
        }
        Ok(())
    }

    /// process_changed_xattr: new or different values set, vanished ones removed.
    pub(super) fn changed_xattrs(
        &mut self,
        left: Option<&Item>,
        right: Option<&Item>,
    ) -> Result<()> {
        let (Some(l), Some(r)) = (left, right) else {
            return Ok(());
        };
        let id = self.parent.as_ref().map_or(0, |p| p.id());
        let new = dir_entries(l.data()).map_err(Error::bad_item(self.send.id(), l.key))?;
        let old = dir_entries(r.data()).map_err(Error::bad_item(id, r.key))?;
        for e in &new {
            match old.iter().find(|o| o.name == e.name) {
                Some(o) if o.data == e.data => {}
                _ => self.set_xattr(e.name, e.data)?,
            }
        }
        for o in &old {
            if !new.iter().any(|e| e.name == o.name) {
                let path = self.cur_path(self.cur.ino, self.cur.gen)?;
                self.push(Cmd::RemoveXattr {
                    path,
                    name: o.name.to_vec(),
                })?;
            }
        }
        Ok(())
    }

    /// Every xattr of the current inode as new (a re-used inode number).
    pub(super) fn process_all_new_xattrs(&mut self) -> Result<()> {
        let ino = self.cur.ino;
        let tree = self.send.tree;
        for item in tree.range(
            Key::new(ino, key_type::XATTR_ITEM, 0),
            Key::new(ino, key_type::XATTR_ITEM, u64::MAX),
        ) {
            let item = item?;
            self.new_xattrs(Some(&item))?;
        }
        Ok(())
    }
}
