//! The snapshot at scale: a root of large sparse media starts without its
//! bytes being read (issue 13 item 2, validator half).

mod support;

use std::fs;
use std::time::Instant;

use support::*;

/// Two 8 GiB sparse files: before, every large file was read in full to
/// hash its ETag before the server listened (72 s here); now the validator
/// comes from `fstat`, and the harness's start deadline (10 s) holds.
#[test]
fn a_root_of_16_gib_of_sparse_large_files_starts_without_reading_them() {
    let site = Site::new("sparse");
    for name in ["a.mp4", "b.mp4"] {
        let f = fs::File::create(site.root.join(name)).unwrap();
        f.set_len(8 << 30).unwrap();
    }
    let started = Instant::now();
    let server = Server::start(&site.root, &["--compress", "false"]);
    let r = server.send(&request("HEAD", "/a.mp4", &[]));
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200);
    assert_eq!(r.content_length(), Some(8 << 30));
    let etag_a = r.must("etag").to_owned();
    let etag_b = server
        .send(&request("HEAD", "/b.mp4", &[]))
        .must("etag")
        .to_owned();
    assert_ne!(etag_a, etag_b, "validators differ by inode");
    // A range from the middle is served from the fd.
    let r = server.send(&request(
        "GET",
        "/b.mp4",
        &[("Range", "bytes=4294967296-4294967299")],
    ));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, [0, 0, 0, 0]);
    eprintln!("16 GiB sparse root: start to first response {elapsed:?}");
}
