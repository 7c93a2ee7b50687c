//! The catalog against rreceive itself on every committed kernel stream:
//! each incremental scenario of testdata/incremental (full and
//! incremental, the six-night chain) and the v1/v2-compressed/concatenated
//! streams of testdata/kernel are received with rreceive and cataloged
//! (the full streams as their zstd files, so restores read compressed files
//! too), and each night restored whole from the catalog must equal what
//! rreceive received: content, owner, mode, times, xattrs, symlinks,
//! devices and hard-link groups.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run");
    assert_no_panic(&out);
    out
}

fn ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `zstd -dc SRC > DST`.
fn unzstd(src: &Path, dst: &Path) {
    let f = std::fs::File::create(dst).unwrap();
    let st = Command::new("zstd")
        .args(["-dcq", "--long=31"])
        .arg(src)
        .stdout(f)
        .status()
        .expect("zstd");
    assert!(st.success(), "zstd -d {}", src.display());
}

/// Receives `streams` in order into `recv` and catalogs `catalog_files`
/// (the same streams, some compressed) into `db`; then restores each night
/// in `nights` and compares it with the received one.
fn check_chain(
    what: &str,
    work: &Path,
    streams: &[PathBuf],
    catalog_files: &[PathBuf],
    nights: &[(&str, Leeway)],
) {
    let recv = work.join("recv");
    let out = work.join("restored");
    std::fs::create_dir_all(&recv).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let db = work.join("catalog.db");
    for s in streams {
        ok(
            Command::new(rreceive_bin()).arg("-f").arg(s).arg(&recv),
            &format!("{what}: rreceive -f {}", s.display()),
        );
    }
    for f in catalog_files {
        ok(
            Command::new(rreceive_bin())
                .arg("--catalog")
                .arg(&db)
                .arg("-f")
                .arg(f),
            &format!("{what}: --catalog -f {}", f.display()),
        );
    }
    for (night, leeway) in nights {
        ok(
            Command::new(rreceive_bin())
                .arg("--catalog")
                .arg(&db)
                .arg("--restore")
                .arg(night)
                .arg(&out),
            &format!("{what}: --restore {night}"),
        );
        assert_same_tree(
            &format!("{what}: {night}"),
            &recv.join(night),
            &out.join(night),
            *leeway,
        );
    }
}

#[test]
fn every_incremental_scenario_restores_as_rreceive_receives_it() {
    if !nix::unistd::geteuid().is_root() {
        println!(
            "SKIP every_incremental_scenario_restores_as_rreceive_receives_it: needs root (owners)"
        );
        return;
    }
    let dir = testdata().join("incremental").join("streams");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_suffix(".full.stream.zst").map(str::to_owned)
        })
        .filter(|n| n != "chain.0")
        .collect();
    names.sort();
    assert!(names.len() > 100, "{} scenarios", names.len());
    let exact = Leeway::default();
    for name in &names {
        let work = tempfile::tempdir().unwrap();
        let full_z = dir.join(format!("{name}.full.stream.zst"));
        let incr_z = dir.join(format!("{name}.incr.stream.zst"));
        let full = work.path().join("full.stream");
        let incr = work.path().join("incr.stream");
        unzstd(&full_z, &full);
        unzstd(&incr_z, &incr);
        let p = format!("{name}.p");
        let c = format!("{name}.c");
        check_chain(
            name,
            work.path(),
            &[full.clone(), incr.clone()],
            &[full_z, incr],
            &[(p.as_str(), exact), (c.as_str(), exact)],
        );
    }
    // The six-night chain.
    let work = tempfile::tempdir().unwrap();
    let mut plain = Vec::new();
    let mut cataloged = Vec::new();
    let mut nights = Vec::new();
    for i in 0..6 {
        let kind = if i == 0 { "full" } else { "incr" };
        let z = dir.join(format!("chain.{i}.{kind}.stream.zst"));
        let p = work.path().join(format!("chain.{i}.stream"));
        unzstd(&z, &p);
        plain.push(p.clone());
        cataloged.push(if i % 2 == 0 { z } else { p });
        nights.push(format!("chain.{i}"));
    }
    let nights: Vec<(&str, Leeway)> = nights.iter().map(|n| (n.as_str(), exact)).collect();
    check_chain("chain", work.path(), &plain, &cataloged, &nights);
    println!(
        "{} scenarios and a six-night chain restored from the catalog",
        names.len()
    );
}

#[test]
fn the_kernel_fixtures_restore_as_rreceive_receives_them() {
    if !nix::unistd::geteuid().is_root() {
        println!("SKIP the_kernel_fixtures_restore_as_rreceive_receives_them: needs root (owners)");
        return;
    }
    let k = testdata().join("kernel");
    let s = |n: &str| k.join(format!("{n}.stream"));
    let exact = Leeway::default();
    for (what, files, nights) in [
        ("v1", vec![s("full-v1"), s("incr-v1")], vec!["s1", "s2"]),
        (
            "v2 compressed",
            vec![s("full-v2-compressed"), s("incr-v2-compressed")],
            vec!["c1", "c2"],
        ),
        // Two nights in one file.
        ("concatenated", vec![s("concat-v1")], vec!["s1", "s2"]),
    ] {
        let work = tempfile::tempdir().unwrap();
        let nights: Vec<(&str, Leeway)> = nights
            .iter()
            .map(|n| {
                // c2's stream sends no UTIMES for its root: rreceive's root
                // has the time of the receive, the catalog the parent's.
                let l = if *n == "c2" {
                    Leeway {
                        root_times: true,
                        ..exact
                    }
                } else {
                    exact
                };
                (*n, l)
            })
            .collect();
        check_chain(what, work.path(), &files, &files, &nights);
    }
    let _ = OsStr::new("");
}
