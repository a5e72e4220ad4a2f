//! The answer to one request, as every protocol gets it: a status, the
//! head as pieces of rendered lines, typed dynamic fields, and where the
//! body comes from. HTTP/1 writes it out (`proto::http1`), HTTP/2 encodes
//! its fields to HPACK and frames its body (`proto::h2`).

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use crate::cache::{Body, Snapshot};
use crate::http::date::DateCache;
use crate::http::range::ByteRange;
use crate::http::Status;

/// Most pieces a head has (a 206: the Server line, the representation's
/// own lines and its frame's tail, `Content-Encoding`, the TLS lines, its
/// `Content-Type` and `Content-Range`).
const PIECES: usize = 6;

/// A response. Its head is `Name: value\r\n` lines in pieces, in order:
/// either the snapshot's pre-rendered head, whose first piece begins with
/// the HTTP/1 status line (`status_line`), or pieces that follow a status
/// line the protocol writes. The lines never include a connection-specific
/// field (`Connection`, `Keep-Alive`): those are HTTP/1's to add. The
/// fields that vary per response are typed, after the pieces: the Date,
/// `Content-Length` and the request id.
pub struct Response<'a> {
    pub status: Status,
    pieces: [&'a [u8]; PIECES],
    len: u8,
    status_line: bool,
    /// The shard's `Date` line of this second.
    pub date: &'a DateCache,
    /// `Content-Length`, when the pieces do not carry it.
    pub content_length: Option<u64>,
    /// The request's id (`request_id_header`), set by the connection.
    pub request_id: Option<RequestId<'a>>,
    pub body: Payload<'a>,
}

/// `request_id_header` on one response.
#[derive(Debug, Clone, Copy)]
pub struct RequestId<'a> {
    /// `Name: id\r\n`, as HTTP/1 writes it.
    pub line: &'a [u8],
    pub lower_name: &'a [u8],
    pub id: &'a [u8],
}

/// Where a response's body comes from.
pub enum Payload<'a> {
    /// No body (HEAD, 204, 304, a body-less error).
    None,
    /// A short message, sent with a newline after it (`text/plain` errors).
    Message(&'a str),
    /// Bytes of the response itself (an ACME token).
    Bytes(&'a [u8]),
    /// `len` bytes from `start` of a snapshot body; for a body on disk,
    /// the fd the response took before its head (`None`: opened when
    /// queued).
    Snapshot(Slice<'a>),
    /// `multipart/byteranges` (boxed: rare, and the response is moved
    /// on the hot path).
    Multipart(Box<Multipart<'a>>),
}

/// A range of a snapshot body.
pub struct Slice<'a> {
    pub snapshot: &'a Arc<Snapshot>,
    pub body: &'a Body,
    pub start: u64,
    pub len: u64,
    pub file: Option<Arc<File>>,
}

/// Several ranges of one body, each behind its part head.
pub struct Multipart<'a> {
    pub snapshot: &'a Arc<Snapshot>,
    pub body: &'a Body,
    pub file: Option<Arc<File>>,
    pub ranges: &'a [ByteRange],
    /// The representation's length, for each `Content-Range`.
    pub total: u64,
    /// The part's `Content-Type` value.
    pub content_type: &'a [u8],
    pub boundary: [u8; 32],
}

/// One piece of a multipart body, in order.
pub enum Part<'s> {
    Bytes(&'s [u8]),
    /// `len` bytes of the body from `start`.
    Range {
        start: u64,
        len: u64,
    },
}

impl Multipart<'_> {
    /// Every piece of the body, in order: each part's head and range, then
    /// the closing boundary.
    pub fn for_each_part(&self, mut f: impl FnMut(Part<'_>)) {
        let mut head = Vec::with_capacity(160);
        for r in self.ranges {
            head.clear();
            self.part_head(r, &mut head);
            f(Part::Bytes(&head));
            f(Part::Range {
                start: r.start,
                len: r.end - r.start + 1,
            });
        }
        head.clear();
        head.extend_from_slice(b"\r\n--");
        head.extend_from_slice(&self.boundary);
        head.extend_from_slice(b"--\r\n");
        f(Part::Bytes(&head));
    }

    fn part_head(&self, r: &ByteRange, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\r\n--");
        out.extend_from_slice(&self.boundary);
        out.extend_from_slice(b"\r\nContent-Type: ");
        out.extend_from_slice(self.content_type);
        let _ = write!(
            out,
            "\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
            r.start, r.end, self.total
        );
    }

    /// The body's length (never 0: there is at least the closing
    /// boundary).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        let mut len = 0;
        self.for_each_part(|p| {
            len += match p {
                Part::Bytes(b) => b.len() as u64,
                Part::Range { len, .. } => len,
            }
        });
        len
    }
}

impl<'a> Response<'a> {
    /// A response whose head starts with `status`'s line, written by the
    /// protocol, followed by `pieces`.
    #[inline]
    pub fn new(status: Status, date: &'a DateCache) -> Response<'a> {
        Response {
            status,
            pieces: [b""; PIECES],
            len: 0,
            status_line: false,
            date,
            content_length: None,
            request_id: None,
            body: Payload::None,
        }
    }

    /// A fresh 200's head becomes a snapshot's pre-rendered one, its
    /// first piece starting with the HTTP/1 status line.
    #[inline]
    pub fn prerendered(&mut self, head: [&'a [u8]; 3]) {
        debug_assert!(self.status == Status::Ok && self.len == 0);
        self.pieces[..3].copy_from_slice(&head);
        self.len = 3;
        self.status_line = true;
    }

    /// Append header lines (none when empty).
    #[inline]
    pub fn lines(&mut self, lines: &'a [u8]) -> &mut Self {
        if !lines.is_empty() {
            debug_assert!(
                (self.len as usize) < PIECES,
                "a head has at most {PIECES} pieces"
            );
            self.pieces[self.len as usize] = lines;
            self.len += 1;
        }
        self
    }

    /// The head's pieces, in order.
    #[inline]
    pub fn pieces(&self) -> &[&'a [u8]] {
        &self.pieces[..self.len as usize]
    }

    /// The head's pieces without the HTTP/1 status line the first may
    /// begin with: only `Name: value\r\n` lines, for the protocols that
    /// send the status as a field.
    pub fn field_pieces(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        let skip = self.status_line;
        self.pieces().iter().enumerate().map(move |(i, &piece)| {
            if skip && i == 0 {
                let eol = memchr::memchr(b'\n', piece).map_or(piece.len(), |e| e + 1);
                &piece[eol..]
            } else {
                piece
            }
        })
    }

    /// Whether the first piece begins with the HTTP/1 status line.
    #[inline]
    pub fn has_status_line(&self) -> bool {
        self.status_line
    }

    /// The body's length in bytes (0 without one): what the access log
    /// and the byte counters record.
    pub fn body_len(&self) -> u64 {
        match &self.body {
            Payload::None => 0,
            Payload::Message(m) => m.len() as u64 + 1,
            Payload::Bytes(b) => b.len() as u64,
            Payload::Snapshot(s) => s.len,
            Payload::Multipart(m) => m.len(),
        }
    }
}
