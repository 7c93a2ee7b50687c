//! The catalog modes of `rreceive --catalog DB`: adding stream files
//! (alone or while receiving), `--ls`, `--find`, `--restore` and `--check`.

use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use btrfs_catalog::{find, restore, Catalog, Inode};
use rsend_cli::Failure;
use serde_json::json;

/// What a catalog mode asks for.
pub enum Mode<'a> {
    Ls(&'a [u8]),
    Find(&'a str),
    Restore(&'a [u8], &'a Path),
    Check,
}

fn fail(e: impl std::fmt::Display) -> Failure {
    Failure::msg(e.to_string())
}

/// `--catalog DB -f FILE` with no DEST: adds the file's nights.
pub fn add(db: &Path, file: &Path, quiet: bool) -> Result<(), Failure> {
    let mut cat = Catalog::create(db).map_err(fail)?;
    let added = btrfs_catalog::add_file(&mut cat, file).map_err(fail)?;
    tell_added(file, &added, quiet);
    Ok(())
}

fn tell_added(file: &Path, added: &[btrfs_catalog::Added], quiet: bool) {
    if quiet {
        return;
    }
    for a in added {
        let name = btrfs_text::escape::escape(&a.name);
        if a.already {
            eprintln!(
                "rreceive: {name} ({}) is in the catalog already; skipped",
                btrfs_catalog::uuid_text(&a.uuid)
            );
        } else {
            eprintln!(
                "rreceive: cataloged {name} from {}: {} commands, {} rows",
                file.display(),
                a.commands,
                a.rows
            );
        }
    }
}

/// Reads what the receive reads and hands a copy to the catalog's thread.
pub struct Tee<R> {
    inner: R,
    tx: Option<SyncSender<Vec<u8>>>,
}

impl<R> Tee<R> {
    /// Passes `inner` through, cataloging nothing.
    pub fn plain(inner: R) -> Tee<R> {
        Tee { inner, tx: None }
    }
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            // A catalog that gave up takes nothing more; the receive goes on.
            if let Some(tx) = &self.tx {
                if tx.send(buf[..n].to_vec()).is_err() {
                    self.tx = None;
                }
            }
        }
        Ok(n)
    }
}

/// Bytes from the receive, as a reader for the catalog.
struct Chunks {
    rx: Receiver<Vec<u8>>,
    cur: Vec<u8>,
    at: usize,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.cur.len() {
            match self.rx.recv() {
                Ok(c) => {
                    self.cur = c;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len() - self.at);
        buf[..n].copy_from_slice(&self.cur[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A catalog being built from the bytes a receive reads.
pub struct Alongside {
    handle: JoinHandle<Result<Vec<btrfs_catalog::Added>, String>>,
    file: PathBuf,
}

/// Starts cataloging `file` from what `input` yields as it is read; `None`
/// for the catalog when it holds the file already (told now).
pub fn alongside<R: Read>(
    db: &Path,
    file: &Path,
    input: R,
    quiet: bool,
) -> Result<(Tee<R>, Option<Alongside>), Failure> {
    let mut cat = Catalog::create(db).map_err(fail)?;
    if let Some(nights) = btrfs_catalog::cataloged(&cat, file).map_err(fail)? {
        tell_added(file, &nights, quiet);
        return Ok((Tee::plain(input), None));
    }
    let (tx, rx) = sync_channel::<Vec<u8>>(64);
    let path = file.to_owned();
    let handle = std::thread::spawn(move || {
        let chunks = Chunks {
            rx,
            cur: Vec::new(),
            at: 0,
        };
        cat.add(&path, chunks).map_err(|e| e.to_string())
    });
    Ok((
        Tee {
            inner: input,
            tx: Some(tx),
        },
        Some(Alongside {
            handle,
            file: file.to_owned(),
        }),
    ))
}

impl Alongside {
    /// Reads the rest of the input through `tee` (bytes after the last END
    /// the receive did not need), then waits for the catalog.
    pub fn finish<R: Read>(self, mut tee: Tee<R>, quiet: bool) -> Result<(), Failure> {
        let _ = io::copy(&mut tee, &mut io::sink());
        drop(tee);
        let added = self
            .handle
            .join()
            .map_err(|_| Failure::msg("the catalog's thread failed"))?
            .map_err(|e| Failure::msg(format!("not cataloged: {e}")))?;
        tell_added(&self.file, &added, quiet);
        Ok(())
    }
}

/// `--ls`, `--find`, `--restore`, `--check`.
pub fn run(db: &Path, mode: Mode<'_>, json: bool, quiet: bool) -> Result<(), Failure> {
    let cat = Catalog::open(db).map_err(fail)?;
    let out = io::stdout();
    let mut out = io::BufWriter::new(out.lock());
    let res = match mode {
        Mode::Ls(spec) => ls(&cat, spec, json, &mut out),
        Mode::Find(glob) => find_paths(&cat, glob, json, &mut out),
        Mode::Restore(spec, dest) => restore_path(&cat, spec, dest, quiet),
        Mode::Check => check(&cat, quiet),
    };
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(fail(e)),
        _ => {}
    }
    res
}

fn ls(cat: &Catalog, spec: &[u8], json: bool, out: &mut impl Write) -> Result<(), Failure> {
    let (snap, path) = restore::split_spec(cat, spec).map_err(fail)?;
    let ino = cat.resolve(&snap, path).map_err(fail)?.ok_or_else(|| {
        fail(format!(
            "no path '{}' in snapshot {}",
            btrfs_text::escape::escape(path),
            snap.label()
        ))
    })?;
    let inode = cat
        .inode(snap.id, ino)
        .map_err(fail)?
        .ok_or_else(|| fail("the catalog has no inode for it (damaged)"))?;
    let mut emit = |name: &[u8], i: &Inode| line(out, name, i, json).map_err(fail);
    if !inode.is_dir() {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        return emit(name, &inode);
    }
    for (name, child) in cat.list(snap.id, ino).map_err(fail)? {
        let i = cat
            .inode(snap.id, child)
            .map_err(fail)?
            .ok_or_else(|| fail("the catalog has no inode for an entry (damaged)"))?;
        emit(&name, &i)?;
    }
    Ok(())
}

fn find_paths(cat: &Catalog, glob: &str, json: bool, out: &mut impl Write) -> Result<(), Failure> {
    let pattern = find::Pattern::new(glob).map_err(fail)?;
    let mut io_err = None;
    find::find(cat, &pattern, &mut |snap, path, inode| {
        let mut full = snap.name.clone();
        full.push(b'/');
        full.extend_from_slice(path);
        if let Err(e) = line(out, &full, inode, json) {
            io_err = Some(e);
            return Err(btrfs_catalog::Error::Restore("output".into()));
        }
        Ok(())
    })
    .map_err(|e| match io_err.take() {
        Some(io) => fail(io),
        None => fail(e),
    })
}

/// The file type of `mode`: its letter in `ls -l` and its name in JSON.
fn kind(mode: u32) -> (char, &'static str) {
    use nix::libc::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFSOCK};
    match mode & S_IFMT {
        S_IFDIR => ('d', "dir"),
        S_IFLNK => ('l', "lnk"),
        S_IFCHR => ('c', "chr"),
        S_IFBLK => ('b', "blk"),
        S_IFIFO => ('p', "fifo"),
        S_IFSOCK => ('s', "sock"),
        _ => ('-', "reg"),
    }
}

/// `-rw-r--r--` and the like.
fn mode_text(mode: u32) -> String {
    let bit = |b: u32, c: char| if mode & b != 0 { c } else { '-' };
    // x, or the set-id/sticky letter over it (capital without x).
    let exec = |x: u32, special: u32, on: char| match (mode & special != 0, mode & x != 0) {
        (true, true) => on,
        (true, false) => on.to_ascii_uppercase(),
        (false, true) => 'x',
        (false, false) => '-',
    };
    [
        kind(mode).0,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        exec(0o100, 0o4000, 's'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        exec(0o010, 0o2000, 's'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        exec(0o001, 0o1000, 't'),
    ]
    .iter()
    .collect()
}

/// One entry: `MODE NLINK UID GID SIZE MTIME NAME`, or a JSON object.
fn line(out: &mut impl Write, name: &[u8], i: &Inode, json: bool) -> io::Result<()> {
    let (letter, type_name) = kind(i.mode);
    let size = if matches!(letter, '-' | 'l') {
        i.size
    } else {
        0
    };
    let nlink = if i.is_dir() { 1 } else { i.nlink };
    if json {
        let mut v = json!({
            "name": btrfs_text::escape::escape(name),
            "type": type_name,
            "mode": i.mode,
            "uid": i.uid,
            "gid": i.gid,
            "size": size,
            "mtime": {"sec": i.mtime.sec, "nsec": i.mtime.nsec},
            "nlink": nlink,
        });
        if let Some(t) = &i.target {
            v["target"] = json!(btrfs_text::escape::escape(t));
        }
        if matches!(letter, 'c' | 'b') {
            v["rdev"] = json!(i.rdev);
        }
        writeln!(out, "{v}")
    } else {
        writeln!(
            out,
            "{} {nlink} {} {} {size} {}.{:09} {}",
            mode_text(i.mode),
            i.uid,
            i.gid,
            i.mtime.sec,
            i.mtime.nsec,
            btrfs_text::escape::escape(name)
        )
    }
}

fn restore_path(cat: &Catalog, spec: &[u8], dest: &Path, quiet: bool) -> Result<(), Failure> {
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let bar = (!quiet && std::io::IsTerminal::is_terminal(&io::stderr())).then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} restoring: {bytes}/{total_bytes} of stream files read ({bytes_per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut progress = |p: restore::Progress| {
        if let Some(b) = &bar {
            b.set_length(p.total);
            b.set_position(p.done);
        }
    };
    let judge = |fd: std::os::fd::BorrowedFd<'_>, name: &[u8], len: usize, errno| {
        rreceive::xattr_too_large(fd, name, len, errno).map(|t| match t.fix {
            Some(fix) => format!("{}; {fix}", t.why),
            None => t.why,
        })
    };
    let done = restore::restore(
        cat,
        spec,
        dest,
        &mut restore::Hooks {
            progress: &mut progress,
            too_large: &judge,
        },
    );
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let done = done.map_err(|e| fail(format!("not restored: {e}")))?;
    if done.owners_kept > 0 && !quiet {
        eprintln!(
            "rreceive: {} owners not restored: not running as root, the files are this user's",
            done.owners_kept
        );
    }
    for x in &done.skipped_xattrs {
        eprintln!("rreceive: skipped {x}");
    }
    if done.skipped_properties > 0 && !quiet {
        eprintln!(
            "rreceive: skipped {} btrfs properties (btrfs.* xattrs): the destination is not btrfs",
            done.skipped_properties
        );
    }
    if !quiet {
        eprintln!(
            "rreceive: restored {} files, {} bytes into {}; read {} bytes of stream files ({} bytes in the chain)",
            done.files,
            done.bytes,
            btrfs_text::escape::escape(done.target.as_os_str().as_bytes()),
            done.read,
            done.chain
        );
    }
    Ok(())
}

fn check(cat: &Catalog, quiet: bool) -> Result<(), Failure> {
    let mut n = 0u64;
    btrfs_catalog::check::check(cat, &mut |c| {
        n += 1;
        if !quiet {
            eprintln!(
                "rreceive: ok: {} ({}, {} commands)",
                c.snapshot.label(),
                c.snapshot.file.display(),
                c.snapshot.commands
            );
        }
    })
    .map_err(|e| fail(format!("check failed: {e}")))?;
    if !quiet {
        eprintln!("rreceive: the catalog's {n} nights check good");
    }
    Ok(())
}

/// `SNAPSHOT/PATH` from the command line.
pub fn spec(s: &std::ffi::OsStr) -> &[u8] {
    s.as_bytes()
}
