//! A decoded header list → the [`Request`] the semantics layer (`serve`)
//! answers, with
//! RFC 9113 §8's validity rules and the RFC 9218 priority field.

use super::hpack;
use super::stream::DEFAULT_URGENCY;
use crate::http::request::{valid_host, Method, ParseError, Request, Version};

/// A request that breaks RFC 9113 §8: a stream error PROTOCOL_ERROR.
pub(in crate::proto) struct Malformed;

/// A request built from a decoded header list.
pub(in crate::proto) struct Built<'f> {
    pub req: Request<'f>,
    pub content_length: Option<u64>,
    pub urgency: u8,
    pub incremental: bool,
    /// The request names no host, or an invalid one: answered 400 as the
    /// same Host would be over HTTP/1.1 (RFC 9112 §3.2), never served.
    pub bad_host: Option<ParseError>,
}

/// RFC 9113 §8.3: pseudo-headers first, each once, `:method`, `:scheme`
/// and a non-empty `:path` present; names lower-case; no
/// connection-specific fields; `te` only `trailers`; values without NUL,
/// CR or LF; a `host` that names another authority than `:authority`
/// (§8.3.1).
pub(in crate::proto) fn build<'f>(
    fields: &'f hpack::Fields,
    version: Version,
) -> Result<Built<'f>, Malformed> {
    let mut method = None;
    let mut scheme = false;
    let mut path: Option<&[u8]> = None;
    let mut authority = None;
    let mut regular = false;
    // No value may hold NUL, CR or LF: one search over every name and
    // value (a name with one is no token either, so none is let through).
    if memchr::memchr3(0, b'\r', b'\n', &fields.bytes).is_some() {
        return Err(Malformed);
    }
    for (name, value) in fields.iter() {
        if let Some(pseudo) = name.strip_prefix(b":") {
            if regular {
                return Err(Malformed);
            }
            let slot = match pseudo {
                b"method" => &mut method,
                b"path" => &mut path,
                b"authority" => &mut authority,
                b"scheme" => {
                    if scheme {
                        return Err(Malformed);
                    }
                    scheme = true;
                    continue;
                }
                _ => return Err(Malformed),
            };
            if slot.replace(value).is_some() {
                return Err(Malformed);
            }
            continue;
        }
        regular = true;
        if name.is_empty() || !name.iter().all(|&b| is_lower_token(b)) {
            return Err(Malformed);
        }
        if hpack::connection_specific(name) || (name == b"te" && value != b"trailers") {
            return Err(Malformed);
        }
    }
    let Some(method) = method else {
        return Err(Malformed);
    };
    let path = match (method, path, scheme) {
        // RFC 9113 §8.5: a CONNECT names only `:authority` (no `:scheme`,
        // no `:path`). Well formed, it is refused as HTTP/1.1 refuses it
        // (405 with `Allow`), its authority standing for the target as in
        // HTTP/1.1's authority form.
        (b"CONNECT", None, false) => authority.ok_or(Malformed)?,
        (b"CONNECT", _, _) => return Err(Malformed),
        (_, Some(path), true) => path,
        _ => return Err(Malformed),
    };
    if path.is_empty() {
        return Err(Malformed);
    }
    let method_name = std::str::from_utf8(method).map_err(|_| Malformed)?;
    if method_name.is_empty() || !method.iter().all(|&b| b.is_ascii_graphic()) {
        return Err(Malformed);
    }
    let kind = Method::of(method_name);
    let mut req = Request::new(kind, method_name, path, version, 0);
    let mut host = None;
    let mut content_length = None;
    let mut urgency = DEFAULT_URGENCY;
    let mut incremental = false;
    for (name, value) in fields.iter() {
        let value = trim(value);
        let slot = match name {
            b"host" => {
                // Two hosts would let a proxy and this server disagree on
                // the site, as over HTTP/1.1.
                if host.replace(value).is_some() {
                    return Err(Malformed);
                }
                continue;
            }
            b"content-length" => {
                let n = std::str::from_utf8(value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or(Malformed)?;
                if content_length.replace(n).is_some_and(|prev| prev != n) {
                    return Err(Malformed);
                }
                continue;
            }
            b"priority" => {
                (urgency, incremental) = parse_priority(value);
                continue;
            }
            b"if-match" => &mut req.if_match,
            b"if-none-match" => &mut req.if_none_match,
            b"if-modified-since" => &mut req.if_modified_since,
            b"if-unmodified-since" => &mut req.if_unmodified_since,
            b"if-range" => &mut req.if_range,
            b"range" => &mut req.range,
            b"accept-encoding" => &mut req.accept_encoding,
            b"referer" => &mut req.referer,
            b"user-agent" => &mut req.user_agent,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    let bad_host = match (authority, host) {
        (Some(a), Some(h)) if !a.eq_ignore_ascii_case(h) => return Err(Malformed),
        (None, None) => Some(ParseError::MissingHost),
        (Some(name), _) | (None, Some(name)) => {
            req.host = Some(name);
            (!valid_host(name)).then_some(ParseError::BadHost)
        }
    };
    Ok(Built {
        req,
        content_length,
        urgency,
        incremental,
        bad_host,
    })
}

/// RFC 9113 §8.2.1: field names are lower-case tokens.
fn is_lower_token(b: u8) -> bool {
    LOWER_TOKEN[usize::from(b)]
}

/// [`is_lower_token`] by byte: a table, as every name of every request
/// goes through it.
static LOWER_TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    t
};

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

/// RFC 9218 §4: `u=N` (0–7) and `i` from a Priority field value; anything
/// unparsable keeps the defaults.
pub(in crate::proto) fn parse_priority(value: &[u8]) -> (u8, bool) {
    let mut urgency = DEFAULT_URGENCY;
    let mut incremental = false;
    for item in value.split(|&b| b == b',') {
        let item = trim(item);
        match item {
            [b'u', b'=', d] if (b'0'..=b'7').contains(d) => urgency = d - b'0',
            b"i" | b"i=?1" => incremental = true,
            b"i=?0" => incremental = false,
            _ => {}
        }
    }
    (urgency, incremental)
}

#[cfg(test)]
mod tests {
    use super::{build, is_lower_token, parse_priority, trim, Malformed};
    use crate::http::request::{ParseError, Version};
    use crate::proto::h2::hpack::Fields;

    fn list(fields: &[(&[u8], &[u8])]) -> Fields {
        let mut list = Fields::default();
        for (name, value) in fields {
            let n0 = list.bytes.len();
            list.bytes.extend_from_slice(name);
            let n1 = list.bytes.len();
            list.bytes.extend_from_slice(value);
            list.spans.push((n0..n1, n1..list.bytes.len()));
        }
        list
    }

    #[test]
    fn nul_cr_and_lf_make_a_request_malformed_wherever_they_are() {
        let good: [(&[u8], &[u8]); 4] = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":path", b"/a"),
            (b"accept", b"*/*"),
        ];
        let good_list = list(&good);
        let built = build(&good_list, Version::Http2).ok().unwrap();
        assert_eq!(built.req.target, b"/a");
        for bad in [&b"a\rb"[..], b"a\nb", b"a\0b", b"\r", b"ab\n"] {
            for at in 0..good.len() {
                let mut fields = good;
                fields[at].1 = bad;
                assert!(matches!(
                    build(&list(&fields), Version::Http2),
                    Err(Malformed)
                ));
            }
            let mut fields = good.to_vec();
            fields.push((bad, b"x"));
            assert!(matches!(
                build(&list(&fields), Version::Http2),
                Err(Malformed)
            ));
        }
    }

    /// A field's name and value.
    type Field = (&'static [u8], &'static [u8]);

    /// `GET /a` over https, then `rest`.
    fn with(rest: &[Field]) -> Fields {
        let mut all: Vec<Field> = vec![
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":path", b"/a"),
        ];
        all.extend_from_slice(rest);
        list(&all)
    }

    #[test]
    fn pseudo_headers_come_first_each_once_and_the_required_ones_present() {
        let malformed: &[(&str, Vec<Field>)] = &[
            ("no :method", vec![(b":scheme", b"https"), (b":path", b"/")]),
            ("no :scheme", vec![(b":method", b"GET"), (b":path", b"/")]),
            (
                "no :path",
                vec![(b":method", b"GET"), (b":scheme", b"https")],
            ),
            (
                "empty :path",
                vec![
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":path", b""),
                ],
            ),
            (
                "two :method",
                vec![
                    (b":method", b"GET"),
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":path", b"/"),
                ],
            ),
            (
                "two :scheme",
                vec![
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":scheme", b"https"),
                    (b":path", b"/"),
                ],
            ),
            (
                "two :path",
                vec![
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":path", b"/"),
                    (b":path", b"/"),
                ],
            ),
            (
                "unknown pseudo-header",
                vec![
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":path", b"/"),
                    (b":status", b"200"),
                ],
            ),
            (
                "pseudo-header after a field",
                vec![
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b"accept", b"*/*"),
                    (b":path", b"/"),
                ],
            ),
            (
                "empty method",
                vec![(b":method", b""), (b":scheme", b"https"), (b":path", b"/")],
            ),
            (
                "space in method",
                vec![
                    (b":method", b"G T"),
                    (b":scheme", b"https"),
                    (b":path", b"/"),
                ],
            ),
            (
                "method not UTF-8",
                vec![
                    (b":method", b"G\xffT"),
                    (b":scheme", b"https"),
                    (b":path", b"/"),
                ],
            ),
        ];
        for (what, fields) in malformed {
            assert!(
                matches!(build(&list(fields), Version::Http2), Err(Malformed)),
                "{what}"
            );
        }
        let fields = with(&[]);
        let built = build(&fields, Version::Http2).ok().unwrap();
        assert_eq!(built.req.method_name, "GET");
        assert_eq!(built.req.target, b"/a");
        assert_eq!(built.req.version, Version::Http2);
    }

    #[test]
    fn field_names_are_lower_case_tokens_and_not_connection_specific() {
        for (name, value) in [
            (&b"Accept"[..], &b"*/*"[..]),
            (b"", b"x"),
            (b"x y", b"x"),
            (b"connection", b"close"),
            (b"keep-alive", b"1"),
            (b"proxy-connection", b"x"),
            (b"transfer-encoding", b"chunked"),
            (b"upgrade", b"h2c"),
            (b"te", b"gzip"),
        ] {
            let fields = [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"https"),
                (b":path", b"/"),
                (name, value),
            ];
            assert!(
                matches!(build(&list(&fields), Version::Http2), Err(Malformed)),
                "{name:?}: {value:?}"
            );
        }
        assert!(build(&with(&[(b"te", b"trailers")]), Version::Http2).is_ok());
    }

    #[test]
    fn content_length_is_digits_and_agrees_with_itself() {
        let cl = |values: &[&'static [u8]]| {
            let fields: Vec<_> = values
                .iter()
                .map(|v| (&b"content-length"[..], *v))
                .collect();
            build(&with(&fields), Version::Http2).map(|b| b.content_length)
        };
        assert!(matches!(cl(&[]), Ok(None)));
        assert!(matches!(cl(&[b"10"]), Ok(Some(10))));
        assert!(matches!(cl(&[b" 10\t"]), Ok(Some(10))), "trimmed");
        assert!(matches!(cl(&[b"10", b"10"]), Ok(Some(10))));
        for bad in [
            &[&b""[..]][..],
            &[b"1a"],
            &[b"+1"],
            &[b"-1"],
            &[b"10", b"11"],
            &[b"99999999999999999999"],
        ] {
            assert!(matches!(cl(bad), Err(Malformed)), "{bad:?}");
        }
    }

    #[test]
    fn fields_fill_their_slots_trimmed_the_first_value_winning() {
        let fields = with(&[
            (b"if-match", b"\"a\""),
            (b"if-none-match", b" \"b\" "),
            (b"if-modified-since", b"ims"),
            (b"if-unmodified-since", b"ius"),
            (b"if-range", b"\"r\""),
            (b"range", b"bytes=0-1"),
            (b"range", b"bytes=5-9"),
            (b"accept-encoding", b"\tbr"),
            (b"referer", b"ref"),
            (b"user-agent", b"ua"),
            (b"priority", b"u=1, i"),
            (b"host", b"h.example"),
        ]);
        let b = build(&fields, Version::Http2).ok().unwrap();
        let r = &b.req;
        assert_eq!(r.if_match, Some(&b"\"a\""[..]));
        assert_eq!(r.if_none_match, Some(&b"\"b\""[..]));
        assert_eq!(r.if_modified_since, Some(&b"ims"[..]));
        assert_eq!(r.if_unmodified_since, Some(&b"ius"[..]));
        assert_eq!(r.if_range, Some(&b"\"r\""[..]));
        assert_eq!(r.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(r.accept_encoding, Some(&b"br"[..]));
        assert_eq!(r.referer, Some(&b"ref"[..]));
        assert_eq!(r.user_agent, Some(&b"ua"[..]));
        assert_eq!(r.host, Some(&b"h.example"[..]), "host when no :authority");
        assert_eq!((b.urgency, b.incremental), (1, true));
        let fields = list(&[
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", b"a.example"),
            (b":path", b"/"),
            (b"host", b"A.example"),
        ]);
        let b = build(&fields, Version::Http2).ok().unwrap();
        assert_eq!(b.req.host, Some(&b"a.example"[..]), ":authority names it");
        assert_eq!((b.urgency, b.incremental), (3, false));
    }

    /// The HTTP/1.1 Host rules on both of HTTP/2's names for it: neither
    /// or an invalid one is a 400, a `host` naming another authority than
    /// `:authority` (or a second `host`) is malformed (RFC 9113 §8.3.1).
    #[test]
    fn authority_and_host_are_checked_as_http1_checks_host() {
        let auth = |a: &'static [u8]| with(&[(b":authority", a)]);
        let host = |h: &'static [u8]| with(&[(b"host", h)]);
        let bad = |f: &Fields| build(f, Version::Http2).ok().unwrap().bad_host;
        for ok in [
            &b"a.example"[..],
            b"a.example:8443",
            b"[::1]:80",
            b"10.0.0.1",
        ] {
            assert_eq!(bad(&auth(ok)), None, "{ok:?}");
            assert_eq!(bad(&host(ok)), None, "{ok:?}");
        }
        for invalid in [
            &b"evil.example/x"[..],
            b"a@evil.example",
            b"evil.example?",
            b"[::1",
            b"x y",
            b"a.example:80:80",
        ] {
            assert_eq!(
                bad(&auth(invalid)),
                Some(ParseError::BadHost),
                "{invalid:?}"
            );
            assert_eq!(
                bad(&host(invalid)),
                Some(ParseError::BadHost),
                "{invalid:?}"
            );
        }
        assert_eq!(bad(&with(&[])), Some(ParseError::MissingHost));
        let differ = with(&[(b":authority", b"a.example"), (b"host", b"b.example")]);
        assert!(matches!(build(&differ, Version::Http2), Err(Malformed)));
        let twice = with(&[(b"host", b"a.example"), (b"host", b"a.example")]);
        assert!(matches!(build(&twice, Version::Http2), Err(Malformed)));
    }

    #[test]
    fn trim_takes_spaces_and_tabs_from_both_ends() {
        assert_eq!(trim(b" \t a b\t "), b"a b");
        assert_eq!(trim(b"ab"), b"ab");
        assert_eq!(trim(b" \t "), b"");
        assert_eq!(trim(b""), b"");
    }

    #[test]
    fn lower_tokens_are_the_rfc_9110_token_bytes_without_upper_case() {
        let tchar = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz";
        for b in 0..=255u8 {
            assert_eq!(is_lower_token(b), tchar.contains(&b), "{b:#x}");
        }
    }

    #[test]
    fn priority_fields_give_urgency_and_incremental() {
        let cases: &[(&[u8], (u8, bool))] = &[
            (b"", (3, false)),
            (b"u=0", (0, false)),
            (b"u=5, i", (5, true)),
            (b"i=?1,u=7", (7, true)),
            (b"u=9", (3, false)),
            (b"u=1, i=?0", (1, false)),
            (b"i, i=?0", (3, false)),
        ];
        for &(value, want) in cases {
            assert_eq!(parse_priority(value), want, "{value:?}");
        }
    }

    /// RFC 9113 §8.5: a CONNECT with `:authority` alone is well formed (a
    /// request refused as HTTP/1.1 refuses it, with the authority as its
    /// target); with `:scheme` or `:path`, or without `:authority`, it is
    /// malformed.
    #[test]
    fn connect_names_only_an_authority() {
        let connect: &[Field] = &[(b":method", b"CONNECT"), (b":authority", b"a.example:443")];
        let fields = list(connect);
        let built = build(&fields, Version::Http2).ok().expect("well formed");
        assert_eq!(built.req.method, crate::http::request::Method::NotAllowed);
        assert_eq!(built.req.method_name, "CONNECT");
        assert_eq!(built.req.target, b"a.example:443");
        assert_eq!(built.req.host, Some(&b"a.example:443"[..]));
        let malformed: &[(&str, Vec<Field>)] = &[
            ("no :authority", vec![(b":method", b"CONNECT")]),
            (
                "empty :authority",
                vec![(b":method", b"CONNECT"), (b":authority", b"")],
            ),
            (
                "with :scheme",
                vec![
                    (b":method", b"CONNECT"),
                    (b":scheme", b"https"),
                    (b":authority", b"a.example:443"),
                ],
            ),
            (
                "with :path",
                vec![
                    (b":method", b"CONNECT"),
                    (b":authority", b"a.example:443"),
                    (b":path", b"/"),
                ],
            ),
            (
                "extended CONNECT (RFC 8441, not offered)",
                vec![
                    (b":method", b"CONNECT"),
                    (b":protocol", b"websocket"),
                    (b":scheme", b"https"),
                    (b":authority", b"a.example"),
                    (b":path", b"/chat"),
                ],
            ),
        ];
        for (what, fields) in malformed {
            assert!(
                matches!(build(&list(fields), Version::Http2), Err(Malformed)),
                "{what}"
            );
        }
        // Any other method still needs `:scheme` and `:path`.
        let get = list(&[(b":method", b"GET"), (b":authority", b"a.example")]);
        assert!(matches!(build(&get, Version::Http2), Err(Malformed)));
    }
}
