//! Every committed seed of the `connection` target, over each transport,
//! through the same driver the fuzz target calls (no libFuzzer needed).

use shardhttpd_fuzz::connection::{run, Ending, Transport};

fn seed(name: &str) -> Vec<u8> {
    let path = format!("{}/seeds/connection/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Each seed gets the same answers over cleartext and over TLS records
/// (the first byte, the target's transport choice, is skipped).
#[test]
fn connection_seeds_answer_the_same_over_every_transport() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds/connection");
    let mut seeds = 0;
    for entry in std::fs::read_dir(dir).expect("seeds/connection") {
        let data = std::fs::read(entry.expect("seed").path()).expect("read seed");
        for ending in [Ending::HalfClose, Ending::Timeout] {
            let plain = run(Transport::Plain, ending, &data[1..]);
            let tls = run(Transport::Tls, ending, &data[1..]);
            assert_eq!(plain, tls, "seed {seeds}, {ending:?}");
            assert!(run(Transport::RawTls, ending, &data[1..]).is_empty());
        }
        seeds += 1;
    }
    assert!(seeds >= 5, "only {seeds} seeds");
}

/// The driver really reaches the HTTP code: known answers for known seeds.
#[test]
fn connection_seeds_get_the_expected_answers() {
    let cases: [(&str, Ending, &[u16]); 6] = [
        (
            "pipelined-tls",
            Ending::HalfClose,
            &[200, 200, 206, 200, 301],
        ),
        ("bytewise-plain", Ending::HalfClose, &[200]),
        ("body-then-close", Ending::Timeout, &[405, 200]),
        ("half-head-timeout", Ending::Timeout, &[408]),
        // A client that half-closes mid-head gets no answer.
        ("half-head-timeout", Ending::HalfClose, &[]),
        ("bad-host-then-more", Ending::HalfClose, &[400]),
    ];
    for (name, ending, want) in cases {
        let data = seed(name);
        for t in [Transport::Plain, Transport::Tls] {
            assert_eq!(
                run(t, ending, &data[1..]),
                want,
                "{name} over {t:?}, {ending:?}"
            );
        }
    }
}
