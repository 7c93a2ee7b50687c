//! Opening the filesystem, and the commands that only read it: `--list`
//! and `--cat-file`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use btrfs_disk::fs::{Filesystem, Options};
use btrfs_disk::rescue::Losses;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::{Notice, SubvolSelector};
use btrfs_text::json::bytes_value;

/// The reader's options for rsend: its notices on standard error, as
/// `rsend: KIND: MESSAGE`.
fn options() -> Options {
    Options {
        notice: Arc::new(|n: &Notice| eprintln!("rsend: {n}")),
        ..Options::default()
    }
}

/// Prints the subvolumes of the filesystem on `devices` as
/// `btrfs subvolume list -p -u -q -R` does, or with `json` one JSON object
/// per subvolume and line.
pub(crate) fn list(devices: &[PathBuf], json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let fs = Filesystem::open_with(devices, options())?;
    let text = if json {
        let mut lines = Vec::new();
        for sv in fs.subvolumes()? {
            serde_json::to_writer(&mut lines, &list_json(&sv))?;
            lines.push(b'\n');
        }
        lines
    } else {
        fs.list_text()?.into_bytes()
    };
    match out.write_all(&text).and_then(|()| out.flush()) {
        // A closed pipe (`| head`) has all it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// One subvolume of `rsend --list --json`: the columns of the text listing
/// (a nil uuid as null) and the ctransid (`cgen`) and read-only flag.
fn list_json(sv: &Subvolume) -> serde_json::Value {
    let parent = sv.link.as_ref().map_or(0, |l| l.parent);
    let uuid = |u: &uuid::Uuid| (!u.is_nil()).then(|| u.hyphenated().to_string());
    serde_json::json!({
        "id": sv.id,
        "gen": sv.generation(),
        "cgen": sv.ctransid,
        "parent": parent,
        "top_level": parent,
        "parent_uuid": uuid(&sv.parent_uuid),
        "received_uuid": uuid(&sv.received_uuid),
        "uuid": uuid(&sv.uuid),
        "readonly": sv.is_readonly(),
        "path": bytes_value(sv.path.as_deref().unwrap_or_default()),
    })
}

/// Writes the contents of the file at `path` in subvolume `sel` to `out`
/// (a debugging and benchmarking aid); returns the bytes written.
pub(crate) fn cat_file(
    devices: &[PathBuf],
    sel: &SubvolSelector,
    path: &str,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let fs = Filesystem::open_with(devices, options())?;
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

/// Opens the filesystem on `devices` for a send, a listing or a verify,
/// with a tree block cache of `cache_bytes`; `quiet` keeps notes (not
/// warnings) off standard error. With `rescue`, what cannot be read is
/// recorded there instead of failing (`--rescue`).
pub(crate) fn open_fs(
    devices: &[PathBuf],
    quiet: bool,
    cache_bytes: usize,
    rescue: Option<Arc<Losses>>,
) -> anyhow::Result<Filesystem> {
    // These read the trees once in order; a smaller block cache than the
    // reader's default keeps the peak RSS low at no measurable cost.
    let mut opts = Options {
        cache_bytes,
        rescue,
        ..options()
    };
    if quiet {
        // Notes (such as "mounted; reading with O_DIRECT") would mail a cron job every night.
        let all = opts.notice.clone();
        opts.notice = std::sync::Arc::new(move |n: &btrfs_disk::Notice| {
            if n.kind != btrfs_disk::NoticeKind::Note {
                all(n);
            }
        });
    }
    Ok(Filesystem::open_with(devices, opts)?)
}
