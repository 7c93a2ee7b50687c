//! Progress on a terminal: bytes and files sent, against totals from a
//! cheap pre-walk of the fs tree (metadata only), with an ETA.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use btrfs_disk::error::{Error, Result};
use btrfs_disk::fs::Filesystem;
use btrfs_disk::items::{key_type, objectid, ExtentKind, FileExtentItem, InodeItem};
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::Key;

/// A progress bar on standard error.
#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
    files: Arc<AtomicU64>,
    files_total: Arc<AtomicU64>,
}

impl Progress {
    /// A bar on standard error named `prefix`; totals come later.
    pub fn new(prefix: &str) -> Progress {
        // Drawn only once styled and named.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} {spinner} {bytes} ({binary_bytes_per_sec}), {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(prefix.to_string());
        let p = Progress {
            bar,
            files: Arc::new(AtomicU64::new(0)),
            files_total: Arc::new(AtomicU64::new(0)),
        };
        p.show_files();
        p.bar.set_draw_target(ProgressDrawTarget::stderr());
        p.bar.enable_steady_tick(Duration::from_millis(200));
        p
    }

    /// Sets the totals (from [`totals`]); the bar and ETA appear.
    pub fn set_totals(&self, bytes: u64, files: u64) {
        self.files_total.store(files, Ordering::Relaxed);
        self.bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{wide_bar}] {bytes}/{total_bytes} ({binary_bytes_per_sec}), {msg}, ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        self.bar.set_length(bytes);
        self.show_files();
    }

    pub(crate) fn advance(&self, bytes: u64, files: u64) {
        self.bar.inc(bytes);
        if files > 0 {
            self.files.fetch_add(files, Ordering::Relaxed);
            self.show_files();
        }
    }

    fn show_files(&self) {
        let done = self.files.load(Ordering::Relaxed);
        let total = self.files_total.load(Ordering::Relaxed);
        if total > 0 {
            self.bar.set_message(format!("{done}/{total} files"));
        } else {
            self.bar.set_message(format!("{done} files"));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Runs `f` (which prints to stderr) with the bar hidden.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }
}

/// What a full send of `sv` will carry: (file data bytes, inodes), from its
/// INODE_ITEMs and EXTENT_DATA items alone.
pub fn totals(fs: &Filesystem, sv: &Subvolume) -> Result<(u64, u64)> {
    let tree = fs.fs_tree(sv);
    let sectorsize = fs.sectorsize() as u64;
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut cur: Option<(u64, u64)> = None; // (ino, size) of the current regular file
    let from = Key::new(objectid::FIRST_FREE, key_type::INODE_ITEM, 0);
    for item in tree.range(from, Key::MAX) {
        let item = item?;
        let k = item.key;
        match k.item_type {
            key_type::INODE_ITEM => {
                let ii = InodeItem::parse(item.data()).map_err(Error::bad_item(tree.id, k))?;
                cur = None;
                if ii.nlink() > 0 {
                    files += 1;
                    if ii.mode() & 0o170000 == 0o100000 {
                        cur = Some((k.objectid, ii.size()));
                    }
                }
            }
            key_type::EXTENT_DATA => {
                let Some((ino, size)) = cur.filter(|c| c.0 == k.objectid) else {
                    continue;
                };
                let _ = ino;
                let Ok(fe) = FileExtentItem::parse(item.data()) else {
                    continue;
                };
                let end = match fe.kind() {
                    ExtentKind::Prealloc => continue,
                    ExtentKind::Regular if fe.disk_bytenr() == 0 => continue,
                    ExtentKind::Regular => k.offset.saturating_add(fe.num_bytes()),
                    ExtentKind::Inline => k
                        .offset
                        .saturating_add(fe.ram_bytes())
                        .div_ceil(sectorsize)
                        .saturating_mul(sectorsize),
                };
                bytes += end.min(size).saturating_sub(k.offset);
            }
            _ => {}
        }
    }
    Ok((bytes, files))
}
