//! Property tests (proptest) for the pure HTTP code: the same properties
//! the fuzz targets in `fuzz/` check, run by `cargo test` so CI checks
//! them on every change: the request parser, path normalisation, ranges and
//! Host validation.

use proptest::prelude::*;
use shardhttpd::http::path::normalize;
use shardhttpd::http::range::{self, RangeOutcome};
use shardhttpd::http::request::{parse, valid_host, Limits};

const LIMITS: Limits = Limits {
    max_head: 1024,
    max_uri: 256,
};

/// Bytes that are mostly HTTP-shaped, so the parser gets past the request
/// line often enough to matter.
fn http_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"GET ".to_vec()),
        Just(b"HEAD ".to_vec()),
        Just(b"/".to_vec()),
        Just(b"/a/../b%2e%2E/".to_vec()),
        Just(b" HTTP/1.1\r\n".to_vec()),
        Just(b" HTTP/1.0\r\n".to_vec()),
        Just(b"Host: a\r\n".to_vec()),
        Just(b"Host: [::1]:80\r\n".to_vec()),
        Just(b"Content-Length: 3\r\n".to_vec()),
        Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
        Just(b"Range: bytes=0-1\r\n".to_vec()),
        Just(b"\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A parsed head lies within the buffer and the limits, its Host is
    /// valid, and appending bytes (pipelined requests) never changes it.
    #[test]
    fn parser_heads_are_bounded_and_prefix_stable(buf in http_bytes(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(Some(req)) = parse(&buf, &LIMITS) {
            prop_assert!(req.head_len <= buf.len().min(LIMITS.max_head));
            prop_assert!(req.target.len() <= LIMITS.max_uri);
            prop_assert!(req.host.is_none_or(valid_host));
            let (head_len, target) = (req.head_len, req.target.to_vec());
            let mut longer = buf.clone();
            longer.extend_from_slice(&tail);
            let again = parse(&longer, &LIMITS).unwrap().unwrap();
            prop_assert_eq!(again.head_len, head_len);
            prop_assert_eq!(again.target, &target[..]);
        }
    }

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn parser_takes_any_bytes(buf in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let _ = parse(&buf, &LIMITS);
    }

    /// A normalised path is absolute, has no empty, `.` or `..` segment,
    /// and is a fixed point (decoding happens once).
    #[test]
    fn normalised_paths_stay_inside_and_are_fixed_points(target in "(/|[a-z%./?#]|%2[eEfF]|%00|%25|\\.\\.){0,24}") {
        let (mut out, mut again) = (Vec::new(), Vec::new());
        if normalize(target.as_bytes(), &mut out).is_ok() {
            prop_assert!(out.starts_with(b"/") && !out.windows(2).any(|w| w == b"//"));
            prop_assert!(!out.split(|&b| b == b'/').any(|s| s == b"." || s == b".."));
            if !out.iter().any(|b| b"%?#".contains(b)) {
                prop_assert!(normalize(&out, &mut again).is_ok());
                prop_assert_eq!(&again, &out);
            }
        }
    }

    /// Satisfiable ranges are within the body, ordered, and no more than
    /// the limit; Partial exactly when some came out.
    #[test]
    fn ranges_lie_within_the_body(header in "bytes=([0-9]{0,4}-[0-9]{0,4},? ?){0,20}|[ -~]{0,30}", len in 0u64..5000, max in 1usize..20) {
        let mut out = Vec::new();
        let partial = range::parse(header.as_bytes(), len, max, &mut out) == RangeOutcome::Partial;
        prop_assert!(out.len() <= max);
        prop_assert_eq!(partial, !out.is_empty());
        prop_assert!(out.iter().all(|r| r.start <= r.end && r.end < len));
    }

    /// Host validation accepts every host:port built from the grammar and
    /// refuses any value with a byte outside it.
    #[test]
    fn host_grammar(name in "[a-zA-Z0-9._~!$&'()*+,;=-]{0,20}", port in proptest::option::of(0u32..70000), bad in "[ /@\\\\\"<>{}|^`\x00-\x1f]") {
        let host = match port {
            Some(p) => format!("{name}:{p}"),
            None => name.clone(),
        };
        prop_assert!(valid_host(host.as_bytes()), "{}", host);
        let broken = format!("{name}{bad}");
        prop_assert!(!valid_host(broken.as_bytes()), "{:?}", broken);
    }
}
