//! The origin behind real caches: nginx `proxy_cache` and Varnish, started
//! by each test in front of a fresh server, on ephemeral ports with their
//! own temporary directories. What a cache stores is served to everyone for
//! its whole lifetime, so each check asks what the cache hands to clients,
//! and counts in the origin's access log what reached the origin.
//!
//! Every scenario runs once per cache (`nginx_…` and `varnish_…`); a machine
//! without the program prints a loud SKIP (`.ci/run` installs both).

use crate::support;

use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use support::caches::{
    decoded, incompressible_filler, origin_count, prose, Cache, Kind, ACCEPT_ENCODINGS,
};
use support::{poll_until, set_mtime, write_file, Server, TempDir};

/// An origin server on a temporary root, logging every request as JSON.
struct Origin {
    dir: TempDir,
    root: PathBuf,
    log: PathBuf,
    server: Option<Server>,
}

impl Origin {
    /// A root with `files`, not started yet.
    fn new(tag: &str, files: &[(&str, &[u8])]) -> Origin {
        let dir = TempDir::new(tag);
        let root = dir.path().join("www");
        fs::create_dir_all(&root).unwrap();
        for (rel, bytes) in files {
            write_file(&root, rel, bytes);
        }
        let log = dir.path().join("access.json");
        Origin {
            dir,
            root,
            log,
            server: None,
        }
    }

    /// Start with `config` (TOML) and `extra` flags.
    fn start(&mut self, config: &str, extra: &[&str]) -> &Server {
        let conf = self.dir.path().join("origin.toml");
        fs::write(&conf, config).unwrap();
        let (log, conf) = (self.log.display().to_string(), conf.display().to_string());
        let mut args = vec![
            "--config",
            &conf,
            "--access-log",
            &log,
            "--access-log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        self.server = Some(Server::start(&self.root, &args));
        self.server.as_ref().unwrap()
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("started")
    }

    fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        write_file(&self.root, rel, bytes)
    }

    /// Replace `rel` atomically (write aside, rename into place), the way a
    /// deploy should.
    fn replace(&self, rel: &str, bytes: &[u8]) {
        let tmp = self
            .dir
            .path()
            .join(format!(".{}.tmp", rel.replace('/', "_")));
        fs::write(&tmp, bytes).unwrap();
        fs::rename(&tmp, self.root.join(rel)).unwrap();
    }

    /// Wait until the origin itself serves `want` at `path` (the watcher
    /// has rebuilt).
    fn wait_serving(&self, path: &str, want: &[u8]) {
        // A query string the cache never sends, so these requests are told
        // apart from the cache's in the access log.
        let probe = format!("{path}?direct");
        let ok = poll_until(Duration::from_secs(10), || {
            self.server().get(&probe).body == want
        });
        assert!(
            ok,
            "origin never served the new {path}\n{}",
            self.server().log_text()
        );
    }

    fn count(&self, uri: &str, status: u16, at_least: usize) -> usize {
        origin_count(&self.log, uri, status, at_least)
    }
}

/// Text that compresses well and says which version it is on every line, so
/// a body mixing two versions is caught line by line.
fn versioned(version: u32, lines: usize) -> Vec<u8> {
    (0..lines)
        .map(|i| format!("version {version:04} line {i:06} of a compressible document\n"))
        .collect::<String>()
        .into_bytes()
}

/// The single version every line of `body` names; panics on a mix.
#[track_caller]
fn single_version(body: &[u8], what: &str) -> u32 {
    let text = String::from_utf8_lossy(body);
    let mut versions: Vec<u32> = text
        .lines()
        .map(|l| {
            l[8..12]
                .parse()
                .unwrap_or_else(|_| panic!("{what}: bad line {l:?}"))
        })
        .collect();
    versions.dedup();
    assert_eq!(
        versions.len(),
        1,
        "{what}: a body mixing versions {versions:?}"
    );
    versions[0]
}

/// Runs `scenario` once per cache kind under a name per kind.
macro_rules! through_each_cache {
    ($($scenario:ident),* $(,)?) => {
        mod nginx {
            $(#[test] fn $scenario() { super::$scenario(super::Kind::Nginx) })*
        }
        mod varnish {
            $(#[test] fn $scenario() { super::$scenario(super::Kind::Varnish) })*
        }
    };
}

through_each_cache!(
    every_accept_encoding_decodes_to_the_current_content,
    expired_entries_are_revalidated_with_304s,
    a_change_reaches_clients_after_expiry_never_mixed,
    an_in_place_rewrite_in_paused_pieces_is_never_cached_half_written,
    a_stale_sidecar_never_reaches_a_client,
    error_cache_control_is_honoured_for_404,
    the_fast_start_window_is_not_cached_for_the_full_lifetime,
);

/// a. br, gzip, zstd, all, none and `identity`: each gets bytes that decode
/// to the file, from the cache's first fetch and from its stored copy.
fn every_accept_encoding_decodes_to_the_current_content(kind: Kind) {
    let doc = versioned(1, 400);
    let mut origin = Origin::new("cache-a", &[("doc.html", &doc), ("tiny.txt", b"tiny\n")]);
    origin.start("cache_control_default = \"public, max-age=60\"\n", &[]);
    let Some(cache) = Cache::start(kind, origin.server().addr()) else {
        return;
    };
    for round in 0..2 {
        for ae in ACCEPT_ENCODINGS {
            for (path, want) in [("/doc.html", &doc[..]), ("/tiny.txt", b"tiny\n")] {
                let headers: Vec<(&str, &str)> =
                    ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
                let r = cache.get(path, &headers);
                assert_eq!(
                    r.status, 200,
                    "{kind:?} {path} AE {ae:?} round {round}: {r:?}"
                );
                let body =
                    decoded(&r).unwrap_or_else(|e| panic!("{kind:?} {path} AE {ae:?}: {e}: {r:?}"));
                assert!(
                    body == want,
                    "{kind:?} {path} AE {ae:?} round {round}: wrong content {r:?}"
                );
                let coding = r.header("content-encoding").unwrap_or("identity");
                let accepted = ae.unwrap_or("identity");
                assert!(
                    coding == "identity" || accepted.contains(coding),
                    "{kind:?} {path}: {coding} sent to a client accepting {ae:?}"
                );
            }
        }
    }
}

/// b. Once an entry expires the cache asks again with a validator, and the
/// origin answers 304 (counted in its access log); clients get the body.
fn expired_entries_are_revalidated_with_304s(kind: Kind) {
    let doc = versioned(1, 200);
    let mut origin = Origin::new("cache-b", &[("doc.html", &doc)]);
    origin.start("cache_control_default = \"public, max-age=1\"\n", &[]);
    let Some(cache) = Cache::start(kind, origin.server().addr()) else {
        return;
    };
    let ae = [("Accept-Encoding", "gzip")];
    let first = cache.get("/doc.html", &ae);
    assert_eq!(decoded(&first).unwrap(), doc, "{kind:?}: {first:?}");
    assert_eq!(origin.count("/doc.html", 200, 1), 1);
    let mut revalidations = 0;
    for _ in 0..2 {
        // nginx keeps expiry times in whole seconds: 2.1 s is past a
        // 1 s lifetime whenever it started.
        thread::sleep(Duration::from_millis(2100));
        let r = cache.get("/doc.html", &ae);
        assert_eq!(r.status, 200, "{kind:?}: {r:?}");
        assert_eq!(decoded(&r).unwrap(), doc, "{kind:?}: {r:?}");
        revalidations += 1;
    }
    let not_modified = origin.count("/doc.html", 304, revalidations);
    assert!(
        not_modified >= revalidations,
        "{kind:?}: {not_modified} 304s for {revalidations} expiries; log {:?}",
        support::caches::access_log(&origin.log)
    );
    assert_eq!(
        origin.count("/doc.html", 200, 1),
        1,
        "{kind:?}: full fetches"
    );
}

/// c. Versions replaced by rename while clients read through the cache:
/// every body is one version, and the last one reaches clients once the
/// stored copy expires.
fn a_change_reaches_clients_after_expiry_never_mixed(kind: Kind) {
    let mut origin = Origin::new("cache-c", &[("doc.html", &versioned(0, 300))]);
    origin.start("cache_control_default = \"public, max-age=1\"\n", &[]);
    let Some(cache) = Cache::start(kind, origin.server().addr()) else {
        return;
    };
    let last = 5;
    let mut seen = Vec::new();
    for version in 1..=last {
        origin.replace("doc.html", &versioned(version, 300));
        let until = Instant::now() + Duration::from_millis(400);
        while Instant::now() < until {
            for ae in ACCEPT_ENCODINGS {
                let headers: Vec<(&str, &str)> =
                    ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
                let r = cache.get("/doc.html", &headers);
                assert_eq!(r.status, 200, "{kind:?}: {r:?}");
                let body = decoded(&r).unwrap();
                seen.push(single_version(&body, &format!("{kind:?} AE {ae:?}")));
            }
        }
    }
    origin.wait_serving("/doc.html", &versioned(last, 300));
    thread::sleep(Duration::from_millis(2100));
    for ae in ACCEPT_ENCODINGS {
        let headers: Vec<(&str, &str)> = ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
        let r = cache.get("/doc.html", &headers);
        let body = decoded(&r).unwrap();
        assert_eq!(
            single_version(&body, "after expiry"),
            last,
            "{kind:?} AE {ae:?}: {r:?}"
        );
    }
    assert!(seen.iter().all(|v| *v <= last));
}

/// d. A file rewritten in place (truncated, then written in pieces with
/// pauses, the way `cp` onto an existing file or a slow upload does) while
/// the cache keeps fetching it after each 1 s expiry: every body a client
/// gets is one whole version, never the half-written file, and the new
/// version arrives once the writer has closed it.
fn an_in_place_rewrite_in_paused_pieces_is_never_cached_half_written(kind: Kind) {
    use std::io::Write;
    const LINES: usize = 300;
    let old = versioned(1, LINES);
    let new = versioned(2, LINES);
    let mut origin = Origin::new("cache-d", &[("doc.txt", &old)]);
    origin.start("cache_control_default = \"public, max-age=1\"\n", &[]);
    let Some(cache) = Cache::start(kind, origin.server().addr()) else {
        return;
    };
    let check = |what: &str| -> u32 {
        let mut versions = Vec::new();
        for ae in ACCEPT_ENCODINGS {
            let headers: Vec<(&str, &str)> =
                ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
            let r = cache.get("/doc.txt", &headers);
            assert_eq!(r.status, 200, "{kind:?} {what}: {r:?}");
            let body = decoded(&r).unwrap_or_else(|e| panic!("{kind:?} {what}: {e}: {r:?}"));
            let lines = body.iter().filter(|b| **b == b'\n').count();
            assert_eq!(
                lines, LINES,
                "{kind:?} AE {ae:?} {what}: a partial body reached a client"
            );
            versions.push(single_version(&body, &format!("{kind:?} AE {ae:?} {what}")));
        }
        versions.into_iter().max().unwrap()
    };
    assert_eq!(check("before"), 1);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(origin.root.join("doc.txt"))
        .unwrap();
    let pieces: Vec<&[u8]> = new.chunks(new.len() / 4 + 1).collect();
    for piece in &pieces {
        file.write_all(piece).unwrap();
        file.flush().unwrap();
        // Longer than the 1 s lifetime, so the cache refetches while the
        // file is half written.
        let until = Instant::now() + Duration::from_millis(1200);
        while Instant::now() < until {
            assert_eq!(check("during the rewrite"), 1);
            thread::sleep(Duration::from_millis(100));
        }
    }
    drop(file);
    origin.wait_serving("/doc.txt", &new);
    thread::sleep(Duration::from_millis(2100));
    assert_eq!(check("after the writer closed"), 2);
}

/// e. `doc.txt` rewritten while `doc.txt.gz` is left behind: the stale
/// sidecar is rejected, so gzip clients (Varnish asks for nothing else)
/// get the new text after expiry, never the old.
fn a_stale_sidecar_never_reaches_a_client(kind: Kind) {
    use std::io::Write;
    let gzip = |data: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    };
    let old = versioned(1, 300);
    let new = versioned(2, 300);
    let mut origin = Origin::new("cache-e", &[("doc.txt", &old)]);
    let sidecar = origin.write("doc.txt.gz", &gzip(&old));
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    set_mtime(&origin.root.join("doc.txt"), an_hour_ago);
    origin.start("cache_control_default = \"public, max-age=1\"\n", &[]);
    let Some(cache) = Cache::start(kind, origin.server().addr()) else {
        return;
    };
    let ae = [("Accept-Encoding", "gzip")];
    let r = cache.get("/doc.txt", &ae);
    assert_eq!(
        r.header("content-encoding"),
        Some("gzip"),
        "{kind:?}: sidecar used: {r:?}"
    );
    assert_eq!(single_version(&decoded(&r).unwrap(), "before"), 1);

    // The source changes; the sidecar (now older) stays.
    origin.replace("doc.txt", &new);
    origin.wait_serving("/doc.txt", &new);
    thread::sleep(Duration::from_millis(2100));
    for ae in ACCEPT_ENCODINGS {
        let headers: Vec<(&str, &str)> = ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
        let r = cache.get("/doc.txt", &headers);
        assert_eq!(
            single_version(&decoded(&r).unwrap(), "after"),
            2,
            "{kind:?} AE {ae:?}: the stale sidecar reached a client: {r:?}"
        );
    }
    // A sidecar touched after its source but holding other bytes is
    // rejected too.
    fs::write(&sidecar, gzip(&old)).unwrap();
    origin.replace("doc.txt.br", b"not even brotli");
    thread::sleep(Duration::from_millis(2100));
    for ae in ACCEPT_ENCODINGS {
        let headers: Vec<(&str, &str)> = ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
        let r = cache.get("/doc.txt", &headers);
        assert_eq!(
            single_version(
                &decoded(&r).unwrap_or_else(|e| panic!("{kind:?} {ae:?}: {e} {r:?}")),
                "mismatch"
            ),
            2,
            "{kind:?} AE {ae:?}: a mismatching sidecar reached a client: {r:?}"
        );
    }
}

/// f. `error_cache_control` for 404: the cache keeps the 404 for its
/// lifetime (the origin sees one request), then asks again and finds the
/// file that appeared meanwhile.
fn error_cache_control_is_honoured_for_404(kind: Kind) {
    let mut origin = Origin::new("cache-f", &[("index.html", b"<p>home</p>\n")]);
    origin.start(
        "error_cache_control = { 404 = \"public, max-age=4\" }\n",
        &[],
    );
    let Some(cache) = Cache::start(kind, origin.server().addr()) else {
        return;
    };
    let first = cache.get("/late.txt", &[]);
    assert_eq!(first.status, 404, "{kind:?}: {first:?}");
    let started = Instant::now();
    assert_eq!(origin.count("/late.txt", 404, 1), 1);
    origin.write("late.txt", b"arrived\n");
    origin.wait_serving("/late.txt", b"arrived\n");
    // Still within the 404's lifetime: the cache answers it alone.
    let again = cache.get("/late.txt", &[]);
    // Varnish counts the lifetime from the origin's Date, which has whole
    // seconds: up to a second of it may be gone already.
    if started.elapsed() < Duration::from_millis(2500) {
        assert_eq!(
            again.status, 404,
            "{kind:?}: the cache did not keep the 404: {again:?}"
        );
        assert_eq!(
            origin.count("/late.txt", 404, 1),
            1,
            "{kind:?}: the 404 was not cached: {again:?}"
        );
    } else {
        support::loud("NOTE: the machine is too slow to see the cached 404 before its expiry; only its expiry was checked");
    }
    let ok = poll_until(Duration::from_secs(8), || {
        cache.get("/late.txt", &[]).status == 200
    });
    assert!(ok, "{kind:?}: the 404 outlived its max-age");
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{kind:?}: 404 not kept"
    );
}

/// 1 through a cache. A root over the fast-start threshold serves identity
/// bodies while its variants are built: the cache must store them under
/// `Vary: Accept-Encoding` and only for the capped lifetime, so that once
/// the variants exist a br/gzip client gets a compressed body, not the
/// identity one for the configured year.
fn the_fast_start_window_is_not_cached_for_the_full_lifetime(kind: Kind) {
    let doc = prose(1, 600_000);
    let mut origin = Origin::new("cache-1", &[("doc.html", &doc)]);
    incompressible_filler(&origin.root);
    origin.start(
        "[cache_control]\n\"*.html\" = \"public, max-age=31536000, immutable\"\n",
        &["--fast-start-max-age", "2"],
    );
    let server = origin.server();
    server
        .wait_for_log("building compressed variants", Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no fast start\n{}", server.log_text()));
    let Some(cache) = Cache::start(kind, server.addr()) else {
        return;
    };
    let gzip = [("Accept-Encoding", "gzip")];
    let r = cache.get("/doc.html", &gzip);
    assert_eq!(decoded(&r).unwrap(), doc, "{kind:?}: {r:?}");
    let in_window = server
        .log_lines()
        .iter()
        .all(|l| !l.contains("compressed variants ready"));
    if in_window {
        assert_eq!(r.header("content-encoding"), None, "{kind:?}: {r:?}");
    }
    let ready = server.wait_for_log("compressed variants ready", Duration::from_secs(300));
    assert!(
        ready.is_some(),
        "variants never built\n{}",
        server.log_text()
    );
    thread::sleep(Duration::from_millis(3100));
    let r = cache.get("/doc.html", &gzip);
    assert_eq!(decoded(&r).unwrap(), doc, "{kind:?}: {r:?}");
    assert_eq!(
        r.header("content-encoding"),
        Some("gzip"),
        "{kind:?}: the identity body of the fast-start window outlived the cap: {r:?}"
    );
}
