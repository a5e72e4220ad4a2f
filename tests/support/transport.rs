//! The transport the harness speaks, so that a whole suite written against
//! cleartext runs unchanged over TLS.
//!
//! Over TLS, [`Server::start`](super::Server::start) gives the server a TLS
//! listener with a fresh certificate and puts a [`TlsFront`] before it: a
//! local plaintext port where every accepted connection becomes one TLS
//! connection to the server (rustls client, certificate verified against
//! the test CA, SNI `localhost`, ALPN `http/1.1`). `Server::addr()` then
//! names the front, so `Conn`, raw sockets, pipelines and slow readers all
//! reach the server through TLS, and every byte the suite checks went
//! through the server's TLS transport. Whatever the client writes at once
//! leaves as one batch of records in one write; each batch of records the
//! server writes is decrypted and handed on in order.
//!
//! The transport is TLS when `SHARDHTTPD_TEST_TRANSPORT=tls`, or in the
//! `over_tls` test crate (which includes the HTTP suites), else cleartext.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use super::tls::{Ca, Transport};
use super::TempDir;

/// The transport of this test process.
pub fn selected() -> Transport {
    match std::env::var("SHARDHTTPD_TEST_TRANSPORT").as_deref() {
        Ok("tls") => Transport::Tls,
        Ok("plain") => Transport::Plain,
        Ok(other) => panic!("SHARDHTTPD_TEST_TRANSPORT={other:?}: use tls or plain"),
        Err(_) if env!("CARGO_CRATE_NAME") == "over_tls" => Transport::Tls,
        Err(_) => Transport::Plain,
    }
}

/// A certificate for `localhost` and the client that trusts it, made
/// before the server starts (its flags name the files).
pub struct FrontCerts {
    dir: TempDir,
    client: Arc<ClientConfig>,
    pub cert: String,
    pub key: String,
}

impl FrontCerts {
    pub fn new() -> FrontCerts {
        let dir = TempDir::new("tls-front");
        let ca = Ca::new();
        let leaf = ca.leaf(dir.path(), "localhost", &["localhost"]);
        FrontCerts {
            client: ca.client(&[]),
            cert: leaf.cert.display().to_string(),
            key: leaf.key.display().to_string(),
            dir,
        }
    }

    /// The server flags for a TLS listener with this certificate.
    pub fn flags(&self) -> [String; 6] {
        [
            "--tls-listen".into(),
            "127.0.0.1:0".into(),
            "--tls-cert".into(),
            self.cert.clone(),
            "--tls-key".into(),
            self.key.clone(),
        ]
    }
}

impl Default for FrontCerts {
    fn default() -> Self {
        FrontCerts::new()
    }
}

/// Plaintext per read on either side of the front.
const CHUNK: usize = 64 * 1024;

/// A front connection nobody reads from or writes to for this long is
/// abandoned, so a test that leaks one does not leak its threads forever.
const FRONT_IDLE: Duration = Duration::from_secs(120);

/// The local plaintext port before a server's TLS listener.
pub struct TlsFront {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handshakes: Arc<AtomicU64>,
    acceptor: Option<thread::JoinHandle<()>>,
    _certs: FrontCerts,
}

impl TlsFront {
    /// Listens on a free loopback port; each connection goes to `server`.
    pub fn start(server: SocketAddr, certs: FrontCerts) -> TlsFront {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the TLS front");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let handshakes = Arc::new(AtomicU64::new(0));
        let client = Arc::clone(&certs.client);
        let acceptor = {
            let stop = Arc::clone(&stop);
            let handshakes = Arc::clone(&handshakes);
            thread::spawn(move || {
                for local in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(local) = local else { continue };
                    let client = Arc::clone(&client);
                    let handshakes = Arc::clone(&handshakes);
                    thread::spawn(move || {
                        if let Ok(relay) = Relay::connect(server, &client) {
                            handshakes.fetch_add(1, Ordering::Relaxed);
                            relay.run(local);
                        }
                        // A failed handshake drops `local`: the client sees
                        // the connection closed, as it would the server's.
                    });
                }
            })
        };
        TlsFront {
            addr,
            stop,
            handshakes,
            acceptor: Some(acceptor),
            _certs: certs,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TLS handshakes the front completed with the server.
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Relaxed)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the acceptor so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

/// One TLS connection to the server, shared by the two directions.
struct Relay {
    tls: Arc<Mutex<ClientConnection>>,
    remote: TcpStream,
}

impl Relay {
    fn connect(server: SocketAddr, client: &Arc<ClientConfig>) -> io::Result<Relay> {
        let mut remote = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
        remote.set_nodelay(true)?;
        remote.set_read_timeout(Some(Duration::from_secs(5)))?;
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = ClientConnection::new(Arc::clone(client), name).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut remote)?;
        }
        remote.set_read_timeout(Some(FRONT_IDLE))?;
        Ok(Relay {
            tls: Arc::new(Mutex::new(conn)),
            remote,
        })
    }

    /// Relay both directions until both have ended.
    fn run(self, local: TcpStream) {
        let _ = local.set_nodelay(true);
        let _ = local.set_read_timeout(Some(FRONT_IDLE));
        let (Ok(local_w), Ok(remote_w)) = (local.try_clone(), self.remote.try_clone()) else {
            return;
        };
        let up_tls = Arc::clone(&self.tls);
        let up = thread::spawn(move || up_stream(local, remote_w, &up_tls));
        down_stream(self.remote, local_w, &self.tls);
        let _ = up.join();
    }
}

/// Encrypt everything rustls holds for sending into one buffer.
fn drain_records(conn: &mut ClientConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while conn.wants_write() {
        if conn.write_tls(&mut out).is_err() {
            break;
        }
    }
    out
}

/// Client to server: each read of plaintext leaves as one write of
/// records. The client's EOF becomes close_notify and a half-close.
fn up_stream(mut local: TcpStream, mut remote: TcpStream, tls: &Mutex<ClientConnection>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = local.read(&mut buf).unwrap_or(0);
        let records = {
            let mut conn = tls.lock().unwrap();
            if n == 0 {
                conn.send_close_notify();
            } else if conn.writer().write_all(&buf[..n]).is_err() {
                break;
            }
            drain_records(&mut conn)
        };
        if remote.write_all(&records).is_err() {
            // The server is gone: nothing more will be read either.
            let _ = local.shutdown(Shutdown::Read);
            break;
        }
        if n == 0 {
            let _ = remote.shutdown(Shutdown::Write);
            break;
        }
    }
}

/// Server to client: records are decrypted as they come and the plaintext
/// handed on in order. The server's close_notify, FIN or reset (or a TLS
/// error) closes the client's side.
fn down_stream(mut remote: TcpStream, mut local: TcpStream, tls: &Mutex<ClientConnection>) {
    let mut cipher = vec![0u8; CHUNK];
    let mut plain = vec![0u8; CHUNK];
    'relay: loop {
        let n = match remote.read(&mut cipher) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &cipher[..n];
        let mut out = Vec::new();
        let mut closed = false;
        {
            let mut conn = tls.lock().unwrap();
            loop {
                if !rest.is_empty() && conn.read_tls(&mut rest).is_err() {
                    closed = true;
                }
                if conn.process_new_packets().is_err() {
                    closed = true;
                }
                loop {
                    match conn.reader().read(&mut plain) {
                        Ok(0) => {
                            closed = true; // close_notify
                            break;
                        }
                        Ok(k) => out.extend_from_slice(&plain[..k]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            closed = true;
                            break;
                        }
                    }
                }
                if closed || rest.is_empty() {
                    break;
                }
            }
        }
        if local.write_all(&out).is_err() {
            break 'relay;
        }
        if closed {
            break;
        }
    }
    let _ = local.shutdown(Shutdown::Write);
}
