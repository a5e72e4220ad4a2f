//! One cell of the shard sweep: shardhttpd with `shards` shards and a
//! steering mode, keep-alive 100 B under wrk, and how the requests spread
//! over the shards (from the per-core counts the server publishes).

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::docs;
use crate::load::{Mode, Spec, Tool};
use crate::measure::{measure, per_core_requests, Ctx};
use crate::procs;
use crate::report::Row;
use crate::servers::{self, Setup};

/// What a sweep cell runs.
pub struct Cell<'a> {
    pub shards: usize,
    pub steer: &'static str,
    pub concurrency: usize,
    pub round: usize,
    /// How the cell is named in the progress lines and commands.txt.
    pub label: &'a str,
}

/// Run one sweep cell; `None` when the run was interrupted.
pub fn run(
    ctx: &Ctx,
    commands: &mut Vec<String>,
    bin: &Path,
    setup: &Setup<'_>,
    cell: &Cell<'_>,
) -> io::Result<Option<Row>> {
    let n = cell.shards;
    let name = format!("shardhttpd-{n}-{}", cell.steer);
    let (mut s, admin) = servers::start_shardhttpd(bin, setup, n, cell.steer, &name, None, None)?;
    commands.push(format!("# {name}\n{}", s.command));
    let spec = Spec {
        tool: Tool::Wrk,
        mode: Mode::KeepAlive,
        port: s.port,
        path: docs::SMALL.path,
        concurrency: cell.concurrency,
        streams: 1,
        duration: ctx.duration,
        client_cpus: &ctx.client,
        last_modified: None,
        work: &ctx.work,
        requests: None,
    };
    // Let the readiness checks' requests be published first.
    procs::sleep(Duration::from_millis(400));
    let before = per_core_requests(admin)?;
    let Some(mut row) = measure(ctx, commands, s.pid(), n, &spec, cell.label)? else {
        return Ok(None);
    };
    // Shards publish their counters every 250 ms, later when the machine
    // is loaded: wait until they account for every request the client
    // counted (they also answered what was in flight when it stopped), for
    // at most 5 s.
    let settle = Instant::now() + Duration::from_secs(5);
    loop {
        procs::sleep(Duration::from_millis(300));
        let after = per_core_requests(admin)?;
        row.per_core = (0..n)
            .map(|i| {
                let was = before.get(i).copied().unwrap_or(0);
                after.get(i).copied().unwrap_or(0).saturating_sub(was)
            })
            .collect();
        let served: u64 = row.per_core.iter().sum();
        if served >= row.outcome.requests || Instant::now() >= settle {
            break;
        }
    }
    row.section = "sweep".into();
    row.server = "shardhttpd".into();
    row.shards = n;
    row.steer = cell.steer.into();
    row.round = cell.round;
    row.size = docs::SMALL.label.into();
    row.size_bytes = docs::SMALL.bytes;
    if !s.alive() {
        row.note = "the server exited during the cell".into();
    }
    Ok(Some(row))
}
