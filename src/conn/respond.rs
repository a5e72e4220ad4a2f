//! Turning one parsed request into response bytes on a connection's
//! [`Output`]. A snapshot hit is the pre-rendered head plus `Date`,
//! `Connection` and the body; everything else (304, 206, errors) is rendered
//! here from the entry's pre-rendered pieces.
//!
//! The representation is chosen first (`Accept-Encoding`), and everything
//! after applies to it: validators, ranges, Content-Length.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use super::output::Output;
use crate::cache::{Body, Entry, EntryRef, FileStamp, ReprRef, Resource, Snapshot};
use crate::http::accept;
use crate::http::conditional::{self, Precondition, Validators};
use crate::http::date::DateCache;
use crate::http::range::{self, ByteRange, RangeOutcome};
use crate::http::request::{Method, Request};
use crate::http::{path, Status};

pub const ALLOW: &[u8] = b"Allow: GET, HEAD, OPTIONS\r\n";

/// What the `Connection` header says about the connection after this response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// HTTP/1.1 default: no header needed.
    KeepAlive11,
    /// HTTP/1.0 with `Connection: keep-alive`: echo it.
    KeepAlive10,
    /// The connection closes after this response.
    Close,
}

impl Persist {
    fn line(self) -> &'static [u8] {
        match self {
            Persist::KeepAlive11 => b"",
            Persist::KeepAlive10 => b"Connection: keep-alive\r\n",
            Persist::Close => b"Connection: close\r\n",
        }
    }
}

/// Per-shard state a response needs; scratch buffers are reused so the hot
/// path does not allocate.
pub struct Env<'a> {
    pub snapshot: &'a Arc<Snapshot>,
    pub date: &'a DateCache,
    pub server_line: &'a [u8],
    pub max_ranges: usize,
    pub scratch: &'a mut Scratch,
    /// Header lines this connection adds to its successful responses
    /// (`Strict-Transport-Security` over TLS); empty otherwise.
    pub conn_lines: &'a [u8],
    /// The connection is TLS: a file's TLS-only lines go out.
    pub tls: bool,
    /// This request's `request_id_header` line, on every response; empty
    /// when it is off (or on HTTP/2, whose encoder appends the id itself).
    pub id_line: &'a [u8],
}

impl Env<'_> {
    /// What follows a file's pre-rendered lines on this connection: over
    /// TLS, its `[[headers]]` rule's `Strict-Transport-Security` (which,
    /// like nginx's `add_header` in a location, replaces the server-wide
    /// `hsts`) or else `hsts`; over cleartext nothing (RFC 6797 §7.2).
    #[inline]
    fn file_lines<'r>(&'r self, repr: &ReprRef<'r>) -> &'r [u8] {
        if !self.tls {
            return b"";
        }
        match repr.tls_lines() {
            b"" => self.conn_lines,
            rule => rule,
        }
    }
}

/// `line` when there is one: with `request_id_header` off (empty) the
/// hit path pays a test, not a copy.
#[inline(always)]
fn put(buf: &mut Vec<u8>, line: &[u8]) {
    if !line.is_empty() {
        buf.extend_from_slice(line);
    }
}

#[derive(Default)]
pub struct Scratch {
    path: Vec<u8>,
    ranges: Vec<ByteRange>,
    /// Counter that makes multipart boundaries differ between responses.
    boundary_seq: u64,
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

/// Answer `req`, appending to `out`. Returns the status sent and the number
/// of body bytes queued.
pub fn respond(
    req: &Request<'_>,
    env: &mut Env<'_>,
    persist: Persist,
    out: &mut Output,
) -> (Status, u64) {
    match req.method {
        Method::Options => {
            let buf = out.buf();
            buf.extend_from_slice(Status::NoContent.line());
            buf.extend_from_slice(env.server_line);
            buf.extend_from_slice(env.date.line());
            buf.extend_from_slice(ALLOW);
            buf.extend_from_slice(env.conn_lines);
            put(buf, env.id_line);
            buf.extend_from_slice(persist.line());
            buf.extend_from_slice(b"\r\n");
            return (Status::NoContent, 0);
        }
        Method::NotAllowed => {
            return error(
                env,
                out,
                Status::MethodNotAllowed,
                "method not allowed",
                ALLOW,
                persist,
                false,
            );
        }
        // RFC 9110 §9.1: a method the server does not recognise is a 501;
        // 405 says a known method is not allowed on this resource.
        Method::Unknown => {
            return error(
                env,
                out,
                Status::NotImplemented,
                "method not implemented",
                b"",
                persist,
                false,
            );
        }
        Method::Get | Method::Head => {}
    }
    let head_only = req.method == Method::Head;
    if let Err(e) = path::normalize(req.target, &mut env.scratch.path) {
        return error(
            env,
            out,
            Status::BadRequest,
            e.message(),
            b"",
            persist,
            head_only,
        );
    }
    // ACME HTTP-01 tokens ahead of the snapshot; the map is read only for
    // paths under the challenge prefix.
    if let Some(key_authorization) = crate::acme::challenge::http01(&env.scratch.path) {
        return acme_token(env, out, persist, head_only, &key_authorization);
    }
    let resource = env.snapshot.resolve(&env.scratch.path);
    match resource {
        None if env.snapshot.spa_index().is_some() && !has_extension(&env.scratch.path) => {
            let index = env.snapshot.spa_index().unwrap_or_default();
            serve_file(req, env, index, persist, head_only, out)
        }
        None => error(
            env,
            out,
            Status::NotFound,
            "not found",
            b"",
            persist,
            head_only,
        ),
        Some(Resource::Forbidden) => error(
            env,
            out,
            Status::Forbidden,
            "forbidden",
            b"",
            persist,
            head_only,
        ),
        Some(Resource::AddSlash) => redirect_slash(req.target, env, out, persist, head_only),
        Some(Resource::File(index)) => serve_file(req, env, index, persist, head_only, out),
    }
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
fn serve_file(
    req: &Request<'_>,
    env: &mut Env<'_>,
    index: u32,
    persist: Persist,
    head_only: bool,
    out: &mut Output,
) -> (Status, u64) {
    // Copy the reference out of `env`: no refcount traffic per request.
    let snapshot = env.snapshot;
    let entry = snapshot.entry(index);
    let coding = accept::negotiate(req.accept_encoding, entry.codings());
    let repr = entry.repr(coding);
    serve(req, env, snapshot, entry, repr, persist, head_only, out)
}

#[allow(clippy::too_many_arguments)]
fn serve(
    req: &Request<'_>,
    env: &mut Env<'_>,
    snapshot: &Arc<Snapshot>,
    entry: EntryRef<'_>,
    repr: ReprRef<'_>,
    persist: Persist,
    head_only: bool,
    out: &mut Output,
) -> (Status, u64) {
    let validators = Validators {
        etag: repr.etag(),
        last_modified: entry.last_modified,
    };
    match conditional::evaluate(req, &validators) {
        Precondition::Failed => {
            return error(
                env,
                out,
                Status::PreconditionFailed,
                "precondition failed",
                vary_line(&entry),
                persist,
                head_only,
            )
        }
        Precondition::NotModified => {
            let buf = out.buf();
            buf.extend_from_slice(Status::NotModified.line());
            buf.extend_from_slice(env.server_line);
            buf.extend_from_slice(env.date.line());
            for piece in repr.common() {
                buf.extend_from_slice(piece);
            }
            buf.extend_from_slice(env.file_lines(&repr));
            put(buf, env.id_line);
            buf.extend_from_slice(persist.line());
            buf.extend_from_slice(b"\r\n");
            return (Status::NotModified, 0);
        }
        Precondition::Proceed => {}
    }
    // A body sent from its file is sent from the fd taken here, before the
    // head is written: the response finishes from this inode whatever
    // happens to its name meanwhile (`conn::output`).
    let mut opened = None;
    if let Body::File(large) = &repr.body {
        // The file changed on disk since the snapshot was built: its bytes
        // no longer match the ETag and length we would announce.
        opened = large.file().ok().filter(|f| {
            f.metadata()
                .is_ok_and(|m| FileStamp::of(&m).same_content(&large.stamp))
        });
        if opened.is_none() {
            return error(
                env,
                out,
                Status::ServiceUnavailable,
                "file is changing on disk; retry",
                b"Retry-After: 1\r\n",
                persist,
                head_only,
            );
        }
    }
    let range_applies = req.range.is_some()
        && req
            .if_range
            .is_none_or(|v| conditional::if_range_matches(v, &validators));
    if range_applies {
        let header = req.range.unwrap_or_default();
        match range::parse(header, repr.len, env.max_ranges, &mut env.scratch.ranges) {
            RangeOutcome::Full => {}
            RangeOutcome::Unsatisfiable => {
                let mut extra = [0u8; 96];
                let n = {
                    let mut w = &mut extra[..];
                    let _ = write!(w, "Content-Range: bytes */{}\r\n", repr.len);
                    let _ = w.write_all(vary_line(&entry));
                    96 - w.len()
                };
                return error(
                    env,
                    out,
                    Status::RangeNotSatisfiable,
                    "range not satisfiable",
                    &extra[..n],
                    persist,
                    head_only,
                );
            }
            RangeOutcome::Partial => {
                let opened = opened.as_ref();
                return partial(env, snapshot, entry, repr, opened, persist, head_only, out);
            }
        }
    }
    let buf = out.buf();
    for piece in repr.head_200() {
        buf.extend_from_slice(piece);
    }
    buf.extend_from_slice(env.date.line());
    buf.extend_from_slice(env.file_lines(&repr));
    put(buf, env.id_line);
    buf.extend_from_slice(persist.line());
    buf.extend_from_slice(b"\r\n");
    if head_only {
        return (Status::Ok, 0);
    }
    out.push_body(snapshot, &repr.body, 0, repr.len, opened.as_ref());
    (Status::Ok, repr.len)
}

/// 206: one range as a plain body, several as `multipart/byteranges`.
#[allow(clippy::too_many_arguments)]
fn partial(
    env: &mut Env<'_>,
    snapshot: &Arc<Snapshot>,
    entry: EntryRef<'_>,
    repr: ReprRef<'_>,
    opened: Option<&Arc<File>>,
    persist: Persist,
    head_only: bool,
    out: &mut Output,
) -> (Status, u64) {
    let ranges = &env.scratch.ranges;
    let buf = out.buf();
    buf.extend_from_slice(Status::PartialContent.line());
    buf.extend_from_slice(env.server_line);
    buf.extend_from_slice(env.date.line());
    for piece in repr.common() {
        buf.extend_from_slice(piece);
    }
    buf.extend_from_slice(repr.encoding_line());
    buf.extend_from_slice(env.file_lines(&repr));
    put(buf, env.id_line);
    buf.extend_from_slice(persist.line());
    if let [r] = ranges.as_slice() {
        let len = r.end - r.start + 1;
        buf.extend_from_slice(entry.content_type_line());
        let _ = write!(
            buf,
            "Content-Range: bytes {}-{}/{}\r\nContent-Length: {}\r\n\r\n",
            r.start, r.end, repr.len, len
        );
        if !head_only {
            out.push_body(snapshot, &repr.body, r.start, len, opened);
        }
        return (Status::PartialContent, if head_only { 0 } else { len });
    }
    env.scratch.boundary_seq += 1;
    let boundary = format_args!(
        "{:016x}{:016x}",
        entry.last_modified, env.scratch.boundary_seq
    )
    .to_string();
    let content_type = entry
        .content_type_line()
        .strip_prefix(b"Content-Type: ")
        .and_then(|t| t.strip_suffix(b"\r\n"))
        .unwrap_or(b"application/octet-stream");
    let content_type = String::from_utf8_lossy(content_type);
    let part_head = |r: &ByteRange| {
        format!(
            "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
            r.start, r.end, repr.len
        )
    };
    let trailer = format!("\r\n--{boundary}--\r\n");
    let total: u64 = ranges
        .iter()
        .map(|r| part_head(r).len() as u64 + (r.end - r.start + 1))
        .sum::<u64>()
        + trailer.len() as u64;
    let _ = write!(
        buf,
        "Content-Type: multipart/byteranges; boundary={boundary}\r\nContent-Length: {total}\r\n\r\n"
    );
    if head_only {
        return (Status::PartialContent, 0);
    }
    for r in ranges {
        out.buf().extend_from_slice(part_head(r).as_bytes());
        out.push_body(snapshot, &repr.body, r.start, r.end - r.start + 1, opened);
    }
    out.buf().extend_from_slice(trailer.as_bytes());
    (Status::PartialContent, total)
}

/// 301 from `/dir` to `/dir/`, keeping the query.
///
/// `Location` is built from the normalised path (`env.scratch.path`), never
/// from the raw target: a target such as `//evil.example/../docs` or
/// `/\evil.example/../docs` names the local `/docs`, but echoed back it is a
/// network-path reference that browsers follow to another host. The
/// normalised path has no empty segment, and every byte outside RFC 3986's
/// `pchar` (a backslash included) is percent-encoded, so the value always
/// starts with exactly one `/` followed by a byte that is neither `/` nor
/// `\`.
fn redirect_slash(
    target: &[u8],
    env: &mut Env<'_>,
    out: &mut Output,
    persist: Persist,
    head_only: bool,
) -> (Status, u64) {
    // Absolute-form targets keep only their query. `normalize` has already
    // accepted the target, so it has a path part.
    let target = path::path_part(target).unwrap_or(target);
    let before_fragment = target.split(|&b| b == b'#').next().unwrap_or(b"");
    let query = before_fragment
        .iter()
        .position(|&b| b == b'?')
        .map_or(&b""[..], |i| &before_fragment[i..]);
    let location = slash_location(&env.scratch.path, query);
    error(
        env,
        out,
        Status::MovedPermanently,
        "moved permanently",
        &location,
        persist,
        head_only,
    )
}

/// `redirect_https`: 301 to the same host (its port replaced by `port`,
/// left out when 443) and target over HTTPS, as nginx's
/// `return 301 https://$host$request_uri`. Host and target were validated
/// by the parser, so neither can break the header.
pub fn redirect_https(
    req: &Request<'_>,
    env: &mut Env<'_>,
    persist: Persist,
    out: &mut Output,
    port: u16,
) -> (Status, u64) {
    // The CA's HTTP-01 validation is answered on the cleartext port, not
    // sent away (the redirect would work too, but only once a certificate
    // is served on the TLS port).
    if path::path_part(req.target)
        .is_ok_and(|p| p.starts_with(crate::acme::challenge::HTTP01_PREFIX))
    {
        return respond(req, env, persist, out);
    }
    let head_only = req.method == Method::Head;
    let Some(host) = req.host.filter(|h| !h.is_empty()) else {
        return error(
            env,
            out,
            Status::BadRequest,
            "a Host header is needed for the redirect to HTTPS",
            b"",
            persist,
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
    let mut location = Vec::with_capacity(name.len() + target.len() + 32);
    location.extend_from_slice(b"Location: https://");
    location.extend_from_slice(name);
    if port != 443 {
        let _ = write!(location, ":{port}");
    }
    location.extend_from_slice(target);
    location.extend_from_slice(b"\r\n");
    error(
        env,
        out,
        Status::MovedPermanently,
        "moved permanently",
        &location,
        persist,
        head_only,
    )
}

/// 200 with a pending ACME HTTP-01 key authorization (RFC 8555 §8.3),
/// never stored by a cache.
fn acme_token(
    env: &Env<'_>,
    out: &mut Output,
    persist: Persist,
    head_only: bool,
    body: &str,
) -> (Status, u64) {
    let buf = out.buf();
    buf.extend_from_slice(Status::Ok.line());
    buf.extend_from_slice(env.server_line);
    buf.extend_from_slice(env.date.line());
    buf.extend_from_slice(b"Content-Type: application/octet-stream\r\nCache-Control: no-store\r\n");
    let _ = write!(buf, "Content-Length: {}\r\n", body.len());
    buf.extend_from_slice(persist.line());
    buf.extend_from_slice(b"\r\n");
    if head_only {
        return (Status::Ok, 0);
    }
    buf.extend_from_slice(body.as_bytes());
    (Status::Ok, body.len() as u64)
}

/// The `Location` header line for the trailing-slash redirect of the
/// normalised `path`, with `query` (from `?`, or empty) kept.
fn slash_location(path: &[u8], query: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut location = Vec::with_capacity(path.len() * 3 + query.len() + 16);
    location.extend_from_slice(b"Location: ");
    debug_assert!(path.first() == Some(&b'/') && !path.windows(2).any(|w| w == b"//"));
    for &b in path {
        if b == b'/' || is_pchar(b) {
            location.push(b);
        } else {
            location.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    location.push(b'/');
    // The query is passed on as the client wrote it (escapes included);
    // only bytes that may not appear in a header value are encoded.
    for &b in query {
        if b.is_ascii_graphic() {
            location.push(b);
        } else {
            location.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    location.extend_from_slice(b"\r\n");
    location
}

/// RFC 3986 `pchar` minus `%` (a decoded `%` is data and gets encoded).
fn is_pchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

/// A response with the snapshot's page for `status`, or else a short
/// `text/plain` body saying what happened.
pub fn error(
    env: &Env<'_>,
    out: &mut Output,
    status: Status,
    message: &str,
    extra: &[u8],
    persist: Persist,
    head_only: bool,
) -> (Status, u64) {
    if let Some(index) = env.snapshot.error_page(status.code()) {
        return error_page(env, out, status, index, extra, persist, head_only);
    }
    text_error(
        out,
        env.server_line,
        env.date,
        status,
        message,
        env.snapshot.status_cache_control(status),
        extra,
        env.id_line,
        persist,
        head_only,
    )
}

/// `status` with a page of the snapshot as its body (identity only: error
/// pages are small, and not worth a `Vary`). No validators: the page stands
/// in for a resource that has none.
fn error_page(
    env: &Env<'_>,
    out: &mut Output,
    status: Status,
    index: u32,
    extra: &[u8],
    persist: Persist,
    head_only: bool,
) -> (Status, u64) {
    let snapshot = env.snapshot;
    let repr = snapshot.entry(index).identity();
    let buf = out.buf();
    buf.extend_from_slice(status.line());
    buf.extend_from_slice(env.server_line);
    buf.extend_from_slice(env.date.line());
    buf.extend_from_slice(snapshot.entry(index).content_type_line());
    let _ = write!(buf, "Content-Length: {}\r\n", repr.len);
    buf.extend_from_slice(snapshot.status_cache_control(status));
    buf.extend_from_slice(extra);
    put(buf, env.id_line);
    buf.extend_from_slice(persist.line());
    buf.extend_from_slice(b"\r\n");
    if head_only {
        return (status, 0);
    }
    out.push_body(snapshot, &repr.body, 0, repr.len, None);
    (status, repr.len)
}

/// [`error`] without a full [`Env`], for errors before a request is parsed.
#[allow(clippy::too_many_arguments)]
pub fn error_with(
    out: &mut Output,
    server_line: &[u8],
    date: &DateCache,
    status: Status,
    message: &str,
    extra: &[u8],
    persist: Persist,
    head_only: bool,
) -> (Status, u64) {
    text_error(
        out,
        server_line,
        date,
        status,
        message,
        b"",
        extra,
        b"",
        persist,
        head_only,
    )
}

/// A `text/plain` error; `cache_control` is the status's pre-rendered
/// `Cache-Control` line (`error_cache_control`, `redirect_cache_control`)
/// or empty.
#[allow(clippy::too_many_arguments)]
fn text_error(
    out: &mut Output,
    server_line: &[u8],
    date: &DateCache,
    status: Status,
    message: &str,
    cache_control: &[u8],
    extra: &[u8],
    id_line: &[u8],
    persist: Persist,
    head_only: bool,
) -> (Status, u64) {
    let body_len = message.len() + 1;
    let buf = out.buf();
    buf.extend_from_slice(status.line());
    buf.extend_from_slice(server_line);
    buf.extend_from_slice(date.line());
    buf.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
    let _ = write!(buf, "Content-Length: {body_len}\r\n");
    buf.extend_from_slice(cache_control);
    buf.extend_from_slice(extra);
    put(buf, id_line);
    buf.extend_from_slice(persist.line());
    buf.extend_from_slice(b"\r\n");
    if head_only {
        return (status, 0);
    }
    buf.extend_from_slice(message.as_bytes());
    buf.push(b'\n');
    (status, body_len as u64)
}

#[cfg(test)]
mod tests {
    use super::slash_location;

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
            let line = slash_location(path, query);
            let want = format!("Location: {want}\r\n");
            assert_eq!(String::from_utf8_lossy(&line), want, "{path:?} {query:?}");
        }
    }
}
