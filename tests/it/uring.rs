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

/// Whether this kernel lets the test process set up an io_uring ring of
/// the kind the server's shards use (README, "Event source":
/// `IORING_SETUP_SINGLE_ISSUER` with `DEFER_TASKRUN`, kernel 6.1 or
/// later), asked of the kernel directly with the io-uring crate, never of
/// the server: a regression that breaks the server's ring start-up must
/// fail these tests, not turn them into skips. `Err` says why not (the
/// kernel's error: EPERM under a container's seccomp profile or
/// `kernel.io_uring_disabled`, EINVAL for a kernel without the flags).
fn kernel_allows_a_ring() -> Result<(), String> {
    // A plain ring first, so the message tells "no io_uring at all" from
    // "too old for the flags".
    type Ring = io_uring::IoUring;
    Ring::new(8).map_err(|e| format!("io_uring_setup refused: {e}"))?;
    Ring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(8)
        .map(drop)
        .map_err(|e| {
            format!("io_uring_setup with SINGLE_ISSUER and DEFER_TASKRUN (kernel 6.1) refused: {e}")
        })
}

/// Whether the tests of the uring backend can run here: they can wherever
/// [`kernel_allows_a_ring`], and the server must then start on the ring
/// (a test that finds it does not, fails). Otherwise a loud SKIP for
/// `test` (a failure under `SHARDHTTPD_TEST_REQUIRE=all`).
fn uring_or_skip(test: &str) -> bool {
    match kernel_allows_a_ring() {
        Ok(()) => true,
        Err(why) => {
            support::skip(&format!("SKIP {test}: no io_uring here: {why}"));
            false
        }
    }
}

/// python3 and the wrapper that runs a program under a seccomp filter
/// refusing io_uring, or SKIP for `test` without python3.
fn seccomp_wrapper(test: &str) -> Option<(&'static str, PathBuf)> {
    if !support::installed("python3") {
        support::skip(&format!("SKIP {test}: python3 is not installed"));
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

/// On io_uring, cleartext connections are driven by completions: a
/// pipelined batch is received by the ring and its answers leave in one
/// ring send, so the shard thread makes no write syscall for them
/// (`syscw` counts write, writev and sendfile; on epoll the batch costs
/// one, `process_invariants::` checks that).
#[test]
fn uring_answers_a_pipelined_batch_with_a_ring_send_and_no_write_syscall() {
    if !uring_or_skip("uring_ring_send") {
        return;
    }
    let site = site_with("uring-ring-send", b"0123456789");
    let server = Server::spawn(&args(&site, "uring"), 1);
    let line = io_line(&server);
    assert!(
        line.contains("cleartext and TLS connections by completions"),
        "the start log says how connections are driven: {line}"
    );
    let shard = support::procfs::shard0(&server);
    let mut c = server.connect();
    assert_eq!(
        c.roundtrip(&support::get("/a.txt")).body_str(),
        "0123456789"
    );
    for round in 0..3 {
        let before = support::procfs::task_io(server.pid(), shard, "syscw");
        let raw = support::get("/a.txt").repeat(32);
        c.send(raw.as_bytes());
        for i in 0..32 {
            let r = c
                .read_response()
                .unwrap_or_else(|e| panic!("round {round}, answer {i}: {e}"));
            assert_eq!(r.body_str(), "0123456789", "round {round}, answer {i}");
        }
        let writes = support::procfs::task_io(server.pid(), shard, "syscw") - before;
        assert_eq!(writes, 0, "round {round}: {writes} write syscalls");
    }
}

/// Over TLS too: once the handshake is done, a pipelined batch's
/// ciphertext is received by the ring, decrypted from memory, and the
/// answers' records leave in a ring send, so the shard thread makes no
/// read or write syscall for it (`syscr` counts read, recv and recvmsg).
#[test]
fn uring_answers_a_pipelined_batch_over_tls_with_no_read_or_write_syscall() {
    use support::tls::{Ca, TlsServer, Transport};
    if !uring_or_skip("uring_tls_ring_send") {
        return;
    }
    let site = site_with("uring-tls-ring-send", b"0123456789");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, &["--io", "uring", "--cores", "1"]);
    let shard = support::procfs::shard0(&server.server);
    let mut c = server.wire(Transport::Tls);
    assert_eq!(
        c.roundtrip(&support::get("/a.txt")).body_str(),
        "0123456789"
    );
    let pid = server.server.pid();
    for round in 0..3 {
        let reads = support::procfs::task_io(pid, shard, "syscr");
        let writes = support::procfs::task_io(pid, shard, "syscw");
        let raw = support::get("/a.txt").repeat(32);
        c.send(raw.as_bytes());
        for i in 0..32 {
            let r = c
                .read_response_to("GET")
                .unwrap_or_else(|e| panic!("round {round}, answer {i}: {e}"));
            assert_eq!(r.body_str(), "0123456789", "round {round}, answer {i}");
        }
        let reads = support::procfs::task_io(pid, shard, "syscr") - reads;
        let writes = support::procfs::task_io(pid, shard, "syscw") - writes;
        assert_eq!(
            (reads, writes),
            (0, 0),
            "round {round}: read and write syscalls"
        );
    }
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// Back-pressure: a connection whose answers wait (the client does not
/// read) stops being received from: its receive is cancelled once its
/// read buffer is full, so the server's memory does not take what the
/// client keeps sending (at most a read buffer, the bounded output queue
/// and what the kernel had already received); when the client reads,
/// everything is answered, in order.
#[test]
fn uring_stops_receiving_from_a_client_that_does_not_read() {
    use socket2::{Domain, Protocol, Socket, Type};
    if !uring_or_skip("uring_backpressure") {
        return;
    }
    let site = site_with("uring-backpressure", &[b'b'; 100]);
    let mut a = args(&site, "uring");
    a.extend(["--max-requests-per-connection".into(), "1000000".into()]);
    let server = Server::spawn(&a, 1);
    assert_eq!(server.get("/a.txt").body.len(), 100);
    let before = rss_bytes(server.pid());
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    // Small client buffers: what piles up is on the server's side.
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    socket.set_send_buffer_size(16 * 1024).unwrap();
    socket
        .connect_timeout(&server.addr().into(), Duration::from_secs(5))
        .unwrap();
    let mut s: TcpStream = socket.into();
    let req = support::get("/a.txt");
    let chunk = req.repeat(256);
    // At most 4 MiB of requests (a server that kept receiving while its
    // answers wait would hold all of them), until writes block for 1.5 s.
    let cap = 4 << 20;
    s.set_nonblocking(true).unwrap();
    let (mut written, mut off) = (0usize, 0usize);
    let mut progress = std::time::Instant::now();
    while written < cap && progress.elapsed() < Duration::from_millis(1500) {
        match s.write(&chunk.as_bytes()[off..]) {
            Ok(n) => {
                written += n;
                off = (off + n) % chunk.len();
                progress = std::time::Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss_bytes(server.pid()).saturating_sub(before);
    eprintln!(
        "{} requests ({written} B) sent without reading; server RSS +{grown} B",
        written / req.len()
    );
    assert!(
        grown < 2 << 20,
        "the server took what the client sent: RSS +{grown} B for {written} B of requests"
    );
    // Whole requests only: the one cut by the last write is finished from
    // another thread (the server reads again once its answers drain).
    s.set_nonblocking(false).unwrap();
    let partial = written % req.len();
    if partial > 0 {
        let rest = req.as_bytes()[partial..].to_vec();
        let mut w = s.try_clone().unwrap();
        w.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        std::thread::spawn(move || w.write_all(&rest));
        written += req.len() - partial;
    }
    let requests = written / req.len();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut conn = support::Conn::from_stream(s);
    for i in 0..requests {
        let r = conn
            .read_response()
            .unwrap_or_else(|e| panic!("answer {i} of {requests}: {e}"));
        assert_eq!(r.status, 200, "answer {i}");
        assert_eq!(r.body.len(), 100, "answer {i}");
    }
}

/// Back-pressure over TLS: a client that sends requests without reading
/// the answers stops being received from once its plaintext buffer is
/// full and a record's worth of ciphertext waits, so the server's memory
/// does not take what it sends; once it reads, every request is answered.
#[test]
fn uring_stops_receiving_from_a_tls_client_that_does_not_read() {
    use rustls::pki_types::ServerName;
    use rustls::ClientConnection;
    use socket2::{Domain, Protocol, Socket, Type};
    use support::tls::{Ca, TlsServer, Transport};
    if !uring_or_skip("uring_tls_backpressure") {
        return;
    }
    let site = site_with("uring-tls-backpressure", &[b'b'; 100]);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let extra = [
        "--io",
        "uring",
        "--cores",
        "1",
        "--max-requests-per-connection",
        "1000000",
    ];
    let server = TlsServer::start(&site.root, &ca, &leaf, &extra);
    let pid = server.server.pid();
    let mut warm = server.wire(Transport::Tls);
    assert_eq!(warm.roundtrip(&support::get("/a.txt")).body.len(), 100);
    let before = rss_bytes(pid);
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    socket.set_send_buffer_size(16 * 1024).unwrap();
    socket
        .connect_timeout(&server.tls_addr.into(), Duration::from_secs(5))
        .unwrap();
    let mut tcp: TcpStream = socket.into();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = ClientConnection::new(server.client.clone(), name).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).unwrap();
    }
    let req = support::get("/a.txt");
    let chunk = req.repeat(256);
    // At most 8 MiB of requests, until the socket takes nothing for 1.5 s.
    let cap = 8 << 20;
    tcp.set_nonblocking(true).unwrap();
    let mut queued = 0usize;
    let mut progress = std::time::Instant::now();
    while progress.elapsed() < Duration::from_millis(1500) {
        if !tls.wants_write() {
            if queued >= cap {
                break;
            }
            tls.writer().write_all(chunk.as_bytes()).unwrap();
            queued += chunk.len();
        }
        match tls.write_tls(&mut tcp) {
            Ok(_) => progress = std::time::Instant::now(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss_bytes(pid).saturating_sub(before);
    eprintln!(
        "{} requests ({queued} B) queued over TLS without reading; server RSS +{grown} B",
        queued / req.len()
    );
    // The client's socket blocked before the cap (here after 0.7 to 1.2
    // MB): the server stopped receiving. One that kept receiving took all
    // of it (4 MiB then, its RSS +6.8 MB). RSS, seen from 0.9 to 3.2 MB
    // here, also counts the answers queued and the session's buffers
    // (rustls's and ours), which vary with timing: it only has to stay
    // bounded.
    assert!(
        queued < cap,
        "the server took what the client sent: {queued} B of requests, RSS +{grown} B"
    );
    assert!(
        grown < 8 << 20,
        "the server's memory grew by {grown} B for {queued} B of requests"
    );
    // Now read (and send what is left): every request is answered, 200.
    let requests = queued / req.len();
    let (mut answers, mut plain) = (0usize, Vec::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while answers < requests {
        assert!(
            std::time::Instant::now() < deadline,
            "{answers} of {requests} answers"
        );
        let mut moved = false;
        if tls.wants_write() {
            match tls.write_tls(&mut tcp) {
                Ok(_) => moved = true,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        match tls.read_tls(&mut tcp) {
            Ok(0) => panic!("closed after {answers} of {requests} answers"),
            Ok(_) => {
                moved = true;
                let state = tls.process_new_packets().unwrap();
                let mut got = vec![0; state.plaintext_bytes_to_read()];
                tls.reader().read_exact(&mut got).unwrap();
                plain.extend_from_slice(&got);
                answers += status_lines(&mut plain);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
        if !moved {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    assert_eq!(answers, requests);
}

/// A TLS body by reference (16 MiB, past what loopback's socket buffers
/// hold) to a client that reads only after 500 ms: its `writev` blocks,
/// the connection waits for `EPOLLOUT` on the ring, and every byte
/// arrives, in order, once the client reads. (A ring connection that
/// never armed that poll would stall here until the client gave up.)
#[test]
fn uring_sends_a_large_tls_body_to_a_client_that_reads_late() {
    use support::tls::{Ca, TlsServer, Transport};
    if !uring_or_skip("uring_tls_large_body") {
        return;
    }
    let body: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    let site = site_with("uring-tls-large", &body);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, &["--io", "uring", "--cores", "1"]);
    let mut wire = server.wire(Transport::Tls);
    wire.send(support::get("/a.txt").as_bytes());
    std::thread::sleep(Duration::from_millis(500));
    let r = wire
        .read_response_to("GET")
        .unwrap_or_else(|e| panic!("{e}\n{}", server.server.log_text()));
    assert_eq!(r.status, 200);
    assert!(r.body == body, "the body differs ({} bytes)", r.body.len());
    // The connection goes on.
    assert_eq!(
        wire.roundtrip(&support::get("/a.txt")).body.len(),
        body.len()
    );
}

/// Status lines at the front of `plain`, each asserted to be a 200; the
/// bytes before the last, maybe partial, one are dropped.
fn status_lines(plain: &mut Vec<u8>) -> usize {
    const LINE: &[u8] = b"HTTP/1.1 ";
    let mut n = 0;
    let mut at = 0;
    while let Some(i) = plain[at..].windows(LINE.len()).position(|w| w == LINE) {
        let start = at + i;
        if plain.len() < start + LINE.len() + 3 {
            plain.drain(..start);
            return n;
        }
        let status = &plain[start + LINE.len()..start + LINE.len() + 3];
        assert_eq!(status, b"200", "a non-200 answer");
        n += 1;
        at = start + LINE.len();
    }
    let keep = plain.len().saturating_sub(LINE.len());
    plain.drain(..keep);
    n
}

/// `write_timeout` cuts a client that never reads while its answers are
/// lent to a ring send the kernel cannot finish (a zero window): the
/// connection is closed (the send cancelled; its bytes freed when the
/// cancellation completes), counted as a write timeout, and the close
/// reaches the client.
#[test]
fn uring_cuts_a_zero_window_client_with_a_send_in_flight_after_write_timeout() {
    use socket2::{Domain, Protocol, Socket, Type};
    if !uring_or_skip("uring_zero_window") {
        return;
    }
    let site = site_with("uring-zero-window", &[b'z'; 2000]);
    let mut a = args(&site, "uring");
    a.extend(["--write-timeout".into(), "1".into()]);
    let server = Server::spawn(&a, 1);
    let admin = server.admin_addr();
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket.set_recv_buffer_size(4 * 1024).unwrap();
    socket
        .connect_timeout(&server.addr().into(), Duration::from_secs(5))
        .unwrap();
    let s: TcpStream = socket.into();
    let mut conn = support::Conn::from_stream(s.try_clone().unwrap());
    // The first request is answered at accept; the ring drives the rest.
    assert_eq!(conn.roundtrip(&support::get("/a.txt")).body.len(), 2000);
    // Answers of 2 KB (owned bytes, lent to ring sends) for twice what
    // the server's send buffer can grow to (`tcp_wmem`'s maximum): once
    // that is full, a send stays in flight and nothing moves.
    let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .expect("tcp_wmem")
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .expect("tcp_wmem maximum");
    let requests = (2 * wmem_max / 2000 + 100).min(9000);
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    w.write_all(support::get("/a.txt").repeat(requests).as_bytes())
        .unwrap();
    let closed = |reason: &str| {
        sum(
            &scrape(admin),
            "shardhttpd_connections_closed_total",
            &[("reason", reason)],
        )
    };
    assert!(
        support::poll_until(Duration::from_secs(10), || closed("write_timeout") == 1.0),
        "the stalled connection is not cut\n{}",
        server.log_text()
    );
    assert!(
        support::poll_until(Duration::from_secs(5), || {
            sum(&scrape(admin), "shardhttpd_connections_active", &[]) == 0.0
        }),
        "connections left open"
    );
    // The server's side of the socket is closed before the client reads
    // anything: a send left in flight would hold it open (established)
    // for as long as the client does not read.
    if support::installed("ss") {
        let (port, cport) = (server.addr().port(), s.local_addr().unwrap().port());
        let filter = format!("( sport = :{port} and dport = :{cport} )");
        let established = || {
            let out = std::process::Command::new("ss")
                .args(["-Htn", "state", "established", &filter])
                .output()
                .expect("run ss");
            !String::from_utf8_lossy(&out.stdout).trim().is_empty()
        };
        assert!(
            support::poll_until(Duration::from_secs(5), || !established()),
            "the server's socket is still established after its close"
        );
    } else {
        support::loud("SKIP part of uring_cuts_a_zero_window_client: ss is not installed");
    }
    // The client reads what reached it, then the close (EOF or a reset).
    let mut r = s;
    r.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the close did not reach the client: {e}"),
        }
    }
    // The server goes on serving.
    assert_eq!(server.get("/a.txt").body.len(), 2000);
}

/// A client's end of file on a connection driven by completions (its
/// receive's last completion, `res` 0) closes the connection at once, not
/// at the keep-alive timeout; so does a reset (`-ECONNRESET`). Neither is
/// counted as the provided buffer ring running out (nor is anything in
/// plain service: the counter stays 0).
#[test]
fn uring_closes_at_once_on_the_clients_eof_or_reset() {
    if !uring_or_skip("uring_eof") {
        return;
    }
    let site = site_with("uring-eof", b"eof");
    let mut a = args(&site, "uring");
    a.extend(["--keepalive-timeout".into(), "60".into()]);
    let server = Server::spawn(&a, 1);
    let admin = server.admin_addr();
    // Half-closed after an answer: the server sees EOF and closes.
    for i in 0..5 {
        let mut c = server.connect();
        assert_eq!(c.roundtrip(&support::get("/a.txt")).body_str(), "eof");
        c.stream.shutdown(std::net::Shutdown::Write).unwrap();
        c.expect_closed(Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("connection {i}, after the client's EOF: {e}"));
    }
    // Reset after an answer (SO_LINGER 0: close sends RST).
    for _ in 0..5 {
        let mut c = server.connect();
        assert_eq!(c.roundtrip(&support::get("/a.txt")).body_str(), "eof");
        socket2::SockRef::from(&c.stream)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(c);
    }
    assert!(
        support::poll_until(Duration::from_secs(3), || {
            sum(&scrape(admin), "shardhttpd_connections_active", &[]) == 0.0
        }),
        "reset connections left open (keep-alive timeout 60 s)\n{}",
        server.log_text()
    );
    assert_eq!(
        sum(
            &scrape(admin),
            "shardhttpd_uring_recv_buffers_exhausted_total",
            &[]
        ),
        0.0,
        "an EOF or a reset counted as the buffer ring running out"
    );
}

/// A PROXY protocol connection is driven by readiness (a multishot poll),
/// not by completions: when the server closes it, the close must reach
/// the client, which it does only once the poll holding the socket is
/// removed from the ring. The request must arrive on the watched socket,
/// not with the header at accept (answered there, the connection would
/// never be polled): the client sends it only once
/// `shardhttpd_proxy_protocol_total{result="accepted"}` shows the server
/// took the header alone, so which path ran is known, not timed.
#[test]
fn uring_closes_a_connection_driven_by_readiness() {
    if !uring_or_skip("uring_closes_readiness") {
        return;
    }
    let site = site_with("uring-proxy-close", b"pc");
    let mut a = args(&site, "uring");
    a.extend(
        [
            "--proxy-protocol",
            "true",
            "--trusted-proxies",
            "127.0.0.1/32",
        ]
        .map(String::from),
    );
    let server = Server::spawn(&a, 1);
    let admin = server.admin_addr();
    let accepted = [("result", "accepted")];
    for i in 0..5 {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(b"PROXY TCP4 198.51.100.4 127.0.0.1 40000 80\r\n")
            .unwrap();
        // The header taken, and counted in the shard's next publish: the
        // connection now waits on its poll for the request.
        let samples = support::metrics::await_value(
            admin,
            "shardhttpd_proxy_protocol_total",
            &accepted,
            (i + 1) as f64,
        );
        assert_eq!(
            sum(&samples, "shardhttpd_http_requests_total", &[]),
            i as f64,
            "connection {i}: answered before its request was sent"
        );
        let req = support::request("GET", "/a.txt", &[("Connection", "close")]);
        s.write_all(req.as_bytes()).unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all)
            .unwrap_or_else(|e| panic!("connection {i}: no close from the server: {e}"));
        assert!(all.starts_with(b"HTTP/1.1 200 OK"), "connection {i}");
        assert!(all.ends_with(b"pc"), "connection {i}");
    }
    assert_eq!(
        sum(
            &scrape(admin),
            "shardhttpd_proxy_protocol_total",
            &[("result", "refused")]
        ),
        0.0
    );
}

/// The provided buffers go back to the kernel: more receives than the
/// ring has buffers (1 024), one keep-alive request each, are all
/// answered, and none finds the ring empty.
#[test]
fn uring_gives_receive_buffers_back() {
    if !uring_or_skip("uring_buffers_back") {
        return;
    }
    let site = site_with("uring-buffers-back", b"bb");
    let mut a = args(&site, "uring");
    a.extend(["--max-requests-per-connection".into(), "100000".into()]);
    let server = Server::spawn(&a, 1);
    let mut c = server.connect();
    for i in 0..1100 {
        assert_eq!(
            c.roundtrip(&support::get("/a.txt")).body_str(),
            "bb",
            "request {i}"
        );
    }
    // The shard publishes its counters together every 250 ms: the publish
    // that counts all 1 100 answers carries the receive counter as it was
    // after the last of them, not a value from before the run.
    let samples = support::metrics::await_value(
        server.admin_addr(),
        "shardhttpd_http_requests_total",
        &[],
        1100.0,
    );
    assert_eq!(
        sum(
            &samples,
            "shardhttpd_uring_recv_buffers_exhausted_total",
            &[]
        ),
        0.0,
        "receives found the buffer ring empty"
    );
}
