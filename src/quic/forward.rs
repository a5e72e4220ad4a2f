//! Packets passed between the generations of a SIGUSR2 upgrade.
//!
//! The new process takes over the old one's UDP sockets; the old one stops
//! reading them but keeps its QUIC connections until they drain. A packet
//! the new process reads for an older generation's connection ID
//! (`cid::routed`) goes to the old process over a Unix datagram socket,
//! one per old shard, with a header saying where it came from and on
//! which address; the old shard reads it from its inbox as if from its
//! UDP socket, and answers through its copy of that socket.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes before the packet: the sender's address, the local address it
/// reached, the packet's destination IP (when known) and its ECN bits.
pub const HEADER: usize = ADDR + ADDR + IP + 1;
const ADDR: usize = IP + 2;
const IP: usize = 17;

/// The new process's way to the old one: the old shards' inboxes.
pub struct Forward {
    /// The generation whose packets go there.
    generation: u8,
    to: Vec<UnixDatagram>,
    /// Set once the old process is gone (its inboxes refuse).
    gone: AtomicBool,
}

/// What became of a packet offered to [`Forward::send`].
pub enum Sent {
    /// Passed on.
    Forwarded,
    /// The inbox was full: dropped, for the client to resend.
    Dropped,
    /// Not for the old process (another generation, or it is gone).
    NotOurs,
}

impl Forward {
    pub fn new(generation: u8, to: Vec<UnixDatagram>) -> io::Result<Forward> {
        for s in &to {
            s.set_nonblocking(true)?;
        }
        Ok(Forward {
            generation,
            to,
            gone: AtomicBool::new(false),
        })
    }

    pub fn generation(&self) -> u8 {
        self.generation
    }

    /// Pass `packet`, whose ID names `shard` and `generation`, to the old
    /// process, framed by `header` (`encode`) in `scratch`.
    pub fn send(
        &self,
        shard: usize,
        generation: u8,
        header: &[u8; HEADER],
        packet: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Sent {
        if generation != self.generation || self.gone.load(Ordering::Relaxed) {
            return Sent::NotOurs;
        }
        let Some(to) = self.to.get(shard) else {
            return Sent::NotOurs;
        };
        scratch.clear();
        scratch.extend_from_slice(header);
        scratch.extend_from_slice(packet);
        match to.send(scratch) {
            Ok(_) => Sent::Forwarded,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Sent::Dropped,
            Err(e) => {
                if !self.gone.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        error = %e,
                        generation,
                        "the previous process stopped taking QUIC packets; its connections have ended"
                    );
                }
                Sent::NotOurs
            }
        }
    }
}

/// The header of a forwarded packet.
pub fn encode(
    from: SocketAddr,
    local: SocketAddr,
    dst_ip: Option<IpAddr>,
    ecn: u8,
) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    put_addr(&mut h[..ADDR], from);
    put_addr(&mut h[ADDR..2 * ADDR], local);
    if let Some(ip) = dst_ip {
        put_ip(&mut h[2 * ADDR..2 * ADDR + IP], ip);
    }
    h[HEADER - 1] = ecn;
    h
}

/// A forwarded message: its header's fields and the packet.
pub struct Received<'a> {
    pub from: SocketAddr,
    pub local: SocketAddr,
    pub dst_ip: Option<IpAddr>,
    pub ecn: u8,
    pub packet: &'a [u8],
}

pub fn decode(msg: &[u8]) -> Option<Received<'_>> {
    let (h, packet) = msg.split_at_checked(HEADER)?;
    Some(Received {
        from: get_addr(&h[..ADDR])?,
        local: get_addr(&h[ADDR..2 * ADDR])?,
        dst_ip: get_ip(&h[2 * ADDR..2 * ADDR + IP]),
        ecn: h[HEADER - 1],
        packet,
    })
}

fn put_ip(out: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&v6.octets());
        }
    }
}

fn get_ip(b: &[u8]) -> Option<IpAddr> {
    match b[0] {
        4 => Some(IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(&b[1..17]).ok()?,
        ))),
        _ => None,
    }
}

fn put_addr(out: &mut [u8], addr: SocketAddr) {
    put_ip(&mut out[..IP], addr.ip());
    out[IP..ADDR].copy_from_slice(&addr.port().to_be_bytes());
}

fn get_addr(b: &[u8]) -> Option<SocketAddr> {
    let ip = get_ip(&b[..IP])?;
    Some(SocketAddr::new(ip, u16::from_be_bytes([b[IP], b[IP + 1]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let cases = [
            (
                "192.0.2.7:50000".parse().unwrap(),
                "127.0.0.1:443".parse().unwrap(),
                Some("127.0.0.1".parse().unwrap()),
                2,
            ),
            (
                "[2001:db8::1]:1".parse().unwrap(),
                "[::]:8443".parse().unwrap(),
                None,
                0,
            ),
        ];
        for (from, local, dst_ip, ecn) in cases {
            let mut msg = encode(from, local, dst_ip, ecn).to_vec();
            msg.extend_from_slice(b"packet");
            let r = decode(&msg).unwrap();
            assert_eq!(
                (r.from, r.local, r.dst_ip, r.ecn),
                (from, local, dst_ip, ecn)
            );
            assert_eq!(r.packet, b"packet");
        }
        assert!(decode(&[0; HEADER - 1]).is_none());
        assert!(decode(&[0; HEADER]).is_none(), "no address family");
    }

    #[test]
    fn sends_only_its_generation_and_notices_the_old_process_gone() {
        let (old, new) = UnixDatagram::pair().unwrap();
        let forward = Forward::new(3, vec![new]).unwrap();
        let header = encode(
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
            None,
            0,
        );
        let mut scratch = Vec::new();
        assert!(matches!(
            forward.send(0, 3, &header, b"x", &mut scratch),
            Sent::Forwarded
        ));
        let mut buf = [0u8; 128];
        let n = old.recv(&mut buf).unwrap();
        assert_eq!(decode(&buf[..n]).unwrap().packet, b"x");
        for (shard, generation) in [(0, 4), (1, 3)] {
            assert!(matches!(
                forward.send(shard, generation, &header, b"x", &mut scratch),
                Sent::NotOurs
            ));
        }
        drop(old);
        assert!(matches!(
            forward.send(0, 3, &header, b"x", &mut scratch),
            Sent::NotOurs
        ));
        assert!(forward.gone.load(Ordering::Relaxed));
    }
}
