//! HTTP/3 (RFC 9114) sans-I/O, beside HTTP/2: the request stream's frames
//! up to its HEADERS, the control streams' frames, QPACK with the static
//! table (`qpack`), and a [`Response`] framed as HEADERS and DATA. The
//! QUIC transport under it (the `quic` room) moves the bytes.

pub mod frame;
pub mod qpack;

use std::ops::Range;

pub use frame::Code;
use frame::{head, is_h2_only};

use crate::http::request::{Request, Version};
use crate::proto::h2::hpack::Fields;
use crate::proto::h2::request::build;
use crate::serve::Response;

/// What a request stream yielded.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The HEADERS frame's payload, at this range of the bytes read.
    Headers(Range<usize>),
    /// A HEADERS frame longer than the field section bound: answered 431
    /// without being read.
    TooLarge,
}

/// A request stream read up to its HEADERS frame (§4.1): frames of unknown
/// types before it are skipped, DATA before it or a control frame is a
/// connection error H3_FRAME_UNEXPECTED. The request's body (a method
/// with one is answered 405 or 501 by the semantics layer) is never read:
/// the stream is answered, then told to stop sending.
#[derive(Debug, Default)]
pub struct RequestReader {
    /// Payload bytes of a skipped frame still to come.
    skip: u64,
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
                | frame::PUSH_PROMISE => return Err(Code::FrameUnexpected),
                t if is_h2_only(t) => return Err(Code::FrameUnexpected),
                _ => {
                    at += n;
                    self.skip = len;
                }
            }
        }
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
) -> Result<Request<'f>, Bad> {
    qpack::decode(payload, max_list, fields).map_err(|_| Bad::Qpack)?;
    request_of(fields)
}

/// The request `fields` (decoded) make.
pub fn request_of(fields: &Fields) -> Result<Request<'_>, Bad> {
    match build(fields, Version::Http3) {
        Ok(built) => Ok(built.req),
        Err(_) => Err(Bad::Malformed),
    }
}

/// The response's HEADERS frame, its field section encoded in `section`
/// (a reused scratch) first: the frame's length goes before it.
pub fn headers(resp: &Response<'_>, section: &mut Vec<u8>, out: &mut Vec<u8>) {
    section.clear();
    qpack::encode(resp, section);
    frame::put_head(out, frame::HEADERS, section.len());
    out.extend_from_slice(section);
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
        let req = request(&block, 1 << 16, &mut fields).ok().unwrap();
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
}
