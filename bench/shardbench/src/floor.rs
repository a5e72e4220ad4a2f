//! The floor: a minimal fixed-response responder on one level-triggered
//! epoll loop. Each readable event is one `recv`; every complete request head
//! in it (counted by its `\r\n\r\n`) gets the same 100-byte-body response,
//! all of them in one `send`. A connection whose requests name the study's
//! 100 KiB document gets a 100 KiB body instead (sent straight from a static
//! buffer, as a server sends a cached file), so the 100 KiB keep-alive row
//! has a floor too. No parsing, no files, no timers: what is left
//! is the syscall and TCP cost any HTTP/1.1 server pays, which is the
//! distance every table shows. A request carrying `Connection: close` is
//! answered with the same header and the connection closed. The listener has
//! `TCP_DEFER_ACCEPT` (as shardhttpd's has) and a new connection is read at
//! once, so the close rows measure accept + recv + send + close, with no
//! epoll registration unless the request is not there yet. With a TLS
//! listener ([`crate::floor_tls`]) the same responses go out as records.
//!
//! Run as `shardbench floor --listen ADDR` (the study pins it like a server).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::docs::{LARGE, SMALL};
use crate::floor_tls::{self, Session};

/// The bodies: as long as the study's 100-byte page, and as its 100 KiB
/// document (which a connection gets once its requests name that path).
const BODY: usize = SMALL.bytes;
const LARGE_BODY: usize = LARGE.bytes;
/// Receive buffer: a 16-deep pipelined burst fits many times over.
const RECV_BYTES: usize = 64 * 1024;
/// Listen backlog, as the servers get: c=10000 connects in a burst.
const BACKLOG: libc::c_int = 4096;

/// The request counting both floors share: request ends (`\r\n\r\n`),
/// carried across reads, whether a `Connection: close` was seen, and
/// whether the requests ask for the 100 KiB document.
#[derive(Debug, Default, Clone)]
pub struct Scan {
    /// How much of `\r\n\r\n` the last read ended with.
    matched: usize,
    /// "connection: close" seen in the connection's requests.
    pub close: bool,
    /// The 100 KiB document's path is in the connection's first read: all
    /// its responses carry that body. (A load generator's connection asks
    /// for one document; the floor does not serve mixes.)
    pub large: bool,
    /// A read was fed (`large` is decided).
    fed: bool,
}

impl Scan {
    /// Count request ends in `buf`, carrying a partial `\r\n\r\n` across
    /// reads, and note a `Connection: close` (any case).
    pub fn feed(&mut self, buf: &[u8]) -> usize {
        const END: &[u8] = b"\r\n\r\n";
        let mut n = 0;
        for &b in buf {
            if b == END[self.matched] {
                self.matched += 1;
                if self.matched == END.len() {
                    n += 1;
                    self.matched = 0;
                }
            } else {
                self.matched = usize::from(b == b'\r');
            }
        }
        if !self.close && buf.len() >= 17 {
            self.close = buf
                .windows(17)
                .any(|w| w.eq_ignore_ascii_case(b"connection: close"));
        }
        if !self.fed {
            self.fed = true;
            let path = LARGE.path.as_bytes();
            self.large = buf.windows(path.len()).any(|w| w == path);
        }
        n
    }

    /// Which of [`responses`] this connection's requests get.
    pub fn kind(&self) -> usize {
        2 * usize::from(self.large) + usize::from(self.close)
    }
}

/// The four responses, indexed by [`Scan::kind`]: keep-alive and close,
/// with the small body, then with the large one.
pub fn responses() -> [Vec<u8>; 4] {
    [
        response(false, BODY),
        response(true, BODY),
        response(false, LARGE_BODY),
        response(true, LARGE_BODY),
    ]
}

/// What a connection still owes the kernel: the rest of one static
/// response, or of a batch built for several requests.
#[derive(Debug)]
enum Out {
    Static { kind: usize, at: usize },
    Owned { buf: Vec<u8>, at: usize },
}

struct Conn {
    fd: OwnedFd,
    scan: Scan,
    /// Response bytes not yet accepted by the kernel.
    pending: Option<Out>,
    /// Registered for EPOLLOUT (waiting to send `pending`), not EPOLLIN.
    out_armed: bool,
    /// The TLS session of a connection from the TLS listener.
    tls: Option<Box<Session>>,
}

/// The response to one request: `body` bytes of `.` after the head.
pub fn response(close: bool, body: usize) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {body}\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes();
    r.resize(r.len() + body, b'.');
    r
}

/// `shardbench floor`'s arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cleartext listener's address.
    #[arg(long)]
    listen: SocketAddr,
    /// epoll (one level-triggered epoll loop) or uring (one io_uring
    /// ring: multishot accept and receive, provided buffers, batched
    /// sends).
    #[arg(long, value_enum, default_value = "epoll")]
    io: crate::servers::Io,
    /// Also serve the same responses over TLS on ADDR (TLS 1.3,
    /// shardhttpd's first cipher suite), with --tls-cert and --tls-key.
    #[arg(long, value_name = "ADDR", requires_all = ["tls_cert", "tls_key"])]
    tls_listen: Option<SocketAddr>,
    /// PEM certificate chain for --tls-listen.
    #[arg(long, value_name = "PEM")]
    tls_cert: Option<std::path::PathBuf>,
    /// PEM private key for --tls-listen.
    #[arg(long, value_name = "PEM")]
    tls_key: Option<std::path::PathBuf>,
}

impl Args {
    /// Serve forever on the chosen event source (the caller pins the
    /// process).
    pub fn serve(self) -> io::Result<()> {
        let tls = match (self.tls_listen, self.tls_cert, self.tls_key) {
            (Some(addr), Some(cert), Some(key)) => Some((addr, floor_tls::config(&cert, &key)?)),
            _ => None,
        };
        match self.io {
            crate::servers::Io::Epoll => run(self.listen, tls),
            crate::servers::Io::Uring => crate::floor_uring::run(self.listen, tls),
        }
    }
}

/// Serve forever on `addr`, and over TLS on `tls`'s (the caller pins the
/// process).
pub fn run(addr: SocketAddr, tls: Option<floor_tls::Listen>) -> io::Result<()> {
    let listener = bind(addr)?;
    listener.set_nonblocking(true)?;
    let lfd = listener.as_raw_fd();
    let tls = match tls {
        Some((addr, config)) => {
            let listener = bind(addr)?;
            listener.set_nonblocking(true)?;
            Some((listener, config))
        }
        None => None,
    };
    let tls_lfd = tls.as_ref().map(|(l, _)| l.as_raw_fd());
    // SAFETY: epoll_create1 returns a new fd (checked) that nothing else owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ep` is a fresh fd owned from here on.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    for fd in std::iter::once(lfd).chain(tls_lfd) {
        ctl(&ep, libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32)?;
    }
    let responses = responses();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut buf = vec![0u8; RECV_BYTES];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    loop {
        // SAFETY: `events` is a writable array of `events.len()` entries.
        let n = unsafe {
            libc::epoll_wait(
                ep.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                -1,
            )
        };
        if n == -1 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in &events[..n as usize] {
            let fd = ev.u64 as RawFd;
            if fd == lfd {
                accept_all(&ep, lfd, None, &mut conns, &mut buf, &responses)?;
                continue;
            }
            if let Some((l, config)) = tls.as_ref().filter(|_| Some(fd) == tls_lfd) {
                let lfd = l.as_raw_fd();
                accept_all(&ep, lfd, Some(config), &mut conns, &mut buf, &responses)?;
                continue;
            }
            let slot = fd as usize;
            let Some(conn) = conns.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let done = if ev.events & libc::EPOLLOUT as u32 != 0 && conn.pending.is_some() {
                flush(&ep, conn, &responses, true)
            } else {
                serve(&ep, conn, &mut buf, &responses, true)
            };
            if done {
                // Dropping the OwnedFd closes it (and removes it from epoll).
                conns[slot] = None;
            }
        }
    }
}

/// A listener on `addr` as both floors (and shardhttpd) have it.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    listen_like_the_floor(&listener)?;
    Ok(listener)
}

/// The listener as both floors (and shardhttpd) have it: the servers'
/// backlog, and `TCP_DEFER_ACCEPT`.
fn listen_like_the_floor(listener: &TcpListener) -> io::Result<()> {
    let lfd = listener.as_raw_fd();
    // SAFETY: re-listening on a listening socket only changes its backlog.
    if unsafe { libc::listen(lfd, BACKLOG) } == -1 {
        return Err(io::Error::last_os_error());
    }
    let defer: libc::c_int = 1;
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            lfd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&defer as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn ctl(ep: &OwnedFd, op: libc::c_int, fd: RawFd, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    // SAFETY: both fds are open; `ev` is a valid event for the call.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, fd, &mut ev) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn accept_all(
    ep: &OwnedFd,
    lfd: RawFd,
    tls: Option<&std::sync::Arc<rustls::ServerConfig>>,
    conns: &mut Vec<Option<Conn>>,
    buf: &mut [u8],
    responses: &[Vec<u8>; 4],
) -> io::Result<()> {
    loop {
        // SAFETY: null address pointers are allowed; the result is checked.
        let fd = unsafe {
            libc::accept4(
                lfd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd == -1 {
            // EAGAIN: drained. EMFILE and friends: level-triggered epoll
            // reports the listener again, so the next turn retries.
            return Ok(());
        }
        // SAFETY: accept4 returned a new socket nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let Ok(tls) = tls.map(Session::new).transpose() else {
            continue;
        };
        let mut conn = Conn {
            fd: owned,
            scan: Scan::default(),
            pending: None,
            out_armed: false,
            tls: tls.map(Box::new),
        };
        // TCP_DEFER_ACCEPT: the request is usually there already.
        if serve(ep, &mut conn, buf, responses, false) {
            continue;
        }
        let slot = fd as usize;
        if conns.len() <= slot {
            conns.resize_with(slot + 1, || None);
        }
        let events = if conn.out_armed {
            libc::EPOLLOUT
        } else {
            libc::EPOLLIN
        };
        ctl(ep, libc::EPOLL_CTL_ADD, fd, events as u32)?;
        conns[slot] = Some(conn);
    }
}

/// One recv, one send. Returns true when the connection is finished.
/// `registered`: the fd is in epoll already (else the caller adds it).
fn serve(
    ep: &OwnedFd,
    conn: &mut Conn,
    buf: &mut [u8],
    responses: &[Vec<u8>; 4],
    registered: bool,
) -> bool {
    // SAFETY: `buf` is writable for its length; the fd is open.
    let n = unsafe { libc::recv(conn.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 0 {
        return true;
    }
    if n < 0 {
        return io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock;
    }
    if let Some(tls) = &mut conn.tls {
        let mut out = Vec::new();
        if tls
            .exchange(&buf[..n as usize], &mut conn.scan, responses, &mut out)
            .is_err()
        {
            return true;
        }
        if out.is_empty() {
            return false;
        }
        conn.pending = Some(Out::Owned { buf: out, at: 0 });
        return flush(ep, conn, responses, registered);
    }
    let requests = conn.scan.feed(&buf[..n as usize]);
    if requests == 0 {
        return false;
    }
    let kind = conn.scan.kind();
    conn.pending = Some(if requests == 1 {
        Out::Static { kind, at: 0 }
    } else {
        Out::Owned {
            buf: responses[kind].repeat(requests),
            at: 0,
        }
    });
    flush(ep, conn, responses, registered)
}

/// Send what is pending; wait for EPOLLOUT if the kernel took only part
/// (switching the registration only if the fd is `registered`).
fn flush(ep: &OwnedFd, conn: &mut Conn, responses: &[Vec<u8>; 4], registered: bool) -> bool {
    if let Some(out) = &mut conn.pending {
        let (bytes, at) = match out {
            Out::Static { kind, at } => (&responses[*kind][..], at),
            Out::Owned { buf, at } => (&buf[..], at),
        };
        let rest = &bytes[*at..];
        // SAFETY: `rest` is readable for its length; the fd is open.
        let n = unsafe {
            libc::send(
                conn.fd.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                return true;
            }
        } else if n as usize == rest.len() {
            conn.pending = None;
        } else {
            *at += n as usize;
        }
    }
    if conn.pending.is_none() && conn.scan.close {
        return true;
    }
    let want_out = conn.pending.is_some();
    // Only on a change of interest: the keep-alive path makes no epoll_ctl
    // per request.
    if registered && want_out != conn.out_armed {
        let events = if want_out {
            libc::EPOLLOUT
        } else {
            libc::EPOLLIN
        };
        let _ = ctl(ep, libc::EPOLL_CTL_MOD, conn.fd.as_raw_fd(), events as u32);
    }
    conn.out_armed = want_out;
    false
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    /// Start a floor (`run`) on a free port and check its bytes: one
    /// request, a pipelined pair, `Connection: close` closing, and a
    /// connection asking for the 100 KiB document getting that body.
    pub fn answers_like_the_floor(
        run: fn(SocketAddr, Option<floor_tls::Listen>) -> io::Result<()>,
    ) {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = probe.local_addr().expect("addr");
        drop(probe);
        std::thread::spawn(move || run(addr, None));
        let connect = || {
            let s = loop {
                if let Ok(s) = TcpStream::connect(addr) {
                    break s;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        };
        let [_, _, keep_large, close_large] = responses();
        answers_small_requests(&mut connect());

        let mut s = connect();
        let large = b"GET /100k.bin HTTP/1.1\r\nHost: x\r\n\r\n";
        for _ in 0..3 {
            s.write_all(large).unwrap();
            let mut got = vec![0u8; keep_large.len()];
            s.read_exact(&mut got).unwrap();
            assert!(got == keep_large, "a 100 KiB response differs");
        }
        s.write_all(b"GET /100k.bin HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("closed after the response");
        assert!(rest == close_large, "the closing 100 KiB response differs");
    }

    /// On one connection (cleartext or TLS): one request, a pipelined
    /// pair, and a `Connection: close` answered and closed (after
    /// close_notify over TLS).
    pub fn answers_small_requests(s: &mut (impl Read + Write)) {
        let [keep, close, ..] = responses();
        let mut got = vec![0u8; keep.len()];
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, keep);
        s.write_all(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n")
            .unwrap();
        let mut two = vec![0u8; 2 * keep.len()];
        s.read_exact(&mut two).unwrap();
        assert_eq!(two, keep.repeat(2));
        s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("closed after the response");
        assert_eq!(rest, close);
    }

    #[test]
    fn serves_its_bytes() {
        answers_like_the_floor(run);
    }

    #[test]
    fn serves_its_bytes_over_tls() {
        floor_tls::tests::answers_over_tls(run);
    }

    fn conn() -> Conn {
        Conn {
            fd: std::fs::File::open("/dev/null").expect("open").into(),
            scan: Scan::default(),
            pending: None,
            out_armed: false,
            tls: None,
        }
    }

    #[test]
    fn counts_request_ends_across_reads() {
        let mut c = conn();
        assert_eq!(
            c.scan.feed(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r"),
            1
        );
        assert_eq!(c.scan.feed(b"\n"), 1);
        assert_eq!(
            c.scan.feed(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"),
            1
        );
        assert!(c.scan.close);
    }

    #[test]
    fn the_responses_are_exactly_sized() {
        let all = responses();
        for (kind, bytes, close) in [
            (0, 100, false),
            (1, 100, true),
            (2, 102_400, false),
            (3, 102_400, true),
        ] {
            let text = String::from_utf8(all[kind].clone()).expect("ascii");
            let (head, body) = text.split_once("\r\n\r\n").expect("head");
            let length = format!("Content-Length: {bytes}");
            assert!(head.lines().any(|l| l == length), "{head}");
            assert_eq!(head.contains("Connection: close"), close, "{head}");
            assert_eq!(body.len(), bytes);
        }
    }

    #[test]
    fn a_connection_naming_the_large_document_gets_its_body() {
        let mut c = conn();
        c.scan.feed(b"GET /100k.bin HTTP/1.1\r\n\r\n");
        assert_eq!(c.scan.kind(), 2);
        c.scan
            .feed(b"GET /100k.bin HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert_eq!(c.scan.kind(), 3);
        // Decided by the first read: no mixes of the two bodies.
        let mut c = conn();
        c.scan.feed(b"GET /100.html HTTP/1.1\r\n\r\n");
        c.scan.feed(b"GET /100k.bin HTTP/1.1\r\n\r\n");
        assert_eq!(c.scan.kind(), 0);
    }
}
