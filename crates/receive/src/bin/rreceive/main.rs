//! `rreceive`: replay a btrfs send stream into a directory on any filesystem.

#![forbid(unsafe_code)]

mod bar;
mod catalog;
mod report;

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rdump::{buffered, dump, DumpError, Streams, TextDump};
use rsend_cli::Failure;

/// Receive btrfs send streams into DEST: real subvolumes on btrfs,
/// directories anywhere else. Every path stays beneath DEST.
///
/// Exit codes: 0 success; 1 an error that a resume would meet again
/// (--resume-token says why); 2 usage; 3 stopped for a cause that can go
/// away (a full disk, a cut stream, a signal, another rreceive receiving
/// the same subvolume): resume it, or receive the same stream again when
/// nothing was kept.
#[derive(Parser)]
#[command(name = "rreceive", version, after_help = SHORT_HELP, after_long_help = AFTER_HELP)]
struct Args {
    /// Read the stream from FILE instead of standard input (as btrfs
    /// receive).
    ///
    /// A receive from FILE that was stopped or killed is completed by the
    /// same command again: FILE is read up to where it stopped, checked
    /// against what was received, and the rest applied (as --resume).
    #[arg(short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Stop after the first END instead of reading further streams (as
    /// btrfs receive).
    #[arg(short = 'e')]
    stop_at_end: bool,
    /// Accepted as btrfs receive's: rreceive is always confined beneath
    /// DEST
    ///
    /// btrfs receive -C chroots into DEST; rreceive needs no chroot: every
    /// path a stream names is resolved beneath DEST and nothing outside it
    /// is ever written. As with btrfs receive -C, parents and clone
    /// sources may still be found (and read) elsewhere on DEST's btrfs
    /// filesystem. -v says so on stderr.
    #[arg(short = 'C', long = "chroot")]
    chroot: bool,
    /// Stop after N failed commands (0: never; the default is 1), as btrfs
    /// receive.
    #[arg(
        short = 'E',
        long = "max-errors",
        value_name = "N",
        default_value_t = 1
    )]
    max_errors: u64,
    /// The root mount point of DEST's btrfs filesystem (as btrfs receive),
    /// for when /proc is not accessible
    ///
    /// A parent or clone source not in DEST is searched on DEST's btrfs
    /// filesystem by received uuid, then by uuid, as btrfs receive does,
    /// and opened beneath this mount root; by default DEST's mount point,
    /// from /proc/self/mountinfo. It must be a mount of the same
    /// filesystem. Off btrfs (or with --plain) it is not used.
    #[arg(short = 'm', value_name = "ROOTMOUNT")]
    root_mount: Option<PathBuf>,
    /// Print the stream as `btrfs receive --dump` does and apply nothing
    /// (as btrfs receive).
    #[arg(long)]
    dump: bool,
    /// Decompress ENCODED_WRITE data instead of writing it encoded (btrfs),
    /// as btrfs receive.
    #[arg(long)]
    force_decompress: bool,
    /// Accept incomplete subvolumes (interrupted receives) as parents and
    /// clone sources.
    #[arg(long)]
    force: bool,
    /// Treat DEST as a plain directory even on btrfs (give it to --list,
    /// --resume-token and --delete-incomplete too for such a DEST).
    #[arg(long)]
    plain: bool,
    /// Off btrfs, apply an incremental stream to its parent's directory:
    /// no copy, and the parent is gone from DEST afterwards.
    ///
    /// The parent's directory is renamed to the new subvolume and changed
    /// there; time and space follow what the stream changes. What a clone
    /// from the parent still needs is kept aside in DEST/.rreceive-work-*
    /// until END. If the receive fails before it changed anything, the
    /// parent is given back as it was; after that, the new subvolume is
    /// left incomplete, and resumes as any other after a stop or a kill (not
    /// after a power loss).
    /// On btrfs a real snapshot is taken instead (--plain to force this).
    #[arg(long, conflicts_with = "link")]
    in_place: bool,
    /// Off btrfs, make an incremental stream's snapshot of new directories
    /// with hard links to the parent's files; the parent stays.
    ///
    /// A file the stream changes (data, owner, mode, times, xattrs, flags,
    /// a new hard link) is copied first, so no change ever shows in the
    /// parent. Unlike a real snapshot, unchanged files share their inode
    /// number, ctime and link count with the parent's (each snapshot of
    /// the chain adds one link), and files with several names in the
    /// parent are copied so that their names stay a group of their own.
    /// On btrfs a real snapshot is taken instead (--plain to force this).
    #[arg(long)]
    link: bool,
    /// Receive as an ordinary user: record owners, set-id bits and device
    /// numbers in the xattr user.rreceive.stat instead of applying them.
    ///
    /// As rsync's --fake-super: CHOWN only records uid:gid; CHMOD records
    /// the mode and applies its permission bits without setuid/setgid, with
    /// u+rw (u+rwx on directories); devices, fifos and sockets become
    /// empty regular files of mode 0600. The value is "MODE MAJOR,MINOR
    /// UID:GID" (mode in octal with the file type). Symlinks cannot carry
    /// it: their owner is lost (counted as skipped, named under -v). Needs
    /// a filesystem with user xattrs.
    #[arg(long)]
    fake_super: bool,
    /// No durable checkpoints: do not sync the destination now and then
    ///
    /// By default, every 1Mi commands, 64 MiB of stream or 30 seconds (and before
    /// the few commands whose replay would be ambiguous, such as a swap
    /// of two names) the destination's filesystem is synced and
    /// DEST/.rreceive-durable-* records where the stream stood, so that a
    /// receive cut by a power loss (or by its destination's device going
    /// away) resumes. Without them such a receive must start again. On
    /// ext4, xfs, btrfs (and overlayfs over them) the changes after the
    /// last checkpoint are replayed; elsewhere (FUSE: GlusterFS, sshfs; NFS;
    /// any filesystem rreceive does not know) a power cut resumes only from
    /// the last checkpoint, and only as far as the filesystem kept what its
    /// syncfs sent (on FUSE: the server's own disk writes); -v says which.
    #[arg(long)]
    no_durable: bool,
    /// When another rreceive is receiving the same subvolume (or using its
    /// parent), wait for it instead of stopping (exit 3)
    ///
    /// One receive at a time writes a subvolume: each holds a lock on it
    /// (and on the parent it copies, links or changes) while it runs, which
    /// dies with it. Without --wait a second receive of it changes nothing,
    /// says "another rreceive (pid N) is receiving NAME into DEST" and
    /// exits 3; with it, it says once that it waits (with -v, or on a
    /// terminal), then goes on, and finds what the other left (complete,
    /// or to resume). Receives of different subvolumes run side by side.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    verbosity: rsend_cli::Verbosity<Said>,
    /// Print the subvolumes received in DEST, one per line: name,
    /// received uuid, ctransid, parent uuid and status (complete, receiving
    /// (pid N), resumable or incomplete), tab-separated; names escaped as
    /// rdump does
    ///
    /// A name is escaped as `btrfs receive --dump` and rdump print it
    /// (`a b\xff` is `a\ b\377`), so it never holds a tab or a newline.
    /// `rsend --parent-from` reads this to pick the parent of the next
    /// incremental send. `receiving (pid N)`: another rreceive is receiving
    /// it now (it holds its lock).
    #[arg(long, conflicts_with_all = ["dump", "resume_token"])]
    list: bool,
    /// With --list: one JSON object per line instead (name, received_uuid,
    /// ctransid, parent_uuid, parent_ctransid, complete, resumable,
    /// receiving, pid); with --ls and --find: one JSON object per entry
    /// (name, type, mode, uid, gid, size, mtime, nlink, target, rdev).
    #[arg(long)]
    json: bool,
    /// Catalog the stream file's nights in DB (SQLite): every path with its
    /// metadata and where its data lies in the stream files
    ///
    /// With -f FILE and no DEST, FILE is cataloged without receiving; with
    /// DEST it is received and cataloged in the same read. FILE may be
    /// compressed with zstd. An incremental stream whose parent night is
    /// not in DB is refused. With --ls, --find, --restore or --check, DB is
    /// read. See "Restoring from stream files" in the recipes and
    /// docs/catalog.md for the schema.
    #[arg(long, value_name = "DB", conflicts_with_all = ["dump", "list", "resume_token", "delete_incomplete"])]
    catalog: Option<PathBuf>,
    /// List a directory of a cataloged night (or one entry): MODE NLINK UID
    /// GID SIZE MTIME NAME, names escaped as rdump does.
    #[arg(long, value_name = "SNAPSHOT[/PATH]", requires = "catalog", conflicts_with_all = ["find", "restore", "check"])]
    ls: Option<std::ffi::OsString>,
    /// Every path of every cataloged night that matches GLOB (on the last
    /// name; on the whole path when GLOB holds a '/'; ** crosses '/').
    #[arg(long, value_name = "GLOB", requires = "catalog", conflicts_with_all = ["restore", "check"])]
    find: Option<String>,
    /// Restore a file or subtree as of a cataloged night into DEST (DEST/NAME
    /// when DEST is a directory), reading only the byte ranges it needs
    ///
    /// Owner, mode, times, xattrs, hard links within the subtree and holes
    /// are restored; it is written under a temporary name and renamed when
    /// whole, and an existing target is refused.
    #[arg(long, value_name = "SNAPSHOT/PATH", requires_all = ["catalog", "dest"], conflicts_with = "check")]
    restore: Option<std::ffi::OsString>,
    /// Check the catalog's chain: every stream file read whole (CRCs), each
    /// night's stream there, every byte range the catalog points at on its
    /// commands; exit 1 naming the first bad night.
    #[arg(long, requires = "catalog")]
    check: bool,
    /// Print the token that resumes the receive of DEST/NAME where it
    /// stopped, for `rsend --resume TOKEN`
    ///
    /// A receive that stops early (a full disk, the stream cut off, SIGINT,
    /// SIGTERM or SIGHUP) applies what it holds, syncs, records where it
    /// stopped and exits 3; one killed outright (SIGKILL, a crash) is
    /// resumed from its journal in /dev/shm; one cut by a power loss (or
    /// its destination unmounted) from its last durable checkpoint. Exit
    /// code 1, with the reason, when NAME cannot be resumed: complete, not
    /// received by rreceive, stopped by an error a resume would meet
    /// again, or received with --in-place, --link or --no-durable and cut
    /// by a power loss. Exit code 3, no token, while another rreceive is
    /// receiving it. Resuming needs a stream made by rsend (or the stream
    /// file read again: -f FILE, --resume).
    #[arg(long, value_name = "DEST/NAME", conflicts_with = "dump")]
    resume_token: Option<PathBuf>,
    /// Resume from the stream itself, read again through a pipe (`cat
    /// FILE |`, `zstd -dc FILE.zst |`, `ssh host cat FILE |`); done anyway
    /// with -f FILE
    ///
    /// A subvolume of the stream that DEST holds incomplete, stopped or
    /// killed (one --resume-token gives a token for), is not refused: the
    /// stream's commands up to where that receive stopped are read, not
    /// applied, and must reach there at the same byte offset with the same
    /// digest of their commands (file data counts by its length); then the
    /// rest is applied. Any other stream (another file, another snapshot's,
    /// one cut short) is refused, exit 1, and the subvolume left as it was.
    /// Subvolumes not in DEST are received as usual. A stream made by
    /// `rsend --resume` needs no flag: it starts where the receive stopped.
    #[arg(long, conflicts_with_all = ["dump", "list", "resume_token"])]
    resume: bool,
    /// Delete DEST/NAME, a subvolume rreceive received and did not
    /// complete (one --resume-token calls not resumable), with what
    /// rreceive kept beside it; a complete one is never deleted
    ///
    /// Nor is one another rreceive is receiving: exit 3, "another rreceive
    /// (pid N) is receiving NAME into DEST"; no receive of it starts while
    /// it deletes.
    ///
    /// For a nightly job that starts again after a stop that resuming
    /// would only repeat (rsend-nightly --delete-incomplete).
    #[arg(long, value_name = "DEST/NAME", conflicts_with_all = ["dump", "resume_token", "list"])]
    delete_incomplete: Option<PathBuf>,
    /// Destination directory.
    #[arg(required_unless_present_any = ["dump", "resume_token", "delete_incomplete", "completions", "man", "catalog"])]
    dest: Option<PathBuf>,
    #[command(flatten)]
    extra: rsend_cli::ExtraArgs,
}

/// The help of `-q` and `-v`, which count as for `btrfs receive`.
struct Said;

impl rsend_cli::VerbosityHelp for Said {
    const QUIET: &'static str = "Print nothing but errors (as btrfs receive).";
    const VERBOSE: &'static str = "More messages; twice prints every command (as btrfs receive; \
                                   a -v after -q undoes it).";
}

/// The end of `-h`: where the rest is.
const SHORT_HELP: &str = "More: `rreceive --help` (examples, exit status), `man rreceive`,\n\
                          the guide /usr/share/doc/rreceive/rreceive.md (docs/rreceive.md in the source)";

/// Real jobs, what the exit codes mean and where to read more: the end of
/// `--help`, and the EXAMPLES, EXIT STATUS and SEE ALSO of the man page.
const AFTER_HELP: &str = "\
Examples:
  Receive a backup sent over ssh (on the backup host):
    rsend -d /dev/sdb -p snaps/mon snaps/tue | ssh backup rreceive /srv/backup

  What the backup holds, for `rsend --parent-from` (one line per subvolume):
    rreceive --list /srv/backup

  Start again after an error a resume would meet again (exit 1):
    ssh backup rreceive --delete-incomplete /srv/backup/tue

  Backups kept as stream files: catalog each as it is stored, then restore one path:
    rreceive --catalog /srv/streams/catalog.db -f /srv/streams/tue.stream
    rreceive --catalog /srv/streams/catalog.db --restore tue/home/ann/thesis.tex /tmp

  Complete a receive that stopped (exit 3: a full disk, a cut connection, a kill):
    t=$(ssh backup rreceive --resume-token /srv/backup/tue) &&
      rsend -d /dev/sdb --resume \"$t\" snaps/tue | ssh backup rreceive /srv/backup

Exit status:
  0  the stream was received whole, or it held no subvolume (nothing was sent)
  1  an error that would happen again (the reason is recorded for --resume-token):
     fix it, or --delete-incomplete and send again
  2  the command line is wrong
  3  stopped for a cause that can go away (a full disk, a cut stream, a signal,
     no input at all: the sender failed): resume it (--resume-token), or receive
     the same stream again; or another rreceive is receiving the same
     subvolume (--resume-token and --delete-incomplete too): try again later

See also:
  rsend(1), rdump(1), btrfs-receive(8)
  The guide: /usr/share/doc/rreceive/rreceive.md (installed), docs/rreceive.md (source); recipes in recipes.md beside it";

fn input(
    file: Option<&std::path::Path>,
    stop: Option<rreceive::StopFlag>,
) -> Result<Box<dyn Read>, ExitCode> {
    use std::os::fd::{AsFd, AsRawFd};
    let stdin = || -> Box<dyn Read> {
        // A pipe or socket may wait for input forever: read it so that a
        // signal still stops the receive cleanly.
        let regular = nix::sys::stat::fstat(io::stdin().as_fd().as_raw_fd())
            .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG);
        match stop.clone() {
            Some(s) if !regular => Box::new(rreceive::interruptible(io::stdin(), s)),
            _ => Box::new(io::stdin().lock()),
        }
    };
    let from_stdin = || match rsend_cli::stream_from_stdin(
        "pipe one in (rsend ... | rreceive DEST) or name a stream file with -f FILE",
    ) {
        Ok(()) => Ok(stdin()),
        Err(e) => Err(rsend_cli::exit("rreceive", Err(e))),
    };
    match file {
        None => from_stdin(),
        Some(p) if p.as_os_str() == "-" => from_stdin(),
        Some(p) => match File::open(p) {
            Ok(f) => Ok(Box::new(f)),
            Err(e) => Err(rsend_cli::exit(
                "rreceive",
                Err(Failure::msg(format!("cannot open {}: {e}", p.display()))),
            )),
        },
    }
}

/// `--list DEST`: one line per subvolume received in DEST, then an end
/// line that counts them (both [`btrfs_text::list`]'s, in text or with
/// `--json` in JSON) so that a reader such as `rsend --parent-from` can
/// tell a whole listing, an empty one included, from one cut short.
fn list(dest: &std::path::Path, json: bool, plain: bool) -> ExitCode {
    use btrfs_text::list::{End, Line, Parent, Receiver, State};
    use std::io::Write;
    let listed = match rreceive::Dest::open(dest, plain).and_then(|d| d.list()) {
        Ok(l) => l,
        Err(e) => {
            return rsend_cli::exit(
                "rreceive",
                Err(Failure::msg(format!(
                    "destination {}: {}",
                    dest.display(),
                    btrfs_text::plain_io(&e)
                ))),
            );
        }
    };
    let mut lines = Vec::with_capacity(listed.len() + 1);
    for l in &listed {
        let st = &l.state;
        let line = Line {
            name: l.name.clone(),
            received_uuid: st.received_uuid,
            ctransid: st.ctransid,
            parent: match (st.parent_uuid, l.parent_unknown) {
                (Some(u), _) => Parent::Of(u),
                (None, true) => Parent::Unknown,
                (None, false) => Parent::Full,
            },
            parent_ctransid: st.parent_ctransid,
            state: match &l.receiving {
                _ if st.complete => State::Complete,
                Some(h) => State::Receiving(Receiver {
                    pid: h.pid,
                    who: Some(h.to_string()),
                }),
                None if st.resume.is_some() => State::Resumable,
                None => State::Incomplete,
            },
        };
        lines.push(if json {
            line.to_json()
        } else {
            line.to_string()
        });
    }
    let end = End {
        subvolumes: listed.len() as u64,
    };
    lines.push(if json { end.to_json() } else { end.to_string() });
    let mut out = io::stdout().lock();
    let written = lines
        .iter()
        .try_for_each(|line| writeln!(out, "{line}"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        // The reader stopped reading (`| head`): it has what it wanted.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => rsend_cli::exit(
            "rreceive",
            Err(Failure::msg(format!(
                "writing the list of {}: {}",
                dest.display(),
                btrfs_text::plain_io(&e)
            ))),
        ),
    }
}

/// DEST and NAME of a `DEST/NAME` argument (exit 2 when it has no NAME).
fn dest_and_name(
    flag: &str,
    path: &std::path::Path,
) -> Result<(std::path::PathBuf, Vec<u8>), ExitCode> {
    use std::os::unix::ffi::OsStrExt;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(rsend_cli::exit(
            "rreceive",
            Err(Failure::Usage(format!(
                "{flag} {}: give DEST/NAME, the subvolume's directory",
                path.display()
            ))),
        ));
    };
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    Ok((dir.to_path_buf(), name.as_bytes().to_vec()))
}

/// `--delete-incomplete DEST/NAME`.
fn delete_incomplete(path: &std::path::Path, plain: bool) -> ExitCode {
    let (dir, name) = match dest_and_name("--delete-incomplete", path) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let res = rreceive::Dest::open(&dir, plain)
        .map_err(|e| format!("{}: {}", dir.display(), btrfs_text::plain_io(&e)))
        .and_then(|d| match d.delete_incomplete(&name) {
            // Not deleted, and a later try can succeed: exit 3.
            Err(rreceive::NotDeleted::Receiving(b)) => Ok(Some(b)),
            r => r.map(|()| None).map_err(|e| e.to_string()),
        });
    match res {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(busy)) => {
            rsend_cli::say_error("rreceive", format!("not deleted: {busy}"));
            rsend_cli::exit("rreceive", Err(Failure::Said(STOPPED)))
        }
        Err(why) => rsend_cli::exit(
            "rreceive",
            Err(Failure::msg(format!(
                "not deleted: {}: {why}",
                path.display()
            ))),
        ),
    }
}

/// `--resume-token DEST/NAME`.
fn resume_token(path: &std::path::Path, plain: bool) -> ExitCode {
    let (dir, name) = match dest_and_name("--resume-token", path) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let (dir, name) = (dir.as_path(), name.as_slice());
    let shown = path.display();
    let token = rreceive::Dest::open(dir, plain)
        .map_err(rreceive::NoToken::Io)
        .and_then(|dest| dest.resume_token(name));
    let why = match token {
        Ok(t) => {
            println!("{t}");
            return ExitCode::SUCCESS;
        }
        // It is being received: ask again once that receive is done.
        Err(rreceive::NoToken::Receiving(b)) => {
            rsend_cli::say_error("rreceive", format!("no resume token: {b}"));
            return rsend_cli::exit("rreceive", Err(Failure::Said(STOPPED)));
        }
        Err(rreceive::NoToken::Io(e)) => format!("{}: {}", dir.display(), btrfs_text::plain_io(&e)),
        Err(e) => format!("{shown} {e}"),
    };
    rsend_cli::exit(
        "rreceive",
        Err(Failure::msg(format!("no resume token: {why}"))),
    )
}

/// The size of the stream when it is a regular file (`-f FILE`, or
/// standard input redirected from one).
fn input_size(file: Option<&std::path::Path>) -> Option<u64> {
    use std::os::fd::{AsFd, AsRawFd};
    let st = match file {
        Some(p) if p.as_os_str() != "-" => nix::sys::stat::stat(p).ok()?,
        _ => nix::sys::stat::fstat(io::stdin().as_fd().as_raw_fd()).ok()?,
    };
    (st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG).then_some(st.st_size as u64)
}

/// Signals that stop a receive cleanly (a second one kills it).
fn stop_on_signals() -> Option<rreceive::StopFlag> {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::sync::Arc;
    let flag: rreceive::StopFlag = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_conditional_default(sig, seen.clone()).ok()?;
        signal_hook::flag::register(sig, seen.clone()).ok()?;
        signal_hook::flag::register_usize(sig, flag.clone(), sig as usize).ok()?;
    }
    Some(flag)
}

fn main() -> ExitCode {
    rsend_cli::run("rreceive", |a: &Args| &a.extra, receive)
}

/// Does what the command line asks for.
fn receive(args: Args) -> ExitCode {
    if let Some(p) = &args.resume_token {
        return resume_token(p, args.plain);
    }
    if let Some(p) = &args.delete_incomplete {
        return delete_incomplete(p, args.plain);
    }
    if args.list {
        return match &args.dest {
            Some(d) => list(d, args.json, args.plain),
            None => rsend_cli::exit("rreceive", Err(Failure::Said(2))),
        };
    }
    if args.json && !(args.list || args.ls.is_some() || args.find.is_some()) {
        return rsend_cli::exit(
            "rreceive",
            Err(Failure::Usage(
                "--json goes with --list, --ls or --find".into(),
            )),
        );
    }
    let quiet = args.verbosity.quiet();
    if let Some(code) = catalog_mode(&args, quiet) {
        return code;
    }
    let stop = if args.dump { None } else { stop_on_signals() };
    let size = input_size(args.file.as_deref());
    // Before anything is read: a sender that is done may be gone after.
    let sender_bar = size.is_none()
        && !args.verbosity.quiet()
        && std::io::IsTerminal::is_terminal(&io::stderr())
        && bar::sender_draws();
    let stream = match input(args.file.as_deref(), stop.clone()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if args.dump {
        let out = buffered(io::stdout().lock());
        return match dump(stream, &mut TextDump::new(out), Streams::First) {
            Ok(()) => ExitCode::SUCCESS,
            Err(DumpError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => rsend_cli::exit("rreceive", Err(Failure::msg(e))),
        };
    }
    let Some(dest) = args.dest.clone() else {
        return rsend_cli::exit(
            "rreceive",
            Err(Failure::Usage("no destination given".into())),
        );
    };
    // Modes come from the stream; the process umask must not alter them.
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let opts = options(&args, dest, size.is_some(), stop);
    let meter = if args.verbosity.quiet() {
        bar::Meter::quiet()
    } else {
        bar::Meter::new(size, sender_bar)
    };
    let (mut tee, along) = match (&args.catalog, args.file.as_deref()) {
        (Some(db), Some(file)) => match catalog::alongside(db, file, stream, quiet) {
            Ok((t, a)) => (t, a),
            Err(f) => return rsend_cli::exit("rreceive", Err(f)),
        },
        _ => (catalog::Tee::plain(stream), None),
    };
    // The bar is gone before what a failure left is told.
    let received = rreceive::receive_with(&mut tee, &opts, &report::Stderr::new(meter));
    let cataloged = along.map(|a| a.finish(tee, quiet));
    match received {
        Ok(stats) => {
            if let Some(Err(f)) = cataloged {
                return rsend_cli::exit("rreceive", Err(f));
            }
            // What rsend --parent-from sends when DEST holds it already.
            if stats.subvols == 0 && !args.verbosity.quiet() {
                eprintln!(
                    "rreceive: nothing was sent: the stream holds no subvolume (the sender had \
                     nothing to send)"
                );
            }
            ExitCode::SUCCESS
        }
        Err(f) if no_input(&f.error) => {
            rsend_cli::say_error(
                "rreceive",
                "nothing was sent: the input is empty, without even a stream header (a sender \
                 with nothing to send still sends one): did the sender fail? Its own message \
                 says why; nothing was received, and a later try can succeed",
            );
            rsend_cli::exit("rreceive", Err(Failure::Said(STOPPED)))
        }
        Err(f) if matches!(f.error, rreceive::Error::Busy(_)) => {
            rsend_cli::say_error("rreceive", &f.error);
            if !args.verbosity.quiet() {
                eprintln!(
                    "rreceive: nothing was changed; try again once it is done (or give --wait)"
                );
            }
            rsend_cli::exit("rreceive", Err(Failure::Said(STOPPED)))
        }
        Err(f) => {
            let transient = f.error.permanent().is_none();
            let stopped = f.resumable.is_some() || (transient && f.incomplete.is_none());
            rsend_cli::say_error("rreceive", &f.error);
            if let Some(p) = f.given_back {
                eprintln!(
                    "rreceive: nothing was changed: parent {} is back as it was",
                    p.escape_ascii()
                );
            }
            if let (Some(p), Some(st)) = (&f.incomplete, &f.resumable) {
                let at = st.resume.map_or(0, |r| r.point.commands);
                eprintln!(
                    "rreceive: subvolume {} stopped after command {at}; it is left incomplete, with \
                     what was received kept and synced. To complete it, {} (or delete it and \
                     receive the whole stream again)",
                    p.display(),
                    how_to_resume(p, &opts, &f.error)
                );
            } else if let Some(p) = f.incomplete {
                eprintln!(
                    "rreceive: subvolume {} is left incomplete: it will not be used as a \
                     parent or clone source unless --force is given",
                    p.display()
                );
                if let Some(why) = &f.not_resumable {
                    eprintln!("rreceive: it cannot be resumed: {why}");
                }
                if let (Some(parent), None) = (f.in_place_of, &f.resumable) {
                    eprintln!(
                        "rreceive: it was received in place onto parent {}, which is gone: \
                         remove it and receive a full stream of the same snapshot (rsend \
                         without -p) to start the chain again",
                        parent.escape_ascii()
                    );
                }
            }
            if stopped && f.resumable.is_none() {
                eprintln!(
                    "rreceive: nothing of it was kept; this can succeed later: receive the same \
                     stream again (when there is room, the connection is back...)"
                );
            }
            let code = if stopped { STOPPED } else { 1 };
            rsend_cli::exit("rreceive", Err(Failure::Said(code)))
        }
    }
}

/// The receive's options from the command line.
fn options(
    args: &Args,
    dest: PathBuf,
    stored: bool,
    stop: Option<rreceive::StopFlag>,
) -> rreceive::Options {
    let mut opts = rreceive::Options::new(dest);
    opts.stop_at_end = args.stop_at_end;
    opts.max_errors = args.max_errors;
    opts.force_decompress = args.force_decompress;
    opts.force = args.force;
    opts.plain = args.plain;
    opts.fake_super = args.fake_super;
    opts.durable = !args.no_durable;
    opts.wait = args.wait;
    opts.tell_waiting = !args.verbosity.quiet() && std::io::IsTerminal::is_terminal(&io::stderr());
    opts.stored = stored;
    opts.resume = args.resume;
    opts.input = args.file.clone().filter(|p| p.as_os_str() != "-");
    opts.stop = stop;
    opts.root_mount = args.root_mount.clone();
    if args.chroot && args.verbosity.verbose() > 0 {
        eprintln!(
            "rreceive: -C: no chroot needed: every path stays beneath {} already",
            opts.dest.display()
        );
    }
    opts.snapshot = if args.in_place {
        rreceive::Snapshot::InPlace
    } else if args.link {
        rreceive::Snapshot::Link
    } else {
        rreceive::Snapshot::Copy
    };
    opts.verbosity = args.verbosity.level();
    opts
}

/// `--catalog DB` with `--ls`, `--find`, `--restore` or `--check`, or with
/// `-f FILE` and no DEST; `None` when the receive goes on (with DEST, or
/// without --catalog).
fn catalog_mode(args: &Args, quiet: bool) -> Option<ExitCode> {
    let db = args.catalog.as_ref()?;
    let mode = if let Some(s) = &args.ls {
        Some(catalog::Mode::Ls(catalog::spec(s)))
    } else if let Some(g) = &args.find {
        Some(catalog::Mode::Find(g))
    } else if let (Some(s), Some(d)) = (&args.restore, &args.dest) {
        Some(catalog::Mode::Restore(catalog::spec(s), d))
    } else if args.check {
        Some(catalog::Mode::Check)
    } else {
        None
    };
    if let Some(mode) = mode {
        return Some(rsend_cli::exit(
            "rreceive",
            catalog::run(db, mode, args.json, quiet),
        ));
    }
    let Some(file) = args.file.as_deref().filter(|f| f.as_os_str() != "-") else {
        return Some(rsend_cli::exit(
            "rreceive",
            Err(Failure::Usage(
                "--catalog DB points into stream files: give the stream file with -f FILE \
                 (or --ls, --find, --restore, --check to read DB)"
                    .into(),
            )),
        ));
    };
    args.dest
        .is_none()
        .then(|| rsend_cli::exit("rreceive", catalog::add(db, file, quiet)))
}

/// What completes subvolume `sv`, stopped while `opts` received into it:
/// the same stream file (or pipe with --resume) again, else rsend --resume.
fn how_to_resume(sv: &std::path::Path, opts: &rreceive::Options, e: &rreceive::Error) -> String {
    let dest = opts.dest.display();
    let rsend = format!(
        "run the same rsend with --resume \"$(rreceive --resume-token {})\" and receive that \
         into the same destination",
        sv.display()
    );
    // A stored file that ends there ends there again: the whole one resumes.
    let cut = matches!(e, rreceive::Error::Stream(s) if matches!(
        s.kind,
        btrfs_stream::ErrorKind::MissingEnd
            | btrfs_stream::ErrorKind::TruncatedCommand { .. }
            | btrfs_stream::ErrorKind::TruncatedCommandHeader { .. }
    ));
    let again = match (&opts.input, opts.stored, opts.resume) {
        (Some(file), _, _) => format!("run the same rreceive -f {} {dest} again", file.display()),
        (None, true, _) => format!("receive the same stream file into {dest} again"),
        (None, false, true) => format!("pipe the same stream into rreceive --resume {dest} again"),
        (None, false, false) => return rsend,
    };
    if cut && opts.stored {
        format!(
            "{again} once the file is whole (it checks it against what was received and goes \
             on after that command), or {rsend}"
        )
    } else {
        format!("{again}: it checks the stream against what was received and goes on after that command")
    }
}

/// Whether the receive failed on an input without a byte: no stream at
/// all, not even its header (a sender that failed or never ran).
fn no_input(e: &rreceive::Error) -> bool {
    matches!(e, rreceive::Error::Stream(s) if matches!(s.kind, btrfs_stream::ErrorKind::Empty))
}

/// The exit code of a receive that stopped for a cause that can go away
/// (a full disk, a cut connection, a signal, another rreceive receiving the
/// same subvolume) and can be resumed.
const STOPPED: u8 = 3;
