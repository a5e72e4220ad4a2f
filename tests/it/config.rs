//! Configuration: `--check`, TOML files with unknown keys or bad values, and
//! flags winning over the file.

use crate::support;

use std::process::{Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::*;

/// Runs the binary to completion (10 s deadline) and returns its output.
fn run(args: &[&str]) -> Output {
    let mut child = command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shardhttpd");
    let end = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{args:?} still running after 10 s; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(POLL_STEP);
    }
    child.wait_with_output().expect("output")
}

fn write_config(site: &Site, text: &str) -> String {
    let path = write_file(site.base(), "shardhttpd.toml", text.as_bytes());
    path.display().to_string()
}

fn toml_root(site: &Site) -> String {
    format!("root = {:?}\n", site.root.display().to_string())
}

#[test]
fn check_accepts_a_valid_config() {
    let site = Site::new("check-ok");
    let cfg = write_config(
        &site,
        &format!(
            "{}listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\nmax_ranges = 8\n\
             header_timeout = 2.5\nserver_header = \"x\"\nserve_dotfiles = false\n",
            toml_root(&site)
        ),
    );
    let out = run(&["--config", &cfg, "--check"]);
    assert!(
        out.status.success(),
        "--check on a valid config: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_names_an_unknown_key() {
    let site = Site::new("check-unknown");
    let cfg = write_config(&site, &format!("{}bogus_setting = 1\n", toml_root(&site)));
    let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "unknown key accepted: {stderr}");
    assert!(
        stderr.contains("bogus_setting"),
        "stderr should name the key: {stderr}"
    );
}

#[test]
fn check_names_a_bad_value() {
    let site = Site::new("check-bad");
    for (line, key) in [
        ("max_uri_bytes = 100000", "max_uri_bytes"),
        ("max_ranges = 0", "max_ranges"),
        ("header_timeout = -1", "header_timeout"),
        (
            "max_requests_per_connection = \"many\"",
            "max_requests_per_connection",
        ),
    ] {
        let cfg = write_config(&site, &format!("{}{line}\n", toml_root(&site)));
        let out = run(&["--config", &cfg, "--check", "--admin", "127.0.0.1:0"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line}: accepted: {stderr}");
        assert!(
            stderr.contains(key),
            "{line}: stderr should name {key}: {stderr}"
        );
    }
}

#[test]
fn check_rejects_a_bad_flag_value() {
    let site = Site::new("check-flag");
    let root = site.root.display().to_string();
    let out = run(&["--root", &root, "--max-uri-bytes", "100000", "--check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    assert!(
        stderr.contains("max_uri_bytes") || stderr.contains("max-uri-bytes"),
        "{stderr}"
    );

    let missing = site.base().join("no-such-root").display().to_string();
    let out = run(&["--root", &missing, "--check"]);
    assert!(!out.status.success(), "missing root accepted");
}

#[test]
fn file_settings_apply_and_flags_override_them() {
    let site = Site::new("override");
    let cfg = write_config(
        &site,
        &format!("{}server_header = \"fromfile\"\n", toml_root(&site)),
    );
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "--config",
            &cfg,
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };

    let server = Server::spawn(&args(&[]), 1);
    let r = server.get("/index.html");
    assert_eq!(r.status, 200, "root from the file: {r:?}");
    assert_eq!(r.must("server"), "fromfile");
    drop(server);

    let server = Server::spawn(&args(&["--server-header", "fromflag"]), 1);
    let r = server.get("/index.html");
    assert_eq!(r.must("server"), "fromflag");
}
