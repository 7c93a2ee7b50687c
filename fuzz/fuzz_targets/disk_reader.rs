//! The on-disk reader on hostile input: random and mutated tree blocks
//! (walked as a tree held in memory), and a kernel-made image with mutated
//! metadata (opened, its subvolumes listed, their trees walked, their files
//! read); every other image is read as `rsend --rescue` reads. No input may
//! panic or hang, and every error must say where.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

#[path = "image_mut.rs"]
mod image_mut;

use btrfs_disk::csum::CsumType;
use btrfs_disk::device::Device;
use btrfs_disk::items::{self, key_type};
use btrfs_disk::mem::{set_csum, MemBlocks};
use btrfs_disk::{Filesystem, Key, Options, Tree};
use libfuzzer_sys::fuzz_target;

const NODESIZE: usize = 4096;

/// Whether an error message names a place: a block, tree, device, inode...
fn names_where(msg: &str) -> bool {
    [
        "logical",
        "tree",
        "physical",
        "subvolume",
        "inode",
        "fuzz.img",
        "devid",
        "chunk",
        "superblock",
        "device",
    ]
    .iter()
    .any(|w| msg.contains(w))
}

fn check(e: &btrfs_disk::Error) {
    let msg = e.to_string();
    assert!(names_where(&msg), "error without a place: {msg}");
}

/// Runs the item parsers on one item; they must not panic.
fn parse_item(key: &Key, data: &[u8]) {
    match key.item_type {
        key_type::INODE_ITEM => drop(items::InodeItem::parse(data)),
        key_type::INODE_REF => drop(items::inode_refs(key.offset, data)),
        key_type::INODE_EXTREF => drop(items::inode_extrefs(data)),
        key_type::DIR_ITEM | key_type::DIR_INDEX | key_type::XATTR_ITEM => {
            drop(items::dir_entries(data))
        }
        key_type::EXTENT_DATA => drop(items::FileExtentItem::parse(data)),
        key_type::ROOT_ITEM => drop(items::RootItem::parse(data)),
        key_type::ROOT_REF | key_type::ROOT_BACKREF => drop(items::RootRef::parse(data)),
        key_type::EXTENT_ITEM | key_type::METADATA_ITEM => {
            if let Ok(x) = items::ExtentItem::parse(key.item_type, data) {
                drop(x.inline_refs());
            }
        }
        key_type::DEV_ITEM => drop(items::DevItem::parse(data)),
        key_type::CHUNK_ITEM => drop(btrfs_disk::chunk::Chunk::parse(key.offset, data)),
        key_type::UUID_KEY_SUBVOL | key_type::UUID_KEY_RECEIVED_SUBVOL => {
            drop(items::uuid_subvols(data))
        }
        _ => drop(items::keyed_backref(key, data)),
    }
}

/// Walks a whole tree and a few point lookups, bounded.
fn walk(t: &Tree<'_>, probes: &[u8]) {
    for (n, r) in t.range(Key::MIN, Key::MAX).enumerate() {
        match r {
            Ok(item) => parse_item(&item.key, item.data()),
            Err(e) => {
                check(&e);
                break;
            }
        }
        if n > 20_000 {
            break;
        }
    }
    for p in probes.chunks(3).take(16) {
        let k = Key::new(u64::from(p[0]) * 97, p.get(1).copied().unwrap_or(0), 0);
        match t.search_le(&k) {
            Ok(_) => {}
            Err(e) => check(&e),
        }
    }
}

/// Input = blocks of NODESIZE at logical 4096 * (i + 1); the first is the
/// root. Flag bits of the first byte fix each block's bytenr, fsid and
/// checksum so that mutations get past validation.
fn blocks(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let fsid = uuid::Uuid::from_u128(0x5eed);
    let csum = CsumType::Crc32c;
    let mut m = MemBlocks::new(NODESIZE, fsid, csum);
    let mut root = None;
    for (i, chunk) in rest.chunks(NODESIZE).take(64).enumerate() {
        let logical = NODESIZE as u64 * (i as u64 + 1);
        let mut b = chunk.to_vec();
        b.resize(NODESIZE, 0);
        if flags & 1 != 0 {
            b[0x20..0x30].copy_from_slice(fsid.as_bytes());
            b[0x30..0x38].copy_from_slice(&logical.to_le_bytes());
        }
        if flags & 2 != 0 {
            set_csum(csum, &mut b);
        }
        if i == 0 {
            let generation = u64::from_le_bytes(b[0x50..0x58].try_into().unwrap_or_default());
            root = Some((generation, b[0x64]));
        }
        m.insert_raw(logical, b);
    }
    let Some((generation, level)) = root else {
        return;
    };
    let t = Tree::new(&m, 5, NODESIZE as u64, generation, level);
    walk(&t, rest);
}

static IMAGE: OnceLock<Mutex<image_mut::Image>> = OnceLock::new();

/// A mutated kernel-made image, opened and walked.
fn image(data: &[u8]) {
    image_mut::mutate(&IMAGE, "csum-crc32c", data, run_image);
}

fn run_image(bytes: Arc<[u8]>, flags: u8, probes: &[u8]) {
    let dev = match Device::from_bytes("fuzz.img", bytes) {
        Ok(d) => d,
        Err(e) => return check(&e),
    };
    // Every other input reads as `rsend --rescue` does (lost blocks walked
    // past as empty ones, lost data as zeros).
    let rescue = flags & 2 != 0;
    let opts = Options {
        notice: Arc::new(|_| {}),
        rescue: rescue.then(|| Arc::new(btrfs_disk::rescue::Losses::new())),
        ..Options::default()
    };
    let fs = match Filesystem::from_devices(vec![dev], opts) {
        Ok(fs) => fs,
        Err(e) => return check(&e),
    };
    let subvols = match fs.subvolumes() {
        Ok(s) => s,
        Err(e) => return check(&e),
    };
    let mut buf = vec![0u8; 64 << 10];
    for sv in subvols.iter().take(4) {
        let tree = fs.fs_tree(sv);
        walk(&tree, probes);
        let mut files = 0;
        for r in tree.range(Key::MIN, Key::MAX) {
            let Ok(item) = r else { break };
            if item.key.item_type != key_type::INODE_ITEM {
                continue;
            }
            files += 1;
            if files > 64 {
                break;
            }
            match fs.inode_in(&tree, item.key.objectid) {
                Ok(inode) => {
                    if let Err(e) = fs.read_file_in(&tree, &inode, 0, &mut buf) {
                        check(&e);
                    }
                }
                Err(e) => check(&e),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((sel, rest)) if sel % 4 == 0 => image(rest),
        Some((_, rest)) => blocks(rest),
        None => {}
    }
});
