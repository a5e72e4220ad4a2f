//! shardbench: the scaling study in one command. It builds shardhttpd in
//! release, writes the classic document set, starts shardhttpd (once per
//! `--io` backend), the floors (a fixed-response responder on epoll and on
//! io_uring) and every installed peer pinned to the server CPUs, runs the
//! matrix (concurrency × keep-alive/close × file size, pipelining, 304,
//! HEAD) with wrk (and ab for the classic rows) pinned to the client CPUs,
//! `--rounds` times with the servers interleaved, sweeps shardhttpd's shard
//! count with both steering modes, and writes results.csv, summary.csv,
//! results.md, SVG plots, the machine description and the exact commands
//! into `--out`.

mod docs;
mod floor;
mod floor_tls;
mod floor_uring;
mod load;
mod machine;
mod matrix;
mod measure;
mod plot;
mod procs;
mod release;
mod report;
mod servers;
mod sweep;
mod syscalls;

use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use load::{Mode, Spec, Tool};
use machine::{has_flag, has_tls, machine, split_cpus};
use matrix::{Cell, Kind};
use measure::{cell_duration, measure, Ctx, LONG_CELL};
use report::{Csv, Row, UNSUPPORTED};
use servers::{Server, Setup};

/// Run the scaling study (or, as `floor`, the floor responder).
#[derive(Debug, Parser)]
#[command(name = "shardbench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve the fixed 100-byte response on ADDR (the study starts it).
    Floor(floor::Args),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
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
    /// TLS and h2c, beside HTTP/1.1 keep-alive at c=100; implies --tls).
    #[arg(long, value_enum)]
    matrix: Option<Kind>,
    /// Seconds per measured cell (default: 2 full, 1 quick and tiny).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Concurrency levels (comma-separated), replacing the matrix's own.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// Keep only the cells whose label (as the tables print it, e.g.
    /// `keep-alive 100B c=100 wrk`) contains one of these comma-separated
    /// pieces: a study of the rows a question names, in a fraction of the
    /// full matrix's time.
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
    client_cpus: Option<String>,
    /// CPUs for the servers (default: the CPUs the client does not use).
    #[arg(long, value_name = "LIST")]
    server_cpus: Option<String>,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Floor(args)) = cli.cmd {
        let served = args.serve();
        return match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("floor: {e}");
                ExitCode::FAILURE
            }
        };
    }
    procs::catch_interrupts();
    match study(cli.run) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("interrupted: the cells finished so far are kept");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("shardbench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The whole study. Ok(false) when interrupted.
fn study(args: RunArgs) -> io::Result<bool> {
    let started = Instant::now();
    let kind = args
        .matrix
        .unwrap_or(if args.quick { Kind::Quick } else { Kind::Full });
    let duration = Duration::from_secs_f64(args.duration.unwrap_or(match kind {
        Kind::Full => 2.0,
        // Few cells, each compared with a ratio: longer ones are steadier.
        Kind::Tls | Kind::H2 => 3.0,
        _ => 1.0,
    }));
    if duration < Duration::from_secs(1) {
        return Err(io::Error::other(
            "--duration: wrk measures whole seconds; use 1 or more",
        ));
    }
    let nofile = procs::raise_nofile();
    // The client and the server each hold one fd per connection, plus some.
    let cap = nofile.saturating_sub(256).max(1) as usize;
    let (client, server) = split_cpus(&args)?;
    // The TLS matrix is the TLS rows and the cleartext row they compare to.
    let want_tls = args.tls || kind == Kind::Tls || kind == Kind::H2;
    let mut plan = matrix::plan(kind, args.concurrency.as_deref(), cap, want_tls);
    if let Some(pieces) = &args.cells {
        plan.keep_only(pieces);
        if plan.cells.is_empty() {
            return Err(io::Error::other(format!(
                "--cells {}: no cell of this matrix matches",
                pieces.join(",")
            )));
        }
    }
    let ab = servers::installed("ab").is_some();
    let mut notes = plan.notes.clone();
    if !ab {
        notes.push("ab is not installed: its rows, HEAD among them, are skipped".into());
    }
    if servers::installed("httperf").is_none() {
        notes.push("httperf is not installed: no httperf rows".into());
    }
    if servers::installed("wrk").is_none() {
        return Err(io::Error::other(
            "wrk is not installed (apt-get install wrk)",
        ));
    }
    plan.cells.retain(|c| ab || c.tool != Tool::Ab);
    let h2load = servers::installed("h2load").is_some();
    if !h2load && plan.cells.iter().any(|c| c.tool == Tool::H2load) {
        notes.push("h2load is not installed (apt-get install nghttp2-client): no h2 rows".into());
    }
    plan.cells.retain(|c| h2load || c.tool != Tool::H2load);
    if args.sweep_only {
        plan.cells.clear();
    }
    let trace = args.syscalls && syscalls::available();
    if args.syscalls && !trace {
        let n = "SKIP --syscalls: strace is not installed (apt-get install strace)";
        eprintln!("{n}");
        notes.push(n.into());
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
    for n in &notes {
        eprintln!("note: {n}");
    }

    let bin = match &args.server_bin {
        Some(p) => p.clone(),
        None if args.quick => match release::existing_release() {
            Some((p, note)) => {
                eprintln!("--quick: {note}");
                notes.push(format!("--quick: {note}"));
                p
            }
            None => release::build_release(&mut commands)?,
        },
        None => release::build_release(&mut commands)?,
    };
    let setup = Setup {
        root: &root,
        work: &work,
        cpus: &ctx.server,
        nofile,
    };
    let tls = if want_tls && !args.sweep_only {
        if !has_tls(&bin)? {
            notes.push("--tls: this shardhttpd has no TLS listener; TLS rows skipped".into());
            None
        } else if servers::installed("openssl").is_none() {
            notes.push(
                "--tls: openssl is not installed to make a certificate; TLS rows skipped".into(),
            );
            None
        } else {
            Some(servers::make_cert(&work, args.tls_key, &mut commands)?)
        }
    } else {
        None
    };
    if tls.is_none() {
        plan.cells.retain(|c| !c.mode.is_tls());
    }
    let mut running: Vec<Server> = Vec::new();
    // Backends this shardhttpd cannot run: (server name, why), reported
    // cell by cell as unsupported.
    let mut unsupported: Vec<(String, String)> = Vec::new();
    if !args.sweep_only {
        let knows_io = has_flag(&bin, "--io")?;
        let backends: Vec<Option<servers::Io>> = match &args.io {
            None => vec![None],
            Some(list) => {
                let mut l = list.clone();
                l.sort();
                l.dedup();
                l.into_iter().map(Some).collect()
            }
        };
        for io in backends {
            let name = match io {
                None => "shardhttpd".to_owned(),
                Some(io) => format!("shardhttpd-{}", io.name()),
            };
            let flag = match io {
                // A binary without the flag has epoll alone: run it
                // without the flag, and say so.
                Some(servers::Io::Epoll) if !knows_io => {
                    notes.push(format!(
                        "{name}: this shardhttpd has no --io flag; epoll, its only backend, runs without it"
                    ));
                    None
                }
                Some(servers::Io::Uring) if !knows_io => {
                    let why = format!(
                        "{UNSUPPORTED}: this shardhttpd has no --io flag (no io_uring backend)"
                    );
                    eprintln!("{name}: {why}");
                    notes.push(format!("{name}: {why}"));
                    unsupported.push((name, why));
                    continue;
                }
                other => other,
            };
            match servers::start_shardhttpd(&bin, &setup, 1, "hash", &name, tls.as_ref(), flag) {
                Ok((s, _)) => running.push(s),
                Err(e) if flag.is_some() => {
                    let why = format!(
                        "{UNSUPPORTED}: it did not start with --io {}: {e}",
                        io.map_or("", |i| i.name())
                    );
                    eprintln!("{name}: {why}");
                    notes.push(format!("{name}: {why}"));
                    unsupported.push((name, why));
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(b) = &args.baseline_bin {
            let tls = tls.as_ref().filter(|_| has_tls(b).unwrap_or(false));
            let name = "shardhttpd-baseline";
            let (base, _) = servers::start_shardhttpd(b, &setup, 1, "hash", name, tls, None)?;
            running.push(base);
        }
        running.push(servers::start_floor(
            &setup,
            servers::Io::Epoll,
            tls.as_ref(),
        )?);
        match floor_uring::available() {
            Ok(()) => running.push(servers::start_floor(
                &setup,
                servers::Io::Uring,
                tls.as_ref(),
            )?),
            Err(why) => {
                let n = format!("SKIP floor-uring: io_uring is not available here ({why})");
                eprintln!("{n}");
                notes.push(n);
            }
        }
    }
    if args.no_peers || args.sweep_only {
        notes.push("no peer servers measured".into());
    } else {
        for peer in servers::PEERS {
            if servers::installed(peer).is_none() {
                let n = format!("SKIP {peer}: not installed (apt-get install {peer})");
                eprintln!("{n}");
                notes.push(n);
                continue;
            }
            match servers::start_peer(peer, &setup, tls.as_ref()) {
                Ok(s) => {
                    if tls.is_some() && s.tls_port.is_none() {
                        notes.push(format!(
                            "{peer} has no TLS module installed: no TLS rows for it"
                        ));
                    }
                    running.push(s)
                }
                Err(e) => {
                    let n = format!("SKIP {peer}: it did not start or serve the documents: {e}");
                    eprintln!("{n}");
                    notes.push(n);
                }
            }
        }
    }
    for s in &mut running {
        commands.push(format!("# {} (port {})\n{}", s.name, s.port, s.command));
        if let Some(lm) = &s.last_modified {
            let a = servers::fetch(
                s.port,
                "GET",
                docs::SMALL.path,
                &format!("If-Modified-Since: {lm}\r\n"),
            )?;
            if a.status != 304 {
                notes.push(format!(
                    "{} answers the exact If-Modified-Since with {}, not 304",
                    s.name, a.status
                ));
            }
        }
    }
    let names: Vec<String> = running.iter().map(|s| s.name.clone()).collect();
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
    // Cell by cell; within a cell, round by round; within a round, every
    // server in turn (an unsupported one once, in its place).
    let mut jobs: Vec<(Cell, Target, usize)> = Vec::new();
    for c in &plan.cells {
        let reference = running.iter().find(|s| s.name.starts_with("shardhttpd"));
        for round in 1..=rounds {
            if round == 1 && reference.is_none() {
                jobs.extend((0..unsupported.len()).map(|u| (*c, Target::Unsupported(u), 0)));
            }
            for (i, s) in running.iter().enumerate() {
                if c.applies_to(&s.name) && can_serve(c, s) {
                    jobs.push((*c, Target::Running(i), round));
                }
                let first_shard = reference.is_some_and(|r| r.name == s.name);
                if first_shard && round == 1 && can_serve(c, s) {
                    jobs.extend((0..unsupported.len()).map(|u| (*c, Target::Unsupported(u), 0)));
                }
            }
        }
    }
    let measured = jobs
        .iter()
        .filter(|(_, t, _)| matches!(t, Target::Running(_)))
        .count();
    let sweep_warning = plot::sweep_warning(ctx.server.len());
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
        if let Some(w) = &sweep_warning {
            eprintln!("WARNING: {w}");
            notes.push(w.clone());
        }
    }
    let total = measured + 2 * sweep_shards.len() * rounds;
    let expected: f64 = jobs
        .iter()
        .filter(|(_, t, _)| matches!(t, Target::Running(_)))
        // A traced pass (`--syscalls`, round 1) is the cell again.
        .map(|(c, _, r)| {
            let traced = if trace && *r == 1 { 2.0 } else { 1.0 };
            traced * cell_duration(duration, c.concurrency, somaxconn).as_secs_f64() + 0.2
        })
        .sum::<f64>()
        + 2.0 * (sweep_shards.len() * rounds) as f64 * (duration.as_secs_f64() + 1.5);
    eprintln!(
        "{} cells ({} matrix over {}, {} sweep; {} round{}), about {} at {:.0} s per cell",
        total,
        measured,
        names.join(", "),
        2 * sweep_shards.len() * rounds,
        rounds,
        if rounds == 1 { "" } else { "s" },
        hms(expected),
        duration.as_secs_f64()
    );
    if args.dry_run {
        for (c, t, round) in &jobs {
            match t {
                Target::Running(i) => {
                    eprintln!("  {} {} (round {round})", c.label(), running[*i].name)
                }
                Target::Unsupported(u) => {
                    eprintln!(
                        "  {} {}: {}",
                        c.label(),
                        unsupported[*u].0,
                        unsupported[*u].1
                    )
                }
            }
        }
        return Ok(true);
    }

    let mut csv = Csv::create(&out.join("results.csv"))?;
    let mut rows: Vec<Row> = Vec::new();
    let mut done = 0usize;
    let loop_start = Instant::now();
    let mut complete = true;
    // Each server's last h2 requests/s, by the cell's label (the same cell
    // in an earlier round), by shape (another document at the same -c and
    // -m) and by mode: sizes the request count of its h2load cells at high
    // concurrency, the closest estimate first.
    let mut h2_rates: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
    let h2_keys = |server: &str, cell: &Cell| {
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
    };
    let progress = |done: usize, label: &str, row: &Row| {
        let elapsed = loop_start.elapsed().as_secs_f64();
        let left = (total - done) as f64 * (elapsed / done as f64);
        eprintln!(
            "[{done}/{total}] {label}: {} rps, p50 {:.2} ms, p99 {}, {:.2} µs/req, {} errors, client {:.0}% busy · {} left",
            rps_text(row.outcome.rps),
            row.outcome.p50_ms,
            report::ms(row.outcome.p99_ms, " ms"),
            row.server_cpu_us_per_req,
            row.outcome.errors,
            row.client_cpu_busy_pct,
            hms(left)
        );
    };
    for (cell, target, round) in &jobs {
        if procs::interrupted() {
            complete = false;
            break;
        }
        let i = match target {
            Target::Running(i) => i,
            Target::Unsupported(u) => {
                let (name, why) = &unsupported[*u];
                let row = Row {
                    section: "matrix".into(),
                    server: name.clone(),
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
                    note: why.clone(),
                    round: 0,
                    ..Row::default()
                };
                csv.append(&row)?;
                rows.push(row);
                continue;
            }
        };
        let s = &mut running[*i];
        if !s.alive() {
            return Err(io::Error::other(format!(
                "{} died; see {}",
                s.name,
                work.join(format!("{}.log", s.name)).display()
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
            duration: cell_duration(ctx.duration, cell.concurrency, somaxconn),
            client_cpus: &ctx.client,
            last_modified: s.last_modified.as_deref(),
            work: &ctx.work,
            requests: (cell.tool == Tool::H2load && cell.concurrency >= load::H2LOAD_BY_COUNT)
                .then(|| {
                    let rate = h2_keys(&s.name, cell)
                        .iter()
                        .find_map(|k| h2_rates.get(k).copied());
                    let secs = cell_duration(ctx.duration, cell.concurrency, somaxconn);
                    load::h2load_requests(cell.concurrency, rate, secs.as_secs_f64())
                }),
        };
        let label = round_label(format!("{} {}", cell.label(), s.name), *round, rounds);
        let Some(mut row) = measure(&ctx, &mut commands, s.pid(), 1, &spec, &label)? else {
            complete = false;
            break;
        };
        if trace && *round == 1 {
            match syscalls::trace(&mut commands, s.pid(), &spec, &label)? {
                None => complete = false,
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
        done += 1;
        progress(done, &label, &row);
        csv.append(&row)?;
        rows.push(row);
    }
    // The peers are done: free their CPU before the sweep.
    drop(running);

    'sweep: for round in 1..=rounds {
        for &n in &sweep_shards {
            for steer in ["hash", "cpu"] {
                if !complete || procs::interrupted() {
                    complete = false;
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
                    complete = false;
                    break 'sweep;
                };
                done += 1;
                progress(done, &label, &row);
                csv.append(&row)?;
                rows.push(row);
            }
        }
    }

    let plots = plot::all(&rows, &out);
    let machine = machine(&ctx, &bin, nofile, cap);
    fs::write(out.join("machine.md"), &machine)?;
    fs::write(
        out.join("summary.csv"),
        report::summary_csv(&report::summarize(&rows)),
    )?;
    fs::write(out.join("commands.txt"), commands.join("\n") + "\n")?;
    let mut md = format!(
        "# shardbench results\n\n{}\n\nCommand: `{}`\n\n",
        if complete {
            "Complete run."
        } else {
            "**Interrupted**: only the cells finished are here."
        },
        commands[0]
    );
    md.push_str(&format!(
        "{} s per cell; server CPUs {}, client CPUs {} (wrk -t{}); one worker per server in the matrix. \
         Time: {}.\n\n",
        duration.as_secs_f64(),
        procs::cpu_list(&ctx.server[..1]),
        procs::cpu_list(&ctx.client),
        ctx.client.len(),
        hms(started.elapsed().as_secs_f64()),
    ));
    if !notes.is_empty() {
        md.push_str("Notes:\n\n");
        for n in &notes {
            md.push_str(&format!("- {n}\n"));
        }
        md.push('\n');
    }
    md.push_str(&report::markdown(&rows));
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
    md.push_str(&machine);
    fs::write(out.join("results.md"), md)?;
    eprintln!(
        "wrote {} rows, results.md, {} plots, machine.md and commands.txt to {} in {}",
        rows.len(),
        plots.len(),
        out.display(),
        hms(started.elapsed().as_secs_f64())
    );
    Ok(complete)
}

/// What a job measures: a started server, or a server that cannot run
/// (an index into the unsupported list), reported without a measurement.
#[derive(Debug, Clone, Copy)]
enum Target {
    Running(usize),
    Unsupported(usize),
}

/// Whether server `s` has what cell `c` needs (TLS, h2, h2c).
fn can_serve(c: &Cell, s: &Server) -> bool {
    (!c.mode.is_tls() || s.tls_port.is_some())
        && (c.mode != Mode::H2 || s.h2)
        && (c.mode != Mode::H2c || s.h2c_port.is_some())
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
