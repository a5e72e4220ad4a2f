//! TLS configuration shared by every shard: the rustls `ServerConfig`
//! (TLS 1.3 and 1.2, ALPN `http/1.1`, the certificate resolver and the
//! ticketer), the certificate set behind an `ArcSwap`, and its reloading.
//!
//! The per-connection side (driving a `ServerConnection` from the epoll
//! loop) is `conn::tls`. Reloading swaps the certificate set that the
//! resolver reads, not the `ServerConfig` itself: new handshakes pick the
//! new certificate up at once, established connections keep theirs, and
//! the ticket keys and the TLS 1.2 session cache survive the reload.

pub mod certs;
pub mod tickets;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig};
use rustls::sign::CertifiedKey;

pub use certs::{CertPaths, CertSet};

/// How often the certificate and key files are checked for changes: new
/// handshakes see a replaced certificate within this (plus the load).
const WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// TLS session tickets sent after a full TLS 1.3 handshake. One is enough
/// for a client that resumes once per connection; each costs an encryption
/// and ~200 bytes.
const TLS13_TICKETS: usize = 1;

/// Ciphertext rustls may hold encrypted but unsent per connection: room
/// for a verified-copy piece (32 KiB, `io::output::COPY_CHUNK`) and its
/// records' overhead, so one piece is one `writev`; bounded because a
/// client that stops reading leaves it full.
pub const SEND_BUFFER: usize = 34 * 1024;

/// Validated TLS settings.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub listen: Vec<SocketAddr>,
    /// The first pair is the default for clients without (known) SNI.
    pub pairs: Vec<CertPaths>,
    pub ticket_key_file: Option<PathBuf>,
    /// Offer ALPN `h2` (before `http/1.1`: the server's preference).
    pub h2: bool,
    /// Answer ACME TLS-ALPN-01 validations (ALPN `acme-tls/1`, RFC 8737).
    pub acme_tls_alpn: bool,
}

/// The crypto provider: aws-lc-rs (see README, "TLS"; ring measured
/// against it in docs/benchmarks.md), with its default suites: TLS 1.3
/// AES-GCM and ChaCha20-Poly1305, TLS 1.2 ECDHE with the same AEADs only.
/// No CBC, no RSA key exchange, no static DH.
///
/// The suites are in the server's order of preference (the config sets
/// `ignore_client_order`): AES-128-GCM with SHA-256 first. Most clients
/// list AES-256-GCM-SHA384 first, but on x86 SHA-256 has instructions
/// (SHA-NI) and SHA-512 does not, so the SHA-384 key schedule was an
/// eighth of a resumed handshake's CPU (docs/benchmarks.md, "TLS");
/// AES-128 also encrypts a little faster. ChaCha20 comes before AES-256,
/// for the rare client that offers no AES-128.
///
/// Key exchange: the hybrid post-quantum X25519MLKEM768 first (current
/// Chrome, Firefox and Safari list it first and send a share for it),
/// then X25519, P-256, P-384. rustls takes the first group in the
/// client's order that it supports, so a client listing X25519 first gets
/// X25519, and a HelloRetryRequest comes only when the client sent no
/// share for that group.
pub fn provider() -> CryptoProvider {
    use rustls::crypto::aws_lc_rs::kx_group;
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| suite_rank(s.suite()));
    provider.kx_groups = vec![
        kx_group::X25519MLKEM768,
        kx_group::X25519,
        kx_group::SECP256R1,
        kx_group::SECP384R1,
    ];
    provider
}

/// Position in the server's preference; lower first. Unknown suites keep
/// their place after the known ones (the sort is stable).
fn suite_rank(suite: rustls::CipherSuite) -> u8 {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256 => 0,
        S::TLS13_CHACHA20_POLY1305_SHA256 => 1,
        S::TLS13_AES_256_GCM_SHA384 => 2,
        S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 3,
        S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => 4,
        S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 5,
        _ => 6,
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Load every pair; the first error wins (for `--check` and start-up).
pub fn load_all(pairs: &[CertPaths], provider: &CryptoProvider) -> anyhow::Result<CertSet> {
    let now = unix_now();
    let loaded = pairs
        .iter()
        .map(|p| certs::load(p, provider, now))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(CertSet::new(loaded))
}

/// Warn about each pair of `set` that no client can ever be given (at
/// start, by the preflight, and on every reload).
pub fn warn_unreachable(set: &CertSet) {
    for pair in &set.unreachable {
        tracing::warn!(
            pair = pair.as_str(),
            "TLS certificate never chosen: each of its names is served by an earlier pair with the same key type"
        );
    }
}

/// The certificate set and what reloading it needs.
pub struct CertStore {
    pairs: Vec<CertPaths>,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertSet>,
    expiry: prometheus::GaugeVec,
    reloads: prometheus::IntCounterVec,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("pairs", &self.pairs)
            .finish()
    }
}

impl CertStore {
    fn publish_expiry(&self, set: &CertSet) {
        self.expiry.reset();
        for (name, not_after) in &set.expiry {
            self.expiry
                .with_label_values(&[name])
                .set(*not_after as f64);
        }
    }

    /// Reread every pair. A pair that fails to load keeps the old set
    /// serving; logged and counted either way.
    pub fn reload(&self) -> bool {
        match load_all(&self.pairs, &self.provider) {
            Ok(set) => {
                warn_unreachable(&set);
                self.publish_expiry(&set);
                self.current.store(Arc::new(set));
                tracing::info!(pairs = self.pairs.len(), "TLS certificates reloaded");
                self.reloads.with_label_values(&["success"]).inc();
                true
            }
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "TLS certificate reload failed; serving the previous certificates"
                );
                self.reloads.with_label_values(&["failure"]).inc();
                false
            }
        }
    }

    /// Collectors for the metrics registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.expiry.clone()),
            Box::new(self.reloads.clone()),
        ]
    }

    fn stamps(&self) -> Vec<Option<(u64, i64, i64, u64)>> {
        use std::os::unix::fs::MetadataExt;
        self.pairs
            .iter()
            .flat_map(|p| [&p.cert, &p.key])
            .map(|path| {
                std::fs::metadata(path).ok().map(|m| {
                    (
                        m.size(),
                        m.mtime_nsec() + m.mtime() * 1_000_000_000,
                        m.ctime(),
                        m.ino(),
                    )
                })
            })
            .collect()
    }
}

/// Chooses the certificate by SNI, then by the client's signature
/// schemes, from the current set.
#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A TLS-ALPN-01 validation offers `acme-tls/1` alone: it gets the
        // pending challenge certificate for its name, or no handshake.
        if hello.alpn().is_some_and(crate::challenge::offers_only_acme) {
            return hello.server_name().and_then(crate::challenge::alpn_cert);
        }
        let set = self.0.current.load();
        Some(Arc::clone(
            set.pick(hello.server_name(), hello.signature_schemes()),
        ))
    }
}

/// Everything the shards share for TLS.
pub struct Tls {
    pub config: Arc<ServerConfig>,
    pub store: Arc<CertStore>,
    pub tickets: Arc<tickets::Ticketer>,
}

impl Tls {
    /// Load the certificates and build the server configuration.
    pub fn new(settings: &TlsSettings) -> anyhow::Result<Tls> {
        let provider = Arc::new(provider());
        let set = load_all(&settings.pairs, &provider)?;
        let store = Arc::new(CertStore {
            pairs: settings.pairs.clone(),
            provider: Arc::clone(&provider),
            current: ArcSwap::from_pointee(set),
            expiry: prometheus::GaugeVec::new(
                prometheus::Opts::new(
                    "shardhttpd_tls_certificate_expiry_timestamp_seconds",
                    "notAfter of each served certificate, Unix seconds.",
                ),
                &["name"],
            )
            .expect("valid metric"),
            reloads: prometheus::IntCounterVec::new(
                prometheus::Opts::new(
                    "shardhttpd_tls_certificate_reloads_total",
                    "Certificate reloads (file change or SIGHUP), by result.",
                ),
                &["result"],
            )
            .expect("valid metric"),
        });
        // Both results exist at 0 from start, as Prometheus practice asks.
        for result in ["success", "failure"] {
            store.reloads.with_label_values(&[result]);
        }
        store.publish_expiry(&store.current.load());
        let clock = Arc::new(tickets::SystemClock);
        let ticketer = Arc::new(match &settings.ticket_key_file {
            Some(path) => tickets::Ticketer::from_file(path, clock)?,
            None => tickets::Ticketer::random(clock)?,
        });
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(Arc::clone(&store))));
        // A client offering ALPN with neither protocol is refused with a
        // no_application_protocol alert. rustls picks the first of ours
        // the client offers: h2 wins where both are offered.
        config.alpn_protocols = if settings.h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        // Last: only a client offering nothing else ever gets it.
        if settings.acme_tls_alpn {
            config
                .alpn_protocols
                .push(crate::challenge::ACME_TLS_ALPN.to_vec());
        }
        // The suites' order is the server's (see `provider`).
        config.ignore_client_order = true;
        config.ticketer = Arc::clone(&ticketer) as Arc<dyn rustls::server::ProducesTickets>;
        config.send_tls13_tickets = TLS13_TICKETS;
        Ok(Tls {
            config: Arc::new(config),
            store,
            tickets: ticketer,
        })
    }

    /// Collectors for the metrics registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut c = self.store.collectors();
        c.extend(self.tickets.collectors());
        c
    }

    /// Every [`WATCH_INTERVAL`]: reload the certificates when a file
    /// changed (size, mtime, ctime or inode: a rename over it, as
    /// Kubernetes secret volumes and certbot's symlinks do, counts), and
    /// bring the ticket keys up to date (a new period's random key, a
    /// changed key file), so an expired key is dropped even without
    /// handshakes.
    pub fn spawn_watcher(&self) -> std::io::Result<()> {
        let store = Arc::clone(&self.store);
        let tickets = Arc::clone(&self.tickets);
        std::thread::Builder::new()
            .name("tls-watch".into())
            .spawn(move || {
                let mut seen = store.stamps();
                loop {
                    std::thread::sleep(WATCH_INTERVAL);
                    let now = store.stamps();
                    if now != seen {
                        seen = now;
                        store.reload();
                    }
                    tickets.tick();
                }
            })?;
        Ok(())
    }
}
