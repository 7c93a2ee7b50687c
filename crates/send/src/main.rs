//! `rsend`: reads btrfs snapshots straight from devices or image files.
//!
//! For now it lists subvolumes (`--list`); sending is not implemented yet.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rsend::SubvolSelector;

/// Read btrfs subvolumes straight from devices or image files (no kernel, no mount).
#[derive(Parser)]
#[command(name = "rsend", version)]
struct Args {
    /// A device or image file of the filesystem; repeat for multi-device filesystems
    #[arg(short = 'd', long = "device", value_name = "PATH", required = true)]
    devices: Vec<PathBuf>,

    /// Print the subvolumes as `btrfs subvolume list -p -u -q -R` does
    #[arg(long)]
    list: bool,

    /// Debugging aid: write the file PATH of subvolume SUBVOL to stdout
    #[arg(long, num_args = 2, value_names = ["SUBVOL", "PATH"], hide = true)]
    cat_file: Option<Vec<String>>,

    /// Select the subvolume by id instead of by path
    #[arg(long, value_name = "ID")]
    subvolid: Option<u64>,

    /// Subvolume to send (path from the top level)
    subvol: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let r = if args.list {
        rsend::cli::list(&args.devices, &mut out)
    } else if let Some(cat) = &args.cat_file {
        let sel = match args.subvolid {
            Some(id) => SubvolSelector::Id(id),
            None => SubvolSelector::Path(cat[0].clone()),
        };
        rsend::cli::cat_file(&args.devices, &sel, &cat[1], &mut out).map(|_| ())
    } else {
        Err(anyhow::anyhow!(
            "sending is not implemented yet (only --list works in this build)"
        ))
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsend: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
