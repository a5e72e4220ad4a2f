//! HTTP/2 limits and defences, attacked with the scripted frame-level
//! client `tests/h2/h2probe.py`: rapid reset (CVE-2023-44487), server-
//! provoked resets ("MadeYouReset", CVE-2025-8671), CONTINUATION flood,
//! HPACK bomb, SETTINGS/PING/empty-DATA/PRIORITY floods, the zero-window
//! stall, more streams than `h2_max_concurrent_streams`, the idle and
//! header timeouts, and GOAWAY on SIGTERM with the streams in flight
//! finishing. Each checks what the server does on the wire, that it still
//! serves a fresh connection afterwards, and the counter it keeps.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::h2::{self, goaway_errors, Target};
use support::*;

use crate::http2::{big_body, h2_site, sized_body, Both, SIZES};

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    proc_status_field(Path::new(&format!("/proc/{pid}/status")), "VmRSS")
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// The server survived the attack and serves a fresh connection.
#[track_caller]
fn assert_still_serving(v: &serde_json::Value, what: &str) {
    assert_eq!(
        v["after"], 200,
        "{what}: a fresh connection afterwards: {v}"
    );
}

/// The attack ended with GOAWAY `error` and the connection closed.
#[track_caller]
fn assert_goaway(v: &serde_json::Value, error: &str, what: &str) {
    assert!(
        goaway_errors(v).iter().any(|e| e == error),
        "{what}: expected GOAWAY {error}: {v}"
    );
    assert_eq!(v["closed"], true, "{what}: connection left open: {v}");
}

/// The sum of a counter over `filter`, scraped now.
fn counter(server: &Server, name: &str, filter: &[(&str, &str)]) -> f64 {
    let samples = metrics::scrape(server.admin_addr());
    metrics::sum(&samples, name, filter)
}

/// Waits until counter `name` over `filter` is at least `min` (shards
/// publish every 250 ms).
#[track_caller]
fn await_counter_at_least(server: &Server, name: &str, filter: &[(&str, &str)], min: f64) {
    let mut last = 0.0;
    let ok = poll_until(Duration::from_secs(10), || {
        last = counter(server, name, filter);
        last >= min
    });
    assert!(
        ok,
        "{name}{filter:?} is {last}, want at least {min}; exported: {:#?}",
        metrics::scrape(server.admin_addr())
            .iter()
            .filter(|s| s.name.contains("h2") || s.name.contains("http2"))
            .collect::<Vec<_>>()
    );
}

/// The implementation's counters (src/metrics/h2.rs).
const DEFENCES: &str = "shardhttpd_h2_defences_total";
const GOAWAYS: &str = "shardhttpd_h2_goaways_sent_total";
const RESETS: &str = "shardhttpd_h2_resets_sent_total";
const STALLS: &str = "shardhttpd_h2_flow_control_stalls_total";

fn python(what: &str) -> Option<std::path::PathBuf> {
    h2::python_or_skip(what)
}

#[test]
fn rapid_reset_is_answered_with_enhance_your_calm() {
    let Some(py) = python("rapid reset") else {
        return;
    };
    let site = h2_site("h2-rapid-reset");
    let both = Both::start(&site, &[]);
    for t in both.targets() {
        let what = format!("rapid reset over {}", t.name());
        // Streams for a file past the 64 KiB default window: the server
        // cannot finish one before its RST_STREAM comes (a small file may
        // be answered whole in the pass that reads its HEADERS, and a reset
        // of a closed stream cancels nothing).
        let v = h2::probe(
            &py,
            "rapid-reset",
            &t,
            &["--path", "/big.bin", "--count", "20000", "--batch", "100"],
        );
        assert_goaway(&v, "ENHANCE_YOUR_CALM", &what);
        assert!(
            v["streams_opened"].as_u64().unwrap() < 20_000,
            "{what}: GOAWAY only after every stream: {v}"
        );
        assert_still_serving(&v, &what);
    }
    await_counter_at_least(both.server(), DEFENCES, &[("defence", "rapid_reset")], 2.0);
    await_counter_at_least(
        both.server(),
        GOAWAYS,
        &[("code", "enhance_your_calm")],
        2.0,
    );
}

/// Streams the server resets because of a client error (WINDOW_UPDATE of
/// 0 on an open stream, RFC 9113 §6.9) spend the same budget as the
/// client's own resets.
#[test]
fn server_provoked_resets_spend_the_same_budget() {
    let Some(py) = python("MadeYouReset") else {
        return;
    };
    let site = h2_site("h2-made-you-reset");
    let server = Server::start(&site.root, &[]);
    let t = Target::h2c(server.plain_addr());
    let v = h2::probe(
        &py,
        "made-you-reset",
        &t,
        &["--count", "20000", "--batch", "100"],
    );
    assert!(
        v["resets_by_error"]["PROTOCOL_ERROR"].as_u64() > Some(0),
        "a WINDOW_UPDATE of 0 on a stream is a stream error: {v}"
    );
    assert_goaway(&v, "ENHANCE_YOUR_CALM", "MadeYouReset");
    assert!(v["streams_opened"].as_u64().unwrap() < 20_000, "{v}");
    assert_still_serving(&v, "MadeYouReset");
    await_counter_at_least(&server, RESETS, &[("code", "protocol_error")], 1.0);
    await_counter_at_least(&server, DEFENCES, &[("defence", "rapid_reset")], 1.0);
}

#[test]
fn continuation_flood_is_cut_short() {
    let Some(py) = python("CONTINUATION flood") else {
        return;
    };
    let site = h2_site("h2-continuation");
    let server = Server::start(&site.root, &[]);
    let before = rss_kib(server.pid());
    let t = Target::h2c(server.plain_addr());
    let v = h2::probe(
        &py,
        "continuation-flood",
        &t,
        &["--count", "200000", "--size", "100", "--batch", "500"],
    );
    assert_eq!(v["closed"], true, "flood left the connection open: {v}");
    let errors = goaway_errors(&v);
    assert!(
        errors.iter().any(|e| {
            ["ENHANCE_YOUR_CALM", "PROTOCOL_ERROR", "COMPRESSION_ERROR"].contains(&e.as_str())
        }),
        "GOAWAY with an error before the close: {v}"
    );
    assert_eq!(v["statuses"]["1"], serde_json::Value::Null, "{v}");
    let grown = rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 16 * 1024, "RSS grew {grown} KiB during the flood");
    assert_still_serving(&v, "CONTINUATION flood");
    await_counter_at_least(&server, DEFENCES, &[("defence", "continuation_flood")], 1.0);
}

/// Runs h2probe.py's HPACK bomb against a fresh server: one 3 000-byte
/// header put in the decoder's dynamic table (the default 4 096 bytes,
/// which the server does not shrink: the bomb must be possible), then
/// `references` one-byte references to it on stream 3. Returns the
/// server and the probe's summary, once the checks both sizes share
/// (stream 1 answered, RSS, a fresh connection served) have passed.
fn hpack_bomb(py: &Path, tag: &str, references: u32) -> (Server, serde_json::Value) {
    let site = h2_site(tag);
    let server = Server::start(&site.root, &[]);
    let before = rss_kib(server.pid());
    let t = Target::h2c(server.plain_addr());
    let count = references.to_string();
    let v = h2::probe(py, "hpack-bomb", &t, &["--size", "3000", "--count", &count]);
    assert_eq!(
        v["skipped"],
        serde_json::Value::Null,
        "the server's decoder table holds no bomb: {v}"
    );
    assert_eq!(v["value_size"], 3000, "{v}");
    assert_eq!(v["statuses"]["1"], 200, "the header put in the table: {v}");
    let grown = rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 16 * 1024, "RSS grew {grown} KiB decoding the bomb");
    assert_still_serving(&v, "HPACK bomb");
    (server, v)
}

/// A bomb whose compressed block fits the block cap (20 000 references,
/// 20 KB on the wire) but decodes to 60 MB: the decoded list passes
/// `max_head_bytes`, so its stream gets 431 and the connection goes on
/// (README: "an HPACK bomb costs a counter, not memory").
#[test]
fn hpack_bomb_within_the_block_cap_gets_431_on_its_stream() {
    let Some(py) = python("HPACK bomb") else {
        return;
    };
    let (server, v) = hpack_bomb(&py, "h2-hpack-bomb-431", 20_000);
    assert_eq!(v["statuses"]["3"], 431, "{v}");
    assert!(goaway_errors(&v).is_empty(), "no connection error: {v}");
    assert_eq!(v["closed"], false, "the connection goes on: {v}");
    let admin = server.admin_addr();
    let samples = metrics::await_value(admin, DEFENCES, &[("defence", "header_list_size")], 1.0);
    assert_eq!(
        metrics::sum(&samples, DEFENCES, &[("defence", "continuation_flood")]),
        0.0
    );
}

/// A bomb past the header block cap (60 000 references, 60 KB on the
/// wire, over 2 × 16 KiB): refused before it is decoded whole, with
/// GOAWAY ENHANCE_YOUR_CALM naming stream 1 as the last taken; stream 3
/// gets no answer.
#[test]
fn hpack_bomb_past_the_block_cap_gets_goaway_enhance_your_calm() {
    let Some(py) = python("HPACK bomb") else {
        return;
    };
    let (server, v) = hpack_bomb(&py, "h2-hpack-bomb-goaway", 60_000);
    assert_goaway(&v, "ENHANCE_YOUR_CALM", "HPACK bomb past the block cap");
    assert_eq!(v["goaways"][0]["last_stream_id"], 1, "{v}");
    assert_eq!(v["statuses"]["3"], serde_json::Value::Null, "{v}");
    let admin = server.admin_addr();
    let samples = metrics::await_value(admin, DEFENCES, &[("defence", "continuation_flood")], 1.0);
    assert_eq!(
        metrics::sum(&samples, DEFENCES, &[("defence", "header_list_size")]),
        0.0
    );
    assert_eq!(
        metrics::sum(&samples, GOAWAYS, &[("code", "enhance_your_calm")]),
        1.0
    );
}

fn flood(kind: &str, count: &str) {
    let Some(py) = python(&format!("{kind} flood")) else {
        return;
    };
    let site = h2_site(&format!("h2-flood-{kind}"));
    let server = Server::start(&site.root, &[]);
    let t = Target::h2c(server.plain_addr());
    let v = h2::probe(
        &py,
        "flood",
        &t,
        &["--kind", kind, "--count", count, "--batch", "1000"],
    );
    let what = format!("{kind} flood");
    assert_goaway(&v, "ENHANCE_YOUR_CALM", &what);
    assert_still_serving(&v, &what);
    await_counter_at_least(&server, DEFENCES, &[("defence", "control_flood")], 1.0);
    await_counter_at_least(&server, GOAWAYS, &[("code", "enhance_your_calm")], 1.0);
}

#[test]
fn settings_flood_is_answered_with_enhance_your_calm() {
    flood("settings", "200000");
}

#[test]
fn ping_flood_is_answered_with_enhance_your_calm() {
    flood("ping", "200000");
}

#[test]
fn empty_data_flood_is_answered_with_enhance_your_calm() {
    flood("empty-data", "200000");
}

#[test]
fn priority_flood_is_answered_with_enhance_your_calm() {
    flood("priority", "200000");
}

/// A reader that never opens its window: the write timeout closes it.
#[test]
fn zero_window_stall_is_closed_after_the_write_timeout() {
    let Some(py) = python("zero window") else {
        return;
    };
    let site = h2_site("h2-zero-window");
    let both = Both::start(
        &site,
        &["--write-timeout", "1", "--keepalive-timeout", "60"],
    );
    for t in both.targets() {
        let what = format!("zero window over {}", t.name());
        let v = h2::probe(
            &py,
            "zero-window",
            &t,
            &["--path", "/big.bin", "--wait", "10"],
        );
        assert_eq!(v["data_bytes"], 0, "{what}: DATA past a zero window: {v}");
        let took = v["closed_after"]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: still open after 10 s: {v}"));
        assert!(
            (0.5..5.0).contains(&took),
            "{what}: closed after {took} s with write_timeout 1 s: {v}"
        );
    }
    await_counter_at_least(both.server(), STALLS, &[], 2.0);
}

/// RFC 9113 §5.1.2: streams past the advertised limit are refused with a
/// stream error (REFUSED_STREAM or PROTOCOL_ERROR); those admitted finish.
#[test]
fn streams_past_max_concurrent_streams_are_refused() {
    let Some(py) = python("max concurrent streams") else {
        return;
    };
    let site = h2_site("h2-max-streams");
    let server = Server::start(&site.root, &["--h2-max-concurrent-streams", "8"]);
    let t = Target::h2c(server.plain_addr());
    let v = h2::probe(
        &py,
        "max-streams",
        &t,
        &["--path", "/sized/7.txt", "--extra", "4", "--wait", "10"],
    );
    assert_eq!(v["limit"], 8, "{v}");
    assert!(
        goaway_errors(&v).is_empty(),
        "a stream error, not a connection error: {v}"
    );
    let refused = v["refused_before_windows"].as_object().unwrap();
    let refused_ids: Vec<u64> = refused.keys().map(|k| k.parse().unwrap()).collect();
    assert_eq!(refused_ids.len(), 4, "{v}");
    for (id, err) in refused {
        assert!(
            err == "REFUSED_STREAM" || err == "PROTOCOL_ERROR",
            "stream {id}: {err}: {v}"
        );
        assert!(
            id.parse::<u64>().unwrap() > 15,
            "an admitted stream refused: {v}"
        );
    }
    let complete: Vec<u64> = v["complete"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(complete, [1, 3, 5, 7, 9, 11, 13, 15], "{v}");
    let want = sha256_hex(&sized_body(7));
    for id in &complete {
        assert_eq!(
            v["sha256"][id.to_string()],
            want.as_str(),
            "stream {id}: {v}"
        );
    }
    assert_eq!(SIZES[7], 200_000);
    await_counter_at_least(
        &server,
        DEFENCES,
        &[("defence", "max_concurrent_streams")],
        4.0,
    );
}

/// An idle h2 connection is closed after `keepalive_timeout`, with a
/// GOAWAY NO_ERROR first.
#[test]
fn idle_connection_gets_goaway_and_close() {
    let Some(py) = python("idle timeout") else {
        return;
    };
    let site = h2_site("h2-idle");
    let both = Both::start(&site, &["--keepalive-timeout", "1"]);
    for t in both.targets() {
        let what = format!("idle over {}", t.name());
        let v = h2::probe(&py, "idle", &t, &["--wait", "8"]);
        assert_eq!(v["status"], 200, "{what}: {v}");
        let took = v["closed_after"]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: still open after 8 s: {v}"));
        assert!(
            (0.5..4.0).contains(&took),
            "{what}: closed after {took} s: {v}"
        );
        assert_goaway(&v, "NO_ERROR", &what);
    }
    await_counter_at_least(both.server(), GOAWAYS, &[("code", "no_error")], 2.0);
}

/// A header block that never ends is closed after `header_timeout`, as
/// an HTTP/1 head that never ends is: a GOAWAY NO_ERROR first (no stream
/// taken: last stream id 0), then the close, counted under
/// `reason="header_timeout"`.
#[test]
fn stalled_header_block_is_closed_after_the_header_timeout() {
    let Some(py) = python("header timeout") else {
        return;
    };
    let site = h2_site("h2-header-timeout");
    let server = Server::start(
        &site.root,
        &["--header-timeout", "1", "--keepalive-timeout", "60"],
    );
    let t = Target::h2c(server.plain_addr());
    let v = h2::probe(&py, "stall-headers", &t, &["--wait", "8"]);
    let took = v["closed_after"]
        .as_f64()
        .unwrap_or_else(|| panic!("still open after 8 s: {v}"));
    assert!((0.5..4.0).contains(&took), "closed after {took} s: {v}");
    assert_goaway(&v, "NO_ERROR", "stalled header block");
    assert_eq!(v["goaways"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["goaways"][0]["last_stream_id"], 0, "{v}");
    assert_eq!(v["statuses_total"], 0, "{v}");
    let samples = metrics::await_value(
        server.admin_addr(),
        "shardhttpd_connections_closed_total",
        &[("reason", "header_timeout")],
        1.0,
    );
    assert_eq!(
        metrics::sum(
            &samples,
            "shardhttpd_connections_closed_total",
            &[("reason", "idle_timeout")]
        ),
        0.0,
        "counted as idle, not as a stalled header block"
    );
    assert_eq!(
        metrics::sum(&samples, GOAWAYS, &[("code", "no_error")]),
        1.0
    );
}

/// SIGTERM with streams in flight: GOAWAY NO_ERROR naming the last stream
/// the server took, every one of them finishes whole, a stream opened
/// after the GOAWAY is not served, and the process exits cleanly.
#[test]
fn sigterm_sends_goaway_and_finishes_streams_in_flight() {
    let Some(py) = python("drain") else {
        return;
    };
    for tls in [false, true] {
        let site = h2_site(&format!("h2-drain-{tls}"));
        let mut both = Both::start(&site, &["--shutdown-grace", "10"]);
        let t = if tls { both.h2() } else { both.h2c() };
        let what = format!("drain over {}", t.name());
        let run = h2::Running::start(
            &py,
            "drain",
            &t,
            &["--path", "/big.bin", "--count", "5", "--wait", "8"],
        );
        assert_eq!(run.first["heads"], 5, "{what}: {}", run.first);
        both.server().signal("TERM");
        let v = run.finish();
        assert_eq!(v["goaway_seen"], true, "{what}: no GOAWAY: {v}");
        let last = v["goaways"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["error"], "NO_ERROR", "{what}: {v}");
        assert!(
            (9..11).contains(&last["last_stream_id"].as_u64().unwrap()),
            "{what}: last stream id should be 9 (the last one opened): {v}"
        );
        let want = sha256_hex(&big_body());
        assert_eq!(v["complete"].as_array().unwrap().len(), 5, "{what}: {v}");
        for id in ["1", "3", "5", "7", "9"] {
            assert_eq!(v["sha256"][id], want.as_str(), "{what}: stream {id}: {v}");
        }
        assert_eq!(
            v["late_status"],
            serde_json::Value::Null,
            "{what}: a stream past the GOAWAY was served: {v}"
        );
        let server = &mut both.tls.server;
        let status = server
            .wait_exit(Duration::from_secs(12))
            .unwrap_or_else(|| panic!("{what}: still running after the grace"));
        assert!(status.success(), "{what}: exited {status}");
    }
}

/// Issue 25: an idle h2 connection over TLS costs at most 16 KiB of server
/// memory (RSS growth over 300 connections that each had one request
/// answered, one shard, after a warm-up of 32 held open; the same method
/// as `memory_per_connection`).
#[test]
fn idle_h2_connections_over_tls_cost_at_most_16_kib_each() {
    const CONNS: u64 = 300;
    const PER_CONN: u64 = 16 * 1024;
    const ALLOWANCE: u64 = 256 * 1024;
    let Some(py) = python("h2 memory") else {
        return;
    };
    let site = h2_site("h2-memory");
    let both = Both::start(
        &site,
        &[
            "--cores",
            "1",
            "--keepalive-timeout",
            "300",
            "--header-timeout",
            "300",
        ],
    );
    let t = both.h2();
    let pid = both.server().pid();
    let settled = || {
        let mut last = rss_kib(pid);
        for _ in 0..30 {
            std::thread::sleep(Duration::from_millis(300));
            let now = rss_kib(pid);
            if now == last {
                break;
            }
            last = now;
        }
        last * 1024
    };
    let path = ["--path", "/index.html"];
    let warm = h2::Running::start(&py, "hold", &t, &[&path[..], &["--count", "32"]].concat());
    assert_eq!(warm.first["answered"], 32, "{}", warm.first);
    let before = settled();
    let count = CONNS.to_string();
    let held = h2::Running::start(&py, "hold", &t, &[&path[..], &["--count", &count]].concat());
    assert_eq!(held.first["answered"], CONNS, "{}", held.first);
    let after = settled();
    let grown = after.saturating_sub(before);
    eprintln!(
        "idle h2 over TLS: RSS {before} -> {after} B, +{grown} B for {CONNS} connections ({} B each)",
        grown / CONNS
    );
    assert!(
        grown <= CONNS * PER_CONN + ALLOWANCE,
        "RSS grew {grown} B for {CONNS} idle h2 connections ({} B each), over {PER_CONN} B each",
        grown / CONNS
    );
    let v = held.finish();
    assert_eq!(v["answered_again"], CONNS, "they still serve: {v}");
    warm.finish();
}

/// Issue 25's lifecycle bar: a SIGUSR2 upgrade under h2load (h2c, 4
/// connections × 10 streams) loses no stream. The old process's first
/// GOAWAY (last stream id 2^31−1, with a PING) tells each connection to
/// open no more streams; the PING's ACK shows every stream the client
/// opened before has arrived, so the final GOAWAY names them all and the
/// old process answers each to its last byte, while h2load carries on
/// over new connections to the new process.
///
/// h2load reports as failed the requests it still tried to start on a
/// connection after its GOAWAY: nghttp2 refuses those itself (RFC 9113
/// §6.8: a client opens no stream after GOAWAY), so they never reach a
/// server, and h2load does not retry them. They are told from lost ones by
/// the servers' own ledger, the access log both processes append to: every
/// request either process answered is a request h2load got whole (equal
/// counts, no tolerance), and neither drain summary counts a stream cut
/// off or refused.
#[test]
fn upgrade_under_h2load_loses_no_stream() {
    use support::upgrade::{process_gone, signal, status_pid, Successors};
    if !installed("h2load") {
        loud("SKIP: h2load not installed (Debian nghttp2-client)");
        return;
    }
    let site = h2_site("h2-upgrade");
    let log = site.base().join("access.log");
    let log_arg = log.display().to_string();
    let server = Server::start(
        &site.root,
        &["--access-log", &log_arg, "--access-log-format", "json"],
    );
    let successors = Successors::default();
    let (addr, admin) = (server.plain_addr(), server.admin_addr());
    let old = server.pid();
    let load = std::process::Command::new("h2load")
        .args(["-D", "6", "-c", "4", "-m", "10"])
        .arg(format!("http://{addr}/sized/3.txt"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run h2load");
    // Under load: all four connections open and answers flowing (the
    // shards publish every 250 ms), then the upgrade.
    let mut last = Vec::new();
    let loaded = poll_until(Duration::from_secs(10), || {
        last = metrics::scrape(admin);
        metrics::sum(&last, "shardhttpd_h2_connections_total", &[]) >= 4.0
            && metrics::sum(&last, "shardhttpd_http_requests_total", &[]) >= 1000.0
    });
    assert!(loaded, "h2load never loaded the server: {last:#?}");
    let shards = last
        .iter()
        .filter(|s| s.name == "shardhttpd_shard_info")
        .count();
    signal(old, "USR2");
    assert!(
        poll_until(Duration::from_secs(20), || process_gone(old)),
        "old process still running after SIGUSR2\n{}",
        server.log_text()
    );
    let new = status_pid(admin).expect("status.json after the upgrade");
    successors.push(new);
    assert_ne!(new, old);
    let out = load.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let r = h2::parse_h2load(&text);
    assert!(r.succeeded > 0, "{text}");
    assert_eq!(r.status_2xx, r.succeeded, "{text}");

    // The old process's drain, server-side: no stream it took was cut
    // off, and none was opened past its final GOAWAY.
    let mut drained = Vec::new();
    let all = poll_until(Duration::from_secs(5), || {
        drained = server
            .log_lines()
            .into_iter()
            .filter(|l| l.contains("shard drained"))
            .collect();
        drained.len() >= shards
    });
    assert!(
        all && shards > 0,
        "{} drain summaries for {shards} shards\n{}",
        drained.len(),
        server.log_text()
    );
    for line in &drained {
        for name in ["h2_streams_cut", "h2_refused_after_goaway"] {
            assert_eq!(
                support::log_field(line, name),
                Some("0"),
                "{name} in {line}\n{text}"
            );
        }
    }
    // Every answer either process logged reached h2load whole, and h2load
    // got no answer the servers did not log: its failures never reached
    // a server. (The new process flushes its log on its 250 ms tick.)
    let mut logged = (0, 0);
    let equal = poll_until(Duration::from_secs(10), || {
        logged = answers_logged(&log);
        logged == (r.succeeded, 0)
    });
    assert!(
        equal,
        "(HTTP/2 200s logged, other lines) = {logged:?}, h2load got {} of {} \
         ({} failed)\n{text}",
        r.succeeded, r.total, r.failed
    );
    loud(&format!(
        "h2load across an upgrade: {} of {} requests answered, every one the servers logged; \
         {} failed in h2load without reaching a server (started after a GOAWAY)",
        r.succeeded, r.total, r.failed
    ));
    assert_eq!(
        metrics::sum(
            &metrics::scrape(admin),
            "shardhttpd_access_log_dropped_total",
            &[]
        ),
        0.0
    );
}

/// (HTTP/2 200 answers of `/sized/3.txt` with its whole body, any other
/// line) in a JSON access log.
fn answers_logged(log: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut whole = 0;
    let mut other = 0;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v["status"] == 200
            && v["protocol"] == "HTTP/2.0"
            && v["uri"] == "/sized/3.txt"
            && v["bytes"] == SIZES[3] as u64
        {
            whole += 1;
        } else {
            other += 1;
        }
    }
    (whole, other)
}
