//! The admin listener: one small blocking thread, never a shard, serving
//! `/metrics`, `/healthz`, `/readyz`, `/status.json` and the `/status` page.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Metrics;
use crate::cache::StoreStats;

/// How long one admin client may take to send its request or read the
/// answer; the admin thread serves clients one at a time.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Rates in `/status.json` are computed over samples this far apart.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Largest admin request head read.
const MAX_REQUEST: usize = 8 * 1024;

/// The self-contained live status page (no external scripts).
const STATUS_PAGE: &str = include_str!("status.html");

/// Reads the snapshot figures at scrape time.
pub type SnapshotSource = Box<dyn Fn() -> StoreStats + Send + Sync>;

/// Bind the admin address (port 0 picks one) and log it.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    tracing::info!("admin endpoint addr={}", listener.local_addr()?);
    Ok(listener)
}

/// Most admin clients served at once; more wait in the accept queue.
const MAX_CLIENTS: usize = 16;

/// What the admin client threads share.
struct State {
    metrics: Arc<Metrics>,
    snapshot: SnapshotSource,
    rates: Mutex<Rates>,
    clients: AtomicUsize,
}

/// Serve admin requests forever on the calling thread. Each client gets a
/// short-lived thread, so a slow one cannot hold off a Prometheus scrape.
pub fn serve(listener: TcpListener, metrics: Arc<Metrics>, snapshot: SnapshotSource) {
    let socket = socket2::Socket::from(listener);
    // accept() times out so the sampler runs even with no admin traffic.
    let _ = socket.set_read_timeout(Some(SAMPLE_INTERVAL));
    let listener: TcpListener = socket.into();
    let state = Arc::new(State {
        rates: Mutex::new(Rates::new(&metrics)),
        metrics,
        snapshot,
        clients: AtomicUsize::new(0),
    });
    loop {
        if state.metrics.handed_over.load(Ordering::Acquire) {
            // A new process serves the shared admin socket now.
            return;
        }
        state
            .rates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sample(&state.metrics);
        if state.clients.load(Ordering::Acquire) >= MAX_CLIENTS {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                state.clients.fetch_add(1, Ordering::AcqRel);
                let client = Arc::clone(&state);
                let spawned = std::thread::Builder::new()
                    .name("admin-client".into())
                    .spawn(move || {
                        let _ = handle(stream, &client);
                        client.clients.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    state.clients.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn handle(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let metrics = &state.metrics;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    let path = loop {
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                if req.method != Some("GET") && req.method != Some("HEAD") {
                    return respond(
                        &mut stream,
                        "405 Method Not Allowed",
                        "text/plain",
                        b"GET only\n",
                    );
                }
                let path = req.path.unwrap_or("/");
                break path.split('?').next().unwrap_or("/").to_owned();
            }
            Ok(httparse::Status::Partial) if len < buf.len() => continue,
            _ => {
                return respond(
                    &mut stream,
                    "400 Bad Request",
                    "text/plain",
                    b"bad request\n",
                )
            }
        }
    };
    match path.as_str() {
        "/metrics" => {
            let body = metrics.render(&(state.snapshot)());
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
        }
        "/healthz" => respond(&mut stream, "200 OK", "text/plain", b"ok\n"),
        "/readyz" => {
            if metrics.ready() {
                respond(&mut stream, "200 OK", "text/plain", b"ready\n")
            } else {
                respond(
                    &mut stream,
                    "503 Service Unavailable",
                    "text/plain",
                    b"not ready\n",
                )
            }
        }
        "/status.json" => {
            let status = state
                .rates
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .status(metrics, (state.snapshot)());
            let body = serde_json::to_vec(&status).unwrap_or_default();
            respond(&mut stream, "200 OK", "application/json", &body)
        }
        "/status" | "/" => respond(
            &mut stream,
            "200 OK",
            "text/html; charset=utf-8",
            STATUS_PAGE.as_bytes(),
        ),
        _ => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n"),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
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

    fn status(&self, metrics: &Metrics, snapshot: StoreStats) -> Status {
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
            },
            cores,
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
    snapshot: SnapshotStatus,
    cores: Vec<CoreStatus>,
}

#[derive(Serialize)]
struct Totals {
    requests: u64,
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
}

#[derive(Serialize)]
struct CoreStatus {
    core: usize,
    cpu: usize,
    running: bool,
    requests: u64,
    rps: f64,
    response_bytes: u64,
    bytes_per_second: f64,
    connections_active: u64,
    connections_accepted: u64,
}
