//! The common request head, tokenised without httparse: `GET` or `HEAD`, a
//! target of printable ASCII, `HTTP/1.1` or `HTTP/1.0`, and fields whose
//! names are letters, digits and `-`, whose values are printable ASCII or
//! HTAB, every line ended by CRLF. That is a strict subset of what httparse
//! accepts, and for it both give the same tokens; anything else (a bare LF,
//! obs-text, another method, a head not complete yet) is `None` here and
//! goes to httparse, which alone decides what is an error. Targets and
//! values are scanned eight bytes at a time.

use super::{Method, Version};

/// A request line recognised by [`request_line`].
pub(super) struct RequestLine<'b> {
    pub method: Method,
    pub name: &'static str,
    pub target: &'b [u8],
    pub version: Version,
    /// Bytes taken by the line, CRLF included.
    pub len: usize,
}

/// What starts at a line boundary of the head.
pub(super) enum Line<'b> {
    /// The blank line: the head ends at this offset.
    End(usize),
    /// A field line; the next line starts at `next`.
    Field {
        name: &'b [u8],
        /// Untrimmed: everything between the colon and the CR.
        value: &'b [u8],
        next: usize,
    },
}

/// `GET` or `HEAD`, one space, a target, one space, the version, CRLF.
#[inline]
pub(super) fn request_line(buf: &[u8]) -> Option<RequestLine<'_>> {
    let (method, name, start) = match buf {
        [b'G', b'E', b'T', b' ', ..] => (Method::Get, "GET", 4),
        [b'H', b'E', b'A', b'D', b' ', ..] => (Method::Head, "HEAD", 5),
        _ => return None,
    };
    // httparse's URI bytes are `!`..=0x7E and 0x80..=0xFF; only the ASCII
    // ones are taken here (the others need its UTF-8 check).
    let end = scan(
        buf,
        start,
        |w| below(w, 0x21) | above(w, 0x7e),
        |b| !(0x21..=0x7e).contains(&b),
    );
    if end == start || buf.get(end) != Some(&b' ') {
        return None;
    }
    // `HTTP/1.` and CRLF around one digit, compared as two words.
    let tail = buf.get(end + 1..end + 11)?;
    let (mut head, mut crlf) = ([0; 8], [0; 2]);
    head.copy_from_slice(&tail[..8]);
    crlf.copy_from_slice(&tail[8..]);
    let version = match (u64::from_le_bytes(head), u16::from_le_bytes(crlf)) {
        (HTTP_11, CRLF) => Version::Http11,
        (HTTP_10, CRLF) => Version::Http10,
        _ => return None,
    };
    Some(RequestLine {
        method,
        name,
        target: &buf[start..end],
        version,
        len: end + 11,
    })
}

/// The line starting at `pos`: the blank line or a field line.
#[inline]
pub(super) fn field_line(buf: &[u8], pos: usize) -> Option<Line<'_>> {
    if buf.get(pos)? == &b'\r' {
        return (buf.get(pos + 1)? == &b'\n').then_some(Line::End(pos + 2));
    }
    let mut colon = pos;
    while NAME[*buf.get(colon)? as usize] {
        colon += 1;
    }
    if colon == pos || buf[colon] != b':' {
        return None;
    }
    let start = colon + 1;
    // Value bytes: HTAB and SP..=0x7E. A word with a byte outside
    // SP..=0x7E is finished byte by byte, so an HTAB costs a little more.
    let mut end = start;
    loop {
        end = scan(
            buf,
            end,
            |w| below(w, 0x20) | above(w, 0x7e),
            |b| !(0x20..=0x7e).contains(&b),
        );
        match buf.get(end)? {
            b'\t' => end += 1,
            b'\r' => break,
            _ => return None,
        }
    }
    if buf.get(end + 1)? != &b'\n' {
        return None;
    }
    Some(Line::Field {
        name: &buf[pos..colon],
        value: &buf[start..end],
        next: end + 2,
    })
}

/// Field-name bytes taken here: letters, digits and `-` (all of them
/// tokens, RFC 9110 §5.6.2).
const NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = matches!(b as u8, b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-');
        b += 1;
    }
    t
};

const HTTP_11: u64 = u64::from_le_bytes(*b"HTTP/1.1");
const HTTP_10: u64 = u64::from_le_bytes(*b"HTTP/1.0");
const CRLF: u16 = u16::from_le_bytes(*b"\r\n");

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The high bit of each byte of `w` below `n` (`n` ≤ 0x80). A borrow only
/// ever marks bytes after a marked one, so the lowest mark is exact.
#[inline(always)]
fn below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS
}

/// The high bit of each byte of `w` above `n` (`n` < 0x80); the lowest mark
/// is exact for the same reason.
#[inline(always)]
fn above(w: u64, n: u8) -> u64 {
    (w.wrapping_add(ONES * u64::from(0x7f - n)) | w) & HIGHS
}

/// The offset of the first byte from `pos` on that `stop_byte` accepts, or
/// `buf.len()`. `stop_word` marks the same bytes in a little-endian word.
#[inline(always)]
fn scan(
    buf: &[u8],
    mut pos: usize,
    stop_word: impl Fn(u64) -> u64,
    stop_byte: impl Fn(u8) -> bool,
) -> usize {
    while let Some(chunk) = buf.get(pos..pos + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let marks = stop_word(u64::from_le_bytes(word));
        if marks != 0 {
            return pos + (marks.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    while pos < buf.len() && !stop_byte(buf[pos]) {
        pos += 1;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes around every edge of both scans, and ordinary ones.
    const BYTES: [u8; 14] = [
        0x00, 0x09, 0x0a, 0x0d, 0x1f, 0x20, 0x21, b'a', b'/', 0x7e, 0x7f, 0x80, 0xfe, 0xff,
    ];

    #[test]
    fn word_scan_stops_where_the_byte_scan_does() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 24) as usize;
            let buf: Vec<u8> = (0..len)
                .map(|i| BYTES[((seed >> (i * 2 % 60)) % BYTES.len() as u64) as usize])
                .collect();
            let from = (seed >> 60) as usize % (len + 1);
            let uri = |b: u8| !(0x21..=0x7e).contains(&b);
            let value = |b: u8| !(0x20..=0x7e).contains(&b);
            let bytewise =
                |stop: &dyn Fn(u8) -> bool| (from..len).find(|&i| stop(buf[i])).unwrap_or(len);
            assert_eq!(
                scan(&buf, from, |w| below(w, 0x21) | above(w, 0x7e), uri),
                bytewise(&uri),
                "{buf:x?} from {from}"
            );
            assert_eq!(
                scan(&buf, from, |w| below(w, 0x20) | above(w, 0x7e), value),
                bytewise(&value),
                "{buf:x?} from {from}"
            );
        }
    }

    /// Whatever the common path takes, httparse parses to the same request
    /// (mutations of realistic heads: replaced, inserted and removed bytes,
    /// cut short).
    #[test]
    fn common_heads_parse_as_httparse_does() {
        use crate::request::{parse_common, parse_httparse, Limits};
        const HEADS: [&[u8]; 3] = [
            b"GET /a/b.html HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: x y\r\n\
              Accept: */*\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\
              If-None-Match: \"abc\"\r\n\r\nGET",
            b"HEAD /x?q=1 HTTP/1.0\r\nRange: bytes=0-1\r\nConnection:\tKeep-Alive \r\n\r\n",
            b"GET / HTTP/1.1\r\nhost:\t a\r\nTransfer-Encoding: x\r\nX-A:\r\n\r\n",
        ];
        const ALPHABET: [u8; 24] = [
            0x00, 0x09, 0x0a, 0x0d, 0x1f, 0x20, 0x21, b'a', b'/', 0x7e, 0x7f, 0x80, 0xff, b':',
            b',', b'-', b'0', b'A', b'H', b'T', b'P', b'.', b'1', b'%',
        ];
        let limits = [
            Limits {
                max_head: 8192,
                max_uri: 4096,
            },
            Limits {
                max_head: 60,
                max_uri: 6,
            },
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut common, mut total) = (0, 0);
        for head in HEADS {
            for _ in 0..100_000 {
                let mut buf = head.to_vec();
                for _ in 0..next() % 3 {
                    let at = (next() % buf.len() as u64) as usize;
                    let byte = ALPHABET[(next() % ALPHABET.len() as u64) as usize];
                    match next() % 4 {
                        0 => buf[at] = byte,
                        1 => buf.insert(at, byte),
                        2 => {
                            buf.remove(at);
                        }
                        _ => buf.truncate(at),
                    }
                    if buf.is_empty() {
                        buf.push(byte);
                    }
                }
                for limits in &limits {
                    let window = &buf[..buf.len().min(limits.max_head)];
                    total += 1;
                    if let Some(req) = parse_common(window, limits) {
                        common += 1;
                        assert_eq!(
                            format!("{:?}", Ok::<_, ()>(Some(req))),
                            format!("{:?}", parse_httparse(&buf, window, limits).map_err(|_| ())),
                            "{:?}",
                            String::from_utf8_lossy(&buf)
                        );
                    }
                }
            }
        }
        // Both outcomes are common, so the comparison is not vacuous.
        assert!(
            common > total / 10 && common < total * 9 / 10,
            "{common} of {total}"
        );
    }
}
