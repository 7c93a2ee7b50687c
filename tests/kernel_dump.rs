//! rdump against `btrfs receive --dump` on streams the running kernel makes
//! now, from trees with random names and xattr values.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use rdump::{dump, Streams, TextDump};
use testkit::{kernel_available, os, run, BtrfsImage, Rng};

/// A random name of 1..=40 bytes: anything but NUL and '/'.
fn random_name(rng: &mut Rng) -> Vec<u8> {
    let len = 1 + rng.below(40) as usize;
    let mut name: Vec<u8> = (0..len)
        .map(|_| match rng.below(4) {
            0 => b" \n\t\\\x7f\x1b"[rng.below(6) as usize],
            1 => 0x80 + rng.below(0x80) as u8,
            _ => b'a' + rng.below(26) as u8,
        })
        .filter(|&b| b != b'/')
        .collect();
    if name == b"." || name == b".." || name.is_empty() {
        name = b"x".to_vec();
    }
    name
}

fn populate(root: &std::path::Path, rng: &mut Rng, files: usize) {
    let mut dirs = vec![root.to_path_buf()];
    for i in 0..files {
        let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
        let mut name = random_name(rng);
        name.extend_from_slice(format!("-{i}").as_bytes());
        let path = parent.join(os(&name));
        match rng.below(6) {
            0 => {
                fs::create_dir(&path).unwrap();
                dirs.push(path);
            }
            1 => symlink(os(&random_name(rng)), &path).unwrap(),
            _ => {
                let len = rng.below(200_000) as usize;
                let data: Vec<u8> = (0..len).map(|j| (j as u64 * 31 + i as u64) as u8).collect();
                fs::write(&path, &data).unwrap();
                if rng.below(3) == 0 {
                    let value: Vec<u8> =
                        (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect();
                    xattr::set(&path, "user.random", &value).unwrap();
                }
            }
        }
    }
}

fn progs_dump(scratch: &Path, stream: &[u8]) -> Vec<u8> {
    let file = scratch.join("stream");
    fs::write(&file, stream).unwrap();
    run(Command::new("btrfs")
        .args(["receive", "--dump", "-f"])
        .arg(&file))
    .stdout
}

fn our_dump(stream: &[u8], streams: Streams) -> Vec<u8> {
    let mut sink = TextDump::new(Vec::new());
    dump(stream, &mut sink, streams).expect("rdump accepts the kernel's stream");
    sink.into_inner()
}

fn assert_same(what: &str, want: &[u8], got: &[u8]) {
    if want != got {
        let (w, g) = (String::from_utf8_lossy(want), String::from_utf8_lossy(got));
        let line = w.lines().zip(g.lines()).position(|(a, b)| a != b);
        panic!("{what}: rdump differs from btrfs receive --dump at line {line:?}\n{w}\n---\n{g}");
    }
}

#[test]
fn rdump_equals_btrfs_receive_dump_on_fresh_kernel_streams() {
    if !kernel_available("rdump_equals_btrfs_receive_dump_on_fresh_kernel_streams") {
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let fs = BtrfsImage::new(512, &[], "compress-force=zstd");
    populate(fs.mnt(), &mut rng, 300);
    let s1 = fs.snapshot("s1");
    populate(fs.mnt(), &mut rng, 100);
    run(Command::new("bash").arg("-c").arg(format!(
        "cd '{}' && for f in $(ls | head -20); do [ -f \"$f\" ] && fallocate -p -o 0 -l 4096 \"$f\"; done; true",
        fs.mnt().display()
    )));
    let s2 = fs.snapshot("s2");

    let cases: Vec<(&str, Vec<&OsStr>)> = vec![
        ("full v1", vec![s1.as_os_str()]),
        (
            "incremental v1",
            vec!["-p".as_ref(), s1.as_os_str(), s2.as_os_str()],
        ),
        ("no-data", vec!["--no-data".as_ref(), s1.as_os_str()]),
        (
            "v2 compressed incremental",
            vec![
                "--proto".as_ref(),
                "2".as_ref(),
                "--compressed-data".as_ref(),
                "-p".as_ref(),
                s1.as_os_str(),
                s2.as_os_str(),
            ],
        ),
    ];
    for (what, args) in &cases {
        let stream = fs.send(args);
        assert_same(
            what,
            &progs_dump(fs.scratch(), &stream),
            &our_dump(&stream, Streams::First),
        );
    }

    // Two snapshots in one send: progs' --dump shows the first stream only;
    // rdump --all-streams shows both, each as progs shows it alone.
    let both = fs.send(&[s1.as_os_str(), s2.as_os_str()]);
    assert_same(
        "concatenated",
        &progs_dump(fs.scratch(), &both),
        &our_dump(&both, Streams::First),
    );
    let mut want = progs_dump(fs.scratch(), &fs.send(&[s1.as_os_str()]));
    want.extend(progs_dump(fs.scratch(), &fs.send(&[s2.as_os_str()])));
    assert_same("all streams", &want, &our_dump(&both, Streams::All));
}
