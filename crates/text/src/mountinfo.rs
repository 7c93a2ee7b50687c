//! The kernel's mount table as `/proc/self/mountinfo` prints it: one mount
//! per line, fields separated by spaces, `\NNN` octal escapes in paths.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// The mount table of this process.
pub const PATH: &str = "/proc/self/mountinfo";

/// One line of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The mount's id (the first field).
    pub id: Option<u64>,
    /// The directory of the filesystem that is mounted (for btrfs, a
    /// subvolume's path from the top level, or a directory in one).
    pub root: PathBuf,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The filesystem type.
    pub fstype: String,
    /// The mount source (the device, for btrfs).
    pub source: PathBuf,
}

/// The mounts of a mount table, in its order (lines it cannot parse are
/// skipped).
pub fn parse(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
            // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
            let sep = fields.iter().position(|f| *f == b"-")?;
            if sep < 6 {
                return None;
            }
            Some(Mount {
                id: std::str::from_utf8(fields[0])
                    .ok()
                    .and_then(|s| s.parse().ok()),
                root: unescape(fields[3]),
                mount_point: unescape(fields[4]),
                fstype: String::from_utf8_lossy(fields.get(sep + 1)?).into_owned(),
                source: unescape(fields.get(sep + 2)?),
            })
        })
        .collect()
}

/// A field with its octal escapes (`\040` for a space) decoded.
fn unescape(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while let Some(&b) = field.get(i) {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| b == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3');
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| (v << 3) | (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn fields_and_escapes() {
        let text = b"22 27 0:21 / /proc rw,relatime - proc proc rw\n\
            40 27 0:45 /@ /mnt/my\\040pool rw,relatime shared:20 - btrfs /dev/loop0 rw,subvol=/@\n\
            bad line\n\
            41 40 0:45 /a\\134b /x\\777 rw - btrfs /dev/loop0 rw\n";
        let m = parse(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].fstype, "proc");
        assert_eq!(m[1].id, Some(40));
        assert_eq!(m[1].root, Path::new("/@"));
        assert_eq!(m[1].mount_point, Path::new("/mnt/my pool"));
        assert_eq!(m[1].source, Path::new("/dev/loop0"));
        assert_eq!(m[2].root, Path::new("/a\\b"));
        // Not an escape (above \377): kept as it is.
        assert_eq!(m[2].mount_point, Path::new("/x\\777"));
    }
}
