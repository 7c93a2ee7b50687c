//! Differential test: streams with random names, values and timestamps, made
//! by our writer, dumped by btrfs-progs and by rdump under several time zones.

use std::fs;
use std::process::Command as Process;

use btrfs_stream::{Command, Timespec, Uuid, Writer};
use rdump::{dump, Streams, TextDump};
use testkit::{which, Rng};

fn random_bytes(rng: &mut Rng, max: u64) -> Vec<u8> {
    (0..1 + rng.below(max))
        .map(|_| rng.next_u64() as u8)
        .collect()
}

fn random_time(rng: &mut Rng) -> Timespec {
    let sec = match rng.below(6) {
        0 => rng.below(4_000_000_000) as i64 - 1_000_000_000,
        1 => (rng.next_u64() >> 30) as i64 - (1 << 33),
        2 => (rng.next_u64() >> 20) as i64 - (1 << 43),
        // Near the end of glibc's range (tm_year must fit a C int).
        3 => 67_768_036_191_676_799 - rng.below(1 << 20) as i64,
        4 => -67_768_040_609_740_800 + rng.below(1 << 20) as i64,
        _ => [
            0,
            -1,
            i32::MAX as i64,
            i32::MIN as i64,
            253_402_300_799,
            i64::MAX,
            i64::MIN,
        ][rng.below(7) as usize],
    };
    Timespec {
        sec,
        nsec: rng.below(1_000_000_000) as u32,
    }
}

/// One v2 stream of `n` random commands; returns it and whether every
/// timestamp is within glibc's range.
fn random_stream(rng: &mut Rng, n: usize) -> Vec<u8> {
    let names: Vec<Vec<u8>> = (0..n).map(|_| random_bytes(rng, 60)).collect();
    let data = random_bytes(rng, 300);
    let mut w = Writer::new(Vec::new());
    w.start_stream(2).unwrap();
    let uuid = Uuid::from_bytes(rng.next_u64().to_le_bytes().repeat(2).try_into().unwrap());
    w.write_command(&Command::Subvol {
        path: &names[0],
        uuid,
        ctransid: rng.next_u64(),
    })
    .unwrap();
    for i in 0..n {
        let p = &names[i][..];
        let q = &names[(i + 1) % n][..];
        let (a, b) = (rng.next_u64(), rng.next_u64());
        let cmd = match rng.below(14) {
            0 => Command::Mkfile { path: p, ino: a },
            1 => Command::Mknod {
                path: p,
                ino: b,
                rdev: a,
                mode: b & 0o177777,
            },
            2 => Command::Symlink {
                path: p,
                ino: a,
                target: q,
            },
            3 => Command::Rename { from: p, to: q },
            4 => Command::Link { path: p, target: q },
            5 => Command::SetXattr {
                path: p,
                name: q,
                data: &data[..(a % data.len() as u64) as usize],
            },
            6 => Command::RemoveXattr { path: p, name: q },
            7 => Command::Write {
                path: p,
                offset: a,
                data: &data,
            },
            8 => Command::Clone {
                offset: a,
                len: b,
                path: p,
                clone_uuid: uuid,
                clone_ctransid: a ^ b,
                clone_path: q,
                clone_offset: b >> 3,
            },
            9 => Command::Chmod {
                path: p,
                mode: a & 0o7777,
            },
            10 => Command::Chown {
                path: p,
                uid: a,
                gid: b,
            },
            11 => Command::Fallocate {
                path: p,
                mode: a as u32,
                offset: b,
                len: a >> 7,
            },
            12 => Command::Fileattr { path: p, attr: a },
            _ => Command::Utimes {
                path: p,
                atime: random_time(rng),
                mtime: random_time(rng),
                ctime: random_time(rng),
                otime: Some(random_time(rng)),
            },
        };
        w.write_command(&cmd).unwrap();
    }
    w.write_command(&Command::End {}).unwrap();
    w.into_inner()
}

const ZONES: &[Option<&str>] = &[
    Some("UTC"),
    Some("Asia/Kolkata"),
    Some("America/New_York"),
    Some("Australia/Lord_Howe"),
    Some("Europe/Dublin"),
    Some("Pacific/Kiritimati"),
    Some("EST5EDT"),
    Some("<+0330>-3:30"),
    Some("EST5EDT,M3.2.0,M11.1.0"),
    Some("AEST-10AEDT,M10.1.0,M4.1.0/3"),
    Some("XXX3YYY,J60/2,300/5"),
    Some("No/Such_Zone"),
    Some(""),
    None,
];

#[test]
fn rdump_equals_btrfs_progs_on_random_streams_in_many_zones() {
    if which("btrfs").is_none() {
        if std::env::var_os("RSEND_REQUIRE_KERNEL").is_some_and(|v| v == "1") {
            panic!("btrfs-progs is required here");
        }
        println!(
            "SKIP rdump_equals_btrfs_progs_on_random_streams_in_many_zones: needs btrfs-progs"
        );
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stream");
    let mut failures_seen = 0;
    for round in 0..60 {
        let stream = random_stream(&mut rng, 60);
        fs::write(&file, &stream).unwrap();
        let zone = ZONES[round % ZONES.len()];
        let mut progs = Process::new("btrfs");
        progs.args(["receive", "--dump", "-f"]).arg(&file);
        match zone {
            Some(z) => {
                progs.env("TZ", z);
                std::env::set_var("TZ", z);
            }
            None => {
                progs.env_remove("TZ");
                std::env::remove_var("TZ");
            }
        }
        let want = progs.output().unwrap();
        let mut sink = TextDump::new(Vec::new());
        let res = dump(&stream[..], &mut sink, Streams::First);
        let got = sink.into_inner();
        assert_eq!(
            res.is_ok(),
            want.status.success(),
            "round {round} zone {zone:?}: progs {:?} vs rdump {res:?}",
            String::from_utf8_lossy(&want.stderr)
        );
        failures_seen += usize::from(res.is_err());
        if want.stdout != got {
            let (w, g) = (
                String::from_utf8_lossy(&want.stdout),
                String::from_utf8_lossy(&got),
            );
            let (a, b) = w
                .lines()
                .zip(g.lines())
                .find(|(a, b)| a != b)
                .unwrap_or_default();
            panic!("round {round} zone {zone:?}:\n progs: {a:?}\n rdump: {b:?}");
        }
    }
    // Out-of-range times occur often enough that the error path is compared too.
    assert!(failures_seen > 0, "no stream hit glibc's time range limit");
}
