//! `rdump`: print a btrfs send stream.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rdump::{buffered, dump, DumpError, JsonDump, Streams, Summary, TextDump};

/// Print a btrfs send stream as `btrfs receive --dump` does, as JSON lines,
/// or as a summary.
#[derive(Parser)]
#[command(name = "rdump", version)]
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
}

/// Standard input; a pipe gets a 1 MiB buffer so each read moves more data.
fn stdin() -> Box<dyn Read> {
    let stdin = io::stdin();
    // Fails harmlessly when stdin is not a pipe, or the size is above
    // /proc/sys/fs/pipe-max-size for an unprivileged user.
    let _ = nix::fcntl::fcntl(
        stdin.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20),
    );
    Box::new(stdin.lock())
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let input: Box<dyn Read> = match args.file.as_deref() {
        None => stdin(),
        Some(p) if p.as_os_str() == "-" => stdin(),
        Some(p) => match File::open(p) {
            Ok(f) => Box::new(f),
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
        dump(input, &mut JsonDump::new(out), streams)
    } else if args.summary {
        dump(input, &mut Summary::new(out), streams)
    } else {
        dump(input, &mut TextDump::new(out), streams)
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
