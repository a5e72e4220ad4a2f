//! HTTP/1.1 responses: a [`Response`] written into the output queue. The
//! head's pieces go out as they are (a snapshot hit is its pre-rendered
//! head), behind the status line when they lack it, then the typed fields
//! (Date, `Content-Length`, the request id) and what only HTTP/1 has: the
//! `Connection` field the persistence rules chose. The request
//! side is `http::request`.

use std::io::Write;

use crate::io::output::Output;
use crate::serve::{Part, Payload, Response};

/// What the `Connection` header says about the connection after this response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// HTTP/1.1 default: no header needed.
    KeepAlive11,
    /// HTTP/1.0 with `Connection: keep-alive`: echo it.
    KeepAlive10,
    /// The connection closes after this response.
    Close,
}

impl Persist {
    fn line(self) -> &'static [u8] {
        match self {
            Persist::KeepAlive11 => b"",
            Persist::KeepAlive10 => b"Connection: keep-alive\r\n",
            Persist::Close => b"Connection: close\r\n",
        }
    }
}

/// Append `resp` to `out`. Returns the body bytes queued.
#[inline(always)]
pub fn write(resp: &Response<'_>, persist: Persist, out: &mut Output) -> u64 {
    let buf = out.buf();
    if !resp.has_status_line() {
        buf.extend_from_slice(resp.status.line());
    }
    for piece in resp.pieces() {
        buf.extend_from_slice(piece);
    }
    buf.extend_from_slice(resp.date.line());
    if let Some(len) = resp.content_length {
        content_length(buf, len);
    }
    if let Some(id) = &resp.request_id {
        buf.extend_from_slice(id.line);
    }
    buf.extend_from_slice(persist.line());
    buf.extend_from_slice(b"\r\n");
    match &resp.body {
        Payload::None => 0,
        Payload::Message(m) => {
            buf.extend_from_slice(m.as_bytes());
            buf.push(b'\n');
            m.len() as u64 + 1
        }
        Payload::Bytes(b) => {
            buf.extend_from_slice(b);
            b.len() as u64
        }
        Payload::Snapshot(s) => {
            out.push_body(s.snapshot, s.body, s.start, s.len, s.file.as_ref());
            s.len
        }
        Payload::Multipart(m) => {
            let mut sent = 0;
            m.for_each_part(|part| match part {
                Part::Bytes(b) => {
                    out.buf().extend_from_slice(b);
                    sent += b.len() as u64;
                }
                Part::Range { start, len } => {
                    out.push_body(m.snapshot, m.body, start, len, m.file.as_ref());
                    sent += len;
                }
            });
            sent
        }
    }
}

#[cold]
fn content_length(buf: &mut Vec<u8>, len: u64) {
    let _ = write!(buf, "Content-Length: {len}\r\n");
}
