//! Path safety: traversal in every spelling, NUL bytes, dotfiles and symlinks
//! must never expose anything outside the document root.

mod support;

use std::os::unix::fs::symlink;

use support::*;

/// Asserts a response is a refusal (400 or 404) that leaks nothing.
#[track_caller]
fn assert_refused(r: &Response, what: &str) {
    assert!(
        r.status == 400 || r.status == 404,
        "{what}: expected 400 or 404: {r:?}"
    );
    let body = r.body_str();
    assert!(!body.contains(SECRET), "{what}: leaked the secret file");
    assert!(!body.contains("root:"), "{what}: leaked /etc/passwd");
}

#[test]
fn traversal_in_every_spelling_is_refused() {
    let site = Site::new("traversal");
    let server = Server::start(&site.root, &[]);
    let targets = [
        "/../etc/passwd",
        "/%2e%2e/etc/passwd",
        "/%2e%2e%2fetc%2fpasswd",
        "/..%5c..%5cetc/passwd",
        "/%252e%252e/etc/passwd",
        "/../secret.txt",
        "/../../../../../../etc/passwd",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/%2e%2e%2fsecret.txt",
        "/..%2fsecret.txt",
        "/.%2e/secret.txt",
        "/dir/../../secret.txt",
        "/dir/%2e%2e/%2e%2e/secret.txt",
        "/./../secret.txt",
        "//../secret.txt",
        "/..\\secret.txt",
        "/..%5csecret.txt",
        "/%252e%252e/secret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/..;/secret.txt",
    ];
    let mut c = server.connect();
    for target in targets {
        let raw = get(target);
        if c.try_send(raw.as_bytes()).is_err() {
            c = server.connect();
            c.send(raw.as_bytes());
        }
        let r = match c.read_response() {
            Ok(r) => r,
            Err(e) => panic!("{target}: {e}\n{}", server.log_text()),
        };
        assert_refused(&r, target);
        if r.says_close() || r.status == 400 {
            // A 400 may close the connection; start afresh.
            c = server.connect();
        }
    }
    // The root itself still works after all that.
    assert_eq!(server.get("/index.html").status, 200);
}

#[test]
fn nul_byte_is_refused() {
    let site = Site::new("nul");
    site.write("ab", b"should not be reachable via a%00b");
    let server = Server::start(&site.root, &[]);
    let r = server.get("/a%00b");
    assert_refused(&r, "/a%00b");
    let r = server.get("/ab%00.html");
    assert_refused(&r, "/ab%00.html");
}

#[test]
fn absolute_form_cannot_escape() {
    let site = Site::new("absform");
    let server = Server::start(&site.root, &[]);
    let r = server.send("GET http://test/../secret.txt HTTP/1.1\r\nHost: test\r\n\r\n");
    assert!(
        !r.body_str().contains(SECRET),
        "absolute-form leaked the secret: {r:?}"
    );
    assert_ne!(r.status, 200, "{r:?}");
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
