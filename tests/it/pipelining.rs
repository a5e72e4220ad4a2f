//! Pipelining under back-pressure (issue 12, item 1): every request of a
//! deep pipeline is answered, in order, whatever the body size (copied into
//! the output buffer, referenced in the arena, or sent from its fd), however
//! slowly the client reads, across a snapshot swap, on several shards and
//! with compression on.
//!
//! Before the fix, a connection that stopped answering because its output
//! was backlogged never went back to the requests still in its read buffer
//! once the output drained: 100 pipelined GETs for an 8 000-byte file got
//! 64 answers and then silence until the keep-alive timeout.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use support::{Server, Site};

/// The body sizes of the matrix: copied into the output buffer (100 B,
/// 8 000 B), referenced in the snapshot's arena (100 KiB) and sent from the
/// file's fd (2 MiB, above the server's `--sendfile-threshold` below).
const SIZES: &[(&str, usize)] = &[
    ("tiny", 100),
    ("small", 8_000),
    ("medium", 100 * 1024),
    ("large", 2 * 1024 * 1024),
];

/// Files per size, requested in rotation, so an answer out of order or for
/// the wrong request shows as a wrong body.
const VARIANTS: usize = 3;

/// Files from this size up are served from their fd.
const FD_THRESHOLD: &str = "1048576";

/// No answer may take longer than this to start arriving; before the fix
/// the missing answers never came (the keep-alive timeout is 60 s).
const STALL: Duration = Duration::from_secs(10);

/// Compressible but distinct content for variant `v` of a size.
fn content(name: &str, v: usize, size: usize) -> Vec<u8> {
    let line = format!("{name} variant {v}: the quick brown fox jumps over the lazy dog\n");
    let mut bytes = line.repeat(size / line.len() + 1).into_bytes();
    bytes.truncate(size);
    bytes
}

fn path_of(name: &str, v: usize) -> String {
    format!("/{name}-{v}.txt")
}

fn site(tag: &str) -> Site {
    let site = Site::new(tag);
    for &(name, size) in SIZES {
        for v in 0..VARIANTS {
            site.write(&path_of(name, v)[1..], &content(name, v, size));
        }
    }
    site
}

fn start(root: &Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--sendfile-threshold",
        FD_THRESHOLD,
        "--keepalive-timeout",
        "60",
    ];
    args.extend_from_slice(extra);
    Server::start(root, &args)
}

/// How the client reads the answers.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// Reads as fast as it can.
    Fast,
    /// A 4 KiB receive buffer, small reads and a pause now and then, so the
    /// server's writes block again and again with requests still buffered.
    Slow,
}

fn connect(addr: SocketAddr, reader: Reader) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    if let Reader::Slow = reader {
        // Before connect, so the advertised window is small from the start.
        socket.set_recv_buffer_size(4096).unwrap();
    }
    socket
        .connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(STALL)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Reads responses off a stream without keeping more than one body.
struct Answers {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    reader: Reader,
}

struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answers {
    fn new(stream: TcpStream, reader: Reader) -> Answers {
        Answers {
            stream,
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
            reader,
        }
    }

    fn fill(&mut self) -> Result<(), String> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = match self.reader {
            Reader::Fast => self.buf.len(),
            Reader::Slow => (self.end + 4096).min(self.buf.len()),
        };
        match self.stream.read(&mut self.buf[self.end..limit]) {
            Ok(0) => Err("connection closed".into()),
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) => Err(format!("read: {e}")),
        }
    }

    fn next(&mut self) -> Result<Answer, String> {
        let head_end = loop {
            let window = &self.buf[self.start..self.end];
            if let Some(p) = window.windows(4).position(|w| w == b"\r\n\r\n") {
                break self.start + p + 4;
            }
            if self.end - self.start > 64 * 1024 {
                return Err("head over 64 KiB".into());
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[self.start..head_end]).into_owned();
        self.start = head_end;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line in {head:?}"))?;
        let len: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no Content-Length in {head:?}"))?;
        let mut body = Vec::with_capacity(len);
        while body.len() < len {
            if self.start == self.end {
                self.fill()?;
            }
            let take = (len - body.len()).min(self.end - self.start);
            body.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
        }
        Ok(Answer { status, head, body })
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// What one pipeline asks for.
#[derive(Clone, Copy)]
struct Pipeline {
    name: &'static str,
    size: usize,
    count: usize,
    reader: Reader,
    gzip: bool,
}

/// The request for answer `i` of `p`.
fn request(p: &Pipeline, i: usize) -> String {
    let coding = if p.gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    format!(
        "GET {} HTTP/1.1\r\nHost: t\r\n{coding}\r\n",
        path_of(p.name, i % VARIANTS)
    )
}

fn decoded(answer: &Answer) -> Vec<u8> {
    match header(&answer.head, "content-encoding") {
        None => answer.body.clone(),
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&answer.body[..])
                .read_to_end(&mut out)
                .expect("valid gzip body");
            out
        }
        Some(other) => panic!("unexpected Content-Encoding {other}"),
    }
}

/// Send `p.count` requests in one go (from a writer thread, so neither side
/// waits on the other) and check every answer, in order. `midway` runs once
/// after the first tenth of the answers has been read.
fn run_pipeline(server: &Server, p: Pipeline, midway: Option<&dyn Fn()>) {
    let stream = connect(server.addr(), p.reader);
    let mut writer = stream.try_clone().unwrap();
    let all: String = (0..p.count).map(|i| request(&p, i)).collect();
    let sender = thread::spawn(move || writer.write_all(all.as_bytes()));
    let mut answers = Answers::new(stream, p.reader);
    let wants: Vec<Vec<u8>> = (0..VARIANTS).map(|v| content(p.name, v, p.size)).collect();
    let mut encoded = 0;
    let started = Instant::now();
    for i in 0..p.count {
        if i == p.count / 10 {
            if let Some(f) = midway {
                f();
            }
        }
        if let Reader::Slow = p.reader {
            // Stop reading a few times, long enough for the server's socket
            // buffer to fill with requests still waiting behind it.
            if i % (p.count / 4).max(1) == 1 {
                thread::sleep(Duration::from_millis(30));
            }
        }
        let answer = answers.next().unwrap_or_else(|e| {
            panic!(
                "{} of {} answers to pipelined GETs for {} B ({:?} reader, gzip {}) after {:?}, then: {e}\n{}",
                i,
                p.count,
                p.size,
                p.reader,
                p.gzip,
                started.elapsed(),
                server.log_text()
            )
        });
        assert_eq!(answer.status, 200, "answer {i}: {}", answer.head);
        if header(&answer.head, "content-encoding").is_some() {
            encoded += 1;
        }
        let body = decoded(&answer);
        assert!(
            body == wants[i % VARIANTS],
            "answer {i} of {} ({} B) is not the body of {} (got {} B starting {:?})",
            p.count,
            p.size,
            path_of(p.name, i % VARIANTS),
            body.len(),
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
    }
    sender.join().unwrap().expect("send the pipeline");
    if p.gzip && (1024..super_compress_max()).contains(&p.size) {
        assert!(
            encoded > 0,
            "compression is on but no answer for {} B was gzip",
            p.size
        );
    }
    // Nothing more than was asked for, and the connection still serves.
    let mut stream = answers.stream;
    stream
        .write_all(request(&p, 0).as_bytes())
        .expect("the connection is still open");
    let mut answers = Answers::new(stream, Reader::Fast);
    let answer = answers.next().expect("an answer after the pipeline");
    assert_eq!(answer.status, 200);
    assert_eq!(decoded(&answer), content(p.name, 0, p.size));
}

/// Files at or above the fd threshold are not compressed; below it they are
/// when large enough to gain.
fn super_compress_max() -> usize {
    FD_THRESHOLD.parse().unwrap()
}

/// Every size × every count of `counts`; pipelines of files served from
/// their fd are cut to `fd_max` answers where a test moves less data.
fn matrix(server: &Server, counts: &[usize], fd_max: usize, reader: Reader, gzip: bool) {
    for &(name, size) in SIZES {
        for &count in counts {
            let count = if size >= 1024 * 1024 {
                count.min(fd_max)
            } else {
                count
            };
            run_pipeline(
                server,
                Pipeline {
                    name,
                    size,
                    count,
                    reader,
                    gzip,
                },
                None,
            );
        }
    }
}

#[test]
fn pipelined_gets_all_answered_in_order_once_output_backs_up() {
    let site = site("pipe-fast");
    let server = start(&site.root, &["--cores", "1", "--compress", "false"]);
    matrix(&server, &[100, 1000], 1000, Reader::Fast, false);
}

#[test]
fn pipelined_gets_all_answered_to_a_slow_reader() {
    let site = site("pipe-slow");
    let server = start(&site.root, &["--cores", "1", "--compress", "false"]);
    matrix(&server, &[100, 1000], 100, Reader::Slow, false);
}

#[test]
fn pipelined_gets_all_answered_across_a_snapshot_swap() {
    let site = site("pipe-swap");
    let server = start(&site.root, &["--cores", "1", "--compress", "false"]);
    for &(name, size) in SIZES {
        for reader in [Reader::Slow, Reader::Fast] {
            let n = site.base().join(format!("swap-{name}-{reader:?}"));
            let root = site.root.clone();
            let swaps_before = server
                .log_lines()
                .iter()
                .filter(|l| l.contains("snapshot swapped generation="))
                .count();
            // A change elsewhere in the root: the answers keep their bodies
            // but the queued ones now pin an older generation.
            let swap = || {
                support::write_file(&root, "unrelated.txt", n.display().to_string().as_bytes());
                assert!(
                    support::poll_until(Duration::from_secs(10), || {
                        server
                            .log_lines()
                            .iter()
                            .filter(|l| l.contains("snapshot swapped generation="))
                            .count()
                            > swaps_before
                    }),
                    "no snapshot swap after a change\n{}",
                    server.log_text()
                );
            };
            run_pipeline(
                &server,
                Pipeline {
                    name,
                    size,
                    count: if size >= 1024 * 1024 { 100 } else { 1000 },
                    reader,
                    gzip: false,
                },
                Some(&swap),
            );
        }
    }
}

#[test]
fn pipelined_gets_all_answered_on_two_shards_with_compression() {
    let site = site("pipe-cores2");
    let server = start(&site.root, &["--cores", "2", "--compress", "true"]);
    // Connections at once, so both shards take some: a fast reader asking
    // for gzip and a slow one asking for identity.
    thread::scope(|s| {
        for (reader, gzip) in [(Reader::Fast, true), (Reader::Slow, false)] {
            let server = &server;
            s.spawn(move || matrix(server, &[100, 1000], 100, reader, gzip));
        }
    });
}
