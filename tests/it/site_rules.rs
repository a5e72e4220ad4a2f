//! What a real site needs from a static server, over real sockets:
//! `/.well-known/` served by default while other dotfiles stay hidden
//! (`dotfile_allow`), custom headers by glob (`[[headers]]`) on every head a
//! file is sent with, `default_type` for unknown extensions, and
//! `index_files`.

use crate::support;

use std::process::Stdio;

use support::*;

/// Starts the server on `site` with a config file holding `toml`, plus
/// `extra` flags.
fn start_with(site: &Site, toml: &str, extra: &[&str]) -> Server {
    let conf = write_file(site.base(), "site.toml", toml.as_bytes());
    let conf = conf.display().to_string();
    let mut args = vec!["--config", conf.as_str()];
    args.extend_from_slice(extra);
    Server::start(&site.root, &args)
}

/// `--check` with a config holding `toml`: exit code and stderr.
fn check(site: &Site, toml: &str) -> (Option<i32>, String) {
    let conf = write_file(site.base(), "check.toml", toml.as_bytes());
    let out = command()
        .args(["--root"])
        .arg(&site.root)
        .arg("--config")
        .arg(&conf)
        .arg("--check")
        .stdin(Stdio::null())
        .output()
        .expect("run --check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn well_known_is_served_by_default_and_git_and_env_stay_404() {
    let site = Site::new("well-known");
    site.write(
        ".well-known/acme-challenge/TOKEN123",
        b"TOKEN123.thumbprint",
    );
    site.write(
        ".well-known/security.txt",
        b"Contact: mailto:sec@example.org\n",
    );
    site.write(".well-known/.secret", b"hidden inside an allowed directory");
    site.write(".env", b"DB_PASSWORD=hunter2\n");
    site.write(".git/config", b"[core]\n\trepositoryformatversion = 0\n");
    site.write("sub/.htpasswd", b"admin:xyz\n");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/.well-known/acme-challenge/TOKEN123");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"TOKEN123.thumbprint");
    assert_eq!(server.get("/.well-known/security.txt").status, 200);
    for path in [
        "/.env",
        "/.git/config",
        "/.git/",
        "/%2egit/config",
        "/sub/.htpasswd",
        "/.well-known/.secret",
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}: {r:?}");
        assert!(!r.body_str().contains("hunter2") && !r.body_str().contains("hidden"));
    }
}

#[test]
fn dotfile_allow_replaces_the_default_list() {
    let site = Site::new("dotfile-allow");
    site.write(".well-known/acme-challenge/T", b"t");
    site.write("a/.nojekyll", b"");
    site.write("a/.env", b"SECRET=1\n");
    site.write(".htaccess", b"deny\n");
    // By name at any depth, or by path from the root.
    let server = start_with(
        &site,
        "dotfile_allow = [\".nojekyll\", \".well-known/acme-challenge\", \".well-known\"]\n",
        &[],
    );
    assert_eq!(server.get("/a/.nojekyll").status, 200);
    assert_eq!(server.get("/.well-known/acme-challenge/T").status, 200);
    assert_eq!(server.get("/a/.env").status, 404);
    assert_eq!(server.get("/.htaccess").status, 404);
    drop(server);
    // The flag: only what it names.
    let server = Server::start(&site.root, &["--dotfile-allow", ".htaccess"]);
    assert_eq!(server.get("/.htaccess").status, 200);
    assert_eq!(server.get("/.well-known/acme-challenge/T").status, 404);
    // Both switches at once is a configuration error, named.
    let (code, err) = check(&site, "serve_dotfiles = true\ndotfile_allow = [\".env\"]\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("serve_dotfiles"), "{err}");
}

const HEADER_RULES: &str = r#"
[[headers]]
glob = "**"
set = { X-Content-Type-Options = "nosniff", Permissions-Policy = "camera=()" }

[[headers]]
glob = "*.html"
set = { Content-Security-Policy = "default-src 'self'" }

[[headers]]
glob = "fonts/**"
set = { Access-Control-Allow-Origin = "*", Permissions-Policy = "geolocation=()" }
"#;

#[test]
fn header_rules_are_on_every_head_a_file_is_sent_with() {
    let site = Site::new("header-rules");
    site.write("fonts/a.ttf", &DIGITS.repeat(20));
    let server = start_with(&site, HEADER_RULES, &[]);

    let page = server.get("/index.html");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("permissions-policy"), Some("camera=()"));
    assert_eq!(
        page.header("content-security-policy"),
        Some("default-src 'self'")
    );
    assert_eq!(page.header("access-control-allow-origin"), None);

    // A later rule's value for the same name wins; each name once.
    let font = server.get("/fonts/a.ttf");
    assert_eq!(font.header("access-control-allow-origin"), Some("*"));
    assert_eq!(font.header("permissions-policy"), Some("geolocation=()"));
    assert_eq!(font.header_count("permissions-policy"), 1);
    assert_eq!(font.header("content-security-policy"), None);

    // 206, 304 and HEAD carry them too; the body is untouched.
    let partial = server.send(&request("GET", "/fonts/a.ttf", &[("Range", "bytes=0-9")]));
    assert_eq!(partial.status, 206, "{partial:?}");
    assert_eq!(partial.body, &DIGITS[..10]);
    assert_eq!(partial.header("access-control-allow-origin"), Some("*"));
    let etag = font.must("etag").to_owned();
    let not_modified = server.send(&request(
        "GET",
        "/fonts/a.ttf",
        &[("If-None-Match", etag.as_str())],
    ));
    assert_eq!(not_modified.status, 304);
    assert_eq!(
        not_modified.header("access-control-allow-origin"),
        Some("*")
    );
    let head = server.send(&request("HEAD", "/index.html", &[]));
    assert_eq!(head.header("x-content-type-options"), Some("nosniff"));
    assert_common_headers(&page, "GET");
    assert_eq!(page.body, INDEX_HTML);
}

#[test]
fn header_rules_that_would_break_a_head_are_refused() {
    let site = Site::new("header-rules-bad");
    for (toml, needle) in [
        (
            "[[headers]]\nglob = \"*\"\nset = { Content-Length = \"1\" }\n",
            "Content-Length",
        ),
        (
            "[[headers]]\nglob = \"*\"\nset = { Cache-Control = \"no-store\" }\n",
            "cache_control",
        ),
        (
            "[[headers]]\nglob = \"*\"\nset = { X-A = \"a\\r\\nX-Injected: 1\" }\n",
            "X-A",
        ),
        (
            "[[headers]]\nglob = \"*\"\nset = { \"Bad Name\" = \"x\" }\n",
            "Bad Name",
        ),
        ("[[headers]]\nglob = \"a[\"\nset = { X-A = \"1\" }\n", "a["),
    ] {
        let (code, err) = check(&site, toml);
        assert_eq!(code, Some(2), "{toml}: {err}");
        assert!(
            err.contains("headers") && err.contains(needle),
            "{toml}: {err}"
        );
    }
}

#[test]
fn default_type_applies_to_unknown_extensions_only() {
    let site = Site::new("default-type");
    let license = "Permission is hereby granted, free of charge, to any person\n".repeat(40);
    site.write("LICENSE", license.as_bytes());
    site.write("CNAME", b"www.example.org\n");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/LICENSE");
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    drop(server);

    let server = Server::start(&site.root, &["--default-type", "text/plain"]);
    let r = server.get("/CNAME");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.body, b"www.example.org\n");
    // Known extensions keep their type.
    assert_eq!(
        server.get("/img.png").header("content-type"),
        Some("image/png")
    );
    // Text is compressible, so it gets variants like any text file.
    let r = server.send(&request("GET", "/LICENSE", &[("Accept-Encoding", "gzip")]));
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{r:?}");
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    drop(server);

    let (code, err) = check(&site, "default_type = \"not a type\"\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("default_type"), "{err}");
}

#[test]
fn index_files_are_tried_in_order() {
    let site = Site::new("index-files");
    std::fs::remove_file(site.root.join("index.html")).unwrap();
    site.write("index.htm", b"<p>htm root</p>");
    site.write("docs/index.html", b"<p>html docs</p>");
    site.write("docs/index.htm", b"<p>htm docs</p>");
    let server = Server::start(&site.root, &[]);
    assert_eq!(
        server.get("/").status,
        403,
        "index.htm is not an index by default"
    );
    drop(server);

    let server = Server::start(
        &site.root,
        &["--index-files", "index.html", "--index-files", "index.htm"],
    );
    let r = server.get("/");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"<p>htm root</p>"[..])
    );
    let r = server.get("/docs/");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"<p>html docs</p>"[..])
    );
    assert_eq!(server.get("/docs").status, 301);
    assert_eq!(server.get("/dir/").body, DIR_INDEX_HTML);
    drop(server);

    let (code, err) = check(&site, "index_files = [\"../index.html\"]\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("index_files"), "{err}");
}
