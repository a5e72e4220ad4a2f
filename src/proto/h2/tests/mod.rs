//! The connection core driven with bytes, no socket: a handler that
//! gives a fixed answer, and the frames that come out.

use std::sync::Arc;
use std::time::Instant;

use super::frame::{self, ErrorCode, Head};
use super::*;
use crate::cache::Snapshot;
use crate::io::output::Piece;
use crate::serve::{Multipart, Payload, Slice};

/// Answers every request with `200` and a 5-byte body.
struct Fixed;

impl Handler for Fixed {
    fn respond(&mut self, _req: &Request<'_>, _fields: &hpack::Fields) -> Response<'_> {
        // A connection-specific line among the pieces: the encoder drops it.
        let mut resp = Response::new(Status::Ok, &DATE);
        resp.lines(b"Connection: keep-alive\r\n");
        resp.content_length = Some(5);
        resp.body = Payload::Bytes(b"hello");
        resp
    }

    fn refuse(&mut self, status: Status, _message: &'static str) -> Response<'_> {
        refused(status)
    }
}

/// The Date every test response carries (the epoch's).
static DATE: std::sync::LazyLock<crate::http::date::DateCache> =
    std::sync::LazyLock::new(|| crate::http::date::DateCache::new(std::time::UNIX_EPOCH));

/// Every test handler's refusal: `status` with an empty body.
fn refused(status: Status) -> Response<'static> {
    let mut resp = Response::new(status, &DATE);
    resp.content_length = Some(0);
    resp
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

/// `GET /` with `:authority: a`, as an HPACK block that leaves the
/// decoder's table alone (static table, a literal not indexed).
const GET_ROOT: &[u8] = &[0x82, 0x86, 0x84, 0x01, 0x01, b'a'];

fn get(stream: u32) -> Vec<u8> {
    frame_bytes(
        frame::HEADERS,
        frame::FLAG_END_HEADERS | frame::FLAG_END_STREAM,
        stream,
        GET_ROOT,
    )
}

/// A request on `stream` whose body would follow (no END_STREAM): the
/// stream stays open after its answer.
fn open_stream(stream: u32) -> Vec<u8> {
    frame_bytes(frame::HEADERS, frame::FLAG_END_HEADERS, stream, GET_ROOT)
}

/// The payloads of the DATA frames in `got`, in order.
fn data_payload(got: Vec<(Head, Vec<u8>)>) -> Vec<u8> {
    got.into_iter()
        .filter(|(h, _)| h.kind == frame::DATA)
        .flat_map(|(_, p)| p)
        .collect()
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
    h2.send(&mut out, counters, Instant::now());
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
        input.extend(open_stream(id));
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

// DATA by reference: bodies from a real snapshot's arena.

/// A scratch root holding `body.bin`, removed on drop.
struct Root(std::path::PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A snapshot of a root holding `body` as `/body.bin` (in memory).
fn snapshot_with(tag: &str, body: &[u8]) -> (Root, Arc<Snapshot>) {
    let root =
        Root(std::env::temp_dir().join(format!("shardhttpd-h2-{}-{tag}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    std::fs::create_dir_all(&root.0).unwrap();
    std::fs::write(root.0.join("body.bin"), body).unwrap();
    let opts = crate::cache::BuildOptions {
        root: root.0.clone(),
        cache_max_bytes: 1 << 20,
        sendfile_threshold: 1 << 20,
        server_line: Vec::new(),
        dotfile_allow: Default::default(),
        index_files: Vec::new(),
        default_type: "application/octet-stream".into(),
        compress: None,
        compress_configured: None,
        fast_start_max_age: 60,
        headers: Default::default(),
        status_cache_control: Default::default(),
        cache_control: Default::default(),
        error_pages: Vec::new(),
        spa_fallback: false,
        open_files: Default::default(),
        preload_max_files: crate::cache::DEFAULT_PRELOAD_MAX_FILES,
        budget: None,
        compress_max_file_bytes: crate::cache::DEFAULT_COMPRESS_MAX_FILE_BYTES,
    };
    let snap = Arc::new(crate::cache::build(&opts, 1).unwrap());
    (root, snap)
}

/// Answers every request with `/body.bin` of `snap`, its body a slice of
/// the snapshot as the semantics layer gives it (by reference from the
/// arena, or as a large file's piece).
struct FromSnapshot(Arc<Snapshot>);

impl Handler for FromSnapshot {
    fn respond(&mut self, _req: &Request<'_>, _fields: &hpack::Fields) -> Response<'_> {
        let Some(crate::cache::Resource::File(idx)) = self.0.resolve(b"/body.bin") else {
            panic!("no /body.bin in the snapshot");
        };
        let repr = self.0.entry(idx).identity();
        let mut resp = Response::new(Status::Ok, &DATE);
        resp.content_length = Some(repr.len);
        resp.body = Payload::Snapshot(Slice {
            snapshot: &self.0,
            body: repr.body(),
            start: 0,
            len: repr.len,
            file: None,
        });
        resp
    }

    fn refuse(&mut self, status: Status, _message: &'static str) -> Response<'_> {
        refused(status)
    }
}

/// The queue as bytes (ranges read from its pinned snapshot) and how many
/// of its pieces are ranges.
fn flatten(out: &Output) -> (Vec<u8>, usize) {
    let mut all = Vec::new();
    let mut ranges = 0;
    out.for_each_piece(|p| match p {
        Piece::Bytes(b) => all.extend_from_slice(b),
        Piece::Mem { off, len } => {
            ranges += 1;
            all.extend_from_slice(out.pinned().unwrap().mem(off, len));
        }
        other => panic!("unexpected piece {other:?}"),
    });
    (all, ranges)
}

/// One GET of `/body.bin` answered from `snap`, its DATA scheduled into
/// `out` (after `skip` bytes already queued); returns the body the frames
/// carry and how many pieces of the queue are ranges.
fn fetch_body(snap: &Arc<Snapshot>, out: &mut Output, skip: usize) -> (Vec<u8>, usize) {
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    input.extend(get(1));
    let mut handler = FromSnapshot(Arc::clone(snap));
    let (used, recv) = h2.recv(&input, out, &mut handler, &mut c, Instant::now());
    assert_eq!((used, recv), (input.len(), Recv::More));
    assert_eq!(h2.send(out, &mut c, Instant::now()), Sent::Idle);
    assert!(matches!(
        snap.entry(snap_index(snap)).identity().body,
        crate::cache::Body::Mem { .. }
    ));
    let (bytes, ranges) = flatten(out);
    let body = data_payload(frames(&bytes[skip..]));
    assert_eq!(h2.active(), 0, "the body went out whole");
    (body, ranges)
}

fn snap_index(snap: &Snapshot) -> u32 {
    let Some(crate::cache::Resource::File(idx)) = snap.resolve(b"/body.bin") else {
        panic!("no /body.bin in the snapshot");
    };
    idx
}

/// Two full frames, then a tail shorter than `REF_MIN`.
fn two_frames_and_a_bit() -> Vec<u8> {
    (0..2 * 16_384 + 500u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect()
}

#[test]
fn data_from_the_current_snapshot_goes_by_reference() {
    let body = two_frames_and_a_bit();
    let (_root, snap) = snapshot_with("by-ref", &body);
    let mut out = Output::default();
    let (got, ranges) = fetch_body(&snap, &mut out, 0);
    assert!(got == body, "the body, exactly");
    assert_eq!(ranges, 2, "the full frames by reference, the tail copied");
    assert!(Arc::ptr_eq(out.pinned().unwrap(), &snap));
    assert!(out.pending_owned() < 1024, "frame headers, not payloads");
}

#[test]
fn data_of_an_older_snapshot_is_copied() {
    let body = two_frames_and_a_bit();
    let (_root, snap) = snapshot_with("older", &body);
    snap.retire();
    let mut out = Output::default();
    let (got, ranges) = fetch_body(&snap, &mut out, 0);
    assert!(got == body);
    assert_eq!(ranges, 0, "a stream of an older snapshot copies");
    assert!(out.pinned().is_none());
}

#[test]
fn data_is_copied_while_the_output_pins_another_snapshot() {
    let body = two_frames_and_a_bit();
    let (_root, snap) = snapshot_with("pinned", &body);
    let (_other_root, other) = snapshot_with("pinned-other", &body);
    let mut out = Output::default();
    // A range of `other` already queued (as after a reload, before `snap`
    // became current).
    let Some(crate::cache::Resource::File(idx)) = other.resolve(b"/body.bin") else {
        panic!("no /body.bin");
    };
    let crate::cache::Body::Mem { off } = other.entry(idx).identity().body else {
        panic!("not in memory");
    };
    assert!(out.push_mem(&other, off, 10));
    let (got, ranges) = fetch_body(&snap, &mut out, 10);
    assert_eq!(ranges, 1, "only the range queued before");
    assert!(Arc::ptr_eq(out.pinned().unwrap(), &other));
    assert!(got == body);
}

/// Answers with 2 000 bytes of `/body.bin` as the one part of a
/// multipart body: owned bytes, a range by reference, owned bytes.
struct Interleaved(Arc<Snapshot>, [crate::http::range::ByteRange; 1]);

impl Handler for Interleaved {
    fn respond(&mut self, _req: &Request<'_>, _fields: &hpack::Fields) -> Response<'_> {
        let repr = self.0.entry(snap_index(&self.0)).identity();
        let mut resp = Response::new(Status::Ok, &DATE);
        resp.body = Payload::Multipart(Box::new(Multipart {
            snapshot: &self.0,
            body: repr.body(),
            file: None,
            ranges: &self.1,
            total: repr.len,
            content_type: b"application/octet-stream",
            boundary: [b'b'; 32],
        }));
        resp.content_length = Some(resp.body_len());
        resp
    }

    fn refuse(&mut self, status: Status, _message: &'static str) -> Response<'_> {
        refused(status)
    }
}

#[test]
fn owned_bytes_after_a_range_are_sent_too() {
    let body = two_frames_and_a_bit();
    let (_root, snap) = snapshot_with("interleaved", &body);
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    input.extend(get(1));
    let mut out = Output::default();
    let range = crate::http::range::ByteRange {
        start: 0,
        end: 1999,
    };
    let mut handler = Interleaved(Arc::clone(&snap), [range]);
    h2.recv(&input, &mut out, &mut handler, &mut c, Instant::now());
    h2.send(&mut out, &mut c, Instant::now());
    let (bytes, _) = flatten(&out);
    let got = data_payload(frames(&bytes));
    let bb = "b".repeat(32);
    let mut want = format!(
        "\r\n--{bb}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 0-1999/{}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    want.extend_from_slice(&body[..2000]);
    want.extend_from_slice(format!("\r\n--{bb}--\r\n").as_bytes());
    assert!(got == want, "{} bytes", got.len());
}

#[test]
fn a_stream_lets_go_of_its_body_once_sent() {
    // Still receiving (no END_STREAM), so the stream outlives its answer;
    // the snapshot its body came from is not held by it.
    let body = two_frames_and_a_bit();
    let (_root, snap) = snapshot_with("let-go", &body);
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut c = H2Counters::default();
    let mut input = open();
    input.extend(open_stream(1));
    let mut out = Output::default();
    h2.recv(
        &input,
        &mut out,
        &mut FromSnapshot(Arc::clone(&snap)),
        &mut c,
        Instant::now(),
    );
    // Replaced meanwhile: its DATA is copied, not pinned.
    snap.retire();
    assert_eq!(h2.send(&mut out, &mut c, Instant::now()), Sent::Idle);
    assert_eq!(h2.active(), 1);
    drop(out);
    assert_eq!(Arc::strong_count(&snap), 1, "only the test holds it");
}

// Large files: DATA by the verified copy from the fd the response
// started on.

/// A snapshot holding `body` as a large file (past the 1 MiB threshold).
fn large_file(tag: &str) -> (Root, Arc<Snapshot>, Vec<u8>) {
    let body: Vec<u8> = (0..(1u32 << 20) + 3000).map(|i| (i % 253) as u8).collect();
    let (root, snap) = snapshot_with(tag, &body);
    assert!(matches!(
        snap.entry(snap_index(&snap)).identity().body,
        crate::cache::Body::File(_)
    ));
    (root, snap, body)
}

/// Streams 1's request for the large file; its window is `window`.
fn request_large(h2: &mut H2, snap: &Arc<Snapshot>, window: u32, out: &mut Output) {
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, window)]);
    frame::write_window_update(&mut input, 0, (frame::MAX_WINDOW - 65_535) as u32);
    input.extend(get(1));
    let mut c = H2Counters::default();
    let mut handler = FromSnapshot(Arc::clone(snap));
    let (used, recv) = h2.recv(&input, out, &mut handler, &mut c, Instant::now());
    assert_eq!((used, recv), (input.len(), Recv::More));
}

#[test]
fn a_large_file_goes_out_whole_by_the_verified_copy() {
    let (_root, snap, body) = large_file("large");
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut out = Output::default();
    request_large(&mut h2, &snap, frame::MAX_WINDOW as u32, &mut out);
    let mut c = H2Counters::default();
    // Each call fills the output to its bound; the connection writes it
    // before the next (a call on a full output queues nothing).
    let mut bytes = Vec::new();
    loop {
        let sent = h2.send(&mut out, &mut c, Instant::now());
        let (written, ranges) = flatten(&out);
        assert_eq!(ranges, 0, "copied, not by reference");
        assert!(out.pending_owned() < crate::io::output::HIGH_WATER + 16_400);
        bytes.extend(written);
        out = Output::default();
        if sent == Sent::Idle {
            break;
        }
    }
    let got = data_payload(frames(&bytes));
    assert!(got == body, "the file, exactly");
    assert_eq!(h2.active(), 0);
}

#[test]
fn a_large_file_changed_mid_stream_resets_the_stream() {
    let (root, snap, body) = large_file("large-changed");
    let mut h2 = H2::new(cfg(), Instant::now());
    let mut out = Output::default();
    // A window of one frame: the rest waits.
    request_large(&mut h2, &snap, 16_384, &mut out);
    let mut c = H2Counters::default();
    assert_eq!(h2.send(&mut out, &mut c, Instant::now()), Sent::Idle);
    // Rewritten in place (same length, another mtime): the fd the
    // response started on now reads other bytes.
    let path = root.0.join("body.bin");
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"changed", 20_000).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    let mut more = Vec::new();
    frame::write_window_update(&mut more, 1, 100_000);
    let mut out = Output::default();
    let (_, recv) = h2.recv(&more, &mut out, &mut Fixed, &mut c, Instant::now());
    assert_eq!(recv, Recv::More);
    h2.send(&mut out, &mut c, Instant::now());
    let got = frames(out.buf());
    assert_eq!(got.len(), 1, "no DATA of another version: {got:?}");
    assert_eq!((got[0].0.kind, got[0].0.stream), (frame::RST_STREAM, 1));
    assert_eq!(got[0].1, (ErrorCode::Internal as u32).to_be_bytes());
    assert_eq!(h2.active(), 0);
    drop(body);
}

// The tables below pin what cargo-mutants found unjudged (bench/mutants.sh
// h2conn): connection state, frame handlers, the DATA scheduler.
mod frames;
mod schedule;
mod state;
