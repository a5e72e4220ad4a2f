//! What an origin tells the caches in front of it, checked directly against
//! the server (the same behaviour through real nginx and Varnish is in
//! `behind_caches.rs`): `Vary` from a compressible file's first response
//! and capped freshness during a large root's fast start, stale sidecars
//! rejected and counted, `Cache-Control` on errors and redirects, and the
//! start-up warning for files no `cache_control` rule covers.

use crate::support;

use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

use support::caches::{incompressible_filler, prose};
use support::*;

fn start_with(site: &Site, toml: &str, extra: &[&str]) -> Server {
    let conf = write_file(site.base(), "origin.toml", toml.as_bytes());
    let conf = conf.display().to_string();
    let mut args = vec!["--config", conf.as_str()];
    args.extend_from_slice(extra);
    Server::start(&site.root, &args)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// One sample of the admin endpoint's `/metrics`, by name and a label
/// fragment (`reason="older"`).
fn metric(server: &Server, name: &str, labels: &str) -> Option<f64> {
    let mut c = Conn::connect(server.admin_addr());
    let r = c.roundtrip(&get("/metrics"));
    r.body_str()
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

fn text(lines: usize, tag: &str) -> Vec<u8> {
    (0..lines)
        .map(|i| format!("{tag} line {i:06}: compressible words repeat here\n"))
        .collect::<String>()
        .into_bytes()
}

/// 14.1: during the fast start a compressible file already says
/// `Vary: Accept-Encoding`, with its freshness capped; once the variants
/// exist it keeps `Vary` and gets its configured lifetime back.
#[test]
fn fast_start_serves_compressible_files_with_vary_and_capped_freshness() {
    let site = Site::new("fast-start-vary");
    // Under the 1 MiB sendfile threshold (in memory, so it gets variants),
    // and slow enough to compress at brotli 11 to keep the window open.
    let doc = prose(1, 600_000);
    site.write("doc.html", &doc);
    incompressible_filler(&site.root);
    let server = start_with(
        &site,
        "[cache_control]\n\"*.html\" = \"public, max-age=31536000, immutable\"\n\
         \"*.png\" = \"public, max-age=600\"\n",
        &["--fast-start-max-age", "7"],
    );
    server
        .wait_for_log("building compressed variants", Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no fast start\n{}", server.log_text()));
    let r = server.send(&request("GET", "/doc.html", &[("Accept-Encoding", "br")]));
    let ready = |s: &Server| {
        s.log_lines()
            .iter()
            .any(|l| l.contains("compressed variants ready"))
    };
    assert!(
        !ready(&server),
        "the variants were built before the first request; the window was not observed"
    );
    assert_eq!(r.header("content-encoding"), None, "{r:?}");
    assert_eq!(r.body, doc);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{r:?}");
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=7"),
        "{r:?}"
    );
    // Not compressible: no Vary, its own lifetime.
    let png = server.get("/filler/00.png");
    assert_eq!(png.header("vary"), None);
    assert_eq!(png.header("cache-control"), Some("public, max-age=600"));

    let done = server.wait_for_log("compressed variants ready", Duration::from_secs(300));
    assert!(done.is_some(), "{}", server.log_text());
    let r = server.send(&request("GET", "/doc.html", &[("Accept-Encoding", "br")]));
    assert_eq!(r.header("content-encoding"), Some("br"), "{r:?}");
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let identity = server.get("/doc.html");
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"));
    assert_eq!(identity.body, doc);
}

/// 14.2: a sidecar older than its source, or decoding to other bytes, is
/// not used; each rejection is logged once and counted.
#[test]
fn stale_and_mismatching_sidecars_are_rejected_logged_and_counted() {
    let site = Site::new("stale-sidecar");
    let old = text(300, "old");
    let new = text(300, "new");
    let source = site.write("doc.txt", &old);
    let sidecar = site.write("doc.txt.gz", &gzip(&old));
    set_mtime(&source, SystemTime::now() - Duration::from_secs(3600));
    set_mtime(&sidecar, SystemTime::now() - Duration::from_secs(1800));
    // Without compression the sidecar is the only gzip there is.
    let server = Server::start(&site.root, &["--compress", "false"]);
    let gz = [("Accept-Encoding", "gzip")];
    let r = server.send(&request("GET", "/doc.txt", &gz));
    assert_eq!(
        r.header("content-encoding"),
        Some("gzip"),
        "sidecar in use: {r:?}"
    );
    assert_eq!(r.body, gzip(&old));
    assert_eq!(
        metric(&server, "shardhttpd_sidecar_rejected_total", "older"),
        Some(0.0)
    );

    // The source is rewritten; the sidecar is left behind.
    write_file(&site.root, "doc.txt", &new);
    assert!(poll_until(Duration::from_secs(10), || server
        .get("/doc.txt")
        .body
        == new));
    let r = server.send(&request("GET", "/doc.txt", &gz));
    assert_eq!(
        r.header("content-encoding"),
        None,
        "stale sidecar served: {r:?}"
    );
    assert_eq!(r.body, new);
    assert_eq!(r.header("vary"), None, "no variant left");
    let warned = |s: &Server| {
        s.log_lines()
            .iter()
            .filter(|l| l.contains("sidecar is older than its source"))
            .count()
    };
    assert_eq!(warned(&server), 1, "{}", server.log_text());
    assert_eq!(
        metric(&server, "shardhttpd_sidecar_rejected_total", "older"),
        Some(1.0)
    );
    // An unrelated change rebuilds; the rejection is neither logged nor
    // counted again.
    site.write("other.txt", b"other\n");
    assert!(poll_until(Duration::from_secs(10), || server
        .get("/other.txt")
        .status
        == 200));
    assert_eq!(warned(&server), 1, "{}", server.log_text());
    assert_eq!(
        metric(&server, "shardhttpd_sidecar_rejected_total", "older"),
        Some(1.0)
    );

    // Touched after the source but still the old text: decoded, compared,
    // rejected.
    write_file(&site.root, "doc.txt.gz", &gzip(&old));
    assert!(poll_until(Duration::from_secs(10), || {
        metric(&server, "shardhttpd_sidecar_rejected_total", "mismatch") == Some(1.0)
    }));
    let r = server.send(&request("GET", "/doc.txt", &gz));
    assert_eq!(r.body, new, "{r:?}");
    // A sidecar that matches is used again.
    write_file(&site.root, "doc.txt.gz", &gzip(&new));
    assert!(poll_until(Duration::from_secs(10), || {
        server
            .send(&request("GET", "/doc.txt", &gz))
            .header("content-encoding")
            == Some("gzip")
    }));
    let r = server.send(&request("GET", "/doc.txt", &gz));
    assert_eq!(gunzip(&r.body), new);
}

/// 14.4: `error_cache_control` by status and class, on the plain-text
/// errors and on error pages; `redirect_cache_control` on the 301; never on
/// answers that depend on request headers caches do not key on.
#[test]
fn errors_and_redirects_carry_their_configured_cache_control() {
    let site = Site::new("error-cache-control");
    site.write("empty/keep.txt", b"x");
    let server = start_with(
        &site,
        "redirect_cache_control = \"public, max-age=3600\"\n\
         error_cache_control = { 404 = \"public, max-age=10\", \"4xx\" = \"public, max-age=5\", \
         \"5xx\" = \"no-store\" }\n",
        &[],
    );
    let r = server.get("/missing.txt");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=10"),
        "{r:?}"
    );
    assert_common_headers(&r, "GET");
    let head = server.send(&request("HEAD", "/missing.txt", &[]));
    assert_eq!(head.header("cache-control"), Some("public, max-age=10"));
    // A directory without an index: 403, from the class.
    let r = server.get("/empty/");
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=5"),
        "{r:?}"
    );
    let r = server.get("/dir");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/dir/"));
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=3600"),
        "{r:?}"
    );
    let r = server.send(&request("GET", "/digits.txt", &[("Range", "bytes=500-")]));
    assert_eq!(r.status, 416);
    assert_eq!(r.header("cache-control"), None, "{r:?}");
    let r = server.send(&request("POST", "/digits.txt", &[]));
    assert_eq!(r.status, 405);
    assert_eq!(r.header("cache-control"), None, "{r:?}");
    // A file's own head is unchanged.
    assert_eq!(server.get("/digits.txt").header("cache-control"), None);
    drop(server);

    // The same through a 404 page.
    site.write("404.html", b"<h1>lost</h1>");
    let server = start_with(
        &site,
        "error_cache_control = { 404 = \"public, max-age=10\" }\n",
        &[],
    );
    let r = server.get("/nope");
    assert_eq!((r.status, r.body.as_slice()), (404, &b"<h1>lost</h1>"[..]));
    assert_eq!(
        r.header("cache-control"),
        Some("public, max-age=10"),
        "{r:?}"
    );
    assert_eq!(server.get("/dir").header("cache-control"), None);
}

/// 14.4: a status whose answer depends on request headers is refused.
#[test]
fn error_cache_control_for_request_dependent_statuses_is_refused() {
    let site = Site::new("error-cache-control-bad");
    let conf = write_file(
        site.base(),
        "bad.toml",
        b"error_cache_control = { 416 = \"max-age=60\" }\n",
    );
    let out = command()
        .arg("--root")
        .arg(&site.root)
        .arg("--config")
        .arg(&conf)
        .arg("--check")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("error_cache_control") && err.contains("416"),
        "{err}"
    );
}

const NO_RULE_WARNING: &str = "files without a Cache-Control rule";

/// 14.5: with no rule for some files and no default, the start-up log says
/// so once; a default or rules covering every file keep it quiet.
#[test]
fn a_path_no_cache_control_rule_covers_is_warned_about_once() {
    let site = Site::new("no-rule-warning");
    let server = Server::start(&site.root, &[]);
    let line = server
        .wait_for_log(NO_RULE_WARNING, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no warning\n{}", server.log_text()));
    assert!(line.contains("WARN"), "{line}");
    assert_eq!(log_field(&line, "files"), Some("7"), "{line}");
    // A rebuild does not repeat it.
    server.signal("HUP");
    site.write("new.txt", b"new\n");
    assert!(poll_until(Duration::from_secs(10), || server
        .get("/new.txt")
        .status
        == 200));
    let count = server
        .log_lines()
        .iter()
        .filter(|l| l.contains(NO_RULE_WARNING))
        .count();
    assert_eq!(count, 1, "{}", server.log_text());
    drop(server);

    let server = Server::start(
        &site.root,
        &["--cache-control-default", "public, max-age=60"],
    );
    assert!(server
        .wait_for_log("listening", Duration::from_secs(5))
        .is_some());
    assert!(!server.log_text().contains(NO_RULE_WARNING));
    drop(server);
    let server = start_with(&site, "[cache_control]\n\"**\" = \"no-cache\"\n", &[]);
    assert!(!server.log_text().contains(NO_RULE_WARNING));
}

/// 14.5: the shipped example configuration is an origin policy: hashed
/// assets immutable, HTML revalidated, a short default with
/// stale-while-revalidate / stale-if-error, and Cache-Control on 404s.
#[test]
fn the_example_config_ships_an_origin_policy() {
    let site = Site::new("deploy-policy");
    site.write("assets/app.3f2a9c1b.js", b"console.log(1)\n");
    let config = repo().join("deploy/shardhttpd.toml");
    let config = config.display().to_string();
    let server = Server::start(
        &site.root,
        &[
            "--config",
            &config,
            "--listen",
            "127.0.0.1:0",
            "--cores",
            "1",
        ],
    );
    let cc = |path: &str| server.get(path).header("cache-control").map(str::to_owned);
    assert_eq!(
        cc("/assets/app.3f2a9c1b.js").as_deref(),
        Some("public, max-age=31536000, immutable")
    );
    let html = cc("/index.html").unwrap();
    assert!(html.contains("no-cache"), "{html}");
    let other = cc("/style.css").unwrap();
    assert!(
        other.contains("max-age=")
            && other.contains("stale-while-revalidate")
            && other.contains("stale-if-error"),
        "{other}"
    );
    let missing = server.get("/missing");
    assert!(missing.header("cache-control").is_some(), "{missing:?}");
    assert!(!server.log_text().contains(NO_RULE_WARNING));
}
