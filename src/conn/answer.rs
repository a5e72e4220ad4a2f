//! Answering: every complete request in the read buffer is parsed, checked
//! against the framing rules and limits, answered into the output queue and
//! counted, in order, until the output is backlogged or the connection
//! stops reading.

use std::time::Instant;

use super::env::{https_redirect, serve_env, ConnConfig, Meta, ShardEnv, Stop};
use super::request_id::{self, IdLine};
use super::{Conn, Reading};
use crate::http::request::{self, Version};
use crate::http::Status;
use crate::http::{chunked, path};
use crate::metrics::CloseReason;
use crate::proto::http1::{self, Persist};
use crate::proto::proxy;
use crate::serve;
use crate::serve::sites::DEFAULT;

impl Conn {
    /// Answer every complete request in the buffer, in order, until the
    /// output is backlogged or the connection stops reading. Returns true
    /// when it stopped on the backlog with bytes still buffered: the caller
    /// must come back once the output drains.
    pub(super) fn answer(&mut self, env: &mut ShardEnv<'_>) -> bool {
        if self.is_h2() || self.starts_h2(env) {
            return self.answer_h2(env);
        }
        loop {
            match self.reading {
                Reading::Idle | Reading::Head => {
                    let io = self.io();
                    if io.rstart == io.rend {
                        return false;
                    }
                    if io.out.is_backlogged() {
                        return true;
                    }
                    match self.answer_one(env) {
                        Answered::Next => {}
                        Answered::Stop => return false,
                        Answered::Wait => return true,
                    }
                }
                Reading::Discard | Reading::DiscardChunked => {
                    if !self.skip_body() {
                        return false;
                    }
                }
                Reading::Done(_) | Reading::Lingering(_) | Reading::Proxy => return false,
            }
        }
    }

    /// Skip what is buffered of a request body. Returns true when the body
    /// ended (reading is `Idle` again), false when more is needed or the
    /// connection stops reading. Out of line: a request with a body is
    /// rare, and with both discard states inline every keep-alive hit cost
    /// 18 instructions more (callgrind: 2 256 against 2 238 per request).
    #[cold]
    #[inline(never)]
    fn skip_body(&mut self) -> bool {
        let chunked = self.reading == Reading::DiscardChunked;
        let io = self.io();
        if !chunked {
            let take = io.discard.min((io.rend - io.rstart) as u64);
            io.rstart += take as usize;
            io.discard -= take;
            if io.discard > 0 {
                return false;
            }
            self.reading = Reading::Idle;
            return true;
        }
        let (used, progress) = io.chunked.feed(&io.rbuf[io.rstart..io.rend]);
        match progress {
            chunked::Progress::More => {
                io.rstart = io.rend;
                false
            }
            chunked::Progress::Done => {
                io.rstart += used;
                self.reading = Reading::Idle;
                true
            }
            // The response is already queued: it goes out, and the
            // connection closes after it (lingering, so the unread rest of
            // the body does not reset it).
            chunked::Progress::Invalid | chunked::Progress::TooLarge => {
                self.reading = Reading::Done(CloseReason::Error);
                false
            }
        }
    }

    /// Parse and answer one request: `Stop` when no complete head is
    /// buffered or the connection stops reading, `Wait` (the request left
    /// buffered) when its site's response must wait for the bodies of
    /// another snapshot to be sent.
    fn answer_one(&mut self, env: &mut ShardEnv<'_>) -> Answered {
        self.prepare_out(env.pool);
        let io = self
            .io
            .as_deref_mut()
            .expect("connection I/O state taken before use");
        let data = &io.rbuf[io.rstart..io.rend];
        let parsed = request::parse(data, &env.cfg.limits);
        // Borrowed, not moved: a `Request` is a few hundred bytes.
        let req = match &parsed {
            Ok(None) => {
                if self.reading == Reading::Idle {
                    self.reading = Reading::Head;
                    self.deadline = env.now + env.cfg.header_timeout;
                    io.head_at = env.now;
                }
                return Answered::Stop;
            }
            Ok(Some(req)) => req,
            &Err(e) => {
                let started = started(self.reading, io.head_at, env.now);
                let tls = self.tls.as_deref();
                env.early_error(
                    &mut io.out,
                    &self.peer,
                    tls,
                    e.status(),
                    e.message(),
                    started,
                );
                io.queued(env.now);
                self.reading = Reading::Done(CloseReason::Error);
                return Answered::Stop;
            }
        };
        let sites = env.sites;
        let chosen = if sites.single() {
            Ok(DEFAULT)
        } else {
            let sni = self.tls.as_deref_mut().and_then(|t| t.sni_site(sites));
            // RFC 9112 §3.2.2: an absolute-form target's host wins over
            // the `Host` field.
            let host = path::authority(req.target).or(req.host);
            let tls = self.tls.as_deref();
            match (sni, host) {
                // The name the SNI gave: its site, looked up once.
                (Some(site), Some(h)) if tls.is_some_and(|t| t.is_sni(h)) => Ok(site),
                _ => sites.choose(host, sni).map_err(|status| (status, sni)),
            }
        };
        // A refused request is counted for the site its SNI chose, if any.
        let (site, refused) = match chosen {
            Ok(site) => (site, None),
            Err((status, sni)) => (sni.unwrap_or(DEFAULT), Some(status)),
        };
        let snapshot = env.snapshots.load(site);
        if io.out.wait_for(snapshot) {
            return Answered::Wait;
        }
        self.served += 1;
        let head_len = req.head_len;
        let body = req.content_length;
        let is_chunked = req.chunked;
        let (persist, close_reason) = persistence(
            self.served,
            req.version,
            req.conn_close,
            req.conn_keep_alive,
            (env.cfg, env.stop),
        );
        let started = started(self.reading, io.head_at, env.now);
        let id = match env.cfg.request_id {
            Some(_) => request_id(env.cfg, &mut env.scratch.ids, &self.peer, &data[..head_len]),
            None => None,
        };
        let tls = self.tls.is_some();
        let cfg = env.cfg;
        // A body too large to read past is refused, and the connection
        // closed: where the next request would start is unknown.
        let too_large = body > cfg.max_discard;
        let (persist, close_reason) = if too_large {
            (Persist::Close, CloseReason::Error)
        } else {
            (persist, close_reason)
        };
        let site_cfg = sites.get(site);
        let senv = serve_env(cfg, (site_cfg, snapshot), env.date, tls);
        let scratch = &mut env.scratch.serve;
        let mut resp = serve::Response::new(Status::Ok, env.date);
        if too_large {
            resp = serve::refuse(senv, Status::PayloadTooLarge, "request body too large");
        } else if let Some(status) = refused {
            resp = serve::unclaimed(req, senv, scratch, status);
        } else if let Some(port) = https_redirect(cfg, site_cfg, tls) {
            resp = serve::redirect_https(req, senv, scratch, port);
        } else {
            serve::respond_into(req, senv, scratch, &mut resp);
        }
        if let (Some(header), Some(id)) = (&cfg.request_id, &id) {
            resp.request_id = Some(id.field(header));
        }
        let status = resp.status;
        let bytes = http1::write(&resp, persist, &mut io.out);
        let meta = Meta {
            started,
            request_id: id.as_ref().map_or(b"", IdLine::id),
            site,
        };
        if env.cfg.real_ip_header.is_some() {
            let head = &data[..head_len];
            record_forwarded(
                env,
                &self.peer,
                self.tls.as_deref(),
                req,
                head,
                (status, bytes),
                meta,
            );
        } else {
            let tls = self.tls.as_deref();
            env.record(&self.peer, tls, Some(req), status, bytes, meta);
        }
        io.queued(env.now);
        io.rstart += head_len;
        if persist == Persist::Close {
            self.reading = Reading::Done(close_reason);
            return Answered::Stop;
        }
        self.reading = if is_chunked {
            // Its length shows only as it arrives: the response goes out
            // first, and a body past `max_discard` closes the connection.
            io.chunked = chunked::Decoder::new(env.cfg.max_discard);
            Reading::DiscardChunked
        } else if body > 0 {
            io.discard = body;
            Reading::Discard
        } else {
            Reading::Idle
        };
        Answered::Next
    }
}

/// What [`Conn::answer_one`] did.
enum Answered {
    /// Answered; the next request may follow.
    Next,
    /// Nothing more now: no complete head, or the connection stops reading.
    Stop,
    /// The request stays buffered until the output lets go of another
    /// snapshot's bodies.
    Wait,
}

/// Whether the connection persists after the request just parsed
/// (RFC 9112 §9.3), and why not.
fn persistence(
    served: u32,
    version: Version,
    close: bool,
    keep_alive: bool,
    (cfg, stop): (&ConnConfig, Stop),
) -> (Persist, CloseReason) {
    let client_closes = match version {
        Version::Http11 | Version::Http2 | Version::Http3 => close,
        Version::Http10 => close || !keep_alive,
    };
    if client_closes {
        (Persist::Close, CloseReason::Client)
    } else if served >= cfg.max_requests {
        (Persist::Close, CloseReason::MaxRequests)
    } else if stop.closes() {
        (Persist::Close, CloseReason::Shutdown)
    } else if version == Version::Http10 {
        (Persist::KeepAlive10, CloseReason::Client)
    } else {
        (Persist::KeepAlive11, CloseReason::Client)
    }
}

/// [`ShardEnv::record`] with `real_ip_header` set: the logged address is the
/// one the header names when the peer is a trusted proxy. Out of line, so
/// the common path pays one test for it.
#[cold]
#[inline(never)]
fn record_forwarded(
    env: &mut ShardEnv<'_>,
    peer: &super::Peer,
    tls: Option<&super::tls::TlsConn>,
    req: &request::Request<'_>,
    head: &[u8],
    (status, bytes): (crate::http::Status, u64),
    meta: Meta<'_>,
) {
    let forwarded = match (&env.cfg.real_ip_header, env.log.is_some()) {
        (Some(name), true) => peer.real(head, name, &env.cfg.trusted_proxies),
        _ => *peer,
    };
    env.record(&forwarded, tls, Some(req), status, bytes, meta);
}

/// The id of a request with raw `head` (`request_id_header` is set): the
/// header's last value from a trusted peer, else a new one. Out of line:
/// with the setting off, a request pays one test for it.
#[cold]
#[inline(never)]
fn request_id(
    cfg: &ConnConfig,
    ids: &mut request_id::RequestIds,
    peer: &super::Peer,
    head: &[u8],
) -> Option<IdLine> {
    let header = cfg.request_id.as_ref()?;
    let ip = peer.get().map(|a| a.ip());
    let trusted = &cfg.trusted_proxies;
    let incoming = match ip {
        Some(ip) if proxy::trusted(trusted, ip) => proxy::header_values(head, &header.name).last(),
        _ => None,
    };
    Some(request_id::choose(header, trusted, ip, incoming, ids))
}

/// When the request now parsed started: when its first byte was read
/// (`head_at`, set as a partial head began waiting) or else `now`, the
/// event that read it whole.
#[inline]
fn started(reading: Reading, head_at: Instant, now: Instant) -> Instant {
    if reading == Reading::Head {
        head_at
    } else {
        now
    }
}
