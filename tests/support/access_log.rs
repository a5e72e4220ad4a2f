//! The access log as a test reads it: the lines a server has written to
//! its file, and waiting until there are enough of them.

use std::path::Path;
use std::time::Duration;

use super::poll_until;

/// Shards hand their lines to the writer every 250 ms; allow for a loaded
/// CI machine.
pub const FLUSHED_WITHIN: Duration = Duration::from_secs(5);

/// The lines in `path` now (none while it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The lines in `path` once there are at least `n`; fails the test when
/// they do not come within [`FLUSHED_WITHIN`].
pub fn wait_for_lines(path: &Path, n: usize) -> Vec<String> {
    let ok = poll_until(FLUSHED_WITHIN, || lines(path).len() >= n);
    let got = lines(path);
    assert!(
        ok,
        "expected {n} lines in {}, got {}: {:?}",
        path.display(),
        got.len(),
        &got[got.len().saturating_sub(20)..]
    );
    got
}
