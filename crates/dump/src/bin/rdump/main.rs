//! `rdump`: print a btrfs send stream.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use btrfs_text::plain_io;
use clap::Parser;
use rdump::chains::{self, Night, Report, Skipped};
use rdump::{buffered, dump_input, DumpError, Input, JsonDump, Streams, Summary, TextDump};
use rsend_cli::Failure;

/// The end of `-h`: where the rest is.
const SHORT_HELP: &str = "More: `rdump --help` (examples, exit status), `man rdump`,\n\
                          the guide /usr/share/doc/rdump/rdump.md (docs/rdump.md in the source)";

/// Real jobs, what the exit codes mean and where to read more: the end of
/// `--help`, and the EXAMPLES, EXIT STATUS and SEE ALSO of the man page.
const AFTER_HELP: &str = "\
Examples:
  Inspect a stream file, one line per command as `btrfs receive --dump` prints:
    rdump backup.stream

  What an incremental backup would send, without sending it anywhere:
    rsend -d /dev/sdb -p snaps/mon snaps/tue | rdump --summary

  The files a stream writes data to, from the JSON lines:
    rdump --json backup.stream | jq -c 'select(.command == \"write\") | .path' | sort -u

  A zstd-compressed stream is read as it is (told by its first bytes):
    rdump --summary backup.stream.zst

  Whether a directory of nightly streams (full and incremental, plain or zstd) makes
  whole chains, with nothing missing or broken:
    rdump --chains /srv/backup/streams

  The same as one JSON document; its errors, one a line:
    rdump --chains --json /srv/backup/streams | jq -r '.problems[] | select(.error) | .message'

Exit status:
  0  the stream was printed whole; with --chains: every file is a whole stream and every
     chain starts with a full stream
  1  an error: the stream is malformed, cut short or cannot be read (the message gives
     the byte offset and command number), or standard output cannot be written; with
     --chains: a problem the report lists (a missing link, a broken stream, ...)
  2  the command line is wrong

See also:
  rsend(1), rreceive(1), btrfs-receive(8) (--dump)
  The guide: /usr/share/doc/rdump/rdump.md (installed), docs/rdump.md (source); recipes in recipes.md beside it";

/// Print a btrfs send stream as `btrfs receive --dump` does, as JSON lines,
/// or as a summary; or tell which streams of a pile of files follow which.
#[derive(Parser)]
#[command(name = "rdump", version, after_help = SHORT_HELP, after_long_help = AFTER_HELP)]
struct Args {
    /// One JSON object per command per line; with --chains, one JSON document.
    #[arg(long, conflicts_with = "summary")]
    json: bool,
    /// A table of counts, sizes and subvolume identities.
    #[arg(long)]
    summary: bool,
    /// Continue through every concatenated stream instead of stopping at the
    /// first END as `btrfs receive --dump` does.
    #[arg(short = 'a', long)]
    all_streams: bool,
    /// Group the streams of every FILE (a directory: its files) into chains
    /// of full and incremental streams; report missing links, duplicates,
    /// branches and broken streams.
    #[arg(long, conflicts_with_all = ["summary", "all_streams"])]
    chains: bool,
    /// Stream file (zstd-compressed or not); standard input when absent or
    /// "-". With --chains: stream files, directories of them, "-".
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    extra: rsend_cli::ExtraArgs,
}

fn main() -> ExitCode {
    rsend_cli::run("rdump", |a: &Args| &a.extra, run)
}

/// What to say when standard input is a terminal.
const STDIN_HINT: &str = "pipe one in (rsend ... | rdump) or name a stream file (rdump FILE)";

/// Standard input as a stream.
fn stdin() -> Result<Input, Failure> {
    rsend_cli::stream_from_stdin(STDIN_HINT)?;
    Input::stdin().map_err(|e| Failure::msg(format!("cannot read standard input: {e}")))
}

/// Prints the stream the command line names, or the chains.
fn run(args: Args) -> Result<(), Failure> {
    if args.chains {
        return chains(&args);
    }
    if args.files.len() > 1 {
        return Err(Failure::Usage(
            "one FILE at a time (several with --chains)".to_owned(),
        ));
    }
    let input = match args.files.first().map(PathBuf::as_path) {
        None => stdin()?,
        Some(p) if p.as_os_str() == "-" => stdin()?,
        Some(p) => {
            Input::open(p).map_err(|e| Failure::msg(format!("cannot open {}: {e}", p.display())))?
        }
    };
    let out = buffered(io::stdout().lock());
    let streams = if args.all_streams {
        Streams::All
    } else {
        Streams::First
    };
    let res = if args.json {
        dump_input(input, &mut JsonDump::new(out), streams)
    } else if args.summary {
        dump_input(input, &mut Summary::new(out), streams)
    } else {
        dump_input(input, &mut TextDump::new(out), streams)
    };
    match res {
        Ok(()) => Ok(()),
        // A closed pipe (`rdump | head`) is not an error worth reporting.
        Err(DumpError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::msg(e)),
    }
}

/// `--chains`: reads every stream of the files named, groups them into
/// chains and prints the report; exit code 1 when it lists an error.
fn chains(args: &Args) -> Result<(), Failure> {
    if args.files.is_empty() {
        return Err(Failure::Usage(
            "--chains needs stream files, directories of them, or - (standard input)".to_owned(),
        ));
    }
    if args.files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
        return Err(Failure::Usage(
            "standard input (-) can be named only once".to_owned(),
        ));
    }
    let mut pile = Pile::default();
    for arg in &args.files {
        if arg.as_os_str() == "-" {
            let input = stdin()?;
            pile.nights
                .extend(chains::scan(input, Path::new("-")).nights);
            continue;
        }
        match fs::metadata(arg) {
            Ok(m) if m.is_dir() => pile.dir(arg),
            Ok(m) => pile.file(arg, &m, true),
            Err(e) => pile.cannot(arg, &e),
        }
    }
    let report = Report::new(pile.nights, pile.skipped);
    let mut out = buffered(io::stdout().lock());
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &report.to_json())
            .map_err(io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
    } else {
        report.write_text(&mut out)
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        // A closed pipe (`rdump --chains DIR | head`) is not an error worth reporting.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(Failure::msg(format!("write error: {e}"))),
    }
    if report.is_ok() {
        return Ok(());
    }
    let n = report.errors();
    let s = if n == 1 { "" } else { "s" };
    rsend_cli::say_error(
        "rdump",
        format!("{n} problem{s} with the chains (listed in the report)"),
    );
    Err(Failure::Said(1))
}

/// The nights read so far, and the files left out.
#[derive(Default)]
struct Pile {
    nights: Vec<Night>,
    skipped: Vec<Skipped>,
    /// Files read, by device and inode, so that one named twice (itself
    /// and in its directory) counts once.
    read: HashSet<(u64, u64)>,
}

impl Pile {
    /// Reads the regular files of `dir` (not those of its subdirectories),
    /// in the order of their names' bytes.
    fn dir(&mut self, dir: &Path) {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => return self.cannot(dir, &e),
        };
        let mut paths = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => paths.push(e.path()),
                Err(e) => return self.cannot(dir, &e),
            }
        }
        paths.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
        for p in paths {
            match fs::metadata(&p) {
                Ok(m) if m.is_file() => self.file(&p, &m, false),
                Ok(_) => {}
                Err(e) => self.cannot(&p, &e),
            }
        }
    }

    /// Reads one file; `named` when the command line names it itself (it
    /// must then be a stream).
    fn file(&mut self, path: &Path, meta: &fs::Metadata, named: bool) {
        if !self.read.insert((meta.dev(), meta.ino())) {
            return;
        }
        let input = match Input::open(path) {
            Ok(i) => i,
            Err(e) => return self.cannot(path, &e),
        };
        let scan = chains::scan(input, path);
        if let Some(why) = scan.not_stream {
            self.skipped.push(Skipped {
                file: path.to_path_buf(),
                why: format!("not a stream ({why})"),
                error: named,
            });
        }
        self.nights.extend(scan.nights);
    }

    /// A file or directory that cannot be read.
    fn cannot(&mut self, path: &Path, e: &io::Error) {
        self.skipped.push(Skipped {
            file: path.to_path_buf(),
            why: format!("cannot read: {}", plain_io(e)),
            error: true,
        });
    }
}
