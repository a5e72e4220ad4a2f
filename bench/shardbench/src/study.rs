//! The study: the matrix's cells against every server, round by round
//! with the servers interleaved, then the shard sweep, then the report
//! (results.csv, summary.csv, results.md, plots, machine.md, commands.txt).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fleet::Fleet;
use crate::load::{self, Mode, Spec, Tool};
use crate::machine::{has_tls, machine, split_cpus};
use crate::matrix::{self, Cell, Kind, Plan};
use crate::measure::{cell_duration, measure, Ctx, LONG_CELL};
use crate::report::{self, Csv, Row};
use crate::servers::{self, Server, Setup, Tls};
use crate::{docs, plot, procs, release, sweep, syscalls};

#[derive(Debug, clap::Args)]
/// The study's arguments (shardbench without a subcommand).
pub struct Args {
    /// Output directory (created): results, plots, configs, raw tool output.
    #[arg(long, value_name = "DIR", default_value = "shardbench-results")]
    out: PathBuf,
    /// The quick matrix, under 3 minutes on 2 cores (same as `--matrix quick`).
    #[arg(long)]
    quick: bool,
    /// Which matrix: full (default; ≤ 15 min on 2 cores), quick, tiny (one
    /// cell per server, for tests), tls (issue 7's rows at c=100: keep-alive
    /// 100 B in cleartext and over TLS, a new TLS connection per request,
    /// 100 KiB over TLS; implies --tls), h2 (issue 25's HTTP/2 rows with
    /// h2load: 100 B, 4 KB, 100 KiB at -c 100 -m 10 and -c 1000 -m 1, over
    /// TLS and h2c, beside HTTP/1.1 keep-alive at c=100; implies --tls), h3
    /// (issue 39's rows: 100 B and 100 KiB at -c 100 -m 10 over HTTP/3 with
    /// `shardbench h3load`, beside the same over h2; implies --tls).
    #[arg(long, value_enum)]
    matrix: Option<Kind>,
    /// Seconds per measured cell (default: 2 full, 1 quick and tiny).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Concurrency levels (comma-separated), replacing the matrix's own.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// Keep only the cells picked by one of these comma-separated pieces:
    /// a piece picks a cell when each of its words is a word of the cell's
    /// label as the tables print it (`keep-alive 100B c=100 wrk`; so
    /// `keep-alive 100B` is every such cell and no `tls-keep-alive` one).
    /// A study of the rows a question names, in a fraction of the full
    /// matrix's time.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    cells: Option<Vec<String>>,
    /// Measure no peer servers (shardhttpd and the floor only).
    #[arg(long)]
    no_peers: bool,
    /// Skip the shard sweep.
    #[arg(long)]
    no_sweep: bool,
    /// Only the shard sweep: no matrix, no floor, no peers.
    #[arg(long, conflicts_with = "no_sweep")]
    sweep_only: bool,
    /// Connections in the shard sweep.
    #[arg(long, value_name = "N", default_value_t = 256)]
    sweep_concurrency: usize,
    /// Use this shardhttpd binary instead of building one in release.
    #[arg(long, value_name = "PATH")]
    server_bin: Option<PathBuf>,
    /// CPUs for the load generators (default: the first third, at least one).
    #[arg(long, value_name = "LIST")]
    pub client_cpus: Option<String>,
    /// CPUs for the servers (default: the CPUs the client does not use).
    #[arg(long, value_name = "LIST")]
    pub server_cpus: Option<String>,
    /// Add the TLS rows (keep-alive and close over HTTPS at 100 B,
    /// keep-alive at 100 KiB; c ≤ 1000) for shardhttpd and every peer with
    /// TLS, on one self-signed certificate made with openssl.
    #[arg(long)]
    tls: bool,
    /// The key of that certificate: ecdsa (P-256) or rsa (2048 bits).
    #[arg(long, value_enum, value_name = "KIND", default_value = "ecdsa")]
    tls_key: servers::KeyKind,
    /// Also measure this shardhttpd binary, as `shardhttpd-baseline`, in
    /// the same interleaved run (an A/B of two versions).
    #[arg(long, value_name = "PATH")]
    baseline_bin: Option<PathBuf>,
    /// Measure every cell N times: each round runs the cell on every
    /// server in turn, so drift on a busy machine hits them alike. Tables,
    /// summary.csv and plots give the median and the range (min–max);
    /// results.csv keeps every round.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// shardhttpd's I/O backends (comma-separated: epoll,uring): one server
    /// per backend, `shardhttpd-epoll` and `shardhttpd-uring`, each started
    /// with `--io`. A backend this binary cannot run is reported as
    /// unsupported, never measured on another. Without it: one
    /// `shardhttpd` on the server's default backend.
    #[arg(long, value_enum, value_name = "LIST", value_delimiter = ',')]
    io: Option<Vec<servers::Io>>,
    /// Syscalls per request: after each server's timed cell (round 1),
    /// the same load again for a traced pass with `strace -c -f` attached
    /// to the server's processes and threads; summary.csv and the tables
    /// get the syscalls per request and the most frequent by name. The
    /// timed figures are not traced. Skipped, saying so, without strace.
    #[arg(long)]
    syscalls: bool,
    /// Show the matrix and the time it will take, and exit.
    #[arg(long)]
    dry_run: bool,
}

impl Args {
    fn kind(&self) -> Kind {
        self.matrix
            .unwrap_or(if self.quick { Kind::Quick } else { Kind::Full })
    }

    /// Seconds per cell: the flag, or the matrix's own.
    fn duration(&self, kind: Kind) -> io::Result<Duration> {
        let d = Duration::from_secs_f64(self.duration.unwrap_or(match kind {
            Kind::Full => 2.0,
            // Few cells, each compared with a ratio: longer ones are steadier.
            Kind::Tls | Kind::H2 | Kind::H3 => 3.0,
            _ => 1.0,
        }));
        if d < Duration::from_secs(1) {
            return Err(io::Error::other(
                "--duration: wrk measures whole seconds; use 1 or more",
            ));
        }
        Ok(d)
    }
}

/// The whole study. Ok(false) when interrupted.
pub fn run(args: Args) -> io::Result<bool> {
    let started = Instant::now();
    let kind = args.kind();
    let duration = args.duration(kind)?;
    let nofile = procs::raise_nofile();
    // The client and the server each hold one fd per connection, plus some.
    let cap = nofile.saturating_sub(256).max(1) as usize;
    let (client, server) = split_cpus(&args)?;
    // The TLS matrix is the TLS rows and the cleartext row they compare to.
    let want_tls = args.tls || matches!(kind, Kind::Tls | Kind::H2 | Kind::H3);
    let mut plan = cells(&args, kind, cap, want_tls)?;
    let trace = args.syscalls && syscalls::available();
    if args.syscalls && !trace {
        let n = "SKIP --syscalls: strace is not installed (apt-get install strace)";
        eprintln!("{n}");
        plan.notes.push(n.into());
    }

    fs::create_dir_all(args.out.join("work"))?;
    // Absolute, because a peer resolves a relative path against its own
    // prefix (nginx looked for its certificate under `work/work/`).
    let out = fs::canonicalize(&args.out)?;
    let work = out.join("work");
    let root = out.join("www");
    docs::write(&root)?;
    let ctx = Ctx {
        client,
        server,
        work: work.clone(),
        duration,
    };
    let mut commands = vec![std::env::args().collect::<Vec<_>>().join(" ")];
    eprintln!(
        "client CPUs {}, server CPUs {}; RLIMIT_NOFILE {nofile}",
        procs::cpu_list(&ctx.client),
        procs::cpu_list(&ctx.server)
    );
    for n in &plan.notes {
        eprintln!("note: {n}");
    }

    let bin = server_binary(&args, &mut plan.notes, &mut commands)?;
    let setup = Setup {
        root: &root,
        work: &work,
        cpus: &ctx.server,
        nofile,
    };
    let tls = if want_tls && !args.sweep_only {
        certificate(&bin, &work, args.tls_key, &mut plan.notes, &mut commands)?
    } else {
        None
    };
    if tls.is_none() {
        plan.cells.retain(|c| !c.mode.is_tls());
    }
    let mut notes = plan.notes;
    let mut fleet = if args.sweep_only {
        Fleet::default()
    } else {
        let (io, base) = (args.io.as_deref(), args.baseline_bin.as_deref());
        Fleet::start_own(&bin, io, base, &setup, tls.as_ref(), &mut notes)?
    };
    if args.no_peers || args.sweep_only {
        notes.push("no peer servers measured".into());
    } else {
        fleet.start_peers(&setup, tls.as_ref(), &mut notes);
    }
    fleet.check(&mut commands, &mut notes)?;
    let somaxconn: usize = fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096);
    if plan.cells.iter().any(|c| c.concurrency > somaxconn) {
        notes.push(format!(
            "cells above c={somaxconn} (net.core.somaxconn) run at least {} s: the connections \
             beyond the listen backlog wait for SYN retransmission, and shorter cells would \
             measure the connect storm",
            LONG_CELL.as_secs()
        ));
    }
    let rounds = args.rounds as usize;
    let jobs = schedule(&plan.cells, &fleet, rounds);
    let sweep_shards: Vec<usize> = if args.no_sweep
        || kind == Kind::Tls
        || kind == Kind::H2
        || kind == Kind::Tiny && ctx.server.is_empty()
    {
        Vec::new()
    } else {
        (1..=ctx.server.len()).collect()
    };
    if !sweep_shards.is_empty() {
        if let Some(w) = plot::sweep_warning(ctx.server.len()) {
            eprintln!("WARNING: {w}");
            notes.push(w);
        }
    }
    let matrix = Matrix {
        ctx: &ctx,
        somaxconn,
        rounds,
        trace,
    };
    let measured = jobs
        .iter()
        .filter(|(_, t, _)| matches!(t, Target::Running(_)))
        .count();
    let swept = 2 * sweep_shards.len() * rounds;
    let expected = matrix.expected_secs(&jobs) + swept as f64 * (duration.as_secs_f64() + 1.5);
    let names: Vec<&str> = fleet.running.iter().map(|s| s.name.as_str()).collect();
    eprintln!(
        "{} cells ({} matrix over {}, {} sweep; {} round{}), about {} at {:.0} s per cell",
        measured + swept,
        measured,
        names.join(", "),
        swept,
        rounds,
        if rounds == 1 { "" } else { "s" },
        hms(expected),
        duration.as_secs_f64()
    );
    if args.dry_run {
        print_jobs(&jobs, &fleet);
        return Ok(true);
    }

    let mut record = Record {
        csv: Csv::create(&out.join("results.csv"))?,
        rows: Vec::new(),
        done: 0,
        total: measured + swept,
        since: Instant::now(),
        complete: true,
    };
    matrix.run(&jobs, &mut fleet, &mut commands, &mut record)?;
    // The peers are done: free their CPU before the sweep.
    drop(fleet);
    'sweep: for round in 1..=rounds {
        for &n in &sweep_shards {
            for steer in ["hash", "cpu"] {
                if !record.complete || procs::interrupted() {
                    record.complete = false;
                    break 'sweep;
                }
                let label = round_label(format!("sweep shards={n} steer={steer}"), round, rounds);
                let cell = sweep::Cell {
                    shards: n,
                    steer,
                    concurrency: args.sweep_concurrency.min(cap),
                    round,
                    label: &label,
                };
                let Some(row) = sweep::run(&ctx, &mut commands, &bin, &setup, &cell)? else {
                    record.complete = false;
                    break 'sweep;
                };
                record.measured(&label, row)?;
            }
        }
    }

    let machine = machine(&ctx, &bin, nofile, cap);
    write_results(&out, &ctx, &machine, &record, &notes, &commands, started)?;
    Ok(record.complete)
}

/// The matrix's cells for these arguments: `--cells`' choice, less the rows
/// of tools that are not installed (each said in the notes).
fn cells(args: &Args, kind: Kind, cap: usize, tls: bool) -> io::Result<Plan> {
    let mut plan = matrix::plan(kind, args.concurrency.as_deref(), cap, tls);
    if let Some(pieces) = &args.cells {
        plan.keep_only(pieces);
        if plan.cells.is_empty() {
            return Err(io::Error::other(format!(
                "--cells {}: no cell of this matrix matches",
                pieces.join(",")
            )));
        }
    }
    if servers::installed("wrk").is_none() {
        return Err(io::Error::other(
            "wrk is not installed (apt-get install wrk)",
        ));
    }
    let ab = servers::installed("ab").is_some();
    if !ab {
        let n = "ab is not installed: its rows, HEAD among them, are skipped";
        plan.notes.push(n.into());
    }
    if servers::installed("httperf").is_none() {
        plan.notes
            .push("httperf is not installed: no httperf rows".into());
    }
    plan.cells.retain(|c| ab || c.tool != Tool::Ab);
    let h2load = servers::installed("h2load").is_some();
    if !h2load && plan.cells.iter().any(|c| c.tool == Tool::H2load) {
        let n = "h2load is not installed (apt-get install nghttp2-client): no h2 rows";
        plan.notes.push(n.into());
    }
    plan.cells.retain(|c| h2load || c.tool != Tool::H2load);
    if args.sweep_only {
        plan.cells.clear();
    }
    Ok(plan)
}

/// The shardhttpd binary to measure: `--server-bin`, under `--quick` the
/// release binary already built, else a fresh release build.
fn server_binary(
    args: &Args,
    notes: &mut Vec<String>,
    commands: &mut Vec<String>,
) -> io::Result<PathBuf> {
    match &args.server_bin {
        Some(p) => Ok(p.clone()),
        None if args.quick => match release::existing_release() {
            Some((p, note)) => {
                eprintln!("--quick: {note}");
                notes.push(format!("--quick: {note}"));
                Ok(p)
            }
            None => release::build_release(commands),
        },
        None => release::build_release(commands),
    }
}

/// The TLS rows' certificate, or None (with a note) when this shardhttpd
/// has no TLS listener or openssl is missing to make one.
fn certificate(
    bin: &Path,
    work: &Path,
    key: servers::KeyKind,
    notes: &mut Vec<String>,
    commands: &mut Vec<String>,
) -> io::Result<Option<Tls>> {
    if !has_tls(bin)? {
        notes.push("--tls: this shardhttpd has no TLS listener; TLS rows skipped".into());
        Ok(None)
    } else if servers::installed("openssl").is_none() {
        let n = "--tls: openssl is not installed to make a certificate; TLS rows skipped";
        notes.push(n.into());
        Ok(None)
    } else {
        servers::make_cert(work, key, commands).map(Some)
    }
}

/// What a job measures: a started server, or a server that cannot run
/// (an index into the unsupported list), reported without a measurement.
#[derive(Debug, Clone, Copy)]
enum Target {
    Running(usize),
    Unsupported(usize),
}

/// A cell, what it is measured on, and its round (0: not measured).
type Job = (Cell, Target, usize);

/// Cell by cell; within a cell, round by round; within a round, every
/// server in turn (an unsupported one once, in its place: after the first
/// shardhttpd, or first when none runs).
fn schedule(cells: &[Cell], fleet: &Fleet, rounds: usize) -> Vec<Job> {
    let n = fleet.unsupported.len();
    let unsupported = |c: Cell| (0..n).map(move |u| (c, Target::Unsupported(u), 0));
    let mut jobs = Vec::new();
    for c in cells {
        let reference = fleet
            .running
            .iter()
            .find(|s| s.name.starts_with("shardhttpd"));
        for round in 1..=rounds {
            if round == 1 && reference.is_none() {
                jobs.extend(unsupported(*c));
            }
            for (i, s) in fleet.running.iter().enumerate() {
                if c.applies_to(&s.name) && can_serve(c, s) {
                    jobs.push((*c, Target::Running(i), round));
                }
                let first_shard = reference.is_some_and(|r| r.name == s.name);
                if first_shard && round == 1 && can_serve(c, s) {
                    jobs.extend(unsupported(*c));
                }
            }
        }
    }
    jobs
}

/// `--dry-run`: the jobs in the order they would run.
fn print_jobs(jobs: &[Job], fleet: &Fleet) {
    for (c, t, round) in jobs {
        match t {
            Target::Running(i) => {
                eprintln!("  {} {} (round {round})", c.label(), fleet.running[*i].name)
            }
            Target::Unsupported(u) => {
                let (name, why) = &fleet.unsupported[*u];
                eprintln!("  {} {name}: {why}", c.label())
            }
        }
    }
}

/// Whether server `s` has what cell `c` needs (TLS, h2, h2c).
fn can_serve(c: &Cell, s: &Server) -> bool {
    (!c.mode.is_tls() || s.tls_port.is_some())
        && (c.mode != Mode::H2 || s.h2)
        && (c.mode != Mode::H2c || s.h2c_port.is_some())
        && (c.mode != Mode::H3 || s.h3)
}

/// The rows so far, written to results.csv as they come, and the progress
/// line after each measured one.
struct Record {
    csv: Csv,
    rows: Vec<Row>,
    done: usize,
    total: usize,
    since: Instant,
    /// False once interrupted: the report says only the finished cells
    /// are in it.
    complete: bool,
}

impl Record {
    fn measured(&mut self, label: &str, row: Row) -> io::Result<()> {
        self.done += 1;
        let elapsed = self.since.elapsed().as_secs_f64();
        let left = (self.total - self.done) as f64 * (elapsed / self.done as f64);
        eprintln!(
            "[{}/{}] {label}: {} rps, p50 {:.2} ms, p99 {}, {:.2} µs/req, {} errors, client {:.0}% busy · {} left",
            self.done,
            self.total,
            rps_text(row.outcome.rps),
            row.outcome.p50_ms,
            report::ms(row.outcome.p99_ms, " ms"),
            row.server_cpu_us_per_req,
            row.outcome.errors,
            row.client_cpu_busy_pct,
            hms(left)
        );
        self.add(row)
    }

    fn add(&mut self, row: Row) -> io::Result<()> {
        self.csv.append(&row)?;
        self.rows.push(row);
        Ok(())
    }
}

/// How the matrix's jobs run.
struct Matrix<'a> {
    ctx: &'a Ctx,
    somaxconn: usize,
    rounds: usize,
    /// `--syscalls` with strace installed: a traced pass after round 1.
    trace: bool,
}

impl Matrix<'_> {
    fn cell_secs(&self, c: &Cell) -> Duration {
        cell_duration(self.ctx.duration, c.concurrency, self.somaxconn)
    }

    /// About how long the measured jobs take.
    fn expected_secs(&self, jobs: &[Job]) -> f64 {
        jobs.iter()
            .filter(|(_, t, _)| matches!(t, Target::Running(_)))
            // A traced pass (`--syscalls`, round 1) is the cell again.
            .map(|(c, _, r)| {
                let traced = if self.trace && *r == 1 { 2.0 } else { 1.0 };
                traced * self.cell_secs(c).as_secs_f64() + 0.2
            })
            .sum()
    }

    /// Every job in turn, until done or interrupted.
    fn run(
        &self,
        jobs: &[Job],
        fleet: &mut Fleet,
        commands: &mut Vec<String>,
        record: &mut Record,
    ) -> io::Result<()> {
        // Each server's last h2 requests/s by h2_keys: sizes the request
        // count of its h2load cells at high concurrency.
        let mut h2_rates: HashMap<String, f64> = HashMap::new();
        for (cell, target, round) in jobs {
            if procs::interrupted() {
                record.complete = false;
                return Ok(());
            }
            let i = match target {
                Target::Running(i) => *i,
                Target::Unsupported(u) => {
                    let (name, why) = &fleet.unsupported[*u];
                    record.add(unsupported_row(cell, name, why))?;
                    continue;
                }
            };
            let s = &mut fleet.running[i];
            if !s.alive() {
                return Err(io::Error::other(format!(
                    "{} died; see {}",
                    s.name,
                    self.ctx.work.join(format!("{}.log", s.name)).display()
                )));
            }
            let spec = Spec {
                tool: cell.tool,
                mode: cell.mode,
                port: match cell.mode {
                    Mode::H2c => s.h2c_port.unwrap_or(s.port),
                    m if m.is_tls() => s.tls_port.unwrap_or(s.port),
                    _ => s.port,
                },
                path: cell.doc.path,
                concurrency: cell.concurrency,
                streams: cell.streams,
                duration: self.cell_secs(cell),
                client_cpus: &self.ctx.client,
                last_modified: s.last_modified.as_deref(),
                work: &self.ctx.work,
                requests: (cell.tool == Tool::H2load && cell.concurrency >= load::H2LOAD_BY_COUNT)
                    .then(|| {
                        let rate = h2_keys(&s.name, cell)
                            .iter()
                            .find_map(|k| h2_rates.get(k).copied());
                        let secs = self.cell_secs(cell).as_secs_f64();
                        load::h2load_requests(cell.concurrency, rate, secs)
                    }),
            };
            let label = round_label(format!("{} {}", cell.label(), s.name), *round, self.rounds);
            let Some(mut row) = measure(self.ctx, commands, s.pid(), 1, &spec, &label)? else {
                record.complete = false;
                return Ok(());
            };
            if self.trace && *round == 1 {
                match syscalls::trace(commands, s.pid(), &spec, &label)? {
                    None => record.complete = false,
                    Some(Ok(c)) => row.syscalls = Some(c),
                    Some(Err(why)) => {
                        eprintln!("{label}: syscalls not counted: {why}");
                        row.note = syscalls::noted(&row.note, &why);
                    }
                }
            }
            row.section = "matrix".into();
            row.server = s.name.clone();
            row.shards = 1;
            row.round = *round;
            if s.name.starts_with("shardhttpd") {
                row.steer = "hash".into();
            }
            row.size = cell.doc.label.into();
            row.size_bytes = cell.doc.bytes;
            if cell.tool == Tool::H2load && row.outcome.rps > 0.0 {
                for k in h2_keys(&s.name, cell) {
                    h2_rates.insert(k, row.outcome.rps);
                }
            }
            record.measured(&label, row)?;
            if !record.complete {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The keys of a server's h2 requests/s, the closest estimate first: the
/// same cell in an earlier round, the same shape (another document at the
/// same -c and -m), the same mode.
fn h2_keys(server: &str, cell: &Cell) -> [String; 3] {
    [
        format!("{server} {}", cell.label()),
        format!(
            "{server} {} c={} m={}",
            cell.mode.name(),
            cell.concurrency,
            cell.streams
        ),
        format!("{server} {}", cell.mode.name()),
    ]
}

/// The row of a server that cannot run the cell's backend: why, no figures.
fn unsupported_row(cell: &Cell, name: &str, why: &str) -> Row {
    Row {
        section: "matrix".into(),
        server: name.into(),
        tool: cell.tool.name().into(),
        mode: cell.mode.name().into(),
        size: cell.doc.label.into(),
        size_bytes: cell.doc.bytes,
        concurrency: cell.concurrency,
        pipeline_depth: if cell.mode == Mode::Pipeline {
            load::PIPELINE_DEPTH
        } else {
            cell.streams.max(1)
        },
        shards: 1,
        note: why.into(),
        round: 0,
        ..Row::default()
    }
}

/// results.md, summary.csv, machine.md, commands.txt and the plots.
fn write_results(
    out: &Path,
    ctx: &Ctx,
    machine: &str,
    record: &Record,
    notes: &[String],
    commands: &[String],
    started: Instant,
) -> io::Result<()> {
    let rows = &record.rows;
    let plots = plot::all(rows, out);
    fs::write(out.join("machine.md"), machine)?;
    fs::write(
        out.join("summary.csv"),
        report::summary_csv(&report::summarize(rows)),
    )?;
    fs::write(out.join("commands.txt"), commands.join("\n") + "\n")?;
    let mut md = format!(
        "# shardbench results\n\n{}\n\nCommand: `{}`\n\n",
        if record.complete {
            "Complete run."
        } else {
            "**Interrupted**: only the cells finished are here."
        },
        commands[0]
    );
    md.push_str(&format!(
        "{} s per cell; server CPUs {}, client CPUs {} (wrk -t{}); one worker per server in the matrix. \
         Time: {}.\n\n",
        ctx.duration.as_secs_f64(),
        procs::cpu_list(&ctx.server[..1]),
        procs::cpu_list(&ctx.client),
        ctx.client.len(),
        hms(started.elapsed().as_secs_f64()),
    ));
    if !notes.is_empty() {
        md.push_str("Notes:\n\n");
        for n in notes {
            md.push_str(&format!("- {n}\n"));
        }
        md.push('\n');
    }
    md.push_str(&report::markdown(rows));
    if !plots.is_empty() {
        md.push_str("Plots: ");
        md.push_str(
            &plots
                .iter()
                .filter_map(|p| p.file_name()?.to_str().map(|n| format!("[{n}]({n})")))
                .collect::<Vec<_>>()
                .join(", "),
        );
        md.push_str("\n\n");
    }
    md.push_str("## Machine\n\n");
    md.push_str(machine);
    fs::write(out.join("results.md"), md)?;
    eprintln!(
        "wrote {} rows, results.md, {} plots, machine.md and commands.txt to {} in {}",
        rows.len(),
        plots.len(),
        out.display(),
        hms(started.elapsed().as_secs_f64())
    );
    Ok(())
}

/// A cell's label, with its round when there are several.
fn round_label(label: String, round: usize, rounds: usize) -> String {
    if rounds > 1 {
        format!("{label} round {round}")
    } else {
        label
    }
}

fn rps_text(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn hms(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_labels_only_with_rounds() {
        assert_eq!(round_label("c".into(), 1, 1), "c");
        assert_eq!(round_label("c".into(), 2, 3), "c round 2");
    }
}
