//! HTTP/2 clients for the tests: curl (`--http2`, `--http2-prior-knowledge`),
//! the scripted frame-level client `tests/h2/h2probe.py` (Python's `h2`
//! package and hand-written frames), h2spec, nghttp and h2load. Each is an
//! external program: a test that needs one skips loudly when it is absent
//! (CI installs them all: `.ci/run`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::{find_program, loud, repo, Response};

/// Where a client connects: h2c on a cleartext port, or h2 over TLS with
/// the test CA (SNI and certificate name `localhost`).
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub ca: Option<PathBuf>,
}

impl Target {
    pub fn h2c(addr: SocketAddr) -> Target {
        Target { addr, ca: None }
    }

    pub fn tls(addr: SocketAddr, ca: &Path) -> Target {
        Target {
            addr,
            ca: Some(ca.to_path_buf()),
        }
    }

    pub fn is_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The URL of `path` (`http://127.0.0.1:P` or `https://localhost:P`).
    pub fn url(&self, path: &str) -> String {
        match self.ca {
            Some(_) => format!("https://localhost:{}{path}", self.addr.port()),
            None => format!("http://{}{path}", self.addr),
        }
    }

    /// The URL with the address as an IP (`https://127.0.0.1:P`), for
    /// clients that cannot be told what `localhost` resolves to and do not
    /// verify certificates (nghttp, h2load).
    pub fn url_ip(&self, path: &str) -> String {
        let scheme = if self.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    pub fn name(&self) -> &'static str {
        if self.is_tls() {
            "h2 over TLS"
        } else {
            "h2c"
        }
    }
}

// ---------------------------------------------------------------------------
// Python's h2 package and tests/h2/h2probe.py
// ---------------------------------------------------------------------------

/// An interpreter that can `import h2`: `$SHARDHTTPD_TEST_PYTHON`, else the
/// venv `.ci/run` makes (`.ci/venv/bin/python`), else `python3` on PATH.
pub fn python() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND.get_or_init(|| python_importing("h2, hpack")).clone()
}

/// The first interpreter that can import `modules`: `$SHARDHTTPD_TEST_PYTHON`,
/// else the venv `.ci/run` makes (`.ci/venv/bin/python`), else `python3`
/// on PATH.
pub fn python_importing(modules: &str) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("SHARDHTTPD_TEST_PYTHON") {
        candidates.push(p.into());
    }
    candidates.push(repo().join(".ci/venv/bin/python"));
    candidates.extend(find_program(&["python3"]));
    candidates.into_iter().find(|py| {
        Command::new(py)
            .args(["-c", &format!("import {modules}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// [`python`], or a loud skip naming `what`.
pub fn python_or_skip(what: &str) -> Option<PathBuf> {
    let py = python();
    if py.is_none() {
        loud(&format!(
            "SKIP: {what}: no Python with the `h2` package (.ci/venv/bin/pip install h2, \
             or set SHARDHTTPD_TEST_PYTHON)"
        ));
    }
    py
}

pub fn probe_script() -> PathBuf {
    repo().join("tests/h2/h2probe.py")
}

fn probe_command(py: &Path, scenario: &str, target: &Target, args: &[&str]) -> Command {
    let mut cmd = Command::new(py);
    cmd.arg(probe_script())
        .arg(scenario)
        .args(["--host", &target.addr.ip().to_string()])
        .args(["--port", &target.addr.port().to_string()]);
    if let Some(ca) = &target.ca {
        cmd.arg("--tls").arg("--ca").arg(ca);
    }
    cmd.args(args);
    cmd
}

/// Runs one scenario of h2probe.py to its end and parses the JSON object
/// it prints (the last line of its output).
#[track_caller]
pub fn probe(py: &Path, scenario: &str, target: &Target, args: &[&str]) -> serde_json::Value {
    let out = probe_command(py, scenario, target, args)
        .output()
        .expect("run h2probe.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "h2probe.py {scenario} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("h2probe.py {scenario}: bad JSON ({e}):\n{stdout}\n{stderr}"))
}

/// [`probe`] with `stdin` fed to the script (the `fetch` scenario reads
/// its requests there).
#[track_caller]
pub fn probe_with_input(
    py: &Path,
    scenario: &str,
    target: &Target,
    args: &[&str],
    stdin: &str,
) -> serde_json::Value {
    let out = super::output_with_stdin(&mut probe_command(py, scenario, target, args), stdin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "h2probe.py {scenario} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("h2probe.py {scenario}: bad JSON ({e}):\n{stdout}"))
}

/// A scenario that reports in two steps (`drain`): started, with its first
/// line (`{"ready": true, ...}`) already read.
pub struct Running {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    pub first: serde_json::Value,
}

impl Running {
    #[track_caller]
    pub fn start(py: &Path, scenario: &str, target: &Target, args: &[&str]) -> Running {
        let mut child = probe_command(py, scenario, target, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn h2probe.py");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("h2probe.py {scenario}: no first line"));
        let first = serde_json::from_str(&first)
            .unwrap_or_else(|e| panic!("h2probe.py {scenario}: bad first line {first:?}: {e}"));
        Running {
            child,
            lines,
            first,
        }
    }

    /// The final JSON object (stdin is closed first: `hold` waits on it).
    #[track_caller]
    pub fn finish(mut self) -> serde_json::Value {
        drop(self.child.stdin.take());
        let last = self.lines.next().and_then(Result::ok).unwrap_or_default();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "h2probe.py failed ({status}): {last}");
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("bad JSON {last:?}: {e}"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The error names of the GOAWAY frames in a probe's summary.
pub fn goaway_errors(v: &serde_json::Value) -> Vec<String> {
    v["goaways"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|g| g["error"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// One response of the `fetch` scenario as a harness [`Response`]
/// (version `HTTP/2`, lower-case header names).
pub fn fetched(v: &serde_json::Value) -> Response {
    let headers = v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| {
            (
                h[0].as_str().unwrap().to_owned(),
                h[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let body = from_hex(v["body_hex"].as_str().expect("body_hex"));
    Response {
        version: "HTTP/2".into(),
        status: v["status"].as_u64().map(|s| s as u16).unwrap_or(0),
        reason: String::new(),
        headers,
        body,
    }
}

/// Bytes from lower-case hex (how h2probe.py prints bodies).
pub fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex body"))
        .collect()
}

// ---------------------------------------------------------------------------
// curl
// ---------------------------------------------------------------------------

/// What curl saw: the response (version as curl prints it, `HTTP/2` or
/// `HTTP/1.1`) and its verbose log.
pub struct Curl {
    pub response: Response,
    pub log: String,
    /// curl's `%{size_download}`: body bytes received.
    pub size_download: u64,
}

/// One request with curl over `target`: `--http2-prior-knowledge` on h2c,
/// `--http2` (ALPN) over TLS, plus `extra` arguments (`-I` for HEAD, `-H`
/// for headers). The body is kept as sent: no `--compressed`. With `-I`
/// curl writes the head where the body would go: the body is then left
/// empty, and [`Curl::size_download`] says whether any came.
#[track_caller]
pub fn curl(target: &Target, path: &str, extra: &[&str]) -> Curl {
    let dir = super::TempDir::new("curl");
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "-v",
        "--max-time",
        "10",
        "-w",
        "\n%{size_download}\n",
        "-D",
    ])
    .arg(&head)
    .arg("-o")
    .arg(&body);
    match &target.ca {
        Some(ca) => {
            let resolve = format!("localhost:{}:{}", target.addr.port(), target.addr.ip());
            cmd.arg("--http2")
                .arg("--cacert")
                .arg(ca)
                .args(["--resolve", &resolve]);
        }
        None => {
            cmd.arg("--http2-prior-knowledge");
        }
    }
    cmd.args(extra).arg(target.url(path));
    let out = cmd.output().expect("run curl");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "curl {extra:?} {path} failed: {log}");
    let size_download = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no size_download in curl's output: {log}"));
    let head = std::fs::read_to_string(&head).expect("curl's header dump");
    let mut response = parse_curl_head(&head).unwrap_or_else(|e| panic!("{e}\n{log}"));
    if !extra.contains(&"-I") {
        response.body = std::fs::read(&body).unwrap_or_default();
    }
    Curl {
        response,
        log,
        size_download,
    }
}

/// The last response head of a curl `-D` dump (`HTTP/2 200` then
/// `name: value` lines).
pub fn parse_curl_head(text: &str) -> Result<Response, String> {
    let block = text
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .ok_or_else(|| format!("empty header dump {text:?}"))?;
    let mut lines = block.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or("").to_owned();
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers = lines
        .map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| format!("bad header line {l:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Response {
        version,
        status,
        reason: String::new(),
        headers,
        body: Vec::new(),
    })
}

// ---------------------------------------------------------------------------
// h2load and h2spec
// ---------------------------------------------------------------------------

/// h2load's report, the figures the tests check.
#[derive(Debug, Default)]
pub struct H2load {
    pub total: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub errored: u64,
    pub status_2xx: u64,
    /// Body bytes (the `data` figure of the `traffic:` line).
    pub data_bytes: u64,
    pub protocol: String,
    pub text: String,
}

/// Parses h2load's summary (`requests: N total, ...`, `status codes: ...`,
/// `traffic: ... (N) data`, `Application protocol: h2`).
pub fn parse_h2load(text: &str) -> H2load {
    fn num_before(s: &str, word: &str) -> u64 {
        let words: Vec<&str> = s.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        words
            .windows(2)
            .find(|w| w[1] == word)
            .and_then(|w| w[0].parse().ok())
            .unwrap_or(0)
    }
    let mut r = H2load {
        text: text.to_owned(),
        ..H2load::default()
    };
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("requests:") {
            r.total = num_before(rest, "total");
            r.succeeded = num_before(rest, "succeeded");
            r.failed = num_before(rest, "failed");
            r.errored = num_before(rest, "errored");
        } else if let Some(rest) = line.strip_prefix("status codes:") {
            r.status_2xx = num_before(rest, "2xx");
        } else if let Some(rest) = line.strip_prefix("traffic:") {
            // `1.17MB (1228800) data`: the parenthesised figure before `data`.
            if let Some(pos) = rest.rfind(") data") {
                let open = rest[..pos].rfind('(').unwrap_or(0);
                r.data_bytes = rest[open + 1..pos].parse().unwrap_or(0);
            }
        } else if let Some(rest) = line.strip_prefix("Application protocol:") {
            r.protocol = rest.trim().to_owned();
        }
    }
    r
}

/// The h2spec binary: `$H2SPEC`, else `h2spec` on PATH, else the one
/// `tests/h2/build-h2spec.sh` puts in `.ci/bin`.
pub fn h2spec() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("H2SPEC") {
        return Some(p.into());
    }
    find_program(&["h2spec"]).or_else(|| {
        let p = repo().join(".ci/bin/h2spec");
        p.is_file().then_some(p)
    })
}

/// h2spec's summary line: `146 tests, 146 passed, 0 skipped, 0 failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2specSummary {
    pub total: u32,
    pub passed: u32,
    pub skipped: u32,
    pub failed: u32,
}

pub fn parse_h2spec_summary(text: &str) -> Option<H2specSummary> {
    text.lines().rev().find_map(|line| {
        let nums: BTreeMap<&str, u32> = line
            .trim()
            .split(", ")
            .filter_map(|part| {
                let (n, word) = part.split_once(' ')?;
                Some((word, n.parse().ok()?))
            })
            .collect();
        Some(H2specSummary {
            total: *nums.get("tests")?,
            passed: *nums.get("passed")?,
            skipped: *nums.get("skipped")?,
            failed: *nums.get("failed")?,
        })
    })
}

/// The failed cases of an h2spec JUnit report: `name: message` each.
pub fn junit_failures(xml: &str) -> Vec<String> {
    let mut out = Vec::new();
    for case in xml.split("<testcase").skip(1) {
        let body = case.split("</testcase>").next().unwrap_or("");
        if !body.contains("<failure") && !body.contains("<error") {
            continue;
        }
        let attr = |name: &str| {
            let key = format!("{name}=\"");
            body.find(&key).map(|i| {
                let rest = &body[i + key.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_owned()
            })
        };
        let package = attr("package").unwrap_or_default();
        let name = attr("classname").unwrap_or_default();
        let message = body
            .split_once("<failure")
            .or_else(|| body.split_once("<error"))
            .map(|(_, f)| {
                let f = f.split_once('>').map(|(_, t)| t).unwrap_or(f);
                f.split('<').next().unwrap_or("").trim().to_owned()
            })
            .unwrap_or_default();
        out.push(unescape(&format!("{package} {name}: {message}")));
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&#xA;", "\n")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
