//! The names in DEST of what recovery keeps beside each subvolume: the
//! side file (`.rreceive-resume-<name as hex>`), the durable record's two
//! slots (`.rreceive-durable-<name as hex>` and its `.1`) and the copy of
//! a killed receive's journal kept beside them (`.journal`), all under
//! the prefix every rreceive name in DEST starts with
//! ([`RESERVED_PREFIX`]).
//!
//! Owns: those names, and which subvolume a name belongs to. May call:
//! nothing of the crate (a leaf).

use btrfs_text::hex;

/// What every name rreceive keeps in DEST starts with; no subvolume may be
/// named so.
pub(crate) const RESERVED_PREFIX: &[u8] = b".rreceive";

/// The side file of subvolume `name` in DEST (`.rreceive-resume-<name as
/// hex>`): what a stopped receive kept for the one that resumes it,
/// including where it stopped (the `point` line), which counts even when
/// the state could not be written (a full filesystem).
pub(crate) fn side_file(name: &[u8]) -> Vec<u8> {
    let mut v = RESERVED_PREFIX.to_vec();
    v.extend_from_slice(b"-resume-");
    v.extend_from_slice(hex::encode(name).as_bytes());
    v
}

/// The name of the record of subvolume `name` in DEST.
pub(crate) fn record_file(name: &[u8]) -> Vec<u8> {
    let mut v = RESERVED_PREFIX.to_vec();
    v.extend_from_slice(b"-durable-");
    v.extend_from_slice(hex::encode(name).as_bytes());
    v
}

/// The name of slot `i`'s file.
pub(crate) fn slot_file(name: &[u8], i: usize) -> Vec<u8> {
    let mut n = record_file(name);
    if i == 1 {
        n.extend_from_slice(b".1");
    }
    n
}

/// The name of the copy of a killed receive's journal kept beside the
/// record (see [`super::durable::Record::journal`]).
pub(crate) fn journal_file(name: &[u8]) -> Vec<u8> {
    let mut n = record_file(name);
    n.extend_from_slice(b".journal");
    n
}

/// The names of the record files of subvolume `name` in DEST.
pub(crate) fn record_files(name: &[u8]) -> [Vec<u8>; 3] {
    [slot_file(name, 0), slot_file(name, 1), journal_file(name)]
}

/// The subvolume a side file or durable record in DEST (named `file`)
/// belongs to.
pub(crate) fn side_owner(file: &[u8]) -> Option<Vec<u8>> {
    let side = side_file(b"");
    let record = record_file(b"");
    let hexed = if let Some(h) = file.strip_prefix(side.as_slice()) {
        h
    } else {
        let h = file.strip_prefix(record.as_slice())?;
        [b".1".as_slice(), b".journal"]
            .iter()
            .find_map(|s| h.strip_suffix(*s))
            .unwrap_or(h)
    };
    let name = hex::decode(std::str::from_utf8(hexed).ok()?).ok()?;
    (!name.is_empty()).then_some(name)
}
