//! HTTP/2 (RFC 9113) as a sans-I/O connection beside the HTTP/1 one: bytes
//! in ([`H2::recv`]), frames out into the connection's output queue, and
//! DATA scheduled under flow control ([`H2::send`]). The shard loop and
//! `conn::Conn` drive it exactly as they drive HTTP/1 (`conn/h2.rs` is the
//! seam); TLS stays a transport beneath.
//!
//! Requests take the same path as HTTP/1 ones: the decoded pseudo-headers
//! and fields become a [`Request`](crate::http::request::Request), answered
//! by the semantics layer with a typed [`Response`]; its fields become an
//! HPACK block (`encode`), its body DATA frames (`stream`).
//!
//! - `frame`: pure frame decode/encode.
//! - `hpack`: header block decode (loona-hpack).
//! - `encode`: response header blocks, with the connection's encoder
//!   dynamic table.
//! - `conn`: the frame handlers, stream states, limits and defences.
//! - `request`: header list → `Request`, RFC 9113 §8 validity.
//! - `stream`: per-stream state, response bodies and the DATA scheduler
//!   (RFC 9218 urgency, incremental round-robin).

pub mod encode;
pub mod frame;
pub mod hpack;
pub(in crate::proto) mod huffman;

mod conn;
pub(in crate::proto) mod request;
mod stream;

use std::collections::VecDeque;
use std::time::Instant;

use crate::http::request::Request;
use crate::http::Status;
use crate::io::output::Output;
use crate::serve::Response;

pub use frame::{ErrorCode, PREFACE};
pub use stream::{Sent, DEFAULT_URGENCY};

/// Default of `h2_max_concurrent_streams`.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;

/// Largest frame payload we accept (we never raise SETTINGS_MAX_FRAME_SIZE):
/// a frame always fits the connection's read buffer.
pub const MAX_FRAME_IN: usize = frame::DEFAULT_MAX_FRAME as usize;

/// Bytes of frames [`H2::send`] queues per call before returning to the
/// connection for a flush, so one fast stream cannot grow the output.
const ROUND_BYTES: usize = 128 * 1024;

/// Most CONTINUATION frames one header block may span (the 2024
/// CONTINUATION flood kept a server decoding an endless block).
const MAX_CONTINUATIONS: u32 = 32;

/// Rapid reset budget (CVE-2023-44487, CVE-2025-8671): streams cancelled
/// by the client before their response was complete, and streams the
/// server reset because of a client error, draw from one bucket of this
/// many tokens, refilled at [`RESET_RATE`] per second. An empty bucket is
/// answered with GOAWAY ENHANCE_YOUR_CALM.
pub(in crate::proto) const RESET_BURST: f64 = 200.0;
pub(in crate::proto) const RESET_RATE: f64 = 100.0;

/// Flood budget for frames that cost us work but carry no request:
/// SETTINGS, PING, PRIORITY, PRIORITY_UPDATE, empty DATA without
/// END_STREAM. Browsers send a handful per connection.
pub(in crate::proto) const CONTROL_BURST: f64 = 1000.0;
pub(in crate::proto) const CONTROL_RATE: f64 = 200.0;

/// Our receive window is topped up (WINDOW_UPDATE) once this much of it
/// has been consumed: batching, one update per half window.
const WINDOW_BATCH: i64 = frame::DEFAULT_WINDOW / 2;

/// The PING payload of a graceful shutdown (see [`H2::goaway`]).
const DRAIN_PING: &[u8; 8] = b"draining";

/// Scratch capacity an idle connection keeps (header block, decoded
/// fields); more is freed by [`H2::shrink`].
const SCRATCH_KEEP: usize = 1024;

/// Settings of HTTP/2 connections, derived once from `Config`.
#[derive(Debug, Clone, Copy)]
pub struct H2Config {
    pub max_concurrent: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE and the cap on a decoded list
    /// (`max_head_bytes`); also caps a compressed header block.
    pub max_header_list: usize,
    /// `max_uri_bytes`: a longer `:path` gets 414.
    pub max_uri: usize,
    /// `max_discard_bytes`: a larger declared request body gets 413.
    pub max_body: u64,
}

/// What answers the requests: `conn` implements it over the semantics
/// layer (and counts and logs each answer).
pub trait Handler {
    /// Answer `req` (built from `fields`).
    fn respond(&mut self, req: &Request<'_>, fields: &hpack::Fields) -> Response<'_>;
    /// An error answer for a request that could not be built (431, 414…).
    fn refuse(&mut self, status: Status, message: &'static str) -> Response<'_>;
}

/// HTTP/2 counters of a shard, published with the others.
#[derive(Debug, Clone, Default)]
pub struct H2Counters {
    pub connections: u64,
    /// Requests answered over HTTP/2 (the rest of `requests` is HTTP/1).
    pub requests: u64,
    pub streams: u64,
    /// RST_STREAM sent, by [`ErrorCode`] (index = code, up to 0xb).
    pub resets_sent: [u64; 12],
    /// GOAWAY sent, by [`ErrorCode`].
    pub goaways_sent: [u64; 12],
    /// Defences that fired, by [`Defence`].
    pub defences: [u64; Defence::ALL.len()],
    /// Times a stream with data to send found its window closed.
    pub flow_stalls: u64,
    /// Streams opened above a final GOAWAY's last stream id: never taken,
    /// so a client may retry them elsewhere (RFC 9113 §6.8).
    pub refused_after_goaway: u64,
    /// Streams taken but not answered to their last byte when their
    /// connection closed (a deadline, an error, the client leaving).
    pub cut: u64,
}

/// Limits that ended a connection (or refused a stream), for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defence {
    /// Too many client-cancelled or server-reset streams.
    RapidReset,
    /// A header block longer or in more CONTINUATION frames than allowed.
    Continuation,
    /// A decoded header list past `max_head_bytes` (431).
    HeaderList,
    /// SETTINGS, PING, PRIORITY or empty DATA frames past their budget.
    ControlFlood,
    /// Streams beyond `h2_max_concurrent_streams` (REFUSED_STREAM).
    Concurrency,
}

impl Defence {
    pub const ALL: [Defence; 5] = [
        Defence::RapidReset,
        Defence::Continuation,
        Defence::HeaderList,
        Defence::ControlFlood,
        Defence::Concurrency,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Defence::RapidReset => "rapid_reset",
            Defence::Continuation => "continuation_flood",
            Defence::HeaderList => "header_list_size",
            Defence::ControlFlood => "control_flood",
            Defence::Concurrency => "max_concurrent_streams",
        }
    }
}

/// A token bucket, for the flood budgets (HTTP/3's too).
#[derive(Debug, Clone, Copy)]
pub(in crate::proto) struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    pub(in crate::proto) fn new(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// Take one token; false when the bucket is empty.
    pub(in crate::proto) fn take(&mut self, burst: f64, rate: f64, now: Instant) -> bool {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + secs * rate).min(burst);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client preface.
    Preface,
    Open,
    /// A GOAWAY with an error went out: nothing more is read.
    Failed(ErrorCode),
}

/// A header block that continues in CONTINUATION frames.
#[derive(Debug)]
struct Pending {
    stream: u32,
    end_stream: bool,
    /// The HEADERS named its own stream as dependency (§5.3.1).
    self_dependent: bool,
    frames: u32,
    started: Instant,
}

/// One HTTP/2 connection's protocol state.
pub struct H2 {
    cfg: H2Config,
    phase: Phase,
    decoder: loona_hpack::Decoder<'static>,
    /// The response side's HPACK state (its dynamic table).
    encoder: encode::Encoder,
    /// Header block being assembled (HEADERS + CONTINUATION).
    block: Vec<u8>,
    pending: Option<Pending>,
    /// When the first bytes of a frame not yet whole arrived.
    partial_since: Option<Instant>,
    fields: hpack::Fields,
    streams: stream::Streams,
    /// Highest client stream id seen: every lower one is open or closed.
    last_stream: u32,
    /// Streams we reset recently: frames in flight for them are ignored
    /// (RFC 9113 §5.4.2) rather than treated as on a closed stream.
    reset_recently: VecDeque<u32>,
    /// Peer settings that shape what we send.
    peer_initial_window: i64,
    peer_max_frame: usize,
    /// Connection-level windows: what we may send, what the client may.
    send_window: i64,
    recv_window: i64,
    /// Bytes received but not yet given back by WINDOW_UPDATE.
    recv_unacked: i64,
    resets: Bucket,
    control: Bucket,
    /// GOAWAY sent (drain, or error): streams above `last_stream` ignored.
    goaway_sent: bool,
    /// The first GOAWAY of a graceful shutdown and its PING went out.
    drain_pinged: bool,
    /// The client sent GOAWAY: close once the streams are done.
    peer_goaway: bool,
    /// When streams first had data but no window, for the write timeout.
    stalled_since: Option<Instant>,
}

impl std::fmt::Debug for H2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2")
            .field("phase", &self.phase)
            .field("streams", &self.streams.len())
            .field("last_stream", &self.last_stream)
            .field("send_window", &self.send_window)
            .field("goaway_sent", &self.goaway_sent)
            .finish()
    }
}

/// What [`H2::recv`] leaves for the connection to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recv {
    /// Keep reading.
    More,
    /// The output is backlogged: flush, then call again with what is left.
    Backlogged,
    /// The connection failed (GOAWAY queued): flush and close.
    Failed,
}

impl H2 {
    pub fn new(cfg: H2Config, now: Instant) -> Box<H2> {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(hpack::DECODER_TABLE);
        Box::new(H2 {
            cfg,
            phase: Phase::Preface,
            decoder,
            encoder: encode::Encoder::default(),
            block: Vec::new(),
            pending: None,
            partial_since: None,
            fields: hpack::Fields::default(),
            streams: stream::Streams::default(),
            last_stream: 0,
            reset_recently: VecDeque::new(),
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME as usize,
            send_window: frame::DEFAULT_WINDOW,
            recv_window: frame::DEFAULT_WINDOW,
            recv_unacked: 0,
            resets: Bucket::new(RESET_BURST, now),
            control: Bucket::new(CONTROL_BURST, now),
            goaway_sent: false,
            drain_pinged: false,
            peer_goaway: false,
            stalled_since: None,
        })
    }

    /// Our SETTINGS, the first frame the server sends (RFC 9113 §3.4).
    pub fn start(&self, out: &mut Vec<u8>) {
        frame::write_settings(
            out,
            &[
                (
                    frame::SETTINGS_MAX_CONCURRENT_STREAMS,
                    self.cfg.max_concurrent,
                ),
                (frame::SETTINGS_ENABLE_PUSH, 0),
                (
                    frame::SETTINGS_MAX_HEADER_LIST_SIZE,
                    self.cfg.max_header_list as u32,
                ),
                (frame::SETTINGS_NO_RFC7540_PRIORITIES, 1),
            ],
        );
    }

    /// Streams open or half-closed.
    pub fn active(&self) -> usize {
        self.streams.len()
    }

    /// Nothing more will happen on this connection: it failed, or a GOAWAY
    /// went either way and every stream is done.
    pub fn finished(&self) -> bool {
        matches!(self.phase, Phase::Failed(_))
            || ((self.goaway_sent || self.peer_goaway) && self.streams.is_empty())
    }

    /// Since when a header block waits for its CONTINUATION, or a frame
    /// (of any type: a DATA frame too) for the rest of its bytes: each is
    /// due within `header_timeout` of its first byte, so a client cannot
    /// hold a connection by sending a frame a byte at a time.
    pub fn header_pending_since(&self) -> Option<Instant> {
        match (self.pending.as_ref().map(|p| p.started), self.partial_since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Since when responses have been waiting on a closed window.
    pub fn stalled_since(&self) -> Option<Instant> {
        self.stalled_since
    }

    /// Graceful shutdown (drain, upgrade), RFC 9113 §6.8: a GOAWAY with
    /// the largest stream id and a PING first, so requests the client sent
    /// before it read the GOAWAY are still served; the final GOAWAY, with
    /// the last stream id really taken, follows the PING's ACK (`conn`).
    /// False when shutdown had already begun (or the connection failed).
    pub fn goaway(&mut self, out: &mut Vec<u8>) -> bool {
        if self.goaway_sent || self.drain_pinged || matches!(self.phase, Phase::Failed(_)) {
            return false;
        }
        self.drain_pinged = true;
        frame::write_goaway(out, frame::MAX_WINDOW as u32, ErrorCode::NoError);
        frame::write_head(out, 8, frame::PING, 0, 0);
        out.extend_from_slice(DRAIN_PING);
        true
    }

    /// The final GOAWAY at once (idle timeout): the streams seen are
    /// finished, no new ones are taken.
    pub fn goaway_now(&mut self, out: &mut Vec<u8>) -> bool {
        if self.goaway_sent || matches!(self.phase, Phase::Failed(_)) {
            return false;
        }
        self.goaway_sent = true;
        frame::write_goaway(out, self.last_stream, ErrorCode::NoError);
        true
    }

    /// Idle: free the scratch buffers grown by the last requests, so an
    /// idle connection holds its decoder table and little else.
    pub fn shrink(&mut self) {
        // A header block waiting for its CONTINUATION is state, not scratch.
        if self.block.capacity() > SCRATCH_KEEP && self.pending.is_none() {
            self.block = Vec::new();
        }
        if self.fields.capacity() > SCRATCH_KEEP {
            self.fields = hpack::Fields::default();
        }
    }
}

#[cfg(test)]
mod tests;
