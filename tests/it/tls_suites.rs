//! The server's cipher-suite preference: AES-128-GCM-SHA256 even when the
//! client lists AES-256-GCM-SHA384 first (as rustls and OpenSSL clients
//! do), ChaCha20 next, AES-256 last; every suite still works when it is the
//! only one a client offers.

use crate::support;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{CipherSuite, ClientConfig, RootCertStore, SupportedProtocolVersion};
use support::tls::*;
use support::*;

/// A client trusting `ca` that offers `suites` in that order.
fn client(
    ca: &Ca,
    suites: &[CipherSuite],
    version: &'static SupportedProtocolVersion,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let all = rustls::crypto::ring::default_provider();
    let provider = CryptoProvider {
        cipher_suites: suites
            .iter()
            .map(|s| {
                *all.cipher_suites
                    .iter()
                    .find(|c| c.suite() == *s)
                    .unwrap_or_else(|| panic!("{s:?} not in the provider"))
            })
            .collect(),
        ..all
    };
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

#[test]
fn server_prefers_aes128_sha256_and_serves_every_suite_offered_alone() {
    use CipherSuite as S;
    let site = Site::new("tls-suites");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, &[]);
    let tls13 = &rustls::version::TLS13;
    let tls12 = &rustls::version::TLS12;
    let cases: &[(&[S], &SupportedProtocolVersion, S)] = &[
        // The order rustls and OpenSSL clients send.
        (
            &[
                S::TLS13_AES_256_GCM_SHA384,
                S::TLS13_AES_128_GCM_SHA256,
                S::TLS13_CHACHA20_POLY1305_SHA256,
            ],
            tls13,
            S::TLS13_AES_128_GCM_SHA256,
        ),
        (
            &[
                S::TLS13_AES_256_GCM_SHA384,
                S::TLS13_CHACHA20_POLY1305_SHA256,
            ],
            tls13,
            S::TLS13_CHACHA20_POLY1305_SHA256,
        ),
        (
            &[S::TLS13_AES_256_GCM_SHA384],
            tls13,
            S::TLS13_AES_256_GCM_SHA384,
        ),
        (
            &[
                S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            ],
            tls12,
            S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            &[S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384],
            tls12,
            S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ),
    ];
    for (offered, version, want) in cases {
        let cfg = client(&ca, offered, version);
        let mut w = Wire::tls(server.tls_addr, &cfg, "localhost");
        let got = w
            .session()
            .and_then(|s| s.negotiated_cipher_suite())
            .map(|s| s.suite());
        assert_eq!(got, Some(*want), "client offering {offered:?}");
        let r = w.roundtrip(&get("/index.html"));
        assert_eq!((r.status, r.body.as_slice()), (200, INDEX_HTML));
    }
}
