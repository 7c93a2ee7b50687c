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
use rsend::output::refuse_terminal;
use rsend::progress::{NoProgress, Progress};
use rsend::send::{
    check_flavor, find_sendable, related, send_with, SendError, SendOptions, DEFAULT_HIGHEST_PROTO,
};

use crate::bar::{showing, Bar};
use crate::fs::open_fs;
use crate::parents::{
    check_resume, find_parent, find_source, parent_from_list, pick_parent, FromList,
};

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
    let mut proto = args.proto;
    if let Some(t) = &args.resume {
        if args.subvols.len() != 1 {
            anyhow::bail!("--resume continues one stream: give exactly one SUBVOL");
        }
        let asked = if proto == 0 {
            DEFAULT_HIGHEST_PROTO
        } else {
            proto
        };
        if args.proto_given && asked != t.version {
            anyhow::bail!(
                "cannot resume: the stream received before is protocol version {}, and --proto {proto} was given",
                t.version
            );
        }
        proto = t.version;
    }
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
    let rescue = args.rescue.then(|| Arc::new(Losses::new()));
    let fs = open_fs(
        &args.devices,
        args.quiet || args.mounted,
        SEND_CACHE_BYTES,
        rescue,
    )?;
    // `--rescue -n` reads everything a send would, and writes nothing.
    let measure = args.dry_run && !args.rescue;
    let mut svs = Vec::new();
    for sel in &args.subvols {
        svs.push(find_sendable(&fs, sel).map_err(|e| lost_on_the_way(&fs, e))?);
    }
    let mut explicit_parent = match &args.parent {
        Some(sel) => Some(find_parent(&fs, sel)?),
        None => None,
    };
    // The destination holds the one snapshot asked for already.
    let mut held = None;
    if let Some(t) = &args.resume {
        explicit_parent = check_resume(&fs, &svs[0], explicit_parent, t)?;
    } else if let (Some(list), Some(sv)) = (&args.parent_from, svs.first()) {
        match parent_from_list(&fs, sv, list, args.parent_any, args.quiet)? {
            FromList::Parent(p) => explicit_parent = p.map(|p| *p),
            FromList::Held(own) if svs.len() == 1 => held = Some((sv.label(), own)),
            FromList::Held(own) => anyhow::bail!(
                "the destination already holds {} complete (received uuid {own}): leave it out \
                 of the SUBVOLs to send",
                sv.label()
            ),
        }
    }
    let mut sources = Vec::new();
    for sel in &args.clone_srcs {
        sources.push(find_source(&fs, sel, "clone source")?);
    }
    if let Some(p) = &explicit_parent {
        sources.push(p.clone());
    }
    // As btrfs send: with -p every subvolume is sent against that parent,
    // the parent and the -c sources its clone sources; with -c alone each
    // one's parent is picked among the clone sources, which grow by each
    // subvolume sent; with neither all are full. A parent that
    // --parent-from picked is the first subvolume's; the others' are picked
    // as with -c.
    let fixed = args.parent.is_some();
    let incremental = explicit_parent.is_some() || !args.clone_srcs.is_empty();
    let mut parents: Vec<Option<Subvolume>> = Vec::new();
    let mut clone_sets: Vec<Vec<Subvolume>> = Vec::new();
    for (i, sv) in svs.iter().enumerate() {
        let p = match (&explicit_parent, i) {
            (Some(p), _) if fixed => Some(p.clone()),
            (Some(p), 0) => Some(p.clone()),
            _ if incremental => Some(pick_parent(&fs, sv, &sources)?.clone()),
            _ => None,
        };
        if let Some(p) = &p {
            if !related(sv, p) && !args.quiet {
                eprintln!(
                    "rsend: warning: parent {} is not related to {} (neither is a snapshot of the other or of the same subvolume); the stream is correct but holds more than the change",
                    p.label(),
                    sv.label()
                );
            }
        }
        let mut set = sources.clone();
        if let Some(p) = p.as_ref().filter(|p| !set.iter().any(|c| c.id == p.id)) {
            set.push(p.clone());
        }
        clone_sets.push(set);
        parents.push(p);
        if incremental && !fixed {
            sources.push(sv.clone());
        }
    }
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
                .map_err(|e| anyhow::anyhow!("cannot write {}: {}", p.display(), plain_io(&e)))?;
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
    // A failed write names the file (`-f OUT`: its disk may be full).
    let writing = match &args.output {
        Some(p) if p.as_os_str() != "-" && !args.dry_run => {
            format!("writing the stream to {}", p.display())
        }
        _ => "writing the stream".to_string(),
    };
    let output_error = |io: &std::io::Error| anyhow::anyhow!("{writing}: {}", plain_io(io));
    // Small commands are gathered; WRITEs (larger than the buffer) go straight out.
    let mut w = Writer::new(BufWriter::with_capacity(32 << 10, file));
    if let Some((label, own)) = held {
        let written = send_nothing(&mut w, proto, args, &label, own).map_err(|e| match e {
            btrfs_stream::WriteError::Io(io) => output_error(&io),
            e => anyhow::Error::new(e).context(writing.clone()),
        })?;
        if measure {
            table_line(&format!("size\t{written}"))?;
        }
        return Ok(Sent::Whole);
    }
    let show_progress = !args.quiet && !measure && std::io::stderr().is_terminal();
    let mut total = 0u64;
    for (i, ((sv, parent), clone_srcs)) in svs.iter().zip(&parents).zip(&clone_sets).enumerate() {
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
            dry_run: measure,
            resume: args.resume.as_ref().map(|t| t.point),
            // -e: one stream for all, its header first and its END last.
            omit_header: args.one_stream && i > 0,
            omit_end: args.one_stream && i + 1 < svs.len(),
        };
        let started = std::time::Instant::now();
        let retries = fs.retries();
        let full = parent.is_none().then_some((&fs, sv));
        let r = showing(bar.as_deref(), full, || {
            send_with(&fs, sv, parent.as_ref(), clone_srcs, &mut w, &opts)
        });
        match r {
            Ok(stats) => {
                if args.dry_run && args.rescue {
                    let line = format!(
                        "{label}\t{} files\t{} bytes of file data\t{} bytes of stream",
                        stats.files,
                        stats.data_bytes + stats.encoded_file_bytes,
                        stats.bytes
                    );
                    if !table_line(&line)? {
                        return Ok(Sent::Whole);
                    }
                } else if args.dry_run {
                    total += stats.bytes;
                    let line = format!(
                        "{label}\t{} bytes\t{} commands\t{} files\t{} bytes of file data\t{} cloned\t{} compressed",
                        stats.bytes,
                        stats.commands,
                        stats.files,
                        stats.data_bytes + stats.encoded_file_bytes,
                        stats.cloned_bytes,
                        stats.encoded_bytes
                    );
                    if !table_line(&line)? {
                        return Ok(Sent::Whole);
                    }
                }
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
                if args.verbose > 0 {
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
            }
            Err(e) => {
                // What was written stays; the stream just has no END.
                let _ = w.flush();
                return Err(match e {
                    SendError::Output(io) => output_error(&io),
                    e => e.into(),
                });
            }
        }
    }
    w.flush().map_err(|e| match e {
        btrfs_stream::WriteError::Io(io) => output_error(&io),
        e => anyhow::Error::new(e).context(writing.clone()),
    })?;
    if measure {
        table_line(&format!("size\t{total}"))?;
    }
    if args.rescue {
        return rescue_report(&fs, &svs, args);
    }
    Ok(Sent::Whole)
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
