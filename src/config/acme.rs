//! `acme_*` checked into [`AcmeSettings`](crate::acme::AcmeSettings): the
//! names, the directory URL, the challenge type and its listener, the
//! External Account Binding pair, and one certificate pair per name added
//! to the TLS settings (served from `acme_state_dir`).

use super::*;
use crate::acme::{AcmeSettings, ChallengeKind};

/// Validate the `acme_*` keys; with `acme_domains`, append one pair per
/// name to `tls` (which must exist: the certificates are for it).
pub(super) fn acme_settings(
    s: &Settings,
    tls: Option<&mut crate::tls::TlsSettings>,
    sites: &[(String, String)],
) -> anyhow::Result<Option<AcmeSettings>> {
    let domains: Vec<String> = s.acme_domains.clone().unwrap_or_default();
    if domains.is_empty() && sites.is_empty() {
        let given = [
            ("acme_email", s.acme_email.is_some()),
            ("acme_directory", s.acme_directory.is_some()),
            ("acme_ca_roots", s.acme_ca_roots.is_some()),
            ("acme_state_dir", s.acme_state_dir.is_some()),
            ("acme_challenge", s.acme_challenge.is_some()),
            ("acme_eab_kid", s.acme_eab_kid.is_some()),
            ("acme_eab_hmac_key", s.acme_eab_hmac_key.is_some()),
            ("acme_retry_min", s.acme_retry_min.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, set)| *set) {
            bail!(
                "{}: needs `acme_domains` (or a site's `acme = true`)",
                s.name(key)
            );
        }
        return Ok(None);
    }
    let Some(tls) = tls else {
        bail!(
            "{}: needs `tls_listen` (the certificates are served there)",
            s.name("acme_domains")
        );
    };
    let mut names = Vec::with_capacity(domains.len());
    for d in &domains {
        let name = d.trim().trim_end_matches('.').to_ascii_lowercase();
        if let Err(why) = crate::acme::check_name(&name) {
            bail!("{}: `{d}` {why}", s.name("acme_domains"));
        }
        if names.contains(&name) {
            bail!("{}: `{d}` is named twice", s.name("acme_domains"));
        }
        names.push(name);
    }
    // `acme = true` sites' names, named by their site in errors.
    let mut origins: Vec<String> = (0..names.len())
        .map(|i| format!("acme_domains[{i}]"))
        .collect();
    for (name, origin) in sites {
        if let Err(why) = crate::acme::check_name(name) {
            bail!("{}: `{name}` {why}", s.name_path(origin));
        }
        if !names.contains(name) {
            names.push(name.clone());
            origins.push(origin.clone());
        }
    }
    let directory = s
        .acme_directory
        .clone()
        .unwrap_or_else(|| crate::acme::LETS_ENCRYPT.to_owned());
    if !directory.starts_with("https://") {
        bail!(
            "{}: `{directory}` is not an https:// URL (RFC 8555 §6.1 asks for HTTPS)",
            s.name("acme_directory")
        );
    }
    if let Some(email) = &s.acme_email {
        if !email.contains('@') || email.contains(char::is_whitespace) {
            bail!("{}: `{email}` is not a mail address", s.name("acme_email"));
        }
    }
    let on_443 = tls.listen.iter().any(|a| a.port() == 443);
    let challenge = match s.acme_challenge.as_deref() {
        None if on_443 => ChallengeKind::TlsAlpn01,
        None => ChallengeKind::Http01,
        Some("tls-alpn-01") => ChallengeKind::TlsAlpn01,
        Some("http-01") => ChallengeKind::Http01,
        Some(other) => bail!(
            "{}: `{other}` is not one of `tls-alpn-01`, `http-01` (DNS-01 is not supported)",
            s.name("acme_challenge")
        ),
    };
    let eab = match (&s.acme_eab_kid, &s.acme_eab_hmac_key) {
        (Some(kid), Some(key)) => {
            use base64::Engine;
            let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(key.trim().trim_end_matches('='))
                .map_err(|e| {
                    anyhow::anyhow!(
                        "{}: not base64url, as the CA hands it out: {e}",
                        s.name("acme_eab_hmac_key")
                    )
                })?;
            Some((kid.clone(), key))
        }
        (Some(_), None) => bail!(
            "{}: needs `acme_eab_hmac_key` too (the CA gives both)",
            s.name("acme_eab_kid")
        ),
        (None, Some(_)) => bail!(
            "{}: needs `acme_eab_kid` too (the CA gives both)",
            s.name("acme_eab_hmac_key")
        ),
        (None, None) => None,
    };
    let state_dir = match &s.acme_state_dir {
        Some(dir) if dir.is_relative() => bail!(
            "{}: `{}` must be an absolute path",
            s.name("acme_state_dir"),
            dir.display()
        ),
        Some(dir) => dir.clone(),
        None => crate::acme::default_state_dir(),
    };
    let retry_min = s
        .acme_retry_min
        .map_or(crate::acme::DEFAULT_RETRY_MIN, |d| d.value);
    if retry_min.is_zero() || retry_min > crate::acme::MAX_RETRY {
        bail!(
            "{}: between 1s and {}",
            s.name("acme_retry_min"),
            format_duration(crate::acme::MAX_RETRY)
        );
    }
    let settings = AcmeSettings {
        domains: names,
        email: s.acme_email.clone(),
        directory,
        ca_roots: s.acme_ca_roots.clone(),
        state_dir,
        challenge,
        eab,
        retry_min,
    };
    tls.acme_tls_alpn = challenge == ChallengeKind::TlsAlpn01;
    for (name, origin) in settings.domains.iter().zip(origins) {
        let file = settings.cert_file(name);
        tls.pairs.push(crate::tls::CertPaths {
            cert: file.clone(),
            key: file,
            origin,
            acme: true,
        });
    }
    Ok(Some(settings))
}
