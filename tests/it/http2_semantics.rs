//! The HTTP semantics over h2 are the HTTP/1.1 semantics: a table of
//! requests (conditionals, ranges, multipart ranges, encodings, errors,
//! redirects, methods) is sent over HTTP/1.1 with the harness's client and
//! over h2 with Python's `h2` package (all streams at once on one
//! connection), on cleartext (h2c) and over TLS. Each row says what the
//! answer must be (status, header values, body: the site's bytes, a slice
//! of them, or a compressed variant that decodes to them), and both
//! protocols' answers are held to it, so a bug shared through `respond`
//! fails on both. Then each pair must also match each other: the same
//! status, header fields (but Date and the HTTP/1 connection headers) and
//! body. The table mirrors what `http_semantics`, `compression` and
//! `errors` check in depth over HTTP/1.1.

use crate::support;

use std::path::Path;

use support::h2::{self, Target};
use support::tls::Transport;
use support::*;

use crate::http2::{h2_site, Both};

/// One request of the table and what its answer must be.
struct Row {
    method: &'static str,
    path: &'static str,
    /// Request header fields; `{etag}` in a value is replaced by the ETag
    /// of `/index.html`, `{etag_js}` by that of `/app.js` (identity).
    headers: &'static [(&'static str, &'static str)],
    want: Want,
}

/// What an answer must be, on either protocol.
struct Want {
    status: u16,
    /// Header fields and what their value must be.
    fields: &'static [(&'static str, Field)],
    body: Body,
}

/// What a header field's value must be.
#[derive(Clone, Copy, Debug)]
enum Field {
    /// Exactly this.
    Is(&'static str),
    /// Absent.
    Absent,
    /// The ETag `/index.html` answered with.
    IndexEtag,
    /// A strong ETag of 32 hex digits, with `-<coding>` after them for a
    /// compressed variant ("" for identity).
    Etag(&'static str),
    /// An IMF-fixdate (a file whose mtime the test does not set).
    Date,
    /// `bytes 0-N/TOTAL` for a range from 0 whose total is the full
    /// representation's length (a compressed variant's: not known ahead).
    RangeFromZero(usize),
}

/// What the body must be.
#[derive(Clone, Copy, Debug)]
enum Body {
    /// None (HEAD, 204, 304).
    Empty,
    /// The site's file at this path, whole.
    File(&'static str),
    /// Bytes `from..=to` of the site's file at this path.
    Slice(&'static str, usize, usize),
    /// The site's file, in the content coding the answer names.
    Coded(&'static str),
    /// The first N bytes of the file's gzip variant (a range of it): they
    /// decode to a prefix of the file.
    GzipPrefix(&'static str, usize),
    /// multipart/byteranges of the site's file: each part's range, with
    /// the file's Content-Type (the second field).
    Parts(&'static str, &'static str, &'static [(usize, usize)]),
    /// A short plain-text error message, and never the file or the secret.
    Message,
}

use Field::*;

const HTML: Field = Is("text/html; charset=utf-8");
const JS: Field = Is("text/javascript; charset=utf-8");
const TEXT: Field = Is("text/plain; charset=utf-8");
const FIXED: Field = Is(FIXED_MTIME_HTTP);
const ALLOW: Field = Is("GET, HEAD, OPTIONS");
const VARY: Field = Is("Accept-Encoding");

/// `/index.html`, whole.
const INDEX_200: Want = Want {
    status: 200,
    fields: &[
        ("content-type", HTML),
        ("etag", IndexEtag),
        ("last-modified", FIXED),
        ("accept-ranges", Is("bytes")),
        ("content-encoding", Absent),
        ("vary", Absent),
    ],
    body: Body::File("index.html"),
};

/// 304 for `/index.html`: its validators, no body, no representation
/// metadata beyond them (RFC 9110 §15.4.5).
const INDEX_304: Want = Want {
    status: 304,
    fields: &[
        ("etag", IndexEtag),
        ("last-modified", FIXED),
        ("content-type", Absent),
        ("content-length", Absent),
    ],
    body: Body::Empty,
};

const INDEX_412: Want = Want {
    status: 412,
    fields: &[("content-type", TEXT), ("etag", Absent)],
    body: Body::Message,
};

const NOT_FOUND: Want = Want {
    status: 404,
    fields: &[("content-type", TEXT), ("etag", Absent)],
    body: Body::Message,
};

const NOT_ALLOWED: Want = Want {
    status: 405,
    fields: &[("allow", ALLOW), ("content-type", TEXT)],
    body: Body::Message,
};

const DIGITS_200: Want = Want {
    status: 200,
    fields: &[
        ("content-type", TEXT),
        ("etag", Etag("")),
        ("last-modified", FIXED),
        ("accept-ranges", Is("bytes")),
    ],
    body: Body::File("digits.txt"),
};

/// `/app.js` whole, in identity.
const APP_JS: Want = Want {
    status: 200,
    fields: &[
        ("content-type", JS),
        ("content-encoding", Absent),
        ("vary", VARY),
        ("etag", Etag("")),
        ("last-modified", Date),
    ],
    body: Body::File("app.js"),
};

/// `/app.js` whole, in the content coding `$coding`.
macro_rules! app_js_in {
    ($coding:literal) => {
        Want {
            status: 200,
            fields: &[
                ("content-type", JS),
                ("content-encoding", Is($coding)),
                ("vary", VARY),
                ("etag", Etag($coding)),
            ],
            body: Body::Coded("app.js"),
        }
    };
}

/// A 206 of `$path` for `$from..=$to`, whose Content-Range is `$range`.
macro_rules! part {
    ($path:literal, $range:literal, $from:expr, $to:expr) => {
        Want {
            status: 206,
            fields: &[
                ("content-range", Is($range)),
                ("accept-ranges", Is("bytes")),
            ],
            body: Body::Slice($path, $from, $to),
        }
    };
}

const fn row(
    method: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    want: Want,
) -> Row {
    Row {
        method,
        path,
        headers,
        want,
    }
}

const TABLE: &[Row] = &[
    row("GET", "/index.html", &[], INDEX_200),
    row("GET", "/", &[], INDEX_200),
    row(
        "GET",
        "/style.css",
        &[],
        Want {
            status: 200,
            fields: &[
                ("content-type", Is("text/css; charset=utf-8")),
                ("etag", Etag("")),
                ("last-modified", FIXED),
            ],
            body: Body::File("style.css"),
        },
    ),
    row(
        "GET",
        "/img.png",
        &[],
        Want {
            status: 200,
            fields: &[
                ("content-type", Is("image/png")),
                ("etag", Etag("")),
                ("vary", Absent),
            ],
            body: Body::File("img.png"),
        },
    ),
    row("GET", "/digits.txt", &[], DIGITS_200),
    row(
        "GET",
        "/dir/",
        &[],
        Want {
            status: 200,
            fields: &[("content-type", HTML), ("last-modified", Date)],
            body: Body::File("dir/index.html"),
        },
    ),
    row(
        "GET",
        "/dir",
        &[],
        Want {
            status: 301,
            fields: &[("location", Is("/dir/"))],
            body: Body::Message,
        },
    ),
    row(
        "GET",
        "/dir?a=1&b=%20x",
        &[],
        Want {
            status: 301,
            fields: &[("location", Is("/dir/?a=1&b=%20x"))],
            body: Body::Message,
        },
    ),
    row("GET", "/index.html?v=1", &[], INDEX_200),
    row("GET", "/nope", &[], NOT_FOUND),
    row("GET", "/nope/deeper.html", &[], NOT_FOUND),
    row(
        "GET",
        "/%2e%2e/secret.txt",
        &[],
        Want {
            status: 400,
            fields: &[("content-type", TEXT)],
            body: Body::Message,
        },
    ),
    row(
        "GET",
        "/big.bin",
        &[],
        Want {
            status: 200,
            fields: &[
                ("content-type", Is("application/octet-stream")),
                ("content-length", Is("307200")),
            ],
            body: Body::File("big.bin"),
        },
    ),
    row(
        "HEAD",
        "/index.html",
        &[],
        Want {
            status: 200,
            fields: &[
                ("content-type", HTML),
                ("content-length", Is("62")),
                ("etag", IndexEtag),
            ],
            body: Body::Empty,
        },
    ),
    row(
        "HEAD",
        "/nope",
        &[],
        Want {
            status: 404,
            fields: &[("content-type", TEXT)],
            body: Body::Empty,
        },
    ),
    row(
        "HEAD",
        "/app.js",
        &[("Accept-Encoding", "br")],
        Want {
            status: 200,
            fields: &[
                ("content-encoding", Is("br")),
                ("vary", VARY),
                ("etag", Etag("br")),
            ],
            body: Body::Empty,
        },
    ),
    row(
        "OPTIONS",
        "/index.html",
        &[],
        Want {
            status: 204,
            fields: &[("allow", ALLOW)],
            body: Body::Empty,
        },
    ),
    row("POST", "/index.html", &[], NOT_ALLOWED),
    row("DELETE", "/index.html", &[], NOT_ALLOWED),
    // Conditionals.
    row(
        "GET",
        "/index.html",
        &[("If-None-Match", "{etag}")],
        INDEX_304,
    ),
    row(
        "GET",
        "/index.html",
        &[("If-None-Match", "\"other\", {etag}")],
        INDEX_304,
    ),
    row(
        "GET",
        "/index.html",
        &[("If-None-Match", "\"other\"")],
        INDEX_200,
    ),
    row("GET", "/index.html", &[("If-None-Match", "*")], INDEX_304),
    row(
        "HEAD",
        "/index.html",
        &[("If-None-Match", "{etag}")],
        INDEX_304,
    ),
    // Not modified since its own mtime; modified since the day before.
    row(
        "GET",
        "/index.html",
        &[("If-Modified-Since", "Sun, 13 Sep 2020 12:26:40 GMT")],
        INDEX_304,
    ),
    row(
        "GET",
        "/index.html",
        &[("If-Modified-Since", "Sat, 12 Sep 2020 12:26:40 GMT")],
        INDEX_200,
    ),
    row("GET", "/index.html", &[("If-Match", "\"nope\"")], INDEX_412),
    row("GET", "/index.html", &[("If-Match", "{etag}")], INDEX_200),
    row(
        "GET",
        "/index.html",
        &[("If-Unmodified-Since", "Sat, 12 Sep 2020 12:26:40 GMT")],
        INDEX_412,
    ),
    // Ranges (`/digits.txt` is 62 bytes, `/big.bin` 307 200).
    row(
        "GET",
        "/digits.txt",
        &[("Range", "bytes=0-9")],
        part!("digits.txt", "bytes 0-9/62", 0, 9),
    ),
    row(
        "GET",
        "/digits.txt",
        &[("Range", "bytes=-5")],
        part!("digits.txt", "bytes 57-61/62", 57, 61),
    ),
    row(
        "GET",
        "/digits.txt",
        &[("Range", "bytes=10-")],
        part!("digits.txt", "bytes 10-61/62", 10, 61),
    ),
    row(
        "GET",
        "/digits.txt",
        &[("Range", "bytes=0-1,4-5")],
        Want {
            status: 206,
            fields: &[("content-range", Absent), ("etag", Etag(""))],
            body: Body::Parts("digits.txt", "text/plain; charset=utf-8", &[(0, 1), (4, 5)]),
        },
    ),
    row(
        "GET",
        "/digits.txt",
        &[("Range", "bytes=100-200")],
        Want {
            status: 416,
            fields: &[("content-range", Is("bytes */62"))],
            body: Body::Message,
        },
    ),
    // An unknown range unit is ignored (RFC 9110 §14.2).
    row("GET", "/digits.txt", &[("Range", "items=0-1")], DIGITS_200),
    row(
        "GET",
        "/big.bin",
        &[("Range", "bytes=100000-200000")],
        part!("big.bin", "bytes 100000-200000/307200", 100_000, 200_000),
    ),
    row(
        "GET",
        "/index.html",
        &[("Range", "bytes=0-3"), ("If-Range", "{etag}")],
        part!("index.html", "bytes 0-3/62", 0, 3),
    ),
    row(
        "GET",
        "/index.html",
        &[("Range", "bytes=0-3"), ("If-Range", "\"stale\"")],
        INDEX_200,
    ),
    // If-None-Match before Range (RFC 9110 §13.2.2).
    row(
        "GET",
        "/index.html",
        &[("Range", "bytes=0-3"), ("If-None-Match", "{etag}")],
        INDEX_304,
    ),
    // Encodings: the server prefers br, then zstd, then gzip; a header
    // that refuses everything still gets identity (crates/http/src/accept.rs).
    row("GET", "/app.js", &[], APP_JS),
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "gzip")],
        app_js_in!("gzip"),
    ),
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br")],
        app_js_in!("br"),
    ),
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "zstd")],
        app_js_in!("zstd"),
    ),
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br;q=0, *")],
        app_js_in!("zstd"),
    ),
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "identity;q=0")],
        APP_JS,
    ),
    row(
        "GET",
        "/img.png",
        &[("Accept-Encoding", "identity;q=0")],
        Want {
            status: 200,
            fields: &[("content-encoding", Absent), ("vary", Absent)],
            body: Body::File("img.png"),
        },
    ),
    // A range of the gzip variant, not of the identity bytes.
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-99")],
        Want {
            status: 206,
            fields: &[
                ("content-encoding", Is("gzip")),
                ("content-range", RangeFromZero(99)),
                ("etag", Etag("gzip")),
            ],
            body: Body::GzipPrefix("app.js", 100),
        },
    ),
    // The identity ETag does not match the br variant's (strong
    // comparison): a 200 in br.
    row(
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br"), ("If-None-Match", "{etag_js}")],
        app_js_in!("br"),
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

/// Whether `value` is a strong ETag of 32 hex digits, followed by
/// `-coding` for a compressed variant.
fn is_etag(value: &str, coding: &str) -> bool {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return false;
    };
    let (hex, suffix) = inner.split_at(inner.len().min(32));
    hex.len() == 32
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && match coding {
            "" => suffix.is_empty(),
            c => suffix.strip_prefix('-') == Some(c),
        }
}

/// `body` decoded from `coding` (gzip, br, zstd).
fn decode(coding: &str, body: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut out = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(body)
            .read_to_end(&mut out)
            .map_err(|e| e.to_string())?,
        "br" => brotli::Decompressor::new(body, 4096)
            .read_to_end(&mut out)
            .map_err(|e| e.to_string())?,
        "zstd" => return zstd::stream::decode_all(body).map_err(|e| e.to_string()),
        other => return Err(format!("unknown coding {other:?}")),
    };
    Ok(out)
}

/// Where `r`, the answer to `row`, differs from what the row wants; the
/// site's files are read from `root`.
fn unmet(row: &Row, r: &Response, root: &Path, etag: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let want = &row.want;
    if r.status != want.status {
        bad.push(format!("status {}, want {}", r.status, want.status));
    }
    for (name, field) in want.fields {
        let got = r.header(name);
        let ok = match (field, got) {
            (Absent, got) => got.is_none(),
            (_, None) => false,
            (Is(v), Some(g)) => g == *v,
            (IndexEtag, Some(g)) => g == etag,
            (Etag(coding), Some(g)) => is_etag(g, coding),
            (Date, Some(g)) => parse_http_date(g).is_some(),
            (RangeFromZero(to), Some(g)) => g
                .strip_prefix(&format!("bytes 0-{to}/"))
                .and_then(|total| total.parse::<usize>().ok())
                .is_some_and(|total| total > *to),
        };
        if !ok {
            bad.push(format!("{name}: {got:?}, want {field:?}"));
        }
    }
    let file = |path: &str| std::fs::read(root.join(path)).expect("the site's file");
    let body = &r.body;
    let body_ok = match want.body {
        Body::Empty => body.is_empty(),
        Body::File(path) => *body == file(path),
        Body::Slice(path, from, to) => *body == file(path)[from..=to],
        Body::Coded(path) => match r.header("content-encoding") {
            Some(coding) => decode(coding, body).is_ok_and(|d| d == file(path)),
            None => false,
        },
        Body::GzipPrefix(path, len) => {
            // A gzip stream cut short decodes to a prefix of the file
            // before the decoder finds it cut.
            let mut got = Vec::new();
            let mut d = flate2::read::GzDecoder::new(&body[..]);
            let mut buf = [0u8; 256];
            while let Ok(n @ 1..) = std::io::Read::read(&mut d, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
            body.len() == len
                && body.starts_with(&[0x1f, 0x8b])
                && !got.is_empty()
                && file(path).starts_with(&got)
        }
        Body::Parts(path, ctype, ranges) => {
            let whole = file(path);
            r.header("content-type")
                .filter(|c| c.starts_with("multipart/byteranges"))
                .and_then(boundary_of)
                .and_then(|b| parse_multipart(body, &b).ok())
                .is_some_and(|parts| {
                    parts.len() == ranges.len()
                        && parts.iter().zip(ranges).all(|(p, &(from, to))| {
                            p.header("content-type") == Some(ctype)
                                && p.header("content-range")
                                    == Some(&format!("bytes {from}-{to}/{}", whole.len()))
                                && p.data == whole[from..=to]
                        })
                })
        }
        Body::Message => {
            let text = String::from_utf8_lossy(body);
            !body.is_empty()
                && body.len() < 200
                && text.ends_with('\n')
                && !text.contains(SECRET)
                && r.header("content-type") == Some("text/plain; charset=utf-8")
        }
    };
    if !body_ok {
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        bad.push(format!(
            "body ({} bytes: {shown:?}), want {:?}",
            body.len(),
            want.body
        ));
    }
    // A body that is sent says its length (HEAD, 204 and 304 send none).
    if row.method != "HEAD" && !matches!(r.status, 204 | 304) {
        let length = body.len().to_string();
        if r.header("content-length") != Some(length.as_str()) {
            bad.push(format!(
                "content-length {:?} for a {}-byte body",
                r.header("content-length"),
                body.len()
            ));
        }
    }
    bad
}

fn fill(value: &str, etag: &str, etag_js: &str) -> String {
    value.replace("{etag}", etag).replace("{etag_js}", etag_js)
}

/// Sends the table over HTTP/1.1 (`h1_transport`) and over h2 (`target`):
/// every answer must be what its row wants, and each h2 answer the same
/// as its HTTP/1.1 twin.
fn compare(
    both: &Both,
    root: &Path,
    h1_transport: Transport,
    target: &Target,
    py: &std::path::Path,
) {
    let mut h1 = both.tls.wire(h1_transport);
    let etag = h1.roundtrip(&get("/index.html")).must("etag").to_owned();
    let etag_js = h1.roundtrip(&get("/app.js")).must("etag").to_owned();
    assert!(is_etag(&etag, ""), "{etag}");
    let mut requests = Vec::new();
    let mut h1_answers = Vec::new();
    for row in TABLE {
        let headers: Vec<(String, String)> = row
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), fill(v, &etag, &etag_js)))
            .collect();
        let mut raw = format!(
            "{} {} HTTP/1.1\r\nHost: localhost\r\n",
            row.method, row.path
        );
        for (k, v) in &headers {
            raw.push_str(&format!("{k}: {v}\r\n"));
        }
        if matches!(row.method, "POST" | "DELETE") {
            raw.push_str("Content-Length: 0\r\n");
        }
        raw.push_str("\r\n");
        let r = h1.roundtrip(&raw);
        if r.says_close() {
            h1 = both.tls.wire(h1_transport);
        }
        h1_answers.push(r);
        requests.push(serde_json::json!({
            "method": row.method, "path": row.path, "headers": headers,
        }));
    }
    let input = serde_json::Value::Array(requests).to_string();
    let v = h2::probe_with_input(py, "fetch", target, &[], &input);
    let responses = v["responses"].as_array().unwrap();
    assert_eq!(responses.len(), TABLE.len(), "{}: {v}", target.name());
    let mut unmet_rows = Vec::new();
    let mut mismatches = Vec::new();
    for ((row, h1r), h2v) in TABLE.iter().zip(&h1_answers).zip(responses) {
        let what = format!("{} {} {:?}", row.method, row.path, row.headers);
        assert_eq!(h2v["complete"], true, "{what}: {h2v}");
        let h2r = h2::fetched(h2v);
        for (k, _) in &h2r.headers {
            assert!(
                !SKIP[1..].contains(&k.as_str()),
                "{what}: {k} in an h2 response"
            );
        }
        for (proto, r) in [("HTTP/1.1", h1r), ("h2", &h2r)] {
            let bad = unmet(row, r, root, &etag);
            if !bad.is_empty() {
                unmet_rows.push(format!("{what} over {proto}:\n    {}", bad.join("\n    ")));
            }
        }
        if normal(h1r) != normal(&h2r) {
            mismatches.push(format!("{what}\n  HTTP/1.1: {h1r:?}\n  h2: {h2r:?}"));
        }
    }
    assert!(
        unmet_rows.is_empty(),
        "{}: {} answers are not what the table wants:\n{}",
        target.name(),
        unmet_rows.len(),
        unmet_rows.join("\n")
    );
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
    compare(&both, &site.root, Transport::Plain, &both.h2c(), &py);
}

#[test]
fn h2_over_tls_answers_as_http11_over_tls_does() {
    let Some(py) = h2::python_or_skip("h2 semantics table") else {
        return;
    };
    let site = h2_site("h2-semantics-tls");
    let both = Both::start(&site, &[]);
    compare(&both, &site.root, Transport::Tls, &both.h2(), &py);
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
