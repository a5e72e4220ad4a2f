//! Per-core shards, seen from outside through /proc: one `SO_REUSEPORT`
//! listener per shard, one pinned `shard-<i>` thread per CPU, and the kernel
//! spreading connections over all of them. Also dual-stack listening.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::*;

/// Whether this machine can run two shards; prints a loud SKIP if not.
fn have_two_cpus(test: &str) -> bool {
    let parallel = thread::available_parallelism().map_or(1, |n| n.get());
    let allowed = allowed_cpus();
    if parallel < 2 || allowed.len() < 2 {
        loud(&format!(
            "SKIP {test}: needs 2 CPUs, have available_parallelism={parallel}, \
             Cpus_allowed_list={allowed:?}"
        ));
        return false;
    }
    true
}

/// LISTEN sockets (state 0A) on `port` in `/proc/<pid>/net/tcp` and `tcp6`:
/// their inodes.
fn listen_inodes(pid: u32, port: u16) -> Vec<u64> {
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let Some((_, port_hex)) = f[1].rsplit_once(':') else {
                continue;
            };
            if u16::from_str_radix(port_hex, 16).ok() == Some(port) {
                out.push(f[9].parse().expect("inode"));
            }
        }
    }
    out
}

/// Inodes of the sockets among `pid`'s fds.
fn socket_fd_inodes(pid: u32) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read fds")
        .flatten()
    {
        if let Ok(target) = fs::read_link(e.path()) {
            let t = target.to_string_lossy();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                out.insert(inode.parse().expect("socket inode"));
            }
        }
    }
    out
}

/// Waits for `n` `shard started` log lines (a shard pins itself before
/// logging it) and `n` threads named `shard-0` .. `shard-<n-1>`; returns their
/// tids.
fn shard_threads(server: &Server, n: usize) -> Vec<u32> {
    let logged = poll_until(Duration::from_secs(5), || shard_log_cpus(server).len() >= n);
    assert!(logged, "expected {n} `shard started` lines");
    let mut tids = Vec::new();
    let ok = poll_until(Duration::from_secs(5), || {
        let t = threads(server.pid());
        tids = (0..n)
            .filter_map(|i| t.get(&format!("shard-{i}")).copied())
            .collect();
        tids.len() == n
    });
    assert!(
        ok,
        "expected threads shard-0..shard-{}; have {:?}",
        n - 1,
        threads(server.pid())
    );
    let all = threads(server.pid());
    let extra: Vec<&String> = all
        .keys()
        .filter(|k| k.starts_with("shard-"))
        .filter(|k| !(0..n).any(|i| **k == format!("shard-{i}")))
        .collect();
    assert!(extra.is_empty(), "unexpected shard threads {extra:?}");
    tids
}

/// The single CPU a thread is pinned to.
fn pinned_cpu(pid: u32, tid: u32) -> usize {
    let path = format!("/proc/{pid}/task/{tid}/status");
    let list = proc_status_field(Path::new(&path), "Cpus_allowed_list")
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {path}"));
    let cpus = parse_cpu_list(&list);
    assert_eq!(
        cpus.len(),
        1,
        "thread {tid} should be pinned to one CPU, has {list}"
    );
    cpus[0]
}

/// utime + stime of a thread, in clock ticks.
fn thread_cpu_ticks(pid: u32, tid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).expect("task stat");
    // Fields after the parenthesised comm start at field 3.
    let rest = &stat[stat.rfind(')').expect("comm") + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f[14 - 3].parse().unwrap();
    let stime: u64 = f[15 - 3].parse().unwrap();
    utime + stime
}

fn shard_log_cpus(server: &Server) -> BTreeMap<usize, usize> {
    server
        .log_lines()
        .iter()
        .filter(|l| l.contains("shard started"))
        .filter_map(|l| {
            let shard = log_field(l, "shard")?.parse().ok()?;
            let cpu = log_field(l, "cpu")?.parse().ok()?;
            Some((shard, cpu))
        })
        .collect()
}

#[test]
fn two_shards_have_two_reuseport_listeners() {
    if !have_two_cpus("two_shards_have_two_reuseport_listeners") {
        return;
    }
    let site = Site::new("shards-listen");
    let server = Server::start(&site.root, &["--cores", "2"]);
    let port = server.addr().port();
    let mut inodes = Vec::new();
    // The listeners exist once the listening line is printed, but poll in
    // case the second shard binds a moment later.
    poll_until(Duration::from_secs(5), || {
        inodes = listen_inodes(server.pid(), port);
        inodes.len() >= 2
    });
    assert_eq!(
        inodes.len(),
        2,
        "LISTEN sockets on port {port}: {inodes:?}\n{}",
        server.log_text()
    );
    let owned = socket_fd_inodes(server.pid());
    for inode in &inodes {
        assert!(
            owned.contains(inode),
            "listener inode {inode} is not one of the server's fds {owned:?}"
        );
    }
}

#[test]
fn two_shards_are_pinned_to_different_cpus() {
    if !have_two_cpus("two_shards_are_pinned_to_different_cpus") {
        return;
    }
    let site = Site::new("shards-pin");
    let server = Server::start(&site.root, &["--cores", "2"]);
    let tids = shard_threads(&server, 2);
    let cpus: Vec<usize> = tids.iter().map(|&t| pinned_cpu(server.pid(), t)).collect();
    assert_ne!(cpus[0], cpus[1], "both shards on one CPU");
    let allowed = allowed_cpus();
    for cpu in &cpus {
        assert!(allowed.contains(cpu), "CPU {cpu} not in {allowed:?}");
    }
    let logged = shard_log_cpus(&server);
    assert_eq!(
        logged.len(),
        2,
        "`shard started` lines\n{}",
        server.log_text()
    );
    for (i, cpu) in cpus.iter().enumerate() {
        assert_eq!(logged.get(&i), Some(cpu), "shard-{i} log vs affinity");
    }
}

#[test]
fn cores_list_pins_to_exactly_those_cpus() {
    if !have_two_cpus("cores_list_pins_to_exactly_those_cpus") {
        return;
    }
    let allowed = allowed_cpus();
    let spec = format!("{},{}", allowed[0], allowed[1]);
    let site = Site::new("shards-list");
    let server = Server::start(&site.root, &["--cores", &spec]);
    let tids = shard_threads(&server, 2);
    let mut cpus: Vec<usize> = tids.iter().map(|&t| pinned_cpu(server.pid(), t)).collect();
    cpus.sort_unstable();
    assert_eq!(cpus, vec![allowed[0], allowed[1]]);
}

#[test]
fn one_core_means_one_shard() {
    let site = Site::new("shards-one");
    let server = Server::start(&site.root, &["--cores", "1"]);
    shard_threads(&server, 1);
    let port = server.addr().port();
    assert_eq!(listen_inodes(server.pid(), port).len(), 1);
    assert_eq!(server.get("/index.html").status, 200);
}

#[test]
fn bad_cores_spec_is_rejected() {
    let site = Site::new("shards-bad");
    let root = site.root.display().to_string();
    let too_many = (allowed_cpus().len() + 1).to_string();
    for spec in ["0", too_many.as_str(), "x", "3-1"] {
        let out = command()
            .args(["--root", &root, "--cores", spec, "--check"])
            .output()
            .expect("run --check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--cores {spec} accepted");
        assert!(stderr.contains("cores"), "--cores {spec}: {stderr}");
    }
}

/// `conns` connections spread over `threads` client threads, each doing
/// `per_conn` keep-alive GETs; returns how many succeeded.
fn load(addr: SocketAddr, threads: usize, conns: usize, per_conn: usize) -> usize {
    let ok = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let ok = Arc::clone(&ok);
            thread::spawn(move || {
                for _ in 0..conns / threads {
                    let mut c = Conn::connect(addr);
                    for _ in 0..per_conn {
                        c.send(get("/index.html").as_bytes());
                        match c.read_response() {
                            Ok(r) if r.status == 200 && r.body == INDEX_HTML => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            other => panic!("load request failed: {other:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("load thread");
    }
    ok.load(Ordering::Relaxed)
}

#[test]
fn connections_spread_over_both_shards() {
    if !have_two_cpus("connections_spread_over_both_shards") {
        return;
    }
    let site = Site::new("shards-spread");
    let server = Server::start(&site.root, &["--cores", "2"]);
    let pid = server.pid();
    let tids = shard_threads(&server, 2);

    // ~200 connections from different source ports, one request each.
    assert_eq!(load(server.addr(), 4, 200, 1), 200);

    let before: Vec<u64> = tids.iter().map(|&t| thread_cpu_ticks(pid, t)).collect();
    let end = Instant::now() + Duration::from_secs(20);
    let mut served = 0;
    let mut after = before.clone();
    // Rounds of a few thousand requests over fresh connections until both
    // shards have been charged CPU time; an idle shard sleeping in epoll_wait
    // is essentially never charged a tick.
    while Instant::now() < end {
        served += load(server.addr(), 4, 200, 15);
        after = tids.iter().map(|&t| thread_cpu_ticks(pid, t)).collect();
        if after.iter().zip(&before).all(|(a, b)| a > b) {
            break;
        }
    }
    eprintln!("shard CPU ticks before {before:?} after {after:?} over {served} requests");
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        assert!(
            a > b,
            "shard-{i} got no CPU time over {served} requests: before {before:?} after {after:?}"
        );
    }
}

#[test]
fn listens_on_ipv4_and_ipv6() {
    if TcpListener::bind("[::1]:0").is_err() {
        loud("SKIP listens_on_ipv4_and_ipv6: cannot bind [::1] here");
        return;
    }
    let site = Site::new("dual-stack");
    let server = Server::start(
        &site.root,
        &["--listen", "127.0.0.1:0", "--listen", "[::1]:0"],
    );
    let addrs = server.addrs().to_vec();
    assert_eq!(addrs.len(), 2, "{addrs:?}");
    assert!(addrs.iter().any(|a| a.is_ipv4()), "{addrs:?}");
    assert!(addrs.iter().any(|a| a.is_ipv6()), "{addrs:?}");
    for addr in addrs {
        let mut c = Conn::connect(addr);
        let r = c.roundtrip(&get("/index.html"));
        assert_eq!(r.status, 200, "via {addr}: {r:?}");
        assert_eq!(r.body, INDEX_HTML, "via {addr}");
        assert!(
            !listen_inodes(server.pid(), addr.port()).is_empty(),
            "no LISTEN socket for {addr} in /proc/net"
        );
    }
}

/// Regression: after accept failed with EMFILE the shard waited for the
/// next connection's edge, so connections already queued stayed unanswered
/// even once descriptors were free again.
#[test]
fn accept_recovers_after_running_out_of_descriptors() {
    if !support::installed("prlimit") {
        support::loud("SKIP: prlimit not installed");
        return;
    }
    let site = Site::new("emfile");
    let server = Server::start(&site.root, &["--cores", "1"]);
    let limit = std::process::Command::new("prlimit")
        .args(["--pid", &server.pid().to_string(), "--nofile=64:64"])
        .status()
        .expect("run prlimit");
    assert!(limit.success(), "prlimit failed");

    // More connections than descriptors, each with a request queued; but
    // fewer queued than answered, so closing the answered ones frees enough
    // descriptors for every queued one (however many the server holds).
    let open = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .map(|d| d.count())
        .expect("read the server's fds");
    let spare = 64usize.saturating_sub(open);
    assert!(spare >= 8, "the server holds {open} fds already");
    let held: Vec<support::Conn> = (0..spare + spare / 2)
        .map(|_| {
            let mut c = server.connect();
            c.send(support::get("/index.html").as_bytes());
            c
        })
        .collect();
    assert!(
        server
            .wait_for_log("accept fail", Duration::from_secs(5))
            .is_some(),
        "the descriptor limit was never hit\n{}",
        server.log_text()
    );
    // Connections the server accepted are answered; the rest wait queued.
    let (answered, mut queued): (Vec<_>, Vec<_>) = held
        .into_iter()
        .map(|mut c| {
            c.set_read_timeout(Duration::from_millis(50));
            let ok = c.read_response_to("GET").is_ok();
            (c, ok)
        })
        .partition(|(_, ok)| *ok);
    assert!(!answered.is_empty(), "nothing was answered");
    assert!(!queued.is_empty(), "every connection was answered at once");
    // Closing the answered connections frees descriptors; the queued ones
    // must now be accepted without any new connection arriving.
    drop(answered);
    for (c, _) in &mut queued {
        c.set_read_timeout(Duration::from_secs(5));
        let r = c.read_response_to("GET").unwrap_or_else(|e| {
            panic!(
                "queued connection never answered: {e}\n{}",
                server.log_text()
            )
        });
        assert_eq!(r.status, 200);
    }
    drop(queued);
    assert_eq!(server.get("/index.html").status, 200);
}
