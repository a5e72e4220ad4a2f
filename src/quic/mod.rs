//! HTTP/3's transport: QUIC by `quinn-proto`, sans-I/O, driven by the
//! shard loop on the shard's own UDP sockets (one per QUIC address, in an
//! `SO_REUSEPORT` group whose BPF program steers packets by connection ID:
//! `cid`). Datagrams are read and written in batches by `quinn-udp` (GRO,
//! GSO, ECN, the packet's destination address); each connection's HTTP/3
//! state is in `conn`, answering through the same semantics layer as
//! HTTP/1 and HTTP/2. Across a SIGUSR2 upgrade the new process reads the
//! sockets and passes an older generation's packets to the old process
//! (`forward`).

pub mod cid;
mod conn;
pub mod forward;
mod socket;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, ServerConfig, TransportConfig,
    VarInt,
};
use quinn_udp::RecvMeta;

use crate::config::QuicSettings;
use crate::conn::ShardEnv;
use conn::QConn;
use forward::{Forward, Sent};
use socket::Socket;

/// Most concurrent request streams a client may open
/// (`initial_max_streams_bidi`), as h2o and Caddy allow.
pub const MAX_STREAMS: u32 = 100;
/// Bytes a client may send on one request stream before we read it: a
/// request's HEADERS, with room.
const STREAM_WINDOW: u32 = 64 * 1024;
/// What a connection's unacknowledged response data may total.
const SEND_WINDOW: u64 = 2 * 1024 * 1024;
/// A connection silent for this long is closed (`max_idle_timeout`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Datagrams taken per `recvmmsg`, and batches per readiness event before
/// other work gets a turn.
const RECV_BATCH: usize = 16;
const RECV_ROUNDS: usize = 8;
/// Each receive buffer holds a GRO batch (up to 64 KiB).
const RECV_BUF: usize = 64 * 1024;
/// Bytes asked of a connection per transmit (one GSO send): a batch must
/// stay within 64 KiB (a larger one fails with EMSGSIZE). At 40 datagrams
/// of 1452 bytes rather than 10, 100 KiB responses cost 12–22 % less CPU
/// (docs/benchmarks.md, "HTTP/3").
const MAX_TRANSMIT_BYTES: usize = 60 * 1024;
/// Indices of a shard's watched fds ([`Quic::watched`]): UDP socket `i`
/// readable is `i`, writable `OUT + i`; the inbox is `INBOX`.
const OUT: usize = 0x8000;
pub const INBOX: usize = 0xffff;

/// What every shard's endpoint shares: the QUIC server configuration (its
/// TLS config, with ALPN `h3`; the Retry token key) and the stateless
/// reset key, so that any shard can validate another's tokens.
pub struct Shared {
    server: Arc<ServerConfig>,
    reset_key: Arc<dyn quinn_proto::crypto::HmacKey>,
    settings: QuicSettings,
    max_field_section: usize,
    /// This process's generation, in every connection ID it issues.
    generation: u8,
    /// The way to the process this one replaced, while it drains.
    forward: Option<Forward>,
}

impl Shared {
    /// From the TLS server configuration, made QUIC's: TLS 1.3 only, ALPN
    /// `h3`, no 0-RTT (replayable requests, and nothing a static file needs
    /// it for: a resumed handshake already costs one round trip).
    /// `generation` names this process in connection IDs; `forward`
    /// reaches the process it replaced.
    pub fn new(
        tls: &rustls::ServerConfig,
        settings: QuicSettings,
        max_field_section: usize,
        generation: u8,
        forward: Option<Forward>,
    ) -> anyhow::Result<Shared> {
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        tls.max_early_data_size = 0;
        let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
            .map_err(|e| anyhow::anyhow!("the TLS configuration cannot serve QUIC: {e}"))?;
        let mut transport = TransportConfig::default();
        transport
            .max_concurrent_bidi_streams(VarInt::from_u32(MAX_STREAMS))
            // The client's control stream and its two QPACK streams.
            .max_concurrent_uni_streams(VarInt::from_u32(3))
            .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
            .receive_window(VarInt::from_u32(STREAM_WINDOW * 4))
            .send_window(SEND_WINDOW)
            .max_idle_timeout(Some(IDLE_TIMEOUT.try_into().expect("a valid idle timeout")));
        let mut server = ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(Arc::new(transport));
        let mut key = [0u8; 64];
        aws_lc_rs::rand::fill(&mut key).expect("the system random source works");
        let reset_key = Arc::new(aws_lc_rs::hmac::Key::new(
            aws_lc_rs::hmac::HMAC_SHA256,
            &key,
        ));
        Ok(Shared {
            server: Arc::new(server),
            reset_key,
            settings,
            max_field_section,
            generation,
            forward,
        })
    }

    pub fn generation(&self) -> u8 {
        self.generation
    }

    /// The `Alt-Svc` line TLS responses carry (RFC 7838): HTTP/3 on the
    /// first QUIC address's port, remembered for a day.
    pub fn alt_svc_line(&self, port: u16) -> String {
        format!("Alt-Svc: h3=\":{port}\"; ma=86400\r\n")
    }

    pub fn settings(&self) -> &QuicSettings {
        &self.settings
    }
}

/// A datagram read, from a UDP socket or the inbox.
#[derive(Clone, Copy)]
struct Datagram<'a> {
    /// The shard socket it came in on (or, forwarded, would have).
    sock: usize,
    from: SocketAddr,
    dst_ip: Option<std::net::IpAddr>,
    ecn: Option<quinn_proto::EcnCodepoint>,
    packet: &'a [u8],
}

/// A shard's QUIC sockets: one UDP socket per QUIC address, and the inbox
/// a successor process forwards this shard's packets to.
pub struct ShardSockets {
    pub udp: Vec<UdpSocket>,
    pub inbox: Option<UnixDatagram>,
}

/// Where a successor's forwarded packets arrive.
struct Inbox {
    sock: UnixDatagram,
    pending: bool,
}

/// A shard's QUIC endpoint and connections.
pub struct Quic {
    index: usize,
    endpoint: Endpoint,
    shared: Arc<Shared>,
    sockets: Vec<Socket>,
    /// Whether the UDP sockets are read: not once a successor took them.
    reading: bool,
    inbox: Option<Inbox>,
    /// A forwarded packet's framing.
    forward_buf: Vec<u8>,
    /// Watches to add (true) or remove, by index, for the shard to apply.
    watch_changes: Vec<(usize, bool)>,
    /// Response heads, with the lines seen before.
    encoder: crate::proto::h3::qpack::Encoder,
    /// By `ConnectionHandle`'s index.
    conns: Vec<Option<Box<QConn>>>,
    open: usize,
    /// Connections' next deadlines, earliest first; an entry is stale when
    /// it is not the connection's current `timer`.
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Connections with input to act on this turn.
    dirty: Vec<usize>,
    recv_bufs: Vec<Vec<u8>>,
    send_buf: Vec<u8>,
    /// New handshakes in the current second, for `retry_above`.
    second: (Instant, u32),
    draining: bool,
}

impl Quic {
    /// Shard `index`'s endpoint over its `sockets`.
    pub fn new(index: usize, sockets: ShardSockets, shared: Arc<Shared>) -> io::Result<Quic> {
        let mut config = EndpointConfig::new(Arc::clone(&shared.reset_key));
        let generation = shared.generation;
        config.cid_generator(move || Box::new(cid::ShardCids::new(index, generation)));
        let endpoint = Endpoint::new(
            Arc::new(config),
            Some(Arc::clone(&shared.server)),
            true,
            None,
        );
        let inbox = match sockets.inbox {
            Some(sock) => {
                sock.set_nonblocking(true)?;
                Some(Inbox {
                    sock,
                    pending: true,
                })
            }
            None => None,
        };
        let sockets = sockets
            .udp
            .into_iter()
            .map(|udp| Socket::new(udp, shared.settings.gso))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Quic {
            index,
            endpoint,
            shared,
            sockets,
            reading: true,
            inbox,
            forward_buf: Vec::new(),
            watch_changes: Vec::new(),
            encoder: Default::default(),
            conns: Vec::new(),
            open: 0,
            timers: BinaryHeap::new(),
            dirty: Vec::new(),
            recv_bufs: vec![vec![0; RECV_BUF]; RECV_BATCH],
            send_buf: Vec::with_capacity(64 * 1024),
            second: (Instant::now(), 0),
            draining: false,
        })
    }

    /// The indices to watch now: each UDP socket for reading while this
    /// process reads them, for writing while a transmit is held on it,
    /// and the inbox ([`fd`](Self::fd) says which fd and what for).
    pub fn watched(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.sockets.len();
        let read = (0..n).filter(|_| self.reading);
        let write = (0..n)
            .filter(|&i| self.sockets[i].blocked())
            .map(|i| OUT + i);
        read.chain(write).chain(self.inbox.as_ref().map(|_| INBOX))
    }

    /// Watched index `i`'s fd and interest.
    pub fn fd(&self, i: usize) -> Option<(BorrowedFd<'_>, u32)> {
        match i {
            INBOX => Some((self.inbox.as_ref()?.sock.as_fd(), crate::sys::EPOLLIN)),
            i if i >= OUT => Some((self.sockets.get(i - OUT)?.out_fd(), crate::sys::EPOLLOUT)),
            i => Some((self.sockets.get(i)?.udp.as_fd(), crate::sys::EPOLLIN)),
        }
    }

    /// Watches to add (true) or remove since the last call.
    pub fn watch_changes(&mut self) -> Vec<(usize, bool)> {
        std::mem::take(&mut self.watch_changes)
    }

    /// A successor process reads the UDP sockets now: this one keeps its
    /// connections, fed through the inbox, and sends on its copies of the
    /// sockets. The caller stops watching the indices returned.
    pub fn stop_reading(&mut self) -> Vec<usize> {
        let read = (0..self.sockets.len()).filter(|_| self.reading).collect();
        self.reading = false;
        for s in &mut self.sockets {
            s.pending = false;
        }
        read
    }

    /// Connections open.
    pub fn len(&self) -> usize {
        self.open
    }

    pub fn is_empty(&self) -> bool {
        self.open == 0
    }

    /// Watched index `i` is ready.
    pub fn ready(&mut self, i: usize) {
        if i == INBOX {
            if let Some(inbox) = &mut self.inbox {
                inbox.pending = true;
            }
        } else if i >= OUT {
            if let Some(s) = self.sockets.get_mut(i - OUT) {
                s.out_ready = true;
            }
        } else if let Some(s) = self.sockets.get_mut(i).filter(|_| self.reading) {
            s.pending = true;
        }
    }

    /// Whether a socket still has datagrams to read, or became writable
    /// (the loop does not sleep then).
    pub fn has_pending(&self) -> bool {
        self.sockets.iter().any(|s| s.pending || s.out_ready)
            || self.inbox.as_ref().is_some_and(|i| i.pending)
    }

    /// The earliest connection deadline.
    pub fn next_timeout(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, ch))) = self.timers.peek().copied() {
            match self.conns.get(ch).and_then(Option::as_ref) {
                Some(c) if c.timer == Some(at) => return Some(at),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }

    /// Read what the sockets hold, run the connections' expired timers,
    /// and drive every connection that has something to do.
    pub fn turn(&mut self, env: &mut ShardEnv<'_>) {
        let now = env.now;
        for i in 0..self.sockets.len() {
            let s = &mut self.sockets[i];
            if std::mem::take(&mut s.out_ready) && s.writable(&mut env.counters.quic) {
                self.watch_changes.push((OUT + i, false));
                self.dirty.append(&mut s.waiting);
            }
            if self.sockets[i].pending {
                self.receive(i, env);
            }
        }
        if self.inbox.as_ref().is_some_and(|i| i.pending) {
            self.receive_inbox(env);
        }
        while let Some(Reverse((at, ch))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if let Some(c) = self.conns.get_mut(ch).and_then(Option::as_mut) {
                if c.timer == Some(at) {
                    c.timer = None;
                    c.inner.handle_timeout(now);
                    self.dirty.push(ch);
                }
            }
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for &ch in &dirty {
            self.drive(ch, env);
        }
        dirty.clear();
        self.dirty = dirty;
    }

    /// Up to [`RECV_ROUNDS`] batches from socket `i`.
    fn receive(&mut self, i: usize, env: &mut ShardEnv<'_>) {
        let now = env.now;
        let mut meta = [RecvMeta::default(); RECV_BATCH];
        let mut recv_bufs = std::mem::take(&mut self.recv_bufs);
        self.receive_rounds(i, &mut recv_bufs, &mut meta, env, now);
        self.recv_bufs = recv_bufs;
    }

    fn receive_rounds(
        &mut self,
        i: usize,
        recv_bufs: &mut [Vec<u8>],
        meta: &mut [RecvMeta; RECV_BATCH],
        env: &mut ShardEnv<'_>,
        now: Instant,
    ) {
        for _ in 0..RECV_ROUNDS {
            let mut bufs = recv_bufs.iter_mut().map(|b| IoSliceMut::new(&mut b[..]));
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| bufs.next().expect("RECV_BATCH buffers"));
            let s = &self.sockets[i];
            let n = match s.state.recv((&s.udp).into(), &mut slices, meta) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.sockets[i].pending = false;
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "QUIC receive failed");
                    return;
                }
            };
            for (m, b) in meta.iter().zip(recv_bufs.iter()).take(n) {
                let data = &b[..m.len];
                let stride = m.stride.max(1);
                for packet in data.chunks(stride) {
                    env.counters.quic.datagrams_in += 1;
                    let ecn = m
                        .ecn
                        .and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8));
                    let d = Datagram {
                        sock: i,
                        from: m.addr,
                        dst_ip: m.dst_ip,
                        ecn,
                        packet,
                    };
                    self.datagram(d, env, now);
                }
            }
        }
        // The batch budget ran out: the socket may hold more.
    }

    /// Up to a receive budget of forwarded packets from the inbox.
    fn receive_inbox(&mut self, env: &mut ShardEnv<'_>) {
        let now = env.now;
        let mut buf = std::mem::take(&mut self.recv_bufs[0]);
        for _ in 0..RECV_BATCH * RECV_ROUNDS {
            let Some(inbox) = &mut self.inbox else {
                break;
            };
            let n = match inbox.sock.recv(&mut buf) {
                Ok(n) => n,
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        tracing::debug!(error = %e, "QUIC inbox receive failed");
                    }
                    inbox.pending = false;
                    break;
                }
            };
            let Some(r) = forward::decode(&buf[..n]) else {
                continue;
            };
            let sock = self
                .sockets
                .iter()
                .position(|s| s.local == r.local)
                .unwrap_or(0);
            env.counters.quic.datagrams_in += 1;
            let ecn = quinn_proto::EcnCodepoint::from_bits(r.ecn);
            let d = Datagram {
                sock,
                from: r.from,
                dst_ip: r.dst_ip,
                ecn,
                packet: r.packet,
            };
            self.datagram(d, env, now);
        }
        self.recv_bufs[0] = buf;
    }

    /// Whether `d`, whose ID names another generation, was dealt with
    /// here: forwarded to the process it belongs to (an Initial too: one
    /// answered by the old process carries its ID, and coalesces the
    /// client's Handshake packet after it; a client's own random ID
    /// looks like the old process's one time in 2^24 per shard, during a
    /// drain, and is refused there), or, when a successor's packet reached
    /// this process in the moment before it stopped reading, dropped (a
    /// stateless reset would end the successor's connection). Anything
    /// else goes to the endpoint.
    fn forwarded(&mut self, to: cid::Routed, d: &Datagram<'_>, env: &mut ShardEnv<'_>) -> bool {
        if let Some(f) = &self.shared.forward {
            let header = forward::encode(
                d.from,
                self.sockets[d.sock].local,
                d.dst_ip,
                d.ecn.map_or(0, |e| e as u8),
            );
            match f.send(
                to.shard,
                to.generation,
                &header,
                d.packet,
                &mut self.forward_buf,
            ) {
                Sent::Forwarded => {
                    env.counters.quic.forwarded += 1;
                    return true;
                }
                Sent::Dropped => {
                    env.counters.quic.forward_dropped += 1;
                    return true;
                }
                Sent::NotOurs => {}
            }
        }
        if to.ours && to.generation == self.shared.generation.wrapping_add(1) {
            env.counters.quic.foreign += 1;
            return true;
        }
        false
    }

    /// One datagram in: to its connection, a new connection, a Retry or
    /// refusal, or (another generation's) forwarded.
    fn datagram(&mut self, d: Datagram<'_>, env: &mut ShardEnv<'_>, now: Instant) {
        let Datagram {
            sock,
            from,
            dst_ip,
            ecn,
            packet,
        } = d;
        // The destination ID, read once: steering misses, and another
        // generation's packets.
        let route = cid::routed(packet);
        let short = packet.first().is_some_and(|b| b & 0x80 == 0);
        if short && route.is_some_and(|r| r.shard != self.index) {
            env.counters.quic.foreign += 1;
        }
        if !short
            && packet
                .get(1..5)
                .is_some_and(|v| v != [0, 0, 0, 1] && v != [0, 0, 0, 0])
        {
            env.counters.quic.version_negotiation += 1;
        }
        if let Some(routed) = route.filter(|r| r.generation != self.shared.generation) {
            if self.forwarded(routed, &d, env) {
                return;
            }
        }
        let mut buf = std::mem::take(&mut self.send_buf);
        buf.clear();
        let event = self
            .endpoint
            .handle(now, from, dst_ip, ecn, BytesMut::from(packet), &mut buf);
        match event {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                if let Some(c) = self.conns.get_mut(ch.0).and_then(Option::as_mut) {
                    c.inner.handle_event(ev);
                    self.dirty.push(ch.0);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.draining {
                    let t = self.endpoint.refuse(incoming, &mut buf);
                    self.send(sock, &t, &buf, env);
                } else if !incoming.remote_address_validated() && self.wants_retry(now) {
                    match self.endpoint.retry(incoming, &mut buf) {
                        Ok(t) => {
                            env.counters.quic.retries += 1;
                            self.send(sock, &t, &buf, env);
                        }
                        Err(e) => self.endpoint.ignore(e.into_incoming()),
                    }
                } else {
                    self.second.1 += 1;
                    match self.endpoint.accept(incoming, now, &mut buf, None) {
                        Ok((ch, connection)) => {
                            let c = QConn::new(connection, sock);
                            if self.conns.len() <= ch.0 {
                                self.conns.resize_with(ch.0 + 1, || None);
                            }
                            self.conns[ch.0] = Some(Box::new(c));
                            self.open += 1;
                            self.dirty.push(ch.0);
                        }
                        Err(e) => {
                            env.counters.quic.handshakes_failed += 1;
                            if let Some(t) = e.response {
                                self.send(sock, &t, &buf, env);
                            }
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => self.send(sock, &t, &buf, env),
            None => {}
        }
        self.send_buf = buf;
    }

    /// Whether an unvalidated client gets a Retry: always with
    /// `quic_retry`, else while this second's handshakes are past
    /// `quic_retry_above`.
    fn wants_retry(&mut self, now: Instant) -> bool {
        if self.shared.settings.retry {
            return true;
        }
        if now.duration_since(self.second.0) >= Duration::from_secs(1) {
            self.second = (now, 0);
        }
        self.second.1 >= self.shared.settings.retry_above
    }

    /// Write a stateless answer (dropped while the socket's buffer is
    /// full).
    fn send(&mut self, sock: usize, t: &quinn_proto::Transmit, buf: &[u8], env: &mut ShardEnv<'_>) {
        self.sockets[sock].send(t, buf, false, &mut env.counters.quic);
    }

    /// Act on connection `ch`'s input: its HTTP/3 streams, its packets
    /// out, its events for the endpoint, its next deadline.
    fn drive(&mut self, ch: usize, env: &mut ShardEnv<'_>) {
        let Some(mut c) = self.conns.get_mut(ch).and_then(Option::take) else {
            return;
        };
        let now = env.now;
        c.h3(&self.shared, self.draining, &mut self.encoder, env);
        let s = &mut self.sockets[c.sock];
        let mtu = usize::from(c.inner.current_mtu()).max(1200);
        let max = match s.gso {
            true => s.state.max_gso_segments().min(MAX_TRANSMIT_BYTES / mtu),
            false => 1,
        };
        let mut buf = std::mem::take(&mut self.send_buf);
        // While the socket's buffer is full the connection waits, its
        // packets not yet made.
        let mut wait = s.blocked();
        while !wait {
            buf.clear();
            let Some(t) = c.inner.poll_transmit(now, max, &mut buf) else {
                break;
            };
            if !s.send(&t, &buf, true, &mut env.counters.quic) {
                self.watch_changes.push((OUT + c.sock, true));
                wait = true;
            }
        }
        if wait && !s.waiting.contains(&ch) {
            s.waiting.push(ch);
        }
        self.send_buf = buf;
        let mut drained = false;
        while let Some(ev) = c.inner.poll_endpoint_events() {
            drained |= ev.is_drained();
            if let Some(back) = self.endpoint.handle_event(ConnectionHandle(ch), ev) {
                c.inner.handle_event(back);
            }
        }
        if drained {
            c.closed(env);
            self.open -= 1;
            return;
        }
        // quinn's next deadline, or the drain's.
        let next = match (c.inner.poll_timeout(), c.close_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if next != c.timer {
            c.timer = next;
            if let Some(at) = next {
                self.timers.push(Reverse((at, ch)));
            }
        }
        self.conns[ch] = Some(c);
    }

    /// The shard drains: new connections are refused, and every
    /// connection gets GOAWAY, finishes its streams, then closes.
    pub fn drain(&mut self, env: &mut ShardEnv<'_>) {
        self.draining = true;
        for ch in 0..self.conns.len() {
            if self.conns[ch].is_some() {
                self.dirty.push(ch);
            }
        }
        self.turn(env);
    }

    /// The grace ran out: close what is left, at once.
    pub fn close_all(&mut self, env: &mut ShardEnv<'_>) {
        for ch in 0..self.conns.len() {
            if let Some(c) = self.conns[ch].as_mut() {
                c.inner.close(
                    env.now,
                    VarInt::from_u32(conn::H3_NO_ERROR),
                    bytes::Bytes::new(),
                );
                self.dirty.push(ch);
            }
        }
        self.turn(env);
    }
}
