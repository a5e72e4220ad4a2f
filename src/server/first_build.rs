//! The first snapshot: built on its own thread while start-up reports
//! progress and watches for signals; for a large root, the background
//! builds that follow it (files into memory, compressed variants).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::cache::Store;
use crate::preflight::SetupError;

/// Tries at each background build of a large root (the load of one that
/// started from disk, its compressed variants): a deploy racing it can make
/// the walk fail. And the pause between them.
const BACKGROUND_ATTEMPTS: u32 = 5;
const BACKGROUND_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How often the start-up log says the first build is still running.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(3);

/// Run a background build until it publishes (logging `done` with the
/// generation) or fails [`BACKGROUND_ATTEMPTS`] times (logging `failed`
/// each time); whether it published.
fn retry_background(build: impl Fn() -> anyhow::Result<u64>, done: &str, failed: &str) -> bool {
    for attempt in 1..=BACKGROUND_ATTEMPTS {
        match build() {
            Ok(generation) => {
                tracing::info!("{done} generation={generation}");
                return true;
            }
            Err(e) => tracing::error!(attempt, error = format!("{e:#}"), "{failed}"),
        }
        std::thread::sleep(BACKGROUND_RETRY);
    }
    false
}

/// A first build that served from disk or left out the compressed
/// variants finishes on the `background-build` thread.
pub(super) fn spawn_background_build(store: &Arc<Store>) -> anyhow::Result<()> {
    if store.load_pending() || store.compress_pending() {
        let store = Arc::clone(store);
        std::thread::Builder::new()
            .name("background-build".into())
            .spawn(move || {
                if store.load_pending() {
                    tracing::info!("serving files from disk; loading them into memory");
                    let loaded = retry_background(
                        || store.build_loaded(),
                        "files loaded into memory",
                        "loading files into memory failed; serving them from disk",
                    );
                    if !loaded {
                        return;
                    }
                }
                if store.compress_pending() {
                    tracing::info!("serving identity bodies; building compressed variants");
                    retry_background(
                        || store.build_compressed(),
                        "compressed variants ready",
                        "building compressed variants failed; serving identity bodies",
                    );
                }
            })
            .context("spawning the background build thread")?;
    }
    Ok(())
}

/// One site's first build: what it is built with, and its watcher's hook
/// (which sees each directory before the walk lists it).
pub(super) struct SiteBuild {
    pub label: String,
    pub opts: crate::cache::BuildOptions,
    pub hook: Option<Box<crate::cache::DirHook>>,
}

/// Build every site's first snapshot, one after another, on a thread of
/// their own while this one reports progress and watches for signals.
/// `None`: a stop signal came first.
pub(super) fn first_build(
    sites: Vec<SiteBuild>,
    signals: &mut Signals,
) -> anyhow::Result<Option<Vec<Arc<Store>>>> {
    let started = Instant::now();
    let several = sites.len() > 1;
    let build = std::thread::Builder::new()
        .name("first-build".into())
        .spawn(move || {
            let mut stores = Vec::with_capacity(sites.len());
            for site in sites {
                let root = site.opts.root.display().to_string();
                if several {
                    tracing::info!(site = site.label, %root, "building the first snapshot");
                } else {
                    tracing::info!(%root, "building the first snapshot");
                }
                let store = match Store::open_watching(site.opts, site.hook.as_deref()) {
                    Ok(store) => store,
                    Err(e) if several => return Err(e.context(format!("site {}", site.label))),
                    Err(e) => return Err(e),
                };
                stores.push(Arc::new(store));
            }
            anyhow::Ok(stores)
        })
        .context("spawning the first build")?;
    let read_before = read_bytes();
    let mut next_progress = started + PROGRESS_INTERVAL;
    while !build.is_finished() {
        for signal in signals.pending() {
            match signal {
                SIGHUP => tracing::info!(
                    "SIGHUP received during the first build; that build already reads the current files"
                ),
                SIGUSR1 => {}
                SIGUSR2 => tracing::warn!(
                    "SIGUSR2 during the first build ignored: nothing to upgrade until serving"
                ),
                _ => {
                    tracing::info!(signal, "stop signal during the first build; exiting");
                    return Ok(None);
                }
            }
        }
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_INTERVAL;
            match (read_before, read_bytes()) {
                (Some(a), Some(b)) => tracing::info!(
                    elapsed_s = started.elapsed().as_secs(),
                    read = %crate::config::units::format_size_approx(b.saturating_sub(a)),
                    "still building the first snapshot"
                ),
                _ => tracing::info!(
                    elapsed_s = started.elapsed().as_secs(),
                    "still building the first snapshot"
                ),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stores = build
        .join()
        .map_err(|_| anyhow::anyhow!("the first snapshot build panicked"))?
        .map_err(|e| {
            anyhow::Error::new(SetupError(format!("building the first snapshot: {e:#}")))
        })?;
    Ok(Some(stores))
}

/// Bytes this process has read so far (`rchar` in `/proc/self/io`), for
/// progress lines; `None` where the kernel does not offer it.
fn read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
}
