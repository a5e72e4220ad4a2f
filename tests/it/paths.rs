//! Path safety: traversal in every spelling, NUL bytes, dotfiles and symlinks
//! must never expose anything outside the document root.

use crate::support;

use std::os::unix::fs::symlink;

use support::*;

/// Asserts a response is the refusal `want` that leaks nothing: 400 for a
/// target the normaliser rejects (`..` above the root, a NUL), 404 for one
/// that is only an odd name inside the root.
#[track_caller]
fn assert_refused(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {r:?}");
    let body = r.body_str();
    assert!(!body.contains(SECRET), "{what}: leaked the secret file");
    assert!(!body.contains("root:"), "{what}: leaked /etc/passwd");
}

#[test]
fn traversal_in_every_spelling_is_refused() {
    let site = Site::new("traversal");
    let server = Server::start(&site.root, &[]);
    // `..` above the root, in any spelling that decodes to it, is a 400:
    // refused, not clamped to the root (where `/../index.html` would be a
    // 200). Spellings that decode to a plain name (double encoding, a
    // backslash, overlong UTF-8) are names that do not exist: 404.
    let targets = [
        ("/../etc/passwd", 400),
        ("/../index.html", 400),
        ("/%2e%2e/index.html", 400),
        ("/dir/../../index.html", 400),
        ("/%2e%2e/etc/passwd", 400),
        ("/%2e%2e%2fetc%2fpasswd", 400),
        ("/..%5c..%5cetc/passwd", 404),
        ("/%252e%252e/etc/passwd", 404),
        ("/../secret.txt", 400),
        ("/../../../../../../etc/passwd", 400),
        ("/%2e%2e/secret.txt", 400),
        ("/%2E%2E/secret.txt", 400),
        ("/%2e%2e%2fsecret.txt", 400),
        ("/..%2fsecret.txt", 400),
        ("/.%2e/secret.txt", 400),
        ("/dir/../../secret.txt", 400),
        ("/dir/%2e%2e/%2e%2e/secret.txt", 400),
        ("/./../secret.txt", 400),
        ("//../secret.txt", 400),
        ("/..\\secret.txt", 404),
        ("/..%5csecret.txt", 404),
        ("/%252e%252e/secret.txt", 404),
        ("/%c0%ae%c0%ae/secret.txt", 404),
        ("/..;/secret.txt", 404),
    ];
    let mut c = server.connect();
    for (target, want) in targets {
        let raw = get(target);
        if c.try_send(raw.as_bytes()).is_err() {
            c = server.connect();
            c.send(raw.as_bytes());
        }
        let r = match c.read_response() {
            Ok(r) => r,
            Err(e) => panic!("{target}: {e}\n{}", server.log_text()),
        };
        assert_refused(&r, want, target);
        if r.says_close() || r.status == 400 {
            // A 400 may close the connection; start afresh.
            c = server.connect();
        }
    }
    // Dot segments that stay inside the root are resolved, not refused.
    let r = server.get("/dir/../index.html");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, INDEX_HTML);
    // The root itself still works after all that.
    assert_eq!(server.get("/index.html").status, 200);
}

#[test]
fn nul_byte_is_refused() {
    let site = Site::new("nul");
    site.write("ab", b"should not be reachable via a%00b");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/a%00b");
    assert_refused(&r, 400, "/a%00b");
    let r = server.get("/ab%00.html");
    assert_refused(&r, 400, "/ab%00.html");
}

#[test]
fn absolute_form_cannot_escape() {
    let site = Site::new("absform");
    let server = Server::start(&site.root, &[]);
    let r = server.send("GET http://test/../secret.txt HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_refused(&r, 400, "absolute-form with `..` above the root");
}

#[test]
fn percent_encoded_names_are_decoded() {
    let site = Site::new("pct");
    site.write("with space.txt", b"spaced\n");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/with%20space.txt");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"spaced\n");
    let r = server.get("/%64igits.txt");
    assert_eq!(r.status, 200, "encoded unreserved char: {r:?}");
    assert_eq!(r.body, DIGITS);
}

#[test]
fn dotfiles_are_hidden_by_default() {
    let site = Site::new("dotfiles");
    site.write(".env", b"DB_PASSWORD=hunter2\n");
    site.write(".git/config", b"[core]\n\trepositoryformatversion = 0\n");
    site.write(".well-hidden/page.html", b"<p>hidden</p>");
    let server = Server::start(&site.root, &[]);
    for path in [
        "/.env",
        "/.git/config",
        "/.git/",
        "/.git",
        "/%2eenv",
        "/.well-hidden/page.html",
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}: {r:?}");
        assert!(!r.body_str().contains("hunter2"), "{path}");
        assert!(!r.body_str().contains("repositoryformatversion"), "{path}");
    }
}

#[test]
fn dotfiles_served_when_enabled() {
    let site = Site::new("dotfiles-on");
    site.write(".env", b"VISIBLE=1\n");
    let server = Server::start(&site.root, &["--serve-dotfiles", "true"]);
    let r = server.get("/.env");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, b"VISIBLE=1\n");
    // Still no way out of the root.
    assert_refused(
        &server.get("/../secret.txt"),
        400,
        "/../secret.txt with dotfiles",
    );
}

#[test]
fn symlinks_inside_served_outside_refused() {
    let site = Site::new("symlinks");
    std::fs::create_dir_all(site.base().join("outside-dir")).unwrap();
    write_file(site.base(), "outside-dir/file.txt", SECRET.as_bytes());
    symlink("../secret.txt", site.root.join("link-out.txt")).unwrap();
    symlink(
        site.base().join("secret.txt"),
        site.root.join("abs-link-out.txt"),
    )
    .unwrap();
    symlink("../outside-dir", site.root.join("dir-out")).unwrap();
    symlink("/etc/passwd", site.root.join("passwd")).unwrap();
    symlink("index.html", site.root.join("link-in.html")).unwrap();
    symlink("dir", site.root.join("dir-in")).unwrap();
    let server = Server::start(&site.root, &[]);

    for path in [
        "/link-out.txt",
        "/abs-link-out.txt",
        "/dir-out/file.txt",
        "/passwd",
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 404, "{path}: {r:?}");
        assert!(!r.body_str().contains(SECRET), "{path} leaked");
        assert!(!r.body_str().contains("root:"), "{path} leaked");
    }

    let r = server.get("/link-in.html");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, INDEX_HTML);
    let r = server.get("/dir-in/index.html");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, DIR_INDEX_HTML);
}
