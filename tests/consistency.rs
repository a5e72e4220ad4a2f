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
use std::time::Duration;

use support::*;

const RUN_FOR: Duration = Duration::from_secs(3);
const CLIENTS: usize = 4;
const HUP_EVERY: Duration = Duration::from_millis(150);
const CLIENT_PAUSE: Duration = Duration::from_micros(500);

/// What the clients saw.
#[derive(Default, Debug)]
struct Tally {
    /// Complete 200s holding one whole version (A, B, or either shrunk to half).
    whole: usize,
    /// Complete 200s holding a uniform prefix of a version (the snapshot read
    /// the file between the truncate and the end of the write, when the file
    /// really had that content); allowed, but counted.
    intermediate: usize,
    unavailable: usize,
    incomplete: usize,
    closed_before_response: usize,
    reconnects: usize,
    /// Torn bodies and other contract violations; each is a test failure.
    bad: Vec<String>,
    /// ETag → (length, fill byte) first seen with it: a strong ETag must
    /// always come with the same bytes.
    etags: HashMap<String, (usize, Option<u8>)>,
}

enum Body {
    Whole,
    Intermediate,
}

/// Checks a complete 200 body: all one fill byte that a version used, and
/// whether it is `size` or `size / 2` long (a whole version).
fn check_body(body: &[u8], size: usize) -> Result<Body, String> {
    let len = body.len();
    let Some(&fill) = body.first() else {
        return Ok(Body::Intermediate);
    };
    if let Some(i) = body.iter().position(|&b| b != fill) {
        return Err(format!(
            "torn body: {len} bytes starting with {:?}, {:?} at byte {i}",
            fill as char, body[i] as char
        ));
    }
    if fill != b'a' && fill != b'b' {
        return Err(format!("{len} bytes of unknown fill {fill:#04x}"));
    }
    if len > size {
        return Err(format!(
            "{len} bytes of {:?}: longer than any version",
            fill as char
        ));
    }
    Ok(if len == size || len == size / 2 {
        Body::Whole
    } else {
        Body::Intermediate
    })
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
        // Pace the clients a little: empty or tiny bodies come back so fast
        // that four spinning clients starve the writer on a small machine.
        thread::sleep(CLIENT_PAUSE);
        let mut t = tally.lock().unwrap();
        match result {
            Ok(r) => {
                if r.says_close() {
                    conn = None;
                }
                match r.status {
                    200 => match check_body(&r.body, size) {
                        Ok(kind) => {
                            match kind {
                                Body::Whole => t.whole += 1,
                                Body::Intermediate => t.intermediate += 1,
                            }
                            let sig = (r.body.len(), r.body.first().copied());
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
/// B, shrunk to half, … now and then holding a version still for a while so
/// that a snapshot of it can be served from the fd too.
fn writer(path: &std::path::Path, size: usize, stop: &AtomicBool) -> usize {
    let a = vec![b'a'; size];
    let b = vec![b'b'; size];
    let mut steps = 0;
    while !stop.load(Ordering::Relaxed) {
        for version in [&a, &b] {
            let mut f = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .expect("open for rewrite");
            f.write_all(version).expect("rewrite");
            steps += 1;
            thread::sleep(hold(steps));
            f.set_len(size as u64 / 2).expect("shrink");
            steps += 1;
            thread::sleep(hold(steps));
        }
    }
    // End on a known whole version, for the final check.
    std::fs::write(path, &a).expect("final version");
    steps
}

/// How long to keep the state reached at `step`: mostly a few ms, but now
/// and then long enough for a snapshot of it to be served. Odd steps end
/// with a whole version, even ones with a half one; hold both kinds. Every
/// 16th step holds a whole version long enough for a rebuild (debounce, the
/// ctime settling, the walk) and complete 2 MiB responses even on a loaded
/// machine, so the test cannot pass vacuously on 503s alone.
fn hold(step: usize) -> Duration {
    Duration::from_millis(match step % 16 {
        3 => 300,
        0 | 11 => 40,
        _ => 3,
    })
}

/// SIGHUP every [`HUP_EVERY`], independent of the writer's phase.
fn hupper(server: &Server, stop: &AtomicBool) -> usize {
    let mut hups = 0;
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(HUP_EVERY);
        server.signal("HUP");
        hups += 1;
    }
    hups
}

fn rewrite_in_place(tag: &str, size: usize, extra: &[&str]) {
    let site = Site::new(tag);
    let path = site.write("hot.bin", &vec![b'a'; size]);
    let mut server = Server::start(&site.root, extra);
    let first = server.get("/hot.bin");
    assert_eq!(first.status, 200, "{first:?}");
    assert!(first.body == vec![b'a'; size], "initial version");
    let stop = AtomicBool::new(false);
    let tally = Mutex::new(Tally::default());

    let (steps, hups) = thread::scope(|s| {
        let w = s.spawn(|| writer(&path, size, &stop));
        let h = s.spawn(|| hupper(&server, &stop));
        for _ in 0..CLIENTS {
            s.spawn(|| client(&server, size, &stop, &tally));
        }
        thread::sleep(RUN_FOR);
        stop.store(true, Ordering::Relaxed);
        (
            w.join().expect("writer thread"),
            h.join().expect("hup thread"),
        )
    });

    let t = tally.into_inner().unwrap();
    eprintln!(
        "{tag}: {steps} rewrites, {hups} SIGHUPs; 200 whole version {}, 200 intermediate \
         snapshot {}, distinct ETags {}, 503 {}, incomplete {}, closed before response {}, \
         reconnects {}, bad {}",
        t.whole,
        t.intermediate,
        t.etags.len(),
        t.unavailable,
        t.incomplete,
        t.closed_before_response,
        t.reconnects,
        t.bad.len()
    );
    let mut seen: Vec<(usize, Option<char>)> = t
        .etags
        .values()
        .map(|&(len, fill)| (len, fill.map(char::from)))
        .collect();
    seen.sort_unstable();
    eprintln!("{tag}: versions served (length, fill): {seen:?}");
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
            t.whole + t.intermediate + t.bad.len()
        );
    }
    assert!(
        t.whole + t.intermediate > 0,
        "no successful response at all: {t:?}"
    );
    if t.whole == 0 {
        eprintln!(
            "\n*** {tag}: WARNING: no whole version was served during the storm; \
             every snapshot caught the file mid-rewrite ***\n"
        );
    }

    // Once the file is quiet again, a reload serves its final whole version.
    server.signal("HUP");
    let mut last = None;
    let settled = poll_until(Duration::from_secs(5), || {
        let r = server.get("/hot.bin");
        let done = r.status == 200 && r.body.len() == size && r.body.iter().all(|&b| b == b'a');
        last = Some(r);
        done
    });
    assert!(
        settled,
        "final version not served after the storm; last: {last:?}"
    );
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
