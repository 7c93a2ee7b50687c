//! A kernel-made image held in memory whose metadata the fuzzer mutates:
//! shared by the targets that open whole filesystems.

use std::sync::{Arc, Mutex, OnceLock};

use btrfs_disk::csum::CsumType;
use btrfs_disk::mem::set_csum;

pub struct Image {
    bytes: Option<Arc<[u8]>>,
    /// Physical offsets of the metadata blocks, then the superblock.
    blocks: Vec<usize>,
    nodesize: usize,
    csum: CsumType,
}

impl Image {
    /// The image in `RSEND_FUZZ_IMAGE`, else `testdata/images/<default>/dev1.img.zst`.
    pub fn load(default: &str) -> Mutex<Image> {
        let path = std::env::var("RSEND_FUZZ_IMAGE").unwrap_or_else(|_| {
            format!(
                "{}/../testdata/images/{default}/dev1.img.zst",
                env!("CARGO_MANIFEST_DIR")
            )
        });
        let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let img = zstd::decode_all(&raw[..]).expect("zstd image");
        let sb = &img[65536..65536 + 4096];
        let fsid = &sb[0x20..0x30];
        let nodesize = u32::from_le_bytes(sb[0x94..0x98].try_into().unwrap()) as usize;
        let csum = CsumType::from_raw(u16::from_le_bytes([sb[0xc4], sb[0xc5]])).unwrap();
        let mut blocks: Vec<usize> = (0..img.len() / nodesize)
            .map(|i| i * nodesize)
            .filter(|&o| &img[o + 0x20..o + 0x30] == fsid && o != 65536)
            .collect();
        blocks.push(65536);
        Mutex::new(Image {
            bytes: Some(Arc::from(img)),
            blocks,
            nodesize,
            csum,
        })
    }
}

/// Input = a flags byte, then records of (block u16, offset u16, value u8)
/// applied to the image's metadata; flags bit 0 re-checksums the changed
/// blocks, the other bits are the target's. `run` gets the mutated image,
/// the flags and the records; the image is restored afterwards.
pub fn mutate(
    state: &'static OnceLock<Mutex<Image>>,
    default: &str,
    data: &[u8],
    run: impl FnOnce(Arc<[u8]>, u8, &[u8]),
) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut st = state
        .get_or_init(|| Image::load(default))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let (nodesize, csum) = (st.nodesize, st.csum);
    let mut arc = st.bytes.take().expect("image");
    let mut undo: Vec<(usize, Vec<u8>)> = Vec::new();
    {
        let img = Arc::get_mut(&mut arc).expect("image shared after a run");
        for r in rest.chunks_exact(5).take(64) {
            let sel = usize::from(u16::from_le_bytes([r[0], r[1]])) % st.blocks.len();
            let start = st.blocks[sel];
            let len = if start == 65536 { 4096 } else { nodesize };
            if !undo.iter().any(|(s, _)| *s == start) {
                undo.push((start, img[start..start + len].to_vec()));
            }
            let off = usize::from(u16::from_le_bytes([r[2], r[3]])) % len;
            img[start + off] = r[4];
        }
        if flags & 1 != 0 {
            for (start, old) in &undo {
                let len = old.len();
                let b = &mut img[*start..*start + len];
                if *start == 65536 {
                    let sum = csum.compute(&b[32..]);
                    b[..32].copy_from_slice(&sum);
                } else {
                    set_csum(csum, b);
                }
            }
        }
    }
    run(arc.clone(), flags, rest);
    let img = Arc::get_mut(&mut arc).expect("image still shared");
    for (start, old) in undo {
        img[start..start + old.len()].copy_from_slice(&old);
    }
    st.bytes = Some(arc);
}
