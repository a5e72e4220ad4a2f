//! Connection-level state: our SETTINGS, the flood buckets, receive-window
//! batching, shutdown, and what an idle connection keeps.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn our_settings_name_the_limits_and_turn_push_and_7540_priorities_off() {
    let h2 = H2::new(cfg(), Instant::now());
    let mut out = Vec::new();
    h2.start(&mut out);
    let got = frames(&out);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].0.kind, got[0].0.flags, got[0].0.stream),
        (frame::SETTINGS, 0, 0)
    );
    let settings: Vec<(u16, u32)> = frame::settings(&got[0].1).unwrap().collect();
    assert_eq!(
        settings,
        [
            (frame::SETTINGS_MAX_CONCURRENT_STREAMS, 4),
            (frame::SETTINGS_ENABLE_PUSH, 0),
            (frame::SETTINGS_MAX_HEADER_LIST_SIZE, 8192),
            (frame::SETTINGS_NO_RFC7540_PRIORITIES, 1),
        ]
    );
}

#[test]
fn defence_labels_are_the_metric_labels_each_its_own() {
    let labels: Vec<&str> = Defence::ALL.iter().map(|d| d.label()).collect();
    assert_eq!(
        labels,
        [
            "rapid_reset",
            "continuation_flood",
            "header_list_size",
            "control_flood",
            "max_concurrent_streams",
        ]
    );
}

#[test]
fn a_bucket_spends_its_burst_then_refills_at_its_rate_up_to_the_burst() {
    let t0 = Instant::now();
    let mut b = Bucket::new(2.0, t0);
    assert!(b.take(2.0, 10.0, t0));
    assert!(b.take(2.0, 10.0, t0));
    assert!(!b.take(2.0, 10.0, t0), "empty after the burst");
    // 100 ms at 10 per second is exactly one token.
    let t1 = t0 + Duration::from_millis(100);
    assert!(b.take(2.0, 10.0, t1), "one token refilled");
    assert!(!b.take(2.0, 10.0, t1));
    // Ten seconds refill at most the burst.
    let t2 = t1 + Duration::from_secs(10);
    assert!(b.take(2.0, 10.0, t2));
    assert!(b.take(2.0, 10.0, t2));
    assert!(!b.take(2.0, 10.0, t2), "capped at the burst");
}

/// `len` bytes of DATA on `stream`, without END_STREAM.
fn data(stream: u32, len: usize) -> Vec<u8> {
    frame_bytes(frame::DATA, 0, stream, &vec![b'x'; len])
}

/// (stream, increment) of every WINDOW_UPDATE in `got`.
fn window_updates(got: &[(Head, Vec<u8>)]) -> Vec<(u32, u32)> {
    got.iter()
        .filter(|(h, _)| h.kind == frame::WINDOW_UPDATE)
        .map(|(h, p)| (h.stream, frame::u31(p).unwrap()))
        .collect()
}

#[test]
fn window_updates_go_out_once_half_the_window_is_consumed() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    // A request whose body follows (it is answered and discarded).
    input.extend(open_stream(1));
    input.extend(data(1, 16_384));
    let (_, got) = run(&mut h2, &input, &mut c);
    assert_eq!(window_updates(&got), [], "16 KiB is under half the window");
    let (_, got) = run(&mut h2, &data(1, 16_384), &mut c);
    assert_eq!(
        window_updates(&got),
        [(0, 32_768), (1, 32_768)],
        "past half of 65 535: the connection's and the stream's credit back"
    );
    let (_, got) = run(&mut h2, &data(1, 16_384), &mut c);
    assert!(got.is_empty(), "{got:?}");
    // The credit given back is really back: a megabyte more goes through,
    // and each half window of it is given back again.
    let mut updates = 0;
    for _ in 0..64 {
        let (recv, got) = run(&mut h2, &data(1, 16_384), &mut c);
        assert_eq!(recv, Recv::More);
        assert!(
            got.iter().all(|(h, _)| h.kind == frame::WINDOW_UPDATE),
            "{got:?}"
        );
        updates += got.len();
    }
    assert_eq!(updates, 64, "32 for the connection, 32 for the stream");
}

#[test]
fn only_the_ack_of_our_drain_ping_sends_the_final_goaway() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    input.extend(get(1));
    run(&mut h2, &input, &mut c);
    let ack = |payload: &[u8]| frame_bytes(frame::PING, frame::FLAG_ACK, 0, payload);
    // Our payload echoed before any drain began: nothing.
    let (_, got) = run(&mut h2, &ack(DRAIN_PING), &mut c);
    assert!(got.is_empty(), "{got:?}");
    let mut out = Vec::new();
    assert!(h2.goaway(&mut out));
    // Another payload's ACK: still nothing.
    let (_, got) = run(&mut h2, &ack(b"whatever"), &mut c);
    assert!(got.is_empty(), "{got:?}");
    let (_, got) = run(&mut h2, &ack(DRAIN_PING), &mut c);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.kind, frame::GOAWAY);
    assert_eq!(c.goaways_sent[ErrorCode::NoError as usize], 1);
    // A second ACK sends no second GOAWAY.
    let (_, got) = run(&mut h2, &ack(DRAIN_PING), &mut c);
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn finished_means_failed_or_a_goaway_with_no_stream_left() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    assert!(!h2.finished(), "a fresh connection");
    let mut input = open();
    input.extend(open_stream(1));
    run(&mut h2, &input, &mut c);
    assert_eq!(h2.active(), 1, "its request body still to come");
    let mut out = Vec::new();
    assert!(h2.goaway_now(&mut out));
    let got = frames(&out);
    assert_eq!(got[0].0.kind, frame::GOAWAY);
    assert_eq!(frame::u31(&got[0].1), Some(1), "the last stream taken");
    assert!(!h2.finished(), "stream 1 is still open");
    assert!(!h2.goaway_now(&mut out), "once");
    let (_, _) = run(
        &mut h2,
        &frame_bytes(frame::DATA, frame::FLAG_END_STREAM, 1, b""),
        &mut c,
    );
    assert_eq!(h2.active(), 0);
    assert!(h2.finished());
}

#[test]
fn goaway_now_after_a_failure_sends_nothing() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    run(&mut h2, b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n", &mut c);
    assert!(h2.finished());
    let mut out = Vec::new();
    assert!(!h2.goaway_now(&mut out));
    assert!(out.is_empty());
}

#[test]
fn a_header_block_waiting_for_continuation_says_since_when() {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    assert_eq!(h2.header_pending_since(), None);
    let mut input = open();
    input.extend(frame_bytes(
        frame::HEADERS,
        frame::FLAG_END_STREAM,
        1,
        GET_ROOT,
    ));
    let mut out = Output::default();
    let t = Instant::now();
    h2.recv(&input, &mut out, &mut Fixed, &mut c, t);
    assert_eq!(h2.header_pending_since(), Some(t));
}

/// A frame not yet whole is pending from its first byte, whatever more of
/// it arrives later (a client dripping a HEADERS or DATA frame a byte at
/// a time must not move its deadline); a header block that continues
/// began with its first frame's first byte.
#[test]
fn a_frame_not_yet_whole_is_pending_from_its_first_byte() {
    let t0 = Instant::now();
    let later = |s: u64| t0 + Duration::from_secs(s);
    for kind in [frame::HEADERS, frame::DATA, frame::PING] {
        let mut h2 = H2::new(cfg(), t0);
        let mut c = H2Counters::default();
        let mut out = Output::default();
        let mut input = open();
        let (used, _) = h2.recv(&input, &mut out, &mut Fixed, &mut c, t0);
        assert_eq!((used, h2.header_pending_since()), (input.len(), None));
        input = frame_bytes(kind, 0, if kind == frame::PING { 0 } else { 1 }, &[0; 8]);
        for (i, s) in [(3, 1), (9, 5), (12, 9)] {
            let (used, _) = h2.recv(&input[..i], &mut out, &mut Fixed, &mut c, later(s));
            assert_eq!(used, 0, "{kind}: nothing whole yet");
            assert_eq!(h2.header_pending_since(), Some(later(1)), "{kind} at {s} s");
        }
    }
    // A HEADERS without END_HEADERS that took 5 s to arrive: the block's
    // deadline counts from its first byte, not from when it was whole.
    let mut h2 = H2::new(cfg(), t0);
    let mut c = H2Counters::default();
    let mut out = Output::default();
    h2.recv(&open(), &mut out, &mut Fixed, &mut c, t0);
    let headers = frame_bytes(frame::HEADERS, frame::FLAG_END_STREAM, 1, GET_ROOT);
    h2.recv(&headers[..4], &mut out, &mut Fixed, &mut c, later(1));
    let (used, _) = h2.recv(&headers, &mut out, &mut Fixed, &mut c, later(6));
    assert_eq!(used, headers.len());
    assert_eq!(h2.header_pending_since(), Some(later(1)));
}

#[test]
fn shrink_frees_scratch_over_a_kibibyte_but_not_a_pending_block() {
    let mut h2 = H2::new(cfg(), Instant::now());
    // At the bound: kept.
    h2.block = Vec::with_capacity(SCRATCH_KEEP);
    h2.fields.bytes = Vec::with_capacity(SCRATCH_KEEP);
    h2.shrink();
    assert_eq!(h2.block.capacity(), SCRATCH_KEEP);
    assert_eq!(h2.fields.capacity(), SCRATCH_KEEP);
    // Past it: freed.
    h2.block.reserve_exact(4 * SCRATCH_KEEP);
    h2.fields.bytes.reserve_exact(4 * SCRATCH_KEEP);
    h2.shrink();
    assert_eq!(h2.block.capacity(), 0);
    assert_eq!(h2.fields.capacity(), 0);
    // A block that waits for its CONTINUATION is kept, however large.
    h2.block.reserve_exact(4 * SCRATCH_KEEP);
    h2.pending = Some(Pending {
        stream: 1,
        end_stream: true,
        self_dependent: false,
        frames: 1,
        started: Instant::now(),
    });
    h2.shrink();
    assert!(h2.block.capacity() > SCRATCH_KEEP);
}
