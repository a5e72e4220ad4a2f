//! Malformed and over-limit requests: each gets the right status with a short
//! body, and the server closes the connection afterwards.

use crate::support;

use std::time::{Duration, Instant};

use support::*;

fn start(tag: &str, extra: &[&str]) -> (Site, Server) {
    let site = Site::new(tag);
    let server = Server::start(&site.root, extra);
    (site, server)
}

/// Sends `raw` on a fresh connection and expects `want`, a body, then close.
#[track_caller]
fn expect_error(server: &Server, raw: &[u8], want: u16, what: &str) -> Response {
    let mut c = server.connect();
    // The server may answer and close before reading everything we send; a
    // failed write is then fine, the response is what matters.
    let _ = c.try_send(raw);
    assert_error_then_close(&mut c, want, what)
}

/// `expect_error` for each `(raw request, what)` of `cases`.
#[track_caller]
fn expect_errors(server: &Server, want: u16, cases: &[(&[u8], &str)]) {
    for (raw, what) in cases {
        expect_error(server, raw, want, what);
    }
}

/// A GET whose target is `/` and `len` times `a`.
fn long_target(len: usize) -> String {
    format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(len))
}

/// A GET for /index.html with one extra header whose value is `len` bytes.
fn with_header(name: &str, len: usize) -> String {
    format!(
        "GET /index.html HTTP/1.1\r\nHost: x\r\n{name}: {}\r\n\r\n",
        "b".repeat(len)
    )
}

/// A `method` for /index.html carrying `body` (with its Content-Length),
/// pipelined with a GET for /style.css in the same write.
fn with_body_then_style(method: &str, body: &str) -> String {
    format!(
        "{method} /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}{}",
        body.len(),
        get("/style.css")
    )
}

#[test]
fn malformed_request_line_is_400() {
    let (_site, server) = start("garbage", &[]);
    expect_errors(
        &server,
        400,
        &[
            (b"GARBAGE\r\n\r\n", "GARBAGE"),
            (b"GET\r\n\r\n", "method only"),
            (
                b"GET /index.html HTTP/1.1 extra\r\nHost: x\r\n\r\n",
                "extra token",
            ),
            (
                b"GET /index.html HTTP/1.1\r\nBad Header\r\n\r\n",
                "header without colon",
            ),
            // Issue 24: a raw space in the target is a broken request
            // line (RFC 9112 §3.2), not a version to refuse with 505.
            (
                b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
                "raw space in the target",
            ),
            (
                b"GET /a b c HTTP/2.0\r\nHost: x\r\n\r\n",
                "raw spaces before another version",
            ),
        ],
    );
}

/// RFC 9110 §9.1: a method the server does not know is a 501; known
/// methods it does not allow stay 405 with `Allow` (http_semantics). The
/// connection stays usable: the request's framing was fine.
#[test]
fn unknown_methods_are_501() {
    let (_site, server) = start("501", &[]);
    let mut c = server.connect();
    for method in ["FOO", "get", "BREW"] {
        let r = c.roundtrip(&request(method, "/index.html", &[]));
        assert_eq!(r.status, 501, "{method}: {r:?}");
        assert_common_headers(&r, method);
        assert!(!r.says_close(), "{method}: {r:?}");
        assert_eq!(r.header("allow"), None, "{method}: {r:?}");
    }
    for method in ["POST", "PATCH", "PROPFIND"] {
        let r = c.roundtrip(&request(method, "/index.html", &[]));
        assert_eq!(r.status, 405, "{method}: {r:?}");
        assert_eq!(r.must("allow"), "GET, HEAD, OPTIONS", "{method}");
    }
    assert_eq!(c.roundtrip(&get("/style.css")).body, STYLE_CSS);
}

#[test]
fn http11_without_host_is_400() {
    let (_site, server) = start("no-host", &[]);
    expect_errors(
        &server,
        400,
        &[
            (
                b"GET /index.html HTTP/1.1\r\nAccept: */*\r\n\r\n",
                "no Host",
            ),
            (
                b"GET /index.html HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                "two Host headers",
            ),
        ],
    );
}

#[test]
fn content_length_with_transfer_encoding_is_400() {
    let (_site, server) = start("cl-te", &[]);
    // The "body" is a smuggled request; it must never be answered.
    let raw = b"GET /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\
                Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /style.css HTTP/1.1\r\nHost: x\r\n\r\n";
    expect_error(&server, raw, 400, "CL + TE");
}

/// A chunked request, its body split into `pieces` on the wire.
fn chunked_head(method: &str, path: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
}

/// Issue 24: every `Transfer-Encoding` body got 413, even the zero-length
/// chunked one README promises to discard. A chunked body is read past
/// (extensions and trailers included) and the next request answered; the
/// request spelled inside its data never is.
#[test]
fn chunked_bodies_are_discarded_like_content_length_ones() {
    let (_site, server) = start("te-chunked", &[]);
    // A zero-length body, pipelined with the next request.
    let mut c = server.connect();
    c.send(
        format!(
            "{}0\r\n\r\n{}",
            chunked_head("GET", "/index.html"),
            get("/style.css")
        )
        .as_bytes(),
    );
    let first = c.read_response().expect("first response");
    assert_eq!(
        (first.status, &first.body[..]),
        (200, INDEX_HTML),
        "{first:?}"
    );
    assert!(!first.says_close(), "{first:?}");
    let second = c.read_response().expect("second response");
    assert_eq!(
        (second.status, &second.body[..]),
        (200, STYLE_CSS),
        "{second:?}"
    );

    // Chunks with extensions, a request hidden in the data, trailers, and
    // the framing cut anywhere by the writes; the connection stays up.
    let hidden = "GET /digits.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    let body = format!(
        "{:x};name=value;q=\"a;b\"\r\n{hidden}\r\n3\r\nabc\r\n0;last\r\nExpires: never\r\nX-Sum: 1\r\n\r\n",
        hidden.len()
    );
    for method in ["GET", "HEAD", "POST"] {
        c.send(chunked_head(method, "/index.html").as_bytes());
        let r = c
            .read_response_to(method)
            .expect("answer to the chunked request");
        let want = if method == "POST" { 405 } else { 200 };
        assert_eq!(r.status, want, "{method}: {r:?}");
        for piece in body.as_bytes().chunks(7) {
            c.send(piece);
            std::thread::sleep(Duration::from_millis(2));
        }
        c.send(get("/style.css").as_bytes());
        let next = c.read_response().expect("the request after the body");
        assert_eq!(
            (next.status, &next.body[..]),
            (200, STYLE_CSS),
            "after {method}: {next:?}"
        );
    }
}

/// A chunked body's length shows only as it arrives: the answer goes out,
/// then a body past `max_discard_bytes` (framing included) or with broken
/// framing closes the connection, and what follows is never answered.
#[test]
fn chunked_bodies_too_large_or_broken_close_after_the_answer() {
    let (_site, server) = start("te-chunked-limit", &["--max-discard-bytes", "100"]);
    let within = format!("59\r\n{}\r\n0\r\n\r\n", "x".repeat(89));
    assert_eq!(within.len(), 100);
    let over = format!("5a\r\n{}\r\n0\r\n\r\n", "x".repeat(90));
    let mut c = server.connect();
    c.send(
        format!(
            "{}{within}{}",
            chunked_head("GET", "/index.html"),
            get("/style.css")
        )
        .as_bytes(),
    );
    assert_eq!(c.read_response().expect("first").body, INDEX_HTML);
    assert_eq!(c.read_response().expect("second").body, STYLE_CSS);
    for (body, what) in [
        (over.as_str(), "101 bytes with a limit of 100"),
        ("zz\r\n\r\n", "a chunk size that is not hex"),
        ("5\r\nhello0\r\n\r\n", "chunk data without its CRLF"),
        ("5\nhello\r\n0\r\n\r\n", "a bare LF"),
    ] {
        let mut c = server.connect();
        let _ = c.try_send(
            format!(
                "{}{body}{}",
                chunked_head("GET", "/index.html"),
                get("/style.css")
            )
            .as_bytes(),
        );
        let r = c.read_response().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!((r.status, &r.body[..]), (200, INDEX_HTML), "{what}: {r:?}");
        assert_closed(&mut c, what);
    }
}

/// RFC 9112 §6.1, §6.3: a coding other than `chunked` is 501, `chunked`
/// not last is 400, and so is Transfer-Encoding from an HTTP/1.0 client;
/// each closes, and the request in the "body" is never answered.
#[test]
fn transfer_codings_other_than_chunked_are_refused() {
    let (_site, server) = start("te-codings", &[]);
    for (te, version, want) in [
        ("gzip", "1.1", 501),
        ("gzip, chunked", "1.1", 501),
        ("identity", "1.1", 501),
        ("chunked, gzip", "1.1", 400),
        ("chunked, chunked", "1.1", 400),
        ("chunked", "1.0", 400),
    ] {
        let raw = format!(
            "POST /index.html HTTP/{version}\r\nHost: x\r\nTransfer-Encoding: {te}\r\n\r\n\
             0\r\n\r\n{}",
            get("/style.css")
        );
        expect_error(
            &server,
            raw.as_bytes(),
            want,
            &format!("{te:?} over HTTP/{version}"),
        );
    }
}

#[test]
fn bad_content_length_is_400() {
    let (_site, server) = start("bad-cl", &[]);
    for (cl, what) in [("abc", "non-numeric"), ("-1", "negative"), ("5, 6", "list")] {
        let raw = format!("GET /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n");
        expect_error(&server, raw.as_bytes(), 400, what);
    }
}

#[test]
fn long_uri_is_414() {
    let (_site, server) = start("414", &[]);
    expect_error(&server, long_target(5000).as_bytes(), 414, "5000-byte URI");
    // Just under the limit is merely a 404.
    let ok = server.get(&format!("/{}", "a".repeat(4000)));
    assert_eq!(ok.status, 404, "{ok:?}");

    let (_site, server) = start("414-flag", &["--max-uri-bytes", "100"]);
    expect_error(
        &server,
        long_target(200).as_bytes(),
        414,
        "200-byte URI, limit 100",
    );
    assert_eq!(server.get(&format!("/{}", "a".repeat(50))).status, 404);
}

#[test]
fn too_many_headers_is_431() {
    let (_site, server) = start("431-count", &[]);
    let mut raw = String::from("GET /index.html HTTP/1.1\r\nHost: x\r\n");
    for i in 0..101 {
        raw.push_str(&format!("X-H{i}: v\r\n"));
    }
    raw.push_str("\r\n");
    expect_error(&server, raw.as_bytes(), 431, "101 headers");
}

#[test]
fn oversized_head_is_431() {
    let (_site, server) = start("431-size", &[]);
    let raw = with_header("X-Big", 9000);
    expect_error(&server, raw.as_bytes(), 431, "9000-byte header");
}

#[test]
fn head_limit_is_configurable() {
    let (_site, server) = start(
        "431-flag",
        &["--max-head-bytes", "1024", "--max-uri-bytes", "512"],
    );
    let raw = with_header("X-Big", 2000);
    expect_error(
        &server,
        raw.as_bytes(),
        431,
        "2000-byte header, 1 KiB limit",
    );
    let r = server.send(&with_header("X-Small", 500));
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn unsupported_versions_are_505() {
    let (_site, server) = start("505", &[]);
    expect_errors(
        &server,
        505,
        &[
            (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/2.0"),
            (b"GET / HTTP/1.2\r\nHost: x\r\n\r\n", "HTTP/1.2"),
        ],
    );
}

#[test]
fn slow_head_times_out_with_408() {
    let (_site, server) = start("408", &["--header-timeout", "1"]);
    let mut c = server.connect();
    c.set_read_timeout(Duration::from_secs(6));
    let start = Instant::now();
    c.send(b"GET /index.html HTTP/1.1\r\nHost: x\r\n");
    let r = c.read_response().expect("408 response");
    let took = start.elapsed();
    assert_eq!(r.status, 408, "{r:?}");
    assert!(took < Duration::from_secs(3), "408 after {took:?}");
    assert!(
        took >= Duration::from_millis(900),
        "408 too early: {took:?}"
    );
    assert!(!r.body.is_empty());
    assert_common_headers(&r, "GET");
    assert_closed(&mut c, "after 408");
}

/// A partial head that comes in while a response waits for a slow reader
/// keeps its header timeout: the wait for the write (60 s here) is over
/// once the reader catches up, and a slow head must not borrow it (nor may
/// a head behind a TLS flight still in a ring send, where CI first saw it).
#[test]
fn slow_head_behind_a_blocked_response_times_out_with_408() {
    let site = Site::new("408-behind");
    let body = vec![b'x'; 8 << 20];
    site.write("big.bin", &body);
    let server = Server::start(&site.root, &["--header-timeout", "1"]);
    let mut c = server.connect();
    c.set_read_timeout(Duration::from_secs(6));
    let start = Instant::now();
    c.send(format!("{}GET /index.html HTTP/1.1\r\nHost: x\r\n", get("/big.bin")).as_bytes());
    // Not read for a while: the 8 MiB fills the socket buffers, and the
    // partial head was read meanwhile.
    std::thread::sleep(Duration::from_millis(300));
    let big = c.read_response().expect("the 8 MiB response");
    assert_eq!(big.status, 200, "{big:?}");
    assert_eq!(big.body.len(), body.len());
    let r = c.read_response().expect("408 response");
    let took = start.elapsed();
    assert_eq!(r.status, 408, "{r:?}");
    assert!(took < Duration::from_secs(3), "408 after {took:?}");
    assert_closed(&mut c, "after 408");
}

#[test]
fn silent_connection_is_closed_after_header_timeout() {
    let (_site, server) = start("408-silent", &["--header-timeout", "1"]);
    let mut c = server.connect();
    // No byte sent: the server may send a 408 or just close, but must not
    // keep the socket.
    c.set_read_timeout(Duration::from_secs(4));
    match c.read_response() {
        Ok(r) => {
            assert_eq!(r.status, 408, "{r:?}");
            assert_closed(&mut c, "after silent 408");
        }
        Err(ReadError::Closed) => {}
        Err(e) => panic!("silent connection not closed in time: {e}"),
    }
}

#[test]
fn small_body_on_get_is_discarded() {
    let (_site, server) = start("discard", &[]);
    let mut c = server.connect();
    c.send(with_body_then_style("GET", "0123456789").as_bytes());
    let first = c.read_response().expect("first response");
    let second = c.read_response().expect("second response");
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, INDEX_HTML);
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.body, STYLE_CSS);
}

#[test]
fn body_sent_after_head_is_discarded() {
    let (_site, server) = start("discard-split", &[]);
    let mut c = server.connect();
    c.send(b"GET /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n");
    let first = c.read_response().expect("first response");
    assert_eq!(first.status, 200, "{first:?}");
    // The body arrives late, glued to the next request.
    c.send(format!("abcdef{}", get("/style.css")).as_bytes());
    let second = c.read_response().expect("second response");
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.body, STYLE_CSS);
}

#[test]
fn body_over_discard_limit_is_413() {
    let (_site, server) = start("413", &[]);
    expect_error(
        &server,
        b"GET /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
        413,
        "Content-Length 100000",
    );
    let (_site, server) = start("413-flag", &["--max-discard-bytes", "100"]);
    expect_error(
        &server,
        b"GET /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n",
        413,
        "Content-Length 101 with limit 100",
    );
}

#[test]
fn errors_do_not_kill_the_server() {
    let (_site, server) = start("survive", &[]);
    for raw in [
        &b"\x00\x01\x02\x03\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=5-1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: \xff\r\n\r\n",
    ] {
        let mut c = server.connect();
        c.set_read_timeout(Duration::from_secs(2));
        let _ = c.try_send(raw);
        // Any answer or a close is fine; the server must live on.
        if let Err(e @ ReadError::Timeout { .. }) = c.read_response() {
            panic!("{:?}: {e}", String::from_utf8_lossy(raw));
        }
    }
    let r = server.get("/index.html");
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn disallowed_method_with_body_does_not_desync() {
    let (_site, server) = start("405-body", &[]);
    let mut c = server.connect();
    // The POST body must be skipped (or the connection closed), never parsed
    // as the next request.
    c.send(with_body_then_style("POST", "GET /secret HTTP/1.1\n").as_bytes());
    let r = c.read_response_to("POST").expect("405 response");
    assert_eq!(r.status, 405, "{r:?}");
    assert!(
        !r.body.is_empty() && !r.body.starts_with(b"HTTP/"),
        "the 405 announced a body it did not send; its `body` is the next response: {r:?}"
    );
    if r.says_close() {
        assert_closed(&mut c, "after 405 with Connection: close");
        return;
    }
    let next = c.read_response().expect("response after the POST");
    assert_eq!(next.status, 200, "{next:?}");
    assert_eq!(next.body, STYLE_CSS);
}
