//! HTTP/3 on the wire, as much as a load generator needs (RFC 9114, RFC
//! 9204): a GET's HEADERS frame, encoded with the static table and plain
//! literals (the client advertises no dynamic table and opens no QPACK
//! streams), and a response stream read frame by frame: the status from
//! the first HEADERS, the DATA payload counted and skipped, never stored.

/// Frame types (RFC 9114 §7.2).
const DATA: u64 = 0x00;
const HEADERS: u64 = 0x01;

/// The largest response HEADERS frame kept to find the status in.
const MAX_HEADERS: u64 = 64 * 1024;

/// The client's control stream: its type, then an empty SETTINGS frame.
pub const CONTROL_PREAMBLE: [u8; 3] = [0x00, 0x04, 0x00];

/// Append `v` as a QUIC variable-length integer (RFC 9000 §16).
pub fn varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=0x3f => out.push(v as u8),
        0x40..=0x3fff => out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// A QUIC variable-length integer at the start of `b`: (value, length).
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(..len)?;
    let v = bytes[1..]
        .iter()
        .fold(u64::from(first & 0x3f), |v, &x| v << 8 | u64::from(x));
    Some((v, len))
}

/// Append `v` as a QPACK/HPACK integer with an `n`-bit prefix, the bits
/// above the prefix taken from `flags` (RFC 7541 §5.1).
fn prefixed(out: &mut Vec<u8>, flags: u8, n: u32, v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = v - max;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// A prefixed integer with an `n`-bit prefix at the start of `b`:
/// (value, length).
fn read_prefixed(b: &[u8], n: u32) -> Option<(usize, usize)> {
    let max = (1usize << n) - 1;
    let v = usize::from(*b.first()?) & max;
    if v < max {
        return Some((v, 1));
    }
    let mut v = v;
    for (i, &x) in b.iter().enumerate().skip(1).take(4) {
        v += usize::from(x & 0x7f) << (7 * (i - 1));
        if x & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The HEADERS frame of `GET https://authority/path`.
pub fn get_request(authority: &str, path: &str) -> Vec<u8> {
    // Required Insert Count 0, Base 0: no dynamic table.
    let mut block = vec![0, 0];
    // Indexed field lines from the static table (1 T=1 index):
    // `:method GET` is 17, `:scheme https` 23.
    block.extend([0xc0 | 17, 0xc0 | 23]);
    // Literals with a static name reference (01 N=0 T=1 index): `:authority`
    // is 0, `:path` 1; the values are not Huffman-coded (H=0).
    for (name, value) in [(0, authority), (1, path)] {
        prefixed(&mut block, 0x50, 4, name);
        prefixed(&mut block, 0x00, 7, value.len());
        block.extend_from_slice(value.as_bytes());
    }
    let mut frame = Vec::with_capacity(block.len() + 4);
    varint(&mut frame, HEADERS);
    varint(&mut frame, block.len() as u64);
    frame.extend(block);
    frame
}

/// The status of a static table entry, when it is a `:status` one.
fn static_status(index: usize) -> Option<u16> {
    Some(match index {
        24 => 103,
        25 => 200,
        26 => 304,
        27 => 404,
        28 => 503,
        63 => 100,
        64 => 204,
        65 => 206,
        66 => 302,
        67 => 400,
        68 => 403,
        69 => 421,
        70 => 425,
        71 => 500,
        _ => return None,
    })
}

/// Digits Huffman-coded (RFC 7541 Appendix B: `0`–`2` are five bits,
/// `3`–`9` six), as a status is; None for any other symbol.
fn huffman_digits(b: &[u8]) -> Option<String> {
    let bits = b.len() * 8;
    let bit = |i: usize| (b[i / 8] >> (7 - i % 8)) & 1;
    let take = |at: usize, n: usize| (at..at + n).fold(0u8, |v, i| v << 1 | bit(i));
    let mut out = String::new();
    let mut at = 0;
    while at + 5 <= bits {
        let five = take(at, 5);
        if five <= 0b00010 {
            out.push(char::from(b'0' + five));
            at += 5;
        } else if at + 6 <= bits && (0b011001..=0b011111).contains(&take(at, 6)) {
            out.push(char::from(b'0' + take(at, 6) - 0b010110));
            at += 6;
        } else {
            break;
        }
    }
    // What is left is the padding: at most seven bits, all ones.
    let padding = (at..bits).all(|i| bit(i) == 1) && bits - at < 8;
    padding.then_some(out)
}

/// A string literal with an `n`-bit length prefix (H, the bit above it,
/// says Huffman): (the status it spells, when it does, its length).
fn read_string(b: &[u8], n: u32) -> Option<(Option<u16>, usize)> {
    let huffman = b.first()? & (1 << n) != 0;
    let (len, at) = read_prefixed(b, n)?;
    let raw = b.get(at..at + len)?;
    let text = if huffman {
        huffman_digits(raw)
    } else {
        std::str::from_utf8(raw).ok().map(str::to_owned)
    };
    Some((text.and_then(|t| t.parse().ok()), at + len))
}

/// The `:status` of a response's field section (static table and
/// literals; a reference to a dynamic table, which this client never
/// allows, is an error).
pub fn status(section: &[u8]) -> Result<u16, &'static str> {
    const BAD: &str = "a field section that does not decode";
    let (_, a) = read_prefixed(section, 8).ok_or(BAD)?;
    let (_, b) = read_prefixed(section.get(a..).ok_or(BAD)?, 7).ok_or(BAD)?;
    let mut rest = section.get(a + b..).ok_or(BAD)?;
    while let Some(&first) = rest.first() {
        let used = if first & 0x80 != 0 {
            // Indexed field line.
            if first & 0x40 == 0 {
                return Err("a dynamic table reference");
            }
            let (index, used) = read_prefixed(rest, 6).ok_or(BAD)?;
            if let Some(s) = static_status(index) {
                return Ok(s);
            }
            used
        } else if first & 0x40 != 0 {
            // Literal with a name reference.
            if first & 0x10 == 0 {
                return Err("a dynamic table reference");
            }
            let (index, used) = read_prefixed(rest, 4).ok_or(BAD)?;
            let (value, len) = read_string(rest.get(used..).ok_or(BAD)?, 7).ok_or(BAD)?;
            if static_status(index).is_some() {
                return value.ok_or(BAD);
            }
            used + len
        } else if first & 0x20 != 0 {
            // Literal with a literal name (3-bit length prefix).
            let (name_len, used) = read_prefixed(rest, 3).ok_or(BAD)?;
            let name = rest.get(used..used + name_len).ok_or(BAD)?;
            let at = used + name_len;
            let (value, len) = read_string(rest.get(at..).ok_or(BAD)?, 7).ok_or(BAD)?;
            if first & 0x08 == 0 && name == b":status" {
                return value.ok_or(BAD);
            }
            at + len
        } else {
            return Err("a dynamic table reference");
        };
        rest = &rest[used..];
    }
    Err("no :status")
}

/// Where a response stream's reader stands.
#[derive(Debug)]
enum Stage {
    /// Reading a frame's type and length.
    Head,
    /// Inside a HEADERS frame: its payload kept until `left` is 0.
    Headers { left: u64 },
    /// Inside any other frame (DATA counted): `left` bytes skipped.
    Skip { left: u64, data: bool },
}

/// One response stream, read as it arrives.
#[derive(Debug)]
pub struct Response {
    stage: Stage,
    /// A frame head split across reads, or the HEADERS payload so far.
    pending: Vec<u8>,
    pub status: Option<u16>,
    /// DATA payload bytes.
    pub body: u64,
}

impl Default for Response {
    fn default() -> Response {
        Response {
            stage: Stage::Head,
            pending: Vec::new(),
            status: None,
            body: 0,
        }
    }
}

impl Response {
    /// The next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), &'static str> {
        while !data.is_empty() {
            match self.stage {
                Stage::Head => {
                    let take = data.len().min(16 - self.pending.len());
                    self.pending.extend_from_slice(&data[..take]);
                    let parsed = read_varint(&self.pending).and_then(|(kind, a)| {
                        let (len, b) = read_varint(&self.pending[a..])?;
                        Some((kind, len, a + b))
                    });
                    let Some((kind, len, used)) = parsed else {
                        data = &data[take..];
                        continue;
                    };
                    // Give back what was taken past the head.
                    let over = self.pending.len() - used;
                    data = &data[take - over..];
                    self.pending.clear();
                    self.stage = match kind {
                        HEADERS if self.status.is_none() => {
                            if len > MAX_HEADERS {
                                return Err("a response HEADERS frame over 64 KiB");
                            }
                            Stage::Headers { left: len }
                        }
                        _ => Stage::Skip {
                            left: len,
                            data: kind == DATA,
                        },
                    };
                    self.frame_done()?;
                }
                Stage::Headers { left } => {
                    let take = data.len().min(left as usize);
                    self.pending.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    self.stage = Stage::Headers {
                        left: left - take as u64,
                    };
                    self.frame_done()?;
                }
                Stage::Skip {
                    left,
                    data: counted,
                } => {
                    let take = data.len().min(left as usize);
                    if counted {
                        self.body += take as u64;
                    }
                    data = &data[take..];
                    self.stage = Stage::Skip {
                        left: left - take as u64,
                        data: counted,
                    };
                    self.frame_done()?;
                }
            }
        }
        Ok(())
    }

    /// At a frame's end: the status from a HEADERS payload, then the next
    /// frame's head.
    fn frame_done(&mut self) -> Result<(), &'static str> {
        match self.stage {
            Stage::Headers { left: 0 } => {
                self.status = Some(status(&self.pending)?);
                self.pending.clear();
            }
            Stage::Skip { left: 0, .. } => {}
            _ => return Ok(()),
        }
        self.stage = Stage::Head;
        Ok(())
    }

    /// Whether the stream may end here: at a frame boundary, with a status.
    pub fn complete(&self) -> bool {
        matches!(self.stage, Stage::Head) && self.pending.is_empty() && self.status.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        for v in [0, 63, 64, 16_383, 16_384, 1 << 30, (1 << 62) - 1] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(read_varint(&out), Some((v, out.len())), "{v}");
        }
        // RFC 9000 §A.1's examples.
        assert_eq!(read_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(
            read_varint(&[0x9d, 0x7f, 0x3e, 0x7d]),
            Some((494_878_333, 4))
        );
        assert_eq!(read_varint(&[0x9d, 0x7f]), None);
    }

    #[test]
    fn a_get_is_static_references_and_literals() {
        let f = get_request("a.test:8443", "/100.html");
        let mut want = vec![0x01, 0x00, 0x00, 0x00, 0xd1, 0xd7, 0x50, 11];
        want.extend(b"a.test:8443");
        want.extend([0x51, 9]);
        want.extend(b"/100.html");
        want[1] = (want.len() - 2) as u8;
        assert_eq!(f, want);
        // A path past the 7-bit prefix takes a continuation byte.
        let long = "/".repeat(200);
        let f = get_request("a", &long);
        let at = f.windows(2).position(|w| w == [0x51, 0x7f]).unwrap();
        assert_eq!(read_prefixed(&f[at + 1..], 7), Some((200, 2)));
    }

    #[test]
    fn the_status_decodes_from_each_form() {
        // Indexed, static: 200 (25) and 500 (71, past the 6-bit prefix).
        assert_eq!(status(&[0, 0, 0xc0 | 25]), Ok(200));
        assert_eq!(status(&[0, 0, 0xff, 71 - 63]), Ok(500));
        // A static `:status` name with a plain literal value.
        assert_eq!(status(&[0, 0, 0x5f, 24 - 15, 3, b'2', b'0', b'6']), Ok(206));
        // The same with a Huffman-coded value: "200" is 00010 00000 00000
        // and one bit of padding.
        assert_eq!(status(&[0, 0, 0x5f, 9, 0x82, 0x10, 0x01]), Ok(200));
        // "404": 011010 00000 011010 and three bits of padding.
        assert_eq!(
            huffman_digits(&[0b0110_1000, 0b0000_1101, 0b0111_1111]).as_deref(),
            Some("404")
        );
        // A literal name.
        let mut lit = vec![0, 0, 0x27, 0];
        lit.extend(b":status");
        lit.extend([3, b'4', b'2', b'1']);
        assert_eq!(status(&lit), Ok(421));
        // Another field first, then the status.
        assert_eq!(status(&[0, 0, 0xc0 | 31, 0xc0 | 26]), Ok(304));
        assert!(status(&[0, 0, 0x80 | 2]).is_err(), "dynamic");
        assert!(status(&[0, 0, 0x10]).is_err(), "post-base");
        assert!(status(&[0, 0, 0xc0 | 31]).is_err(), "no status");
        assert!(status(&[0, 0, 0x5f, 9, 5, b'2']).is_err(), "short");
    }

    /// A response: HEADERS (200), an unknown frame, DATA of `body` bytes in
    /// two frames.
    fn response(body: usize) -> Vec<u8> {
        let mut r = vec![0x01, 0x03, 0, 0, 0xc0 | 25];
        r.extend([0x21, 0x02, 0xaa, 0xbb]);
        for part in [body / 2, body - body / 2] {
            varint(&mut r, DATA);
            varint(&mut r, part as u64);
            r.extend(std::iter::repeat_n(7u8, part));
        }
        r
    }

    #[test]
    fn a_response_read_in_any_pieces_gives_its_status_and_length() {
        let r = response(100_000);
        for piece in [1, 2, 3, 7, 1200, 16_384, r.len()] {
            let mut read = Response::default();
            for chunk in r.chunks(piece) {
                read.feed(chunk).unwrap();
            }
            assert!(read.complete(), "piece {piece}");
            assert_eq!((read.status, read.body), (Some(200), 100_000), "{piece}");
        }
        let mut cut = Response::default();
        cut.feed(&r[..r.len() - 1]).unwrap();
        assert!(!cut.complete());
        let mut huge = Response::default();
        assert!(huge.feed(&[0x01, 0x80, 0x01, 0x00, 0x01]).is_err());
    }
}
