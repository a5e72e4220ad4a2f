//! The server under test as a process: the binary and its command line,
//! a running `Server` with its log, and background load against it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::*;

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

    /// The server on the config file `config` (its root, `[[sites]]`, TLS),
    /// with one cleartext and the admin listener on port 0, plus `extra`
    /// flags. Spawned with exactly these flags: no transport is put in
    /// front, since the file decides the TLS listeners.
    pub fn with_config(config: &Path, extra: &[&str]) -> Server {
        let mut args: Vec<String> = vec!["--config".into(), config.display().to_string()];
        for flag in ["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"] {
            args.push(flag.into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::spawn(&args, 1)
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
