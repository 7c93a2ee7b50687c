//! What the `rsend` binary does, as library calls: it parses flags and calls one of these.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::Context;
use btrfs_stream::resume::Token;
use btrfs_stream::Writer;

use crate::progress::{totals, Progress};
use crate::send::{check_parent, find_sendable, label, related, send_with, SendOptions};
use btrfs_disk::fs::Filesystem;
use btrfs_disk::subvol::Subvolume;
pub use btrfs_disk::SubvolSelector;

/// Prints the subvolumes of the filesystem on `devices` as
/// `btrfs subvolume list -p -u -q -R` does.
pub fn list(devices: &[PathBuf], out: &mut dyn Write) -> anyhow::Result<()> {
    let fs = Filesystem::open(devices)?;
    out.write_all(fs.list_text()?.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes the contents of the file at `path` in subvolume `sel` to `out`
/// (a debugging and benchmarking aid); returns the bytes written.
pub fn cat_file(
    devices: &[PathBuf],
    sel: &SubvolSelector,
    path: &str,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let fs = Filesystem::open(devices)?;
    let sv = fs.find_subvolume(sel)?;
    let ino = fs.lookup_path(&sv, path)?;
    let tree = fs.fs_tree(&sv);
    let inode = fs.inode_in(&tree, ino)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut off = 0u64;
    loop {
        let n = fs
            .read_file_in(&tree, &inode, off, &mut buf)
            .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
    }
    out.flush()?;
    Ok(off)
}

/// Tree block cache of a send.
const SEND_CACHE_BYTES: usize = 64 << 20;
/// Tree block cache of `--changes` and `--verify`. They read each block
/// about once, so blocks are rarely found in a cache; a small one lets the
/// memory of old blocks be reused for new ones instead of faulting in fresh
/// pages: measured 30 % faster (100 changes in 100k files) and 10 MiB of
/// RSS instead of 74 on a /usr verify, at equal speed.
const COMPARE_CACHE_BYTES: usize = 1 << 20;

/// What `rsend SUBVOL...` is asked to do.
#[derive(Clone, Debug, Default)]
pub struct SendArgs {
    /// Devices or image files of the filesystem.
    pub devices: Vec<PathBuf>,
    /// Subvolumes to send, in order; one stream each, concatenated.
    pub subvols: Vec<SubvolSelector>,
    /// Output file; standard output when `None`.
    pub output: Option<PathBuf>,
    /// Print nothing but errors.
    pub quiet: bool,
    /// Also print what each stream holds.
    pub verbose: u8,
    /// Protocol version (0 = the highest a standard btrfs-progs receives, 2).
    pub proto: u32,
    /// Compressed extents as stored (ENCODED_WRITE, v2 and later).
    pub compressed: bool,
    /// UPDATE_EXTENT instead of file data (`btrfs send --no-data`).
    pub no_data: bool,
    /// The parent of an incremental send (`-p` / `--parent-id`).
    pub parent: Option<SubvolSelector>,
    /// Clone sources (`-c`); without a parent they choose one.
    pub clone_srcs: Vec<SubvolSelector>,
    /// Whether `proto` was asked for (`--proto`), not a default.
    pub proto_given: bool,
    /// Measure the stream instead of writing it (`-n`).
    pub dry_run: bool,
    /// Continue a stream a receive stopped in (`--resume`).
    pub resume: Option<Token>,
    /// Pick the parent from what a destination holds (`--parent-from`):
    /// the `rreceive --list` output in this file (`-`: standard input).
    pub parent_from: Option<PathBuf>,
    /// With `parent_from`: pick the newest snapshot the destination holds
    /// of any subvolume, not only of the one sent (`--parent-any`).
    pub parent_any: bool,
}

/// One subvolume a destination holds, as `rreceive --list` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The uuid it was received as.
    pub uuid: uuid::Uuid,
    /// Whether its receive finished.
    pub complete: bool,
}

/// What `--parent-from` says when the list does not end with the end
/// line `rreceive --list` prints last.
const CUT_LIST: &str = "the destination's listing is missing or cut short (no end line from \
     rreceive --list";
/// ... and what it does then.
const NOT_SENDING: &str = "not sending, to avoid a full send by mistake";

/// The end line of `rreceive --list`: `# end of list: N subvolumes` (no
/// tab: a subvolume's line always has four) or, with `--json`,
/// `{"end":true,"subvolumes":N}`. `None` when `line` is not one; an error
/// when it starts like one and is not.
fn end_line(line: &str, bad: &dyn Fn() -> anyhow::Error) -> anyhow::Result<Option<u64>> {
    if let Some(rest) = line.strip_prefix("# end of list: ") {
        if line.contains('\t') {
            return Ok(None);
        }
        let n = rest
            .strip_suffix(" subvolumes")
            .or_else(|| rest.strip_suffix(" subvolume"))
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        return Ok(Some(n));
    }
    if !line.trim_start().starts_with('{') {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
    if v.get("end").is_none() {
        return Ok(None);
    }
    match (v["end"].as_bool(), v["subvolumes"].as_u64()) {
        (Some(true), Some(n)) => Ok(Some(n)),
        _ => Err(bad()),
    }
}

/// Reads `rreceive --list` output (text or `--json`), which must end with
/// the end line rreceive prints last, counting the subvolumes above it:
/// a list without it (empty, or cut short by a dropped connection) or
/// whose count disagrees is an error, so that a lost list never turns
/// into a full send. Lines it cannot read are an error naming the line.
pub fn parse_list(text: &str) -> anyhow::Result<Vec<Held>> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let bad_line = |n: usize, line: &str| {
        anyhow::anyhow!(
            "line {} of the list is not what rreceive --list prints: {line:?}",
            n + 1
        )
    };
    let Some((&(last_n, last), body)) = lines.split_last() else {
        anyhow::bail!("{CUT_LIST}; the list is empty): {NOT_SENDING}");
    };
    let Some(count) = end_line(last, &|| bad_line(last_n, last))? else {
        anyhow::bail!(
            "{CUT_LIST}; it stops at line {}): {NOT_SENDING}",
            last_n + 1
        );
    };
    let mut out = Vec::new();
    for &(n, line) in body {
        let bad = || bad_line(n, line);
        if end_line(line, &bad)?.is_some() {
            anyhow::bail!(
                "the destination's listing goes on after its end line (line {} of {}): \
                 {NOT_SENDING}",
                n + 1,
                last_n + 1
            );
        }
        let held = if line.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
            Held {
                uuid: v["received_uuid"]
                    .as_str()
                    .and_then(|u| uuid::Uuid::parse_str(u).ok())
                    .ok_or_else(bad)?,
                complete: v["complete"].as_bool().ok_or_else(bad)?,
            }
        } else {
            // NAME UUID CTRANSID PARENT STATE, tab-separated; the name
            // (escaped) comes first, so read from the right.
            let f: Vec<&str> = line.rsplitn(5, '\t').collect();
            if f.len() != 5 {
                return Err(bad());
            }
            Held {
                uuid: uuid::Uuid::parse_str(f[3]).map_err(|_| bad())?,
                complete: match f[0] {
                    "complete" => true,
                    "incomplete" | "resumable" => false,
                    _ => return Err(bad()),
                },
            }
        };
        out.push(held);
    }
    if count != out.len() as u64 {
        anyhow::bail!(
            "the destination's listing is cut short: its end line (line {}) counts {count} \
             subvolumes and {} are listed: {NOT_SENDING}",
            last_n + 1,
            out.len()
        );
    }
    Ok(out)
}

/// How a parent `--parent-from` picked is related to the snapshot sent.
fn kinship(sv: &Subvolume, p: &Subvolume) -> &'static str {
    let origin = sv.parent_uuid;
    if !origin.is_nil() && (p.parent_uuid == origin || p.uuid == origin) {
        "of the same subvolume"
    } else {
        "of the same lineage (linked by snapshots and receives)"
    }
}

/// The parent `--parent-from` picks for `sv`: among the read-only
/// snapshots that the destination holds complete, other than `sv`, the
/// newest (by ctransid, then id) that is of `sv`'s lineage and older than
/// it; with `any`, the newest of them all.
fn parent_from_list(
    fs: &Filesystem,
    sv: &Subvolume,
    path: &std::path::Path,
    any: bool,
    quiet: bool,
) -> anyhow::Result<Option<Subvolume>> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut s)
            .context("reading the destination's list from standard input")?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "--parent-from {}: {} (give the output of rreceive --list DEST, or - for standard input)",
                path.display(),
                rsend_cli::plain_io(&e)
            )
        })?
    };
    let held = parse_list(&text)?;
    let complete: std::collections::HashSet<uuid::Uuid> =
        held.iter().filter(|h| h.complete).map(|h| h.uuid).collect();
    let own = crate::send::stream_uuid_of(sv);
    if complete.contains(&own) {
        anyhow::bail!(
            "the destination already holds {} complete (received uuid {own}): there is nothing to send",
            label(sv)
        );
    }
    let all = fs.subvolumes()?;
    let there: Vec<&Subvolume> = all
        .iter()
        .filter(|c| c.id != sv.id && c.is_readonly() && !c.is_dead())
        .filter(|c| complete.contains(&crate::send::stream_uuid_of(c)))
        .collect();
    let newest = |c: &&&Subvolume| (c.ctransid, c.id);
    let listed = held.len();
    // What is said: why this parent, or why a full send, and "(N listed
    // there; more)".
    let said = |p: &Subvolume, why: String, more: &str| {
        if !quiet {
            eprintln!(
                "rsend: parent {} (subvolume {}, uuid {}): {why} ({listed} listed there{more})",
                p.path_lossy(),
                p.id,
                crate::send::stream_uuid_of(p),
            );
        }
    };
    let full = |why: String, more: String| {
        if !quiet {
            eprintln!(
                "rsend: {why} ({listed} listed there{more}): sending {} in full",
                label(sv)
            );
        }
    };
    if there.is_empty() {
        full(
            "the destination holds none of this filesystem's snapshots complete".into(),
            String::new(),
        );
        return Ok(None);
    }
    if any {
        let best = there.iter().max_by_key(newest).map(|p| (*p).clone());
        if let Some(p) = &best {
            said(
                p,
                "the newest of this filesystem's snapshots the destination holds complete, \
                 of any subvolume"
                    .into(),
                "; --parent-any",
            );
        }
        return Ok(best);
    }
    let lineage = crate::lineage::Lineage::of(sv, &all);
    let kin: Vec<&&Subvolume> = there.iter().filter(|c| lineage.contains(c)).collect();
    let older = kin
        .iter()
        .filter(|c| (c.ctransid, c.id) < (sv.ctransid, sv.id))
        .max_by_key(|c| (c.ctransid, c.id));
    match older {
        Some(p) => {
            said(
                p,
                format!(
                    "{} as {}, the newest older snapshot the destination holds complete",
                    kinship(sv, p),
                    sv.path_lossy()
                ),
                "",
            );
            Ok(Some((**p).clone()))
        }
        None if kin.is_empty() => {
            full(
                format!(
                    "the destination holds no snapshot of the same subvolume as {} complete",
                    sv.path_lossy()
                ),
                format!(
                    "; {} of other subvolumes, which --parent-any would take",
                    there.len()
                ),
            );
            Ok(None)
        }
        None => {
            full(
                format!(
                    "the destination holds no older snapshot of the same subvolume as {} complete",
                    sv.path_lossy()
                ),
                format!("; {} newer ones", kin.len()),
            );
            Ok(None)
        }
    }
}

/// The snapshot and parent a resumed send continues: `sv` must be the
/// token's, and so must the parent (found by its uuid when not given).
fn check_resume(
    fs: &Filesystem,
    sv: &Subvolume,
    parent: Option<Subvolume>,
    t: &Token,
) -> anyhow::Result<Option<Subvolume>> {
    let own = crate::send::stream_uuid_of(sv);
    if own != t.uuid || sv.ctransid != t.ctransid {
        anyhow::bail!(
            "cannot resume: the token is for the snapshot with uuid {} (ctransid {}), and {} has uuid {own} (ctransid {})",
            t.uuid,
            t.ctransid,
            label(sv),
            sv.ctransid
        );
    }
    match (t.parent, parent) {
        (None, None) => Ok(None),
        (None, Some(p)) => anyhow::bail!(
            "cannot resume: the stream received before was a full one, and -p {} asks for an incremental one",
            label(&p)
        ),
        (Some((pu, pc)), Some(p)) => {
            let u = crate::send::stream_uuid_of(&p);
            if u != pu || p.ctransid != pc {
                anyhow::bail!(
                    "cannot resume: the stream received before was against the parent with uuid {pu} (ctransid {pc}), and -p {} has uuid {u} (ctransid {})",
                    label(&p),
                    p.ctransid
                );
            }
            Ok(Some(p))
        }
        (Some((pu, pc)), None) => {
            let p = find_parent(fs, &SubvolSelector::Uuid(pu)).with_context(|| {
                format!("cannot resume: the parent of the stream received before (uuid {pu})")
            })?;
            if p.ctransid != pc {
                anyhow::bail!(
                    "cannot resume: the parent {} has ctransid {}, and the stream received before had {pc}",
                    label(&p),
                    p.ctransid
                );
            }
            Ok(Some(p))
        }
    }
}

/// Finds the parent `sel` and checks that it can be one (read-only, alive).
fn find_parent(fs: &Filesystem, sel: &SubvolSelector) -> anyhow::Result<Subvolume> {
    find_source(fs, sel, "parent")
}

/// Finds `sel`, a parent or (`role`) clone source, and checks that it can
/// be one (read-only, alive, not the top level).
fn find_source(fs: &Filesystem, sel: &SubvolSelector, role: &str) -> anyhow::Result<Subvolume> {
    // A parent may be named by its uuid (or received uuid) too.
    let by_uuid = match sel {
        SubvolSelector::Path(p) => uuid::Uuid::parse_str(p).ok(),
        _ => None,
    };
    let nil_asked = match sel {
        SubvolSelector::Uuid(u) => u.is_nil(),
        _ => false,
    };
    if nil_asked {
        return Err(nil_uuid(role));
    }
    let found = match (fs.find_subvolume(sel), by_uuid) {
        (Err(btrfs_disk::error::Error::NoSubvolume(_)), Some(u)) if u.is_nil() => {
            return Err(nil_uuid(role));
        }
        (Err(btrfs_disk::error::Error::NoSubvolume(_)), Some(u)) => {
            fs.find_subvolume(&SubvolSelector::Uuid(u)).map_err(|e| match e {
                btrfs_disk::error::Error::NoSubvolume(_) => anyhow::anyhow!(
                    "parent not found: no subvolume of this filesystem (fsid {}) has uuid or received uuid {u}; is the parent on another filesystem?",
                    fs.fsid()
                ),
                other => other.into(),
            })?
        }
        (r, _) => match r {
            Ok(sv) => sv,
            Err(e) => return Err(parent_missing(fs, e)),
        },
    };
    if found.id == btrfs_disk::items::objectid::FS_TREE {
        anyhow::bail!(
            "the top level (subvolume 5) cannot be a {role}: it is not a read-only snapshot; give a read-only snapshot of it (btrfs subvolume snapshot -r MNT MNT/snap)"
        );
    }
    if role == "parent" {
        check_parent(&found)?;
    } else {
        crate::send::check_clone_source(&found)?;
    }
    Ok(found)
}

/// The error for a parent or clone source (`role`) given as the nil uuid,
/// which every subvolume never received has as its received uuid.
fn nil_uuid(role: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{role} {}: the nil uuid names no subvolume (it is the received uuid of every subvolume that was never received); give the {role}'s path, id or uuid",
        uuid::Uuid::nil()
    )
}

/// The error for a parent that is not there, listing the subvolumes that are.
fn parent_missing(fs: &Filesystem, e: btrfs_disk::error::Error) -> anyhow::Error {
    let btrfs_disk::error::Error::NoSubvolume(asked) = e else {
        return e.into();
    };
    let available = match fs.subvolumes() {
        Ok(list) => list
            .iter()
            .map(|s| {
                let ro = if s.is_readonly() { ", read-only" } else { "" };
                format!("{} (id {}{ro})", s.path_lossy(), s.id)
            })
            .collect::<Vec<_>>(),
        Err(e) => return e.into(),
    };
    anyhow::anyhow!(
        "parent not found: this filesystem (fsid {}) has no subvolume {asked}; it has: {}",
        fs.fsid(),
        crate::send::list_or_none(&available)
    )
}

/// btrfs-progs' find_good_parent: among the clone sources, the send
/// root's origin (its parent_uuid), else the snapshot of the same origin
/// closest in ctransid to it; else (where btrfs-progs gives up) the one of
/// its lineage ([`crate::lineage`]: linked by snapshots and receives)
/// closest in ctransid to the send root. Never one of another lineage.
pub fn pick_parent<'a>(
    fs: &Filesystem,
    sv: &Subvolume,
    sources: &'a [Subvolume],
) -> anyhow::Result<&'a Subvolume> {
    let origin = sv.parent_uuid;
    if !origin.is_nil() {
        if let Some(p) = sources.iter().find(|c| c.uuid == origin) {
            return Ok(p);
        }
        let origin_ctransid = match fs.find_subvolume(&SubvolSelector::Uuid(origin)) {
            Ok(o) => o.ctransid,
            Err(btrfs_disk::error::Error::NoSubvolume(_)) => sv.ctransid,
            Err(e) => return Err(e.into()),
        };
        let sibling = sources
            .iter()
            .filter(|c| c.id != sv.id && c.parent_uuid == origin)
            .min_by_key(|c| c.ctransid.abs_diff(origin_ctransid));
        if let Some(p) = sibling {
            return Ok(p);
        }
    }
    let lineage = crate::lineage::Lineage::of(sv, &fs.subvolumes()?);
    sources
        .iter()
        .filter(|c| c.id != sv.id && lineage.contains(c))
        .min_by_key(|c| c.ctransid.abs_diff(sv.ctransid))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "parent determination failed for {}: no clone source is its origin, a snapshot of it or of its lineage (give the parent with -p)",
                label(sv)
            )
        })
}

/// Whether a send stream may go to `f`: never to a terminal.
pub fn refuse_terminal(f: &impl IsTerminal, what: &str) -> anyhow::Result<()> {
    if f.is_terminal() {
        anyhow::bail!(
            "{what} is a terminal; refusing to write a binary send stream to it (use -f FILE or redirect standard output)"
        );
    }
    Ok(())
}

/// Sends every subvolume of `args` as concatenated full streams, as
/// `btrfs send SUBVOL...` does. On error the streams written so far are
/// flushed, the failing one without its END.
pub fn send(args: &SendArgs) -> anyhow::Result<()> {
    let mut proto = args.proto;
    if let Some(t) = &args.resume {
        if args.subvols.len() != 1 {
            anyhow::bail!("--resume continues one stream: give exactly one SUBVOL");
        }
        let asked = if proto == 0 {
            crate::send::DEFAULT_HIGHEST_PROTO
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
    crate::send::check_flavor(&SendOptions {
        proto,
        compressed: args.compressed,
        no_data: args.no_data,
        ..SendOptions::default()
    })?;
    let to_stdout = args.output.as_ref().is_none_or(|p| p.as_os_str() == "-");
    if to_stdout && !args.dry_run {
        refuse_terminal(&std::io::stdout(), "standard output")?;
    }
    let fs = open_fs(&args.devices, args.quiet, SEND_CACHE_BYTES)?;
    let mut svs = Vec::new();
    for sel in &args.subvols {
        svs.push(find_sendable(&fs, sel)?);
    }
    let mut explicit_parent = match &args.parent {
        Some(sel) => Some(find_parent(&fs, sel)?),
        None => None,
    };
    if let Some(t) = &args.resume {
        explicit_parent = check_resume(&fs, &svs[0], explicit_parent, t)?;
    } else if let (Some(list), Some(sv)) = (&args.parent_from, svs.first()) {
        explicit_parent = parent_from_list(&fs, sv, list, args.parent_any, args.quiet)?;
    }
    let mut sources = Vec::new();
    for sel in &args.clone_srcs {
        sources.push(find_source(&fs, sel, "clone source")?);
    }
    if let Some(p) = &explicit_parent {
        sources.push(p.clone());
    }
    // btrfs-progs: with -p or -c every subvolume is sent against a parent
    // (the explicit one first, then one picked among the clone sources,
    // which grow by each subvolume sent); otherwise all are full.
    let incremental = explicit_parent.is_some() || !args.clone_srcs.is_empty();
    let mut parents: Vec<Option<Subvolume>> = Vec::new();
    // The clone sources of each send: the -c ones, the parent, and (as
    // btrfs-progs adds them) the subvolumes sent before it in this run.
    let mut clone_sets: Vec<Vec<Subvolume>> = Vec::new();
    for (i, sv) in svs.iter().enumerate() {
        let p = match (&explicit_parent, i) {
            (Some(p), 0) => Some(p.clone()),
            _ if incremental => Some(pick_parent(&fs, sv, &sources)?.clone()),
            _ => None,
        };
        if let Some(p) = &p {
            if !related(sv, p) && !args.quiet {
                eprintln!(
                    "rsend: warning: parent {} is not related to {} (neither is a snapshot of the other or of the same subvolume); the stream is correct but holds more than the change",
                    label(p),
                    label(sv)
                );
            }
        }
        let mut set = sources.clone();
        set.extend(p.clone());
        clone_sets.push(set);
        parents.push(p);
        if incremental {
            sources.push(sv.clone());
        }
    }
    let file = match &args.output {
        _ if args.dry_run => std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .context("/dev/null")?,
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| {
                    anyhow::anyhow!("cannot write {}: {}", p.display(), rsend_cli::plain_io(&e))
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
    // A failed write names the file (`-f OUT`: its disk may be full).
    let writing = match &args.output {
        Some(p) if p.as_os_str() != "-" && !args.dry_run => {
            format!("writing the stream to {}", p.display())
        }
        _ => "writing the stream".to_string(),
    };
    let output_error =
        |io: &std::io::Error| anyhow::anyhow!("{writing}: {}", rsend_cli::plain_io(io));
    // Small commands are gathered; WRITEs (larger than the buffer) go straight out.
    let mut w = Writer::new(BufWriter::with_capacity(32 << 10, file));
    let show_progress = !args.quiet && !args.dry_run && std::io::stderr().is_terminal();
    let mut total = 0u64;
    for ((sv, parent), clone_srcs) in svs.iter().zip(&parents).zip(&clone_sets) {
        if !args.quiet {
            eprintln!("At subvol {}", sv.path_lossy());
        }
        let progress = show_progress.then(|| Progress::new(&sv.path_lossy()));
        let opts = SendOptions {
            proto,
            compressed: args.compressed,
            no_data: args.no_data,
            progress: progress.clone(),
            no_clones: false,
            dry_run: args.dry_run,
            resume: args.resume.as_ref().map(|t| t.point),
        };
        let started = std::time::Instant::now();
        let retries = fs.retries();
        let r = std::thread::scope(|s| {
            // The totals of a full send come from a metadata-only pre-walk;
            // an incremental one shows what it sent, without a total.
            if let Some(p) = progress.as_ref().filter(|_| parent.is_none()) {
                let fs = &fs;
                s.spawn(move || {
                    if let Ok((bytes, files)) = totals(fs, sv) {
                        p.set_totals(bytes, files);
                    }
                });
            }
            send_with(&fs, sv, parent.as_ref(), clone_srcs, &mut w, &opts)
        });
        if let Some(p) = &progress {
            p.finish();
        }
        match r {
            Ok(stats) => {
                if args.dry_run {
                    total += stats.bytes;
                    let line = format!(
                        "{}\t{} bytes\t{} commands\t{} files\t{} bytes of file data\t{} cloned\t{} compressed",
                        sv.path_lossy(),
                        stats.bytes,
                        stats.commands,
                        stats.files,
                        stats.data_bytes + stats.encoded_file_bytes,
                        stats.cloned_bytes,
                        stats.encoded_bytes
                    );
                    if !table_line(&line)? {
                        return Ok(());
                    }
                }
                if let Some(t) = &args.resume {
                    if !args.quiet {
                        eprintln!(
                            "rsend: resumed {} after command {} (byte {}): {} bytes written",
                            label(sv),
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
                        label(sv),
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
                            label(sv),
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
                    crate::send::SendError::Output(io) => output_error(&io),
                    e => e.into(),
                });
            }
        }
    }
    w.flush().map_err(|e| match e {
        btrfs_stream::WriteError::Io(io) => output_error(&io),
        e => anyhow::Error::new(e).context(writing.clone()),
    })?;
    if args.dry_run {
        table_line(&format!("size\t{total}"))?;
    }
    Ok(())
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

/// What `rsend --changes` and `rsend --verify` are asked to do.
#[derive(Clone, Debug, Default)]
pub struct CompareArgs {
    /// Devices or image files of the filesystem.
    pub devices: Vec<PathBuf>,
    /// The snapshot.
    pub subvol: Option<SubvolSelector>,
    /// The parent to list changes from (`--changes -p`).
    pub parent: Option<SubvolSelector>,
    /// JSON lines instead of text.
    pub json: bool,
    /// Print no progress bar.
    pub quiet: bool,
    /// Kinds of difference `--verify` leaves out (`--ignore`).
    pub ignore: crate::verify::Ignore,
}

/// Opens the filesystem on `devices` for a send, a listing or a verify,
/// with a tree block cache of `cache_bytes`; `quiet` keeps notes (not
/// warnings) off standard error.
fn open_fs(devices: &[PathBuf], quiet: bool, cache_bytes: usize) -> anyhow::Result<Filesystem> {
    // These read the trees once in order; a smaller block cache than the
    // reader's default keeps the peak RSS low at no measurable cost.
    let mut opts = btrfs_disk::fs::Options {
        cache_bytes,
        ..btrfs_disk::fs::Options::default()
    };
    if quiet {
        // Notes (such as "mounted; reading with O_DIRECT") would mail a cron job every night.
        let all = opts.notice.clone();
        opts.notice = std::sync::Arc::new(move |n: &btrfs_disk::Notice| {
            if n.kind != btrfs_disk::NoticeKind::Note {
                all(n);
            }
        });
    }
    Ok(Filesystem::open_with(devices, opts)?)
}

/// Opens the filesystem for a listing or a verify, and finds the snapshot.
fn open_for_compare(args: &CompareArgs) -> anyhow::Result<(Filesystem, Subvolume)> {
    let fs = open_fs(&args.devices, args.quiet, COMPARE_CACHE_BYTES)?;
    let sel = args
        .subvol
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no SUBVOL given"))?;
    let sv = find_any(&fs, sel)?;
    Ok((fs, sv))
}

/// Finds `sel`, any live subvolume (read-only or not, the top level too).
fn find_any(fs: &Filesystem, sel: &SubvolSelector) -> anyhow::Result<Subvolume> {
    let sv = crate::send::find_subvolume(fs, sel)?;
    if sv.is_dead() {
        anyhow::bail!("{} is being deleted", label(&sv));
    }
    Ok(sv)
}

/// Writes the records to standard output; false when it is a closed pipe.
fn print_records(records: &[crate::record::Record], json: bool) -> anyhow::Result<bool> {
    let mut out = BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    match crate::record::write(&mut out, records, json) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing the listing")),
    }
}

/// `rsend --changes`: prints what changed from the parent to the snapshot
/// (every inode as created without a parent).
pub fn changes(args: &CompareArgs) -> anyhow::Result<()> {
    let (fs, sv) = open_for_compare(args)?;
    let parent = match &args.parent {
        Some(sel) => Some(find_any(&fs, sel).context("the parent (-p)")?),
        None => None,
    };
    if let Some(p) = parent.as_ref().filter(|p| !related(&sv, p)) {
        if !args.quiet {
            eprintln!(
                "rsend: warning: parent {} is not related to {} (neither is a snapshot of the other or of the same subvolume); inodes are matched by number and generation, so the listing may show changes that are none",
                label(p),
                label(&sv)
            );
        }
    }
    let records = crate::changes::list_changes(&fs, &sv, parent.as_ref())?;
    print_records(&records, args.json)?;
    Ok(())
}

/// `rsend --verify DIR`: prints how the copy in `dir` differs from the
/// snapshot; true when it is identical. The last line on standard error
/// counts what was compared (unless quiet).
pub fn verify(args: &CompareArgs, dir: &std::path::Path) -> anyhow::Result<bool> {
    let (fs, sv) = open_for_compare(args)?;
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let progress = show_progress.then(|| Progress::new(&format!("verify {}", sv.path_lossy())));
    let r = std::thread::scope(|s| {
        if let Some(p) = progress.as_ref() {
            let (fs, sv) = (&fs, &sv);
            s.spawn(move || {
                if let Ok((bytes, files)) = totals(fs, sv) {
                    p.set_totals(bytes, files);
                }
            });
        }
        crate::verify::verify(&fs, &sv, dir, args.ignore, progress.as_ref())
    });
    if let Some(p) = &progress {
        p.finish();
    }
    let report = r?;
    for note in &report.notes {
        eprintln!("rsend: note: {note}");
    }
    print_records(&report.records, args.json)?;
    if !args.quiet {
        let differ = report.records.len();
        eprintln!(
            "rsend: verified {} against {}: {} paths and {} bytes compared, {}",
            label(&sv),
            dir.display(),
            report.paths,
            report.bytes,
            match differ {
                0 => "identical".to_string(),
                1 => "1 path differs".to_string(),
                n => format!("{n} paths differ"),
            }
        );
    }
    Ok(report.records.is_empty())
}
