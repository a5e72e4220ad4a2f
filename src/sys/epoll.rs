//! Edge-triggered epoll and an eventfd to wake a shard from another thread.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::syscall;

pub const EPOLLIN: u32 = libc::EPOLLIN as u32;
pub const EPOLLOUT: u32 = libc::EPOLLOUT as u32;
pub const EPOLLRDHUP: u32 = libc::EPOLLRDHUP as u32;
pub const EPOLLERR: u32 = libc::EPOLLERR as u32;
pub const EPOLLHUP: u32 = libc::EPOLLHUP as u32;
const EPOLLET: u32 = libc::EPOLLET as u32;

/// An epoll instance. Registrations are edge-triggered and made once per fd:
/// no `epoll_ctl` churn on the request path.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes only a flags word; no memory is passed.
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 returned a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Register `fd` edge-triggered for `interest` with `token` as event data.
    pub fn add(&self, fd: &impl AsRawFd, token: u64, interest: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest | EPOLLET,
            u64: token,
        };
        // SAFETY: `ev` is a live, initialised epoll_event for the length of
        // the call (the kernel copies it in); both fds are borrowed open fds.
        syscall!(epoll_ctl(
            self.fd.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd.as_raw_fd(),
            &mut ev
        ))?;
        Ok(())
    }

    /// Remove `fd`. Closing an fd removes it too; this is for fds that stay open.
    pub fn delete(&self, fd: &impl AsRawFd) -> io::Result<()> {
        // SAFETY: EPOLL_CTL_DEL ignores the event pointer (null is allowed
        // since Linux 2.6.9); both fds are borrowed open fds.
        syscall!(epoll_ctl(
            self.fd.as_raw_fd(),
            libc::EPOLL_CTL_DEL,
            fd.as_raw_fd(),
            std::ptr::null_mut()
        ))?;
        Ok(())
    }

    /// Wait for events; `None` blocks indefinitely.
    pub fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        // Round up: a timeout that truncates to 0 ms would spin until it passes.
        let ms = timeout.map_or(-1, |t| {
            t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
        });
        events.len = 0;
        // Clamped, not truncated: a count past i32::MAX would wrap negative.
        let max = events.buf.len().min(i32::MAX as usize) as i32;
        // SAFETY: the kernel writes at most `max` epoll_events from the
        // pointer on, and `max` is at most the Vec's own length, so every
        // write lands in its initialised elements, borrowed exclusively for
        // the call; `with_capacity` keeps the length at least 1 (0 would be
        // EINVAL).
        let n = syscall!(epoll_wait(
            self.fd.as_raw_fd(),
            events.buf.as_mut_ptr(),
            max,
            ms
        ))?;
        events.len = n as usize;
        Ok(())
    }
}

/// A reusable buffer of readiness events (filled by epoll, or by the
/// io_uring backend's polls in the same shape).
pub struct Events {
    pub(super) buf: Vec<libc::epoll_event>,
    pub(super) len: usize,
}

impl Events {
    pub fn with_capacity(n: usize) -> Events {
        Events {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; n.max(1)],
            len: 0,
        }
    }

    /// `(token, readiness)` pairs from the last `wait`.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.buf[..self.len].iter().map(|e| {
            let (token, events) = (e.u64, e.events);
            (token, events)
        })
    }
}

/// An eventfd: another thread writes, the shard's epoll wakes.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes an initial count and flags; no memory is
        // passed.
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        // SAFETY: eventfd returned a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    pub fn notify(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64, as eventfd requires.
        match syscall!(write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8)) {
            // The counter is saturated: the shard is already due to wake.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r.map(drop),
        }
    }

    /// Reset the counter after a wake-up.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64, as eventfd requires. A
        // WouldBlock just means the counter was already zero.
        let _ = syscall!(read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8));
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
