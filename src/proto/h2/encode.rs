//! Response header blocks (RFC 7541 encoder side). A typed
//! [`Response`](crate::serve::Response) becomes an HPACK block: `:status`
//! from its status, then its head's lines (names lower-cased, any
//! connection-specific field dropped), then its typed fields.
//!
//! Each connection keeps an encoder dynamic table ([`Encoder`]), as h2o
//! does: a field seen before on the connection (`server`, `content-type`,
//! `cache-control`, `vary`, the Date of this second, a file's `etag`…) is
//! sent as a one-byte index; a new one as a literal with incremental
//! indexing, so the next response can name it. The table is bounded by
//! [`ENCODER_TABLE`] and by the peer's SETTINGS_HEADER_TABLE_SIZE; a
//! change of that bound is announced by a dynamic table size update at the
//! start of the next block (§4.2, §6.3).
//!
//! A response head's lines repeat on a connection (the frame of a media
//! type, a file's validators, the Date of this second), so a small
//! two-way table (`LINE_SLOTS`) maps a head line's hash to the entry it
//! was last sent as: a line sent before is found in at most two probes
//! and checked byte for byte, without lower-casing its name, searching the
//! static table or walking the dynamic one.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::io::Write;

use super::hpack::{connection_specific, integer};
use crate::serve::Response;

/// Our encoder table's bound: the protocol default (and h2o's), so no size
/// update is needed with a client that keeps the default. Each entry costs
/// its name and value plus 32 bytes (§4.1); see ARCHITECTURE.md, "HTTP/2",
/// for what this adds to a connection's memory.
pub const ENCODER_TABLE: usize = 4096;

/// Fields larger than this (name + value + 32) are sent without indexing:
/// one would evict most of the table for a value unlikely to repeat.
const MAX_INDEXED_ENTRY: usize = 512;

/// RFC 7541 §4.1.
const FIELD_OVERHEAD: usize = 32;

/// Index of the first dynamic table entry (the static table has 61).
const DYNAMIC_BASE: usize = 62;

/// Slots of the line table, in buckets of two (the newer first): a head
/// has about ten lines, so a third line in one bucket is rare, and costs
/// only the walk the table saves. 4 bytes each, in the connection's `H2`.
const LINE_SLOTS: usize = 64;

/// One dynamic table entry: name and value in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
    /// [`field_hash`] of its name and value: the walk for a field compares
    /// bytes only where it matches (a file's many `etag` entries).
    hash: u64,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }

    fn size(&self) -> usize {
        self.bytes.len() + FIELD_OVERHEAD
    }
}

/// A connection's HPACK encoder state: the dynamic table the peer's
/// decoder mirrors.
pub struct Encoder {
    /// Newest first: entry `i` has index `DYNAMIC_BASE + i`.
    entries: VecDeque<Entry>,
    /// Sum of the entries' sizes (§4.1).
    size: usize,
    /// The table's maximum size now in effect on both sides.
    max: usize,
    /// Size updates owed at the start of the next block: the least bound
    /// since the last block (when lower than the final one) and the final.
    pending: Option<(usize, usize)>,
    /// Entries ever inserted (wrapping): entry `i` has the id
    /// `inserted - 1 - i`, which eviction does not change.
    inserted: u32,
    /// By [`line_bucket`]: the ids of the entries head lines were last
    /// sent as. Only hints: an evicted id, or another line's, fails the
    /// byte comparison.
    slots: [u32; LINE_SLOTS],
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder {
            entries: VecDeque::new(),
            size: 0,
            max: ENCODER_TABLE,
            pending: None,
            inserted: 0,
            slots: [0; LINE_SLOTS],
        }
    }
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("entries", &self.entries.len())
            .field("size", &self.size)
            .field("max", &self.max)
            .finish()
    }
}

/// How [`Encoder::field`] may send a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// Indexed when small enough: the field may repeat on the connection.
    Incremental,
    /// Never entered into the table (a per-response value such as a
    /// request id): a literal without indexing, or an index if present.
    Without,
}

impl Encoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE: our bound becomes the lesser
    /// of it and [`ENCODER_TABLE`], announced at the next block.
    pub fn peer_table_size(&mut self, peer: u32) {
        let bound = (peer as usize).min(ENCODER_TABLE);
        let least = match self.pending {
            Some((least, _)) => least.min(bound),
            None => bound,
        };
        self.pending = Some((least, bound));
    }

    /// Bytes the table holds (entries and their overhead), for memory
    /// accounting.
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Start a header block: the size updates owed come first (§4.2).
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        let Some((least, bound)) = self.pending.take() else {
            return;
        };
        if least < bound && least < self.max {
            self.resize(least);
            integer(out, least, 5, 0x20);
        }
        self.resize(bound);
        integer(out, bound, 5, 0x20);
    }

    fn resize(&mut self, max: usize) {
        self.max = max;
        self.evict(0);
    }

    /// Evict the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(e) = self.entries.pop_back() else {
                break;
            };
            self.size -= e.size();
        }
    }

    /// The `:status` pseudo-header (the static table holds the common ones).
    pub fn status(&mut self, code: u16, out: &mut Vec<u8>) {
        let index = match code {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => {
                let mut digits = [0u8; 3];
                let mut c = code.min(999);
                for d in digits.iter_mut().rev() {
                    *d = b'0' + (c % 10) as u8;
                    c /= 10;
                }
                return self.field(b":status", &digits, Indexing::Incremental, out);
            }
        };
        out.push(0x80 | index);
    }

    /// One field, `name` already lower-case: an index when the table holds
    /// it, else a literal (entered into the table under `Incremental`).
    pub fn field(&mut self, name: &[u8], value: &[u8], how: Indexing, out: &mut Vec<u8>) {
        self.field_at(name, value, how, out);
    }

    /// [`Encoder::field`], returning the position in the table of the
    /// entry sent or entered, if any.
    fn field_at(
        &mut self,
        name: &[u8],
        value: &[u8],
        how: Indexing,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let mut name_index = static_name(name);
        let hash = field_hash(name, value);
        for (i, e) in self.entries.iter().enumerate() {
            if e.hash == hash && e.name() == name && e.value() == value {
                integer(out, DYNAMIC_BASE + i, 7, 0x80);
                return Some(i);
            }
            if name_index.is_none() && e.name() == name {
                name_index = Some(DYNAMIC_BASE + i);
            }
        }
        let entry_size = name.len() + value.len() + FIELD_OVERHEAD;
        let index = how == Indexing::Incremental
            && entry_size <= MAX_INDEXED_ENTRY
            && entry_size <= self.max;
        let (prefix, mask) = if index { (6, 0x40) } else { (4, 0x00) };
        match name_index {
            Some(n) => integer(out, n, prefix, mask),
            None => {
                out.push(mask);
                string(out, name);
            }
        }
        string(out, value);
        if index {
            self.evict(entry_size);
            let mut bytes = Vec::with_capacity(name.len() + value.len());
            bytes.extend_from_slice(name);
            bytes.extend_from_slice(value);
            self.entries.push_front(Entry {
                bytes: bytes.into_boxed_slice(),
                name_len: name.len(),
                hash,
            });
            self.size += entry_size;
            self.inserted = self.inserted.wrapping_add(1);
            return Some(0);
        }
        None
    }

    /// Encode `resp`'s head as a header block.
    pub fn response(&mut self, resp: &Response<'_>, out: &mut Vec<u8>) {
        self.begin(out);
        self.status(resp.status.code(), out);
        for lines in resp.field_pieces() {
            self.lines(lines, out);
        }
        self.lines(resp.date.line(), out);
        if let Some(len) = resp.content_length {
            let mut line = [0u8; 40];
            let mut w = &mut line[..];
            let _ = write!(w, "Content-Length: {len}");
            let n = 40 - w.len();
            self.line(&line[..n], out);
        }
        // A per-response value, never entered into the table.
        if let Some(id) = &resp.request_id {
            self.field(id.lower_name, id.id, Indexing::Without, out);
        }
    }

    /// Header lines, each `Name: value\r\n`.
    fn lines(&mut self, mut lines: &[u8], out: &mut Vec<u8>) {
        while let Some(eol) = memchr::memchr(b'\n', lines) {
            let line = &lines[..eol];
            self.line(line.strip_suffix(b"\r").unwrap_or(line), out);
            lines = &lines[eol + 1..];
        }
    }

    /// Encode an HTTP/1 response head (`HTTP/1.1 200 OK\r\n…\r\n\r\n`,
    /// perhaps followed by a body) as the start of a header block, as
    /// [`Encoder::response`] encodes a response's lines. Returns the status
    /// code and the head's length (through its blank line), or `None`
    /// (nothing written, the table untouched) for bytes that do not start
    /// with a complete head.
    #[cfg(test)]
    pub fn head(&mut self, head: &[u8], out: &mut Vec<u8>) -> Option<(u16, usize)> {
        let eol = memchr::memchr(b'\n', head)?;
        let status_line = &head[..eol];
        let code = status_line.get(9..12)?;
        if !code.iter().all(u8::is_ascii_digit) || status_line.get(..5) != Some(b"HTTP/") {
            return None;
        }
        let status = code.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
        let mut at = eol + 1;
        let len = loop {
            let end = at + memchr::memchr(b'\n', &head[at..])?;
            if end == at || (end == at + 1 && head[at] == b'\r') {
                break end + 1;
            }
            at = end + 1;
        };
        self.begin(out);
        self.status(status, out);
        self.lines(&head[eol + 1..at], out);
        Some((status, len))
    }

    /// One header line of a head, `Name: value` without its CRLF.
    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let bucket = line_bucket(line);
        // Sent before on this connection: its entry's index. The line is
        // compared whole with `Name: value` as we render it, so a hit
        // needs no search for the colon and no trimming.
        for slot in [bucket, bucket + 1] {
            let i = self.inserted.wrapping_sub(1).wrapping_sub(self.slots[slot]) as usize;
            let Some(e) = self.entries.get(i) else {
                continue;
            };
            let (name, rest) = line.split_at(e.name_len.min(line.len()));
            if rest.len() == e.value().len() + 2
                && rest[2..] == *e.value()
                && rest[..2] == *b": "
                && lowers_to(name, e.name())
            {
                let index = DYNAMIC_BASE + i;
                if index < 0x7f {
                    out.push(0x80 | index as u8);
                    return;
                }
                return integer(out, index, 7, 0x80);
            }
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return;
        };
        let name = &line[..colon];
        let value = trim(&line[colon + 1..]);
        let mut lower = [0u8; 64];
        let owned;
        let lname: &[u8] = if name.len() <= lower.len() {
            let l = &mut lower[..name.len()];
            for (d, &c) in l.iter_mut().zip(name) {
                *d = c.to_ascii_lowercase();
            }
            l
        } else {
            owned = name.to_ascii_lowercase();
            &owned
        };
        if connection_specific(lname) {
            return;
        }
        if let Some(i) = self.field_at(lname, value, Indexing::Incremental, out) {
            self.slots[bucket + 1] = self.slots[bucket];
            self.slots[bucket] = self.inserted.wrapping_sub(1).wrapping_sub(i as u32);
        }
    }
}

/// The first slot of a head line's bucket in the line table: any hash
/// will do, a match is checked against the entry's bytes. The hash's top
/// bits, its best mixed.
fn line_bucket(line: &[u8]) -> usize {
    let hash = rustc_hash::FxBuildHasher.hash_one(line);
    (hash >> (64 - (LINE_SLOTS / 2).trailing_zeros())) as usize * 2
}

/// An entry's key for the table walk: any hash will do, a match is
/// checked against the entry's bytes.
fn field_hash(name: &[u8], value: &[u8]) -> u64 {
    rustc_hash::FxBuildHasher.hash_one((name, value))
}

/// The static table's names (RFC 7541 Appendix A) for the response fields
/// we send, by lower-case name.
fn static_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":status" => 8,
        b"accept-ranges" => 18,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"date" => 33,
        b"etag" => 34,
        b"expires" => 36,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// A string literal without Huffman coding.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, s.len(), 7, 0);
    out.extend_from_slice(s);
}

/// `name` lower-cased is `lower`. Without an early exit, so that short
/// names cost a few instructions a byte.
fn lowers_to(name: &[u8], lower: &[u8]) -> bool {
    if name.len() != lower.len() {
        return false;
    }
    if name.len() < 8 {
        return name
            .iter()
            .zip(lower)
            .fold(0, |diff, (&n, &l)| diff | (n.to_ascii_lowercase() ^ l))
            == 0;
    }
    // Eight bytes at a time, the last eight overlapping the others.
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let last = name.len() - 8;
    let mut at = 0;
    loop {
        if lower8(word(name, at)) != word(lower, at) {
            return false;
        }
        if at == last {
            return true;
        }
        at = (at + 8).min(last);
    }
}

/// Eight bytes with their ASCII capitals lower-cased (and nothing else
/// changed), in a few word operations.
fn lower8(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Per byte, the low seven bits plus a bias: bit 7 is then set from
    // `A` on, and from one past `Z` on; the sums never carry out of
    // their byte (at most 0x7f + 0x3f).
    let low = x & (0x7f * ONES);
    let from_a = low + (0x80 - u64::from(b'A')) * ONES;
    let past_z = low + (0x80 - u64::from(b'Z') - 1) * ONES;
    let upper = from_a & !past_z & !x & (0x80 * ONES);
    x | (upper >> 2)
}

/// A field value without the optional whitespace around it (what we
/// render has one space after the colon and none at the end).
fn trim(mut b: &[u8]) -> &[u8] {
    if let [b' ', rest @ ..] = b {
        b = rest;
    }
    if !matches!(b.first(), Some(b' ' | b'\t')) && !matches!(b.last(), Some(b' ' | b'\t')) {
        return b;
    }
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

#[cfg(test)]
mod tests;
