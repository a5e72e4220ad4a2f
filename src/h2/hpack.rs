//! HPACK glue (RFC 7541). Request header blocks are decoded by
//! `loona-hpack` into one reusable byte buffer; response heads are encoded
//! here without a dynamic table: static-table names and literals without
//! indexing, so the encoder keeps no state and an idle connection holds no
//! encoder table (see ARCHITECTURE.md, "HTTP/2").

use std::ops::Range;

/// The decoder's dynamic table: SETTINGS_HEADER_TABLE_SIZE's default,
/// which we advertise unchanged (clients index their request headers into
/// it; a smaller value saves memory only once every client honours it).
pub const DECODER_TABLE: usize = 4096;

/// RFC 7541 §4.1: each field costs its name and value plus 32 bytes.
const FIELD_OVERHEAD: usize = 32;

/// A decoded header list: names and values packed in `bytes`.
#[derive(Default)]
pub struct Fields {
    pub bytes: Vec<u8>,
    pub spans: Vec<(Range<usize>, Range<usize>)>,
    /// RFC 7541 §4.1 size of the whole list, counted past the cap too.
    pub size: usize,
    /// The list exceeded the cap: fields past it were not kept.
    pub too_large: bool,
}

impl Fields {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
        self.size = 0;
        self.too_large = false;
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans
            .iter()
            .map(|(n, v)| (&self.bytes[n.clone()], &self.bytes[v.clone()]))
    }
}

/// Decode `block` into `fields` (cleared first). Fields beyond `max_list`
/// bytes (RFC 7541 sizes) are counted but not stored, so an HPACK bomb (a
/// small block naming a large table entry many times) costs a counter,
/// not memory. `Err` is a COMPRESSION_ERROR: the decoder's state is lost.
pub fn decode(
    decoder: &mut loona_hpack::Decoder<'static>,
    block: &[u8],
    max_list: usize,
    fields: &mut Fields,
) -> Result<(), loona_hpack::decoder::DecoderError> {
    fields.clear();
    decoder.decode_with_cb(block, |name, value| {
        fields.size += name.len() + value.len() + FIELD_OVERHEAD;
        if fields.size > max_list {
            fields.too_large = true;
            return;
        }
        let n0 = fields.bytes.len();
        fields.bytes.extend_from_slice(&name);
        let n1 = fields.bytes.len();
        fields.bytes.extend_from_slice(&value);
        fields.spans.push((n0..n1, n1..fields.bytes.len()));
    })
}

/// The static table's names (RFC 7541 Appendix A) for the response fields
/// we send, by lower-case name.
fn static_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"accept-ranges" => 18,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"date" => 33,
        b"etag" => 34,
        b"expires" => 36,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// RFC 7541 §5.1 integer with an `n`-bit prefix under `mask`.
fn integer(out: &mut Vec<u8>, mut value: usize, n: u8, mask: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(mask | value as u8);
        return;
    }
    out.push(mask | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A string literal without Huffman coding.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, s.len(), 7, 0);
    out.extend_from_slice(s);
}

/// Fields HTTP/2 forbids in a message (RFC 9113 §8.2.2).
pub fn connection_specific(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    )
}

/// Encode an HTTP/1 response head (`HTTP/1.1 200 OK\r\n…\r\n\r\n`, as
/// `conn::respond` renders it) as an HPACK block: `:status` from the status
/// line, every field lower-cased, connection-specific ones dropped.
/// Returns the status code, or `None` for a head that is not one.
pub fn encode_head(head: &[u8], out: &mut Vec<u8>) -> Option<u16> {
    let mut lines = head.split(|&b| b == b'\n');
    let status_line = lines.next()?;
    let code = status_line.get(9..12)?;
    let status: u16 = std::str::from_utf8(code).ok()?.parse().ok()?;
    match status {
        200 => out.push(0x80 | 8),
        204 => out.push(0x80 | 9),
        206 => out.push(0x80 | 10),
        304 => out.push(0x80 | 11),
        400 => out.push(0x80 | 12),
        404 => out.push(0x80 | 13),
        500 => out.push(0x80 | 14),
        _ => {
            integer(out, 8, 4, 0);
            string(out, code);
        }
    }
    let mut lower = [0u8; 64];
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        let value = trim(&line[colon + 1..]);
        let mut owned;
        let lname: &[u8] = if name.len() <= lower.len() {
            lower[..name.len()].copy_from_slice(name);
            lower[..name.len()].make_ascii_lowercase();
            &lower[..name.len()]
        } else {
            owned = name.to_vec();
            owned.make_ascii_lowercase();
            &owned
        };
        if connection_specific(lname) {
            continue;
        }
        match static_name(lname) {
            Some(index) => integer(out, index, 4, 0),
            None => {
                out.push(0);
                string(out, lname);
            }
        }
        string(out, value);
    }
    Some(status)
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t'))
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t'))
        .map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_encodes_to_what_a_decoder_reads_back() {
        let head = b"HTTP/1.1 200 OK\r\nServer: shardhttpd\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\
Content-Type: text/html\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\
Transfer-Encoding: chunked\r\nX-Custom-Header-That-Is-Rather-Long-Indeed-Longer-Than-Sixty-Four-Bytes: 1\r\n\r\n";
        let mut block = Vec::new();
        assert_eq!(encode_head(head, &mut block), Some(200));
        let got = loona_hpack::Decoder::new().decode(&block).unwrap();
        let got: Vec<(String, String)> = got
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        let want = [
            (":status", "200"),
            ("server", "shardhttpd"),
            ("date", "Thu, 01 Jan 2026 00:00:00 GMT"),
            ("content-type", "text/html"),
            ("content-length", "5"),
            (
                "x-custom-header-that-is-rather-long-indeed-longer-than-sixty-four-bytes",
                "1",
            ),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn statuses_outside_the_static_table_are_literals() {
        for (line, code) in [
            (&b"HTTP/1.1 416 Range Not Satisfiable\r\n\r\n"[..], 416),
            (b"HTTP/1.1 304 Not Modified\r\n\r\n", 304),
        ] {
            let mut block = Vec::new();
            assert_eq!(encode_head(line, &mut block), Some(code));
            let got = loona_hpack::Decoder::new().decode(&block).unwrap();
            assert_eq!(got, [(b":status".to_vec(), code.to_string().into_bytes())]);
        }
    }

    #[test]
    fn long_integers_use_continuation_bytes() {
        let mut out = Vec::new();
        integer(&mut out, 1337, 5, 0);
        assert_eq!(out, [31, 154, 10]); // RFC 7541 C.1.2
    }

    #[test]
    fn an_hpack_bomb_is_counted_not_stored() {
        // One 4000-byte entry inserted, then referenced 1000 times.
        let mut block = vec![0x40];
        string(&mut block, b"x-bomb");
        string(&mut block, &[b'a'; 4000]);
        block.extend(std::iter::repeat_n(0x80 | 62, 1000));
        let mut decoder = loona_hpack::Decoder::new();
        let mut fields = Fields::default();
        decode(&mut decoder, &block, 16 * 1024, &mut fields).unwrap();
        assert!(fields.too_large);
        assert!(fields.bytes.len() <= 16 * 1024);
        assert!(fields.size > 4_000_000);
    }
}
