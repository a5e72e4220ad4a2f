//! Integration-test harness: spawns the real `shardhttpd` binary on ephemeral
//! ports, talks to it over raw sockets, and parses what comes back strictly
//! enough that a wrong byte count or a missing header fails a test.
//!
//! Every test crate includes this with `mod support;`, so helpers one crate does
//! not use are expected.
#![allow(dead_code)]

pub mod access_log;
pub mod caches;
pub mod h2;
pub mod metrics;
pub mod pebble;
pub mod privilege;
pub mod procfs;
pub mod sendfile_mode;
pub mod transport;
pub mod upgrade;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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

/// Writes `note` to the real stderr, past libtest's output capture, so a
/// skipped or partial check shows in every CI log.
pub fn loud(note: &str) {
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

/// A port free on 127.0.0.1 right now (bound and released: for a peer
/// that cannot be given port 0 and say which it took, or an address the
/// test must know before something binds it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
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
// The server process
// ---------------------------------------------------------------------------

/// The binary under test: `$SHARDHTTPD_BIN` if set (to run the suite
/// against a release build or a saved copy), else the one cargo built.
pub fn bin() -> PathBuf {
    std::env::var_os("SHARDHTTPD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_shardhttpd")))
}

/// A command for the binary with the environment the harness relies on:
/// uncoloured logs at info level.
pub fn command() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env("NO_COLOR", "1").env("RUST_LOG", "info");
    cmd
}

/// The event source the suites run on: `$SHARDHTTPD_TEST_IO` (`epoll`,
/// `uring` or `auto`) as `--io`, unless the test chose one (`--io` in its
/// arguments, or an `io` key in a config file it wrote, which a flag would
/// override). Unset: the server's default (`auto`).
pub fn io_flag(args: &[String]) -> Vec<String> {
    match std::env::var("SHARDHTTPD_TEST_IO") {
        Ok(io) if !io.is_empty() && !args.iter().any(|a| a == "--io" || a.starts_with("--io=")) => {
            let config_sets_io = args
                .windows(2)
                .filter(|w| w[0] == "--config" || w[0] == "-c")
                .any(|w| {
                    std::fs::read_to_string(&w[1]).is_ok_and(|t| {
                        t.lines().any(|l| {
                            l.trim_start().starts_with("io ") || l.trim_start().starts_with("io=")
                        })
                    })
                });
            if config_sets_io {
                Vec::new()
            } else {
                vec!["--io".into(), io]
            }
        }
        _ => Vec::new(),
    }
}

/// Removes ANSI escape sequences, in case the logger colours anyway.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The value after `key=` in a log line, up to whitespace, without quotes or a
/// trailing comma.
pub fn log_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=");
    let mut search = 0;
    while let Some(pos) = line[search..].find(&pat) {
        let start = search + pos;
        let at_word_start = start == 0
            || !line.as_bytes()[start - 1].is_ascii_alphanumeric()
                && line.as_bytes()[start - 1] != b'_';
        if at_word_start {
            let rest = &line[start + pat.len()..];
            // A value ends at whitespace, or at the quote closing the JSON
            // string (`--log-format json`) that holds the message.
            let end = if let Some(quoted) = rest.strip_prefix('"') {
                quoted.find('"').map_or(rest.len(), |e| e + 2)
            } else {
                rest.find(|c: char| c.is_whitespace() || c == '"')
                    .unwrap_or(rest.len())
            };
            return Some(rest[..end].trim_matches(|c| c == '"' || c == ','));
        }
        search = start + pat.len();
    }
    None
}

/// A running `shardhttpd`; killed on drop, with its log printed if the test
/// is failing.
pub struct Server {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
    exit: Option<ExitStatus>,
    /// Over TLS ([`transport::selected`]): the plaintext front before the
    /// server's TLS listener, which [`Server::addr`] names.
    front: Option<transport::TlsFront>,
}

impl Server {
    /// Starts the server on `root` with `extra` flags. Adds `--admin
    /// 127.0.0.1:0`, and `--listen 127.0.0.1:0` unless `extra` has a
    /// `--listen`. Over TLS ([`transport::selected`]) it adds a TLS
    /// listener too (unless `extra` has one) and puts a
    /// [`transport::TlsFront`] before it.
    pub fn start(root: &Path, extra: &[&str]) -> Server {
        Server::start_env(root, extra, &[])
    }

    /// [`Server::start`] with extra environment variables.
    pub fn start_env(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args: Vec<String> = vec!["--root".into(), root.display().to_string()];
        let listens = extra.iter().filter(|a| **a == "--listen").count();
        if listens == 0 {
            args.extend(["--listen".into(), "127.0.0.1:0".into()]);
        }
        args.extend(["--admin".into(), "127.0.0.1:0".into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let front = (transport::selected() == tls::Transport::Tls
            && !extra.contains(&"--tls-listen"))
        .then(transport::FrontCerts::new);
        if let Some(certs) = &front {
            args.extend(certs.flags());
        }
        let mut server = Server::spawn_env(&args, listens.max(1), env);
        if let Some(certs) = front {
            let tls_addr = tls::tls_addr(&server);
            server.front = Some(transport::TlsFront::start(tls_addr, certs));
        }
        server
    }

    /// Spawns the binary with exactly `args` and waits for `listens`
    /// listening lines.
    pub fn spawn(args: &[String], listens: usize) -> Server {
        Server::spawn_env(args, listens, &[])
    }

    /// [`Server::spawn`] with extra environment variables.
    pub fn spawn_env(args: &[String], listens: usize, env: &[(&str, &str)]) -> Server {
        let mut cmd = command();
        cmd.args(args).args(io_flag(args)).envs(env.iter().copied());
        Server::spawn_command(cmd, listens)
    }

    /// The binary with exactly `args`, run by `wrapper` (a program and its
    /// arguments, which `exec`s the binary's path and `args` given after
    /// them), e.g. under a seccomp filter.
    pub fn spawn_under(wrapper: &[&str], args: &[String], listens: usize) -> Server {
        let mut cmd = Command::new(wrapper[0]);
        cmd.args(&wrapper[1..])
            .arg(bin())
            .args(args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info");
        Server::spawn_command(cmd, listens)
    }

    /// Spawns `cmd` (the binary, or a program that execs it in place, such
    /// as `systemd-socket-activate` or a seccomp wrapper) and waits for
    /// `listens` listening lines.
    pub fn spawn_command(mut cmd: Command, listens: usize) -> Server {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn shardhttpd");
        let stderr = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                match line {
                    Ok(l) => sink.lock().unwrap().push(strip_ansi(&l)),
                    Err(_) => break,
                }
            }
        });
        let mut server = Server {
            child,
            logs,
            reader: Some(reader),
            addrs: Vec::new(),
            exit: None,
            front: None,
        };
        let end = Instant::now() + READY_DEADLINE;
        loop {
            let addrs: Vec<SocketAddr> = server
                .log_lines()
                .iter()
                .filter(|l| l.contains("listening addr="))
                .filter_map(|l| log_field(l, "addr").and_then(|a| a.parse().ok()))
                .collect();
            if addrs.len() >= listens {
                server.addrs = addrs;
                return server;
            }
            if let Some(status) = server.try_wait() {
                // Let the reader drain the pipe so the panic shows the log.
                server.join_reader();
                panic!("shardhttpd exited with {status} before listening; args {args:?}");
            }
            if Instant::now() >= end {
                panic!(
                    "shardhttpd printed {} of {listens} `listening addr=` lines within {:?}; args {args:?}",
                    addrs.len(),
                    READY_DEADLINE,
                );
            }
            thread::sleep(POLL_STEP);
        }
    }

    /// Waits for the stderr reader to reach EOF; only once the process has
    /// exited.
    fn join_reader(&mut self) {
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the tests connect: the first listening address, or over TLS
    /// the front before the TLS listener.
    pub fn addr(&self) -> SocketAddr {
        match &self.front {
            Some(front) => front.addr(),
            None => self.addrs[0],
        }
    }

    /// The first cleartext listening address, whatever the transport.
    pub fn plain_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// The TLS front, when the harness runs over TLS.
    pub fn front(&self) -> Option<&transport::TlsFront> {
        self.front.as_ref()
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The admin listener's address, from its log line.
    pub fn admin_addr(&self) -> SocketAddr {
        let line = self
            .wait_for_log("admin endpoint addr=", Duration::from_secs(5))
            .unwrap_or_else(|| panic!("no admin endpoint line\n{}", self.log_text()));
        log_field(&line, "addr")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("bad admin line {line:?}"))
    }

    pub fn log_lines(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    pub fn log_text(&self) -> String {
        let lines = self.log_lines();
        format!(
            "---- shardhttpd stderr ({} lines) ----\n{}\n---- end ----",
            lines.len(),
            lines.join("\n")
        )
    }

    /// Waits until a log line contains `needle`; returns that line.
    pub fn wait_for_log(&self, needle: &str, deadline: Duration) -> Option<String> {
        let mut found = None;
        poll_until(deadline, || {
            found = self.log_lines().into_iter().find(|l| l.contains(needle));
            found.is_some()
        });
        found
    }

    /// Sends a signal by name (`TERM`, `INT`, `HUP`) with `kill(1)`.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.pid());
    }

    /// The exit status if the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait");
        }
        self.exit
    }

    pub fn is_alive(&mut self) -> bool {
        self.try_wait().is_none()
    }

    /// Polls for exit until `deadline`.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + deadline;
        loop {
            if let Some(s) = self.try_wait() {
                self.join_reader();
                return Some(s);
            }
            if Instant::now() >= end {
                return None;
            }
            thread::sleep(POLL_STEP);
        }
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(self.addr())
    }

    /// One request on a fresh connection; the method is the first word of
    /// `raw`.
    pub fn send(&self, raw: &str) -> Response {
        let mut c = self.connect();
        c.send(raw.as_bytes());
        c.read_response_to(method_of(raw.as_bytes()))
            .unwrap_or_else(|e| panic!("no response to {raw:?}: {e}\n{}", self.log_text()))
    }

    /// `GET path` on a fresh connection.
    pub fn get(&self, path: &str) -> Response {
        self.send(&get(path))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.join_reader();
        if thread::panicking() {
            eprintln!("{}", self.log_text());
        }
    }
}

/// Wait at most `within` until `path` is served as 200 with exactly
/// `body`; panic with the last answer and the server's log otherwise.
#[track_caller]
pub fn await_body(server: &Server, within: Duration, path: &str, body: &str, what: &str) {
    let mut last = None;
    let ok = poll_until(within, || {
        let r = server.get(path);
        let done = r.status == 200 && r.body == body.as_bytes();
        last = Some(r);
        done
    });
    assert!(
        ok,
        "{what}: {path} not served within {within:?}; last {last:?}\n{}",
        server.log_text()
    );
}

/// Background load: `conns` threads, each sending GETs over keep-alive
/// connections it replaces every 25 requests (so the kernel spreads them
/// over the shards) until stopped. Thread `t` walks `paths` from entry `t`
/// and asserts each status. Stop it for the number of requests sent.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<u64>>,
}

impl Load {
    pub fn start(addr: SocketAddr, conns: usize, paths: &'static [(&'static str, u16)]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..conns)
            .map(|t| {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let mut sent = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let mut conn = Conn::connect(addr);
                        for i in 0..25 {
                            let (path, want) = paths[(t + i) % paths.len()];
                            let r = conn.roundtrip(&get(path));
                            assert_eq!(r.status, want, "GET {path}");
                            sent += 1;
                            // Pace a little: enough for rates, not enough to
                            // starve the other tests of CPU.
                            thread::sleep(Duration::from_millis(2));
                        }
                    }
                    sent
                })
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops every thread and waits for it; the requests sent in all.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().expect("load thread panicked"))
            .sum()
    }
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// `GET path HTTP/1.1` with a Host header.
pub fn get(path: &str) -> String {
    request("GET", path, &[])
}

/// An HTTP/1.1 request with a Host header and `headers`.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s
}

/// The method (first word) of a raw request.
pub fn method_of(raw: &[u8]) -> &str {
    let end = raw.iter().position(|&b| b == b' ').unwrap_or(0);
    std::str::from_utf8(&raw[..end]).unwrap_or("")
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

#[derive(Clone)]
pub struct Response {
    pub version: String,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name`, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn header_count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .count()
    }

    /// The header's value, or a panic that shows the response.
    #[track_caller]
    pub fn must(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("missing header {name}: {self:?}"))
    }

    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether the response asks for the connection to close.
    pub fn says_close(&self) -> bool {
        self.header("connection")
            .map(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
            .unwrap_or(false)
    }

    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")
            .map(|v| v.trim().parse().expect("numeric Content-Length"))
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {} {}", self.version, self.status, self.reason)?;
        for (k, v) in &self.headers {
            writeln!(f, "  {k}: {v}")?;
        }
        let shown = &self.body[..self.body.len().min(200)];
        write!(
            f,
            "  <{} body bytes> {:?}{}",
            self.body.len(),
            String::from_utf8_lossy(shown),
            if self.body.len() > 200 { "…" } else { "" }
        )
    }
}

/// Why no complete response could be read.
#[derive(Debug)]
pub enum ReadError {
    /// EOF (or reset) before the first byte of a response.
    Closed,
    /// EOF (or reset) part-way: inside the head, or with `got` of `want` body
    /// bytes.
    Incomplete {
        status: Option<u16>,
        got: usize,
        want: Option<usize>,
    },
    /// No progress within the read timeout; `status` and `want` are known
    /// once the head has been read.
    Timeout {
        buffered: usize,
        status: Option<u16>,
        want: Option<usize>,
    },
    Malformed(String),
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parses a response head (status line and headers, without the final CRLF).
pub fn parse_head(head: &[u8]) -> Result<Response, String> {
    let text = std::str::from_utf8(head).map_err(|e| format!("head not UTF-8: {e}"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("").to_string();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status code in {status_line:?}"))?;
    let reason = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        if k.is_empty() || k.contains(' ') {
            return Err(format!("bad header name in {line:?}"));
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    Ok(Response {
        version,
        status,
        reason,
        headers,
        body: Vec::new(),
    })
}

/// One client connection with a buffer, so pipelined responses can be read
/// one after another.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Conn::from_stream(stream)
    }

    pub fn try_connect(addr: SocketAddr) -> io::Result<Conn> {
        TcpStream::connect_timeout(&addr, IO_TIMEOUT).map(Conn::from_stream)
    }

    pub fn from_stream(stream: TcpStream) -> Conn {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn set_read_timeout(&self, t: Duration) {
        self.stream.set_read_timeout(Some(t)).unwrap();
    }

    /// Writes all of `bytes` in one `write_all`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads more bytes into the buffer; Ok(0) on EOF or reset. A read a
    /// signal interrupted (EINTR: a socket read with a timeout is not
    /// restarted) is made again, as any client's read loop does.
    fn fill(&mut self) -> Result<usize, ReadError> {
        let mut chunk = [0u8; 64 * 1024];
        let read = loop {
            match self.stream.read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match read {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e) if is_reset(&e) => Ok(0),
            Err(e) if is_timeout(&e) => Err(ReadError::Timeout {
                buffered: self.buf.len(),
                status: None,
                want: None,
            }),
            Err(e) => Err(ReadError::Io(e)),
        }
    }

    /// Reads one response head; the body (if any) is left in the buffer.
    pub fn read_head(&mut self) -> Result<Response, ReadError> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = parse_head(&self.buf[..end]).map_err(ReadError::Malformed)?;
                self.buf.drain(..end + 4);
                return Ok(head);
            }
            if self.buf.len() > 64 * 1024 {
                return Err(ReadError::Malformed("response head over 64 KiB".into()));
            }
            if self.fill()? == 0 {
                return Err(if self.buf.is_empty() {
                    ReadError::Closed
                } else {
                    ReadError::Incomplete {
                        status: None,
                        got: self.buf.len(),
                        want: None,
                    }
                });
            }
        }
    }

    /// Reads one complete response to a request with `method` (HEAD, 204 and
    /// 304 responses have no body).
    pub fn read_response_to(&mut self, method: &str) -> Result<Response, ReadError> {
        let mut resp = self.read_head()?;
        let bodiless =
            method == "HEAD" || resp.status == 204 || resp.status == 304 || resp.status < 200;
        if bodiless {
            return Ok(resp);
        }
        if let Some(te) = resp.header("transfer-encoding") {
            return Err(ReadError::Malformed(format!(
                "unexpected Transfer-Encoding {te:?} on a static response"
            )));
        }
        match resp.header("content-length") {
            Some(v) => {
                let want: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| ReadError::Malformed(format!("bad Content-Length {v:?}")))?;
                while self.buf.len() < want {
                    let n = self.fill().map_err(|e| match e {
                        ReadError::Timeout { buffered, .. } => ReadError::Timeout {
                            buffered,
                            status: Some(resp.status),
                            want: Some(want),
                        },
                        e => e,
                    })?;
                    if n == 0 {
                        return Err(ReadError::Incomplete {
                            status: Some(resp.status),
                            got: self.buf.len(),
                            want: Some(want),
                        });
                    }
                }
                resp.body = self.buf.drain(..want).collect();
            }
            None => {
                // No length: the body runs to EOF (RFC 9112 §6.3 rule 8).
                while self.fill()? != 0 {}
                resp.body = std::mem::take(&mut self.buf);
            }
        }
        Ok(resp)
    }

    /// Reads one response to a GET.
    pub fn read_response(&mut self) -> Result<Response, ReadError> {
        self.read_response_to("GET")
    }

    /// Sends `raw` and reads its response, panicking on failure.
    #[track_caller]
    pub fn roundtrip(&mut self, raw: &str) -> Response {
        self.send(raw.as_bytes());
        self.read_response_to(method_of(raw.as_bytes()))
            .unwrap_or_else(|e| panic!("no response to {raw:?}: {e}"))
    }

    /// Takes the bytes read past the last parsed response.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Ok if the peer closes (EOF or reset) within `within` with no further
    /// bytes; Err describing what happened otherwise.
    pub fn expect_closed(&mut self, within: Duration) -> Result<(), String> {
        if !self.buf.is_empty() {
            return Err(format!(
                "{} unexpected bytes after the response: {:?}",
                self.buf.len(),
                String::from_utf8_lossy(&self.buf[..self.buf.len().min(200)])
            ));
        }
        self.set_read_timeout(within);
        let mut b = [0u8; 4096];
        let r = match self.stream.read(&mut b) {
            Ok(0) => Ok(()),
            Ok(n) => Err(format!(
                "expected EOF, got {n} bytes: {:?}",
                String::from_utf8_lossy(&b[..n])
            )),
            Err(e) if is_reset(&e) => Ok(()),
            Err(e) if is_timeout(&e) => Err(format!("connection still open after {within:?}")),
            Err(e) => Err(format!("read error {e}")),
        };
        self.set_read_timeout(IO_TIMEOUT);
        r
    }
}

/// Asserts the connection is closed by the server within a couple of seconds.
#[track_caller]
pub fn assert_closed(conn: &mut Conn, what: &str) {
    if let Err(e) = conn.expect_closed(Duration::from_secs(3)) {
        panic!("{what}: server should have closed the connection: {e}");
    }
}

// ---------------------------------------------------------------------------
// multipart/byteranges
// ---------------------------------------------------------------------------

pub struct Part {
    pub headers: Vec<(String, String)>,
    pub data: Vec<u8>,
}

impl Part {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The `boundary` parameter of a multipart Content-Type.
pub fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Splits a multipart body (RFC 2046 §5.1.1) into parts.
pub fn parse_multipart(body: &[u8], boundary: &str) -> Result<Vec<Part>, String> {
    let delim = format!("--{boundary}").into_bytes();
    let first = find(body, &delim).ok_or("no opening boundary")?;
    let mut pos = first + delim.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(format!("boundary not followed by CRLF at byte {pos}"));
        }
        pos += 2;
        let head_end = find(&body[pos..], b"\r\n\r\n").ok_or("part head not terminated")?;
        let head = parse_head_lines(&body[pos..pos + head_end])?;
        pos += head_end + 4;
        let mut next_delim = b"\r\n".to_vec();
        next_delim.extend_from_slice(&delim);
        let data_len = find(&body[pos..], &next_delim).ok_or("part not terminated")?;
        parts.push(Part {
            headers: head,
            data: body[pos..pos + data_len].to_vec(),
        });
        pos += data_len + next_delim.len();
    }
}

fn parse_head_lines(head: &[u8]) -> Result<Vec<(String, String)>, String> {
    let text = std::str::from_utf8(head).map_err(|e| e.to_string())?;
    text.split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("bad part header {l:?}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// HTTP dates (IMF-fixdate, RFC 9110 §5.6.7)
// ---------------------------------------------------------------------------

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 → (year, month 1..=12, day), Howard Hinnant's
/// `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn fmt_http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after epoch").as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        d,
        MONTHS[m as usize - 1],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses an IMF-fixdate; None if it is not exactly that format.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 29 || &s[3..5] != ", " || !s.ends_with(" GMT") {
        return None;
    }
    let day: u32 = s[5..7].parse().ok()?;
    let month = MONTHS.iter().position(|m| *m == &s[8..11])? as u32 + 1;
    let year: i64 = s[12..16].parse().ok()?;
    let h: i64 = s[17..19].parse().ok()?;
    let mi: i64 = s[20..22].parse().ok()?;
    let sec: i64 = s[23..25].parse().ok()?;
    let days = days_from_civil(year, month, day);
    if DAYS[days.rem_euclid(7) as usize] != &s[..3] {
        return None;
    }
    let total = days * 86_400 + h * 3600 + mi * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(total).ok()?))
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
pub mod tls;

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
