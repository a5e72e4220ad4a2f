//! The admin endpoint seen from a test: plain HTTP/1.0 GETs, the Prometheus
//! text exposition parsed into samples, and waits on a metric reaching a
//! value (so tests wait on observable state, not on a sleep).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::poll_until;

/// One HTTP/1.0 GET to the admin listener, read to EOF: (status, body).
pub fn admin_get(addr: SocketAddr, target: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read {target}: {e}"))?;
    let text = String::from_utf8(raw).map_err(|e| e.to_string())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no head in {text:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// One sample of the text exposition format.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of a `/metrics` body (label values unescaped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let name_end = line.find(['{', ' ']).expect("sample line has a value");
            let name = line[..name_end].to_owned();
            let mut labels = BTreeMap::new();
            let mut rest = &line[name_end..];
            if let Some(inner) = rest.strip_prefix('{') {
                let mut chars = inner.char_indices();
                let mut key = String::new();
                let mut end = 0;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '}' => {
                            end = i + 1;
                            break;
                        }
                        ',' => {}
                        '=' => {
                            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                            let mut value = String::new();
                            while let Some((_, c)) = chars.next() {
                                match c {
                                    '\\' => value.push(chars.next().expect("escape").1),
                                    '"' => break,
                                    c => value.push(c),
                                }
                            }
                            labels.insert(std::mem::take(&mut key), value);
                        }
                        c => key.push(c),
                    }
                }
                rest = &inner[end..];
            }
            let value = rest.split_whitespace().next().expect("value");
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// Scrapes `/metrics` and parses it.
pub fn scrape(admin: SocketAddr) -> Vec<Sample> {
    let (status, body) = admin_get(admin, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "/metrics: {body}");
    parse(&body)
}

/// Sum of `name` over the samples whose labels include all of `filter`.
pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            filter
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// Scrapes until the sum of `name` over `filter` equals `want` (shards
/// publish every 250 ms); returns the last samples, or panics with them.
#[track_caller]
pub fn await_value(
    admin: SocketAddr,
    name: &str,
    filter: &[(&str, &str)],
    want: f64,
) -> Vec<Sample> {
    let mut last = Vec::new();
    let ok = poll_until(Duration::from_secs(10), || {
        last = scrape(admin);
        sum(&last, name, filter) == want
    });
    assert!(
        ok,
        "{name}{filter:?} is {} after 10 s, want {want}; samples: {:#?}",
        sum(&last, name, filter),
        last.iter().filter(|s| s.name == name).collect::<Vec<_>>()
    );
    last
}

/// The snapshot generation the server reports.
pub fn generation(admin: SocketAddr) -> u64 {
    sum(&scrape(admin), "shardhttpd_snapshot_generation", &[]) as u64
}
