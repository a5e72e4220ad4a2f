//! Every integration suite in one test binary (one link of the dependency
//! graph instead of one per suite): each module is a suite against the real
//! binary; `cargo test --test it NAME::` runs one suite.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod access_log_fields;
mod acme;
mod admin_limits;
mod behind_caches;
mod compression;
mod config;
mod consistency;
mod deploy;
mod downloads;
mod drain;
mod drain_counts;
mod errors;
mod fd_exhaustion;
mod flags;
mod fs_races;
mod http2;
mod http2_conformance;
mod http2_data;
mod http2_defences;
mod http2_semantics;
mod http_semantics;
mod large_variants;
mod lifecycle;
mod live_reload;
mod memory_per_connection;
mod metrics_histograms;
mod metrics_values;
mod notify;
mod observability;
mod operator;
mod operator_logs;
mod origin_policy;
mod output_queue;
mod paths;
mod pipelining;
mod process_invariants;
mod properties;
mod proxy_protocol;
mod redirects;
mod reload;
mod sendfile;
mod shards;
mod shutdown;
mod site_rules;
mod snapshot_scale;
mod sockact;
mod status_page;
mod steer;
mod tls;
mod tls_certs;
mod tls_hostile;
mod tls_reload;
mod tls_scan;
mod tls_suites;
mod tls_tickets;
mod upgrade;
mod upgrade_tls;
mod uring;
mod watch_moves;
mod watch_races;
