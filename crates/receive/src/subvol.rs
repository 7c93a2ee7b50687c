//! What rreceive remembers about each subvolume it received onto a
//! filesystem that has no subvolumes, and where it keeps it.
//!
//! On btrfs the kernel keeps this (received_uuid, stransid, the read-only
//! flag). Elsewhere a received subvolume is a directory `DEST/<name>`, and
//! its [`SubvolState`] is stored
//!
//! - in the extended attribute [`XATTR_NAME`] (`user.rreceive.subvol`) of
//!   that directory, one line of text:
//!   `v1 received_uuid=<uuid> ctransid=<n> parent_uuid=<uuid|-> parent_ctransid=<n> complete=<0|1>`
//! - or, where the filesystem refuses user xattrs, in the file
//!   [`STATE_FILE`] (`DEST/.rreceive-state`): a comment line, then one line
//!   per subvolume, tab separated:
//!   `<received_uuid> <ctransid> <parent_uuid|-> <parent_ctransid> <complete|incomplete> <name as hex>`.
//!   It is rewritten whole (temporary file, then rename).
//!
//! `complete=1` is written only after the stream's END was applied and the
//! filesystem synced; until then the subvolume is never used as a parent or
//! clone source without `--force`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd};

use btrfs_stream::resume::Token;
use nix::errno::Errno;
use nix::fcntl::{renameat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::unlinkat;
use uuid::Uuid;

use crate::ioctl;
use crate::meta::open_dir;
use crate::recovery::Resumable;

// Names starting with this are rreceive's own in DEST (see crate::recovery::names).
pub(crate) use crate::recovery::names::RESERVED_PREFIX;
/// The fallback state file in DEST.
pub(crate) const STATE_FILE: &str = ".rreceive-state";
const STATE_TMP: &str = ".rreceive-state.tmp";
/// The xattr holding a received directory's state.
pub(crate) const XATTR_NAME: &str = "user.rreceive.subvol";
/// Xattr names the stream may not touch, on any inode (rreceive's own:
/// this state on a subvolume root, [`crate::fake_super::XATTR`] anywhere).
pub(crate) const XATTR_RESERVED_PREFIX: &[u8] = b"user.rreceive.";

/// A reserved name in DEST for what rreceive keeps about subvolume `name`:
/// `.rreceive` then `tag`, then `name` in hex or, where that would be
/// longer than a name can be, a digest of it (the same name always gives
/// the same one).
pub(crate) fn reserved_name(tag: &[u8], name: &[u8]) -> Vec<u8> {
    let mut v = RESERVED_PREFIX.to_vec();
    v.extend_from_slice(tag);
    let hex = btrfs_text::hex::encode(name);
    if v.len() + hex.len() <= 255 {
        v.extend_from_slice(hex.as_bytes());
    } else {
        // FNV-1a, twice with different offsets: 128 bits.
        let fnv = |basis: u64| {
            name.iter().fold(basis, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
        };
        let digest = format!(
            "h{:016x}{:016x}",
            fnv(0xcbf2_9ce4_8422_2325),
            fnv(0x6c62_272e_07bb_0142)
        );
        v.extend_from_slice(digest.as_bytes());
    }
    v
}

/// Identity and completeness of one received subvolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubvolState {
    /// The UUID the stream gave the subvolume (SUBVOL/SNAPSHOT `uuid`).
    pub received_uuid: Uuid,
    /// Its transid on the sending side.
    pub ctransid: u64,
    /// For a snapshot, the parent it was received against.
    pub parent_uuid: Option<Uuid>,
    /// The parent's transid on the sending side.
    pub parent_ctransid: u64,
    /// Whether the stream's END was applied.
    pub complete: bool,
    /// Where the receive stopped cleanly, when it did: a stream resumed
    /// from there (`rsend --resume`) completes it. `None` while a receive
    /// runs, so one killed outright is never taken as resumable.
    pub resume: Option<Resumable>,
}

impl SubvolState {
    /// The xattr value.
    pub(crate) fn to_xattr(&self) -> Vec<u8> {
        format!(
            "v1 received_uuid={} ctransid={} parent_uuid={} parent_ctransid={} complete={}{}\n",
            self.received_uuid.hyphenated(),
            self.ctransid,
            self.parent_uuid
                .map_or_else(|| "-".to_string(), |u| u.hyphenated().to_string()),
            self.parent_ctransid,
            u8::from(self.complete),
            self.resume
                .map_or_else(String::new, |r| format!(" resume={}", r.to_field()))
        )
        .into_bytes()
    }

    /// The token `rsend --resume` takes, when the receive stopped cleanly.
    pub fn token(&self) -> Option<Token> {
        let r = self.resume.filter(|_| !self.complete)?;
        Some(Token {
            uuid: self.received_uuid,
            ctransid: self.ctransid,
            parent: self.parent_uuid.map(|u| (u, self.parent_ctransid)),
            version: r.version,
            point: r.point,
        })
    }

    /// Parses an xattr value; `None` if it is not one rreceive wrote.
    pub(crate) fn from_xattr(v: &[u8]) -> Option<SubvolState> {
        let s = std::str::from_utf8(v).ok()?.trim_end();
        let mut it = s.split(' ');
        if it.next()? != "v1" {
            return None;
        }
        let mut kv = BTreeMap::new();
        for f in it {
            let (k, v) = f.split_once('=')?;
            kv.insert(k, v);
        }
        Some(SubvolState {
            received_uuid: Uuid::parse_str(kv.get("received_uuid")?).ok()?,
            ctransid: kv.get("ctransid")?.parse().ok()?,
            parent_uuid: parse_opt_uuid(kv.get("parent_uuid")?)?,
            parent_ctransid: kv.get("parent_ctransid")?.parse().ok()?,
            complete: match *kv.get("complete")? {
                "1" => true,
                "0" => false,
                _ => return None,
            },
            resume: match kv.get("resume") {
                Some(r) => Some(Resumable::from_field(r)?),
                None => None,
            },
        })
    }

    fn to_line(&self, name: &[u8]) -> String {
        let hex = btrfs_text::hex::encode(name);
        let resume = self
            .resume
            .map_or_else(String::new, |r| format!("\t{}", r.to_field()));
        format!(
            "{}\t{}\t{}\t{}\t{}\t{hex}{resume}\n",
            self.received_uuid.hyphenated(),
            self.ctransid,
            self.parent_uuid
                .map_or_else(|| "-".to_string(), |u| u.hyphenated().to_string()),
            self.parent_ctransid,
            if self.complete {
                "complete"
            } else {
                "incomplete"
            }
        )
    }

    fn from_line(line: &str) -> Option<(Vec<u8>, SubvolState)> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 6 && f.len() != 7 {
            return None;
        }
        // A subvolume always has a name.
        let name = btrfs_text::hex::decode(f[5])
            .ok()
            .filter(|n| !n.is_empty())?;
        Some((
            name,
            SubvolState {
                received_uuid: Uuid::parse_str(f[0]).ok()?,
                ctransid: f[1].parse().ok()?,
                parent_uuid: parse_opt_uuid(f[2])?,
                parent_ctransid: f[3].parse().ok()?,
                complete: match f[4] {
                    "complete" => true,
                    "incomplete" => false,
                    _ => return None,
                },
                resume: match f.get(6) {
                    Some(r) => Some(Resumable::from_field(r)?),
                    None => None,
                },
            },
        ))
    }
}

fn parse_opt_uuid(s: &str) -> Option<Option<Uuid>> {
    if s == "-" {
        Some(None)
    } else {
        Uuid::parse_str(s).ok().map(Some)
    }
}

/// Where a destination keeps subvolume states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    /// In `user.rreceive.subvol` on each directory.
    Xattr,
    /// In `DEST/.rreceive-state`.
    File,
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EOPNOTSUPP)
            | Some(Errno::EPERM)
            | Some(Errno::EACCES)
            | Some(Errno::ENOSPC)
            | Some(Errno::E2BIG)
    )
}

/// Records `state` for directory `name` in `dest`, in its xattr if the
/// filesystem allows it, else in the state file. Returns where it went.
pub(crate) fn record(
    dest: BorrowedFd<'_>,
    name: &[u8],
    state: &SubvolState,
    prefer: Option<Store>,
) -> io::Result<Store> {
    if prefer != Some(Store::File) {
        use xattr::FileExt;
        let dir = open_dir(dest, name)?;
        match dir.set_xattr(XATTR_NAME, &state.to_xattr()) {
            Ok(()) => {
                if prefer.is_none() {
                    // A stale line from an earlier run would shadow nothing
                    // (the xattr wins), but drop it to keep the file honest.
                    let _ = update_file(dest, name, None);
                }
                return Ok(Store::Xattr);
            }
            Err(e) if is_unsupported(&e) => {}
            Err(e) => return Err(e),
        }
    }
    update_file(dest, name, Some(state))?;
    Ok(Store::File)
}

fn read_file(dest: BorrowedFd<'_>) -> io::Result<Vec<(Vec<u8>, SubvolState)>> {
    let fd = match ioctl::openat(
        Some(dest.as_raw_fd()),
        STATE_FILE,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut s = String::new();
    File::from(fd).take(64 << 20).read_to_string(&mut s)?;
    Ok(s.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(SubvolState::from_line)
        .collect())
}

fn update_file(dest: BorrowedFd<'_>, name: &[u8], state: Option<&SubvolState>) -> io::Result<()> {
    set_lines(dest, &[(name, state)])
}

/// Sets the state-file lines of several names at once (one rewrite): a
/// name with `None` loses its line.
pub(crate) fn set_lines(
    dest: BorrowedFd<'_>,
    lines: &[(&[u8], Option<&SubvolState>)],
) -> io::Result<()> {
    let mut entries = read_file(dest)?;
    let had = entries
        .iter()
        .any(|(n, _)| lines.iter().any(|(m, _)| n == m));
    if !had && lines.iter().all(|(_, s)| s.is_none()) {
        return Ok(());
    }
    entries.retain(|(n, _)| !lines.iter().any(|(m, _)| n == m));
    for (name, state) in lines {
        if let Some(s) = state {
            entries.push((name.to_vec(), (*s).clone()));
        }
    }
    let raw = dest.as_raw_fd();
    if entries.is_empty() {
        // Nothing to keep: no file (lines stand in for a moment where
        // states are xattrs, see `Dest::move_recorded`).
        return match unlinkat(
            Some(raw),
            STATE_FILE,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let mut text = String::from(
        "# rreceive state v1: received_uuid ctransid parent_uuid parent_ctransid complete name_hex\n",
    );
    for (n, s) in &entries {
        text.push_str(&s.to_line(n));
    }
    match unlinkat(
        Some(raw),
        STATE_TMP,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = ioctl::openat(
        Some(raw),
        STATE_TMP,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let mut f = File::from(fd);
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    renameat(Some(raw), STATE_TMP, Some(raw), STATE_FILE)?;
    Ok(())
}

/// The state directory `name` carries in its xattr, if any.
pub(crate) fn in_xattr(dest: BorrowedFd<'_>, name: &[u8]) -> Option<SubvolState> {
    use xattr::FileExt;
    let v = open_dir(dest, name).ok()?.get_xattr(XATTR_NAME).ok()??;
    SubvolState::from_xattr(&v)
}

/// Removes the state xattr of directory `name` (its state-file line, if
/// any, then speaks for it).
pub(crate) fn drop_xattr(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    use xattr::FileExt;
    match open_dir(dest, name)?.remove_xattr(XATTR_NAME) {
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
        r => r,
    }
}

/// Drops the state-file line of `name`, if there is one (its xattr goes
/// with the directory).
pub(crate) fn forget(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    update_file(dest, name, None)
}

/// `st` of `name`, with where it stopped from the side file when there.
fn with_side(dest: BorrowedFd<'_>, name: &[u8], mut st: SubvolState) -> SubvolState {
    if !st.complete {
        if let Some(r) = crate::recovery::side::point(dest, name) {
            st.resume = Some(r);
        } else if st.resume.is_none() {
            // Killed outright: its journal may say where to resume.
            if let Ok(Some(r)) =
                crate::recovery::killed_point(dest, name, st.received_uuid, st.ctransid)
            {
                st.resume = Some(r);
            }
        }
    }
    st
}

/// The state of directory `name` in `dest`, from its xattr or the state file.
pub(crate) fn lookup(dest: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<SubvolState>> {
    use xattr::FileExt;
    if let Ok(dir) = open_dir(dest, name) {
        if let Ok(Some(v)) = dir.get_xattr(XATTR_NAME) {
            if let Some(s) = SubvolState::from_xattr(&v) {
                return Ok(Some(with_side(dest, name, s)));
            }
        }
    }
    Ok(read_file(dest)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| with_side(dest, name, s)))
}

/// Every received directory in `dest` with its state: xattrs first, then
/// state-file lines for directories without one.
pub(crate) fn scan(dest: BorrowedFd<'_>) -> io::Result<Vec<(Vec<u8>, SubvolState)>> {
    use xattr::FileExt;
    let mut out = Vec::new();
    let mut dir = nix::dir::Dir::openat(
        Some(dest.as_raw_fd()),
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    for ent in dir.iter() {
        let ent = ent?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." || name.starts_with(RESERVED_PREFIX) {
            continue;
        }
        if !matches!(ent.file_type(), Some(nix::dir::Type::Directory) | None) {
            continue;
        }
        let Ok(d) = open_dir(dest, name) else {
            continue;
        };
        if let Ok(Some(v)) = d.get_xattr(XATTR_NAME) {
            if let Some(s) = SubvolState::from_xattr(&v) {
                out.push((name.to_vec(), s));
            }
        }
    }
    for (n, s) in read_file(dest)? {
        if !out.iter().any(|(m, _)| *m == n) && open_dir(dest, &n).is_ok() {
            out.push((n, s));
        }
    }
    Ok(out
        .into_iter()
        .map(|(n, s)| {
            let s = with_side(dest, &n, s);
            (n, s)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use btrfs_stream::resume::Point;
    use std::os::fd::AsFd;

    fn sample(complete: bool) -> SubvolState {
        SubvolState {
            received_uuid: Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            ctransid: 42,
            parent_uuid: Some(Uuid::from_u128(7)),
            parent_ctransid: 9,
            complete,
            resume: None,
        }
    }

    #[test]
    fn xattr_value_round_trips() {
        for c in [true, false] {
            let s = sample(c);
            assert_eq!(SubvolState::from_xattr(&s.to_xattr()), Some(s.clone()));
            let mut t = s.clone();
            t.parent_uuid = None;
            assert_eq!(SubvolState::from_xattr(&t.to_xattr()), Some(t));
        }
        assert_eq!(
            String::from_utf8(sample(true).to_xattr()).unwrap(),
            "v1 received_uuid=01234567-89ab-cdef-0011-223344556677 ctransid=42 \
             parent_uuid=00000000-0000-0000-0000-000000000007 parent_ctransid=9 complete=1\n"
        );
        let mut r = sample(false);
        r.resume = Some(Resumable {
            version: 2,
            point: Point {
                commands: 10,
                offset: 4096,
                digest: 0xabc,
            },
        });
        assert_eq!(SubvolState::from_xattr(&r.to_xattr()), Some(r.clone()));
        assert!(String::from_utf8(r.to_xattr())
            .unwrap()
            .ends_with(" complete=0 resume=2:10:4096:00000000000000000000000000000abc\n"));
        let line = r.to_line(b"x");
        assert_eq!(
            SubvolState::from_line(line.trim_end()),
            Some((b"x".to_vec(), r.clone()))
        );
        let t = r.token().unwrap();
        assert_eq!(
            (t.version, t.point.commands, t.parent.map(|p| p.1)),
            (2, 10, Some(9))
        );
        assert_eq!(sample(false).token(), None);
        assert_eq!(SubvolState::from_xattr(b"v2 x=1"), None);
        assert_eq!(SubvolState::from_xattr(b"v1 complete=1"), None);
    }

    #[test]
    fn state_file_line_round_trips() {
        let s = sample(false);
        let line = s.to_line(b"snap \xff");
        assert!(line.ends_with("\tincomplete\t736e617020ff\n"), "{line}");
        assert_eq!(
            SubvolState::from_line(line.trim_end()),
            Some((b"snap \xff".to_vec(), s))
        );
    }

    #[test]
    fn state_file_is_used_when_asked() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("a")).unwrap();
        std::fs::create_dir(tmp.path().join("b")).unwrap();
        let dest = File::open(tmp.path()).unwrap();
        record(dest.as_fd(), b"a", &sample(false), Some(Store::File)).unwrap();
        record(dest.as_fd(), b"b", &sample(true), Some(Store::File)).unwrap();
        record(dest.as_fd(), b"a", &sample(true), Some(Store::File)).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(STATE_FILE)).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert_eq!(lookup(dest.as_fd(), b"a").unwrap(), Some(sample(true)));
        let mut all = scan(dest.as_fd()).unwrap();
        all.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(all.len(), 2);
    }
}
