//! The challenge answers the shards give while an order is pending:
//! HTTP-01 key authorizations by token (RFC 8555 §8.3) and TLS-ALPN-01
//! certificates by name (RFC 8737). Written by the ACME thread (`acme`), read by
//! the shards through `ArcSwap`s: a request reads the token map only when
//! its path is under [`HTTP01_PREFIX`], a handshake reads the certificate
//! map only when its ClientHello offers nothing but `acme-tls/1`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;

/// Where HTTP-01 tokens are asked for (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

#[derive(Default)]
struct Pending {
    /// Token → key authorization.
    http: ArcSwap<HashMap<Box<str>, Arc<str>>>,
    /// Name → the self-signed certificate carrying the acmeIdentifier.
    alpn: ArcSwap<HashMap<Box<str>, Arc<CertifiedKey>>>,
}

/// Process-wide, as the metrics registry is: the shards find it without a
/// new field in every connection's environment.
static PENDING: LazyLock<Pending> = LazyLock::new(Pending::default);

/// The key authorization for a normalised request path, if it asks for a
/// pending HTTP-01 token. Inline: almost no path starts with `/.`, and
/// one byte says so.
#[inline(always)]
pub fn http01(path: &[u8]) -> Option<Arc<str>> {
    if path.get(1) != Some(&b'.') {
        return None;
    }
    http01_token(path)
}

#[cold]
#[inline(never)]
fn http01_token(path: &[u8]) -> Option<Arc<str>> {
    let token = path.strip_prefix(HTTP01_PREFIX)?;
    let token = std::str::from_utf8(token).ok()?;
    PENDING.http.load().get(token).cloned()
}

/// The TLS-ALPN-01 certificate for `name`, if one is pending.
pub fn alpn_cert(name: &str) -> Option<Arc<CertifiedKey>> {
    PENDING.alpn.load().get(name).cloned()
}

/// Whether a ClientHello's ALPN list is `acme-tls/1` alone, as a
/// validation's is (RFC 8737 §3).
pub fn offers_only_acme<'a>(mut alpn: impl Iterator<Item = &'a [u8]>) -> bool {
    alpn.next() == Some(ACME_TLS_ALPN) && alpn.next().is_none()
}

pub fn add_http01(token: &str, key_authorization: &str) {
    PENDING.http.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.insert(token.into(), key_authorization.into());
        m
    });
}

pub fn remove_http01(token: &str) {
    PENDING.http.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.remove(token);
        m
    });
}

pub fn add_alpn(name: &str, key: Arc<CertifiedKey>) {
    PENDING.alpn.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.insert(name.into(), Arc::clone(&key));
        m
    });
}

pub fn remove_alpn(name: &str) {
    PENDING.alpn.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.remove(name);
        m
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_acme_tls_offer_is_a_validation() {
        let cases: &[(&[&[u8]], bool)] = &[
            (&[b"acme-tls/1"], true),
            (&[b"h2", b"acme-tls/1"], false),
            (&[b"acme-tls/1", b"http/1.1"], false),
            (&[b"http/1.1"], false),
            (&[], false),
        ];
        for (offer, want) in cases {
            assert_eq!(offers_only_acme(offer.iter().copied()), *want, "{offer:?}");
        }
    }

    #[test]
    fn tokens_are_answered_only_under_the_prefix_while_pending() {
        add_http01("tok-unit", "tok-unit.thumb");
        assert_eq!(
            http01(b"/.well-known/acme-challenge/tok-unit").as_deref(),
            Some("tok-unit.thumb")
        );
        assert_eq!(http01(b"/tok-unit"), None);
        assert_eq!(http01(b"/.well-known/acme-challenge/other"), None);
        remove_http01("tok-unit");
        assert_eq!(http01(b"/.well-known/acme-challenge/tok-unit"), None);
    }
}
