//! Binary upgrade by listener handover (SIGUSR2), both sides of it.
//!
//! The old process starts the new binary with its own arguments and hands it
//! every listening socket as an inherited fd, named in
//! [`LISTEN_FDS_ENV`] (`fd=kind/shard/address;…`). The new process adopts the
//! sockets for the addresses it is configured for, builds its snapshot,
//! starts its shards, and then writes `ready pid=… adopted=fd,…` on the pipe
//! named in [`READY_FD_ENV`]. Only then does the old process stop accepting
//! and drain. The sockets never close in between, so the kernel's accept
//! queues carry over: no connection is refused or reset. HTTP/3's UDP
//! sockets go across too (`udp`), with a way back for the packets of the
//! QUIC connections the old process keeps while it drains.

mod udp;

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

pub use udp::QuicPassed;
use udp::{InheritedQuic, QUIC_FDS_ENV};

/// The inherited listening sockets: `fd=kind/shard/address`, `;`-separated.
pub const LISTEN_FDS_ENV: &str = "SHARDHTTPD_LISTEN_FDS";
/// The inherited write end of the readiness pipe.
pub const READY_FD_ENV: &str = "SHARDHTTPD_UPGRADE_FD";
/// The inherited address claims (`preflight`): `fd=address`, `;`-separated.
/// Apart from the sockets' list, so a binary that predates it ignores it.
pub const CLAIM_FDS_ENV: &str = "SHARDHTTPD_CLAIM_FDS";
/// systemd's socket activation variables: never passed on (the sockets are
/// handed over in [`LISTEN_FDS_ENV`]).
const ACTIVATION_ENV: [&str; 3] = ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"];

/// Why an upgrade failed when the new process exited by itself; its exit
/// status is added once it is reaped.
const EXITED_EARLY: &str = "the new process exited before it was ready";

/// How often the waiting old process checks whether it was told to stop.
const POLL_STEP: Duration = Duration::from_millis(100);

/// What a passed socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A shard's HTTP listener (`listen`).
    Listen,
    /// A shard's HTTPS listener (`tls_listen`).
    Tls,
    /// The admin listener.
    Admin,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Listen => "listen",
            Kind::Tls => "tls",
            Kind::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        match s {
            "listen" => Some(Kind::Listen),
            "tls" => Some(Kind::Tls),
            "admin" => Some(Kind::Admin),
            _ => None,
        }
    }
}

/// What an upgrade hands the new process: the listening sockets, the
/// claims on their addresses and HTTP/3's sockets (fds this process keeps
/// open meanwhile).
pub struct Handed {
    pub sockets: Vec<Passed>,
    pub claims: Vec<(RawFd, SocketAddr)>,
    pub quic: Option<QuicPassed>,
}

/// One socket named in [`LISTEN_FDS_ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    pub fd: RawFd,
    pub kind: Kind,
    pub shard: usize,
    pub addr: SocketAddr,
}

pub fn encode(list: &[Passed]) -> String {
    list.iter()
        .map(|p| format!("{}={}/{}/{}", p.fd, p.kind.label(), p.shard, p.addr))
        .collect::<Vec<_>>()
        .join(";")
}

pub fn decode(s: &str) -> anyhow::Result<Vec<Passed>> {
    let mut out = Vec::new();
    for item in s.split(';').filter(|i| !i.is_empty()) {
        let parsed = (|| {
            let (fd, rest) = item.split_once('=')?;
            let mut parts = rest.splitn(3, '/');
            Some(Passed {
                fd: fd.parse().ok()?,
                kind: Kind::parse(parts.next()?)?,
                shard: parts.next()?.parse().ok()?,
                addr: parts.next()?.parse().ok()?,
            })
        })();
        match parsed {
            Some(p) => out.push(p),
            None => bail!("{LISTEN_FDS_ENV}: bad entry `{item}`"),
        }
    }
    Ok(out)
}

fn encode_claims(claims: &[(RawFd, SocketAddr)]) -> String {
    claims
        .iter()
        .map(|(fd, addr)| format!("{fd}={addr}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn decode_claims(s: &str) -> anyhow::Result<Vec<(RawFd, SocketAddr)>> {
    s.split(';')
        .filter(|i| !i.is_empty())
        .map(|item| {
            item.split_once('=')
                .and_then(|(fd, addr)| Some((fd.parse().ok()?, addr.parse().ok()?)))
                .with_context(|| format!("{CLAIM_FDS_ENV}: bad entry `{item}`"))
        })
        .collect()
}

/// A configured address adopts a passed socket on the same address, or, if
/// it asks for port 0, on the same IP with the port the old process got.
fn matches(want: SocketAddr, have: SocketAddr) -> bool {
    want == have || (want.port() == 0 && want.ip() == have.ip())
}

/// The sockets this process inherited from the one it replaces.
pub struct Inherited {
    listen: Vec<(Passed, TcpListener)>,
    admin: Option<(Passed, TcpListener)>,
    ready: Option<File>,
    adopted: Vec<RawFd>,
    /// The addresses of the sockets adopted.
    adopted_addrs: Vec<SocketAddr>,
    claims: Vec<(SocketAddr, UnixListener)>,
    quic: Option<InheritedQuic>,
}

impl Inherited {
    /// Read the environment; nothing inherited when this is not an upgrade.
    /// Each named fd is checked to be a listening TCP socket on the address
    /// its entry says.
    pub fn from_env() -> anyhow::Result<Inherited> {
        let mut inherited = Inherited {
            listen: Vec::new(),
            admin: None,
            ready: None,
            adopted: Vec::new(),
            adopted_addrs: Vec::new(),
            claims: Vec::new(),
            quic: None,
        };
        if let Some(fd) = std::env::var_os(READY_FD_ENV) {
            let fd: RawFd = fd
                .to_str()
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("{READY_FD_ENV}: not an fd number"))?;
            let pipe = crate::sys::take_inherited(fd)
                .with_context(|| format!("{READY_FD_ENV}: fd {fd}"))?;
            inherited.ready = Some(File::from(pipe));
        }
        if let Some(list) = std::env::var_os(CLAIM_FDS_ENV) {
            let list = list
                .into_string()
                .map_err(|_| anyhow::anyhow!("{CLAIM_FDS_ENV}: not UTF-8"))?;
            for (fd, addr) in decode_claims(&list)? {
                let taken = crate::sys::take_inherited(fd)
                    .and_then(|fd| crate::preflight::inherited_claim(fd, addr))
                    .with_context(|| format!("{CLAIM_FDS_ENV}: fd {fd}"))?;
                inherited.claims.push((addr, taken));
            }
        }
        if let Some(list) = std::env::var_os(QUIC_FDS_ENV) {
            let list = list
                .into_string()
                .map_err(|_| anyhow::anyhow!("{QUIC_FDS_ENV}: not UTF-8"))?;
            inherited.quic = Some(InheritedQuic::take(udp::decode(&list)?)?);
        }
        let Some(list) = std::env::var_os(LISTEN_FDS_ENV) else {
            return Ok(inherited);
        };
        let list = list
            .into_string()
            .map_err(|_| anyhow::anyhow!("{LISTEN_FDS_ENV}: not UTF-8"))?;
        for passed in decode(&list)? {
            let fd = crate::sys::take_inherited(passed.fd)
                .with_context(|| format!("{LISTEN_FDS_ENV}: fd {}", passed.fd))?;
            let listener = check_listener(fd, passed.addr)
                .with_context(|| format!("{LISTEN_FDS_ENV}: fd {}", passed.fd))?;
            match passed.kind {
                Kind::Listen | Kind::Tls => inherited.listen.push((passed, listener)),
                Kind::Admin => inherited.admin = Some((passed, listener)),
            }
        }
        Ok(inherited)
    }

    /// Started by SIGUSR2 in an older process (asked before [`ready`](Self::ready)).
    pub fn is_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// Every passed listening socket of `kind` for `want`, in the old
    /// shards' order: those of the first matching address still unclaimed.
    pub fn take_listen(&mut self, want: SocketAddr, kind: Kind) -> Vec<TcpListener> {
        let Some(addr) = self
            .listen
            .iter()
            .find(|(p, _)| p.kind == kind && matches(want, p.addr))
            .map(|(p, _)| p.addr)
        else {
            return Vec::new();
        };
        let (mine, rest) = std::mem::take(&mut self.listen)
            .into_iter()
            .partition(|(p, _)| p.kind == kind && p.addr == addr);
        self.listen = rest;
        let mut mine: Vec<(Passed, TcpListener)> = mine;
        mine.sort_by_key(|(p, _)| p.shard);
        self.adopted.extend(mine.iter().map(|(p, _)| p.fd));
        self.adopted_addrs.push(addr);
        mine.into_iter().map(|(_, l)| l).collect()
    }

    /// The passed admin socket, if it is for `want`.
    pub fn take_admin(&mut self, want: SocketAddr) -> Option<TcpListener> {
        if !self
            .admin
            .as_ref()
            .is_some_and(|(p, _)| matches(want, p.addr))
        {
            return None;
        }
        let (passed, listener) = self.admin.take()?;
        self.adopted.push(passed.fd);
        self.adopted_addrs.push(passed.addr);
        Some(listener)
    }

    /// This process's QUIC generation: one past its predecessor's, 0 for
    /// a process started afresh.
    pub fn quic_generation(&self) -> u8 {
        self.quic.as_ref().map_or(0, InheritedQuic::generation)
    }

    /// The passed UDP sockets for `want`, in shard order, when the old
    /// process ran `shards` shards too (see `InheritedQuic::take_udp`).
    pub fn take_quic(&mut self, want: SocketAddr, shards: usize) -> Option<Vec<UdpSocket>> {
        self.quic
            .as_mut()?
            .take_udp(want, shards, &mut self.adopted)
    }

    /// The old process's generation and its shards' inboxes, once some
    /// QUIC sockets were taken over.
    pub fn take_quic_forward(&mut self) -> Option<(u8, Vec<UnixDatagram>)> {
        self.quic.as_mut()?.take_forward()
    }

    /// The claims on the addresses this process adopted (call after the
    /// `take_` calls); the claims on the others close here, and are
    /// released when the old process exits.
    pub fn take_claims(&mut self) -> Vec<(SocketAddr, UnixListener)> {
        let adopted = &self.adopted_addrs;
        std::mem::take(&mut self.claims)
            .into_iter()
            .filter(|(addr, _)| adopted.contains(addr))
            .collect()
    }

    /// Close what no configured address adopted: the old process drains
    /// those sockets' queues before it closes them too.
    pub fn close_rest(&mut self) {
        for (p, _) in self.listen.drain(..) {
            tracing::info!(
                shard = p.shard,
                "inherited socket not configured any more; the old process drains it addr={}",
                p.addr
            );
        }
        self.admin = None;
    }

    /// Close the QUIC sockets no address took (call after `take_quic`):
    /// kept, they would hold their places in the groups unread.
    pub fn close_quic_rest(&mut self) {
        self.quic = None;
    }

    /// Tell the old process this one is serving, naming the fds adopted.
    pub fn ready(&mut self) -> anyhow::Result<()> {
        let Some(mut pipe) = self.ready.take() else {
            return Ok(());
        };
        let adopted: Vec<String> = self.adopted.iter().map(|fd| fd.to_string()).collect();
        let line = format!(
            "ready pid={} adopted={}\n",
            std::process::id(),
            adopted.join(",")
        );
        pipe.write_all(line.as_bytes())
            .context("telling the old process we are ready")?;
        Ok(())
    }
}

/// The fd must be a listening TCP socket bound to `addr`.
fn check_listener(fd: OwnedFd, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = socket2::Socket::from(fd);
    if socket.r#type()? != socket2::Type::STREAM || !socket.is_listener()? {
        bail!("not a listening stream socket");
    }
    bound_to(&socket, addr)?;
    Ok(socket.into())
}

/// The socket must be bound to `addr`.
fn bound_to(socket: &socket2::Socket, addr: SocketAddr) -> anyhow::Result<()> {
    let local = socket.local_addr()?.as_socket();
    if local != Some(addr) {
        bail!("bound to {local:?}, not {addr}");
    }
    Ok(())
}

/// The new process is serving.
#[derive(Debug)]
pub struct Ready {
    pub pid: u32,
    /// The passed fds it adopted.
    pub adopted: Vec<RawFd>,
}

/// Start `binary` with `args`, hand it `passed` (fds of this process, kept
/// open by the caller), and wait up to `timeout` for it to say it is ready.
/// `cancel` (a shutdown started meanwhile) kills it. On failure the new
/// process has been stopped and reaped, and the error says why.
pub fn start(
    binary: &Path,
    args: &[OsString],
    handed: &Handed,
    timeout: Duration,
    cancel: &AtomicBool,
    env: &[(&str, &str)],
) -> anyhow::Result<Ready> {
    let (read_end, write_end) = crate::sys::pipe().context("creating the readiness pipe")?;
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .env_remove(crate::reload::RELOAD_ENV)
        .envs(env.iter().copied())
        .env(LISTEN_FDS_ENV, encode(&handed.sockets))
        .env(CLAIM_FDS_ENV, encode_claims(&handed.claims))
        .env(READY_FD_ENV, write_end.as_raw_fd().to_string())
        .stdin(Stdio::null());
    for k in ACTIVATION_ENV {
        cmd.env_remove(k);
    }
    match &handed.quic {
        Some(quic) => cmd.env(QUIC_FDS_ENV, udp::encode(quic)),
        None => cmd.env_remove(QUIC_FDS_ENV),
    };
    let mut fds: Vec<RawFd> = handed.sockets.iter().map(|p| p.fd).collect();
    fds.extend(handed.claims.iter().map(|&(fd, _)| fd));
    fds.extend(handed.quic.iter().flat_map(QuicPassed::fds));
    fds.push(write_end.as_raw_fd());
    crate::sys::inherit_fds(&mut cmd, fds);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    // Only the child holds the write end now: its exit is end of file here.
    drop(write_end);
    tracing::info!(
        pid = child.id(),
        "upgrade: new process started binary={}",
        binary.display()
    );
    let mut pipe = File::from(read_end);
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::new();
    let outcome = loop {
        if cancel.load(Ordering::Acquire) {
            break Err(anyhow::anyhow!("shutting down"));
        }
        let now = Instant::now();
        if now >= deadline {
            break Err(anyhow::anyhow!(
                "the new process was not ready within {:?}",
                timeout
            ));
        }
        match crate::sys::wait_readable(&pipe, POLL_STEP.min(deadline - now)) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => break Err(anyhow::Error::new(e).context("waiting on the readiness pipe")),
        }
        let mut chunk = [0u8; 512];
        match pipe.read(&mut chunk) {
            Ok(0) => {
                // Give an exiting process a moment to exit, so the log can
                // say how it ended (it is reaped below, after its group).
                let pid = child.id();
                let mut exited = false;
                for _ in 0..20 {
                    if crate::sys::child_exited(pid).unwrap_or(true) {
                        exited = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                break Err(if exited {
                    anyhow::anyhow!(EXITED_EARLY)
                } else {
                    anyhow::anyhow!("the new process closed its readiness pipe")
                });
            }
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.ends_with(b"\n") {
                    break parse_ready(&buf);
                }
                if buf.len() > 4096 {
                    break Err(anyhow::anyhow!("unexpected readiness message"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(anyhow::Error::new(e).context("reading the readiness pipe")),
        }
    };
    match outcome {
        Ok(ready) => Ok(ready),
        Err(e) => {
            // The whole group: a wrapper that has not exec'ed yet may have
            // started processes of its own, and they hold the passed
            // sockets too. Its leader is not reaped yet, so the group's id
            // is still its own.
            if let Err(k) = crate::sys::kill_group(child.id()) {
                tracing::warn!(error = %k, "upgrade: could not stop the new process group");
                let _ = child.kill();
            }
            match child.wait() {
                Ok(status) if e.to_string() == EXITED_EARLY => Err(anyhow::anyhow!(
                    "the new process exited ({status}) before it was ready"
                )),
                _ => Err(e),
            }
        }
    }
}

fn parse_ready(line: &[u8]) -> anyhow::Result<Ready> {
    let line = std::str::from_utf8(line).context("readiness message not UTF-8")?;
    let mut pid = None;
    let mut adopted = Vec::new();
    let mut words = line.split_whitespace();
    if words.next() != Some("ready") {
        bail!("unexpected readiness message {line:?}");
    }
    for word in words {
        if let Some(v) = word.strip_prefix("pid=") {
            pid = v.parse().ok();
        } else if let Some(v) = word.strip_prefix("adopted=") {
            for fd in v.split(',').filter(|s| !s.is_empty()) {
                adopted.push(fd.parse().context("bad fd in readiness message")?);
            }
        }
    }
    Ok(Ready {
        pid: pid.context("readiness message without pid")?,
        adopted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_round_trip() {
        let list = vec![
            Passed {
                fd: 5,
                kind: Kind::Listen,
                shard: 0,
                addr: "127.0.0.1:8080".parse().unwrap(),
            },
            Passed {
                fd: 6,
                kind: Kind::Listen,
                shard: 1,
                addr: "[::1]:8080".parse().unwrap(),
            },
            Passed {
                fd: 7,
                kind: Kind::Tls,
                shard: 0,
                addr: "127.0.0.1:8443".parse().unwrap(),
            },
            Passed {
                fd: 9,
                kind: Kind::Admin,
                shard: 0,
                addr: "127.0.0.1:9180".parse().unwrap(),
            },
        ];
        let s = encode(&list);
        assert_eq!(
            s,
            "5=listen/0/127.0.0.1:8080;6=listen/1/[::1]:8080;7=tls/0/127.0.0.1:8443;9=admin/0/127.0.0.1:9180"
        );
        assert_eq!(decode(&s).unwrap(), list);
        assert!(decode("5=listen/x/127.0.0.1:1").is_err());
        assert!(decode("5=tcp/0/127.0.0.1:1").is_err());
        assert!(decode("").unwrap().is_empty());
        let claims = vec![
            (10, "127.0.0.1:8080".parse().unwrap()),
            (11, "[::1]:9180".parse().unwrap()),
        ];
        let s = encode_claims(&claims);
        assert_eq!(s, "10=127.0.0.1:8080;11=[::1]:9180");
        assert_eq!(decode_claims(&s).unwrap(), claims);
        assert!(decode_claims("x=127.0.0.1:1").is_err());
    }

    #[test]
    fn port_zero_adopts_the_old_port() {
        let have: SocketAddr = "127.0.0.1:41000".parse().unwrap();
        assert!(matches("127.0.0.1:0".parse().unwrap(), have));
        assert!(matches(have, have));
        assert!(!matches("127.0.0.1:41001".parse().unwrap(), have));
        assert!(!matches("127.0.0.2:0".parse().unwrap(), have));
    }

    #[test]
    fn readiness_message() {
        let r = parse_ready(b"ready pid=42 adopted=5,6,9\n").unwrap();
        assert_eq!(r.pid, 42);
        assert_eq!(r.adopted, vec![5, 6, 9]);
        assert!(parse_ready(b"nope\n").is_err());
        assert!(parse_ready(b"ready adopted=\n").is_err());
    }
}
