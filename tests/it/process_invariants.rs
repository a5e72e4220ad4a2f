//! ARCHITECTURE.md's invariants that cannot be seen in a response, checked
//! from outside through `/proc` (no strace): every descriptor is
//! close-on-exec, snapshot builders run at a lower priority than the shards,
//! a batch of pipelined answers leaves in one write, and one connection
//! pipelining thousands of requests cannot hold up another connection.

use crate::support;

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use support::metrics::generation;
use support::procfs::{self, O_CLOEXEC};
use support::*;

/// Every descriptor the server opens (listeners, epoll, eventfds, accepted
/// sockets, the snapshot's large-file fds, inotify, the access log, admin
/// sockets) is close-on-exec. Only what the server inherits (the standard
/// streams, and whatever the test's own environment passes down) is exempt.
#[test]
fn every_descriptor_is_close_on_exec() {
    let site = Site::new("cloexec");
    site.write("big.bin", &vec![b'z'; 2 * 1024 * 1024]);
    let log = site.base().join("access.log");
    let log_arg = log.display().to_string();
    let server = Server::start(
        &site.root,
        &[
            "--listen",
            "127.0.0.1:0",
            "--sendfile-threshold",
            "1048576",
            "--access-log",
            &log_arg,
        ],
    );
    // Hold an accepted connection open, in the middle of a large body, while
    // the descriptors are listed.
    let mut c = server.connect();
    c.send(get("/big.bin").as_bytes());
    let head = c.read_head().expect("response head");
    assert_eq!(head.status, 200);
    let admin = server.admin_addr();
    let _ = support::metrics::scrape(admin);

    // Descriptors this test process would pass on to any child (no
    // close-on-exec here) reach the server from outside: not its own.
    let inherited: Vec<u32> = procfs::fds(std::process::id())
        .iter()
        .filter(|f| f.flags & O_CLOEXEC == 0)
        .map(|f| f.fd)
        .collect();
    let fds = procfs::fds(server.pid());
    let kinds = |needle: &str| fds.iter().filter(|f| f.target.contains(needle)).count();
    // What must be there for this check to mean something.
    assert!(kinds("socket:") >= 3, "listener, admin, accepted: {fds:#?}");
    assert!(kinds("anon_inode:[eventpoll]") >= 1, "{fds:#?}");
    assert!(kinds("anon_inode:[eventfd]") >= 1, "{fds:#?}");
    assert!(kinds("inotify") >= 1, "{fds:#?}");
    assert!(kinds("big.bin") >= 1, "large-file fd: {fds:#?}");
    assert!(kinds("access.log") >= 1, "{fds:#?}");
    for fd in fds
        .iter()
        .filter(|f| f.fd > 2 && !inherited.contains(&f.fd))
    {
        assert!(
            fd.flags & O_CLOEXEC != 0,
            "fd {} ({}) is not close-on-exec: flags {:o}",
            fd.fd,
            fd.target,
            fd.flags
        );
    }
    let mut rest = Vec::new();
    let _ = c.stream.read_to_end(&mut rest);
}

/// Snapshot builders run at nice 10 while the shards stay at 0: a rebuild
/// that loads a few thousand new files shows its builder threads in
/// `/proc/PID/task/*/stat` while it runs. (Compression is off: at nice 10 on
/// a busy machine, brotli at level 11 would make this test take minutes,
/// which is the point of the low priority, but not of this test.)
#[test]
fn snapshot_builders_run_below_the_shards_priority() {
    let site = Site::new("builder-nice");
    let server = Server::start(&site.root, &["--watch", "false", "--compress", "false"]);
    let admin = server.admin_addr();
    let pid = server.pid();
    let shard = procfs::shard0(&server);
    // The server inherits the test's nice value (0 unless the suite itself
    // runs under `nice`); builders go to 10 whatever it is.
    let me = std::process::id();
    let base = procfs::task_nice(me, me).expect("own nice");
    let builder_nice = base.max(10);
    assert_eq!(procfs::task_nice(pid, shard), Some(base), "shard nice");
    let before: Vec<u32> = procfs::tasks(pid).iter().map(|t| t.0).collect();

    let page = vec![b'p'; 2048];
    for n in 0..3000u32 {
        site.write(&format!("many/{:02}/{n}.txt", n % 50), &page);
    }
    server.signal("HUP");
    // New threads during the rebuild: tid → (comm, lowest nice seen). A
    // builder lowers itself the moment it starts running, but a new thread
    // may wait on a busy run queue before it runs at all, and a short-lived
    // one can end before the next look. So a glimpse at the base nice counts
    // only once the thread has run for a millisecond: by then it has had
    // every chance to lower itself.
    let mut builders: std::collections::BTreeMap<u32, (String, i64)> = Default::default();
    let mut others_lowered = Vec::new();
    let swapped = poll_until(Duration::from_secs(120), || {
        for (tid, comm, nice) in procfs::tasks(pid) {
            if before.contains(&tid) {
                if nice != base {
                    others_lowered.push((tid, comm, nice));
                }
            } else if comm != "admin-client" {
                let ran = procfs::task_runtime_ns(pid, tid).unwrap_or(0);
                if nice != base || ran >= 1_000_000 {
                    let seen = builders.entry(tid).or_insert((comm, nice));
                    seen.1 = seen.1.min(nice);
                }
            }
        }
        generation(admin) == 2
    });
    assert!(swapped, "the rebuild did not finish within 120 s");
    assert!(
        !builders.is_empty(),
        "no builder thread seen during a rebuild that loaded 3000 files"
    );
    for (tid, (comm, nice)) in &builders {
        assert_eq!(
            *nice, builder_nice,
            "builder thread {tid} ({comm}) runs at nice {nice}"
        );
    }
    assert!(
        others_lowered.is_empty(),
        "threads that are no builders were lowered: {others_lowered:?}"
    );
    assert_eq!(
        procfs::task_nice(pid, shard),
        Some(base),
        "shard nice after"
    );
}

/// Thirty-two pipelined requests arriving in one segment are answered with
/// one write: the shard thread's write-syscall count (`syscw` in
/// `/proc/PID/task/TID/io`, which counts write, writev and sendfile) grows
/// by exactly one.
#[test]
fn pipelined_batch_is_answered_with_one_write() {
    let site = Site::new("one-write");
    // Write syscalls are what is counted: on io_uring the batch goes as
    // one ring send, and none (`uring::` checks that).
    let server = Server::start(
        &site.root,
        &["--cores", "1", "--compress", "false", "--io", "epoll"],
    );
    let pid = server.pid();
    let shard = procfs::shard0(&server);
    let mut c = server.connect();
    // Past the accept path, on an established, registered connection.
    assert_eq!(c.roundtrip(&get("/index.html")).status, 200);
    let paths = ["/index.html", "/style.css", "/digits.txt", "/missing"];
    for round in 0..3 {
        let raw: String = (0..32).map(|i| get(paths[i % paths.len()])).collect();
        let before = procfs::task_io(pid, shard, "syscw");
        c.send(raw.as_bytes());
        for i in 0..32 {
            let r = c
                .read_response()
                .unwrap_or_else(|e| panic!("round {round}, response {i}: {e}"));
            assert_eq!(r.status, if i % 4 == 3 { 404 } else { 200 });
        }
        let writes = procfs::task_io(pid, shard, "syscw") - before;
        assert_eq!(
            writes, 1,
            "round {round}: 32 pipelined answers took {writes} writes"
        );
    }
}

/// One connection keeps the server busy with an endless stream of pipelined
/// requests (and reads every answer); a second connection's single request
/// must still be answered promptly, because a connection gets at most 16
/// reads per event before the others have their turn.
#[test]
fn pipelining_flood_does_not_delay_another_connection() {
    /// Generous for a loaded 2-core machine, and far below the seconds the
    /// flood lasts, during which a shard without a per-event budget would
    /// not look at the second connection at all.
    const BOUND: Duration = Duration::from_millis(1000);
    const FLOOD_FOR: Duration = Duration::from_secs(6);
    let site = Site::new("fairness");
    let server = Server::start(&site.root, &["--cores", "1", "--compress", "false"]);
    let admin = server.admin_addr();
    let flood = server.connect();
    let mut flood_reader = flood.stream.try_clone().expect("clone");
    let mut flood_writer = flood.stream.try_clone().expect("clone");
    let stop = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    let mut worst = Duration::ZERO;
    thread::scope(|s| {
        s.spawn(|| {
            let batch: String = (0..400)
                .map(|_| request("HEAD", "/digits.txt", &[]))
                .collect();
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < FLOOD_FOR {
                if std::io::Write::write_all(&mut flood_writer, batch.as_bytes()).is_err() {
                    break;
                }
            }
        });
        s.spawn(|| {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match flood_reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        answered.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        });
        // Let the flood get going: answers flowing, the shard busy.
        poll_until(Duration::from_secs(5), || {
            answered.load(Ordering::Relaxed) > 1024 * 1024
        });
        for _ in 0..5 {
            let mut c = server.connect();
            let started = Instant::now();
            let r = c.roundtrip(&get("/index.html"));
            let took = started.elapsed();
            assert_eq!(r.body, INDEX_HTML);
            worst = worst.max(took);
        }
        stop.store(true, Ordering::Relaxed);
        let _ = flood.stream.shutdown(std::net::Shutdown::Both);
    });
    let requests_seen = support::metrics::sum(
        &support::metrics::scrape(admin),
        "shardhttpd_http_requests_total",
        &[],
    );
    eprintln!(
        "fairness: worst single request {worst:?} while the flood got {} answer bytes \
         ({requests_seen} requests counted)",
        answered.load(Ordering::Relaxed)
    );
    assert!(
        answered.load(Ordering::Relaxed) > 1024 * 1024,
        "the flood never got going"
    );
    assert!(
        worst <= BOUND,
        "a single request waited {worst:?} behind a pipelining connection"
    );
}
