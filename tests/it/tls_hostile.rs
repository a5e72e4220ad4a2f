//! Hostile clients at the edge: invalid Host values, the per-core
//! connection cap, and bad TLS input (garbage, truncated or dribbled
//! ClientHellos, stalled handshakes, a thousand aborted handshakes). Each
//! must close cleanly, never take the server down, and leave well-behaved
//! clients served.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::ClientConnection;
use support::tls::*;
use support::*;

fn setup(tag: &str, extra: &[&str]) -> (Site, Ca, TlsServer) {
    let site = Site::new(tag);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, extra);
    (site, ca, server)
}

fn scrape(server: &Server) -> String {
    let mut w = Wire::plain(server.admin_addr());
    w.roundtrip("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .body_str()
}

fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A real ClientHello, as the rustls client would send it.
fn client_hello(server: &TlsServer) -> Vec<u8> {
    let name = ServerName::try_from("localhost").unwrap();
    let mut c = ClientConnection::new(Arc::clone(&server.client), name).unwrap();
    let mut hello = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut hello).unwrap();
    }
    assert!(hello.len() > 100 && hello[0] == 0x16, "{hello:?}");
    hello
}

/// Read until EOF/reset; Err if the server keeps the socket open past `within`.
fn closes_within(s: &mut TcpStream, within: Duration) -> Result<usize, String> {
    s.set_read_timeout(Some(within)).unwrap();
    let end = Instant::now() + within;
    let mut got = 0;
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got += n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(format!("still open after {within:?} ({got} bytes read)"))
            }
            Err(_) => return Ok(got),
        }
        if Instant::now() > end {
            return Err(format!("still sending after {within:?}"));
        }
    }
}

fn still_serves(server: &TlsServer) {
    let mut w = server.wire(Transport::Tls);
    assert_eq!(w.roundtrip(&get("/index.html")).body, INDEX_HTML);
    let mut w = server.wire(Transport::Plain);
    assert_eq!(w.roundtrip(&get("/index.html")).body, INDEX_HTML);
}

#[test]
fn invalid_host_values_get_400_and_close() {
    let (_site, _ca, server) = setup("hostile-host", &[]);
    for host in ["a b", "a/b", "u@a", "a:8x", "[::1"] {
        for t in BOTH {
            let mut w = server.wire(t);
            w.send(format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
            let r = w.read_response_to("GET").unwrap();
            assert_eq!(r.status, 400, "{t:?} Host: {host}: {r:?}");
            assert!(r.body_str().contains("Host"), "{r:?}");
            w.expect_closed(Duration::from_secs(3)).unwrap();
        }
    }
    for host in [
        "example.com",
        "example.com:8443",
        "127.0.0.1",
        "[::1]:80",
        "",
    ] {
        let r = server
            .wire(Transport::Tls)
            .roundtrip(&format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 200, "Host: {host}: {r:?}");
    }
}

#[test]
fn connection_cap_pauses_accepting_and_keeps_serving() {
    let (_site, _ca, server) = setup(
        "hostile-cap",
        &["--cores", "1", "--max-connections-per-core", "4"],
    );
    let mut held: Vec<Wire> = (0..4).map(|_| server.wire(Transport::Plain)).collect();
    for w in &mut held {
        assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    }
    // The fifth is left in the kernel's queue: no answer yet.
    let mut fifth = Conn::connect(server.server.addr());
    fifth.send(get("/style.css").as_bytes());
    fifth.set_read_timeout(Duration::from_millis(700));
    assert!(
        matches!(fifth.read_response(), Err(ReadError::Timeout { .. })),
        "a connection past the cap was served"
    );
    // The connections already accepted keep being served.
    for w in &mut held {
        assert_eq!(w.roundtrip(&get("/style.css")).body, STYLE_CSS);
    }
    let mut text = String::new();
    assert!(
        poll_until(Duration::from_secs(3), || {
            text = scrape(&server.server);
            metric_sum(&text, "shardhttpd_connections_limit_reached_total", &[]) == 1.0
        }),
        "{text}"
    );
    // One closes: the queued one is accepted and answered.
    held.pop();
    fifth.set_read_timeout(Duration::from_secs(5));
    let r = fifth.read_response().expect("answered once under the cap");
    assert_eq!(r.body, STYLE_CSS);
}

#[test]
fn garbage_on_the_tls_port_closes_cleanly() {
    let (_site, _ca, server) = setup("hostile-garbage", &[]);
    let junk: Vec<u8> = (0..3000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    for first in [
        &[0x16u8, 0x03, 0x01, 0xff, 0xff][..],
        &[0x00],
        &[0x17, 0x03, 0x03, 0x00, 0x10],
        &[0xff],
    ] {
        let mut s = TcpStream::connect(server.tls_addr).unwrap();
        s.write_all(first).unwrap();
        let _ = s.write_all(&junk);
        closes_within(&mut s, Duration::from_secs(3)).unwrap_or_else(|e| panic!("{first:?}: {e}"));
    }
    still_serves(&server);
    let mut text = String::new();
    assert!(
        poll_until(Duration::from_secs(3), || {
            text = scrape(&server.server);
            metric_sum(
                &text,
                "shardhttpd_tls_handshakes_total",
                &[("result", "failed")],
            ) >= 4.0
        }),
        "{text}"
    );
}

#[test]
fn truncated_client_hello_closes_and_stalled_handshake_times_out() {
    let (_site, _ca, server) = setup("hostile-truncated", &["--header-timeout", "1s"]);
    let hello = client_hello(&server);
    // Half a ClientHello, then the client closes its side.
    let mut s = TcpStream::connect(server.tls_addr).unwrap();
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    closes_within(&mut s, Duration::from_secs(3)).unwrap();
    // Half a ClientHello, then silence: the header timeout closes it.
    let mut s = TcpStream::connect(server.tls_addr).unwrap();
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    let started = Instant::now();
    closes_within(&mut s, Duration::from_secs(4)).unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    // The whole ClientHello, then silence after the server's flight.
    let mut s = TcpStream::connect(server.tls_addr).unwrap();
    s.write_all(&hello).unwrap();
    let got = closes_within(&mut s, Duration::from_secs(4)).unwrap();
    assert!(got > 0, "no ServerHello");
    still_serves(&server);
    let mut text = String::new();
    assert!(
        poll_until(Duration::from_secs(3), || {
            text = scrape(&server.server);
            metric_sum(
                &text,
                "shardhttpd_tls_handshakes_total",
                &[("result", "failed")],
            ) >= 3.0
        }),
        "{text}"
    );
    assert!(
        metric_sum(
            &text,
            "shardhttpd_connections_closed_total",
            &[("reason", "header_timeout")]
        ) >= 2.0,
        "{text}"
    );
}

/// A socket that writes one byte per call, with a pause, so every TLS
/// record (the ClientHello included) arrives in one-byte segments.
struct Dribble(TcpStream);

impl Read for Dribble {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Dribble {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_micros(300));
        self.0.write(&buf[..1])
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[test]
fn client_hello_in_one_byte_writes_completes() {
    let (_site, _ca, server) = setup("hostile-dribble", &[]);
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(Arc::clone(&server.client), name).unwrap();
    let sock = TcpStream::connect(server.tls_addr).unwrap();
    sock.set_nodelay(true).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sock = Dribble(sock);
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(get("/index.html").as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(INDEX_HTML) {
        let n = tls.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 1 000 handshakes abandoned after the server's first flight (50 open at
/// a time): every one is counted as failed, and the memory they took is
/// given back.
#[test]
fn a_thousand_aborted_handshakes_give_their_memory_back() {
    let (_site, _ca, server) = setup("hostile-aborted", &["--cores", "1"]);
    let hello = client_hello(&server);
    let abort_batch = |n: usize| {
        let socks: Vec<TcpStream> = (0..n)
            .map(|_| {
                let mut s = TcpStream::connect(server.tls_addr).unwrap();
                s.write_all(&hello).unwrap();
                s
            })
            .collect();
        for mut s in socks {
            // Wait for the server's flight, so its session state exists.
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            let _ = s.read(&mut b);
        }
    };
    // Warm up pools and allocator arenas, then measure.
    abort_batch(50);
    still_serves(&server);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(server.server.pid());
    let mut peak = before;
    for _ in 0..20 {
        abort_batch(50);
        peak = peak.max(rss_kib(server.server.pid()));
    }
    let mut text = String::new();
    assert!(
        poll_until(Duration::from_secs(5), || {
            text = scrape(&server.server);
            metric_sum(
                &text,
                "shardhttpd_tls_handshakes_total",
                &[("result", "failed")],
            ) >= 1050.0
        }),
        "{text}"
    );
    assert_eq!(
        metric_sum(&text, "shardhttpd_connections_active", &[]),
        0.0,
        "{text}"
    );
    still_serves(&server);
    // The shard trims its heap on the tick after it goes idle.
    std::thread::sleep(Duration::from_millis(600));
    let after = rss_kib(server.server.pid());
    eprintln!("RSS before {before} KiB, peak {peak} KiB, after {after} KiB");
    assert!(
        after <= before + 1024,
        "RSS grew from {before} KiB to {after} KiB over 1000 aborted handshakes (peak {peak})"
    );
}

/// A TLS client pipelines GETs for a 4 MiB file, reads nothing until the
/// server's writes block, then resets the connection: the server's next
/// write fails and the connection closes at once, counted as an error,
/// instead of waiting as if the socket were only full until the 60 s write
/// timeout (issue 24's mutant: a reset on a TLS socket taken for
/// "blocked").
#[test]
fn reset_while_tls_writes_are_blocked_closes_at_once() {
    let (site, _ca, server) = setup("hostile-reset", &["--write-timeout", "60", "--cores", "1"]);
    site.write("big.bin", &vec![b'x'; 4 << 20]);
    let mut w = server.wire(Transport::Tls);
    // The snapshot has the file once it answers for it.
    assert!(poll_until(Duration::from_secs(10), || {
        let mut w = server.wire(Transport::Tls);
        w.roundtrip(&request("HEAD", "/big.bin", &[])).status == 200
    }));
    w.send(get("/big.bin").repeat(8).as_bytes());
    // Let the server fill the socket buffers and block.
    std::thread::sleep(Duration::from_millis(500));
    let closed = |text: &str| {
        metric_sum(
            text,
            "shardhttpd_connections_closed_total",
            &[("reason", "error")],
        )
    };
    let before = closed(&scrape(&server.server));
    let sock = w.tcp().try_clone().unwrap();
    socket2::SockRef::from(&sock)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(sock);
    drop(w);
    let start = Instant::now();
    let mut text = String::new();
    assert!(
        poll_until(Duration::from_secs(10), || {
            text = scrape(&server.server);
            closed(&text) > before
        }),
        "the reset connection is still open after 10 s\n{text}"
    );
    eprintln!("closed {:?} after the reset", start.elapsed());
    still_serves(&server);
}
