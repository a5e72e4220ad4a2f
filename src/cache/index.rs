//! The snapshot's two big tables, split into reference-counted pieces so
//! that a rebuild changing a few paths copies a few pieces and shares the
//! rest with the previous generation: the path index in hash shards
//! ([`PathIndex`]), the entries in fixed-size chunks ([`Entries`]).
//!
//! A lookup still hashes the path once to pick the shard and probes one
//! table; an entry is one more pointer away than in a flat `Vec`.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use super::{Entry, EntryRef, Resource};

/// The walk's path map (one table, built once per full walk). Keys come
/// from the walk, not from clients, so a fast non-keyed hash is safe; it is
/// ~3× cheaper than SipHash on the short paths every request looks up.
pub type Shard = HashMap<Box<[u8]>, Resource, rustc_hash::FxBuildHasher>;

/// Where a key of a [`Table`] is in its key bytes, and what it names (see
/// [`pack`]): 12 bytes in the table rather than a 16-byte pointer to a key
/// of its own allocation and an 8-byte resource.
#[derive(Clone, Copy)]
struct Slot {
    key_at: u32,
    key_len: u32,
    resource: u32,
}

/// [`Resource::AddSlash`] and [`Resource::Forbidden`] as a [`Slot`]'s
/// resource; every other value is a file's entry index. A build refuses
/// more than `u32::MAX` files long before an index could reach these.
const ADD_SLASH: u32 = u32::MAX;
const FORBIDDEN: u32 = u32::MAX - 1;

#[inline]
fn pack(resource: Resource) -> u32 {
    match resource {
        Resource::File(i) => {
            debug_assert!(i < FORBIDDEN, "entry index {i} collides with a marker");
            i
        }
        Resource::AddSlash => ADD_SLASH,
        Resource::Forbidden => FORBIDDEN,
    }
}

#[inline]
fn unpack(resource: u32) -> Resource {
    match resource {
        ADD_SLASH => Resource::AddSlash,
        FORBIDDEN => Resource::Forbidden,
        i => Resource::File(i),
    }
}

/// One shard of a [`PathIndex`]: a table probed with the hash that picked
/// the shard, so a lookup hashes the path once, over the shard's keys
/// packed back to back.
#[derive(Default)]
struct Table {
    slots: HashTable<Slot>,
    keys: Vec<u8>,
}

impl Table {
    #[inline]
    fn key(&self, slot: &Slot) -> &[u8] {
        &self.keys[slot.key_at as usize..slot.key_at as usize + slot.key_len as usize]
    }

    #[inline]
    fn find(&self, h: u64, key: &[u8]) -> Option<&Slot> {
        self.slots.find(h, |s| self.key(s) == key)
    }

    /// Append `key`'s bytes, returning the slot naming them.
    fn slot(&mut self, key: &[u8], resource: Resource) -> Slot {
        let at = self.keys.len();
        self.keys.extend_from_slice(key);
        Slot {
            key_at: u32::try_from(at).expect("a shard's keys stay below 4 GiB"),
            key_len: u32::try_from(key.len()).expect("a path stays below 4 GiB"),
            resource: pack(resource),
        }
    }

    /// Insert a key known to be absent.
    fn insert_unique(&mut self, h: u64, key: &[u8], resource: Resource) {
        let slot = self.slot(key, resource);
        let keys = &self.keys;
        self.slots.insert_unique(h, slot, |s| {
            hash(&keys[s.key_at as usize..(s.key_at + s.key_len) as usize])
        });
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], Resource)> {
        self.slots.iter().map(|s| (self.key(s), unpack(s.resource)))
    }

    fn len(&self) -> usize {
        self.slots.len()
    }
}

/// A shared shard is copied before it changes: the copy packs only the keys
/// still in the table, so removed keys do not pile up.
impl Clone for Table {
    fn clone(&self) -> Table {
        let mut slots = self.slots.clone();
        let mut keys = Vec::with_capacity(slots.iter().map(|s| s.key_len as usize).sum());
        for slot in slots.iter_mut() {
            let at = keys.len();
            keys.extend_from_slice(self.key(slot));
            slot.key_at = at as u32;
        }
        Table { slots, keys }
    }
}

/// Paths per shard the shard count aims at: a one-path change clones one
/// shard of about this many keys.
const PATHS_PER_SHARD: usize = 512;

/// Keys from which [`PathIndex::from_map`] fills shards on every core.
const PARALLEL_FROM: usize = 65_536;

/// Most shards (2^12): the shard is picked from hash bits 40..52, which
/// the tables inside use for neither the bucket (low bits) nor the tag
/// (top 7 bits).
const MAX_SHARD_BITS: u32 = 12;

/// Bit of the hash where the shard number starts.
const SHARD_SHIFT: u32 = 40;

/// Normalised path → resource, in `2^bits` shards shared between
/// generations until one of their keys changes.
#[derive(Clone, Default)]
pub struct PathIndex {
    shards: Vec<Arc<Table>>,
    bits: u32,
}

#[inline]
fn hash(key: &[u8]) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key)
}

impl PathIndex {
    /// An index sized for the keys of `map`, holding them. A large map
    /// (a full build's) is spread over one thread per core, each filling
    /// its own shards.
    pub fn from_map(map: &Shard) -> PathIndex {
        let mut bits = 0;
        while bits < MAX_SHARD_BITS && (PATHS_PER_SHARD << bits) < map.len() {
            bits += 1;
        }
        // Every key hashed once, in the map's order.
        let keyed: Vec<(u64, &[u8], Resource)> =
            map.iter().map(|(k, r)| (hash(k), &k[..], *r)).collect();
        // Sized exactly before filling: no table or key buffer grows.
        let mut counts = vec![(0usize, 0usize); 1 << bits];
        for &(h, key, _) in &keyed {
            let c = &mut counts[shard_of(bits, h)];
            c.0 += 1;
            c.1 += key.len();
        }
        let mut shards: Vec<Table> = counts
            .iter()
            .map(|&(n, bytes)| Table {
                slots: HashTable::with_capacity(n),
                keys: Vec::with_capacity(bytes),
            })
            .collect();
        let threads = match keyed.len() {
            n if n < PARALLEL_FROM => 1,
            _ => crate::sys::cores(),
        };
        // Thread `t` fills the shards `t`, `t + threads`, …
        let fill = |t: usize, mut own: Vec<&mut Table>| {
            for &(h, key, resource) in &keyed {
                let s = shard_of(bits, h);
                if s % threads == t {
                    own[s / threads].insert_unique(h, key, resource);
                }
            }
        };
        let mut groups: Vec<Vec<&mut Table>> = (0..threads).map(|_| Vec::new()).collect();
        for (s, table) in shards.iter_mut().enumerate() {
            groups[s % threads].push(table);
        }
        std::thread::scope(|scope| {
            let mut groups = groups.into_iter().enumerate();
            let first = groups.next();
            for (t, own) in groups {
                scope.spawn(move || fill(t, own));
            }
            if let Some((t, own)) = first {
                fill(t, own);
            }
        });
        PathIndex {
            shards: shards.into_iter().map(Arc::new).collect(),
            bits,
        }
    }

    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<Resource> {
        let h = hash(key);
        self.shards
            .get(shard_of(self.bits, h))
            .and_then(|s| s.find(h, key))
            .map(|s| unpack(s.resource))
    }

    /// Insert, copying the shard first if a previous generation shares it.
    pub fn insert(&mut self, key: &[u8], resource: Resource) -> Option<Resource> {
        if self.shards.is_empty() {
            self.shards.push(Arc::default());
        }
        let h = hash(key);
        let s = shard_of(self.bits, h);
        if let Some(slot) = self.shards[s].find(h, key) {
            if slot.resource == pack(resource) {
                return Some(resource);
            }
        }
        let table = Arc::make_mut(&mut self.shards[s]);
        let keys = &table.keys;
        match table.slots.find_mut(h, |s| {
            &keys[s.key_at as usize..(s.key_at + s.key_len) as usize] == key
        }) {
            Some(slot) => Some(unpack(std::mem::replace(
                &mut slot.resource,
                pack(resource),
            ))),
            None => {
                table.insert_unique(h, key, resource);
                None
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Resource> {
        let h = hash(key);
        let shard = self.shards.get_mut(shard_of(self.bits, h))?;
        shard.find(h, key)?;
        let table = Arc::make_mut(shard);
        let keys = &table.keys;
        match table.slots.find_entry(h, |s| {
            &keys[s.key_at as usize..(s.key_at + s.key_len) as usize] == key
        }) {
            // The key's bytes stay until the shard is next copied.
            Ok(e) => Some(unpack(e.remove().0.resource)),
            Err(_) => None,
        }
    }

    /// Remove every key starting with `prefix`, returning them. Looks at
    /// every key, but copies only the shards that hold one.
    pub fn remove_prefix(&mut self, prefix: &[u8]) -> Vec<(Box<[u8]>, Resource)> {
        let mut removed = Vec::new();
        for shard in &mut self.shards {
            if !shard.iter().any(|(k, _)| k.starts_with(prefix)) {
                continue;
            }
            let table = Arc::make_mut(shard);
            let keys = &table.keys;
            table.slots.retain(|s| {
                let k = &keys[s.key_at as usize..(s.key_at + s.key_len) as usize];
                let hit = k.starts_with(prefix);
                if hit {
                    removed.push((k.into(), unpack(s.resource)));
                }
                !hit
            });
        }
        removed
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Resource)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shards this index shares with `other` (the same allocation).
    pub fn shards_shared_with(&self, other: &PathIndex) -> usize {
        self.shards
            .iter()
            .zip(&other.shards)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    /// Key bytes held by the shards, for tests of the layout.
    #[cfg(test)]
    fn key_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.keys.len()).sum()
    }

    /// Give back what the shards this index does not share reserved beyond
    /// their keys (appending a key grows the buffer by doubling).
    pub fn shrink(&mut self) {
        for shard in &mut self.shards {
            if let Some(table) = Arc::get_mut(shard) {
                table.keys.shrink_to_fit();
            }
        }
    }
}

impl PartialEq<Shard> for PathIndex {
    fn eq(&self, map: &Shard) -> bool {
        self.len() == map.len() && map.iter().all(|(k, r)| self.get(k) == Some(*r))
    }
}

#[inline]
fn shard_of(bits: u32, hash: u64) -> usize {
    ((hash >> SHARD_SHIFT) & ((1 << bits) - 1)) as usize
}

/// log2 of the entries per chunk: a one-entry change copies 1024 entries
/// and their heads.
const CHUNK_SHIFT: u32 = 10;
const CHUNK: usize = 1 << CHUNK_SHIFT;

/// Up to [`CHUNK`] entries and the response heads they point into, packed
/// back to back: a root of a million files holds a million heads, and one
/// allocation each would cost a malloc header, rounding and the
/// fragmentation of a million small blocks.
#[derive(Default)]
struct Chunk {
    entries: Vec<Entry>,
    heads: Vec<u8>,
}

impl Chunk {
    /// Append `entry`, copying its heads from `heads` (where its
    /// representations point now) to the end of this chunk's.
    fn append(&mut self, mut entry: Entry, heads: &[u8]) {
        self.adopt_heads(&mut entry, heads);
        self.entries.push(entry);
    }

    fn adopt_heads(&mut self, entry: &mut Entry, heads: &[u8]) {
        for repr in entry.reprs_mut() {
            let range = repr.head_range();
            repr.move_head(self.heads.len());
            self.heads.extend_from_slice(&heads[range]);
        }
    }
}

/// A shared chunk is copied before it changes: the copy lays out only the
/// heads its entries still point to, so heads replaced by earlier changes
/// do not pile up.
impl Clone for Chunk {
    fn clone(&self) -> Chunk {
        let live: usize = self
            .entries
            .iter()
            .flat_map(|e| e.reprs())
            .map(|r| r.head_range().len())
            .sum();
        let mut chunk = Chunk {
            entries: Vec::with_capacity(self.entries.len()),
            heads: Vec::with_capacity(live),
        };
        for entry in &self.entries {
            chunk.append(entry.clone(), &self.heads);
        }
        chunk
    }
}

/// The entries, by index, in chunks shared between generations until one
/// of their entries changes.
#[derive(Clone, Default)]
pub struct Entries {
    chunks: Vec<Arc<Chunk>>,
    len: usize,
}

impl Entries {
    #[inline]
    pub fn get(&self, i: u32) -> EntryRef<'_> {
        let i = i as usize;
        let chunk = &self.chunks[i >> CHUNK_SHIFT];
        EntryRef::new(&chunk.entries[i & (CHUNK - 1)], &chunk.heads)
    }

    /// Replace the entry at `i` with `entry`, whose heads are in `heads`,
    /// copying its chunk first if a previous generation shares it.
    pub fn set(&mut self, i: u32, mut entry: Entry, heads: &[u8]) {
        let i = i as usize;
        let chunk = Arc::make_mut(&mut self.chunks[i >> CHUNK_SHIFT]);
        chunk.adopt_heads(&mut entry, heads);
        chunk.entries[i & (CHUNK - 1)] = entry;
    }

    /// Append `entry`, whose heads are in `heads`; returns its index.
    pub fn push(&mut self, entry: Entry, heads: &[u8]) -> u32 {
        let i = self.len;
        if i & (CHUNK - 1) == 0 {
            self.chunks.push(Arc::new(Chunk {
                entries: Vec::with_capacity(CHUNK),
                heads: Vec::new(),
            }));
        }
        let last = self.chunks.last_mut().expect("a chunk was just ensured");
        Arc::make_mut(last).append(entry, heads);
        self.len += 1;
        i as u32
    }

    /// Append a copy of another snapshot's entry with `f` applied to it
    /// (its heads are copied as they are); returns its index.
    pub fn push_copy(&mut self, from: EntryRef<'_>, f: impl FnOnce(&mut Entry)) -> u32 {
        let mut entry = from.entry().clone();
        f(&mut entry);
        self.push(entry, from.heads())
    }

    /// Give back what the chunks this snapshot does not share reserved
    /// beyond their contents (appending heads grows a buffer by doubling).
    pub fn shrink(&mut self) {
        for chunk in &mut self.chunks {
            if let Some(chunk) = Arc::get_mut(chunk) {
                chunk.heads.shrink_to_fit();
                chunk.entries.shrink_to_fit();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = EntryRef<'_>> {
        self.chunks
            .iter()
            .flat_map(|c| c.entries.iter().map(|e| EntryRef::new(e, &c.heads)))
    }

    /// Visit every entry; `f` returns whether it wants to change it, and
    /// only then is its chunk copied and `change` called. `change` may not
    /// touch the heads.
    pub fn update(&mut self, wants: impl Fn(&Entry) -> bool, mut change: impl FnMut(&mut Entry)) {
        for chunk in &mut self.chunks {
            if !chunk.entries.iter().any(&wants) {
                continue;
            }
            for entry in Arc::make_mut(chunk).entries.iter_mut() {
                if wants(entry) {
                    change(entry);
                }
            }
        }
    }

    /// Head bytes held by the chunks, for tests of the layout.
    #[cfg(test)]
    fn head_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.heads.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharded_index_matches_a_map_and_copies_one_shard_per_change() {
        let mut map = Shard::default();
        for i in 0..5000u32 {
            map.insert(format!("/d/{i}").into_bytes().into(), Resource::File(i));
        }
        let index = PathIndex::from_map(&map);
        assert!(index.shards.len() > 1);
        assert!(index == map);
        let mut next = index.clone();
        next.insert(b"/d/17", Resource::Forbidden);
        assert_eq!(next.shards_shared_with(&index), index.shards.len() - 1);
        assert_eq!(next.get(b"/d/17"), Some(Resource::Forbidden));
        assert_eq!(index.get(b"/d/17"), Some(Resource::File(17)));
        let removed = next.remove_prefix(b"/d/49");
        assert_eq!(removed.len(), 111, "/d/49, /d/490..499, /d/4900..4999");
        assert_eq!(next.len(), 5000 - 111);
        assert_eq!(next.get(b"/d/4999"), None);
    }

    #[test]
    fn a_full_builds_index_filled_on_every_core_matches_its_map() {
        let mut map = Shard::default();
        for i in 0..(PARALLEL_FROM as u32 + 1000) {
            let resource = match i % 3 {
                0 => Resource::Forbidden,
                _ => Resource::File(i),
            };
            map.insert(format!("/d{}/{i}", i % 97).into_bytes().into(), resource);
        }
        let index = PathIndex::from_map(&map);
        assert_eq!(index.shards.len(), 256, "512 paths a shard at most");
        assert!(index == map);
        assert_eq!(index.get(b"/d0/0"), Some(Resource::Forbidden));
        assert_eq!(index.get(b"/d1/1"), Some(Resource::File(1)));
        assert_eq!(index.get(b"/d1/2"), None);
    }

    #[test]
    fn a_copied_shard_packs_only_the_keys_it_still_holds() {
        let mut map = Shard::default();
        for i in 0..3000u32 {
            map.insert(format!("/d/{i}").into_bytes().into(), Resource::File(i));
        }
        let index = PathIndex::from_map(&map);
        let live = |ix: &PathIndex| ix.iter().map(|(k, _)| k.len()).sum::<usize>();
        assert_eq!(index.key_bytes(), live(&index), "built exactly");
        let mut next = index.clone();
        next.remove(b"/d/5");
        next.remove_prefix(b"/d/29");
        assert!(
            next.key_bytes() > live(&next),
            "removed keys wait for a copy"
        );
        let mut third = next.clone();
        for i in 0..3000u32 {
            third.insert(format!("/d/{i}").as_bytes(), Resource::AddSlash);
        }
        assert_eq!(third.key_bytes(), live(&third), "every shard was copied");
        assert_eq!(third.get(b"/d/2999"), Some(Resource::AddSlash));
        assert_eq!(next.get(b"/d/2999"), None);
        assert_eq!(index.get(b"/d/2999"), Some(Resource::File(2999)));
        assert_eq!(third.len(), 3000);
    }

    fn entry(head: &[u8], heads: &mut Vec<u8>) -> Entry {
        use crate::cache::{Body, FileStamp, Repr, Source};
        let at = heads.len();
        heads.extend_from_slice(head);
        let stamp = FileStamp {
            dev: 0,
            ino: 0,
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        let source = Source { stamp, sidecars: 0 };
        let repr = Repr::new(0, at..heads.len(), 0, 0..0, Body::Mem { off: 0 });
        Entry::new(
            &crate::cache::Frame::EMPTY,
            0,
            repr,
            Box::default(),
            false,
            source,
        )
    }

    #[test]
    fn a_copied_chunk_packs_only_the_heads_its_entries_point_to() {
        let mut entries = Entries::default();
        let mut heads = Vec::new();
        for i in 0..3000 {
            heads.clear();
            let e = entry(format!("head {i}").as_bytes(), &mut heads);
            entries.push(e, &heads);
        }
        let live = |es: &Entries| {
            es.iter()
                .map(|e| e.identity().head_200_vec().len())
                .sum::<usize>()
        };
        assert_eq!(entries.head_bytes(), live(&entries));
        let mut next = entries.clone();
        heads.clear();
        let e = entry(b"a much longer head than before", &mut heads);
        next.set(1500, e, &heads);
        let e = entry(b"another", &mut heads);
        next.set(1501, e, &heads);
        assert_eq!(
            next.get(1500).identity().head_200_vec(),
            b"a much longer head than before"
        );
        assert_eq!(next.get(1501).identity().head_200_vec(), b"another");
        assert_eq!(entries.get(1500).identity().head_200_vec(), b"head 1500");
        // The changed chunk was copied, the others are shared; the two
        // heads replaced since the copy are all it holds beyond the live
        // ones.
        assert_eq!(next.head_bytes(), live(&next) + "head 1500head 1501".len());
        let shared = next
            .chunks
            .iter()
            .zip(&entries.chunks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, entries.chunks.len() - 1);
        // A second change to the same chunk, on a copy: the heads replaced
        // before the copy do not stay.
        let mut third = next.clone();
        heads.clear();
        let e = entry(b"x", &mut heads);
        third.set(1500, e, &heads);
        assert_eq!(
            third.head_bytes(),
            live(&third) + "a much longer head than before".len()
        );
        assert_eq!(third.get(1501).identity().head_200_vec(), b"another");
    }
}

#[cfg(test)]
mod size_tests {
    /// Issue 8 goal 3: a million files hold a million entries. Before, an
    /// entry was 560 bytes plus four allocations for its header lines, then
    /// 208 bytes plus one for its heads; now its heads are packed into its
    /// chunk and it holds no hash the ETag already spells.
    #[test]
    fn an_entry_stays_small() {
        use std::mem::size_of;
        assert!(
            size_of::<crate::cache::Entry>() <= 128,
            "{}",
            size_of::<crate::cache::Entry>()
        );
        assert!(
            size_of::<crate::cache::Repr>() <= 40,
            "{}",
            size_of::<crate::cache::Repr>()
        );
        assert!(size_of::<crate::cache::Body>() <= 16);
    }
}
