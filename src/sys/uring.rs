//! io_uring as a shard's event source (`--io uring`): one ring per shard,
//! created by the shard's own thread.
//!
//! Two ways to drive an fd, both here behind safe calls:
//!
//! - **Readiness**: a multishot poll per fd stands where an edge-triggered
//!   epoll registration stands on the epoll backend (`add`, `remove`), and
//!   the shard reads and writes with syscalls (listeners, TLS and PROXY
//!   connections, large-file bodies).
//! - **Completions** (cleartext connections): a multishot receive into a
//!   provided buffer ring owned by the ring, so the kernel picks a buffer
//!   only when bytes arrive and an idle connection holds none
//!   ([`recv`](Ring::recv), [`Done::Recv`], [`received`](Ring::received),
//!   [`recycle`](Ring::recycle)); and sends of buffers lent to the ring
//!   until their completion ([`send`](Ring::send), [`Done::Sent`]): the
//!   ring owns a send's bytes while the kernel may read them, so nothing
//!   the shard does (closing the connection included) can free or move them.
//!
//! The shard's `wait` is the one `io_uring_enter` per loop turn: it submits
//! what the turn queued (receives and sends, polls for accepted
//! connections, cancellations for closed ones) and waits for completions
//! with the turn's timeout.

use std::alloc::{self, Layout};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use super::Events;

/// Set in an event's readiness when its multishot poll ended (the kernel
/// posted its last completion): the shard arms a new one if the fd is still
/// its. A bit epoll never reports (`EPOLLONESHOT` is a request flag).
pub const REARM: u32 = libc::EPOLLONESHOT as u32;

/// What a ring operation is for. An operation's `user_data` is
/// [`Op::user_data`] and a completion's is decoded once, by [`Op::of`]:
/// nothing else packs or reads its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// The ring's own operations, whose completions are not events: a
    /// cancellation, the self-check's no-op, the final cancel-all.
    Internal(Internal),
    /// A poll of the shard's `token` (a listener, the wake-up, a
    /// connection's readiness).
    Poll(u64),
    /// A connection's multishot receive; its token is a slab index below
    /// 2^30 (see `shard::slab`).
    Recv(u64),
    /// A send, from the ring's slab of sends.
    Send(SendId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Internal {
    Cancel = 0,
    SelfCheck = 1,
    CancelAll = 2,
}

/// A send in flight: its slot in the ring's slab of sends, and the slot's
/// generation, so a cancel for a send that already completed cannot reach
/// the next send in its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendId {
    slot: u32,
    gen: u32,
}

impl SendId {
    /// An id no ring gave, for tests that drive a connection without one.
    #[cfg(test)]
    pub fn for_tests(slot: u32) -> SendId {
        SendId { slot, gen: 0 }
    }
}

impl Op {
    /// `user_data` of the ring's own operations: the top of the range,
    /// which shard tokens leave free (a connection's generation stays below
    /// `u32::MAX`; the listeners' and the wake-up's tokens are above
    /// `INTERNAL + 16`).
    const INTERNAL: u64 = 0xFFFF_FFFF_0000_0000;
    /// The receive bit, and the send bit (a send's slot below it, its
    /// generation in the top half, kept below `u32::MAX`).
    const RECV: u64 = 1 << 31;
    const SEND: u64 = 1 << 30;

    fn user_data(self) -> u64 {
        match self {
            Op::Internal(i) => Op::INTERNAL + i as u64,
            Op::Poll(token) => token,
            Op::Recv(token) => {
                debug_assert!(token & (Op::RECV | Op::SEND) == 0 && token < Op::INTERNAL);
                token | Op::RECV
            }
            Op::Send(SendId { slot, gen }) => (u64::from(gen) << 32) | Op::SEND | u64::from(slot),
        }
    }

    fn of(user_data: u64) -> Op {
        match user_data {
            u if (Op::INTERNAL..Op::INTERNAL + 16).contains(&u) => {
                Op::Internal(match u - Op::INTERNAL {
                    1 => Internal::SelfCheck,
                    2 => Internal::CancelAll,
                    _ => Internal::Cancel,
                })
            }
            u if u < Op::INTERNAL && u & Op::RECV != 0 => Op::Recv(u & !Op::RECV),
            u if u < Op::INTERNAL && u & Op::SEND != 0 => Op::Send(SendId {
                slot: (u & (Op::SEND - 1)) as u32,
                gen: (u >> 32) as u32,
            }),
            u => Op::Poll(u),
        }
    }
}

/// Provided receive buffers shared by the shard's connections (a power of
/// two): the kernel takes one per receive completion.
const BUFFERS: u16 = 1024;
/// Bytes per provided buffer: a 16-deep pipelined burst of small requests
/// fits in one.
pub const BUFFER_BYTES: usize = 4096;
/// The provided buffer group of the ring.
const GROUP: u16 = 0;

/// Submission queue entries; a turn that queues more submits early.
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: a turn's readiness for many connections at
/// once (the kernel keeps what overflows, `IORING_FEAT_NODROP`).
const CQ_ENTRIES: u32 = 8192;

/// How the kernel runs the ring's completion work (chosen by measurement;
/// see docs/benchmarks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskRun {
    /// `IORING_SETUP_DEFER_TASKRUN`: only when the shard waits (kernel 6.1).
    Defer,
    /// `IORING_SETUP_COOP_TASKRUN`: at the next kernel entry, without
    /// interrupting the shard (kernel 5.19).
    Coop,
}

/// What the ring completed for a connection driven by completions.
#[derive(Debug)]
pub enum Done {
    /// A receive completion of connection `token`: `res` bytes in provided
    /// buffer `bid` (read them with [`Ring::received`], then give the
    /// buffer back with [`Ring::recycle`], whatever became of the
    /// connection), 0 at end of file, or `-errno` (`ENOBUFS`: the buffer
    /// ring was empty). `more`: the multishot receive goes on; without it,
    /// it ended and must be armed again to receive more.
    Recv {
        token: u64,
        res: i32,
        bid: Option<u16>,
        more: bool,
    },
    /// A send of connection `token` ended: `res` bytes sent (maybe fewer
    /// than lent) or `-errno` (`ECANCELED` when cancelled); the bytes come
    /// back.
    Sent { token: u64, res: i32, lent: Lent },
}

/// Bytes lent to the ring for one send: `buf[start..start + len]`.
#[derive(Debug, Default)]
pub struct Lent {
    pub buf: Vec<u8>,
    pub start: usize,
    pub len: usize,
}

/// A shard's ring.
pub struct Ring {
    ring: IoUring,
    /// The provided buffer ring of the connections' receives; `None` when
    /// the kernel lacks what completions need (the ring then only polls).
    bufs: Option<BufRing>,
    /// Sends in flight, by slot: the ring owns their bytes until their
    /// completion.
    sends: Vec<Option<(u64, Lent)>>,
    /// Generation of each slot of `sends`, bumped as it is reused.
    send_gens: Vec<u32>,
    free_sends: Vec<u32>,
    /// Receive and send completions of the last `wait`, for the shard.
    done: Vec<Done>,
    /// Completions the last `wait` reaped, of every kind.
    reaped: usize,
    /// Why connections cannot be driven by completions, if they cannot.
    no_completions: Option<String>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("fd", &self.ring.as_raw_fd())
            .finish()
    }
}

impl Ring {
    /// Set up a ring for the calling thread (`IORING_SETUP_SINGLE_ISSUER`:
    /// only this thread may submit), check that the kernel has what the
    /// loop needs, and run a no-op through it. The error says what was
    /// missing: `io_uring_setup` refused (EPERM under a container's seccomp
    /// profile, or `kernel.io_uring_disabled`), or a feature.
    pub fn new(taskrun: TaskRun) -> io::Result<Ring> {
        let mut builder = IoUring::builder();
        builder
            .setup_single_issuer()
            .setup_cqsize(CQ_ENTRIES)
            .setup_submit_all();
        match taskrun {
            TaskRun::Defer => builder.setup_defer_taskrun(),
            TaskRun::Coop => builder.setup_coop_taskrun(),
        };
        let ring = builder
            .build(SQ_ENTRIES)
            .map_err(|e| io::Error::new(e.kind(), format!("io_uring_setup failed: {e}")))?;
        let params = ring.params();
        if !params.is_feature_ext_arg() {
            return Err(unsupported("IORING_FEAT_EXT_ARG (kernel 5.11)"));
        }
        if !params.is_feature_nodrop() {
            return Err(unsupported("IORING_FEAT_NODROP (kernel 5.5)"));
        }
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| io::Error::new(e.kind(), format!("IORING_REGISTER_PROBE: {e}")))?;
        for (code, name) in [
            (opcode::PollAdd::CODE, "IORING_OP_POLL_ADD"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
            (opcode::Nop::CODE, "IORING_OP_NOP"),
        ] {
            if !probe.is_supported(code) {
                return Err(unsupported(name));
            }
        }
        let mut ring = Ring {
            ring,
            bufs: None,
            sends: Vec::new(),
            send_gens: Vec::new(),
            free_sends: Vec::new(),
            done: Vec::new(),
            reaped: 0,
            no_completions: None,
        };
        ring.self_check()?;
        if let Err(e) = ring.set_up_completions(&probe) {
            ring.no_completions = Some(e.to_string());
        }
        Ok(ring)
    }

    /// Register the provided buffer ring and check, on a socket pair, that
    /// a multishot receive picks from it and can be cancelled: connections
    /// are driven by completions only when this passes.
    fn set_up_completions(&mut self, probe: &Probe) -> io::Result<()> {
        for (code, name) in [
            (opcode::RecvMulti::CODE, "IORING_OP_RECV"),
            (opcode::Send::CODE, "IORING_OP_SEND"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
        ] {
            if !probe.is_supported(code) {
                return Err(unsupported(name));
            }
        }
        self.bufs = Some(BufRing::new(&self.ring.submitter())?);
        let checked = self.check_recv();
        self.done.clear();
        if checked.is_err() {
            // Unregistered, the kernel no longer reaches the memory.
            if self.ring.submitter().unregister_buf_ring(GROUP).is_ok() {
                self.bufs = None;
            } else {
                std::mem::forget(self.bufs.take());
            }
        }
        checked
    }

    /// A byte through a multishot receive on a socket pair, then its
    /// cancellation, with the loop's own calls.
    fn check_recv(&mut self) -> io::Result<()> {
        use std::io::Write;
        let (mut a, b) = std::os::unix::net::UnixStream::pair()?;
        b.set_nonblocking(true)?;
        self.recv(b.as_raw_fd(), 7)?;
        a.write_all(b"x")?;
        let mut events = super::Events::with_capacity(4);
        let mut got = None;
        for _ in 0..10 {
            self.wait(&mut events, Duration::from_millis(100))?;
            for d in self.done.drain(..) {
                if let Done::Recv {
                    token: 7,
                    res,
                    bid,
                    more,
                } = d
                {
                    got = Some((res, bid, more));
                }
            }
            if got.is_some() {
                break;
            }
        }
        let Some((res, bid, more)) = got else {
            return Err(io::Error::other("recv self-check: no completion"));
        };
        if let Some(bid) = bid {
            let byte = self.received(bid, 1).first().copied();
            self.recycle(bid);
            if res != 1 || byte != Some(b'x') || !more {
                return Err(io::Error::other(format!(
                    "recv self-check: result {res}, more {more}"
                )));
            }
        } else {
            return Err(io::Error::other(format!(
                "recv self-check: result {res} without a provided buffer"
            )));
        }
        self.cancel_recv(7)?;
        for _ in 0..10 {
            self.wait(&mut events, Duration::from_millis(100))?;
            let ended = self.done.drain(..).any(|d| {
                matches!(
                    d,
                    Done::Recv {
                        token: 7,
                        more: false,
                        ..
                    }
                )
            });
            if ended {
                return Ok(());
            }
        }
        Err(io::Error::other(
            "recv self-check: the cancel did not end the receive",
        ))
    }

    /// Whether connections can be driven by completions (the provided
    /// buffer ring is set up and passed its check).
    pub fn completions(&self) -> bool {
        self.bufs.is_some()
    }

    /// How cleartext connections are driven, for the start log.
    pub fn mode(&self) -> String {
        match &self.no_completions {
            None => "cleartext and TLS connections by completions".into(),
            Some(why) => format!("connections by readiness only ({why})"),
        }
    }

    /// A no-op submitted and its completion reaped by the same enter the
    /// loop uses, with its timeout: a ring that cannot do this is not used.
    fn self_check(&mut self) -> io::Result<()> {
        self.push(
            &opcode::Nop::new()
                .build()
                .user_data(Op::Internal(Internal::SelfCheck).user_data()),
        )?;
        let ts = types::Timespec::from(Duration::from_secs(1));
        let args = types::SubmitArgs::new().timespec(&ts);
        self.ring
            .submitter()
            .submit_with_args(1, &args)
            .map_err(|e| io::Error::new(e.kind(), format!("self-check enter: {e}")))?;
        match self.ring.completion().next() {
            Some(c)
                if Op::of(c.user_data()) == Op::Internal(Internal::SelfCheck)
                    && c.result() == 0 =>
            {
                Ok(())
            }
            Some(c) => Err(io::Error::other(format!(
                "self-check: unexpected completion {:#x} result {}",
                c.user_data(),
                c.result()
            ))),
            None => Err(io::Error::other("self-check: no completion")),
        }
    }

    /// Queue a submission, submitting what is queued first if the queue is
    /// full. Submitted with the next [`wait`](Self::wait).
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entries pushed here are polls, cancellations,
            // no-ops, receives into the provided buffer
            // ring (which lives until the ring is gone, see `Drop`) and
            // sends of bytes in `self.sends`, which stay there, unmoved
            // (a `Vec`'s heap block does not move with the `Vec`), until
            // their completion (see `send`). No entry points at memory the
            // kernel could reach after it is freed; an fd may be closed
            // after submission (the kernel holds its file).
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Watch `fd` for `interest` (epoll bits; `EPOLLRDHUP` included), edge
    /// triggered as io_uring polls are unless asked to be level triggered,
    /// until [`remove`](Self::remove)d: a multishot poll whose completions
    /// carry `token`.
    ///
    /// The poll holds the fd's file open in the kernel: an fd closed
    /// without `remove` keeps its socket open until the ring goes.
    pub fn add(&mut self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        let poll = opcode::PollAdd::new(types::Fd(fd), interest)
            .multi(true)
            .build()
            .user_data(Op::Poll(token).user_data());
        self.push(&poll)
    }

    /// Stop watching what `token` was added for; its file is let go (a
    /// closed socket then closes) when the next [`wait`](Self::wait)
    /// submits this.
    ///
    /// A cancellation, not `IORING_OP_POLL_REMOVE`: a poll whose wake-up is
    /// still pending (a client connected, or bytes came, since the ring
    /// last ran its deferred work) refuses a removal with `EALREADY` and
    /// stays armed, so a listener given up under traffic went on accepting
    /// until its shard ended. A cancellation marks the poll and the
    /// pending wake-up ends it.
    pub fn remove(&mut self, token: u64) -> io::Result<()> {
        let cancel = types::CancelBuilder::user_data(Op::Poll(token).user_data()).all();
        self.push(
            &opcode::AsyncCancel2::new(cancel)
                .build()
                .user_data(Op::Internal(Internal::Cancel).user_data()),
        )
    }

    /// Watch `fd` once for `interest` (a write that would block waits for
    /// `EPOLLOUT` this way); the completion carries `token` and [`REARM`].
    pub fn add_once(&mut self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        let poll = opcode::PollAdd::new(types::Fd(fd), interest)
            .build()
            .user_data(Op::Poll(token).user_data());
        self.push(&poll)
    }

    /// Receive on `fd` until cancelled or ended (a multishot receive into
    /// the provided buffer ring); completions are [`Done::Recv`] with
    /// `token`, which must be a connection's (slab index below 2^30).
    pub fn recv(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        let e = opcode::RecvMulti::new(types::Fd(fd), GROUP)
            .build()
            .user_data(Op::Recv(token).user_data());
        self.push(&e)
    }

    /// Stop the receive of `token`; its last completion says so (no
    /// `more`), after any it had posted.
    pub fn cancel_recv(&mut self, token: u64) -> io::Result<()> {
        self.push(
            &opcode::AsyncCancel::new(Op::Recv(token).user_data())
                .build()
                .user_data(Op::Internal(Internal::Cancel).user_data()),
        )
    }

    /// Send `lent.buf[lent.start..][..lent.len]` on `fd`: the bytes belong
    /// to the ring until the send's [`Done::Sent`] gives them back. Returns
    /// the send's id, to [`cancel_send`](Self::cancel_send) it.
    pub fn send(&mut self, fd: RawFd, token: u64, lent: Lent) -> io::Result<SendId> {
        let Some(bytes) = lent.buf.get(lent.start..lent.start + lent.len) else {
            return Err(io::Error::other("lent range outside its buffer"));
        };
        let (ptr, len) = (bytes.as_ptr(), bytes.len().min(u32::MAX as usize) as u32);
        let slot = match self.free_sends.pop() {
            Some(s) => s,
            None => {
                self.sends.push(None);
                self.send_gens.push(0);
                (self.sends.len() - 1) as u32
            }
        };
        let gen = &mut self.send_gens[slot as usize];
        // Below u32::MAX: the id stays under `Op::INTERNAL`.
        *gen = if *gen >= u32::MAX - 1 { 0 } else { *gen + 1 };
        let id = SendId { slot, gen: *gen };
        let e = opcode::Send::new(types::Fd(fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(Op::Send(id).user_data());
        // Owned by the slot from here until the completion: `ptr` stays
        // valid (the heap block does not move with the `Vec`).
        self.sends[slot as usize] = Some((token, lent));
        if let Err(e) = self.push(&e) {
            self.sends[slot as usize] = None;
            self.free_sends.push(slot);
            return Err(e);
        }
        Ok(id)
    }

    /// Cancel send `id`; its completion still comes (`-ECANCELED`, or what
    /// it sent before), with its bytes.
    pub fn cancel_send(&mut self, id: SendId) -> io::Result<()> {
        self.push(
            &opcode::AsyncCancel::new(Op::Send(id).user_data())
                .build()
                .user_data(Op::Internal(Internal::Cancel).user_data()),
        )
    }

    /// The bytes a [`Done::Recv`] put in buffer `bid`.
    pub fn received(&self, bid: u16, len: usize) -> &[u8] {
        match &self.bufs {
            Some(b) => b.buffer(bid, len),
            None => &[],
        }
    }

    /// Give buffer `bid` back to the kernel (published before the next
    /// enter).
    pub fn recycle(&mut self, bid: u16) {
        if let Some(b) = &mut self.bufs {
            b.recycle(bid);
        }
    }

    /// Receive and send completions of the last [`wait`](Self::wait),
    /// swapped with `into` (which must be empty).
    pub fn take_done(&mut self, into: &mut Vec<Done>) {
        debug_assert!(into.is_empty());
        std::mem::swap(&mut self.done, into);
    }

    /// Submit what is queued and wait up to `timeout` for completions;
    /// `events` gets `(token, readiness)` for each poll, as from epoll,
    /// with [`REARM`] set where a poll ended (`EPOLLERR` too if it
    /// failed); receive and send completions go to
    /// [`take_done`](Self::take_done).
    pub fn wait(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        events.len = 0;
        if let Some(b) = &self.bufs {
            b.publish();
        }
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            // The timeout passed, or a signal (the shard's are blocked, but
            // a debugger's are not), or completions are waiting to be
            // reaped before more can be submitted: reap them now.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) => {}
            Err(e) => return Err(e),
        }
        let cap = events.buf.len();
        let mut cq = self.ring.completion();
        self.reaped = 0;
        while events.len < cap {
            let Some(cqe) = cq.next() else {
                break;
            };
            self.reaped += 1;
            let res = cqe.result();
            let token = match Op::of(cqe.user_data()) {
                Op::Internal(_) => continue,
                Op::Recv(token) => {
                    let flags = cqe.flags();
                    self.done.push(Done::Recv {
                        token,
                        res,
                        bid: cqueue::buffer_select(flags),
                        more: cqueue::more(flags),
                    });
                    continue;
                }
                Op::Send(SendId { slot, gen }) => {
                    let slot = slot as usize;
                    let current = self.send_gens.get(slot) == Some(&gen);
                    let taken = if current {
                        self.sends.get_mut(slot).and_then(Option::take)
                    } else {
                        None
                    };
                    if let Some((token, lent)) = taken {
                        self.free_sends.push(slot as u32);
                        self.done.push(Done::Sent { token, res, lent });
                    }
                    continue;
                }
                Op::Poll(token) => token,
            };
            let ready = if res >= 0 {
                res as u32
            } else if res == -libc::ECANCELED || res == -libc::ENOENT {
                // Removed: the shard let go of this token.
                continue;
            } else {
                libc::EPOLLERR as u32
            };
            let ready = if cqueue::more(cqe.flags()) {
                ready
            } else {
                ready | REARM
            };
            let e = &mut events.buf[events.len];
            e.u64 = token;
            e.events = ready;
            events.len += 1;
        }
        Ok(())
    }
}

impl Ring {
    /// The shard is ending: cancel everything still live on the ring
    /// (receives and polls holding closed sockets open, sends) and reap
    /// until a wait brings nothing, for at most `within`, so that closed
    /// connections close on the wire now, the thread's exit does not wait
    /// on the kernel's teardown, and lent bytes are freed.
    pub fn settle(&mut self, within: Duration) {
        let any = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(Op::Internal(Internal::CancelAll).user_data());
        if self.push(&any).is_err() {
            return;
        }
        let end = std::time::Instant::now() + within;
        let mut events = Events::with_capacity(64);
        while std::time::Instant::now() < end {
            if self.wait(&mut events, Duration::from_millis(20)).is_err() {
                return;
            }
            for d in self.done.drain(..) {
                // A send's bytes are dropped here: the kernel is done.
                if let Done::Recv { bid: Some(bid), .. } = d {
                    if let Some(b) = &mut self.bufs {
                        b.recycle(bid);
                    }
                }
            }
            if self.reaped == 0 {
                return;
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The kernel may still reach the provided buffers and the bytes of
        // sends in flight until it has torn down the ring's operations,
        // which closing the ring only starts: leak them rather than free
        // memory it could still write or read (a shard's ring is dropped
        // only when the shard ends).
        std::mem::forget(self.bufs.take());
        for s in self.sends.drain(..).flatten() {
            std::mem::forget(s);
        }
    }
}

/// The provided buffer ring: `BUFFERS` entries in page-aligned memory the
/// kernel reads, and the buffers they point at.
struct BufRing {
    ring: *mut types::BufRingEntry,
    layout: Layout,
    bufs: Box<[u8]>,
    /// Our tail: entries up to here are (or will be, at `publish`) the
    /// kernel's.
    tail: u16,
}

impl BufRing {
    fn new(submitter: &io_uring::Submitter<'_>) -> io::Result<BufRing> {
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
            // Written, not zeroed: every page is resident from the start
            // (the kernel cycles through all the buffers), so the shard's
            // memory does not creep up by 4 MiB as connections arrive.
            bufs: vec![0x55u8; BUFFERS as usize * BUFFER_BYTES].into_boxed_slice(),
            tail: 0,
        };
        for bid in 0..BUFFERS {
            r.recycle(bid);
        }
        r.publish();
        // SAFETY: `ring` holds BUFFERS entries, is page-aligned, and is
        // never freed while registered: `Ring`'s drop leaks it, and a
        // failed check unregisters it before dropping it.
        unsafe { submitter.register_buf_ring_with_flags(ring as u64, BUFFERS, GROUP, 0) }
            .map_err(|e| io::Error::new(e.kind(), format!("IORING_REGISTER_PBUF_RING: {e}")))?;
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
        let start = (bid as usize % BUFFERS as usize) * BUFFER_BYTES;
        &self.bufs[start..start + len.min(BUFFER_BYTES)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once (only
        // after the kernel let go of it: see `Ring`'s drop).
        unsafe { alloc::dealloc(self.ring.cast(), self.layout) };
    }
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("the kernel lacks {what}"),
    )
}

#[cfg(test)]
impl BufRing {
    /// `(bid, addr, len)` of the entry in `slot`.
    fn entry(&self, slot: u16) -> (u16, u64, u32) {
        assert!(slot < BUFFERS);
        // SAFETY: `slot` < BUFFERS, inside the allocation, which lives as
        // long as `self`; read only.
        let e = unsafe { &*self.ring.add(slot as usize) };
        (e.bid(), e.addr(), e.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::net::UnixStream;

    /// A ring with completions, or None (said) where the kernel or a
    /// sandbox has none. A kernel that has what they need but fails the
    /// receive check is a failure, not a skip.
    fn ring() -> Option<Ring> {
        match Ring::new(TaskRun::Defer) {
            Ok(r) if r.completions() => Some(r),
            Ok(r) => {
                let why = r.no_completions.clone().unwrap_or_default();
                assert!(
                    why.contains("lacks") || why.starts_with("IORING_REGISTER_PBUF_RING"),
                    "the kernel has completions but the check failed: {why}"
                );
                eprintln!("SKIP: no completions here: {why}");
                None
            }
            Err(e) => {
                eprintln!("SKIP: no io_uring here: {e}");
                None
            }
        }
    }

    /// A recycled buffer goes in the slot at the tail, wrapping at the
    /// ring's size, with its own address and the full length: the kernel
    /// takes the entries in slot order.
    #[test]
    fn recycled_buffers_go_in_the_slot_at_the_tail() {
        let Some(mut ring) = ring() else { return };
        let b = ring.bufs.as_mut().unwrap();
        // Every buffer was given at the start (and the receive check's
        // one given back): the entries not yet reused are the first ones.
        let tail = b.tail;
        assert!((BUFFERS..BUFFERS + 4).contains(&tail), "{tail}");
        let base = b.bufs.as_ptr() as u64;
        for slot in [517, 1000, BUFFERS - 1] {
            let (bid, addr, len) = b.entry(slot);
            assert_eq!(bid, slot);
            assert_eq!(addr, base + u64::from(slot) * BUFFER_BYTES as u64);
            assert_eq!(len, BUFFER_BYTES as u32);
        }
        // The tail wraps past the ring's size: slots 0, 1, … again.
        for (i, bid) in [7u16, 1000, 3].into_iter().enumerate() {
            b.recycle(bid);
            let slot = (tail + i as u16) % BUFFERS;
            let (got, addr, len) = b.entry(slot);
            assert_eq!(got, bid, "slot {slot}");
            assert_eq!(addr, base + u64::from(bid) * BUFFER_BYTES as u64);
            assert_eq!(len, BUFFER_BYTES as u32);
        }
        assert_eq!(b.tail, tail + 3);
        assert_eq!(
            b.buffer(1000, 2).as_ptr() as u64,
            base + 1000 * BUFFER_BYTES as u64
        );
    }

    /// Every operation's `user_data` decodes to what it was made from, and
    /// the shard's top-of-range tokens (listeners, the wake-up) are polls.
    #[test]
    fn user_data_round_trips_through_op() {
        let ops = [
            Op::Internal(Internal::Cancel),
            Op::Internal(Internal::SelfCheck),
            Op::Internal(Internal::CancelAll),
            Op::Poll(5),
            Op::Poll(u64::MAX - 1),
            Op::Recv((1 << 30) - 1),
            Op::Send(SendId { slot: 3, gen: 9 }),
            Op::Send(SendId {
                slot: 0,
                gen: u32::MAX - 1,
            }),
        ];
        for op in ops {
            assert_eq!(Op::of(op.user_data()), op, "{:#x}", op.user_data());
        }
        let ids: std::collections::HashSet<u64> = ops.iter().map(|o| o.user_data()).collect();
        assert_eq!(ids.len(), ops.len(), "no two operations share a user_data");
    }

    /// Two sends in turn use the same slot with different ids (its
    /// generation): a cancel meant for the first, arriving after it
    /// completed, cannot reach the second. Each completion brings its
    /// bytes back, with what was sent.
    #[test]
    fn a_reused_send_slot_gets_a_new_id() {
        let Some(mut ring) = ring() else { return };
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut ids = Vec::new();
        let mut events = Events::with_capacity(8);
        for round in 0..3u8 {
            let lent = Lent {
                buf: vec![b'0' + round; 10],
                start: 2,
                len: 5,
            };
            let id = ring.send(a.as_raw_fd(), 42, lent).unwrap();
            assert_eq!(Op::of(Op::Send(id).user_data()), Op::Send(id));
            assert!(Op::Send(id).user_data() < Op::INTERNAL, "{id:?}");
            ids.push(id);
            let mut done = Vec::new();
            for _ in 0..20 {
                ring.wait(&mut events, Duration::from_millis(50)).unwrap();
                ring.take_done(&mut done);
                if !done.is_empty() {
                    break;
                }
            }
            match done.as_slice() {
                [Done::Sent {
                    token: 42,
                    res: 5,
                    lent,
                }] => {
                    assert_eq!((lent.start, lent.len), (2, 5));
                    assert_eq!(lent.buf, vec![b'0' + round; 10]);
                }
                other => panic!("round {round}: {other:?}"),
            }
            let mut got = [0u8; 5];
            b.read_exact(&mut got).unwrap();
            assert_eq!(got, [b'0' + round; 5]);
        }
        assert_eq!(ids[0].slot, ids[1].slot, "the same slot");
        assert!(
            ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
            "{ids:?}"
        );
    }

    /// A listener's poll removed while a wake-up of it is still pending
    /// (a client connected since the ring last ran its deferred work, as
    /// under steady traffic when a shard drains): the socket must close
    /// with its fd, not stay listening until the ring goes.
    #[test]
    fn a_poll_removed_with_its_wakeup_pending_lets_the_socket_close() {
        let mut ring = match Ring::new(TaskRun::Defer) {
            Ok(ring) => ring,
            Err(e) => {
                eprintln!("SKIP: no io_uring ring here ({e})");
                return;
            }
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut events = Events::with_capacity(8);
        ring.add(listener.as_raw_fd(), 7, libc::EPOLLIN as u32)
            .unwrap();
        ring.wait(&mut events, Duration::ZERO).unwrap();
        // The connection's wake-up claims the poll until the next enter
        // runs the ring's deferred work; the removal is submitted first.
        let _client = TcpStream::connect(addr).unwrap();
        ring.remove(7).unwrap();
        drop(listener);
        for _ in 0..3 {
            ring.wait(&mut events, Duration::from_millis(20)).unwrap();
        }
        assert!(
            TcpStream::connect(addr).is_err(),
            "{addr} still accepts after its poll was removed and its fd closed"
        );
    }
}
