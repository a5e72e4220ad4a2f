//! A hashed timer wheel of connection tokens.
//!
//! Connections move their deadline on every request without touching the
//! wheel; an entry that fires early is re-inserted at the connection's current
//! deadline (lazy re-insertion), so the request path costs one field write.
//! A deadline that moves *earlier* than its entry is inserted again, and the
//! stale later entry is dropped when it fires (see `Conn::scheduled`).

use std::time::{Duration, Instant};

/// Wheel resolution: timeouts fire up to this late.
pub const TICK: Duration = Duration::from_millis(250);
/// Slots: 256 × 250 ms covers 64 s; later deadlines wait in the last slot
/// and are re-inserted when it fires.
const SLOTS: usize = 256;

pub struct Wheel {
    slots: Vec<Vec<u64>>,
    start: Instant,
    /// Absolute index of the next tick to fire.
    next: u64,
}

impl Wheel {
    pub fn new(now: Instant) -> Wheel {
        Wheel {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            start: now,
            next: 1,
        }
    }

    fn tick_of(&self, t: Instant) -> u64 {
        let since = t.saturating_duration_since(self.start);
        // Round up: an entry never fires before its deadline.
        since.as_nanos().div_ceil(TICK.as_nanos()) as u64
    }

    /// Schedule `token` for `deadline`, or for the wheel's horizon if that
    /// is nearer. Returns when the entry fires: the caller keeps it as the
    /// connection's `scheduled`, so an entry parked at the horizon is taken
    /// for a live one (and re-inserted) when it fires, not for a stale one.
    pub fn insert(&mut self, token: u64, deadline: Instant) -> Instant {
        let tick = self
            .tick_of(deadline)
            .clamp(self.next, self.next + SLOTS as u64 - 1);
        self.slots[(tick % SLOTS as u64) as usize].push(token);
        (self.start + TICK * tick as u32).min(deadline.max(self.start))
    }

    /// Move every token whose tick has passed into `out`.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<u64>) {
        let now_tick = self.tick_of(now).saturating_sub(1);
        let mut fired = 0;
        while self.next <= now_tick && fired < SLOTS {
            out.append(&mut self.slots[(self.next % SLOTS as u64) as usize]);
            self.next += 1;
            fired += 1;
        }
        if self.next <= now_tick {
            // Fell behind by more than a turn: every slot has fired.
            self.next = now_tick + 1;
        }
    }

    /// How long until the next tick is due.
    pub fn until_next(&self, now: Instant) -> Duration {
        let due = self.start + TICK * (self.next as u32).max(1);
        due.saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_after_deadline_not_before() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        w.insert(7, t0 + Duration::from_millis(600));
        let mut out = Vec::new();
        w.expire(t0 + Duration::from_millis(500), &mut out);
        assert!(out.is_empty());
        w.expire(t0 + Duration::from_millis(1000), &mut out);
        assert_eq!(out, vec![7]);
    }

    #[test]
    fn far_deadline_parks_in_last_slot() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        w.insert(1, t0 + Duration::from_secs(3600));
        let mut out = Vec::new();
        w.expire(t0 + Duration::from_secs(65), &mut out);
        assert_eq!(out, vec![1]);
    }

    #[test]
    fn a_parked_entry_reports_the_horizon_it_fires_at() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        let deadline = t0 + Duration::from_secs(300);
        let fires = w.insert(1, deadline);
        assert!(fires < deadline && fires <= t0 + Duration::from_secs(64));
        let mut out = Vec::new();
        w.expire(fires, &mut out);
        assert!(out.is_empty(), "not before it is due");
        w.expire(fires + TICK, &mut out);
        assert_eq!(out, vec![1]);
        // A near deadline fires at (not before) the deadline.
        let near = t0 + Duration::from_millis(600);
        assert_eq!(w.insert(2, near), near);
    }

    #[test]
    fn catches_up_after_a_long_pause() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        w.insert(1, t0 + Duration::from_secs(1));
        w.insert(2, t0 + Duration::from_secs(30));
        let mut out = Vec::new();
        w.expire(t0 + Duration::from_secs(500), &mut out);
        out.sort();
        assert_eq!(out, vec![1, 2]);
        w.insert(3, t0 + Duration::from_secs(501));
        out.clear();
        w.expire(t0 + Duration::from_secs(502), &mut out);
        assert_eq!(out, vec![3]);
    }
}
