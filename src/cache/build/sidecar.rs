//! Precompressed sidecars (`x.br`, `x.zst`, `x.gz` beside `x`): read
//! like any walked file, and used as a variant only when not older than
//! their source and decoding to exactly its bytes; a rejection is logged
//! and counted.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::load::{open_regular, read_prefix, unsettled, MAX_READ_ATTEMPTS};
use super::walk::{FileJob, Walk};
use crate::cache::{compress, FileStamp};
use crate::http::accept::Coding;

/// Why a sidecar is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// Modified before its source: written for an older version of it.
    Older,
    /// Does not decode to the source's bytes.
    Mismatch,
}

impl Rejected {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Rejected::Older => "older",
            Rejected::Mismatch => "mismatch",
        }
    }
}

/// Sidecars rejected by builds since start, by [`Rejected`] (older,
/// mismatch); exported as `shardhttpd_sidecar_rejected_total`. A rejected
/// sidecar is recorded in its entry's [`Source`](crate::cache::Source), so
/// a rebuild that changes neither file reuses the entry and counts it once.
pub(crate) static SIDECARS_REJECTED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Whether a sidecar may stand in for its source (`source`: its stamp,
/// length and content xxh3-128): not older than it (by mtime), and decoding
/// to exactly its bytes (same length and hash; the build has both at hand,
/// and decoding streams).
pub(super) fn sidecar_verdict(
    coding: Coding,
    bytes: &[u8],
    stamp: &FileStamp,
    (source_stamp, len, hash): (&FileStamp, u64, u128),
) -> Option<Rejected> {
    if stamp.mtime_ns < source_stamp.mtime_ns {
        Some(Rejected::Older)
    } else if !compress::decodes_to(coding, bytes, len, hash) {
        Some(Rejected::Mismatch)
    } else {
        None
    }
}

pub(super) fn reject_sidecar(sidecar: &Path, source: &Path, reason: Rejected) {
    SIDECARS_REJECTED[reason as usize].fetch_add(1, Ordering::Relaxed);
    let why = match reason {
        Rejected::Older => "is older than its source",
        Rejected::Mismatch => "does not decode to its source's bytes",
    };
    tracing::warn!(
        sidecar = %sidecar.display(),
        source = %source.display(),
        reason = reason.label(),
        "precompressed sidecar {why}; not used (the variant is compressed from the source instead, when compression is on)"
    );
}

/// A sidecar's bytes and stamp; `None` when it is too large to hold in memory
/// (variants are never sent from a file).
pub(super) fn read_sidecar(
    walk: &Walk<'_>,
    side: &FileJob,
    below: u64,
) -> io::Result<Option<(Vec<u8>, FileStamp)>> {
    let (file, mut meta) = open_regular(walk, &side.path, &side.stamp)?;
    for _ in 0..MAX_READ_ATTEMPTS {
        let before = FileStamp::of(&meta);
        if before.size >= below {
            return Ok(None);
        }
        if let Some(wait) = unsettled(&before, SystemTime::now()) {
            std::thread::sleep(wait);
            meta = file.metadata()?;
            continue;
        }
        let bytes = read_prefix(&file, before.size)?;
        meta = file.metadata()?;
        if FileStamp::of(&meta) == before {
            return Ok(Some((bytes, before)));
        }
    }
    Err(io::Error::other("sidecar kept changing while read"))
}
