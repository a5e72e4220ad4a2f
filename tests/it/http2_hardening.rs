//! HTTP/2 defects found in review (issue 35), over h2c and TLS with a
//! frame client written in the tests (`support::h2raw`) and with curl: a
//! frame that arrives a byte at a time is held to `header_timeout` from
//! its first byte (a HEADERS frame, a DATA frame), and `:authority` and
//! `host` get HTTP/1.1's Host rules, so `redirect_https` never builds a
//! `Location` from a value HTTP/1.1 would refuse.

use crate::support;

use std::time::{Duration, Instant};

use support::h2;
use support::h2raw::{self, Answer, Next, RawH2};
use support::*;

use crate::http2::{h2_site, Both};

const CLOSED: &str = "shardhttpd_connections_closed_total";

fn closed_by_header_timeout(server: &Server) -> f64 {
    metrics::sum(
        &metrics::scrape(server.admin_addr()),
        CLOSED,
        &[("reason", "header_timeout")],
    )
}

/// Send `start`, then one byte every 200 ms until the server closes.
/// Returns the seconds from the first byte to the close, and the code of
/// the GOAWAY seen before it.
fn drip(c: &mut RawH2, start: &[u8], what: &str) -> (f64, Option<u32>) {
    let t0 = Instant::now();
    c.send(start);
    let mut goaway = None;
    loop {
        match c.next(Duration::from_millis(200)) {
            Next::Frame(f) => {
                if let Some(code) = f.goaway_code() {
                    goaway = Some(code);
                }
            }
            Next::Quiet => {
                assert!(
                    t0.elapsed() < Duration::from_secs(8),
                    "{what}: still open 8 s after the frame began (header_timeout 1 s)"
                );
                if c.try_send(b"x").is_err() {
                    return (t0.elapsed().as_secs_f64(), goaway);
                }
            }
            Next::Closed => return (t0.elapsed().as_secs_f64(), goaway),
        }
    }
}

/// Drip `start` (see [`drip`]): the server closes once `header_timeout`
/// (1 s) has passed since its first byte, after a GOAWAY NO_ERROR, and
/// counts the `closes`-th header-timeout close.
fn closed_at_the_header_timeout(
    server: &Server,
    c: &mut RawH2,
    start: &[u8],
    what: &str,
    closes: f64,
) {
    let (took, goaway) = drip(c, start, what);
    assert!(
        (0.9..3.0).contains(&took),
        "{what}: closed after {took:.2} s"
    );
    assert_eq!(goaway, Some(0), "{what}: GOAWAY NO_ERROR before the close");
    metrics::await_value(
        server.admin_addr(),
        CLOSED,
        &[("reason", "header_timeout")],
        closes,
    );
}

/// A client that declares a 16 384-byte HEADERS frame, sends 8 000 bytes
/// of it and then one byte every 200 ms (the review used 5 s against the
/// 10 s default) is sent GOAWAY and closed once `header_timeout` has
/// passed since the frame's first byte, counted as a header timeout. So is
/// one that does the same with a DATA frame of a request body. Before the
/// fix every read pushed the deadline to `keepalive_timeout` and such
/// connections stayed open indefinitely.
#[test]
fn a_frame_sent_a_byte_at_a_time_is_closed_at_the_header_timeout() {
    let site = h2_site("h2-slow-frame");
    let both = Both::start(
        &site,
        &[
            "--cores",
            "1",
            "--header-timeout",
            "1",
            "--keepalive-timeout",
            "60",
        ],
    );
    let server = both.server();
    let mut closes = 0.0;
    for tls in [false, true] {
        let open = || {
            if tls {
                RawH2::tls(both.tls.tls_addr, &both.tls.client, "localhost")
            } else {
                RawH2::h2c(server.plain_addr())
            }
        };
        let transport = if tls { "h2" } else { "h2c" };

        let mut c = open();
        let mut start = h2raw::frame_head(h2raw::HEADERS, h2raw::END_HEADERS, 1, 16_384);
        start.extend_from_slice(&[0u8; 8000]);
        closes += 1.0;
        closed_at_the_header_timeout(
            server,
            &mut c,
            &start,
            &format!("HEADERS over {transport}"),
            closes,
        );

        // A request whose body comes as a DATA frame that never ends.
        let mut c = open();
        c.request(
            1,
            &[
                (":method", "POST"),
                (":scheme", "https"),
                (":authority", "localhost"),
                (":path", "/app.js"),
                ("content-length", "20000"),
            ],
            false,
        );
        let mut start = h2raw::frame_head(h2raw::DATA, 0, 1, 16_384);
        start.extend_from_slice(&[b'b'; 100]);
        closes += 1.0;
        closed_at_the_header_timeout(
            server,
            &mut c,
            &start,
            &format!("DATA over {transport}"),
            closes,
        );
    }
    assert_eq!(closed_by_header_timeout(server), 4.0);
}

/// Hosts HTTP/1.1 answers with 400 (RFC 9112 §3.2; the review's cases).
const INVALID_HOSTS: [&str; 6] = [
    "evil.example/x",
    "a@evil.example",
    "evil.example?",
    "[::1",
    "x y",
    "evil.example:80:80",
];

fn get(authority: Option<&str>, host: Option<&str>) -> Vec<(&'static str, String)> {
    let mut f = vec![
        (":method", "GET".to_string()),
        (":scheme", "http".to_string()),
    ];
    if let Some(a) = authority {
        f.push((":authority", a.to_string()));
    }
    f.push((":path", "/app.js".to_string()));
    if let Some(h) = host {
        f.push(("host", h.to_string()));
    }
    f
}

fn ask(c: &mut RawH2, stream: u32, fields: &[(&'static str, String)]) -> Answer {
    let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
    c.request(stream, &fields, true);
    c.answer(stream)
}

/// `:authority` and `host` are checked as HTTP/1.1's Host is: an invalid
/// value is a 400 and never reaches `redirect_https`'s `Location`; a
/// request with neither is a 400; a `host` naming another authority than
/// `:authority` is malformed (RFC 9113 §8.3.1: RST_STREAM PROTOCOL_ERROR)
/// and the connection goes on. Valid names are redirected (h2c) or served
/// (TLS) as before.
#[test]
fn authority_and_host_are_validated_as_http1_host() {
    let site = h2_site("h2-authority");
    let both = Both::start(&site, &["--cores", "1", "--redirect-https", "true"]);
    let port = both.tls.tls_addr.port();
    for tls in [false, true] {
        let transport = if tls { "h2" } else { "h2c" };
        let mut c = if tls {
            RawH2::tls(both.tls.tls_addr, &both.tls.client, "localhost")
        } else {
            RawH2::h2c(both.server().plain_addr())
        };
        let mut stream = 1;
        let mut next = || {
            stream += 2;
            stream - 2
        };
        for bad in INVALID_HOSTS {
            for fields in [get(Some(bad), None), get(None, Some(bad))] {
                let a = ask(&mut c, next(), &fields);
                let what = format!("{fields:?} over {transport}");
                assert_eq!(a.status(), Some(400), "{what}: {a:?}");
                assert_eq!(a.field("location"), None, "{what}: {a:?}");
            }
        }
        let a = ask(&mut c, next(), &get(None, None));
        assert_eq!(a.status(), Some(400), "neither over {transport}: {a:?}");
        let differ = get(Some("example.com"), Some("evil.example"));
        let a = ask(&mut c, next(), &differ);
        assert!(
            matches!(a, Answer::Reset(1)),
            "host differing from :authority over {transport}: {a:?}"
        );
        for fields in [
            get(Some("example.com:8080"), None),
            get(None, Some("example.com")),
            get(Some("Example.com"), Some("example.COM")),
        ] {
            let a = ask(&mut c, next(), &fields);
            let what = format!("{fields:?} over {transport}");
            if tls {
                assert_eq!(a.status(), Some(200), "{what}: {a:?}");
            } else {
                assert_eq!(a.status(), Some(301), "{what}: {a:?}");
                let host = if fields[2].0 == ":authority" {
                    fields[2].1.split(':').next().unwrap().to_string()
                } else {
                    fields[3].1.clone()
                };
                assert_eq!(
                    a.field("location"),
                    Some(format!("https://{host}:{port}/app.js").as_str()),
                    "{what}"
                );
            }
        }
    }

    // curl turns a Host header into `:authority` as sent.
    if !installed("curl") {
        loud("SKIP: the curl half of the :authority check: curl not installed");
        return;
    }
    for t in [both.h2c(), both.h2()] {
        for bad in ["evil.example/x", "a@evil.example"] {
            let host = format!("Host: {bad}");
            let r = h2::curl(&t, "/app.js", &["-H", &host]).response;
            assert_eq!(r.status, 400, "curl -H {host:?} over {}: {r:?}", t.name());
            assert!(r.header("location").is_none(), "{r:?}");
        }
        let r = h2::curl(&t, "/app.js", &[]).response;
        let want = if t.is_tls() { 200 } else { 301 };
        assert_eq!(r.status, want, "curl over {}: {r:?}", t.name());
    }
}
