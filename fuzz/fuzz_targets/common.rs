//! Helpers shared by the fuzz targets (included with `#[path]`).
#![allow(dead_code)]

use btrfs_stream::{MAGIC, STREAM_HEADER_LEN, COMMAND_HEADER_LEN};

/// Dumps `data` with the text, JSON and summary sinks, reading all
/// concatenated streams. Errors are expected; panics are bugs.
pub fn run_all_sinks(data: &[u8]) {
    let mut text = rdump::TextDump::new(Vec::new());
    let r = rdump::dump(data, &mut text, rdump::Streams::All);
    if let Err(e) = &r {
        let _ = e.to_string();
    }
    let out = text.into_inner();
    std::hint::black_box(&out);

    let mut json = rdump::JsonDump::new(Vec::new());
    let r = rdump::dump(data, &mut json, rdump::Streams::All);
    if let Err(e) = &r {
        let _ = e.to_string();
    }
    std::hint::black_box(&json);

    let mut summary = rdump::Summary::new(Vec::new());
    let r = rdump::dump(data, &mut summary, rdump::Streams::All);
    if let Err(e) = &r {
        let _ = e.to_string();
    }
    std::hint::black_box(&summary);

    // First-stream mode must not panic either.
    let mut text = rdump::TextDump::new(Vec::new());
    let _ = rdump::dump(data, &mut text, rdump::Streams::First);
}

/// Recomputes the CRC of every command whose frame fits in `data`,
/// stepping over stream headers wherever the magic appears at a frame
/// boundary.
pub fn fix_crcs(data: &mut [u8]) {
    let mut p = 0usize;
    loop {
        if data.len() - p >= MAGIC.len() && &data[p..p + MAGIC.len()] == MAGIC {
            p += STREAM_HEADER_LEN.min(data.len() - p);
            continue;
        }
        if data.len() - p < COMMAND_HEADER_LEN {
            return;
        }
        let len = u32::from_le_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]]) as usize;
        let end = match p.checked_add(COMMAND_HEADER_LEN).and_then(|x| x.checked_add(len)) {
            Some(e) if e <= data.len() => e,
            _ => return,
        };
        let mut header = [0u8; COMMAND_HEADER_LEN];
        header.copy_from_slice(&data[p..p + COMMAND_HEADER_LEN]);
        let crc = btrfs_stream::crc::command_crc(&header, &data[p + COMMAND_HEADER_LEN..end]);
        data[p + 6..p + 10].copy_from_slice(&crc.to_le_bytes());
        p = end;
    }
}
