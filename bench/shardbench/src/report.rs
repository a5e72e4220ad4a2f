//! Results: one [`Row`] per measured cell, appended to `results.csv` as it
//! finishes (so an interrupted run keeps its cells), and the Markdown tables
//! of `results.md` built from all rows at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::load::Outcome;
use crate::syscalls::{self, Syscalls};

/// The CSV columns, in order; `docs/benchmarks.md` documents each.
pub const COLUMNS: [&str; 25] = [
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
    "round",
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
    /// Which of `--rounds` this is (from 1); 0 for a cell not run
    /// (unsupported).
    pub round: usize,
    /// `--syscalls`: the traced pass after round 1 (summary.csv and the
    /// tables; results.csv keeps its columns).
    pub syscalls: Option<Syscalls>,
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
            self.round.to_string(),
        ]
    }

    /// Whether the cell was not run because the server cannot do it.
    pub fn unsupported(&self) -> bool {
        self.note.starts_with(UNSUPPORTED)
    }
}

/// How the note of a cell that was not run starts.
pub const UNSUPPORTED: &str = "unsupported";

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

/// A figure over a cell's rounds: the median (the mean of the middle two
/// for an even count) and the range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values`, leaving out NaNs (figures a tool did not
    /// give); `None` when none is left.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    const NONE: Spread = Spread {
        median: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
    };
}

/// One server's cell over its rounds: what the tables, `summary.csv` and
/// the plots show. Targets are judged on the medians.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The first round's row: the cell's labels.
    pub row: Row,
    /// Rounds measured (0: not run, see [`Summary::unsupported`]).
    pub rounds: usize,
    pub rps: Spread,
    pub us_per_req: Spread,
    pub p50_ms: Spread,
    pub p99_ms: Spread,
    /// Over all rounds.
    pub errors: u64,
    pub server_busy_pct: f64,
    pub client_busy_pct: f64,
    /// Requests per shard summed over the rounds (sweep rows).
    pub per_core: Vec<u64>,
    pub balance: Option<Spread>,
    /// Why the cell was not run, when it was not.
    pub unsupported: Option<String>,
    /// The rounds' notes, each once.
    pub notes: Vec<String>,
}

impl Summary {
    /// The client CPU was saturated (median over the rounds ≥ 90 %): then
    /// requests/s measures the client, and µs/request is the figure.
    pub fn client_saturated(&self) -> bool {
        self.client_busy_pct >= 90.0
    }

    pub fn limited_by(&self) -> &'static str {
        Row {
            server_cpu_busy_pct: self.server_busy_pct,
            client_cpu_busy_pct: self.client_busy_pct,
            ..Row::default()
        }
        .limited_by()
    }
}

/// Group the rows by server and cell (every round of one cell together, in
/// the order they were first measured) and take the spreads.
pub fn summarize(rows: &[Row]) -> Vec<Summary> {
    type Key = (
        String,
        String,
        String,
        String,
        String,
        usize,
        usize,
        usize,
        String,
    );
    let key = |r: &Row| -> Key {
        (
            r.section.clone(),
            r.server.clone(),
            r.tool.clone(),
            r.mode.clone(),
            r.size.clone(),
            r.concurrency,
            r.pipeline_depth,
            r.shards,
            r.steer.clone(),
        )
    };
    let mut order: Vec<Key> = Vec::new();
    let mut groups: BTreeMap<Key, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        let k = key(r);
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    order
        .into_iter()
        .map(|k| {
            let all = &groups[&k];
            let first = all[0].clone();
            if let Some(u) = all.iter().find(|r| r.unsupported()) {
                return Summary {
                    row: first,
                    rounds: 0,
                    rps: Spread::NONE,
                    us_per_req: Spread::NONE,
                    p50_ms: Spread::NONE,
                    p99_ms: Spread::NONE,
                    errors: 0,
                    server_busy_pct: 0.0,
                    client_busy_pct: 0.0,
                    per_core: Vec::new(),
                    balance: None,
                    unsupported: Some(u.note.clone()),
                    notes: Vec::new(),
                };
            }
            let spread = |f: &dyn Fn(&Row) -> f64| {
                Spread::of(all.iter().map(|r| f(r))).unwrap_or(Spread::NONE)
            };
            let mut per_core: Vec<u64> = Vec::new();
            for r in all {
                if per_core.len() < r.per_core.len() {
                    per_core.resize(r.per_core.len(), 0);
                }
                for (sum, n) in per_core.iter_mut().zip(&r.per_core) {
                    *sum += n;
                }
            }
            let mut notes: Vec<String> = Vec::new();
            for r in all {
                if !r.note.is_empty() && !notes.contains(&r.note) {
                    notes.push(r.note.clone());
                }
            }
            Summary {
                rounds: all.len(),
                rps: spread(&|r| r.outcome.rps),
                us_per_req: spread(&|r| r.server_cpu_us_per_req),
                p50_ms: spread(&|r| r.outcome.p50_ms),
                p99_ms: spread(&|r| r.outcome.p99_ms),
                errors: all.iter().map(|r| r.outcome.errors).sum(),
                server_busy_pct: spread(&|r| r.server_cpu_busy_pct).median,
                client_busy_pct: spread(&|r| r.client_cpu_busy_pct).median,
                balance: Spread::of(
                    all.iter()
                        .filter_map(|r| r.balance())
                        .filter(|b| b.is_finite()),
                ),
                per_core,
                unsupported: None,
                notes,
                row: first,
            }
        })
        .collect()
}

/// The `summary.csv` columns: one row per server and cell over its rounds.
pub const SUMMARY_COLUMNS: [&str; 27] = [
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
    "rounds",
    "rps_median",
    "rps_min",
    "rps_max",
    "server_cpu_us_per_req_median",
    "server_cpu_us_per_req_min",
    "server_cpu_us_per_req_max",
    "latency_p50_ms_median",
    "latency_p99_ms_median",
    "errors",
    "server_cpu_busy_pct_median",
    "client_cpu_busy_pct_median",
    "limited_by",
    "balance_max_min_median",
    "note",
    "syscalls_per_req",
    "syscalls_top",
];

/// `summary.csv`, whole.
pub fn summary_csv(summaries: &[Summary]) -> String {
    let mut out = SUMMARY_COLUMNS.join(",") + "\n";
    let num = |v: f64, places: usize| {
        if v.is_nan() {
            String::new()
        } else {
            format!("{v:.places$}")
        }
    };
    for s in summaries {
        let r = &s.row;
        let note = match &s.unsupported {
            Some(u) => u.clone(),
            None => s.notes.join("; "),
        };
        let run = s.unsupported.is_none();
        let fields = [
            r.section.clone(),
            r.server.clone(),
            r.tool.clone(),
            r.mode.clone(),
            r.size.clone(),
            r.size_bytes.to_string(),
            r.concurrency.to_string(),
            r.pipeline_depth.to_string(),
            r.shards.to_string(),
            r.steer.clone(),
            s.rounds.to_string(),
            num(s.rps.median, 0),
            num(s.rps.min, 0),
            num(s.rps.max, 0),
            num(s.us_per_req.median, 2),
            num(s.us_per_req.min, 2),
            num(s.us_per_req.max, 2),
            num(s.p50_ms.median, 3),
            num(s.p99_ms.median, 3),
            if run {
                s.errors.to_string()
            } else {
                String::new()
            },
            if run {
                num(s.server_busy_pct, 0)
            } else {
                String::new()
            },
            if run {
                num(s.client_busy_pct, 0)
            } else {
                String::new()
            },
            if run {
                s.limited_by().to_owned()
            } else {
                String::new()
            },
            s.balance.map_or_else(String::new, |b| num(b.median, 2)),
            note,
            r.syscalls
                .as_ref()
                .map_or_else(String::new, |c| syscalls::per_req(c.per_req)),
            r.syscalls
                .as_ref()
                .map_or_else(String::new, Syscalls::top_field),
        ];
        let line: Vec<String> = fields.iter().map(|f| quote(f)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// A figure and, over several rounds, its range: `131.2k (127.0k–133.5k)`.
fn with_range(s: &Spread, rounds: usize, fmt: &dyn Fn(f64) -> String) -> String {
    if rounds > 1 && s.max > s.min {
        format!("{} ({}–{})", fmt(s.median), fmt(s.min), fmt(s.max))
    } else {
        fmt(s.median)
    }
}

/// The servers whose µs/request is given as a ratio to the epoll floor's:
/// shardhttpd on each backend, and the io_uring floor.
fn ratio_to_floor(server: &str) -> bool {
    server.starts_with("shardhttpd") || server == "floor-uring"
}

/// The Markdown tables: one per (mode, size, tool) with a column per server,
/// then the shard sweep. Each figure is the median over the rounds, with
/// its range when there were several.
pub fn markdown(rows: &[Row]) -> String {
    let summaries = summarize(rows);
    let mut md = String::new();
    let matrix: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.row.section == "matrix")
        .collect();
    let mut servers: Vec<String> = Vec::new();
    for s in &matrix {
        if !servers.contains(&s.row.server) {
            servers.push(s.row.server.clone());
        }
    }
    let mut groups: Vec<(String, String, String)> = Vec::new();
    for s in &matrix {
        let key = (s.row.mode.clone(), s.row.size.clone(), s.row.tool.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let rounds = summaries.iter().map(|s| s.rounds).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "Each cell: requests/s · server CPU µs per request · p99 latency{}; \
         `!` marks errors, `ᶜ` a saturated client CPU (then compare µs/req, not requests/s). \
         floor = the fixed-response epoll responder, floor-uring the same on io_uring; \
         ×floor = µs/req over the epoll floor's.\n",
        if rounds > 1 {
            format!(
                ", each the median of {rounds} interleaved rounds with the range (min–max) \
                 in brackets"
            )
        } else {
            String::new()
        }
    );
    for (mode, size, tool) in &groups {
        let cells: Vec<&&Summary> = matrix
            .iter()
            .filter(|s| &s.row.mode == mode && &s.row.size == size && &s.row.tool == tool)
            .collect();
        let present: Vec<&String> = servers
            .iter()
            .filter(|s| cells.iter().any(|c| &&c.row.server == s))
            .collect();
        let ratios: Vec<&String> = if present.iter().any(|s| *s == "floor") {
            present
                .iter()
                .copied()
                .filter(|s| ratio_to_floor(s))
                .collect()
        } else {
            Vec::new()
        };
        // `--syscalls`: a column per server that has a count.
        let traced: Vec<&String> = present
            .iter()
            .copied()
            .filter(|s| {
                cells
                    .iter()
                    .any(|c| &&c.row.server == s && c.row.syscalls.is_some())
            })
            .collect();
        let _ = writeln!(md, "### {mode}, {size} ({tool})\n");
        let mut head = String::from("| concurrency |");
        let mut rule = String::from("|---:|");
        for s in &present {
            let _ = write!(head, " {s} |");
            rule.push_str("---|");
        }
        for s in &ratios {
            if ratios.len() == 1 && s.as_str() == "shardhttpd" {
                head.push_str(" ×floor |");
            } else {
                let _ = write!(head, " {s} ×floor |");
            }
            rule.push_str("---:|");
        }
        for s in &traced {
            let _ = write!(head, " {s} syscalls/req |");
            rule.push_str("---|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        let concs: BTreeSet<usize> = cells.iter().map(|c| c.row.concurrency).collect();
        for c in concs {
            let mut line = format!("| {c} |");
            let mut us: BTreeMap<&str, f64> = BTreeMap::new();
            for s in &present {
                match cells
                    .iter()
                    .find(|x| &&x.row.server == s && x.row.concurrency == c)
                {
                    Some(x) if x.unsupported.is_some() => line.push_str(" unsupported |"),
                    Some(x) => {
                        us.insert(s.as_str(), x.us_per_req.median);
                        let _ = write!(
                            line,
                            " {} · {} µs · {}{}{} |",
                            with_range(&x.rps, x.rounds, &rps),
                            with_range(&x.us_per_req, x.rounds, &|v| format!("{v:.2}")),
                            ms(x.p99_ms.median, " ms"),
                            if x.errors > 0 { " !" } else { "" },
                            if x.client_saturated() { " ᶜ" } else { "" },
                        );
                    }
                    None => line.push_str(" |"),
                }
            }
            for s in &ratios {
                match (us.get(s.as_str()), us.get("floor")) {
                    (Some(a), Some(b)) if *b > 0.0 => {
                        let _ = write!(line, " {:.2} |", a / b);
                    }
                    _ => line.push_str(" |"),
                }
            }
            for s in &traced {
                let count = cells
                    .iter()
                    .find(|x| &&x.row.server == s && x.row.concurrency == c)
                    .and_then(|x| x.row.syscalls.as_ref());
                match count {
                    Some(n) => {
                        let _ = write!(line, " {} |", n.text());
                    }
                    None => line.push_str(" |"),
                }
            }
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }
    let sweep: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.row.section == "sweep")
        .collect();
    if !sweep.is_empty() {
        let _ = writeln!(
            md,
            "### Shard sweep: shardhttpd, keep-alive, {} B, c={}\n",
            sweep[0].row.size_bytes, sweep[0].row.concurrency
        );
        let _ = writeln!(
            md,
            "| shards | steer | requests/s | server µs/req | per-core requests | balance max/min | shares % | client CPU busy % | limited by |"
        );
        let _ = writeln!(md, "|---:|---|---:|---:|---|---:|---|---:|---|");
        for s in sweep {
            let summed = Row {
                per_core: s.per_core.clone(),
                ..Row::default()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
                s.row.shards,
                s.row.steer,
                with_range(&s.rps, s.rounds, &rps),
                with_range(&s.us_per_req, s.rounds, &|v| format!("{v:.2}")),
                s.per_core
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" / "),
                s.balance
                    .map_or_else(|| "n/a".into(), |b| format!("{:.2}", b.median)),
                summed
                    .shares()
                    .iter()
                    .map(|s| format!("{s:.0}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                s.client_busy_pct,
                s.limited_by(),
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

    #[test]
    fn spread_is_median_and_range() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let even = Spread::of([4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((even.median, even.min, even.max), (3.0, 1.0, 10.0));
        let gaps = Spread::of([f64::NAN, 5.0]).unwrap();
        assert_eq!((gaps.median, gaps.min, gaps.max), (5.0, 5.0, 5.0));
        assert_eq!(Spread::of([f64::NAN]), None);
        assert_eq!(Spread::of([]), None);
    }

    fn round(server: &str, round: usize, rps: f64, us: f64, client: f64) -> Row {
        Row {
            section: "matrix".into(),
            server: server.into(),
            tool: "wrk".into(),
            mode: "keep-alive".into(),
            size: "100B".into(),
            size_bytes: 100,
            concurrency: 100,
            pipeline_depth: 1,
            shards: 1,
            outcome: Outcome {
                rps,
                p99_ms: 1.0,
                ..Outcome::default()
            },
            server_cpu_us_per_req: us,
            client_cpu_busy_pct: client,
            round,
            ..Row::default()
        }
    }

    /// Three interleaved rounds of two servers: one summary each, in the
    /// order first measured, medians and ranges over its own rounds only.
    #[test]
    fn rounds_are_aggregated_per_server_and_cell() {
        let rows = vec![
            round("shardhttpd", 1, 100.0, 9.0, 50.0),
            round("floor", 1, 200.0, 5.0, 95.0),
            round("shardhttpd", 2, 130.0, 7.0, 50.0),
            round("floor", 2, 180.0, 6.0, 95.0),
            round("shardhttpd", 3, 120.0, 8.0, 50.0),
            round("floor", 3, 210.0, 4.0, 40.0),
        ];
        let s = summarize(&rows);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].row.server, "shardhttpd");
        assert_eq!(s[0].rounds, 3);
        assert_eq!(
            (s[0].rps.median, s[0].rps.min, s[0].rps.max),
            (120.0, 100.0, 130.0)
        );
        assert_eq!(s[0].us_per_req.median, 8.0);
        assert!(!s[0].client_saturated());
        assert_eq!(s[1].rps.median, 200.0);
        assert!(s[1].client_saturated(), "two of three rounds at 95 %");
        let md = markdown(&rows);
        assert!(md.contains("median of 3 interleaved rounds"), "{md}");
        assert!(
            md.contains("| 100 | 120 (100–130) · 8.00 (7.00–9.00) µs · 1.00 ms | 200 (180–210) · 5.00 (4.00–6.00) µs · 1.00 ms ᶜ | 1.60 |"),
            "{md}"
        );
        let csv = summary_csv(&s);
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some(SUMMARY_COLUMNS.join(",").as_str()));
        let first: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(first.len(), SUMMARY_COLUMNS.len());
        let col = |name: &str| SUMMARY_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert_eq!(first[col("rounds")], "3");
        assert_eq!(first[col("rps_median")], "120");
        assert_eq!(first[col("rps_min")], "100");
        assert_eq!(first[col("rps_max")], "130");
        assert_eq!(first[col("server_cpu_us_per_req_median")], "8.00");
    }

    /// A backend the binary lacks is a column that says so, not a figure.
    #[test]
    fn unsupported_cells_say_so() {
        let mut rows = vec![
            round("shardhttpd-epoll", 1, 100.0, 9.0, 50.0),
            Row {
                server: "shardhttpd-uring".into(),
                note: format!("{UNSUPPORTED}: no --io flag"),
                round: 0,
                ..round("x", 0, 0.0, 0.0, 0.0)
            },
            round("floor", 1, 200.0, 4.5, 50.0),
        ];
        rows.push(round("shardhttpd-epoll", 2, 100.0, 9.0, 50.0));
        let s = summarize(&rows);
        assert_eq!(
            s[1].unsupported.as_deref(),
            Some("unsupported: no --io flag")
        );
        assert_eq!(s[1].rounds, 0);
        let md = markdown(&rows);
        assert!(
            md.contains("| shardhttpd-epoll | shardhttpd-uring | floor | shardhttpd-epoll ×floor | shardhttpd-uring ×floor |"),
            "{md}"
        );
        assert!(md.contains("| unsupported |"), "{md}");
        assert!(
            md.contains("| 2.00 | |"),
            "epoll's ratio, none for uring: {md}"
        );
        assert!(summary_csv(&s).contains(",0,,,,,,,,,,,,,,unsupported: no --io flag"));
    }
}
