//! The shard's event source behind one small interface (`--io`): the
//! edge-triggered epoll loop, or an io_uring ring whose multishot polls
//! stand where epoll's registrations stand (listeners, and `EPOLLOUT` of a
//! connection whose file body waits for room). Connections on the ring are
//! driven by its receive and send completions (`shard/ring.rs`,
//! `conn/ring.rs`); their sans-I/O protocol code does not know which
//! drives them.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::config::IoBackend;
use crate::sys::{Epoll, Events, Ring, TaskRun};

/// How the ring runs its completion work: ahead of `Coop` on keep-alive
/// and pipelined loads, level on `Connection: close` (docs/benchmarks.md,
/// "Event source").
const TASKRUN: TaskRun = TaskRun::Defer;

/// What a shard waits on.
// One per shard, in the shard's struct: its size does not matter, and a
// boxed ring would cost a pointer chase on every call.
#[allow(clippy::large_enum_variant)]
pub enum Poller {
    Epoll(Epoll),
    Uring(Ring),
}

impl Poller {
    /// The backend `choice` names, set up on the calling (shard) thread.
    /// `auto` takes io_uring when its ring sets up with what the loop needs
    /// and passes its self-check, else epoll; the string says which and
    /// why, for the log. A forced `uring` that cannot be had is an error.
    pub fn new(choice: IoBackend) -> io::Result<(Poller, String)> {
        match choice {
            IoBackend::Epoll => Ok((Poller::Epoll(Epoll::new()?), "--io epoll".into())),
            IoBackend::Uring => Ring::new(TASKRUN)
                .map(|r| {
                    let why = format!("--io uring; {}", r.mode());
                    (Poller::Uring(r), why)
                })
                .map_err(|e| io::Error::new(e.kind(), format!("--io uring: {e}"))),
            IoBackend::Auto => match Ring::new(TASKRUN) {
                Ok(r) => {
                    let why = format!(
                        "auto: the io_uring ring set up and passed its self-check; {}",
                        r.mode()
                    );
                    Ok((Poller::Uring(r), why))
                }
                Err(e) => Ok((
                    Poller::Epoll(Epoll::new()?),
                    format!("auto: io_uring unavailable ({e}); using epoll"),
                )),
            },
        }
    }

    /// The backend's name, as the metric and the log give it.
    pub fn name(&self) -> &'static str {
        match self {
            Poller::Epoll(_) => "epoll",
            Poller::Uring(_) => "uring",
        }
    }

    /// Watch `fd` edge-triggered for `interest`, reporting `token`.
    #[inline]
    pub fn add(&mut self, fd: &impl AsRawFd, token: u64, interest: u32) -> io::Result<()> {
        match self {
            Poller::Epoll(e) => e.add(fd, token, interest),
            Poller::Uring(r) => r.add(fd.as_raw_fd(), token, interest),
        }
    }

    /// Stop watching `fd`, which stays open (a listener given up).
    pub fn delete(&mut self, fd: &impl AsRawFd, token: u64) -> io::Result<()> {
        match self {
            Poller::Epoll(e) => e.delete(fd),
            Poller::Uring(r) => r.remove(token),
        }
    }

    /// `token`'s fd is being closed. epoll forgets a closed fd by itself;
    /// a ring's poll holds the socket open until it is removed.
    #[inline]
    pub fn forget(&mut self, token: u64) {
        if let Poller::Uring(r) = self {
            if let Err(e) = r.remove(token) {
                tracing::warn!(error = %e, "io_uring poll cancellation failed");
            }
        }
    }

    /// The ring, when connections can be driven by its completions.
    #[inline]
    pub fn completions(&mut self) -> Option<&mut Ring> {
        match self {
            Poller::Uring(r) if r.completions() => Some(r),
            _ => None,
        }
    }

    /// The shard is ending: on the ring, cancel and reap what is still
    /// live (see `Ring::settle`).
    pub fn settle(&mut self) {
        if let Poller::Uring(r) = self {
            r.settle(Duration::from_millis(500));
        }
    }

    /// Wait up to `timeout` for readiness (and, on the ring, submit what
    /// this turn queued with the same enter).
    #[inline]
    pub fn wait(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        match self {
            Poller::Epoll(e) => e.wait(events, Some(timeout)),
            Poller::Uring(r) => r.wait(events, timeout),
        }
    }
}
