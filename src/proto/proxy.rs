//! The client's real address behind a load balancer: the PROXY protocol
//! header (v1 text and v2 binary, as HAProxy, AWS NLB and ingress
//! controllers send it) that opens a connection on a `proxy_protocol`
//! listener, the `trusted_proxies` it is believed from, and the rightmost
//! untrusted address of a `real_ip_header` such as `X-Forwarded-For`
//! (nginx's `real_ip_recursive on`).
//!
//! Pure functions over byte slices, no allocation: the connection peeks
//! the socket into a stack buffer and calls [`parse`]. A refused
//! connection is named by a [`Refusal`], and each shard's
//! [`RefusalLimit`] decides which refusals get a warn line (`conn::peer`
//! writes it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The longest v1 header, `\r\n` included (the specification's figure).
pub const MAX_V1: usize = 107;
/// The v2 fixed part: signature, version/command, family, length.
pub const V2_FIXED: usize = 16;
/// Most bytes of addresses and TLVs a v2 header may carry. TLVs (AWS's VPC
/// endpoint id, HAProxy's SSL and unique-id TLVs) fit with room to spare;
/// a larger header is refused rather than buffered.
pub const MAX_V2_PAYLOAD: usize = 1024;
/// The longest header accepted, of either version.
pub const MAX_HEADER: usize = V2_FIXED + MAX_V2_PAYLOAD;

const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8] = b"PROXY ";

/// What the bytes read so far hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A valid start of a header: read more.
    Partial,
    /// A complete header of `len` bytes. `source` is the client's address,
    /// or `None` for v1 `UNKNOWN`, v2 `LOCAL` and v2 families other than
    /// TCP/UDP over IPv4/IPv6 (the connection keeps its own peer address).
    Done {
        len: usize,
        source: Option<SocketAddr>,
    },
}

/// Why a header is refused; each one closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// The connection does not start with a PROXY header.
    NotProxy,
    /// A v1 or v2 header that breaks the specification.
    Malformed,
    /// Past [`MAX_V1`] or [`MAX_HEADER`].
    TooLong,
}

/// Parse the start of a connection's bytes.
pub fn parse(buf: &[u8]) -> Result<Parsed, Invalid> {
    if buf.is_empty() {
        return Ok(Parsed::Partial);
    }
    let sig = buf.len().min(V2_SIGNATURE.len());
    if buf[..sig] == V2_SIGNATURE[..sig] {
        return parse_v2(buf);
    }
    let pre = buf.len().min(V1_PREFIX.len());
    if buf[..pre] == V1_PREFIX[..pre] {
        return parse_v1(buf);
    }
    Err(Invalid::NotProxy)
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, Invalid> {
    let window = &buf[..buf.len().min(MAX_V1)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if window.contains(&b'\n') {
            return Err(Invalid::Malformed);
        }
        return if buf.len() >= MAX_V1 {
            Err(Invalid::TooLong)
        } else {
            Ok(Parsed::Partial)
        };
    };
    match window.get(cr + 1) {
        None => return Ok(Parsed::Partial),
        Some(b'\n') => {}
        Some(_) => return Err(Invalid::Malformed),
    }
    let line = std::str::from_utf8(&window[V1_PREFIX.len()..cr]).map_err(|_| Invalid::Malformed)?;
    let len = cr + 2;
    let mut parts = line.split(' ');
    let proto = parts.next().ok_or(Invalid::Malformed)?;
    if proto == "UNKNOWN" {
        // Whatever follows is ignored (the specification says so).
        return Ok(Parsed::Done { len, source: None });
    }
    let (src, dst, sport, dport) = match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some(a), Some(b), Some(c), Some(d), None) => (a, b, c, d),
        _ => return Err(Invalid::Malformed),
    };
    let ip: IpAddr = match proto {
        "TCP4" => IpAddr::V4(src.parse::<Ipv4Addr>().map_err(|_| Invalid::Malformed)?),
        "TCP6" => IpAddr::V6(src.parse::<Ipv6Addr>().map_err(|_| Invalid::Malformed)?),
        _ => return Err(Invalid::Malformed),
    };
    match proto {
        "TCP4" => dst.parse::<Ipv4Addr>().map(|_| ()),
        _ => dst.parse::<Ipv6Addr>().map(|_| ()),
    }
    .map_err(|_| Invalid::Malformed)?;
    let source_port = port(sport)?;
    port(dport)?;
    Ok(Parsed::Done {
        len,
        source: Some(SocketAddr::new(ip, source_port)),
    })
}

/// A v1 port: decimal, no sign, no leading zero (the specification's form).
fn port(s: &str) -> Result<u16, Invalid> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Invalid::Malformed);
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(Invalid::Malformed);
    }
    s.parse().map_err(|_| Invalid::Malformed)
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, Invalid> {
    if buf.len() < V2_FIXED {
        // The signature so far matched; the version byte is checked as
        // soon as it is here.
        if buf.len() > 12 && buf[12] >> 4 != 2 {
            return Err(Invalid::Malformed);
        }
        return Ok(Parsed::Partial);
    }
    let ver_cmd = buf[12];
    if ver_cmd >> 4 != 2 {
        return Err(Invalid::Malformed);
    }
    let payload = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if payload > MAX_V2_PAYLOAD {
        return Err(Invalid::TooLong);
    }
    let len = V2_FIXED + payload;
    let command = ver_cmd & 0x0f;
    let family = buf[13];
    if command > 1 {
        return Err(Invalid::Malformed);
    }
    // The address block's size for the family (the TLVs after it are
    // skipped); an unknown family's block is skipped whole.
    let need = match family >> 4 {
        0 => 0,
        1 => 12,
        2 => 36,
        3 => 216,
        _ => return Err(Invalid::Malformed),
    };
    if family & 0x0f > 2 {
        return Err(Invalid::Malformed);
    }
    if command == 1 && payload < need {
        return Err(Invalid::Malformed);
    }
    if buf.len() < len {
        return Ok(Parsed::Partial);
    }
    let a = &buf[V2_FIXED..len];
    // LOCAL: the balancer's own connection (health checks); keep the peer.
    let source = match (command, family) {
        (1, 0x11 | 0x12) => Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
            u16::from_be_bytes([a[8], a[9]]),
        )),
        (1, 0x21 | 0x22) => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&a[..16]);
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(ip)),
                u16::from_be_bytes([a[32], a[33]]),
            ))
        }
        _ => None,
    };
    Ok(Parsed::Done { len, source })
}

/// One `trusted_proxies` entry: an address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/8`, `::1/128`, or a bare address (a /32 or /128).
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| format!("`{s}` is not an address or CIDR such as 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?,
        };
        if mask(addr, prefix) != addr {
            return Err(format!(
                "`{s}` has bits set past its prefix; did you mean `{}/{prefix}`?",
                mask(addr, prefix)
            ));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl Cidr {
    /// `ip` is in the block. An IPv4-mapped IPv6 address (a dual-stack
    /// listener's view of an IPv4 client) matches IPv4 blocks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.addr
            }
            _ => false,
        }
    }
}

/// `ip` is in one of `trusted`.
pub fn trusted(trusted: &[Cidr], ip: IpAddr) -> bool {
    trusted.iter().any(|c| c.contains(ip))
}

/// The client's address from a `real_ip_header` value sent by a trusted
/// peer: walking from the right, the first address not in `trusted`
/// (nginx's `real_ip_recursive on`); the leftmost when all are trusted.
/// `None` when an element is not an address: the connection's peer stays.
pub fn forwarded_for(value: &[u8], trusted_set: &[Cidr]) -> Option<IpAddr> {
    let value = std::str::from_utf8(value).ok()?;
    let mut last = None;
    for item in value.rsplit(',') {
        let ip = parse_forwarded_ip(item.trim())?;
        last = Some(ip);
        if !trusted(trusted_set, ip) {
            return Some(ip);
        }
    }
    last
}

/// An element of `X-Forwarded-For`/`X-Real-IP`: an address, possibly with
/// a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_forwarded_ip(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    s.parse::<SocketAddr>().ok().map(|a| a.ip())
}

/// The values of field `name` (case-insensitive) in a raw HTTP/1 head, in
/// order.
pub fn header_values<'h>(head: &'h [u8], name: &'h str) -> impl Iterator<Item = &'h [u8]> + 'h {
    head.split(|&b| b == b'\n').skip(1).filter_map(move |line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        if !line[..colon].eq_ignore_ascii_case(name.as_bytes()) {
            return None;
        }
        Some(line[colon + 1..].trim_ascii())
    })
}

/// The client's address for a request from a trusted peer, by the last
/// `name` field of `head` (which, for `X-Forwarded-For`, balancers append
/// to: the last field holds the rightmost hops).
pub fn real_ip(head: &[u8], name: &str, trusted_set: &[Cidr]) -> Option<IpAddr> {
    let value = header_values(head, name).last()?;
    forwarded_for(value, trusted_set)
}

/// Why a `proxy_protocol` listener closed a connection unserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer is not in `trusted_proxies`: closed unread.
    Untrusted,
    /// What the peer sent is not a valid PROXY header.
    Header(Invalid),
    /// No complete header within `header_timeout`.
    TimedOut,
}

impl Refusal {
    /// The reason as the warn line gives it; nginx's words where it has
    /// them ("broken header … while reading PROXY protocol").
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Untrusted => "peer not in trusted_proxies",
            Refusal::Header(Invalid::NotProxy) => "no PROXY header",
            Refusal::Header(Invalid::Malformed) => "broken header",
            Refusal::Header(Invalid::TooLong) => "header too long",
            Refusal::TimedOut => "timed out",
        }
    }
}

/// The shortest time between two refusal lines of one shard. A refusal
/// costs the server nothing, but a line each would let a scanner, or a
/// balancer that sends no header, fill the journal; one line a second,
/// counting the refusals it stands for, still shows who and why.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// One shard's rate limit on refusal lines: the first refusal after a
/// quiet [`REFUSAL_LOG_EVERY`] is logged with the number that went
/// unlogged since the line before; a count left over when a flood stops
/// is logged on the shard's next tick ([`RefusalLimit::due`]).
#[derive(Debug, Default)]
pub struct RefusalLimit {
    /// When the last line was written.
    last: Option<Instant>,
    /// Refusals since then that got no line.
    suppressed: u64,
}

impl RefusalLimit {
    /// A refusal at `now`: `Some(n)` to log it, saying that `n` went
    /// unlogged before it; `None` to count it silently.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.quiet(now) {
            self.last = Some(now);
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// On the shard's tick: `Some(n)` when `n` refusals went unlogged and
    /// a line saying so is due.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        if self.suppressed == 0 || !self.quiet(now) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }

    fn quiet(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|last| now.saturating_duration_since(last) >= REFUSAL_LOG_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(buf: &[u8]) -> (usize, Option<SocketAddr>) {
        match parse(buf) {
            Ok(Parsed::Done { len, source }) => (len, source),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn v2(cmd: u8, fam: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = V2_SIGNATURE.to_vec();
        v.push(0x20 | cmd);
        v.push(fam);
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn v1_table() {
        type Case<'a> = (&'a [u8], Result<Option<&'a str>, Invalid>);
        let cases: &[Case] = &[
            (
                b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET",
                Ok(Some("192.0.2.1:56324")),
            ),
            (
                b"PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n",
                Ok(Some("[2001:db8::1]:1")),
            ),
            (b"PROXY UNKNOWN\r\n", Ok(None)),
            (b"PROXY UNKNOWN ffff:: ffff:: 1 2\r\n", Ok(None)),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", Err(Invalid::Malformed)),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", Err(Invalid::Malformed)),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
                Err(Invalid::Malformed),
            ),
            (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", Err(Invalid::Malformed)),
            (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", Err(Invalid::Malformed)),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
                Err(Invalid::Malformed),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
                Err(Invalid::Malformed),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
                Err(Invalid::Malformed),
            ),
            (
                b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
                Err(Invalid::Malformed),
            ),
            (
                b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
                Err(Invalid::Malformed),
            ),
            (
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
                Err(Invalid::Malformed),
            ),
            (b"GET / HTTP/1.1\r\n\r\n", Err(Invalid::NotProxy)),
            (b"\x16\x03\x01\x02\x00", Err(Invalid::NotProxy)),
            (b"proxy TCP4", Err(Invalid::NotProxy)),
        ];
        for (input, want) in cases {
            let got = parse(input).map(|p| match p {
                Parsed::Done { source, .. } => source,
                Parsed::Partial => panic!("partial: {:?}", String::from_utf8_lossy(input)),
            });
            let want = want.map(|w| w.map(|s| s.parse::<SocketAddr>().unwrap()));
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(input));
        }
        let full = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
        assert_eq!(done(full).0, full.len());
    }

    #[test]
    fn v1_every_prefix_is_partial_and_length_is_capped() {
        let full = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(full.len(), MAX_V1);
        for n in 0..full.len() {
            assert_eq!(parse(&full[..n]), Ok(Parsed::Partial), "prefix {n}");
        }
        assert_eq!(done(full).0, MAX_V1);
        let long = [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 200]].concat();
        assert_eq!(parse(&long), Err(Invalid::TooLong));
        assert_eq!(parse(&long[..MAX_V1 - 1]), Ok(Parsed::Partial));
    }

    #[test]
    fn v2_table() {
        let mut inet = vec![192, 0, 2, 1, 198, 51, 100, 2];
        inet.extend_from_slice(&56324u16.to_be_bytes());
        inet.extend_from_slice(&443u16.to_be_bytes());
        let (len, src) = done(&v2(1, 0x11, &inet));
        assert_eq!((len, src), (28, Some("192.0.2.1:56324".parse().unwrap())));
        // TLVs after the addresses are skipped, and bytes after the header
        // are not part of it.
        let mut tlv = inet.clone();
        tlv.extend_from_slice(&[0x05, 0, 3, b'a', b'b', b'c']);
        let mut with_rest = v2(1, 0x11, &tlv);
        let hlen = with_rest.len();
        with_rest.extend_from_slice(b"\x16\x03\x01");
        assert_eq!(done(&with_rest).0, hlen);
        let mut inet6 = vec![0u8; 36];
        inet6[15] = 1;
        inet6[32..34].copy_from_slice(&8080u16.to_be_bytes());
        assert_eq!(
            done(&v2(1, 0x21, &inet6)).1,
            Some("[::1]:8080".parse().unwrap())
        );
        // LOCAL (health checks) and UNSPEC/UNIX keep the peer.
        assert_eq!(done(&v2(0, 0x00, &[])), (16, None));
        assert_eq!(done(&v2(0, 0x11, &inet)).1, None);
        assert_eq!(done(&v2(1, 0x31, &[0; 216])).1, None);
        assert_eq!(done(&v2(1, 0x00, &[])).1, None);
        // Refused: a short address block, bad version, command, family.
        assert_eq!(parse(&v2(1, 0x11, &inet[..11])), Err(Invalid::Malformed));
        assert_eq!(parse(&v2(1, 0x21, &inet)), Err(Invalid::Malformed));
        assert_eq!(parse(&v2(2, 0x11, &inet)), Err(Invalid::Malformed));
        assert_eq!(parse(&v2(1, 0x41, &inet)), Err(Invalid::Malformed));
        assert_eq!(parse(&v2(1, 0x13, &inet)), Err(Invalid::Malformed));
        let mut bad_version = v2(1, 0x11, &inet);
        bad_version[12] = 0x11;
        assert_eq!(parse(&bad_version[..13]), Err(Invalid::Malformed));
        assert_eq!(parse(&bad_version), Err(Invalid::Malformed));
        // Too long: refused from the length field, before the payload.
        let big = v2(1, 0x11, &vec![0; MAX_V2_PAYLOAD + 1]);
        assert_eq!(parse(&big[..16]), Err(Invalid::TooLong));
        assert_eq!(done(&v2(1, 0x11, &vec![0; MAX_V2_PAYLOAD])).0, MAX_HEADER);
        // Every prefix of a valid header is partial.
        let full = v2(1, 0x11, &tlv);
        for n in 0..full.len() {
            assert_eq!(parse(&full[..n]), Ok(Parsed::Partial), "prefix {n}");
        }
    }

    #[test]
    fn cidrs() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        let six: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(six.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!six.contains("2001:db9::".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert_eq!(one.to_string(), "127.0.0.1/32");
        assert!("10.0.0.1/8"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("10.0.0.0/8"));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nope/8".parse::<Cidr>().is_err());
    }

    #[test]
    fn forwarded_rightmost_untrusted() {
        let t: Vec<Cidr> = ["10.0.0.0/8", "127.0.0.1/32"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(forwarded_for(b"203.0.113.5", &t), ip("203.0.113.5"));
        assert_eq!(
            forwarded_for(b"6.6.6.6, 203.0.113.5, 10.0.0.2", &t),
            ip("203.0.113.5")
        );
        assert_eq!(forwarded_for(b"10.0.0.3, 10.0.0.2", &t), ip("10.0.0.3"));
        assert_eq!(forwarded_for(b"[2001:db8::1]:443", &t), ip("2001:db8::1"));
        assert_eq!(forwarded_for(b"198.51.100.1:80", &t), ip("198.51.100.1"));
        assert_eq!(forwarded_for(b"junk, 10.0.0.2", &t), None);
        assert_eq!(forwarded_for(b"", &t), None);
        let head = b"GET / HTTP/1.1\r\nHost: a\r\nx-forwarded-for: 1.1.1.1\r\nX-Forwarded-For: 9.9.9.9, 10.0.0.1\r\n\r\n";
        assert_eq!(real_ip(head, "X-Forwarded-For", &t), ip("9.9.9.9"));
        assert_eq!(real_ip(head, "X-Real-IP", &t), None);
    }

    /// A flood is one line per [`REFUSAL_LOG_EVERY`], and the lines count
    /// every refusal: (milliseconds from the start, `admit` or `due`,
    /// what it returns).
    #[test]
    fn refusal_lines_are_rate_limited_and_count_the_rest() {
        let t0 = Instant::now();
        let mut limit = RefusalLimit::default();
        let steps: &[(u64, bool, Option<u64>)] = &[
            (0, false, None),
            (0, true, Some(0)),
            (10, true, None),
            (20, true, None),
            (500, false, None),
            (999, true, None),
            (1000, true, Some(3)),
            (1100, true, None),
            (1500, false, None),
            (2100, false, Some(1)),
            (2200, true, None),
            (2300, false, None),
            (3200, false, Some(1)),
            (3300, false, None),
            (5000, true, Some(0)),
        ];
        for &(ms, admit, want) in steps {
            let now = t0 + Duration::from_millis(ms);
            let got = if admit {
                limit.admit(now)
            } else {
                limit.due(now)
            };
            assert_eq!(got, want, "at {ms} ms, admit {admit}");
        }
    }
}
