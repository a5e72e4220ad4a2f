//! Drains lose no request (issue 24 §2). A draining shard (SIGTERM after
//! `drain_delay`, or the old process after a SIGUSR2 handover) answers each
//! keep-alive connection's next request with `Connection: close` (and
//! close_notify over TLS), parts with a connection at rest only after
//! `drain_idle_grace` and then with a lingering close, and during
//! `drain_delay` every response says `Connection: close`. The clients here
//! retry nothing: a request that is reset, or meets an end of file, is a
//! failure, as it is for a client that does not retry.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::metrics::{scrape, sum};
use support::tls::{Ca, TlsServer};
use support::upgrade::{
    connect, expect_clean_end, process_gone, signal, status_pid, Duplex, Options, Successors,
    Traffic,
};
use support::{loud, poll_until, Server, Site};

/// How long an upgrade may take on a loaded machine.
const UPGRADE_DEADLINE: Duration = Duration::from_secs(20);

const DRAIN_CLOSES: &str = "shardhttpd_drain_closes_total";

/// A site with a small and a larger file, and the bodies to expect.
fn site(tag: &str) -> (Site, Vec<(String, Vec<u8>)>) {
    let site = Site::new(tag);
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    site.write("big.bin", &big);
    let paths = vec![
        ("/index.html".to_owned(), support::INDEX_HTML.to_vec()),
        ("/style.css".to_owned(), support::STYLE_CSS.to_vec()),
        ("/big.bin".to_owned(), big),
        ("/digits.txt".to_owned(), support::DIGITS.to_vec()),
    ];
    (site, paths)
}

/// The server under test over one transport: the process, the address the
/// clients use, and how they connect.
struct Target {
    server: Server,
    addr: SocketAddr,
    opts: Options,
}

fn start(site: &Site, tls: bool, extra: &[&str]) -> Target {
    if tls {
        let ca = Ca::new();
        let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
        let t = TlsServer::start(&site.root, &ca, &leaf, extra);
        Target {
            addr: t.tls_addr,
            opts: Options {
                tls: Some(Arc::clone(&t.client)),
                ..Options::default()
            },
            server: t.server,
        }
    } else {
        let server = Server::start(&site.root, extra);
        Target {
            addr: server.addr(),
            opts: Options::default(),
            server,
        }
    }
}

/// One keep-alive request on `s`; whether the response closes the
/// connection. Panics on anything but a whole 200.
#[track_caller]
fn request(s: &mut dyn Duplex, what: &str) -> bool {
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .and_then(|()| s.flush())
        .unwrap_or_else(|e| panic!("{what}: send: {e}"));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            if buf.len() >= end + 4 + support::INDEX_HTML.len() {
                assert!(head.starts_with("http/1.1 200"), "{what}: {head}");
                assert_eq!(&buf[end + 4..], support::INDEX_HTML, "{what}");
                return head.contains("\r\nconnection: close");
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => panic!("{what}: closed after {} bytes", buf.len()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("{what}: read after {} bytes: {e}", buf.len()),
        }
    }
}

fn drain_closes(admin: SocketAddr, kind: &str) -> f64 {
    sum(&scrape(admin), DRAIN_CLOSES, &[("kind", kind)])
}

/// Keep-alive clients and clients opening a connection per request run
/// through five upgrades and then a SIGTERM with `drain_delay`, and not one
/// request fails. In the delay, keep-alive clients are told
/// `Connection: close` and leave (as they would for an instance the load
/// balancer dropped); connections at rest when the drain starts are
/// answered once more within the grace, or parted with by a clean close.
fn load_across_upgrades_and_a_drain(tls: bool) {
    let (site, paths) = site(if tls { "drain-load-tls" } else { "drain-load" });
    let t = start(
        &site,
        tls,
        &["--drain-delay", "2", "--drain-idle-grace", "1"],
    );
    let successors = Successors::default();
    let (addr, admin) = (t.addr, t.server.admin_addr());
    let logs = |t: &Target| t.server.log_text();

    let traffic = Traffic::with(addr, 3, 3, paths.clone(), t.opts.clone());
    thread::sleep(Duration::from_secs(1));
    let mut pid = t.server.pid();
    for round in 1..=5 {
        signal(pid, "USR2");
        assert!(
            poll_until(UPGRADE_DEADLINE, || process_gone(pid)),
            "round {round}: old process {pid} still running\n{}",
            logs(&t)
        );
        let new = status_pid(admin).expect("status.json after the upgrade");
        successors.push(new);
        assert_ne!(new, pid, "round {round}");
        pid = new;
        thread::sleep(Duration::from_secs(1));
    }
    assert!(
        traffic.failures() == 0,
        "after the upgrades: {}",
        traffic.failures()
    );

    // The SIGTERM: clients that leave when told to close, and connections
    // at rest through the delay.
    let leaving = Options {
        leave: true,
        pause: Duration::from_millis(50),
        ..t.opts.clone()
    };
    let leavers = Traffic::with(addr, 20, 0, paths, leaving);
    let mut quiet: Vec<Box<dyn Duplex>> = (0..4)
        .map(|i| {
            let mut s = connect(addr, &t.opts).unwrap_or_else(|e| panic!("quiet {i}: {e:?}"));
            assert!(!request(&mut *s, "quiet connection's first request"));
            s
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    signal(pid, "TERM");
    assert!(
        poll_until(Duration::from_millis(1500), || leavers.left() == 20),
        "keep-alive clients not told to close during drain_delay: {} of 20 left\n{}",
        leavers.left(),
        logs(&t)
    );
    // Counted as they close (shards publish every 250 ms).
    let mut moved = 0.0;
    poll_until(Duration::from_millis(800), || {
        moved = drain_closes(admin, "after_response");
        moved >= 20.0
    });
    // The new-connection clients stop before the listeners close (a load
    // balancer stopped sending them here); then every tally must be clean.
    thread::sleep(Duration::from_millis(1700).saturating_sub(t0.elapsed()));
    let tally = traffic.stop();
    let left = leavers.stop();
    eprintln!("load: {tally:?}\nleavers: {left:?}");
    assert_eq!(tally.failures(), 0, "{tally:#?}\n{}", logs(&t));
    assert!(tally.ok > 0 && tally.told_to_close > 0, "{tally:?}");
    assert_eq!(left.failures(), 0, "{left:#?}\n{}", logs(&t));
    assert_eq!(left.left, 20, "{left:?}");
    assert!(moved >= 20.0, "drain closes after a response: {moved}");

    // The drain starts when the listeners close.
    assert!(
        poll_until(Duration::from_secs(3), || TcpStream::connect(addr).is_err()),
        "still accepting after drain_delay"
    );
    let drain_began = Instant::now();
    // Two of the connections at rest send their next request within the
    // grace: answered, with Connection: close, then a clean close.
    for (i, s) in quiet.iter_mut().take(2).enumerate() {
        assert!(
            request(&mut **s, &format!("quiet {i} during the drain")),
            "quiet {i}: the answer in a drain says Connection: close"
        );
        expect_clean_end(&mut **s).unwrap_or_else(|e| panic!("quiet {i}: {e:?}"));
    }
    // The other two stay silent: parted with after the grace, by an end of
    // file (after close_notify over TLS), not a reset.
    for (i, s) in quiet.iter_mut().enumerate().skip(2) {
        expect_clean_end(&mut **s).unwrap_or_else(|e| panic!("quiet {i}: {e:?}"));
        let after = drain_began.elapsed();
        assert!(
            after >= Duration::from_millis(700),
            "quiet {i} parted with {after:?} into the drain, before the grace"
        );
    }
    drop(quiet);
    assert!(
        poll_until(Duration::from_secs(10), || process_gone(pid)),
        "still running {:?} after SIGTERM\n{}",
        t0.elapsed(),
        logs(&t)
    );
    let log = logs(&t);
    assert!(!log.contains("force-closing"), "{log}");
}

#[test]
fn keepalive_and_new_clients_lose_nothing_across_five_upgrades_and_a_sigterm() {
    load_across_upgrades_and_a_drain(false);
}

#[test]
fn keepalive_and_new_tls_clients_lose_nothing_across_five_upgrades_and_a_sigterm() {
    load_across_upgrades_and_a_drain(true);
}

/// A connection at rest when the drain starts: kept for
/// `drain_idle_grace`, then parted with by our FIN (close_notify first over
/// TLS) while the server goes on reading, so a request that crosses the
/// FIN meets an end of file and not a reset. A connection that sends its
/// next request within the grace is answered with `Connection: close`.
/// `shardhttpd_drain_closes_total` counts each by kind, and one stuck in a
/// download is closed at `shutdown_grace`.
fn parted_after_the_grace(tls: bool) {
    let site = Site::new(if tls { "drain-idle-tls" } else { "drain-idle" });
    let large: Vec<u8> = (0..8u32 << 20).map(|i| (i % 253) as u8).collect();
    site.write("large.bin", &large);
    let mut t = start(
        &site,
        tls,
        &[
            "--cores",
            "1",
            "--shutdown-grace",
            "5",
            "--drain-idle-grace",
            "1",
        ],
    );
    let (addr, admin) = (t.addr, t.server.admin_addr());
    let mut silent = connect(addr, &t.opts).unwrap();
    assert!(!request(&mut *silent, "silent"));
    let mut late = connect(addr, &t.opts).unwrap();
    assert!(!request(&mut *late, "late"));
    // A download the client stops reading holds the drain to its deadline.
    let mut stuck = connect(addr, &t.opts).unwrap();
    stuck
        .write_all(b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .and_then(|()| stuck.flush())
        .unwrap();
    let mut first = [0u8; 1024];
    let _ = stuck.read(&mut first).unwrap();
    for kind in ["after_response", "idle_grace", "deadline"] {
        assert_eq!(drain_closes(admin, kind), 0.0, "{kind} before the drain");
    }

    let t0 = Instant::now();
    t.server.signal("TERM");
    // Within the grace: answered, with Connection: close, and closed cleanly.
    thread::sleep(Duration::from_millis(400));
    assert!(request(&mut *late, "late"), "Connection: close in a drain");
    expect_clean_end(&mut *late).unwrap_or_else(|e| panic!("late: {e:?}"));
    // Silent: parted with after the grace.
    expect_clean_end(&mut *silent).unwrap_or_else(|e| panic!("silent: {e:?}"));
    let parted = t0.elapsed();
    assert!(
        parted >= Duration::from_millis(900) && parted < Duration::from_millis(2500),
        "parted with {parted:?} after SIGTERM; the grace is 1 s"
    );
    if !tls {
        // The server still reads: a request that crossed its FIN is read
        // and dropped, so the client sees its end of file, not a reset.
        // (Had the server closed its socket, the kernel would answer the
        // request with a reset, and the second write fail with EPIPE; a
        // read would still say end of file.)
        let req = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n";
        silent.write_all(req).unwrap();
        thread::sleep(Duration::from_millis(200));
        silent
            .write_all(req)
            .unwrap_or_else(|e| panic!("a request after the FIN was reset: {e}"));
        let mut b = [0u8; 64];
        match silent.read(&mut b) {
            Ok(0) => {}
            other => panic!("a request after the FIN got {other:?}, not an end of file"),
        }
    }
    drop(silent);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut counted = (0.0, 0.0);
    while Instant::now() < deadline {
        counted = (
            drain_closes(admin, "after_response"),
            drain_closes(admin, "idle_grace"),
        );
        if counted == (1.0, 1.0) {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(counted, (1.0, 1.0), "(after_response, idle_grace)");
    // The stuck download ends at shutdown_grace.
    let status = t
        .server
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit\n{}", t.server.log_text()));
    assert!(status.success(), "{status}");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(8),
        "exited {took:?} after SIGTERM; shutdown_grace is 5 s"
    );
    assert!(
        t.server
            .log_text()
            .contains("shutdown grace ran out; force-closing connections"),
        "{}",
        t.server.log_text()
    );
    drop(stuck);
}

#[test]
fn an_idle_connection_is_parted_after_the_drain_grace_with_a_clean_close() {
    parted_after_the_grace(false);
}

#[test]
fn an_idle_tls_connection_is_parted_after_the_drain_grace_with_close_notify() {
    parted_after_the_grace(true);
}

/// wrk keeps 50 connections busy through three upgrades and reports no
/// socket error (before the fix: a read error per connection and upgrade).
#[test]
fn wrk_across_three_upgrades_reports_no_socket_errors() {
    if !support::installed("wrk") {
        loud("SKIP: wrk not installed (Debian package wrk)");
        return;
    }
    let (site, _) = site("drain-wrk");
    let server = Server::start(&site.root, &[]);
    let successors = Successors::default();
    let (addr, admin) = (server.addr(), server.admin_addr());
    let url = format!("http://{addr}/index.html");
    let wrk = thread::spawn(move || {
        Command::new("wrk")
            .args(["-t2", "-c50", "-d9s", &url])
            .output()
            .expect("run wrk")
    });
    thread::sleep(Duration::from_millis(1500));
    let mut pid = server.pid();
    for round in 1..=3 {
        signal(pid, "USR2");
        assert!(
            poll_until(UPGRADE_DEADLINE, || process_gone(pid)),
            "round {round}: old process {pid} still running\n{}",
            server.log_text()
        );
        let new = status_pid(admin).expect("status.json after the upgrade");
        successors.push(new);
        pid = new;
        thread::sleep(Duration::from_secs(2));
    }
    let out = wrk.join().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}");
    assert!(out.status.success(), "wrk: {out:?}");
    let requests: u64 = report
        .lines()
        .find_map(|l| l.split_once(" requests in ").map(|(n, _)| n.trim().parse()))
        .and_then(Result::ok)
        .unwrap_or(0);
    assert!(requests > 0, "{report}");
    // wrk prints these lines only when something went wrong.
    assert!(!report.contains("Socket errors"), "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    signal(pid, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(pid)));
}
