//! The client's real address behind a load balancer: PROXY protocol v1
//! and v2 from a real HAProxy (cleartext, and TLS passed through in TCP
//! mode), raw PROXY headers from trusted and untrusted peers, malformed,
//! missing and dripped headers, and `real_ip_header`.

use crate::support;

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::haproxy::Haproxy;
use support::metrics::await_value;
use support::tls::Ca;
use support::{poll_until, Server, Site};

const FLUSHED_WITHIN: Duration = Duration::from_secs(5);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The address the client connects from, so that HAProxy's view of the
/// client differs from its own address towards the server (127.0.0.1).
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 7);

fn log_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The `remote_addr` of the JSON access log's lines, once there are `n`.
fn remote_addrs(path: &Path, n: usize) -> Vec<String> {
    let ok = poll_until(FLUSHED_WITHIN, || log_lines(path).len() >= n);
    let lines = log_lines(path);
    assert!(ok, "expected {n} access-log lines, got {lines:?}");
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {e}: {l:?}"));
            v["remote_addr"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

/// A TCP connection from `from` to `to`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((from, 0)).into())
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    sock.connect_timeout(&to.into(), IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect {to} from {from}: {e}"));
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

fn plain(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

const GET: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// Reads the whole response of a `Connection: close` request.
fn response(mut s: impl Read) -> String {
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read the response");
    String::from_utf8_lossy(&out).into_owned()
}

/// The server closed the connection without a byte of response (an end of
/// file, or a reset when it closed with our bytes unread), within the
/// read timeout: a refusal, not a hang.
#[track_caller]
fn assert_refused(mut s: TcpStream, what: &str) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) => panic!(
            "{what}: answered instead of refused: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => panic!("{what}: not closed within {IO_TIMEOUT:?}: {e}"),
    }
    start.elapsed()
}

fn v2_inet(src: [u8; 4], sport: u16) -> Vec<u8> {
    let mut v = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v.extend_from_slice(&[0x21, 0x11, 0, 12 + 7]);
    v.extend_from_slice(&src);
    v.extend_from_slice(&[127, 0, 0, 1]);
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&80u16.to_be_bytes());
    // A TLV (PP2_TYPE_UNIQUE_ID), which is skipped.
    v.extend_from_slice(&[0x05, 0, 4, b'a', b'b', b'c', b'd']);
    v
}

fn json_log(site: &Site) -> (PathBuf, String) {
    let log = site.base().join("access.json");
    let s = log.to_str().unwrap().to_owned();
    (log, s)
}

#[test]
fn raw_v1_and_v2_headers_from_a_trusted_peer_set_the_logged_address() {
    let site = Site::new("proxy-raw");
    let (log, log_arg) = json_log(&site);
    let server = Server::start(
        &site.root,
        &[
            "--proxy-protocol",
            "true",
            "--trusted-proxies",
            "127.0.0.1/32",
            "--access-log",
            &log_arg,
            "--access-log-format",
            "json",
        ],
    );
    let addr = server.plain_addr();
    // v1, the header and the request in one write.
    let mut s = plain(addr);
    s.write_all(
        &[
            b"PROXY TCP4 198.51.100.4 127.0.0.1 40000 80\r\n".as_slice(),
            GET,
        ]
        .concat(),
    )
    .unwrap();
    assert!(response(&s).starts_with("HTTP/1.1 200"));
    // v2 with a TLV, the header in two writes and the request after it.
    let mut s = plain(addr);
    let header = v2_inet([192, 0, 2, 33], 5555);
    s.write_all(&header[..10]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(&header[10..]).unwrap();
    s.write_all(GET).unwrap();
    assert!(response(&s).starts_with("HTTP/1.1 200"));
    // v1 TCP6, and v2 LOCAL (a balancer's health check): LOCAL keeps the
    // connection's own address.
    let mut s = plain(addr);
    s.write_all(&[b"PROXY TCP6 2001:db8::5 ::1 40000 80\r\n".as_slice(), GET].concat())
        .unwrap();
    assert!(response(&s).starts_with("HTTP/1.1 200"));
    let mut s = plain(addr);
    s.write_all(&[b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".as_slice(), GET].concat())
        .unwrap();
    assert!(response(&s).starts_with("HTTP/1.1 200"));
    // Shards flush their lines independently: compare as a set.
    let mut got = remote_addrs(&log, 4);
    got.sort();
    assert_eq!(
        got,
        ["127.0.0.1", "192.0.2.33", "198.51.100.4", "2001:db8::5"]
    );
    await_value(
        server.admin_addr(),
        "shardhttpd_proxy_protocol_total",
        &[("result", "accepted")],
        4.0,
    );
}

#[test]
fn bad_missing_untrusted_and_dripped_headers_are_refused() {
    let site = Site::new("proxy-refused");
    let (log, log_arg) = json_log(&site);
    let server = Server::start(
        &site.root,
        &[
            "--proxy-protocol",
            "true",
            "--trusted-proxies",
            "127.0.0.1/32",
            "--header-timeout",
            "1",
            "--access-log",
            &log_arg,
            "--access-log-format",
            "json",
        ],
    );
    let addr = server.plain_addr();
    let cases: Vec<(&str, Vec<u8>)> =
        vec![
        ("no header", GET.to_vec()),
        (
            "v1 without CRLF",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\nGET / HTTP/1.1\r\n\r\n".to_vec(),
        ),
        ("v1 bad address", b"PROXY TCP4 1.2.3.999 5.6.7.8 1 2\r\n".to_vec()),
        ("v1 unknown protocol", b"PROXY SCTP 1.2.3.4 5.6.7.8 1 2\r\n".to_vec()),
        ("v1 too long", [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 200]].concat()),
        (
            "v2 bad version",
            b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0c\x01\x02\x03\x04\x05\x06\x07\x08\x00\x01\x00\x02"
                .to_vec(),
        ),
        (
            "v2 short address block",
            b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x04\x01\x02\x03\x04".to_vec(),
        ),
        ("v2 too long", b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff".to_vec()),
    ];
    for (what, bytes) in &cases {
        let mut s = plain(addr);
        s.write_all(bytes).unwrap();
        let took = assert_refused(s, what);
        assert!(
            took < Duration::from_millis(900),
            "{what}: refused only after {took:?}, by the timeout rather than at once"
        );
    }
    // Dripped: a valid start that never completes is closed by
    // header_timeout (1 s), with no response.
    let mut s = plain(addr);
    let start = Instant::now();
    for b in b"PROXY TCP4 10.1" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_refused(s, "dripped header");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "a dripped header was closed after {took:?}, want header_timeout (1 s)"
    );
    // Nothing was answered, so nothing was logged.
    let refused = cases.len() + 1;
    await_value(
        server.admin_addr(),
        "shardhttpd_proxy_protocol_total",
        &[("result", "refused")],
        refused as f64,
    );
    assert!(log_lines(&log).is_empty(), "{:?}", log_lines(&log));

    // A peer outside trusted_proxies is refused, valid header or not.
    let site = Site::new("proxy-untrusted");
    let server = Server::start(
        &site.root,
        &[
            "--proxy-protocol",
            "true",
            "--trusted-proxies",
            "127.0.0.2/32",
        ],
    );
    let mut s = plain(server.plain_addr());
    s.write_all(
        &[
            b"PROXY TCP4 198.51.100.4 127.0.0.1 40000 80\r\n".as_slice(),
            GET,
        ]
        .concat(),
    )
    .unwrap();
    assert_refused(s, "untrusted peer");
    // The trusted one is served.
    let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 2), server.plain_addr());
    s.write_all(
        &[
            b"PROXY TCP4 198.51.100.4 127.0.0.1 40000 80\r\n".as_slice(),
            GET,
        ]
        .concat(),
    )
    .unwrap();
    assert!(response(&s).starts_with("HTTP/1.1 200"));
}

#[test]
fn proxy_protocol_without_trusted_proxies_is_a_config_error() {
    let site = Site::new("proxy-config");
    let out = support::command()
        .args([
            "--root",
            site.root.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--admin", "127.0.0.1:0", "--proxy-protocol", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--proxy-protocol") && err.contains("trusted_proxies"),
        "{err}"
    );
}

#[test]
fn real_ip_header_is_believed_from_trusted_peers_only() {
    let req = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: 6.6.6.6, 203.0.113.9, 127.0.0.1\r\nConnection: close\r\n\r\n";
    for (trusted, want) in [("127.0.0.1/32", "203.0.113.9"), ("10.0.0.0/8", "127.0.0.1")] {
        let site = Site::new("proxy-xff");
        let (log, log_arg) = json_log(&site);
        let server = Server::start(
            &site.root,
            &[
                "--real-ip-header",
                "X-Forwarded-For",
                "--trusted-proxies",
                trusted,
                "--access-log",
                &log_arg,
                "--access-log-format",
                "json",
            ],
        );
        let mut s = plain(server.plain_addr());
        s.write_all(req).unwrap();
        assert!(response(&s).starts_with("HTTP/1.1 200"));
        assert_eq!(remote_addrs(&log, 1), [want], "trusted_proxies {trusted}");
    }
}

/// The request as HAProxy's client, from [`CLIENT_IP`], over cleartext
/// or TLS (passed through by HAProxy).
fn via_haproxy(front: SocketAddr, tls: Option<&Arc<rustls::ClientConfig>>) -> String {
    let s = connect_from(CLIENT_IP, front);
    match tls {
        None => {
            let mut s = s;
            s.write_all(GET).unwrap();
            response(s)
        }
        Some(cfg) => {
            let conn =
                rustls::ClientConnection::new(Arc::clone(cfg), "localhost".try_into().unwrap())
                    .unwrap();
            let mut t = rustls::StreamOwned::new(conn, s);
            t.write_all(GET).unwrap();
            let mut out = Vec::new();
            match t.read_to_end(&mut out) {
                Ok(_) => {}
                // The server's FIN after close_notify may race the read.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof && !out.is_empty() => {}
                Err(e) => panic!("TLS read through haproxy: {e}"),
            }
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}

#[test]
fn haproxy_send_proxy_v1_and_v2_over_cleartext_and_tls() {
    if !support::installed("haproxy") {
        support::loud("SKIP: haproxy is not installed (apt-get install -y haproxy)");
        return;
    }
    let site = Site::new("proxy-haproxy");
    let (log, log_arg) = json_log(&site);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "leaf", &["localhost"]);
    let tls = support::tls::TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &[
            "--proxy-protocol",
            "true",
            "--trusted-proxies",
            "127.0.0.1/32",
            "--access-log",
            &log_arg,
            "--access-log-format",
            "json",
        ],
    );
    let plain_addr = tls.server.plain_addr();
    let mut n = 0;
    for (what, backend, opts, client) in [
        ("v1 cleartext", plain_addr, "send-proxy", None),
        ("v2 cleartext", plain_addr, "send-proxy-v2", None),
        ("v1 TLS", tls.tls_addr, "send-proxy", Some(&tls.client)),
        ("v2 TLS", tls.tls_addr, "send-proxy-v2", Some(&tls.client)),
    ] {
        let Some(h) = Haproxy::start("tcp", backend, opts) else {
            return;
        };
        let r = via_haproxy(h.addr, client);
        assert!(r.starts_with("HTTP/1.1 200"), "{what}: {r:?}");
        n += 1;
        let addrs = remote_addrs(&log, n);
        assert!(addrs.iter().all(|a| a == "127.0.0.7"), "{what}: {addrs:?}");
    }
    // Every line is the client's address, none HAProxy's own.
    assert!(
        remote_addrs(&log, n).iter().all(|a| a == "127.0.0.7"),
        "{:?}",
        log_lines(&log)
    );
}

/// Issue 36 §4: a refusal is a warn line with the client's address and
/// the reason, as nginx's "broken header … while reading PROXY protocol,
/// client: X" (an untrusted peer used to leave no line, a missing header
/// a debug line without the address), and a flood is one line a second
/// per shard that counts the refusals it stands for.
#[test]
fn refusals_are_logged_at_warn_with_client_and_reason_and_rate_limited() {
    let site = Site::new("proxy-refusal-log");
    let server = Server::start(
        &site.root,
        &[
            "--proxy-protocol",
            "true",
            "--trusted-proxies",
            "127.0.0.2/32",
            "--cores",
            "1",
        ],
    );
    let addr = server.plain_addr();
    // The refusal lines (`connection refused …`, one per logged refusal;
    // `more connections refused …`, the count of the unlogged ones).
    let refusals = || -> Vec<String> {
        server
            .log_lines()
            .into_iter()
            .filter(|l| l.contains("refused while reading PROXY protocol"))
            .collect()
    };
    let suppressed = |l: &str| -> u64 {
        support::log_field(l, "suppressed")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no suppressed= count: {l}"))
    };
    let next_line = |n: usize, what: &str| -> String {
        let ok = poll_until(FLUSHED_WITHIN, || refusals().len() > n);
        assert!(ok, "{what}: no warn line\n{}", server.log_text());
        refusals()[n].clone()
    };
    let pause = || std::thread::sleep(Duration::from_millis(1100));

    // An untrusted peer, closed unread.
    let mut s = connect_from(Ipv4Addr::LOCALHOST, addr);
    let client = s.local_addr().unwrap().to_string();
    let _ = s.write_all(b"PROXY TCP4 198.51.100.4 127.0.0.1 40000 80\r\n");
    assert_refused(s, "untrusted peer");
    let line = next_line(0, "untrusted peer");
    assert!(line.contains(" WARN "), "{line}");
    assert_eq!(
        support::log_field(&line, "client"),
        Some(client.as_str()),
        "{line}"
    );
    assert_eq!(
        support::log_field(&line, "reason"),
        Some("peer not in trusted_proxies"),
        "{line}"
    );

    // A malformed header from a trusted peer, past the rate limit's second.
    pause();
    let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 2), addr);
    let client = s.local_addr().unwrap().to_string();
    s.write_all(b"PROXY TCP4 1.2.3.999 5.6.7.8 1 2\r\n")
        .unwrap();
    assert_refused(s, "malformed header");
    let line = next_line(1, "malformed header");
    assert!(line.contains(" WARN "), "{line}");
    assert_eq!(
        support::log_field(&line, "client"),
        Some(client.as_str()),
        "{line}"
    );
    assert_eq!(
        support::log_field(&line, "reason"),
        Some("broken header"),
        "{line}"
    );
    assert!(
        line.contains("PROXY TCP4 1.2.3.999"),
        "the header is quoted: {line}"
    );
    assert_eq!(suppressed(&line), 0, "{line}");

    // A flood of untrusted peers: a line a second, counting the rest.
    pause();
    const FLOOD: u64 = 200;
    let before = refusals().len();
    let start = Instant::now();
    for _ in 0..FLOOD {
        // Bytes sent, or TCP_DEFER_ACCEPT holds the connection back.
        let mut s = plain(addr);
        let _ = s.write_all(GET);
        assert_refused(s, "flood");
    }
    let took = start.elapsed();
    let counted = |lines: &[String]| -> u64 {
        lines
            .iter()
            .map(|l| u64::from(l.contains("connection refused")) + suppressed(l))
            .sum()
    };
    let ok = poll_until(FLUSHED_WITHIN, || counted(&refusals()[before..]) >= FLOOD);
    let flood = refusals()[before..].to_vec();
    assert!(
        ok && counted(&flood) == FLOOD,
        "the lines count {} of {FLOOD} refusals: {flood:#?}",
        counted(&flood)
    );
    let most = took.as_secs() as usize + 2;
    assert!(
        flood.len() <= most,
        "{} lines for {FLOOD} refusals in {took:?}, want at most {most}: {flood:#?}",
        flood.len()
    );
    for l in &flood {
        assert!(l.contains(" WARN "), "{l}");
        if l.contains("connection refused") {
            assert_eq!(
                support::log_field(l, "reason"),
                Some("peer not in trusted_proxies"),
                "{l}"
            );
            assert!(
                support::log_field(l, "client").is_some_and(|c| c.starts_with("127.0.0.1:")),
                "{l}"
            );
        }
    }
    await_value(
        server.admin_addr(),
        "shardhttpd_proxy_protocol_total",
        &[("result", "refused")],
        (FLOOD + 2) as f64,
    );
}
