//! The HTTP/2 metric families: requests by protocol, streams, resets and
//! GOAWAYs sent by error code, the defences that fired, flow-control
//! stalls. Rendered from the same published per-shard counters as the rest.

use prometheus::proto::{MetricFamily, MetricType};

use super::{per_core, per_core_by, ShardRow};
use crate::proto::h2::{Defence, ErrorCode};

pub(super) fn families(shards: &[ShardRow]) -> Vec<MetricFamily> {
    vec![
        per_core_by(
            "shardhttpd_http_requests_by_protocol_total",
            "HTTP responses sent, by shard and protocol (h1: HTTP/1.x, h2: HTTP/2, h3: HTTP/3).",
            shards,
            "protocol",
            |c| {
                let all: u64 = c.requests.iter().sum();
                vec![
                    ("h1", all.saturating_sub(c.h2.requests + c.quic.requests)),
                    ("h2", c.h2.requests),
                    ("h3", c.quic.requests),
                ]
            },
        ),
        per_core(
            "shardhttpd_h2_connections_total",
            "Connections that spoke HTTP/2 (ALPN h2, or h2c with prior knowledge).",
            MetricType::COUNTER,
            shards,
            |c| c.h2.connections,
        ),
        per_core(
            "shardhttpd_h2_streams_total",
            "HTTP/2 streams opened by clients and accepted.",
            MetricType::COUNTER,
            shards,
            |c| c.h2.streams,
        ),
        per_core_by(
            "shardhttpd_h2_resets_sent_total",
            "RST_STREAM frames sent, by error code.",
            shards,
            "code",
            |c| {
                ErrorCode::ALL
                    .map(|e| (e.label(), c.h2.resets_sent[e as usize]))
                    .to_vec()
            },
        ),
        per_core_by(
            "shardhttpd_h2_goaways_sent_total",
            "GOAWAY frames sent, by error code (no_error: drain or idle timeout).",
            shards,
            "code",
            |c| {
                ErrorCode::ALL
                    .map(|e| (e.label(), c.h2.goaways_sent[e as usize]))
                    .to_vec()
            },
        ),
        per_core_by(
            "shardhttpd_h2_defences_total",
            "HTTP/2 limits that fired: rapid_reset, continuation_flood, control_flood \
             (GOAWAY ENHANCE_YOUR_CALM), header_list_size (431), max_concurrent_streams \
             (REFUSED_STREAM).",
            shards,
            "defence",
            |c| {
                Defence::ALL
                    .map(|d| (d.label(), c.h2.defences[d as usize]))
                    .to_vec()
            },
        ),
        per_core(
            "shardhttpd_h2_flow_control_stalls_total",
            "Times HTTP/2 responses waited on a closed flow-control window.",
            MetricType::COUNTER,
            shards,
            |c| c.h2.flow_stalls,
        ),
    ]
}
