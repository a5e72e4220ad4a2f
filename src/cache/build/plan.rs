//! Pass 1½, the **plan**: for each walked file, reuse the previous
//! snapshot's entry (same [`Source`]) or load it again, and whether its
//! identity body goes in memory; and whether the whole tree is unchanged.

use std::collections::HashSet;
use std::path::PathBuf;

use super::walk::Walk;
use crate::cache::index::Shard;
use crate::cache::{Body, BuildOptions, Resource, Snapshot, Source};

/// Pass 1½: for each walked file, reuse the old entry or load it, and whether
/// its identity body goes in memory. Decided in walk order so the memory
/// budget is spent the same way on every build.
pub(super) struct Plan {
    pub(super) steps: Vec<Step>,
    /// Arena bytes planned for identity bodies; variants get what is left.
    pub(super) identity_mem: u64,
    /// A file below `sendfile_threshold` did not fit `cache_max_bytes`.
    pub(super) budget_spent: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    /// The old snapshot's entry at this index is still accurate.
    Reuse(u32),
    Load {
        in_mem: bool,
    },
    /// A writer still has the file open and the old snapshot has no
    /// version of it: left out until the writer closes it.
    Hold,
}

impl Plan {
    /// `held` names (canonical paths of) files a writer still has open: they
    /// keep the old snapshot's version, whatever their stamp says.
    pub(super) fn new(
        opts: &BuildOptions,
        walk: &Walk<'_>,
        old: Option<&Snapshot>,
        held: &HashSet<PathBuf>,
    ) -> Plan {
        Plan::with_base(opts, walk, old, held, 0)
    }

    /// [`Plan::new`] for files added to a snapshot that already holds
    /// `base` bytes of identity bodies in memory.
    pub(super) fn with_base(
        opts: &BuildOptions,
        walk: &Walk<'_>,
        old: Option<&Snapshot>,
        held: &HashSet<PathBuf>,
        base: u64,
    ) -> Plan {
        let mut identity_mem = base;
        let mut budget_spent = false;
        let steps = walk
            .files
            .iter()
            .map(|job| {
                let size = job.stamp.size;
                let in_mem = size < opts.sendfile_threshold
                    && identity_mem.saturating_add(size) <= opts.cache_max_bytes;
                if in_mem {
                    identity_mem += size;
                } else if size < opts.sendfile_threshold {
                    budget_spent = true;
                }
                let source = Source {
                    stamp: job.stamp,
                    sidecars: Source::sidecar_key(
                        walk.sidecars(job).map(|s| s.map(|(_, stamp)| stamp)),
                    ),
                };
                if !held.is_empty() && held.contains(&job.path) {
                    return match old.and_then(|old| old.resolve(&job.url)) {
                        Some(Resource::File(i)) => Step::Reuse(i),
                        _ => Step::Hold,
                    };
                }
                let reusable = old.and_then(|old| match old.resolve(&job.url) {
                    Some(Resource::File(i)) => {
                        let entry = old.entry(i);
                        let was_mem = matches!(entry.identity.body, Body::Mem { .. });
                        // A start from disk's entries stand until its
                        // background load replaces them all: a full walk
                        // meanwhile (SIGHUP, a rescan) does not read the
                        // whole root under the rebuild lock.
                        let placed = was_mem == in_mem || old.from_disk;
                        (entry.source == source && placed).then_some(i)
                    }
                    _ => None,
                });
                match reusable {
                    Some(i) => Step::Reuse(i),
                    None => Step::Load { in_mem },
                }
            })
            .collect();
        Plan {
            steps,
            identity_mem,
            budget_spent,
        }
    }

    /// Every file reused from the same position and every path meaning the
    /// same: the old snapshot is still exact.
    pub(super) fn is_unchanged(&self, walk: &Walk<'_>, old: &Snapshot) -> bool {
        if self.steps.len() != old.len()
            || !self
                .steps
                .iter()
                .enumerate()
                .all(|(i, s)| matches!(s, Step::Reuse(j) if *j as usize == i))
        {
            return false;
        }
        // With every entry at its old position, the walk's index is final
        // once directory slashes are added: compared as it would be, without
        // a copy of it (a root of a million files would hold two for the
        // whole safety rescan). A slash key never names a file, whose URL
        // cannot end in `/`.
        let index = &walk.index;
        let mut key = Vec::new();
        old.index.len() == index.len() + walk.dirs.len()
            && index.iter().all(|(k, r)| old.index.get(k) == Some(*r))
            && walk.dirs.iter().all(|dir| {
                let get = |k: &[u8]| index.get(k).copied();
                let slash = dir_slash(get, dir, &walk.opts.index_files);
                key.clear();
                key.extend_from_slice(dir);
                key.push(b'/');
                old.index.get(&key) == Some(slash)
            })
    }
}

/// `dir + "/"` serves the directory's first servable index file
/// (`index_files`, in order), and is 403 when it has none (no listings).
pub(super) fn add_dir_slashes(index: &mut Shard, dirs: &[Box<[u8]>], index_files: &[String]) {
    for dir in dirs {
        let resource = dir_slash(|k| index.get(k).copied(), dir, index_files);
        let mut key = dir.to_vec();
        key.push(b'/');
        index.insert(key.into(), resource);
    }
}

/// What `dir + "/"` serves, looking paths up with `get`.
pub(super) fn dir_slash(
    get: impl Fn(&[u8]) -> Option<Resource>,
    dir: &[u8],
    index_files: &[String],
) -> Resource {
    let mut key = Vec::new();
    for name in index_files {
        key.clear();
        key.extend_from_slice(dir);
        key.push(b'/');
        key.extend_from_slice(name.as_bytes());
        if let Some(Resource::File(idx)) = get(key.as_slice()) {
            return Resource::File(idx);
        }
    }
    Resource::Forbidden
}
