//! The client's address: the socket's peer, or the one a PROXY header
//! (v1/v2, from a trusted balancer) or `real_ip_header` names. The pure
//! parsing is in `conn::proxy`; here it meets the connection.

use super::*;

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
    /// peer, the client `real_ip_header` names (`conn::proxy::real_ip`).
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
        let refuse = |env: &mut ShardEnv<'_>, reason| {
            env.counters.proxy_protocol[1] += 1;
            Err(reason)
        };
        let n = match self.stream.peek(&mut buf) {
            Ok(0) => return refuse(env, CloseReason::Client),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(_) => return refuse(env, CloseReason::Error),
        };
        match proxy::parse(&buf[..n]) {
            Ok(proxy::Parsed::Partial) => Ok(false),
            Ok(proxy::Parsed::Done { len, source }) => {
                match io::Read::read(&mut &self.stream, &mut buf[..len]) {
                    Ok(got) if got == len => {}
                    _ => return refuse(env, CloseReason::Error),
                }
                if let Some(source) = source {
                    self.peer = Peer::new(Some(source));
                }
                env.counters.proxy_protocol[0] += 1;
                self.reading = Reading::Idle;
                // What follows the header may already be here.
                self.readable = true;
                Ok(true)
            }
            Err(e) => {
                tracing::debug!(error = ?e, "PROXY header refused");
                refuse(env, CloseReason::Error)
            }
        }
    }

    /// Refused before a PROXY header: the peer is not in `trusted_proxies`.
    pub fn refuse_untrusted(counters: &mut ShardCounters) {
        counters.proxy_protocol[1] += 1;
    }
}
