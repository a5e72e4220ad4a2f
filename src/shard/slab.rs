//! A slab of connections addressed by generation-checked tokens.
//!
//! A token is `generation << 32 | index`. The generation changes every time
//! a slot is reused, so an event carrying the token of a connection closed
//! earlier in the same `epoll_wait` batch finds a mismatch and is dropped,
//! even if the kernel already gave the new connection the same fd number.

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Slab<T> {
    pub fn new() -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
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
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
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

    fn slot(&self, token: u64) -> Option<&Slot<T>> {
        let slot = self.slots.get((token & 0xffff_ffff) as usize)?;
        (u64::from(slot.generation) == token >> 32).then_some(slot)
    }

    pub fn get_mut(&mut self, token: u64) -> Option<&mut T> {
        self.slot(token)?;
        self.slots[(token & 0xffff_ffff) as usize].value.as_mut()
    }

    pub fn remove(&mut self, token: u64) -> Option<T> {
        self.slot(token)?;
        let index = (token & 0xffff_ffff) as u32;
        let value = self.slots[index as usize].value.take()?;
        self.free.push(index);
        self.len -= 1;
        Some(value)
    }

    /// Tokens of every live value.
    pub fn tokens(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
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
}
