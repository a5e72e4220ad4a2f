//! The servers under test: shardhttpd (built here in release), the floor,
//! and every installed peer (nginx, h2o, lighttpd) with a fair config this
//! module writes: one worker pinned to the server CPUs, no access log, open
//! file caches and sendfile on, limits for c=10000.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::docs::SMALL;
use crate::procs::{self, Group};

/// Longest wait for a server to answer after start.
const READY: Duration = Duration::from_secs(20);

/// The peers, in table order.
pub const PEERS: [&str; 4] = ["h2o", "nginx", "lighttpd", "caddy"];

/// A started server.
pub struct Server {
    pub name: String,
    pub port: u16,
    pub group: Group,
    /// `Last-Modified` of the 100-byte page, as this server renders it.
    pub last_modified: Option<String>,
    /// The command line, for commands.txt.
    pub command: String,
    /// The HTTPS port, when the server was started with TLS.
    pub tls_port: Option<u16>,
    /// Whether the HTTPS port answers HTTP/2 (ALPN h2), checked with h2load.
    pub h2: bool,
    /// A cleartext port that answers HTTP/2 with prior knowledge (h2c),
    /// checked with h2load.
    pub h2c_port: Option<u16>,
    /// Whether the HTTPS port's UDP twin answers HTTP/3, checked with
    /// `h3load`.
    pub h3: bool,
}

/// A self-signed certificate for 127.0.0.1 / localhost, shared by every
/// server in the TLS rows.
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    /// `--tls-listen 127.0.0.1:PORT --tls-cert … --tls-key …`, as shardhttpd
    /// and the floors take them.
    fn flags(&self, port: u16) -> [String; 6] {
        [
            "--tls-listen".into(),
            format!("127.0.0.1:{port}"),
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
        ]
    }
}

/// An I/O backend: of a floor, and of shardhttpd on the backend axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Io {
    /// Readiness: one epoll loop per shard.
    Epoll,
    /// Completion: one io_uring ring per shard.
    Uring,
}

impl Io {
    pub fn name(self) -> &'static str {
        match self {
            Io::Epoll => "epoll",
            Io::Uring => "uring",
        }
    }
}

/// The key type of the TLS rows' certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyKind {
    /// ECDSA P-256, as a modern deployment would serve.
    Ecdsa,
    /// RSA 2048 bits, still the most common.
    Rsa,
}

/// Make the certificate with openssl, the same for every server.
pub fn make_cert(work: &Path, kind: KeyKind, log: &mut Vec<String>) -> io::Result<Tls> {
    let cert = work.join("cert.pem");
    let key = work.join("key.pem");
    let (newkey, opt) = match kind {
        KeyKind::Ecdsa => ("ec", "ec_paramgen_curve:prime256v1"),
        KeyKind::Rsa => ("rsa", "rsa_keygen_bits:2048"),
    };
    let args = [
        "req",
        "-x509",
        "-newkey",
        newkey,
        "-pkeyopt",
        opt,
        "-nodes",
        "-days",
        "7",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout",
        &key.display().to_string(),
        "-out",
        &cert.display().to_string(),
    ]
    .map(str::to_owned);
    log.push(format!("openssl {}", args.join(" ")));
    let out = Command::new("openssl").args(&args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(Tls { cert, key })
}

/// Wait until a TLS port accepts connections (the handshake is wrk's).
fn wait_tls(port: u16) -> io::Result<()> {
    let end = Instant::now() + READY;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        if Instant::now() >= end {
            return Err(io::Error::other(format!(
                "nothing listens on TLS port {port}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.group.pid()
    }

    pub fn alive(&mut self) -> bool {
        self.group.try_wait().is_none()
    }
}

/// Where the workspace lives (this crate is `bench/shardbench` in it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// `N` distinct free loopback ports: all are held while the next is bound,
/// since a port released can be handed out again at once (a server given
/// the same port twice, as listen and admin address, refuses to start).
pub fn free_ports<const N: usize>() -> io::Result<[u16; N]> {
    let held = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&held) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// What a plain HTTP/1.1 GET (or HEAD) got back.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body_len: usize,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// One request on a fresh connection, read to close.
pub fn fetch(port: u16, method: &str, path: &str, extra: &str) -> io::Result<Answer> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| io::Error::new(e.kind(), format!("{method} {path} on :{port}: {e}")))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| io::Error::other("no response head"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line in {head:?}")))?;
    Ok(Answer {
        status,
        head,
        body_len: raw.len() - split - 4,
    })
}

/// Wait until `port` serves every document with 200 and its exact size.
fn wait_ready(group: &mut Group, port: u16, name: &str) -> io::Result<()> {
    let end = Instant::now() + READY;
    loop {
        if let Some(status) = group.try_wait() {
            return Err(io::Error::other(format!(
                "{name} exited at start: {status}"
            )));
        }
        if procs::interrupted() {
            return Err(io::Error::other("interrupted"));
        }
        if let Ok(a) = fetch(port, "GET", SMALL.path, "") {
            if a.status == 200 && a.body_len == SMALL.bytes {
                break;
            }
        }
        if Instant::now() >= end {
            return Err(io::Error::other(format!(
                "{name} did not answer on port {port} within {READY:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_floor(name) {
        return Ok(());
    }
    for d in crate::docs::DOCS {
        let a = fetch(port, "GET", d.path, "")?;
        if a.status != 200 || a.body_len != d.bytes {
            return Err(io::Error::other(format!(
                "{name} answered {} with {} bytes for {} ({} expected)",
                a.status, a.body_len, d.path, d.bytes
            )));
        }
    }
    Ok(())
}

/// Everything a server start needs.
pub struct Setup<'a> {
    pub root: &'a Path,
    /// Where configs and logs go.
    pub work: &'a Path,
    pub cpus: &'a [usize],
    pub nofile: u64,
}

/// Start `cmd` pinned to the server CPUs and wait until it serves.
fn launch(name: &str, setup: &Setup<'_>, port: u16, cmd: &[String]) -> io::Result<Server> {
    let log = fs::File::create(setup.work.join(format!("{name}.log")))?;
    let mut full = vec![
        "taskset".to_owned(),
        "-c".to_owned(),
        procs::cpu_list(setup.cpus),
    ];
    full.extend(cmd.iter().cloned());
    let mut c = Command::new(&full[0]);
    c.args(&full[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .env("NO_COLOR", "1");
    let mut group = Group::spawn(name, &mut c)?;
    wait_ready(&mut group, port, name)?;
    let last_modified = fetch(port, "HEAD", SMALL.path, "")
        .ok()
        .and_then(|a| a.header("last-modified"));
    Ok(Server {
        name: name.to_owned(),
        port,
        group,
        last_modified,
        command: full.join(" "),
        tls_port: None,
        h2: false,
        h2c_port: None,
        h3: false,
    })
}

/// shardhttpd with `shards` shards on the first CPUs of `setup.cpus`.
pub fn start_shardhttpd(
    bin: &Path,
    setup: &Setup<'_>,
    shards: usize,
    steer: &str,
    name: &str,
    tls: Option<&Tls>,
    io: Option<Io>,
) -> io::Result<(Server, u16)> {
    let [port, admin, tls_port] = free_ports()?;
    let tls_port = tls.map(|_| tls_port);
    let cpus = &setup.cpus[..shards.min(setup.cpus.len())];
    // A single CPU `c` is written `c-c`: a bare number is a shard count.
    let cores = match cpus {
        [one] => format!("{one}-{one}"),
        many => procs::cpu_list(many),
    };
    let cmd: Vec<String> = [
        bin.display().to_string().as_str(),
        "--root",
        &setup.root.display().to_string(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--admin",
        &format!("127.0.0.1:{admin}"),
        "--cores",
        &cores,
        "--steer",
        steer,
        "--watch",
        "false",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut cmd = cmd;
    // HTTP/3 on the HTTPS port where the binary has it.
    let h3 = tls_port.is_some() && crate::machine::has_flag(bin, "--h3")?;
    if let (Some(t), Some(p)) = (tls, tls_port) {
        cmd.extend(t.flags(p));
    }
    if h3 {
        cmd.push("--h3".into());
    }
    if let Some(io) = io {
        cmd.extend(["--io".into(), io.name().into()]);
    }
    let sub = Setup { cpus, ..*setup };
    let mut server = launch(name, &sub, port, &cmd)?;
    if let Some(io) = io {
        check_backend(admin, io)?;
    }
    if let Some(p) = tls_port {
        wait_tls(p)?;
        server.tls_port = Some(p);
    }
    // h2 (ALPN) and h2c are on by default where the binary has them.
    check_h2(&mut server, Some(port));
    if h3 {
        check_h3(&mut server);
    }
    Ok((server, admin))
}

/// Refuse a shardhttpd that was asked for `io` and runs another backend:
/// where its /metrics has `shardhttpd_io_backend{…,backend="…"} 1` per
/// shard, every such line must name `io`. (A binary that predates the
/// metric is trusted: it took the flag.)
fn check_backend(admin: u16, io: Io) -> io::Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], admin));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| io::Error::new(e.kind(), format!("reading /metrics on :{admin}: {e}")))?;
    match backends_in_use(&text).iter().find(|b| *b != io.name()) {
        Some(other) => Err(io::Error::other(format!(
            "asked for --io {}, it runs {other}",
            io.name()
        ))),
        None => Ok(()),
    }
}

/// The backends `shardhttpd_io_backend` says are in use (value 1).
pub fn backends_in_use(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("shardhttpd_io_backend{"))
        .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) == Some(1.0))
        .filter_map(|l| {
            let v = l.split("backend=\"").nth(1)?.split('"').next()?;
            Some(v.to_owned())
        })
        .collect()
}

/// Whether one HTTP/2 request to `url` succeeds with h2load (h2c with
/// prior knowledge for http://, ALPN h2 for https://).
pub fn speaks_h2(url: &str) -> bool {
    if installed("h2load").is_none() {
        return false;
    }
    Command::new("h2load")
        .args(["-n1", "-c1", url])
        .stdin(Stdio::null())
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout);
            o.status.success()
                && text.contains("1 succeeded")
                && text.contains("1 2xx")
                && negotiated_h2(&text)
        })
        .unwrap_or(false)
}

/// Whether the server's TLS port answers HTTP/3 on its UDP twin.
fn check_h3(server: &mut Server) {
    let page = SMALL.path;
    server.h3 = server
        .tls_port
        .is_some_and(|p| speaks_h3(&format!("https://127.0.0.1:{p}{page}")));
}

/// Whether one GET by `shardbench h3load` (this executable) to `url` is
/// answered 200 over HTTP/3.
fn speaks_h3(url: &str) -> bool {
    let Ok(me) = std::env::current_exe() else {
        return false;
    };
    Command::new(me)
        .args(["h3load", "-n1", "-c1", "-N5", url])
        .stdin(Stdio::null())
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout);
            o.status.success()
                && text.contains("1 succeeded")
                && text.contains("1 2xx")
                && text.contains("Application protocol: h3")
        })
        .unwrap_or(false)
}

/// Whether h2load says it spoke HTTP/2. Over TLS it offers http/1.1 too
/// and carries on with it when the server picks it (a binary without h2
/// does): such a run measures HTTP/1.1, and must not pass for h2.
pub fn negotiated_h2(h2load_output: &str) -> bool {
    h2load_output.lines().any(|l| {
        l.strip_prefix("Application protocol:")
            .is_some_and(|p| matches!(p.trim(), "h2" | "h2c"))
    })
}

/// Sets [`Server::h2`] and [`Server::h2c_port`] from what the server
/// answers: h2 on its TLS port, h2c on `h2c` (its cleartext port, or a
/// port of its own).
fn check_h2(server: &mut Server, h2c: Option<u16>) {
    let page = SMALL.path;
    server.h2 = server
        .tls_port
        .is_some_and(|p| speaks_h2(&format!("https://127.0.0.1:{p}{page}")));
    server.h2c_port = h2c.filter(|p| speaks_h2(&format!("http://127.0.0.1:{p}{page}")));
}

/// The floor on `io`, run from this very executable: `floor` (epoll) or
/// `floor-uring`; with `tls`, on a TLS port too.
pub fn start_floor(setup: &Setup<'_>, io: Io, tls: Option<&Tls>) -> io::Result<Server> {
    let [port, tls_port] = free_ports()?;
    let me = std::env::current_exe()?;
    let mut cmd = vec![
        me.display().to_string(),
        "floor".into(),
        "--io".into(),
        io.name().into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    if let Some(t) = tls {
        cmd.extend(t.flags(tls_port));
    }
    let sub = Setup {
        cpus: &setup.cpus[..1],
        ..*setup
    };
    let mut server = launch(floor_name(io), &sub, port, &cmd)?;
    if tls.is_some() {
        wait_tls(tls_port)?;
        server.tls_port = Some(tls_port);
    }
    Ok(server)
}

/// The floor's name in the tables: `floor` is the epoll floor every ratio
/// is taken to.
pub fn floor_name(io: Io) -> &'static str {
    match io {
        Io::Epoll => "floor",
        Io::Uring => "floor-uring",
    }
}

/// Whether a server name is one of the floors.
pub fn is_floor(name: &str) -> bool {
    name == "floor" || name == "floor-uring"
}

/// Whether `program` is on PATH.
pub fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Start peer `name` (one of [`PEERS`]) with its fair config.
pub fn start_peer(name: &str, setup: &Setup<'_>, tls: Option<&Tls>) -> io::Result<Server> {
    let [port, tls_port, h2c_port] = free_ports()?;
    // nginx speaks h2c only on a listener of its own (`listen ... http2`
    // without ssl answers nothing else); h2o recognises the preface on its
    // HTTP/1 listener.
    let h2c = match name {
        "nginx" => Some(h2c_port),
        "h2o" | "caddy" => Some(port),
        _ => None,
    };
    // lighttpd's TLS is a separate module (lighttpd-mod-openssl): only with it.
    let tls = tls.filter(|_| name != "lighttpd" || lighttpd_has_tls());
    let tls_port = tls.map(|_| tls_port);
    let work = setup.work;
    let root = setup.root.display().to_string();
    let w = work.display().to_string();
    let cpu = setup.cpus[0];
    let root_user = is_root();
    let fds = setup.nofile.min(1 << 20);
    let conns = fds.saturating_sub(64).max(64);
    let sub = Setup {
        cpus: &setup.cpus[..1],
        ..*setup
    };
    let cmd: Vec<String> = match name {
        "nginx" => {
            fs::create_dir_all(work.join("nginx"))?;
            let mut conf = String::new();
            if root_user {
                conf.push_str("user root;\n");
            }
            // worker_cpu_affinity takes a bitmask, CPU 0 rightmost.
            let mask = format!("1{}", "0".repeat(cpu));
            let _ = write!(
                conf,
                "daemon off;\nmaster_process on;\nworker_processes 1;\n\
                 worker_cpu_affinity {mask};\nworker_rlimit_nofile {fds};\n\
                 pid {w}/nginx.pid;\nerror_log {w}/nginx-error.log warn;\n\
                 events {{ use epoll; worker_connections {conns}; }}\n\
                 http {{\n  types {{ text/html html; image/gif gif; application/octet-stream bin; }}\n\
                 default_type application/octet-stream;\n  access_log off;\n  sendfile on;\n\
                 tcp_nopush on;\n  tcp_nodelay on;\n\
                 open_file_cache max=1000 inactive=60s;\n  open_file_cache_valid 60s;\n\
                 keepalive_requests 100000000;\n  keepalive_timeout 65s;\n\
                 client_body_temp_path {w}/nginx/body;\n  proxy_temp_path {w}/nginx/proxy;\n\
                 fastcgi_temp_path {w}/nginx/fastcgi;\n  uwsgi_temp_path {w}/nginx/uwsgi;\n\
                 scgi_temp_path {w}/nginx/scgi;\n\
                 server {{ listen 127.0.0.1:{port} backlog=4096; root {root}; }}\n\
                 server {{ listen 127.0.0.1:{h2c_port} http2 backlog=4096; root {root}; }}\n"
            );
            if let (Some(t), Some(p)) = (tls, tls_port) {
                let _ = write!(
                    conf,
                    "server {{ listen 127.0.0.1:{p} ssl http2 backlog=4096; root {root};\n\
                     ssl_certificate {}; ssl_certificate_key {};\n\
                     ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; }}\n",
                    t.cert.display(),
                    t.key.display()
                );
            }
            conf.push_str("}\n");
            let path = work.join("nginx.conf");
            fs::write(&path, conf)?;
            vec![
                "nginx".into(),
                "-p".into(),
                format!("{w}/nginx"),
                "-c".into(),
                path.display().to_string(),
                "-e".into(),
                format!("{w}/nginx-error.log"),
            ]
        }
        "h2o" => {
            let mut conf = String::new();
            if root_user {
                conf.push_str("user: root\n");
            }
            // h2o keeps open files in its file cache by default; one
            // thread, no access-log directive (so none is written).
            let _ = write!(
                conf,
                "num-threads: 1\nmax-connections: {conns}\npid-file: {w}/h2o.pid\n\
                 error-log: {w}/h2o-error.log\nlisten:\n  host: 127.0.0.1\n  port: {port}\n"
            );
            if let (Some(t), Some(p)) = (tls, tls_port) {
                let _ = write!(
                    conf,
                    "listen:\n  host: 127.0.0.1\n  port: {p}\n  ssl:\n    certificate-file: {}\n\
                     \x20   key-file: {}\n",
                    t.cert.display(),
                    t.key.display()
                );
            }
            let _ = write!(
                conf,
                "hosts:\n  default:\n    paths:\n      /:\n        file.dir: {root}\n"
            );
            let path = work.join("h2o.conf");
            fs::write(&path, conf)?;
            vec!["h2o".into(), "-c".into(), path.display().to_string()]
        }
        "lighttpd" => {
            // One process, sendfile backend, stat cache on (its default),
            // no mod_accesslog; lighttpd caps connections at max-fds / 2.
            let conf = format!(
                "server.modules = ()\nserver.document-root = \"{root}\"\n\
                 server.bind = \"127.0.0.1\"\nserver.port = {port}\n\
                 server.pid-file = \"{w}/lighttpd.pid\"\nserver.errorlog = \"{w}/lighttpd-error.log\"\n\
                 server.event-handler = \"linux-sysepoll\"\nserver.network-backend = \"sendfile\"\n\
                 server.stat-cache-engine = \"simple\"\n\
                 server.max-fds = {fds}\nserver.max-connections = {}\nserver.listen-backlog = 4096\n\
                 server.max-keep-alive-requests = 100000000\nserver.max-keep-alive-idle = 65\n\
                 mimetype.assign = (\".html\" => \"text/html\", \".gif\" => \"image/gif\", \
                 \".bin\" => \"application/octet-stream\")\n",
                fds / 2
            );
            let mut conf = conf;
            if let (Some(t), Some(p)) = (tls, tls_port) {
                let _ = write!(
                    conf,
                    "server.modules += (\"mod_openssl\")\n\
                     $SERVER[\"socket\"] == \"127.0.0.1:{p}\" {{\n  ssl.engine = \"enable\"\n\
                     \x20 ssl.pemfile = \"{}\"\n  ssl.privkey = \"{}\"\n}}\n",
                    t.cert.display(),
                    t.key.display()
                );
            }
            let path = work.join("lighttpd.conf");
            fs::write(&path, conf)?;
            vec![
                "lighttpd".into(),
                "-D".into(),
                "-f".into(),
                path.display().to_string(),
            ]
        }
        "caddy" => {
            // No admin endpoint, no certificate automation, no access log
            // (Caddy's default); h2c on the cleartext port and HTTP/3 on
            // the TLS port's UDP twin. Go sizes GOMAXPROCS to the one CPU
            // it is pinned to. Its storage goes under the work directory.
            let mut conf = format!(
                "{{\n\tadmin off\n\tauto_https off\n\tdefault_sni localhost\n\
                 \tservers {{\n\t\tprotocols h1 h2 h2c h3\n\t}}\n}}\n\
                 http://:{port} {{\n\tbind 127.0.0.1\n\troot * {root}\n\tfile_server\n}}\n"
            );
            if let (Some(t), Some(p)) = (tls, tls_port) {
                let _ = write!(
                    conf,
                    "https://:{p} {{\n\tbind 127.0.0.1\n\ttls {} {}\n\troot * {root}\n\tfile_server\n}}\n",
                    t.cert.display(),
                    t.key.display()
                );
            }
            let path = work.join("Caddyfile");
            fs::write(&path, conf)?;
            vec![
                "env".into(),
                format!("XDG_DATA_HOME={w}/caddy"),
                format!("XDG_CONFIG_HOME={w}/caddy"),
                "caddy".into(),
                "run".into(),
                "--adapter".into(),
                "caddyfile".into(),
                "--config".into(),
                path.display().to_string(),
            ]
        }
        other => return Err(io::Error::other(format!("unknown peer {other}"))),
    };
    let mut server = launch(name, &sub, port, &cmd)?;
    if let Some(p) = tls_port {
        wait_tls(p)?;
        server.tls_port = Some(p);
    }
    if let Some(p) = h2c.filter(|&p| p != port) {
        wait_tls(p)?;
    }
    check_h2(&mut server, h2c);
    // Of the peers, only Caddy speaks HTTP/3.
    if name == "caddy" {
        check_h3(&mut server);
    }
    Ok(server)
}

/// Whether lighttpd's TLS module is installed.
pub fn lighttpd_has_tls() -> bool {
    [
        "/usr/lib/lighttpd/mod_openssl.so",
        "/usr/lib64/lighttpd/mod_openssl.so",
    ]
    .iter()
    .any(|p| Path::new(p).is_file())
}

/// Running as root: the peers then need to be told to stay root (they
/// would drop to `nobody`, who may not read the output directory).
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The first line `program` prints for its version flag.
pub fn version(program: &str, flag: &str) -> String {
    match Command::new(program).arg(flag).output() {
        Ok(out) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            text.lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_owned()
        }
        Err(_) => "not installed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http11_over_tls_is_not_h2() {
        assert!(negotiated_h2(
            "TLS Protocol: TLSv1.3\nApplication protocol: h2\n"
        ));
        assert!(negotiated_h2("Application protocol: h2c\n"));
        assert!(!negotiated_h2("Application protocol: http/1.1\n"));
        assert!(!negotiated_h2("finished in 1s\n"));
    }

    #[test]
    fn backend_from_metrics() {
        let text = "# TYPE shardhttpd_io_backend gauge\n\
            shardhttpd_io_backend{core=\"0\",backend=\"uring\"} 1\n\
            shardhttpd_io_backend{core=\"0\",backend=\"epoll\"} 0\n\
            shardhttpd_io_backend{core=\"1\",backend=\"epoll\"} 1\n";
        assert_eq!(backends_in_use(text), ["uring", "epoll"]);
        assert!(backends_in_use("shardhttpd_up 1\n").is_empty());
    }
}
