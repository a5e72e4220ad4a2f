//! TLS as a transport under the connection state machine: a rustls
//! `ServerConnection` driven sans-I/O. [`Conn`](super::Conn) reads
//! plaintext from [`TlsConn::read`] into its request buffer and flushes its
//! [`Output`] through [`TlsConn::flush`]; the HTTP code above never knows
//! the bytes are encrypted.
//!
//! Syscalls stay as in cleartext: one `read` of ciphertext per readiness
//! event into our own buffer (rustls would read 4 KiB at a time), fed to
//! rustls from memory; every queued answer is encrypted (records of up to
//! 16 KiB) and all records leave in one `writev`.
//!
//! Driven by io_uring completions (`conn/ring.rs`), the session makes no
//! syscall of its own: the ring's receive pushes ciphertext in
//! ([`TlsConn::push`]), and the records rustls holds are lent to a ring
//! send ([`TlsConn::lend`]); what a send did not take goes first next time.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use rustls::{HandshakeKind, ProtocolVersion, ServerConfig, ServerConnection};

use crate::io::output::{Flush, Output, Sink, WriteError};
use crate::metrics::Handshake;
use crate::serve::sites::Sites;
use crate::sys::SendId;

/// Ciphertext read per `read`: one maximal TLS record plus its header and
/// expansion, so a full record never needs two reads.
const CIPHER_BUF: usize = 16 * 1024 + 512;

/// Most write rounds (encrypt, then `writev` the records) per flush.
const MAX_ROUNDS: usize = 8;

/// The answer to cleartext HTTP on a TLS port, as nginx gives it.
pub const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain\r\n\
Content-Length: 52\r\n\
Connection: close\r\n\
\r\n\
This port speaks HTTPS; a plain HTTP request came.\r\n";

/// What [`TlsConn::read`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum TlsRead {
    /// `n` plaintext bytes (maybe 0 when only handshake progressed);
    /// `more`: bytes may be left (buffered here or in the socket).
    Data { n: usize, more: bool },
    /// Nothing to read now.
    Drained,
    /// The client closed (close_notify or TCP FIN).
    Eof,
    /// The first bytes are a cleartext HTTP request, not a ClientHello.
    PlainHttp,
}

/// Ciphertext buffers (16.5 KiB each) of sessions that hold no
/// ciphertext, reused by the shard's connections: an idle session keeps
/// none, as OpenSSL's `SSL_MODE_RELEASE_BUFFERS` does for nginx.
#[derive(Default)]
pub struct CipherPool(Vec<Box<[u8]>>);

impl CipherPool {
    /// Most buffers kept; beyond that they are freed.
    const MAX: usize = 1024;

    fn take(&mut self) -> Box<[u8]> {
        self.0
            .pop()
            .unwrap_or_else(|| vec![0; CIPHER_BUF].into_boxed_slice())
    }

    fn give(&mut self, buf: Box<[u8]>) {
        if self.0.len() < CipherPool::MAX && buf.len() == CIPHER_BUF {
            self.0.push(buf);
        }
    }
}

pub struct TlsConn {
    conn: ServerConnection,
    /// Ciphertext read but not yet handed to rustls; empty (no allocation)
    /// while the session holds none (see [`CipherPool`]).
    cbuf: Box<[u8]>,
    cstart: usize,
    cend: usize,
    /// The client's close_notify has been processed: no readiness edge
    /// will follow it, so the end of its plaintext reads as `more`.
    peer_closed: bool,
    /// No byte has arrived yet (the cleartext-HTTP check looks at the first).
    fresh: bool,
    /// When the connection was accepted: the handshake's start.
    started: Instant,
    /// The handshake has completed (and was counted).
    established: bool,
    /// The first bytes pushed were cleartext HTTP (driven by completions).
    plain_http: bool,
    /// Ciphertext taken from rustls that a ring send left unsent: it goes
    /// before anything else (empty, no allocation, otherwise).
    sendq: Vec<u8>,
    /// The ring send the session's ciphertext is lent to.
    lent: Option<SendId>,
    /// The site its SNI names (`serve::sites`), looked up at the first
    /// request of a server with several.
    sni_site: Option<Option<u32>>,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("established", &self.established)
            .field("cipher_buffered", &(self.cend - self.cstart))
            .field("wants_write", &self.conn.wants_write())
            .finish()
    }
}

/// rustls encrypts into its own buffer; a full buffer reads as WouldBlock
/// so the [`Output`] stops and the records get written first.
struct Encrypt<'a>(&'a mut ServerConnection);

impl Sink for Encrypt<'_> {
    fn write_vectored(&mut self, iov: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        match self.0.writer().write_vectored(iov)? {
            0 if iov.iter().any(|b| !b.is_empty()) => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.writer().write(buf)? {
            0 if !buf.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn sendfile(&mut self, _: &std::fs::File, _: &mut u64, _: usize) -> io::Result<usize> {
        // TLS connections always use the verified copy (Conn::new).
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// A buffer that takes bytes up to its capacity, never growing.
struct Room<'a>(&'a mut Vec<u8>);

impl Write for Room<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(self.0.capacity() - self.0.len());
        self.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            let took = self.write(b)?;
            n += took;
            if took < b.len() {
                break;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsConn {
    pub fn new(config: &Arc<ServerConfig>, now: Instant) -> io::Result<TlsConn> {
        let mut conn = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
        conn.set_buffer_limit(Some(crate::tls::SEND_BUFFER));
        Ok(TlsConn {
            conn,
            cbuf: Box::default(),
            cstart: 0,
            cend: 0,
            peer_closed: false,
            fresh: true,
            started: now,
            established: false,
            plain_http: false,
            sendq: Vec::new(),
            lent: None,
            sni_site: None,
        })
    }

    /// The handshake is done and ALPN chose HTTP/2.
    pub fn alpn_h2(&self) -> bool {
        self.established && self.conn.alpn_protocol() == Some(b"h2")
    }

    /// The site the client's SNI names, if one claims it: every request
    /// of this connection must be for it.
    pub fn sni_site(&mut self, sites: &Sites) -> Option<u32> {
        let conn = &self.conn;
        *self
            .sni_site
            .get_or_insert_with(|| conn.server_name().and_then(|n| sites.by_sni(n)))
    }

    /// `host` is the name the client gave in its SNI: its site is
    /// [`sni_site`](Self::sni_site)'s, with no lookup.
    #[inline]
    pub fn is_sni(&self, host: &[u8]) -> bool {
        self.conn
            .server_name()
            .is_some_and(|name| crate::http::host::same(host, name))
    }

    /// Still handshaking (a close now counts as a failed handshake).
    pub fn handshaking(&self) -> bool {
        !self.established
    }

    /// Seconds since the connection was accepted.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// When the connection was accepted.
    pub fn accepted(&self) -> Instant {
        self.started
    }

    /// Encrypted bytes (handshake, alerts, records) wait to be written, or
    /// are with a ring send.
    #[inline]
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write() || !self.sendq.is_empty() || self.lent.is_some()
    }

    /// `(version, cipher)` for the access log, once established.
    pub fn session_info(&self) -> Option<(&'static str, &'static str)> {
        if !self.established {
            return None;
        }
        let version = match self.conn.protocol_version()? {
            ProtocolVersion::TLSv1_3 => "TLSv1.3",
            ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "TLS",
        };
        let cipher = self.conn.negotiated_cipher_suite()?.suite().as_str()?;
        Some((version, cipher))
    }

    /// Give the ciphertext buffer back to `pool` when it holds nothing
    /// (a partial record keeps it).
    pub fn release(&mut self, pool: &mut CipherPool) {
        if self.cstart == self.cend && !self.cbuf.is_empty() {
            self.cstart = 0;
            self.cend = 0;
            pool.give(std::mem::take(&mut self.cbuf));
        }
    }

    /// Read plaintext into `out`, reading ciphertext from `stream` into a
    /// buffer from `pool` if the session holds none (no `stream`: driven by
    /// completions, only what was pushed). Returns the handshake that just
    /// completed (if one did) beside the result; `Err` is a fatal TLS or
    /// socket error (the alert, if any, is queued: flush before closing).
    pub fn read(
        &mut self,
        stream: Option<&TcpStream>,
        out: &mut [u8],
        done: &mut Option<(Handshake, f64)>,
        pool: &mut CipherPool,
    ) -> io::Result<TlsRead> {
        if std::mem::take(&mut self.plain_http) {
            return Ok(TlsRead::PlainHttp);
        }
        if self.cbuf.is_empty() {
            self.cbuf = pool.take();
        }
        let mut socket_drained = stream.is_none();
        loop {
            match self.conn.reader().read(out) {
                Ok(0) if !out.is_empty() => return Ok(TlsRead::Eof),
                Ok(n) if n > 0 => {
                    // A full `out` may have left plaintext inside rustls,
                    // and a close_notify read with the last request ends
                    // the stream: no readiness edge will announce either,
                    // so say there is more and the caller comes back.
                    let more = n == out.len()
                        || !socket_drained
                        || self.cstart < self.cend
                        || self.peer_closed;
                    return Ok(TlsRead::Data { n, more });
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // UnexpectedEof: TCP closed without close_notify; treat as
                // an ordinary close (HTTP framing says what was complete).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(TlsRead::Eof),
                Err(e) => return Err(e),
            }
            if self.cstart < self.cend {
                self.feed(done)?;
                continue;
            }
            let Some(stream) = stream.filter(|_| !socket_drained) else {
                // Handshake progress only: report it so the caller flushes.
                return Ok(if self.conn.wants_write() {
                    TlsRead::Data { n: 0, more: false }
                } else {
                    TlsRead::Drained
                });
            };
            match (&*stream).read(&mut self.cbuf) {
                Ok(0) => return Ok(TlsRead::Eof),
                Ok(n) => {
                    if self.fresh {
                        self.fresh = false;
                        // A TLS record starts with its content type (22 for
                        // the ClientHello); an HTTP method with a letter.
                        if self.cbuf[0].is_ascii_uppercase() {
                            return Ok(TlsRead::PlainHttp);
                        }
                    }
                    self.cstart = 0;
                    self.cend = n;
                    socket_drained = n < self.cbuf.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.conn.wants_write() {
                        return Ok(TlsRead::Data { n: 0, more: false });
                    }
                    return Ok(TlsRead::Drained);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Ciphertext from the ring's receive (driven by completions), queued
    /// for [`read`](Self::read). What completions bring after the
    /// connection stopped reading (its receive being cancelled) grows the
    /// buffer beyond its size, bounded by what the kernel had received.
    pub fn push(&mut self, bytes: &[u8], pool: &mut CipherPool) {
        let Some(&first) = bytes.first() else {
            return;
        };
        if std::mem::take(&mut self.fresh) && first.is_ascii_uppercase() {
            // See `read`: an HTTP method, not a ClientHello.
            self.plain_http = true;
        }
        if self.cbuf.is_empty() {
            self.cbuf = pool.take();
        }
        if self.cstart == self.cend {
            self.cstart = 0;
            self.cend = 0;
        } else if self.cbuf.len() - self.cend < bytes.len() {
            self.cbuf.copy_within(self.cstart..self.cend, 0);
            self.cend -= self.cstart;
            self.cstart = 0;
        }
        let end = self.cend + bytes.len();
        if end > self.cbuf.len() {
            let mut grown = std::mem::take(&mut self.cbuf).into_vec();
            grown.truncate(self.cend);
            grown.extend_from_slice(bytes);
            self.cbuf = grown.into_boxed_slice();
        } else {
            self.cbuf[self.cend..end].copy_from_slice(bytes);
        }
        self.cend = end;
    }

    /// A buffer's worth of ciphertext waits for rustls: receive no more.
    pub fn cipher_full(&self) -> bool {
        self.cend - self.cstart >= CIPHER_BUF
    }

    /// Driven by completions: the ciphertext to send now (what the last
    /// send left first, then the records rustls holds, as many as the
    /// buffer's capacity takes: at least a whole record, at most the
    /// largest output buffer the shard's pool keeps), in `spare` if
    /// nothing was left; `None` when there is none. Mark it lent with
    /// [`lent_as`](Self::lent_as).
    pub fn lend(&mut self, spare: impl FnOnce() -> Vec<u8>) -> Option<Vec<u8>> {
        if self.lent.is_some() || (self.sendq.is_empty() && !self.conn.wants_write()) {
            return None;
        }
        let mut buf = std::mem::take(&mut self.sendq);
        if buf.is_empty() {
            buf = spare();
        }
        if buf.capacity() < CIPHER_BUF {
            buf.reserve_exact(CIPHER_BUF - buf.len());
        }
        // Records past the buffer's room stay in rustls for the next send.
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut Room(&mut buf)) {
                Ok(1..) => {}
                _ => break,
            }
        }
        Some(buf)
    }

    /// The lent ciphertext is with ring send `id`.
    pub fn lent_as(&mut self, id: SendId) {
        self.lent = Some(id);
    }

    /// The ring send the ciphertext is lent to.
    pub fn lent(&self) -> Option<SendId> {
        self.lent
    }

    /// A ring send of the lent `buf` took `sent` bytes: the rest goes first
    /// next time. Returns a spare buffer, for the pool.
    pub fn give_back(&mut self, mut buf: Vec<u8>, sent: usize) -> Vec<u8> {
        self.lent = None;
        if sent >= buf.len() {
            buf.clear();
            return buf;
        }
        buf.drain(..sent);
        debug_assert!(
            self.sendq.is_empty(),
            "ciphertext queued beside a lent send"
        );
        self.sendq = buf;
        Vec::new()
    }

    /// Write what a ring send left unsent (before switching to syscalls
    /// for a last flush). `Ok(false)`: the socket is full.
    fn write_sendq(&mut self, stream: &TcpStream) -> io::Result<bool> {
        while !self.sendq.is_empty() {
            match Write::write(&mut &*stream, &self.sendq) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => drop(self.sendq.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        self.sendq = Vec::new();
        Ok(true)
    }

    /// Hand buffered ciphertext to rustls and process it.
    fn feed(&mut self, done: &mut Option<(Handshake, f64)>) -> io::Result<()> {
        let mut rest = &self.cbuf[self.cstart..self.cend];
        let before = rest.len();
        let res = self.conn.read_tls(&mut rest);
        self.cstart += before - rest.len();
        res?;
        match self.conn.process_new_packets() {
            Ok(state) => self.peer_closed = state.peer_has_closed(),
            Err(e) => {
                if !self.established {
                    self.established = true; // counted once, here
                    *done = Some((Handshake::Failed, self.started.elapsed().as_secs_f64()));
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        if !self.established && !self.conn.is_handshaking() {
            self.established = true;
            let kind = match self.conn.handshake_kind() {
                Some(HandshakeKind::Resumed) => Handshake::Resumed,
                _ => Handshake::Full,
            };
            *done = Some((kind, self.started.elapsed().as_secs_f64()));
        }
        Ok(())
    }

    /// Encrypt what `out` holds and write the records: as many rounds as
    /// the socket takes, up to [`MAX_ROUNDS`].
    pub fn flush(&mut self, out: &mut Output, stream: &TcpStream) -> Result<Flush, WriteError> {
        if !self.write_sendq(stream)? {
            return Ok(Flush::Blocked);
        }
        for _ in 0..MAX_ROUNDS {
            if !out.is_empty() && !self.conn.is_handshaking() {
                // Blocked here means rustls' buffer is full: write first.
                out.flush(&mut Encrypt(&mut self.conn))?;
            }
            if !self.conn.wants_write() {
                if out.is_empty() {
                    return Ok(Flush::Done);
                }
                if self.conn.is_handshaking() {
                    // Answers wait for the handshake, which reading drives.
                    return Ok(Flush::Blocked);
                }
                continue;
            }
            match self.conn.write_tls(&mut &*stream) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                Err(e) => return Err(e.into()),
            }
        }
        if out.is_empty() && !self.conn.wants_write() {
            Ok(Flush::Done)
        } else {
            Ok(Flush::Yielded)
        }
    }

    /// Queue a close_notify (before shutting down our side).
    pub fn close_notify(&mut self) {
        if self.established {
            self.conn.send_close_notify();
        }
    }

    /// Encrypt what `out` holds into rustls's buffer (driven by
    /// completions: [`lend`](Self::lend) takes the records). Answers wait
    /// while the handshake runs.
    pub fn encrypt(&mut self, out: &mut Output) -> Result<(), WriteError> {
        if !out.is_empty() && !self.conn.is_handshaking() {
            // Blocked here means rustls' buffer is full: sent first.
            out.flush(&mut Encrypt(&mut self.conn))?;
        }
        Ok(())
    }

    /// Best-effort write of whatever is queued (an alert, close_notify);
    /// nothing while a ring send holds earlier records.
    pub fn flush_alert(&mut self, stream: &TcpStream) {
        if self.lent.is_some() || !matches!(self.write_sendq(stream), Ok(true)) {
            return;
        }
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut &*stream).is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    use rustls::{ClientConfig, ClientConnection, RootCertStore};
    use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

    /// A server config for a fresh self-signed `localhost`, and its
    /// certificate.
    fn server_config() -> (ServerConfig, rcgen::CertifiedKey) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
        let cfg = ServerConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        (cfg, cert)
    }

    /// Plaintext read until the session says nothing more is there
    /// (from `sock`, or only what was pushed).
    fn read_all(server: &mut TlsConn, sock: Option<&TcpStream>, pool: &mut CipherPool) -> Vec<u8> {
        let mut got = Vec::new();
        let mut out = [0u8; 4096];
        let mut done = None;
        loop {
            match server.read(sock, &mut out, &mut done, pool).unwrap() {
                TlsRead::Data { n, more } => {
                    got.extend_from_slice(&out[..n]);
                    if !more {
                        return got;
                    }
                }
                TlsRead::Drained => return got,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// A server session and a client session over loopback, handshaken.
    pub(in crate::conn) fn pair() -> (TlsConn, TcpStream, ClientConnection, TcpStream) {
        let (server_cfg, cert) = server_config();
        let provider = Arc::new(crate::tls::provider());
        let mut roots = RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let client_cfg = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client_sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_sock, _) = listener.accept().unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut client = ClientConnection::new(Arc::new(client_cfg), name).unwrap();
        let mut server = TlsConn::new(&Arc::new(server_cfg), Instant::now()).unwrap();
        let shake = std::thread::spawn(move || {
            while client.is_handshaking() {
                client.complete_io(&mut client_sock).unwrap();
            }
            (client, client_sock)
        });
        while server.conn.is_handshaking() {
            server.conn.complete_io(&mut &server_sock).unwrap();
        }
        server.established = true;
        server.fresh = false;
        let (client, client_sock) = shake.join().unwrap();
        server_sock.set_nonblocking(true).unwrap();
        (server, server_sock, client, client_sock)
    }

    /// One record read whole from the socket, into a buffer with less room
    /// than its plaintext: the rest stays inside rustls, and `more` must say
    /// so, or the requests in it wait for a readiness edge that never comes
    /// (pipelined answers over TLS stalled after a read buffer's worth).
    #[test]
    fn plaintext_left_in_rustls_reads_as_more() {
        let (mut server, sock, mut client, mut client_sock) = pair();
        let sent: Vec<u8> = (0..12_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        client.writer().write_all(&sent).unwrap();
        while client.wants_write() {
            client.write_tls(&mut client_sock).unwrap();
        }
        // The whole record is in the socket before the first read.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut peek = [0u8; CIPHER_BUF];
        while sock.peek(&mut peek).map_or(0, |n| n) <= sent.len() {
            assert!(Instant::now() < deadline, "the record never arrived");
            std::thread::sleep(Duration::from_millis(5));
        }
        let got = read_all(&mut server, Some(&sock), &mut CipherPool::default());
        assert_eq!(got.len(), sent.len(), "plaintext left behind in rustls");
        assert!(got == sent);
    }

    /// Driven by completions: ciphertext pushed in pieces (as 4 KiB ring
    /// buffers bring it) reads back as the plaintext sent, with no socket
    /// read; the answer's records are lent, a partial send's remainder goes
    /// first in the next lend, and the client reads the bytes in order.
    #[test]
    fn pushed_ciphertext_and_lent_records_round_trip() {
        let (mut server, _sock, mut client, mut client_sock) = pair();
        let sent: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        client.writer().write_all(&sent).unwrap();
        let mut cipher = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut cipher).unwrap();
        }
        let mut pool = CipherPool::default();
        for piece in cipher.chunks(4096) {
            server.push(piece, &mut pool);
        }
        let got = read_all(&mut server, None, &mut pool);
        assert!(
            got == sent,
            "{} of {} plaintext bytes",
            got.len(),
            sent.len()
        );

        let answer: Vec<u8> = (0..32_000u32).map(|i| (i % 251) as u8).collect();
        let mut queue = Output::default();
        queue.buf().extend_from_slice(&answer);
        server.encrypt(&mut queue).unwrap();
        assert!(queue.is_empty() && server.wants_write());
        let first = server.lend(Vec::new).expect("records to lend");
        assert!(first.len() <= CIPHER_BUF, "a lend takes the buffer's room");
        server.lent_as(SendId::for_tests(7));
        assert_eq!(server.lent(), Some(SendId::for_tests(7)));
        assert!(server.lend(Vec::new).is_none(), "lent twice");
        // The kernel took 1000 bytes: the rest goes first next time.
        let mut wire = first[..1000].to_vec();
        let spare = server.give_back(first, 1000);
        assert!(spare.is_empty() && server.wants_write());
        server.close_notify();
        let mut id = 8;
        while let Some(next) = server.lend(Vec::new) {
            wire.extend_from_slice(&next);
            server.lent_as(SendId::for_tests(id));
            id += 1;
            let spare = server.give_back(next, usize::MAX);
            assert!(
                spare.is_empty() && spare.capacity() > 0,
                "the buffer comes back"
            );
        }
        assert!(id > 9, "32 000 bytes took more than two lends");
        assert!(!server.wants_write());

        // What the handshake left on the socket (session tickets) first.
        client_sock
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        while client.read_tls(&mut client_sock).is_ok_and(|n| n > 0) {
            client.process_new_packets().unwrap();
        }
        let mut rest = &wire[..];
        let mut plain = Vec::new();
        while !rest.is_empty() {
            client.read_tls(&mut rest).unwrap();
            let state = client.process_new_packets().unwrap();
            let mut chunk = vec![0; state.plaintext_bytes_to_read()];
            client.reader().read_exact(&mut chunk).unwrap();
            plain.extend_from_slice(&chunk);
        }
        assert!(
            plain == answer,
            "{} of {} answer bytes",
            plain.len(),
            answer.len()
        );
        assert!(client.process_new_packets().unwrap().peer_has_closed());
    }

    /// Cleartext HTTP pushed first on a TLS port reads as such, as it does
    /// from the socket.
    #[test]
    fn pushed_cleartext_http_is_recognised() {
        let (cfg, _) = server_config();
        let mut server = TlsConn::new(&Arc::new(cfg), Instant::now()).unwrap();
        let mut pool = CipherPool::default();
        server.push(b"GET / HTTP/1.1\r\n\r\n", &mut pool);
        let mut out = [0u8; 64];
        let got = server.read(None, &mut out, &mut None, &mut pool).unwrap();
        assert_eq!(got, TlsRead::PlainHttp);
    }
}
