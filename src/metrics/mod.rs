//! Every metric the server exports, and the per-shard counters behind them.
//!
//! Shards count into plain [`ShardCounters`] they own and publish a copy into
//! their own cache-line-aligned [`ShardSlot`] at most every
//! [`PUBLISH_INTERVAL`]; a scrape reads the slots. So the request path never
//! writes memory another core reads, and a scrape sees every request within
//! one interval. The metric names are a contract with `dashboards/`; README
//! documents them.

pub mod access_log;
pub mod admin;
mod counters;
mod h2;
mod quic;
mod sites;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, Registry, TextEncoder};

pub use counters::{
    CloseReason, DrainClose, Handshake, QuicCounters, ShardCounters, DURATION_BUCKETS,
    HANDSHAKE_BUCKETS, STATUSES,
};

use crate::cache::StoreStats;
use crate::http::Status;

/// How often a shard copies its counters into its slot. Bounds how stale a
/// scrape can be: the exactness test waits this long (and then some).
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(250);

/// One shard's published counters, alone on its cache lines.
#[repr(align(128))]
pub struct ShardSlot {
    /// Shard index: the `core` label.
    pub core: usize,
    /// The CPU the shard is pinned to: the `cpu` label of `shard_info`.
    pub cpu: usize,
    /// The shard is in its event loop.
    pub running: AtomicBool,
    /// The shard's event source, an index into [`IO_BACKENDS`] (set once,
    /// when its loop is set up).
    backend: AtomicU8,
    published: Mutex<ShardCounters>,
}

/// The values of `shardhttpd_io_backend`'s `backend` label.
pub const IO_BACKENDS: [&str; 2] = ["epoll", "uring"];

impl ShardSlot {
    /// Record the event source the shard chose (`epoll` or `uring`).
    pub fn set_backend(&self, name: &str) {
        let i = IO_BACKENDS.iter().position(|b| *b == name).unwrap_or(0);
        self.backend.store(i as u8, Ordering::Relaxed);
    }

    pub fn read(&self) -> ShardCounters {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The process-wide metrics: shard slots plus a registry for everything
/// that is not per shard (process collector, rebuild histogram, build info).
pub struct Metrics {
    pub enabled: bool,
    pub slots: Vec<ShardSlot>,
    registry: Registry,
    pub started: Instant,
    /// Wall-clock start, for `/status.json`'s `started_at`.
    pub started_at: std::time::SystemTime,
    /// Set while shutting down: `/readyz` fails.
    pub draining: AtomicBool,
    /// Set once a new process has taken the sockets over: the admin
    /// listener stops accepting, leaving the shared socket to the successor.
    pub handed_over: AtomicBool,
    /// `shardhttpd_upgrades_total{result}`: `success` counted by the new
    /// process of an upgrade, `failed` by the old one that keeps serving.
    pub upgrades: prometheus::IntCounterVec,
    /// `shardhttpd_config_reloads_total{result}`: SIGHUP reloads.
    pub config_reloads: prometheus::IntCounterVec,
    /// Access-log lines dropped because the writer fell behind.
    pub access_log_dropped: Arc<AtomicU64>,
    /// The `site` label of each site, in `serve::sites` order.
    pub sites: Vec<String>,
}

impl Metrics {
    /// `cpus[i]` is the CPU of shard `i`; `sites` are the sites' labels,
    /// the default site's first.
    pub fn new(cpus: &[usize], enabled: bool, sites: Vec<String>) -> Arc<Metrics> {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        {
            let pc = prometheus::process_collector::ProcessCollector::for_self();
            registry
                .register(Box::new(pc))
                .expect("fresh registry accepts the process collector");
        }
        let info = prometheus::IntGaugeVec::new(
            prometheus::Opts::new("shardhttpd_build_info", "Build information; always 1."),
            &["version"],
        )
        .expect("valid metric");
        info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        registry
            .register(Box::new(info))
            .expect("fresh registry accepts build_info");
        let upgrades = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "shardhttpd_upgrades_total",
                "SIGUSR2 binary upgrades, by result: success is counted by the new process once it serves on the sockets it was handed (1 in a process started by an upgrade); failed by the old process when the new one exited or was not ready in time, and the old one kept serving.",
            ),
            &["result"],
        )
        .expect("valid metric");
        for result in ["success", "failed"] {
            upgrades.with_label_values(&[result]);
        }
        registry
            .register(Box::new(upgrades.clone()))
            .expect("fresh registry accepts upgrades_total");
        let config_reloads = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "shardhttpd_config_reloads_total",
                "Configuration reloads (SIGHUP, systemctl reload), by result: unchanged (the file is what runs; the snapshot was rebuilt), invalid (the edit was refused and the running configuration kept serving), applied (counted by the process that a reload started, once it serves), failed (the process started to apply it did not become ready; the old one kept serving).",
            ),
            &["result"],
        )
        .expect("valid metric");
        for result in ["unchanged", "invalid", "applied", "failed"] {
            config_reloads.with_label_values(&[result]);
        }
        registry
            .register(Box::new(config_reloads.clone()))
            .expect("fresh registry accepts config_reloads_total");
        Arc::new(Metrics {
            enabled,
            slots: cpus
                .iter()
                .enumerate()
                .map(|(core, &cpu)| ShardSlot {
                    core,
                    cpu,
                    running: AtomicBool::new(false),
                    backend: AtomicU8::new(0),
                    published: Mutex::new(ShardCounters::new(enabled, sites.len())),
                })
                .collect(),
            registry,
            started: Instant::now(),
            started_at: std::time::SystemTime::now(),
            draining: AtomicBool::new(false),
            handed_over: AtomicBool::new(false),
            upgrades,
            config_reloads,
            access_log_dropped: Arc::new(AtomicU64::new(0)),
            sites,
        })
    }

    /// Register a collector owned elsewhere (e.g. the rebuild histogram).
    pub fn register(&self, c: Box<dyn prometheus::core::Collector>) {
        if let Err(e) = self.registry.register(c) {
            tracing::warn!(error = %e, "metric registration failed");
        }
    }

    /// Called by shard `core` on its tick.
    pub fn publish(&self, core: usize, counters: &ShardCounters) {
        if let Some(slot) = self.slots.get(core) {
            let mut published = slot.published.lock().unwrap_or_else(|e| e.into_inner());
            published.clone_from(counters);
            published.fold_sites();
        }
    }

    /// Every shard is in its loop and the server is not draining.
    pub fn ready(&self) -> bool {
        !self.draining.load(Ordering::Acquire)
            && self.slots.iter().all(|s| s.running.load(Ordering::Acquire))
    }

    /// The text exposition format; `snaps` are the sites' snapshot
    /// figures, the default site's first (the unlabelled
    /// `shardhttpd_snapshot_*` families are its).
    pub fn render(&self, snaps: &[StoreStats]) -> Vec<u8> {
        let mut families = self.registry.gather();
        families.extend(self.shard_families());
        families.extend(snapshot_families(
            &snaps.first().cloned().unwrap_or_default(),
        ));
        families.extend(sites::snapshots(&self.sites, snaps));
        let mut dropped = family(
            "shardhttpd_access_log_dropped_total",
            "Access-log lines dropped because the writer fell behind.",
            MetricType::COUNTER,
        );
        dropped.mut_metric().push(counter(
            &[],
            self.access_log_dropped.load(Ordering::Relaxed) as f64,
        ));
        families.push(dropped);
        // The text encoder refuses a family without series, and one such
        // family (no shard running yet) would blank the whole scrape.
        families.retain(|f| !f.get_metric().is_empty());
        families.sort_by(|a, b| a.get_name().cmp(b.get_name()));
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }

    fn shard_families(&self) -> Vec<MetricFamily> {
        let shards: Vec<ShardRow> = self
            .slots
            .iter()
            .map(|s| {
                let running = s.running.load(Ordering::Acquire);
                (s.core.to_string(), s.cpu.to_string(), running, s.read())
            })
            .collect();
        let mut out = vec![
            requests_family(&shards),
            histogram_family(
                "shardhttpd_http_request_duration_seconds",
                "Time from a request parsed to its response handed to the kernel.",
                &shards,
                |core, c| histogram(&[("core", core)], c),
            ),
            per_core(
                "shardhttpd_http_response_bytes_total",
                "Response body bytes queued for sending.",
                MetricType::COUNTER,
                &shards,
                |c| c.response_bytes,
            ),
            per_core(
                "shardhttpd_connections_accepted_total",
                "Connections accepted.",
                MetricType::COUNTER,
                &shards,
                |c| c.accepted,
            ),
            per_core(
                "shardhttpd_connections_active",
                "Connections open now.",
                MetricType::GAUGE,
                &shards,
                |c| c.active,
            ),
            per_core_by(
                "shardhttpd_connections_closed_total",
                "Connections closed, by reason.",
                &shards,
                "reason",
                |c| CloseReason::ALL.map(|r| (r.label(), c.closed[r as usize])).to_vec(),
            ),
            per_core_by(
                "shardhttpd_drain_closes_total",
                "Connections closed by a shutdown or handover drain, by how: after_response (the response said Connection: close), idle_grace (parted with after drain_idle_grace between requests), deadline (still open when shutdown_grace ran out).",
                &shards,
                "kind",
                |c| DrainClose::ALL.map(|k| (k.label(), c.drain_closes[k as usize])).to_vec(),
            ),
            per_core(
                "shardhttpd_connections_limit_reached_total",
                "Times a shard reached max_connections_per_core and paused accepting.",
                MetricType::COUNTER,
                &shards,
                |c| c.conn_limit_hits,
            ),
            per_core(
                "shardhttpd_uring_recv_buffers_exhausted_total",
                "io_uring receives that found the shard's provided buffer ring empty (ENOBUFS) and were armed again: a sustained rate means more bytes arrive per loop turn than the ring holds.",
                MetricType::COUNTER,
                &shards,
                |c| c.uring_recv_nobufs,
            ),
            per_core_by(
                "shardhttpd_proxy_protocol_total",
                "PROXY protocol headers on proxy_protocol listeners, by result: accepted, or refused (an untrusted peer, no or a malformed header, or none within header_timeout).",
                &shards,
                "result",
                |c| vec![("accepted", c.proxy_protocol[0]), ("refused", c.proxy_protocol[1])],
            ),
            per_core_by(
                "shardhttpd_tls_handshakes_total",
                "TLS handshakes, by result: full, resumed (session ticket or ID) or failed.",
                &shards,
                "result",
                |c| {
                    counters::Handshake::ALL
                        .map(|k| (k.label(), c.handshakes[k as usize]))
                        .to_vec()
                },
            ),
            histogram_family(
                "shardhttpd_tls_handshake_duration_seconds",
                "Time from accept to the end of the TLS handshake (failed ones too).",
                &shards,
                |core, c| {
                    buckets(
                        &[("core", core)],
                        &HANDSHAKE_BUCKETS,
                        &c.handshake_buckets,
                        c.handshake_sum,
                    )
                },
            ),
            per_core(
                "shardhttpd_downloads_from_replaced_file_total",
                "Large-file bodies sent in full from a file renamed over or unlinked while they were sent.",
                MetricType::COUNTER,
                &shards,
                |c| c.downloads_from_replaced,
            ),
            per_core(
                "shardhttpd_downloads_cut_file_changed_total",
                "Large-file responses cut short because the file's bytes changed in place while they were sent.",
                MetricType::COUNTER,
                &shards,
                |c| c.downloads_cut_changed,
            ),
            per_core(
                "shardhttpd_output_bound_hits_total",
                "Times a connection's unsent output reached its 64 KiB bound with the socket full (a client not reading), so it stopped answering until the client read.",
                MetricType::COUNTER,
                &shards,
                |c| c.output_bound_hits,
            ),
            info_family(&shards),
        ];
        out.extend(h2::families(&shards));
        out.extend(quic::families(&shards));
        out.extend(sites::traffic(&self.sites, &shards));
        out.push(self.io_backend_family());
        out
    }

    /// `shardhttpd_io_backend{core,backend}`: 1 for the event source each
    /// running shard uses, 0 for the other, so a fallback to epoll (a
    /// container's seccomp profile) shows as `backend="uring"` at 0.
    fn io_backend_family(&self) -> MetricFamily {
        let mut f = family(
            "shardhttpd_io_backend",
            "The event source each running shard uses (1) and the one it does not (0): epoll, or uring (io_uring); --io auto falls back to epoll where io_uring cannot be set up.",
            MetricType::GAUGE,
        );
        for s in &self.slots {
            if !s.running.load(Ordering::Acquire) {
                continue;
            }
            let core = s.core.to_string();
            let chosen = s.backend.load(Ordering::Relaxed) as usize;
            for (i, b) in IO_BACKENDS.iter().enumerate() {
                let v = if i == chosen { 1.0 } else { 0.0 };
                f.mut_metric()
                    .push(gauge(&[("core", core.as_str()), ("backend", b)], v));
            }
        }
        f
    }
}

/// One published shard: its `core` and `cpu` labels, whether it runs, and
/// its counters.
pub(super) type ShardRow = (String, String, bool, ShardCounters);

/// A family with one series per shard (label `core`), valued by `value`.
pub(super) fn per_core(
    name: &str,
    help: &str,
    kind: MetricType,
    shards: &[ShardRow],
    value: impl Fn(&ShardCounters) -> u64,
) -> MetricFamily {
    let mut f = family(name, help, kind);
    for (core, _, _, c) in shards {
        let labels = [("core", core.as_str())];
        let v = value(c) as f64;
        f.mut_metric().push(if kind == MetricType::GAUGE {
            gauge(&labels, v)
        } else {
            counter(&labels, v)
        });
    }
    f
}

/// A counter family with one series per shard and value of `label`; every
/// value `values` lists has its series from the start (at 0).
pub(super) fn per_core_by(
    name: &str,
    help: &str,
    shards: &[ShardRow],
    label: &str,
    values: impl Fn(&ShardCounters) -> Vec<(&'static str, u64)>,
) -> MetricFamily {
    let mut f = family(name, help, MetricType::COUNTER);
    for (core, _, _, c) in shards {
        for (value, n) in values(c) {
            f.mut_metric()
                .push(counter(&[("core", core), (label, value)], n as f64));
        }
    }
    f
}

/// A histogram family with one series per shard, made by `series`.
fn histogram_family(
    name: &str,
    help: &str,
    shards: &[ShardRow],
    series: impl Fn(&str, &ShardCounters) -> Metric,
) -> MetricFamily {
    let mut f = family(name, help, MetricType::HISTOGRAM);
    for (core, _, _, c) in shards {
        f.mut_metric().push(series(core, c));
    }
    f
}

/// Responses by shard and status code: a series for each code sent, and
/// for 200 always, so every shard has a series from the start.
fn requests_family(shards: &[ShardRow]) -> MetricFamily {
    let mut f = family(
        "shardhttpd_http_requests_total",
        "HTTP responses sent, by shard and status code.",
        MetricType::COUNTER,
    );
    for (core, _, _, c) in shards {
        for (i, &n) in c.requests.iter().enumerate() {
            let status = Status::ALL[i];
            if n > 0 || status == Status::Ok {
                let code = status.code().to_string();
                f.mut_metric()
                    .push(counter(&[("core", core), ("code", &code)], n as f64));
            }
        }
    }
    f
}

/// One series per running shard: its core and the CPU it is pinned to.
fn info_family(shards: &[ShardRow]) -> MetricFamily {
    let mut f = family(
        "shardhttpd_shard_info",
        "One series per running shard: its core label and the CPU it is pinned to.",
        MetricType::GAUGE,
    );
    for (core, cpu, running, _) in shards {
        if *running {
            f.mut_metric()
                .push(gauge(&[("core", core), ("cpu", cpu)], 1.0));
        }
    }
    f
}

fn snapshot_families(snap: &StoreStats) -> Vec<MetricFamily> {
    let mut generation = family(
        "shardhttpd_snapshot_generation",
        "Generation of the snapshot being served; grows by one per swap.",
        MetricType::GAUGE,
    );
    generation
        .mut_metric()
        .push(gauge(&[], snap.generation as f64));
    let mut files = family(
        "shardhttpd_snapshot_files",
        "Files in the snapshot being served.",
        MetricType::GAUGE,
    );
    files.mut_metric().push(gauge(&[], snap.files as f64));
    let mut bytes = family(
        "shardhttpd_snapshot_bytes",
        "Body bytes in the snapshot, by encoding.",
        MetricType::GAUGE,
    );
    for (encoding, n) in &snap.bytes_by_encoding {
        bytes
            .mut_metric()
            .push(gauge(&[("encoding", encoding)], *n as f64));
    }
    let mut rebuilds = family(
        "shardhttpd_snapshot_rebuilds_total",
        "Snapshot rebuilds, by result.",
        MetricType::COUNTER,
    );
    rebuilds
        .mut_metric()
        .push(counter(&[("result", "success")], snap.rebuilds_ok as f64));
    rebuilds.mut_metric().push(counter(
        &[("result", "failure")],
        snap.rebuilds_failed as f64,
    ));
    let mut sidecars = family(
        "shardhttpd_sidecar_rejected_total",
        "Precompressed sidecars not used because they are older than their source or do not decode to it, by reason; counted each time a build reads the pair.",
        MetricType::COUNTER,
    );
    for (reason, n) in crate::cache::sidecars_rejected() {
        sidecars
            .mut_metric()
            .push(counter(&[("reason", reason)], n as f64));
    }
    let mut examined = family(
        "shardhttpd_snapshot_build_paths_examined",
        "Files and directories stat'ed or listed by the build of the snapshot being served.",
        MetricType::GAUGE,
    );
    examined
        .mut_metric()
        .push(gauge(&[], snap.last_build_paths_examined as f64));
    let mut copied = family(
        "shardhttpd_snapshot_build_bytes_copied",
        "Body bytes the build of the snapshot being served copied; the rest is shared with the previous generation.",
        MetricType::GAUGE,
    );
    copied
        .mut_metric()
        .push(gauge(&[], snap.last_build_bytes_copied as f64));
    let mut from_disk = family(
        "shardhttpd_snapshot_from_disk",
        "1 while the snapshot sends its files from disk, until the background load (a start past preload_max_files) publishes them in memory.",
        MetricType::GAUGE,
    );
    from_disk
        .mut_metric()
        .push(gauge(&[], f64::from(u8::from(snap.from_disk))));
    vec![
        generation, files, bytes, rebuilds, sidecars, examined, copied, from_disk,
    ]
}

pub(super) fn family(name: &str, help: &str, kind: MetricType) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(kind);
    f
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).to_owned());
            l.set_value((*v).to_owned());
            l
        })
        .collect()
}

pub(super) fn counter(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    let mut c = Counter::default();
    c.set_value(v);
    m.set_counter(c);
    m
}

pub(super) fn gauge(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    let mut g = Gauge::default();
    g.set_value(v);
    m.set_gauge(g);
    m
}

fn histogram(pairs: &[(&str, &str)], c: &ShardCounters) -> Metric {
    buckets(
        pairs,
        &DURATION_BUCKETS,
        &c.duration_buckets,
        c.duration_sum,
    )
}

/// A histogram from per-bucket counts (`counts` has one more, for +Inf).
fn buckets(pairs: &[(&str, &str)], bounds: &[f64], counts: &[u64], sum: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    let mut h = Histogram::default();
    let mut cumulative = 0;
    let mut out = Vec::with_capacity(bounds.len());
    for (i, &bound) in bounds.iter().enumerate() {
        cumulative += counts[i];
        let mut b = Bucket::default();
        b.set_upper_bound(bound);
        b.set_cumulative_count(cumulative);
        out.push(b);
    }
    cumulative += counts[bounds.len()];
    h.set_bucket(out);
    h.set_sample_count(cumulative);
    h.set_sample_sum(sum);
    m.set_histogram(h);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_before_any_shard_runs_still_renders_every_other_family() {
        let metrics = Metrics::new(&[0, 1], true, vec!["default".into()]);
        let text = String::from_utf8(metrics.render(&[])).unwrap();
        assert!(
            text.contains("shardhttpd_access_log_dropped_total 0"),
            "{text}"
        );
        assert!(!text.contains("shardhttpd_io_backend{"), "{text}");
        metrics.slots[1].running.store(true, Ordering::Release);
        let text = String::from_utf8(metrics.render(&[StoreStats::default()])).unwrap();
        assert!(text.contains("shardhttpd_io_backend{"), "{text}");
        assert!(
            text.contains("shardhttpd_site_requests_total{site=\"default\",class=\"2xx\"} 0"),
            "{text}"
        );
    }
}
