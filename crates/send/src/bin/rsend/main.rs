//! `rsend`: btrfs send streams made straight from devices or image files.
//!
//! The command line over the engine library ([`rsend`]): it parses the
//! flags here, runs one command ([`send`], [`compare`], [`fs`]) and
//! reports how it ended as every tool does ([`rsend_cli::exit`]). The
//! commands say what the send plan picked ([`parents`]), draw the progress bar
//! ([`bar`]) and say on standard error what the engine returned.

mod bar;
mod compare;
mod fs;
mod named;
mod parents;
mod send;

use std::path::PathBuf;
use std::process::ExitCode;

use btrfs_disk::SubvolSelector;
use clap::builder::TypedValueParser;
use clap::{CommandFactory, Parser};
use rsend::verify::Ignore;
use rsend_cli::Failure;

use crate::compare::CompareArgs;
use crate::named::Named;
use crate::send::SendArgs;

/// The end of `-h`: where the rest is.
const SHORT_HELP: &str = "More: `rsend --help` (examples, exit status), `man rsend`,\n\
                          the guide /usr/share/doc/rsend/rsend.md (docs/rsend.md in the source)";

/// Real jobs, what the exit codes mean and where to read more: the end of
/// `--help`, and the EXAMPLES, EXIT STATUS and SEE ALSO of the man page.
const AFTER_HELP: &str = "\
Examples:
  Back up a snapshot incrementally to another machine over ssh, naming the
  snapshots where the filesystem is mounted, as btrfs send does (its devices
  are read, not the mount):
    rsend -p /mnt/pool/snaps/mon /mnt/pool/snaps/tue | ssh backup rreceive /srv/backup

  The same from the device or image file, with paths from the top level of
  the filesystem (mounted or not):
    rsend -d /dev/sdb -p snaps/mon snaps/tue | ssh backup rreceive /srv/backup

  The nightly cron job: the parent is the newest older snapshot of the same
  subvolume the backup holds, and a cut connection is resumed instead of
  sent again:
    ssh backup rreceive --list /srv/backup |
      rsend -d /dev/sdb --parent-from - snaps/today | ssh backup rreceive /srv/backup
    t=$(ssh backup rreceive --resume-token /srv/backup/today) &&
      rsend -d /dev/sdb --resume \"$t\" snaps/today | ssh backup rreceive /srv/backup

  A damaged filesystem: everything that can be read, and a list of what
  could not be (exit code 3 when anything was lost):
    rsend -d /dev/sdb --rescue --rescue-report lost.jsonl snaps/tue | btrfs receive /mnt/recovered

  How large the stream would be, without reading file data:
    rsend -d /dev/sdb -p snaps/mon snaps/tue -n

Exit status:
  0  the stream was written whole (with --verify: the copy is identical; with
     --parent-from: also nothing to send, the destination holds SUBVOL already)
  1  an error; a stream cut short has no END, so a receiver refuses it (with --verify:
     also when the copy differs)
  2  the command line is wrong
  3  with --rescue: the stream is whole but something could not be read (the loss
     report says what)

See also:
  rreceive(1), rdump(1), btrfs-send(8), btrfs-subvolume(8)
  The guide: /usr/share/doc/rsend/rsend.md (installed), docs/rsend.md (source); recipes in recipes.md beside it";

/// Send btrfs subvolumes as `btrfs send` does, reading devices or image files (no kernel, no mount).
#[derive(Parser)]
#[command(name = "rsend", version, after_help = SHORT_HELP, after_long_help = AFTER_HELP)]
struct Args {
    /// A device or image file of the filesystem; repeat for multi-device filesystems
    ///
    /// The filesystem may be mounted and in use: read-only snapshots are safe to send.
    /// Trees the kernel rewrites meanwhile are read again from newer commits (-v counts
    /// them); a snapshot deleted, made writable or changed during the send fails it
    /// (exit code 1, no END).
    /// Without -d, the devices of the mounted btrfs the SUBVOL paths are on
    /// are read (from /sys/fs/btrfs), never the files through the mount.
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,

    /// Write the stream to OUT instead of standard output ("-" is standard output)
    #[arg(short = 'f', long = "file", value_name = "OUT")]
    file: Option<PathBuf>,

    /// With several SUBVOLs, one stream for all, as `btrfs send -e`: a
    /// stream header before the first and an END only after the last
    /// (without -e each SUBVOL is a whole stream of its own, concatenated)
    #[arg(short = 'e')]
    one_stream: bool,

    /// Write nothing: print the exact size the stream would have, with its
    /// command, file and byte counts, without reading file data
    ///
    /// One line per SUBVOL on standard output (path, bytes, commands, files,
    /// bytes of file data, bytes cloned, compressed bytes, tab-separated),
    /// then `size<TAB>TOTAL`. A job can log it or check the free space of
    /// the destination first.
    #[arg(short = 'n', long)]
    dry_run: bool,

    /// Pick the parent from a list of what the destination holds: the
    /// output of `rreceive --list DEST` in FILE ("-" for standard input)
    ///
    /// The parent is the newest snapshot of the same subvolume as SUBVOL
    /// (of its lineage: linked to it by snapshots and receives), older
    /// than SUBVOL (lower ctransid), read-only, that the destination holds
    /// complete; with none, the send is a full one. Either is said on
    /// standard error. When the destination holds SUBVOL complete already,
    /// that is said, an empty stream (no subvolume) is written and the exit
    /// code is 0: the receiver says nothing was sent. A list without the
    /// end line rreceive prints last (empty, or cut short) is refused: exit
    /// code 1, nothing sent.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["parent", "parent_id"])]
    parent_from: Option<PathBuf>,

    /// With --parent-from: the parent is the newest read-only snapshot the
    /// destination holds complete, whatever subvolume it is a snapshot of;
    /// with a bookmark as the parent: one of another lineage is taken too
    #[arg(long)]
    parent_any: bool,

    /// Continue a stream a receive stopped in: TOKEN is what
    /// `rreceive --resume-token DEST/NAME` prints
    ///
    /// Give the same SUBVOL and options (-c, --compressed-data, --no-data)
    /// as the first send; the parent and protocol version come from the
    /// token. The stream written starts after the last command the
    /// receive applied and reads only the file data of what follows.
    /// Resuming needs a stream made by rsend (its streams are the same
    /// every time for the same snapshot, parent and options; the token's
    /// digest checks it) and received by rreceive.
    #[arg(long, value_name = "TOKEN")]
    resume: Option<String>,

    #[command(flatten)]
    verbosity: rsend_cli::Verbosity<Said>,

    /// Send stream protocol version: 1 (the default), 2 or 3; 0 means 2
    ///
    /// Version 2 cuts WRITEs at 128 KiB instead of 48 KiB, sends holes of an
    /// incremental send as FALLOCATE (punch hole), birth times in UTIMES and
    /// changed inode flags (chattr) as FILEATTR, and can carry compressed
    /// extents (--compressed-data). Version 3 adds ENABLE_VERITY for
    /// fs-verity files; it is experimental in the kernel and btrfs-progs, so
    /// 0 means 2, the highest a standard btrfs receive accepts.
    /// With --compressed-data and no --proto, 2 is used.
    #[arg(long, value_name = "N", value_parser = proto_version)]
    proto: Option<u32>,

    /// Send compressed extents as they are on disk (ENCODED_WRITE), without
    /// decompressing them: fewer bytes on the wire, nothing to compress again
    /// on a btrfs receiver (needs --proto 2 or later)
    ///
    /// An extent goes compressed when the range sent is at least as long as
    /// the extent is on disk (the kernel's rule: whole extents, and parts of
    /// extents that compress well); other ranges go as plain WRITEs. btrfs
    /// receive writes them as they are where it can and decompresses
    /// otherwise (--force-decompress always); rreceive decompresses them
    /// onto filesystems other than btrfs.
    #[arg(long)]
    compressed_data: bool,

    /// Send no file data: each changed range goes as UPDATE_EXTENT (offset
    /// and length), as `btrfs send --no-data`; for listing what changed, not
    /// for receiving
    #[arg(long)]
    no_data: bool,

    /// Send incrementally against PARENT (a read-only snapshot: a path on a mounted btrfs, or with -d a path from the top level; or its uuid); with several SUBVOLs every one is sent against PARENT, as btrfs send does
    #[arg(short = 'p', long = "parent", value_name = "PARENT", value_parser = any_path())]
    parent: Option<PathBuf>,

    /// Select the parent by subvolume id
    #[arg(long, value_name = "N", conflicts_with = "parent")]
    parent_id: Option<u64>,

    /// Send incrementally against the snapshot bookmarked in FILE (see
    /// --write-bookmark), whether or not that snapshot still exists;
    /// `-p FILE` does the same when FILE is a bookmark
    ///
    /// The stream is the one `-p` against the snapshot gives, but that
    /// data the snapshot shared and which may have been freed and reused
    /// since (after a balance, say) is sent rather than taken as unchanged
    /// or cloned from it. The bookmark must be of this filesystem, of a
    /// snapshot of SUBVOL's lineage (unless --parent-any) and not newer
    /// than SUBVOL; a damaged or cut short bookmark is refused (exit code 1).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["parent", "parent_id", "parent_from"])]
    parent_bookmark: Option<PathBuf>,

    /// After the send (with -n: instead of it), write a bookmark of SUBVOL
    /// to FILE: its identity and its tree, no file data, for later
    /// incremental sends against it after the snapshot is deleted
    /// (--parent-bookmark)
    ///
    /// Written under a temporary name and renamed once whole, so a stopped
    /// run never leaves half a bookmark. About 0.5 % of the snapshot's data
    /// for a system tree; see the guide.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["changes", "verify", "list", "rescue"])]
    write_bookmark: Option<PathBuf>,

    /// Where bookmarks are kept, named UUID.bookmark by the uuid the
    /// receiver knows each snapshot by: every send also writes the
    /// bookmark of each SUBVOL sent there, and --parent-from takes a
    /// snapshot the destination holds but the source lost from its bookmark
    #[arg(long, value_name = "DIR", conflicts_with_all = ["changes", "verify", "list", "rescue"])]
    bookmarks: Option<PathBuf>,

    /// A read-only subvolume the receiver has, to clone shared data from (repeatable; named as SUBVOL is, or by its uuid); without -p, the parent is picked among them as btrfs send does
    #[arg(short = 'c', long = "clone-src", value_name = "SUBVOL", value_parser = any_path())]
    clone_src: Vec<PathBuf>,

    /// Print the subvolumes as `btrfs subvolume list -p -u -q -R` does (of
    /// the filesystem of -d, or of the one SUBVOL is mounted from)
    #[arg(long)]
    list: bool,

    /// Send what can be read of a damaged filesystem, and say exactly what
    /// could not be: exit code 3 when anything was lost
    ///
    /// A tree block no copy of which is valid loses the items under it and
    /// the rest of the tree is still read; data no copy of which matches its
    /// checksum is sent as zeros; an inode whose inode item or every name
    /// was lost is left out. When the root tree's root cannot be read, the
    /// newest of the superblocks' backup roots that can is used (and said).
    /// The stream stays one btrfs receive and rreceive accept. The losses
    /// are listed on standard error (and with --rescue-report in a file);
    /// with -n nothing is written, and the files and bytes that can be
    /// recovered are printed. Without --rescue the first unreadable block
    /// stops the send (exit code 1).
    #[arg(long, conflicts_with_all = ["resume", "no_data"])]
    rescue: bool,

    /// With --rescue, write the loss report to FILE: one JSON object per
    /// line and loss (kind tree_block, inode, name, data or unverified,
    /// with subvol, path, ino, ranges as [offset, length], logical and
    /// mirrors tried)
    #[arg(long, value_name = "FILE", requires = "rescue")]
    rescue_report: Option<PathBuf>,

    /// List what changed from PARENT (-p) to SUBVOL instead of sending
    ///
    /// One line per change, sorted by path: `+ PATH` created, `- PATH`
    /// deleted, `R FROM TO` renamed, `L PATH` a hard link gained, `U PATH`
    /// one lost, `M PATH WHAT` modified (WHAT from data, mode, owner,
    /// xattrs, flags, mtime, target, rdev; data only when the bytes
    /// differ, not when only the extent layout did; flags: the inode flags
    /// chattr sets, such as immutable, append-only, nodump, nocow and
    /// compression), tab-separated, names escaped as rdump escapes them.
    /// Without -p every inode is listed as created.
    /// It reads what an incremental send would read, and no unchanged data.
    #[arg(long, conflicts_with_all = ["verify", "dry_run", "file", "resume", "parent_from", "clone_src", "list"])]
    changes: bool,

    /// Compare SUBVOL with a copy of it in DIR (a receive on any
    /// filesystem, an rsync copy, a restore) instead of sending
    ///
    /// One line per difference, sorted by path: `- PATH` missing from the
    /// copy, `+ PATH` extra in the copy, `M PATH WHAT` differs (WHAT from
    /// data, type, mode, owner, xattrs, flags, mtime, target, rdev, links).
    /// Data is compared byte for byte: where the snapshot's checksums cover
    /// a block, only the copy's block is read and hashed. Inode flags
    /// (chattr) count only where the copy's filesystem can hold them. The
    /// copy is only read (never written, symlinks never followed). Exit
    /// code 0 when identical, 1 when the copy differs or on an error.
    /// SUBVOL may be a bookmark (--write-bookmark), of a snapshot perhaps
    /// deleted since: no device is read, and files' data, which a bookmark
    /// does not hold, is compared by size (inline data byte for byte).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["dry_run", "file", "resume", "parent_from", "clone_src", "parent", "parent_id", "list"])]
    verify: Option<PathBuf>,

    /// With --verify: neither compare nor list these kinds of difference
    /// (comma-separated, repeatable)
    ///
    /// KIND is a WHAT of --verify (data, type, mode, owner, xattrs, flags,
    /// mtime, target, rdev, links), `missing` or `extra`. `--ignore links`
    /// for a copy made by `rreceive --link`: its unchanged files are hard
    /// links shared with the copy it was made from, so their link counts
    /// differ. `--ignore flags` for a copy made by a receive (a stream
    /// carries a file's inode flags only when they change in an
    /// incremental one, and `btrfs receive` drops even those), rsync or cp.
    #[arg(
        long,
        value_name = "KIND[,KIND...]",
        value_delimiter = ',',
        requires = "verify",
        conflicts_with = "changes",
        value_parser = clap::builder::PossibleValuesParser::new(rsend::verify::Ignore::KINDS),
        hide_possible_values = true
    )]
    ignore: Vec<String>,

    /// With --list, --changes or --verify: one JSON object per line
    ///
    /// --list --json prints one object per subvolume: id, gen, cgen (its
    /// ctransid), parent, top_level, parent_uuid, received_uuid, uuid (null
    /// when nil), readonly and path (a string, or {"hex": ...} when not
    /// UTF-8).
    #[arg(long)]
    json: bool,

    /// Debugging aid: write the file PATH of subvolume SUBVOL to stdout
    #[arg(long, num_args = 2, value_names = ["SUBVOL", "PATH"], hide = true)]
    cat_file: Option<Vec<String>>,

    /// Select a subvolume by id (repeatable; sent after the SUBVOL paths)
    #[arg(long, value_name = "ID")]
    subvolid: Vec<u64>,

    /// Subvolumes to send: a path on a mounted btrfs (`/mnt/pool/snaps/tue`),
    /// or with -d a path from the top level (`snaps/tue`), or a uuid
    ///
    /// Without -d every SUBVOL, PARENT and clone source is a path on the
    /// same mounted btrfs, and its devices are read. With -d they are paths
    /// from the top level of the filesystem on those devices, except an
    /// absolute path on a mounted btrfs, which must then be on that
    /// filesystem.
    #[arg(value_name = "SUBVOL", value_parser = any_path())]
    subvols: Vec<PathBuf>,

    #[command(flatten)]
    extra: rsend_cli::ExtraArgs,
}

/// The help of `-q` and `-v`, which count as for `btrfs send`: the last
/// `-q` silences, each `-v` after it says more (`-q -v` is the default).
struct Said;

impl rsend_cli::VerbosityHelp for Said {
    const QUIET: &'static str = "Print nothing but errors (no \"At subvol\" line, no progress bar)";
    const VERBOSE: &'static str =
        "Also print what each stream holds (a -v after -q undoes it, as for btrfs send)";
}

/// A `--proto` version rsend can send: 0 (the highest a standard btrfs
/// receive takes), or 1 to [`MAX_PROTO`]; any other is a usage error
/// (exit code 2) that lists them.
fn proto_version(s: &str) -> Result<u32, String> {
    use rsend::send::{DEFAULT_HIGHEST_PROTO, MAX_PROTO};
    let valid = format!(
        "rsend sends protocol versions 1 to {MAX_PROTO}, and 0 means {DEFAULT_HIGHEST_PROTO} \
         (the highest a btrfs receive takes without experimental features)"
    );
    match s.parse::<u32>() {
        Ok(v) if v <= MAX_PROTO => Ok(v),
        Ok(v) => Err(format!("protocol version {v} is not supported: {valid}")),
        Err(_) => Err(format!("not a protocol version: {valid}")),
    }
}

/// Any bytes as a path, the empty one too (the top level, with -d).
fn any_path() -> impl TypedValueParser<Value = PathBuf> {
    clap::builder::OsStringValueParser::new().map(PathBuf::from)
}

fn main() -> ExitCode {
    rsend_cli::run("rsend", |a: &Args| &a.extra, run)
}

/// Runs what the command line asks for.
fn run(args: Args) -> Result<(), Failure> {
    // clap's `requires` lets --ignore through beside a flag that conflicts
    // with --verify (--list, -n, -p, ...): it would be ignored silently.
    if !args.ignore.is_empty() && args.verify.is_none() {
        return Err(Args::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--ignore goes with --verify DIR (it names the differences --verify leaves out); \
                 without --verify it does nothing",
            )
            .into());
    }
    if let (Some(dir), [bm]) = (&args.verify, &args.subvols[..]) {
        if rsend::bookmark::Bookmark::sniff(bm) {
            // The bookmark holds the tree: no device is read.
            return match compare::verify_bookmark(&compare_args(&args, Vec::new()), bm, dir)? {
                true => Ok(()),
                false => Err(Failure::Said(1)),
            };
        }
    }
    for p in args.subvols.iter().chain(&args.clone_src) {
        if rsend::bookmark::Bookmark::sniff(p) {
            return Err(Failure::Error(anyhow::anyhow!(
                "{} is a bookmark, not a snapshot: a bookmark can only be the parent \
                 (--parent-bookmark, or -p); it holds no file data to send or clone from",
                p.display()
            )));
        }
    }
    // -p naming a file names a bookmark; a snapshot is a directory.
    let bookmark = bookmark_named(&args);
    if args.parent_any && args.parent_from.is_none() && bookmark.is_none() {
        return Err(Args::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--parent-any goes with --parent-from FILE or a bookmark as the parent \
                 (--parent-bookmark FILE)",
            )
            .into());
    }
    let parent = args.parent.clone().filter(|_| bookmark.is_none());
    if args.write_bookmark.is_some() && args.subvols.len() + args.subvolid.len() > 1 {
        return Err(Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--write-bookmark FILE bookmarks one SUBVOL (--bookmarks DIR takes several)",
            )
            .into());
    }
    let named = named::resolve(
        &args.devices,
        &args.subvols,
        parent.as_ref(),
        &args.clone_src,
    )?;
    if named.devices.is_empty() {
        return Err(named::no_device());
    }
    run_on(&args, named, bookmark).map_err(|f| match f {
        Failure::Error(e) if !args.devices.is_empty() => Failure::Error(named::hint_top_level(e)),
        f => f,
    })
}

/// What `--changes` and `--verify` are asked, read from `devices`
/// (without the snapshot and its parent).
fn compare_args(args: &Args, devices: Vec<PathBuf>) -> CompareArgs {
    CompareArgs {
        devices,
        parent_any: args.parent_any,
        json: args.json,
        quiet: args.verbosity.quiet(),
        ignore: args.ignore.iter().fold(Ignore::default(), |mut i, k| {
            // clap lets only the names of Ignore::KINDS through.
            i.add(k);
            i
        }),
        ..CompareArgs::default()
    }
}

/// The parent's bookmark file: `--parent-bookmark FILE`, or `-p` naming a
/// file (a snapshot is a directory).
fn bookmark_named(args: &Args) -> Option<PathBuf> {
    match (&args.parent, &args.parent_bookmark) {
        (_, Some(b)) => Some(b.clone()),
        (Some(p), None) if std::fs::metadata(p).is_ok_and(|m| m.is_file()) => Some(p.clone()),
        _ => None,
    }
}

/// Runs what the command line asks for on the subvolumes `named` resolved.
/// `bookmark`: the parent's bookmark file (`--parent-bookmark`, or `-p`
/// naming a file).
fn run_on(args: &Args, named: Named, bookmark: Option<PathBuf>) -> Result<(), Failure> {
    let devices = named.devices;
    let parent = named.parent.or(args.parent_id.map(SubvolSelector::Id));
    if args.list {
        let stdout = std::io::stdout();
        fs::list(&devices, args.json, &mut stdout.lock())?;
    } else if let Some(cat) = &args.cat_file {
        let sel = match args.subvolid.first() {
            Some(id) => SubvolSelector::Id(*id),
            None => SubvolSelector::Path(cat[0].clone().into()),
        };
        let stdout = std::io::stdout();
        fs::cat_file(&devices, &sel, &cat[1], &mut stdout.lock())?;
    } else if args.changes || args.verify.is_some() {
        let subvol = match (&named.subvols[..], &args.subvolid[..]) {
            ([p], []) => p.clone(),
            ([], [id]) => SubvolSelector::Id(*id),
            _ => {
                return Err(Args::command()
                    .error(
                        clap::error::ErrorKind::WrongNumberOfValues,
                        "--changes and --verify take exactly one SUBVOL (or --subvolid ID)",
                    )
                    .into())
            }
        };
        let c = CompareArgs {
            subvol: Some(subvol),
            parent,
            bookmark,
            ..compare_args(args, devices)
        };
        match &args.verify {
            // The copy differs: the listing said how.
            Some(dir) => {
                if !compare::verify(&c, dir)? {
                    return Err(Failure::Said(1));
                }
            }
            None => compare::changes(&c)?,
        }
    } else {
        if args.json {
            return Err(Args::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "--json goes with --list, --changes or --verify",
                )
                .into());
        }
        if named.subvols.is_empty() && args.subvolid.is_empty() {
            return Err(Args::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "give at least one SUBVOL (or --subvolid ID) to send, or --list",
                )
                .into());
        }
        let subvols = named
            .subvols
            .into_iter()
            .chain(args.subvolid.iter().map(|id| SubvolSelector::Id(*id)))
            .collect();
        let resume = match args.resume.as_deref().map(str::parse) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                return Err(Args::command()
                    .error(
                        clap::error::ErrorKind::ValueValidation,
                        format!("--resume: {e}"),
                    )
                    .into())
            }
        };
        let sent = send::send(&SendArgs {
            devices,
            subvols,
            labels: args
                .subvols
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            output: args.file.clone(),
            quiet: args.verbosity.quiet(),
            verbose: args.verbosity.verbose(),
            // As btrfs send: --compressed-data alone means version 2.
            proto: args
                .proto
                .unwrap_or(if args.compressed_data { 2 } else { 1 }),
            compressed: args.compressed_data,
            no_data: args.no_data,
            parent,
            clone_srcs: named.clone_srcs,
            proto_given: args.proto.is_some(),
            dry_run: args.dry_run,
            resume,
            parent_from: args.parent_from.clone(),
            parent_any: args.parent_any,
            parent_bookmark: bookmark,
            write_bookmark: args.write_bookmark.clone(),
            bookmarks: args.bookmarks.clone(),
            one_stream: args.one_stream,
            mounted: args.devices.is_empty(),
            rescue: args.rescue,
            rescue_report: args.rescue_report.clone(),
        })?;
        if sent == send::Sent::WithLosses {
            return Err(Failure::Said(3));
        }
    }
    Ok(())
}
