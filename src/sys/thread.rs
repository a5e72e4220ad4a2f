//! Thread scheduling.

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
