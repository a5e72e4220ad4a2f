//! `shardbench h3load` against the debug shardhttpd over HTTP/3: every
//! request it reports as answered is one the server counted as HTTP/3,
//! bodies add up to the file's size, a missing file is reported as 4xx,
//! `--log-file` has a line per request, and `-D` ends on time; and the
//! study's `--matrix h3` measures it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::shardhttpd;

/// A shardhttpd with `--h3` on a self-signed certificate, one shard,
/// killed on drop.
struct Server {
    child: Child,
    quic: SocketAddr,
    admin: SocketAddr,
    dir: PathBuf,
}

impl Server {
    fn start() -> Server {
        let dir = std::env::temp_dir().join(format!("shardbench-h3load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("100.html"), [b'x'; 100]).unwrap();
        std::fs::write(root.join("100k.bin"), vec![7u8; 100 * 1024]).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        let mut child = Command::new(shardhttpd())
            .arg("--root")
            .arg(&root)
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--tls-listen", "127.0.0.1:0", "--h3", "--cores", "1"])
            .arg("--tls-cert")
            .arg(dir.join("cert.pem"))
            .arg("--tls-key")
            .arg(dir.join("key.pem"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shardhttpd");
        let mut log = BufReader::new(child.stderr.take().unwrap());
        let (mut quic, mut admin) = (None, None);
        let mut line = String::new();
        while quic.is_none() || admin.is_none() {
            line.clear();
            assert!(
                log.read_line(&mut line).unwrap() > 0,
                "shardhttpd exited before listening"
            );
            let addr = |key: &str| -> Option<SocketAddr> {
                let rest = &line[line.find(key)? + key.len()..];
                rest.split_whitespace().next()?.parse().ok()
            };
            quic = quic.or(addr("quic_addr="));
            admin = admin.or(addr("admin endpoint addr="));
        }
        // The rest of the log is drained, so that the server never blocks
        // on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
        Server {
            child,
            quic: quic.unwrap(),
            admin: admin.unwrap(),
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.quic.port())
    }

    /// Wait until the server's own count of HTTP/3 requests (which each
    /// shard publishes a moment after it answers) reaches `want`; what it
    /// reads last.
    fn await_h3_requests(&self, want: u64) -> u64 {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let n = self.h3_requests();
            if n >= want || Instant::now() > end {
                return n;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn h3_requests(&self) -> u64 {
        let mut s = TcpStream::connect(self.admin).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with("shardhttpd_http_requests_by_protocol_total{")
                    && l.contains("protocol=\"h3\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `shardbench h3load ARGS`: whether it exited 0, and its stdout.
fn h3load(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shardbench"))
        .arg("h3load")
        .args(args)
        .output()
        .expect("run shardbench h3load");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    (out.status.success(), format!("{text}{err}"))
}

/// The number before `word` in the report's `line` (`requests:`, ...).
fn count(report: &str, line: &str, word: &str) -> u64 {
    let l = report
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no `{line}` line in:\n{report}"));
    let words: Vec<&str> = l.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    words
        .windows(2)
        .find(|w| w[1] == word)
        .and_then(|w| w[0].parse().ok())
        .unwrap_or_else(|| panic!("no `{word}` in `{l}`"))
}

#[test]
fn h3load_counts_what_the_server_answered_over_http3() {
    let server = Server::start();
    let log = server.dir.join("requests.log");
    let log_arg = format!("--log-file={}", log.display());
    // Four connections of ten streams on two threads.
    let url = server.url("/100.html");
    let (ok, report) = h3load(&["-t2", "-c4", "-m10", "-n2000", &log_arg, &url]);
    assert!(ok, "{report}");
    assert!(report.contains("Application protocol: h3"), "{report}");
    assert_eq!(count(&report, "requests:", "succeeded"), 2000, "{report}");
    assert_eq!(count(&report, "requests:", "failed"), 0, "{report}");
    assert_eq!(count(&report, "requests:", "errored"), 0, "{report}");
    assert_eq!(count(&report, "status codes:", "2xx"), 2000, "{report}");
    assert_eq!(count(&report, "traffic:", "bytes"), 2000 * 100, "{report}");
    assert_eq!(server.await_h3_requests(2000), 2000, "the server's count");
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.lines().count(), 2000);
    assert!(
        lines.lines().all(|l| l.split('\t').nth(1) == Some("200")),
        "{lines}"
    );

    // 100 KiB bodies, whole.
    let (ok, report) = h3load(&["-c2", "-m4", "-n40", &server.url("/100k.bin")]);
    assert!(ok, "{report}");
    assert_eq!(count(&report, "status codes:", "2xx"), 40, "{report}");
    assert_eq!(
        count(&report, "traffic:", "bytes"),
        40 * 100 * 1024,
        "{report}"
    );

    // A missing file is answered, and reported as 4xx, not success.
    let (ok, report) = h3load(&["-c1", "-n5", &server.url("/missing")]);
    assert!(ok, "{report}");
    assert_eq!(count(&report, "status codes:", "4xx"), 5, "{report}");
    assert_eq!(count(&report, "requests:", "succeeded"), 0, "{report}");
    assert_eq!(server.await_h3_requests(2045), 2045, "the server's count");

    // A duration, not a count: it ends on time.
    let started = Instant::now();
    let (ok, report) = h3load(&["-c2", "-m2", "-D1", &url]);
    let took = started.elapsed();
    assert!(ok, "{report}");
    assert!(count(&report, "requests:", "succeeded") > 0, "{report}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn h3load_reports_a_server_that_is_not_there() {
    // A UDP socket that never answers (held, so that nothing else can
    // take its port): the handshake times out (`-N1`) and the run says
    // so, with nothing answered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("https://127.0.0.1:{port}/");
    let (ok, report) = h3load(&["-c1", "-n1", "-N1", &url]);
    drop(silent);
    assert!(ok, "{report}");
    assert!(report.contains("connection lost"), "{report}");
    assert!(!report.contains("Application protocol"), "{report}");
    assert_eq!(count(&report, "requests:", "succeeded"), 0, "{report}");
}

/// `--matrix h3`, its h3 cell alone, against the debug shardhttpd: the
/// study starts it with `--h3`, finds it answering HTTP/3, and writes a
/// measured h3load row with requests and no errors.
#[test]
fn the_h3_matrix_measures_shardhttpd_over_http3() {
    if !common::on_path("openssl") {
        common::skip_test("SKIP the h3 matrix: openssl is not installed to make a certificate");
        return;
    }
    let out = std::env::temp_dir().join(format!("shardbench-h3-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_shardbench"))
        .args(["--matrix", "h3", "--no-peers", "--no-sweep"])
        .args(["--duration", "1", "--io", "epoll", "--cells", "h3 100B"])
        .arg("--server-bin")
        .arg(shardhttpd())
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run shardbench");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let csv = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect("column");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 1, "{csv}");
    let r = &rows[0];
    assert_eq!(
        (
            r[col("server")],
            r[col("tool")],
            r[col("mode")],
            r[col("size")]
        ),
        ("shardhttpd-epoll", "h3load", "h3", "100B"),
        "{csv}"
    );
    let requests: u64 = r[col("requests")].parse().expect("a count");
    assert!(requests > 100, "{csv}");
    assert_eq!(r[col("errors")], "0", "{csv}");
    assert_eq!(
        r[col("pipeline_depth")],
        "10",
        "streams per connection: {csv}"
    );
    let _ = std::fs::remove_dir_all(&out);
}
