//! Logs an operator can follow (issue 13, item 7): the start-up facts once
//! each, SIGHUP's receipt and outcome, a 403 for an unreadable file once,
//! the force-closed count when the shutdown grace runs out, and the access
//! log's dropped lines in `/metrics` and `/status.json`. Also: the shipped
//! example configs pass `--check`.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use support::privilege::{running_as_root, setpriv_nobody};
use support::*;

fn count(server: &Server, needle: &str) -> usize {
    server
        .log_lines()
        .iter()
        .filter(|l| l.contains(needle))
        .count()
}

#[test]
fn start_up_facts_are_logged_once_each() {
    let site = Site::new("start-log");
    let cfg = write_file(
        site.base(),
        "start.toml",
        format!(
            "root = {:?}\nerror_pages = {{ 404 = \"missing.html\" }}\n",
            site.root.display().to_string()
        )
        .as_bytes(),
    );
    let cfg = cfg.display().to_string();
    let server = Server::spawn(
        &[
            "--config".into(),
            cfg.clone(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--admin".into(),
            "127.0.0.1:0".into(),
            "--cores".into(),
            "1".into(),
        ],
        1,
    );
    let start = server
        .wait_for_log("shardhttpd starting", Duration::from_secs(5))
        .expect("start line");
    assert_eq!(
        log_field(&start, "version"),
        Some(env!("CARGO_PKG_VERSION")),
        "{start}"
    );
    assert_eq!(log_field(&start, "config"), Some(cfg.as_str()), "{start}");
    assert_eq!(
        log_field(&start, "root"),
        Some(site.root.display().to_string().as_str()),
        "{start}"
    );
    assert_eq!(
        log_field(&start, "pid"),
        Some(server.pid().to_string().as_str()),
        "{start}"
    );
    let cpu = allowed_cpus()[0];
    assert!(
        server
            .wait_for_log(&format!("shard:cpu map 0:{cpu}"), Duration::from_secs(1))
            .is_some(),
        "{}",
        server.log_text()
    );
    assert!(
        server
            .wait_for_log("nofile_limit=", Duration::from_secs(1))
            .is_some(),
        "fd limit line\n{}",
        server.log_text()
    );
    // A small root is built twice at start (identity, then with variants):
    // the second build must not repeat the first one's lines.
    assert_eq!(
        count(&server, "snapshot built generation=1"),
        1,
        "{}",
        server.log_text()
    );
    assert_eq!(
        count(&server, "error page not in the snapshot"),
        1,
        "{}",
        server.log_text()
    );
}

#[test]
fn sighup_logs_receipt_and_whether_the_snapshot_changed() {
    let site = Site::new("hup-log");
    let server = Server::start(&site.root, &["--watch", "false", "--cores", "1"]);
    server.signal("HUP");
    assert!(
        server
            .wait_for_log(
                "SIGHUP rebuild: snapshot unchanged generation=1",
                Duration::from_secs(10)
            )
            .is_some(),
        "{}",
        server.log_text()
    );
    assert_eq!(count(&server, "SIGHUP received"), 1);
    site.write("new.txt", b"new\n");
    server.signal("HUP");
    assert!(
        server
            .wait_for_log(
                "SIGHUP rebuild: snapshot changed generation=2",
                Duration::from_secs(10)
            )
            .is_some(),
        "{}",
        server.log_text()
    );
    assert_eq!(count(&server, "SIGHUP received"), 2);
    assert_eq!(server.get("/new.txt").status, 200);
}

#[test]
fn access_log_dropped_lines_are_exported() {
    let site = Site::new("dropped-export");
    let log = site.base().join("access.log").display().to_string();
    let server = Server::start(&site.root, &["--access-log", &log]);
    let admin = server.admin_addr();
    let metrics = Conn::connect(admin).roundtrip(&get("/metrics"));
    assert!(
        metrics
            .body_str()
            .lines()
            .any(|l| l == "shardhttpd_access_log_dropped_total 0"),
        "{}",
        metrics.body_str()
    );
    let status = Conn::connect(admin).roundtrip(&get("/status.json"));
    let json: serde_json::Value = serde_json::from_slice(&status.body).expect("json");
    assert_eq!(json["access_log_dropped"], serde_json::json!(0), "{json}");
}

#[test]
fn force_closed_connections_are_counted_when_the_grace_runs_out() {
    let site = Site::new("force-close");
    // Far more than loopback socket buffers hold, so the response cannot
    // finish while the client reads nothing.
    site.write("big.bin", &vec![7u8; 48 << 20]);
    let mut server = Server::start(&site.root, &["--shutdown-grace", "500ms", "--cores", "1"]);
    let mut stuck = server.connect();
    stuck.send(get("/big.bin").as_bytes());
    let head = stuck.read_head().expect("head");
    assert_eq!(head.status, 200);
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status}");
    let line = server
        .log_lines()
        .into_iter()
        .find(|l| l.contains("force-closing connections"))
        .unwrap_or_else(|| panic!("no force-close line\n{}", server.log_text()));
    assert_eq!(log_field(&line, "connections"), Some("1"), "{line}");
    drop(stuck);
}

/// A server run through `setpriv` as nobody (needed for EACCES as root),
/// with its stderr collected.
struct Unprivileged {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Unprivileged {
    fn start(args: &[&str]) -> Option<Unprivileged> {
        let mut cmd = if running_as_root() {
            setpriv_nobody("cannot drop root to make a file unreadable")?
        } else {
            Command::new(bin())
        };
        let mut child = cmd
            .args(args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(strip_ansi(&l));
            }
        });
        Some(Unprivileged { child, lines })
    }

    fn find(&self, needle: &str) -> Option<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    }

    fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_403_for_an_unreadable_file_is_logged_once() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new("forbidden-log");
    for dir in [site.base(), site.root.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let locked = site.write("locked.txt", b"secret\n");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let root = site.root.display().to_string();
    let Some(server) = Unprivileged::start(&[
        "--root",
        &root,
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--watch",
        "false",
        "--cores",
        "1",
    ]) else {
        return;
    };
    let mut addr = None;
    assert!(
        poll_until(Duration::from_secs(10), || {
            addr = server
                .find("listening addr=")
                .and_then(|l| log_field(&l, "addr").and_then(|a| a.parse().ok()));
            addr.is_some()
        }),
        "never listened:\n{}",
        server.text()
    );
    let addr = addr.unwrap();
    for _ in 0..3 {
        let r = Conn::connect(addr).roundtrip(&get("/locked.txt"));
        assert_eq!(r.status, 403, "{r:?}");
    }
    assert_eq!(
        server.count("unreadable file; answering 403"),
        1,
        "{}",
        server.text()
    );
    let line = server.find("unreadable file; answering 403").unwrap();
    assert!(line.contains("locked.txt"), "{line}");
}

#[test]
fn shipped_example_configs_pass_check() {
    let site = Site::new("deploy-configs");
    let root = site.root.display().to_string();
    for cfg in ["deploy/shardhttpd.toml", "deploy/container/shardhttpd.toml"] {
        let path = repo().join(cfg).display().to_string();
        // Root and addresses overridden: the file's are for a real host.
        let out = command()
            .args([
                "--config",
                &path,
                "--root",
                &root,
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "127.0.0.1:0",
                "--check",
            ])
            .output()
            .expect("run --check");
        assert!(
            out.status.success(),
            "{cfg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--log-format json`: every stderr line is one JSON object with the
/// fields a log shipper keys on, from the first start-up line to the last
/// drain line, and a configuration error before the start is one too.
#[test]
fn json_error_log_is_one_object_a_line_with_timestamp_level_pid_target_message() {
    let site = Site::new("json-log");
    let mut server = Server::start(&site.root, &["--log-format", "json", "--cores", "1"]);
    let pid = server.pid();
    assert_eq!(server.get("/index.html").status, 200);
    server.signal("TERM");
    server.wait_exit(Duration::from_secs(10)).expect("exits");
    let lines = server.log_lines();
    assert!(lines.len() >= 5, "{lines:?}");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["pid"].as_u64(), Some(u64::from(pid)), "{line}");
        assert!(
            matches!(v["level"].as_str(), Some("INFO" | "WARN" | "ERROR")),
            "{line}"
        );
        let ts = v["timestamp"].as_str().unwrap_or_else(|| panic!("{line}"));
        assert!(
            ts.len() >= 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "{ts}"
        );
        assert!(
            v["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("shardhttpd")),
            "{line}"
        );
        assert!(v["message"].is_string(), "{line}");
    }
    let start = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["message"] == "shardhttpd starting")
        .expect("the start line");
    assert_eq!(
        start["version"],
        env!("CARGO_PKG_VERSION"),
        "fields are keys"
    );

    let out = Command::new(bin())
        .args(["--root", "/nonexistent-root", "--log-format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_str(err.trim())
        .unwrap_or_else(|e| panic!("not one JSON line ({e}): {err}"));
    assert_eq!(v["level"], "ERROR");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent-root")),
        "{v}"
    );
}

/// Issue 36 §2: the config file's `log_level` applies although the
/// environment sets `RUST_LOG` (the unit and the manifest used to ship
/// `RUST_LOG=info`, which silently won). Precedence: `--log-level`, then
/// the file, then `RUST_LOG`, then `info`. "shard started" is an info line
/// of `shardhttpd::shard`; `shardhttpd::server=info` keeps the listening
/// lines the harness waits for.
#[test]
fn file_log_level_is_not_overridden_by_rust_log() {
    const QUIET: &str = "warn,shardhttpd::server=info";
    let site = Site::new("level-precedence");
    let config = |name: &str, level: Option<&str>| {
        let text = level.map_or(String::new(), |l| format!("log_level = {l:?}\n"));
        write_file(site.base(), name, text.as_bytes())
            .display()
            .to_string()
    };
    let quiet_file = config("quiet.toml", Some(QUIET));
    let info_file = config("info.toml", Some("info"));
    let silent_file = config("silent.toml", None);
    // (what, the file, extra flags, RUST_LOG, whether info lines show)
    let cases: [(&str, &str, &[&str], &str, bool); 4] = [
        ("file over RUST_LOG", &quiet_file, &[], "info", false),
        (
            "flag over file",
            &quiet_file,
            &["--log-level", "info"],
            "info",
            true,
        ),
        (
            "RUST_LOG when the file is silent",
            &silent_file,
            &[],
            QUIET,
            false,
        ),
        ("file over a quieter RUST_LOG", &info_file, &[], QUIET, true),
    ];
    for (what, file, flags, rust_log, info_shown) in cases {
        let mut args = vec!["--config", file, "--cores", "1"];
        args.extend_from_slice(flags);
        let server = Server::start_env(&site.root, &args, &[("RUST_LOG", rust_log)]);
        assert_eq!(server.get("/index.html").status, 200, "{what}");
        let text = server.log_text();
        assert_eq!(
            text.contains("shard started"),
            info_shown,
            "{what}: info lines of shardhttpd::shard\n{text}"
        );
        if what == "file over a quieter RUST_LOG" {
            assert!(
                text.contains("error log level from the config file's log_level")
                    && text.contains("RUST_LOG is set but comes after it"),
                "{what}: the overridden RUST_LOG is named\n{text}"
            );
        }
    }
}

/// `--log-level` filters by level and target (here: warnings, and the
/// server's own lifecycle lines, which the harness waits for); a bare word
/// that is not a level is refused, naming the flag.
#[test]
fn log_level_filters_and_a_wrong_level_is_refused() {
    let site = Site::new("level-log");
    let server = Server::start_env(
        &site.root,
        &[
            "--log-level",
            "warn,shardhttpd::server=info",
            "--cores",
            "1",
        ],
        &[("RUST_LOG", "")],
    );
    assert_eq!(server.get("/index.html").status, 200);
    let text = server.log_text();
    assert!(text.contains("shardhttpd starting"), "{text}");
    assert!(
        !text.contains("shard started"),
        "info from shardhttpd::shard is filtered\n{text}"
    );
    let out = Command::new(bin())
        .args([
            "--root",
            "examples/site",
            "--log-level",
            "verbose",
            "--check",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--log-level") && err.contains("`verbose` is not a level"),
        "{err}"
    );
}
