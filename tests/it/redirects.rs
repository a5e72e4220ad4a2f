//! The trailing-slash 301 never sends a client to another host (issue 12,
//! item 6). Before the fix its `Location` echoed the raw target, so
//! `GET //evil.example/../docs` (which names the local `/docs`) was
//! answered `Location: //evil.example/../docs/`, a network-path reference
//! browsers follow to `evil.example`; `/\evil.example/…` likewise, since
//! browsers read `\` as `/`. Also the other 301, `redirect_https`'s, keeps
//! the host and the target it was asked for.

use crate::support;

use support::tls::{Ca, TlsServer, Transport};
use support::{Server, Site};

/// The checks every `Location` of a trailing-slash redirect must pass: one
/// `/`, then a byte that is neither `/` nor `\`, and no raw byte a browser
/// could read as a separator or a scheme.
#[track_caller]
fn assert_local(location: &str, target: &str) {
    let bytes = location.as_bytes();
    assert!(
        bytes.first() == Some(&b'/') && !matches!(bytes.get(1), Some(b'/' | b'\\') | None),
        "Location {location:?} for {target:?} is not a path on this host"
    );
    let path = location.split('?').next().unwrap();
    assert!(
        !path.contains('\\') && !path.contains("//") && !path.contains("/../"),
        "Location {location:?} for {target:?} is not the normalised path"
    );
}

fn server() -> (Site, Server) {
    let site = Site::new("redirects");
    site.write("docs/index.html", b"<p>docs</p>");
    site.write("a b/index.html", b"<p>space</p>");
    site.write(
        "\\evil/index.html",
        b"<p>a directory named with a backslash</p>",
    );
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    (site, server)
}

#[test]
fn trailing_slash_redirect_is_not_an_open_redirect() {
    let (_site, server) = server();
    let cases = [
        ("//evil.example/../docs", "/docs/"),
        ("/\\evil.example/../docs", "/docs/"),
        ("/%2F%2Fevil.example/../docs", "/docs/"),
        ("/%5C%5Cevil.example/../docs", "/docs/"),
        ("///evil.example/%2e%2e/docs", "/docs/"),
        ("/docs?x=//evil", "/docs/?x=//evil"),
        ("//evil.example/../docs?x=1", "/docs/?x=1"),
        ("http://evil.example//evil.example/../docs", "/docs/"),
        ("/\\evil", "/%5Cevil/"),
        ("/a%20b", "/a%20b/"),
        // A fragment (which should never reach a server) is dropped, and
        // a `?` after it starts no query.
        ("/docs?x=1#frag", "/docs/?x=1"),
        ("/docs#frag?x=1", "/docs/"),
        // Bytes a header value may not carry raw are percent-encoded.
        ("/docs?q=caf\u{e9}", "/docs/?q=caf%C3%A9"),
    ];
    for (target, want) in cases {
        let resp = server.send(&format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n"));
        assert_eq!(resp.status, 301, "GET {target}: {resp:?}");
        let location = resp.must("location");
        assert_local(location, target);
        assert_eq!(location, want, "Location for GET {target}");
        // And it leads where the request pointed.
        let next = server.get(location);
        assert_eq!(
            next.status, 200,
            "GET {location} after the redirect from {target}"
        );
    }
}

#[test]
fn trailing_slash_redirect_to_head_is_local_too() {
    let (_site, server) = server();
    let resp = server.send("HEAD //evil.example/../docs HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(resp.status, 301);
    assert_eq!(resp.must("location"), "/docs/");
}

/// `redirect_https` turns every cleartext request into a 301 to the HTTPS
/// port: the same host (an IPv6 literal kept whole, a port replaced) and
/// the same target, query included; HEAD gets no body; without a Host
/// (or with an empty one) there is nowhere to send the client.
#[test]
fn redirect_https_keeps_host_and_target() {
    let site = Site::new("redirect-https");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &["--cores", "1", "--redirect-https", "true"],
    );
    let port = server.tls_addr.port();
    let mut c = server.wire(Transport::Plain);
    for (host, target, want) in [
        (
            "example.com:8080",
            "/dir/a%20b.html?x=1",
            format!("https://example.com:{port}/dir/a%20b.html?x=1"),
        ),
        ("[::1]:80", "/", format!("https://[::1]:{port}/")),
        ("[::1]", "/q?a=b", format!("https://[::1]:{port}/q?a=b")),
        (
            "example.com",
            "http://example.com/p",
            format!("https://example.com:{port}/p"),
        ),
    ] {
        let r = c.roundtrip(&format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 301, "{r:?}");
        assert_eq!(r.must("location"), want, "Host {host:?}, target {target:?}");
    }
    let r = c.roundtrip("HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!((r.status, r.body.len()), (301, 0));
    assert_eq!(r.must("location"), format!("https://a:{port}/x"));
    for no_host in ["GET / HTTP/1.0\r\n\r\n", "GET / HTTP/1.1\r\nHost:\r\n\r\n"] {
        let r = server.wire(Transport::Plain).roundtrip(no_host);
        assert_eq!(r.status, 400, "{no_host:?}: {r:?}");
    }
}
