//! Automatic HTTPS for virtual hosts: `[[sites]]` with `acme = true`
//! against pebble (Let's Encrypt's test CA, every `*.test` name resolving
//! to 127.0.0.1). Each exact name of each such site is ordered with the
//! top level's `acme_*` settings, as `acme_domains` names are, with no
//! `acme_domains` at all; the SNI then picks each name's certificate and
//! the Host its site's root. A wildcard in an `acme = true` site is
//! refused by `--check`. Skipped loudly when pebble is not installed.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::metrics::{scrape, sum, Sample};
use support::pebble::{self, Options, Pebble, Trust};
use support::*;

/// Issuance takes pebble well under a second a name; the server is up
/// before pebble, so its first tries fail and it waits `acme_retry_min`
/// (doubling) before the next.
const ISSUE_DEADLINE: Duration = Duration::from_secs(40);

const ORDERS: &str = "shardhttpd_acme_orders_total";
const EXPIRY: &str = "shardhttpd_acme_certificate_expiry_seconds";

/// The names of the two `acme = true` sites, with the root serving each.
const NAMES: [(&str, &str); 3] = [("a.test", "a"), ("b.test", "b"), ("www.b.test", "b")];

/// `index.html` of the root `site`: names it, so a body says who answered.
fn index(site: &str) -> String {
    format!("<!doctype html><p>site {site} over acme</p>\n")
}

/// Two `acme = true` sites (three names) beside the default root, the
/// `acme_*` settings only at the top level and no `acme_domains`. `BASE`,
/// `PORT`, `ROOTS` and `CHALLENGE` are filled in by [`Sites::config`].
const ACME_SITES: &str = r#"root = "BASE/default"
tls_listen = "127.0.0.1:0"
acme_directory = "https://127.0.0.1:PORT/dir"
acme_ca_roots = "ROOTS"
acme_state_dir = "BASE/state"
acme_challenge = "CHALLENGE"
acme_email = "ops@example.test"
acme_retry_min = "1s"

[[sites]]
names = ["a.test"]
root = "BASE/a"
acme = true

[[sites]]
names = ["b.test", "www.b.test"]
root = "BASE/b"
acme = true
"#;

/// One test's setting: a directory holding a root per site (`default/`,
/// `a/`, `b/`), the config file and the state directory; pebble's trust;
/// the port pebble's directory will listen on (chosen before the server
/// starts, which is pointed at it first).
struct Sites {
    dir: TempDir,
    trust: Trust,
    port: u16,
}

impl Sites {
    fn new() -> Sites {
        let dir = TempDir::new("sites-acme");
        for site in ["default", "a", "b"] {
            write_file(&dir.path().join(site), "index.html", index(site).as_bytes());
        }
        Sites {
            dir,
            trust: Trust::new(),
            port: pebble::free_port(),
        }
    }

    fn base(&self) -> &Path {
        self.dir.path()
    }

    /// Where the server keeps accounts and certificates.
    fn state(&self) -> PathBuf {
        self.base().join("state")
    }

    /// [`ACME_SITES`] for `challenge`, written as `base/name`.
    fn config(&self, name: &str, challenge: &str) -> PathBuf {
        let text = ACME_SITES
            .replace("BASE", &self.base().display().to_string())
            .replace("PORT", &self.port.to_string())
            .replace("ROOTS", &self.trust.roots.display().to_string())
            .replace("CHALLENGE", challenge);
        write_file(self.base(), name, text.as_bytes())
    }

    /// The server on `config`, with a cleartext and an admin listener on
    /// port 0 (spawned with exactly these flags, so the harness's TLS
    /// transport adds no listener of its own): the server and its TLS
    /// address.
    fn start(&self, config: &Path) -> (Server, std::net::SocketAddr) {
        let server = Server::with_config(config, &[]);
        let tls = tls::tls_addr(&server);
        (server, tls)
    }

    /// Pebble validating `server`: HTTP-01 on its cleartext port,
    /// TLS-ALPN-01 on `tls`.
    fn pebble(&self, server: &Server, tls: std::net::SocketAddr) -> Pebble {
        Pebble::start(
            &self.trust,
            &Options {
                http_port: server.plain_addr().port(),
                tls_port: tls.port(),
                port: Some(self.port),
                validity_secs: None,
                blocklist: vec![],
            },
        )
    }
}

/// The names whose issued certificate's expiry gauge is published.
fn issued(samples: &[Sample]) -> Vec<&'static str> {
    NAMES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| {
            samples
                .iter()
                .any(|s| s.name == EXPIRY && s.labels.get("name").map(String::as_str) == Some(name))
        })
        .collect()
}

/// Wait until every name of [`NAMES`] has an issued certificate (its
/// expiry gauge, absent while a placeholder is served) and as many
/// orders have been counted as successes (counted just after the gauge
/// is set).
fn await_issued(server: &Server, pebble: &Pebble) {
    let ok = poll_until(ISSUE_DEADLINE, || {
        let samples = scrape(server.admin_addr());
        issued(&samples).len() == NAMES.len()
            && sum(&samples, ORDERS, &[("result", "success")]) >= NAMES.len() as f64
    });
    let samples = scrape(server.admin_addr());
    assert!(
        ok,
        "after {ISSUE_DEADLINE:?} issued only {:?}; orders success {} refused {} error {}\n{}\n{}",
        issued(&samples),
        sum(&samples, ORDERS, &[("result", "success")]),
        sum(&samples, ORDERS, &[("result", "refused")]),
        sum(&samples, ORDERS, &[("result", "error")]),
        server.log_text(),
        pebble.log_text()
    );
}

/// The body of the first PEM certificate in `text` (what `openssl
/// s_client` prints of the leaf, or a certificate file), without
/// whitespace.
fn first_pem(text: &str) -> Option<String> {
    let (_, rest) = text.split_once("-----BEGIN CERTIFICATE-----")?;
    let (body, _) = rest.split_once("-----END CERTIFICATE-----")?;
    Some(body.split_whitespace().collect())
}

/// A certificate's issuer and subjectAltNames, as `openssl x509` prints
/// them: (the issuer line, the `DNS:` names).
fn issuer_and_names(pem_body: &str) -> (String, Vec<String>) {
    let pem = format!("-----BEGIN CERTIFICATE-----\n{pem_body}\n-----END CERTIFICATE-----\n");
    let out = output_with_stdin(
        Command::new("openssl").args(["x509", "-noout", "-issuer", "-ext", "subjectAltName"]),
        &pem,
    );
    let text = output_text(&out);
    assert!(out.status.success(), "openssl x509: {text}");
    let issuer = text
        .lines()
        .find(|l| l.starts_with("issuer="))
        .unwrap_or_else(|| panic!("no issuer line: {text}"))
        .to_owned();
    let names = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter_map(|w| w.strip_prefix("DNS:"))
        .map(str::to_owned)
        .collect();
    (issuer, names)
}

/// `GET /index.html` over HTTPS to `name` on `tls` (curl's SNI and Host
/// both `name`), trusting only pebble's root: the body.
fn curl_index(tls: std::net::SocketAddr, name: &str, root: &Path) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "10", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{name}:{}:127.0.0.1", tls.port())])
        .arg(format!("https://{name}:{}/index.html", tls.port()))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl https://{name}/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two `acme = true` sites with three names and no `acme_domains`: each
/// name is served a placeholder at start, then ordered from pebble by
/// HTTP-01 (one order, one certificate file and one certificate per
/// name); the SNI picks each name's own certificate, which verifies
/// against pebble's root for that name, and HTTPS to each name answers
/// from its site's root.
#[test]
fn acme_orders_a_certificate_for_every_name_of_every_acme_site() {
    if !pebble::with_clients("sites acme http-01") {
        return;
    }
    orders_every_name("http-01");
}

/// The same by TLS-ALPN-01: the validation's handshake for each site
/// name gets that name's challenge certificate.
#[test]
fn acme_sites_are_validated_by_tls_alpn01_too() {
    if !pebble::with_clients("sites acme tls-alpn-01") {
        return;
    }
    orders_every_name("tls-alpn-01");
}

/// [`ACME_SITES`] by `challenge`: every name issued, then served.
fn orders_every_name(challenge: &str) {
    let sites = Sites::new();
    let config = sites.config("sites.toml", challenge);
    let (server, tls) = sites.start(&config);
    // Nothing can be issued before pebble runs: every name has its
    // placeholder from the start.
    for (name, _) in NAMES {
        let (_, text) = pebble::served_certificate(tls, name, None);
        assert!(
            text.contains("shardhttpd ACME placeholder"),
            "{name} before issuance: {text}\n{}",
            server.log_text()
        );
    }
    let pebble = sites.pebble(&server, tls);
    await_issued(&server, &pebble);
    // One order per name, each a success; none refused.
    let samples = scrape(server.admin_addr());
    assert_eq!(
        sum(&samples, ORDERS, &[("result", "success")]),
        NAMES.len() as f64,
        "{}",
        server.log_text()
    );
    assert_eq!(sum(&samples, ORDERS, &[("result", "refused")]), 0.0);

    for (name, site) in NAMES {
        // The name's own certificate file in the state directory, as for
        // `acme_domains`: issued for that name alone.
        let file = sites.state().join(format!("certificates/{name}.pem"));
        let stored =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let stored =
            first_pem(&stored).unwrap_or_else(|| panic!("no certificate in {}", file.display()));
        let (issuer, names) = issuer_and_names(&stored);
        assert_eq!(names, [name], "{} covers other names", file.display());
        assert!(issuer.contains("Pebble Intermediate"), "{name}: {issuer}");

        // Served for the SNI: that very certificate (so its SAN and
        // issuer above), verified against pebble's root and for the name.
        let (served, text) = pebble::served_certificate(tls, name, Some(pebble.root()));
        assert!(
            text.contains("Verify return code: 0 (ok)"),
            "{name}: {text}\n{}",
            server.log_text()
        );
        assert!(!text.contains("shardhttpd ACME placeholder"), "{text}");
        let served: String = served.split_whitespace().collect();
        assert_eq!(
            served,
            stored,
            "SNI {name} got another certificate than {}",
            file.display()
        );

        // HTTPS to the name: its site's root answers.
        assert_eq!(
            curl_index(tls, name, pebble.root()),
            index(site),
            "https://{name}/ answered by the wrong site"
        );
    }
}

/// A directory with a default root and `c/`, where [`CheckConfig::write`]
/// puts configs of one `acme = true` site for `--check`; its state
/// directory is never created (`--check` creates nothing).
struct CheckConfig {
    dir: TempDir,
}

impl CheckConfig {
    fn new() -> CheckConfig {
        let dir = TempDir::new("sites-acme-check");
        for site in ["default", "c"] {
            write_file(&dir.path().join(site), "index.html", index(site).as_bytes());
        }
        CheckConfig { dir }
    }

    /// `base/file`: the site named `names` (a TOML array), `acme = true`
    /// on line 7.
    fn write(&self, file: &str, names: &str) -> PathBuf {
        let base = self.dir.path().display();
        let text = format!(
            "root = \"{base}/default\"\n\
             tls_listen = \"127.0.0.1:0\"\n\
             acme_state_dir = \"{base}/state\"\n\
             [[sites]]\n\
             names = {names}\n\
             root = \"{base}/c\"\n\
             acme = true\n"
        );
        write_file(self.dir.path(), file, text.as_bytes())
    }
}

/// `--check` on `config`: the exit code, stdout and stderr together, and
/// stderr.
fn check(config: &Path) -> (Option<i32>, String, String) {
    let out = command()
        .arg("--config")
        .arg(config)
        .arg("--check")
        .output()
        .expect("run --check");
    (
        out.status.code(),
        output_text(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `acme = true` on a site with a wildcard name is refused by `--check`
/// with exit status 2, naming the file, the line and `sites[0].acme`, and
/// saying that a wildcard needs DNS-01, alone or beside an exact name.
#[test]
fn acme_on_a_wildcard_site_is_refused_at_check() {
    let configs = CheckConfig::new();
    for (file, names) in [
        ("wild.toml", r#"["*.c.test"]"#),
        ("mixed.toml", r#"["c.test", "*.c.test"]"#),
    ] {
        let path = configs.write(file, names);
        let (code, text, stderr) = check(&path);
        assert_eq!(code, Some(2), "{names}: {text}");
        let key = format!(
            "config file {}, line 7: key `sites[0].acme`",
            path.display()
        );
        for part in [key.as_str(), "`*.c.test` is a wildcard", "DNS-01"] {
            assert!(stderr.contains(part), "{names}: want {part:?} in {stderr}");
        }
    }
}

/// Regression: `--check` (and the start, through the same preflight)
/// refused an `acme = true` site whose certificate file did not exist
/// yet, which is every such site before its first start, while the same
/// name in `acme_domains` passes: the file is made at start.
#[test]
fn check_passes_an_acme_site_before_its_certificate_exists() {
    let configs = CheckConfig::new();
    let path = configs.write("exact.toml", r#"["c.test", "www.c.test"]"#);
    let (code, text, _) = check(&path);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("configuration ok:"), "{text}");
}
