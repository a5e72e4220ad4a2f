//! Reading a connection's socket into its buffer on the readiness path:
//! one `recv` per call in cleartext, or rustls's records decrypted into
//! plaintext (connections driven by io_uring completions take pushed bytes
//! instead, `ring.rs`).

use std::io::{self, Write};

use super::env::{self, ShardEnv};
use super::tls::{self, TlsRead};
use super::{Conn, Fill, Readable, Reading};
use crate::http::Status;
use crate::metrics::CloseReason;

impl Conn {
    /// One `read` into the buffer.
    pub(super) fn fill(&mut self, env: &mut ShardEnv<'_>) -> io::Result<Fill> {
        let lingering = matches!(self.reading, Reading::Lingering(_));
        if self.ring.completions() && (self.tls.is_none() || lingering) {
            // Driven by completions: the bytes were pushed (over TLS,
            // decrypted below).
            return self.fill_pushed();
        }
        let io = self
            .io
            .as_deref_mut()
            .expect("connection I/O state taken before use");
        if io.rbuf.len() < env.cfg.read_buf {
            // Parked without a buffer, or holding a partial head in a
            // small one: continue in a full-size buffer.
            let size = env.cfg.read_buf;
            let mut full = env.pool.read.pop().unwrap_or_else(|| vec![0; size]);
            let held = io.rend - io.rstart;
            full[..held].copy_from_slice(&io.rbuf[io.rstart..io.rend]);
            io.rbuf = full;
            io.rstart = 0;
            io.rend = held;
        }
        if lingering || io.rstart == io.rend {
            io.rstart = 0;
            io.rend = 0;
        } else if io.rend == io.rbuf.len() {
            io.rbuf.copy_within(io.rstart..io.rend, 0);
            io.rend -= io.rstart;
            io.rstart = 0;
        }
        let spare = io.rbuf.len() - io.rend;
        if spare == 0 {
            // A full buffer holds complete requests waiting behind output.
            return Ok(Fill::Drained);
        }
        if self.tls.is_some() && !lingering {
            return self.fill_tls(env);
        }
        match crate::sys::recv(&self.stream, &mut io.rbuf[io.rend..]) {
            Ok(0) => {
                self.readable = Readable::No;
                Ok(Fill::Eof)
            }
            Ok(n) => {
                io.rend += n;
                if n < spare && self.readable == Readable::Yes {
                    self.readable = Readable::No;
                }
                Ok(Fill::Data)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = Readable::No;
                Ok(Fill::Drained)
            }
            Err(e) => Err(e),
        }
    }

    /// [`fill`](Self::fill) through TLS: plaintext into the buffer. Only
    /// handshake progress reads as `Data` too, so the caller flushes the
    /// handshake's answer.
    fn fill_tls(&mut self, env: &mut ShardEnv<'_>) -> io::Result<Fill> {
        let Some(session) = self.tls.as_deref_mut() else {
            unreachable!("fill_tls on a cleartext connection")
        };
        let io = self
            .io
            .as_deref_mut()
            .expect("connection I/O state taken before use");
        let mut done = None;
        let pushed = self.ring.completions();
        let res = session.read(
            (!pushed).then_some(&self.stream),
            &mut io.rbuf[io.rend..],
            &mut done,
            &mut env.pool.cipher,
        );
        if let Some((kind, secs)) = done {
            env.counters.handshake(kind, secs);
        }
        match res? {
            TlsRead::Data { n, more } => {
                io.rend += n;
                // After a FIN, read on to the end of file (while reads
                // bring plaintext: handshake progress alone must not loop).
                if !more && (self.readable == Readable::Yes || n == 0) {
                    self.readable = Readable::No;
                }
                Ok(Fill::Data)
            }
            TlsRead::Drained => {
                self.readable = Readable::No;
                if !pushed {
                    return Ok(Fill::Drained);
                }
                // Driven by completions: the receive says whether more comes.
                match self.recv_end()? {
                    Fill::Eof => self.tls_eof(),
                    other => Ok(other),
                }
            }
            TlsRead::Eof => self.tls_eof(),
            TlsRead::PlainHttp => {
                // Answered in cleartext, bypassing the TLS session; the
                // socket's buffer is empty, so the one write goes through.
                let _ = (&self.stream).write(tls::PLAIN_HTTP_ANSWER);
                let meta = env::Meta {
                    started: env.now,
                    request_id: b"",
                    site: crate::serve::sites::DEFAULT,
                };
                env.record(&self.peer, None, None, Status::BadRequest, 0, meta);
                self.tls = None;
                io.rstart = 0;
                io.rend = 1; // unread bytes: linger rather than reset
                self.reading = Reading::Done(CloseReason::Error);
                Ok(Fill::Data)
            }
        }
    }

    /// The client closed (close_notify or FIN): answer with our
    /// close_notify, unless answers are still queued: it must follow them,
    /// which `linger` sees to.
    fn tls_eof(&mut self) -> io::Result<Fill> {
        if self.io.as_ref().is_none_or(|io| io.out.is_empty()) {
            if let Some(session) = self.tls.as_deref_mut() {
                session.close_notify();
                session.flush_alert(&self.stream);
            }
        }
        self.readable = Readable::No;
        Ok(Fill::Eof)
    }
}
