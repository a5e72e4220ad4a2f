//! Files rewritten in place while being served: every complete 200 must be one
//! whole version of the file, never a mix or a wrong length, both for bodies
//! held in memory and for bodies sent with `sendfile` from an fd.

mod support;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use support::*;

const RUN_FOR: Duration = Duration::from_secs(3);
const CLIENTS: usize = 4;
const HUP_EVERY: Duration = Duration::from_millis(150);

/// What the clients saw.
#[derive(Default, Debug)]
struct Tally {
    ok: usize,
    unavailable: usize,
    incomplete: usize,
    closed_before_response: usize,
    reconnects: usize,
    /// Complete responses that are not one whole version, and other
    /// contract violations; each is a test failure.
    bad: Vec<String>,
    /// ETag → (length, fill byte) first seen with it.
    etags: HashMap<String, (usize, u8)>,
}

/// Checks a complete 200 body: `size` or `size / 2` bytes, all one fill byte
/// that one of the versions used.
fn check_body(body: &[u8], size: usize) -> Result<(usize, u8), String> {
    let len = body.len();
    let Some(&fill) = body.first() else {
        return Err("empty body (snapshot of a truncated file?)".into());
    };
    let uniform = match body.iter().position(|&b| b != fill) {
        None => true,
        Some(i) => {
            return Err(format!(
                "mixed content: {len} bytes starting with {:?}, {:?} at byte {i}",
                fill as char, body[i] as char
            ))
        }
    };
    let known_fill = fill == b'a' || fill == b'b';
    let whole_len = len == size || len == size / 2;
    if uniform && known_fill && whole_len {
        Ok((len, fill))
    } else {
        Err(format!(
            "{len} bytes of {:?}: not a whole version (lengths {size} or {})",
            fill as char,
            size / 2
        ))
    }
}

fn client(server: &Server, size: usize, stop: &AtomicBool, tally: &Mutex<Tally>) {
    let request = get("/hot.bin");
    let mut conn: Option<Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                tally.lock().unwrap().reconnects += 1;
                conn.insert(server.connect())
            }
        };
        if c.try_send(request.as_bytes()).is_err() {
            conn = None;
            continue;
        }
        let result = c.read_response();
        let mut t = tally.lock().unwrap();
        match result {
            Ok(r) => {
                if r.says_close() {
                    conn = None;
                }
                match r.status {
                    200 => match check_body(&r.body, size) {
                        Ok(sig) => {
                            t.ok += 1;
                            let etag = r.header("etag").unwrap_or("").to_string();
                            let first = *t.etags.entry(etag.clone()).or_insert(sig);
                            if first != sig {
                                t.bad.push(format!(
                                    "ETag {etag} served with {sig:?} (len, fill) but earlier with {first:?}"
                                ));
                            }
                        }
                        Err(e) => t.bad.push(e),
                    },
                    503 => t.unavailable += 1,
                    other => t.bad.push(format!("unexpected status {other}: {r:?}")),
                }
            }
            Err(ReadError::Closed) => {
                t.closed_before_response += 1;
                conn = None;
            }
            Err(ReadError::Incomplete { .. }) | Err(ReadError::Io(_)) => {
                t.incomplete += 1;
                conn = None;
            }
            Err(e @ ReadError::Timeout { .. }) | Err(e @ ReadError::Malformed(_)) => {
                t.bad.push(format!("{e}"));
                conn = None;
            }
        }
    }
}

/// Rewrites `path` in place: whole version A, shrunk to half, whole version
/// B, shrunk to half, … with a SIGHUP now and then.
fn writer(server: &Server, path: &std::path::Path, size: usize, stop: &AtomicBool) -> usize {
    let a = vec![b'a'; size];
    let b = vec![b'b'; size];
    let mut last_hup = Instant::now();
    let mut rewrites = 0;
    while !stop.load(Ordering::Relaxed) {
        for version in [&a, &b] {
            let mut f = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .expect("open for rewrite");
            f.write_all(version).expect("rewrite");
            thread::sleep(Duration::from_millis(3));
            f.set_len(size as u64 / 2).expect("shrink");
            thread::sleep(Duration::from_millis(3));
            rewrites += 1;
        }
        if last_hup.elapsed() >= HUP_EVERY {
            server.signal("HUP");
            last_hup = Instant::now();
        }
    }
    rewrites
}

fn rewrite_in_place(tag: &str, size: usize, extra: &[&str]) {
    let site = Site::new(tag);
    let path = site.write("hot.bin", &vec![b'a'; size]);
    let mut server = Server::start(&site.root, extra);
    let stop = AtomicBool::new(false);
    let tally = Mutex::new(Tally::default());

    let rewrites = thread::scope(|s| {
        let w = s.spawn(|| writer(&server, &path, size, &stop));
        for _ in 0..CLIENTS {
            s.spawn(|| client(&server, size, &stop, &tally));
        }
        thread::sleep(RUN_FOR);
        stop.store(true, Ordering::Relaxed);
        w.join().expect("writer thread")
    });

    let t = tally.into_inner().unwrap();
    eprintln!(
        "{tag}: {rewrites} rewrites; ok {} (distinct ETags {}), 503 {}, incomplete {}, \
         closed before response {}, reconnects {}, bad {}",
        t.ok,
        t.etags.len(),
        t.unavailable,
        t.incomplete,
        t.closed_before_response,
        t.reconnects,
        t.bad.len()
    );
    assert!(
        server.is_alive(),
        "server died during the rewrite test\n{}",
        server.log_text()
    );
    if !t.bad.is_empty() {
        let shown: Vec<&String> = t.bad.iter().take(20).collect();
        panic!(
            "{} bad responses out of {} complete 200s; first ones:\n{shown:#?}",
            t.bad.len(),
            t.ok + t.bad.len()
        );
    }
    assert!(t.ok > 0, "no successful response at all: {t:?}");

    // The server still serves the file after the storm.
    let r = server.get("/hot.bin");
    assert!(matches!(r.status, 200 | 503), "after the rewrites: {r:?}");
}

#[test]
fn in_memory_body_rewritten_in_place() {
    rewrite_in_place("consistency-mem", 64 * 1024, &[]);
}

#[test]
fn sendfile_body_rewritten_in_place() {
    rewrite_in_place(
        "consistency-sendfile",
        2 * 1024 * 1024,
        &["--sendfile-threshold", "1048576"],
    );
}
