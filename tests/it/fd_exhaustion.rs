//! A shard out of file descriptors (issue 12, item 3, the shard half).
//! Before the fix a shard refreshed its snapshot pointer only when it
//! dispatched a connection, so a replaced generation (its arena, and with it
//! its memory) stayed alive while no client came, which is exactly what
//! happens when accept fails with EMFILE; and clients queued behind EMFILE
//! hung until fds freed up.

use crate::support;

use std::fs;
use std::io::Read;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::*;

/// Sets the soft fd limit of `pid`; the hard one stays.
fn set_nofile(pid: u32, n: usize) {
    let status = Command::new("prlimit")
        .args([format!("--pid={pid}"), format!("--nofile={n}:")])
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit failed");
}

/// The soft limit at which `pid` has exactly `spare` fds left to open: the
/// kernel hands out the lowest free number, and EMFILE means that number is
/// at the limit.
fn limit_leaving(pid: u32, spare: usize) -> usize {
    let used: Vec<usize> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut free = 0;
    let mut n = 0;
    loop {
        if !used.contains(&n) {
            free += 1;
            if free == spare {
                return n + 1;
            }
        }
        n += 1;
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// An idle shard lets go of a replaced snapshot within a tick or so: RSS
/// falls back to one generation's worth after a rebuild of a 32 MiB root,
/// with no connection arriving after the swap.
#[test]
fn idle_shard_releases_a_replaced_snapshot_without_a_connection() {
    const FILES: usize = 32;
    const SIZE: usize = 1024 * 1024 - 1;
    let site = Site::new("idle-release");
    for i in 0..FILES {
        site.write(&format!("blob/{i}.bin"), &noise(i as u64, SIZE));
    }
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    // The shard has the first generation in hand.
    assert_eq!(server.get("/blob/0.bin").status, 200);
    let before = rss_kib(server.pid());
    let swaps = || {
        server
            .log_lines()
            .iter()
            .filter(|l| l.contains("snapshot swapped generation="))
            .count()
    };
    let swaps_before = swaps();
    for i in 0..FILES {
        site.write(&format!("blob/{i}.bin"), &noise(1000 + i as u64, SIZE));
    }
    assert!(
        poll_until(Duration::from_secs(20), || swaps() > swaps_before),
        "no rebuild after rewriting the root\n{}",
        server.log_text()
    );
    // Let the watcher settle (rewrites may come in more than one rebuild).
    let mut last = swaps();
    loop {
        thread::sleep(Duration::from_millis(1500));
        let now = swaps();
        if now == last {
            break;
        }
        last = now;
    }
    // One generation is 32 MiB; holding the replaced one too would show as
    // about that much more than before.
    let limit = before + (FILES * SIZE / 1024 / 2) as u64;
    let mut after = rss_kib(server.pid());
    let released = poll_until(Duration::from_secs(3), || {
        after = rss_kib(server.pid());
        after < limit
    });
    assert!(
        released,
        "RSS {after} KiB after the rebuild vs {before} KiB before: the idle shard still holds the replaced snapshot\n{}",
        server.log_text()
    );
    // And the new generation is what is served.
    assert_eq!(
        server.get("/blob/3.bin").body,
        noise(1003, SIZE),
        "the new generation is served"
    );
}

/// Out of fds, clients queued on the listener get a quick close instead of
/// hanging, and accepting resumes once fds are free again.
#[test]
fn queued_clients_are_closed_quickly_when_out_of_fds_and_accepting_resumes() {
    if !installed("prlimit") {
        loud("SKIP: prlimit not installed");
        return;
    }
    let site = Site::new("emfile-accept");
    let server = Server::start(
        &site.root,
        &["--cores", "1", "--watch", "false", "--compress", "false"],
    );
    // Room for about four more connections (other threads may take one).
    set_nofile(server.pid(), limit_leaving(server.pid(), 4));
    // Connect one client after another, each sending a GET at once: the
    // first few are served and held open; once fds run out the rest wait
    // behind EMFILE, and must be closed (EOF or reset) within a few
    // seconds rather than hang. Before the fix they hung until fds freed.
    let mut held = Vec::new();
    let mut closed = 0;
    for i in 0..12 {
        let mut c = server.connect();
        c.send(get("/index.html").as_bytes());
        let sent = Instant::now();
        c.set_read_timeout(Duration::from_secs(9));
        let mut b = [0u8; 1024];
        let outcome = match c.stream.read(&mut b) {
            Ok(0) => "closed".to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => "closed".to_owned(),
            Ok(n) if b[..n].starts_with(b"HTTP/1.1 200") => "served".to_owned(),
            Ok(n) => format!("{n} bytes: {:?}", String::from_utf8_lossy(&b[..n])),
            Err(e) => format!("no answer and no close after {:?} ({e})", sent.elapsed()),
        };
        match outcome.as_str() {
            "served" => {
                assert!(closed == 0, "client {i} served after others were shed");
                held.push(c);
            }
            "closed" => {
                assert!(
                    sent.elapsed() < Duration::from_secs(6),
                    "queued client {i} closed only after {:?}",
                    sent.elapsed()
                );
                closed += 1;
                if closed == 3 {
                    break;
                }
            }
            other => panic!(
                "client {i} out of fds: {other}; wanted a quick close\n{}",
                server.log_text()
            ),
        }
    }
    assert!(
        !held.is_empty() && closed == 3,
        "{} clients served, {closed} shed\n{}",
        held.len(),
        server.log_text()
    );
    assert!(
        server
            .wait_for_log("out of file descriptors", Duration::from_secs(1))
            .is_some(),
        "the shedding was not logged\n{}",
        server.log_text()
    );
    // Free the fds: accepting works again.
    held.clear();
    let mut last = String::new();
    let resumed = poll_until(Duration::from_secs(5), || {
        let Ok(mut c) = Conn::try_connect(server.addr()) else {
            return false;
        };
        c.send(get("/index.html").as_bytes());
        c.set_read_timeout(Duration::from_millis(500));
        match c.read_response() {
            Ok(r) if r.status == 200 => true,
            other => {
                last = format!("{other:?}");
                false
            }
        }
    });
    assert!(
        resumed,
        "no answer once fds were free again: {last}\n{}",
        server.log_text()
    );
    assert!(
        server
            .wait_for_log("accepting again", Duration::from_secs(1))
            .is_some(),
        "{}",
        server.log_text()
    );
}
