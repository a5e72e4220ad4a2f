//! Virtual hosts (`[[sites]]`) against the real binary with real clients
//! (curl, nghttp, openssl, a rustls client, raw sockets): the site a
//! request gets by `Host`, `:authority` and SNI (exact name, then the
//! longest wildcard, then `unknown_host`), each site's own rules and what
//! it inherits, its own certificate, the 421 for a request that leaves the
//! site its SNI chose, one connection (pipelined HTTP/1.1, HTTP/2 streams)
//! carrying requests for several sites, `redirect_https` and `hsts` per
//! site, the per-site metrics, access-log field and snapshot, a deploy in
//! one site while another is under load, `--check` and config errors, and
//! SIGHUP adding and removing sites.

use crate::support;

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use support::h2::parse_curl_head;
use support::metrics::{admin_get, await_value, scrape, sum, Sample};
use support::tls::{s_client, tls_addr, Ca, Leaf, Wire};
use support::upgrade::{process_gone, signal, status_pid, Successors};
use support::*;

/// How long a change on disk, a handover or a counter may take to show on
/// a loaded two-core CI machine.
const DEADLINE: Duration = Duration::from_secs(20);

const REQUESTS: &str = "shardhttpd_site_requests_total";
const RESPONSE_BYTES: &str = "shardhttpd_site_response_bytes_total";
const GENERATION: &str = "shardhttpd_site_snapshot_generation";
const FILES: &str = "shardhttpd_site_snapshot_files";
const SNAPSHOT_BYTES: &str = "shardhttpd_site_snapshot_bytes";
const REBUILDS: &str = "shardhttpd_site_snapshot_rebuilds_total";

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// `index.html` of the root `site`: names it, so a body says who answered.
fn index(site: &str) -> String {
    format!("<!doctype html><p>site {site}</p>\n")
}

/// `page.txt` of the root `site`.
fn page(site: &str) -> String {
    format!("{site} page\n")
}

/// A temp dir holding one root per site (`default/`, `a/`, `b/`, more with
/// [`Roots::add`]), each with an `index.html` and a `page.txt` that name
/// it, and the config files written beside them.
struct Roots {
    dir: TempDir,
}

impl Roots {
    fn new(tag: &str) -> Roots {
        let roots = Roots {
            dir: TempDir::new(tag),
        };
        for site in ["default", "a", "b"] {
            roots.add(site);
        }
        roots
    }

    /// A root `base/site` with the two files that name it.
    fn add(&self, site: &str) -> PathBuf {
        let root = self.root(site);
        write_file(&root, "index.html", index(site).as_bytes());
        write_file(&root, "page.txt", page(site).as_bytes());
        root
    }

    fn base(&self) -> &Path {
        self.dir.path()
    }

    fn root(&self, site: &str) -> PathBuf {
        self.base().join(site)
    }

    /// `text` with every `BASE` replaced by the base directory, written as
    /// `base/name`.
    fn config_named(&self, name: &str, text: &str) -> PathBuf {
        let text = text.replace("BASE", &self.base().display().to_string());
        write_file(self.base(), name, text.as_bytes())
    }

    fn config(&self, text: &str) -> PathBuf {
        self.config_named("shardhttpd.toml", text)
    }
}

/// The usual three sites: the default one, `a.test` with its wildcard,
/// and `b.test`.
const TWO_SITES: &str = r#"root = "BASE/default"

[[sites]]
names = ["a.test", "*.a.test"]
root = "BASE/a"

[[sites]]
names = "b.test"
root = "BASE/b"
"#;

/// `GET path` with `Host: host` on a fresh connection.
fn get_host(server: &Server, host: &str, path: &str) -> Response {
    server.send(&format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"))
}

/// Asserts that `r` is `index.html` of `site`.
#[track_caller]
fn assert_site(r: &Response, site: &str, what: &str) {
    assert_eq!(r.status, 200, "{what}: {r:?}");
    assert_eq!(
        r.body_str(),
        index(site),
        "{what}: answered by the wrong site"
    );
}

/// Whether `program` is installed; if not, a loud skip naming `what`
/// (a failure under `SHARDHTTPD_TEST_REQUIRE=all`).
fn have(program: &str, what: &str) -> bool {
    if installed(program) {
        return true;
    }
    loud(&format!("SKIP: {what}: {program} not installed"));
    false
}

/// `name:port:127.0.0.1`, for curl's `--resolve`.
fn resolve(name: &str, addr: SocketAddr) -> String {
    format!("{name}:{}:{}", addr.port(), addr.ip())
}

/// One request with curl (`args` before the URL): the last response, its
/// body, and curl's verbose log. curl must exit 0 (it does for a 4xx).
#[track_caller]
fn curl(args: &[&str], url: &str) -> (Response, String) {
    let dir = TempDir::new("sites-curl");
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let out = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "10", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    let log = output_text(&out);
    assert!(out.status.success(), "curl {args:?} {url}: {log}");
    let head = fs::read_to_string(&head).expect("curl's header dump");
    let mut response = parse_curl_head(&head).unwrap_or_else(|e| panic!("{e}\n{log}"));
    response.body = fs::read(&body).unwrap_or_default();
    (response, log)
}

/// `name` for `site`: summed over its samples that also carry `filter`.
fn site_value(samples: &[Sample], name: &str, site: &str, filter: &[(&str, &str)]) -> f64 {
    let mut labels = vec![("site", site)];
    labels.extend_from_slice(filter);
    sum(samples, name, &labels)
}

/// Whether any sample of `name` carries `site`.
fn has_site_label(samples: &[Sample], name: &str, site: &str) -> bool {
    samples
        .iter()
        .any(|s| s.name == name && s.labels.get("site").map(String::as_str) == Some(site))
}

// ---------------------------------------------------------------------------
// Choosing the site
// ---------------------------------------------------------------------------

/// curl's Host chooses the site: an exact name first, then the longest
/// `*.` wildcard at any depth (never the bare domain it sits on), else the
/// default site.
#[test]
fn host_chooses_exact_name_then_longest_wildcard_else_the_default_site() {
    if !have("curl", "sites by Host") {
        return;
    }
    let roots = Roots::new("sites-host");
    roots.add("c");
    let config = roots.config(&format!(
        "{TWO_SITES}\n[[sites]]\nnames = [\"*.deep.a.test\", \"*.c.test\"]\nroot = \"BASE/c\"\n"
    ));
    let server = Server::with_config(&config, &[]);
    let addr = server.addr();
    for (name, want) in [
        ("a.test", "a"),
        ("x.a.test", "a"),
        ("y.z.a.test", "a"),
        // `*.a.test` covers `deep.a.test` itself; `*.deep.a.test` is longer
        // for the names under it.
        ("deep.a.test", "a"),
        ("y.deep.a.test", "c"),
        ("q.r.deep.a.test", "c"),
        ("b.test", "b"),
        ("x.c.test", "c"),
        // A wildcard does not cover its bare domain; b.test has none.
        ("c.test", "default"),
        ("x.b.test", "default"),
        ("unknown.test", "default"),
    ] {
        let (r, log) = curl(
            &["--resolve", &resolve(name, addr)],
            &format!("http://{name}:{}/index.html", addr.port()),
        );
        assert_eq!(r.status, 200, "{name}: {log}");
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            index(want),
            "{name} should get site {want}"
        );
    }
}

/// The Host is matched without case, port or trailing dot; an HTTP/1.0
/// request without Host is an unknown name and gets the default site.
#[test]
fn host_matching_ignores_case_port_and_trailing_dot() {
    let roots = Roots::new("sites-host-forms");
    let server = Server::with_config(&roots.config(TWO_SITES), &[]);
    for (host, want) in [
        ("A.TEST", "a"),
        ("a.test:8080", "a"),
        ("a.test.", "a"),
        ("X.A.Test.:1", "a"),
        ("Y.Z.A.TEST", "a"),
        ("B.Test.:80", "b"),
        ("b.test.", "b"),
        ("127.0.0.1", "default"),
    ] {
        assert_site(
            &get_host(&server, host, "/index.html"),
            want,
            &format!("Host {host:?}"),
        );
    }
    let r = server.send("GET /index.html HTTP/1.0\r\n\r\n");
    assert_site(&r, "default", "HTTP/1.0 without Host");
}

/// Each site's own rules: its `[[sites.headers]]` replace the top level's
/// list (only on that site), its `error_pages` and `spa_fallback` are its
/// own and never inherited (a site without `error_pages` gets its root's
/// `404.html`), while a site that sets none inherits the top level's
/// `[[headers]]`, `cache_control_default`, `index_files`, `default_type`
/// and dotfile rules, and one that sets its own keeps them.
#[test]
fn site_rules_are_its_own_and_it_inherits_the_top_levels() {
    let roots = Roots::new("sites-rules");
    write_file(&roots.root("default"), "oops.html", b"default oops\n");
    write_file(&roots.root("default"), "404.html", b"default 404\n");
    write_file(&roots.root("a"), "missing.html", b"a missing\n");
    write_file(&roots.root("a"), "404.html", b"a 404\n");
    write_file(&roots.root("b"), "oops.html", b"b oops\n");
    write_file(&roots.root("b"), "404.html", b"b 404\n");
    for site in ["default", "a", "b"] {
        let root = roots.root(site);
        write_file(&root, "dir/home.html", format!("{site} home\n").as_bytes());
        write_file(
            &root,
            "dir/index.html",
            format!("{site} dir index\n").as_bytes(),
        );
        write_file(&root, "data.unknownext", b"data\n");
        write_file(&root, ".hidden", format!("{site} dotfile\n").as_bytes());
    }
    let config = roots.config(
        r#"root = "BASE/default"
spa_fallback = true
cache_control_default = "public, max-age=60"
error_pages = { 404 = "oops.html" }
index_files = ["home.html", "index.html"]
default_type = "text/x-top"
serve_dotfiles = true

[[headers]]
glob = "*"
set = { X-Top = "top" }

[[sites]]
names = "a.test"
root = "BASE/a"
spa_fallback = true
cache_control_default = "no-store"
index_files = ["index.html"]
default_type = "application/x-a"
serve_dotfiles = false

[[sites.headers]]
glob = "*"
set = { X-Site = "a" }

[sites.error_pages]
404 = "missing.html"

[[sites]]
names = "b.test"
root = "BASE/b"
"#,
    );
    let server = Server::with_config(&config, &[]);

    // Headers and Cache-Control: a's own, b's and the default's inherited.
    for (host, x_site, x_top, cache) in [
        ("a.test", Some("a"), None, "no-store"),
        ("b.test", None, Some("top"), "public, max-age=60"),
        ("other.test", None, Some("top"), "public, max-age=60"),
    ] {
        let r = get_host(&server, host, "/page.txt");
        assert_eq!(r.status, 200, "{host}: {r:?}");
        assert_eq!(r.header("x-site"), x_site, "{host}: X-Site: {r:?}");
        assert_eq!(r.header("x-top"), x_top, "{host}: X-Top: {r:?}");
        assert_eq!(r.header("cache-control"), Some(cache), "{host}: {r:?}");
    }

    // Error pages: a's configured one, b's root's 404.html (the top
    // level's `oops.html` is not inherited), the default's configured one.
    for (host, body) in [
        ("a.test", "a missing\n"),
        ("b.test", "b 404\n"),
        ("other.test", "default oops\n"),
    ] {
        let r = get_host(&server, host, "/nope.txt");
        assert_eq!(r.status, 404, "{host}: {r:?}");
        assert_eq!(r.body_str(), body, "{host}: the site's own error page");
    }

    // spa_fallback: a's own, the default's, and not b's.
    assert_site(&get_host(&server, "a.test", "/app/route"), "a", "a's SPA");
    assert_site(
        &get_host(&server, "other.test", "/app/route"),
        "default",
        "the default site's SPA",
    );
    let r = get_host(&server, "b.test", "/app/route");
    assert_eq!(r.status, 404, "b does not inherit spa_fallback: {r:?}");
    assert_eq!(r.body_str(), "b 404\n");

    // index_files, default_type and the dotfile rules: a's own, b's and
    // the default's inherited.
    for (host, site, dir_index, ctype, dotfile) in [
        ("a.test", "a", "a dir index\n", "application/x-a", false),
        ("b.test", "b", "b home\n", "text/x-top", true),
        (
            "other.test",
            "default",
            "default home\n",
            "text/x-top",
            true,
        ),
    ] {
        let r = get_host(&server, host, "/dir/");
        assert_eq!(
            (r.status, r.body_str().as_str()),
            (200, dir_index),
            "{host}"
        );
        let r = get_host(&server, host, "/data.unknownext");
        assert_eq!(r.status, 200, "{host}: {r:?}");
        assert!(r.must("content-type").starts_with(ctype), "{host}: {r:?}");
        let r = get_host(&server, host, "/.hidden");
        if dotfile {
            assert_eq!(r.body_str(), format!("{site} dotfile\n"), "{host}: {r:?}");
        } else {
            assert_eq!(r.status, 404, "{host}: a dotfile served: {r:?}");
        }
    }
}

/// RFC 9112 §3.2.2: a request in absolute-form names its host in the
/// target, and the origin server must ignore the `Host` field: the
/// target's host chooses the site.
#[test]
fn absolute_form_target_chooses_the_site_over_the_host_field() {
    let roots = Roots::new("sites-absolute");
    let server = Server::with_config(&roots.config(TWO_SITES), &[]);
    for (target, host, want) in [
        ("http://b.test/index.html", "a.test", "b"),
        ("http://A.TEST:8080/index.html", "b.test", "a"),
        ("http://unknown.test/index.html", "a.test", "default"),
    ] {
        let r = server.send(&format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_site(&r, want, &format!("GET {target} with Host {host}"));
    }
}

/// `unknown_host = "421"` (file) and `--unknown-host 404` (flag): a name
/// no site claims, or no Host at all, gets that status with a short
/// text/plain body that is no site's page, over HTTP/1.1 and h2c; the
/// default site's files are out of its reach, and the sites still answer.
#[test]
fn unknown_host_421_or_404_keeps_unclaimed_names_off_the_default_site() {
    let roots = Roots::new("sites-unknown");
    write_file(&roots.root("default"), "404.html", b"default 404 page\n");
    write_file(
        &roots.root("default"),
        "only-default.txt",
        b"default only\n",
    );
    write_file(&roots.root("a"), "404.html", b"a 404 page\n");
    let pages = [
        index("default"),
        index("a"),
        index("b"),
        "default 404 page\n".to_owned(),
        "a 404 page\n".to_owned(),
        "default only\n".to_owned(),
    ];
    let with_421 = roots.config_named(
        "421.toml",
        &TWO_SITES.replace(
            "root = \"BASE/default\"\n",
            "root = \"BASE/default\"\nunknown_host = \"421\"\n",
        ),
    );
    let plain = roots.config_named("plain.toml", TWO_SITES);
    let with_curl = have("curl", "unknown_host over h2c");
    for (config, extra, want) in [
        (&with_421, &[][..], 421u16),
        (&plain, &["--unknown-host", "404"][..], 404),
    ] {
        let server = Server::with_config(config, extra);
        let what = format!("unknown_host {want}");
        let mut answers = vec![
            get_host(&server, "unknown.test", "/index.html"),
            get_host(&server, "unknown.test", "/only-default.txt"),
            get_host(&server, "c.test", "/nope.txt"),
            server.send("GET /index.html HTTP/1.0\r\n\r\n"),
        ];
        if with_curl {
            let addr = server.addr();
            let (r, log) = curl(
                &[
                    "--http2-prior-knowledge",
                    "--resolve",
                    &resolve("unknown.test", addr),
                ],
                &format!("http://unknown.test:{}/index.html", addr.port()),
            );
            assert_eq!(r.version, "HTTP/2", "{log}");
            answers.push(r);
        }
        for r in &answers {
            assert_eq!(r.status, want, "{what}: {r:?}");
            let ctype = r.must("content-type");
            assert!(ctype.starts_with("text/plain"), "{what}: {r:?}");
            assert!(
                !r.body.is_empty() && r.body.len() < 200,
                "{what}: a short body: {r:?}"
            );
            let body = r.body_str();
            assert!(
                !pages.contains(&body) && !body.contains("<p>site"),
                "{what}: a site's page answered an unclaimed name: {body:?}"
            );
        }
        assert_site(&get_host(&server, "a.test", "/"), "a", &what);
        assert_site(&get_host(&server, "x.a.test", "/"), "a", &what);
        assert_site(&get_host(&server, "b.test", "/"), "b", &what);
        assert_eq!(
            get_host(&server, "a.test", "/nope.txt").body_str(),
            "a 404 page\n",
            "{what}: a claimed name still gets its site's error page"
        );
    }
}

/// Over h2c the `:authority` chooses the site (curl with prior knowledge,
/// and nghttp with the `:authority` given outright).
#[test]
fn h2c_chooses_the_site_by_authority() {
    if !have("curl", "h2c routing") {
        return;
    }
    let roots = Roots::new("sites-h2c");
    let server = Server::with_config(&roots.config(TWO_SITES), &[]);
    let addr = server.addr();
    for (name, want) in [
        ("a.test", "a"),
        ("x.a.test", "a"),
        ("B.TEST", "b"),
        ("unknown.test", "default"),
    ] {
        let (r, log) = curl(
            &["--http2-prior-knowledge", "--resolve", &resolve(name, addr)],
            &format!("http://{name}:{}/index.html", addr.port()),
        );
        assert_eq!(r.version, "HTTP/2", "{name}: {log}");
        assert_site(&r, want, &format!(":authority {name}"));
    }
    if !have("nghttp", "h2c routing with nghttp") {
        return;
    }
    for (authority, want) in [("b.test", "b"), ("y.a.test", "a"), ("c.test", "default")] {
        let out = Command::new("nghttp")
            .args(["-H", &format!(":authority: {authority}")])
            .arg(format!("http://{addr}/index.html"))
            .output()
            .expect("run nghttp");
        let text = output_text(&out);
        assert!(out.status.success(), "nghttp {authority}: {text}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            index(want),
            "nghttp :authority {authority}"
        );
    }
}

/// `len` bytes, period 251 from `seed`, so a byte of another body shows.
fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + seed) % 251) as u8).collect()
}

/// Pipelined HTTP/1.1 requests for several sites on one connection, over
/// cleartext and over TLS whose SNI names no site: each is answered in
/// order by its own site, a request for another site than a large body
/// still being sent waiting for it, with every byte right.
#[test]
fn pipelined_requests_for_several_sites_are_answered_in_order() {
    let roots = Roots::new("sites-pipeline");
    let mid = 512 * 1024;
    write_file(&roots.root("a"), "mid.bin", &pattern(1, mid));
    write_file(&roots.root("b"), "mid.bin", &pattern(2, mid));
    let ca = Ca::new();
    let leaf = ca.leaf(roots.base(), "localhost", &["localhost"]);
    let config = roots.config(&format!(
        "tls_listen = \"127.0.0.1:0\"\ntls_cert = {:?}\ntls_key = {:?}\n{TWO_SITES}",
        leaf.cert, leaf.key
    ));
    let server = Server::with_config(&config, &[]);
    let asks: [(&str, &str, Vec<u8>); 6] = [
        ("b.test", "/mid.bin", pattern(2, mid)),
        ("a.test", "/index.html", index("a").into_bytes()),
        ("x.a.test", "/mid.bin", pattern(1, mid)),
        ("b.test", "/page.txt", page("b").into_bytes()),
        ("other.test", "/index.html", index("default").into_bytes()),
        ("b.test", "/mid.bin", pattern(2, mid)),
    ];
    let pipeline: String = asks
        .iter()
        .map(|(host, path, _)| format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"))
        .collect();
    let client = ca.client(&[]);
    for (what, mut wire) in [
        ("cleartext", Wire::plain(server.addr())),
        (
            "TLS, SNI localhost",
            Wire::tls(tls_addr(&server), &client, "localhost"),
        ),
    ] {
        wire.send(pipeline.as_bytes());
        for (i, (host, path, want)) in asks.iter().enumerate() {
            let r = wire
                .read_response_to("GET")
                .unwrap_or_else(|e| panic!("{what}: response {i} ({host}{path}): {e}"));
            assert_eq!(r.status, 200, "{what}: {host}{path}: {r:?}");
            assert!(
                r.body == *want,
                "{what}: {host}{path}: {} bytes, not the site's file",
                r.body.len()
            );
        }
    }
}

/// Concurrent HTTP/2 streams for several sites on one h2c connection,
/// with bodies past the stream window: each stream is answered whole by
/// the site its `:authority` names.
#[test]
fn h2_streams_for_several_sites_share_one_connection() {
    let Some(py) = support::h2::python_or_skip("h2 streams for several sites") else {
        return;
    };
    let roots = Roots::new("sites-h2-streams");
    let size = 200_000;
    write_file(&roots.root("default"), "big.bin", &pattern(0, size));
    write_file(&roots.root("a"), "big.bin", &pattern(1, size));
    write_file(&roots.root("b"), "big.bin", &pattern(2, size));
    let server = Server::with_config(&roots.config(TWO_SITES), &[]);
    let sites = [
        ("a.test", 1),
        ("b.test", 2),
        ("y.a.test", 1),
        ("unknown.test", 0),
    ];
    let mut asks = Vec::new();
    for k in 0..5 {
        for (authority, seed) in sites {
            asks.push((authority, format!("/big.bin?k={k}"), pattern(seed, size)));
            asks.push((
                authority,
                format!("/page.txt?k={k}"),
                page(["default", "a", "b"][seed]).into_bytes(),
            ));
        }
    }
    let input = serde_json::Value::Array(
        asks.iter()
            .map(|(authority, path, _)| serde_json::json!({"path": path, "authority": authority}))
            .collect(),
    )
    .to_string();
    let target = support::h2::Target::h2c(server.addr());
    let v = support::h2::probe_with_input(&py, "fetch", &target, &[], &input);
    let responses = v["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), asks.len(), "{v}");
    for (resp, (authority, path, want)) in responses.iter().zip(&asks) {
        let r = support::h2::fetched(resp);
        assert_eq!(resp["complete"], true, "{authority}{path}: {resp}");
        assert_eq!(r.status, 200, "{authority}{path}: {r:?}");
        assert!(
            r.body == *want,
            "{authority}{path}: {} bytes, not its site's file",
            r.body.len()
        );
    }
}

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

/// A TLS server with three certificates: `localhost` (ECDSA) for the
/// default site, ECDSA for `a.test` and `*.a.test`, RSA for `b.test`.
struct TlsSites {
    /// First, so it is dropped before the roots it serves.
    _server: Server,
    _roots: Roots,
    ca: Ca,
    ca_file: PathBuf,
    default: Leaf,
    a: Leaf,
    b: Leaf,
    tls: SocketAddr,
}

impl TlsSites {
    /// None (after a loud skip) when openssl cannot make the RSA key.
    fn start(tag: &str) -> Option<TlsSites> {
        let roots = Roots::new(tag);
        let ca = Ca::new();
        let ca_file = ca.write(roots.base());
        let default = ca.leaf(roots.base(), "site-default", &["localhost"]);
        let a = ca.leaf(roots.base(), "site-a", &["a.test", "*.a.test"]);
        let Some(b) = ca.rsa_leaf(roots.base(), "site-b", &["b.test"]) else {
            loud("SKIP: openssl not installed (needed for an RSA key)");
            return None;
        };
        let config = roots.config(&format!(
            "root = \"BASE/default\"\ntls_listen = \"127.0.0.1:0\"\n\
             tls_cert = {:?}\ntls_key = {:?}\n\n\
             [[sites]]\nnames = [\"a.test\", \"*.a.test\"]\nroot = \"BASE/a\"\n\
             tls_cert = {:?}\ntls_key = {:?}\n\n\
             [[sites]]\nnames = \"b.test\"\nroot = \"BASE/b\"\n\
             tls_cert = {:?}\ntls_key = {:?}\n",
            default.cert, default.key, a.cert, a.key, b.cert, b.key
        ));
        let server = Server::with_config(&config, &[]);
        let tls = tls_addr(&server);
        Some(TlsSites {
            _roots: roots,
            ca,
            ca_file,
            default,
            a,
            b,
            _server: server,
            tls,
        })
    }

    /// A rustls connection with `sni`, handshaken.
    fn wire(&self, sni: &str) -> Wire {
        Wire::tls(self.tls, &self.ca.client(&[]), sni)
    }

    /// curl's https URL of `path` on `name`, which `--resolve` points here.
    fn url(&self, name: &str, path: &str) -> String {
        format!("https://{name}:{}{path}", self.tls.port())
    }

    fn ca_file(&self) -> &str {
        self.ca_file.to_str().unwrap()
    }
}

/// Each site's certificate joins the list and is chosen by SNI from its
/// subjectAltNames (wildcard included): a rustls client gets the very
/// certificate, openssl s_client verifies it for the name (ECDSA for
/// a.test, RSA for b.test), and curl over https gets the site's content.
#[test]
fn sni_chooses_each_sites_own_certificate() {
    let Some(t) = TlsSites::start("sites-tls-certs") else {
        return;
    };
    for (sni, leaf, site) in [
        ("a.test", &t.a, "a"),
        ("x.a.test", &t.a, "a"),
        ("b.test", &t.b, "b"),
        ("localhost", &t.default, "default"),
    ] {
        let mut w = t.wire(sni);
        let got = w.session().unwrap().peer_certificates().unwrap()[0].to_vec();
        assert!(got == leaf.der, "SNI {sni}: got another certificate");
        let r = w.roundtrip(&format!("GET /index.html HTTP/1.1\r\nHost: {sni}\r\n\r\n"));
        assert_site(&r, site, &format!("SNI {sni}"));
    }

    if have("openssl", "certificates seen by openssl s_client") {
        let addr = t.tls.to_string();
        for (sni, subject, key) in [
            (
                "a.test",
                "subject=CN = site-a",
                "Server public key is 256 bit",
            ),
            (
                "x.a.test",
                "subject=CN = site-a",
                "Server public key is 256 bit",
            ),
            (
                "b.test",
                "subject=CN = site-b",
                "Server public key is 2048 bit",
            ),
        ] {
            let (_, text) = s_client(
                &[
                    "-connect",
                    &addr,
                    "-servername",
                    sni,
                    "-CAfile",
                    t.ca_file(),
                    "-verify_hostname",
                    sni,
                ],
                "Q\n",
            );
            assert!(text.contains(subject), "SNI {sni}: {text}");
            assert!(text.contains(key), "SNI {sni}: {text}");
            assert!(
                text.contains("Verify return code: 0 (ok)"),
                "SNI {sni}: the certificate must verify for the name: {text}"
            );
        }
    }

    if have("curl", "https with curl") {
        for (name, site) in [("a.test", "a"), ("y.a.test", "a"), ("b.test", "b")] {
            for version in ["--http1.1", "--http2"] {
                let (r, log) = curl(
                    &[
                        version,
                        "--cacert",
                        t.ca_file(),
                        "--resolve",
                        &resolve(name, t.tls),
                    ],
                    &t.url(name, "/index.html"),
                );
                assert_site(&r, site, &format!("curl {version} https://{name}"));
                assert!(log.contains("SSL certificate verify ok"), "{log}");
            }
        }
    }
}

/// Over TLS the SNI fixes the site: a request on that connection whose
/// Host (HTTP/1.1) or `:authority` (HTTP/2) chooses another site, or an
/// unknown name that would fall to the default, gets 421; a name of the
/// same site (its wildcard) is served; a client whose SNI names no site is
/// held to none.
#[test]
fn tls_request_for_another_site_than_the_sni_is_misdirected() {
    let Some(t) = TlsSites::start("sites-tls-421") else {
        return;
    };
    for (sni, host, want) in [
        ("a.test", "a.test", Ok("a")),
        ("a.test", "x.a.test", Ok("a")),
        ("x.a.test", "a.test", Ok("a")),
        ("a.test", "b.test", Err(421)),
        ("a.test", "unknown.test", Err(421)),
        ("b.test", "a.test", Err(421)),
        ("b.test", "x.a.test", Err(421)),
        // The SNI names no site (the default's certificate): no check.
        ("localhost", "b.test", Ok("b")),
        ("localhost", "a.test", Ok("a")),
        ("localhost", "unknown.test", Ok("default")),
    ] {
        let what = format!("SNI {sni}, Host {host}");
        let r = t
            .wire(sni)
            .roundtrip(&format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        match want {
            Ok(site) => assert_site(&r, site, &what),
            Err(status) => {
                assert_eq!(r.status, status, "{what}: {r:?}");
                assert!(
                    r.must("content-type").starts_with("text/plain"),
                    "{what}: {r:?}"
                );
                assert!(!r.body_str().contains("<p>site"), "{what}: {r:?}");
            }
        }
    }

    // One HTTP/2 connection (SNI a.test), one stream per `:authority`.
    if let Some(py) = support::h2::python_or_skip("421 over HTTP/2 streams") {
        let asks = [
            ("a.test", 200),
            ("b.test", 421),
            ("x.a.test", 200),
            ("unknown.test", 421),
            ("A.TEST", 200),
        ];
        let input = serde_json::Value::Array(
            asks.iter()
                .map(|(authority, _)| {
                    serde_json::json!({"path": "/index.html", "authority": authority})
                })
                .collect(),
        )
        .to_string();
        let target = support::h2::Target::tls(t.tls, &t.ca_file);
        let v = support::h2::probe_with_input(&py, "fetch", &target, &["--sni", "a.test"], &input);
        let responses = v["responses"].as_array().expect("responses");
        assert_eq!(responses.len(), asks.len(), "{v}");
        for (resp, (authority, want)) in responses.iter().zip(asks) {
            let r = support::h2::fetched(resp);
            let what = format!("h2, SNI a.test, :authority {authority}");
            assert_eq!(resp["complete"], true, "{what}: {resp}");
            assert_eq!(r.status, want, "{what}: {r:?}");
            if want == 200 {
                assert_site(&r, "a", &what);
            } else {
                assert!(!r.body_str().contains("<p>site"), "{what}: {r:?}");
            }
        }
    }

    if !have("curl", "421 with curl over HTTP/1.1 and HTTP/2") {
        return;
    }
    // curl connects to a.test (SNI a.test) and asks for another name; over
    // HTTP/2 curl sends the Host it is given as `:authority`.
    let a = resolve("a.test", t.tls);
    for (version, proto) in [("--http1.1", "HTTP/1.1"), ("--http2", "HTTP/2")] {
        for (host, want) in [("b.test", 421), ("unknown.test", 421), ("x.a.test", 200)] {
            let host_header = format!("Host: {host}");
            let (r, log) = curl(
                &[
                    version,
                    "--cacert",
                    t.ca_file(),
                    "--resolve",
                    &a,
                    "-H",
                    &host_header,
                ],
                &t.url("a.test", "/index.html"),
            );
            let what = format!("curl {version}, SNI a.test, {host_header}");
            assert_eq!(r.version, proto, "{what}: {log}");
            if proto == "HTTP/2" {
                assert!(
                    log.contains(&format!("[:authority: {host}]")),
                    "{what}: curl must send :authority {host}: {log}"
                );
            }
            assert_eq!(r.status, want, "{what}: {log}");
            if want == 200 {
                assert_site(&r, "a", &what);
            }
        }
    }
}

/// `redirect_https = true` on one site sends that site's cleartext
/// requests (HTTP/1.1 and h2c) to HTTPS on the first TLS port, and no
/// other site's; `hsts` is per site (its own, or the top level's
/// inherited) and goes out over TLS only.
#[test]
fn redirect_https_and_hsts_are_per_site() {
    let roots = Roots::new("sites-https");
    let ca = Ca::new();
    let leaf = ca.leaf(
        roots.base(),
        "all",
        &["localhost", "a.test", "b.test", "*.a.test"],
    );
    let config = roots.config(&format!(
        "root = \"BASE/default\"\ntls_listen = \"127.0.0.1:0\"\n\
         tls_cert = {:?}\ntls_key = {:?}\nhsts = \"max-age=200\"\n\n\
         [[sites]]\nnames = [\"a.test\", \"*.a.test\"]\nroot = \"BASE/a\"\n\
         redirect_https = true\nhsts = \"max-age=100\"\n\n\
         [[sites]]\nnames = \"b.test\"\nroot = \"BASE/b\"\n",
        leaf.cert, leaf.key
    ));
    let server = Server::with_config(&config, &[]);
    let port = tls_addr(&server).port();

    for host in ["a.test", "x.a.test:8080"] {
        let r = get_host(&server, host, "/page.txt?q=1");
        assert_eq!(r.status, 301, "{host}: {r:?}");
        let name = host.split(':').next().unwrap();
        assert_eq!(
            r.must("location"),
            format!("https://{name}:{port}/page.txt?q=1"),
            "{host}"
        );
        assert_eq!(r.header("strict-transport-security"), None, "{r:?}");
    }
    for (host, site) in [("b.test", "b"), ("other.test", "default")] {
        let r = get_host(&server, host, "/index.html");
        assert_site(&r, site, &format!("cleartext {host} is not redirected"));
        assert_eq!(r.header("location"), None, "{r:?}");
        assert_eq!(r.header("strict-transport-security"), None, "{r:?}");
    }
    if have("curl", "redirect_https over h2c") {
        let addr = server.addr();
        for (name, want) in [("a.test", 301), ("b.test", 200)] {
            let (r, log) = curl(
                &["--http2-prior-knowledge", "--resolve", &resolve(name, addr)],
                &format!("http://{name}:{}/index.html", addr.port()),
            );
            assert_eq!((r.version.as_str(), r.status), ("HTTP/2", want), "{log}");
            if want == 301 {
                assert_eq!(
                    r.must("location"),
                    format!("https://{name}:{port}/index.html")
                );
            }
        }
    }

    let client = ca.client(&[]);
    let tls = tls_addr(&server);
    for (sni, site, hsts) in [
        ("a.test", "a", "max-age=100"),
        ("b.test", "b", "max-age=200"),
        ("localhost", "default", "max-age=200"),
    ] {
        let r = Wire::tls(tls, &client, sni)
            .roundtrip(&format!("GET /index.html HTTP/1.1\r\nHost: {sni}\r\n\r\n"));
        assert_site(&r, site, &format!("TLS {sni}"));
        assert_eq!(
            r.header("strict-transport-security"),
            Some(hsts),
            "TLS {sni}: {r:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Observing
// ---------------------------------------------------------------------------

/// The per-site families: responses by class and body bytes counted to
/// the site that answered (labelled by its first name, lowercased), each
/// site's snapshot gauges, and `/status.json`'s `sites`; a file added
/// under one site's root rebuilds that site alone.
#[test]
fn metrics_count_requests_and_snapshots_per_site() {
    let roots = Roots::new("sites-metrics");
    for i in 0..3 {
        write_file(&roots.root("a"), &format!("extra/{i}.txt"), b"extra\n");
    }
    let config = roots.config(
        &TWO_SITES
            .replace(
                "root = \"BASE/default\"\n",
                "root = \"BASE/default\"\ncompress = false\n",
            )
            .replace("[\"a.test\", \"*.a.test\"]", "[\"A.Test\", \"*.a.test\"]"),
    );
    let server = Server::with_config(&config, &[]);
    let admin = server.admin_addr();

    for _ in 0..2 {
        assert_site(&get_host(&server, "a.test", "/index.html"), "a", "a");
    }
    assert_eq!(get_host(&server, "x.a.test", "/nope.txt").status, 404);
    for _ in 0..3 {
        let r = get_host(&server, "b.test", "/page.txt");
        assert_eq!((r.status, r.body_str()), (200, page("b")));
    }
    assert_site(&get_host(&server, "other.test", "/"), "default", "default");

    for (site, class, want) in [
        ("a.test", "2xx", 2.0),
        ("a.test", "4xx", 1.0),
        ("b.test", "2xx", 3.0),
        ("b.test", "4xx", 0.0),
        ("default", "2xx", 1.0),
        ("default", "4xx", 0.0),
    ] {
        await_value(admin, REQUESTS, &[("site", site), ("class", class)], want);
    }
    let b_bytes = 3 * page("b").len();
    let samples = await_value(admin, RESPONSE_BYTES, &[("site", "b.test")], b_bytes as f64);
    assert!(
        !has_site_label(&samples, REQUESTS, "A.Test"),
        "the label is the first name lowercased"
    );

    // Snapshot gauges: files and bytes of each root (no compressed variants).
    let file_bytes = |site: &str, extra: usize| {
        (index(site).len() + page(site).len() + extra * "extra\n".len()) as f64
    };
    for (site, files, bytes) in [
        ("default", 2.0, file_bytes("default", 0)),
        ("a.test", 5.0, file_bytes("a", 3)),
        ("b.test", 2.0, file_bytes("b", 0)),
    ] {
        assert_eq!(site_value(&samples, FILES, site, &[]), files, "{site}");
        assert_eq!(
            site_value(&samples, SNAPSHOT_BYTES, site, &[]),
            bytes,
            "{site}"
        );
        assert!(site_value(&samples, GENERATION, site, &[]) >= 1.0, "{site}");
    }

    // /status.json: every site, the default first, with the same figures.
    let (status, body) = admin_get(admin, "/status.json").expect("status.json");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("status.json is JSON");
    let sites = v["sites"].as_array().unwrap_or_else(|| panic!("{body}"));
    let labels: Vec<&str> = sites.iter().map(|s| s["site"].as_str().unwrap()).collect();
    assert_eq!(labels, ["default", "a.test", "b.test"], "{body}");
    for (s, requests) in sites.iter().zip([1, 3, 3]) {
        let site = s["site"].as_str().unwrap();
        assert_eq!(s["requests"], requests, "{site}: {body}");
        for (key, metric) in [
            ("files", FILES),
            ("generation", GENERATION),
            ("bytes", SNAPSHOT_BYTES),
        ] {
            assert_eq!(
                s[key].as_f64(),
                Some(site_value(&samples, metric, site, &[])),
                "{site} {key}: {body}"
            );
        }
    }
    assert_eq!(sites[2]["response_bytes"], b_bytes, "{body}");

    // A file added under a's root rebuilds a alone.
    let before = scrape(admin);
    write_file(&roots.root("a"), "new.txt", b"new in a\n");
    let mut last = None;
    let served = poll_until(DEADLINE, || {
        let r = get_host(&server, "a.test", "/new.txt");
        let done = r.status == 200 && r.body == b"new in a\n";
        last = Some(r);
        done
    });
    assert!(served, "a's new file not served: {last:?}");
    let after = await_value(admin, FILES, &[("site", "a.test")], 6.0);
    let grew = |metric: &str, site: &str, filter: &[(&str, &str)]| {
        site_value(&after, metric, site, filter) - site_value(&before, metric, site, filter)
    };
    assert!(grew(GENERATION, "a.test", &[]) >= 1.0, "a's generation");
    assert!(
        grew(REBUILDS, "a.test", &[("result", "success")]) >= 1.0,
        "a's rebuilds"
    );
    for site in ["default", "b.test"] {
        assert_eq!(grew(GENERATION, site, &[]), 0.0, "{site} was rebuilt");
        assert_eq!(
            grew(REBUILDS, site, &[("result", "success")]),
            0.0,
            "{site} was rebuilt"
        );
        assert_eq!(grew(FILES, site, &[]), 0.0, "{site}");
    }
    assert_eq!(get_host(&server, "b.test", "/new.txt").status, 404);
}

/// The access log names the site that answered: the `site` JSON field
/// (HTTP/1.1 and h2c; `default` for the top level), and a quoted last
/// field in `combined_timed` on a server with `[[sites]]` only.
#[test]
fn access_log_names_the_site() {
    let roots = Roots::new("sites-log");
    let json_log = roots.base().join("access.json");
    let json = Server::with_config(
        &roots.config_named("json.toml", TWO_SITES),
        &[
            "--access-log",
            json_log.to_str().unwrap(),
            "--access-log-format",
            "json",
        ],
    );
    let mut asks = vec![
        ("a.test", "?json-a", "a.test"),
        ("x.a.test", "?json-xa", "a.test"),
        ("b.test", "?json-b", "b.test"),
        ("other.test", "?json-default", "default"),
    ];
    for (host, query, _) in &asks {
        assert_eq!(
            get_host(&json, host, &format!("/page.txt{query}")).status,
            200
        );
    }
    if have("curl", "the site field over h2c") {
        let addr = json.addr();
        let (r, log) = curl(
            &[
                "--http2-prior-knowledge",
                "--resolve",
                &resolve("b.test", addr),
            ],
            &format!("http://b.test:{}/page.txt?json-h2-b", addr.port()),
        );
        assert_eq!((r.version.as_str(), r.status), ("HTTP/2", 200), "{log}");
        asks.push(("b.test", "?json-h2-b", "b.test"));
    }
    let lines = access_log::wait_for_lines(&json_log, asks.len());
    for (host, query, site) in &asks {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("/page.txt{query}\"")))
            .unwrap_or_else(|| panic!("no line for {query}: {lines:?}"));
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {e}: {line}"));
        assert_eq!(v["site"], *site, "Host {host}: {line}");
    }

    let timed_log = roots.base().join("timed.log");
    let timed = Server::with_config(
        &roots.config_named("timed.toml", TWO_SITES),
        &[
            "--access-log",
            timed_log.to_str().unwrap(),
            "--access-log-format",
            "combined_timed",
        ],
    );
    let plain_log = roots.base().join("plain-timed.log");
    let no_sites = Server::with_config(
        &roots.config_named("none.toml", "root = \"BASE/default\"\n"),
        &[
            "--access-log",
            plain_log.to_str().unwrap(),
            "--access-log-format",
            "combined_timed",
        ],
    );
    for (host, query) in [("a.test", "?ct-a"), ("other.test", "?ct-default")] {
        assert_eq!(
            get_host(&timed, host, &format!("/page.txt{query}")).status,
            200
        );
    }
    assert_eq!(
        get_host(&no_sites, "a.test", "/page.txt?ct-none").status,
        200
    );
    let lines = access_log::wait_for_lines(&timed_log, 2);
    for (query, site) in [("?ct-a", "a.test"), ("?ct-default", "default")] {
        let line = lines
            .iter()
            .find(|l| l.contains(query))
            .unwrap_or_else(|| panic!("no line for {query}: {lines:?}"));
        let (rest, last) = line.rsplit_once(' ').unwrap();
        assert_eq!(last, format!("\"{site}\""), "{line}");
        let msec = rest.rsplit(' ').next().unwrap();
        assert!(
            msec.contains('.') && msec.parse::<f64>().is_ok(),
            "the site follows the msec field: {line}"
        );
    }
    let lines = access_log::wait_for_lines(&plain_log, 1);
    let msec = lines[0].rsplit(' ').next().unwrap();
    assert!(
        msec.contains('.') && msec.parse::<f64>().is_ok(),
        "no site field without [[sites]]: {}",
        lines[0]
    );
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// `--check` with `config` (and `extra` flags): exit code, stdout, stderr.
fn check(config: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = command()
        .arg("--config")
        .arg(config)
        .args(extra)
        .arg("--check")
        .output()
        .expect("run --check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines of `--check`'s stdout after its `configuration ok:` line.
fn after_ok_line(stdout: &str) -> Vec<&str> {
    let mut lines = stdout.lines();
    assert!(
        lines.any(|l| l.starts_with("configuration ok:")),
        "no `configuration ok:` line: {stdout}"
    );
    lines.collect()
}

/// `--check` lists each site (its label, names and root) after the
/// `configuration ok:` line, then what an unknown host gets, from the file
/// or from `--unknown-host`; sites that bring their own certificates need
/// no top-level one.
#[test]
fn check_lists_the_sites_and_what_unknown_hosts_get() {
    let roots = Roots::new("sites-check");
    let base = roots.base().display().to_string();
    let config = roots.config(&TWO_SITES.replace("[\"a.test\",", "[\"A.test\","));
    let sites = [
        format!("site a.test: names a.test *.a.test, root {base}/a"),
        format!("site b.test: names b.test, root {base}/b"),
    ];
    for (extra, unknown) in [
        (&[][..], "unknown hosts: the default site (root) answers"),
        (
            &["--unknown-host", "421"][..],
            "unknown hosts: 421 Misdirected Request",
        ),
        (
            &["--unknown-host", "404"][..],
            "unknown hosts: 404 Not Found",
        ),
    ] {
        let (code, stdout, stderr) = check(&config, extra);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        assert_eq!(
            after_ok_line(&stdout),
            [sites[0].as_str(), sites[1].as_str(), unknown],
            "{extra:?}: {stdout}"
        );
    }
    let from_file = roots.config_named("404.toml", &format!("unknown_host = \"404\"\n{TWO_SITES}"));
    let (code, stdout, stderr) = check(&from_file, &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(
        after_ok_line(&stdout).last(),
        Some(&"unknown hosts: 404 Not Found")
    );

    // Without [[sites]] there is nothing to list.
    let single = roots.config_named("single.toml", "root = \"BASE/default\"\n");
    let (code, stdout, stderr) = check(&single, &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(after_ok_line(&stdout).is_empty(), "{stdout}");

    // Certificates from the sites alone.
    let ca = Ca::new();
    let a = ca.leaf(roots.base(), "a", &["a.test"]);
    let b = ca.leaf(roots.base(), "b", &["b.test"]);
    let tls = roots.config_named(
        "tls.toml",
        &format!(
            "root = \"BASE/default\"\ntls_listen = \"127.0.0.1:0\"\n\
             [[sites]]\nnames = \"a.test\"\nroot = \"BASE/a\"\ntls_cert = {:?}\ntls_key = {:?}\n\
             [[sites]]\nnames = \"b.test\"\nroot = \"BASE/b\"\ntls_cert = {:?}\ntls_key = {:?}\n",
            a.cert, a.key, b.cert, b.key
        ),
    );
    let (code, stdout, stderr) = check(&tls, &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// Runs the server itself (not `--check`) on `config`; it must exit with
/// `want` before listening. Its stderr.
fn refused_at_start(config: &Path, want: i32) -> String {
    let mut child = command()
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn shardhttpd");
    let mut status = None;
    poll_until(Duration::from_secs(10), || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("shardhttpd started on a bad config {}", config.display());
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(want), "{stderr}");
    stderr
}

/// A name claimed by two sites (whatever its case) and a site without
/// `root` or `names` are refused with exit status 2, by `--check` and at
/// start, naming the file, the line where it can, and the key.
#[test]
fn config_errors_name_the_file_line_and_site_key() {
    let roots = Roots::new("sites-errors");
    let twice = roots.config_named(
        "twice.toml",
        "root = \"BASE/default\"\n\
         [[sites]]\n\
         names = \"a.test\"\n\
         root = \"BASE/a\"\n\
         [[sites]]\n\
         names = [\"b.test\", \"A.test\"]\n\
         root = \"BASE/b\"\n",
    );
    let want = format!(
        "config file {}, line 6: key `sites[1].names`: `A.test` is claimed twice (also by sites[0])",
        twice.display()
    );
    let (code, stdout, stderr) = check(&twice, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains(&want), "want {want:?} in {stderr}");
    assert!(refused_at_start(&twice, 2).contains(&want));

    let wild_twice = roots.config_named(
        "wild.toml",
        "root = \"BASE/default\"\n\
         [[sites]]\n\
         names = [\"a.test\", \"*.a.test\"]\n\
         root = \"BASE/a\"\n\
         [[sites]]\n\
         names = \"*.A.test\"\n\
         root = \"BASE/b\"\n",
    );
    let (code, stdout, stderr) = check(&wild_twice, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("line 6: key `sites[1].names`")
            && stderr.contains("`*.A.test` is claimed twice (also by sites[0])"),
        "{stderr}"
    );

    let no_root = roots.config_named(
        "no-root.toml",
        "root = \"BASE/default\"\n[[sites]]\nnames = \"a.test\"\n",
    );
    let (code, stdout, stderr) = check(&no_root, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    for part in [
        &format!(
            "config file {}, line 2: key `sites[0].root`",
            no_root.display()
        ),
        "needs `root`",
    ] {
        assert!(stderr.contains(part), "want {part:?} in {stderr}");
    }
    assert!(refused_at_start(&no_root, 2).contains("key `sites[0].root`"));

    let no_names = roots.config_named(
        "no-names.toml",
        "root = \"BASE/default\"\n[[sites]]\nroot = \"BASE/a\"\n",
    );
    let (code, stdout, stderr) = check(&no_names, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("key `sites[0].names`") && stderr.contains("needs `names`"),
        "{stderr}"
    );

    let gone_root = roots.config_named(
        "gone-root.toml",
        "root = \"BASE/default\"\n[[sites]]\nnames = \"a.test\"\nroot = \"BASE/nowhere\"\n",
    );
    let (code, stdout, stderr) = check(&gone_root, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("line 4: key `sites[0].root`") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------
// Deploys and reloads
// ---------------------------------------------------------------------------

/// Keep-alive clients asking one site for its files back to back until
/// stopped; every answer must be 200 with the whole file. No request is
/// retried: a failed one is recorded and the client reconnects.
struct SiteLoad {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl SiteLoad {
    fn start(addr: SocketAddr, host: &str, clients: usize, files: Vec<(String, Vec<u8>)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let files = Arc::new(files);
        let threads = (0..clients)
            .map(|t| {
                let (stop, sent, failures, files) = (
                    Arc::clone(&stop),
                    Arc::clone(&sent),
                    Arc::clone(&failures),
                    Arc::clone(&files),
                );
                let host = host.to_owned();
                thread::spawn(move || {
                    let mut i = t;
                    let mut conn: Option<Conn> = None;
                    while !stop.load(Ordering::Relaxed) {
                        let c = match &mut conn {
                            Some(c) => c,
                            None => match Conn::try_connect(addr) {
                                Ok(c) => conn.insert(c),
                                Err(e) => {
                                    failures.lock().unwrap().push(format!("connect: {e}"));
                                    continue;
                                }
                            },
                        };
                        let (path, want) = &files[i % files.len()];
                        i += 1;
                        sent.fetch_add(1, Ordering::Relaxed);
                        let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
                        let answer = c
                            .try_send(raw.as_bytes())
                            .map_err(|e| format!("send: {e}"))
                            .and_then(|()| c.read_response().map_err(|e| e.to_string()));
                        match answer {
                            Ok(r) if r.status == 200 && r.body == *want => {
                                if r.says_close() {
                                    conn = None;
                                }
                            }
                            Ok(r) => {
                                failures.lock().unwrap().push(format!(
                                    "GET {path}: {} with {} of {} bytes",
                                    r.status,
                                    r.body.len(),
                                    want.len()
                                ));
                                conn = None;
                            }
                            Err(e) => {
                                failures.lock().unwrap().push(format!("GET {path}: {e}"));
                                conn = None;
                            }
                        }
                    }
                })
            })
            .collect();
        SiteLoad {
            stop,
            sent,
            failures,
            threads,
        }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops the clients: the requests sent and the failures.
    fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("load thread panicked");
        }
        let sent = self.sent.load(Ordering::Relaxed);
        let failures = std::mem::take(&mut *self.failures.lock().unwrap());
        (sent, failures)
    }
}

/// A release of site a: `a-releases/<n>/` with an `index.html` naming it
/// and enough files that building its snapshot takes a moment.
fn release(base: &Path, n: u32) {
    let dir = base.join("a-releases").join(n.to_string());
    write_file(
        &dir,
        "index.html",
        format!("<p>a release {n}</p>\n").as_bytes(),
    );
    for i in 0..100 {
        write_file(
            &dir,
            &format!("files/{i}.txt"),
            format!("{n}/{i}\n").as_bytes(),
        );
    }
}

/// Rename deploys of site a in [`a_deploy_in_one_site_fails_no_request_of_another_under_load`].
const DEPLOYS: u32 = 8;

/// Points `base/a-current` at release `n`: a new link renamed over the old
/// one, as deploy tools do.
fn switch(base: &Path, n: u32) {
    let tmp = base.join("a-current.tmp");
    let _ = fs::remove_file(&tmp);
    symlink(Path::new("a-releases").join(n.to_string()), &tmp).unwrap();
    fs::rename(&tmp, base.join("a-current")).unwrap();
}

/// Rename deploys in site a (a new release written aside, the root's link
/// renamed over) while keep-alive clients load site b: every one of b's
/// requests gets its whole file, each release of a is served, and only
/// a's snapshot is rebuilt.
#[test]
fn a_deploy_in_one_site_fails_no_request_of_another_under_load() {
    let roots = Roots::new("sites-deploy");
    let base = roots.base();
    release(base, 0);
    switch(base, 0);
    let big: Vec<u8> = (0..300 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write_file(&roots.root("b"), "big.bin", &big);
    let config = roots.config(&TWO_SITES.replace("BASE/a\"", "BASE/a-current\""));
    let server = Server::with_config(&config, &[]);
    let admin = server.admin_addr();
    assert_eq!(
        get_host(&server, "a.test", "/").body_str(),
        "<p>a release 0</p>\n"
    );
    let before = scrape(admin);

    let load = SiteLoad::start(
        server.addr(),
        "b.test",
        2,
        vec![
            ("/big.bin".to_owned(), big),
            ("/index.html".to_owned(), index("b").into_bytes()),
            ("/page.txt".to_owned(), page("b").into_bytes()),
        ],
    );
    assert!(
        poll_until(DEADLINE, || load.sent() >= 20),
        "the load on b does not run"
    );
    let sent_before = load.sent();
    for n in 1..=DEPLOYS {
        release(base, n);
        switch(base, n);
        let want = format!("<p>a release {n}</p>\n");
        let mut last = None;
        let ok = poll_until(DEADLINE, || {
            let r = get_host(&server, "a.test", "/");
            let done = r.status == 200 && r.body_str() == want;
            last = Some(r);
            done
        });
        assert!(
            ok,
            "release {n} of a not served: {last:?}\n{}",
            server.log_text()
        );
        let r = get_host(&server, "a.test", "/files/7.txt");
        assert_eq!(
            r.body_str(),
            format!("{n}/7\n"),
            "a's files are release {n}'s"
        );
    }
    assert!(
        poll_until(DEADLINE, || load.sent() >= sent_before + 20),
        "the load on b stalled during the deploys"
    );
    let (sent, failures) = load.stop();
    eprintln!("site b under load: {sent} requests during {DEPLOYS} deploys of a");
    assert!(
        failures.is_empty(),
        "{} of {sent} requests to b failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );

    let after = scrape(admin);
    let grew = |site: &str| {
        site_value(&after, GENERATION, site, &[]) - site_value(&before, GENERATION, site, &[])
    };
    assert!(
        grew("a.test") >= 5.0,
        "a's generation grew by {}",
        grew("a.test")
    );
    assert_eq!(grew("b.test"), 0.0, "b's snapshot was rebuilt");
    assert_eq!(grew("default"), 0.0, "the default snapshot was rebuilt");
}

/// `shardhttpd_config_reloads_total{result}` now.
fn reloads(admin: SocketAddr, result: &str) -> f64 {
    sum(
        &scrape(admin),
        "shardhttpd_config_reloads_total",
        &[("result", result)],
    )
}

/// SIGHUP with a config that adds a site and removes another hands over
/// to a new process that serves the added name and lets the removed one
/// fall to `unknown_host`; an edit that breaks a site (its root gone) is
/// refused, naming the site's key, and the running sites keep serving from
/// the same process.
#[test]
fn sighup_adds_and_removes_sites_and_refuses_a_broken_one() {
    let roots = Roots::new("sites-reload");
    roots.add("c");
    let file = roots.config(TWO_SITES);
    let server = Server::with_config(&file, &[]);
    let successors = Successors::default();
    let (admin, first) = (server.admin_addr(), server.pid());
    assert_site(
        &get_host(&server, "b.test", "/"),
        "b",
        "b before the reload",
    );
    assert_site(&get_host(&server, "c.test", "/"), "default", "c before");

    let added_c = TWO_SITES
        .replace("names = \"b.test\"", "names = \"c.test\"")
        .replace("BASE/b", "BASE/c");
    roots.config(&added_c);
    signal(first, "HUP");
    assert!(
        poll_until(DEADLINE, || process_gone(first)),
        "the old process hands over and exits\n{}",
        server.log_text()
    );
    let new = status_pid(admin).expect("status.json after the reload");
    successors.push(new);
    assert_ne!(new, first);
    assert_site(&get_host(&server, "c.test", "/"), "c", "the added site");
    assert_site(
        &get_host(&server, "b.test", "/"),
        "default",
        "the removed site's name falls to the default site",
    );
    assert_site(
        &get_host(&server, "x.a.test", "/"),
        "a",
        "a after the reload",
    );
    let samples = await_value(
        admin,
        REQUESTS,
        &[("site", "c.test"), ("class", "2xx")],
        1.0,
    );
    assert!(
        !has_site_label(&samples, REQUESTS, "b.test"),
        "the removed site has no series left"
    );

    // A broken edit: a new site whose root does not exist.
    roots.config(&format!(
        "{added_c}\n[[sites]]\nnames = \"d.test\"\nroot = \"BASE/nowhere\"\n"
    ));
    let invalid = reloads(admin, "invalid");
    signal(new, "HUP");
    assert!(
        poll_until(DEADLINE, || reloads(admin, "invalid") == invalid + 1.0),
        "the broken edit is counted as invalid\n{}",
        server.log_text()
    );
    let refused = server
        .wait_for_log("reload refused", DEADLINE)
        .unwrap_or_else(|| panic!("no refusal logged\n{}", server.log_text()));
    assert!(refused.contains("sites[2].root"), "{refused}");
    assert_eq!(status_pid(admin), Some(new), "no handover");
    assert!(!process_gone(new));
    assert_site(
        &get_host(&server, "c.test", "/"),
        "c",
        "c after the refusal",
    );
    assert_site(
        &get_host(&server, "a.test", "/"),
        "a",
        "a after the refusal",
    );
    assert_site(
        &get_host(&server, "d.test", "/"),
        "default",
        "d was not added",
    );
}
