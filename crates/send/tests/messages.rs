//! What rsend says and does at its edges (issue 12), run against the built
//! binary on the incremental fixture image (no root, no mounts, but where
//! said): bad `-d` paths, `-f -`, the spellings of a subvolume path and the
//! top level, `--parent-from` with the list a real `rreceive --list`
//! printed (the parent kept to the subvolume sent, `--parent-any`, lists
//! cut short), the nil uuid as a parent, the progress of a `rsend |
//! rreceive` pipeline on one terminal, `--help`, `--man`, `--completions`,
//! and `-n` on a terminal. One test needs root (a full tmpfs under `-f`)
//! and skips without it.
//!
//! Terminals come from util-linux `script`; a test that needs it and does
//! not find it says so and passes.

mod common;

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use testkit::{no_script, on_terminal, sh_quote};

use btrfs_disk::{Filesystem, SubvolSelector};
use btrfs_stream::{Command as Cmd, Reader};
use common::receivers::rreceive_bin;
use common::scenarios::decompress_image;

fn rsend_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rsend")
}

/// `rsend -d IMG ARGS...`, nothing on standard input.
fn rsend(img: &Path, args: &[&OsStr]) -> Output {
    Command::new(rsend_bin())
        .arg("-d")
        .arg(img)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rsend")
}

/// `rsend -d IMG ARGS...` with `input` on standard input.
fn rsend_with_input(img: &Path, args: &[&OsStr], input: &[u8]) -> Output {
    let mut child = Command::new(rsend_bin())
        .arg("-d")
        .arg(img)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rsend");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The stream `rsend -q ARGS` writes to standard output; panics on failure.
fn stream(img: &Path, args: &[&str]) -> Vec<u8> {
    let mut a: Vec<&OsStr> = vec![os("-q")];
    a.extend(args.iter().map(|s| os(s)));
    let o = rsend(img, &a);
    assert!(
        o.status.success(),
        "rsend {args:?} failed ({}): {}",
        o.status,
        text(&o.stderr)
    );
    assert!(!o.stdout.is_empty(), "rsend {args:?} wrote no stream");
    o.stdout
}

/// The incremental fixture image, decompressed into `dir`.
fn image(dir: &Path) -> PathBuf {
    decompress_image(dir)
}

/// A subvolume of the image by path: (id, ctransid, the uuid a receiver
/// knows it by).
fn subvol(img: &Path, path: &str) -> (u64, u64, uuid::Uuid) {
    let fs = Filesystem::open(&[img.to_owned()]).unwrap();
    let sv = fs
        .find_subvolume(&SubvolSelector::Path(path.into()))
        .unwrap();
    (sv.id, sv.ctransid, rsend::send::stream_uuid_of(&sv))
}

/// `'s'`, for `sh -c`.
fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Asserts that `o` is rsend failing with exactly the error line `want`:
/// exit code 1, nothing on standard output, `path` named once, no OS
/// error text.
fn assert_device_error(o: &Output, path: &Path, want: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}: {err}", path.display());
    assert!(o.stdout.is_empty(), "{}: wrote a stream", path.display());
    assert_eq!(err, format!("rsend: error: {want}\n"), "{}", path.display());
    assert_eq!(
        err.matches(&*path.to_string_lossy()).count(),
        1,
        "the path is named once: {err}"
    );
    assert!(!err.contains("os error"), "no OS error text: {err}");
}

#[test]
fn bad_device_paths_name_the_path_once_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.img");
    let small = tmp.path().join("small.img");
    std::fs::write(&small, vec![0u8; 4096]).unwrap();
    let zeros = tmp.path().join("zeros.img");
    std::fs::write(&zeros, vec![0u8; 1 << 20]).unwrap();
    let dir = tmp.path().to_owned();
    let cases: [(&Path, String); 5] = [
        (&missing, "no such file or device".into()),
        (
            &dir,
            "is a directory; give the block device or image file that holds the btrfs \
             filesystem (for a mounted one, the device in the first column of findmnt PATH)"
                .into(),
        ),
        (
            Path::new("/dev/null"),
            "is a character device, not a block device or an image file that could hold btrfs"
                .into(),
        ),
        (
            &small,
            "is 4096 bytes, too small for btrfs (its first superblock is at 64 KiB)".into(),
        ),
        (
            &zeros,
            "not a btrfs filesystem, or a damaged one: no valid btrfs superblock (copy 0: bad magic at physical 65536)".into(),
        ),
    ];
    for (path, why) in &cases {
        let o = rsend(path, &[os("chain.1")]);
        assert_device_error(&o, path, &format!("{}: {why}", path.display()));
    }
}

#[test]
fn an_image_the_user_cannot_read_is_permission_denied() {
    if !nix::unistd::geteuid().is_root() {
        println!(
            "SKIP an_image_the_user_cannot_read_is_permission_denied: needs root to run as nobody"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Only the file is unreadable: its directory is open to all.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let img = image(tmp.path());
    std::fs::set_permissions(&img, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = Command::new(rsend_bin())
        .arg("-d")
        .arg(&img)
        .arg("chain.1")
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .expect("run rsend as nobody");
    assert_device_error(
        &o,
        &img,
        &format!(
            "{}: permission denied (owner uid 0, mode 0600: run as a user who may read it)",
            img.display()
        ),
    );
}

#[test]
fn file_dash_is_standard_output() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let work = tmp.path().join("cwd");
    std::fs::create_dir(&work).unwrap();
    let out = tmp.path().join("chain.1.stream");
    let o = Command::new(rsend_bin())
        .current_dir(&work)
        .arg("-d")
        .arg(&img)
        .args(["-q", "-f", "-", "chain.1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let to_file = Command::new(rsend_bin())
        .current_dir(&work)
        .arg("-d")
        .arg(&img)
        .args(["-q", "-f"])
        .arg(&out)
        .arg("chain.1")
        .output()
        .unwrap();
    assert!(to_file.status.success(), "{}", text(&to_file.stderr));
    assert!(to_file.stdout.is_empty());
    let want = std::fs::read(&out).unwrap();
    assert!(want.starts_with(btrfs_stream::MAGIC), "a send stream");
    assert_eq!(o.stdout, want, "-f - writes the stream -f FILE writes");
    assert!(!work.join("-").exists(), "no file named -");
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
}

const TOP_LEVEL: &str = "rsend: error: the top level (subvolume 5) cannot be sent: it has no \
    name to receive it as, and it is not a read-only snapshot; send a read-only snapshot of it \
    (btrfs subvolume snapshot -r MNT MNT/snap) instead\n";

#[test]
fn the_top_level_cannot_be_sent_and_is_named_so() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    for args in [vec!["/"], vec!["--subvolid", "5"], vec![""]] {
        let a: Vec<&OsStr> = args.iter().copied().map(os).collect();
        let o = rsend(&img, &a);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&o.stderr), TOP_LEVEL, "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}: wrote a stream");
    }
}

#[test]
fn the_top_level_as_a_parent_or_clone_source_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    for flag in ["-p", "-c"] {
        let o = rsend(&img, &[os(flag), os("/"), os("chain.1")]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag} /: {err}");
        assert!(o.stdout.is_empty());
        assert!(
            err.contains("the top level (subvolume 5)") && !err.contains("  ("),
            "{flag} /: {err}"
        );
    }
}

#[test]
fn every_spelling_of_a_subvolume_path_sends_the_same_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let spellings = |p: &str| {
        [
            format!("./{p}"),
            format!("/{p}"),
            format!("{p}/"),
            format!("{p}//"),
            format!(".//{p}/"),
        ]
    };
    let full = stream(&img, &["chain.1"]);
    for s in spellings("chain.1") {
        assert!(stream(&img, &[&s]) == full, "rsend {s:?}");
    }
    for flag in ["-p", "-c"] {
        let want = stream(&img, &[flag, "chain.0", "chain.1"]);
        assert!(want != full, "{flag} chain.0: an incremental stream");
        for s in spellings("chain.0") {
            assert!(
                stream(&img, &[flag, &s, "chain.1"]) == want,
                "rsend {flag} {s:?} chain.1"
            );
        }
    }
}

/// A destination that holds, as received by rreceive from rsend's
/// streams: chain.1 (full) and chain.2 (against chain.1) complete, and
/// chain.3 (against chain.2) cut off halfway, so resumable. Returns it and
/// the `rreceive --list` and `--list --json` of it.
fn destination(img: &Path, root: &Path) -> (PathBuf, String, String) {
    let dest = root.join("backup");
    std::fs::create_dir(&dest).unwrap();
    let receive = |data: &[u8], ok: bool| {
        let file = root.join("stream");
        std::fs::write(&file, data).unwrap();
        let o = Command::new(rreceive_bin())
            .arg("-q")
            .arg("-f")
            .arg(&file)
            .arg(&dest)
            .output()
            .unwrap();
        assert_eq!(o.status.success(), ok, "{}", text(&o.stderr));
    };
    receive(&stream(img, &["chain.1"]), true);
    receive(&stream(img, &["-p", "chain.1", "chain.2"]), true);
    let s3 = stream(img, &["-p", "chain.2", "chain.3"]);
    receive(&s3[..s3.len() / 2], false);
    let list = |json: bool| {
        let mut c = Command::new(rreceive_bin());
        c.arg("--list");
        if json {
            c.arg("--json");
        }
        let o = c.arg(&dest).output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let (text_list, json_list) = (list(false), list(true));
    let status: Vec<&str> = text_list
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap())
        .collect();
    assert_eq!(
        status,
        [
            "complete",
            "complete",
            "resumable",
            "# end of list: 3 subvolumes"
        ],
        "{text_list}"
    );
    assert!(
        json_list.ends_with("\n{\"end\":true,\"subvolumes\":3}\n"),
        "{json_list}"
    );
    (dest, text_list, json_list)
}

#[test]
fn parent_from_picks_the_newest_snapshot_the_destination_holds_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let (_dest, list, json) = destination(&img, tmp.path());
    let (id2, ctransid2, uuid2) = subvol(&img, "chain.2");
    assert!(list.contains(&uuid2.hyphenated().to_string()), "{list}");
    let list_file = tmp.path().join("list.txt");
    std::fs::write(&list_file, &list).unwrap();
    let want = stream(&img, &["-p", "chain.2", "chain.4"]);
    let line = format!(
        "rsend: parent chain.2 (subvolume {id2}, uuid {uuid2}): of the same subvolume as \
         chain.4, the newest older snapshot the destination holds complete (3 listed there)"
    );
    let runs = [
        (
            "a text list in a file",
            rsend(
                &img,
                &[os("--parent-from"), list_file.as_os_str(), os("chain.4")],
            ),
        ),
        (
            "a JSON list on standard input",
            rsend_with_input(
                &img,
                &[os("--parent-from"), os("-"), os("chain.4")],
                json.as_bytes(),
            ),
        ),
    ];
    for (what, o) in runs {
        let err = text(&o.stderr);
        assert!(o.status.success(), "{what}: {err}");
        assert_eq!(
            err,
            format!("{line}\nAt subvol chain.4\n"),
            "{what}: the parent is said on standard error"
        );
        let mut r = Reader::from_bytes(&o.stdout[..]);
        match r.next_command().unwrap() {
            Some(Cmd::Snapshot {
                path,
                clone_uuid,
                clone_ctransid,
                ..
            }) => {
                assert_eq!(path, b"chain.4", "{what}");
                assert_eq!(clone_uuid, uuid2, "{what}: SNAPSHOT of chain.2");
                assert_eq!(clone_ctransid, ctransid2, "{what}");
            }
            other => panic!("{what}: first command {other:?}, not SNAPSHOT"),
        }
        assert!(o.stdout == want, "{what}: the stream of -p chain.2");
    }
}

#[test]
fn parent_from_a_list_without_complete_snapshots_sends_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let (_dest, list, _json) = destination(&img, tmp.path());
    let (id4, _, _) = subvol(&img, "chain.4");
    let full = stream(&img, &["chain.4"]);
    // What rreceive --list prints for an empty destination.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = Command::new(rreceive_bin())
        .arg("--list")
        .arg(&empty)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "# end of list: 0 subvolumes\n");
    let only_incomplete: String = list
        .lines()
        .filter(|l| l.ends_with("\tresumable"))
        .map(|l| format!("{l}\n"))
        .chain(["# end of list: 1 subvolume\n".to_string()])
        .collect();
    for (input, listed) in [(text(&o.stdout), 0), (only_incomplete, 1)] {
        let o = rsend_with_input(
            &img,
            &[os("--parent-from"), os("-"), os("chain.4")],
            input.as_bytes(),
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(
            text(&o.stderr),
            format!(
                "rsend: the destination holds none of this filesystem's snapshots complete \
                 ({listed} listed there): sending chain.4 (subvolume {id4}) in full\nAt subvol chain.4\n"
            )
        );
        assert!(o.stdout == full, "{listed} listed: the full stream");
    }
}

/// A stream with nothing in it: a v1 header and END, no subvolume (the
/// empty stream btrfs receive takes with exit code 0).
fn empty_stream() -> Vec<u8> {
    let mut w = btrfs_stream::Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::End {}).unwrap();
    w.into_inner()
}

/// A snapshot the destination holds complete already is nothing to send:
/// said on standard error, exit code 0, an empty stream written (to
/// standard output or -f OUT) so that the receiver says nothing was sent;
/// with -n its size; with -q nothing said. It was an error (exit code 1,
/// no stream) before, which the pipeline's rreceive took for a cut stream.
#[test]
fn parent_from_sends_nothing_for_a_snapshot_the_destination_already_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let (_dest, list, _json) = destination(&img, tmp.path());
    let (id2, _, uuid2) = subvol(&img, "chain.2");
    let said = format!(
        "rsend: the destination already holds chain.2 (subvolume {id2}) complete \
         (received uuid {uuid2}): nothing to send"
    );
    let out = tmp.path().join("out.stream");
    let o = rsend_with_input(
        &img,
        &[
            os("--parent-from"),
            os("-"),
            os("-f"),
            out.as_os_str(),
            os("chain.2"),
        ],
        list.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        format!("{said}; an empty stream (no subvolume) is written\n")
    );
    assert!(std::fs::read(&out).unwrap() == empty_stream(), "-f OUT");
    assert!(o.stdout.is_empty());

    let o = rsend_with_input(
        &img,
        &[os("--parent-from"), os("-"), os("chain.2")],
        list.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stdout == empty_stream(), "standard output");
    let mut r = Reader::from_bytes(&o.stdout[..]);
    assert!(matches!(r.next_command().unwrap(), Some(Cmd::End {})));
    assert!(r.next_command().unwrap().is_none());

    let o = rsend_with_input(
        &img,
        &[os("-q"), os("--parent-from"), os("-"), os("chain.2")],
        list.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "", "-q");
    assert!(o.stdout == empty_stream());

    let o = rsend_with_input(
        &img,
        &[os("-n"), os("--parent-from"), os("-"), os("chain.2")],
        list.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), format!("{said}\n"));
    assert_eq!(text(&o.stdout), format!("size\t{}\n", empty_stream().len()));

    // With more SUBVOLs, the one held is to be left out.
    let o = rsend_with_input(
        &img,
        &[os("--parent-from"), os("-"), os("chain.2"), os("chain.4")],
        list.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("already holds chain.2 (subvolume"),
        "{}",
        text(&o.stderr)
    );
}

/// The README's nightly line, `rreceive --list DEST | rsend --parent-from -
/// SNAP | rreceive DEST`, run twice for the same snapshot: the second run
/// sends nothing and every command of the pipeline exits 0 (bash's
/// pipefail), for a full send and then an incremental one. Before, rsend
/// exited 1 and rreceive 3.
#[test]
fn the_nightly_line_run_twice_succeeds_and_sends_nothing_the_second_time() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let nightly = |snap: &str| -> Output {
        let rreceive = sh_quote(rreceive_bin().as_os_str());
        let rsend = sh_quote(os(rsend_bin()));
        let (d, i) = (sh_quote(dest.as_os_str()), sh_quote(img.as_os_str()));
        let line = format!(
            "{rreceive} --list {d} | {rsend} -d {i} --parent-from - {snap} | {rreceive} {d}"
        );
        Command::new("bash")
            .args(["-o", "pipefail", "-c", &line])
            .stdin(Stdio::null())
            .output()
            .expect("run bash")
    };
    let status = |snap: &str| -> Vec<String> {
        rreceive_list(&dest, false)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                format!("{} {}", f[0], f[f.len() - 1])
            })
            .filter(|l| l.starts_with(snap))
            .collect()
    };
    for (snap, parent) in [("chain.1", None), ("chain.2", Some("chain.1"))] {
        let (id, _, uuid) = subvol(&img, snap);
        let first = nightly(snap);
        let err = text(&first.stderr);
        assert!(first.status.success(), "first run of {snap}: {err}");
        assert!(err.contains(&format!("At subvol {snap}\n")), "{err}");
        if let Some(p) = parent {
            assert!(err.contains(&format!("rsend: parent {p} ")), "{err}");
        }
        assert_eq!(status(snap), [format!("{snap} complete")]);
        let second = nightly(snap);
        let err = text(&second.stderr);
        assert_eq!(second.status.code(), Some(0), "second run of {snap}: {err}");
        assert_eq!(
            err,
            format!(
                "rsend: the destination already holds {snap} (subvolume {id}) complete \
                 (received uuid {uuid}): nothing to send; an empty stream (no subvolume) is \
                 written\nrreceive: nothing was sent: the stream holds no subvolume (the sender \
                 had nothing to send)\n"
            )
        );
        assert_eq!(status(snap), [format!("{snap} complete")], "as it was");
    }
}

/// `-q` and `-v` count as for btrfs send (btrfs-progs 6.14): one level, `-q`
/// sets it to quiet and each `-v` raises it, in the order given: `-v -q`
/// says nothing, `-q -v` what no flag says (`At subvol`), `-q -v -v` what
/// `-v` says. Both orders were refused before ("cannot be used with").
#[test]
fn q_and_v_count_in_their_order_as_for_btrfs_send() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let full = stream(&img, &["chain.1"]);
    let run = |flags: &[&str]| -> String {
        let mut a: Vec<&OsStr> = flags.iter().map(|f| os(f)).collect();
        a.push(os("chain.1"));
        let o = rsend(&img, &a);
        assert!(o.status.success(), "{flags:?}: {}", text(&o.stderr));
        assert!(o.stdout == full, "{flags:?}: the same stream");
        text(&o.stderr)
    };
    assert_eq!(run(&[]), "At subvol chain.1\n");
    let verbose = run(&["-v"]);
    assert!(
        verbose.starts_with("At subvol chain.1\nchain.1 (subvolume ")
            && verbose.contains(" commands, "),
        "{verbose}"
    );
    assert_eq!(run(&["-v", "-q"]), "", "-v -q is quiet");
    assert_eq!(run(&["-q", "-v"]), "At subvol chain.1\n", "-q -v");
    assert_eq!(run(&["-qv"]), "At subvol chain.1\n", "-qv");
    let qvv = run(&["-q", "-v", "-v"]);
    assert!(
        qvv.starts_with("At subvol chain.1\nchain.1 (subvolume ") && qvv.contains(" commands, "),
        "-q -v -v as -v: {qvv}"
    );
}

/// `--proto 4` (or any version rsend does not send) is a usage error, exit
/// code 2, whose message lists the versions; it was exit code 1.
#[test]
fn an_unknown_protocol_version_is_a_usage_error_that_lists_the_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    for v in ["4", "99", "two"] {
        let o = rsend(&img, &[os("--proto"), os(v), os("chain.1")]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--proto {v}: {err}");
        assert!(o.stdout.is_empty(), "--proto {v}: no stream");
        assert!(
            err.contains(&format!("'{v}' for '--proto <N>'"))
                && err.contains("rsend sends protocol versions 1 to 3, and 0 means 2"),
            "--proto {v}: {err}"
        );
    }
    for v in ["0", "1", "2", "3"] {
        let o = rsend(&img, &[os("-q"), os("--proto"), os(v), os("chain.1")]);
        assert!(o.status.success(), "--proto {v}: {}", text(&o.stderr));
        let mut r = Reader::from_bytes(&o.stdout[..]);
        r.next_command().unwrap();
        let want = if v == "0" { 2 } else { v.parse().unwrap() };
        assert_eq!(r.version(), want, "--proto {v}");
    }
}

/// `--ignore` means something only with `--verify`: without it, it is a
/// usage error (exit code 2) even beside a flag that conflicts with
/// `--verify`, which let it through silently before (`--list`, `-n`,
/// `-p`, `--parent-from`).
#[test]
fn ignore_without_verify_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    for extra in [
        &["--list"][..],
        &["-n", "chain.1"],
        &["-p", "chain.0", "chain.1"],
        &["--parent-from", "/nonexistent", "chain.1"],
        &["chain.1"],
    ] {
        let mut a: Vec<&OsStr> = vec![os("--ignore"), os("data")];
        a.extend(extra.iter().map(|s| os(s)));
        let o = rsend(&img, &a);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(o.stdout.is_empty(), "{extra:?}: {}", text(&o.stdout));
        assert!(err.contains("--verify"), "{extra:?}: {err}");
    }
}

#[test]
fn parent_from_a_list_it_cannot_read_names_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let (_, _, uuid1) = subvol(&img, "chain.1");
    let good = format!("chain.1\t{uuid1}\t470\t-\tcomplete");
    let end = |n: usize| format!("# end of list: {n} subvolumes\n");
    let json_end = "{\"end\":true,\"subvolumes\":1}\n";
    let cases = [
        (format!("{good}\n\nfoo bar\n{}", end(2)), 3, "\"foo bar\""),
        // rreceive prints no comments: a line starting with # is a name.
        (format!("# a comment\n{good}\n{}", end(2)), 1, "# a comment"),
        (
            format!("{good}\nchain.2\tnot-a-uuid\t473\t-\tcomplete\n{}", end(2)),
            2,
            "",
        ),
        (
            format!("{good}\nchain.2\t{uuid1}\t473\t-\tmaybe\n{}", end(2)),
            2,
            "",
        ),
        (
            format!("{{\"name\":\"chain.1\",\"complete\":true}}\n{json_end}"),
            1,
            "",
        ),
        (format!("{{\"name\": broken\n{json_end}"), 1, ""),
        // An end line that is not one.
        (format!("{good}\n# end of list: two subvolumes\n"), 2, ""),
        (
            format!("{good}\n{{\"end\":false,\"subvolumes\":1}}\n"),
            2,
            "",
        ),
    ];
    for (list, n, shown) in cases {
        let o = rsend_with_input(
            &img,
            &[os("--parent-from"), os("-"), os("chain.4")],
            list.as_bytes(),
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{list:?}: {err}");
        assert!(o.stdout.is_empty());
        let bad = list.lines().nth(n - 1).unwrap();
        assert_eq!(
            err,
            format!(
                "rsend: error: line {n} of the list is not what rreceive --list prints: {bad:?}\n"
            ),
            "{list:?}"
        );
        assert!(err.contains(shown));
    }
}

/// Receives `data` (a stream) into `dest` with rreceive.
fn receive_into(dest: &Path, data: &[u8]) {
    let mut child = Command::new(rreceive_bin())
        .arg("-q")
        .arg(dest)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `rreceive --list [--json] DEST`.
fn rreceive_list(dest: &Path, json: bool) -> String {
    let mut c = Command::new(rreceive_bin());
    c.arg("--list");
    if json {
        c.arg("--json");
    }
    let o = c.arg(dest).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

#[test]
fn parent_from_keeps_to_the_snapshots_of_the_subvolume_sent() {
    // The fixture's subvolumes each have two snapshots, X.p and X.c (made
    // in that order); chain has chain.0 to chain.5. The destination holds
    // chain.1, chain.2 (the newest of all), chain.3 cut off, and
    // new_files.p and changed_files.p.
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let (dest, _, _) = destination(&img, tmp.path());
    for snap in ["new_files.p", "changed_files.p"] {
        receive_into(&dest, &stream(&img, &[snap]));
    }
    let list_file = tmp.path().join("list.txt");
    std::fs::write(&list_file, rreceive_list(&dest, false)).unwrap();
    let json_file = tmp.path().join("list.json");
    std::fs::write(&json_file, rreceive_list(&dest, true)).unwrap();
    let chain2 = "the newest of this filesystem's snapshots the destination holds complete, \
                  of any subvolume (5 listed there; --parent-any)";
    let kin = |snap: &str| {
        format!(
            "of the same subvolume as {snap}, the newest older snapshot the destination holds \
             complete (5 listed there)"
        )
    };
    // snapshot, --parent-any, the parent wanted (None: a full send), why
    let cases: [(&str, bool, Option<&str>, String); 9] = [
        (
            "new_files.c",
            false,
            Some("new_files.p"),
            kin("new_files.c"),
        ),
        (
            "changed_files.c",
            false,
            Some("changed_files.p"),
            kin("changed_files.c"),
        ),
        ("chain.4", false, Some("chain.2"), kin("chain.4")),
        (
            "deleted_files.c",
            false,
            None,
            "the destination holds no snapshot of the same subvolume as deleted_files.c \
             complete (5 listed there; 4 of other subvolumes, which --parent-any would take)"
                .into(),
        ),
        (
            "chain.0",
            false,
            None,
            "the destination holds no older snapshot of the same subvolume as chain.0 complete \
             (5 listed there; 2 newer ones)"
                .into(),
        ),
        ("new_files.c", true, Some("chain.2"), chain2.into()),
        ("deleted_files.c", true, Some("chain.2"), chain2.into()),
        ("chain.0", true, Some("chain.2"), chain2.into()),
        ("chain.4", true, Some("chain.2"), chain2.into()),
    ];
    for (snap, any, want, why) in cases {
        let (id, _, _) = subvol(&img, snap);
        let expected = match want {
            Some(p) => stream(&img, &["-p", p, snap]),
            None => stream(&img, &[snap]),
        };
        let said = match want {
            Some(p) => {
                let (pid, _, puuid) = subvol(&img, p);
                format!("rsend: parent {p} (subvolume {pid}, uuid {puuid}): {why}\n")
            }
            None => format!("rsend: {why}: sending {snap} (subvolume {id}) in full\n"),
        };
        for list in [&list_file, &json_file] {
            let what = format!("{snap} any={any} {}", list.display());
            let mut args = vec![os("--parent-from"), list.as_os_str()];
            if any {
                args.push(os("--parent-any"));
            }
            args.push(os(snap));
            let o = rsend(&img, &args);
            let err = text(&o.stderr);
            assert!(o.status.success(), "{what}: {err}");
            assert!(
                err.starts_with(&said),
                "{what}: wants {said:?}, said {err:?}"
            );
            let unrelated = want.is_some_and(|p| p.split('.').next() != snap.split('.').next());
            assert_eq!(
                err.contains("is not related"),
                unrelated,
                "{what}: a warning only for a parent of another subvolume: {err}"
            );
            assert!(o.stdout == expected, "{what}: not the stream of {want:?}");
        }
    }
    // --parent-any means nothing without --parent-from.
    let o = rsend(&img, &[os("--parent-any"), os("chain.4")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
}

#[test]
fn parent_from_refuses_a_list_cut_short_or_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let (_dest, list, json) = destination(&img, tmp.path());
    let lines: Vec<&str> = list.lines().collect();
    let json_lines: Vec<&str> = json.lines().collect();
    assert_eq!(lines.len(), 4, "{list}");
    let keep = |l: &[&str]| l.iter().map(|l| format!("{l}\n")).collect::<String>();
    let cut = |rest: &str| {
        format!(
            "the destination's listing is missing or cut short (no end line from rreceive \
             --list; {rest}): not sending, to avoid a full send by mistake"
        )
    };
    let cases = [
        ("an empty file", String::new(), cut("the list is empty")),
        (
            "the end line dropped",
            keep(&lines[..3]),
            cut("it stops at line 3"),
        ),
        (
            "the JSON end line dropped",
            keep(&json_lines[..3]),
            cut("it stops at line 3"),
        ),
        (
            "cut in the middle of a line",
            format!("{}{}", keep(&lines[..1]), &lines[1][..20]),
            cut("it stops at line 2"),
        ),
        (
            "a line lost",
            keep(&[lines[0], lines[2], lines[3]]),
            "the destination's listing is cut short: its end line (line 3) counts 3 \
             subvolumes and 2 are listed: not sending, to avoid a full send by mistake"
                .to_string(),
        ),
        (
            "two lists",
            format!("{list}{list}"),
            "the destination's listing goes on after its end line (line 4 of 8): not \
             sending, to avoid a full send by mistake"
                .to_string(),
        ),
    ];
    let out = tmp.path().join("out.stream");
    for (what, input, msg) in cases {
        let file = tmp.path().join("list.txt");
        std::fs::write(&file, &input).unwrap();
        let from_file = rsend(
            &img,
            &[
                os("--parent-from"),
                file.as_os_str(),
                os("-f"),
                out.as_os_str(),
                os("chain.4"),
            ],
        );
        let from_stdin = rsend_with_input(
            &img,
            &[os("--parent-from"), os("-"), os("chain.4")],
            input.as_bytes(),
        );
        for o in [from_file, from_stdin] {
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{what}: {err}");
            assert_eq!(err, format!("rsend: error: {msg}\n"), "{what}");
            assert!(o.stdout.is_empty(), "{what}: wrote a stream");
            assert!(!out.exists(), "{what}: made the stream file");
        }
    }
}

#[test]
fn the_nil_uuid_names_no_parent_or_clone_source() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let nil = "00000000-0000-0000-0000-000000000000";
    // Every snapshot of the fixture has the nil uuid as its received uuid:
    // the lookup by uuid must not take one of them for it.
    let fs = Filesystem::open(std::slice::from_ref(&img)).unwrap();
    assert!(fs
        .subvolumes()
        .unwrap()
        .iter()
        .any(|s| s.received_uuid.is_nil()));
    assert!(matches!(
        fs.find_subvolume(&SubvolSelector::Uuid(uuid::Uuid::nil())),
        Err(btrfs_disk::error::Error::NoSubvolume(_))
    ));
    let out = tmp.path().join("out.stream");
    for (flag, value, role) in [
        ("-p", nil, "parent"),
        ("--parent", "00000000000000000000000000000000", "parent"),
        ("-c", nil, "clone source"),
    ] {
        let o = rsend(
            &img,
            &[
                os(flag),
                os(value),
                os("-f"),
                out.as_os_str(),
                os("chain.4"),
            ],
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag} {value}: {err}");
        assert_eq!(
            err,
            format!(
                "rsend: error: {role} {nil}: the nil uuid names no subvolume (it is the received \
                 uuid of every subvolume that was never received); give the {role}'s path, id or \
                 uuid\n"
            ),
            "{flag} {value}"
        );
        assert!(!out.exists(), "{flag} {value}: made the stream file");
    }
}

#[test]
fn a_full_disk_under_the_stream_file_is_named() {
    if !testkit::kernel_available("a_full_disk_under_the_stream_file_is_named") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    // 64 KiB (the later size= wins); chain.1's stream is 100 KB.
    let full = testkit::Tmpfs::new(1, "size=64k");
    let out = full.mnt().join("chain.1.stream");
    let o = rsend(&img, &[os("-q"), os("-f"), out.as_os_str(), os("chain.1")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        format!(
            "rsend: error: writing the stream to {}: No space left on device\n",
            out.display()
        )
    );
}

#[test]
fn parent_from_with_an_explicit_parent_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "").unwrap();
    for (flag, value) in [
        ("-p", "chain.1"),
        ("--parent", "chain.1"),
        ("--parent-id", "590"),
    ] {
        let o = rsend(
            &img,
            &[
                os("--parent-from"),
                list.as_os_str(),
                os(flag),
                os(value),
                os("chain.4"),
            ],
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(o.stdout.is_empty());
        assert!(
            err.starts_with(
                "error: the argument '--parent-from <FILE>' cannot be used with '--parent"
            ),
            "{flag}: {err}"
        );
    }
}

/// `rsend -d IMG chain.1 | rreceive DEST` run by `sh -c` on one
/// pseudo-terminal, so in one process group; `sender` and `receiver` wrap
/// the two commands (`{}` stands for each). Returns its exit code, what
/// the terminal showed, and DEST.
fn pipeline_on_terminal(
    root: &Path,
    sender: &str,
    receiver: &str,
) -> Option<(Option<i32>, Vec<u8>, PathBuf)> {
    let img = image(root);
    let dest = root.join("backup");
    std::fs::create_dir(&dest).unwrap();
    let send = format!(
        "{} -d {} chain.1",
        sh_quote(os(rsend_bin())),
        sh_quote(img.as_os_str())
    );
    let receive = format!(
        "{} {}",
        sh_quote(rreceive_bin().as_os_str()),
        sh_quote(dest.as_os_str())
    );
    let cmd = format!(
        "{} | {}",
        sender.replace("{}", &send),
        receiver.replace("{}", &receive)
    );
    let (code, out) = on_terminal(&cmd)?;
    Some((code, out, dest))
}

#[test]
fn a_pipeline_on_one_terminal_leaves_the_bar_to_rsend() {
    let tmp = tempfile::tempdir().unwrap();
    // rreceive starts once rsend runs (and waits on the full pipe: the
    // stream is larger than a pipe holds).
    let Some((code, out, dest)) = pipeline_on_terminal(tmp.path(), "{}", "{ sleep 0.5; exec {}; }")
    else {
        return no_script("a_pipeline_on_one_terminal_leaves_the_bar_to_rsend");
    };
    let shown = String::from_utf8_lossy(&out).escape_debug().to_string();
    assert_eq!(code, Some(0), "{shown}");
    // rsend's own line, then rreceive's on a cleared line of its own.
    assert_eq!(count(&out, b"At subvol chain.1"), 2, "{shown}");
    let rreceive_at = out
        .windows(b"At subvol chain.1".len())
        .rposition(|w| w == b"At subvol chain.1")
        .unwrap();
    assert!(
        out[..rreceive_at].ends_with(b"\r\x1b[2K"),
        "rreceive's line starts on a cleared line: {shown}"
    );
    assert!(
        find(&out, b"receiving").is_none(),
        "rreceive drew a bar: {shown}"
    );
    assert!(
        find(&out, b"chain.1 [").is_some(),
        "rsend draws its bar: {shown}"
    );
    let list = Command::new(rreceive_bin())
        .arg("--list")
        .arg(&dest)
        .output()
        .unwrap();
    assert!(
        text(&list.stdout).ends_with("\tcomplete\n# end of list: 1 subvolume\n"),
        "{}",
        text(&list.stdout)
    );
}

#[test]
fn a_pipeline_whose_rsend_starts_late_still_leaves_the_bar_to_rsend() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((code, out, _)) = pipeline_on_terminal(tmp.path(), "{ sleep 0.5; exec {}; }", "{}")
    else {
        return no_script("a_pipeline_whose_rsend_starts_late_still_leaves_the_bar_to_rsend");
    };
    let shown = String::from_utf8_lossy(&out).escape_debug().to_string();
    assert_eq!(code, Some(0), "{shown}");
    // rreceive may draw its bar once rsend is done (its bar cleared), as
    // when rsend sent everything before rreceive's first message: never
    // while rsend's bar is on the line.
    let last_rsend_frame = out
        .windows(b"chain.1 ".len() + 1)
        .rposition(|w| w.starts_with(b"chain.1 ") && matches!(w[8], b'[' | 0xe2))
        .unwrap_or(0);
    let first_receiving = out
        .windows(b"receiving".len())
        .position(|w| w == b"receiving")
        .unwrap_or(usize::MAX);
    assert!(
        first_receiving > last_rsend_frame,
        "rreceive drew a bar while rsend's was shown: {shown}"
    );
}

#[test]
fn a_pipeline_off_a_terminal_writes_no_escape_sequences() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let mut send = Command::new(rsend_bin())
        .arg("-d")
        .arg(&img)
        .arg("chain.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let recv = Command::new(rreceive_bin())
        .arg(&dest)
        .stdin(send.stdout.take().unwrap())
        .output()
        .unwrap();
    let sent = send.wait_with_output().unwrap();
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    assert!(recv.status.success(), "{}", text(&recv.stderr));
    assert_eq!(text(&sent.stderr), "At subvol chain.1\n");
    assert_eq!(text(&recv.stderr), "At subvol chain.1\n");
}

#[test]
fn help_ends_with_examples() {
    let o = Command::new(rsend_bin()).arg("--help").output().unwrap();
    assert!(o.status.success());
    let help = text(&o.stdout);
    let (_, examples) = help
        .split_once("\nExamples:\n")
        .unwrap_or_else(|| panic!("no Examples: {help}"));
    // Then what the exit codes mean and where to read more.
    let (examples, _) = examples
        .split_once("\n\nExit status:\n")
        .unwrap_or_else(|| panic!("no Exit status after the examples: {help}"));
    for want in [
        "    rsend -p /mnt/pool/snaps/mon /mnt/pool/snaps/tue | ssh backup rreceive /srv/backup\n",
        "    rsend -d /dev/sdb -p snaps/mon snaps/tue | ssh backup rreceive /srv/backup\n",
        "    ssh backup rreceive --list /srv/backup |\n      rsend -d /dev/sdb --parent-from - snaps/today | ssh backup rreceive /srv/backup\n",
        "    t=$(ssh backup rreceive --resume-token /srv/backup/today) &&\n      rsend -d /dev/sdb --resume \"$t\" snaps/today | ssh backup rreceive /srv/backup\n",
    ] {
        assert!(examples.contains(want), "{want:?} in {examples}");
    }
    assert!(
        examples
            .trim_end()
            .ends_with("rsend -d /dev/sdb -p snaps/mon snaps/tue -n"),
        "{examples}"
    );
    assert!(
        !examples.contains("\n  -"),
        "Examples come after every option: {examples}"
    );
    assert!(
        help.contains("Resuming needs a stream made by rsend"),
        "--resume says what it needs: {help}"
    );
    let short = Command::new(rsend_bin()).arg("-h").output().unwrap();
    assert!(!text(&short.stdout).contains("Examples:"), "-h stays short");
}

#[test]
fn man_page_and_completions() {
    let man = Command::new(rsend_bin()).arg("--man").output().unwrap();
    assert!(man.status.success());
    let roff = text(&man.stdout);
    assert!(roff.contains("\n.TH rsend 1 "), "{roff}");
    assert!(roff.contains("\n.SH NAME\nrsend \\- "), "{roff}");
    let examples = roff
        .split_once("\n.SH EXAMPLES\n.nf\n")
        .map(|x| x.1.split_once("\n.SH ").map_or(x.1, |(e, _)| e));
    let examples = examples.unwrap_or_else(|| panic!("no EXAMPLES: {roff}"));
    assert!(
        examples.contains("rsend \\-d /dev/sdb \\-\\-parent\\-from \\- snaps/today"),
        "{examples}"
    );
    assert!(examples.trim_end().ends_with("\n.fi"), "{examples}");
    let bash = Command::new(rsend_bin())
        .args(["--completions", "bash"])
        .output()
        .unwrap();
    assert!(bash.status.success());
    let script = text(&bash.stdout);
    for flag in [
        "--resume",
        "--parent-from",
        "--dry-run",
        "--completions",
        "--man",
    ] {
        assert!(
            script.split([' ', '"', '\n']).any(|w| w == flag),
            "{flag} in {script}"
        );
    }
    assert!(script.contains("complete -F _rsend"), "{script}");
}

#[test]
fn a_dry_run_may_print_to_a_terminal_and_a_stream_may_not() {
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let size = stream(&img, &["chain.1"]).len();
    let cmd = |extra: &str| {
        format!(
            "{} -d {} {extra} chain.1",
            sh_quote(os(rsend_bin())),
            sh_quote(img.as_os_str())
        )
    };
    let Some((code, out)) = on_terminal(&cmd("-n")) else {
        return no_script("a_dry_run_may_print_to_a_terminal_and_a_stream_may_not");
    };
    let shown = text(&out);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.ends_with(&format!("\r\nsize\t{size}\r\n")),
        "the size of the stream: {shown}"
    );
    let (code, out) = on_terminal(&cmd("")).unwrap();
    let shown = text(&out);
    assert_eq!(code, Some(1), "{shown}");
    assert_eq!(
        shown,
        "rsend: error: standard output is a terminal; refusing to write a binary send \
         stream to it (use -f FILE or redirect standard output)\r\n"
    );
    assert!(find(&out, btrfs_stream::MAGIC).is_none());
}
