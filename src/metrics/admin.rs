//! The admin listener: one small thread, never a shard, serving `/metrics`,
//! `/healthz`, `/readyz`, `/status.json` and the `/status` page.
//!
//! Clients are served from one non-blocking epoll loop rather than a thread
//! each, so a slow client costs a buffer, not a worker: a request head must
//! arrive whole within [`HEAD_DEADLINE`] and its answer leave within
//! [`WRITE_DEADLINE`], whatever the client's pace, and when
//! [`MAX_CLIENTS`] are connected the one closest to its deadline is dropped
//! to admit a newcomer. Clients dripping bytes therefore cannot keep
//! `/healthz` from answering (a Kubernetes liveness probe has seconds, not
//! minutes).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Metrics, ShardCounters, ShardSlot};
use crate::cache::StoreStats;
use crate::sys::{Epoll, Events, EPOLLIN, EPOLLOUT, EPOLLRDHUP};

/// How long a client has to send its whole request head, counted from
/// accept (not per read, so one byte a second cannot stretch it).
const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long the answer may take to leave once rendered.
const WRITE_DEADLINE: Duration = Duration::from_secs(2);
/// Rates in `/status.json` are computed over samples this far apart.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Largest admin request head read.
const MAX_REQUEST: usize = 8 * 1024;
/// Most admin clients connected at once; a newcomer beyond this evicts the
/// client closest to its deadline. Each costs one fd and at most
/// [`MAX_REQUEST`] bytes, and is gone within the two deadlines anyway.
const MAX_CLIENTS: usize = 256;
/// Pause before accepting again after an error such as EMFILE.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Events taken per `epoll_wait`.
const EVENTS: usize = 64;
/// The listener's token; clients count up from 0 and never reach it.
const LISTENER: u64 = u64::MAX;

/// The self-contained live status page (no external scripts).
const STATUS_PAGE: &str = include_str!("status.html");

/// Reads the snapshot figures at scrape time.
pub type SnapshotSource = Box<dyn Fn() -> Vec<StoreStats> + Send + Sync>;

/// Bind the admin address (port 0 picks one) and log it.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    tracing::info!("admin endpoint addr={}", listener.local_addr()?);
    Ok(listener)
}

/// What the admin loop answers from.
struct State {
    metrics: Arc<Metrics>,
    snapshot: SnapshotSource,
    rates: Rates,
}

/// One admin connection: reading its head, then writing its answer.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    len: usize,
    /// The rendered answer, once the head is complete.
    out: Vec<u8>,
    sent: usize,
    deadline: Instant,
}

/// Serve admin requests forever on the calling thread.
pub fn serve(listener: TcpListener, metrics: Arc<Metrics>, snapshot: SnapshotSource) {
    if let Err(e) = run(listener, metrics, snapshot) {
        tracing::error!(error = %e, "admin endpoint failed");
    }
}

fn run(listener: TcpListener, metrics: Arc<Metrics>, snapshot: SnapshotSource) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let epoll = Epoll::new()?;
    epoll.add(&listener, LISTENER, EPOLLIN)?;
    let mut state = State {
        rates: Rates::new(&metrics),
        metrics,
        snapshot,
    };
    let mut clients: HashMap<u64, Client> = HashMap::new();
    let mut next_token = 0u64;
    let mut events = Events::with_capacity(EVENTS);
    // The last accept failed (EMFILE...): the edge that announced the
    // queued clients will not come again, so retry on a timer.
    let mut accept_failed = false;
    loop {
        if state.metrics.handed_over.load(Ordering::Acquire) {
            // A new process serves the shared admin socket now.
            return Ok(());
        }
        let now = Instant::now();
        // Wake for the next sample and the earliest deadline.
        let timeout = clients
            .values()
            .map(|c| c.deadline.saturating_duration_since(now))
            .fold(
                if accept_failed {
                    ACCEPT_RETRY
                } else {
                    SAMPLE_INTERVAL
                },
                Duration::min,
            );
        epoll.wait(&mut events, Some(timeout))?;
        state.rates.sample(&state.metrics);
        if accept_failed {
            accept_failed = !accept_all(&listener, &epoll, &mut clients, &mut next_token, &state);
        }
        for (token, _) in events.iter() {
            if token == LISTENER {
                accept_failed =
                    !accept_all(&listener, &epoll, &mut clients, &mut next_token, &state);
            } else if let Some(client) = clients.get_mut(&token) {
                if !client.progress(&state) {
                    clients.remove(&token);
                }
            }
        }
        let now = Instant::now();
        clients.retain(|_, c| c.deadline > now);
    }
}

/// Accept until the queue is empty. Edge-triggered: the edge that announced
/// these connections will not come again. False when accept failed and
/// must be retried.
fn accept_all(
    listener: &TcpListener,
    epoll: &Epoll,
    clients: &mut HashMap<u64, Client>,
    next_token: &mut u64,
    state: &State,
) -> bool {
    loop {
        let stream = match crate::sys::accept4(listener) {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) => {
                // EMFILE and the like: try again shortly rather than spin.
                tracing::warn!(error = %e, "admin accept failed");
                return false;
            }
        };
        if clients.len() >= MAX_CLIENTS {
            if let Some(&oldest) = clients
                .iter()
                .min_by_key(|(_, c)| c.deadline)
                .map(|(t, _)| t)
            {
                clients.remove(&oldest);
            }
        }
        let token = *next_token;
        *next_token += 1;
        let mut client = Client {
            stream,
            buf: Vec::new(),
            len: 0,
            out: Vec::new(),
            sent: 0,
            deadline: Instant::now() + HEAD_DEADLINE,
        };
        if epoll
            .add(&client.stream, token, EPOLLIN | EPOLLOUT | EPOLLRDHUP)
            .is_err()
        {
            continue;
        }
        // The request is often here already.
        if client.progress(state) {
            clients.insert(token, client);
        }
    }
}

impl Client {
    /// Read what has arrived and write what can go. Returns false when the
    /// client is done (answered, closed or broken).
    fn progress(&mut self, state: &State) -> bool {
        if self.out.is_empty() {
            match self.read_head(state) {
                Ok(true) => {}
                Ok(false) => return true,
                Err(_) => return false,
            }
        }
        while self.sent < self.out.len() {
            match (&self.stream).write(&self.out[self.sent..]) {
                Ok(0) => return false,
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
        false
    }

    /// Read until the head is complete (then render the answer into `out`
    /// and return true) or the socket is drained (false).
    fn read_head(&mut self, state: &State) -> io::Result<bool> {
        if self.buf.is_empty() {
            self.buf = vec![0; MAX_REQUEST];
        }
        loop {
            let n = match (&self.stream).read(&mut self.buf[self.len..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            };
            self.len += n;
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let answer = match req.parse(&self.buf[..self.len]) {
                Ok(httparse::Status::Complete(_)) => {
                    if req.method != Some("GET") && req.method != Some("HEAD") {
                        render("405 Method Not Allowed", "text/plain", b"GET only\n")
                    } else {
                        let path = req.path.unwrap_or("/");
                        answer(path.split('?').next().unwrap_or("/"), state)
                    }
                }
                Ok(httparse::Status::Partial) if self.len < self.buf.len() => continue,
                _ => render("400 Bad Request", "text/plain", b"bad request\n"),
            };
            self.out = answer;
            self.buf = Vec::new();
            self.deadline = Instant::now() + WRITE_DEADLINE;
            return Ok(true);
        }
    }
}

/// The whole answer to `GET path`.
fn answer(path: &str, state: &State) -> Vec<u8> {
    let metrics = &state.metrics;
    match path {
        "/metrics" => {
            let body = metrics.render(&(state.snapshot)());
            render("200 OK", "text/plain; version=0.0.4; charset=utf-8", &body)
        }
        "/healthz" => render("200 OK", "text/plain", b"ok\n"),
        "/readyz" => {
            if metrics.ready() {
                render("200 OK", "text/plain", b"ready\n")
            } else {
                render("503 Service Unavailable", "text/plain", b"not ready\n")
            }
        }
        "/status.json" => {
            let status = state.rates.status(metrics, (state.snapshot)());
            let body = serde_json::to_vec(&status).unwrap_or_default();
            render("200 OK", "application/json", &body)
        }
        "/status" | "/" => render("200 OK", "text/html; charset=utf-8", STATUS_PAGE.as_bytes()),
        _ => render("404 Not Found", "text/plain", b"not found\n"),
    }
}

fn render(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Per-core request and byte rates from the two latest samples.
struct Rates {
    at: Instant,
    previous: Vec<(u64, u64)>,
    current: Vec<(u64, u64)>,
    interval: f64,
}

impl Rates {
    fn new(metrics: &Metrics) -> Rates {
        let totals = Self::totals(metrics);
        Rates {
            at: Instant::now(),
            previous: totals.clone(),
            current: totals,
            interval: 1.0,
        }
    }

    fn totals(metrics: &Metrics) -> Vec<(u64, u64)> {
        metrics
            .slots
            .iter()
            .map(|s| {
                let c = s.read();
                (c.requests.iter().sum(), c.response_bytes)
            })
            .collect()
    }

    fn sample(&mut self, metrics: &Metrics) {
        let elapsed = self.at.elapsed();
        if elapsed < SAMPLE_INTERVAL {
            return;
        }
        self.previous = std::mem::replace(&mut self.current, Self::totals(metrics));
        self.interval = elapsed.as_secs_f64();
        self.at = Instant::now();
    }

    fn status(&self, metrics: &Metrics, snapshots: Vec<StoreStats>) -> Status {
        let slots: Vec<ShardCounters> = metrics.slots.iter().map(ShardSlot::read).collect();
        let sites = metrics
            .sites
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let counts = slots.iter().filter_map(|c| c.sites.get(i));
                let snap = snapshots.get(i).cloned().unwrap_or_default();
                SiteStatus {
                    site: name.clone(),
                    requests: counts.clone().map(|s| s.requests.iter().sum::<u64>()).sum(),
                    response_bytes: counts.map(|s| s.bytes).sum(),
                    files: snap.files,
                    generation: snap.generation,
                    bytes: snap.bytes_by_encoding.iter().map(|(_, n)| n).sum(),
                }
            })
            .collect();
        let snapshot = snapshots.into_iter().next().unwrap_or_default();
        let cores: Vec<CoreStatus> = metrics
            .slots
            .iter()
            .enumerate()
            .map(|(i, slot)| {
                let c = slot.read();
                let (req_now, bytes_now) = self.current[i];
                let (req_then, bytes_then) = self.previous[i];
                CoreStatus {
                    core: slot.core,
                    cpu: slot.cpu,
                    running: slot.running.load(Ordering::Acquire),
                    requests: c.requests.iter().sum(),
                    requests_h2: c.h2.requests,
                    requests_h3: c.quic.requests,
                    rps: req_now.saturating_sub(req_then) as f64 / self.interval,
                    response_bytes: c.response_bytes,
                    bytes_per_second: bytes_now.saturating_sub(bytes_then) as f64 / self.interval,
                    connections_active: c.active,
                    connections_accepted: c.accepted,
                }
            })
            .collect();
        Status {
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            started_at: metrics
                .started_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            uptime_seconds: metrics.started.elapsed().as_secs_f64(),
            ready: metrics.ready(),
            draining: metrics.draining.load(Ordering::Acquire),
            metrics_enabled: metrics.enabled,
            access_log_dropped: metrics.access_log_dropped.load(Ordering::Relaxed),
            totals: Totals {
                requests: cores.iter().map(|c| c.requests).sum(),
                requests_h2: cores.iter().map(|c| c.requests_h2).sum(),
                requests_h3: cores.iter().map(|c| c.requests_h3).sum(),
                rps: cores.iter().map(|c| c.rps).sum(),
                connections_active: cores.iter().map(|c| c.connections_active).sum(),
                response_bytes: cores.iter().map(|c| c.response_bytes).sum(),
            },
            snapshot: SnapshotStatus {
                generation: snapshot.generation,
                files: snapshot.files,
                bytes: snapshot
                    .bytes_by_encoding
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), *v))
                    .collect(),
                rebuilds_ok: snapshot.rebuilds_ok,
                rebuilds_failed: snapshot.rebuilds_failed,
                paths_examined: snapshot.last_build_paths_examined,
                bytes_copied: snapshot.last_build_bytes_copied,
                segments: snapshot.segments,
                from_disk: snapshot.from_disk,
            },
            cores,
            sites,
        }
    }
}

#[derive(Serialize)]
struct Status {
    version: &'static str,
    /// This process: it changes with each binary upgrade.
    pid: u32,
    /// When this process started, in Unix seconds.
    started_at: f64,
    uptime_seconds: f64,
    ready: bool,
    draining: bool,
    metrics_enabled: bool,
    /// Access-log lines dropped because the writer fell behind.
    access_log_dropped: u64,
    totals: Totals,
    /// The default site's snapshot.
    snapshot: SnapshotStatus,
    cores: Vec<CoreStatus>,
    /// Every site, the default first.
    sites: Vec<SiteStatus>,
}

#[derive(Serialize)]
struct SiteStatus {
    /// Its first name (`default` for the top level).
    site: String,
    requests: u64,
    response_bytes: u64,
    files: u64,
    generation: u64,
    /// Body bytes of its snapshot, identity and variants.
    bytes: u64,
}

#[derive(Serialize)]
struct Totals {
    requests: u64,
    /// Of `requests`, those over HTTP/2 and over HTTP/3 (the rest are
    /// HTTP/1.x).
    requests_h2: u64,
    requests_h3: u64,
    rps: f64,
    connections_active: u64,
    response_bytes: u64,
}

#[derive(Serialize)]
struct SnapshotStatus {
    generation: u64,
    files: u64,
    bytes: std::collections::BTreeMap<String, u64>,
    rebuilds_ok: u64,
    rebuilds_failed: u64,
    /// Paths the last published build stat'ed or listed.
    paths_examined: u64,
    /// Body bytes the last published build copied.
    bytes_copied: u64,
    /// Body segments of the snapshot (shared between generations).
    segments: u64,
    /// Files are sent from disk until the background load publishes them
    /// in memory (a start past `preload_max_files`).
    from_disk: bool,
}

#[derive(Serialize)]
struct CoreStatus {
    core: usize,
    cpu: usize,
    running: bool,
    requests: u64,
    requests_h2: u64,
    requests_h3: u64,
    rps: f64,
    response_bytes: u64,
    bytes_per_second: f64,
    connections_active: u64,
    connections_accepted: u64,
}
