//! A large stream file has its CRCs checked on two cores (`CrcAhead`): the
//! output and every error must be what the one-core path (a pipe) gives.

mod common;

use std::process::Output;

use btrfs_stream::{encode_command, Command as Cmd, StreamHeader};
use common::{rdump, rdump_piped, scratch};

/// A v1 stream of about 24 MiB: a file written in 3,000 commands of 8 KiB,
/// with a truncate and times between, then END.
fn big_stream() -> Vec<u8> {
    let mut out = StreamHeader { version: 1 }.to_bytes().to_vec();
    let uuid = btrfs_stream::Uuid::from_bytes([7u8; 16]);
    let subvol = Cmd::Subvol {
        path: b"snap",
        uuid,
        ctransid: 9,
    };
    encode_command(&subvol, 1, &mut out).unwrap();
    encode_command(&Cmd::Mkfile { path: b"f", ino: 0 }, 1, &mut out).unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 5) as u8).collect();
    for i in 0..3000u64 {
        let w = Cmd::Write {
            path: b"f",
            offset: i * 8192,
            data: &data,
        };
        encode_command(&w, 1, &mut out).unwrap();
        if i % 500 == 0 {
            let t = Cmd::Truncate {
                path: b"f",
                size: (i + 1) * 8192,
            };
            encode_command(&t, 1, &mut out).unwrap();
        }
    }
    encode_command(&Cmd::End {}, 1, &mut out).unwrap();
    out
}

fn rdump_file(bytes: &[u8], name: &str) -> Output {
    let path = scratch(&format!("rdump-large-{name}"), bytes);
    let out = rdump(&[path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    out
}

/// Offset of the n-th command (0 = the first after the stream header).
fn command_offset(s: &[u8], n: usize) -> usize {
    let mut off = 17;
    for _ in 0..n {
        off += 10 + u32::from_le_bytes(s[off..off + 4].try_into().unwrap()) as usize;
    }
    off
}

#[test]
fn a_large_file_dumps_as_a_pipe_does() {
    let s = big_stream();
    assert!(s.len() > 16 << 20);
    let (f, p) = (rdump_file(&s, "good"), rdump_piped(&[], &s));
    assert_eq!(
        f.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&f.stderr)
    );
    assert_eq!(f.stdout, p.stdout);
    assert_eq!(
        String::from_utf8_lossy(&f.stdout).lines().count(),
        3000 + 6 + 2
    );
}

#[test]
fn a_bad_crc_anywhere_in_a_large_file_is_the_same_error_as_from_a_pipe() {
    let good = big_stream();
    for n in [0, 1, 2, 1500, 2990, 3007] {
        let mut s = good.clone();
        let at = command_offset(&s, n);
        // A payload byte where there is one, else the header's CRC field.
        let flip = if n == 3007 { at + 6 } else { at + 12 };
        s[flip] ^= 0x40;
        let (f, p) = (rdump_file(&s, &format!("bad{n}")), rdump_piped(&[], &s));
        let msg = String::from_utf8_lossy(&f.stderr);
        assert_eq!(f.status.code(), Some(1), "command {n}: {msg}");
        assert_eq!(f.stderr, p.stderr, "command {n}");
        assert_eq!(f.stdout, p.stdout, "command {n}");
        assert!(
            msg.contains("crc") || msg.contains("CRC"),
            "command {n}: {msg}"
        );
        assert!(msg.contains(&at.to_string()), "command {n} at {at}: {msg}");
    }
}
