//! io_uring as a shard's event source (`--io uring`): one ring per shard,
//! created by the shard's own thread, with a multishot poll per fd standing
//! where an edge-triggered epoll registration stands on the epoll backend.
//! Every call on the ring (and its one `unsafe`, pushing a submission) is
//! here; the shard sees `add`, `remove` and `wait`, as with [`Epoll`].
//!
//! The shard's `wait` is the one `io_uring_enter` per loop turn: it submits
//! what the turn queued (polls for accepted connections, removals for closed
//! ones) and waits for completions with the turn's timeout.
//!
//! [`Epoll`]: super::Epoll

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use super::Events;

/// `user_data` of the ring's own operations (poll removals, the
/// self-check's no-op), whose completions are not events. Shard tokens
/// never take it: a connection's generation stays below `u32::MAX`, and
/// the listeners' and the wake-up's tokens are at the top of the range.
const INTERNAL: u64 = 0xFFFF_FFFF_0000_0000;

/// Set in an event's readiness when its multishot poll ended (the kernel
/// posted its last completion): the shard arms a new one if the fd is still
/// its. A bit epoll never reports (`EPOLLONESHOT` is a request flag).
pub const REARM: u32 = libc::EPOLLONESHOT as u32;

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

/// A shard's ring.
pub struct Ring {
    ring: IoUring,
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
            (opcode::PollRemove::CODE, "IORING_OP_POLL_REMOVE"),
            (opcode::Nop::CODE, "IORING_OP_NOP"),
        ] {
            if !probe.is_supported(code) {
                return Err(unsupported(name));
            }
        }
        let mut ring = Ring { ring };
        ring.self_check()?;
        Ok(ring)
    }

    /// A no-op submitted and its completion reaped by the same enter the
    /// loop uses, with its timeout: a ring that cannot do this is not used.
    fn self_check(&mut self) -> io::Result<()> {
        self.push(&opcode::Nop::new().build().user_data(INTERNAL + 1))?;
        let ts = types::Timespec::from(Duration::from_secs(1));
        let args = types::SubmitArgs::new().timespec(&ts);
        self.ring
            .submitter()
            .submit_with_args(1, &args)
            .map_err(|e| io::Error::new(e.kind(), format!("self-check enter: {e}")))?;
        match self.ring.completion().next() {
            Some(c) if c.user_data() == INTERNAL + 1 && c.result() == 0 => Ok(()),
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
            // SAFETY: the entries pushed here are polls, poll removals and
            // no-ops: none points to memory the kernel would read or write
            // later (a poll takes the fd's file by reference in the kernel
            // at submission, so the fd may be closed after).
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
            .user_data(token);
        self.push(&poll)
    }

    /// Stop watching what `token` was added for; its file is let go (a
    /// closed socket then closes) when the next [`wait`](Self::wait)
    /// submits this.
    pub fn remove(&mut self, token: u64) -> io::Result<()> {
        self.push(&opcode::PollRemove::new(token).build().user_data(INTERNAL))
    }

    /// Submit what is queued and wait up to `timeout` for completions;
    /// `events` gets `(token, readiness)` for each, as from epoll, with
    /// [`REARM`] set where a poll ended (`EPOLLERR` too if it failed).
    pub fn wait(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        events.len = 0;
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
        for cqe in self.ring.completion().take(cap) {
            let token = cqe.user_data();
            if (INTERNAL..INTERNAL + 16).contains(&token) {
                continue;
            }
            let res = cqe.result();
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

fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("the kernel lacks {what}"),
    )
}
