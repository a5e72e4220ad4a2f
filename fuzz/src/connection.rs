//! Drives one real [`Conn`] the way a shard does, over a loopback TCP pair,
//! with the client's bytes arriving in the chunks the input chooses, and
//! checks the framing of everything the server sends back.
//!
//! Input: a sequence of chunks, each a length byte and then that many bytes
//! (the last may be shorter). A chunk of length 0 is a pause: the server
//! gets a turn with nothing new. After the last chunk the server gets turns
//! until it goes quiet; then, as [`Ending`] says, the client half-closes
//! before or after the connection's timeout fires (the 408 path for a
//! request cut short).
//!
//! Over [`Transport::Tls`] a rustls client encrypts each chunk into records
//! of its own (one write per chunk), so the HTTP code sees the same bytes
//! through the TLS transport; [`Transport::RawTls`] writes the chunks as
//! they are to a TLS connection (handshake garbage, cleartext HTTP).
//!
//! Checked beyond "no panic": every response is `HTTP/1.1 <3 digits>`, has
//! exactly one `Content-Length` and no `Transfer-Encoding`, and is followed
//! by exactly that many body bytes unless it answers a HEAD request or is a
//! 1xx, 204 or 304 (the requests are found with the server's own parser, as
//! the connection consumes them); nothing follows the last response but the
//! close; there are no more responses than requests plus one error. Raw
//! cleartext on the TLS port gets exactly the plain-text 400.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};

use shardhttpd::cache::{Snapshot, Store};
use shardhttpd::config::{Config, Settings};
use shardhttpd::conn::Scratch;
use shardhttpd::conn::tls::{TlsConn, PLAIN_HTTP_ANSWER};
use shardhttpd::conn::{BufPool, Conn, ConnConfig, ShardEnv, Step, Stop};
use shardhttpd::http::chunked;
use shardhttpd::http::date::DateCache;
use shardhttpd::http::request::{self, Method};
use shardhttpd::metrics::{CloseReason, ShardCounters};
use shardhttpd::sys::{EPOLLIN, EPOLLOUT};
use shardhttpd::tls::{CertPaths, Tls, TlsSettings};

/// How the input's bytes reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Plain,
    /// Chunks are plaintext, each encrypted into records by a TLS client.
    Tls,
    /// Chunks go as they are to a TLS connection.
    RawTls,
}

/// How the client ends once the server has gone quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Half-close (close_notify first over TLS), then the timeout fires.
    HalfClose,
    /// The timeout fires while the client still holds the connection open.
    Timeout,
}

/// Turns the server gets after the input, at most, to finish its answers.
const QUIET_TURNS: usize = 64;

/// Most bytes of response kept for the framing check; a body beyond this
/// (a large file answered many times) is checked by length only.
const KEEP: usize = 1 << 20;

/// What every run shares: the document root, its snapshot, the TLS
/// configurations and a listener for the loopback pairs.
struct World {
    /// Locked from connect to accept, so concurrent runs (the seed tests)
    /// each accept their own connection.
    listener: Mutex<TcpListener>,
    snapshot: Arc<Snapshot>,
    cfg: ConnConfig,
    server_tls: Arc<ServerConfig>,
    client_tls: Arc<ClientConfig>,
    _store: Store,
}

/// Files of several sizes: an answer copied whole, one from the arena and
/// one read in pieces; compressible text for the encoded variants.
fn fixture(dir: &std::path::Path) -> io::Result<()> {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("dir"))?;
    std::fs::write(www.join("index.html"), b"<!doctype html><p>hello</p>\n")?;
    std::fs::write(www.join("dir/index.html"), b"<p>dir</p>\n")?;
    std::fs::write(
        www.join("digits.txt"),
        b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    )?;
    let css: String = (0..300)
        .map(|i| format!(".c{i} {{ color: red }}\n"))
        .collect();
    std::fs::write(www.join("app.css"), css)?;
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(www.join("big.bin"), big)?;
    std::fs::write(www.join("404.html"), b"<p>not here</p>\n")?;
    Ok(())
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("shardhttpd-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        fixture(&dir).expect("write the fixture");
        let (cert, key, ca) = certificate(&dir);
        let toml = format!(
            "root = {:?}\nmax_head_bytes = 2048\nmax_uri_bytes = 512\n\
             sendfile_threshold = 200000\n",
            dir.join("www").display().to_string()
        );
        let settings = Settings::from_toml(&toml).expect("fuzz settings");
        let config = Config::validate(settings, &[0]).expect("valid fuzz config");
        let store = Store::open(config.build_options()).expect("build the snapshot");
        if store.compress_pending() {
            store.build_compressed().expect("compressed variants");
        }
        let tls = Tls::new(&TlsSettings {
            listen: Vec::new(),
            pairs: vec![CertPaths {
                cert,
                key,
                origin: "fuzz".into(),
            }],
            ticket_key_file: None,
            // The checks below read HTTP/1 framing.
            h2: false,
            acme_tls_alpn: false,
        })
        .expect("TLS configuration");
        let mut roots = RootCertStore::empty();
        roots.add(ca).expect("CA certificate");
        let mut client =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        World {
            listener: Mutex::new(TcpListener::bind("127.0.0.1:0").expect("bind loopback")),
            snapshot: store.load(),
            cfg: ConnConfig {
                // As `hsts` would set it (that key needs a TLS listener).
                hsts_line: b"Strict-Transport-Security: max-age=60\r\n".to_vec(),
                // HTTP/1 only: the checks read HTTP/1 framing.
                h2c: false,
                ..ConnConfig::new(&config)
            },
            server_tls: Arc::clone(&tls.config),
            client_tls: Arc::new(client),
            _store: store,
        }
    })
}

/// A CA and a `localhost` leaf signed by it: (leaf cert file, key file,
/// CA certificate).
fn certificate(dir: &std::path::Path) -> (PathBuf, PathBuf, CertificateDer<'static>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .expect("leaf params")
        .signed_by(&key, &ca, &ca_key)
        .expect("leaf certificate");
    let cert_path = dir.join("leaf.crt");
    let key_path = dir.join("leaf.key");
    std::fs::write(&cert_path, leaf.pem()).expect("write cert");
    std::fs::write(&key_path, key.serialize_pem()).expect("write key");
    (cert_path, key_path, ca.der().clone())
}

/// The client end: a socket, its TLS session over [`Transport::Tls`], and
/// what it has received (plaintext, or ciphertext for RawTls).
struct Client {
    sock: TcpStream,
    tls: Option<ClientConnection>,
    /// Bytes not yet taken by the socket.
    pending: Vec<u8>,
    received: Vec<u8>,
    /// Bytes received beyond [`KEEP`] (dropped from `received`).
    dropped: usize,
    /// The server's TLS session failed or closed.
    tls_over: bool,
}

impl Client {
    fn send(&mut self, chunk: &[u8]) {
        match &mut self.tls {
            Some(tls) => {
                if !chunk.is_empty() {
                    // Buffered by rustls until the handshake is done.
                    let _ = tls.writer().write_all(chunk);
                }
            }
            None => self.pending.extend_from_slice(chunk),
        }
        self.push();
    }

    /// Write what the socket takes now.
    fn push(&mut self) {
        if let Some(tls) = &mut self.tls {
            while tls.wants_write() {
                match tls.write_tls(&mut self.sock) {
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            return;
        }
        while !self.pending.is_empty() {
            match self.sock.write(&self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(_) => break,
            }
        }
    }

    /// Read what has arrived; false when nothing did.
    fn pull(&mut self) -> bool {
        let mut buf = [0u8; 64 * 1024];
        let mut got = false;
        loop {
            let n = match self.sock.read(&mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => n,
            };
            got = true;
            match &mut self.tls {
                None => self.keep(&buf[..n]),
                Some(_) if self.tls_over => {}
                Some(_) => self.decrypt(&buf[..n]),
            }
        }
    }

    fn decrypt(&mut self, mut cipher: &[u8]) {
        let mut plain = [0u8; 16 * 1024];
        while !cipher.is_empty() && !self.tls_over {
            let tls = self.tls.as_mut().expect("a TLS client");
            if tls.read_tls(&mut cipher).is_err() || tls.process_new_packets().is_err() {
                self.tls_over = true;
            }
            loop {
                let tls = self.tls.as_mut().expect("a TLS client");
                match tls.reader().read(&mut plain) {
                    Ok(0) => {
                        self.tls_over = true;
                        break;
                    }
                    Ok(n) => self.keep(&plain[..n]),
                    Err(_) => break,
                }
            }
        }
        self.push(); // the handshake's next flight, or queued requests
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = KEEP.saturating_sub(self.received.len());
        let take = room.min(bytes.len());
        self.received.extend_from_slice(&bytes[..take]);
        self.dropped += bytes.len() - take;
    }
}

/// The chunks of the input (see the module docs).
fn chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        let take = (len as usize).min(rest.len());
        out.push(&rest[..take]);
        data = &rest[take..];
    }
    out
}

/// The shard's per-connection state, minus the connection.
struct Shard {
    date: DateCache,
    scratch: Scratch,
    pool: BufPool,
    counters: ShardCounters,
}

impl Shard {
    fn turn(&mut self, conn: &mut Conn, w: &World, timeout: bool) -> Step {
        let mut env = ShardEnv {
            cfg: &w.cfg,
            snapshot: &w.snapshot,
            date: &self.date,
            scratch: &mut self.scratch,
            pool: &mut self.pool,
            counters: &mut self.counters,
            log: None,
            now: Instant::now(),
            stop: Stop::Serving,
        };
        if timeout {
            conn.on_timeout(&mut env)
        } else {
            conn.on_ready(EPOLLIN | EPOLLOUT, &mut env)
        }
    }
}

/// Run one input over `transport`; returns the statuses of the responses
/// (none for [`Transport::RawTls`]).
pub fn run(transport: Transport, ending: Ending, data: &[u8]) -> Vec<u16> {
    let w = world();
    let (sock, (server, peer)) = {
        let listener = w.listener.lock().unwrap_or_else(|e| e.into_inner());
        let sock = TcpStream::connect(listener.local_addr().expect("bound")).expect("connect");
        (sock, listener.accept().expect("accept"))
    };
    sock.set_nonblocking(true).expect("nonblocking client");
    server.set_nonblocking(true).expect("nonblocking server");
    // As the shard sets it at accept; on the client, so that Nagle does not
    // hold a small chunk back until the next turn has passed.
    sock.set_nodelay(true).expect("client nodelay");
    server.set_nodelay(true).expect("server nodelay");
    let now = Instant::now();
    let tls = match transport {
        Transport::Plain => None,
        _ => Some(Box::new(
            TlsConn::new(&w.server_tls, now).expect("TLS session"),
        )),
    };
    let mut conn = Conn::new(server, Some(peer), now, &w.cfg, tls);
    let mut shard = Shard {
        date: DateCache::new(SystemTime::now()),
        scratch: Scratch::default(),
        pool: BufPool::default(),
        counters: ShardCounters::new(false),
    };
    let client_tls = (transport == Transport::Tls).then(|| {
        let name = ServerName::try_from("localhost").expect("server name");
        ClientConnection::new(Arc::clone(&w.client_tls), name).expect("TLS client")
    });
    let mut client = Client {
        sock,
        tls: client_tls,
        pending: Vec::new(),
        received: Vec::new(),
        dropped: 0,
        tls_over: false,
    };
    client.push(); // the ClientHello
    let chunks = chunks(data);
    let mut closed = None;
    for chunk in &chunks {
        client.send(chunk);
        if let Step::Close(reason) = shard.turn(&mut conn, w, false) {
            closed = Some(reason);
            break;
        }
        client.pull();
    }
    // Let the server finish, then end as `ending` says.
    let mut half_closed = false;
    let mut timed_out = false;
    let mut quiet = 0;
    while closed.is_none() && quiet < QUIET_TURNS {
        client.push();
        let fire = std::mem::take(&mut timed_out);
        if let Step::Close(reason) = shard.turn(&mut conn, w, fire) {
            closed = Some(reason);
            break;
        }
        if client.pull() {
            quiet = 0;
            continue;
        }
        quiet += 1;
        if quiet < QUIET_TURNS / 2 {
            continue;
        }
        if !half_closed && (ending == Ending::HalfClose || quiet == QUIET_TURNS - 1) {
            if let Some(tls) = &mut client.tls {
                tls.send_close_notify();
                client.push();
            }
            let _ = client.sock.shutdown(Shutdown::Write);
            half_closed = true;
            quiet = QUIET_TURNS / 2;
        } else if half_closed == (ending == Ending::HalfClose) && quiet == QUIET_TURNS / 2 + 1 {
            // The deadline passed: the next turn is the timer's.
            timed_out = true;
        }
    }
    drop(conn); // closes the server's socket
    while client.pull() {}
    check(transport, &chunks, &client, closed)
}

/// The request the connection consumed, in order: true for HEAD.
fn heads_of(input: &[u8]) -> Vec<bool> {
    let limits = &world().cfg.limits;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        match request::parse(&input[pos..], limits) {
            Ok(Some(req)) => {
                out.push(req.method == Method::Head);
                let body_at = pos + req.head_len;
                if req.chunked {
                    // The body's end is where the chunked framing says.
                    let mut body = chunked::Decoder::new(world().cfg.max_discard);
                    match body.feed(&input[body_at..]) {
                        (used, chunked::Progress::Done) => pos = body_at + used,
                        _ => break,
                    }
                    continue;
                }
                let next = body_at as u64 + req.content_length;
                pos = usize::try_from(next).unwrap_or(usize::MAX);
            }
            _ => break,
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The framing checks of the module docs; the statuses seen.
fn check(
    transport: Transport,
    chunks: &[&[u8]],
    client: &Client,
    closed: Option<CloseReason>,
) -> Vec<u16> {
    let input: Vec<u8> = chunks.concat();
    let mut statuses = Vec::new();
    if transport == Transport::RawTls {
        // A ClientHello begins with 22; an HTTP method with a capital.
        if input.first().is_some_and(u8::is_ascii_uppercase) {
            assert_eq!(
                client.received, PLAIN_HTTP_ANSWER,
                "cleartext on the TLS port"
            );
        }
        return statuses;
    }
    // A response cut short is only possible when the connection ended on
    // an error or a write it could not finish.
    let complete = client.dropped == 0
        && matches!(closed, Some(r) if r != CloseReason::Error && r != CloseReason::WriteTimeout);
    let heads = heads_of(&input);
    let mut b = &client.received[..];
    let mut n = 0;
    while !b.is_empty() {
        assert!(
            b.starts_with(b"HTTP/1.1 ") && b.len() >= 12 && b[9..12].iter().all(u8::is_ascii_digit),
            "response {n} does not start with a status line: {:?}",
            String::from_utf8_lossy(&b[..b.len().min(80)])
        );
        let Some(end) = find(b, b"\r\n\r\n") else {
            assert!(!complete, "response {n}: head cut short");
            return statuses;
        };
        let head = std::str::from_utf8(&b[..end]).expect("ASCII head");
        let status: u16 = head[9..12].parse().expect("status digits");
        statuses.push(status);
        let mut lengths = head
            .split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.trim().parse::<usize>().expect("numeric Content-Length"));
        let len = lengths.next().unwrap_or(0);
        assert!(
            lengths.next().is_none(),
            "response {n}: two Content-Lengths"
        );
        assert!(
            !head.to_ascii_lowercase().contains("\r\ntransfer-encoding:"),
            "response {n}: Transfer-Encoding"
        );
        if status != 204 && status != 304 && status >= 200 {
            assert!(
                head.to_ascii_lowercase().contains("\r\ncontent-length:"),
                "response {n} ({status}) has no Content-Length: {head}"
            );
        }
        b = &b[end + 4..];
        let bodiless = heads.get(n).copied().unwrap_or(false)
            || status == 204
            || status == 304
            || status < 200;
        if !bodiless {
            if b.len() < len {
                assert!(!complete, "response {n}: {} of {len} body bytes", b.len());
                return statuses;
            }
            b = &b[len..];
        }
        n += 1;
    }
    assert!(
        n <= heads.len() + 1,
        "{n} responses to {} requests",
        heads.len()
    );
    statuses
}
