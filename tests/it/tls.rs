//! HTTPS: the whole HTTP behaviour over TLS (every case answered the same
//! over both transports), pipelining in one TLS batch, large files through
//! the verified copy, protocol and ALPN policy, session resumption across
//! shards, close_notify, metrics and the JSON access log; plus real clients
//! (curl, openssl s_client) when installed. Certificates: `tls_certs`;
//! ticket keys: `tls_tickets`.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::tls::*;
use support::*;

fn setup(tag: &str, extra: &[&str]) -> (Site, Ca, TlsServer) {
    let site = Site::new(tag);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, extra);
    (site, ca, server)
}

/// Scrape the admin endpoint.
fn scrape(server: &Server) -> String {
    let mut w = Wire::plain(server.admin_addr());
    w.roundtrip("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .body_str()
}

/// Sum of a metric's series whose label set contains every `labels` pair.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One request per case on a keep-alive connection of each transport: the
/// answers must be the same but for `Date` (multipart boundaries differ per
/// response, so those are compared part by part).
#[test]
fn every_case_answers_the_same_over_tls_and_cleartext() {
    let site = Site::new("tls-same");
    let css: String = (0..400)
        .map(|i| format!(".c{i} {{ color: red }}\n"))
        .collect();
    site.write("big.css", css.as_bytes());
    // Past the default sendfile threshold: the verified-copy path.
    let large: Vec<u8> = (0..3 * 1024 * 1024 + 17)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    site.write("large.bin", &large);
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, &[]);
    let first = server.wire(Transport::Plain).roundtrip(&get("/index.html"));
    let etag = first.must("etag").to_owned();
    // Give the background compression a moment, then compare over both.
    assert!(poll_until(Duration::from_secs(10), || {
        server
            .wire(Transport::Plain)
            .roundtrip(&request("GET", "/big.css", &[("Accept-Encoding", "br")]))
            .header("content-encoding")
            .is_some()
    }));
    let cases: Vec<String> = vec![
        get("/index.html"),
        request("HEAD", "/index.html", &[]),
        get("/img.png"),
        get("/nope.txt"),
        get("/dir"),
        get("/dir/"),
        get("/%69ndex.html"),
        get("/../secret.txt"),
        request("OPTIONS", "/index.html", &[]),
        request("DELETE", "/index.html", &[]),
        request("GET", "/digits.txt", &[("Range", "bytes=0-9")]),
        request("GET", "/digits.txt", &[("Range", "bytes=-5")]),
        request("GET", "/digits.txt", &[("Range", "bytes=100-200")]),
        request("GET", "/digits.txt", &[("Range", "bytes=0-1,5-6")]),
        request("GET", "/index.html", &[("If-None-Match", &etag)]),
        request(
            "GET",
            "/index.html",
            &[("If-Modified-Since", FIXED_MTIME_HTTP)],
        ),
        request(
            "GET",
            "/index.html",
            &[("If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")],
        ),
        request("GET", "/index.html", &[("If-Match", "\"nope\"")]),
        request("GET", "/big.css", &[("Accept-Encoding", "gzip")]),
        request("GET", "/big.css", &[("Accept-Encoding", "br")]),
        request("GET", "/big.css", &[("Accept-Encoding", "zstd")]),
        request("GET", "/big.css", &[("Accept-Encoding", "identity")]),
        get("/large.bin"),
        request("GET", "/large.bin", &[("Range", "bytes=1000000-2999999")]),
        "GET /index.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".to_owned(),
    ];
    let mut wires: Vec<Wire> = BOTH.iter().map(|&t| server.wire(t)).collect();
    for raw in &cases {
        let answers: Vec<Response> = wires.iter_mut().map(|w| w.roundtrip(raw)).collect();
        let (plain, tls) = (&answers[0], &answers[1]);
        match plain.header("content-type").and_then(boundary_of) {
            Some(b) => {
                let tb = boundary_of(tls.must("content-type")).expect("multipart over TLS too");
                let pp = parse_multipart(&plain.body, &b).unwrap();
                let tp = parse_multipart(&tls.body, &tb).unwrap();
                assert_eq!(pp.len(), tp.len(), "{raw:?}");
                for (a, b) in pp.iter().zip(&tp) {
                    assert_eq!(a.data, b.data, "{raw:?}");
                    assert_eq!(a.header("content-range"), b.header("content-range"));
                }
                assert_eq!(plain.status, 206);
            }
            None => assert_eq!(without_date(plain), without_date(tls), "{raw:?}"),
        }
    }
    // Spot checks that the shared answers are the right ones.
    let mut w = server.wire(Transport::Tls);
    let r = w.roundtrip(&get("/large.bin"));
    assert_eq!(r.status, 200);
    assert!(r.body == large, "large body differs over TLS");
    let r = w.roundtrip(&request("GET", "/digits.txt", &[("Range", "bytes=0-9")]));
    assert_eq!((r.status, r.body.as_slice()), (206, &DIGITS[..10]));
    let r = w.roundtrip(&request("GET", "/index.html", &[("If-None-Match", &etag)]));
    assert_eq!(r.status, 304);
    let r = w.roundtrip(&request("GET", "/big.css", &[("Accept-Encoding", "gzip")]));
    assert_eq!(r.must("content-encoding"), "gzip");
    assert_eq!(w.roundtrip(&get("/nope.txt")).status, 404);
}

/// Requests whose error closes the connection: the same status over both
/// transports, then a close.
#[test]
fn errors_close_the_same_way_over_tls() {
    let (_site, _ca, server) = setup("tls-errors", &[]);
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(5000));
    let big_head = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(9000)
    );
    let cases: Vec<(String, u16)> = vec![
        ("GARBAGE\r\n\r\n".to_owned(), 400),
        (long_uri, 414),
        (big_head, 431),
        ("GET / HTTP/2.0\r\nHost: a\r\n\r\n".to_owned(), 505),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999\r\n\r\n".to_owned(),
            413,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
                .to_owned(),
            400,
        ),
    ];
    for (raw, want) in &cases {
        for t in BOTH {
            let mut w = server.wire(t);
            w.send(raw.as_bytes());
            let r = w
                .read_response_to("GET")
                .unwrap_or_else(|e| panic!("{t:?} {want}: {e}"));
            assert_eq!(r.status, *want, "{t:?}: {r:?}");
            assert!(r.says_close(), "{t:?}: {r:?}");
            w.expect_closed(Duration::from_secs(3))
                .unwrap_or_else(|e| panic!("{t:?} after {want}: {e}"));
        }
    }
}

/// 32 requests written at once (one batch of TLS records) come back
/// complete and in order.
#[test]
fn pipelined_32_requests_in_one_tls_batch_answer_in_order() {
    let (_site, _ca, server) = setup("tls-pipeline", &[]);
    let mut w = server.wire(Transport::Tls);
    let mut batch = String::new();
    for i in 0..32 {
        let path = ["/index.html", "/style.css", "/nope.txt"][i % 3];
        batch.push_str(&request("GET", path, &[]));
        batch.push_str(&request(
            "GET",
            "/digits.txt",
            &[("Range", &format!("bytes={i}-{i}"))],
        ));
    }
    w.send(batch.as_bytes());
    for i in 0..32 {
        let r = w.read_response_to("GET").unwrap();
        let want = [200, 200, 404][i % 3];
        assert_eq!(r.status, want, "answer {i}: {r:?}");
        if i % 3 == 0 {
            assert_eq!(r.body, INDEX_HTML);
        }
        let r = w.read_response_to("GET").unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (206, &DIGITS[i..=i]),
            "range {i}"
        );
    }
    // Still usable afterwards.
    assert_eq!(w.roundtrip(&get("/style.css")).body, STYLE_CSS);
}

/// With `--sendfile true` cleartext sends large files zero-copy, but TLS
/// cannot: it must still answer them whole (through the verified copy).
#[test]
fn large_files_over_tls_with_sendfile_on() {
    let site = Site::new("tls-sendfile");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let large: Vec<u8> = (0..2 * 1024 * 1024 + 3).map(|i| (i % 253) as u8).collect();
    site.write("large.bin", &large);
    let server = TlsServer::start(&site.root, &ca, &leaf, &["--sendfile", "true"]);
    for t in BOTH {
        let r = server.wire(t).roundtrip(&get("/large.bin"));
        assert_eq!(r.status, 200, "{t:?}");
        assert!(r.body == large, "{t:?}: body differs");
    }
}

#[test]
fn tls12_and_tls13_negotiate_http11_and_log_version_and_cipher() {
    let site = Site::new("tls-versions");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let log = site.base().join("access.json");
    let log_s = log.display().to_string();
    let server = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &["--access-log", &log_s, "--access-log-format", "json"],
    );
    for (version, name) in [
        (&rustls::version::TLS12, "TLSv1.2"),
        (&rustls::version::TLS13, "TLSv1.3"),
    ] {
        let client = ca.client(&[version]);
        let mut w = Wire::tls(server.tls_addr, &client, "localhost");
        let s = w.session().unwrap();
        assert_eq!(s.alpn_protocol(), Some(&b"http/1.1"[..]), "{name}");
        assert_eq!(
            s.protocol_version().map(|v| format!("{v:?}")).as_deref(),
            Some(name.replace('.', "_").as_str()),
        );
        let r = w.roundtrip(&get(&format!("/index.html?{name}")));
        assert_eq!(r.status, 200);
    }
    server
        .wire(Transport::Plain)
        .roundtrip(&get("/index.html?plain"));
    let mut lines = Vec::new();
    assert!(
        poll_until(Duration::from_secs(5), || {
            lines = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            lines.len() >= 3
        }),
        "{lines:?}"
    );
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let uri = v["uri"].as_str().unwrap();
        let version = v["tls_version"].as_str().unwrap();
        let cipher = v["tls_cipher"].as_str().unwrap();
        if uri.ends_with("plain") {
            assert_eq!((version, cipher), ("", ""), "{line}");
        } else {
            assert!(uri.ends_with(version), "{line}");
            assert!(cipher.starts_with("TLS"), "{line}");
            assert!(
                cipher.contains("GCM") || cipher.contains("CHACHA20"),
                "{line}"
            );
        }
    }
}

/// With `h2 = false`, a client offering only h2 is refused with an alert,
/// not served (with h2 on, the default, `http2::alpn_prefers_h2_and_keeps_http11`).
#[test]
fn h2_only_client_is_refused_when_h2_is_off() {
    let (_site, ca, server) = setup("tls-alpn", &["--h2", "false"]);
    let mut cfg = (*ca.client(&[])).clone();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let cfg = std::sync::Arc::new(cfg);
    let err = Wire::try_tls(server.tls_addr, &cfg, "localhost")
        .err()
        .expect("handshake offering only h2 must fail");
    let msg = err.to_string();
    assert!(msg.contains("NoApplicationProtocol"), "{msg}");
    // The server goes on serving.
    let mut w = server.wire(Transport::Tls);
    assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
}

/// Cleartext HTTP sent to the TLS port gets a plain-text 400, then a close.
#[test]
fn cleartext_http_on_the_tls_port_gets_400_then_close() {
    let (_site, _ca, server) = setup("tls-plain-on-tls", &[]);
    let mut c = Conn::connect(server.tls_addr);
    c.send(get("/index.html").as_bytes());
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body_str().contains("HTTPS"), "{r:?}");
    assert!(r.says_close());
    c.expect_closed(Duration::from_secs(3)).unwrap();
    assert_eq!(server.wire(Transport::Tls).roundtrip(&get("/")).status, 200);
}

/// Tickets are shared by the shards: a session from one shard resumes on
/// the other (the kernel spreads the reconnects over both).
#[test]
fn sessions_resume_on_any_shard() {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        loud("SKIP: sessions_resume_on_any_shard needs 2 CPUs");
        return;
    }
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let (_site, ca, server) = setup("tls-resume", &["--cores", "2"]);
        let client = ca.client(&[version]);
        let mut w = Wire::tls(server.tls_addr, &client, "localhost");
        assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
        drop(w);
        for _ in 0..16 {
            let mut w = Wire::tls(server.tls_addr, &client, "localhost");
            assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
            assert_eq!(
                w.session().unwrap().handshake_kind(),
                Some(rustls::HandshakeKind::Resumed),
                "{version:?}"
            );
        }
        let mut text = String::new();
        assert!(poll_until(Duration::from_secs(3), || {
            text = scrape(&server.server);
            metric_sum(
                &text,
                "shardhttpd_tls_handshakes_total",
                &[("result", "resumed")],
            ) >= 16.0
        }));
        let full = metric_sum(
            &text,
            "shardhttpd_tls_handshakes_total",
            &[("result", "full")],
        );
        assert_eq!(full, 1.0, "{text}");
        for core in ["0", "1"] {
            let resumed = metric_sum(
                &text,
                "shardhttpd_tls_handshakes_total",
                &[("core", core), ("result", "resumed")],
            );
            assert!(
                resumed > 0.0,
                "no resumption on shard {core} ({version:?})\n{text}"
            );
        }
        assert!(
            metric_sum(
                &text,
                "shardhttpd_tls_handshake_duration_seconds_count",
                &[]
            ) >= 17.0
        );
        assert!(text
            .contains("shardhttpd_tls_certificate_expiry_timestamp_seconds{name=\"localhost\"}"));
    }
}

// ---------------------------------------------------------------------------
// Real clients
// ---------------------------------------------------------------------------

#[test]
fn curl_over_tls12_and_tls13() {
    if !installed("curl") {
        loud("SKIP: curl not installed");
        return;
    }
    let (site, ca, server) = setup("tls-curl", &[]);
    let ca_file = ca.write(site.base());
    let port = server.tls_addr.port();
    let url = format!("https://localhost:{port}/index.html");
    let resolve = format!("localhost:{port}:127.0.0.1");
    for (flags, want) in [
        (&["--tlsv1.2", "--tls-max", "1.2"][..], "TLSv1.2"),
        (&["--tlsv1.3"][..], "TLSv1.3"),
    ] {
        // HTTP/1.1 asked for: ALPN offers only http/1.1 (h2 has its own
        // suite, tests/it/http2.rs).
        let (ok, text) = outcome(
            Command::new("curl")
                .args(["-sS", "-v", "--http1.1", "--cacert"])
                .arg(&ca_file)
                .args(["--resolve", &resolve])
                .args(flags)
                .arg(&url),
        );
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!("SSL connection using {want}")),
            "{text}"
        );
        assert!(text.contains("hello from the root"), "{text}");
        assert!(
            text.contains("ALPN: server accepted http/1.1")
                || text.contains("ALPN, server accepted to use http/1.1"),
            "{text}"
        );
    }
}

#[test]
fn openssl_s_client_alpn_sni_resumption_and_no_tls11() {
    if !installed("openssl") {
        loud("SKIP: openssl not installed");
        return;
    }
    let site = Site::new("tls-openssl");
    let ca = Ca::new();
    let a = ca.leaf(site.base(), "alpha", &["localhost", "alpha.test"]);
    let b = ca.leaf(site.base(), "beta", &["beta.test"]);
    let config = site.base().join("tls.toml");
    std::fs::write(
        &config,
        format!(
            "tls_listen = [\"127.0.0.1:0\"]\n\
             [[tls_certificates]]\ncert = {:?}\nkey = {:?}\n\
             [[tls_certificates]]\ncert = {:?}\nkey = {:?}\n",
            a.cert, a.key, b.cert, b.key
        ),
    )
    .unwrap();
    let cfg = config.display().to_string();
    let cores: &[&str] = if allowed_cpus().len() >= 2 {
        &["--cores", "2"]
    } else {
        &[]
    };
    let mut args = vec!["--config", &cfg];
    args.extend_from_slice(cores);
    let server = Server::start(&site.root, &args);
    let connect = tls_addr(&server).to_string();
    let ca_file = ca.write(site.base()).display().to_string();
    let base = ["-connect", &connect, "-CAfile", &ca_file];

    let mut args = base.to_vec();
    args.extend(["-alpn", "http/1.1", "-servername", "beta.test"]);
    let (_, text) = s_client(&args, "");
    assert!(text.contains("ALPN protocol: http/1.1"), "{text}");
    assert!(
        text.contains("CN = beta") || text.contains("CN=beta"),
        "{text}"
    );
    assert!(text.contains("Verify return code: 0"), "{text}");
    let mut args = base.to_vec();
    args.extend(["-servername", "alpha.test"]);
    let (_, text) = s_client(&args, "");
    assert!(
        text.contains("CN = alpha") || text.contains("CN=alpha"),
        "{text}"
    );

    // TLS 1.1, with the client's own floor lowered so it really offers it.
    let mut args = base.to_vec();
    args.extend(["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]);
    let (ok, text) = s_client(&args, "");
    assert!(!ok, "TLS 1.1 handshake succeeded:\n{text}");
    assert!(
        text.contains("alert") || text.contains("handshake failure"),
        "{text}"
    );

    // Resumption with a saved session, for TLS 1.3 and 1.2; the reconnects
    // spread over the shards.
    for version in ["-tls1_3", "-tls1_2"] {
        let sess = site.base().join(format!("sess{version}.pem"));
        let sess_s = sess.display().to_string();
        let mut args = base.to_vec();
        args.extend([version, "-ign_eof", "-sess_out", &sess_s]);
        // Send a request so a TLS 1.3 ticket arrives before we hang up.
        let (_, text) = s_client(
            &args,
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        assert!(text.contains("New,"), "{text}");
        for _ in 0..6 {
            let mut args = base.to_vec();
            args.extend([version, "-ign_eof", "-sess_in", &sess_s]);
            let (_, text) = s_client(
                &args,
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            );
            assert!(text.contains("Reused,"), "{version}: {text}");
        }
    }
    if cores.is_empty() {
        return;
    }
    // Resumptions over two shards: each shard resumed some, including
    // sessions the other one started. Reuseport hashing decides where each
    // reconnect lands, so keep reconnecting (up to 60 times) until both
    // shards have published a resumption.
    let sess = site.base().join("sess-tls1_3.pem").display().to_string();
    let resumed_on = |core: &str| {
        let mut w = Wire::plain(server.admin_addr());
        let text = w
            .roundtrip("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
            .body_str();
        metric_sum(
            &text,
            "shardhttpd_tls_handshakes_total",
            &[("core", core), ("result", "resumed")],
        )
    };
    let mut extra = 0;
    let both = poll_until(Duration::from_secs(60), || {
        if resumed_on("0") > 0.0 && resumed_on("1") > 0.0 {
            return true;
        }
        if extra < 60 {
            extra += 1;
            let mut args = base.to_vec();
            args.extend(["-tls1_3", "-ign_eof", "-sess_in", &sess]);
            let (_, text) = s_client(
                &args,
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            );
            assert!(text.contains("Reused,"), "extra resumption: {text}");
        }
        false
    });
    assert!(
        both,
        "after {} resumptions, shard 0 resumed {} and shard 1 {}",
        12 + extra,
        resumed_on("0"),
        resumed_on("1")
    );
}

/// `hsts` is sent on successful TLS responses only (the redirect from
/// cleartext that `redirect_https` adds: tests/redirects.rs).
#[test]
fn hsts_over_tls_only() {
    let (_site, _ca, server) = setup(
        "tls-hsts",
        &[
            "--hsts",
            "max-age=31536000; includeSubDomains",
            "--redirect-https",
            "true",
        ],
    );
    let mut w = server.wire(Transport::Tls);
    for raw in [
        get("/index.html"),
        request("GET", "/digits.txt", &[("Range", "bytes=0-1")]),
        request(
            "GET",
            "/index.html",
            &[("If-Modified-Since", FIXED_MTIME_HTTP)],
        ),
    ] {
        let r = w.roundtrip(&raw);
        assert!(r.status < 400, "{r:?}");
        assert_eq!(
            r.must("strict-transport-security"),
            "max-age=31536000; includeSubDomains",
            "{raw:?}"
        );
    }
    let r = server
        .wire(Transport::Plain)
        .roundtrip("GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 301, "{r:?}");
    assert!(r.header("strict-transport-security").is_none(), "{r:?}");
}

/// Issue 24: a `Strict-Transport-Security` set by a `[[headers]]` rule went
/// out over cleartext too (RFC 6797 §7.2 forbids it). It goes out over TLS
/// only, on every head the file is sent with, where it replaces the
/// server-wide `hsts` for the files it matches; the rule's other fields
/// still go out on both.
#[test]
fn hsts_from_a_header_rule_goes_over_tls_only() {
    let site = Site::new("tls-hsts-rule");
    let conf = site.base().join("rules.toml");
    std::fs::write(
        &conf,
        "[[headers]]\nglob = \"*.html\"\n\
         set = { Strict-Transport-Security = \"max-age=600\", X-Frame-Options = \"DENY\" }\n",
    )
    .unwrap();
    let conf = conf.display().to_string();
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &["--config", &conf, "--hsts", "max-age=31536000"],
    );
    let asks = [
        get("/index.html"),
        request("GET", "/index.html", &[("Range", "bytes=0-1")]),
        request(
            "GET",
            "/index.html",
            &[("If-Modified-Since", FIXED_MTIME_HTTP)],
        ),
        request("HEAD", "/index.html", &[]),
    ];
    let mut plain = server.wire(Transport::Plain);
    let mut tls = server.wire(Transport::Tls);
    for raw in &asks {
        let r = plain.roundtrip(raw);
        assert!(matches!(r.status, 200 | 206 | 304), "{r:?}");
        assert_eq!(
            r.header("strict-transport-security"),
            None,
            "{raw:?}: {r:?}"
        );
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{raw:?}");
        let r = tls.roundtrip(raw);
        assert!(matches!(r.status, 200 | 206 | 304), "{r:?}");
        assert_eq!(
            r.header_count("strict-transport-security"),
            1,
            "{raw:?}: {r:?}"
        );
        assert_eq!(
            r.must("strict-transport-security"),
            "max-age=600",
            "{raw:?}"
        );
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{raw:?}");
    }
    // A file no rule matches: the server-wide value over TLS, none over
    // cleartext.
    let r = tls.roundtrip(&get("/digits.txt"));
    assert_eq!(r.must("strict-transport-security"), "max-age=31536000");
    let r = plain.roundtrip(&get("/digits.txt"));
    assert_eq!(r.header("strict-transport-security"), None, "{r:?}");
}

/// Issue 27: an expired certificate refused the whole start, the cleartext
/// listener included. It is served (clients judge it), with one ERROR line
/// naming the key, the file and the fix, and the expiry gauge in the past
/// for the alert; a pair that cannot work at all is still refused.
#[test]
fn an_expired_certificate_is_served_with_an_error_line() {
    let site = Site::new("tls-expired");
    let ca = Ca::new();
    let old = ca.leaf_with(site.base(), "old", &["localhost"], |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let server = TlsServer::start(&site.root, &ca, &old, &[]);
    assert_eq!(
        server
            .wire(Transport::Plain)
            .roundtrip(&get("/index.html"))
            .status,
        200
    );
    // The certificate is the one offered: a client checking it refuses
    // it as expired, not for another reason.
    match Wire::try_tls(server.tls_addr, &server.client, "localhost") {
        Ok(_) => panic!("the client accepted an expired certificate"),
        Err(e) => assert!(format!("{e:?}").contains("Expired"), "{e:?}"),
    }
    let log = server.server.log_text();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("expired"))
        .collect();
    assert_eq!(errors.len(), 1, "one ERROR line: {log}");
    assert!(
        errors[0].contains(&*old.cert.display().to_string()) && errors[0].contains("renew"),
        "{}",
        errors[0]
    );
    let text = scrape(&server.server);
    let expiry = metric_sum(
        &text,
        "shardhttpd_tls_certificate_expiry_timestamp_seconds",
        &[],
    );
    assert_eq!(expiry, 1_609_459_200.0, "notAfter 2021-01-01: {text}");
}

/// A request and the client's close_notify in one TCP segment, the TCP
/// connection left open: the response comes, then the server's
/// close_notify and its close at once, not after the keep-alive timeout
/// (issue 24: the close_notify was consumed with the request and no
/// readiness edge followed it).
#[test]
fn close_notify_read_with_the_last_request_closes_after_the_response() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    let (_site, _ca, server) = setup("tls-close-notify", &["--keepalive-timeout", "30"]);
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let client = _ca.client(&[version]);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(client, name).unwrap();
        let mut sock = TcpStream::connect(server.tls_addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        conn.writer()
            .write_all(get("/index.html").as_bytes())
            .unwrap();
        conn.send_close_notify();
        let mut wire = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut wire).unwrap();
        }
        sock.write_all(&wire).unwrap();
        let sent = Instant::now();
        let mut plain = Vec::new();
        let clean = loop {
            if conn.wants_read() {
                match conn.read_tls(&mut sock) {
                    Ok(0) => break false,
                    Ok(_) => {}
                    Err(e) => panic!("{version:?}: {e} after {:?}", sent.elapsed()),
                }
                conn.process_new_packets().unwrap();
            }
            match conn.reader().read_to_end(&mut plain) {
                Ok(_) => break true,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{version:?}: {e}"),
            }
        };
        let took = sent.elapsed();
        let text = String::from_utf8_lossy(&plain);
        assert!(text.starts_with("HTTP/1.1 200"), "{version:?}: {text}");
        assert!(clean, "{version:?}: closed without close_notify");
        assert!(
            took < Duration::from_secs(2),
            "{version:?}: closed {took:?} after the request (keep-alive timeout 30 s)"
        );
        // And the TCP connection is closed too.
        let mut rest = [0u8; 64];
        assert!(matches!(sock.read(&mut rest), Ok(0) | Err(_)));
    }
}
