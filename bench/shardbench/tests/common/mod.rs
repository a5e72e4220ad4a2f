//! What the tests of the shardbench executable share.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// A test that cannot run here. Under `SHARDHTTPD_TEST_REQUIRE=all`
/// (`.ci/run` sets it; the server's suites honour it too, in
/// tests/support) it fails with `note`; otherwise `note` goes to stderr,
/// past libtest's capture, and the caller returns.
#[track_caller]
pub fn skip_test(note: &str) {
    if std::env::var("SHARDHTTPD_TEST_REQUIRE").is_ok_and(|v| v == "all") {
        panic!("{note}\n(SHARDHTTPD_TEST_REQUIRE=all: a test that cannot run fails)");
    }
    // Past libtest's capture (eprintln! is captured), as tests/support's
    // `loud` writes.
    let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("\n*** {note} ***\n\n"));
}

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// The debug shardhttpd next to this test's target directory, built if a
/// `cargo test -p shardbench` alone did not build it.
pub fn shardhttpd() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let bin = dir.join("shardhttpd");
    if !bin.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-p", "shardhttpd", "--bin", "shardhttpd"])
            .status()
            .expect("run cargo")
            .success();
        assert!(ok, "building shardhttpd failed");
    }
    assert!(bin.is_file(), "no shardhttpd at {}", bin.display());
    bin
}
