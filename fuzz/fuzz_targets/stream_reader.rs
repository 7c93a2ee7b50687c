//! Feeds arbitrary bytes to `btrfs_stream::Reader` until it returns
//! `None` or an error, and also decodes the input as a bare command payload.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = btrfs_stream::Reader::new(data);
    loop {
        match reader.next_framed() {
            Ok(Some((cmd, pos))) => {
                // Touch the command so decoding work is not optimised away.
                std::hint::black_box((&cmd, pos));
                let _ = format!("{cmd:?}");
            }
            Ok(None) => break,
            Err(e) => {
                let _ = e.to_string();
                // A failed reader must stay failed and never panic.
                assert!(reader.next_framed().is_err());
                break;
            }
        }
    }

    if data.len() >= 3 {
        let version = u32::from(data[0] % 3) + 1;
        let cmd = u16::from_le_bytes([data[1], data[2]]);
        match btrfs_stream::decode_payload(version, cmd, &data[3..]) {
            Ok(c) => {
                let _ = format!("{c:?}");
            }
            Err((kind, at)) => {
                assert!(at <= (data.len() - 3) as u64, "error offset past payload");
                let _ = format!("{kind:?}");
            }
        }
    }
});
