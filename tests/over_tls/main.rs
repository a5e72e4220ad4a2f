//! The whole HTTP behaviour over TLS: the semantics (with ranges and
//! conditionals), compression, pipelining and error suites, compiled a
//! second time here and run unchanged over TLS.
//!
//! In this crate the harness's transport is TLS (`support::transport`):
//! every server a suite starts gets a TLS listener, and its `addr()` is a
//! local front that turns each connection into a TLS connection to it, so
//! every request, pipeline, slow read and close these suites check crosses
//! the server's TLS transport. The suites themselves run over cleartext in
//! the `it` test binary. `SHARDHTTPD_TEST_TRANSPORT=tls cargo test --test it
//! NAME::` runs any other suite over TLS the same way.

#[path = "../support/mod.rs"]
mod support;

#[path = "../it/compression.rs"]
mod compression;
#[path = "../it/errors.rs"]
mod errors;
#[path = "../it/http_semantics.rs"]
mod http_semantics;
#[path = "../it/pipelining.rs"]
mod pipelining;

use support::tls::Transport;
use support::*;

/// The suites above really run over TLS: the front's connections are the
/// server's TLS handshakes, and every answer is logged with a TLS version.
#[test]
fn requests_in_this_crate_cross_the_tls_listener() {
    assert_eq!(transport::selected(), Transport::Tls);
    let site = Site::new("over-tls-check");
    let log = site.base().join("access.json");
    let log_s = log.display().to_string();
    let server = Server::start(
        &site.root,
        &["--access-log", &log_s, "--access-log-format", "json"],
    );
    let front = server.front().expect("a TLS front over TLS");
    assert_ne!(server.addr(), server.plain_addr());
    let mut conn = server.connect();
    for _ in 0..3 {
        let r = conn.roundtrip(&get("/index.html"));
        assert_eq!(r.status, 200);
        assert_eq!(r.body, INDEX_HTML);
    }
    assert_eq!(server.get("/nope").status, 404);
    assert_eq!(front.handshakes(), 2);
    metrics::await_value(
        server.admin_addr(),
        "shardhttpd_tls_handshakes_total",
        &[],
        2.0, // full, then resumed with the first one's ticket
    );
    metrics::await_value(
        server.admin_addr(),
        "shardhttpd_tls_handshakes_total",
        &[("result", "failed")],
        0.0,
    );
    let mut lines = Vec::new();
    assert!(
        poll_until(std::time::Duration::from_secs(5), || {
            lines = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            lines.len() >= 4
        }),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 4, "{lines:?}");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(
            v["tls_version"].as_str().unwrap().starts_with("TLSv1."),
            "{line}"
        );
    }
}
