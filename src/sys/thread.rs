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
