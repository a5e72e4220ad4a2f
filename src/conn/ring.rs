//! A connection driven by io_uring completions (`--io uring`): the
//! shard's multishot receive pushes bytes into the read buffer
//! ([`Conn::push`]) instead of `fill` calling `recv`, and the owned output
//! is lent to a ring send ([`Conn::lend`]) instead of being written. The
//! connection only keeps flags saying what it wants of the ring; the shard
//! (`shard/ring.rs`) does it after each event and at the end of the turn.
//!
//! Pieces that do not fit one lent slice (bodies by reference, large
//! files) are still written with syscalls; a write that would block waits
//! for a one-shot `EPOLLOUT` poll on the ring. Nothing is ever written
//! while bytes are lent, so the order on the wire is the queue's.
//!
//! Over TLS the pushed bytes are ciphertext, queued in the session
//! ([`TlsConn::push`](super::tls::TlsConn::push)) for `fill` to decrypt;
//! owned answers are encrypted and the session's records lent, while
//! bodies by reference and files are encrypted and written by syscall,
//! as on epoll.

use std::io;

use super::env::{BufPool, ConnConfig, ShardEnv};
use super::{Conn, Fill, Readable, Reading, Step};
use crate::io::output::{Flush, WriteError};
use crate::metrics::CloseReason;
use crate::sys::{Lent, SendId};

/// Driven by completions (set once, at accept).
const COMPLETIONS: u16 = 1;
/// A multishot receive is live (from arming until its last completion).
const ARMED: u16 = 1 << 1;
/// Its cancellation was asked for (back-pressure, or done reading).
const CANCELLING: u16 = 1 << 2;
/// Bytes were pushed since `fill` last looked.
const PUSHED: u16 = 1 << 3;
/// The receive saw end of file.
const EOF: u16 = 1 << 4;
/// The receive failed (reset, …).
const FAILED: u16 = 1 << 5;
/// The output wants a ring send (not yet listed by the shard).
const SEND_WANTED: u16 = 1 << 6;
/// The shard listed it for this turn's sends.
const SEND_LISTED: u16 = 1 << 7;
/// A syscall write would block: wait for `EPOLLOUT`.
const POLLOUT_WANTED: u16 = 1 << 8;
/// A one-shot `EPOLLOUT` poll is armed.
const POLLOUT_ARMED: u16 = 1 << 9;

/// What a connection driven by completions has live on the ring and
/// wants of it at the end of an event: each transition is a method, the
/// bits stay here. Empty on readiness.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct RingState(u16);

impl RingState {
    /// Driven by completions from now on; a write that blocked waits for
    /// `EPOLLOUT` on the ring.
    fn driven(write_blocked: bool) -> RingState {
        RingState(COMPLETIONS | if write_blocked { POLLOUT_WANTED } else { 0 })
    }

    #[inline]
    pub(super) fn completions(self) -> bool {
        self.0 & COMPLETIONS != 0
    }

    fn set(&mut self, bits: u16) {
        self.0 |= bits;
    }

    fn clear(&mut self, bits: u16) {
        self.0 &= !bits;
    }

    fn has(self, bits: u16) -> bool {
        self.0 & bits != 0
    }

    /// Whether bytes were pushed since the last look (and forget them).
    fn take_pushed(&mut self) -> bool {
        let pushed = self.has(PUSHED);
        self.clear(PUSHED);
        pushed
    }

    /// How the receive ended, if it did (`Drained` while it goes on).
    fn recv_end(self) -> io::Result<Fill> {
        if self.has(FAILED) {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if self.has(EOF) {
            return Ok(Fill::Eof);
        }
        Ok(Fill::Drained)
    }

    /// A send is wanted or listed for this turn.
    fn send_pending(self) -> bool {
        self.has(SEND_WANTED | SEND_LISTED)
    }

    /// The receive is live and not being cancelled.
    fn recv_live(self) -> bool {
        self.0 & (ARMED | CANCELLING) == ARMED
    }

    /// What to ask of the ring now, given whether the connection reads
    /// on; the state moves as if the shard did it (it must).
    fn wants(&mut self, reading: bool) -> RingWants {
        let mut wants = RingWants::default();
        let reading = reading && !self.has(EOF | FAILED);
        if reading && !self.has(ARMED) {
            self.set(ARMED);
            wants.arm_recv = true;
        } else if !reading && self.recv_live() {
            self.set(CANCELLING);
            wants.cancel_recv = true;
        }
        if self.has(SEND_WANTED) {
            self.clear(SEND_WANTED);
            self.set(SEND_LISTED);
            wants.send = true;
        }
        if self.has(POLLOUT_WANTED) {
            self.clear(POLLOUT_WANTED);
            if !self.has(POLLOUT_ARMED) {
                self.set(POLLOUT_ARMED);
                wants.pollout = true;
            }
        }
        wants
    }
}

/// What a connection wants of the ring after an event.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingWants {
    /// Arm a multishot receive.
    pub arm_recv: bool,
    /// Cancel the receive (its buffer is full, or it reads no more).
    pub cancel_recv: bool,
    /// List the connection for this turn's sends.
    pub send: bool,
    /// Arm a one-shot `EPOLLOUT` poll.
    pub pollout: bool,
}

/// What to cancel of a connection driven by completions that is closing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingLeftovers {
    pub recv: bool,
    pub send: Option<SendId>,
    pub pollout: bool,
}

impl Conn {
    /// Drive this connection by completions from now on (after its first
    /// event, answered by syscalls at accept: a cleartext connection
    /// without PROXY header on a ring that has them). A write that blocked
    /// then waits for `EPOLLOUT` on the ring.
    pub fn use_completions(&mut self) {
        self.ring = RingState::driven(self.write_blocked);
    }

    /// Driven by completions.
    #[inline]
    pub fn completions(&self) -> bool {
        self.ring.completions()
    }

    /// Bytes of its multishot receive: into the read buffer (taken from
    /// the pool if parked), dropped while lingering. A connection whose
    /// buffer is full gets its receive cancelled (see [`ring_wants`]);
    /// what completions bring until that lands is kept beyond the buffer's
    /// size, a remainder bounded by what the kernel had received when the
    /// receive was stopped.
    ///
    /// [`ring_wants`]: Self::ring_wants
    pub fn push(&mut self, bytes: &[u8], pool: &mut BufPool, cfg: &ConnConfig) {
        self.readable.set();
        self.ring.set(PUSHED);
        if matches!(self.reading, Reading::Lingering(_)) {
            return;
        }
        if let Some(tls) = self.tls.as_deref_mut() {
            tls.push(bytes, &mut pool.cipher);
            return;
        }
        let io = self
            .io
            .get_or_insert_with(|| pool.take_io(cfg.zero_copy))
            .as_mut();
        if io.rstart == io.rend {
            io.rstart = 0;
            io.rend = 0;
            if io.rbuf.len() > cfg.read_buf {
                // A remainder grew it; back to its size.
                io.rbuf.truncate(cfg.read_buf);
                io.rbuf.shrink_to_fit();
            }
        }
        if io.rbuf.len() < cfg.read_buf {
            // Parked without a buffer, or holding a partial head in a
            // small one: continue in a full-size buffer.
            let mut full = pool.read.pop().unwrap_or_else(|| vec![0; cfg.read_buf]);
            let held = io.rend - io.rstart;
            full[..held].copy_from_slice(&io.rbuf[io.rstart..io.rend]);
            io.rbuf = full;
            io.rstart = 0;
            io.rend = held;
        }
        if io.rbuf.len() - io.rend < bytes.len() && io.rstart > 0 {
            io.rbuf.copy_within(io.rstart..io.rend, 0);
            io.rend -= io.rstart;
            io.rstart = 0;
        }
        let end = io.rend + bytes.len();
        if end <= io.rbuf.len() {
            io.rbuf[io.rend..end].copy_from_slice(bytes);
        } else {
            io.rbuf.truncate(io.rend);
            io.rbuf.extend_from_slice(bytes);
        }
        io.rend = end;
    }

    /// The receive ended with `res`: 0 (end of file) or `-errno`.
    pub fn push_end(&mut self, res: i32) {
        self.readable.set();
        self.ring.set(if res == 0 { EOF } else { FAILED });
    }

    /// The receive posted its last completion (ended, or cancelled).
    pub fn recv_ended(&mut self) {
        self.ring.clear(ARMED | CANCELLING);
    }

    /// The one-shot `EPOLLOUT` poll fired (or ended).
    pub fn pollout_ended(&mut self) {
        self.ring.clear(POLLOUT_ARMED);
    }

    /// `fill` on this backend: what the pushes brought.
    pub(super) fn fill_pushed(&mut self) -> io::Result<Fill> {
        if self.ring.take_pushed() {
            return Ok(Fill::Data);
        }
        self.readable = Readable::No;
        self.recv_end()
    }

    /// Nothing pushed is left: how the receive ended (`Drained` while it
    /// goes on).
    pub(super) fn recv_end(&self) -> io::Result<Fill> {
        self.ring.recv_end()
    }

    /// `flush_out` on this backend: owned bytes are lent to a ring send
    /// at the end of the turn (answers queued until then go with them);
    /// anything else is written now, and waits for `EPOLLOUT` if the
    /// socket is full.
    pub(super) fn flush_ring(&mut self) -> Result<Flush, WriteError> {
        let io = self
            .io
            .as_deref_mut()
            .expect("connection I/O state taken before use");
        if let Some(tls) = self.tls.as_deref_mut() {
            if tls.lent().is_some() || self.ring.send_pending() {
                return Ok(Flush::Blocked);
            }
            if io.out.is_empty() || io.out.lendable() {
                // Owned answers (and handshake records): encrypted, then
                // the records are lent at the end of the turn.
                tls.encrypt(&mut io.out)?;
                if tls.wants_write() {
                    self.ring.set(SEND_WANTED);
                    return Ok(Flush::Blocked);
                }
                return Ok(if io.out.is_empty() {
                    Flush::Done
                } else {
                    Flush::Blocked
                });
            }
            // Bodies by reference and files: encrypted and written as on
            // epoll, a round of records per `writev`.
            let flushed = tls.flush(&mut io.out, &self.stream);
            if let Ok(Flush::Blocked) = flushed {
                self.ring.set(POLLOUT_WANTED);
            }
            return flushed;
        }
        if io.out.lent().is_some() || self.ring.send_pending() {
            return Ok(Flush::Blocked);
        }
        if io.out.lendable() {
            self.ring.set(SEND_WANTED);
            return Ok(Flush::Blocked);
        }
        let flushed = io.out.flush(&mut &self.stream);
        if let Ok(Flush::Blocked) = flushed {
            self.ring.set(POLLOUT_WANTED);
        }
        flushed
    }

    /// Write what is queued now if the socket takes it, before closing
    /// (a 408, a GOAWAY): best effort, as on epoll.
    pub(super) fn flush_now(&mut self) {
        if !self.completions() {
            let _ = self.flush_out();
            return;
        }
        if let Some(io) = self.io.as_deref_mut() {
            match self.tls.as_deref_mut() {
                Some(tls) if tls.lent().is_none() => {
                    let _ = tls.flush(&mut io.out, &self.stream);
                }
                None if io.out.lent().is_none() => {
                    let _ = io.out.flush(&mut &self.stream);
                }
                _ => {}
            }
        }
    }

    /// What the connection wants of the ring now; the flags are updated as
    /// if the shard did it (it must).
    pub fn ring_wants(&mut self, read_buf: usize) -> RingWants {
        let reading = match self.reading {
            Reading::Done(_) => false,
            Reading::Lingering(_) => true,
            _ => self.buffered() < read_buf && self.tls.as_ref().is_none_or(|t| !t.cipher_full()),
        };
        self.ring.wants(reading)
    }

    /// At the end of the turn: the owned output to send (none if it went
    /// meanwhile, or is no longer one slice: it is then written as on
    /// epoll at the next flush). Mark it lent with [`lent_as`].
    ///
    /// [`lent_as`]: Self::lent_as
    pub fn lend(&mut self, pool: &mut BufPool) -> Option<Lent> {
        self.ring.clear(SEND_WANTED | SEND_LISTED);
        if let Some(tls) = self.tls.as_deref_mut() {
            let buf = tls.lend(|| pool.write.pop().unwrap_or_default())?;
            let len = buf.len();
            return Some(Lent { buf, start: 0, len });
        }
        let io = self.io.as_deref_mut()?;
        if !io.out.lendable() {
            if !io.out.is_empty() {
                // No longer one slice: written by syscall next turn.
                self.write_blocked = false;
                self.resume = true;
            }
            return None;
        }
        let spare = pool.write.pop().unwrap_or_default();
        let (buf, start) = io.out.lend(spare);
        let len = buf.len() - start;
        Some(Lent { buf, start, len })
    }

    /// The lent bytes are with ring send `id`.
    pub fn lent_as(&mut self, id: SendId) {
        if let Some(tls) = self.tls.as_deref_mut() {
            tls.lent_as(id);
        } else if let Some(io) = self.io.as_deref_mut() {
            io.out.set_lent(id);
        }
    }

    /// A ring send ended: `res` bytes sent or `-errno`. The bytes come back
    /// to the output (what was not sent goes first); then the connection
    /// goes on as after a flush.
    pub fn on_sent(&mut self, res: i32, lent: Lent, env: &mut ShardEnv<'_>) -> Step {
        let Some(io) = self.io.as_deref_mut() else {
            return Step::Close(CloseReason::Error);
        };
        let sent = usize::try_from(res).unwrap_or(0);
        let spare = match self.tls.as_deref_mut() {
            Some(tls) => tls.give_back(lent.buf, sent.min(lent.len)),
            None => io.out.give_back(lent.buf, lent.start, sent.min(lent.len)),
        };
        env.pool.give_write(spare);
        if res <= 0 && lent.len > 0 {
            // EPIPE, ECONNRESET, or nothing taken: the peer is gone.
            return Step::Close(CloseReason::Error);
        }
        self.write_blocked = false;
        if self.out_empty() {
            self.flushed(env);
        }
        self.drive(env)
    }

    /// Closing: what is still live on the ring for it.
    pub fn ring_leftovers(&self) -> RingLeftovers {
        RingLeftovers {
            recv: self.ring.recv_live(),
            send: match &self.tls {
                Some(tls) => tls.lent(),
                None => self.io.as_ref().and_then(|io| io.out.lent()),
            },
            pollout: self.ring.has(POLLOUT_ARMED),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The flags a connection keeps of its ring operations, driven without
    //! a ring: each operation is asked for once, and each end is seen.
    use super::*;
    use crate::config::{Config, Settings};
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    /// A connection on a loopback socket, driven by completions, with the
    /// default settings.
    fn conn() -> (Conn, ConnConfig, TcpStream) {
        let cfg = config();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (stream, _) = listener.accept().expect("accept");
        let mut c = Conn::new(stream, None, Instant::now(), &cfg, None);
        c.use_completions();
        (c, cfg, client)
    }

    /// The default settings' connection config.
    fn config() -> ConnConfig {
        let settings = Settings {
            root: Some(".".into()),
            ..Settings::default()
        };
        ConnConfig::new(&Config::validate(settings, &[0]).expect("defaults"))
    }

    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n";

    /// `c` with I/O state and an owned answer queued, its send listed.
    fn listed(c: &mut Conn, cfg: &ConnConfig, pool: &mut BufPool) {
        c.io = Some(pool.take_io(false));
        c.io().out.buf().extend_from_slice(ANSWER);
        assert!(matches!(c.flush_ring(), Ok(Flush::Blocked)));
        assert!(c.ring_wants(cfg.read_buf).send);
    }

    #[test]
    fn a_receive_is_armed_once_and_cancelled_once() {
        let (mut c, cfg, _client) = conn();
        assert!(c.completions());
        assert!(!c.ring_leftovers().recv, "nothing armed yet");
        assert!(c.ring_wants(cfg.read_buf).arm_recv);
        assert!(
            c.ring_leftovers().recv,
            "an armed receive is left to cancel"
        );
        let again = c.ring_wants(cfg.read_buf);
        assert!(!again.arm_recv && !again.cancel_recv, "{again:?}");
        // The receive failed: reading stops, and the receive is cancelled
        // once.
        c.push_end(-libc::ECONNRESET);
        let stop = c.ring_wants(cfg.read_buf);
        assert!(stop.cancel_recv && !stop.arm_recv, "{stop:?}");
        assert!(!c.ring_leftovers().recv, "its cancellation is under way");
        assert!(!c.ring_wants(cfg.read_buf).cancel_recv, "cancelled once");
        c.recv_ended();
        let after = c.ring_wants(cfg.read_buf);
        assert!(!after.arm_recv && !after.cancel_recv, "{after:?}");
        assert!(!c.ring_leftovers().recv);
    }

    #[test]
    fn a_receive_ended_early_is_armed_again() {
        let (mut c, cfg, _client) = conn();
        assert!(c.ring_wants(cfg.read_buf).arm_recv);
        c.recv_ended();
        assert!(c.ring_wants(cfg.read_buf).arm_recv, "re-armed");
    }

    #[test]
    fn end_of_file_stops_reading() {
        let (mut c, cfg, _client) = conn();
        assert!(c.ring_wants(cfg.read_buf).arm_recv);
        c.push_end(0);
        assert!(c.ring_wants(cfg.read_buf).cancel_recv);
        assert!(matches!(c.fill_pushed(), Ok(Fill::Eof)));
    }

    #[test]
    fn pushed_bytes_are_data_once_then_the_receive_says_how_it_ended() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        assert!(matches!(c.fill_pushed(), Ok(Fill::Drained)));
        c.push(b"GET / HTTP/1.1\r\n", &mut pool, &cfg);
        assert!(matches!(c.fill_pushed(), Ok(Fill::Data)));
        assert!(matches!(c.fill_pushed(), Ok(Fill::Drained)));
        c.push(b"Host: x\r\n", &mut pool, &cfg);
        c.push_end(-libc::ECONNRESET);
        assert!(
            matches!(c.fill_pushed(), Ok(Fill::Data)),
            "bytes before the end"
        );
        let err = c.fill_pushed().err().expect("then the reset");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    }

    #[test]
    fn a_blocked_write_arms_one_pollout_until_it_fires() {
        let (mut c, cfg, _client) = conn();
        c.write_blocked = true;
        c.use_completions();
        assert!(c.ring_wants(cfg.read_buf).pollout);
        assert!(
            c.ring_leftovers().pollout,
            "an armed poll is left to cancel"
        );
        // Wanted again before it fired: still the one poll.
        c.ring.set(POLLOUT_WANTED);
        assert!(!c.ring_wants(cfg.read_buf).pollout);
        c.pollout_ended();
        assert!(!c.ring_leftovers().pollout);
        c.ring.set(POLLOUT_WANTED);
        assert!(c.ring_wants(cfg.read_buf).pollout, "armed again");
    }

    #[test]
    fn owned_output_is_listed_for_one_send_and_lent_at_the_end_of_the_turn() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        listed(&mut c, &cfg, &mut pool);
        // More output queued in the same turn goes with the listed send.
        c.io().out.buf().extend_from_slice(ANSWER);
        assert!(matches!(c.flush_ring(), Ok(Flush::Blocked)));
        assert!(!c.ring_wants(cfg.read_buf).send, "listed already");
        let lent = c.lend(&mut pool).expect("owned output to lend");
        assert_eq!(lent.len, 38, "both answers in the one send");
        assert!(!c.ring.send_pending());
    }

    /// The read buffer's bytes, as `fill` leaves them for the parser.
    fn buffered_bytes(c: &Conn) -> Vec<u8> {
        let io = c.io.as_deref().expect("io");
        io.rbuf[io.rstart..io.rend].to_vec()
    }

    #[test]
    fn a_push_into_a_parked_connection_takes_a_full_size_buffer() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        c.push(b"GET / HT", &mut pool, &cfg);
        let io = c.io.as_deref().expect("unparked");
        assert_eq!(io.rbuf.len(), cfg.read_buf);
        assert_eq!(buffered_bytes(&c), b"GET / HT");
    }

    #[test]
    fn a_partial_head_in_a_small_buffer_moves_to_a_full_size_one() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        c.push(b"", &mut pool, &cfg);
        // Parked holding a partial head: a small buffer, not at its start.
        let io = c.io.as_deref_mut().expect("io");
        io.rbuf = b"..GET / HT".to_vec();
        io.rstart = 2;
        io.rend = 10;
        c.push(b"TP/1.1\r\n", &mut pool, &cfg);
        let io = c.io.as_deref().expect("io");
        assert_eq!(io.rbuf.len(), cfg.read_buf);
        assert_eq!((io.rstart, io.rend), (0, 16));
        assert_eq!(buffered_bytes(&c), b"GET / HTTP/1.1\r\n");
    }

    #[test]
    fn bytes_that_do_not_fit_behind_a_consumed_prefix_move_it_down() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        c.push(b"x", &mut pool, &cfg);
        let n = cfg.read_buf;
        let io = c.io.as_deref_mut().expect("io");
        // 10 bytes parsed already, 5 bytes of room left at the end.
        io.rbuf[10..n - 5].fill(b'a');
        io.rstart = 10;
        io.rend = n - 5;
        c.push(&[b'b'; 8], &mut pool, &cfg);
        let io = c.io.as_deref().expect("io");
        assert_eq!(io.rbuf.len(), n, "moved down, not grown");
        assert_eq!((io.rstart, io.rend), (0, n - 15 + 8));
        let got = buffered_bytes(&c);
        assert!(got[..n - 15].iter().all(|&b| b == b'a'));
        assert_eq!(got[n - 15..], [b'b'; 8]);
    }

    #[test]
    fn a_remainder_grows_the_buffer_and_it_shrinks_back_once_read() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        let n = cfg.read_buf;
        c.push(&vec![b'a'; n - 4], &mut pool, &cfg);
        // What the receive brings until its cancellation lands is kept.
        c.push(&[b'b'; 10], &mut pool, &cfg);
        assert_eq!(c.io.as_deref().expect("io").rbuf.len(), n + 6);
        let got = buffered_bytes(&c);
        assert_eq!(got.len(), n + 6);
        assert_eq!(got[n - 4..], [b'b'; 10]);
        // All parsed: the next push starts at the front of a buffer of its
        // size again.
        let io = c.io.as_deref_mut().expect("io");
        io.rstart = io.rend;
        c.push(b"GET", &mut pool, &cfg);
        let io = c.io.as_deref().expect("io");
        assert_eq!(io.rbuf.len(), n);
        assert_eq!(io.rbuf.capacity(), n, "its memory given back");
        assert_eq!((io.rstart, io.rend), (0, 3));
        assert_eq!(buffered_bytes(&c), b"GET");
    }

    #[test]
    fn bytes_that_fit_stay_where_they_are() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        c.push(b"x", &mut pool, &cfg);
        let n = cfg.read_buf;
        let io = c.io.as_deref_mut().expect("io");
        let at = io.rbuf.as_ptr();
        io.rstart = 10;
        io.rend = n - 8;
        // Exactly the room left: no move, no new buffer.
        c.push(&[b'b'; 8], &mut pool, &cfg);
        let io = c.io.as_deref().expect("io");
        assert_eq!((io.rstart, io.rend), (10, n));
        assert_eq!(io.rbuf.as_ptr(), at, "the same buffer");
        assert_eq!(io.rbuf[n - 8..], [b'b'; 8]);
    }

    #[test]
    fn a_full_read_buffer_stops_the_receive_and_lingering_reads_on() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        assert!(c.ring_wants(cfg.read_buf).arm_recv);
        c.push(&vec![b'a'; cfg.read_buf - 1], &mut pool, &cfg);
        let w = c.ring_wants(cfg.read_buf);
        assert!(!w.arm_recv && !w.cancel_recv, "room for one byte: {w:?}");
        c.push(b"a", &mut pool, &cfg);
        assert!(c.ring_wants(cfg.read_buf).cancel_recv, "full: stop");
        c.recv_ended();
        assert!(!c.ring_wants(cfg.read_buf).arm_recv, "still full");
        // Lingering before a close: read (and drop) whatever comes.
        c.reading = Reading::Lingering(CloseReason::Error);
        assert!(c.ring_wants(cfg.read_buf).arm_recv);
        // Done: nothing more is read, though the buffer has room again.
        let io = c.io.as_deref_mut().expect("io");
        io.rstart = io.rend;
        c.reading = Reading::Done(CloseReason::Error);
        assert!(c.ring_wants(cfg.read_buf).cancel_recv);
    }

    #[test]
    fn lent_output_is_what_the_ring_send_holds() {
        let (mut c, _cfg, _client) = conn();
        let mut pool = BufPool::default();
        c.io = Some(pool.take_io(false));
        c.io().out.buf().extend_from_slice(b"0123456789");
        let lent = c.lend(&mut pool).expect("owned bytes");
        assert_eq!(&lent.buf[lent.start..lent.start + lent.len], b"0123456789");
        assert_eq!(c.ring_leftovers().send, None, "not with a send yet");
        c.lent_as(SendId::for_tests(77));
        assert_eq!(c.ring_leftovers().send, Some(SendId::for_tests(77)));
        // While lent, a flush waits for the send.
        assert!(matches!(c.flush_ring(), Ok(Flush::Blocked)));
        assert!(!c.ring.has(SEND_WANTED));
        assert!(c.lend(&mut pool).is_none(), "one send at a time");
    }

    #[test]
    fn nothing_blocked_asks_for_no_pollout() {
        let (mut c, cfg, _client) = conn();
        for _ in 0..2 {
            let w = c.ring_wants(cfg.read_buf);
            assert!(!w.pollout && !w.send, "{w:?}");
        }
        assert!(!c.ring_leftovers().pollout);
    }

    /// A send listed while the output was one owned slice, which a body by
    /// reference then joined: nothing is lent, and the connection is
    /// resumed so a `writev` sends it next turn (else it waits for nothing).
    #[test]
    fn output_no_longer_one_slice_is_written_next_turn() {
        let (mut c, cfg, _client) = conn();
        let mut pool = BufPool::default();
        listed(&mut c, &cfg, &mut pool);
        let snap = std::sync::Arc::new(crate::cache::Snapshot::empty());
        assert!(c.io().out.push_mem(&snap, 0, 4096));
        c.write_blocked = true;
        assert!(c.lend(&mut pool).is_none(), "not one slice");
        assert!(c.wants_resume() && !c.write_blocked);
        assert!(c.ring_leftovers().send.is_none());
    }

    /// What the client's socket holds within 100 ms (nothing: empty).
    fn arrived(client: &mut TcpStream) -> Vec<u8> {
        client
            .set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .expect("timeout");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = client.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    /// The 408 written just before a close goes now, but never past bytes
    /// a ring send still holds: they would reach the client after it.
    #[test]
    fn a_last_write_before_a_close_waits_for_the_bytes_a_send_holds() {
        let (mut c, _cfg, mut client) = conn();
        let mut pool = BufPool::default();
        c.io = Some(pool.take_io(false));
        c.io().out.buf().extend_from_slice(b"first");
        let lent = c.lend(&mut pool).expect("owned bytes");
        c.lent_as(SendId::for_tests(1));
        c.io().out.buf().extend_from_slice(b"408");
        c.flush_now();
        assert_eq!(arrived(&mut client), b"", "written past the lent bytes");
        // The send is done: the last answer now goes at once.
        let spare = c.io().out.give_back(lent.buf, lent.start, lent.len);
        pool.give_write(spare);
        c.flush_now();
        assert_eq!(arrived(&mut client), b"408");
    }

    /// The same over TLS: the records of a last answer go now when no ring
    /// send holds earlier ones, and wait when one does.
    #[test]
    fn a_last_tls_write_before_a_close_waits_for_the_records_a_send_holds() {
        use rustls::ClientConnection;
        let (server, sock, mut client, mut client_sock) = crate::conn::tls::tests::pair();
        let cfg = config();
        let mut c = Conn::new(sock, None, Instant::now(), &cfg, Some(Box::new(server)));
        c.use_completions();
        let mut pool = BufPool::default();
        c.io = Some(pool.take_io(false));
        // The plaintext in records the client reads.
        let plain = |client: &mut ClientConnection, wire: &[u8]| {
            let mut rest = wire;
            let mut got = Vec::new();
            while !rest.is_empty() {
                client.read_tls(&mut rest).expect("records");
                let state = client.process_new_packets().expect("valid records");
                let mut chunk = vec![0; state.plaintext_bytes_to_read()];
                client.reader().read_exact(&mut chunk).expect("plaintext");
                got.extend_from_slice(&chunk);
            }
            got
        };
        // The session tickets the handshake left, first.
        let tickets = arrived(&mut client_sock);
        assert_eq!(plain(&mut client, &tickets), b"");

        c.io().out.buf().extend_from_slice(b"408 alone");
        c.flush_now();
        let wire = arrived(&mut client_sock);
        assert_eq!(plain(&mut client, &wire), b"408 alone", "not written");

        c.io().out.buf().extend_from_slice(b"first");
        assert!(matches!(c.flush_ring(), Ok(Flush::Blocked)));
        let _lent = c.lend(&mut pool).expect("records to lend");
        c.lent_as(SendId::for_tests(2));
        c.io().out.buf().extend_from_slice(b"408");
        c.flush_now();
        assert_eq!(
            arrived(&mut client_sock),
            b"",
            "written past the lent records"
        );
    }
}
