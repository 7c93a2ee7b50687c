//! The chunk map: logical addresses to device stripes, for every profile,
//! and RAID5/6 parity reconstruction.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::bytes::{u16_at, u32_at, u64_at, uuid_at};
use crate::key::Key;

/// Chunk type bits.
pub mod flags {
    /// DATA block group.
    pub const DATA: u64 = 0x1;
    /// SYSTEM block group.
    pub const SYSTEM: u64 = 0x2;
    /// METADATA block group.
    pub const METADATA: u64 = 0x4;
    /// RAID0.
    pub const RAID0: u64 = 0x8;
    /// RAID1.
    pub const RAID1: u64 = 0x10;
    /// DUP.
    pub const DUP: u64 = 0x20;
    /// RAID10.
    pub const RAID10: u64 = 0x40;
    /// RAID5.
    pub const RAID5: u64 = 0x80;
    /// RAID6.
    pub const RAID6: u64 = 0x100;
    /// RAID1C3.
    pub const RAID1C3: u64 = 0x200;
    /// RAID1C4.
    pub const RAID1C4: u64 = 0x400;
    /// REMAPPED (remap tree; not supported).
    pub const REMAPPED: u64 = 0x800;
    /// All profile bits.
    pub const PROFILE_MASK: u64 = RAID0 | RAID1 | DUP | RAID10 | RAID5 | RAID6 | RAID1C3 | RAID1C4;
}

/// Size of a chunk item without its stripes.
pub const CHUNK_ITEM_SIZE: usize = 48;
/// Size of one stripe record in a chunk item.
pub const STRIPE_SIZE: usize = 32;

/// A block-group profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// One copy.
    Single,
    /// Two copies on one device.
    Dup,
    /// Striped, no redundancy.
    Raid0,
    /// Two copies.
    Raid1,
    /// Three copies.
    Raid1c3,
    /// Four copies.
    Raid1c4,
    /// Striped mirrors.
    Raid10,
    /// Striped with one parity.
    Raid5,
    /// Striped with two parities.
    Raid6,
}

impl Profile {
    /// The profile of chunk type bits, if exactly one profile is set.
    pub fn from_flags(f: u64) -> Option<Profile> {
        Some(match f & flags::PROFILE_MASK {
            0 => Profile::Single,
            flags::DUP => Profile::Dup,
            flags::RAID0 => Profile::Raid0,
            flags::RAID1 => Profile::Raid1,
            flags::RAID1C3 => Profile::Raid1c3,
            flags::RAID1C4 => Profile::Raid1c4,
            flags::RAID10 => Profile::Raid10,
            flags::RAID5 => Profile::Raid5,
            flags::RAID6 => Profile::Raid6,
            _ => return None,
        })
    }

    /// The profile's name, as its `Debug` form spells it (`Raid10`).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Single => "Single",
            Profile::Dup => "Dup",
            Profile::Raid0 => "Raid0",
            Profile::Raid1 => "Raid1",
            Profile::Raid1c3 => "Raid1c3",
            Profile::Raid1c4 => "Raid1c4",
            Profile::Raid10 => "Raid10",
            Profile::Raid5 => "Raid5",
            Profile::Raid6 => "Raid6",
        }
    }

    /// Number of parity strips per row (0 unless RAID5/6).
    pub fn nparity(self) -> usize {
        match self {
            Profile::Raid5 => 1,
            Profile::Raid6 => 2,
            _ => 0,
        }
    }
}

/// One stripe of a chunk: where on which device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// The device's devid.
    pub devid: u64,
    /// Physical start on that device.
    pub offset: u64,
    /// The device's uuid.
    pub dev_uuid: Uuid,
}

/// One chunk: a logical range and how it is laid out on devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// First logical address.
    pub logical: u64,
    /// Length in bytes.
    pub length: u64,
    /// Stripe length (64 KiB).
    pub stripe_len: u64,
    /// Type and profile bits.
    pub flags: u64,
    /// The profile.
    pub profile: Profile,
    /// Sub-stripes (2 for RAID10).
    pub sub_stripes: u16,
    /// The stripes.
    pub stripes: Vec<Stripe>,
}

/// Where one mirror of a logical range lies on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Index into [`Chunk::stripes`].
    pub stripe: usize,
    /// Physical offset on that stripe's device.
    pub physical: u64,
    /// Bytes contiguous from there (never crosses a stripe boundary).
    pub len: u64,
}

/// Where a logical range lies in a RAID5/6 row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityMapping {
    /// Index of the data strip within the row (the logical data index).
    pub data_index: usize,
    /// Stripe index holding each data strip of the row, by logical data index.
    pub data_stripes: Vec<usize>,
    /// Stripe index holding P.
    pub p_stripe: usize,
    /// Stripe index holding Q (RAID6).
    pub q_stripe: Option<usize>,
    /// Offset from each stripe's physical start to this range in the row.
    pub stripe_offset: u64,
    /// Bytes contiguous from there.
    pub len: u64,
}

impl Chunk {
    /// Parses a CHUNK_ITEM at `logical` from the front of `data`; returns it and its size.
    pub fn parse(logical: u64, data: &[u8]) -> Result<(Chunk, usize), ChunkError> {
        let truncated = |offset| ChunkError::Truncated { offset };
        let g64 = |o| u64_at(data, o).ok_or(truncated(o));
        let length = g64(0)?;
        let stripe_len = g64(0x10)?;
        let ty = g64(0x18)?;
        let _sector_size = u32_at(data, 0x28).ok_or(truncated(0x28))?;
        let num = u16_at(data, 0x2c).ok_or(truncated(0x2c))? as usize;
        let sub = u16_at(data, 0x2e).ok_or(truncated(0x2e))?;
        if num == 0 {
            return Err(ChunkError::NoStripes);
        }
        let size = CHUNK_ITEM_SIZE + STRIPE_SIZE * num;
        if data.len() < size {
            return Err(ChunkError::TooShortForStripes {
                len: data.len(),
                stripes: num,
            });
        }
        if length == 0 || logical.checked_add(length).is_none() {
            return Err(ChunkError::BadLength { length });
        }
        if !stripe_len.is_power_of_two() || !(4096..=(1 << 30)).contains(&stripe_len) {
            return Err(ChunkError::BadStripeLen { stripe_len });
        }
        if ty & flags::REMAPPED != 0 {
            return Err(ChunkError::Remapped);
        }
        let profile = Profile::from_flags(ty).ok_or(ChunkError::SeveralProfiles { flags: ty })?;
        let ok = match profile {
            Profile::Single => num == 1,
            Profile::Dup | Profile::Raid1 => num == 2,
            Profile::Raid1c3 => num == 3,
            Profile::Raid1c4 => num == 4,
            Profile::Raid0 => num >= 1,
            Profile::Raid10 => num >= 2 && num.is_multiple_of(2) && sub == 2,
            Profile::Raid5 => num >= 2,
            Profile::Raid6 => num >= 3,
        };
        if !ok {
            return Err(ChunkError::BadStripeCount {
                profile: profile.name(),
                stripes: num,
                sub_stripes: sub,
            });
        }
        let mut stripes = Vec::with_capacity(num);
        for i in 0..num {
            let o = CHUNK_ITEM_SIZE + STRIPE_SIZE * i;
            stripes.push(Stripe {
                devid: g64(o)?,
                offset: g64(o + 8)?,
                dev_uuid: uuid_at(data, o + 16).ok_or(truncated(o + 16))?,
            });
        }
        Ok((
            Chunk {
                logical,
                length,
                stripe_len,
                flags: ty,
                profile,
                sub_stripes: sub,
                stripes,
            },
            size,
        ))
    }

    /// Last logical address + 1.
    pub fn end(&self) -> u64 {
        self.logical + self.length
    }

    /// How many independent ways there are to read a byte: copies, or parity rebuilds.
    pub fn num_copies(&self) -> u32 {
        match self.profile {
            Profile::Single | Profile::Raid0 => 1,
            Profile::Dup | Profile::Raid1 | Profile::Raid10 | Profile::Raid5 => 2,
            Profile::Raid1c3 | Profile::Raid6 => 3,
            Profile::Raid1c4 => 4,
        }
    }

    /// Maps `logical` (in this chunk) for `mirror` (1-based) on a profile without parity.
    ///
    /// The returned length is at most `len` and stops at a stripe boundary.
    pub fn map_mirror(&self, logical: u64, len: u64, mirror: u32) -> Result<Mapping, ChunkError> {
        let off = self.offset_of(logical)?;
        let n = self.stripes.len() as u64;
        let l = self.stripe_len;
        let (nr, so) = (off / l, off % l);
        let m = u64::from(mirror.max(1) - 1);
        if m >= u64::from(self.num_copies()) {
            return Err(ChunkError::NoSuchMirror {
                mirror,
                profile: self.profile.name(),
            });
        }
        let left_in_chunk = self.length - off;
        let (stripe, physical_off, cont) = match self.profile {
            Profile::Single
            | Profile::Dup
            | Profile::Raid1
            | Profile::Raid1c3
            | Profile::Raid1c4 => (m, off, left_in_chunk),
            Profile::Raid0 => (nr % n, (nr / n) * l + so, l - so),
            Profile::Raid10 => {
                let groups = n / 2;
                ((nr % groups) * 2 + m, (nr / groups) * l + so, l - so)
            }
            Profile::Raid5 | Profile::Raid6 => return Err(ChunkError::ParityAsMirror),
        };
        let s = &self.stripes[stripe as usize];
        let physical = s
            .offset
            .checked_add(physical_off)
            .ok_or(ChunkError::PhysicalOverflow {
                stripe: stripe as usize,
            })?;
        Ok(Mapping {
            stripe: stripe as usize,
            physical,
            len: len.min(cont).min(left_in_chunk),
        })
    }

    /// Maps `logical` (in this chunk) on a RAID5/6 chunk.
    pub fn map_parity(&self, logical: u64, len: u64) -> Result<ParityMapping, ChunkError> {
        let off = self.offset_of(logical)?;
        let n = self.stripes.len();
        let np = self.profile.nparity();
        if np == 0 || n <= np {
            return Err(ChunkError::NotParity);
        }
        let nd = n - np;
        let l = self.stripe_len;
        let (nr, so) = (off / l, off % l);
        let full = nr / nd as u64;
        let di = (nr % nd as u64) as usize;
        let rot = (full % n as u64) as usize;
        let data_stripes = (0..nd).map(|i| (rot + i) % n).collect();
        let p_stripe = (rot + nd) % n;
        let q_stripe = (np == 2).then_some((rot + nd + 1) % n);
        Ok(ParityMapping {
            data_index: di,
            data_stripes,
            p_stripe,
            q_stripe,
            stripe_offset: full.checked_mul(l).ok_or(ChunkError::OffsetOverflow)? + so,
            len: len.min(l - so).min(self.length - off),
        })
    }

    fn offset_of(&self, logical: u64) -> Result<u64, ChunkError> {
        if logical < self.logical || logical >= self.end() {
            return Err(ChunkError::Outside {
                logical,
                start: self.logical,
                end: self.end(),
            });
        }
        Ok(logical - self.logical)
    }
}

/// All chunks of a filesystem, by logical start.
#[derive(Clone, Debug, Default)]
pub struct ChunkMap {
    chunks: BTreeMap<u64, Chunk>,
}

impl ChunkMap {
    /// An empty map.
    pub fn new() -> ChunkMap {
        ChunkMap::default()
    }

    /// Adds a chunk; an identical one already present is fine, an overlapping one is not.
    pub fn insert(&mut self, chunk: Chunk) -> Result<(), ChunkError> {
        if let Some(old) = self.chunks.get(&chunk.logical) {
            if *old == chunk {
                return Ok(());
            }
            if old.length == chunk.length {
                // The chunk tree is authoritative over the sys_chunk_array copy.
                self.chunks.insert(chunk.logical, chunk);
                return Ok(());
            }
        }
        if let Some((_, prev)) = self.chunks.range(..chunk.logical).next_back() {
            if prev.end() > chunk.logical {
                return Err(ChunkError::Overlaps {
                    other: prev.logical,
                });
            }
        }
        if let Some((_, next)) = self.chunks.range(chunk.logical + 1..).next() {
            if chunk.end() > next.logical {
                return Err(ChunkError::Overlaps {
                    other: next.logical,
                });
            }
        }
        self.chunks.insert(chunk.logical, chunk);
        Ok(())
    }

    /// Adds a chunk unless it overlaps one already present; returns whether it was added.
    pub fn insert_if_free(&mut self, chunk: Chunk) -> bool {
        let (start, end) = (chunk.logical, chunk.end());
        if self.overlapping(start, end).next().is_some() {
            return false;
        }
        self.chunks.insert(start, chunk);
        true
    }

    /// Adds a chunk, dropping every chunk it overlaps (a newer chunk tree
    /// replaces what an older one said).
    pub fn replace(&mut self, chunk: Chunk) {
        let gone: Vec<u64> = self.overlapping(chunk.logical, chunk.end()).collect();
        for l in gone {
            self.chunks.remove(&l);
        }
        self.chunks.insert(chunk.logical, chunk);
    }

    /// Starts of the chunks overlapping `[start, end)`.
    fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = u64> + '_ {
        let before = self
            .chunks
            .range(..start)
            .next_back()
            .filter(|(_, c)| c.end() > start)
            .map(|(l, _)| *l);
        before.into_iter().chain(
            self.chunks
                .range(start..end.max(start + 1))
                .map(|(l, _)| *l),
        )
    }

    /// The chunk containing `logical`.
    pub fn lookup(&self, logical: u64) -> Option<&Chunk> {
        let (_, c) = self.chunks.range(..=logical).next_back()?;
        (logical < c.end()).then_some(c)
    }

    /// Every chunk in logical order.
    pub fn iter(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.values()
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// Parses the superblock's sys_chunk_array into chunks.
pub fn parse_sys_chunk_array(array: &[u8]) -> Result<Vec<Chunk>, SysChunkArrayError> {
    let mut out = Vec::new();
    let mut offset = 0usize;
    let mut a = array;
    while !a.is_empty() {
        let key = Key::parse(a, 0).ok_or(SysChunkArrayError::TruncatedKey { offset })?;
        if key.objectid != 256 || key.item_type != crate::key::key_type::CHUNK_ITEM {
            return Err(SysChunkArrayError::UnexpectedKey { offset, key });
        }
        let logical = key.offset;
        let truncated = SysChunkArrayError::Truncated {
            offset: offset + 17,
        };
        let rest = a.get(17..).ok_or(truncated)?;
        let (chunk, size) = Chunk::parse(logical, rest)
            .map_err(|reason| SysChunkArrayError::BadChunk { logical, reason })?;
        out.push(chunk);
        a = rest.get(size..).ok_or(truncated)?;
        offset += 17 + size;
    }
    if out.is_empty() {
        return Err(SysChunkArrayError::Empty);
    }
    Ok(out)
}

/// RAID5/6 arithmetic: P (XOR) and Q (GF(2^8), polynomial 0x11d, generator 2).
pub mod raid56 {
    const fn tables() -> ([u8; 256], [u8; 256]) {
        let mut exp = [0u8; 256];
        let mut log = [0u8; 256];
        let mut x: u16 = 1;
        let mut i = 0;
        while i < 255 {
            exp[i] = x as u8;
            log[x as usize] = i as u8;
            x <<= 1;
            if x & 0x100 != 0 {
                x ^= 0x11d;
            }
            i += 1;
        }
        exp[255] = exp[0];
        (exp, log)
    }
    const TABLES: ([u8; 256], [u8; 256]) = tables();
    const EXP: [u8; 256] = TABLES.0;
    const LOG: [u8; 256] = TABLES.1;

    /// a·b in GF(2^8).
    pub fn mul(a: u8, b: u8) -> u8 {
        if a == 0 || b == 0 {
            return 0;
        }
        EXP[(LOG[a as usize] as usize + LOG[b as usize] as usize) % 255]
    }

    /// g^i.
    pub fn pow2(i: usize) -> u8 {
        EXP[i % 255]
    }

    /// 1/a (a ≠ 0).
    pub fn inv(a: u8) -> u8 {
        if a == 0 {
            return 0;
        }
        EXP[(255 - LOG[a as usize] as usize) % 255]
    }

    /// dst ^= c·src.
    fn mul_xor(dst: &mut [u8], src: &[u8], c: u8) {
        if c == 1 {
            for (d, s) in dst.iter_mut().zip(src) {
                *d ^= s;
            }
        } else {
            for (d, s) in dst.iter_mut().zip(src) {
                *d ^= mul(*s, c);
            }
        }
    }

    /// Rebuilds data strip `target` of a row.
    ///
    /// `data` holds every data strip by logical index (`None` = unavailable or
    /// treated as failed; `data[target]` is ignored). With `prefer_q`, Q is
    /// used instead of P when one strip is missing. Two missing data strips
    /// need both P and Q.
    pub fn rebuild(
        target: usize,
        data: &[Option<&[u8]>],
        p: Option<&[u8]>,
        q: Option<&[u8]>,
        prefer_q: bool,
        len: usize,
    ) -> Result<Vec<u8>, super::RebuildError> {
        let missing: Vec<usize> = (0..data.len())
            .filter(|&i| i == target || data[i].is_none())
            .collect();
        let present = |i: usize| data.get(i).copied().flatten().filter(|_| i != target);
        match (missing.as_slice(), p, q) {
            ([_], Some(p), q) if !(prefer_q && q.is_some()) => {
                let mut out = p[..len].to_vec();
                for i in 0..data.len() {
                    if let Some(d) = present(i) {
                        mul_xor(&mut out, &d[..len], 1);
                    }
                }
                Ok(out)
            }
            ([x], _, Some(q)) => {
                let mut out = q[..len].to_vec();
                for i in 0..data.len() {
                    if let Some(d) = present(i) {
                        mul_xor(&mut out, &d[..len], pow2(i));
                    }
                }
                let c = inv(pow2(*x));
                for b in &mut out {
                    *b = mul(*b, c);
                }
                Ok(out)
            }
            ([x, y], Some(p), Some(q)) => {
                let (x, y) = (*x, *y);
                let mut pxy = p[..len].to_vec();
                let mut qxy = q[..len].to_vec();
                for i in 0..data.len() {
                    if let Some(d) = present(i) {
                        mul_xor(&mut pxy, &d[..len], 1);
                        mul_xor(&mut qxy, &d[..len], pow2(i));
                    }
                }
                // Dx = (Qxy + g^y·Pxy) / (g^x + g^y); Dy = Pxy + Dx.
                let gy = pow2(y);
                let denom = inv(pow2(x) ^ gy);
                let dx: Vec<u8> = pxy
                    .iter()
                    .zip(&qxy)
                    .map(|(&pv, &qv)| mul(qv ^ mul(gy, pv), denom))
                    .collect();
                if target == x {
                    Ok(dx)
                } else {
                    Ok(pxy.iter().zip(&dx).map(|(a, b)| a ^ b).collect())
                }
            }
            _ => Err(super::RebuildError {
                missing: missing.len(),
                p_present: p.is_some(),
                q_present: q.is_some(),
            }),
        }
    }

    /// P and Q of a row of data strips (for tests and verification).
    pub fn parity(data: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
        let len = data.first().map_or(0, |d| d.len());
        let mut p = vec![0u8; len];
        let mut q = vec![0u8; len];
        for (i, d) in data.iter().enumerate() {
            mul_xor(&mut p, d, 1);
            mul_xor(&mut q, d, pow2(i));
        }
        (p, q)
    }
}

/// Why the RAID5/6 rebuild of a data strip is impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot rebuild: {missing} data strips missing, P {}, Q {}",
    presence(*p_present),
    presence(*q_present)
)]
pub struct RebuildError {
    /// Data strips unavailable, the target included.
    pub missing: usize,
    /// Whether P was readable.
    pub p_present: bool,
    /// Whether Q was readable.
    pub q_present: bool,
}

fn presence(present: bool) -> &'static str {
    if present {
        "present"
    } else {
        "missing"
    }
}

/// A malformed chunk item, or a read it cannot map (see [`crate::chunk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// A field lies past the end of the item.
    #[error("chunk item is truncated at byte {offset}")]
    Truncated {
        /// The field's offset in the item.
        offset: usize,
    },
    /// num_stripes is 0.
    #[error("chunk has no stripes")]
    NoStripes,
    /// The item is too short for its stripes.
    #[error("chunk item of {len} bytes is too short for {stripes} stripes")]
    TooShortForStripes {
        /// The item's size.
        len: usize,
        /// num_stripes.
        stripes: usize,
    },
    /// Length 0, or the chunk runs past the end of the address space.
    #[error("bad chunk length {length}")]
    BadLength {
        /// The length.
        length: u64,
    },
    /// stripe_len is not a power of two in 4 KiB..=1 GiB.
    #[error("bad stripe_len {stripe_len}")]
    BadStripeLen {
        /// The stripe_len.
        stripe_len: u64,
    },
    /// The chunk is REMAPPED.
    #[error("REMAPPED chunks (remap tree) are not supported")]
    Remapped,
    /// More than one profile bit is set.
    #[error("chunk type 0x{flags:x} has several profiles")]
    SeveralProfiles {
        /// The type bits.
        flags: u64,
    },
    /// The stripe count does not fit the profile.
    #[error("{profile} chunk with {stripes} stripes and {sub_stripes} sub-stripes")]
    BadStripeCount {
        /// The profile, by its [`crate::chunk::Profile`] name.
        profile: &'static str,
        /// num_stripes.
        stripes: usize,
        /// sub_stripes.
        sub_stripes: u16,
    },
    /// A copy the profile does not have.
    #[error("mirror {mirror} of a {profile} chunk")]
    NoSuchMirror {
        /// The copy asked for (1-based).
        mirror: u32,
        /// The profile, by its [`crate::chunk::Profile`] name.
        profile: &'static str,
    },
    /// A RAID5/6 chunk mapped as a mirror.
    #[error("parity profile mapped as a mirror")]
    ParityAsMirror,
    /// The physical offset overflows.
    #[error("physical offset overflows")]
    PhysicalOverflow {
        /// The stripe.
        stripe: usize,
    },
    /// Not a RAID5/6 chunk.
    #[error("not a parity chunk")]
    NotParity,
    /// The offset into the stripes overflows.
    #[error("offset overflows")]
    OffsetOverflow,
    /// A logical address outside the chunk.
    #[error("logical {logical} is outside chunk {start}..{end}")]
    Outside {
        /// The address.
        logical: u64,
        /// The chunk's start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// The chunk overlaps another one.
    #[error("overlaps chunk at logical {other}")]
    Overlaps {
        /// The other chunk's logical start.
        other: u64,
    },
    /// A stripe index the chunk does not have.
    #[error("no stripe {stripe}")]
    NoStripe {
        /// The index.
        stripe: usize,
    },
    /// The Q strip of a RAID6 row cannot be read.
    #[error("logical {logical}: Q strip unreadable")]
    QUnreadable {
        /// The address being read.
        logical: u64,
    },
    /// A data strip cannot be rebuilt from parity.
    #[error("logical {logical}: {reason}")]
    Rebuild {
        /// The address being read.
        logical: u64,
        /// Why.
        reason: RebuildError,
    },
}

/// A malformed sys_chunk_array in the superblock.
///
/// Offsets are byte offsets into the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SysChunkArrayError {
    /// A key runs past the end.
    #[error("sys_chunk_array: truncated key at byte {offset}")]
    TruncatedKey {
        /// Where it starts.
        offset: usize,
    },
    /// A key that is not `(256, CHUNK_ITEM, logical)`.
    #[error("sys_chunk_array: unexpected key ({}, {}, {})", key.objectid, key.item_type, key.offset)]
    UnexpectedKey {
        /// Where it starts.
        offset: usize,
        /// The key.
        key: Key,
    },
    /// A chunk item runs past the end.
    #[error("sys_chunk_array: truncated at byte {offset}")]
    Truncated {
        /// Where it starts.
        offset: usize,
    },
    /// A chunk item is malformed.
    #[error("sys_chunk_array chunk at logical {logical}: {reason}")]
    BadChunk {
        /// The chunk's logical start.
        logical: u64,
        /// What is wrong.
        reason: ChunkError,
    },
    /// No chunk at all.
    #[error("sys_chunk_array is empty")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(profile_flags: u64, n: usize, sub: u16) -> Chunk {
        let mut b = vec![0u8; CHUNK_ITEM_SIZE + STRIPE_SIZE * n];
        b[0..8].copy_from_slice(&(1u64 << 30).to_le_bytes());
        b[0x10..0x18].copy_from_slice(&65536u64.to_le_bytes());
        b[0x18..0x20].copy_from_slice(&(flags::DATA | profile_flags).to_le_bytes());
        b[0x2c..0x2e].copy_from_slice(&(n as u16).to_le_bytes());
        b[0x2e..0x30].copy_from_slice(&sub.to_le_bytes());
        for i in 0..n {
            let o = CHUNK_ITEM_SIZE + STRIPE_SIZE * i;
            b[o..o + 8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&((i as u64 + 1) << 32).to_le_bytes());
        }
        Chunk::parse(1 << 40, &b).unwrap().0
    }

    /// A single-profile chunk at `logical` of `len` bytes.
    fn at(logical: u64, len: u64) -> Chunk {
        Chunk {
            logical,
            length: len,
            ..chunk(0, 1, 1)
        }
    }

    #[test]
    fn a_newer_chunk_tree_replaces_what_it_overlaps_and_keeps_the_rest() {
        let mut m = ChunkMap::new();
        m.insert(at(0, 100)).unwrap();
        m.insert(at(100, 100)).unwrap();
        m.insert(at(300, 100)).unwrap();
        assert!(!m.insert_if_free(at(150, 10)), "overlaps the second");
        assert!(!m.insert_if_free(at(50, 100)), "overlaps two");
        assert!(m.insert_if_free(at(200, 100)), "fits the gap");
        m.replace(at(50, 100));
        let starts: Vec<u64> = m.iter().map(|c| c.logical).collect();
        assert_eq!(starts, vec![50, 200, 300]);
        assert!(m.lookup(10).is_none() && m.lookup(149).is_some());
    }

    #[test]
    fn raid0_rotates_stripes() {
        let c = chunk(flags::RAID0, 3, 1);
        let m = c
            .map_mirror(c.logical + 4 * 65536 + 10, 1 << 20, 1)
            .unwrap();
        assert_eq!(m.stripe, 1);
        assert_eq!(m.physical, (2u64 << 32) + 65536 + 10);
        assert_eq!(m.len, 65536 - 10);
    }

    #[test]
    fn raid10_mirrors_are_neighbours() {
        let c = chunk(flags::RAID10, 4, 2);
        let a = c.map_mirror(c.logical + 3 * 65536, 4096, 1).unwrap();
        let b = c.map_mirror(c.logical + 3 * 65536, 4096, 2).unwrap();
        assert_eq!((a.stripe, b.stripe), (2, 3));
        assert_eq!(a.physical - c.stripes[2].offset, 65536);
    }

    #[test]
    fn raid6_rotation_and_rebuild() {
        let c = chunk(flags::RAID6, 4, 1);
        // Row 1 (nr 2 and 3) rotates by one.
        let m = c.map_parity(c.logical + 2 * 65536, 4096).unwrap();
        assert_eq!(m.data_index, 0);
        assert_eq!(m.data_stripes, vec![1, 2]);
        assert_eq!((m.p_stripe, m.q_stripe), (3, Some(0)));
        assert_eq!(m.stripe_offset, 65536);

        let d0: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(1))
            .collect();
        let d1: Vec<u8> = (0..64).map(|i| (i as u8) ^ 0xa5).collect();
        let d2: Vec<u8> = (0..64).map(|i| (i as u8).wrapping_mul(13)).collect();
        let (p, q) = raid56::parity(&[&d0, &d1, &d2]);
        let all = [Some(&d0[..]), Some(&d1[..]), Some(&d2[..])];
        for t in 0..3 {
            let want = all[t].unwrap();
            assert_eq!(
                raid56::rebuild(t, &all, Some(&p), None, false, 64).unwrap(),
                want
            );
            assert_eq!(
                raid56::rebuild(t, &all, Some(&p), Some(&q), true, 64).unwrap(),
                want
            );
            assert_eq!(
                raid56::rebuild(t, &all, None, Some(&q), false, 64).unwrap(),
                want
            );
            for other in 0..3 {
                if other != t {
                    let mut two = all;
                    two[other] = None;
                    assert_eq!(
                        raid56::rebuild(t, &two, Some(&p), Some(&q), false, 64).unwrap(),
                        want
                    );
                }
            }
        }
        let none = [None, None, Some(&d2[..])];
        assert_eq!(
            raid56::rebuild(0, &none, Some(&p), None, false, 64),
            Err(RebuildError {
                missing: 2,
                p_present: true,
                q_present: false
            })
        );
    }

    #[test]
    fn overlapping_chunks_are_refused() {
        let mut m = ChunkMap::new();
        let a = chunk(0, 1, 1);
        let mut b = a.clone();
        b.logical += 4096;
        m.insert(a.clone()).unwrap();
        assert_eq!(m.insert(b), Err(ChunkError::Overlaps { other: a.logical }));
        assert_eq!(m.lookup(a.logical + 5).map(|c| c.logical), Some(a.logical));
        assert!(m.lookup(a.logical - 1).is_none());
    }

    #[test]
    fn malformed_chunk_items_are_errors() {
        let c = [0u8; 10];
        assert_eq!(
            Chunk::parse(0, &c),
            Err(ChunkError::Truncated { offset: 0x10 })
        );
        let mut b = vec![0u8; CHUNK_ITEM_SIZE + STRIPE_SIZE];
        b[0..8].copy_from_slice(&4096u64.to_le_bytes());
        b[0x10..0x18].copy_from_slice(&65536u64.to_le_bytes());
        b[0x2c..0x2e].copy_from_slice(&5u16.to_le_bytes());
        let e = Chunk::parse(0, &b).unwrap_err();
        assert_eq!(
            e,
            ChunkError::TooShortForStripes {
                len: CHUNK_ITEM_SIZE + STRIPE_SIZE,
                stripes: 5
            }
        );
        assert_eq!(
            e.to_string(),
            "chunk item of 80 bytes is too short for 5 stripes"
        );
        b[0x2c..0x2e].copy_from_slice(&1u16.to_le_bytes());
        b[0x18..0x20].copy_from_slice(&(flags::DATA | flags::RAID1).to_le_bytes());
        assert_eq!(
            Chunk::parse(0, &b).unwrap_err().to_string(),
            "Raid1 chunk with 1 stripes and 0 sub-stripes"
        );
    }
}
