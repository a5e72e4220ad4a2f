//! Thread scheduling, and handing freed heap back to the kernel.

/// Nice value for background work (snapshot builds, compression).
const BACKGROUND_NICE: libc::c_int = 10;

/// Lower the calling thread's scheduling priority. On Linux a nice value
/// belongs to a thread, so this leaves the shards untouched. Best effort:
/// failure only means the builder competes on equal terms.
pub fn lower_thread_priority() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority takes plain integers; for PRIO_PROCESS with a
    // thread id Linux changes only that thread.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE) };
}

/// Allocations of at least this many bytes get their own mapping.
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Keep glibc's mmap threshold at its default of 128 KiB for good. Left
/// alone, freeing the build's big transient buffers raises it (up to
/// 32 MiB), and the snapshot's chunks of entries and heads, allocated
/// later, then land in the heap among the build's freed blocks, where
/// pages half used by one cannot go back to the kernel: 1 000 000 files
/// of 1 KiB kept about 55 MB more resident that way. Best effort, like
/// [`trim_heap`].
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it has no
    // preconditions and is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// The cores available to the process (its affinity mask), at least 1.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Malloc arenas per core (glibc's default is 8).
const ARENAS_PER_CORE: usize = 2;

/// Cap glibc's malloc arenas at [`ARENAS_PER_CORE`] per core. Left at
/// glibc's 8 per core, the first build's loaders (four per core) each got
/// an arena of their own, and some kept 10-20 MiB resident after the
/// build: at 200 000 files of 1 KiB the resting RSS went from 257-261 MiB
/// to as much as 283 MiB; capped at 4 arenas on 2 cores, 261-270 MiB.
/// Keep-alive CPU per request was no worse (the hot path barely
/// allocates). Best effort, like [`trim_heap`]; `MALLOC_ARENA_MAX` in the
/// environment still wins.
pub fn cap_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let arenas = libc::c_int::try_from(cores() * ARENAS_PER_CORE).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter; it has no
        // preconditions and is safe to call at any time.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

/// Return free heap pages to the kernel. A snapshot build frees large
/// transient buffers (file contents, brotli and zstd state) on several
/// builder threads; glibc keeps them in per-thread arenas otherwise, and the
/// resident size would stay at the build's peak.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator has already
    // freed; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
