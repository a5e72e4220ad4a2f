//! The server's cipher-suite preference: AES-128-GCM-SHA256 even when the
//! client lists AES-256-GCM-SHA384 first (as rustls and OpenSSL clients
//! do), ChaCha20 next, AES-256 last; every suite still works when it is the
//! only one a client offers. Key exchange: the hybrid post-quantum
//! X25519MLKEM768 works offered alone, and so does every classical group.

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

/// A client (aws-lc-rs, the provider with ML-KEM) offering only `groups`.
fn client_with_groups(
    ca: &Ca,
    groups: &[&'static dyn rustls::crypto::SupportedKxGroup],
    version: &'static SupportedProtocolVersion,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let provider = CryptoProvider {
        kx_groups: groups.to_vec(),
        ..rustls::crypto::aws_lc_rs::default_provider()
    };
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// X25519MLKEM768 alone (TLS 1.3) completes a handshake and is what was
/// negotiated; X25519, P-256 and P-384 alone still do (TLS 1.3 and 1.2); a
/// client listing X25519MLKEM768 first gets it, one listing X25519 first
/// gets X25519, each without a HelloRetryRequest.
#[test]
fn x25519mlkem768_offered_alone_and_classical_groups_still_work() {
    use rustls::crypto::aws_lc_rs::kx_group as g;
    use rustls::{HandshakeKind, NamedGroup as N};
    let site = Site::new("tls-groups");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, &[]);
    let tls13 = &rustls::version::TLS13;
    let tls12 = &rustls::version::TLS12;
    let cases: &[(
        &[&'static dyn rustls::crypto::SupportedKxGroup],
        &SupportedProtocolVersion,
        N,
    )] = &[
        (&[g::X25519MLKEM768], tls13, N::X25519MLKEM768),
        (&[g::X25519MLKEM768, g::X25519], tls13, N::X25519MLKEM768),
        (&[g::X25519, g::X25519MLKEM768], tls13, N::X25519),
        (&[g::X25519], tls13, N::X25519),
        (&[g::X25519], tls12, N::X25519),
        (&[g::SECP256R1], tls13, N::secp256r1),
        (&[g::SECP384R1], tls12, N::secp384r1),
    ];
    for (groups, version, want) in cases {
        let names: Vec<_> = groups.iter().map(|k| k.name()).collect();
        let client = client_with_groups(&ca, groups, version);
        let mut w = Wire::try_tls(server.tls_addr, &client, "localhost")
            .unwrap_or_else(|e| panic!("{version:?} {names:?}: {e}"));
        let session = w.session().unwrap();
        assert_eq!(
            session.negotiated_key_exchange_group().map(|k| k.name()),
            Some(*want),
            "{version:?} {names:?}"
        );
        assert_eq!(
            session.handshake_kind(),
            Some(HandshakeKind::Full),
            "{names:?}"
        );
        assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    }
}
