//! Memory that does not grow with the data: the send of a tree with ten
//! times the data, and the dump and receive of its stream, peak at no more
//! than 1.5 times the memory of the smaller tree's, and under 64 MiB.
//!
//! The trees are made of the same directories (small, medium and large
//! files and a reflinked copy): ten times as many of them, or as many with
//! every file ten times larger. The peak is the kernel's count for each
//! process (`ru_maxrss`, through GNU time). Ten times as many directories
//! may also fill rsend's fixed 16 MiB tree block cache, which the base tree
//! leaves partly empty, and rdump's resident window of the mapped stream
//! (12 MiB) is full or not depending on how its threads ran; nothing else
//! may grow.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use testkit::{
    kernel_available, peak_rss_kib, rdump_bin, rreceive_bin, rsend_bin, run, BtrfsImage, Rng,
};

/// The bound docs/development.md gives for each tool.
const LIMIT_KIB: u64 = 64 << 10;
/// How much more the ten-times-larger tree may take.
const GROWTH: f64 = 1.5;
/// rsend's tree block cache, which a larger tree may fill (KiB).
const CACHE_KIB: u64 = 16 << 10;
/// The part of a mapped stream rdump may hold (KiB): 4 MiB behind the
/// reader before it is released, 8 MiB ahead for the CRC check; how much of
/// it is resident at the peak depends on how the two threads ran.
const WINDOW_KIB: u64 = 12 << 10;

/// Writes the tree: `dirs` directories of small files (1-16 KiB), medium
/// ones (64 KiB-1 MiB), one large file (2-4 MiB) and its reflinked copy,
/// every size times `scale`.
fn populate(root: &Path, dirs: u64, scale: u64) {
    let mut rng = Rng(0x6d65_6d6f_7279);
    let pattern: Vec<u8> = (0..(1 << 20) + 4096)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let write = |path: PathBuf, len: u64, rng: &mut Rng| {
        let mut f = fs::File::create(&path).unwrap();
        let mut left = len as usize;
        while left > 0 {
            let start = rng.below(4096) as usize;
            let n = left.min(1 << 20);
            f.write_all(&pattern[start..start + n]).unwrap();
            left -= n;
        }
    };
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        fs::create_dir(&dir).unwrap();
        for i in 0..30 {
            let len = (1024 + rng.below(15 << 10)) * scale;
            write(dir.join(format!("small{i}")), len, &mut rng);
        }
        for i in 0..3 {
            let len = ((64 << 10) + rng.below(960 << 10)) * scale;
            write(dir.join(format!("medium{i}")), len, &mut rng);
        }
        let large = dir.join("large");
        write(
            large.clone(),
            ((2 << 20) + rng.below(2 << 20)) * scale,
            &mut rng,
        );
        run(Command::new("cp")
            .arg("--reflink=always")
            .arg(&large)
            .arg(dir.join("large.copy")));
    }
}

/// Peak RSS of one run of `argv` (KiB), which must succeed.
fn peak(argv: &[&OsStr]) -> u64 {
    let (code, kib) = peak_rss_kib(argv, Stdio::null());
    assert_eq!(code, 0, "{argv:?} failed");
    kib
}

/// Peak RSS of rsend, rdump and rreceive on snapshot `snap` of `img`.
/// `bytes` is what the snapshot's files hold, checked in what is received.
fn measure(img: &Path, snap: &str, bytes: u64, scratch: &Path) -> [u64; 3] {
    let stream = scratch.join(format!("{snap}.stream"));
    let dest = scratch.join(format!("{snap}.dest"));
    fs::create_dir(&dest).unwrap();
    let rsend = rsend_bin();
    let send: Vec<&OsStr> = vec![
        rsend.as_os_str(),
        OsStr::new("-q"),
        OsStr::new("-d"),
        img.as_os_str(),
        OsStr::new("-f"),
        stream.as_os_str(),
        OsStr::new(snap),
    ];
    // The higher of two runs: threads race (the walk and the writer, the
    // CRC check ahead and the reader), and the bound is on the worst one.
    let send_kib = peak(&send).max(peak(&send));
    let rdump = rdump_bin();
    let dump = [rdump.as_os_str(), stream.as_os_str()];
    let dump_kib = peak(&dump).max(peak(&dump));
    let rreceive = rreceive_bin();
    let recv_kib = peak(&[
        rreceive.as_os_str(),
        OsStr::new("-q"),
        OsStr::new("-f"),
        stream.as_os_str(),
        dest.as_os_str(),
    ]);
    // The received tree is the snapshot's: the measured runs did the work.
    assert_eq!(du(&dest.join(snap)), bytes, "bytes received from {snap}");
    fs::remove_dir_all(&dest).unwrap();
    fs::remove_file(&stream).unwrap();
    [send_kib, dump_kib, recv_kib]
}

/// Sum of the sizes of the regular files under `dir`.
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        total += if m.is_dir() { du(&e.path()) } else { m.len() };
    }
    total
}

#[test]
fn memory_does_not_grow_with_data() {
    if !kernel_available("memory_does_not_grow_with_data") {
        return;
    }
    let mut img = BtrfsImage::new(4096, &[], "");
    let mut bytes = Vec::new();
    // Name, directories, size factor, and what the tree may add on top of
    // GROWTH times the base's memory: ten times the files may fill rsend's
    // fixed tree block cache (16 MiB), which the base tree does not.
    let trees = [
        ("base", 20, 1, 0),
        ("more", 200, 1, CACHE_KIB),
        ("larger", 20, 10, 0),
    ];
    for (name, dirs, scale, _) in trees {
        let sv = img.mnt().join(name);
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "create"])
            .arg(&sv));
        populate(&sv, dirs, scale);
        let snap = format!("{name}.snap");
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(&sv)
            .arg(img.mnt().join(&snap)));
        bytes.push(du(&sv));
    }
    img.unmount();
    let peaks: Vec<[u64; 3]> = trees
        .iter()
        .zip(&bytes)
        .map(|((name, ..), &b)| measure(img.image(), &format!("{name}.snap"), b, img.scratch()))
        .collect();
    let tools = ["rsend", "rdump", "rreceive"];
    for (i, tool) in tools.iter().enumerate() {
        println!(
            "{tool}: {} KiB for the tree, {} KiB with ten times as many directories, {} KiB with files ten times larger",
            peaks[0][i], peaks[1][i], peaks[2][i]
        );
    }
    for (i, tool) in tools.iter().enumerate() {
        for (t, p) in trees.iter().zip(&peaks) {
            assert!(
                p[i] <= LIMIT_KIB,
                "{tool} peaked at {} KiB on {}, over the {LIMIT_KIB} KiB bound",
                p[i],
                t.0
            );
            let cache = match *tool {
                "rsend" => t.3,
                "rdump" => WINDOW_KIB,
                _ => 0,
            };
            assert!(
                p[i] as f64 <= peaks[0][i] as f64 * GROWTH + cache as f64,
                "{tool} peaked at {} KiB on {}, {} KiB on base: more than {GROWTH} times (plus {cache} KiB of cache)",
                p[i],
                t.0,
                peaks[0][i]
            );
        }
    }
}
