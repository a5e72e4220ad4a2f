//! Start-up and lifecycle: build the first snapshot, bind one listener per
//! shard and address (or adopt those an older process handed over), start the
//! shards, then turn signals into actions (SIGHUP rebuilds, SIGUSR2 upgrades
//! the binary, SIGTERM/SIGINT drain and exit).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use socket2::{Domain, Protocol, Socket, Type};

use crate::cache::Store;
use crate::config::Config;
use crate::conn::ConnConfig;
use crate::metrics::access_log::AccessLog;
use crate::metrics::{admin, Metrics};
use crate::notify::notify;
use crate::shard::{self, ShardSpec, Shared};
use crate::sys::EventFd;
use crate::upgrade::{self, Inherited, Kind, Passed};

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

/// The SIGUSR2 upgrade in flight, between the signal loop and the thread
/// that waits for the new process.
struct UpgradeState {
    running: AtomicBool,
    /// Set on shutdown: a new process not ready yet is stopped.
    cancel: AtomicBool,
    /// The new process is ready: this one drains.
    done: std::sync::Mutex<Option<upgrade::Ready>>,
}

/// Run the server until a shutdown signal has been handled.
pub fn run(config: Config) -> anyhow::Result<()> {
    // Resolved now: once a deploy replaces the file, /proc/self/exe names the
    // deleted old binary, and SIGUSR2 must start the new one.
    let upgrade_binary = match &config.upgrade_binary {
        Some(path) => path.clone(),
        None => std::fs::read_link("/proc/self/exe").context("resolving /proc/self/exe")?,
    };
    let upgrade_args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut inherited =
        Inherited::from_env().context("adopting the sockets of the process this one replaces")?;
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
    let admin_listener = match inherited.take_admin(config.admin) {
        Some(listener) => {
            tracing::info!("admin endpoint addr={} (inherited)", listener.local_addr()?);
            listener
        }
        None => admin::bind(config.admin)
            .with_context(|| format!("binding the admin address {}", config.admin))?,
    };
    let shared = Arc::new(Shared {
        snapshot: store.shared(),
        draining: AtomicBool::new(false),
        shutdown_grace: config.shutdown_grace,
        sweep: std::sync::Mutex::new(Vec::new()),
    });
    // Register before any shard runs, so an early signal is not lost.
    let mut signals = Signals::new([SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2])
        .context("installing signal handlers")?;

    // Adopt or bind every socket before starting any shard, so an address in
    // use is a start-up error. Port 0: the first shard's socket picks the
    // port and the others join it.
    let shards = config.cpus.len();
    let mut addrs = config.listen.clone();
    let mut per_shard: Vec<Vec<TcpListener>> = (0..shards).map(|_| Vec::new()).collect();
    for addr in &mut addrs {
        let adopted = inherited.take_listen(*addr);
        if let Some(first) = adopted.first() {
            *addr = first.local_addr()?;
        }
        let passed = adopted.len();
        // Shard i takes the old shard i's socket. With fewer shards than
        // sockets, the extra ones go round the shards: none is closed, so
        // none of their queued connections is lost.
        for (i, listener) in adopted.into_iter().enumerate() {
            per_shard[i % shards].push(listener);
        }
        // With more, the other shards bind sockets that join the same
        // reuseport group.
        for listeners in per_shard.iter_mut().skip(passed) {
            let listener =
                bind(*addr, config.backlog).with_context(|| format!("binding {addr}"))?;
            if addr.port() == 0 {
                *addr = listener.local_addr()?;
            }
            listeners.push(listener);
        }
    }
    inherited.close_rest();
    // What a SIGUSR2 upgrade hands over: a duplicate of every socket (the
    // shards own the originals), with its shard and address.
    let mut handover: Vec<(Passed, TcpListener)> = Vec::new();
    for (shard, listeners) in per_shard.iter().enumerate() {
        for listener in listeners {
            let dup = listener.try_clone()?;
            let passed = Passed {
                fd: dup.as_raw_fd(),
                kind: Kind::Listen,
                shard,
                addr: listener.local_addr()?,
            };
            handover.push((passed, dup));
        }
    }
    {
        let dup = admin_listener.try_clone()?;
        let passed = Passed {
            fd: dup.as_raw_fd(),
            kind: Kind::Admin,
            shard: 0,
            addr: admin_listener.local_addr()?,
        };
        handover.push((passed, dup));
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
    for addr in &addrs {
        tracing::info!(shards = threads.len(), "listening addr={addr}");
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
    // Serving: tell systemd (a new process of an upgrade also names itself
    // the main process), then the old process, if there is one.
    if inherited.is_upgrade() {
        notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    } else {
        notify("READY=1");
    }
    inherited
        .ready()
        .context("signalling readiness to the old process")?;

    let upgrade = Arc::new(UpgradeState {
        running: AtomicBool::new(false),
        cancel: AtomicBool::new(false),
        done: std::sync::Mutex::new(None),
    });
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
                if let Err(e) = store.rebuild() {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "snapshot rebuild failed; serving the old one"
                    );
                }
            }
            SIGUSR2 => {
                if upgrade.running.swap(true, Ordering::AcqRel) {
                    tracing::warn!("upgrade already in progress; SIGUSR2 ignored");
                    continue;
                }
                tracing::info!("SIGUSR2: starting the binary upgrade");
                let passed: Vec<Passed> = handover.iter().map(|(p, _)| *p).collect();
                let (binary, args) = (upgrade_binary.clone(), upgrade_args.clone());
                let (upgrade, metrics) = (Arc::clone(&upgrade), Arc::clone(&metrics));
                let (timeout, handle) = (config.upgrade_timeout, signals_handle.clone());
                if let Some(previous) = upgrade_thread.take() {
                    let _ = std::thread::JoinHandle::join(previous);
                }
                upgrade_thread = Some(
                    std::thread::Builder::new()
                        .name("upgrade".into())
                        .spawn(move || {
                            match upgrade::start(&binary, &args, &passed, timeout, &upgrade.cancel)
                            {
                                Ok(ready) => {
                                    metrics.upgrades.with_label_values(&["success"]).inc();
                                    tracing::info!(
                                        pid = ready.pid,
                                        "upgrade: the new process is ready; draining this one"
                                    );
                                    *upgrade.done.lock().unwrap_or_else(|e| e.into_inner()) =
                                        Some(ready);
                                    handle.close();
                                }
                                Err(e) => {
                                    metrics.upgrades.with_label_values(&["failed"]).inc();
                                    tracing::error!(
                                        error = format!("{e:#}"),
                                        "upgrade failed; this process keeps serving"
                                    );
                                    // In case the new one named itself first.
                                    notify(&format!("MAINPID={}", std::process::id()));
                                    upgrade.running.store(false, Ordering::Release);
                                }
                            }
                        })
                        .context("spawning the upgrade thread")?,
                );
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
                .filter(|(p, _)| p.kind == Kind::Listen && !ready.adopted.contains(&p.fd))
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
            // notice, then drain.
            metrics.draining.store(true, Ordering::Release);
            if !config.drain_delay.is_zero() {
                tracing::info!(
                    drain_delay = config.drain_delay.as_secs_f64(),
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
    Ok(())
}
