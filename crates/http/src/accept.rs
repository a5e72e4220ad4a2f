//! Accept-Encoding negotiation (RFC 9110 §12.5.3): which of the precompressed
//! variants a resource has, if any, the client would rather receive.
//!
//! Decisions the RFC leaves open:
//! - An element whose `q` is not a valid qvalue counts as `q=0` for that
//!   coding: we never send a coding the client did not clearly accept.
//! - When a coding is listed twice, the first element wins.
//! - Identity that is not listed (and not covered by `*`) is acceptable but
//!   ranks below every listed coding, so `gzip;q=0.1` still gets gzip.
//! - Unknown codings and parameters other than `q` are ignored.
//! - A header that refuses everything the resource has (`identity;q=0`,
//!   `*;q=0`) still gets identity, never a 406 (nginx does the same).

/// A content coding this server can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Brotli,
    Zstd,
}

/// Weights are kept in thousandths: qvalues have at most three decimals.
const Q_MAX: u16 = 1000;

/// The weight unlisted identity gets when no `*` covers it: acceptable, but
/// never preferred over a coding the client listed with any positive weight
/// (ties go to the compressed coding).
const Q_IMPLICIT_IDENTITY: u16 = 1;

/// Pick the best available coding for an Accept-Encoding value. `available`
/// lists the non-identity codings the resource has, in server preference
/// order (e.g. [Brotli, Zstd, Gzip]).
///
/// When nothing is acceptable (`identity;q=0`, or `*;q=0` without identity
/// listed, and no available coding accepted) the answer is identity all the
/// same: RFC 9110 §12.5.3 lets a server send it rather than 406, and nginx
/// does; a 406 only strands the client and anything caching for it.
pub fn negotiate(accept_encoding: Option<&[u8]>, available: &[Coding]) -> Coding {
    let Some(header) = accept_encoding else {
        // RFC 9110 §12.5.3 would allow any coding here, but a client that
        // sends no Accept-Encoding is most likely one that cannot decode.
        return Coding::Identity;
    };
    let weights = Weights::parse(header);

    let mut best: Option<(Coding, u16)> = None;
    for &coding in available {
        if coding == Coding::Identity {
            continue;
        }
        let q = weights.of(coding);
        // Strictly greater: q=0 is never chosen, and on a tie the earlier,
        // server-preferred coding stays.
        if q > best.map_or(0, |(_, bq)| bq) {
            best = Some((coding, q));
        }
    }
    let identity = weights.of(Coding::Identity);
    match best {
        Some((coding, q)) if q >= identity => coding,
        _ => Coding::Identity,
    }
}

/// The weights a header assigns; `None` means not listed.
#[derive(Debug, Default)]
struct Weights {
    identity: Option<u16>,
    gzip: Option<u16>,
    brotli: Option<u16>,
    zstd: Option<u16>,
    star: Option<u16>,
}

impl Weights {
    fn parse(header: &[u8]) -> Weights {
        let mut w = Weights::default();
        for element in header.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let name = trim(parts.next().unwrap_or_default());
            let slot = if name.eq_ignore_ascii_case(b"identity") {
                &mut w.identity
            } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
                &mut w.gzip
            } else if name.eq_ignore_ascii_case(b"br") {
                &mut w.brotli
            } else if name.eq_ignore_ascii_case(b"zstd") {
                &mut w.zstd
            } else if name == b"*" {
                &mut w.star
            } else {
                continue;
            };
            if slot.is_some() {
                continue;
            }
            let mut q = Q_MAX;
            for param in parts {
                let (key, value) = match param.iter().position(|&b| b == b'=') {
                    Some(i) => (trim(&param[..i]), trim(&param[i + 1..])),
                    None => (trim(param), &b""[..]),
                };
                // Whitespace around `=` is not in the grammar, but a client
                // that wrote `q = 0` meant a refusal; honour it.
                if key.eq_ignore_ascii_case(b"q") {
                    q = qvalue(value).unwrap_or(0);
                    break;
                }
            }
            *slot = Some(q);
        }
        w
    }

    fn of(&self, coding: Coding) -> u16 {
        let listed = match coding {
            Coding::Identity => self.identity,
            Coding::Gzip => self.gzip,
            Coding::Brotli => self.brotli,
            Coding::Zstd => self.zstd,
        };
        match (listed, self.star, coding) {
            (Some(q), _, _) => q,
            // `*` covers every coding not listed, identity included.
            (None, Some(q), _) => q,
            (None, None, Coding::Identity) => Q_IMPLICIT_IDENTITY,
            (None, None, _) => 0,
        }
    }
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in
/// thousandths.
fn qvalue(s: &[u8]) -> Option<u16> {
    let (int, frac) = match s.iter().position(|&b| b == b'.') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let thousandths = frac
        .iter()
        .chain(std::iter::repeat(&b'0'))
        .take(3)
        .fold(0u16, |acc, &d| acc * 10 + u16::from(d - b'0'));
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(Q_MAX),
        _ => None,
    }
}

/// Strip optional whitespace (SP and HTAB).
fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::{Brotli, Gzip, Identity, Zstd};

    const ALL: &[Coding] = &[Brotli, Zstd, Gzip];

    #[test]
    fn negotiate_table() {
        let cases: &[(Option<&str>, &[Coding], Coding)] = &[
            (None, ALL, Identity),
            (Some(""), ALL, Identity),
            (Some("   "), ALL, Identity),
            (Some("br;q=1, gzip;q=0.5"), ALL, Brotli),
            (Some("gzip"), ALL, Gzip),
            (Some("GZIP"), ALL, Gzip),
            (Some("x-gzip"), ALL, Gzip),
            (Some("gzip"), &[Brotli], Identity),
            (Some("gzip"), &[], Identity),
            (Some("gzip, deflate, br, zstd"), ALL, Brotli),
            (Some("gzip, deflate, br, zstd"), &[Gzip, Zstd], Gzip),
            (Some("gzip;q=0.5, zstd;q=0.9"), ALL, Zstd),
            (Some("gzip ; q=0.5 ,zstd;Q=0.9"), ALL, Zstd),
            (Some("gzip;q=0.001"), ALL, Gzip),
            (Some("gzip;q=0.5, identity"), ALL, Identity),
            (Some("gzip, identity"), ALL, Gzip),
            (Some("gzip;q=0.5, identity;q=0.5"), ALL, Gzip),
            (Some("identity;q=0"), &[], Identity),
            (Some("identity;q=0"), ALL, Identity),
            (Some("identity;q=0, gzip"), ALL, Gzip),
            (Some("*"), ALL, Brotli),
            (Some("*"), &[], Identity),
            (Some("br;q=0, *"), ALL, Zstd),
            (Some("br;q=0, zstd;q=0, *;q=0.1"), ALL, Gzip),
            (Some("*;q=0"), ALL, Identity),
            (Some("*;q=0"), &[], Identity),
            (Some("*;q=0, identity"), ALL, Identity),
            (Some("*;q=0, gzip;q=0.2"), ALL, Gzip),
            (Some("*;q=0.5, identity;q=0.6"), ALL, Identity),
            (Some("gzip;q=0"), ALL, Identity),
            (Some("gzip;q=1.0"), ALL, Gzip),
            (Some("gzip;q=1."), ALL, Gzip),
            (Some("gzip;q=1.001"), ALL, Identity),
            (Some("gzip;q=2"), ALL, Identity),
            (Some("gzip;q=0.1234"), ALL, Identity),
            (Some("gzip;q=.5"), ALL, Identity),
            (Some("gzip;q="), ALL, Identity),
            (Some("gzip;q=abc, *"), ALL, Brotli),
            (Some("gzip;q=0, gzip"), ALL, Identity),
            (Some("gzip;level=9"), ALL, Gzip),
            (Some("gzip;level=9;q=0"), ALL, Identity),
            (Some("gzip; q = 0"), ALL, Identity),
            (Some("gzip;q"), ALL, Identity),
            (Some("compress, deflate"), ALL, Identity),
            (Some(",,gzip,,"), ALL, Gzip),
            (Some("br;q=0.5, gzip;q=0.5"), &[Gzip, Brotli], Gzip),
        ];
        for (header, available, want) in cases {
            assert_eq!(
                negotiate(header.map(str::as_bytes), available),
                *want,
                "{header:?} with {available:?}"
            );
        }
    }

    #[test]
    fn qvalue_table() {
        let cases: &[(&str, Option<u16>)] = &[
            ("0", Some(0)),
            ("0.", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.123", Some(123)),
            ("1", Some(1000)),
            ("1.000", Some(1000)),
            ("1.5", None),
            ("0.1234", None),
            ("", None),
            ("01", None),
            ("-0", None),
            ("0.a", None),
        ];
        for (s, want) in cases {
            assert_eq!(qvalue(s.as_bytes()), *want, "{s:?}");
        }
    }
}
