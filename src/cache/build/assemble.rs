//! Pass 3, **assembly**: entries in walk order with their heads rendered,
//! the final path index, error pages, and a fresh arena holding every
//! in-memory body (reused bodies copied from the old one).

use std::sync::Arc;

use anyhow::Context;
use xxhash_rust::xxh3::xxh3_128;

use super::load::{Loaded, LoadedBody};
use super::plan::{add_dir_slashes, Plan, Step};
use super::render::render_entry;
use super::walk::Walk;
use crate::cache::{
    Body, BuildOptions, Entry, LargeFile, Repr, Resource, Snapshot, SnapshotStats, Source, SIDECARS,
};

/// Where an arena body's bytes come from at assembly.
pub(super) enum Bytes {
    /// A range of the old snapshot's arena.
    Old {
        off: usize,
        len: usize,
    },
    New(Vec<u8>),
}

/// The inputs [`render_entry`] needs for one representation.
pub(super) struct ReprParts {
    pub(super) len: u64,
    pub(super) hash: u128,
    pub(super) body: Body,
}

/// Pass 3: entries in walk order, the final index, and the arena.
pub(super) fn assemble(
    opts: &BuildOptions,
    walk: Walk<'_>,
    plan: Plan,
    loaded: Vec<Option<Loaded>>,
    old: Option<&Snapshot>,
    generation: u64,
) -> anyhow::Result<Snapshot> {
    let mut stats = SnapshotStats::default();
    let mut arena = ArenaPlan::default();
    let mut variant_budget = opts.cache_max_bytes.saturating_sub(plan.identity_mem);
    let mut entries = Vec::with_capacity(walk.files.len());
    let mut remap: Vec<Option<Resource>> = vec![None; walk.files.len()];

    for ((i, job), (step, loaded)) in walk
        .files
        .iter()
        .enumerate()
        .zip(plan.steps.iter().zip(loaded))
    {
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
            let variant_bytes: u64 = entry.encoded.iter().map(|(_, r)| r.len).sum();
            if variant_bytes <= variant_budget {
                // Its heads are a pure function of inputs that did not
                // change: copy them rather than render them again.
                variant_budget -= variant_bytes;
                stats.reused += 1;
                let idx = u32::try_from(entries.len()).context("more than u32::MAX files")?;
                entries.push(arena.carry_entry(entry, &mut stats));
                remap[i] = Some(Resource::File(idx));
                continue;
            }
        }
        let (identity, variants, source) = match (step, loaded) {
            (Step::Reuse(o), _) => {
                let old = old.expect("reuse needs an old snapshot");
                let entry = old.entry(o);
                stats.reused += 1;
                let identity = arena.carry(old, &entry.identity);
                let variants: Vec<_> = entry
                    .encoded
                    .iter()
                    .map(|(c, r)| (*c, r.len, r.hash, Bytes::from_old(&r.body)))
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
                let body = match file.body {
                    LoadedBody::Mem(bytes) => arena.push(Bytes::New(bytes)),
                    LoadedBody::File(f) => {
                        // The build just read it: the first request need
                        // not open it again.
                        opts.open_files.seed(file.stamp, f);
                        let rel = job.path.strip_prefix(&walk.root).unwrap_or(&job.path);
                        Body::File(LargeFile {
                            root: Arc::clone(&walk.root_dir),
                            rel: rel.into(),
                            stamp: file.stamp,
                            files: Arc::clone(&opts.open_files),
                        })
                    }
                };
                let identity = ReprParts {
                    len: file.len,
                    hash: file.hash,
                    body,
                };
                let variants: Vec<_> = variants
                    .into_iter()
                    .map(|(c, bytes)| (c, bytes.len() as u64, xxh3_128(&bytes), Bytes::New(bytes)))
                    .collect();
                let source = Source {
                    stamp: file.stamp,
                    sidecars,
                };
                (identity, variants, source)
            }
            (Step::Load { .. }, Some(Loaded::Forbidden)) => {
                remap[i] = Some(Resource::Forbidden);
                continue;
            }
            (Step::Load { .. }, Some(Loaded::Skip | Loaded::Unsettled) | None) => continue,
            (Step::Hold, _) => continue,
        };
        match identity.body {
            Body::Mem { len, .. } => stats.mem_bytes += len as u64,
            Body::File(_) => {
                stats.file_bytes += identity.len;
                stats.large_files += 1;
            }
        }
        let mut kept = Vec::with_capacity(variants.len());
        for (coding, len, hash, bytes) in variants {
            // Variants are a luxury: they get what the identity bodies left of
            // the budget, in walk order.
            if len > variant_budget {
                continue;
            }
            variant_budget -= len;
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
        let idx = u32::try_from(entries.len()).context("more than u32::MAX files")?;
        let cache_control = opts.cache_control.value_for(&job.url);
        entries.push(render_entry(
            opts,
            &job.path,
            cache_control,
            source,
            identity,
            kept,
        ));
        remap[i] = Some(Resource::File(idx));
    }
    stats.files = entries.len() as u64;

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
    add_dir_slashes(&mut index, &walk.dirs);

    let mut error_pages = Vec::new();
    let mut has_404 = false;
    for (code, rel) in &opts.error_pages {
        has_404 |= *code == 404;
        let url = format!("/{}", rel.trim_start_matches('/'));
        match index.get(url.as_bytes()) {
            Some(Resource::File(idx)) => error_pages.push((*code, *idx)),
            _ => {
                tracing::warn!(code, page = %url, "error page not in the snapshot; using plain text")
            }
        }
    }
    if !has_404 {
        if let Some(Resource::File(idx)) = index.get(&b"/404.html"[..]) {
            error_pages.push((404, *idx));
        }
    }
    let spa_index = match index.get(&b"/index.html"[..]) {
        Some(Resource::File(idx)) if opts.spa_fallback => Some(*idx),
        _ => None,
    };

    Ok(Snapshot {
        generation,
        stats,
        compressed: opts.compress.is_some(),
        index,
        entries,
        arena: arena.finish(old)?,
        error_pages,
        spa_index,
    })
}

impl Bytes {
    pub(super) fn from_old(body: &Body) -> Bytes {
        match body {
            Body::Mem { off, len } => Bytes::Old {
                off: *off,
                len: *len,
            },
            Body::File(_) => unreachable!("variants are always in memory"),
        }
    }
}

/// The new arena's layout: every body's source, back to back. The arena is
/// allocated once at the end, at its exact size.
#[derive(Default)]
pub(super) struct ArenaPlan {
    parts: Vec<Bytes>,
    pub(super) len: usize,
}

impl ArenaPlan {
    pub(super) fn push(&mut self, bytes: Bytes) -> Body {
        let len = match &bytes {
            Bytes::Old { len, .. } => *len,
            Bytes::New(v) => v.len(),
        };
        let off = self.len;
        self.len += len;
        if len > 0 {
            self.parts.push(bytes);
        }
        Body::Mem { off, len }
    }

    /// Carry an old representation over: its arena bytes are copied (cheap,
    /// and the new snapshot owns all of its memory), its fd is shared.
    pub(super) fn carry(&mut self, _old: &Snapshot, repr: &Repr) -> ReprParts {
        let body = match &repr.body {
            Body::Mem { .. } => self.push(Bytes::from_old(&repr.body)),
            Body::File(large) => Body::File(large.clone()),
        };
        ReprParts {
            len: repr.len,
            hash: repr.hash,
            body,
        }
    }

    /// Carry a whole old entry over, its heads as they are, its arena
    /// bodies laid out anew; counts its bytes into `stats`.
    pub(super) fn carry_entry(&mut self, entry: &Entry, stats: &mut SnapshotStats) -> Entry {
        let mut entry = entry.clone();
        match &entry.identity.body {
            Body::Mem { len, .. } => stats.mem_bytes += *len as u64,
            Body::File(_) => {
                stats.file_bytes += entry.identity.len;
                stats.large_files += 1;
            }
        }
        if let Body::Mem { .. } = entry.identity.body {
            entry.identity.body = self.push(Bytes::from_old(&entry.identity.body));
        }
        for (coding, repr) in &mut entry.encoded {
            let slot = SIDECARS.iter().position(|(c, _)| c == coding).unwrap_or(0);
            stats.encoded_bytes[slot] += repr.len;
            repr.body = self.push(Bytes::from_old(&repr.body));
        }
        entry
    }

    /// Copy every part into fresh anonymous memory and seal it read-only.
    pub(super) fn finish(self, old: Option<&Snapshot>) -> anyhow::Result<Option<memmap2::Mmap>> {
        if self.len == 0 {
            return Ok(None);
        }
        let mut map = memmap2::MmapOptions::new()
            .len(self.len)
            .map_anon()
            .context("allocating the snapshot arena")?;
        let mut at = 0;
        for part in &self.parts {
            let bytes = match part {
                Bytes::Old { off, len } => old.map_or(&[][..], |o| o.mem(*off, *len)),
                Bytes::New(v) => v.as_slice(),
            };
            map[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
        debug_assert_eq!(at, self.len);
        Ok(Some(
            map.make_read_only().context("sealing the snapshot arena")?,
        ))
    }
}
