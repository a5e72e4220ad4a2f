//! One client connection: its read buffer, its state machine and its output
//! queue. The shard owns connections in a slab and calls [`Conn::on_ready`]
//! for readiness and [`Conn::on_timeout`] from its timer wheel.
//!
//! Per readiness event a connection makes one `read` and one `write` in the
//! common case: a read that returns less than the buffer's free space is
//! taken as having drained the socket (edge-triggered epoll raises a new
//! edge for data that arrives later, which is what nginx relies on too), and
//! all responses to pipelined requests go out in one `write` (a `writev`
//! when large bodies are referenced in place).

mod answer;
mod env;
mod h2;
mod peer;
mod read;
pub mod request_id;
mod ring;
pub mod tls;

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::http::chunked;
use crate::http::Status;
use crate::io::output::{Flush, Output, WriteError};
use crate::metrics::CloseReason;
use crate::proto::proxy;
use crate::sys::{EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP};
use tls::TlsConn;

pub use env::{BufPool, ConnConfig, Scratch, ShardEnv, Stop};
pub use h2::Answer;
use peer::Peer;
use ring::RingState;
pub use ring::{RingLeftovers, RingWants};

/// After the last response of a connection closed by the server with
/// request bytes still unread, keep reading and discarding for this long, so
/// that closing does not reset the connection before the client has read the
/// response (RFC 9112 §9.6; nginx's `lingering_timeout`).
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

/// [`LINGER_TIMEOUT`] for HTTP/2 (nginx's `lingering_time`): its client
/// may still be reading megabytes of DATA queued in the socket, sending
/// WINDOW_UPDATEs as it goes; closing on it would reset the connection and
/// destroy what it has not read. It closes when it has read the GOAWAY.
const H2_LINGER_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Bytes a connection holding a partial request head keeps for it between
/// reads, at least: the head is moved out of the full-size read buffer
/// into one sized to it (rounded up to a power of two), so a slow client
/// costs what it sent, not [`ConnConfig::read_buf`].
const PARTIAL_MIN: usize = 64;

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
    /// Skipping the rest of a request body (`ConnIo::discard` bytes).
    Discard,
    /// Skipping a chunked request body, as `ConnIo::chunked` decodes it.
    DiscardChunked,
    /// No more requests will be read; close once the output is flushed.
    Done(CloseReason),
    /// The final response is out and our write side is shut down; discard
    /// what the client still sends until it closes or [`LINGER_TIMEOUT`].
    Lingering(CloseReason),
    /// On a `proxy_protocol` listener, before the PROXY header is read.
    Proxy,
}

/// What the socket may hold unread, as far as readiness told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readable {
    /// Drained: wait for the next edge.
    No,
    /// An edge came: a read shorter than the buffer drains it (the next
    /// bytes raise a new edge).
    Yes,
    /// epoll announced the peer's FIN (EPOLLRDHUP, EPOLLHUP): reads go on
    /// to the end of file, since no new edge comes for a FIN already
    /// announced, even when a short read took the bytes before it.
    ToEof,
}

impl Readable {
    fn set(&mut self) {
        if *self == Readable::No {
            *self = Readable::Yes;
        }
    }

    fn any(self) -> bool {
        self != Readable::No
    }
}

enum Fill {
    /// New bytes are in the buffer.
    Data,
    /// Nothing to read now.
    Drained,
    Eof,
}

/// The part of a connection that only matters while it has bytes in flight:
/// its read buffer and its output queue. Boxed, and handed back to the
/// shard's [`BufPool`] between requests, so an idle keep-alive connection
/// is just its [`Conn`] (about 100 bytes in the slab).
struct ConnIo {
    /// Read buffer: [`ConnConfig::read_buf`] bytes while reading, or sized
    /// to a partial head held between reads (see [`PARTIAL_MIN`]).
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Body bytes still to skip in [`Reading::Discard`].
    discard: u64,
    /// Where the body skipped in [`Reading::DiscardChunked`] stands.
    chunked: chunked::Decoder,
    out: Output,
    /// When the answers now queued were parsed, for the latency histogram.
    answered_at: Instant,
    /// When the first byte of the partial head now waiting was read (the
    /// access log's request time).
    head_at: Instant,
    /// Answers queued since the last complete flush.
    unflushed: u64,
    /// The HTTP/2 state of a connection that speaks it (`conn/h2.rs`); an
    /// HTTP/2 connection keeps its `ConnIo` while idle.
    h2: Option<Box<crate::proto::h2::H2>>,
}

pub struct Conn {
    stream: TcpStream,
    served: u32,
    /// The TLS session of a connection accepted on a `tls_listen` port;
    /// `None` is cleartext, whose path stays as it was.
    tls: Option<Box<TlsConn>>,
    /// Buffers and output; `None` while parked (idle, nothing buffered).
    io: Option<Box<ConnIo>>,
    peer: Peer,
    /// When the current timeout expires.
    pub deadline: Instant,
    /// When the timer wheel will next look at this connection.
    pub scheduled: Instant,
    reading: Reading,
    /// Whether the socket may have unread bytes.
    readable: Readable,
    /// The last write hit EAGAIN; wait for EPOLLOUT.
    write_blocked: bool,
    /// The last event stopped on its budget with work left (bytes to read or
    /// to write): the shard calls `on_ready` again next turn.
    resume: bool,
    /// A draining shard parted with it after `drain_idle_grace` between
    /// requests (for the drain-close metric).
    parted: bool,
    /// Driven by io_uring completions, and what it wants of the ring
    /// (`conn/ring.rs`); empty on readiness.
    ring: RingState,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.peer.get())
            .field("reading", &self.reading)
            .field(
                "buffered",
                &self.io.as_ref().map_or(0, |io| io.rend - io.rstart),
            )
            .field("out", &self.io.as_ref().map(|io| &io.out))
            .field("served", &self.served)
            .field("readable", &self.readable)
            .field("write_blocked", &self.write_blocked)
            .field("parted", &self.parted)
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
        let reading = if cfg.proxy_protocol {
            Reading::Proxy
        } else {
            Reading::Idle
        };
        Conn {
            stream,
            served: 0,
            tls,
            io: None,
            peer: Peer::new(peer),
            deadline,
            // Not in the timer wheel yet: the shard inserts it after the
            // first event, as for any deadline earlier than `scheduled`.
            scheduled: now + NOT_SCHEDULED,
            reading,
            readable: Readable::No,
            write_blocked: false,
            resume: false,
            parted: false,
            ring: RingState::default(),
        }
    }

    /// The boxed I/O state, taken from the pool if the connection was
    /// parked.
    #[inline]
    fn unpark(&mut self, env: &mut ShardEnv<'_>) {
        if self.io.is_none() {
            // sendfile would bypass the encryption: TLS bodies are copied.
            let zero_copy = env.cfg.zero_copy && self.tls.is_none();
            self.io = Some(env.pool.take_io(zero_copy));
        }
    }

    /// The I/O state; only after [`unpark`](Self::unpark).
    #[inline]
    fn io(&mut self) -> &mut ConnIo {
        self.io
            .as_deref_mut()
            .expect("connection I/O state taken before use")
    }

    /// Closing: hand the I/O state back to the pool when nothing is left
    /// queued in it (the socket closes when `self` drops).
    pub fn release(mut self, pool: &mut BufPool) {
        if let Some(tls) = &mut self.tls {
            tls.release(&mut pool.cipher);
        }
        let Some(mut io) = self.io.take() else {
            return;
        };
        if !io.out.is_empty() || pool.io.len() >= POOL_MAX {
            return;
        }
        io.rstart = 0;
        io.rend = 0;
        io.discard = 0;
        io.unflushed = 0;
        io.h2 = None;
        io.out.clear();
        if io.out.buf().capacity() > POOLED_WRITE_MAX {
            drop(io.out.take_buf());
        }
        pool.io.push(io);
    }

    /// A draining shard parted with it after `drain_idle_grace` between
    /// requests, rather than after a response.
    pub fn parted(&self) -> bool {
        self.parted
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
        self.io.as_ref().is_none_or(|io| io.out.is_empty())
            && !self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Write what is queued, through TLS when the connection has it.
    #[inline]
    fn flush_out(&mut self) -> Result<Flush, WriteError> {
        if self.ring.completions() {
            return self.flush_ring();
        }
        let io = self
            .io
            .as_deref_mut()
            .expect("connection I/O state taken before use");
        match &mut self.tls {
            None => io.out.flush(&mut &self.stream),
            Some(tls) => tls.flush(&mut io.out, &self.stream),
        }
    }

    /// Handle readiness `events` from epoll.
    pub fn on_ready(&mut self, events: u32, env: &mut ShardEnv<'_>) -> Step {
        if events & (EPOLLRDHUP | EPOLLHUP) != 0 {
            self.readable = Readable::ToEof;
        } else if events & (EPOLLIN | EPOLLERR) != 0 {
            self.readable.set();
        }
        if events & (EPOLLOUT | EPOLLHUP | EPOLLERR) != 0 {
            self.write_blocked = false;
        }
        if self.reading == Reading::Proxy {
            match self.read_proxy(env) {
                Ok(true) => {}
                Ok(false) => return Step::Keep,
                Err(reason) => return Step::Close(reason),
            }
        }
        self.drive(env)
    }

    /// The deadline passed (the caller checked `now >= deadline`).
    pub fn on_timeout(&mut self, env: &mut ShardEnv<'_>) -> Step {
        if self.is_h2() {
            return self.h2_timeout(env);
        }
        match self.reading {
            Reading::Proxy => self.proxy_timed_out(env),
            Reading::Lingering(reason) | Reading::Done(reason) if self.out_empty() => {
                Step::Close(reason)
            }
            _ if !self.out_empty() => Step::Close(CloseReason::WriteTimeout),
            Reading::Idle if env.stop == Stop::Draining && self.at_rest() => self.part(env),
            Reading::Head | Reading::Discard | Reading::DiscardChunked => {
                self.unpark(env);
                self.prepare_out(env.pool);
                let started = if self.reading == Reading::Head {
                    self.io().head_at
                } else {
                    env.now
                };
                let io = self.io.as_deref_mut().expect("unparked above");
                let tls = self.tls.as_deref();
                env.early_error(
                    &mut io.out,
                    &self.peer,
                    tls,
                    Status::RequestTimeout,
                    "timed out reading the request",
                    started,
                );
                // Best effort: the client has been silent, don't wait for it.
                self.flush_now();
                Step::Close(CloseReason::HeaderTimeout)
            }
            Reading::Idle if self.served == 0 => Step::Close(CloseReason::HeaderTimeout),
            _ => Step::Close(CloseReason::IdleTimeout),
        }
    }

    /// The server is draining. A connection with a request or response
    /// under way goes on (its next answer says `Connection: close`, then it
    /// closes). One at rest between requests is not closed now: its next
    /// request may already be on the wire, and closing would lose it (a
    /// reset, or an end of file with no answer). It gets `drain_idle_grace`
    /// to send it, as HAProxy's `idle-close-on-response` does; after that
    /// [`on_timeout`](Self::on_timeout) parts with it (see `part`). A
    /// lingering connection finishes lingering.
    /// An HTTP/2 connection sends GOAWAY and finishes its streams.
    pub fn on_drain(&mut self, env: &ShardEnv<'_>) -> Step {
        if self.is_h2() {
            return self.h2_drain();
        }
        if self.at_rest() {
            let by = env.now + env.cfg.drain_idle_grace;
            if self.deadline > by {
                self.deadline = by;
            }
        }
        Step::Keep
    }

    /// Between requests with nothing in flight: no request byte buffered,
    /// nothing to send, no TLS handshake under way.
    fn at_rest(&self) -> bool {
        self.reading == Reading::Idle
            && self.buffered() == 0
            && self.out_empty()
            && !self.tls.as_ref().is_some_and(|t| t.handshaking())
    }

    /// Draining, the connection stayed at rest for `drain_idle_grace`: part
    /// with it so that no request meets a reset. A request that arrived
    /// since the last readiness event is answered first. Otherwise the
    /// close_notify (TLS) and our FIN go out, and whatever the client still
    /// sends is read and dropped until its FIN or [`LINGER_TIMEOUT`]: a
    /// request that crossed our FIN sees an end of file, which a client
    /// may retry (RFC 9112 §9.3.1), rather than a reset, which it sees if
    /// the socket is closed with bytes unread.
    fn part(&mut self, env: &mut ShardEnv<'_>) -> Step {
        self.readable.set();
        if let Step::Close(reason) = self.drive(env) {
            return Step::Close(reason);
        }
        if !self.at_rest() {
            return Step::Keep;
        }
        self.parted = true;
        if let Some(tls) = &mut self.tls {
            tls.close_notify();
            tls.flush_alert(&self.stream);
        }
        if self.stream.shutdown(Shutdown::Write).is_err() {
            return Step::Close(CloseReason::Shutdown);
        }
        self.reading = Reading::Lingering(CloseReason::Shutdown);
        self.readable.set();
        self.deadline = env.now + LINGER_TIMEOUT;
        self.drive(env)
    }

    /// Request bytes read and not yet consumed.
    #[inline]
    fn buffered(&self) -> usize {
        self.io.as_ref().map_or(0, |io| io.rend - io.rstart)
    }

    fn drive(&mut self, env: &mut ShardEnv<'_>) -> Step {
        self.unpark(env);
        self.resume = false;
        let mut reads = 0;
        let mut rounds = 0;
        loop {
            let stalled = self.answer(env);
            if !self.out_empty() && !self.write_blocked {
                let flushed = self.flush_out();
                let replaced = std::mem::take(&mut self.io().out.from_replaced);
                if replaced > 0 && env.counters.enabled {
                    env.counters.downloads_from_replaced += u64::from(replaced);
                }
                match flushed {
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
                    Err(WriteError::FileChanged) => {
                        if env.counters.enabled {
                            env.counters.downloads_cut_changed += 1;
                        }
                        return Step::Close(CloseReason::Error);
                    }
                    Err(WriteError::Io(_)) => return Step::Close(CloseReason::Error),
                }
            }
            if let Reading::Done(reason) = self.reading {
                if self.out_empty() && !self.linger(reason, env.now) {
                    return Step::Close(reason);
                }
            }
            // Requests left buffered behind a backlog are answered as soon
            // as the output drains below the bound: no readiness edge will
            // announce bytes that are already in our buffer.
            if stalled && !self.io().out.is_backlogged() {
                if rounds == MAX_ROUNDS_PER_EVENT {
                    self.resume = true;
                    break;
                }
                rounds += 1;
                continue;
            }
            if !(self.readable.any() && self.wants_read()) {
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
        if self.write_blocked
            && self.io.as_mut().is_some_and(|io| io.out.reached_bound())
            && env.counters.enabled
        {
            env.counters.output_bound_hits += 1;
        }
        if env.stop == Stop::Draining {
            self.on_drain(env);
        }
        self.park(env.pool);
        Step::Keep
    }

    /// Everything queued has been handed to the kernel.
    fn flushed(&mut self, env: &mut ShardEnv<'_>) {
        let io = self.io();
        if io.unflushed > 0 {
            if env.counters.enabled {
                let secs = io.answered_at.elapsed().as_secs_f64();
                env.counters.durations(io.unflushed, secs);
            }
            io.unflushed = 0;
        }
        // The wait for output is over: the timeout of what is read next
        // applies again. A head under way keeps its header timeout, and
        // before the first request (a TLS handshake flight) so does the
        // timeout from accept, as nginx's client_header_timeout (a flight
        // lent to a ring send, or a partial head that came in behind it,
        // waited as a write meanwhile).
        if !self.is_h2() {
            match self.reading {
                Reading::Idle if self.served > 0 => {
                    self.deadline = env.now + env.cfg.keepalive_timeout;
                }
                Reading::Idle => {
                    if let Some(tls) = &self.tls {
                        self.deadline = tls.accepted() + env.cfg.header_timeout;
                    }
                }
                Reading::Head => self.deadline = self.io().head_at + env.cfg.header_timeout,
                _ => {}
            }
        }
        if env.stop == Stop::Draining {
            self.on_drain(env);
        }
    }

    fn wants_read(&self) -> bool {
        match self.reading {
            Reading::Done(_) => false,
            Reading::Lingering(_) => true,
            _ => !self.io.as_ref().is_some_and(|io| io.out.is_backlogged()),
        }
    }

    /// Start lingering after the final response. Returns false when there is
    /// nothing to wait for and the connection can close right away.
    fn linger(&mut self, reason: CloseReason, now: Instant) -> bool {
        if let Some(tls) = &mut self.tls {
            tls.close_notify();
            tls.flush_alert(&self.stream);
        }
        // An HTTP/2 client keeps sending (WINDOW_UPDATE, PING) while it
        // reads: closing with those unread would reset the connection and
        // could destroy responses it has not read yet.
        let unread = self.buffered() > 0 || reason == CloseReason::Error || self.is_h2();
        if !unread || self.stream.shutdown(Shutdown::Write).is_err() {
            return false;
        }
        self.reading = Reading::Lingering(reason);
        let io = self.io();
        io.rstart = 0;
        io.rend = 0;
        self.readable.set();
        self.deadline = now
            + if self.is_h2() {
                H2_LINGER_TIMEOUT
            } else {
                LINGER_TIMEOUT
            };
        true
    }

    fn prepare_out(&mut self, pool: &mut BufPool) {
        let out = &mut self.io().out;
        if out.is_empty() && out.buf().capacity() == 0 {
            if let Some(buf) = pool.write.pop() {
                out.set_buf(buf);
            }
        }
    }

    /// Between requests, hand the buffers back to the shard's pool. A
    /// connection holding a partial head keeps only its bytes, in a buffer
    /// sized to them (see [`PARTIAL_MIN`]).
    fn park(&mut self, pool: &mut BufPool) {
        if !self.out_empty() {
            return;
        }
        if let Some(tls) = &mut self.tls {
            tls.release(&mut pool.cipher);
        }
        let Some(io) = self.io.as_deref_mut() else {
            return;
        };
        if io.h2.is_some() {
            if io.rstart == io.rend && !self.resume {
                h2::park(io, pool);
            }
            return;
        }
        match self.reading {
            Reading::Idle if io.rstart == io.rend => {}
            // What a lingering connection reads is dropped: it needs no
            // buffer between reads either.
            Reading::Lingering(_) => {}
            Reading::Head if !self.resume => {
                let held = io.rend - io.rstart;
                if io.rbuf.len() > held.next_power_of_two().max(PARTIAL_MIN) {
                    let mut small = Vec::with_capacity(held.next_power_of_two().max(PARTIAL_MIN));
                    small.extend_from_slice(&io.rbuf[io.rstart..io.rend]);
                    let full = std::mem::replace(&mut io.rbuf, small);
                    io.rstart = 0;
                    io.rend = held;
                    if pool.read.len() < POOL_MAX {
                        pool.read.push(full);
                    }
                    let out = io.out.take_buf();
                    if out.capacity() > 0
                        && out.capacity() <= POOLED_WRITE_MAX
                        && pool.write.len() < POOL_MAX
                    {
                        pool.write.push(out);
                    }
                }
                return;
            }
            _ => return,
        }
        let Some(mut io) = self.io.take() else {
            return;
        };
        io.rstart = 0;
        io.rend = 0;
        // A buffer grown by a large multipart answer is not worth keeping.
        if io.out.buf().capacity() > POOLED_WRITE_MAX {
            drop(io.out.take_buf());
        }
        if pool.io.len() < POOL_MAX {
            pool.io.push(io);
        }
    }
}

impl ConnIo {
    #[cold]
    #[inline(never)]
    fn boxed() -> Box<ConnIo> {
        Box::new(ConnIo {
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            discard: 0,
            chunked: chunked::Decoder::new(0),
            out: Output::default(),
            answered_at: Instant::now(),
            head_at: Instant::now(),
            unflushed: 0,
            h2: None,
        })
    }

    fn queued(&mut self, now: Instant) {
        if self.unflushed == 0 {
            self.answered_at = now;
        }
        self.unflushed += 1;
    }
}

#[cfg(test)]
mod tests {
    /// An idle keep-alive connection is its `Conn` in the slab plus a
    /// timer-wheel entry; issue 11 budgets 128 bytes for all of it, so the
    /// always-present part stays small (buffers and output are boxed).
    #[test]
    fn idle_connection_state_fits_the_budget() {
        let size = std::mem::size_of::<super::Conn>();
        eprintln!("size_of::<Conn>() = {size}");
        assert!(size <= 88, "Conn is {size} bytes");
    }

    #[test]
    fn packed_peer_gives_back_the_address() {
        for addr in [
            "192.0.2.7:40000",
            "[2001:db8::1]:443",
            "[fe80::1%3]:8080",
            "0.0.0.0:0",
        ] {
            let a: std::net::SocketAddr = addr.parse().unwrap();
            assert_eq!(super::Peer::new(Some(a)).get(), Some(a), "{addr}");
        }
        assert_eq!(super::Peer::new(None).get(), None);
    }
}
