//! Observability against real components: a real Prometheus scrapes the
//! admin endpoint and evaluates every PromQL expression in `dashboards/`,
//! promtool lints the exposition and checks and unit-tests the alert rules,
//! and the per-core counters are exact.
//!
//! - `promql`: the expressions in `dashboards/`, collected and split;
//! - `prometheus`: a real Prometheus and promtool against a live server;
//! - `static_checks`: the dashboard and the alert rules, read as files;
//! - `counters`: the per-core counters, exact.
//!
//! Tests that need an external program print `SKIP: <program> not installed`
//! and pass when it is absent; `.ci/run` installs them.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    allowed_cpus, example_site, get, installed, loud, poll_until, repo, request, Conn, Load,
    Server, TempDir,
};

/// How long a scrape may take to show what the shards counted (they publish
/// every 250 ms; this allows for a loaded machine).
const PUBLISH_WITHIN: Duration = Duration::from_secs(10);
/// Grafana's variables, as the validation substitutes them.
const GRAFANA_VARS: &[(&str, &str)] = &[
    ("${__rate_interval}", "1m"),
    ("$__rate_interval", "1m"),
    ("${__interval}", "15s"),
    ("$__interval", "15s"),
    ("${instance}", ".*"),
    ("$instance", ".*"),
    ("${core}", ".*"),
    ("$core", ".*"),
    ("${site}", ".*"),
    ("$site", ".*"),
];

/// Returns early (passing) with a loud note when `program` is missing.
macro_rules! require {
    ($program:expr) => {
        if !installed($program) {
            loud(&format!("SKIP: {} not installed", $program));
            return;
        }
    };
}

/// One HTTP/1.0 GET (so no chunked bodies), read to EOF: (status, body);
/// also how the tests talk to Prometheus.
use support::metrics::admin_get as http_get;

fn scrape(admin: SocketAddr) -> String {
    let (status, body) = http_get(admin, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "/metrics: {body}");
    body
}

use support::metrics::{parse as parse_exposition, sum, Sample};

/// Scrapes until the sum of `name` over every series is `want`: waits on what
/// the shards have published rather than on a fixed sleep.
#[track_caller]
fn published(admin: SocketAddr, name: &str, want: f64) {
    let mut last = 0.0;
    let ok = poll_until(PUBLISH_WITHIN, || {
        last = sum(&parse_exposition(&scrape(admin)), name, &[]);
        last == want
    });
    assert!(ok, "{name} is {last} after {PUBLISH_WITHIN:?}, want {want}");
}

/// `name` summed per value of the `core` label.
fn per_core(samples: &[Sample], name: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == name) {
        *out.entry(s.labels.get("core").cloned().unwrap_or_default())
            .or_insert(0.0) += s.value;
    }
    out
}

/// Paths of examples/site and the status each must get.
const PATHS: &[(&str, u16)] = &[
    ("/index.html", 200),
    ("/style.css", 200),
    ("/img/logo.png", 200),
    ("/bench/100.txt", 200),
    ("/no-such-file", 404),
];

fn shard_count() -> usize {
    allowed_cpus().len().clamp(1, 2)
}

mod counters;
mod prometheus;
mod promql;
mod static_checks;
