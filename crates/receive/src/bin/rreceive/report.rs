//! What a receive reports, on standard error: its messages (`rreceive: `
//! before all but the status lines), every command with `-vv` (as
//! `--dump` prints it), and the progress bars.

use std::cell::RefCell;
use std::fmt::Arguments;
use std::io::Write;

use btrfs_stream::{Command, Position};
use indicatif::ProgressBar;
use rreceive::{Error, Level, Report};

use crate::bar::{copy_bar, Meter};

/// The report of a receive run from the command line.
pub(crate) struct Stderr {
    /// The progress bar, which the message lines stay apart from.
    meter: Meter,
    /// The bar of a parent being copied.
    copy: RefCell<Option<ProgressBar>>,
}

impl Stderr {
    /// Messages and, when `meter` draws one, a bar.
    pub(crate) fn new(meter: Meter) -> Stderr {
        Stderr {
            meter,
            copy: RefCell::new(None),
        }
    }
}

impl Report for Stderr {
    fn message(&self, level: Level, text: Arguments<'_>) {
        self.meter.line(&match level {
            Level::Status => text.to_string(),
            Level::Notice | Level::Detail => format!("rreceive: {text}"),
            Level::Warning => format!("rreceive: warning: {text}"),
        });
    }

    fn error(&self, e: &Error) {
        self.meter.line(&format!("rreceive: error: {e}"));
    }

    fn command(&self, cmd: &Command<'_>, pos: Position) {
        use rdump::Sink;
        let mut t = rdump::TextDump::new(Vec::new());
        if t.command(cmd, pos).is_ok() {
            let _ = t.finish();
            let line = t.into_inner();
            let _ = std::io::stderr().write_all(&line);
        }
    }

    fn progress(&self, bytes: u64, commands: u64) {
        self.meter.update(bytes, commands);
    }

    fn copying(&self, inodes: u64) {
        *self.copy.borrow_mut() = copy_bar(inodes);
    }

    fn copied(&self) {
        if let Some(b) = &*self.copy.borrow() {
            b.inc(1);
        }
    }

    fn copy_done(&self) {
        if let Some(b) = self.copy.borrow_mut().take() {
            b.finish_and_clear();
        }
    }
}
