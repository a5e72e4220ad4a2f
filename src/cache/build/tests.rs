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
    snap.entry(file_idx(snap, path)).identity.etag().to_vec()
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
    let Body::Mem { off, len } = alias.identity.body else {
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
    assert_eq!(entry.identity.etag(), etag.as_bytes());
    assert_eq!(entry.identity.common(), common.as_bytes());
    assert_eq!(String::from_utf8_lossy(entry.identity.head_200()), head,);
    assert_eq!(entry.identity.encoding_line, b"");
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
        let Body::Mem { off, len } = entry.identity.body else {
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
    let Body::Mem { off, len } = entry.identity.body else {
        panic!("expected Mem")
    };
    assert_eq!(snap.mem(off, len), b"");
    assert!(snap.segments.is_empty());
    assert!(entry
        .identity
        .head_200()
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

fn body<'s>(snap: &'s Snapshot, repr: &Repr) -> &'s [u8] {
    match repr.body {
        Body::Mem { off, len } => snap.mem(off, len),
        Body::File(_) => panic!("expected Mem"),
    }
}

fn fast_compress() -> Option<CompressOptions> {
    Some(CompressOptions {
        min_bytes: 256,
        brotli_level: 5,
        gzip_level: 6,
        zstd_level: 3,
        fast_above: 0,
    })
}

fn page(n: usize) -> Vec<u8> {
    format!(
        "<html><body>{}</body></html>\n",
        "<p>compressible text</p>".repeat(n)
    )
    .into_bytes()
}

fn rebuilt(o: &BuildOptions, generation: u64, old: &Snapshot) -> Option<Snapshot> {
    match rebuild(o, generation, Some(old), &Default::default(), None).unwrap() {
        Built::New(s) => Some(s),
        Built::Unchanged => None,
    }
}

#[test]
fn rebuild_reuses_unchanged_files() {
    let dir = TempDir::new("incr");
    dir.write("a.html", &page(50));
    dir.write("b.txt", b"bee");
    dir.write("sub/c.css", b"body{}");
    let mut o = opts(&dir.0);
    o.compress = fast_compress();
    let first = build(&o, 1).unwrap();
    assert_eq!((first.stats.loaded, first.stats.reused), (3, 0));
    assert!(rebuilt(&o, 2, &first).is_none(), "nothing changed");

    dir.write("b.txt", b"bee, changed");
    let second = rebuilt(&o, 2, &first).expect("b.txt changed");
    assert_eq!((second.stats.loaded, second.stats.reused), (1, 2));
    let b = second.entry(file_idx(&second, b"/b.txt"));
    assert_eq!(body(&second, &b.identity), b"bee, changed");
    let a_old = first.entry(file_idx(&first, b"/a.html"));
    let a = second.entry(file_idx(&second, b"/a.html"));
    assert_eq!(body(&second, &a.identity), page(50));
    assert_eq!(a.identity.etag(), a_old.identity.etag());
    assert_eq!(a.codings, a_old.codings);
    for ((c, r), (_, r_old)) in a.encoded.iter().zip(&a_old.encoded) {
        assert_eq!(body(&second, r), body(&first, r_old), "{c:?}");
        assert_eq!(r.etag(), r_old.etag());
    }

    // Deleting, adding and renaming change the index even when no file
    // needs reading.
    fs::rename(dir.0.join("sub/c.css"), dir.0.join("sub/d.css")).unwrap();
    let third = rebuilt(&o, 3, &second).expect("renamed");
    assert_eq!(third.resolve(b"/sub/c.css"), None);
    file_idx(&third, b"/sub/d.css");
    // Entries are matched by URL, so only the renamed file is read again.
    assert_eq!((third.stats.loaded, third.stats.reused), (1, 2));
    fs::remove_dir_all(dir.0.join("sub")).unwrap();
    let fourth = rebuilt(&o, 4, &third).expect("removed");
    assert_eq!(fourth.stats.loaded, 0);
    assert_eq!(fourth.resolve(b"/sub"), None);
    assert_eq!(fourth.stats.files, 2);
}

#[test]
fn variants_decode_to_the_original() {
    use std::io::Read;
    let dir = TempDir::new("variants");
    let html = page(100);
    dir.write("big.html", &html);
    dir.write("tiny.html", b"<p>hi</p>");
    dir.write("logo.png", &page(100));
    let mut o = opts(&dir.0);
    o.compress = fast_compress();
    let snap = build(&o, 1).unwrap();

    let e = snap.entry(file_idx(&snap, b"/big.html"));
    assert!(e.vary);
    assert_eq!(&*e.codings, &[Coding::Brotli, Coding::Zstd, Coding::Gzip]);
    let mut etags = vec![e.identity.etag().to_vec()];
    for (coding, r) in &e.encoded {
        let bytes = body(&snap, r);
        let mut out = Vec::new();
        match coding {
            Coding::Brotli => {
                brotli::Decompressor::new(bytes, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Gzip => {
                flate2::read::GzDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::stream::decode_all(bytes).unwrap(),
            Coding::Identity => unreachable!(),
        }
        assert_eq!(out, html, "{coding:?}");
        assert_eq!(r.len, bytes.len() as u64);
        let head = String::from_utf8_lossy(r.head_200());
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", r.len)),
            "{head}"
        );
        assert!(head.contains("Content-Encoding: "), "{head}");
        assert!(head.contains("Vary: Accept-Encoding\r\n"), "{head}");
        etags.push(r.etag().to_vec());
    }
    let ident = String::from_utf8_lossy(e.identity.common());
    assert!(ident.contains("Vary: Accept-Encoding\r\n"), "{ident}");
    etags.sort();
    etags.dedup();
    assert_eq!(etags.len(), 4, "an ETag per representation");
    let sum: u64 = snap.stats.encoded_bytes.iter().sum();
    assert_eq!(sum, e.encoded.iter().map(|(_, r)| r.len).sum::<u64>());

    for path in [&b"/tiny.html"[..], b"/logo.png"] {
        let e = snap.entry(file_idx(&snap, path));
        assert!(!e.vary && e.encoded.is_empty());
        assert!(!String::from_utf8_lossy(e.identity.common()).contains("Vary"));
    }
}

#[test]
fn sidecars_win_and_are_tracked() {
    let dir = TempDir::new("sidecar");
    dir.write("app.js", &page(40));
    let sidecar = gzip(&page(40), 1);
    dir.write("app.js.gz", &sidecar);
    let mut o = opts(&dir.0);
    o.compress = fast_compress();
    let snap = build(&o, 1).unwrap();
    let e = snap.entry(file_idx(&snap, b"/app.js"));
    let gz = e.repr(Coding::Gzip);
    assert_eq!(body(&snap, gz), sidecar);
    assert_ne!(e.source.sidecars, 0);
    assert!(e.codings.contains(&Coding::Brotli), "others still computed");
    // The sidecar is served at its own URL too.
    file_idx(&snap, b"/app.js.gz");

    // Without compression the sidecar is still used.
    o.compress = None;
    let plain = build(&o, 2).unwrap();
    let e = plain.entry(file_idx(&plain, b"/app.js"));
    assert_eq!(&*e.codings, &[Coding::Gzip]);

    // Changing only the sidecar reloads the entry.
    let resaved = gzip(&page(40), 9);
    assert_ne!(resaved, sidecar);
    dir.write("app.js.gz", &resaved);
    let next = rebuilt(&o, 3, &plain).expect("sidecar changed");
    let e = next.entry(file_idx(&next, b"/app.js"));
    assert_eq!(body(&next, e.repr(Coding::Gzip)), resaved);
}

fn gzip(data: &[u8], level: u32) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn set_mtime(path: &Path, secs_ago: u64) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
        .unwrap();
}

#[test]
fn stale_or_mismatching_sidecars_are_not_used() {
    use super::load::{Rejected, SIDECARS_REJECTED};
    let rejected = |r: Rejected| SIDECARS_REJECTED[r as usize].load(Ordering::Relaxed);
    let dir = TempDir::new("stale-sidecar");
    let old = page(40);
    let new = page(41);
    let source = dir.write("doc.txt", &old);
    let sidecar = dir.write("doc.txt.gz", &gzip(&old, 6));
    set_mtime(&source, 20);
    set_mtime(&sidecar, 10);
    let o = opts(&dir.0);
    let snap = build(&o, 1).unwrap();
    let e = snap.entry(file_idx(&snap, b"/doc.txt"));
    assert_eq!(&*e.codings, &[Coding::Gzip], "a matching sidecar is used");

    // The source is rewritten, the sidecar left behind: older, not used.
    let (older, mismatch) = (rejected(Rejected::Older), rejected(Rejected::Mismatch));
    dir.write("doc.txt", &new);
    let snap = rebuilt(&o, 2, &snap).expect("source changed");
    let e = snap.entry(file_idx(&snap, b"/doc.txt"));
    assert!(e.codings.is_empty(), "stale sidecar used");
    assert!(!e.vary);
    assert!(rejected(Rejected::Older) > older);
    // Recorded, so an unchanged tree reuses the entry without a new check.
    let counted = rejected(Rejected::Older);
    assert!(rebuilt(&o, 3, &snap).is_none());
    assert_eq!(rejected(Rejected::Older), counted);

    // Newer than the source but holding the old text: decoded, compared,
    // not used; with compression on, gzip is compressed from the source.
    dir.write("doc.txt.gz", &gzip(&old, 6));
    let snap = rebuilt(&o, 4, &snap).expect("sidecar changed");
    assert!(snap.entry(file_idx(&snap, b"/doc.txt")).codings.is_empty());
    assert!(rejected(Rejected::Mismatch) > mismatch);
    let mut c = opts(&dir.0);
    c.compress = fast_compress();
    c.compress_configured = fast_compress();
    let snap = build(&c, 5).unwrap();
    let e = snap.entry(file_idx(&snap, b"/doc.txt"));
    let bytes = body(&snap, e.repr(Coding::Gzip));
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut out).unwrap();
    assert_eq!(out, new);
}

#[test]
fn compressible_files_vary_from_the_first_response() {
    let dir = TempDir::new("fast-start");
    dir.write("big.html", &page(100));
    dir.write("tiny.html", b"<p>hi</p>");
    dir.write("logo.png", &page(100));
    let rules = [(
        "*.html".to_owned(),
        "public, max-age=31536000, immutable".to_owned(),
    )];
    let mut o = opts(&dir.0);
    o.cache_control = CacheControl::new(&rules, None).unwrap();
    o.compress_configured = fast_compress();
    o.fast_start_max_age = 30;
    // The fast start: variants configured but not built yet.
    let window = build(&o, 1).unwrap();
    let common = |s: &Snapshot, p: &[u8]| {
        String::from_utf8_lossy(s.entry(file_idx(s, p)).identity.common()).into_owned()
    };
    let big = common(&window, b"/big.html");
    assert!(window
        .entry(file_idx(&window, b"/big.html"))
        .codings
        .is_empty());
    assert!(big.contains("Vary: Accept-Encoding\r\n"), "{big}");
    assert!(
        big.contains("Cache-Control: public, max-age=30\r\n"),
        "{big}"
    );
    // Too small to compress, or not compressible: no Vary, no cap.
    let tiny = common(&window, b"/tiny.html");
    assert!(
        !tiny.contains("Vary") && tiny.contains("immutable"),
        "{tiny}"
    );
    assert!(!common(&window, b"/logo.png").contains("Vary"));

    // Once built: Vary still, the configured lifetime restored.
    o.compress = fast_compress();
    let built = build(&o, 2).unwrap();
    let big = common(&built, b"/big.html");
    assert!(!built
        .entry(file_idx(&built, b"/big.html"))
        .codings
        .is_empty());
    assert!(big.contains("Vary: Accept-Encoding\r\n"), "{big}");
    assert!(big.contains("max-age=31536000, immutable\r\n"), "{big}");
    // Compression off altogether: nothing varies.
    let off = build(&opts(&dir.0), 3).unwrap();
    assert!(!common(&off, b"/big.html").contains("Vary"));
}

#[test]
fn index_files_header_rules_and_status_cache_control() {
    let dir = TempDir::new("site-rules");
    dir.write("index.htm", b"<p>htm</p>");
    dir.write("docs/index.html", b"<p>html</p>");
    dir.write("docs/index.htm", b"<p>htm</p>");
    dir.write("fonts/a.ttf", b"font");
    let mut o = opts(&dir.0);
    o.index_files = vec!["index.html".into(), "index.htm".into()];
    o.headers = HeaderRules::new(&[
        (
            "**".into(),
            vec![("X-Content-Type-Options".into(), "nosniff".into())],
        ),
        (
            "fonts/**".into(),
            vec![("Access-Control-Allow-Origin".into(), "*".into())],
        ),
    ])
    .unwrap();
    o.status_cache_control = StatusCacheControl::new(
        &[("404".into(), "public, max-age=10".into())],
        Some("public, max-age=600"),
    )
    .unwrap();
    o.spa_fallback = true;
    let snap = build(&o, 1).unwrap();
    assert_eq!(
        snap.resolve(b"/"),
        Some(Resource::File(file_idx(&snap, b"/index.htm")))
    );
    assert_eq!(
        snap.resolve(b"/docs/"),
        Some(Resource::File(file_idx(&snap, b"/docs/index.html")))
    );
    assert_eq!(snap.spa_index(), Some(file_idx(&snap, b"/index.htm")));
    let head = |p: &[u8]| {
        String::from_utf8_lossy(snap.entry(file_idx(&snap, p)).identity.head_200()).into_owned()
    };
    assert!(head(b"/index.htm").ends_with("X-Content-Type-Options: nosniff\r\n"));
    let font = head(b"/fonts/a.ttf");
    assert!(
        font.ends_with("X-Content-Type-Options: nosniff\r\nAccess-Control-Allow-Origin: *\r\n"),
        "{font}"
    );
    assert_eq!(
        snap.status_cache_control(crate::http::Status::NotFound),
        b"Cache-Control: public, max-age=10\r\n"
    );
    assert_eq!(
        snap.status_cache_control(crate::http::Status::MovedPermanently),
        b"Cache-Control: public, max-age=600\r\n"
    );
    // The default list has no index.htm: `/` is then forbidden.
    let snap = build(&opts(&dir.0), 2).unwrap();
    assert_eq!(snap.resolve(b"/"), Some(Resource::Forbidden));
}

#[test]
fn cache_control_error_pages_and_spa() {
    let dir = TempDir::new("pages");
    dir.write("index.html", b"<app>");
    dir.write("404.html", b"<h1>lost</h1>");
    dir.write("errors/403.html", b"<h1>no</h1>");
    dir.write("assets/app.js", b"js");
    let mut o = opts(&dir.0);
    o.cache_control = CacheControl::new(
        &[
            ("assets/**".into(), "immutable".into()),
            ("*.html".into(), "no-cache".into()),
        ],
        Some("max-age=60".into()),
    )
    .unwrap();
    o.error_pages = vec![
        (403, "errors/403.html".into()),
        (500, "missing.html".into()),
    ];
    let snap = build(&o, 1).unwrap();
    let cc = |path: &[u8]| {
        String::from_utf8_lossy(snap.entry(file_idx(&snap, path)).identity.common()).into_owned()
    };
    assert!(cc(b"/index.html").contains("Cache-Control: no-cache\r\n"));
    assert!(cc(b"/assets/app.js").contains("Cache-Control: immutable\r\n"));
    assert!(cc(b"/errors/403.html").contains("Cache-Control: no-cache\r\n"));
    assert_eq!(snap.error_page(404), Some(file_idx(&snap, b"/404.html")));
    assert_eq!(
        snap.error_page(403),
        Some(file_idx(&snap, b"/errors/403.html"))
    );
    assert_eq!(snap.error_page(500), None);
    assert_eq!(snap.spa_index(), None);
    o.spa_fallback = true;
    let snap = build(&o, 2).unwrap();
    assert_eq!(snap.spa_index(), Some(file_idx(&snap, b"/index.html")));
}

#[test]
fn last_modified_is_clamped() {
    let now = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    assert_eq!(
        last_modified_secs(1_500_000_000_123_456_789, now),
        1_500_000_000
    );
    assert_eq!(last_modified_secs(-5, now), 0);
    assert_eq!(
        last_modified_secs(3_000_000_000_000_000_000, now),
        2_000_000_000
    );
    let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
    assert_eq!(last_modified_secs(i128::MAX, far), MAX_HTTP_DATE_SECS);
}

#[test]
fn a_rebuild_copies_only_changed_bodies_and_shares_the_rest() {
    let dir = TempDir::new("segments");
    for i in 0..200 {
        dir.write(
            &format!("d{}/f{i:03}.txt", i % 10),
            &[b'a' + (i % 26) as u8; 1000],
        );
    }
    let o = opts(&dir.0);
    let first = build(&o, 1).unwrap();
    assert_eq!(first.stats.bytes_copied, 200_000);
    assert_eq!(first.stats.segments, 1);
    let mut prev = first;
    for round in 0..100u32 {
        let body = format!("round {round:04} of the changed file\n");
        dir.write("d3/f003.txt", body.as_bytes());
        let next = rebuilt(&o, u64::from(round) + 2, &prev).expect("changed");
        // Only the changed file's bytes, plus now and then a compaction.
        assert!(
            next.stats.bytes_copied as usize == body.len()
                || next.stats.bytes_copied < 200_000 + 1000,
            "round {round}: copied {}",
            next.stats.bytes_copied
        );
        assert!(next.stats.segments as usize <= 32, "round {round}");
        let e = next.entry(file_idx(&next, b"/d3/f003.txt"));
        assert_eq!(body_of(&next, e), body.as_bytes());
        let e = next.entry(file_idx(&next, b"/d7/f197.txt"));
        assert_eq!(body_of(&next, e), &[b'a' + (197 % 26) as u8; 1000][..]);
        prev = next;
    }
    // The second rebuild copies one file's bytes and shares the big segment.
    dir.write("d5/f005.txt", b"just this");
    let next = rebuilt(&o, 1000, &prev).unwrap();
    assert_eq!(next.stats.bytes_copied, 9);
    assert!(next.stats.segments_shared >= 1);
    assert!(next.stats.paths_examined >= 200, "a full walk, for now");
}

fn body_of<'s>(snap: &'s Snapshot, e: &crate::cache::Entry) -> &'s [u8] {
    body(snap, &e.identity)
}
