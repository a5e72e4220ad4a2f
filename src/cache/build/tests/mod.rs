//! Unit tests of the build pipeline: walk, plan, load, assembly and
//! rendering, against scratch directories.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use xxhash_rust::xxh3::xxh3_128;

use super::render::{content_type, last_modified_secs, MAX_HTTP_DATE_SECS};
use super::*;
use crate::cache::{
    Body, BuildOptions, CacheControl, CompressOptions, DotfileAllow, FileStamp, HeaderRules, Repr,
    Resource, Snapshot, StatusCacheControl,
};
use crate::http::accept::Coding;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::sync::atomic::{AtomicUsize, Ordering};

mod delta;
mod lazy;

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "shardhttpd-build-{}-{name}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn write(&self, rel: &str, content: &[u8]) -> PathBuf {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    fn mkdir(&self, rel: &str) {
        fs::create_dir_all(self.0.join(rel)).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn opts(root: &Path) -> BuildOptions {
    BuildOptions {
        root: root.to_path_buf(),
        cache_max_bytes: 1 << 20,
        sendfile_threshold: 64 * 1024,
        server_line: b"Server: shardhttpd\r\n".to_vec(),
        dotfile_allow: DotfileAllow::default(),
        index_files: vec!["index.html".into()],
        default_type: "application/octet-stream".into(),
        compress: None,
        compress_configured: None,
        fast_start_max_age: 60,
        headers: HeaderRules::default(),
        status_cache_control: StatusCacheControl::default(),
        cache_control: CacheControl::default(),
        error_pages: Vec::new(),
        spa_fallback: false,
        open_files: Default::default(),
        preload_max_files: crate::cache::DEFAULT_PRELOAD_MAX_FILES,
        budget: None,
        compress_max_file_bytes: crate::cache::DEFAULT_COMPRESS_MAX_FILE_BYTES,
    }
}

fn file_idx(snap: &Snapshot, path: &[u8]) -> u32 {
    match snap.resolve(path) {
        Some(Resource::File(idx)) => idx,
        other => panic!(
            "{}: expected a file, got {other:?}",
            String::from_utf8_lossy(path)
        ),
    }
}

fn etag(snap: &Snapshot, path: &[u8]) -> Vec<u8> {
    snap.entry(file_idx(snap, path)).identity().etag().to_vec()
}

fn is_mem(snap: &Snapshot, path: &[u8]) -> bool {
    matches!(
        snap.entry(file_idx(snap, path)).identity.body,
        Body::Mem { .. }
    )
}

#[test]
fn index_keys_for_files_and_directories() {
    let dir = TempDir::new("keys");
    dir.write("index.html", b"<h1>root</h1>");
    dir.write("a/b.css", b"body{}");
    dir.write("docs/index.html", b"<h1>docs</h1>");
    dir.write("docs/guide.html", b"guide");
    dir.mkdir("empty");
    let snap = build(&opts(&dir.0), 7).unwrap();

    assert_eq!(snap.generation, 7);
    assert_eq!(snap.stats.files, 4);
    let root_index = file_idx(&snap, b"/index.html");
    assert_eq!(snap.resolve(b"/"), Some(Resource::File(root_index)));
    file_idx(&snap, b"/a/b.css");
    assert_eq!(snap.resolve(b"/a"), Some(Resource::AddSlash));
    assert_eq!(snap.resolve(b"/a/"), Some(Resource::Forbidden));
    let docs_index = file_idx(&snap, b"/docs/index.html");
    assert_eq!(snap.resolve(b"/docs/"), Some(Resource::File(docs_index)));
    assert_eq!(snap.resolve(b"/docs"), Some(Resource::AddSlash));
    file_idx(&snap, b"/docs/guide.html");
    assert_eq!(snap.resolve(b"/empty"), Some(Resource::AddSlash));
    assert_eq!(snap.resolve(b"/empty/"), Some(Resource::Forbidden));
    assert_eq!(snap.resolve(b"/missing"), None);
    assert_eq!(snap.resolve(b"/a/b.css/"), None);
}

#[test]
fn root_without_index_is_forbidden() {
    let dir = TempDir::new("noindex");
    dir.write("x.txt", b"x");
    let snap = build(&opts(&dir.0), 1).unwrap();
    assert_eq!(snap.resolve(b"/"), Some(Resource::Forbidden));
}

#[test]
fn missing_root_is_an_error() {
    let dir = TempDir::new("gone");
    let root = dir.0.join("nope");
    assert!(build(&opts(&root), 1).is_err());
}

#[test]
fn dotfiles_skipped_unless_enabled() {
    let dir = TempDir::new("dot");
    dir.write(".env", b"SECRET=1");
    dir.write(".git/config", b"[core]");
    dir.write("visible.txt", b"hi");
    let snap = build(&opts(&dir.0), 1).unwrap();
    assert_eq!(snap.resolve(b"/.env"), None);
    assert_eq!(snap.resolve(b"/.git"), None);
    assert_eq!(snap.resolve(b"/.git/config"), None);
    file_idx(&snap, b"/visible.txt");

    let mut o = opts(&dir.0);
    o.dotfile_allow = DotfileAllow::all();
    let snap = build(&o, 2).unwrap();
    file_idx(&snap, b"/.env");
    file_idx(&snap, b"/.git/config");
}

#[test]
fn well_known_is_served_by_default_and_other_dotfiles_are_not() {
    let dir = TempDir::new("wellknown");
    dir.write(".well-known/acme-challenge/TOKEN", b"token.key");
    dir.write(".well-known/.hidden", b"no");
    dir.write(".env", b"SECRET=1");
    dir.write(".git/config", b"[core]");
    dir.write("sub/.htaccess", b"deny");
    let snap = build(&opts(&dir.0), 1).unwrap();
    file_idx(&snap, b"/.well-known/acme-challenge/TOKEN");
    assert_eq!(snap.resolve(b"/.well-known/.hidden"), None);
    assert_eq!(snap.resolve(b"/.env"), None);
    assert_eq!(snap.resolve(b"/.git/config"), None);
    assert_eq!(snap.resolve(b"/sub/.htaccess"), None);

    let mut o = opts(&dir.0);
    o.dotfile_allow = DotfileAllow::new(&[".htaccess".into()]).unwrap();
    let snap = build(&o, 2).unwrap();
    file_idx(&snap, b"/sub/.htaccess");
    assert_eq!(snap.resolve(b"/.well-known/acme-challenge/TOKEN"), None);
}

#[test]
fn symlinks_followed_only_inside_root() {
    let outside = TempDir::new("outside");
    let secret = outside.write("secret.txt", b"top secret");
    let dir = TempDir::new("links");
    dir.write("real/page.html", b"page");
    symlink(&secret, dir.0.join("leak.txt")).unwrap();
    symlink(&outside.0, dir.0.join("leakdir")).unwrap();
    symlink(dir.0.join("real/page.html"), dir.0.join("alias.html")).unwrap();
    symlink(dir.0.join("real"), dir.0.join("aliasdir")).unwrap();
    // A loop back to the root must not recurse forever.
    symlink(&dir.0, dir.0.join("real/up")).unwrap();
    symlink(dir.0.join("nowhere"), dir.0.join("dangling")).unwrap();
    let snap = build(&opts(&dir.0), 1).unwrap();

    assert_eq!(snap.resolve(b"/leak.txt"), None);
    assert_eq!(snap.resolve(b"/leakdir"), None);
    assert_eq!(snap.resolve(b"/leakdir/secret.txt"), None);
    assert_eq!(snap.resolve(b"/dangling"), None);
    assert_eq!(snap.resolve(b"/real/up"), None);
    let alias = snap.entry(file_idx(&snap, b"/alias.html"));
    let len = alias.identity.len as usize;
    let Body::Mem { off } = alias.identity.body else {
        panic!("expected Mem")
    };
    assert_eq!(snap.mem(off, len), b"page");
    assert_eq!(snap.resolve(b"/aliasdir"), Some(Resource::AddSlash));
    assert_eq!(
        etag(&snap, b"/aliasdir/page.html"),
        etag(&snap, b"/real/page.html")
    );
}

#[test]
fn etag_depends_on_content_only() {
    let dir = TempDir::new("etag");
    dir.write("one.txt", b"same bytes");
    dir.write("sub/two.css", b"same bytes");
    dir.write("other.txt", b"other bytes");
    let first = build(&opts(&dir.0), 1).unwrap();
    let second = build(&opts(&dir.0), 2).unwrap();

    let tag = etag(&first, b"/one.txt");
    assert_eq!(tag.len(), 34);
    assert!(tag.starts_with(b"\"") && tag.ends_with(b"\""));
    assert!(tag[1..33].iter().all(|b| b"0123456789abcdef".contains(b)));
    assert_eq!(etag(&first, b"/sub/two.css"), tag);
    assert_eq!(etag(&second, b"/one.txt"), tag);
    assert_ne!(etag(&first, b"/other.txt"), tag);
}

#[test]
fn large_files_get_a_validator_without_being_read() {
    let dir = TempDir::new("stream");
    let content: Vec<u8> = (0..600_000).map(|i| (i * 31 % 251) as u8).collect();
    let path = dir.write("big.bin", &content);
    let mut o = opts(&dir.0);
    o.sendfile_threshold = 1024;
    let first = build(&o, 1).unwrap();
    assert!(!is_mem(&first, b"/big.bin"));
    let tag = etag(&first, b"/big.bin");
    assert_eq!(
        first.entry(file_idx(&first, b"/big.bin")).identity.len,
        600_000
    );
    // Same stamp, same validator.
    assert_eq!(etag(&build(&o, 2).unwrap(), b"/big.bin"), tag);
    // Same bytes, new mtime: a new validator (it never saw the bytes).
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .unwrap();
    assert_ne!(etag(&build(&o, 3).unwrap(), b"/big.bin"), tag);
}

#[test]
fn files_at_threshold_are_sent_from_fd() {
    let dir = TempDir::new("threshold");
    dir.write("small.txt", &[b'a'; 99]);
    dir.write("large.txt", &[b'b'; 100]);
    let mut o = opts(&dir.0);
    o.sendfile_threshold = 100;
    let snap = build(&o, 1).unwrap();
    assert!(is_mem(&snap, b"/small.txt"));
    let large = snap.entry(file_idx(&snap, b"/large.txt"));
    let Body::File(ref lf) = large.identity.body else {
        panic!("expected File")
    };
    assert_eq!(large.identity.len, 100);
    assert_eq!(
        lf.stamp,
        FileStamp::of(&lf.file().unwrap().metadata().unwrap())
    );
    assert_eq!(snap.stats.mem_bytes, 99);
    assert_eq!(snap.stats.file_bytes, 100);

    // Threshold 0: nothing is below it, not even an empty file.
    dir.write("empty.txt", b"");
    o.sendfile_threshold = 0;
    let snap = build(&o, 2).unwrap();
    assert!(!is_mem(&snap, b"/empty.txt"));
    assert!(snap.segments.is_empty());
}

#[test]
fn cache_budget_overflow_is_sent_from_fd() {
    let dir = TempDir::new("budget");
    // Sorted walk: a.txt fills the budget, b.txt no longer fits, c.txt does.
    dir.write("a.txt", &[b'a'; 60]);
    dir.write("b.txt", &[b'b'; 60]);
    dir.write("c.txt", &[b'c'; 40]);
    let mut o = opts(&dir.0);
    o.cache_max_bytes = 100;
    let snap = build(&o, 1).unwrap();
    assert!(is_mem(&snap, b"/a.txt"));
    assert!(!is_mem(&snap, b"/b.txt"));
    assert!(is_mem(&snap, b"/c.txt"));
    assert_eq!(snap.stats.mem_bytes, 100);
    assert_eq!(snap.stats.file_bytes, 60);
}

#[test]
fn head_200_exact_bytes() {
    let dir = TempDir::new("head");
    let path = dir.write("hello.txt", b"hello");
    // 2015-10-21T07:28:00Z
    let mtime = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let snap = build(&opts(&dir.0), 1).unwrap();
    let entry = snap.entry(file_idx(&snap, b"/hello.txt"));
    let etag = format!("\"{:032x}\"", xxh3_128(b"hello"));
    let common = format!(
        "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n"
    );
    let head = format!(
        "HTTP/1.1 200 OK\r\nServer: shardhttpd\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n{common}"
    );
    assert_eq!(entry.last_modified, 1_445_412_480);
    assert_eq!(
        entry.content_type_line(),
        b"Content-Type: text/plain; charset=utf-8\r\n"
    );
    assert_eq!(entry.identity().etag(), etag.as_bytes());
    assert_eq!(entry.identity().common_vec(), common.as_bytes());
    assert_eq!(
        String::from_utf8_lossy(&entry.identity().head_200_vec()),
        head,
    );
    assert_eq!(entry.identity().encoding_line(), b"");
}

#[test]
fn mem_returns_content() {
    let dir = TempDir::new("mem");
    dir.write("a.txt", b"alpha");
    dir.write("b.txt", b"");
    dir.write("c.txt", b"gamma!");
    let snap = build(&opts(&dir.0), 1).unwrap();
    for (path, content) in [
        (&b"/a.txt"[..], &b"alpha"[..]),
        (b"/b.txt", b""),
        (b"/c.txt", b"gamma!"),
    ] {
        let entry = snap.entry(file_idx(&snap, path));
        let len = entry.identity.len as usize;
        let Body::Mem { off } = entry.identity.body else {
            panic!("expected Mem")
        };
        assert_eq!(entry.identity.len, content.len() as u64);
        assert_eq!(snap.mem(off, len), content);
    }
    assert_eq!(snap.stats.mem_bytes, 11);
}

#[test]
fn zero_length_file_needs_no_arena() {
    let dir = TempDir::new("empty");
    dir.write("zero.txt", b"");
    let snap = build(&opts(&dir.0), 1).unwrap();
    let entry = snap.entry(file_idx(&snap, b"/zero.txt"));
    let len = entry.identity.len as usize;
    let Body::Mem { off } = entry.identity.body else {
        panic!("expected Mem")
    };
    assert_eq!(snap.mem(off, len), b"");
    assert!(snap.segments.is_empty());
    assert!(entry
        .identity()
        .head_200_vec()
        .windows(19)
        .any(|w| w == b"Content-Length: 0\r\n"));
}

#[test]
fn unreadable_file_and_directory_are_forbidden() {
    let dir = TempDir::new("perm");
    let file = dir.write("locked.txt", b"no");
    dir.write("lockeddir/inner.txt", b"no");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(dir.0.join("lockeddir"), fs::Permissions::from_mode(0o000)).unwrap();
    // Root ignores permission bits; then there is nothing to test.
    let enforced = File::open(&file).is_err();
    let snap = build(&opts(&dir.0), 1).unwrap();
    fs::set_permissions(dir.0.join("lockeddir"), fs::Permissions::from_mode(0o755)).unwrap();
    if enforced {
        assert_eq!(snap.resolve(b"/locked.txt"), Some(Resource::Forbidden));
        assert_eq!(snap.resolve(b"/lockeddir"), Some(Resource::AddSlash));
        assert_eq!(snap.resolve(b"/lockeddir/"), Some(Resource::Forbidden));
        assert_eq!(snap.resolve(b"/lockeddir/inner.txt"), None);
    }
}

#[test]
fn content_types() {
    let table: &[(&str, &str)] = &[
        ("a.html", "text/html; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("a.js", "text/javascript; charset=utf-8"),
        ("a.mjs", "application/javascript; charset=utf-8"),
        ("a.json", "application/json; charset=utf-8"),
        ("a.svg", "image/svg+xml; charset=utf-8"),
        ("a.png", "image/png"),
        ("noext", "application/octet-stream"),
    ];
    for (name, want) in table {
        assert_eq!(
            content_type(Path::new(name), "application/octet-stream").0,
            *want,
            "{name}"
        );
    }
    // `default_type` only for unknown extensions; parameters kept as given.
    assert_eq!(
        content_type(Path::new("LICENSE"), "text/plain"),
        ("text/plain; charset=utf-8".to_owned(), true)
    );
    assert_eq!(
        content_type(Path::new("CNAME"), "text/plain; charset=us-ascii").0,
        "text/plain; charset=us-ascii"
    );
    assert_eq!(
        content_type(Path::new("a.png"), "text/plain").0,
        "image/png"
    );
}

mod loading;
mod variants;
mod walk;
