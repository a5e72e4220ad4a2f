//! TLS side of the harness: test certificates (a private CA and leaves for
//! chosen names, made with rcgen), a server started with TLS listeners, and
//! [`Wire`], one client connection over either transport with the same
//! request/response calls, so a suite can run over cleartext and TLS and
//! compare.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::{
    log_field, method_of, output_text, output_with_stdin, parse_head, Response, Server, IO_TIMEOUT,
};

/// A private CA that signs the leaves of one test.
pub struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
    pub pem: String,
}

/// A leaf certificate and key written to `cert`/`key`.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub der: Vec<u8>,
}

impl Ca {
    pub fn new() -> Ca {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "shardhttpd test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        let pem = cert.pem();
        Ca { key, cert, pem }
    }

    /// Write the CA certificate (for curl `--cacert`, s_client `-CAfile`).
    pub fn write(&self, dir: &Path) -> PathBuf {
        let p = dir.join("ca.pem");
        std::fs::write(&p, &self.pem).unwrap();
        p
    }

    /// A P-256 leaf for `names`, written as `<tag>.crt`/`<tag>.key` in `dir`.
    pub fn leaf(&self, dir: &Path, tag: &str, names: &[&str]) -> Leaf {
        self.leaf_with(dir, tag, names, |_| {})
    }

    /// As [`leaf`](Self::leaf), with the parameters adjusted by `f`.
    pub fn leaf_with(
        &self,
        dir: &Path,
        tag: &str,
        names: &[&str],
        f: impl FnOnce(&mut CertificateParams),
    ) -> Leaf {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, tag);
        f(&mut params);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let cert_path = dir.join(format!("{tag}.crt"));
        let key_path = dir.join(format!("{tag}.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        Leaf {
            cert: cert_path,
            key: key_path,
            der: cert.der().to_vec(),
        }
    }

    /// An RSA-2048 leaf (the key made by `openssl genpkey`: *ring* cannot
    /// generate RSA keys), or None when openssl is not installed.
    pub fn rsa_leaf(&self, dir: &Path, tag: &str, names: &[&str]) -> Option<Leaf> {
        let key_path = dir.join(format!("{tag}.key"));
        let ok = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
            ])
            .arg(&key_path)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return None;
        }
        let pem = std::fs::read_to_string(&key_path).unwrap();
        let key = KeyPair::from_pem_and_sign_algo(&pem, &rcgen::PKCS_RSA_SHA256).unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, tag);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let cert_path = dir.join(format!("{tag}.crt"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        Some(Leaf {
            cert: cert_path,
            key: key_path,
            der: cert.der().to_vec(),
        })
    }

    /// As [`client`](Self::client), offering only the signature schemes
    /// `keep` accepts (the certificate chain is still verified in full).
    pub fn client_with_schemes(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
        keep: impl Fn(rustls::SignatureScheme) -> bool,
    ) -> Arc<ClientConfig> {
        let mut provider = rustls::crypto::ring::default_provider();
        let algs = &mut provider.signature_verification_algorithms;
        let mapping: Vec<_> = algs
            .mapping
            .iter()
            .filter(|(s, _)| keep(*s))
            .copied()
            .collect();
        algs.mapping = Vec::leak(mapping);
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.cert.der().to_vec()))
            .unwrap();
        let mut cfg = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(cfg)
    }

    /// A rustls client trusting this CA: `versions` empty means 1.3 and 1.2.
    pub fn client(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.cert.der().to_vec()))
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = if versions.is_empty() {
            rustls::ALL_VERSIONS
        } else {
            versions
        };
        let mut cfg = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}

impl Default for Ca {
    fn default() -> Self {
        Ca::new()
    }
}

/// A server with one cleartext and one TLS listener serving `leaf`.
pub struct TlsServer {
    pub server: Server,
    pub tls_addr: SocketAddr,
    pub client: Arc<ClientConfig>,
}

/// The TLS listening address from the server's log.
pub fn tls_addr(server: &Server) -> SocketAddr {
    let line = server
        .wait_for_log("listening tls_addr=", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no TLS listening line\n{}", server.log_text()));
    log_field(&line, "tls_addr")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("bad line {line:?}"))
}

impl TlsServer {
    /// `extra` flags are added after the TLS ones.
    pub fn start(root: &Path, ca: &Ca, leaf: &Leaf, extra: &[&str]) -> TlsServer {
        let cert = leaf.cert.display().to_string();
        let key = leaf.key.display().to_string();
        let mut args = vec![
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ];
        args.extend_from_slice(extra);
        let server = Server::start(root, &args);
        let tls_addr = tls_addr(&server);
        TlsServer {
            server,
            tls_addr,
            client: ca.client(&[]),
        }
    }

    /// A connection over `t` (TLS with SNI `localhost`).
    pub fn wire(&self, t: Transport) -> Wire {
        match t {
            Transport::Plain => Wire::plain(self.server.addr()),
            Transport::Tls => Wire::tls(self.tls_addr, &self.client, "localhost"),
        }
    }
}

/// The two transports a suite runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Plain,
    Tls,
}

pub const BOTH: [Transport; 2] = [Transport::Plain, Transport::Tls];

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// One client connection over either transport, with a buffer so
/// pipelined responses can be read one after another.
pub struct Wire {
    stream: Stream,
    buf: Vec<u8>,
}

fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let _ = s.set_nodelay(true);
    s
}

impl Wire {
    pub fn plain(addr: SocketAddr) -> Wire {
        Wire {
            stream: Stream::Plain(tcp(addr)),
            buf: Vec::new(),
        }
    }

    /// Connects and completes the handshake (panics if it fails).
    pub fn tls(addr: SocketAddr, client: &Arc<ClientConfig>, sni: &str) -> Wire {
        Wire::try_tls(addr, client, sni)
            .unwrap_or_else(|e| panic!("TLS handshake with {addr}: {e}"))
    }

    pub fn try_tls(addr: SocketAddr, client: &Arc<ClientConfig>, sni: &str) -> io::Result<Wire> {
        Wire::try_tls_pausing(addr, client, sni, Duration::ZERO)
    }

    /// [`tls`](Self::tls) over a connected socket (one with its own options).
    pub fn tls_on(tcp: TcpStream, client: &Arc<ClientConfig>, sni: &str) -> Wire {
        let name = ServerName::try_from(sni.to_owned()).unwrap();
        let conn = ClientConnection::new(Arc::clone(client), name).unwrap();
        let mut s = StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn
                .complete_io(&mut s.sock)
                .unwrap_or_else(|e| panic!("TLS handshake: {e}"));
        }
        Wire {
            stream: Stream::Tls(Box::new(s)),
            buf: Vec::new(),
        }
    }

    /// As [`try_tls`](Self::try_tls), but the client sends its ClientHello
    /// and then keeps silent for `pause` before finishing the handshake.
    pub fn try_tls_pausing(
        addr: SocketAddr,
        client: &Arc<ClientConfig>,
        sni: &str,
        pause: Duration,
    ) -> io::Result<Wire> {
        let name = ServerName::try_from(sni.to_owned()).unwrap();
        let conn = ClientConnection::new(Arc::clone(client), name).map_err(io::Error::other)?;
        let mut s = StreamOwned::new(conn, tcp(addr));
        if !pause.is_zero() {
            while s.conn.wants_write() {
                s.conn.write_tls(&mut s.sock)?;
            }
            std::thread::sleep(pause);
        }
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(Wire {
            stream: Stream::Tls(Box::new(s)),
            buf: Vec::new(),
        })
    }

    /// The TCP socket under the connection (for socket options).
    pub fn tcp(&self) -> &TcpStream {
        match &self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// The TLS session, for inspecting what was negotiated.
    pub fn session(&self) -> Option<&ClientConnection> {
        match &self.stream {
            Stream::Tls(s) => Some(&s.conn),
            Stream::Plain(_) => None,
        }
    }

    /// Writes all of `bytes` at once (one TLS record batch over TLS).
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes).expect("send request");
    }

    /// As [`send`](Self::send), for a caller that handles a connection the
    /// server has closed meanwhile (EPIPE, reset).
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionAborted
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// One response to a request with `method`; Err describes what failed.
    pub fn read_response_to(&mut self, method: &str) -> Result<Response, String> {
        let end = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            match self.fill() {
                Ok(0) => return Err(format!("closed with {} bytes buffered", self.buf.len())),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        };
        let mut resp = parse_head(&self.buf[..end])?;
        self.buf.drain(..end + 4);
        let bodiless = method == "HEAD" || resp.status == 204 || resp.status == 304;
        if bodiless {
            return Ok(resp);
        }
        let want: usize = match resp.header("content-length") {
            Some(v) => v.trim().parse().map_err(|_| format!("bad length {v:?}"))?,
            None => return Err(format!("no Content-Length: {resp:?}")),
        };
        while self.buf.len() < want {
            match self.fill() {
                Ok(0) => {
                    return Err(format!(
                        "closed after {} of {want} body bytes",
                        self.buf.len()
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(format!("read body: {e}")),
            }
        }
        resp.body = self.buf.drain(..want).collect();
        Ok(resp)
    }

    #[track_caller]
    pub fn roundtrip(&mut self, raw: &str) -> Response {
        self.send(raw.as_bytes());
        self.read_response_to(method_of(raw.as_bytes()))
            .unwrap_or_else(|e| panic!("no response to {raw:?}: {e}"))
    }

    /// Ok when the server closes (EOF, close_notify or reset) within
    /// `within` without sending more.
    pub fn expect_closed(&mut self, within: Duration) -> Result<(), String> {
        if !self.buf.is_empty() {
            return Err(format!("{} unexpected bytes", self.buf.len()));
        }
        if let Stream::Plain(s) = &self.stream {
            s.set_read_timeout(Some(within)).unwrap();
        }
        if let Stream::Tls(s) = &self.stream {
            s.sock.set_read_timeout(Some(within)).unwrap();
        }
        match self.fill() {
            Ok(0) => Ok(()),
            Ok(n) => Err(format!("expected close, got {n} bytes")),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                Err(format!("still open after {within:?}"))
            }
            Err(_) => Ok(()),
        }
    }
}

/// The response without its `Date` header, for comparing transports.
pub fn without_date(r: &Response) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = r
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("date"))
        .cloned()
        .collect();
    (r.status, headers, r.body.clone())
}

/// `openssl s_client ARGS` with `stdin` written to it, then closed (`Q\n`
/// ends the session; empty input ends it after the handshake): whether it
/// exited 0, and its stdout and stderr together.
pub fn s_client(args: &[&str], stdin: &str) -> (bool, String) {
    let out = output_with_stdin(
        std::process::Command::new("openssl")
            .arg("s_client")
            .args(args),
        stdin,
    );
    (out.status.success(), output_text(&out))
}
