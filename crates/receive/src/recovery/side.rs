//! The side file of a subvolume (`DEST/.rreceive-resume-<name as hex>`):
//! what a stopped receive kept for the one that resumes it. Lines, tab
//! separated, hex for bytes: `point` (where it stopped, which counts even
//! when the state could not be written), `flags BITS PATH` and `caps PATH
//! VALUE` (what END still needs), `applied UNTIL` and `again FIRST LAST`
//! (which commands after the point were applied), `why TEXT` (why it
//! cannot be resumed: the refusal record).
//!
//! It is written over room kept for it ([`reserve`]), so that a stop on a
//! full filesystem can still record where it stopped.
//!
//! Owns: the side file's format, writing and reading it. May call:
//! `ioctl`, `flags` and the room's `names` and `track`.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd};

use btrfs_text::hex;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::ioctl;

use super::names::side_file;
use super::track::{Applied, Resumable};

/// Room kept for a side file (a stop then needs no new blocks).
const SIDE_RESERVE: usize = 128 << 10;

/// What a stop records: where (`at`), the flags (path, bits) and
/// capability (path, value) due at END, and which commands after the
/// point were applied.
pub(crate) struct Stop<'a> {
    pub(crate) at: Resumable,
    pub(crate) flags: &'a [(Vec<u8>, u32)],
    pub(crate) caps: Option<&'a (Vec<u8>, Vec<u8>)>,
    pub(crate) applied: &'a Applied,
}

/// Writes the side file of subvolume `name` in `dest` at a stop.
pub(crate) fn save(dest: BorrowedFd<'_>, name: &[u8], stop: &Stop<'_>) -> std::io::Result<()> {
    let mut text = format!("point\t{}\n", stop.at.to_field());
    for (p, bits) in stop.flags {
        text.push_str(&format!("flags\t{bits}\t{}\n", hex::encode(p)));
    }
    if let Some((p, v)) = stop.caps {
        text.push_str(&format!("caps\t{}\t{}\n", hex::encode(p), hex::encode(v)));
    }
    if let Some(until) = stop.applied.until {
        text.push_str(&format!("applied\t{until}\n"));
        for (a, b) in &stop.applied.again {
            text.push_str(&format!("again\t{a}\t{b}\n"));
        }
    }
    write(dest, name, &text)
}

/// Records in the side file of subvolume `name` why it cannot be resumed
/// (for `rreceive --resume-token`).
pub(crate) fn record_refusal(dest: BorrowedFd<'_>, name: &[u8], why: &str) {
    let _ = write(
        dest,
        name,
        &format!("why\t{}\n", hex::encode(why.as_bytes())),
    );
}

/// Replaces the side file of subvolume `name` by `text` (removes it when
/// `text` is empty). It is written over the room a reserved one holds
/// ([`reserve`]), padded with empty lines, so a full filesystem still
/// takes it.
fn write(dest: BorrowedFd<'_>, name: &[u8], text: &str) -> std::io::Result<()> {
    let name = side_file(name);
    let dir = dest.as_raw_fd();
    if text.is_empty() {
        return match nix::unistd::unlinkat(
            Some(dir),
            name.as_slice(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let fd = ioctl::openat(
        Some(dir),
        name.as_slice(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let f = File::from(fd);
    if f.metadata()?.len() == 0 {
        use std::os::fd::AsFd;
        crate::flags::overwrite_in_place(f.as_fd());
    }
    let mut body = format!(
        "# rreceive: where the receive stopped (point), what END still needs (flags BITS PATH, \
         caps PATH VALUE), which commands after the point were applied (applied UNTIL, again \
         FIRST LAST), why it cannot resume (why TEXT); hex\n{text}"
    )
    .into_bytes();
    let room = f.metadata()?.len() as usize;
    if body.len() < room {
        body.resize(room, b'\n');
    }
    use std::os::unix::fs::FileExt;
    f.write_all_at(&body, 0)?;
    f.sync_all()
}

/// Makes the side file of subvolume `name` (or blanks it) with room for
/// what a stop writes, so that a stop on a full filesystem can still
/// record where it stopped.
pub(crate) fn reserve(dest: BorrowedFd<'_>, name: &[u8]) {
    // Made anew, so that its room is overwritten in place on btrfs (one
    // made by an older rreceive may be copy-on-write).
    let _ = write(dest, name, "");
    let _ = write(dest, name, &"\n".repeat(SIDE_RESERVE));
}

/// The text of subvolume `name`'s side file, if it has one.
pub(crate) fn text(dest: BorrowedFd<'_>, name: &[u8]) -> Option<String> {
    let fd = ioctl::openat(
        Some(dest.as_raw_fd()),
        side_file(name).as_slice(),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut text = String::new();
    File::from(fd)
        .take(1 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The `point` line of subvolume `name`'s side file, if any.
pub(crate) fn point(dest: BorrowedFd<'_>, name: &[u8]) -> Option<Resumable> {
    text(dest, name)?
        .lines()
        .find_map(|l| l.strip_prefix("point\t"))
        .and_then(Resumable::from_field)
}

/// Why the incomplete subvolume `name` in `dest` cannot be resumed, as
/// recorded when its receive stopped.
pub(crate) fn refusal(dest: BorrowedFd<'_>, name: &[u8]) -> Option<String> {
    text(dest, name)?
        .lines()
        .find_map(|l| l.strip_prefix("why\t"))
        .and_then(|h| hex::decode(h).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Removes the side file of `name` in `dest`, if any (at END).
pub(crate) fn forget(dest: BorrowedFd<'_>, name: &[u8]) {
    let _ = nix::unistd::unlinkat(
        Some(dest.as_raw_fd()),
        side_file(name).as_slice(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
}

/// One line of a side file, as a resumed receive takes it.
pub(crate) enum Line {
    /// Immutable/append flags `bits` due at END for the path.
    Flags(Vec<u8>, u32),
    /// The capability to set again after a chown: (path, value).
    Caps(Vec<u8>, Vec<u8>),
    /// Commands counted up to this were applied...
    Applied(u64),
    /// ... except these (first, last).
    Again(u64, u64),
}

/// Reads (all of) the side file `name` (a file name in `dest`) of the
/// subvolume resumed, handing each line to `take` in order; a malformed
/// line stops it with an error, as does `take`.
pub(crate) fn load(
    dest: BorrowedFd<'_>,
    name: &[u8],
    mut take: impl FnMut(Line) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let fd = match ioctl::openat(
        Some(dest.as_raw_fd()),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut text = String::new();
    File::from(fd).take(64 << 20).read_to_string(&mut text)?;
    let bad = || std::io::Error::other("the side file is malformed");
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        let line = match f.as_slice() {
            ["flags", bits, path] => {
                let bits: u32 = bits.parse().map_err(|_| bad())?;
                Line::Flags(hex::decode(path).map_err(|_| bad())?, bits)
            }
            ["caps", path, value] => Line::Caps(
                hex::decode(path).map_err(|_| bad())?,
                hex::decode(value).map_err(|_| bad())?,
            ),
            ["applied", until] => Line::Applied(until.parse().map_err(|_| bad())?),
            ["again", a, b] => {
                let (a, b) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                Line::Again(a, b)
            }
            ["why", _] | ["point", _] => continue,
            _ => return Err(bad()),
        };
        take(line)?;
    }
    Ok(())
}
