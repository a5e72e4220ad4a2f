//! QPACK (RFC 9204) with the static table only. The server advertises a
//! dynamic table capacity of 0 (the default: no SETTINGS entry), so a
//! client may not insert into one nor refer to one: a field section with
//! a Required Insert Count above 0, or any dynamic or post-base reference,
//! is QPACK_DECOMPRESSION_FAILED. Responses are encoded with static
//! references and literals, never Huffman-coded: the encoder keeps no
//! state, needs no encoder or decoder stream, and can never block a
//! stream. What that costs on the wire is in ARCHITECTURE.md, "HTTP/3".

use std::hash::BuildHasher;
use std::io::Write;
use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use crate::proto::h2::hpack::{connection_specific, integer, read_integer, Fields};
use crate::proto::h2::huffman;
use crate::serve::Response;

/// RFC 9204 Appendix A.
pub const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// A field section that cannot be decoded: QPACK_DECOMPRESSION_FAILED.
#[derive(Debug, PartialEq, Eq)]
pub struct Failed;

/// Decode the field section `block` into `fields` (cleared first). Fields
/// past `max_list` bytes are counted, not kept (`Fields::too_large`).
pub fn decode(block: &[u8], max_list: usize, fields: &mut Fields) -> Result<(), Failed> {
    fields.clear();
    // Required Insert Count (8-bit prefix), then the sign bit and Delta
    // Base (7-bit prefix): with no dynamic table, the count must be 0 and
    // the base means nothing.
    let (ric, a) = read_integer(block, 8).ok_or(Failed)?;
    if ric != 0 {
        return Err(Failed);
    }
    let (_, b) = read_integer(block.get(a..).ok_or(Failed)?, 7).ok_or(Failed)?;
    let mut at = a + b;
    let mut name_buf = Vec::new();
    let mut value_buf = Vec::new();
    while at < block.len() {
        let rest = &block[at..];
        let first = rest[0];
        if first & 0x80 != 0 {
            // Indexed field line: static only (T bit).
            if first & 0x40 == 0 {
                return Err(Failed);
            }
            let (i, n) = read_integer(rest, 6).ok_or(Failed)?;
            let (name, value) = STATIC.get(i).ok_or(Failed)?;
            fields.push(name.as_bytes(), value.as_bytes(), max_list);
            at += n;
        } else if first & 0x40 != 0 {
            // Literal with a name reference: static only (T bit).
            if first & 0x10 == 0 {
                return Err(Failed);
            }
            let (i, n) = read_integer(rest, 4).ok_or(Failed)?;
            let (name, _) = STATIC.get(i).ok_or(Failed)?;
            let (value, m) = string(&rest[n..], 7, &mut value_buf)?;
            fields.push(name.as_bytes(), value, max_list);
            at += n + m;
        } else if first & 0x20 != 0 {
            // Literal with a literal name: the H bit is 0x08, the length a
            // 3-bit prefix.
            let (name, n) = string(rest, 3, &mut name_buf)?;
            let (value, m) = string(&rest[n..], 7, &mut value_buf)?;
            fields.push(name, value, max_list);
            at += n + m;
        } else {
            // Post-base references name the dynamic table.
            return Err(Failed);
        }
    }
    Ok(())
}

/// A string literal whose length has an `n`-bit prefix, the Huffman flag
/// the bit above it: its bytes (decoded into `buf` when Huffman-coded) and
/// the length of the literal.
fn string<'b>(b: &'b [u8], n: u8, buf: &'b mut Vec<u8>) -> Result<(&'b [u8], usize), Failed> {
    let first = *b.first().ok_or(Failed)?;
    let (len, used) = read_integer(b, n).ok_or(Failed)?;
    let raw = b
        .get(used..used.checked_add(len).ok_or(Failed)?)
        .ok_or(Failed)?;
    if first & (1 << n) == 0 {
        return Ok((raw, used + len));
    }
    buf.clear();
    huffman::decode(raw, buf).map_err(|_| Failed)?;
    Ok((&buf[..], used + len))
}

/// The static table's index of `:status` `code`, if it has one.
fn status_index(code: u16) -> Option<usize> {
    Some(match code {
        103 => 24,
        200 => 25,
        304 => 26,
        404 => 27,
        503 => 28,
        100 => 63,
        204 => 64,
        206 => 65,
        302 => 66,
        400 => 67,
        403 => 68,
        421 => 69,
        425 => 70,
        500 => 71,
        _ => return None,
    })
}

/// The static table's entries for `name` (lower-case): the index of an
/// exact match of `value`, else of the name.
fn lookup(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    let &(first, count) = static_names().get(name)?;
    let exact = (first..first + count).find(|&i| STATIC[i].1.as_bytes() == value);
    Some(exact.map_or((first, false), |i| (i, true)))
}

/// Each static name's first entry and the number of entries in its run:
/// a name's entries are adjacent, but for `:status`, whose codes 100 and
/// up come later and are found by `status_index`.
fn static_names() -> &'static FxHashMap<&'static [u8], (usize, usize)> {
    static NAMES: OnceLock<FxHashMap<&'static [u8], (usize, usize)>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names = FxHashMap::default();
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let run = names.entry(name.as_bytes()).or_insert((i, 0));
            if run.0 + run.1 == i {
                run.1 += 1;
            }
        }
        names
    })
}

/// A shard's response encoder: the field section scratch, and the encoded
/// lines of head pieces seen before. A file's head (its type, validators,
/// cache rules) and the Date of this second repeat from response to
/// response, and QPACK without a dynamic table encodes them the same
/// every time: a piece met again is a hash and a comparison, not a walk
/// of its lines. Direct-mapped, [`LINE_SLOTS`] slots; a piece longer than
/// [`LINE_MAX`] is encoded each time.
#[derive(Default)]
pub struct Encoder {
    section: Vec<u8>,
    name: Vec<u8>,
    slots: Vec<Option<Line>>,
}

/// A head piece and its encoded field lines.
type Line = (Box<[u8]>, Box<[u8]>);

const LINE_SLOTS: usize = 256;
const LINE_MAX: usize = 2048;

impl Encoder {
    /// `resp`'s HEADERS frame, appended to `out`, with room left for
    /// `then` bytes more (what the caller puts behind it).
    pub fn headers(&mut self, resp: &Response<'_>, out: &mut Vec<u8>, then: usize) {
        let mut section = std::mem::take(&mut self.section);
        section.clear();
        self.encode(resp, &mut section);
        out.reserve(section.len() + 2 * 8 + then);
        super::frame::put_head(out, super::frame::HEADERS, section.len());
        out.extend_from_slice(&section);
        self.section = section;
    }

    /// `lines`, encoded as the last time they were seen, or now.
    fn lines(&mut self, lines: &[u8], out: &mut Vec<u8>) {
        if lines.len() > LINE_MAX {
            return lines_into(lines, &mut self.name, out);
        }
        if self.slots.is_empty() {
            self.slots.resize_with(LINE_SLOTS, || None);
        }
        let slot = rustc_hash::FxBuildHasher.hash_one(lines) as usize % LINE_SLOTS;
        if let Some((key, encoded)) = &self.slots[slot] {
            if **key == *lines {
                out.extend_from_slice(encoded);
                return;
            }
        }
        let start = out.len();
        lines_into(lines, &mut self.name, out);
        self.slots[slot] = Some((lines.into(), out[start..].into()));
    }

    /// Encode `resp`'s head as a field section: `:status`, the head's
    /// lines (names lower-cased, connection-specific fields dropped), the
    /// typed fields.
    fn encode(&mut self, resp: &Response<'_>, out: &mut Vec<u8>) {
        encode_status(resp, out);
        for lines in resp.field_pieces() {
            self.lines(lines, out);
        }
        self.lines(resp.date.line(), out);
        encode_typed(resp, out);
    }
}

/// The section's prefix and `:status`.
fn encode_status(resp: &Response<'_>, out: &mut Vec<u8>) {
    // Required Insert Count 0, Delta Base 0.
    out.extend_from_slice(&[0, 0]);
    let code = resp.status.code();
    match status_index(code) {
        Some(i) => integer(out, i, 6, 0xc0),
        None => {
            integer(out, 24, 4, 0x50);
            let mut digits = [0u8; 3];
            let mut c = code.min(999);
            for d in digits.iter_mut().rev() {
                *d = b'0' + (c % 10) as u8;
                c /= 10;
            }
            literal(out, &digits, 7, 0);
        }
    }
}

/// `content-length` and the request id.
fn encode_typed(resp: &Response<'_>, out: &mut Vec<u8>) {
    if let Some(len) = resp.content_length {
        let mut digits = [0u8; 20];
        let mut w = &mut digits[..];
        let _ = write!(w, "{len}");
        let n = 20 - w.len();
        field(b"content-length", &digits[..n], out);
    }
    if let Some(id) = &resp.request_id {
        field(id.lower_name, id.id, out);
    }
}

/// `Name: value\r\n` lines, each a field.
fn lines_into(mut lines: &[u8], name: &mut Vec<u8>, out: &mut Vec<u8>) {
    while let Some(eol) = memchr::memchr(b'\n', lines) {
        let line = &lines[..eol];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        lines = &lines[eol + 1..];
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        name.clear();
        name.extend(line[..colon].iter().map(u8::to_ascii_lowercase));
        if connection_specific(name) {
            continue;
        }
        field(name, line[colon + 1..].trim_ascii(), out);
    }
}

/// One field line, `name` lower-case: a static index, a literal with a
/// static name reference, or a literal name and value.
pub fn field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match lookup(name, value) {
        Some((i, true)) => integer(out, i, 6, 0xc0),
        Some((i, false)) => {
            integer(out, i, 4, 0x50);
            literal(out, value, 7, 0);
        }
        None => {
            literal(out, name, 3, 0x20);
            literal(out, value, 7, 0);
        }
    }
}

/// A string literal, not Huffman-coded: its length with an `n`-bit prefix
/// under `mask`, then its bytes.
fn literal(out: &mut Vec<u8>, s: &[u8], n: u8, mask: u8) {
    integer(out, s.len(), n, mask);
    out.extend_from_slice(s);
}

/// The client's encoder stream: with a dynamic table capacity of 0, the
/// only instruction it may send is "Set Dynamic Table Capacity" to 0
/// (one byte, 0x20). The instructions in `buf`, or an error.
pub fn encoder_instructions(buf: &[u8]) -> Result<u32, Failed> {
    if buf.iter().any(|&b| b != 0x20) {
        return Err(Failed);
    }
    Ok(buf.len() as u32)
}

/// The client's decoder stream (RFC 9204 §4.4): with no dynamic table,
/// only Stream Cancellation may come; a Section Acknowledgment (we send
/// no section that needs one) or an Insert Count Increment (we insert
/// nothing) is QPACK_DECODER_STREAM_ERROR. The bytes of whole
/// instructions in `buf` and their count, or an error.
pub fn decoder_instructions(buf: &[u8]) -> Result<(usize, u32), Failed> {
    let (mut at, mut count) = (0, 0);
    while let Some(&first) = buf.get(at) {
        if first & 0xc0 != 0x40 {
            return Err(Failed);
        }
        match read_integer(&buf[at..], 6) {
            Some((_, n)) => {
                at += n;
                count += 1;
            }
            None if buf.len() - at > 10 => return Err(Failed),
            None => break,
        }
    }
    Ok((at, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::date::DateCache;
    use crate::http::Status;

    fn decoded(block: &[u8]) -> Result<Vec<(String, String)>, Failed> {
        let mut fields = Fields::default();
        decode(block, 1 << 16, &mut fields)?;
        Ok(fields
            .iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into(),
                    String::from_utf8_lossy(v).into(),
                )
            })
            .collect())
    }

    #[test]
    fn a_request_with_every_static_representation_decodes() {
        // RFC 9204 §B.1's section, then a literal name and a Huffman value
        // ("www.example.com", RFC 7541 C.4.1).
        let mut block = vec![0x00, 0x00, 0x51, 0x0b];
        block.extend_from_slice(b"/index.html");
        block.extend_from_slice(&[0xc0 | 17, 0xc0 | 23]);
        block.extend_from_slice(&[0x23]);
        block.extend_from_slice(b"foo");
        block.extend_from_slice(&[0x03]);
        block.extend_from_slice(b"bar");
        block.extend_from_slice(&[0x50, 0x80 | 12]);
        block.extend_from_slice(&[
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ]);
        let got = decoded(&block).unwrap();
        let want = [
            (":path", "/index.html"),
            (":method", "GET"),
            (":scheme", "https"),
            ("foo", "bar"),
            (":authority", "www.example.com"),
        ];
        assert_eq!(got, want.map(|(n, v)| (n.to_string(), v.to_string())));
    }

    #[test]
    fn dynamic_references_and_bad_input_fail() {
        for block in [
            &[0x01, 0x00][..],                                       // Required Insert Count 1
            &[0x00, 0x00, 0x80],                                     // indexed, dynamic
            &[0x00, 0x00, 0x40, 0x00],                               // name reference, dynamic
            &[0x00, 0x00, 0x10],                                     // indexed post-base
            &[0x00, 0x00, 0x00, 0x00],                               // literal post-base
            &[0x00, 0x00, 0xc0 | 63, 99 - 63], // static index 99: past the table
            &[0x00, 0x00, 0x51, 0x0b, b'/'],   // a value longer than the block
            &[0x00],                           // no Delta Base
            &[0x00, 0x00, 0x5f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // an index too large
        ] {
            assert_eq!(decoded(block), Err(Failed), "{block:x?}");
        }
        assert_eq!(decoded(&[0x00, 0x00]).unwrap(), []);
    }

    #[test]
    fn a_list_past_the_bound_is_counted_not_kept() {
        let mut block = vec![0x00, 0x00];
        for _ in 0..1000 {
            block.push(0xc0 | 31);
        }
        let mut fields = Fields::default();
        decode(&block, 4096, &mut fields).unwrap();
        assert!(fields.too_large);
        assert!(fields.bytes.len() <= 4096);
    }

    #[test]
    fn responses_encode_to_what_decodes_back() {
        let date = DateCache::new(std::time::UNIX_EPOCH);
        let mut resp = Response::new(Status::NotFound, &date);
        resp.lines(b"Server: shardhttpd\r\nContent-Type: text/plain\r\nConnection: close\r\nX-Odd: a: b\r\nVary: Accept-Encoding\r\n");
        resp.content_length = Some(10);
        let mut out = Vec::new();
        Encoder::default().encode(&resp, &mut out);
        let got = decoded(&out).unwrap();
        let want = [
            (":status", "404"),
            ("server", "shardhttpd"),
            ("content-type", "text/plain"),
            ("x-odd", "a: b"),
            ("vary", "accept-encoding"),
            ("date", "Thu, 01 Jan 1970 00:00:00 GMT"),
            ("content-length", "10"),
        ];
        // `Vary: Accept-Encoding` matches the static entry only
        // lower-cased; the value is sent as it is.
        let mut want = want.map(|(n, v)| (n.to_string(), v.to_string())).to_vec();
        want[4].1 = "Accept-Encoding".into();
        assert_eq!(got, want);
        for status in Status::ALL {
            let mut out = Vec::new();
            Encoder::default().encode(&Response::new(status, &date), &mut out);
            let code = status.code().to_string();
            assert_eq!(decoded(&out).unwrap()[0], (":status".into(), code));
        }
    }

    #[test]
    fn a_shard_encoder_gives_what_a_fresh_one_gives_whatever_it_saw_before() {
        let date = DateCache::new(std::time::UNIX_EPOCH);
        let heads: Vec<Vec<u8>> = (0..600)
            .map(|i| format!("Content-Type: text/plain\r\nETag: \"{i}\"\r\n").into_bytes())
            .collect();
        let mut shard = Encoder::default();
        // Each head twice, far apart: slots are shared and overwritten.
        for head in heads.iter().chain(&heads) {
            let mut resp = Response::new(Status::Ok, &date);
            resp.lines(head);
            let (mut cached, mut fresh) = (Vec::new(), Vec::new());
            shard.headers(&resp, &mut cached, 0);
            Encoder::default().headers(&resp, &mut fresh, 0);
            assert_eq!(cached, fresh);
        }
        // Past LINE_MAX: encoded each time, alike.
        let long = format!("X-Long: {}\r\n", "a".repeat(LINE_MAX));
        let mut resp = Response::new(Status::Ok, &date);
        resp.lines(long.as_bytes());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        shard.headers(&resp, &mut a, 0);
        shard.headers(&resp, &mut b, 0);
        assert_eq!(a, b);
    }

    #[test]
    fn only_capacity_zero_and_stream_cancellations_come_on_the_qpack_streams() {
        assert_eq!(encoder_instructions(&[0x20, 0x20]), Ok(2));
        assert_eq!(encoder_instructions(&[]), Ok(0));
        for bad in [&[0x21][..], &[0x3f, 0x01], &[0x80, 0x01]] {
            assert_eq!(encoder_instructions(bad), Err(Failed), "{bad:?}");
        }
        // Stream Cancellation of streams 4 and 1000 (a 6-bit prefix
        // integer), and half of another.
        let cancels = [0x44, 0x7f, 0xa9, 0x07, 0x7f];
        assert_eq!(decoder_instructions(&cancels), Ok((4, 2)));
        // A Section Acknowledgment or an Insert Count Increment refers
        // to a table we never had.
        for bad in [&[0x84][..], &[0x01], &[0x44, 0x81]] {
            assert_eq!(decoder_instructions(bad), Err(Failed), "{bad:?}");
        }
        // An integer that never ends.
        let mut endless = vec![0x7f];
        endless.extend([0xff; 11]);
        assert_eq!(decoder_instructions(&endless), Err(Failed));
        assert_eq!(
            decoder_instructions(&endless[..5]),
            Ok((0, 0)),
            "not yet whole"
        );
    }
}
