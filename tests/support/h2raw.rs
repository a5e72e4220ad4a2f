//! A frame-level HTTP/2 client written here, for the cases no real client
//! will produce: a frame sent a byte at a time, a header list a test spells
//! out field by field (neither `:authority` nor `host`, or both differing),
//! a reader that never reads. Over h2c or TLS (ALPN `h2`, rustls), so both
//! transports run without Python.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const END_STREAM: u8 = 1;
pub const END_HEADERS: u8 = 4;
pub const ACK: u8 = 1;

/// One frame as read.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's error code.
    pub fn goaway_code(&self) -> Option<u32> {
        (self.kind == GOAWAY && self.payload.len() >= 8)
            .then(|| u32::from_be_bytes(self.payload[4..8].try_into().unwrap()))
    }

    /// A RST_STREAM's error code.
    pub fn rst_code(&self) -> Option<u32> {
        (self.kind == RST_STREAM && self.payload.len() == 4)
            .then(|| u32::from_be_bytes(self.payload[..4].try_into().unwrap()))
    }
}

trait Io: Read + Write + Send {}
impl<T: Read + Write + Send> Io for T {}

/// What [`RawH2::next`] saw.
#[derive(Debug)]
pub enum Next {
    Frame(Frame),
    /// Nothing within the wait.
    Quiet,
    /// The server closed (an end of file or a reset).
    Closed,
}

pub struct RawH2 {
    io: Box<dyn Io>,
    tcp: TcpStream,
    buf: Vec<u8>,
    decoder: loona_hpack::Decoder<'static>,
}

impl RawH2 {
    /// h2c with prior knowledge: the preface and an empty SETTINGS sent.
    pub fn h2c(addr: SocketAddr) -> RawH2 {
        let tcp = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        RawH2::h2c_on(tcp)
    }

    /// [`h2c`](Self::h2c) on a connected socket (one with its own options).
    pub fn h2c_on(tcp: TcpStream) -> RawH2 {
        tcp.set_nodelay(true).unwrap();
        let io = Box::new(tcp.try_clone().unwrap());
        RawH2::start(io, tcp)
    }

    /// Over TLS with ALPN `h2` alone; `client` is cloned with that ALPN.
    pub fn tls(addr: SocketAddr, client: &Arc<ClientConfig>, sni: &str) -> RawH2 {
        let tcp = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        RawH2::tls_on(tcp, client, sni)
    }

    /// [`tls`](Self::tls) on a connected socket.
    pub fn tls_on(tcp: TcpStream, client: &Arc<ClientConfig>, sni: &str) -> RawH2 {
        let mut cfg = (**client).clone();
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let conn = ClientConnection::new(Arc::new(cfg), name).unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut io = StreamOwned::new(conn, tcp.try_clone().unwrap());
        while io.conn.is_handshaking() {
            io.conn
                .complete_io(&mut io.sock)
                .unwrap_or_else(|e| panic!("TLS handshake: {e}"));
        }
        assert_eq!(io.conn.alpn_protocol(), Some(&b"h2"[..]), "ALPN h2");
        RawH2::start(Box::new(io), tcp)
    }

    fn start(io: Box<dyn Io>, tcp: TcpStream) -> RawH2 {
        let mut c = RawH2 {
            io,
            tcp,
            buf: Vec::new(),
            decoder: loona_hpack::Decoder::new(),
        };
        c.send(PREFACE);
        c.frame(SETTINGS, 0, 0, &[]);
        c
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Write `bytes` (over TLS: one record) and flush.
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes).unwrap_or_else(|e| panic!("send: {e}"));
    }

    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.io.write_all(bytes)?;
        self.io.flush()
    }

    /// Grant the server the largest windows (SETTINGS_INITIAL_WINDOW_SIZE
    /// and the connection's WINDOW_UPDATE): only the socket holds it back.
    pub fn open_windows(&mut self) {
        let max: u32 = 0x7fff_ffff;
        let mut settings = 4u16.to_be_bytes().to_vec();
        settings.extend_from_slice(&max.to_be_bytes());
        self.frame(SETTINGS, 0, 0, &settings);
        self.frame(WINDOW_UPDATE, 0, 0, &(max - 65_535).to_be_bytes());
    }

    pub fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.send(&frame_bytes(kind, flags, stream, payload));
    }

    /// A HEADERS frame with END_HEADERS, the fields as literals that
    /// leave the server's decoder table alone.
    pub fn request(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        self.frame(HEADERS, flags, stream, &literals(fields));
    }

    /// The next frame, waiting at most `wait`.
    pub fn next(&mut self, wait: Duration) -> Next {
        let until = Instant::now() + wait;
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let f = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes(self.buf[5..9].try_into().unwrap())
                            & 0x7fff_ffff,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    return Next::Frame(f);
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Next::Quiet;
            }
            self.tcp.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 16384];
            match self.io.read(&mut chunk) {
                Ok(0) => return Next::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Next::Closed,
            }
        }
    }

    /// The answer on `stream`: its decoded response fields and body, or
    /// the RST_STREAM / GOAWAY code that ended it. Panics when nothing
    /// decisive comes within 10 s.
    pub fn answer(&mut self, stream: u32) -> Answer {
        let until = Instant::now() + Duration::from_secs(10);
        let mut fields = Vec::new();
        let mut body = Vec::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no answer on stream {stream} within 10 s");
            let f = match self.next(left) {
                Next::Frame(f) => f,
                Next::Quiet => continue,
                Next::Closed => return Answer::Closed,
            };
            if let Some(code) = f.goaway_code() {
                return Answer::Goaway(code);
            }
            if f.kind == SETTINGS && f.flags & ACK == 0 {
                self.frame(SETTINGS, ACK, 0, &[]);
                continue;
            }
            if f.stream != stream {
                continue;
            }
            match f.kind {
                HEADERS => {
                    fields = self
                        .decoder
                        .decode(&f.payload)
                        .expect("a valid HPACK block")
                        .into_iter()
                        .map(|(n, v)| {
                            (
                                String::from_utf8_lossy(&n).into_owned(),
                                String::from_utf8_lossy(&v).into_owned(),
                            )
                        })
                        .collect();
                }
                DATA => body.extend_from_slice(&f.payload),
                RST_STREAM => return Answer::Reset(f.rst_code().unwrap()),
                _ => {}
            }
            if f.flags & END_STREAM != 0 && matches!(f.kind, HEADERS | DATA) {
                return Answer::Response { fields, body };
            }
        }
    }
}

/// How a stream ended, as [`RawH2::answer`] saw it.
#[derive(Debug)]
pub enum Answer {
    Response {
        fields: Vec<(String, String)>,
        body: Vec<u8>,
    },
    Reset(u32),
    Goaway(u32),
    Closed,
}

impl Answer {
    pub fn status(&self) -> Option<u16> {
        self.field(":status").and_then(|s| s.parse().ok())
    }

    pub fn field(&self, name: &str) -> Option<&str> {
        match self {
            Answer::Response { fields, .. } => fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

pub fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = frame_head(kind, flags, stream, payload.len() as u32);
    b.extend_from_slice(payload);
    b
}

/// A frame head alone, declaring `len` payload bytes.
pub fn frame_head(kind: u8, flags: u8, stream: u32, len: u32) -> Vec<u8> {
    let mut b = len.to_be_bytes()[1..].to_vec();
    b.push(kind);
    b.push(flags);
    b.extend_from_slice(&stream.to_be_bytes());
    b
}

/// An HPACK block of literal fields without indexing, new names, no
/// Huffman coding (RFC 7541 §6.2.2): every byte as the test wrote it.
pub fn literals(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in fields {
        b.push(0x00);
        for s in [name.as_bytes(), value.as_bytes()] {
            assert!(s.len() < 127, "short strings only");
            b.push(s.len() as u8);
            b.extend_from_slice(s);
        }
    }
    b
}
