//! `shardhttpd`: parse flags, load the configuration, then `--check` it or
//! run the server; the exit status tells which kind of failure stopped it
//! (documented in `--help` and deploy/README.md).

use std::io::IsTerminal;
use std::process::ExitCode;

use shardhttpd::config::{Config, Settings, EXIT_CONFIG};
use shardhttpd::preflight::{self, Preflight};

fn main() -> ExitCode {
    init_logging();

    let flags = Settings::from_args();
    // Before the configuration is loaded: a reload compares against this.
    let source = shardhttpd::reload::Source::capture(std::env::args_os().skip(1).collect());
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

/// Logs go to stderr, filtered by `RUST_LOG` (default `info`). Events
/// inside the start-up build that repeats the identity build with
/// compression are dropped: that build would log the same lines again.
fn init_logging() {
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;
    let env = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let not_repeated = tracing_subscriber::filter::DynFilterFn::new(|meta, cx| {
        meta.is_span()
            || cx.lookup_current().is_none_or(|span| {
                span.scope()
                    .all(|s| s.name() != shardhttpd::cache::store::REPEAT_BUILD_SPAN)
            })
    });
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(not_repeated);
    tracing_subscriber::registry().with(fmt).with(env).init();
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
