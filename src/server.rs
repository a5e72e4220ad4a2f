//! Start-up and lifecycle: check and claim the addresses, bind the admin
//! listener and one socket per shard and address, build the first snapshot
//! (reporting progress), start the shards, then turn signals into actions
//! (SIGHUP rebuilds, SIGTERM/SIGINT drain and exit).

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;
use socket2::{Domain, Protocol, Socket, Type};

use crate::cache::Store;
use crate::config::{Config, Steer};
use crate::conn::ConnConfig;
use crate::metrics::access_log::AccessLog;
use crate::metrics::{admin, Metrics};
use crate::preflight::{self, Preflight, SetupError};
use crate::shard::{self, ShardSpec, Shared};
use crate::sys::EventFd;

/// Tries at the background compressed build of a large root (a deploy
/// racing it can make the walk fail), and the pause between them.
const COMPRESS_ATTEMPTS: u32 = 5;
const COMPRESS_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

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

/// Run the server until a shutdown signal has been handled.
///
/// Start-up order: everything that can fail on configuration or
/// environment (claims on the addresses, the admin bind, the shard binds,
/// the access log) before the first snapshot build, so such errors come
/// in milliseconds; the admin listener answers `/healthz` (and `/readyz`
/// 503) while the build runs; the shard sockets start listening once the
/// snapshot is there.
pub fn run(config: Config) -> anyhow::Result<()> {
    log_start(&config);
    let (mut claims, _) = Preflight::default().run(&config)?;
    let metrics = Metrics::new(&config.cpus, config.metrics);
    let tls = match &config.tls {
        Some(settings) => {
            let tls = crate::tls::Tls::new(settings).context("loading the TLS certificates")?;
            for c in tls.store.collectors() {
                metrics.register(c);
            }
            tls.store
                .spawn_watcher()
                .context("spawning the certificate watcher")?;
            Some(tls)
        }
        None => None,
    };
    let admin_listener = preflight::bind_admin(config.admin)?;
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
    let mut signals =
        Signals::new([SIGHUP, SIGINT, SIGTERM, SIGUSR1]).context("installing signal handlers")?;

    // Bind every socket before the build, so an address in use is reported
    // at once. Port 0: the first shard's socket picks the port and the
    // others join it.
    let mut addrs = config.listen.clone();
    // `addrs[..plain]` are cleartext, the rest TLS (in every shard's list).
    let plain = addrs.len();
    if let Some(settings) = &config.tls {
        addrs.extend(&settings.listen);
    }
    let mut per_shard = Vec::with_capacity(config.cpus.len());
    for _ in &config.cpus {
        let mut sockets = Vec::with_capacity(addrs.len());
        for addr in &mut addrs {
            let socket =
                bind_socket(*addr).map_err(|e| preflight::bind_error("listen", *addr, &e))?;
            if addr.port() == 0 {
                if let Some(bound) = socket.local_addr()?.as_socket() {
                    *addr = bound;
                    claims.add_picked(bound);
                }
            }
            sockets.push(socket);
        }
        per_shard.push(sockets);
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
    let Some(store) = first_build(&config, &mut signals)? else {
        return Ok(());
    };
    metrics.register(Box::new(store.rebuild_duration.clone()));
    let _ = published.set(Arc::clone(&store));
    if store.compress_pending() {
        let store = Arc::clone(&store);
        std::thread::Builder::new()
            .name("compress".into())
            .spawn(move || {
                tracing::info!("serving identity bodies; building compressed variants");
                for attempt in 1..=COMPRESS_ATTEMPTS {
                    match store.build_compressed() {
                        Ok(generation) => {
                            tracing::info!("compressed variants ready generation={generation}");
                            return;
                        }
                        Err(e) => tracing::error!(
                            attempt,
                            error = format!("{e:#}"),
                            "building compressed variants failed; serving identity bodies"
                        ),
                    }
                    std::thread::sleep(COMPRESS_RETRY);
                }
            })
            .context("spawning the compression thread")?;
    }
    if let Some(watcher) = watcher {
        watcher
            .spawn(Arc::clone(&store))
            .context("spawning the watcher thread")?;
    }
    let shared = Arc::new(Shared {
        snapshot: store.shared(),
        draining: AtomicBool::new(false),
        shutdown_grace: config.shutdown_grace,
    });
    let mut per_shard_listeners = Vec::with_capacity(per_shard.len());
    for (sockets, _) in per_shard.into_iter().zip(&config.cpus) {
        let mut listeners = Vec::with_capacity(sockets.len());
        for (socket, addr) in sockets.into_iter().zip(&addrs) {
            listeners.push(
                listen(socket, config.backlog).with_context(|| format!("listening on {addr}"))?,
            );
        }
        per_shard_listeners.push(listeners);
    }
    let per_shard = per_shard_listeners;
    if config.steer == Steer::Cpu {
        steer_by_cpu(&config.cpus, &per_shard).context("setting up --steer cpu")?;
    }

    let conn_cfg = ConnConfig::new(&config);
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
            plain_listeners: plain,
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
    for addr in &addrs[..plain] {
        tracing::info!(shards = threads.len(), "listening addr={addr}");
    }
    for addr in &addrs[plain..] {
        tracing::info!(shards = threads.len(), "listening tls_addr={addr}");
    }
    for signal in signals.forever() {
        match signal {
            SIGUSR1 => {
                if let Some(log) = &access_log {
                    log.reopen();
                }
            }
            SIGHUP => {
                if let Some(tls) = &tls {
                    tls.store.reload();
                }
                rebuild_on_hup(&store);
            }
            _ => {
                tracing::info!(signal, "shutting down");
                metrics.draining.store(true, Ordering::Release);
                shared.draining.store(true, Ordering::Release);
                for waker in &wakers {
                    let _ = waker.notify();
                }
                break;
            }
        }
    }
    for thread in threads {
        let _ = thread.join();
    }
    tracing::info!("stopped");
    drop(claims);
    Ok(())
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

/// Build the first snapshot on its own thread while this one reports
/// progress and watches for signals. `None`: a stop signal came first.
fn first_build(config: &Config, signals: &mut Signals) -> anyhow::Result<Option<Arc<Store>>> {
    let opts = config.build_options();
    let started = Instant::now();
    tracing::info!(root = %config.root.display(), "building the first snapshot");
    let build = std::thread::Builder::new()
        .name("first-build".into())
        .spawn(move || Store::open(opts))
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
}
