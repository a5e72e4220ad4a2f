//! Start-up and lifecycle: build the first snapshot, bind one listener per
//! shard and address, start the shards, then turn signals into actions
//! (SIGHUP rebuilds, SIGTERM/SIGINT drain and exit).

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;
use socket2::{Domain, Protocol, Socket, Type};

use crate::cache::Store;
use crate::config::Config;
use crate::conn::ConnConfig;
use crate::metrics::access_log::AccessLog;
use crate::metrics::{admin, Metrics};
use crate::shard::{self, ShardSpec, Shared};
use crate::sys::EventFd;

/// Tries at the background compressed build of a large root (a deploy
/// racing it can make the walk fail), and the pause between them.
const COMPRESS_ATTEMPTS: u32 = 5;
const COMPRESS_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the kernel holds a connection that has sent nothing before
/// handing it to `accept` anyway.
const DEFER_ACCEPT_SECS: u32 = 1;

/// A listening socket for one shard: `SO_REUSEPORT` lets every shard bind
/// the same address and the kernel spreads connections across them.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
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
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    crate::sys::set_defer_accept(&socket, DEFER_ACCEPT_SECS)?;
    Ok(socket.into())
}

/// Run the server until a shutdown signal has been handled.
pub fn run(config: Config) -> anyhow::Result<()> {
    let store =
        Arc::new(Store::open(config.build_options()).context("building the initial snapshot")?);
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
    if config.watch {
        crate::cache::watch::spawn(Arc::clone(&store), config.watch_options())
            .context("spawning the watcher thread")?;
    }
    let metrics = Metrics::new(&config.cpus, config.metrics);
    metrics.register(Box::new(store.rebuild_duration.clone()));
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
    let admin_listener = admin::bind(config.admin)
        .with_context(|| format!("binding the admin address {}", config.admin))?;
    let shared = Arc::new(Shared {
        snapshot: store.shared(),
        draining: AtomicBool::new(false),
        shutdown_grace: config.shutdown_grace,
    });
    // Register before any shard runs, so an early signal is not lost.
    let mut signals =
        Signals::new([SIGHUP, SIGINT, SIGTERM, SIGUSR1]).context("installing signal handlers")?;

    // Bind every socket before starting any shard, so an address in use is a
    // start-up error. Port 0: the first shard's socket picks the port and the
    // others join it.
    let mut addrs = config.listen.clone();
    let plain = addrs.len();
    if let Some(settings) = &config.tls {
        addrs.extend(&settings.listen);
    }
    let mut per_shard = Vec::with_capacity(config.cpus.len());
    for _ in &config.cpus {
        let mut listeners = Vec::with_capacity(addrs.len());
        for addr in &mut addrs {
            let listener =
                bind(*addr, config.backlog).with_context(|| format!("binding {addr}"))?;
            if addr.port() == 0 {
                *addr = listener.local_addr()?;
            }
            listeners.push(listener);
        }
        per_shard.push(listeners);
    }

    let access_log = match &config.access_log {
        Some(path) => Some(
            AccessLog::open(path, config.access_log_format)
                .with_context(|| format!("opening access log {}", path.display()))?,
        ),
        None => None,
    };
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
    {
        let metrics = Arc::clone(&metrics);
        let store = Arc::clone(&store);
        let source: admin::SnapshotSource = Box::new(move || store.stats());
        std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || admin::serve(admin_listener, metrics, source))
            .context("spawning the admin thread")?;
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
                if let Err(e) = store.rebuild() {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "snapshot rebuild failed; serving the old one"
                    );
                }
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
    Ok(())
}
