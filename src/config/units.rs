//! Values an operator writes with units: durations (`"60s"`, `"500ms"`,
//! `"1m"`), sizes (`"64KiB"`, `"1GiB"`) and listen addresses (`"[::]:80"`,
//! `"localhost:8080"`, one string or a list). Each type parses the same way
//! from a flag (`FromStr`, for clap) and from the file (`Deserialize`), and
//! a bare number keeps the unit the key always had.

use std::fmt;
use std::marker::PhantomData;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// The unit a bare number means for a duration key.
pub trait BareUnit: Clone + Copy + fmt::Debug + Send + Sync + 'static {
    /// Seconds per bare unit.
    const SECONDS: f64;
    /// How a bare number reads in messages.
    const NAME: &'static str;
}

/// Bare numbers are seconds (`header_timeout = 10`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secs;
impl BareUnit for Secs {
    const SECONDS: f64 = 1.0;
    const NAME: &'static str = "seconds";
}

/// Bare numbers are milliseconds (`watch_debounce_ms = 50`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis;
impl BareUnit for Millis {
    const SECONDS: f64 = 0.001;
    const NAME: &'static str = "milliseconds";
}

/// A duration setting: `"500ms"`, `"60s"`, `"1m"`, `"1h"`, `"1m30s"`, or a
/// bare number in the key's unit `U`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DurationValue<U: BareUnit> {
    pub value: Duration,
    unit: PhantomData<U>,
}

impl<U: BareUnit> DurationValue<U> {
    pub fn new(value: Duration) -> Self {
        DurationValue {
            value,
            unit: PhantomData,
        }
    }

    fn from_bare(n: f64) -> Result<Self, String> {
        let secs = n * U::SECONDS;
        if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
            return Err(format!("{n} {} is out of range", U::NAME));
        }
        Ok(Self::new(Duration::from_secs_f64(secs)))
    }
}

impl<U: BareUnit> fmt::Debug for DurationValue<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", format_duration(self.value))
    }
}

/// `90s` → `"1m30s"`, `0.5s` → `"500ms"`: how defaults read in `--help`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 || ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        _ => format!("{s}s"),
    }
}

const DURATION_HELP: &str = "a duration like \"500ms\", \"60s\", \"1m\" or \"1h\"";

fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(format!("expected {DURATION_HELP}, got an empty string"));
    }
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("expected {DURATION_HELP}, got \"{t}\""))?;
        let scale = match unit.trim() {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "\"{t}\" needs a unit: {DURATION_HELP} (a bare number, unquoted, keeps the key's unit)"
                ))
            }
            other => {
                return Err(format!(
                    "unknown unit \"{other}\" in \"{t}\": use ms, s, m or h"
                ))
            }
        };
        total += n * scale;
        rest = tail;
    }
    if !total.is_finite() || total > 1e9 {
        return Err(format!("\"{t}\" is out of range"));
    }
    Ok(Duration::from_secs_f64(total))
}

impl<U: BareUnit> FromStr for DurationValue<U> {
    type Err = String;

    /// On the command line a bare number is allowed too (`--keepalive-timeout 30`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().parse::<f64>() {
            Ok(n) => Self::from_bare(n),
            Err(_) => parse_duration(s).map(Self::new),
        }
    }
}

impl<'de, U: BareUnit> Deserialize<'de> for DurationValue<U> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<U>(PhantomData<U>);
        impl<U: BareUnit> Visitor<'_> for V<U> {
            type Value = DurationValue<U>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{DURATION_HELP}, or a number of {}", U::NAME)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                DurationValue::from_bare(n as f64).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                DurationValue::from_bare(n as f64).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
                DurationValue::from_bare(n).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                parse_duration(s).map(DurationValue::new).map_err(E::custom)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A byte count: a bare number, or `"64KiB"`, `"1MiB"`, `"1GiB"` (powers of
/// 1024; `K`, `M`, `G` too), `"1MB"` (powers of 1000), `"512B"`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl fmt::Debug for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", format_size(self.0))
    }
}

/// `1048576` → `"1MiB"`; counts that are no whole number of KiB stay bytes.
pub fn format_size(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, scale) in UNITS {
        if n >= scale && n % scale == 0 {
            return format!("{}{name}", n / scale);
        }
    }
    n.to_string()
}

/// `1288490188` → `"1.2GiB"`: a size for progress lines, one decimal.
pub fn format_size_approx(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, scale) in UNITS {
        if n >= scale {
            return format!("{:.1}{name}", n as f64 / scale as f64);
        }
    }
    format!("{n}B")
}

const SIZE_HELP: &str = "a size like \"64KiB\", \"1MiB\" or \"1GiB\", or a number of bytes";

fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected {SIZE_HELP}, got \"{t}\""))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown unit \"{other}\" in \"{t}\": use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB for powers of 1000)"
            ))
        }
    };
    let bytes = n * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("\"{t}\" is out of range"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("\"{t}\" is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        parse_size(s).map(Size)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(SIZE_HELP)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Size, E> {
                u64::try_from(n)
                    .map(Size)
                    .map_err(|_| E::custom(format!("{n} is negative; expected {SIZE_HELP}")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Size, E> {
                Ok(Size(n))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Size, E> {
                parse_size(s).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// One address as written: `"127.0.0.1:8080"`, `"[::]:80"`,
/// `"localhost:8080"`. Host names are resolved by [`Address::resolve`] at
/// start, not when the file is read.
#[derive(Clone, PartialEq, Eq)]
pub struct Address(pub String);

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Address {
    /// The socket addresses this names: itself when it is an IP literal,
    /// else every address the host name resolves to (in resolver order,
    /// duplicates removed).
    pub fn resolve(&self) -> Result<Vec<SocketAddr>, String> {
        if let Ok(addr) = self.0.parse::<SocketAddr>() {
            return Ok(vec![addr]);
        }
        let Some((host, port)) = self.0.rsplit_once(':') else {
            return Err(format!(
                "`{}` has no port: write host:port, e.g. \"127.0.0.1:8080\" or \"[::]:80\"",
                self.0
            ));
        };
        if host.is_empty() {
            return Err(format!(
                "`{}` has no host: write \"0.0.0.0{}\" for every IPv4 address or \"[::]{}\" for IPv6",
                self.0,
                &self.0[self.0.len() - port.len() - 1..],
                &self.0[self.0.len() - port.len() - 1..]
            ));
        }
        if port.parse::<u16>().is_err() {
            return Err(format!(
                "`{}`: port `{port}` is not a number 0-65535",
                self.0
            ));
        }
        let found = self
            .0
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve `{}`: {e}", self.0))?;
        let mut out: Vec<SocketAddr> = Vec::new();
        for a in found {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        if out.is_empty() {
            return Err(format!("`{}` resolves to no address", self.0));
        }
        Ok(out)
    }
}

impl FromStr for Address {
    type Err = String;
    fn from_str(s: &str) -> Result<Address, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an address cannot be empty".into());
        }
        Ok(Address(s.to_owned()))
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// `listen = "127.0.0.1:8080"` or `listen = ["0.0.0.0:80", "[::]:80"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressList(pub Vec<Address>);

impl<'de> Deserialize<'de> for AddressList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AddressList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address like \"127.0.0.1:8080\", or a list of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<AddressList, E> {
                Ok(AddressList(vec![s.parse().map_err(E::custom)?]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AddressList, A::Error> {
                let mut out = Vec::new();
                while let Some(a) = seq.next_element::<Address>()? {
                    out.push(a);
                }
                Ok(AddressList(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `deserialize_with` for `listen`: one string or a list.
pub fn string_or_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Address>>, D::Error> {
    AddressList::deserialize(d).map(|l| Some(l.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: &str) -> Result<Duration, String> {
        s.parse::<DurationValue<Secs>>().map(|d| d.value)
    }

    #[test]
    fn durations() {
        let ok: &[(&str, u64)] = &[
            ("60s", 60_000),
            ("1m", 60_000),
            ("500ms", 500),
            ("1m30s", 90_000),
            ("1h", 3_600_000),
            ("2.5s", 2_500),
            ("10", 10_000),
            ("0.5", 500),
            (" 3s ", 3_000),
        ];
        for (text, ms) in ok {
            assert_eq!(secs(text), Ok(Duration::from_millis(*ms)), "{text}");
        }
        for bad in ["", "s", "10x", "1..5s", "-1s", "ms5"] {
            assert!(secs(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            "50".parse::<DurationValue<Millis>>().unwrap().value,
            Duration::from_millis(50)
        );
        assert_eq!(
            "1s".parse::<DurationValue<Millis>>().unwrap().value,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn duration_formatting_round_trips() {
        for d in [500, 1_000, 60_000, 90_000, 3_600_000, 50] {
            let d = Duration::from_millis(d);
            assert_eq!(secs(&format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn sizes() {
        let ok: &[(&str, u64)] = &[
            ("64KiB", 65_536),
            ("1GiB", 1 << 30),
            ("1MiB", 1 << 20),
            ("1M", 1 << 20),
            ("1MB", 1_000_000),
            ("512B", 512),
            ("4096", 4096),
            ("1.5KiB", 1536),
        ];
        for (text, n) in ok {
            assert_eq!(text.parse::<Size>(), Ok(Size(*n)), "{text}");
        }
        for bad in ["", "KiB", "1 parsec", "-1", "1.3B", "99999999999TiB"] {
            assert!(bad.parse::<Size>().is_err(), "{bad:?} accepted");
        }
        for n in [0u64, 100, 1024, 65_536, 1 << 30, 1536] {
            assert_eq!(format_size(n).parse::<Size>(), Ok(Size(n)), "{n}");
        }
    }

    #[test]
    fn addresses() {
        let a: Address = "[::]:80".parse().unwrap();
        assert_eq!(a.resolve().unwrap(), vec!["[::]:80".parse().unwrap()]);
        let local: Address = "localhost:8080".parse().unwrap();
        let resolved = local.resolve().unwrap();
        assert!(resolved
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));
        for bad in ["localhost", ":8080", "localhost:99999"] {
            let e = Address(bad.into()).resolve().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}
