//! An sshfs mount for tests: an `sshd` of its own on a free port of
//! localhost (a host key and a client key made for it, in a temporary
//! directory), and `sshfs` of a scratch directory through it; unmounted
//! and the sshd stopped when dropped, also when the test fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{run, which};

/// Why an sshfs mount cannot be made here, if it cannot.
pub fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if !Path::new("/usr/sbin/sshd").exists() {
        return Some("/usr/sbin/sshd not installed (Debian: openssh-server)".into());
    }
    for prog in ["sshfs", "ssh-keygen", "ssh"] {
        if which(prog).is_none() {
            return Some(format!(
                "{prog} not installed (Debian: sshfs, openssh-client)"
            ));
        }
    }
    if which("fusermount3").is_none() && which("fusermount").is_none() {
        return Some("fusermount not installed (Debian: fuse3)".into());
    }
    None
}

/// A directory of this host mounted again through sshfs.
pub struct Sshfs {
    dir: tempfile::TempDir,
    mnt: PathBuf,
    remote: PathBuf,
    sshd: Option<Child>,
    mounted: bool,
    /// The tmpfs (`noatime`) at `remote`, unmounted last.
    remote_fs: Option<crate::Tmpfs>,
}

fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Sshfs {
    /// Starts the sshd and mounts a new empty directory (a tmpfs of 1 GiB
    /// mounted `noatime`, so that reading what was stored changes no
    /// atime) with `sshfs` and
    /// `extra` options (comma separated, may be empty); `Err` says why it
    /// cannot be made.
    pub fn new(extra: &str) -> Result<Sshfs, String> {
        if let Some(why) = missing() {
            return Err(why);
        }
        let dir = tempfile::Builder::new()
            .prefix("rsend-sshfs-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let d = dir.path();
        let mnt = d.join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let remote_fs = crate::Tmpfs::new(1024, "noatime");
        let remote = remote_fs.mnt().to_path_buf();
        for key in ["host_key", "client_key"] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(key)));
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        // Privilege separation wants this directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let mut me = Sshfs {
            dir,
            mnt,
            remote,
            sshd: None,
            mounted: false,
            remote_fs: Some(remote_fs),
        };
        let d = me.dir.path().to_path_buf();
        let t = Instant::now();
        let port = loop {
            let port = free_port().map_err(|e| format!("no free port: {e}"))?;
            let config = d.join("sshd_config");
            let mut f = std::fs::File::create(&config).map_err(|e| e.to_string())?;
            write!(
                f,
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PidFile {}\nStrictModes no\nPermitRootLogin yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nSubsystem sftp internal-sftp\n",
                d.join("host_key").display(),
                d.join("authorized_keys").display(),
                d.join("sshd.pid").display(),
            )
            .map_err(|e| e.to_string())?;
            drop(f);
            let child = Command::new("/usr/sbin/sshd")
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(d.join("sshd.log")).map_err(|e| e.to_string())?)
                .spawn()
                .map_err(|e| format!("cannot start sshd: {e}"))?;
            me.sshd = Some(child);
            // Listening, or gone (the port taken meanwhile: another one).
            let up = Instant::now();
            let mut listening = false;
            while up.elapsed() < Duration::from_secs(10) {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    listening = true;
                    break;
                }
                if let Some(c) = me.sshd.as_mut() {
                    if c.try_wait().ok().flatten().is_some() {
                        break;
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if listening {
                break port;
            }
            me.stop_sshd();
            if t.elapsed() > Duration::from_secs(30) {
                let log = std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default();
                return Err(format!("sshd does not start: {}", log.trim()));
            }
        };
        let mut opts = format!(
            "IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,\
             BatchMode=yes,LogLevel=ERROR,port={port}",
            d.join("client_key").display()
        );
        if !extra.is_empty() {
            opts.push(',');
            opts.push_str(extra);
        }
        let o = Command::new("sshfs")
            .arg("-o")
            .arg(&opts)
            .arg(format!("root@127.0.0.1:{}", me.remote.display()))
            .arg(&me.mnt)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("sshfs: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "sshfs failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        me.mounted = true;
        Ok(me)
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// The directory the mount shows (as the sshd sees it).
    pub fn remote(&self) -> &Path {
        &self.remote
    }

    /// A scratch directory outside the mount.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    fn stop_sshd(&mut self) {
        if let Some(mut c) = self.sshd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sshfs {
    fn drop(&mut self) {
        if self.mounted {
            let ok = Command::new(if which("fusermount3").is_some() {
                "fusermount3"
            } else {
                "fusermount"
            })
            .arg("-u")
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
            if !ok {
                crate::unmount(&self.mnt);
            }
        }
        self.stop_sshd();
        drop(self.remote_fs.take());
    }
}
