//! Signals turned into actions once serving: SIGHUP queues a reload and
//! rebuild on the `rebuild` thread, SIGUSR1 reopens the access log, SIGUSR2
//! starts a binary upgrade on the `upgrade` thread, and a stop signal ends
//! the loop. The signal thread never does slow work itself.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::cache::Store;
use crate::config::Config;
use crate::metrics::access_log::AccessLog;
use crate::metrics::Metrics;
use crate::notify::notify;
use crate::reload;
use crate::upgrade::{self, Handed, Passed, QuicPassed};

/// What SIGUSR2 starts: the binary and its arguments.
pub(super) struct Relaunch {
    binary: PathBuf,
    args: Vec<std::ffi::OsString>,
}

impl Relaunch {
    pub(super) fn resolve(config: &Config, source: &reload::Source) -> anyhow::Result<Relaunch> {
        // Resolved now: once a deploy replaces the file, /proc/self/exe names the
        // deleted old binary, and SIGUSR2 must start the new one.
        let binary = match &config.upgrade_binary {
            Some(path) => path.clone(),
            None => std::fs::read_link("/proc/self/exe").context("resolving /proc/self/exe")?,
        };
        let args: Vec<std::ffi::OsString> = source.args().to_vec();
        Ok(Relaunch { binary, args })
    }
}

/// The SIGUSR2 upgrade in flight, between the signal loop and the thread
/// that waits for the new process.
pub(super) struct UpgradeState {
    running: AtomicBool,
    /// Set on shutdown: a new process not ready yet is stopped.
    pub(super) cancel: AtomicBool,
    /// The new process is ready: this one drains.
    pub(super) done: std::sync::Mutex<Option<upgrade::Ready>>,
    /// The next upgrade applies a changed configuration (SIGHUP), not a
    /// new binary (SIGUSR2): its outcome is also a reload's.
    reload: AtomicBool,
}

impl UpgradeState {
    pub(super) fn new() -> UpgradeState {
        UpgradeState {
            running: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            done: std::sync::Mutex::new(None),
            reload: AtomicBool::new(false),
        }
    }
}

/// What the signal loop acts with.
pub(super) struct Actions<'a> {
    pub(super) config: &'a Config,
    pub(super) relaunch: &'a Relaunch,
    pub(super) access_log: Option<&'a AccessLog>,
    pub(super) rebuild_tx: &'a SyncSender<()>,
    pub(super) upgrade: &'a Arc<UpgradeState>,
    pub(super) metrics: &'a Arc<Metrics>,
    pub(super) handover: &'a [(Passed, TcpListener)],
    /// The address claims (fd, address), handed over with the sockets.
    pub(super) claims: &'a [(RawFd, SocketAddr)],
    /// HTTP/3's sockets, handed over too.
    pub(super) quic: Option<&'a QuicPassed>,
}

/// How the signal loop ended: the signal that stopped it (none when a
/// finished upgrade closed it) and the upgrade thread, if one ran.
pub(super) struct Stopped {
    pub(super) last_signal: Option<i32>,
    pub(super) upgrade_thread: Option<JoinHandle<()>>,
}

/// Act on signals until a stop signal, or until a finished upgrade closes
/// the loop.
pub(super) fn wait_for_signals(
    signals: &mut Signals,
    actions: Actions<'_>,
) -> anyhow::Result<Stopped> {
    let mut upgrade_thread = None;
    let mut last_signal = None;
    let signals_handle = signals.handle();
    for signal in signals.forever() {
        match signal {
            SIGUSR1 => {
                if let Some(log) = actions.access_log {
                    log.reopen();
                }
            }
            SIGHUP => {
                // Full: a rebuild is already queued, and it will see this
                // change too.
                let _ = actions.rebuild_tx.try_send(());
            }
            SIGUSR2 => {
                let upgrade = actions.upgrade;
                if upgrade.running.swap(true, Ordering::AcqRel) {
                    if upgrade.reload.swap(false, Ordering::AcqRel) {
                        tracing::error!(
                            "reload: an upgrade is already in progress; the changed configuration is not applied (reload again once it is done)"
                        );
                        actions
                            .metrics
                            .config_reloads
                            .with_label_values(&["failed"])
                            .inc();
                    } else {
                        tracing::warn!("upgrade already in progress; SIGUSR2 ignored");
                    }
                    continue;
                }
                if let Some(previous) = upgrade_thread.take() {
                    let _ = std::thread::JoinHandle::join(previous);
                }
                if upgrade.reload.load(Ordering::Acquire) {
                    tracing::info!("reload: applying the changed configuration by handover");
                } else {
                    tracing::info!("SIGUSR2: starting the binary upgrade");
                }
                let passed: Vec<Passed> = actions.handover.iter().map(|(p, _)| *p).collect();
                upgrade_thread = Some(spawn_upgrade(
                    actions.relaunch.binary.clone(),
                    actions.relaunch.args.clone(),
                    Handed {
                        sockets: passed,
                        claims: actions.claims.to_vec(),
                        quic: actions.quic.cloned(),
                    },
                    actions.config.upgrade_timeout,
                    Arc::clone(upgrade),
                    Arc::clone(actions.metrics),
                    signals_handle.clone(),
                )?);
            }
            _ => {
                last_signal = Some(signal);
                break;
            }
        }
    }
    Ok(Stopped {
        last_signal,
        upgrade_thread,
    })
}

/// SIGHUP's work (certificate reload, snapshot rebuild) runs on its own
/// thread: the signal thread must stay free for SIGTERM, which a long
/// rebuild would otherwise hold up past the service manager's patience.
/// One queued request coalesces a burst.
pub(super) fn spawn_rebuild_thread(
    stores: &[Arc<Store>],
    tls: Option<&crate::tls::Tls>,
    metrics: &Arc<Metrics>,
    upgrade: &Arc<UpgradeState>,
    source: reload::Source,
) -> anyhow::Result<SyncSender<()>> {
    let (rebuild_tx, rebuild_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let stores = stores.to_vec();
    let certs = tls.map(|t| Arc::clone(&t.store));
    let metrics = Arc::clone(metrics);
    let upgrade = Arc::clone(upgrade);
    let mut source = source;
    std::thread::Builder::new()
        .name("rebuild".into())
        .spawn(move || {
            for () in rebuild_rx {
                if reload_on_hup(&mut source, &metrics, &upgrade) {
                    // The new process builds its own snapshot.
                    continue;
                }
                if let Some(certs) = &certs {
                    certs.reload();
                }
                match stores.as_slice() {
                    [store] => rebuild_on_hup(store),
                    all => rebuild_sites_on_hup(all),
                }
            }
        })
        .context("spawning the rebuild thread")?;
    Ok(rebuild_tx)
}

/// SIGHUP's configuration half: read the file again. A valid change starts
/// the handover (returns true: the new process builds its own snapshot);
/// an invalid one is refused, logged with the error `--check` prints, and
/// the running configuration keeps serving.
fn reload_on_hup(source: &mut reload::Source, metrics: &Metrics, upgrade: &UpgradeState) -> bool {
    match source.examine() {
        reload::Outcome::Unchanged => {
            metrics
                .config_reloads
                .with_label_values(&["unchanged"])
                .inc();
            false
        }
        reload::Outcome::Invalid(e) => {
            tracing::error!(
                "reload refused: configuration error: {e:#}; the running configuration keeps serving"
            );
            metrics.config_reloads.with_label_values(&["invalid"]).inc();
            false
        }
        reload::Outcome::Changed if std::process::id() == 1 => {
            // A container's PID 1: the container ends when it exits, so a
            // handover would take the new process down with it.
            tracing::error!(
                "reload: the configuration changed, but this process is PID 1 (a container's init) and cannot hand over; roll out a new container to apply it. The running configuration keeps serving"
            );
            metrics.config_reloads.with_label_values(&["failed"]).inc();
            false
        }
        reload::Outcome::Changed => {
            tracing::info!("reload: the configuration changed and is valid");
            upgrade.reload.store(true, Ordering::Release);
            // The signal loop starts the handover, as for SIGUSR2 (and
            // refuses it while one is already in flight).
            if let Err(e) = signal_hook::low_level::raise(SIGUSR2) {
                upgrade.reload.store(false, Ordering::Release);
                tracing::error!(error = %e, "reload: cannot start the handover");
                metrics.config_reloads.with_label_values(&["failed"]).inc();
            }
            true
        }
    }
}

/// SIGHUP: say it arrived, rebuild, and say whether anything changed.
fn rebuild_on_hup(store: &Store) {
    let before = store.load().generation;
    tracing::info!(
        generation = before,
        root = %store.root().display(),
        "SIGHUP received; rebuilding the snapshot"
    );
    match store.rebuild() {
        Ok(now) if now == before => {
            tracing::info!("SIGHUP rebuild: snapshot unchanged generation={now}")
        }
        Ok(now) => tracing::info!("SIGHUP rebuild: snapshot changed generation={now}"),
        Err(e) => tracing::error!(
            error = format!("{e:#}"),
            "snapshot rebuild failed; serving the old one"
        ),
    }
}

/// SIGHUP with `[[sites]]`: every site rebuilt in turn, a failure logged
/// with its root, and one line for the whole (a line a site would be
/// thousands a signal).
fn rebuild_sites_on_hup(stores: &[Arc<Store>]) {
    tracing::info!(
        sites = stores.len(),
        "SIGHUP received; rebuilding every site's snapshot"
    );
    let (mut changed, mut failed) = (0, 0);
    for store in stores {
        let before = store.load().generation;
        match store.rebuild() {
            Ok(now) if now == before => {}
            Ok(_) => changed += 1,
            Err(e) => {
                failed += 1;
                tracing::error!(
                    root = %store.root().display(),
                    error = format!("{e:#}"),
                    "snapshot rebuild failed; serving the old one"
                );
            }
        }
    }
    tracing::info!(
        sites = stores.len(),
        changed,
        failed,
        "SIGHUP rebuild: every site's snapshot rebuilt"
    );
}

/// The thread that starts the new binary and waits for it: on success it
/// ends the signal loop (this process then drains), on failure this process
/// keeps serving.
fn spawn_upgrade(
    binary: PathBuf,
    args: Vec<std::ffi::OsString>,
    handed: Handed,
    timeout: Duration,
    state: Arc<UpgradeState>,
    metrics: Arc<Metrics>,
    signals: signal_hook::iterator::Handle,
) -> anyhow::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("upgrade".into())
        .spawn(move || {
            let reload = state.reload.swap(false, Ordering::AcqRel);
            let env: &[(&str, &str)] = if reload {
                &[(reload::RELOAD_ENV, "1")]
            } else {
                &[]
            };
            match upgrade::start(&binary, &args, &handed, timeout, &state.cancel, env) {
                Ok(ready) => {
                    // The success is counted by the new process.
                    tracing::info!(
                        pid = ready.pid,
                        "upgrade: the new process is ready; draining this one"
                    );
                    *state.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(ready);
                    signals.close();
                }
                Err(e) => {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "upgrade failed; this process keeps serving"
                    );
                    metrics.upgrades.with_label_values(&["failed"]).inc();
                    if reload {
                        metrics.config_reloads.with_label_values(&["failed"]).inc();
                    }
                    // In case the new process named itself the main one.
                    notify(&format!("MAINPID={}", std::process::id()));
                    state.running.store(false, Ordering::Release);
                }
            }
        })
        .context("spawning the upgrade thread")
}
