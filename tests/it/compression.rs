//! Compressed variants and negotiation over real sockets: every variant
//! decodes to the original, `Accept-Encoding` picks the representation that
//! everything else (validators, ranges, Content-Length) then applies to,
//! sidecars win over computed variants, and Cache-Control rules, error pages
//! and the SPA fallback are applied.

use crate::support;

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use support::*;

/// A compressible script, well above the 256-byte minimum.
fn script() -> Vec<u8> {
    (0..300)
        .map(|i| format!("export const value{i} = compute({i}, \"some repeated text\");\n"))
        .collect::<String>()
        .into_bytes()
}

fn get_with(server: &Server, path: &str, headers: &[(&str, &str)]) -> Response {
    server.send(&request("GET", path, headers))
}

fn site_with_script(tag: &str) -> (Site, Vec<u8>) {
    let site = Site::new(tag);
    let js = script();
    site.write("app.js", &js);
    (site, js)
}

#[test]
fn accept_encoding_table() {
    let (site, js) = site_with_script("cmp-table");
    let server = Server::start(&site.root, &[]);
    // (Accept-Encoding, expected status, expected Content-Encoding)
    let cases: &[(Option<&str>, u16, Option<&str>)] = &[
        (None, 200, None),
        (Some(""), 200, None),
        (Some("gzip"), 200, Some("gzip")),
        (Some("br"), 200, Some("br")),
        (Some("zstd"), 200, Some("zstd")),
        (Some("br;q=1, gzip;q=0.5"), 200, Some("br")),
        (Some("gzip;q=0.5, zstd;q=0.9"), 200, Some("zstd")),
        (Some("gzip, deflate, br, zstd"), 200, Some("br")),
        (Some("*"), 200, Some("br")),
        (Some("br;q=0, *"), 200, Some("zstd")),
        (Some("br;q=0, zstd;q=0, *;q=0.1"), 200, Some("gzip")),
        (Some("gzip;q=0.5, identity"), 200, None),
        (Some("gzip;q=0"), 200, None),
        (Some("compress, deflate"), 200, None),
        (Some("identity;q=0, gzip"), 200, Some("gzip")),
        // Issue 24: nothing acceptable gets identity (nginx), not a 406
        // that strands the client and any cache in front of it.
        (Some("identity;q=0"), 200, None),
        (Some("*;q=0"), 200, None),
        (Some("identity;q=0, *;q=0"), 200, None),
        (Some("*;q=0, identity"), 200, None),
    ];
    let mut lengths = HashSet::new();
    for (ae, status, want) in cases {
        let headers: Vec<(&str, &str)> =
            ae.map(|v| vec![("Accept-Encoding", v)]).unwrap_or_default();
        let r = get_with(&server, "/app.js", &headers);
        assert_eq!(r.status, *status, "{ae:?}: {r:?}");
        assert_eq!(r.must("vary"), "Accept-Encoding", "{ae:?}: {r:?}");
        if r.status != 200 {
            continue;
        }
        assert_eq!(r.header("content-encoding"), *want, "{ae:?}: {r:?}");
        assert_eq!(r.content_length(), Some(r.body.len() as u64), "{ae:?}");
        assert_eq!(
            decode_body(*want, &r.body),
            js,
            "{ae:?}: variant decodes to the original"
        );
        if want.is_some() {
            assert!(
                r.body.len() < js.len(),
                "{ae:?}: variant smaller than the original"
            );
        }
        lengths.insert((*want, r.body.len()));
    }
    assert_eq!(lengths.len(), 4, "identity and three variants: {lengths:?}");

    // A type not worth compressing has no variants and no Vary.
    let png = get_with(&server, "/img.png", &[("Accept-Encoding", "gzip, br")]);
    assert_eq!(png.status, 200);
    assert_eq!(png.header("content-encoding"), None);
    assert_eq!(png.header("vary"), None, "{png:?}");
    let refused = get_with(&server, "/img.png", &[("Accept-Encoding", "identity;q=0")]);
    assert_eq!(refused.status, 200, "{refused:?}");
    assert_eq!(refused.header("content-encoding"), None, "{refused:?}");
    assert_eq!(refused.body, png.body);
}

#[test]
fn head_matches_get_per_encoding() {
    let (site, _) = site_with_script("cmp-head");
    let server = Server::start(&site.root, &[]);
    for ae in ["gzip", "br", "zstd", "identity"] {
        let get = get_with(&server, "/app.js", &[("Accept-Encoding", ae)]);
        let head = server.send(&request("HEAD", "/app.js", &[("Accept-Encoding", ae)]));
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        for h in ["content-length", "content-encoding", "etag", "vary"] {
            assert_eq!(head.header(h), get.header(h), "{ae}: {h}");
        }
    }
}

#[test]
fn vary_and_etag_on_200_206_304_412_416() {
    let (site, _) = site_with_script("cmp-vary");
    let server = Server::start(&site.root, &[]);
    let mut etags = HashSet::new();
    for ae in ["identity", "gzip", "br", "zstd"] {
        let full = get_with(&server, "/app.js", &[("Accept-Encoding", ae)]);
        assert_eq!(full.status, 200);
        assert_eq!(full.must("vary"), "Accept-Encoding", "{ae} 200");
        let etag = full.must("etag").to_owned();
        assert!(
            etags.insert(etag.clone()),
            "{ae}: ETag {etag} reused across encodings"
        );

        // The range is of the chosen representation's bytes.
        let part = get_with(
            &server,
            "/app.js",
            &[("Accept-Encoding", ae), ("Range", "bytes=0-9")],
        );
        assert_eq!(part.status, 206, "{ae}: {part:?}");
        assert_eq!(part.must("vary"), "Accept-Encoding", "{ae} 206");
        assert_eq!(
            part.header("content-encoding"),
            full.header("content-encoding"),
            "{ae} 206"
        );
        assert_eq!(
            part.must("content-range"),
            format!("bytes 0-9/{}", full.body.len()),
            "{ae}"
        );
        assert_eq!(part.body, full.body[..10], "{ae}: 206 body");
        assert_eq!(part.must("etag"), etag);

        let tail = format!("bytes={}-", full.body.len() - 5);
        let end = get_with(
            &server,
            "/app.js",
            &[("Accept-Encoding", ae), ("Range", &tail)],
        );
        assert_eq!(end.status, 206);
        assert_eq!(
            end.body,
            full.body[full.body.len() - 5..],
            "{ae}: tail range"
        );

        let not_modified = get_with(
            &server,
            "/app.js",
            &[("Accept-Encoding", ae), ("If-None-Match", &etag)],
        );
        assert_eq!(not_modified.status, 304, "{ae}: {not_modified:?}");
        assert_eq!(not_modified.must("vary"), "Accept-Encoding", "{ae} 304");
        assert_eq!(not_modified.must("etag"), etag, "{ae} 304");

        // Errors about the representation vary with Accept-Encoding too: a
        // cache must not answer another encoding's request with them.
        let failed = get_with(
            &server,
            "/app.js",
            &[("Accept-Encoding", ae), ("If-Match", "\"other\"")],
        );
        assert_eq!(failed.status, 412, "{ae}: {failed:?}");
        assert_eq!(failed.must("vary"), "Accept-Encoding", "{ae} 412");
        let beyond = format!("bytes={}-", full.body.len() + 10);
        let unsatisfiable = get_with(
            &server,
            "/app.js",
            &[("Accept-Encoding", ae), ("Range", &beyond)],
        );
        assert_eq!(unsatisfiable.status, 416, "{ae}: {unsatisfiable:?}");
        assert_eq!(unsatisfiable.must("vary"), "Accept-Encoding", "{ae} 416");
        assert_eq!(
            unsatisfiable.must("content-range"),
            format!("bytes */{}", full.body.len()),
            "{ae} 416"
        );
    }
    // A validator of one encoding does not match another.
    let identity = get_with(&server, "/app.js", &[]);
    let gzip = get_with(
        &server,
        "/app.js",
        &[
            ("Accept-Encoding", "gzip"),
            ("If-None-Match", identity.must("etag")),
        ],
    );
    assert_eq!(gzip.status, 200, "{gzip:?}");
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    // If-Range with another encoding's ETag: the whole representation.
    let whole = get_with(
        &server,
        "/app.js",
        &[
            ("Accept-Encoding", "br"),
            ("Range", "bytes=0-9"),
            ("If-Range", identity.must("etag")),
        ],
    );
    assert_eq!(whole.status, 200, "{whole:?}");
    assert_eq!(whole.header("content-encoding"), Some("br"));
}

#[test]
fn sidecars_are_preferred() {
    let site = Site::new("cmp-sidecar");
    let css = "body { color: black; margin: 0 auto; }\n"
        .repeat(40)
        .into_bytes();
    site.write("site.css", &css);
    // Distinguishable from what the server would compute at level 9.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
    enc.write_all(&css).unwrap();
    let gz = enc.finish().unwrap();
    site.write("site.css.gz", &gz);
    let mut br = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut br, 4096, 1, 18);
        w.write_all(&css).unwrap();
    }
    site.write("site.css.br", &br);
    let server = Server::start(&site.root, &["--compress", "false"]);

    let r = get_with(&server, "/site.css", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, gz, "the sidecar's bytes");
    let r = get_with(&server, "/site.css", &[("Accept-Encoding", "br, gzip")]);
    assert_eq!(r.body, br, "the brotli sidecar");
    assert_eq!(decode_body(Some("br"), &r.body), css);
    // No zstd sidecar, and compression is off: identity.
    let r = get_with(&server, "/site.css", &[("Accept-Encoding", "zstd")]);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, css);
    assert_eq!(r.must("vary"), "Accept-Encoding");
    // The sidecar itself stays a plain file at its own URL.
    let r = get_with(&server, "/site.css.gz", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, gz);

    // An updated sidecar is picked up live. It must still decode to the
    // source's bytes (one that does not is rejected: origin_policy.rs), so
    // it differs by compression level only.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    enc.write_all(&css).unwrap();
    let gz2 = enc.finish().unwrap();
    assert_ne!(gz2, gz);
    site.write("site.css.gz", &gz2);
    assert!(
        // Latency is live_reload.rs's subject; here only that it happens.
        poll_until(Duration::from_secs(5), || {
            get_with(&server, "/site.css", &[("Accept-Encoding", "gzip")]).body == gz2
        }),
        "new sidecar served"
    );
}

const CONFIG: &str = r#"
spa_fallback = true
cache_control_default = "public, max-age=60"
error_pages = { 403 = "errors/denied.html" }

[cache_control]
"*.html" = "no-cache"
"assets/**" = "public, max-age=31536000, immutable"
"#;

#[test]
fn cache_control_error_pages_and_spa() {
    let site = Site::new("cmp-rules");
    site.write("assets/app.js", &script());
    site.write("assets/page.html", b"<p>asset page</p>");
    site.write("404.html", b"<h1>custom not found</h1>");
    site.write("errors/denied.html", b"<h1>custom forbidden</h1>");
    site.write("empty/.keep", b"");
    let config = site.base().join("shardhttpd.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = Server::start(&site.root, &["--config", config.to_str().unwrap()]);

    let cc = |path: &str, ae: &str| {
        let r = get_with(&server, path, &[("Accept-Encoding", ae)]);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        r.header("cache-control").map(str::to_owned)
    };
    assert_eq!(cc("/index.html", "").as_deref(), Some("no-cache"));
    assert_eq!(cc("/dir/", "").as_deref(), Some("no-cache"));
    // The longer glob is tried first: assets/** wins over *.html.
    assert_eq!(
        cc("/assets/page.html", "").as_deref(),
        Some("public, max-age=31536000, immutable")
    );
    for ae in ["", "gzip", "br"] {
        assert_eq!(
            cc("/assets/app.js", ae).as_deref(),
            Some("public, max-age=31536000, immutable")
        );
    }
    assert_eq!(cc("/style.css", "").as_deref(), Some("public, max-age=60"));
    // 304 repeats Cache-Control (RFC 9110 §15.4.5).
    let etag = get_with(&server, "/index.html", &[])
        .must("etag")
        .to_owned();
    let r = get_with(&server, "/index.html", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert_eq!(r.header("cache-control"), Some("no-cache"));

    // Error pages: 404.html by default, 403 as configured; plain text else.
    let r = get_with(&server, "/missing.js", &[]);
    assert_eq!(r.status, 404);
    assert_eq!(r.body, b"<h1>custom not found</h1>");
    assert_eq!(r.must("content-type"), "text/html; charset=utf-8");
    assert_eq!(r.content_length(), Some(r.body.len() as u64));
    let r = server.send(&request("HEAD", "/missing.js", &[]));
    assert_eq!(r.status, 404);
    assert!(r.body.is_empty());
    let r = get_with(&server, "/empty/", &[]);
    assert_eq!(r.status, 403);
    assert_eq!(r.body, b"<h1>custom forbidden</h1>");
    let r = server.send(&request("DELETE", "/index.html", &[]));
    assert_eq!(r.status, 405);
    assert_eq!(r.must("content-type"), "text/plain; charset=utf-8");

    // SPA: extension-less unknown paths get index.html with 200.
    let index = get_with(&server, "/index.html", &[]);
    for path in ["/app/route", "/app/route/", "/deep/link/42"] {
        let r = get_with(&server, path, &[]);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.body, index.body, "{path}");
    }
    assert_eq!(get_with(&server, "/missing.png", &[]).status, 404);
}

/// A root with more than 8 MiB of bodies starts serving identity bodies and
/// builds its variants in the background; a change made meanwhile must be
/// served at once, and the variants that finally arrive must be of the new
/// version, never of the one the background build started from.
#[test]
fn large_root_starts_uncompressed_and_keeps_changes_made_while_compressing() {
    let site = Site::new("bg-compress");
    // 12 files of ~850 KiB of compressible text (below the 1 MiB sendfile
    // threshold, so in memory): over the 8 MiB threshold together.
    let text =
        |tag: &str| format!("<p>{tag} {}</p>\n", "static shard epoll ".repeat(40)).repeat(1100);
    for i in 0..12 {
        site.write(
            &format!("big{i}.html"),
            text(&format!("v1 file {i}")).as_bytes(),
        );
    }
    let server = Server::start(
        &site.root,
        &[
            "--brotli-level",
            "5",
            "--zstd-level",
            "3",
            "--gzip-level",
            "6",
        ],
    );
    assert!(
        server
            .wait_for_log("building compressed variants", Duration::from_secs(5))
            .is_some(),
        "a large root should start with identity bodies\n{}",
        server.log_text()
    );
    let v2 = text("v2 file 3");
    let tmp = site.root.join("big3.html.tmp");
    std::fs::write(&tmp, &v2).unwrap();
    std::fs::rename(&tmp, site.root.join("big3.html")).unwrap();
    assert!(
        poll_until(Duration::from_secs(5), || server.get("/big3.html").body
            == v2.as_bytes()),
        "the change is served while variants are being built"
    );
    assert!(
        server
            .wait_for_log("compressed variants ready", Duration::from_secs(60))
            .is_some(),
        "variants never arrived\n{}",
        server.log_text()
    );
    let r = get_with(&server, "/big3.html", &[("Accept-Encoding", "br")]);
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(
        decode_body(Some("br"), &r.body),
        v2.as_bytes(),
        "variant of the new version"
    );
}
