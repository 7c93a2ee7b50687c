//! Progress on a terminal: the stream bytes read (against the input's size
//! when it is known, with an ETA), the rate, and the commands applied; the
//! inodes of a parent copied (off btrfs, for a snapshot); message lines
//! kept apart from the bars.
//!
//! In `rsend | rreceive` on one terminal, rsend draws its own bar: two
//! bars on one line would overwrite each other, so rreceive then draws
//! none, and starts each of its messages on a cleared line of its own.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where messages and the bar go.
#[derive(Default)]
pub(crate) struct Meter {
    /// The bar, made when first needed: by then the stream's first bytes
    /// came, so a sender in the same pipeline has started and can be seen.
    bar: std::cell::OnceCell<Option<ProgressBar>>,
    /// Whether a bar is wanted at all (standard error is a terminal).
    want: bool,
    /// The stream's size, when known.
    total: Option<u64>,
    /// Standard error is a terminal (another tool may draw on it).
    tty: bool,
    /// An rsend of this pipeline was seen when rreceive started.
    sender_seen: bool,
}

impl Meter {
    /// No bar, plain messages.
    pub(crate) fn quiet() -> Meter {
        Meter::default()
    }

    /// A bar on standard error when it is a terminal: against `total`
    /// bytes when given, else a byte count and rate.
    /// `sender_seen`: an rsend of this pipeline was seen already (look with
    /// [`sender_draws`] before reading the stream: once it is read the
    /// sender may be gone).
    pub(crate) fn new(total: Option<u64>, sender_seen: bool) -> Meter {
        let tty = std::io::stderr().is_terminal();
        Meter {
            bar: std::cell::OnceCell::new(),
            want: tty,
            total,
            tty,
            // Looked for again when the bar is first needed: the sender
            // may start later than rreceive.
            sender_seen,
        }
    }

    fn bar(&self) -> Option<&ProgressBar> {
        self.bar
            .get_or_init(|| {
                if !self.want || self.sender_seen || (self.total.is_none() && sender_draws()) {
                    return None;
                }
                Some(make_bar(self.total))
            })
            .as_ref()
    }

    /// Stream bytes read so far and commands applied.
    pub(crate) fn update(&self, bytes: u64, commands: u64) {
        if let Some(b) = self.bar() {
            b.set_position(bytes);
            b.set_message(format!("{commands} commands"));
        }
    }

    /// Writes one message line, apart from any bar.
    pub(crate) fn line(&self, text: &str) {
        use std::io::Write;
        match self.bar() {
            Some(b) => b.suspend(|| {
                let _ = writeln!(std::io::stderr(), "{text}");
            }),
            // Another tool's bar may be on this line: clear it first.
            None if self.tty => {
                let _ = writeln!(std::io::stderr(), "\r\x1b[2K{text}");
            }
            None => {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(Some(b)) = self.bar.get() {
            b.finish_and_clear();
        }
    }
}

/// A bar against `total` bytes, or a spinner with a count and rate.
fn make_bar(total: Option<u64>) -> ProgressBar {
    // Drawn only once styled.
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
    let style = match total {
        Some(_) => ProgressStyle::with_template(
            "receiving [{wide_bar}] {bytes}/{total_bytes} ({binary_bytes_per_sec}), {msg}, ETA {eta}",
        )
        .map(|s| s.progress_chars("=> ")),
        None => {
            ProgressStyle::with_template("receiving {spinner} {bytes} ({binary_bytes_per_sec}), {msg}")
        }
    };
    bar.set_style(style.unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar.set_message("0 commands");
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A bar of the `inodes` inodes of a parent being copied, when standard
/// error is a terminal.
pub(crate) fn copy_bar(inodes: u64) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new(inodes);
    b.set_style(
        ProgressStyle::with_template("copying parent [{wide_bar}] {pos}/{len} inodes, ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    Some(b)
}

/// Whether an rsend in this process group (a shell pipeline on this
/// terminal) draws its own bar.
pub(crate) fn sender_draws() -> bool {
    let group = |stat: &str| -> Option<(String, i64)> {
        let open = stat.find('(')?;
        let close = stat.rfind(')')?;
        let comm = stat.get(open + 1..close)?.to_string();
        let pgrp = stat.get(close + 2..)?.split(' ').nth(2)?.parse().ok()?;
        Some((comm, pgrp))
    };
    let Some((_, mine)) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(group)
    else {
        return false;
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            && std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .as_deref()
                .and_then(group)
                .is_some_and(|(comm, pgrp)| pgrp == mine && comm == "rsend")
    })
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.finish();
    }
}
