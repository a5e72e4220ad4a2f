//! The loaded files handed from the loaders to the building thread, which
//! lays out entries in walk order as their batches finish
//! ([`Arrivals`]), instead of waiting for the whole load.

use std::sync::{Condvar, Mutex, MutexGuard};

use super::load::Loaded;

/// Batches of loaded files handed from the workers to the consumer.
pub(super) struct Delivery {
    pub(super) state: Mutex<Delivered>,
    pub(super) arrived: Condvar,
}

pub(super) struct Delivered {
    /// By batch number, until the consumer takes them.
    pub(super) batches: Vec<Option<Vec<Loaded>>>,
    /// The first error, which fails the build.
    pub(super) failed: Option<anyhow::Error>,
    /// Workers still running: none left and a batch missing means one
    /// panicked (the scope re-raises its panic).
    pub(super) workers: usize,
}

impl Delivery {
    fn lock(&self) -> MutexGuard<'_, Delivered> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn deliver(&self, batch: usize, loaded: anyhow::Result<Vec<Loaded>>) {
        let mut state = self.lock();
        match loaded {
            Ok(files) => state.batches[batch] = Some(files),
            Err(err) => {
                state.failed.get_or_insert(err);
            }
        }
        drop(state);
        self.arrived.notify_all();
    }
}

/// Counts a worker out however it ends, panics included.
pub(super) struct Leaving<'a>(pub(super) &'a Delivery);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.lock().workers -= 1;
        self.0.arrived.notify_all();
    }
}

/// The loaded files, in walk order, as their batches finish.
pub(super) struct Arrivals<'a> {
    pub(super) delivery: &'a Delivery,
    pub(super) next_batch: usize,
    pub(super) current: std::vec::IntoIter<Loaded>,
}

impl Arrivals<'_> {
    /// The result of the next file loaded, in walk order; waits for its
    /// batch. Fails with the build's error once a load has failed.
    pub(super) fn next_load(&mut self) -> anyhow::Result<Loaded> {
        loop {
            if let Some(loaded) = self.current.next() {
                return Ok(loaded);
            }
            let mut state = self.delivery.lock();
            loop {
                if let Some(err) = state.failed.take() {
                    return Err(err);
                }
                let next = state.batches.get_mut(self.next_batch);
                let Some(slot) = next else {
                    anyhow::bail!("more files asked for than were loaded");
                };
                if let Some(files) = slot.take() {
                    self.current = files.into_iter();
                    self.next_batch += 1;
                    break;
                }
                if state.workers == 0 {
                    anyhow::bail!("a loader stopped before its files were loaded");
                }
                state = self
                    .delivery
                    .arrived
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}
