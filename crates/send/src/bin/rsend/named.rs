//! The subvolumes the command line names, as `btrfs send` takes them
//! (paths on a mounted btrfs) or as rsend always has (with `-d`: paths
//! from the top level, uuids), and the devices to read them from.

use std::path::{Path, PathBuf};

use btrfs_disk::device::Device;
use btrfs_disk::error::SubvolWanted;
use btrfs_disk::mount::{self, MountedSubvol};
use btrfs_disk::SubvolSelector;
use btrfs_text::plain_io;
use rsend::plan::TOP_LEVEL_HINT;
use rsend::send::{list_or_none, SendError};
use rsend_cli::Failure;
use uuid::Uuid;

/// The devices to read and each subvolume argument as the reader finds it.
#[derive(Debug, Default)]
pub(crate) struct Named {
    /// `-d`, or the devices of the mounted filesystem the paths are on.
    pub(crate) devices: Vec<PathBuf>,
    /// The SUBVOL arguments, in order.
    pub(crate) subvols: Vec<SubvolSelector>,
    /// `-p`.
    pub(crate) parent: Option<SubvolSelector>,
    /// `-c`, in order.
    pub(crate) clone_srcs: Vec<SubvolSelector>,
}

/// What a subvolume argument is for, in messages.
#[derive(Clone, Copy)]
enum Role {
    Subvol,
    Parent,
    CloneSrc,
}

/// Resolves the subvolume arguments. Without `-d` (`devices` empty) each
/// is a path on a mounted btrfs (relative ones from the current
/// directory), all on the same filesystem, whose devices are then read;
/// `-p` and `-c` may also be uuids. With `-d` each is a path from the top
/// level or a uuid, except an absolute path on a mounted btrfs, which is
/// resolved as mounted and must be on the filesystem of `-d`.
pub(crate) fn resolve(
    devices: &[PathBuf],
    subvols: &[PathBuf],
    parent: Option<&PathBuf>,
    clone_srcs: &[PathBuf],
) -> Result<Named, Failure> {
    let mut r = Resolver {
        with_d: !devices.is_empty(),
        devices: devices.to_vec(),
        fsid: None,
        first: None,
    };
    let mut named = Named::default();
    for p in subvols {
        named.subvols.push(r.one(p, Role::Subvol)?);
    }
    if let Some(p) = parent {
        named.parent = Some(r.one(p, Role::Parent)?);
    }
    for p in clone_srcs {
        named.clone_srcs.push(r.one(p, Role::CloneSrc)?);
    }
    named.devices = r.devices;
    Ok(named)
}

/// The usage error for a command that names no device and no mounted path.
pub(crate) fn no_device() -> Failure {
    Failure::Usage(
        "give SUBVOL as a path on a mounted btrfs, or the filesystem's device or image file with -d DEVICE"
            .into(),
    )
}

struct Resolver {
    /// Whether `-d` was given.
    with_d: bool,
    /// `-d`, or the devices of the first mounted path.
    devices: Vec<PathBuf>,
    /// The fsid of `devices`, once known.
    fsid: Option<Uuid>,
    /// The first mounted path, for the message when another is elsewhere.
    first: Option<(PathBuf, PathBuf)>,
}

impl Resolver {
    fn one(&mut self, arg: &Path, role: Role) -> Result<SubvolSelector, Failure> {
        if self.with_d {
            // With -d: a path from the top level or a uuid, unless it is
            // an absolute path on a mounted btrfs.
            if !arg.is_absolute() || !mount::is_on_btrfs(arg) {
                return Ok(SubvolSelector::Path(arg.to_path_buf()));
            }
            let m = mounted(arg)?;
            let fsid = self.device_fsid()?;
            if m.fsid != fsid {
                return Err(Failure::msg(format!(
                    "{} is on the mounted btrfs {} (at {}), and -d {} holds the filesystem {fsid}: \
                     give a path of that filesystem (from its top level, or where it is mounted), \
                     or give {} without -d",
                    arg.display(),
                    m.fsid,
                    m.mount_point.display(),
                    self.devices[0].display(),
                    arg.display(),
                )));
            }
            return Ok(SubvolSelector::Path(m.path));
        }
        // Without -d: a mounted path; -p and -c may be uuids too.
        if !matches!(role, Role::Subvol) && !arg.exists() {
            if let Some(u) = arg.to_str().and_then(|s| Uuid::parse_str(s).ok()) {
                return Ok(SubvolSelector::Uuid(u));
            }
        }
        let m = mounted(arg)?;
        match (&self.first, self.fsid) {
            (Some((first, first_mount)), Some(fsid)) if self.devices != m.devices => {
                return Err(Failure::msg(format!(
                    "all subvolumes must be from the same filesystem: {} is on the btrfs {fsid} (mounted at {}), {} on the btrfs {} (mounted at {})",
                    first.display(),
                    first_mount.display(),
                    arg.display(),
                    m.fsid,
                    m.mount_point.display(),
                )));
            }
            (Some(_), _) => {}
            (None, _) => {
                self.devices = m.devices.clone();
                self.fsid = Some(m.fsid);
                self.first = Some((arg.to_path_buf(), m.mount_point.clone()));
            }
        }
        Ok(SubvolSelector::Path(m.path))
    }

    /// The fsid of the filesystem `-d` names (from its first device's superblock).
    fn device_fsid(&mut self) -> Result<Uuid, Failure> {
        if let Some(f) = self.fsid {
            return Ok(f);
        }
        let first = self.devices.first().ok_or_else(no_device)?;
        let dev = Device::open(first).map_err(|e| Failure::Error(e.into()))?;
        let f = dev.superblock().fsid();
        self.fsid = Some(f);
        Ok(f)
    }
}

/// `arg` resolved as a subvolume on a mounted btrfs.
fn mounted(arg: &Path) -> Result<MountedSubvol, Failure> {
    mount::resolve(arg).map_err(|e| match e {
        mount::MountError::Path { ref source, .. }
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Failure::msg(format!(
                "{}: no such file or directory; without -d a subvolume is a path on a mounted btrfs \
                 (give -d DEVICE for a path from the top level of the filesystem)",
                arg.display()
            ))
        }
        mount::MountError::Path { source, .. } => {
            Failure::msg(format!("{}: {}", arg.display(), plain_io(&source)))
        }
        e => Failure::Error(e.into()),
    })
}

/// `e` with [`TOP_LEVEL_HINT`] when it says a path from the top level
/// names no subvolume.
pub(crate) fn hint_top_level(e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<SendError>() {
        Some(SendError::NoSubvolume {
            asked: asked @ SubvolWanted::Path(_),
            available,
        }) => anyhow::anyhow!(
            "no subvolume {asked} ({TOP_LEVEL_HINT}); the filesystem has: {}",
            list_or_none(available)
        ),
        _ => e,
    }
}
