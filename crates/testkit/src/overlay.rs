//! An overlayfs for tests, its lower, upper and work directories on a
//! loop-mounted ext4; unmounted (the overlay, then the ext4) and the loop
//! device detached when dropped, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::LoopImage;

/// Why an overlayfs over ext4 cannot be made here, if it cannot.
pub fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control".into());
    }
    if crate::which("mkfs.ext4").is_none() && !Path::new("/usr/sbin/mkfs.ext4").exists() {
        return Some("mkfs.ext4 not installed (Debian: e2fsprogs)".into());
    }
    let listed = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !listed.lines().any(|l| l.trim_end().ends_with("overlay")) {
        let _ = Command::new("modprobe").arg("overlay").status();
        let listed = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        if !listed.lines().any(|l| l.trim_end().ends_with("overlay")) {
            return Some("kernel has no overlayfs".into());
        }
    }
    None
}

/// An overlayfs mounted over directories of an ext4 image.
pub struct Overlay {
    /// The ext4 (dropped after the overlay is unmounted).
    ext4: Option<LoopImage>,
    dir: tempfile::TempDir,
    mnt: PathBuf,
    mounted: bool,
}

impl Overlay {
    /// Makes a `size_mib` ext4 (`mkfs_args` added to `-q -F`), its lower
    /// directory filled by `fill` (may do nothing), and the overlay;
    /// `Err` says why it cannot be made.
    pub fn new(
        size_mib: u64,
        mkfs_args: &[&str],
        fill: impl FnOnce(&Path),
    ) -> Result<Overlay, String> {
        if let Some(why) = missing() {
            return Err(why);
        }
        let ext4 = crate::ext4_image(size_mib, mkfs_args, "noatime");
        let base = ext4.mnt().to_path_buf();
        for d in ["lower", "upper", "work"] {
            std::fs::create_dir(base.join(d)).map_err(|e| e.to_string())?;
        }
        fill(&base.join("lower"));
        let dir = tempfile::Builder::new()
            .prefix("rsend-overlay-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let mut me = Overlay {
            ext4: Some(ext4),
            dir,
            mnt,
            mounted: false,
        };
        let opts = format!(
            "noatime,lowerdir={},upperdir={},workdir={}",
            base.join("lower").display(),
            base.join("upper").display(),
            base.join("work").display()
        );
        let o = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(&me.mnt)
            .output()
            .map_err(|e| format!("mount -t overlay: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "mount -t overlay: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        me.mounted = true;
        Ok(me)
    }

    /// The overlay's mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// The ext4 beneath (lower, upper and work directories).
    pub fn base(&self) -> &Path {
        self.ext4.as_ref().map_or(Path::new(""), |e| e.mnt())
    }

    /// A scratch directory outside both.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if self.mounted {
            crate::unmount(&self.mnt);
        }
        drop(self.ext4.take());
    }
}
