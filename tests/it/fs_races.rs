//! Races between a build and the filesystem: a directory or (in the first
//! build) a file swapped for a symlink between the walk and the opens, and
//! a build that runs out of file descriptors. The swap is made
//! deterministic by the build's test hook
//! (`SHARDHTTPD_TEST_PAUSE_BEFORE_OPEN`), which holds a build after its walk
//! while a flag file exists next to the root.

use crate::support;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;
use std::time::Duration;

use support::*;

/// Name of the hook's flag file, beside each test's root.
const PAUSE_FLAG: &str = "pause-before-open";

/// Every server this suite starts has the hook armed; it only pauses a
/// build while that server's own flag file exists. Set once, before any
/// server is spawned, so no spawn reads the environment while it changes.
fn arm_hook() {
    static ARM: Once = Once::new();
    ARM.call_once(|| std::env::set_var("SHARDHTTPD_TEST_PAUSE_BEFORE_OPEN", PAUSE_FLAG));
}

/// Changes `rel` (so the watcher starts a rebuild), waits until that build
/// is held between its walk and its opens, runs `swap`, then lets the build
/// go on.
fn swap_during_build(site: &Site, rel: &str, swap: impl FnOnce()) {
    let flag = site.base().join(PAUSE_FLAG);
    let reached = site.base().join(format!("{PAUSE_FLAG}.reached"));
    fs::write(&flag, b"").unwrap();
    site.write(rel, b"changed, so a build starts\n");
    assert!(
        poll_until(Duration::from_secs(10), || reached.exists()),
        "the build never reached the hook"
    );
    swap();
    fs::remove_file(&flag).unwrap();
}

/// Replaces the directory `root/z/sub` with a symlink to `target`.
fn swap_dir_for_symlink(root: &Path, target: &Path) {
    fs::rename(root.join("z/sub"), root.join("z/sub.old")).unwrap();
    symlink(target, root.join("z/sub")).unwrap();
}

/// Polls `/z/sub/passwd` for `deadline`, asserting that no response ever
/// holds the outside file, until it answers `want` (status, body).
#[track_caller]
fn await_passwd(server: &Server, want: (u16, Option<&str>), deadline: Duration) {
    let mut last = None;
    let ok = poll_until(deadline, || {
        let r = server.get("/z/sub/passwd");
        assert!(
            !r.body_str().contains(SECRET),
            "a file outside the root was served: {r:?}"
        );
        let done = r.status == want.0 && want.1.is_none_or(|b| r.body == b.as_bytes());
        last = Some(r);
        done
    });
    assert!(ok, "wanted {want:?}; last {last:?}\n{}", server.log_text());
}

/// A site serving `/z/sub/passwd`, with a secret `passwd` in a directory
/// beside (outside) its root; the hook armed.
fn site_with_an_outside_secret(tag: &str) -> (Site, PathBuf) {
    arm_hook();
    let site = Site::new(tag);
    site.write("z/sub/passwd", b"inside\n");
    let outside = site.base().join("outside");
    write_file(&outside, "passwd", SECRET.as_bytes());
    (site, outside)
}

#[test]
fn directory_swapped_for_a_symlink_out_of_the_root_mid_build_is_not_followed() {
    let (site, outside) = site_with_an_outside_secret("race-out");
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    await_passwd(&server, (200, Some("inside\n")), Duration::from_secs(2));

    swap_during_build(&site, "z/sub/passwd", || {
        swap_dir_for_symlink(&site.root, &outside)
    });
    // The held build must not open the outside file; the one after it sees
    // a symlink out of the root and leaves the path out.
    await_passwd(&server, (404, None), Duration::from_secs(5));
    // And it stays out.
    let still = poll_until(Duration::from_millis(500), || {
        server.get("/z/sub/passwd").status != 404
    });
    assert!(!still, "the path came back");
}

#[test]
fn directory_swapped_for_a_symlink_inside_the_root_mid_build_is_followed() {
    arm_hook();
    let site = Site::new("race-in");
    site.write("z/sub/passwd", b"inside\n");
    site.write("other/passwd", b"other\n");
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    await_passwd(&server, (200, Some("inside\n")), Duration::from_secs(2));

    swap_during_build(&site, "z/sub/passwd", || {
        swap_dir_for_symlink(&site.root, Path::new("../other"))
    });
    await_passwd(&server, (200, Some("other\n")), Duration::from_secs(5));
}

/// The first build's walk does not stat regular files (the load takes
/// their stamps from the open file, see `Walk::lazy`): a file swapped for a
/// symlink out of the root between that walk and the opens must still never
/// be served, and the server starts with the path left out.
#[test]
fn file_swapped_for_a_symlink_out_of_the_root_in_the_first_build_is_not_followed() {
    let (site, outside) = site_with_an_outside_secret("race-first");
    let flag = site.base().join(PAUSE_FLAG);
    let reached = site.base().join(format!("{PAUSE_FLAG}.reached"));
    fs::write(&flag, b"").unwrap();
    let passwd = site.root.join("z/sub/passwd");
    let swapper = std::thread::spawn(move || {
        let held = poll_until(Duration::from_secs(10), || reached.exists());
        if held {
            fs::remove_file(&passwd).unwrap();
            symlink(outside.join("passwd"), &passwd).unwrap();
        }
        fs::remove_file(&flag).unwrap();
        held
    });
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    assert!(
        swapper.join().unwrap(),
        "the first build never reached the hook"
    );
    // The held build saw the swap as a change of the tree, and the one
    // after it left the symlink out.
    assert!(
        server
            .log_text()
            .contains("root changed during the initial build; retrying"),
        "{}",
        server.log_text()
    );
    await_passwd(&server, (404, None), Duration::from_secs(5));
}

/// Sets the soft fd limit of `pid` (the hard one stays, so it can be
/// raised again without privileges).
fn set_nofile(pid: u32, n: usize) {
    let status = Command::new("prlimit")
        .args([format!("--pid={pid}"), format!("--nofile={n}:")])
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit failed");
}

/// The soft limit at which `pid` has exactly one fd left to open: the
/// kernel hands out the lowest free number, and EMFILE means that number is
/// at the limit. (The count of open fds plus one is not that when an fd
/// numbered above the limit was inherited.)
fn limit_leaving_one(pid: u32) -> usize {
    let used: Vec<usize> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap() + 1
}

/// Issue 12 item 3, the reproduction: 40 files sent from fds under an
/// 80-fd limit, all touched. A snapshot no longer holds an fd per large
/// file, so the rebuild fits and every file is served at its new stamp.
#[test]
fn forty_large_files_touched_under_an_80_fd_limit_are_all_served() {
    if !installed("prlimit") {
        loud("SKIP: prlimit not installed");
        return;
    }
    arm_hook();
    let site = Site::new("emfile");
    let files: Vec<String> = (0..40).map(|i| format!("big/f{i:02}.bin")).collect();
    for (i, rel) in files.iter().enumerate() {
        site.write(rel, format!("file {i}\n").as_bytes());
    }
    let server = Server::start(
        &site.root,
        &[
            "--cores",
            "1",
            "--compress",
            "false",
            "--sendfile-threshold",
            "1",
        ],
    );
    for (i, rel) in files.iter().enumerate() {
        let r = server.get(&format!("/{rel}"));
        assert_eq!(r.status, 200, "{rel} before");
        assert_eq!(r.body_str(), format!("file {i}\n"));
    }
    set_nofile(server.pid(), 80);
    let before = server
        .log_lines()
        .iter()
        .filter(|l| l.contains("snapshot swapped"))
        .count();
    for rel in &files {
        let f = fs::File::options()
            .write(true)
            .open(site.root.join(rel))
            .unwrap();
        f.set_modified(std::time::SystemTime::now()).unwrap();
    }
    let swapped = poll_until(Duration::from_secs(10), || {
        server
            .log_lines()
            .iter()
            .filter(|l| l.contains("snapshot swapped"))
            .count()
            > before
    });
    assert!(swapped, "no rebuild published\n{}", server.log_text());
    // Each file is served at its new stamp (a stale one answers 503).
    for (i, rel) in files.iter().enumerate() {
        let mut last = None;
        let ok = poll_until(Duration::from_secs(5), || {
            let r = server.get(&format!("/{rel}"));
            let ok = r.status == 200 && r.body_str() == format!("file {i}\n");
            last = Some(r);
            ok
        });
        assert!(ok, "{rel} after: {last:?}\n{}", server.log_text());
    }
}

/// Issue 12 item 3: a build that runs out of fds fails as a whole (the old
/// snapshot stays; before, the files it could not open were dropped and a
/// partial snapshot published) and is retried once fds are back.
#[test]
fn a_build_out_of_fds_keeps_the_old_snapshot_and_is_retried() {
    if !installed("prlimit") {
        loud("SKIP: prlimit not installed");
        return;
    }
    arm_hook();
    let site = Site::new("emfile-retry");
    for i in 0..20 {
        site.write(&format!("f{i:02}.txt"), format!("v1 {i}\n").as_bytes());
    }
    let server = Server::start(
        &site.root,
        &[
            "--cores",
            "1",
            "--compress",
            "false",
            "--rescan-interval",
            "0.5",
        ],
    );
    // Accepting needs an fd too: talk over a connection opened beforehand.
    let mut conn = server.connect();
    let r = conn.roundtrip(&get("/f00.txt"));
    assert_eq!(r.body_str(), "v1 0\n");
    // One fd to spare: the build lists the root with it (a full walk),
    // then holds it as the root's directory fd, and every file open fails
    // with EMFILE.
    set_nofile(server.pid(), limit_leaving_one(server.pid()));
    for i in 0..20 {
        site.write(&format!("f{i:02}.txt"), format!("v2 {i}\n").as_bytes());
    }
    let failed = server.wait_for_log("out of resources", Duration::from_secs(10));
    assert!(
        failed.is_some(),
        "no build ran out of fds\n{}",
        server.log_text()
    );
    for i in 0..20 {
        let r = conn.roundtrip(&get(&format!("/f{i:02}.txt")));
        assert_eq!(r.status, 200, "f{i:02} during\n{}", server.log_text());
        assert_eq!(
            r.body_str(),
            format!("v1 {i}\n"),
            "a partial snapshot was published"
        );
    }
    set_nofile(server.pid(), 1024);
    let ok = poll_until(Duration::from_secs(5), || {
        conn.roundtrip(&get("/f19.txt")).body_str() == "v2 19\n"
    });
    assert!(
        ok,
        "the failed build was not retried\n{}",
        server.log_text()
    );
    for i in 0..20 {
        let r = conn.roundtrip(&get(&format!("/f{i:02}.txt")));
        assert_eq!(r.body_str(), format!("v2 {i}\n"));
    }
}
