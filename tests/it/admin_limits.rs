//! The admin endpoint under slow clients (issue 12, item 4). Before the
//! fix, the admin read timeout applied to each `read`, so a client sending
//! one byte a second held one of the 16 client threads for as long as it
//! liked; 16 of them made `/healthz` unanswerable, and the shipped liveness
//! probe (2 s timeout) restarted a healthy pod.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::{Server, Site};

/// Slow clients kept connected to the admin port at all times.
const DRIPPERS: usize = 64;
/// How long a probe may take, well inside a liveness probe's timeout.
const PROBE_DEADLINE: Duration = Duration::from_secs(1);

/// One admin GET with a total deadline; the status code and body.
fn probe(admin: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&admin, PROBE_DEADLINE).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(PROBE_DEADLINE)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if started.elapsed() > PROBE_DEADLINE {
            return Err(format!("no complete answer within {PROBE_DEADLINE:?}"));
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("after {:?}: {e}", started.elapsed())),
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Keeps a connection open dripping one byte of a never-ending head every
/// 100 ms, reconnecting whenever the server closes it. Counts the closes and
/// the longest a connection lasted.
fn drip(admin: SocketAddr, stop: &AtomicBool, closed: &AtomicUsize, longest_ms: &AtomicUsize) {
    let head = b"GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect_timeout(&admin, Duration::from_secs(2)) else {
            thread::sleep(Duration::from_millis(100));
            continue;
        };
        let opened = Instant::now();
        for &b in head.iter().cycle() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if s.write_all(&[b]).is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
        closed.fetch_add(1, Ordering::Relaxed);
        longest_ms.fetch_max(opened.elapsed().as_millis() as usize, Ordering::Relaxed);
    }
}

#[test]
fn admin_probes_answer_within_a_second_under_64_dripping_clients() {
    let site = Site::new("admin-slowloris");
    let server = Server::start(&site.root, &["--cores", "1"]);
    let admin = server.admin_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    let longest_ms = Arc::new(AtomicUsize::new(0));
    let drippers: Vec<_> = (0..DRIPPERS)
        .map(|_| {
            let (stop, closed, longest) = (stop.clone(), closed.clone(), longest_ms.clone());
            thread::spawn(move || drip(admin, &stop, &closed, &longest))
        })
        .collect();
    // Let every dripper connect and start dripping.
    thread::sleep(Duration::from_millis(500));
    let mut failures = Vec::new();
    let end = Instant::now() + Duration::from_secs(6);
    let mut probes = 0;
    while Instant::now() < end {
        for path in ["/healthz", "/metrics", "/readyz"] {
            probes += 1;
            match probe(admin, path) {
                Ok((200, body)) => {
                    if path == "/metrics" {
                        assert!(
                            body.contains("shardhttpd_"),
                            "/metrics body without metrics: {body:.200}"
                        );
                    }
                }
                Ok((status, body)) => failures.push(format!("{path}: {status} {body:.100}")),
                Err(e) => failures.push(format!("{path}: {e}")),
            }
        }
        thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for d in drippers {
        d.join().unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} of {probes} admin probes failed under {DRIPPERS} dripping clients: {failures:?}\n{}",
        failures.len(),
        server.log_text()
    );
    // The drippers were cut off by the whole-head deadline (2 s), not left
    // to drip for as long as they liked.
    assert!(
        closed.load(Ordering::Relaxed) >= DRIPPERS,
        "only {} dripping connections were closed by the server in 6 s",
        closed.load(Ordering::Relaxed)
    );
    let longest = longest_ms.load(Ordering::Relaxed);
    assert!(
        longest < 4_000,
        "a dripping connection lasted {longest} ms; the head deadline is 2 s"
    );
}

#[test]
fn admin_request_head_has_a_total_deadline() {
    let site = Site::new("admin-deadline");
    let server = Server::start(&site.root, &["--cores", "1"]);
    let mut s = TcpStream::connect(server.admin_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let started = Instant::now();
    let mut closed_after = None;
    // One byte every 200 ms, far inside any per-read timeout.
    for &b in
        b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter()
    {
        if s.write_all(&[b]).is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(_) => panic!("an answer to an incomplete head"),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed_after = Some(started.elapsed());
                break;
            }
        }
        thread::sleep(Duration::from_millis(150));
    }
    let after = closed_after.expect("the admin endpoint kept a dripping client for 12 s");
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(4),
        "closed after {after:?}; the head deadline is 2 s"
    );
}
