//! `shardhttpd`: parse flags, load the configuration, run the server.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use shardhttpd::config::{Config, Settings};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let flags = Settings::parse();
    let check = flags.check;
    let config = match Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shardhttpd: configuration error: {e:#}");
            return ExitCode::from(2);
        }
    };
    if check {
        if let Some(tls) = &config.tls {
            let provider = shardhttpd::tls::provider();
            if let Err(e) = shardhttpd::tls::load_all(&tls.pairs, &provider) {
                eprintln!("shardhttpd: configuration error: {e:#}");
                return ExitCode::from(2);
            }
        }
        println!(
            "configuration ok: {} shard(s) on CPUs {:?}, root {}",
            config.cpus.len(),
            config.cpus,
            config.root.display()
        );
        return ExitCode::SUCCESS;
    }
    match shardhttpd::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("fatal: {e:#}");
            ExitCode::FAILURE
        }
    }
}
