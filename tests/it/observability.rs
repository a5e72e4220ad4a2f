//! Observability against real components: a real Prometheus scrapes the
//! admin endpoint and evaluates every PromQL expression in `dashboards/`,
//! promtool lints the exposition and checks and unit-tests the alert rules,
//! and the per-core counters are exact.
//!
//! Tests that need an external program print `SKIP: <program> not installed`
//! and pass when it is absent; `.ci/run` installs them.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
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
];

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// PromQL from dashboards/
// ---------------------------------------------------------------------------

/// One expression to validate: where it comes from, and the PromQL.
#[derive(Debug, Clone)]
struct Expr {
    origin: String,
    promql: String,
}

fn dashboard() -> Value {
    let path = repo().join("dashboards/shardhttpd.json");
    let text = fs::read_to_string(&path).expect("read dashboards/shardhttpd.json");
    serde_json::from_str(&text).expect("dashboard is valid JSON")
}

/// Every `expr` anywhere in the dashboard (panel targets, rows' nested
/// panels, annotations), labelled with the nearest enclosing title or name.
fn dashboard_exprs(v: &Value, origin: &str, out: &mut Vec<Expr>) {
    match v {
        Value::Object(map) => {
            let here = map
                .get("title")
                .or_else(|| map.get("name"))
                .and_then(Value::as_str)
                .unwrap_or(origin);
            if let Some(Value::String(e)) = map.get("expr") {
                let refid = map.get("refId").and_then(Value::as_str).unwrap_or("");
                out.push(Expr {
                    origin: format!("dashboard panel {here:?} {refid}"),
                    promql: e.clone(),
                });
            }
            for child in map.values() {
                dashboard_exprs(child, here, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| dashboard_exprs(i, origin, out)),
        _ => {}
    }
}

/// Replaces Grafana's variables with what a plain Prometheus accepts.
fn substitute(expr: &str) -> String {
    let mut s = expr.to_owned();
    for (var, value) in GRAFANA_VARS {
        s = s.replace(var, value);
    }
    assert!(
        !s.contains('$'),
        "unknown Grafana variable left in {s:?} (from {expr:?})"
    );
    s
}

/// The rules of alerts.yml: (alert name, expr). The file keeps each `expr:`
/// on one line or in a `|` block below it, so this needs no YAML library;
/// promtool checks that the file is the YAML we think it is.
fn alert_rules() -> Vec<(String, String)> {
    let text = fs::read_to_string(repo().join("dashboards/alerts.yml")).expect("read alerts.yml");
    let lines: Vec<&str> = text.lines().collect();
    let mut rules = Vec::new();
    let mut name = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        i += 1;
        if let Some(n) = trimmed
            .strip_prefix("- alert:")
            .or_else(|| trimmed.strip_prefix("- record:"))
        {
            name = n.trim().to_owned();
        } else if let Some(rest) = trimmed.strip_prefix("expr:") {
            let rest = rest.trim();
            let expr = if matches!(rest, "|" | "|-" | ">" | ">-") {
                let mut block = Vec::new();
                while i < lines.len() {
                    let l = lines[i];
                    let deeper = l.len() - l.trim_start().len() > indent;
                    if !l.trim().is_empty() && !deeper {
                        break;
                    }
                    block.push(l.trim());
                    i += 1;
                }
                block.join("\n").trim().to_owned()
            } else {
                assert!(
                    !rest.starts_with(['"', '\'']),
                    "{name}: keep single-line exprs unquoted so this parser reads them"
                );
                rest.to_owned()
            };
            assert!(!name.is_empty(), "expr before any alert name: {expr}");
            rules.push((name.clone(), expr));
        }
    }
    rules
}

/// Splits `expr` at its top-level binary operators out of `ops` (outside
/// parentheses, brackets, braces and strings), skipping the vector-matching
/// modifiers that follow an operator. Word operators (`and`, `or`,
/// `unless`) match whole words only.
fn split_top_level(expr: &str, ops: &[&str]) -> Vec<String> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let word_at = |i: usize, w: &str| {
        expr[i..].starts_with(w)
            && (i == 0 || !ident(b[i - 1]))
            && b.get(i + w.len()).is_none_or(|&c| !ident(c))
    };
    // Index just past the group opened by `(` at `i`.
    let close = |mut i: usize| {
        let mut depth = 0;
        while i < b.len() {
            match b[i] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut parts = Vec::new();
    let (mut start, mut depth, mut quote, mut i) = (0, 0i32, None::<u8>, 0);
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if c == b'\\' {
                i += 1;
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' | b'\'' | b'`' => quote = Some(c),
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            _ if depth == 0 => {
                let op = ops.iter().find(|op| {
                    if op.as_bytes()[0].is_ascii_alphabetic() {
                        word_at(i, op)
                    } else {
                        expr[i..].starts_with(*op)
                            // `>` must not be the start of `>=`, nor `=` of `==`.
                            && !(op.len() == 1 && b.get(i + 1) == Some(&b'='))
                    }
                });
                if let Some(op) = op {
                    parts.push(expr[start..i].trim().to_owned());
                    let mut j = skip_ws(i + op.len());
                    if word_at(j, "bool") {
                        j = skip_ws(j + 4);
                    }
                    for modifier in ["on", "ignoring", "group_left", "group_right"] {
                        if word_at(j, modifier) {
                            j = skip_ws(j + modifier.len());
                            if b.get(j) == Some(&b'(') {
                                j = skip_ws(close(j));
                            }
                        }
                    }
                    start = j;
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(expr[start..].trim().to_owned());
    parts
}

/// `expr` without parentheses that enclose all of it.
fn strip_outer_parens(expr: &str) -> &str {
    let mut e = expr.trim();
    while e.starts_with('(') && e.ends_with(')') {
        let inner = &e[1..e.len() - 1];
        // The opening paren must close at the very end.
        let mut depth = 0;
        let encloses = e[..e.len() - 1].char_indices().all(|(i, c)| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            i == 0 || depth > 0
        });
        if !encloses {
            break;
        }
        e = inner.trim();
    }
    e
}

/// The operands a condition is built from: `a > 2 and on (x) b unless c`
/// gives `a`, `2`, `b`, `c`. An expression that is not a condition is its
/// own operand.
fn operands(expr: &str) -> Vec<String> {
    let e = strip_outer_parens(expr);
    for ops in [
        &["and", "or", "unless"][..],
        &["==", "!=", ">=", "<=", ">", "<"][..],
    ] {
        let parts = split_top_level(e, ops);
        if parts.len() > 1 {
            return parts.iter().flat_map(|p| operands(p)).collect();
        }
    }
    vec![e.to_owned()]
}

#[test]
fn promql_operands_split_at_top_level_conditions_only() {
    let cases: &[(&str, &[&str])] = &[
        (r#"up{job="x"} == 0"#, &[r#"up{job="x"}"#, "0"]),
        (
            r#"(a{code=~"5..|>"} / b) > 0.05 and on (instance) sum by (i) (c) > 1"#,
            &[r#"a{code=~"5..|>"} / b"#, "0.05", "sum by (i) (c)", "1"],
        ),
        (
            "max_over_time(x[1h]) unless on (instance, core) x and on (instance) up == 1",
            &["max_over_time(x[1h])", "x", "up", "1"],
        ),
        ("rate(a[5m]) >= bool 3", &["rate(a[5m])", "3"]),
        ("(x or y * 0) / z", &["(x or y * 0) / z"]),
        ("operand_unless_total", &["operand_unless_total"]),
        (
            "a * on (x) group_left (y) b > 1",
            &["a * on (x) group_left (y) b", "1"],
        ),
    ];
    for (expr, want) in cases {
        assert_eq!(operands(expr), *want, "operands of {expr:?}");
    }
}

// ---------------------------------------------------------------------------
// Prometheus
// ---------------------------------------------------------------------------

/// A real Prometheus scraping one target every second, with alerts.yml
/// loaded; killed on drop, its log printed if the test is failing.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: shardhttpd\n    static_configs:\n      - targets: ['{target}']\n",
            repo().join("dashboards/alerts.yml").display()
        );
        fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let log_path = dir.path().join("prometheus.log");
        // A port picked by binding :0 can be taken again before Prometheus
        // binds it; retry a few times rather than flake.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let mut child = Command::new("prometheus")
                .arg(format!(
                    "--config.file={}",
                    dir.path().join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(&log_path).unwrap())
                .spawn()
                .expect("spawn prometheus");
            let exited = |c: &mut Child| c.try_wait().ok().flatten().is_some();
            poll_until(Duration::from_secs(20), || {
                exited(&mut child) || http_get(addr, "/-/ready").is_ok_and(|(s, _)| s == 200)
            });
            if !exited(&mut child) && http_get(addr, "/-/ready").is_ok_and(|(s, _)| s == 200) {
                return Prometheus { child, addr, dir };
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!(
                "prometheus did not start on {addr}:\n{}",
                fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        panic!("prometheus failed to start five times");
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn api(&self, path_and_query: &str) -> Result<Value, String> {
        let (status, body) = http_get(self.addr, path_and_query)?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
        if v["status"] != "success" {
            return Err(format!(
                "{}: {}",
                v["errorType"].as_str().unwrap_or("?"),
                v["error"].as_str().unwrap_or(&body)
            ));
        }
        Ok(v["data"].clone())
    }

    /// An instant query: its result as a list (a scalar or string result is
    /// one element).
    fn query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(promql)))?;
        Ok(match &data["result"] {
            Value::Array(items) => items.clone(),
            Value::Null => Vec::new(),
            other => vec![other.clone()],
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("---- prometheus log ----\n{}\n---- end ----", self.log());
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Values of `label` across a query's result.
fn label_set(result: &[Value], label: &str) -> BTreeSet<String> {
    result
        .iter()
        .filter_map(|r| r["metric"][label].as_str().map(str::to_owned))
        .collect()
}

/// Metric names an expression refers to (`shardhttpd_*`, `process_*`).
fn metric_names(promql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let b = promql.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut i = 0;
    while i < b.len() {
        if ident(b[i]) && (i == 0 || !ident(b[i - 1]) && b[i - 1] != b'$') {
            let end = (i..b.len()).find(|&j| !ident(b[j])).unwrap_or(b.len());
            let word = &promql[i..end];
            if word.starts_with("shardhttpd_") || word.starts_with("process_") {
                names.insert(word.to_owned());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

/// Metrics only a server with `tls_listen` exports.
const TLS_ONLY: &[&str] = &[
    "shardhttpd_tls_certificate_expiry_timestamp_seconds",
    "shardhttpd_tls_certificate_reloads_total",
    "shardhttpd_tls_ticket_key_changed_timestamp_seconds",
    "shardhttpd_tls_ticket_key_rotations_total",
    // With an ACME-issued certificate only.
    "shardhttpd_acme_certificate_expiry_seconds",
];

/// `promql` names a metric only a TLS server exports.
fn tls_only(promql: &str) -> bool {
    TLS_ONLY.iter().any(|m| promql.contains(m))
}

/// Evaluates `e` until it returns data or `deadline` passes. A query error
/// fails at once. A condition with no data (an alert that is not firing)
/// passes when each of its operands returns data.
fn check_returns_data(prom: &Prometheus, e: &Expr, deadline: Instant) -> Result<(), String> {
    let promql = substitute(&e.promql);
    let ops = operands(&promql);
    let mut todo: Vec<String> = Vec::new();
    loop {
        let result = prom
            .query(&promql)
            .map_err(|err| format!("{}: query error {err}\n  {promql}", e.origin))?;
        if !result.is_empty() {
            return Ok(());
        }
        if ops.len() > 1 {
            todo = ops
                .iter()
                .filter(|o| o.parse::<f64>().is_err())
                .filter(|o| !matches!(prom.query(o), Ok(r) if !r.is_empty()))
                .cloned()
                .collect();
            if let Some(bad) = todo.iter().find_map(|o| prom.query(o).err()) {
                return Err(format!(
                    "{}: operand query error {bad}\n  {promql}",
                    e.origin
                ));
            }
            if todo.is_empty() {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        thread::sleep(Duration::from_millis(500));
    }
    Err(format!(
        "{}: no data\n  {promql}\n  empty operands: {todo:?}",
        e.origin
    ))
}

/// A real Prometheus scrapes the admin endpoint once a second while the
/// server serves load; then `up` is 1, every shard has series, both alert
/// rule files load healthy, and every expression of the dashboard (panels,
/// annotations, variables) and of the alert rules evaluates and returns data.
///
/// Alert expressions are conditions and return nothing while healthy; for
/// those, each operand of the condition (`lhs > 0.05 and on (i) rhs > 1`
/// gives `lhs`, `rhs`) must return data instead. The 5xx ratio is written so
/// it is 0, not absent, without 5xx responses.
#[test]
fn prometheus_scrapes_every_shard_and_every_dashboard_and_alert_expression_has_data() {
    require!("prometheus");
    let shards = shard_count();
    let server = Server::start(&example_site(), &["--cores", &shards.to_string()]);
    let admin = server.admin_addr();
    let load = Load::start(server.addr(), 4, PATHS);
    let prom = Prometheus::start(admin);
    let started = Instant::now();

    // Scraped, and up.
    let mut up = Vec::new();
    let scraped = poll_until(Duration::from_secs(20), || {
        up = prom.query(r#"up{job="shardhttpd"}"#).unwrap_or_default();
        !up.is_empty()
    });
    assert!(scraped, "target never scraped\n{}", prom.log());
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0]["value"][1], "1", "up: {up:?}");
    assert_eq!(
        up[0]["metric"]["instance"].as_str(),
        Some(admin.to_string().as_str())
    );

    // Series for every shard, in every per-core family.
    let cores: BTreeSet<String> = (0..shards).map(|c| c.to_string()).collect();
    let shard_count_query =
        r#"count(count by (core) (shardhttpd_http_requests_total{job="shardhttpd"}))"#;
    let n = prom.query(shard_count_query).unwrap();
    assert_eq!(n[0]["value"][1], shards.to_string(), "{shard_count_query}");
    for family in [
        "shardhttpd_http_requests_total",
        "shardhttpd_http_request_duration_seconds_bucket",
        "shardhttpd_http_response_bytes_total",
        "shardhttpd_connections_accepted_total",
        "shardhttpd_connections_active",
        "shardhttpd_connections_closed_total",
        "shardhttpd_shard_info",
    ] {
        let r = prom.query(&format!("count by (core) ({family})")).unwrap();
        assert_eq!(label_set(&r, "core"), cores, "{family}: {r:?}");
    }
    let info = prom.query("shardhttpd_shard_info").unwrap();
    assert!(
        info.iter().all(|r| r["metric"]["cpu"].is_string()),
        "{info:?}"
    );

    // Every dashboard and alert expression.
    let dash = dashboard();
    let mut exprs = Vec::new();
    dashboard_exprs(&dash, "dashboard", &mut exprs);
    assert!(exprs.len() >= 20, "only {} dashboard exprs", exprs.len());
    exprs.retain(|e| !tls_only(&e.promql));
    let rules = alert_rules();
    assert_eq!(rules.len(), 13, "{rules:?}");
    // Certificate metrics exist only with a TLS listener: tests/tls.rs
    // checks those expressions against a TLS server.
    let rules: Vec<_> = rules.into_iter().filter(|(_, e)| !tls_only(e)).collect();
    exprs.extend(rules.iter().map(|(name, e)| Expr {
        origin: format!("alert {name}"),
        promql: e.clone(),
    }));
    let deadline = Instant::now() + Duration::from_secs(15);
    let failures: Vec<String> = exprs
        .iter()
        .filter_map(|e| check_returns_data(&prom, e, deadline).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} expressions failed:\n{}",
        failures.len(),
        exprs.len(),
        failures.join("\n")
    );

    // Both shards served traffic, seen through Prometheus.
    let r = prom
        .query(r#"sum by (core) (shardhttpd_http_requests_total{job="shardhttpd"}) > 0"#)
        .unwrap();
    assert_eq!(label_set(&r, "core"), cores, "cores with requests: {r:?}");

    // The template variables resolve: label_values(selector, label).
    for var in dash["templating"]["list"].as_array().unwrap() {
        let Some(q) = var["query"]["query"].as_str() else {
            continue;
        };
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {q:?} is not label_values(...)"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let r = prom.query(&substitute(selector)).unwrap();
        let values = label_set(&r, label.trim());
        assert!(
            !values.is_empty(),
            "variable {}: {q} has no values",
            var["name"]
        );
        if var["name"] == "core" {
            assert_eq!(values, cores, "core variable");
        }
    }

    // The alert rules loaded and evaluate healthy.
    let mut groups = Value::Null;
    let healthy = poll_until(Duration::from_secs(10), || {
        groups = prom.api("/api/v1/rules").unwrap_or_default()["groups"].clone();
        let rules: Vec<&Value> = groups
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        rules.len() == 13 && rules.iter().all(|r| r["health"] == "ok")
    });
    assert!(healthy, "rules not all loaded and healthy: {groups:#}");
    // Under healthy load the instance-down and rebuild alerts stay quiet.
    let alerts = prom.api("/api/v1/alerts").unwrap();
    let names: BTreeSet<&str> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["labels"]["alertname"].as_str())
        .collect();
    for quiet in [
        "ShardhttpdInstanceDown",
        "ShardhttpdSnapshotRebuildFailed",
        "ShardhttpdShardMissing",
        "ShardhttpdCertificateExpiringSoon",
        "ShardhttpdHighLatencyP99",
        "ShardhttpdAccessLogDropping",
        "ShardhttpdConnectionCapReached",
        "ShardhttpdUpgradeFailed",
        "ShardhttpdCertificateReloadFailed",
        "ShardhttpdTlsHandshakeFailures",
    ] {
        assert!(!names.contains(quiet), "{quiet} active: {alerts:#}");
    }

    let sent = load.stop();
    assert!(sent > 0);
    eprintln!(
        "prometheus check: {} expressions, {sent} requests, {:.1} s",
        exprs.len(),
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// promtool
// ---------------------------------------------------------------------------

/// Runs promtool with `args`, feeding `stdin`; (success, stdout + stderr).
fn promtool(args: &[&str], stdin: &[u8], dir: &Path) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().expect("promtool output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The exposition, with every kind of series present (404s, histogram
/// observations, closed connections), passes `promtool check metrics` with
/// no lint findings at all.
#[test]
fn promtool_check_metrics_finds_nothing_in_the_exposition() {
    require!("promtool");
    let server = Server::start(&example_site(), &["--cores", "1"]);
    let admin = server.admin_addr();
    for (path, want) in PATHS {
        assert_eq!(server.get(path).status, *want, "GET {path}");
    }
    published(admin, "shardhttpd_http_requests_total", PATHS.len() as f64);
    let body = scrape(admin);
    assert!(body.contains(r#"code="404""#), "{body}");
    let (ok, out) = promtool(&["check", "metrics"], body.as_bytes(), &repo());
    assert!(
        ok,
        "promtool check metrics failed:\n{out}\n---- exposition ----\n{body}"
    );
    assert!(out.trim().is_empty(), "promtool check metrics lint:\n{out}");
}

/// `promtool check rules` accepts alerts.yml, and its unit tests
/// (alerts.test.yml: each alert fires for the bad instance and stays quiet
/// for the good one) pass.
#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    require!("promtool");
    let dir = repo().join("dashboards");
    let (ok, out) = promtool(&["check", "rules", "alerts.yml"], b"", &dir);
    assert!(ok, "promtool check rules:\n{out}");
    assert!(out.contains("SUCCESS: 13 rules found"), "{out}");
    // Every alert has a unit test: issue 27 asks each to be covered.
    let tests = fs::read_to_string(dir.join("alerts.test.yml")).unwrap();
    for (name, _) in alert_rules() {
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "alerts.test.yml has no case for {name}"
        );
    }
    let (ok, out) = promtool(&["test", "rules", "alerts.test.yml"], b"", &dir);
    assert!(ok, "promtool test rules:\n{out}");
}

// ---------------------------------------------------------------------------
// The dashboard and rules, statically
// ---------------------------------------------------------------------------

/// The dashboard is provisionable (uid, variables, data source through the
/// variable), every panel is well-formed, rates use `$__rate_interval`, it
/// covers every panel the issue asks for, and every metric it names exists
/// in a live server's /metrics (a typo would show as an empty panel).
#[test]
fn dashboard_is_provisionable_and_names_only_exported_metrics() {
    let dash = dashboard();
    assert_eq!(dash["uid"], "shardhttpd");
    assert!(dash["schemaVersion"].as_u64().unwrap() >= 36);
    let vars: BTreeMap<&str, &Value> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    assert_eq!(
        vars.keys().copied().collect::<Vec<_>>(),
        ["core", "datasource", "instance"]
    );
    assert_eq!(vars["datasource"]["type"], "datasource");
    assert_eq!(vars["datasource"]["query"], "prometheus");
    assert_eq!(
        vars["instance"]["query"]["query"],
        "label_values(shardhttpd_build_info, instance)"
    );
    assert_eq!(
        vars["core"]["query"]["query"],
        r#"label_values(shardhttpd_shard_info{instance=~"$instance"}, core)"#
    );
    for v in ["instance", "core"] {
        assert_eq!(vars[v]["multi"], true, "{v}");
        assert_eq!(vars[v]["includeAll"], true, "{v}");
        assert_eq!(vars[v]["datasource"]["uid"], "${datasource}", "{v}");
    }

    let mut ids = BTreeSet::new();
    let mut panels = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        panels.push(p);
        panels.extend(p["panels"].as_array().into_iter().flatten());
    }
    let mut stacked = false;
    for p in &panels {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        let g = &p["gridPos"];
        assert!(
            g["w"].as_u64().unwrap() + g["x"].as_u64().unwrap() <= 24,
            "{title}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert!(["timeseries", "stat"].contains(&p["type"].as_str().unwrap()));
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no targets");
        let refids: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refids.len(), targets.len(), "{title}: duplicate refId");
        for t in targets {
            let e = t["expr"].as_str().unwrap();
            for window in e.split('[').skip(1) {
                let window = window.split(']').next().unwrap();
                assert_eq!(
                    window, "$__rate_interval",
                    "{title}: window [{window}] in {e}"
                );
            }
        }
        stacked |= p["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal";
    }
    assert!(stacked, "no stacked panel");

    let mut exprs = Vec::new();
    dashboard_exprs(&dash, "dashboard", &mut exprs);
    let all = exprs
        .iter()
        .map(|e| e.promql.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for needle in [
        "rate(shardhttpd_http_requests_total",
        "sum by (instance, core) (rate(shardhttpd_http_requests_total",
        "max by (instance) (",
        "min by (instance) (",
        "histogram_quantile(0.5, sum by (le) (rate(shardhttpd_http_request_duration_seconds_bucket",
        "histogram_quantile(0.9, sum by (le) (rate(shardhttpd_http_request_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(shardhttpd_http_request_duration_seconds_bucket",
        "sum by (code)",
        "shardhttpd_http_response_bytes_total",
        "shardhttpd_connections_active",
        "sum by (reason) (rate(shardhttpd_connections_closed_total",
        "shardhttpd_snapshot_generation",
        "shardhttpd_snapshot_rebuilds_total",
        "shardhttpd_snapshot_rebuild_duration_seconds",
        "sum by (instance, encoding) (shardhttpd_snapshot_bytes",
        "shardhttpd_tls_certificate_expiry_timestamp_seconds",
        "shardhttpd_access_log_dropped_total",
    ] {
        assert!(all.contains(needle), "no panel uses {needle:?}");
    }
    let all = exprs
        .iter()
        .map(|e| e.promql.as_str())
        .filter(|e| !tls_only(e))
        .collect::<Vec<_>>()
        .join("\n");

    // Every metric named exists in a live exposition.
    let server = Server::start(&example_site(), &["--cores", "1"]);
    let exported: BTreeSet<String> = parse_exposition(&scrape(server.admin_addr()))
        .into_iter()
        .map(|s| s.name)
        .collect();
    let (_, rules): (Vec<_>, Vec<_>) = alert_rules()
        .into_iter()
        .filter(|(_, e)| !tls_only(e))
        .unzip();
    for name in metric_names(&all).union(&metric_names(&rules.join("\n"))) {
        if TLS_ONLY.contains(&name.as_str()) {
            continue;
        }
        assert!(
            exported.contains(name),
            "dashboards/ use {name}, which /metrics does not export"
        );
    }
}

/// Every alert has a `for`, a severity and both annotations, and the
/// provisioning examples point at the dashboard directory layout.
#[test]
fn alert_rules_have_for_severity_summary_and_description() {
    let text = fs::read_to_string(repo().join("dashboards/alerts.yml")).unwrap();
    let blocks: Vec<&str> = text.split("- alert:").skip(1).collect();
    assert_eq!(blocks.len(), 13);
    for block in blocks {
        let name = block.lines().next().unwrap().trim();
        for key in ["expr:", "for:", "severity:", "summary:", "description:"] {
            assert!(
                block.lines().any(|l| l.trim_start().starts_with(key)),
                "{name}: no {key}"
            );
        }
    }
    let names: BTreeSet<String> = alert_rules().into_iter().map(|(n, _)| n).collect();
    for want in [
        "ShardhttpdInstanceDown",
        "ShardhttpdHigh5xxRatio",
        "ShardhttpdShardImbalance",
        "ShardhttpdSnapshotRebuildFailed",
        "ShardhttpdShardMissing",
        "ShardhttpdCertificateExpiringSoon",
        "ShardhttpdHighLatencyP99",
        "ShardhttpdAccessLogDropping",
        "ShardhttpdConnectionCapReached",
        "ShardhttpdUpgradeFailed",
        "ShardhttpdCertificateReloadFailed",
        "ShardhttpdTlsHandshakeFailures",
    ] {
        assert!(names.contains(want), "no alert {want}");
    }
    for file in ["datasource.yml", "dashboards.yml"] {
        let text = fs::read_to_string(repo().join("dashboards/provisioning").join(file)).unwrap();
        assert!(text.contains("apiVersion: 1"), "{file}");
    }
}

// ---------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------

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
