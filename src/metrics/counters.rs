//! Per-shard counters: plain integers owned by one shard and written only by
//! it, published to the shared registry on a tick. Nothing here is atomic,
//! so the request path never writes a cache line another core reads.

use crate::http::Status;

/// How a handshake ended, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    Full,
    Resumed,
    Failed,
}

impl Handshake {
    pub const ALL: [Handshake; 3] = [Handshake::Full, Handshake::Resumed, Handshake::Failed];

    pub fn label(self) -> &'static str {
        match self {
            Handshake::Full => "full",
            Handshake::Resumed => "resumed",
            Handshake::Failed => "failed",
        }
    }
}

/// Number of distinct [`Status`] values.
pub const STATUSES: usize = Status::ALL.len();

/// Why a connection ended; the `reason` label of
/// `shardhttpd_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed, or asked to close.
    Client,
    IdleTimeout,
    HeaderTimeout,
    WriteTimeout,
    /// A protocol or I/O error.
    Error,
    MaxRequests,
    Shutdown,
}

impl CloseReason {
    pub const ALL: [CloseReason; 7] = [
        CloseReason::Client,
        CloseReason::IdleTimeout,
        CloseReason::HeaderTimeout,
        CloseReason::WriteTimeout,
        CloseReason::Error,
        CloseReason::MaxRequests,
        CloseReason::Shutdown,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CloseReason::Client => "client",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::WriteTimeout => "write_timeout",
            CloseReason::Error => "error",
            CloseReason::MaxRequests => "max_requests",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// How a draining server closed a connection; the `kind` label of
/// `shardhttpd_drain_closes_total` (each is also a `shutdown` close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainClose {
    /// After a response that said `Connection: close` because the server
    /// was stopping (`drain_delay` or the drain).
    AfterResponse,
    /// Parted with after `drain_idle_grace` at rest between requests.
    IdleGrace,
    /// Still open when `shutdown_grace` ran out.
    Deadline,
}

impl DrainClose {
    pub const ALL: [DrainClose; 3] = [
        DrainClose::AfterResponse,
        DrainClose::IdleGrace,
        DrainClose::Deadline,
    ];

    pub fn label(self) -> &'static str {
        match self {
            DrainClose::AfterResponse => "after_response",
            DrainClose::IdleGrace => "idle_grace",
            DrainClose::Deadline => "deadline",
        }
    }
}

/// Latency histogram bucket upper bounds, in seconds. A snapshot hit is
/// handed to the kernel within microseconds; sendfile bodies and stalled
/// readers take milliseconds to seconds. So the buckets start at 10 µs and
/// grow roughly ×2.5 per step up to 10 s: fine resolution where static
/// serving lives, and still a bucket for the pathological tail.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05,
    0.25, 1.0, 10.0,
];

/// TLS handshake duration bucket bounds, in seconds: a full handshake
/// costs a signature (~0.1 ms ECDSA, ~1 ms RSA-2048) plus round trips, a
/// resumption a fraction of that; a stalled client ends at the header
/// timeout, so the buckets reach 10 s.
pub const HANDSHAKE_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0,
];

/// Everything one shard counts. Monotonic totals; the publisher keeps what
/// it already exported and adds the difference.
#[derive(Debug, Clone)]
pub struct ShardCounters {
    /// Metrics switched off: count nothing, so the cost can be measured.
    pub enabled: bool,
    /// Responses by status and their body bytes, over every site: summed
    /// from `sites` when published ([`fold_sites`](Self::fold_sites)).
    pub requests: [u64; STATUSES],
    pub response_bytes: u64,
    pub accepted: u64,
    pub closed: [u64; 7],
    pub active: u64,
    /// Counts per bucket of [`DURATION_BUCKETS`], plus one for +Inf.
    pub duration_buckets: [u64; DURATION_BUCKETS.len() + 1],
    pub duration_sum: f64,
    /// TLS handshakes by [`Handshake`] (full, resumed, failed).
    pub handshakes: [u64; 3],
    /// Counts per bucket of [`HANDSHAKE_BUCKETS`], plus one for +Inf.
    pub handshake_buckets: [u64; HANDSHAKE_BUCKETS.len() + 1],
    pub handshake_sum: f64,
    /// Times the shard stopped accepting at `max_connections_per_core`.
    pub conn_limit_hits: u64,
    /// PROXY protocol headers: [accepted, refused] (`proto::proxy`).
    pub proxy_protocol: [u64; 2],
    /// Connections closed by the shutdown, by [`DrainClose`].
    pub drain_closes: [u64; 3],
    /// Large-file bodies sent in full from a file that was renamed over or
    /// unlinked while they were sent (its link count was 0 at the end).
    pub downloads_from_replaced: u64,
    /// Large-file responses cut short because the file's bytes changed in
    /// place while they were sent.
    pub downloads_cut_changed: u64,
    /// Times a connection's unsent output reached its bound
    /// (`io::output::HIGH_WATER`) with the socket full, and it stopped
    /// answering until the client read.
    pub output_bound_hits: u64,
    /// HTTP/2 streams, resets, GOAWAYs, defences (`h2`).
    pub h2: crate::proto::h2::H2Counters,
    /// io_uring receives that found the shard's provided buffer ring empty
    /// (`ENOBUFS`; armed again).
    pub uring_recv_nobufs: u64,
    /// Responses and body bytes by site (`serve::sites` order).
    pub sites: Vec<SiteCounts>,
    /// QUIC and HTTP/3 (`quic`).
    pub quic: QuicCounters,
}

/// A shard's QUIC and HTTP/3 counters.
#[derive(Debug, Clone, Default)]
pub struct QuicCounters {
    /// Handshakes completed.
    pub connections: u64,
    /// Handshakes that ended before completing (timeout, refusal, error).
    pub handshakes_failed: u64,
    /// Requests answered over HTTP/3 (part of `requests`).
    pub requests: u64,
    /// UDP datagrams read and written (a GSO batch counts each segment).
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    /// Sends that carried them out: one datagram each, or a GSO batch.
    pub sends: u64,
    /// Datagrams the socket would not take (its buffer full): dropped,
    /// for QUIC's loss recovery to resend.
    pub send_dropped: u64,
    /// Times a connection's transmit found the socket buffer full and was
    /// held until the socket was writable.
    pub send_blocked: u64,
    /// Packets of closed connections declared lost, summed at close.
    pub lost_packets: u64,
    /// Stateless Retry packets sent.
    pub retries: u64,
    /// Packets answered with Version Negotiation.
    pub version_negotiation: u64,
    /// Connections whose client address changed (NAT rebinding, migration).
    pub migrations: u64,
    /// Short-header packets read by this shard whose connection ID names
    /// another shard (steering missed), or a successor process (read in
    /// the moment before an upgrade's old process stopped reading).
    pub foreign: u64,
    /// Packets of an older generation's connections passed to the old
    /// process during an upgrade, and those its full inbox refused.
    pub forwarded: u64,
    pub forward_dropped: u64,
    /// HTTP/3 GOAWAY frames sent (drain).
    pub goaways: u64,
    /// Connections closed by an HTTP/3 error of the client's making, by
    /// [`H3Error`](crate::proto::h3::Code) (frame, settings, QPACK…).
    pub h3_errors: u64,
    /// Connections closed at idle timeout.
    pub idle_timeouts: u64,
    /// HTTP/3 flood budgets spent, by [`Flood`](crate::proto::h3::Flood).
    pub defences: [u64; crate::proto::h3::Flood::ALL.len()],
}

/// One site's responses by status and body bytes, on one shard (exported
/// by status class).
#[derive(Debug, Clone, Copy)]
pub struct SiteCounts {
    pub requests: [u64; STATUSES],
    pub bytes: u64,
}

impl Default for SiteCounts {
    fn default() -> Self {
        SiteCounts {
            requests: [0; STATUSES],
            bytes: 0,
        }
    }
}

impl SiteCounts {
    /// Responses whose status is of `class` (2 for 2xx, …).
    pub fn class(&self, class: u16) -> u64 {
        Status::ALL
            .iter()
            .zip(&self.requests)
            .filter(|(s, _)| s.code() / 100 == class)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The `class` label of each exported class.
pub const CLASSES: [(u16, &str); 4] = [(2, "2xx"), (3, "3xx"), (4, "4xx"), (5, "5xx")];

impl ShardCounters {
    /// Counters for a server with `sites` sites.
    pub fn new(enabled: bool, sites: usize) -> Self {
        ShardCounters {
            enabled,
            requests: [0; STATUSES],
            response_bytes: 0,
            accepted: 0,
            closed: [0; 7],
            active: 0,
            duration_buckets: [0; DURATION_BUCKETS.len() + 1],
            duration_sum: 0.0,
            handshakes: [0; 3],
            handshake_buckets: [0; HANDSHAKE_BUCKETS.len() + 1],
            handshake_sum: 0.0,
            conn_limit_hits: 0,
            proxy_protocol: [0; 2],
            drain_closes: [0; 3],
            downloads_from_replaced: 0,
            downloads_cut_changed: 0,
            output_bound_hits: 0,
            h2: crate::proto::h2::H2Counters::default(),
            uring_recv_nobufs: 0,
            sites: vec![SiteCounts::default(); sites.max(1)],
            quic: QuicCounters::default(),
        }
    }

    #[inline]
    pub fn request(&mut self, site: u32, status: Status, bytes: u64) {
        if !self.enabled {
            return;
        }
        if let Some(s) = self.sites.get_mut(site as usize) {
            s.requests[status as usize] += 1;
            s.bytes += bytes;
        }
    }

    /// Sum the sites' counts into [`requests`](Self::requests) and
    /// [`response_bytes`](Self::response_bytes): done on the published
    /// copy, so a request counts once, by site.
    pub fn fold_sites(&mut self) {
        self.requests = [0; STATUSES];
        self.response_bytes = 0;
        for s in &self.sites {
            for (total, n) in self.requests.iter_mut().zip(&s.requests) {
                *total += n;
            }
            self.response_bytes += s.bytes;
        }
    }

    /// `n` requests that took `secs` each from parse to hand-off. The
    /// caller checks [`enabled`](Self::enabled) first, so that a server
    /// without metrics does not even read the clock.
    #[inline]
    pub fn durations(&mut self, n: u64, secs: f64) {
        let i = DURATION_BUCKETS.partition_point(|&b| b < secs);
        self.duration_buckets[i] += n;
        self.duration_sum += secs * n as f64;
    }

    /// A TLS handshake ended as `kind` after `secs` (failures too, so the
    /// histogram shows how long bad clients held a slot).
    pub fn handshake(&mut self, kind: Handshake, secs: f64) {
        self.handshakes[kind as usize] += 1;
        let i = HANDSHAKE_BUCKETS.partition_point(|&b| b < secs);
        self.handshake_buckets[i] += 1;
        self.handshake_sum += secs;
    }

    pub fn accepted(&mut self) {
        self.accepted += 1;
        self.active += 1;
    }

    pub fn drain_closed(&mut self, kind: DrainClose) {
        self.drain_closes[kind as usize] += 1;
    }

    pub fn closed(&mut self, reason: CloseReason) {
        self.closed[reason as usize] += 1;
        self.active -= 1;
    }
}
