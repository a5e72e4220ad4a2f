//! The live snapshot and the one function that rebuilds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;

use super::{build, BuildOptions, Snapshot};

/// Owns the `ArcSwap` the shards read, and rebuilds into it.
pub struct Store {
    current: Arc<ArcSwap<Snapshot>>,
    opts: BuildOptions,
    generation: AtomicU64,
    /// Serialises rebuilds (SIGHUP and the file watcher may race).
    rebuilding: Mutex<()>,
}

impl Store {
    /// Build generation 1; an error here is fatal at start.
    pub fn open(opts: BuildOptions) -> anyhow::Result<Store> {
        let snapshot = build(&opts, 1)?;
        Ok(Store {
            current: Arc::new(ArcSwap::from_pointee(snapshot)),
            opts,
            generation: AtomicU64::new(1),
            rebuilding: Mutex::new(()),
        })
    }

    /// The pointer shards read through their `arc_swap::Cache`.
    pub fn shared(&self) -> Arc<ArcSwap<Snapshot>> {
        Arc::clone(&self.current)
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Rebuild from disk and swap atomically: a request sees the old snapshot
    /// or the new one, never a mix. On error the old snapshot stays.
    pub fn rebuild(&self) -> anyhow::Result<u64> {
        let _guard = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        let started = Instant::now();
        let snapshot = build(&self.opts, generation)?;
        self.current.store(Arc::new(snapshot));
        self.generation.store(generation, Ordering::Relaxed);
        tracing::info!(
            generation,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "snapshot swapped generation={generation}"
        );
        Ok(generation)
    }
}
