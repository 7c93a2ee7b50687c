//! `rdump`: print a btrfs send stream.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
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

Exit status:
  0  the stream was printed whole
  1  an error: the stream is malformed, cut short or cannot be read (the message gives
     the byte offset and command number), or standard output cannot be written
  2  the command line is wrong

See also:
  rsend(1), rreceive(1), btrfs-receive(8) (--dump)
  The guide: /usr/share/doc/rdump/rdump.md (installed), docs/rdump.md (source); recipes in recipes.md beside it";

/// Print a btrfs send stream as `btrfs receive --dump` does, as JSON lines,
/// or as a summary.
#[derive(Parser)]
#[command(name = "rdump", version, after_help = SHORT_HELP, after_long_help = AFTER_HELP)]
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
    rsend_cli::run("rdump", |a: &Args| &a.extra, run)
}

/// Prints the stream the command line names.
fn run(args: Args) -> Result<(), Failure> {
    let stdin = || {
        rsend_cli::stream_from_stdin(
            "pipe one in (rsend ... | rdump) or name a stream file (rdump FILE)",
        )?;
        Ok::<_, Failure>(Input::stdin())
    };
    let input = match args.file.as_deref() {
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
