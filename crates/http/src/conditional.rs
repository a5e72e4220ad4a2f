//! Conditional requests (RFC 9110 §13.2.2), evaluated in the RFC's order.
//!
//! Malformed entity-tag lists are read up to the first bad element; what came
//! before still counts. For If-Match that errs towards 412 and for
//! If-None-Match towards sending the full body, both of which are safe.
//! Unparsable dates make their header ignored, as §13.1.3–4 require.

use std::time::UNIX_EPOCH;

use super::request::{trim, Request};

/// What the request is compared against.
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// Strong entity tag, quotes included: `"abc"`.
    pub etag: &'a [u8],
    /// Last-Modified as Unix seconds.
    pub last_modified: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    Proceed,
    /// 304 (GET/HEAD only).
    NotModified,
    /// 412.
    Failed,
}

/// Evaluate If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since.
pub fn evaluate(req: &Request<'_>, v: &Validators<'_>) -> Precondition {
    // Step 1–2: the validators that guard against lost updates. If-Match wins
    // over If-Unmodified-Since because entity tags are more precise than
    // one-second dates.
    if let Some(value) = req.if_match {
        if !any_tag(value, |tag| strong_eq(tag, v.etag)) {
            return Precondition::Failed;
        }
    } else if let Some(date) = req.if_unmodified_since.and_then(http_date) {
        if v.last_modified > date {
            return Precondition::Failed;
        }
    }

    // Step 3–4: cache validation. A present If-None-Match makes
    // If-Modified-Since irrelevant even when it does not match (§13.1.3).
    if let Some(value) = req.if_none_match {
        if any_tag(value, |tag| weak_eq(tag, v.etag)) {
            return Precondition::NotModified;
        }
    } else if let Some(date) = req.if_modified_since.and_then(http_date) {
        if v.last_modified <= date {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether an If-Range value (an entity tag or an HTTP-date) lets Range apply.
pub fn if_range_matches(if_range: &[u8], v: &Validators<'_>) -> bool {
    let value = trim(if_range);
    // RFC 9110 §13.1.5: If-Range needs a strong match, so a weak tag never
    // passes, and a date only when it is exactly Last-Modified.
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return is_strong(value) && value == v.etag;
    }
    http_date(value) == Some(v.last_modified)
}

/// Whether `value` (`*` or a list of entity tags) holds a tag satisfying `eq`.
fn any_tag(value: &[u8], mut eq: impl FnMut(&[u8]) -> bool) -> bool {
    let value = trim(value);
    // `*` is only meaningful alone: "If-Match = "*" / #entity-tag". The
    // representation always exists by the time we are asked.
    if value == b"*" {
        return true;
    }
    let mut rest = value;
    loop {
        while let [b' ' | b'\t' | b',', tail @ ..] = rest {
            rest = tail;
        }
        if rest.is_empty() {
            return false;
        }
        let Some((tag, tail)) = split_tag(rest) else {
            return false;
        };
        if eq(tag) {
            return true;
        }
        rest = tail;
    }
}

/// Split one `entity-tag` (`W/"…"` or `"…"`) off the front of `s`; it must be
/// followed by optional whitespace and then a comma or the end.
fn split_tag(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let opaque_at = if s.starts_with(b"W/") { 2 } else { 0 };
    if s.get(opaque_at) != Some(&b'"') {
        return None;
    }
    let close = opaque_at + 1 + s[opaque_at + 1..].iter().position(|&b| b == b'"')?;
    let (tag, tail) = s.split_at(close + 1);
    match trim(tail).first() {
        None | Some(b',') => Some((tag, tail)),
        Some(_) => None,
    }
}

fn is_strong(tag: &[u8]) -> bool {
    tag.len() >= 2 && tag.starts_with(b"\"") && tag.ends_with(b"\"")
}

/// Strong comparison (RFC 9110 §8.8.3.2): both strong and byte-identical.
fn strong_eq(a: &[u8], b: &[u8]) -> bool {
    is_strong(a) && a == b
}

/// Weak comparison: the opaque parts match, whatever the `W/` prefixes.
fn weak_eq(a: &[u8], b: &[u8]) -> bool {
    opaque(a) == opaque(b)
}

fn opaque(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// An HTTP-date (any of the three formats of RFC 9110 §5.6.7) as Unix seconds.
fn http_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(trim(value)).ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    Some(time.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Method, Version};

    /// Sun, 06 Nov 1994 08:49:37 GMT
    const T: u64 = 784_111_777;
    const AT_T: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE_T: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
    const AFTER_T: &str = "Sun, 06 Nov 1994 08:49:38 GMT";

    const V: Validators<'static> = Validators {
        etag: b"\"abc\"",
        last_modified: T,
    };

    #[derive(Default)]
    struct Conds {
        im: Option<&'static str>,
        ius: Option<&'static str>,
        inm: Option<&'static str>,
        ims: Option<&'static str>,
    }

    fn request(c: &Conds) -> Request<'static> {
        Request {
            method: Method::Get,
            method_name: "GET",
            target: b"/",
            version: Version::Http11,
            head_len: 0,
            host: Some(b"h"),
            conn_close: false,
            conn_keep_alive: false,
            content_length: 0,
            chunked: false,
            if_match: c.im.map(str::as_bytes),
            if_none_match: c.inm.map(str::as_bytes),
            if_modified_since: c.ims.map(str::as_bytes),
            if_unmodified_since: c.ius.map(str::as_bytes),
            if_range: None,
            range: None,
            accept_encoding: None,
            referer: None,
            user_agent: None,
        }
    }

    #[test]
    fn evaluate_table() {
        use Precondition::{Failed, NotModified, Proceed};
        let cases: &[(&str, Conds, Precondition)] = &[
            ("nothing", Conds::default(), Proceed),
            // If-Match
            (
                "im star",
                Conds {
                    im: Some("*"),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "im exact",
                Conds {
                    im: Some("\"abc\""),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "im in list",
                Conds {
                    im: Some("\"x\", \"abc\""),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "im list no spaces",
                Conds {
                    im: Some("\"x\",\"abc\""),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "im list odd whitespace",
                Conds {
                    im: Some(" ,\t\"x\" ,, \"abc\" , "),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "im other",
                Conds {
                    im: Some("\"x\""),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im weak never matches",
                Conds {
                    im: Some("W/\"abc\""),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im comma inside tag",
                Conds {
                    im: Some("\"a,bc\""),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im unquoted",
                Conds {
                    im: Some("abc"),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im junk after tag",
                Conds {
                    im: Some("\"abc\"x"),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im unterminated",
                Conds {
                    im: Some("\"abc"),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im empty",
                Conds {
                    im: Some(""),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im star in list",
                Conds {
                    im: Some("\"x\", *"),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "im wins over ius",
                Conds {
                    im: Some("\"abc\""),
                    ius: Some(BEFORE_T),
                    ..Default::default()
                },
                Proceed,
            ),
            // If-Unmodified-Since
            (
                "ius equal",
                Conds {
                    ius: Some(AT_T),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "ius later",
                Conds {
                    ius: Some(AFTER_T),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "ius earlier",
                Conds {
                    ius: Some(BEFORE_T),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "ius rfc850",
                Conds {
                    ius: Some("Sunday, 06-Nov-94 08:49:36 GMT"),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "ius asctime",
                Conds {
                    ius: Some("Sun Nov  6 08:49:36 1994"),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "ius garbage ignored",
                Conds {
                    ius: Some("yesterday"),
                    ..Default::default()
                },
                Proceed,
            ),
            // If-None-Match
            (
                "inm star",
                Conds {
                    inm: Some("*"),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "inm exact",
                Conds {
                    inm: Some("\"abc\""),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "inm weak matches",
                Conds {
                    inm: Some("W/\"abc\""),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "inm in list",
                Conds {
                    inm: Some("W/\"x\", W/\"abc\""),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "inm other",
                Conds {
                    inm: Some("\"x\""),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "inm bare opaque",
                Conds {
                    inm: Some("abc"),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "inm comma inside tag",
                Conds {
                    inm: Some("\"x,\"abc\""),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "inm miss ignores ims",
                Conds {
                    inm: Some("\"x\""),
                    ims: Some(AFTER_T),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "inm after im pass",
                Conds {
                    im: Some("\"abc\""),
                    inm: Some("\"abc\""),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "im fail beats inm",
                Conds {
                    im: Some("\"x\""),
                    inm: Some("\"abc\""),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "ius fail beats ims",
                Conds {
                    ius: Some(BEFORE_T),
                    ims: Some(AFTER_T),
                    ..Default::default()
                },
                Failed,
            ),
            // If-Modified-Since
            (
                "ims equal",
                Conds {
                    ims: Some(AT_T),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "ims later",
                Conds {
                    ims: Some(AFTER_T),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "ims earlier",
                Conds {
                    ims: Some(BEFORE_T),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "ims garbage ignored",
                Conds {
                    ims: Some("Sun, 06 Nov 1994"),
                    ..Default::default()
                },
                Proceed,
            ),
            (
                "ims padded",
                Conds {
                    ims: Some(" Sun, 06 Nov 1994 08:49:37 GMT "),
                    ..Default::default()
                },
                NotModified,
            ),
        ];
        for (name, conds, want) in cases {
            assert_eq!(evaluate(&request(conds), &V), *want, "{name}");
        }
    }

    /// Strong comparison needs both tags strong (RFC 9110 §8.8.3.2), even
    /// when the representation's own tag is weak (this server only makes
    /// strong ones, so the rule is only visible here): If-Match and If-Range
    /// never match a weak tag, while If-None-Match's weak comparison does.
    /// An empty opaque-tag (`""`) is still a strong tag.
    #[test]
    fn strong_comparison_needs_two_strong_tags() {
        use Precondition::{Failed, NotModified, Proceed};
        let weak = Validators {
            etag: b"W/\"abc\"",
            last_modified: T,
        };
        let empty = Validators {
            etag: b"\"\"",
            last_modified: T,
        };
        let cases: &[(&str, &Validators<'_>, Conds, Precondition)] = &[
            (
                "im weak = weak",
                &weak,
                Conds {
                    im: Some("W/\"abc\""),
                    ..Default::default()
                },
                Failed,
            ),
            (
                "inm weak = weak",
                &weak,
                Conds {
                    inm: Some("W/\"abc\""),
                    ..Default::default()
                },
                NotModified,
            ),
            (
                "im empty tag",
                &empty,
                Conds {
                    im: Some("\"\""),
                    ..Default::default()
                },
                Proceed,
            ),
        ];
        for (name, v, conds, want) in cases {
            assert_eq!(evaluate(&request(conds), v), *want, "{name}");
        }
        assert!(
            !if_range_matches(b"W/\"abc\"", &weak),
            "if-range weak = weak"
        );
        assert!(if_range_matches(b"\"\"", &empty), "if-range empty tag");
    }

    #[test]
    fn if_range_table() {
        let cases: &[(&str, bool)] = &[
            ("\"abc\"", true),
            (" \"abc\" ", true),
            ("\"abd\"", false),
            ("W/\"abc\"", false),
            ("\"abc\", \"x\"", false),
            ("\"abc", false),
            (AT_T, true),
            (BEFORE_T, false),
            (AFTER_T, false),
            ("Sunday, 06-Nov-94 08:49:37 GMT", true),
            ("abc", false),
            ("", false),
            ("*", false),
        ];
        for (value, want) in cases {
            assert_eq!(if_range_matches(value.as_bytes(), &V), *want, "{value:?}");
        }
    }
}
