//! A real Prometheus scrapes a live server and evaluates every expression
//! from `dashboards/`; promtool lints the exposition and checks and
//! unit-tests the alert rules.

use super::*;

use super::promql::*;

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
        let addr: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
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
        if exited(&mut child) || !http_get(addr, "/-/ready").is_ok_and(|(s, _)| s == 200) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "prometheus did not start on {addr}:\n{}",
                fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        Prometheus { child, addr, dir }
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
