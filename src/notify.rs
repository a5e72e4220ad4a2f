//! The systemd notification protocol (`sd_notify(3)`): one datagram of
//! `KEY=VALUE` lines to the unix socket named by `$NOTIFY_SOCKET`. The server
//! sends `READY=1` once serving, `STOPPING=1` when a drain starts, and after a
//! binary upgrade the new process sends `MAINPID=` so systemd follows it.
//! Without `$NOTIFY_SOCKET` (not run by systemd) every call does nothing.

use std::os::unix::net::UnixDatagram;

/// Send `state` (newline-separated assignments) to the service manager, if
/// there is one. Best effort: a failure is logged, never fatal.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::warn!(error = %e, state, "sd_notify failed");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    // A leading `@` names a socket in the abstract namespace.
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        socket.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        socket.send_to(state.as_bytes(), std::path::Path::new(path))?;
    }
    Ok(())
}
