//! The HTTP semantics over h2 are the HTTP/1.1 semantics: a table of
//! requests (conditionals, ranges, multipart ranges, encodings, errors,
//! redirects, methods) is sent over HTTP/1.1 with the harness's client and
//! over h2 with Python's `h2` package (all streams at once on one
//! connection), on cleartext (h2c) and over TLS; each pair must have the
//! same status, the same header fields (but Date and the HTTP/1
//! connection headers) and the same body. The table mirrors what
//! `http_semantics`, `compression` and `errors` check in depth over
//! HTTP/1.1, so passing it carries those suites' conclusions to h2.

use crate::support;

use support::h2::{self, Target};
use support::tls::Transport;
use support::*;

use crate::http2::{h2_site, Both};

/// One request of the table: method, path, headers.
type Row = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// `{etag}` in a value is replaced by the ETag of `/index.html`,
/// `{etag_js}` by that of `/app.js` (identity).
const TABLE: &[Row] = &[
    ("GET", "/index.html", &[]),
    ("GET", "/", &[]),
    ("GET", "/style.css", &[]),
    ("GET", "/img.png", &[]),
    ("GET", "/digits.txt", &[]),
    ("GET", "/dir/", &[]),
    ("GET", "/dir", &[]),
    ("GET", "/dir?a=1&b=%20x", &[]),
    ("GET", "/index.html?v=1", &[]),
    ("GET", "/nope", &[]),
    ("GET", "/nope/deeper.html", &[]),
    ("GET", "/%2e%2e/secret.txt", &[]),
    ("GET", "/big.bin", &[]),
    ("HEAD", "/index.html", &[]),
    ("HEAD", "/nope", &[]),
    ("HEAD", "/app.js", &[("Accept-Encoding", "br")]),
    ("OPTIONS", "/index.html", &[]),
    ("POST", "/index.html", &[]),
    ("DELETE", "/index.html", &[]),
    // Conditionals.
    ("GET", "/index.html", &[("If-None-Match", "{etag}")]),
    (
        "GET",
        "/index.html",
        &[("If-None-Match", "\"other\", {etag}")],
    ),
    ("GET", "/index.html", &[("If-None-Match", "\"other\"")]),
    ("GET", "/index.html", &[("If-None-Match", "*")]),
    ("HEAD", "/index.html", &[("If-None-Match", "{etag}")]),
    (
        "GET",
        "/index.html",
        &[("If-Modified-Since", "Sun, 13 Sep 2020 12:26:40 GMT")],
    ),
    (
        "GET",
        "/index.html",
        &[("If-Modified-Since", "Sat, 12 Sep 2020 12:26:40 GMT")],
    ),
    ("GET", "/index.html", &[("If-Match", "\"nope\"")]),
    ("GET", "/index.html", &[("If-Match", "{etag}")]),
    (
        "GET",
        "/index.html",
        &[("If-Unmodified-Since", "Sat, 12 Sep 2020 12:26:40 GMT")],
    ),
    // Ranges.
    ("GET", "/digits.txt", &[("Range", "bytes=0-9")]),
    ("GET", "/digits.txt", &[("Range", "bytes=-5")]),
    ("GET", "/digits.txt", &[("Range", "bytes=10-")]),
    ("GET", "/digits.txt", &[("Range", "bytes=0-1,4-5")]),
    ("GET", "/digits.txt", &[("Range", "bytes=100-200")]),
    ("GET", "/digits.txt", &[("Range", "items=0-1")]),
    ("GET", "/big.bin", &[("Range", "bytes=100000-200000")]),
    (
        "GET",
        "/index.html",
        &[("Range", "bytes=0-3"), ("If-Range", "{etag}")],
    ),
    (
        "GET",
        "/index.html",
        &[("Range", "bytes=0-3"), ("If-Range", "\"stale\"")],
    ),
    (
        "GET",
        "/index.html",
        &[("Range", "bytes=0-3"), ("If-None-Match", "{etag}")],
    ),
    // Encodings.
    ("GET", "/app.js", &[]),
    ("GET", "/app.js", &[("Accept-Encoding", "gzip")]),
    ("GET", "/app.js", &[("Accept-Encoding", "br")]),
    ("GET", "/app.js", &[("Accept-Encoding", "zstd")]),
    ("GET", "/app.js", &[("Accept-Encoding", "br;q=0, *")]),
    ("GET", "/app.js", &[("Accept-Encoding", "identity;q=0")]),
    ("GET", "/img.png", &[("Accept-Encoding", "identity;q=0")]),
    (
        "GET",
        "/app.js",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-99")],
    ),
    (
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br"), ("If-None-Match", "{etag_js}")],
    ),
];

/// Header fields that differ by protocol or by moment, left out of the
/// comparison.
const SKIP: [&str; 3] = ["date", "connection", "keep-alive"];

type Normal = (u16, Vec<(String, String)>, Vec<u8>);

/// Status, header fields (lower-case names, sorted, without [`SKIP`]) and
/// body; a multipart body becomes its parts with the boundary replaced,
/// since each multipart response has a boundary of its own.
fn normal(r: &Response) -> Normal {
    let mut headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .filter(|(k, _)| !SKIP.contains(&k.as_str()))
        .collect();
    let mut body = r.body.clone();
    if let Some(boundary) = r
        .header("content-type")
        .filter(|c| c.starts_with("multipart/byteranges"))
        .and_then(boundary_of)
    {
        headers.retain(|(k, _)| k != "content-length");
        for (k, v) in headers.iter_mut() {
            if k == "content-type" {
                *v = v.replace(&boundary, "BOUNDARY");
            }
        }
        body = match parse_multipart(&r.body, &boundary) {
            Ok(parts) => parts
                .iter()
                .flat_map(|p| {
                    let mut b = format!("{:?}|", p.headers).into_bytes();
                    b.extend_from_slice(&p.data);
                    b
                })
                .collect(),
            Err(e) => format!("bad multipart: {e}").into_bytes(),
        };
    }
    headers.sort();
    (r.status, headers, body)
}

fn fill(value: &str, etag: &str, etag_js: &str) -> String {
    value.replace("{etag}", etag).replace("{etag_js}", etag_js)
}

fn compare(both: &Both, h1_transport: Transport, target: &Target, py: &std::path::Path) {
    let mut h1 = both.tls.wire(h1_transport);
    let etag = h1.roundtrip(&get("/index.html")).must("etag").to_owned();
    let etag_js = h1.roundtrip(&get("/app.js")).must("etag").to_owned();
    let mut requests = Vec::new();
    let mut h1_answers = Vec::new();
    for (method, path, headers) in TABLE {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), fill(v, &etag, &etag_js)))
            .collect();
        let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
        for (k, v) in &headers {
            raw.push_str(&format!("{k}: {v}\r\n"));
        }
        if matches!(*method, "POST" | "DELETE") {
            raw.push_str("Content-Length: 0\r\n");
        }
        raw.push_str("\r\n");
        let r = h1.roundtrip(&raw);
        if r.says_close() {
            h1 = both.tls.wire(h1_transport);
        }
        h1_answers.push(r);
        requests.push(serde_json::json!({
            "method": method, "path": path, "headers": headers,
        }));
    }
    let input = serde_json::Value::Array(requests).to_string();
    let v = h2::probe_with_input(py, "fetch", target, &[], &input);
    let responses = v["responses"].as_array().unwrap();
    assert_eq!(responses.len(), TABLE.len(), "{}: {v}", target.name());
    let mut mismatches = Vec::new();
    for (((method, path, headers), h1r), h2v) in TABLE.iter().zip(&h1_answers).zip(responses) {
        assert_eq!(h2v["complete"], true, "{method} {path} {headers:?}: {h2v}");
        let h2r = h2::fetched(h2v);
        for (k, _) in &h2r.headers {
            assert!(
                !SKIP[1..].contains(&k.as_str()),
                "{method} {path}: {k} in an h2 response"
            );
        }
        if normal(h1r) != normal(&h2r) {
            mismatches.push(format!(
                "{method} {path} {headers:?}\n  HTTP/1.1: {h1r:?}\n  h2: {h2r:?}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}: {} of {} answers differ from HTTP/1.1:\n{}",
        target.name(),
        mismatches.len(),
        TABLE.len(),
        mismatches.join("\n")
    );
}

#[test]
fn h2c_answers_as_http11_does() {
    let Some(py) = h2::python_or_skip("h2 semantics table") else {
        return;
    };
    let site = h2_site("h2-semantics-h2c");
    let both = Both::start(&site, &[]);
    compare(&both, Transport::Plain, &both.h2c(), &py);
}

#[test]
fn h2_over_tls_answers_as_http11_over_tls_does() {
    let Some(py) = h2::python_or_skip("h2 semantics table") else {
        return;
    };
    let site = h2_site("h2-semantics-tls");
    let both = Both::start(&site, &[]);
    compare(&both, Transport::Tls, &both.h2(), &py);
}

/// The table's normalisation: a multipart answer's boundary and length do
/// not count, its parts do.
#[test]
fn multipart_normalisation_ignores_only_the_boundary() {
    let mk = |b: &str, data: &str| Response {
        version: "HTTP/1.1".into(),
        status: 206,
        reason: String::new(),
        headers: vec![
            (
                "Content-Type".into(),
                format!("multipart/byteranges; boundary={b}"),
            ),
            ("Content-Length".into(), "1".into()),
        ],
        body: format!("--{b}\r\nContent-Range: bytes 0-1/9\r\n\r\n{data}\r\n--{b}--\r\n")
            .into_bytes(),
    };
    assert_eq!(normal(&mk("aaa", "01")), normal(&mk("bbbb", "01")));
    assert_ne!(normal(&mk("aaa", "01")), normal(&mk("aaa", "02")));
}
