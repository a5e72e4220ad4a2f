//! `systemctl reload` (SIGHUP) applies the configuration file: a changed,
//! valid file is applied by handover under load without a failed request,
//! a bad edit is refused with the `--check` error while the running
//! configuration keeps serving, and an unchanged file only rebuilds the
//! snapshot in place.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use crate::support;
use support::upgrade::{admin_get, process_gone, signal, status_pid, Successors, Traffic};
use support::{poll_until, Server, Site};

/// A handover here builds a snapshot on a loaded machine.
const RELOAD_DEADLINE: Duration = Duration::from_secs(20);

fn metric(admin: SocketAddr, series: &str) -> Option<f64> {
    let (_, body) = admin_get(admin, "/metrics").ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}

/// The `Server` header of `GET /index.html`.
fn server_header(addr: SocketAddr) -> String {
    let response = support::Conn::connect(addr).roundtrip(&support::get("/index.html"));
    assert_eq!(response.status, 200);
    response
        .header("server")
        .unwrap_or_else(|| panic!("no Server header: {response:?}"))
        .to_owned()
}

fn config(site: &Site, text: &str) -> PathBuf {
    let path = site.base().join("shardhttpd.toml");
    fs::write(&path, text).unwrap();
    path
}

fn reloads(admin: SocketAddr, result: &str) -> Option<f64> {
    metric(
        admin,
        &format!("shardhttpd_config_reloads_total{{result=\"{result}\"}}"),
    )
}

fn paths() -> Vec<(String, Vec<u8>)> {
    vec![
        ("/index.html".to_owned(), support::INDEX_HTML.to_vec()),
        ("/style.css".to_owned(), support::STYLE_CSS.to_vec()),
        ("/digits.txt".to_owned(), support::DIGITS.to_vec()),
    ]
}

fn start(site: &Site, config: &Path) -> Server {
    Server::start(&site.root, &["--config", config.to_str().unwrap()])
}

#[test]
fn reload_applies_a_changed_config_under_load_and_refuses_a_bad_edit() {
    let site = Site::new("reload-load");
    let file = config(&site, "server_header = \"first\"\n");
    let mut server = start(&site, &file);
    let successors = Successors::default();
    let (addr, admin, first) = (server.addr(), server.admin_addr(), server.pid());
    assert_eq!(server_header(addr), "first");
    for result in ["unchanged", "invalid", "applied", "failed"] {
        assert_eq!(reloads(admin, result), Some(0.0), "{result} exists at 0");
    }

    let traffic = Traffic::start(addr, 3, 3, paths());
    thread::sleep(Duration::from_secs(1));

    // A bad edit: refused, logged with --check's words, counted; the
    // running configuration keeps serving from the same process.
    fs::write(&file, "server_header = \"second\"\nbrotli_level = 99\n").unwrap();
    signal(first, "HUP");
    assert!(
        poll_until(RELOAD_DEADLINE, || reloads(admin, "invalid") == Some(1.0)),
        "the bad edit is counted\n{}",
        server.log_text()
    );
    // The log reaches the test through a pipe and a reader thread, so the
    // line may trail the counter by a moment.
    let refused = server
        .wait_for_log("reload refused", RELOAD_DEADLINE)
        .unwrap_or_else(|| panic!("no refusal logged\n{}", server.log_text()));
    assert!(refused.contains("brotli_level"), "{refused}");
    let check = std::process::Command::new(support::bin())
        .args(["--config", file.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    let check_err = String::from_utf8_lossy(&check.stderr);
    let check_msg = check_err
        .trim()
        .strip_prefix("shardhttpd: check failed: ")
        .or_else(|| {
            check_err
                .trim()
                .strip_prefix("shardhttpd: configuration error: ")
        })
        .unwrap_or_else(|| panic!("--check output: {check_err}"));
    assert!(
        refused.contains(check_msg),
        "the refusal says what --check says\n{refused}\n{check_msg}"
    );
    assert_eq!(status_pid(admin), Some(first));
    assert_eq!(server_header(addr), "first");

    // A good edit: a new process serves the new configuration.
    fs::write(&file, "server_header = \"second\"\n").unwrap();
    signal(first, "HUP");
    assert!(
        poll_until(RELOAD_DEADLINE, || process_gone(first)),
        "the old process hands over and exits\n{}",
        server.log_text()
    );
    let new = status_pid(admin).expect("status.json after the reload");
    successors.push(new);
    assert_ne!(new, first);
    assert_eq!(server_header(addr), "second");
    // Counted by the new process once the old one has its ready signal,
    // which may be a moment after the old one is gone.
    assert!(
        poll_until(RELOAD_DEADLINE, || reloads(admin, "applied") == Some(1.0)),
        "counted by the new process: {:?}",
        reloads(admin, "applied")
    );
    thread::sleep(Duration::from_secs(1));
    let tally = traffic.stop();
    eprintln!("reload under load: {tally:?}");
    assert_eq!(tally.failures(), 0, "{tally:#?}");
    assert!(tally.ok > 0, "no request succeeded");
    let status = server.try_wait().expect("first process exited");
    assert!(status.success(), "first process exit: {status}");

    // The new process keeps the edit as its reference: the same file again
    // is no change.
    signal(new, "HUP");
    assert!(poll_until(RELOAD_DEADLINE, || reloads(admin, "unchanged") == Some(1.0)));
    assert_eq!(status_pid(admin), Some(new));
}

#[test]
fn reload_of_an_unchanged_file_rebuilds_the_snapshot_in_place() {
    let site = Site::new("reload-same");
    let file = config(&site, "watch = false\n");
    let server = start(&site, &file);
    let (addr, admin, pid) = (server.addr(), server.admin_addr(), server.pid());
    assert_eq!(
        support::Conn::connect(addr)
            .roundtrip(&support::get("/new.txt"))
            .status,
        404
    );
    site.write("new.txt", b"new\n");
    signal(pid, "HUP");
    assert!(poll_until(RELOAD_DEADLINE, || {
        support::Conn::connect(addr)
            .roundtrip(&support::get("/new.txt"))
            .status
            == 200
    }));
    assert_eq!(reloads(admin, "unchanged"), Some(1.0));
    assert_eq!(reloads(admin, "applied"), Some(0.0));
    assert_eq!(status_pid(admin), Some(pid), "no handover");
}
