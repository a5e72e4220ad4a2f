//! `acme_state_dir` on disk: its permissions, the account credentials
//! (mode 0600), one PEM file per name holding the private key and the
//! chain together (so that installing a new pair is one `rename`, and the
//! certificate watcher never sees a key from one issue with a certificate
//! from another), the self-signed placeholders, and the lock file that
//! lets one replica of several order at a time.
//!
//! Layout: `accounts/<directory>.json`, `certificates/<name>.pem`, `lock`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::AcmeSettings;

/// The subject and issuer CN of a placeholder, by which it is told from
/// an issued certificate.
pub const PLACEHOLDER_CN: &str = "shardhttpd ACME placeholder";

/// How long a placeholder is valid: it is replaced as soon as an order
/// succeeds, and clients refuse it anyway (it is self-signed).
const PLACEHOLDER_DAYS: u64 = 30;

/// What the served file for a name holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub not_before: i64,
    pub not_after: i64,
    pub placeholder: bool,
}

impl AcmeSettings {
    /// The PEM file (key and chain) served for `name`.
    pub fn cert_file(&self, name: &str) -> PathBuf {
        self.state_dir
            .join("certificates")
            .join(format!("{name}.pem"))
    }

    /// The account credentials for this directory URL: an account belongs
    /// to one CA, so staging and production keep theirs apart.
    pub(super) fn account_file(&self) -> PathBuf {
        let safe: String = self
            .directory
            .trim_start_matches("https://")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.state_dir.join("accounts").join(format!("{safe}.json"))
    }
}

/// Create `dir` (mode 0700) if it is missing, and refuse one that others
/// can write to (they could swap the certificates) or that is not a
/// directory. Group or world read access is warned about (once, here):
/// the account key and the certificate keys are 0600 all the same.
pub fn check_dir(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the ACME state directory {}", dir.display()))?;
    }
    check_dir_readonly(dir)?;
    let mode = fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            "the ACME state directory is readable by group or others (mode {mode:o}); 700 is enough"
        );
    }
    for sub in ["accounts", "certificates"] {
        let path = dir.join(sub);
        if !path.exists() {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
        }
    }
    Ok(())
}

/// [`check_dir`] without creating anything (for `--check`): a missing
/// directory passes, it is created at start.
pub fn check_dir_readonly(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let meta =
        fs::metadata(dir).with_context(|| format!("the ACME state directory {}", dir.display()))?;
    if !meta.is_dir() {
        bail!(
            "the ACME state directory {} is not a directory",
            dir.display()
        );
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        bail!(
            "the ACME state directory {} is writable by group or others (mode {mode:o}): \
             anyone who can write there can replace the certificates; chmod 700 it",
            dir.display()
        );
    }
    Ok(())
}

/// Write `bytes` to `path` by a 0600 temporary file beside it, fsynced
/// and renamed over it: readers see the old file or the new, never a mix.
pub fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming {} into place", tmp.display()))?;
    Ok(())
}

/// Move the account credentials aside (`.json.gone`, kept for the
/// operator) when the CA no longer knows the account.
pub fn retire_account(settings: &AcmeSettings) {
    let file = settings.account_file();
    let gone = file.with_extension("json.gone");
    match fs::rename(&file, &gone) {
        Ok(()) => tracing::warn!(
            file = %gone.display(),
            "the CA does not know the ACME account any more; a new one is made on the next try"
        ),
        Err(e) => tracing::error!(error = %e, file = %file.display(), "retiring the ACME account"),
    }
}

/// What `file` holds, if it holds a certificate that loads.
pub fn held(file: &Path) -> Option<Held> {
    let pem = fs::read(file).ok()?;
    let der = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
    let (_, leaf) = X509Certificate::from_der(&der).ok()?;
    let validity = leaf.validity();
    let placeholder = leaf
        .issuer()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        == Some(PLACEHOLDER_CN);
    PrivateKeyDer::from_pem_slice(&pem).ok()?;
    Some(Held {
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        placeholder,
    })
}

/// At start, for each name whose file is missing or does not load: a
/// self-signed placeholder, so the TLS listener can start at once (logged;
/// clients refuse it until the real certificate is installed). A file that
/// does not load is kept beside it as `<name>.pem.bad`.
pub fn ensure_placeholders(settings: &AcmeSettings) -> anyhow::Result<()> {
    for name in &settings.domains {
        let file = settings.cert_file(name);
        if held(&file).is_some() {
            continue;
        }
        if file.exists() {
            let bad = file.with_extension("pem.bad");
            tracing::error!(
                file = %file.display(),
                "ACME certificate file does not load; kept as {} and replaced by a placeholder",
                bad.display()
            );
            fs::rename(&file, &bad).with_context(|| format!("renaming {}", file.display()))?;
        }
        write_private(&file, placeholder(name)?.as_bytes())?;
        tracing::warn!(
            name = name.as_str(),
            "no ACME certificate yet: serving a self-signed placeholder until the CA issues one"
        );
    }
    Ok(())
}

/// A self-signed P-256 key and certificate for `name`, as one PEM.
fn placeholder(name: &str) -> anyhow::Result<String> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, PLACEHOLDER_CN);
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = super::unix_now().max(0) as u64;
    params.not_before = epoch + std::time::Duration::from_secs(now.saturating_sub(3600));
    params.not_after = epoch + std::time::Duration::from_secs(now + PLACEHOLDER_DAYS * 86_400);
    let cert = params.self_signed(&key)?;
    Ok(format!("{}{}", key.serialize_pem(), cert.pem()))
}

/// A rustls signing key for a DER certificate and PKCS#8 key.
pub fn certified_key(cert: Vec<u8>, pkcs8: Vec<u8>) -> anyhow::Result<Arc<CertifiedKey>> {
    let key = PrivateKeyDer::Pkcs8(pkcs8.into());
    let signer = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| anyhow!("challenge key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(cert)],
        signer,
    )))
}

/// The lock on `state_dir/lock`, held while ordering; released on drop
/// (or when the process dies: it is an `flock`).
pub struct Lock(#[allow(dead_code)] File);

impl Lock {
    /// `Ok(None)` when another process (a replica sharing the directory)
    /// holds it.
    pub fn try_take(dir: &Path) -> anyhow::Result<Option<Lock>> {
        let path = dir.join("lock");
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(crate::sys::try_lock_exclusive(&f)
            .with_context(|| format!("locking {}", path.display()))?
            .then_some(Lock(f)))
    }
}
