//! Flags whose effect cannot be seen in one response: each test shows the
//! flag changing what the server does, so a flag that is parsed and then
//! ignored fails here. `--backlog` is read back from the kernel with `ss`
//! (iproute2; a loud SKIP without it).

use crate::support;

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::{Duration, Instant};

use support::metrics::generation;
use support::*;

/// The accept-queue limit (`Send-Q` of a LISTEN socket in `ss -ltn`) of
/// every listener on `port`.
fn listen_backlogs(port: u16) -> Vec<u64> {
    let out = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("run ss");
    assert!(out.status.success(), "ss failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect()
}

#[test]
fn backlog_flag_sets_the_listen_queue() {
    if !installed("ss") {
        loud("SKIP backlog_flag_sets_the_listen_queue: ss (iproute2) not installed");
        return;
    }
    let site = Site::new("flag-backlog");
    let server = Server::start(&site.root, &["--backlog", "77"]);
    let backlogs = listen_backlogs(server.addr().port());
    assert!(!backlogs.is_empty(), "no LISTEN socket found by ss");
    assert!(
        backlogs.iter().all(|&b| b == 77),
        "listen backlogs {backlogs:?}, want 77 each"
    );
    let other = Server::start(&site.root, &["--backlog", "33"]);
    assert_eq!(
        listen_backlogs(other.addr().port())
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
        [33].into_iter().collect()
    );
}

/// With a 1.5 s debounce, a change is not rebuilt before the tree has been
/// quiet that long (the default, 50 ms, would show it at once), and is
/// rebuilt after.
#[test]
fn watch_debounce_ms_delays_the_rebuild() {
    const DEBOUNCE: Duration = Duration::from_millis(1500);
    let site = Site::new("flag-debounce");
    let server = Server::start(&site.root, &["--watch-debounce-ms", "1500"]);
    let admin = server.admin_addr();
    server
        .wait_for_log("watching the document root", Duration::from_secs(5))
        .expect("the watcher is running");
    site.write("new.txt", b"debounced");
    let written = Instant::now();
    let mut first_seen = None;
    let seen = poll_until(Duration::from_secs(15), || {
        if server.get("/new.txt").status == 200 {
            first_seen = Some(written.elapsed());
            return true;
        }
        false
    });
    assert!(seen, "the change was never served");
    let took = first_seen.unwrap();
    assert!(
        took >= DEBOUNCE - Duration::from_millis(100),
        "served {took:?} after the change, inside a {DEBOUNCE:?} debounce"
    );
    assert_eq!(generation(admin), 2, "one rebuild for one change");
}

/// Compressible text between the two thresholds gets variants with the
/// lower `--compress-min-bytes` and none with the higher.
#[test]
fn compress_min_bytes_sets_the_smallest_compressed_file() {
    let text: String = "compress me if I am big enough; ".repeat(60); // 1920 bytes
    let site = Site::new("flag-compress-min");
    site.write("mid.txt", text.as_bytes());
    for (min, compressed) in [("1000", true), ("4000", false)] {
        let server = Server::start(&site.root, &["--compress-min-bytes", min]);
        let r = server.send(&request(
            "GET",
            "/mid.txt",
            &[("Accept-Encoding", "gzip, br, zstd")],
        ));
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            r.header("content-encoding").is_some(),
            compressed,
            "--compress-min-bytes {min}, {} bytes: {r:?}",
            text.len()
        );
        if !compressed {
            assert_eq!(r.body, text.as_bytes());
        }
    }
}

/// `--sendfile` picks the large-file path, which shows in how each treats a
/// file changed in place mid-response: the verified copy checks every
/// 32 KiB piece and stops at the next one, zero-copy `sendfile` checks only
/// before its last byte, so its client gets exactly one byte less than the
/// whole (which is why zero-copy is only for roots changed by rename).
/// Watching is off: a rebuild would replace the cached fd's stamp, and
/// both modes would then stop at their next piece.
#[test]
fn sendfile_flag_selects_zero_copy() {
    const SIZE: usize = 32 * 1024 * 1024;
    let site = Site::new("flag-sendfile");
    let path = site.write("big.bin", &vec![b's'; SIZE]);
    for (flag, zero_copy) in [("false", false), ("true", true)] {
        let server = Server::start(
            &site.root,
            &[
                "--sendfile",
                flag,
                "--sendfile-threshold",
                "1048576",
                "--watch",
                "false",
            ],
        );
        let mut c = server.connect();
        c.send(get("/big.bin").as_bytes());
        let head = c.read_head().expect("response head");
        assert_eq!(head.status, 200, "{head:?}");
        assert_eq!(head.content_length(), Some(SIZE as u64));
        // The client has read nothing of the body yet, so at most the socket
        // buffers' worth of it is gone: change one byte in place.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open for write")
            .write_all_at(b"t", 0)
            .expect("write in place");
        let mut got = c.take_buffered().len();
        let mut buf = vec![0u8; 1 << 20];
        c.set_read_timeout(Duration::from_secs(10));
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        if zero_copy {
            assert_eq!(got, SIZE - 1, "--sendfile true: bytes before the close");
        } else {
            assert!(
                got < SIZE - 1024 * 1024,
                "--sendfile false: {got} of {SIZE} bytes sent after an in-place change"
            );
        }
        // Put the file back for the next mode (and the next snapshot).
        std::fs::write(&path, vec![b's'; SIZE]).unwrap();
        drop(server);
    }
}

/// Issue 27: a mistyped flag gets the nearest real one, as a mistyped key
/// does; something unlike any flag gets no guess.
#[test]
fn a_mistyped_flag_gets_a_suggestion() {
    for (typed, tip) in [
        ("--kepalive-timeout", Some("--keepalive-timeout")),
        ("--max-range", Some("--max-ranges")),
        ("--tls-cret=x", Some("--tls-cert")),
        ("--no-such-thing-at-all", None),
    ] {
        let out = command().args([typed, "5"]).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{typed}: {stderr}");
        assert!(stderr.contains("unexpected argument"), "{typed}: {stderr}");
        match tip {
            Some(flag) => assert!(
                stderr.contains(&format!("a similar argument exists: '{flag}'")),
                "{typed}: {stderr}"
            ),
            None => assert!(!stderr.contains("similar"), "{typed}: {stderr}"),
        }
    }
}

/// Issue 36: with `--log-format json`, a command line that clap refuses is
/// reported as one JSON line (a log pipeline gets JSON from the first
/// line), still with the nearest flag as a tip and exit status 2; without
/// it, clap's own text; `--help` stays text either way.
#[test]
fn issue36_flag_errors_are_json_with_log_format_json() {
    for args in [
        &["--log-format", "json", "--kepalive-timeout", "5"][..],
        &["--kepalive-timeout", "5", "--log-format=json"][..],
    ] {
        let out = command().args(args).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {stderr}");
        let line: serde_json::Value = serde_json::from_str(lines[0])
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stderr}"));
        assert_eq!(line["level"], "ERROR", "{line}");
        assert_eq!(line["message"], "configuration error", "{line}");
        let error = line["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("unexpected argument '--kepalive-timeout'")
                && error.contains("a similar argument exists: '--keepalive-timeout'"),
            "{line}"
        );
    }
    let out = command()
        .args(["--log-format", "json", "--max-ranges", "lots"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line: serde_json::Value = serde_json::from_str(stderr.trim()).expect("JSON");
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid value 'lots' for '--max-ranges <N>'")),
        "{line}"
    );
    let out = command()
        .args(["--kepalive-timeout", "5"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: unexpected argument"), "{stderr}");
    let out = command()
        .args(["--log-format", "json", "--help"])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: shardhttpd"));
}
