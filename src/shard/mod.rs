//! One shard per CPU: a pinned thread with its own `SO_REUSEPORT`
//! listeners, edge-triggered epoll loop, connection slab, timer wheel, Date
//! cache and counters. Shards share nothing on the request path except the
//! sites' snapshot pointers, read through per-shard `arc_swap::Cache`s.

mod backend;
mod ring;
mod slab;
pub mod steer;
mod timer;

use std::io;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::conn::tls::TlsConn;
use crate::conn::Scratch;
use crate::conn::{BufPool, Conn, ConnConfig, ShardEnv, Step, Stop};
use crate::http::date::DateCache;
use crate::metrics::access_log::ShardLog;
use crate::metrics::Handshake;
use crate::metrics::{CloseReason, DrainClose, Metrics, ShardCounters, PUBLISH_INTERVAL};
use crate::quic::Quic;
use crate::serve::sites::{Local, Sites};
use crate::sys::{self, EventFd, Events, EPOLLIN, EPOLLOUT, EPOLLRDHUP, REARM};
use backend::Poller;
use slab::Slab;
use timer::Wheel;

/// Most connections accepted from one listener per loop turn, so a connect
/// burst cannot starve established connections.
const ACCEPT_BATCH: usize = 64;
/// Pause before accepting again after an error such as EMFILE (the wheel
/// ticks every 250 ms, so the retry happens within that).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// An idle shard trims the heap once this many connections have closed
/// since the last trim (checked on the publish tick, only with none open).
const TRIM_AFTER_CLOSES: u64 = 256;
/// How long accept may keep failing for lack of fds before the shard starts
/// shedding queued clients (accept with the reserve fd, close at once), so
/// they get a quick close instead of hanging until the fds free up. Short
/// episodes (a build or a burst briefly holding many fds) only delay the
/// queued clients, which are then served; from this age on an episode is
/// taken as lasting, and every client arriving during it is closed at once.
const SHED_AFTER: Duration = Duration::from_secs(3);
/// Events taken per `epoll_wait`.
const EVENTS: usize = 1024;
/// The token of the wake-up eventfd.
const WAKE: u64 = u64::MAX;
/// Listener `i` has token `LISTENER_BASE - i`; connection tokens never get
/// there (their generation is below `u32::MAX`).
const LISTENER_BASE: u64 = u64::MAX - 1;
/// QUIC socket `i` has token `UDP_BASE - i`: below every listener's, above
/// every connection's.
const UDP_BASE: u64 = u64::MAX - (1 << 20);
/// What a connection is watched for, once, at accept.
const CONN_INTEREST: u32 = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
/// Longest sleep in `epoll_wait`: the Date header and counters refresh at
/// least this often.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// State shared by all shards and the control thread.
pub struct Shared {
    /// Every site, with its snapshot pointer.
    pub sites: Arc<Sites>,
    /// Set on SIGTERM/SIGINT for `drain_delay`: shards keep accepting but
    /// answer every request with `Connection: close`; read when woken.
    pub closing: AtomicBool,
    /// Set once the shards are to drain (after `drain_delay`, or a
    /// handover); shards read it when woken.
    pub draining: AtomicBool,
    pub shutdown_grace: Duration,
    /// Listening addresses whose queues a shard empties (accepting until
    /// nothing is left) before it closes them: after a binary upgrade, those
    /// the new process did not adopt, so their queued connections are served
    /// rather than reset.
    pub sweep: std::sync::Mutex<Vec<std::net::SocketAddr>>,
    /// Set before `draining` when a binary upgrade's new process adopted
    /// the QUIC sockets: the shards stop reading them and keep their QUIC
    /// connections on what the new process forwards.
    pub quic_handed_over: AtomicBool,
}

/// What a shard thread is started with.
pub struct ShardSpec {
    pub index: usize,
    pub cpu: usize,
    pub listeners: Vec<TcpListener>,
    pub waker: Arc<EventFd>,
    pub shared: Arc<Shared>,
    pub conn_cfg: ConnConfig,
    /// The TLS configuration, when some listeners are TLS.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// `listeners[..plain_listeners]` are cleartext, the rest TLS.
    pub plain_listeners: usize,
    pub metrics: Arc<Metrics>,
    pub access_log: Option<ShardLog>,
    /// The event source to use (`--io`).
    pub io: crate::config::IoBackend,
    /// HTTP/3: this shard's QUIC sockets and what the shards' endpoints
    /// share.
    pub quic: Option<(crate::quic::ShardSockets, Arc<crate::quic::Shared>)>,
    /// Told once the shard is pinned and its loop is set up (or failed to).
    pub started: std::sync::mpsc::Sender<io::Result<()>>,
}

/// Run a shard until it has drained after shutdown.
pub fn run(spec: ShardSpec) -> io::Result<()> {
    let (index, cpu) = (spec.index, spec.cpu);
    if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        tracing::warn!(shard = index, cpu, "could not pin shard to its CPU");
    }
    let addrs: Vec<String> = spec
        .listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map_or_else(|e| e.to_string(), |a| a.to_string())
        })
        .collect();
    let started = spec.started.clone();
    let mut shard = match Shard::new(spec) {
        Ok(shard) => shard,
        Err(e) => {
            let _ = started.send(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    for addr in &addrs {
        tracing::info!("shard started shard={index} cpu={cpu} addr={addr}");
    }
    // Marked running before "started" so the admin endpoint lists this
    // shard as soon as the server logs "listening".
    shard.metrics.slots[index]
        .running
        .store(true, Ordering::Release);
    let _ = started.send(Ok(()));
    shard.run()
}

struct Shard {
    index: usize,
    poller: Poller,
    listeners: Vec<Option<TcpListener>>,
    /// `listeners[..plain_listeners]` are cleartext, the rest TLS.
    plain_listeners: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Listeners that hit [`ACCEPT_BATCH`] and still have connections queued.
    accept_pending: Vec<bool>,
    waker: Arc<EventFd>,
    shared: Arc<Shared>,
    snapshots: Local,
    conns: Slab<Conn>,
    wheel: Wheel,
    date: DateCache,
    cfg: ConnConfig,
    scratch: Scratch,
    pool: BufPool,
    counters: ShardCounters,
    metrics: Arc<Metrics>,
    log: Option<ShardLog>,
    next_publish: Instant,
    /// `drain_delay`: every response closes its connection.
    closing: bool,
    /// Draining, until this deadline (`shutdown_grace`).
    draining: Option<Instant>,
    /// HTTP/2 `refused_after_goaway` and `cut` when the drain began: the
    /// drain's log line reports what the drain refused and cut, not what
    /// the shard's lifetime did (h2spec, a load test, clients leaving).
    h2_at_drain: (u64, u64),
    /// Connections to drive again next turn without a new event.
    resume: Vec<u64>,
    /// When to retry accepting after an error such as EMFILE.
    accept_retry: Option<Instant>,
    /// The last accept failed (for logging once per episode).
    accept_failing: bool,
    /// At `max_connections_per_core`: accepting paused until one closes.
    at_cap: bool,
    /// Connections closed since the heap was last trimmed.
    closed_since_trim: u64,
    /// Since when accept has been failing for lack of fds (EMFILE/ENFILE).
    out_of_fds_since: Option<Instant>,
    /// An fd held in reserve: out of fds, the shard closes it to accept one
    /// queued client, closes that client, and opens it again.
    reserve: Option<std::fs::File>,
    /// Clients shed in the current out-of-fds episode.
    shed: u64,
    /// Connections driven by io_uring completions whose output is to be
    /// lent to a ring send at the end of this turn.
    to_send: Vec<u64>,
    /// The ring's receive and send completions being handled (kept for
    /// its allocation).
    ring_done: Vec<sys::Done>,
    /// HTTP/3 over QUIC, when on.
    quic: Option<Quic>,
}

/// The shard's environment for a connection or the QUIC endpoint at
/// `now`, borrowing the shard's fields one by one (so the connection slab
/// or the endpoint can be borrowed beside it).
macro_rules! shard_env {
    ($shard:ident, $now:expr) => {
        ShardEnv {
            cfg: &$shard.cfg,
            sites: &$shard.shared.sites,
            snapshots: &mut $shard.snapshots,
            date: &$shard.date,
            scratch: &mut $shard.scratch,
            pool: &mut $shard.pool,
            counters: &mut $shard.counters,
            log: $shard.log.as_mut(),
            now: $now,
            stop: if $shard.draining.is_some() {
                Stop::Draining
            } else if $shard.closing {
                Stop::Closing
            } else {
                Stop::Serving
            },
        }
    };
}

// After `shard_env!`, which it uses.
mod udp;

impl Shard {
    fn new(spec: ShardSpec) -> io::Result<Shard> {
        let (mut poller, why) = Poller::new(spec.io)?;
        // One line for the process (every shard chooses alike), at debug
        // for the others.
        if spec.index == 0 {
            tracing::info!(backend = poller.name(), reason = %why, "io backend");
        } else {
            tracing::debug!(shard = spec.index, backend = poller.name(), reason = %why, "io backend");
        }
        spec.metrics.slots[spec.index].set_backend(poller.name());
        for (i, l) in spec.listeners.iter().enumerate() {
            poller.add(l, LISTENER_BASE - i as u64, EPOLLIN)?;
        }
        poller.add(&*spec.waker, WAKE, EPOLLIN)?;
        let quic = match spec.quic {
            Some((sockets, shared)) => Some(udp::start(spec.index, sockets, shared, &mut poller)?),
            None => None,
        };
        let now = Instant::now();
        Ok(Shard {
            index: spec.index,
            poller,
            accept_pending: vec![false; spec.listeners.len()],
            plain_listeners: spec.plain_listeners,
            tls: spec.tls,
            listeners: spec.listeners.into_iter().map(Some).collect(),
            waker: spec.waker,
            snapshots: Local::new(&spec.shared.sites),
            shared: spec.shared,
            conns: Slab::new(),
            wheel: Wheel::new(now),
            date: DateCache::new(SystemTime::now()),
            cfg: spec.conn_cfg,
            scratch: Scratch::for_shard(spec.index),
            pool: BufPool::default(),
            counters: ShardCounters::new(spec.metrics.enabled, spec.metrics.sites.len()),
            metrics: spec.metrics,
            log: spec.access_log,
            next_publish: now,
            closing: false,
            draining: None,
            h2_at_drain: (0, 0),
            resume: Vec::new(),
            accept_retry: None,
            accept_failing: false,
            at_cap: false,
            closed_since_trim: 0,
            out_of_fds_since: None,
            reserve: open_reserve(),
            shed: 0,
            to_send: Vec::new(),
            ring_done: Vec::new(),
            quic,
        })
    }

    fn run(&mut self) -> io::Result<()> {
        let result = self.event_loop();
        self.poller.settle();
        self.metrics.publish(self.index, &self.counters);
        if let Some(log) = &mut self.log {
            log.flush();
        }
        self.metrics.slots[self.index]
            .running
            .store(false, Ordering::Release);
        result
    }

    fn event_loop(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS);
        let mut expired = Vec::new();
        let mut resume_spare = Vec::new();
        loop {
            // Before the timeout is chosen: a connection whose output can
            // no longer be lent goes on the resume list.
            self.submit_sends();
            let now = Instant::now();
            let quic_pending = self.quic.as_ref().is_some_and(Quic::has_pending);
            let timeout = if self.accept_pending.iter().any(|&p| p)
                || !self.resume.is_empty()
                || quic_pending
            {
                Duration::ZERO
            } else {
                let quic_next = self.quic.as_mut().and_then(Quic::next_timeout);
                self.wheel
                    .until_next(now)
                    .min(self.next_publish.saturating_duration_since(now))
                    .min(quic_next.map_or(MAX_SLEEP, |t| t.saturating_duration_since(now)))
                    .min(MAX_SLEEP)
            };
            self.poller.wait(&mut events, timeout)?;
            let now = Instant::now();
            self.date.refresh(SystemTime::now());
            for (token, ready) in events.iter() {
                if ready & REARM != 0 {
                    self.rearm(token);
                }
                let ready = ready & !REARM;
                match token {
                    WAKE => self.on_wake(now),
                    t if t > LISTENER_BASE - self.listeners.len() as u64 => {
                        self.accept_pending[(LISTENER_BASE - t) as usize] = true;
                    }
                    t if t <= UDP_BASE && UDP_BASE - t < 1 << 16 => {
                        if let Some(q) = self.quic.as_mut() {
                            q.ready((UDP_BASE - t) as usize);
                        }
                    }
                    t => self.on_conn_event(t, ready, now),
                }
            }
            self.on_ring_done(now);
            // Connections that stopped on their budget last turn continue
            // after everyone with fresh readiness has had a go.
            let resume = std::mem::replace(&mut self.resume, std::mem::take(&mut resume_spare));
            for &token in &resume {
                self.on_conn_event(token, 0, now);
            }
            resume_spare = resume;
            resume_spare.clear();
            if self.accept_retry.is_some_and(|at| now >= at) {
                self.accept_retry = None;
                for (pending, listener) in self.accept_pending.iter_mut().zip(&self.listeners) {
                    *pending = listener.is_some();
                }
            }
            for i in 0..self.listeners.len() {
                if self.accept_pending[i] {
                    self.accept(i, now);
                }
            }
            self.with_quic(now, Quic::turn);
            expired.clear();
            self.wheel.expire(now, &mut expired);
            for &token in &expired {
                self.on_timer(token, now);
            }
            if now >= self.next_publish {
                if self.conns.is_empty() && self.closed_since_trim >= TRIM_AFTER_CLOSES {
                    // Idle after a burst (1000 aborted TLS handshakes, a
                    // connection storm): give the freed per-connection
                    // memory back instead of keeping the burst's peak.
                    self.closed_since_trim = 0;
                    sys::trim_heap();
                }
                // Let go of a replaced snapshot even when no connection
                // comes to do it: an old generation holds its arena (and a
                // shard out of fds accepts nothing).
                self.snapshots.refresh();
                Conn::flush_proxy_refusals(&mut self.scratch, now);
                self.metrics.publish(self.index, &self.counters);
                if let Some(log) = &mut self.log {
                    log.flush();
                }
                self.next_publish = now + PUBLISH_INTERVAL;
            }
            if let Some(deadline) = self.draining {
                if self.conns.is_empty() && self.quic.as_ref().is_none_or(Quic::is_empty) {
                    self.log_drained(deadline, now);
                    return Ok(());
                }
                if now >= deadline {
                    let tokens: Vec<u64> = self.conns.tokens().collect();
                    tracing::warn!(
                        shard = self.index,
                        connections = tokens.len(),
                        "shutdown grace ran out; force-closing connections"
                    );
                    for token in tokens {
                        self.close_as(token, CloseReason::Shutdown, Some(DrainClose::Deadline));
                    }
                    self.with_quic(now, Quic::close_all);
                    self.log_drained(deadline, now);
                    return Ok(());
                }
            }
        }
    }

    /// How the drain went: its closes by kind (`drain_delay`'s included)
    /// and how long it took, which shows how soon keep-alive clients sent
    /// their next request.
    fn log_drained(&self, deadline: Instant, now: Instant) {
        let began = deadline - self.shared.shutdown_grace;
        let [after_response, idle_grace, deadline] = self.counters.drain_closes;
        // HTTP/2, since the drain began: streams a GOAWAY refused
        // (retryable by the client) and streams taken but cut off.
        let h2 = &self.counters.h2;
        let (refused_before, cut_before) = self.h2_at_drain;
        tracing::info!(
            shard = self.index,
            after_response,
            idle_grace,
            deadline,
            h2_refused_after_goaway = h2.refused_after_goaway.saturating_sub(refused_before),
            h2_streams_cut = h2.cut.saturating_sub(cut_before),
            elapsed_ms = now.duration_since(began).as_millis() as u64,
            "shard drained"
        );
    }

    fn on_wake(&mut self, now: Instant) {
        self.waker.drain();
        if !self.closing && self.shared.closing.load(Ordering::Acquire) {
            self.closing = true;
            tracing::info!(
                shard = self.index,
                connections = self.conns.len(),
                "shard closing connections after their next response"
            );
        }
        if self.draining.is_some() || !self.shared.draining.load(Ordering::Acquire) {
            return;
        }
        tracing::info!(
            shard = self.index,
            connections = self.conns.len(),
            "shard draining"
        );
        self.h2_at_drain = (self.counters.h2.refused_after_goaway, self.counters.h2.cut);
        let sweep = self
            .shared
            .sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for i in 0..self.listeners.len() {
            let addr = self.listeners[i].as_ref().and_then(|l| l.local_addr().ok());
            if addr.is_some_and(|a| sweep.contains(&a)) {
                self.accept_pending[i] = true;
                while self.accept_pending[i] {
                    self.accept(i, now);
                }
            }
        }
        self.draining = Some(now + self.shared.shutdown_grace);
        for (i, l) in self.listeners.iter_mut().enumerate() {
            if let Some(listener) = l.take() {
                let _ = self.poller.delete(&listener, LISTENER_BASE - i as u64);
            }
        }
        self.accept_pending.fill(false);
        let tokens: Vec<u64> = self.conns.tokens().collect();
        for token in tokens {
            self.dispatch(token, now, |conn, env| Some(conn.on_drain(env)));
        }
        if self.shared.quic_handed_over.load(Ordering::Acquire) {
            self.quic_handed_over();
        }
        self.with_quic(now, Quic::drain);
    }

    fn accept(&mut self, i: usize, now: Instant) {
        for _ in 0..ACCEPT_BATCH {
            let Some(listener) = &self.listeners[i] else {
                self.accept_pending[i] = false;
                return;
            };
            if self.conns.len() >= self.cfg.max_conns {
                // Leave the rest in the kernel's queue; `close` resumes
                // accepting (the listener's edge will not come again).
                if !self.at_cap {
                    self.at_cap = true;
                    self.counters.conn_limit_hits += 1;
                    tracing::warn!(
                        shard = self.index,
                        limit = self.cfg.max_conns,
                        "max_connections_per_core reached; accepting paused"
                    );
                }
                self.accept_pending.fill(false);
                return;
            }
            match sys::accept4(listener) {
                Ok((stream, peer)) => {
                    if self.accept_failing {
                        self.accept_failing = false;
                        self.out_of_fds_since = None;
                        if self.reserve.is_none() {
                            self.reserve = open_reserve();
                        }
                        tracing::info!(
                            shard = self.index,
                            shed = std::mem::take(&mut self.shed),
                            "accepting again"
                        );
                    }
                    if self.cfg.proxy_protocol
                        && !peer.is_some_and(|p| {
                            crate::proto::proxy::trusted(&self.cfg.trusted_proxies, p.ip())
                        })
                    {
                        // Not a trusted balancer: its PROXY header would
                        // choose the address it is logged under. Closed
                        // unread, as nginx's `set_real_ip_from` would not
                        // believe it and HAProxy's `accept-proxy` ACLs do.
                        Conn::refuse_untrusted(&mut self.counters, &mut self.scratch, peer, now);
                        drop(stream);
                        continue;
                    }
                    let tls = match &self.tls {
                        Some(config) if i >= self.plain_listeners => {
                            match TlsConn::new(config, now) {
                                Ok(t) => Some(Box::new(t)),
                                Err(e) => {
                                    tracing::warn!(error = %e, "TLS session setup failed");
                                    continue;
                                }
                            }
                        }
                        _ => None,
                    };
                    let completions =
                        !self.cfg.proxy_protocol && self.poller.completions().is_some();
                    let token = self
                        .conns
                        .insert(Conn::new(stream, peer, now, &self.cfg, tls));
                    self.counters.accepted();
                    // With TCP_DEFER_ACCEPT the request is usually here
                    // already: answer it before registering, so a
                    // one-request connection costs no epoll round trip
                    // (on the ring: no receive armed and cancelled).
                    self.dispatch(token, now, |conn, env| Some(conn.on_ready(EPOLLIN, env)));
                    let Some(conn) = self.conns.get_mut(token) else {
                        continue;
                    };
                    if completions {
                        // From here on by completions: the dispatch's
                        // upkeep arms its receive (which takes what the
                        // socket already holds first).
                        self.dispatch(token, now, |conn, _| {
                            conn.use_completions();
                            Some(Step::Keep)
                        });
                        continue;
                    }
                    if let Err(e) = self.poller.add(conn.stream(), token, CONN_INTEREST) {
                        tracing::warn!(error = %e, "watching an accepted socket failed");
                        self.close(token, CloseReason::Error);
                        continue;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.accept_pending[i] = false;
                    return;
                }
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: leave the connections queued and
                    // try again shortly (the edge that announced them will
                    // not come again), rather than spin on the error.
                    // Logged once per episode, not on every retry.
                    if !self.accept_failing {
                        tracing::warn!(shard = self.index, error = %e, "accept failing; retrying every 100 ms");
                    }
                    self.accept_failing = true;
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        let since = *self.out_of_fds_since.get_or_insert(now);
                        if now.duration_since(since) >= SHED_AFTER {
                            self.shed_queued(i);
                        }
                    }
                    self.accept_pending[i] = false;
                    self.accept_retry = Some(now + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    /// Out of fds for a while: accept the clients queued on listener `i`
    /// with the reserve fd and close them at once, so they see a close
    /// rather than a hang (the trick libuv and HAProxy use). The reserve is
    /// opened again afterwards; if another thread took the fd meanwhile it
    /// stays closed until accepting works again.
    fn shed_queued(&mut self, i: usize) {
        let Some(listener) = &self.listeners[i] else {
            return;
        };
        let Some(reserve) = self.reserve.take() else {
            return;
        };
        drop(reserve);
        let mut shed = 0u64;
        for _ in 0..ACCEPT_BATCH {
            match sys::accept4(listener) {
                // Dropped at once: the fd goes back for the next one.
                Ok(_) => shed += 1,
                Err(_) => break,
            }
        }
        if shed > 0 && self.shed == 0 {
            tracing::warn!(
                shard = self.index,
                "out of file descriptors; closing queued connections until accepting works again"
            );
        }
        // Logged with the episode's total when accepting works again; not
        // counted as connections, which they never became.
        self.shed += shed;
        self.reserve = open_reserve();
    }

    /// The ring ended the multishot poll of `token` (it posts a last
    /// completion, e.g. when its completion queue overflowed): watch the
    /// fd again if it is still the shard's.
    #[cold]
    fn rearm(&mut self, token: u64) {
        let res = if token == WAKE {
            self.poller.add(&*self.waker, WAKE, EPOLLIN)
        } else if token > LISTENER_BASE - self.listeners.len() as u64 {
            match &self.listeners[(LISTENER_BASE - token) as usize] {
                Some(l) => self.poller.add(l, token, EPOLLIN),
                None => Ok(()),
            }
        } else if token <= UDP_BASE && UDP_BASE - token < 1 << 16 {
            let i = (UDP_BASE - token) as usize;
            match self
                .quic
                .as_ref()
                .filter(|q| q.watched().any(|j| j == i))
                .and_then(|q| q.fd(i))
            {
                Some((fd, interest)) => self.poller.add(&fd, token, interest),
                None => Ok(()),
            }
        } else {
            match self.conns.get_mut(token) {
                // Its one-shot EPOLLOUT poll fired.
                Some(conn) if conn.completions() => {
                    conn.pollout_ended();
                    Ok(())
                }
                Some(conn) => self.poller.add(conn.stream(), token, CONN_INTEREST),
                None => Ok(()),
            }
        };
        if let Err(e) = res {
            tracing::warn!(error = %e, "watching a socket again failed");
        }
    }

    fn on_conn_event(&mut self, token: u64, ready: u32, now: Instant) {
        self.dispatch(token, now, |conn, env| Some(conn.on_ready(ready, env)));
    }

    fn on_timer(&mut self, token: u64, now: Instant) {
        self.dispatch(token, now, |conn, env| {
            if conn.scheduled > now {
                // A stale entry: the connection was re-inserted for an
                // earlier deadline, which is the one that counts.
                None
            } else if conn.deadline > now {
                Some(Step::Keep)
            } else {
                Some(conn.on_timeout(env))
            }
        });
    }

    /// Run `f` on the connection behind `token`, then act on its step.
    fn dispatch(
        &mut self,
        token: u64,
        now: Instant,
        f: impl FnOnce(&mut Conn, &mut ShardEnv<'_>) -> Option<Step>,
    ) {
        // The generation check: this fd may have been closed earlier in this
        // batch and its slot (even its fd number) reused by a new connection.
        let Some(conn) = self.conns.get_mut(token) else {
            return;
        };
        let mut env = shard_env!(self, now);
        match f(conn, &mut env) {
            Some(Step::Keep) => {
                // Keep a live wheel entry at or before the deadline.
                if conn.deadline < conn.scheduled || conn.scheduled <= now {
                    conn.scheduled = self.wheel.insert(token, conn.deadline);
                }
                if conn.wants_resume() {
                    self.resume.push(token);
                }
                if conn.completions() {
                    if let Some(r) = self.poller.completions() {
                        ring::upkeep(r, conn, token, self.cfg.read_buf, &mut self.to_send);
                    }
                }
            }
            Some(Step::Close(reason)) => self.close(token, reason),
            None => {}
        }
    }

    fn close(&mut self, token: u64, reason: CloseReason) {
        self.close_as(token, reason, None);
    }

    /// Close, counting a close of the shutdown as `drain` when given, else
    /// by how the connection ended (parted with at rest, or after the
    /// response that said `Connection: close`).
    fn close_as(&mut self, token: u64, reason: CloseReason, drain: Option<DrainClose>) {
        if let Some(conn) = self.conns.remove(token) {
            match self.poller.completions() {
                Some(r) if conn.completions() => ring::leftovers(r, &conn, token),
                _ => self.poller.forget(token),
            }
            if reason == CloseReason::Shutdown {
                let kind = drain.unwrap_or(if conn.parted() {
                    DrainClose::IdleGrace
                } else {
                    DrainClose::AfterResponse
                });
                self.counters.drain_closed(kind);
            }
            self.counters.h2.cut += conn.h2_unfinished();
            if let Some(secs) = conn.unfinished_handshake() {
                // Closed (timeout, EOF, reset) before the handshake ended;
                // a handshake error was counted when it happened.
                self.counters.handshake(Handshake::Failed, secs);
            }
            // Its buffers serve the next connection: a fresh 16 KiB read
            // buffer costs a zeroing `calloc` per accepted connection.
            conn.release(&mut self.pool);
            self.counters.closed(reason);
            self.closed_since_trim += 1;
            if self.at_cap && self.conns.len() < self.cfg.max_conns {
                self.at_cap = false;
                for (pending, listener) in self.accept_pending.iter_mut().zip(&self.listeners) {
                    *pending = listener.is_some();
                }
            }
        }
    }
}

/// The fd kept for shedding clients when out of fds: any cheap read-only
/// open works, and `/` exists everywhere (std opens it close-on-exec).
fn open_reserve() -> Option<std::fs::File> {
    std::fs::File::open("/").ok()
}
