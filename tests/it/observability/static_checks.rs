//! The dashboard and the alert rules, read as files: provisionable, well
//! formed, and naming only metrics a live server exports.

use super::promql::*;
use super::*;

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
        ["core", "datasource", "instance", "site"]
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
    assert_eq!(
        vars["site"]["query"]["query"],
        r#"label_values(shardhttpd_site_requests_total{instance=~"$instance"}, site)"#
    );
    for v in ["instance", "core", "site"] {
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
        "sum by (site) (rate(shardhttpd_site_requests_total",
        "shardhttpd_site_snapshot_generation",
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
