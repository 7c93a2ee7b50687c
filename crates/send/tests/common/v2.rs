//! testdata/v2: the protocol v2 scenarios of testdata/v2/scenarios.sh and
//! what testdata/make-v2.sh made of them (the kernel's image and streams,
//! the mkfs-made LZO images, the hand-made fs-verity image, manifests and
//! flag lists). See testdata/v2/README.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::scenarios::Manifest;

/// testdata/v2 of the workspace.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/v2")
}

/// The send flavors of every scenario: the stream file part and the flags
/// (of `btrfs send` and of rsend alike).
pub const FLAVORS: [(&str, &[&str]); 3] = [
    ("v2c", &["--proto", "2", "--compressed-data"]),
    ("nd1", &["--no-data"]),
    ("nd2", &["--proto", "2", "--no-data"]),
];

/// The sector sizes of the mkfs-made LZO images.
pub const LZO_SECTORS: [&str; 4] = ["8k", "16k", "32k", "64k"];

/// The scenarios, in the order kernel.tsv lists them.
pub fn scenarios() -> Vec<String> {
    let tsv = std::fs::read_to_string(dir().join("kernel.tsv"))
        .expect("testdata/v2/kernel.tsv (sudo testdata/make-v2.sh makes it)");
    let mut out: Vec<String> = Vec::new();
    for l in tsv.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split('\t').next().unwrap_or_default().to_string();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// rsend's arguments for send `kind` ("full" or "incr") of `scenario`:
/// `flags`, then the snapshots (NAME.p, or -p NAME.p NAME.c).
pub fn send_args(flags: &[&str], scenario: &str, kind: &str) -> Vec<String> {
    let (p, c) = (format!("{scenario}.p"), format!("{scenario}.c"));
    let snaps = match kind {
        "full" => vec![p],
        _ => vec!["-p".into(), p, c],
    };
    flags.iter().map(|f| f.to_string()).chain(snaps).collect()
}

/// The kernel's stream of send `kind` of `scenario` as `flavor`.
pub fn kernel_stream(scenario: &str, flavor: &str, kind: &str) -> Vec<u8> {
    super::read_zst(
        &dir()
            .join("streams")
            .join(format!("{scenario}.{flavor}.{kind}.stream.zst")),
    )
}

/// The committed manifest `name` (a snapshot, `lzo-16k.a`, ...).
pub fn manifest(name: &str) -> Manifest {
    let p = dir().join("manifests").join(format!("{name}.manifest"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    Manifest::parse(&text)
}

/// The committed inode flags of snapshot `snap`: hex path to
/// FS_IOC_GETFLAGS (None for inodes that have none).
pub fn flags(snap: &str) -> BTreeMap<String, Option<u32>> {
    let p = dir().join("manifests").join(format!("{snap}.flags"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(path, f)| (path.to_string(), u32::from_str_radix(f, 16).ok()))
        .collect()
}

/// Decompresses image `name` (`dev1`, `lzo-16k`, `verity`) into `into`.
pub fn decompress_image(name: &str, into: &Path) -> PathBuf {
    let dst = into.join(format!("{name}.img"));
    super::decompress_sparse(&dir().join(format!("image/{name}.img.zst")), &dst);
    dst
}

/// `rsend -q -d IMAGE ARGS... -f OUT`, the stream it wrote (OUT removed).
pub fn rsend<S: AsRef<std::ffi::OsStr>>(
    image: &Path,
    args: &[S],
    out: &Path,
) -> Result<Vec<u8>, String> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rsend"));
    cmd.args(["-q", "-d"]).arg(image).arg("-f").arg(out);
    cmd.args(args);
    super::receivers::output_file(&mut cmd, out)
}

/// One file of verity.tsv: what ENABLE_VERITY must carry for it.
#[derive(Debug, PartialEq, Eq)]
pub struct Verity {
    pub path: String,
    pub algorithm: u8,
    pub block_size: u32,
    pub salt: Vec<u8>,
    pub sig: Vec<u8>,
}

/// The files make-verity.py turned fs-verity on for, in verity.c.
pub fn verity_files() -> Vec<Verity> {
    let text = std::fs::read_to_string(dir().join("verity.tsv")).expect("testdata/v2/verity.tsv");
    let unhex = |s: &str| -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
            .collect()
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Verity {
                path: f[0].to_string(),
                algorithm: f[2].parse().expect("algorithm"),
                block_size: f[3].parse().expect("block size"),
                salt: unhex(f[4]),
                sig: unhex(f[5]),
            }
        })
        .collect()
}

/// A compressed extent of file `b` in snapshot `zstd_extents.p` of the v2 image
/// at `image`: the file's inode, and the extent's logical and physical address
/// (mirror 1).
pub fn compressed_extent_of_b(image: &Path) -> (u64, u64, u64) {
    use btrfs_disk::{items::Compression, Filesystem, SubvolSelector};
    let fs = Filesystem::open(&[image]).unwrap();
    let sv = fs
        .find_subvolume(&SubvolSelector::Path("zstd_extents.p".into()))
        .unwrap();
    let ino = fs.lookup_path(&sv, "b").unwrap();
    let x = fs
        .file_extents(&sv, ino)
        .unwrap()
        .into_iter()
        .find(|x| x.compression != Compression::None && x.disk_bytenr != 0)
        .expect("a compressed extent in b");
    let chunks = fs.chunks();
    let c = chunks.lookup(x.disk_bytenr).expect("mapped");
    let m = c.map_mirror(x.disk_bytenr, 1, 1).expect("mirror");
    (ino, x.disk_bytenr, m.physical)
}
