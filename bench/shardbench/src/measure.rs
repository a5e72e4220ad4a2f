//! One measured cell: the load run, the server's CPU time and the client
//! CPUs' busy share around it, turned into a [`Row`]; and the per-shard
//! request counts a sweep cell reads from shardhttpd's /metrics.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::load::{self, Mode, Spec};
use crate::procs;
use crate::report::Row;

/// Everything the cells share.
pub struct Ctx {
    pub client: Vec<usize>,
    pub server: Vec<usize>,
    pub work: PathBuf,
    pub duration: Duration,
}

/// Shortest cell above the listen backlog.
pub const LONG_CELL: Duration = Duration::from_secs(5);

/// A cell's length: at least [`LONG_CELL`] when its connections overflow
/// the listen backlog.
pub fn cell_duration(base: Duration, concurrency: usize, somaxconn: usize) -> Duration {
    if concurrency > somaxconn {
        base.max(LONG_CELL)
    } else {
        base
    }
}

/// Run one load and turn it into a row (section and names left to the
/// caller). `None` when interrupted.
pub fn measure(
    ctx: &Ctx,
    commands: &mut Vec<String>,
    server_pid: u32,
    server_cpus: usize,
    spec: &Spec<'_>,
    label: &str,
) -> io::Result<Option<Row>> {
    let raw = ctx.work.join(format!(
        "{}.txt",
        label.replace(
            |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '=',
            "_"
        )
    ));
    let cmd = load::command(spec, &raw)?;
    commands.push(format!("# {label}\n{}", cmd.join(" ")));
    let t0 = procs::tree_cpu_ns(server_pid);
    let c0 = procs::cpu_ticks(&ctx.client);
    let start = Instant::now();
    let Some(outcome) = load::run(spec.tool, &cmd, spec.duration, &raw)? else {
        return Ok(None);
    };
    let elapsed = start.elapsed().as_secs_f64();
    let mut note = outcome.note.clone();
    if outcome.requests == 0 && note.is_empty() {
        note = "no responses".into();
    }
    let t1 = procs::tree_cpu_ns(server_pid);
    let c1 = procs::cpu_ticks(&ctx.client);
    let server_s = t1.saturating_sub(t0) as f64 / 1e9;
    let (busy, all) = (c1.0.saturating_sub(c0.0), c1.1.saturating_sub(c0.1));
    Ok(Some(Row {
        tool: spec.tool.name().into(),
        mode: spec.mode.name().into(),
        concurrency: spec.concurrency,
        // Requests in flight per connection: the pipeline's depth, or
        // h2's streams per connection.
        pipeline_depth: if spec.mode == Mode::Pipeline {
            load::PIPELINE_DEPTH
        } else {
            spec.streams.max(1)
        },
        duration_s: elapsed,
        server_cpu_us_per_req: if outcome.requests > 0 {
            server_s * 1e6 / outcome.requests as f64
        } else {
            0.0
        },
        server_cpu_busy_pct: 100.0 * server_s / (elapsed * server_cpus.max(1) as f64),
        client_cpu_busy_pct: if all > 0 {
            100.0 * busy as f64 / all as f64
        } else {
            0.0
        },
        outcome,
        note,
        ..Row::default()
    }))
}

/// Requests answered per shard (index = `core` label), from /metrics.
pub fn per_core_requests(admin: u16) -> io::Result<Vec<u64>> {
    let text = metrics_text(admin)?;
    let mut out: Vec<u64> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("shardhttpd_http_requests_total{") else {
            continue;
        };
        let Some(core) = rest
            .split("core=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse::<usize>().ok())
        else {
            continue;
        };
        let value = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        if out.len() <= core {
            out.resize(core + 1, 0);
        }
        out[core] += value;
    }
    Ok(out)
}

fn metrics_text(admin: u16) -> io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", admin))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| io::Error::new(e.kind(), format!("reading /metrics on :{admin}: {e}")))?;
    Ok(text)
}
