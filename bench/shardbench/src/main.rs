//! shardbench: the scaling study in one command. It builds shardhttpd in
//! release, writes the classic document set, starts shardhttpd (once per
//! `--io` backend), the floors (a fixed-response responder on epoll and on
//! io_uring) and every installed peer pinned to the server CPUs, runs the
//! matrix (concurrency × keep-alive/close × file size, pipelining, 304,
//! HEAD; h2 and h3 rows) with wrk (ab for the classic rows, h2load for
//! HTTP/2, its own `h3load` for HTTP/3) pinned to the client CPUs,
//! `--rounds` times with the servers interleaved, sweeps shardhttpd's shard
//! count with both steering modes, and writes results.csv, summary.csv,
//! results.md, SVG plots, the machine description and the exact commands
//! into `--out`.

mod docs;
mod fleet;
mod floor;
mod floor_tls;
mod floor_uring;
mod h3load;
mod load;
mod machine;
mod matrix;
mod measure;
mod plot;
mod procs;
mod release;
mod report;
mod servers;
mod study;
mod sweep;
mod syscalls;

use std::process::ExitCode;

/// A test that cannot run here. Under `SHARDHTTPD_TEST_REQUIRE=all`
/// (`.ci/run` sets it; the server's suites honour it too, in
/// tests/support) it fails with `note`; otherwise `note` goes to stderr,
/// past libtest's capture, and the caller returns.
#[cfg(test)]
#[track_caller]
fn skip_test(note: &str) {
    if std::env::var("SHARDHTTPD_TEST_REQUIRE").is_ok_and(|v| v == "all") {
        panic!("{note}\n(SHARDHTTPD_TEST_REQUIRE=all: a test that cannot run fails)");
    }
    // Past libtest's capture (eprintln! is captured), as tests/support's
    // `loud` writes.
    let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("\n*** {note} ***\n\n"));
}

use clap::{Parser, Subcommand};

/// Run the scaling study (or, as `floor`, the floor responder; as
/// `h3load`, the HTTP/3 load generator).
#[derive(Debug, Parser)]
#[command(name = "shardbench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: study::Args,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve the fixed 100-byte response on ADDR (the study starts it).
    Floor(floor::Args),
    /// HTTP/3 load, as h2load makes HTTP/2 load (h2load's flags and
    /// report; the server's certificate is not verified).
    H3load(h3load::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tool = match cli.cmd {
        Some(Cmd::Floor(args)) => Some(("floor", args.serve())),
        Some(Cmd::H3load(args)) => Some(("h3load", args.run())),
        None => None,
    };
    if let Some((name, result)) = tool {
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    procs::catch_interrupts();
    match study::run(cli.run) {
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
