//! Helpers for the binary-upgrade and drain tests: continuous client traffic
//! over cleartext or TLS that tells a reset from a refusal from a clean
//! close and retries nothing, who owns a listening
//! port according to `/proc`, and a guard that stops the processes an upgrade
//! started (they inherit the harness's stderr pipe, so they must be gone
//! before the `Server` joins its log reader).

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::{poll_until, IO_TIMEOUT};

/// How long an upgrade may take here (a loaded machine builds the snapshot
/// slowly), and how long an old process may take to drain and exit.
pub const UPGRADE_DEADLINE: Duration = Duration::from_secs(20);

/// Sends `sig` (`TERM`, `USR2`, …) to `pid` with `kill(1)`.
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid} failed");
}

/// The process has exited (no `/proc` entry, or a zombie).
pub fn process_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Sends SIGUSR2 to `old` and waits until it has exited and `/status.json`
/// names another process; returns that process's PID.
pub fn upgrade(
    old: u32,
    admin: SocketAddr,
    successors: &Successors,
    logs: &dyn Fn() -> String,
) -> u32 {
    signal(old, "USR2");
    assert!(
        poll_until(UPGRADE_DEADLINE, || process_gone(old)),
        "old process {old} still running after SIGUSR2\n{}",
        logs()
    );
    let new =
        status_pid(admin).unwrap_or_else(|| panic!("no status.json after upgrade\n{}", logs()));
    successors.push(new);
    assert_ne!(new, old, "status.json still names the old process");
    new
}

/// Opens `n` connections to `addr` and sends a `GET /digits.txt` (then
/// close) on each without reading: requests queued across an upgrade or
/// before the server runs. The streams, to read the answers from.
pub fn queue_requests(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            s.write_all(b"GET /digits.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .unwrap();
            s
        })
        .collect()
}

/// Every queued connection got the whole `/digits.txt` (200), and there
/// was at least one.
pub fn assert_answered(conns: Vec<TcpStream>, what: &str) {
    assert!(!conns.is_empty(), "{what}: no connection to check");
    for (i, mut s) in conns.into_iter().enumerate() {
        let mut out = Vec::new();
        let r = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out);
        assert!(
            r.is_ok() && text.starts_with("HTTP/1.1 200") && out.ends_with(super::DIGITS),
            "{what}: queued connection {i}: {r:?} {text:?}"
        );
    }
}

/// Stops (SIGKILL) every PID pushed, on drop. Declare it after the `Server`
/// so it drops first.
#[derive(Default)]
pub struct Successors(pub Mutex<Vec<u32>>);

impl Successors {
    pub fn push(&self, pid: u32) {
        self.0.lock().unwrap().push(pid);
    }
}

impl Drop for Successors {
    fn drop(&mut self) {
        for &pid in self.0.lock().unwrap().iter() {
            if !process_gone(pid) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// TCP sockets listening on `port` over IPv4, from `/proc/net/tcp`.
pub fn listening_sockets(port: u16) -> usize {
    listening_inodes_in(&["/proc/net/tcp"], port).len()
}

/// Inodes of the TCP sockets listening on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> BTreeSet<u64> {
    listening_inodes_in(&["/proc/net/tcp", "/proc/net/tcp6"], port)
}

/// Inodes of the TCP sockets listening on `port` in the `/proc` tables.
fn listening_inodes_in(tables: &[&str], port: u16) -> BTreeSet<u64> {
    let mut inodes = BTreeSet::new();
    for table in tables {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let local_port = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Ok(inode) = f[9].parse() {
                    inodes.insert(inode);
                }
            }
        }
    }
    inodes
}

/// The PIDs holding a socket that listens on `port`, read from `/proc`.
pub fn listening_pids(port: u16) -> BTreeSet<u32> {
    let inodes = listening_inodes(port);
    let mut pids = BTreeSet::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return pids;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            let inode = target
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse().ok());
            if inode.is_some_and(|i| inodes.contains(&i)) {
                pids.insert(pid);
                break;
            }
        }
    }
    pids
}

/// GET `path` from the admin listener; (status, body).
pub fn admin_get(admin: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&admin, IO_TIMEOUT)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// `pid` from `/status.json`.
pub fn status_pid(admin: SocketAddr) -> Option<u32> {
    let (_, body) = admin_get(admin, "/status.json").ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["pid"].as_u64().map(|p| p as u32)
}

/// How one request went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `connect` refused.
    Refused,
    /// Reset (ECONNRESET/EPIPE): on a request, or after the last response.
    Reset,
    /// Closed before the whole response arrived (a request sent on a
    /// reused keep-alive connection included: no retry hides it), or, over
    /// TLS, closed without close_notify.
    Closed,
    /// Wrong status or body, a failed handshake, or a timeout.
    Wrong,
}

/// What a [`Traffic`] run saw. No request is retried: every one that did
/// not get its whole, right answer is a failure.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: u64,
    pub refused: u64,
    pub reset: u64,
    pub closed: u64,
    pub wrong: u64,
    /// Responses that said `Connection: close` to a client that had not
    /// asked for it (the server stopping or handing over).
    pub told_to_close: u64,
    /// Keep-alive clients that left after being told to close
    /// ([`Options::leave`]).
    pub left: u64,
    pub first_errors: Vec<String>,
}

impl Tally {
    pub fn failures(&self) -> u64 {
        self.refused + self.reset + self.closed + self.wrong
    }
}

/// How [`Traffic`] clients behave.
#[derive(Clone, Default)]
pub struct Options {
    /// Over TLS with this client configuration (SNI `localhost`).
    pub tls: Option<Arc<ClientConfig>>,
    /// A keep-alive client told `Connection: close` leaves instead of
    /// reconnecting, as one behind a load balancer that stopped routing
    /// here would.
    pub leave: bool,
    /// Pause between one client's requests.
    pub pause: Duration,
}

/// A client connection over either transport.
pub trait Duplex: Read + Write + Send {}
impl Duplex for TcpStream {}
impl Duplex for StreamOwned<ClientConnection, TcpStream> {}

/// Continuous traffic: `keepalive` threads sending requests back to back on
/// persistent connections, `fresh` threads opening a new connection per
/// request. Every response's status and body are checked against `paths`,
/// and every connection the server closes must end cleanly: an end of file
/// (after close_notify over TLS), never a reset.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
    tally: Arc<Mutex<Tally>>,
    pub sent: Arc<AtomicU64>,
}

type Paths = Arc<Vec<(String, Vec<u8>)>>;

impl Traffic {
    pub fn start(
        addr: SocketAddr,
        keepalive: usize,
        fresh: usize,
        paths: Vec<(String, Vec<u8>)>,
    ) -> Traffic {
        Traffic::with(addr, keepalive, fresh, paths, Options::default())
    }

    pub fn with(
        addr: SocketAddr,
        keepalive: usize,
        fresh: usize,
        paths: Vec<(String, Vec<u8>)>,
        opts: Options,
    ) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let sent = Arc::new(AtomicU64::new(0));
        let paths: Paths = Arc::new(paths);
        let mut threads = Vec::new();
        for t in 0..keepalive + fresh {
            let (stop, tally, sent, paths, opts) = (
                Arc::clone(&stop),
                Arc::clone(&tally),
                Arc::clone(&sent),
                Arc::clone(&paths),
                opts.clone(),
            );
            let persistent = t < keepalive;
            threads.push(thread::spawn(move || {
                client(addr, &opts, persistent, t, &stop, &tally, &sent, &paths)
            }));
        }
        Traffic {
            stop,
            threads,
            tally,
            sent,
        }
    }

    /// Keep-alive clients that have left so far.
    pub fn left(&self) -> u64 {
        self.tally.lock().unwrap().left
    }

    /// Failures so far.
    pub fn failures(&self) -> u64 {
        self.tally.lock().unwrap().failures()
    }

    pub fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("traffic thread panicked");
        }
        std::mem::take(&mut *self.tally.lock().unwrap())
    }
}

fn record(tally: &Mutex<Tally>, f: Failure, what: String) {
    let mut t = tally.lock().unwrap();
    match f {
        Failure::Refused => t.refused += 1,
        Failure::Reset => t.reset += 1,
        Failure::Closed => t.closed += 1,
        Failure::Wrong => t.wrong += 1,
    }
    if t.first_errors.len() < 10 {
        t.first_errors.push(format!("{:?}: {what}", f));
    }
}

fn classify(e: &io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => Failure::Reset,
        // rustls: TCP closed without close_notify.
        io::ErrorKind::UnexpectedEof => Failure::Closed,
        _ => Failure::Wrong,
    }
}

/// A new connection over the transport `opts` names, handshaken.
pub fn connect(addr: SocketAddr, opts: &Options) -> Result<Box<dyn Duplex>, (Failure, String)> {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| {
        let f = if e.kind() == io::ErrorKind::ConnectionRefused {
            Failure::Refused
        } else {
            Failure::Wrong
        };
        (f, format!("connect: {e}"))
    })?;
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let _ = s.set_nodelay(true);
    let Some(config) = &opts.tls else {
        return Ok(Box::new(s));
    };
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut tls = StreamOwned::new(conn, s);
    while tls.conn.is_handshaking() {
        if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
            return Err((classify(&e), format!("handshake: {e}")));
        }
    }
    Ok(Box::new(tls))
}

/// After a response that closes the connection: the server's end must be
/// an end of file (over TLS, after close_notify), never a reset.
pub fn expect_clean_end(s: &mut dyn Duplex) -> Result<(), (Failure, String)> {
    let mut b = [0u8; 4096];
    match s.read(&mut b) {
        Ok(0) => Ok(()),
        Ok(n) => Err((Failure::Wrong, format!("{n} bytes after the last response"))),
        Err(e) => Err((classify(&e), format!("after the last response: {e}"))),
    }
}

#[allow(clippy::too_many_arguments)]
fn client(
    addr: SocketAddr,
    opts: &Options,
    persistent: bool,
    t: usize,
    stop: &AtomicBool,
    tally: &Mutex<Tally>,
    sent: &AtomicU64,
    paths: &Paths,
) {
    let mut conn: Option<Box<dyn Duplex>> = None;
    let mut served = 0u64;
    let mut i = t;
    while !stop.load(Ordering::Relaxed) {
        let (path, want) = &paths[i % paths.len()];
        i += 1;
        let stream = match &mut conn {
            Some(s) => s,
            None => match connect(addr, opts) {
                Ok(s) => {
                    served = 0;
                    conn.insert(s)
                }
                Err((f, e)) => {
                    record(tally, f, e);
                    thread::sleep(Duration::from_millis(5));
                    continue;
                }
            },
        };
        let close = if persistent {
            ""
        } else {
            "Connection: close\r\n"
        };
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{close}\r\n");
        sent.fetch_add(1, Ordering::Relaxed);
        match exchange(&mut **stream, req.as_bytes()) {
            Ok((status, body, closes)) => {
                if status != 200 || &body != want {
                    record(
                        tally,
                        Failure::Wrong,
                        format!("GET {path}: {status}, {} bytes", body.len()),
                    );
                } else {
                    tally.lock().unwrap().ok += 1;
                }
                served += 1;
                if closes || !persistent {
                    if let Err((f, e)) = expect_clean_end(&mut **stream) {
                        record(tally, f, format!("GET {path}: {e}"));
                    }
                    conn = None;
                    if persistent {
                        let mut t = tally.lock().unwrap();
                        t.told_to_close += 1;
                        if opts.leave {
                            t.left += 1;
                            return;
                        }
                    }
                }
            }
            Err((f, e)) => {
                conn = None;
                record(
                    tally,
                    f,
                    format!("GET {path} (request {served} on its connection): {e}"),
                );
            }
        }
        if !opts.pause.is_zero() {
            thread::sleep(opts.pause);
        } else if !persistent {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// One request and its response: (status, body, server closes).
fn exchange(s: &mut dyn Duplex, req: &[u8]) -> Result<(u16, Vec<u8>, bool), (Failure, String)> {
    if let Err(e) = s.write_all(req).and_then(|()| s.flush()) {
        return Err((classify(&e), format!("write: {e}")));
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let started = Instant::now();
    let mut need: Option<(usize, u16, bool)> = None;
    loop {
        if let Some((total, status, closes)) = need {
            if buf.len() >= total {
                let head_end = total - content_len(&buf).unwrap_or(0);
                return Ok((status, buf[head_end..total].to_vec(), closes));
            }
        } else if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let status = head
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let len = content_len(&buf).unwrap_or(0);
            let closes = head.contains("\r\nconnection: close");
            need = Some((end + 4 + len, status, closes));
            continue;
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                return Err((
                    Failure::Closed,
                    format!("closed after {} bytes of the response", buf.len()),
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => {
                return Err((
                    classify(&e),
                    format!(
                        "read after {} bytes, {:?}: {e}",
                        buf.len(),
                        started.elapsed()
                    ),
                ))
            }
        }
    }
}

fn content_len(buf: &[u8]) -> Option<usize> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The binary started by an arbitrary command (under `taskset`, with an
/// extra environment): stderr collected, killed on drop.
pub struct Proc {
    pub child: std::process::Child,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Spawns `cmd` with stderr piped; does not wait for anything.
    pub fn spawn(mut cmd: Command) -> Proc {
        use std::io::BufRead;
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let stderr = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        thread::spawn(move || {
            for line in io::BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(super::strip_ansi(&line));
            }
        });
        Proc { child, logs }
    }

    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Waits for a log line containing `needle`.
    pub fn wait_for_log(&self, needle: &str, deadline: Duration) -> Option<String> {
        let mut found = None;
        super::poll_until(deadline, || {
            found = self
                .logs
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
                .cloned();
            found.is_some()
        });
        found
    }

    /// The address in the first log line containing `needle` (`addr=`).
    pub fn addr(&self, needle: &str) -> SocketAddr {
        let line = self
            .wait_for_log(needle, super::READY_DEADLINE)
            .unwrap_or_else(|| panic!("no {needle:?} line\n{}", self.log_text()));
        super::log_field(&line, "addr")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("bad line {line:?}"))
    }

    /// Waits for exit; the status, or None on timeout.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        let mut status = None;
        super::poll_until(deadline, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("---- process log ----\n{}\n---- end ----", self.log_text());
        }
    }
}
