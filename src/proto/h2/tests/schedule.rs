//! The DATA scheduler: RFC 9218 urgency, one non-incremental stream at a
//! time in stream order, incremental ones round-robin by frame; frame
//! sizes, windows and the per-call budget.

use std::time::Instant;

use super::*;

/// Answers every request with these owned body bytes.
struct Sized(Vec<u8>);

impl Sized {
    fn new(len: usize) -> Sized {
        Sized((0..len).map(|i| (i % 251) as u8).collect())
    }
}

impl Handler for Sized {
    fn respond(&mut self, _req: &Request<'_>, _fields: &hpack::Fields) -> Response<'_> {
        let mut resp = Response::new(Status::Ok, &DATE);
        resp.content_length = Some(self.0.len() as u64);
        resp.body = crate::serve::Payload::Bytes(&self.0);
        resp
    }

    fn refuse(&mut self, status: Status, _message: &'static str) -> Response<'_> {
        refused(status)
    }
}

/// `GET /` on `stream` with a `priority` field of `value` (none if empty).
fn get_with_priority(stream: u32, value: &str) -> Vec<u8> {
    let mut block = GET_ROOT.to_vec();
    if !value.is_empty() {
        block.extend_from_slice(&[0x00, 8]);
        block.extend_from_slice(b"priority");
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    frame_bytes(
        frame::HEADERS,
        frame::FLAG_END_HEADERS | frame::FLAG_END_STREAM,
        stream,
        &block,
    )
}

/// (stream, payload length, END_STREAM) of each DATA frame in `got`.
fn data_frames(got: &[(Head, Vec<u8>)]) -> Vec<(u32, usize, bool)> {
    got.iter()
        .filter(|(h, _)| h.kind == frame::DATA)
        .map(|(h, p)| (h.stream, p.len(), h.has(frame::FLAG_END_STREAM)))
        .collect()
}

/// Takes `input` (after the preface and `settings`), answering each
/// request with `body` bytes, then schedules once.
fn schedule(
    h2: &mut H2,
    settings: &[(u16, u32)],
    input: &[u8],
    body: usize,
) -> (Sent, Vec<(Head, Vec<u8>)>) {
    let mut all = PREFACE.to_vec();
    frame::write_settings(&mut all, settings);
    all.extend_from_slice(input);
    let mut c = H2Counters::default();
    let mut out = Output::default();
    let (used, recv) = h2.recv(
        &all,
        &mut out,
        &mut Sized::new(body),
        &mut c,
        Instant::now(),
    );
    assert_eq!((used, recv), (all.len(), Recv::More));
    let sent = h2.send(&mut out, &mut c, Instant::now());
    (sent, frames(out.buf()))
}

/// The order in which two 20 000-byte answers of streams 1 and 3 leave,
/// given their `priority` fields.
fn order(p1: &str, p3: &str) -> Vec<(u32, usize, bool)> {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut input = get_with_priority(1, p1);
    input.extend(get_with_priority(3, p3));
    // The connection window takes both bodies.
    frame::write_window_update(&mut input, 0, 100_000);
    let (sent, got) = schedule(&mut h2, &[], &input, 20_000);
    assert_eq!(sent, Sent::Idle);
    data_frames(&got)
}

const FIRST: usize = 16_384;
const REST: usize = 20_000 - 16_384;

#[test]
fn lower_urgency_goes_first() {
    assert_eq!(
        order("u=5", "u=1"),
        [
            (3, FIRST, false),
            (3, REST, true),
            (1, FIRST, false),
            (1, REST, true)
        ]
    );
    assert_eq!(
        order("u=2", ""),
        [
            (1, FIRST, false),
            (1, REST, true),
            (3, FIRST, false),
            (3, REST, true)
        ],
        "the default is 3"
    );
    assert_eq!(
        order("u=4", ""),
        [
            (3, FIRST, false),
            (3, REST, true),
            (1, FIRST, false),
            (1, REST, true)
        ],
    );
}

#[test]
fn a_less_urgent_stream_waits_even_when_the_urgent_one_is_incremental() {
    assert_eq!(
        order("u=1, i", "u=5"),
        [
            (1, FIRST, false),
            (1, REST, true),
            (3, FIRST, false),
            (3, REST, true)
        ]
    );
}

#[test]
fn non_incremental_streams_go_one_at_a_time_in_stream_order() {
    assert_eq!(
        order("", ""),
        [
            (1, FIRST, false),
            (1, REST, true),
            (3, FIRST, false),
            (3, REST, true)
        ]
    );
    assert_eq!(
        order("i", ""),
        [
            (3, FIRST, false),
            (3, REST, true),
            (1, FIRST, false),
            (1, REST, true)
        ],
        "before incremental ones of the same urgency"
    );
}

#[test]
fn incremental_streams_take_turns_by_frame() {
    assert_eq!(
        order("i", "i"),
        [
            (1, FIRST, false),
            (3, FIRST, false),
            (1, REST, true),
            (3, REST, true)
        ]
    );
}

#[test]
fn frames_stay_within_16k_even_when_the_peer_allows_more() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut input = get(1);
    frame::write_window_update(&mut input, 0, 100_000);
    let (_, got) = schedule(
        &mut h2,
        &[(frame::SETTINGS_MAX_FRAME_SIZE, 40_000)],
        &input,
        20_000,
    );
    assert_eq!(data_frames(&got), [(1, FIRST, false), (1, REST, true)]);
}

#[test]
fn a_stream_without_window_waits_while_others_send() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut input = get_with_priority(1, "u=0");
    input.extend(get(3));
    // Stream 3 gets window; stream 1 (more urgent) has none.
    frame::write_window_update(&mut input, 3, 100);
    let (sent, got) = schedule(
        &mut h2,
        &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0)],
        &input,
        100,
    );
    assert_eq!(sent, Sent::Idle);
    assert_eq!(data_frames(&got), [(3, 100, true)]);
    assert!(h2.stalled_since().is_some(), "stream 1 waits on its window");
}

/// One call queues whole frames until the connection's output bound
/// (`HIGH_WATER` owned bytes unsent) is reached or passed, then asks for
/// a flush; the next calls, on a flushed queue, send the rest.
#[test]
fn one_call_queues_up_to_the_output_bound_then_asks_for_more() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut input = get(1);
    frame::write_window_update(&mut input, 0, 1 << 20);
    let body = 300_000;
    let (sent, got) = schedule(
        &mut h2,
        &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)],
        &input,
        body,
    );
    assert_eq!(sent, Sent::More);
    let first: usize = data_frames(&got).iter().map(|f| f.1).sum();
    // Whole frames until the bound is reached or passed.
    assert_eq!(first, 4 * FIRST, "{first}");
    let mut c = H2Counters::default();
    // An unflushed queue at the bound takes nothing more.
    let mut full = Output::default();
    full.buf().resize(crate::io::output::HIGH_WATER, 0);
    assert_eq!(h2.send(&mut full, &mut c, Instant::now()), Sent::More);
    assert_eq!(full.pending_owned(), crate::io::output::HIGH_WATER);
    // Each flushed queue takes four frames more, the last one the rest.
    let mut rest = Vec::new();
    let mut calls = Vec::new();
    loop {
        let mut out = Output::default();
        let sent = h2.send(&mut out, &mut c, Instant::now());
        calls.push(sent);
        rest.extend(data_frames(&frames(out.buf())));
        if sent == Sent::Idle {
            break;
        }
    }
    assert_eq!(calls, [Sent::More, Sent::More, Sent::More, Sent::Idle]);
    assert_eq!(first + rest.iter().map(|f| f.1).sum::<usize>(), body);
    assert_eq!(
        rest.iter().filter(|f| f.2).count(),
        1,
        "one END_STREAM, last"
    );
    assert!(rest.last().unwrap().2);
    assert_eq!(h2.active(), 0);
}

#[test]
fn a_closed_connection_window_stops_every_stream() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut input = get(1);
    input.extend(get(3));
    // 40 000 per stream allowed, 65 535 for the connection.
    let (sent, got) = schedule(&mut h2, &[], &input, 40_000);
    assert_eq!(sent, Sent::Idle);
    let data = data_frames(&got);
    assert_eq!(data.iter().map(|f| f.1).sum::<usize>(), 65_535);
    assert_eq!(data.last().unwrap(), &(3, 65_535 - 40_000 - FIRST, false));
    assert!(h2.stalled_since().is_some());
}

#[test]
fn an_empty_body_ends_the_stream_on_its_headers() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let (_, got) = schedule(&mut h2, &[], &get(1), 0);
    let kinds: Vec<(u8, u8)> = got.iter().skip(1).map(|(h, _)| (h.kind, h.flags)).collect();
    assert_eq!(
        kinds,
        [(
            frame::HEADERS,
            frame::FLAG_END_HEADERS | frame::FLAG_END_STREAM
        )]
    );
    assert_eq!(h2.active(), 0);
}

#[test]
fn small_answers_sent_at_once_spend_the_connection_window() {
    // 14 answers of 5 000 bytes against a connection window of 65 535:
    // 13 go out whole, the 14th gets the 535 bytes left and waits.
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut input = Vec::new();
    for i in 0..14 {
        input.extend(get(1 + 2 * i));
    }
    let (sent, got) = schedule(&mut h2, &[], &input, 5_000);
    assert_eq!(sent, Sent::Idle);
    let data = data_frames(&got);
    assert_eq!(data.iter().map(|f| f.1).sum::<usize>(), 65_535);
    assert_eq!(data.last().unwrap(), &(27, 535, false));
    assert_eq!(h2.active(), 1);
}

#[test]
fn a_stream_still_receiving_sends_its_body_once() {
    // No END_STREAM from the client: the stream stays after its answer.
    let mut h2 = H2::new(cfg(), Instant::now());
    let input = open_stream(1);
    let (sent, got) = schedule(&mut h2, &[], &input, 20_000);
    assert_eq!(sent, Sent::Idle);
    assert_eq!(data_frames(&got), [(1, FIRST, false), (1, REST, true)]);
    assert_eq!(h2.active(), 1);
    assert!(h2.stalled_since().is_none(), "nothing left to send");
}
