//! The shard's side of HTTP/3: its QUIC endpoint's fds watched by the
//! event source (UDP sockets for reading, for room while a transmit is
//! held, and the inbox), the endpoint run with the shard's environment,
//! and the sockets given up once an upgrade's new process reads them.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use super::backend::Poller;
use super::{Shard, UDP_BASE};
use crate::conn::{ShardEnv, Stop};
use crate::quic::{Quic, ShardSockets, Shared};

/// Shard `index`'s endpoint over `sockets`, its fds watched.
pub(super) fn start(
    index: usize,
    sockets: ShardSockets,
    shared: Arc<Shared>,
    poller: &mut Poller,
) -> io::Result<Quic> {
    let quic = Quic::new(index, sockets, shared)?;
    for i in quic.watched() {
        if let Some((fd, interest)) = quic.fd(i) {
            poller.add(&fd, UDP_BASE - i as u64, interest)?;
        }
    }
    Ok(quic)
}

impl Shard {
    /// Run `f` on the shard's QUIC endpoint, if it has one, with the
    /// shard's environment; then watch what it asks to be watched.
    pub(super) fn with_quic(&mut self, now: Instant, f: impl FnOnce(&mut Quic, &mut ShardEnv<'_>)) {
        let Some(quic) = self.quic.as_mut() else {
            return;
        };
        let mut env = shard_env!(self, now);
        f(quic, &mut env);
        for (i, on) in quic.watch_changes() {
            let token = UDP_BASE - i as u64;
            let res = match quic.fd(i) {
                Some((fd, interest)) if on => self.poller.add(&fd, token, interest),
                Some((fd, _)) => self.poller.delete(&fd, token),
                None => Ok(()),
            };
            if let Err(e) = res {
                tracing::warn!(error = %e, "watching a QUIC socket for room failed");
            }
        }
    }

    /// An upgrade's new process reads the UDP sockets now: stop watching
    /// them (the inbox stays).
    pub(super) fn quic_handed_over(&mut self) {
        if let Some(quic) = &mut self.quic {
            for i in quic.stop_reading() {
                if let Some((fd, _)) = quic.fd(i) {
                    let _ = self.poller.delete(&fd, UDP_BASE - i as u64);
                }
            }
        }
    }
}
