//! Property check: every command the reader accepts re-encodes (unless it is
//! above the writer's per-version size limit) to bytes that decode to the
//! same command, and re-encoding that is byte-identical. CRCs of the input
//! are fixed first so mutations reach payload decoding.
#![no_main]

use btrfs_stream::{decode_payload, encode_command, Reader, WriteError, COMMAND_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut data = data.to_vec();
    rsend_fuzz_common::fix_crcs(&mut data);
    let mut reader = Reader::new(&data[..]);
    let mut out = Vec::new();
    let mut again = Vec::new();
    while let Ok(Some((cmd, pos))) = reader.next_framed() {
        out.clear();
        match encode_command(&cmd, pos.version, &mut out) {
            Ok(()) => {}
            Err(WriteError::TooLarge { .. }) => continue,
            Err(e) => panic!("accepted command does not re-encode: {e} ({cmd:?})"),
        }
        let kind = u16::from_le_bytes([out[4], out[5]]);
        let back = decode_payload(pos.version, kind, &out[COMMAND_HEADER_LEN..])
            .unwrap_or_else(|e| panic!("re-encoded command does not decode: {e:?} ({cmd:?})"));
        assert_eq!(back, cmd, "decode(encode(c)) != c");
        again.clear();
        encode_command(&back, pos.version, &mut again).expect("second encode");
        assert_eq!(again, out, "encoding is not canonical");
        // The re-encoded frame must be accepted by a fresh reader.
        let mut framed = btrfs_stream::StreamHeader { version: pos.version }.to_bytes().to_vec();
        framed.extend_from_slice(&out);
        let mut r2 = Reader::new(&framed[..]);
        match r2.next_command() {
            Ok(Some(c2)) => assert_eq!(c2, cmd, "reader disagrees with decode_payload"),
            other => panic!("reader rejects re-encoded command: {other:?}"),
        }
    }
});

#[path = "common.rs"]
mod rsend_fuzz_common;
