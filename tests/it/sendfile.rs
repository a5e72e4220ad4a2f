//! Bodies sent from an fd (files at or above `--sendfile-threshold`): whole
//! bodies, ranges, HEAD, keep-alive and pipelining after them, a small
//! memory budget, and the write timeout for a reader that stops reading.
//! Every test runs twice: with the default verified copy (`pread`, `fstat`,
//! write) and with zero-copy `sendfile` (`--sendfile true`), which has its
//! own code path for every byte and must send exactly the same bodies.

use crate::support;

use std::fs;
use std::io::Read;
use std::time::Duration;

use support::sendfile_mode::{both_modes, Mode};
use support::*;

const BIG: usize = 3 * 1024 * 1024 + 12_345;

/// Byte `i` of the large file; period 251 so an offset error shows.
fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

both_modes!(
    large_file_whole_body_then_keep_alive,
    ranges_on_a_large_file,
    tiny_memory_budget_still_serves_everything,
    reader_that_stops_reading_is_dropped_after_write_timeout,
);

fn big_site(tag: &str, size: usize) -> (Site, Vec<u8>) {
    let site = Site::new(tag);
    let data: Vec<u8> = (0..size).map(byte).collect();
    site.write("big.bin", &data);
    (site, data)
}

fn large_file_whole_body_then_keep_alive(mode: Mode) {
    let (site, data) = big_site("sf-whole", BIG);
    let server = Server::start(
        &site.root,
        &mode.flags(&["--sendfile-threshold", "1048576"]),
    );
    let mut c = server.connect();
    // Big, small, big, pipelined in one write: the connection must switch
    // between fd and memory bodies cleanly.
    let raw = format!(
        "{}{}{}",
        get("/big.bin"),
        get("/style.css"),
        get("/big.bin")
    );
    c.send(raw.as_bytes());
    for (n, want) in [&data[..], STYLE_CSS, &data[..]].into_iter().enumerate() {
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("response {n}: {e}"));
        assert_eq!(r.status, 200, "response {n}: {r:?}");
        assert_common_headers(&r, "GET");
        assert!(r.body == want, "response {n}: body differs");
    }
    let r = c.roundtrip(&request("HEAD", "/big.bin", &[]));
    assert_eq!(r.content_length(), Some(BIG as u64));
    assert!(r.body.is_empty());
    let r = c.roundtrip(&get("/index.html"));
    assert_eq!(r.body, INDEX_HTML, "after HEAD of a large file");
}

fn ranges_on_a_large_file(mode: Mode) {
    let (site, data) = big_site("sf-range", BIG);
    let server = Server::start(
        &site.root,
        &mode.flags(&["--sendfile-threshold", "1048576"]),
    );
    let mut c = server.connect();
    for (spec, lo, hi) in [
        ("bytes=1000-1999", 1000, 1999),
        ("bytes=-7", BIG - 7, BIG - 1),
        ("bytes=2097150-", 2_097_150, BIG - 1),
        ("bytes=0-0", 0, 0),
    ] {
        let r = c.roundtrip(&request("GET", "/big.bin", &[("Range", spec)]));
        assert_eq!(r.status, 206, "{spec}: {r:?}");
        assert_eq!(
            r.must("content-range"),
            format!("bytes {lo}-{hi}/{BIG}"),
            "{spec}"
        );
        assert!(r.body == data[lo..=hi], "{spec}: body differs");
    }
    let r = c.roundtrip(&request(
        "GET",
        "/big.bin",
        &[("Range", "bytes=10-19,1048570-1048589,-5")],
    ));
    assert_eq!(r.status, 206, "{r:?}");
    let boundary = boundary_of(r.must("content-type")).expect("multipart boundary");
    let parts = parse_multipart(&r.body, &boundary).expect("multipart body");
    let want = [(10, 19), (1_048_570, 1_048_589), (BIG - 5, BIG - 1)];
    assert_eq!(parts.len(), want.len());
    for (part, (lo, hi)) in parts.iter().zip(want) {
        assert_eq!(
            part.header("content-range"),
            Some(format!("bytes {lo}-{hi}/{BIG}").as_str())
        );
        assert_eq!(part.data, &data[lo..=hi]);
    }
}

fn tiny_memory_budget_still_serves_everything(mode: Mode) {
    let (site, data) = big_site("sf-budget", 200_000);
    let server = Server::start(&site.root, &mode.flags(&["--cache-max-bytes", "1000"]));
    for (path, body) in [
        ("/index.html", INDEX_HTML.to_vec()),
        ("/big.bin", data),
        ("/img.png", png_bytes()),
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert!(r.body == body, "{path}: body differs");
    }
}

/// Sockets among the server's fds.
fn socket_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    fs::read_link(e.path())
                        .map(|t| t.to_string_lossy().starts_with("socket:"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

fn reader_that_stops_reading_is_dropped_after_write_timeout(mode: Mode) {
    // Larger than what loopback socket buffers can hold, so the server's
    // writes stall.
    const SIZE: usize = 64 * 1024 * 1024;
    let (site, _data) = big_site("sf-write-timeout", SIZE);
    let mut server = Server::start(
        &site.root,
        &mode.flags(&["--write-timeout", "1", "--cores", "1"]),
    );
    let idle = socket_count(server.pid());
    let mut c = server.connect();
    c.send(get("/big.bin").as_bytes());
    assert!(
        poll_until(Duration::from_secs(5), || socket_count(server.pid()) > idle),
        "connection never accepted"
    );
    // Read nothing; the server should give up on us.
    let dropped = poll_until(Duration::from_secs(6), || {
        socket_count(server.pid()) <= idle
    });
    assert!(
        dropped,
        "stalled connection still open 6 s after a 1 s write timeout\n{}",
        server.log_text()
    );
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(
        got < SIZE,
        "whole body arrived although the server dropped us"
    );
    assert!(server.is_alive());
    assert_eq!(server.get("/index.html").status, 200);
}
