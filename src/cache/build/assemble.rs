//! Pass 3, **assembly**: entries in walk order with their heads rendered,
//! the final path index, error pages, and a fresh arena holding every
//! in-memory body (reused bodies copied from the old one).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use xxhash_rust::xxh3::xxh3_128;

use super::arrivals::Arrivals;
use super::load::{Loaded, LoadedBody, LoadedFile, Variant};
use super::plan::{add_dir_slashes, Plan, Step};
use super::render::{render_entry, Heads};
use super::walk::{FileJob, Walk};
use crate::cache::{pack_off, unpack_off, Segment, SEGMENT_SHIFT};
use crate::cache::{
    Body, BuildOptions, Entries, Entry, FileStamp, LargeFile, PathIndex, Repr, ReprRef, Resource,
    Snapshot, SnapshotStats, Source, Walked, SIDECARS,
};
use crate::http::accept::Coding;

/// Where an arena body's bytes come from at assembly.
pub(super) enum Bytes {
    /// A range of the old snapshot's arena.
    Old {
        off: usize,
        len: usize,
    },
    New(Vec<u8>),
    /// A variant sent from its own fd (a large sidecar): not in any arena.
    File(Box<LargeFile>),
}

/// The inputs [`render_entry`] needs for one representation.
pub(super) struct ReprParts {
    pub(super) len: u64,
    pub(super) hash: u128,
    pub(super) body: Body,
}

/// Entries laid out in walk order (by [`lay_out`], while the load runs),
/// before the index and the body segments are final.
pub(super) struct Laid {
    stats: SnapshotStats,
    arena: ArenaPlan,
    entries: Entries,
    /// What each walked file became, by walk index.
    remap: Vec<Option<Resource>>,
    budget_spent: bool,
}

/// Pass 3, first half: every entry in walk order, its heads rendered, its
/// bodies queued for the arena; loaded files are taken from `arrivals` as
/// the load delivers them.
pub(super) fn lay_out(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    plan: &Plan,
    arrivals: &mut Arrivals<'_>,
    old: Option<&Snapshot>,
) -> anyhow::Result<Laid> {
    let mut stats = SnapshotStats::default();
    let mut arena = ArenaPlan::default();
    let mut variant_budget = opts.cache_max_bytes.saturating_sub(plan.identity_mem);
    let mut entries = Entries::default();
    // Each new entry's heads are rendered here, then packed into its chunk.
    let mut heads = Heads::default();
    let mut remap: Vec<Option<Resource>> = vec![None; walk.files.len()];
    let mut budget_spent = plan.budget_spent;

    for ((i, job), step) in walk.files.iter().enumerate().zip(plan.steps.iter()) {
        let loaded = match step {
            Step::Load { .. } => Some(arrivals.next_load()?),
            _ => None,
        };
        // A file that never held still keeps the version the old snapshot
        // has under its URL, if any.
        let step = match (*step, &loaded) {
            (Step::Load { .. }, Some(Loaded::Unsettled)) => {
                match old.and_then(|old| old.resolve(&job.url)) {
                    Some(Resource::File(o)) => Step::Reuse(o),
                    _ => continue,
                }
            }
            (step, _) => step,
        };
        if let Step::Reuse(o) = step {
            let old = old.expect("reuse needs an old snapshot");
            let entry = old.entry(o);
            let variant_bytes: u64 = entry
                .encoded
                .iter()
                .filter(|(_, r)| matches!(r.body, Body::Mem { .. }))
                .map(|(_, r)| r.len)
                .sum();
            if variant_bytes <= variant_budget {
                // Its heads are a pure function of inputs that did not
                // change: copy them rather than render them again.
                variant_budget -= variant_bytes;
                stats.reused += 1;
                u32::try_from(entries.len()).context("more than u32::MAX files")?;
                let idx = entries.push_copy(entry, |e| arena.carry_entry(e, &mut stats));
                remap[i] = Some(Resource::File(idx));
                continue;
            }
            budget_spent = true;
        }
        let (identity, variants, source) = match (step, loaded) {
            (Step::Reuse(o), _) => {
                let old = old.expect("reuse needs an old snapshot");
                let entry = old.entry(o);
                stats.reused += 1;
                let identity = arena.carry(entry.identity());
                let variants: Vec<_> = entry
                    .variants()
                    .map(|r| (r.coding(), r.len, r.hash(), Bytes::from_old(&r)))
                    .collect();
                (identity, variants, entry.source)
            }
            (
                Step::Load { .. },
                Some(Loaded::Ok {
                    file,
                    variants,
                    sidecars,
                }),
            ) => {
                stats.loaded += 1;
                if walk.lazy && !walk.from_disk && matches!(file.body, LoadedBody::File(_)) {
                    // The plan could not tell: the load found it past the
                    // budget (or at the threshold).
                    budget_spent |= file.len < opts.sendfile_threshold;
                }
                loaded_parts(opts, walk, job, file, variants, sidecars, &mut arena)
            }
            (Step::Load { .. }, Some(Loaded::Forbidden)) => {
                remap[i] = Some(Resource::Forbidden);
                continue;
            }
            (Step::Load { .. }, Some(Loaded::Skip | Loaded::Unsettled) | None) => continue,
            (Step::Hold, _) => continue,
        };
        u32::try_from(entries.len()).context("more than u32::MAX files")?;
        heads.bytes.clear();
        if walk.lazy {
            // Identity bodies took their bytes from the walk's budget as
            // they loaded (the plan knew no sizes): variants get what is
            // left now, and take it from there too.
            variant_budget = walk.lazy_budget.left();
        }
        let before = variant_budget;
        let (entry, dropped) = finish_entry(
            opts,
            job,
            (identity, variants, source),
            &mut arena,
            &mut variant_budget,
            &mut stats,
            &mut heads,
        );
        budget_spent |= dropped;
        if walk.lazy {
            walk.lazy_budget.spend(before - variant_budget);
        }
        let idx = entries.push(entry, &heads.bytes);
        remap[i] = Some(Resource::File(idx));
    }
    stats.files = entries.len() as u64;
    Ok(Laid {
        stats,
        arena,
        entries,
        remap,
        budget_spent,
    })
}

/// Pass 3, second half: the final index, error pages, and the body
/// segments (the load's `placed` one among them). Also returns the walk's
/// per-file state, which the snapshot no longer needs, for the caller to
/// free ([`Scratch`](super::Scratch)).
pub(super) fn assemble(
    opts: &BuildOptions,
    walk: Walk<'_>,
    laid: Laid,
    placed: Option<memmap2::MmapMut>,
    old: Option<&Snapshot>,
    generation: u64,
) -> anyhow::Result<(Snapshot, super::Scratch)> {
    let Laid {
        mut stats,
        mut arena,
        mut entries,
        remap,
        budget_spent,
    } = laid;
    arena.placed = placed;
    let mut index = walk.index;
    index.retain(|_, r| match *r {
        Resource::File(j) => match remap[j as usize] {
            Some(new) => {
                *r = new;
                true
            }
            None => false,
        },
        _ => true,
    });
    add_dir_slashes(&mut index, &walk.dirs, &opts.index_files);

    let (error_pages, spa_index) = special_pages(opts, |k| index.get(k).copied());

    let (segments, segment_live) = arena.finish(old, &mut entries, &mut stats)?;
    entries.shrink();
    let snapshot = Snapshot {
        generation,
        stats,
        compressed: opts.compress.is_some(),
        // Entries a start from disk stated may have been reused (`Plan`).
        from_disk: walk.from_disk || old.is_some_and(|o| o.from_disk),
        index: PathIndex::from_map(&index),
        entries,
        free: Vec::new(),
        segments,
        segment_live,
        walked: Walked {
            root: walk.root,
            symlinks: walk.symlinks,
            budget_spent,
        },
        error_pages,
        spa_index,
        status_cache_control: opts.status_cache_control.clone(),
        retired: std::sync::atomic::AtomicBool::new(false),
    };
    Ok((snapshot, (walk.files, index)))
}

/// The error pages (`error_pages`, else `/404.html`) and the SPA
/// fallback's entry, looked up with `get`.
pub(super) fn special_pages(
    opts: &BuildOptions,
    get: impl Fn(&[u8]) -> Option<Resource>,
) -> (Vec<(u16, u32)>, Option<u32>) {
    let mut error_pages = Vec::new();
    let mut has_404 = false;
    for (code, rel) in &opts.error_pages {
        has_404 |= *code == 404;
        let url = format!("/{}", rel.trim_start_matches('/'));
        match get(url.as_bytes()) {
            Some(Resource::File(idx)) => error_pages.push((*code, idx)),
            _ => {
                tracing::warn!(code, page = %url, "error page not in the snapshot; using plain text")
            }
        }
    }
    if !has_404 {
        if let Some(Resource::File(idx)) = get(b"/404.html") {
            error_pages.push((404, idx));
        }
    }
    // The root's index file (the first of `index_files` it has).
    let spa_index = match get(b"/") {
        Some(Resource::File(idx)) if opts.spa_fallback => Some(idx),
        _ => None,
    };
    (error_pages, spa_index)
}

/// A representation's length, hash and bytes, before they are laid out.
pub(super) type VariantParts = (Coding, u64, u128, Bytes);

/// The parts of an entry before its bodies are laid out and its heads
/// rendered.
pub(super) type EntryParts = (ReprParts, Vec<VariantParts>, Source);

/// A loaded file's parts: its identity body queued in `arena` (or sent
/// from its fd), its variants still to be laid out.
pub(super) fn loaded_parts(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    job: &FileJob,
    file: LoadedFile,
    variants: Vec<(Coding, Variant)>,
    sidecars: [Option<FileStamp>; 3],
    arena: &mut ArenaPlan,
) -> EntryParts {
    let large = |rel: &Path, stamp: FileStamp| {
        Box::new(LargeFile {
            root: Arc::clone(&walk.root_dir),
            rel: rel.into(),
            stamp,
            files: Arc::clone(&opts.open_files),
        })
    };
    let body = match file.body {
        LoadedBody::Mem(bytes) => arena.push(Bytes::New(bytes)),
        LoadedBody::Placed { off } => arena.place(off, file.len),
        LoadedBody::File(f) => {
            // The build just read it: the first request need not open it
            // again.
            if let Some(f) = f {
                opts.open_files.seed(file.stamp, f);
            }
            let rel = walk.rel(&job.path).unwrap_or(&job.path);
            Body::File(large(rel, file.stamp))
        }
    };
    let identity = ReprParts {
        len: file.len,
        hash: file.hash,
        body,
    };
    let variants: Vec<_> = variants
        .into_iter()
        .map(|(c, variant)| match variant {
            Variant::Mem(bytes) => (c, bytes.len() as u64, xxh3_128(&bytes), Bytes::New(bytes)),
            Variant::File { path, stamp, hash } => {
                let rel = walk.rel(&path).unwrap_or(&path);
                (c, stamp.size, hash, Bytes::File(large(rel, stamp)))
            }
        })
        .collect();
    let source = Source {
        stamp: file.stamp,
        sidecars: Source::sidecar_key(sidecars),
    };
    (identity, variants, source)
}

/// Count an entry into `stats`, lay out the variants the budget still
/// allows (in walk order: variants are a luxury, they get what the
/// identity bodies left), and render its heads into `heads`. The flag says
/// whether a variant was left out for want of budget.
pub(super) fn finish_entry(
    opts: &BuildOptions,
    job: &FileJob,
    (identity, variants, source): EntryParts,
    arena: &mut ArenaPlan,
    variant_budget: &mut u64,
    stats: &mut SnapshotStats,
    heads: &mut Heads,
) -> (Entry, bool) {
    match identity.body {
        Body::Mem { .. } => stats.mem_bytes += identity.len,
        Body::File(_) => {
            stats.file_bytes += identity.len;
            stats.large_files += 1;
            if opts.compress_configured.is_some()
                && identity.len <= opts.compress_max_file_bytes
                && heads.content_type(&job.path, &opts.default_type)
            {
                stats.compressible_file_bytes += identity.len;
            }
        }
    }
    let mut dropped = false;
    let mut kept = Vec::with_capacity(variants.len());
    for (coding, len, hash, bytes) in variants {
        // A variant sent from its fd costs the arena nothing.
        if !matches!(bytes, Bytes::File(_)) {
            if len > *variant_budget {
                dropped = true;
                continue;
            }
            *variant_budget -= len;
        }
        let slot = SIDECARS.iter().position(|(c, _)| *c == coding).unwrap_or(0);
        stats.encoded_bytes[slot] += len;
        kept.push((
            coding,
            ReprParts {
                len,
                hash,
                body: arena.push(bytes),
            },
        ));
    }
    let cache_control = opts.cache_control.value_for(&job.url);
    let headers = opts.headers.lines_for(&job.url);
    let entry = render_entry(
        opts,
        &job.path,
        cache_control,
        &headers,
        source,
        identity,
        kept,
        heads,
    );
    (entry, dropped)
}

impl Bytes {
    /// The body of an old representation: where it is in the arena, or
    /// the file it is sent from.
    pub(super) fn from_old(repr: &Repr) -> Bytes {
        match &repr.body {
            Body::Mem { off } => Bytes::Old {
                off: *off,
                len: repr.len as usize,
            },
            Body::File(large) => Bytes::File(large.clone()),
        }
    }
}

/// Segment index standing for "the new segment" while entries are
/// assembled; [`ArenaPlan::finish`] rewrites it to the real index.
pub(super) const NEW_SEGMENT: usize = (1 << (usize::BITS - SEGMENT_SHIFT)) - 1;

/// The same for the segment the load placed bodies in
/// ([`load_with`](super::load::load_with)).
const PLACED_SEGMENT: usize = NEW_SEGMENT - 1;

/// Most segments a snapshot references. Past this the smallest shared ones
/// are compacted into the new one, so a long run of one-file changes does
/// not leave thousands of tiny mappings.
const MAX_SEGMENTS: usize = 32;

/// Where the new snapshot's bodies live. New bytes are laid out back to back
/// in one new segment, allocated at the end at its exact size. Reused bodies
/// keep pointing into the old snapshot's segments, which the new one shares,
/// unless a segment is mostly dead (less than half of it still served) or
/// one of too many: then its live bodies are copied into the new segment.
#[derive(Default)]
pub(super) struct ArenaPlan {
    parts: Vec<Bytes>,
    pub(super) len: usize,
    /// Bytes still served from each old segment, by its index there.
    live: Vec<usize>,
    /// The segment the load read bodies into, and the bytes of it served.
    placed: Option<memmap2::MmapMut>,
    placed_live: usize,
}

impl ArenaPlan {
    /// The new bytes, in layout order, and their total length.
    pub(super) fn into_parts(self) -> (Vec<Vec<u8>>, usize) {
        let parts = self
            .parts
            .into_iter()
            .map(|p| match p {
                Bytes::New(v) => v,
                Bytes::Old { .. } | Bytes::File(_) => unreachable!("only new bytes are laid out"),
            })
            .collect();
        (parts, self.len)
    }

    pub(super) fn push(&mut self, bytes: Bytes) -> Body {
        match bytes {
            Bytes::Old { off, len } => {
                if len > 0 {
                    let (segment, _) = unpack_off(off);
                    if self.live.len() <= segment {
                        self.live.resize(segment + 1, 0);
                    }
                    self.live[segment] += len;
                }
                Body::Mem { off }
            }
            Bytes::New(v) => {
                let len = v.len();
                let off = pack_off(NEW_SEGMENT, self.len);
                self.len += len;
                if len > 0 {
                    self.parts.push(Bytes::New(v));
                }
                Body::Mem { off }
            }
            Bytes::File(large) => Body::File(large),
        }
    }

    /// A body the load read into the placed segment at `off`.
    fn place(&mut self, off: usize, len: u64) -> Body {
        self.placed_live += len as usize;
        Body::Mem {
            off: pack_off(PLACED_SEGMENT, off),
        }
    }

    /// Carry an old representation over: its body stays where it is (in a
    /// segment the new snapshot shares), its fd is shared.
    pub(super) fn carry(&mut self, repr: ReprRef<'_>) -> ReprParts {
        let body = match &repr.body {
            Body::Mem { .. } => self.push(Bytes::from_old(&repr)),
            Body::File(large) => Body::File(large.clone()),
        };
        ReprParts {
            len: repr.len,
            hash: repr.hash(),
            body,
        }
    }

    /// Carry (a copy of) a whole old entry over, its heads as they are;
    /// counts its bytes into `stats`.
    pub(super) fn carry_entry(&mut self, entry: &mut Entry, stats: &mut SnapshotStats) {
        match &entry.identity.body {
            Body::Mem { .. } => stats.mem_bytes += entry.identity.len,
            Body::File(_) => {
                stats.file_bytes += entry.identity.len;
                stats.large_files += 1;
            }
        }
        if let Body::Mem { .. } = entry.identity.body {
            entry.identity.body = self.push(Bytes::from_old(&entry.identity));
        }
        for (coding, repr) in entry.encoded.iter_mut() {
            let slot = SIDECARS.iter().position(|(c, _)| c == coding).unwrap_or(0);
            stats.encoded_bytes[slot] += repr.len;
            if let Body::Mem { .. } = repr.body {
                repr.body = self.push(Bytes::from_old(repr));
            }
        }
    }

    /// Decide which old segments are shared and which compacted, write the
    /// new segment (new bodies, then the live bodies of compacted
    /// segments), seal it read-only, and point every `Body::Mem` of
    /// `entries` at its final segment. Counts copies into `stats`. Returns
    /// the segments and the bytes each still serves.
    pub(super) fn finish(
        self,
        old: Option<&Snapshot>,
        entries: &mut Entries,
        stats: &mut SnapshotStats,
    ) -> anyhow::Result<(Vec<Option<Segment>>, Vec<u64>)> {
        let old_segments: &[Option<Segment>] = old.map_or(&[], |o| &o.segments);
        let seg_len = |s: usize| old_segments[s].as_ref().map_or(0, |m| m.len());
        // Share a segment while at least half of it is still served.
        let mut share: Vec<bool> = (0..old_segments.len())
            .map(|s| {
                let live = self.live.get(s).copied().unwrap_or(0);
                live > 0 && live * 2 >= seg_len(s)
            })
            .collect();
        // Too many: compact the smallest shared ones.
        let placed = self.placed.filter(|_| self.placed_live > 0);
        // A placed segment mostly unused (a small root's reserve, taken a
        // chunk per loader) is compacted like an old one: kept, it would
        // fail the half-served rule above in the next build and be copied
        // then.
        let (placed, loose) = match placed {
            Some(p) if self.placed_live * 2 < p.len() => (None, Some(p)),
            p => (p, None),
        };
        let loose_len = loose.as_ref().map_or(0, |_| self.placed_live);
        let reserved =
            usize::from(self.len > 0 || loose.is_some() || self.live.iter().any(|&l| l > 0))
                + usize::from(placed.is_some());
        let mut shared: Vec<usize> = (0..share.len()).filter(|&s| share[s]).collect();
        if shared.len() + reserved > MAX_SEGMENTS {
            shared.sort_by_key(|&s| seg_len(s));
            for &s in &shared[..shared.len() + reserved - MAX_SEGMENTS] {
                share[s] = false;
            }
        }
        let compacted: usize = (0..share.len())
            .filter(|&s| !share[s])
            .map(|s| self.live.get(s).copied().unwrap_or(0))
            .sum();
        let total = self.len + compacted + loose_len;

        let mut map = anon_segment(total)?;
        let mut at = 0;
        if let Some(map) = &mut map {
            for part in &self.parts {
                let Bytes::New(bytes) = part else {
                    unreachable!("only new bytes are laid out")
                };
                map[at..at + bytes.len()].copy_from_slice(bytes);
                at += bytes.len();
            }
        }
        debug_assert_eq!(at, self.len);

        // Final indices: the shared old segments in order, then the new one.
        let mut index_of = vec![usize::MAX; old_segments.len()];
        let mut segments: Vec<Option<Segment>> = Vec::new();
        let mut segment_live = Vec::new();
        for (s, segment) in old_segments.iter().enumerate() {
            if share[s] {
                index_of[s] = segments.len();
                segments.push(segment.clone());
                segment_live.push(self.live[s] as u64);
            }
        }
        let shared_count = segments.len();
        let placed_index = segments.len();
        if let Some(placed) = placed {
            segments.push(Some(Arc::new(
                placed
                    .make_read_only()
                    .context("sealing a snapshot body segment")?,
            )));
            segment_live.push(self.placed_live as u64);
        }
        let new_index = segments.len();
        // The entries are this build's own: no chunk is copied.
        entries.update(
            |_| true,
            |entry| {
                for repr in entry.reprs_mut() {
                    let len = &(repr.len as usize);
                    let Body::Mem { off } = &mut repr.body else {
                        continue;
                    };
                    let (segment, within) = unpack_off(*off);
                    if segment == NEW_SEGMENT {
                        *off = pack_off(new_index, within);
                    } else if segment == PLACED_SEGMENT {
                        match &loose {
                            None => *off = pack_off(placed_index, within),
                            Some(src) => {
                                let map = map.as_mut().expect("compacted bytes have room");
                                map[at..at + *len].copy_from_slice(&src[within..within + *len]);
                                *off = pack_off(new_index, at);
                                at += *len;
                            }
                        }
                    } else if share.get(segment).copied().unwrap_or(false) {
                        *off = pack_off(index_of[segment], within);
                    } else if *len == 0 {
                        *off = pack_off(new_index, 0);
                    } else {
                        let map = map.as_mut().expect("compacted bytes have room");
                        let Some(old_segment) = &old_segments[segment] else {
                            unreachable!("a reused body points into a dropped segment")
                        };
                        let bytes = &old_segment[within..within + *len];
                        map[at..at + *len].copy_from_slice(bytes);
                        *off = pack_off(new_index, at);
                        at += *len;
                    }
                }
            },
        );
        debug_assert_eq!(at, total);
        if let Some(map) = map {
            segments.push(Some(Arc::new(
                map.make_read_only()
                    .context("sealing a snapshot body segment")?,
            )));
            segment_live.push(total as u64);
        }
        stats.bytes_copied = (total + self.placed_live) as u64;
        stats.segments = segments.len() as u64;
        stats.segments_shared = shared_count as u64;
        Ok((segments, segment_live))
    }
}

/// An anonymous mapping of `len` bytes for a body segment (none for 0).
pub(super) fn anon_segment(len: usize) -> anyhow::Result<Option<memmap2::MmapMut>> {
    if len == 0 {
        return Ok(None);
    }
    let map = memmap2::MmapOptions::new()
        .len(len)
        .map_anon()
        .context("allocating a snapshot body segment")?;
    Ok(Some(map))
}
