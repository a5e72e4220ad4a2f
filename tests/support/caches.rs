//! Real caching proxies in front of the server under test: nginx with
//! `proxy_cache` and Varnish, each started by the test on an ephemeral port
//! with its own temporary directory and a configuration the test writes.
//! A machine without the program gets `None` and a loud SKIP line, never a
//! silent pass; `.ci/run` installs both so CI really runs them.
//!
//! Responses through a cache are read with [`fetch`], which (unlike
//! `Conn`) understands chunked bodies: Varnish sends one when it gunzips a
//! stored gzip object for a client that does not accept gzip.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{find_program, free_port, parse_head, poll_until, Response, TempDir, IO_TIMEOUT};

/// How long a cache gets to start answering.
const START_DEADLINE: Duration = Duration::from_secs(20);
/// Tries at a free port for nginx, which cannot listen on port 0 and
/// report it: another process may take the port between the probe and
/// nginx's bind.
const NGINX_PORT_TRIES: usize = 5;

/// Which cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nginx,
    Varnish,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Nginx, Kind::Varnish];

    pub fn program(self) -> &'static str {
        match self {
            Kind::Nginx => "nginx",
            Kind::Varnish => "varnishd",
        }
    }
}

/// A running cache in front of `origin`; killed on drop, with its log shown
/// when the test is failing.
pub struct Cache {
    pub kind: Kind,
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl Cache {
    /// Starts `kind` in front of `origin`, or returns `None` after a loud
    /// SKIP when the program is not installed ([`super::skip`]: a failure
    /// under `SHARDHTTPD_TEST_REQUIRE=all`).
    #[track_caller]
    pub fn start(kind: Kind, origin: SocketAddr) -> Option<Cache> {
        let Some(program) = find_program(&[kind.program()]).or_else(|| {
            // Debian installs both under /usr/sbin, which a test's PATH may
            // lack.
            let p = Path::new("/usr/sbin").join(kind.program());
            p.is_file().then_some(p)
        }) else {
            super::skip(&format!(
                "SKIP: {} not installed; the behind-a-cache test did not run",
                kind.program()
            ));
            return None;
        };
        Some(match kind {
            Kind::Nginx => Cache::nginx(&program, origin),
            Kind::Varnish => Cache::varnish(&program, origin),
        })
    }

    fn nginx(program: &Path, origin: SocketAddr) -> Cache {
        let mut dir = TempDir::new("nginx-cache");
        let base = dir.path().to_path_buf();
        for sub in ["cache", "tmp", "logs"] {
            fs::create_dir_all(base.join(sub)).expect("nginx dirs");
        }
        let mut last_err = String::new();
        for _ in 0..NGINX_PORT_TRIES {
            let port = free_port();
            let conf = base.join("nginx.conf");
            fs::write(&conf, nginx_conf(&base, port, origin)).expect("write nginx.conf");
            let child = Command::new(program)
                .arg("-p")
                .arg(&base)
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn nginx");
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let mut cache = Cache {
                kind: Kind::Nginx,
                child,
                addr,
                dir,
            };
            let up = poll_until(START_DEADLINE, || {
                cache.exited() || TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_ok()
            });
            if up && !cache.exited() {
                return cache;
            }
            last_err = cache.log();
            let _ = cache.child.kill();
            let _ = cache.child.wait();
            if !last_err.contains("Address already in use") {
                break;
            }
            // Keep the directory, retry on another port.
            dir = std::mem::replace(&mut cache.dir, TempDir::new("nginx-unused"));
        }
        panic!("nginx did not start:\n{last_err}");
    }

    fn varnish(program: &Path, origin: SocketAddr) -> Cache {
        let dir = TempDir::new("varnish-cache");
        let base = dir.path().to_path_buf();
        let vcl = base.join("origin.vcl");
        fs::write(&vcl, varnish_vcl(origin)).expect("write vcl");
        let work = base.join("work");
        let log = fs::File::create(base.join("varnishd.log")).expect("varnish log");
        // -j none: no privilege separation (tests may run as root, and the
        // jail's users need not exist); -F: stay in the foreground.
        let child = Command::new(program)
            .args(["-F", "-j", "none", "-n"])
            .arg(&work)
            .args(["-a", "127.0.0.1:0", "-T", "127.0.0.1:0", "-f"])
            .arg(&vcl)
            .args(["-s", "malloc,64m", "-p", "default_grace=0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn varnishd");
        let mut cache = Cache {
            kind: Kind::Varnish,
            child,
            addr: ([127, 0, 0, 1], 0).into(),
            dir,
        };
        let admin =
            find_program(&["varnishadm"]).unwrap_or_else(|| PathBuf::from("/usr/bin/varnishadm"));
        let mut addr = None;
        poll_until(START_DEADLINE, || {
            if cache.exited() {
                return true;
            }
            if !cache.log().contains("Child launched OK") {
                return false;
            }
            let out = Command::new(&admin)
                .arg("-n")
                .arg(&work)
                .arg("debug.listen_address")
                .output();
            // "a0 127.0.0.1 37407"
            addr = out.ok().and_then(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let mut words = text.split_whitespace().skip(1);
                let ip = words.next()?;
                let port = words.next()?;
                format!("{ip}:{port}").parse().ok()
            });
            addr.is_some()
        });
        match addr {
            Some(a) if !cache.exited() => cache.addr = a,
            _ => panic!("varnishd did not start:\n{}", cache.log()),
        }
        cache
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The cache's own log, for failure messages.
    pub fn log(&self) -> String {
        let file = match self.kind {
            Kind::Nginx => self.dir.path().join("logs/error.log"),
            Kind::Varnish => self.dir.path().join("varnishd.log"),
        };
        fs::read_to_string(file).unwrap_or_default()
    }

    /// `GET path` through the cache with `headers`.
    #[track_caller]
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        fetch(self.addr, "GET", path, headers)
            .unwrap_or_else(|e| panic!("{:?}: GET {path}: {e}\n{}", self.kind, self.log()))
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- {:?} log ----\n{}\n---- end ----",
                self.kind,
                self.log()
            );
        }
    }
}

/// `proxy_cache` honouring the origin's `Cache-Control` (no
/// `proxy_cache_valid`), revalidating expired entries with conditional
/// requests, and saying HIT/MISS/EXPIRED/REVALIDATED in `X-Cache-Status`.
/// `master_process off` keeps it one process that does not switch users.
fn nginx_conf(base: &Path, port: u16, origin: SocketAddr) -> String {
    let b = base.display();
    format!(
        "daemon off;\n\
         master_process off;\n\
         error_log {b}/logs/error.log info;\n\
         pid {b}/nginx.pid;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n\
           access_log off;\n\
           client_body_temp_path {b}/tmp/body;\n\
           proxy_temp_path {b}/tmp/proxy;\n\
           fastcgi_temp_path {b}/tmp/fastcgi;\n\
           uwsgi_temp_path {b}/tmp/uwsgi;\n\
           scgi_temp_path {b}/tmp/scgi;\n\
           proxy_cache_path {b}/cache levels=1:2 keys_zone=origin:4m max_size=256m;\n\
           server {{\n\
             listen 127.0.0.1:{port};\n\
             location / {{\n\
               proxy_pass http://{origin};\n\
               proxy_http_version 1.1;\n\
               proxy_set_header Connection \"\";\n\
               proxy_cache origin;\n\
               proxy_cache_revalidate on;\n\
               add_header X-Cache-Status $upstream_cache_status always;\n\
             }}\n\
           }}\n\
         }}\n"
    )
}

/// The built-in VCL plus: no grace (an expired object is fetched again
/// before it is served, so "after expiry" is a point in time) and an hour
/// of keep, so an expired object is revalidated with a conditional request
/// rather than fetched whole.
fn varnish_vcl(origin: SocketAddr) -> String {
    format!(
        "vcl 4.1;\n\
         backend origin {{ .host = \"{}\"; .port = \"{}\"; }}\n\
         sub vcl_backend_response {{\n\
           set beresp.grace = 0s;\n\
           set beresp.keep = 1h;\n\
         }}\n",
        origin.ip(),
        origin.port()
    )
}

/// One request on a fresh connection (`Connection: close`), read to EOF;
/// a chunked body is de-chunked, so `body` is always the payload as sent
/// (still content-coded).
pub fn fetch(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) if Instant::now() < deadline && e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e} after {} bytes", raw.len())),
        }
    }
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no complete head in {} bytes", raw.len()))?;
    let mut resp = parse_head(&raw[..end])?;
    let body = &raw[end + 4..];
    if method == "HEAD" || resp.status == 304 || resp.status == 204 {
        return Ok(resp);
    }
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    resp.body = if chunked {
        dechunk(body)?
    } else if let Some(len) = resp.content_length() {
        let len = len as usize;
        if body.len() < len {
            return Err(format!("body {} of {len} bytes", body.len()));
        }
        body[..len].to_vec()
    } else {
        body.to_vec()
    };
    Ok(resp)
}

/// RFC 9112 §7.1 chunked coding, without trailers.
fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line not terminated")?;
        let size_text = std::str::from_utf8(&data[..line_end]).map_err(|e| e.to_string())?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err("chunk cut short".into());
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// The body decoded according to its `Content-Encoding` (br, gzip, zstd or
/// none); an unknown coding is an error.
pub fn decoded(r: &Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match r.header("content-encoding").map(str::trim) {
        None | Some("identity") => return Ok(r.body.clone()),
        Some("br") => brotli::Decompressor::new(&r.body[..], 4096)
            .read_to_end(&mut out)
            .map(|_| ())
            .map_err(|e| format!("br: {e}"))?,
        Some("gzip") => flate2::read::MultiGzDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .map(|_| ())
            .map_err(|e| format!("gzip: {e}"))?,
        Some("zstd") => out = zstd::stream::decode_all(&r.body[..]).map_err(|e| e.to_string())?,
        Some(other) => return Err(format!("unknown Content-Encoding {other:?}")),
    }
    Ok(out)
}

/// `(uri, status)` of every request in a JSON access log written by the
/// origin (`--access-log-format json`).
pub fn access_log(path: &Path) -> Vec<(String, u16)> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["uri"].as_str().unwrap_or("").to_owned(),
                v["status"].as_u64().unwrap_or(0) as u16,
            )
        })
        .collect()
}

/// How many requests for `uri` the origin answered with `status`, once the
/// access log has caught up to at least `at_least` of them (the log is
/// flushed every 250 ms) or 5 s have passed.
pub fn origin_count(log: &Path, uri: &str, status: u16, at_least: usize) -> usize {
    let count = || {
        access_log(log)
            .iter()
            .filter(|(u, s)| u == uri && *s == status)
            .count()
    };
    poll_until(Duration::from_secs(5), || count() >= at_least);
    count()
}

/// The Accept-Encoding values every through-cache check sends: each coding
/// alone, all of them, none at all (`None`), and identity only.
pub const ACCEPT_ENCODINGS: [Option<&str>; 6] = [
    Some("br"),
    Some("gzip"),
    Some("zstd"),
    Some("br, gzip, zstd"),
    None,
    Some("identity"),
];

/// `len` bytes of text in lines of words picked by a PRNG seeded with
/// `seed`: compressible like prose, but slow enough at brotli 11 that a
/// few of them keep a large root's fast-start window open for seconds.
pub fn prose(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "origin",
        "cache",
        "vary",
        "encoding",
        "stale",
        "fresh",
        "shard",
        "epoll",
        "snapshot",
        "sidecar",
        "brotli",
        "gzip",
        "zstd",
        "etag",
        "revalidate",
        "expiry",
        "header",
        "static",
        "server",
        "request",
        "response",
        "window",
        "variant",
        "identity",
        "lifetime",
        "proxy",
        "varnish",
        "nginx",
        "deploy",
        "rename",
        "byte",
        "range",
    ];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % 32) as usize].as_bytes());
        out.push(if x % 11 == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

/// 9 MiB of incompressible in-memory bodies (`filler/NN.png`, 512 KiB
/// each): a root past the 8 MiB fast-start threshold without adding
/// compression work.
pub fn incompressible_filler(root: &Path) {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let noise: Vec<u8> = (0..9 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for (i, part) in noise.chunks(512 * 1024).enumerate() {
        super::write_file(root, &format!("filler/{i:02}.png"), part);
    }
}
