//! Counters that say what happened, and only that (issue 35, defect 5):
//! the drain's log line counts the HTTP/2 streams that drain cut, not
//! those that clients abandoned before it began (128 after an h2spec run,
//! 85 446 after an h2load run, in a drain that cut none); and an HTTP/2
//! download finished from a file renamed over meanwhile is counted in
//! `shardhttpd_downloads_from_replaced_file_total`, as HTTP/1's are.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::h2::{self, Target};
use support::metrics::{await_value, generation};
use support::*;

use crate::http2::Both;

const ACTIVE: &str = "shardhttpd_connections_active";
const STREAMS: &str = "shardhttpd_h2_streams_total";
const FROM_REPLACED: &str = "shardhttpd_downloads_from_replaced_file_total";

/// A field of the `shard drained` line, as a number.
#[track_caller]
fn drained_field(line: &str, name: &str) -> u64 {
    log_field(line, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name}= in {line}"))
}

/// A stream that can never finish: its window is 0, and the client holds
/// it open for `secs` seconds (then leaves, or is cut off first).
fn stuck_stream(py: &std::path::Path, target: &Target, secs: &str) -> std::process::Child {
    Command::new(py)
        .arg(h2::probe_script())
        .arg("zero-window")
        .args(["--host", &target.addr.ip().to_string()])
        .args(["--port", &target.addr.port().to_string()])
        .args(["--path", "/big.bin", "--wait", secs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn h2probe.py")
}

/// One stream cut before the drain (its client left mid-response), one
/// cut by the drain (still stuck when `shutdown_grace` ran out): the
/// drain line says 1, where it said 2, the shard's lifetime.
#[test]
fn drain_line_counts_only_the_streams_the_drain_cut() {
    let Some(py) = h2::python_or_skip("drain counts") else {
        return;
    };
    let site = Site::new("drain-counts");
    site.write("big.bin", &vec![b'x'; 512 * 1024]);
    let mut server = Server::start(&site.root, &["--cores", "1", "--shutdown-grace", "2s"]);
    let admin = server.admin_addr();
    let target = Target::h2c(server.plain_addr());
    // Before the drain: a client that asks and leaves, its stream unfinished.
    let gone = stuck_stream(&py, &target, "0.3")
        .wait_with_output()
        .expect("h2probe.py");
    assert!(gone.status.success(), "h2probe.py failed");
    await_value(admin, ACTIVE, &[], 0.0);
    // The drain's own cut: a stream stuck until the grace runs out.
    let mut stuck = stuck_stream(&py, &target, "30");
    await_value(admin, STREAMS, &[], 2.0);
    server.signal("TERM");
    let line = server
        .wait_for_log("shard drained", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no drain summary\n{}", server.log_text()));
    let _ = stuck.kill();
    let _ = stuck.wait();
    assert_eq!(
        drained_field(&line, "h2_streams_cut"),
        1,
        "the drain cut one stream (the other was cut before it began): {line}"
    );
    assert_eq!(drained_field(&line, "deadline"), 1, "{line}");
    assert_eq!(drained_field(&line, "h2_refused_after_goaway"), 0, "{line}");
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
}

/// h2spec's and h2load's cut streams were the lifetime's: a clean drain,
/// after a client abandoned a stream, reports 0 as README promises.
#[test]
fn a_clean_drain_after_abandoned_streams_reports_none_cut() {
    let Some(py) = h2::python_or_skip("drain counts") else {
        return;
    };
    let site = Site::new("drain-counts-clean");
    site.write("big.bin", &vec![b'x'; 512 * 1024]);
    let mut server = Server::start(&site.root, &["--cores", "1"]);
    let admin = server.admin_addr();
    let target = Target::h2c(server.plain_addr());
    for _ in 0..3 {
        let out = stuck_stream(&py, &target, "0.2")
            .wait_with_output()
            .expect("h2probe.py");
        assert!(out.status.success(), "h2probe.py failed");
    }
    await_value(admin, ACTIVE, &[], 0.0);
    await_value(admin, STREAMS, &[], 3.0);
    server.signal("TERM");
    let line = server
        .wait_for_log("shard drained", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no drain summary\n{}", server.log_text()));
    assert_eq!(
        drained_field(&line, "h2_streams_cut"),
        0,
        "streams cut before the drain began are not the drain's: {line}"
    );
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
}

/// `len` bytes, period 251 from `seed`, so a byte of the other version
/// shows.
fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + seed) % 251) as u8).collect()
}

/// An HTTP/2 download sent from the file's fd, renamed over after its
/// first window: it ends whole with the old bytes, and is counted as
/// HTTP/1's downloads are. Over h2c and over TLS.
#[test]
fn h2_downloads_from_a_renamed_over_file_are_counted() {
    let Some(py) = h2::python_or_skip("h2 downloads from a replaced file") else {
        return;
    };
    let site = Site::new("drain-counts-replaced");
    let size = 2 * 1024 * 1024 + 17;
    let both = Both::start(
        &site,
        &[
            "--cores",
            "1",
            "--compress",
            "false",
            "--sendfile-threshold",
            "1048576",
        ],
    );
    let admin = both.server().admin_addr();
    let plain = both.server().plain_addr();
    for (round, t) in both.targets().into_iter().enumerate() {
        let what = format!("rename over an h2 download over {}", t.name());
        // A name of its own per round: no GET here ends on an inode
        // renamed over, but the download under test.
        let rel = format!("dl{round}.bin");
        let path = format!("/{rel}");
        let old = pattern(2 * round, size);
        let new = pattern(2 * round + 1, size);
        site.write(&rel, &old);
        assert!(
            poll_until(Duration::from_secs(10), || {
                let r = Conn::connect(plain).roundtrip(&get(&path));
                r.status == 200 && r.body == old
            }),
            "{what}: the file is not served"
        );
        let run = h2::Running::start(
            &py,
            "reload",
            &t,
            &["--path", &path, "--size", "20000", "--wait", "20"],
        );
        assert_eq!(run.first["status"], 200, "{what}: {}", run.first);
        let before = generation(admin);
        site.replace(&rel, &new);
        // Stream 3 (opened once stdin closes) gets the new version.
        assert!(
            poll_until(Duration::from_secs(10), || generation(admin) > before),
            "{what}: no rebuild after the rename"
        );
        let v = run.finish();
        assert_eq!(
            v["sha256"]["1"],
            sha256_hex(&old).as_str(),
            "{what}: stream 1 is not the old version whole: {v}"
        );
        assert_eq!(
            v["sha256"]["3"],
            sha256_hex(&new).as_str(),
            "{what}: stream 3 is not the new version: {v}"
        );
        // Stream 1's download, from the renamed-over file; stream 3's
        // file keeps its name.
        await_value(admin, FROM_REPLACED, &[], (round + 1) as f64);
    }
}
