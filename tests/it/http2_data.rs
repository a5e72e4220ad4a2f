//! HTTP/2 DATA from the snapshot by reference (issue 25): a body is queued
//! as frame headers in the connection's own buffer and payloads pointing
//! into the snapshot, so what must hold is what a client sees. A reload
//! in the middle of a download still delivers the old version whole while
//! a stream on the same connection gets the new one; tiny windows (frames
//! around the reference threshold, many streams interleaved, more pieces
//! than one write gathers) deliver every body exactly; and a 100 KiB
//! download costs no page faults per response (the copy into a buffer that
//! grew past glibc's mmap threshold cost ~3.5). Both transports, and both
//! I/O backends through `SHARDHTTPD_TEST_IO`.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::h2::{self, Target};
use support::*;

use crate::http2::{big_body, h2_site, Both};

/// 100 KiB of numbered lines naming `version`, so a byte of the other
/// version, or one out of place, shows.
fn versioned(version: &str) -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 100 * 1024 {
        s.push_str(&format!("{version} line {i:07}\n"));
        i += 1;
    }
    s.truncate(100 * 1024);
    s
}

/// A stream of the old snapshot that is half sent when the file is
/// replaced and the snapshot rebuilt: it ends with the old bytes, all of
/// them, and a stream opened after the reload on the same connection gets
/// the new ones (the connection's queue then holds DATA of two snapshots:
/// the old one's copied, the current one's by reference).
#[test]
fn reload_mid_download_delivers_the_old_version_whole() {
    let Some(py) = h2::python_or_skip("reload mid download") else {
        return;
    };
    let site = h2_site("h2-data-reload");
    let both = Both::start(&site, &[]);
    let mut round = 0;
    for t in both.targets() {
        round += 1;
        let what = format!("reload mid download over {}", t.name());
        let old = versioned(&format!("old{round}"));
        let new = versioned(&format!("new{round}"));
        site.replace("v.txt", old.as_bytes());
        both.server().signal("HUP");
        await_body(
            both.server(),
            Duration::from_secs(10),
            "/v.txt",
            &old,
            &what,
        );
        let run = h2::Running::start(
            &py,
            "reload",
            &t,
            &["--path", "/v.txt", "--size", "20000", "--wait", "10"],
        );
        assert_eq!(run.first["status"], 200, "{what}: {}", run.first);
        assert_eq!(
            run.first["received"], 20000,
            "{what}: the window's worth: {}",
            run.first
        );
        site.replace("v.txt", new.as_bytes());
        both.server().signal("HUP");
        await_body(
            both.server(),
            Duration::from_secs(10),
            "/v.txt",
            &new,
            &what,
        );
        let v = run.finish();
        assert_eq!(v["closed"], false, "{what}: {v}");
        assert_eq!(v["ended"], serde_json::json!([1, 3]), "{what}: {v}");
        assert_eq!(
            v["before_windows"]["3"], 20000,
            "{what}: the new stream's first window: {v}"
        );
        assert_eq!(
            v["lengths"],
            serde_json::json!({"1": old.len(), "3": new.len()}),
            "{what}: {v}"
        );
        assert_eq!(
            v["sha256"]["1"],
            sha256_hex(old.as_bytes()).as_str(),
            "{what}: stream 1 is not the old version whole: {v}"
        );
        assert_eq!(
            v["sha256"]["3"],
            sha256_hex(new.as_bytes()).as_str(),
            "{what}: stream 3 is not the new version: {v}"
        );
    }
}

/// Stream windows of a few hundred bytes to a few KiB, eight streams of a
/// 300 KiB body at once, every frame's bytes given back as it arrives:
/// frames below, at and above the size from which payloads go by
/// reference, more of them queued than one write gathers, interleaved
/// across streams. Every body arrives exact.
#[test]
fn small_windows_interleave_exact_bodies() {
    let Some(py) = h2::python_or_skip("small windows") else {
        return;
    };
    let site = h2_site("h2-data-windows");
    let both = Both::start(&site, &[]);
    let want = sha256_hex(&big_body());
    for t in both.targets() {
        for window in ["700", "1024", "1500", "5000"] {
            let what = format!("windows of {window} B over {}", t.name());
            let v = h2::probe(
                &py,
                "small-windows",
                &t,
                &[
                    "--path", "/big.bin", "--size", window, "--count", "8", "--wait", "20",
                ],
            );
            let streams = ["1", "3", "5", "7", "9", "11", "13", "15"];
            assert_eq!(v["ended"].as_array().map(Vec::len), Some(8), "{what}: {v}");
            assert!(
                v["largest_data"].as_u64().unwrap() <= window.parse().unwrap(),
                "{what}: {v}"
            );
            for s in streams {
                assert_eq!(v["sha256"][s], want.as_str(), "{what}: stream {s}: {v}");
            }
            assert_eq!(v["closed"], false, "{what}: {v}");
        }
    }
}

/// Minor page faults of process `pid` so far (`/proc/PID/stat` field 10).
fn minflt(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    // Fields from the third (state): minflt is the tenth overall.
    after_comm.split(' ').nth(7).unwrap().parse().unwrap()
}

/// One h2load run of `n` requests for `path`; asserts they all succeeded.
fn h2load(t: &Target, path: &str, n: u64, what: &str) {
    let out = Command::new("h2load")
        .args(["-n", &n.to_string(), "-c", "2", "-m", "10"])
        .arg(t.url_ip(path))
        .output()
        .expect("run h2load");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let r = h2::parse_h2load(&text);
    assert!(out.status.success(), "{what}: {text}");
    assert_eq!((r.succeeded, r.status_2xx), (n, n), "{what}: {text}");
}

/// A 100 KiB body goes out from the snapshot: the connection's buffer
/// holds frame headers, not payloads, so responses do not grow it (and
/// fault in its pages) one after another. Before, a 128 KiB round of
/// copied DATA grew it past the pooled 64 KiB and glibc's mmap threshold:
/// ~3.5 minor faults per response.
#[test]
fn downloads_fault_no_pages_per_response() {
    if !installed("h2load") {
        loud("SKIP: h2load not installed (Debian nghttp2-client)");
        return;
    }
    let site = h2_site("h2-data-faults");
    site.write("100k.bin", &big_body()[..100 * 1024]);
    let both = Both::start(&site, &["--cores", "1"]);
    let pid = both.server().pid();
    const N: u64 = 1000;
    for t in both.targets() {
        let what = format!("100 KiB over {}", t.name());
        // Warm: pools, the TLS sessions' buffers, the ring's.
        h2load(&t, "/100k.bin", 200, &what);
        let before = minflt(pid);
        h2load(&t, "/100k.bin", N, &what);
        let faults = minflt(pid) - before;
        eprintln!("{what}: {faults} minor faults for {N} responses");
        assert!(
            faults < N / 10,
            "{what}: {faults} minor faults for {N} responses"
        );
    }
}
