//! The admin endpoint's numbers are exact, not just present: response bytes,
//! connections closed by each reason, the active gauge, the snapshot's file
//! and byte counts, its generation and failed rebuilds; and `/healthz` and
//! `/readyz`, including the 503 a draining server must give its load
//! balancer. Every wait is on a scraped value, never a sleep.

use crate::support;

use std::io::Read;
use std::time::Duration;

use support::metrics::{admin_get, await_value, scrape, sum};
use support::*;

const CLOSED: &str = "shardhttpd_connections_closed_total";

/// Body bytes of the plain-text 404 the server writes ("not found\n").
const NOT_FOUND_BODY: u64 = 10;

/// Every response's body bytes are counted once, as queued: full bodies,
/// ranges, error bodies; nothing for HEAD or 304.
#[test]
fn response_bytes_total_is_the_sum_of_bodies_sent() {
    let site = Site::new("metrics-bytes");
    let server = Server::start(&site.root, &["--compress", "false"]);
    let admin = server.admin_addr();
    let mut c = server.connect();
    let mut want = 0u64;
    for _ in 0..3 {
        let r = c.roundtrip(&get("/index.html"));
        assert_eq!(r.body, INDEX_HTML);
        want += r.body.len() as u64;
    }
    let r = c.roundtrip(&get("/style.css"));
    assert_eq!(r.body, STYLE_CSS);
    want += r.body.len() as u64;
    let r = c.roundtrip(&get("/missing"));
    assert_eq!(r.status, 404);
    assert_eq!(r.body.len() as u64, NOT_FOUND_BODY, "{r:?}");
    want += NOT_FOUND_BODY;
    let r = c.roundtrip(&request("GET", "/digits.txt", &[("Range", "bytes=10-19")]));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &DIGITS[10..20]);
    want += 10;
    let r = c.roundtrip(&request("HEAD", "/index.html", &[]));
    assert_eq!(r.status, 200);
    let etag = r.must("etag").to_string();
    let r = c.roundtrip(&request("GET", "/index.html", &[("If-None-Match", &etag)]));
    assert_eq!(r.status, 304);
    await_value(
        admin,
        "shardhttpd_http_response_bytes_total",
        &[],
        want as f64,
    );
    await_value(admin, "shardhttpd_http_requests_total", &[], 8.0);
}

/// Six connections, each ended a different way, counted under exactly their
/// reason; the active gauge goes back to zero once they are gone.
#[test]
fn connections_closed_total_counts_each_reason_and_active_returns_to_zero() {
    let site = Site::new("metrics-close");
    let server = Server::start(
        &site.root,
        &[
            "--keepalive-timeout",
            "1",
            "--header-timeout",
            "1",
            "--max-requests-per-connection",
            "2",
        ],
    );
    let admin = server.admin_addr();

    // client: the client closes after its answer.
    let mut c = server.connect();
    assert_eq!(c.roundtrip(&get("/index.html")).status, 200);
    drop(c);
    // client: `Connection: close`.
    let mut c = server.connect();
    let r = c.roundtrip(&request("GET", "/index.html", &[("Connection", "close")]));
    assert!(r.says_close());
    assert_closed(&mut c, "Connection: close");
    // idle_timeout: a request, then silence past the keep-alive timeout.
    let mut idle = server.connect();
    assert_eq!(idle.roundtrip(&get("/index.html")).status, 200);
    // header_timeout: half a head, then silence past the header timeout.
    let mut slow = server.connect();
    slow.send(b"GET /index.html HTTP/1.1\r\nHost: x\r\n");
    // error: a malformed request.
    let mut bad = server.connect();
    bad.send(b"GARBAGE\r\n\r\n");
    assert_error_then_close(&mut bad, 400, "garbage");
    // max_requests: the second request of two allowed.
    let mut c = server.connect();
    assert!(!c.roundtrip(&get("/index.html")).says_close());
    assert!(c.roundtrip(&get("/index.html")).says_close());
    assert_closed(&mut c, "after max requests");

    idle.expect_closed(Duration::from_secs(5))
        .expect("idle keep-alive connection closed");
    let r = slow.read_response().expect("408 after the header timeout");
    assert_eq!(r.status, 408, "{r:?}");
    assert_closed(&mut slow, "after 408");

    for (reason, n) in [
        ("client", 2.0),
        ("idle_timeout", 1.0),
        ("header_timeout", 1.0),
        ("error", 1.0),
        ("max_requests", 1.0),
    ] {
        await_value(admin, CLOSED, &[("reason", reason)], n);
    }
    let samples = await_value(admin, "shardhttpd_connections_active", &[], 0.0);
    assert_eq!(sum(&samples, CLOSED, &[]), 6.0, "no other reason counted");
    assert_eq!(
        sum(&samples, "shardhttpd_connections_accepted_total", &[]),
        6.0
    );
}

/// A write that stalls past `--write-timeout` is counted as `write_timeout`.
#[test]
fn stalled_reader_is_counted_as_write_timeout() {
    const SIZE: usize = 64 * 1024 * 1024;
    let site = Site::new("metrics-write-timeout");
    site.write("big.bin", &vec![b'x'; SIZE]);
    let server = Server::start(&site.root, &["--write-timeout", "1"]);
    let admin = server.admin_addr();
    let mut c = server.connect();
    c.send(get("/big.bin").as_bytes());
    let head = c.read_head().expect("response head");
    assert_eq!(head.status, 200);
    // Read nothing more: the server must give up on this reader.
    await_value(admin, CLOSED, &[("reason", "write_timeout")], 1.0);
    await_value(admin, "shardhttpd_connections_active", &[], 0.0);
}

/// The snapshot gauges match the root exactly, follow a change, and a failed
/// rebuild is counted without touching them.
#[test]
fn snapshot_files_bytes_generation_and_failed_rebuilds_are_exact() {
    let dir = TempDir::new("metrics-snapshot");
    let good = dir.path().join("good");
    let files: [(&str, &[u8]); 3] = [
        ("a.txt", b"alpha\n"),
        ("b/c.txt", b"gamma, a little longer\n"),
        ("d.bin", &[7u8; 3000]),
    ];
    for (rel, body) in files {
        write_file(&good, rel, body);
    }
    let root = dir.path().join("current");
    std::os::unix::fs::symlink(&good, &root).unwrap();
    let server = Server::start(&root, &["--compress", "false", "--watch", "false"]);
    let admin = server.admin_addr();
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    let samples = scrape(admin);
    let value = |s: &[support::metrics::Sample], name: &str, f: &[(&str, &str)]| sum(s, name, f);
    assert_eq!(value(&samples, "shardhttpd_snapshot_files", &[]), 3.0);
    assert_eq!(
        value(
            &samples,
            "shardhttpd_snapshot_bytes",
            &[("encoding", "identity")]
        ),
        total as f64
    );
    assert_eq!(value(&samples, "shardhttpd_snapshot_generation", &[]), 1.0);
    assert_eq!(
        value(
            &samples,
            "shardhttpd_snapshot_rebuilds_total",
            &[("result", "failure")]
        ),
        0.0
    );

    // One more file: generation 2, one file and its bytes more.
    write_file(&good, "e.txt", b"epsilon\n");
    server.signal("HUP");
    let samples = await_value(admin, "shardhttpd_snapshot_generation", &[], 2.0);
    assert_eq!(value(&samples, "shardhttpd_snapshot_files", &[]), 4.0);
    assert_eq!(
        value(
            &samples,
            "shardhttpd_snapshot_bytes",
            &[("encoding", "identity")]
        ),
        (total + 8) as f64
    );
    assert_eq!(
        value(
            &samples,
            "shardhttpd_snapshot_rebuilds_total",
            &[("result", "success")]
        ),
        1.0
    );

    // The root now points nowhere: the rebuild fails, everything else stays.
    std::fs::remove_file(&root).unwrap();
    std::os::unix::fs::symlink(dir.path().join("missing"), &root).unwrap();
    server.signal("HUP");
    let samples = await_value(
        admin,
        "shardhttpd_snapshot_rebuilds_total",
        &[("result", "failure")],
        1.0,
    );
    assert_eq!(value(&samples, "shardhttpd_snapshot_generation", &[]), 2.0);
    assert_eq!(value(&samples, "shardhttpd_snapshot_files", &[]), 4.0);
    assert_eq!(
        value(
            &samples,
            "shardhttpd_snapshot_rebuilds_total",
            &[("result", "success")]
        ),
        1.0
    );
    assert_eq!(server.get("/e.txt").body, b"epsilon\n", "old snapshot kept");
}

/// `/healthz` says the process is up; `/readyz` says it takes traffic, and
/// turns 503 the moment a drain starts, while a response is still in flight
/// and the process is still alive, so a load balancer stops sending new
/// connections before the listener goes.
#[test]
fn healthz_and_readyz_including_503_while_draining() {
    const SIZE: usize = 32 * 1024 * 1024;
    let site = Site::new("metrics-ready");
    site.write("big.bin", &vec![b'r'; SIZE]);
    let mut server = Server::start(&site.root, &["--shutdown-grace", "30"]);
    let admin = server.admin_addr();
    assert_eq!(admin_get(admin, "/healthz").unwrap(), (200, "ok\n".into()));
    assert_eq!(
        admin_get(admin, "/readyz").unwrap(),
        (200, "ready\n".into())
    );

    // A response in flight holds the drain open.
    let mut c = server.connect();
    c.send(get("/big.bin").as_bytes());
    let head = c.read_head().expect("response head");
    assert_eq!(head.status, 200);
    server.signal("TERM");
    server
        .wait_for_log("shard draining", Duration::from_secs(5))
        .expect("the shards start draining");
    let mut last = None;
    let not_ready = poll_until(Duration::from_secs(5), || {
        let r = admin_get(admin, "/readyz").unwrap();
        let done = r.0 == 503;
        last = Some(r);
        done
    });
    assert!(not_ready, "/readyz while draining: {last:?}");
    assert_eq!(last.unwrap().1, "not ready\n");
    assert_eq!(admin_get(admin, "/healthz").unwrap(), (200, "ok\n".into()));
    assert!(server.is_alive(), "exited with a response in flight");

    // Reading the rest lets the drain finish.
    let mut got = c.take_buffered().len();
    let mut buf = vec![0u8; 1 << 20];
    while got < SIZE {
        let n = c.stream.read(&mut buf).expect("read body");
        assert!(n > 0, "EOF after {got} of {SIZE} bytes");
        got += n;
    }
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exit after the drain");
    assert_eq!(status.code(), Some(0));
}
