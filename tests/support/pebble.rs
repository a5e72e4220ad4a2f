//! Let's Encrypt's ACME test server as a test peer: `pebble` with its
//! companion DNS server `pebble-challtestsrv` (Debian's `pebble` package),
//! every name resolving to 127.0.0.1, validating against the ports of the
//! shardhttpd under test. Pebble's own HTTPS uses a throwaway CA that the
//! server under test trusts through `--acme-ca-roots`; the CA that signs
//! what pebble issues is fetched from its management API.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tls::Ca;
use super::{installed, loud, TempDir};

/// How long pebble gets to start listening.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// Whether pebble, openssl and curl are installed; a loud skip (a failure
/// under `SHARDHTTPD_TEST_REQUIRE=all`) when not.
pub fn with_clients(test: &str) -> bool {
    if !available(test) {
        return false;
    }
    for tool in ["openssl", "curl"] {
        if !installed(tool) {
            loud(&format!("SKIP: {test}: {tool} is not installed"));
            return false;
        }
    }
    true
}

/// `openssl s_client` to `addr` with SNI `name`, verifying the name
/// against `root` when given: the first certificate's PEM body (the leaf),
/// and everything s_client printed.
pub fn served_certificate(addr: SocketAddr, name: &str, root: Option<&Path>) -> (String, String) {
    let addr = addr.to_string();
    let root = root.map(|r| r.display().to_string());
    let mut args = vec!["-connect", &addr, "-servername", name];
    if let Some(root) = &root {
        args.extend(["-CAfile", root, "-verify_hostname", name]);
    }
    let (_, text) = super::tls::s_client(&args, "Q\n");
    let pem = text
        .split_once("-----BEGIN CERTIFICATE-----")
        .and_then(|(_, rest)| rest.split_once("-----END CERTIFICATE-----"))
        .map(|(body, _)| body.to_owned())
        .unwrap_or_default();
    (pem, text)
}

/// Whether pebble and its DNS server are installed; says SKIP when not.
pub fn available(test: &str) -> bool {
    let ok = installed("pebble") && installed("pebble-challtestsrv");
    if !ok {
        loud(&format!(
            "SKIP: {test}: pebble is not installed (apt-get install pebble)"
        ));
    }
    ok
}

/// Pebble cannot be given port 0 and say which it took.
pub use super::free_port;

/// What pebble is told.
pub struct Options {
    /// shardhttpd's cleartext port (HTTP-01) and TLS port (TLS-ALPN-01).
    pub http_port: u16,
    pub tls_port: u16,
    /// The directory's port; [`free_port`] when `None`.
    pub port: Option<u16>,
    /// Lifetime of issued certificates, seconds (pebble's default: 5 years).
    pub validity_secs: Option<u64>,
    /// Names pebble refuses to issue for (`rejectedIdentifier`).
    pub blocklist: Vec<String>,
}

/// The throwaway CA of pebble's HTTPS, made before pebble starts so that
/// the server under test can be pointed at it first.
pub struct Trust {
    ca: Ca,
    pub dir: TempDir,
    /// `--acme-ca-roots` for the server under test.
    pub roots: PathBuf,
}

impl Trust {
    pub fn new() -> Trust {
        let dir = TempDir::new("pebble");
        let ca = Ca::new();
        let roots = ca.write(dir.path());
        Trust { ca, dir, roots }
    }
}

/// A running pebble and challtestsrv; both killed on drop.
pub struct Pebble {
    children: Vec<Child>,
    pub port: u16,
    management: u16,
    roots: PathBuf,
    log: PathBuf,
}

impl Pebble {
    /// Start challtestsrv and pebble with `opts`, trusted through `trust`.
    pub fn start(trust: &Trust, opts: &Options) -> Pebble {
        let dir = trust.dir.path();
        let leaf = trust.ca.leaf_with(dir, "localhost", &["localhost"], |p| {
            p.subject_alt_names
                .push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
        });
        let dns = free_port();
        let chall_mgmt = free_port();
        let port = opts.port.unwrap_or_else(free_port);
        let management = free_port();
        let config = serde_json::json!({
            "pebble": {
                "listenAddress": format!("127.0.0.1:{port}"),
                "managementListenAddress": format!("127.0.0.1:{management}"),
                "certificate": leaf.cert,
                "privateKey": leaf.key,
                "httpPort": opts.http_port,
                "tlsPort": opts.tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
                "domainBlocklist": opts.blocklist,
                "certificateValidityPeriod": opts.validity_secs.unwrap_or(157_766_400),
            }
        });
        let config_path = dir.join(format!("pebble-{port}.json"));
        std::fs::write(&config_path, config.to_string()).unwrap();
        let log = dir.join(format!("pebble-{port}.log"));
        let chall_log =
            std::fs::File::create(dir.join(format!("challtestsrv-{port}.log"))).unwrap();
        let pebble_log = std::fs::File::create(&log).unwrap();
        let chall = Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns}")])
            .args(["-management", &format!("127.0.0.1:{chall_mgmt}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .stdin(Stdio::null())
            .stdout(chall_log.try_clone().unwrap())
            .stderr(chall_log)
            .spawn()
            .expect("spawn pebble-challtestsrv");
        let pebble = Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            // No sleeps before validating; no nonce rejected at random
            // and no authorization reused, so each order is the same.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdin(Stdio::null())
            .stdout(pebble_log.try_clone().unwrap())
            .stderr(pebble_log)
            .spawn()
            .expect("spawn pebble");
        let mut p = Pebble {
            children: vec![chall, pebble],
            port,
            management,
            roots: dir.join(format!("pebble-root-{port}.pem")),
            log,
        };
        let end = Instant::now() + START_DEADLINE;
        for port in [chall_mgmt, port, management] {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
                let exited = p
                    .children
                    .iter_mut()
                    .any(|c| !matches!(c.try_wait(), Ok(None)));
                if exited || Instant::now() > end {
                    panic!(
                        "pebble did not listen on {addr} (exited: {exited})\n{}\n{}",
                        p.log_text(),
                        std::fs::read_to_string(dir.join(format!("challtestsrv-{}.log", p.port)))
                            .unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        p.fetch_root(&trust.roots);
        p
    }

    /// `--acme-directory` for the server under test.
    pub fn directory(&self) -> String {
        directory(self.port)
    }

    /// The root that signs what this pebble issues (for `curl --cacert`,
    /// `openssl s_client -CAfile`).
    pub fn root(&self) -> &Path {
        &self.roots
    }

    fn fetch_root(&mut self, trust: &Path) {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(trust)
            .arg(format!("https://127.0.0.1:{}/roots/0", self.management))
            .output()
            .expect("run curl for pebble's root");
        assert!(
            out.status.success(),
            "pebble's management API: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&self.roots, &out.stdout).unwrap();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The directory URL of a pebble on `port` (which may not run yet).
pub fn directory(port: u16) -> String {
    format!("https://127.0.0.1:{port}/dir")
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- pebble log ---\n{}", self.log_text());
        }
    }
}
