//! Runs the study on the tiny matrix (one keep-alive 100 B cell per server
//! and one h2c cell with h2load, 1 s cells, no peers, two rounds, the
//! backend axis `--io epoll,uring`) against the debug shardhttpd, and checks
//! the CSV's columns and rows (rounds interleaved, a backend the binary
//! lacks reported as unsupported), the sweep's per-core figures, the
//! one-CPU sweep warning and the files written.

mod common;

use common::{on_path, shardhttpd, skip_test};
use std::process::Command;

/// The CSV header, as docs/benchmarks.md documents it.
const COLUMNS: &str = "section,server,tool,mode,size,size_bytes,concurrency,pipeline_depth,shards,steer,duration_s,requests,rps,latency_p50_ms,latency_p99_ms,errors,server_cpu_us_per_req,server_cpu_busy_pct,client_cpu_busy_pct,limited_by,per_core_requests,balance_max_min,core_shares_pct,note,round";

fn allowed_cpus() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_owned();
    list.split(',')
        .map(|p| match p.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

#[test]
fn tiny_matrix_writes_every_expected_row() {
    if !on_path("wrk") {
        skip_test("SKIP tiny_matrix_writes_every_expected_row: wrk not installed");
        return;
    }
    let out = std::env::temp_dir().join(format!("shardbench-tiny-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // Two rounds, and the backend axis: a shardhttpd that lacks `--io`
    // shows its uring cells as unsupported, never as epoll figures.
    let bin = shardhttpd();
    let knows_io = {
        let help = Command::new(&bin).arg("--help").output().expect("--help");
        String::from_utf8_lossy(&help.stdout).contains("--io <")
    };
    // Syscalls per request, where strace is installed to count them.
    let strace = on_path("strace");
    if !strace {
        skip_test("SKIP the --syscalls columns: strace not installed");
    }
    let run = Command::new(env!("CARGO_BIN_EXE_shardbench"))
        .args(strace.then_some("--syscalls"))
        .args([
            "--matrix",
            "tiny",
            "--no-peers",
            "--duration",
            "1",
            "--rounds",
            "2",
        ])
        .args(["--io", "epoll,uring", "--out"])
        .arg(&out)
        .arg("--server-bin")
        .arg(&bin)
        .output()
        .expect("run shardbench");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "shardbench exited with {}: {stderr}",
        run.status
    );

    let csv = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(COLUMNS));
    let header: Vec<&str> = COLUMNS.split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect("column");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "row {r:?}");
    }
    let uring_floor = rows.iter().any(|r| r[col("server")] == "floor-uring");
    if !uring_floor {
        assert!(stderr.contains("SKIP floor-uring"), "{stderr}");
        skip_test("SKIP the floor-uring row: the study found no io_uring here");
    }
    let unsupported: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[col("note")].starts_with("unsupported"))
        .collect();
    if knows_io {
        assert!(unsupported.is_empty(), "{unsupported:?}");
    } else {
        // The keep-alive cell and the h2c cell, once each, not measured.
        assert!(!unsupported.is_empty());
        for r in &unsupported {
            assert_eq!(r[col("server")], "shardhttpd-uring", "{r:?}");
            assert_eq!(r[col("round")], "0", "{r:?}");
            assert_eq!(r[col("requests")], "0", "{r:?}");
        }
    }
    let matrix: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[0] == "matrix" && r[col("tool")] != "h2load" && r[col("round")] != "0")
        .collect();
    let servers: Vec<(&str, &str)> = matrix
        .iter()
        .map(|r| (r[col("server")], r[col("round")]))
        .collect();
    let mut want = Vec::new();
    for round in ["1", "2"] {
        want.push(("shardhttpd-epoll", round));
        if knows_io {
            want.push(("shardhttpd-uring", round));
        }
        want.push(("floor", round));
        if uring_floor {
            want.push(("floor-uring", round));
        }
    }
    assert_eq!(servers, want, "each server in turn, round by round");
    // The h2 smoke cell: h2c, 10 streams per connection, shardhttpd only
    // (the floors speak HTTP/1.1), on each backend it knows.
    let h2: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[0] == "matrix" && r[col("tool")] == "h2load" && r[col("round")] != "0")
        .collect();
    if on_path("h2load") {
        let backends = if knows_io { 2 } else { 1 };
        assert_eq!(
            h2.len(),
            2 * backends,
            "one h2c cell per backend, two rounds: {h2:?}"
        );
        let r = h2[0];
        assert_eq!(r[col("server")], "shardhttpd-epoll");
        assert_eq!(r[col("mode")], "h2c");
        assert_eq!(r[col("pipeline_depth")], "10", "streams per connection");
        let rps: f64 = r[col("rps")].parse().expect("rps");
        assert!(rps > 0.0, "h2c served nothing: {r:?}");
        assert_eq!(r[col("errors")], "0", "{r:?}");
        let p50: f64 = r[col("latency_p50_ms")].parse().expect("p50");
        assert!(p50 > 0.0, "percentiles from h2load's log: {r:?}");
    } else {
        assert!(h2.is_empty(), "{h2:?}");
        skip_test("SKIP the h2c cell: h2load not installed (nghttp2-client)");
    }
    for r in &matrix {
        assert_eq!(r[col("mode")], "keep-alive");
        assert_eq!(r[col("size_bytes")], "100");
        assert_eq!(r[col("tool")], "wrk");
        let rps: f64 = r[col("rps")].parse().expect("rps");
        assert!(rps > 0.0, "{} served nothing: {r:?}", r[1]);
        assert_eq!(r[col("errors")], "0", "{r:?}");
        let us: f64 = r[col("server_cpu_us_per_req")].parse().expect("µs/req");
        assert!(us > 0.0, "server CPU was measured: {r:?}");
    }

    // Shards 1..N with N the CPUs the client leaves (1 when it shares one).
    let cpus = allowed_cpus();
    let n = (cpus - (cpus / 3).max(1)).max(1);
    let sweep: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == "sweep").collect();
    assert_eq!(
        sweep.len(),
        2 * n * 2,
        "hash and cpu for each shard count, each round: {sweep:?}"
    );
    for r in &sweep {
        let shards: usize = r[col("shards")].parse().expect("shards");
        let per_core: Vec<u64> = r[col("per_core_requests")]
            .split(';')
            .map(|v| v.parse().expect("per-core count"))
            .collect();
        assert_eq!(per_core.len(), shards, "{r:?}");
        let requests: u64 = r[col("requests")].parse().expect("requests");
        // The server also answers what wrk had in flight when it stopped.
        assert!(per_core.iter().sum::<u64>() >= requests, "{r:?}");
        assert!(["hash", "cpu"].contains(&r[col("steer")]));
    }
    for file in ["results.md", "summary.csv", "machine.md", "commands.txt"] {
        assert!(out.join(file).is_file(), "{file} written");
    }
    let md = std::fs::read_to_string(out.join("results.md")).expect("results.md");
    assert!(md.contains("| 10 | ") && md.contains("Shard sweep"), "{md}");
    assert!(md.contains("median of 2 interleaved rounds"), "{md}");
    // One server CPU: a warning, and no scaling plot of a single point.
    for file in ["sweep-rps.svg", "sweep-balance.svg"] {
        assert_eq!(
            out.join(file).is_file(),
            n >= 2,
            "{file} with {n} server CPUs"
        );
    }
    assert_eq!(
        stderr.contains("WARNING: the servers have 1 CPU"),
        n < 2,
        "{stderr}"
    );
    if !knows_io {
        assert!(md.contains("unsupported"), "{md}");
    }
    let summary = std::fs::read_to_string(out.join("summary.csv")).expect("summary.csv");
    assert!(
        summary
            .lines()
            .any(|l| l.starts_with("matrix,floor,wrk,keep-alive,100B,100,10,1,1,,2,")),
        "the floor's cell over 2 rounds: {summary}"
    );
    if strace {
        // The epoll floor reads and writes once per keep-alive request, and
        // waits less than once: about 2 calls, recvfrom and sendto first.
        let head: Vec<&str> = summary.lines().next().unwrap().split(',').collect();
        let at = |name: &str| head.iter().position(|h| *h == name).expect(name);
        let floor: Vec<&str> = summary
            .lines()
            .find(|l| l.starts_with("matrix,floor,wrk,"))
            .expect("floor row")
            .split(',')
            .collect();
        let per_req: f64 = floor[at("syscalls_per_req")]
            .parse()
            .unwrap_or_else(|_| panic!("syscalls counted for the floor: {summary}"));
        assert!((2.0..3.0).contains(&per_req), "{summary}");
        let top: Vec<(&str, f64)> = floor[at("syscalls_top")]
            .split(';')
            .filter_map(|kv| Some((kv.split_once('=')?.0, kv.split_once('=')?.1.parse().ok()?)))
            .collect();
        let mut first_two: Vec<&str> = top.iter().take(2).map(|(n, _)| *n).collect();
        first_two.sort();
        assert_eq!(first_two, ["recvfrom", "sendto"], "{summary}");
        for (name, v) in &top[..2] {
            assert!((0.9..1.2).contains(v), "{name} {v} per request: {summary}");
        }
        assert!(md.contains("floor syscalls/req"), "{md}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
