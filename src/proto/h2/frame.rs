//! HTTP/2 framing (RFC 9113 §4, §6): pure decode and encode over byte
//! slices, no state. The connection (`h2::conn`) decides what a frame
//! means; this module only says what it is and writes the ones we send.

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Every frame starts with a 9-byte header.
pub const HEAD_LEN: usize = 9;

/// SETTINGS_MAX_FRAME_SIZE's initial value, and the least it may be set to.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;

/// Largest flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// SETTINGS_INITIAL_WINDOW_SIZE's initial value.
pub const DEFAULT_WINDOW: i64 = 65_535;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
/// RFC 9218 §7.1.
pub const PRIORITY_UPDATE: u8 = 0x10;

pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_ACK: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// RFC 9218 §2.1: we use the priority signals.
pub const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 0x9;

/// RFC 9113 §7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    Compression = 0x9,
    EnhanceYourCalm = 0xb,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 10] = [
        ErrorCode::NoError,
        ErrorCode::Protocol,
        ErrorCode::Internal,
        ErrorCode::FlowControl,
        ErrorCode::StreamClosed,
        ErrorCode::FrameSize,
        ErrorCode::RefusedStream,
        ErrorCode::Cancel,
        ErrorCode::Compression,
        ErrorCode::EnhanceYourCalm,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ErrorCode::NoError => "no_error",
            ErrorCode::Protocol => "protocol_error",
            ErrorCode::Internal => "internal_error",
            ErrorCode::FlowControl => "flow_control_error",
            ErrorCode::StreamClosed => "stream_closed",
            ErrorCode::FrameSize => "frame_size_error",
            ErrorCode::RefusedStream => "refused_stream",
            ErrorCode::Cancel => "cancel",
            ErrorCode::Compression => "compression_error",
            ErrorCode::EnhanceYourCalm => "enhance_your_calm",
        }
    }
}

/// A frame header (RFC 9113 §4.1). The reserved bit of the stream id is
/// dropped, as the RFC says receivers must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// The header at the start of `b`, if 9 bytes are there.
    pub fn parse(b: &[u8]) -> Option<Head> {
        let h: &[u8; HEAD_LEN] = b.get(..HEAD_LEN)?.try_into().ok()?;
        Some(Head {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    #[inline]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Append a frame header.
#[inline]
pub fn write_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len < 1 << 24);
    let l = (len as u32).to_be_bytes();
    let s = (stream & 0x7fff_ffff).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]);
}

/// The payload of a PADDED frame without its padding (RFC 9113 §6.1):
/// `None` when the pad length is not less than the payload.
pub fn unpad(flags: u8, payload: &[u8]) -> Option<&[u8]> {
    if flags & FLAG_PADDED == 0 {
        return Some(payload);
    }
    let (&pad, rest) = payload.split_first()?;
    let pad = usize::from(pad);
    (pad <= rest.len()).then(|| &rest[..rest.len() - pad])
}

/// The priority fields at the start of a HEADERS payload (or a PRIORITY
/// frame): the stream it depends on. Weight and exclusivity are ignored
/// (RFC 9113 §5.3.2 deprecates the scheme).
pub fn dependency(b: &[u8]) -> Option<u32> {
    let d: [u8; 4] = b.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(d) & 0x7fff_ffff)
}

/// One SETTINGS parameter per 6 bytes; `None` when the length is not a
/// multiple of 6.
pub fn settings(payload: &[u8]) -> Option<impl Iterator<Item = (u16, u32)> + '_> {
    (payload.len() % 6 == 0).then(|| {
        payload.chunks_exact(6).map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
    })
}

/// A big-endian u32 at the start of `b` with the reserved bit cleared
/// (WINDOW_UPDATE's increment, GOAWAY's last stream id).
pub fn u31(b: &[u8]) -> Option<u32> {
    let d: [u8; 4] = b.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(d) & 0x7fff_ffff)
}

pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    write_head(out, params.len() * 6, SETTINGS, 0, 0);
    for &(id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_head(out, 0, SETTINGS, FLAG_ACK, 0);
}

pub fn write_ping_ack(out: &mut Vec<u8>, data: &[u8]) {
    write_head(out, 8, PING, FLAG_ACK, 0);
    out.extend_from_slice(data);
}

pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
}

pub fn write_rst(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode) {
    write_head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

/// A header block as a HEADERS frame and as many CONTINUATION frames as
/// `max_frame` requires.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let mut pieces = block.chunks(max_frame.max(1));
    let first = pieces.next().unwrap_or_default();
    let last = first.len() == block.len();
    let mut flags = if end_stream { FLAG_END_STREAM } else { 0 };
    if last {
        flags |= FLAG_END_HEADERS;
    }
    write_head(out, first.len(), HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut written = first.len();
    for piece in pieces {
        written += piece.len();
        let flags = if written == block.len() {
            FLAG_END_HEADERS
        } else {
            0
        };
        write_head(out, piece.len(), CONTINUATION, flags, stream);
        out.extend_from_slice(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trips_and_drops_the_reserved_bit() {
        let mut b = Vec::new();
        write_head(&mut b, 0x12_3456, HEADERS, FLAG_END_HEADERS, 7);
        assert_eq!(b, [0x12, 0x34, 0x56, 1, 4, 0, 0, 0, 7]);
        let h = Head::parse(&b).unwrap();
        assert_eq!(
            h,
            Head {
                len: 0x12_3456,
                kind: HEADERS,
                flags: FLAG_END_HEADERS,
                stream: 7
            }
        );
        let reserved = [0, 0, 0, 0, 0, 0x80, 0, 0, 3];
        assert_eq!(Head::parse(&reserved).unwrap().stream, 3);
        assert_eq!(Head::parse(&b[..8]), None);
    }

    #[test]
    fn padding_is_checked_and_removed() {
        type Case<'a> = (u8, &'a [u8], Option<&'a [u8]>);
        let cases: &[Case] = &[
            (0, b"abc", Some(b"abc")),
            (FLAG_PADDED, b"\x02abcXY", Some(b"abc")),
            (FLAG_PADDED, b"\x00abc", Some(b"abc")),
            (FLAG_PADDED, b"\x03abc", Some(b"")),
            (FLAG_PADDED, b"\x04abc", None),
            (FLAG_PADDED, b"", None),
        ];
        for &(flags, payload, want) in cases {
            assert_eq!(unpad(flags, payload), want, "{payload:?}");
        }
    }

    #[test]
    fn settings_are_read_in_sixes() {
        let mut b = Vec::new();
        write_settings(&mut b, &[(SETTINGS_MAX_CONCURRENT_STREAMS, 100), (0xff, 1)]);
        let h = Head::parse(&b).unwrap();
        assert_eq!((h.len, h.kind, h.flags, h.stream), (12, SETTINGS, 0, 0));
        let got: Vec<_> = settings(&b[HEAD_LEN..]).unwrap().collect();
        assert_eq!(got, [(SETTINGS_MAX_CONCURRENT_STREAMS, 100), (0xff, 1)]);
        assert!(settings(&b[HEAD_LEN..HEAD_LEN + 7]).is_none());
    }

    #[test]
    fn control_frames_have_their_fixed_layouts() {
        let mut b = Vec::new();
        write_goaway(&mut b, 0x8000_0005, ErrorCode::EnhanceYourCalm);
        assert_eq!(
            b,
            [0, 0, 8, GOAWAY, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0xb]
        );
        b.clear();
        write_rst(&mut b, 3, ErrorCode::RefusedStream);
        assert_eq!(b, [0, 0, 4, RST_STREAM, 0, 0, 0, 0, 3, 0, 0, 0, 7]);
        b.clear();
        write_window_update(&mut b, 0, 65_535);
        assert_eq!(u31(&b[HEAD_LEN..]), Some(65_535));
        b.clear();
        write_ping_ack(&mut b, b"12345678");
        assert_eq!(&b[..5], [0, 0, 8, PING, FLAG_ACK]);
        assert_eq!(&b[HEAD_LEN..], b"12345678");
    }

    #[test]
    fn a_large_header_block_continues_in_continuation_frames() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut b = Vec::new();
        write_headers(&mut b, 1, &block, true, 16);
        let mut at = 0;
        let mut got = Vec::new();
        let mut kinds = Vec::new();
        while let Some(h) = Head::parse(&b[at..]) {
            kinds.push((h.kind, h.flags));
            got.extend_from_slice(&b[at + HEAD_LEN..at + HEAD_LEN + h.len as usize]);
            at += HEAD_LEN + h.len as usize;
        }
        assert_eq!(got, block);
        assert_eq!(
            kinds,
            [
                (HEADERS, FLAG_END_STREAM),
                (CONTINUATION, 0),
                (CONTINUATION, FLAG_END_HEADERS)
            ]
        );
        b.clear();
        write_headers(&mut b, 1, &block[..3], false, 16);
        assert_eq!(Head::parse(&b).unwrap().flags, FLAG_END_HEADERS);
    }
    #[test]
    fn a_dependency_is_the_first_31_bits_of_the_priority_fields() {
        // The exclusive flag (top bit) is not part of the stream id; the
        // weight byte after the four is ignored.
        assert_eq!(dependency(&[0x80, 0, 0, 5, 16]), Some(5));
        assert_eq!(dependency(&[0x7f, 0xff, 0xff, 0xff]), Some(0x7fff_ffff));
        assert_eq!(dependency(&[0, 0, 0x01, 0x02]), Some(0x102));
        assert_eq!(dependency(&[0, 0, 1]), None);
    }

    #[test]
    fn error_code_labels_are_the_metric_label_values() {
        // `reason` label values of the reset and GOAWAY counters: dashboards
        // and alerts match on them, so they are pinned.
        let labels: Vec<&str> = ErrorCode::ALL.iter().map(|e| e.label()).collect();
        assert_eq!(
            labels,
            [
                "no_error",
                "protocol_error",
                "internal_error",
                "flow_control_error",
                "stream_closed",
                "frame_size_error",
                "refused_stream",
                "cancel",
                "compression_error",
                "enhance_your_calm"
            ]
        );
    }
}
