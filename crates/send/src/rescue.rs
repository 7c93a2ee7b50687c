//! The loss report of a rescue send (`rsend --rescue`): what the reader
//! could not read ([`btrfs_disk::rescue::Losses`]) and what the send left
//! out, told by file: the tree blocks lost and the key range each covered,
//! the inodes whose items were in them, the names of inodes left out, and
//! the file ranges written as zeros or read without a checksum.

use std::collections::{BTreeMap, BTreeSet};

use btrfs_disk::items::{dir_entries, objectid};
use btrfs_disk::key::key_type;
use btrfs_disk::lookup::Lookup;
use btrfs_disk::rescue::{BlockLoss, DataFate, InodeFault, Losses};
use btrfs_disk::{Filesystem, Key, Subvolume};
use btrfs_text::escape::escape;
use btrfs_text::json::bytes_value;
use serde_json::{json, Value};

/// Deepest directory a path is followed up from (a loop in a damaged tree).
const MAX_DEPTH: usize = 4096;

/// One line of the loss report.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    /// What was lost: `tree_block`, `inode`, `name`, `data`, `unverified`.
    pub kind: &'static str,
    /// The subvolume (for losses in one), by path.
    pub subvol: Option<String>,
    /// The record as JSON (with `kind` and `subvol`).
    pub json: Value,
    /// The record for people, one line.
    pub text: String,
}

/// The losses of a rescue send of `svs`, subvolume by subvolume (the tree
/// blocks of other trees last). Reads the subvolumes' trees again where
/// blocks were lost, to tell which inodes they held and to find the names
/// of inodes left out.
pub fn report(fs: &Filesystem, svs: &[Subvolume]) -> Result<Vec<Loss>, btrfs_disk::Error> {
    let Some(losses) = fs.rescue() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let blocks = losses.blocks();
    for sv in svs {
        SubvolReport::new(fs, sv, losses, &blocks).run(&mut out)?;
    }
    for b in blocks
        .iter()
        .filter(|b| !svs.iter().any(|s| s.id == b.tree))
    {
        out.push(block_loss(b, None, None, None));
    }
    Ok(out)
}

/// A line of the stderr summary of `report`: counts by kind.
pub fn summary(report: &[Loss]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for l in report {
        *counts.entry(l.kind).or_default() += 1;
    }
    let say = |kind: &str, one: &str, many: &str| {
        counts.get(kind).map(|&n| {
            if n == 1 {
                format!("1 {one}")
            } else {
                format!("{n} {many}")
            }
        })
    };
    let parts: Vec<String> = [
        say("tree_block", "tree block lost", "tree blocks lost"),
        say(
            "inode",
            "inode damaged or left out",
            "inodes damaged or left out",
        ),
        say("name", "name not kept", "names not kept"),
        say(
            "data",
            "file range written as zeros",
            "file ranges written as zeros",
        ),
        say(
            "unverified",
            "file range read without a checksum",
            "file ranges read without a checksum",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "nothing was lost".into()
    } else {
        parts.join(", ")
    }
}

fn key_text(k: &Key) -> String {
    k.to_string()
}

fn block_loss(
    b: &BlockLoss,
    subvol: Option<&str>,
    next: Option<Key>,
    inodes: Option<(u64, u64)>,
) -> Loss {
    let json = json!({
        "kind": "tree_block",
        "subvol": subvol,
        "tree": b.tree,
        "logical": b.logical,
        "level": b.level,
        "generation": b.generation,
        "first_key": b.first_key.as_ref().map(key_text),
        "next_key": next.as_ref().map(key_text),
        "inodes": inodes.map(|(a, z)| json!([a, z])),
        "mirrors": b.mirrors,
        "error": b.why,
    });
    let range = match (b.first_key, next) {
        (Some(f), Some(n)) => format!(", keys {} to {}", key_text(&f), key_text(&n)),
        (Some(f), None) => format!(", keys from {}", key_text(&f)),
        (None, _) => ", the whole tree".into(),
    };
    Loss {
        kind: "tree_block",
        subvol: subvol.map(str::to_owned),
        json,
        text: format!(
            "tree {} block at logical {} (level {}{range}) lost on all {} copies: {}",
            b.tree, b.logical, b.level, b.mirrors, b.why
        ),
    }
}

/// The item types whose keys of inode `ino` fall in `[first, next)`.
fn types_in(ino: u64, first: Key, next: Option<Key>) -> Vec<&'static str> {
    // (first type, its lowest offset, last type, what they hold); an
    // INODE_REF's offset is its directory's inode number.
    const TYPES: [(u8, u64, u8, &str); 5] = [
        (key_type::INODE_ITEM, 0, key_type::INODE_ITEM, "inode item"),
        (
            key_type::INODE_REF,
            objectid::FIRST_FREE,
            key_type::INODE_EXTREF,
            "names",
        ),
        (key_type::XATTR_ITEM, 0, key_type::XATTR_ITEM, "xattrs"),
        (
            key_type::DIR_ITEM,
            0,
            key_type::DIR_INDEX,
            "directory entries",
        ),
        (
            key_type::EXTENT_DATA,
            0,
            key_type::EXTENT_DATA,
            "file extents",
        ),
    ];
    TYPES
        .iter()
        .filter(|(lo, min, hi, _)| {
            let a = Key::new(ino, *lo, *min);
            let z = Key::new(ino, *hi, u64::MAX);
            z >= first && next.is_none_or(|n| a < n)
        })
        .map(|(_, _, _, name)| *name)
        .collect()
}

/// The file range of inode `ino` (of `size` bytes) whose extent items fall
/// in `[first, next)`.
fn extents_in(ino: u64, first: Key, next: Option<Key>, size: u64) -> Option<(u64, u64)> {
    let a = if first.objectid == ino && first.item_type == key_type::EXTENT_DATA {
        first.offset
    } else {
        0
    };
    let z = match next {
        Some(n) if n.objectid == ino && n.item_type == key_type::EXTENT_DATA => n.offset,
        _ => size,
    };
    (a < z.min(size)).then_some((a, z.min(size) - a))
}

/// Inodes with items around lost blocks: for each, the first key of each
/// such block and the key after it.
type Touched = BTreeMap<u64, Vec<(Key, Option<Key>)>>;

struct SubvolReport<'a, 'fs> {
    fs: &'fs Filesystem,
    sv: &'a Subvolume,
    label: String,
    losses: &'a Losses,
    blocks: Vec<&'a BlockLoss>,
    lookup: Lookup<'fs>,
}

impl<'a, 'fs> SubvolReport<'a, 'fs> {
    fn new(
        fs: &'fs Filesystem,
        sv: &'a Subvolume,
        losses: &'a Losses,
        all: &'a [BlockLoss],
    ) -> Self {
        SubvolReport {
            fs,
            sv,
            label: sv.path_lossy(),
            losses,
            blocks: all.iter().filter(|b| b.tree == sv.id).collect(),
            lookup: Lookup::new(fs.fs_tree(sv)),
        }
    }

    /// The path of `ino` from the subvolume's root by first names, when
    /// every directory on the way is there.
    fn path(&mut self, ino: u64) -> Option<Vec<u8>> {
        if ino == objectid::FIRST_FREE {
            return Some(b".".to_vec());
        }
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut d = ino;
        while d != objectid::FIRST_FREE {
            if parts.len() > MAX_DEPTH {
                return None;
            }
            let r = self.lookup.first_ref(d).ok()??;
            parts.push(r.name.to_vec());
            d = r.dir;
        }
        parts.reverse();
        Some(parts.join(&b'/'))
    }

    /// The path of directory `dir` with a trailing slash (empty for the
    /// root): by first names, or by the entries `found` for directories
    /// left out; `<directory inode N>/` where neither names it.
    fn dir_path(&mut self, dir: u64, found: &BTreeMap<u64, (u64, &[u8])>) -> Vec<u8> {
        let mut tail: Vec<&[u8]> = Vec::new();
        let mut d = dir;
        let mut head = loop {
            if d == objectid::FIRST_FREE {
                break Vec::new();
            }
            if let Some(mut p) = self.path(d) {
                p.push(b'/');
                break p;
            }
            match found.get(&d) {
                Some((up, name)) if tail.len() < MAX_DEPTH => {
                    tail.push(name);
                    d = *up;
                }
                _ => break format!("<directory inode {d}>/").into_bytes(),
            }
        };
        for name in tail.iter().rev() {
            head.extend_from_slice(name);
            head.push(b'/');
        }
        head
    }

    fn path_value(&mut self, ino: u64) -> Value {
        self.path(ino).map_or(Value::Null, |p| bytes_value(&p))
    }

    fn path_text(&mut self, ino: u64) -> String {
        self.path(ino)
            .map_or_else(|| format!("inode {ino} (path unknown)"), |p| escape(&p))
    }

    fn loss(&self, kind: &'static str, fields: Value, text: String) -> Loss {
        let mut json = json!({ "kind": kind, "subvol": self.label });
        if let (Value::Object(m), Value::Object(f)) = (&mut json, fields) {
            m.extend(f);
        }
        Loss {
            kind,
            subvol: Some(self.label.clone()),
            json,
            text: format!("{}: {text}", self.label),
        }
    }

    fn run(mut self, out: &mut Vec<Loss>) -> Result<(), btrfs_disk::Error> {
        let tree = self.fs.fs_tree(self.sv);
        let dropped: BTreeMap<u64, InodeFault> = self
            .losses
            .inodes()
            .into_iter()
            .filter(|i| i.tree == self.sv.id)
            .map(|i| (i.ino, i.fault))
            .collect();
        let (spans, mut touched) = self.lost_blocks(&tree, out)?;
        for &ino in dropped.keys() {
            touched.entry(ino).or_default();
        }
        let names = self.names_not_sent(&tree, &spans, &dropped)?;
        for ino in names.keys() {
            touched.entry(*ino).or_default();
        }
        // Inodes with items in a lost block, left out, or named only.
        for (ino, in_ranges) in &touched {
            self.inode_loss(*ino, in_ranges, dropped.get(ino), &names, out);
        }
        self.data_losses(out);
        Ok(())
    }

    /// The loss of each lost block, into `out`; the inode ranges they
    /// held, and the inodes whose items survive around each (with the
    /// block's first key and the key after it).
    fn lost_blocks(
        &mut self,
        tree: &btrfs_disk::Tree<'_>,
        out: &mut Vec<Loss>,
    ) -> Result<(Vec<(u64, u64)>, Touched), btrfs_disk::Error> {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut touched = Touched::new();
        for b in self.blocks.clone() {
            let first = b.first_key.unwrap_or(Key::MIN);
            let next = tree.cursor().seek_ge(&first)?.map(|i| i.key);
            let last_ino = match next {
                Some(n) if n > Key::new(n.objectid, key_type::INODE_ITEM, 0) => n.objectid,
                Some(n) => n.objectid.saturating_sub(1),
                None => objectid::LAST_FREE,
            };
            let lo = first.objectid.max(objectid::FIRST_FREE);
            let hi = last_ino.min(objectid::LAST_FREE);
            out.push(block_loss(
                b,
                Some(&self.label),
                next,
                (lo <= hi).then_some((lo, hi)),
            ));
            spans.push((lo, hi));
            // The inodes whose items survive around the range.
            if lo <= hi {
                let to = Key::new(hi, u8::MAX, u64::MAX);
                let mut last = None;
                for item in tree.range(Key::new(lo, 0, 0), to) {
                    let ino = item?.key.objectid;
                    if last != Some(ino) {
                        touched.entry(ino).or_default().push((first, next));
                        last = Some(ino);
                    }
                }
            }
        }
        Ok((spans, touched))
    }

    /// The paths of inodes not sent, by inode: their names kept by the
    /// walk and found in directory entries anywhere in the tree (in the
    /// inode ranges `spans` of lost blocks).
    fn names_not_sent(
        &mut self,
        tree: &btrfs_disk::Tree<'_>,
        spans: &[(u64, u64)],
        dropped: &BTreeMap<u64, InodeFault>,
    ) -> Result<BTreeMap<u64, Vec<Vec<u8>>>, btrfs_disk::Error> {
        let mut named: BTreeSet<(u64, u64, Vec<u8>)> = BTreeSet::new();
        for n in self
            .losses
            .names()
            .into_iter()
            .filter(|n| n.tree == self.sv.id)
        {
            named.insert((n.ino, n.dir, n.name));
        }
        if !spans.is_empty() {
            self.entries_into(tree, spans, dropped, &mut named)?;
        }
        // A directory left out is named by an entry found for it.
        let mut found: BTreeMap<u64, (u64, &[u8])> = BTreeMap::new();
        for (ino, dir, name) in &named {
            found.entry(*ino).or_insert((*dir, name));
        }
        let mut names: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        for (ino, dir, name) in &named {
            let mut path = self.dir_path(*dir, &found);
            path.extend_from_slice(name);
            names.entry(*ino).or_default().push(path);
        }
        Ok(names)
    }

    /// The loss of inode `ino`, into `out`: its items in the lost blocks
    /// `in_ranges` (first key, key after), why it was left out (`fault`),
    /// and the names found of it (`names`).
    fn inode_loss(
        &mut self,
        ino: u64,
        in_ranges: &[(Key, Option<Key>)],
        fault: Option<&InodeFault>,
        names: &BTreeMap<u64, Vec<Vec<u8>>>,
        out: &mut Vec<Loss>,
    ) {
        let info = self.lookup.inode(ino).ok().flatten();
        let is_dir = info.is_some_and(|i| i.mode & 0o170000 == 0o040000);
        let mut lost: Vec<&str> = Vec::new();
        let mut extents = Vec::new();
        for &(first, next) in in_ranges {
            let types = types_in(ino, first, next);
            for t in &types {
                let pointless = info.is_some() && !is_dir && *t == "directory entries";
                if !lost.contains(t) && !pointless {
                    lost.push(t);
                }
            }
            if let (Some(i), false) = (&info, is_dir) {
                if types.contains(&"file extents") {
                    extents.extend(extents_in(ino, first, next, i.size));
                }
            }
        }
        let named_only = info.is_none() && fault.is_none();
        if fault.is_none() && lost.is_empty() && !named_only && !names.contains_key(&ino) {
            return;
        }
        let why = match fault {
            Some(InodeFault::NoInodeItem) => "its inode item was lost".to_string(),
            Some(InodeFault::NoName) if lost.contains(&"names") => {
                "its names were lost".to_string()
            }
            Some(InodeFault::NoName) => {
                "it has no name in a directory that can be reached".to_string()
            }
            Some(InodeFault::Unreadable(e)) => e.clone(),
            None if named_only => "all its items were lost".to_string(),
            None if lost.is_empty() => {
                "a name of it is in a directory that cannot be reached".to_string()
            }
            None => format!("lost: {}", lost.join(", ")),
        };
        if named_only && lost.is_empty() {
            lost.push("inode item");
        }
        let sent = fault.is_none() && !named_only;
        let paths: Vec<Vec<u8>> = match (sent, self.path(ino)) {
            (true, Some(p)) => vec![p],
            (_, own) => {
                let mut v: Vec<Vec<u8>> = own.into_iter().collect();
                for n in names.get(&ino).into_iter().flatten() {
                    if !v.contains(n) {
                        v.push(n.clone());
                    }
                }
                v
            }
        };
        let shown = paths
            .first()
            .map_or_else(|| format!("inode {ino} (no name found)"), |p| escape(p));
        let text = format!(
            "{shown}: {} ({why})",
            if sent {
                "sent without what was lost"
            } else {
                "not sent"
            }
        );
        out.push(self.loss(
            "inode",
            json!({
                "ino": ino,
                "path": paths.first().map(|p| bytes_value(p)),
                "paths": paths.iter().map(|p| bytes_value(p)).collect::<Vec<_>>(),
                "sent": sent,
                "lost": lost,
                "why": why,
                "ranges": extents.iter().map(|(a, n)| json!([a, n])).collect::<Vec<_>>(),
            }),
            text,
        ));
        if sent {
            // Names of a sent inode that were not kept (their
            // directory cannot be reached).
            for path in names.get(&ino).into_iter().flatten() {
                let text = format!("{}: name not kept", escape(path));
                out.push(self.loss(
                    "name",
                    json!({ "ino": ino, "path": bytes_value(path) }),
                    text,
                ));
            }
        }
    }

    /// The losses of file data, into `out`.
    fn data_losses(&mut self, out: &mut Vec<Loss>) {
        for d in self
            .losses
            .data()
            .into_iter()
            .filter(|d| d.tree == self.sv.id)
        {
            let (kind, what) = match d.fate {
                DataFate::Zeroed => ("data", "written as zeros"),
                DataFate::Unverified => ("unverified", "read without a checksum to check it"),
            };
            let path = self.path_value(d.ino);
            let text = format!(
                "{}: bytes {}..{} {what} (logical {}{})",
                self.path_text(d.ino),
                d.offset,
                d.offset + d.len,
                d.logical,
                if d.compressed {
                    ", a compressed extent"
                } else {
                    ""
                }
            );
            out.push(self.loss(
                kind,
                json!({
                    "ino": d.ino,
                    "path": path,
                    "ranges": [[d.offset, d.len]],
                    "logical": d.logical,
                    "compressed": d.compressed,
                    "mirrors": d.mirrors,
                }),
                text,
            ));
        }
    }

    /// Adds to `named` the directory entries (anywhere in the tree) that
    /// point at inodes not sent: left out, or whose inode item is gone.
    fn entries_into(
        &mut self,
        tree: &btrfs_disk::Tree<'_>,
        spans: &[(u64, u64)],
        dropped: &BTreeMap<u64, InodeFault>,
        named: &mut BTreeSet<(u64, u64, Vec<u8>)>,
    ) -> Result<(), btrfs_disk::Error> {
        let mut cursor = tree.cursor();
        let mut next = cursor.seek_ge(&Key::MIN)?;
        while let Some(item) = next {
            if item.key.item_type == key_type::DIR_INDEX {
                let entries = dir_entries(item.data())
                    .map_err(btrfs_disk::Error::bad_item(tree.id, item.key))?;
                for e in entries {
                    let target = e.location.objectid;
                    let gone = e.location.item_type == key_type::INODE_ITEM
                        && (dropped.contains_key(&target)
                            || (spans.iter().any(|(a, z)| (*a..=*z).contains(&target))
                                && self.lookup.inode(target).ok().flatten().is_none()));
                    if gone {
                        named.insert((target, item.key.objectid, e.name.to_vec()));
                    }
                }
            }
            next = cursor.next_item()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_and_extents_a_key_range_holds() {
        let first = Key::new(300, key_type::XATTR_ITEM, 5);
        let next = Some(Key::new(300, key_type::EXTENT_DATA, 65536));
        assert_eq!(
            types_in(300, first, next),
            vec!["xattrs", "directory entries", "file extents"]
        );
        assert_eq!(extents_in(300, first, next, 1 << 20), Some((0, 65536)));
        assert!(types_in(299, first, next).is_empty());
        // A range from inside one inode's extents into the next inode.
        let first = Key::new(300, key_type::EXTENT_DATA, 8192);
        let next = Some(Key::new(301, key_type::INODE_REF, 256));
        assert_eq!(
            extents_in(300, first, next, 20000),
            Some((8192, 20000 - 8192))
        );
        assert_eq!(types_in(301, first, next), vec!["inode item"]);
        assert_eq!(types_in(302, first, next), Vec::<&str>::new());
    }
}
