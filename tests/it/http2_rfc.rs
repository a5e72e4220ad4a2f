//! RFC 9113 details that h2spec lets through (issue 35, defect 7): h2spec
//! passes any connection error when the connection closes, so it did not
//! see a decreasing stream id end in GOAWAY STREAM_CLOSED where §5.1.1
//! asks for PROTOCOL_ERROR; and a well-formed CONNECT (§8.5: `:authority`
//! alone) was reset as malformed instead of being answered as HTTP/1.1
//! answers it. Over h2c and TLS, with tests/h2/h2probe.py.

use crate::support;

use support::h2;
use support::*;

use crate::http2::{h2_site, Both};

/// A new stream's id at or below one the client used before: a
/// connection error PROTOCOL_ERROR, whether the id was skipped (3 after
/// 5) or reused (5 after 5).
#[test]
fn a_stream_id_that_does_not_increase_is_a_protocol_error() {
    let Some(py) = h2::python_or_skip("stream ids") else {
        return;
    };
    let site = h2_site("h2-rfc-ids");
    let both = Both::start(&site, &[]);
    for t in both.targets() {
        for kind in ["decreasing", "reused"] {
            let what = format!("{kind} stream id over {}", t.name());
            let v = h2::probe(
                &py,
                "stream-ids",
                &t,
                &["--kind", kind, "--path", "/index.html", "--wait", "5"],
            );
            assert_eq!(v["status"], 200, "{what}: stream 5 is answered: {v}");
            assert_eq!(v["closed"], true, "{what}: {v}");
            assert_eq!(
                h2::goaway_errors(&v),
                ["PROTOCOL_ERROR"],
                "{what}: RFC 9113 §5.1.1: {v}"
            );
            assert_eq!(
                v["goaways"][0]["last_stream_id"], 5,
                "{what}: the last stream taken: {v}"
            );
        }
    }
}

/// What HTTP/1.1 answers `CONNECT localhost:443`: its status and `Allow`.
fn http1_connect(server: &Server) -> (u16, Option<String>) {
    let r = Conn::connect(server.plain_addr())
        .roundtrip("CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n");
    (r.status, r.header("allow").map(str::to_owned))
}

/// A CONNECT with `:authority` alone is well formed (RFC 9113 §8.5): it
/// gets the answer HTTP/1.1 gives it (405 with `Allow`) in a HEADERS
/// response, no reset, and the connection goes on serving.
#[test]
fn a_well_formed_connect_is_refused_as_http1_refuses_it() {
    let Some(py) = h2::python_or_skip("CONNECT") else {
        return;
    };
    let site = h2_site("h2-rfc-connect");
    let both = Both::start(&site, &[]);
    let (status, allow) = http1_connect(both.server());
    assert_eq!(status, 405, "HTTP/1.1's answer to CONNECT");
    let allow = allow.expect("HTTP/1.1's 405 says what is allowed");
    for t in both.targets() {
        let what = format!("CONNECT over {}", t.name());
        let v = h2::probe(&py, "connect", &t, &["--path", "/index.html"]);
        assert_eq!(v["status"], u64::from(status), "{what}: {v}");
        let fields = v["fields"].as_array().expect("fields");
        let allowed: Vec<&str> = fields
            .iter()
            .filter(|f| f[0] == "allow")
            .filter_map(|f| f[1].as_str())
            .collect();
        assert_eq!(allowed, [allow.as_str()], "{what}: {v}");
        assert_eq!(
            v["resets"].get("1"),
            None,
            "{what}: answered, not reset: {v}"
        );
        assert_eq!(v["goaways"], serde_json::json!([]), "{what}: {v}");
        assert_eq!(v["then"], 200, "{what}: the connection goes on: {v}");
    }
}
