//! The progress bar on a terminal: bytes and files sent or verified,
//! against totals from a cheap pre-walk of the fs tree (metadata only,
//! [`rsend::progress::totals`]), with an ETA.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
use rsend::progress::{totals, Progress};

/// A progress bar on standard error.
pub(crate) struct Bar {
    bar: ProgressBar,
    files: AtomicU64,
    files_total: AtomicU64,
}

impl Bar {
    /// A bar on standard error named `prefix`; totals come later.
    pub(crate) fn new(prefix: &str) -> Bar {
        // Drawn only once styled and named.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} {spinner} {bytes} ({binary_bytes_per_sec}), {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(prefix.to_string());
        let p = Bar {
            bar,
            files: AtomicU64::new(0),
            files_total: AtomicU64::new(0),
        };
        p.show_files();
        p.bar.set_draw_target(ProgressDrawTarget::stderr());
        p.bar.enable_steady_tick(Duration::from_millis(200));
        p
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
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    /// The bar and ETA appear.
    fn set_totals(&self, bytes: u64, files: u64) {
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

    fn advance(&self, bytes: u64, files: u64) {
        self.bar.inc(bytes);
        if files > 0 {
            self.files.fetch_add(files, Ordering::Relaxed);
            self.show_files();
        }
    }
}

/// Runs `work` showing `bar` (if any), whose totals another thread
/// meanwhile sets to those of a full walk of `full` (if given; an
/// incremental send shows what it did, without a total); the bar is
/// removed after.
pub(crate) fn showing<R>(
    bar: Option<&Bar>,
    full: Option<(&Filesystem, &Subvolume)>,
    work: impl FnOnce() -> R,
) -> R {
    let r = std::thread::scope(|s| {
        if let (Some(bar), Some((fs, sv))) = (bar, full) {
            s.spawn(move || {
                if let Ok((bytes, files)) = totals(fs, sv) {
                    bar.set_totals(bytes, files);
                }
            });
        }
        work()
    });
    if let Some(bar) = bar {
        bar.finish();
    }
    r
}
