//! Start-up and lifecycle: check and claim the addresses, bind the admin
//! listener and one socket per shard and address, build the first snapshot
//! (reporting progress), start the shards, then turn signals into actions
//! (SIGHUP reloads the configuration and rebuilds, SIGUSR2 upgrades the
//! binary, SIGTERM/SIGINT drain and exit). A new process of an upgrade adopts the sockets its predecessor
//! handed over instead of binding them.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use socket2::{Domain, Protocol, Socket, Type};

use crate::cache::Store;
use crate::config::{Config, Steer};
use crate::conn::ConnConfig;
use crate::metrics::access_log::AccessLog;
use crate::metrics::{admin, Metrics};
use crate::notify::notify;
use crate::preflight::{self, Preflight, SetupError};
use crate::reload;
use crate::shard::{self, ShardSpec, Shared};
use crate::sys::EventFd;
use crate::upgrade::{self, Inherited, Kind, Passed};

/// Tries at each background build of a large root (the load of one that
/// started from disk, its compressed variants): a deploy racing it can make
/// the walk fail. And the pause between them.
const BACKGROUND_ATTEMPTS: u32 = 5;
const BACKGROUND_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

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

/// How long the kernel holds a connection that has sent nothing before
/// handing it to `accept` anyway.
const DEFER_ACCEPT_SECS: u32 = 1;

/// How often the start-up log says the first build is still running.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(3);

/// A listening socket for one shard: `SO_REUSEPORT` lets every shard bind
/// the same address and the kernel spreads connections across them.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    listen(bind_socket(addr)?, backlog)
}

/// Bind a shard socket without listening yet: the address is taken (so a
/// conflict is a start-up error) but connections are refused, not queued,
/// while the first snapshot builds.
fn bind_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        // Keep IPv4 and IPv6 separate: each is named by its own --listen.
        socket.set_only_v6(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listener, which saves a
    // setsockopt per connection. Nagle would hold back a response's tail
    // waiting for an ACK; responses are written whole, so send at once.
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

fn listen(socket: Socket, backlog: u32) -> std::io::Result<TcpListener> {
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    crate::sys::set_defer_accept(&socket, DEFER_ACCEPT_SECS)?;
    Ok(socket.into())
}

/// `--steer cpu`: every listener is marked with its shard's CPU, and each
/// reuseport group (one per address, its sockets created in shard order by
/// the caller) gets the program that returns the SYN's CPU's shard index.
fn steer_by_cpu(cpus: &[usize], per_shard: &[Vec<TcpListener>]) -> std::io::Result<()> {
    for (&cpu, listeners) in cpus.iter().zip(per_shard) {
        for listener in listeners {
            crate::sys::set_incoming_cpu(listener, cpu)?;
        }
    }
    let program = crate::shard::steer::cpu_program(cpus);
    // The program belongs to the group: attaching it through one member
    // (shard 0's socket) covers every shard's socket of that address.
    for listener in per_shard.first().into_iter().flatten() {
        crate::sys::attach_reuseport_cbpf(listener, &program)?;
    }
    Ok(())
}

/// The SIGUSR2 upgrade in flight, between the signal loop and the thread
/// that waits for the new process.
struct UpgradeState {
    running: AtomicBool,
    /// Set on shutdown: a new process not ready yet is stopped.
    cancel: AtomicBool,
    /// The new process is ready: this one drains.
    done: std::sync::Mutex<Option<upgrade::Ready>>,
    /// The next upgrade applies a changed configuration (SIGHUP), not a
    /// new binary (SIGUSR2): its outcome is also a reload's.
    reload: AtomicBool,
}

/// A shard's socket: adopted from the old process (already listening) or
/// bound here (listening once the snapshot is built).
enum ShardSocket {
    Adopted(TcpListener),
    Bound(Socket),
}

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
    // Resolved now: once a deploy replaces the file, /proc/self/exe names the
    // deleted old binary, and SIGUSR2 must start the new one.
    let upgrade_binary = match &config.upgrade_binary {
        Some(path) => path.clone(),
        None => std::fs::read_link("/proc/self/exe").context("resolving /proc/self/exe")?,
    };
    let upgrade_args: Vec<std::ffi::OsString> = source.args().to_vec();
    let mut inherited =
        Inherited::from_env().context("adopting the sockets of the process this one replaces")?;
    // Every listening address: `addrs[..plain]` are cleartext, the rest TLS
    // (in every shard's list).
    let mut addrs = config.listen.clone();
    let plain = addrs.len();
    if let Some(settings) = &config.tls {
        addrs.extend(&settings.listen);
    }
    let kind_of = |i: usize| if i < plain { Kind::Listen } else { Kind::Tls };
    // Adopted before the preflight, which must neither claim nor probe the
    // addresses the old process still holds.
    let mut adopted: Vec<Vec<TcpListener>> = addrs
        .iter()
        .enumerate()
        .map(|(i, &addr)| inherited.take_listen(addr, kind_of(i)))
        .collect();
    let adopted_admin = inherited.take_admin(config.admin);
    inherited.close_rest();
    let preflight = Preflight {
        inherited: addrs
            .iter()
            .zip(&adopted)
            .filter(|(_, a)| !a.is_empty())
            .map(|(&addr, _)| addr)
            .collect(),
        inherited_admin: adopted_admin.is_some(),
        ..Preflight::default()
    };
    let (mut claims, _) = preflight.run(&config)?;
    let metrics = Metrics::new(&config.cpus, config.metrics);
    let tls = match &config.tls {
        Some(settings) => {
            let tls = crate::tls::Tls::new(settings).context("loading the TLS certificates")?;
            for c in tls.collectors() {
                metrics.register(c);
            }
            tls.spawn_watcher()
                .context("spawning the certificate watcher")?;
            Some(tls)
        }
        None => None,
    };
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
    let published: Arc<OnceLock<Arc<Store>>> = Arc::new(OnceLock::new());
    {
        let metrics = Arc::clone(&metrics);
        let published = Arc::clone(&published);
        let source: admin::SnapshotSource =
            Box::new(move || published.get().map(|s| s.stats()).unwrap_or_default());
        std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || admin::serve(admin_listener, metrics, source))
            .context("spawning the admin thread")?;
    }
    // Register before any shard runs, so an early signal is not lost.
    let mut signals = Signals::new([SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2])
        .context("installing signal handlers")?;

    // Bind every socket before the build, so an address in use is reported
    // at once. Port 0: the first shard's socket picks the port and the
    // others join it. Adopted sockets come first: shard i takes the old
    // shard i's socket; with fewer shards than sockets the extra ones go
    // round the shards (none is closed, so none of their queued connections
    // is lost); with more, the other shards bind sockets that join the same
    // reuseport group. Each shard's list: (cleartext, TLS).
    let shards = config.cpus.len();
    type Lists = (Vec<ShardSocket>, Vec<ShardSocket>);
    let mut per_shard: Vec<Lists> = (0..shards).map(|_| Default::default()).collect();
    for (i, (addr, adopted)) in addrs.iter_mut().zip(adopted.iter_mut()).enumerate() {
        if let Some(first) = adopted.first() {
            *addr = first.local_addr()?;
        }
        let passed = adopted.len();
        for (j, listener) in adopted.drain(..).enumerate() {
            let lists = &mut per_shard[j % shards];
            let target = if i < plain {
                &mut lists.0
            } else {
                &mut lists.1
            };
            target.push(ShardSocket::Adopted(listener));
        }
        for lists in per_shard.iter_mut().skip(passed) {
            let socket =
                bind_socket(*addr).map_err(|e| preflight::bind_error("listen", *addr, &e))?;
            if addr.port() == 0 {
                if let Some(bound) = socket.local_addr()?.as_socket() {
                    *addr = bound;
                    claims.add_picked(bound);
                }
            }
            let target = if i < plain {
                &mut lists.0
            } else {
                &mut lists.1
            };
            target.push(ShardSocket::Bound(socket));
        }
    }

    let access_log = match &config.access_log {
        Some(path) => Some(
            AccessLog::open(
                path,
                config.access_log_format,
                Arc::clone(&metrics.access_log_dropped),
            )
            .map_err(|e| {
                anyhow::Error::new(SetupError(format!(
                    "opening access log {}: {e}",
                    path.display()
                )))
            })?,
        ),
        None => None,
    };

    // Watches first: every change made during or after the initial walk is
    // then an event, and none falls between the walk and its watch.
    let watcher = config
        .watch
        .then(|| crate::cache::watch::Watcher::establish(&config.root, config.watch_options()));
    let hook = watcher.as_ref().and_then(|w| w.dir_hook());
    let Some(store) = first_build(&config, hook, &mut signals)? else {
        return Ok(());
    };
    config
        .cache_control
        .warn_uncovered(store.load().file_urls());
    metrics.register(Box::new(store.rebuild_duration.clone()));
    let _ = published.set(Arc::clone(&store));
    if store.load_pending() || store.compress_pending() {
        let store = Arc::clone(&store);
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
    if let Some(watcher) = watcher {
        watcher
            .spawn(Arc::clone(&store))
            .context("spawning the watcher thread")?;
    }
    let shared = Arc::new(Shared {
        snapshot: store.shared(),
        closing: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        shutdown_grace: config.shutdown_grace,
        sweep: std::sync::Mutex::new(Vec::new()),
    });
    // Each shard's listeners, cleartext first, and how many are cleartext.
    let mut per_shard_listeners = Vec::with_capacity(per_shard.len());
    let mut plain_counts = Vec::with_capacity(per_shard.len());
    for (cleartext, tls_sockets) in per_shard {
        plain_counts.push(cleartext.len());
        let mut listeners = Vec::with_capacity(cleartext.len() + tls_sockets.len());
        for socket in cleartext.into_iter().chain(tls_sockets) {
            listeners.push(match socket {
                ShardSocket::Adopted(listener) => listener,
                ShardSocket::Bound(socket) => {
                    let addr = socket.local_addr()?.as_socket();
                    listen(socket, config.backlog)
                        .with_context(|| format!("listening on {addr:?}"))?
                }
            });
        }
        per_shard_listeners.push(listeners);
    }
    let per_shard = per_shard_listeners;
    // What a SIGUSR2 upgrade hands over: a duplicate of every socket (the
    // shards and the admin thread own the originals), with its kind, shard
    // and address.
    let mut handover: Vec<(Passed, TcpListener)> = Vec::new();
    for (shard, listeners) in per_shard.iter().enumerate() {
        for (j, listener) in listeners.iter().enumerate() {
            let dup = listener.try_clone()?;
            let passed = Passed {
                fd: dup.as_raw_fd(),
                kind: if j < plain_counts[shard] {
                    Kind::Listen
                } else {
                    Kind::Tls
                },
                shard,
                addr: listener.local_addr()?,
            };
            handover.push((passed, dup));
        }
    }
    handover.push((
        Passed {
            fd: admin_dup.as_raw_fd(),
            kind: Kind::Admin,
            shard: 0,
            addr: admin_dup.local_addr()?,
        },
        admin_dup,
    ));
    if config.steer == Steer::Cpu {
        steer_by_cpu(&config.cpus, &per_shard).context("setting up --steer cpu")?;
    }

    let mut conn_cfg = ConnConfig::new(&config);
    if conn_cfg.redirect_https.is_some() {
        // The port the first TLS listener got (port 0 picks at bind).
        conn_cfg.redirect_https = addrs.get(plain).map(|a| a.port());
    }
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let mut wakers = Vec::new();
    let mut threads = Vec::new();
    for (index, (cpu, listeners)) in config.cpus.iter().copied().zip(per_shard).enumerate() {
        let waker = Arc::new(EventFd::new()?);
        wakers.push(Arc::clone(&waker));
        let spec = ShardSpec {
            index,
            cpu,
            listeners,
            waker,
            shared: Arc::clone(&shared),
            conn_cfg: conn_cfg.clone(),
            tls: tls.as_ref().map(|t| Arc::clone(&t.config)),
            plain_listeners: plain_counts[index],
            metrics: Arc::clone(&metrics),
            access_log: access_log.as_ref().map(AccessLog::for_shard),
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
    // SIGHUP's work (certificate reload, snapshot rebuild) runs on its own
    // thread: the signal thread must stay free for SIGTERM, which a long
    // rebuild would otherwise hold up past the service manager's patience.
    // One queued request coalesces a burst. Spawned before "listening" is
    // logged, so the process has all its standing threads by then.
    let (rebuild_tx, rebuild_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let upgrade = Arc::new(UpgradeState {
        running: AtomicBool::new(false),
        cancel: AtomicBool::new(false),
        done: std::sync::Mutex::new(None),
        reload: AtomicBool::new(false),
    });
    {
        let store = Arc::clone(&store);
        let certs = tls.as_ref().map(|t| Arc::clone(&t.store));
        let metrics = Arc::clone(&metrics);
        let upgrade = Arc::clone(&upgrade);
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
                    rebuild_on_hup(&store);
                }
            })
            .context("spawning the rebuild thread")?;
    }
    for addr in &addrs[..plain] {
        tracing::info!(shards = threads.len(), "listening addr={addr}");
    }
    for addr in &addrs[plain..] {
        tracing::info!(shards = threads.len(), "listening tls_addr={addr}");
    }

    // Serving: tell systemd (a new process of an upgrade also names itself
    // the main process), then the old process, if there is one.
    let upgraded = inherited.is_upgrade();
    if upgraded {
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
        metrics.config_reloads.with_label_values(&["applied"]).inc();
        tracing::info!("reload: the changed configuration is serving");
    }

    let mut upgrade_thread = None;
    let mut last_signal = None;
    let signals_handle = signals.handle();
    for signal in signals.forever() {
        match signal {
            SIGUSR1 => {
                if let Some(log) = &access_log {
                    log.reopen();
                }
            }
            SIGHUP => {
                // Full: a rebuild is already queued, and it will see this
                // change too.
                let _ = rebuild_tx.try_send(());
            }
            SIGUSR2 => {
                if upgrade.running.swap(true, Ordering::AcqRel) {
                    if upgrade.reload.swap(false, Ordering::AcqRel) {
                        metrics.config_reloads.with_label_values(&["failed"]).inc();
                        tracing::error!(
                            "reload: an upgrade is already in progress; the changed configuration is not applied (reload again once it is done)"
                        );
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
                let passed: Vec<Passed> = handover.iter().map(|(p, _)| *p).collect();
                upgrade_thread = Some(spawn_upgrade(
                    upgrade_binary.clone(),
                    upgrade_args.clone(),
                    passed,
                    config.upgrade_timeout,
                    Arc::clone(&upgrade),
                    Arc::clone(&metrics),
                    signals_handle.clone(),
                )?);
            }
            _ => {
                last_signal = Some(signal);
                break;
            }
        }
    }
    // A shutdown during an upgrade stops the new process if it is not ready yet.
    upgrade.cancel.store(true, Ordering::Release);
    if let Some(thread) = upgrade_thread {
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
            metrics.handed_over.store(true, Ordering::Release);
            metrics.draining.store(true, Ordering::Release);
            tracing::info!(new_pid = ready.pid, "handed over; draining");
        }
        None => {
            tracing::info!(signal = last_signal, "shutting down");
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
    tracing::info!("stopped");
    drop(claims);
    Ok(())
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
            metrics.config_reloads.with_label_values(&["invalid"]).inc();
            tracing::error!(
                "reload refused: configuration error: {e:#}; the running configuration keeps serving"
            );
            false
        }
        reload::Outcome::Changed if std::process::id() == 1 => {
            // A container's PID 1: the container ends when it exits, so a
            // handover would take the new process down with it.
            metrics.config_reloads.with_label_values(&["failed"]).inc();
            tracing::error!(
                "reload: the configuration changed, but this process is PID 1 (a container's init) and cannot hand over; roll out a new container to apply it. The running configuration keeps serving"
            );
            false
        }
        reload::Outcome::Changed => {
            tracing::info!("reload: the configuration changed and is valid");
            upgrade.reload.store(true, Ordering::Release);
            // The signal loop starts the handover, as for SIGUSR2 (and
            // refuses it while one is already in flight).
            if let Err(e) = signal_hook::low_level::raise(SIGUSR2) {
                upgrade.reload.store(false, Ordering::Release);
                metrics.config_reloads.with_label_values(&["failed"]).inc();
                tracing::error!(error = %e, "reload: cannot start the handover");
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

/// The thread that starts the new binary and waits for it: on success it
/// ends the signal loop (this process then drains), on failure this process
/// keeps serving.
fn spawn_upgrade(
    binary: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
    passed: Vec<Passed>,
    timeout: Duration,
    state: Arc<UpgradeState>,
    metrics: Arc<Metrics>,
    signals: signal_hook::iterator::Handle,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("upgrade".into())
        .spawn(move || {
            let reload = state.reload.swap(false, Ordering::AcqRel);
            let env: &[(&str, &str)] = if reload {
                &[(reload::RELOAD_ENV, "1")]
            } else {
                &[]
            };
            match upgrade::start(&binary, &args, &passed, timeout, &state.cancel, env) {
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
                    metrics.upgrades.with_label_values(&["failed"]).inc();
                    if reload {
                        metrics.config_reloads.with_label_values(&["failed"]).inc();
                    }
                    tracing::error!(
                        error = format!("{e:#}"),
                        "upgrade failed; this process keeps serving"
                    );
                    // In case the new process named itself the main one.
                    notify(&format!("MAINPID={}", std::process::id()));
                    state.running.store(false, Ordering::Release);
                }
            }
        })
        .context("spawning the upgrade thread")
}

/// Build the first snapshot on its own thread while this one reports
/// progress and watches for signals. `None`: a stop signal came first.
/// `hook` (the watcher's) sees each directory before the walk lists it.
fn first_build(
    config: &Config,
    hook: Option<Box<crate::cache::DirHook>>,
    signals: &mut Signals,
) -> anyhow::Result<Option<Arc<Store>>> {
    let opts = config.build_options();
    let started = Instant::now();
    tracing::info!(root = %config.root.display(), "building the first snapshot");
    let build = std::thread::Builder::new()
        .name("first-build".into())
        .spawn(move || Store::open_watching(opts, hook.as_deref()))
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
    let store = build
        .join()
        .map_err(|_| anyhow::anyhow!("the first snapshot build panicked"))?
        .map_err(|e| {
            anyhow::Error::new(SetupError(format!("building the first snapshot: {e:#}")))
        })?;
    Ok(Some(Arc::new(store)))
}

/// Bytes this process has read so far (`rchar` in `/proc/self/io`), for
/// progress lines; `None` where the kernel does not offer it.
fn read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
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
