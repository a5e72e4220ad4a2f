//! The shard's side of connections driven by io_uring completions
//! (`conn/ring.rs`): receive completions pushed into connections, sends
//! submitted at the end of the turn and their completions, what a
//! connection wants of the ring after each event, and what a closing one
//! leaves to cancel.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::Shard;
use crate::conn::{Conn, RingWants};
use crate::metrics::CloseReason;
use crate::sys::{Done, Ring, EPOLLIN, EPOLLOUT};

impl Shard {
    /// The receive and send completions of the last wait.
    pub(super) fn on_ring_done(&mut self, now: Instant) {
        let Some(ring) = self.poller.completions() else {
            return;
        };
        let mut done = std::mem::take(&mut self.ring_done);
        ring.take_done(&mut done);
        for d in done.drain(..) {
            match d {
                Done::Recv {
                    token,
                    res,
                    bid,
                    more,
                } => self.on_recv(token, res, bid, more, now),
                Done::Sent { token, res, lent } => {
                    if self.conns.get_mut(token).is_some() {
                        self.dispatch(token, now, |conn, env| Some(conn.on_sent(res, lent, env)));
                    } else {
                        // Its connection closed meanwhile (the send was
                        // cancelled): the bytes are free now.
                        self.pool.give_write(lent.buf);
                    }
                }
            }
        }
        self.ring_done = done;
    }

    fn on_recv(&mut self, token: u64, res: i32, bid: Option<u16>, more: bool, now: Instant) {
        let Some(ring) = self.poller.completions() else {
            return;
        };
        let conn = self.conns.get_mut(token);
        if let Some(bid) = bid {
            // The buffer goes back whatever became of the connection.
            if let Some(conn) = conn {
                let n = usize::try_from(res).unwrap_or(0);
                conn.push(ring.received(bid, n), &mut self.pool, &self.cfg);
            }
            ring.recycle(bid);
        }
        let Some(conn) = self.conns.get_mut(token) else {
            return;
        };
        if !more {
            conn.recv_ended();
        }
        match res {
            1.. => {}
            // Out of provided buffers: armed again after this event.
            e if e == -libc::ENOBUFS => self.counters.uring_recv_nobufs += 1,
            // Ours: back-pressure or done reading.
            e if e == -libc::ECANCELED => {}
            e => conn.push_end(e),
        }
        self.dispatch(token, now, |conn, env| Some(conn.on_ready(EPOLLIN, env)));
    }

    /// Lend the output of every connection listed this turn to a ring
    /// send; the wait that follows submits them all.
    pub(super) fn submit_sends(&mut self) {
        if self.to_send.is_empty() {
            return;
        }
        let Some(ring) = self.poller.completions() else {
            return;
        };
        let mut failed = Vec::new();
        for &token in &self.to_send {
            let Some(conn) = self.conns.get_mut(token) else {
                continue;
            };
            let Some(lent) = conn.lend(&mut self.pool) else {
                if conn.wants_resume() {
                    self.resume.push(token);
                }
                continue;
            };
            match ring.send(conn.stream().as_raw_fd(), token, lent) {
                Ok(id) => conn.lent_as(id),
                Err(e) => {
                    tracing::warn!(error = %e, "io_uring send submission failed");
                    failed.push(token);
                }
            }
        }
        self.to_send.clear();
        for token in failed {
            self.close(token, CloseReason::Error);
        }
    }
}

/// After an event of a connection driven by completions: arm or cancel
/// its receive, list it for this turn's sends, arm its `EPOLLOUT` poll.
pub(super) fn upkeep(
    ring: &mut Ring,
    conn: &mut Conn,
    token: u64,
    read_buf: usize,
    to_send: &mut Vec<u64>,
) {
    let RingWants {
        arm_recv,
        cancel_recv,
        send,
        pollout,
    } = conn.ring_wants(read_buf);
    let fd = conn.stream().as_raw_fd();
    let mut res = Ok(());
    if arm_recv {
        res = ring.recv(fd, token);
    } else if cancel_recv {
        res = ring.cancel_recv(token);
    }
    if send {
        to_send.push(token);
    }
    if pollout {
        res = res.and(ring.add_once(fd, token, EPOLLOUT));
    }
    if let Err(e) = res {
        tracing::warn!(error = %e, "io_uring submission failed");
    }
}

/// A connection driven by completions closes: cancel what it left live on
/// the ring (whose completions then find no connection).
pub(super) fn leftovers(ring: &mut Ring, conn: &Conn, token: u64) {
    let left = conn.ring_leftovers();
    let mut res = Ok(());
    if left.recv {
        res = ring.cancel_recv(token);
    }
    if let Some(id) = left.send {
        res = res.and(ring.cancel_send(id));
    }
    if left.pollout {
        res = res.and(ring.remove(token));
    }
    if let Err(e) = res {
        tracing::warn!(error = %e, "io_uring cancellation failed");
    }
}
