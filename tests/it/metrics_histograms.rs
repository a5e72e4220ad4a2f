//! The two latency histograms count what they say, in the right buckets:
//! `shardhttpd_http_request_duration_seconds` (request parsed → response
//! handed to the kernel) and `shardhttpd_tls_handshake_duration_seconds`
//! (accept → handshake done). Counts are exact; sums and buckets are held
//! to what the client itself measured, so responses held back by a reader
//! that waits, or a handshake the client stalls, must land above the fast
//! buckets and add at least the wait to the sum. Every wait on the server
//! is on a scraped value.

use crate::support;

use std::time::{Duration, Instant};

use support::metrics::{await_value, sum, Sample};
use support::tls::{Ca, TlsServer, Transport, Wire};
use support::*;

const REQUESTS: &str = "shardhttpd_http_request_duration_seconds";
const HANDSHAKES: &str = "shardhttpd_tls_handshake_duration_seconds";

/// How long the client keeps a connection waiting.
const STALL: Duration = Duration::from_millis(400);

/// The least of that wait the server must see: its clock starts when it
/// gets to the connection (the batch read, the accept), which a loaded
/// machine may delay by some milliseconds.
const SEEN: f64 = STALL.as_secs_f64() / 2.0;

fn series(samples: &[Sample], histogram: &str, suffix: &str) -> f64 {
    sum(samples, &format!("{histogram}_{suffix}"), &[])
}

/// Cumulative count of the bucket with upper bound `le`.
fn bucket(samples: &[Sample], histogram: &str, le: &str) -> f64 {
    sum(samples, &format!("{histogram}_bucket"), &[("le", le)])
}

#[test]
fn request_durations_count_every_response_and_a_held_back_batch_high() {
    let site = Site::new("hist-requests");
    // Eight of these pipelined are 16 MiB, more than the socket buffers of
    // both ends hold: the batch is handed to the kernel only once the
    // client reads.
    let big = vec![b'x'; 2 << 20];
    site.write("big.bin", &big);
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    let admin = server.admin_addr();

    let t0 = Instant::now();
    let mut c = server.connect();
    for _ in 0..5 {
        assert_eq!(c.roundtrip(&get("/index.html")).status, 200);
    }
    let fast_took = t0.elapsed().as_secs_f64();
    let samples = await_value(admin, &format!("{REQUESTS}_count"), &[], 5.0);
    let fast_sum = series(&samples, REQUESTS, "sum");
    assert!(
        fast_sum > 0.0 && fast_sum <= 5.0 * fast_took,
        "five immediate responses sum to {fast_sum} s, the client saw {fast_took} s in all"
    );
    assert_eq!(bucket(&samples, REQUESTS, "+Inf"), 5.0);

    let mut slow = server.connect();
    let batch: String = (0..8).map(|_| get("/big.bin")).collect();
    let sent = Instant::now();
    slow.send(batch.as_bytes());
    std::thread::sleep(STALL);
    for i in 0..8 {
        let r = slow
            .read_response()
            .unwrap_or_else(|e| panic!("response {i}: {e}"));
        assert_eq!((r.status, r.body.len()), (200, big.len()), "response {i}");
    }
    let took = sent.elapsed().as_secs_f64();
    let samples = await_value(admin, &format!("{REQUESTS}_count"), &[], 13.0);
    assert_eq!(bucket(&samples, REQUESTS, "+Inf"), 13.0);
    // Queued together, handed over together after the stall: each of the
    // eight counts the whole wait.
    let batch_sum = series(&samples, REQUESTS, "sum") - fast_sum;
    let stall = STALL.as_secs_f64();
    assert!(
        batch_sum >= 8.0 * SEEN && batch_sum <= 8.0 * took,
        "eight held-back responses sum to {batch_sum} s; each waited {stall} s (at least {SEEN} s seen) and at most {took} s"
    );
    assert_eq!(
        bucket(&samples, REQUESTS, "10"),
        13.0,
        "every response was handed over within 10 s: {samples:#?}"
    );
    let fast_buckets = bucket(&samples, REQUESTS, "0.25");
    assert!(
        fast_buckets <= 5.0,
        "{fast_buckets} responses in le=0.25, but eight waited {stall} s: {samples:#?}"
    );
}

#[test]
fn handshake_durations_count_every_handshake_and_a_stalled_one_high() {
    let site = Site::new("hist-handshakes");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "leaf", &["localhost"]);
    let s = TlsServer::start(&site.root, &ca, &leaf, &["--cores", "1"]);
    let admin = s.server.admin_addr();

    let t0 = Instant::now();
    for _ in 0..3 {
        let mut w = s.wire(Transport::Tls);
        assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    }
    let fast_took = t0.elapsed().as_secs_f64();
    await_value(admin, "shardhttpd_tls_handshakes_total", &[], 3.0);
    let samples = await_value(admin, &format!("{HANDSHAKES}_count"), &[], 3.0);
    let fast_sum = series(&samples, HANDSHAKES, "sum");
    assert!(
        fast_sum > 0.0 && fast_sum <= 3.0 * fast_took,
        "three handshakes sum to {fast_sum} s, the client saw {fast_took} s in all"
    );

    // The ClientHello, then silence: the server has answered it and waits
    // for the client's Finished.
    let connected = Instant::now();
    let mut w = Wire::try_tls_pausing(s.tls_addr, &s.client, "localhost", STALL)
        .expect("handshake after a pause");
    // The server sees the handshake end when the client's Finished
    // arrives, which may be with the first request: bound it by the
    // answer to that.
    assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    let took = connected.elapsed().as_secs_f64();
    await_value(admin, "shardhttpd_tls_handshakes_total", &[], 4.0);
    let samples = await_value(admin, &format!("{HANDSHAKES}_count"), &[], 4.0);
    assert_eq!(bucket(&samples, HANDSHAKES, "+Inf"), 4.0);
    let stalled = series(&samples, HANDSHAKES, "sum") - fast_sum;
    let stall = STALL.as_secs_f64();
    assert!(
        stalled >= SEEN && stalled <= took,
        "the stalled handshake took {stalled} s by the server; the client paused {stall} s (at least {SEEN} s seen) and saw {took} s"
    );
    assert_eq!(
        bucket(&samples, HANDSHAKES, "2.5"),
        4.0,
        "every handshake ended within 2.5 s: {samples:#?}"
    );
    let fast_buckets = bucket(&samples, HANDSHAKES, "0.1");
    assert!(
        fast_buckets <= 3.0,
        "{fast_buckets} handshakes in le=0.1, but one was stalled {stall} s: {samples:#?}"
    );
}
