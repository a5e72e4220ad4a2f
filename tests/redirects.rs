//! The trailing-slash 301 never sends a client to another host (issue 12,
//! item 6). Before the fix its `Location` echoed the raw target, so
//! `GET //evil.example/../docs` (which names the local `/docs`) was
//! answered `Location: //evil.example/../docs/`, a network-path reference
//! browsers follow to `evil.example`; `/\evil.example/…` likewise, since
//! browsers read `\` as `/`.

mod support;

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
