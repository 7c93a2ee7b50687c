//! A GlusterFS volume for tests: one brick on a loop-mounted xfs, mounted
//! with FUSE (`mount -t glusterfs -o acl`), all torn down when dropped,
//! also when the test fails. `glusterd` is started when it is not running,
//! and stopped again by the last volume of this process that needed it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{unmount, which, LoopImage};

/// `glusterd` as this process started it (None: running already, or not
/// started), and how many volumes use it.
static GLUSTERD: Mutex<(Option<Child>, usize)> = Mutex::new((None, 0));

/// Why a GlusterFS volume cannot be made here, if it cannot.
pub fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    for prog in ["glusterd", "gluster", "mkfs.xfs", "losetup"] {
        if which(prog).is_none() && !Path::new("/usr/sbin").join(prog).exists() {
            return Some(format!(
                "{prog} not installed (Debian: glusterfs-server, xfsprogs)"
            ));
        }
    }
    if !Path::new("/sbin/mount.glusterfs").exists() && which("mount.glusterfs").is_none() {
        return Some("mount.glusterfs not installed (Debian: glusterfs-client)".into());
    }
    None
}

fn glusterd_running() -> bool {
    // The CLI answers only when glusterd does.
    Command::new("gluster")
        .args(["--mode=script", "pool", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Takes a use of glusterd, starting it (in the foreground, as a child of
/// this process) when it does not answer.
fn hold_glusterd() -> Result<(), String> {
    let mut g = GLUSTERD.lock().unwrap_or_else(|e| e.into_inner());
    if g.0.is_none() && !glusterd_running() {
        let child = Command::new("glusterd")
            .args(["-N", "--log-level=WARNING"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start glusterd: {e}"))?;
        g.0 = Some(child);
        let t = Instant::now();
        while !glusterd_running() {
            if t.elapsed() > Duration::from_secs(30) {
                return Err("glusterd started but does not answer".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    g.1 += 1;
    Ok(())
}

/// Gives a use of glusterd back; the last one stops a glusterd this
/// process started.
fn release_glusterd() {
    let mut g = GLUSTERD.lock().unwrap_or_else(|e| e.into_inner());
    g.1 = g.1.saturating_sub(1);
    if g.1 == 0 {
        if let Some(mut child) = g.0.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }
}

/// This host's name, as glusterd accepts it for a brick (not localhost).
fn host() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned();
    if h.is_empty() {
        "127.0.0.1".into()
    } else {
        h
    }
}

fn gluster(args: &[&str]) -> Result<(), String> {
    let o = Command::new("gluster")
        .arg("--mode=script")
        .args(args)
        .output()
        .map_err(|e| format!("gluster {args:?}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "gluster {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout).trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// A one-brick GlusterFS volume, mounted.
pub struct Volume {
    /// The brick's filesystem (dropped last).
    brick: Option<LoopImage>,
    name: String,
    dir: tempfile::TempDir,
    mnt: PathBuf,
    held: bool,
    created: bool,
    mounted: bool,
}

impl Volume {
    /// Makes a volume on a brick of `size_mib` (xfs), mounted with
    /// `-o acl`; `Err` says why it cannot be made.
    pub fn new(size_mib: u64) -> Result<Volume, String> {
        if let Some(why) = missing() {
            return Err(why);
        }
        Volume::on(crate::xfs_image(size_mib, "noatime"))
    }

    /// Makes a volume whose brick is (a directory on) `brick`, mounted
    /// with `-o acl`; `Err` says why it cannot be made.
    pub fn on(brick: LoopImage) -> Result<Volume, String> {
        if let Some(why) = missing() {
            return Err(why);
        }
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("rsendtest{}x{n}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("rsend-gluster-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let mut v = Volume {
            brick: Some(brick),
            name,
            dir,
            mnt,
            held: false,
            created: false,
            mounted: false,
        };
        hold_glusterd()?;
        v.held = true;
        let brick_dir = v
            .brick
            .as_ref()
            .map(|b| b.mnt().join("brick"))
            .unwrap_or_default();
        let brick = format!("{}:{}", host(), brick_dir.display());
        gluster(&["volume", "create", &v.name, &brick, "force"])?;
        v.created = true;
        gluster(&["volume", "start", &v.name])?;
        let source = format!("{}:/{}", host(), v.name);
        // The client may take a moment to see the volume started.
        let t = Instant::now();
        loop {
            let o = Command::new("mount")
                .args(["-t", "glusterfs", "-o", "acl", &source])
                .arg(&v.mnt)
                .output()
                .map_err(|e| format!("mount -t glusterfs: {e}"))?;
            if o.status.success() && is_mounted(&v.mnt) {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "mount -t glusterfs {source}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        v.mounted = true;
        Ok(v)
    }

    /// `gluster volume set VOLUME option value`.
    pub fn set(&self, option: &str, value: &str) -> Result<(), String> {
        gluster(&["volume", "set", &self.name, option, value])
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// The volume's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A scratch directory outside the volume.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

/// Whether `mnt` is a mount point now (its mountinfo line).
pub(crate) fn is_mounted(mnt: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mnt.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == want))
}

impl Drop for Volume {
    fn drop(&mut self) {
        if self.mounted {
            unmount(&self.mnt);
        }
        if self.created {
            let _ = gluster(&["volume", "stop", &self.name, "force"]);
            let _ = gluster(&["volume", "delete", &self.name]);
        }
        if self.held {
            release_glusterd();
        }
        // The brick's xfs: unmounted and detached.
        drop(self.brick.take());
    }
}
