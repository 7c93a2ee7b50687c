//! The receive limit: the received tree's directories and files, with the
//! same sizes, made by plain `mkdir` and `write` calls.
//!
//! The manifest (written by `benches/compare` from a received tree) has one
//! line per entry, tab-separated: `d PATH` for a directory (parents first),
//! then `f SIZE NAME` for each file in the directory named last.
//!
//! The creates run on every core, a directory to a thread at a time; one
//! more thread writes each file's data and closes it, on btrfs starting its
//! writeback first, as rreceive does there: every dirty inode holds a large
//! metadata reservation, and once those fill up, creates and writes wait
//! for the kernel's one flushing worker (30,000 small files onto a 1.4 GB
//! btrfs took about twice rreceive's time written plainly on one thread).

use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::work::on_all_cores;

/// What a pass created.
#[derive(Default)]
pub struct Created {
    dirs: usize,
    files: u64,
    bytes: u64,
    threads: usize,
    writeback: bool,
}

impl Created {
    fn add(&mut self, o: Created) {
        self.files += o.files;
        self.bytes += o.bytes;
    }
}

impl fmt::Display for Created {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "created {} directories and {} files of {} bytes ({} threads{})",
            self.dirs,
            self.files,
            self.bytes,
            self.threads,
            if self.writeback {
                ", writeback started"
            } else {
                ""
            }
        )
    }
}

struct Dir {
    path: PathBuf,
    files: Vec<(String, usize)>,
}

fn parse(text: &str) -> anyhow::Result<Vec<Dir>> {
    let mut dirs: Vec<Dir> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields[..] {
            ["d", path] => dirs.push(Dir {
                path: PathBuf::from(path),
                files: Vec::new(),
            }),
            ["f", size, name] => match dirs.last_mut() {
                Some(d) => d.files.push((name.to_string(), size.parse()?)),
                None => bail!("line {}: a file before any directory", n + 1),
            },
            _ => bail!("line {}: neither `d PATH` nor `f SIZE NAME`", n + 1),
        }
    }
    Ok(dirs)
}

/// `sync_file_range(SYNC_FILE_RANGE_WRITE)` of the whole file: starts the
/// writeback of its dirty pages and waits for nothing.
fn start_writeback(fd: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: a plain system call on an open descriptor, no memory passed.
    let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    nix::errno::Errno::result(r).map(drop)
}

/// Creates the manifest's directories beneath `root` in order, then the
/// files of each directory on `threads` threads, a directory to a thread at
/// a time, each file's data written with one `write` of its size on a
/// thread of its own (on btrfs, its writeback started before it is closed).
pub fn from_manifest(manifest: &Path, root: &Path, threads: usize) -> anyhow::Result<Created> {
    let dirs = parse(&std::fs::read_to_string(manifest)?)?;
    let btrfs =
        nix::sys::statfs::statfs(root)?.filesystem_type() == nix::sys::statfs::BTRFS_SUPER_MAGIC;
    for d in &dirs {
        let p = root.join(&d.path);
        if !p.is_dir() {
            std::fs::create_dir(&p).with_context(|| p.display().to_string())?;
        }
    }
    let largest = dirs
        .iter()
        .flat_map(|d| d.files.iter().map(|f| f.1))
        .max()
        .unwrap_or(0);
    let data = vec![0xa5u8; largest];
    // The data is written, writeback started and files closed on a thread
    // of its own, as rreceive does, so that the creates do not wait for the
    // metadata reservations of the writes.
    let (tx, rx) = std::sync::mpsc::sync_channel::<(std::fs::File, usize)>(1024);
    let writer = std::thread::spawn(move || -> anyhow::Result<()> {
        for (mut f, size) in rx {
            f.write_all(&data[..size])?;
            if btrfs {
                start_writeback(f.as_fd())?;
            }
        }
        Ok(())
    });
    let created = on_all_cores(
        dirs.len(),
        threads,
        |i| {
            let d = &dirs[i];
            let mut c = Created::default();
            for (name, size) in &d.files {
                let p = root.join(&d.path).join(name);
                let f = std::fs::File::create(&p).with_context(|| p.display().to_string())?;
                if *size > 0 {
                    tx.send((f, *size))?;
                }
                c.files += 1;
                c.bytes += *size as u64;
            }
            Ok(c)
        },
        Created::add,
    );
    drop(tx);
    let written = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the writing thread panicked"))?;
    let mut c = created?;
    written?;
    c.dirs = dirs.len();
    c.threads = threads;
    c.writeback = btrfs;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_files_belong_to_the_directory_named_before_them() {
        let dirs = parse("d\ts0\nf\t3\ta b\nd\ts0/d1\nf\t0\tc\n").unwrap();
        assert_eq!(dirs.len(), 2);
        assert_eq!(dirs[0].files, [("a b".to_string(), 3)]);
        assert_eq!(dirs[1].path, Path::new("s0/d1"));
        assert_eq!(dirs[1].files, [("c".to_string(), 0)]);
    }

    #[test]
    fn manifest_with_a_file_before_any_directory_is_refused() {
        assert!(parse("f\t3\ta\n").is_err());
        assert!(parse("x\tb\n").is_err());
    }

    #[test]
    fn tree_made_from_a_manifest_has_its_sizes() {
        let root = std::env::temp_dir().join(format!("bench-limit-test-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let manifest = root.join("manifest");
        std::fs::write(&manifest, "d\tt\nf\t10\ta\nd\tt/u\nf\t3000\tb\nf\t0\tc\n").unwrap();
        let c = from_manifest(&manifest, &root, 2).unwrap();
        assert_eq!((c.dirs, c.files, c.bytes), (2, 3, 3010));
        let size = |p: &str| std::fs::metadata(root.join(p)).unwrap().len();
        assert_eq!((size("t/a"), size("t/u/b"), size("t/u/c")), (10, 3000, 0));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
