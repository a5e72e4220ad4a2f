//! Where a full build's loaders put in-memory bodies: one new segment (the
//! "placed" one), carved by the walk's sizes into a share per batch of
//! stated files ([`Share`]) and, after those, for files the walk did not
//! state ([`Walk::lazy`](super::walk::Walk::lazy)), a reserve handed out a
//! chunk at a time as sizes become known ([`Reserve`], [`Placer`]). Each
//! body is read straight into its place, never copied again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use memmap2::MmapMut;

use super::assemble::anon_segment;
use crate::cache::BuildOptions;

/// Bytes reserved beyond the stated bodies for those of files the walk did
/// not state: the memory budget, plus room for the ends of chunks
/// ([`Placer`]) left unused. Pages never written cost nothing, and what no
/// body took is unmapped after the load.
pub(super) fn reserve_len(opts: &BuildOptions, threads: usize) -> usize {
    let budget = usize::try_from(opts.cache_max_bytes).unwrap_or(usize::MAX);
    budget
        .saturating_add(budget / 16)
        .saturating_add(threads.saturating_mul(RESERVE_CHUNK))
        .min(1 << crate::cache::SEGMENT_SHIFT)
}

/// The placed segment: `stated` bytes laid out by the walk's sizes, then
/// `reserved` handed out as files are read. A reservation the kernel refuses
/// (overcommit) is done without: those bodies are copied at assembly.
pub(super) fn placed_segment(stated: usize, reserved: usize) -> anyhow::Result<Option<MmapMut>> {
    if reserved > 0 {
        let map = memmap2::MmapOptions::new()
            .len(stated + reserved)
            .no_reserve_swap()
            .map_anon();
        match map {
            Ok(map) => return Ok(Some(map)),
            Err(err) => tracing::debug!(%err, reserved, "no reservation for unstated bodies"),
        }
    }
    anon_segment(stated)
}

/// Bytes a loader takes from the [`Reserve`] at a time.
pub(super) const RESERVE_CHUNK: usize = 1024 * 1024;

/// Bodies larger than this are not placed from the reserve (they would
/// waste up to their size at a chunk's end): assembly copies them.
pub(super) const RESERVE_MAX_BODY: usize = RESERVE_CHUNK / 16;

/// The placed segment's part for files the walk did not state, whose sizes
/// are known only once they are read.
pub(super) struct Reserve<'a> {
    tail: Mutex<Share<'a>>,
}

impl<'a> Reserve<'a> {
    /// The reserve `buf`, at `off` in the placed segment.
    pub(super) fn new(off: usize, buf: &'a mut [u8]) -> Self {
        Reserve {
            tail: Mutex::new(Share { off, buf }),
        }
    }

    /// The end of the last chunk handed out: the segment's used length.
    pub(super) fn end(self) -> usize {
        self.tail
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .off
    }
}

/// One loader's chunk of the [`Reserve`].
pub(super) struct Placer<'r, 'a> {
    reserve: &'r Reserve<'a>,
    chunk: Share<'a>,
}

impl<'r, 'a> Placer<'r, 'a> {
    pub(super) fn new(reserve: &'r Reserve<'a>) -> Self {
        Placer {
            reserve,
            chunk: Share::default(),
        }
    }

    /// Where a body of unknown size is read: the rest of this loader's
    /// chunk, at most [`RESERVE_MAX_BODY`] bytes. A new chunk is taken
    /// when the rest is empty, or with `fresh` when it is not a whole
    /// `RESERVE_MAX_BODY` (the body did not fit). None once the reserve is
    /// spent.
    pub(super) fn room(&mut self, fresh: bool) -> Option<&mut [u8]> {
        let short = self.chunk.buf.len() < RESERVE_MAX_BODY;
        if self.chunk.buf.is_empty() || (fresh && short) {
            let mut tail = self.reserve.tail.lock().unwrap_or_else(|e| e.into_inner());
            let want = RESERVE_CHUNK.min(tail.buf.len());
            if want == 0 || want <= self.chunk.buf.len() {
                return None;
            }
            let (buf, rest) = std::mem::take(&mut tail.buf).split_at_mut(want);
            self.chunk = Share { off: tail.off, buf };
            tail.buf = rest;
            tail.off += want;
            drop(tail);
            crate::sys::populate_write(self.chunk.buf);
        }
        let len = self.chunk.buf.len().min(RESERVE_MAX_BODY);
        Some(&mut self.chunk.buf[..len])
    }

    /// Keep the first `len` bytes of the [`room`](Self::room) just read
    /// into as a body.
    pub(super) fn commit(&mut self, len: usize) -> Option<Dest<'a>> {
        self.chunk.take(len)
    }
}

/// A batch's part of the placed segment, from offset `off`.
#[derive(Default)]
pub(super) struct Share<'a> {
    pub(super) off: usize,
    pub(super) buf: &'a mut [u8],
}

impl<'a> Share<'a> {
    /// The next `len` bytes, for the next file placed (none for an empty
    /// file or when nothing is placed).
    pub(super) fn take(&mut self, len: usize) -> Option<Dest<'a>> {
        if len == 0 || self.buf.len() < len {
            return None;
        }
        let (buf, rest) = std::mem::take(&mut self.buf).split_at_mut(len);
        self.buf = rest;
        self.off += len;
        Some(Dest {
            off: self.off - len,
            buf,
        })
    }
}

/// Where a placed body goes: `buf`, at `off` in the placed segment, exactly
/// as long as the walk said the file is.
pub(super) struct Dest<'a> {
    pub(super) off: usize,
    pub(super) buf: &'a mut [u8],
}

/// What is left of `cache_max_bytes` for bodies in memory, when the plan
/// could not spend it (a lazy walk knows no sizes): taken by the loaders as
/// files load and by assembly for variants.
pub(super) struct Budget(AtomicU64);

impl Budget {
    pub(super) fn new(bytes: u64) -> Self {
        Budget(AtomicU64::new(bytes))
    }

    /// Take `bytes` if that many are left.
    pub(super) fn take(&self, bytes: u64) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(bytes)
            })
            .is_ok()
    }

    /// Return `bytes` taken but not used.
    pub(super) fn give_back(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Spend `bytes` granted from [`left`](Self::left), whatever was taken
    /// meanwhile (at most down to nothing).
    pub(super) fn spend(&self, bytes: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left.saturating_sub(bytes))
            });
    }

    pub(super) fn left(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
