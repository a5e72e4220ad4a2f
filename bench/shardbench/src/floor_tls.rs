//! TLS for both floors: a second listener whose connections speak TLS
//! (rustls, the same aws-lc-rs provider and first cipher suite as
//! shardhttpd, TLS 1.3, one session ticket per full handshake as
//! shardhttpd sends, ALPN `http/1.1`). Each
//! received piece of ciphertext is decrypted in memory, its requests are
//! counted by the same [`Scan`] as cleartext, each gets the floor's fixed
//! response, and the records (with any handshake flight) go out in one send.
//! What is left over the cleartext floor is what any TLS server pays: the
//! record layer's crypto and copies, and the larger sends.
//!
//! `shardbench floor --tls-listen ADDR --tls-cert PEM --tls-key PEM`.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::{CipherSuite, ServerConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::floor::Scan;

/// A floor's TLS listener: its address and configuration.
pub type Listen = (std::net::SocketAddr, Arc<ServerConfig>);

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// The floors' TLS configuration from a PEM certificate chain and key.
pub fn config(cert: &Path, key: &Path) -> io::Result<Arc<ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(invalid)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(invalid)?;
    config_from(certs, key)
}

fn config_from(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> io::Result<Arc<ServerConfig>> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    // shardhttpd's first choice, so both sides of a ratio run one cipher.
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(invalid)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(invalid)?;
    config.ignore_client_order = true;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Resumption as shardhttpd offers it: one ticket per full handshake.
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(invalid)?;
    config.send_tls13_tickets = 1;
    Ok(Arc::new(config))
}

/// One connection's TLS session.
#[derive(Debug)]
pub struct Session {
    conn: ServerConnection,
}

impl Session {
    pub fn new(config: &Arc<ServerConfig>) -> io::Result<Session> {
        let mut conn = ServerConnection::new(Arc::clone(config)).map_err(invalid)?;
        // A pipelined burst of 100 KiB responses is written whole, then
        // drained to `out`.
        conn.set_buffer_limit(None);
        Ok(Session { conn })
    }

    /// Take `cipher` from the client: decrypt it, count its requests with
    /// `scan`, answer each with `responses[scan.kind()]` (a close_notify
    /// after a `Connection: close` answer), and append every byte to send
    /// to `out`. Returns the requests answered; an error ends the
    /// connection.
    pub fn exchange(
        &mut self,
        mut cipher: &[u8],
        scan: &mut Scan,
        responses: &[Vec<u8>; 4],
        out: &mut Vec<u8>,
    ) -> io::Result<usize> {
        let mut requests = 0;
        let mut plain = [0u8; 4096];
        while !cipher.is_empty() {
            self.conn.read_tls(&mut cipher)?;
            let state = self.conn.process_new_packets().map_err(invalid)?;
            let mut left = state.plaintext_bytes_to_read();
            while left > 0 {
                let n = self.conn.reader().read(&mut plain[..left.min(4096)])?;
                requests += scan.feed(&plain[..n]);
                left -= n;
            }
        }
        if requests > 0 {
            let response = &responses[scan.kind()];
            for _ in 0..requests {
                self.conn.writer().write_all(response)?;
            }
            if scan.close {
                self.conn.send_close_notify();
            }
        }
        while self.conn.wants_write() {
            self.conn.write_tls(out)?;
        }
        Ok(requests)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    /// A self-signed certificate for `localhost`, as the floors' config.
    pub fn config() -> Arc<ServerConfig> {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("rcgen");
        let key = PrivateKeyDer::try_from(made.key_pair.serialize_der()).expect("key");
        super::config_from(vec![made.cert.der().clone()], key).expect("the floor's TLS config")
    }

    /// Start a floor (`run`, given a TLS listener) and check its bytes over
    /// TLS with a rustls client ([`crate::floor::tests::answers_small_requests`]).
    pub fn answers_over_tls(run: fn(SocketAddr, Option<Listen>) -> io::Result<()>) {
        let free = || {
            let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("addr")
        };
        let (plain, addr) = (free(), free());
        std::thread::spawn(move || run(plain, Some((addr, config()))));
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
        let name = "localhost".try_into().expect("name");
        let conn = rustls::ClientConnection::new(Arc::new(client), name).expect("client");
        let tcp = loop {
            if let Ok(s) = TcpStream::connect(addr) {
                break s;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        crate::floor::tests::answers_small_requests(&mut rustls::StreamOwned::new(conn, tcp));
    }

    #[derive(Debug)]
    struct AnyCert;

    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &rustls_pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls_pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            rustls::crypto::aws_lc_rs::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}
