#![no_main]
//! A whole connection (read, parse, respond, framing) fed arbitrary bytes in
//! arbitrary chunks, over cleartext, over TLS records, or raw to a TLS
//! port. See the README for the input layout.
use shardhttpd_fuzz::connection::{run, Ending, Transport};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let transport = match mode % 3 {
        0 => Transport::Plain,
        1 => Transport::Tls,
        _ => Transport::RawTls,
    };
    let ending = match (mode / 3) % 2 {
        0 => Ending::HalfClose,
        _ => Ending::Timeout,
    };
    run(transport, ending, rest);
});
