//! The connection core driven with bytes, no socket: a handler that
//! renders a fixed HTTP/1 answer, and the frames that come out.

use std::time::Instant;

use super::frame::{self, ErrorCode, Head};
use super::*;

/// Answers every request with `200` and a 5-byte body.
struct Fixed;

impl Handler for Fixed {
    fn respond(
        &mut self,
        _req: &Request<'_>,
        _fields: &hpack::Fields,
        resp: &mut Output,
    ) -> (Status, u64) {
        resp.buf().extend_from_slice(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello",
        );
        (Status::Ok, 5)
    }

    fn refuse(&mut self, status: Status, _message: &str, resp: &mut Output) -> (Status, u64) {
        resp.buf().extend_from_slice(status.line());
        resp.buf().extend_from_slice(b"Content-Length: 0\r\n\r\n");
        (status, 0)
    }
}

fn cfg() -> H2Config {
    H2Config {
        max_concurrent: 4,
        max_header_list: 8192,
        max_uri: 4096,
        max_body: 1 << 20,
    }
}

fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    frame::write_head(&mut b, payload.len(), kind, flags, stream);
    b.extend_from_slice(payload);
    b
}

/// `GET /` as a static-table-only HPACK block.
const GET_ROOT: &[u8] = &[0x82, 0x86, 0x84];

fn get(stream: u32) -> Vec<u8> {
    frame_bytes(
        frame::HEADERS,
        frame::FLAG_END_HEADERS | frame::FLAG_END_STREAM,
        stream,
        GET_ROOT,
    )
}

/// Every frame in `out`, as (head, payload).
fn frames(out: &[u8]) -> Vec<(Head, Vec<u8>)> {
    let mut at = 0;
    let mut all = Vec::new();
    while let Some(h) = Head::parse(&out[at..]) {
        let end = at + frame::HEAD_LEN + h.len as usize;
        all.push((h, out[at + frame::HEAD_LEN..end].to_vec()));
        at = end;
    }
    assert_eq!(at, out.len(), "trailing bytes");
    all
}

/// Feeds `input` (after the preface and an empty SETTINGS), then runs the
/// scheduler; returns the frames sent after our own SETTINGS.
fn run(h2: &mut H2, input: &[u8], counters: &mut H2Counters) -> (Recv, Vec<(Head, Vec<u8>)>) {
    let mut out = Output::default();
    let (used, recv) = h2.recv(input, &mut out, &mut Fixed, counters, Instant::now());
    if recv != Recv::Failed {
        assert_eq!(used, input.len());
    }
    let snapshot = std::sync::Arc::new(crate::cache::Snapshot::empty());
    h2.send(&mut out, &snapshot, counters, Instant::now());
    (recv, frames(out.buf()))
}

fn open() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    b.extend(frame_bytes(frame::SETTINGS, 0, 0, b""));
    b
}

#[test]
fn a_get_is_answered_with_headers_and_data() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    input.extend(get(1));
    let (recv, got) = run(&mut h2, &input, &mut c);
    assert_eq!(recv, Recv::More);
    let kinds: Vec<(u8, u8, u32)> = got
        .iter()
        .map(|(h, _)| (h.kind, h.flags, h.stream))
        .collect();
    assert_eq!(
        kinds,
        [
            (frame::SETTINGS, frame::FLAG_ACK, 0),
            (frame::HEADERS, frame::FLAG_END_HEADERS, 1),
            (frame::DATA, frame::FLAG_END_STREAM, 1),
        ]
    );
    let fields = loona_hpack::Decoder::new().decode(&got[1].1).unwrap();
    assert_eq!(fields[0], (b":status".to_vec(), b"200".to_vec()));
    assert!(
        !fields.iter().any(|(n, _)| n == b"connection"),
        "{fields:?}"
    );
    assert_eq!(got[2].1, b"hello");
    assert_eq!(h2.active(), 0);
    assert_eq!(c.streams, 1);
}

#[test]
fn a_closed_window_holds_data_until_window_update() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = PREFACE.to_vec();
    let mut zero = Vec::new();
    zero.extend_from_slice(&frame::SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes());
    zero.extend_from_slice(&0u32.to_be_bytes());
    input.extend(frame_bytes(frame::SETTINGS, 0, 0, &zero));
    input.extend(get(1));
    let (_, got) = run(&mut h2, &input, &mut c);
    assert_eq!(got.last().unwrap().0.kind, frame::HEADERS);
    assert!(h2.stalled_since().is_some());
    assert_eq!(c.flow_stalls, 1);
    let mut more = Vec::new();
    frame::write_window_update(&mut more, 1, 3);
    let (_, got) = run(&mut h2, &more, &mut c);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].0.kind, got[0].0.flags, got[0].1.as_slice()),
        (frame::DATA, 0, &b"hel"[..])
    );
    let mut more = Vec::new();
    frame::write_window_update(&mut more, 1, 100);
    let (_, got) = run(&mut h2, &more, &mut c);
    assert_eq!(
        (got[0].0.flags, got[0].1.as_slice()),
        (frame::FLAG_END_STREAM, &b"lo"[..])
    );
    assert!(h2.stalled_since().is_none());
}

#[test]
fn a_bad_preface_is_a_protocol_error() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let (recv, got) = run(&mut h2, b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n", &mut c);
    assert_eq!(recv, Recv::Failed);
    assert_eq!(got[0].0.kind, frame::GOAWAY);
    assert_eq!(&got[0].1[4..], (ErrorCode::Protocol as u32).to_be_bytes());
    assert!(h2.finished());
}

#[test]
fn streams_past_the_limit_are_refused() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    // Requests without END_STREAM stay open (half-closed local).
    for id in [1u32, 3, 5, 7, 9] {
        input.extend(frame_bytes(
            frame::HEADERS,
            frame::FLAG_END_HEADERS,
            id,
            GET_ROOT,
        ));
    }
    let (_, got) = run(&mut h2, &input, &mut c);
    let rst: Vec<u32> = got
        .iter()
        .filter(|(h, _)| h.kind == frame::RST_STREAM)
        .map(|(h, _)| h.stream)
        .collect();
    assert_eq!(rst, [9]);
    assert_eq!(h2.active(), 4);
    assert_eq!(c.defences[Defence::Concurrency as usize], 1);
}

#[test]
fn rapid_reset_ends_in_enhance_your_calm() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    // Zero window: every response stays pending, so each RST cancels one.
    let mut zero = Vec::new();
    zero.extend_from_slice(&frame::SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes());
    zero.extend_from_slice(&0u32.to_be_bytes());
    input.extend(frame_bytes(frame::SETTINGS, 0, 0, &zero));
    for i in 0..(RESET_BURST as u32 + 10) {
        let id = 2 * i + 1;
        input.extend(get(id));
        input.extend(frame_bytes(frame::RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    let (recv, got) = run(&mut h2, &input, &mut c);
    assert_eq!(recv, Recv::Failed);
    let (last, payload) = got.last().unwrap();
    assert_eq!(last.kind, frame::GOAWAY);
    assert_eq!(
        &payload[4..],
        (ErrorCode::EnhanceYourCalm as u32).to_be_bytes()
    );
    assert_eq!(c.defences[Defence::RapidReset as usize], 1);
}

#[test]
fn drain_is_a_goaway_pair_around_a_ping() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    input.extend(get(1));
    run(&mut h2, &input, &mut c);
    let mut out = Vec::new();
    assert!(h2.goaway(&mut out));
    assert!(!h2.goaway(&mut out));
    let got = frames(&out);
    assert_eq!(got[0].0.kind, frame::GOAWAY);
    assert_eq!(frame::u31(&got[0].1), Some(frame::MAX_WINDOW as u32));
    assert_eq!(
        (got[1].0.kind, got[1].1.as_slice()),
        (frame::PING, &DRAIN_PING[..])
    );
    // A request sent before the client read the GOAWAY is still served.
    let mut more = get(3);
    more.extend(frame_bytes(frame::PING, frame::FLAG_ACK, 0, DRAIN_PING));
    let (_, got) = run(&mut h2, &more, &mut c);
    let kinds: Vec<u8> = got.iter().map(|(h, _)| h.kind).collect();
    assert_eq!(kinds, [frame::HEADERS, frame::DATA, frame::GOAWAY]);
    assert_eq!(frame::u31(&got[2].1), Some(3));
    assert!(h2.finished());
}
