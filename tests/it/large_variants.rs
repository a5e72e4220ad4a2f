//! Compression of files sent from disk (at least `sendfile_threshold`,
//! 1 MiB here) up to `compress_max_file_bytes` (issue 24, section 6): a
//! large JS bundle or JSON file gets brotli, zstd and gzip variants, and
//! its checked sidecars are served, with `Vary: Accept-Encoding`, an ETag
//! per encoding, and ranges on the variant. Prints the bytes each encoding
//! saves on a 5 MB JS bundle and a 20 MB JSON file.

use crate::support;

use std::io::Write;
use std::time::Duration;

use support::metrics::await_value;
use support::*;

fn get_with(server: &Server, path: &str, accept: &str, extra: &[(&str, &str)]) -> Response {
    let mut headers = vec![("Accept-Encoding", accept)];
    headers.extend_from_slice(extra);
    server.send(&request("GET", path, &headers))
}

/// A JS bundle of `len` bytes: functions with numbered names and bodies,
/// compressible as real bundles are (repetitive, not one repeated line).
fn js_bundle(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 256);
    let mut i = 0u64;
    while out.len() < len {
        let x = i.wrapping_mul(2_654_435_761) % 100_003;
        let _ = writeln!(
            out,
            "export function handler{i}(event, ctx) {{ const v = ctx.values[{x}] ?? {}; \
             if (v > {x}) {{ return render(\"item-{i}\", v); }} return null; }}",
            i % 97
        );
        i += 1;
    }
    out.truncate(len);
    out
}

/// A JSON array of `len` bytes of records.
fn json_records(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 256);
    out.push(b'[');
    let mut i = 0u64;
    while out.len() < len - 2 {
        let x = i.wrapping_mul(40_503) % 1_000_003;
        let _ = write!(
            out,
            "{{\"id\":{i},\"name\":\"user{x}\",\"score\":{},\"active\":{},\"tags\":[\"t{}\",\"t{}\"]}},",
            x % 1000,
            x % 2 == 0,
            x % 13,
            x % 7
        );
        i += 1;
    }
    out.truncate(len - 1);
    out.push(b']');
    out
}

/// Every encoding of `path` decodes to `data`, says `Vary` and its own
/// ETag, and is smaller; returns (encoding, bytes) for the report.
fn variants_of(server: &Server, path: &str, data: &[u8]) -> Vec<(&'static str, usize)> {
    // Past 8 MiB to compress, the variants are built in the background
    // after the start: until then the file goes as identity, with `Vary`.
    let ready = poll_until(Duration::from_secs(120), || {
        let r = get_with(server, path, "br", &[]);
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{path}");
        r.header("content-encoding") == Some("br")
    });
    assert!(ready, "{path}: no variants after 120 s");
    let identity = get_with(server, path, "identity", &[]);
    assert_eq!(identity.status, 200);
    assert!(identity.body == data, "{path}: identity body differs");
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"), "{path}");
    let mut etags = vec![identity.must("etag").to_owned()];
    let mut sizes = vec![("identity", data.len())];
    for coding in ["br", "zstd", "gzip"] {
        let r = get_with(server, path, coding, &[]);
        assert_eq!(r.status, 200, "{path} {coding}");
        assert_eq!(r.header("content-encoding"), Some(coding), "{path}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{path}");
        assert!(
            decode_body(Some(coding), &r.body) == data,
            "{path}: {coding} does not decode to the file"
        );
        assert!(r.body.len() < data.len() / 2, "{path}: {coding} too large");
        let etag = r.must("etag").to_owned();
        assert!(!etags.contains(&etag), "{path}: {coding} shares an ETag");
        etags.push(etag);
        sizes.push((coding, r.body.len()));
    }
    sizes
}

/// The two files the issue names: a 5 MB JS bundle and a 20 MB JSON file,
/// both sent from disk, both get variants; the bytes saved are printed.
#[test]
fn large_bundle_and_json_get_variants() {
    let site = Site::new("large-variants");
    let js = js_bundle(5_000_000);
    let json = json_records(20_000_000);
    site.write("app.js", &js);
    site.write("data.json", &json);
    let server = Server::start(&site.root, &["--sendfile-threshold", "1MiB"]);
    for (path, data) in [("/app.js", &js), ("/data.json", &json)] {
        let sizes = variants_of(&server, path, data);
        let line: Vec<String> = sizes
            .iter()
            .map(|(c, n)| {
                let saved = 100.0 * (1.0 - *n as f64 / data.len() as f64);
                format!("{c} {n} ({saved:.1}% saved)")
            })
            .collect();
        eprintln!("{path}: {}", line.join(", "));
    }
}

/// A range of a variant is a range of the variant's bytes.
#[test]
fn ranges_apply_to_the_variant() {
    let site = Site::new("large-variants-range");
    let js = js_bundle(2_000_000);
    site.write("app.js", &js);
    let server = Server::start(&site.root, &["--sendfile-threshold", "1MiB"]);
    let whole = get_with(&server, "/app.js", "gzip", &[]);
    assert_eq!(whole.header("content-encoding"), Some("gzip"));
    let r = get_with(&server, "/app.js", "gzip", &[("Range", "bytes=100-1099")]);
    assert_eq!(r.status, 206, "{r:?}");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 100-1099/{}", whole.body.len()).as_str())
    );
    assert!(r.body == whole.body[100..1100]);
}

/// With compression off, a large file's sidecars are what its variants
/// are: served byte for byte once they decode to the file; one that does
/// not is rejected (and counted) and the file goes as identity.
#[test]
fn sidecars_of_large_files_are_served_when_they_match() {
    let site = Site::new("large-sidecars");
    let js = js_bundle(3_000_000);
    site.write("app.js", &js);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    gz.write_all(&js).unwrap();
    let gz = gz.finish().unwrap();
    site.write("app.js.gz", &gz);
    let other = js_bundle(3_000_001);
    site.write("other.js", &other[1..]);
    let mut wrong = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
    wrong.write_all(&other).unwrap();
    site.write("other.js.gz", &wrong.finish().unwrap());
    let server = Server::start(
        &site.root,
        &["--sendfile-threshold", "1MiB", "--compress", "false"],
    );
    let r = get_with(&server, "/app.js", "gzip", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert!(r.body == gz, "the sidecar's bytes");
    let r = get_with(&server, "/other.js", "gzip", &[]);
    assert_eq!(r.header("content-encoding"), None);
    assert!(r.body == other[1..]);
    await_value(
        server.admin_addr(),
        "shardhttpd_sidecar_rejected_total",
        &[("reason", "mismatch")],
        1.0,
    );
}

/// Past `compress_max_file_bytes` a file goes as identity, without `Vary`.
#[test]
fn files_past_the_cap_go_as_identity() {
    let site = Site::new("large-variants-cap");
    let js = js_bundle(2_000_000);
    site.write("app.js", &js);
    let server = Server::start(
        &site.root,
        &[
            "--sendfile-threshold",
            "1MiB",
            "--compress-max-file-bytes",
            "1MiB",
        ],
    );
    let r = get_with(&server, "/app.js", "br, gzip", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), None);
    assert!(r.body == js);
}

/// A sidecar of at least `sendfile_threshold` is checked against its
/// source and then sent from its own fd, with ranges on it: truncated on
/// disk afterwards (no watcher to rebuild), it is no longer served, where
/// a variant in memory would be.
#[test]
fn large_sidecars_are_sent_from_their_fd() {
    let site = Site::new("large-sidecar-fd");
    let json = json_records(6_000_000);
    site.write("data.json", &json);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
    gz.write_all(&json).unwrap();
    let gz = gz.finish().unwrap();
    assert!(gz.len() > 1024 * 1024, "a sidecar past the threshold");
    let sidecar = site.write("data.json.gz", &gz);
    let server = Server::start(
        &site.root,
        &[
            "--sendfile-threshold",
            "1MiB",
            "--compress",
            "false",
            "--watch",
            "false",
        ],
    );
    let r = get_with(&server, "/data.json", "gzip", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert!(r.body == gz, "the sidecar's bytes");
    let etag = r.must("etag").to_owned();
    let r = get_with(
        &server,
        "/data.json",
        "gzip",
        &[("Range", "bytes=1000000-1000999")],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.body == gz[1_000_000..1_001_000]);
    let identity = get_with(&server, "/data.json", "br", &[]);
    assert_eq!(identity.header("content-encoding"), None);
    assert!(identity.body == json);
    assert_ne!(identity.must("etag"), etag);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&sidecar)
        .unwrap()
        .set_len(1000)
        .unwrap();
    let r = get_with(&server, "/data.json", "gzip", &[]);
    assert_eq!(r.status, 503, "a changed sidecar is not served: {r:?}");
    assert!(get_with(&server, "/data.json", "identity", &[]).body == json);
}
