//! Certificate/key pairs: loading and checking them (they parse, the key
//! matches the certificate, the certificate is valid already; an expired one
//! is served with an ERROR line), and the set that SNI chooses from. Several
//! pairs may serve one name (an ECDSA and an RSA certificate, as nginx
//! allows): the first in config order whose key can sign with a scheme the
//! client offers is chosen. Errors
//! name the config key and the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Where one pair comes from, and which config keys named it (for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `tls_cert`/`tls_key`, `tls_certificates[i]`, `acme_domains[i]`,
    /// `sites[i].tls_cert`, …
    pub origin: String,
    /// ACME issues it: the file may not exist before the start makes its
    /// placeholder.
    pub acme: bool,
}

/// One loaded pair and what the resolver and the metrics need from it.
#[derive(Debug)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// DNS names of the subjectAltName extension, lowercased (`*.` kept).
    pub names: Vec<String>,
    /// The leaf's notAfter, Unix seconds.
    pub not_after: i64,
    /// The `name` label of the expiry metric: the first DNS name, else the
    /// subject's CN, else the certificate file name.
    pub label: String,
    /// Which config keys named it, for warnings.
    pub origin: String,
}

/// Load and check one pair. `now` is Unix seconds.
pub fn load(paths: &CertPaths, provider: &CryptoProvider, now: i64) -> anyhow::Result<Loaded> {
    let origin = &paths.origin;
    let (cert_key, key_key) = if origin == "tls_cert" {
        ("tls_cert".to_owned(), "tls_key".to_owned())
    } else {
        (format!("{origin}.cert"), format!("{origin}.key"))
    };
    let cert_file = paths.cert.display();
    let key_file = paths.key.display();
    let cert_pem = std::fs::read(&paths.cert)
        .with_context(|| format!("config key `{cert_key}`: reading {cert_file}"))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            anyhow!("config key `{cert_key}`: {cert_file}: not a PEM certificate chain: {e}")
        })?;
    if chain.is_empty() {
        bail!("config key `{cert_key}`: {cert_file} holds no CERTIFICATE block");
    }
    let key_pem = std::fs::read(&paths.key)
        .with_context(|| format!("config key `{key_key}`: reading {key_file}"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        anyhow!(
            "config key `{key_key}`: {key_file}: no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"
        )
    })?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| anyhow!("config key `{key_key}`: {key_file}: unsupported private key: {e}"))?;
    let certified = CertifiedKey::new(chain, signer);
    if let Err(e) = certified.keys_match() {
        bail!(
            "config key `{key_key}`: the key in {key_file} does not match the certificate in {cert_file} ({e})"
        );
    }
    let (_, leaf) = X509Certificate::from_der(&certified.cert[0])
        .map_err(|e| anyhow!("config key `{cert_key}`: {cert_file}: bad X.509 certificate: {e}"))?;
    let validity = leaf.validity();
    let not_before = validity.not_before.timestamp();
    let not_after = validity.not_after.timestamp();
    if now > not_after {
        // Served all the same, as nginx does: refusing it would take the
        // whole server down (cleartext included) for what clients judge
        // themselves; the expiry gauge and its alert say it too.
        report_expired(&paths.cert, not_after, || {
            tracing::error!(
                "config key `{cert_key}`: the certificate in {cert_file} expired at {} \
                 (Unix {not_after}); serving it anyway, clients will refuse it: \
                 renew it (the file is reloaded when it changes)",
                validity.not_after
            );
        });
    }
    if now < not_before {
        bail!(
            "config key `{cert_key}`: the certificate in {cert_file} is not valid before {}",
            validity.not_before
        );
    }
    let mut names = Vec::new();
    if let Ok(Some(san)) = leaf.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push(dns.trim_end_matches('.').to_ascii_lowercase());
            }
        }
    }
    let cn = leaf
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    let label = names
        .first()
        .cloned()
        .or(cn)
        .unwrap_or_else(|| file_name(&paths.cert));
    Ok(Loaded {
        key: Arc::new(certified),
        names,
        not_after,
        label,
        origin: origin.clone(),
    })
}

/// Run `log` once per process for a certificate file and its notAfter: a
/// start loads every pair twice (the preflight, then the server) and a
/// reload loads them all again, and one ERROR line per expired
/// certificate is what an operator needs.
fn report_expired(cert: &Path, not_after: i64, log: impl FnOnce()) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static REPORTED: Mutex<Option<HashSet<(PathBuf, i64)>>> = Mutex::new(None);
    let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    if reported
        .get_or_insert_with(HashSet::new)
        .insert((cert.to_path_buf(), not_after))
    {
        log();
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The pairs that serve one name, in config order.
type Candidates = Vec<Arc<CertifiedKey>>;

/// The pairs SNI chooses from; immutable, swapped whole on reload.
#[derive(Debug)]
pub struct CertSet {
    /// Used when SNI is absent or names no certificate: the first pair and
    /// the later pairs for its first name (its RSA twin, say).
    default: Candidates,
    exact: HashMap<String, Candidates>,
    /// `*.example.com` as `.example.com`, in config order.
    wildcards: Vec<(String, Candidates)>,
    /// (label, notAfter) per pair, for the expiry gauge.
    pub expiry: Vec<(String, i64)>,
    /// Pairs that no client can ever be given: each of their names is
    /// served by an earlier pair with the same kind of key (logged as a
    /// warning at start and on reload).
    pub unreachable: Vec<String>,
}

impl CertSet {
    /// `loaded[0]` is the default. Pairs sharing a name are candidates for
    /// it in config order.
    pub fn new(loaded: Vec<Loaded>) -> CertSet {
        let mut exact: HashMap<String, Candidates> = HashMap::new();
        let mut wildcards: Vec<(String, Candidates)> = Vec::new();
        let mut expiry = Vec::new();
        let mut unreachable = Vec::new();
        for (i, l) in loaded.iter().enumerate() {
            // Chosen for some name: no earlier candidate for it has the
            // same key algorithm (which would always win before it).
            let mut reachable = i == 0;
            for name in &l.names {
                let list = if let Some(suffix) = name.strip_prefix('*') {
                    match wildcards.iter().position(|(s, _)| s == suffix) {
                        Some(at) => &mut wildcards[at].1,
                        None => {
                            wildcards.push((suffix.to_owned(), Vec::new()));
                            &mut wildcards.last_mut().expect("just pushed").1
                        }
                    }
                } else {
                    exact.entry(name.clone()).or_default()
                };
                let algorithm = l.key.key.algorithm();
                if !list.iter().any(|k| k.key.algorithm() == algorithm) {
                    reachable = true;
                }
                if !list.iter().any(|k| Arc::ptr_eq(k, &l.key)) {
                    list.push(Arc::clone(&l.key));
                }
            }
            if !reachable {
                unreachable.push(format!("{} ({})", l.origin, l.label));
            }
            expiry.push((l.label.clone(), l.not_after));
        }
        let first = &loaded[0];
        let default = first
            .names
            .first()
            .and_then(|n| match n.strip_prefix('*') {
                Some(suffix) => wildcards
                    .iter()
                    .find(|(s, _)| s == suffix)
                    .map(|(_, c)| c.clone()),
                None => exact.get(n).cloned(),
            })
            .unwrap_or_else(|| vec![Arc::clone(&first.key)]);
        CertSet {
            default,
            exact,
            wildcards,
            expiry,
            unreachable,
        }
    }

    /// The candidates for an SNI name (rustls hands it lowercased and
    /// without a trailing dot). A wildcard covers exactly one label.
    fn candidates(&self, sni: Option<&str>) -> &Candidates {
        let Some(name) = sni else {
            return &self.default;
        };
        if let Some(k) = self.exact.get(name) {
            return k;
        }
        if let Some(dot) = name.find('.') {
            let suffix = &name[dot..];
            if dot > 0 {
                if let Some((_, k)) = self.wildcards.iter().find(|(s, _)| s == suffix) {
                    return k;
                }
            }
        }
        &self.default
    }

    /// The certificate for an SNI name and the client's signature schemes:
    /// the first candidate whose key can sign with one of them, else the
    /// first candidate (the handshake then fails as it must).
    pub fn pick(&self, sni: Option<&str>, schemes: &[SignatureScheme]) -> &Arc<CertifiedKey> {
        let list = self.candidates(sni);
        match list.as_slice() {
            [only] => only,
            _ => list
                .iter()
                .find(|k| k.key.choose_scheme(schemes).is_some())
                .unwrap_or(&list[0]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed P-256 pair valid from `nb` to `na` (Unix seconds),
    /// written to a fresh directory.
    fn pair(tag: &str, nb: i64, na: i64) -> (PathBuf, CertPaths) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_owned()]).unwrap();
        let t =
            |s: i64| rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(s as u64);
        params.not_before = t(nb);
        params.not_after = t(na);
        let cert = params.self_signed(&key).unwrap();
        let dir =
            std::env::temp_dir().join(format!("shardhttpd-certs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
        let paths = CertPaths {
            cert: dir.join("c.pem"),
            key: dir.join("k.pem"),
            origin: "tls_cert".into(),
            acme: false,
        };
        (dir, paths)
    }

    /// Loads from notBefore on, not a second before (a certificate not yet
    /// valid must not load); past notAfter it still loads (an expired
    /// certificate is served with an ERROR line, as nginx does).
    #[test]
    fn validity_period_bounds() {
        let (nb, na) = (1_800_000_000, 1_900_000_000);
        let (dir, paths) = pair("validity", nb, na);
        let provider = crate::tls::provider();
        for (now, ok) in [(nb - 1, false), (nb, true), (na, true), (na + 1, true)] {
            let r = load(&paths, &provider, now);
            assert_eq!(r.is_ok(), ok, "now {now}: {:?}", r.err());
            if let Ok(l) = r {
                assert_eq!(l.not_after, na);
                assert_eq!(l.names, ["a.test"]);
            }
        }
        let e = format!("{:#}", load(&paths, &provider, nb - 1).unwrap_err());
        assert!(e.contains("not valid before"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
