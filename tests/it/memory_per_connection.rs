//! Memory per connection (issue 11): server RSS growth over 2 000 idle
//! keep-alive connections, and over 2 000 connections holding a partial
//! request head, on one shard; over TLS (issue 24), idle keep-alive
//! sessions after their handshake and sessions stopped mid-handshake.
//!
//! RSS is not timing: it depends on what the server keeps per connection
//! (slab slot, timer-wheel entry, buffers), not on how fast the machine is.
//! The measurement is a delta between two settled readings, taken after a
//! warm-up that brings the shard's buffer pool, the allocator's arenas and
//! the per-connection vectors past their first growth steps.
//!
//! The kernel's per-socket memory is not in the process's RSS; only what
//! shardhttpd allocates is measured.

use crate::support;

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::tls::*;
use support::*;

/// Connections measured in each test.
const CONNS: usize = 2000;
/// Connections opened (and kept open) before the baseline reading.
const WARM: usize = 64;
/// Budget per idle keep-alive connection (issue 11).
const IDLE_PER_CONN: u64 = 128;
/// Budget per connection holding a partial head (issue 11).
const PARTIAL_PER_CONN: u64 = 2048;
/// Fixed allowance on top of the per-connection budget. RSS counts whole
/// 4 KiB pages, and the growth lands in a few separately growing places:
/// the slab's chunks (64 slots each, allocated as needed), its vector of
/// chunk pointers, and the timer wheel's slot vectors, which double as
/// entries arrive (at 2 000 connections the outgrown copies of the one
/// slot they all share add up to under 16 KiB). 64 KiB covers a partly
/// touched page per region and those outgrown vectors; it is 32 bytes per
/// connection, a quarter of the idle budget and far below any buffer.
const ALLOWANCE: u64 = 64 * 1024;

pub fn rss_bytes(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// RSS once it has stopped changing (the shard has handled every event the
/// test caused): the same reading 300 ms apart, within 10 s.
pub fn settled_rss(pid: u32) -> u64 {
    let end = Instant::now() + Duration::from_secs(10);
    let mut last = rss_bytes(pid);
    loop {
        thread::sleep(Duration::from_millis(300));
        let now = rss_bytes(pid);
        if now == last || Instant::now() >= end {
            return now;
        }
        last = now;
    }
}

fn start(tag: &str) -> (Site, Server) {
    let site = Site::new(tag);
    site.write("a.txt", &[b'a'; 100]);
    let server = Server::start(
        &site.root,
        &[
            "--cores",
            "1",
            "--header-timeout",
            "300",
            "--keepalive-timeout",
            "300",
        ],
    );
    (site, server)
}

/// A keep-alive connection that has had one request answered.
fn served(server: &Server) -> Conn {
    let mut c = server.connect();
    c.send(get("/a.txt").as_bytes());
    let resp = c.read_response().expect("response");
    assert_eq!(resp.status, 200);
    assert!(!resp.says_close(), "keep-alive expected");
    c
}

/// The head of a request that has not ended yet: 200 bytes, no blank line.
fn partial_head() -> Vec<u8> {
    let mut head =
        b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slow-client\r\n".to_vec();
    head.extend_from_slice(b"X-Pad: ");
    head.resize(198, b'p');
    head.extend_from_slice(b"\r\n");
    head
}

/// A connection that has sent [`partial_head`] and waits.
fn partial(server: &Server) -> Conn {
    let mut c = server.connect();
    c.send(&partial_head());
    c
}

fn check_growth(what: &str, before: u64, after: u64, per_conn: u64, server: &Server) {
    let grown = after.saturating_sub(before);
    let limit = CONNS as u64 * per_conn + ALLOWANCE;
    eprintln!(
        "{what}: RSS {before} -> {after} B, +{grown} B for {CONNS} connections ({:.0} B each; limit {limit} B)",
        grown as f64 / CONNS as f64
    );
    assert!(
        grown <= limit,
        "{what}: RSS grew by {grown} B for {CONNS} connections ({} B each), over {CONNS} × {per_conn} B + {ALLOWANCE} B\n{}",
        grown / CONNS as u64,
        server.log_text()
    );
}

#[test]
fn idle_keep_alive_connections_cost_at_most_128_bytes_each() {
    let (_site, server) = start("mem-idle");
    // Warm-up, kept open so its slots are not reused by the measured ones:
    // some served, some holding a partial head (which passes through the
    // read-buffer pool too).
    let mut warm: Vec<Conn> = (0..WARM / 2).map(|_| served(&server)).collect();
    warm.extend((0..WARM / 2).map(|_| partial(&server)));
    let before = settled_rss(server.pid());
    let mut conns: Vec<Conn> = (0..CONNS).map(|_| served(&server)).collect();
    let after = settled_rss(server.pid());
    check_growth("idle keep-alive", before, after, IDLE_PER_CONN, &server);
    // They are alive and keep working.
    for c in conns.iter_mut().step_by(97) {
        c.send(get("/a.txt").as_bytes());
        assert_eq!(c.read_response().expect("second response").status, 200);
    }
    drop(warm);
}

#[test]
fn connections_holding_a_partial_head_cost_at_most_2_kib_each() {
    let (_site, server) = start("mem-partial");
    let mut warm: Vec<Conn> = (0..WARM / 2).map(|_| served(&server)).collect();
    warm.extend((0..WARM / 2).map(|_| partial(&server)));
    let before = settled_rss(server.pid());
    let mut conns: Vec<Conn> = (0..CONNS).map(|_| partial(&server)).collect();
    let after = settled_rss(server.pid());
    check_growth("partial head", before, after, PARTIAL_PER_CONN, &server);
    // The server kept what arrived: finishing a head gets its answer.
    for c in conns.iter_mut().step_by(97) {
        c.send(b"\r\n");
        assert_eq!(c.read_response().expect("response").status, 200);
    }
    drop(warm);
}

/// Budget per idle TLS keep-alive session after its handshake (issue 24):
/// the session holds no ciphertext buffer while idle (it goes back to the
/// shard's pool, as OpenSSL's `SSL_MODE_RELEASE_BUFFERS` does), leaving
/// rustls's own state: the `ServerConnection` (1.2 KiB), its receive
/// buffer (4 KiB, kept once anything was read), the record keys. Measured
/// 7.8 KiB (15.9 KiB while the buffer stayed); the 4 KiB needs a
/// session without rustls's receive buffer (its unbuffered API).
const TLS_IDLE_PER_CONN: u64 = 10 * 1024;
/// Budget per session stopped after the server's first flight (it waits
/// for the client's Finished): rustls's handshake state and transcript.
/// Measured 8.3 KiB.
const TLS_HANDSHAKING_PER_CONN: u64 = 12 * 1024;
/// TLS sessions measured (fewer than cleartext: each costs a handshake).
const TLS_CONNS: usize = 1000;

fn start_tls(tag: &str) -> (Site, TlsServer) {
    let site = Site::new(tag);
    site.write("a.txt", &[b'a'; 100]);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &[
            "--cores",
            "1",
            "--header-timeout",
            "300",
            "--keepalive-timeout",
            "300",
        ],
    );
    (site, server)
}

/// A TLS keep-alive connection that has had one request answered.
fn served_tls(server: &TlsServer) -> Wire {
    let mut w = server.wire(Transport::Tls);
    let resp = w.roundtrip(&get("/a.txt"));
    assert_eq!(resp.status, 200);
    assert!(!resp.says_close(), "keep-alive expected");
    w
}

/// A connection that sent its ClientHello and got the server's flight,
/// and sends nothing more.
fn handshaking_tls(server: &TlsServer) -> TcpStream {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut c = rustls::ClientConnection::new(Arc::clone(&server.client), name).unwrap();
    let mut hello = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut hello).unwrap();
    }
    let mut s = TcpStream::connect(server.tls_addr).unwrap();
    s.write_all(&hello).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    let _ = std::io::Read::read(&mut s, &mut b);
    s
}

fn check_growth_tls(what: &str, before: u64, after: u64, per_conn: u64, server: &Server) {
    let grown = after.saturating_sub(before);
    let limit = TLS_CONNS as u64 * per_conn + ALLOWANCE;
    eprintln!(
        "{what}: RSS {before} -> {after} B, +{grown} B for {TLS_CONNS} connections ({:.0} B each; limit {limit} B)",
        grown as f64 / TLS_CONNS as f64
    );
    assert!(
        grown <= limit,
        "{what}: RSS grew by {grown} B for {TLS_CONNS} connections ({} B each), over {TLS_CONNS} × {per_conn} B + {ALLOWANCE} B\n{}",
        grown / TLS_CONNS as u64,
        server.log_text()
    );
}

#[test]
fn idle_tls_sessions_hold_no_ciphertext_buffer() {
    let (_site, server) = start_tls("mem-tls-idle");
    let mut warm: Vec<Wire> = (0..WARM).map(|_| served_tls(&server)).collect();
    let before = settled_rss(server.server.pid());
    let mut conns: Vec<Wire> = (0..TLS_CONNS).map(|_| served_tls(&server)).collect();
    let after = settled_rss(server.server.pid());
    check_growth_tls(
        "idle TLS keep-alive",
        before,
        after,
        TLS_IDLE_PER_CONN,
        &server.server,
    );
    for c in conns.iter_mut().step_by(97).chain(warm.iter_mut().take(1)) {
        assert_eq!(c.roundtrip(&get("/a.txt")).status, 200);
    }
}

#[test]
fn tls_sessions_stopped_mid_handshake() {
    let (_site, server) = start_tls("mem-tls-handshaking");
    let warm: Vec<Wire> = (0..WARM).map(|_| served_tls(&server)).collect();
    let warm2: Vec<TcpStream> = (0..WARM).map(|_| handshaking_tls(&server)).collect();
    let before = settled_rss(server.server.pid());
    let conns: Vec<TcpStream> = (0..TLS_CONNS).map(|_| handshaking_tls(&server)).collect();
    let after = settled_rss(server.server.pid());
    check_growth_tls(
        "TLS mid-handshake",
        before,
        after,
        TLS_HANDSHAKING_PER_CONN,
        &server.server,
    );
    drop((warm, warm2, conns));
}
