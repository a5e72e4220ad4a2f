//! Headless Chromium for the tests: the status page (`status_page.rs`)
//! and HTTP/3 (`h3.rs`). The flags keep it off the network: no background
//! requests, no component updates, a fresh profile per run.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::TempDir;

/// Wall-clock limit for one Chromium run.
const BROWSER_DEADLINE: Duration = Duration::from_secs(60);

/// Runs headless Chromium on `url` with `mode` (`--dump-dom` or
/// `--screenshot=...`) and `extra` flags, letting the page run for
/// `virtual_ms` of virtual time; its stdout.
pub fn chromium(
    program: &Path,
    profile: &TempDir,
    extra: &[&str],
    virtual_ms: u32,
    mode: &str,
    url: &str,
) -> String {
    let mut child = Command::new(program)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .args(extra)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={virtual_ms}"))
        .arg(mode)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let end = Instant::now() + BROWSER_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait chromium") {
            break status;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium ran past {BROWSER_DEADLINE:?}; stderr:\n{}",
                err.join().unwrap()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(
        status.success(),
        "chromium {mode} failed: {status}\n{stderr}"
    );
    stdout
}
