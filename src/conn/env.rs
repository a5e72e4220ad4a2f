//! What a connection is handed by its shard: the settings derived once
//! from the configuration ([`ConnConfig`]), the pool of idle buffers
//! ([`BufPool`]), the shard's state for one event ([`ShardEnv`]) and where
//! the server is in stopping ([`Stop`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::peer::Peer;
use super::tls::{self, TlsConn};
use super::{ConnIo, POOLED_WRITE_MAX, POOL_MAX};
use crate::cache::Snapshot;
use crate::config::Config;
use crate::http::date::DateCache;
use crate::http::request::{self, Limits};
use crate::http::Status;
use crate::io::output::Output;
use crate::metrics::access_log::ShardLog;
use crate::metrics::ShardCounters;
use crate::proto::http1::{self, Persist};
use crate::proto::proxy;
use crate::serve;
use crate::serve::sites::{Local, Site, Sites};

/// Connection settings, derived once from [`Config`].
#[derive(Debug, Clone)]
pub struct ConnConfig {
    pub limits: Limits,
    pub read_buf: usize,
    pub max_discard: u64,
    pub max_requests: u32,
    pub max_ranges: usize,
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub write_timeout: Duration,
    /// `drain_idle_grace`: how long a draining shard waits for the next
    /// request of a connection between requests before parting with it.
    pub drain_idle_grace: Duration,
    pub server_line: Vec<u8>,
    /// Large files by `sendfile` (zero-copy) instead of a verified copy.
    pub zero_copy: bool,
    /// `max_connections_per_core`: the shard pauses accepting at this many.
    pub max_conns: usize,
    /// The port of the first TLS listener: a site's `redirect_https`
    /// sends cleartext requests there.
    pub https_port: Option<u16>,
    /// Cleartext connections opening with the HTTP/2 preface speak h2c.
    pub h2c: bool,
    /// Cleartext connections speak only h2c (no HTTP/1).
    pub h2c_only: bool,
    pub h2: crate::proto::h2::H2Config,
    /// `proxy_protocol`: a PROXY header opens every connection.
    pub proxy_protocol: bool,
    /// `trusted_proxies`.
    pub trusted_proxies: Arc<[proxy::Cidr]>,
    /// `real_ip_header`.
    pub real_ip_header: Option<Arc<str>>,
    /// `request_id_header`.
    pub request_id: Option<super::request_id::IdHeader>,
}

impl ConnConfig {
    pub fn new(cfg: &Config) -> ConnConfig {
        ConnConfig {
            limits: Limits {
                max_head: cfg.max_head_bytes,
                max_uri: cfg.max_uri_bytes,
            },
            // Room for a maximal head plus pipelined requests behind it,
            // and for a whole HTTP/2 frame of the largest size we allow.
            read_buf: (cfg.max_head_bytes + 1)
                .max(16 * 1024)
                .max(crate::proto::h2::MAX_FRAME_IN + crate::proto::h2::frame::HEAD_LEN),
            max_discard: cfg.max_discard_bytes,
            max_requests: cfg.max_requests_per_connection,
            max_ranges: cfg.max_ranges,
            header_timeout: cfg.header_timeout,
            keepalive_timeout: cfg.keepalive_timeout,
            write_timeout: cfg.write_timeout,
            drain_idle_grace: cfg.drain_idle_grace,
            server_line: cfg.server_line.clone(),
            zero_copy: cfg.sendfile,
            max_conns: cfg.max_connections_per_core,
            https_port: cfg
                .tls
                .as_ref()
                .and_then(|t| t.listen.first())
                .map(|a| a.port()),
            h2c: cfg.h2c,
            h2c_only: cfg.h2c_only,
            h2: crate::proto::h2::H2Config {
                max_concurrent: cfg.h2_max_concurrent_streams,
                max_header_list: cfg.max_head_bytes,
                max_uri: cfg.max_uri_bytes,
                max_body: cfg.max_discard_bytes,
            },
            proxy_protocol: cfg.proxy_protocol,
            trusted_proxies: cfg.trusted_proxies.clone().into(),
            real_ip_header: cfg.real_ip_header.as_deref().map(Arc::from),
            request_id: cfg
                .request_id_header
                .as_deref()
                .map(super::request_id::IdHeader::new),
        }
    }
}

/// Buffers of idle connections, reused so that a keep-alive connection
/// between requests holds no buffer memory and the hot path does not allocate.
#[derive(Default)]
pub struct BufPool {
    /// The boxed I/O state of parked connections, with their buffers;
    /// boxed because the box itself moves into and out of `Conn::io`.
    #[allow(clippy::vec_box)]
    pub(super) io: Vec<Box<ConnIo>>,
    /// Full-size read buffers given up by connections holding a partial head.
    pub(super) read: Vec<Vec<u8>>,
    /// Output buffers given up by connections holding a partial head.
    pub(super) write: Vec<Vec<u8>>,
    /// Ciphertext buffers of TLS sessions that hold no ciphertext.
    pub(super) cipher: tls::CipherPool,
}

impl BufPool {
    /// A spare output buffer back to the pool (freed if it grew large or
    /// the pool is full).
    pub fn give_write(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if buf.capacity() > 0 && buf.capacity() <= POOLED_WRITE_MAX && self.write.len() < POOL_MAX {
            self.write.push(buf);
        }
    }

    #[inline]
    pub(super) fn take_io(&mut self, zero_copy: bool) -> Box<ConnIo> {
        let mut io = match self.io.pop() {
            Some(io) => io,
            None => ConnIo::boxed(),
        };
        io.out.set_zero_copy(zero_copy);
        io
    }
}

/// What the semantics layer needs to answer for `site` on a connection
/// (`tls`: it has a TLS session).
#[inline]
pub(super) fn serve_env<'s>(
    cfg: &'s ConnConfig,
    (site, snapshot): (&'s Site, &'s Arc<Snapshot>),
    date: &'s DateCache,
    tls: bool,
) -> serve::Env<'s> {
    serve::Env {
        snapshot,
        date,
        server_line: &cfg.server_line,
        max_ranges: cfg.max_ranges,
        conn_lines: if tls { &site.tls_lines } else { b"" },
        tls,
    }
}

/// The HTTPS port a cleartext request for `site` is redirected to, if its
/// `redirect_https` asks for it.
#[inline]
pub(super) fn https_redirect(cfg: &ConnConfig, site: &Site, tls: bool) -> Option<u16> {
    cfg.https_port.filter(|_| site.redirect_https && !tls)
}

/// A shard's buffers and per-shard state for its connections, reused so
/// the hot path does not allocate.
#[derive(Default)]
pub struct Scratch {
    /// The semantics layer's (`serve`).
    pub serve: crate::serve::Scratch,
    /// This shard's request ids (`request_id_header`).
    pub ids: super::request_id::RequestIds,
    /// This shard's rate-limited PROXY protocol refusal lines.
    pub(super) proxy_refusals: super::peer::RefusalLog,
}

impl Scratch {
    pub fn for_shard(index: usize) -> Scratch {
        Scratch {
            ids: super::request_id::RequestIds::new(index),
            proxy_refusals: super::peer::RefusalLog::new(index),
            ..Scratch::default()
        }
    }
}

/// The shard's state a connection needs while handling an event.
pub struct ShardEnv<'a> {
    pub cfg: &'a ConnConfig,
    /// Every site's settings and names.
    pub sites: &'a Sites,
    /// Every site's snapshot, through this shard's caches.
    pub snapshots: &'a mut Local,
    pub date: &'a DateCache,
    pub scratch: &'a mut Scratch,
    pub pool: &'a mut BufPool,
    pub counters: &'a mut ShardCounters,
    pub log: Option<&'a mut ShardLog>,
    pub now: Instant,
    /// Where the server is in stopping.
    pub stop: Stop,
}

/// Where the server is in stopping, as a connection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Serving as usual.
    Serving,
    /// SIGTERM's `drain_delay`: still accepting, but every response says
    /// `Connection: close`, so clients move to other instances while this
    /// one still answers.
    Closing,
    /// Draining (the listeners are closed): each connection is answered
    /// once more with `Connection: close`, or parted with after
    /// `drain_idle_grace` between requests.
    Draining,
}

impl Stop {
    /// Every response closes its connection.
    #[inline]
    pub fn closes(self) -> bool {
        self != Stop::Serving
    }
}

/// What the access log says of an answer besides the request: when its
/// request started and its id (`request_id_header`), empty when off.
#[derive(Clone, Copy)]
pub(super) struct Meta<'a> {
    pub started: Instant,
    pub request_id: &'a [u8],
    /// The site that answered (`serve::sites`).
    pub site: u32,
}

impl ShardEnv<'_> {
    /// Count an answer and write its access-log line. Inline, the line
    /// out of line: the count is a few instructions of every request.
    #[inline(always)]
    pub(super) fn record(
        &mut self,
        peer: &Peer,
        tls: Option<&TlsConn>,
        req: Option<&request::Request<'_>>,
        status: Status,
        bytes: u64,
        meta: Meta<'_>,
    ) {
        self.counters.request(meta.site, status, bytes);
        if self.log.is_some() {
            self.log_line(peer, tls, req, (status, bytes), meta);
        }
    }

    #[inline(never)]
    fn log_line(
        &mut self,
        peer: &Peer,
        tls: Option<&TlsConn>,
        req: Option<&request::Request<'_>>,
        (status, bytes): (Status, u64),
        meta: Meta<'_>,
    ) {
        if let Some(log) = self.log.as_deref_mut() {
            let line = crate::metrics::access_log::Line {
                peer: peer.get(),
                tls: tls.and_then(TlsConn::session_info),
                req,
                status,
                bytes,
                started: meta.started,
                request_id: meta.request_id,
                site: self.sites.label(meta.site),
            };
            log.line(self.date.secs(), &line);
        }
    }

    /// An error answered before (or without) a parsed request (400, 408),
    /// closing the connection: written, counted and logged.
    #[cold]
    pub(super) fn early_error(
        &mut self,
        out: &mut Output,
        peer: &Peer,
        tls: Option<&TlsConn>,
        status: Status,
        message: &'static str,
        started: Instant,
    ) {
        let id = self.made_id();
        let mut resp = serve::error_with(&self.cfg.server_line, self.date, status, message);
        if let (Some(header), Some(id)) = (&self.cfg.request_id, &id) {
            resp.request_id = Some(id.field(header));
        }
        let bytes = http1::write(&resp, Persist::Close, out);
        let meta = Meta {
            started,
            request_id: id.as_ref().map_or(b"", super::request_id::IdLine::id),
            site: crate::serve::sites::DEFAULT,
        };
        self.record(peer, tls, None, status, bytes, meta);
    }

    /// A new request id for an answer with no request to take one from
    /// (an unparsable head, a timeout): `None` with `request_id_header` off.
    #[cold]
    #[inline(never)]
    pub(super) fn made_id(&mut self) -> Option<super::request_id::IdLine> {
        let header = self.cfg.request_id.as_ref()?;
        Some(super::request_id::choose(
            header,
            &[],
            None,
            None,
            &mut self.scratch.ids,
        ))
    }
}
