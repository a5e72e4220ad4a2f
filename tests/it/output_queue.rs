//! The output queue (`src/io/output.rs`) seen from outside, over
//! cleartext sockets and through `/proc`:
//!
//! - which bodies are copied beside their heads and which are referenced,
//!   seen as the number of writes a pipelined batch takes;
//! - how much a client that reads nothing can make the server queue;
//! - the size of the pieces a large body leaves in, in both modes;
//! - that zero-copy (`--sendfile true`) really leaves the bytes to the
//!   kernel and checks the file once, before the last byte, where the
//!   verified copy checks after every piece it reads.
//!
//! Always cleartext (`Server::plain_addr`): over TLS nothing is sent with
//! `sendfile`, and the TLS front would add writes of its own.

use crate::support;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use support::metrics::{scrape, sum};
use support::procfs;
use support::sendfile_mode::{both_modes, Mode};
use support::*;

/// What the server may queue, from `src/io/output.rs`: owned bytes
/// (heads and copied bodies) before it stops answering...
const HIGH_WATER: usize = 64 * 1024;
/// ...and queue pieces (an owned run and a referenced body per answer)...
const MAX_IOVECS: usize = 64;
/// ...and bodies sent from their fd (each holds the fd).
const MAX_QUEUED_FILES: usize = 4;

/// `len` bytes, period 251 from `seed`, so an offset or a mix-up shows.
fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + seed) % 251) as u8).collect()
}

/// One shard (so its thread's counters see every connection), no
/// compression (bodies are what the tests wrote), files from 1 MiB up
/// served from their fd.
fn start(site: &Site, extra: &[&str]) -> Server {
    let mut args = vec![
        "--cores",
        "1",
        "--compress",
        "false",
        "--sendfile-threshold",
        "1048576",
    ];
    args.extend_from_slice(extra);
    Server::start(&site.root, &args)
}

/// A connection whose receive buffer is `rcvbuf` bytes (set before
/// connect, so the window is small from the start); returns the stream and
/// the buffer size the kernel granted.
fn small_window(addr: SocketAddr, rcvbuf: usize) -> (TcpStream, usize) {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    socket.set_recv_buffer_size(rcvbuf).unwrap();
    socket
        .connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap();
    let granted = socket.recv_buffer_size().unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    (stream, granted)
}

/// The most a TCP send buffer grows to by itself (`tcp_wmem`'s maximum):
/// the server never sets `SO_SNDBUF`.
fn tcp_wmem_max() -> usize {
    let text = fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").expect("read tcp_wmem");
    text.split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("tcp_wmem: {text:?}"))
}

fn requests_answered(admin: SocketAddr) -> usize {
    sum(&scrape(admin), "shardhttpd_http_requests_total", &[]) as usize
}

/// Sends `batch` (path, expected body) as one pipelined write on `c`, reads
/// every answer, and returns how many write calls (`syscw`: write, writev,
/// sendfile) the shard thread made meanwhile.
fn batch_writes(server: &Server, shard: u32, c: &mut Conn, batch: &[(&str, &[u8])]) -> u64 {
    let raw: String = batch.iter().map(|(p, _)| get(p)).collect();
    let before = procfs::task_io(server.pid(), shard, "syscw");
    c.send(raw.as_bytes());
    for (i, (path, body)) in batch.iter().enumerate() {
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("answer {i} ({path}): {e}"));
        assert_eq!(r.status, 200, "answer {i} ({path}): {r:?}");
        assert!(r.body == *body, "answer {i} ({path}): body differs");
    }
    procfs::task_io(server.pid(), shard, "syscw") - before
}

/// Bodies up to 16 KiB are copied into the owned buffer beside their
/// heads: 40 pipelined answers with 1 200-byte bodies (about 58 KiB, under
/// the 64 KiB output bound) leave in one write. Were they referenced, each
/// would add two queue pieces (the owned run before it and the body), and
/// the 64-piece bound would split the batch.
#[test]
fn small_bodies_are_copied_so_a_batch_leaves_in_one_write() {
    let site = Site::new("oq-copied");
    let small = pattern(1, 1200);
    site.write("small.bin", &small);
    // Write syscalls are what is counted: on io_uring the batch goes as
    // one ring send, and none (`uring::` checks that).
    let server = start(&site, &["--io", "epoll"]);
    let shard = procfs::shard0(&server);
    let mut c = Conn::connect(server.plain_addr());
    // Past the accept path, on an established, registered connection.
    assert_eq!(c.roundtrip(&get("/small.bin")).body, small);
    let batch: Vec<(&str, &[u8])> = (0..40).map(|_| ("/small.bin", &small[..])).collect();
    let writes = batch_writes(&server, shard, &mut c, &batch);
    assert_eq!(writes, 1, "40 answers of 1 200 bytes took {writes} writes");
}

/// Larger bodies in the snapshot's arena are referenced, not copied: the
/// queue keeps an iovec per body and pins the snapshot, and goes on
/// answering while those bodies wait (only bodies of an *older* snapshot
/// stop it). Fourteen 20 KiB answers between fourteen small ones, 280 KiB
/// of bodies (more than the 64 KiB the owned buffer may hold, so copying
/// them would split the batch), leave in one write.
#[test]
fn referenced_bodies_do_not_hold_up_a_batch() {
    let site = Site::new("oq-referenced");
    let medium = pattern(3, 20 * 1024);
    let small = pattern(4, 500);
    site.write("medium.bin", &medium);
    site.write("small.bin", &small);
    let server = start(&site, &[]);
    let shard = procfs::shard0(&server);
    let mut c = Conn::connect(server.plain_addr());
    assert_eq!(c.roundtrip(&get("/medium.bin")).body, medium);
    let batch: Vec<(&str, &[u8])> = (0..28)
        .map(|i| {
            if i % 2 == 0 {
                ("/medium.bin", &medium[..])
            } else {
                ("/small.bin", &small[..])
            }
        })
        .collect();
    let writes = batch_writes(&server, shard, &mut c, &batch);
    assert_eq!(writes, 1, "28 answers, 14 of 20 KiB, took {writes} writes");
}

/// Waits until the count of answered requests stops growing (unchanged
/// over 2 s of scrapes; shards publish every 250 ms) or reaches `all`, and
/// returns it. A correct server cannot pass the bound checked below however
/// long this waits; a late settle could only hide a broken one.
fn settled_answers(admin: SocketAddr, base: usize, all: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(30);
    let mut last = usize::MAX;
    let mut still = 0;
    loop {
        let now = requests_answered(admin) - base;
        if now == all || Instant::now() >= end {
            return now;
        }
        if now == last {
            still += 1;
            if still == 8 {
                return now;
            }
        } else {
            still = 0;
            last = now;
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// A client pipelines `n` GETs for a `size`-byte body and reads nothing.
/// The server answers only until its queue is full (`queued_max` answers
/// beyond what the kernel's socket buffers took), then stops reading; once
/// the client reads, every answer arrives, in order.
fn backlog_is_bounded(tag: &str, size: usize, n: usize, queued_max: usize) {
    let site = Site::new(tag);
    let body = pattern(5, size);
    site.write("f.bin", &body);
    let server = start(&site, &["--keepalive-timeout", "60"]);
    let admin = server.admin_addr();
    let base = requests_answered(admin);
    let (stream, rcvbuf) = small_window(server.plain_addr(), 32 * 1024);
    let mut writer = stream.try_clone().expect("clone");
    let requests = get("/f.bin").repeat(n);
    thread::scope(|s| {
        let sender = s.spawn(move || writer.write_all(requests.as_bytes()));
        let answered = settled_answers(admin, base, n);
        // Bytes the kernel can hold between the two ends: the client's
        // receive buffer and the server's send buffer at its largest (plus
        // one segment of slack), counted in bodies only, so generously.
        let in_kernel = rcvbuf + tcp_wmem_max() + 64 * 1024;
        let bound = in_kernel / size + queued_max + 1;
        eprintln!("{tag}: {answered} of {n} answered while unread (bound {bound})");
        assert!(
            answered <= bound,
            "{answered} of {n} answers of {size} bytes queued for a client that reads \
             nothing; the kernel holds at most {in_kernel} bytes, so at most {bound}"
        );
        let mut c = Conn::from_stream(stream);
        for i in 0..n {
            let r = c
                .read_response()
                .unwrap_or_else(|e| panic!("answer {i} of {n}: {e}"));
            assert_eq!(r.status, 200, "answer {i}: {r:?}");
            assert!(r.body == body, "answer {i}: body differs");
        }
        sender
            .join()
            .expect("sender thread")
            .expect("all requests sent");
    });
}

/// Bodies sent from their fd (4 MiB, past the 1 MiB threshold): each holds
/// its file's fd, so at most 4 are queued, where the bound on queue pieces
/// alone would let 32 wait.
#[test]
fn backlog_of_file_bodies_is_bounded() {
    let size = 4 * 1024 * 1024 + 1;
    backlog_is_bounded("oq-backlog-files", size, 16, MAX_QUEUED_FILES);
}

/// Copied bodies: the owned buffer stops answering at 64 KiB.
#[test]
fn backlog_of_copied_bodies_is_bounded() {
    let size = 8000;
    backlog_is_bounded("oq-backlog-copied", size, 3000, HIGH_WATER / size + 1);
}

/// Referenced bodies add little to the owned buffer (a head each): the
/// bound on queue pieces, two per answer, stops them.
#[test]
fn backlog_of_referenced_bodies_is_bounded() {
    backlog_is_bounded("oq-backlog-referenced", 100 * 1024, 600, MAX_IOVECS / 2 + 1);
}

both_modes!(
    large_body_leaves_in_large_pieces,
    file_changed_mid_body,
    slow_reader_gets_the_whole_large_body,
);

/// A large body leaves in large pieces: the verified copy reads 32 KiB
/// per `pread`, zero-copy hands up to 256 KiB to each `sendfile`. Both are
/// read calls to the kernel (`syscr` counts `sendfile` as a read and a
/// write), so the shard thread's read calls for one 4 MiB body, requests
/// and all, average well over 16 KiB each.
fn large_body_leaves_in_large_pieces(mode: Mode) {
    const BIG: usize = 4 * 1024 * 1024 + 777;
    let site = Site::new("oq-pieces");
    let data = pattern(6, BIG);
    site.write("big.bin", &data);
    let server = start(&site, &["--sendfile", mode.flag()]);
    let shard = procfs::shard0(&server);
    let mut c = Conn::connect(server.plain_addr());
    assert_eq!(c.roundtrip(&get("/index.html")).body, INDEX_HTML);
    let before = procfs::task_io(server.pid(), shard, "syscr");
    let r = c.roundtrip(&get("/big.bin"));
    let reads = procfs::task_io(server.pid(), shard, "syscr") - before;
    assert!(r.body == data, "{mode:?}: body differs");
    let most = (BIG / (16 * 1024)) as u64;
    eprintln!("{mode:?}: {reads} read calls for {BIG} bytes");
    assert!(
        reads <= most,
        "{mode:?}: {reads} read calls for a {BIG}-byte body (at most {most})"
    );
}

/// The verified copy checks the file (`fstat`) after every piece it reads;
/// zero-copy leaves all but the last byte to `sendfile` and checks the
/// file once, when it reads that byte. The file's stamp changes while a
/// 16 MiB body is on its way (only its mtime: every byte stays the same):
/// the copy stops within a piece of where it was, zero-copy sends every
/// byte but the last. Both then close: neither finishes a body it can no
/// longer vouch for. `--watch false` keeps the snapshot, and the fd the
/// body is read from, as they were.
fn file_changed_mid_body(mode: Mode) {
    const BIG: usize = 16 * 1024 * 1024 + 321;
    const READ_FIRST: usize = 1024 * 1024;
    let site = Site::new("oq-changed");
    let data = pattern(8, BIG);
    let path = site.write("big.bin", &data);
    let server = start(&site, &["--sendfile", mode.flag(), "--watch", "false"]);
    let (stream, rcvbuf) = small_window(server.plain_addr(), 32 * 1024);
    let mut c = Conn::from_stream(stream);
    c.send(get("/big.bin").as_bytes());
    let head = c.read_head().expect("response head");
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.content_length(), Some(BIG as u64));
    let mut got = c.take_buffered();
    let mut chunk = vec![0u8; 64 * 1024];
    while got.len() < READ_FIRST {
        let n = c.stream.read(&mut chunk).expect("read body");
        assert!(n > 0, "{mode:?}: closed after {} body bytes", got.len());
        got.extend_from_slice(&chunk[..n]);
    }
    set_mtime(&path, fixed_mtime());
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{mode:?}: after {} body bytes: {e}", got.len()),
        }
        assert!(Instant::now() < end, "{mode:?}: no close within 30 s");
    }
    eprintln!("{mode:?}: {} of {BIG} body bytes, then close", got.len());
    assert!(
        got[..] == data[..got.len().min(BIG)],
        "{mode:?}: the {} bytes received are not the file's first bytes",
        got.len()
    );
    match mode {
        Mode::ZeroCopy => assert_eq!(
            got.len(),
            BIG - 1,
            "zero-copy: every byte but the last, then close"
        ),
        Mode::VerifiedCopy => {
            // What was read, what the kernel held, and the piece in hand.
            let most = READ_FIRST + rcvbuf + tcp_wmem_max() + 64 * 1024 + 2 * 32 * 1024;
            assert!(
                got.len() <= most,
                "verified copy: {} body bytes after the change, at most {most}",
                got.len()
            );
        }
    }
}

/// Ranges of bodies in memory, copied (2 000 bytes) and referenced
/// (100 KiB): the queue takes each piece from its offset in the arena.
#[test]
fn ranges_of_copied_and_referenced_bodies() {
    let site = Site::new("oq-ranges");
    let small = pattern(9, 2000);
    let medium = pattern(10, 100 * 1024);
    site.write("small.bin", &small);
    site.write("medium.bin", &medium);
    let server = start(&site, &[]);
    let mut c = Conn::connect(server.plain_addr());
    for (path, data) in [("/small.bin", &small), ("/medium.bin", &medium)] {
        let len = data.len();
        for (lo, hi) in [(0, 0), (10, 1009), (len - 300, len - 1)] {
            let spec = format!("bytes={lo}-{hi}");
            let r = c.roundtrip(&request("GET", path, &[("Range", &spec)]));
            assert_eq!(r.status, 206, "{path} {spec}: {r:?}");
            assert!(r.body == data[lo..=hi], "{path} {spec}: body differs");
        }
        let r = c.roundtrip(&request(
            "GET",
            path,
            &[("Range", "bytes=5-14,1500-1999,-7")],
        ));
        assert_eq!(r.status, 206, "{path}: {r:?}");
        let boundary = boundary_of(r.must("content-type")).expect("multipart boundary");
        let parts = parse_multipart(&r.body, &boundary).expect("multipart body");
        let want = [(5, 14), (1500, 1999), (len - 7, len - 1)];
        assert_eq!(parts.len(), want.len(), "{path}");
        for (part, (lo, hi)) in parts.iter().zip(want) {
            assert_eq!(part.data, &data[lo..=hi], "{path}: part {lo}-{hi}");
        }
    }
}

/// A referenced body pins its snapshot only until it has been sent: after
/// the root changes (a new snapshot), the connection that was sent it, and
/// the queue it parks in meanwhile, answer again at once.
#[test]
fn a_sent_body_unpins_its_snapshot() {
    let site = Site::new("oq-unpin");
    let medium = pattern(11, 100 * 1024);
    site.write("medium.bin", &medium);
    let server = start(&site, &["--keepalive-timeout", "60"]);
    let admin = server.admin_addr();
    let mut c = Conn::connect(server.plain_addr());
    assert!(c.roundtrip(&get("/medium.bin")).body == medium);
    let before = support::metrics::generation(admin);
    site.write("new.txt", b"a new snapshot\n");
    assert!(
        poll_until(Duration::from_secs(10), || {
            support::metrics::generation(admin) > before
        }),
        "no new snapshot after adding a file"
    );
    let r = c.roundtrip(&get("/new.txt"));
    assert_eq!(r.body, b"a new snapshot\n");
    assert!(c.roundtrip(&get("/medium.bin")).body == medium);
}

/// Multipart answers whose parts are referenced (each over 16 KiB): 16
/// parts are 32 queue pieces, so two pipelined answers fill the 64 iovecs
/// of one `writev` exactly, with the second answer's closing boundary left
/// over for the next write; a third follows. Every part arrives intact.
#[test]
fn pipelined_multipart_answers_past_64_pieces() {
    const PART: usize = 20 * 1024;
    const STRIDE: usize = 36 * 1024;
    let site = Site::new("oq-multipart");
    let data = pattern(12, 16 * STRIDE);
    site.write("parts.bin", &data);
    let server = start(&site, &[]);
    let mut c = Conn::connect(server.plain_addr());
    let want: Vec<(usize, usize)> = (0..16)
        .map(|i| (i * STRIDE, i * STRIDE + PART - 1))
        .collect();
    let spec = format!(
        "bytes={}",
        want.iter()
            .map(|(lo, hi)| format!("{lo}-{hi}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let one = request("GET", "/parts.bin", &[("Range", &spec)]);
    c.send(one.repeat(3).as_bytes());
    for n in 0..3 {
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("answer {n}: {e}"));
        assert_eq!(r.status, 206, "answer {n}: {r:?}");
        let boundary = boundary_of(r.must("content-type")).expect("multipart boundary");
        let parts = parse_multipart(&r.body, &boundary).expect("multipart body");
        assert_eq!(parts.len(), want.len(), "answer {n}");
        for (part, &(lo, hi)) in parts.iter().zip(&want) {
            assert!(
                part.data == data[lo..=hi],
                "answer {n}: part {lo}-{hi} differs"
            );
        }
    }
}

/// A client pipelines `n` GETs for a `size`-byte body, reads nothing until
/// the server has stopped answering (its queue full, its reads paused),
/// then resets the connection. The server's next write fails, and the
/// connection is closed at once and counted as an error, not left to the
/// 60 s write timeout (no read would notice the reset while reads are
/// paused).
fn reset_of_a_backlogged_connection(tag: &str, size: usize, n: usize, extra: &[&str]) {
    let site = Site::new(tag);
    site.write("f.bin", &pattern(13, size));
    let mut flags = vec!["--write-timeout", "60"];
    flags.extend_from_slice(extra);
    let server = start(&site, &flags);
    let admin = server.admin_addr();
    let base = requests_answered(admin);
    let (mut stream, _) = small_window(server.plain_addr(), 32 * 1024);
    stream
        .write_all(get("/f.bin").repeat(n).as_bytes())
        .expect("send the pipeline");
    let answered = settled_answers(admin, base, n);
    eprintln!("{tag}: reset after {answered} of {n} answered");
    assert!(
        answered < n,
        "all {n} answered to a client that reads nothing"
    );
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(stream);
    support::metrics::await_value(
        admin,
        "shardhttpd_connections_closed_total",
        &[("reason", "error")],
        1.0,
    );
}

#[test]
fn reset_of_a_backlogged_connection_with_copied_bodies() {
    reset_of_a_backlogged_connection("oq-reset-copied", 8000, 1500, &[]);
}

#[test]
fn reset_of_a_backlogged_connection_with_file_bodies_copied() {
    reset_of_a_backlogged_connection("oq-reset-copy", 4 << 20, 40, &["--sendfile", "false"]);
}

#[test]
fn reset_of_a_backlogged_connection_with_file_bodies_zero_copy() {
    reset_of_a_backlogged_connection("oq-reset-zero", 4 << 20, 40, &["--sendfile", "true"]);
}

/// A client with a small receive window that reads slowly (a pause after
/// every 512 KiB, long enough for the server to fill its send buffer), and
/// a body larger than that buffer can grow to: writes of it meet a full
/// socket again and again, and the server waits for room each time; the
/// whole body arrives, and the connection stays usable.
fn slow_reader_gets_the_whole_large_body(mode: Mode) {
    let big = tcp_wmem_max() + 4 * 1024 * 1024 + 99;
    let site = Site::new("oq-slow");
    let data = pattern(14, big);
    site.write("big.bin", &data);
    let server = start(&site, &["--sendfile", mode.flag()]);
    let (stream, _) = small_window(server.plain_addr(), 8 * 1024);
    let mut c = Conn::from_stream(stream);
    c.send(get("/big.bin").as_bytes());
    let head = c.read_head().expect("response head");
    assert_eq!(head.status, 200, "{head:?}");
    let mut got = c.take_buffered();
    let mut chunk = [0u8; 4096];
    while got.len() < big {
        let n = c
            .stream
            .read(&mut chunk)
            .unwrap_or_else(|e| panic!("{mode:?}: after {} of {big} body bytes: {e}", got.len()));
        assert!(
            n > 0,
            "{mode:?}: closed after {} of {big} body bytes",
            got.len()
        );
        let before = got.len();
        got.extend_from_slice(&chunk[..n]);
        if before / (512 * 1024) != got.len() / (512 * 1024) {
            thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(got == data, "{mode:?}: body differs");
    assert_eq!(c.roundtrip(&get("/index.html")).body, INDEX_HTML);
}

/// Copied (16 000 bytes) and referenced (20 000 bytes) bodies alternate in
/// a long pipeline to a client with a small window: the socket fills again
/// and again, and a write that stops part-way stops as often inside an
/// owned run (a head and a copied body) as inside a referenced body. What
/// is left of each piece goes out next, in order: every body arrives
/// intact.
#[test]
fn partial_writes_resume_inside_owned_and_referenced_pieces() {
    const PAIRS: usize = 1000;
    let site = Site::new("oq-partial");
    let copied = pattern(16, 16_000);
    let referenced = pattern(17, 20_000);
    site.write("copied.bin", &copied);
    site.write("referenced.bin", &referenced);
    let server = start(&site, &["--keepalive-timeout", "60"]);
    let (stream, _) = small_window(server.plain_addr(), 8 * 1024);
    let mut writer = stream.try_clone().expect("clone");
    let requests = format!("{}{}", get("/copied.bin"), get("/referenced.bin")).repeat(PAIRS);
    thread::scope(|s| {
        let sender = s.spawn(move || writer.write_all(requests.as_bytes()));
        let mut c = Conn::from_stream(stream);
        for i in 0..2 * PAIRS {
            let r = c
                .read_response()
                .unwrap_or_else(|e| panic!("answer {i}: {e}"));
            assert_eq!(r.status, 200, "answer {i}: {r:?}");
            let want = if i % 2 == 0 { &copied } else { &referenced };
            assert!(r.body == *want, "answer {i}: body differs");
        }
        sender
            .join()
            .expect("sender thread")
            .expect("all requests sent");
    });
}
