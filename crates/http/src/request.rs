//! Request-head parsing: `&[u8]` in, a borrowed [`Request`] or a [`ParseError`]
//! out. httparse does the tokenising; this module adds the limits and the
//! framing rules (RFC 9112 §6.3) that decide whether the stream can be trusted.

use std::mem::MaybeUninit;

use super::Status;

mod fast;

/// Most header fields accepted in one request head; one more is a 431.
///
/// This sizes an uninitialised array on the stack of every `parse` call
/// (16 bytes of name and 16 of value per slot), so raising it costs stack,
/// not heap.
pub const MAX_HEADERS: usize = 100;

/// Slack allowed on top of `Limits::max_uri` before an unfinished request line
/// is declared a 414: room for the method, the two spaces and `HTTP/1.1\r\n`,
/// so a target of exactly `max_uri` bytes is never refused before it is seen
/// in full.
const REQUEST_LINE_SLACK: usize = 32;

/// Limits applied while parsing; validated once in `config`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request head (request line + fields + blank line), in bytes.
    pub max_head: usize,
    /// Longest request target, in bytes.
    pub max_uri: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    /// A registered method this server does not allow (POST, PUT, …):
    /// answered with 405 and `Allow`.
    NotAllowed,
    /// Any other syntactically valid method: answered with 501
    /// (RFC 9110 §9.1; methods are case-sensitive, so `get` is one).
    Unknown,
}

impl Method {
    /// The kind of a method token (case-sensitive, RFC 9110 §9.1), the
    /// same for every protocol.
    pub fn of(name: &str) -> Method {
        match name {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "OPTIONS" => Method::Options,
            m if KNOWN_METHODS.contains(&m) => Method::NotAllowed,
            _ => Method::Unknown,
        }
    }
}

/// Methods registered with IANA (RFC 9110 §9, RFC 5789, WebDAV) that a
/// static server knows and refuses with 405; the rest get 501.
const KNOWN_METHODS: &[&str] = &[
    "POST",
    "PUT",
    "DELETE",
    "CONNECT",
    "TRACE",
    "PATCH",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
    "SEARCH",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A request on an HTTP/2 stream (`h2`).
    Http2,
    /// A request on an HTTP/3 request stream (`h3`).
    Http3,
}

/// A parsed request head. Header values are raw bytes, trimmed.
#[derive(Debug, Clone)]
pub struct Request<'b> {
    pub method: Method,
    /// The method as sent, for the access log.
    pub method_name: &'b str,
    /// The raw request target, e.g. `/a%20b?x=1`, `*`, or `http://h/p`.
    pub target: &'b [u8],
    pub version: Version,
    /// Bytes of the buffer taken by the head, blank line included.
    pub head_len: usize,
    pub host: Option<&'b [u8]>,
    /// A `close` token appeared in a Connection field.
    pub conn_close: bool,
    /// A `keep-alive` token appeared in a Connection field.
    pub conn_keep_alive: bool,
    /// The request body length from Content-Length (0 if absent).
    pub content_length: u64,
    /// The body is framed by `Transfer-Encoding: chunked` (RFC 9112 §7.1).
    pub chunked: bool,
    pub if_match: Option<&'b [u8]>,
    pub if_none_match: Option<&'b [u8]>,
    pub if_modified_since: Option<&'b [u8]>,
    pub if_unmodified_since: Option<&'b [u8]>,
    pub if_range: Option<&'b [u8]>,
    pub range: Option<&'b [u8]>,
    pub accept_encoding: Option<&'b [u8]>,
    /// For the access log.
    pub referer: Option<&'b [u8]>,
    pub user_agent: Option<&'b [u8]>,
}

/// Why a head was rejected. Every variant closes the connection: once the
/// head cannot be parsed, the framing of what follows cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Head larger than `Limits::max_head` → 431.
    HeadTooLarge,
    /// More than [`MAX_HEADERS`] fields → 431.
    TooManyHeaders,
    /// Target longer than `Limits::max_uri` → 414.
    UriTooLong,
    /// `HTTP/x.y` other than 1.0 / 1.1 → 505.
    VersionNotSupported,
    /// Malformed request line or field, bare CR, obs-fold → 400.
    Malformed,
    /// HTTP/1.1 without Host → 400.
    MissingHost,
    /// A Host value that is not `uri-host [":" port]` → 400 (RFC 9112 §3.2).
    BadHost,
    /// Content-Length together with Transfer-Encoding → 400.
    LengthAndEncoding,
    /// Differing duplicate or unparsable Content-Length → 400.
    BadContentLength,
    /// Transfer-Encoding whose last coding is not `chunked`, `chunked`
    /// twice, or an empty list: the body's end cannot be found → 400
    /// (RFC 9112 §6.3).
    ChunkedNotLast,
    /// A transfer coding other than `chunked` → 501 (RFC 9112 §6.1).
    UnknownCoding,
    /// Transfer-Encoding in an HTTP/1.0 request: faulty framing → 400
    /// (RFC 9112 §6.1).
    EncodingOnHttp10,
}

impl ParseError {
    pub fn status(self) -> Status {
        match self {
            ParseError::HeadTooLarge | ParseError::TooManyHeaders => Status::HeaderFieldsTooLarge,
            ParseError::UriTooLong => Status::UriTooLong,
            ParseError::VersionNotSupported => Status::VersionNotSupported,
            ParseError::UnknownCoding => Status::NotImplemented,
            ParseError::Malformed
            | ParseError::MissingHost
            | ParseError::BadHost
            | ParseError::LengthAndEncoding
            | ParseError::BadContentLength
            | ParseError::ChunkedNotLast
            | ParseError::EncodingOnHttp10 => Status::BadRequest,
        }
    }

    /// A short human-readable reason, used as the error response body.
    pub fn message(self) -> &'static str {
        match self {
            ParseError::HeadTooLarge => "request head too large",
            ParseError::TooManyHeaders => "too many header fields",
            ParseError::UriTooLong => "request target too long",
            ParseError::VersionNotSupported => "HTTP version not supported",
            ParseError::Malformed => "malformed request",
            ParseError::MissingHost => "missing Host header",
            ParseError::BadHost => "invalid Host header",
            ParseError::LengthAndEncoding => "both Content-Length and Transfer-Encoding",
            ParseError::BadContentLength => "invalid Content-Length",
            ParseError::ChunkedNotLast => "Transfer-Encoding must end with chunked",
            ParseError::UnknownCoding => "transfer coding not implemented",
            ParseError::EncodingOnHttp10 => "Transfer-Encoding in an HTTP/1.0 request",
        }
    }
}

/// Parse one request head from the start of `buf`.
///
/// `Ok(None)` means the head is incomplete (and still within limits): read more.
pub fn parse<'b>(buf: &'b [u8], limits: &Limits) -> Result<Option<Request<'b>>, ParseError> {
    // Only the first `max_head` bytes can hold an acceptable head, so httparse
    // never looks further: a peer streaming garbage costs at most one limit's
    // worth of scanning per call, and pipelined bytes after the head are
    // not our business here.
    let window = &buf[..buf.len().min(limits.max_head)];
    if let Some(line) = fast::request_line(window) {
        // Built where it is returned from: a `Request` is a few hundred
        // bytes, and each move of it a `memcpy`.
        let mut res = Ok(Some(Request::new(
            line.method,
            line.name,
            line.target,
            line.version,
            0,
        )));
        if let Ok(Some(req)) = &mut res {
            if common_fields(window, line.len, limits, req).is_some() {
                return res;
            }
        }
    }
    parse_httparse(buf, window, limits)
}

/// [`parse`] through httparse: every head, and the only judge of errors.
fn parse_httparse<'b>(
    buf: &'b [u8],
    window: &'b [u8],
    limits: &Limits,
) -> Result<Option<Request<'b>>, ParseError> {
    // Uninitialised slots: initialising 100 headers on every call would cost
    // more than parsing a typical 5-field head.
    let mut headers = [const { MaybeUninit::<httparse::Header<'b>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(window, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            // A request line this long can only be an oversized target; say
            // 414 rather than 431 so the client learns which part to shorten.
            if buf.len() > limits.max_uri.saturating_add(REQUEST_LINE_SLACK)
                && !request_line_complete(window)
            {
                return Err(ParseError::UriTooLong);
            }
            if buf.len() > limits.max_head {
                return Err(ParseError::HeadTooLarge);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooManyHeaders),
        Err(httparse::Error::Version) => {
            // httparse only knows 1.0 and 1.1; a well-formed other version
            // deserves 505, anything else is just a broken request line.
            return Err(if version_token_is_wellformed(window) {
                ParseError::VersionNotSupported
            } else {
                ParseError::Malformed
            });
        }
        // Bare CR, obs-fold, bad tokens and stray whitespace all land here:
        // RFC 9112 §2.2 and §5.2 let a server reject them with 400, and
        // accepting them is how request smuggling starts.
        Err(_) => return Err(ParseError::Malformed),
    };

    let target = req.path.ok_or(ParseError::Malformed)?.as_bytes();
    if target.len() > limits.max_uri {
        return Err(ParseError::UriTooLong);
    }
    let method_name = req.method.ok_or(ParseError::Malformed)?;
    let method = Method::of(method_name);
    let version = match req.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(ParseError::VersionNotSupported),
    };

    let mut out = Request::new(method, method_name, target, version, head_len);
    let mut framing = Framing::default();
    for h in req.headers.iter() {
        field(&mut out, &mut framing, h.name.as_bytes(), h.value)?;
    }
    finish(&mut out, framing)?;
    Ok(Some(out))
}

/// The fields of a common head (see [`fast`]) after its request line
/// (`pos`), into `out`: `Some` only when the head is complete and valid,
/// and then exactly what the httparse path gives for it. Anything else,
/// errors included, is `None` and goes the httparse way, which is the one
/// that decides what an error is.
fn common_fields<'b>(
    window: &'b [u8],
    mut pos: usize,
    limits: &Limits,
    out: &mut Request<'b>,
) -> Option<()> {
    if out.target.len() > limits.max_uri {
        return None;
    }
    let mut framing = Framing::default();
    let mut fields = 0;
    loop {
        match fast::field_line(window, pos)? {
            fast::Line::End(end) => {
                out.head_len = end;
                break;
            }
            fast::Line::Field { name, value, next } => {
                fields += 1;
                if fields > MAX_HEADERS {
                    return None;
                }
                field(out, &mut framing, name, value).ok()?;
                pos = next;
            }
        }
    }
    finish(out, framing).ok()
}

/// [`parse`]'s common path alone, for the tests that compare it with httparse.
#[cfg(test)]
fn parse_common<'b>(window: &'b [u8], limits: &Limits) -> Option<Request<'b>> {
    let line = fast::request_line(window)?;
    let mut out = Request::new(line.method, line.name, line.target, line.version, 0);
    common_fields(window, line.len, limits, &mut out)?;
    Some(out)
}

/// What the framing rules need from the fields seen so far.
#[derive(Default)]
struct Framing {
    content_length: Option<u64>,
    /// Transfer-Encoding was sent (an empty value included).
    transfer_encoding: bool,
    /// The codings listed so far, across every Transfer-Encoding field.
    codings: Codings,
}

/// The transfer codings of a request, in order (RFC 9112 §6.1): what the
/// framing needs is whether `chunked` came last and only once, and whether
/// any other coding came at all.
#[derive(Default, Clone, Copy)]
struct Codings {
    /// `chunked` appeared; `chunked_last`: and nothing after it.
    chunked: bool,
    chunked_last: bool,
    /// `chunked` twice, or another coding after it.
    misplaced: bool,
    /// A coding other than `chunked`.
    unknown: bool,
}

impl Codings {
    /// Take one Transfer-Encoding field value (a list; several fields
    /// make one list, RFC 9110 §5.3).
    fn add(&mut self, value: &[u8]) {
        for item in value.split(|&b| b == b',') {
            // A coding's parameters are not needed to frame the body:
            // `chunked` has none, and any other coding is refused.
            let name = trim(item.split(|&b| b == b';').next().unwrap_or_default());
            if trim(item).is_empty() {
                // RFC 9110 §5.6.1.2: empty list elements are skipped.
                continue;
            }
            if self.chunked {
                self.misplaced = true;
            }
            if name.eq_ignore_ascii_case(b"chunked") {
                self.chunked = true;
                self.chunked_last = true;
            } else {
                self.unknown = true;
                self.chunked_last = false;
            }
        }
    }

    /// The framing these codings give a request body.
    fn check(self) -> Result<(), ParseError> {
        if self.misplaced {
            Err(ParseError::ChunkedNotLast)
        } else if self.unknown {
            // Not understood, whether or not `chunked` frames it (nginx
            // answers 501 to both); either way the connection closes.
            Err(ParseError::UnknownCoding)
        } else if !self.chunked_last {
            // Only empty elements: nothing says where the body ends.
            Err(ParseError::ChunkedNotLast)
        } else {
            Ok(())
        }
    }
}

impl<'b> Request<'b> {
    /// A request with no fields yet (HTTP/2 fills them from its header list).
    pub fn new(
        method: Method,
        method_name: &'b str,
        target: &'b [u8],
        version: Version,
        head_len: usize,
    ) -> Request<'b> {
        Request {
            method,
            method_name,
            target,
            version,
            head_len,
            host: None,
            conn_close: false,
            conn_keep_alive: false,
            content_length: 0,
            chunked: false,
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            if_range: None,
            range: None,
            accept_encoding: None,
            referer: None,
            user_agent: None,
        }
    }
}

/// Take one header field into `out`, in the order they came.
#[inline]
fn field<'b>(
    out: &mut Request<'b>,
    framing: &mut Framing,
    name: &[u8],
    value: &'b [u8],
) -> Result<(), ParseError> {
    let value = trim(value);
    match Field::from_name(name) {
        Field::Host => {
            // RFC 9112 §3.2: more than one Host is a 400; two hosts
            // would let a proxy and this server disagree on the vhost.
            if out.host.is_some() {
                return Err(ParseError::Malformed);
            }
            // §3.2 again: a server MUST answer 400 to an invalid Host.
            if !valid_host(value) {
                return Err(ParseError::BadHost);
            }
            out.host = Some(value);
        }
        Field::Connection => {
            for token in value.split(|&b| b == b',') {
                let token = trim(token);
                if token.eq_ignore_ascii_case(b"close") {
                    out.conn_close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    out.conn_keep_alive = true;
                }
            }
        }
        Field::ContentLength => {
            // RFC 9110 §8.6: repeated or listed values are acceptable only
            // when they all agree; anything else makes the framing
            // ambiguous.
            for item in value.split(|&b| b == b',') {
                let n = parse_decimal(trim(item)).ok_or(ParseError::BadContentLength)?;
                match framing.content_length {
                    Some(prev) if prev != n => return Err(ParseError::BadContentLength),
                    _ => framing.content_length = Some(n),
                }
            }
        }
        Field::TransferEncoding => {
            framing.transfer_encoding = true;
            framing.codings.add(value);
        }
        Field::IfMatch => first(&mut out.if_match, value),
        Field::IfNoneMatch => first(&mut out.if_none_match, value),
        Field::IfModifiedSince => first(&mut out.if_modified_since, value),
        Field::IfUnmodifiedSince => first(&mut out.if_unmodified_since, value),
        Field::IfRange => first(&mut out.if_range, value),
        Field::Range => first(&mut out.range, value),
        Field::AcceptEncoding => first(&mut out.accept_encoding, value),
        Field::Referer => first(&mut out.referer, value),
        Field::UserAgent => first(&mut out.user_agent, value),
        Field::Other => {}
    }
    Ok(())
}

/// The rules that need every field: framing and Host.
#[inline]
fn finish(out: &mut Request<'_>, framing: Framing) -> Result<(), ParseError> {
    // RFC 9112 §6.1: a message with both is a smuggling attempt until proven
    // otherwise, and Transfer-Encoding from an HTTP/1.0 client is faulty
    // framing. A chunked body is read and discarded like a Content-Length
    // one (`conn::answer`).
    if framing.transfer_encoding {
        if framing.content_length.is_some() {
            return Err(ParseError::LengthAndEncoding);
        }
        if out.version == Version::Http10 {
            return Err(ParseError::EncodingOnHttp10);
        }
        framing.codings.check()?;
        out.chunked = true;
    }
    out.content_length = framing.content_length.unwrap_or(0);

    if out.version == Version::Http11 && out.host.is_none() {
        return Err(ParseError::MissingHost);
    }
    Ok(())
}

/// RFC 9112 §3.2 / RFC 3986 §3.2.2: `uri-host [ ":" port ]`, where
/// `uri-host` is an IP-literal (`[` IPv6 or IPvFuture `]`), an IPv4
/// address or a reg-name (unreserved, pct-encoded, sub-delims: an IPv4
/// address is one too). An empty value is valid (a target without
/// authority). Cheap: one pass over a few bytes.
pub fn valid_host(v: &[u8]) -> bool {
    if v.first() == Some(&b'[') {
        let Some(close) = v.iter().position(|&b| b == b']') else {
            return false;
        };
        let inner = &v[1..close];
        if inner.is_empty()
            || !inner
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.' || b == b'v' || b == b'V')
        {
            return false;
        }
        return match &v[close + 1..] {
            [] => true,
            [b':', port @ ..] => port.iter().all(u8::is_ascii_digit),
            _ => false,
        };
    }
    // Almost every Host is plain reg-name bytes, then perhaps `:` and a
    // port: one table lookup per byte. Anything else (an escape, a bad
    // byte) takes the full pass below.
    let plain = v
        .iter()
        .position(|&b| !REG_NAME[b as usize])
        .unwrap_or(v.len());
    match v.get(plain) {
        None => return true,
        Some(b':') if v[plain + 1..].iter().all(u8::is_ascii_digit) => return true,
        _ => {}
    }
    // One pass over a reg-name (or IPv4 address) with at most one `:`,
    // before the port: a colon inside the host is refused.
    let mut colon = None;
    let mut i = 0;
    while i < v.len() {
        let b = v[i];
        if REG_NAME[b as usize] {
        } else if b == b':' && colon.is_none() {
            colon = Some(i);
        } else if b == b'%'
            && i + 2 < v.len()
            && v[i + 1].is_ascii_hexdigit()
            && v[i + 2].is_ascii_hexdigit()
        {
            // `:` is not a hex digit, so an escape never spans the colon.
            i += 2;
        } else {
            return false;
        }
        i += 1;
    }
    match colon {
        Some(c) => v[c + 1..].iter().all(u8::is_ascii_digit),
        None => true,
    }
}

/// Bytes of a reg-name other than pct-encodings: unreserved and sub-delims
/// (RFC 3986 §3.2.2), as a table (the Host check runs on every request).
const REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = matches!(
            b as u8,
            b'a'..=b'z'
                | b'A'..=b'Z'
                | b'0'..=b'9'
                | b'-'
                | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        );
        b += 1;
    }
    t
};

/// The header fields this server acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Host,
    Connection,
    ContentLength,
    TransferEncoding,
    IfMatch,
    IfNoneMatch,
    IfModifiedSince,
    IfUnmodifiedSince,
    IfRange,
    Range,
    AcceptEncoding,
    Referer,
    UserAgent,
    Other,
}

impl Field {
    /// Dispatch on the length first: every request looks up each of its
    /// fields, and a linear scan over all names cost a case-insensitive
    /// compare per candidate (User-Agent was the last of thirteen).
    fn from_name(name: &[u8]) -> Field {
        let candidates: &[(&[u8], Field)] = match name.len() {
            4 => &[(b"host", Field::Host)],
            5 => &[(b"range", Field::Range)],
            7 => &[(b"referer", Field::Referer)],
            8 => &[(b"if-match", Field::IfMatch), (b"if-range", Field::IfRange)],
            10 => &[
                (b"connection", Field::Connection),
                (b"user-agent", Field::UserAgent),
            ],
            13 => &[(b"if-none-match", Field::IfNoneMatch)],
            14 => &[(b"content-length", Field::ContentLength)],
            15 => &[(b"accept-encoding", Field::AcceptEncoding)],
            17 => &[
                (b"transfer-encoding", Field::TransferEncoding),
                (b"if-modified-since", Field::IfModifiedSince),
            ],
            19 => &[(b"if-unmodified-since", Field::IfUnmodifiedSince)],
            _ => &[],
        };
        // httparse hands over tokens only (RFC 9110 §5.6.2), and the one
        // token byte that ORed with 0x20 gives a lowercase letter or `-`
        // is that letter's capital: a case-insensitive compare against
        // these names is one OR per byte.
        candidates
            .iter()
            .find(|(n, _)| eq_lowered(name, n))
            .map_or(Field::Other, |&(_, f)| f)
    }
}

/// `name` ORed with 0x20 byte by byte equals `lower` (of the same length,
/// at least 4), compared a word at a time: the OR carries nothing from one
/// byte to the next, and the last word may overlap the one before it.
#[inline]
fn eq_lowered(name: &[u8], lower: &[u8]) -> bool {
    fn word(s: &[u8], at: usize) -> u64 {
        let mut w = [0; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    }
    fn half(s: &[u8], at: usize) -> u32 {
        let mut w = [0; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_le_bytes(w)
    }
    let n = name.len();
    if n != lower.len() || n < 4 {
        return false;
    }
    if n < 8 {
        return half(name, 0) | 0x2020_2020 == half(lower, 0)
            && half(name, n - 4) | 0x2020_2020 == half(lower, n - 4);
    }
    let mut at = 0;
    while at + 8 < n {
        if word(name, at) | 0x2020_2020_2020_2020 != word(lower, at) {
            return false;
        }
        at += 8;
    }
    word(name, n - 8) | 0x2020_2020_2020_2020 == word(lower, n - 8)
}

/// Keep the first occurrence: later duplicates of these single-valued
/// fields are either redundant or an attempt to confuse an intermediary.
fn first<'b>(slot: &mut Option<&'b [u8]>, value: &'b [u8]) {
    if slot.is_none() {
        *slot = Some(value);
    }
}

/// Strip optional whitespace (RFC 9110 §5.6.3: SP and HTAB only).
pub(crate) fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether a `\n` ends the request line, ignoring the blank lines httparse
/// skips before it.
fn request_line_complete(buf: &[u8]) -> bool {
    buf.iter()
        .skip_while(|&&b| b == b'\r' || b == b'\n')
        .any(|&b| b == b'\n')
}

/// `1*DIGIT` as a u64; `None` when empty, non-digit or overflowing.
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Whether the request line ends in `HTTP/<digit>.<digit>` (or `HTTP/<digit>`),
/// i.e. a version we could name but do not speak. While the line is still
/// arriving, a prefix of that shape counts too, since httparse reports a
/// bad major version before the rest of it has been read.
fn version_token_is_wellformed(buf: &[u8]) -> bool {
    // httparse skips blank lines before the request line; so must we.
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let (line, complete) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], true),
        None => (rest, false),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // `method SP target SP version` has exactly two spaces: a raw space in
    // the target makes the version httparse tripped on the target's tail,
    // a malformed line (RFC 9112 §3.2, 400), not a version to refuse.
    if line.iter().filter(|&&b| b == b' ').count() != 2 {
        return false;
    }
    let token = match line.iter().rposition(|&b| b == b' ') {
        Some(i) => &line[i + 1..],
        None => return false,
    };
    match token {
        [b'H', b'T', b'T', b'P', b'/', major, minor @ ..] if major.is_ascii_digit() => {
            match minor {
                [] => true,
                [b'.', d] => d.is_ascii_digit(),
                [b'.'] => !complete,
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn host_values() {
        for ok in [
            &b""[..],
            b"example.com",
            b"example.com:8080",
            b"127.0.0.1",
            b"127.0.0.1:80",
            b"[::1]",
            b"[::1]:443",
            b"[v1.fe80::a]",
            b"xn--bcher-kva.example",
            b"a%2Db",
            b"a:",
        ] {
            assert!(valid_host(ok), "{:?}", String::from_utf8_lossy(ok));
        }
        for bad in [
            &b"a b"[..],
            b"a/b",
            b"u@a",
            b"a:8x",
            b"[::1",
            b"[]",
            b"[::1]x",
            b"a%2",
            b"a%zz",
            b"a\"b",
            b"[::g]",
        ] {
            assert!(!valid_host(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    use super::*;

    /// `valid_host` as it was before the one-pass table version.
    fn valid_host_reference(v: &[u8]) -> bool {
        let (host, port) = if v.first() == Some(&b'[') {
            let Some(close) = v.iter().position(|&b| b == b']') else {
                return false;
            };
            let inner = &v[1..close];
            if inner.is_empty()
                || !inner.iter().all(|&b| {
                    b.is_ascii_hexdigit() || b == b':' || b == b'.' || b == b'v' || b == b'V'
                })
            {
                return false;
            }
            match &v[close + 1..] {
                [] => return true,
                [b':', port @ ..] => (&v[..0], port),
                _ => return false,
            }
        } else {
            match v.iter().rposition(|&b| b == b':') {
                Some(colon) => (&v[..colon], &v[colon + 1..]),
                None => (v, &v[..0]),
            }
        };
        if !port.iter().all(u8::is_ascii_digit) {
            return false;
        }
        let mut i = 0;
        while i < host.len() {
            match host[i] {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {}
                b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => {}
                b'%' if i + 2 < host.len()
                    && host[i + 1].is_ascii_hexdigit()
                    && host[i + 2].is_ascii_hexdigit() =>
                {
                    i += 2;
                }
                _ => return false,
            }
            i += 1;
        }
        true
    }

    /// Every string of up to 5 bytes over an alphabet of the interesting
    /// bytes, and every single byte value in context, agree with the
    /// reference.
    #[test]
    fn valid_host_matches_the_reference() {
        let alphabet = b"a1:%[]F.@ /";
        let mut buf = Vec::new();
        fn walk(buf: &mut Vec<u8>, alphabet: &[u8], depth: usize) {
            assert_eq!(
                valid_host(buf),
                valid_host_reference(buf),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
            if depth == 0 {
                return;
            }
            for &b in alphabet {
                buf.push(b);
                walk(buf, alphabet, depth - 1);
                buf.pop();
            }
        }
        walk(&mut buf, alphabet, 5);
        for b in 0..=255u8 {
            for v in [
                vec![b],
                vec![b'a', b, b'b'],
                vec![b'h', b, b':', b'8'],
                vec![b'h', b':', b'8', b],
                vec![b'%', b'4', b],
                // An escape late in the value: the pass must step over
                // exactly its two digits, not jump past the byte after.
                vec![b'a', b'a', b'a', b'%', b'4', b'1', b],
            ] {
                assert_eq!(valid_host(&v), valid_host_reference(&v), "{v:?}");
            }
        }
    }

    const LIMITS: Limits = Limits {
        max_head: 8192,
        max_uri: 4096,
    };

    fn ok(buf: &[u8]) -> Request<'_> {
        match parse(buf, &LIMITS) {
            Ok(Some(r)) => r,
            other => panic!(
                "{:?}: expected a request, got {other:?}",
                String::from_utf8_lossy(buf)
            ),
        }
    }

    #[test]
    fn errors() {
        let cases: &[(&str, &[u8], ParseError)] = &[
            ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", ParseError::Malformed),
            ("bare CR in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", ParseError::Malformed),
            ("bare CR after request line", b"GET / HTTP/1.1\rHost: a\r\n\r\n", ParseError::Malformed),
            ("space before colon", b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", ParseError::Malformed),
            ("double space in request line", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("no target", b"GET HTTP/1.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("HTTP/0.9 style", b"GET /\r\n\r\n", ParseError::Malformed),
            ("lowercase version", b"GET / http/1.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("garbage version", b"GET / FOO/1.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("two-digit major", b"GET / HTTP/10.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", ParseError::VersionNotSupported),
            ("HTTP/1.2", b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", ParseError::VersionNotSupported),
            ("HTTP/3", b"GET / HTTP/3\r\nHost: a\r\n\r\n", ParseError::VersionNotSupported),
            ("HTTP/2 still arriving", b"GET / HTTP/2", ParseError::VersionNotSupported),
            ("HTTP/2. still arriving", b"GET / HTTP/2.", ParseError::VersionNotSupported),
            ("HTTP/2.0 after blank lines", b"\r\n\nGET / HTTP/2.0\r\nHost: a\r\n\r\n", ParseError::VersionNotSupported),
            ("letter major", b"GET / HTTP/x.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("missing host", b"GET / HTTP/1.1\r\n\r\n", ParseError::MissingHost),
            ("host with a space", b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", ParseError::BadHost),
            ("host with a slash", b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", ParseError::BadHost),
            ("host with userinfo", b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", ParseError::BadHost),
            ("host port not digits", b"GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", ParseError::BadHost),
            ("host unclosed literal", b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", ParseError::BadHost),
            ("two hosts", b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", ParseError::Malformed),
            ("CL and TE", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", ParseError::LengthAndEncoding),
            ("TE and CL", b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", ParseError::LengthAndEncoding),
            ("TE on 1.0", b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n", ParseError::EncodingOnHttp10),
            ("TE gzip alone", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", ParseError::UnknownCoding),
            ("TE gzip then chunked", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ParseError::UnknownCoding),
            ("TE chunked then gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ParseError::ChunkedNotLast),
            ("TE chunked then gzip field", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", ParseError::ChunkedNotLast),
            ("TE chunked twice", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", ParseError::ChunkedNotLast),
            ("TE empty", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", ParseError::ChunkedNotLast),
            ("TE commas only", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , ,\r\n\r\n", ParseError::ChunkedNotLast),
            ("TE chunked-ish", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", ParseError::UnknownCoding),
            ("raw space in target", b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("raw space in target, other version", b"GET /a b HTTP/2.0\r\nHost: a\r\n\r\n", ParseError::Malformed),
            ("raw spaces still arriving", b"GET /a b HTTP/1", ParseError::Malformed),
            ("CL differs", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", ParseError::BadContentLength),
            ("CL list differs", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n", ParseError::BadContentLength),
            ("CL negative", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", ParseError::BadContentLength),
            ("CL plus sign", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", ParseError::BadContentLength),
            ("CL hex", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", ParseError::BadContentLength),
            ("CL empty", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", ParseError::BadContentLength),
            ("CL empty list item", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,\r\n\r\n", ParseError::BadContentLength),
            ("CL overflow", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n", ParseError::BadContentLength),
            ("CL inner space", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", ParseError::BadContentLength),
        ];
        for (name, buf, want) in cases {
            assert_eq!(parse(buf, &LIMITS).err(), Some(*want), "{name}");
        }
    }

    #[test]
    fn limits() {
        let small = Limits {
            max_head: 64,
            max_uri: 16,
        };
        let long_target = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(16));
        let long_line = format!("GET /{}", "a".repeat(60));
        let long_fields = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}", "b".repeat(60));
        let long_complete = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(60));
        let exact = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(15));
        let exact_head = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
            "b".repeat(64 - 32)
        );
        // httparse skips blank lines before the request line; their `\n`
        // does not end it.
        let after_blank = format!("\r\n\n{long_line}");
        let line_at_bound = format!("GET /{}", "a".repeat(16 + REQUEST_LINE_SLACK - 5));
        let line_over = format!("{line_at_bound}a");
        let fields_at_bound = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}", "b".repeat(64 - 28));
        let fields_over = format!("{fields_at_bound}b");
        let cases: &[(&str, &[u8], Result<bool, ParseError>)] = &[
            (
                "target over max_uri",
                long_target.as_bytes(),
                Err(ParseError::UriTooLong),
            ),
            ("target of exactly max_uri", exact.as_bytes(), Ok(true)),
            (
                "unfinished long request line",
                long_line.as_bytes(),
                Err(ParseError::UriTooLong),
            ),
            ("unfinished short request line", b"GET /aaaa", Ok(false)),
            (
                "unfinished long request line after blank lines",
                after_blank.as_bytes(),
                Err(ParseError::UriTooLong),
            ),
            (
                "unfinished long fields",
                long_fields.as_bytes(),
                Err(ParseError::HeadTooLarge),
            ),
            (
                "complete but long",
                long_complete.as_bytes(),
                Err(ParseError::HeadTooLarge),
            ),
            ("head of exactly max_head", exact_head.as_bytes(), Ok(true)),
            // Unfinished at exactly the bounds: still worth waiting for.
            (
                "unfinished request line at max_uri + slack",
                line_at_bound.as_bytes(),
                Ok(false),
            ),
            (
                "unfinished request line one over",
                line_over.as_bytes(),
                Err(ParseError::UriTooLong),
            ),
            (
                "unfinished fields at max_head",
                fields_at_bound.as_bytes(),
                Ok(false),
            ),
            (
                "unfinished fields one over",
                fields_over.as_bytes(),
                Err(ParseError::HeadTooLarge),
            ),
        ];
        for (name, buf, want) in cases {
            let got = parse(buf, &small).map(|r| r.is_some());
            assert_eq!(&got, want, "{name}");
        }
        assert_eq!(exact_head.len(), 64);
        assert_eq!(line_at_bound.len(), 16 + REQUEST_LINE_SLACK);
        assert_eq!(fields_at_bound.len(), 64);
    }

    #[test]
    fn every_error_has_its_own_message() {
        let all = [
            ParseError::HeadTooLarge,
            ParseError::TooManyHeaders,
            ParseError::UriTooLong,
            ParseError::VersionNotSupported,
            ParseError::Malformed,
            ParseError::MissingHost,
            ParseError::BadHost,
            ParseError::LengthAndEncoding,
            ParseError::BadContentLength,
            ParseError::ChunkedNotLast,
            ParseError::UnknownCoding,
            ParseError::EncodingOnHttp10,
        ];
        let messages: std::collections::HashSet<&str> = all.iter().map(|e| e.message()).collect();
        assert_eq!(messages.len(), all.len(), "{messages:?}");
        assert!(ParseError::MissingHost.message().contains("Host"));
        assert!(ParseError::BadContentLength
            .message()
            .contains("Content-Length"));
    }

    #[test]
    fn too_many_headers() {
        let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..MAX_HEADERS - 1 {
            buf.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        buf.extend_from_slice(b"\r\n");
        assert!(ok(&buf).host.is_some(), "exactly MAX_HEADERS is fine");
        let at = buf.len() - 2;
        buf.splice(at..at, b"X-last: v\r\n".iter().copied());
        assert_eq!(parse(&buf, &LIMITS).err(), Some(ParseError::TooManyHeaders));
    }

    #[test]
    fn partial() {
        let full = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nRange: bytes=0-1\r\n\r\n";
        for cut in 0..full.len() {
            assert_eq!(
                parse(&full[..cut], &LIMITS).map(|r| r.is_some()),
                Ok(false),
                "cut at {cut}"
            );
        }
        assert_eq!(ok(full).head_len, full.len());
    }

    #[test]
    fn request_line() {
        let cases: &[(&[u8], Method, &[u8], Version)] = &[
            (
                b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::Get,
                b"/",
                Version::Http11,
            ),
            (
                b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::Head,
                b"/x",
                Version::Http11,
            ),
            (
                b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::Options,
                b"*",
                Version::Http11,
            ),
            (
                b"get / HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::Unknown,
                b"/",
                Version::Http11,
            ),
            (
                b"POST /p?q=1 HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::NotAllowed,
                b"/p?q=1",
                Version::Http11,
            ),
            (
                b"GET http://h/p HTTP/1.0\r\n\r\n",
                Method::Get,
                b"http://h/p",
                Version::Http10,
            ),
            (b"GET / HTTP/1.0\n\n", Method::Get, b"/", Version::Http10),
            (
                b"FOO / HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::Unknown,
                b"/",
                Version::Http11,
            ),
            (
                b"PATCH / HTTP/1.1\r\nHost: a\r\n\r\n",
                Method::NotAllowed,
                b"/",
                Version::Http11,
            ),
            (
                b"\r\nGET / HTTP/1.0\r\n\r\n",
                Method::Get,
                b"/",
                Version::Http10,
            ),
        ];
        for (buf, method, target, version) in cases {
            let r = ok(buf);
            assert_eq!(
                (r.method, r.target, r.version),
                (*method, *target, *version)
            );
            assert_eq!(r.head_len, buf.len());
        }
    }

    #[test]
    fn head_len_excludes_pipelined_bytes() {
        let buf = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\n";
        assert_eq!(ok(buf).head_len, 28);
        // The next request starting past max_head must not matter.
        let tight = Limits {
            max_head: 28,
            max_uri: 16,
        };
        assert_eq!(
            parse(buf, &tight).map(|r| r.map(|r| r.head_len)),
            Ok(Some(28))
        );
    }

    #[test]
    fn fields() {
        let r = ok(b"GET / HTTP/1.1\r\n\
            HOST:  example.com \r\n\
            If-Match: \"a\"\r\n\
            if-none-match: W/\"b\", \"c\"\r\n\
            If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
            If-Unmodified-Since: Sun, 06 Nov 1994 08:49:38 GMT\r\n\
            If-Range: \"d\"\r\n\
            RANGE: bytes=0-9\r\n\
            Range: bytes=10-19\r\n\
            Accept-Encoding: gzip, br\r\n\
            Accept-Encoding: zstd\r\n\
            Content-Length: 0\r\n\
            \r\n");
        // (name, what was parsed, what it should be)
        type Case<'a> = (&'a str, Option<&'a [u8]>, &'a [u8]);
        let cases: &[Case<'_>] = &[
            ("host", r.host, b"example.com"),
            ("if-match", r.if_match, b"\"a\""),
            ("if-none-match", r.if_none_match, b"W/\"b\", \"c\""),
            ("ims", r.if_modified_since, b"Sun, 06 Nov 1994 08:49:37 GMT"),
            (
                "ius",
                r.if_unmodified_since,
                b"Sun, 06 Nov 1994 08:49:38 GMT",
            ),
            ("if-range", r.if_range, b"\"d\""),
            ("range keeps first", r.range, b"bytes=0-9"),
            (
                "accept-encoding keeps first",
                r.accept_encoding,
                b"gzip, br",
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(*got, Some(*want), "{name}");
        }
        assert_eq!(r.content_length, 0);

        let bare = ok(b"GET / HTTP/1.0\r\n\r\n");
        assert!(bare.host.is_none() && bare.range.is_none() && bare.accept_encoding.is_none());
        assert!(!bare.conn_close && !bare.conn_keep_alive);
    }

    #[test]
    fn every_field_name_is_recognised_in_any_case_and_nothing_else() {
        let names = [
            ("host", Field::Host),
            ("connection", Field::Connection),
            ("content-length", Field::ContentLength),
            ("transfer-encoding", Field::TransferEncoding),
            ("if-match", Field::IfMatch),
            ("if-none-match", Field::IfNoneMatch),
            ("if-modified-since", Field::IfModifiedSince),
            ("if-unmodified-since", Field::IfUnmodifiedSince),
            ("if-range", Field::IfRange),
            ("range", Field::Range),
            ("accept-encoding", Field::AcceptEncoding),
            ("referer", Field::Referer),
            ("user-agent", Field::UserAgent),
        ];
        for (name, field) in names {
            assert_eq!(Field::from_name(name.as_bytes()), field, "{name}");
            let upper = name.to_uppercase();
            assert_eq!(Field::from_name(upper.as_bytes()), field, "{name}");
            // A name of the same length that differs in one byte is not it.
            let mut other = name.as_bytes().to_vec();
            other[0] = b'x';
            let other = String::from_utf8(other).unwrap();
            assert_eq!(Field::from_name(other.as_bytes()), Field::Other, "{other}");
        }
        for other in ["", "hosts", "accept", "if-none-matc", "x-forwarded-for"] {
            assert_eq!(Field::from_name(other.as_bytes()), Field::Other, "{other}");
        }
    }

    #[test]
    fn connection_tokens() {
        let cases: &[(&[u8], bool, bool)] = &[
            (b"Connection: close\r\n", true, false),
            (b"Connection: Keep-Alive\r\n", false, true),
            (b"Connection: upgrade, CLOSE\r\n", true, false),
            (
                b"Connection: keep-alive\r\nConnection: close\r\n",
                true,
                true,
            ),
            (b"Connection: closed, keep-alive-ish\r\n", false, false),
            (b"Connection:\r\n", false, false),
        ];
        for (field, close, keep) in cases {
            let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
            buf.extend_from_slice(field);
            buf.extend_from_slice(b"\r\n");
            let r = ok(&buf);
            assert_eq!(
                (r.conn_close, r.conn_keep_alive),
                (*close, *keep),
                "{:?}",
                String::from_utf8_lossy(field)
            );
        }
    }

    #[test]
    fn chunked_framing() {
        let cases: &[(&[u8], bool)] = &[
            (b"", false),
            (b"Transfer-Encoding: chunked\r\n", true),
            (b"Transfer-Encoding: CHUNKED\r\n", true),
            (b"Transfer-Encoding: , chunked\r\n", true),
            (
                b"Transfer-Encoding:\r\nTransfer-Encoding: chunked\r\n",
                true,
            ),
            (b"Transfer-Encoding: chunked;x=1\r\n", true),
        ];
        for (field, want) in cases {
            let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
            buf.extend_from_slice(field);
            buf.extend_from_slice(b"\r\n");
            let r = ok(&buf);
            assert_eq!(
                (r.chunked, r.content_length),
                (*want, 0),
                "{:?}",
                String::from_utf8_lossy(field)
            );
        }
    }

    #[test]
    fn content_length() {
        let cases: &[(&[u8], u64)] = &[
            (b"", 0),
            (b"Content-Length: 0\r\n", 0),
            (b"Content-Length:  42 \r\n", 42),
            (b"Content-Length: 5\r\ncontent-length: 5\r\n", 5),
            (b"Content-Length: 5, 5\r\n", 5),
            (b"Content-Length: 007\r\n", 7),
            (b"Content-Length: 18446744073709551615\r\n", u64::MAX),
        ];
        for (field, want) in cases {
            let mut buf = b"POST / HTTP/1.1\r\nHost: a\r\n".to_vec();
            buf.extend_from_slice(field);
            buf.extend_from_slice(b"\r\n");
            assert_eq!(
                ok(&buf).content_length,
                *want,
                "{:?}",
                String::from_utf8_lossy(field)
            );
        }
    }

    #[test]
    fn status_mapping() {
        let cases = [
            (ParseError::HeadTooLarge, 431),
            (ParseError::TooManyHeaders, 431),
            (ParseError::UriTooLong, 414),
            (ParseError::VersionNotSupported, 505),
            (ParseError::Malformed, 400),
            (ParseError::MissingHost, 400),
            (ParseError::LengthAndEncoding, 400),
            (ParseError::BadContentLength, 400),
            (ParseError::ChunkedNotLast, 400),
            (ParseError::UnknownCoding, 501),
            (ParseError::EncodingOnHttp10, 400),
        ];
        for (e, code) in cases {
            assert_eq!(e.status().code(), code, "{e:?}");
            assert!(!e.message().is_empty() && !e.message().contains('\n'));
        }
    }
}
