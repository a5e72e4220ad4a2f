//! The shards' listening sockets: bound (or adopted from the process this
//! one replaces) before the first build, listening once it is there,
//! steered by CPU on request, and duplicated for a SIGUSR2 handover.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, Type};

use crate::activation::{self, Target};
use crate::config::{Config, Steer};
use crate::preflight::{self, Claims, SetupError};
use crate::upgrade::{Inherited, Kind, Passed, QuicPassed};

/// How long the kernel holds a connection that has sent nothing before
/// handing it to `accept` anyway.
const DEFER_ACCEPT_SECS: u32 = 1;

/// Every listening address: `all[..plain]` are cleartext, the rest TLS
/// (in every shard's list).
pub(super) struct Addrs {
    pub(super) all: Vec<SocketAddr>,
    pub(super) plain: usize,
}

impl Addrs {
    pub(super) fn kind_of(&self, i: usize) -> Kind {
        if i < self.plain {
            Kind::Listen
        } else {
            Kind::Tls
        }
    }

    pub(super) fn cleartext(&self) -> &[SocketAddr] {
        &self.all[..self.plain]
    }

    pub(super) fn tls(&self) -> &[SocketAddr] {
        &self.all[self.plain..]
    }
}

/// A shard's socket: adopted from the old process (already listening) or
/// bound here (listening once the snapshot is built).
pub(super) enum ShardSocket {
    Adopted(TcpListener),
    Bound(Socket),
}

/// One shard's sockets: (cleartext, TLS).
pub(super) type Lists = (Vec<ShardSocket>, Vec<ShardSocket>);

/// Each shard's listeners, cleartext first, and how many are cleartext.
pub(super) struct Listening {
    pub(super) per_shard: Vec<Vec<TcpListener>>,
    pub(super) plain_counts: Vec<usize>,
}

/// A listening socket for one shard: `SO_REUSEPORT` lets every shard bind
/// the same address and the kernel spreads connections across them.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    listen(bind_socket(addr)?, backlog)
}

/// Bind a shard socket without listening yet: the address is taken (so a
/// conflict is a start-up error) but connections are refused, not queued,
/// while the first snapshot builds.
fn bind_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        // Keep IPv4 and IPv6 separate: each is named by its own --listen.
        socket.set_only_v6(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listener, which saves a
    // setsockopt per connection. Nagle would hold back a response's tail
    // waiting for an ACK; responses are written whole, so send at once.
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

fn listen(socket: Socket, backlog: u32) -> std::io::Result<TcpListener> {
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    crate::sys::set_defer_accept(&socket, DEFER_ACCEPT_SECS)?;
    Ok(socket.into())
}

/// Bind every socket before the build, so an address in use is reported
/// at once. Port 0: the first shard's socket picks the port and the
/// others join it. Adopted sockets come first: shard i takes the old
/// shard i's socket; with fewer shards than sockets the extra ones go
/// round the shards (none is closed, so none of their queued connections
/// is lost); with more, the other shards bind sockets that join the same
/// reuseport group (or share the socket, when it has no SO_REUSEPORT: one
/// systemd passed). Each shard's list: (cleartext, TLS).
pub(super) fn bind_shards(
    shards: usize,
    addrs: &mut Addrs,
    adopted: Vec<Vec<TcpListener>>,
    claims: &mut Claims,
) -> anyhow::Result<Vec<Lists>> {
    let mut per_shard: Vec<Lists> = (0..shards).map(|_| Default::default()).collect();
    let plain = addrs.plain;
    for (i, (addr, adopted)) in addrs.all.iter_mut().zip(adopted).enumerate() {
        if let Some(first) = adopted.first() {
            *addr = first.local_addr()?;
        }
        let passed = adopted.len();
        // A socket without SO_REUSEPORT (systemd's, without ReusePort=yes)
        // has no group to join: the extra shards share it instead.
        let shared = match adopted.first() {
            Some(first) if !socket2::SockRef::from(first).reuse_port()? => (passed
                ..per_shard.len())
                .map(|j| adopted[j % passed].try_clone())
                .collect::<std::io::Result<Vec<_>>>()?,
            _ => Vec::new(),
        };
        let passed = passed + shared.len();
        for (j, listener) in adopted.into_iter().chain(shared).enumerate() {
            let lists = &mut per_shard[j % shards];
            let target = if i < plain {
                &mut lists.0
            } else {
                &mut lists.1
            };
            target.push(ShardSocket::Adopted(listener));
        }
        for lists in per_shard.iter_mut().skip(passed) {
            let socket =
                bind_socket(*addr).map_err(|e| preflight::bind_error("listen", *addr, &e))?;
            if addr.port() == 0 {
                if let Some(bound) = socket.local_addr()?.as_socket() {
                    *addr = bound;
                    claims.add_picked(bound);
                }
            }
            let target = if i < plain {
                &mut lists.0
            } else {
                &mut lists.1
            };
            target.push(ShardSocket::Bound(socket));
        }
    }
    Ok(per_shard)
}

/// Which configured addresses systemd passed sockets for.
#[derive(Default)]
pub(super) struct ActivatedAddrs {
    /// Listening addresses as configured (port 0 included).
    pub(super) listen: Vec<SocketAddr>,
    pub(super) admin: bool,
}

/// systemd socket activation: each passed socket goes to the configured
/// address it is bound to, as if a process being upgraded had handed it
/// over. Shard 0 takes it; with `ReusePort=yes` the other shards bind
/// their own sockets beside it, as without activation. Without it (or when
/// the kernel refuses to add a socket of this process's user to the group
/// of one systemd created as another user) every shard shares the passed
/// socket's accept queue. An upgrade later hands these sockets over like
/// any other.
pub(super) fn take_activated(
    config: &Config,
    addrs: &Addrs,
    adopted: &mut [Vec<TcpListener>],
    adopted_admin: &mut Option<TcpListener>,
) -> anyhow::Result<ActivatedAddrs> {
    let passed = activation::from_env()?;
    let mut out = ActivatedAddrs::default();
    if passed.is_empty() {
        return Ok(out);
    }
    let listening: Vec<(SocketAddr, bool)> = (0..addrs.all.len())
        .map(|i| (addrs.all[i], addrs.kind_of(i) == Kind::Tls))
        .collect();
    let named: Vec<(&str, SocketAddr)> = passed.iter().map(|p| (p.name.as_str(), p.addr)).collect();
    let targets = activation::assign(&named, &listening, config.admin)
        .map_err(|e| SetupError(format!("systemd socket activation: {e}")))?;
    let shards = config.cpus.len();
    let mut per_addr: Vec<Vec<activation::Activated>> =
        addrs.all.iter().map(|_| Vec::new()).collect();
    for (socket, target) in passed.into_iter().zip(targets) {
        match target {
            Target::Admin if adopted_admin.is_some() || out.admin => {
                return Err(SetupError(format!(
                    "systemd socket activation: a second socket for the admin address {}                      (fd {}); pass it once",
                    socket.addr, socket.fd
                ))
                .into());
            }
            Target::Admin => {
                tracing::info!(fd = socket.fd, name = %socket.name, "socket activation: admin addr={}", socket.addr);
                out.admin = true;
                *adopted_admin = Some(socket.listener);
            }
            Target::Listen(i) => per_addr[i].push(socket),
        }
    }
    for (i, sockets) in per_addr.into_iter().enumerate() {
        if sockets.is_empty() {
            continue;
        }
        let addr = sockets[0].addr;
        for s in &sockets {
            crate::sys::set_defer_accept(&s.listener, DEFER_ACCEPT_SECS)
                .with_context(|| format!("TCP_DEFER_ACCEPT on the passed socket for {addr}"))?;
        }
        let fds: Vec<String> = sockets.iter().map(|s| s.fd.to_string()).collect();
        let beside = sockets.iter().all(|s| s.reuse_port)
            && {
                // The kernel joins a reuseport group only for sockets of the
                // same user: a socket of this process's may be refused.
                match bind_socket(addr) {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "socket activation: cannot bind beside the passed socket (ReusePort=yes, but created by another user?); the shards share it addr={addr}");
                        false
                    }
                }
            };
        let mut listeners: Vec<TcpListener> = sockets.into_iter().map(|s| s.listener).collect();
        if beside || listeners.len() >= shards {
            tracing::info!(fds = %fds.join(","), shards, "socket activation: {} addr={addr}; the other shards bind beside it", addrs.kind_of(i).label());
        } else {
            if config.steer == Steer::Cpu {
                return Err(SetupError(format!(
                    "steer = \"cpu\" needs a socket per shard, but systemd passed {addr} \
                     without ReusePort=yes (or created it as another user than the service's), \
                     so the shards share it; set ReusePort=yes in the socket unit, or steer = \"hash\""
                ))
                .into());
            }
            tracing::info!(fds = %fds.join(","), shards, "socket activation: {} addr={addr}; no ReusePort=yes, so every shard accepts from this one socket", addrs.kind_of(i).label());
            let passed = listeners.len();
            for j in passed..shards {
                let dup = listeners[j % passed].try_clone()?;
                listeners.push(dup);
            }
        }
        out.listen.push(addrs.all[i]);
        adopted[i].extend(listeners);
    }
    Ok(out)
}

/// Every bound socket starts listening (the adopted ones already are).
pub(super) fn start_listening(per_shard: Vec<Lists>, backlog: u32) -> anyhow::Result<Listening> {
    let mut per_shard_listeners = Vec::with_capacity(per_shard.len());
    let mut plain_counts = Vec::with_capacity(per_shard.len());
    for (cleartext, tls_sockets) in per_shard {
        plain_counts.push(cleartext.len());
        let mut listeners = Vec::with_capacity(cleartext.len() + tls_sockets.len());
        for socket in cleartext.into_iter().chain(tls_sockets) {
            listeners.push(match socket {
                ShardSocket::Adopted(listener) => listener,
                ShardSocket::Bound(socket) => {
                    let addr = socket.local_addr()?.as_socket();
                    listen(socket, backlog).with_context(|| format!("listening on {addr:?}"))?
                }
            });
        }
        per_shard_listeners.push(listeners);
    }
    Ok(Listening {
        per_shard: per_shard_listeners,
        plain_counts,
    })
}

/// What a SIGUSR2 upgrade hands over: a duplicate of every socket (the
/// shards and the admin thread own the originals), with its kind, shard
/// and address.
pub(super) fn handover_list(
    listening: &Listening,
    admin_dup: TcpListener,
) -> anyhow::Result<Vec<(Passed, TcpListener)>> {
    let mut handover: Vec<(Passed, TcpListener)> = Vec::new();
    for (shard, listeners) in listening.per_shard.iter().enumerate() {
        for (j, listener) in listeners.iter().enumerate() {
            let dup = listener.try_clone()?;
            let passed = Passed {
                fd: dup.as_raw_fd(),
                kind: if j < listening.plain_counts[shard] {
                    Kind::Listen
                } else {
                    Kind::Tls
                },
                shard,
                addr: listener.local_addr()?,
            };
            handover.push((passed, dup));
        }
    }
    handover.push((
        Passed {
            fd: admin_dup.as_raw_fd(),
            kind: Kind::Admin,
            shard: 0,
            addr: admin_dup.local_addr()?,
        },
        admin_dup,
    ));
    Ok(handover)
}

/// `--steer cpu`: every listener is marked with its shard's CPU, and each
/// reuseport group (one per address, its sockets created in shard order by
/// the caller) gets the program that returns the SYN's CPU's shard index.
pub(super) fn steer_by_cpu(cpus: &[usize], per_shard: &[Vec<TcpListener>]) -> std::io::Result<()> {
    for (&cpu, listeners) in cpus.iter().zip(per_shard) {
        for listener in listeners {
            crate::sys::set_incoming_cpu(listener, cpu)?;
        }
    }
    let program = crate::shard::steer::cpu_program(cpus);
    // The program belongs to the group: attaching it through one member
    // (shard 0's socket) covers every shard's socket of that address.
    for listener in per_shard.first().into_iter().flatten() {
        crate::sys::attach_reuseport_cbpf(listener, &program)?;
    }
    Ok(())
}

/// HTTP/3's sockets: one UDP socket per shard per QUIC address, each
/// address an `SO_REUSEPORT` group in shard order whose BPF program steers
/// packets by connection ID (`quic::cid`), and each shard's inbox for what
/// a successor process forwards.
pub(super) struct QuicSockets {
    pub(super) per_shard: Vec<crate::quic::ShardSockets>,
    pub(super) shared: std::sync::Arc<crate::quic::Shared>,
    /// The addresses bound (a port 0 resolved).
    pub(super) addrs: Vec<SocketAddr>,
    /// What a SIGUSR2 upgrade hands over: duplicates of the UDP sockets
    /// and the peers of the inboxes, owned here.
    pub(super) handover: Option<(QuicPassed, Vec<OwnedFd>)>,
}

impl QuicSockets {
    /// The `Alt-Svc` line for TLS responses: the first address's port.
    pub(super) fn alt_svc(&self) -> String {
        self.addrs
            .first()
            .map_or_else(String::new, |a| self.shared.alt_svc_line(a.port()))
    }
}

/// Bind the QUIC sockets, or take over those a predecessor passed. An
/// address with port 0 takes the port of the TLS listener on the same IP
/// when there is one (so HTTP/3 is where `Alt-Svc` says, beside HTTPS),
/// else the port shard 0's socket got.
pub(super) fn bind_quic(
    config: &Config,
    settings: &crate::config::QuicSettings,
    tls_bound: &[SocketAddr],
    tls: &crate::tls::Tls,
    max_field_section: usize,
    inherited: &mut Inherited,
) -> anyhow::Result<QuicSockets> {
    let shards = config.cpus.len();
    let mut per_shard: Vec<Vec<std::net::UdpSocket>> = (0..shards).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    let program = crate::quic::cid::steer_program(shards);
    for &configured in &settings.listen {
        let mut addr = configured;
        if addr.port() == 0 {
            if let Some(t) = tls_bound.iter().find(|t| t.ip() == addr.ip()) {
                addr.set_port(t.port());
            }
        }
        if let Some(taken) = inherited.take_quic(addr, shards) {
            // The group and its program stay as the predecessor made them.
            addrs.push(taken[0].local_addr()?);
            for (list, udp) in per_shard.iter_mut().zip(taken) {
                list.push(udp);
            }
            continue;
        }
        for (shard, list) in per_shard.iter_mut().enumerate() {
            let socket = udp_socket(addr, settings.socket_buffer)
                .with_context(|| format!("binding QUIC address {addr}"))?;
            let udp: std::net::UdpSocket = socket.into();
            if shard == 0 {
                addr = udp.local_addr()?;
                // The program belongs to the group: attached through shard
                // 0's socket, it covers every shard's.
                crate::sys::attach_reuseport_cbpf(&udp, &program)
                    .context("attaching the QUIC steering program")?;
            }
            list.push(udp);
        }
        addrs.push(addr);
    }
    let forward = match inherited.take_quic_forward() {
        Some((generation, to)) => Some(
            crate::quic::forward::Forward::new(generation, to)
                .context("the previous process's QUIC inboxes")?,
        ),
        None => None,
    };
    let generation = inherited.quic_generation();
    let mut passed = QuicPassed {
        generation,
        udp: Vec::new(),
        forward: Vec::new(),
    };
    let mut owned = Vec::new();
    let mut sockets = Vec::with_capacity(shards);
    for (shard, udp) in per_shard.into_iter().enumerate() {
        for u in &udp {
            let dup = OwnedFd::from(u.try_clone()?);
            passed.udp.push((dup.as_raw_fd(), shard, u.local_addr()?));
            owned.push(dup);
        }
        let (inbox, peer) =
            std::os::unix::net::UnixDatagram::pair().context("creating a QUIC inbox")?;
        let peer = OwnedFd::from(peer);
        passed.forward.push((peer.as_raw_fd(), shard));
        owned.push(peer);
        sockets.push(crate::quic::ShardSockets {
            udp,
            inbox: Some(inbox),
        });
    }
    let shared = crate::quic::Shared::new(
        &tls.config,
        settings.clone(),
        max_field_section,
        generation,
        forward,
    )?;
    Ok(QuicSockets {
        per_shard: sockets,
        shared: std::sync::Arc::new(shared),
        addrs,
        handover: Some((passed, owned)),
    })
}

/// A non-blocking UDP socket in `addr`'s `SO_REUSEPORT` group, with
/// `buffer` bytes of room for bursts each way.
fn udp_socket(addr: SocketAddr, buffer: usize) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    // Best effort: capped by net.core.[rw]mem_max.
    let _ = socket.set_recv_buffer_size(buffer);
    let _ = socket.set_send_buffer_size(buffer);
    socket.bind(&addr.into())?;
    Ok(socket)
}
