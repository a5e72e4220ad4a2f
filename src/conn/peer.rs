//! The client's address: the socket's peer, or the one a PROXY header
//! (v1/v2, from a trusted balancer) or `real_ip_header` names. The pure
//! parsing is in `proto::proxy`; here it meets the connection, and a
//! refused one gets its rate-limited warn line.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use super::env::{Scratch, ShardEnv};
use super::{Conn, Reading, Step};
use crate::metrics::{CloseReason, ShardCounters};
use crate::proto::proxy;

/// The client's address, packed into 24 bytes (`Option<SocketAddr>` takes
/// 32) to keep [`Conn`] small. The IPv6 flow label is not kept: nothing
/// reports it.
#[derive(Clone, Copy)]
pub(super) struct Peer {
    ip: [u8; 16],
    scope_id: u32,
    port: u16,
    /// 0: unknown, 4 or 6.
    family: u8,
}

impl Peer {
    pub(super) fn new(addr: Option<SocketAddr>) -> Peer {
        let mut peer = Peer {
            ip: [0; 16],
            scope_id: 0,
            port: 0,
            family: 0,
        };
        match addr {
            Some(SocketAddr::V4(a)) => {
                peer.ip[..4].copy_from_slice(&a.ip().octets());
                peer.port = a.port();
                peer.family = 4;
            }
            Some(SocketAddr::V6(a)) => {
                peer.ip = a.ip().octets();
                peer.scope_id = a.scope_id();
                peer.port = a.port();
                peer.family = 6;
            }
            None => {}
        }
        peer
    }

    #[inline]
    pub(super) fn get(&self) -> Option<SocketAddr> {
        match self.family {
            4 => {
                let [a, b, c, d, ..] = self.ip;
                Some(SocketAddr::from(([a, b, c, d], self.port)))
            }
            6 => Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                self.ip.into(),
                self.port,
                0,
                self.scope_id,
            ))),
            _ => None,
        }
    }

    /// The address to log for a request with raw `head`: from a trusted
    /// peer, the client `real_ip_header` names (`proto::proxy::real_ip`).
    /// Only called with `real_ip_header` set and an access log open.
    #[cold]
    #[inline(never)]
    pub(super) fn real(&self, head: &[u8], name: &str, trusted: &[proxy::Cidr]) -> Peer {
        let Some(addr) = self.get() else {
            return *self;
        };
        if !proxy::trusted(trusted, addr.ip()) {
            return *self;
        }
        self.real_from(proxy::header_values(head, name).last(), trusted)
    }

    /// [`real`](Self::real) given the header's last value (`None`: absent),
    /// however the request carried it (an HTTP/1 head, an HTTP/2 list).
    pub(super) fn real_from(&self, value: Option<&[u8]>, trusted: &[proxy::Cidr]) -> Peer {
        let Some(addr) = self.get() else {
            return *self;
        };
        if !proxy::trusted(trusted, addr.ip()) {
            return *self;
        }
        // The port is the balancer's, not the client's: logged as 0.
        match value.and_then(|v| proxy::forwarded_for(v, trusted)) {
            Some(ip) => Peer::new(Some(SocketAddr::new(ip, 0))),
            None => *self,
        }
    }
}

impl Conn {
    /// Before anything else on a `proxy_protocol` listener: peek at the
    /// socket for the PROXY header and, once it is complete, consume
    /// exactly its bytes, leaving what follows (a request, a TLS
    /// ClientHello) for the usual path. `Ok(false)`: the header is not
    /// complete yet (the next readiness edge brings more; `header_timeout`
    /// bounds the wait). Any error refuses the connection.
    #[cold]
    #[inline(never)]
    pub(super) fn read_proxy(&mut self, env: &mut ShardEnv<'_>) -> Result<bool, CloseReason> {
        let mut buf = [0u8; proxy::MAX_HEADER];
        let n = match self.stream.peek(&mut buf) {
            Ok(0) => return Err(self.proxy_lost(env, "closed", CloseReason::Client)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(_) => return Err(self.proxy_lost(env, "read error", CloseReason::Error)),
        };
        match proxy::parse(&buf[..n]) {
            Ok(proxy::Parsed::Partial) => Ok(false),
            Ok(proxy::Parsed::Done { len, source }) => {
                match io::Read::read(&mut &self.stream, &mut buf[..len]) {
                    Ok(got) if got == len => {}
                    _ => return Err(self.proxy_lost(env, "read error", CloseReason::Error)),
                }
                if let Some(source) = source {
                    self.peer = Peer::new(Some(source));
                }
                env.counters.proxy_protocol[0] += 1;
                self.reading = Reading::Idle;
                // What follows the header may already be here.
                self.readable.set();
                Ok(true)
            }
            Err(e) => {
                env.counters.proxy_protocol[1] += 1;
                warn_refused(
                    &mut env.scratch.proxy_refusals,
                    env.now,
                    self.peer.get(),
                    proxy::Refusal::Header(e),
                    &buf[..n],
                );
                Err(CloseReason::Error)
            }
        }
    }

    /// The peer closed or failed before a whole PROXY header: counted as
    /// refused, but only a debug line, since a balancer's TCP health check
    /// does just that.
    fn proxy_lost(&self, env: &mut ShardEnv<'_>, what: &str, reason: CloseReason) -> CloseReason {
        env.counters.proxy_protocol[1] += 1;
        tracing::debug!(
            client = %Client(self.peer.get()),
            "{what} before a PROXY header"
        );
        reason
    }

    /// `header_timeout` passed before a whole PROXY header.
    pub(super) fn proxy_timed_out(&self, env: &mut ShardEnv<'_>) -> Step {
        env.counters.proxy_protocol[1] += 1;
        warn_refused(
            &mut env.scratch.proxy_refusals,
            env.now,
            self.peer.get(),
            proxy::Refusal::TimedOut,
            &[],
        );
        Step::Close(CloseReason::HeaderTimeout)
    }

    /// Refused before a PROXY header: the peer is not in `trusted_proxies`.
    pub fn refuse_untrusted(
        counters: &mut ShardCounters,
        scratch: &mut Scratch,
        peer: Option<SocketAddr>,
        now: Instant,
    ) {
        counters.proxy_protocol[1] += 1;
        warn_refused(
            &mut scratch.proxy_refusals,
            now,
            peer,
            proxy::Refusal::Untrusted,
            &[],
        );
    }

    /// On the shard's tick: the count of refusals a flood left unlogged,
    /// once [`proxy::REFUSAL_LOG_EVERY`] has passed since the last line.
    pub fn flush_proxy_refusals(scratch: &mut Scratch, now: Instant) {
        if let Some(suppressed) = scratch.proxy_refusals.limit.due(now) {
            tracing::warn!(
                shard = scratch.proxy_refusals.shard,
                suppressed,
                "more connections refused while reading PROXY protocol (not logged one by one)"
            );
        }
    }
}

/// The shard's refusal lines: its index, for the line, and its rate limit.
#[derive(Debug, Default)]
pub struct RefusalLog {
    pub(super) shard: usize,
    pub(super) limit: proxy::RefusalLimit,
}

impl RefusalLog {
    pub(super) fn new(shard: usize) -> RefusalLog {
        RefusalLog {
            shard,
            limit: proxy::RefusalLimit::default(),
        }
    }
}

/// The most bytes of a refused header quoted in its line: enough to tell
/// an HTTP request (a balancer sending no header) or TLS from a broken
/// header, too few to let a client write much into the log.
const QUOTED_HEADER: usize = 48;

/// A warn line for a refusal, as nginx's "broken header: … while reading
/// PROXY protocol, client: …", unless the shard's rate limit holds it back.
#[cold]
fn warn_refused(
    log: &mut RefusalLog,
    now: Instant,
    client: Option<SocketAddr>,
    refusal: proxy::Refusal,
    header: &[u8],
) {
    let Some(suppressed) = log.limit.admit(now) else {
        return;
    };
    let header = String::from_utf8_lossy(&header[..header.len().min(QUOTED_HEADER)]);
    tracing::warn!(
        client = %Client(client),
        reason = refusal.reason(),
        header = header.as_ref(),
        shard = log.shard,
        suppressed,
        "connection refused while reading PROXY protocol"
    );
}

/// A peer address as a line shows it.
struct Client(Option<SocketAddr>);

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(addr) => addr.fmt(f),
            None => f.write_str("unknown"),
        }
    }
}
