//! `shardhttpd`: parse flags, load the configuration, then `--check` it or
//! run the server; the exit status tells which kind of failure stopped it
//! (documented in `--help` and deploy/README.md).

use std::io::IsTerminal;
use std::process::ExitCode;

use shardhttpd::config::{Config, Settings, EXIT_CONFIG};
use shardhttpd::preflight::{self, Preflight};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let flags = Settings::from_args();
    let check = flags.check;
    let config = match Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shardhttpd: configuration error: {e:#}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if check {
        return run_check(&config);
    }
    match shardhttpd::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if preflight::is_setup_error(&e) => {
            tracing::error!("cannot start: {e:#}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            tracing::error!("fatal: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--check`: everything a start would try before serving, without serving.
fn run_check(config: &Config) -> ExitCode {
    let preflight = Preflight {
        check_only: true,
        ..Preflight::default()
    };
    match preflight.run(config) {
        Ok((_claims, notes)) => {
            for note in notes {
                println!("note: {note}");
            }
            println!(
                "configuration ok: {} shard(s) on CPUs {:?}, root {}, listen {}, admin {}",
                config.cpus.len(),
                config.cpus,
                config.root.display(),
                config
                    .listen
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                config.admin
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shardhttpd: check failed: {e:#}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}
