#![no_main]
use shardhttpd::http::accept::{negotiate, Coding};

libfuzzer_sys::fuzz_target!(|input: (u8, Option<&[u8]>)| {
    let all = [Coding::Brotli, Coding::Zstd, Coding::Gzip, Coding::Identity];
    let available: Vec<_> = all
        .into_iter()
        .filter(|&c| input.0 & 1 << c as u8 != 0)
        .collect();
    let chosen = negotiate(input.1, &available);
    assert!(chosen == Coding::Identity || available.contains(&chosen));
});
