//! The **incremental rebuild**: patch the previous snapshot from the paths
//! inotify reported instead of walking the whole root. Each reported path
//! (and its sidecars) is `lstat`ed again; a directory is walked; what was
//! under a path that is gone is dropped. The new snapshot shares with the
//! old one every index shard, entry chunk and body segment it does not
//! change, so a change costs what changed.
//!
//! Whatever this cannot decide locally is left to a full walk: a root swap,
//! a tree with symlinks (a change under a target is reported under the
//! target's name only), a parent directory the walk never entered, a spent
//! memory budget (the full walk spends it in walk order).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::assemble::{finish_entry, loaded_parts, special_pages, ArenaPlan, NEW_SEGMENT};
use super::load::{load_all, Loaded};
use super::plan::{dir_slash, Plan, Step};
use super::render::Heads;
use super::walk::{Stat, Walk, MAX_DEPTH};
use super::{canonical_root, exhausted, is_exhausted, open_root, Built, Mode};

use crate::cache::{
    pack_off, unpack_off, Body, BuildOptions, Entries, Entry, PathIndex, Resource, RootDir,
    Segment, Snapshot, SnapshotStats, SIDECARS,
};

/// Most paths one incremental rebuild looks at; past this a full walk is
/// cheaper than patching.
pub const MAX_PATCH_PATHS: usize = 8192;

/// Most body segments a snapshot references; past this the smallest are
/// compacted into the new one (see `assemble::MAX_SEGMENTS`).
const MAX_SEGMENTS: usize = 32;

/// Why a patch gave way to a full walk (logged at debug).
pub(super) type FullWalk = &'static str;

/// A stage's "this needs a full walk" ends the patch with that reason.
macro_rules! or_full_walk {
    ($stage:expr) => {
        match $stage {
            Ok(value) => value,
            Err(why) => return Ok(Err(why)),
        }
    };
}

/// Patch `old` with what `changed` (absolute paths under the canonical root,
/// as inotify reports them) hold now. `Ok(Err(why))`: a full walk is needed.
///
/// The stages: check that a patch can decide this change, list the URLs to
/// look at again, walk them, load what changed, make its entries, free
/// what no path points to, lay the new bodies (and compacted old ones) in
/// one new segment, place the new entries, settle the index and the
/// directories' `dir/`, then assemble the snapshot.
pub(super) fn patch(
    opts: &BuildOptions,
    generation: u64,
    old: &Snapshot,
    held: &HashSet<PathBuf>,
    changed: &HashSet<PathBuf>,
) -> anyhow::Result<Result<Built, FullWalk>> {
    let started = Instant::now();
    let (root, root_dir) = or_full_walk!(patchable(opts, old, changed)?);
    let dirty = or_full_walk!(dirty_paths(opts, &root, changed));
    let Rewalked {
        walk,
        mut touched,
        mut index,
        parents,
    } = or_full_walk!(rewalk(opts, old, root, root_dir, &dirty)?);

    // Reuse what the old snapshot holds unchanged; load the rest.
    let base = old.stats.mem_bytes - freed_mem(old, &touched);
    let plan = Plan::with_base(opts, &walk, Some(old), held, base);
    if plan.budget_spent {
        return Ok(Err("cache_max_bytes would be spent"));
    }
    super::test_pause_before_open(&walk.root, generation);
    let fast = super::leveled(opts, plan.identity_mem);
    let loaded = load_all(
        fast.as_ref().unwrap_or(opts),
        &walk,
        &plan,
        Mode::Background { hook: None },
    )?;

    let Made {
        arena,
        mut stats,
        new_entries,
        new_heads,
        remap,
    } = or_full_walk!(make_entries(opts, old, &walk, &plan, loaded));
    record_walked(&walk, &remap, &mut touched);
    let Freed {
        mut entries,
        mut free,
        segment_live,
        freed,
    } = free_unreferenced(old, &touched, &mut stats);
    let Laid {
        segments,
        segment_live,
        slot,
        total,
    } = lay_segments(old, arena, &mut entries, segment_live)?;
    let placed = place_entries(new_entries, slot, &mut entries, &mut free, &new_heads);
    entries.shrink();
    settle_index(&placed, &mut touched, &mut index);
    update_dir_slashes(opts, &parents, &walk.dirs, &mut touched, &mut index);

    index.shrink();
    let changed_anything = !placed.is_empty()
        || !freed.is_empty()
        || touched
            .iter()
            .any(|(key, r)| old.resolve(key) != r.as_ref().copied());
    if !changed_anything {
        return Ok(Ok(Built::Unchanged));
    }
    let (error_pages, spa_index) = special_pages(opts, |k| index.get(k));
    stats.files = (entries.len() - free.len()) as u64;
    stats.reused = stats.files - placed.len() as u64;
    stats.paths_examined = walk.examined;
    stats.bytes_copied = total as u64;
    stats.segments = segments.iter().flatten().count() as u64;
    stats.segments_shared = segments
        .iter()
        .flatten()
        .filter(|s| old.segments.iter().flatten().any(|o| Arc::ptr_eq(o, s)))
        .count() as u64;
    tracing::info!(
        generation,
        files = stats.files,
        loaded = stats.loaded,
        freed = freed.len(),
        paths_examined = stats.paths_examined,
        bytes_copied = stats.bytes_copied,
        segments = stats.segments,
        index_shards_shared = index.shards_shared_with(&old.index),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshot patched"
    );
    Ok(Ok(Built::New(Snapshot {
        generation,
        stats,
        compressed: opts.compress.is_some(),
        from_disk: old.from_disk,
        index,
        entries,
        free,
        segments,
        segment_live,
        walked: old.walked.clone(),
        error_pages,
        spa_index,
        status_cache_control: opts.status_cache_control.clone(),
        retired: std::sync::atomic::AtomicBool::new(false),
    })))
}

/// The canonical root, open, when a patch can decide this change; else
/// why only a full walk can.
fn patchable(
    opts: &BuildOptions,
    old: &Snapshot,
    changed: &HashSet<PathBuf>,
) -> anyhow::Result<Result<(PathBuf, Arc<RootDir>), FullWalk>> {
    if old.walked.root.as_os_str().is_empty() {
        return Ok(Err("no previous walk"));
    }
    if old.walked.symlinks {
        return Ok(Err("the root has symlinks"));
    }
    if old.walked.budget_spent {
        return Ok(Err("cache_max_bytes is spent"));
    }
    if changed.len() > MAX_PATCH_PATHS {
        return Ok(Err("too many paths changed"));
    }
    let (root, root_meta) = canonical_root(opts)?;
    if root != old.walked.root {
        return Ok(Err("the root was swapped"));
    }
    let root_dir = open_root(&root, &root_meta)?;
    Ok(Ok((root, root_dir)))
}

/// The URLs to look at again, sorted, each with its path.
fn dirty_paths(
    opts: &BuildOptions,
    root: &Path,
    changed: &HashSet<PathBuf>,
) -> Result<BTreeMap<Vec<u8>, PathBuf>, FullWalk> {
    let mut dirty: BTreeMap<Vec<u8>, PathBuf> = BTreeMap::new();
    for path in changed {
        let Ok(rel) = path.strip_prefix(root) else {
            return Err("a path outside the root changed");
        };
        let mut url = Vec::new();
        let mut depth = 0;
        let mut hidden = false;
        for component in rel.components() {
            let Component::Normal(name) = component else {
                return Err("an odd path changed");
            };
            depth += 1;
            url.push(b'/');
            url.extend_from_slice(name.as_bytes());
            if name.as_bytes().starts_with(b".")
                && !opts.dotfile_allow.allows(name.as_bytes(), &url)
            {
                hidden = true;
                break;
            }
        }
        if url.is_empty() {
            return Err("the root itself changed");
        }
        if depth >= MAX_DEPTH {
            return Err("a path deeper than the walk goes changed");
        }
        if hidden {
            continue;
        }
        // A file and its sidecars are one entry: look at all of them.
        let base_len = SIDECARS
            .iter()
            .find(|(_, suffix)| url.ends_with(suffix.as_bytes()))
            .map_or(url.len(), |(_, suffix)| url.len() - suffix.len());
        let base_url = url[..base_len].to_vec();
        let base_path = path_with_len(path, path.as_os_str().len() - (url.len() - base_len));
        for (_, suffix) in SIDECARS {
            let mut u = base_url.clone();
            u.extend_from_slice(suffix.as_bytes());
            let mut p = base_path.clone().into_os_string();
            p.push(suffix);
            dirty.insert(u, PathBuf::from(p));
        }
        dirty.insert(base_url, base_path);
    }
    // A path below another one in the set is covered by its walk.
    let covered: Vec<Vec<u8>> = dirty
        .keys()
        .filter(|url| {
            url.iter()
                .enumerate()
                .skip(1)
                .any(|(i, &b)| b == b'/' && dirty.contains_key(&url[..i]))
        })
        .cloned()
        .collect();
    for url in covered {
        dirty.remove(&url);
    }
    Ok(dirty)
}

/// What [`rewalk`] found.
struct Rewalked<'a> {
    walk: Walk<'a>,
    /// Every URL whose resource may have changed: `None` while removed.
    touched: BTreeMap<Box<[u8]>, Option<Resource>>,
    /// The old index without what was under the dirty paths.
    index: PathIndex,
    /// Each dirty path's parent directory URL.
    parents: Vec<Vec<u8>>,
}

/// What each path holds now, walked like the full walk would.
fn rewalk<'a>(
    opts: &'a BuildOptions,
    old: &Snapshot,
    root: PathBuf,
    root_dir: Arc<RootDir>,
    dirty: &BTreeMap<Vec<u8>, PathBuf>,
) -> anyhow::Result<Result<Rewalked<'a>, FullWalk>> {
    let mut walk = Walk::new(opts, root, root_dir);
    let mut touched: BTreeMap<Box<[u8]>, Option<Resource>> = BTreeMap::new();
    let mut index = old.index.clone();
    let mut parents: Vec<Vec<u8>> = Vec::new();
    for (url, path) in dirty {
        let parent = &url[..url.iter().rposition(|&b| b == b'/').unwrap_or(0)];
        if !parent.is_empty() && old.resolve(parent) != Some(Resource::AddSlash) {
            return Ok(Err("a parent directory the walk never entered changed"));
        }
        parents.push(parent.to_vec());
        // Gone from the index, with everything under it: the walk below
        // puts back what is still there.
        if let Some(r) = index.remove(url) {
            touched.insert(url.as_slice().into(), None);
            if r == Resource::AddSlash {
                let mut prefix = url.clone();
                prefix.push(b'/');
                for (key, _) in index.remove_prefix(&prefix) {
                    touched.insert(key, None);
                }
            }
        }
        walk.examined += 1;
        let meta = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) if is_exhausted(&err) => return Err(exhausted(path, err)),
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "skipping unreadable entry");
                continue;
            }
        };
        if meta.file_type().is_symlink() {
            return Ok(Err("a symlink changed"));
        }
        walk.examined -= 1;
        let depth = url.iter().filter(|&&b| b == b'/').count();
        // Loop detection needs the real ancestors only with symlinks,
        // which send this rebuild to a full walk; the depth limit needs
        // their number.
        let mut ancestors: Vec<(u64, u64)> = (0..depth as u64).map(|i| (u64::MAX, i)).collect();
        let mut url = url.clone();
        walk.walk_child(
            path.clone(),
            meta.file_type(),
            Some(Stat::of(&meta)),
            &mut url,
            &mut ancestors,
        )?;
        if walk.symlinks {
            return Ok(Err("a symlink appeared"));
        }
    }
    Ok(Ok(Rewalked {
        walk,
        touched,
        index,
        parents,
    }))
}

/// What [`make_entries`] made of the loaded files.
struct Made {
    /// The new entries' in-memory bodies, for the new segment.
    arena: ArenaPlan,
    stats: SnapshotStats,
    /// Each with its index to be settled once the freed slots are known.
    new_entries: Vec<(u32, Entry)>,
    /// Their heads, until they are placed in their chunks.
    new_heads: Heads,
    /// The walk's file `i` → its resource in the new snapshot (`File`
    /// indices from `u32::MAX` down: the new entries, not placed yet).
    remap: Vec<Option<Resource>>,
}

/// The walk's files as entries: the old entry where unchanged, a new one
/// for each file loaded.
fn make_entries(
    opts: &BuildOptions,
    old: &Snapshot,
    walk: &Walk<'_>,
    plan: &Plan,
    loaded: Vec<Option<Loaded>>,
) -> Result<Made, FullWalk> {
    let mut arena = ArenaPlan::default();
    let mut stats = old.stats;
    stats.loaded = 0;
    stats.bytes_copied = 0;
    let mut variant_budget = opts
        .cache_max_bytes
        .saturating_sub(plan.identity_mem)
        .saturating_sub(old.stats.encoded_bytes.iter().sum::<u64>());
    let mut new_entries: Vec<(u32, Entry)> = Vec::new();
    // Their heads, until they are placed in their chunks.
    let mut new_heads = Heads::default();
    let mut remap: Vec<Option<Resource>> = vec![None; walk.files.len()];
    for ((i, job), (step, loaded)) in walk
        .files
        .iter()
        .enumerate()
        .zip(plan.steps.iter().zip(loaded))
    {
        let step = match (*step, &loaded) {
            (Step::Load { .. }, Some(Loaded::Unsettled)) => match old.resolve(&job.url) {
                Some(Resource::File(o)) => Step::Reuse(o),
                _ => continue,
            },
            (step, _) => step,
        };
        match (step, loaded) {
            // The old entry stays where it is: nothing is copied.
            (Step::Reuse(o), _) => remap[i] = Some(Resource::File(o)),
            (
                Step::Load { .. },
                Some(Loaded::Ok {
                    file,
                    variants,
                    sidecars,
                }),
            ) => {
                stats.loaded += 1;
                let parts = loaded_parts(opts, walk, job, file, variants, sidecars, &mut arena);
                let (entry, dropped) = finish_entry(
                    opts,
                    job,
                    parts,
                    &mut arena,
                    &mut variant_budget,
                    &mut stats,
                    &mut new_heads,
                );
                if dropped {
                    return Err("cache_max_bytes would be spent on variants");
                }
                // Its index is settled below, once the freed slots are known.
                remap[i] = Some(Resource::File(u32::MAX - new_entries.len() as u32));
                new_entries.push((u32::MAX, entry));
            }
            (Step::Load { .. }, Some(Loaded::Forbidden)) => remap[i] = Some(Resource::Forbidden),
            (Step::Load { .. }, _) | (Step::Hold, _) => {}
        }
    }
    Ok(Made {
        arena,
        stats,
        new_entries,
        new_heads,
        remap,
    })
}

/// The walk's index, remapped, over what was removed.
fn record_walked(
    walk: &Walk<'_>,
    remap: &[Option<Resource>],
    touched: &mut BTreeMap<Box<[u8]>, Option<Resource>>,
) {
    for (key, resource) in &walk.index {
        let resource = match *resource {
            Resource::File(j) => match remap[j as usize] {
                Some(r) => r,
                None => continue,
            },
            r => r,
        };
        touched.insert(key.clone(), Some(resource));
    }
}

/// The old entries with the freed ones vacant, what [`free_unreferenced`]
/// freed, and the segments' live bytes without them.
struct Freed {
    entries: Entries,
    free: Vec<u32>,
    segment_live: Vec<u64>,
    freed: Vec<u32>,
}

/// Entries no final path points to are freed; new ones take their slots.
fn free_unreferenced(
    old: &Snapshot,
    touched: &BTreeMap<Box<[u8]>, Option<Resource>>,
    stats: &mut SnapshotStats,
) -> Freed {
    let mut kept: HashSet<u32> = HashSet::new();
    for r in touched.values().flatten() {
        if let Resource::File(i) = r {
            kept.insert(*i);
        }
    }
    let mut freed: Vec<u32> = Vec::new();
    for key in touched.keys() {
        if let Some(Resource::File(i)) = old.resolve(key) {
            if !kept.contains(&i) && !freed.contains(&i) {
                freed.push(i);
            }
        }
    }
    let mut entries = old.entries.clone();
    let mut free = old.free.clone();
    let mut segment_live = old.segment_live.clone();
    for &i in &freed {
        let entry = entries.get(i);
        let source = entry.source;
        uncount(&entry, stats, &mut segment_live);
        entries.set(i, Entry::vacant(source), &[]);
        free.push(i);
    }
    Freed {
        entries,
        free,
        segment_live,
        freed,
    }
}

/// The segments after [`lay_segments`]: `slot` holds the new one, of
/// `total` bytes.
struct Laid {
    segments: Vec<Option<Segment>>,
    segment_live: Vec<u64>,
    slot: usize,
    total: usize,
}

/// The new bodies go into one new segment, in a free slot.
fn lay_segments(
    old: &Snapshot,
    arena: ArenaPlan,
    entries: &mut Entries,
    mut segment_live: Vec<u64>,
) -> anyhow::Result<Laid> {
    let mut segments: Vec<Option<Segment>> = old.segments.clone();
    segment_live.resize(segments.len(), 0);
    for (s, live) in segment_live.iter().enumerate() {
        if *live == 0 {
            segments[s] = None;
        }
    }
    let (parts, new_len) = arena.into_parts();
    let slot = segments
        .iter()
        .position(Option::is_none)
        .unwrap_or(segments.len());
    let compact = to_compact(&segments, &segment_live);
    let compacted: u64 = compact.iter().map(|&s| segment_live[s]).sum();
    let total = new_len + compacted as usize;
    let mut map = super::assemble::anon_segment(total)?;
    let mut at = 0;
    if let Some(map) = &mut map {
        for bytes in &parts {
            map[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
    }
    if !compact.is_empty() {
        let in_compacted = |entry: &Entry| {
            entry.reprs().any(|r| match r.body {
                Body::Mem { off } if r.len > 0 => compact.contains(&unpack_off(off).0),
                _ => false,
            })
        };
        let map = map.as_mut().expect("compacted bytes have room");
        let old_segments = &old.segments;
        entries.update(in_compacted, |entry| {
            for repr in entry.reprs_mut() {
                let len = &(repr.len as usize);
                let Body::Mem { off } = &mut repr.body else {
                    continue;
                };
                let (segment, within) = unpack_off(*off);
                if *len == 0 || !compact.contains(&segment) {
                    continue;
                }
                let Some(from) = &old_segments[segment] else {
                    unreachable!("a live body points into a dropped segment")
                };
                map[at..at + *len].copy_from_slice(&from[within..within + *len]);
                *off = pack_off(slot, at);
                at += *len;
            }
        });
        for &s in &compact {
            segments[s] = None;
            segment_live[s] = 0;
        }
    }
    debug_assert_eq!(at, total);
    if let Some(map) = map {
        let sealed = map
            .make_read_only()
            .context("sealing a snapshot body segment")?;
        if slot == segments.len() {
            segments.push(None);
            segment_live.push(0);
        }
        segments[slot] = Some(Arc::new(sealed));
        segment_live[slot] = total as u64;
    }
    // Trailing empty slots need not stay.
    while segments.last().is_some_and(Option::is_none) {
        segments.pop();
        segment_live.pop();
    }
    Ok(Laid {
        segments,
        segment_live,
        slot,
        total,
    })
}

/// Mostly dead segments, and the smallest when there are too many,
/// have their live bodies copied into the new one.
fn to_compact(segments: &[Option<Segment>], segment_live: &[u64]) -> Vec<usize> {
    let mut compact: Vec<usize> = (0..segments.len())
        .filter(|&s| {
            segments[s]
                .as_ref()
                .is_some_and(|m| segment_live[s] * 2 < m.len() as u64)
        })
        .collect();
    let mut alive: Vec<usize> = (0..segments.len())
        .filter(|&s| segments[s].is_some() && !compact.contains(&s))
        .collect();
    if alive.len() + 1 > MAX_SEGMENTS {
        alive.sort_by_key(|&s| segments[s].as_ref().map_or(0, |m| m.len()));
        compact.extend_from_slice(&alive[..alive.len() + 1 - MAX_SEGMENTS]);
    }
    compact
}

/// New entries into free slots, their bodies at the new segment; the
/// index each one took, in order.
fn place_entries(
    new_entries: Vec<(u32, Entry)>,
    slot: usize,
    entries: &mut Entries,
    free: &mut Vec<u32>,
    new_heads: &Heads,
) -> Vec<u32> {
    let mut placed: Vec<u32> = Vec::with_capacity(new_entries.len());
    for (_, mut entry) in new_entries {
        for repr in entry.reprs_mut() {
            if let Body::Mem { off } = &mut repr.body {
                let (segment, within) = unpack_off(*off);
                if segment == NEW_SEGMENT {
                    *off = pack_off(slot, within);
                }
            }
        }
        let i = match free.pop() {
            Some(i) => {
                entries.set(i, entry, &new_heads.bytes);
                i
            }
            None => entries.push(entry, &new_heads.bytes),
        };
        placed.push(i);
    }
    placed
}

/// The new entries' final indices into `touched`, and `touched` into the
/// index.
fn settle_index(
    placed: &[u32],
    touched: &mut BTreeMap<Box<[u8]>, Option<Resource>>,
    index: &mut PathIndex,
) {
    let settle = |r: Resource| match r {
        Resource::File(i) if i > u32::MAX - placed.len() as u32 - 1 => {
            Resource::File(placed[(u32::MAX - i) as usize])
        }
        r => r,
    };
    for r in touched.values_mut().flatten() {
        *r = settle(*r);
    }
    for (key, r) in touched.iter() {
        match r {
            Some(r) => {
                index.insert(key, *r);
            }
            None => {
                index.remove(key);
            }
        }
    }
}

/// `dir/` of every directory whose listing may have changed.
fn update_dir_slashes(
    opts: &BuildOptions,
    parents: &[Vec<u8>],
    dirs: &[Box<[u8]>],
    touched: &mut BTreeMap<Box<[u8]>, Option<Resource>>,
    index: &mut PathIndex,
) {
    let mut slashes: Vec<&[u8]> = parents.iter().map(Vec::as_slice).collect();
    slashes.extend(dirs.iter().map(|d| &**d));
    for dir in slashes {
        if !dir.is_empty() && index.get(dir) != Some(Resource::AddSlash) {
            continue;
        }
        let resource = dir_slash(|k| index.get(k), dir, &opts.index_files);
        let mut key = dir.to_vec();
        key.push(b'/');
        if index.get(&key) != Some(resource) {
            touched.insert(key.as_slice().into(), Some(resource));
            index.insert(&key, resource);
        }
    }
}

/// `path` cut to its first `len` bytes.
fn path_with_len(path: &Path, len: usize) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let mut bytes = path.as_os_str().as_bytes().to_vec();
    bytes.truncate(len);
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}

/// Identity bytes in memory of the old entries `touched` keys point to.
fn freed_mem(old: &Snapshot, touched: &BTreeMap<Box<[u8]>, Option<Resource>>) -> u64 {
    let mut seen = HashSet::new();
    touched
        .keys()
        .filter_map(|k| match old.resolve(k) {
            Some(Resource::File(i)) if seen.insert(i) => {
                let identity = &old.entry(i).entry().identity;
                match identity.body {
                    Body::Mem { .. } => Some(identity.len),
                    Body::File(_) => None,
                }
            }
            _ => None,
        })
        .sum()
}

/// Take a freed entry out of `stats` and out of its segments' live bytes.
fn uncount(entry: &Entry, stats: &mut SnapshotStats, live: &mut [u64]) {
    match entry.identity.body {
        Body::Mem { .. } => stats.mem_bytes -= entry.identity.len,
        Body::File(_) => {
            stats.file_bytes -= entry.identity.len;
            stats.large_files -= 1;
        }
    }
    for (coding, repr) in &entry.encoded {
        let slot = SIDECARS.iter().position(|(c, _)| c == coding).unwrap_or(0);
        stats.encoded_bytes[slot] -= repr.len;
    }
    for repr in entry.reprs() {
        if let Body::Mem { off } = repr.body {
            if repr.len > 0 {
                live[unpack_off(off).0] -= repr.len;
            }
        }
    }
}
