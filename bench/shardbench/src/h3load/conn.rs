//! One HTTP/3 connection of the load: its own UDP socket (so that the
//! server's kernel spreads connections over its shards as it spreads TCP
//! ones), its own quinn-proto endpoint, the control stream, and up to
//! `streams` GETs in flight, each read as it arrives.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ReadError, StreamEvent, StreamId, VarInt,
};
use quinn_udp::{RecvMeta, Transmit, UdpSocketState, BATCH_SIZE};

use super::wire::{self, Response};
use super::{Budget, Tally};

/// H3_NO_ERROR: the code a finished client closes with.
const H3_NO_ERROR: u32 = 0x100;
/// Datagrams per GSO send.
const MAX_SEGMENTS: usize = 10;
/// A receive buffer holds one GRO batch.
const RECV_BYTES: usize = 64 * 1024;

/// What a connection's thread lends it for one turn.
pub struct Scratch {
    send: Vec<u8>,
    recv: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            send: Vec::with_capacity(MAX_SEGMENTS * 1500),
            recv: vec![vec![0; RECV_BYTES]; BATCH_SIZE],
            meta: vec![RecvMeta::default(); BATCH_SIZE],
        }
    }
}

/// A GET in flight.
struct Request {
    started: Instant,
    at: SystemTime,
    response: Response,
}

pub struct Conn {
    pub sock: UdpSocket,
    state: UdpSocketState,
    endpoint: Endpoint,
    ch: ConnectionHandle,
    inner: Connection,
    server: SocketAddr,
    request: Vec<u8>,
    streams: usize,
    in_flight: HashMap<StreamId, Request>,
    connected: bool,
    /// Closed by us or lost: no more requests.
    pub closed: bool,
}

impl Conn {
    /// A connection to `server` (its name for SNI `name`) that will ask
    /// for `authority` and `path`, `streams` at a time.
    pub fn open(
        config: &ClientConfig,
        server: SocketAddr,
        name: &str,
        authority: &str,
        path: &str,
        streams: usize,
    ) -> io::Result<Conn> {
        let bind: SocketAddr = if server.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind)?;
        sock.set_nonblocking(true)?;
        let state = UdpSocketState::new((&sock).into())?;
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let (ch, inner) = endpoint
            .connect(Instant::now(), config.clone(), server, name)
            .map_err(io::Error::other)?;
        Ok(Conn {
            sock,
            state,
            endpoint,
            ch,
            inner,
            server,
            request: wire::get_request(authority, path),
            streams,
            in_flight: HashMap::new(),
            connected: false,
            closed: false,
        })
    }

    /// When this connection next needs [`Conn::timeout`].
    pub fn deadline(&mut self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    pub fn timeout(&mut self, now: Instant) {
        self.inner.handle_timeout(now);
    }

    /// Whether its handshake completed.
    pub fn handshaken(&self) -> bool {
        self.connected
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Read what the socket holds into the connection.
    pub fn receive(&mut self, scratch: &mut Scratch, now: Instant) {
        loop {
            let mut slices: Vec<IoSliceMut<'_>> = scratch
                .recv
                .iter_mut()
                .map(|b| IoSliceMut::new(&mut b[..]))
                .collect();
            let n = match self
                .state
                .recv((&self.sock).into(), &mut slices, &mut scratch.meta)
            {
                Ok(n) => n,
                Err(_) => return,
            };
            for (m, b) in scratch.meta.iter().zip(&scratch.recv).take(n) {
                for packet in b[..m.len].chunks(m.stride.max(1)) {
                    let ecn = m
                        .ecn
                        .and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8));
                    scratch.send.clear();
                    let event = self.endpoint.handle(
                        now,
                        m.addr,
                        m.dst_ip,
                        ecn,
                        BytesMut::from(packet),
                        &mut scratch.send,
                    );
                    match event {
                        Some(DatagramEvent::ConnectionEvent(_, ev)) => self.inner.handle_event(ev),
                        Some(DatagramEvent::Response(t)) => self.send(&t, &scratch.send),
                        _ => {}
                    }
                }
            }
        }
    }

    /// Act on what came in: responses read, new requests while the
    /// budget lasts, then the packets out.
    pub fn drive(
        &mut self,
        scratch: &mut Scratch,
        tally: &mut Tally,
        budget: &mut Budget,
        now: Instant,
    ) {
        while let Some(ev) = self.inner.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(self.ch, ev) {
                self.inner.handle_event(back);
            }
        }
        while let Some(ev) = self.inner.poll() {
            match ev {
                Event::Connected => {
                    self.connected = true;
                    if let Some(id) = self.inner.streams().open(Dir::Uni) {
                        let _ = self.inner.send_stream(id).write(&wire::CONTROL_PREAMBLE);
                    }
                }
                Event::ConnectionLost { reason } => {
                    if !self.closed {
                        tally.lost(&reason.to_string());
                    }
                    tally.errored += self.in_flight.len() as u64;
                    self.in_flight.clear();
                    self.closed = true;
                }
                Event::Stream(StreamEvent::Readable { id }) => self.read(id, tally),
                Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                    while let Some(id) = self.inner.streams().accept(Dir::Uni) {
                        self.read(id, tally);
                    }
                }
                _ => {}
            }
        }
        while self.connected && !self.closed && self.in_flight.len() < self.streams && budget.take()
        {
            let Some(id) = self.inner.streams().open(Dir::Bi) else {
                // The server's stream limit: until it grants more.
                budget.give_back();
                break;
            };
            let mut s = self.inner.send_stream(id);
            if s.write(&self.request) != Ok(self.request.len()) || s.finish().is_err() {
                tally.failed += 1;
                continue;
            }
            tally.started += 1;
            let r = Request {
                started: now,
                at: SystemTime::now(),
                response: Response::default(),
            };
            self.in_flight.insert(id, r);
        }
        self.transmit(scratch, now);
    }

    /// Read stream `id`: a response, or one of the server's unidirectional
    /// streams (read and dropped).
    fn read(&mut self, id: StreamId, tally: &mut Tally) {
        let mut stream = self.inner.recv_stream(id);
        let Ok(mut chunks) = stream.read(true) else {
            return;
        };
        let mut end = None;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    if let Some(r) = self.in_flight.get_mut(&id) {
                        if let Err(e) = r.response.feed(&chunk.bytes) {
                            end = Some(Err(e));
                            break;
                        }
                    }
                }
                Ok(None) => {
                    end = Some(Ok(()));
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(_)) => {
                    end = Some(Err("the stream was reset"));
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        let Some(end) = end else {
            return;
        };
        let Some(r) = self.in_flight.remove(&id) else {
            return;
        };
        match end {
            Ok(()) if r.response.complete() => {
                let status = r.response.status.unwrap_or_default();
                tally.done(status, r.response.body, r.at, r.started.elapsed());
            }
            Ok(()) => tally.failure("a response ended inside a frame or before its HEADERS"),
            Err(e) => tally.failure(e),
        }
    }

    /// Close with H3_NO_ERROR (once its requests are done or the time is up).
    pub fn close(&mut self, scratch: &mut Scratch, now: Instant) {
        if !self.closed {
            self.closed = true;
            self.inner
                .close(now, VarInt::from_u32(H3_NO_ERROR), Bytes::new());
        }
        self.transmit(scratch, now);
    }

    fn transmit(&mut self, scratch: &mut Scratch, now: Instant) {
        let max = self.state.max_gso_segments().min(MAX_SEGMENTS);
        loop {
            scratch.send.clear();
            let Some(t) = self.inner.poll_transmit(now, max, &mut scratch.send) else {
                break;
            };
            self.send(&t, &scratch.send);
        }
    }

    /// One transmit; a full buffer drops it, which QUIC's loss recovery
    /// resends, as a real client's would.
    fn send(&self, t: &quinn_proto::Transmit, buf: &[u8]) {
        let transmit = Transmit {
            destination: t.destination,
            ecn: t
                .ecn
                .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
            contents: &buf[..t.size],
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        let _ = self.state.try_send((&self.sock).into(), &transmit);
        debug_assert_eq!(t.destination, self.server);
    }
}
