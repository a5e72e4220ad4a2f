//! `cache_max_bytes` shared by the sites of a server: each site's store
//! records what its published snapshot holds in memory, and a build of a
//! site may use what the others leave. Sites claim in the order they build
//! (config order at start); a file that does not fit is sent from its fd,
//! as in a one-site server whose root outgrows the budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The server's body memory, by site.
#[derive(Debug)]
pub struct Budget {
    total: u64,
    held: Vec<AtomicU64>,
    /// The sum of `held`.
    sum: AtomicU64,
}

/// One site's share of a [`Budget`], carried in its `BuildOptions`.
#[derive(Debug, Clone)]
pub struct SiteBudget {
    budget: Arc<Budget>,
    site: usize,
}

impl Budget {
    /// `total` bytes (`cache_max_bytes`) for `sites` sites: one share each.
    pub fn shares(total: u64, sites: usize) -> Vec<SiteBudget> {
        let budget = Arc::new(Budget {
            total,
            held: (0..sites).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        });
        (0..sites)
            .map(|site| SiteBudget {
                budget: Arc::clone(&budget),
                site,
            })
            .collect()
    }
}

impl SiteBudget {
    /// What a build of this site may hold: the total less what the other
    /// sites' published snapshots hold.
    pub fn available(&self) -> u64 {
        let mine = self.budget.held[self.site].load(Ordering::Relaxed);
        let others = self.budget.sum.load(Ordering::Relaxed).saturating_sub(mine);
        self.budget.total.saturating_sub(others)
    }

    /// This site's published snapshot holds `bytes` of bodies in memory.
    /// (A site's store publishes under its rebuild lock, so one site's
    /// holdings never race each other.)
    pub fn hold(&self, bytes: u64) {
        let before = self.budget.held[self.site].swap(bytes, Ordering::Relaxed);
        self.budget.sum.fetch_add(bytes, Ordering::Relaxed);
        self.budget.sum.fetch_sub(before, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_gets_what_the_others_leave() {
        let shares = Budget::shares(100, 3);
        assert_eq!(shares[1].available(), 100);
        shares[0].hold(60);
        assert_eq!(
            shares[0].available(),
            100,
            "its own holding is its to replace"
        );
        assert_eq!(shares[1].available(), 40);
        shares[2].hold(30);
        assert_eq!(shares[1].available(), 10);
        shares[0].hold(90);
        assert_eq!(shares[1].available(), 0, "never below zero");
    }
}
