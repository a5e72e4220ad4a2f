//! Shutdown does not wait behind other work (issue 12, item 7). Before the
//! fix a SIGHUP rebuild ran on the signal thread, so a SIGTERM that arrived
//! during a long rebuild was not even looked at until the rebuild finished,
//! and systemd killed a server that never drained.
//!
//! The rebuild is held deterministically by the build's test hook
//! (`SHARDHTTPD_TEST_PAUSE_BEFORE_OPEN`: a build that finds changes waits
//! after its walk while a flag file exists beside the root, up to 30 s), so
//! it stands for a rebuild of a root as large as one likes.

use crate::support;

use std::fs;
use std::io::Read;
use std::sync::Once;
use std::time::{Duration, Instant};

use support::*;

const PAUSE_FLAG: &str = "pause-before-open";

fn arm_hook() {
    static ARM: Once = Once::new();
    ARM.call_once(|| std::env::set_var("SHARDHTTPD_TEST_PAUSE_BEFORE_OPEN", PAUSE_FLAG));
}

#[test]
fn sigterm_during_a_sighup_rebuild_drains_and_exits_within_the_grace_period() {
    arm_hook();
    let site = Site::new("term-during-rebuild");
    for i in 0..20 {
        site.write(
            &format!("bulk/{i}.txt"),
            format!("file {i}\n").repeat(2000).as_bytes(),
        );
    }
    let mut server = Server::start(
        &site.root,
        &[
            "--cores",
            "1",
            "--watch",
            "false",
            "--compress",
            "false",
            "--shutdown-grace",
            "2",
        ],
    );
    // A keep-alive connection with a request in flight when SIGTERM comes.
    let mut conn = server.connect();
    assert_eq!(conn.roundtrip(&get("/index.html")).status, 200);

    let flag = site.base().join(PAUSE_FLAG);
    let reached = site.base().join(format!("{PAUSE_FLAG}.reached"));
    fs::write(&flag, b"").unwrap();
    site.write("index.html", b"changed, so the SIGHUP rebuild has work\n");
    server.signal("HUP");
    assert!(
        poll_until(Duration::from_secs(10), || reached.exists()),
        "the SIGHUP rebuild never reached the hook\n{}",
        server.log_text()
    );

    // The rebuild is now stuck (for up to 30 s). The server keeps serving
    // the old snapshot meanwhile...
    assert_eq!(server.get("/bulk/7.txt").status, 200);
    // ...and a SIGTERM is acted on at once.
    let sent = Instant::now();
    server.signal("TERM");
    assert!(
        server
            .wait_for_log("shutting down", Duration::from_secs(2))
            .is_some(),
        "SIGTERM not acted on within 2 s during a rebuild\n{}",
        server.log_text()
    );
    // The idle keep-alive connection is parted with by the drain once its
    // grace (here half the shutdown grace) has passed: a clean end of
    // file, not a reset.
    conn.stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut b = [0u8; 64];
    match conn.stream.read(&mut b) {
        Ok(0) => {}
        other => {
            panic!("idle keep-alive connection during the drain: {other:?}, not an end of file")
        }
    }
    let status = server.wait_exit(Duration::from_secs(5));
    let took = sent.elapsed();
    let _ = fs::remove_file(&flag);
    let status = status.unwrap_or_else(|| {
        panic!(
            "still running {took:?} after SIGTERM (grace 2 s) with a rebuild in progress\n{}",
            server.log_text()
        )
    });
    assert!(status.success(), "exit status {status} after SIGTERM");
    assert!(
        took < Duration::from_secs(4),
        "exit took {took:?} after SIGTERM; the grace period is 2 s"
    );
}

#[test]
fn repeated_sighups_during_a_rebuild_are_coalesced_and_do_not_block_sigterm() {
    arm_hook();
    let site = Site::new("hup-storm");
    let mut server = Server::start(
        &site.root,
        &[
            "--cores",
            "1",
            "--watch",
            "false",
            "--compress",
            "false",
            "--shutdown-grace",
            "2",
        ],
    );
    let flag = site.base().join(PAUSE_FLAG);
    let reached = site.base().join(format!("{PAUSE_FLAG}.reached"));
    fs::write(&flag, b"").unwrap();
    site.write("index.html", b"changed\n");
    server.signal("HUP");
    assert!(
        poll_until(Duration::from_secs(10), || reached.exists()),
        "the SIGHUP rebuild never reached the hook\n{}",
        server.log_text()
    );
    for _ in 0..20 {
        server.signal("HUP");
    }
    // Let the rebuild finish: one more rebuild at most follows (coalesced).
    fs::remove_file(&flag).unwrap();
    assert!(
        poll_until(Duration::from_secs(10), || server
            .get("/index.html")
            .body_str()
            .starts_with("changed")),
        "the rebuild never published\n{}",
        server.log_text()
    );
    let sent = Instant::now();
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(5));
    assert!(
        status.is_some_and(|s| s.success()),
        "no clean exit {:?} after SIGTERM\n{}",
        sent.elapsed(),
        server.log_text()
    );
}
