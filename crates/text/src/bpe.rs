//! Byte-pair merging inside one word: start from one symbol per byte and repeatedly apply the
//! merge of lowest rank among adjacent pairs (leftmost first on ties, as HF tokenizers and
//! llama.cpp both do), until no adjacent pair has a merge.
//!
//! Short words (nearly all of them) keep their symbols and the merge of each adjacent pair in
//! two small arrays and scan for the lowest rank: one table lookup per pair, none repeated. Long
//! words use a binary heap of candidate pairs with lazy invalidation, so a word of n bytes costs
//! O(n log n), which matters for the long words the pre-tokenizer produces on text without
//! spaces (CJK, long identifiers). Both give the same ids (tests below, against the textbook
//! algorithm).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

/// The merge table: `(left id, right id)` -> `(rank, merged id)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Merges {
    map: FxHashMap<u64, (u32, u32)>,
}

fn key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl Merges {
    pub(crate) fn insert(&mut self, left: u32, right: u32, rank: u32, merged: u32) {
        // The first occurrence of a pair keeps its (lower) rank.
        self.map.entry(key(left, right)).or_insert((rank, merged));
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn get(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        self.map.get(&key(left, right)).copied()
    }
}

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    /// Index of the previous live symbol, `usize::MAX` at the start.
    prev: usize,
    /// Index of the next live symbol, `usize::MAX` at the end.
    next: usize,
}

const NONE: usize = usize::MAX;

/// Words up to this many bytes are merged by scanning (see the module comment).
const SCAN_MAX_BYTES: usize = 48;

/// Reusable buffers, so encoding many words allocates nothing per word.
#[derive(Default)]
pub(crate) struct Scratch {
    syms: Vec<Sym>,
    /// `(rank, left index, left id, right id)`, smallest first.
    heap: BinaryHeap<Reverse<(u32, usize, u32, u32)>>,
    /// The scan's symbols and, for each adjacent pair, `(rank, merged id)` (`u32::MAX` rank:
    /// no merge).
    ids: Vec<u32>,
    pairs: Vec<(u32, u32)>,
}

const NO_MERGE: (u32, u32) = (u32::MAX, u32::MAX);

/// [`merge_word`] for short words: find the lowest-rank pair (leftmost on ties), merge it,
/// look up only the two pairs it changed, repeat.
fn merge_scan(
    word: &[u8],
    byte_ids: &[u32; 256],
    merges: &Merges,
    scratch: &mut Scratch,
    out: &mut Vec<u32>,
) {
    let ids = &mut scratch.ids;
    let pairs = &mut scratch.pairs;
    ids.clear();
    pairs.clear();
    ids.extend(word.iter().map(|&b| byte_ids[usize::from(b)]));
    pairs.extend(
        ids.windows(2)
            .map(|w| merges.get(w[0], w[1]).unwrap_or(NO_MERGE)),
    );
    loop {
        let mut best = 0;
        let mut rank = u32::MAX;
        for (i, &(r, _)) in pairs.iter().enumerate() {
            if r < rank {
                rank = r;
                best = i;
            }
        }
        if rank == u32::MAX {
            break;
        }
        ids[best] = pairs[best].1;
        ids.remove(best + 1);
        pairs.remove(best);
        if best > 0 {
            pairs[best - 1] = merges.get(ids[best - 1], ids[best]).unwrap_or(NO_MERGE);
        }
        if best < pairs.len() {
            pairs[best] = merges.get(ids[best], ids[best + 1]).unwrap_or(NO_MERGE);
        }
    }
    out.extend_from_slice(ids);
}

/// Appends the ids of `word` to `out`. `byte_ids[b]` is the id of the single-byte token `b`.
pub(crate) fn merge_word(
    word: &[u8],
    byte_ids: &[u32; 256],
    merges: &Merges,
    scratch: &mut Scratch,
    out: &mut Vec<u32>,
) {
    match word.len() {
        0 => return,
        1 => {
            out.push(byte_ids[usize::from(word[0])]);
            return;
        }
        n if n <= SCAN_MAX_BYTES => return merge_scan(word, byte_ids, merges, scratch, out),
        _ => {}
    }
    merge_heap(word, byte_ids, merges, scratch, out);
}

/// [`merge_word`] for long words.
fn merge_heap(
    word: &[u8],
    byte_ids: &[u32; 256],
    merges: &Merges,
    scratch: &mut Scratch,
    out: &mut Vec<u32>,
) {
    let syms = &mut scratch.syms;
    let heap = &mut scratch.heap;
    syms.clear();
    heap.clear();
    let n = word.len();
    syms.extend(word.iter().enumerate().map(|(i, &b)| Sym {
        id: byte_ids[usize::from(b)],
        prev: if i == 0 { NONE } else { i - 1 },
        next: if i + 1 == n { NONE } else { i + 1 },
    }));
    for i in 0..n - 1 {
        let (l, r) = (syms[i].id, syms[i + 1].id);
        if let Some((rank, _)) = merges.get(l, r) {
            heap.push(Reverse((rank, i, l, r)));
        }
    }
    while let Some(Reverse((_, i, l, r))) = heap.pop() {
        // Skip stale candidates: either side has been merged since the pair was queued.
        let j = syms[i].next;
        if j == NONE || syms[i].id != l || syms[j].id != r {
            continue;
        }
        let Some((_, merged)) = merges.get(l, r) else {
            continue;
        };
        syms[i].id = merged;
        let k = syms[j].next;
        syms[i].next = k;
        if k != NONE {
            syms[k].prev = i;
        }
        // j is dead: no real id is u32::MAX, so a stale candidate starting at j never matches.
        syms[j].id = u32::MAX;
        syms[j].next = NONE;
        let p = syms[i].prev;
        if p != NONE
            && let Some((rank, _)) = merges.get(syms[p].id, merged)
        {
            heap.push(Reverse((rank, p, syms[p].id, merged)));
        }
        if k != NONE
            && let Some((rank, _)) = merges.get(merged, syms[k].id)
        {
            heap.push(Reverse((rank, i, merged, syms[k].id)));
        }
    }
    let mut i = 0;
    while i != NONE {
        out.push(syms[i].id);
        i = syms[i].next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte b has id b; merges listed in rank order produce ids from 256 up.
    fn table(merges: &[(u32, u32)]) -> ([u32; 256], Merges) {
        let mut ids = [0u32; 256];
        for (b, id) in ids.iter_mut().enumerate() {
            *id = b as u32;
        }
        let mut m = Merges::default();
        for (rank, &(l, r)) in merges.iter().enumerate() {
            m.insert(l, r, rank as u32, 256 + rank as u32);
        }
        (ids, m)
    }

    /// Through `merge_word`, and through both of its paths, which must agree.
    fn run(word: &[u8], ids: &[u32; 256], m: &Merges) -> Vec<u32> {
        let mut out = Vec::new();
        let mut scratch = Scratch::default();
        merge_word(word, ids, m, &mut scratch, &mut out);
        if word.len() >= 2 {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            merge_scan(word, ids, m, &mut scratch, &mut a);
            merge_heap(word, ids, m, &mut scratch, &mut b);
            assert_eq!(a, out, "scan, word {word:?}");
            assert_eq!(b, out, "heap, word {word:?}");
        }
        out
    }

    /// The textbook algorithm: find the lowest-rank adjacent pair (leftmost on ties), merge it,
    /// repeat. Quadratic, obviously right.
    fn naive(word: &[u8], ids: &[u32; 256], m: &Merges) -> Vec<u32> {
        let mut s: Vec<u32> = word.iter().map(|&b| ids[usize::from(b)]).collect();
        loop {
            let best = (0..s.len().saturating_sub(1))
                .filter_map(|i| m.get(s[i], s[i + 1]).map(|(r, t)| (r, i, t)))
                .min();
            let Some((_, i, t)) = best else { return s };
            s[i] = t;
            s.remove(i + 1);
        }
    }

    #[test]
    fn leftmost_on_ties() {
        let a = u32::from(b'a');
        let (ids, m) = table(&[(a, a)]);
        assert_eq!(run(b"aaa", &ids, &m), [256, a]);
        assert_eq!(run(b"aaaa", &ids, &m), [256, 256]);
    }

    #[test]
    fn heap_agrees_with_naive_on_random_tables() {
        // A small deterministic generator: fresh tables and words on every case.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..2000 {
            let alphabet = 2 + (next() % 4) as u8;
            let mut merges = Vec::new();
            let mut have: Vec<u32> = (0..u32::from(alphabet))
                .map(|c| u32::from(b'a') + c)
                .collect();
            for _ in 0..(next() % 12) {
                let l = have[(next() as usize) % have.len()];
                let r = have[(next() as usize) % have.len()];
                merges.push((l, r));
                have.push(256 + merges.len() as u32 - 1);
            }
            let (ids, m) = table(&merges);
            let len = 1 + (next() % 80) as usize;
            let word: Vec<u8> = (0..len)
                .map(|_| b'a' + (next() % u64::from(alphabet)) as u8)
                .collect();
            assert_eq!(
                run(&word, &ids, &m),
                naive(&word, &ids, &m),
                "word {word:?} merges {merges:?}"
            );
        }
    }
}
