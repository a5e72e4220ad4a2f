//! Running the binary without root: some failures (EACCES on a file or a
//! port below 1024) only happen to an unprivileged user.

use std::path::Path;
use std::process::Command;

use super::{bin, installed, loud, proc_status_field};

/// Whether the tests run as root (uid 0).
pub fn running_as_root() -> bool {
    proc_status_field(Path::new("/proc/self/status"), "Uid")
        .and_then(|v| v.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false)
}

/// The binary run through `setpriv` as nobody, with no capabilities; `None`
/// after a loud SKIP naming `why` when setpriv is missing.
pub fn setpriv_nobody(why: &str) -> Option<Command> {
    if !installed("setpriv") {
        loud(&format!("SKIP: setpriv not installed (util-linux); {why}"));
        return None;
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ])
    .arg(bin());
    Some(cmd)
}
