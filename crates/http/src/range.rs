//! `Range: bytes=…` parsing (RFC 9110 §14).
//!
//! Numbers that overflow u64 saturate to `u64::MAX` instead of failing: no
//! representation is that long, so a saturated first-pos is simply
//! unsatisfiable and a saturated last-pos or suffix-length clamps to the end,
//! which is what the client meant by a huge number.

use super::request::trim;

/// One satisfiable range, `start..=end`, clamped to the representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Ignore the header and send 200: not `bytes=`, a syntax error, more
    /// than `max_ranges` ranges, or satisfiable ranges that add up to more
    /// than the representation.
    Full,
    /// `out` holds one or more satisfiable ranges, in request order.
    Partial,
    /// No range overlaps the representation → 416 with `bytes */len`.
    Unsatisfiable,
}

/// One `range-spec` after syntax checking.
enum Spec {
    /// `first-` or `first-last`.
    FromTo(u64, Option<u64>),
    /// `-suffix`.
    Suffix(u64),
}

/// Parse `header` for a representation of `len` bytes into `out` (cleared first).
///
/// ```
/// use shardhttpd_http::range::{parse, ByteRange, RangeOutcome};
///
/// let mut out = Vec::new();
/// assert_eq!(parse(b"bytes=0-4,-3", 10, 16, &mut out), RangeOutcome::Partial);
/// assert_eq!(out, [ByteRange { start: 0, end: 4 }, ByteRange { start: 7, end: 9 }]);
/// assert_eq!(parse(b"bytes=20-", 10, 16, &mut out), RangeOutcome::Unsatisfiable);
/// ```
pub fn parse(header: &[u8], len: u64, max_ranges: usize, out: &mut Vec<ByteRange>) -> RangeOutcome {
    out.clear();
    let outcome = parse_into(header, len, max_ranges, out);
    if outcome != RangeOutcome::Partial {
        // Callers only read `out` on Partial, but leaving half a list behind
        // after a late syntax error would be a trap.
        out.clear();
    }
    outcome
}

fn parse_into(
    header: &[u8],
    len: u64,
    max_ranges: usize,
    out: &mut Vec<ByteRange>,
) -> RangeOutcome {
    let Some(eq) = header.iter().position(|&b| b == b'=') else {
        return RangeOutcome::Full;
    };
    // RFC 9110 §14.1: range units are case-insensitive; any unit but bytes
    // must be ignored, not refused.
    if !header[..eq].eq_ignore_ascii_case(b"bytes") {
        return RangeOutcome::Full;
    }
    let mut specs = 0usize;
    let mut total = 0u64;
    // RFC 9110 §5.6.1.2: recipients skip empty list elements, so `bytes=0-1,,2-3`
    // is two ranges.
    for item in header[eq + 1..].split(|&b| b == b',').map(trim) {
        if item.is_empty() {
            continue;
        }
        specs += 1;
        // Counting syntactic specs, satisfiable or not, bounds the work (and
        // the size of `out`) before anything is looked at: many small or
        // overlapping ranges are a known amplification attack.
        if specs > max_ranges {
            return RangeOutcome::Full;
        }
        let Some(spec) = parse_spec(item) else {
            return RangeOutcome::Full;
        };
        if let Some(r) = clamp(spec, len) {
            // RFC 9110 §14.2 lets a server ignore ranges that overlap; as
            // nginx does, ranges that add up to more than the whole are
            // answered with the whole (16 × `0-` would otherwise send the
            // file 16 times). Contiguous non-overlapping ranges never add
            // up to more, so they still get their 206.
            total = total.saturating_add(r.end - r.start + 1);
            if total > len {
                return RangeOutcome::Full;
            }
            out.push(r);
        }
    }
    match (specs, out.is_empty()) {
        // `bytes=` with no spec at all is a syntax error, not a 416.
        (0, _) => RangeOutcome::Full,
        (_, true) => RangeOutcome::Unsatisfiable,
        (_, false) => RangeOutcome::Partial,
    }
}

fn parse_spec(item: &[u8]) -> Option<Spec> {
    let dash = item.iter().position(|&b| b == b'-')?;
    let (first, last) = (&item[..dash], &item[dash + 1..]);
    if first.is_empty() {
        return Some(Spec::Suffix(digits(last)?));
    }
    let first = digits(first)?;
    if last.is_empty() {
        return Some(Spec::FromTo(first, None));
    }
    let last = digits(last)?;
    // RFC 9110 §14.1.1: last-pos < first-pos makes the spec invalid, and an
    // invalid spec makes the whole header ignorable.
    if last < first {
        return None;
    }
    Some(Spec::FromTo(first, Some(last)))
}

/// The satisfiable part of `spec` for a representation of `len` bytes.
fn clamp(spec: Spec, len: u64) -> Option<ByteRange> {
    let last_byte = len.checked_sub(1)?;
    match spec {
        Spec::FromTo(first, _) if first >= len => None,
        Spec::FromTo(start, last) => Some(ByteRange {
            start,
            end: last.map_or(last_byte, |l| l.min(last_byte)),
        }),
        Spec::Suffix(0) => None,
        Spec::Suffix(n) => Some(ByteRange {
            start: len - n.min(len),
            end: last_byte,
        }),
    }
}

/// `1*DIGIT`, saturating at `u64::MAX` (see the module docs).
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |acc, &b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    #[test]
    fn table() {
        use RangeOutcome::{Full, Partial, Unsatisfiable};
        let huge = "99999999999999999999999";
        let cases: Vec<(String, u64, RangeOutcome, Vec<ByteRange>)> = vec![
            ("bytes=0-0".into(), 10, Partial, vec![r(0, 0)]),
            ("bytes=0-9".into(), 10, Partial, vec![r(0, 9)]),
            ("bytes=2-5".into(), 10, Partial, vec![r(2, 5)]),
            ("bytes=5-100".into(), 10, Partial, vec![r(5, 9)]),
            ("bytes=5-".into(), 10, Partial, vec![r(5, 9)]),
            ("bytes=-3".into(), 10, Partial, vec![r(7, 9)]),
            ("bytes=-10".into(), 10, Partial, vec![r(0, 9)]),
            ("bytes=-100".into(), 10, Partial, vec![r(0, 9)]),
            ("BYTES=1-2".into(), 10, Partial, vec![r(1, 2)]),
            ("Bytes=1-2".into(), 10, Partial, vec![r(1, 2)]),
            (
                "bytes=0-1, 4-5 ,8-".into(),
                10,
                Partial,
                vec![r(0, 1), r(4, 5), r(8, 9)],
            ),
            ("bytes=8-, 0-1".into(), 10, Partial, vec![r(8, 9), r(0, 1)]),
            ("bytes=0-5,2-8".into(), 10, Full, vec![]),
            ("bytes=0-4,3-5".into(), 10, Partial, vec![r(0, 4), r(3, 5)]),
            ("bytes=0-4,5-9".into(), 10, Partial, vec![r(0, 4), r(5, 9)]),
            ("bytes=0-4,4-9".into(), 10, Full, vec![]),
            ("bytes=0-,0-".into(), 10, Full, vec![]),
            ("bytes=-10,0-0".into(), 10, Full, vec![]),
            ("bytes=0-,20-".into(), 10, Partial, vec![r(0, 9)]),
            ("bytes=0-1,,2-3".into(), 10, Partial, vec![r(0, 1), r(2, 3)]),
            ("bytes=\t0-1\t".into(), 10, Partial, vec![r(0, 1)]),
            ("bytes=20-30, 0-1".into(), 10, Partial, vec![r(0, 1)]),
            ("bytes=-0, 3-3".into(), 10, Partial, vec![r(3, 3)]),
            ("bytes=10-".into(), 10, Unsatisfiable, vec![]),
            ("bytes=10-20".into(), 10, Unsatisfiable, vec![]),
            ("bytes=-0".into(), 10, Unsatisfiable, vec![]),
            ("bytes=0-0".into(), 0, Unsatisfiable, vec![]),
            ("bytes=-5".into(), 0, Unsatisfiable, vec![]),
            ("bytes=0-".into(), 0, Unsatisfiable, vec![]),
            ("bytes=5-4".into(), 10, Full, vec![]),
            ("bytes=0-1,5-4".into(), 10, Full, vec![]),
            ("bytes=".into(), 10, Full, vec![]),
            ("bytes=,".into(), 10, Full, vec![]),
            ("bytes=-".into(), 10, Full, vec![]),
            ("bytes=1".into(), 10, Full, vec![]),
            ("bytes=a-b".into(), 10, Full, vec![]),
            ("bytes=+1-2".into(), 10, Full, vec![]),
            ("bytes=1 - 2".into(), 10, Full, vec![]),
            ("bytes=1-2-3".into(), 10, Full, vec![]),
            ("bytes=--1".into(), 10, Full, vec![]),
            ("bytes = 0-1".into(), 10, Full, vec![]),
            ("items=0-1".into(), 10, Full, vec![]),
            ("bytes0-1".into(), 10, Full, vec![]),
            ("".into(), 10, Full, vec![]),
            ("bytes=0-1,2-3,4-5,6-7".into(), 10, Full, vec![]),
            ("bytes=0-1,20-,30-,40-".into(), 10, Full, vec![]),
            (
                "bytes=0-1,2-3,4-5".into(),
                10,
                Partial,
                vec![r(0, 1), r(2, 3), r(4, 5)],
            ),
            (format!("bytes=0-{huge}"), 10, Partial, vec![r(0, 9)]),
            (format!("bytes=-{huge}"), 10, Partial, vec![r(0, 9)]),
            (format!("bytes={huge}-"), 10, Unsatisfiable, vec![]),
            (format!("bytes={huge}-{huge}"), 10, Unsatisfiable, vec![]),
            (
                "bytes=18446744073709551614-".into(),
                u64::MAX,
                Partial,
                vec![r(u64::MAX - 1, u64::MAX - 1)],
            ),
        ];
        let mut out = vec![r(1, 1)];
        for (header, len, want, ranges) in &cases {
            let got = parse(header.as_bytes(), *len, 3, &mut out);
            assert_eq!((got, &out), (*want, ranges), "{header:?} len={len}");
        }
    }

    /// Whatever the header, Partial ranges lie inside the representation,
    /// never add up to more than it, and the other outcomes leave `out`
    /// empty.
    #[test]
    fn exhaustive_invariants() {
        const ALPHABET: &[u8] = b"0129-, ";
        let mut header = Vec::new();
        let mut out = Vec::new();
        for len in 0..=6u32 {
            for mut n in 0..ALPHABET.len().pow(len) {
                header.clear();
                header.extend_from_slice(b"bytes=");
                for _ in 0..len {
                    header.push(ALPHABET[n % ALPHABET.len()]);
                    n /= ALPHABET.len();
                }
                for size in [0, 1, 10, 100] {
                    let outcome = parse(&header, size, 4, &mut out);
                    let shown = String::from_utf8_lossy(&header);
                    match outcome {
                        RangeOutcome::Partial => {
                            assert!(!out.is_empty() && out.len() <= 4, "{shown}");
                            for r in &out {
                                assert!(r.start <= r.end && r.end < size, "{shown} {size}");
                            }
                            let sent: u64 = out.iter().map(|r| r.end - r.start + 1).sum();
                            assert!(sent <= size, "{shown} {size}: {sent} bytes");
                        }
                        _ => assert!(out.is_empty(), "{shown} {size}"),
                    }
                }
            }
        }
    }

    #[test]
    fn zero_max_ranges_ignores_every_range() {
        let mut out = Vec::new();
        assert_eq!(parse(b"bytes=0-1", 10, 0, &mut out), RangeOutcome::Full);
        assert!(out.is_empty());
    }
}
