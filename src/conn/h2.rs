//! The seam between [`Conn`] and the HTTP/2 core (`crate::proto::h2`): choosing
//! the protocol (ALPN `h2` after a TLS handshake, the client preface on a
//! cleartext connection), answering through the semantics layer (`serve`)
//! with the same counting and logging as HTTP/1, timeouts, and GOAWAY on
//! drain.

use std::time::Instant;

use super::env::{https_redirect, serve_env, BufPool, ConnConfig, Scratch, ShardEnv};
use super::peer::Peer;
use super::request_id::{self, IdLine};
use super::tls::TlsConn;
use super::{Conn, ConnIo, Reading, Step, POOLED_WRITE_MAX, POOL_MAX};
use crate::http::date::DateCache;
use crate::http::request;
use crate::http::Status;
use crate::io::output::Flush;
use crate::metrics::access_log::ShardLog;
use crate::metrics::{CloseReason, ShardCounters};
use crate::proto::h2::hpack::Fields;
use crate::proto::h2::{frame, Handler, Recv, Sent, H2};
use crate::proto::proxy;
use crate::serve;
use crate::serve::sites::{Local, Sites, DEFAULT};

impl Conn {
    #[inline]
    pub(super) fn is_h2(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.h2.is_some())
    }

    /// Before the first request: does this connection speak HTTP/2? If so
    /// its state is set up and our SETTINGS queued.
    pub(super) fn starts_h2(&mut self, env: &mut ShardEnv<'_>) -> bool {
        if self.served > 0 || self.reading != Reading::Idle {
            return false;
        }
        let h2 = match &self.tls {
            Some(tls) => tls.alpn_h2(),
            None => {
                if !env.cfg.h2c {
                    return false;
                }
                let io = self.io();
                let buffered = &io.rbuf[io.rstart..io.rend];
                // A prefix of the preface waits for the rest (HTTP/1 would
                // answer `PRI * HTTP/2.0` with a 505).
                let n = buffered.len().min(frame::PREFACE.len());
                if n == 0 {
                    return false;
                }
                // On an h2c-only listener what is not the preface gets
                // HTTP/2's answer (GOAWAY PROTOCOL_ERROR), not HTTP/1's.
                env.cfg.h2c_only
                    || buffered[..n] == frame::PREFACE[..n] && n == frame::PREFACE.len()
            }
        };
        if !h2 {
            return false;
        }
        self.prepare_out(env.pool);
        let io = self.io();
        let state = H2::new(env.cfg.h2, env.now);
        state.start(io.out.buf());
        io.h2 = Some(state);
        env.counters.h2.connections += 1;
        self.deadline = env.now + env.cfg.keepalive_timeout;
        true
    }

    /// Frames in, answers and DATA out. Returns true when it stopped with
    /// work left that a flush will make room for (see `Conn::answer`).
    pub(super) fn answer_h2(&mut self, env: &mut ShardEnv<'_>) -> bool {
        if matches!(self.reading, Reading::Done(_) | Reading::Lingering(_)) {
            return false;
        }
        self.prepare_out(env.pool);
        let Some(io) = self.io.as_deref_mut() else {
            return false;
        };
        let Some(h2) = io.h2.as_deref_mut() else {
            return false;
        };
        let sni = match self.tls.as_deref_mut() {
            Some(tls) if !env.sites.single() => tls.sni_site(env.sites),
            _ => None,
        };
        let now = env.now;
        let tls = self.tls.as_deref();
        let mut answer = Answer::new(env, self.peer, (tls, tls.is_some()), sni);
        let input = &io.rbuf[io.rstart..io.rend];
        let mut h2c = std::mem::take(&mut answer.rec.counters.h2);
        let (used, recv) = h2.recv(input, &mut io.out, &mut answer, &mut h2c, now);
        let answered = answer.rec.answered;
        // Counted here: `answer` saw the shard's H2 counters taken out.
        h2c.requests += answered as u64;
        io.rstart += used;
        if io.rstart == io.rend {
            io.rstart = 0;
            io.rend = 0;
        }
        if answered > 0 {
            if io.unflushed == 0 {
                io.answered_at = env.now;
            }
            io.unflushed += answered as u64;
        }
        self.served = self.served.saturating_add(answered as u32).max(1);
        if env.stop.closes() {
            // The first of the pair; the final one is counted.
            h2.goaway(io.out.buf());
        }
        let sent = h2.send(&mut io.out, &mut h2c, env.now);
        env.counters.h2 = h2c;
        // Idle time counts from the last whole frame or the last output:
        // bytes that complete nothing (a TLS record a byte at a time) do
        // not move it.
        if let Some(t) = h2.stalled_since() {
            self.deadline = t + env.cfg.write_timeout;
        } else if let Some(t) = h2.header_pending_since() {
            self.deadline = t + env.cfg.header_timeout;
        } else if used > 0 || !io.out.is_empty() {
            self.deadline = env.now + env.cfg.keepalive_timeout;
        }
        if recv == Recv::Failed {
            self.reading = Reading::Done(CloseReason::Error);
            return false;
        }
        if h2.finished() {
            let reason = if env.stop.closes() {
                CloseReason::Shutdown
            } else {
                CloseReason::Client
            };
            self.reading = Reading::Done(reason);
            return false;
        }
        recv == Recv::Backlogged || sent == Sent::More
    }

    /// HTTP/2 streams this connection took and has not answered to their
    /// last byte: those still open, and, while frames wait to be written,
    /// the answers not yet flushed. Counted when the connection closes.
    pub fn h2_unfinished(&self) -> u64 {
        let Some(io) = self.io.as_deref() else {
            return 0;
        };
        let Some(h2) = io.h2.as_deref() else {
            return 0;
        };
        let unflushed = if io.out.is_empty() { 0 } else { io.unflushed };
        h2.active() as u64 + unflushed
    }

    /// The deadline passed on an HTTP/2 connection.
    pub(super) fn h2_timeout(&mut self, env: &mut ShardEnv<'_>) -> Step {
        let stalled = self
            .io
            .as_ref()
            .and_then(|io| io.h2.as_ref())
            .is_some_and(|h2| h2.stalled_since().is_some());
        if !self.out_empty() || stalled {
            return Step::Close(CloseReason::WriteTimeout);
        }
        if let Reading::Done(reason) | Reading::Lingering(reason) = self.reading {
            return Step::Close(reason);
        }
        let header = self
            .io
            .as_ref()
            .and_then(|io| io.h2.as_ref())
            .is_some_and(|h2| h2.header_pending_since().is_some());
        // Idle (or silent mid-block): say goodbye, best effort.
        self.unpark(env);
        self.prepare_out(env.pool);
        let io = self.io();
        if let Some(h2) = io.h2.as_deref_mut() {
            if h2.goaway_now(io.out.buf()) {
                env.counters.h2.goaways_sent[crate::proto::h2::ErrorCode::NoError as usize] += 1;
            }
        }
        self.flush_now();
        Step::Close(if header {
            CloseReason::HeaderTimeout
        } else {
            CloseReason::IdleTimeout
        })
    }

    /// Drain: the graceful GOAWAY pair (`H2::goaway`); streams in flight
    /// finish, then the connection closes (`answer_h2` sees it finished).
    pub(super) fn h2_drain(&mut self) -> Step {
        if matches!(self.reading, Reading::Done(_) | Reading::Lingering(_)) {
            // Already closing: the client reads what is queued (lingering
            // keeps its WINDOW_UPDATEs from resetting the connection).
            return Step::Keep;
        }
        let Some(io) = self.io.as_deref_mut() else {
            return Step::Close(CloseReason::Shutdown);
        };
        let Some(h2) = io.h2.as_deref_mut() else {
            return Step::Close(CloseReason::Shutdown);
        };
        // Not counted (no counters here): the final GOAWAY is. The client's
        // PING ACK drives the connection on: final GOAWAY, streams finish,
        // close (`answer_h2`); one that never answers is closed when the
        // shutdown grace runs out.
        h2.goaway(io.out.buf());
        match self.flush_out() {
            Ok(Flush::Blocked) => self.write_blocked = true,
            Err(_) => return Step::Close(CloseReason::Error),
            Ok(_) => {}
        }
        Step::Keep
    }
}

/// An idle HTTP/2 connection keeps its `ConnIo` (the HPACK decoder's
/// table is state), but not its buffers.
pub(super) fn park(io: &mut ConnIo, pool: &mut BufPool) {
    if !io.out.is_empty() {
        return;
    }
    io.rstart = 0;
    io.rend = 0;
    let full = std::mem::take(&mut io.rbuf);
    if full.capacity() > 0 && pool.read.len() < POOL_MAX {
        pool.read.push(full);
    }
    let out = io.out.take_buf();
    if out.capacity() > 0 && out.capacity() <= POOLED_WRITE_MAX && pool.write.len() < POOL_MAX {
        pool.write.push(out);
    }
    if let Some(h2) = io.h2.as_deref_mut() {
        h2.shrink();
    }
}

/// Answers HTTP/2 and HTTP/3 requests through the semantics layer,
/// counted and logged as HTTP/1 ones are.
pub struct Answer<'a> {
    sites: &'a Sites,
    snapshots: &'a mut Local,
    /// The site the connection's SNI fixed, if any.
    sni: Option<u32>,
    scratch: &'a mut Scratch,
    /// The id of the request being answered.
    id: Option<IdLine>,
    rec: Record<'a>,
}

/// What counts and logs the answers.
struct Record<'a> {
    cfg: &'a ConnConfig,
    date: &'a DateCache,
    counters: &'a mut ShardCounters,
    log: Option<&'a mut ShardLog>,
    peer: Peer,
    /// The TCP connection's TLS session, for the access log.
    tls: Option<&'a TlsConn>,
    /// Over TLS (or QUIC): HTTPS-only lines go out, no HTTPS redirect.
    secure: bool,
    answered: usize,
    /// The event's time: a request's HEADERS arrived in it.
    now: Instant,
}

impl Record<'_> {
    /// Count an answer and write its access-log line.
    fn record(
        &mut self,
        id: Option<&IdLine>,
        (req, fields): (Option<&request::Request<'_>>, Option<&Fields>),
        (site, label): (u32, Option<&str>),
        status: Status,
        bytes: u64,
    ) {
        self.answered += 1;
        self.counters.request(site, status, bytes);
        if let Some(log) = self.log.as_deref_mut() {
            let peer = match (&self.cfg.real_ip_header, fields) {
                (Some(name), Some(fields)) => {
                    real_peer(&self.peer, fields, name, &self.cfg.trusted_proxies)
                }
                _ => self.peer,
            };
            let line = crate::metrics::access_log::Line {
                peer: peer.get(),
                tls: self.tls.and_then(TlsConn::session_info),
                req,
                status,
                bytes,
                started: self.now,
                request_id: id.map_or(b"", IdLine::id),
                site: label,
            };
            log.line(self.date.secs(), &line);
        }
    }

    /// The request's id (`request_id_header` set): the field's last value
    /// from a trusted peer, else a new one.
    #[cold]
    #[inline(never)]
    fn choose_id(
        &self,
        fields: Option<&Fields>,
        ids: &mut request_id::RequestIds,
    ) -> Option<IdLine> {
        let header = self.cfg.request_id.as_ref()?;
        let ip = self.peer.get().map(|a| a.ip());
        let trusted = &self.cfg.trusted_proxies;
        let incoming = match (ip, fields) {
            (Some(ip), Some(fields)) if proxy::trusted(trusted, ip) => {
                last_value(fields, &header.name)
            }
            _ => None,
        };
        Some(request_id::choose(header, trusted, ip, incoming, ids))
    }
}

impl<'a> Answer<'a> {
    /// Answer for `site` through `answer` (the semantics layer, given its
    /// `Env`, the site and whether it redirects to HTTPS), with the
    /// request's id; counted and logged before it is encoded.
    fn answer<'s>(
        &'s mut self,
        req: Option<&request::Request<'_>>,
        fields: Option<&Fields>,
        site: u32,
        answer: impl FnOnce(serve::Env<'s>, Option<u16>, &'s mut serve::Scratch) -> serve::Response<'s>,
    ) -> serve::Response<'s> {
        let Answer {
            sites,
            snapshots,
            sni: _,
            scratch,
            id,
            rec,
        } = self;
        *id = None;
        if rec.cfg.request_id.is_some() {
            *id = rec.choose_id(fields, &mut scratch.ids);
        }
        let (cfg, date) = (rec.cfg, rec.date);
        let tls = rec.secure;
        let site_cfg = sites.get(site);
        let env = serve_env(cfg, (site_cfg, snapshots.load(site)), date, tls);
        let redirect = https_redirect(cfg, site_cfg, tls);
        let mut resp = answer(env, redirect, &mut scratch.serve);
        let label = sites.label(site);
        rec.record(
            id.as_ref(),
            (req, fields),
            (site, label),
            resp.status,
            resp.body_len(),
        );
        if let (Some(header), Some(id)) = (&cfg.request_id, id.as_ref()) {
            resp.request_id = Some(id.field(header));
        }
        resp
    }
}

/// The last value of field `name` (any case) in a decoded list.
fn last_value<'f>(fields: &'f Fields, name: &str) -> Option<&'f [u8]> {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| v.trim_ascii())
        .last()
}

/// [`Peer::real`] for HTTP/2: the address `real_ip_header` names in a
/// trusted peer's request, for its access-log line.
#[cold]
#[inline(never)]
fn real_peer(peer: &Peer, fields: &Fields, name: &str, trusted: &[proxy::Cidr]) -> Peer {
    peer.real_from(last_value(fields, name), trusted)
}

impl<'a> Answer<'a> {
    /// The answerer of an HTTP/3 connection from `peer`, whose SNI chose
    /// `sni` (a site), on the shard's `env`.
    pub fn for_h3(env: &'a mut ShardEnv<'_>, peer: std::net::SocketAddr, sni: Option<u32>) -> Self {
        Answer::new(env, Peer::new(Some(peer)), (None, true), sni)
    }

    /// The answerer of a connection from `peer` on the shard's `env`:
    /// `(tls, secure)` is its TCP TLS session, for the access log, and
    /// whether it is encrypted at all (QUIC is, without one); `sni` the
    /// site its SNI chose.
    fn new(
        env: &'a mut ShardEnv<'_>,
        peer: Peer,
        (tls, secure): (Option<&'a TlsConn>, bool),
        sni: Option<u32>,
    ) -> Self {
        Answer {
            sites: env.sites,
            snapshots: &mut *env.snapshots,
            sni,
            scratch: &mut *env.scratch,
            id: None,
            rec: Record {
                cfg: env.cfg,
                date: env.date,
                counters: &mut *env.counters,
                log: env.log.as_deref_mut(),
                peer,
                tls,
                secure,
                answered: 0,
                now: env.now,
            },
        }
    }
}

impl Handler for Answer<'_> {
    fn respond(&mut self, req: &request::Request<'_>, fields: &Fields) -> serve::Response<'_> {
        let tls = self.rec.tls;
        let chosen = match (self.sites.single(), self.sni, req.host) {
            (true, _, _) => Ok(DEFAULT),
            // The name the SNI gave: its site, looked up once.
            (false, Some(site), Some(h)) if tls.is_some_and(|t| t.is_sni(h)) => Ok(site),
            (false, sni, host) => self.sites.choose(host, sni),
        };
        match chosen {
            Ok(site) => {
                self.answer(
                    Some(req),
                    Some(fields),
                    site,
                    |env, redirect, scratch| match redirect {
                        Some(port) => serve::redirect_https(req, env, scratch, port),
                        None => serve::respond(req, env, scratch),
                    },
                )
            }
            // Counted for the site the connection's SNI chose, if any.
            Err(status) => {
                let site = self.sni.unwrap_or(DEFAULT);
                self.answer(Some(req), Some(fields), site, |env, _, scratch| {
                    serve::unclaimed(req, env, scratch, status)
                })
            }
        }
    }

    fn refuse(&mut self, status: Status, message: &'static str) -> serve::Response<'_> {
        self.answer(None, None, DEFAULT, |env, _, _| {
            serve::refuse(env, status, message)
        })
    }
}
