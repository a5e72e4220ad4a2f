//! HTTP/3 over QUIC (`h3 = true`) against the real binary with real
//! clients: aioquic (`tests/h3/h3probe.py`), ngtcp2's `gtlsclient` and
//! headless Chromium. Files of every size arrive whole (SHA-256), a
//! hundred streams share a connection, TLS responses advertise HTTP/3 with
//! `Alt-Svc`, Retry, resumption, key update, ChaCha20 and a client that
//! changes address all work, malformed requests get the right HTTP/3
//! errors, the metrics and access log count HTTP/3, a SIGTERM drains
//! with GOAWAY while a download finishes, and a SIGUSR2 upgrade hands the
//! QUIC sockets over while a download in flight finishes in the old
//! process through the new one.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use support::h3::{
    header, ngtcp2_or_skip, probe, python_or_skip, quic_addr, requests, spki_sha256, Probe,
};
use support::metrics::{await_value, scrape, sum, Sample};
use support::tls::{Ca, TlsServer};
use support::*;

/// A site with files of the given sizes (`size-N.bin`, random bytes),
/// served over TLS and HTTP/3 with `extra` flags.
fn start(tag: &str, sizes: &[usize], extra: &[&str]) -> (Site, Ca, TlsServer, std::path::PathBuf) {
    let site = Site::new(tag);
    for &n in sizes {
        site.write(&format!("size-{n}.bin"), &noise(n as u64, n));
    }
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let ca_pem = ca.write(site.base());
    let mut args = vec!["--h3"];
    args.extend_from_slice(extra);
    let server = TlsServer::start(&site.root, &ca, &leaf, &args);
    (site, ca, server, ca_pem)
}

fn file_sha(root: &Path, rel: &str) -> String {
    sha256_hex(&std::fs::read(root.join(rel)).unwrap())
}

#[test]
fn files_of_every_size_arrive_whole_over_h3() {
    let Some(py) = python_or_skip("h3 files") else {
        return;
    };
    let sizes = [0, 1, 100, 16_384, (1 << 20) + 7, 8 << 20];
    let (site, _ca, server, ca) = start("h3-files", &sizes, &[]);
    let addr = quic_addr(&server.server);
    assert_eq!(
        addr.port(),
        server.tls_addr.port(),
        "HTTP/3 shares the HTTPS port"
    );
    let mut paths: Vec<String> = sizes.iter().map(|n| format!("/size-{n}.bin")).collect();
    paths.push("/missing".into());
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    let report = probe(&py, addr, &ca, &args);
    assert_eq!(report["alpn"], "h3", "{report}");
    let got = requests(&report);
    assert_eq!(got.len(), paths.len(), "{report}");
    for (r, n) in got.iter().zip(sizes) {
        let rel = format!("size-{n}.bin");
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["len"], n, "{r}");
        assert_eq!(r["sha256"], file_sha(&site.root, &rel), "{rel}");
        assert_eq!(
            header(r, "content-length"),
            Some(n.to_string().as_str()),
            "{r}"
        );
    }
    let missing = &got[sizes.len()];
    assert_eq!(missing["status"], 404, "{missing}");
}

#[test]
fn a_hundred_streams_share_one_connection() {
    let Some(py) = python_or_skip("h3 streams") else {
        return;
    };
    let (site, _ca, server, ca) = start("h3-streams", &[4096], &[]);
    let addr = quic_addr(&server.server);
    let report = probe(
        &py,
        addr,
        &ca,
        &["--repeat", "100", "--concurrency", "100", "/size-4096.bin"],
    );
    let got = requests(&report);
    assert_eq!(got.len(), 100);
    let want = file_sha(&site.root, "size-4096.bin");
    for r in got {
        assert_eq!(
            (r["status"].as_u64(), r["sha256"].as_str()),
            (Some(200), Some(want.as_str())),
            "{r}"
        );
    }
    let samples = await_value(
        server.server.admin_addr(),
        "shardhttpd_http_requests_by_protocol_total",
        &[("protocol", "h3")],
        100.0,
    );
    assert_eq!(
        sum(
            &samples,
            "shardhttpd_quic_handshakes_total",
            &[("result", "completed")]
        ),
        1.0
    );
}

#[test]
fn ngtcp2_downloads_60_mib_whole_with_each_cipher() {
    let Some(client) = ngtcp2_or_skip("h3 ngtcp2") else {
        return;
    };
    let n = 60 << 20;
    let (site, _ca, server, _ca_pem) = start("h3-ngtcp2", &[n], &[]);
    let addr = quic_addr(&server.server);
    let want = file_sha(&site.root, &format!("size-{n}.bin"));
    // GnuTLS priority strings: AES-128-GCM, then ChaCha20-Poly1305 alone.
    for cipher in ["AES-128-GCM", "CHACHA20-POLY1305"] {
        let ciphers = format!("--ciphers=NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+{cipher}");
        let got = ngtcp2_get(&client, addr, n, &["--key-update=300ms", &ciphers]);
        assert_eq!(got.len(), n, "{cipher}");
        assert_eq!(sha256_hex(&got), want, "{cipher}");
    }
    // HEAD: the head, with the length, and no body.
    let out = Command::new(&client)
        .args(["--exit-on-all-streams-close", "-m", "HEAD"])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(format!("https://localhost:{}/size-{n}.bin", addr.port()))
        .output()
        .expect("run gtlsclient");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("[:status: 200]"), "{text}");
    assert!(text.contains(&format!("[content-length: {n}]")), "{text}");
    assert!(
        !text.contains("stream 0x0 body"),
        "a HEAD answer has no body: {text}"
    );
    // A full socket buffer held the datagrams until there was room: none
    // was dropped for loss recovery to resend.
    let admin = server.server.admin_addr();
    let samples = await_value(
        admin,
        "shardhttpd_quic_handshakes_total",
        &[("result", "completed")],
        3.0,
    );
    let blocked = sum(&samples, "shardhttpd_quic_send_blocked_total", &[]);
    assert_eq!(
        sum(&samples, "shardhttpd_quic_send_dropped_total", &[]),
        0.0,
        "{blocked} sends waited for room"
    );
    // GSO: the datagrams went out in batches.
    let per_send = datagrams_per_send(&samples);
    assert!(per_send > 2.0, "{per_send} datagrams per send");
    loud(&format!(
        "2 × 60 MiB over h3: {blocked} sends waited for room in the socket buffer, none dropped; {per_send:.1} datagrams per send"
    ));
}

/// GET `size-{n}.bin` from `addr` with ngtcp2's client and `extra` flags:
/// the body it saved.
fn ngtcp2_get(client: &Path, addr: SocketAddr, n: usize, extra: &[&str]) -> Vec<u8> {
    let dir = TempDir::new("h3-ngtcp2-dl");
    let out = Command::new(client)
        .args(["--quiet", "--exit-on-all-streams-close"])
        .args(extra)
        .arg(format!("--download={}", dir.path().display()))
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(format!("https://localhost:{}/size-{n}.bin", addr.port()))
        .output()
        .expect("run gtlsclient");
    assert!(
        out.status.success(),
        "gtlsclient {extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(dir.path().join(format!("size-{n}.bin"))).expect("the download")
}

/// Datagrams out over the sends that carried them.
fn datagrams_per_send(samples: &[Sample]) -> f64 {
    let out = sum(
        samples,
        "shardhttpd_quic_datagrams_total",
        &[("direction", "out")],
    );
    out / sum(samples, "shardhttpd_quic_sends_total", &[])
}

/// `quic_gso = false`: a download arrives whole, one datagram per send.
#[test]
fn without_gso_a_download_goes_one_datagram_per_send() {
    let Some(client) = ngtcp2_or_skip("h3 no gso") else {
        return;
    };
    let n = 8 << 20;
    let (site, _ca, server, _ca_pem) = start("h3-no-gso", &[n], &["--quic-gso", "false"]);
    let addr = quic_addr(&server.server);
    let got = ngtcp2_get(&client, addr, n, &[]);
    assert_eq!(
        sha256_hex(&got),
        file_sha(&site.root, &format!("size-{n}.bin"))
    );
    // Once the shard has published the whole download: 8 MiB takes at
    // least one datagram per 1 452 bytes.
    let least = (n / 1452) as f64;
    let mut samples = Vec::new();
    let published = poll_until(Duration::from_secs(10), || {
        samples = scrape(server.server.admin_addr());
        sum(&samples, "shardhttpd_quic_sends_total", &[]) >= least
    });
    let sends = sum(&samples, "shardhttpd_quic_sends_total", &[]);
    assert!(published, "{sends} sends for 8 MiB, want {least} at least");
    assert_eq!(datagrams_per_send(&samples), 1.0);
}

/// Download a 16 MiB file with ngtcp2 over HTTP/3 in a network namespace
/// of the test's own, `qdisc` on its `lo` and `flags` for the server;
/// check it arrived whole, and return the server's metrics once
/// `wait_for` (a grep pattern) matches them. None: skipped.
fn download_in_netns(
    tag: &str,
    qdisc: &str,
    flags: &str,
    wait_for: &str,
) -> Option<Vec<support::metrics::Sample>> {
    let client = ngtcp2_or_skip(tag)?;
    for tool in ["unshare", "tc", "ip", "curl"] {
        if !installed(tool) {
            skip(&format!("{tag}: {tool} not installed"));
            return None;
        }
    }
    let n = 16 << 20;
    let site = Site::new(tag);
    site.write("big.bin", &noise(7, n));
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let dir = TempDir::new(tag);
    // Fixed ports: the namespace is the test's alone.
    let script = r#"
set -eu
ip link set lo up
tc qdisc add dev lo root $QDISC
"$BIN" $IO_ARGS $FLAGS --root "$ROOT" --cores 1 --h3 \
  --tls-listen 127.0.0.1:8443 --tls-cert "$CERT" --tls-key "$KEY" \
  --listen 127.0.0.1:8080 --admin 127.0.0.1:9180 2>"$DIR/server.log" &
server=$!
trap 'kill $server' EXIT
up=0
for _ in $(seq 200); do
  if curl -sf -o /dev/null http://127.0.0.1:9180/readyz; then up=1; break; fi
  sleep 0.05
done
[ $up = 1 ] || { cat "$DIR/server.log" >&2; exit 3; }
timeout 60 "$CLIENT" --quiet --exit-on-all-streams-close --download="$DIR" \
  127.0.0.1 8443 https://localhost:8443/big.bin >&2
# Once the shard has published what the test waits for.
for _ in $(seq 200); do
  curl -sf http://127.0.0.1:9180/metrics >"$DIR/metrics"
  grep -q "$WAIT_FOR" "$DIR/metrics" && break
  sleep 0.05
done
cat "$DIR/metrics"
"#;
    let out = Command::new("unshare")
        .args(["--net", "--map-root-user", "sh", "-c", script])
        .env("QDISC", qdisc)
        .env("FLAGS", flags)
        .env("WAIT_FOR", wait_for)
        .env("BIN", bin())
        .env("IO_ARGS", support::io_flag(&[]).join(" "))
        .env("ROOT", &site.root)
        .env("CERT", &leaf.cert)
        .env("KEY", &leaf.key)
        .env("CLIENT", &client)
        .env("DIR", dir.path())
        .output()
        .expect("run unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let got = std::fs::read(dir.path().join("big.bin")).expect("the download");
    assert_eq!(got.len(), n);
    assert_eq!(sha256_hex(&got), file_sha(&site.root, "big.bin"));
    Some(support::metrics::parse(&String::from_utf8_lossy(
        &out.stdout,
    )))
}

/// Loopback hands a datagram to its receiver at once, so a socket's send
/// buffer never fills there. Behind a token bucket on `lo`, datagrams wait
/// in its queue, charged to the sender's buffer (64 KiB by
/// `quic_socket_buffer`): the server's sends find it full, are held until
/// the socket is writable, and none is dropped.
#[test]
fn a_full_send_buffer_holds_datagrams_until_there_is_room() {
    let Some(samples) = download_in_netns(
        "h3-sndbuf",
        "tbf rate 400mbit burst 64kb latency 500ms",
        "--quic-socket-buffer 64KiB",
        r#"quic_handshakes_total{core="0",result="completed"} 1"#,
    ) else {
        return;
    };
    let blocked = sum(&samples, "shardhttpd_quic_send_blocked_total", &[]);
    let dropped = sum(&samples, "shardhttpd_quic_send_dropped_total", &[]);
    assert!(blocked > 0.0, "the buffer never filled");
    assert_eq!(dropped, 0.0, "{blocked} held");
    loud(&format!(
        "16 MiB over h3 behind a token bucket: {blocked} sends waited for room, none dropped"
    ));
}

/// A congested path that drops what it cannot queue (a token bucket with
/// a 48 KiB queue; netem is not in every kernel): the download arrives
/// whole, and the server counts the packets it lost.
#[test]
fn a_download_over_a_lossy_path_arrives_whole() {
    let Some(samples) = download_in_netns(
        "h3-lossy",
        "tbf rate 200mbit burst 32kb limit 48kb",
        "",
        r#"quic_lost_packets_total{core="0"} [1-9]"#,
    ) else {
        return;
    };
    let lost = sum(&samples, "shardhttpd_quic_lost_packets_total", &[]);
    assert!(lost > 0.0, "no loss counted");
    loud(&format!(
        "16 MiB over h3 through a dropping queue: whole, {lost} packets lost and resent"
    ));
}

/// RFC 9218 priorities decide which response takes the connection's
/// windows: a bigger response asked for later with urgency 0 finishes
/// before a smaller one with urgency 7 that was asked for first, whether
/// the `priority` field or a PRIORITY_UPDATE frame says so; with equal
/// priorities, the first and smaller one finishes first.
#[test]
fn the_priority_field_orders_responses_on_a_connection() {
    let Some(py) = python_or_skip("h3 priorities") else {
        return;
    };
    let (small, big) = (4 << 20, 12 << 20);
    let (_site, _ca, server, ca) = start("h3-priority", &[small, big], &[]);
    let addr = quic_addr(&server.server);
    let (first, second) = (format!("/size-{small}.bin"), format!("/size-{big}.bin"));
    let order = |args: &[&str]| {
        let mut all = vec![first.as_str(), second.as_str()];
        all.extend_from_slice(args);
        let report = probe(&py, addr, &ca, &all);
        let got = requests(&report);
        assert!(got.iter().all(|r| r["status"] == 200), "{report}");
        let done = |path: &str| got.iter().find(|r| r["path"] == path).unwrap()["done"].clone();
        (done(&first), done(&second))
    };
    assert_eq!(order(&[]), (0.into(), 1.into()), "equal priorities");
    assert_eq!(
        order(&[
            "--priority-of",
            &first,
            "u=7",
            "--priority-of",
            &second,
            "u=0"
        ]),
        (1.into(), 0.into()),
        "urgency 0 first"
    );
    // The same by PRIORITY_UPDATE frames on the control stream, sent once
    // both requests are out.
    assert_eq!(
        order(&[
            "--priority-update",
            &first,
            "u=7",
            "--priority-update",
            &second,
            "u=0"
        ]),
        (1.into(), 0.into()),
        "reprioritised by PRIORITY_UPDATE"
    );
}

#[test]
fn tls_responses_advertise_h3_and_cleartext_ones_do_not() {
    let (_site, _ca, server, ca) = start("h3-alt-svc", &[], &[]);
    let addr = quic_addr(&server.server);
    let head = |url: String| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "--cacert"])
            .arg(&ca)
            .args([
                "--resolve",
                &format!("localhost:{}:127.0.0.1", server.tls_addr.port()),
            ])
            .arg(url)
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&out.stdout).to_lowercase()
    };
    let tls = head(format!("https://localhost:{}/", server.tls_addr.port()));
    assert!(
        tls.contains(&format!("alt-svc: h3=\":{}\"; ma=86400", addr.port())),
        "{tls}"
    );
    let plain = head(format!("http://{}/", server.server.addr()));
    assert!(plain.starts_with("http/1.1 200"), "{plain}");
    assert!(!plain.contains("alt-svc"), "{plain}");
}

#[test]
fn retry_resumption_key_update_chacha20_and_migration() {
    let Some(py) = python_or_skip("h3 transport features") else {
        return;
    };
    let (site, _ca, server, ca) = start("h3-features", &[300_000], &["--quic-retry", "true"]);
    let addr = quic_addr(&server.server);
    let admin = server.server.admin_addr();
    let want = file_sha(&site.root, "size-300000.bin");
    let ok = |report: &serde_json::Value| {
        let got = requests(report);
        assert!(!got.is_empty(), "{report}");
        for r in got {
            assert_eq!(
                (r["status"].as_u64(), r["sha256"].as_str()),
                (Some(200), Some(want.as_str())),
                "{r}"
            );
        }
    };
    let tickets = TempDir::new("h3-tickets");
    let ticket = tickets.path().join("ticket");
    let ticket = ticket.to_str().unwrap();
    // Retry: every new connection proves its address first.
    let first = probe(
        &py,
        addr,
        &ca,
        &["--ticket-out", ticket, "/size-300000.bin"],
    );
    ok(&first);
    assert_eq!(first["retry"], true, "{first}");
    assert_eq!(first["resumed"], false, "{first}");
    await_value(admin, "shardhttpd_quic_retries_total", &[], 1.0);
    // Resumption from the first connection's ticket.
    let second = probe(&py, addr, &ca, &["--ticket-in", ticket, "/size-300000.bin"]);
    ok(&second);
    assert_eq!(second["resumed"], true, "{second}");
    // ChaCha20-Poly1305 (TLS_CHACHA20_POLY1305_SHA256 is 0x1303).
    let chacha = probe(&py, addr, &ca, &["--chacha", "/size-300000.bin"]);
    ok(&chacha);
    assert_eq!(chacha["cipher"], "4867", "{chacha}");
    // A key update, then more requests under the new keys.
    let update = probe(
        &py,
        addr,
        &ca,
        &[
            "--key-update",
            "--repeat",
            "3",
            "--concurrency",
            "1",
            "/size-300000.bin",
        ],
    );
    ok(&update);
    assert_eq!(requests(&update).len(), 3);
    // A new client address mid-connection (NAT rebinding): the
    // connection goes on.
    let moved = probe(
        &py,
        addr,
        &ca,
        &[
            "--migrate",
            "--repeat",
            "3",
            "--concurrency",
            "1",
            "/size-300000.bin",
        ],
    );
    ok(&moved);
    assert_eq!(requests(&moved).len(), 3);
    await_value(admin, "shardhttpd_quic_migrations_total", &[], 1.0);
    await_value(
        admin,
        "shardhttpd_quic_handshakes_total",
        &[("result", "completed")],
        5.0,
    );
}

#[test]
fn malformed_requests_get_the_right_http3_errors() {
    let Some(py) = python_or_skip("h3 errors") else {
        return;
    };
    let (_site, _ca, server, ca) = start("h3-errors", &[], &[]);
    let addr = quic_addr(&server.server);
    // `:method GET` alone: no `:scheme` or `:path`. A stream error
    // H3_MESSAGE_ERROR; the connection serves the next request.
    let report = probe(
        &py,
        addr,
        &ca,
        &[
            "--raw",
            "0000d1",
            "--raw-section",
            "--paths-after-raw",
            "/index.html",
        ],
    );
    let got = requests(&report);
    assert_eq!(got[0]["reset"], 0x10e, "{report}");
    assert_eq!(got[1]["status"], 200, "{report}");
    // A field section that refers to a dynamic table we never allowed:
    // the connection closes with QPACK_DECOMPRESSION_FAILED.
    let report = probe(&py, addr, &ca, &["--raw", "0100", "--raw-section"]);
    assert_eq!(report["terminated"]["error_code"], 0x200, "{report}");
    // DATA before HEADERS: H3_FRAME_UNEXPECTED.
    let report = probe(&py, addr, &ca, &["--raw", "000161"]);
    assert_eq!(report["terminated"]["error_code"], 0x105, "{report}");
    await_value(
        server.server.admin_addr(),
        "shardhttpd_h3_errors_total",
        &[],
        2.0,
    );
}

/// QUIC's stream credit bounds the streams open at once, not how fast a
/// client cancels them, nor what it sends on its control streams: each
/// flood spends a budget as HTTP/2's do, and the connection closes with
/// H3_EXCESSIVE_LOAD, counted by defence. Moderate use passes.
#[test]
fn floods_spend_their_budgets_and_close_with_excessive_load() {
    let Some(py) = python_or_skip("h3 floods") else {
        return;
    };
    let (_site, _ca, server, ca) = start("h3-floods", &[100], &[]);
    let addr = quic_addr(&server.server);
    let admin = server.server.admin_addr();
    let defence = |d| {
        sum(
            &scrape(admin),
            "shardhttpd_h3_defences_total",
            &[("defence", d)],
        )
    };
    // A page's worth of cancelled requests, then a real one: served.
    let report = probe(
        &py,
        addr,
        &ca,
        &["--reset-flood", "50", "--paths-after-raw", "/size-100.bin"],
    );
    assert!(report["terminated"].is_null(), "{report}");
    assert_eq!(requests(&report)[0]["status"], 200, "{report}");
    let report = probe(&py, addr, &ca, &["--reset-flood", "2000"]);
    assert_eq!(report["terminated"]["error_code"], 0x107, "{report}");
    let report = probe(&py, addr, &ca, &["--control-flood", "5000"]);
    assert_eq!(report["terminated"]["error_code"], 0x107, "{report}");
    // 17 KiB of a reserved frame before a request's HEADERS.
    let padded = format!("2180004400{}", "00".repeat(17 * 1024));
    let report = probe(&py, addr, &ca, &["--raw", &padded]);
    assert_eq!(report["terminated"]["error_code"], 0x107, "{report}");
    let kinds = ["rapid_reset", "control_flood", "frames_before_headers"];
    assert!(
        poll_until(Duration::from_secs(5), || kinds
            .iter()
            .all(|d| defence(d) == 1.0)),
        "{:?}",
        kinds.map(defence)
    );
    // The server still answers.
    let ok = probe(&py, addr, &ca, &["/size-100.bin"]);
    assert_eq!(requests(&ok)[0]["status"], 200, "{ok}");
}

#[test]
fn the_access_log_and_metrics_say_http3() {
    let Some(py) = python_or_skip("h3 access log") else {
        return;
    };
    let site = Site::new("h3-log");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let ca_pem = ca.write(site.base());
    let log = site.base().join("access.log");
    let log_arg = log.display().to_string();
    let server = TlsServer::start(&site.root, &ca, &leaf, &["--h3", "--access-log", &log_arg]);
    let addr = quic_addr(&server.server);
    let report = probe(&py, addr, &ca_pem, &["/index.html", "/nope"]);
    assert_eq!(requests(&report).len(), 2);
    let lines = support::access_log::wait_for_lines(&log, 2);
    assert!(
        lines[0].contains("\"GET /index.html HTTP/3\" 200"),
        "{lines:?}"
    );
    assert!(lines[1].contains("\"GET /nope HTTP/3\" 404"), "{lines:?}");
    let samples = await_value(
        server.server.admin_addr(),
        "shardhttpd_http_requests_by_protocol_total",
        &[("protocol", "h3")],
        2.0,
    );
    assert_eq!(
        sum(
            &samples,
            "shardhttpd_http_requests_by_protocol_total",
            &[("protocol", "h2")]
        ),
        0.0
    );
    assert!(
        sum(
            &samples,
            "shardhttpd_quic_datagrams_total",
            &[("direction", "in")]
        ) >= 3.0
    );
    // The status page's split.
    let (_, body) = support::metrics::admin_get(server.server.admin_addr(), "/status.json")
        .expect("status.json");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let totals = &status["totals"];
    assert_eq!(
        (
            &totals["requests"],
            &totals["requests_h2"],
            &totals["requests_h3"]
        ),
        (&2.into(), &0.into(), &2.into()),
        "{status}"
    );
}

/// A drained connection's download: the whole file (`n` bytes, SHA-256
/// `want`), then GOAWAY and a graceful close (H3_NO_ERROR) once the
/// stream was done.
fn whole_then_closed(report: &support::h3::Report, n: usize, want: &str) {
    let r = &requests(report)[0];
    assert_eq!(
        (r["status"].as_u64(), r["len"].as_u64()),
        (Some(200), Some(n as u64)),
        "{report}"
    );
    assert_eq!(r["sha256"], want);
    assert_eq!(report["terminated"]["error_code"], 0x100, "{report}");
}

#[test]
fn sigterm_sends_goaway_and_lets_a_download_finish() {
    let Some(py) = python_or_skip("h3 drain") else {
        return;
    };
    let n = 24 << 20;
    let (site, _ca, mut server, ca) = start("h3-drain", &[n], &["--shutdown-grace", "60s"]);
    let addr = quic_addr(&server.server);
    let admin = server.server.admin_addr();
    let want = file_sha(&site.root, &format!("size-{n}.bin"));
    let path = format!("/size-{n}.bin");
    let download = {
        let (py, ca) = (py.clone(), ca.clone());
        thread::spawn(move || probe(&py, addr, &ca, &["--await-close", &path]))
    };
    // The request is being answered: its connection is up and data flows.
    assert!(poll_until(Duration::from_secs(20), || {
        let s = scrape(admin);
        sum(
            &s,
            "shardhttpd_quic_handshakes_total",
            &[("result", "completed")],
        ) == 1.0
            && sum(
                &s,
                "shardhttpd_quic_datagrams_total",
                &[("direction", "out")],
            ) > 100.0
    }));
    server.server.signal("TERM");
    whole_then_closed(&download.join().unwrap(), n, &want);
    assert!(
        server.server.wait_exit(Duration::from_secs(30)).is_some(),
        "the server drained and exited"
    );
}

#[test]
fn an_upgrade_hands_over_quic_and_a_download_in_flight_finishes_through_the_new_process() {
    use support::upgrade::{process_gone, signal, status_pid, Successors, UPGRADE_DEADLINE};
    let Some(py) = python_or_skip("h3 upgrade") else {
        return;
    };
    // Far more than QUIC's windows let out before the client stops.
    let n = 8 << 20;
    let (site, _ca, server, ca) = start(
        "h3-upgrade",
        &[n, 100],
        &["--shutdown-grace", "60s", "--cores", "2"],
    );
    let successors = Successors::default();
    let addr = quic_addr(&server.server);
    let admin = server.server.admin_addr();
    let old = server.server.pid();
    let want = file_sha(&site.root, &format!("size-{n}.bin"));
    let path = format!("/size-{n}.bin");
    let download = Probe::spawn(&py, addr, &ca, &["--await-close", &path]);
    assert!(poll_until(Duration::from_secs(20), || {
        let s = scrape(admin);
        sum(
            &s,
            "shardhttpd_quic_datagrams_total",
            &[("direction", "out")],
        ) > 100.0
    }));
    // The client stops while the sockets change hands: every packet of
    // its connection after this reaches the new process first.
    signal(download.pid(), "STOP");
    signal(old, "USR2");
    let mut new = None;
    assert!(
        poll_until(UPGRADE_DEADLINE, || {
            new = status_pid(admin).filter(|&p| p != old);
            new.is_some()
        }),
        "no new process\n{}",
        server.server.log_text()
    );
    let new = new.unwrap();
    successors.push(new);
    assert!(
        !process_gone(old),
        "the old process keeps its QUIC connection"
    );
    signal(download.pid(), "CONT");
    // The old process sent GOAWAY and closed once the response was
    // acknowledged, then exited.
    whole_then_closed(&download.report(), n, &want);
    assert!(
        poll_until(UPGRADE_DEADLINE, || process_gone(old)),
        "the old process drained and exited\n{}",
        server.server.log_text()
    );
    // The acknowledgements went through the new process.
    let forwarded = |result| {
        sum(
            &scrape(admin),
            "shardhttpd_quic_forwarded_total",
            &[("result", result)],
        )
    };
    assert!(forwarded("sent") > 0.0, "{}", server.server.log_text());
    // New connections are the new process's, on the same sockets.
    let fresh = probe(&py, addr, &ca, &["/size-100.bin"]);
    let r = &requests(&fresh)[0];
    assert_eq!(r["status"].as_u64(), Some(200), "{fresh}");
    assert_eq!(r["sha256"], file_sha(&site.root, "size-100.bin"));
    assert!(
        poll_until(Duration::from_secs(5), || {
            sum(
                &scrape(admin),
                "shardhttpd_quic_handshakes_total",
                &[("result", "completed")],
            ) == 1.0
        }),
        "the new process completed the fresh handshake"
    );
    signal(new, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(new)));
}

/// HTTP/3 clients keep connecting and fetching through two upgrades:
/// every request is answered whole, or left unprocessed where RFC 9114
/// lets a client retry it anywhere: refused with H3_REQUEST_REJECTED (sent
/// past the old process's GOAWAY), or not sent at all because the old
/// process had closed the connection gracefully after its GOAWAY. None
/// fails otherwise.
#[test]
fn upgrades_under_h3_load_fail_no_request() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use support::upgrade::{process_gone, signal, status_pid, Successors, UPGRADE_DEADLINE};
    let Some(py) = python_or_skip("h3 upgrade under load") else {
        return;
    };
    let n = 16 << 10;
    let (site, _ca, server, ca) = start("h3-upgrade-load", &[n], &["--cores", "2"]);
    let successors = Successors::default();
    let addr = quic_addr(&server.server);
    let admin = server.server.admin_addr();
    let want = file_sha(&site.root, &format!("size-{n}.bin"));
    let stop = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(AtomicUsize::new(0));
    // Two clients send 20 requests at once on each connection; one sends
    // 200, one after another, so its connections outlive an upgrade.
    let clients: Vec<_> = [("20", "20"), ("20", "20"), ("200", "1")]
        .into_iter()
        .map(|(repeat, concurrency)| {
            let (py, ca, want) = (py.clone(), ca.clone(), want.clone());
            let (stop, probes) = (Arc::clone(&stop), Arc::clone(&probes));
            thread::spawn(move || {
                let path = format!("/size-{n}.bin");
                let args = ["--repeat", repeat, "--concurrency", concurrency, &path];
                let (mut whole, mut rejected, mut failed) = (0, 0, Vec::new());
                while !stop.load(Ordering::Acquire) {
                    let report = probe(&py, addr, &ca, &args);
                    probes.fetch_add(1, Ordering::AcqRel);
                    let got = match report["requests"].as_array() {
                        Some(got) if report["error"].is_null() => got,
                        _ => {
                            failed.push(report.to_string());
                            continue;
                        }
                    };
                    for r in got {
                        if r["status"] == 200 && r["sha256"] == want.as_str() {
                            whole += 1;
                        } else if r["reset"] == 0x10b || r["not_sent"].is_string() {
                            rejected += 1;
                        } else {
                            failed.push(r.to_string());
                        }
                    }
                }
                (whole, rejected, failed)
            })
        })
        .collect();
    let mut pid = server.server.pid();
    for round in 1..=2 {
        let before = probes.load(Ordering::Acquire);
        assert!(
            poll_until(Duration::from_secs(30), || probes.load(Ordering::Acquire)
                >= before + 3),
            "round {round}: the clients make no progress"
        );
        signal(pid, "USR2");
        let old = pid;
        assert!(
            poll_until(UPGRADE_DEADLINE, || process_gone(old)),
            "round {round}: the old process did not drain\n{}",
            server.server.log_text()
        );
        pid = status_pid(admin).expect("status.json after the upgrade");
        successors.push(pid);
        assert_ne!(pid, old);
    }
    let before = probes.load(Ordering::Acquire);
    assert!(poll_until(Duration::from_secs(30), || probes
        .load(Ordering::Acquire)
        >= before + 3));
    stop.store(true, Ordering::Release);
    let (mut whole, mut rejected, mut failed) = (0, 0, Vec::new());
    for c in clients {
        let (w, r, f) = c.join().unwrap();
        (whole, rejected) = (whole + w, rejected + r);
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} failed: {failed:#?}\n{}",
        failed.len(),
        server.server.log_text()
    );
    assert!(whole > 0);
    let forwarded = sum(
        &scrape(admin),
        "shardhttpd_quic_forwarded_total",
        &[("result", "sent")],
    );
    loud(&format!(
        "h3 across two upgrades: {whole} requests answered whole, {rejected} left \
         unprocessed after GOAWAY, 0 failed; the last process forwarded {forwarded} packets"
    ));
    signal(pid, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(pid)));
}

#[test]
fn chromium_loads_a_page_and_its_40_assets_over_h3() {
    let Some(browser) = find_program(&["chromium", "chromium-browser"]) else {
        skip("h3 in Chromium: chromium not installed");
        return;
    };
    let (site, _ca, server, _ca_pem) = start("h3-chromium", &[], &[]);
    let addr = quic_addr(&server.server);
    let mut scripts = String::new();
    for i in 0..40 {
        site.write(
            &format!("a/{i}.js"),
            b"window.loaded = (window.loaded || 0) + 1;\n",
        );
        scripts.push_str(&format!("<script src=\"/a/{i}.js\"></script>"));
    }
    site.write(
        "page.html",
        format!(
            "<!doctype html><html><body><div id=out>pending</div>{scripts}<script>\n\
             window.addEventListener('load', () => {{\n\
               const nav = performance.getEntriesByType('navigation')[0].nextHopProtocol;\n\
               const res = performance.getEntriesByType('resource').map(e => e.nextHopProtocol);\n\
               document.getElementById('out').textContent =\n\
                 'nav=' + nav + ' loaded=' + window.loaded + ' res=' + res.join(',');\n\
             }});\n</script></body></html>"
        )
        .as_bytes(),
    );
    let leaf_cert = site.base().join("localhost.crt");
    let spki = format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_sha256(&leaf_cert)
    );
    let force = format!("--origin-to-force-quic-on=localhost:{}", addr.port());
    let profile = TempDir::new("h3-chromium-profile");
    let dom = browser::chromium(
        &browser,
        &profile,
        &[
            "--enable-quic",
            &force,
            "--host-resolver-rules=MAP localhost 127.0.0.1",
            &spki,
        ],
        5000,
        "--dump-dom",
        &format!("https://localhost:{}/page.html", addr.port()),
    );
    let at = dom
        .find("id=\"out\">")
        .map(|i| i + 9)
        .expect("the page's output element");
    let out = &dom[at..at + dom[at..].find('<').unwrap()];
    let res: Vec<&str> = out.split(" res=").nth(1).unwrap_or("").split(',').collect();
    assert!(out.starts_with("nav=h3 loaded=40 "), "{out}");
    assert_eq!(res.len(), 40, "{out}");
    assert!(res.iter().all(|p| *p == "h3"), "every asset over h3: {out}");
    await_value(
        server.server.admin_addr(),
        "shardhttpd_http_requests_by_protocol_total",
        &[("protocol", "h2")],
        0.0,
    );
}
