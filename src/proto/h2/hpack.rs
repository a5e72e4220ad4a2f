//! HPACK glue (RFC 7541). Request header blocks are decoded by
//! `loona-hpack` into one reusable byte buffer, after a pre-pass that
//! decodes their Huffman strings with our table-driven `h2::huffman`
//! (the crate's bit-at-a-time decoder was three quarters of a small h2
//! request's instructions when `:path` is not indexed); response heads are encoded by `h2::encode`, with a
//! dynamic table per connection (see ARCHITECTURE.md, "HTTP/2").

use std::ops::Range;

use super::huffman;

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

    /// Add a field, or only count it once the list is past `max_list`
    /// bytes (RFC 7541 sizes, as RFC 9204 counts them too).
    pub fn push(&mut self, name: &[u8], value: &[u8], max_list: usize) {
        self.size += name.len() + value.len() + FIELD_OVERHEAD;
        if self.size > max_list {
            self.too_large = true;
            return;
        }
        let n0 = self.bytes.len();
        self.bytes.extend_from_slice(name);
        let n1 = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.spans.push((n0..n1, n1..self.bytes.len()));
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
            use loona_hpack::huffman::HuffmanDecoderError as E;
            let e = match e {
                huffman::Error::Eos => E::EOSInString,
                huffman::Error::PaddingTooLong => E::PaddingTooLarge,
                huffman::Error::PaddingNotEos => E::InvalidPadding,
            };
            return Err(loona_hpack::decoder::DecoderError::StringDecodingError(
                loona_hpack::decoder::StringDecodingError::HuffmanDecoderError(e),
            ));
        }
    };
    let res = decoder.decode_with_cb(block, |name, value| fields.push(&name, &value, max_list));
    fields.raw = raw;
    res
}

/// RFC 7541 §5.1 integer at the start of `b` with an `n`-bit prefix:
/// (value, bytes used), or `None` when truncated or too large.
pub(in crate::proto) fn read_integer(b: &[u8], n: u8) -> Option<(usize, usize)> {
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
/// Bytes are copied only from the first Huffman string on: a block of
/// indexes (a repeated request) is walked, not copied.
fn unhuffman(block: &[u8], out: &mut Vec<u8>) -> Result<bool, huffman::Error> {
    out.clear();
    let mut any = false;
    let mut i = 0;
    // `block[..copied]` is in `out` (decoded where Huffman-coded).
    let mut copied = 0;
    // A string literal at `i`: skipped, or decoded and written raw.
    let mut string = |i: &mut usize, out: &mut Vec<u8>| -> Option<Result<(), _>> {
        let huff = block[*i] & 0x80 != 0;
        let (len, n) = read_integer(&block[*i..], 7)?;
        let data = block.get(*i + n..(*i + n).checked_add(len)?)?;
        if huff {
            out.extend_from_slice(&block[copied..*i]);
            // Decoded in place, then its length prefix (appended after
            // it) rotated to the front: no scratch buffer.
            let start = out.len();
            if let Err(e) = huffman::decode(data, out) {
                return Some(Err(e));
            }
            let len = out.len() - start;
            integer(out, len, 7, 0);
            let prefix = out.len() - start - len;
            out[start..].rotate_right(prefix);
            copied = *i + n + data.len();
            any = true;
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
    if any {
        out.extend_from_slice(&block[copied..]);
    }
    Ok(any)
}

/// RFC 7541 §5.1 integer with an `n`-bit prefix under `mask`.
pub(in crate::proto) fn integer(out: &mut Vec<u8>, mut value: usize, n: u8, mask: u8) {
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

/// Fields HTTP/2 forbids in a message (RFC 9113 §8.2.2).
pub fn connection_specific(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoded fields, owned, in order.
    type Owned = Vec<(Vec<u8>, Vec<u8>)>;

    /// `block` decoded on a fresh decoder: the scratch and its fields.
    fn decode_fresh(block: &[u8]) -> (Fields, Owned) {
        let mut fields = Fields::default();
        decode(
            &mut loona_hpack::Decoder::new(),
            block,
            1 << 20,
            &mut fields,
        )
        .unwrap();
        let got = fields
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        (fields, got)
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
    fn raw_and_huffman_strings_mixed_decode_as_the_crate_decodes_them() {
        // "www.example.com", Huffman-coded (RFC 7541 C.4.1).
        let www = [
            0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        let mut block = vec![0x82, 0x40, 3];
        block.extend_from_slice(b"foo"); // raw name, Huffman value
        block.extend_from_slice(&www);
        block.extend_from_slice(&[0x04, 2, b'/', b'x']); // raw value
        block.push(0x41); // :authority, Huffman value
        block.extend_from_slice(&www);
        block.extend_from_slice(&[0x87, 0x0f, 0x10, 1, b'z']); // index, raw tail
        let (_, got) = decode_fresh(&block);
        assert_eq!(got, loona_hpack::Decoder::new().decode(&block).unwrap());
        assert_eq!(got.len(), 6);
        assert_eq!(got[1], (b"foo".to_vec(), b"www.example.com".to_vec()));
        // Only indexes: nothing to rewrite.
        let mut raw = Vec::new();
        assert_eq!(unhuffman(&[0x82, 0x87, 0xbe], &mut raw), Ok(false));
        assert!(raw.is_empty());
    }

    #[test]
    fn a_huffman_string_that_decodes_past_126_bytes_gets_a_longer_length() {
        // 125 coded bytes, 200 decoded: the raw length needs two bytes,
        // so the prefix written after the string is rotated in front.
        let mut block = vec![0x40, 6];
        block.extend_from_slice(b"x-long");
        block.push(0x80 | 125);
        for _ in 0..25 {
            block.extend_from_slice(&[0x18, 0xc6, 0x31, 0x8c, 0x63]); // "aaaaaaaa"
        }
        block.extend_from_slice(&[0x82, 0xbe]); // :method GET, then the entry
        let (fields, got) = decode_fresh(&block);
        assert_eq!(got, loona_hpack::Decoder::new().decode(&block).unwrap());
        assert_eq!(got[0], (b"x-long".to_vec(), vec![b'a'; 200]));
        assert_eq!(got.len(), 3);
        // What the connection weighs when it trims idle buffers.
        assert!(fields.capacity() >= 200, "{}", fields.capacity());
        assert_eq!(Fields::default().capacity(), 0);
    }

    #[test]
    fn integers_are_read_as_rfc_7541_writes_them() {
        // C.1.1 to C.1.3, then the bits above the prefix (a representation's
        // flags) ignored, the prefix's own maximum, and what is cut short.
        // (bytes, prefix bits, what `read_integer` gives)
        type Case<'a> = (&'a [u8], u8, Option<(usize, usize)>);
        let cases: &[Case] = &[
            (&[0x0a], 5, Some((10, 1))),
            (&[31, 154, 10], 5, Some((1337, 3))),
            (&[42], 8, Some((42, 1))),
            (&[0xea], 5, Some((10, 1))),
            (&[30], 5, Some((30, 1))),
            (&[31, 0], 5, Some((31, 2))),
            (&[0x7f, 0x80, 0x01], 7, Some((255, 3))),
            (&[31, 154], 5, None),
            (&[], 5, None),
            (&[31, 0xff, 0xff, 0xff, 0xff, 0x7f], 5, None),
            // Four continuation bytes (28 bits) are read; a fifth is not.
            (&[31, 0xff, 0xff, 0xff, 0x0f], 5, Some((33_554_462, 5))),
        ];
        for &(b, n, want) in cases {
            assert_eq!(read_integer(b, n), want, "{b:?} with a {n}-bit prefix");
        }
        const VALUES: [usize; 15] = [
            0,
            1,
            14,
            15,
            16,
            30,
            31,
            62,
            63,
            126,
            127,
            128,
            255,
            1337,
            1 << 20,
        ];
        for n in [4, 5, 6, 7, 8] {
            for v in VALUES {
                let mut b = Vec::new();
                integer(&mut b, v, n, 0);
                assert_eq!(read_integer(&b, n), Some((v, b.len())), "{v} in {n} bits");
            }
        }
    }

    #[test]
    fn a_field_list_at_the_limit_is_kept_one_byte_over_is_not() {
        // A literal without indexing, new name: "ab: cd" is 2 + 2 + 32 bytes.
        let block = [0x00, 2, b'a', b'b', 2, b'c', b'd'];
        let mut fields = Fields::default();
        decode(&mut loona_hpack::Decoder::new(), &block, 36, &mut fields).unwrap();
        assert!(!fields.too_large);
        assert_eq!(fields.iter().count(), 1);
        decode(&mut loona_hpack::Decoder::new(), &block, 35, &mut fields).unwrap();
        assert!(fields.too_large);
        assert_eq!(fields.iter().count(), 0);
        assert_eq!(fields.size, 36);
        // "abc: de" is 3 + 2 + 32 bytes (the lengths add, whatever they are).
        let block = [0x00, 3, b'a', b'b', b'c', 2, b'd', b'e'];
        decode(&mut loona_hpack::Decoder::new(), &block, 37, &mut fields).unwrap();
        assert!(!fields.too_large);
        assert_eq!(fields.size, 37);
        decode(&mut loona_hpack::Decoder::new(), &block, 36, &mut fields).unwrap();
        assert!(fields.too_large);
    }

    /// Every representation is walked by its own prefix, and each
    /// Huffman-coded string comes out raw, its length prefix rewritten;
    /// the rest is copied as it was.
    #[test]
    fn unhuffman_writes_every_huffman_string_raw_and_copies_the_rest() {
        // "www.example.com", Huffman-coded (RFC 7541 C.4.1), and raw.
        let www = [
            0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        let mut raw_www = vec![15];
        raw_www.extend_from_slice(b"www.example.com");
        let mut block = Vec::new();
        let mut want = Vec::new();
        let mut both = |b: &[u8], w: &[u8]| {
            block.extend_from_slice(b);
            want.extend_from_slice(w);
        };
        // A table size update (5-bit prefix, 4096), then an index.
        both(&[0x3f, 0xe1, 0x1f, 0x82], &[0x3f, 0xe1, 0x1f, 0x82]);
        // Incremental indexing, indexed name (6-bit prefix): Huffman value.
        both(&[0x41], &[0x41]);
        both(&www, &raw_www);
        // The same naming content-type (31: past a 4-bit prefix).
        both(&[0x5f], &[0x5f]);
        both(&www, &raw_www);
        // Incremental indexing, new name: raw name, Huffman value.
        both(&[0x40, 3, b'f', b'o', b'o'], &[0x40, 3, b'f', b'o', b'o']);
        both(&www, &raw_www);
        // Without indexing, indexed name (4-bit prefix): Huffman value.
        both(&[0x04], &[0x04]);
        both(&www, &raw_www);
        // Never indexed, new name: Huffman name, raw value.
        both(&[0x10], &[0x10]);
        both(&www, &raw_www);
        both(&[2, b'/', b'x'], &[2, b'/', b'x']);
        // An index past the 7-bit prefix, last.
        both(&[0xff, 0x01], &[0xff, 0x01]);
        let mut out = Vec::new();
        assert_eq!(unhuffman(&block, &mut out), Ok(true));
        assert_eq!(out, want);
        // Nothing Huffman-coded: the block is used as it is.
        assert_eq!(unhuffman(&want, &mut out), Ok(false));
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
        integer(&mut block, 6, 7, 0);
        block.extend_from_slice(b"x-bomb");
        integer(&mut block, 4000, 7, 0);
        block.extend_from_slice(&[b'a'; 4000]);
        block.extend(std::iter::repeat_n(0x80 | 62, 1000));
        let mut decoder = loona_hpack::Decoder::new();
        let mut fields = Fields::default();
        decode(&mut decoder, &block, 16 * 1024, &mut fields).unwrap();
        assert!(fields.too_large);
        assert!(fields.bytes.len() <= 16 * 1024);
        assert!(fields.size > 4_000_000);
    }
}
