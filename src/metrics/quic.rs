//! The QUIC and HTTP/3 metric families (the `quic` room's counters): handshakes,
//! datagrams, loss, Retry, migrations, steering misses, packets forwarded
//! across an upgrade, GOAWAYs, errors.
//! HTTP/3 requests are `protocol="h3"` of the requests by protocol.

use prometheus::proto::{MetricFamily, MetricType};

use super::{per_core, per_core_by, ShardRow};
use crate::proto::h3::Flood;

pub(super) fn families(shards: &[ShardRow]) -> Vec<MetricFamily> {
    let counter = |name: &str, help: &str, value: fn(&super::QuicCounters) -> u64| {
        per_core(name, help, MetricType::COUNTER, shards, move |c| {
            value(&c.quic)
        })
    };
    vec![
        per_core_by(
            "shardhttpd_quic_handshakes_total",
            "QUIC handshakes, by result: completed, or failed (timed out, refused, an error).",
            shards,
            "result",
            |c| {
                vec![
                    ("completed", c.quic.connections),
                    ("failed", c.quic.handshakes_failed),
                ]
            },
        ),
        per_core_by(
            "shardhttpd_quic_datagrams_total",
            "UDP datagrams of QUIC, by direction (a GSO or GRO batch counts each datagram).",
            shards,
            "direction",
            |c| vec![("in", c.quic.datagrams_in), ("out", c.quic.datagrams_out)],
        ),
        counter(
            "shardhttpd_quic_sends_total",
            "Sends on the QUIC sockets, each one datagram or a GSO batch of several (datagrams out over sends: the batching quic_gso buys).",
            |q| q.sends,
        ),
        counter(
            "shardhttpd_quic_send_dropped_total",
            "QUIC datagrams dropped: a stateless answer while the socket buffer was full, or a send that failed.",
            |q| q.send_dropped,
        ),
        counter(
            "shardhttpd_quic_send_blocked_total",
            "Times a QUIC connection's datagrams found the socket buffer full and waited for room.",
            |q| q.send_blocked,
        ),
        counter(
            "shardhttpd_quic_lost_packets_total",
            "Packets declared lost, over the connections that closed.",
            |q| q.lost_packets,
        ),
        counter(
            "shardhttpd_quic_retries_total",
            "Stateless Retry packets sent (quic_retry, or past quic_retry_above).",
            |q| q.retries,
        ),
        counter(
            "shardhttpd_quic_version_negotiation_total",
            "Datagrams of a QUIC version this server does not speak (answered with Version Negotiation).",
            |q| q.version_negotiation,
        ),
        counter(
            "shardhttpd_quic_migrations_total",
            "Connections whose client address changed (NAT rebinding, migration).",
            |q| q.migrations,
        ),
        counter(
            "shardhttpd_quic_foreign_packets_total",
            "Packets read by a shard other than the one their connection ID names (steering missed), or by an upgrade's old process for its successor.",
            |q| q.foreign,
        ),
        per_core_by(
            "shardhttpd_quic_forwarded_total",
            "Packets of the previous process's QUIC connections passed to it during an upgrade, by result: sent, or dropped (its inbox full).",
            shards,
            "result",
            |c| {
                vec![
                    ("sent", c.quic.forwarded),
                    ("dropped", c.quic.forward_dropped),
                ]
            },
        ),
        counter(
            "shardhttpd_quic_idle_timeouts_total",
            "QUIC connections closed by the idle timeout.",
            |q| q.idle_timeouts,
        ),
        counter(
            "shardhttpd_h3_goaways_sent_total",
            "HTTP/3 GOAWAY frames sent (drain).",
            |q| q.goaways,
        ),
        per_core_by(
            "shardhttpd_h3_defences_total",
            "HTTP/3 flood budgets spent (the connection closed with H3_EXCESSIVE_LOAD): rapid_reset, \
             control_flood, frames_before_headers.",
            shards,
            "defence",
            |c| {
                Flood::ALL
                    .map(|f| (f.label(), c.quic.defences[f as usize]))
                    .to_vec()
            },
        ),
        counter(
            "shardhttpd_h3_errors_total",
            "HTTP/3 connections closed for an error of the client's making (frames, settings, QPACK).",
            |q| q.h3_errors,
        ),
    ]
}
