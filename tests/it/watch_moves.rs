//! Directories renamed after start stay watched: the first walk watches
//! each directory on its own (not through `notify`'s recursive watch, which
//! would walk the tree a second time), so a directory renamed within the
//! root or into it must be watched again under its new name before the
//! rebuild that walks it, and changes inside it afterwards are still seen.

use crate::support;

use std::fs;
use std::time::Duration;

use support::*;

const VISIBLE_WITHIN: Duration = Duration::from_secs(1);

#[test]
fn changes_inside_directories_renamed_after_start_are_served() {
    let site = Site::new("watch-moves");
    site.write("a/old/deep/x.txt", b"x\n");
    site.write("b/keep.txt", b"k\n");
    let outside = site.base().join("incoming/sub");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("y.txt"), b"y\n").unwrap();
    let server = Server::start(&site.root, &["--compress", "false"]);
    await_body(&server, VISIBLE_WITHIN, "/a/old/deep/x.txt", "x\n", "start");

    // Within the root: the directory and the one below it keep being watched
    // under their new names.
    fs::rename(site.root.join("a/old"), site.root.join("b/new")).unwrap();
    await_body(
        &server,
        VISIBLE_WITHIN,
        "/b/new/deep/x.txt",
        "x\n",
        "renamed within",
    );
    site.write("b/new/added.txt", b"added\n");
    await_body(
        &server,
        VISIBLE_WITHIN,
        "/b/new/added.txt",
        "added\n",
        "written in the renamed directory",
    );
    site.write("b/new/deep/x.txt", b"x2\n");
    await_body(
        &server,
        VISIBLE_WITHIN,
        "/b/new/deep/x.txt",
        "x2\n",
        "rewritten below it",
    );

    // Into the root from beside it.
    fs::rename(site.base().join("incoming"), site.root.join("c")).unwrap();
    await_body(&server, VISIBLE_WITHIN, "/c/sub/y.txt", "y\n", "renamed in");
    site.write("c/sub/z.txt", b"z\n");
    await_body(
        &server,
        VISIBLE_WITHIN,
        "/c/sub/z.txt",
        "z\n",
        "written in the directory renamed in",
    );
}
