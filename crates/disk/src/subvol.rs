//! Subvolumes: their root items, names and paths, lookup by path, id or uuid,
//! and the `btrfs subvolume list` view of them.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::error::{Error, Result, SubvolWanted};
use crate::fs::{Filesystem, RootLocation};
use crate::items::{
    inode_refs, key_type, objectid, uuid_key, uuid_subvols, RootItem, RootRef, Timespec,
    ROOT_SUBVOL_DEAD, ROOT_SUBVOL_RDONLY,
};
use crate::key::Key;
use crate::tree::Tree;

/// Where a subvolume is linked in its parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubvolLink {
    /// The parent subvolume id.
    pub parent: u64,
    /// The directory inode in the parent holding the entry.
    pub dirid: u64,
    /// The entry's DIR_INDEX.
    pub sequence: u64,
    /// The entry name.
    pub name: Vec<u8>,
}

/// One subvolume (or snapshot) and its ROOT_ITEM fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subvolume {
    /// Subvolume (tree) id.
    pub id: u64,
    /// Offset of its ROOT_ITEM key (otransid for snapshots, else 0).
    pub key_offset: u64,
    /// Where its tree's root is.
    pub root: RootLocation,
    /// Root item flags.
    pub flags: u64,
    /// Root item refs (0 = being deleted).
    pub refs: u32,
    /// uuid.
    pub uuid: Uuid,
    /// uuid of the subvolume it is a snapshot of.
    pub parent_uuid: Uuid,
    /// uuid of the subvolume it was received from.
    pub received_uuid: Uuid,
    /// Transid of the last change.
    pub ctransid: u64,
    /// Transid of creation.
    pub otransid: u64,
    /// Send transid (received subvolumes).
    pub stransid: u64,
    /// Receive transid.
    pub rtransid: u64,
    /// Change time.
    pub ctime: Timespec,
    /// Creation time.
    pub otime: Timespec,
    /// Send time.
    pub stime: Timespec,
    /// Receive time.
    pub rtime: Timespec,
    /// Where it is linked, if it is (the top level is not).
    pub link: Option<SubvolLink>,
    /// Path from the top level ("" for the top level itself), if resolvable.
    pub path: Option<Vec<u8>>,
}

impl Subvolume {
    /// The generation of its root (what `btrfs subvolume list` calls gen).
    pub fn generation(&self) -> u64 {
        self.root.generation
    }
    /// Whether it is read-only.
    pub fn is_readonly(&self) -> bool {
        self.flags & ROOT_SUBVOL_RDONLY != 0
    }
    /// Whether it is being deleted.
    pub fn is_dead(&self) -> bool {
        self.flags & ROOT_SUBVOL_DEAD != 0 || self.refs == 0
    }
    /// The path as text (lossy for non-UTF-8 names).
    pub fn path_lossy(&self) -> String {
        self.path
            .as_deref()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default()
    }

    /// How messages name it: `path (subvolume N)`, `subvolume N` when it
    /// has no path, `the top level (subvolume 5)`.
    pub fn label(&self) -> String {
        let p = self.path_lossy();
        if self.id == crate::items::objectid::FS_TREE {
            "the top level (subvolume 5)".to_string()
        } else if p.is_empty() {
            format!("subvolume {}", self.id)
        } else {
            format!("{p} (subvolume {})", self.id)
        }
    }
}

/// How to pick a subvolume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubvolSelector {
    /// By path from the top level (`snaps/s1`, optional leading `/`; `/` is the top level).
    Path(std::path::PathBuf),
    /// By id.
    Id(u64),
    /// By uuid (or received uuid).
    Uuid(Uuid),
}

fn is_subvol_id(id: u64) -> bool {
    id == objectid::FS_TREE || (objectid::FIRST_FREE..=objectid::LAST_FREE).contains(&id)
}

impl Filesystem {
    /// Subvolume `id` (5 is the top level), with its link and path.
    pub fn subvolume(&self, id: u64) -> Result<Subvolume> {
        self.with_retry(|| self.subvolume_once(id))
    }

    fn subvolume_once(&self, id: u64) -> Result<Subvolume> {
        if !is_subvol_id(id) {
            return Err(Error::NoSubvolume(SubvolWanted::Id(id)));
        }
        let mut sv = self
            .subvolume_bare(id)?
            .ok_or(Error::NoSubvolume(SubvolWanted::Id(id)))?;
        sv.link = self.backref(id)?;
        sv.path = self.subvol_path(id, &mut BTreeMap::new(), 0)?;
        Ok(sv)
    }

    /// Subvolume `id` as its ROOT_ITEM alone has it (no link or path);
    /// `None` when the root tree has none.
    pub fn subvolume_item(&self, id: u64) -> Result<Option<Subvolume>> {
        self.subvolume_bare(id)
    }

    fn subvolume_bare(&self, id: u64) -> Result<Option<Subvolume>> {
        let Some((key, loc, item)) = self.find_root_item(id)? else {
            return Ok(None);
        };
        let ri = RootItem::parse(item.data()).map_err(|reason| Error::BadItem {
            tree: objectid::ROOT_TREE,
            key,
            reason,
        })?;
        Ok(Some(subvol_from(id, key.offset, loc, &ri)))
    }

    fn backref(&self, id: u64) -> Result<Option<SubvolLink>> {
        let rt = self.root_tree();
        let from = Key::new(id, key_type::ROOT_BACKREF, 0);
        let to = Key::new(id, key_type::ROOT_BACKREF, u64::MAX);
        if let Some(item) = rt.range(from, to).next() {
            let item = item?;
            return Ok(Some(link_from(item.key.offset, item.key, item.data())?));
        }
        Ok(None)
    }

    /// Path of subvolume `id` from the top level, following ROOT_BACKREFs.
    fn subvol_path(
        &self,
        id: u64,
        memo: &mut BTreeMap<u64, Option<Vec<u8>>>,
        depth: usize,
    ) -> Result<Option<Vec<u8>>> {
        if id == objectid::FS_TREE {
            return Ok(Some(Vec::new()));
        }
        if let Some(p) = memo.get(&id) {
            return Ok(p.clone());
        }
        if depth > 256 {
            return Ok(None);
        }
        let Some(link) = self.backref(id)? else {
            memo.insert(id, None);
            return Ok(None);
        };
        let Some(mut path) = self.subvol_path(link.parent, memo, depth + 1)? else {
            memo.insert(id, None);
            return Ok(None);
        };
        let parent = match self.subvolume_bare(link.parent)? {
            Some(p) => p,
            None => {
                memo.insert(id, None);
                return Ok(None);
            }
        };
        let tree = self.tree_at(link.parent, parent.root);
        let Some(dir) = dir_path(&tree, link.dirid)? else {
            memo.insert(id, None);
            return Ok(None);
        };
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&dir);
        path.extend_from_slice(&link.name);
        memo.insert(id, Some(path.clone()));
        Ok(Some(path))
    }

    /// Every linked subvolume except the top level, by id, with paths — what
    /// `btrfs subvolume list` shows.
    pub fn subvolumes(&self) -> Result<Vec<Subvolume>> {
        self.with_retry(|| self.subvolumes_once())
    }

    fn subvolumes_once(&self) -> Result<Vec<Subvolume>> {
        let rt = self.root_tree();
        let mut links: BTreeMap<u64, SubvolLink> = BTreeMap::new();
        let mut roots: BTreeMap<u64, Subvolume> = BTreeMap::new();
        let from = Key::new(objectid::FIRST_FREE, 0, 0);
        let to = Key::new(objectid::LAST_FREE, u8::MAX, u64::MAX);
        for item in rt.range(from, to) {
            let item = item?;
            let k = item.key;
            match k.item_type {
                key_type::ROOT_ITEM => {
                    let ri = RootItem::parse(item.data())
                        .map_err(Error::bad_item(objectid::ROOT_TREE, k))?;
                    let loc = RootLocation {
                        bytenr: ri.bytenr(),
                        generation: ri.generation(),
                        level: ri.level(),
                    };
                    // The last ROOT_ITEM of an id wins.
                    roots.insert(k.objectid, subvol_from(k.objectid, k.offset, loc, &ri));
                }
                key_type::ROOT_BACKREF => {
                    links
                        .entry(k.objectid)
                        .or_insert(link_from(k.offset, k, item.data())?);
                }
                _ => {}
            }
        }
        let mut memo = BTreeMap::new();
        let mut out = Vec::new();
        for (id, mut sv) in roots {
            let Some(link) = links.remove(&id) else {
                continue;
            };
            sv.link = Some(link);
            sv.path = self.subvol_path(id, &mut memo, 0)?;
            if sv.path.is_some() {
                out.push(sv);
            }
        }
        Ok(out)
    }

    /// Finds a subvolume by path, id or uuid.
    pub fn find_subvolume(&self, sel: &SubvolSelector) -> Result<Subvolume> {
        match sel {
            SubvolSelector::Id(id) => self.subvolume(*id),
            SubvolSelector::Path(p) => {
                // `./a`, `/a`, `a/`, `a//b` and `a/./b` name the same one.
                let want = std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())
                    .split(|b| *b == b'/')
                    .filter(|c| !c.is_empty() && *c != b".")
                    .collect::<Vec<_>>()
                    .join(&b'/');
                if want.is_empty() {
                    return self.subvolume(objectid::FS_TREE);
                }
                self.subvolumes()?
                    .into_iter()
                    .find(|s| s.path.as_deref() == Some(&want[..]))
                    .ok_or_else(|| Error::NoSubvolume(SubvolWanted::Path(p.clone())))
            }
            SubvolSelector::Uuid(u) => {
                // The nil uuid names no subvolume: it is what a subvolume
                // that was never received (or a snapshot of nothing) holds
                // as its received (or parent) uuid.
                if u.is_nil() {
                    return Err(Error::NoSubvolume(SubvolWanted::Uuid(*u)));
                }
                for t in [
                    key_type::UUID_KEY_SUBVOL,
                    key_type::UUID_KEY_RECEIVED_SUBVOL,
                ] {
                    if let Some(ids) = self.uuid_tree_lookup(u, t)? {
                        for id in ids {
                            if let Ok(sv) = self.subvolume(id) {
                                if sv.uuid == *u || sv.received_uuid == *u {
                                    return Ok(sv);
                                }
                            }
                        }
                    }
                }
                // The UUID tree may be missing or stale: scan the root items.
                let mut all = self.subvolumes()?;
                if let Ok(top) = self.subvolume(objectid::FS_TREE) {
                    all.push(top);
                }
                all.iter()
                    .find(|s| s.uuid == *u)
                    .or_else(|| all.iter().find(|s| s.received_uuid == *u))
                    .cloned()
                    .ok_or(Error::NoSubvolume(SubvolWanted::Uuid(*u)))
            }
        }
    }

    fn uuid_tree_lookup(&self, u: &Uuid, item_type: u8) -> Result<Option<Vec<u64>>> {
        self.with_retry(|| self.uuid_tree_lookup_once(u, item_type))
    }

    fn uuid_tree_lookup_once(&self, u: &Uuid, item_type: u8) -> Result<Option<Vec<u64>>> {
        let Some(t) = self.uuid_tree() else {
            return Ok(None);
        };
        let key = uuid_key(u, item_type);
        match t.search(&key)? {
            Some(item) => Ok(Some(uuid_subvols(item.data()).map_err(|reason| {
                Error::BadItem {
                    tree: objectid::UUID_TREE,
                    key,
                    reason,
                }
            })?)),
            None => Ok(None),
        }
    }

    /// The fs tree of a subvolume.
    pub fn fs_tree(&self, sv: &Subvolume) -> Tree<'_> {
        self.tree_at(sv.id, sv.root)
    }

    /// `btrfs subvolume list -p -u -q -R` output for this filesystem.
    pub fn list_text(&self) -> Result<String> {
        let mut s = String::new();
        // progs prints every uuid column as %-36s, so "-" is padded too.
        let u = |u: &Uuid| {
            if u.is_nil() {
                format!("{:<36}", "-")
            } else {
                u.hyphenated().to_string()
            }
        };
        for sv in self.subvolumes()? {
            let parent = sv.link.as_ref().map_or(0, |l| l.parent);
            s.push_str(&format!(
                "ID {} gen {} parent {} top level {} parent_uuid {} received_uuid {} uuid {} path {}\n",
                sv.id,
                sv.generation(),
                parent,
                parent,
                u(&sv.parent_uuid),
                u(&sv.received_uuid),
                u(&sv.uuid),
                sv.path_lossy()
            ));
        }
        Ok(s)
    }
}

fn subvol_from(id: u64, key_offset: u64, root: RootLocation, ri: &RootItem<'_>) -> Subvolume {
    Subvolume {
        id,
        key_offset,
        root,
        flags: ri.flags(),
        refs: ri.refs(),
        uuid: ri.uuid(),
        parent_uuid: ri.parent_uuid(),
        received_uuid: ri.received_uuid(),
        ctransid: ri.ctransid(),
        otransid: ri.otransid(),
        stransid: ri.stransid(),
        rtransid: ri.rtransid(),
        ctime: ri.ctime(),
        otime: ri.otime(),
        stime: ri.stime(),
        rtime: ri.rtime(),
        link: None,
        path: None,
    }
}

fn link_from(parent: u64, key: Key, data: &[u8]) -> Result<SubvolLink> {
    let r = RootRef::parse(data).map_err(|reason| Error::BadItem {
        tree: objectid::ROOT_TREE,
        key,
        reason,
    })?;
    Ok(SubvolLink {
        parent,
        dirid: r.dirid(),
        sequence: r.sequence(),
        name: r.name().to_vec(),
    })
}

/// Path of directory `dir` inside `tree` relative to its root, with a trailing
/// `/` unless it is the root itself.
pub(crate) fn dir_path(tree: &Tree<'_>, dir: u64) -> Result<Option<Vec<u8>>> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut cur = dir;
    while cur != objectid::FIRST_FREE {
        if parts.len() > 4096 {
            return Ok(None);
        }
        let from = Key::new(cur, key_type::INODE_REF, 0);
        let to = Key::new(cur, key_type::INODE_REF, u64::MAX);
        let Some(item) = tree.range(from, to).next() else {
            return Ok(None);
        };
        let item = item?;
        let refs =
            inode_refs(item.key.offset, item.data()).map_err(Error::bad_item(tree.id, item.key))?;
        let Some(r) = refs.first() else {
            return Ok(None);
        };
        parts.push(r.name.to_vec());
        if item.key.offset == cur {
            return Ok(None);
        }
        cur = item.key.offset;
    }
    let mut out = Vec::new();
    for p in parts.iter().rev() {
        out.extend_from_slice(p);
        out.push(b'/');
    }
    Ok(Some(out))
}
