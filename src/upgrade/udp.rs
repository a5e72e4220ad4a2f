//! HTTP/3's part of an upgrade: the UDP sockets (one per shard per QUIC
//! address, taken over by the new process so their `SO_REUSEPORT` groups
//! and steering programs stay as they are) and the peers of the old
//! shards' inboxes, where the new process forwards the old connections'
//! packets. Named in [`QUIC_FDS_ENV`]:
//! `generation=G;fd=udp/shard/address;…;fd=forward/shard;…`. Apart from
//! the sockets' list, so a binary that predates it ignores it.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;

use anyhow::{bail, Context};

pub const QUIC_FDS_ENV: &str = "SHARDHTTPD_QUIC_FDS";

/// What an upgrade hands over for HTTP/3 (fds the old process keeps open
/// meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicPassed {
    /// The old process's generation (`quic::cid`).
    pub generation: u8,
    /// Each UDP socket: fd, shard, address.
    pub udp: Vec<(RawFd, usize, SocketAddr)>,
    /// The peers of the old shards' inboxes: fd, shard.
    pub forward: Vec<(RawFd, usize)>,
}

impl QuicPassed {
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        let udp = self.udp.iter().map(|&(fd, _, _)| fd);
        udp.chain(self.forward.iter().map(|&(fd, _)| fd))
    }
}

pub fn encode(q: &QuicPassed) -> String {
    let mut out = vec![format!("generation={}", q.generation)];
    out.extend(
        q.udp
            .iter()
            .map(|(fd, shard, addr)| format!("{fd}=udp/{shard}/{addr}")),
    );
    out.extend(
        q.forward
            .iter()
            .map(|(fd, shard)| format!("{fd}=forward/{shard}")),
    );
    out.join(";")
}

pub fn decode(s: &str) -> anyhow::Result<QuicPassed> {
    let mut q = QuicPassed {
        generation: 0,
        udp: Vec::new(),
        forward: Vec::new(),
    };
    let mut generation = None;
    for item in s.split(';').filter(|i| !i.is_empty()) {
        let bad = || format!("{QUIC_FDS_ENV}: bad entry `{item}`");
        let (key, rest) = item.split_once('=').with_context(bad)?;
        if key == "generation" {
            generation = Some(rest.parse().ok().with_context(bad)?);
            continue;
        }
        let fd: RawFd = key.parse().ok().with_context(bad)?;
        let mut parts = rest.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("udp"), Some(shard), Some(addr)) => q.udp.push((
                fd,
                shard.parse().ok().with_context(bad)?,
                addr.parse().ok().with_context(bad)?,
            )),
            (Some("forward"), Some(shard), None) => {
                q.forward.push((fd, shard.parse().ok().with_context(bad)?))
            }
            _ => bail!(bad()),
        }
    }
    q.generation = generation.with_context(|| format!("{QUIC_FDS_ENV}: no generation"))?;
    Ok(q)
}

/// The inherited HTTP/3 sockets, checked.
pub struct InheritedQuic {
    generation: u8,
    udp: Vec<(RawFd, usize, SocketAddr, UdpSocket)>,
    forward: Vec<(usize, UnixDatagram)>,
    adopted: bool,
}

impl InheritedQuic {
    /// Take the fds `passed` names: each UDP one must be a datagram socket
    /// bound to its address.
    pub fn take(passed: QuicPassed) -> anyhow::Result<InheritedQuic> {
        let mut q = InheritedQuic {
            generation: passed.generation,
            udp: Vec::new(),
            forward: Vec::new(),
            adopted: false,
        };
        for (fd, shard, addr) in passed.udp {
            let owned = crate::sys::take_inherited(fd)
                .with_context(|| format!("{QUIC_FDS_ENV}: fd {fd}"))?;
            let udp = check_udp(owned, addr).with_context(|| format!("{QUIC_FDS_ENV}: fd {fd}"))?;
            q.udp.push((fd, shard, addr, udp));
        }
        for (fd, shard) in passed.forward {
            let owned = crate::sys::take_inherited(fd)
                .with_context(|| format!("{QUIC_FDS_ENV}: fd {fd}"))?;
            q.forward.push((shard, UnixDatagram::from(owned)));
        }
        q.forward.sort_by_key(|(shard, _)| *shard);
        Ok(q)
    }

    /// This process's generation: one past the old one's.
    pub fn generation(&self) -> u8 {
        self.generation.wrapping_add(1)
    }

    /// The passed sockets for `want` (same address, or the same IP for a
    /// port 0), in shard order, when the old process had `shards` of them
    /// too: the group's order is its steering (socket `i` is shard `i`),
    /// so a group of another size is not adopted. Their fds are added to
    /// `adopted`.
    pub fn take_udp(
        &mut self,
        want: SocketAddr,
        shards: usize,
        adopted: &mut Vec<RawFd>,
    ) -> Option<Vec<UdpSocket>> {
        let addr = self
            .udp
            .iter()
            .find(|u| super::matches(want, u.2))
            .map(|u| u.2)?;
        let (mut mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.udp)
            .into_iter()
            .partition(|u| u.2 == addr);
        self.udp = rest;
        mine.sort_by_key(|u| u.1);
        if !mine.iter().map(|u| u.1).eq(0..shards) {
            tracing::warn!(
                old = mine.len(),
                new = shards,
                "the shard count changed: QUIC sockets not taken over; the old process keeps its HTTP/3 connections, and new ones may be reset until it exits addr={addr}"
            );
            return None;
        }
        self.adopted = true;
        adopted.extend(mine.iter().map(|u| u.0));
        Some(mine.into_iter().map(|u| u.3).collect())
    }

    /// The way to the old process, once some sockets were taken over:
    /// its generation and its shards' inboxes' peers, in shard order.
    pub fn take_forward(&mut self) -> Option<(u8, Vec<UnixDatagram>)> {
        if !self.adopted {
            return None;
        }
        let forward = std::mem::take(&mut self.forward);
        Some((
            self.generation,
            forward.into_iter().map(|(_, s)| s).collect(),
        ))
    }
}

/// The fd must be a UDP socket bound to `addr`.
fn check_udp(fd: OwnedFd, addr: SocketAddr) -> anyhow::Result<UdpSocket> {
    let socket = socket2::Socket::from(fd);
    if socket.r#type()? != socket2::Type::DGRAM {
        bail!("not a datagram socket");
    }
    super::bound_to(&socket, addr)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_round_trip() {
        let q = QuicPassed {
            generation: 255,
            udp: vec![
                (7, 0, "127.0.0.1:8443".parse().unwrap()),
                (8, 1, "[::1]:8443".parse().unwrap()),
            ],
            forward: vec![(9, 0), (10, 1)],
        };
        let s = encode(&q);
        assert_eq!(
            s,
            "generation=255;7=udp/0/127.0.0.1:8443;8=udp/1/[::1]:8443;9=forward/0;10=forward/1"
        );
        assert_eq!(decode(&s).unwrap(), q);
        assert_eq!(q.fds().collect::<Vec<_>>(), [7, 8, 9, 10]);
        for bad in [
            "7=udp/0/127.0.0.1:1",
            "generation=256",
            "generation=1;7=tcp/0/127.0.0.1:1",
            "generation=1;7=forward/x",
            "generation=1;x=forward/0",
        ] {
            assert!(decode(bad).is_err(), "{bad}");
        }
    }
}
