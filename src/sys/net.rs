//! Socket calls that std does not offer in the form the hot path needs.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::syscall;

/// `accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)`: the accepted socket needs no
/// `fcntl` afterwards (std's `accept` would leave it blocking).
pub fn accept4(listener: &TcpListener) -> io::Result<(TcpStream, Option<SocketAddr>)> {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes of address into
    // `storage`, and `len` starts as its exact size; both are live for the
    // call, and the listener's fd is borrowed open.
    let fd = syscall!(accept4(
        listener.as_raw_fd(),
        (&mut storage as *mut libc::sockaddr_storage).cast(),
        &mut len,
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    ))?;
    // SAFETY: accept4 returned a fresh connected socket that nothing else owns.
    let stream = TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok((stream, peer_addr(&storage)))
}

fn peer_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is large and aligned enough for it.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

/// `sendfile` up to `count` bytes of `file` from `*offset` (advanced by the
/// kernel) to `socket`. Returns 0 when the file ended before `offset`.
pub fn sendfile(
    socket: &impl AsRawFd,
    file: &impl AsRawFd,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: both fds are live for the call and `off` is a valid off_t the
    // kernel may update.
    let n = syscall!(sendfile(
        socket.as_raw_fd(),
        file.as_raw_fd(),
        &mut off,
        count
    ))?;
    *offset = off as u64;
    Ok(n as usize)
}

/// `sendmsg(MSG_MORE)`: queue a response head that a `sendfile` body will
/// follow, so the kernel can put both in full segments.
pub fn sendmsg_more(socket: &impl AsRawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    // SAFETY: msg points at `bufs`, which outlives the call; the kernel only
    // reads from it.
    let n = syscall!(sendmsg(
        socket.as_raw_fd(),
        &msg,
        libc::MSG_MORE | libc::MSG_NOSIGNAL
    ))?;
    Ok(n as usize)
}

/// `recv` on a connected socket, as the raw `recvfrom` syscall: glibc's
/// `recv` (which std calls) is a cancellation point and brackets the call
/// with two atomic updates of the thread's cancel state, which a shard never
/// needs (threads are never cancelled). The kernel sees the same call.
#[inline]
pub fn recv(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for `buf.len()` bytes during the call; null
    // address pointers ask for no peer address. Every argument is passed
    // as a full `c_long`, as the variadic `syscall` reads them.
    let n = syscall!(syscall(
        libc::SYS_recvfrom,
        socket.as_raw_fd() as libc::c_long,
        buf.as_mut_ptr() as libc::c_long,
        buf.len() as libc::c_long,
        0 as libc::c_long,
        0 as libc::c_long,
        0 as libc::c_long
    ))?;
    Ok(n as usize)
}

/// `writev` as the raw syscall, for the reason given at [`recv`].
#[inline]
pub fn writev(socket: &impl AsRawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: IoSlice is ABI-compatible with iovec on Unix; the slices
    // outlive the call and the kernel only reads them.
    let n = syscall!(syscall(
        libc::SYS_writev,
        socket.as_raw_fd() as libc::c_long,
        bufs.as_ptr() as libc::c_long,
        bufs.len().min(libc::UIO_MAXIOV as usize) as libc::c_long
    ))?;
    Ok(n as usize)
}

/// `write` of one buffer as the raw syscall, for the reason given at
/// [`recv`]. The kernel's path for `write` on a socket skips the iovec
/// import and the per-segment iteration of `writev`: about 9 % less CPU per
/// call for a small response (`writev` 16 % more than `send`, `write` 6 %
/// more, measured on this VM with 300-byte messages over loopback TCP).
/// `send` would be cheaper still, but the kernel does not count it in the
/// thread's `syscw` (`/proc/PID/task/TID/io`), which the tests use to prove
/// that a pipelined batch leaves in one call.
#[inline]
pub fn write(socket: &impl AsRawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is readable for `buf.len()` bytes during the call.
    let n = syscall!(syscall(
        libc::SYS_write,
        socket.as_raw_fd() as libc::c_long,
        buf.as_ptr() as libc::c_long,
        buf.len() as libc::c_long
    ))?;
    Ok(n as usize)
}

/// `TCP_DEFER_ACCEPT`: `accept` returns a connection only once its first
/// bytes have arrived (or after about `secs`), so the shard can answer the
/// request straight after accepting, and sockets that never speak cost no
/// wake-up (nginx's `listen … deferred`).
pub fn set_defer_accept(listener: &impl AsRawFd, secs: u32) -> io::Result<()> {
    let value = secs as libc::c_int;
    set_int_option(listener, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, value)
}

/// `UDP_GRO`: whether the kernel may coalesce a flow's datagrams into one
/// receive (read back by their segment size).
pub fn set_udp_gro(socket: &impl AsRawFd, on: bool) -> io::Result<()> {
    let value = libc::c_int::from(on);
    set_int_option(socket, libc::SOL_UDP, libc::UDP_GRO, value)
}

/// `SO_INCOMING_CPU`: mark a listener as belonging to `cpu`, so the kernel
/// prefers it for connections whose packets that CPU handles.
pub fn set_incoming_cpu(socket: &impl AsRawFd, cpu: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(cpu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU id out of range"))?;
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_INCOMING_CPU, value)
}

/// `setsockopt` of one `c_int` option.
fn set_int_option(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    syscall!(setsockopt(
        socket.as_raw_fd(),
        level,
        name,
        (&value as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))?;
    Ok(())
}

/// `SO_ATTACH_REUSEPORT_CBPF`: the classic BPF `program` chooses, per
/// incoming connection, the index of the listener in `socket`'s
/// `SO_REUSEPORT` group (the kernel falls back to its hash when the index is
/// out of range). The kernel copies the program; it need not outlive the call.
pub fn attach_reuseport_cbpf(
    socket: &impl AsRawFd,
    program: &[super::bpf::Insn],
) -> io::Result<()> {
    let mut filter: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let len = u16::try_from(filter.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `filter`, `len` instructions that live until
    // the call returns; the kernel copies them and only reads.
    syscall!(setsockopt(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ATTACH_REUSEPORT_CBPF,
        (&fprog as *const libc::sock_fprog).cast(),
        std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t
    ))?;
    Ok(())
}

/// The PID of the process at the other end of a connected Unix socket
/// (`SO_PEERCRED`), to name who holds an address claim.
pub fn peer_pid(stream: &std::os::unix::net::UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a live ucred and `len` its exact size; the kernel
    // writes at most `len` bytes and updates `len`.
    syscall!(getsockopt(
        stream.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_PEERCRED,
        (&mut cred as *mut libc::ucred).cast(),
        &mut len
    ))?;
    u32::try_from(cred.pid).map_err(|_| io::Error::other("no peer pid"))
}
