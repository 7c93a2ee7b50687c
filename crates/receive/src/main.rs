//! `rreceive`: replay a btrfs send stream into a directory on any filesystem.

#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, Parser};
use rdump::{buffered, dump, DumpError, Streams, TextDump};

/// Receive btrfs send streams into DEST: real subvolumes on btrfs,
/// directories anywhere else. Every path stays beneath DEST.
#[derive(Parser)]
#[command(name = "rreceive", version)]
struct Args {
    /// Read the stream from FILE instead of standard input.
    #[arg(short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Stop after the first END instead of reading further streams.
    #[arg(short = 'e')]
    stop_at_end: bool,
    /// Stop after N failed commands (0: never; the default is 1).
    #[arg(
        short = 'E',
        long = "max-errors",
        value_name = "N",
        default_value_t = 1
    )]
    max_errors: u64,
    /// Print the stream as `btrfs receive --dump` does and apply nothing.
    #[arg(long)]
    dump: bool,
    /// Decompress ENCODED_WRITE data instead of writing it encoded (btrfs).
    #[arg(long)]
    force_decompress: bool,
    /// Accept incomplete subvolumes (interrupted receives) as parents and
    /// clone sources.
    #[arg(long)]
    force: bool,
    /// Treat DEST as a plain directory even on btrfs.
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
    /// left incomplete, and the chain starts again with a full stream.
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
    /// Print nothing but errors.
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    quiet: bool,
    /// More messages; twice prints every command.
    #[arg(short = 'v', long, action = ArgAction::Count)]
    verbose: u8,
    /// Destination directory.
    #[arg(required_unless_present = "dump")]
    dest: Option<PathBuf>,
}

fn input(file: Option<&std::path::Path>) -> Result<Box<dyn Read>, ExitCode> {
    match file {
        None => Ok(Box::new(io::stdin().lock())),
        Some(p) if p.as_os_str() == "-" => Ok(Box::new(io::stdin().lock())),
        Some(p) => match File::open(p) {
            Ok(f) => Ok(Box::new(f)),
            Err(e) => {
                eprintln!("rreceive: error: cannot open {}: {e}", p.display());
                Err(ExitCode::from(1))
            }
        },
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let stream = match input(args.file.as_deref()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if args.dump {
        let out = buffered(io::stdout().lock());
        return match dump(stream, &mut TextDump::new(out), Streams::First) {
            Ok(()) => ExitCode::SUCCESS,
            Err(DumpError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rreceive: error: {e}");
                ExitCode::from(1)
            }
        };
    }
    let Some(dest) = args.dest else {
        eprintln!("rreceive: error: no destination given");
        return ExitCode::from(2);
    };
    // Modes come from the stream; the process umask must not alter them.
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let mut opts = rreceive::Options::new(dest);
    opts.stop_at_end = args.stop_at_end;
    opts.max_errors = args.max_errors;
    opts.force_decompress = args.force_decompress;
    opts.force = args.force;
    opts.plain = args.plain;
    opts.snapshot = if args.in_place {
        rreceive::Snapshot::InPlace
    } else if args.link {
        rreceive::Snapshot::Link
    } else {
        rreceive::Snapshot::Copy
    };
    opts.verbosity = if args.quiet { 0 } else { 1 + args.verbose };
    match rreceive::receive(stream, &opts) {
        Ok(_) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("rreceive: error: {}", f.error);
            if let Some(p) = f.given_back {
                eprintln!(
                    "rreceive: nothing was changed: parent {} is back as it was",
                    rreceive::error::escape(&p)
                );
            }
            if let Some(p) = f.incomplete {
                eprintln!(
                    "rreceive: subvolume {} is left incomplete: it will not be used as a \
                     parent or clone source unless --force is given",
                    p.display()
                );
                if let Some(parent) = f.in_place_of {
                    eprintln!(
                        "rreceive: it was received in place onto parent {}, which is gone: \
                         remove it and receive a full stream of the same snapshot (rsend \
                         without -p) to start the chain again",
                        rreceive::error::escape(&parent)
                    );
                }
            }
            ExitCode::from(1)
        }
    }
}
