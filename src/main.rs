//! `shardhttpd`: parse flags, load the configuration, then `--check` it or
//! run the server; the exit status tells which kind of failure stopped it
//! (documented in `--help` and deploy/README.md).

use std::process::ExitCode;

use shardhttpd::config::{Config, Settings, UnknownHost, EXIT_CONFIG};
use shardhttpd::logging;
use shardhttpd::preflight::{self, Preflight};

fn main() -> ExitCode {
    let flags = match Settings::from_args() {
        Ok(flags) => flags,
        Err(e) => return usage_error(e),
    };
    let log = shardhttpd::config::log_options(&flags, std::env::var("RUST_LOG").ok().as_deref());
    logging::init(&log);
    let check = flags.check;
    // Before the configuration is loaded: a reload compares against this.
    let source = shardhttpd::reload::Source::capture(std::env::args_os().skip(1).collect());
    let config = match Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            logging::config_error(log.format, "configuration error", &e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if check {
        return run_check(&config, log.format);
    }
    match shardhttpd::server::run(config, source) {
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

/// A command line that clap refused (or `--help`, `--version`): clap's
/// own output, or with `--log-format json` among the arguments, a JSON
/// line like every other configuration error, so a log pipeline that
/// expects JSON from the first line gets it; a refused line exits 2 either
/// way.
fn usage_error(e: clap::Error) -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if !e.use_stderr() || !Settings::json_log_requested(&args) {
        e.exit();
    }
    logging::init(&logging::Options {
        format: logging::Format::Json,
        ..logging::Options::default()
    });
    let line = anyhow::anyhow!(Settings::usage_error_line(&e));
    logging::config_error(logging::Format::Json, "configuration error", &line);
    ExitCode::from(EXIT_CONFIG)
}

/// `--check`: everything a start would try before serving, without serving.
fn run_check(config: &Config, format: logging::Format) -> ExitCode {
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
            for site in &config.sites {
                println!(
                    "site {}: names {}, root {}",
                    site.label,
                    site.names.join(" "),
                    site.root.display()
                );
            }
            if !config.sites.is_empty() {
                println!(
                    "unknown hosts: {}",
                    match config.unknown_host {
                        UnknownHost::Default => "the default site (root) answers",
                        UnknownHost::Misdirected => "421 Misdirected Request",
                        UnknownHost::NotFound => "404 Not Found",
                    }
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            logging::config_error(format, "check failed", &e);
            ExitCode::from(EXIT_CONFIG)
        }
    }
}
