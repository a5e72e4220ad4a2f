//! h2spec, the HTTP/2 conformance suite (146 cases: RFC 9113 framing,
//! streams, flow control and HTTP semantics, RFC 7541 HPACK), against the
//! server over h2c (`--h2c-only`) and over TLS, in normal and `--strict`
//! mode: every case must pass. On a listener that speaks HTTP/1.1 beside
//! h2c (the default) all but one must (see [`H2C_HTTP1_FIRST`]). h2spec is built by `tests/h2/build-h2spec.sh` (CI puts it in
//! `.ci/bin`); without it these tests skip loudly.

use crate::support;

use std::process::Command;

use support::h2;
use support::tls::{Ca, TlsServer};
use support::*;

/// h2spec 2.6's case count; `--strict` adds one (a strict-only case).
const CASES: u32 = 146;
const STRICT_CASES: u32 = 147;

/// The one case a cleartext listener that speaks HTTP/1.1 first cannot
/// pass: h2spec's "invalid connection preface" is `INVALID CONNECTION
/// PREFACE\r\n\r\n`, which is no HTTP/2 preface and so an HTTP/1 request
/// line, answered with HTTP/1's 400 (RFC 9112 §3; `errors.rs` requires it
/// for garbage), which h2spec cannot read as a frame. h2o fails it on h2c
/// too. Over TLS, where ALPN says h2, and on an `--h2c-only` listener, the
/// case passes.
const H2C_HTTP1_FIRST: &str = "http2/3.5 Sends invalid connection preface";
fn h2spec_or_skip() -> Option<std::path::PathBuf> {
    let bin = h2::h2spec();
    if bin.is_none() {
        loud(
            "SKIP: h2spec not found ($H2SPEC, PATH, .ci/bin/h2spec): \
             tests/h2/build-h2spec.sh builds it",
        );
    }
    bin
}

/// Runs h2spec against `port` and asserts every case passed, listing the
/// failed ones (from its JUnit report) otherwise.
fn assert_conformant(
    bin: &std::path::Path,
    server: &Server,
    port: u16,
    tls: bool,
    strict: bool,
    beside_http1: bool,
) {
    let allowed: &[&str] = if beside_http1 {
        &[H2C_HTTP1_FIRST]
    } else {
        &[]
    };
    let dir = TempDir::new("h2spec");
    let junit = dir.path().join("junit.xml");
    let mut cmd = Command::new(bin);
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-o", "5"])
        .arg("-j")
        .arg(&junit);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    if strict {
        cmd.arg("--strict");
    }
    let out = cmd.output().expect("run h2spec");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mode = format!(
        "{}{}",
        if tls { "TLS" } else { "h2c" },
        if strict { " --strict" } else { "" }
    );
    let summary = h2::parse_h2spec_summary(&text)
        .unwrap_or_else(|| panic!("h2spec ({mode}) printed no summary:\n{text}"));
    let failures = std::fs::read_to_string(&junit)
        .map(|x| h2::junit_failures(&x))
        .unwrap_or_default();
    let cases = if strict { STRICT_CASES } else { CASES };
    let excused = failures
        .iter()
        .filter(|f| allowed.iter().any(|a| f.starts_with(a)))
        .count() as u32;
    if excused > 0 {
        loud(&format!(
            "h2spec {mode}: {excused} case failed as expected: {H2C_HTTP1_FIRST} (an HTTP/1 400)"
        ));
    }
    assert!(
        summary.total == cases && summary.passed + excused == cases && summary.failed == excused,
        "h2spec {mode}: {summary:?}; failed cases:\n  {}\n---- h2spec output (tail) ----\n{}\n{}",
        failures.join("\n  "),
        text.lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
        server.log_text()
    );
    // h2spec exits 1 when any case failed, the excused one included.
    assert!(
        out.status.success() || excused > 0 && out.status.code() == Some(1),
        "h2spec {mode} exited {}",
        out.status
    );
}

/// h2spec on a cleartext listener: `--h2c-only` (every case), or beside
/// HTTP/1.1 (the default: all but [`H2C_HTTP1_FIRST`]).
fn h2c(strict: bool, only: bool) {
    let Some(bin) = h2spec_or_skip() else {
        return;
    };
    let site = Site::new("h2spec-h2c");
    let flags: &[&str] = if only { &["--h2c-only", "true"] } else { &[] };
    let server = Server::start(&site.root, flags);
    let port = server.plain_addr().port();
    assert_conformant(&bin, &server, port, false, strict, !only);
    // Still serving afterwards (HTTP/1.1 where the listener speaks it).
    if !only {
        assert_eq!(server.get("/index.html").status, 200);
    }
}

fn tls(strict: bool) {
    let Some(bin) = h2spec_or_skip() else {
        return;
    };
    let site = Site::new("h2spec-tls");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let s = TlsServer::start(&site.root, &ca, &leaf, &[]);
    assert_conformant(&bin, &s.server, s.tls_addr.port(), true, strict, false);
    assert_eq!(s.server.get("/index.html").status, 200);
}

#[test]
fn h2spec_h2c() {
    h2c(false, true);
}

#[test]
fn h2spec_h2c_strict() {
    h2c(true, true);
}

#[test]
fn h2spec_h2c_beside_http1() {
    h2c(false, false);
}

#[test]
fn h2spec_tls() {
    tls(false);
}

#[test]
fn h2spec_tls_strict() {
    tls(true);
}

#[test]
fn summary_and_junit_parsers() {
    let text = "Finished in 1.2 seconds\n146 tests, 140 passed, 1 skipped, 5 failed\n";
    assert_eq!(
        h2::parse_h2spec_summary(text),
        Some(h2::H2specSummary {
            total: 146,
            passed: 140,
            skipped: 1,
            failed: 5
        })
    );
    assert_eq!(h2::parse_h2spec_summary("no summary here"), None);
    let xml = r#"<testsuites><testsuite name="x"><testcase package="http2/5.1" classname="Sends a HEADERS frame" time="0.01"><failure message="">Expected: GOAWAY&#xA;Actual: DATA</failure></testcase><testcase package="http2/6.1" classname="ok" time="0.01"></testcase></testsuite></testsuites>"#;
    assert_eq!(
        h2::junit_failures(xml),
        ["http2/5.1 Sends a HEADERS frame: Expected: GOAWAY\nActual: DATA"]
    );
}
