//! Automatic HTTPS: certificates obtained and renewed from an ACME CA
//! (RFC 8555) on one background thread, never on a shard.
//!
//! At start every name in `acme_domains` is served from `acme_state_dir`
//! at once (a self-signed placeholder where nothing was issued yet); the
//! `acme` thread then orders what is missing and renews each certificate
//! at two thirds of its lifetime. A new certificate is written beside the
//! old one and renamed over it, and the TLS certificate set is reloaded
//! through the same path a changed `tls_cert` takes: new handshakes get it,
//! established connections keep theirs. A failed order keeps the current
//! certificate, logs the CA's problem document, is counted, and is retried
//! with jittered exponential backoff. Replicas sharing `acme_state_dir`
//! order one at a time under its lock file, and pick up each other's
//! certificates through the certificate watcher.
//!
//! `crate::challenge` holds the answers the shards give; `client` talks to the
//! CA; `state` is the directory.

mod client;
pub mod state;

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::tls::CertStore;

/// Let's Encrypt's production directory, the default `acme_directory`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// `acme_state_dir` without systemd's `$STATE_DIRECTORY`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/shardhttpd/acme";

/// First wait after a failed order (`acme_retry_min`): ten minutes keeps
/// a broken setup under Let's Encrypt's failed-validation limit (5 per
/// name per hour) while still recovering quickly from a blip.
pub const DEFAULT_RETRY_MIN: Duration = Duration::from_secs(600);

/// Longest wait between tries, however many have failed.
pub const MAX_RETRY: Duration = Duration::from_secs(6 * 3600);

/// Longest the thread sleeps without looking at the files again: another
/// replica may have renewed, or an operator replaced a file.
const RECHECK: Duration = Duration::from_secs(3600);

/// The problem type of a CA that no longer knows the stored account (it
/// was deactivated, or the CA's database was reset): a new one is
/// created on the next try.
const ACCOUNT_GONE: &str = "accountDoesNotExist";

/// How long a replica waits before trying a lock another one holds.
const LOCK_RETRY: Duration = Duration::from_secs(5);

/// New orders in a burst, and one more per [`ORDER_REFILL`] seconds: Let's
/// Encrypt's new-orders limit (300 an account per 3 hours). With many
/// sites' names due at once (a first start), orders past the burst wait
/// their turn instead of being refused by the CA and backing off.
const ORDER_BURST: i64 = 300;
const ORDER_REFILL: i64 = 36;

/// The orders the account may place now: a token bucket of
/// [`ORDER_BURST`] orders refilled one per [`ORDER_REFILL`] seconds, kept
/// in seconds of credit so the arithmetic is exact.
struct Pace {
    credit: i64,
    at: i64,
}

impl Pace {
    fn new(now: i64) -> Pace {
        Pace {
            credit: ORDER_BURST * ORDER_REFILL,
            at: now,
        }
    }

    /// Take an order's token at `now`, or say how many seconds until one.
    fn take(&mut self, now: i64) -> Result<(), i64> {
        let elapsed = (now - self.at).max(0);
        self.credit = (self.credit + elapsed).min(ORDER_BURST * ORDER_REFILL);
        self.at = now;
        if self.credit >= ORDER_REFILL {
            self.credit -= ORDER_REFILL;
            Ok(())
        } else {
            Err(ORDER_REFILL - self.credit)
        }
    }
}

/// Which challenge proves control of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// RFC 8737: a certificate on the TLS listener for ALPN `acme-tls/1`.
    TlsAlpn01,
    /// RFC 8555 §8.3: a token under `/.well-known/acme-challenge/`.
    Http01,
}

impl ChallengeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Http01 => "http-01",
        }
    }
}

/// Validated `acme_*` settings.
#[derive(Clone)]
pub struct AcmeSettings {
    /// Lowercased, without a trailing dot; one certificate each.
    pub domains: Vec<String>,
    pub email: Option<String>,
    pub directory: String,
    pub ca_roots: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub challenge: ChallengeKind,
    /// External Account Binding: key id and the decoded HMAC key.
    pub eab: Option<(String, Vec<u8>)>,
    pub retry_min: Duration,
}

impl std::fmt::Debug for AcmeSettings {
    // The EAB key is a secret: never in a log line or a panic.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeSettings")
            .field("domains", &self.domains)
            .field("email", &self.email)
            .field("directory", &self.directory)
            .field("ca_roots", &self.ca_roots)
            .field("state_dir", &self.state_dir)
            .field("challenge", &self.challenge)
            .field("eab_kid", &self.eab.as_ref().map(|(kid, _)| kid))
            .field("retry_min", &self.retry_min)
            .finish()
    }
}

/// `$STATE_DIRECTORY/acme` under systemd's `StateDirectory=`, else
/// [`DEFAULT_STATE_DIR`].
pub fn default_state_dir() -> PathBuf {
    match std::env::var_os("STATE_DIRECTORY") {
        // systemd may list several, colon-separated: the first is ours.
        Some(dirs) if !dirs.is_empty() => {
            let dirs = dirs.to_string_lossy().into_owned();
            PathBuf::from(dirs.split(':').next().unwrap_or_default()).join("acme")
        }
        _ => PathBuf::from(DEFAULT_STATE_DIR),
    }
}

/// Whether `name` (lowercased) can be ordered: a DNS name of at least two
/// labels, no wildcard (that needs DNS-01), no IP address.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.starts_with("*.") {
        return Err("is a wildcard, which needs the DNS-01 challenge (not supported)");
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err("is an IP address; ACME here orders DNS names only");
    }
    if name.len() > 253 || !name.contains('.') {
        return Err("is not a fully qualified DNS name");
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !name.split('.').all(label_ok) {
        return Err("is not a valid DNS name (letters, digits and inner hyphens per label)");
    }
    Ok(())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Before the TLS certificates load: check `acme_state_dir` and put a
/// placeholder where a name has nothing that loads.
pub fn prepare(settings: &AcmeSettings) -> anyhow::Result<()> {
    state::check_dir(&settings.state_dir)?;
    state::ensure_placeholders(settings)
}

/// The ACME metrics.
#[derive(Clone)]
pub struct AcmeMetrics {
    orders: prometheus::IntCounterVec,
    expiry: prometheus::GaugeVec,
}

impl AcmeMetrics {
    pub fn new() -> AcmeMetrics {
        let orders = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "shardhttpd_acme_orders_total",
                "ACME certificate orders, by result: success, refused (the CA's problem \
                 document or an invalid challenge), error (the CA unreachable or the answer unusable).",
            ),
            &["result"],
        )
        .expect("valid metric");
        for r in ["success", "refused", "error"] {
            orders.with_label_values(&[r]);
        }
        let expiry = prometheus::GaugeVec::new(
            prometheus::Opts::new(
                "shardhttpd_acme_certificate_expiry_seconds",
                "notAfter of each name's ACME-issued certificate, Unix seconds \
                 (absent while only a placeholder is served).",
            ),
            &["name"],
        )
        .expect("valid metric");
        AcmeMetrics { orders, expiry }
    }

    /// The expiry gauge for `name`: set from an issued certificate,
    /// absent for a placeholder or nothing.
    fn publish(&self, name: &str, held: Option<state::Held>) {
        match held {
            Some(h) if !h.placeholder => {
                self.expiry
                    .with_label_values(&[name])
                    .set(h.not_after as f64);
            }
            _ => {
                let _ = self.expiry.remove_label_values(&[name]);
            }
        }
    }

    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![Box::new(self.orders.clone()), Box::new(self.expiry.clone())]
    }
}

impl Default for AcmeMetrics {
    fn default() -> Self {
        AcmeMetrics::new()
    }
}

/// Per name: when to look at it next, and how many tries failed in a row.
struct Due {
    at: i64,
    failures: u32,
}

/// When the certificate in `held` is due for renewal: at once for a
/// placeholder or nothing, else two thirds into its lifetime.
fn renew_at(held: Option<state::Held>) -> i64 {
    match held {
        Some(h) if !h.placeholder => h.not_before + (h.not_after - h.not_before) * 2 / 3,
        _ => i64::MIN,
    }
}

/// The wait after `failures` failed tries in a row: `retry_min` doubled
/// per failure, capped at [`MAX_RETRY`], then ±25% jitter so replicas and
/// restarts spread out.
fn backoff(retry_min: Duration, failures: u32, unit: f64) -> Duration {
    let base = retry_min
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX_RETRY);
    base.mul_f64(0.75 + unit * 0.5)
}

/// A number in [0, 1) from the clock and the pid: jitter, not secrecy.
fn jitter_unit() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let x = xxhash_rust::xxh3::xxh3_64(
        &[nanos.to_le_bytes(), std::process::id().to_le_bytes()].concat(),
    );
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Set once the listeners answer: the thread orders nothing before, since
/// the CA's validation connects to them.
static LISTENING: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// The listeners answer: orders may start.
pub fn listening() {
    let (flag, cv) = &LISTENING;
    *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
    cv.notify_all();
}

fn wait_listening() {
    let (flag, cv) = &LISTENING;
    let mut on = flag.lock().unwrap_or_else(|e| e.into_inner());
    while !*on {
        on = cv.wait(on).unwrap_or_else(|e| e.into_inner());
    }
}

/// Start the `acme` thread; it orders once [`listening`] is called.
pub fn spawn(
    settings: AcmeSettings,
    certs: Arc<CertStore>,
    metrics: AcmeMetrics,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("acme".into())
        .spawn(move || run(&settings, &certs, &metrics))?;
    Ok(())
}

fn run(settings: &AcmeSettings, certs: &CertStore, metrics: &AcmeMetrics) {
    wait_listening();
    let mut due: Vec<Due> = settings
        .domains
        .iter()
        .map(|_| Due {
            at: i64::MIN,
            failures: 0,
        })
        .collect();
    let mut account = None;
    let mut pace = Pace::new(unix_now());
    loop {
        let now = unix_now();
        for (name, d) in settings.domains.iter().zip(due.iter_mut()) {
            let held = state::held(&settings.cert_file(name));
            metrics.publish(name, held);
            let renew = renew_at(held);
            if d.failures == 0 {
                d.at = renew;
            }
            if d.at > now {
                continue;
            }
            // Another replica may be ordering; its certificate shows up
            // in the file, which the next round reads.
            let lock = match state::Lock::try_take(&settings.state_dir) {
                Ok(Some(lock)) => lock,
                Ok(None) => {
                    tracing::info!(
                        name = name.as_str(),
                        "ACME state directory locked by another process; waiting"
                    );
                    d.at = now + LOCK_RETRY.as_secs() as i64;
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "ACME lock");
                    d.at = now + LOCK_RETRY.as_secs() as i64;
                    continue;
                }
            };
            // Renewed by another replica while we waited for the lock.
            let renew = renew_at(state::held(&settings.cert_file(name)));
            if renew > now {
                d.failures = 0;
                d.at = renew;
                continue;
            }
            if let Err(wait) = pace.take(now) {
                tracing::info!(
                    name = name.as_str(),
                    wait_s = wait,
                    "ACME order deferred to stay within the CA's new-orders limit"
                );
                d.at = now + wait;
                continue;
            }
            let why = if held.is_some_and(|h| !h.placeholder) {
                "renewal"
            } else {
                "first certificate"
            };
            tracing::info!(
                name = name.as_str(),
                directory = settings.directory.as_str(),
                "ACME order ({why})"
            );
            // A panic in a dependency must not end renewals for good.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                obtain(settings, &mut account, name)
            }))
            .unwrap_or_else(|_| {
                Err(client::Failure::Error(anyhow::anyhow!(
                    "the ACME client panicked"
                )))
            });
            drop(lock);
            match result {
                Ok(()) => {
                    d.failures = 0;
                    let held = state::held(&settings.cert_file(name));
                    d.at = renew_at(held);
                    certs.reload();
                    metrics.publish(name, held);
                    tracing::info!(name = name.as_str(), "ACME certificate installed");
                    metrics.orders.with_label_values(&["success"]).inc();
                }
                Err(f) => {
                    let label = match f {
                        client::Failure::Refused(_) => "refused",
                        client::Failure::Error(_) => "error",
                    };
                    // A failure to reach the CA may come from a stale
                    // account handle: rebuild it next time.
                    account = None;
                    if f.to_string().contains(ACCOUNT_GONE) {
                        state::retire_account(settings);
                    }
                    d.failures += 1;
                    let wait = backoff(settings.retry_min, d.failures, jitter_unit());
                    d.at = unix_now() + wait.as_secs().max(1) as i64;
                    tracing::error!(
                        name = name.as_str(),
                        failures = d.failures,
                        retry_in_s = wait.as_secs(),
                        "ACME order failed, keeping the current certificate: {f}"
                    );
                    metrics.orders.with_label_values(&[label]).inc();
                }
            }
        }
        let now = unix_now();
        let next = due.iter().map(|d| d.at).min().unwrap_or(i64::MAX);
        let sleep = (next - now).clamp(1, RECHECK.as_secs() as i64);
        std::thread::sleep(Duration::from_secs(sleep as u64));
    }
}

/// One order for `name`, its result written into place.
fn obtain(
    settings: &AcmeSettings,
    account: &mut Option<instant_acme::Account>,
    name: &str,
) -> Result<(), client::Failure> {
    let acct = match account {
        Some(a) => a.clone(),
        None => {
            let a = client::account(settings)?;
            *account = Some(a.clone());
            a
        }
    };
    let pem = client::order(&acct, settings, name)?;
    state::write_private(&settings.cert_file(name), pem.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_can_be_ordered() {
        for ok in ["example.com", "a.b-c.example", "xn--bcher-kva.example"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "*.example.com",
            "localhost",
            "127.0.0.1",
            "::1",
            "a..b",
            "-a.b",
            "a-.b",
            "a_b.c",
            "",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_name(&format!("{}.com", "a".repeat(64))).is_err());
        // 253 characters at most (RFC 1035's 255 octets on the wire).
        let long = |last: usize| format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(last));
        assert_eq!(long(61).len(), 253);
        assert_eq!(check_name(&long(61)), Ok(()));
        assert!(check_name(&long(62)).is_err());
        assert_eq!(check_name(&format!("{}.com", "a".repeat(63))), Ok(()));
    }

    #[test]
    fn renewal_is_two_thirds_into_the_lifetime() {
        let h = |placeholder| state::Held {
            not_before: 900,
            not_after: 1200,
            placeholder,
        };
        assert_eq!(renew_at(Some(h(false))), 1100);
        assert_eq!(renew_at(Some(h(true))), i64::MIN);
        assert_eq!(renew_at(None), i64::MIN);
    }

    #[test]
    fn orders_are_paced_at_the_cas_new_orders_limit() {
        let mut pace = Pace::new(1_000);
        for _ in 0..300 {
            assert_eq!(pace.take(1_000), Ok(()));
        }
        assert_eq!(pace.take(1_000), Err(36), "the burst is spent");
        assert_eq!(pace.take(1_035), Err(1));
        assert_eq!(pace.take(1_036), Ok(()));
        assert_eq!(pace.take(1_036), Err(36));
        // Three idle hours refill the whole burst, and no more.
        let later = 1_036 + 3 * 3600;
        for _ in 0..300 {
            assert_eq!(pace.take(later), Ok(()));
        }
        assert!(pace.take(later).is_err());
    }

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let min = Duration::from_secs(60);
        assert_eq!(backoff(min, 1, 0.5), min);
        assert_eq!(backoff(min, 2, 0.5), min * 2);
        assert_eq!(backoff(min, 3, 0.5), min * 4);
        assert_eq!(backoff(min, 1, 0.0), min.mul_f64(0.75));
        assert_eq!(backoff(min, 1, 1.0), min.mul_f64(1.25));
        assert_eq!(backoff(min, 40, 0.5), MAX_RETRY);
        let j = jitter_unit();
        assert!((0.0..1.0).contains(&j), "{j}");
        // It spreads: calls at different instants differ.
        let seen: std::collections::HashSet<u64> = (0..8)
            .map(|_| {
                std::thread::sleep(Duration::from_micros(50));
                jitter_unit().to_bits()
            })
            .collect();
        assert!(seen.len() > 1, "{seen:?}");
    }
}
