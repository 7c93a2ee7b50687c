//! For the tests that receive streams with the real `btrfs receive` and
//! with rreceive: the receivers, the rreceive binary, manifests of received
//! trees and comparing them, running a sender into a file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::scenarios::{only_root_mtime_differs, Manifest};

/// A receiver a test runs its streams through; each test picks its own set
/// and its own destinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// `btrfs receive` onto btrfs.
    BtrfsReceive,
    /// `btrfs receive --force-decompress` onto btrfs.
    BtrfsReceiveDecompressed,
    /// rreceive onto ext4 (directories).
    RreceiveExt4,
    /// rreceive onto btrfs (subvolumes and snapshots).
    RreceiveBtrfs,
    /// `rreceive --plain` onto btrfs (directories).
    RreceiveBtrfsPlain,
}

impl Receiver {
    pub fn label(self) -> &'static str {
        match self {
            Receiver::BtrfsReceive => "btrfs-receive",
            Receiver::BtrfsReceiveDecompressed => "btrfs-receive--force-decompress",
            Receiver::RreceiveExt4 => "rreceive-ext4",
            Receiver::RreceiveBtrfs => "rreceive-btrfs",
            Receiver::RreceiveBtrfsPlain => "rreceive-plain",
        }
    }

    /// Whether xattr `name` is one the receiver cannot or need not keep.
    pub fn ignores_xattr(self, name: &str) -> bool {
        name.starts_with("user.rreceive.")
            || (self == Receiver::RreceiveExt4 && name.starts_with("btrfs."))
    }

    /// Receives the stream in `file` into `dest` (`rreceive`: the rreceive
    /// binary, for the rreceive receivers).
    pub fn receive(self, rreceive: &Path, file: &Path, dest: &Path) -> Result<(), String> {
        let mut cmd = match self {
            Receiver::BtrfsReceive | Receiver::BtrfsReceiveDecompressed => {
                let mut c = Command::new("btrfs");
                c.args(["receive", "-q"]);
                if self == Receiver::BtrfsReceiveDecompressed {
                    c.arg("--force-decompress");
                }
                c
            }
            _ => {
                let mut c = Command::new(rreceive);
                c.arg("-q");
                if self == Receiver::RreceiveBtrfsPlain {
                    c.arg("--plain");
                }
                c
            }
        };
        cmd.arg("-f").arg(file).arg(dest);
        let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed with {}: {}",
                self.label(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim_end()
            ))
        }
    }

    /// The tree it made at `got` against the manifest `want`: Ok(None) when
    /// equal, Ok(Some(note)) for the kernel's known root-mtime fault (only
    /// forgiven when `kernel_sent`, the kernel being the sender),
    /// Err(first difference) otherwise.
    pub fn compare_received(
        self,
        want: &Manifest,
        got: &Path,
        kernel_sent: bool,
    ) -> Result<Option<String>, String> {
        if !got.is_dir() {
            return Err(format!("{} was not made", got.display()));
        }
        let ignore = |x: &str| self.ignores_xattr(x);
        let want = without_xattrs(want, ignore);
        let have = without_xattrs(&manifest_of_tree(got), ignore);
        match Manifest::difference(&want, &have) {
            None => Ok(None),
            Some(_) if kernel_sent && only_root_mtime_differs(&want, &have, recent) => {
                Ok(Some("root mtime = time of the receive".into()))
            }
            Some(d) => Err(d),
        }
    }
}

/// The rreceive binary: `$RRECEIVE_BIN`, else the workspace's, built
/// first when it is older than its sources ([`testkit::rreceive_bin`]).
pub fn rreceive_bin() -> PathBuf {
    testkit::rreceive_bin()
}

/// Installs rsend and rreceive (as built for the tests) with
/// `scripts/install.sh --no-build` under `dir/prefix`, the way a user
/// installs them; returns the prefix.
#[allow(dead_code)]
pub fn install_sh_into(dir: &Path) -> PathBuf {
    // install.sh --no-build takes the tools from CARGO_TARGET_DIR/release.
    let release = dir.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rsend"), release.join("rsend")).unwrap();
    std::os::unix::fs::symlink(rreceive_bin(), release.join("rreceive")).unwrap();
    let prefix = dir.join("prefix");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh");
    let o = Command::new(script)
        .arg("--no-build")
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("TOOLS", "rsend rreceive")
        .env_remove("DESTDIR")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "install.sh failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    prefix
}

/// testdata/manifest.py.
pub fn manifest_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/manifest.py")
}

/// testdata/manifest.py --links of the tree at `dir`.
pub fn manifest_of_tree(dir: &Path) -> Manifest {
    let out = testkit::run(
        Command::new("python3")
            .arg(manifest_py())
            .arg("--links")
            .arg(dir),
    );
    Manifest::parse(&String::from_utf8_lossy(&out.stdout))
}

/// `m` without the xattrs `ignore` names.
pub fn without_xattrs(m: &Manifest, ignore: impl Fn(&str) -> bool) -> Manifest {
    let rows = m
        .rows
        .iter()
        .map(|row| {
            let mut cols: Vec<&str> = row.split('\t').collect();
            if cols.len() < 13 || cols[12] == "-" {
                return row.clone();
            }
            let kept: Vec<&str> = cols[12]
                .split(';')
                .filter(|x| !ignore(x.split('=').next().unwrap_or("")))
                .collect();
            let joined = if kept.is_empty() {
                "-".to_owned()
            } else {
                kept.join(";")
            };
            cols[12] = &joined;
            cols.join("\t")
        })
        .collect();
    Manifest {
        rows,
        skipped: m.skipped.clone(),
        links: m.links.clone(),
    }
}

/// Whether a manifest time (`SEC.NSEC`) is within the last hour: the time
/// of the receive.
pub fn recent(t: &str) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    t.parse::<f64>().is_ok_and(|t| (now - t).abs() < 3600.0)
}

/// Runs `cmd`, which writes the file `out`; its contents, or the failure.
pub fn output_file(cmd: &mut Command, out: &Path) -> Result<Vec<u8>, String> {
    let _ = std::fs::remove_file(out);
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd:?} failed with {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim_end()
        ));
    }
    let data = std::fs::read(out).map_err(|e| format!("{}: {e}", out.display()));
    let _ = std::fs::remove_file(out);
    data
}

/// `find DIR` (at most 40 lines), for failure messages.
pub fn listing(dir: &Path) -> String {
    let out = Command::new("find")
        .arg(dir)
        .args(["-printf", "    %y %m %P\\n"])
        .output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let text = text.unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut s = lines[..lines.len().min(40)].join("\n");
    if lines.len() > 40 {
        s.push_str(&format!("\n    ... {} more", lines.len() - 40));
    }
    s
}

/// testdata/manifest.py --links for many trees from one python process
/// (the script loaded once and its main() run per tree, so its output is
/// what running it gives, without an interpreter start for each of the
/// thousand trees these tests compare).
#[allow(dead_code)]
pub struct ManifestServer {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    out: std::io::BufReader<std::process::ChildStdout>,
}

const MANIFEST_DRIVER: &str = r#"
import contextlib, importlib.util, io, os, sys
spec = importlib.util.spec_from_file_location("manifest", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
for line in sys.stdin.buffer:
    root = os.fsdecode(line.rstrip(b"\n"))
    buf = io.StringIO()
    try:
        sys.argv = ["manifest.py", "--links", root]
        with contextlib.redirect_stdout(buf):
            m.main()
        status, text = b"ok", buf.getvalue()
    except BaseException as e:
        status, text = b"err", repr(e)
    data = text.encode("utf-8", "surrogateescape")
    sys.stdout.buffer.write(b"%s %d\n" % (status, len(data)) + data)
    sys.stdout.buffer.flush()
"#;

impl ManifestServer {
    /// Starts the python process.
    #[allow(dead_code)]
    pub fn start() -> ManifestServer {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(MANIFEST_DRIVER)
            .arg(manifest_py())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        ManifestServer { child, stdin, out }
    }

    /// The manifest of the tree at `dir`.
    #[allow(dead_code)]
    pub fn of(&mut self, dir: &Path) -> Result<Manifest, String> {
        use std::io::{BufRead, Read};
        use std::os::unix::ffi::OsStrExt;
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(dir.as_os_str().as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        let mut head = String::new();
        self.out.read_line(&mut head).unwrap();
        let (status, len) = head
            .trim_end()
            .split_once(' ')
            .unwrap_or_else(|| panic!("manifest driver said {head:?}"));
        let mut data = vec![0u8; len.parse().unwrap()];
        self.out.read_exact(&mut data).unwrap();
        match status {
            "ok" => Ok(Manifest::parse(&String::from_utf8_lossy(&data))),
            _ => Err(format!(
                "manifest.py {}: {}",
                dir.display(),
                String::from_utf8_lossy(&data)
            )),
        }
    }
}

impl Drop for ManifestServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// `m` without link counts, marked `*` (a `--link` snapshot shares its
/// unchanged files, and their count, with its parent: documented).
#[allow(dead_code)]
pub fn without_nlink(m: &Manifest) -> Manifest {
    let mut m = m.clone();
    for r in &mut m.rows {
        let mut f: Vec<&str> = r.split('\t').collect();
        if f.len() > 5 {
            f[5] = "*";
        }
        *r = f.join("\t");
    }
    m
}

/// Waits for `child` at most `secs` seconds; kills it (and fails) after.
#[allow(dead_code)]
pub fn wait_for(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rreceive did not exit within {secs}s");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
