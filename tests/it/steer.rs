//! `--steer cpu`: a connection is accepted by the shard on the CPU that
//! handled its SYN. On loopback that is the client's CPU, so a client pinned
//! to CPU k must have every connection accepted by the shard on CPU k, counted
//! from the server's own `/metrics`; and a client on a CPU with no shard must
//! still be answered.

use crate::support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use support::*;

/// Connections each pinned client opens.
const CONNS: u64 = 24;

/// The two CPUs to use, or a loud skip on a machine with fewer.
fn two_cpus(test: &str) -> Option<(usize, usize)> {
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        loud(&format!(
            "SKIP {test}: needs 2 CPUs in the affinity mask, have {cpus:?}"
        ));
        return None;
    }
    Some((cpus[0], cpus[1]))
}

/// `--cores` for one CPU: a bare number would be a count.
fn cores_arg(cpus: &[usize]) -> String {
    match cpus {
        [one] => format!("{one}-{one}"),
        many => many
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// `shardhttpd_connections_accepted_total` by `core` label (shard index).
fn accepted(admin: SocketAddr) -> BTreeMap<usize, u64> {
    let mut s = TcpStream::connect(admin).expect("connect admin");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read /metrics");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("shardhttpd_connections_accepted_total{core=\"") else {
            continue;
        };
        let (core, rest) = rest.split_once('"').expect("closing quote");
        let value = rest.rsplit(' ').next().expect("value");
        out.insert(
            core.parse().expect("core index"),
            value.parse::<f64>().expect("number") as u64,
        );
    }
    out
}

/// Opens `CONNS` connections from a thread pinned to `cpu`, each answering
/// one GET with 200.
fn client_on(server: &Server, cpu: usize) {
    let addr = server.addr();
    thread::spawn(move || {
        assert!(
            core_affinity::set_for_current(core_affinity::CoreId { id: cpu }),
            "pin the client to CPU {cpu}"
        );
        for _ in 0..CONNS {
            let mut c = Conn::connect(addr);
            c.send(get("/index.html").as_bytes());
            let r = c.read_response_to("GET").expect("a response");
            assert_eq!(r.status, 200);
        }
    })
    .join()
    .expect("client thread");
}

/// Waits until the shards have published `total` accepted connections
/// beyond `before`, and returns the per-shard increase.
fn accepted_since(
    server: &Server,
    before: &BTreeMap<usize, u64>,
    total: u64,
) -> BTreeMap<usize, u64> {
    let mut delta = BTreeMap::new();
    poll_until(Duration::from_secs(5), || {
        delta = accepted(server.admin_addr())
            .into_iter()
            .map(|(core, n)| (core, n - before.get(&core).copied().unwrap_or(0)))
            .collect();
        delta.values().sum::<u64>() >= total
    });
    delta
}

#[test]
fn steer_cpu_accepts_on_the_clients_cpu() {
    let Some((a, b)) = two_cpus("steer_cpu_accepts_on_the_clients_cpu") else {
        return;
    };
    let site = Site::new("steer-cpu");
    let server = Server::start(
        &site.root,
        &["--cores", &cores_arg(&[a, b]), "--steer", "cpu"],
    );
    // Shard 0 runs on CPU a, shard 1 on CPU b.
    for (shard, cpu) in [(0, a), (1, b), (0, a)] {
        let before = accepted(server.admin_addr());
        client_on(&server, cpu);
        let delta = accepted_since(&server, &before, CONNS);
        assert_eq!(
            delta.get(&shard).copied(),
            Some(CONNS),
            "a client on CPU {cpu}: every connection on shard {shard}; per shard {delta:?}"
        );
        assert_eq!(delta.values().sum::<u64>(), CONNS, "{delta:?}");
    }
}

#[test]
fn steer_cpu_answers_a_client_on_a_cpu_without_a_shard() {
    let Some((a, b)) = two_cpus("steer_cpu_answers_a_client_on_a_cpu_without_a_shard") else {
        return;
    };
    let site = Site::new("steer-noshard");
    // One shard, on CPU b; the client runs on CPU a, which has none.
    let server = Server::start(&site.root, &["--cores", &cores_arg(&[b]), "--steer", "cpu"]);
    let before = accepted(server.admin_addr());
    client_on(&server, a);
    let delta = accepted_since(&server, &before, CONNS);
    assert_eq!(delta.get(&0).copied(), Some(CONNS), "{delta:?}");
}

#[test]
fn steer_rejects_an_unknown_mode() {
    let site = Site::new("steer-bad");
    let out = command()
        .args([
            "--root",
            &site.root.display().to_string(),
            "--steer",
            "rss",
            "--check",
        ])
        .output()
        .expect("run shardhttpd");
    assert!(!out.status.success(), "--steer rss must be refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("steer"), "the error names the key: {err}");
}
