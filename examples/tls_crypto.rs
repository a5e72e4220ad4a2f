//! What the TLS crypto provider costs on this machine, measured the way
//! the shard loop uses rustls, all in memory (no sockets): record
//! encryption throughput of an established connection (16 KiB records,
//! each AEAD suite), the handshake signature alone (ECDSA P-256 and
//! RSA-2048), and whole TLS 1.3 handshakes, full and resumed, timed on the
//! server side only.
//!
//! ```sh
//! cargo run --release --example tls_crypto
//! ```
//!
//! The certificates are made with openssl. The figures are in
//! docs/benchmarks.md ("TLS crypto provider"). Both *ring* and aws-lc-rs
//! (the server's provider) are measured by the same code.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ProducesTickets;
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, ServerConfig, ServerConnection,
    SignatureScheme,
};

/// Plaintext per record in the throughput test: a full TLS record.
const RECORD: usize = 16 * 1024;
/// Bytes encrypted per suite.
const BULK: usize = 512 << 20;

fn main() {
    let dir = std::env::temp_dir().join(format!("tls-crypto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Both providers, alternating when run repeatedly (`ring`, `aws-lc-rs`
    // or nothing for both as the first argument).
    let only = std::env::args().nth(1).unwrap_or_default();
    if only != "aws-lc-rs" {
        let provider = rustls::crypto::ring::default_provider();
        let ticketer = || rustls::crypto::ring::Ticketer::new().expect("ticketer");
        report("ring", &provider, &ticketer, &dir);
    }
    if only != "ring" {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let ticketer = || rustls::crypto::aws_lc_rs::Ticketer::new().expect("ticketer");
        report("aws-lc-rs", &provider, &ticketer, &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Print every figure for `provider`.
pub fn report(
    name: &str,
    provider: &CryptoProvider,
    ticketer: &dyn Fn() -> Arc<dyn ProducesTickets>,
    dir: &Path,
) {
    println!("provider: {name}");
    let (pem_cert, pem_key) = certificate(dir, "ecdsa");
    for (suite, mbps) in bulk_by_suite(provider, &pem_cert, &pem_key) {
        println!("  encrypt {suite:?}: {mbps:.0} MB/s (median of rounds)");
    }
    for kind in ["ecdsa", "rsa"] {
        let (cert, key) = certificate(dir, kind);
        let us = sign(provider, &key, kind);
        println!("  sign {kind}: {us:.1} µs");
        let (full, resumed) = handshakes(provider, ticketer(), &cert, &key);
        println!(
            "  TLS 1.3 handshake {kind}, server side: full {full:.0} µs, resumed {resumed:.0} µs"
        );
    }
    let (cert, key) = certificate(dir, "ecdsa");
    for (suite, us) in resumed_by_suite(provider, ticketer, &cert, &key) {
        println!("  resumed handshake with {suite:?}: {us:.0} µs (median of rounds)");
    }
}

/// Server µs per resumed TLS 1.3 handshake for each suite, the suites
/// measured in alternating rounds so that drift in the machine's load hits
/// them alike; the median round of each.
fn resumed_by_suite(
    provider: &CryptoProvider,
    ticketer: &dyn Fn() -> Arc<dyn ProducesTickets>,
    cert: &[u8],
    key: &[u8],
) -> Vec<(rustls::CipherSuite, f64)> {
    const ROUNDS: usize = 15;
    const PER_ROUND: usize = 40;
    let suites: Vec<_> = provider
        .cipher_suites
        .iter()
        .filter(|s| s.tls13().is_some())
        .copied()
        .collect();
    let pairs: Vec<_> = suites
        .iter()
        .map(|s| {
            let one = CryptoProvider {
                cipher_suites: vec![*s],
                ..provider.clone()
            };
            let pair = configs(&one, Some(ticketer()), cert, key, true);
            handshake(&pair.0, &pair.1); // the first is full: it brings the ticket
            pair
        })
        .collect();
    let mut rounds = vec![Vec::new(); suites.len()];
    for _ in 0..ROUNDS {
        for (i, (server, client)) in pairs.iter().enumerate() {
            let mut t = Duration::ZERO;
            for _ in 0..PER_ROUND {
                t += handshake(server, client).0;
            }
            rounds[i].push(t.as_secs_f64() * 1e6 / PER_ROUND as f64);
        }
    }
    suites
        .iter()
        .zip(rounds)
        .map(|(s, mut r)| {
            r.sort_by(f64::total_cmp);
            (s.suite(), r[r.len() / 2])
        })
        .collect()
}

/// A self-signed certificate (`ecdsa`: P-256, `rsa`: 2048 bits) for
/// localhost: (chain PEM, key PEM).
fn certificate(dir: &Path, kind: &str) -> (Vec<u8>, Vec<u8>) {
    let cert = dir.join(format!("{kind}.crt"));
    let key = dir.join(format!("{kind}.key"));
    if !cert.exists() {
        let (alg, opt) = match kind {
            "rsa" => ("rsa", "rsa_keygen_bits:2048"),
            _ => ("ec", "ec_paramgen_curve:prime256v1"),
        };
        let ok = Command::new("openssl")
            .args(["req", "-x509", "-newkey", alg, "-pkeyopt", opt, "-nodes"])
            .args(["-days", "2", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("run openssl")
            .status
            .success();
        assert!(ok, "openssl req failed");
    }
    (
        std::fs::read(cert).expect("cert"),
        std::fs::read(key).expect("key"),
    )
}

fn chain(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .expect("PEM chain")
}

fn key_of(pem: &[u8]) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_slice(pem).expect("PEM key")
}

/// µs per handshake signature (ECDSA P-256 SHA-256, or RSA-PSS SHA-256 as
/// TLS 1.3 requires).
fn sign(provider: &CryptoProvider, key: &[u8], kind: &str) -> f64 {
    let key = provider
        .key_provider
        .load_private_key(key_of(key))
        .expect("load key");
    let scheme = match kind {
        "rsa" => SignatureScheme::RSA_PSS_SHA256,
        _ => SignatureScheme::ECDSA_NISTP256_SHA256,
    };
    let signer = key.choose_scheme(&[scheme]).expect("scheme");
    // What TLS 1.3 signs: 64 spaces, a context string, a transcript hash.
    let message = [0x20u8; 130];
    let n = if kind == "rsa" { 500 } else { 5000 };
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(signer.sign(&message).expect("sign"));
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// Accepts any certificate: only the server's side is measured here.
#[derive(Debug)]
struct AnyCert(Vec<SignatureScheme>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.clone()
    }
}

fn configs(
    provider: &CryptoProvider,
    ticketer: Option<Arc<dyn ProducesTickets>>,
    cert: &[u8],
    key: &[u8],
    resume: bool,
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let provider = Arc::new(provider.clone());
    let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain(cert), key_of(key))
        .expect("server config");
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    if let Some(t) = ticketer {
        server.ticketer = t;
        server.send_tls13_tickets = 1;
    }
    let schemes = provider
        .signature_verification_algorithms
        .supported_schemes();
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(schemes)))
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        client.resumption = Resumption::disabled();
    }
    (Arc::new(server), Arc::new(client))
}

/// Run a handshake in memory; returns the server's time in it.
fn handshake(
    server_cfg: &Arc<ServerConfig>,
    client_cfg: &Arc<ClientConfig>,
) -> (Duration, ServerConnection, ClientConnection) {
    let name = ServerName::try_from("localhost").unwrap();
    let mut client = ClientConnection::new(Arc::clone(client_cfg), name).expect("client");
    let mut server_time = Duration::ZERO;
    let start = Instant::now();
    let mut server = ServerConnection::new(Arc::clone(server_cfg)).expect("server");
    server_time += start.elapsed();
    let mut wire = Vec::new();
    for _ in 0..16 {
        wire.clear();
        while client.wants_write() {
            client.write_tls(&mut wire).expect("client write");
        }
        let start = Instant::now();
        let mut rest = &wire[..];
        while !rest.is_empty() {
            server.read_tls(&mut rest).expect("server read");
            server.process_new_packets().expect("server process");
        }
        let mut back = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut back).expect("server write");
        }
        server_time += start.elapsed();
        let mut rest = &back[..];
        while !rest.is_empty() {
            client.read_tls(&mut rest).expect("client read");
            client.process_new_packets().expect("client process");
        }
        if !server.is_handshaking() && !client.is_handshaking() && !client.wants_write() {
            break;
        }
    }
    assert!(!server.is_handshaking(), "handshake did not finish");
    (server_time, server, client)
}

/// Server-side µs per full and per resumed TLS 1.3 handshake (X25519).
fn handshakes(
    provider: &CryptoProvider,
    ticketer: Arc<dyn ProducesTickets>,
    cert: &[u8],
    key: &[u8],
) -> (f64, f64) {
    let n = 300;
    let (server, client) = configs(provider, None, cert, key, false);
    let mut full = Duration::ZERO;
    for _ in 0..n {
        full += handshake(&server, &client).0;
    }
    let (server, client) = configs(provider, Some(ticketer), cert, key, true);
    let mut resumed = Duration::ZERO;
    let mut count = 0;
    for i in 0..=n {
        let (t, s, _) = handshake(&server, &client);
        // The first is full; the ticket it sent makes the next resumed.
        if i > 0 {
            assert_eq!(s.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
            resumed += t;
            count += 1;
        }
    }
    (
        full.as_secs_f64() * 1e6 / n as f64,
        resumed.as_secs_f64() * 1e6 / count as f64,
    )
}

/// MB/s the server encrypts at on an established connection, per TLS 1.3
/// suite: alternating rounds of [`BULK`] / 16 bytes each, the median round.
fn bulk_by_suite(
    provider: &CryptoProvider,
    cert: &[u8],
    key: &[u8],
) -> Vec<(rustls::CipherSuite, f64)> {
    const ROUNDS: usize = 16;
    let per_round = BULK / ROUNDS;
    let suites: Vec<_> = provider
        .cipher_suites
        .iter()
        .filter(|s| s.tls13().is_some())
        .copied()
        .collect();
    let mut servers: Vec<ServerConnection> = suites
        .iter()
        .map(|s| {
            let one = CryptoProvider {
                cipher_suites: vec![*s],
                ..provider.clone()
            };
            let (server_cfg, client_cfg) = configs(&one, None, cert, key, false);
            let (_, mut server, _) = handshake(&server_cfg, &client_cfg);
            server.set_buffer_limit(None);
            server
        })
        .collect();
    let plain = vec![0x5au8; RECORD];
    let mut wire = Vec::with_capacity(RECORD + 1024);
    let mut rounds = vec![Vec::new(); suites.len()];
    for _ in 0..ROUNDS {
        for (i, server) in servers.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..per_round / RECORD {
                server.writer().write_all(&plain).expect("encrypt");
                wire.clear();
                while server.wants_write() {
                    server.write_tls(&mut wire).expect("records");
                }
                std::hint::black_box(&wire);
            }
            rounds[i].push(per_round as f64 / start.elapsed().as_secs_f64() / 1e6);
        }
    }
    suites
        .iter()
        .zip(rounds)
        .map(|(s, mut r)| {
            r.sort_by(f64::total_cmp);
            (s.suite(), r[r.len() / 2])
        })
        .collect()
}
