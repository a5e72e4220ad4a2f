//! Every metric the server exports, and the per-shard counters behind them.

mod counters;

pub use counters::{CloseReason, ShardCounters, DURATION_BUCKETS, STATUSES};
