//! One UDP socket of a shard: `quinn-udp`'s batched I/O state, and what
//! waits while its send buffer is full.
//!
//! A transmit the full buffer refuses is held (QUIC already counts it as
//! sent) and the socket is watched for `EPOLLOUT` through a duplicate of
//! its fd, a registration apart from the readable one. Until the held
//! transmit leaves, the connections that would send on the socket wait
//! (they are not asked for packets, so nothing else piles up), and
//! stateless answers (Retry, Version Negotiation, resets) are dropped.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

use quinn_udp::{EcnCodepoint, Transmit, UdpSocketState};

use crate::metrics::QuicCounters;

pub(super) struct Socket {
    pub(super) udp: UdpSocket,
    /// Watched for `EPOLLOUT` while a transmit is held.
    out: UdpSocket,
    /// Its address, as a forwarded packet names it.
    pub(super) local: SocketAddr,
    pub(super) state: UdpSocketState,
    /// Readiness seen and not yet read to exhaustion.
    pub(super) pending: bool,
    /// Writable seen while a transmit is held.
    pub(super) out_ready: bool,
    held: Option<Held>,
    /// Connections (by handle index) to drive once the held transmit left.
    pub(super) waiting: Vec<usize>,
    /// Segmentation offload (`quic_gso`): several datagrams per send.
    pub(super) gso: bool,
}

/// A transmit the full send buffer refused.
struct Held {
    destination: SocketAddr,
    ecn: Option<EcnCodepoint>,
    segment_size: Option<usize>,
    src_ip: Option<IpAddr>,
    bytes: Vec<u8>,
}

impl Socket {
    /// `udp`, with GRO and GSO (quinn-udp turns GRO on where the kernel
    /// has it) or, without `gso`, neither.
    pub(super) fn new(udp: UdpSocket, gso: bool) -> io::Result<Socket> {
        udp.set_nonblocking(true)?;
        let state = UdpSocketState::new((&udp).into())?;
        if !gso {
            crate::sys::set_udp_gro(&udp, false)?;
        }
        Ok(Socket {
            state,
            local: udp.local_addr()?,
            out: udp.try_clone()?,
            udp,
            pending: true,
            out_ready: false,
            held: None,
            waiting: Vec::new(),
            gso,
        })
    }

    /// Whether a transmit is held: nothing else is sent until it leaves.
    pub(super) fn blocked(&self) -> bool {
        self.held.is_some()
    }

    /// The fd to watch for `EPOLLOUT` while [`blocked`](Self::blocked).
    pub(super) fn out_fd(&self) -> BorrowedFd<'_> {
        self.out.as_fd()
    }

    /// Send one transmit (a GSO batch when `segment_size` is set). When
    /// the buffer is full, a connection's transmit (`hold`) is held and
    /// this returns false: the caller stops sending on this socket until
    /// it is writable. A stateless answer is dropped instead (counted).
    pub(super) fn send(
        &mut self,
        t: &quinn_proto::Transmit,
        buf: &[u8],
        hold: bool,
        counters: &mut QuicCounters,
    ) -> bool {
        let segments = t.segment_size.map_or(1, |s| t.size.div_ceil(s)) as u64;
        if self.blocked() {
            counters.send_dropped += segments;
            return false;
        }
        let transmit = Transmit {
            destination: t.destination,
            ecn: t.ecn.and_then(|e| EcnCodepoint::from_bits(e as u8)),
            contents: &buf[..t.size],
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        match self.state.try_send((&self.udp).into(), &transmit) {
            Ok(()) => {
                counters.datagrams_out += segments;
                counters.sends += 1;
                true
            }
            Err(e) if hold && e.kind() == io::ErrorKind::WouldBlock => {
                counters.send_blocked += 1;
                self.held = Some(Held {
                    destination: transmit.destination,
                    ecn: transmit.ecn,
                    segment_size: transmit.segment_size,
                    src_ip: transmit.src_ip,
                    bytes: transmit.contents.to_vec(),
                });
                false
            }
            Err(_) => {
                counters.send_dropped += segments;
                true
            }
        }
    }

    /// The socket is writable: send the held transmit. True once nothing
    /// is held.
    pub(super) fn writable(&mut self, counters: &mut QuicCounters) -> bool {
        let Some(h) = &self.held else {
            return true;
        };
        let transmit = Transmit {
            destination: h.destination,
            ecn: h.ecn,
            contents: &h.bytes,
            segment_size: h.segment_size,
            src_ip: h.src_ip,
        };
        let segments = h.segment_size.map_or(1, |s| h.bytes.len().div_ceil(s)) as u64;
        match self.state.try_send((&self.udp).into(), &transmit) {
            Ok(()) => {
                counters.datagrams_out += segments;
                counters.sends += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(_) => counters.send_dropped += segments,
        }
        self.held = None;
        true
    }
}
