#![no_main]
use shardhttpd::http::conditional::{evaluate, if_range_matches, Validators};
use shardhttpd::http::request::{parse, Limits};

// Small enough that the 414 and 431 (including 101 fields) edges fit in a fuzz input.
const LIMITS: Limits = Limits {
    max_head: 1024,
    max_uri: 256,
};
const V: Validators = Validators {
    etag: b"\"x\"",
    last_modified: 784111777,
};

libfuzzer_sys::fuzz_target!(|buf: &[u8]| {
    if let Ok(Some(req)) = parse(buf, &LIMITS) {
        assert!(req.head_len <= buf.len().min(LIMITS.max_head));
        assert!(req.target.len() <= LIMITS.max_uri);
        evaluate(&req, &V);
        req.if_range.map(|value| if_range_matches(value, &V));
    }
});
