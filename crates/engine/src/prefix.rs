//! A bounded cache of saved sequence states, keyed by the tokens they hold.
//!
//! With recurrent layers a sequence cannot be rolled back to an earlier position, so a saved
//! state is only useful to a request whose tokens *extend* the saved tokens: restore, then
//! prefill the suffix. The cache keeps the states of recent sequences (each in a backend slot,
//! see [`Backend::save_state`](crate::Backend::save_state)) under a byte and an entry budget,
//! evicting the least recently used.

/// One saved state.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The tokens the state holds (its positions `0..tokens.len()`).
    pub tokens: Vec<u32>,
    /// The backend slot holding it.
    pub slot: u64,
    /// Its size in the backend's memory.
    pub bytes: usize,
    last_used: u64,
}

#[derive(Debug)]
pub struct PrefixCache {
    budget_bytes: usize,
    max_entries: usize,
    entries: Vec<Entry>,
    next_slot: u64,
    clock: u64,
}

impl PrefixCache {
    /// A cache holding at most `max_entries` states of at most `budget_bytes` in all.
    pub fn new(budget_bytes: usize, max_entries: usize) -> PrefixCache {
        PrefixCache {
            budget_bytes,
            max_entries,
            entries: Vec::new(),
            next_slot: 1,
            clock: 0,
        }
    }

    /// A slot id no entry uses.
    pub fn new_slot(&mut self) -> u64 {
        self.next_slot += 1;
        self.next_slot - 1
    }

    /// The longest saved state whose tokens are a strict prefix of `tokens` (at least one token
    /// is left to prefill, which gives the logits): `(slot, saved token count)`. Marks it used.
    pub fn lookup(&mut self, tokens: &[u32]) -> Option<(u64, usize)> {
        self.clock += 1;
        let clock = self.clock;
        let best = self
            .entries
            .iter_mut()
            .filter(|e| e.tokens.len() < tokens.len() && tokens.starts_with(&e.tokens))
            .max_by_key(|e| e.tokens.len())?;
        best.last_used = clock;
        Some((best.slot, best.tokens.len()))
    }

    /// Adds a saved state (replacing one of the same tokens) and evicts the least recently used
    /// until both budgets hold; returns the slots the caller must free (possibly the new one, if
    /// it alone is over the byte budget).
    pub fn insert(&mut self, tokens: Vec<u32>, slot: u64, bytes: usize) -> Vec<u64> {
        self.clock += 1;
        let mut freed = Vec::new();
        if let Some(i) = self.entries.iter().position(|e| e.tokens == tokens) {
            freed.push(self.entries.swap_remove(i).slot);
        }
        self.entries.push(Entry {
            tokens,
            slot,
            bytes,
            last_used: self.clock,
        });
        while !self.entries.is_empty()
            && (self.bytes() > self.budget_bytes || self.entries.len() > self.max_entries)
        {
            let (i, _) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .unwrap_or((0, &self.entries[0]));
            freed.push(self.entries.swap_remove(i).slot);
        }
        freed
    }

    /// Removes every entry; returns their slots.
    pub fn clear(&mut self) -> Vec<u64> {
        self.entries.drain(..).map(|e| e.slot).collect()
    }

    /// Bytes held by all entries.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_the_longest_strict_prefix() {
        let mut c = PrefixCache::new(1000, 10);
        let s1 = c.new_slot();
        let s2 = c.new_slot();
        assert!(c.insert(vec![1, 2], s1, 10).is_empty());
        assert!(c.insert(vec![1, 2, 3, 4], s2, 10).is_empty());
        assert_eq!(c.lookup(&[1, 2, 3, 4, 5]), Some((s2, 4)));
        assert_eq!(c.lookup(&[1, 2, 3]), Some((s1, 2)));
        // Equal length is not a hit: no token would be left to give logits.
        assert_eq!(c.lookup(&[1, 2]), None);
        assert_eq!(c.lookup(&[2, 2, 3]), None);
    }

    #[test]
    fn evicts_least_recently_used_under_the_byte_budget() {
        let mut c = PrefixCache::new(250, 10);
        let a = c.new_slot();
        let b = c.new_slot();
        let d = c.new_slot();
        c.insert(vec![1], a, 100);
        c.insert(vec![2], b, 100);
        // Touch `a`, so `b` is the oldest.
        assert!(c.lookup(&[1, 9]).is_some());
        assert_eq!(c.insert(vec![3], d, 100), vec![b]);
        assert!(c.bytes() <= 250);
        assert_eq!(c.len(), 2);
        // A state larger than the whole budget is not kept.
        let e = c.new_slot();
        let freed = c.insert(vec![4], e, 1000);
        assert!(freed.contains(&e));
        assert!(c.bytes() <= 250);
    }

    #[test]
    fn entry_budget_and_replacement() {
        let mut c = PrefixCache::new(usize::MAX, 2);
        let s: Vec<u64> = (0..4).map(|_| c.new_slot()).collect();
        c.insert(vec![1], s[0], 1);
        c.insert(vec![1], s[1], 1); // same tokens: the old slot is freed
        assert_eq!(c.len(), 1);
        c.insert(vec![2], s[2], 1);
        assert_eq!(c.insert(vec![3], s[3], 1), vec![s[1]]);
        assert_eq!(c.len(), 2);
    }
}
