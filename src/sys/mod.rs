//! The operating-system boundary: the only module allowed `unsafe`.
//!
//! Each syscall has a small safe wrapper returning `io::Result`. EINTR is
//! retried inside the wrapper; EAGAIN surfaces as `ErrorKind::WouldBlock`.
//! Every fd is an `OwnedFd` (or a std type owning one) created close-on-exec
//! (and non-blocking where it is a socket) in the same call.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod bpf;
mod epoll;
mod fs;
mod handover;
mod lock;
mod net;
mod thread;
mod uring;

pub use epoll::{Epoll, EventFd, Events, EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP};
pub use fs::{
    lstat_at, nofile_limit, open_beneath, open_beneath_no_symlinks, populate_write, shrink_anon,
    Lstat,
};
pub use handover::{child_exited, inherit_fds, kill_group, pipe, take_inherited, wait_readable};
pub use lock::try_lock_exclusive;
pub use net::{
    accept4, attach_reuseport_cbpf, peer_pid, recv, sendfile, sendmsg_more, set_defer_accept,
    set_incoming_cpu, set_udp_gro, write, writev,
};
pub use thread::{cap_arenas, cores, fix_mmap_threshold, lower_thread_priority, trim_heap};
pub use uring::{Done, Lent, Ring, SendId, TaskRun, REARM};

/// Run a libc call, mapping `-1` to `io::Error::last_os_error()` and
/// retrying on EINTR.
macro_rules! syscall {
    ($name:ident ( $($arg:expr),* $(,)? )) => {{
        loop {
            // SAFETY: callers pass arguments that satisfy the syscall's
            // contract; each call site states why.
            let res = unsafe { libc::$name($($arg),*) };
            if res == -1 {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                break Err(err);
            }
            break Ok(res);
        }
    }};
}
pub(crate) use syscall;
