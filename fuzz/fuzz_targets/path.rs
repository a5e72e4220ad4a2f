#![no_main]
use shardhttpd::http::path::normalize;

libfuzzer_sys::fuzz_target!(|target: &[u8]| {
    let (mut out, mut again) = (Vec::new(), Vec::new());
    if normalize(target, &mut out).is_ok() {
        assert!(out.starts_with(b"/") && !out.windows(2).any(|w| w == b"//"));
        assert!(!out.split(|&b| b == b'/').any(|s| s == b"." || s == b".."));
        // Decoding happens exactly once: a key holding `%`, `?` or `#` (e.g. from
        // `%2541`, `%3f`) means something else when read as a target again.
        if !out.iter().any(|b| b"%?#".contains(b)) {
            assert_eq!(normalize(&out, &mut again).map(|()| &again), Ok(&out));
        }
    }
});
