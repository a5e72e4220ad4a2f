//! The per-core counters are exact: N requests count N, split by code and
//! by core, and every counter README lists exists at zero from the start.

use super::*;

/// After exactly N requests (keep-alive and fresh connections, some 404s)
/// and one publish interval, the sum over cores of requests_total has grown
/// by exactly N, and by the right amount per status code. Admin requests
/// (the scrapes themselves) are not counted.
#[test]
fn requests_total_grows_by_exactly_n_after_a_publish_interval() {
    const KEEPALIVE_CONNS: usize = 4;
    const PER_CONN: usize = 200;
    const FRESH: usize = 200;
    const N: usize = KEEPALIVE_CONNS * PER_CONN + FRESH;
    let server = Server::start(&example_site(), &["--cores", &shard_count().to_string()]);
    let admin = server.admin_addr();
    // Every shard has published (its shard_info series is there).
    published(admin, "shardhttpd_shard_info", shard_count() as f64);
    let before = parse_exposition(&scrape(admin));
    // A second scrape must not change anything: the admin thread's own
    // requests are not counted.
    let again = parse_exposition(&scrape(admin));
    let total = |s: &[Sample]| sum(s, "shardhttpd_http_requests_total", &[]);
    assert_eq!(total(&before), total(&again), "scrapes counted as requests");

    let addr = server.addr();
    let senders: Vec<_> = (0..KEEPALIVE_CONNS)
        .map(|t| {
            thread::spawn(move || {
                let mut conn = Conn::connect(addr);
                let mut not_found = 0;
                for i in 0..PER_CONN {
                    let (path, want) = PATHS[(t + i) % PATHS.len()];
                    assert_eq!(conn.roundtrip(&get(path)).status, want, "GET {path}");
                    not_found += usize::from(want == 404);
                }
                not_found
            })
        })
        .collect();
    let mut not_found = 0;
    for i in 0..FRESH {
        let (path, want) = PATHS[i % PATHS.len()];
        let r = server.send(&request("GET", path, &[("Connection", "close")]));
        assert_eq!(r.status, want, "GET {path}");
        not_found += usize::from(want == 404);
    }
    not_found += senders
        .into_iter()
        .map(|t| t.join().unwrap())
        .sum::<usize>();

    published(
        admin,
        "shardhttpd_http_requests_total",
        total(&before) + N as f64,
    );
    let after = parse_exposition(&scrape(admin));
    assert_eq!(
        total(&after) - total(&before),
        N as f64,
        "requests_total per core before {:?} after {:?}",
        per_core(&before, "shardhttpd_http_requests_total"),
        per_core(&after, "shardhttpd_http_requests_total")
    );
    let code = |s: &[Sample], c: &str| sum(s, "shardhttpd_http_requests_total", &[("code", c)]);
    assert_eq!(code(&after, "404") - code(&before, "404"), not_found as f64);
    assert_eq!(
        code(&after, "200") - code(&before, "200"),
        (N - not_found) as f64
    );
    let hist = |s: &[Sample]| sum(s, "shardhttpd_http_request_duration_seconds_count", &[]);
    assert_eq!(
        hist(&after) - hist(&before),
        N as f64,
        "one latency observation per request"
    );
    let inf = |s: &[Sample]| {
        sum(
            s,
            "shardhttpd_http_request_duration_seconds_bucket",
            &[("le", "+Inf")],
        )
    };
    assert_eq!(inf(&after), hist(&after), "+Inf bucket equals _count");

    // status.json agrees with /metrics.
    let (_, body) = http_get(admin, "/status.json").unwrap();
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status["totals"]["requests"].as_f64(),
        Some(total(&after)),
        "{status:#}"
    );
}

/// With two shards, a client opening 200 connections (one request each)
/// reaches both, and the per-core accepted counters add up to exactly 200.
#[test]
fn two_cores_both_count_connections_from_a_client_opening_many() {
    if allowed_cpus().len() < 2 {
        loud("SKIP: fewer than 2 CPUs allowed; --cores 2 needs two");
        return;
    }
    const CONNS: usize = 200;
    let server = Server::start(&example_site(), &["--cores", "2"]);
    let admin = server.admin_addr();
    for _ in 0..CONNS {
        let r = server.send(&request(
            "GET",
            "/bench/100.txt",
            &[("Connection", "close")],
        ));
        assert_eq!(r.status, 200);
    }
    published(admin, "shardhttpd_connections_closed_total", CONNS as f64);
    let samples = parse_exposition(&scrape(admin));
    let accepted = per_core(&samples, "shardhttpd_connections_accepted_total");
    let requests = per_core(&samples, "shardhttpd_http_requests_total");
    assert_eq!(
        accepted.keys().collect::<Vec<_>>(),
        ["0", "1"],
        "{accepted:?}"
    );
    assert!(
        accepted.values().all(|&n| n > 0.0),
        "a core accepted nothing: {accepted:?}"
    );
    assert_eq!(accepted.values().sum::<f64>(), CONNS as f64, "{accepted:?}");
    assert_eq!(requests.values().sum::<f64>(), CONNS as f64, "{requests:?}");
    for core in ["0", "1"] {
        assert_eq!(
            requests[core], accepted[core],
            "core {core}: one request per connection"
        );
    }
    let active = sum(&samples, "shardhttpd_connections_active", &[]);
    assert_eq!(active, 0.0, "all connections closed");
    let closed = sum(&samples, "shardhttpd_connections_closed_total", &[]);
    assert_eq!(closed, CONNS as f64, "every connection closed once");
    let info = per_core(&samples, "shardhttpd_shard_info");
    assert_eq!(info.len(), 2, "{info:?}");
}

/// `--metrics false` counts no requests, however much traffic there is.
#[test]
fn metrics_off_counts_no_requests() {
    let server = Server::start(&example_site(), &["--cores", "1", "--metrics", "false"]);
    let admin = server.admin_addr();
    let mut conn = server.connect();
    for (path, want) in PATHS.iter().cycle().take(100) {
        assert_eq!(conn.roundtrip(&get(path)).status, *want, "GET {path}");
    }
    for _ in 0..20 {
        server.get("/index.html");
    }
    drop(conn);
    // Connections are counted with metrics off too: once all 21 have been
    // published as closed, so would any request counted with them.
    published(admin, "shardhttpd_connections_closed_total", 21.0);
    let samples = parse_exposition(&scrape(admin));
    for name in [
        "shardhttpd_http_requests_total",
        "shardhttpd_http_request_duration_seconds_count",
        "shardhttpd_http_response_bytes_total",
    ] {
        assert_eq!(sum(&samples, name, &[]), 0.0, "{name} with --metrics false");
    }
    let (_, body) = http_get(admin, "/status.json").unwrap();
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["metrics_enabled"], false);
    assert_eq!(status["totals"]["requests"], 0);
}

/// Issue 27: every counter README's Metrics table lists exists from the
/// first scrape, at 0, with each label value it documents, as Prometheus
/// practice asks (a counter that appears with its first event hides that
/// event from `rate()` and `increase()`). A TLS server, so the TLS families
/// are there too.
#[test]
fn every_counter_readme_lists_exists_at_zero_from_the_start() {
    let readme = fs::read_to_string(repo().join("README.md")).unwrap();
    let table = readme
        .split("## Metrics")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Metrics section");
    // `| name | counter | labels (values, …) |`
    let mut counters: Vec<(String, Vec<String>)> = Vec::new();
    for row in table.lines().filter(|l| l.starts_with("| `shardhttpd_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells[2] != "counter" {
            continue;
        }
        let name = cells[1].trim_matches('`').to_owned();
        // Documented label values: `result` (success, failure) and the like.
        let values: Vec<String> = cells[3]
            .split_once('(')
            .filter(|_| cells[3].starts_with('`'))
            .and_then(|(_, rest)| rest.split(')').next())
            .map(|list| {
                list.split(',')
                    .map(|v| v.split(':').next().unwrap().trim().to_owned())
                    .filter(|v| v.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                    .collect()
            })
            .unwrap_or_default();
        counters.push((name, values));
    }
    assert!(counters.len() >= 9, "{counters:?}");

    let site = support::Site::new("counters-at-zero");
    let ca = support::tls::Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = support::tls::TlsServer::start(&site.root, &ca, &leaf, &["--cores", "2"]);
    let samples = support::metrics::parse(&scrape(server.server.admin_addr()));
    for (name, values) in &counters {
        let series: Vec<&Sample> = samples.iter().filter(|s| &s.name == name).collect();
        assert!(!series.is_empty(), "{name} is not exported at start");
        for s in &series {
            assert_eq!(s.value, 0.0, "{name}{:?} is not 0 at start", s.labels);
        }
        for v in values {
            assert!(
                series.iter().any(|s| s.labels.values().any(|l| l == v)),
                "{name}: no series with label value {v:?} at start: {series:?}"
            );
        }
    }
}
