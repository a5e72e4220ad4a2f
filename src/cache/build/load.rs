//! Pass 2, the **load**: read, hash and compress every file the plan marks
//! for loading, on a scoped pool of threads (low-priority except in the
//! first build). A file is read only once its stamp has settled and held
//! still around the read, so a write in progress is never published.
//!
//! Per file in memory, in the common case: `openat2` beneath the root,
//! `pread`, one `fstat` (the very file the walk stated, its stamp unchanged
//! since the walk), `close`. A full build's `pread` goes straight into the
//! body's slot of the new segment ([`LoadedBody::Placed`]); in the first
//! build, whose walk stated no regular file, into the loader's chunk of the
//! segment's reserve ([`load_unstated`]), the same four syscalls.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod open;

use open::{open_beneath_root, rel_path, same_file, tree_changed};
pub(super) use open::{open_regular, Swapped};

use anyhow::Context;
use memmap2::MmapMut;
use xxhash_rust::xxh3::xxh3_128;

use super::arrivals::{Arrivals, Delivery, Leaving};
use super::place::{placed_segment, reserve_len, Dest, Placer, Reserve, Share, RESERVE_MAX_BODY};
use super::plan::{Plan, Step};
use super::render::content_type;
use super::sidecar::{read_sidecar, reject_sidecar, sidecar_verdict};
use super::walk::{is_forbidden, Walk};
use super::{exhausted, is_exhausted, Mode, TreeChanged};
use crate::cache::{compress, BuildOptions, FileStamp, SIDECARS};
use crate::http::accept::Coding;

/// How many times a file is read (or waited for, see [`STAMP_SETTLE`]) when
/// its stamp keeps changing under the read (it is being written). A file that
/// does not settle is not published: the old snapshot's version is kept, or
/// a new file stays out, until a later build finds it quiet.
pub(super) const MAX_READ_ATTEMPTS: usize = 6;

/// Kernel file timestamps come from a coarse clock (one jiffy: up to 10 ms),
/// so two writes within one tick leave the same ctime and the stamp cannot
/// tell them apart. A stamp is trusted only once its ctime is at least this
/// old: any later write then shows as a newer ctime, both to the re-check
/// after a read here and to the connection's check around `sendfile`.
pub(super) const STAMP_SETTLE: Duration = Duration::from_millis(20);

/// Pass 2's result for one file.
// Nearly every result is `Ok`: boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Loaded {
    Ok {
        file: LoadedFile,
        /// Variants in [`SIDECARS`] order (br, zstd, gzip), already judged
        /// worth keeping.
        variants: Vec<(Coding, Variant)>,
        /// Stamps of the sidecars used.
        sidecars: [Option<FileStamp>; 3],
    },
    Forbidden,
    Skip,
    /// Being written throughout: keep the old version if there is one.
    Unsettled,
}

/// A variant's bytes: in memory, or (a sidecar of at least
/// `sendfile_threshold`, checked against its source) sent from its own fd.
pub(super) enum Variant {
    Mem(Vec<u8>),
    File {
        /// The sidecar's walked path.
        path: std::path::PathBuf,
        stamp: FileStamp,
        /// Its content's xxh3-128 (its ETag's).
        hash: u128,
    },
}

/// Pass 2: load every `Step::Load` on [`Mode::loaders`] scoped
/// threads. Compression dominates (brotli 11 runs at about 1 MB/s per core),
/// so the work is spread through a shared cursor, a few files at a time.
///
/// `consume` runs on the calling thread meanwhile and takes each loaded
/// file's result in walk order as soon as its batch is done ([`Arrivals`]):
/// assembly overlaps the load instead of following it on one core. Returns
/// what `consume` returned, and the placed segment.
///
/// With `place` (and no compression in this build: the compressor reads the
/// bytes it loads), the in-memory bodies are read straight into one new
/// segment, each at the offset the walk's sizes give it
/// ([`LoadedBody::Placed`]), rather than into a buffer per file that
/// assembly would copy again. A file that changed since the walk leaves its
/// slot unused (its bytes are read into a buffer instead).
pub(super) fn load_with<R>(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    plan: &Plan,
    mode: Mode<'_>,
    place: bool,
    consume: impl FnOnce(&mut Arrivals<'_>) -> anyhow::Result<R>,
) -> anyhow::Result<(R, Option<MmapMut>)> {
    let todo: Vec<usize> = plan
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| matches!(s, Step::Load { .. }).then_some(i))
        .collect();
    let threads = mode.loaders(opts.compress.is_some()).min(todo.len());
    // Files handed out per cursor step: few enough that compression work
    // stays spread evenly, enough that the shared cursor is not touched
    // once per small file.
    let batch = if opts.compress.is_some() { 1 } else { 64 };
    let placed_size = |i: usize| match plan.steps[i] {
        Step::Load { in_mem: true } => walk.files[i].stamp.size as usize,
        _ => 0,
    };
    let placing = place && opts.compress.is_none();
    let stated_len: usize = todo.iter().map(|&i| placed_size(i)).sum();
    let reserved = match placing && walk.lazy {
        true => reserve_len(opts, threads),
        false => 0,
    };
    let mut placed = match placing {
        true => placed_segment(stated_len, reserved)?,
        false => None,
    };
    let granted = placed.as_ref().map_or(0, |m| m.len() - stated_len);
    // Each batch's share of the segment, in todo order: disjoint slices
    // the workers take whole.
    let mut rest: &mut [u8] = placed.as_deref_mut().unwrap_or_default();
    let mut at = 0;
    let shares: Vec<Mutex<Share<'_>>> = todo
        .chunks(batch)
        .map(|chunk| {
            let len = if rest.is_empty() {
                0
            } else {
                chunk.iter().map(|&i| placed_size(i)).sum()
            };
            let (buf, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            at += len;
            Mutex::new(Share { off: at - len, buf })
        })
        .collect();
    let reserve = Reserve::new(at, rest);
    let cursor = AtomicUsize::new(0);
    let delivery = Delivery::new(shares.len(), threads);
    // The workers log inside the caller's span (the log filter drops a
    // repeated start-up build's lines by its span).
    let span = tracing::Span::current();
    let consumed = std::thread::scope(|scope| {
        for _ in 0..threads {
            super::spawn_helper(scope, "build-load", || {
                let _span = span.enter();
                let _leaving = Leaving(&delivery);
                // Builders share CPUs with the shards: the request path
                // wins whenever both want a core (not in the first build:
                // nothing is served yet).
                mode.enter_helper();
                let mut placer = Placer::new(&reserve);
                loop {
                    let n = cursor.fetch_add(batch, Ordering::Relaxed);
                    let Some(chunk) = todo
                        .get(n..todo.len().min(n + batch))
                        .filter(|c| !c.is_empty())
                    else {
                        break;
                    };
                    let mut share = std::mem::take(
                        &mut *shares[n / batch].lock().unwrap_or_else(|e| e.into_inner()),
                    );
                    crate::sys::populate_write(share.buf);
                    let loaded: anyhow::Result<Vec<Loaded>> = chunk
                        .iter()
                        .map(|&i| {
                            let Step::Load { in_mem } = plan.steps[i] else {
                                unreachable!()
                            };
                            let dest = share.take(placed_size(i));
                            load_one(opts, walk, i, in_mem, dest, &mut placer)
                        })
                        .collect();
                    let failed = loaded.is_err();
                    if failed {
                        // Stop every worker: the build has failed.
                        cursor.store(todo.len(), Ordering::Relaxed);
                    }
                    delivery.deliver(n / batch, loaded);
                    if failed {
                        break;
                    }
                }
            });
        }
        let mut arrivals = Arrivals::new(&delivery);
        let consumed = consume(&mut arrivals);
        // Whatever is left is not wanted: the workers stop after their
        // batch in hand.
        cursor.store(todo.len(), Ordering::Relaxed);
        consumed
    });
    drop(shares);
    let used = reserve.end();
    if granted > 0 {
        // Give back the part of the reservation no body took.
        match (used, &mut placed) {
            (0, _) => placed = None,
            (used, Some(map)) => {
                crate::sys::shrink_anon(map, used).context("shrinking the snapshot body segment")?
            }
            (_, None) => {}
        }
    }
    Ok((consumed?, placed))
}

/// [`load_with`] without placing, every result by walk index (`None` for
/// files not loaded).
pub(super) fn load_all(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    plan: &Plan,
    mode: Mode<'_>,
) -> anyhow::Result<Vec<Option<Loaded>>> {
    let (results, _) = load_with(opts, walk, plan, mode, false, |arrivals| {
        let mut results: Vec<Option<Loaded>> = Vec::new();
        results.resize_with(walk.files.len(), || None);
        for (i, step) in plan.steps.iter().enumerate() {
            if let Step::Load { .. } = step {
                results[i] = Some(arrivals.next_load()?);
            }
        }
        Ok(results)
    })?;
    Ok(results)
}

/// Open and read (or, starting from disk, only stat) one file: the file,
/// or what the load makes of it instead (unsettled, skipped, forbidden).
fn read_one(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    job: &super::walk::FileJob,
    in_mem: bool,
    dest: Option<Dest<'_>>,
    placer: &mut Placer<'_, '_>,
) -> anyhow::Result<Result<LoadedFile, Loaded>> {
    let policy = MemPolicy {
        below: opts.sendfile_threshold,
        budget: if in_mem { job.stamp.size } else { 0 },
    };
    let stated = job.stamp.is_known();
    let loaded = if walk.from_disk {
        stat_unopened(walk, &job.path)
    } else {
        let opened = open_beneath_root(walk, &job.path, stated);
        match stated {
            true => opened.and_then(|f| load_file(&job.path, f, &job.stamp, policy, dest)),
            false => opened.and_then(|f| load_unstated(walk, &job.path, f, placer)),
        }
    };
    let file = match loaded {
        Ok(Some(file)) if !file.settled => return Ok(Err(Loaded::Unsettled)),
        Ok(Some(file)) => file,
        Ok(None) => {
            tracing::debug!(path = %job.path.display(), "skipping file replaced by a non-file");
            return Ok(Err(Loaded::Skip));
        }
        Err(err) if is_forbidden(&err) => {
            // Once per file and build: every request for it gets a 403.
            tracing::warn!(path = %job.path.display(), %err, "unreadable file; answering 403");
            return Ok(Err(Loaded::Forbidden));
        }
        Err(err) if tree_changed(&err) => {
            tracing::debug!(path = %job.path.display(), %err, "file changed since the walk");
            return Err(TreeChanged(job.path.clone()).into());
        }
        Err(err) if is_exhausted(&err) => return Err(exhausted(&job.path, err)),
        Err(err) => {
            tracing::warn!(path = %job.path.display(), %err, "skipping file");
            return Ok(Err(Loaded::Skip));
        }
    };
    Ok(Ok(file))
}

/// Read, hash and compress one file; use its sidecars where present.
fn load_one(
    opts: &BuildOptions,
    walk: &Walk<'_>,
    i: usize,
    in_mem: bool,
    dest: Option<Dest<'_>>,
    placer: &mut Placer<'_, '_>,
) -> anyhow::Result<Loaded> {
    let job = &walk.files[i];
    let file = match read_one(opts, walk, job, in_mem, dest, placer)? {
        Ok(file) => file,
        Err(outcome) => return Ok(outcome),
    };
    if walk.from_disk {
        // Unread, it has nothing to check a sidecar against: variants wait
        // for the background load, as compressed ones do.
        return Ok(Loaded::Ok {
            file,
            variants: Vec::new(),
            sidecars: [None; 3],
        });
    }
    // Only compression needs the media type.
    let compressible = opts.compress.is_some() && content_type(&job.path, &opts.default_type).1;
    let sidecars = walk.sidecars(job);
    // A body sent from its fd was not read (its validator is its stamp's):
    // to check its sidecars against it or compress it, it is read once
    // here, up to `compress_max_file_bytes`.
    let large = match &file.body {
        LoadedBody::File(Some(f)) if file.len <= opts.compress_max_file_bytes => {
            let wanted = sidecars.iter().any(Option::is_some)
                || (compressible && opts.compress.is_some_and(|c| file.len >= c.min_bytes));
            match wanted {
                true => read_large(f, &file)?,
                false => None,
            }
        }
        _ => None,
    };
    let (source_len, source_hash) = match &large {
        Some((bytes, hash)) => (bytes.len() as u64, *hash),
        None => (file.len, file.hash),
    };
    let source_checkable = !matches!(file.body, LoadedBody::File(_)) || large.is_some();
    if !source_checkable && sidecars.iter().any(Option::is_some) {
        tracing::info!(
            path = %job.path.display(),
            size = file.len,
            compress_max_file_bytes = opts.compress_max_file_bytes,
            "sidecars of a file larger than compress_max_file_bytes are not used"
        );
    }
    // A large file's sidecar may be as large as a variant built in memory
    // would be; a small file's is smaller than the file.
    let sidecar_max = match large {
        Some(_) => opts.sendfile_threshold.max(opts.compress_max_file_bytes),
        None => opts.sendfile_threshold,
    };
    let mut variants = Vec::new();
    let mut used = [None; 3];
    for (slot, sidecar) in sidecars.into_iter().enumerate() {
        let coding = SIDECARS[slot].0;
        if let Some((j, _)) = sidecar.filter(|_| source_checkable) {
            let side = &walk.files[j as usize];
            match read_sidecar(walk, side, sidecar_max) {
                Ok(Some((bytes, stamp))) => {
                    used[slot] = Some(stamp);
                    let source = (&file.stamp, source_len, source_hash);
                    match sidecar_verdict(coding, &bytes, &stamp, source) {
                        None if stamp.size >= opts.sendfile_threshold => {
                            let hash = xxh3_128(&bytes);
                            let path = side.path.clone();
                            variants.push((coding, Variant::File { path, stamp, hash }));
                            continue;
                        }
                        None => {
                            variants.push((coding, Variant::Mem(bytes)));
                            continue;
                        }
                        // Compressed from the source below instead.
                        Some(reason) => reject_sidecar(&side.path, &job.path, reason),
                    }
                }
                Ok(None) => {}
                Err(err) if tree_changed(&err) => {
                    return Err(TreeChanged(side.path.clone()).into());
                }
                Err(err) if is_exhausted(&err) => return Err(exhausted(&side.path, err)),
                Err(err) => {
                    tracing::warn!(path = %walk.files[j as usize].path.display(), %err, "skipping sidecar")
                }
            }
        }
        let Some(copts) = &opts.compress else {
            continue;
        };
        let (bytes, copts) = match (&file.body, &large) {
            (LoadedBody::Mem(bytes), _) => (bytes, *copts),
            // A large file is compressed at the fast levels at most: 20 MB
            // at brotli 11 would hold a builder for half a minute.
            (_, Some((bytes, _))) => (bytes, copts.for_root(u64::MAX)),
            _ => continue,
        };
        if !compressible || (bytes.len() as u64) < copts.min_bytes {
            continue;
        }
        match compress::encode(coding, bytes, &copts) {
            Ok(enc) if compress::worth_keeping(bytes.len() as u64, enc.len() as u64) => {
                variants.push((coding, Variant::Mem(enc)));
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(path = %job.path.display(), ?coding, %err, "compression failed")
            }
        }
    }
    Ok(Loaded::Ok {
        file,
        variants,
        sidecars: used,
    })
}

/// The bytes of a large file the load did not read, and their xxh3-128, as
/// of `file.stamp`; `None` when the file changed meanwhile (the rebuild its
/// change triggers reads it again).
fn read_large(f: &File, file: &LoadedFile) -> io::Result<Option<(Vec<u8>, u128)>> {
    let bytes = read_prefix(f, file.len)?;
    if bytes.len() as u64 != file.len || FileStamp::of(&f.metadata()?) != file.stamp {
        return Ok(None);
    }
    let hash = xxh3_128(&bytes);
    Ok(Some((bytes, hash)))
}

/// Which files [`load_file`] keeps in memory.
#[derive(Debug, Clone, Copy)]
pub(super) struct MemPolicy {
    /// Files of this size or more are sent from their fd.
    pub(super) below: u64,
    /// Arena bytes still free.
    pub(super) budget: u64,
}

impl MemPolicy {
    pub(super) fn fits(self, size: u64) -> bool {
        size < self.below && size <= self.budget
    }
}

/// One file read and hashed, not yet placed in a snapshot.
pub(super) struct LoadedFile {
    /// The stamp the hashed content belongs to (see [`load_file`]).
    pub(super) stamp: FileStamp,
    /// Bytes hashed, and so the body length.
    pub(super) len: u64,
    /// xxh3-128 of the content.
    pub(super) hash: u128,
    pub(super) body: LoadedBody,
    /// The stamp held still around the read (and was old enough to trust).
    pub(super) settled: bool,
}

pub(super) enum LoadedBody {
    Mem(Vec<u8>),
    /// Read into the placed segment at `off` (see [`load_all`]).
    Placed {
        off: usize,
    },
    /// Sent from the file, open already or (`None`: a start from disk, see
    /// [`stat_unopened`]) not opened yet.
    File(Option<File>),
}

/// Read and hash `file` (opened from `path`, used for logs), which must be
/// the file the walk stated as `seen` ([`Swapped`] otherwise). Files that fit
/// `policy` are kept in memory. Others are not read at all: like nginx,
/// their validator is derived from what `fstat` says (inode, size, mtime in
/// ns; see [`stamp_validator`]), so a root of large media starts in the
/// time it takes to stat it.
/// `Ok(None)` when the fd is not a regular file (swapped since the walk).
///
/// The stamp is taken before and after each read; when they differ the file
/// was written meanwhile and is read again, up to [`MAX_READ_ATTEMPTS`]. A
/// stamp younger than [`STAMP_SETTLE`] is waited out first. `Ok(Some)` with
/// `settled == false` when the file never held still.
///
/// The common case costs one `pread` and one `fstat`: when the walk's stamp
/// is already settled, the file is read at once, and the `fstat` after the
/// read both identifies the file (device and inode) and shows its stamp
/// unchanged since the walk, so it held still around the read. Otherwise
/// the stamp after that read starts the loop above.
pub(super) fn load_file(
    path: &Path,
    file: File,
    seen: &FileStamp,
    policy: MemPolicy,
    mut dest: Option<Dest<'_>>,
) -> io::Result<Option<LoadedFile>> {
    let mut attempt = 1;
    let mut first = None;
    if policy.fits(seen.size) && unsettled(seen, SystemTime::now()).is_none() {
        let read = read_body(&file, seen.size, &mut dest);
        let after = file.metadata()?;
        // Identity first: a read error from another file (a directory or
        // FIFO swapped in) means the tree changed.
        same_file(&after, seen)?;
        let (len, hash, body) = read?;
        if after.is_file() && FileStamp::of(&after) == *seen {
            return Ok(Some(LoadedFile {
                stamp: *seen,
                len,
                hash,
                body,
                settled: true,
            }));
        }
        attempt += 1;
        first = Some(after);
    }
    let mut meta = match first {
        Some(meta) => meta,
        None => {
            let meta = file.metadata()?;
            same_file(&meta, seen)?;
            meta
        }
    };
    loop {
        if !meta.is_file() {
            return Ok(None);
        }
        let before = FileStamp::of(&meta);
        if let Some(wait) = unsettled(&before, SystemTime::now()) {
            if attempt < MAX_READ_ATTEMPTS {
                attempt += 1;
                std::thread::sleep(wait);
                meta = file.metadata()?;
                continue;
            }
            // Still fresh on the last attempt: the read below may miss a
            // write within the same tick, so it cannot count as settled.
        }
        let fresh = unsettled(&before, SystemTime::now()).is_some();
        let (len, hash, in_mem) = if policy.fits(before.size) {
            // Read at most the size we budgeted for; a file that grew shows up
            // as a changed stamp below.
            let (len, hash, body) = read_body(&file, before.size, &mut dest)?;
            (len, hash, Some(body))
        } else {
            (before.size, stamp_validator(&before), None)
        };
        meta = file.metadata()?;
        let after = FileStamp::of(&meta);
        let settled = after == before && !fresh;
        if settled || attempt == MAX_READ_ATTEMPTS {
            if !settled {
                tracing::warn!(
                    path = %path.display(),
                    attempts = attempt,
                    "file kept changing while read; keeping its previous version"
                );
            }
            let body = in_mem.unwrap_or(LoadedBody::File(Some(file)));
            return Ok(Some(LoadedFile {
                stamp: before,
                len,
                hash,
                body,
                settled,
            }));
        }
        attempt += 1;
    }
}

/// [`load_file`] for a file the walk did not state (see
/// [`Walk::lazy`]): read first, then `fstat`. The read holds the file's
/// bytes as of one moment when the stamp after it is settled already as of
/// the read's start: a write that overlapped the read would have set a
/// newer ctime. So the common case costs one `pread` and one `fstat`, as
/// with a stated file. A file that is larger than the read, still fresh, or
/// changed size goes through [`load_file`] with that stamp as the walk's.
/// Memory comes from the walk's shared budget, in the order files load. The
/// first read goes straight into the placed segment's reserve
/// ([`Placer::room`]); a body larger than that is read again into a buffer
/// of its own.
fn load_unstated(
    walk: &Walk<'_>,
    path: &Path,
    file: File,
    placer: &mut Placer<'_, '_>,
) -> io::Result<Option<LoadedFile>> {
    let below = walk.opts.sendfile_threshold;
    let take = |size: u64| size < below && walk.lazy_budget.take(size);
    let mut fresh = false;
    let first = loop {
        let started = SystemTime::now();
        let Some(room) = placer.room(fresh) else {
            // The reserve is spent: read at its size below.
            break Err(FileStamp::of(&file.metadata()?));
        };
        let want = room.len();
        // One `pread`: short of `want` means it met the end, which the size
        // in the `fstat` below confirms (anything else takes the slow path).
        let read = file.read_at(room, 0);
        let meta = file.metadata()?;
        if !meta.is_file() {
            // A directory or FIFO swapped in since the listing.
            return Err(io::Error::other(Swapped));
        }
        let stamp = FileStamp::of(&meta);
        match read {
            Ok(n) if n == want && !fresh && want < RESERVE_MAX_BODY => {
                // The chunk's end was too short for it: once more in a new
                // chunk.
                fresh = true;
            }
            Ok(n)
                if n < want
                    && n as u64 == stamp.size
                    && unsettled(&stamp, started).is_none()
                    && take(stamp.size) =>
            {
                let (hash, body) = match placer.commit(n) {
                    Some(dest) => (xxh3_128(dest.buf), LoadedBody::Placed { off: dest.off }),
                    None => (xxh3_128(&[]), LoadedBody::Mem(Vec::new())),
                };
                break Ok(LoadedFile {
                    stamp,
                    len: n as u64,
                    hash,
                    body,
                    settled: true,
                });
            }
            _ => break Err(stamp),
        }
    };
    let stamp = match first {
        Ok(file) => return Ok(Some(file)),
        Err(stamp) => stamp,
    };
    // Larger than the first read, written meanwhile, or past the budget.
    let policy = MemPolicy {
        below,
        budget: if take(stamp.size) { stamp.size } else { 0 },
    };
    let loaded = load_file(path, file, &stamp, policy, None)?;
    let in_mem = matches!(
        &loaded,
        Some(LoadedFile {
            body: LoadedBody::Mem(_),
            ..
        })
    );
    if policy.budget > 0 && !in_mem {
        walk.lazy_budget.give_back(policy.budget);
    }
    Ok(loaded)
}

/// A file of a start from disk ([`Walk::from_disk`]): stated by name, not
/// opened, and sent from disk under its stamp's validator, as a large file
/// is ([`stamp_validator`]). The connection opens it beneath the root and
/// checks that stamp before sending a byte, so a path swapped meanwhile is
/// never served under it. One whose stamp is too fresh to trust is opened
/// and waited out as any file sent from disk ([`load_file`]).
fn stat_unopened(walk: &Walk<'_>, path: &Path) -> io::Result<Option<LoadedFile>> {
    let st = crate::sys::lstat_at(walk.root_dir.dir.as_fd(), rel_path(walk, path)?)?;
    if !st.is_file {
        return Ok(None);
    }
    let stamp = FileStamp::of_lstat(&st);
    if unsettled(&stamp, SystemTime::now()).is_some() {
        let file = open_beneath_root(walk, path, true)?;
        let unread = MemPolicy {
            below: 0,
            budget: 0,
        };
        return load_file(path, file, &stamp, unread, None);
    }
    Ok(Some(LoadedFile {
        stamp,
        len: stamp.size,
        hash: stamp_validator(&stamp),
        body: LoadedBody::File(None),
        settled: true,
    }))
}

/// How long until `stamp`'s ctime is [`STAMP_SETTLE`] old, if it is not yet.
pub(super) fn unsettled(stamp: &FileStamp, now: SystemTime) -> Option<Duration> {
    let now_ns = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let age_ns = now_ns - i128::from(stamp.ctime_ns);
    let settle_ns = STAMP_SETTLE.as_nanos() as i128;
    (age_ns < settle_ns).then(|| {
        // A ctime ahead of our clock (skew between the coarse and fine
        // clocks) waits at most one settle period.
        Duration::from_nanos((settle_ns - age_ns).min(settle_ns) as u64)
    })
}

/// Up to `size` bytes from the start of `file` (into `dest` when it is
/// exactly that long), their length and hash.
fn read_body(
    file: &File,
    size: u64,
    dest: &mut Option<Dest<'_>>,
) -> io::Result<(u64, u128, LoadedBody)> {
    match dest {
        Some(dest) if dest.buf.len() as u64 == size => {
            let n = read_into(file, dest.buf)?;
            let hash = xxh3_128(&dest.buf[..n]);
            Ok((n as u64, hash, LoadedBody::Placed { off: dest.off }))
        }
        _ => {
            let bytes = read_prefix(file, size)?;
            Ok((bytes.len() as u64, xxh3_128(&bytes), LoadedBody::Mem(bytes)))
        }
    }
}

/// Up to `size` bytes from the start of `file`, fewer if it ends first.
pub(super) fn read_prefix(file: &File, size: u64) -> io::Result<Vec<u8>> {
    let size = usize::try_from(size).map_err(|_| io::Error::other("file too large for memory"))?;
    let mut buf = vec![0; size];
    let filled = read_into(file, &mut buf)?;
    buf.truncate(filled);
    Ok(buf)
}

/// Fill `buf` from the start of `file`; the bytes read, fewer if it ends
/// first. Positional reads leave the fd's offset alone.
fn read_into(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// The validator of a file sent from its fd, computed without reading it:
/// a hash of its inode, size and mtime (ns). Any write changes the mtime,
/// and a replacement by rename the inode; the connection re-checks the full
/// stamp around every piece it sends, so bytes of another version never go
/// out under this ETag.
pub(super) fn stamp_validator(stamp: &FileStamp) -> u128 {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&stamp.ino.to_le_bytes());
    bytes[8..16].copy_from_slice(&stamp.size.to_le_bytes());
    // As an i128, as before stamps held one: the same file keeps its ETag.
    bytes[16..].copy_from_slice(&i128::from(stamp.mtime_ns).to_le_bytes());
    xxh3_128(&bytes)
}
