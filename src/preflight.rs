//! What would fail at start, tried before any snapshot build: the root is
//! readable, the access log can be opened, every address is free of other
//! processes and bindable by this user. `--check` runs the same checks and
//! exits; a start keeps the per-address claims for its lifetime.
//!
//! Every listener uses `SO_REUSEPORT` so the shards can share a port, which
//! would also let a second instance join the same port silently. So before
//! binding, each address is *claimed*: an abstract Unix socket named after
//! the address (scoped, like the port, to the network namespace, and
//! released by the kernel when the process dies), then a probe bind without
//! `SO_REUSEPORT`, which fails if any other process holds the port. The only
//! sanctioned sharing is an upgrade handover, where the new process inherits
//! the listening sockets (and the claims) instead: [`Preflight::inherited`]
//! skips those addresses.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;

/// A configuration or environment error found before serving: the process
/// exits with [`crate::config::EXIT_CONFIG`].
#[derive(Debug)]
pub struct SetupError(pub String);

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupError {}

/// Whether an error (anywhere in its chain) is a [`SetupError`].
pub fn is_setup_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<SetupError>())
}

fn setup(msg: String) -> anyhow::Error {
    anyhow::Error::new(SetupError(msg))
}

/// Held claims on listen addresses; dropping it releases them.
#[derive(Debug, Default)]
pub struct Claims {
    locks: Vec<(SocketAddr, UnixListener)>,
}

impl Claims {
    /// Claim an address the kernel picked (port 0) once it is known, so a
    /// second instance pointed at it is told a shardhttpd holds it. Best
    /// effort: the port is already exclusively ours.
    pub fn add_picked(&mut self, addr: SocketAddr) {
        if let Ok(lock) = claim(addr) {
            self.locks.push((addr, lock));
        }
    }

    /// Each claim's fd and address, for a handover: the new process keeps
    /// the claims after this one exits, so a second instance (or a
    /// `--check`) is still told that a shardhttpd holds the addresses.
    pub fn handover_list(&self) -> Vec<(RawFd, SocketAddr)> {
        self.locks
            .iter()
            .map(|(addr, lock)| (lock.as_raw_fd(), *addr))
            .collect()
    }

    /// Keep claims handed over by the process this one replaces.
    pub fn adopt(&mut self, inherited: Vec<(SocketAddr, UnixListener)>) {
        self.locks.extend(inherited);
    }

    /// Name this process as the claims' holder: a connection to a claim
    /// socket reports the process that last called `listen` on it (what
    /// `--check` reports as the holder's pid). Done by the new process of
    /// an upgrade once it serves, so a failed upgrade never names it.
    pub fn restamp(&self) {
        for (addr, lock) in &self.locks {
            if let Err(e) = socket2::SockRef::from(lock).listen(CLAIM_BACKLOG) {
                tracing::warn!(error = %e, "could not take over the claim on {addr}");
            }
        }
    }
}

impl Claims {
    /// Answer the connections that ask who holds a claim (`--check`, a
    /// second instance): accepted and closed at once by a thread of their
    /// own. Unanswered, they would stay queued for the process's lifetime,
    /// and once the backlog is full (129 asks) the next asker's `connect`
    /// would block for ever. The asker reads the holder's pid from its own
    /// socket (`SO_PEERCRED`, set at connect), so the close loses nothing.
    pub fn answer_askers(&self) -> io::Result<()> {
        let socks: Vec<UnixListener> = self
            .locks
            .iter()
            .map(|(_, lock)| lock.try_clone())
            .collect::<io::Result<_>>()?;
        if socks.is_empty() {
            return Ok(());
        }
        let epoll = crate::sys::Epoll::new()?;
        for (i, sock) in socks.iter().enumerate() {
            sock.set_nonblocking(true)?;
            epoll.add(sock, i as u64, crate::sys::EPOLLIN)?;
        }
        std::thread::Builder::new()
            .name("claims".into())
            .spawn(move || {
                let mut events = crate::sys::Events::with_capacity(socks.len());
                loop {
                    if epoll.wait(&mut events, None).is_err() {
                        // EINTR; anything else would repeat, so pause.
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        continue;
                    }
                    for (token, _) in events.iter() {
                        // Edge-triggered: until the queue is empty.
                        while let Ok((asker, _)) = socks[token as usize].accept() {
                            drop(asker);
                        }
                    }
                }
            })?;
        Ok(())
    }
}

/// The claim sockets' backlog: nothing but [`Claims::answer_askers`]
/// accepts on them; a connection only asks who holds the claim.
const CLAIM_BACKLOG: i32 = 128;

/// A claim socket handed over by the process being upgraded: an abstract
/// listening Unix socket with `addr`'s claim name.
pub fn inherited_claim(fd: OwnedFd, addr: SocketAddr) -> io::Result<UnixListener> {
    let lock = UnixListener::from(fd);
    let name = lock.local_addr()?;
    if name.as_abstract_name() != Some(claim_name(addr).as_bytes()) {
        return Err(io::Error::other(format!("not the claim socket of {addr}")));
    }
    Ok(lock)
}

/// The checks, and what to skip.
#[derive(Debug, Default)]
pub struct Preflight {
    /// Addresses whose listening sockets were inherited from the process
    /// being upgraded: they are neither claimed nor probed.
    pub inherited: Vec<SocketAddr>,
    /// `--check`: an address claimed by a running shardhttpd is reported
    /// but not an error (checking a config while the old server runs is
    /// the usual reason to check).
    pub check_only: bool,
    /// The admin listener was inherited from the process being upgraded.
    pub inherited_admin: bool,
    /// Addresses whose sockets systemd passed (socket activation): claimed,
    /// not probed (systemd holds the port too).
    pub activated: Vec<SocketAddr>,
    /// The admin socket was passed by systemd.
    pub activated_admin: bool,
}

impl Preflight {
    /// Run every check. Returns the claims to hold while serving, and notes
    /// for the operator (`--check` prints them).
    pub fn run(&self, config: &Config) -> anyhow::Result<(Claims, Vec<String>)> {
        let mut notes = Vec::new();
        check_root(&config.root).map_err(|e| at_key(config, "root", e))?;
        for (i, site) in config.sites.iter().enumerate() {
            check_root(&site.root).map_err(|e| at_key(config, &format!("sites[{i}].root"), e))?;
        }
        if let Some(path) = &config.access_log {
            check_access_log(path).map_err(|e| at_key(config, "access_log", e))?;
        }
        check_tls(config)?;
        let mut claims = Claims::default();
        let tls_listen = config.tls.iter().flat_map(|t| t.listen.iter());
        for &addr in config.listen.iter().chain(tls_listen) {
            if addr.port() == 0 || self.inherited.contains(&addr) {
                continue;
            }
            let key = if config.listen.contains(&addr) {
                "listen"
            } else {
                "tls_listen"
            };
            let at = |e| at_key(config, key, e);
            match claim(addr) {
                Ok(lock) => claims.locks.push((addr, lock)),
                Err(Claim::HeldByShardhttpd) if self.check_only => {
                    // Still try the privilege: EACCES comes before EADDRINUSE.
                    probe_privilege(addr).map_err(at)?;
                    notes.push(format!(
                        "listen address {addr} is held by the running shardhttpd{}; a reload \
                         or upgrade of it hands the address over (a second instance would be \
                         refused)",
                        holder(addr)
                    ));
                    continue;
                }
                Err(Claim::HeldByShardhttpd) => {
                    return Err(at(setup(format!(
                    "listen address {addr} is already in use by another shardhttpd{} on this host; \
                         stop it first, or choose another `listen` address",
                        holder(addr)
                    ))))
                }
                Err(Claim::Io(e)) => {
                    return Err(at(setup(format!("claiming listen address {addr}: {e}"))))
                }
            }
            if !self.activated.contains(&addr) {
                probe(addr, "listen").map_err(at)?;
            }
        }
        let admin = config.admin;
        if admin.port() != 0 && !self.inherited_admin {
            let at = |e| at_key(config, "admin", e);
            // Claimed like a listen address, so that `--check` next to the
            // running server tells its admin socket from a foreign one.
            match claim(admin) {
                Ok(lock) => claims.locks.push((admin, lock)),
                Err(Claim::HeldByShardhttpd) if self.check_only => {
                    probe_privilege(admin).map_err(at)?;
                    notes.push(format!(
                        "admin address {admin} is held by the running shardhttpd{}; a reload \
                         or upgrade of it hands the address over (a second instance would be \
                         refused)",
                        holder(admin)
                    ));
                    return Ok((claims, notes));
                }
                Err(Claim::HeldByShardhttpd) => {
                    return Err(at(setup(format!(
                        "admin address {admin} is already in use by another shardhttpd{} on \
                         this host; stop it first, or choose another `admin` address",
                        holder(admin)
                    ))))
                }
                Err(Claim::Io(e)) => {
                    return Err(at(setup(format!("claiming admin address {admin}: {e}"))))
                }
            }
            // The admin socket has no SO_REUSEPORT: a bind is the whole
            // check, and anything else there fails it, `--check` included.
            if !self.activated_admin {
                probe(admin, "admin").map_err(at)?;
            }
        }
        Ok((claims, notes))
    }
}

/// `e` led by the flag, or the config file and line, that gave `key`
/// (issue 36: every error names its line, those found after validation
/// too); still a [`SetupError`].
fn at_key(config: &Config, key: &str, e: anyhow::Error) -> anyhow::Error {
    match config.origin(key) {
        Some(location) => setup(format!("{location}: {e:#}")),
        None => e,
    }
}

/// The certificate and key load: every pair parses, each key matches its
/// certificate, and each certificate is within its validity period. A
/// `--check` and a start fail here, before any build, when one does not;
/// the error names the config key and the file.
fn check_tls(config: &Config) -> anyhow::Result<()> {
    if let Some(tls) = &config.tls {
        if let Some(acme) = &config.acme {
            crate::acme::state::check_dir_readonly(&acme.state_dir)
                .map_err(|e| setup(format!("{e:#}")))?;
        }
        // ACME's files are made at start (a placeholder until the CA
        // issues); one not there yet is not an error.
        let pairs: Vec<_> = tls
            .pairs
            .iter()
            .filter(|p| !p.acme || crate::acme::state::held(&p.cert).is_some())
            .cloned()
            .collect();
        if pairs.is_empty() {
            return Ok(());
        }
        let set = crate::tls::load_all(&pairs, &crate::tls::provider()).map_err(|e| {
            let mut msg = format!("{e:#}");
            if let Some(lines) = &config.key_lines {
                msg = lines.locate(&msg);
            }
            if msg.contains("does not match the certificate") {
                msg.push_str(
                    "; give the key the certificate was issued for (the two files may be \
                     swapped, or one of them is from an older issue)",
                );
            }
            setup(msg)
        })?;
        crate::tls::warn_unreachable(&set);
        if let Some(path) = &tls.ticket_key_file {
            crate::tls::tickets::read_key_file(path).map_err(|e| setup(format!("{e:#}")))?;
        }
    }
    Ok(())
}

/// The root can be listed and its entries reached as this user.
fn check_root(root: &Path) -> anyhow::Result<()> {
    let mut entries = std::fs::read_dir(root).map_err(|e| {
        setup(match e.kind() {
            io::ErrorKind::PermissionDenied => format!(
                "root {} is not readable by this user (uid {}); grant read and search \
                 permission (e.g. chmod o+rx, or run as its owner)",
                root.display(),
                current_uid()
            ),
            io::ErrorKind::NotFound => format!("root {} does not exist", root.display()),
            _ => format!("root {}: {e}", root.display()),
        })
    })?;
    // Listing needs read permission; reaching an entry needs search (x).
    if let Some(Ok(entry)) = entries.next() {
        if let Err(e) = std::fs::symlink_metadata(entry.path()) {
            if e.kind() == io::ErrorKind::PermissionDenied {
                return Err(setup(format!(
                    "root {} can be listed but not entered by this user (uid {}): it lacks search (x) permission",
                    root.display(),
                    current_uid()
                )));
            }
        }
    }
    Ok(())
}

/// The access log opens for append (creating it), in a directory that exists.
fn check_access_log(path: &Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(setup(format!(
                "access_log {}: {} is not a directory",
                path.display(),
                dir.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(setup(format!(
                "access_log {}: directory {} does not exist; create it (systemd: LogsDirectory=)",
                path.display(),
                dir.display()
            )))
        }
        Err(e) => return Err(setup(format!("access_log {}: {e}", path.display()))),
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
        .map_err(|e| {
            setup(match e.kind() {
                io::ErrorKind::PermissionDenied => format!(
                    "access_log {} cannot be opened for writing by this user (uid {})",
                    path.display(),
                    current_uid()
                ),
                _ => format!("access_log {}: {e}", path.display()),
            })
        })
}

enum Claim {
    HeldByShardhttpd,
    Io(io::Error),
}

/// `" (pid N)"` for the process holding `addr`'s claim, when it can be told.
fn holder(addr: SocketAddr) -> String {
    std::os::unix::net::SocketAddr::from_abstract_name(claim_name(addr).as_bytes())
        .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a))
        .and_then(|s| crate::sys::peer_pid(&s))
        .map(|pid| format!(" (pid {pid})"))
        .unwrap_or_default()
}

fn claim_name(addr: SocketAddr) -> String {
    format!("shardhttpd/listen/{addr}")
}

/// Take the per-address lock: an abstract Unix socket, unique per address
/// within the network namespace and released when the process exits.
fn claim(addr: SocketAddr) -> Result<UnixListener, Claim> {
    let name = claim_name(addr);
    let unix =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).map_err(Claim::Io)?;
    UnixListener::bind_addr(&unix).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => Claim::HeldByShardhttpd,
        _ => Claim::Io(e),
    })
}

/// Bind `addr` without `SO_REUSEPORT` and close it: fails with EADDRINUSE
/// when any other socket is bound there, even one with `SO_REUSEPORT`.
fn probe(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    bind_plain(addr)
        .map(drop)
        .map_err(|e| bind_error(what, addr, &e))
}

/// The privilege part of a bind alone: a port already in use answers
/// EADDRINUSE only after the permission check passed.
fn probe_privilege(addr: SocketAddr) -> anyhow::Result<()> {
    match bind_plain(addr) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            Err(bind_error("listen", addr, &e))
        }
        _ => Ok(()),
    }
}

/// A plain bind, as `TcpListener::bind` would do, but without listening.
fn bind_plain(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.cloexec(),
        Some(Protocol::TCP),
    )?;
    // SO_REUSEADDR only lets a port in TIME_WAIT be reused; it never lets
    // two sockets bind the same listening port.
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// A bind failure in the operator's words, with the fix.
pub fn bind_error(what: &str, addr: SocketAddr, e: &io::Error) -> anyhow::Error {
    let msg = match e.kind() {
        io::ErrorKind::AddrInUse => format!(
            "{what} address {addr} is already in use by another process; stop it \
             (`ss -ltnp 'sport = :{}'` shows which) or choose another address",
            addr.port()
        ),
        io::ErrorKind::PermissionDenied => format!(
            "{what} address {addr}: permission denied: ports below {} need \
             CAP_NET_BIND_SERVICE (systemd: AmbientCapabilities=CAP_NET_BIND_SERVICE; \
             or `setcap cap_net_bind_service=+ep` on the binary), or use a port of {} or more",
            unprivileged_port_start(),
            unprivileged_port_start()
        ),
        io::ErrorKind::AddrNotAvailable => {
            format!("{what} address {addr} is not an address of this host")
        }
        _ => format!("binding {what} address {addr}: {e}"),
    };
    setup(msg)
}

/// The first port an unprivileged process may bind (usually 1024).
fn unprivileged_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024)
}

/// The process's real uid, from `/proc` (no libc call needed).
fn current_uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into())
}

/// Bind the admin listener (plain, no `SO_REUSEPORT`), with the bind error
/// worded like the listen addresses'.
pub fn bind_admin(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    crate::metrics::admin::bind(addr).map_err(|e| bind_error("admin", addr, &e))
}
