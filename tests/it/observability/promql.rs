//! The PromQL in `dashboards/`: every panel's and every alert's expression,
//! with Grafana's variables substituted, split into the operands that must
//! each return data.

use super::*;

/// One expression to validate: where it comes from, and the PromQL.
#[derive(Debug, Clone)]
pub(super) struct Expr {
    pub(super) origin: String,
    pub(super) promql: String,
}

pub(super) fn dashboard() -> Value {
    let path = repo().join("dashboards/shardhttpd.json");
    let text = fs::read_to_string(&path).expect("read dashboards/shardhttpd.json");
    serde_json::from_str(&text).expect("dashboard is valid JSON")
}

/// Every `expr` anywhere in the dashboard (panel targets, rows' nested
/// panels, annotations), labelled with the nearest enclosing title or name.
pub(super) fn dashboard_exprs(v: &Value, origin: &str, out: &mut Vec<Expr>) {
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
pub(super) fn substitute(expr: &str) -> String {
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
pub(super) fn alert_rules() -> Vec<(String, String)> {
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
pub(super) fn split_top_level(expr: &str, ops: &[&str]) -> Vec<String> {
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
pub(super) fn strip_outer_parens(expr: &str) -> &str {
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
pub(super) fn operands(expr: &str) -> Vec<String> {
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

/// Metric names an expression refers to (`shardhttpd_*`, `process_*`).
pub(super) fn metric_names(promql: &str) -> BTreeSet<String> {
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
pub(super) const TLS_ONLY: &[&str] = &[
    "shardhttpd_tls_certificate_expiry_timestamp_seconds",
    "shardhttpd_tls_certificate_reloads_total",
    "shardhttpd_tls_ticket_key_changed_timestamp_seconds",
    "shardhttpd_tls_ticket_key_rotations_total",
    // With an ACME-issued certificate only.
    "shardhttpd_acme_certificate_expiry_seconds",
];

/// `promql` names a metric only a TLS server exports.
pub(super) fn tls_only(promql: &str) -> bool {
    TLS_ONLY.iter().any(|m| promql.contains(m))
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
