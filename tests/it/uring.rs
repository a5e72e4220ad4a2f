//! The shard's event source (`--io auto|epoll|uring`, issue 26): what
//! `auto` picks and says, the fallback to epoll where io_uring is forbidden
//! (a seccomp filter as a container runtime installs, from
//! `tests/uring/no_io_uring.py`), the per-shard metric, and the behaviours
//! that depend on how the loop learns about a socket: a connection the
//! server closes is closed on the wire (a ring's poll holds the socket
//! until it is removed), keep-alive, pipelining and timeouts. The other
//! suites run on whichever backend `$SHARDHTTPD_TEST_IO` names (`.ci/run`
//! runs them on both).

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use support::metrics::{scrape, sum};
use support::{Server, Site};

/// Where a forced `--io uring` cannot start (a kernel or sandbox without
/// io_uring), the tests of the uring backend itself have nothing to run
/// on; they say so loudly instead of passing silently.
fn uring_available() -> bool {
    let site = site_with("uring-probe", b"a");
    // --check does not start shards: probe by starting one for real.
    let mut child = support::command()
        .args(args(&site, "uring"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn shardhttpd");
    let stderr = child.stderr.take().unwrap();
    let mut ok = false;
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
        if line.contains("listening addr=") {
            ok = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    ok
}

/// [`uring_available`], saying SKIP for `test` when not.
fn uring_or_skip(test: &str) -> bool {
    let ok = uring_available();
    if !ok {
        support::loud(&format!("SKIP {test}: --io uring cannot start here"));
    }
    ok
}

/// python3 and the wrapper that runs a program under a seccomp filter
/// refusing io_uring, or SKIP for `test` without python3.
fn seccomp_wrapper(test: &str) -> Option<(&'static str, PathBuf)> {
    if !support::installed("python3") {
        support::loud(&format!("SKIP {test}: python3 is not installed"));
        return None;
    }
    Some((
        "python3",
        support::repo().join("tests/uring/no_io_uring.py"),
    ))
}

/// A site with `a.txt` holding `body`.
fn site_with(tag: &str, body: &[u8]) -> Site {
    let site = Site::new(tag);
    site.write("a.txt", body);
    site
}

/// One shard (a count), so the one `io backend` line and the gauge are its.
fn one_shard() -> String {
    "1".into()
}

fn args(site: &Site, io: &str) -> Vec<String> {
    [
        "--root",
        site.root.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--cores",
        &one_shard(),
        "--io",
        io,
    ]
    .map(String::from)
    .to_vec()
}

fn backend_gauge(server: &Server, backend: &str) -> f64 {
    sum(
        &scrape(server.admin_addr()),
        "shardhttpd_io_backend",
        &[("backend", backend)],
    )
}

fn io_line(server: &Server) -> String {
    server
        .wait_for_log("io backend", Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no `io backend` line\n{}", server.log_text()))
}

#[test]
fn auto_picks_uring_where_a_ring_sets_up_and_says_why() {
    if !uring_or_skip("auto_picks_uring") {
        return;
    }
    let site = site_with("uring-auto", b"hello");
    let server = Server::spawn(&args(&site, "auto"), 1);
    let line = io_line(&server);
    assert_eq!(
        support::log_field(&line, "backend"),
        Some("uring"),
        "{line}"
    );
    assert!(line.contains("self-check"), "the reason says why: {line}");
    assert_eq!(server.get("/a.txt").body_str(), "hello");
    assert_eq!(backend_gauge(&server, "uring"), 1.0);
    assert_eq!(backend_gauge(&server, "epoll"), 0.0);
}

#[test]
fn auto_falls_back_to_epoll_when_seccomp_forbids_io_uring() {
    let Some((py, wrapper)) = seccomp_wrapper("auto_falls_back_to_epoll") else {
        return;
    };
    let site = site_with("uring-seccomp", b"served on epoll");
    let server = Server::spawn_under(&[py, wrapper.to_str().unwrap()], &args(&site, "auto"), 1);
    let line = io_line(&server);
    assert_eq!(
        support::log_field(&line, "backend"),
        Some("epoll"),
        "{line}"
    );
    assert!(
        line.contains("io_uring unavailable") && line.contains("Operation not permitted"),
        "the reason names the EPERM: {line}"
    );
    // Serves, keep-alive included, on the fallback.
    let mut conn = server.connect();
    for _ in 0..3 {
        let r = conn.roundtrip(&support::get("/a.txt"));
        assert_eq!(r.body_str(), "served on epoll");
    }
    assert_eq!(backend_gauge(&server, "epoll"), 1.0);
    assert_eq!(backend_gauge(&server, "uring"), 0.0);
}

#[test]
fn forced_uring_fails_the_start_when_seccomp_forbids_it() {
    let Some((py, wrapper)) = seccomp_wrapper("forced_uring_fails") else {
        return;
    };
    let site = site_with("uring-forced", b"a");
    let out = std::process::Command::new(py)
        .arg(&wrapper)
        .arg(support::bin())
        .args(args(&site, "uring"))
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the wrapper");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without io_uring: {stderr}");
    assert!(
        stderr.contains("--io uring") && stderr.contains("Operation not permitted"),
        "the error says what failed: {stderr}"
    );
}

#[test]
fn an_unknown_io_value_is_refused_naming_the_choices() {
    let site = site_with("uring-bad", b"a");
    let out = support::command()
        .args([
            "--root",
            site.root.to_str().unwrap(),
            "--io",
            "kqueue",
            "--check",
        ])
        .output()
        .expect("run shardhttpd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("kqueue") && stderr.contains("`auto`, `epoll`, `uring`"),
        "{stderr}"
    );
}

/// The behaviours that depend on the event source, on each backend.
fn serves_and_closes(io: &str) {
    let site = site_with(&format!("uring-serve-{io}"), b"0123456789");
    let mut a = args(&site, io);
    a.extend(["--keepalive-timeout".into(), "1".into()]);
    let server = Server::spawn(&a, 1);
    let line = io_line(&server);
    assert_eq!(support::log_field(&line, "backend"), Some(io), "{line}");

    // Keep-alive: many requests on one connection.
    let mut conn = server.connect();
    for _ in 0..50 {
        assert_eq!(
            conn.roundtrip(&support::get("/a.txt")).body_str(),
            "0123456789"
        );
    }

    // Pipelined: 32 answers, in order, from one write of requests.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = support::get("/a.txt").repeat(31)
        + &support::request("GET", "/a.txt", &[("Connection", "close")]);
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    // Read to EOF: the server's close must reach the wire (on the ring,
    // only once the poll holding the socket is removed).
    s.read_to_end(&mut all).expect("read to the server's close");
    let text = String::from_utf8_lossy(&all);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 32, "{text}");

    // The idle timeout closes a silent keep-alive connection.
    let mut idle = server.connect();
    idle.roundtrip(&support::get("/a.txt"));
    idle.expect_closed(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{io}: idle connection not closed: {e}"));

    // A client that goes away is forgotten: nothing stays open.
    for _ in 0..20 {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        c.write_all(support::get("/a.txt").as_bytes()).unwrap();
        let mut b = [0u8; 64];
        let _ = c.read(&mut b);
    }
    let admin = server.admin_addr();
    assert!(
        support::poll_until(Duration::from_secs(5), || {
            sum(&scrape(admin), "shardhttpd_connections_active", &[]) == 0.0
        }),
        "{io}: connections left open\n{}",
        server.log_text()
    );
    assert_eq!(backend_gauge(&server, io), 1.0);
}

#[test]
fn epoll_serves_keepalive_pipelined_and_closes() {
    serves_and_closes("epoll");
}

#[test]
fn uring_serves_keepalive_pipelined_and_closes() {
    if !uring_or_skip("uring_serves") {
        return;
    }
    serves_and_closes("uring");
}

/// Many connections at once, each watched by the ring and closed by the
/// server after its answer: every close must reach its client (the ring's
/// poll holds the socket until it is removed) even when removals and new
/// polls for reused fd numbers are queued in the same loop turn.
#[test]
fn uring_closes_each_of_many_connections_whose_fds_are_reused() {
    if !uring_or_skip("uring_closes_many") {
        return;
    }
    let site = site_with("uring-churn", b"x");
    let server = Server::spawn(&args(&site, "uring"), 1);
    let req = support::request("GET", "/a.txt", &[("Connection", "close")]);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let addr = server.addr();
            let req = req.clone();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    // Half the head first: the request is not complete at
                    // accept, so the connection is watched (its poll added)
                    // before it is answered and closed.
                    let (first, rest) = req.as_bytes().split_at(10);
                    s.write_all(first).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                    s.write_all(rest).unwrap();
                    let mut all = Vec::new();
                    s.read_to_end(&mut all).expect("the server closes");
                    assert!(all.starts_with(b"HTTP/1.1 200 OK"));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
}
