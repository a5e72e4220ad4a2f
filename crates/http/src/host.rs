//! Virtual hosts: the name a request is for (its `Host`, its `:authority`,
//! or the TLS SNI) → whatever claims that name, by exact name first, then
//! by the longest `*.` wildcard. Names compare without case, without a
//! port and without a trailing dot. Lookup costs one hash probe per label
//! of the name at most, however many names the table holds.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// Names are the config's, never a client's, so a fast hash that an
/// attacker could collide costs nothing: a lookup only reads the table.
type Map<T> = HashMap<Box<[u8]>, T, FxBuildHasher>;

/// Longest DNS name (RFC 1035 §2.3.4); a longer host claims nothing.
pub const NAME_MAX: usize = 253;

/// Names → values: exact names, and wildcards `*.example.com` that match
/// any name ending in `.example.com` (at any depth, as nginx's do; not
/// `example.com` itself).
#[derive(Debug, Clone)]
pub struct Names<T> {
    exact: Map<T>,
    /// Keyed by the suffix after `*.`.
    wild: Map<T>,
}

impl<T> Default for Names<T> {
    fn default() -> Self {
        Names {
            exact: Map::default(),
            wild: Map::default(),
        }
    }
}

/// Why a name cannot be claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// Not a DNS name, an IP address or a `*.` wildcard.
    Invalid,
    /// Another entry claimed it first.
    Taken,
}

impl std::fmt::Display for NameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameError::Invalid => {
                "is not a host name (letters, digits, `-` and `.`; or `*.` and a domain \
                 for every name under it)"
            }
            NameError::Taken => "is claimed twice",
        })
    }
}

impl<T: Copy> Names<T> {
    /// Claim `name` (`example.com`, `*.example.com`, an IP address) for
    /// `value`.
    pub fn insert(&mut self, name: &str, value: T) -> Result<(), NameError> {
        let lower = name.to_ascii_lowercase();
        let lower = lower.strip_suffix('.').unwrap_or(&lower);
        let (map, key) = match lower.strip_prefix("*.") {
            Some(suffix) => (&mut self.wild, suffix),
            None => (&mut self.exact, lower),
        };
        if key.is_empty()
            || key.len() > NAME_MAX
            || key.starts_with('.')
            || key.contains("..")
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return Err(NameError::Invalid);
        }
        let key: Box<[u8]> = key.as_bytes().into();
        if map.contains_key(&key) {
            return Err(NameError::Taken);
        }
        map.insert(key, value);
        Ok(())
    }

    /// No name is claimed.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wild.is_empty()
    }

    /// Names claimed, exact and wildcard.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wild.len()
    }

    /// What claims `host` (a `Host` value, `uri-host [":" port]`, already
    /// checked by the parser, or an SNI name): its exact name, else the
    /// longest wildcard that covers it.
    #[inline]
    pub fn get(&self, host: &[u8]) -> Option<T> {
        let (name, upper) = bare(host)?;
        if upper {
            return self.get_upper(name);
        }
        self.get_lower(name)
    }

    /// [`get`](Self::get) for a name with capitals: lowercased first.
    #[cold]
    #[inline(never)]
    fn get_upper(&self, name: &[u8]) -> Option<T> {
        let mut buf = [0u8; NAME_MAX];
        let out = &mut buf[..name.len()];
        for (o, b) in out.iter_mut().zip(name) {
            *o = b.to_ascii_lowercase();
        }
        self.get_lower(out)
    }

    /// [`get`](Self::get) for a lowercase name without port or trailing dot.
    fn get_lower(&self, name: &[u8]) -> Option<T> {
        if let Some(v) = self.exact.get(name) {
            return Some(*v);
        }
        if self.wild.is_empty() {
            return None;
        }
        // Each suffix after a dot, longest first.
        let mut rest = name;
        while let Some(dot) = rest.iter().position(|&b| b == b'.') {
            rest = &rest[dot + 1..];
            if let Some(v) = self.wild.get(rest) {
                return Some(*v);
            }
        }
        None
    }
}

/// Whether `host` (a `Host` value) is `name` (a TLS server name), without
/// case, port or trailing dot: then the site the name chose is the host's
/// too, with no lookup.
#[inline]
pub fn same(host: &[u8], name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    bare(host).is_some_and(|(h, _)| h.eq_ignore_ascii_case(name.as_bytes()))
}

/// `host` without its port and trailing dot (an IPv6 literal keeps its
/// brackets), and whether it has capitals; `None` when that is empty or
/// longer than a DNS name. Eight bytes a step: a `Host` is read once, a
/// word at a time, for its colon and its capitals together.
#[inline]
fn bare(host: &[u8]) -> Option<(&[u8], bool)> {
    let (name, upper) = if host.first() == Some(&b'[') {
        let close = host.iter().position(|&b| b == b']')?;
        (&host[..=close], false)
    } else {
        let mut end = host.len();
        let mut upper = false;
        for (i, chunk) in host.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            let x = u64::from_le_bytes(word);
            // Exact for ASCII, which a `Host` is (`valid_host`); a byte
            // past 0x7f can flip the capitals of its neighbour, but such a
            // name claims nothing either way.
            let colons = zero_bytes(x ^ (ONES * u64::from(b':')));
            let capitals = (x + ONES * u64::from(0x80 - b'A'))
                & !(x + ONES * u64::from(0x80 - b'Z' - 1))
                & HIGH;
            if colons != 0 {
                let at = (colons.trailing_zeros() / 8) as usize;
                // Capitals in the port do not count.
                let keep = if at == 0 { 0 } else { HIGH >> (64 - 8 * at) };
                upper |= capitals & keep != 0;
                end = i * 8 + at;
                break;
            }
            upper |= capitals != 0;
        }
        (&host[..end], upper)
    };
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() || name.len() > NAME_MAX {
        return None;
    }
    Some((name, upper))
}

const ONES: u64 = u64::from_le_bytes([1; 8]);
const HIGH: u64 = u64::from_le_bytes([0x80; 8]);

/// The high bit of each byte of `x` that is zero (and, above the first
/// zero byte, perhaps of others: only the lowest set bit is exact).
#[inline]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Names<u32> {
        let mut n = Names::default();
        n.insert("example.com", 1).unwrap();
        n.insert("www.example.com", 2).unwrap();
        n.insert("*.example.com", 3).unwrap();
        n.insert("*.cdn.example.com", 4).unwrap();
        n.insert("Other.TEST.", 5).unwrap();
        n.insert("127.0.0.1", 6).unwrap();
        n
    }

    #[test]
    fn exact_then_longest_wildcard() {
        let n = table();
        for (host, want) in [
            (&b"example.com"[..], Some(1)),
            (b"EXAMPLE.com:8443", Some(1)),
            (b"example.com.", Some(1)),
            (b"www.example.com", Some(2)),
            (b"img.example.com", Some(3)),
            (b"a.b.example.com", Some(3)),
            (b"x.cdn.example.com", Some(4)),
            (b"cdn.example.com", Some(3)),
            (b"other.test", Some(5)),
            (b"127.0.0.1:80", Some(6)),
            (b"example.org", None),
            (b"notexample.com", None),
            (b"[::1]:8080", None),
            (b"", None),
            (b":80", None),
        ] {
            assert_eq!(n.get(host), want, "{}", String::from_utf8_lossy(host));
        }
    }

    #[test]
    fn a_name_is_claimed_once_and_must_be_a_name() {
        let mut n = table();
        assert_eq!(n.insert("WWW.example.com", 9), Err(NameError::Taken));
        assert_eq!(n.insert("*.EXAMPLE.com", 9), Err(NameError::Taken));
        for bad in ["", "*.", "a..b", ".a", "a b", "a/b", "*", "a.*.b", "x:80"] {
            assert_eq!(n.insert(bad, 9), Err(NameError::Invalid), "{bad}");
        }
        assert_eq!(n.len(), 6);
    }

    #[test]
    fn a_host_is_its_server_name_without_case_port_or_dot() {
        assert!(same(b"A.Test:443", "a.test"));
        assert!(same(b"a.test.", "a.test."));
        assert!(!same(b"b.a.test", "a.test"));
        assert!(!same(b"a.tes", "a.test"));
        assert!(!same(b"", "a.test"));
    }

    #[test]
    fn port_and_trailing_dot_go_and_ipv6_literals_keep_brackets() {
        assert_eq!(bare(b"[::1]:443"), Some((&b"[::1]"[..], false)));
        assert_eq!(bare(b"A.b.:80"), Some((&b"A.b"[..], true)));
        assert_eq!(bare(b"a.b:80"), Some((&b"a.b"[..], false)));
        assert_eq!(
            bare(b"abcdefgh.ijklmnoP"),
            Some((&b"abcdefgh.ijklmnoP"[..], true))
        );
        assert_eq!(
            bare(b"abcdefgh.ijklmno:8Z"),
            Some((&b"abcdefgh.ijklmno"[..], false))
        );
        assert_eq!(bare(b"abcdefG:"), Some((&b"abcdefG"[..], true)));
        assert_eq!(bare(b"@[`{:"), Some((&b"@[`{"[..], false)), "around A-Z");
        assert_eq!(bare(b"."), None);
        assert_eq!(bare(&vec![b'a'; NAME_MAX + 1]), None);
        let mut n = Names::default();
        n.insert("[::1]", 1).unwrap_err();
        n.insert(&"a".repeat(NAME_MAX), 2).unwrap();
        assert_eq!(n.get("A".repeat(NAME_MAX).as_bytes()), Some(2));
    }
}
