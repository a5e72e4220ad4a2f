//! Unit tests of what a build makes of each file beyond its bytes:
//! compressed variants and sidecars, per-path rules baked into heads, and
//! what a rebuild reuses, copies and shares with the previous generation.

use super::*;

fn body(snap: &Snapshot, repr: impl std::ops::Deref<Target = Repr>) -> &[u8] {
    match repr.body {
        Body::Mem { off } => snap.mem(off, repr.len as usize),
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
    assert_eq!(a.identity().etag(), a_old.identity().etag());
    assert_eq!(a.codings(), a_old.codings());
    for (r, r_old) in a.variants().zip(a_old.variants()) {
        let c = r.coding();
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
    assert_eq!(e.codings(), &[Coding::Brotli, Coding::Zstd, Coding::Gzip]);
    let mut etags = vec![e.identity().etag().to_vec()];
    for r in e.variants() {
        let coding = r.coding();
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
        let head = String::from_utf8_lossy(&r.head_200_vec()).into_owned();
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", r.len)),
            "{head}"
        );
        assert!(head.contains("Content-Encoding: "), "{head}");
        assert!(head.contains("Vary: Accept-Encoding\r\n"), "{head}");
        etags.push(r.etag().to_vec());
    }
    let ident = String::from_utf8_lossy(&e.identity().common_vec()).into_owned();
    assert!(ident.contains("Vary: Accept-Encoding\r\n"), "{ident}");
    etags.sort();
    etags.dedup();
    assert_eq!(etags.len(), 4, "an ETag per representation");
    let sum: u64 = snap.stats.encoded_bytes.iter().sum();
    assert_eq!(sum, e.encoded.iter().map(|(_, r)| r.len).sum::<u64>());

    for path in [&b"/tiny.html"[..], b"/logo.png"] {
        let e = snap.entry(file_idx(&snap, path));
        assert!(!e.vary && e.encoded.is_empty());
        assert!(!String::from_utf8_lossy(&e.identity().common_vec()).contains("Vary"));
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
    assert!(
        e.codings().contains(&Coding::Brotli),
        "others still computed"
    );
    // The sidecar is served at its own URL too.
    file_idx(&snap, b"/app.js.gz");

    // Without compression the sidecar is still used.
    o.compress = None;
    let plain = build(&o, 2).unwrap();
    let e = plain.entry(file_idx(&plain, b"/app.js"));
    assert_eq!(e.codings(), &[Coding::Gzip]);

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
    use super::sidecar::{Rejected, SIDECARS_REJECTED};
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
    assert_eq!(e.codings(), &[Coding::Gzip], "a matching sidecar is used");

    // The source is rewritten, the sidecar left behind: older, not used.
    let (older, mismatch) = (rejected(Rejected::Older), rejected(Rejected::Mismatch));
    dir.write("doc.txt", &new);
    let snap = rebuilt(&o, 2, &snap).expect("source changed");
    let e = snap.entry(file_idx(&snap, b"/doc.txt"));
    assert!(e.codings().is_empty(), "stale sidecar used");
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
    assert!(snap
        .entry(file_idx(&snap, b"/doc.txt"))
        .codings()
        .is_empty());
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
        String::from_utf8_lossy(&s.entry(file_idx(s, p)).identity().common_vec()).into_owned()
    };
    let big = common(&window, b"/big.html");
    assert!(window
        .entry(file_idx(&window, b"/big.html"))
        .codings()
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
        .codings()
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
        String::from_utf8_lossy(&snap.entry(file_idx(&snap, p)).identity().head_200_vec())
            .into_owned()
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
        String::from_utf8_lossy(&snap.entry(file_idx(&snap, path)).identity().common_vec())
            .into_owned()
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
        assert_eq!(body_of(&next, &e), body.as_bytes());
        let e = next.entry(file_idx(&next, b"/d7/f197.txt"));
        assert_eq!(body_of(&next, &e), &[b'a' + (197 % 26) as u8; 1000][..]);
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

#[test]
fn each_variant_is_tagged_by_its_own_bytes_and_its_coding() {
    let dir = TempDir::new("variant-etags");
    dir.write("a.html", &page(50));
    let mut o = opts(&dir.0);
    o.compress = fast_compress();
    let snap = build(&o, 1).unwrap();
    let a = snap.entry(file_idx(&snap, b"/a.html"));
    let mut tokens = Vec::new();
    for repr in a.variants() {
        let token = match repr.coding() {
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
            Coding::Identity => unreachable!("the identity is not a variant"),
        };
        let expected = format!("\"{:032x}-{token}\"", xxh3_128(body(&snap, repr)));
        assert_eq!(repr.etag(), expected.as_bytes());
        tokens.push(token);
    }
    assert_eq!(tokens, ["br", "zstd", "gzip"]);
}

#[test]
fn a_new_empty_directory_alone_makes_a_new_snapshot() {
    let dir = TempDir::new("unchanged-dirs");
    dir.write("a.txt", b"a");
    dir.write("sub/index.html", b"sub");
    let o = opts(&dir.0);
    let first = build(&o, 1).unwrap();
    assert!(rebuilt(&o, 2, &first).is_none(), "nothing changed");
    fs::create_dir(dir.0.join("empty")).unwrap();
    let second = rebuilt(&o, 2, &first).expect("a directory appeared");
    assert_eq!(second.resolve(b"/empty"), Some(Resource::AddSlash));
    assert_eq!(second.resolve(b"/empty/"), Some(Resource::Forbidden));
    // Every file kept its place; only the directory's keys are new.
    assert_eq!(second.resolve(b"/sub/"), first.resolve(b"/sub/"));
    assert!(rebuilt(&o, 3, &second).is_none(), "nothing changed since");
}
