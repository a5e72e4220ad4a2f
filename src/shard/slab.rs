//! A slab of connections addressed by generation-checked tokens.
//!
//! A token is `generation << 32 | index`. The generation changes every time
//! a slot is reused, so an event carrying the token of a connection closed
//! earlier in the same `epoll_wait` batch finds a mismatch and is dropped,
//! even if the kernel already gave the new connection the same fd number.
//!
//! Slots live in fixed chunks of [`CHUNK`], allocated as the slab grows and
//! never moved: growing never copies the slots or leaves an outgrown
//! block behind on the heap, so memory grows by one slot per connection
//! (issue 11: RSS per idle connection).

/// Slots per chunk (a power of two).
const CHUNK: usize = 64;

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

pub struct Slab<T> {
    chunks: Vec<Box<[Slot<T>; CHUNK]>>,
    /// Slots handed out at least once (the others are past the end).
    used: usize,
    free: Vec<u32>,
    len: usize,
}

impl<T> Slab<T> {
    pub fn new() -> Slab<T> {
        Slab {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
            len: 0,
        }
    }

    #[inline]
    fn at(&mut self, index: u32) -> &mut Slot<T> {
        let i = index as usize;
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.used == self.chunks.len() * CHUNK {
                    let chunk: Box<[Slot<T>]> = (0..CHUNK)
                        .map(|_| Slot {
                            generation: 0,
                            value: None,
                        })
                        .collect();
                    let Ok(chunk) = chunk.try_into() else {
                        unreachable!("a chunk has CHUNK slots")
                    };
                    self.chunks.push(chunk);
                }
                self.used += 1;
                (self.used - 1) as u32
            }
        };
        // The ring's receive and send `user_data` take the top two bits of
        // the index (`sys::uring`); no shard gets near 2^30 connections.
        debug_assert!(index < 1 << 30);
        let slot = self.at(index);
        // Generations stay below u32::MAX so no token collides with the
        // shard's reserved tokens at the top of the u64 range.
        slot.generation = if slot.generation >= u32::MAX - 1 {
            0
        } else {
            slot.generation + 1
        };
        slot.value = Some(value);
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    /// The slot of `token`, if its generation matches.
    #[inline]
    fn slot_mut(&mut self, token: u64) -> Option<&mut Slot<T>> {
        let i = (token & 0xffff_ffff) as usize;
        let slot = &mut self.chunks.get_mut(i / CHUNK)?[i % CHUNK];
        (u64::from(slot.generation) == token >> 32).then_some(slot)
    }

    pub fn get_mut(&mut self, token: u64) -> Option<&mut T> {
        self.slot_mut(token)?.value.as_mut()
    }

    pub fn remove(&mut self, token: u64) -> Option<T> {
        let index = (token & 0xffff_ffff) as u32;
        let value = self.slot_mut(token)?.value.take()?;
        self.free.push(index);
        self.len -= 1;
        Some(value)
    }

    /// Tokens of every live value.
    pub fn tokens(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .enumerate()
            .filter_map(|(i, s)| {
                s.value
                    .as_ref()
                    .map(|_| (u64::from(s.generation) << 32) | i as u64)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_token_is_rejected_after_reuse() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff, "slot reused");
        assert_ne!(a, b);
        assert!(slab.get_mut(a).is_none());
        assert_eq!(slab.get_mut(b).copied(), Some("b"));
        assert_eq!(slab.tokens().collect::<Vec<_>>(), vec![b]);
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn grows_across_chunks_and_reuses_freed_slots() {
        let mut slab = Slab::new();
        let tokens: Vec<u64> = (0..3 * CHUNK + 5).map(|i| slab.insert(i)).collect();
        assert_eq!(slab.chunks.len(), 4);
        for (i, &t) in tokens.iter().enumerate() {
            assert_eq!(slab.get_mut(t).copied(), Some(i));
        }
        let far = tokens[2 * CHUNK + 1];
        assert_eq!(slab.remove(far), Some(2 * CHUNK + 1));
        assert!(slab.get_mut(far).is_none());
        let again = slab.insert(999);
        assert_eq!(again & 0xffff_ffff, far & 0xffff_ffff);
        assert_eq!(
            slab.chunks.len(),
            4,
            "a freed slot is reused before growing"
        );
        assert_eq!(slab.tokens().count(), 3 * CHUNK + 5);
        assert!(slab.get_mut(u64::from(u32::MAX)).is_none(), "past the end");
    }
}
