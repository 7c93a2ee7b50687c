//! What the `rsend` binary does, as library calls: it parses flags and calls one of these.

use std::io::Write;
use std::path::PathBuf;

use crate::fs::Filesystem;
use crate::subvol::SubvolSelector;

/// Prints the subvolumes of the filesystem on `devices` as
/// `btrfs subvolume list -p -u -q -R` does.
pub fn list(devices: &[PathBuf], out: &mut dyn Write) -> anyhow::Result<()> {
    let fs = Filesystem::open(devices)?;
    out.write_all(fs.list_text()?.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes the contents of the file at `path` in subvolume `sel` to `out`
/// (a debugging and benchmarking aid); returns the bytes written.
pub fn cat_file(
    devices: &[PathBuf],
    sel: &SubvolSelector,
    path: &str,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let fs = Filesystem::open(devices)?;
    let sv = fs.find_subvolume(sel)?;
    let ino = fs.lookup_path(&sv, path)?;
    let tree = fs.fs_tree(&sv);
    let inode = fs.inode_in(&tree, ino)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut off = 0u64;
    loop {
        let n = fs
            .read_file_in(&tree, &inode, off, &mut buf)
            .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
    }
    out.flush()?;
    Ok(off)
}
