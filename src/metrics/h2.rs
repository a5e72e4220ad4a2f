//! The HTTP/2 metric families: requests by protocol, streams, resets and
//! GOAWAYs sent by error code, the defences that fired, flow-control
//! stalls. Rendered from the same published per-shard counters as the rest.

use prometheus::proto::{MetricFamily, MetricType};

use super::{counter, family, ShardCounters};
use crate::h2::{Defence, ErrorCode};

pub(super) fn families(shards: &[(String, String, bool, ShardCounters)]) -> Vec<MetricFamily> {
    let mut by_protocol = family(
        "shardhttpd_http_requests_by_protocol_total",
        "HTTP responses sent, by shard and protocol (h1: HTTP/1.x, h2: HTTP/2).",
        MetricType::COUNTER,
    );
    let mut connections = family(
        "shardhttpd_h2_connections_total",
        "Connections that spoke HTTP/2 (ALPN h2, or h2c with prior knowledge).",
        MetricType::COUNTER,
    );
    let mut streams = family(
        "shardhttpd_h2_streams_total",
        "HTTP/2 streams opened by clients and accepted.",
        MetricType::COUNTER,
    );
    let mut resets = family(
        "shardhttpd_h2_resets_sent_total",
        "RST_STREAM frames sent, by error code.",
        MetricType::COUNTER,
    );
    let mut goaways = family(
        "shardhttpd_h2_goaways_sent_total",
        "GOAWAY frames sent, by error code (no_error: drain or idle timeout).",
        MetricType::COUNTER,
    );
    let mut defences = family(
        "shardhttpd_h2_defences_total",
        "HTTP/2 limits that fired: rapid_reset, continuation_flood, control_flood \
         (GOAWAY ENHANCE_YOUR_CALM), header_list_size (431), max_concurrent_streams \
         (REFUSED_STREAM).",
        MetricType::COUNTER,
    );
    let mut stalls = family(
        "shardhttpd_h2_flow_control_stalls_total",
        "Times HTTP/2 responses waited on a closed flow-control window.",
        MetricType::COUNTER,
    );
    for (core, _, _, c) in shards {
        let h2 = &c.h2;
        let all: u64 = c.requests.iter().sum();
        by_protocol.mut_metric().push(counter(
            &[("core", core), ("protocol", "h1")],
            all.saturating_sub(h2.requests) as f64,
        ));
        by_protocol.mut_metric().push(counter(
            &[("core", core), ("protocol", "h2")],
            h2.requests as f64,
        ));
        connections
            .mut_metric()
            .push(counter(&[("core", core)], h2.connections as f64));
        streams
            .mut_metric()
            .push(counter(&[("core", core)], h2.streams as f64));
        for code in ErrorCode::ALL {
            resets.mut_metric().push(counter(
                &[("core", core), ("code", code.label())],
                h2.resets_sent[code as usize] as f64,
            ));
            goaways.mut_metric().push(counter(
                &[("core", core), ("code", code.label())],
                h2.goaways_sent[code as usize] as f64,
            ));
        }
        for d in Defence::ALL {
            defences.mut_metric().push(counter(
                &[("core", core), ("defence", d.label())],
                h2.defences[d as usize] as f64,
            ));
        }
        stalls
            .mut_metric()
            .push(counter(&[("core", core)], h2.flow_stalls as f64));
    }
    vec![
        by_protocol,
        connections,
        streams,
        resets,
        goaways,
        defences,
        stalls,
    ]
}
