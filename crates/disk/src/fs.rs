//! The filesystem: devices, superblock, chunk map, block cache and trees tied together.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::block::{check_expect, validate, Block, BlockCache, BlockSource, Expect};
use crate::chunk::{parse_sys_chunk_array, raid56, Chunk, ChunkMap, Profile};
use crate::csum::CsumType;
use crate::device::Device;
use crate::error::{
    ChunkError, Error, MirrorFault, MirrorRefusal, NoSuperblockReason, Result, TreeBlockError,
};
use crate::items::{DevItem, RootItem};
use crate::key::Key;
use crate::key::{key_type, objectid};
use crate::superblock::Superblock;
use crate::tree::{Item, Tree};

/// Default size of the tree block cache.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// How serious a [`Notice`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// Information on how the filesystem is read.
    Note,
    /// Something is off but reading goes on.
    Warning,
    /// A bad copy was replaced by a good one.
    Repair,
}

/// Something the reader wants the user to know; printed on stderr by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// How serious it is.
    pub kind: NoticeKind,
    /// What happened, with where.
    pub message: String,
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match self.kind {
            NoticeKind::Note => "note",
            NoticeKind::Warning => "warning",
            NoticeKind::Repair => "repaired",
        };
        write!(f, "{k}: {}", self.message)
    }
}

/// Receives notices.
pub type NoticeSink = Arc<dyn Fn(&Notice) + Send + Sync>;

/// How to open a filesystem.
#[derive(Clone)]
pub struct Options {
    /// Upper bound of the tree block cache, in bytes.
    pub cache_bytes: usize,
    /// Where notices go.
    pub notice: NoticeSink,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cache_bytes: DEFAULT_CACHE_BYTES,
            notice: Arc::new(|n: &Notice| eprintln!("rsend: {n}")),
        }
    }
}

/// The data checksums of the last disk extent read, kept for its next reads.
#[derive(Clone)]
pub(crate) struct CsumRun {
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) sums: Arc<Vec<u8>>,
    pub(crate) have: Arc<Vec<bool>>,
}

/// Where a tree's root is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RootLocation {
    /// Logical address of the root block.
    pub bytenr: u64,
    /// Its generation.
    pub generation: u64,
    /// Its level.
    pub level: u8,
}

/// A btrfs filesystem read straight from its devices or image files.
pub struct Filesystem {
    devices: BTreeMap<u64, Device>,
    missing: Vec<(u64, Uuid)>,
    sb: Superblock,
    chunks: ChunkMap,
    cache: Mutex<BlockCache>,
    notice: NoticeSink,
    pub(crate) decoded: Mutex<Option<(u64, Arc<Vec<u8>>)>>,
    pub(crate) csum_run: Mutex<Option<CsumRun>>,
    csum_root: Option<RootLocation>,
    extent_root: Option<RootLocation>,
    uuid_root: Option<RootLocation>,
}

impl std::fmt::Debug for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filesystem")
            .field("fsid", &self.sb.fsid())
            .field("generation", &self.sb.generation())
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl Filesystem {
    /// Opens the filesystem on `paths` (image files or block devices) with default options.
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<Filesystem> {
        Filesystem::open_with(paths, Options::default())
    }

    /// Opens the filesystem on `paths` with `opts`.
    pub fn open_with<P: AsRef<Path>>(paths: &[P], opts: Options) -> Result<Filesystem> {
        let say = |kind, message: String| (opts.notice)(&Notice { kind, message });
        if paths.is_empty() {
            return Err(Error::NoDevices);
        }
        let mut opened = Vec::new();
        let mut first_err = None;
        for p in paths {
            match Device::open(p.as_ref()) {
                Ok(d) => opened.push(d),
                Err(e) if paths.len() > 1 => {
                    say(NoticeKind::Warning, format!("{e}; treating it as missing"));
                    first_err.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        if opened.is_empty() {
            return Err(first_err.unwrap_or(Error::NoDevices));
        }
        Filesystem::from_devices(opened, opts)
    }

    /// The filesystem on devices already opened (for example images held in
    /// memory, [`Device::from_bytes`]).
    pub fn from_devices(opened: Vec<Device>, opts: Options) -> Result<Filesystem> {
        let say = |kind, message: String| (opts.notice)(&Notice { kind, message });
        if opened.is_empty() {
            return Err(Error::NoDevices);
        }
        for d in &opened {
            for n in d.notes() {
                say(NoticeKind::Note, n.clone());
            }
        }
        let fsid = opened[0].superblock().fsid();
        let mut devices: BTreeMap<u64, Device> = BTreeMap::new();
        for d in opened {
            let sb = d.superblock();
            if sb.fsid() != fsid {
                return Err(Error::OtherFilesystem {
                    path: d.path().to_owned(),
                    found: sb.fsid(),
                    expected: fsid,
                });
            }
            if let Some(other) = devices.get(&sb.devid()) {
                return Err(Error::DuplicateDevice {
                    path: d.path().to_owned(),
                    other: other.path().to_owned(),
                    devid: sb.devid(),
                });
            }
            devices.insert(sb.devid(), d);
        }
        let newest = devices
            .values()
            .max_by_key(|d| d.superblock().generation())
            .ok_or(Error::NoDevices)?;
        let sb = newest.superblock().clone();
        let main_path = newest.path().to_owned();
        sb.check_features().map_err(|what| Error::Unsupported {
            path: main_path.clone(),
            what,
        })?;
        for d in devices.values() {
            if d.superblock().generation() != sb.generation() {
                say(
                    NoticeKind::Warning,
                    format!(
                        "{}: superblock generation {} is older than {}; its blocks are checked and other copies used where stale",
                        d.path().display(),
                        d.superblock().generation(),
                        sb.generation()
                    ),
                );
            }
        }
        if sb.log_root() != 0 {
            say(
                NoticeKind::Warning,
                format!(
                    "log tree at logical {} is not replayed (fsynced changes of writable subvolumes after generation {} are not seen)",
                    sb.log_root(),
                    sb.generation()
                ),
            );
        }
        let mut chunks = ChunkMap::new();
        for c in parse_sys_chunk_array(sb.sys_chunk_array()).map_err(|e| Error::NoSuperblock {
            path: main_path.clone(),
            reason: NoSuperblockReason::SysChunkArray(e),
        })? {
            let logical = c.logical;
            chunks
                .insert(c)
                .map_err(|reason| Error::BadChunk { logical, reason })?;
        }
        let mut fs = Filesystem {
            devices,
            missing: Vec::new(),
            sb,
            chunks,
            cache: Mutex::new(BlockCache::new(opts.cache_bytes.max(1 << 20))),
            notice: opts.notice.clone(),
            decoded: Mutex::new(None),
            csum_run: Mutex::new(None),
            csum_root: None,
            extent_root: None,
            uuid_root: None,
        };
        fs.load_chunk_tree()?;
        fs.check_devices();
        fs.extent_root = fs.find_root(objectid::EXTENT_TREE)?;
        fs.csum_root = fs.find_root(objectid::CSUM_TREE)?;
        fs.uuid_root = fs.find_root(objectid::UUID_TREE)?;
        Ok(fs)
    }

    fn load_chunk_tree(&mut self) -> Result<()> {
        let tree = self.chunk_tree();
        let mut found = Vec::new();
        let mut dev_items = Vec::new();
        for item in tree.range(Key::MIN, Key::MAX) {
            let item = item?;
            match item.key.item_type {
                key_type::CHUNK_ITEM => {
                    let (c, _) = Chunk::parse(item.key.offset, item.data()).map_err(|reason| {
                        Error::BadChunk {
                            logical: item.key.offset,
                            reason,
                        }
                    })?;
                    found.push(c);
                }
                key_type::DEV_ITEM => {
                    let d = DevItem::parse(item.data())
                        .map_err(Error::bad_item(objectid::CHUNK_TREE, item.key))?;
                    dev_items.push((d.devid(), d.uuid()));
                }
                _ => {}
            }
        }
        for c in found {
            let logical = c.logical;
            self.chunks
                .insert(c)
                .map_err(|reason| Error::BadChunk { logical, reason })?;
        }
        self.missing = dev_items
            .into_iter()
            .filter(|(devid, uuid)| {
                self.devices
                    .get(devid)
                    .is_none_or(|d| d.superblock().dev_uuid() != *uuid)
            })
            .collect();
        Ok(())
    }

    fn check_devices(&self) {
        for (devid, uuid) in &self.missing {
            self.say(
                NoticeKind::Warning,
                format!("device devid {devid} uuid {uuid} is missing; reading from the remaining copies and parity"),
            );
        }
    }

    pub(crate) fn say(&self, kind: NoticeKind, message: String) {
        (self.notice)(&Notice { kind, message });
    }

    /// The authoritative superblock (highest generation among the devices).
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }
    /// The fsid.
    pub fn fsid(&self) -> Uuid {
        self.sb.fsid()
    }
    /// The checksum algorithm.
    pub fn csum_type(&self) -> CsumType {
        self.sb.csum_type()
    }
    /// Tree block size.
    pub fn nodesize(&self) -> usize {
        self.sb.nodesize() as usize
    }
    /// Data sector size.
    pub fn sectorsize(&self) -> usize {
        self.sb.sectorsize() as usize
    }
    /// The chunk map.
    pub fn chunks(&self) -> &ChunkMap {
        &self.chunks
    }
    /// The opened devices by devid.
    pub fn devices(&self) -> impl Iterator<Item = (u64, &Device)> {
        self.devices.iter().map(|(k, v)| (*k, v))
    }
    /// Devices the chunk tree lists but that were not given: (devid, uuid).
    pub fn missing_devices(&self) -> &[(u64, Uuid)] {
        &self.missing
    }

    /// The root tree.
    pub fn root_tree(&self) -> Tree<'_> {
        Tree::new(
            self,
            objectid::ROOT_TREE,
            self.sb.root(),
            self.sb.generation(),
            self.sb.root_level(),
        )
    }
    /// The chunk tree.
    pub fn chunk_tree(&self) -> Tree<'_> {
        Tree::new(
            self,
            objectid::CHUNK_TREE,
            self.sb.chunk_root(),
            self.sb.chunk_root_generation(),
            self.sb.chunk_root_level(),
        )
    }
    /// The checksum tree, if the filesystem has one.
    pub fn csum_tree(&self) -> Option<Tree<'_>> {
        self.csum_root.map(|r| self.tree_at(objectid::CSUM_TREE, r))
    }
    /// The extent tree.
    pub fn extent_tree(&self) -> Option<Tree<'_>> {
        self.extent_root
            .map(|r| self.tree_at(objectid::EXTENT_TREE, r))
    }
    /// The UUID tree, when present and as new as the filesystem.
    pub fn uuid_tree(&self) -> Option<Tree<'_>> {
        self.uuid_root
            .filter(|_| self.sb.uuid_tree_generation() == self.sb.generation())
            .map(|r| self.tree_at(objectid::UUID_TREE, r))
    }
    /// The tree `id` rooted at `r`.
    pub fn tree_at(&self, id: u64, r: RootLocation) -> Tree<'_> {
        Tree::new(self, id, r.bytenr, r.generation, r.level)
    }

    /// Where tree `id`'s root is, from its ROOT_ITEM in the root tree.
    pub fn find_root(&self, id: u64) -> Result<Option<RootLocation>> {
        Ok(self.find_root_item(id)?.map(|(_, loc, _)| loc))
    }

    /// Tree `id`, by its ROOT_ITEM.
    pub fn tree(&self, id: u64) -> Result<Tree<'_>> {
        match id {
            objectid::ROOT_TREE => Ok(self.root_tree()),
            objectid::CHUNK_TREE => Ok(self.chunk_tree()),
            _ => self
                .find_root(id)?
                .map(|r| self.tree_at(id, r))
                .ok_or(Error::MissingTree { tree: id }),
        }
    }

    /// The last ROOT_ITEM of `id`: its key, root location and the item.
    pub(crate) fn find_root_item(&self, id: u64) -> Result<Option<(Key, RootLocation, Item)>> {
        let rt = self.root_tree();
        let Some(item) = rt.search_le(&Key::new(id, key_type::ROOT_ITEM, u64::MAX))? else {
            return Ok(None);
        };
        if item.key.objectid != id || item.key.item_type != key_type::ROOT_ITEM {
            return Ok(None);
        }
        let ri =
            RootItem::parse(item.data()).map_err(Error::bad_item(objectid::ROOT_TREE, item.key))?;
        let loc = RootLocation {
            bytenr: ri.bytenr(),
            generation: ri.generation(),
            level: ri.level(),
        };
        Ok(Some((item.key, loc, item)))
    }

    /// How many ways there are to read `logical` (copies or parity rebuilds).
    pub fn num_copies(&self, logical: u64) -> u32 {
        self.chunks.lookup(logical).map_or(1, Chunk::num_copies)
    }

    fn stripe_device(&self, chunk: &Chunk, stripe: usize) -> Result<&Device> {
        let s = chunk.stripes.get(stripe).ok_or(Error::BadChunk {
            logical: chunk.logical,
            reason: ChunkError::NoStripe { stripe },
        })?;
        match self.devices.get(&s.devid) {
            Some(d) if d.superblock().dev_uuid() == s.dev_uuid => Ok(d),
            _ => Err(Error::MissingDevice {
                devid: s.devid,
                uuid: s.dev_uuid,
            }),
        }
    }

    /// Fills `buf` from logical address `logical`, reading copy `mirror` (1-based).
    ///
    /// On RAID5/6, mirror 1 reads the data strips, mirror 2 rebuilds them from
    /// P and mirror 3 (RAID6) from Q.
    pub fn read_logical(&self, logical: u64, buf: &mut [u8], mirror: u32) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let l = logical
                .checked_add(done as u64)
                .ok_or(Error::Unmapped { logical })?;
            let chunk = self
                .chunks
                .lookup(l)
                .ok_or(Error::Unmapped { logical: l })?;
            let want = (buf.len() - done) as u64;
            let bad = |reason| Error::BadChunk {
                logical: chunk.logical,
                reason,
            };
            let n = if chunk.profile.nparity() > 0 {
                self.read_parity(chunk, l, &mut buf[done..], mirror)?
            } else {
                let mut m = chunk.map_mirror(l, want, mirror).map_err(bad)?;
                let dev = match self.stripe_device(chunk, m.stripe) {
                    Ok(d) => d,
                    Err(missing) => {
                        // Degraded: another copy of this piece, on a device we have.
                        let mut alt = None;
                        for k in (1..=chunk.num_copies()).filter(|&k| k != mirror) {
                            let mk = chunk.map_mirror(l, want, k).map_err(bad)?;
                            if let Ok(d) = self.stripe_device(chunk, mk.stripe) {
                                alt = Some((d, mk));
                                break;
                            }
                        }
                        let (d, mk) = alt.ok_or(missing)?;
                        m = mk;
                        d
                    }
                };
                let n = m.len as usize;
                dev.read_at(m.physical, &mut buf[done..done + n])?;
                n
            };
            if n == 0 {
                return Err(Error::Unmapped { logical: l });
            }
            done += n;
        }
        Ok(())
    }

    fn read_parity(&self, chunk: &Chunk, l: u64, out: &mut [u8], mirror: u32) -> Result<usize> {
        let pm = chunk
            .map_parity(l, out.len() as u64)
            .map_err(|reason| Error::BadChunk {
                logical: chunk.logical,
                reason,
            })?;
        let len = pm.len as usize;
        let read_strip = |stripe: usize| -> Result<Vec<u8>> {
            let dev = self.stripe_device(chunk, stripe)?;
            let s = &chunk.stripes[stripe];
            let mut v = vec![0u8; len];
            dev.read_at(s.offset + pm.stripe_offset, &mut v)?;
            Ok(v)
        };
        let target = pm.data_stripes[pm.data_index];
        if mirror <= 1 {
            // Direct read; when the strip's device is missing, rebuild it (degraded read).
            if let Ok(dev) = self.stripe_device(chunk, target) {
                let s = &chunk.stripes[target];
                dev.read_at(s.offset + pm.stripe_offset, &mut out[..len])?;
                return Ok(len);
            }
        }
        let data: Vec<Option<Vec<u8>>> = pm
            .data_stripes
            .iter()
            .enumerate()
            .map(|(i, &st)| {
                if i == pm.data_index {
                    None
                } else {
                    read_strip(st).ok()
                }
            })
            .collect();
        let p = read_strip(pm.p_stripe).ok();
        let q = pm.q_stripe.and_then(|s| read_strip(s).ok());
        if mirror == 3 && chunk.profile == Profile::Raid6 && q.is_none() {
            return Err(Error::BadChunk {
                logical: chunk.logical,
                reason: ChunkError::QUnreadable { logical: l },
            });
        }
        let views: Vec<Option<&[u8]>> = data.iter().map(|d| d.as_deref()).collect();
        let rebuilt = raid56::rebuild(
            pm.data_index,
            &views,
            p.as_deref(),
            q.as_deref(),
            mirror == 3,
            len,
        )
        .map_err(|reason| Error::BadChunk {
            logical: chunk.logical,
            reason: ChunkError::Rebuild { logical: l, reason },
        })?;
        out[..len].copy_from_slice(&rebuilt);
        Ok(len)
    }

    /// Reads a tree block, validated against `e`; tries every copy and reports repairs.
    pub fn tree_block(&self, e: &Expect) -> Result<Block> {
        if let Some(data) = self.cache_get(e.logical) {
            let b = Block::from_validated(data);
            if check_expect(&b, e).is_ok() {
                return Ok(b);
            }
            self.cache_remove(e.logical);
        }
        let nodesize = self.nodesize();
        let fsid = self.sb.metadata_fsid();
        let copies = self.num_copies(e.logical);
        let mut why = Vec::new();
        if !e.logical.is_multiple_of(self.sectorsize() as u64) || e.logical == 0 {
            return Err(Error::BadTreeBlock {
                logical: e.logical,
                tree: e.tree,
                reason: TreeBlockError::Unaligned,
            });
        }
        for mirror in 1..=copies {
            // Read straight into the block's shared buffer (one allocation, no copy).
            let mut buf: Arc<[u8]> = std::iter::repeat_n(0u8, nodesize).collect();
            let r = self
                .read_logical(e.logical, Arc::make_mut(&mut buf), mirror)
                .map_err(|err| MirrorFault::Read(Box::new(err)))
                .and_then(|()| {
                    validate(&buf, e.logical, &fsid, self.csum_type()).map_err(MirrorFault::Invalid)
                })
                .and_then(|()| {
                    let b = Block::from_validated(buf);
                    check_expect(&b, e)
                        .map(|()| b)
                        .map_err(MirrorFault::Invalid)
                });
            match r {
                Ok(b) => {
                    if !why.is_empty() {
                        self.say(
                            NoticeKind::Repair,
                            format!(
                                "tree block at logical {} (tree {}): {}; used mirror {mirror}",
                                e.logical,
                                e.tree,
                                TreeBlockError::Mirrors(why)
                            ),
                        );
                    }
                    self.cache_insert(e.logical, b.bytes_arc());
                    return Ok(b);
                }
                Err(reason) => why.push(MirrorRefusal { mirror, reason }),
            }
        }
        Err(Error::BadTreeBlock {
            logical: e.logical,
            tree: e.tree,
            reason: TreeBlockError::Mirrors(why),
        })
    }

    fn cache_get(&self, logical: u64) -> Option<Arc<[u8]>> {
        self.cache.lock().ok()?.get(logical)
    }
    fn cache_insert(&self, logical: u64, data: Arc<[u8]>) {
        if let Ok(mut c) = self.cache.lock() {
            c.insert(logical, data);
        }
    }
    fn cache_remove(&self, logical: u64) {
        if let Ok(mut c) = self.cache.lock() {
            c.remove(logical);
        }
    }
}

impl Filesystem {
    /// The extent item of the extent at `bytenr` and all its backrefs, inline and keyed.
    ///
    /// Returns the EXTENT_ITEM or METADATA_ITEM key and the refs, or `None`
    /// when the extent tree has no item for `bytenr`.
    pub fn extent_backrefs(
        &self,
        bytenr: u64,
    ) -> Result<Option<(Key, Vec<crate::items::BackRef>)>> {
        use crate::items::{keyed_backref, ExtentItem};
        let Some(tree) = self.extent_tree() else {
            return Ok(None);
        };
        let mut head = None;
        let mut refs = Vec::new();
        let from = Key::new(bytenr, key_type::EXTENT_ITEM, 0);
        let to = Key::new(bytenr, u8::MAX, u64::MAX);
        for item in tree.range(from, to) {
            let item = item?;
            let bad = |reason| Error::BadItem {
                tree: objectid::EXTENT_TREE,
                key: item.key,
                reason,
            };
            match item.key.item_type {
                key_type::EXTENT_ITEM | key_type::METADATA_ITEM => {
                    let e = ExtentItem::parse(item.key.item_type, item.data()).map_err(bad)?;
                    refs.extend(e.inline_refs().map_err(bad)?);
                    head = Some(item.key);
                }
                _ => {
                    if let Some(r) = keyed_backref(&item.key, item.data()).map_err(bad)? {
                        refs.push(r);
                    }
                }
            }
        }
        Ok(head.map(|k| (k, refs)))
    }
}

impl BlockSource for Filesystem {
    fn tree_block(&self, e: &Expect) -> Result<Block> {
        Filesystem::tree_block(self, e)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn filesystem_can_be_shared_between_threads() {
        fn check<T: Send + Sync>() {}
        check::<super::Filesystem>();
    }
}
