//! The io_uring floor: the epoll floor's fixed-response responder
//! ([`crate::floor`]: same bytes, same one-thread shape, same request
//! counting) on one io_uring ring, driven the way a completion server is
//! meant to be. One multishot accept on the listener; one multishot receive
//! per connection with kernel-picked buffers from a provided buffer ring (an
//! idle connection holds no buffer); every response of a loop turn queued
//! as a send and all of them submitted, and the next completions reaped,
//! by one `io_uring_enter` per turn. The ring is `SINGLE_ISSUER` +
//! `DEFER_TASKRUN` where the kernel has them (else `COOP_TASKRUN`, else
//! plain), so completions run only inside that one enter.
//!
//! The responses are sent from four static buffers (keep-alive and close,
//! with the 100-byte body repeated [`BATCH`] + 1 times, with the 100 KiB one
//! twice): a connection owes a byte count, and a send is a slice of the
//! repeated response, so nothing is allocated per request and a short send
//! resumes at its phase.
//!
//! A connection from the TLS listener ([`crate::floor_tls`]) instead owns
//! its ciphertext: what one receive's requests produce is sent from the
//! connection's buffer, one send at a time, as a TLS server on a ring must.
//!
//! All of this module's `unsafe` is here: pushing entries that point at
//! those buffers, and the provided buffer ring shared with the kernel.
//!
//! Run as `shardbench floor --io uring --listen ADDR`.

use std::alloc::{self, Layout};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Submitter};

use crate::floor::{self, Scan};
use crate::floor_tls::{self, Session};

/// Responses one send carries at most (a pipelined burst of 16 is one).
const BATCH: usize = 64;
/// Provided receive buffers, shared by every connection (a power of two).
const BUFFERS: u16 = 1024;
/// Bytes per provided buffer: a 16-deep pipelined burst of wrk's requests
/// fits.
const BUFFER_BYTES: usize = 4096;
/// The buffer group id of the ring.
const GROUP: u16 = 0;
/// Submission queue entries; completions get four times as many, so that
/// c=10000 connections each completing a receive and a send in one turn
/// rarely overflow (the kernel keeps overflowed ones, at a cost).
const SQ_ENTRIES: u32 = 4096;

/// What an operation's `user_data` says it was (its low byte; the fd
/// above). The fd cannot be stale: a connection's fd is closed only after
/// its receive has ended and no send is in flight, so no later completion
/// names it except the close's own (ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Accept = 1,
    Recv = 2,
    Send = 3,
    Cancel = 4,
    Close = 5,
}

fn token(op: Op, fd: RawFd) -> u64 {
    ((fd as u64) << 8) | op as u64
}

fn untoken(data: u64) -> (Option<Op>, RawFd) {
    let op = match data & 0xff {
        1 => Some(Op::Accept),
        2 => Some(Op::Recv),
        3 => Some(Op::Send),
        4 => Some(Op::Cancel),
        5 => Some(Op::Close),
        _ => None,
    };
    (op, (data >> 8) as RawFd)
}

/// One connection, indexed by its fd.
#[derive(Debug, Default)]
struct Conn {
    open: bool,
    scan: Scan,
    /// Response bytes owed and not yet in a send: keep-alive responses
    /// (sent first, in order), then close ones.
    owed: [usize; 2],
    /// Response bytes of each kind the kernel took so far (their phase).
    sent: [usize; 2],
    /// Bytes of the send in flight (0: none), and its kind.
    in_flight: usize,
    in_flight_kind: usize,
    /// The multishot receive is still armed.
    recv_live: bool,
    /// A cancel of the receive was submitted.
    cancelling: bool,
    /// The peer closed, or an operation failed: close once settled.
    done: bool,
    /// A connection from the TLS listener: its session and ciphertext.
    tls: Option<Box<TlsOut>>,
}

/// A TLS connection's ciphertext: what waits, and what a send has.
#[derive(Debug)]
struct TlsOut {
    session: Session,
    /// Records (and handshake flights) not yet in a send.
    pending: Vec<u8>,
    /// The send in flight's bytes: untouched until it completes.
    sending: Vec<u8>,
}

impl TlsOut {
    fn new(session: Session) -> Box<TlsOut> {
        Box::new(TlsOut {
            session,
            pending: Vec::new(),
            sending: Vec::new(),
        })
    }
}

/// The provided buffer ring: `BUFFERS` entries in page-aligned memory the
/// kernel reads, and the buffers they point at.
struct BufRing {
    ring: *mut types::BufRingEntry,
    layout: Layout,
    bufs: Box<[u8]>,
    /// Our tail: entries up to here are (or will be, at [`publish`]) the
    /// kernel's.
    ///
    /// [`publish`]: BufRing::publish
    tail: u16,
}

impl BufRing {
    fn new(submitter: &Submitter<'_>) -> io::Result<BufRing> {
        let bytes = BUFFERS as usize * std::mem::size_of::<types::BufRingEntry>();
        let layout = Layout::from_size_align(bytes, 4096).map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let ring = unsafe { alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if ring.is_null() {
            return Err(io::Error::other("out of memory for the buffer ring"));
        }
        let mut r = BufRing {
            ring,
            layout,
            bufs: vec![0u8; BUFFERS as usize * BUFFER_BYTES].into_boxed_slice(),
            tail: 0,
        };
        for bid in 0..BUFFERS {
            r.recycle(bid);
        }
        r.publish();
        // SAFETY: `ring` holds BUFFERS entries, is page-aligned and lives
        // until drop, which runs after the ring that registered it (the
        // caller drops the IoUring first, which unregisters it).
        unsafe { submitter.register_buf_ring_with_flags(ring as u64, BUFFERS, GROUP, 0) }?;
        Ok(r)
    }

    /// Hand buffer `bid` back to the kernel (seen at the next publish).
    fn recycle(&mut self, bid: u16) {
        let slot = (self.tail & (BUFFERS - 1)) as usize;
        let addr = self.bufs[bid as usize * BUFFER_BYTES..].as_ptr() as u64;
        // SAFETY: `slot` < BUFFERS, inside the allocation; the kernel reads
        // only entries below the published tail, and this one is above it.
        let entry = unsafe { &mut *self.ring.add(slot) };
        entry.set_addr(addr);
        entry.set_len(BUFFER_BYTES as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publish the tail: every recycled entry is the kernel's from here.
    fn publish(&self) {
        // SAFETY: the tail field overlays the first entry's reserved
        // field, a u16 the kernel reads atomically; the release store
        // orders the entries written before it.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * BUFFER_BYTES;
        &self.bufs[start..start + len.min(BUFFER_BYTES)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.ring.cast(), self.layout) };
    }
}

/// Responses of kind `kind` ([`Scan::kind`]) one send carries at most: a
/// 100 KiB one is a send of its own.
fn batch(kind: usize) -> usize {
    if kind >= 2 {
        1
    } else {
        BATCH
    }
}

/// The ring with the flags this kernel accepts, best first; the choice is
/// printed once.
fn ring() -> io::Result<IoUring> {
    let cq = SQ_ENTRIES * 4;
    if let Ok(r) = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(cq)
        .build(SQ_ENTRIES)
    {
        eprintln!("floor-uring: SINGLE_ISSUER + DEFER_TASKRUN");
        return Ok(r);
    }
    if let Ok(r) = IoUring::builder()
        .setup_coop_taskrun()
        .setup_cqsize(cq)
        .build(SQ_ENTRIES)
    {
        eprintln!("floor-uring: COOP_TASKRUN");
        return Ok(r);
    }
    eprintln!("floor-uring: plain ring");
    IoUring::builder().setup_cqsize(cq).build(SQ_ENTRIES)
}

/// Whether this kernel lets this process set up an io_uring with a
/// provided buffer ring (seccomp in containers often says no).
pub fn available() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| format!("io_uring_setup: {e}"))?;
    let bufs = BufRing::new(&ring.submitter()).map_err(|e| format!("buffer ring: {e}"))?;
    let _ = ring.submitter().unregister_buf_ring(GROUP);
    drop(ring);
    drop(bufs);
    Ok(())
}

/// The submission side of one turn: queue an entry, submitting early only
/// when the queue is full.
struct Queue<'a> {
    sq: io_uring::SubmissionQueue<'a>,
    submitter: Submitter<'a>,
}

impl Queue<'_> {
    /// Queue `entry`.
    ///
    /// # Safety
    ///
    /// Every buffer `entry` points at stays valid until its completion.
    unsafe fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: as the caller promised.
            if unsafe { self.sq.push(entry) }.is_ok() {
                return Ok(());
            }
            self.sq.sync();
            self.submitter.submit()?;
            self.sq.sync();
        }
    }
}

/// The responder's state besides the ring.
struct Floor {
    conns: Vec<Conn>,
    /// The epoll floor's four responses ([`Scan::kind`]), each repeated
    /// `batch(kind) + 1` times: a send of up to `batch(kind)` responses can
    /// start at any phase of it.
    responses: [Vec<u8>; 4],
    /// One response's length, by kind.
    one: [usize; 4],
    /// The four responses once each (what a TLS session writes).
    singles: [Vec<u8>; 4],
    /// The TLS listener and its configuration.
    tls: Option<(RawFd, Arc<rustls::ServerConfig>)>,
}

impl Floor {
    fn conn(&mut self, fd: RawFd) -> &mut Conn {
        let i = fd as usize;
        if self.conns.len() <= i {
            self.conns.resize_with(i + 1, Conn::default);
        }
        &mut self.conns[i]
    }

    /// Move connection `fd` on: send what it owes, or close it when it is
    /// finished (its receive cancelled first, so that no completion can
    /// name the fd once it is closed and reused).
    fn settle(&mut self, q: &mut Queue<'_>, fd: RawFd) -> io::Result<()> {
        let c = &mut self.conns[fd as usize];
        if c.in_flight > 0 {
            return Ok(());
        }
        if let Some(t) = c.tls.as_mut().filter(|t| !t.pending.is_empty() && !c.done) {
            t.sending.clear();
            std::mem::swap(&mut t.sending, &mut t.pending);
            c.in_flight = t.sending.len();
            let e = opcode::Send::new(types::Fd(fd), t.sending.as_ptr(), c.in_flight as u32)
                .flags(libc::MSG_NOSIGNAL)
                .build()
                .user_data(token(Op::Send, fd));
            // SAFETY: `sending` is boxed with the connection and neither
            // touched nor dropped while the send is in flight (`in_flight`
            // > 0 keeps both this function and the reset below away).
            return unsafe { q.push(&e) };
        }
        let kind = usize::from(c.owed[0] == 0);
        if c.owed[kind] > 0 && !c.done {
            let response = 2 * usize::from(c.scan.large) + kind;
            let one = self.one[response];
            let phase = c.sent[kind] % one;
            let len = c.owed[kind].min(batch(response) * one);
            c.owed[kind] -= len;
            c.in_flight = len;
            c.in_flight_kind = kind;
            let ptr = self.responses[response].as_ptr().wrapping_add(phase);
            let e = opcode::Send::new(types::Fd(fd), ptr, len as u32)
                .flags(libc::MSG_NOSIGNAL)
                .build()
                .user_data(token(Op::Send, fd));
            // SAFETY: the slice [phase, phase + len) lies in a response
            // buffer (phase < one, len ≤ batch × one, the buffer is
            // (batch + 1) × one long) that lives as long as the ring.
            return unsafe { q.push(&e) };
        }
        // Done: the peer is gone, or the close response is all sent
        // (over TLS: a close was asked for and nothing is left to send).
        let finished =
            c.done || (c.sent[1] > 0 && c.owed[1] == 0) || (c.tls.is_some() && c.scan.close);
        if !finished {
            return Ok(());
        }
        if c.recv_live {
            if !c.cancelling {
                c.cancelling = true;
                let e = opcode::AsyncCancel::new(token(Op::Recv, fd))
                    .build()
                    .user_data(token(Op::Cancel, fd));
                // SAFETY: a cancel points at no memory.
                unsafe { q.push(&e) }?;
            }
            return Ok(());
        }
        *c = Conn::default();
        let e = opcode::Close::new(types::Fd(fd))
            .build()
            .user_data(token(Op::Close, fd));
        // SAFETY: a close points at no memory.
        unsafe { q.push(&e) }
    }

    fn arm_recv(q: &mut Queue<'_>, fd: RawFd) -> io::Result<()> {
        let e = opcode::RecvMulti::new(types::Fd(fd), GROUP)
            .build()
            .user_data(token(Op::Recv, fd));
        // SAFETY: the kernel picks the buffer from the registered ring,
        // which outlives the ring's operations.
        unsafe { q.push(&e) }
    }

    fn arm_accept(q: &mut Queue<'_>, lfd: RawFd) -> io::Result<()> {
        let e = opcode::AcceptMulti::new(types::Fd(lfd))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(token(Op::Accept, lfd));
        // SAFETY: no address is asked for: the entry points at no memory.
        unsafe { q.push(&e) }
    }

    /// Handle one completion.
    fn complete(
        &mut self,
        q: &mut Queue<'_>,
        bufs: &mut BufRing,
        cqe: &cqueue::Entry,
    ) -> io::Result<()> {
        let (op, fd) = untoken(cqe.user_data());
        let (res, flags) = (cqe.result(), cqe.flags());
        let more = cqueue::more(flags);
        match op {
            Some(Op::Accept) => {
                // The token's fd is the listener's.
                let tls = match &self.tls {
                    Some((tls_lfd, config)) if *tls_lfd == fd => Some(Session::new(config)),
                    _ => None,
                };
                match (res, tls.transpose()) {
                    (res, Ok(tls)) if res >= 0 => {
                        *self.conn(res) = Conn {
                            open: true,
                            recv_live: true,
                            tls: tls.map(TlsOut::new),
                            ..Conn::default()
                        };
                        Self::arm_recv(q, res)?;
                    }
                    // No session for it: close it unserved.
                    (res, Err(_)) if res >= 0 => {
                        let e = opcode::Close::new(types::Fd(res))
                            .build()
                            .user_data(token(Op::Close, res));
                        // SAFETY: a close points at no memory.
                        unsafe { q.push(&e) }?;
                    }
                    _ => {}
                }
                // EMFILE and friends end the multishot: arm it again.
                if !more {
                    Self::arm_accept(q, fd)?;
                }
            }
            Some(Op::Recv) => {
                // A buffer comes back whatever the connection's state.
                let mut requests = 0;
                if let Some(bid) = cqueue::buffer_select(flags) {
                    let n = usize::try_from(res).unwrap_or(0);
                    let c = &mut self.conns[fd as usize];
                    let bytes = bufs.buffer(bid, n);
                    match &mut c.tls {
                        Some(t) => {
                            let answered = t.session.exchange(
                                bytes,
                                &mut c.scan,
                                &self.singles,
                                &mut t.pending,
                            );
                            c.done |= answered.is_err();
                        }
                        None => requests = c.scan.feed(bytes),
                    }
                    bufs.recycle(bid);
                }
                let c = &mut self.conns[fd as usize];
                if !c.open {
                    return Ok(());
                }
                if !more {
                    c.recv_live = false;
                }
                match res {
                    n if n > 0 => {
                        let kind = usize::from(c.scan.close);
                        c.owed[kind] += requests * self.one[c.scan.kind()];
                        // Out of buffers or ended early: receive again.
                        if !more && !c.cancelling {
                            c.recv_live = true;
                            Self::arm_recv(q, fd)?;
                        }
                    }
                    e if e == -libc::ENOBUFS && !c.cancelling => {
                        c.recv_live = true;
                        Self::arm_recv(q, fd)?;
                    }
                    _ => c.done = !c.cancelling || c.done,
                }
                self.settle(q, fd)?;
            }
            Some(Op::Send) => {
                let c = &mut self.conns[fd as usize];
                if !c.open {
                    return Ok(());
                }
                let len = std::mem::take(&mut c.in_flight);
                let kind = c.in_flight_kind;
                if let Some(t) = &mut c.tls {
                    match usize::try_from(res) {
                        // A short send: the rest goes first next time.
                        Ok(n) if n < len => {
                            let mut rest = t.sending.split_off(n);
                            rest.append(&mut t.pending);
                            t.pending = rest;
                        }
                        Ok(_) => {}
                        Err(_) => c.done = true,
                    }
                    return self.settle(q, fd);
                }
                match usize::try_from(res) {
                    Ok(n) => {
                        c.sent[kind] += n;
                        // A short send: the rest is owed again, first.
                        c.owed[kind] += len - n.min(len);
                    }
                    Err(_) => c.done = true,
                }
                self.settle(q, fd)?;
            }
            Some(Op::Cancel) | Some(Op::Close) | None => {}
        }
        Ok(())
    }
}

/// Serve forever on `addr`, and over TLS on `tls`'s (the caller pins the
/// process).
pub fn run(addr: SocketAddr, tls: Option<floor_tls::Listen>) -> io::Result<()> {
    let listener = floor::bind(addr)?;
    let mut lfds = vec![listener.as_raw_fd()];
    let tls = match tls {
        Some((addr, config)) => {
            let listener = floor::bind(addr)?;
            lfds.push(listener.as_raw_fd());
            Some((listener, config))
        }
        None => None,
    };
    let responses = floor::responses();
    let mut floor = Floor {
        conns: Vec::new(),
        one: responses.each_ref().map(Vec::len),
        responses: std::array::from_fn(|kind| responses[kind].repeat(batch(kind) + 1)),
        singles: responses,
        tls: tls
            .as_ref()
            .map(|(l, config)| (l.as_raw_fd(), Arc::clone(config))),
    };
    let mut ring = ring()?;
    let mut bufs = BufRing::new(&ring.submitter())?;
    let served = serve(&mut ring, &mut bufs, &mut floor, &lfds);
    // The ring first: it unregisters the buffer ring and ends every
    // operation before the memory they point at (the buffers, `floor`'s
    // responses) is freed.
    drop(ring);
    drop(bufs);
    served
}

/// The loop: one `io_uring_enter` per turn, then every completion it
/// reaped.
fn serve(
    ring: &mut IoUring,
    bufs: &mut BufRing,
    floor: &mut Floor,
    lfds: &[RawFd],
) -> io::Result<()> {
    {
        let (submitter, sq, _) = ring.split();
        let mut q = Queue { sq, submitter };
        for &lfd in lfds {
            Floor::arm_accept(&mut q, lfd)?;
        }
        q.sq.sync();
    }
    let mut cqes: Vec<cqueue::Entry> = Vec::with_capacity(SQ_ENTRIES as usize * 4);
    loop {
        bufs.publish();
        // The turn's one enter: submit every queued send and receive, and
        // wait for (and, with DEFER_TASKRUN, run) the next completions.
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        let (submitter, sq, mut cq) = ring.split();
        cqes.clear();
        cqes.extend(&mut cq);
        let mut q = Queue { sq, submitter };
        for cqe in &cqes {
            floor.complete(&mut q, bufs, cqe)?;
        }
        q.sq.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for op in [Op::Accept, Op::Recv, Op::Send, Op::Cancel, Op::Close] {
            assert_eq!(untoken(token(op, 70_001)), (Some(op), 70_001));
        }
        assert_eq!(untoken(0).0, None);
    }

    /// The uring floor answers like the epoll floor, byte for byte
    /// ([`floor::tests::answers_like_the_floor`]).
    #[test]
    fn serves_the_epoll_floors_bytes() {
        if let Err(why) = available() {
            crate::skip_test(&format!(
                "SKIP serves_the_epoll_floors_bytes: no io_uring here ({why})"
            ));
            return;
        }
        floor::tests::answers_like_the_floor(run);
    }

    /// And over TLS ([`floor_tls::tests::answers_over_tls`]).
    #[test]
    fn serves_the_floors_bytes_over_tls() {
        if let Err(why) = available() {
            crate::skip_test(&format!(
                "SKIP serves_the_floors_bytes_over_tls: no io_uring here ({why})"
            ));
            return;
        }
        floor_tls::tests::answers_over_tls(run);
    }
}
