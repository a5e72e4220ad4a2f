//! The semantics layer: one parsed request → a typed [`Response`]. Method
//! rules, path → resource, conditionals, ranges, errors, redirects, ACME
//! tokens. It knows no protocol: HTTP/1 writes the response out
//! (`proto::http1`), HTTP/2 encodes it (`proto::h2`). A snapshot hit is
//! its pre-rendered head plus the Date and the body; everything else (304,
//! 206, errors) is assembled here from the entry's pre-rendered pieces.
//!
//! The representation is chosen first (`Accept-Encoding`), and everything
//! after applies to it: validators, ranges, Content-Length.

mod response;
pub mod sites;

use std::io::Write;
use std::sync::Arc;

use crate::cache::{Body, Entry, EntryRef, FileStamp, ReprRef, Resource, Snapshot};
use crate::http::accept;
use crate::http::conditional::{self, Precondition, Validators};
use crate::http::date::DateCache;
use crate::http::range::{self, ByteRange, RangeOutcome};
use crate::http::request::{Method, Request};
use crate::http::{path, Status};

pub use response::{Multipart, Part, Payload, RequestId, Response, Slice};

pub const ALLOW: &[u8] = b"Allow: GET, HEAD, OPTIONS\r\n";

/// What a response needs of its shard and connection.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub snapshot: &'a Arc<Snapshot>,
    pub date: &'a DateCache,
    pub server_line: &'a [u8],
    pub max_ranges: usize,
    /// Header lines this connection adds to its successful responses
    /// (`Strict-Transport-Security` over TLS); empty otherwise.
    pub conn_lines: &'a [u8],
    /// The connection is TLS: a file's TLS-only lines go out.
    pub tls: bool,
}

impl<'a> Env<'a> {
    /// What follows a file's pre-rendered lines on this connection: over
    /// TLS, its `[[headers]]` rule's `Strict-Transport-Security` (which,
    /// like nginx's `add_header` in a location, replaces the server-wide
    /// `hsts`) or else `hsts`; over cleartext nothing (RFC 6797 §7.2).
    #[inline]
    fn file_lines(&self, repr: &ReprRef<'_>) -> &'a [u8] {
        if !self.tls {
            return b"";
        }
        match repr.tls_lines() {
            b"" => self.conn_lines,
            rule => rule,
        }
    }

    /// A response with `status`, then the `Server` line.
    #[inline]
    fn head(&self, status: Status) -> Response<'a> {
        let mut resp = Response::new(status, self.date);
        resp.lines(self.server_line);
        resp
    }
}

/// A shard's buffers for the dynamic parts of its responses, reused so the
/// hot path does not allocate.
#[derive(Default)]
pub struct Scratch {
    path: Vec<u8>,
    ranges: Vec<ByteRange>,
    /// Header lines rendered for one response (`Location`,
    /// `Content-Range`, the multipart `Content-Type`).
    lines: Vec<u8>,
    /// Counter that makes multipart boundaries differ between responses.
    boundary_seq: u64,
    /// An ACME token's key authorization, while its response is sent.
    token: Option<Arc<str>>,
}

/// `lines` cleared, filled by `render`, and lent for the response's
/// lifetime.
fn render(lines: &mut Vec<u8>, render: impl FnOnce(&mut Vec<u8>)) -> &[u8] {
    lines.clear();
    render(lines);
    lines
}

/// Answer `req`.
#[inline]
pub fn respond<'a>(req: &Request<'_>, env: Env<'a>, scratch: &'a mut Scratch) -> Response<'a> {
    // Filled in place: the response is not copied on its way out.
    let mut resp = Response::new(Status::Ok, env.date);
    respond_into(req, env, scratch, &mut resp);
    resp
}

/// [`respond`] into `resp`, a fresh `Response::new(Status::Ok, env.date)`
/// in the caller's frame: the hot path's response is never moved.
pub fn respond_into<'a>(
    req: &Request<'_>,
    env: Env<'a>,
    scratch: &'a mut Scratch,
    resp: &mut Response<'a>,
) {
    let Scratch {
        path,
        ranges,
        lines,
        boundary_seq,
        token,
    } = scratch;
    match req.method {
        Method::Options => {
            *resp = env.head(Status::NoContent);
            resp.lines(ALLOW).lines(env.conn_lines);
            return;
        }
        Method::NotAllowed => {
            *resp = error(
                env,
                Status::MethodNotAllowed,
                "method not allowed",
                ALLOW,
                false,
            );
            return;
        }
        // RFC 9110 §9.1: a method the server does not recognise is a 501;
        // 405 says a known method is not allowed on this resource.
        Method::Unknown => {
            *resp = error(
                env,
                Status::NotImplemented,
                "method not implemented",
                b"",
                false,
            );
            return;
        }
        Method::Get | Method::Head => {}
    }
    let head_only = req.method == Method::Head;
    if let Err(e) = path::normalize(req.target, path) {
        *resp = error(env, Status::BadRequest, e.message(), b"", head_only);
        return;
    }
    // ACME HTTP-01 tokens ahead of the snapshot; the map is read only for
    // paths under the challenge prefix.
    if let Some(key_authorization) = crate::challenge::http01(path) {
        let body: &'a str = token.insert(key_authorization);
        *resp = acme_token(env, head_only, body);
        return;
    }
    let snapshot = env.snapshot;
    let file = Files {
        ranges,
        lines,
        boundary_seq,
        max_ranges: env.max_ranges,
    };
    match snapshot.resolve(path) {
        None if snapshot.spa_index().is_some() && !has_extension(path) => {
            let index = snapshot.spa_index().unwrap_or_default();
            serve_file(req, env, file, index, head_only, resp);
        }
        None => *resp = error(env, Status::NotFound, "not found", b"", head_only),
        Some(Resource::Forbidden) => {
            *resp = error(env, Status::Forbidden, "forbidden", b"", head_only);
        }
        Some(Resource::AddSlash) => {
            let location = render(file.lines, |l| slash_location(req.target, path, l));
            *resp = error(
                env,
                Status::MovedPermanently,
                "moved permanently",
                location,
                head_only,
            );
        }
        Some(Resource::File(index)) => serve_file(req, env, file, index, head_only, resp),
    }
}

/// The scratch a file's response may use.
struct Files<'a> {
    ranges: &'a mut Vec<ByteRange>,
    lines: &'a mut Vec<u8>,
    boundary_seq: &'a mut u64,
    max_ranges: usize,
}

/// Whether the last segment of a normalised path has an extension.
fn has_extension(path: &[u8]) -> bool {
    let last = path.rsplit(|&b| b == b'/').next().unwrap_or_default();
    last.contains(&b'.')
}

const VARY: &[u8] = b"Vary: Accept-Encoding\r\n";

fn vary_line(entry: &Entry) -> &'static [u8] {
    if entry.vary {
        VARY
    } else {
        b""
    }
}

/// Pick the representation `Accept-Encoding` asks for and serve it
/// (identity when it accepts nothing the entry has: see [`accept::negotiate`]).
fn serve_file<'a>(
    req: &Request<'_>,
    env: Env<'a>,
    file: Files<'a>,
    index: u32,
    head_only: bool,
    resp: &mut Response<'a>,
) {
    // Copy the reference out of `env`: no refcount traffic per request.
    let snapshot: &'a Arc<Snapshot> = env.snapshot;
    let entry = snapshot.entry(index);
    let coding = accept::negotiate(req.accept_encoding, entry.codings());
    let repr = entry.repr(coding);
    serve(req, env, file, entry, repr, head_only, resp);
}

fn serve<'a>(
    req: &Request<'_>,
    env: Env<'a>,
    file: Files<'a>,
    entry: EntryRef<'a>,
    repr: ReprRef<'a>,
    head_only: bool,
    resp: &mut Response<'a>,
) {
    let validators = Validators {
        etag: repr.etag(),
        last_modified: entry.last_modified,
    };
    match conditional::evaluate(req, &validators) {
        Precondition::Failed => {
            *resp = error(
                env,
                Status::PreconditionFailed,
                "precondition failed",
                vary_line(&entry),
                head_only,
            );
            return;
        }
        Precondition::NotModified => {
            *resp = env.head(Status::NotModified);
            let [own, tail] = repr.common();
            resp.lines(own).lines(tail).lines(env.file_lines(&repr));
            return;
        }
        Precondition::Proceed => {}
    }
    // A body sent from its file is sent from the fd taken here, before the
    // head is written: the response finishes from this inode whatever
    // happens to its name meanwhile (`io::output`).
    let mut opened = None;
    if let Body::File(large) = &repr.body {
        // The file changed on disk since the snapshot was built: its bytes
        // no longer match the ETag and length we would announce.
        opened = large.file().ok().filter(|f| {
            f.metadata()
                .is_ok_and(|m| FileStamp::of(&m).same_content(&large.stamp))
        });
        if opened.is_none() {
            *resp = error(
                env,
                Status::ServiceUnavailable,
                "file is changing on disk; retry",
                b"Retry-After: 1\r\n",
                head_only,
            );
            return;
        }
    }
    let range_applies = req.range.is_some()
        && req
            .if_range
            .is_none_or(|v| conditional::if_range_matches(v, &validators));
    if range_applies {
        let header = req.range.unwrap_or_default();
        match range::parse(header, repr.len, file.max_ranges, file.ranges) {
            RangeOutcome::Full => {}
            RangeOutcome::Unsatisfiable => {
                let extra = render(file.lines, |l| {
                    let _ = write!(l, "Content-Range: bytes */{}\r\n", repr.len);
                    l.extend_from_slice(vary_line(&entry));
                });
                *resp = error(
                    env,
                    Status::RangeNotSatisfiable,
                    "range not satisfiable",
                    extra,
                    head_only,
                );
                return;
            }
            RangeOutcome::Partial => {
                *resp = partial(env, file, entry, repr, opened, head_only);
                return;
            }
        }
    }
    resp.prerendered(repr.head_200());
    resp.lines(env.file_lines(&repr));
    if !head_only {
        resp.body = Payload::Snapshot(Slice {
            snapshot: env.snapshot,
            body: repr.body(),
            start: 0,
            len: repr.len,
            file: opened,
        });
    }
}

/// 206: one range as a plain body, several as `multipart/byteranges`.
fn partial<'a>(
    env: Env<'a>,
    file: Files<'a>,
    entry: EntryRef<'a>,
    repr: ReprRef<'a>,
    opened: Option<Arc<std::fs::File>>,
    head_only: bool,
) -> Response<'a> {
    let mut resp = env.head(Status::PartialContent);
    let [own, tail] = repr.common();
    resp.lines(own)
        .lines(tail)
        .lines(repr.encoding_line())
        .lines(env.file_lines(&repr));
    let ranges: &'a [ByteRange] = file.ranges;
    if let [r] = ranges {
        let len = r.end - r.start + 1;
        let lines = render(file.lines, |l| {
            l.extend_from_slice(entry.content_type_line());
            let _ = write!(
                l,
                "Content-Range: bytes {}-{}/{}\r\n",
                r.start, r.end, repr.len
            );
        });
        resp.lines(lines);
        resp.content_length = Some(len);
        if !head_only {
            resp.body = Payload::Snapshot(Slice {
                snapshot: env.snapshot,
                body: repr.body(),
                start: r.start,
                len,
                file: opened,
            });
        }
        return resp;
    }
    *file.boundary_seq += 1;
    let mut boundary = [0u8; 32];
    let _ = write!(
        &mut boundary[..],
        "{:016x}{:016x}",
        entry.last_modified,
        *file.boundary_seq
    );
    let content_type = entry
        .content_type_line()
        .strip_prefix(b"Content-Type: ")
        .and_then(|t| t.strip_suffix(b"\r\n"))
        .unwrap_or(b"application/octet-stream");
    let multipart = Multipart {
        snapshot: env.snapshot,
        body: repr.body(),
        file: opened,
        ranges,
        total: repr.len,
        content_type,
        boundary,
    };
    let lines = render(file.lines, |l| {
        l.extend_from_slice(b"Content-Type: multipart/byteranges; boundary=");
        l.extend_from_slice(&boundary);
        l.extend_from_slice(b"\r\n");
    });
    resp.lines(lines);
    resp.content_length = Some(multipart.len());
    if !head_only {
        resp.body = Payload::Multipart(Box::new(multipart));
    }
    resp
}

/// `redirect_https`: 301 to the same host (its port replaced by `port`,
/// left out when 443) and target over HTTPS, as nginx's
/// `return 301 https://$host$request_uri`. Host and target were validated
/// by the parser, so neither can break the header.
pub fn redirect_https<'a>(
    req: &Request<'_>,
    env: Env<'a>,
    scratch: &'a mut Scratch,
    port: u16,
) -> Response<'a> {
    // The CA's HTTP-01 validation is answered on the cleartext port, not
    // sent away (the redirect would work too, but only once a certificate
    // is served on the TLS port).
    if path::path_part(req.target).is_ok_and(|p| p.starts_with(crate::challenge::HTTP01_PREFIX)) {
        return respond(req, env, scratch);
    }
    let head_only = req.method == Method::Head;
    let Some(host) = req.host.filter(|h| !h.is_empty()) else {
        return error(
            env,
            Status::BadRequest,
            "a Host header is needed for the redirect to HTTPS",
            b"",
            head_only,
        );
    };
    let name = if host.first() == Some(&b'[') {
        // The parser let through only a closed IP literal.
        host.iter()
            .position(|&b| b == b']')
            .map_or(host, |close| &host[..=close])
    } else {
        match host.iter().rposition(|&b| b == b':') {
            Some(colon) => &host[..colon],
            None => host,
        }
    };
    // Always `/…`: the parser accepted the target, and an absolute-form
    // one comes back as its path.
    let target = path::path_part(req.target).unwrap_or(b"/");
    let location = render(&mut scratch.lines, |l| {
        l.extend_from_slice(b"Location: https://");
        l.extend_from_slice(name);
        if port != 443 {
            let _ = write!(l, ":{port}");
        }
        l.extend_from_slice(target);
        l.extend_from_slice(b"\r\n");
    });
    error(
        env,
        Status::MovedPermanently,
        "moved permanently",
        location,
        head_only,
    )
}

/// 200 with a pending ACME HTTP-01 key authorization (RFC 8555 §8.3),
/// never stored by a cache.
fn acme_token<'a>(env: Env<'a>, head_only: bool, body: &'a str) -> Response<'a> {
    let mut resp = env.head(Status::Ok);
    resp.lines(b"Content-Type: application/octet-stream\r\nCache-Control: no-store\r\n");
    resp.content_length = Some(body.len() as u64);
    if !head_only {
        resp.body = Payload::Bytes(body.as_bytes());
    }
    resp
}

/// The `Location` line of the trailing-slash redirect (301 from `/dir` to
/// `/dir/`, keeping the query), into `out`.
///
/// It is built from the normalised `path`, never from the raw target: a
/// target such as `//evil.example/../docs` or `/\evil.example/../docs`
/// names the local `/docs`, but echoed back it is a network-path reference
/// that browsers follow to another host. The normalised path has no empty
/// segment, and every byte outside RFC 3986's `pchar` (a backslash
/// included) is percent-encoded, so the value always starts with exactly
/// one `/` followed by a byte that is neither `/` nor `\`.
fn slash_location(target: &[u8], path: &[u8], out: &mut Vec<u8>) {
    // Absolute-form targets keep only their query. `normalize` has already
    // accepted the target, so it has a path part.
    let target = path::path_part(target).unwrap_or(target);
    let before_fragment = target.split(|&b| b == b'#').next().unwrap_or(b"");
    let query = before_fragment
        .iter()
        .position(|&b| b == b'?')
        .map_or(&b""[..], |i| &before_fragment[i..]);
    location_line(path, query, out);
}

/// `Location: {path}/{query}\r\n`, escaped as [`slash_location`] says.
fn location_line(path: &[u8], query: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(b"Location: ");
    debug_assert!(path.first() == Some(&b'/') && !path.windows(2).any(|w| w == b"//"));
    for &b in path {
        if b == b'/' || is_pchar(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out.push(b'/');
    // The query is passed on as the client wrote it (escapes included);
    // only bytes that may not appear in a header value are encoded.
    for &b in query {
        if b.is_ascii_graphic() {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// RFC 3986 `pchar` minus `%` (a decoded `%` is data and gets encoded).
fn is_pchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

/// An error response for a request the connection refuses before the
/// semantics see it (413 for a body too large, 414 and 431 over HTTP/2):
/// the snapshot's page for `status`, or else a short `text/plain` body.
pub fn refuse<'a>(env: Env<'a>, status: Status, message: &'a str) -> Response<'a> {
    error(env, status, message, b"", false)
}

/// A response with the snapshot's page for `status`, or else a short
/// `text/plain` body saying what happened; `extra` are lines it adds.
fn error<'a>(
    env: Env<'a>,
    status: Status,
    message: &'a str,
    extra: &'a [u8],
    head_only: bool,
) -> Response<'a> {
    let snapshot = env.snapshot;
    let Some(index) = snapshot.error_page(status.code()) else {
        let mut resp = text_error(env.server_line, env.date, status, message, head_only);
        resp.lines(snapshot.status_cache_control(status))
            .lines(extra);
        return resp;
    };
    // The page as its body (identity only: error pages are small, and not
    // worth a `Vary`). No validators: the page stands in for a resource
    // that has none.
    let entry = snapshot.entry(index);
    let repr = entry.identity();
    let mut resp = env.head(status);
    resp.lines(entry.content_type_line())
        .lines(snapshot.status_cache_control(status))
        .lines(extra);
    resp.content_length = Some(repr.len);
    if !head_only {
        resp.body = Payload::Snapshot(Slice {
            snapshot,
            body: repr.body(),
            start: 0,
            len: repr.len,
            file: None,
        });
    }
    resp
}

/// A request no site answers on this connection (`status`: 421 for a
/// name another connection's certificate covers or that `unknown_host`
/// misdirects, 404 by `unknown_host`): a short text body, no site's page.
/// ACME HTTP-01 tokens are still answered: the CA asks on cleartext, for
/// names that may be no site's (`acme_domains`).
pub fn unclaimed<'a>(
    req: &Request<'_>,
    env: Env<'a>,
    scratch: &'a mut Scratch,
    status: Status,
) -> Response<'a> {
    let head_only = req.method == Method::Head;
    if path::normalize(req.target, &mut scratch.path).is_ok() {
        if let Some(key_authorization) = crate::challenge::http01(&scratch.path) {
            let body: &'a str = scratch.token.insert(key_authorization);
            return acme_token(env, head_only, body);
        }
    }
    let message = match status {
        Status::MisdirectedRequest => "misdirected request: no site for this host here",
        _ => "no site for this host",
    };
    text_error(env.server_line, env.date, status, message, head_only)
}

/// An error before a request is parsed (400, 408): a `text/plain` body
/// saying what happened, with neither the snapshot nor the scratch.
pub fn error_with<'a>(
    server_line: &'a [u8],
    date: &'a DateCache,
    status: Status,
    message: &'a str,
) -> Response<'a> {
    text_error(server_line, date, status, message, false)
}

fn text_error<'a>(
    server_line: &'a [u8],
    date: &'a DateCache,
    status: Status,
    message: &'a str,
    head_only: bool,
) -> Response<'a> {
    let mut resp = Response::new(status, date);
    resp.lines(server_line)
        .lines(b"Content-Type: text/plain; charset=utf-8\r\n");
    resp.content_length = Some(message.len() as u64 + 1);
    if !head_only {
        resp.body = Payload::Message(message);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::location_line;

    #[test]
    fn slash_location_is_one_local_path() {
        let cases: &[(&[u8], &[u8], &str)] = &[
            (b"/docs", b"", "/docs/"),
            (b"/docs", b"?x=//evil", "/docs/?x=//evil"),
            (b"/\\evil.example", b"", "/%5Cevil.example/"),
            (b"/a b/%", b"", "/a%20b/%25/"),
            (b"/caf\xc3\xa9", b"?q=\xff", "/caf%C3%A9/?q=%FF"),
            (b"/x", b"?a\r\nSet-Cookie: 1", "/x/?a%0D%0ASet-Cookie:%201"),
        ];
        for &(path, query, want) in cases {
            let mut line = Vec::new();
            location_line(path, query, &mut line);
            let want = format!("Location: {want}\r\n");
            assert_eq!(String::from_utf8_lossy(&line), want, "{path:?} {query:?}");
        }
    }
}
