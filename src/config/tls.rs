//! The TLS settings checked: certificate pairs (`tls_cert`/`tls_key` and
//! `[[tls_certificates]]`) with their listeners, and the HTTPS-only headers
//! (`hsts`, `redirect_https`) that need one.

use super::*;

/// `tls_*`: listeners need a certificate, a certificate needs its key.
pub(super) fn tls_settings(s: &Settings) -> anyhow::Result<Option<crate::tls::TlsSettings>> {
    let pairs = cert_pairs(s)?;
    let listen = resolve_all(s, "tls_listen", s.tls_listen.as_deref())?;
    if listen.is_empty() {
        // Point at what is configured, since `tls_listen` is not.
        let given = [
            ("tls_cert", s.tls_cert.is_some()),
            ("tls_certificates", s.tls_certificates.is_some()),
            ("tls_ticket_key_file", s.tls_ticket_key_file.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, set)| *set) {
            bail!(
                "{}: needs `tls_listen`, the address to serve HTTPS on \
                 (e.g. `tls_listen = \"0.0.0.0:443\"`)",
                s.name(key)
            );
        }
        return Ok(None);
    }
    // ACME's own pairs are added by `acme_settings`.
    let site_certs = s.sites.iter().flatten().any(|site| {
        site.tls_cert.is_some() || site.tls_certificates.is_some() || site.acme == Some(true)
    });
    if pairs.is_empty() && !site_certs && s.acme_domains.as_ref().is_none_or(|d| d.is_empty()) {
        bail!(
            "{}: needs a certificate: `tls_cert` and `tls_key`, `[[tls_certificates]]`, \
             or `acme_domains` to obtain one",
            s.name("tls_listen")
        );
    }
    Ok(Some(crate::tls::TlsSettings {
        listen,
        pairs,
        ticket_key_file: s.tls_ticket_key_file.clone(),
        h2: s.h2.unwrap_or(true),
        acme_tls_alpn: false,
    }))
}

/// `tls_cert`/`tls_key` and `[[tls_certificates]]` (of the top level, or
/// of a site: their origins carry `key_prefix`), each certificate with its
/// key.
pub(super) fn cert_pairs(s: &Settings) -> anyhow::Result<Vec<crate::tls::CertPaths>> {
    let prefix = &s.key_prefix;
    let mut pairs = Vec::new();
    match (&s.tls_cert, &s.tls_key) {
        (Some(cert), Some(key)) => pairs.push(crate::tls::CertPaths {
            cert: cert.clone(),
            key: key.clone(),
            origin: format!("{prefix}tls_cert"),
            acme: false,
        }),
        // A pair's error points at the half that is there.
        (Some(_), None) => bail!(
            "{}: needs `tls_key` too, the certificate's private key",
            s.name("tls_cert")
        ),
        (None, Some(_)) => bail!(
            "{}: needs `tls_cert` too, the certificate this key is for",
            s.name("tls_key")
        ),
        (None, None) => {}
    }
    for (i, p) in s.tls_certificates.iter().flatten().enumerate() {
        pairs.push(crate::tls::CertPaths {
            cert: p.cert.clone(),
            key: p.key.clone(),
            origin: format!("{prefix}tls_certificates[{i}]"),
            acme: false,
        });
    }
    Ok(pairs)
}

/// What [`https()`] validates.
pub(super) struct Https {
    pub(super) hsts: Option<String>,
    pub(super) redirect_https: bool,
}

/// `hsts` and `redirect_https`, which need a TLS listener (`has_tls`).
pub(super) fn https(s: &Settings, has_tls: bool) -> anyhow::Result<Https> {
    Ok(Https {
        hsts: match &s.hsts {
            Some(v) if v.is_empty() || v.bytes().any(|b| b < 0x20 || b == 0x7f) => bail!(
                "{}: must be a non-empty header value without control characters",
                s.name("hsts")
            ),
            Some(_) if !has_tls => {
                bail!(
                    "{}: needs `tls_listen` (it is sent over TLS only)",
                    s.name("hsts")
                )
            }
            v => v.clone(),
        },
        redirect_https: match s.redirect_https {
            Some(true) if !has_tls => bail!(
                "{}: needs `tls_listen` (the redirect goes to its port)",
                s.name("redirect_https")
            ),
            v => v.unwrap_or(false),
        },
    })
}

/// `h3`, `quic_listen`, `quic_retry*`: HTTP/3 needs the TLS certificates,
/// and listens on the TLS addresses unless told others.
pub(super) fn quic_settings(
    s: &Settings,
    tls: Option<&crate::tls::TlsSettings>,
) -> anyhow::Result<Option<QuicSettings>> {
    if s.h3 != Some(true) {
        for (key, set) in [
            ("quic_listen", s.quic_listen.is_some()),
            ("quic_retry", s.quic_retry.is_some()),
            ("quic_retry_above", s.quic_retry_above.is_some()),
            ("quic_socket_buffer", s.quic_socket_buffer.is_some()),
            ("quic_gso", s.quic_gso.is_some()),
        ] {
            if set {
                bail!("{}: needs `h3 = true`", s.name(key));
            }
        }
        return Ok(None);
    }
    let Some(tls) = tls else {
        bail!(
            "{}: needs `tls_listen` and a certificate (QUIC is always TLS)",
            s.name("h3")
        );
    };
    let mut listen = resolve_all(s, "quic_listen", s.quic_listen.as_deref())?;
    if listen.is_empty() {
        listen = tls.listen.clone();
    }
    Ok(Some(QuicSettings {
        listen,
        retry: s.quic_retry.unwrap_or(false),
        retry_above: s.quic_retry_above.unwrap_or(DEFAULT_RETRY_ABOVE),
        socket_buffer: s
            .quic_socket_buffer
            .map_or(DEFAULT_SOCKET_BUFFER, |b| b.0)
            .min(i32::MAX as u64) as usize,
        gso: s.quic_gso.unwrap_or(true),
    }))
}

/// `quic_retry_above`'s default: new handshakes a second per shard above
/// which unvalidated clients get a Retry first.
pub const DEFAULT_RETRY_ABOVE: u32 = 2000;
/// `quic_socket_buffer`'s default.
pub const DEFAULT_SOCKET_BUFFER: u64 = 4 << 20;
/// The HTTP/3 settings, validated (`h3`, `quic_listen`, `quic_retry*`).
#[derive(Debug, Clone)]
pub struct QuicSettings {
    /// UDP addresses (the TLS ones unless `quic_listen` names others).
    pub listen: Vec<SocketAddr>,
    /// Every new connection passes a stateless Retry first.
    pub retry: bool,
    /// Handshakes a second per shard above which unvalidated clients get
    /// a Retry.
    pub retry_above: u32,
    /// Bytes each UDP socket asks for, to send and to receive.
    pub socket_buffer: usize,
    /// GSO on send and GRO on receive.
    pub gso: bool,
}

/// Every address `key` lists, resolved, each once, in order.
fn resolve_all(
    s: &Settings,
    key: &'static str,
    list: Option<&[Address]>,
) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for a in list.into_iter().flatten() {
        for addr in a
            .resolve()
            .map_err(|e| anyhow::anyhow!("{}: {e}", s.name(key)))?
        {
            if !out.contains(&addr) {
                out.push(addr);
            }
        }
    }
    Ok(out)
}
