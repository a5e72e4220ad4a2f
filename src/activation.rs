//! systemd socket activation (`sd_listen_fds(3)`): listening sockets passed
//! as fds 3, 4, … with `LISTEN_FDS`, `LISTEN_PID` and, optionally,
//! `LISTEN_FDNAMES`.
//!
//! Each passed socket is matched to a configured address by the address it
//! is bound to (`getsockname`): a `listen`, `tls_listen` or the `admin`
//! address. A socket named `listen`, `tls` or `admin` (`FileDescriptorName=`)
//! must be bound to an address of that kind; other names (systemd's default
//! is the socket unit's name) are not read. A passed socket that no
//! configured address names, or that is not a listening TCP socket, refuses
//! the start: its connections would queue with nobody to accept them.
//! Configured addresses that systemd did not pass are bound as usual.
//!
//! The environment is removed once read, so nothing this process starts (the
//! new binary of an upgrade) takes the sockets for its own: an upgrade hands
//! them over like any other listening socket.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::RawFd;

use anyhow::Context;
use socket2::Socket;

use crate::preflight::SetupError;

/// The first passed fd (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;

/// A passed socket's `FileDescriptorName=` that says what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Listen,
    Tls,
    Admin,
}

impl Role {
    fn from_name(name: &str) -> Option<Role> {
        match name {
            "listen" | "http" => Some(Role::Listen),
            "tls" | "tls_listen" | "https" => Some(Role::Tls),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    fn key(self) -> &'static str {
        match self {
            Role::Listen => "listen",
            Role::Tls => "tls_listen",
            Role::Admin => "admin",
        }
    }
}

/// One socket systemd passed.
#[derive(Debug)]
pub struct Activated {
    pub fd: RawFd,
    /// Its `FileDescriptorName=` (systemd's default: the socket unit's name).
    pub name: String,
    pub addr: SocketAddr,
    /// Bound with `SO_REUSEPORT` (`ReusePort=yes`): the other shards can
    /// bind sockets of their own beside it.
    pub reuse_port: bool,
    pub listener: TcpListener,
}

/// The fds `LISTEN_*` names for this process, with their names. `None`: not
/// socket-activated (no `LISTEN_FDS`, or `LISTEN_PID` names another
/// process, which passed its environment on by mistake).
pub fn parse_env(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    names: Option<&str>,
    our_pid: u32,
) -> anyhow::Result<Option<Vec<(RawFd, String)>>> {
    let Some(count) = listen_fds else {
        return Ok(None);
    };
    // sd_listen_fds(3): LISTEN_PID must name this process.
    match listen_pid.map(|p| p.trim().parse::<u32>()) {
        Some(Ok(pid)) if pid == our_pid => {}
        Some(Ok(_)) => return Ok(None),
        Some(Err(_)) => anyhow::bail!("LISTEN_PID={:?} is not a process id", listen_pid),
        None => return Ok(None),
    }
    let count: i32 = count
        .trim()
        .parse()
        .ok()
        .filter(|&n| n >= 0)
        .with_context(|| format!("LISTEN_FDS={count:?} is not a count of fds"))?;
    let names: Vec<&str> = names.map(|n| n.split(':').collect()).unwrap_or_default();
    Ok(Some(
        (0..count)
            .map(|i| {
                let name = names.get(i as usize).copied().unwrap_or("unknown");
                (FIRST_FD + i, name.to_owned())
            })
            .collect(),
    ))
}

/// The sockets systemd passed to this process (empty when it passed none),
/// each checked to be a listening TCP socket and made ready for a shard
/// (non-blocking, `TCP_NODELAY` for the connections it accepts). The
/// `LISTEN_*` variables are removed.
pub fn from_env() -> anyhow::Result<Vec<Activated>> {
    let var = |k: &str| std::env::var(k).ok();
    let parsed = parse_env(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        var("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    );
    // Read once, gone for anything started later. Called before any thread
    // is spawned, so nothing reads the environment meanwhile.
    for k in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(k);
    }
    let Some(passed) = parsed.map_err(|e| setup(format!("systemd socket activation: {e:#}")))?
    else {
        return Ok(Vec::new());
    };
    passed
        .into_iter()
        .map(|(fd, name)| {
            take(fd, &name).map_err(|e| {
                setup(format!(
                    "systemd socket activation: fd {fd} (`{name}`): {e}"
                ))
            })
        })
        .collect()
}

fn take(fd: RawFd, name: &str) -> std::io::Result<Activated> {
    let socket = Socket::from(crate::sys::take_inherited(fd)?);
    let tcp = matches!(
        socket.domain(),
        Ok(d) if d == socket2::Domain::IPV4 || d == socket2::Domain::IPV6
    ) && socket.r#type()? == socket2::Type::STREAM;
    let addr = socket.local_addr()?.as_socket();
    let (Some(addr), true, true) = (addr, tcp, socket.is_listener()?) else {
        return Err(std::io::Error::other(
            "not a listening TCP socket; give the socket unit ListenStream= lines with an IP \
             address and port (Accept=no)",
        ));
    };
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit it (see `server::sockets`).
    socket.set_nodelay(true)?;
    let reuse_port = socket.reuse_port()?;
    Ok(Activated {
        fd,
        name: name.to_owned(),
        addr,
        reuse_port,
        listener: socket.into(),
    })
}

fn setup(msg: String) -> anyhow::Error {
    anyhow::Error::new(SetupError(msg))
}

/// A configured address a passed socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `addrs[i]` of the listening addresses (cleartext, then TLS).
    Listen(usize),
    Admin,
}

/// Match each passed socket (`name`, bound address) to a configured
/// address: `listening[i]` is (address, is TLS). Errors name the socket,
/// what is configured and how to make them agree.
pub fn assign(
    passed: &[(&str, SocketAddr)],
    listening: &[(SocketAddr, bool)],
    admin: SocketAddr,
) -> Result<Vec<Target>, String> {
    let mut out = Vec::with_capacity(passed.len());
    for &(name, have) in passed {
        let role = Role::from_name(name);
        let found = listening
            .iter()
            .position(|&(want, _)| same(want, have))
            .map(|i| {
                (
                    Target::Listen(i),
                    if listening[i].1 {
                        Role::Tls
                    } else {
                        Role::Listen
                    },
                )
            })
            .or_else(|| same(admin, have).then_some((Target::Admin, Role::Admin)));
        match (found, role) {
            (Some((_, is)), Some(named)) if named != is => {
                return Err(format!(
                    "the socket named `{name}` is bound to {have}, which the configuration \
                     gives to `{}`, not `{}`; fix the socket unit's FileDescriptorName= or \
                     the configuration",
                    is.key(),
                    named.key()
                ))
            }
            (Some((target, _)), _) => out.push(target),
            (None, _) => return Err(unmatched(name, have, listening, admin)),
        }
    }
    Ok(out)
}

/// A configured address takes a passed socket bound to the same address.
/// Not a configured port 0 (any port the kernel picks), which would make
/// `listen` and `admin` on port 0 take each other's sockets.
fn same(want: SocketAddr, have: SocketAddr) -> bool {
    want == have
}

fn unmatched(
    name: &str,
    have: SocketAddr,
    listening: &[(SocketAddr, bool)],
    admin: SocketAddr,
) -> String {
    let configured: Vec<String> = listening
        .iter()
        .map(|&(a, tls)| format!("{} {a}", if tls { "tls_listen" } else { "listen" }))
        .chain(std::iter::once(format!("admin {admin}")))
        .collect();
    let mut msg = format!(
        "systemd passed a socket (`{name}`) bound to {have}, but no `listen`, `tls_listen` or \
         `admin` address is {have} (configured: {}); make the socket unit's ListenStream= \
         lines and the configuration name the same addresses",
        configured.join(", ")
    );
    // `ListenStream=8080` binds [::]:8080 for IPv4 and IPv6 alike.
    if have.ip().is_unspecified() && have.is_ipv6() {
        let v4 = SocketAddr::from(([0, 0, 0, 0], have.port()));
        if listening.iter().any(|&(a, _)| a == v4) || admin == v4 {
            msg.push_str(&format!(
                "; `ListenStream={}` alone binds [::]:{} (IPv4 and IPv6): write \
                 `ListenStream={v4}` for the IPv4 address",
                have.port(),
                have.port()
            ));
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn environment() {
        assert_eq!(parse_env(None, None, None, 7).unwrap(), None);
        // Meant for another process.
        assert_eq!(parse_env(Some("8"), Some("2"), None, 7).unwrap(), None);
        assert_eq!(parse_env(None, Some("2"), None, 7).unwrap(), None);
        assert_eq!(
            parse_env(Some("7"), Some("2"), Some("http:admin"), 7).unwrap(),
            Some(vec![(3, "http".into()), (4, "admin".into())])
        );
        assert_eq!(
            parse_env(Some("7"), Some("1"), None, 7).unwrap(),
            Some(vec![(3, "unknown".into())])
        );
        assert!(parse_env(Some("7"), Some("-1"), None, 7).is_err());
        assert!(parse_env(Some("x"), Some("1"), None, 7).is_err());
    }

    #[test]
    fn matched_by_address_and_checked_by_name() {
        let listening = [(a("127.0.0.1:8080"), false), (a("127.0.0.1:8443"), true)];
        let admin = a("127.0.0.1:9180");
        assert_eq!(
            assign(
                &[
                    ("shardhttpd.socket", a("127.0.0.1:8443")),
                    ("admin", a("127.0.0.1:9180")),
                    ("listen", a("127.0.0.1:8080")),
                ],
                &listening,
                admin
            )
            .unwrap(),
            vec![Target::Listen(1), Target::Admin, Target::Listen(0)]
        );
        let err = assign(&[("admin", a("127.0.0.1:8080"))], &listening, admin).unwrap_err();
        assert!(err.contains("gives to `listen`, not `admin`"), "{err}");
        let err = assign(&[("x", a("127.0.0.1:81"))], &listening, admin).unwrap_err();
        assert!(
            err.contains("bound to 127.0.0.1:81") && err.contains("listen 127.0.0.1:8080"),
            "{err}"
        );
        let err = assign(&[("x", a("[::]:80"))], &[(a("0.0.0.0:80"), false)], admin).unwrap_err();
        assert!(err.contains("ListenStream=0.0.0.0:80"), "{err}");
        // Port 0 is the kernel's pick, never a passed socket.
        let zero = [(a("127.0.0.1:0"), false)];
        assert!(assign(&[("x", a("127.0.0.1:41000"))], &zero, admin).is_err());
    }
}
