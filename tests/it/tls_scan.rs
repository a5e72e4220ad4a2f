//! A TLS scanner (testssl.sh, from Debian's `testssl.sh` package) against
//! the HTTPS listener: no SSLv2/3, TLS 1.0/1.1, NULL, anonymous, export,
//! LOW, 3DES/IDEA or CBC ("AVERAGE") suites; forward secrecy offered. Slow
//! (about a minute), so it is its own test crate and runs in parallel.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;

use support::tls::*;
use support::*;

#[test]
fn testssl_finds_no_weak_protocol_or_cipher_and_forward_secrecy() {
    if !installed("testssl") {
        loud("SKIP: testssl (apt-get install testssl.sh) not installed");
        return;
    }
    let site = Site::new("tls-scan");
    let ca = Ca::new();
    let leaf = ca.leaf(site.base(), "localhost", &["localhost"]);
    let server = TlsServer::start(&site.root, &ca, &leaf, &[]);
    let json = site.base().join("testssl.json");
    let out = Command::new("testssl")
        .args([
            "--quiet",
            "--color",
            "0",
            "--warnings",
            "off",
            "--protocols",
            "--std",
            "--fs",
        ])
        .arg("--jsonfile")
        .arg(&json)
        .arg(server.tls_addr.to_string())
        .output()
        .expect("run testssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let findings: Vec<serde_json::Value> = serde_json::from_slice(
        &std::fs::read(&json).unwrap_or_else(|e| panic!("no JSON from testssl ({e}):\n{text}")),
    )
    .unwrap();
    let by_id: BTreeMap<String, String> = findings
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap_or_default().to_owned(),
                f["finding"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let finding = |id: &str| {
        by_id
            .get(id)
            .unwrap_or_else(|| panic!("testssl reported no `{id}`:\n{text}"))
    };
    for id in [
        "SSLv2",
        "SSLv3",
        "TLS1",
        "TLS1_1",
        "cipherlist_NULL",
        "cipherlist_aNULL",
        "cipherlist_EXPORT",
        "cipherlist_LOW",
        "cipherlist_3DES_IDEA",
        "cipherlist_AVERAGE",
    ] {
        assert_eq!(finding(id), "not offered", "{id}:\n{text}");
    }
    assert!(finding("TLS1_2").starts_with("offered"), "{text}");
    assert!(finding("TLS1_3").starts_with("offered"), "{text}");
    assert_eq!(finding("cipherlist_STRONG"), "offered", "{text}");
    assert_eq!(finding("PFS"), "offered", "{text}");
    assert_eq!(finding("ALPN"), "http/1.1", "{text}");
}
