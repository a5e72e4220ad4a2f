//! The loaded files handed from the loaders to the building thread, which
//! lays out entries in walk order as their batches finish
//! ([`Arrivals`]), instead of waiting for the whole load.

use std::sync::{Condvar, Mutex, MutexGuard};

use super::load::Loaded;

/// Batches of loaded files handed from the workers to the consumer.
pub(super) struct Delivery {
    state: Mutex<Delivered>,
    arrived: Condvar,
}

struct Delivered {
    /// By batch number, until the consumer takes them.
    batches: Vec<Option<Vec<Loaded>>>,
    /// The first error, which fails the build.
    failed: Option<anyhow::Error>,
    /// Workers still running: none left and a batch missing means one
    /// panicked (the scope re-raises its panic).
    workers: usize,
}

impl Delivery {
    /// `batches` to come from `workers` loaders.
    pub(super) fn new(batches: usize, workers: usize) -> Self {
        Delivery {
            state: Mutex::new(Delivered {
                batches: (0..batches).map(|_| None).collect(),
                failed: None,
                workers,
            }),
            arrived: Condvar::new(),
        }
    }

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
    delivery: &'a Delivery,
    next_batch: usize,
    current: std::vec::IntoIter<Loaded>,
}

impl<'a> Arrivals<'a> {
    pub(super) fn new(delivery: &'a Delivery) -> Self {
        Arrivals {
            delivery,
            next_batch: 0,
            current: Vec::new().into_iter(),
        }
    }
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
