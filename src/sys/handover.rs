//! Passing listening sockets to a new process across `exec`: a pipe for its
//! readiness message, clearing close-on-exec on exactly the fds it inherits
//! (in the child, between fork and exec), a process group of its own so that
//! a failed start can be ended whole, and taking ownership of those fds on
//! the other side.

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
    // SAFETY: pipe2 writes exactly two c_ints, and `fds` is a live array of
    // two.
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
/// inherit them. The child also gets a process group of its own
/// (`setpgid(0, 0)` before exec), whose id is its pid: whatever it starts
/// before it adopts the fds (a wrapper script's commands) inherits them
/// too, and [`kill_group`] ends all of those at once.
pub fn inherit_fds(cmd: &mut Command, fds: Vec<RawFd>) {
    cmd.process_group(0);
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
    // SAFETY: F_GETFD takes no argument and touches no memory; on an fd
    // that is not open it fails with EBADF, which is the check wanted here.
    let flags = syscall!(fcntl(fd, libc::F_GETFD))?;
    // SAFETY: F_SETFD takes an int and touches no memory; it changes only
    // the close-on-exec flag of an fd no other owner in this process holds
    // (TAKEN says it has not been taken before).
    syscall!(fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC))?;
    taken.insert(fd);
    // SAFETY: the fd is open (F_GETFD succeeded); it was inherited across
    // exec, so nothing in this process opened it, and TAKEN guarantees this
    // is the only OwnedFd made from it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// SIGKILL every process in the process group `pgid`. Call it while the
/// group's leader is not yet reaped (alive or a zombie), so the id cannot
/// have been reused. No such group (every member gone) is not an error.
pub fn kill_group(pgid: u32) -> io::Result<()> {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pid out of range",
        ));
    };
    if pgid <= 1 {
        // kill(0) or kill(-1) would signal this process's group or everyone.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a process group",
        ));
    }
    // SAFETY: kill takes no pointers; a negative pid names the group.
    match syscall!(kill(-pgid, libc::SIGKILL)) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        r => r.map(drop),
    }
}

/// Whether the child `pid` has exited, without reaping it (`waitid` with
/// `WNOWAIT`): its pid, and so its process group's id, stays reserved until
/// the caller waits for it.
pub fn child_exited(pid: u32) -> io::Result<bool> {
    let id: libc::id_t = pid;
    // SAFETY: siginfo_t is plain data, valid when zeroed.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a live siginfo_t that waitid fills in.
    syscall!(waitid(
        libc::P_PID,
        id,
        &mut info,
        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT
    ))?;
    // SAFETY: waitid filled `info`; with WNOHANG and nothing to report it
    // left si_pid 0 (zeroed above).
    Ok(unsafe { info.si_pid() } != 0)
}
