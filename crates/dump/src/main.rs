//! `rdump`: print a btrfs send stream.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use rdump::{buffered, dump_input, DumpError, Input, JsonDump, Streams, Summary, TextDump};

/// Real jobs, shown at the end of `--help` and in the man page.
const EXAMPLES: &str = "\
Examples:
  Inspect a stream file, one line per command as `btrfs receive --dump` prints:
    rdump backup.stream

  What an incremental backup would send, without sending it anywhere:
    rsend -d /dev/sdb -p snaps/mon snaps/tue | rdump --summary

  The files a stream writes data to, from the JSON lines:
    rdump --json backup.stream | jq -c 'select(.command == \"write\") | .path' | sort -u";

/// Print a btrfs send stream as `btrfs receive --dump` does, as JSON lines,
/// or as a summary.
#[derive(Parser)]
#[command(name = "rdump", version, after_long_help = EXAMPLES)]
struct Args {
    /// One JSON object per command per line.
    #[arg(long, conflicts_with = "summary")]
    json: bool,
    /// A table of counts, sizes and subvolume identities.
    #[arg(long)]
    summary: bool,
    /// Continue through every concatenated stream instead of stopping at the
    /// first END as `btrfs receive --dump` does.
    #[arg(short = 'a', long)]
    all_streams: bool,
    /// Stream file; standard input when absent or "-".
    file: Option<PathBuf>,
    #[command(flatten)]
    extra: rsend_cli::ExtraArgs,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if let Some(what) = args.extra.requested() {
        return rsend_cli::print(Args::command(), &what);
    }
    let input = match args.file.as_deref() {
        None => Input::stdin(),
        Some(p) if p.as_os_str() == "-" => Input::stdin(),
        Some(p) => match Input::open(p) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("rdump: error: cannot open {}: {e}", p.display());
                return ExitCode::from(1);
            }
        },
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
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`rdump | head`) is not an error worth reporting.
        Err(DumpError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdump: error: {e}");
            ExitCode::from(1)
        }
    }
}
