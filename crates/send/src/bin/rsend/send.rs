//! `rsend SUBVOL...`: sending streams, or measuring them (`-n`).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use btrfs_disk::rescue::Losses;
use btrfs_disk::subvol::Subvolume;
use btrfs_disk::Filesystem;
use btrfs_disk::SubvolSelector;
use btrfs_stream::resume::Token;
use btrfs_stream::Writer;
use btrfs_text::plain_io;
use rsend::bookmark::{Bookmark, Parent};
use rsend::output::refuse_terminal;
use rsend::plan::{plan, resume_version, Against, Ask, Plan};
use rsend::progress::{NoProgress, Progress};
use rsend::send::{
    check_flavor, find_sendable, send_against, SendError, SendOptions, StreamStats,
    DEFAULT_HIGHEST_PROTO,
};

use crate::bar::{showing, Bar};
use crate::fs::open_fs;
use crate::parents::{plan_error, read_list, Said};

/// Tree block cache of a send.
const SEND_CACHE_BYTES: usize = 16 << 20;

/// What `rsend SUBVOL...` is asked to do.
#[derive(Clone, Debug, Default)]
pub(crate) struct SendArgs {
    /// Devices or image files of the filesystem.
    pub(crate) devices: Vec<PathBuf>,
    /// Subvolumes to send, in order; one stream each, concatenated.
    pub(crate) subvols: Vec<SubvolSelector>,
    /// How the first of `subvols` were named on the command line, for "At
    /// subvol" (btrfs send prints its arguments); the others by their path.
    pub(crate) labels: Vec<String>,
    /// Output file; standard output when `None`.
    pub(crate) output: Option<PathBuf>,
    /// Print nothing but errors.
    pub(crate) quiet: bool,
    /// Also print what each stream holds.
    pub(crate) verbose: u8,
    /// Protocol version (0 = the highest a standard btrfs-progs receives, 2).
    pub(crate) proto: u32,
    /// Compressed extents as stored (ENCODED_WRITE, v2 and later).
    pub(crate) compressed: bool,
    /// UPDATE_EXTENT instead of file data (`btrfs send --no-data`).
    pub(crate) no_data: bool,
    /// The parent of an incremental send (`-p` / `--parent-id`).
    pub(crate) parent: Option<SubvolSelector>,
    /// Clone sources (`-c`); without a parent they choose one.
    pub(crate) clone_srcs: Vec<SubvolSelector>,
    /// The devices are those of the mounted filesystem the paths are on
    /// (no `-d`): that it is mounted goes without saying.
    pub(crate) mounted: bool,
    /// One stream for all subvolumes (`-e`): a header before the first, an
    /// END after the last.
    pub(crate) one_stream: bool,
    /// Whether `proto` was asked for (`--proto`), not a default.
    pub(crate) proto_given: bool,
    /// Measure the stream instead of writing it (`-n`).
    pub(crate) dry_run: bool,
    /// Continue a stream a receive stopped in (`--resume`).
    pub(crate) resume: Option<Token>,
    /// Pick the parent from what a destination holds (`--parent-from`):
    /// the `rreceive --list` output in this file (`-`: standard input).
    pub(crate) parent_from: Option<PathBuf>,
    /// With `parent_from`: pick the newest snapshot the destination holds
    /// of any subvolume, not only of the one sent (`--parent-any`).
    pub(crate) parent_any: bool,
    /// Send what can be read of a damaged filesystem (`--rescue`).
    pub(crate) rescue: bool,
    /// Where the loss report goes, one JSON object per line.
    pub(crate) rescue_report: Option<PathBuf>,
    /// The parent as a bookmark file (`--parent-bookmark`, `-p FILE`).
    pub(crate) parent_bookmark: Option<PathBuf>,
    /// Write a bookmark of the one subvolume sent here (`--write-bookmark`).
    pub(crate) write_bookmark: Option<PathBuf>,
    /// Where bookmarks are kept by uuid (`--bookmarks`).
    pub(crate) bookmarks: Option<PathBuf>,
}

/// How a send ended when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Everything was sent.
    Whole,
    /// A rescue lost something (exit code 3).
    WithLosses,
}

/// Sends every subvolume of `args` as concatenated full streams, as
/// `btrfs send SUBVOL...` does. On error the streams written so far are
/// flushed, the failing one without its END.
pub(crate) fn send(args: &SendArgs) -> anyhow::Result<Sent> {
    let proto = resume_version(
        args.proto,
        args.proto_given,
        args.resume.as_ref(),
        args.subvols.len(),
    )
    .map_err(plan_error)?;
    check_flavor(&SendOptions {
        proto,
        compressed: args.compressed,
        no_data: args.no_data,
        ..SendOptions::default()
    })?;
    let to_stdout = args.output.as_ref().is_none_or(|p| p.as_os_str() == "-");
    if to_stdout && !args.dry_run {
        refuse_terminal(&std::io::stdout(), "standard output")?;
    }
    make_bookmarks_dir(args)?;
    let rescue = args.rescue.then(|| Arc::new(Losses::new()));
    let fs = open_fs(
        &args.devices,
        args.quiet || args.mounted,
        SEND_CACHE_BYTES,
        rescue,
    )?;
    let mut svs = Vec::new();
    for sel in &args.subvols {
        svs.push(find_sendable(&fs, sel).map_err(|e| lost_on_the_way(&fs, e))?);
    }
    if args.dry_run && args.write_bookmark.is_some() {
        // `-n --write-bookmark`: the bookmark alone, no stream measured.
        write_bookmarks(&fs, &svs, args)?;
        return Ok(Sent::Whole);
    }
    let plan = make_plan(&fs, &svs, args)?;
    let mut out = Output::open(args)?;
    let against = match plan {
        Plan::Send(against) => against,
        Plan::Held(own) => {
            let written = send_nothing(&mut out.w, proto, args, &svs[0].label(), own)
                .map_err(|e| out.write_error(e))?;
            if measure(args) {
                table_line(&format!("size\t{written}"))?;
            }
            return Ok(Sent::Whole);
        }
    };
    let Some(total) = send_all(&fs, &svs, &against, args, proto, &mut out)? else {
        return Ok(Sent::Whole);
    };
    out.w.flush().map_err(|e| out.write_error(e))?;
    if measure(args) {
        table_line(&format!("size\t{total}"))?;
    }
    write_bookmarks(&fs, &svs, args)?;
    if args.rescue {
        return rescue_report(&fs, &svs, args);
    }
    Ok(Sent::Whole)
}

/// Makes the `--bookmarks` directory when a send will write there and it
/// is missing (readable by its owner only: a bookmark holds file names
/// and small files' contents), before anything is sent.
fn make_bookmarks_dir(args: &SendArgs) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let Some(dir) = args.bookmarks.as_ref().filter(|_| !args.dry_run) else {
        return Ok(());
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| anyhow::anyhow!("--bookmarks {}: {}", dir.display(), plain_io(&e)))
}

/// Whether the run measures the stream: `-n`, but `--rescue -n` reads
/// everything a send would, and writes nothing.
fn measure(args: &SendArgs) -> bool {
    args.dry_run && !args.rescue
}

/// The plan of the send of `svs` (found already): the parent and clone
/// sources of each, saying what `--parent-from` picked.
fn make_plan(fs: &Filesystem, svs: &[Subvolume], args: &SendArgs) -> anyhow::Result<Plan> {
    let listing = match &args.parent_from {
        Some(path) if args.resume.is_none() && !svs.is_empty() => Some(read_list(path)?),
        _ => None,
    };
    let bookmark = match &args.parent_bookmark {
        Some(path) => Some(Arc::new(Bookmark::open(path)?)),
        None => None,
    };
    let ask = Ask {
        parent: args.parent.as_ref(),
        clone_srcs: &args.clone_srcs,
        resume: args.resume.as_ref(),
        listing: listing.as_deref(),
        parent_any: args.parent_any,
        bookmark: bookmark.as_ref(),
        bookmarks: args.bookmarks.as_deref(),
    };
    let mut said = Said { quiet: args.quiet };
    let plan = plan(fs, svs, &ask, &mut said).map_err(plan_error)?;
    if let (Some(b), false) = (&bookmark, args.quiet) {
        let h = b.header();
        eprintln!(
            "rsend: parent: {} (uuid {}, ctransid {}), read from the bookmark",
            b.label(),
            h.uuid,
            h.ctransid
        );
    }
    Ok(plan)
}

/// Where the stream goes, and how a failed write there is told.
struct Output {
    /// The stream's writer.
    w: Writer<BufWriter<File>>,
    /// What a failed write was doing (`-f OUT`: its disk may be full).
    writing: String,
}

impl Output {
    /// The output `args` ask for: `-f OUT`, standard output, or with `-n`
    /// /dev/null.
    fn open(args: &SendArgs) -> anyhow::Result<Output> {
        let file = match &args.output {
            _ if args.dry_run => OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .context("/dev/null")?,
            Some(p) if p.as_os_str() != "-" => {
                let f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(p)
                    .map_err(|e| {
                        anyhow::anyhow!("cannot write {}: {}", p.display(), plain_io(&e))
                    })?;
                refuse_terminal(&f, &p.display().to_string())?;
                f
            }
            _ => File::from(
                std::io::stdout()
                    .as_fd()
                    .try_clone_to_owned()
                    .context("standard output")?,
            ),
        };
        let writing = match &args.output {
            Some(p) if p.as_os_str() != "-" && !args.dry_run => {
                format!("writing the stream to {}", p.display())
            }
            _ => "writing the stream".to_string(),
        };
        Ok(Output {
            // Small commands are gathered; WRITEs (larger than the buffer) go straight out.
            w: Writer::new(BufWriter::with_capacity(32 << 10, file)),
            writing,
        })
    }

    /// A failed write, naming where.
    fn io_error(&self, io: &std::io::Error) -> anyhow::Error {
        anyhow::anyhow!("{}: {}", self.writing, plain_io(io))
    }

    /// A failed write of the stream's writer, naming where.
    fn write_error(&self, e: btrfs_stream::WriteError) -> anyhow::Error {
        match e {
            btrfs_stream::WriteError::Io(io) => self.io_error(&io),
            e => anyhow::Error::new(e).context(self.writing.clone()),
        }
    }
}

/// Sends each of `svs` against its parent and clone sources, saying so
/// and, with `-n`, printing the table's line of each. The bytes of stream
/// in all; `None` when the table's reader went away (the run ends quietly).
fn send_all(
    fs: &Filesystem,
    svs: &[Subvolume],
    against: &[Against],
    args: &SendArgs,
    proto: u32,
    out: &mut Output,
) -> anyhow::Result<Option<u64>> {
    let show_progress = !args.quiet && !measure(args) && std::io::stderr().is_terminal();
    let mut total = 0u64;
    for (i, (sv, a)) in svs.iter().zip(against).enumerate() {
        // As the argument was given (a mounted path stays one).
        let label = args
            .labels
            .get(i)
            .cloned()
            .unwrap_or_else(|| sv.path_lossy());
        // A dry run's table names each subvolume already.
        if !args.quiet && !args.dry_run {
            eprintln!("At subvol {label}");
        }
        let bar = show_progress.then(|| Arc::new(Bar::new(&sv.path_lossy())));
        let progress: Arc<dyn Progress> = match &bar {
            Some(bar) => bar.clone(),
            None => Arc::new(NoProgress),
        };
        let opts = SendOptions {
            proto,
            compressed: args.compressed,
            no_data: args.no_data,
            progress,
            no_clones: false,
            dry_run: measure(args),
            resume: args.resume.as_ref().map(|t| t.point),
            // -e: one stream for all, its header first and its END last.
            omit_header: args.one_stream && i > 0,
            omit_end: args.one_stream && i + 1 < svs.len(),
        };
        let started = std::time::Instant::now();
        let retries = fs.retries();
        let full = (a.parent.is_none() && a.bookmark.is_none()).then_some((fs, sv));
        let parent = match (&a.bookmark, &a.parent) {
            (Some(b), _) => Some(Parent::Bookmark(b)),
            (None, p) => p.as_ref().map(Parent::Snapshot),
        };
        let r = showing(bar.as_deref(), full, || {
            send_against(fs, sv, parent, &a.clone_srcs, &mut out.w, &opts)
        });
        let stats = match r {
            Ok(stats) => stats,
            Err(e) => {
                // What was written stays; the stream just has no END.
                let _ = out.w.flush();
                return Err(match e {
                    SendError::Output(io) => out.io_error(&io),
                    e => e.into(),
                });
            }
        };
        total += stats.bytes;
        if args.dry_run && !table_line(&table_row(args, &label, &stats))? {
            return Ok(None);
        }
        say_sent(fs, sv, args, &stats, started, retries);
    }
    Ok(Some(total))
}

/// Writes the bookmarks asked for: of the one subvolume sent to
/// `--write-bookmark FILE` (also after a dry run), and of each to
/// `--bookmarks DIR` (not after a dry run: nothing was received).
fn write_bookmarks(fs: &Filesystem, svs: &[Subvolume], args: &SendArgs) -> anyhow::Result<()> {
    // (subvolume, file, whether a failure only warns)
    let mut to: Vec<(&Subvolume, PathBuf, bool)> = Vec::new();
    if let (Some(path), Some(sv)) = (&args.write_bookmark, svs.first()) {
        to.push((sv, path.clone(), false));
    }
    if let (Some(dir), false) = (&args.bookmarks, args.dry_run) {
        for sv in svs {
            let name = rsend::bookmark::file_name(&rsend::send::stream_uuid_of(sv));
            to.push((sv, dir.join(name), true));
        }
    }
    for (sv, path, warn) in to {
        let started = std::time::Instant::now();
        let w = match rsend::bookmark::write(fs, sv, &path) {
            Ok(w) => w,
            // The stream went whole: the night is not lost for want of a bookmark.
            Err(e) if warn => {
                eprintln!(
                    "rsend: warning: {e}; the stream was sent whole, but an incremental \
                     against {} after it is deleted from the source needs its bookmark",
                    sv.label()
                );
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if args.verbose > 0 {
            eprintln!(
                "rsend: bookmark of {} written to {}: {} tree blocks ({} bytes) in {} bytes, {:.2?}",
                sv.label(),
                path.display(),
                w.blocks,
                w.tree_bytes,
                w.bytes,
                started.elapsed()
            );
        }
    }
    Ok(())
}

/// The dry run's line for the subvolume `label`.
fn table_row(args: &SendArgs, label: &str, stats: &StreamStats) -> String {
    let data = stats.data_bytes + stats.encoded_file_bytes;
    if args.rescue {
        return format!(
            "{label}\t{} files\t{data} bytes of file data\t{} bytes of stream",
            stats.files, stats.bytes
        );
    }
    format!(
        "{label}\t{} bytes\t{} commands\t{} files\t{data} bytes of file data\t{} cloned\t{} compressed",
        stats.bytes, stats.commands, stats.files, stats.cloned_bytes, stats.encoded_bytes
    )
}

/// Says on standard error that `sv` was sent: resumed where (`--resume`),
/// and with `-v` what its stream holds (`started`: when, `retries`: the
/// filesystem's re-reads before).
fn say_sent(
    fs: &Filesystem,
    sv: &Subvolume,
    args: &SendArgs,
    stats: &StreamStats,
    started: std::time::Instant,
    retries: u64,
) {
    if let Some(t) = &args.resume {
        if !args.quiet {
            eprintln!(
                "rsend: resumed {} after command {} (byte {}): {} bytes written",
                sv.label(),
                t.point.commands,
                t.point.offset,
                stats.bytes
            );
        }
    }
    if args.verbose == 0 {
        return;
    }
    let encoded = if stats.encoded_writes > 0 {
        format!(
            "; {} of file data sent compressed as {} bytes in {} ENCODED_WRITEs",
            stats.encoded_file_bytes, stats.encoded_bytes, stats.encoded_writes
        )
    } else {
        String::new()
    };
    eprintln!(
        "{}: {} commands, {} bytes ({} of file data in WRITEs; {} cloned in {} CLONEs{encoded}), {} inodes, {} truncates, {} retries in {:.2?}",
        sv.label(),
        stats.commands,
        stats.bytes,
        stats.data_bytes,
        stats.cloned_bytes,
        stats.clones,
        stats.files,
        stats.truncates,
        fs.retries() - retries,
        started.elapsed()
    );
    if fs.retries() > retries {
        eprintln!(
            "{}: the running filesystem rewrote tree blocks during the send; {} lookups were read again from newer commits (generation {} now)",
            sv.label(),
            fs.retries() - retries,
            fs.generation()
        );
    }
}

/// A subvolume a rescue did not find: when tree blocks were lost on the
/// way (the root tree's root and every backup root of it, say), the error
/// names the first of them as a send without `--rescue` does, rather than
/// only a subvolume missing.
fn lost_on_the_way(fs: &Filesystem, e: SendError) -> anyhow::Error {
    let SendError::NoSubvolume { asked, available } = &e else {
        return e.into();
    };
    let lost = fs.rescue().map(|l| l.blocks()).unwrap_or_default();
    let Some(b) = lost.first() else {
        return e.into();
    };
    let more = match lost.len() {
        1 => String::new(),
        n => format!(" (and {} more tree blocks)", n - 1),
    };
    let held = match b.tree {
        btrfs_disk::items::objectid::ROOT_TREE => {
            "; tree 1 is the root tree, which lists the subvolumes"
        }
        _ => "",
    };
    let has = match available.is_empty() {
        true => String::new(),
        false => format!("; the filesystem has: {}", available.join(", ")),
    };
    anyhow::anyhow!(
        "tree block at logical {} (tree {}): {}{more}{held}; no subvolume {asked} was found in \
         what could be read{has}",
        b.logical,
        b.tree,
        b.why
    )
}

/// `--parent-from` found the snapshot (`label`, received as `own`) complete
/// at the destination already: says so (unless `-q`) and writes an empty
/// stream, a header and END with no subvolume, which rreceive and btrfs
/// receive take as nothing sent (exit code 0), so that the pipeline
/// `rreceive --list | rsend --parent-from - | rreceive` succeeds. Returns
/// its size.
fn send_nothing<W: Write>(
    w: &mut Writer<W>,
    proto: u32,
    args: &SendArgs,
    label: &str,
    own: uuid::Uuid,
) -> Result<u64, btrfs_stream::WriteError> {
    if !args.quiet {
        let written = match args.dry_run {
            true => "",
            false => "; an empty stream (no subvolume) is written",
        };
        eprintln!(
            "rsend: the destination already holds {label} complete (received uuid {own}): \
             nothing to send{written}"
        );
    }
    let version = match proto {
        0 => DEFAULT_HIGHEST_PROTO,
        v => v,
    };
    w.start_stream(version)?;
    w.write_command(&btrfs_stream::Command::End {})?;
    w.flush()?;
    Ok(w.bytes_written())
}

/// The loss report of a rescue send: a summary and each loss on standard
/// error (the losses unless `-q`), and with `--rescue-report FILE` one
/// JSON object per loss and line in FILE.
fn rescue_report(fs: &Filesystem, svs: &[Subvolume], args: &SendArgs) -> anyhow::Result<Sent> {
    /// Losses listed on standard error before the rest is only counted.
    const SHOWN: usize = 50;
    let losses = rsend::rescue::report(fs, svs).context("making the loss report")?;
    if let Some(path) = &args.rescue_report {
        let mut text = Vec::new();
        for l in &losses {
            serde_json::to_writer(&mut text, &l.json)?;
            text.push(b'\n');
        }
        std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), plain_io(&e)))?;
    }
    let said = match &args.rescue_report {
        Some(p) => format!("; the report is in {}", p.display()),
        None => String::new(),
    };
    if !(args.quiet && losses.is_empty()) {
        eprintln!("rsend: rescue: {}{said}", rsend::rescue::summary(&losses));
    }
    if !args.quiet {
        for l in losses.iter().take(SHOWN) {
            eprintln!("rsend: lost: {}", l.text);
        }
        if losses.len() > SHOWN {
            eprintln!(
                "rsend: ... and {} more (--rescue-report FILE lists them all)",
                losses.len() - SHOWN
            );
        }
    }
    Ok(if losses.is_empty() {
        Sent::Whole
    } else {
        Sent::WithLosses
    })
}

/// Prints one line of the dry run's table; false when standard output is a
/// closed pipe (`rsend -n ... | head -1`), which ends the dry run quietly.
fn table_line(line: &str) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing the dry run's table")),
    }
}
