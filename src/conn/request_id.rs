//! Request ids (`request_id_header`): the id a trusted proxy sent is kept,
//! any other request gets one made here, and the id goes out as a response
//! header (HTTP/1 and HTTP/2, errors included) and into the access log.
//!
//! A made id is 32 lower-case hex digits, as nginx's `$request_id`: 16 of
//! a process-random prefix (drawn once at start), 4 of the shard and 12 of
//! the shard's own counter. Unique within a process without any shared
//! state, and across processes (restarts, upgrades) by the prefix; making
//! one costs no syscall and no allocation.

use std::net::IpAddr;
use std::sync::OnceLock;

use super::proxy;

/// Longest id kept from a trusted proxy; a longer one is replaced.
pub const MAX_INCOMING: usize = 128;
/// Longest `request_id_header` name (checked by the config).
pub const MAX_NAME: usize = crate::config::REQUEST_ID_NAME_MAX;
/// Room for the whole response line: name, `: `, id, CRLF.
const LINE_MAX: usize = MAX_NAME + 2 + MAX_INCOMING + 2;
/// Digits of a made id.
const MADE_LEN: usize = 32;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The configured header: its name as written (HTTP/1) and lower-cased
/// (HTTP/2, RFC 9113 §8.2.1).
#[derive(Debug, Clone)]
pub struct IdHeader {
    pub name: std::sync::Arc<str>,
    pub lower: std::sync::Arc<[u8]>,
}

impl IdHeader {
    pub fn new(name: &str) -> IdHeader {
        IdHeader {
            name: name.into(),
            lower: name.to_ascii_lowercase().into_bytes().into(),
        }
    }
}

/// One shard's id maker.
#[derive(Debug)]
pub struct RequestIds {
    /// The process prefix and the shard, as hex digits.
    stem: [u8; 20],
    next: u64,
}

impl RequestIds {
    pub fn new(shard: usize) -> RequestIds {
        let mut stem = [0u8; 20];
        hex(&mut stem[..16], prefix());
        hex(&mut stem[16..], shard as u64);
        RequestIds { stem, next: 0 }
    }

    /// The next id of this shard, into `out`.
    fn make(&mut self, out: &mut [u8; MADE_LEN]) {
        self.next = self.next.wrapping_add(1);
        out[..20].copy_from_slice(&self.stem);
        hex(&mut out[20..], self.next);
    }
}

impl Default for RequestIds {
    fn default() -> RequestIds {
        RequestIds::new(0)
    }
}

/// 64 random bits drawn once per process: std's `RandomState` keys come
/// from the OS (`getrandom`), so hashing nothing with them is a random
/// value, at the cost of one syscall at start. (aws-lc's generator would
/// first gather CPU-jitter entropy: about 400 million instructions, which
/// callgrind showed in every start.)
fn prefix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static PREFIX: OnceLock<u64> = OnceLock::new();
    *PREFIX.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    })
}

/// The low `out.len()` nibbles of `v` as hex digits.
fn hex(out: &mut [u8], mut v: u64) {
    for d in out.iter_mut().rev() {
        *d = HEX[(v & 15) as usize];
        v >>= 4;
    }
}

/// An id a client may set: 1 to [`MAX_INCOMING`] visible ASCII bytes
/// without `"` or `\` (nothing a log line or a header would need to
/// escape).
fn acceptable(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_INCOMING
        && id
            .iter()
            .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

/// A request's id and its response header line, on the stack.
pub struct IdLine {
    buf: [u8; LINE_MAX],
    len: usize,
    /// Where the id starts in `buf`.
    at: usize,
}

impl IdLine {
    /// `Name: id\r\n`.
    pub fn line(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The id alone.
    pub fn id(&self) -> &[u8] {
        &self.buf[self.at..self.len - 2]
    }

    /// The id as a response field, for every protocol.
    pub fn field<'a>(&'a self, header: &'a IdHeader) -> crate::serve::RequestId<'a> {
        crate::serve::RequestId {
            line: self.line(),
            lower_name: &header.lower,
            id: self.id(),
        }
    }
}

/// The id of a request: `incoming` (the header's value) when `peer` is a
/// trusted proxy and the value is acceptable, else a new one.
pub fn choose(
    header: &IdHeader,
    trusted: &[proxy::Cidr],
    peer: Option<IpAddr>,
    incoming: Option<&[u8]>,
    ids: &mut RequestIds,
) -> IdLine {
    let mut line = IdLine {
        buf: [0; LINE_MAX],
        len: 0,
        at: 0,
    };
    let name = header.name.as_bytes();
    let name = &name[..name.len().min(MAX_NAME)];
    line.buf[..name.len()].copy_from_slice(name);
    line.buf[name.len()..name.len() + 2].copy_from_slice(b": ");
    line.at = name.len() + 2;
    let kept =
        incoming.filter(|id| acceptable(id) && peer.is_some_and(|ip| proxy::trusted(trusted, ip)));
    let end = match kept {
        Some(id) => {
            line.buf[line.at..line.at + id.len()].copy_from_slice(id);
            line.at + id.len()
        }
        None => {
            let mut made = [0u8; MADE_LEN];
            ids.make(&mut made);
            line.buf[line.at..line.at + MADE_LEN].copy_from_slice(&made);
            line.at + MADE_LEN
        }
    };
    line.buf[end..end + 2].copy_from_slice(b"\r\n");
    line.len = end + 2;
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> proxy::Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn made_ids_are_32_hex_digits_distinct_per_shard_and_request() {
        let header = IdHeader::new("X-Request-Id");
        let mut a = RequestIds::new(0);
        let mut b = RequestIds::new(1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            for ids in [&mut a, &mut b] {
                let l = choose(&header, &[], None, None, ids);
                let id = l.id().to_vec();
                assert_eq!(id.len(), 32);
                assert!(id.iter().all(|b| HEX.contains(b)), "{id:?}");
                assert!(l.line().starts_with(b"X-Request-Id: "));
                assert!(l.line().ends_with(b"\r\n"));
                assert!(seen.insert(id), "ids repeat");
            }
        }
    }

    #[test]
    fn an_incoming_id_is_kept_only_from_a_trusted_peer() {
        let header = IdHeader::new("X-Request-Id");
        let trusted = [cidr("10.0.0.0/8")];
        let mut ids = RequestIds::new(3);
        let lb: IpAddr = "10.1.2.3".parse().unwrap();
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        let kept = choose(&header, &trusted, Some(lb), Some(b"abc-123"), &mut ids);
        assert_eq!(kept.id(), b"abc-123");
        assert_eq!(kept.line(), b"X-Request-Id: abc-123\r\n");
        let made = choose(&header, &trusted, Some(client), Some(b"abc-123"), &mut ids);
        assert_eq!(made.id().len(), 32);
        for bad in [
            &b""[..],
            b"a b",
            b"a\"b",
            b"a\\b",
            &[b'x'; MAX_INCOMING + 1],
        ] {
            let l = choose(&header, &trusted, Some(lb), Some(bad), &mut ids);
            assert_eq!(l.id().len(), 32, "{bad:?} is replaced");
        }
        let longest = [b'x'; MAX_INCOMING];
        let l = choose(&header, &trusted, Some(lb), Some(&longest), &mut ids);
        assert_eq!(l.id(), longest);
    }
}
