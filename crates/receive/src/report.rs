//! How a receive tells what it does: the [`Report`] it is given, to which
//! it sends its messages and progress, and the [`Log`] through which the
//! engine reaches it, keeping to the verbosity asked for.
//!
//! The engine never prints: the `rreceive` binary's report draws the
//! progress bars and writes the messages to standard error.

use std::fmt::Arguments;

use btrfs_stream::{Command, Position};

use crate::error::Error;

/// What kind of message a receive reports, each shown from the
/// [`Options::verbosity`](crate::Options::verbosity) given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Where the receive is, such as `At subvol NAME` (verbosity 1).
    Status,
    /// Something worth knowing that is not a problem, such as a parent
    /// copied for want of snapshots (verbosity 1).
    Notice,
    /// Something not received as it was sent (verbosity 1).
    Warning,
    /// A detail (verbosity 2, `-v`).
    Detail,
}

/// Where a receive reports what it does. Every method does nothing unless
/// implemented; `()` implements none of them, for callers that want no
/// reports. A receive calls them on the thread that runs it.
pub trait Report {
    /// A message of kind `level`.
    fn message(&self, _level: Level, _text: Arguments<'_>) {}

    /// A command failed and the receive goes on
    /// ([`Options::max_errors`](crate::Options::max_errors) above 1).
    fn error(&self, _error: &Error) {}

    /// The command about to be applied (verbosity 3, `-vv`).
    fn command(&self, _cmd: &Command<'_>, _pos: Position) {}

    /// The stream has been read up to byte `bytes`, and `commands`
    /// commands applied (told every 64 commands).
    fn progress(&self, _bytes: u64, _commands: u64) {}

    /// A snapshot's parent of `inodes` inodes is being copied (off btrfs);
    /// [`Report::copied`] tells each inode, [`Report::copy_done`] the end.
    fn copying(&self, _inodes: u64) {}

    /// One more inode of the parent copied.
    fn copied(&self) {}

    /// The copy [`Report::copying`] announced is over.
    fn copy_done(&self) {}
}

/// No reports.
impl Report for () {}

/// The engine's way to its [`Report`]: only what the verbosity asks for is
/// formatted and told.
pub(crate) struct Log<'r> {
    /// The verbosity (see [`Options::verbosity`](crate::Options::verbosity)).
    pub(crate) level: u8,
    /// Where it goes.
    pub(crate) report: &'r dyn Report,
}

impl Log<'_> {
    /// A normal message (`At subvol ...`), hidden by `-q`.
    pub(crate) fn info(&self, args: Arguments<'_>) {
        self.at(1, Level::Status, args);
    }

    /// A notice, hidden by `-q`.
    pub(crate) fn notice(&self, args: Arguments<'_>) {
        self.at(1, Level::Notice, args);
    }

    /// A warning, hidden by `-q`.
    pub(crate) fn warning(&self, args: Arguments<'_>) {
        self.at(1, Level::Warning, args);
    }

    /// A detail shown with `-v`.
    pub(crate) fn note(&self, args: Arguments<'_>) {
        self.at(2, Level::Detail, args);
    }

    fn at(&self, min: u8, level: Level, args: Arguments<'_>) {
        if self.level >= min {
            self.report.message(level, args);
        }
    }

    /// An error that does not stop the receive (`-E`).
    pub(crate) fn error(&self, e: &Error) {
        self.report.error(e);
    }

    /// The command about to be applied, with `-vv`.
    pub(crate) fn command(&self, cmd: &Command<'_>, pos: Position) {
        if self.level >= 3 {
            self.report.command(cmd, pos);
        }
    }
}

impl<'r> Log<'r> {
    /// Stream bytes read and commands applied, hidden by `-q`.
    pub(crate) fn progress(&self, bytes: u64, commands: u64) {
        if self.level >= 1 {
            self.report.progress(bytes, commands);
        }
    }

    /// A copy of a parent of `inodes` inodes begins; it is over when the
    /// value returned is dropped.
    pub(crate) fn copying(&self, inodes: u64) -> Copying<'r> {
        let report = (self.level >= 1).then_some(self.report);
        if let Some(r) = report {
            r.copying(inodes);
        }
        Copying { report }
    }
}

/// A copy of a parent being made, told to the report (see [`Log::copying`]).
pub(crate) struct Copying<'r> {
    report: Option<&'r dyn Report>,
}

/// Something told of each inode a tree copy makes (a progress bar).
pub(crate) trait Tick {
    /// One more inode (or link) done.
    fn tick(&self);
}

impl Tick for () {
    fn tick(&self) {}
}

impl Tick for Copying<'_> {
    fn tick(&self) {
        if let Some(r) = self.report {
            r.copied();
        }
    }
}

impl Drop for Copying<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.report {
            r.copy_done();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Keeps what it is told.
    #[derive(Default)]
    struct Kept(RefCell<Vec<String>>);

    impl Report for Kept {
        fn message(&self, level: Level, text: Arguments<'_>) {
            self.0.borrow_mut().push(format!("{level:?} {text}"));
        }
        fn progress(&self, bytes: u64, commands: u64) {
            self.0.borrow_mut().push(format!("at {bytes} {commands}"));
        }
        fn copying(&self, inodes: u64) {
            self.0.borrow_mut().push(format!("copying {inodes}"));
        }
        fn copied(&self) {
            self.0.borrow_mut().push("copied".into());
        }
        fn copy_done(&self) {
            self.0.borrow_mut().push("copy done".into());
        }
    }

    fn told(level: u8) -> Vec<String> {
        let kept = Kept::default();
        let log = Log {
            level,
            report: &kept,
        };
        log.info(format_args!("At subvol a"));
        log.notice(format_args!("copying"));
        log.warning(format_args!("skipped"));
        log.note(format_args!("detail"));
        log.progress(10, 1);
        log.copying(2).tick();
        kept.0.into_inner()
    }

    #[test]
    fn the_verbosity_decides_what_is_told() {
        assert_eq!(told(0), Vec::<String>::new());
        let normal = [
            "Status At subvol a",
            "Notice copying",
            "Warning skipped",
            "at 10 1",
            "copying 2",
            "copied",
            "copy done",
        ];
        assert_eq!(told(1), normal);
        let mut verbose = normal.to_vec();
        verbose.insert(3, "Detail detail");
        assert_eq!(told(2), verbose);
    }
}

/// What a receive skipped because the destination cannot store it, by kind
/// (such as `xattr btrfs.compression` or `inode flags`), for the warning
/// at the end. At most [`Skipped::KINDS`] kinds are told apart; the rest
/// count as `other`.
#[derive(Debug, Default)]
pub(crate) struct Skipped {
    kinds: Vec<(String, u64)>,
    /// How to keep what was skipped, each said once (at most
    /// [`Skipped::KINDS`]).
    fixes: Vec<String>,
}

impl Skipped {
    /// Kinds told apart (a hostile stream may name any number of xattrs).
    pub const KINDS: usize = 8;

    /// Counts `n` items of `kind`.
    pub fn add(&mut self, kind: &str, n: u64) {
        if let Some(k) = self.kinds.iter_mut().find(|(k, _)| k == kind) {
            k.1 += n;
        } else if self.kinds.len() < Self::KINDS {
            self.kinds.push((kind.to_owned(), n));
        } else {
            self.add_other(n);
        }
    }

    /// Adds `fix`, a way to keep what was skipped, unless already said.
    pub fn fix(&mut self, fix: &str) {
        if self.fixes.len() < Self::KINDS && !self.fixes.iter().any(|f| f == fix) {
            self.fixes.push(fix.to_owned());
        }
    }

    /// The ways to keep what was skipped, in the order met: `; tune2fs -O
    /// ea_inode DEVICE enables large xattrs on ext4`; empty when none.
    pub fn fixes(&self) -> String {
        self.fixes.iter().map(|f| format!("; {f}")).collect()
    }

    fn add_other(&mut self, n: u64) {
        match self.kinds.iter_mut().find(|(k, _)| k == "other") {
            Some(k) => k.1 += n,
            None => self.kinds.push(("other".to_owned(), n)),
        }
    }

    /// The kinds, most first and `other` last: `4940 xattr
    /// btrfs.compression, 4 inode flags`; empty when nothing was skipped.
    pub fn said(&self) -> String {
        let mut kinds: Vec<&(String, u64)> = self.kinds.iter().collect();
        kinds.sort_by(|a, b| {
            (a.0 == "other")
                .cmp(&(b.0 == "other"))
                .then(b.1.cmp(&a.1))
                .then(a.0.cmp(&b.0))
        });
        kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod skipped_tests {
    use super::Skipped;

    #[test]
    fn kinds_are_said_most_first_and_bounded() {
        let mut s = Skipped::default();
        assert_eq!(s.said(), "");
        s.add("inode flags", 1);
        s.add("xattr btrfs.compression", 3);
        s.add("inode flags", 1);
        assert_eq!(s.said(), "3 xattr btrfs.compression, 2 inode flags");
        for i in 0..20 {
            s.add(&format!("xattr user.{i}"), 1);
        }
        assert!(s.kinds.len() <= Skipped::KINDS + 1);
        assert!(s.said().ends_with("14 other"), "{}", s.said());
    }

    #[test]
    fn fixes_are_said_once_each() {
        let mut s = Skipped::default();
        assert_eq!(s.fixes(), "");
        s.fix("mount with -o acl");
        s.fix("tune2fs -O ea_inode DEVICE");
        s.fix("mount with -o acl");
        assert_eq!(s.fixes(), "; mount with -o acl; tune2fs -O ea_inode DEVICE");
    }
}
