#![no_main]
use shardhttpd::http::range::{parse, RangeOutcome};

libfuzzer_sys::fuzz_target!(|input: (u64, u8, &[u8])| {
    let (len, max_ranges, header, mut out) = (input.0, input.1.into(), input.2, Vec::new());
    let partial = parse(header, len, max_ranges, &mut out) == RangeOutcome::Partial;
    assert!(out.len() <= max_ranges && partial != out.is_empty());
    assert!(out.iter().all(|r| r.start <= r.end && r.end < len));
});
