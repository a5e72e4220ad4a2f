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
    /// The block with its Huffman strings decoded (see [`unhuffman`]).
    raw: Vec<u8>,
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

    /// Bytes held by the scratch buffers.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity().max(self.raw.capacity())
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
    let mut raw = std::mem::take(&mut fields.raw);
    let block = match unhuffman(block, &mut raw) {
        Ok(true) => &raw[..],
        Ok(false) => block,
        Err(e) => {
            fields.raw = raw;
            return Err(loona_hpack::decoder::DecoderError::StringDecodingError(
                loona_hpack::decoder::StringDecodingError::HuffmanDecoderError(e),
            ));
        }
    };
    let res = decoder.decode_with_cb(block, |name, value| {
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
    });
    fields.raw = raw;
    res
}

thread_local! {
    /// `loona-hpack` builds this table (a map of 257 codes) for every
    /// Huffman string it decodes, which was over a third of a small
    /// request's CPU (nghttp2 and browsers never index `:path`); built once
    /// per shard thread here instead.
    static HUFFMAN: std::cell::RefCell<loona_hpack::huffman::HuffmanDecoder> =
        std::cell::RefCell::new(loona_hpack::huffman::HuffmanDecoder::new());
}

/// RFC 7541 §5.1 integer at the start of `b` with an `n`-bit prefix:
/// (value, bytes used), or `None` when truncated or too large.
fn read_integer(b: &[u8], n: u8) -> Option<(usize, usize)> {
    let mask = (1usize << n) - 1;
    let mut value = usize::from(*b.first()?) & mask;
    if value < mask {
        return Some((value, 1));
    }
    let mut shift = 0;
    for (i, &byte) in b.iter().enumerate().skip(1) {
        if shift > 21 {
            return None;
        }
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Rewrite `block` into `out` with every Huffman-coded string literal
/// decoded (RFC 7541 §6 representations walked, everything else copied).
/// `Ok(false)`: nothing was Huffman-coded, or the block is malformed in a
/// way the decoder proper will report, so the original should be used.
fn unhuffman(
    block: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, loona_hpack::huffman::HuffmanDecoderError> {
    out.clear();
    let mut any = false;
    let mut i = 0;
    // A string literal at `i`: copied, or decoded and written raw.
    let mut string = |i: &mut usize, out: &mut Vec<u8>| -> Option<Result<(), _>> {
        let huff = block[*i] & 0x80 != 0;
        let (len, n) = read_integer(&block[*i..], 7)?;
        let data = block.get(*i + n..(*i + n).checked_add(len)?)?;
        if huff {
            let decoded = HUFFMAN.with(|h| h.borrow_mut().decode(data));
            match decoded {
                Ok(d) => {
                    integer(out, d.len(), 7, 0);
                    out.extend_from_slice(&d);
                    any = true;
                }
                Err(e) => return Some(Err(e)),
            }
        } else {
            out.extend_from_slice(&block[*i..*i + n + len]);
        }
        *i += n + len;
        Some(Ok(()))
    };
    while i < block.len() {
        let first = block[i];
        let prefix = match first {
            b if b & 0x80 != 0 => 7,
            b if b & 0xc0 == 0x40 => 6,
            b if b & 0xe0 == 0x20 => 5,
            _ => 4,
        };
        let Some((index, n)) = read_integer(&block[i..], prefix) else {
            return Ok(false);
        };
        out.extend_from_slice(&block[i..i + n]);
        i += n;
        if prefix == 7 || prefix == 5 {
            continue;
        }
        for _ in 0..if index == 0 { 2 } else { 1 } {
            if i >= block.len() {
                return Ok(false);
            }
            match string(&mut i, out) {
                None => return Ok(false),
                Some(Err(e)) => return Err(e),
                Some(Ok(())) => {}
            }
        }
    }
    Ok(any)
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

/// A field appended to a response block: a literal without indexing
/// whose name (lower-case) is not in the static table.
pub fn literal(out: &mut Vec<u8>, lname: &[u8], value: &[u8]) {
    out.push(0);
    string(out, lname);
    string(out, value);
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
    fn huffman_strings_decode_as_the_crate_decodes_them() {
        // RFC 7541 C.4.1 to C.4.3 and C.6.1: Huffman-coded requests and a
        // response, with dynamic table inserts, on one decoder each way.
        let blocks: [&[u8]; 4] = [
            &[
                0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
                0x90, 0xf4, 0xff,
            ],
            &[
                0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
            ],
            &[
                0x82, 0x87, 0x85, 0xbf, 0x40, 0x88, 0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f,
                0x89, 0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf,
            ],
            &[
                0x48, 0x82, 0x64, 0x02, 0x58, 0x85, 0xae, 0xc3, 0x77, 0x1a, 0x4b,
            ],
        ];
        let mut ours = loona_hpack::Decoder::new();
        let mut theirs = loona_hpack::Decoder::new();
        let mut fields = Fields::default();
        for block in blocks {
            decode(&mut ours, block, 1 << 20, &mut fields).unwrap();
            let want = theirs.decode(block).unwrap();
            let got: Vec<(Vec<u8>, Vec<u8>)> = fields
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect();
            assert_eq!(got, want);
            assert!(!got.is_empty());
        }
        // Bad Huffman (EOS inside) is still an error; truncation too.
        let mut d = loona_hpack::Decoder::new();
        assert!(decode(
            &mut d,
            &[0x82, 0x44, 0x84, 0xff, 0xff, 0xff, 0xff],
            1 << 20,
            &mut fields
        )
        .is_err());
        let mut d = loona_hpack::Decoder::new();
        assert!(decode(&mut d, &[0x82, 0x44, 0x8c, 0xf1], 1 << 20, &mut fields).is_err());
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
