//! Certificates (issue 24 split them out of the `tls` suite): SNI picks a
//! pair by subjectAltName, pairs sharing a name are chosen by the client's
//! signature schemes (an ECDSA and an RSA certificate), a pair that can
//! never be chosen is warned about, and `--check` validates every pair.

use crate::support;

use support::tls::*;
use support::*;

/// Two certificates: SNI picks by subjectAltName (wildcards included); no
/// SNI or an unknown name gets the default (the first pair).
#[test]
fn sni_picks_the_certificate_by_subject_alt_name() {
    let site = Site::new("tls-sni");
    let ca = Ca::new();
    let a = ca.leaf(site.base(), "a", &["localhost", "a.test"]);
    let b = ca.leaf(site.base(), "b", &["b.test", "*.wild.test"]);
    let config = site.base().join("tls.toml");
    std::fs::write(
        &config,
        format!(
            "tls_listen = [\"127.0.0.1:0\"]\ntls_cert = {:?}\ntls_key = {:?}\n\
             [[tls_certificates]]\ncert = {:?}\nkey = {:?}\n",
            a.cert, a.key, b.cert, b.key
        ),
    )
    .unwrap();
    let cfg = config.display().to_string();
    let server = Server::start(&site.root, &["--config", &cfg]);
    let addr = tls_addr(&server);
    let client = ca.client(&[]);
    for (sni, want) in [
        ("a.test", &a.der),
        ("b.test", &b.der),
        ("x.wild.test", &b.der),
        ("localhost", &a.der),
    ] {
        let mut w = Wire::tls(addr, &client, sni);
        let got = w.session().unwrap().peer_certificates().unwrap()[0].to_vec();
        assert!(&got == want, "SNI {sni} got the wrong certificate");
        assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
    }
    // An unknown name gets the default, which the client then rejects.
    let err = Wire::try_tls(addr, &client, "other.test").err().unwrap();
    assert!(err.to_string().contains("not valid for name"), "{err}");
}

/// `--check` loads every pair: a key that is not the certificate's and a
/// missing file each fail, naming key and file; an expired certificate
/// passes with an ERROR line (issue 27: it is served, as nginx does).
#[test]
fn check_validates_certificate_pairs() {
    let site = Site::new("tls-check");
    let ca = Ca::new();
    let a = ca.leaf(site.base(), "a", &["localhost"]);
    let b = ca.leaf(site.base(), "b", &["localhost"]);
    let old = ca.leaf_with(site.base(), "old", &["localhost"], |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let root = site.root.display().to_string();
    let check = |cert: &std::path::Path, key: &std::path::Path| {
        outcome(
            command()
                .args(["--check", "--root", &root, "--listen", "127.0.0.1:0"])
                .args(["--admin", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0"])
                .arg("--tls-cert")
                .arg(cert)
                .arg("--tls-key")
                .arg(key),
        )
    };
    let (ok, text) = check(&a.cert, &a.key);
    assert!(ok, "{text}");
    let (ok, text) = check(&a.cert, &b.key);
    assert!(!ok, "{text}");
    assert!(
        text.contains("tls_key") && text.contains(&*b.key.display().to_string()),
        "{text}"
    );
    assert!(text.contains("does not match"), "{text}");
    let (ok, text) = check(&old.cert, &old.key);
    assert!(ok, "{text}");
    assert!(
        text.contains("ERROR") && text.contains("tls_cert") && text.contains("expired"),
        "{text}"
    );
    let missing = site.base().join("missing.key");
    let (ok, text) = check(&a.cert, &missing);
    assert!(!ok, "{text}");
    assert!(
        text.contains("tls_key") && text.contains("missing.key"),
        "{text}"
    );
    let garbage = site.write("garbage.pem", b"not a pem file");
    let (ok, text) = check(&garbage, &a.key);
    assert!(!ok, "{text}");
    assert!(
        text.contains("tls_cert") && text.contains("garbage.pem"),
        "{text}"
    );
}

/// An ECDSA and an RSA certificate for the same name (issue 24): a client
/// whose signature schemes are all RSA gets the RSA one, a client offering
/// only ECDSA the ECDSA one, whichever pair comes first in the config; a
/// third pair whose key type an earlier pair for each of its names already
/// has is warned about at start (it can never be chosen).
#[test]
fn ecdsa_and_rsa_certificates_for_one_name_chosen_by_signature_schemes() {
    use rustls::SignatureScheme as S;

    let site = Site::new("tls-ecdsa-rsa");
    let ca = Ca::new();
    let ecdsa = ca.leaf(site.base(), "ecdsa", &["localhost"]);
    let Some(rsa) = ca.rsa_leaf(site.base(), "rsa", &["localhost"]) else {
        support::loud("SKIP: openssl not installed (needed for an RSA key)");
        return;
    };
    let shadowed = ca.leaf(site.base(), "shadowed", &["localhost"]);
    let rsa_only = |s: S| {
        matches!(
            s,
            S::RSA_PSS_SHA256
                | S::RSA_PSS_SHA384
                | S::RSA_PSS_SHA512
                | S::RSA_PKCS1_SHA256
                | S::RSA_PKCS1_SHA384
                | S::RSA_PKCS1_SHA512
        )
    };
    let ecdsa_only = |s: S| {
        matches!(
            s,
            S::ECDSA_NISTP256_SHA256 | S::ECDSA_NISTP384_SHA384 | S::ECDSA_NISTP521_SHA512
        )
    };
    for (order, first, second) in [("ecdsa-first", &ecdsa, &rsa), ("rsa-first", &rsa, &ecdsa)] {
        let config = site.base().join(format!("{order}.toml"));
        std::fs::write(
            &config,
            format!(
                "tls_listen = [\"127.0.0.1:0\"]\ntls_cert = {:?}\ntls_key = {:?}\n\
                 [[tls_certificates]]\ncert = {:?}\nkey = {:?}\n\
                 [[tls_certificates]]\ncert = {:?}\nkey = {:?}\n",
                first.cert, first.key, second.cert, second.key, shadowed.cert, shadowed.key
            ),
        )
        .unwrap();
        let cfg = config.display().to_string();
        let server = Server::start(&site.root, &["--config", &cfg]);
        let addr = tls_addr(&server);
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            for (sni, what, keep, want) in [
                (
                    Some("localhost"),
                    "RSA",
                    &rsa_only as &dyn Fn(S) -> bool,
                    &rsa.der,
                ),
                (Some("localhost"), "ECDSA", &ecdsa_only, &ecdsa.der),
                // Without SNI (an IP address): the default name's pairs.
                (None, "RSA", &rsa_only, &rsa.der),
                (None, "ECDSA", &ecdsa_only, &ecdsa.der),
            ] {
                let client = ca.client_with_schemes(&[version], keep);
                let mut w = match sni {
                    Some(name) => Wire::try_tls(addr, &client, name),
                    None => {
                        let mut c = (*client).clone();
                        c.enable_sni = false;
                        Wire::try_tls(addr, &std::sync::Arc::new(c), "localhost")
                    }
                }
                .unwrap_or_else(|e| panic!("{order} {version:?} {what}-only, SNI {sni:?}: {e}"));
                let got = w.session().unwrap().peer_certificates().unwrap()[0].to_vec();
                assert!(
                    &got == want,
                    "{order} {version:?} {what}-only, SNI {sni:?}: got the other certificate"
                );
                assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
            }
        }
        let log = server.log_text();
        let warned: Vec<&str> = log.lines().filter(|l| l.contains("never chosen")).collect();
        assert_eq!(warned.len(), 1, "{log}");
        assert!(warned[0].contains("tls_certificates[1]"), "{}", warned[0]);
    }
}
