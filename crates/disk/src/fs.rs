//! The filesystem: devices, superblock, chunk map, block cache and trees tied together.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use uuid::Uuid;

use crate::block::{check_expect, validate, Block, BlockCache, Expect, Generation};
use crate::chunk::{parse_sys_chunk_array, raid56, Chunk, ChunkError, ChunkMap, Profile};
use crate::csum::CsumType;
use crate::device::Device;
use crate::error::{Error, MirrorFault, MirrorRefusal, NoSuperblockReason, Result, TreeBlockError};
use crate::items::{DevItem, RootItem};
use crate::key::Key;
use crate::key::{key_type, objectid};
use crate::rescue::{BlockLoss, Losses};
use crate::superblock::Superblock;
use crate::tree::{BlockSource, Item, Tree};

/// Default size of the tree block cache.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// How many times one lookup in a tree the running kernel rewrites is
/// started again from a newer commit before its error stands.
pub const MAX_RETRIES: u32 = 16;

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

/// Something the reader wants the user to know, given to [`Options::notice`].
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
    /// Where notices go; by default nowhere (the reader never prints).
    pub notice: NoticeSink,
    /// Read what can be read: when set, a tree block no copy of which is
    /// valid reads as an empty one, data no copy of which matches its
    /// checksum reads as zeros, both are recorded here, and an unreadable
    /// root tree is looked for in the superblocks' backup roots.
    pub rescue: Option<Arc<Losses>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cache_bytes: DEFAULT_CACHE_BYTES,
            notice: Arc::new(|_: &Notice| {}),
            rescue: None,
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

/// The commit the trees that change at every commit (root, chunk,
/// checksum, extent, UUID trees) are read as of.
#[derive(Clone, Copy, Debug)]
struct View {
    /// Counts the views installed: 0 at open, then one per newer commit.
    epoch: u64,
    /// The superblock generation.
    generation: u64,
    root: RootLocation,
    chunk_root: RootLocation,
    uuid_tree_generation: u64,
    csum: Option<RootLocation>,
    extent: Option<RootLocation>,
    uuid: Option<RootLocation>,
}

impl View {
    /// The view of `sb` before its global roots are looked up.
    fn of(sb: &Superblock, epoch: u64) -> View {
        View {
            epoch,
            generation: sb.generation(),
            root: RootLocation {
                bytenr: sb.root(),
                generation: sb.generation(),
                level: sb.root_level(),
            },
            chunk_root: RootLocation {
                bytenr: sb.chunk_root(),
                generation: sb.chunk_root_generation(),
                level: sb.chunk_root_level(),
            },
            uuid_tree_generation: sb.uuid_tree_generation(),
            csum: None,
            extent: None,
            uuid: None,
        }
    }
}

/// A btrfs filesystem read straight from its devices or image files.
///
/// On a mounted filesystem the kernel rewrites the global trees at every
/// commit and reuses the blocks they leave. A lookup in one of them that
/// meets a block written over ([`Error::is_overwritten`]) is started again
/// from the newest commit ([`Filesystem::with_retry`]); the trees of
/// read-only snapshots do not change and are read as they are.
pub struct Filesystem {
    devices: BTreeMap<u64, Device>,
    missing: Vec<(u64, Uuid)>,
    sb: Superblock,
    chunks: RwLock<Arc<ChunkMap>>,
    cache: Mutex<BlockCache>,
    notice: NoticeSink,
    pub(crate) decoded: Mutex<Option<(u64, Arc<Vec<u8>>)>>,
    pub(crate) csum_run: Mutex<Option<CsumRun>>,
    view: Mutex<View>,
    refreshing: Mutex<()>,
    retries: AtomicU64,
    rescue: Option<Arc<Losses>>,
}

/// The devices a chunk tree lists: (devid, device uuid).
type DevItems = Vec<(u64, Uuid)>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    /// Opens the filesystem on `paths` (image files or block devices) with
    /// default options (its notices dropped).
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
        let view = View::of(&sb, 0);
        let mut fs = Filesystem {
            devices,
            missing: Vec::new(),
            sb: sb.clone(),
            chunks: RwLock::new(Arc::new(ChunkMap::new())),
            cache: Mutex::new(BlockCache::new(opts.cache_bytes.max(1 << 20))),
            notice: opts.notice.clone(),
            decoded: Mutex::new(None),
            csum_run: Mutex::new(None),
            view: Mutex::new(view),
            refreshing: Mutex::new(()),
            retries: AtomicU64::new(0),
            rescue: opts.rescue.clone(),
        };
        let dev_items = match fs.rescue_root(&sb) {
            Some(root) => fs.load_view(&sb, 0, Some(root))?,
            None => fs.load_retrying(sb, 0)?,
        };
        fs.missing = dev_items
            .into_iter()
            .filter(|(devid, uuid)| {
                fs.devices
                    .get(devid)
                    .is_none_or(|d| d.superblock().dev_uuid() != *uuid)
            })
            .collect();
        fs.check_devices();
        Ok(fs)
    }

    /// Reads the chunk tree and the global roots of `sb` and reads as of it
    /// from then on (view `epoch`), reading a newer superblock again while
    /// the kernel overwrites what an older one points to. Returns the
    /// devices the chunk tree lists.
    fn load_retrying(&self, mut sb: Superblock, epoch: u64) -> Result<DevItems> {
        let mut left = MAX_RETRIES;
        loop {
            match self.load_view(&sb, epoch, None) {
                Err(e) if e.is_overwritten() && left > 0 => {
                    left -= 1;
                    let newer = self.newest_superblock()?;
                    if newer.generation() <= sb.generation() {
                        return Err(e);
                    }
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    sb = newer;
                }
                r => return r,
            }
        }
    }

    /// Installs the view of `sb`: its chunk map and global roots, the root
    /// tree's root at `root` instead of the superblock's when given.
    fn load_view(
        &self,
        sb: &Superblock,
        epoch: u64,
        root: Option<RootLocation>,
    ) -> Result<DevItems> {
        let dev_items = self.load_chunks(sb)?;
        let mut view = View::of(sb, epoch);
        if let Some(root) = root {
            view.root = root;
        }
        let rt = self.tree_at(objectid::ROOT_TREE, view.root);
        view.extent = find_root_in(&rt, objectid::EXTENT_TREE)?.map(|(_, l, _)| l);
        view.csum = find_root_in(&rt, objectid::CSUM_TREE)?.map(|(_, l, _)| l);
        view.uuid = find_root_in(&rt, objectid::UUID_TREE)?.map(|(_, l, _)| l);
        *lock(&self.view) = view;
        Ok(dev_items)
    }

    /// Installs the chunk map of `sb` (its system chunks and chunk tree);
    /// returns the devices the chunk tree lists.
    fn load_chunks(&self, sb: &Superblock) -> Result<DevItems> {
        let sys = parse_sys_chunk_array(sb.sys_chunk_array()).map_err(|e| Error::NoSuperblock {
            path: self.sb_path(),
            reason: NoSuperblockReason::SysChunkArray(e),
        })?;
        // The chunk tree lives in the system chunks: those go in first.
        {
            let mut map = (*self.chunk_map()).clone();
            for c in &sys {
                map.replace(c.clone());
            }
            self.set_chunk_map(map);
        }
        let (found, dev_items) = self.read_chunk_tree(View::of(sb, 0).chunk_root)?;
        let mut map = ChunkMap::new();
        for c in sys.into_iter().chain(found) {
            let logical = c.logical;
            map.insert(c)
                .map_err(|reason| Error::BadChunk { logical, reason })?;
        }
        // Chunks the newer tree no longer has stay mapped for the reads
        // still under way as of an older commit.
        for c in self.chunk_map().iter() {
            map.insert_if_free(c.clone());
        }
        self.set_chunk_map(map);
        Ok(dev_items)
    }

    fn sb_path(&self) -> std::path::PathBuf {
        self.devices
            .values()
            .next()
            .map(|d| d.path().to_owned())
            .unwrap_or_default()
    }

    /// The newest valid superblock of the devices, read now.
    fn newest_superblock(&self) -> Result<Superblock> {
        let fsid = self.sb.fsid();
        let mut best: Option<Superblock> = None;
        let mut first_err = None;
        for d in self.devices.values() {
            match d.read_superblock() {
                Ok(sb) if sb.fsid() == fsid => {
                    if best
                        .as_ref()
                        .is_none_or(|b| sb.generation() > b.generation())
                    {
                        best = Some(sb);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        best.ok_or_else(|| first_err.unwrap_or(Error::NoDevices))
    }

    /// Reads as of the newest commit on the devices, when there is a newer
    /// one than the view's; returns whether there was.
    pub fn refresh(&self) -> Result<bool> {
        let _one = lock(&self.refreshing);
        self.refresh_locked()
    }

    fn refresh_locked(&self) -> Result<bool> {
        let seen = self.view();
        let sb = self.newest_superblock()?;
        if sb.generation() <= seen.generation {
            return Ok(false);
        }
        self.load_retrying(sb, seen.epoch + 1)?;
        Ok(true)
    }

    /// Runs `op`, a lookup in trees the kernel may rewrite while we read
    /// (root, chunk, checksum, extent and UUID trees, a writable
    /// subvolume's tree), and runs it again as of a newer commit when it
    /// meets a block written over, up to [`MAX_RETRIES`] times. Any other
    /// error, or one that a newer commit does not cure, is returned.
    pub fn with_retry<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        let mut left = MAX_RETRIES;
        loop {
            let epoch = self.epoch();
            match op() {
                Err(e) if e.is_overwritten() && left > 0 => {
                    left -= 1;
                    let newer = {
                        let _one = lock(&self.refreshing);
                        self.epoch() != epoch || self.refresh_locked()?
                    };
                    if !newer {
                        return Err(e);
                    }
                    self.retries.fetch_add(1, Ordering::Relaxed);
                }
                r => return r,
            }
        }
    }

    /// How many lookups were started again as of a newer commit since open.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Counts the commits read as of: 0 at open, one more per newer one.
    pub fn epoch(&self) -> u64 {
        self.view().epoch
    }

    /// The generation of the commit the global trees are read as of.
    pub fn generation(&self) -> u64 {
        self.view().generation
    }

    fn view(&self) -> View {
        *lock(&self.view)
    }

    /// The chunk map now in use.
    fn chunk_map(&self) -> Arc<ChunkMap> {
        self.chunks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_chunk_map(&self, map: ChunkMap) {
        *self
            .chunks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(map);
    }

    /// The chunks and device items of the chunk tree rooted at `root`.
    fn read_chunk_tree(&self, root: RootLocation) -> Result<(Vec<Chunk>, DevItems)> {
        let tree = self.tree_at(objectid::CHUNK_TREE, root);
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
        Ok((found, dev_items))
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

    /// The authoritative superblock at open (highest generation among the
    /// devices); [`Filesystem::generation`] is the commit read as of now.
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
    pub fn chunks(&self) -> Arc<ChunkMap> {
        self.chunk_map()
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
        self.tree_at(objectid::ROOT_TREE, self.view().root)
    }
    /// The chunk tree.
    pub fn chunk_tree(&self) -> Tree<'_> {
        self.tree_at(objectid::CHUNK_TREE, self.view().chunk_root)
    }
    /// The checksum tree, if the filesystem has one.
    pub fn csum_tree(&self) -> Option<Tree<'_>> {
        self.view()
            .csum
            .map(|r| self.tree_at(objectid::CSUM_TREE, r))
    }
    /// The extent tree.
    pub fn extent_tree(&self) -> Option<Tree<'_>> {
        self.view()
            .extent
            .map(|r| self.tree_at(objectid::EXTENT_TREE, r))
    }
    /// The UUID tree, when present and as new as the filesystem.
    pub fn uuid_tree(&self) -> Option<Tree<'_>> {
        let v = self.view();
        v.uuid
            .filter(|_| v.uuid_tree_generation == v.generation)
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
        self.with_retry(|| find_root_in(&self.root_tree(), id))
    }

    /// How many ways there are to read `logical` (copies or parity rebuilds).
    pub fn num_copies(&self, logical: u64) -> u32 {
        self.chunk_map()
            .lookup(logical)
            .map_or(1, Chunk::num_copies)
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
        let chunks = self.chunk_map();
        let mut done = 0usize;
        while done < buf.len() {
            let l = logical
                .checked_add(done as u64)
                .ok_or(Error::Unmapped { logical })?;
            let chunk = chunks.lookup(l).ok_or(Error::Unmapped { logical: l })?;
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
    ///
    /// A block that only an exact generation identifies comes from the
    /// cache when it is there. When every copy fails and one failed its
    /// checksum, all are read once more: a block the kernel was writing
    /// just then reads whole the second time (and then shows it is newer).
    ///
    /// When reading for a rescue ([`Options::rescue`]), a block that no
    /// copy gives is recorded as lost and read as an empty stand-in, unless
    /// the filesystem is mounted and a newer commit wrote over it (which is
    /// retried as usual).
    pub fn tree_block(&self, e: &Expect) -> Result<Block> {
        let err = match self.tree_block_strict(e) {
            Ok(b) => return Ok(b),
            Err(err) => err,
        };
        // On a mounted filesystem a block written over by a newer commit is
        // read again from that commit (`with_retry`); on an image or an
        // unmounted device nothing writes, and it is as lost as any other.
        let live = self.devices.values().any(Device::is_direct);
        let Some(losses) = self
            .rescue
            .as_ref()
            .filter(|_| !(live && err.is_overwritten()))
        else {
            return Err(err);
        };
        let generation = self.lose_block(losses, e, &err);
        Ok(Block::stand_in(
            e,
            generation,
            self.nodesize(),
            &self.sb.metadata_fsid(),
        ))
    }

    /// Records the block `e` as lost to `losses` for `err`; returns the
    /// generation its parent gave.
    fn lose_block(&self, losses: &Losses, e: &Expect, err: &Error) -> u64 {
        let generation = match e.generation {
            Generation::Exactly(g) | Generation::AtMost(g) => g,
        };
        losses.add_block(BlockLoss {
            tree: e.tree,
            logical: e.logical,
            level: e.level,
            generation,
            first_key: e.first_key,
            mirrors: self.num_copies(e.logical),
            why: refusal(err),
        });
        generation
    }

    /// The log of what a rescue read lost, when reading for one.
    pub fn rescue(&self) -> Option<&Losses> {
        self.rescue.as_deref()
    }

    /// For a rescue whose superblock's root tree root no copy gives: the
    /// newest root of the superblocks' backup roots (and those of the
    /// other superblock copies) that reads, said in a notice, with the lost
    /// root recorded. None when the superblock's own root reads, when not
    /// rescuing, or when no backup reads either (the open then fails on
    /// the superblock's root as usual).
    fn rescue_root(&self, sb: &Superblock) -> Option<RootLocation> {
        let losses = self.rescue.as_ref()?;
        // The chunk tree maps the root tree's block: load it first.
        self.load_chunks(sb).ok()?;
        let current = RootLocation {
            bytenr: sb.root(),
            generation: sb.generation(),
            level: sb.root_level(),
        };
        let expect = |r: &RootLocation| Expect {
            logical: r.bytenr,
            generation: Generation::Exactly(r.generation),
            level: r.level,
            first_key: None,
            tree: objectid::ROOT_TREE,
        };
        let why = match self.tree_block_strict(&expect(&current)) {
            Ok(_) => return None,
            Err(e) => e,
        };
        let mut candidates: Vec<RootLocation> = self
            .devices
            .values()
            .flat_map(|d| d.superblock_copies())
            .filter(|c| c.fsid() == sb.fsid())
            .flat_map(|c| {
                let own = RootLocation {
                    bytenr: c.root(),
                    generation: c.generation(),
                    level: c.root_level(),
                };
                std::iter::once(own).chain(c.backup_roots().into_iter().map(|b| RootLocation {
                    bytenr: b.root,
                    generation: b.root_generation,
                    level: b.root_level,
                }))
            })
            .filter(|r| *r != current && r.generation <= sb.generation())
            .collect();
        candidates.sort_by_key(|r| std::cmp::Reverse(r.generation));
        candidates.dedup();
        let used = candidates
            .into_iter()
            .find(|r| self.tree_block_strict(&expect(r)).is_ok())?;
        self.lose_block(losses, &expect(&current), &why);
        let reason = refusal(&why);
        self.say(
            NoticeKind::Warning,
            format!(
                "root tree root at logical {} (generation {}) is unreadable ({reason}); using the backup root at logical {} of generation {}: changes of later commits are not seen",
                current.bytenr, current.generation, used.bytenr, used.generation
            ),
        );
        Some(used)
    }

    fn tree_block_strict(&self, e: &Expect) -> Result<Block> {
        if matches!(e.generation, Generation::Exactly(_)) {
            if let Some(data) = self.cache_get(e.logical) {
                let b = Block::from_validated(data);
                if check_expect(&b, e).is_ok() {
                    return Ok(b);
                }
                self.cache_remove(e.logical);
            }
        }
        if !e.logical.is_multiple_of(self.sectorsize() as u64) || e.logical == 0 {
            return Err(Error::BadTreeBlock {
                logical: e.logical,
                tree: e.tree,
                reason: TreeBlockError::Unaligned,
            });
        }
        let why = match self.read_copies(e) {
            Ok(b) => return Ok(b),
            Err(why) => why,
        };
        let torn = why.iter().any(|m| {
            matches!(
                m.reason,
                MirrorFault::Invalid(crate::block::BlockError::CsumMismatch { .. })
            )
        });
        let reason = TreeBlockError::Mirrors(why);
        if torn && !reason.is_overwritten() {
            match self.read_copies(e) {
                Ok(b) => return Ok(b),
                Err(again) => {
                    let again = TreeBlockError::Mirrors(again);
                    if again.is_overwritten() {
                        return Err(Error::BadTreeBlock {
                            logical: e.logical,
                            tree: e.tree,
                            reason: again,
                        });
                    }
                }
            }
        }
        Err(Error::BadTreeBlock {
            logical: e.logical,
            tree: e.tree,
            reason,
        })
    }

    /// Reads every copy of the block `e` until one is valid; the refusals otherwise.
    fn read_copies(&self, e: &Expect) -> std::result::Result<Block, Vec<MirrorRefusal>> {
        let nodesize = self.nodesize();
        let fsid = self.sb.metadata_fsid();
        let copies = self.num_copies(e.logical);
        let mut why = Vec::new();
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
        Err(why)
    }

    /// Keeps the root block of `tree` in memory until [`Filesystem::unpin`]:
    /// a snapshot taken of a read-only subvolume copies its root block to a
    /// new place, and the old one may be reused while it is still being read.
    /// Returns whether it was not pinned already (only then unpin it).
    pub fn pin_root(&self, tree: &Tree<'_>) -> Result<bool> {
        let b = self.tree_block(&Expect {
            logical: tree.root,
            generation: Generation::Exactly(tree.generation),
            level: tree.level,
            first_key: None,
            tree: tree.id,
        })?;
        Ok(lock(&self.cache).pin(tree.root, b.bytes_arc()))
    }

    /// Stops keeping the root block of `tree`.
    pub fn unpin(&self, tree: &Tree<'_>) {
        lock(&self.cache).unpin(tree.root);
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
        self.with_retry(|| self.extent_backrefs_once(bytenr))
    }

    fn extent_backrefs_once(
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

/// Why a tree block was not read, for a loss record: the copies' refusals
/// alone when that is the error (the block and tree are recorded beside).
fn refusal(err: &Error) -> String {
    match err {
        Error::BadTreeBlock { reason, .. } => reason.to_string(),
        other => other.to_string(),
    }
}

/// The last ROOT_ITEM of `id` in the root tree `rt`: its key, root location and the item.
fn find_root_in(rt: &Tree<'_>, id: u64) -> Result<Option<(Key, RootLocation, Item)>> {
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
