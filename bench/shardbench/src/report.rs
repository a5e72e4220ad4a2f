//! Results: one [`Row`] per measured cell, appended to `results.csv` as it
//! finishes (so an interrupted run keeps its cells), and the Markdown tables
//! of `results.md` built from all rows at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::load::Outcome;

/// The CSV columns, in order; `docs/benchmarks.md` documents each.
pub const COLUMNS: [&str; 24] = [
    "section",
    "server",
    "tool",
    "mode",
    "size",
    "size_bytes",
    "concurrency",
    "pipeline_depth",
    "shards",
    "steer",
    "duration_s",
    "requests",
    "rps",
    "latency_p50_ms",
    "latency_p99_ms",
    "errors",
    "server_cpu_us_per_req",
    "server_cpu_busy_pct",
    "client_cpu_busy_pct",
    "limited_by",
    "per_core_requests",
    "balance_max_min",
    "core_shares_pct",
    "note",
];

/// One measured cell.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// `matrix` or `sweep`.
    pub section: String,
    pub server: String,
    pub tool: String,
    pub mode: String,
    pub size: String,
    pub size_bytes: usize,
    pub concurrency: usize,
    pub pipeline_depth: usize,
    pub shards: usize,
    /// `hash` or `cpu` for shardhttpd; empty for the others.
    pub steer: String,
    pub duration_s: f64,
    pub outcome: Outcome,
    pub server_cpu_us_per_req: f64,
    pub server_cpu_busy_pct: f64,
    pub client_cpu_busy_pct: f64,
    /// Requests per shard from shardhttpd's /metrics (sweep rows).
    pub per_core: Vec<u64>,
    pub note: String,
}

impl Row {
    /// What set the pace: a CPU near saturation, else the round trips.
    pub fn limited_by(&self) -> &'static str {
        if self.client_cpu_busy_pct >= 90.0 {
            "client CPU"
        } else if self.server_cpu_busy_pct >= 90.0 {
            "server CPU"
        } else {
            "latency (neither CPU saturated)"
        }
    }

    /// max/min of the per-core requests; infinite when a shard got none.
    pub fn balance(&self) -> Option<f64> {
        let max = *self.per_core.iter().max()?;
        let min = *self.per_core.iter().min()?;
        Some(if min == 0 {
            f64::INFINITY
        } else {
            max as f64 / min as f64
        })
    }

    pub fn shares(&self) -> Vec<f64> {
        let total: u64 = self.per_core.iter().sum();
        self.per_core
            .iter()
            .map(|&n| {
                if total == 0 {
                    0.0
                } else {
                    100.0 * n as f64 / total as f64
                }
            })
            .collect()
    }

    fn fields(&self) -> Vec<String> {
        let join = |v: Vec<String>| v.join(";");
        vec![
            self.section.clone(),
            self.server.clone(),
            self.tool.clone(),
            self.mode.clone(),
            self.size.clone(),
            self.size_bytes.to_string(),
            self.concurrency.to_string(),
            self.pipeline_depth.to_string(),
            self.shards.to_string(),
            self.steer.clone(),
            format!("{:.2}", self.duration_s),
            self.outcome.requests.to_string(),
            format!("{:.0}", self.outcome.rps),
            format!("{:.3}", self.outcome.p50_ms),
            ms(self.outcome.p99_ms, ""),
            self.outcome.errors.to_string(),
            format!("{:.2}", self.server_cpu_us_per_req),
            format!("{:.0}", self.server_cpu_busy_pct),
            format!("{:.0}", self.client_cpu_busy_pct),
            self.limited_by().to_owned(),
            join(self.per_core.iter().map(u64::to_string).collect()),
            self.balance()
                .map_or_else(String::new, |b| format!("{b:.2}")),
            join(self.shares().iter().map(|s| format!("{s:.1}")).collect()),
            self.note.clone(),
        ]
    }
}

/// `results.csv`, written a row at a time.
pub struct Csv {
    file: fs::File,
}

impl Csv {
    pub fn create(path: &Path) -> io::Result<Csv> {
        let mut file = fs::File::create(path)?;
        writeln!(file, "{}", COLUMNS.join(","))?;
        Ok(Csv { file })
    }

    pub fn append(&mut self, row: &Row) -> io::Result<()> {
        let line: Vec<String> = row.fields().iter().map(|f| quote(f)).collect();
        writeln!(self.file, "{}", line.join(","))?;
        self.file.flush()
    }
}

/// RFC 4180 quoting where needed.
fn quote(f: &str) -> String {
    if f.contains([',', '"', '\n']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_owned()
    }
}

/// Milliseconds with three decimals, or `n/a`/empty when not measured.
pub fn ms(v: f64, unit: &str) -> String {
    if v.is_nan() {
        if unit.is_empty() {
            String::new()
        } else {
            "p99 n/a".into()
        }
    } else {
        let places = if unit.is_empty() { 3 } else { 2 };
        format!("{v:.places$}{unit}")
    }
}

fn rps(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1000.0 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The Markdown tables: one per (mode, size, tool) with a column per server,
/// then the shard sweep.
pub fn markdown(rows: &[Row]) -> String {
    let mut md = String::new();
    let matrix: Vec<&Row> = rows.iter().filter(|r| r.section == "matrix").collect();
    let mut servers: Vec<String> = Vec::new();
    for r in &matrix {
        if !servers.contains(&r.server) {
            servers.push(r.server.clone());
        }
    }
    let mut groups: Vec<(String, String, String)> = Vec::new();
    for r in &matrix {
        let key = (r.mode.clone(), r.size.clone(), r.tool.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let _ = writeln!(
        md,
        "Each cell: requests/s · server CPU µs per request · p99 latency; \
         `!` marks errors, `ᶜ` a saturated client CPU (then compare µs/req, not requests/s). \
         floor = the fixed-response epoll responder; ×floor = shardhttpd's µs/req over the floor's.\n"
    );
    for (mode, size, tool) in &groups {
        let cells: Vec<&&Row> = matrix
            .iter()
            .filter(|r| &r.mode == mode && &r.size == size && &r.tool == tool)
            .collect();
        let present: Vec<&String> = servers
            .iter()
            .filter(|s| cells.iter().any(|r| &&r.server == s))
            .collect();
        let ratio =
            present.iter().any(|s| *s == "floor") && present.iter().any(|s| *s == "shardhttpd");
        let _ = writeln!(md, "### {mode}, {size} ({tool})\n");
        let mut head = String::from("| concurrency |");
        let mut rule = String::from("|---:|");
        for s in &present {
            let _ = write!(head, " {s} |");
            rule.push_str("---|");
        }
        if ratio {
            head.push_str(" ×floor |");
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        let concs: BTreeSet<usize> = cells.iter().map(|r| r.concurrency).collect();
        for c in concs {
            let mut line = format!("| {c} |");
            let mut us: BTreeMap<&str, f64> = BTreeMap::new();
            for s in &present {
                match cells.iter().find(|r| &&r.server == s && r.concurrency == c) {
                    Some(r) => {
                        us.insert(s.as_str(), r.server_cpu_us_per_req);
                        let _ = write!(
                            line,
                            " {} · {:.2} µs · {}{}{} |",
                            rps(r.outcome.rps),
                            r.server_cpu_us_per_req,
                            ms(r.outcome.p99_ms, " ms"),
                            if r.outcome.errors > 0 { " !" } else { "" },
                            if r.client_cpu_busy_pct >= 90.0 {
                                " ᶜ"
                            } else {
                                ""
                            },
                        );
                    }
                    None => line.push_str(" |"),
                }
            }
            if ratio {
                match (us.get("shardhttpd"), us.get("floor")) {
                    (Some(a), Some(b)) if *b > 0.0 => {
                        let _ = write!(line, " {:.2} |", a / b);
                    }
                    _ => line.push_str(" |"),
                }
            }
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }
    let sweep: Vec<&Row> = rows.iter().filter(|r| r.section == "sweep").collect();
    if !sweep.is_empty() {
        let _ = writeln!(
            md,
            "### Shard sweep: shardhttpd, keep-alive, {} B, c={}\n",
            sweep[0].size_bytes, sweep[0].concurrency
        );
        let _ = writeln!(
            md,
            "| shards | steer | requests/s | server µs/req | per-core requests | balance max/min | shares % | client CPU busy % | limited by |"
        );
        let _ = writeln!(md, "|---:|---|---:|---:|---|---:|---|---:|---|");
        for r in sweep {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {} | {} | {} | {:.0} | {} |",
                r.shards,
                r.steer,
                rps(r.outcome.rps),
                r.server_cpu_us_per_req,
                r.per_core
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" / "),
                r.balance()
                    .map_or_else(|| "n/a".into(), |b| format!("{b:.2}")),
                r.shares()
                    .iter()
                    .map(|s| format!("{s:.0}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                r.client_cpu_busy_pct,
                r.limited_by(),
            );
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_row_has_every_column() {
        let r = Row {
            section: "sweep".into(),
            per_core: vec![30, 10],
            note: "a, \"b\"".into(),
            ..Row::default()
        };
        assert_eq!(r.fields().len(), COLUMNS.len());
        assert_eq!(r.balance(), Some(3.0));
        assert_eq!(r.shares(), vec![75.0, 25.0]);
        assert_eq!(quote(&r.note), "\"a, \"\"b\"\"\"");
    }
}
