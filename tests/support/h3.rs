//! HTTP/3 clients for the tests: the scripted aioquic client
//! `tests/h3/h3probe.py` (PyPI `aioquic`, in the venv `.ci/run` makes),
//! ngtcp2's `gtlsclient` (Debian `ngtcp2-client`) and headless Chromium
//! over QUIC. A test that needs one skips loudly when it is absent (CI
//! installs them all: `.ci/run`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::{find_program, log_field, repo, skip, Server};

/// The QUIC listening address from the server's log.
pub fn quic_addr(server: &Server) -> SocketAddr {
    let line = server
        .wait_for_log("listening quic_addr=", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no QUIC listening line\n{}", server.log_text()));
    log_field(&line, "quic_addr")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("bad line {line:?}"))
}

/// An interpreter that can `import aioquic`: `$SHARDHTTPD_TEST_PYTHON`,
/// else `.ci/venv/bin/python`, else `python3` on PATH.
pub fn python() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| super::h2::python_importing("aioquic"))
        .clone()
}

/// [`python`], or a loud skip naming `what`.
pub fn python_or_skip(what: &str) -> Option<PathBuf> {
    let py = python();
    if py.is_none() {
        skip(&format!(
            "{what}: no Python with the `aioquic` package (.ci/venv/bin/pip install aioquic, \
             or set SHARDHTTPD_TEST_PYTHON)"
        ));
    }
    py
}

/// `gtlsclient`, or a loud skip naming `what`.
pub fn ngtcp2_or_skip(what: &str) -> Option<PathBuf> {
    let p = find_program(&["gtlsclient"]);
    if p.is_none() {
        skip(&format!(
            "{what}: gtlsclient not installed (Debian ngtcp2-client)"
        ));
    }
    p
}

/// What `h3probe.py` reports.
pub type Report = serde_json::Value;

/// Run `h3probe.py` against `addr` with the test CA at `ca` (SNI
/// `localhost`), `args` after the address; its report.
pub fn probe(py: &Path, addr: SocketAddr, ca: &Path, args: &[&str]) -> Report {
    Probe::spawn(py, addr, ca, args).report()
}

/// A running `h3probe.py`, killed if dropped before its report is read
/// (a test that stops it with SIGSTOP and then fails leaves nothing
/// behind).
pub struct Probe {
    child: Option<Child>,
    args: Vec<String>,
}

impl Probe {
    /// Start `h3probe.py` as [`probe`] runs it.
    pub fn spawn(py: &Path, addr: SocketAddr, ca: &Path, args: &[&str]) -> Probe {
        let child = Command::new(py)
            .arg(repo().join("tests/h3/h3probe.py"))
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .arg("--cafile")
            .arg(ca)
            .args(["--sni", "localhost", "--authority", "localhost"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run h3probe.py");
        Probe {
            child: Some(child),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Wait for it to end; its report.
    pub fn report(mut self) -> Report {
        let out = self
            .child
            .take()
            .expect("running")
            .wait_with_output()
            .expect("wait for h3probe.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "h3probe.py {:?}: {e}\nstdout: {stdout}\nstderr: {}",
                self.args,
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The report's requests, in stream order.
pub fn requests(report: &Report) -> &Vec<serde_json::Value> {
    report["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("no requests in {report}"))
}

/// A response header's value from a report's request.
pub fn header<'r>(req: &'r serde_json::Value, name: &str) -> Option<&'r str> {
    req["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

/// The base64 SHA-256 of a certificate's public key, as Chromium's
/// `--ignore-certificate-errors-spki-list` takes it.
pub fn spki_sha256(cert_pem: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
            cert_pem.display()
        ))
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
