//! Checking a catalog's chain: every stream file is read whole (command
//! CRCs checked), must hash as it did when cataloged, must hold each of its
//! nights' streams whole, and every byte range the catalog points at must
//! fall on its commands. Nights are checked oldest first; the first bad one
//! is named.

use std::collections::HashMap;

use btrfs_stream::{Command, Reader};
use rdump::chains::Identity;

use crate::error::{Error, Result};
use crate::night::Tap;
use crate::state::{uuid_text, Catalog, Snapshot};

/// What checking one stream file found.
#[derive(Debug, Default)]
struct FileCheck {
    /// The first fault: its byte offset (decompressed) and what it is.
    fault: Option<(u64, String)>,
    /// Each stream's first command: its offset and the uuid it names.
    starts: HashMap<u64, [u8; 16]>,
    /// Where each END ends.
    ends: Vec<u64>,
}

/// A night that checked good.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The night.
    pub snapshot: Snapshot,
}

/// Checks every night, oldest first, calling `each` after each good one;
/// the error names the first bad night.
pub fn check(cat: &Catalog, each: &mut dyn FnMut(&Checked)) -> Result<()> {
    let nights = cat.snapshots()?;
    let mut files: HashMap<i64, FileCheck> = HashMap::new();
    for s in &nights {
        let bad = |what: String| Error::Changed {
            night: format!("{} ({})", s.label(), s.file.display()),
            what,
        };
        if let Some(p) = s.parent {
            if !nights.iter().any(|n| n.id == p) {
                return Err(bad(format!("its parent night (row {p}) is missing")));
            }
        }
        let fc = match files.entry(s.file_id) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(check_file(cat, s.file_id)?),
        };
        let end = s.stream_offset + s.stream_len;
        if let Some((at, what)) = &fc.fault {
            if *at < end {
                return Err(bad(what.clone()));
            }
        }
        let first = s.stream_offset + btrfs_stream::STREAM_HEADER_LEN as u64;
        match fc.starts.get(&first) {
            Some(u) if *u == s.uuid => {}
            Some(u) => {
                return Err(bad(format!(
                    "the stream at byte {} is of {}, not {}",
                    s.stream_offset,
                    uuid_text(u),
                    s.uuid_text()
                )))
            }
            None => {
                return Err(bad(format!(
                    "no stream begins at byte {} any more",
                    s.stream_offset
                )))
            }
        }
        if !fc.ends.contains(&end) {
            return Err(bad(format!(
                "its stream no longer ends with END at byte {end}"
            )));
        }
        each(&Checked {
            snapshot: s.clone(),
        });
    }
    Ok(())
}

/// Reads stream file `id` whole.
fn check_file(cat: &Catalog, id: i64) -> Result<FileCheck> {
    let (path, size, _) = cat.stream_file(id)?;
    let mut fc = FileCheck::default();
    let f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            fc.fault = Some((0, format!("cannot open {}: {e}", path.display())));
            return Ok(fc);
        }
    };
    let mut tap = Tap::new(f);
    // Every position a run of the file starts or ends at must be a command
    // boundary.
    let mut marks: Vec<u64> = {
        let mut st = cat.db(cat.conn.prepare(
            "SELECT DISTINCT cmd_start FROM extent WHERE file = ?1 \
             UNION SELECT DISTINCT cmd_end FROM extent WHERE file = ?1",
        ))?;
        let rows = cat.db(st.query_map([id], |r| r.get::<_, i64>(0)))?;
        cat.db(rows.map(|r| r.map(|v| v as u64)).collect())?
    };
    marks.sort_unstable();
    marks.dedup();
    let mut next_mark = 0usize;
    {
        let input = match rdump::Decompress::new(&mut tap) {
            Ok(d) => d,
            Err(e) => {
                fc.fault = Some((0, format!("{}: {e}", path.display())));
                return Ok(fc);
            }
        };
        let mut reader = Reader::new(input);
        let mut at_start = true;
        loop {
            match reader.next_framed() {
                Ok(Some((cmd, pos))) => {
                    while next_mark < marks.len() && marks[next_mark] < pos.offset {
                        fc.fault.get_or_insert((
                            marks[next_mark],
                            format!(
                                "the catalog points at byte {} of {}, which is not where a command starts",
                                marks[next_mark],
                                path.display()
                            ),
                        ));
                        next_mark += 1;
                    }
                    while next_mark < marks.len() && marks[next_mark] <= pos.offset {
                        next_mark += 1;
                    }
                    if let Some(id) = at_start.then(|| Identity::of(&cmd)).flatten() {
                        fc.starts.insert(pos.offset, *id.id.uuid.as_bytes());
                    }
                    at_start = matches!(cmd, Command::End {});
                    if at_start {
                        fc.ends.push(pos.offset + pos.len);
                    }
                }
                Ok(None) => {
                    let end = reader.position();
                    while next_mark < marks.len() && marks[next_mark] <= end {
                        if marks[next_mark] < end {
                            fc.fault.get_or_insert((
                                marks[next_mark],
                                format!(
                                    "byte {} of {} is not a command boundary",
                                    marks[next_mark],
                                    path.display()
                                ),
                            ));
                        }
                        next_mark += 1;
                    }
                    if next_mark < marks.len() {
                        fc.fault.get_or_insert((
                            end,
                            format!(
                                "{} ends at byte {end}, before byte {} the catalog points at: cut short",
                                path.display(),
                                marks[next_mark]
                            ),
                        ));
                    }
                    break;
                }
                Err(e) => {
                    let at = reader.command_offset();
                    fc.fault
                        .get_or_insert((at, format!("{}: {e}", path.display())));
                    return Ok(fc);
                }
            }
        }
    }
    let _ = std::io::copy(&mut tap, &mut std::io::sink());
    let xxh3: i64 =
        cat.db(cat
            .conn
            .query_row("SELECT xxh3 FROM stream_file WHERE id = ?1", [id], |r| {
                r.get(0)
            }))?;
    if fc.fault.is_none() && (tap.bytes != size || tap.hash.digest() as i64 != xxh3) {
        fc.fault = Some((
            0,
            format!(
                "{} changed since it was cataloged ({} bytes, {} then; contents differ)",
                path.display(),
                tap.bytes,
                size
            ),
        ));
    }
    Ok(fc)
}
