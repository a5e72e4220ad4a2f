//! The chunked transfer coding (RFC 9112 §7.1), decoded only to find where a
//! request body ends: a static server discards request bodies, so the data
//! is skipped, never copied. A pure state machine over byte slices that may
//! split the framing anywhere, with the body's wire bytes (framing,
//! extensions and trailers included) bounded by one limit.
//!
//! ```text
//! chunked-body = *chunk last-chunk trailer-section CRLF
//! chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-ext    = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )
//! ext-val      = token / quoted-string
//! trailer-section = *( field-line CRLF )
//! ```
//!
//! Line ends must be CRLF: a bare LF in the framing is an error here, not
//! leniency, since two parsers that disagree on where a body ends is how
//! request smuggling starts.

/// What [`Decoder::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Every byte given was consumed and the body goes on.
    More,
    /// The body ended; the bytes after it (a pipelined request) were not
    /// consumed.
    Done,
    /// The framing is broken: where the body ends cannot be known.
    Invalid,
    /// The body is longer than the limit.
    TooLarge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In the chunk-size's hex digits (`digits` of them so far).
    Size,
    /// After the size (or an extension), before `;` or CR; BWS allowed.
    ExtStart,
    /// After `;`, before the extension name; BWS allowed.
    ExtNameStart,
    ExtName,
    /// After a name: BWS, then `=`, `;` or CR.
    ExtAfterName,
    /// After `=`, before the value; BWS allowed.
    ExtValueStart,
    ExtToken,
    ExtQuoted,
    /// After a backslash inside a quoted value.
    ExtEscape,
    /// The CR of a size line was seen; LF must follow.
    SizeLf,
    /// `left` bytes of chunk data to skip.
    Data,
    /// Chunk data done: CR, then LF.
    DataCr,
    DataLf,
    /// After the last chunk: a trailer field or the final CRLF.
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    /// The final CRLF's CR was seen.
    EndLf,
    Finished,
}

/// Where a chunked body stands; kept in a connection's boxed I/O state
/// while it discards.
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    /// The chunk size being read, then the data left of the chunk.
    left: u64,
    /// Hex digits of the size read so far.
    digits: u8,
    /// Wire bytes taken so far, and the most allowed.
    taken: u64,
    limit: u64,
}

impl Decoder {
    /// A decoder for one body of at most `limit` bytes on the wire.
    pub fn new(limit: u64) -> Decoder {
        Decoder {
            state: State::Size,
            left: 0,
            digits: 0,
            taken: 0,
            limit,
        }
    }

    /// Bytes of the body taken so far, framing included.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Consume what of `buf` belongs to the body. Returns the bytes
    /// consumed and where the body stands; after `Invalid` or `TooLarge`
    /// the count is meaningless, and the connection must close.
    ///
    /// ```
    /// use shardhttpd_http::chunked::{Decoder, Progress};
    ///
    /// let mut d = Decoder::new(1024);
    /// let wire = b"4;name=value\r\nWiki\r\n0\r\nExpires: never\r\n\r\nGET /";
    /// assert_eq!(d.feed(wire), (wire.len() - 5, Progress::Done));
    /// ```
    pub fn feed(&mut self, buf: &[u8]) -> (usize, Progress) {
        let mut i = 0;
        while i < buf.len() {
            if self.state == State::Data {
                // The one state that skips in bulk: the data itself, whose
                // size was checked against the limit on its size line.
                let n = self.left.min((buf.len() - i) as u64);
                self.left -= n;
                self.taken += n;
                i += n as usize;
                if self.left == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            let b = buf[i];
            i += 1;
            self.taken += 1;
            if self.taken > self.limit {
                return (i, Progress::TooLarge);
            }
            match self.step(b) {
                Progress::More => {}
                other => return (i, other),
            }
        }
        (i, Progress::More)
    }

    /// One byte of framing.
    fn step(&mut self, b: u8) -> Progress {
        use State::*;
        self.state = match (self.state, b) {
            (Size, _) if b.is_ascii_hexdigit() => {
                // Leading zeros are digits too, but never overflow.
                if self.left > u64::MAX >> 4 {
                    return Progress::TooLarge;
                }
                self.left = self.left << 4 | u64::from(hex(b));
                self.digits = self.digits.saturating_add(1);
                Size
            }
            (Size, _) if self.digits == 0 => return Progress::Invalid,
            (Size | ExtStart, b' ' | b'\t') => ExtStart,
            (Size | ExtStart | ExtAfterName | ExtToken, b';') => ExtNameStart,
            (Size | ExtStart | ExtAfterName | ExtToken, b'\r') => SizeLf,
            (ExtNameStart, b' ' | b'\t') => ExtNameStart,
            (ExtNameStart | ExtName, _) if is_tchar(b) => ExtName,
            (ExtName | ExtAfterName, b' ' | b'\t') => ExtAfterName,
            (ExtName, b';') => ExtNameStart,
            (ExtName, b'\r') => SizeLf,
            (ExtName | ExtAfterName, b'=') => ExtValueStart,
            (ExtValueStart, b' ' | b'\t') => ExtValueStart,
            (ExtValueStart, b'"') => ExtQuoted,
            (ExtValueStart | ExtToken, _) if is_tchar(b) => ExtToken,
            (ExtToken, b' ' | b'\t') => ExtStart,
            (ExtQuoted, b'"') => ExtStart,
            (ExtQuoted, b'\\') => ExtEscape,
            (ExtQuoted, _) if is_qdtext(b) => ExtQuoted,
            (ExtEscape, _) if b == b'\t' || b == b' ' || is_vchar_or_obs(b) => ExtQuoted,
            (SizeLf, b'\n') => {
                if self.left == 0 {
                    TrailerStart
                } else if self.left > self.limit - self.taken {
                    // Known to overflow before a byte of it is read.
                    return Progress::TooLarge;
                } else {
                    Data
                }
            }
            (DataCr, b'\r') => DataLf,
            (DataLf, b'\n') => {
                self.digits = 0;
                Size
            }
            (TrailerStart, b'\r') => EndLf,
            (TrailerStart | TrailerName, _) if is_tchar(b) => TrailerName,
            (TrailerName, b':') => TrailerValue,
            (TrailerValue, b'\r') => TrailerLf,
            (TrailerValue, _) if b == b'\t' || b == b' ' || is_vchar_or_obs(b) => TrailerValue,
            (TrailerLf, b'\n') => TrailerStart,
            (EndLf, b'\n') => {
                self.state = Finished;
                return Progress::Done;
            }
            _ => return Progress::Invalid,
        };
        Progress::More
    }
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// VCHAR or obs-text (RFC 9110 §5.5).
fn is_vchar_or_obs(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) || b >= 0x80
}

/// RFC 9110 §5.6.4 `qdtext`.
fn is_qdtext(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e) || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `wire` whole, then split at every point and byte by byte: the
    /// outcome and the bytes consumed never depend on how reads cut it.
    fn run(wire: &[u8], limit: u64) -> (usize, Progress) {
        let whole = Decoder::new(limit).feed(wire);
        let final_of = |(used, p): (usize, Progress)| match p {
            Progress::Invalid | Progress::TooLarge => (0, p),
            _ => (used, p),
        };
        for cut in 0..=wire.len() {
            let mut d = Decoder::new(limit);
            let (a, pa) = d.feed(&wire[..cut]);
            let got = if pa == Progress::More {
                let (b, pb) = d.feed(&wire[cut..]);
                (a + b, pb)
            } else {
                (a, pa)
            };
            assert_eq!(final_of(got), final_of(whole), "{wire:?} cut at {cut}");
        }
        let mut d = Decoder::new(limit);
        let mut used = 0;
        let mut last = Progress::More;
        for b in wire {
            let (n, p) = d.feed(std::slice::from_ref(b));
            used += n;
            last = p;
            if p != Progress::More {
                break;
            }
        }
        assert_eq!(final_of((used, last)), final_of(whole), "{wire:?} bytewise");
        whole
    }

    #[test]
    fn table() {
        use Progress::{Done, Invalid, More, TooLarge};
        let cases: &[(&[u8], u64, Progress, usize)] = &[
            (b"0\r\n\r\n", 64, Done, 5),
            (b"0\r\n\r\nGET / HTTP/1.1\r\n", 64, Done, 5),
            (b"000\r\n\r\n", 64, Done, 7),
            (b"5\r\nhello\r\n0\r\n\r\n", 64, Done, 15),
            (b"A\r\n0123456789\r\n0\r\n\r\n", 64, Done, 20),
            (b"a\r\n0123456789\r\n0\r\n\r\n", 64, Done, 20),
            (b"1;a\r\nx\r\n0\r\n\r\n", 64, Done, 13),
            (b"1 ; a = b ; c=\"d;\\\"e\"\r\nx\r\n0\r\n\r\n", 64, Done, 31),
            (b"1;a=b;c\r\nx\r\n0;last\r\n\r\n", 64, Done, 22),
            (b"0\r\nExpires: never\r\nX-Sum:1\r\n\r\n", 64, Done, 30),
            (b"0\r\nX:\r\n\r\n", 64, Done, 9),
            (b"5\r\nhel", 64, More, 6),
            (b"5\r\nhello\r\n", 64, More, 10),
            (b"0\r\n", 64, More, 3),
            (b"", 64, More, 0),
            // Broken framing.
            (b"\r\n\r\n", 64, Invalid, 0),
            (b"x\r\n\r\n", 64, Invalid, 0),
            (b"-1\r\n", 64, Invalid, 0),
            (b"0x5\r\n", 64, Invalid, 0),
            (b"5\nhello\r\n0\r\n\r\n", 64, Invalid, 0),
            (b"5\r\nhello\n0\r\n\r\n", 64, Invalid, 0),
            (b"5\r\nhelloX\r\n", 64, Invalid, 0),
            (b"0\r\n\n", 64, Invalid, 0),
            (b"1;\r\nx\r\n", 64, Invalid, 0),
            (b"1;=b\r\nx\r\n", 64, Invalid, 0),
            (b"1;a=\r\nx\r\n", 64, Invalid, 0),
            (b"1;a=\"b\r\nx\r\n", 64, Invalid, 0),
            (b"1;a=b c\r\nx\r\n", 64, Invalid, 0),
            (b"1 2\r\nx\r\n", 64, Invalid, 0),
            (b"0\r\nBad Name: x\r\n\r\n", 64, Invalid, 0),
            (b"0\r\nX: a\rb\r\n\r\n", 64, Invalid, 0),
            (b"0\r\nX: a\0b\r\n\r\n", 64, Invalid, 0),
            (b"0\r\n: x\r\n\r\n", 64, Invalid, 0),
            // Limits: the wire bytes, framing included.
            (b"0\r\n\r\n", 5, Done, 5),
            (b"0\r\n\r\n", 4, TooLarge, 0),
            (b"5\r\nhello\r\n0\r\n\r\n", 15, Done, 15),
            (b"5\r\nhello\r\n0\r\n\r\n", 14, TooLarge, 0),
            (b"ffff\r\n", 64, TooLarge, 0),
            (b"ffffffffffffffff\r\n", u64::MAX, TooLarge, 0),
            (b"10000000000000000\r\n", u64::MAX, TooLarge, 0),
            (b"00000000000000000000001\r\nx\r\n0\r\n\r\n", 64, Done, 33),
        ];
        for &(wire, limit, want, used) in cases {
            let (n, got) = run(wire, limit);
            let shown = String::from_utf8_lossy(wire);
            assert_eq!(got, want, "{shown:?}");
            if matches!(want, Done | More) {
                assert_eq!(n, used, "{shown:?}");
            }
        }
    }

    #[test]
    fn a_large_body_is_skipped_in_bulk_and_counted() {
        let mut wire = b"100000\r\n".to_vec();
        wire.resize(wire.len() + 0x10_0000, b'x');
        wire.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut d = Decoder::new(2 << 20);
        assert_eq!(d.feed(&wire), (wire.len(), Progress::Done));
        assert_eq!(d.taken(), wire.len() as u64);
    }
}
