//! Property tests: every command of every version survives encode → decode,
//! and no mutation of a valid stream makes the reader panic.

use btrfs_stream::{
    encode_command, Command, CommandKind, ErrorKind, Reader, StreamHeader, Timespec, Uuid,
    WriteError, Writer,
};
use proptest::prelude::*;

/// Raw material from which one command of any kind is built.
#[derive(Debug, Clone)]
struct Pool {
    bytes: [Vec<u8>; 3],
    data: Vec<u8>,
    u: [u64; 7],
    w: [u32; 2],
    byte: u8,
    ids: [[u8; 16]; 2],
    times: [(i64, u32); 4],
    opts: [bool; 5],
}

fn pool() -> impl Strategy<Value = Pool> {
    (
        [
            prop::collection::vec(any::<u8>(), 0..300),
            prop::collection::vec(any::<u8>(), 0..300),
            prop::collection::vec(any::<u8>(), 0..300),
        ],
        prop::collection::vec(any::<u8>(), 0..20_000),
        any::<[u64; 7]>(),
        any::<[u32; 2]>(),
        any::<u8>(),
        any::<[[u8; 16]; 2]>(),
        any::<[(i64, u32); 4]>(),
        any::<[bool; 5]>(),
    )
        .prop_map(|(bytes, data, u, w, byte, ids, times, opts)| Pool {
            bytes,
            data,
            u,
            w,
            byte,
            ids,
            times,
            opts,
        })
}

fn build(kind: CommandKind, p: &Pool) -> Command<'_> {
    let [a, b, c] = [&p.bytes[0][..], &p.bytes[1][..], &p.bytes[2][..]];
    let u = p.u;
    let opt = |i: usize, v: u64| p.opts[i].then_some(v);
    let t = |i: usize| Timespec {
        sec: p.times[i].0,
        nsec: p.times[i].1,
    };
    let id = |i: usize| Uuid::from_bytes(p.ids[i]);
    match kind {
        CommandKind::Subvol => Command::Subvol {
            path: a,
            uuid: id(0),
            ctransid: u[0],
        },
        CommandKind::Resume => Command::Resume {
            commands: u[0],
            offset: u[1],
            digest: id(0),
        },
        CommandKind::Snapshot => Command::Snapshot {
            path: a,
            uuid: id(0),
            ctransid: u[0],
            clone_uuid: id(1),
            clone_ctransid: u[1],
        },
        CommandKind::Mkfile => Command::Mkfile { path: a, ino: u[0] },
        CommandKind::Mkdir => Command::Mkdir { path: a, ino: u[0] },
        CommandKind::Mknod => Command::Mknod {
            path: a,
            ino: u[0],
            rdev: u[1],
            mode: u[2],
        },
        CommandKind::Mkfifo => Command::Mkfifo {
            path: a,
            ino: u[0],
            rdev: opt(1, u[1]),
            mode: opt(2, u[2]),
        },
        CommandKind::Mksock => Command::Mksock {
            path: a,
            ino: u[0],
            rdev: opt(1, u[1]),
            mode: opt(2, u[2]),
        },
        CommandKind::Symlink => Command::Symlink {
            path: a,
            ino: u[0],
            target: b,
        },
        CommandKind::Rename => Command::Rename { from: a, to: b },
        CommandKind::Link => Command::Link { path: a, target: b },
        CommandKind::Unlink => Command::Unlink { path: a },
        CommandKind::Rmdir => Command::Rmdir { path: a },
        CommandKind::SetXattr => Command::SetXattr {
            path: a,
            name: b,
            data: &p.data,
        },
        CommandKind::RemoveXattr => Command::RemoveXattr { path: a, name: b },
        CommandKind::Write => Command::Write {
            path: a,
            offset: u[0],
            data: &p.data,
        },
        CommandKind::Clone => Command::Clone {
            offset: u[0],
            len: u[1],
            path: a,
            clone_uuid: id(0),
            clone_ctransid: u[2],
            clone_path: b,
            clone_offset: u[3],
        },
        CommandKind::Truncate => Command::Truncate {
            path: a,
            size: u[0],
        },
        CommandKind::Chmod => Command::Chmod {
            path: a,
            mode: u[0],
        },
        CommandKind::Chown => Command::Chown {
            path: a,
            uid: u[0],
            gid: u[1],
        },
        CommandKind::Utimes => Command::Utimes {
            path: a,
            atime: t(0),
            mtime: t(1),
            ctime: t(2),
            otime: p.opts[3].then(|| t(3)),
        },
        CommandKind::End => Command::End {},
        CommandKind::UpdateExtent => Command::UpdateExtent {
            path: a,
            offset: u[0],
            len: u[1],
        },
        CommandKind::Fallocate => Command::Fallocate {
            path: a,
            mode: p.w[0],
            offset: u[0],
            len: u[1],
        },
        CommandKind::Fileattr => Command::Fileattr {
            path: a,
            attr: u[0],
        },
        CommandKind::EncodedWrite => Command::EncodedWrite {
            path: a,
            offset: u[0],
            unencoded_file_len: u[1],
            unencoded_len: u[2],
            unencoded_offset: u[3],
            compression: p.opts[3].then_some(p.w[0]),
            encryption: p.opts[4].then_some(p.w[1]),
            data: &p.data,
        },
        CommandKind::EnableVerity => Command::EnableVerity {
            path: a,
            algorithm: p.byte,
            block_size: p.w[0],
            salt: b,
            sig: c,
        },
    }
}

fn kinds_of(version: u32) -> Vec<CommandKind> {
    CommandKind::ALL
        .iter()
        .copied()
        .filter(|k| k.since() <= version && *k != CommandKind::End)
        .collect()
}

/// Encodes `cmds` as one stream of `version` followed by END.
fn stream_of(version: u32, cmds: &[Command<'_>]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new());
    w.start_stream(version).unwrap();
    for c in cmds {
        w.write_command(c).unwrap();
    }
    w.write_command(&Command::End {}).unwrap();
    w.into_inner()
}

fn decode_all(bytes: &[u8]) -> Result<usize, btrfs_stream::Error> {
    let mut r = Reader::new(bytes);
    let mut n = 0;
    while let Some(_c) = r.next_command()? {
        n += 1;
    }
    Ok(n)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_command_round_trips(version in 1u32..=3, pick in any::<prop::sample::Index>(), p in pool()) {
        let kinds = kinds_of(version);
        let kind = kinds[pick.index(kinds.len())];
        let cmd = build(kind, &p);
        let bytes = stream_of(version, std::slice::from_ref(&cmd));
        let mut r = Reader::new(&bytes[..]);
        let got = r.next_command().unwrap().unwrap();
        prop_assert_eq!(&got, &cmd);
        prop_assert_eq!(r.version(), version);
        prop_assert_eq!(r.next_command().unwrap().unwrap(), Command::End {});
        prop_assert!(r.next_command().unwrap().is_none());
    }

    #[test]
    fn mutated_streams_never_panic(
        version in 1u32..=3,
        p in pool(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let cmds: Vec<Command<'_>> = kinds_of(version).into_iter().map(|k| build(k, &p)).collect();
        let mut bytes = stream_of(version, &cmds);
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let _ = decode_all(&bytes);
        let end = cut.index(bytes.len());
        prop_assert!(decode_all(&bytes[..end]).is_err());
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        prop_assert!(decode_all(&bytes).is_err());
    }
}

#[test]
fn writer_refuses_commands_the_version_lacks() {
    let cmd = Command::Fallocate {
        path: b"f",
        mode: 3,
        offset: 0,
        len: 4096,
    };
    let mut out = Vec::new();
    let err = encode_command(&cmd, 1, &mut out).unwrap_err();
    assert!(matches!(
        err,
        WriteError::NotInVersion {
            cmd: CommandKind::Fallocate,
            version: 1
        }
    ));
    assert!(out.is_empty());
    let verity = Command::EnableVerity {
        path: b"f",
        algorithm: 1,
        block_size: 4096,
        salt: b"",
        sig: b"",
    };
    assert!(encode_command(&verity, 2, &mut out).is_err());
    assert!(encode_command(&verity, 3, &mut out).is_ok());
}

#[test]
fn writer_refuses_oversized_commands() {
    let data = vec![0u8; 64 << 10];
    let cmd = Command::Write {
        path: b"f",
        offset: 0,
        data: &data,
    };
    let mut out = Vec::new();
    assert!(matches!(
        encode_command(&cmd, 1, &mut out),
        Err(WriteError::AttrTooLong { .. })
    ));
    let data = vec![0u8; 60 << 10];
    let cmd = Command::Write {
        path: b"f",
        offset: 0,
        data: &data,
    };
    assert!(encode_command(&cmd, 1, &mut out).is_ok(), "60 KiB fits v1");
    let big = vec![0u8; 200 << 10];
    let cmd = Command::Write {
        path: b"f",
        offset: 0,
        data: &big,
    };
    assert!(matches!(
        encode_command(&cmd, 2, &mut out),
        Err(WriteError::TooLarge { .. })
    ));
    let xattr = vec![b'x'; 70_000];
    let cmd = Command::SetXattr {
        path: b"f",
        name: b"user.x",
        data: &xattr,
    };
    assert!(matches!(
        encode_command(&cmd, 2, &mut out),
        Err(WriteError::AttrTooLong { .. })
    ));
}

#[test]
fn concatenated_streams_are_read_in_order() {
    let mut bytes = stream_of(
        1,
        &[Command::Mkdir {
            path: b"a",
            ino: 257,
        }],
    );
    bytes.extend(stream_of(
        2,
        &[Command::Mkdir {
            path: b"b",
            ino: 258,
        }],
    ));
    let mut r = Reader::new(&bytes[..]);
    assert_eq!(
        r.next_command().unwrap(),
        Some(Command::Mkdir {
            path: b"a",
            ino: 257
        })
    );
    assert_eq!(r.version(), 1);
    assert_eq!(r.next_command().unwrap(), Some(Command::End {}));
    assert_eq!(
        r.next_command().unwrap(),
        Some(Command::Mkdir {
            path: b"b",
            ino: 258
        })
    );
    assert_eq!(r.version(), 2);
    assert_eq!(r.streams(), 2);
    assert_eq!(r.next_command().unwrap(), Some(Command::End {}));
    assert_eq!(r.next_command().unwrap(), None);
}

#[test]
fn oversized_length_is_refused_without_allocating_it() {
    let mut bytes = StreamHeader { version: 1 }.to_bytes().to_vec();
    bytes.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    bytes.extend_from_slice(&15u16.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    let err = decode_all(&bytes).unwrap_err();
    assert_eq!(err.offset, 17);
    assert_eq!(err.command, 1);
    assert!(matches!(err.kind, ErrorKind::TooLarge { .. }), "{err}");

    // Under the limit but longer than the input: truncated, not a huge buffer.
    let mut bytes = StreamHeader { version: 1 }.to_bytes().to_vec();
    bytes.extend_from_slice(&(60u32 << 20).to_le_bytes());
    bytes.extend_from_slice(&15u16.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(&[7; 100]);
    let err = decode_all(&bytes).unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::TruncatedCommand { got: 100, .. }),
        "{err}"
    );
}

#[test]
fn reader_survives_one_byte_reads() {
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }
    let data = vec![0xAB; 50_000];
    let bytes = stream_of(
        1,
        &[Command::Write {
            path: b"f",
            offset: 7,
            data: &data,
        }],
    );
    let mut r = Reader::new(Trickle(&bytes));
    match r.next_command().unwrap().unwrap() {
        Command::Write {
            path,
            offset,
            data: d,
        } => {
            assert_eq!((path, offset, d.len()), (&b"f"[..], 7, 50_000));
        }
        c => panic!("unexpected {c:?}"),
    }
}

#[test]
fn in_memory_reader_borrows_the_same_commands() {
    let data = vec![0x5A; 40_000];
    let cmds = [
        Command::Mkfile {
            path: b"f",
            ino: 257,
        },
        Command::Write {
            path: b"f",
            offset: 0,
            data: &data,
        },
    ];
    let bytes = stream_of(2, &cmds);
    let mut r = Reader::from_bytes(&bytes[..]);
    for want in cmds.iter().chain([&Command::End {}]) {
        let (got, pos) = r.next_framed().unwrap().unwrap();
        assert_eq!(&got, want);
        assert_eq!(
            &bytes[pos.offset as usize..][..10][4..6],
            &(got.kind() as u16).to_le_bytes()
        );
    }
    assert!(r.next_command().unwrap().is_none());
    let mut r = Reader::from_bytes(&bytes[..bytes.len() - 3]);
    r.next_command().unwrap();
    r.next_command().unwrap();
    let err = r.next_command().map(|_| ()).unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::TruncatedCommandHeader { got: 7 }),
        "{err}"
    );
    assert_eq!(err.offset, bytes.len() as u64 - 10);
}
