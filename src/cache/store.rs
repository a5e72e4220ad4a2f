//! The live snapshot and the one function that rebuilds it (called by the
//! watcher and on SIGHUP), with the figures the metrics module exports.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use prometheus::{Histogram, HistogramOpts};

use super::build::{build_first, rebuild, rebuild_watching, Built, DirHook, TreeChanged};
use super::{BuildOptions, Snapshot, SIDECARS};

/// Times the initial build is tried when the tree changes under it; a deploy
/// racing the start should not stop the server from starting.
const OPEN_ATTEMPTS: usize = 3;

/// Roots with at most this many bytes of in-memory bodies (and of large
/// files that get variants) are compressed before the server starts
/// listening; larger ones start with identity bodies and get their
/// variants from a background rebuild.
const SYNC_COMPRESS_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Name of the span around the start-up build that repeats the identity
/// build with compression; events inside it are duplicates and are not logged.
pub const REPEAT_BUILD_SPAN: &str = "repeat_build";

/// Rebuild durations span a no-change walk of a small root (well under a
/// millisecond) to a cold build of a large root at brotli 11 (minutes).
const REBUILD_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// Owns the `ArcSwap` the shards read, and rebuilds into it.
pub struct Store {
    current: Arc<ArcSwap<Snapshot>>,
    opts: BuildOptions,
    generation: AtomicU64,
    /// Serialises rebuilds (SIGHUP and the file watcher may race).
    rebuilding: Mutex<()>,
    /// While a background build ([`Store::build_aside`]) runs, what the
    /// rebuilds meanwhile looked at: its catch-up looks at those paths
    /// again rather than walking the whole root under the rebuild lock.
    aside: Mutex<Option<Since>>,
    rebuilds_ok: AtomicU64,
    rebuilds_failed: AtomicU64,
    /// Duration of the last rebuild attempt, in microseconds.
    last_rebuild_us: AtomicU64,
    /// When the last rebuild succeeded, in Unix seconds (0: never).
    last_success_unix: AtomicU64,
    /// Every rebuild attempt, successful or not; registered by the metrics
    /// module.
    pub rebuild_duration: Histogram,
}

/// What the rebuilds since a background build began were asked to look at.
#[derive(Default)]
struct Since {
    /// Paths inotify reported.
    paths: HashSet<PathBuf>,
    /// A rebuild walked the whole root (SIGHUP, lost events, the safety
    /// rescan): so does the catch-up.
    full: bool,
}

/// Figures for the metrics endpoint, read at scrape time.
#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    pub generation: u64,
    pub files: u64,
    /// Identity body bytes, in memory and sent from files.
    pub bytes_identity: u64,
    /// Body bytes by encoding label: `identity`, `br`, `gzip`, `zstd`.
    pub bytes_by_encoding: Vec<(&'static str, u64)>,
    pub rebuilds_ok: u64,
    pub rebuilds_failed: u64,
    /// How long the last rebuild attempt took.
    pub last_rebuild_seconds: f64,
    /// When the last rebuild succeeded (Unix seconds, 0 before the first).
    pub last_success_unix_seconds: u64,
    /// Files and directories the build of the snapshot being served
    /// stat'ed or listed.
    pub last_build_paths_examined: u64,
    /// Body bytes that build copied into new memory (the rest it shares
    /// with the previous generation).
    pub last_build_bytes_copied: u64,
    /// Body segments of the snapshot being served.
    pub segments: u64,
    /// The snapshot being served sends its files from disk until the
    /// background load publishes them in memory (a start past
    /// `preload_max_files`).
    pub from_disk: bool,
}

impl Store {
    /// Build generation 1; an error here is fatal at start.
    pub fn open(opts: BuildOptions) -> anyhow::Result<Store> {
        Store::open_watching(opts, None)
    }

    /// [`Store::open`], handing every directory the first walk lists to
    /// `hook` just before listing it (the watcher's, so each directory's
    /// watch precedes its listing).
    pub fn open_watching(opts: BuildOptions, hook: Option<&DirHook>) -> anyhow::Result<Store> {
        let rebuild_duration = Histogram::with_opts(
            HistogramOpts::new(
                "shardhttpd_snapshot_rebuild_duration_seconds",
                "Time taken by snapshot rebuild attempts, failed ones included.",
            )
            .buckets(REBUILD_BUCKETS.to_vec()),
        )?;
        // Serve identity bodies as soon as they are read: at brotli 11 a
        // large root takes minutes to compress. Small roots are compressed
        // before the start completes; large ones in the background
        // (`compress_pending`).
        let identity_opts = BuildOptions {
            compress: None,
            ..budgeted(&opts)
        };
        let mut snapshot = initial_build(&identity_opts, hook)?;
        if snapshot.from_disk {
            tracing::info!(
                files = snapshot.stats.files,
                preload_max_files = opts.preload_max_files,
                "more files than preload_max_files: serving them from disk until they are loaded"
            );
        } else if opts.compress.is_some()
            && snapshot.stats.mem_bytes + snapshot.stats.compressible_file_bytes
                <= SYNC_COMPRESS_MAX_BYTES
        {
            let started = Instant::now();
            // The same tree again, with variants: what it would log (the
            // build line, warnings about the same files) the identity build
            // has just logged. The binary's subscriber drops events inside
            // this span; one line below says what it added.
            snapshot = {
                let _quiet = tracing::info_span!(REPEAT_BUILD_SPAN).entered();
                initial_build(&budgeted(&opts), None)?
            };
            tracing::info!(
                encoded_bytes = snapshot.stats.encoded_bytes.iter().sum::<u64>(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "compressed variants built before serving"
            );
        }
        let limit = crate::sys::nofile_limit();
        tracing::info!(
            large_files = snapshot.stats.large_files,
            max_open_files = opts.open_files.capacity(),
            nofile_limit = limit.unwrap_or(0),
            "large files are opened on demand; at most max_open_files fds are kept open"
        );
        if let Some(limit) = limit {
            if opts.open_files.capacity() as u64 >= limit / 2 {
                tracing::warn!(
                    max_open_files = opts.open_files.capacity(),
                    nofile_limit = limit,
                    "max_open_files is at least half the fd limit; connections may run out of fds"
                );
            }
        }
        hold(&opts, &snapshot);
        Ok(Store {
            current: Arc::new(ArcSwap::from_pointee(snapshot)),
            opts,
            generation: AtomicU64::new(1),
            rebuilding: Mutex::new(()),
            aside: Mutex::new(None),
            rebuilds_ok: AtomicU64::new(0),
            rebuilds_failed: AtomicU64::new(0),
            last_rebuild_us: AtomicU64::new(0),
            last_success_unix: AtomicU64::new(unix_now()),
            rebuild_duration,
        })
    }

    /// The snapshot being served sends its files from disk (a start past
    /// `preload_max_files`): `build_loaded` reads them into memory.
    pub fn load_pending(&self) -> bool {
        self.current.load().from_disk
    }

    /// Compression is configured but the snapshot being served has no
    /// variants yet: `build_compressed` builds them (see `open`).
    pub fn compress_pending(&self) -> bool {
        self.opts.compress.is_some() && !self.current.load().compressed
    }

    /// The pointer shards read through their `arc_swap::Cache`.
    pub fn shared(&self) -> Arc<ArcSwap<Snapshot>> {
        Arc::clone(&self.current)
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The root as configured (possibly a symlink).
    pub fn root(&self) -> &Path {
        &self.opts.root
    }

    /// Rebuild from disk and swap atomically: a request sees the old snapshot
    /// or the new one, never a mix. Unchanged files are reused, and when
    /// nothing changed nothing is swapped. On error the old snapshot stays.
    /// Returns the generation now served.
    pub fn rebuild(&self) -> anyhow::Result<u64> {
        self.rebuild_holding(&HashSet::new())
    }

    /// [`Store::rebuild`], keeping the files in `held` (canonical paths a
    /// writer still has open) at their current version.
    pub fn rebuild_holding(&self, held: &HashSet<PathBuf>) -> anyhow::Result<u64> {
        self.rebuild_changed(held, None, None)
    }

    /// [`Store::rebuild_holding`], looking only at `changed` (the paths
    /// inotify reported since the snapshot being served was built) when
    /// given, unless the change needs a full walk. A full walk hands each
    /// directory to `hook` (if any) before listing it.
    pub fn rebuild_changed(
        &self,
        held: &HashSet<PathBuf>,
        changed: Option<&HashSet<PathBuf>>,
        hook: Option<&DirHook>,
    ) -> anyhow::Result<u64> {
        let _guard = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = self
            .aside
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            match changed {
                Some(paths) => since.paths.extend(paths.iter().cloned()),
                None => since.full = true,
            }
        }
        let old = self.current.load_full();
        // Until `build_compressed` has published, changes are served with
        // identity bodies: compressing here would reload the whole root.
        let opts = if old.compressed || self.opts.compress.is_none() {
            budgeted(&self.opts)
        } else {
            BuildOptions {
                compress: None,
                ..budgeted(&self.opts)
            }
        };
        let started = Instant::now();
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        let built = match (hook, changed) {
            (Some(hook), None) => rebuild_watching(&opts, generation, Some(&old), held, hook),
            _ => rebuild(&opts, generation, Some(&old), held, changed),
        };
        let built = self.record(built, started);
        match built {
            Ok(Built::New(snapshot)) => Ok(self.swap(snapshot, generation, started)),
            // A full walk that changed nothing (the safety rescan, mostly)
            // or failed still freed a walk's worth of blocks: 25 MB stayed
            // resident after each rescan of 200 000 files without this.
            Ok(Built::Unchanged) => {
                tracing::debug!(generation = generation - 1, "snapshot unchanged");
                crate::sys::trim_heap();
                Ok(generation - 1)
            }
            Err(err) => {
                crate::sys::trim_heap();
                Err(err)
            }
        }
    }

    /// Read the files of a start from disk into memory (see `open`), with
    /// identity bodies only (`build_compressed` follows when compression is
    /// on), as [`Store::build_compressed`] does.
    pub fn build_loaded(&self) -> anyhow::Result<u64> {
        let identity = BuildOptions {
            compress: None,
            ..budgeted(&self.opts)
        };
        self.build_aside(&identity)
    }

    /// Build the compressed variants of a root that started with identity
    /// bodies (see `open`), as [`Store::build_aside`] does.
    pub fn build_compressed(&self) -> anyhow::Result<u64> {
        self.build_aside(&budgeted(&self.opts))
    }

    /// Build the whole root from scratch with `opts` and publish it. The
    /// long part runs without holding the rebuild lock, so changes keep
    /// being served meanwhile; the result is then brought up to date like
    /// an incremental rebuild, from the paths the rebuilds meanwhile were
    /// given (a full walk if one of them walked), and published.
    fn build_aside(&self, opts: &BuildOptions) -> anyhow::Result<u64> {
        let started = Instant::now();
        let none = HashSet::new();
        *self.aside.lock().unwrap_or_else(|e| e.into_inner()) = Some(Since::default());
        let built = rebuild(opts, 0, None, &none, None);
        let guard = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let since = self
            .aside
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        let base = match self.record(built, started)? {
            Built::New(snapshot) => snapshot,
            Built::Unchanged => unreachable!("no previous snapshot"),
        };
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        let mut snapshot = if !since.full && since.paths.is_empty() {
            base
        } else {
            let changed = (!since.full).then_some(&since.paths);
            match self.record(
                rebuild(opts, generation, Some(&base), &none, changed),
                started,
            )? {
                Built::New(snapshot) => snapshot,
                Built::Unchanged => base,
            }
        };
        snapshot.generation = generation;
        let replaced = self.current.load_full();
        self.swap(snapshot, generation, started);
        drop(guard);
        release(replaced);
        Ok(generation)
    }

    /// Count and time a build attempt.
    fn record(&self, result: anyhow::Result<Built>, started: Instant) -> anyhow::Result<Built> {
        let elapsed = started.elapsed();
        self.rebuild_duration.observe(elapsed.as_secs_f64());
        self.last_rebuild_us
            .store(elapsed.as_micros() as u64, Ordering::Relaxed);
        match &result {
            Ok(_) => {
                self.rebuilds_ok.fetch_add(1, Ordering::Relaxed);
                self.last_success_unix.store(unix_now(), Ordering::Relaxed);
            }
            Err(_) => {
                self.rebuilds_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Publish `snapshot`; the caller holds the rebuild lock.
    fn swap(&self, snapshot: Snapshot, generation: u64, started: Instant) -> u64 {
        hold(&self.opts, &snapshot);
        self.current.swap(Arc::new(snapshot)).retire();
        self.generation.store(generation, Ordering::Relaxed);
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "snapshot swapped generation={generation}"
        );
        // After the swap, so it never delays a change being served.
        crate::sys::trim_heap();
        generation
    }

    pub fn stats(&self) -> StoreStats {
        let snapshot = self.current.load();
        let s = &snapshot.stats;
        let mut bytes_by_encoding = vec![("identity", s.mem_bytes + s.file_bytes)];
        for (slot, (coding, _)) in SIDECARS.iter().enumerate() {
            let label = match coding {
                crate::http::accept::Coding::Brotli => "br",
                crate::http::accept::Coding::Zstd => "zstd",
                crate::http::accept::Coding::Gzip => "gzip",
                crate::http::accept::Coding::Identity => "identity",
            };
            bytes_by_encoding.push((label, s.encoded_bytes[slot]));
        }
        StoreStats {
            generation: snapshot.generation,
            files: s.files,
            bytes_identity: s.mem_bytes + s.file_bytes,
            bytes_by_encoding,
            rebuilds_ok: self.rebuilds_ok.load(Ordering::Relaxed),
            rebuilds_failed: self.rebuilds_failed.load(Ordering::Relaxed),
            last_rebuild_seconds: self.last_rebuild_us.load(Ordering::Relaxed) as f64 / 1e6,
            last_success_unix_seconds: self.last_success_unix.load(Ordering::Relaxed),
            last_build_paths_examined: s.paths_examined,
            last_build_bytes_copied: s.bytes_copied,
            segments: s.segments,
            from_disk: snapshot.from_disk,
        }
    }
}

/// `opts` with `cache_max_bytes` lowered to what the server's other sites
/// leave of it (`cache::Budget`).
fn budgeted(opts: &BuildOptions) -> BuildOptions {
    let mut out = opts.clone();
    if let Some(share) = &opts.budget {
        out.cache_max_bytes = out.cache_max_bytes.min(share.available());
    }
    out
}

/// Record what `snapshot`, about to be served, holds of the shared budget:
/// its bodies and variants (large sidecars, sent from their fds, count
/// too: the accounting errs high).
fn hold(opts: &BuildOptions, snapshot: &Snapshot) {
    if let Some(share) = &opts.budget {
        let s = &snapshot.stats;
        share.hold(s.mem_bytes + s.encoded_bytes.iter().sum::<u64>());
    }
}

/// Drop the snapshot a background build replaced here, once the shards
/// have let go of it (each does within `metrics::PUBLISH_INTERVAL`, even
/// when idle), then give the freed heap back: a start from disk's snapshot
/// holds some 200 MB of small allocations at a million files, which would
/// otherwise be freed on a shard and stay resident. Waits at most
/// [`RELEASE_WAIT`]; a response still being sent from it then frees it
/// when done.
fn release(replaced: Arc<Snapshot>) {
    let until = Instant::now() + RELEASE_WAIT;
    while Arc::strong_count(&replaced) > 1 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(replaced);
    crate::sys::trim_heap();
}

/// See [`release`].
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Build generation 1, retrying when the tree changes under the walk: a
/// deploy racing the start should not stop the server from starting.
/// It runs before anything is served, at normal priority (see
/// [`build_first`]).
fn initial_build(opts: &BuildOptions, hook: Option<&DirHook>) -> anyhow::Result<Snapshot> {
    let mut attempt = 1;
    loop {
        match build_first(opts, hook) {
            Ok(snapshot) => return Ok(snapshot),
            Err(err) if err.is::<TreeChanged>() && attempt < OPEN_ATTEMPTS => {
                tracing::warn!(error = %err, "root changed during the initial build; retrying");
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
