//! Keys: how btrfs names and sorts every item, and the numbers of its key
//! types and well-known object ids.

use crate::bytes::{u64_at, u8_at};

/// Size of an on-disk key.
pub const DISK_KEY_SIZE: usize = 17;

/// A btrfs key: items sort by (objectid, item_type, offset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Object id (inode number, tree id, logical address, ...).
    pub objectid: u64,
    /// Item type.
    pub item_type: u8,
    /// Type-specific offset.
    pub offset: u64,
}

impl Key {
    /// A key from its three parts.
    pub const fn new(objectid: u64, item_type: u8, offset: u64) -> Key {
        Key {
            objectid,
            item_type,
            offset,
        }
    }

    /// The smallest key.
    pub const MIN: Key = Key::new(0, 0, 0);
    /// The largest key.
    pub const MAX: Key = Key::new(u64::MAX, u8::MAX, u64::MAX);

    /// Decodes a 17-byte disk key at `off`.
    #[inline]
    pub fn parse(b: &[u8], off: usize) -> Option<Key> {
        Some(Key {
            objectid: u64_at(b, off)?,
            item_type: u8_at(b, off + 8)?,
            offset: u64_at(b, off + 9)?,
        })
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let obj = self.objectid as i64;
        // Negative ids print as progs does for the well-known ones.
        if (-256..0).contains(&obj) {
            write!(f, "({obj} ")?;
        } else {
            write!(f, "({} ", self.objectid)?;
        }
        match key_type_name(self.item_type) {
            Some(n) => write!(f, "{n} ")?,
            None => write!(f, "UNKNOWN.{} ", self.item_type)?,
        }
        write!(f, "{})", self.offset)
    }
}

/// Item key types.
pub mod key_type {
    /// INODE_ITEM.
    pub const INODE_ITEM: u8 = 1;
    /// INODE_REF.
    pub const INODE_REF: u8 = 12;
    /// INODE_EXTREF.
    pub const INODE_EXTREF: u8 = 13;
    /// XATTR_ITEM.
    pub const XATTR_ITEM: u8 = 24;
    /// VERITY_DESC_ITEM.
    pub const VERITY_DESC_ITEM: u8 = 36;
    /// VERITY_MERKLE_ITEM.
    pub const VERITY_MERKLE_ITEM: u8 = 37;
    /// ORPHAN_ITEM.
    pub const ORPHAN_ITEM: u8 = 48;
    /// DIR_ITEM.
    pub const DIR_ITEM: u8 = 84;
    /// DIR_INDEX.
    pub const DIR_INDEX: u8 = 96;
    /// EXTENT_DATA.
    pub const EXTENT_DATA: u8 = 108;
    /// EXTENT_CSUM.
    pub const EXTENT_CSUM: u8 = 128;
    /// ROOT_ITEM.
    pub const ROOT_ITEM: u8 = 132;
    /// ROOT_BACKREF.
    pub const ROOT_BACKREF: u8 = 144;
    /// ROOT_REF.
    pub const ROOT_REF: u8 = 156;
    /// EXTENT_ITEM.
    pub const EXTENT_ITEM: u8 = 168;
    /// METADATA_ITEM.
    pub const METADATA_ITEM: u8 = 169;
    /// EXTENT_OWNER_REF.
    pub const EXTENT_OWNER_REF: u8 = 172;
    /// TREE_BLOCK_REF.
    pub const TREE_BLOCK_REF: u8 = 176;
    /// EXTENT_DATA_REF.
    pub const EXTENT_DATA_REF: u8 = 178;
    /// SHARED_BLOCK_REF.
    pub const SHARED_BLOCK_REF: u8 = 182;
    /// SHARED_DATA_REF.
    pub const SHARED_DATA_REF: u8 = 184;
    /// BLOCK_GROUP_ITEM.
    pub const BLOCK_GROUP_ITEM: u8 = 192;
    /// DEV_EXTENT.
    pub const DEV_EXTENT: u8 = 204;
    /// DEV_ITEM.
    pub const DEV_ITEM: u8 = 216;
    /// CHUNK_ITEM.
    pub const CHUNK_ITEM: u8 = 228;
    /// UUID_KEY_SUBVOL.
    pub const UUID_KEY_SUBVOL: u8 = 251;
    /// UUID_KEY_RECEIVED_SUBVOL.
    pub const UUID_KEY_RECEIVED_SUBVOL: u8 = 252;
}

/// Well-known object ids.
pub mod objectid {
    /// The root tree.
    pub const ROOT_TREE: u64 = 1;
    /// The extent tree.
    pub const EXTENT_TREE: u64 = 2;
    /// The chunk tree.
    pub const CHUNK_TREE: u64 = 3;
    /// The device tree.
    pub const DEV_TREE: u64 = 4;
    /// The top-level subvolume.
    pub const FS_TREE: u64 = 5;
    /// The root tree directory (holds "default").
    pub const ROOT_TREE_DIR: u64 = 6;
    /// The checksum tree.
    pub const CSUM_TREE: u64 = 7;
    /// The UUID tree.
    pub const UUID_TREE: u64 = 9;
    /// DEV_ITEMS in the chunk tree.
    pub const DEV_ITEMS: u64 = 1;
    /// The placeholder inode of a nested subvolume inside a snapshot.
    pub const EMPTY_SUBVOL_DIR: u64 = 2;
    /// First subvolume id and inode number; a subvolume's root directory.
    pub const FIRST_FREE: u64 = 256;
    /// Last subvolume id.
    pub const LAST_FREE: u64 = -256i64 as u64;
    /// Objectid of EXTENT_CSUM items.
    pub const EXTENT_CSUM: u64 = -10i64 as u64;
    /// Objectid of orphan items.
    pub const ORPHAN: u64 = -5i64 as u64;
}

/// The name of key type `t`, as btrfs-progs prints it.
pub fn key_type_name(t: u8) -> Option<&'static str> {
    use key_type::*;
    Some(match t {
        INODE_ITEM => "INODE_ITEM",
        INODE_REF => "INODE_REF",
        INODE_EXTREF => "INODE_EXTREF",
        XATTR_ITEM => "XATTR_ITEM",
        VERITY_DESC_ITEM => "VERITY_DESC_ITEM",
        VERITY_MERKLE_ITEM => "VERITY_MERKLE_ITEM",
        ORPHAN_ITEM => "ORPHAN_ITEM",
        DIR_ITEM => "DIR_ITEM",
        DIR_INDEX => "DIR_INDEX",
        EXTENT_DATA => "EXTENT_DATA",
        EXTENT_CSUM => "EXTENT_CSUM",
        ROOT_ITEM => "ROOT_ITEM",
        ROOT_BACKREF => "ROOT_BACKREF",
        ROOT_REF => "ROOT_REF",
        EXTENT_ITEM => "EXTENT_ITEM",
        METADATA_ITEM => "METADATA_ITEM",
        EXTENT_OWNER_REF => "EXTENT_OWNER_REF",
        TREE_BLOCK_REF => "TREE_BLOCK_REF",
        EXTENT_DATA_REF => "EXTENT_DATA_REF",
        SHARED_BLOCK_REF => "SHARED_BLOCK_REF",
        SHARED_DATA_REF => "SHARED_DATA_REF",
        BLOCK_GROUP_ITEM => "BLOCK_GROUP_ITEM",
        DEV_EXTENT => "DEV_EXTENT",
        DEV_ITEM => "DEV_ITEM",
        CHUNK_ITEM => "CHUNK_ITEM",
        UUID_KEY_SUBVOL => "UUID_KEY_SUBVOL",
        UUID_KEY_RECEIVED_SUBVOL => "UUID_KEY_RECEIVED_SUBVOL",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_by_objectid_then_type_then_offset() {
        let a = Key::new(1, 200, 0);
        let b = Key::new(2, 1, 0);
        let c = Key::new(2, 1, 5);
        assert!(a < b && b < c);
        assert_eq!(Key::new(256, 1, 0).to_string(), "(256 INODE_ITEM 0)");
        assert_eq!(
            Key::new(-10i64 as u64, 128, 4096).to_string(),
            "(-10 EXTENT_CSUM 4096)"
        );
    }
}
