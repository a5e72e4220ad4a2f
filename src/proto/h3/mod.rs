//! HTTP/3 (RFC 9114) sans-I/O, beside HTTP/2: the request stream's frames
//! up to its HEADERS, the control streams' frames, QPACK with the static
//! table (`qpack`), and a [`Response`](crate::serve::Response) framed as HEADERS and DATA. The
//! QUIC transport under it (the `quic` room) moves the bytes.

pub mod frame;
pub mod qpack;

use std::ops::Range;
use std::time::Instant;

pub use frame::Code;
use frame::{head, is_h2_only};

use crate::http::request::{Request, Version};
use crate::proto::h2::hpack::Fields;
use crate::proto::h2::request::{build, parse_priority};
use crate::proto::h2::DEFAULT_URGENCY;
use crate::proto::h2::{Bucket, CONTROL_BURST, CONTROL_RATE, RESET_BURST, RESET_RATE};

/// What a request stream yielded.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The HEADERS frame's payload, at this range of the bytes read.
    Headers(Range<usize>),
    /// A HEADERS frame longer than the field section bound: answered 431
    /// without being read.
    TooLarge,
}

/// Bytes of frames a request stream may carry before its HEADERS (unknown
/// types, skipped): reserved "grease" frames are a few bytes; a client
/// that pads a stream past this is H3_EXCESSIVE_LOAD.
pub const MAX_BEFORE_HEADERS: u64 = 16 * 1024;

/// A request stream read up to its HEADERS frame (§4.1): frames of unknown
/// types before it are skipped (up to [`MAX_BEFORE_HEADERS`] bytes), DATA
/// before it or a control frame is a connection error
/// H3_FRAME_UNEXPECTED. The request's body (a method
/// with one is answered 405 or 501 by the semantics layer) is never read:
/// the stream is answered, then told to stop sending.
#[derive(Debug, Default)]
pub struct RequestReader {
    /// Payload bytes of a skipped frame still to come.
    skip: u64,
    /// Bytes of frames skipped so far.
    skipped: u64,
}

impl RequestReader {
    /// Walk the frames at the start of `buf`: the bytes done with, and the
    /// HEADERS frame once it is whole (its bytes are within those done
    /// with: decode them before dropping them).
    pub fn read(&mut self, buf: &[u8], max_section: usize) -> Result<(usize, Option<Event>), Code> {
        let mut at = 0;
        loop {
            if self.skip > 0 {
                let n = self.skip.min((buf.len() - at) as u64);
                self.skip -= n;
                at += n as usize;
                if self.skip > 0 {
                    return Ok((at, None));
                }
            }
            let Some((ty, len, n)) = head(&buf[at..]) else {
                return Ok((at, None));
            };
            match ty {
                frame::HEADERS => {
                    if len > max_section as u64 {
                        return Ok((at, Some(Event::TooLarge)));
                    }
                    let end = at + n + len as usize;
                    if buf.len() < end {
                        return Ok((at, None));
                    }
                    return Ok((end, Some(Event::Headers(at + n..end))));
                }
                frame::DATA
                | frame::SETTINGS
                | frame::GOAWAY
                | frame::MAX_PUSH_ID
                | frame::CANCEL_PUSH
                | frame::PUSH_PROMISE
                | frame::PRIORITY_UPDATE_REQUEST
                | frame::PRIORITY_UPDATE_PUSH => return Err(Code::FrameUnexpected),
                t if is_h2_only(t) => return Err(Code::FrameUnexpected),
                _ => {
                    self.skipped = self.skipped.saturating_add(n as u64 + len);
                    if self.skipped > MAX_BEFORE_HEADERS {
                        return Err(Code::ExcessiveLoad);
                    }
                    at += n;
                    self.skip = len;
                }
            }
        }
    }
}

/// A connection's flood budgets, as HTTP/2's (CVE-2023-44487 and kin):
/// QUIC's stream credit bounds the streams open at once, not how fast a
/// client opens and cancels them, nor how many frames and QPACK
/// instructions it sends on its control streams.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    resets: Bucket,
    control: Bucket,
}

/// What a spent budget was for, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    /// Request streams cancelled by the client before their answer was
    /// out, or reset by us for the client's error.
    RapidReset,
    /// Control stream frames after SETTINGS, QPACK instructions, and
    /// unidirectional streams of unknown types.
    Control,
    /// More than [`MAX_BEFORE_HEADERS`] bytes of frames before a
    /// request's HEADERS.
    BeforeHeaders,
}

impl Flood {
    pub const ALL: [Flood; 3] = [Flood::RapidReset, Flood::Control, Flood::BeforeHeaders];

    pub fn label(self) -> &'static str {
        match self {
            Flood::RapidReset => "rapid_reset",
            Flood::Control => "control_flood",
            Flood::BeforeHeaders => "frames_before_headers",
        }
    }
}

impl Budgets {
    pub fn new(now: Instant) -> Budgets {
        Budgets {
            resets: Bucket::new(RESET_BURST, now),
            control: Bucket::new(CONTROL_BURST, now),
        }
    }

    /// A request stream ended early (cancelled, or reset for an error):
    /// false once the budget is spent.
    pub fn reset(&mut self, now: Instant) -> bool {
        self.resets.take(RESET_BURST, RESET_RATE, now)
    }

    /// `n` control frames or instructions: false once the budget is spent.
    pub fn control(&mut self, n: u32, now: Instant) -> bool {
        (0..n).all(|_| self.control.take(CONTROL_BURST, CONTROL_RATE, now))
    }
}

/// A request whose field section could not be decoded or broke RFC 9114
/// §4.3 (pseudo-headers, connection-specific fields): a stream error
/// H3_MESSAGE_ERROR or, for QPACK, a connection error.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    Qpack,
    Malformed,
}

/// Decode a HEADERS payload into `fields`, then build the request from
/// them under the same rules as an HTTP/2 request (RFC 9114 §4.3 follows
/// RFC 9113 §8.3).
pub fn request<'f>(
    payload: &[u8],
    max_list: usize,
    fields: &'f mut Fields,
) -> Result<(Request<'f>, Priority), Bad> {
    qpack::decode(payload, max_list, fields).map_err(|_| Bad::Qpack)?;
    request_of(fields)
}

/// The request `fields` (decoded) make, and its `priority` field.
pub fn request_of(fields: &Fields) -> Result<(Request<'_>, Priority), Bad> {
    match build(fields, Version::Http3) {
        Ok(built) => Ok((
            built.req,
            Priority {
                urgency: built.urgency,
                incremental: built.incremental,
            },
        )),
        Err(_) => Err(Bad::Malformed),
    }
}

/// A request's RFC 9218 priority: its `priority` field, then any
/// PRIORITY_UPDATE for its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// 0 (first) to 7.
    pub urgency: u8,
    /// Whether it may share the connection with others of its urgency
    /// (else it goes whole, in request order).
    pub incremental: bool,
}

impl Default for Priority {
    fn default() -> Priority {
        Priority {
            urgency: DEFAULT_URGENCY,
            incremental: false,
        }
    }
}

/// A PRIORITY_UPDATE frame for a request stream (RFC 9218 §7.2): the
/// stream it names, which must be one a client opens (H3_ID_ERROR), and
/// its new priority.
pub fn priority_update(payload: &[u8]) -> Result<(u64, Priority), Code> {
    let (id, n) = frame::varint(payload).ok_or(Code::FrameError)?;
    if id % 4 != 0 {
        return Err(Code::IdError);
    }
    let (urgency, incremental) = parse_priority(&payload[n..]);
    Ok((
        id,
        Priority {
            urgency,
            incremental,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_bytes(ty: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::put_head(&mut out, ty, payload.len());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn headers_are_found_after_unknown_frames_and_whole_only() {
        let mut stream = frame_bytes(0x21, b"reserved");
        stream.extend(frame_bytes(frame::HEADERS, b"\x00\x00\xd1"));
        let mut r = RequestReader::default();
        // A byte at a time: nothing until the HEADERS frame is whole.
        let mut done = 0;
        for end in 1..stream.len() {
            let (used, ev) = r.read(&stream[done..end], 1024).unwrap();
            assert_eq!(ev, None, "at {end}");
            done += used;
        }
        let (used, ev) = r.read(&stream[done..], 1024).unwrap();
        let Some(Event::Headers(range)) = ev else {
            panic!("{ev:?}");
        };
        assert_eq!(&stream[done..][range], b"\x00\x00\xd1");
        assert_eq!(done + used, stream.len());
    }

    #[test]
    fn data_or_control_frames_first_are_unexpected() {
        for ty in [
            frame::DATA,
            frame::SETTINGS,
            frame::GOAWAY,
            frame::MAX_PUSH_ID,
            0x2,
            0x6,
            0x8,
            0x9,
        ] {
            let mut r = RequestReader::default();
            assert_eq!(
                r.read(&frame_bytes(ty, b"x"), 1024),
                Err(Code::FrameUnexpected),
                "{ty:#x}"
            );
        }
    }

    #[test]
    fn an_oversized_section_is_refused_before_it_arrives() {
        let mut head = Vec::new();
        frame::put_head(&mut head, frame::HEADERS, 1 << 20);
        let mut r = RequestReader::default();
        assert_eq!(r.read(&head, 16_384), Ok((0, Some(Event::TooLarge))));
    }

    #[test]
    fn a_request_builds_as_http3() {
        let mut fields = Fields::default();
        // GET https /index.html, :authority a.test.
        let mut block = vec![0x00, 0x00, 0xd1, 0xd7, 0x51, 0x0b];
        block.extend_from_slice(b"/index.html");
        block.extend_from_slice(&[0x50, 6]);
        block.extend_from_slice(b"a.test");
        let (req, _) = request(&block, 1 << 16, &mut fields).ok().unwrap();
        assert_eq!(req.version, Version::Http3);
        assert_eq!(req.target, b"/index.html");
        assert_eq!(req.host, Some(&b"a.test"[..]));
        let mut fields = Fields::default();
        assert_eq!(
            request(&[0x00, 0x00, 0xd1], 1 << 16, &mut fields).err(),
            Some(Bad::Malformed)
        );
        assert_eq!(
            request(&[0x01, 0x00], 1 << 16, &mut fields).err(),
            Some(Bad::Qpack)
        );
    }

    #[test]
    fn frames_before_headers_are_bounded() {
        // Grease frames up to the bound are skipped, one byte past it is
        // H3_EXCESSIVE_LOAD, however the bytes arrive.
        let mut stream = Vec::new();
        while stream.len() + 100 <= MAX_BEFORE_HEADERS as usize {
            stream.extend(frame_bytes(0x21, &[0; 98]));
        }
        let mut r = RequestReader::default();
        assert_eq!(r.read(&stream, 1024), Ok((stream.len(), None)));
        let left = MAX_BEFORE_HEADERS as usize - stream.len();
        let mut r = RequestReader::default();
        let last = frame_bytes(0x21, &vec![0; left - 2]);
        stream.extend(&last);
        assert_eq!(r.read(&stream, 1024), Ok((stream.len(), None)));
        assert_eq!(
            r.read(&frame_bytes(0x21, &[]), 1024),
            Err(Code::ExcessiveLoad)
        );
    }

    #[test]
    fn budgets_refill_with_time() {
        let t0 = Instant::now();
        let mut b = Budgets::new(t0);
        assert!((0..200).all(|_| b.reset(t0)));
        assert!(!b.reset(t0), "the burst is spent");
        assert!(
            b.reset(t0 + std::time::Duration::from_millis(20)),
            "100 a second"
        );
        assert!(b.control(1000, t0));
        assert!(!b.control(1, t0));
    }

    #[test]
    fn priority_updates_name_a_request_stream() {
        let mut p = Vec::new();
        frame::put_varint(&mut p, 8);
        p.extend_from_slice(b"u=1, i");
        let want = Priority {
            urgency: 1,
            incremental: true,
        };
        assert_eq!(priority_update(&p), Ok((8, want)));
        assert_eq!(
            priority_update(b"\x02u=1"),
            Err(Code::IdError),
            "a server stream"
        );
        assert_eq!(priority_update(b""), Err(Code::FrameError));
        let default = Priority::default();
        assert_eq!(priority_update(b"\x04"), Ok((4, default)), "an empty field");
        // Only on the control stream.
        let mut r = RequestReader::default();
        let f = frame_bytes(frame::PRIORITY_UPDATE_REQUEST, &p);
        assert_eq!(r.read(&f, 1024), Err(Code::FrameUnexpected));
    }
}
