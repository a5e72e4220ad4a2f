//! Pass 1½, the **plan**: for each walked file, reuse the previous
//! snapshot's entry (same [`Source`]) or load it again, and whether its
//! identity body goes in memory; and whether the whole tree is unchanged.

use std::collections::HashSet;
use std::path::PathBuf;

use super::walk::Walk;
use crate::cache::{Body, BuildOptions, PathIndex, Resource, Snapshot, Source};

/// Pass 1½: for each walked file, reuse the old entry or load it, and whether
/// its identity body goes in memory. Decided in walk order so the memory
/// budget is spent the same way on every build.
pub(super) struct Plan {
    pub(super) steps: Vec<Step>,
    /// Arena bytes planned for identity bodies; variants get what is left.
    pub(super) identity_mem: u64,
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
        let mut identity_mem = 0u64;
        let steps = walk
            .files
            .iter()
            .map(|job| {
                let size = job.stamp.size;
                let in_mem = size < opts.sendfile_threshold
                    && identity_mem.saturating_add(size) <= opts.cache_max_bytes;
                if in_mem {
                    identity_mem += size;
                }
                let source = Source {
                    stamp: job.stamp,
                    sidecars: walk.sidecars(job).map(|s| s.map(|(_, stamp)| stamp)),
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
                        (entry.source == source && was_mem == in_mem).then_some(i)
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
        // once directory slashes are added.
        let mut index = walk.index.clone();
        add_dir_slashes(&mut index, &walk.dirs);
        index == old.index
    }
}

/// `dir + "/"` serves the directory's `index.html` when that is servable, and
/// is 403 otherwise (no listings).
pub(super) fn add_dir_slashes(index: &mut PathIndex, dirs: &[Box<[u8]>]) {
    let mut key = Vec::new();
    for dir in dirs {
        key.clear();
        key.extend_from_slice(dir);
        key.extend_from_slice(b"/index.html");
        let resource = match index.get(key.as_slice()) {
            Some(Resource::File(idx)) => Resource::File(*idx),
            _ => Resource::Forbidden,
        };
        key.truncate(dir.len() + 1);
        index.insert(key.as_slice().into(), resource);
    }
}
