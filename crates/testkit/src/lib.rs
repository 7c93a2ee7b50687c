//! Helpers for tests that drive the real kernel and btrfs-progs.
//!
//! [`kernel_available`] decides whether such a test can run here and prints
//! one line when it cannot. [`BtrfsImage`] is a loop-mounted scratch btrfs
//! that is unmounted and detached when dropped, also when the test fails.
//! [`fiemap`] maps a file's extents (its one `unsafe` call is the ioctl).
//! [`powercut`] is a block device that loses what was not flushed.
//! [`syscall_kill`] kills a program before its N-th system call (ptrace).
//! [`engine`] checks that an engine library never prints.
//! [`inode_flags`] reads a file's inode flags (its `unsafe` call is the
//! ioctl).
//! [`gluster`], [`sshfs`] and [`overlay`] mount a GlusterFS volume, an
//! sshfs to localhost and an overlayfs over ext4 (torn down on drop);
//! [`skip_unless`] turns why one cannot be made into a `SKIP` line.
//! [`workspace_bin`] finds (and builds when stale) a binary of another
//! package of the workspace.

pub mod engine;
pub mod fiemap;
pub mod gluster;
mod inode_flags;
pub mod layers;
pub mod overlay;
pub mod powercut;
pub mod sshfs;
pub mod syscall_kill;

pub use inode_flags::inode_flags;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Whether root, loop devices, btrfs-progs and the btrfs module are usable.
///
/// When they are not, prints `SKIP <test>: ...` and returns false, unless
/// `RSEND_REQUIRE_KERNEL=1` is set (as `.ci/run` does): then it panics, so
/// CI cannot pass by skipping.
pub fn kernel_available(test: &str) -> bool {
    let reason = if !nix::unistd::geteuid().is_root() {
        Some("not running as root")
    } else if !Path::new("/dev/loop-control").exists() {
        Some("no /dev/loop-control")
    } else if which("btrfs").is_none() || which("mkfs.btrfs").is_none() {
        Some("btrfs-progs not installed")
    } else if !btrfs_in_kernel() {
        Some("kernel has no btrfs")
    } else {
        None
    };
    match reason {
        None => true,
        Some(why) if std::env::var_os("RSEND_REQUIRE_KERNEL").is_some_and(|v| v == "1") => {
            panic!("{test}: needs root, loop devices and the btrfs kernel module: {why}")
        }
        Some(why) => {
            println!("SKIP {test}: needs root, loop devices and the btrfs kernel module ({why})");
            false
        }
    }
}

/// `made` (a mount made for `test`), or None after printing `SKIP <test>:
/// <why>` when it could not be made; with `RSEND_REQUIRE_KERNEL=1` (as
/// `.ci/run` sets) it panics instead, so CI cannot pass by skipping.
pub fn skip_unless<T>(test: &str, made: Result<T, String>) -> Option<T> {
    match made {
        Ok(t) => Some(t),
        Err(why) if std::env::var_os("RSEND_REQUIRE_KERNEL").is_some_and(|v| v == "1") => {
            panic!("{test}: {why}")
        }
        Err(why) => {
            println!("SKIP {test}: {why}");
            None
        }
    }
}

fn btrfs_in_kernel() -> bool {
    let listed = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if listed.lines().any(|l| l.trim_end().ends_with("btrfs")) {
        return true;
    }
    // Not loaded yet; mount(8) would load it, so try once.
    let _ = Command::new("modprobe")
        .arg("btrfs")
        .stderr(Stdio::null())
        .status();
    let listed = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    listed.lines().any(|l| l.trim_end().ends_with("btrfs"))
}

/// The full path of `prog` on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Runs a command and returns its output, panicking with its stderr on failure.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed with {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Runs a bash script in `dir`, panicking on failure.
pub fn sh(dir: &Path, script: &str) {
    run(Command::new("bash")
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(script)
        .current_dir(dir));
}

/// A scratch btrfs filesystem in an image file, loop-mounted.
pub struct BtrfsImage {
    dir: tempfile::TempDir,
    image: PathBuf,
    mnt: PathBuf,
    loopdev: Option<String>,
    mounted: bool,
}

impl BtrfsImage {
    /// Makes a `size_mib` image with `mkfs.btrfs <mkfs_args>`, mounted with `-o <opts>`.
    pub fn new(size_mib: u64, mkfs_args: &[&str], opts: &str) -> BtrfsImage {
        let dir = tempfile::Builder::new()
            .prefix("rsend-test-")
            .tempdir()
            .unwrap();
        let image = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(size_mib << 20).unwrap();
        drop(f);
        run(Command::new("mkfs.btrfs")
            .arg("-q")
            .args(mkfs_args)
            .arg(&image));
        let mut me = BtrfsImage {
            dir,
            image,
            mnt,
            loopdev: None,
            mounted: false,
        };
        let out = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&me.image));
        me.loopdev = Some(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        me.mount(opts);
        me
    }

    /// Mounts the filesystem again (after [`BtrfsImage::unmount`]) with `-o <opts>`.
    pub fn mount(&mut self, opts: &str) {
        let dev = self.loopdev.clone().unwrap();
        let mut cmd = Command::new("mount");
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        run(cmd.arg(&dev).arg(&self.mnt));
        self.mounted = true;
    }

    /// Unmounts it; the loop device stays.
    pub fn unmount(&mut self) {
        run(Command::new("umount").arg(&self.mnt));
        self.mounted = false;
    }

    /// The loop device the image is attached to.
    pub fn loop_device(&self) -> &str {
        self.loopdev.as_deref().unwrap_or_default()
    }

    /// Unmounts and mounts again with `opts`.
    pub fn remount(&mut self, opts: &str) {
        run(Command::new("umount").arg(&self.mnt));
        self.mounted = false;
        self.mount(opts);
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// The image file.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// A scratch directory next to the image (outside the filesystem).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Takes a read-only snapshot of the top level at `<mnt>/<name>`.
    pub fn snapshot(&self, name: &str) -> PathBuf {
        let dst = self.mnt.join(name);
        run(Command::new("btrfs")
            .args(["-q", "subvolume", "snapshot", "-r"])
            .arg(&self.mnt)
            .arg(&dst));
        dst
    }

    /// Runs `btrfs send <args>` and returns the stream.
    pub fn send(&self, args: &[&OsStr]) -> Vec<u8> {
        run(Command::new("btrfs").arg("-q").arg("send").args(args)).stdout
    }
}

impl Drop for BtrfsImage {
    fn drop(&mut self) {
        if self.mounted {
            unmount(&self.mnt);
        }
        if let Some(dev) = self.loopdev.take() {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
    }
}

/// Unmounts `mnt`, lazily when it is busy; for drop guards, so it never fails.
pub fn unmount(mnt: &Path) {
    let ok = Command::new("umount")
        .arg(mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    }
}

/// A byte string as an `OsStr`, for file names that are not UTF-8.
pub fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// A small deterministic generator for test data (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A scratch filesystem of any kind in a loop-mounted image file
/// (`mkfs.<fstype>`), unmounted and detached when dropped.
pub struct LoopImage {
    dir: tempfile::TempDir,
    mnt: PathBuf,
    loopdev: Option<String>,
    mounted: bool,
}

impl LoopImage {
    /// Makes a `size_mib` image with `mkfs.<fstype> <mkfs_args>`, mounted
    /// with `-o <opts>`.
    pub fn new(fstype: &str, size_mib: u64, mkfs_args: &[&str], opts: &str) -> LoopImage {
        let dir = tempfile::Builder::new()
            .prefix(&format!("rsend-{fstype}-"))
            .tempdir()
            .unwrap();
        let image = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(size_mib << 20).unwrap();
        drop(f);
        run(Command::new(format!("mkfs.{fstype}"))
            .args(mkfs_args)
            .arg(&image)
            .stdout(Stdio::null()));
        let mut me = LoopImage {
            dir,
            mnt,
            loopdev: None,
            mounted: false,
        };
        let out = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(me.dir.path().join("fs.img")));
        me.loopdev = Some(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        let mut cmd = Command::new("mount");
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        run(cmd.arg(me.loopdev.as_deref().unwrap()).arg(&me.mnt));
        me.mounted = true;
        me
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// A scratch directory next to the image (outside the filesystem).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for LoopImage {
    fn drop(&mut self) {
        if self.mounted {
            unmount(&self.mnt);
        }
        if let Some(dev) = self.loopdev.take() {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
    }
}

/// A loop-mounted ext4 (`mkfs.ext4 -q -F`, plus `mkfs_args`).
pub fn ext4_image(size_mib: u64, mkfs_args: &[&str], opts: &str) -> LoopImage {
    let mut args = vec!["-q", "-F"];
    args.extend_from_slice(mkfs_args);
    LoopImage::new("ext4", size_mib, &args, opts)
}

/// A loop-mounted xfs (`mkfs.xfs -q -f`, reflink on by default); at least
/// 300 MiB.
pub fn xfs_image(size_mib: u64, opts: &str) -> LoopImage {
    LoopImage::new("xfs", size_mib.max(300), &["-q", "-f"], opts)
}

/// A tmpfs mounted on a scratch directory, unmounted when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
    mnt: PathBuf,
    mounted: bool,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_mib` with extra `opts` (comma separated).
    pub fn new(size_mib: u64, opts: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("rsend-tmpfs-")
            .tempdir()
            .unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut o = format!("size={size_mib}m");
        if !opts.is_empty() {
            o.push(',');
            o.push_str(opts);
        }
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &o, "tmpfs"])
            .arg(&mnt));
        Tmpfs {
            dir,
            mnt,
            mounted: true,
        }
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// A scratch directory next to the mount point (outside the tmpfs).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            unmount(&self.mnt);
        }
    }
}

/// Existing image files (one per device) attached to loop devices and
/// their filesystem mounted read-only at `mnt`; detached and unmounted on
/// drop, also when a test fails.
pub struct Attached {
    loops: Vec<String>,
    mnt: PathBuf,
    mounted: bool,
}

impl Attached {
    /// Attaches `devs` (read-only loop devices unless `writable_loop`, as a
    /// filesystem with a log tree needs) and mounts them with `opts` plus
    /// `ro,subvolid=5` and `device=` for each.
    pub fn new(devs: &[PathBuf], mnt: &Path, writable_loop: bool, opts: &str) -> Attached {
        let mut o = String::from("ro,subvolid=5");
        if !opts.is_empty() {
            o.push(',');
            o.push_str(opts);
        }
        Attached::mount_with(devs, mnt, writable_loop, &o)
    }

    /// Attaches `devs` (read-only loop devices unless `writable_loop`) and
    /// mounts them with exactly `opts` (such as `subvol=@`, or empty for a
    /// writable mount of the default subvolume) plus `device=` for each.
    pub fn mount_with(devs: &[PathBuf], mnt: &Path, writable_loop: bool, opts: &str) -> Attached {
        let mut a = Attached {
            loops: Vec::new(),
            mnt: mnt.to_owned(),
            mounted: false,
        };
        for d in devs {
            let mut c = Command::new("losetup");
            if !writable_loop {
                c.arg("-r");
            }
            let out = run(c.args(["--find", "--show"]).arg(d));
            a.loops
                .push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
        std::fs::create_dir_all(mnt).expect("mount point");
        let mut o = String::from(opts);
        for l in &a.loops {
            if !o.is_empty() {
                o.push(',');
            }
            o.push_str("device=");
            o.push_str(l);
        }
        run(Command::new("mount")
            .args(["-o", &o])
            .arg(&a.loops[0])
            .arg(mnt));
        a.mounted = true;
        a
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// The loop devices, in the order of the files attached.
    pub fn loops(&self) -> &[String] {
        &self.loops
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if self.mounted {
            let ok = Command::new("umount")
                .arg(&self.mnt)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        for l in self.loops.drain(..) {
            let _ = Command::new("losetup").arg("-d").arg(l).status();
        }
    }
}

/// The workspace binary `bin` of package `package`, for a test of another
/// package (Cargo gives a test only its own package's binaries): `$<BIN>_BIN`
/// (`RRECEIVE_BIN` for rreceive) when set, else
/// target/<profile>/`bin` next to the test's own directory, built first with
/// this test's cargo and profile when it is missing or older than the
/// workspace directories in `sources` (such as `crates/receive`) or
/// Cargo.lock.
pub fn workspace_bin(package: &str, bin: &str, sources: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(format!("{}_BIN", bin.to_uppercase())) {
        return PathBuf::from(p);
    }
    // A test runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in <target>/<profile>/deps")
        .to_owned();
    let path = profile_dir.join(bin);
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    let newest_source = sources
        .iter()
        .chain(&["Cargo.lock"])
        .filter_map(|c| newest_mtime(&ws.join(c)))
        .max();
    if built.is_none() || newest_source > built {
        let cargo = std::env::var_os("CARGO")
            .or_else(|| option_env!("CARGO").map(Into::into))
            .unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", package, "--bin", bin])
            .current_dir(&ws)
            .env(
                "CARGO_TARGET_DIR",
                profile_dir.parent().unwrap_or(&profile_dir),
            );
        if profile_dir.file_name() == Some(OsStr::new("release")) {
            cmd.arg("--release");
        }
        let ok = cmd.status().is_ok_and(|s| s.success());
        assert!(
            ok && path.exists(),
            "cannot build {} ({cmd:?}); build it with `cargo build --release -p {package}` \
             or point {}_BIN at one",
            path.display(),
            bin.to_uppercase()
        );
    }
    path
}

/// The rsend binary, for tests of other packages ([`workspace_bin`]).
pub fn rsend_bin() -> PathBuf {
    workspace_bin(
        "rsend",
        "rsend",
        &[
            "crates/send",
            "crates/disk",
            "crates/stream",
            "crates/compress",
            "crates/text",
            "crates/cli",
        ],
    )
}

/// The rreceive binary, for tests of other packages ([`workspace_bin`]).
pub fn rreceive_bin() -> PathBuf {
    workspace_bin(
        "rreceive",
        "rreceive",
        &[
            "crates/receive",
            "crates/stream",
            "crates/compress",
            "crates/dump",
            "crates/text",
            "crates/cli",
        ],
    )
}

/// The rdump binary, for tests of other packages ([`workspace_bin`]).
pub fn rdump_bin() -> PathBuf {
    workspace_bin(
        "rdump",
        "rdump",
        &["crates/dump", "crates/stream", "crates/text", "crates/cli"],
    )
}

/// The newest modification time of any file under `p` (`target/` left out).
fn newest_mtime(p: &Path) -> Option<std::time::SystemTime> {
    let md = std::fs::symlink_metadata(p).ok()?;
    if !md.is_dir() {
        return md.modified().ok();
    }
    std::fs::read_dir(p)
        .ok()?
        .flatten()
        .filter(|e| e.file_name() != "target")
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

/// `man -l PAGE` rendered 80 columns wide with every groff warning on
/// (`-ww`), as the man-page tests read it.
pub fn man_render(page: &Path) -> Output {
    Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .env("MANROFFOPT", "-ww")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run man")
}

/// `s` quoted for `sh`.
pub fn sh_quote(s: &OsStr) -> String {
    format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"))
}

/// Runs `sh -c CMD` on a pseudo-terminal (util-linux `script`): its exit
/// code and everything written to the terminal (standard output and
/// standard error together); None without `script`.
pub fn on_terminal(cmd: &str) -> Option<(Option<i32>, Vec<u8>)> {
    let o = Command::new("script")
        .args(["-qfec", cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    Some((o.status.code(), o.stdout))
}

/// The one line a test prints when `script` is missing.
pub fn no_script(test: &str) {
    println!("SKIP {test}: util-linux script is not installed");
}

/// Flips bits of the byte at offset `at` of the file at `path` (XOR with `mask`), as a
/// damaged sector would.
pub fn xor_byte(path: &Path, at: u64, mask: u8) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    b[0] ^= mask;
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&b).unwrap();
}

/// Runs `cmd` with its standard output to `stdout` and returns its exit
/// code and peak resident set size in KiB, as the kernel counts it for that
/// one process (GNU time's `%M`: `wait4`'s `ru_maxrss`, measured from a
/// small parent, so the parent's own memory does not set a floor).
///
/// Panics when the command cannot be started or `/usr/bin/time` (Debian's
/// `time` package, which `.ci/run` installs) is missing.
pub fn peak_rss_kib(cmd: &[&OsStr], stdout: Stdio) -> (i32, u64) {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.exists(),
        "peak_rss_kib needs GNU time at /usr/bin/time (apt-get install time)"
    );
    let report = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new(time)
        .arg("-f")
        .arg("%M %x")
        .arg("-o")
        .arg(report.path())
        .args(cmd)
        .stdout(stdout)
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} under /usr/bin/time: {e}"));
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let last = text.lines().last().unwrap_or_default();
    let mut f = last.split_whitespace().map(str::parse::<i64>);
    match (f.next(), f.next()) {
        (Some(Ok(rss)), Some(Ok(code))) => (code as i32, rss as u64),
        _ => panic!("{cmd:?} gave no peak RSS ({status}):\n{text}"),
    }
}
