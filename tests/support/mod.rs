//! Integration-test harness: spawns the real `shardhttpd` binary on ephemeral
//! ports, talks to it over raw sockets, and parses what comes back strictly
//! enough that a wrong byte count or a missing header fails a test.
//!
//! Every test crate includes this with `mod support;`, so helpers one crate does
//! not use are expected.
#![allow(dead_code)]

pub mod access_log;
pub mod browser;
pub mod caches;
mod dates;
pub mod h2;
pub mod h2raw;
pub mod h3;
pub mod haproxy;
mod http1;
pub mod metrics;
pub mod pebble;
pub mod privilege;
pub mod procfs;
pub mod sendfile_mode;
mod server;
pub mod tls;
pub mod transport;
pub mod upgrade;

pub use dates::*;
pub use http1::*;
pub use server::*;

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the server gets to print its listening lines.
pub const READY_DEADLINE: Duration = Duration::from_secs(10);
/// Read timeout on every test socket, so a server that goes quiet fails the
/// test instead of hanging it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Step between polls of anything the tests wait for.
pub const POLL_STEP: Duration = Duration::from_millis(10);

/// Content of the file placed next to (outside) every document root; no
/// response may ever contain it.
pub const SECRET: &str = "TOP-SECRET-outside-root-c0ffee";

/// Polls `cond` until it returns true or `deadline` passes; returns whether it
/// became true.
pub fn poll_until(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        thread::sleep(POLL_STEP);
    }
}

/// The environment variable that turns every skip into a failure: with
/// `SHARDHTTPD_TEST_REQUIRE=all` (`.ci/run` sets it) a test that would
/// skip for a missing program, CPU or kernel feature fails instead, so CI
/// cannot pass by not running something. Unset, a developer's machine
/// still skips, loudly.
pub const REQUIRE_VAR: &str = "SHARDHTTPD_TEST_REQUIRE";

/// Whether [`REQUIRE_VAR`] asks for every test to run in full. Any other
/// value than `all` is refused, so a typo cannot quietly allow skips.
pub fn all_required() -> bool {
    match std::env::var(REQUIRE_VAR) {
        Ok(v) if v == "all" => true,
        Ok(v) if v.is_empty() => false,
        Ok(v) => panic!("{REQUIRE_VAR}={v:?}: the only value is `all`"),
        Err(_) => false,
    }
}

/// Writes `note` to the real stderr, past libtest's output capture, so a
/// skipped or partial check shows in every CI log. A note that starts
/// with `SKIP` says that a test, or part of one, did not run: it goes
/// through [`skip`], which fails the test under
/// `SHARDHTTPD_TEST_REQUIRE=all`.
#[track_caller]
pub fn loud(note: &str) {
    if note.starts_with("SKIP") {
        skip(note);
    } else {
        let _ = writeln!(io::stderr(), "\n**********\n{note}\n**********");
    }
}

/// A test (or part of one) cannot run here: `note` says what and why
/// (`SKIP: <program> not installed`). Under `SHARDHTTPD_TEST_REQUIRE=all`
/// this panics with the note, failing the test; otherwise it prints the
/// note loudly and the caller returns.
#[track_caller]
pub fn skip(note: &str) {
    let note = if note.starts_with("SKIP") {
        note.to_owned()
    } else {
        format!("SKIP: {note}")
    };
    if all_required() {
        panic!("{note}\n({REQUIRE_VAR}=all: a test that cannot run fails)");
    }
    let _ = writeln!(io::stderr(), "\n**********\n{note}\n**********");
}

/// The first of `names` that is an executable file on PATH.
pub fn find_program(names: &[&str]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Whether `program` is an executable on PATH.
pub fn installed(program: &str) -> bool {
    find_program(&[program]).is_some()
}

/// A port free on 127.0.0.1 for TCP and UDP right now, for a peer that
/// cannot be given port 0 and say which it took, or an address the test
/// must know before something binds it.
///
/// It is taken below the kernel's ephemeral range, so that between this
/// check and the peer's bind no socket bound to port 0 and no outgoing
/// connection (of which the tests running beside it make thousands) can
/// take it; each call in this process gets another port.
pub fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    const SPAN: usize = 10_000;
    let ephemeral = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<usize>().ok())
        .unwrap_or(32768);
    assert!(
        ephemeral >= 1024 + SPAN,
        "ip_local_port_range starts at {ephemeral}: no room below it for the tests' fixed ports"
    );
    let low = ephemeral - SPAN;
    // Another test binary run at the same time starts elsewhere.
    let start = std::process::id() as usize * 101;
    for _ in 0..SPAN {
        let port = (low + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        let addr = ("127.0.0.1", port);
        if std::net::TcpListener::bind(addr).is_ok() && std::net::UdpSocket::bind(addr).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..{ephemeral}");
}

/// Run `cmd` to its end: whether it exited 0, and its stdout and stderr
/// together (what an assertion looks in and prints).
pub fn outcome(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run the command");
    (out.status.success(), output_text(&out))
}

/// Run `cmd` with `stdin` written to it (then closed) to its end.
pub fn output_with_stdin(cmd: &mut Command, stdin: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A finished command's stdout and stderr together.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------------------
// Temporary directories and fixture sites
// ---------------------------------------------------------------------------

static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A directory under the system temp dir, unique per process and call, removed
/// on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        // A crate that includes several suites has one copy of this module
        // (and of the counter) per suite: the suite's name keeps them apart.
        let parts: Vec<&str> = module_path!().split("::").collect();
        let suite = match parts.len() {
            3.. => format!("{}-", parts[parts.len() - 2]),
            _ => String::new(),
        };
        let path = std::env::temp_dir().join(format!(
            "shardhttpd-test-{}-{suite}{}-{}",
            std::process::id(),
            n,
            tag
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Writes `bytes` to `dir/rel`, creating parent directories.
pub fn write_file(dir: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("create parent dir");
    }
    fs::write(&path, bytes).expect("write fixture file");
    path
}

/// Sets a file's modification time.
pub fn set_mtime(path: &Path, t: SystemTime) {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open for set_modified");
    f.set_modified(t).expect("set_modified");
}

/// A fixed modification time for files whose validators a test checks:
/// Sun, 13 Sep 2020 12:26:40 GMT.
pub const FIXED_MTIME_SECS: u64 = 1_600_000_000;
pub const FIXED_MTIME_HTTP: &str = "Sun, 13 Sep 2020 12:26:40 GMT";

pub fn fixed_mtime() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(FIXED_MTIME_SECS)
}

/// 62 distinct bytes, so a wrong range offset shows up as wrong content.
pub const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
pub const INDEX_HTML: &[u8] = b"<!doctype html><title>index</title><p>hello from the root</p>\n";
pub const STYLE_CSS: &[u8] = b"body { color: #333; background: white; }\n";
pub const DIR_INDEX_HTML: &[u8] = b"<!doctype html><p>index of dir</p>\n";
pub const SAME_CONTENT: &[u8] = b"two files, one content\n";

/// SHA-256 of `data` in lower-case hex, as h2probe.py reports bodies.
pub fn sha256_hex(data: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A small PNG-looking file (signature plus filler); the server types by
/// extension, not content.
pub fn png_bytes() -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend((0..200u32).map(|i| (i * 7 % 256) as u8));
    v
}

/// The repository root, where `dashboards/` and `examples/` live.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The checked-in `examples/site`, for tests that only read it.
pub fn example_site() -> PathBuf {
    repo().join("examples/site")
}

/// A document root `base/www` with a standard set of files, and `base/secret.txt`
/// outside it.
pub struct Site {
    pub dir: TempDir,
    pub root: PathBuf,
}

impl Site {
    pub fn new(tag: &str) -> Site {
        let dir = TempDir::new(tag);
        let root = dir.path().join("www");
        fs::create_dir_all(&root).expect("create root");
        write_file(dir.path(), "secret.txt", SECRET.as_bytes());
        write_file(&root, "index.html", INDEX_HTML);
        write_file(&root, "style.css", STYLE_CSS);
        write_file(&root, "img.png", &png_bytes());
        write_file(&root, "digits.txt", DIGITS);
        write_file(&root, "dir/index.html", DIR_INDEX_HTML);
        write_file(&root, "copy1.txt", SAME_CONTENT);
        write_file(&root, "copy2.txt", SAME_CONTENT);
        for name in ["index.html", "style.css", "img.png", "digits.txt"] {
            set_mtime(&root.join(name), fixed_mtime());
        }
        Site { dir, root }
    }

    pub fn base(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        write_file(&self.root, rel, bytes)
    }

    /// Put `bytes` at `rel` the way a deploy should: written aside, then
    /// renamed into place.
    pub fn replace(&self, rel: &str, bytes: &[u8]) {
        let aside = self.write(&format!("{rel}.tmp"), bytes);
        fs::rename(aside, self.root.join(rel)).unwrap();
    }
}

// ---------------------------------------------------------------------------
// Assertions shared by several suites
// ---------------------------------------------------------------------------

/// Headers every response must carry (with the default flags): a valid,
/// current Date, `Server: shardhttpd`, and a Content-Length equal to the
/// body unless the status has no body.
#[track_caller]
pub fn assert_common_headers(r: &Response, method: &str) {
    let date = r.must("date");
    let t = parse_http_date(date).unwrap_or_else(|| panic!("Date {date:?} is not IMF-fixdate"));
    let now = SystemTime::now();
    let skew = now.duration_since(t).unwrap_or_else(|e| e.duration());
    assert!(skew < Duration::from_secs(5), "Date {date:?} is not now");
    assert_eq!(r.header_count("date"), 1, "one Date header: {r:?}");
    assert_eq!(
        r.header("server"),
        Some("shardhttpd"),
        "Server header: {r:?}"
    );
    if r.status != 304 && r.status != 204 {
        let cl = r
            .content_length()
            .unwrap_or_else(|| panic!("{} without Content-Length: {r:?}", r.status));
        if method != "HEAD" {
            assert_eq!(cl, r.body.len() as u64, "Content-Length vs body: {r:?}");
        }
        assert_eq!(r.header_count("content-length"), 1, "{r:?}");
    }
    if r.status == 204 {
        assert!(
            !matches!(r.header("content-length"), Some(v) if v.trim() != "0"),
            "204 must not announce a body: {r:?}"
        );
    }
}

/// An error response: the expected status, a short non-empty body, then the
/// server closes the connection.
#[track_caller]
pub fn assert_error_then_close(conn: &mut Conn, want: u16, what: &str) -> Response {
    let r = conn
        .read_response()
        .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
    assert_eq!(r.status, want, "{what}: {r:?}");
    assert_common_headers(&r, "GET");
    // The client must learn from the response itself that the connection
    // ends, not only from the close that follows (RFC 9112 §9.6).
    assert!(
        r.says_close(),
        "{what}: an error that closes must say `Connection: close`: {r:?}"
    );
    assert!(!r.body.is_empty(), "{what}: error body should not be empty");
    assert!(r.body.len() < 4096, "{what}: error body should be short");
    assert_closed(conn, what);
    r
}

/// Parses `/proc/self/status`'s `Cpus_allowed_list` style list (`0-3,6`).
pub fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                v.extend(a..=b);
            }
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// The `Name:` line of a `/proc/.../status` file.
pub fn proc_status_field(path: &Path, name: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

/// CPUs this test process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    proc_status_field(Path::new("/proc/self/status"), "Cpus_allowed_list")
        .map(|s| parse_cpu_list(&s))
        .unwrap_or_default()
}

/// Threads of `pid` by name: `comm` → tid.
pub fn threads(pid: u32) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(comm) = fs::read_to_string(e.path().join("comm")) {
            out.insert(comm.trim().to_string(), tid);
        }
    }
    out
}

/// A response body decoded from its `Content-Encoding` (none, gzip, br,
/// zstd); any other coding fails the test.
pub fn decode_body(encoding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("zstd") => out = zstd::stream::decode_all(body).unwrap(),
        Some(other) => panic!("unexpected Content-Encoding {other}"),
    }
    out
}

/// Incompressible bytes, different for each `seed`.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
