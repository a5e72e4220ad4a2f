//! HTTP/3 framing (RFC 9114 §7): QUIC variable-length integers, frame
//! headers, the stream and frame types and settings this server knows, and
//! the error codes.

/// Frame types (§7.2).
pub const DATA: u64 = 0x0;
pub const HEADERS: u64 = 0x1;
pub const CANCEL_PUSH: u64 = 0x3;
pub const SETTINGS: u64 = 0x4;
pub const PUSH_PROMISE: u64 = 0x5;
pub const GOAWAY: u64 = 0x7;
pub const MAX_PUSH_ID: u64 = 0xd;
/// RFC 9218 §7.2: a request's new priority, on the control stream.
pub const PRIORITY_UPDATE_REQUEST: u64 = 0xf0700;
pub const PRIORITY_UPDATE_PUSH: u64 = 0xf0701;

/// Unidirectional stream types (§6.2; RFC 9204 §4.2).
pub const CONTROL_STREAM: u64 = 0x00;
pub const PUSH_STREAM: u64 = 0x01;
pub const QPACK_ENCODER_STREAM: u64 = 0x02;
pub const QPACK_DECODER_STREAM: u64 = 0x03;

/// Settings (§7.2.4.1; RFC 9204 §5).
pub const SETTINGS_QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
pub const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x06;
pub const SETTINGS_QPACK_BLOCKED_STREAMS: u64 = 0x07;

/// Error codes (§8.1; RFC 9204 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Code {
    NoError = 0x100,
    GeneralProtocolError = 0x101,
    InternalError = 0x102,
    StreamCreationError = 0x103,
    ClosedCriticalStream = 0x104,
    FrameUnexpected = 0x105,
    FrameError = 0x106,
    ExcessiveLoad = 0x107,
    IdError = 0x108,
    SettingsError = 0x109,
    MissingSettings = 0x10a,
    RequestRejected = 0x10b,
    RequestCancelled = 0x10c,
    RequestIncomplete = 0x10d,
    MessageError = 0x10e,
    QpackDecompressionFailed = 0x200,
    QpackEncoderStreamError = 0x201,
    QpackDecoderStreamError = 0x202,
}

/// The largest value a variable-length integer holds.
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// RFC 9000 §16: a variable-length integer at the start of `buf`, and its
/// length; `None` when `buf` holds only part of it.
pub fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    Some((v, len))
}

/// Append `v` (at most [`VARINT_MAX`]) as a variable-length integer, in
/// the fewest bytes.
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    debug_assert!(v <= VARINT_MAX);
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// A frame's header: its type, its payload's length, and the header's own
/// length; `None` while `buf` holds only part of it.
pub fn head(buf: &[u8]) -> Option<(u64, u64, usize)> {
    let (ty, a) = varint(buf)?;
    let (len, b) = varint(&buf[a..])?;
    Some((ty, len, a + b))
}

/// Append a frame header.
pub fn put_head(out: &mut Vec<u8>, ty: u64, len: usize) {
    put_varint(out, ty);
    put_varint(out, len as u64);
}

/// The frame types of HTTP/2 that HTTP/3 reserves (§7.2.8): receiving one
/// is a connection error H3_FRAME_UNEXPECTED.
pub fn is_h2_only(ty: u64) -> bool {
    matches!(ty, 0x2 | 0x6 | 0x8 | 0x9)
}

/// The server's control stream preamble: its type, then SETTINGS with no
/// QPACK dynamic table (capacity 0, no blocked streams: both the
/// defaults, so only the field section bound is sent) and a reserved
/// setting (§7.2.4.1), so that clients keep ignoring unknown ones.
pub fn control_preamble(out: &mut Vec<u8>, max_field_section: u64) {
    put_varint(out, CONTROL_STREAM);
    let mut payload = Vec::with_capacity(16);
    put_varint(&mut payload, SETTINGS_MAX_FIELD_SECTION_SIZE);
    put_varint(&mut payload, max_field_section);
    // A reserved identifier, 0x1f * N + 0x21.
    put_varint(&mut payload, 0x1f * 7 + 0x21);
    put_varint(&mut payload, 0);
    put_head(out, SETTINGS, payload.len());
    out.extend_from_slice(&payload);
}

/// A GOAWAY frame naming the first request stream id not taken.
pub fn goaway(out: &mut Vec<u8>, id: u64) {
    let mut payload = Vec::with_capacity(8);
    put_varint(&mut payload, id);
    put_head(out, GOAWAY, payload.len());
    out.extend_from_slice(&payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_in_the_fewest_bytes() {
        // RFC 9000 §A.1's examples, then each length's bounds.
        assert_eq!(
            varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(varint(&[0x25]), Some((37, 1)));
        assert_eq!(varint(&[0x40, 0x25]), Some((37, 2)));
        assert_eq!(varint(&[0x7b]), None);
        assert_eq!(varint(&[]), None);
        for (v, len) in [
            (0, 1),
            (63, 1),
            (64, 2),
            (16_383, 2),
            (16_384, 4),
            ((1 << 30) - 1, 4),
            (1 << 30, 8),
            (VARINT_MAX, 8),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), len, "{v}");
            assert_eq!(varint(&out), Some((v, len)), "{v}");
        }
    }

    #[test]
    fn the_preamble_is_a_control_stream_with_settings() {
        let mut out = Vec::new();
        control_preamble(&mut out, 16_384);
        assert_eq!(out[0], 0x00);
        let (ty, len, n) = head(&out[1..]).unwrap();
        assert_eq!(ty, SETTINGS);
        assert_eq!(1 + n + len as usize, out.len());
        let mut p = &out[1 + n..];
        let mut settings = Vec::new();
        while !p.is_empty() {
            let (id, a) = varint(p).unwrap();
            let (v, b) = varint(&p[a..]).unwrap();
            settings.push((id, v));
            p = &p[a + b..];
        }
        assert_eq!(
            settings,
            [
                (SETTINGS_MAX_FIELD_SECTION_SIZE, 16_384),
                (0x1f * 7 + 0x21, 0)
            ]
        );
    }
}
