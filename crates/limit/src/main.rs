//! `bench-limit`: the limit rows of `benches/compare`, the least work a tool
//! must do on the bytes it is given, spread over every core.
//!
//! ```text
//! bench-limit send IMG SNAPSHOT     read and verify the snapshot's data extents
//! bench-limit crc32c FILE|-         crc32c over a stream file (or stdin)
//! bench-limit create MANIFEST DIR   create the manifest's directories and files
//! ```
//!
//! Each prints what it did on stdout (bytes verified, summed or written) and
//! fails on any mismatch or error, so a limit row is known to have done the
//! work it stands for. `LIMIT_THREADS` overrides the number of threads.

mod crc;
mod create;
mod send;
mod work;

use anyhow::{bail, Context};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads = work::threads()?;
    let report = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["send", img, snapshot] => send::verify_snapshot(img.as_ref(), snapshot, threads)
            .with_context(|| format!("{img}: {snapshot}"))?
            .to_string(),
        ["crc32c", "-"] => crc::stdin()?.to_string(),
        ["crc32c", path] => crc::file(path.as_ref(), threads)
            .with_context(|| path.to_string())?
            .to_string(),
        ["create", manifest, dir] => {
            create::from_manifest(manifest.as_ref(), dir.as_ref(), threads)
                .with_context(|| format!("{manifest} -> {dir}"))?
                .to_string()
        }
        _ => bail!("usage: bench-limit send IMG SNAPSHOT | crc32c FILE|- | create MANIFEST DIR"),
    };
    println!("{report}");
    Ok(())
}
