//! Automatic HTTPS against a real ACME server: pebble (Let's Encrypt's
//! test CA) with its DNS server pointing every `*.test` name at 127.0.0.1
//! and validating against the server under test. Account, order, HTTP-01
//! and TLS-ALPN-01, the issued certificate served to `openssl s_client`
//! and `curl`, renewal of short-lived certificates, a refused name, and a
//! CA that is down at start. Skipped loudly when pebble is not installed.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::metrics::{scrape, sum};
use support::pebble::{self, Options, Pebble, Trust};
use support::*;

/// Issuance takes pebble well under a second; renewals and retries wait
/// for the ACME thread's schedule.
const ISSUE_DEADLINE: Duration = Duration::from_secs(40);

/// One test's setting: the site, pebble's trust, a state directory and
/// the port pebble's directory will listen on (chosen before the server
/// starts, which is pointed at it first).
struct Setup {
    site: Site,
    trust: Trust,
    state: TempDir,
    port: u16,
}

impl Setup {
    fn new() -> Setup {
        let site = Site::new("acme");
        site.write("index.html", b"hello over acme\n");
        Setup {
            site,
            trust: Trust::new(),
            state: TempDir::new("acme-state"),
            port: pebble::free_port(),
        }
    }

    /// Server flags for ACME with `challenge` for `names` against pebble's
    /// directory, with state kept in `state`.
    fn flags(&self, state: &Path, challenge: &str, names: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--tls-listen",
            "127.0.0.1:0",
            "--acme-directory",
            &pebble::directory(self.port),
            "--acme-ca-roots",
            &self.trust.roots.display().to_string(),
            "--acme-state-dir",
            &state.display().to_string(),
            "--acme-challenge",
            challenge,
            "--acme-email",
            "ops@example.test",
            "--acme-retry-min",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for n in names {
            args.extend(["--acme-domains".to_owned(), n.to_string()]);
        }
        args
    }

    /// A server ordering `names` by `challenge`, its state in the setup's
    /// directory: the server and its TLS address.
    fn start(&self, challenge: &str, names: &[&str]) -> (Server, std::net::SocketAddr) {
        let server = start(&self.site, &self.flags(self.state.path(), challenge, names));
        let tls = tls::tls_addr(&server);
        (server, tls)
    }

    /// What pebble is told to validate `server` at: HTTP-01 on its
    /// cleartext port, TLS-ALPN-01 on `tls`.
    fn options(&self, server: &Server, tls: std::net::SocketAddr) -> Options {
        Options {
            http_port: server.plain_addr().port(),
            tls_port: tls.port(),
            port: Some(self.port),
            validity_secs: None,
            blocklist: vec![],
        }
    }

    fn pebble(&self, options: &Options) -> Pebble {
        Pebble::start(&self.trust, options)
    }
}

fn start(site: &Site, args: &[String]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&site.root, &args)
}

fn orders(server: &Server, result: &str) -> f64 {
    sum(
        &scrape(server.admin_addr()),
        "shardhttpd_acme_orders_total",
        &[("result", result)],
    )
}

/// Wait until `orders_total{result}` reaches `at_least`.
fn await_orders(server: &Server, pebble: Option<&Pebble>, result: &str, at_least: f64) {
    let ok = poll_until(ISSUE_DEADLINE, || orders(server, result) >= at_least);
    assert!(
        ok,
        "orders{{result={result}}} is {} after {ISSUE_DEADLINE:?}, want >= {at_least}\n{}\n{}",
        orders(server, result),
        server.log_text(),
        pebble.map(Pebble::log_text).unwrap_or_default()
    );
}

/// `name`'s certificate on `addr` verifies against `root` (pebble's):
/// (the leaf's PEM, the whole output).
fn verified(addr: std::net::SocketAddr, name: &str, root: &Path) -> (String, String) {
    let (pem, text) = pebble::served_certificate(addr, name, Some(root));
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    (pem, text)
}

/// A rustls client that trusts `root` (pebble's: what it issues) and
/// offers http/1.1.
fn client_trusting(root: &Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(root).expect("pebble's root") {
        roots.add(cert.expect("a PEM certificate")).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    std::sync::Arc::new(cfg)
}

/// The leaf certificate (DER) a TLS connection's handshake got.
fn leaf_of(wire: &tls::Wire) -> Vec<u8> {
    wire.session()
        .and_then(|s| s.peer_certificates())
        .and_then(|c| c.first())
        .expect("a TLS connection with a peer certificate")
        .to_vec()
}

/// `name` on `addr` is still served the self-signed placeholder.
fn assert_placeholder(addr: std::net::SocketAddr, name: &str) {
    let (_, text) = pebble::served_certificate(addr, name, None);
    assert!(text.contains("shardhttpd ACME placeholder"), "{text}");
}

/// HTTP-01: the account is created (its credentials 0600), the token is
/// answered from memory on the cleartext listener (never written into the
/// root), and the issued certificate replaces the placeholder for
/// `openssl s_client` and `curl --cacert <pebble's root>`.
#[test]
fn http01_issues_a_certificate_served_to_openssl_and_curl() {
    if !pebble::with_clients("http01") {
        return;
    }
    let setup = Setup::new();
    let state_dir = setup.state.path().join("acme");
    let before = listing(&setup.site.root);
    // Behind `redirect_https`, which must not send the validation away.
    let mut flags = setup.flags(&state_dir, "http-01", &["a.test"]);
    flags.extend(["--redirect-https".to_owned(), "true".to_owned()]);
    let server = start(&setup.site, &flags);
    let tls = tls::tls_addr(&server);
    let pebble = setup.pebble(&setup.options(&server, tls));
    await_orders(&server, Some(&pebble), "success", 1.0);
    // Installed through the reload path: new handshakes get it at once.
    let (_, text) = verified(tls, "a.test", pebble.root());
    assert!(text.contains("Pebble Intermediate"), "{text}");
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(pebble.root())
        .args(["--resolve", &format!("a.test:{}:127.0.0.1", tls.port())])
        .arg(format!("https://a.test:{}/index.html", tls.port()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello over acme\n");
    // What is stored, and how.
    for f in ["accounts", "certificates"] {
        let mode = std::fs::metadata(state_dir.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{f}");
    }
    let accounts: Vec<_> = std::fs::read_dir(state_dir.join("accounts"))
        .unwrap()
        .collect();
    assert_eq!(accounts.len(), 1, "{accounts:?}");
    let account = accounts[0].as_ref().unwrap().path();
    let mode = std::fs::metadata(&account).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", account.display());
    let cert = state_dir.join("certificates/a.test.pem");
    assert_eq!(
        std::fs::metadata(&cert).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The account key never reaches the log.
    let creds = std::fs::read_to_string(&account).unwrap();
    let key: serde_json::Value = serde_json::from_str(&creds).unwrap();
    let pkcs8 = key["key_pkcs8"].as_str().unwrap_or_default();
    assert!(pkcs8.len() > 20, "{creds}");
    assert!(!server.log_text().contains(pkcs8));
    // Nothing was written into the root, and no token is left answered.
    assert_eq!(listing(&setup.site.root), before, "the root changed");
    let r = server.get("/.well-known/acme-challenge/anything");
    assert_eq!(r.status, 404);
    assert_eq!(server.get("/index.html").status, 301);
}

/// Every path under `root`, recursively, sorted.
fn listing(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// TLS-ALPN-01: the validation's ClientHello (ALPN `acme-tls/1` alone)
/// gets the challenge certificate from the resolver; afterwards a client
/// offering only `acme-tls/1` gets no handshake, and one offering it
/// beside http/1.1 gets the issued certificate and http/1.1.
#[test]
fn tls_alpn01_issues_a_certificate() {
    if !pebble::with_clients("tls-alpn-01") {
        return;
    }
    let setup = Setup::new();
    let (server, tls) = setup.start("tls-alpn-01", &["b.test"]);
    let pebble = setup.pebble(&Options {
        http_port: pebble::free_port(),
        ..setup.options(&server, tls)
    });
    await_orders(&server, Some(&pebble), "success", 1.0);
    verified(tls, "b.test", pebble.root());
    let addr = tls.to_string();
    let root = pebble.root().display().to_string();
    // `acme-tls/1` beside another protocol is no validation: the handshake
    // completes with the issued certificate, on the other protocol.
    let (ok, text) = tls::s_client(
        &[
            "-connect",
            &addr,
            "-servername",
            "b.test",
            "-alpn",
            "acme-tls/1,http/1.1",
            "-CAfile",
            &root,
            "-verify_return_error",
        ],
        "Q\n",
    );
    assert!(
        ok,
        "s_client offering acme-tls/1 and http/1.1 failed:\n{text}"
    );
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(text.contains("ALPN protocol: http/1.1"), "{text}");
    assert!(!text.contains("ALPN protocol: acme-tls/1"), "{text}");
    // `acme-tls/1` alone, as a validation offers it, with no challenge
    // pending any more: the server refuses the handshake with an alert
    // (its resolver has no certificate for it: rustls sends
    // access_denied), not a refused connection nor a bad command.
    let (ok, text) = tls::s_client(
        &[
            "-connect",
            &addr,
            "-servername",
            "b.test",
            "-alpn",
            "acme-tls/1",
        ],
        "",
    );
    assert!(
        !ok,
        "a lone acme-tls/1 got a handshake after the validation:\n{text}"
    );
    assert!(
        text.contains("CONNECTED("),
        "the TCP connection was made: {text}"
    );
    assert!(
        text.contains("SSL alert number"),
        "no alert from the server: {text}"
    );
    assert!(text.contains("No ALPN negotiated"), "{text}");
}

/// Short-lived certificates (pebble's `certificateValidityPeriod`) are
/// renewed at two thirds of their lifetime and swapped in for new
/// handshakes without a restart; a TLS connection made before the swap
/// keeps working, on the certificate it was made with.
#[test]
fn short_lived_certificate_is_renewed() {
    if !pebble::with_clients("renewal") {
        return;
    }
    let setup = Setup::new();
    let (server, tls) = setup.start("http-01", &["c.test"]);
    let pebble = setup.pebble(&Options {
        validity_secs: Some(12),
        ..setup.options(&server, tls)
    });
    await_orders(&server, Some(&pebble), "success", 1.0);
    let (first, _) = verified(tls, "c.test", pebble.root());
    // Made before the swap, over TLS with the first certificate: the swap
    // must leave it alone (a certificate matters only at a handshake).
    let client = client_trusting(pebble.root());
    let mut before = tls::Wire::tls(tls, &client, "c.test");
    let request = "GET /index.html HTTP/1.1\r\nHost: c.test\r\n\r\n";
    let r = before.roundtrip(request);
    assert_eq!((r.status, &*r.body_str()), (200, "hello over acme\n"));
    let before_cert = leaf_of(&before);
    // Renewal is due 8 s into a 12 s lifetime.
    await_orders(&server, Some(&pebble), "success", 2.0);
    let end = Instant::now() + ISSUE_DEADLINE;
    let (second, text) = loop {
        let (pem, text) = pebble::served_certificate(tls, "c.test", Some(pebble.root()));
        if pem != first || Instant::now() > end {
            break (pem, text);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_ne!(
        first,
        second,
        "the renewed certificate is not served\n{}",
        server.log_text()
    );
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    // The connection made before the swap keeps working on its
    // certificate, while a new one gets the renewed certificate.
    let r = before.roundtrip(request);
    assert_eq!((r.status, &*r.body_str()), (200, "hello over acme\n"));
    assert!(
        leaf_of(&before) == before_cert,
        "the connection's certificate changed"
    );
    // A new client (its own session cache: a resumed session would not
    // be sent a certificate).
    let after = tls::Wire::tls(tls, &client_trusting(pebble.root()), "c.test");
    assert!(
        leaf_of(&after) != before_cert,
        "a full handshake after the swap got the first certificate"
    );
    let expiry = sum(
        &scrape(server.admin_addr()),
        "shardhttpd_acme_certificate_expiry_seconds",
        &[("name", "c.test")],
    );
    assert!(expiry > 1.0e9, "{expiry}");
}

/// A name the CA refuses (pebble's blocklist: a `rejectedIdentifier`
/// problem) keeps its placeholder, is counted and logged with the CA's
/// problem document, and does not stop the other name from being issued.
#[test]
fn refused_name_keeps_serving_and_is_counted() {
    if !pebble::with_clients("refused") {
        return;
    }
    let setup = Setup::new();
    let (server, tls) = setup.start("http-01", &["blocked.test", "ok.test"]);
    let pebble = setup.pebble(&Options {
        blocklist: vec!["blocked.test".into()],
        ..setup.options(&server, tls)
    });
    await_orders(&server, Some(&pebble), "refused", 1.0);
    await_orders(&server, Some(&pebble), "success", 1.0);
    let line = server
        .wait_for_log("rejectedIdentifier", Duration::from_secs(5))
        .expect("the CA's problem document is logged");
    assert!(line.contains("ACME order failed"), "{line}");
    assert!(line.contains("blocked.test"), "{line}");
    assert_placeholder(tls, "blocked.test");
    verified(tls, "ok.test", pebble.root());
    assert_eq!(server.get("/index.html").status, 200);
}

/// The CA is down at start: the server starts, serves the placeholder and
/// cleartext, counts the failed order, retries, and installs the
/// certificate once the CA is up.
#[test]
fn ca_down_at_start_serves_and_retries() {
    if !pebble::with_clients("ca-down") {
        return;
    }
    let setup = Setup::new();
    let (server, tls) = setup.start("http-01", &["d.test"]);
    await_orders(&server, None, "error", 1.0);
    assert_eq!(server.get("/index.html").status, 200);
    assert_placeholder(tls, "d.test");
    assert!(server
        .log_text()
        .contains("serving a self-signed placeholder"));
    let pebble = setup.pebble(&setup.options(&server, tls));
    await_orders(&server, Some(&pebble), "success", 1.0);
    verified(tls, "d.test", pebble.root());
}

/// `--check` refuses what cannot work, naming the setting.
#[test]
fn settings_are_checked() {
    let setup = Setup::new();
    let root = setup.site.base().display().to_string();
    let open = setup.state.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let open = open.display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["--acme-domains", "a.test"], "needs `tls_listen`"),
        (
            &["--tls-listen", "127.0.0.1:0", "--acme-domains", "*.a.test"],
            "wildcard",
        ),
        (&["--acme-email", "a@b.test"], "needs `acme_domains`"),
        (
            &[
                "--tls-listen",
                "127.0.0.1:0",
                "--acme-domains",
                "a.test",
                "--acme-challenge",
                "dns-01",
            ],
            "not one of",
        ),
        (
            &[
                "--tls-listen",
                "127.0.0.1:0",
                "--acme-domains",
                "a.test",
                "--acme-directory",
                "http://ca.test/dir",
            ],
            "not an https:// URL",
        ),
        (
            &[
                "--tls-listen",
                "127.0.0.1:0",
                "--acme-domains",
                "a.test",
                "--acme-state-dir",
                &open,
            ],
            "writable by group or others",
        ),
    ];
    for (flags, want) in cases {
        let out = command()
            .args([
                "--root",
                &root,
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "127.0.0.1:0",
                "--check",
            ])
            .args(*flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} passed");
        assert!(err.contains(want), "{flags:?}: {err}");
    }
}

/// A CA that no longer knows the stored account (here: pebble restarted
/// with an empty database) refuses the renewal with `accountDoesNotExist`;
/// the credentials are moved aside, a new account is created and the
/// renewal succeeds, the old certificate serving meanwhile.
#[test]
fn forgotten_account_is_replaced() {
    if !pebble::with_clients("account-gone") {
        return;
    }
    let setup = Setup::new();
    let (server, tls) = setup.start("http-01", &["e.test"]);
    let opts = Options {
        validity_secs: Some(15),
        ..setup.options(&server, tls)
    };
    let first = setup.pebble(&opts);
    await_orders(&server, Some(&first), "success", 1.0);
    drop(first);
    let second = setup.pebble(&opts);
    await_orders(&server, Some(&second), "refused", 1.0);
    assert!(
        server
            .wait_for_log("accountDoesNotExist", ISSUE_DEADLINE)
            .is_some(),
        "{}",
        server.log_text()
    );
    await_orders(&server, Some(&second), "success", 2.0);
    let gone = std::fs::read_dir(setup.state.path().join("accounts"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".json.gone")
        })
        .count();
    assert_eq!(gone, 1);
    verified(tls, "e.test", second.root());
}

/// Replicas sharing `acme_state_dir`: while another process holds its
/// lock the server orders nothing (and says so); once it is free the
/// server orders. A second server started on the same directory serves
/// the issued certificate at once, without ordering.
#[test]
fn lock_holds_orders_back_and_state_is_served_at_once() {
    if !pebble::with_clients("lock") {
        return;
    }
    let setup = Setup::new();
    let dir = setup.state.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let lock = std::fs::File::create(dir.join("lock")).unwrap();
    assert!(shardhttpd::sys::try_lock_exclusive(&lock).unwrap());
    let flags = setup.flags(&dir, "http-01", &["f.test"]);
    let a = start(&setup.site, &flags);
    let tls_a = tls::tls_addr(&a);
    let pebble = setup.pebble(&setup.options(&a, tls_a));
    a.wait_for_log("locked by another process", Duration::from_secs(10))
        .expect("the wait for the lock is logged");
    std::thread::sleep(Duration::from_secs(2));
    let total = |s: &Server| orders(s, "success") + orders(s, "refused") + orders(s, "error");
    assert_eq!(
        total(&a),
        0.0,
        "ordered while the lock was held\n{}",
        a.log_text()
    );
    drop(lock);
    await_orders(&a, Some(&pebble), "success", 1.0);

    let b = start(&setup.site, &flags);
    let tls_b = tls::tls_addr(&b);
    verified(tls_b, "f.test", pebble.root());
    assert!(!b.log_text().contains("placeholder"), "{}", b.log_text());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(total(&b), 0.0, "{}", b.log_text());
}
