//! Passing listening sockets to a new process across `exec`: a pipe for its
//! readiness message, clearing close-on-exec on exactly the fds it inherits
//! (in the child, between fork and exec), and taking ownership of those fds
//! on the other side.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use super::syscall;

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    syscall!(pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC))?;
    // SAFETY: pipe2 succeeded and returned two fresh fds that nothing else
    // owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Wait until `fd` is readable (data or end of file), for at most `timeout`.
/// Returns false on timeout.
pub fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one live pollfd, and the count says one.
    let n = syscall!(poll(&mut pfd, 1, ms))?;
    Ok(n > 0)
}

/// Let the process `cmd` starts inherit `fds` under the same numbers: they
/// are all close-on-exec here, and the flag is cleared in the child after
/// `fork`, so no other process this one starts (now or concurrently) can
/// inherit them.
pub fn inherit_fds(cmd: &mut Command, fds: Vec<RawFd>) {
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it makes fcntl calls only, over a
    // Vec allocated before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags == -1 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Fds already taken by [`take_inherited`]: each may be owned once.
static TAKEN: Mutex<Option<HashSet<RawFd>>> = Mutex::new(None);

/// Take ownership of an fd this process inherited, named by its parent in
/// the environment, and mark it close-on-exec again so it does not leak to
/// anything this process starts. Fails if `fd` is not open, is one of the
/// standard streams, or was taken before.
pub fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd <= 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fd {fd} is a standard stream"),
        ));
    }
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    if taken.contains(&fd) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fd {fd} named twice"),
        ));
    }
    // F_GETFD fails with EBADF on an fd that is not open.
    let flags = syscall!(fcntl(fd, libc::F_GETFD))?;
    syscall!(fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC))?;
    taken.insert(fd);
    // SAFETY: the fd is open (F_GETFD succeeded); it was inherited across
    // exec, so nothing in this process opened it, and TAKEN guarantees this
    // is the only OwnedFd made from it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
