//! HTTP semantics of successful responses: headers, validators, HEAD,
//! conditional requests, ranges, methods and directory redirects, checked
//! against the real binary over raw sockets.

use crate::support;

use support::*;

#[test]
fn get_200_carries_the_standard_headers() {
    // The harness's own date code agrees with the fixture constant.
    assert_eq!(fmt_http_date(fixed_mtime()), FIXED_MTIME_HTTP);
    assert_eq!(parse_http_date(FIXED_MTIME_HTTP), Some(fixed_mtime()));
    let site = Site::new("std-headers");
    let server = Server::start(&site.root, &[]);
    for (path, body, ctype) in [
        (
            "/index.html",
            INDEX_HTML.to_vec(),
            "text/html; charset=utf-8",
        ),
        ("/style.css", STYLE_CSS.to_vec(), "text/css; charset=utf-8"),
        ("/img.png", png_bytes(), "image/png"),
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_common_headers(&r, "GET");
        assert_eq!(r.body, body, "{path}: body");
        assert_eq!(r.must("server"), "shardhttpd", "{path}");
        assert_eq!(r.must("content-type"), ctype, "{path}");
        assert_eq!(r.must("last-modified"), FIXED_MTIME_HTTP, "{path}");
        assert_eq!(r.must("accept-ranges"), "bytes", "{path}");
        let etag = r.must("etag");
        assert!(
            etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'),
            "{path}: ETag {etag:?} is not a strong quoted tag"
        );
        assert_eq!(r.header_count("etag"), 1, "{path}");
    }
}

#[test]
fn empty_server_header_flag_removes_server_header() {
    let site = Site::new("no-server");
    let server = Server::start(&site.root, &["--server-header", ""]);
    let ok = server.get("/index.html");
    assert_eq!(ok.status, 200, "{ok:?}");
    assert!(ok.header("server").is_none(), "{ok:?}");
    let missing = server.get("/nope.txt");
    assert_eq!(missing.status, 404, "{missing:?}");
    assert!(missing.header("server").is_none(), "{missing:?}");
}

#[test]
fn custom_server_header_is_used_on_errors_too() {
    let site = Site::new("custom-server");
    let server = Server::start(&site.root, &["--server-header", "test-srv/1"]);
    assert_eq!(server.get("/index.html").must("server"), "test-srv/1");
    assert_eq!(server.get("/nope").must("server"), "test-srv/1");
}

#[test]
fn etag_follows_content_not_path_or_process() {
    let site = Site::new("etag");
    let (tag1, tag2, tag_other) = {
        let server = Server::start(&site.root, &[]);
        let a = server.get("/copy1.txt");
        let b = server.get("/copy2.txt");
        let c = server.get("/digits.txt");
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(b.status, 200, "{b:?}");
        (
            a.must("etag").to_string(),
            b.must("etag").to_string(),
            c.must("etag").to_string(),
        )
    };
    assert_eq!(tag1, tag2, "same content in two files, same ETag");
    assert_ne!(tag1, tag_other, "different content, different ETag");

    let server = Server::start(&site.root, &[]);
    assert_eq!(
        server.get("/copy1.txt").must("etag"),
        tag1,
        "ETag must survive a restart"
    );
}

#[test]
fn head_has_get_headers_and_no_body() {
    let site = Site::new("head");
    let server = Server::start(&site.root, &[]);
    let mut c = server.connect();
    // HEAD, then GET of the same file, then GET of another: if HEAD leaked a
    // body, the second response would not parse.
    let raw = format!(
        "{}{}{}",
        request("HEAD", "/digits.txt", &[]),
        get("/digits.txt"),
        get("/style.css")
    );
    c.send(raw.as_bytes());
    let head = c.read_response_to("HEAD").expect("HEAD response");
    let full = c.read_response().expect("GET after HEAD");
    let css = c.read_response().expect("second GET after HEAD");
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(full.status, 200, "{full:?}");
    assert_eq!(full.body, DIGITS);
    assert_eq!(css.body, STYLE_CSS);
    assert_common_headers(&head, "HEAD");
    for name in [
        "content-length",
        "content-type",
        "etag",
        "last-modified",
        "accept-ranges",
        "server",
    ] {
        assert_eq!(head.header(name), full.header(name), "HEAD vs GET {name}");
    }
    assert_eq!(head.content_length(), Some(DIGITS.len() as u64));
}

/// ETag and Last-Modified of `/digits.txt`.
fn validators(server: &Server) -> (String, String) {
    let r = server.get("/digits.txt");
    assert_eq!(r.status, 200, "{r:?}");
    (
        r.must("etag").to_string(),
        r.must("last-modified").to_string(),
    )
}

/// Sends `GET /digits.txt` with `headers`, followed by a pipelined plain GET
/// that must parse right after (so a 304 with a body fails), and returns the
/// first response.
fn conditional(server: &Server, headers: &[(&str, &str)]) -> Response {
    let mut c = server.connect();
    let raw = format!(
        "{}{}",
        request("GET", "/digits.txt", headers),
        get("/style.css")
    );
    c.send(raw.as_bytes());
    let r = c
        .read_response()
        .unwrap_or_else(|e| panic!("{headers:?}: {e}"));
    let next = c
        .read_response()
        .unwrap_or_else(|e| panic!("after {headers:?}: {e}"));
    assert_eq!(next.status, 200, "response after {headers:?}: {next:?}");
    assert_eq!(next.body, STYLE_CSS, "response after {headers:?}");
    r
}

#[test]
fn if_none_match_and_if_modified_since_give_304() {
    let site = Site::new("304");
    let server = Server::start(&site.root, &[]);
    let (etag, lm) = validators(&server);
    let list = format!("\"not-it\", {etag}, \"also-not\"");
    let weak = format!("W/{etag}");
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("exact tag", vec![("If-None-Match", etag.as_str())]),
        ("list with tag", vec![("If-None-Match", list.as_str())]),
        ("weak form", vec![("If-None-Match", weak.as_str())]),
        ("star", vec![("If-None-Match", "*")]),
        (
            "IMS = Last-Modified",
            vec![("If-Modified-Since", lm.as_str())],
        ),
    ];
    for (what, headers) in cases {
        let r = conditional(&server, &headers);
        assert_eq!(r.status, 304, "{what}: {r:?}");
        assert!(r.body.is_empty());
        assert_common_headers(&r, "GET");
        assert_eq!(r.header("etag"), Some(etag.as_str()), "{what}: {r:?}");
        assert_eq!(
            r.header("last-modified"),
            Some(lm.as_str()),
            "{what}: {r:?}"
        );
        if let Some(cl) = r.header("content-length") {
            // RFC 9110 §8.6: on 304 it may only be the selected representation's
            // length.
            assert_eq!(cl, DIGITS.len().to_string(), "{what}: {r:?}");
        }
    }
}

#[test]
fn conditionals_that_do_not_match_give_200() {
    let site = Site::new("not-304");
    let server = Server::start(&site.root, &[]);
    let (_etag, lm) = validators(&server);
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("other tag", vec![("If-None-Match", "\"other\"")]),
        (
            "IMS ignored when INM present and not matching",
            vec![
                ("If-None-Match", "\"other\""),
                ("If-Modified-Since", lm.as_str()),
            ],
        ),
        (
            "IMS before Last-Modified",
            vec![("If-Modified-Since", "Wed, 01 Jan 2014 00:00:00 GMT")],
        ),
        ("unparseable IMS", vec![("If-Modified-Since", "yesterday")]),
    ];
    for (what, headers) in cases {
        let r = conditional(&server, &headers);
        assert_eq!(r.status, 200, "{what}: {r:?}");
        assert_eq!(r.body, DIGITS, "{what}");
    }
}

#[test]
fn failed_preconditions_give_412() {
    let site = Site::new("412");
    let server = Server::start(&site.root, &[]);
    let (etag, lm) = validators(&server);
    for (what, headers, want) in [
        ("If-Match other", vec![("If-Match", "\"nope\"")], 412),
        ("If-Match current", vec![("If-Match", etag.as_str())], 200),
        ("If-Match star", vec![("If-Match", "*")], 200),
        (
            "IUS before Last-Modified",
            vec![("If-Unmodified-Since", "Wed, 01 Jan 2014 00:00:00 GMT")],
            412,
        ),
        (
            "IUS = Last-Modified",
            vec![("If-Unmodified-Since", lm.as_str())],
            200,
        ),
    ] {
        let r = conditional(&server, &headers);
        assert_eq!(r.status, want, "{what}: {r:?}");
        assert_common_headers(&r, "GET");
        if want == 200 {
            assert_eq!(r.body, DIGITS, "{what}");
        }
    }
}

fn range(server: &Server, headers: &[(&str, &str)]) -> Response {
    let r = conditional(server, headers);
    assert_common_headers(&r, "GET");
    r
}

#[test]
fn single_ranges() {
    let site = Site::new("ranges");
    let server = Server::start(&site.root, &[]);
    let len = DIGITS.len();
    for (spec, lo, hi) in [
        ("bytes=0-4", 0, 4),
        ("bytes=-3", len - 3, len - 1),
        ("bytes=5-", 5, len - 1),
        ("bytes=10-10", 10, 10),
        ("bytes=50-999", 50, len - 1),
    ] {
        let r = range(&server, &[("Range", spec)]);
        assert_eq!(r.status, 206, "{spec}: {r:?}");
        assert_eq!(
            r.must("content-range"),
            format!("bytes {lo}-{hi}/{len}"),
            "{spec}"
        );
        assert_eq!(r.body, &DIGITS[lo..=hi], "{spec}");
        assert!(r.header("etag").is_some(), "{spec}: 206 keeps ETag");
    }
}

#[test]
fn multiple_ranges_are_multipart() {
    let site = Site::new("multipart");
    let server = Server::start(&site.root, &[]);
    let len = DIGITS.len();
    let full_type = server.get("/digits.txt").must("content-type").to_string();
    let r = range(&server, &[("Range", "bytes=0-1,4-5")]);
    assert_eq!(r.status, 206, "{r:?}");
    let ctype = r.must("content-type");
    assert!(
        ctype.starts_with("multipart/byteranges"),
        "Content-Type {ctype:?}"
    );
    let boundary = boundary_of(ctype).expect("boundary parameter");
    let parts = parse_multipart(&r.body, &boundary).expect("multipart body");
    assert_eq!(parts.len(), 2, "{r:?}");
    for (part, (lo, hi)) in parts.iter().zip([(0usize, 1usize), (4, 5)]) {
        assert_eq!(part.header("content-type"), Some(full_type.as_str()));
        assert_eq!(
            part.header("content-range"),
            Some(format!("bytes {lo}-{hi}/{len}").as_str())
        );
        assert_eq!(part.data, &DIGITS[lo..=hi]);
    }
    // Each multipart response has a boundary of its own, as nginx's
    // counter gives: asked twice on one connection (so of one shard), the
    // same ranges come in two different envelopes.
    let mut c = server.connect();
    let ask = request("GET", "/digits.txt", &[("Range", "bytes=0-1,4-5")]);
    let boundaries: Vec<String> = (0..2)
        .map(|_| {
            let r = c.roundtrip(&ask);
            assert_eq!(r.status, 206, "{r:?}");
            boundary_of(r.must("content-type")).expect("boundary parameter")
        })
        .collect();
    assert_ne!(
        boundaries[0], boundaries[1],
        "one boundary for two responses"
    );
}

#[test]
fn range_count_limit() {
    let site = Site::new("max-ranges");
    let server = Server::start(&site.root, &[]);
    let spec = |n: usize| {
        let list: Vec<String> = (0..n).map(|i| format!("{}-{}", 3 * i, 3 * i)).collect();
        format!("bytes={}", list.join(","))
    };
    let sixteen = range(&server, &[("Range", spec(16).as_str())]);
    assert_eq!(sixteen.status, 206, "16 ranges are allowed: {sixteen:?}");
    let boundary = boundary_of(sixteen.must("content-type")).expect("boundary");
    let parts = parse_multipart(&sixteen.body, &boundary).expect("multipart");
    assert_eq!(parts.len(), 16);
    assert_eq!(parts[15].data, &DIGITS[45..46]);

    let seventeen = range(&server, &[("Range", spec(17).as_str())]);
    assert_eq!(
        seventeen.status, 200,
        "over 16 ranges → full body: {seventeen:?}"
    );
    assert_eq!(seventeen.body, DIGITS);

    let server = Server::start(&site.root, &["--max-ranges", "2"]);
    let two = range(&server, &[("Range", spec(2).as_str())]);
    assert_eq!(two.status, 206, "2 ranges with --max-ranges 2: {two:?}");
    let three = range(&server, &[("Range", spec(3).as_str())]);
    assert_eq!(three.status, 200, "3 ranges with --max-ranges 2: {three:?}");
    assert_eq!(three.body, DIGITS);
}

/// Issue 24: 16 × `bytes=0-` on a 30 MB file gave a 206 of 480 MB. Ranges
/// that add up to more than the file get the file once, with 200 (as
/// nginx); overlapping ranges that stay within its size keep their 206.
#[test]
fn overlapping_ranges_past_the_file_size_get_the_whole_file_once() {
    let site = Site::new("range-overlap");
    // Above `sendfile_threshold`: sent from the file, as the report's was.
    let big: Vec<u8> = (0..2 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    site.write("big.bin", &big);
    let server = Server::start(&site.root, &[]);
    let sixteen = vec!["0-"; 16].join(",");
    for (path, body) in [("/big.bin", &big[..]), ("/digits.txt", DIGITS)] {
        let r = server.send(&request(
            "GET",
            path,
            &[("Range", &format!("bytes={sixteen}"))],
        ));
        assert_eq!(r.status, 200, "{path}: {:?}", r.status);
        assert_eq!(r.header("content-range"), None, "{path}");
        assert_eq!(r.content_length(), Some(body.len() as u64), "{path}");
        assert!(r.body == body, "{path}: the whole file, once");
    }
    let len = DIGITS.len();
    for spec in ["bytes=0-40,30-", "bytes=-40,0-30", "bytes=0-,0-0"] {
        let r = range(&server, &[("Range", spec)]);
        assert_eq!(r.status, 200, "{spec}: {r:?}");
        assert_eq!(r.body, DIGITS, "{spec}");
    }
    // Overlapping, but not more than the file: still a 206.
    let r = range(&server, &[("Range", "bytes=0-9,5-14")]);
    assert_eq!(r.status, 206, "{r:?}");
    let boundary = boundary_of(r.must("content-type")).expect("boundary");
    let parts = parse_multipart(&r.body, &boundary).expect("multipart");
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[1].data, &DIGITS[5..15]);
    assert_eq!(
        parts[1].header("content-range"),
        Some(format!("bytes 5-14/{len}").as_str())
    );
}

#[test]
fn unsatisfiable_range_is_416() {
    let site = Site::new("416");
    let server = Server::start(&site.root, &[]);
    let r = range(&server, &[("Range", "bytes=999999-")]);
    assert_eq!(r.status, 416, "{r:?}");
    assert_eq!(r.must("content-range"), format!("bytes */{}", DIGITS.len()));
}

#[test]
fn if_range() {
    let site = Site::new("if-range");
    let server = Server::start(&site.root, &[]);
    let (etag, lm) = validators(&server);
    let with = |if_range: &str| range(&server, &[("Range", "bytes=0-4"), ("If-Range", if_range)]);
    let current = with(&etag);
    assert_eq!(current.status, 206, "If-Range current ETag: {current:?}");
    assert_eq!(current.body, &DIGITS[..5]);
    let old = with("\"an-old-etag\"");
    assert_eq!(old.status, 200, "If-Range old ETag: {old:?}");
    assert_eq!(old.body, DIGITS);
    let date = with(&lm);
    assert_eq!(date.status, 206, "If-Range Last-Modified: {date:?}");
    assert_eq!(date.body, &DIGITS[..5]);
    let old_date = with("Wed, 01 Jan 2014 00:00:00 GMT");
    assert_eq!(old_date.status, 200, "If-Range old date: {old_date:?}");
}

#[test]
fn options_and_disallowed_methods() {
    let site = Site::new("methods");
    let server = Server::start(&site.root, &[]);
    // OPTIONS, then a GET that must parse right after the 204.
    let mut c = server.connect();
    let raw = format!(
        "{}{}",
        request("OPTIONS", "/index.html", &[]),
        get("/style.css")
    );
    c.send(raw.as_bytes());
    let r = c.read_response_to("OPTIONS").expect("OPTIONS response");
    assert_eq!(r.status, 204, "{r:?}");
    assert_common_headers(&r, "OPTIONS");
    assert_eq!(r.must("allow"), "GET, HEAD, OPTIONS");
    let next = c.read_response().expect("GET after OPTIONS");
    assert_eq!(next.body, STYLE_CSS);

    let star = server.send(&request("OPTIONS", "*", &[]));
    assert_eq!(star.status, 204, "OPTIONS *: {star:?}");

    for method in ["POST", "PUT", "DELETE"] {
        let r = server.send(&request(method, "/index.html", &[("Content-Length", "0")]));
        assert_eq!(r.status, 405, "{method}: {r:?}");
        assert_common_headers(&r, method);
        assert_eq!(r.must("allow"), "GET, HEAD, OPTIONS", "{method}");
    }
}

#[test]
fn directories_redirect_and_serve_index() {
    let site = Site::new("dirs");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/dir");
    assert_eq!(r.status, 301, "{r:?}");
    assert_common_headers(&r, "GET");
    assert_eq!(r.must("location"), "/dir/");
    // The query survives the redirect (the fragment never reaches a server).
    for (target, location) in [
        ("/dir?v=1", "/dir/?v=1"),
        ("/dir?a=1&b=%20x", "/dir/?a=1&b=%20x"),
    ] {
        let r = server.get(target);
        assert_eq!(r.status, 301, "{target}: {r:?}");
        assert_eq!(r.must("location"), location, "{target}");
    }
    let r = server.send("HEAD /dir?v=2 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 301, "{r:?}");
    assert_eq!(r.must("location"), "/dir/?v=2");

    let r = server.get("/dir/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, DIR_INDEX_HTML);
    assert_eq!(r.must("content-type"), "text/html; charset=utf-8");

    let r = server.get("/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, INDEX_HTML);
}

#[test]
fn query_string_is_ignored_for_lookup() {
    let site = Site::new("query");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/style.css?v=123");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, STYLE_CSS);
}

#[test]
fn missing_file_is_404_with_body() {
    let site = Site::new("404");
    let server = Server::start(&site.root, &[]);
    let mut c = server.connect();
    let r = c.roundtrip(&get("/no/such/file.txt"));
    assert_eq!(r.status, 404, "{r:?}");
    assert_common_headers(&r, "GET");
    assert!(!r.body.is_empty());
    // A 404 is not a reason to drop the connection.
    let r = c.roundtrip(&get("/index.html"));
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn preconditions_are_evaluated_before_range() {
    // RFC 9110 §13.2.2: If-Match, If-Unmodified-Since, If-None-Match and
    // If-Modified-Since come before Range.
    let site = Site::new("precedence");
    let server = Server::start(&site.root, &[]);
    let (etag, _lm) = validators(&server);
    let r = conditional(
        &server,
        &[("Range", "bytes=0-4"), ("If-None-Match", etag.as_str())],
    );
    assert_eq!(r.status, 304, "Range + matching If-None-Match: {r:?}");
    let r = conditional(&server, &[("Range", "bytes=0-4"), ("If-Match", "\"nope\"")]);
    assert_eq!(r.status, 412, "Range + failing If-Match: {r:?}");
    let r = conditional(
        &server,
        &[("Range", "bytes=999999-"), ("If-None-Match", etag.as_str())],
    );
    assert_eq!(
        r.status, 304,
        "unsatisfiable Range + matching If-None-Match: {r:?}"
    );
}

#[test]
fn head_of_errors_and_conditionals_has_no_body() {
    let site = Site::new("head-misc");
    let server = Server::start(&site.root, &[]);
    let (etag, _lm) = validators(&server);
    let mut c = server.connect();
    let raw = format!(
        "{}{}{}",
        request("HEAD", "/missing.txt", &[]),
        request("HEAD", "/digits.txt", &[("If-None-Match", etag.as_str())]),
        get("/style.css")
    );
    c.send(raw.as_bytes());
    let missing = c.read_response_to("HEAD").expect("HEAD 404");
    assert_eq!(missing.status, 404, "{missing:?}");
    assert_common_headers(&missing, "HEAD");
    let not_modified = c.read_response_to("HEAD").expect("HEAD 304");
    assert_eq!(not_modified.status, 304, "{not_modified:?}");
    let css = c.read_response().expect("GET after HEADs");
    assert_eq!(css.status, 200, "{css:?}");
    assert_eq!(css.body, STYLE_CSS);
}
