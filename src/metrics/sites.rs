//! The per-site families: responses by status class and body bytes,
//! summed over the shards, and each site's snapshot figures. The `site`
//! label is a site's first name from the config (`default` for the top
//! level), never a request's `Host`, so its values are bounded.

use prometheus::proto::{MetricFamily, MetricType};

use super::counters::CLASSES;
use super::{counter, family, gauge, ShardRow};
use crate::cache::StoreStats;

/// `shardhttpd_site_requests_total{site,class}` and
/// `shardhttpd_site_response_bytes_total{site}`.
pub(super) fn traffic(sites: &[String], shards: &[ShardRow]) -> Vec<MetricFamily> {
    let mut requests = family(
        "shardhttpd_site_requests_total",
        "HTTP responses sent, by site (its first name in the config; default for the top level) and status class, over every shard.",
        MetricType::COUNTER,
    );
    let mut bytes = family(
        "shardhttpd_site_response_bytes_total",
        "Response body bytes queued for sending, by site, over every shard.",
        MetricType::COUNTER,
    );
    for (i, site) in sites.iter().enumerate() {
        let sum = |f: &dyn Fn(&super::counters::SiteCounts) -> u64| -> u64 {
            shards
                .iter()
                .filter_map(|(_, _, _, c)| c.sites.get(i))
                .map(f)
                .sum()
        };
        for (class, label) in CLASSES {
            let n = sum(&|s| s.class(class));
            requests
                .mut_metric()
                .push(counter(&[("site", site), ("class", label)], n as f64));
        }
        let n = sum(&|s| s.bytes);
        bytes
            .mut_metric()
            .push(counter(&[("site", site)], n as f64));
    }
    vec![requests, bytes]
}

/// Each site's snapshot: `shardhttpd_site_snapshot_{generation,files,bytes}`
/// and `shardhttpd_site_snapshot_rebuilds_total{result}`.
pub(super) fn snapshots(sites: &[String], stats: &[StoreStats]) -> Vec<MetricFamily> {
    let mut generation = family(
        "shardhttpd_site_snapshot_generation",
        "Generation of the snapshot each site serves; grows by one per swap.",
        MetricType::GAUGE,
    );
    let mut files = family(
        "shardhttpd_site_snapshot_files",
        "Files in the snapshot each site serves.",
        MetricType::GAUGE,
    );
    let mut bytes = family(
        "shardhttpd_site_snapshot_bytes",
        "Body bytes in each site's snapshot, identity and variants, in memory and sent from files.",
        MetricType::GAUGE,
    );
    let mut rebuilds = family(
        "shardhttpd_site_snapshot_rebuilds_total",
        "Snapshot rebuilds of each site, by result.",
        MetricType::COUNTER,
    );
    for (site, s) in sites.iter().zip(stats) {
        let l = [("site", site.as_str())];
        generation.mut_metric().push(gauge(&l, s.generation as f64));
        files.mut_metric().push(gauge(&l, s.files as f64));
        let total: u64 = s.bytes_by_encoding.iter().map(|(_, n)| n).sum();
        bytes.mut_metric().push(gauge(&l, total as f64));
        for (result, n) in [("success", s.rebuilds_ok), ("failure", s.rebuilds_failed)] {
            rebuilds
                .mut_metric()
                .push(counter(&[("site", site), ("result", result)], n as f64));
        }
    }
    vec![generation, files, bytes, rebuilds]
}
