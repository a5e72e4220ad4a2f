//! Zero-downtime operations against the real binary: the SIGUSR2 binary
//! upgrade by listener handover (under load, failing, changing the shard
//! count), the SIGTERM drain with `drain_delay`, and start-up under a
//! restricted cpuset.

use crate::support;

use std::collections::BTreeSet;
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::upgrade::{
    admin_get, assert_answered, listening_pids, listening_sockets, process_gone, queue_requests,
    signal, status_pid, upgrade, Proc, Successors, Tally, Traffic, UPGRADE_DEADLINE,
};
use support::{bin, loud, poll_until, Server, Site};

/// A site with a small and a larger file, and the bodies to expect.
fn site(tag: &str) -> (Site, Vec<(String, Vec<u8>)>) {
    let site = Site::new(tag);
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    site.write("big.bin", &big);
    let paths = vec![
        ("/index.html".to_owned(), support::INDEX_HTML.to_vec()),
        ("/style.css".to_owned(), support::STYLE_CSS.to_vec()),
        ("/big.bin".to_owned(), big),
        ("/digits.txt".to_owned(), support::DIGITS.to_vec()),
    ];
    (site, paths)
}

fn metric(admin: SocketAddr, series: &str) -> Option<f64> {
    let (_, body) = admin_get(admin, "/metrics").ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}

fn shard_cpus(admin: SocketAddr) -> Vec<u64> {
    let (_, body) = admin_get(admin, "/status.json").expect("status.json");
    let v: serde_json::Value = serde_json::from_str(&body).expect("status json");
    v["cores"]
        .as_array()
        .expect("cores")
        .iter()
        .map(|c| c["cpu"].as_u64().expect("cpu"))
        .collect()
}

/// No request failed (none is retried) and some succeeded.
pub fn assert_clean(tally: &Tally, what: &str) {
    assert_eq!(tally.failures(), 0, "{what}: {tally:#?}");
    assert!(tally.ok > 0, "{what}: no request succeeded");
}

#[test]
fn five_upgrades_in_a_row_under_load_fail_no_request() {
    let (site, paths) = site("upgrade-load");
    let mut server = Server::start(&site.root, &[]);
    let successors = Successors::default();
    let (addr, admin) = (server.addr(), server.admin_addr());
    let logs = || server.log_text();
    let first = server.pid();

    let (_, body) = admin_get(admin, "/status.json").unwrap();
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["pid"].as_u64(), Some(u64::from(first)));
    let started_at = status["started_at"].as_f64().expect("started_at");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started_at > now - 60.0 && started_at <= now,
        "started_at {started_at}"
    );
    assert_eq!(listening_pids(addr.port()), BTreeSet::from([first]));

    let began = Instant::now();
    let traffic = Traffic::start(addr, 3, 3, paths);
    thread::sleep(Duration::from_secs(2));
    let mut pid = first;
    let mut pids = vec![first];
    for round in 1..=5 {
        let inodes_before = listening_pids(addr.port());
        assert_eq!(inodes_before, BTreeSet::from([pid]), "round {round}");
        pid = upgrade(pid, admin, &successors, &logs);
        assert!(!pids.contains(&pid), "round {round}: PID {pid} reused");
        pids.push(pid);
        assert_eq!(
            listening_pids(addr.port()),
            BTreeSet::from([pid]),
            "round {round}: the new process owns the listening sockets\n{}",
            logs()
        );
        thread::sleep(Duration::from_secs(2));
    }
    // At least 20 s of traffic in all.
    if let Some(rest) = Duration::from_secs(21).checked_sub(began.elapsed()) {
        thread::sleep(rest);
    }
    let tally = traffic.stop();
    eprintln!("upgrade under load: {tally:?} over {:?}", began.elapsed());
    assert_clean(&tally, "five upgrades under load");
    // Counted by the process that was handed the sockets (the old one,
    // which counted nothing, has exited).
    assert_eq!(
        metric(admin, "shardhttpd_upgrades_total{result=\"success\"}"),
        Some(1.0),
        "the new process counts the upgrade that started it"
    );
    // Each old process parted with its keep-alive connections after a
    // response that said so; none was cut.
    assert!(tally.told_to_close > 0, "{tally:?}");
    // try_wait, not wait_exit: that would wait for the end of the log pipe,
    // which the new process holds.
    let status = server.try_wait().expect("first process exited");
    assert!(status.success(), "first process exit: {status}");
    let log = server.log_text();
    assert_eq!(log.matches("handed over; draining").count(), 5, "{log}");
    signal(pid, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(pid)));
}

#[test]
fn failed_upgrades_keep_the_old_process_serving_and_are_counted() {
    let (site, paths) = site("upgrade-fail");
    // exit 1, hang, or run the real binary, chosen by marker files.
    let script = site.base().join("new-binary.sh");
    let base = site.base().display().to_string();
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ -e {base}/hang ]; then exec sleep 60; fi\nif [ -e {base}/real ]; then exec {} \"$@\"; fi\nexit 1\n",
            bin().display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let config = site.base().join("shardhttpd.toml");
    fs::write(&config, "keepalive_timeout = 30\n").unwrap();
    let script_arg = script.display().to_string();
    let config_arg = config.display().to_string();
    let mut server = Server::start(
        &site.root,
        &[
            "--config",
            &config_arg,
            "--upgrade-binary",
            &script_arg,
            "--upgrade-timeout",
            "2",
        ],
    );
    let successors = Successors::default();
    let (addr, admin) = (server.addr(), server.admin_addr());
    let pid = server.pid();
    let failed = "shardhttpd_upgrades_total{result=\"failed\"}";
    assert_eq!(metric(admin, failed), Some(0.0));
    let traffic = Traffic::start(addr, 2, 2, paths);

    // 1. The new binary exits at once.
    signal(pid, "USR2");
    let line = server
        .wait_for_log("upgrade failed", UPGRADE_DEADLINE)
        .unwrap_or_else(|| panic!("no failure logged\n{}", server.log_text()));
    assert!(line.contains("exited"), "{line}");
    assert!(poll_until(Duration::from_secs(2), || metric(admin, failed)
        == Some(1.0)));

    // 2. It never becomes ready; a second SIGUSR2 meanwhile is ignored.
    fs::write(site.base().join("hang"), b"").unwrap();
    signal(pid, "USR2");
    thread::sleep(Duration::from_millis(300));
    signal(pid, "USR2");
    assert!(
        server
            .wait_for_log("SIGUSR2 ignored", Duration::from_secs(5))
            .is_some(),
        "{}",
        server.log_text()
    );
    assert!(poll_until(UPGRADE_DEADLINE, || metric(admin, failed) == Some(2.0)));
    assert!(
        server
            .wait_for_log("not ready within", Duration::from_secs(5))
            .is_some(),
        "{}",
        server.log_text()
    );
    fs::remove_file(site.base().join("hang")).unwrap();

    // 3. The new binary is real but the configuration is now bad: it exits 2.
    fs::write(site.base().join("real"), b"").unwrap();
    fs::write(&config, "keepalive_timeout = 30\nbogus_key = 1\n").unwrap();
    signal(pid, "USR2");
    assert!(poll_until(UPGRADE_DEADLINE, || metric(admin, failed) == Some(3.0)));
    assert!(server.is_alive());
    assert_eq!(status_pid(admin), Some(pid));
    // Success is the new process's to count; this one counted none.
    assert_eq!(
        metric(admin, "shardhttpd_upgrades_total{result=\"success\"}"),
        Some(0.0)
    );
    assert_eq!(listening_pids(addr.port()), BTreeSet::from([pid]));
    thread::sleep(Duration::from_secs(1));
    let tally = traffic.stop();
    eprintln!("failed upgrades: {tally:?}");
    assert_clean(&tally, "failed upgrades");

    // 4. Fixed: the same SIGUSR2 now succeeds.
    fs::write(&config, "keepalive_timeout = 30\n").unwrap();
    let logs = || server.log_text();
    let new = upgrade(pid, admin, &successors, &logs);
    assert_eq!(listening_pids(addr.port()), BTreeSet::from([new]));
    signal(new, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(new)));
}

/// Kills, on drop, every process other than `keep` that holds a socket
/// listening on one of `ports`: strays a failed upgrade left behind (the
/// server's descendants), so a failing test does not leave them running.
struct Strays {
    ports: Vec<u16>,
    keep: u32,
}

impl Drop for Strays {
    fn drop(&mut self) {
        for &port in &self.ports {
            for pid in listening_pids(port) {
                if pid != self.keep {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
            }
        }
    }
}

fn script(site: &Site, name: &str, text: &str) -> String {
    let path = site.base().join(name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Issue 24 §3: a new binary that never becomes the server (a script whose
/// `sleep` runs as its child, not by `exec`) times out, and its whole
/// process group is ended: afterwards no process but the server holds the
/// listeners (HTTP, HTTPS, admin), and after SIGTERM the ports are free.
/// Before, `sleep` kept every passed socket listening, and requests hung.
#[test]
fn a_failed_upgrade_leaves_no_process_holding_the_listeners() {
    let (site, _) = site("upgrade-orphan");
    let never = script(&site, "never-execs.sh", "#!/bin/sh\nsleep 1000\n");
    let ca = support::tls::Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let mut tls = support::tls::TlsServer::start(
        &site.root,
        &ca,
        &leaf,
        &["--upgrade-binary", &never, "--upgrade-timeout", "3s"],
    );
    let pid = tls.server.pid();
    let ports = [
        tls.server.addr().port(),
        tls.tls_addr.port(),
        tls.server.admin_addr().port(),
    ];
    let _strays = Strays {
        ports: ports.to_vec(),
        keep: pid,
    };
    signal(pid, "USR2");
    let line = tls
        .server
        .wait_for_log("upgrade failed", UPGRADE_DEADLINE)
        .unwrap_or_else(|| panic!("no failure logged\n{}", tls.server.log_text()));
    assert!(line.contains("not ready within"), "{line}");
    for port in ports {
        assert_eq!(
            listening_pids(port),
            BTreeSet::from([pid]),
            "port {port} after the failed upgrade"
        );
    }
    assert_eq!(tls.server.get("/index.html").status, 200);
    tls.server.signal("TERM");
    let status = tls
        .server
        .wait_exit(Duration::from_secs(15))
        .expect("exits after SIGTERM");
    assert!(status.success(), "{status}");
    for port in ports {
        assert!(listening_pids(port).is_empty(), "port {port} still held");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let err = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .err()
            .unwrap_or_else(|| panic!("port {port} still accepts"));
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{port}");
    }
}

/// A wrapper that starts the real binary late (`sleep 1`, then `exec`) still
/// upgrades: the process group only matters when the upgrade fails. The new
/// process counts the upgrade, and holds the sockets it adopted
/// close-on-exec, so nothing it starts inherits them.
#[test]
fn an_upgrade_binary_that_execs_the_server_late_still_upgrades() {
    let (site, _) = site("upgrade-late-exec");
    let late = script(
        &site,
        "late-exec.sh",
        &format!("#!/bin/sh\nsleep 1\nexec {} \"$@\"\n", bin().display()),
    );
    let server = Server::start(&site.root, &["--upgrade-binary", &late]);
    let successors = Successors::default();
    let (addr, admin) = (server.addr(), server.admin_addr());
    let logs = || server.log_text();
    let new = upgrade(server.pid(), admin, &successors, &logs);
    assert_eq!(listening_pids(addr.port()), BTreeSet::from([new]));
    // Counted by the new process once the old one has its ready signal,
    // which may be a moment after the old one is gone.
    let success = "shardhttpd_upgrades_total{result=\"success\"}";
    assert!(
        poll_until(UPGRADE_DEADLINE, || metric(admin, success) == Some(1.0)),
        "{:?}",
        metric(admin, success)
    );
    let fds = support::procfs::fds(new);
    let sockets: Vec<_> = fds
        .iter()
        .filter(|f| f.target.starts_with("socket:"))
        .collect();
    assert!(sockets.len() >= 2, "listener and admin: {fds:#?}");
    for fd in sockets {
        assert!(
            fd.flags & support::procfs::O_CLOEXEC != 0,
            "fd {} ({}) of the new process is inheritable",
            fd.fd,
            fd.target
        );
    }
    let mut conn = support::Conn::connect(addr);
    assert_eq!(conn.roundtrip(&support::get("/index.html")).status, 200);
    signal(new, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(new)));
}

/// Opens `n` connections with a request sent on each while the server is
/// stopped, so they sit in the accept queues at the moment of the handover.

#[test]
fn shard_count_changes_across_upgrades_lose_no_queued_connection() {
    let allowed = support_cpus();
    if allowed.len() < 2 {
        loud("SKIP: one CPU in the affinity mask; cannot go from 1 shard to 2");
        return;
    }
    let (site, paths) = site("upgrade-cores");
    let config = site.base().join("shardhttpd.toml");
    fs::write(&config, "cores = \"1\"\n").unwrap();
    let config_arg = config.display().to_string();
    let server = Server::start(&site.root, &["--config", &config_arg]);
    let successors = Successors::default();
    let (addr, admin) = (server.addr(), server.admin_addr());
    let logs = || server.log_text();
    assert_eq!(shard_cpus(admin).len(), 1);
    let traffic = Traffic::start(addr, 2, 2, paths);
    thread::sleep(Duration::from_secs(1));
    let mut pid = server.pid();
    let sockets = |port| -> usize { listening_sockets(port) };
    assert_eq!(sockets(addr.port()), 1);

    for (cores, want_sockets) in [(2usize, 2usize), (1, 2)] {
        fs::write(&config, format!("cores = \"{cores}\"\n")).unwrap();
        // Requests queued while the old process cannot accept: SIGUSR2 is
        // delivered as it resumes, so the handover runs with them queued.
        signal(pid, "STOP");
        let queued = queue_requests(addr, 20);
        signal(pid, "USR2");
        signal(pid, "CONT");
        pid = upgrade(pid, admin, &successors, &logs);
        assert_answered(queued, &format!("to {cores} shard(s)"));
        assert_eq!(shard_cpus(admin).len(), cores, "{}", logs());
        assert_eq!(listening_pids(addr.port()), BTreeSet::from([pid]));
        // 1 → 2: a second socket joined the group; 2 → 1: the one shard
        // took both sockets, so none closed with connections queued.
        assert_eq!(sockets(addr.port()), want_sockets, "{}", logs());
        thread::sleep(Duration::from_secs(1));
    }
    let tally = traffic.stop();
    eprintln!("shard count changes: {tally:?}");
    assert_clean(&tally, "1 → 2 → 1 shards");
    signal(pid, "TERM");
    assert!(poll_until(UPGRADE_DEADLINE, || process_gone(pid)));
}

/// The CPUs this test process may run on.
fn support_cpus() -> Vec<usize> {
    shardhttpd::config::affinity_cpus()
}

#[test]
fn sigterm_with_drain_delay_fails_readyz_at_once_and_keeps_serving() {
    use std::io::{Read, Write};
    let (site, paths) = site("drain-delay");
    let large: Vec<u8> = (0..16u32 << 20).map(|i| (i % 253) as u8).collect();
    site.write("large.bin", &large);
    let mut server = Server::start(&site.root, &["--drain-delay", "2"]);
    let (addr, admin) = (server.addr(), server.admin_addr());
    assert_eq!(admin_get(admin, "/readyz").unwrap().0, 200);
    // A response in flight: the client takes a little and stops reading.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.write_all(b"GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 64 * 1024];
    slow.read_exact(&mut got).unwrap();
    let traffic = Traffic::start(addr, 2, 2, paths);
    thread::sleep(Duration::from_millis(500));

    let t0 = Instant::now();
    server.signal("TERM");
    let mut readyz = 0;
    poll_until(Duration::from_secs(1), || {
        readyz = admin_get(admin, "/readyz").map_or(0, |r| r.0);
        readyz == 503
    });
    let failed_after = t0.elapsed();
    assert_eq!(readyz, 503);
    assert!(
        failed_after < Duration::from_millis(100),
        "/readyz failed after {failed_after:?}"
    );
    // Serving goes on through the delay: the traffic runs until just
    // before it ends, and a fresh connection late in it is answered.
    thread::sleep(Duration::from_millis(1500).saturating_sub(t0.elapsed()));
    let late = server.get("/index.html");
    assert_eq!(late.status, 200);
    thread::sleep(Duration::from_millis(1800).saturating_sub(t0.elapsed()));
    let tally = traffic.stop();
    eprintln!("drain delay: {tally:?}");
    assert_clean(&tally, "drain_delay");
    assert!(server.is_alive(), "exited before drain_delay");
    // After the delay the listeners close.
    assert!(
        poll_until(Duration::from_secs(3), || TcpStream::connect(addr).is_err()),
        "still accepting after drain_delay"
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "stopped accepting early: {:?}",
        t0.elapsed()
    );
    // The in-flight response completes.
    let mut rest = Vec::new();
    slow.read_to_end(&mut rest).unwrap();
    got.extend_from_slice(&rest);
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(got.starts_with(b"HTTP/1.1 200"));
    assert_eq!(&got[head_end..], &large[..], "in-flight body");
    let status = server.wait_exit(Duration::from_secs(10)).expect("exited");
    assert!(status.success(), "exit status {status}");
}

fn taskset() -> Option<Command> {
    support::installed("taskset").then(|| Command::new("taskset"))
}

fn run_under_taskset(cpu: &str, root: &Path, extra: &[&str]) -> Option<Proc> {
    let mut cmd = taskset()?;
    cmd.args(["-c", cpu])
        .arg(bin())
        .args(["--root", &root.display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(extra)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info");
    Some(Proc::spawn(cmd))
}

#[test]
fn under_taskset_c_1_one_shard_runs_pinned_to_cpu_1() {
    if !support_cpus().contains(&1) {
        loud("SKIP: CPU 1 is not in this test's affinity mask");
        return;
    }
    let site = Site::new("taskset");
    let Some(proc) = run_under_taskset("1", &site.root, &[]) else {
        loud("SKIP: taskset not installed");
        return;
    };
    let addr = proc.addr("listening addr=");
    let admin = proc.addr("admin endpoint addr=");
    assert_eq!(shard_cpus(admin), vec![1], "{}", proc.log_text());
    let (_, metrics) = admin_get(admin, "/metrics").unwrap();
    let info: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("shardhttpd_shard_info{"))
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(info[0].contains("cpu=\"1\""), "{info:?}");
    // The shard thread itself runs on CPU 1 only.
    let pid = proc.child.id();
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut shard_threads = 0;
    for task in tasks.flatten() {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim().starts_with("shard-") {
            shard_threads += 1;
            let status = fs::read_to_string(task.path().join("status")).unwrap();
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap()
                .trim()
                .to_owned();
            assert_eq!(allowed, "1", "{comm}");
        }
    }
    assert_eq!(shard_threads, 1);
    let mut conn = support::Conn::connect(addr);
    assert_eq!(conn.roundtrip(&support::get("/index.html")).status, 200);
}

#[test]
fn cores_naming_a_cpu_outside_the_allowed_set_exits_2_naming_both() {
    if !support_cpus().contains(&1) {
        loud("SKIP: CPU 1 is not in this test's affinity mask");
        return;
    }
    let site = Site::new("taskset-bad");
    let Some(mut proc) = run_under_taskset("1", &site.root, &["--cores", "0-1"]) else {
        loud("SKIP: taskset not installed");
        return;
    };
    let status = proc.wait_exit(Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(2), "{}", proc.log_text());
    // The stderr reader may lag the exit by a moment.
    poll_until(Duration::from_secs(2), || proc.log_text().contains("CPU 0"));
    let log = proc.log_text();
    assert!(log.contains("CPU 0") && log.contains("[1]"), "{log}");
}
