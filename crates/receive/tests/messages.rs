//! What rreceive says and does at its edges (issue 12), run against the
//! built binary with the kernel's streams of testdata/kernel received into
//! plain directories (no root, no mounts): a subvolume received again, a
//! directory in the way, a receive killed and one cut off (resumable),
//! `--list` and `--list --json`, the progress shown on a terminal and
//! none off one, `--help`, `--man` and `--completions`.
//!
//! Terminals come from util-linux `script`; a test that needs it and does
//! not find it says so and passes.

mod common;

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::{no_script, on_terminal, sh_quote};

use btrfs_stream::{Command as Cmd, Reader, Writer};
use common::{differences, plain_state, rreceive_bin, testdata, walk, Leeway};

/// testdata/kernel/NAME.stream.
fn kernel_stream(name: &str) -> PathBuf {
    testdata().join("kernel").join(format!("{name}.stream"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs rreceive with `args`, nothing on standard input.
fn rreceive(args: &[&OsStr]) -> Output {
    Command::new(rreceive_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rreceive")
}

/// `rreceive -f FILE DEST`.
fn receive_file(file: &Path, dest: &Path) -> Output {
    rreceive(&[OsStr::new("-f"), file.as_os_str(), dest.as_os_str()])
}

/// `rreceive DEST` with `data` on a pipe.
fn receive_piped(data: &[u8], dest: &Path) -> Output {
    // Its journal goes with the process, as when the machine goes down
    // (a journal that survives is tested in crates/send/tests/resume.rs).
    let journals = tempfile::tempdir().unwrap();
    let mut child = Command::new(rreceive_bin())
        .arg(dest)
        .env("RRECEIVE_JOURNAL_DIR", journals.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rreceive");
    // A receive that refuses the stream stops reading it.
    match child.stdin.take().unwrap().write_all(data) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.unwrap(),
    }
    child.wait_with_output().unwrap()
}

fn assert_received(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: rreceive failed ({}): {}",
        o.status,
        text(&o.stderr)
    );
}

/// The stream's first command, SUBVOL or SNAPSHOT: its name, uuid,
/// ctransid, and for a SNAPSHOT the parent's uuid and ctransid.
struct Head {
    name: Vec<u8>,
    uuid: uuid::Uuid,
    ctransid: u64,
    parent: Option<(uuid::Uuid, u64)>,
}

fn head(data: &[u8]) -> Head {
    let mut r = Reader::from_bytes(data);
    match r.next_command().unwrap().unwrap() {
        Cmd::Subvol {
            path,
            uuid,
            ctransid,
        } => Head {
            name: path.to_vec(),
            uuid,
            ctransid,
            parent: None,
        },
        Cmd::Snapshot {
            path,
            uuid,
            ctransid,
            clone_uuid,
            clone_ctransid,
        } => Head {
            name: path.to_vec(),
            uuid,
            ctransid,
            parent: Some((clone_uuid, clone_ctransid)),
        },
        other => panic!("stream starts with {other:?}"),
    }
}

/// `data` cut in the middle of the command that holds its middle byte:
/// the bytes kept, how many commands are whole in them, and where the one
/// cut starts.
fn cut_in_half(data: &[u8]) -> (Vec<u8>, u64, u64) {
    let middle = data.len() as u64 / 2;
    let mut r = Reader::from_bytes(data);
    while let Some((_, pos)) = r.next_framed().unwrap() {
        if pos.offset + pos.len > middle {
            let cut = pos.offset + pos.len / 2;
            return (data[..cut as usize].to_vec(), pos.index - 1, pos.offset);
        }
    }
    panic!("no command holds byte {middle}");
}

/// Receives the first half of `data` from a pipe, then kills rreceive
/// (SIGKILL) while it waits for the rest: the subvolume it started is
/// left as a killed receive leaves it.
fn receive_killed(data: &[u8], dest: &Path) {
    let name = head(data).name;
    let sv = dest.join(std::str::from_utf8(&name).unwrap());
    // Its journal goes with the process, as when the machine goes down
    // (a journal that survives is tested in crates/send/tests/resume.rs).
    let journals = tempfile::tempdir().unwrap();
    // Without durable checkpoints either (a power loss then leaves it to
    // be received again; one with them resumes, see resume.rs).
    let mut child = Command::new(rreceive_bin())
        .arg("--no-durable")
        .arg(dest)
        .env("RRECEIVE_JOURNAL_DIR", journals.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run rreceive");
    let mut input = child.stdin.take().unwrap();
    input.write_all(&data[..data.len() / 2]).unwrap();
    input.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while plain_state(&sv).is_none() {
        assert!(
            Instant::now() < deadline,
            "rreceive did not start {}",
            sv.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let it apply what it has; it then waits on the pipe.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    let st = child.wait().unwrap();
    assert!(st.code().is_none(), "rreceive was killed: {st}");
    drop(input);
}

/// `s` with each run of spaces as one space.
fn squeezed(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out
}

const AGAIN: &str = "delete it (btrfs subvolume delete on btrfs, else rm -rf) to receive it again";

#[test]
fn a_subvolume_received_again_is_refused_and_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let file = kernel_stream("full-v1");
    let u = head(&std::fs::read(&file).unwrap()).uuid;
    assert_received(&receive_file(&file, &dest), "first receive");
    let before = walk(&dest);
    let o = receive_file(&file, &dest);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        format!(
            "rreceive: error: subvolume s1 was already received in {} (complete, received uuid \
             {u}): nothing was changed; {AGAIN}: 's1' (command #1 SUBVOL at byte 17)\n",
            dest.display()
        )
    );
    // Atimes aside: walking the tree reads directories and symlinks; and
    // DEST's own times: the receive's lock file (DEST/.rreceive-lock-*)
    // and its probe come and go in it.
    let leeway = Leeway {
        atimes: true,
        root_times: true,
        ..Leeway::default()
    };
    let d = differences(&before, &walk(&dest), leeway);
    assert!(d.is_empty(), "nothing was changed: {d:?}");
}

#[test]
fn a_directory_in_the_way_is_not_taken_for_a_received_subvolume() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir_all(dest.join("s3")).unwrap();
    std::fs::write(dest.join("s3/mine"), b"kept").unwrap();
    let o = receive_file(&kernel_stream("full-v1-subvol"), &dest);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        squeezed(&text(&o.stderr)),
        format!(
            "rreceive: error: {}/s3 exists and is not a subvolume rreceive received: move it \
             away, or receive into another directory: 's3' (command #1 SUBVOL at byte 17)\n",
            dest.display()
        )
    );
    let names: Vec<_> = std::fs::read_dir(dest.join("s3"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["mine"], "the directory is left alone");
    assert_eq!(std::fs::read(dest.join("s3/mine")).unwrap(), b"kept");
    assert_eq!(plain_state(&dest.join("s3")), None);
}

#[test]
fn a_killed_receive_is_incomplete_and_cannot_be_resumed() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let file = kernel_stream("full-v1");
    receive_killed(&std::fs::read(&file).unwrap(), &dest);
    let state = plain_state(&dest.join("s1")).unwrap();
    assert!(
        state.contains("complete=0") && !state.contains("resume="),
        "{state}"
    );

    let o = receive_file(&file, &dest);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        squeezed(&text(&o.stderr)),
        format!(
            "rreceive: error: subvolume s1 in {} is incomplete from an earlier receive that did \
             not stop cleanly (killed, or the system went down), so it cannot be resumed: \
             {AGAIN}: 's1' (command #1 SUBVOL at byte 17)\n",
            dest.display()
        )
    );

    let token = rreceive(&[OsStr::new("--resume-token"), dest.join("s1").as_os_str()]);
    assert_eq!(token.status.code(), Some(1));
    assert!(token.stdout.is_empty());
    assert_eq!(
        text(&token.stderr),
        format!(
            "rreceive: error: no resume token: {}/s1 is incomplete, and its receive did not stop \
             cleanly (killed, or the system went down): it cannot be resumed; delete it and \
             receive the stream again\n",
            dest.display()
        )
    );
}

#[test]
fn a_cut_off_receive_is_resumable_and_says_how() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let file = kernel_stream("full-v1");
    let data = std::fs::read(&file).unwrap();
    let h = head(&data);
    let (cut, n, offset) = cut_in_half(&data);
    let cut_file = tmp.path().join("cut.stream");
    std::fs::write(&cut_file, &cut).unwrap();

    let o = receive_file(&cut_file, &dest);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert_eq!(lines[0], "At subvol s1");
    assert!(
        lines[1].starts_with("rreceive: error: truncated command: ")
            && lines[1].ends_with(&format!(" at byte {offset} (command #{})", n + 1)),
        "{err}"
    );
    let sv = dest.join("s1");
    assert_eq!(
        lines[2],
        format!(
            "rreceive: subvolume {} stopped after command {n}; it is left incomplete, with what \
             was received kept and synced. To complete it, run the same rreceive -f {} {} again \
             once the file is whole (it checks it against what was received and goes on after \
             that command), or run the same rsend with --resume \"$(rreceive --resume-token \
             {})\" and receive that into the same destination (or delete it and receive the \
             whole stream again)",
            sv.display(),
            cut_file.display(),
            dest.display(),
            sv.display()
        )
    );

    // The whole stream again from a pipe (a stream file read again resumes).
    let o = receive_piped(&data, &dest);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        squeezed(&text(&o.stderr)),
        format!(
            "rreceive: error: subvolume s1 in {d} is incomplete: an earlier receive stopped after \
             command {n} (byte {offset}). Resume it with rsend --resume \"$(rreceive \
             --resume-token {d}/s1)\" and the same rsend arguments as before; from a stored \
             stream file, with the same rreceive -f FILE {d} again (or ... | rreceive --resume \
             {d}); or {AGAIN}: 's1' (command #1 SUBVOL at byte 17)\n",
            d = dest.display()
        )
    );

    let token = rreceive(&[OsStr::new("--resume-token"), sv.as_os_str()]);
    assert!(token.status.success(), "{}", text(&token.stderr));
    assert!(token.stderr.is_empty());
    let t = text(&token.stdout);
    let fields: Vec<&str> = t.trim_end_matches('\n').split(':').collect();
    assert_eq!(
        fields[..8],
        [
            "rsend1".to_string(),
            h.uuid.hyphenated().to_string(),
            h.ctransid.to_string(),
            "-".into(),
            "0".into(),
            "1".into(),
            n.to_string(),
            offset.to_string(),
        ],
        "{t}"
    );
    assert!(
        fields.len() == 9
            && fields[8].len() == 32
            && fields[8].bytes().all(|b| b.is_ascii_hexdigit()),
        "{t}"
    );
    assert!(t.ends_with('\n') && t.lines().count() == 1, "{t:?}");
}

/// A stream of one empty subvolume named `name`.
fn empty_subvol(name: &[u8], uuid: u128, ctransid: u64) -> Vec<u8> {
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::Subvol {
        path: name,
        uuid: uuid::Uuid::from_u128(uuid),
        ctransid,
    })
    .unwrap();
    w.write_command(&Cmd::End {}).unwrap();
    w.into_inner()
}

#[test]
fn list_shows_each_received_subvolume_and_its_status() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let read = |name: &str| std::fs::read(kernel_stream(name)).unwrap();
    // s1 complete (full), s2 complete (incremental against s1), c1 cut
    // off (resumable), s3 killed (incomplete), two odd names complete.
    let (full, incr, cut_full, killed) = (
        read("full-v1"),
        read("incr-v1"),
        read("full-v2-compressed"),
        read("full-v1-subvol"),
    );
    let tab = empty_subvol(b"tab\there", 0x7ab, 21);
    let odd = empty_subvol(b"odd\xff", 0x0dd, 22);
    assert_received(&receive_piped(&full, &dest), "full-v1");
    assert_received(&receive_piped(&incr, &dest), "incr-v1");
    let (cut, n, offset) = cut_in_half(&cut_full);
    assert_eq!(receive_piped(&cut, &dest).status.code(), Some(3));
    receive_killed(&killed, &dest);
    assert_received(&receive_piped(&tab, &dest), "tab");
    assert_received(&receive_piped(&odd, &dest), "odd");

    let (s1, s2) = (head(&full), head(&incr));
    assert_eq!(
        s2.parent,
        Some((s1.uuid, s1.ctransid)),
        "incr-v1 is against full-v1"
    );
    // name as shown, stream, status; by name (bytes), as listed
    let mut want = [
        ("c1".to_string(), head(&cut_full), "resumable"),
        ("odd\\377".to_string(), head(&odd), "complete"),
        ("s1".to_string(), s1, "complete"),
        ("s2".to_string(), s2, "complete"),
        ("s3".to_string(), head(&killed), "incomplete"),
        ("tab\\there".to_string(), head(&tab), "complete"),
    ];
    want.sort_by(|a, b| a.1.name.cmp(&b.1.name));

    let o = rreceive(&[OsStr::new("--list"), dest.as_os_str()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    let lines: Vec<String> = want
        .iter()
        .map(|(shown, h, status)| {
            let parent = h.parent.map_or("-".to_string(), |p| p.0.to_string());
            format!("{shown}\t{}\t{}\t{parent}\t{status}\n", h.uuid, h.ctransid)
        })
        .collect();
    assert_eq!(
        text(&o.stdout),
        lines.concat() + "# end of list: 6 subvolumes\n",
        "the subvolumes, then the end line"
    );

    let o = rreceive(&[OsStr::new("--list"), OsStr::new("--json"), dest.as_os_str()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let json: Vec<serde_json::Value> = want
        .iter()
        .map(|(_, h, status)| {
            let name = match std::str::from_utf8(&h.name) {
                Ok(s) => serde_json::json!(s),
                Err(_) => serde_json::json!({ "hex": hex(&h.name) }),
            };
            serde_json::json!({
                "name": name,
                "received_uuid": h.uuid.to_string(),
                "ctransid": h.ctransid,
                "incremental": h.parent.is_some(),
                "parent_uuid": h.parent.map(|p| p.0.to_string()),
                "parent_ctransid": h.parent.map_or(0, |p| p.1),
                "complete": *status == "complete",
                "resumable": *status == "resumable",
                "receiving": false,
                "pid": null,
            })
        })
        .chain([serde_json::json!({"end": true, "subvolumes": 6})])
        .collect();
    assert_eq!(got, json);
    assert_eq!(got[1]["name"], serde_json::json!({"hex": "6f6464ff"}));
    assert_eq!(got[5]["name"], serde_json::json!("tab\there"));
    assert!(
        text(&o.stdout).ends_with("\n{\"end\":true,\"subvolumes\":6}\n"),
        "{}",
        text(&o.stdout)
    );

    // The resumable one is what its token says.
    let token = rreceive(&[OsStr::new("--resume-token"), dest.join("c1").as_os_str()]);
    let t = text(&token.stdout);
    assert!(
        t.contains(&format!(":{n}:{offset}:")),
        "c1 stopped after command {n} at byte {offset}: {t}"
    );
}

#[test]
fn list_of_an_empty_destination_is_its_end_line() {
    let tmp = tempfile::tempdir().unwrap();
    let o = rreceive(&[OsStr::new("--list"), tmp.path().as_os_str()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "# end of list: 0 subvolumes\n");
    let o = rreceive(&[
        OsStr::new("--list"),
        OsStr::new("--json"),
        tmp.path().as_os_str(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "{\"end\":true,\"subvolumes\":0}\n");
    // A destination that cannot be listed prints no end line.
    let missing = tmp.path().join("missing");
    let o = rreceive(&[OsStr::new("--list"), missing.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn json_without_list_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let o = rreceive(&[OsStr::new("--json"), tmp.path().as_os_str()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("--json goes with --list, --ls or --find"),
        "{err}"
    );
    let o = rreceive(&[OsStr::new("--list")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("<DEST>"), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing was made"
    );
}

/// `'s'`, for `sh -c`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_terminal_shows_a_bar_with_the_total_when_the_stream_is_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = kernel_stream("full-v1");
    let size = std::fs::metadata(&file).unwrap().len();
    let cmd = format!(
        "{} -f {} {}",
        sh_quote(OsStr::new(rreceive_bin())),
        sh_quote(file.as_os_str()),
        sh_quote(tmp.path().as_os_str())
    );
    let Some((code, out)) = on_terminal(&cmd) else {
        return no_script("a_terminal_shows_a_bar_with_the_total_when_the_stream_is_a_file");
    };
    let shown = text(&out).escape_debug().to_string();
    assert_eq!(code, Some(0), "{shown}");
    assert!(contains(&out, b"receiving ["), "{shown}");
    let total = format!("/{:.2} KiB (", size as f64 / 1024.0);
    assert!(contains(&out, total.as_bytes()), "{total} in {shown}");
    assert!(contains(&out, b"At subvol s1\r\n"), "{shown}");
}

#[test]
fn a_terminal_shows_bytes_and_commands_when_the_stream_is_a_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let file = kernel_stream("full-v1");
    let data = std::fs::read(&file).unwrap();
    let (first, rest) = (tmp.path().join("first"), tmp.path().join("rest"));
    std::fs::write(&first, &data[..100_000]).unwrap();
    std::fs::write(&rest, &data[100_000..]).unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    // A pause mid-stream, so the spinner is drawn with what was applied.
    let cmd = format!(
        "{{ cat {}; sleep 1; cat {}; }} | {} {}",
        sh_quote(first.as_os_str()),
        sh_quote(rest.as_os_str()),
        sh_quote(OsStr::new(rreceive_bin())),
        sh_quote(dest.as_os_str())
    );
    let Some((code, out)) = on_terminal(&cmd) else {
        return no_script("a_terminal_shows_bytes_and_commands_when_the_stream_is_a_pipe");
    };
    let shown = text(&out).escape_debug().to_string();
    assert_eq!(code, Some(0), "{shown}");
    assert!(contains(&out, b"receiving "), "{shown}");
    assert!(
        !contains(&out, b"receiving ["),
        "no total on a pipe: {shown}"
    );
    assert!(contains(&out, b" commands"), "{shown}");
    assert!(contains(&out, b"At subvol s1\r\n"), "{shown}");
}

#[test]
fn off_a_terminal_there_are_no_escape_sequences() {
    let tmp = tempfile::tempdir().unwrap();
    let file = kernel_stream("full-v1");
    let data = std::fs::read(&file).unwrap();
    let (from_file, from_pipe, cut) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    for d in [&from_file, &from_pipe, &cut] {
        std::fs::create_dir(d).unwrap();
    }
    let o = receive_file(&file, &from_file);
    assert_received(&o, "-f");
    assert_eq!(text(&o.stderr), "At subvol s1\n");
    let o = receive_piped(&data, &from_pipe);
    assert_received(&o, "pipe");
    assert_eq!(text(&o.stderr), "At subvol s1\n");
    let o = receive_piped(&cut_in_half(&data).0, &cut);
    assert_eq!(o.status.code(), Some(3));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 3, "{err}");
    assert!(!err.contains(['\x1b', '\r']), "{}", err.escape_debug());
}

#[test]
fn help_ends_with_examples() {
    let o = rreceive(&[OsStr::new("--help")]);
    assert!(o.status.success());
    let help = text(&o.stdout);
    let (_, examples) = help
        .split_once("\nExamples:\n")
        .unwrap_or_else(|| panic!("no Examples: {help}"));
    // Then what the exit codes mean and where to read more.
    let examples = examples
        .split_once("\nExit status:\n")
        .map(|(e, _)| e)
        .unwrap_or_else(|| panic!("no Exit status after the examples: {help}"));
    for want in [
        "    rsend -d /dev/sdb -p snaps/mon snaps/tue | ssh backup rreceive /srv/backup\n",
        "    rreceive --list /srv/backup\n",
        "    t=$(ssh backup rreceive --resume-token /srv/backup/tue) &&\n      rsend -d /dev/sdb --resume \"$t\" snaps/tue | ssh backup rreceive /srv/backup\n",
    ] {
        assert!(examples.contains(want), "{want:?} in {examples}");
    }
    assert!(
        examples.ends_with("| ssh backup rreceive /srv/backup\n"),
        "{examples}"
    );
    assert!(
        !examples.contains("\n  -"),
        "Examples come last: {examples}"
    );
    assert!(
        help.contains("Resuming needs a stream made by rsend (or the stream file read again"),
        "{help}"
    );
    assert!(help.contains("`rsend --parent-from` reads this"), "{help}");
}

#[test]
fn man_page_and_completions() {
    let o = rreceive(&[OsStr::new("--man")]);
    assert!(o.status.success());
    let roff = text(&o.stdout);
    assert!(roff.contains("\n.TH rreceive 1 "), "{roff}");
    assert!(roff.contains("\n.SH NAME\nrreceive \\- "), "{roff}");
    let (_, examples) = roff
        .split_once("\n.SH EXAMPLES\n.nf\n")
        .unwrap_or_else(|| panic!("no EXAMPLES: {roff}"));
    let examples = examples.split_once("\n.SH ").map_or(examples, |(e, _)| e);
    assert!(
        examples.contains("    rreceive \\-\\-list /srv/backup\n"),
        "{examples}"
    );
    assert!(examples.contains("\\-\\-resume\\-token"), "{examples}");
    assert!(examples.trim_end().ends_with("\n.fi"), "{examples}");
    let o = rreceive(&[OsStr::new("--completions"), OsStr::new("bash")]);
    assert!(o.status.success());
    let script = text(&o.stdout);
    for flag in [
        "--resume-token",
        "--list",
        "--json",
        "--fake-super",
        "--man",
    ] {
        assert!(
            script.split([' ', '"', '\n', ')']).any(|w| w == flag),
            "{flag} in {script}"
        );
    }
    assert!(script.contains("complete -F _rreceive"), "{script}");
}

#[test]
fn refusals_of_an_existing_name_are_single_spaced() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir_all(dest.join("s3")).unwrap();
    let file = kernel_stream("full-v1");
    let data = std::fs::read(&file).unwrap();
    let cut = tmp.path().join("cut.stream");
    std::fs::write(&cut, cut_in_half(&data).0).unwrap();
    assert_eq!(receive_file(&cut, &dest).status.code(), Some(3));
    // The whole stream from a pipe (a stream file read again resumes).
    for o in [
        receive_file(&kernel_stream("full-v1-subvol"), &dest),
        receive_piped(&data, &dest),
    ] {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(!err.contains("  "), "{err:?}");
    }
}

/// A terminal on standard input cannot give a stream: rreceive says how to
/// give one (exit code 2) instead of waiting, and leaves DEST alone.
#[test]
fn a_terminal_on_standard_input_is_refused_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    for args in ["", "--dump", "-f -"] {
        let cmd = format!(
            "{} {args} {}",
            sh_quote(OsStr::new(rreceive_bin())),
            sh_quote(dest.as_os_str())
        );
        let Some((code, out)) = on_terminal(&cmd) else {
            return no_script("a_terminal_on_standard_input_is_refused_with_a_hint");
        };
        let shown = text(&out);
        assert_eq!(code, Some(2), "rreceive {args}: {shown}");
        assert!(
            shown.starts_with(
                "rreceive: error: standard input is a terminal, not a send stream: pipe one in \
                 (rsend ... | rreceive DEST) or name a stream file with -f FILE"
            ),
            "rreceive {args}: {shown}"
        );
        assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0, "{args}");
    }
    // A stream file still goes, whatever standard input is.
    let cmd = format!(
        "{} -q -f {} {}",
        sh_quote(OsStr::new(rreceive_bin())),
        sh_quote(kernel_stream("full-v1").as_os_str()),
        sh_quote(dest.as_os_str())
    );
    let Some((code, out)) = on_terminal(&cmd) else {
        return no_script("a_terminal_on_standard_input_is_refused_with_a_hint");
    };
    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(dest.join("s1").is_dir());
}

/// The warning about items the destination cannot store names their kinds
/// (here btrfs's compression property, which only btrfs stores), most first.
#[test]
fn the_skip_warning_names_the_kinds_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    // btrfs would store the property.
    let on_btrfs = nix::sys::statfs::statfs(tmp.path())
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::BTRFS_SUPER_MAGIC);
    if on_btrfs {
        println!(
            "SKIP the_skip_warning_names_the_kinds_skipped: the temporary directory is on btrfs"
        );
        return;
    }
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::Subvol {
        path: b"s",
        uuid: uuid::Uuid::from_u128(0x5c1),
        ctransid: 7,
    })
    .unwrap();
    for name in [&b"a"[..], b"b", b"c"] {
        w.write_command(&Cmd::Mkfile { path: name, ino: 0 })
            .unwrap();
    }
    for path in [&b""[..], b"a", b"b"] {
        w.write_command(&Cmd::SetXattr {
            path,
            name: b"btrfs.compression",
            data: b"zstd",
        })
        .unwrap();
    }
    w.write_command(&Cmd::SetXattr {
        path: b"c",
        name: b"btrfs.nosuchproperty",
        data: b"1",
    })
    .unwrap();
    w.write_command(&Cmd::End {}).unwrap();
    let o = receive_piped(&w.into_inner(), &dest);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "warning: 4 item(s) this filesystem cannot store were skipped: 3 xattr \
             btrfs.compression, 1 xattr btrfs.nosuchproperty (-v lists them)\n"
        ),
        "{err}"
    );
    assert!(dest.join("s/c").is_file());
}

/// `-q` and `-v` count as for btrfs receive (btrfs-progs 6.14): one level,
/// `-q` sets it to quiet and each `-v` raises it, in the order given. `-v
/// -q` says nothing, `-q -v` what no flag says (`At subvol`), `-q -v -v`
/// what `-v` says; `-q -v --dump` prints the dump. Each was refused before
/// ("cannot be used with").
#[test]
fn q_and_v_count_in_their_order_as_for_btrfs_receive() {
    let tmp = tempfile::tempdir().unwrap();
    let file = kernel_stream("full-v1");
    let run = |flags: &[&str]| -> Output {
        let dest = tmp.path().join(format!("d{}", flags.join("")));
        std::fs::create_dir(&dest).unwrap();
        let mut args: Vec<&OsStr> = flags.iter().map(OsStr::new).collect();
        args.extend([OsStr::new("-f"), file.as_os_str(), dest.as_os_str()]);
        let o = rreceive(&args);
        assert!(o.status.success(), "{flags:?}: {}", text(&o.stderr));
        assert!(dest.join("s1").is_dir(), "{flags:?}: received");
        o
    };
    let default = text(&run(&[]).stderr);
    assert_eq!(default, "At subvol s1\n");
    let verbose = text(&run(&["-v"]).stderr);
    assert!(
        verbose.starts_with("At subvol s1\n") && verbose.lines().count() > 1,
        "-v says more: {verbose}"
    );
    assert_eq!(text(&run(&["-v", "-q"]).stderr), "", "-v -q is quiet");
    assert_eq!(text(&run(&["-q"]).stderr), "", "-q");
    assert_eq!(text(&run(&["-q", "-v"]).stderr), default, "-q -v");
    assert_eq!(text(&run(&["-qv"]).stderr), default, "-qv");
    // The counts of the summary line differ only in what was timed.
    let same_lines = |a: &str, b: &str| a.lines().count() == b.lines().count();
    let qvv = text(&run(&["-q", "-v", "-v"]).stderr);
    assert!(
        same_lines(&qvv, &verbose),
        "-q -v -v as -v: {qvv}\n{verbose}"
    );

    let o = Command::new(rreceive_bin())
        .args(["-q", "-v", "--dump", "-f"])
        .arg(&file)
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .output()
        .expect("run rreceive");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let want = std::fs::read(testdata().join("kernel/full-v1.dump")).unwrap();
    assert!(o.stdout == want, "-q -v --dump prints btrfs-progs' dump");
}

/// `-E 0` goes on past a failed command and ends with the subvolume not
/// marked complete: every line it says but btrfs receive's `At subvol` is
/// rreceive's own, `rreceive: ` first.
#[test]
fn max_errors_0_says_every_line_as_rreceive() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::Subvol {
        path: b"x",
        uuid: uuid::Uuid::from_u128(0xe0),
        ctransid: 5,
    })
    .unwrap();
    w.write_command(&Cmd::Unlink { path: b"missing" }).unwrap();
    w.write_command(&Cmd::Mkdir {
        path: b"after",
        ino: 257,
    })
    .unwrap();
    w.write_command(&Cmd::End {}).unwrap();
    let file = tmp.path().join("err.stream");
    std::fs::write(&file, w.into_inner()).unwrap();
    let o = rreceive(&[
        OsStr::new("-E"),
        OsStr::new("0"),
        OsStr::new("-f"),
        file.as_os_str(),
        dest.as_os_str(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(dest.join("x/after").is_dir(), "went on after the error");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.first(), Some(&"At subvol x"), "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("subvolume x not marked complete: 1 command(s) failed")),
        "{err}"
    );
    for l in &lines[1..] {
        assert!(l.starts_with("rreceive: "), "{l:?} in {err}");
    }
}

/// An empty stream (a header and END, no subvolume: what rsend
/// --parent-from writes when the destination holds the snapshot already,
/// and what btrfs receive takes with exit code 0) is nothing sent: said,
/// exit code 0, DEST untouched. No input at all (not even a header: the
/// sender failed or never ran) is said as nothing sent too, exit code 3
/// (stopped; the next try can succeed), nothing kept.
#[test]
fn an_empty_stream_and_no_input_say_nothing_was_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("backup");
    std::fs::create_dir(&dest).unwrap();
    let mut w = Writer::new(Vec::new());
    w.start_stream(1).unwrap();
    w.write_command(&Cmd::End {}).unwrap();
    let empty_stream = w.into_inner();
    assert_eq!(empty_stream.len(), 17 + 10, "a header and END");
    let o = receive_piped(&empty_stream, &dest);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        "rreceive: nothing was sent: the stream holds no subvolume (the sender had nothing \
         to send)\n"
    );
    assert_eq!(
        std::fs::read_dir(&dest).unwrap().count(),
        0,
        "DEST untouched"
    );
    let file = tmp.path().join("empty.stream");
    std::fs::write(&file, &empty_stream).unwrap();
    let o = rreceive(&[
        OsStr::new("-q"),
        OsStr::new("-f"),
        file.as_os_str(),
        dest.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "", "-q");

    let none = tmp.path().join("none.stream");
    std::fs::write(&none, b"").unwrap();
    for o in [receive_piped(b"", &dest), receive_file(&none, &dest)] {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert_eq!(
            err,
            "rreceive: error: nothing was sent: the input is empty, without even a stream \
             header (a sender with nothing to send still sends one): did the sender fail? \
             Its own message says why; nothing was received, and a later try can succeed\n"
        );
        assert_eq!(
            std::fs::read_dir(&dest).unwrap().count(),
            0,
            "DEST untouched"
        );
    }
}
