//! Start-up and lifecycle: check and claim the addresses, bind the admin
//! listener and one socket per shard and address, build every site's first
//! snapshot (reporting progress), start the shards, then turn signals into actions
//! (SIGHUP reloads the configuration and rebuilds, SIGUSR2 upgrades the
//! binary, SIGTERM/SIGINT drain and exit). A new process of an upgrade adopts the sockets its predecessor
//! handed over instead of binding them.

//!
//! [`run`] reads as the lifecycle, one stage a function: `claim` (adopt
//! inherited sockets, preflight), `bind_all` (the admin listener, answering
//! at once, and the shard sockets), `build` (every site's first snapshot
//! and its watcher), `serve` (the table of sites,
//! shards, standing threads, readiness), `signals::wait_for_signals`, then
//! `drain`. The shards' sockets are in `sockets`, the first build in
//! `first_build`, the signals' work in `signals`.

mod first_build;
mod signals;
mod sockets;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::cache::watch::Watcher;
use crate::cache::Store;
use crate::config::{Config, Steer};
use crate::conn::ConnConfig;
use crate::metrics::access_log::AccessLog;
use crate::metrics::{admin, Metrics};
use crate::notify::notify;
use crate::preflight::{self, Claims, Preflight, SetupError};
use crate::reload;
use crate::serve::sites::{Site, Sites};
use crate::shard::{self, ShardSpec, Shared};
use crate::sys::EventFd;
use crate::tls::Tls;
use crate::upgrade::{Inherited, Kind, Passed, QuicPassed};

use signals::{Actions, Relaunch, Stopped, UpgradeState};
use sockets::{Addrs, Listening, Lists};

pub use sockets::bind;

/// Run the server until a shutdown signal has been handled.
///
/// Start-up order: everything that can fail on configuration or
/// environment (claims on the addresses, the admin bind, the shard binds,
/// the access log) before the first snapshot build, so such errors come
/// in milliseconds; the admin listener answers `/healthz` (and `/readyz`
/// 503) while the build runs; the shard sockets start listening once the
/// snapshot is there.
pub fn run(config: Config, source: reload::Source) -> anyhow::Result<()> {
    // Before the first build allocates anything.
    crate::sys::fix_mmap_threshold();
    crate::sys::cap_arenas();
    log_start(&config);
    let relaunch = Relaunch::resolve(&config, &source)?;
    let claimed = claim(&config)?;
    let mut bound = bind_all(&config, claimed)?;
    let Some(built) = build(&config, &mut bound)? else {
        return Ok(());
    };
    let mut serving = serve(&config, source, bound, built)?;
    let stopped = signals::wait_for_signals(
        &mut serving.signals,
        Actions {
            config: &config,
            relaunch: &relaunch,
            access_log: serving.access_log.as_ref(),
            rebuild_tx: &serving.rebuild_tx,
            upgrade: &serving.upgrade,
            metrics: &serving.metrics,
            handover: &serving.handover,
            claims: &serving.claims.handover_list(),
            quic: serving.quic_handover.as_ref().map(|(passed, _)| passed),
        },
    )?;
    drain(&config, serving, stopped);
    Ok(())
}

/// What [`claim`] found: the addresses, what the process this one replaces
/// handed over, and the claims on the rest.
struct Claimed {
    inherited: Inherited,
    addrs: Addrs,
    /// Each address's sockets handed over (empty: none), in `addrs` order.
    adopted: Vec<Vec<TcpListener>>,
    adopted_admin: Option<TcpListener>,
    claims: Claims,
}

/// Adopt the sockets of the process this one replaces (if any), then run
/// the preflight on every other address.
fn claim(config: &Config) -> anyhow::Result<Claimed> {
    let mut inherited =
        Inherited::from_env().context("adopting the sockets of the process this one replaces")?;
    // Every listening address: `addrs[..plain]` are cleartext, the rest TLS
    // (in every shard's list).
    let mut all = config.listen.clone();
    let plain = all.len();
    if let Some(settings) = &config.tls {
        all.extend(&settings.listen);
    }
    let addrs = Addrs { all, plain };
    // Adopted before the preflight, which must neither claim nor probe the
    // addresses the old process still holds.
    let mut adopted: Vec<Vec<TcpListener>> = addrs
        .all
        .iter()
        .enumerate()
        .map(|(i, &addr)| inherited.take_listen(addr, addrs.kind_of(i)))
        .collect();
    let mut adopted_admin = inherited.take_admin(config.admin);
    inherited.close_rest();
    // systemd's sockets: each configured address it passed is taken like
    // an inherited one, but still claimed (nothing else holds the claim).
    let activated = sockets::take_activated(config, &addrs, &mut adopted, &mut adopted_admin)?;
    let preflight = Preflight {
        inherited: addrs
            .all
            .iter()
            .zip(&adopted)
            .filter(|(addr, a)| !a.is_empty() && !activated.listen.contains(addr))
            .map(|(&addr, _)| addr)
            .collect(),
        inherited_admin: adopted_admin.is_some() && !activated.admin,
        activated: activated.listen,
        activated_admin: activated.admin,
        ..Preflight::default()
    };
    let (mut claims, _) = preflight.run(config)?;
    claims.adopt(inherited.take_claims());
    Ok(Claimed {
        inherited,
        addrs,
        adopted,
        adopted_admin,
        claims,
    })
}

/// What [`bind_all`] set up before the first build.
struct Bound {
    inherited: Inherited,
    /// Port 0 replaced by the port picked.
    addrs: Addrs,
    claims: Claims,
    metrics: Arc<Metrics>,
    tls: Option<Tls>,
    /// The admin listener's duplicate, for a handover.
    admin_dup: TcpListener,
    /// Every site's store, for the admin thread, once the first build is
    /// done.
    published: Arc<OnceLock<Vec<Arc<Store>>>>,
    signals: Signals,
    per_shard: Vec<Lists>,
    access_log: Option<AccessLog>,
}

/// Load the certificates, bind the admin listener and start answering on
/// it, register the signals, bind every shard socket (not listening yet)
/// and open the access log.
fn bind_all(config: &Config, claimed: Claimed) -> anyhow::Result<Bound> {
    let Claimed {
        inherited,
        mut addrs,
        adopted,
        adopted_admin,
        mut claims,
    } = claimed;
    let metrics = Metrics::new(&config.cpus, config.metrics, config.site_labels());
    // At 0 from the start even without ACME, as every counter is.
    let acme_metrics = crate::acme::AcmeMetrics::new();
    for c in acme_metrics.collectors() {
        metrics.register(c);
    }
    let tls = load_tls(config, &metrics, acme_metrics)?;
    let admin_listener = match adopted_admin {
        Some(listener) => {
            tracing::info!("admin endpoint addr={} (inherited)", listener.local_addr()?);
            listener
        }
        None => {
            let listener = preflight::bind_admin(config.admin)?;
            if config.admin.port() == 0 {
                claims.add_picked(listener.local_addr()?);
            }
            listener
        }
    };
    let admin_dup = admin_listener.try_clone()?;
    let published: Arc<OnceLock<Vec<Arc<Store>>>> = Arc::new(OnceLock::new());
    spawn_admin(admin_listener, &metrics, &published)?;
    // Register before any shard runs, so an early signal is not lost.
    let signals = Signals::new([SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2])
        .context("installing signal handlers")?;

    let per_shard = sockets::bind_shards(config.cpus.len(), &mut addrs, adopted, &mut claims)?;

    let access_log = open_access_log(config, &metrics)?;
    Ok(Bound {
        inherited,
        addrs,
        claims,
        metrics,
        tls,
        admin_dup,
        published,
        signals,
        per_shard,
        access_log,
    })
}

/// The certificates, their metrics and their watcher, and the ACME thread
/// when `acme_domains` or a site's `acme = true` asks for it; `None` without TLS.
fn load_tls(
    config: &Config,
    metrics: &Metrics,
    acme_metrics: crate::acme::AcmeMetrics,
) -> anyhow::Result<Option<Tls>> {
    let Some(settings) = &config.tls else {
        return Ok(None);
    };
    if let Some(acme) = &config.acme {
        crate::acme::prepare(acme).context("preparing the ACME state directory")?;
    }
    let tls = Tls::new(settings).context("loading the TLS certificates")?;
    for c in tls.collectors() {
        metrics.register(c);
    }
    tls.spawn_watcher()
        .context("spawning the certificate watcher")?;
    if let Some(acme) = &config.acme {
        crate::acme::spawn(acme.clone(), Arc::clone(&tls.store), acme_metrics)
            .context("spawning the ACME thread")?;
    }
    Ok(Some(tls))
}

/// The admin thread: `/healthz` at once, `/readyz` 503 and no snapshot
/// figures until the first build publishes its store.
fn spawn_admin(
    listener: TcpListener,
    metrics: &Arc<Metrics>,
    published: &Arc<OnceLock<Vec<Arc<Store>>>>,
) -> anyhow::Result<()> {
    let metrics = Arc::clone(metrics);
    let published = Arc::clone(published);
    let source: admin::SnapshotSource = Box::new(move || {
        published
            .get()
            .map(|stores| stores.iter().map(|s| s.stats()).collect())
            .unwrap_or_default()
    });
    std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || admin::serve(listener, metrics, source))
        .context("spawning the admin thread")?;
    Ok(())
}

fn open_access_log(config: &Config, metrics: &Metrics) -> anyhow::Result<Option<AccessLog>> {
    let Some(path) = &config.access_log else {
        return Ok(None);
    };
    let log = AccessLog::open(
        path,
        config.access_log_format,
        &config.access_log_fields,
        Arc::clone(&metrics.access_log_dropped),
    )
    .map_err(|e| {
        anyhow::Error::new(SetupError(format!(
            "opening access log {}: {e}",
            path.display()
        )))
    })?;
    Ok(Some(log))
}

/// Every site's first snapshot (the default site's first), and the
/// watcher that saw each root while it was built.
struct Built {
    stores: Vec<Arc<Store>>,
    watchers: Vec<Option<Watcher>>,
}

/// Build every site's first snapshot and publish them to the admin
/// thread. `None`: a stop signal came first.
fn build(config: &Config, bound: &mut Bound) -> anyhow::Result<Option<Built>> {
    // Watches first: every change made during or after the initial walk is
    // then an event, and none falls between the walk and its watch.
    let mut watchers = Vec::new();
    let mut sites = Vec::new();
    for (label, opts) in config
        .site_labels()
        .into_iter()
        .zip(config.sites_build_options())
    {
        let watcher = config
            .watch
            .then(|| Watcher::establish(&opts.root, config.watch_options()));
        let hook = watcher.as_ref().and_then(|w| w.dir_hook());
        watchers.push(watcher);
        sites.push(first_build::SiteBuild { label, opts, hook });
    }
    let Some(stores) = first_build::first_build(sites, &mut bound.signals)? else {
        return Ok(None);
    };
    config
        .cache_control
        .warn_uncovered(stores[0].load().file_urls());
    for (site, store) in config.sites.iter().zip(&stores[1..]) {
        site.cache_control.warn_uncovered(store.load().file_urls());
    }
    bound
        .metrics
        .register(Box::new(stores[0].rebuild_duration.clone()));
    let _ = bound.published.set(stores.clone());
    Ok(Some(Built { stores, watchers }))
}

/// The table of sites the shards answer from: each site's snapshot,
/// settings and names.
fn site_table(config: &Config, stores: &[Arc<Store>], alt_svc: &str) -> Sites {
    let tls_lines = |hsts: &Option<String>| {
        let mut lines = hsts
            .as_ref()
            .map(|v| format!("Strict-Transport-Security: {v}\r\n"))
            .unwrap_or_default();
        lines.push_str(alt_svc);
        lines.into_bytes()
    };
    let settings = std::iter::once((&config.hsts, config.redirect_https))
        .chain(config.sites.iter().map(|s| (&s.hsts, s.redirect_https)));
    let list = config
        .site_labels()
        .into_iter()
        .zip(settings)
        .zip(stores)
        .map(|((label, (hsts, redirect_https)), store)| Site {
            label: label.into(),
            snapshot: store.shared(),
            tls_lines: tls_lines(hsts),
            redirect_https,
        })
        .collect();
    Sites::new(list, config.site_names.clone(), config.unknown_host)
}

/// The field section bound of HTTP/2 and HTTP/3 requests.
fn conn_max_section(config: &Config) -> usize {
    config.max_head_bytes
}

/// What [`serve`] leaves running, for the signal loop and the drain.
struct Serving {
    claims: Claims,
    metrics: Arc<Metrics>,
    signals: Signals,
    access_log: Option<AccessLog>,
    shared: Arc<Shared>,
    shards: Shards,
    /// What a SIGUSR2 upgrade hands over (see `sockets::handover_list`).
    handover: Vec<(Passed, TcpListener)>,
    /// HTTP/3's part of it (see `sockets::bind_quic`).
    quic_handover: Option<(QuicPassed, Vec<OwnedFd>)>,
    upgrade: Arc<UpgradeState>,
    rebuild_tx: std::sync::mpsc::SyncSender<()>,
}

/// Start the background build and the watcher, let every shard socket
/// listen, start the shards and the rebuild thread, and say that this
/// process is serving.
fn serve(
    config: &Config,
    source: reload::Source,
    bound: Bound,
    built: Built,
) -> anyhow::Result<Serving> {
    let Bound {
        mut inherited,
        addrs,
        claims,
        metrics,
        tls,
        admin_dup,
        published: _,
        signals,
        per_shard,
        access_log,
    } = bound;
    let Built { stores, watchers } = built;
    for (store, watcher) in stores.iter().zip(watchers) {
        first_build::spawn_background_build(store)?;
        if let Some(watcher) = watcher {
            watcher
                .spawn(Arc::clone(store))
                .context("spawning the watcher thread")?;
        }
    }
    let mut quic = match (&config.quic, tls.as_ref()) {
        (Some(settings), Some(tls)) => Some(
            sockets::bind_quic(
                config,
                settings,
                addrs.tls(),
                tls,
                conn_max_section(config),
                &mut inherited,
            )
            .context("binding the QUIC sockets")?,
        ),
        _ => None,
    };
    inherited.close_quic_rest();
    let quic_handover = quic.as_mut().and_then(|q| q.handover.take());
    let alt_svc = quic.as_ref().map_or_else(String::new, |q| q.alt_svc());
    let shared = Arc::new(Shared {
        sites: Arc::new(site_table(config, &stores, &alt_svc)),
        closing: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        shutdown_grace: config.shutdown_grace,
        sweep: std::sync::Mutex::new(Vec::new()),
        quic_handed_over: AtomicBool::new(false),
    });
    let listening = sockets::start_listening(per_shard, config.backlog)?;
    let handover = sockets::handover_list(&listening, admin_dup)?;
    if config.steer == Steer::Cpu {
        sockets::steer_by_cpu(&config.cpus, &listening.per_shard)
            .context("setting up --steer cpu")?;
    }

    let mut conn_cfg = ConnConfig::new(config);
    // The port the first TLS listener got (port 0 picks at bind).
    conn_cfg.https_port = addrs.tls().first().map(|a| a.port());
    let common = ShardCommon {
        shared: &shared,
        conn_cfg: &conn_cfg,
        tls: tls.as_ref(),
        metrics: &metrics,
        access_log: access_log.as_ref(),
    };
    let quic_addrs = quic.as_ref().map_or_else(Vec::new, |q| q.addrs.clone());
    let shards = spawn_shards(config, listening, quic, common)?;
    // SIGHUP's work (certificate reload, snapshot rebuild) runs on its own
    // thread (see `signals::spawn_rebuild_thread`). Spawned before
    // "listening" is logged, so the process has all its standing threads
    // by then.
    let upgrade = Arc::new(UpgradeState::new());
    let rebuild_tx =
        signals::spawn_rebuild_thread(&stores, tls.as_ref(), &metrics, &upgrade, source)?;
    for addr in addrs.cleartext() {
        tracing::info!(shards = shards.threads.len(), "listening addr={addr}");
    }
    for addr in addrs.tls() {
        tracing::info!(shards = shards.threads.len(), "listening tls_addr={addr}");
    }
    for addr in quic_addrs {
        tracing::info!(shards = shards.threads.len(), "listening quic_addr={addr}");
    }
    if let Err(e) = claims.answer_askers() {
        tracing::warn!(error = %e, "cannot answer who holds the address claims; a --check may block");
    }
    // The CA's validation must find the listeners answering.
    crate::acme::listening();
    announce_ready(inherited, &claims, &metrics)?;
    Ok(Serving {
        claims,
        metrics,
        signals,
        access_log,
        shared,
        shards,
        handover,
        quic_handover,
        upgrade,
        rebuild_tx,
    })
}

/// The running shards: each one's waker and thread.
struct Shards {
    wakers: Vec<Arc<EventFd>>,
    threads: Vec<JoinHandle<()>>,
}

/// What every shard gets a copy of.
struct ShardCommon<'a> {
    shared: &'a Arc<Shared>,
    conn_cfg: &'a ConnConfig,
    tls: Option<&'a Tls>,
    metrics: &'a Arc<Metrics>,
    access_log: Option<&'a AccessLog>,
}

/// One pinned thread per CPU with its listeners; returns once every shard
/// is in its loop, with each one's waker and thread.
fn spawn_shards(
    config: &Config,
    listening: Listening,
    quic: Option<sockets::QuicSockets>,
    common: ShardCommon<'_>,
) -> anyhow::Result<Shards> {
    let (mut quic_sockets, quic_shared) = match quic {
        Some(q) => (q.per_shard.into_iter().map(Some).collect(), Some(q.shared)),
        None => (Vec::new(), None),
    };
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let mut wakers = Vec::new();
    let mut threads = Vec::new();
    let per_shard = listening.per_shard;
    for (index, (cpu, listeners)) in config.cpus.iter().copied().zip(per_shard).enumerate() {
        let waker = Arc::new(EventFd::new()?);
        wakers.push(Arc::clone(&waker));
        let spec = ShardSpec {
            index,
            cpu,
            listeners,
            waker,
            shared: Arc::clone(common.shared),
            conn_cfg: common.conn_cfg.clone(),
            tls: common.tls.map(|t| Arc::clone(&t.config)),
            plain_listeners: listening.plain_counts[index],
            metrics: Arc::clone(common.metrics),
            access_log: common.access_log.map(AccessLog::for_shard),
            io: config.io,
            quic: quic_shared.as_ref().and_then(|shared| {
                let sockets = quic_sockets.get_mut(index)?.take()?;
                Some((sockets, Arc::clone(shared)))
            }),
            started: started_tx.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("shard-{index}"))
            .spawn(move || {
                if let Err(e) = shard::run(spec) {
                    tracing::error!(shard = index, error = %e, "shard failed");
                }
            })
            .context("spawning shard thread")?;
        threads.push(thread);
    }
    // "listening" means every shard is pinned and in its loop.
    for _ in &threads {
        started_rx
            .recv()
            .context("a shard thread exited during start-up")?
            .context("starting a shard")?;
    }
    Ok(Shards { wakers, threads })
}

/// Serving: tell systemd (a new process of an upgrade also names itself
/// the main process), then the old process, if there is one.
fn announce_ready(
    mut inherited: Inherited,
    claims: &Claims,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    let upgraded = inherited.is_upgrade();
    if upgraded {
        // The claims handed over name this process from now on.
        claims.restamp();
        notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    } else {
        notify("READY=1");
    }
    inherited
        .ready()
        .context("signalling readiness to the old process")?;
    if upgraded {
        // Counted here, not in the old process: that one exits, and its
        // count with it.
        metrics.upgrades.with_label_values(&["success"]).inc();
    }
    if std::env::var_os(reload::RELOAD_ENV).is_some_and(|v| v == "1") {
        tracing::info!("reload: the changed configuration is serving");
        metrics.config_reloads.with_label_values(&["applied"]).inc();
    }
    Ok(())
}

/// Stop serving: after a handover, at once (the new process serves);
/// after a stop signal, once `drain_delay` has passed. Then the shards
/// drain and this returns when they have stopped.
fn drain(config: &Config, serving: Serving, stopped: Stopped) {
    let Serving {
        claims,
        metrics,
        shared,
        shards: Shards { wakers, threads },
        handover,
        quic_handover,
        upgrade,
        access_log,
        ..
    } = serving;
    // A shutdown during an upgrade stops the new process if it is not ready yet.
    upgrade.cancel.store(true, Ordering::Release);
    if let Some(thread) = stopped.upgrade_thread {
        let _ = thread.join();
    }
    let handed_over = upgrade
        .done
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    match handed_over {
        Some(ready) => {
            // Queues of sockets the new process did not adopt (an address no
            // longer configured) are emptied and served before they close.
            let sweep: Vec<SocketAddr> = handover
                .iter()
                .filter(|(p, _)| p.kind != Kind::Admin && !ready.adopted.contains(&p.fd))
                .map(|(p, _)| p.addr)
                .collect();
            *shared.sweep.lock().unwrap_or_else(|e| e.into_inner()) = sweep;
            // The new process reads the QUIC sockets now and forwards what
            // belongs to this one's connections.
            let quic_adopted = quic_handover.as_ref().is_some_and(|(passed, _)| {
                passed
                    .udp
                    .iter()
                    .any(|(fd, _, _)| ready.adopted.contains(fd))
            });
            shared
                .quic_handed_over
                .store(quic_adopted, Ordering::Release);
            metrics.handed_over.store(true, Ordering::Release);
            metrics.draining.store(true, Ordering::Release);
            tracing::info!(new_pid = ready.pid, "handed over; draining");
        }
        None => {
            tracing::info!(signal = stopped.last_signal, "shutting down");
            notify("STOPPING=1");
            // /readyz fails from now on; keep serving while load balancers
            // notice, then drain. Meanwhile every response closes its
            // connection, so keep-alive clients reconnect (to an instance
            // still in the pool) instead of staying here until the drain.
            metrics.draining.store(true, Ordering::Release);
            if !config.drain_delay.is_zero() {
                shared.closing.store(true, Ordering::Release);
                for waker in &wakers {
                    let _ = waker.notify();
                }
                tracing::info!(
                    drain_delay_s = config.drain_delay.as_secs_f64(),
                    "not ready; serving until drain_delay has passed"
                );
                std::thread::sleep(config.drain_delay);
            }
        }
    }
    // The duplicates kept for a handover would keep the sockets listening
    // (and queueing connections nobody accepts) after the shards close theirs.
    drop(handover);
    shared.draining.store(true, Ordering::Release);
    for waker in &wakers {
        let _ = waker.notify();
    }
    for thread in threads {
        let _ = thread.join();
    }
    // The shards' last lines are queued; the writer writes them before
    // the process exits (a stuck disk holds the exit for at most this).
    if let Some(log) = access_log {
        log.close(std::time::Duration::from_secs(5));
    }
    tracing::info!("stopped");
    drop(claims);
}

/// The start-up facts an operator looks for first.
fn log_start(config: &Config) {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        config = %config
            .config_path
            .as_ref()
            .map_or_else(|| "none (flags and defaults)".to_owned(), |p| p.display().to_string()),
        root = %config.root.display(),
        "shardhttpd starting"
    );
    let map: Vec<String> = config
        .cpus
        .iter()
        .enumerate()
        .map(|(shard, cpu)| format!("{shard}:{cpu}"))
        .collect();
    tracing::info!(
        shards = config.cpus.len(),
        "shard:cpu map {}",
        map.join(" ")
    );
    if let Some(limit) = crate::config::cgroup_memory_max() {
        tracing::info!(
            cgroup_memory_max = %crate::config::units::format_size_approx(limit),
            cache_max_bytes = %crate::config::units::format_size_approx(config.cache_max_bytes),
            "cgroup memory limit; the snapshot's memory cap stays below it"
        );
    }
}
