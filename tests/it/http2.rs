//! HTTP/2 with real clients: ALPN `h2` over TLS and h2c with prior
//! knowledge on cleartext, the `h2`/`h2c` switches, curl, nghttp, h2load and
//! Python's `h2` package, the access log's `HTTP/2.0` and the per-protocol
//! request counts. Conformance (h2spec) is in `http2_conformance`, the
//! defences in `http2_defences`, the HTTP semantics over h2 against
//! HTTP/1.1 in `http2_semantics`.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::h2::{self, Target};
use support::tls::{Ca, TlsServer};
use support::*;

/// A site with the standard files plus `app.js` (compressible), `big.bin`
/// (past the 64 KiB default window, so flow control matters) and
/// `sized/N.txt` files of distinct sizes and bytes.
pub fn h2_site(tag: &str) -> Site {
    let site = Site::new(tag);
    site.write("app.js", &script());
    site.write("big.bin", &big_body());
    for i in 0..SIZES.len() {
        site.write(&format!("sized/{i}.txt"), &sized_body(i));
    }
    site
}

/// Sizes of `sized/N.txt`: small, around a frame (16 KiB) and around the
/// default stream window (64 KiB).
pub const SIZES: [usize; 8] = [1, 100, 4096, 16_383, 16_385, 65_535, 65_537, 200_000];

/// `sized/N.txt`: SIZES[N] bytes, each `b'a' + N`, so any byte in the wrong
/// stream shows.
pub fn sized_body(i: usize) -> Vec<u8> {
    vec![b'a' + i as u8; SIZES[i]]
}

/// 300 KiB of a pattern no offset repeats soon.
pub fn big_body() -> Vec<u8> {
    (0..300 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

pub fn script() -> Vec<u8> {
    (0..300)
        .map(|i| format!("export const value{i} = compute({i}, \"some repeated text\");\n"))
        .collect::<String>()
        .into_bytes()
}

/// A server with a cleartext and a TLS listener on `site`, and the CA file
/// curl and Python verify it with.
pub struct Both {
    pub tls: TlsServer,
    pub ca_file: std::path::PathBuf,
    _ca: Ca,
}

impl Both {
    pub fn start(site: &Site, extra: &[&str]) -> Both {
        let ca = Ca::new();
        let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
        let ca_file = ca.write(site.base());
        let tls = TlsServer::start(&site.root, &ca, &leaf, extra);
        Both {
            tls,
            ca_file,
            _ca: ca,
        }
    }

    pub fn server(&self) -> &Server {
        &self.tls.server
    }

    pub fn h2c(&self) -> Target {
        Target::h2c(self.tls.server.plain_addr())
    }

    pub fn h2(&self) -> Target {
        Target::tls(self.tls.tls_addr, &self.ca_file)
    }

    pub fn targets(&self) -> [Target; 2] {
        [self.h2c(), self.h2()]
    }
}

fn curl_or_skip(what: &str) -> bool {
    if !installed("curl") {
        loud(&format!("SKIP: {what}: curl not installed"));
        return false;
    }
    true
}

/// Headers RFC 9113 §8.2.2 forbids in an HTTP/2 message.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

#[track_caller]
fn assert_h2_response(r: &Response, what: &str) {
    assert_eq!(r.version, "HTTP/2", "{what}: {r:?}");
    for name in CONNECTION_SPECIFIC {
        assert_eq!(
            r.header(name),
            None,
            "{what}: {name} in an h2 response: {r:?}"
        );
    }
    for (k, _) in &r.headers {
        assert_eq!(
            *k,
            k.to_ascii_lowercase(),
            "{what}: upper case in h2 field {k:?}"
        );
    }
}

/// What curl must get over `t`: statuses, headers, bodies and lengths of
/// a 200, HEAD, 304, 206, each compressed variant, 404, 301, 405 and a file
/// past the default flow-control window.
fn curl_suite(t: &Target) {
    let what = t.name();
    let c = h2::curl(t, "/index.html", &[]);
    let r = &c.response;
    assert_h2_response(r, what);
    assert_eq!(r.status, 200, "{what}: {r:?}");
    assert_eq!(r.body, INDEX_HTML, "{what}");
    assert_common_headers(r, "GET");
    assert_eq!(r.must("content-type"), "text/html; charset=utf-8");
    assert_eq!(r.must("last-modified"), FIXED_MTIME_HTTP);
    let etag = r.must("etag").to_owned();
    if t.is_tls() {
        assert!(
            c.log.contains("ALPN: server accepted h2")
                || c.log.contains("ALPN, server accepted to use h2"),
            "{what}: ALPN h2 not chosen: {}",
            c.log
        );
    }

    let c = h2::curl(t, "/index.html", &["-I"]);
    let head = c.response;
    assert_h2_response(&head, what);
    assert_eq!(head.status, 200, "{what} HEAD: {head:?}");
    assert_eq!(c.size_download, 0, "{what}: HEAD answered with a body");
    assert_eq!(head.content_length(), Some(INDEX_HTML.len() as u64));
    assert_eq!(head.header("etag"), Some(etag.as_str()));

    let inm = format!("If-None-Match: {etag}");
    let r = h2::curl(t, "/index.html", &["-H", &inm]).response;
    assert_eq!(r.status, 304, "{what} If-None-Match: {r:?}");
    assert!(r.body.is_empty(), "{what}: 304 with a body");
    assert_eq!(r.header("etag"), Some(etag.as_str()));

    let r = h2::curl(t, "/digits.txt", &["-H", "Range: bytes=2-5"]).response;
    assert_eq!(r.status, 206, "{what} range: {r:?}");
    assert_eq!(r.body, &DIGITS[2..=5]);
    assert_eq!(r.content_length(), Some(4));
    assert_eq!(
        r.must("content-range"),
        format!("bytes 2-5/{}", DIGITS.len())
    );

    let js = script();
    for enc in ["gzip", "br", "zstd"] {
        let ae = format!("Accept-Encoding: {enc}");
        let r = h2::curl(t, "/app.js", &["-H", &ae]).response;
        assert_eq!(r.status, 200, "{what} {enc}: {r:?}");
        assert_eq!(r.header("content-encoding"), Some(enc), "{what}: {r:?}");
        assert_eq!(r.must("vary"), "Accept-Encoding");
        assert_eq!(
            r.content_length(),
            Some(r.body.len() as u64),
            "{what} {enc}"
        );
        assert!(r.body.len() < js.len(), "{what} {enc}: not smaller");
        assert_eq!(decode_body(Some(enc), &r.body), js, "{what} {enc}: decodes");
    }

    let r = h2::curl(t, "/nope.html", &[]).response;
    assert_h2_response(&r, what);
    assert_eq!(r.status, 404, "{what}: {r:?}");
    assert!(!r.body.is_empty(), "{what}: 404 without a body");
    assert_eq!(r.content_length(), Some(r.body.len() as u64));

    let r = h2::curl(t, "/dir", &[]).response;
    assert_eq!(r.status, 301, "{what}: {r:?}");
    assert_eq!(r.must("location"), "/dir/");

    let r = h2::curl(t, "/index.html", &["-X", "POST", "-d", "x=1"]).response;
    assert_eq!(r.status, 405, "{what} POST: {r:?}");
    assert_eq!(r.must("allow"), "GET, HEAD, OPTIONS");

    let r = h2::curl(t, "/big.bin", &[]).response;
    assert_eq!(r.status, 200, "{what} big: {r:?}");
    assert_eq!(r.content_length(), Some(big_body().len() as u64));
    assert!(r.body == big_body(), "{what}: big.bin body differs");
}

#[test]
fn curl_over_tls_and_h2c() {
    if !curl_or_skip("curl over h2") {
        return;
    }
    let site = h2_site("h2-curl");
    let both = Both::start(&site, &[]);
    for t in both.targets() {
        curl_suite(&t);
    }
}

/// ALPN: `h2` first by server preference; a client that offers only
/// http/1.1 still gets it.
#[test]
fn alpn_prefers_h2_and_keeps_http11() {
    if !curl_or_skip("ALPN") {
        return;
    }
    let site = h2_site("h2-alpn");
    let both = Both::start(&site, &[]);
    let t = both.h2();
    let h1 = h2::curl(&t, "/index.html", &["--http1.1"]);
    assert_eq!(h1.response.version, "HTTP/1.1", "{}", h1.log);
    assert_eq!(h1.response.body, INDEX_HTML);
    // The harness's rustls client offers only http/1.1.
    let mut w = both.tls.wire(support::tls::Transport::Tls);
    assert_eq!(
        w.session().unwrap().alpn_protocol(),
        Some(&b"http/1.1"[..]),
        "an http/1.1-only client"
    );
    assert_eq!(w.roundtrip(&get("/index.html")).status, 200);
}

#[test]
fn h2_false_offers_only_http11() {
    if !curl_or_skip("--h2 false") {
        return;
    }
    let site = h2_site("h2-off");
    let both = Both::start(&site, &["--h2", "false"]);
    let c = h2::curl(&both.h2(), "/index.html", &[]);
    assert_eq!(c.response.version, "HTTP/1.1", "{}", c.log);
    assert_eq!(c.response.status, 200);
    assert_eq!(c.response.body, INDEX_HTML);
    assert!(
        c.log.contains("ALPN: server accepted http/1.1")
            || c.log.contains("ALPN, server accepted to use http/1.1"),
        "{}",
        c.log
    );
    // h2c is its own switch: still on.
    let c = h2::curl(&both.h2c(), "/index.html", &[]);
    assert_eq!(c.response.version, "HTTP/2", "{}", c.log);
}

/// `--h2c false`: the client preface on a cleartext listener is an
/// HTTP/1 request line `PRI * HTTP/2.0`, answered with an HTTP/1.1 error
/// (400, or 505 for the version, as nginx does) and closed.
#[test]
fn h2c_false_answers_the_preface_with_400_and_closes() {
    let site = h2_site("h2c-off");
    let server = Server::start(&site.root, &["--h2c", "false"]);
    let mut c = server.connect();
    c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00");
    let r = c
        .read_response()
        .unwrap_or_else(|e| panic!("no answer to the preface: {e}\n{}", server.log_text()));
    assert!(r.status == 400 || r.status == 505, "{r:?}");
    assert!(r.version.starts_with("HTTP/1."), "{r:?}");
    assert_closed(&mut c, "preface with h2c off");
    // HTTP/1.1 is unaffected.
    assert_eq!(server.get("/index.html").status, 200);
}

/// `GET /index.html` over h2c with prior knowledge, in frames and HPACK
/// written by hand (RFC 9113 §3.4, RFC 7541 Appendix A): the preface, an
/// empty SETTINGS, then HEADERS on stream 1 of `:method GET` (static index
/// 2), `:scheme http` (6), `:path /index.html` (5) and `:authority
/// localhost` (a literal with the name at index 1). Returns the response's
/// status (the static-table `:status` the block opens with) and the body
/// of its DATA frames, read to END_STREAM.
fn h2c_get_index(addr: std::net::SocketAddr) -> Result<(u16, Vec<u8>), String> {
    use std::io::{Read, Write};
    const DATA: u8 = 0;
    const HEADERS: u8 = 1;
    const GOAWAY: u8 = 7;
    const END_STREAM: u8 = 1;
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    };
    let mut block = vec![0x82, 0x86, 0x85, 0x01, 9];
    block.extend(b"localhost");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    out.extend(frame(HEADERS, END_STREAM | 4, 1, &block));
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.write_all(&out).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut status = None;
    let mut body = Vec::new();
    loop {
        while got.len() >= 9 {
            let len = u32::from_be_bytes([0, got[0], got[1], got[2]]) as usize;
            if got.len() < 9 + len {
                break;
            }
            let (kind, flags) = (got[3], got[4]);
            let stream = u32::from_be_bytes([got[5], got[6], got[7], got[8]]) & 0x7fff_ffff;
            let payload = got[9..9 + len].to_vec();
            got.drain(..9 + len);
            match (kind, stream) {
                (GOAWAY, _) => return Err(format!("GOAWAY {payload:?}")),
                (HEADERS, 1) => {
                    // 0x88..=0x8e: an indexed field, static entries 8 to 14,
                    // `:status` 200, 204, 206, 304, 400, 404, 500.
                    let code = match payload.first() {
                        Some(0x88) => 200,
                        Some(0x89) => 204,
                        Some(0x8a) => 206,
                        Some(0x8b) => 304,
                        Some(0x8c) => 400,
                        Some(0x8d) => 404,
                        Some(0x8e) => 500,
                        _ => return Err(format!("no static :status first: {payload:?}")),
                    };
                    status = Some(code);
                }
                (DATA, 1) => body.extend(&payload),
                _ => {}
            }
            if stream == 1 && flags & END_STREAM != 0 {
                return status
                    .map(|code| (code, body))
                    .ok_or_else(|| "stream 1 ended without HEADERS".to_owned());
            }
        }
        let mut buf = [0u8; 16 * 1024];
        match s.read(&mut buf) {
            Ok(0) => {
                return Err(format!(
                    "closed; status {status:?}, {} body bytes",
                    body.len()
                ))
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// `--h2c-only true`: a cleartext listener for h2c alone (an origin port
/// behind a CDN that speaks h2c). An HTTP/1 request there is no preface:
/// it gets our SETTINGS and a GOAWAY PROTOCOL_ERROR, never an HTTP/1
/// answer, and the connection closes; h2c with prior knowledge is served.
/// Without h2c the setting is refused, naming both.
#[test]
fn h2c_only_answers_http1_with_goaway_and_serves_h2c() {
    use std::io::{Read, Write};
    let site = h2_site("h2c-only");
    let server = Server::start(&site.root, &["--h2c-only", "true"]);
    let mut s = std::net::TcpStream::connect(server.plain_addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .unwrap_or_else(|e| panic!("not closed: {e}\n{}", server.log_text()));
    // Frames: 3-byte length, type, flags, 4-byte stream id, payload.
    let mut frames = Vec::new();
    let mut rest = &got[..];
    while rest.len() >= 9 {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        assert!(rest.len() >= 9 + len, "a cut frame in {got:?}");
        frames.push((rest[3], rest[9..9 + len].to_vec()));
        rest = &rest[9 + len..];
    }
    assert!(rest.is_empty(), "not frames: {got:?}");
    assert_eq!(
        frames.first().map(|f| f.0),
        Some(4),
        "SETTINGS first: {got:?}"
    );
    let goaway = frames.iter().find(|f| f.0 == 7).expect("a GOAWAY");
    assert_eq!(goaway.1[4..8], [0, 0, 0, 1], "PROTOCOL_ERROR: {goaway:?}");

    // h2c with prior knowledge is served, by frames written here: no
    // client program this half could go without.
    let (status, body) = h2c_get_index(server.plain_addr())
        .unwrap_or_else(|e| panic!("h2c on the h2c-only listener: {e}\n{}", server.log_text()));
    assert_eq!(status, 200);
    assert_eq!(body, support::INDEX_HTML);

    let out = command()
        .args(["--root", &site.root.display().to_string()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--check",
        ])
        .args(["--h2c", "false", "--h2c-only", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "h2c-only without h2c passed: {err}");
    assert!(
        err.contains("`--h2c-only` needs h2c") && err.contains("`--h2c`"),
        "{err}"
    );
}

/// h2c on (the default): the preface is answered with the server's
/// SETTINGS, and HTTP/1.1 on the same listener still works.
#[test]
fn h2c_preface_gets_settings_and_http11_still_works() {
    let Some(py) = h2::python_or_skip("h2c preface") else {
        return;
    };
    let site = h2_site("h2c-on");
    let server = Server::start(&site.root, &[]);
    let v = h2::probe(&py, "preface", &Target::h2c(server.plain_addr()), &[]);
    assert_eq!(v["h2_settings_first"], true, "{v}");
    assert_eq!(v["closed"], false, "{v}");
    assert_eq!(server.get("/index.html").status, 200);
}

/// The SETTINGS the server advertises: `h2_max_concurrent_streams`
/// (default 128, and the flag's value when set).
#[test]
fn max_concurrent_streams_is_advertised() {
    let Some(py) = h2::python_or_skip("SETTINGS") else {
        return;
    };
    let site = h2_site("h2-settings");
    for (flags, want) in [
        (&[][..], 128),
        (&["--h2-max-concurrent-streams", "7"][..], 7),
    ] {
        let server = Server::start(&site.root, flags);
        let v = h2::probe(
            &py,
            "get",
            &Target::h2c(server.plain_addr()),
            &["--path", "/index.html"],
        );
        assert_eq!(v["server_settings"]["3"], want, "{flags:?}: {v}");
        assert_eq!(v["status"], 200, "{v}");
    }
}

/// Python's `h2` client: 240 requests over 24 files of distinct sizes on
/// one connection, as many at once as the server allows; every body exact.
#[test]
fn many_concurrent_streams_exact_bodies() {
    let Some(py) = h2::python_or_skip("many streams") else {
        return;
    };
    let site = h2_site("h2-many");
    let both = Both::start(&site, &[]);
    let mut reqs = Vec::new();
    for k in 0..30 {
        for i in 0..SIZES.len() {
            reqs.push(serde_json::json!({"path": format!("/sized/{i}.txt?k={k}")}));
        }
    }
    let input = serde_json::Value::Array(reqs).to_string();
    for t in both.targets() {
        let v = h2::probe_with_input(&py, "fetch", &t, &[], &input);
        let responses = v["responses"].as_array().unwrap();
        assert_eq!(
            responses.len(),
            30 * SIZES.len(),
            "{}: {}",
            t.name(),
            v["goaway"]
        );
        assert_eq!(v["unsent"], 0, "{}", t.name());
        assert_eq!(v["max_concurrent_streams"], 128, "{}", t.name());
        for resp in responses {
            let path = resp["path"].as_str().unwrap();
            assert_eq!(
                resp["complete"],
                true,
                "{}: {path}: {}",
                t.name(),
                resp["reset"]
            );
            let r = h2::fetched(resp);
            let i: usize = path["/sized/".len()..path.find('.').unwrap()]
                .parse()
                .unwrap();
            assert_eq!(r.status, 200, "{}: {path}: {r:?}", t.name());
            assert_eq!(r.content_length(), Some(SIZES[i] as u64), "{path}");
            assert!(
                r.body == sized_body(i),
                "{}: {path}: body differs",
                t.name()
            );
        }
    }
}

/// nghttp: every file on one connection, all streams at once; each answer
/// 200 with the file's exact size.
#[test]
fn nghttp_fetches_every_file_on_one_connection() {
    if !installed("nghttp") {
        loud("SKIP: nghttp not installed (Debian nghttp2-client)");
        return;
    }
    let site = h2_site("h2-nghttp");
    let both = Both::start(&site, &[]);
    for t in both.targets() {
        // nghttp does not verify certificates (nor does h2load below).
        let mut cmd = Command::new("nghttp");
        // Identity bodies, so the sizes are the files' (nghttp asks for
        // gzip by default).
        cmd.args(["-n", "-s", "-t", "10", "-H", "accept-encoding: identity"]);
        let urls: Vec<String> = (0..SIZES.len())
            .map(|i| t.url_ip(&format!("/sized/{i}.txt")))
            .chain([t.url_ip("/big.bin"), t.url_ip("/index.html")])
            .collect();
        let out = cmd.args(&urls).output().expect("run nghttp");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: nghttp: {text}", t.name());
        // The statistics table: `id responseEnd requestStart process code
        // size request-path`.
        let mut seen = std::collections::BTreeMap::new();
        for line in text.lines() {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() == 7 && cols[6].starts_with('/') && cols[0].parse::<u32>().is_ok() {
                seen.insert(cols[6].to_owned(), (cols[4].to_owned(), cols[5].to_owned()));
            }
        }
        for (i, size) in SIZES.iter().enumerate() {
            let path = format!("/sized/{i}.txt");
            assert_eq!(
                seen.get(&path),
                Some(&("200".to_owned(), nghttp_size(*size))),
                "{}: {path}: {text}",
                t.name()
            );
        }
        assert_eq!(
            seen.get("/big.bin"),
            Some(&("200".to_owned(), nghttp_size(big_body().len()))),
            "{text}"
        );
    }
}

/// nghttp's size column: bytes below 1024, else whole units, truncated
/// (`195K` for 200 000).
fn nghttp_size(n: usize) -> String {
    if n < 1024 {
        n.to_string()
    } else if n < 1024 * 1024 {
        format!("{}K", n / 1024)
    } else {
        format!("{}M", n / (1024 * 1024))
    }
}

/// h2load: thousands of requests, many streams per connection, over both
/// transports: every one 2xx, and exactly the body bytes expected.
#[test]
fn h2load_many_streams_all_succeed() {
    if !installed("h2load") {
        loud("SKIP: h2load not installed (Debian nghttp2-client)");
        return;
    }
    let site = h2_site("h2-h2load");
    let both = Both::start(&site, &[]);
    for t in both.targets() {
        for (path, size, n, c, m) in [
            ("/index.html", INDEX_HTML.len(), 2000, 1, 100),
            ("/sized/6.txt", SIZES[6], 400, 4, 20),
        ] {
            let out = Command::new("h2load")
                .args([
                    "-n",
                    &n.to_string(),
                    "-c",
                    &c.to_string(),
                    "-m",
                    &m.to_string(),
                ])
                .arg(t.url_ip(path))
                .output()
                .expect("run h2load");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            let r = h2::parse_h2load(&text);
            assert!(out.status.success(), "{}: {text}", t.name());
            assert_eq!(
                (r.total, r.succeeded, r.failed, r.errored, r.status_2xx),
                (n, n, 0, 0, n),
                "{} {path} -c {c} -m {m}: {text}",
                t.name()
            );
            assert_eq!(r.data_bytes, n * size as u64, "{} {path}: {text}", t.name());
        }
    }
}

/// The access log writes `HTTP/2.0` for h2 requests; requests are counted
/// by protocol.
#[test]
fn access_log_and_metrics_by_protocol() {
    let Some(py) = h2::python_or_skip("access log over h2") else {
        return;
    };
    let site = h2_site("h2-log");
    let log = site.base().join("access.json");
    let log_s = log.display().to_string();
    let both = Both::start(
        &site,
        &["--access-log", &log_s, "--access-log-format", "json"],
    );
    let server = both.server();
    assert_eq!(server.get("/index.html").status, 200);
    let input = r#"[{"path": "/index.html"}, {"path": "/style.css"}, {"path": "/nope"}]"#;
    for t in both.targets() {
        let v = h2::probe_with_input(&py, "fetch", &t, &[], input);
        let statuses: Vec<_> = v["responses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["status"].clone())
            .collect();
        assert_eq!(statuses, [200, 200, 404], "{}: {v}", t.name());
    }
    let mut lines: Vec<serde_json::Value> = Vec::new();
    assert!(
        poll_until(Duration::from_secs(5), || {
            lines = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            lines.len() >= 7
        }),
        "{lines:?}"
    );
    let count = |proto: &str| lines.iter().filter(|v| v["protocol"] == proto).count();
    assert_eq!(count("HTTP/1.1"), 1, "{lines:#?}");
    assert_eq!(count("HTTP/2.0"), 6, "{lines:#?}");
    let h2_404 = lines
        .iter()
        .filter(|v| v["protocol"] == "HTTP/2.0" && v["status"] == 404)
        .count();
    assert_eq!(h2_404, 2, "{lines:#?}");
    let tls_h2 = lines
        .iter()
        .filter(|v| {
            v["protocol"] == "HTTP/2.0"
                && v["tls_version"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("TLSv1."))
        })
        .count();
    assert_eq!(tls_h2, 3, "TLS h2 lines carry the TLS version: {lines:#?}");

    let admin = server.admin_addr();
    let by_protocol = "shardhttpd_http_requests_by_protocol_total";
    metrics::await_value(admin, by_protocol, &[("protocol", "h2")], 6.0);
    metrics::await_value(admin, by_protocol, &[("protocol", "h1")], 1.0);
    metrics::await_value(admin, "shardhttpd_h2_connections_total", &[], 2.0);
    metrics::await_value(admin, "shardhttpd_h2_streams_total", &[], 6.0);
}

/// RFC 9218: of two streams both waiting, the one at urgency 0 is sent
/// before the one at urgency 7, whether the urgency came in the `priority`
/// header or in a PRIORITY_UPDATE frame (a page's CSS is not stuck behind
/// an image).
#[test]
fn urgency_orders_streams() {
    let Some(py) = h2::python_or_skip("priorities") else {
        return;
    };
    let site = h2_site("h2-priority");
    let server = Server::start(&site.root, &[]);
    let t = Target::h2c(server.plain_addr());
    let want = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &big_body());
    let want: String = want.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    for kind in ["header", "update"] {
        let v = h2::probe(
            &py,
            "priority",
            &t,
            &["--kind", kind, "--path", "/big.bin", "--wait", "10"],
        );
        assert_eq!(v["first_data"], 3, "{kind}: u=0 stream first: {v}");
        assert_eq!(v["end_order"], serde_json::json!([3, 1]), "{kind}: {v}");
        for id in ["1", "3"] {
            assert_eq!(v["sha256"][id], want.as_str(), "{kind}: stream {id}");
        }
    }
}

/// The settings as TOML keys (`h2`, `h2c`, `h2_max_concurrent_streams`),
/// as deploy/shardhttpd.toml lists them.
#[test]
fn settings_from_the_config_file() {
    let Some(py) = h2::python_or_skip("h2 settings in TOML") else {
        return;
    };
    let site = h2_site("h2-toml");
    let conf = site.base().join("h2.toml");
    std::fs::write(&conf, "h2c = true\nh2_max_concurrent_streams = 9\n").unwrap();
    let conf_s = conf.display().to_string();
    let server = Server::start(&site.root, &["--config", &conf_s]);
    let v = h2::probe(&py, "get", &Target::h2c(server.plain_addr()), &[]);
    assert_eq!(v["server_settings"]["3"], 9, "{v}");
    assert_eq!(v["status"], 200, "{v}");
    drop(server);

    std::fs::write(&conf, "h2c = false\n").unwrap();
    let server = Server::start(&site.root, &["--config", &conf_s]);
    let v = h2::probe(&py, "preface", &Target::h2c(server.plain_addr()), &[]);
    assert_eq!(v["h2_settings_first"], false, "h2c off in the file: {v}");
    assert!(
        v["reply"].as_str().unwrap().starts_with("HTTP/1.1 "),
        "an HTTP/1.1 answer: {v}"
    );
    assert_eq!(v["closed"], true, "{v}");
}

/// The encoder's line table and dynamic table under churn (issue 25): 300
/// files of distinct lengths, ETags and media types fetched twice on one
/// connection, far past the 4 KiB encoder table, so entries are evicted
/// and line slots collide and go stale; every response decodes (Python's
/// `h2`) to the fields HTTP/1.1 sends for the same file, Date aside.
#[test]
fn many_distinct_heads_on_one_connection_decode_as_http11_sends_them() {
    let Some(py) = h2::python_or_skip("distinct heads") else {
        return;
    };
    let site = Site::new("h2-heads");
    let exts = ["txt", "css", "js", "html", "json", "svg"];
    let path = |i: usize| format!("/f/{i}.{}", exts[i % exts.len()]);
    for i in 0..300 {
        site.write(&path(i)[1..], &vec![b'a' + (i % 26) as u8; i + 1]);
    }
    let both = Both::start(&site, &[]);
    let fields = |headers: &[(String, String)]| {
        let mut v: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .filter(|(n, _)| n != "date")
            .collect();
        v.sort();
        v
    };
    let want: Vec<_> = (0..300)
        .map(|i| fields(&both.server().get(&path(i)).headers))
        .collect();
    let reqs: Vec<_> = (0..600)
        .map(|k| serde_json::json!({"path": path(k % 300)}))
        .collect();
    let input = serde_json::Value::Array(reqs).to_string();
    for t in both.targets() {
        let v = h2::probe_with_input(&py, "fetch", &t, &[], &input);
        let responses = v["responses"].as_array().unwrap();
        assert_eq!(responses.len(), 600, "{}: {}", t.name(), v["goaway"]);
        for (k, resp) in responses.iter().enumerate() {
            let r = h2::fetched(resp);
            assert_eq!(r.status, 200, "{}: {}", t.name(), path(k % 300));
            assert_eq!(
                fields(&r.headers),
                want[k % 300],
                "{}: response {k}, {}",
                t.name(),
                path(k % 300)
            );
            assert_eq!(r.body.len(), k % 300 + 1);
        }
    }
}
