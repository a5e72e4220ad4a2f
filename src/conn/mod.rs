//! One client connection: its read buffer, its state machine and its output
//! queue. The shard owns connections in a slab and calls [`Conn::on_ready`]
//! for readiness and [`Conn::on_timeout`] from its timer wheel.
//!
//! Per readiness event a connection makes one `read` and one `write` in the
//! common case: a read that returns less than the buffer's free space is
//! taken as having drained the socket (edge-triggered epoll raises a new
//! edge for data that arrives later, which is what nginx relies on too), and
//! all responses to pipelined requests go out in one `writev`.

pub mod output;
pub mod respond;
pub mod tls;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::Snapshot;
use crate::config::Config;
use crate::http::date::DateCache;
use crate::http::request::{self, Limits, Version};
use crate::http::Status;
use crate::metrics::access_log::ShardLog;
use crate::metrics::{CloseReason, ShardCounters};
use crate::sys::{EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP};
use output::{Flush, Output, WriteError};
use respond::{Env, Persist, Scratch};
use tls::{TlsConn, TlsRead};

/// After the last response of a connection closed by the server with
/// request bytes still unread, keep reading and discarding for this long, so
/// that closing does not reset the connection before the client has read the
/// response (RFC 9112 §9.6; nginx's `lingering_timeout`).
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

/// `scheduled` of a connection not yet in the timer wheel: later than any
/// deadline, so the first event inserts it.
const NOT_SCHEDULED: Duration = Duration::from_secs(365 * 24 * 3600);

/// Most reads per readiness event, so a client that keeps the socket full
/// cannot keep the shard from its other connections (16 × 16 KiB).
const MAX_READS_PER_EVENT: usize = 16;

/// Most times one event goes back to answering buffered requests after the
/// output drained below its bound (each time followed by at most one flush),
/// so a deep pipeline of small answers cannot keep the shard from its other
/// connections; the rest continues on the resume list.
const MAX_ROUNDS_PER_EVENT: usize = 8;

/// Most idle buffers a shard keeps for reuse; beyond that they are freed.
const POOL_MAX: usize = 1024;

/// Output buffers larger than this are freed rather than pooled.
const POOLED_WRITE_MAX: usize = 64 * 1024;

/// Connection settings, derived once from [`Config`].
#[derive(Debug, Clone)]
pub struct ConnConfig {
    pub limits: Limits,
    pub read_buf: usize,
    pub max_discard: u64,
    pub max_requests: u32,
    pub max_ranges: usize,
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub write_timeout: Duration,
    pub server_line: Vec<u8>,
    /// Large files by `sendfile` (zero-copy) instead of a verified copy.
    pub zero_copy: bool,
    /// `max_connections_per_core`: the shard pauses accepting at this many.
    pub max_conns: usize,
}

impl ConnConfig {
    pub fn new(cfg: &Config) -> ConnConfig {
        ConnConfig {
            limits: Limits {
                max_head: cfg.max_head_bytes,
                max_uri: cfg.max_uri_bytes,
            },
            // Room for a maximal head plus pipelined requests behind it.
            read_buf: (cfg.max_head_bytes + 1).max(16 * 1024),
            max_discard: cfg.max_discard_bytes,
            max_requests: cfg.max_requests_per_connection,
            max_ranges: cfg.max_ranges,
            header_timeout: cfg.header_timeout,
            keepalive_timeout: cfg.keepalive_timeout,
            write_timeout: cfg.write_timeout,
            server_line: cfg.server_line.clone(),
            zero_copy: cfg.sendfile,
            max_conns: cfg.max_connections_per_core,
        }
    }
}

/// Buffers of idle connections, reused so that a keep-alive connection
/// between requests holds no buffer memory and the hot path does not allocate.
#[derive(Default)]
pub struct BufPool {
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
}

/// The shard's state a connection needs while handling an event.
pub struct ShardEnv<'a> {
    pub cfg: &'a ConnConfig,
    pub snapshot: &'a Arc<Snapshot>,
    pub date: &'a DateCache,
    pub scratch: &'a mut Scratch,
    pub pool: &'a mut BufPool,
    pub counters: &'a mut ShardCounters,
    pub log: Option<&'a mut ShardLog>,
    pub now: Instant,
    /// The server is shutting down: answer what is in flight, then close.
    pub draining: bool,
}

impl ShardEnv<'_> {
    /// Count an answer and write its access-log line.
    fn record(
        &mut self,
        peer: Option<SocketAddr>,
        tls: Option<&TlsConn>,
        req: Option<&request::Request<'_>>,
        status: Status,
        bytes: u64,
    ) {
        self.counters.request(status, bytes);
        if let Some(log) = self.log.as_deref_mut() {
            let session = tls.and_then(TlsConn::session_info);
            log.line(self.date.secs(), peer, session, req, status, bytes);
        }
    }
}

/// What the shard should do with the connection after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Keep,
    Close(CloseReason),
}

/// The read side of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Between requests (or before the first): no byte of a head yet.
    Idle,
    /// Part of a request head has arrived.
    Head,
    /// Skipping the rest of a request body.
    Discard { remaining: u64 },
    /// No more requests will be read; close once the output is flushed.
    Done(CloseReason),
    /// The final response is out and our write side is shut down; discard
    /// what the client still sends until it closes or [`LINGER_TIMEOUT`].
    Lingering(CloseReason),
}

enum Fill {
    /// New bytes are in the buffer.
    Data,
    /// Nothing to read now.
    Drained,
    Eof,
}

pub struct Conn {
    stream: TcpStream,
    /// The TLS session of a connection accepted on a `tls_listen` port;
    /// `None` is cleartext, whose path stays as it was.
    tls: Option<Box<TlsConn>>,
    pub peer: Option<SocketAddr>,
    reading: Reading,
    /// Read buffer; empty (no capacity) while parked in the pool.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    out: Output,
    served: u32,
    /// The socket may have unread bytes (edge seen, not yet drained).
    readable: bool,
    /// The last write hit EAGAIN; wait for EPOLLOUT.
    write_blocked: bool,
    /// When the current timeout expires.
    pub deadline: Instant,
    /// When the timer wheel will next look at this connection.
    pub scheduled: Instant,
    /// When the answers now queued were parsed, for the latency histogram.
    answered_at: Instant,
    /// Answers queued since the last complete flush.
    unflushed: u64,
    /// The last event stopped on its budget with work left (bytes to read or
    /// to write): the shard calls `on_ready` again next turn.
    resume: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.peer)
            .field("reading", &self.reading)
            .field("buffered", &(self.rend - self.rstart))
            .field("out", &self.out)
            .field("served", &self.served)
            .field("readable", &self.readable)
            .field("write_blocked", &self.write_blocked)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Conn {
    pub fn new(
        stream: TcpStream,
        peer: Option<SocketAddr>,
        now: Instant,
        cfg: &ConnConfig,
        tls: Option<Box<TlsConn>>,
    ) -> Conn {
        // The first request gets the header timeout, as nginx's
        // client_header_timeout does.
        let deadline = now + cfg.header_timeout;
        // sendfile would bypass the encryption: TLS bodies are copied.
        let zero_copy = cfg.zero_copy && tls.is_none();
        Conn {
            stream,
            tls,
            peer,
            reading: Reading::Idle,
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            out: Output::new(zero_copy),
            served: 0,
            readable: false,
            write_blocked: false,
            deadline,
            // Not in the timer wheel yet: the shard inserts it after the
            // first event, as for any deadline earlier than `scheduled`.
            scheduled: now + NOT_SCHEDULED,
            answered_at: now,
            unflushed: 0,
            resume: false,
        }
    }

    /// Work is left that no new readiness edge will announce.
    pub fn wants_resume(&self) -> bool {
        self.resume
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// For a TLS connection whose handshake has not completed (nor
    /// failed): seconds since it started.
    pub fn unfinished_handshake(&self) -> Option<f64> {
        self.tls
            .as_ref()
            .filter(|t| t.handshaking())
            .map(|t| t.elapsed())
    }

    /// Nothing queued: no answer, and no ciphertext in the TLS session.
    #[inline]
    fn out_empty(&self) -> bool {
        self.out.is_empty() && !self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Write what is queued, through TLS when the connection has it.
    #[inline]
    fn flush_out(&mut self) -> Result<Flush, WriteError> {
        match &mut self.tls {
            None => self.out.flush(&mut &self.stream),
            Some(tls) => tls.flush(&mut self.out, &self.stream),
        }
    }

    /// Handle readiness `events` from epoll.
    pub fn on_ready(&mut self, events: u32, env: &mut ShardEnv<'_>) -> Step {
        if events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR) != 0 {
            self.readable = true;
        }
        if events & (EPOLLOUT | EPOLLHUP | EPOLLERR) != 0 {
            self.write_blocked = false;
        }
        self.drive(env)
    }

    /// The deadline passed (the caller checked `now >= deadline`).
    pub fn on_timeout(&mut self, env: &mut ShardEnv<'_>) -> Step {
        match self.reading {
            Reading::Lingering(reason) | Reading::Done(reason) if self.out_empty() => {
                Step::Close(reason)
            }
            _ if !self.out_empty() => Step::Close(CloseReason::WriteTimeout),
            Reading::Head | Reading::Discard { .. } => {
                self.prepare_out(env.pool);
                let (status, bytes) = respond::error_with(
                    &mut self.out,
                    &env.cfg.server_line,
                    env.date,
                    Status::RequestTimeout,
                    "timed out reading the request",
                    b"",
                    Persist::Close,
                    false,
                );
                env.record(self.peer, self.tls.as_deref(), None, status, bytes);
                // Best effort: the client has been silent, don't wait for it.
                let _ = self.flush_out();
                Step::Close(CloseReason::HeaderTimeout)
            }
            Reading::Idle if self.served == 0 => Step::Close(CloseReason::HeaderTimeout),
            _ => Step::Close(CloseReason::IdleTimeout),
        }
    }

    /// The server started draining: close now if idle, else after the
    /// response in flight (responses from now on carry `Connection: close`).
    pub fn on_drain(&mut self) -> Step {
        match self.reading {
            Reading::Idle if self.out_empty() && self.rstart == self.rend => {
                Step::Close(CloseReason::Shutdown)
            }
            Reading::Lingering(reason) => Step::Close(reason),
            _ => Step::Keep,
        }
    }

    fn drive(&mut self, env: &mut ShardEnv<'_>) -> Step {
        self.resume = false;
        let mut reads = 0;
        let mut rounds = 0;
        loop {
            let stalled = self.answer(env);
            if !self.out_empty() && !self.write_blocked {
                match self.flush_out() {
                    Ok(Flush::Done) => self.flushed(env),
                    Ok(Flush::Blocked) => {
                        self.write_blocked = true;
                        self.deadline = env.now + env.cfg.write_timeout;
                    }
                    Ok(Flush::Yielded) => {
                        self.resume = true;
                        self.deadline = env.now + env.cfg.write_timeout;
                        break;
                    }
                    Err(_) => return Step::Close(CloseReason::Error),
                }
            }
            if self.out_empty() {
                if let Reading::Done(reason) = self.reading {
                    if !self.linger(reason, env.now) {
                        return Step::Close(reason);
                    }
                }
            }
            // Requests left buffered behind a backlog are answered as soon
            // as the output drains below the bound: no readiness edge will
            // announce bytes that are already in our buffer.
            if stalled && !self.out.is_backlogged(env.snapshot) {
                if rounds == MAX_ROUNDS_PER_EVENT {
                    self.resume = true;
                    break;
                }
                rounds += 1;
                continue;
            }
            if !(self.readable && self.wants_read(env.snapshot)) {
                break;
            }
            if reads == MAX_READS_PER_EVENT {
                // More is waiting, but other connections get their turn
                // first; no new edge will come for it, so ask to resume.
                self.resume = true;
                break;
            }
            reads += 1;
            match self.fill(env) {
                Ok(Fill::Data) => {}
                Ok(Fill::Drained) => break,
                Ok(Fill::Eof) => match self.reading {
                    Reading::Lingering(reason) => return Step::Close(reason),
                    _ if self.out_empty() => return Step::Close(CloseReason::Client),
                    // Half-closed: still deliver what was asked for.
                    _ => self.reading = Reading::Done(CloseReason::Client),
                },
                Err(_) => {
                    if let Some(tls) = &mut self.tls {
                        // The alert rustls queued for the error.
                        tls.flush_alert(&self.stream);
                    }
                    return Step::Close(CloseReason::Error);
                }
            }
        }
        if env.draining {
            if let Step::Close(reason) = self.on_drain() {
                return Step::Close(reason);
            }
        }
        self.park(env.pool);
        Step::Keep
    }

    /// Everything queued has been handed to the kernel.
    fn flushed(&mut self, env: &mut ShardEnv<'_>) {
        if self.unflushed > 0 {
            if env.counters.enabled {
                let secs = self.answered_at.elapsed().as_secs_f64();
                env.counters.durations(self.unflushed, secs);
            }
            self.unflushed = 0;
        }
        // Before the first request (a TLS handshake flight) the header
        // timeout from accept still runs, as nginx's client_header_timeout.
        if self.reading == Reading::Idle && self.served > 0 {
            self.deadline = env.now + env.cfg.keepalive_timeout;
        }
    }

    fn wants_read(&self, snapshot: &Arc<Snapshot>) -> bool {
        match self.reading {
            Reading::Done(_) => false,
            Reading::Lingering(_) => true,
            _ => !self.out.is_backlogged(snapshot),
        }
    }

    /// Start lingering after the final response. Returns false when there is
    /// nothing to wait for and the connection can close right away.
    fn linger(&mut self, reason: CloseReason, now: Instant) -> bool {
        if let Some(tls) = &mut self.tls {
            tls.close_notify();
            tls.flush_alert(&self.stream);
        }
        let unread = self.rstart < self.rend || reason == CloseReason::Error;
        if !unread || self.stream.shutdown(Shutdown::Write).is_err() {
            return false;
        }
        self.reading = Reading::Lingering(reason);
        self.rstart = 0;
        self.rend = 0;
        self.readable = true;
        self.deadline = now + LINGER_TIMEOUT;
        true
    }

    /// One `read` into the buffer.
    fn fill(&mut self, env: &mut ShardEnv<'_>) -> io::Result<Fill> {
        if self.rbuf.is_empty() {
            let size = env.cfg.read_buf;
            self.rbuf = env.pool.read.pop().unwrap_or_else(|| vec![0; size]);
        }
        if let Reading::Lingering(_) = self.reading {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rend == self.rbuf.len() {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        let spare = self.rbuf.len() - self.rend;
        if spare == 0 {
            // A full buffer holds complete requests waiting behind output.
            return Ok(Fill::Drained);
        }
        if self.tls.is_some() && !matches!(self.reading, Reading::Lingering(_)) {
            return self.fill_tls(env);
        }
        match (&self.stream).read(&mut self.rbuf[self.rend..]) {
            Ok(0) => {
                self.readable = false;
                Ok(Fill::Eof)
            }
            Ok(n) => {
                self.rend += n;
                if n < spare {
                    self.readable = false;
                }
                Ok(Fill::Data)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(Fill::Drained)
            }
            Err(e) => Err(e),
        }
    }

    /// [`fill`](Self::fill) through TLS: plaintext into the buffer. Only
    /// handshake progress reads as `Data` too, so the caller flushes the
    /// handshake's answer.
    fn fill_tls(&mut self, env: &mut ShardEnv<'_>) -> io::Result<Fill> {
        let Some(session) = self.tls.as_deref_mut() else {
            unreachable!("fill_tls on a cleartext connection")
        };
        let mut done = None;
        let res = session.read(&self.stream, &mut self.rbuf[self.rend..], &mut done);
        if let Some((kind, secs)) = done {
            env.counters.handshake(kind, secs);
        }
        match res? {
            TlsRead::Data { n, more } => {
                self.rend += n;
                if !more {
                    self.readable = false;
                }
                Ok(Fill::Data)
            }
            TlsRead::Drained => {
                self.readable = false;
                Ok(Fill::Drained)
            }
            TlsRead::Eof => {
                self.readable = false;
                Ok(Fill::Eof)
            }
            TlsRead::PlainHttp => {
                // Answered in cleartext, bypassing the TLS session; the
                // socket's buffer is empty, so the one write goes through.
                let _ = (&self.stream).write(tls::PLAIN_HTTP_ANSWER);
                env.record(self.peer, None, None, Status::BadRequest, 0);
                self.tls = None;
                self.rstart = 0;
                self.rend = 1; // unread bytes: linger rather than reset
                self.reading = Reading::Done(CloseReason::Error);
                Ok(Fill::Data)
            }
        }
    }

    fn prepare_out(&mut self, pool: &mut BufPool) {
        if self.out.is_empty() && self.out.buf().capacity() == 0 {
            if let Some(buf) = pool.write.pop() {
                self.out.set_buf(buf);
            }
        }
    }

    /// Answer every complete request in the buffer, in order, until the
    /// output is backlogged or the connection stops reading. Returns true
    /// when it stopped on the backlog with bytes still buffered: the caller
    /// must come back once the output drains.
    fn answer(&mut self, env: &mut ShardEnv<'_>) -> bool {
        loop {
            match self.reading {
                Reading::Done(_) | Reading::Lingering(_) => return false,
                Reading::Discard { remaining } => {
                    let take = remaining.min((self.rend - self.rstart) as u64);
                    self.rstart += take as usize;
                    if take < remaining {
                        self.reading = Reading::Discard {
                            remaining: remaining - take,
                        };
                        return false;
                    }
                    self.reading = Reading::Idle;
                }
                Reading::Idle | Reading::Head => {
                    if self.rstart == self.rend {
                        return false;
                    }
                    if self.out.is_backlogged(env.snapshot) {
                        return true;
                    }
                    if !self.answer_one(env) {
                        return false;
                    }
                }
            }
        }
    }

    /// Parse and answer one request. Returns false when no complete head is
    /// buffered or the connection stops reading.
    fn answer_one(&mut self, env: &mut ShardEnv<'_>) -> bool {
        self.prepare_out(env.pool);
        let data = &self.rbuf[self.rstart..self.rend];
        let parsed = request::parse(data, &env.cfg.limits);
        let req = match parsed {
            Ok(None) => {
                if self.reading == Reading::Idle {
                    self.reading = Reading::Head;
                    self.deadline = env.now + env.cfg.header_timeout;
                }
                return false;
            }
            Ok(Some(req)) => req,
            Err(e) => {
                let (status, bytes) = respond::error_with(
                    &mut self.out,
                    &env.cfg.server_line,
                    env.date,
                    e.status(),
                    e.message(),
                    b"",
                    Persist::Close,
                    false,
                );
                env.record(self.peer, self.tls.as_deref(), None, status, bytes);
                self.queued(env.now);
                self.reading = Reading::Done(CloseReason::Error);
                return false;
            }
        };
        self.served += 1;
        let head_len = req.head_len;
        let body = req.content_length;
        let (persist, close_reason) =
            self.persistence(req.version, req.conn_close, req.conn_keep_alive, env);
        let mut renv = Env {
            snapshot: env.snapshot,
            date: env.date,
            server_line: &env.cfg.server_line,
            max_ranges: env.cfg.max_ranges,
            scratch: env.scratch,
        };
        if body > env.cfg.max_discard {
            let (status, bytes) = respond::error(
                &renv,
                &mut self.out,
                Status::PayloadTooLarge,
                "request body too large",
                b"",
                Persist::Close,
                false,
            );
            env.record(self.peer, self.tls.as_deref(), Some(&req), status, bytes);
            self.queued(env.now);
            self.rstart += head_len;
            self.reading = Reading::Done(CloseReason::Error);
            return false;
        }
        let (status, bytes) = respond::respond(&req, &mut renv, persist, &mut self.out);
        env.record(self.peer, self.tls.as_deref(), Some(&req), status, bytes);
        self.queued(env.now);
        self.rstart += head_len;
        if persist == Persist::Close {
            self.reading = Reading::Done(close_reason);
            return false;
        }
        self.reading = if body > 0 {
            Reading::Discard { remaining: body }
        } else {
            Reading::Idle
        };
        true
    }

    fn queued(&mut self, now: Instant) {
        if self.unflushed == 0 {
            self.answered_at = now;
        }
        self.unflushed += 1;
    }

    /// Whether the connection persists after the request just parsed
    /// (RFC 9112 §9.3), and why not.
    fn persistence(
        &self,
        version: Version,
        close: bool,
        keep_alive: bool,
        env: &ShardEnv<'_>,
    ) -> (Persist, CloseReason) {
        let client_closes = match version {
            Version::Http11 => close,
            Version::Http10 => close || !keep_alive,
        };
        if client_closes {
            (Persist::Close, CloseReason::Client)
        } else if self.served >= env.cfg.max_requests {
            (Persist::Close, CloseReason::MaxRequests)
        } else if env.draining {
            (Persist::Close, CloseReason::Shutdown)
        } else if version == Version::Http10 {
            (Persist::KeepAlive10, CloseReason::Client)
        } else {
            (Persist::KeepAlive11, CloseReason::Client)
        }
    }

    /// Between requests, hand the buffers back to the shard's pool.
    fn park(&mut self, pool: &mut BufPool) {
        if self.reading != Reading::Idle || self.rstart != self.rend || !self.out_empty() {
            return;
        }
        self.rstart = 0;
        self.rend = 0;
        if !self.rbuf.is_empty() && pool.read.len() < POOL_MAX {
            pool.read.push(std::mem::take(&mut self.rbuf));
        }
        let out = self.out.take_buf();
        // A buffer grown by a large multipart answer is not worth keeping.
        if out.capacity() > 0 && out.capacity() <= POOLED_WRITE_MAX && pool.write.len() < POOL_MAX {
            pool.write.push(out);
        }
    }
}
