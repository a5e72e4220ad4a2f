//! Clients that ask for a large body and stop reading (issue 35): what the
//! server holds for each is bounded by its output bound (64 KiB of owned
//! bytes beyond what the socket took, `io::output::HIGH_WATER`), plus the
//! connection's own state (read buffer, TLS session, HTTP/2 tables), on
//! every protocol; the review measured 85–370 KB per such connection, and
//! gigabytes at the default connection cap. HTTP/2 connections, which
//! queue DATA until the bound, are counted in
//! `shardhttpd_output_bound_hits_total`.
//!
//! RSS is not timing (see `memory_per_connection.rs`). The kernel's socket
//! buffers are not in it.

use crate::support;

use crate::memory_per_connection::settled_rss;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use support::h2raw::RawH2;
use support::tls::{Ca, TlsServer, Wire};
use support::*;

/// Connections per protocol.
const CONNS: usize = 100;
/// Per connection: the 64 KiB bound, a 32 KiB verified-copy piece (TLS,
/// HTTP/1.1) or a last frame (HTTP/2), the read buffer and the protocol's
/// state; TLS adds its 34 KiB of records and the session. Before the
/// bound: 94–148 KiB (HTTP/1.1), 242–343 KiB (TLS), 553–597 KiB (h2c),
/// 382 KiB (h2 over TLS, epoll) and 21 MiB (h2 over TLS, io_uring).
const PER_CONN: u64 = 192 * 1024;
/// The large body: past `sendfile_threshold`, served from its fd.
const BIG: usize = 8 << 20;

/// A socket with a 4 KiB receive buffer, set before connecting.
fn small_window(addr: SocketAddr) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket
        .connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap();
    socket.into()
}

/// A client kept open (and not reading) until dropped.
type Held = Box<dyn std::any::Any>;

#[test]
fn clients_that_stop_reading_hold_at_most_the_output_bound() {
    let site = Site::new("stalled-readers");
    let body: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    site.write("big.bin", &body);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &[
            "--cores",
            "1",
            "--compress",
            "false",
            "--keepalive-timeout",
            "300",
            "--write-timeout",
            "300",
        ],
    );
    let pid = server.server.pid();
    let admin = server.server.admin_addr();
    let plain = server.server.plain_addr();
    let tls = server.tls_addr;
    let get = b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let h2_get = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", "/big.bin"),
    ];
    // A warm-up connection of each kind, so pools and arenas have grown.
    let mut warm = Vec::new();
    for (name, open) in [
        ("HTTP/1.1", 0),
        ("HTTP/1.1 over TLS", 1),
        ("h2c", 2),
        ("h2 over TLS", 3),
    ] {
        let connect = || -> Held {
            match open {
                0 => {
                    let mut s = small_window(plain);
                    s.write_all(get).unwrap();
                    Box::new(s)
                }
                1 => {
                    let mut w = Wire::tls_on(small_window(tls), &server.client, "localhost");
                    w.send(get);
                    Box::new(w)
                }
                _ => {
                    let tcp = small_window(if open == 2 { plain } else { tls });
                    let mut c = if open == 2 {
                        RawH2::h2c_on(tcp)
                    } else {
                        RawH2::tls_on(tcp, &server.client, "localhost")
                    };
                    c.open_windows();
                    c.request(1, &h2_get, true);
                    Box::new(c)
                }
            }
        };
        warm.push(connect());
        let before = settled_rss(pid);
        // Read after the warm-up's counts were published (every 250 ms).
        let hits_before = metrics::sum(
            &metrics::scrape(admin),
            "shardhttpd_output_bound_hits_total",
            &[],
        );
        let held: Vec<Held> = (0..CONNS).map(|_| connect()).collect();
        let after = settled_rss(pid);
        let grown = after.saturating_sub(before);
        let each = grown / CONNS as u64;
        eprintln!("{name}: {CONNS} stalled readers, +{grown} B RSS, {each} B each");
        assert!(
            each <= PER_CONN,
            "{name}: {each} B per stalled reader, over {PER_CONN}\n{}",
            server.server.log_text()
        );
        if open >= 2 {
            // Every HTTP/2 connection queued DATA up to the bound.
            metrics::await_value(
                admin,
                "shardhttpd_output_bound_hits_total",
                &[],
                hits_before + CONNS as f64,
            );
        }
        drop(held);
    }
    drop(warm);
}
